/* ref-forward kld-base / kld: llama.cpp's KL-divergence files both ways.
 *   kld-base  the reference writes the file `llama-perplexity
 *             --kl-divergence-base` would write, so that any llama.cpp build,
 *             backend or quantization checks itself against our reference;
 *   kld       a file written by llama.cpp (from any model) against our
 *             logits, with llama.cpp's statistics.
 * The format and the statistics are in the library (gguf/kld.h). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gguf/forward.h"
#include "gguf/kld.h"
#include "gguf/model.h"
#include "gguf/output.h"
#include "gguf/tokenize.h"
#include "refwd_backend.h"
#include "ref_forward.h"
#include "refwd_json.h"

enum {
    OPT_TOKENS_FILE = 256,
    OPT_TEXT_FILE,
    OPT_CHUNKS,
    OPT_OUT,
    OPT_BASE,
    OPT_BOS,
    OPT_JSON,
    OPT_BACKEND,
    OPT_THREADS,
    OPT_FORCE,
};

static const cli_opt base_options[] = {
    {OPT_TOKENS_FILE, "tokens-file", 1, "F", "token ids separated by commas or white space"},
    {OPT_TEXT_FILE, "text-file", 1, "F", "text, tokenized with the model's vocabulary (BOS "
     "first as llama.cpp adds it)"},
    {'c', "ctx-size", 1, "N_CTX", "tokens per chunk (llama-perplexity -c; required)"},
    {OPT_CHUNKS, "chunks", 1, "N", "at most N chunks (default: every whole chunk)"},
    {'o', "output", 1, "OUT", "the file to write (llama-perplexity --kl-divergence-base)"},
    {OPT_BOS, "bos", 1, "auto|on|off", "replace each chunk's first token by BOS (auto: as "
     "llama.cpp decides from the vocabulary)"},
    {OPT_FORCE, "force", 0, NULL, "replace OUT when it exists"},
    {OPT_JSON, "json", 0, NULL, "print a JSON summary"},
    {OPT_BACKEND, "backend", 1, "cpu|cuda", "where the reference runs (default cpu)"},
    {OPT_THREADS, "threads", 1, "N", "matmul threads (default 1)"},
    {0, NULL, 0, NULL, NULL},
};

static const cli_spec base_spec = {
    REF_FORWARD_TOOL " kld-base",
    "MODEL.gguf (--tokens-file F | --text-file F) -c N_CTX [--chunks N] -o OUT",
    "Write llama.cpp's KL-divergence base file from the reference: per chunk of N_CTX\n"
    "tokens, the uint16-quantized log-probabilities of its second half, exactly as\n"
    "`llama-perplexity --kl-divergence-base` lays them out. Then any llama.cpp build\n"
    "checks itself against the reference with\n"
    "`llama-perplexity -m QUANT.gguf --kl-divergence-base OUT --kl-divergence`.",
    base_options,
    "  ref-forward kld-base model.gguf --text-file wiki.test.raw -c 512 --chunks 20 -o ref.kld\n"
    "  ref-forward kld-base model.gguf --tokens-file ids.txt -c 128 -o ref.kld\n",
};

static const cli_opt kld_options[] = {
    {OPT_BASE, "kl-divergence-base", 1, "FILE", "a file written by llama-perplexity "
     "--kl-divergence-base (or kld-base; required)"},
    {OPT_CHUNKS, "chunks", 1, "N", "compare the first N chunks only"},
    {OPT_BOS, "bos", 1, "auto|on|off", "replace each chunk's first token by BOS (auto: as "
     "llama.cpp decides from this model's vocabulary)"},
    {OPT_JSON, "json", 0, NULL, "one JSON object (schema: docs/check-engine.md)"},
    {OPT_BACKEND, "backend", 1, "cpu|cuda", "where the reference runs (default cpu)"},
    {OPT_THREADS, "threads", 1, "N", "matmul threads (default 1)"},
    {0, NULL, 0, NULL, NULL},
};

static const cli_spec kld_spec = {
    REF_FORWARD_TOOL " kld",
    "MODEL.gguf --kl-divergence-base FILE [--chunks N] [--json]",
    "Compare the reference's logits with a llama.cpp KL-divergence base file (written by\n"
    "any llama.cpp model) and print llama.cpp's statistics: mean KLD with its uncertainty,\n"
    "max and percentiles, same top token, RMS of the change of the next token's probability.\n"
    "The file is the base (P), the reference the model compared (Q): KL(P || Q).",
    kld_options,
    "  llama-perplexity -m model-f16.gguf -f wiki.test.raw -c 512 --kl-divergence-base f16.kld\n"
    "  ref-forward kld model.gguf --kl-divergence-base f16.kld\n"
    "  ref-forward kld model.gguf --kl-divergence-base f16.kld --chunks 4 --json\n",
};

typedef struct kld_opts {
    const char *model, *tokens_file, *text_file, *out, *base;
    int64_t n_ctx, chunks;
    int bos; /* -1 auto, 0 off, 1 on */
    bool json, force;
    refwd_backend backend;
    int threads;
} kld_opts;

