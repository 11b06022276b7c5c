/*
 * One rank of the tensor-parallel forward on a GPU (ggufkit_cuda/forward_cuda_tp.h):
 * the CPU's virtual rank r (libgguf/src/forward/forward_exec.c, forward_attn.c,
 * forward_ffn.c) on the block loop of fwd_block.h, with device buffers, cuBLAS
 * and the kernels of fwd_kernels.cu, and NCCL where the CPU simulates the
 * collectives. The structure follows those files function by function so
 * that the two can be read side by side; where a broken plan makes widths
 * disagree, the same common-part rules apply.
 */
#include "cuda_internal.h"

#include <cublas_v2.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern "C" {
#include "util/cpus.h"
#include "forward/forward_setup.h"
}
#include "fwd_block.h"
#include "fwd_common.h"
#include "fwd_cuda_internal.h"
#include "fwd_dl.h"
#include "fwd_stream.h"
#include "ggufkit_cuda/forward_cuda_tp.h"

typedef struct tc_cache {
    float *k, *v;
    int64_t kw, vw, cap;
} tc_cache;

struct gguf_cuda_tp {
    fw_setup set;  /* checks, RoPE set-up: shared with the CPU (forward_setup.h) */
    fw_runtime rt; /* the plan's engine runtime over the model's settings */
    const gguf_model *m;
    const gguf_hparams *hp;
    const gguf_shard_plan *plan;
    gguf_nccl_comm *comm;
    gguf_fwd_opts o;
    int r, tp, device;
    cudaStream_t s;
    fs_streamer *fs; /* slices stream and are cut on the GPU */
    cublasHandle_t blas;
    cudaMemPool_t pool; /* the device's default pool (the RoPE table) */
    tc_cache *lc;
    int64_t n_past;
};

/* A rank's weight on the device (F32), with its slice shape. */
typedef struct tw {
    float *d;
    float *h; /* host copy, kept only where asked */
    int64_t ne[4];
    int64_t n;
    const gguf_shard_tensor *e;
} tw;

static void tw_free(tw *w)
{
    cudaFree(w->d);
    free(w->h);
    memset(w, 0, sizeof *w);
}

static int tc_blas(gguf_error *err, cublasStatus_t st, const char *what)
{
    return st == CUBLAS_STATUS_SUCCESS ? 0 : fwd_blas_fail(err, st, what);
}

static int tc_alloc(float **p, int64_t n, gguf_error *err)
{
    *p = NULL;
    int rc = 0;
    GC_GOTO(err, cudaMalloc((void **)p, (size_t)(n > 0 ? n : 1) * sizeof(float)));
    GC_GOTO(err, cudaMemset(*p, 0, (size_t)(n > 0 ? n : 1) * sizeof(float)));
done:
    if (rc) {
        cudaFree(*p);
        *p = NULL;
    }
    return rc;
}

/* The plan's slice of (il, role) for this rank on the device; an absent
 * entry leaves w empty (d == NULL), as tp_get does. The slice is built on the
 * GPU from the streamed quantized rows (fs_materialize), only the slabs in
 * keep when given (an expert tensor's routed experts); keep_host builds it
 * on the host instead and keeps the host copy (small vectors read there). */
static int tc_get_some(gguf_cuda_tp *c, int64_t il, gguf_role role, tw *w, bool keep_host,
                       const bool *keep, int64_t n_keep, gguf_error *err)
{
    memset(w, 0, sizeof *w);
    const gguf_shard_tensor *e = gguf_shard_plan_get(c->plan, il, role);
    if (!e)
        return 0;
    int64_t idx = 0;
    for (; idx < gguf_shard_plan_count(c->plan); idx++)
        if (gguf_shard_plan_at(c->plan, idx) == e)
            break;
    const gguf_shard_slice *sl = &e->ranks[c->r];
    int64_t n = 1;
    for (int d = 0; d < 4; d++) {
        w->ne[d] = sl->ne[d] > 0 ? sl->ne[d] : 1;
        n *= w->ne[d];
    }
    int rc = tc_alloc(&w->d, n, err);
    if (rc)
        return rc;
    if (!keep_host) {
        rc = fs_materialize(c->fs, c->plan, idx, c->r, w->d, n, keep, n_keep, err);
    } else {
        w->h = (float *)malloc((size_t)n * sizeof(float) + 4);
        if (!w->h)
            rc = fw_nomem(err, e->name);
        if (!rc)
            rc = gguf_shard_materialize(c->plan, idx, c->r, w->h, (size_t)n, err);
        if (!rc) {
            cudaError_t ce = cudaMemcpy(w->d, w->h, (size_t)n * sizeof(float),
                                        cudaMemcpyHostToDevice);
            if (ce != cudaSuccess)
                rc = gguf_cuda_fail(err, ce, "weight upload");
        }
    }
    if (rc) {
        tw_free(w);
        return rc;
    }
    w->n = n;
    w->e = e;
    return 0;
}

static int tc_get(gguf_cuda_tp *c, int64_t il, gguf_role role, tw *w, bool keep_host,
                  gguf_error *err)
{
    return tc_get_some(c, il, role, w, keep_host, NULL, 0, err);
}

/* A vector weight of length want: the slice, zero-filled or cut (fitv). */
static int tc_fitv(const tw *w, int64_t want, float **out, gguf_error *err)
{
    int rc = tc_alloc(out, want, err);
    if (!rc && w->d)
        GC_GOTO(err, cudaMemcpy(*out, w->d, (size_t)(w->n < want ? w->n : want) * sizeof(float),
                                cudaMemcpyDeviceToDevice));
done:
    if (rc) {
        cudaFree(*out);
        *out = NULL;
    }
    return rc;
}

/* y [n][n_out] (rows ys apart) = x [n][xw] . W^T, W ne = [n_in, n_out]; when
 * xw != n_in the common part of x is used (tp_mm). bias may be NULL. */
