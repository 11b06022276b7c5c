/* ref-forward run: the options, and what to print. The work is the
 * library's: gguf_fwd_generate (gguf/forward.h), the recorder (gguf/run.h),
 * shard plans and faults (gguf/shard.h), .npy (gguf/npy.h), models over HF
 * checkpoints (gguf_model_open_hf, gguf/model.h); comparing and reporting
 * records is refwd_compare.c's, GPU ranks refwd_gputp.c's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "gguf/forward.h"
#include "gguf/hash.h"
#include "gguf/model.h"
#include "gguf/npy.h"
#include "gguf/run.h"
#include "gguf/shard.h"
#include "gguf/tokenize.h"
#include "refwd_backend.h"
#include "refwd_compare.h"
#include "refwd_gputp.h"
#include "ref_forward.h"
#include "refwd_json.h"

enum {
    OPT_TOKENS = 256,
    OPT_JSON,
    OPT_LOGITS,
    OPT_PRECISION,
    OPT_MLA,
    OPT_THREADS,
    OPT_RECORD,
    OPT_ZSTD,
    OPT_BOS,
    OPT_DENSE_INDEXER,
    OPT_TOPK,
    OPT_STATS,
    OPT_TP,
    OPT_EP,
    OPT_ENGINE,
    OPT_INJECT,
    OPT_COMPARE,
    OPT_TOL,
    OPT_HTML,
    OPT_BACKEND,
    OPT_PROMPT,
    OPT_HOST_REGISTER,
    OPT_GPU_MEM,
    OPT_VOCAB,
    OPT_ANY_MODEL,
    OPT_NO_BOS,
    OPT_NO_SPECIAL,
};

static const cli_opt options[] = {
    {OPT_TOKENS, "tokens", 1, "IDS", "input token ids, comma-separated (default: BOS)"},
    {OPT_PROMPT, "prompt", 1, "TEXT", "input text, tokenized with the model's vocabulary (SPM, "
     "byte-level BPE, WPM: docs/tokenize.md): BOS/EOS as its metadata says, special tokens "
     "written in the text recognised; excludes --tokens"},
    {OPT_VOCAB, "vocab", 1, "FILE.gguf", "take the vocabulary (--prompt, BOS/EOS, the text of "
     "generated ids) from this GGUF, e.g. an HF checkpoint's conversion"},
    {'n', "n-predict", 1, "K", "greedy-decode K tokens after the input (default 0)"},
    {OPT_BOS, "bos", 0, NULL, "prepend the model's BOS token to --tokens or --prompt"},
    {OPT_NO_BOS, "no-bos", 0, NULL, "--prompt: no BOS, whatever the metadata says"},
    {OPT_NO_SPECIAL, "no-special", 0, NULL, "--prompt: special tokens in the text are plain text"},
    {OPT_JSON, "json", 0, NULL, "machine-readable output (schema: docs/ref-forward.md)"},
    {OPT_LOGITS, "logits", 1, "OUT.npy", "write float32 [n_tokens, n_vocab] logits of every position"},
    {OPT_RECORD, "record", 1, "OUT.gguf", "write every capture point as an activation record"},
    {OPT_ZSTD, "zstd", 0, NULL, "zstd-compress the --record file"},
    {OPT_PRECISION, "precision", 1, "f32|f64", "f32 compute with f64 sums (default; f64 with --tp), "
     "or all f64"},
    {OPT_MLA, "mla", 1, "plain|absorbed", "MLA attention: kv_b expanded per head (default) or absorbed"},
    {OPT_DENSE_INDEXER, "dense-indexer", 0, NULL, "glm-dsa: attend to every key (ignore the indexer)"},
    {OPT_TOPK, "indexer-top-k", 1, "K", "glm-dsa: override the indexer's top-k"},
    {OPT_BACKEND, "backend", 1, "cpu|cuda", "where the forward runs: the CPU reference (default) or "
     "one GPU (f32; records and --compare as for the CPU); with --tp N, N GPUs over NCCL"},
    {OPT_HOST_REGISTER, "host-register", 1, "auto|on|off",
     "--backend cuda (and its --tp ranks): lock the model's pages in place for the GPU's copy "
     "engine (auto: when the files fit in half the RAM)"},
    {OPT_GPU_MEM, "gpu-mem-limit", 1, "SIZE", "--backend cuda: device memory the forward may hold "
     "(e.g. 2G): weights stream through chunks sized to fit; exit 3 when even one layer "
     "cannot"},
    {OPT_THREADS, "threads", 1, "N", "threads for matmuls, attention and SwiGLU (default 1)"},
    {OPT_STATS, "stats", 0, NULL, "print weight bytes streamed, peak resident weights, time"},
    {OPT_TP, "tp", 1, "N", "virtual tensor parallel: N ranks from the shard plan, compared "
     "with the single-rank reference (exit 1 on a divergence)"},
    {OPT_EP, "ep", 1, "M", "with --tp: expert-parallel size of the plan"},
    {OPT_ENGINE, "engine", 1, "vllm|sglang", "with --tp: whose sharding rules (default vllm)"},
    {OPT_INJECT, "fault", 1, "FAULT[@LAYER]", "with --tp: break the plan with a fault of the "
     "catalog (all layers, or one)"},
    {OPT_INJECT, "inject", 1, "FAULT[@LAYER]", NULL},
    {OPT_COMPARE, "compare", 1, "REF.gguf", "compare this run's record with a reference record"},
    {OPT_TOL, "tol", 1, "SPEC", "with --tp/--compare: tolerances over the defaults"},
    {OPT_ANY_MODEL, "any-model", 0, NULL, "with --compare: records of different models (implied "
     "for an HF checkpoint, whose digest never equals a GGUF's)"},
    {OPT_HTML, "html", 1, "REPORT.html", "with --tp/--compare: also write the HTML report"},
    {0, NULL, 0, NULL, NULL},
};

static const cli_spec spec = {
    REF_FORWARD_TOOL,
    "[run] MODEL.gguf|CHECKPOINT [OPTIONS]\n"
    "       ref-forward SUBCOMMAND ... (each has its own --help):\n"
    "         run           the reference forward pass (the default; this page)\n"
    "         compare       two activation records, capture point by capture point\n"
    "         serve         an OpenAI/vLLM-compatible server on the reference (faults on demand)\n"
    "         check-engine  a running serving engine against the reference, position by position\n"
    "         import-dump   an engine's hidden-state dump as an activation record\n"
    "         kld-base      llama.cpp's --kl-divergence-base file from the reference\n"
    "         kld           an engine's logits against such a file (llama.cpp's statistics)",
    "Run the reference forward pass of a GGUF model (or split set) on the CPU: f32 compute\n"
    "with f64 accumulation, weights streamed layer by layer from the file. Prints the\n"
    "greedy continuation of the input, writes logits and activation records. CHECKPOINT is\n"
    "a Hugging Face folder (config.json + safetensors: BF16/F16/F32, FP8, NVFP4), its\n"
    "config.json or model.safetensors.index.json: the same forward over its weights.",
    options,
    "  ref-forward stories260K.gguf -n 32\n"
    "  ref-forward model.gguf --tokens 1,17,42 --logits logits.npy\n"
    "  ref-forward model.gguf --tokens 1,2,3 -n 8 --json\n"
    "  ref-forward model.gguf --prompt \"Once upon a time\" --bos -n 16\n"
    "  ref-forward model.gguf --tokens 1,2,3 --record ref.gguf --zstd\n"
    "  ref-forward model.gguf --tokens 1,2,3 --precision f64 --mla absorbed\n"
    "  ref-forward model.gguf --tokens 1,2,3 --tp 4\n"
    "  ref-forward model.gguf --tokens 1,2,3 --tp 8 --ep 8 --fault kv-b-rows@2 --html r.html\n"
    "  ref-forward model.gguf --tokens 1,2,3 --compare golden.gguf.zst\n"
    "  ref-forward model.gguf --tokens 1,2,3 --backend cuda --compare cpu.gguf\n"
    "  ref-forward model.gguf --tokens 1,2,3 --backend cuda --tp 2 --fault kv-b-rows\n"
    "  ref-forward hf-dir/ --tokens 1,2,3 --record hf.gguf\n"
    "  ref-forward model.gguf --tokens 1,2,3 --compare hf.gguf --any-model\n"
    "  ref-forward hf-dir/ --prompt \"Once upon\" --vocab model.gguf -n 8\n",
};

typedef struct run_opts {
    const char *model, *prompt, *vocab;
    bool hf, any_model;            /* model is an HF checkpoint; --any-model */
    const gguf_file *meta;         /* the vocabulary (model or --vocab), or NULL */
    char digest[GGUF_DIGEST_HEX];  /* HF: the checkpoint's digest for records */
    int32_t *tokens;
    int64_t n_tokens;
    int64_t n_predict;
    bool bos, no_bos, no_special, json, zstd, stats;
    const char *logits_path, *record_path;
    gguf_fwd_opts fo;
    int tp, ep;
    bool precision_set;
    int32_t eos;
    gguf_engine engine;
    const char *inject, *compare, *tol, *html;
    char *command; /* for the HTML report */
    refwd_backend backend;
    int host_register; /* 0 auto, 1 on, -1 off; 2: not given */
    uint64_t gpu_mem_limit;
} run_opts;