/* A token or text file whole (gguf_read_small_file); NULL with errno set. */
static char *slurp(const char *path, size_t *len)
{
    char *text;
    gguf_error err = {0};
    if (gguf_read_small_file(path, (size_t)1 << 30, &text, len, &err) != 0) {
        errno = err.sys_errno ? err.sys_errno : err.code == GGUF_E_LIMIT ? EFBIG : EIO;
        return NULL;
    }
    return text;
}

/* Ids separated by commas or white space. */
static int parse_token_file(const char *path, int32_t **ids, int64_t *n)
{
    size_t len;
    char *text = slurp(path, &len);
    if (!text) {
        cli_errorf(REF_FORWARD_TOOL, "%s: cannot read: %s", path, strerror(errno));
        return CLI_EXIT_USAGE;
    }
    int64_t cap = 1024;
    *ids = malloc((size_t)cap * sizeof **ids);
    *n = 0;
    const char *p = text;
    int ret = *ids ? 0 : CLI_EXIT_ENV;
    while (!ret) {
        while (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
            p++;
        if (!*p)
            break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX ||
            (*end && !strchr(", \t\r\n", *end))) {
            cli_errorf(REF_FORWARD_TOOL, "%s: byte %lld: not a token id", path,
                       (long long)(p - text));
            ret = CLI_EXIT_USAGE;
            break;
        }
        if (*n == cap) {
            cap *= 2;
            int32_t *t = realloc(*ids, (size_t)cap * sizeof *t);
            if (!t) {
                ret = CLI_EXIT_ENV;
                break;
            }
            *ids = t;
        }
        (*ids)[(*n)++] = (int32_t)v;
        p = end;
    }
    free(text);
    return ret;
}

static int parse_bos(const char *arg, int *bos)
{
    if (!strcmp(arg, "auto"))
        *bos = -1;
    else if (!strcmp(arg, "on"))
        *bos = 1;
    else if (!strcmp(arg, "off"))
        *bos = 0;
    else
        return -1;
    return 0;
}

/* Shared option handling of both subcommands. @return 0, or an exit code. */
static int parse_args(const cli_spec *spec, int argc, char **argv, kld_opts *o)
{
    int c, optind_ = 1;
    const char *arg;
    o->bos = -1;
    for (;;) {
        c = cli_next(spec, argc, argv, &arg, &optind_);
        if (c == -1) {
            if (optind_ >= argc)
                break;
            if (o->model) {
                cli_errorf(spec->tool, "unexpected argument '%s' (see --help)", argv[optind_]);
                return CLI_EXIT_USAGE;
            }
            o->model = argv[optind_];
            optind = optind_ + 1;
            continue;
        }
        uint64_t v;
        switch (c) {
        case OPT_TOKENS_FILE: o->tokens_file = arg; break;
        case OPT_TEXT_FILE: o->text_file = arg; break;
        case OPT_BASE: o->base = arg; break;
        case 'o': o->out = arg; break;
        case OPT_JSON: o->json = true; break;
        case OPT_FORCE: o->force = true; break;
        case 'c':
        case OPT_CHUNKS:
            if (cli_parse_u64(arg, &v) || v < 1 || v > (c == 'c' ? GGUF_KLD_MAX_CTX : INT32_MAX) ||
                (c == 'c' && v < 4)) {
                cli_errorf(spec->tool, "%s: '%s' is not a %s", c == 'c' ? "-c" : "--chunks", arg,
                           c == 'c' ? "context size from 4" : "positive count");
                return CLI_EXIT_USAGE;
            }
            *(c == 'c' ? &o->n_ctx : &o->chunks) = (int64_t)v;
            break;
        case OPT_BOS:
            if (parse_bos(arg, &o->bos)) {
                cli_errorf(spec->tool, "--bos: '%s' is not auto, on or off", arg);
                return CLI_EXIT_USAGE;
            }
            break;
        case OPT_BACKEND:
            if (refwd_backend_parse(arg, &o->backend)) {
                cli_errorf(spec->tool, "--backend: '%s' is not cpu or cuda", arg);
                return CLI_EXIT_USAGE;
            }
            break;
        case OPT_THREADS:
            if (cli_parse_u64(arg, &v) || v < 1 || v > 64) {
                cli_errorf(spec->tool, "--threads: '%s' is not a number from 1 to 64", arg);
                return CLI_EXIT_USAGE;
            }
            o->threads = (int)v;
            break;
        }
    }
    if (!o->model) {
        cli_errorf(spec->tool, "expected a MODEL.gguf argument (see --help)");
        return CLI_EXIT_USAGE;
    }
    return 0;
}