static int tc_mm(gguf_cuda_tp *c, float *y, int64_t ys, const float *x, int64_t xw, const tw *w,
                 const tw *bias, int64_t n, gguf_error *err)
{
    const int64_t n_in = w->ne[0], n_out = w->ne[1] * w->ne[2] * w->ne[3];
    if (!ys)
        ys = n_out;
    const float *xx = x;
    float *tmp = NULL;
    int rc = 0;
    if (xw != n_in) {
        if ((rc = tc_alloc(&tmp, n * n_in, err)))
            return rc;
        const int64_t cw = xw < n_in ? xw : n_in;
        cudaError_t ce = cudaMemcpy2DAsync(tmp, (size_t)n_in * sizeof(float), x,
                                           (size_t)xw * sizeof(float), (size_t)cw * sizeof(float),
                                           (size_t)n, cudaMemcpyDeviceToDevice, c->s);
        if (ce != cudaSuccess) {
            cudaFree(tmp);
            return gguf_cuda_fail(err, ce, "tp matmul input");
        }
        xx = tmp;
    }
    const float one = 1.0f, zero = 0.0f;
    rc = tc_blas(err, cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)n_out, (int)n, (int)n_in,
                                  &one, w->d, (int)n_in, xx, (int)n_in, &zero, y, (int)ys),
                 "sgemm");
    if (!rc && bias && bias->d) {
        float *b = NULL;
        if (!(rc = tc_fitv(bias, n_out, &b, err)))
            fk_add_bias(y, b, n, n_out, ys, c->s);
        cudaStreamSynchronize(c->s);
        cudaFree(b);
    }
    cudaStreamSynchronize(c->s);
    cudaFree(tmp);
    return rc;
}

static int tc_norm(gguf_cuda_tp *c, float *y, const float *x, int64_t n, int64_t width,
                   int64_t stride, const tw *w, gguf_error *err)
{
    float *wf = NULL;
    int rc;
    if (w->d && (rc = tc_fitv(w, width, &wf, err)))
        return rc;
    fk_rmsnorm(y, x, wf, n, 1, width, stride, 0, c->hp->rms_eps, c->s);
    cudaStreamSynchronize(c->s);
    cudaFree(wf);
    return 0;
}

static int tc_capture(gguf_cuda_tp *c, int layer, gguf_capture_point p, const float *dev,
                      const float *host, int64_t width, int64_t n, gguf_error *err)
{
    if (!c->o.capture)
        return 0;
    float *f = (float *)malloc((size_t)(width * n) * sizeof(float) + 1);
    if (!f)
        return fw_nomem(err, "capture");
    if (host) {
        memcpy(f, host, (size_t)(width * n) * sizeof(float));
    } else {
        cudaError_t ce = cudaMemcpyAsync(f, dev, (size_t)(width * n) * sizeof(float),
                                         cudaMemcpyDeviceToHost, c->s);
        if (ce == cudaSuccess)
            ce = cudaStreamSynchronize(c->s);
        if (ce != cudaSuccess) {
            free(f);
            return gguf_cuda_fail(err, ce, "capture copy");
        }
    }
    int rc = fw_emit(c->o.capture, c->o.capture_user, layer, p, c->r, f, width, n, c->n_past,
                     err);
    free(f);
    return rc;
}

static int tc_cache_reserve(gguf_cuda_tp *c, tc_cache *L, int64_t kw, int64_t vw, int64_t need,
                            gguf_error *err)
{
    if (L->k && (L->kw != kw || L->vw != vw))
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "cuda tp: a rank's KV width changed between evals");
    if (L->k && need <= L->cap)
        return 0;
    int64_t cap = L->cap ? L->cap : 64;
    while (cap < need)
        cap *= 2;
    float *k = NULL, *v = NULL;
    int rc = tc_alloc(&k, cap * kw, err);
    if (!rc && vw)
        rc = tc_alloc(&v, cap * vw, err);
    if (rc)
        goto done;
    if (L->k)
        GC_GOTO(err, cudaMemcpy(k, L->k, (size_t)(L->cap * kw) * sizeof(float),
                                cudaMemcpyDeviceToDevice));
    if (L->v)
        GC_GOTO(err, cudaMemcpy(v, L->v, (size_t)(L->cap * vw) * sizeof(float),
                                cudaMemcpyDeviceToDevice));
done:
    if (rc) {
        cudaFree(k);
        cudaFree(v);
        return rc;
    }
    cudaFree(L->k);
    cudaFree(L->v);
    L->k = k;
    L->v = v;
    L->kw = kw;
    L->vw = vw;
    L->cap = cap;
    return 0;
}

/* ---- attention of this rank: partial output of the out projection ---- */

static int tc_attn_gqa(gguf_cuda_tp *c, int64_t il, int pairs, double scale, const double *cs,
                       int64_t half, const float *cur, int64_t n, float *part, gguf_error *err)
{
    const gguf_hparams *hp = c->hp;
    const int64_t E = hp->n_embd, dk = hp->n_embd_head_k, dv = hp->n_embd_head_v;
    tw wq, wk, wv, bq, bk, bv, qn, kn, wo;
    memset(&wq, 0, sizeof wq);
    wk = wv = bq = bk = bv = qn = kn = wo = wq;
    float *q = NULL, *o = NULL;
    double *scr = NULL;
    int rc;
    if ((rc = tc_get(c, il, GGUF_ROLE_ATTN_Q, &wq, false, err)) ||
        (rc = tc_get(c, il, GGUF_ROLE_ATTN_K, &wk, false, err)) ||
        (rc = tc_get(c, il, GGUF_ROLE_ATTN_V, &wv, false, err)) ||
        (rc = tc_get(c, il, GGUF_ROLE_ATTN_Q_BIAS, &bq, false, err)) ||
        (rc = tc_get(c, il, GGUF_ROLE_ATTN_K_BIAS, &bk, false, err)) ||
        (rc = tc_get(c, il, GGUF_ROLE_ATTN_V_BIAS, &bv, false, err)) ||
        (rc = tc_get(c, il, GGUF_ROLE_ATTN_Q_NORM, &qn, false, err)) ||
        (rc = tc_get(c, il, GGUF_ROLE_ATTN_K_NORM, &kn, false, err)) ||
        (rc = tc_get(c, il, GGUF_ROLE_ATTN_OUT, &wo, false, err)))
        goto done;
    if (!wq.d || !wk.d || !wv.d || !wo.d) {
        rc = gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET, "cuda tp: blk.%lld: no q/k/v/o",
                       (long long)il);
        goto done;
    }
    {
        const int64_t nh = wq.ne[1] / dk, nkv = wk.ne[1] / dk, vw = wv.ne[1];
        if (nh < 1 || nkv < 1) {
            rc = gguf_fail(err, GGUF_E_BAD_SHAPE, GGUF_NO_OFFSET,
                           "cuda tp: blk.%lld rank %d holds less than one head", (long long)il,
                           c->r);
            goto done;
        }
        tc_cache *L = &c->lc[il];
        if ((rc = tc_cache_reserve(c, L, nkv * dk, vw, c->n_past + n, err)) ||
            (rc = tc_alloc(&q, n * nh * dk, err)) || (rc = tc_alloc(&o, n * nh * dv, err)))
            goto done;
        float *kc = L->k + c->n_past * L->kw, *vc = L->v + c->n_past * L->vw;
        if ((rc = tc_mm(c, q, nh * dk, cur, E, &wq, &bq, n, err)) ||
            (rc = tc_mm(c, kc, L->kw, cur, E, &wk, &bk, n, err)) ||
            (rc = tc_mm(c, vc, L->vw, cur, E, &wv, &bv, n, err)))
            goto done;
        if (qn.d) {
            float *f = NULL;
            if ((rc = tc_fitv(&qn, dk, &f, err)))
                goto done;
            fk_rmsnorm(q, q, f, n, nh, dk, nh * dk, dk, hp->rms_eps, c->s);
            cudaStreamSynchronize(c->s);
            cudaFree(f);
        }
        if (kn.d) {
            float *f = NULL;
            if ((rc = tc_fitv(&kn, dk, &f, err)))
                goto done;
            fk_rmsnorm(kc, kc, f, n, nkv, dk, L->kw, dk, hp->rms_eps, c->s);
            cudaStreamSynchronize(c->s);
            cudaFree(f);
        }
        fk_rope(q, n, nh, nh * dk, dk, cs, half, pairs == GGUF_ROPE_HALF, c->s);
        fk_rope(kc, n, nkv, L->kw, dk, cs, half, pairs == GGUF_ROPE_HALF, c->s);
        const int64_t dvh = vw / nkv; /* value width per kv head on this rank */
        if (dvh >= dv) {
            GC_GOTO(err, cudaMalloc((void **)&scr,
                                   (size_t)(n * nh * (c->n_past + n)) * sizeof(double)));
            fk_attn_args a = {o, nh * dv, q, nh * dk, dk, L->k, L->kw, dk, L->v, L->vw, dvh,
                              n, nh, nkv, dk, dv, c->n_past, scale, scr};
            fk_attn(&a, c->s);
            GC_GOTO(err, cudaGetLastError());
        }
        rc = tc_mm(c, part, E, o, nh * dv, &wo, NULL, n, err);
    }