static int report(int rc, const gguf_error *err)
{
    cli_error(spec.tool, err);
    return cli_exit_code(rc);
}

/* ---- temporary records ---- */

/* A fresh folder under $TMPDIR (mkdtemp: private, unguessable) and a file
 * name inside it. */
static int tmp_path(char *out, size_t size, const char *name)
{
    const char *td = getenv("TMPDIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ref-forward-XXXXXX", td && *td ? td : "/tmp");
    if (!mkdtemp(dir)) {
        cli_errorf(spec.tool, "cannot make a temporary folder: %s", strerror(errno));
        return -1;
    }
    snprintf(out, size, "%s/%s.gguf", dir, name);
    return 0;
}

static void tmp_cleanup(const char *path)
{
    unlink(path);
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = 0;
        rmdir(dir);
    }
}

/* Text of generated ids (malloc'd), special tokens hidden; "" without a
 * vocabulary. A continuation keeps its leading space. */
static char *detok(const gguf_file *meta, const int32_t *ids, int64_t n)
{
    gguf_tokenizer *tk = NULL;
    char *text = NULL;
    size_t len = 0;
    gguf_error err;
    const gguf_detokenize_opts d = {.special = false, .keep_prefix = true};
    if (meta && n > 0 && !gguf_tokenizer_create_file(&tk, meta, &err) &&
        !gguf_detokenize(tk, ids, n, &d, &text, &len, &err)) {
        gguf_tokenizer_free(tk);
        return text;
    }
    gguf_tokenizer_free(tk);
    return strdup("");
}