/* Logits of tokens 0 .. n_ctx-2 of one chunk (its first replaced by BOS when
 * asked), from a fresh context: n_ctx - 1 rows. */
static int eval_chunk(const kld_opts *o, const gguf_model *m, const int32_t *chunk,
                      int64_t n_ctx, int32_t bos, float *logits, gguf_error *err)
{
    int32_t *t = malloc((size_t)n_ctx * sizeof *t);
    if (!t)
        return gguf_error_setf(err, GGUF_E_NOMEM, 0, "out of memory");
    memcpy(t, chunk, (size_t)n_ctx * sizeof *t);
    if (bos >= 0)
        t[0] = bos;
    gguf_fwd_opts fo = {0};
    fo.n_threads = o->threads;
    fo.drop_pages = true;
    gguf_fwd_ctx *ctx = NULL;
    int rc = refwd_ctx_create(&ctx, o->backend, m, &fo, NULL, err);
    if (!rc)
        rc = gguf_fwd_eval(ctx, t, n_ctx - 1, logits, err);
    gguf_fwd_ctx_free(ctx);
    free(t);
    return rc;
}

/* The BOS that replaces each chunk's first token, or -1 for none. */
static int chunk_bos(const kld_opts *o, const gguf_file *meta, int32_t *bos)
{
    const bool add = o->bos < 0 ? gguf_kld_add_bos(meta) : o->bos == 1;
    *bos = -1;
    if (!add)
        return 0;
    *bos = gguf_fwd_token_bos(meta);
    if (*bos < 0) {
        cli_errorf(REF_FORWARD_TOOL, "%s: the vocabulary adds BOS but has no "
                                     "tokenizer.ggml.bos_token_id (give --bos off)", o->model);
        return CLI_EXIT_USAGE;
    }
    return 0;
}

