/*
 * gguf-merge: merge a split GGUF set into one file, or split a model into a
 * set. Flags follow llama.cpp's llama-gguf-split where they overlap. The work
 * (validation, plans, copies, digests) is in libgguf (gguf/split.h).
 */
#include "cli.h"
#include "gguf/file.h"
#include "gguf/hash.h"
#include "gguf/split.h"

#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *TOOL = "gguf-merge";

enum {
    OPT_MERGE = 300,
    OPT_SPLIT,
    OPT_MAX_TENSORS,
    OPT_MAX_SIZE,
    OPT_NO_TENSOR_FIRST,
    OPT_DRY_RUN,
    OPT_VERIFY,
    OPT_MANIFEST,
    OPT_DELETE,
    OPT_JSON,
    OPT_THREADS,
    OPT_NO_SYNC,
    OPT_LAYOUT,
};

static const cli_opt OPTS[] = {
    {OPT_MERGE, "merge", 0, NULL, "merge the split set that INPUT belongs to into OUTPUT"},
    {OPT_SPLIT, "split", 0, NULL, "split INPUT into OUTPUT-00001-of-0000N.gguf ... (default)"},
    {OPT_MAX_TENSORS, "split-max-tensors", 1, "N", "at most N tensors per part (default 128)"},
    {OPT_MAX_SIZE, "split-max-size", 1, "SIZE",
     "at most SIZE bytes per part file, headers and padding included; K M G T are powers "
     "of 1000 as in llama-gguf-split, KiB MiB GiB TiB of 1024 (1.5G, 48GiB)"},
    {OPT_NO_TENSOR_FIRST, "no-tensor-first-split", 0, NULL,
     "put only the metadata in the first part"},
    {OPT_LAYOUT, "layout", 1, "NAME",
     "merged tensor data: 'contiguous' (default; what llama.cpp loads) or 'aligned' (each "
     "part keeps its offset modulo 2 MiB: aligned kernel copies, XFS/btrfs share the blocks; "
     "llama.cpp refuses such a file, gguf-py and ggufkit read it)"},
    {OPT_DRY_RUN, "dry-run", 0, NULL, "read the headers, check the outputs, print the plan"},
    {'f', "force", 0, NULL, "replace existing outputs (never an input)"},
    {OPT_VERIFY, "verify", 0, NULL,
     "after writing, compare every tensor's XXH3-128 digest with the input's"},
    {OPT_MANIFEST, "manifest", 1, "FILE.json",
     "write per-tensor, model and per-file XXH3-128 digests as JSON"},
    {OPT_DELETE, "delete-inputs", 0, NULL,
     "delete the input parts once the output is written, synced and verified"},
    {OPT_DELETE, "delete-splits", 0, NULL,
     "llama-gguf-split's name for --delete-inputs (here with the safe ordering)"},
    {OPT_JSON, "json", 0, NULL, "print the plan or the result as JSON on stdout"},
    {OPT_THREADS, "threads", 1, "N", "digest threads (default: one per CPU it may use)"},
    {OPT_NO_SYNC, "no-sync", 0, NULL, "skip fsync (scratch files only)"},
    {0, NULL, 0, NULL, NULL},
};

static const cli_spec SPEC = {
    .tool = "gguf-merge",
    .usage = "[--merge | --split] [OPTIONS] INPUT OUTPUT",
    .summary =
        "Merge a split GGUF set (any part may be named) into one file, or split a model into\n"
        "PREFIX-NNNNN-of-MMMMM.gguf parts. The whole set is validated before a byte is written;\n"
        "outputs are written to a temporary file, fsynced and renamed, so a failure or an\n"
        "interrupt leaves no output and the inputs untouched.",
    .opts = OPTS,
    .examples =
        "  gguf-merge --merge GLM-5-UD-Q4_K_XL-00001-of-00010.gguf GLM-5.gguf\n"
        "  gguf-merge --merge --verify --manifest glm5.json model-00003-of-00010.gguf model.gguf\n"
        "  gguf-merge --merge --layout aligned m-00001-of-00004.gguf /xfs/m.gguf   # reflinks\n"
        "  gguf-merge --split --split-max-size 50G model.gguf out/model\n"
        "  gguf-merge --split --split-max-tensors 64 --no-tensor-first-split --dry-run m.gguf m\n",
};