static int side_ctx(const run_opts *o, const gguf_model *m, const gguf_shard_plan *plan,
                    gguf_fwd_ctx **ctx, gguf_error *err)
{
    gguf_fwd_opts fo = o->fo;
    fo.capture = NULL;
    fo.drop_pages = true; /* the set is mapped from files */
    return plan ? gguf_fwd_tp_create(ctx, m, plan, &fo, err) : gguf_fwd_ctx_create(ctx, m, &fo, err);
}

/* ---- --tp: the single-rank reference (or --compare REF) against tp ranks ---- */

/* One forward over the input tokens, every capture into a record. */
static int record_side(const run_opts *o, const gguf_set *set, const gguf_model *m,
                       const gguf_shard_plan *plan, const char *path, gguf_error *err)
{
    gguf_fwd_ctx *ctx = NULL;
    int rc = side_ctx(o, m, plan, &ctx, err);
    const bool user = path == o->record_path;
    gguf_run_record_opts ro = {.zstd = user && o->zstd, .no_sync = !user,
                               .precision = o->fo.precision, .n_threads = o->fo.n_threads,
                               .plan = plan, .fault = plan ? o->inject : NULL};
    if (!rc)
        rc = gguf_run_record(ctx, set, o->tokens, o->n_tokens, path, &ro, err);
    gguf_fwd_ctx_free(ctx);
    return rc;
}

/* The symptom a user sees: what each side says next. */
static int print_both_sides(const run_opts *o, const gguf_set *set, const gguf_model *m,
                            const gguf_shard_plan *plan)
{
    for (int side = 0; side < 2; side++) {
        gguf_error err = {0};
        gguf_fwd_ctx *ctx = NULL;
        gguf_fwd_generation g = {0};
        int rc = side_ctx(o, m, side ? plan : NULL, &ctx, &err);
        if (!rc)
            rc = gguf_fwd_generate(ctx, o->tokens, o->n_tokens, o->n_predict, o->eos, false, &g,
                                   &err);
        gguf_fwd_ctx_free(ctx);
        if (rc)
            return report(rc, &err);
        char *text = detok(o->meta, g.ids, g.n_ids);
        printf("%s generated:", side ? "tp" : "reference");
        for (int64_t i = 0; i < g.n_ids; i++)
            printf(" %d", g.ids[i]);
        printf("\n%s text: %s\n", side ? "tp" : "reference", text ? text : "");
        free(text);
        gguf_fwd_generation_free(&g);
    }
    return CLI_EXIT_OK;
}