int refwd_kld_base_main(int argc, char **argv)
{
    kld_opts o = {0};
    int ret = parse_args(&base_spec, argc, argv, &o);
    if (ret)
        return ret;
    const char *tool = base_spec.tool;
    if (!!o.tokens_file == !!o.text_file || !o.n_ctx || !o.out) {
        cli_errorf(tool, "give one of --tokens-file or --text-file, -c N_CTX and -o OUT");
        return CLI_EXIT_USAGE;
    }
    gguf_error err = {0};
    gguf_set *set = NULL;
    gguf_model *m = NULL;
    int32_t *ids = NULL;
    int64_t n_ids = 0;
    float *logits = NULL;
    gguf_kld_writer *w = NULL;
    ret = CLI_EXIT_USAGE;
    int rc = gguf_set_open(&set, o.model, NULL, &err);
    if (!rc)
        rc = gguf_model_open(&m, set, &err);
    if (!rc)
        rc = refwd_backend_probe(o.backend, &err);
    if (rc) {
        cli_error(tool, &err);
        ret = cli_exit_code(rc);
        goto done;
    }
    const gguf_file *meta = gguf_set_meta(set);
    const int64_t V = gguf_model_hparams(m)->n_vocab;
    int32_t bos;
    if ((ret = chunk_bos(&o, meta, &bos)))
        goto done;
    ret = CLI_EXIT_USAGE;
    if (o.tokens_file) {
        if ((ret = parse_token_file(o.tokens_file, &ids, &n_ids)))
            goto done;
        ret = CLI_EXIT_USAGE;
    } else {
        size_t len;
        char *text = slurp(o.text_file, &len);
        if (!text) {
            cli_errorf(tool, "%s: cannot read: %s", o.text_file, strerror(errno));
            goto done;
        }
        gguf_tokenizer *tk = NULL;
        /* llama.cpp: common_tokenize(ctx, text, add_special = true) */
        rc = gguf_tokenizer_create(&tk, set, &err);
        if (!rc)
            rc = gguf_tokenize(tk, text, len, bos >= 0, &ids, &n_ids, &err);
        gguf_tokenizer_free(tk);
        free(text);
        if (rc) {
            cli_error(tool, &err);
            ret = cli_exit_code(rc);
            goto done;
        }
    }
    for (int64_t i = 0; i < n_ids; i++)
        if (ids[i] >= V) {
            cli_errorf(tool, "%s: token %lld (id %d) is outside the vocabulary of %s (%lld)",
                       o.tokens_file ? o.tokens_file : o.text_file, (long long)i, ids[i], o.model,
                       (long long)V);
            goto done;
        }
    /* llama.cpp needs two chunks' worth of tokens to start */
    if (n_ids < 2 * o.n_ctx) {
        cli_errorf(tool, "%lld tokens: llama-perplexity needs at least 2 * n_ctx = %lld",
                   (long long)n_ids, (long long)(2 * o.n_ctx));
        goto done;
    }
    int64_t n_chunk = n_ids / o.n_ctx;
    if (o.chunks && o.chunks < n_chunk)
        n_chunk = o.chunks;
    if (n_chunk * o.n_ctx > INT32_MAX || V > INT32_MAX) {
        cli_errorf(tool, "%lld chunks of %lld tokens is too many", (long long)n_chunk,
                   (long long)o.n_ctx);
        goto done;
    }
    gguf_output_opts oo = {0};
    oo.overwrite = o.force;
    rc = gguf_kld_writer_create(&w, o.out, (int32_t)o.n_ctx, (int32_t)V, (int32_t)n_chunk, ids,
                                &oo, &err);
    logits = malloc((size_t)((o.n_ctx - 1) * V) * sizeof(float));
    if (!rc && !logits)
        rc = gguf_error_setf(&err, GGUF_E_NOMEM, 0, "out of memory for %lld rows of logits",
                             (long long)(o.n_ctx - 1));
    cli_progress pr;
    cli_progress_start(&pr, "chunks", (uint64_t)n_chunk);
    const double t0 = cli_now();
    for (int64_t c = 0; !rc && c < n_chunk; c++) {
        rc = eval_chunk(&o, m, ids + c * o.n_ctx, o.n_ctx, bos, logits, &err);
        if (!rc)
            rc = gguf_kld_writer_add_chunk(w, logits + gguf_kld_first(o.n_ctx) * V, &err);
        cli_progress_update(&pr, (uint64_t)(c + 1));
    }
    cli_progress_end(&pr);
    double ppl = 0;
    if (!rc)
        rc = gguf_kld_writer_finish(w, &ppl, &err);
    if (rc) {
        cli_error(tool, &err);
        ret = cli_exit_code(rc);
        goto done;
    }
    const int64_t rows = n_chunk * gguf_kld_rows_per_chunk(o.n_ctx);
    if (o.json) {
        json_t *doc = json_pack("{s:o, s:I, s:I, s:I, s:I, s:b, s:o, s:o}",
                                "output", cli_json_text(o.out, SIZE_MAX),
                                "n_ctx", (json_int_t)o.n_ctx, "n_vocab", (json_int_t)V,
                                "n_chunk", (json_int_t)n_chunk, "rows", (json_int_t)rows,
                                "bos", bos >= 0, "ppl", cli_json_number(ppl),
                                "seconds", cli_json_number(cli_now() - t0));
        if (cli_json_print_report(stdout, REF_FORWARD_TOOL " kld-base", doc) != 0) {
            cli_errorf(tool, "cannot write the JSON report");
            ret = CLI_EXIT_ENV;
            goto done;
        }
    } else
        printf("%s: n_ctx %lld, n_vocab %lld, %lld chunks, %lld scored positions%s; "
               "reference PPL %.4f\n",
               o.out, (long long)o.n_ctx, (long long)V, (long long)n_chunk, (long long)rows,
               bos >= 0 ? " (BOS first in each chunk)" : "", ppl);
    ret = CLI_EXIT_OK;
done:
    gguf_kld_writer_free(w);
    free(logits);
    free(ids);
    gguf_model_free(m);
    gguf_set_free(set);
    return ret;
}

