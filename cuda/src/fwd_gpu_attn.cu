/* Attention of the GPU executor (fwd_gpu.h), one GPU and a rank alike:
 * GQA and MLA with the steps, capture points and common-part rules of the
 * CPU's forward_attn.c. Shapes come from the weights (the file's, or the
 * rank's slices), so a rank computes its heads and a broken plan breaks the
 * GPU where it breaks the CPU. */
#include "cuda_internal.h"

#include <stdlib.h>
#include <string.h>

extern "C" {
#include "gguf/model.h"
}
#include "fwd_common.h"
#include "fwd_cuda_internal.h"
#include "fwd_gpu.h"

static int gx_heads_fail(const gx *c, int64_t il, gguf_error *err)
{
    return gguf_fail(err, GGUF_E_BAD_SHAPE, GGUF_NO_OFFSET,
                     "cuda forward: blk.%lld rank %d holds less than one head", (long long)il,
                     c->r);
}

/* ------------------------------------------------------------ GQA */

typedef struct gx_gqa_w {
    gx_w q, k, v, bq, bk, bv, qn, kn, o;
} gx_gqa_w;

static void gx_gqa_release(gx *c, gx_gqa_w *w)
{
    gx_w *all[] = {&w->q, &w->k, &w->v, &w->bq, &w->bk, &w->bv, &w->qn, &w->kn, &w->o};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        gx_release(c, all[i]);
}

static int gx_gqa_get(gx *c, int64_t il, gx_gqa_w *w, gguf_error *err)
{
    memset(w, 0, sizeof *w);
    const struct {
        gx_w *w;
        gguf_role role;
        bool need;
    } list[] = {
        {&w->q, GGUF_ROLE_ATTN_Q, true},          {&w->k, GGUF_ROLE_ATTN_K, true},
        {&w->v, GGUF_ROLE_ATTN_V, true},          {&w->bq, GGUF_ROLE_ATTN_Q_BIAS, false},
        {&w->bk, GGUF_ROLE_ATTN_K_BIAS, false},   {&w->bv, GGUF_ROLE_ATTN_V_BIAS, false},
        {&w->qn, GGUF_ROLE_ATTN_Q_NORM, false},   {&w->kn, GGUF_ROLE_ATTN_K_NORM, false},
        {&w->o, GGUF_ROLE_ATTN_OUT, true},
    };
    for (size_t i = 0; i < sizeof list / sizeof *list; i++) {
        int rc = gx_get(c, il, list[i].role, list[i].w, 0, NULL, 0, err);
        if (!rc && list[i].need)
            rc = gx_need(list[i].w, il, list[i].role, err);
        if (rc)
            return rc;
    }
    return 0;
}

static int gx_attn_gqa(gx *c, int64_t il, const double *cs, const float *cur, int64_t n,
                       float *out, gguf_error *err)
{
    const gguf_hparams *hp = c->hp;
    const int64_t E = hp->n_embd, dk = hp->n_embd_head_k, dv = hp->n_embd_head_v;
    const fw_rope *rp = &c->rt.rope;
    gx_gqa_w w;
    float *q = NULL, *o = NULL;
    double *scr = NULL;
    int rc;
    if ((rc = gx_gqa_get(c, il, &w, err)))
        goto done;
    {
        const int64_t nh = gx_rows(&w.q) / dk, nkv = gx_rows(&w.k) / dk, vw = gx_rows(&w.v);
        if (nh < 1 || nkv < 1) {
            rc = gx_heads_fail(c, il, err);
            goto done;
        }
        if ((rc = gx_cache_reserve(c, il, nkv * dk, vw, c->n_past + n, err)) ||
            (rc = gx_alloc(c, &q, (size_t)(n * nh * dk) * sizeof(float), err)) ||
            (rc = gx_zalloc(c, &o, (size_t)(n * nh * dv) * sizeof(float), err)) ||
            (rc = gx_alloc(c, &scr, (size_t)(n * nh * (c->n_past + n)) * sizeof(double), err)))
            goto done;
        const gx_cache *L = &c->lc[il];
        float *kc = L->k + c->n_past * L->kw, *vc = L->v + c->n_past * L->vw;
        if ((rc = gx_mm(c, q, nh * dk, cur, E, &w.q, &w.bq, n, err)) ||
            (rc = gx_mm(c, kc, L->kw, cur, E, &w.k, &w.bk, n, err)) ||
            (rc = gx_mm(c, vc, L->vw, cur, E, &w.v, &w.bv, n, err)))
            goto done;
        if (gx_has(&w.qn) && (rc = gx_norm(c, q, q, n, nh, dk, nh * dk, dk, &w.qn, err)))
            goto done;
        if (gx_has(&w.kn) && (rc = gx_norm(c, kc, kc, n, nkv, dk, L->kw, dk, &w.kn, err)))
            goto done;
        const int halfp = rp->type == GGUF_ROPE_HALF;
        fk_rope(q, n, nh, nh * dk, dk, cs, rp->n_rot / 2, halfp, c->ks);
        fk_rope(kc, n, nkv, L->kw, dk, cs, rp->n_rot / 2, halfp, c->ks);
        /* a rank whose value slice is narrower than its heads (a broken
         * plan) has no attention output: o stays zero, as on the CPU */
        const int64_t dvh = vw / nkv;
        if (dvh >= dv) {
            fk_attn_args a = {o, nh * dv, q, nh * dk, dk, L->k, L->kw, dk, L->v, L->vw, dvh,
                              n, nh, nkv, dk, dv, c->n_past, c->rt.kq_scale, scr};
            fk_attn(&a, c->ks);
            GC_GOTO(err, cudaGetLastError());
        }
        rc = gx_mm(c, out, E, o, nh * dv, &w.o, NULL, n, err);
    }
done:
    gx_dfree(c, q);
    gx_dfree(c, o);
    gx_dfree(c, scr);
    gx_gqa_release(c, &w);
    return rc;
}