static int run_tp(run_opts *o, const gguf_set *set, const gguf_model *m)
{
    gguf_error err = {0};
    gguf_shard_plan *plan = NULL;
    char ref[4200] = "", test[4200] = "";
    int ret = CLI_EXIT_ENV, rc;
    gguf_shard_opts so = {.tp = o->tp, .ep = o->ep, .engine = o->engine};
    if ((rc = gguf_shard_plan_create(&plan, m, &so, &err)) ||
        (o->inject && (rc = gguf_shard_apply_fault_spec(plan, o->inject, &err)))) {
        ret = report(rc, &err);
        goto done;
    }
    if (!o->compare) {
        if (tmp_path(ref, sizeof ref, "reference"))
            goto done;
        if ((rc = record_side(o, set, m, NULL, ref, &err))) {
            ret = report(rc, &err);
            goto done;
        }
    }
    if (o->record_path)
        snprintf(test, sizeof test, "%s", o->record_path);
    else if (tmp_path(test, sizeof test, "tp"))
        goto done;
    if ((rc = record_side(o, set, m, plan, test, &err))) {
        ret = report(rc, &err);
        goto done;
    }
    refwd_compare_args ca = {.tol = o->tol, .html = o->html, .json = o->json,
                             .flags = o->any_model ? GGUF_CMP_ANY_MODEL : 0,
                             .model = o->model, .command = o->command,
                             .tmp_a = !o->compare, .tmp_b = !o->record_path};
    fflush(stdout);
    ret = refwd_compare_files(o->compare ? o->compare : ref, test, &ca, stdout);
    if (o->n_predict > 0 && ret <= CLI_EXIT_DIFF) {
        fflush(stdout);
        const int r2 = print_both_sides(o, set, m, plan);
        if (r2)
            ret = r2;
    }
done:
    if (ref[0])
        tmp_cleanup(ref);
    if (test[0] && !o->record_path)
        tmp_cleanup(test);
    gguf_shard_plan_free(plan);
    return ret;
}

/* ---- one backend: record, generate, print ---- */

/* @return 0, or -1 out of memory or when stdout cannot be written. */
static int print_json(const run_opts *o, const gguf_model *m, const gguf_fwd_generation *g,
                      const char *text, const gguf_fwd_stats *st)
{
    const gguf_hparams *hp = gguf_model_hparams(m);
    const int64_t V = hp->n_vocab;
    json_t *doc = json_pack("{s:o, s:o, s:s, s:I, s:o, s:o, s:o, s:I, s:{s:o, s:I, s:I, s:I}}",
        "model", cli_json_text(o->model, SIZE_MAX), "arch", cli_json_text(hp->arch_name, SIZE_MAX),
        "precision", o->fo.precision == GGUF_FWD_F64 ? "f64" : "f32", "n_vocab", (json_int_t)V,
        "tokens", refwd_json_ids(o->tokens, o->n_tokens),
        "generated", refwd_json_ids(g->ids, g->n_ids),
        "text", cli_json_text(text, SIZE_MAX),
        "next_token", (json_int_t)gguf_fwd_argmax(g->logits + (o->n_tokens - 1) * V, V),
        "stats", "seconds", cli_json_number(st->seconds),
        "weight_bytes", (json_int_t)st->weight_bytes,
        "peak_weight_bytes", (json_int_t)st->peak_weight_bytes,
        "experts_loaded", (json_int_t)st->experts_loaded);
    return cli_json_print_report(stdout, REF_FORWARD_TOOL, doc);
}