static void print_stats(const gguf_kld_stats *s, const char *base, int64_t chunks)
{
    printf("base: %s, %lld chunks, %lld positions\n", base, (long long)chunks,
           (long long)s->count);
    if (s->count < 100)
        printf("note: fewer than 100 positions (llama.cpp prints no statistics for so few)\n");
    printf("\n====== Perplexity statistics ======\n");
    printf("Mean PPL(Q)                   : %10.6f ± %10.6f\n", s->ppl, s->ppl_unc);
    printf("Mean PPL(base)                : %10.6f ± %10.6f\n", s->ppl_base, s->ppl_base_unc);
    printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100.0 * s->cor_ln_ppl);
    printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", s->ln_ppl_ratio,
           s->ln_ppl_ratio_unc);
    printf("Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", s->ppl_ratio, s->ppl_ratio_unc);
    printf("Mean PPL(Q)-PPL(base)         : %10.6f ± %10.6f\n", s->ppl_diff, s->ppl_diff_unc);
    printf("\n====== KL divergence statistics ======\n");
    printf("Mean    KLD: %10.6f ± %10.6f\n", s->mean_kld, s->mean_kld_unc);
    printf("Maximum KLD: %10.6f\n", s->max_kld);
    printf("99.9%%   KLD: %10.6f\n", s->p999_kld);
    printf("99.0%%   KLD: %10.6f\n", s->p99_kld);
    printf("95.0%%   KLD: %10.6f\n", s->p95_kld);
    printf("90.0%%   KLD: %10.6f\n", s->p90_kld);
    printf("Median  KLD: %10.6f\n", s->median_kld);
    printf("10.0%%   KLD: %10.6f\n", s->p10_kld);
    printf(" 5.0%%   KLD: %10.6f\n", s->p5_kld);
    printf(" 1.0%%   KLD: %10.6f\n", s->p1_kld);
    printf(" 0.1%%   KLD: %10.6f\n", s->p01_kld);
    printf("Minimum KLD: %10.6f\n", s->min_kld);
    printf("\n====== Token probability statistics ======\n");
    printf("Mean    Δp: %6.3f ± %5.3f %%\n", 100.0 * s->mean_dp, 100.0 * s->mean_dp_unc);
    printf("Maximum Δp: %6.3f%%\n", 100.0 * s->max_dp);
    printf("99.9%%   Δp: %6.3f%%\n", 100.0 * s->p999_dp);
    printf("99.0%%   Δp: %6.3f%%\n", 100.0 * s->p99_dp);
    printf("95.0%%   Δp: %6.3f%%\n", 100.0 * s->p95_dp);
    printf("90.0%%   Δp: %6.3f%%\n", 100.0 * s->p90_dp);
    printf("75.0%%   Δp: %6.3f%%\n", 100.0 * s->p75_dp);
    printf("Median  Δp: %6.3f%%\n", 100.0 * s->median_dp);
    printf("25.0%%   Δp: %6.3f%%\n", 100.0 * s->p25_dp);
    printf("10.0%%   Δp: %6.3f%%\n", 100.0 * s->p10_dp);
    printf(" 5.0%%   Δp: %6.3f%%\n", 100.0 * s->p5_dp);
    printf(" 1.0%%   Δp: %6.3f%%\n", 100.0 * s->p1_dp);
    printf(" 0.1%%   Δp: %6.3f%%\n", 100.0 * s->p01_dp);
    printf("Minimum Δp: %6.3f%%\n", 100.0 * s->min_dp);
    printf("RMS Δp    : %6.3f ± %5.3f %%\n", 100.0 * s->rms_dp, 100.0 * s->rms_dp_unc);
    printf("Same top p: %6.3f ± %5.3f %%\n", 100.0 * s->same_top_p, 100.0 * s->same_top_p_unc);
}

/* @return 0, or -1 out of memory or when stdout cannot be written. */
static int print_json(const gguf_kld_stats *s, const char *base, int64_t chunks)
{
    json_t *doc = json_pack("{s:o, s:I, s:I}", "base", cli_json_text(base, SIZE_MAX),
                            "chunks", (json_int_t)chunks, "count", (json_int_t)s->count);
    const struct {
        const char *key;
        double v;
    } kv[] = {
        {"mean_kld", s->mean_kld}, {"mean_kld_uncertainty", s->mean_kld_unc},
        {"max_kld", s->max_kld}, {"p99_9_kld", s->p999_kld}, {"p99_kld", s->p99_kld},
        {"p95_kld", s->p95_kld}, {"p90_kld", s->p90_kld}, {"median_kld", s->median_kld},
        {"min_kld", s->min_kld}, {"same_top_p", s->same_top_p},
        {"same_top_p_uncertainty", s->same_top_p_unc}, {"rms_dp", s->rms_dp},
        {"rms_dp_uncertainty", s->rms_dp_unc}, {"mean_dp", s->mean_dp}, {"max_dp", s->max_dp},
        {"min_dp", s->min_dp}, {"ppl", s->ppl}, {"ppl_base", s->ppl_base},
        {"ln_ppl_ratio", s->ln_ppl_ratio}, {"ln_ppl_ratio_uncertainty", s->ln_ppl_ratio_unc},
        {"ppl_ratio", s->ppl_ratio}, {"ppl_ratio_uncertainty", s->ppl_ratio_unc},
        {"ppl_diff", s->ppl_diff}, {"ppl_diff_uncertainty", s->ppl_diff_unc},
    };
    for (size_t i = 0; doc && i < sizeof kv / sizeof *kv; i++)
        doc = refwd_json_put(doc, kv[i].key, cli_json_number(kv[i].v));
    return cli_json_print_report(stdout, REF_FORWARD_TOOL " kld", doc);
}

