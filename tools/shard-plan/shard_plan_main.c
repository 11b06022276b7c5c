/* shard-plan: show, check and write how a model is sliced over tensor/expert-parallel ranks. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "gguf/file.h"
#include "gguf/model.h"
#include "gguf/shard.h"
#include "gguf/shard_dump.h"
#include "shard_plan_tool.h"

#include <errno.h>
#include <jansson.h>
#include <sys/stat.h>

enum {
    OPT_TP = 't',
    OPT_EP = 'e',
    OPT_ENGINE = 256,
    OPT_JSON,
    OPT_WRITE,
    OPT_FAULT,
    OPT_FAULT_LAYER,
    OPT_VOCAB_PAD,
    OPT_STRICT,
    OPT_FILTER,
    OPT_FORCE,
    OPT_LIST_FAULTS,
    OPT_DUMP_FORMAT,
};

static const cli_opt OPTS[] = {
    {OPT_TP, "tp", 1, "N", "tensor-parallel ranks (required)"},
    {OPT_EP, "ep", 1, "M", "expert-parallel size (vllm: equal to --tp; sglang: divides --tp)"},
    {OPT_ENGINE, "engine", 1, "NAME", "vllm (default) or sglang"},
    {OPT_JSON, "json", 0, NULL, "the whole plan as JSON (schema in docs/shard-plan.md)"},
    {OPT_WRITE, "write-shards", 1, "DIR",
     "write DIR/rank-RR-of-NN.gguf per rank and DIR/manifest.txt (XXH3-128 digests)"},
    {OPT_DUMP_FORMAT, "dump-format", 1, "gguf|vllm",
     "--write-shards as rank GGUFs (default) or as vLLM's sharded state "
     "(DIR/model-rank-R-part-0.safetensors, engine names, BF16)"},
    {OPT_FORCE, "force", 0, NULL, "replace existing shard files"},
    {OPT_FAULT, "fault", 1, "FAULT[@LAYER]",
     "inject a fault of the catalog, in every block or block LAYER only (repeatable)"},
    {OPT_FAULT_LAYER, "fault-layer", 1, "N",
     "old spelling: block N for every --fault without its own @LAYER"},
    {OPT_LIST_FAULTS, "list-faults", 0, NULL, "list the fault catalog and exit"},
    {OPT_VOCAB_PAD, "vocab-pad", 1, "N", "vocabulary padding multiple (default 64)"},
    {OPT_FILTER, "filter", 1, "REGEX", CLI_FILTER_HELP},
    {OPT_STRICT, "strict", 0, NULL, "exit 1 on warnings too (quantized cuts needing dequant)"},
    {0, NULL, 0, NULL, NULL},
};

static const cli_spec SPEC = {
    .tool = SP_TOOL,
    .usage = "MODEL.gguf --tp N [--ep M] [--engine vllm|sglang] [OPTIONS]\n"
             "       shard-plan check-dump MODEL.gguf DUMP_DIR --tp N [--ep M] [--engine E] [--json]",
    .summary =
        "Show how a serving engine slices every tensor of MODEL (a file, or any part of a split\n"
        "set) over N tensor-parallel ranks: the rule, the dimension, the range each rank holds,\n"
        "its shape and bytes, and whether the slice can be cut from the quantized bytes. Checks\n"
        "divisibility of heads, kv heads, FFN and expert widths and vocabulary, block alignment\n"
        "of quantized inner cuts, experts over ep, missing and unconsumed tensors; totals the\n"
        "bytes per rank. -v prints every rank of every tensor.",
    .opts = OPTS,
    .examples = "  shard-plan glm5.gguf --tp 8\n"
                "  shard-plan glm5-00001-of-00010.gguf --tp 8 --ep 8 --engine sglang --json\n"
                "  shard-plan model.gguf --tp 2 --write-shards shards/\n"
                "  shard-plan model.gguf --tp 8 --fault kv-b-whole --json > broken-plan.json\n"
                "  shard-plan model.gguf --tp 8 --fault rope-pairs@3 --write-shards broken/\n"
                "  shard-plan --list-faults\n"
                "  shard-plan model.gguf --tp 2 --fault qkv-stream --write-shards d --dump-format vllm\n"
                "  shard-plan check-dump model.gguf d --tp 2   (see shard-plan check-dump --help)\n",
};

static volatile sig_atomic_t g_cancel;

static void on_signal(int sig)
{
    (void)sig;
    g_cancel = 1;
}

/* The fault catalog: a line each, or JSON: {tool, version, faults: [{name, kind, summary}]}.
 * @return the exit code: 3 when the list cannot be built or written. */