static void print_text(const run_opts *o, const gguf_model *m, const gguf_fwd_ctx *ctx,
                       const gguf_fwd_generation *g, const char *text, const gguf_fwd_stats *st)
{
    const gguf_hparams *hp = gguf_model_hparams(m);
    const int64_t V = hp->n_vocab;
    if (cli_verbosity > 0) {
        printf("model: %s (%s, %lld blocks, vocab %lld)\n", o->model, hp->arch_name,
               (long long)hp->n_layer_main, (long long)V);
        printf("tokens:");
        for (int64_t i = 0; i < o->n_tokens; i++)
            printf(" %d", o->tokens[i]);
        printf("\nnext: %lld\n", (long long)gguf_fwd_argmax(g->logits + (o->n_tokens - 1) * V, V));
    }
    if (o->n_predict > 0) {
        printf("generated:");
        for (int64_t i = 0; i < g->n_ids; i++)
            printf(" %d", g->ids[i]);
        if (o->meta)
            printf("\ntext: %s\n", text);
        else
            printf("\ntext: (no vocabulary: give --vocab FILE.gguf)\n");
    }
    if (o->stats || cli_verbosity > 1) {
        char b1[32], b2[32];
        printf("stats: %.3f s, %s of weights streamed, peak %s dequantized at once, "
               "%llu experts loaded\n",
               st->seconds, cli_human_bytes(st->weight_bytes, b1, sizeof b1),
               cli_human_bytes(st->peak_weight_bytes, b2, sizeof b2),
               (unsigned long long)st->experts_loaded);
        refwd_print_xfer(ctx, stdout);
    }
}

static int run_single(run_opts *o, const gguf_set *set, const gguf_model *m)
{
    gguf_error err = {0};
    gguf_fwd_ctx *ctx = NULL;
    gguf_recorder *rec = NULL;
    gguf_fwd_generation g = {0};
    char tmp_rec[4200] = "", *text = NULL;
    const char *rec_path = o->record_path;
    int ret = CLI_EXIT_ENV;
    gguf_fwd_opts fo = o->fo;
    fo.drop_pages = true; /* the set is mapped from files */
    const refwd_gpu_opts gpu = {o->host_register == 2 ? 0 : o->host_register,
                                (size_t)o->gpu_mem_limit};
    int rc = refwd_ctx_create(&ctx, o->backend, m, &fo, &gpu, &err);
    if (rc) {
        ret = report(rc, &err);
        goto done;
    }
    if (o->compare && !rec_path) {
        if (tmp_path(tmp_rec, sizeof tmp_rec, "run"))
            goto done;
        rec_path = tmp_rec;
    }
    gguf_run_record_opts ro = {.zstd = o->zstd, .no_sync = rec_path == tmp_rec,
                               .precision = o->fo.precision, .n_threads = o->fo.n_threads,
                               .model_digest = o->hf ? o->digest : NULL};
    if ((rec_path && (rc = gguf_recorder_create(&rec, ctx, set, o->tokens, o->n_tokens, rec_path,
                                                 &ro, &err))) ||
        (rc = gguf_fwd_generate(ctx, o->tokens, o->n_tokens, o->n_predict, o->eos, true, &g,
                                &err)) ||
        (rec && (rc = gguf_recorder_finish(rec, &err))) ||
        (o->logits_path && (rc = gguf_npy_write_f32(o->logits_path, g.logits, g.n_rows,
                                                    gguf_model_hparams(m)->n_vocab, &err)))) {
        ret = report(rc, &err);
        goto done;
    }
    text = detok(o->meta, g.ids, g.n_ids);
    gguf_fwd_stats st;
    gguf_fwd_ctx_stats(ctx, &st);
    if (!o->json) {
        print_text(o, m, ctx, &g, text ? text : "", &st);
    } else if (print_json(o, m, &g, text ? text : "", &st) != 0) {
        cli_errorf(REF_FORWARD_TOOL, "cannot write the JSON report");
        ret = CLI_EXIT_ENV;
        goto done;
    }
    ret = CLI_EXIT_OK;
    if (o->compare) {
        fflush(stdout);
        refwd_compare_args ca = {.tol = o->tol, .html = o->html, .json = o->json,
                                 .flags = o->any_model || o->hf ? GGUF_CMP_ANY_MODEL : 0,
                                 .model = o->model, .command = o->command,
                                 .tmp_b = rec_path == tmp_rec};
        ret = refwd_compare_files(o->compare, rec_path, &ca, stdout);
    }
done:
    if (tmp_rec[0])
        tmp_cleanup(tmp_rec);
    gguf_recorder_free(rec);
    gguf_fwd_ctx_free(ctx);
    gguf_fwd_generation_free(&g);
    free(text);
    return ret;
}

/* ---- options ---- */