done:
    cudaStreamSynchronize(c->s);
    cudaFree(q);
    cudaFree(o);
    cudaFree(scr);
    tw_free(&wq);
    tw_free(&wk);
    tw_free(&wv);
    tw_free(&bq);
    tw_free(&bk);
    tw_free(&bv);
    tw_free(&qn);
    tw_free(&kn);
    tw_free(&wo);
    return rc;
}

static int tc_attn_mla(gguf_cuda_tp *c, int64_t il, int pairs, double scale, const double *cs,
                       int64_t half, const float *cur, int64_t n, float *part, gguf_error *err)
{
    const gguf_hparams *hp = c->hp;
    const int64_t E = hp->n_embd, nope = hp->qk_nope, rp = hp->qk_rope, dk = nope + rp,
                  dv = hp->v_head, nk_all = c->n_past + n;
    tw wqa, qan, wqb, wq, wkva, kvan, wkvb, wo;
    memset(&wqa, 0, sizeof wqa);
    qan = wqb = wq = wkva = kvan = wkvb = wo = wqa;
    float *qr = NULL, *q = NULL, *o = NULL, *kb = NULL, *vb = NULL, *kx = NULL, *vx = NULL;
    float *hkb = NULL, *hvb = NULL;
    double *scr = NULL;
    int rc;
    if ((rc = tc_get(c, il, GGUF_ROLE_ATTN_Q_A, &wqa, false, err)) ||
        (rc = tc_get(c, il, GGUF_ROLE_ATTN_Q_A_NORM, &qan, false, err)) ||
        (rc = tc_get(c, il, GGUF_ROLE_ATTN_Q_B, &wqb, false, err)) ||
        (rc = tc_get(c, il, GGUF_ROLE_ATTN_Q, &wq, false, err)) ||
        (rc = tc_get(c, il, GGUF_ROLE_ATTN_KV_A_MQA, &wkva, false, err)) ||
        (rc = tc_get(c, il, GGUF_ROLE_ATTN_KV_A_NORM, &kvan, false, err)) ||
        (rc = tc_get(c, il, GGUF_ROLE_ATTN_KV_B, &wkvb, true, err)) ||
        (rc = tc_get(c, il, GGUF_ROLE_ATTN_OUT, &wo, false, err)))
        goto done;
    {
        const tw *wqh = wqb.d ? &wqb : &wq;
        if (!wqh->d || !wkva.d || !wkvb.d || !wo.d) {
            rc = gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET,
                           "cuda tp: blk.%lld: MLA weights missing from the plan", (long long)il);
            goto done;
        }
        const int64_t nh = wqh->ne[1] / dk, KW = wkva.ne[1], R = KW - rp;
        if (nh < 1 || R < 1) {
            rc = gguf_fail(err, GGUF_E_BAD_SHAPE, GGUF_NO_OFFSET,
                           "cuda tp: blk.%lld rank %d holds less than one head", (long long)il,
                           c->r);
            goto done;
        }
        const bool has_idx = hp->idx_head_dim > 0 && gguf_model_get(c->m, il, GGUF_ROLE_IDX_ATTN_K);
        if (has_idx && wqb.d && hp->q_lora_rank == wqa.ne[1] && !c->o.dense_indexer &&
            gguf_model_get(c->m, il, GGUF_ROLE_IDX_ATTN_Q_B) &&
            gguf_model_get(c->m, il, GGUF_ROLE_IDX_PROJ)) {
            const int64_t top_k = c->o.idx_top_k > 0 ? c->o.idx_top_k : hp->idx_top_k;
            if (top_k > 0 && nk_all > top_k) {
                rc = gguf_fail(err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                               "cuda tp: the glm-dsa indexer runs dense only (%lld keys, top-k "
                               "%lld)",
                               (long long)nk_all, (long long)top_k);
                goto done;
            }
        }
        tc_cache *L = &c->lc[il];
        if ((rc = tc_cache_reserve(c, L, KW, 0, nk_all, err)) ||
            (rc = tc_alloc(&q, n * nh * dk, err)) || (rc = tc_alloc(&o, n * nh * dv, err)))
            goto done;
        if (wqb.d) {
            const int64_t ql = wqa.ne[1];
            if ((rc = tc_alloc(&qr, n * ql, err)) ||
                (rc = tc_mm(c, qr, ql, cur, E, &wqa, NULL, n, err)) ||
                (rc = tc_norm(c, qr, qr, n, ql, ql, &qan, err)) ||
                (rc = tc_mm(c, q, nh * dk, qr, ql, &wqb, NULL, n, err)))
                goto done;
        } else if ((rc = tc_mm(c, q, nh * dk, cur, E, &wq, NULL, n, err))) {
            goto done;
        }
        float *lat = L->k + c->n_past * KW;
        if ((rc = tc_mm(c, lat, KW, cur, E, &wkva, NULL, n, err)) ||
            (rc = tc_norm(c, lat, lat, n, R, KW, &kvan, err)))
            goto done;
        fk_rope(lat + R, n, 1, KW, 0, cs, half, pairs == GGUF_ROPE_HALF, c->s);
        fk_rope(q + nope, n, nh, nh * dk, dk, cs, half, pairs == GGUF_ROPE_HALF, c->s);
        /* kv_b_proj as the engine loads it: [R, heads*(nope+v)] (see forward_attn.c) */
        const int64_t Rb = wkvb.ne[0], hb = wkvb.ne[1] / (nope + dv), Ru = Rb < R ? Rb : R;
        hkb = (float *)calloc((size_t)(nh * R * nope) + 1, sizeof(float));
        hvb = (float *)calloc((size_t)(nh * dv * R) + 1, sizeof(float));
        if (!hkb || !hvb) {
            rc = fw_nomem(err, "tp kv_b");
            goto done;
        }
        for (int64_t h = 0; h < nh && h < hb; h++) {
            for (int64_t j = 0; j < nope; j++)
                for (int64_t i = 0; i < Ru; i++)
                    hkb[(h * R + i) * nope + j] = wkvb.h[(h * (nope + dv) + j) * Rb + i];
            for (int64_t d = 0; d < dv; d++)
                for (int64_t i = 0; i < Ru; i++)
                    hvb[(h * dv + d) * R + i] = wkvb.h[(h * (nope + dv) + nope + d) * Rb + i];
        }
        if ((rc = tc_alloc(&kb, nh * R * nope, err)) || (rc = tc_alloc(&vb, nh * dv * R, err)) ||
            (rc = tc_alloc(&kx, nk_all * nh * dk, err)) ||
            (rc = tc_alloc(&vx, nk_all * nh * dv, err)))
            goto done;
        GC_GOTO(err, cudaMemcpy(kb, hkb, (size_t)(nh * R * nope) * sizeof(float),
                               cudaMemcpyHostToDevice));
        GC_GOTO(err, cudaMemcpy(vb, hvb, (size_t)(nh * dv * R) * sizeof(float),
                               cudaMemcpyHostToDevice));
        const float one = 1.0f, zero = 0.0f;
        if ((rc = tc_blas(err,
                          cublasSgemmStridedBatched(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)nope,
                                                    (int)nk_all, (int)R, &one, kb, (int)nope,
                                                    R * nope, L->k, (int)KW, 0, &zero, kx,
                                                    (int)(nh * dk), dk, (int)nh),
                          "MLA k expansion")) ||
            (rc = tc_blas(err,
                          cublasSgemmStridedBatched(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)dv,
                                                    (int)nk_all, (int)R, &one, vb, (int)R, dv * R,
                                                    L->k, (int)KW, 0, &zero, vx, (int)(nh * dv),
                                                    dv, (int)nh),
                          "MLA v expansion")))
            goto done;
        for (int64_t h = 0; h < nh; h++)
            GC_GOTO(err, cudaMemcpy2DAsync(kx + h * dk + nope, (size_t)(nh * dk) * sizeof(float),
                                          L->k + R, (size_t)KW * sizeof(float),
                                          (size_t)rp * sizeof(float), (size_t)nk_all,
                                          cudaMemcpyDeviceToDevice, c->s));
        GC_GOTO(err, cudaMalloc((void **)&scr, (size_t)(n * nh * nk_all) * sizeof(double)));
        fk_attn_args a = {o, nh * dv, q, nh * dk, dk, kx, nh * dk, dk, vx, nh * dv, dv,
                          n, nh, nh, dk, dv, c->n_past, scale, scr};
        fk_attn(&a, c->s);
        GC_GOTO(err, cudaGetLastError());
        rc = tc_mm(c, part, E, o, nh * dv, &wo, NULL, n, err);
    }