static volatile sig_atomic_t g_cancel;

static void on_signal(int sig)
{
    (void)sig;
    g_cancel = 1;
}

typedef struct progress_ctx {
    cli_progress bar;
    int phase;
    bool started;
} progress_ctx;

static void on_progress(void *ctx, int phase, uint64_t done, uint64_t total)
{
    progress_ctx *pc = ctx;
    if (!pc->started || pc->phase != phase) {
        if (pc->started)
            cli_progress_end(&pc->bar);
        cli_progress_start(&pc->bar, phase == GGUF_SPLIT_PHASE_COPY ? "writing" : "verifying",
                           total);
        pc->phase = phase;
        pc->started = true;
    }
    cli_progress_update(&pc->bar, done);
}

static void print_plan_text(const gguf_set *in, const gguf_split_plan *p, const char *input)
{
    char hb[32];
    printf("%s: %s (%u part%s, %lld tensors) -> %u output%s, %llu bytes (%s)\n",
           p->kind == GGUF_PLAN_MERGE ? "merge" : "split", input, gguf_set_part_count(in),
           gguf_set_part_count(in) == 1 ? "" : "s", (long long)p->n_tensors, p->n_parts,
           p->n_parts == 1 ? "" : "s", (unsigned long long)p->total_size,
           cli_human_bytes(p->total_size, hb, sizeof hb));
    if (p->layout == GGUF_LAYOUT_ALIGNED)
        printf("  layout aligned: each part's data keeps its offset modulo %u bytes\n", p->block);
    for (uint32_t k = 0; k < p->n_parts; k++)
        printf("  %s: %lld tensors, %llu bytes (header %llu)\n", p->parts[k].path,
               (long long)p->parts[k].count, (unsigned long long)p->parts[k].size,
               (unsigned long long)p->parts[k].header_size);
}

/* Appends v to *a; out of memory, both are freed and *a becomes NULL, so that a report
 * with an element missing is never printed. */
static void append(json_t **a, json_t *v)
{
    if (json_array_append_new(*a, v) != 0) {
        json_decref(*a);
        *a = NULL;
    }
}

/* Sets key in *o the same way. */
static void set(json_t **o, const char *key, json_t *v)
{
    if (json_object_set_new(*o, key, v) != 0) {
        json_decref(*o);
        *o = NULL;
    }
}

/* The plan, and after a run what it did (r). Sizes are file sizes: int64 holds them.
 * @return 0, or -1 out of memory or when the write failed. */
static int print_json(const gguf_set *in, const gguf_split_plan *p, const gguf_split_report *r,
                      bool dry_run)
{
    json_t *inputs = json_array(), *outputs = json_array();
    for (uint32_t i = 0; inputs && i < gguf_set_part_count(in); i++)
        append(&inputs, cli_json_text(gguf_file_path(gguf_set_part(in, i)), SIZE_MAX));
    for (uint32_t k = 0; outputs && k < p->n_parts; k++)
        append(&outputs, json_pack("{s:o, s:I, s:I, s:I, s:I}",
            "path", cli_json_text(p->parts[k].path, SIZE_MAX),
            "tensors", (json_int_t)p->parts[k].count, "first", (json_int_t)p->parts[k].first,
            "size", (json_int_t)p->parts[k].size, "header_size", (json_int_t)p->parts[k].header_size));
    json_t *doc = json_pack("{s:s, s:b, s:o, s:I, s:I, s:s, s:o, s:o}",
        "operation", p->kind == GGUF_PLAN_MERGE ? "merge" : "split", "dry_run", dry_run,
        "inputs", inputs, "tensors", (json_int_t)p->n_tensors,
        "total_size", (json_int_t)p->total_size, "layout", gguf_merge_layout_name(p->layout),
        "layout_block", p->layout == GGUF_LAYOUT_ALIGNED ? json_integer(p->block) : json_null(),
        "outputs", outputs);
    if (r) {
        /* Only a verification has a verification time: a manifest without
         * --verify reads the outputs back too, reported as seconds_digest. */
        set(&doc, "seconds_write", cli_json_number(r->seconds_copy));
        set(&doc, "seconds_verify", r->verified ? cli_json_number(r->seconds_verify) : json_null());
        set(&doc, "seconds_digest", r->verified || r->have_digests
                                        ? cli_json_number(r->seconds_digest)
                                        : json_null());
        set(&doc, "copy_ranges", json_integer((json_int_t)r->n_ranges));
        set(&doc, "verified", json_boolean(r->verified));
        set(&doc, "deleted_inputs", json_integer(r->n_deleted));
        if (r->have_digests) {
            char hex[GGUF_DIGEST_HEX];
            set(&doc, "model_digest", json_string(gguf_digest_hex(&r->model_digest, hex)));
        }
    }
    return cli_json_print_report(stdout, "gguf-merge", doc);
}