/* -1 when the options are fine, else the exit code (the error printed). */
static int parse_args(int argc, char **argv, run_opts *o)
{
    int c, optind_ = 1;
    const char *arg;
    uint64_t v;
    for (;;) {
        c = cli_next(&spec, argc, argv, &arg, &optind_);
        if (c == -1) {
            if (optind_ >= argc)
                break;
            if (o->model) {
                cli_errorf(spec.tool, "unexpected argument '%s' (see --help)", argv[optind_]);
                return CLI_EXIT_USAGE;
            }
            o->model = argv[optind_];
            optind = optind_ + 1;
            continue;
        }
        switch (c) {
        case OPT_TOKENS:
            free(o->tokens);
            if (cli_parse_ids(arg, &o->tokens, &o->n_tokens)) {
                cli_errorf(spec.tool, "--tokens: '%s' is not a comma-separated list of ids", arg);
                return CLI_EXIT_USAGE;
            }
            break;
        case 'n':
            if (cli_parse_u64(arg, &v) || v > 1000000) {
                cli_errorf(spec.tool, "-n: '%s' is not a count", arg);
                return CLI_EXIT_USAGE;
            }
            o->n_predict = (int64_t)v;
            break;
        case OPT_BOS: o->bos = true; break;
        case OPT_NO_BOS: o->no_bos = true; break;
        case OPT_NO_SPECIAL: o->no_special = true; break;
        case OPT_PROMPT: o->prompt = arg; break;
        case OPT_VOCAB: o->vocab = arg; break;
        case OPT_ANY_MODEL: o->any_model = true; break;
        case OPT_JSON: o->json = true; break;
        case OPT_ZSTD: o->zstd = true; break;
        case OPT_STATS: o->stats = true; break;
        case OPT_LOGITS: o->logits_path = arg; break;
        case OPT_RECORD: o->record_path = arg; break;
        case OPT_DENSE_INDEXER: o->fo.dense_indexer = true; break;
        case OPT_PRECISION:
            o->precision_set = true;
            if (strcmp(arg, "f32") == 0) {
                o->fo.precision = GGUF_FWD_F32;
            } else if (strcmp(arg, "f64") == 0) {
                o->fo.precision = GGUF_FWD_F64;
            } else {
                cli_errorf(spec.tool, "--precision: '%s' is not f32 or f64", arg);
                return CLI_EXIT_USAGE;
            }
            break;
        case OPT_MLA:
            if (strcmp(arg, "plain") == 0) {
                o->fo.mla_mode = GGUF_FWD_MLA_PLAIN;
            } else if (strcmp(arg, "absorbed") == 0) {
                o->fo.mla_mode = GGUF_FWD_MLA_ABSORBED;
            } else {
                cli_errorf(spec.tool, "--mla: '%s' is not plain or absorbed", arg);
                return CLI_EXIT_USAGE;
            }
            break;
        case OPT_TOPK:
            if (cli_parse_u64(arg, &v) || v < 1 || v > INT32_MAX) {
                cli_errorf(spec.tool, "--indexer-top-k: '%s' is not a positive count", arg);
                return CLI_EXIT_USAGE;
            }
            o->fo.idx_top_k = (int64_t)v;
            break;
        case OPT_TP:
        case OPT_EP:
            if (cli_parse_u64(arg, &v) || v < 1 || v > 4096) {
                cli_errorf(spec.tool, "--%s: '%s' is not a number from 1 to 4096",
                           c == OPT_TP ? "tp" : "ep", arg);
                return CLI_EXIT_USAGE;
            }
            *(c == OPT_TP ? &o->tp : &o->ep) = (int)v;
            break;
        case OPT_ENGINE:
            if (gguf_engine_from_name(arg, &o->engine)) {
                cli_errorf(spec.tool, "--engine: '%s' is not vllm or sglang", arg);
                return CLI_EXIT_USAGE;
            }
            break;
        case OPT_INJECT: o->inject = arg; break;
        case OPT_COMPARE: o->compare = arg; break;
        case OPT_TOL: o->tol = arg; break;
        case OPT_HTML: o->html = arg; break;
        case OPT_BACKEND:
            if (refwd_backend_parse(arg, &o->backend)) {
                cli_errorf(spec.tool, "--backend: '%s' is not cpu or cuda", arg);
                return CLI_EXIT_USAGE;
            }
            break;
        case OPT_HOST_REGISTER:
            o->host_register = !strcmp(arg, "auto") ? 0 : !strcmp(arg, "on") ? 1
                               : !strcmp(arg, "off") ? -1 : 3;
            if (o->host_register == 3) {
                cli_errorf(spec.tool, "--host-register: '%s' is not auto, on or off", arg);
                return CLI_EXIT_USAGE;
            }
            break;
        case OPT_GPU_MEM:
            if (cli_parse_size(arg, &o->gpu_mem_limit) || !o->gpu_mem_limit) {
                cli_errorf(spec.tool, "--gpu-mem-limit: '%s' is not a size (e.g. 2G)", arg);
                return CLI_EXIT_USAGE;
            }
            break;
        case OPT_THREADS:
            if (cli_parse_u64(arg, &v) || v < 1 || v > 64) {
                cli_errorf(spec.tool, "--threads: '%s' is not a number from 1 to 64", arg);
                return CLI_EXIT_USAGE;
            }
            o->fo.n_threads = (int)v;
            break;
        }
    }
    return -1;
}

