/* ref-forward run: the reference forward pass of a GGUF model on the CPU,
 * greedy decoding, logits as .npy, activation records. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "gguf/forward.h"
#include "gguf/hash.h"
#include "gguf/model.h"
#include "gguf/record.h"
#include "gguf/shard.h"
#include "gguf/tokenize.h"
#include "refwd_backend.h"
#include "refwd_compare.h"
#include "refwd_gputp.h"
#include "ref_forward.h"

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
};

static const cli_opt options[] = {
    {OPT_TOKENS, "tokens", 1, "IDS", "input token ids, comma-separated (default: BOS)"},
    {OPT_PROMPT, "prompt", 1, "TEXT", "input text, tokenized with the model's SentencePiece "
     "('llama') vocabulary (no BOS unless --bos); excludes --tokens"},
    {'n', "n-predict", 1, "K", "greedy-decode K tokens after the input (default 0)"},
    {OPT_BOS, "bos", 0, NULL, "prepend the model's BOS token to --tokens or --prompt"},
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
     "--backend cuda: lock the model's pages in place for the GPU's copy engine (auto: when "
     "the files fit in half the RAM)"},
    {OPT_THREADS, "threads", 1, "N", "matmul and dequantization threads (default 1)"},
    {OPT_STATS, "stats", 0, NULL, "print weight bytes streamed, peak resident weights, time"},
    {OPT_TP, "tp", 1, "N", "virtual tensor parallel: N ranks from the shard plan, compared "
     "with the single-rank reference (exit 1 on a divergence)"},
    {OPT_EP, "ep", 1, "M", "with --tp: expert-parallel size of the plan"},
    {OPT_ENGINE, "engine", 1, "vllm|sglang", "with --tp: whose sharding rules (default vllm)"},
    {OPT_INJECT, "inject", 1, "FAULT[@LAYER]", "with --tp: break the plan with a fault of the "
     "catalog (all layers, or one)"},
    {OPT_COMPARE, "compare", 1, "REF.gguf", "compare this run's record with a reference record"},
    {OPT_TOL, "tol", 1, "SPEC", "with --tp/--compare: tolerances over the defaults"},
    {OPT_HTML, "html", 1, "REPORT.html", "with --tp/--compare: also write the HTML report"},
    {0, NULL, 0, NULL, NULL},
};

static const cli_spec spec = {
    REF_FORWARD_TOOL,
    "[run] MODEL.gguf [OPTIONS]\n       ref-forward compare A.gguf B.gguf [OPTIONS]",
    "Run the reference forward pass of a GGUF model (or split set) on the CPU: f32 compute\n"
    "with f64 accumulation, weights streamed layer by layer from the file. Prints the\n"
    "greedy continuation of the input, writes logits and activation records.",
    options,
    "  ref-forward stories260K.gguf -n 32\n"
    "  ref-forward model.gguf --tokens 1,17,42 --logits logits.npy\n"
    "  ref-forward model.gguf --tokens 1,2,3 -n 8 --json\n"
    "  ref-forward model.gguf --prompt \"Once upon a time\" --bos -n 16\n"
    "  ref-forward model.gguf --tokens 1,2,3 --record ref.gguf --zstd\n"
    "  ref-forward model.gguf --tokens 1,2,3 --precision f64 --mla absorbed\n"
    "  ref-forward model.gguf --tokens 1,2,3 --tp 4\n"
    "  ref-forward model.gguf --tokens 1,2,3 --tp 8 --ep 8 --inject kv-b-rows@2 --html r.html\n"
    "  ref-forward model.gguf --tokens 1,2,3 --compare golden.gguf.zst\n"
    "  ref-forward model.gguf --tokens 1,2,3 --backend cuda --compare cpu.gguf\n"
    "  ref-forward model.gguf --tokens 1,2,3 --backend cuda --tp 2 --inject kv-b-rows\n",
};

typedef struct run_opts {
    const char *model, *prompt;
    int32_t *tokens;
    int64_t n_tokens;
    int64_t n_predict;
    bool bos, json, zstd, stats;
    const char *logits_path, *record_path;
    gguf_fwd_opts fo;
    int tp, ep;
    bool precision_set;
    int32_t eos;
    gguf_engine engine;
    const char *inject, *compare, *tol, *html;
    refwd_backend backend;
    int host_register; /* 0 auto, 1 on, -1 off; 2: not given */
} run_opts;