done:
    cudaStreamSynchronize(c->s);
    free(hkb);
    free(hvb);
    cudaFree(qr);
    cudaFree(q);
    cudaFree(o);
    cudaFree(kb);
    cudaFree(vb);
    cudaFree(kx);
    cudaFree(vx);
    cudaFree(scr);
    tw_free(&wqa);
    tw_free(&qan);
    tw_free(&wqb);
    tw_free(&wq);
    tw_free(&wkva);
    tw_free(&kvan);
    tw_free(&wkvb);
    tw_free(&wo);
    return rc;
}

/* ---- FFN of this rank ---- */

/* SwiGLU with gate/up W ne = [E, ff] and down ne = [ff_d, E] (tp_swiglu). */
static int tc_swiglu(gguf_cuda_tp *c, const float *g, const float *u, int64_t ff,
                     const float *d, int64_t ff_d, const float *x, int64_t n, float *out,
                     gguf_error *err)
{
    const int64_t E = c->hp->n_embd;
    float *hg = NULL, *hu = NULL, *hd = NULL;
    const float one = 1.0f, zero = 0.0f;
    int rc;
    if ((rc = tc_alloc(&hg, n * ff, err)) || (rc = tc_alloc(&hu, n * ff, err)) ||
        (rc = tc_alloc(&hd, n * ff_d, err)))
        goto done;
    if ((rc = tc_blas(err, cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)ff, (int)n, (int)E,
                                       &one, g, (int)E, x, (int)E, &zero, hg, (int)ff),
                      "gate")) ||
        (rc = tc_blas(err, cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)ff, (int)n, (int)E,
                                       &one, u, (int)E, x, (int)E, &zero, hu, (int)ff),
                      "up")))
        goto done;
    fk_swiglu(hg, hu, n * ff, c->s);
    {
        cudaError_t ce = cudaMemcpy2DAsync(hd, (size_t)ff_d * sizeof(float), hg,
                                           (size_t)ff * sizeof(float),
                                           (size_t)(ff < ff_d ? ff : ff_d) * sizeof(float),
                                           (size_t)n, cudaMemcpyDeviceToDevice, c->s);
        if (ce != cudaSuccess) {
            rc = gguf_cuda_fail(err, ce, "tp FFN");
            goto done;
        }
    }
    rc = tc_blas(err, cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)E, (int)n, (int)ff_d,
                                  &one, d, (int)ff_d, hd, (int)ff_d, &zero, out, (int)E),
                 "down");
done:
    cudaStreamSynchronize(c->s);
    cudaFree(hg);
    cudaFree(hu);
    cudaFree(hd);
    return rc;
}