/* Options that exclude or need each other. */
static const char *conflict(const run_opts *o)
{
    if (!o->model)
        return "expected a MODEL.gguf or checkpoint argument (see --help)";
    if (o->prompt && o->n_tokens)
        return "--prompt and --tokens exclude each other";
    if ((o->no_bos || o->no_special) && !o->prompt)
        return o->no_bos ? "--no-bos applies to --prompt" : "--no-special applies to --prompt";
    if (o->bos && o->no_bos)
        return "--bos and --no-bos exclude each other";
    if (o->zstd && !o->record_path)
        return "--zstd needs --record";
    if (o->ep && !o->tp)
        return "--ep needs --tp";
    if (o->inject && !o->tp)
        return "--fault needs --tp";
    if (o->tol && !o->tp && !o->compare)
        return "--tol needs --tp or --compare";
    if (o->html && !o->tp && !o->compare)
        return "--html needs --tp or --compare";
    if (o->any_model && !o->compare)
        return "--any-model needs --compare";
    if (o->hf && o->tp)
        return "--tp: shard plans slice GGUF tensors, and an HF checkpoint runs the single-rank "
               "reference only; run --tp on its GGUF conversion and --compare with the "
               "checkpoint's record";
    if (o->hf && o->backend == REFWD_CUDA)
        return "--backend cuda: an HF checkpoint runs on the CPU reference only (the GPU "
               "backend streams GGUF tensors); convert it to GGUF for the GPU";
    if (o->tp && (o->logits_path || (o->n_predict && o->json)))
        return "--tp checks the input tokens: --logits (and -n with --json) do not apply";
    if (o->host_register != 2 && o->backend != REFWD_CUDA)
        return "--host-register applies to --backend cuda";
    if (o->gpu_mem_limit && (o->backend != REFWD_CUDA || o->tp))
        return "--gpu-mem-limit applies to --backend cuda on one GPU";
    if (o->backend == REFWD_CUDA && o->precision_set && o->fo.precision == GGUF_FWD_F64)
        return "--backend cuda computes in f32: --precision f64 is CPU only";
    if (o->backend == REFWD_CUDA && o->fo.mla_mode == GGUF_FWD_MLA_ABSORBED)
        return "--backend cuda expands kv_b per head: --mla absorbed is CPU only";
    return NULL;
}

/* The input ids: --tokens, or --prompt through the model's tokenizer, with
 * BOS first when asked (or when nothing else was given). -1 when fine. */