/* ------------------------------------------------------------ MLA */

/* One batched GEMM per MLA expansion: for each head h,
 * C_h (m x nk, ldc) = op(A_h) (m x R) . lat^T (R x nk, rows KW apart). */
static int gx_expand(gx *c, bool trans, const float *A, int64_t lda, int64_t strideA,
                     const float *lat, int64_t KW, int64_t R, int64_t nk, int64_t m, float *C,
                     int64_t ldc, int64_t strideC, int64_t nh, gguf_error *err)
{
    const float one = 1.0f, zero = 0.0f;
    const cublasStatus_t s = cublasSgemmStridedBatched(
        c->blas, trans ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, (int)m, (int)nk, (int)R, &one, A,
        (int)lda, strideA, lat, (int)KW, 0, &zero, C, (int)ldc, strideC, (int)nh);
    return s == CUBLAS_STATUS_SUCCESS ? 0 : fwd_blas_fail(err, s, "MLA expansion");
}

/* kv_b of a layer on the device, in one of two layouts: k_b [nh][R][nope]
 * and v_b [nh][dv][R] (the file's attn_k_b/attn_v_b, or a rank's kv_b_proj
 * slice split as the CPU's mla_kv_b does, cut or zero-filled to its heads),
 * or the file's legacy attn_kv_b [nh][nope+dv][R] as it is. */
typedef struct gx_kv_b {
    gx_w tk, tv, tkv; /* the weights (released at the end) */
    float *kb, *vb;   /* split layout */
    float *kv;        /* legacy layout */
    bool own_split;   /* kb/vb are this struct's buffers (a rank's split) */
} gx_kv_b;

static void gx_kv_b_release(gx *c, gx_kv_b *k)
{
    if (k->own_split) {
        gx_dfree(c, k->kb);
        gx_dfree(c, k->vb);
    } else {
        gx_release_dev(c, &k->tk, k->kb);
        gx_release_dev(c, &k->tv, k->vb);
    }
    gx_release_dev(c, &k->tkv, k->kv);
    gx_release(c, &k->tk);
    gx_release(c, &k->tv);
    gx_release(c, &k->tkv);
}

/* A rank's kv_b_proj slice ([heads*(nope+dv)][R'] on the host) split into
 * kb/vb on the device; a slice of other sizes fills what it covers. */