static int tc_ffn_dense(gguf_cuda_tp *c, int64_t il, gguf_role rg, gguf_role ru, gguf_role rd,
                        const float *x, int64_t n, float *part, bool *reduce, gguf_error *err)
{
    tw g, u, d;
    memset(&g, 0, sizeof g);
    u = d = g;
    int rc;
    if ((rc = tc_get(c, il, rg, &g, false, err)) || (rc = tc_get(c, il, ru, &u, false, err)) ||
        (rc = tc_get(c, il, rd, &d, false, err)))
        goto done;
    if (!g.d || !u.d || !d.d) {
        rc = gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET, "cuda tp: blk.%lld: no FFN",
                       (long long)il);
        goto done;
    }
    if (g.ne[1] != u.ne[1]) {
        rc = gguf_fail(err, GGUF_E_BAD_SHAPE, GGUF_NO_OFFSET,
                       "cuda tp: blk.%lld rank %d: gate and up slices differ", (long long)il, c->r);
        goto done;
    }
    *reduce = d.e->reduce_sum;
    rc = tc_swiglu(c, g.d, u.d, g.ne[1], d.d, d.ne[0], x, n, part, err);
done:
    tw_free(&g);
    tw_free(&u);
    tw_free(&d);
    return rc;
}

static int tc_ffn_moe(gguf_cuda_tp *c, int64_t il, const float *x, int64_t n, float *moe_part,
                      float *sh_part, bool *red_moe, bool *red_sh, bool *has_sh, gguf_error *err)
{
    const gguf_hparams *hp = c->hp;
    const int64_t E = hp->n_embd, ne = hp->n_expert, nu = hp->n_expert_used;
    tw gi, bt, ge, ue, de;
    memset(&gi, 0, sizeof gi);
    bt = ge = ue = de = gi;
    float *dlog = NULL, *xs = NULL, *ys = NULL, *dw = NULL, *bias = NULL;
    int32_t *drows = NULL;
    double *acc = NULL;
    float *hlog = (float *)malloc((size_t)(n * ne) * sizeof(float) + 1);
    double *logits = (double *)malloc((size_t)(n * ne) * sizeof(double) + 1);
    int64_t *ids = (int64_t *)malloc((size_t)(n * nu) * sizeof(int64_t) + 1);
    double *wts = (double *)malloc((size_t)(n * nu) * sizeof(double) + 1);
    double *scr = (double *)malloc((size_t)(2 * ne + hp->n_group + 2) * sizeof(double));
    float *capv = (float *)malloc((size_t)(n * nu) * 2 * sizeof(float) + 1);
    int32_t *rows = (int32_t *)malloc((size_t)(n * nu) * sizeof(int32_t) + 1);
    float *roww = (float *)malloc((size_t)(n * nu) * sizeof(float) + 1);
    bool *keep = NULL;
    int rc = 0;
    if (!hlog || !logits || !ids || !wts || !scr || !capv || !rows || !roww) {
        rc = fw_nomem(err, "tp MoE");
        goto done;
    }
    if ((rc = tc_get(c, il, GGUF_ROLE_FFN_GATE_INP, &gi, false, err)) ||
        (rc = tc_get(c, il, GGUF_ROLE_FFN_EXP_PROBS_B, &bt, true, err)))
        goto done;
    if (!gi.d || !gguf_shard_plan_get(c->plan, il, GGUF_ROLE_FFN_GATE_EXPS) ||
        !gguf_shard_plan_get(c->plan, il, GGUF_ROLE_FFN_UP_EXPS) ||
        !gguf_shard_plan_get(c->plan, il, GGUF_ROLE_FFN_DOWN_EXPS)) {
        rc = gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET, "cuda tp: blk.%lld: no experts",
                       (long long)il);
        goto done;
    }
    if ((rc = tc_alloc(&dlog, n * ne, err)) || (rc = tc_mm(c, dlog, ne, x, E, &gi, NULL, n, err)))
        goto done;
    GC_GOTO(err, cudaMemcpy(hlog, dlog, (size_t)(n * ne) * sizeof(float), cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < n * ne; i++)
        logits[i] = hlog[i];
    if (bt.h && c->rt.use_exp_probs_b) {
        bias = (float *)calloc((size_t)ne + 1, sizeof(float));
        if (!bias) {
            rc = fw_nomem(err, "tp MoE");
            goto done;
        }
        memcpy(bias, bt.h, (size_t)(bt.n < ne ? bt.n : ne) * sizeof(float));
    }
    {
        for (int64_t t = 0; t < n; t++)
            fw_moe_route(&c->rt.moe, logits + t * ne, bias, ids + t * nu, wts + t * nu, scr,
                         GGUF_FWD_F32);
    }
    for (int64_t i = 0; i < n * nu; i++) {
        capv[i] = (float)ids[i];
        capv[n * nu + i] = (float)wts[i];
    }
    if ((rc = tc_capture(c, (int)il, GGUF_CAP_MOE_EXPERTS, NULL, capv, nu, n, err)) ||
        (rc = tc_capture(c, (int)il, GGUF_CAP_MOE_WEIGHTS, NULL, capv + n * nu, nu, n, err)))
        goto done;
    {
        /* the experts this rank owns, from its local slices; only those some
         * token routes to are moved to the GPU */
        int64_t first, end;
        gguf_shard_plan_experts(c->plan, c->r, &first, &end);
        const int64_t n_keep = end - first > 0 ? end - first : 0;
        keep = (bool *)calloc((size_t)n_keep + 1, sizeof(bool));
        if (!keep) {
            rc = fw_nomem(err, "tp MoE");
            goto done;
        }
        for (int64_t i = 0; i < n * nu; i++)
            if (ids[i] >= first && ids[i] < end)
                keep[ids[i] - first] = true;
        if ((rc = tc_get_some(c, il, GGUF_ROLE_FFN_GATE_EXPS, &ge, false, keep, n_keep, err)) ||
            (rc = tc_get_some(c, il, GGUF_ROLE_FFN_UP_EXPS, &ue, false, keep, n_keep, err)) ||
            (rc = tc_get_some(c, il, GGUF_ROLE_FFN_DOWN_EXPS, &de, false, keep, n_keep, err)))
            goto done;
        const int64_t ffl = ge.ne[1], ffd = de.ne[0], nloc = ge.ne[2];
        if ((rc = tc_alloc(&xs, n * E, err)) || (rc = tc_alloc(&ys, n * E, err)) ||
            (rc = tc_alloc((float **)&drows, n * nu + 1, err)) ||
            (rc = tc_alloc(&dw, n * nu + 1, err)))
            goto done;
        GC_GOTO(err, cudaMalloc((void **)&acc, (size_t)(n * E) * sizeof(double)));
        GC_GOTO(err, cudaMemset(acc, 0, (size_t)(n * E) * sizeof(double)));
        for (int64_t e = first; e < end; e++) {
            const int64_t le = e - first;
            if (le >= nloc || le >= de.ne[2])
                continue;
            int64_t m = 0;
            for (int64_t t = 0; t < n; t++)
                for (int64_t k = 0; k < nu; k++)
                    if (ids[t * nu + k] == e) {
                        rows[m] = (int32_t)t;
                        roww[m] = (float)wts[t * nu + k];
                        m++;
                    }
            if (m == 0)
                continue;
            GC_GOTO(err, cudaMemcpy(drows, rows, (size_t)m * sizeof(int32_t),
                                   cudaMemcpyHostToDevice));
            GC_GOTO(err, cudaMemcpy(dw, roww, (size_t)m * sizeof(float), cudaMemcpyHostToDevice));
            fk_gather(xs, x, drows, m, E, c->s);
            if ((rc = tc_swiglu(c, ge.d + le * ffl * E, ue.d + le * ffl * E, ffl,
                                de.d + le * ffd * E, ffd, xs, m, ys, err)))
                goto done;
            fk_moe_acc(acc, ys, drows, dw, m, E, c->s);
            GC_GOTO(err, cudaStreamSynchronize(c->s)); /* rows/roww are refilled next */
        }
        fk_acc_out(moe_part, acc, NULL, n * E, c->s);
    }
    *red_moe = de.e->reduce_sum || gguf_shard_plan_opts(c->plan)->ep > 1;
    *has_sh = gguf_shard_plan_get(c->plan, il, GGUF_ROLE_FFN_GATE_SHEXP) != NULL;
    if (*has_sh) {
        if ((rc = tc_ffn_dense(c, il, GGUF_ROLE_FFN_GATE_SHEXP, GGUF_ROLE_FFN_UP_SHEXP,
                               GGUF_ROLE_FFN_DOWN_SHEXP, x, n, sh_part, red_sh, err)))
            goto done;
        if (c->rt.shared_scale != 1.0 && c->rt.shared_scale != 0.0)
            fk_scale(sh_part, n * E, c->rt.shared_scale, c->s);
    }
    GC_GOTO(err, cudaGetLastError());
done:
    cudaStreamSynchronize(c->s);
    tw_free(&gi);
    tw_free(&bt);
    tw_free(&ge);
    tw_free(&ue);
    tw_free(&de);
    cudaFree(dlog);
    cudaFree(xs);
    cudaFree(ys);
    cudaFree(dw);
    cudaFree(drows);
    cudaFree(acc);
    free(hlog);
    free(logits);
    free(ids);
    free(wts);
    free(scr);
    free(capv);
    free(rows);
    free(roww);
    free(bias);
    free(keep);
    return rc;
}