static int print_faults(bool json)
{
    json_t *all = json ? json_array() : NULL;
    for (int f = 1; f < GGUF_FAULT_COUNT; f++) {
        const char *kind = gguf_fault_is_config((gguf_fault)f) ? "config" : "weights";
        if (!json) {
            printf("%-20s %-7s %s\n", gguf_fault_name((gguf_fault)f), kind,
                   gguf_fault_summary((gguf_fault)f));
            continue;
        }
        if (json_array_append_new(all, json_pack("{s:o, s:s, s:o}",
                "name", cli_json_text(gguf_fault_name((gguf_fault)f), SIZE_MAX), "kind", kind,
                "summary", cli_json_text(gguf_fault_summary((gguf_fault)f), SIZE_MAX))) != 0) {
            json_decref(all); /* never a list with a fault missing */
            all = NULL;
        }
    }
    const int rc = json ? cli_json_print_report(stdout, SP_TOOL, json_pack("{s:o}", "faults", all))
                        : fflush(stdout);
    if (rc != 0) {
        cli_errorf(SP_TOOL, "cannot write the fault list");
        return CLI_EXIT_ENV;
    }
    return CLI_EXIT_OK;
}

static int parse_int(const char *opt, const char *s, long long lo, long long hi, long long *out)
{
    uint64_t v;
    if (cli_parse_u64(s, &v) != 0 || (long long)v < lo || (long long)v > hi) {
        cli_errorf(SP_TOOL, "%s: '%s' is not a number in %lld..%lld", opt, s, lo, hi);
        return -1;
    }
    *out = (long long)v;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "check-dump"))
        return sp_check_dump_main(argc - 1, argv + 1);
    sp_args a;
    memset(&a, 0, sizeof a);
    a.opts.engine = GGUF_ENGINE_VLLM;
    a.fault_layer = -1;
    const char *arg;
    int optind_ = 1, c;
    long long v;
    bool have_tp = false;
    const char *pos[8];
    int n_pos = 0;
    bool list_faults = false;
    for (;;) {
        c = cli_next(&SPEC, argc, argv, &arg, &optind_);
        if (c == -1) {
            /* getopt has permuted every option before the positionals: they are the rest
             * (setting optind past one of them would make glibc rewind to it) */
            for (; optind_ < argc; optind_++) {
                if (n_pos < 8)
                    pos[n_pos] = argv[optind_];
                n_pos++;
            }
            break;
        }
        switch (c) {
        case OPT_TP:
            if (parse_int("--tp", arg, 1, 4096, &v))
                return CLI_EXIT_USAGE;
            a.opts.tp = (int)v;
            have_tp = true;
            break;
        case OPT_EP:
            if (parse_int("--ep", arg, 1, 4096, &v))
                return CLI_EXIT_USAGE;
            a.opts.ep = (int)v;
            break;
        case OPT_ENGINE:
            if (gguf_engine_from_name(arg, &a.opts.engine) != 0) {
                cli_errorf(SP_TOOL, "--engine: '%s' is not vllm or sglang", arg);
                return CLI_EXIT_USAGE;
            }
            break;
        case OPT_JSON:
            a.json = true;
            break;
        case OPT_WRITE:
            a.shards_dir = arg;
            break;
        case OPT_FORCE:
            a.force = true;
            break;
        case OPT_DUMP_FORMAT:
            if (strcmp(arg, "vllm") && strcmp(arg, "gguf")) {
                cli_errorf(SP_TOOL, "--dump-format: '%s' is not gguf or vllm", arg);
                return CLI_EXIT_USAGE;
            }
            a.dump_vllm = !strcmp(arg, "vllm");
            break;
        case OPT_FAULT:
            if (a.n_faults == SP_MAX_FAULTS) {
                cli_errorf(SP_TOOL, "--fault: at most %d faults", SP_MAX_FAULTS);
                return CLI_EXIT_USAGE;
            }
            {
                gguf_error ferr;
                if (gguf_fault_parse(arg, &a.faults[a.n_faults], &a.fault_layers[a.n_faults],
                                     &ferr) != 0) {
                    cli_errorf(SP_TOOL, "--fault: %s", ferr.message);
                    return CLI_EXIT_USAGE;
                }
                if (a.faults[a.n_faults] == GGUF_FAULT_NONE) {
                    cli_errorf(SP_TOOL, "--fault: unknown fault '%s' (see --list-faults)", arg);
                    return CLI_EXIT_USAGE;
                }
            }
            a.fault_specs[a.n_faults++] = arg;
            break;
        case OPT_FAULT_LAYER:
            if (parse_int("--fault-layer", arg, 0, 100000, &v))
                return CLI_EXIT_USAGE;
            a.fault_layer = v;
            break;
        case OPT_LIST_FAULTS:
            list_faults = true; /* after every option: --json may follow */
            break;
        case OPT_VOCAB_PAD:
            if (parse_int("--vocab-pad", arg, 1, 1 << 20, &v))
                return CLI_EXIT_USAGE;
            a.opts.vocab_pad = (int)v;
            break;
        case OPT_STRICT:
            a.strict = true;
            break;
        case OPT_FILTER:
            if (cli_filter_set(&a.filter, SP_TOOL, arg))
                return CLI_EXIT_USAGE;
            break;
        default:
            return CLI_EXIT_USAGE;
        }
    }
    a.verbose = cli_verbosity >= 2;
    if (list_faults)
        return print_faults(a.json);
    if (n_pos != 1) {
        cli_errorf(SP_TOOL, "%s", n_pos == 0 ? "missing MODEL (see --help)"
                                             : "one MODEL only (see --help)");
        return CLI_EXIT_USAGE;
    }
    if (!have_tp) {
        cli_errorf(SP_TOOL, "--tp N is required (see --help)");
        return CLI_EXIT_USAGE;
    }
    a.model = pos[0];

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    int rc = 0, exit_code = CLI_EXIT_OK;
    gguf_error err;
    gguf_set *set = NULL;
    gguf_model *m = NULL;
    gguf_shard_plan *p = NULL;
    if ((rc = gguf_set_open(&set, a.model, NULL, &err)) != 0 ||
        (rc = gguf_model_open_flags(&m, set, GGUF_MODEL_ALLOW_MISSING, &err)) != 0 ||
        (rc = gguf_shard_plan_create(&p, m, &a.opts, &err)) != 0) {
        cli_error(SP_TOOL, &err);
        exit_code = cli_exit_code(rc);
        goto done;
    }
    for (int k = 0; k < a.n_faults; k++) {
        const int64_t layer = a.fault_layers[k] >= 0 ? a.fault_layers[k] : a.fault_layer;
        if ((rc = gguf_shard_apply_fault(p, a.faults[k], layer, &err)) != 0) {
            cli_error(SP_TOOL, &err);
            exit_code = cli_exit_code(rc);
            goto done;
        }
    }
    if (a.json) {
        if (sp_print_json(stdout, p, &a) != 0) {
            cli_errorf(SP_TOOL, "cannot write the JSON report");
            exit_code = CLI_EXIT_ENV;
            goto done;
        }
    } else if (cli_verbosity > 0 || !a.shards_dir) {
        sp_print_text(stdout, p, &a);
    }
    if (a.filter.set && (a.json || cli_verbosity > 0 || !a.shards_dir)) {
        for (int64_t i = 0; i < gguf_shard_plan_count(p); i++)
            cli_filter_match(&a.filter, gguf_shard_plan_at(p, i)->name);
        fflush(stdout); /* the warning after the report, in a terminal too */
        cli_filter_warn_empty(&a.filter, SP_TOOL, (long long)gguf_shard_plan_count(p));
    }
    if (fflush(stdout) != 0) {
        cli_errorf(SP_TOOL, "cannot write the report to stdout");
        exit_code = CLI_EXIT_ENV;
        goto done;
    }
    if (a.shards_dir) {
        /* an impossible plan (heads not divisible, tensors missing...) has no shards to write;
         * injected faults are errors too, but their shards are the point */
        int64_t n_err = 0;
        for (int64_t i = 0; i < gguf_shard_plan_check_count(p); i++) {
            const gguf_shard_check *ck = gguf_shard_plan_check_at(p, i);
            if (ck->level == GGUF_CHECK_ERROR && strcmp(ck->code, "fault") != 0)
                n_err++;
        }
        if (n_err) {
            cli_errorf(SP_TOOL, "%s: the plan has %lld error(s) (see the checks): no shards written",
                       a.model, (long long)n_err);
            exit_code = CLI_EXIT_DIFF;
            goto done;
        }
        if (a.dump_vllm) {
            if (mkdir(a.shards_dir, 0777) != 0 && errno != EEXIST) {
                cli_errorf(SP_TOOL, "%s: %s", a.shards_dir, strerror(errno));
                exit_code = CLI_EXIT_ENV;
                goto done;
            }
            rc = gguf_dump_write_vllm(p, a.shards_dir, a.force, &err);
        } else {
            rc = sp_write_shards(p, &a, &g_cancel, &err);
        }
        if (rc != 0) {
            cli_error(SP_TOOL, &err);
            exit_code = cli_exit_code(rc);
            goto done;
        }
    }
    /* A plan with an error exits 1, and an injected fault is an error of the plan (the
     * checker must catch it). Once --write-shards has written the faulty shards it was asked
     * for, that fault is the request, not a finding: exit 0 (the check is still printed). */
    int64_t n_err = 0;
    for (int64_t i = 0; i < gguf_shard_plan_check_count(p); i++) {
        const gguf_shard_check *ck = gguf_shard_plan_check_at(p, i);
        if (ck->level == GGUF_CHECK_ERROR && !(a.shards_dir && !strcmp(ck->code, "fault")))
            n_err++;
    }
    if (n_err > 0 || (a.strict && gguf_shard_plan_check_worst(p, GGUF_CHECK_WARN) >
                                      gguf_shard_plan_check_worst(p, GGUF_CHECK_ERROR)))
        exit_code = CLI_EXIT_DIFF;
done:
    cli_filter_free(&a.filter);
    gguf_shard_plan_free(p);
    gguf_model_free(m);
    gguf_set_free(set);
    return exit_code;
}