static int parse_tokens(const char *s, run_opts *o)
{
    int64_t cap = 16;
    o->tokens = malloc((size_t)cap * sizeof(int32_t));
    if (!o->tokens)
        return -1;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ','))
            return -1;
        if (o->n_tokens == cap) {
            cap *= 2;
            int32_t *t = realloc(o->tokens, (size_t)cap * sizeof(int32_t));
            if (!t)
                return -1;
            o->tokens = t;
        }
        o->tokens[o->n_tokens++] = (int32_t)v;
        p = *end ? end + 1 : end;
        if (*end == ',' && !*p)
            return -1;
    }
    return o->n_tokens > 0 ? 0 : -1;
}

/* ---- .npy writer (temp file, fsync, rename) ---- */

static int write_npy(const char *path, const float *data, int64_t rows, int64_t cols,
                     gguf_error *err)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) {
        snprintf(err->message, sizeof err->message, "%s: path too long", path);
        err->code = GGUF_E_INVALID;
        return err->code;
    }
    char hdr[128];
    int n = snprintf(hdr, sizeof hdr,
                     "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld, %lld), }",
                     (long long)rows, (long long)cols);
    int total = 10 + n + 1;
    int pad = (64 - total % 64) % 64;
    FILE *f = fopen(tmp, "wb");
    if (!f)
        goto io;
    unsigned hlen = (unsigned)(n + pad + 1);
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xFF),
                             (unsigned char)(hlen >> 8)};
    fwrite(pre, 1, 10, f);
    fwrite(hdr, 1, (size_t)n, f);
    for (int i = 0; i < pad; i++)
        fputc(' ', f);
    fputc('\n', f);
    fwrite(data, sizeof(float), (size_t)(rows * cols), f);
    if (fflush(f) || ferror(f) || fsync(fileno(f))) {
        fclose(f);
        unlink(tmp);
        goto io;
    }
    if (fclose(f) || rename(tmp, path)) {
        unlink(tmp);
        goto io;
    }
    return 0;
io:
    err->code = errno == ENOSPC ? GGUF_E_NOSPACE : GGUF_E_IO;
    snprintf(err->message, sizeof err->message, "%s: %s", path, strerror(errno));
    err->offset = GGUF_NO_OFFSET;
    return err->code;
}

/* ---- record sink ---- */

typedef struct rec_sink {
    gguf_record_writer *w;
    int64_t prompt;       /* record only the first eval (the input tokens) */
    bool done;
} rec_sink;

static int rec_capture(void *user, const gguf_fwd_capture *cap)
{
    rec_sink *s = user;
    if (s->done || !s->w)
        return 0;
    int64_t ne[2] = {cap->ne[0], cap->ne[1]};
    gguf_error e;
    return gguf_record_add(s->w, cap->name, 0, 2, ne, cap->data, &e);
}