int main(int argc, char **argv)
{
    bool merge = false, split = false, dry_run = false, json = false, layout_set = false;
    gguf_split_limits lim = {0};
    gguf_merge_opts mo = {0};
    gguf_split_job_opts jo = {0};
    const char *manifest = NULL;
    const char *arg;
    int optind_ = 1, c;
    while ((c = cli_next(&SPEC, argc, argv, &arg, &optind_)) != -1) {
        switch (c) {
        case OPT_MERGE: merge = true; break;
        case OPT_SPLIT: split = true; break;
        case OPT_MAX_TENSORS:
            if (cli_parse_u64(arg, &lim.max_tensors) || !lim.max_tensors) {
                cli_errorf(TOOL, "--split-max-tensors: '%s' is not a positive integer", arg);
                return CLI_EXIT_USAGE;
            }
            break;
        case OPT_MAX_SIZE:
            if (cli_parse_split_size(arg, &lim.max_size)) {
                cli_errorf(TOOL, "--split-max-size: '%s' is not a size (e.g. 500M, 1.5G, 48GiB)",
                           arg);
                return CLI_EXIT_USAGE;
            }
            break;
        case OPT_NO_TENSOR_FIRST: lim.no_tensor_first_split = true; break;
        case OPT_DRY_RUN: dry_run = true; break;
        case 'f': jo.overwrite = true; break;
        case OPT_VERIFY: jo.verify = true; break;
        case OPT_MANIFEST: manifest = arg; break;
        case OPT_DELETE: jo.delete_inputs = true; break;
        case OPT_JSON: json = true; break;
        case OPT_THREADS: {
            uint64_t n;
            if (cli_parse_u64(arg, &n) || n > 64) {
                cli_errorf(TOOL, "--threads: '%s' is not a number from 0 to 64", arg);
                return CLI_EXIT_USAGE;
            }
            jo.n_threads = (int)n;
            break;
        }
        case OPT_NO_SYNC: jo.no_sync = true; break;
        case OPT_LAYOUT:
            if (strcmp(arg, "contiguous") == 0) {
                mo.layout = GGUF_LAYOUT_CONTIGUOUS;
            } else if (strcmp(arg, "aligned") == 0) {
                mo.layout = GGUF_LAYOUT_ALIGNED;
            } else {
                cli_errorf(TOOL, "--layout: '%s' is not 'contiguous' or 'aligned'", arg);
                return CLI_EXIT_USAGE;
            }
            layout_set = true;
            break;
        default: return CLI_EXIT_USAGE;
        }
    }
    if (merge && split) {
        cli_errorf(TOOL, "--merge and --split exclude each other");
        return CLI_EXIT_USAGE;
    }
    if (argc - optind_ != 2) {
        cli_errorf(TOOL, "expected INPUT and OUTPUT, got %d argument%s%s", argc - optind_,
                   argc - optind_ == 1 ? "" : "s",
                   argc - optind_ > 2 ? " (a shell glob? name any one part of the set)" : "");
        fprintf(stderr, "Try '%s --help'.\n", TOOL);
        return CLI_EXIT_USAGE;
    }
    if (merge && (lim.max_tensors || lim.max_size || lim.no_tensor_first_split)) {
        cli_errorf(TOOL, "--split-max-tensors, --split-max-size and --no-tensor-first-split "
                         "apply to --split only");
        return CLI_EXIT_USAGE;
    }
    if (!merge && layout_set) {
        cli_errorf(TOOL, "--layout applies to --merge only (split parts are always contiguous)");
        return CLI_EXIT_USAGE;
    }
    const char *input = argv[optind_], *output = argv[optind_ + 1];
    jo.digests = manifest != NULL;

    /* Interrupts (SIGINT, SIGTERM, SIGHUP) only raise a flag: the library then
     * removes its temporary files. SIGXFSZ ignored: RLIMIT_FSIZE then gives
     * EFBIG, a clean "disk full". */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL); /* a closed terminal or SSH session */
    signal(SIGXFSZ, SIG_IGN);
    jo.cancel = &g_cancel;

    gguf_error err;
    gguf_set *set = NULL;
    gguf_split_plan *plan = NULL;
    gguf_split_report *rep = NULL;
    progress_ctx pc = {0};
    bool json_failed = false;
    int rc = gguf_split_open_input(&set, input, &err);
    if (rc)
        goto done;
    if (merge)
        rc = gguf_merge_plan_opts(&plan, set, output, &mo, &err);
    else
        rc = gguf_split_plan_create(&plan, set, output, &lim, &err);
    if (!rc && manifest)
        rc = gguf_split_check_manifest(manifest, set, plan, jo.overwrite, &err);
    if (rc)
        goto done;
    if (dry_run) {
        rc = gguf_split_check_outputs(set, plan, jo.overwrite, &err);
        if (json)
            json_failed = print_json(set, plan, NULL, true) != 0;
        else if (cli_verbosity > 0)
            print_plan_text(set, plan, input);
        goto done;
    }
    if (cli_verbosity > 1)
        print_plan_text(set, plan, input);
    jo.progress = on_progress;
    jo.progress_ctx = &pc;
    rc = gguf_split_execute(set, plan, &jo, &rep, &err);
    if (pc.started)
        cli_progress_end(&pc.bar);
    if (rc)
        goto done;
    if (manifest && (rc = gguf_split_manifest_write(manifest, set, plan, rep, jo.overwrite, &err)))
        goto done;
    if (json) {
        json_failed = print_json(set, plan, rep, false) != 0;
    } else if (cli_verbosity > 0) {
        char hb[32];
        double mbs = rep->seconds_copy > 0 ? (double)plan->total_size / rep->seconds_copy / 1e6
                                           : 0;
        if (merge)
            printf("merged %u part%s (%lld tensors, %s) into %s in %.2f s (%.0f MB/s)\n",
                   gguf_set_part_count(set), gguf_set_part_count(set) == 1 ? "" : "s",
                   (long long)plan->n_tensors, cli_human_bytes(plan->total_size, hb, sizeof hb),
                   output, rep->seconds_copy, mbs);
        else
            printf("split %s (%lld tensors, %s) into %u parts %s-00001-of-%05u.gguf ... in "
                   "%.2f s (%.0f MB/s)\n",
                   input, (long long)plan->n_tensors,
                   cli_human_bytes(plan->total_size, hb, sizeof hb), plan->n_parts, output,
                   plan->n_parts, rep->seconds_copy, mbs);
        if (rep->verified)
            printf("verified %lld tensors (XXH3-128) in %.2f s\n", (long long)plan->n_tensors,
                   rep->seconds_verify);
        if (manifest)
            printf("manifest %s (model digest %s)\n", manifest,
                   gguf_digest_hex(&rep->model_digest, (char[GGUF_DIGEST_HEX]){0}));
        if (rep->n_deleted)
            printf("deleted %u input part%s\n", rep->n_deleted, rep->n_deleted == 1 ? "" : "s");
    }
done:
    if (rc)
        cli_error(TOOL, &err);
    if (json_failed)
        cli_errorf(TOOL, "cannot write the JSON report");
    gguf_split_report_free(rep);
    gguf_split_plan_free(plan);
    gguf_set_free(set);
    return rc ? cli_exit_code(rc) : json_failed ? CLI_EXIT_ENV : CLI_EXIT_OK;
}