/* ---- collectives ---- */

static int tc_allreduce(gguf_cuda_tp *c, float *buf, int64_t len, bool reduce, gguf_error *err)
{
    if (!reduce)
        return 0;
    GC_TRY(err, cudaStreamSynchronize(c->s));
    return gguf_nccl_all_reduce_sum(c->comm, buf, (size_t)len, (gguf_cuda_stream *)c->s, err);
}

/* Rows of rank q's slice of (il, role) (ne[1]), 0 when absent. */
static int64_t tc_rows_of(const gguf_cuda_tp *c, int64_t il, gguf_role role, int q)
{
    const gguf_shard_tensor *e = gguf_shard_plan_get(c->plan, il, role);
    return e && e->ranks[q].ne[1] > 0 ? e->ranks[q].ne[1] : (e ? 1 : 0);
}

/* ---- the loop's ops (fwd_block.h) ---- */

/* One eval's state for the loop's ops; the buffers are freed by tc_eval. */
typedef struct tc_eval_ctx {
    gguf_cuda_tp *c;
    const double *cs;  /* the RoPE table of these positions */
    float *lr, *lall;  /* this rank's logits slice, every rank's (device) */
    float *hl, *lg;    /* the gathered slices, the logits in vocab order (host) */
} tc_eval_ctx;

/* Vocab-parallel embedding: this rank serves ids [off, off + rows), the
 * others' rows stay zero and the all-reduce fills them in. */
static int tc_op_embed(void *ctx, const int32_t *tokens, int64_t n, float *x, float *part,
                       gguf_error *err)
{
    gguf_cuda_tp *c = ((tc_eval_ctx *)ctx)->c;
    const int64_t E = c->hp->n_embd;
    int64_t off = 0;
    for (int q = 0; q < c->r; q++)
        off += tc_rows_of(c, -1, GGUF_ROLE_TOKEN_EMBD, q);
    tw te;
    int rc;
    if ((rc = tc_get(c, -1, GGUF_ROLE_TOKEN_EMBD, &te, false, err)))
        return rc;
    const int64_t rows = te.ne[1];
    for (int64_t t = 0; t < n && te.d; t++) {
        const int64_t id = tokens[t];
        if (id >= off && id < off + rows) {
            cudaError_t ce = cudaMemcpy(part + t * E, te.d + (id - off) * te.ne[0],
                                        (size_t)(E < te.ne[0] ? E : te.ne[0]) * sizeof(float),
                                        cudaMemcpyDeviceToDevice);
            if (ce != cudaSuccess) {
                tw_free(&te);
                return gguf_cuda_fail(err, ce, "embedding");
            }
        }
    }
    tw_free(&te);
    if ((rc = tc_allreduce(c, part, n * E, true, err)))
        return rc;
    GC_TRY(err, cudaMemcpy(x, part, (size_t)(n * E) * sizeof(float), cudaMemcpyDeviceToDevice));
    return 0;
}

static int tc_op_norm(void *ctx, int64_t il, gguf_role role, gguf_role alt, float *y,
                      const float *x, int64_t n, gguf_error *err)
{
    gguf_cuda_tp *c = ((tc_eval_ctx *)ctx)->c;
    const int64_t E = c->hp->n_embd;
    tw nw;
    int rc;
    if ((rc = tc_get(c, il, role, &nw, false, err)))
        return rc;
    if (!nw.d && alt != GGUF_ROLE_UNKNOWN && (rc = tc_get(c, il, alt, &nw, false, err)))
        return rc;
    rc = tc_norm(c, y, x, n, E, E, &nw, err);
    tw_free(&nw);
    return rc;
}