static int input_tokens(run_opts *o, const gguf_set *set, const gguf_model *m)
{
    gguf_error err = {0};
    const gguf_file *meta = o->meta;
    if (o->prompt && !set) {
        cli_errorf(spec.tool, "%s: --prompt needs a vocabulary: an HF checkpoint has "
                   "tokenizer.json, which ref-forward does not read; give --tokens, or --vocab "
                   "FILE.gguf (a GGUF of the same model, e.g. its conversion)", o->model);
        return CLI_EXIT_USAGE;
    }
    if (o->prompt) {
        gguf_tokenizer *tk = NULL;
        gguf_tokenize_opts to;
        gguf_tokenize_opts_init(&to);
        to.add_bos = o->bos ? 1 : o->no_bos ? 0 : GGUF_TOK_AUTO;
        to.parse_special = !o->no_special;
        int rc = gguf_tokenizer_create(&tk, set, &err);
        if (!rc)
            rc = gguf_tokenize_text(tk, o->prompt, strlen(o->prompt), &to, &o->tokens,
                                    &o->n_tokens, &err);
        gguf_tokenizer_free(tk);
        if (rc)
            return report(rc, &err);
    }
    int32_t bos = gguf_fwd_token_bos(meta), eos = gguf_fwd_token_eos(meta);
    if (!meta)
        gguf_model_hf_tokens(m, &bos, &eos); /* config.json's */
    if (o->n_tokens == 0 || (o->bos && !o->prompt)) {
        if (bos < 0) {
            cli_errorf(spec.tool, "%s: no %s; give --tokens", o->model,
                       meta ? "tokenizer.ggml.bos_token_id" : "bos_token_id in config.json");
            return CLI_EXIT_USAGE;
        }
        int32_t *t = malloc((size_t)(o->n_tokens + 1) * sizeof(int32_t));
        if (!t)
            return CLI_EXIT_ENV;
        t[0] = bos;
        if (o->n_tokens)
            memcpy(t + 1, o->tokens, (size_t)o->n_tokens * sizeof(int32_t));
        free(o->tokens);
        o->tokens = t;
        o->n_tokens++;
    }
    const int64_t V = gguf_model_hparams(m)->n_vocab;
    for (int64_t i = 0; i < o->n_tokens; i++)
        if (o->tokens[i] >= V) {
            cli_errorf(spec.tool, "--tokens: id %d is outside the vocabulary of %s (%lld tokens)",
                       o->tokens[i], o->model, (long long)V);
            return CLI_EXIT_USAGE;
        }
    o->eos = eos;
    return -1;
}

/* The model: a GGUF (split) set, or an HF checkpoint (set stays NULL);
 * the vocabulary: --vocab, else the GGUF's own. */
static int open_model(run_opts *o, gguf_set **set, gguf_set **vocab, gguf_model **m,
                      gguf_error *err)
{
    int rc = o->hf ? gguf_model_open_hf(m, o->model, err) : gguf_set_open(set, o->model, NULL, err);
    if (!rc && !o->hf)
        rc = gguf_model_open(m, *set, err);
    if (!rc && o->vocab)
        rc = gguf_set_open(vocab, o->vocab, NULL, err);
    if (!rc)
        o->meta = *vocab ? gguf_set_meta(*vocab) : *set ? gguf_set_meta(*set) : NULL;
    return rc;
}

int refwd_run_main(int argc, char **argv)
{
    run_opts o = {0};
    o.host_register = 2;
    gguf_set *set = NULL, *vocab = NULL;
    gguf_model *m = NULL;
    gguf_error err = {0};
    o.command = refwd_command_line(argc, argv); /* before getopt permutes argv */
    int ret = parse_args(argc, argv, &o);
    if (ret >= 0)
        goto done;
    o.hf = gguf_model_path_is_hf(o.model);
    const char *why = conflict(&o);
    if (why) {
        cli_errorf(spec.tool, "%s", why);
        ret = CLI_EXIT_USAGE;
        goto done;
    }
    int rc = open_model(&o, &set, &vocab, &m, &err);
    /* No GPU: say so before any long work (the digest reads the whole model). */
    if (!rc)
        rc = refwd_backend_probe(o.backend, &err);
    if (rc) {
        ret = report(rc, &err);
        goto done;
    }
    if ((ret = input_tokens(&o, vocab ? vocab : set, m)) >= 0)
        goto done;
    if (o.hf && (o.record_path || o.compare)) {
        gguf_digest dg;
        if ((rc = gguf_model_hf_digest(m, &dg, &err))) {
            ret = report(rc, &err);
            goto done;
        }
        gguf_digest_hex(&dg, o.digest);
    }
    if (o.tp && o.backend == REFWD_CUDA) {
        /* GPU ranks over NCCL against the single-GPU run (f32) */
        refwd_gpu_tp_args ga = {o.model, set, m, o.tokens, o.n_tokens, o.tp, o.ep, o.engine,
                                o.inject, o.compare, o.tol, o.html, o.record_path, o.json, o.fo,
                                o.host_register == 2 ? 0 : o.host_register, argv};
        ret = refwd_gpu_tp(&ga);
    } else if (o.tp) {
        /* A plan check compares slicing, not rounding: both sides in f64 by
         * default, so that no near-tie in routing can flip between them. */
        if (!o.precision_set)
            o.fo.precision = GGUF_FWD_F64;
        ret = run_tp(&o, set, m);
    } else {
        ret = run_single(&o, set, m);
    }
done:
    gguf_model_free(m);
    gguf_set_free(set);
    gguf_set_free(vocab);
    free(o.tokens);
    free(o.command);
    return ret;
}