int refwd_kld_main(int argc, char **argv)
{
    kld_opts o = {0};
    int ret = parse_args(&kld_spec, argc, argv, &o);
    if (ret)
        return ret;
    const char *tool = kld_spec.tool;
    if (!o.base) {
        cli_errorf(tool, "expected --kl-divergence-base FILE (see --help)");
        return CLI_EXIT_USAGE;
    }
    gguf_error err = {0};
    gguf_set *set = NULL;
    gguf_model *m = NULL;
    gguf_kld_file *f = NULL;
    gguf_kld_acc *acc = NULL;
    float *logits = NULL;
    ret = CLI_EXIT_USAGE;
    int rc = gguf_kld_open(&f, o.base, &err);
    if (!rc)
        rc = gguf_set_open(&set, o.model, NULL, &err);
    if (!rc)
        rc = gguf_model_open(&m, set, &err);
    if (!rc)
        rc = refwd_backend_probe(o.backend, &err);
    if (rc) {
        cli_error(tool, &err);
        ret = cli_exit_code(rc);
        goto done;
    }
    const int64_t V = gguf_model_hparams(m)->n_vocab, n_ctx = gguf_kld_n_ctx(f);
    if (gguf_kld_n_vocab(f) != V) {
        cli_errorf(tool, "%s: n_vocab %d, but %s has %lld tokens: another vocabulary", o.base,
                   gguf_kld_n_vocab(f), o.model, (long long)V);
        goto done;
    }
    int32_t bos;
    if ((ret = chunk_bos(&o, gguf_set_meta(set), &bos)))
        goto done;
    int64_t n_chunk = gguf_kld_n_chunk(f);
    if (o.chunks && o.chunks < n_chunk)
        n_chunk = o.chunks;
    const int64_t rows = gguf_kld_rows_per_chunk(n_ctx), first = gguf_kld_first(n_ctx);
    rc = gguf_kld_acc_create(&acc, n_chunk * rows, &err);
    logits = malloc((size_t)((n_ctx - 1) * V) * sizeof(float));
    if (!rc && !logits)
        rc = gguf_error_setf(&err, GGUF_E_NOMEM, 0, "out of memory for %lld rows of logits",
                             (long long)(n_ctx - 1));
    cli_progress pr;
    cli_progress_start(&pr, "chunks", (uint64_t)n_chunk);
    for (int64_t c = 0; !rc && c < n_chunk; c++) {
        rc = eval_chunk(&o, m, gguf_kld_tokens(f) + c * n_ctx, n_ctx, bos, logits, &err);
        for (int64_t j = 0; !rc && j < rows; j++)
            rc = gguf_kld_acc_add(acc, f, c, j, logits + (first + j) * V, &err);
        cli_progress_update(&pr, (uint64_t)(c + 1));
    }
    cli_progress_end(&pr);
    if (rc) {
        cli_error(tool, &err);
        ret = cli_exit_code(rc);
        goto done;
    }
    gguf_kld_stats s;
    gguf_kld_acc_stats(acc, &s);
    if (!o.json) {
        print_stats(&s, o.base, n_chunk);
    } else if (print_json(&s, o.base, n_chunk) != 0) {
        cli_errorf(tool, "cannot write the JSON report");
        ret = CLI_EXIT_ENV;
        goto done;
    }
    ret = CLI_EXIT_OK;
done:
    free(logits);
    gguf_kld_acc_free(acc);
    gguf_kld_free(f);
    gguf_model_free(m);
    gguf_set_free(set);
    return ret;
}