/* Each rank's heads write their share of out: zeroed first. */
static int tc_op_attention(void *ctx, int64_t il, const float *cur, int64_t n, float *out,
                           bool *reduce, gguf_error *err)
{
    const tc_eval_ctx *v = (const tc_eval_ctx *)ctx;
    gguf_cuda_tp *c = v->c;
    const fw_rope *rope = &c->rt.rope;
    const double scale = c->rt.kq_scale;
    const int64_t half = rope->n_rot / 2;
    GC_TRY(err, cudaMemset(out, 0, (size_t)(n * c->hp->n_embd) * sizeof(float)));
    int rc = c->hp->is_mla ? tc_attn_mla(c, il, rope->type, scale, v->cs, half, cur, n, out, err)
                           : tc_attn_gqa(c, il, rope->type, scale, v->cs, half, cur, n, out, err);
    if (rc)
        return rc;
    const gguf_shard_tensor *eo = gguf_shard_plan_get(c->plan, il, GGUF_ROLE_ATTN_OUT);
    *reduce = eo ? eo->reduce_sum : true;
    return 0;
}

static int tc_op_ffn(void *ctx, int64_t il, bool moe, const float *cur, int64_t n,
                     fb_ffn_out *out, gguf_error *err)
{
    gguf_cuda_tp *c = ((tc_eval_ctx *)ctx)->c;
    const size_t bytes = (size_t)(n * c->hp->n_embd) * sizeof(float);
    GC_TRY(err, cudaMemset(out->routed, 0, bytes));
    GC_TRY(err, cudaMemset(out->shared, 0, bytes));
    if (moe)
        return tc_ffn_moe(c, il, cur, n, out->routed, out->shared, &out->reduce_routed,
                          &out->reduce_shared, &out->has_shared, err);
    return tc_ffn_dense(c, il, GGUF_ROLE_FFN_GATE, GGUF_ROLE_FFN_UP, GGUF_ROLE_FFN_DOWN, cur, n,
                        out->routed, &out->reduce_routed, err);
}

static int tc_op_reduce(void *ctx, float *buf, int64_t len, gguf_error *err)
{
    return tc_allreduce(((tc_eval_ctx *)ctx)->c, buf, len, true, err);
}

/* Vocab-parallel head, all-gathered (padded to the widest rank) and placed
 * in rank order on the host, cut to n_vocab. */
static int tc_op_head(void *ctx, const float *cur, int64_t n, fb_logits *out, gguf_error *err)
{
    tc_eval_ctx *v = (tc_eval_ctx *)ctx;
    gguf_cuda_tp *c = v->c;
    const int64_t E = c->hp->n_embd, V = c->hp->n_vocab;
    const gguf_role head = gguf_shard_plan_get(c->plan, -1, GGUF_ROLE_OUTPUT)
                               ? GGUF_ROLE_OUTPUT
                               : GGUF_ROLE_TOKEN_EMBD;
    int64_t rmax = 1;
    for (int q = 0; q < c->tp; q++)
        if (tc_rows_of(c, -1, head, q) > rmax)
            rmax = tc_rows_of(c, -1, head, q);
    tw wo;
    int rc;
    if ((rc = tc_get(c, -1, head, &wo, false, err)))
        return rc;
    if (!wo.d)
        return gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET, "cuda tp: no output head");
    rc = tc_alloc(&v->lr, n * rmax, err);
    if (!rc)
        rc = tc_alloc(&v->lall, (int64_t)c->tp * n * rmax, err);
    if (!rc)
        rc = tc_mm(c, v->lr, rmax, cur, E, &wo, NULL, n, err);
    tw_free(&wo);
    if (rc)
        return rc;
    GC_TRY(err, cudaStreamSynchronize(c->s));
    if ((rc = gguf_nccl_all_gather(c->comm, v->lr, v->lall, (size_t)(n * rmax),
                                   (gguf_cuda_stream *)c->s, err)))
        return rc;
    v->hl = (float *)malloc((size_t)(c->tp * n * rmax) * sizeof(float));
    v->lg = (float *)calloc((size_t)(n * V) + 1, sizeof(float));
    if (!v->hl || !v->lg)
        return fw_nomem(err, "logits");
    GC_TRY(err, cudaMemcpy(v->hl, v->lall, (size_t)(c->tp * n * rmax) * sizeof(float),
                           cudaMemcpyDeviceToHost));
    int64_t off = 0;
    for (int q = 0; q < c->tp; q++) {
        const int64_t rows = tc_rows_of(c, -1, head, q);
        for (int64_t t = 0; t < n; t++)
            for (int64_t j = 0; j < rows && off + j < V; j++)
                v->lg[t * V + off + j] = v->hl[((int64_t)q * n + t) * rmax + j];
        off += rows;
    }
    out->host = v->lg;
    return 0;
}

static int tc_op_capture(void *ctx, int layer, gguf_capture_point p, const float *dev,
                         const float *host, int64_t width, int64_t n, gguf_error *err)
{
    return tc_capture(((tc_eval_ctx *)ctx)->c, layer, p, dev, host, width, n, err);
}

static int tc_op_logits(void *ctx, const fb_logits *lg, int64_t n, float *logits_out,
                        gguf_error *err)
{
    gguf_cuda_tp *c = ((tc_eval_ctx *)ctx)->c;
    (void)err;
    if (logits_out)
        memcpy(logits_out, lg->host, (size_t)(n * c->hp->n_vocab) * sizeof(float));
    c->n_past += n;
    return 0;
}

static const fb_ops tc_ops = {
    tc_op_embed, tc_op_norm,    tc_op_attention, tc_op_ffn,   tc_op_reduce,
    tc_op_head,  tc_op_capture, NULL /* measure */, tc_op_logits,
};

static int tc_eval(gguf_cuda_tp *c, const int32_t *tokens, int64_t n, float *logits_out,
                   gguf_error *err)
{
    const int64_t E = c->hp->n_embd;
    float *x = NULL, *cur = NULL, *part = NULL, *part2 = NULL;
    double *cs = NULL;
    tc_eval_ctx v = {c, NULL, NULL, NULL, NULL, NULL};
    int rc;
    GC_TRY(err, cudaSetDevice(c->device));
    if ((rc = tc_alloc(&x, n * E, err)) || (rc = tc_alloc(&cur, n * E, err)) ||
        (rc = tc_alloc(&part, n * E, err)) || (rc = tc_alloc(&part2, n * E, err)) ||
        (rc = fwd_rope_table(&c->rt.rope, c->n_past, n, c->pool, c->s, &cs, err)))
        goto done;
    v.cs = cs;
    {
        const fb_exec e = {&tc_ops, &v, c->m, c->s, x, cur, part, part2};
        rc = fb_run(&e, tokens, n, logits_out, err);
    }
done:
    cudaStreamSynchronize(c->s);
    cudaFree(x);
    cudaFree(cur);
    cudaFree(part);
    cudaFree(part2);
    cudaFree(v.lr);
    cudaFree(v.lall);
    if (cs)
        (void)cudaFreeAsync(cs, c->s);
    free(v.hl);
    free(v.lg);
    return rc;
}

