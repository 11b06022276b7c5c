/* gguf_fwd_ctx: one interface over the backends of the forward pass. The
 * CPU executor (forward_exec.c) is one backend, with or without a shard
 * plan; the GPU backends of ggufkit_cuda register theirs through
 * gguf_fwd_ctx_wrap. Also the greedy decoding loop every caller shares. */
#include <stdlib.h>
#include <string.h>

#include "util/error_lib.h"
#include "forward/forward_exec.h"

struct gguf_fwd_ctx {
    const gguf_fwd_backend *be;
    void *impl;
    const gguf_model *m;
    int64_t n_given; /* tokens given to eval (n_past when the backend has none) */
    double seconds;
};

/* ------------------------------------------------------------ the CPU backend */

static int cpu_eval(void *impl, const int32_t *tokens, int64_t n, float *logits, gguf_error *err)
{
    return fw_exec_eval(impl, tokens, n, logits, err);
}

static int64_t cpu_n_past(const void *impl)
{
    return ((const fw_exec *)impl)->n_past;
}

static void cpu_stats(const void *impl, gguf_fwd_stats *out)
{
    *out = ((const fw_exec *)impl)->st;
}

static int cpu_set_capture(void *impl, gguf_fwd_capture_fn fn, void *user)
{
    fw_exec *c = impl;
    c->s.o.capture = fn;
    c->s.o.capture_user = user;
    return 0;
}

static void cpu_free(void *impl)
{
    fw_exec_free(impl);
}

static const gguf_fwd_backend cpu_backend = {"cpu", cpu_eval, cpu_n_past, cpu_stats,
                                             cpu_set_capture, cpu_free};
static const gguf_fwd_backend cpu_tp_backend = {"cpu-tp", cpu_eval, cpu_n_past, cpu_stats,
                                                cpu_set_capture, cpu_free};
/* The reference over an HF checkpoint: records say so in record.backend. */
static const gguf_fwd_backend cpu_hf_backend = {"cpu-hf", cpu_eval, cpu_n_past, cpu_stats,
                                                cpu_set_capture, cpu_free};

int gguf_fwd_ctx_create(gguf_fwd_ctx **out, const gguf_model *m, const gguf_fwd_opts *opts,
                        gguf_error *err)
{
    if (opts && opts->version > GGUF_FWD_OPTS_VERSION) {
        if (out)
            *out = NULL;
        return gguf_opts_version_fail(opts->version, GGUF_FWD_OPTS_VERSION, "gguf_fwd_opts", err);
    }
    if (!out)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "forward: NULL out");
    *out = NULL;
    fw_exec *c;
    int rc = fw_exec_create(&c, m, NULL, opts, err);
    if (rc)
        return rc;
    return gguf_fwd_ctx_wrap(out, m, gguf_model_checkpoint(m) ? &cpu_hf_backend : &cpu_backend, c,
                             err);
}

int gguf_fwd_tp_create(gguf_fwd_ctx **out, const gguf_model *m, const gguf_shard_plan *plan,
                       const gguf_fwd_opts *opts, gguf_error *err)
{
    if (opts && opts->version > GGUF_FWD_OPTS_VERSION) {
        if (out)
            *out = NULL;
        return gguf_opts_version_fail(opts->version, GGUF_FWD_OPTS_VERSION, "gguf_fwd_opts", err);
    }
    if (!out)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "forward: NULL out");
    *out = NULL;
    if (!plan || gguf_shard_plan_model(plan) != m)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "virtual tp: the plan was not built for this model");
    if (gguf_model_checkpoint(m))
        return gguf_fail(err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                         "%s: virtual tp: shard plans slice GGUF tensors; an HF checkpoint "
                         "runs the single-rank reference only (run --tp on its GGUF conversion)",
                         gguf_model_name(m));
    fw_exec *c;
    int rc = fw_exec_create(&c, m, plan, opts, err);
    if (rc)
        return rc;
    return gguf_fwd_ctx_wrap(out, m, &cpu_tp_backend, c, err);
}

/* ------------------------------------------------------------ the interface */

int gguf_fwd_ctx_wrap(gguf_fwd_ctx **out, const gguf_model *m, const gguf_fwd_backend *be,
                      void *impl, gguf_error *err)
{
    *out = NULL;
    if (!be || !be->eval || !be->free || !m) {
        if (be && be->free && impl)
            be->free(impl);
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "forward: incomplete backend");
    }
    gguf_fwd_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        be->free(impl);
        return fw_nomem(err, "context");
    }
    c->be = be;
    c->impl = impl;
    c->m = m;
    *out = c;
    return 0;
}