static int gx_kv_b_split(gx *c, gx_kv_b *k, int64_t nh, int64_t R, int64_t nope, int64_t dv,
                         gguf_error *err)
{
    const int64_t Rb = k->tkv.ne[0], hb = gx_rows(&k->tkv) / (nope + dv);
    const int64_t Ru = Rb < R ? Rb : R;
    float *fit = (float *)calloc((size_t)(nh * (nope + dv) * R) + 1, sizeof(float));
    float *hk = (float *)malloc((size_t)(nh * R * nope) * sizeof(float) + 1);
    float *hv = (float *)malloc((size_t)(nh * dv * R) * sizeof(float) + 1);
    int rc = 0;
    if (!fit || !hk || !hv) {
        rc = fw_nomem(err, "kv_b");
        goto done;
    }
    for (int64_t h = 0; h < nh && h < hb; h++)
        for (int64_t j = 0; j < nope + dv; j++)
            memcpy(fit + (h * (nope + dv) + j) * R, k->tkv.h + (h * (nope + dv) + j) * Rb,
                   (size_t)Ru * sizeof(float));
    gguf_mla_kv_b_split(fit, nh, R, nope, dv, hk, hv);
    k->own_split = true;
    if ((rc = gx_alloc(c, &k->kb, (size_t)(nh * R * nope) * sizeof(float), err)) ||
        (rc = gx_alloc(c, &k->vb, (size_t)(nh * dv * R) * sizeof(float), err)))
        goto done;
    /* pageable copies are staged before they return: the host arrays may go */
    GC_GOTO(err, cudaMemcpyAsync(k->kb, hk, (size_t)(nh * R * nope) * sizeof(float),
                                 cudaMemcpyHostToDevice, c->ks));
    GC_GOTO(err, cudaMemcpyAsync(k->vb, hv, (size_t)(nh * dv * R) * sizeof(float),
                                 cudaMemcpyHostToDevice, c->ks));
done:
    free(fit);
    free(hk);
    free(hv);
    return rc;
}

static int gx_kv_b_get(gx *c, int64_t il, int64_t nh, int64_t R, int64_t nope, int64_t dv,
                       gx_kv_b *k, gguf_error *err)
{
    memset(k, 0, sizeof *k);
    int rc;
    if (c->plan) {
        if ((rc = gx_get(c, il, GGUF_ROLE_ATTN_KV_B, &k->tkv, GX_HOST, NULL, 0, err)) ||
            (rc = gx_need(&k->tkv, il, GGUF_ROLE_ATTN_KV_B, err)))
            return rc;
        return gx_kv_b_split(c, k, nh, R, nope, dv, err);
    }
    if ((rc = gx_get(c, il, GGUF_ROLE_ATTN_K_B, &k->tk, 0, NULL, 0, err)) ||
        (rc = gx_get(c, il, GGUF_ROLE_ATTN_V_B, &k->tv, 0, NULL, 0, err)))
        return rc;
    if (gx_has(&k->tk) && gx_has(&k->tv)) {
        if ((rc = gx_on_device(c, &k->tk, &k->kb, err)))
            return rc;
        return gx_on_device(c, &k->tv, &k->vb, err);
    }
    if ((rc = gx_get(c, il, GGUF_ROLE_ATTN_KV_B, &k->tkv, 0, NULL, 0, err)))
        return rc;
    if (!gx_has(&k->tkv))
        return fw_missing(il, GGUF_ROLE_ATTN_K_B, err);
    return gx_on_device(c, &k->tkv, &k->kv, err);
}

/* Keys kx [nk][nh][dk] (nope from kv_b, k_pe from the cache) and values
 * vx [nk][nh][dv] of every cached position. */
static int gx_kv_expand(gx *c, const gx_kv_b *k, const float *lat, int64_t KW, int64_t R,
                        int64_t nk, int64_t nh, int64_t nope, int64_t rope, int64_t dv, float *kx,
                        float *vx, gguf_error *err)
{
    const int64_t dk = nope + rope;
    int rc;
    if (k->kv) { /* legacy attn_kv_b: rows h*(nope+dv)+j */
        if ((rc = gx_expand(c, true, k->kv, R, (nope + dv) * R, lat, KW, R, nk, nope, kx, nh * dk,
                            dk, nh, err)) ||
            (rc = gx_expand(c, true, k->kv + nope * R, R, (nope + dv) * R, lat, KW, R, nk, dv, vx,
                            nh * dv, dv, nh, err)))
            return rc;
    } else if ((rc = gx_expand(c, false, k->kb, nope, R * nope, lat, KW, R, nk, nope, kx, nh * dk,
                               dk, nh, err)) ||
               (rc = gx_expand(c, true, k->vb, R, dv * R, lat, KW, R, nk, dv, vx, nh * dv, dv, nh,
                               err))) {
        return rc;
    }
    /* k_pe of each position, the same for every head */
    for (int64_t h = 0; h < nh; h++)
        GC_TRY(err, cudaMemcpy2DAsync(kx + h * dk + nope, (size_t)(nh * dk) * sizeof(float),
                                      lat + R, (size_t)KW * sizeof(float),
                                      (size_t)rope * sizeof(float), (size_t)nk,
                                      cudaMemcpyDeviceToDevice, c->ks));
    return 0;
}