/* Length of a valid UTF-8 sequence at s (n bytes left), or 0. */
static int utf8_valid(const unsigned char *s, size_t n)
{
    if (s[0] < 0x80)
        return 1;
    int len = (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3 : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0 || (size_t)len > n || (len == 2 && s[0] < 0xC2))
        return 0;
    for (int i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return len;
}

/* A JSON string; bytes that are not UTF-8 (a token can end inside a
 * character) become U+FFFD so that the output stays valid JSON. */
/* Captures of every rank (rank -1, the single-rank run, is rank 0). */
static int rec_capture_rank(void *user, const gguf_fwd_capture *cap)
{
    rec_sink *s = user;
    int64_t ne[2] = {cap->ne[0], cap->ne[1]};
    gguf_error e;
    return gguf_record_add(s->w, cap->name, cap->rank < 0 ? 0u : (uint32_t)cap->rank, 2, ne,
                           cap->data, &e);
}

static void print_text_json(FILE *out, const char *s)
{
    size_t n = strlen(s), at = 0, cap = n * 3 + 1;
    char *clean = malloc(cap);
    if (!clean) {
        cli_json_str(out, "", 0);
        return;
    }
    for (size_t i = 0; i < n;) {
        int l = utf8_valid((const unsigned char *)s + i, n - i);
        if (l == 0) {
            memcpy(clean + at, "\xEF\xBF\xBD", 3);
            at += 3;
            i++;
        } else {
            memcpy(clean + at, s + i, (size_t)l);
            at += (size_t)l;
            i += (size_t)l;
        }
    }
    cli_json_str(out, clean, at);
    free(clean);
}

/* ---- temporary records ---- */

/* A fresh folder under $TMPDIR and a file name inside it. */
static int tmp_path(char *out, size_t size, const char *name)
{
    const char *td = getenv("TMPDIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ref-forward-XXXXXX", td && *td ? td : "/tmp");
    if (!mkdtemp(dir))
        return -1;
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

/* A digest of everything a plan says: per entry its rule, flags and every
 * rank's pieces and shape, then the options and the runtime settings. Two
 * runs with the same digest sliced the model the same way. */
static void plan_digest(const gguf_shard_plan *p, char *hex)
{
    gguf_hasher *h = NULL;
    hex[0] = 0;
    if (gguf_hasher_new(&h))
        return;
    const int tp = gguf_shard_plan_ranks(p);
    for (int64_t i = 0; i < gguf_shard_plan_count(p); i++) {
        const gguf_shard_tensor *e = gguf_shard_plan_at(p, i);
        gguf_hasher_update(h, e->name, strlen(e->name) + 1);
        int32_t f[6] = {(int32_t)e->rule, e->split_dim, e->expert_dim, e->cat_dim, e->slot,
                        (int32_t)e->reduce_sum};
        gguf_hasher_update(h, f, sizeof f);
        for (int r = 0; r < tp; r++) {
            const gguf_shard_slice *sl = &e->ranks[r];
            gguf_hasher_update(h, sl->ne, sizeof sl->ne);
            gguf_hasher_update(h, &sl->pad, sizeof sl->pad);
            for (int32_t k = 0; k < sl->n_pieces; k++) {
                const gguf_shard_piece *pc = &sl->pieces[k];
                int64_t v[11] = {pc->src, pc->transpose, pc->dst};
                memcpy(v + 3, pc->lo, sizeof pc->lo);
                memcpy(v + 7, pc->hi, sizeof pc->hi);
                gguf_hasher_update(h, v, sizeof v);
            }
        }
    }
    const gguf_shard_opts *o = gguf_shard_plan_opts(p);
    int32_t ov[4] = {o->tp, o->ep, (int32_t)o->engine, o->vocab_pad};
    gguf_hasher_update(h, ov, sizeof ov);
    const gguf_shard_runtime *rt = gguf_shard_plan_runtime(p);
    double rv[4] = {rt->attn_scale, rt->routed_scale, rt->shared_scale, (double)rt->rope_pairs};
    int32_t rb[3] = {rt->use_exp_probs_b, rt->norm_topk, rt->mla_cache_replicated};
    gguf_hasher_update(h, rv, sizeof rv);
    gguf_hasher_update(h, rb, sizeof rb);
    gguf_digest d;
    gguf_hasher_final(h, &d);
    gguf_hasher_free(h);
    gguf_digest_hex(&d, hex);
}

/* One forward over the input tokens, every capture into a record. */
static int record_run(const run_opts *o, const gguf_set *set, const gguf_model *m,
                      const gguf_shard_plan *plan, const char *path, const char *fault,
                      gguf_error *err)
{
    const gguf_hparams *hp = gguf_model_hparams(m);
    gguf_digest dg;
    char hex[GGUF_DIGEST_HEX];
    int rc = gguf_digest_set(set, NULL, &dg, o->fo.n_threads ? o->fo.n_threads : 1, NULL, err);
    if (rc)
        return rc;
    gguf_digest_hex(&dg, hex);
    const int tp = plan ? gguf_shard_plan_ranks(plan) : 1;
    const gguf_shard_opts *so = plan ? gguf_shard_plan_opts(plan) : NULL;
    gguf_record_meta rm = {0};
    rm.model_digest = hex;
    rm.tokens = o->tokens;
    rm.n_tokens = (uint64_t)o->n_tokens;
    rm.backend = plan ? "cpu-tp" : "cpu";
    rm.precision = o->fo.precision == GGUF_FWD_F64 ? "f64" : "f32";
    rm.tp = (uint32_t)tp;
    rm.ep = so && so->ep > 1 ? (uint32_t)so->ep : 1;
    rm.ranks = (uint32_t)tp;
    char pd[GGUF_DIGEST_HEX] = "";
    if (plan)
        plan_digest(plan, pd);
    rm.plan_digest = pd;
    rm.arch = hp->arch_name;
    rm.fault = fault ? fault : "";
    gguf_record_opts ro = {0};
    ro.overwrite = true;
    ro.no_sync = path != o->record_path;
    ro.zstd = path == o->record_path && o->zstd;
    rec_sink sink = {0};
    rc = gguf_record_writer_create(&sink.w, path, &rm, &ro, err);
    if (rc)
        return rc;
    gguf_fwd_opts fo = o->fo;
    fo.capture = rec_capture_rank;
    fo.capture_user = &sink;
    fo.drop_pages = true;
    gguf_fwd_ctx *ctx = NULL;
    rc = plan ? gguf_fwd_tp_create(&ctx, m, plan, &fo, err) : gguf_fwd_ctx_create(&ctx, m, &fo, err);
    if (!rc)
        rc = gguf_fwd_eval(ctx, o->tokens, o->n_tokens, NULL, err);
    gguf_fwd_ctx_free(ctx);
    if (!rc)
        rc = gguf_record_writer_finish(sink.w, err);
    gguf_record_writer_free(sink.w);
    return rc;
}

/* Greedy continuation of the input: n_predict ids (fewer at EOS). */
static int greedy(const run_opts *o, const gguf_model *m, const gguf_shard_plan *plan,
                  int32_t **out, int64_t *n_out, gguf_error *err)
{
    const int64_t V = gguf_model_hparams(m)->n_vocab;
    gguf_fwd_opts fo = o->fo;
    fo.capture = NULL;
    fo.drop_pages = true;
    gguf_fwd_ctx *ctx = NULL;
    float *lg = malloc((size_t)(o->n_tokens * V) * sizeof(float) + 1);
    int32_t *gen = malloc((size_t)(o->n_predict + 1) * sizeof(int32_t));
    *out = gen;
    *n_out = 0;
    if (!lg || !gen) {
        free(lg);
        err->code = GGUF_E_NOMEM;
        snprintf(err->message, sizeof err->message, "out of memory for logits");
        return GGUF_E_NOMEM;
    }
    int rc = plan ? gguf_fwd_tp_create(&ctx, m, plan, &fo, err) : gguf_fwd_ctx_create(&ctx, m, &fo, err);
    if (!rc)
        rc = gguf_fwd_eval(ctx, o->tokens, o->n_tokens, lg, err);
    const float *last = lg + (o->n_tokens - 1) * V;
    for (int64_t k = 0; !rc && k < o->n_predict; k++) {
        int32_t next = (int32_t)gguf_fwd_argmax(last, V);
        gen[(*n_out)++] = next;
        if (k + 1 == o->n_predict || next == o->eos)
            break;
        rc = gguf_fwd_eval(ctx, &next, 1, lg, err);
        last = lg;
    }
    gguf_fwd_ctx_free(ctx);
    free(lg);
    return rc;
}

/* Text of generated ids (malloc'd). */
static char *detok(const gguf_file *meta, const int32_t *ids, int64_t n)
{
    size_t cap = (size_t)(n + 1) * 64 + 1, len = 0;
    char *text = malloc(cap);
    if (!text)
        return NULL;
    text[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        char piece[256];
        int l = gguf_fwd_token_text(meta, ids[i], piece, sizeof piece);
        if (l > 0 && len + (size_t)l < cap) {
            memcpy(text + len, piece, (size_t)l);
            len += (size_t)l;
            text[len] = 0;
        }
    }
    return text;
}

/* --tp: the single-rank reference (or --compare REF) against tp ranks. */
static int run_tp(run_opts *o, const gguf_set *set, const gguf_model *m)
{
    gguf_error err = {0};
    gguf_shard_plan *plan = NULL;
    char ref[4200] = "", test[4200] = "";
    int ret = CLI_EXIT_USAGE;
    gguf_shard_opts so = {0};
    so.tp = o->tp;
    so.ep = o->ep;
    so.engine = o->engine;
    int rc = gguf_shard_plan_build(&plan, m, &so, &err);
    if (rc) {
        cli_error(spec.tool, &err);
        return cli_exit_code(rc);
    }
    char fault_name[128] = "";
    if (o->inject) {
        char name[96];
        snprintf(name, sizeof name, "%s", o->inject);
        int64_t layer = -1;
        char *at = strchr(name, '@');
        if (at) {
            *at = 0;
            char *end;
            layer = strtoll(at + 1, &end, 10);
            if (end == at + 1 || *end || layer < 0) {
                cli_errorf(spec.tool, "--inject: '%s' is not FAULT or FAULT@LAYER", o->inject);
                goto done;
            }
        }
        gguf_fault f;
        if (gguf_fault_from_name(name, &f) || f == GGUF_FAULT_NONE) {
            cli_errorf(spec.tool, "--inject: unknown fault '%s' (docs/faults.md lists them)", name);
            goto done;
        }
        rc = gguf_shard_apply_fault(plan, f, layer, &err);
        if (rc) {
            cli_error(spec.tool, &err);
            ret = cli_exit_code(rc);
            goto done;
        }
        snprintf(fault_name, sizeof fault_name, "%s", o->inject);
    }
    if (!o->compare) {
        if (tmp_path(ref, sizeof ref, "reference")) {
            cli_errorf(spec.tool, "cannot make a temporary folder: %s", strerror(errno));
            ret = CLI_EXIT_ENV;
            goto done;
        }
        if ((rc = record_run(o, set, m, NULL, ref, NULL, &err))) {
            cli_error(spec.tool, &err);
            ret = cli_exit_code(rc);
            goto done;
        }
    }
    if (o->record_path) {
        snprintf(test, sizeof test, "%s", o->record_path);
    } else if (tmp_path(test, sizeof test, "tp")) {
        cli_errorf(spec.tool, "cannot make a temporary folder: %s", strerror(errno));
        ret = CLI_EXIT_ENV;
        goto done;
    }
    if ((rc = record_run(o, set, m, plan, test, fault_name, &err))) {
        cli_error(spec.tool, &err);
        ret = cli_exit_code(rc);
        goto done;
    }
    refwd_compare_args ca = {0};
    ca.tol = o->tol;
    ca.html = o->html;
    ca.json = o->json;
    fflush(stdout);
    ret = refwd_compare_files(o->compare ? o->compare : ref, test, &ca, stdout);
    if (o->n_predict > 0 && ret <= CLI_EXIT_DIFF) {
        /* The symptom a user sees: what each side says next. */
        fflush(stdout);
        for (int side = 0; side < 2; side++) {
            int32_t *gen = NULL;
            int64_t n_gen = 0;
            rc = greedy(o, m, side ? plan : NULL, &gen, &n_gen, &err);
            if (rc) {
                free(gen);
                cli_error(spec.tool, &err);
                ret = cli_exit_code(rc);
                goto done;
            }
            char *text = detok(gguf_set_meta(set), gen, n_gen);
            printf("%s generated:", side ? "tp" : "reference");
            for (int64_t i = 0; i < n_gen; i++)
                printf(" %d", gen[i]);
            printf("\n%s text: %s\n", side ? "tp" : "reference", text ? text : "");
            free(text);
            free(gen);
        }
    }
done:
    if (ref[0])
        tmp_cleanup(ref);
    if (test[0] && !o->record_path)
        tmp_cleanup(test);
    gguf_shard_plan_free(plan);
    return ret;
}

int refwd_run_main(int argc, char **argv)
{
    run_opts o = {0};
    o.host_register = 2;
    int c, optind_ = 1;
    const char *arg;
    int ret = CLI_EXIT_USAGE;
    gguf_set *set = NULL;
    gguf_model *m = NULL;
    refwd_ctx *ctx = NULL;
    float *logits = NULL;
    int32_t *gen = NULL;
    char *text = NULL;
    rec_sink sink = {0};
    gguf_error err = {0};
    char tmp_rec[4200] = "";

    for (;;) {
        c = cli_next(&spec, argc, argv, &arg, &optind_);
        if (c == -1) {
            if (optind_ >= argc)
                break;
            if (o.model) {
                cli_errorf(spec.tool, "unexpected argument '%s' (see --help)", argv[optind_]);
                goto done;
            }
            o.model = argv[optind_];
            optind = optind_ + 1;
            continue;
        }
        uint64_t v;
        switch (c) {
        case OPT_TOKENS:
            if (parse_tokens(arg, &o)) {
                cli_errorf(spec.tool, "--tokens: '%s' is not a comma-separated list of ids", arg);
                goto done;
            }
            break;
        case 'n':
            if (cli_parse_u64(arg, &v) || v > 1000000) {
                cli_errorf(spec.tool, "-n: '%s' is not a count", arg);
                goto done;
            }
            o.n_predict = (int64_t)v;
            break;
        case OPT_BOS: o.bos = true; break;
        case OPT_PROMPT: o.prompt = arg; break;
        case OPT_JSON: o.json = true; break;
        case OPT_ZSTD: o.zstd = true; break;
        case OPT_STATS: o.stats = true; break;
        case OPT_LOGITS: o.logits_path = arg; break;
        case OPT_RECORD: o.record_path = arg; break;
        case OPT_DENSE_INDEXER: o.fo.dense_indexer = true; break;
        case OPT_PRECISION:
            o.precision_set = true;
            if (strcmp(arg, "f32") == 0)
                o.fo.precision = GGUF_FWD_F32;
            else if (strcmp(arg, "f64") == 0)
                o.fo.precision = GGUF_FWD_F64;
            else {
                cli_errorf(spec.tool, "--precision: '%s' is not f32 or f64", arg);
                goto done;
            }
            break;
        case OPT_MLA:
            if (strcmp(arg, "plain") == 0)
                o.fo.mla_mode = GGUF_FWD_MLA_PLAIN;
            else if (strcmp(arg, "absorbed") == 0)
                o.fo.mla_mode = GGUF_FWD_MLA_ABSORBED;
            else {
                cli_errorf(spec.tool, "--mla: '%s' is not plain or absorbed", arg);
                goto done;
            }
            break;
        case OPT_TOPK:
            if (cli_parse_u64(arg, &v) || v < 1 || v > INT32_MAX) {
                cli_errorf(spec.tool, "--indexer-top-k: '%s' is not a positive count", arg);
                goto done;
            }
            o.fo.idx_top_k = (int64_t)v;
            break;
        case OPT_TP:
        case OPT_EP:
            if (cli_parse_u64(arg, &v) || v < 1 || v > 4096) {
                cli_errorf(spec.tool, "--%s: '%s' is not a number from 1 to 4096",
                           c == OPT_TP ? "tp" : "ep", arg);
                goto done;
            }
            *(c == OPT_TP ? &o.tp : &o.ep) = (int)v;
            break;
        case OPT_ENGINE:
            if (gguf_engine_from_name(arg, &o.engine)) {
                cli_errorf(spec.tool, "--engine: '%s' is not vllm or sglang", arg);
                goto done;
            }
            break;
        case OPT_INJECT: o.inject = arg; break;
        case OPT_COMPARE: o.compare = arg; break;
        case OPT_TOL: o.tol = arg; break;
        case OPT_HTML: o.html = arg; break;
        case OPT_BACKEND:
            if (refwd_backend_parse(arg, &o.backend)) {
                cli_errorf(spec.tool, "--backend: '%s' is not cpu or cuda", arg);
                goto done;
            }
            break;
        case OPT_HOST_REGISTER:
            if (!strcmp(arg, "auto")) {
                o.host_register = 0;
            } else if (!strcmp(arg, "on")) {
                o.host_register = 1;
            } else if (!strcmp(arg, "off")) {
                o.host_register = -1;
            } else {
                cli_errorf(spec.tool, "--host-register: '%s' is not auto, on or off", arg);
                goto done;
            }
            break;
        case OPT_THREADS:
            if (cli_parse_u64(arg, &v) || v < 1 || v > 64) {
                cli_errorf(spec.tool, "--threads: '%s' is not a number from 1 to 64", arg);
                goto done;
            }
            o.fo.n_threads = (int)v;
            break;
        }
    }
    if (!o.model) {
        cli_errorf(spec.tool, "expected a MODEL.gguf argument (see --help)");
        goto done;
    }
    if (o.prompt && o.n_tokens) {
        cli_errorf(spec.tool, "--prompt and --tokens exclude each other");
        goto done;
    }
    if (o.zstd && !o.record_path) {
        cli_errorf(spec.tool, "--zstd needs --record");
        goto done;
    }
    if ((o.ep || o.inject) && !o.tp) {
        cli_errorf(spec.tool, "--%s needs --tp", o.ep ? "ep" : "inject");
        goto done;
    }
    if ((o.tol || o.html) && !o.tp && !o.compare) {
        cli_errorf(spec.tool, "--%s needs --tp or --compare", o.tol ? "tol" : "html");
        goto done;
    }
    if (o.tp && (o.logits_path || (o.n_predict && o.json))) {
        cli_errorf(spec.tool, "--tp checks the input tokens: --logits (and -n with --json) do "
                              "not apply");
        goto done;
    }

    if (o.host_register != 2 && (o.backend != REFWD_CUDA || o.tp)) {
        cli_errorf(spec.tool, "--host-register applies to --backend cuda without --tp (tensor-"
                              "parallel ranks register in auto mode)");
        goto done;
    }
    if (o.backend == REFWD_CUDA) {
        if (o.precision_set && o.fo.precision == GGUF_FWD_F64) {
            cli_errorf(spec.tool, "--backend cuda computes in f32: --precision f64 is CPU only");
            goto done;
        }
        if (o.fo.mla_mode == GGUF_FWD_MLA_ABSORBED) {
            cli_errorf(spec.tool, "--backend cuda expands kv_b per head: --mla absorbed is CPU only");
            goto done;
        }
    }
    int rc = gguf_set_open(&set, o.model, NULL, &err);
    if (!rc)
        rc = gguf_model_open(&m, set, &err);
    /* No GPU: say so before any long work (the digest reads the whole model). */
    if (!rc)
        rc = refwd_backend_probe(o.backend, &err);
    if (rc) {
        cli_error(spec.tool, &err);
        ret = cli_exit_code(rc);
        goto done;
    }
    const gguf_hparams *hp = gguf_model_hparams(m);
    const gguf_file *meta = gguf_set_meta(set);
    const int32_t bos = gguf_fwd_token_bos(meta), eos = gguf_fwd_token_eos(meta);
    if (o.prompt) {
        gguf_tokenizer *tk = NULL;
        rc = gguf_tokenizer_create(&tk, set, &err);
        if (!rc)
            rc = gguf_tokenize(tk, o.prompt, strlen(o.prompt), false, &o.tokens, &o.n_tokens, &err);
        gguf_tokenizer_free(tk);
        if (rc) {
            cli_error(spec.tool, &err);
            ret = cli_exit_code(rc);
            goto done;
        }
    }
    if (o.n_tokens == 0 || o.bos) {
        if (bos < 0) {
            cli_errorf(spec.tool, "%s: no tokenizer.ggml.bos_token_id; give --tokens", o.model);
            goto done;
        }
        int32_t *t = malloc((size_t)(o.n_tokens + 1) * sizeof(int32_t));
        if (!t) {
            ret = CLI_EXIT_ENV;
            goto done;
        }
        t[0] = bos;
        if (o.n_tokens)
            memcpy(t + 1, o.tokens, (size_t)o.n_tokens * sizeof(int32_t));
        free(o.tokens);
        o.tokens = t;
        o.n_tokens++;
    }
    for (int64_t i = 0; i < o.n_tokens; i++)
        if (o.tokens[i] >= hp->n_vocab) {
            cli_errorf(spec.tool, "--tokens: id %d is outside the vocabulary of %s (%lld tokens)",
                       o.tokens[i], o.model, (long long)hp->n_vocab);
            goto done;
        }

    o.eos = eos;
    if (o.tp && o.backend == REFWD_CUDA) {
        /* GPU ranks over NCCL against the single-GPU run (f32) */
        refwd_gpu_tp_args ga = {o.model, set, m, o.tokens, o.n_tokens, o.tp, o.ep, o.engine,
                                o.inject, o.compare, o.tol, o.html, o.record_path, o.json, o.fo,
                                argv};
        ret = refwd_gpu_tp(&ga);
        goto done;
    }
    if (o.tp) {
        /* A plan check compares slicing, not rounding: both sides in f64 by
         * default, so that no near-tie in routing can flip between them. */
        if (!o.precision_set)
            o.fo.precision = GGUF_FWD_F64;
        ret = run_tp(&o, set, m);
        goto done;
    }
    if (o.record_path || o.compare) {
        gguf_digest dg;
        char hex[GGUF_DIGEST_HEX];
        rc = gguf_digest_set(set, NULL, &dg, o.fo.n_threads ? o.fo.n_threads : 1, NULL, &err);
        if (rc) {
            cli_error(spec.tool, &err);
            ret = cli_exit_code(rc);
            goto done;
        }
        gguf_digest_hex(&dg, hex);
        gguf_record_meta rm = {0};
        rm.model_digest = hex;
        rm.tokens = o.tokens;
        rm.n_tokens = (uint64_t)o.n_tokens;
        rm.backend = refwd_backend_name(o.backend);
        rm.precision = o.fo.precision == GGUF_FWD_F64 ? "f64" : "f32";
        rm.tp = rm.ep = rm.ranks = 1;
        rm.plan_digest = "";
        rm.arch = hp->arch_name;
        rm.fault = "";
        gguf_record_opts ro = {0};
        ro.zstd = o.zstd;
        ro.overwrite = true;
        if (!o.record_path) {
            if (tmp_path(tmp_rec, sizeof tmp_rec, "run")) {
                cli_errorf(spec.tool, "cannot make a temporary folder: %s", strerror(errno));
                ret = CLI_EXIT_ENV;
                goto done;
            }
            o.record_path = tmp_rec;
        }
        rc = gguf_record_writer_create(&sink.w, o.record_path, &rm, &ro, &err);
        if (rc) {
            cli_error(spec.tool, &err);
            ret = cli_exit_code(rc);
            goto done;
        }
        o.fo.capture = rec_capture;
        o.fo.capture_user = &sink;
    }

    o.fo.drop_pages = true; /* the set is mapped from files */
    rc = refwd_ctx_create(&ctx, o.backend, m, &o.fo, o.host_register == 2 ? 0 : o.host_register,
                          &err);
    const int64_t V = hp->n_vocab;
    const int64_t n_rows = o.n_tokens + (o.n_predict > 1 ? o.n_predict - 1 : 0);
    logits = malloc((size_t)(n_rows * V) * sizeof(float) + 1);
    gen = malloc((size_t)(o.n_predict + 1) * sizeof(int32_t));
    if (!rc && (!logits || !gen)) {
        rc = GGUF_E_NOMEM;
        snprintf(err.message, sizeof err.message, "out of memory for logits");
    }
    if (!rc)
        rc = refwd_ctx_eval(ctx, o.tokens, o.n_tokens, logits, &err);
    sink.done = true;
    int64_t n_gen = 0;
    for (int64_t k = 0; !rc && k < o.n_predict; k++) {
        const float *last = logits + (o.n_tokens + k - 1) * V;
        int32_t next = (int32_t)gguf_fwd_argmax(last, V);
        gen[n_gen++] = next;
        if (next == eos || k + 1 == o.n_predict)
            break;
        rc = refwd_ctx_eval(ctx, &next, 1, logits + (o.n_tokens + k) * V, &err);
    }
    if (rc) {
        cli_error(spec.tool, &err);
        ret = cli_exit_code(rc);
        goto done;
    }
    const int64_t rows_done = refwd_ctx_n_past(ctx);
    if (sink.w && (rc = gguf_record_writer_finish(sink.w, &err))) {
        cli_error(spec.tool, &err);
        ret = cli_exit_code(rc);
        goto done;
    }
    if (o.logits_path && (rc = write_npy(o.logits_path, logits, rows_done, V, &err))) {
        cli_error(spec.tool, &err);
        ret = cli_exit_code(rc);
        goto done;
    }
    /* detokenize */
    size_t tcap = (size_t)(n_gen + 1) * 64 + 1, tlen = 0;
    text = malloc(tcap);
    if (!text) {
        ret = CLI_EXIT_ENV;
        goto done;
    }
    text[0] = 0;
    for (int64_t i = 0; i < n_gen; i++) {
        char piece[256];
        int l = gguf_fwd_token_text(meta, gen[i], piece, sizeof piece);
        if (l > 0 && tlen + (size_t)l < tcap) {
            memcpy(text + tlen, piece, (size_t)l);
            tlen += (size_t)l;
            text[tlen] = 0;
        }
    }
    gguf_fwd_stats st;
    refwd_ctx_stats(ctx, &st);
    if (o.json) {
        printf("{\"model\": ");
        print_text_json(stdout, o.model);
        printf(", \"arch\": ");
        print_text_json(stdout, hp->arch_name);
        printf(", \"precision\": \"%s\", \"n_vocab\": %lld, \"tokens\": [",
               o.fo.precision == GGUF_FWD_F64 ? "f64" : "f32", (long long)V);
        for (int64_t i = 0; i < o.n_tokens; i++)
            printf("%s%d", i ? ", " : "", o.tokens[i]);
        printf("], \"generated\": [");
        for (int64_t i = 0; i < n_gen; i++)
            printf("%s%d", i ? ", " : "", gen[i]);
        printf("], \"text\": ");
        print_text_json(stdout, text);
        printf(", \"next_token\": %lld", (long long)gguf_fwd_argmax(logits + (o.n_tokens - 1) * V, V));
        printf(", \"stats\": {\"seconds\": ");
        cli_json_num(stdout, st.seconds);
        printf(", \"weight_bytes\": %llu, \"peak_weight_bytes\": %llu, \"experts_loaded\": %llu}}\n",
               (unsigned long long)st.weight_bytes, (unsigned long long)st.peak_weight_bytes,
               (unsigned long long)st.experts_loaded);
    } else {
        if (cli_verbosity > 0) {
            printf("model: %s (%s, %lld blocks, vocab %lld)\n", o.model, hp->arch_name,
                   (long long)hp->n_layer_main, (long long)V);
            printf("tokens:");
            for (int64_t i = 0; i < o.n_tokens; i++)
                printf(" %d", o.tokens[i]);
            printf("\n");
            printf("next: %lld\n", (long long)gguf_fwd_argmax(logits + (o.n_tokens - 1) * V, V));
        }
        if (o.n_predict > 0) {
            printf("generated:");
            for (int64_t i = 0; i < n_gen; i++)
                printf(" %d", gen[i]);
            printf("\ntext: %s\n", text);
        }
        if (o.stats || cli_verbosity > 1) {
            char b1[32], b2[32];
            printf("stats: %.3f s, %s of weights streamed, peak %s dequantized at once, "
                   "%llu experts loaded\n",
                   st.seconds, cli_human_bytes(st.weight_bytes, b1, sizeof b1),
                   cli_human_bytes(st.peak_weight_bytes, b2, sizeof b2),
                   (unsigned long long)st.experts_loaded);
            refwd_ctx_print_xfer(ctx, stdout);
        }
    }
    ret = CLI_EXIT_OK;
    if (o.compare) {
        fflush(stdout);
        refwd_compare_args ca = {0};
        ca.tol = o.tol;
        ca.html = o.html;
        ca.json = o.json;
        ret = refwd_compare_files(o.compare, o.record_path, &ca, stdout);
    }
done:
    if (tmp_rec[0])
        tmp_cleanup(tmp_rec);
    gguf_record_writer_free(sink.w);
    refwd_ctx_free(ctx);
    gguf_model_free(m);
    gguf_set_close(set);
    free(o.tokens);
    free(logits);
    free(gen);
    free(text);
    return ret;
}
