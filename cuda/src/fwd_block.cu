/* The block loop of the GPU forward pass: see fwd_block.h. The order of the
 * ops, captures, reduces and residual adds here is the numerics of both GPU
 * executors; it follows libgguf/src/forward/forward_exec.c step by step. */
#include "fwd_block.h"

#include "fwd_cuda_internal.h"

/* A reduce where the op's output is a partial sum and there are ranks. */
static int fb_reduce(const fb_exec *e, float *buf, int64_t len, bool reduce, gguf_error *err)
{
    return reduce && e->ops->reduce ? e->ops->reduce(e->ctx, buf, len, err) : 0;
}

static void fb_measure(const fb_exec *e)
{
    if (e->ops->measure)
        e->ops->measure(e->ctx);
}

static int fb_block(const fb_exec *e, int64_t il, int64_t n, gguf_error *err)
{
    const fb_ops *o = e->ops;
    void *cx = e->ctx;
    const int64_t E = gguf_model_hparams(e->m)->n_embd;
    const int L = (int)il;
    bool red = true;
    int rc;
    if ((rc = o->norm(cx, il, GGUF_ROLE_ATTN_NORM, GGUF_ROLE_UNKNOWN, e->cur, e->x, n, err)) ||
        (rc = o->capture(cx, L, GGUF_CAP_ATTN_NORM, e->cur, NULL, E, n, err)) ||
        (rc = o->attention(cx, il, e->cur, n, e->part, &red, err)) ||
        (rc = fb_reduce(e, e->part, n * E, red, err)) ||
        (rc = o->capture(cx, L, GGUF_CAP_ATTN_OUT, e->part, NULL, E, n, err)))
        return rc;
    fk_add(e->x, e->part, n * E, e->s);
    if ((rc = o->capture(cx, L, GGUF_CAP_ATTN_RESIDUAL, e->x, NULL, E, n, err)) ||
        (rc = o->norm(cx, il, GGUF_ROLE_FFN_NORM, GGUF_ROLE_ATTN_POST_NORM, e->cur, e->x, n,
                      err)) ||
        (rc = o->capture(cx, L, GGUF_CAP_FFN_NORM, e->cur, NULL, E, n, err)))
        return rc;
    fb_ffn_out f = {e->part, e->part2, true, true, false};
    const bool moe = gguf_model_layer_kind(e->m, il) == GGUF_LAYER_MOE;
    if ((rc = o->ffn(cx, il, moe, e->cur, n, &f, err)) ||
        (rc = fb_reduce(e, f.routed, n * E, f.reduce_routed, err)))
        return rc;
    if (f.has_shared) {
        if ((rc = fb_reduce(e, f.shared, n * E, f.reduce_shared, err)))
            return rc;
        fk_add(f.routed, f.shared, n * E, e->s);
    }
    if ((rc = o->capture(cx, L, GGUF_CAP_FFN_OUT, e->part, NULL, E, n, err)))
        return rc;
    fk_add(e->x, e->part, n * E, e->s);
    if ((rc = o->capture(cx, L, GGUF_CAP_RESIDUAL, e->x, NULL, E, n, err)))
        return rc;
    fb_measure(e);
    return 0;
}

int fb_run(const fb_exec *e, const int32_t *tokens, int64_t n, float *logits_out,
           gguf_error *err)
{
    const fb_ops *o = e->ops;
    void *cx = e->ctx;
    const gguf_hparams *hp = gguf_model_hparams(e->m);
    const int64_t E = hp->n_embd;
    int rc;
    if ((rc = o->embed(cx, tokens, n, e->x, e->part, err)))
        return rc;
    for (int64_t il = 0; il < hp->n_layer_main; il++)
        if ((rc = fb_block(e, il, n, err)))
            return rc;
    fb_logits lg = {NULL, NULL};
    if ((rc = o->norm(cx, -1, GGUF_ROLE_OUTPUT_NORM, GGUF_ROLE_UNKNOWN, e->cur, e->x, n, err)) ||
        (rc = o->capture(cx, -1, GGUF_CAP_OUTPUT_NORM, e->cur, NULL, E, n, err)) ||
        (rc = o->head(cx, e->cur, n, &lg, err)) ||
        (rc = o->capture(cx, -1, GGUF_CAP_LOGITS, lg.dev, lg.host, hp->n_vocab, n, err)))
        return rc;
    fb_measure(e);
    return o->logits(cx, &lg, n, logits_out, err);
}