/* glm-dsa: the indexer keeps every key while a query sees at most top-k;
 * the GPU runs it dense only. */
static int gx_indexer_check(const gx *c, int64_t il, int64_t nk_all, gguf_error *err)
{
    const gguf_hparams *hp = c->hp;
    if (!gguf_model_get(c->m, il, GGUF_ROLE_IDX_ATTN_K) ||
        !gguf_model_get(c->m, il, GGUF_ROLE_IDX_ATTN_Q_B) ||
        !gguf_model_get(c->m, il, GGUF_ROLE_IDX_PROJ) || hp->q_lora_rank <= 0 ||
        c->o.dense_indexer)
        return 0;
    const int64_t top_k = c->o.idx_top_k > 0 ? c->o.idx_top_k : hp->idx_top_k;
    if (top_k > 0 && nk_all > top_k)
        return gguf_fail(err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                         "%s: cuda: the glm-dsa indexer would select %lld of %lld keys; the "
                         "GPU backend runs it dense only (use --dense-indexer or at most %lld "
                         "tokens)",
                         gguf_model_name(c->m), (long long)top_k, (long long)nk_all,
                         (long long)top_k);
    return 0;
}

typedef struct gx_mla_w {
    gx_w qa, qan, qb, q, kva, kvan, o;
} gx_mla_w;

static void gx_mla_release(gx *c, gx_mla_w *w)
{
    gx_w *all[] = {&w->qa, &w->qan, &w->qb, &w->q, &w->kva, &w->kvan, &w->o};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        gx_release(c, all[i]);
}

static int gx_mla_get(gx *c, int64_t il, gx_mla_w *w, gguf_error *err)
{
    memset(w, 0, sizeof *w);
    int rc;
    if ((rc = gx_get(c, il, GGUF_ROLE_ATTN_Q_A, &w->qa, 0, NULL, 0, err)) ||
        (rc = gx_get(c, il, GGUF_ROLE_ATTN_Q_A_NORM, &w->qan, 0, NULL, 0, err)) ||
        (rc = gx_get(c, il, GGUF_ROLE_ATTN_Q_B, &w->qb, 0, NULL, 0, err)) ||
        (rc = gx_get(c, il, GGUF_ROLE_ATTN_Q, &w->q, 0, NULL, 0, err)) ||
        (rc = gx_get(c, il, GGUF_ROLE_ATTN_KV_A_MQA, &w->kva, 0, NULL, 0, err)) ||
        (rc = gx_get(c, il, GGUF_ROLE_ATTN_KV_A_NORM, &w->kvan, 0, NULL, 0, err)) ||
        (rc = gx_get(c, il, GGUF_ROLE_ATTN_OUT, &w->o, 0, NULL, 0, err)))
        return rc;
    if (gx_has(&w->qb))
        rc = gx_need(&w->qa, il, GGUF_ROLE_ATTN_Q_A, err);
    else
        rc = gx_need(&w->q, il, GGUF_ROLE_ATTN_Q, err);
    if (!rc)
        rc = gx_need(&w->kva, il, GGUF_ROLE_ATTN_KV_A_MQA, err);
    if (!rc)
        rc = gx_need(&w->o, il, GGUF_ROLE_ATTN_OUT, err);
    return rc;
}

/* q [n][nh][dk]: through the q LoRA (q_a, its norm, q_b) or one q matmul. */
static int gx_mla_q(gx *c, const gx_mla_w *w, const float *cur, int64_t n, int64_t nh,
                    int64_t dk, float *q, gguf_error *err)
{
    const int64_t E = c->hp->n_embd;
    if (!gx_has(&w->qb))
        return gx_mm(c, q, nh * dk, cur, E, &w->q, NULL, n, err);
    const int64_t ql = gx_rows(&w->qa);
    float *qr = NULL;
    int rc;
    if (!(rc = gx_alloc(c, &qr, (size_t)(n * ql) * sizeof(float), err)) &&
        !(rc = gx_mm(c, qr, ql, cur, E, &w->qa, NULL, n, err)) &&
        !(rc = gx_norm(c, qr, qr, n, 1, ql, ql, 0, &w->qan, err)))
        rc = gx_mm(c, q, nh * dk, qr, ql, &w->qb, NULL, n, err);
    gx_dfree(c, qr);
    return rc;
}