int gguf_cuda_tp_eval(gguf_cuda_tp *c, const int32_t *tokens, int64_t n, float *logits,
                      gguf_error *err)
{
    if (!c || !tokens || n < 1)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "forward: no tokens");
    for (int64_t t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= c->hp->n_vocab)
            return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                             "forward: token %lld is %d, outside the vocabulary (%lld)",
                             (long long)t, tokens[t], (long long)c->hp->n_vocab);
    return tc_eval(c, tokens, n, logits, err);
}

int gguf_cuda_tp_create(gguf_cuda_tp **out, const gguf_model *m, const gguf_shard_plan *plan,
                        gguf_nccl_comm *comm, const gguf_fwd_opts *opts,
                        const gguf_cuda_fwd_opts *copts, gguf_error *err)
{
    if (!out)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "cuda tp: NULL out");
    *out = NULL;
    if (!plan || !comm || gguf_shard_plan_model(plan) != m)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "cuda tp: the plan was not built for this model");
    const int r = gguf_nccl_comm_rank(comm), tp = gguf_shard_plan_ranks(plan);
    if (r < 0 || r >= tp || gguf_nccl_comm_world(comm) != tp)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "cuda tp: rank %d of %d, but the plan has %d ranks", r,
                         gguf_nccl_comm_world(comm), tp);
    gguf_fwd_opts fo = {};
    if (opts)
        fo = *opts;
    if (fo.precision == GGUF_FWD_F64 || fo.mla_mode == GGUF_FWD_MLA_ABSORBED)
        return gguf_fail(err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                         "cuda tp: f64 and absorbed MLA are CPU only");
    gguf_cuda_fwd_opts co = {};
    if (copts)
        co = *copts;
    if (co.n_copy_threads < 0 || co.n_copy_threads > 32 || co.host_register < -1 ||
        co.host_register > 1)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "cuda tp: bad options");
    gguf_cuda_tp *c = (gguf_cuda_tp *)calloc(1, sizeof *c);
    if (!c)
        return fw_nomem(err, "cuda tp");
    int rc = fw_setup_init(&c->set, m, &fo, err);
    if (rc) {
        free(c);
        return rc;
    }
    fw_runtime_init(&c->rt, &c->set, gguf_shard_plan_runtime(plan));
    c->m = m;
    c->hp = gguf_model_hparams(m);
    c->plan = plan;
    c->comm = comm;
    c->o = fo;
    c->r = r;
    c->tp = tp;
    c->device = gguf_nccl_comm_device(comm);
    c->lc = (tc_cache *)calloc((size_t)(c->hp->n_layer > 0 ? c->hp->n_layer : 1), sizeof *c->lc);
    cudaError_t ce = c->lc ? cudaSetDevice(c->device) : cudaErrorMemoryAllocation;
    /* A blocking stream: it orders after the legacy default stream, where the
     * synchronous helpers (cudaMemset of fresh buffers, weight uploads) run. */
    if (ce == cudaSuccess)
        ce = cudaStreamCreate(&c->s);
    if (ce == cudaSuccess)
        ce = cudaDeviceGetDefaultMemPool(&c->pool, c->device);
    if (ce != cudaSuccess) {
        gguf_cuda_tp_free(c);
        return gguf_cuda_fail(err, ce, "cuda tp set-up");
    }
    {
        /* ranks share the host's cores: a few copy threads each */
        const long ncpu = gguf_cpus_usable();
        long nth = co.n_copy_threads ? co.n_copy_threads : ncpu / (tp > 0 ? tp : 1);
        nth = nth < 1 ? 1 : nth > 16 ? 16 : nth;
        const size_t cb = co.chunk_bytes ? co.chunk_bytes : (size_t)64 << 20;
        if ((rc = fs_create(&c->fs, c->s, cb, (int64_t)64 << 20, (int)nth, fo.drop_pages,
                            err)) ||
            (rc = fs_register_model(c->fs, m, co.host_register, err))) {
            gguf_cuda_tp_free(c);
            return rc;
        }
    }
    {
        int brc = fwd_blas_reference(&c->blas, c->s, err);
        if (brc) {
            gguf_cuda_tp_free(c);
            return brc;
        }
    }
    *out = c;
    return 0;
}

void gguf_cuda_tp_free(gguf_cuda_tp *c)
{
    if (!c)
        return;
    if (c->s) {
        (void)cudaSetDevice(c->device);
        (void)cudaStreamSynchronize(c->s);
    }
    if (c->lc && c->hp)
        for (int64_t i = 0; i < c->hp->n_layer; i++) {
            cudaFree(c->lc[i].k);
            cudaFree(c->lc[i].v);
        }
    free(c->lc);
    fs_free(c->fs);
    if (c->blas)
        cublasDestroy(c->blas);
    if (c->s)
        cudaStreamDestroy(c->s);
    fw_setup_free(&c->set);
    free(c);
}

/* ---- gguf_fwd_ctx ---- */

static int tc_be_eval(void *impl, const int32_t *tokens, int64_t n, float *logits,
                      gguf_error *err)
{
    return gguf_cuda_tp_eval((gguf_cuda_tp *)impl, tokens, n, logits, err);
}

static int64_t tc_be_n_past(const void *impl)
{
    return ((const gguf_cuda_tp *)impl)->n_past;
}

static int tc_be_set_capture(void *impl, gguf_fwd_capture_fn fn, void *user)
{
    gguf_cuda_tp *c = (gguf_cuda_tp *)impl;
    c->o.capture = fn;
    c->o.capture_user = user;
    return 0;
}

static void tc_be_free(void *impl)
{
    gguf_cuda_tp_free((gguf_cuda_tp *)impl);
}

static const gguf_fwd_backend tc_backend = {"cuda-nccl", tc_be_eval, tc_be_n_past, NULL,
                                            tc_be_set_capture, tc_be_free};

int gguf_cuda_tp_ctx_create(gguf_fwd_ctx **out, const gguf_model *m, const gguf_shard_plan *plan,
                            gguf_nccl_comm *comm, const gguf_fwd_opts *opts,
                            const gguf_cuda_fwd_opts *copts, gguf_error *err)
{
    *out = NULL;
    gguf_cuda_tp *c = NULL;
    int rc = gguf_cuda_tp_create(&c, m, plan, comm, opts, copts, err);
    return rc ? rc : gguf_fwd_ctx_wrap(out, m, &tc_backend, c, err);
}