void *gguf_fwd_ctx_impl(const gguf_fwd_ctx *c, const gguf_fwd_backend *be)
{
    return c && c->be == be ? c->impl : NULL;
}

void gguf_fwd_ctx_free(gguf_fwd_ctx *c)
{
    if (!c)
        return;
    c->be->free(c->impl);
    free(c);
}

int gguf_fwd_eval(gguf_fwd_ctx *c, const int32_t *tokens, int64_t n, float *logits,
                  gguf_error *err)
{
    if (!c || !tokens || n < 1)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "forward: no tokens");
    const int64_t V = gguf_model_hparams(c->m)->n_vocab;
    for (int64_t t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= V)
            return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                             "forward: token %lld is %d, outside the vocabulary (%lld)",
                             (long long)t, tokens[t], (long long)V);
    const double t0 = fw_now();
    int rc = c->be->eval(c->impl, tokens, n, logits, err);
    c->seconds += fw_now() - t0;
    if (!rc)
        c->n_given += n;
    return rc;
}

int64_t gguf_fwd_ctx_n_past(const gguf_fwd_ctx *c)
{
    if (!c)
        return 0;
    return c->be->n_past ? c->be->n_past(c->impl) : c->n_given;
}

void gguf_fwd_ctx_stats(const gguf_fwd_ctx *c, gguf_fwd_stats *out)
{
    if (!c || !out)
        return;
    memset(out, 0, sizeof *out);
    if (c->be->stats)
        c->be->stats(c->impl, out);
    out->seconds = c->seconds;
}

const gguf_model *gguf_fwd_ctx_model(const gguf_fwd_ctx *c)
{
    return c ? c->m : NULL;
}

const char *gguf_fwd_ctx_backend(const gguf_fwd_ctx *c)
{
    return c && c->be->name ? c->be->name : "";
}

int gguf_fwd_ctx_set_capture(gguf_fwd_ctx *c, gguf_fwd_capture_fn fn, void *user)
{
    if (!c || !c->be->set_capture)
        return GGUF_E_UNSUPPORTED;
    return c->be->set_capture(c->impl, fn, user);
}

int64_t gguf_fwd_argmax(const float *row, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (row[i] > row[best])
            best = i;
    return best;
}

/* ------------------------------------------------------------ greedy decoding */

void gguf_fwd_generation_free(gguf_fwd_generation *g)
{
    if (!g)
        return;
    free(g->ids);
    free(g->logits);
    memset(g, 0, sizeof *g);
}

int gguf_fwd_generate(gguf_fwd_ctx *c, const int32_t *tokens, int64_t n, int64_t n_predict,
                      int32_t eos, bool keep_logits, gguf_fwd_generation *out, gguf_error *err)
{
    memset(out, 0, sizeof *out);
    if (!c || n < 1 || n_predict < 0)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "forward: no tokens");
    const int64_t V = gguf_model_hparams(c->m)->n_vocab;
    const int64_t rows = keep_logits ? n + (n_predict > 1 ? n_predict - 1 : 0) : n;
    float *lg = malloc((size_t)(rows * V) * sizeof(float) + 1);
    out->ids = malloc((size_t)(n_predict + 1) * sizeof(int32_t));
    if (!lg || !out->ids) {
        free(lg);
        gguf_fwd_generation_free(out);
        return fw_nomem(err, "logits");
    }
    int rc = gguf_fwd_eval(c, tokens, n, lg, err);
    int64_t at = n; /* rows filled */
    const float *last = lg + (n - 1) * V;
    for (int64_t k = 0; !rc && k < n_predict; k++) {
        const int32_t next = (int32_t)gguf_fwd_argmax(last, V);
        out->ids[out->n_ids++] = next;
        if (next == eos || k + 1 == n_predict)
            break;
        float *row = keep_logits ? lg + at * V : lg;
        rc = gguf_fwd_eval(c, &next, 1, row, err);
        at++;
        last = row;
    }
    if (rc) {
        free(lg);
        gguf_fwd_generation_free(out);
        return rc;
    }
    if (keep_logits) {
        out->logits = lg;
        out->n_rows = at;
    } else {
        free(lg);
    }
    return 0;
}