static int gx_attn_mla(gx *c, int64_t il, const double *cs, const float *cur, int64_t n,
                       float *out, gguf_error *err)
{
    const gguf_hparams *hp = c->hp;
    const int64_t E = hp->n_embd, nope = hp->qk_nope, rope = hp->qk_rope, dk = nope + rope,
                  dv = hp->v_head, nk_all = c->n_past + n;
    const fw_rope *rp = &c->rt.rope;
    gx_mla_w w;
    gx_kv_b kvb;
    memset(&kvb, 0, sizeof kvb);
    float *q = NULL, *o = NULL, *kx = NULL, *vx = NULL;
    double *scr = NULL;
    int rc;
    if ((rc = gx_mla_get(c, il, &w, err)) || (rc = gx_indexer_check(c, il, nk_all, err)))
        goto done;
    {
        const int64_t nh = gx_rows(gx_has(&w.qb) ? &w.qb : &w.q) / dk, KW = gx_rows(&w.kva),
                      R = KW - rope;
        if (nh < 1 || R < 1) {
            rc = gx_heads_fail(c, il, err);
            goto done;
        }
        if ((rc = gx_cache_reserve(c, il, KW, 0, nk_all, err)) ||
            (rc = gx_alloc(c, &q, (size_t)(n * nh * dk) * sizeof(float), err)) ||
            (rc = gx_alloc(c, &o, (size_t)(n * nh * dv) * sizeof(float), err)) ||
            (rc = gx_mla_q(c, &w, cur, n, nh, dk, q, err)))
            goto done;
        const gx_cache *L = &c->lc[il];
        float *lat = L->k + c->n_past * KW;
        if ((rc = gx_mm(c, lat, KW, cur, E, &w.kva, NULL, n, err)) ||
            (rc = gx_norm(c, lat, lat, n, 1, R, KW, 0, &w.kvan, err)))
            goto done;
        const int halfp = rp->type == GGUF_ROPE_HALF;
        fk_rope(lat + R, n, 1, KW, 0, cs, rp->n_rot / 2, halfp, c->ks);
        fk_rope(q + nope, n, nh, nh * dk, dk, cs, rp->n_rot / 2, halfp, c->ks);
        /* kv_b expanded per head for every cached position */
        if ((rc = gx_kv_b_get(c, il, nh, R, nope, dv, &kvb, err)) ||
            (rc = gx_alloc(c, &kx, (size_t)(nk_all * nh * dk) * sizeof(float), err)) ||
            (rc = gx_alloc(c, &vx, (size_t)(nk_all * nh * dv) * sizeof(float), err)) ||
            (rc = gx_kv_expand(c, &kvb, L->k, KW, R, nk_all, nh, nope, rope, dv, kx, vx, err)) ||
            (rc = gx_alloc(c, &scr, (size_t)(n * nh * nk_all) * sizeof(double), err)))
            goto done;
        fk_attn_args a = {o, nh * dv, q, nh * dk, dk, kx, nh * dk, dk, vx, nh * dv, dv,
                          n, nh, nh, dk, dv, c->n_past, c->rt.kq_scale, scr};
        fk_attn(&a, c->ks);
        GC_GOTO(err, cudaGetLastError());
        rc = gx_mm(c, out, E, o, nh * dv, &w.o, NULL, n, err);
    }
done:
    gx_kv_b_release(c, &kvb);
    gx_dfree(c, q);
    gx_dfree(c, o);
    gx_dfree(c, kx);
    gx_dfree(c, vx);
    gx_dfree(c, scr);
    gx_mla_release(c, &w);
    return rc;
}

int gx_attention(gx *c, int64_t il, const double *cs, const float *cur, int64_t n, float *out,
                 bool *reduce, gguf_error *err)
{
    *reduce = false;
    if (c->plan) /* each rank's heads write their share of out */
        GC_TRY(err, cudaMemsetAsync(out, 0, (size_t)(n * c->hp->n_embd) * sizeof(float), c->ks));
    int rc = c->hp->is_mla ? gx_attn_mla(c, il, cs, cur, n, out, err)
                           : gx_attn_gqa(c, il, cs, cur, n, out, err);
    if (rc || !c->plan)
        return rc;
    const gguf_shard_tensor *eo = gguf_shard_plan_get(c->plan, il, GGUF_ROLE_ATTN_OUT);
    *reduce = eo ? eo->reduce_sum : true;
    return 0;
}
