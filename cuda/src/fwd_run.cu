/*
 * One GPU's forward pass (ggufkit_cuda/forward_cuda.h): the ops of the block
 * loop (fwd_block.h) with the same steps, capture points and weight order as
 * the CPU reference (libgguf/src/forward/forward_exec.c, forward_attn.c,
 * forward_ffn.c), activations and the KV cache in device memory.
 *
 * Weights stream through fwd_stream.h: the copy engine reads quantized rows
 * from the registered mapping (or from pinned buffers the host gathers them
 * into) while the GPU dequantizes and multiplies what arrived, so transfers
 * overlap compute across matmuls, tensors and layers alike. An MoE layer asks
 * for the routed experts of a tensor in one request, which packs them into
 * few large chunks.
 */
#include "cuda_internal.h"

#include <cublas_v2.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

extern "C" {
#include "util/cpus.h"
#include "forward/forward_setup.h"
#include "forward/forward_stream.h"
#include "gguf/dequant.h"
}
#include "fwd_block.h"
#include "fwd_common.h"
#include "fwd_cuda_internal.h"
#include "fwd_dl.h"
#include "ggufkit_cuda/cuda_dequant.h"
#include "ggufkit_cuda/forward_cuda.h"
#include "fwd_stream.h"

#define FC_CHUNK_BYTES_DEFAULT ((size_t)64 << 20)
/* Dequantized floats per chunk: 64 MiB of Q4_K is 119 Mi floats; 64 Mi
 * floats (256 MiB) keep quantized chunks of tens of MB, where per-chunk costs
 * vanish against the copy. */
#define FC_CHUNK_FLOATS ((int64_t)64 << 20)

typedef struct fc_cache {
    float *k; /* [cap][k_w]: GQA keys, or the MLA latent [kv_cmpr | k_pe] */
    float *v; /* [cap][v_w]: GQA values (NULL for MLA) */
} fc_cache;

struct gguf_cuda_fwd {
    fw_setup set; /* checks, RoPE set-up, routing: shared with the CPU (forward_setup.h) */
    const gguf_model *m;
    const gguf_hparams *hp;
    gguf_fwd_opts o;
    int device;
    cudaStream_t ks; /* compute (the streamer has the copy stream) */
    cudaMemPool_t pool; /* activations and scratch: kept across syncs */
    cublasHandle_t blas;
    fs_streamer *fs;
    float *hlog;        /* pinned: router logits come back without blocking the host */
    size_t hlog_n;
    fw_pool *route_pool; /* host threads routing a batch's tokens (NULL: the caller) */
    fc_cache *lc;
    int64_t cap, k_w, v_w, n_past;
    gguf_fwd_stats st;
    gguf_cuda_fwd_xfer xf;
    uint64_t resident;
    bool moe_pad; /* routed experts' rows may be padded (gguf_cuda_fwd_opts.moe_pad) */
    size_t free0; /* free device memory before the context allocated any */
    /* --gpu-mem-limit: what the context holds, counted by its own allocations */
    size_t mem_limit, mem_fixed; /* the cap; staging + cuBLAS workspace */
    uint64_t mem_used;           /* pool allocations and the KV cache */
    struct fc_alloc_rec {
        void *p;
        size_t n;
    } *atab; /* live pool allocations (a few dozen at most) */
    int an, acap;
};

/* The most device memory that padding the routed experts' rows may add
 * (ffn_moe: one batched GEMM per chunk instead of one GEMM per expert). */
#define FC_PAD_BYTES ((uint64_t)256 << 20)

/* cuBLAS's own workspace, which it allocates itself: counted against a cap. */
#define FC_BLAS_WORKSPACE ((size_t)32 << 20)

/* Device memory this context holds now (other processes on the GPU count
 * too: the figure is for a GPU of one's own). */
static void fc_sample_mem(gguf_cuda_fwd *c)
{
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) == cudaSuccess && c->free0 > fr &&
        (uint64_t)(c->free0 - fr) > c->xf.device_bytes)
        c->xf.device_bytes = (uint64_t)(c->free0 - fr);
}

/* ------------------------------------------------------------ helpers */

static double fc_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define FC_BLAS(err, call)                                                                    \
    do {                                                                                      \
        const cublasStatus_t fc_s_ = (call);                                                  \
        if (fc_s_ != CUBLAS_STATUS_SUCCESS)                                                   \
            return fwd_blas_fail((err), fc_s_, #call);                                         \
    } while (0)

static const char *fc_mib(uint64_t b, char *buf, size_t n)
{
    snprintf(buf, n, "%.1f MiB", (double)b / 1048576.0);
    return buf;
}

/* Room for `bytes` more under the cap (none without one). */
static int fc_mem_check(gguf_cuda_fwd *c, uint64_t bytes, const char *what, gguf_error *err)
{
    if (!c->mem_limit || c->mem_fixed + c->mem_used + bytes <= c->mem_limit)
        return 0;
    char a[32], b[32], d[32], u[32];
    return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET,
                     "cuda: --gpu-mem-limit %s: %s needs %s more (held: %s of staging and "
                     "workspace, %s of activations and KV cache)",
                     fc_mib(c->mem_limit, a, sizeof a), what, fc_mib(bytes, b, sizeof b),
                     fc_mib(c->mem_fixed, d, sizeof d), fc_mib(c->mem_used, u, sizeof u));
}

static int fc_alloc(gguf_cuda_fwd *c, void *pp, size_t bytes, gguf_error *err)
{
    void **p = (void **)pp;
    *p = NULL;
    if (!bytes)
        bytes = 16;
    if (c->mem_limit) {
        int rc = fc_mem_check(c, bytes, "an activation or scratch buffer", err);
        if (rc)
            return rc;
        if (c->an == c->acap) {
            const int cap = c->acap ? 2 * c->acap : 64;
            void *t = realloc(c->atab, (size_t)cap * sizeof *c->atab);
            if (!t)
                return fw_nomem(err, "allocation table");
            c->atab = (struct gguf_cuda_fwd::fc_alloc_rec *)t;
            c->acap = cap;
        }
    }
    GC_TRY(err, cudaMallocFromPoolAsync(p, bytes, c->pool, c->ks));
    if (c->mem_limit) {
        c->atab[c->an].p = *p;
        c->atab[c->an].n = bytes;
        c->an++;
        c->mem_used += bytes;
    }
    return 0;
}

static void fc_dfree(gguf_cuda_fwd *c, void *p)
{
    if (!p)
        return;
    (void)cudaFreeAsync(p, c->ks);
    for (int i = c->an - 1; i >= 0; i--)
        if (c->atab[i].p == p) {
            c->mem_used -= c->atab[i].n;
            c->atab[i] = c->atab[--c->an];
            break;
        }
}

static const gguf_tensor *W(const gguf_cuda_fwd *c, int64_t il, gguf_role role)
{
    return gguf_model_get(c->m, il, role);
}

static int need(const gguf_tensor *t, int64_t il, gguf_role role, gguf_error *err)
{
    if (t)
        return 0;
    return gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET, "forward: blk.%lld.%s.%s missing",
                     (long long)il, gguf_role_name(role), gguf_role_suffix(role));
}

static int64_t t_rows(const gguf_tensor *t)
{
    return t->ne[1] * t->ne[2] * t->ne[3];
}

/* ------------------------------------------------------------ streaming */

/* Stream rows [row0, row0+n_rows) of t; fn gets the dequantized rows chunk by
 * chunk (fwd_stream.h) and queues its work on the compute stream. */
static int fc_stream(gguf_cuda_fwd *c, const gguf_tensor *t, int64_t row0, int64_t n_rows,
                     fs_rows_fn fn, void *arg, gguf_error *err)
{
    const fs_rows one = {t, row0, n_rows};
    return fs_stream(c->fs, &one, 1, fn, arg, err);
}

typedef struct fc_load_arg {
    float *dst;
    int64_t width;
    cudaStream_t s;
} fc_load_arg;

static int fc_load_chunk(const float *w, int64_t i, int64_t r0, int64_t nr, void *arg,
                         gguf_error *err)
{
    fc_load_arg *a = (fc_load_arg *)arg;
    (void)i;
    GC_TRY(err, cudaMemcpyAsync(a->dst + r0 * a->width, w, (size_t)(nr * a->width) * sizeof(float),
                                cudaMemcpyDeviceToDevice, a->s));
    return 0;
}

/* Rows of a tensor into a new device buffer (free with fc_release). */
static int fc_load(gguf_cuda_fwd *c, const gguf_tensor *t, int64_t row0, int64_t n_rows,
                   float **out, gguf_error *err)
{
    *out = NULL;
    const size_t n = (size_t)(n_rows * t->ne[0]);
    int rc = fc_alloc(c, out, n * sizeof(float), err);
    if (rc)
        return rc;
    fc_load_arg a = {*out, t->ne[0], c->ks};
    if ((rc = fc_stream(c, t, row0, n_rows, fc_load_chunk, &a, err))) {
        fc_dfree(c, *out);
        *out = NULL;
        return rc;
    }
    c->resident += n * sizeof(float);
    if (c->resident > c->st.peak_weight_bytes)
        c->st.peak_weight_bytes = c->resident;
    return 0;
}

static void fc_release(gguf_cuda_fwd *c, float *p, int64_t n_floats)
{
    if (!p)
        return;
    c->resident -= (uint64_t)n_floats * sizeof(float);
    fc_dfree(c, p);
}

/* y[t][r0 + o] = W[o] . x[t] for the nr rows of a part: one GEMM,
 * column-major W^T x. */
typedef struct fc_mm_arg {
    cublasHandle_t blas;
    float *y;
    int64_t ys;
    const float *x;
    int64_t xs;
    int64_t n_in, n_tok;
} fc_mm_arg;

static int fc_mm_chunk(const float *w, int64_t i, int64_t r0, int64_t nr, void *arg,
                       gguf_error *err)
{
    const fc_mm_arg *a = (const fc_mm_arg *)arg;
    const float one = 1.0f, zero = 0.0f;
    (void)i;
    if (a->n_tok < 1)
        return 0;
    FC_BLAS(err, cublasSgemm(a->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nr, (int)a->n_tok,
                             (int)a->n_in, &one, w, (int)a->n_in, a->x, (int)a->xs, &zero,
                             a->y + r0, (int)a->ys));
    return 0;
}

/* The GEMMs of routed experts, chunk by chunk: request entry i (a slot)
 * multiplies n_tok_of[i] rows of x from x_off[i] into y from y_off[i]. With
 * pad > 0 every slot owns pad rows (y_off, x_off pad rows apart): the whole
 * experts of a chunk that follow each other are one strided batched GEMM
 * over pad rows each; a part of an expert (cut at a chunk's end), and every
 * expert when pad is 0, is a GEMM of its own. */
typedef struct fc_moe_arg {
    cublasHandle_t blas;
    float *y;
    int64_t ys;
    const float *x;
    int64_t xs;
    int64_t n_in, pad;
    const int64_t *y_off, *x_off, *n_tok_of;
} fc_moe_arg;

static int fc_moe_chunk(const float *w, const fs_part *p, int n, void *arg, gguf_error *err)
{
    const fc_moe_arg *a = (const fc_moe_arg *)arg;
    const float one = 1.0f, zero = 0.0f;
    for (int k = 0; k < n;) {
        /* parts k .. k + run - 1: whole experts, slots in a row */
        const int64_t full = p[k].r0 == 0 ? p[k].nr : 0;
        int run = 1;
        if (a->pad > 0 && full > 0)
            while (k + run < n && p[k + run].i == p[k].i + run && p[k + run].r0 == 0 &&
                   p[k + run].nr == full)
                run++;
        const float *x = a->x + a->x_off[p[k].i];
        float *y = a->y + a->y_off[p[k].i] + p[k].r0;
        if (run > 1) {
            FC_BLAS(err, cublasSgemmStridedBatched(
                             a->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)full, (int)a->pad,
                             (int)a->n_in, &one, w + p[k].float_off, (int)a->n_in,
                             (long long)(full * a->n_in), x, (int)a->xs,
                             (long long)(a->pad * a->xs), &zero, y, (int)a->ys,
                             (long long)(a->pad * a->ys), run));
        } else if (a->n_tok_of[p[k].i] > 0) {
            FC_BLAS(err, cublasSgemm(a->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)p[k].nr,
                                     (int)a->n_tok_of[p[k].i], (int)a->n_in, &one,
                                     w + p[k].float_off, (int)a->n_in, x, (int)a->xs, &zero, y,
                                     (int)a->ys));
        }
        k += run;
    }
    return 0;
}

/* y[t][o] = W[row0+o] . x[t] (+ bias[row0+o]) for o < n_out. */
static int fc_mm(gguf_cuda_fwd *c, float *y, int64_t ys, const float *x, int64_t xs,
                 const gguf_tensor *w, int64_t row0, int64_t n_out, const gguf_tensor *bias,
                 int64_t n_tok, gguf_error *err)
{
    const int64_t n_in = w->ne[0];
    fc_mm_arg a = {c->blas, y, ys ? ys : n_out, x, xs ? xs : n_in, n_in, n_tok};
    int rc = fc_stream(c, w, row0, n_out, fc_mm_chunk, &a, err);
    if (rc || !bias)
        return rc;
    float *b;
    if ((rc = fc_load(c, bias, 0, 1, &b, err)))
        return rc;
    fk_add_bias(y, b + row0, n_tok, n_out, a.ys, c->ks);
    fc_release(c, b, bias->ne[0]);
    return 0;
}

/* RMSNorm of n_tok*heads rows with an optional weight tensor. */
static int fc_norm(gguf_cuda_fwd *c, float *y, const float *x, int64_t n_tok, int64_t heads,
                   int64_t width, int64_t tok_stride, int64_t head_stride, const gguf_tensor *w,
                   gguf_error *err)
{
    float *wf = NULL;
    int rc;
    if (w && (rc = fc_load(c, w, 0, 1, &wf, err)))
        return rc;
    fk_rmsnorm(y, x, wf, n_tok, heads, width, tok_stride, head_stride, c->hp->rms_eps, c->ks);
    fc_release(c, wf, w ? w->ne[0] : 0);
    return 0;
}

/* ------------------------------------------------------------ captures */

static int fc_capture_host(gguf_cuda_fwd *c, int layer, gguf_capture_point p, const float *f,
                           int64_t width, int64_t n_tok, gguf_error *err)
{
    return fw_emit(c->o.capture, c->o.capture_user, layer, p, -1, f, width, n_tok, c->n_past,
                   err);
}

/* Copy device rows back and hand them to the capture callback. */
static int fc_capture(gguf_cuda_fwd *c, int layer, gguf_capture_point p, const float *dev,
                      int64_t width, int64_t n_tok, gguf_error *err)
{
    if (!c->o.capture)
        return 0;
    const size_t n = (size_t)(width * n_tok);
    float *f = (float *)malloc(n * sizeof(float) + 1);
    if (!f)
        return fw_nomem(err, "capture");
    cudaError_t e = cudaMemcpyAsync(f, dev, n * sizeof(float), cudaMemcpyDeviceToHost, c->ks);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(c->ks);
    if (e != cudaSuccess) {
        free(f);
        return gguf_cuda_fail(err, e, "capture copy");
    }
    int rc = fc_capture_host(c, layer, p, f, width, n_tok, err);
    free(f);
    return rc;
}

/* ------------------------------------------------------------ attention */

static int attn_gqa(gguf_cuda_fwd *c, int64_t il, const float *cur, int64_t n, const double *cs,
                    float *out, gguf_error *err)
{
    const gguf_hparams *hp = c->hp;
    const int64_t nh = hp->n_head, nkv = hp->n_head_kv, dk = hp->n_embd_head_k,
                  dv = hp->n_embd_head_v, E = hp->n_embd;
    const fw_rope *rp = &c->set.rope;
    fc_cache *L = &c->lc[il];
    float *q = NULL, *o = NULL;
    double *scr = NULL;
    const gguf_tensor *wq = W(c, il, GGUF_ROLE_ATTN_Q), *wk = W(c, il, GGUF_ROLE_ATTN_K),
                      *wv = W(c, il, GGUF_ROLE_ATTN_V);
    int rc;
    if ((rc = need(wq, il, GGUF_ROLE_ATTN_Q, err)) || (rc = need(wk, il, GGUF_ROLE_ATTN_K, err)) ||
        (rc = need(wv, il, GGUF_ROLE_ATTN_V, err)))
        return rc;
    if ((rc = fc_alloc(c, &q, (size_t)(n * nh * dk) * sizeof(float), err)) ||
        (rc = fc_alloc(c, &o, (size_t)(n * nh * dv) * sizeof(float), err)) ||
        (rc = fc_alloc(c, &scr, (size_t)(n * nh * (c->n_past + n)) * sizeof(double), err)))
        goto done;
    {
        float *kc = L->k + c->n_past * c->k_w, *vc = L->v + c->n_past * c->v_w;
        if ((rc = fc_mm(c, q, 0, cur, E, wq, 0, nh * dk, W(c, il, GGUF_ROLE_ATTN_Q_BIAS), n, err)) ||
            (rc = fc_mm(c, kc, c->k_w, cur, E, wk, 0, nkv * dk, W(c, il, GGUF_ROLE_ATTN_K_BIAS), n,
                        err)) ||
            (rc = fc_mm(c, vc, c->v_w, cur, E, wv, 0, nkv * dv, W(c, il, GGUF_ROLE_ATTN_V_BIAS), n,
                        err)))
            goto done;
        const gguf_tensor *qn = W(c, il, GGUF_ROLE_ATTN_Q_NORM),
                          *kn = W(c, il, GGUF_ROLE_ATTN_K_NORM);
        if (qn && (rc = fc_norm(c, q, q, n, nh, dk, nh * dk, dk, qn, err)))
            goto done;
        if (kn && (rc = fc_norm(c, kc, kc, n, nkv, dk, c->k_w, dk, kn, err)))
            goto done;
        const int halfp = rp->type == GGUF_ROPE_HALF;
        fk_rope(q, n, nh, nh * dk, dk, cs, rp->n_rot / 2, halfp, c->ks);
        fk_rope(kc, n, nkv, c->k_w, dk, cs, rp->n_rot / 2, halfp, c->ks);
        fk_attn_args a = {o, nh * dv, q, nh * dk, dk, L->k, c->k_w, dk, L->v, c->v_w, dv,
                          n, nh, nkv, dk, dv, c->n_past, c->set.kq_scale, scr};
        fk_attn(&a, c->ks);
        GC_GOTO(err, cudaGetLastError());
        rc = fc_mm(c, out, 0, o, nh * dv, W(c, il, GGUF_ROLE_ATTN_OUT), 0, E, NULL, n, err);
    }
done:
    fc_dfree(c, q);
    fc_dfree(c, o);
    fc_dfree(c, scr);
    return rc;
}

/* One batched GEMM per MLA expansion: for each head h,
 * C_h (m x nk, ldc) = op(A_h) (m x R) . lat^T (R x nk, rows KW apart). */
static int fc_expand(gguf_cuda_fwd *c, bool trans, const float *A, int64_t lda, int64_t strideA,
                     const float *lat, int64_t KW, int64_t R, int64_t nk, int64_t m, float *C,
                     int64_t ldc, int64_t strideC, int64_t nh, gguf_error *err)
{
    const float one = 1.0f, zero = 0.0f;
    FC_BLAS(err, cublasSgemmStridedBatched(c->blas, trans ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N,
                                           (int)m, (int)nk, (int)R, &one, A, (int)lda, strideA,
                                           lat, (int)KW, 0, &zero, C, (int)ldc, strideC, (int)nh));
    return 0;
}

static int attn_mla(gguf_cuda_fwd *c, int64_t il, const float *cur, int64_t n, const double *cs,
                    float *out, gguf_error *err)
{
    const gguf_hparams *hp = c->hp;
    const int64_t nh = hp->n_head, nope = hp->qk_nope, rope = hp->qk_rope, dk = nope + rope,
                  dv = hp->v_head, R = hp->kv_lora_rank, E = hp->n_embd, KW = c->k_w;
    const int64_t nk_all = c->n_past + n;
    const fw_rope *rp = &c->set.rope;
    fc_cache *L = &c->lc[il];
    float *q = NULL, *qr = NULL, *o = NULL, *kb = NULL, *vb = NULL, *kv = NULL, *kx = NULL,
          *vx = NULL;
    double *scr = NULL;
    int64_t kb_n = 0, vb_n = 0, kv_n = 0;
    int rc;
    if ((rc = fc_alloc(c, &q, (size_t)(n * nh * dk) * sizeof(float), err)) ||
        (rc = fc_alloc(c, &o, (size_t)(n * nh * dv) * sizeof(float), err)))
        goto done;
    /* glm-dsa: the indexer keeps every key while a query sees at most top-k */
    if (W(c, il, GGUF_ROLE_IDX_ATTN_K) && W(c, il, GGUF_ROLE_IDX_ATTN_Q_B) &&
        W(c, il, GGUF_ROLE_IDX_PROJ) && hp->q_lora_rank > 0 && !c->o.dense_indexer) {
        const int64_t top_k = c->o.idx_top_k > 0 ? c->o.idx_top_k : hp->idx_top_k;
        if (top_k > 0 && nk_all > top_k) {
            rc = gguf_fail(err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                           "%s: cuda: the glm-dsa indexer would select %lld of %lld keys; the "
                           "GPU backend runs it dense only (use --dense-indexer or at most %lld "
                           "tokens)",
                           gguf_model_name(c->m), (long long)top_k, (long long)nk_all,
                           (long long)top_k);
            goto done;
        }
    }
    if (hp->q_lora_rank > 0) {
        const gguf_tensor *wqa = W(c, il, GGUF_ROLE_ATTN_Q_A), *wqb = W(c, il, GGUF_ROLE_ATTN_Q_B);
        if ((rc = need(wqa, il, GGUF_ROLE_ATTN_Q_A, err)) ||
            (rc = need(wqb, il, GGUF_ROLE_ATTN_Q_B, err)) ||
            (rc = fc_alloc(c, &qr, (size_t)(n * hp->q_lora_rank) * sizeof(float), err)) ||
            (rc = fc_mm(c, qr, 0, cur, E, wqa, 0, hp->q_lora_rank, NULL, n, err)) ||
            (rc = fc_norm(c, qr, qr, n, 1, hp->q_lora_rank, hp->q_lora_rank, 0,
                          W(c, il, GGUF_ROLE_ATTN_Q_A_NORM), err)) ||
            (rc = fc_mm(c, q, 0, qr, hp->q_lora_rank, wqb, 0, nh * dk, NULL, n, err)))
            goto done;
    } else {
        const gguf_tensor *wq = W(c, il, GGUF_ROLE_ATTN_Q);
        if ((rc = need(wq, il, GGUF_ROLE_ATTN_Q, err)) ||
            (rc = fc_mm(c, q, 0, cur, E, wq, 0, nh * dk, NULL, n, err)))
            goto done;
    }
    {
        float *lat = L->k + c->n_past * KW;
        const gguf_tensor *wkva = W(c, il, GGUF_ROLE_ATTN_KV_A_MQA);
        if ((rc = need(wkva, il, GGUF_ROLE_ATTN_KV_A_MQA, err)) ||
            (rc = fc_mm(c, lat, KW, cur, E, wkva, 0, KW, NULL, n, err)) ||
            (rc = fc_norm(c, lat, lat, n, 1, R, KW, 0, W(c, il, GGUF_ROLE_ATTN_KV_A_NORM), err)))
            goto done;
        const int halfp = rp->type == GGUF_ROPE_HALF;
        fk_rope(lat + R, n, 1, KW, 0, cs, rp->n_rot / 2, halfp, c->ks);
        fk_rope(q + nope, n, nh, nh * dk, dk, cs, rp->n_rot / 2, halfp, c->ks);
    }
    /* kv_b expanded per head for every cached position */
    if ((rc = fc_alloc(c, &kx, (size_t)(nk_all * nh * dk) * sizeof(float), err)) ||
        (rc = fc_alloc(c, &vx, (size_t)(nk_all * nh * dv) * sizeof(float), err)))
        goto done;
    {
        const gguf_tensor *tkb = W(c, il, GGUF_ROLE_ATTN_K_B), *tvb = W(c, il, GGUF_ROLE_ATTN_V_B),
                          *tkv = W(c, il, GGUF_ROLE_ATTN_KV_B);
        if (tkb && tvb) {
            /* k_b [nh][R][nope], v_b [nh][dv][R] */
            kb_n = t_rows(tkb) * tkb->ne[0];
            vb_n = t_rows(tvb) * tvb->ne[0];
            if ((rc = fc_load(c, tkb, 0, t_rows(tkb), &kb, err)) ||
                (rc = fc_load(c, tvb, 0, t_rows(tvb), &vb, err)) ||
                (rc = fc_expand(c, false, kb, nope, R * nope, L->k, KW, R, nk_all, nope, kx,
                                nh * dk, dk, nh, err)) ||
                (rc = fc_expand(c, true, vb, R, dv * R, L->k, KW, R, nk_all, dv, vx, nh * dv, dv,
                                nh, err)))
                goto done;
        } else if (tkv) {
            /* legacy attn_kv_b [nh*(nope+dv)][R]: rows h*(nope+dv)+j */
            kv_n = t_rows(tkv) * tkv->ne[0];
            if ((rc = fc_load(c, tkv, 0, t_rows(tkv), &kv, err)) ||
                (rc = fc_expand(c, true, kv, R, (nope + dv) * R, L->k, KW, R, nk_all, nope, kx,
                                nh * dk, dk, nh, err)) ||
                (rc = fc_expand(c, true, kv + nope * R, R, (nope + dv) * R, L->k, KW, R, nk_all,
                                dv, vx, nh * dv, dv, nh, err)))
                goto done;
        } else {
            rc = need(NULL, il, GGUF_ROLE_ATTN_K_B, err);
            goto done;
        }
        /* k_pe of each position, the same for every head */
        for (int64_t h = 0; h < nh; h++)
            GC_GOTO(err, cudaMemcpy2DAsync(kx + h * dk + nope, (size_t)(nh * dk) * sizeof(float),
                                          L->k + R, (size_t)KW * sizeof(float),
                                          (size_t)rope * sizeof(float), (size_t)nk_all,
                                          cudaMemcpyDeviceToDevice, c->ks));
    }
    if ((rc = fc_alloc(c, &scr, (size_t)(n * nh * nk_all) * sizeof(double), err)))
        goto done;
    {
        fk_attn_args a = {o, nh * dv, q, nh * dk, dk, kx, nh * dk, dk, vx, nh * dv, dv,
                          n, nh, nh, dk, dv, c->n_past, c->set.kq_scale, scr};
        fk_attn(&a, c->ks);
        GC_GOTO(err, cudaGetLastError());
    }
    rc = fc_mm(c, out, 0, o, nh * dv, W(c, il, GGUF_ROLE_ATTN_OUT), 0, E, NULL, n, err);
done:
    fc_release(c, kb, kb_n);
    fc_release(c, vb, vb_n);
    fc_release(c, kv, kv_n);
    fc_dfree(c, q);
    fc_dfree(c, qr);
    fc_dfree(c, o);
    fc_dfree(c, kx);
    fc_dfree(c, vx);
    fc_dfree(c, scr);
    return rc;
}

/* ------------------------------------------------------------ FFN */

static int ffn_swiglu(gguf_cuda_fwd *c, const gguf_tensor *g, const gguf_tensor *u,
                      const gguf_tensor *d, int64_t row0, int64_t drow0, int64_t n_ff,
                      const float *x, int64_t n, float *out, gguf_error *err)
{
    const int64_t E = c->hp->n_embd;
    float *hg = NULL, *hu = NULL;
    int rc;
    if (!(rc = fc_alloc(c, &hg, (size_t)(n * n_ff) * sizeof(float), err)) &&
        !(rc = fc_alloc(c, &hu, (size_t)(n * n_ff) * sizeof(float), err)) &&
        !(rc = fc_mm(c, hg, 0, x, E, g, row0, n_ff, NULL, n, err)) &&
        !(rc = fc_mm(c, hu, 0, x, E, u, row0, n_ff, NULL, n, err))) {
        fk_swiglu(hg, hu, n * n_ff, c->ks);
        rc = fc_mm(c, out, 0, hg, n_ff, d, drow0, E, NULL, n, err);
    }
    fc_dfree(c, hg);
    fc_dfree(c, hu);
    return rc;
}

static fs_rows fc_rows(const gguf_tensor *t, int64_t row0, int64_t n_rows)
{
    fs_rows r = {t, row0, n_rows};
    return r;
}

/* An MoE layer's routing on the host, token runs spread over the route pool.
 * The job is handed to the pool before the router logits are there: part 0
 * (the calling thread) waits for the GPU and then raises `ready`, the other
 * parts spin until it is raised. So the workers wake while the GPU still
 * computes the attention and the router, and the wake-up is off the layer's
 * critical path (from the logits' arrival to the experts' first copy the
 * copy engine idles). Each token is routed by fw_moe_route alone: the same
 * bits on any number of threads. */
typedef struct fc_route_job {
    gguf_cuda_fwd *c;
    const fw_moe_cfg *cfg;
    double *logits;     /* n x ne, filled from c->hlog */
    const float *bias;
    int64_t *ids;
    double *wts, *scr; /* scr: scr_n doubles per part */
    int64_t n, ne, nu, scr_n;
    int ready;          /* 0 waiting, 1 the logits are there, -1 the wait failed */
    cudaError_t e;
    double t_ready;     /* when they arrived */
} fc_route_job;

static void fc_spin(unsigned i)
{
    if (i % 64 == 63) {
        sched_yield(); /* more threads than free cores must still progress */
        return;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void fc_route_part(void *arg, int part, int n_parts)
{
    fc_route_job *j = (fc_route_job *)arg;
    if (part == 0) {
        const double t0 = fc_now();
        j->e = cudaStreamSynchronize(j->c->ks);
        j->t_ready = fc_now();
        j->c->xf.host_sync_seconds += j->t_ready - t0;
        __atomic_store_n(&j->ready, j->e == cudaSuccess ? 1 : -1, __ATOMIC_RELEASE);
    } else {
        for (unsigned i = 0; !__atomic_load_n(&j->ready, __ATOMIC_ACQUIRE); i++)
            fc_spin(i);
    }
    if (__atomic_load_n(&j->ready, __ATOMIC_ACQUIRE) < 0)
        return;
    const int64_t ne = j->ne, nu = j->nu;
    double *scr = j->scr + part * j->scr_n;
    for (int64_t t = j->n * part / n_parts; t < j->n * (part + 1) / n_parts; t++) {
        for (int64_t e = 0; e < ne; e++)
            j->logits[t * ne + e] = j->c->hlog[t * ne + e];
        fw_moe_route(j->cfg, j->logits + t * ne, j->bias, j->ids + t * nu, j->wts + t * nu, scr,
                     GGUF_FWD_F32);
    }
}

/* The least tokens a routing part takes (one token is ~3 us of routing on
 * one core; the workers are already awake when the logits arrive). */
#define FC_ROUTE_TOKENS 4

static int ffn_moe(gguf_cuda_fwd *c, int64_t il, const float *x, int64_t n, float *out,
                   gguf_error *err)
{
    const gguf_hparams *hp = c->hp;
    const int64_t E = hp->n_embd, ne = hp->n_expert, nu = hp->n_expert_used, nff = hp->n_ff_exp;
    float *dlog = NULL, *xs = NULL, *ys = NULL, *hg = NULL, *hu = NULL, *ysh = NULL;
    int32_t *drows = NULL, *rows = NULL;
    double *logits = (double *)malloc((size_t)(n * ne) * sizeof(double) + 1);
    int64_t *ids = (int64_t *)malloc((size_t)(n * nu) * sizeof(int64_t) + 1);
    double *wts = (double *)malloc((size_t)(n * nu) * sizeof(double) + 1);
    const int64_t scr_n = 2 * ne + hp->n_group + 2;
    int n_parts = n > 0 ? (int)((n + FC_ROUTE_TOKENS - 1) / FC_ROUTE_TOKENS) : 1;
    if (n_parts > fw_pool_threads(c->route_pool))
        n_parts = fw_pool_threads(c->route_pool);
    double *scr = (double *)malloc((size_t)(n_parts * scr_n) * sizeof(double));
    float *cap = (float *)malloc((size_t)(n * nu) * sizeof(float) * 2 + 1);
    int64_t *start = (int64_t *)calloc((size_t)(ne + 1), sizeof(int64_t));
    fs_rows *rq = (fs_rows *)malloc((size_t)(3 * ne + 1) * sizeof(fs_rows));
    fs_rows *rq_up = rq + ne, *rq_down = rq + 2 * ne;
    int64_t *off_h = (int64_t *)malloc((size_t)(3 * ne + 1) * sizeof(int64_t));
    int64_t *off_e = off_h + ne, *ntok = off_h + 2 * ne;
    float *bias = NULL;
    const gguf_tensor *bt = W(c, il, GGUF_ROLE_FFN_EXP_PROBS_B);
    const gguf_tensor *gi = W(c, il, GGUF_ROLE_FFN_GATE_INP),
                      *ge = W(c, il, GGUF_ROLE_FFN_GATE_EXPS), *ue = W(c, il, GGUF_ROLE_FFN_UP_EXPS),
                      *de = W(c, il, GGUF_ROLE_FFN_DOWN_EXPS), *gs = W(c, il, GGUF_ROLE_FFN_GATE_SHEXP),
                      *us = W(c, il, GGUF_ROLE_FFN_UP_SHEXP), *ds = W(c, il, GGUF_ROLE_FFN_DOWN_SHEXP);
    int rc = 0;
    double t_route = 0;
    if (!logits || !ids || !wts || !scr || !cap || !start || !rq || !off_h) {
        rc = fw_nomem(err, "MoE");
        goto done;
    }
    if ((rc = need(gi, il, GGUF_ROLE_FFN_GATE_INP, err)) ||
        (rc = need(ge, il, GGUF_ROLE_FFN_GATE_EXPS, err)) ||
        (rc = need(ue, il, GGUF_ROLE_FFN_UP_EXPS, err)) ||
        (rc = need(de, il, GGUF_ROLE_FFN_DOWN_EXPS, err)))
        goto done;
    /* router logits on the GPU, routing on the host (fw_moe_route) */
    if ((rc = fc_alloc(c, &dlog, (size_t)(n * ne) * sizeof(float), err)) ||
        (rc = fc_mm(c, dlog, 0, x, E, gi, 0, ne, NULL, n, err)))
        goto done;
    if (c->hlog_n < (size_t)(n * ne)) {
        cudaFreeHost(c->hlog);
        c->hlog = NULL;
        c->hlog_n = 0;
        GC_GOTO(err, cudaHostAlloc((void **)&c->hlog, (size_t)(n * ne) * sizeof(float),
                                  cudaHostAllocDefault));
        c->hlog_n = (size_t)(n * ne);
    }
    GC_GOTO(err, cudaMemcpyAsync(c->hlog, dlog, (size_t)(n * ne) * sizeof(float),
                                cudaMemcpyDeviceToHost, c->ks));
    /* The shared experts need no routing: they stream while the GPU computes
     * the router logits, instead of after the wait for them. */
    if (gs && us && ds &&
        ((rc = fc_alloc(c, &ysh, (size_t)(n * E) * sizeof(float), err)) ||
         (rc = ffn_swiglu(c, gs, us, ds, 0, 0, gs->ne[1], x, n, ysh, err))))
        goto done;
    if (bt) { /* the selection bias is on the host: ready before the logits are */
        bias = (float *)malloc((size_t)bt->ne[0] * sizeof(float) + 1);
        if (!bias) {
            rc = fw_nomem(err, "MoE bias");
            goto done;
        }
        if ((rc = gguf_dequant_row(bt->type, bt->data, bias, bt->ne[0], err)))
            goto done;
    }
    {
        fc_route_job rj = {c, &c->set.moe, logits, bias, ids, wts, scr, n, ne, nu, scr_n, 0,
                           cudaSuccess, 0};
        fw_pool_run(c->route_pool, n_parts, fc_route_part, &rj);
        if (rj.e != cudaSuccess) {
            rc = gguf_cuda_fail(err, rj.e, "cudaStreamSynchronize (the router logits)");
            goto done;
        }
        t_route = rj.t_ready;
    }
    if (c->o.capture) {
        for (int64_t i = 0; i < n * nu; i++) {
            cap[i] = (float)ids[i];
            cap[n * nu + i] = (float)wts[i];
        }
        if ((rc = fc_capture_host(c, (int)il, GGUF_CAP_MOE_EXPERTS, cap, nu, n, err)) ||
            (rc = fc_capture_host(c, (int)il, GGUF_CAP_MOE_WEIGHTS, cap + n * nu, nu, n, err)))
            goto done;
    }
    /* Rows of the routed experts, expert by expert (the CPU's order): slot j
     * (the j-th routed expert) has ntok[j] rows from row off_e[j] / E. Padded,
     * every slot has P rows (the most tokens of any expert; the rest zeros),
     * so that a chunk's whole experts are one strided batched GEMM; packed,
     * the slots follow each other and every expert is its own GEMM. Padding
     * wins unless it multiplies the rows: a GEMM launch costs the host about
     * what the GPU spends on 128 rows of these GEMMs. The pads' memory is
     * bounded too: FC_PAD_BYTES at most, and a quarter of what a
     * --gpu-mem-limit leaves. */
    {
        /* tokens per expert, then where each expert's rows start */
        for (int64_t i = 0; i < n * nu; i++)
            if (ids[i] >= 0 && ids[i] < ne)
                start[ids[i] + 1]++;
        int64_t P = 0, nx = 0;
        for (int64_t e = 0; e < ne; e++) {
            P = start[e + 1] > P ? start[e + 1] : P;
            nx += start[e + 1] > 0;
            start[e + 1] += start[e];
        }
        const int64_t m = start[ne];
        const uint64_t row_bytes = (uint64_t)(2 * E + 2 * nff) * sizeof(float);
        uint64_t room = FC_PAD_BYTES;
        if (c->mem_limit) {
            const uint64_t held = c->mem_fixed + c->mem_used + (uint64_t)(m + 1) * row_bytes;
            const uint64_t left = c->mem_limit > held ? c->mem_limit - held : 0;
            /* a quarter of it: the pool's free blocks of other sizes count
             * against the device too */
            room = left / 4 < room ? left / 4 : room;
        }
        const bool padded = c->moe_pad && nx * P <= m + 128 * nx &&
                            (uint64_t)(nx * P - m) * row_bytes <= room;
        const int64_t rows_n = padded ? nx * P : m;
        /* one upload: layout row -> token (-1: a pad), then per token its
         * rows and weights in expert order (for the combine) */
        rows = (int32_t *)malloc((size_t)(rows_n + 2 * n * nu + 1) * sizeof(int32_t));
        int64_t *base = (int64_t *)malloc((size_t)(ne + nu) * sizeof(int64_t));
        if (!rows || !base) {
            free(base);
            rc = fw_nomem(err, "MoE rows");
            goto done;
        }
        int32_t *trow = rows + rows_n, *tw = trow + n * nu;
        for (int64_t i = 0; i < rows_n; i++)
            rows[i] = -1;
        nx = 0;
        for (int64_t e = 0; e < ne; e++) {
            const int64_t me = start[e + 1] - start[e];
            base[e] = padded ? nx * P : start[e];
            if (me == 0)
                continue; /* never routed to: never moved */
            rq[nx] = fc_rows(ge, e * nff, nff);
            rq_up[nx] = fc_rows(ue, e * nff, nff);
            rq_down[nx] = fc_rows(de, e * E, E);
            off_h[nx] = base[e] * nff;
            off_e[nx] = base[e] * E;
            ntok[nx] = me;
            nx++;
        }
        /* token by token (an expert's rows in token order), each token's
         * entries then sorted by expert (nu is small) */
        int64_t *te = base + ne; /* the token's experts so far, sorted */
        for (int64_t t = 0; t < n; t++) {
            int64_t got = 0;
            for (int64_t k = 0; k < nu; k++) {
                const int64_t e = ids[t * nu + k];
                trow[t * nu + k] = -1;
                memset(&tw[t * nu + k], 0, sizeof *tw);
                if (e < 0 || e >= ne)
                    continue;
                const int64_t r = base[e]++;
                const float wv = (float)wts[t * nu + k];
                rows[r] = (int32_t)t;
                int64_t j = got++;
                for (; j > 0 && te[j - 1] > e; j--) { /* a larger expert moves up */
                    trow[t * nu + j] = trow[t * nu + j - 1];
                    tw[t * nu + j] = tw[t * nu + j - 1];
                    te[j] = te[j - 1];
                }
                trow[t * nu + j] = (int32_t)r;
                memcpy(&tw[t * nu + j], &wv, sizeof wv);
                te[j] = e;
            }
        }
        free(base);
        if ((rc = fc_alloc(c, &drows, (size_t)(rows_n + 2 * n * nu + 1) * sizeof(int32_t), err)) ||
            (rc = fc_alloc(c, &xs, (size_t)((rows_n + 1) * E) * sizeof(float), err)) ||
            (rc = fc_alloc(c, &ys, (size_t)((rows_n + 1) * E) * sizeof(float), err)) ||
            (rc = fc_alloc(c, &hg, (size_t)((rows_n + 1) * nff) * sizeof(float), err)) ||
            (rc = fc_alloc(c, &hu, (size_t)((rows_n + 1) * nff) * sizeof(float), err)))
            goto done;
        GC_GOTO(err, cudaMemcpyAsync(drows, rows,
                                    (size_t)(rows_n + 2 * n * nu) * sizeof(int32_t),
                                    cudaMemcpyHostToDevice, c->ks));
        /* every routed row's input, expert by expert */
        fk_gather(xs, x, drows, rows_n, E, c->ks);
        c->st.experts_loaded += (uint64_t)nx;
        c->xf.host_route_seconds += fc_now() - t_route;
        /* The routed experts of each tensor in one request: they travel packed
         * into few chunks, their GEMMs launched chunk by chunk. */
        fc_moe_arg ag = {c->blas, hg, nff, xs, E, E, padded ? P : 0, off_h, off_e, ntok};
        fc_moe_arg au = ag;
        au.y = hu;
        fc_moe_arg ad = {c->blas, ys, E, hg, nff, nff, padded ? P : 0, off_e, off_h, ntok};
        if ((rc = fs_stream_chunks(c->fs, rq, nx, fc_moe_chunk, &ag, err)) ||
            (rc = fs_stream_chunks(c->fs, rq_up, nx, fc_moe_chunk, &au, err)))
            goto done;
        fk_swiglu(hg, hu, rows_n * nff, c->ks);
        if ((rc = fs_stream_chunks(c->fs, rq_down, nx, fc_moe_chunk, &ad, err)))
            goto done;
        /* combined token by token, experts in the CPU's order */
        fk_moe_combine(out, ys, (const int32_t *)drows + rows_n,
                       (const float *)(const void *)((const int32_t *)drows + rows_n + n * nu), n,
                       nu, E, ysh, c->ks);
    }
    GC_GOTO(err, cudaGetLastError());
    /* the host arrays above were copied from (pageable copies are staged
     * before they return), so they may be freed */
done:
    fc_dfree(c, dlog);
    fc_dfree(c, xs);
    fc_dfree(c, ys);
    fc_dfree(c, drows);
    fc_dfree(c, hg);
    fc_dfree(c, hu);
    fc_dfree(c, ysh);
    free(rq);
    free(off_h);
    free(logits);
    free(ids);
    free(wts);
    free(scr);
    free(cap);
    free(rows);
    free(start);
    free(bias);
    return rc;
}

/* ------------------------------------------------------------ context */

/* *buf grown from old_cap to cap rows of w floats, contents kept; on
 * failure *buf is as it was and nothing leaks. */
static int fc_grow_buf(gguf_cuda_fwd *c, float **buf, int64_t old_cap, int64_t cap, int64_t w,
                       gguf_error *err)
{
    float *nb = NULL;
    const int64_t had = *buf ? old_cap : 0; /* rows the buffer holds now */
    int rc = fc_mem_check(c, (uint64_t)((cap - had) * w) * sizeof(float), "the KV cache", err);
    if (rc)
        return rc;
    GC_GOTO(err, cudaMalloc(&nb, (size_t)(cap * w) * sizeof(float)));
    if (*buf)
        GC_GOTO(err, cudaMemcpyAsync(nb, *buf, (size_t)(old_cap * w) * sizeof(float),
                                     cudaMemcpyDeviceToDevice, c->ks));
    GC_GOTO(err, cudaStreamSynchronize(c->ks));
    cudaFree(*buf);
    *buf = nb;
    nb = NULL;
    c->mem_used += (uint64_t)((cap - had) * w) * sizeof(float);
done:
    cudaFree(nb);
    return rc;
}

static int fc_grow_cache(gguf_cuda_fwd *c, int64_t need_pos, gguf_error *err)
{
    if (need_pos <= c->cap)
        return 0;
    int64_t cap = c->cap ? c->cap : 64;
    while (cap < need_pos)
        cap *= 2;
    for (int64_t i = 0; i < c->hp->n_layer_main; i++) {
        fc_cache *l = &c->lc[i];
        int rc = fc_grow_buf(c, &l->k, c->cap, cap, c->k_w, err);
        if (!rc && c->v_w)
            rc = fc_grow_buf(c, &l->v, c->cap, cap, c->v_w, err);
        if (rc)
            return rc; /* layers grown so far keep their larger buffers */
    }
    c->cap = cap;
    return 0;
}

int gguf_cuda_fwd_create(gguf_cuda_fwd **out, const gguf_model *m, const gguf_fwd_opts *opts,
                         const gguf_cuda_fwd_opts *copts, gguf_error *err)
{
    if (!out)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "cuda forward: NULL out");
    *out = NULL;
    gguf_fwd_opts fo = {};
    if (opts)
        fo = *opts;
    if (fo.precision == GGUF_FWD_F64)
        return gguf_fail(err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                         "cuda forward: f64 precision is CPU only (the GPU computes f32)");
    if (fo.mla_mode == GGUF_FWD_MLA_ABSORBED)
        return gguf_fail(err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                         "cuda forward: absorbed MLA is CPU only (the GPU expands kv_b per head)");
    gguf_cuda_fwd_opts co = {};
    if (copts)
        co = *copts;
    if (co.device < 0 || co.n_copy_threads < 0 || co.n_copy_threads > 32 ||
        co.host_register < -1 || co.host_register > 1 || co.moe_pad < -1 || co.moe_pad > 0 ||
        co.n_route_threads < 0 || co.n_route_threads > 64)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "cuda forward: bad options");
    gguf_cuda_fwd *c = (gguf_cuda_fwd *)calloc(1, sizeof *c);
    if (!c)
        return fw_nomem(err, "context");
    int rc = fw_setup_init(&c->set, m, &fo, err);
    if (rc) {
        free(c);
        return rc;
    }
    c->m = m;
    c->hp = gguf_model_hparams(m);
    c->o = fo;
    c->device = co.device;
    c->moe_pad = co.moe_pad >= 0;
    c->k_w = c->set.k_w;
    c->v_w = c->set.v_w;
    c->lc = (fc_cache *)calloc((size_t)(c->hp->n_layer > 0 ? c->hp->n_layer : 1), sizeof *c->lc);
    if (!c->lc) {
        gguf_cuda_fwd_free(c);
        return fw_nomem(err, "cache");
    }
    int n_dev = 0;
    cudaError_t e = cudaGetDeviceCount(&n_dev);
    if (e == cudaSuccess && n_dev < 1)
        e = cudaErrorNoDevice;
    if (e != cudaSuccess) {
        gguf_cuda_fwd_free(c);
        return gguf_cuda_fail(err, e, "cudaGetDeviceCount");
    }
    if (co.device >= n_dev) {
        gguf_cuda_fwd_free(c);
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "cuda forward: device %d, but %d device(s)", co.device, n_dev);
    }
#define FC_INIT(call)                                                                         \
    do {                                                                                      \
        const cudaError_t e_ = (call);                                                        \
        if (e_ != cudaSuccess) {                                                              \
            gguf_cuda_fwd_free(c);                                                            \
            return gguf_cuda_fail(err, e_, #call);                                            \
        }                                                                                     \
    } while (0)
    FC_INIT(cudaSetDevice(c->device));
    {
        size_t tot = 0;
        FC_INIT(cudaMemGetInfo(&c->free0, &tot));
    }
    FC_INIT(cudaStreamCreateWithFlags(&c->ks, cudaStreamNonBlocking));
    {
        /* The default pool gives its memory back at every synchronization
         * (release threshold 0), and each MoE layer synchronizes for its
         * routing: the next layer's allocations would map memory again. */
        cudaMemPoolProps pp = {};
        pp.allocType = cudaMemAllocationTypePinned;
        pp.location.type = cudaMemLocationTypeDevice;
        pp.location.id = c->device;
        FC_INIT(cudaMemPoolCreate(&c->pool, &pp));
        uint64_t keep = UINT64_MAX;
        FC_INIT(cudaMemPoolSetAttribute(c->pool, cudaMemPoolAttrReleaseThreshold, &keep));
    }
    {
        /* the host copy is the slowest stage: as many threads as cores, up to 16 */
        const long ncpu = gguf_cpus_usable();
        const int nth = co.n_copy_threads ? co.n_copy_threads
                                          : (int)(ncpu < 1 ? 1 : ncpu > 16 ? 16 : ncpu);
        size_t cb = co.chunk_bytes ? co.chunk_bytes : FC_CHUNK_BYTES_DEFAULT;
        if (co.mem_limit && cb > co.mem_limit / 16)
            cb = co.mem_limit / 16; /* three raw chunks: 3/16 of the cap */
        /* 4 floats per quantized byte cover every type but F32/F16 rows,
         * for which the bytes bind first */
        int64_t cf = (int64_t)cb * 4 < FC_CHUNK_FLOATS ? (int64_t)cb * 4 : FC_CHUNK_FLOATS;
        if (co.mem_limit && cf > (int64_t)(co.mem_limit / 32))
            cf = (int64_t)(co.mem_limit / 32); /* the dequantized chunk: an eighth of the cap */
        if (co.mem_limit) {
            /* the floor: staging, cuBLAS's workspace, and one token's activations
             * through the widest layer (x, cur, y, and a few rows of scratch) */
            const gguf_hparams *hp = c->hp;
            const int64_t wide = hp->n_ff > hp->n_vocab ? hp->n_ff : hp->n_vocab;
            c->mem_limit = co.mem_limit;
            c->mem_fixed = 3 * cb + (size_t)cf * sizeof(float) + FC_BLAS_WORKSPACE;
            const uint64_t floor = c->mem_fixed + (uint64_t)(8 * hp->n_embd + 2 * wide) * 4;
            if (cb < ((size_t)1 << 20) || cf < hp->n_embd || floor > co.mem_limit) {
                char a[32], b[32];
                gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET,
                          "cuda: --gpu-mem-limit %s: not even one layer fits (staging and "
                          "one token's activations need %s)",
                          fc_mib(co.mem_limit, a, sizeof a),
                          fc_mib(floor > 16 * ((uint64_t)1 << 20) ? floor : 16u << 20, b,
                                 sizeof b));
                gguf_cuda_fwd_free(c);
                return GGUF_E_NOMEM;
            }
        }
        if (c->mem_limit) {
            /* under a cap the pool keeps no more than the cap leaves for
             * activations: what fragmentation leaves reserved beyond that is
             * given back at the next synchronization */
            uint64_t keep = c->mem_limit - c->mem_fixed;
            FC_INIT(cudaMemPoolSetAttribute(c->pool, cudaMemPoolAttrReleaseThreshold, &keep));
        }
        int frc = fs_create(&c->fs, c->ks, cb, cf, nth, fo.drop_pages, err);
        if (!frc)
            frc = fs_register_model(c->fs, m, co.host_register, err);
        if (frc) {
            gguf_cuda_fwd_free(c);
            return frc;
        }
    }
#undef FC_INIT
    {
        int brc = fwd_blas_reference(&c->blas, c->ks, err);
        if (brc) {
            gguf_cuda_fwd_free(c);
            return brc;
        }
    }
    if (c->hp->n_expert > 0) {
        /* routing a 64-token batch over 128 experts is ~0.2 ms on one core,
         * all of it time the copy engine idles: 8 threads take most of it */
        const long ncpu = gguf_cpus_usable();
        const int nrt = co.n_route_threads ? co.n_route_threads
                                           : (int)(ncpu < 1 ? 1 : ncpu > 8 ? 8 : ncpu);
        int prc = nrt > 1 ? fw_pool_create(&c->route_pool, nrt, err) : 0;
        if (prc) {
            gguf_cuda_fwd_free(c);
            return prc;
        }
    }
    /* the two dequantized chunks are always there */
    c->resident = fs_resident_bytes(c->fs);
    c->st.peak_weight_bytes = c->resident;
    *out = c;
    return 0;
}

void gguf_cuda_fwd_free(gguf_cuda_fwd *c)
{
    if (!c)
        return;
    if (c->ks) {
        (void)cudaSetDevice(c->device);
        (void)cudaStreamSynchronize(c->ks);
    }
    if (c->lc && c->hp)
        for (int64_t i = 0; i < c->hp->n_layer; i++) {
            cudaFree(c->lc[i].k);
            cudaFree(c->lc[i].v);
        }
    free(c->lc);
    free(c->atab);
    if (c->hlog)
        cudaFreeHost(c->hlog);
    fs_free(c->fs);
    fw_pool_free(c->route_pool);
    if (c->blas)
        cublasDestroy(c->blas);
    if (c->ks)
        cudaStreamDestroy(c->ks);
    if (c->pool)
        cudaMemPoolDestroy(c->pool);
    fw_setup_free(&c->set);
    free(c);
}

int64_t gguf_cuda_fwd_n_past(const gguf_cuda_fwd *c)
{
    return c ? c->n_past : 0;
}

void gguf_cuda_fwd_stats(const gguf_cuda_fwd *c, gguf_fwd_stats *out, gguf_cuda_fwd_xfer *xfer)
{
    if (!c)
        return;
    const fs_stats fs = fs_get_stats(c->fs);
    if (out) {
        *out = c->st;
        out->weight_bytes = fs.bytes;
        out->dequant_floats = fs.floats;
    }
    if (xfer) {
        *xfer = c->xf;
        xfer->h2d_bytes = fs.bytes;
        xfer->chunks = fs.chunks;
        xfer->host_copy_seconds = fs.copy_seconds;
        xfer->host_wait_seconds = fs.wait_seconds;
        xfer->host_issue_seconds = fs.issue_seconds;
        xfer->direct_bytes = fs.direct_bytes;
        xfer->registered_bytes = fs.registered_bytes;
        xfer->register_seconds = fs.register_seconds;
    }
}

/* ------------------------------------------------------------ eval */

/* Embedding rows, one request entry per token, into x's rows. */
typedef struct fc_embd_arg {
    float *x;
    int64_t E;
    cudaStream_t s;
} fc_embd_arg;

static int fc_embd_chunk(const float *w, int64_t i, int64_t r0, int64_t nr, void *arg,
                         gguf_error *err)
{
    const fc_embd_arg *a = (const fc_embd_arg *)arg;
    (void)r0;
    (void)nr;
    GC_TRY(err, cudaMemcpyAsync(a->x + i * a->E, w, (size_t)a->E * sizeof(float),
                                cudaMemcpyDeviceToDevice, a->s));
    return 0;
}

/* ------------------------------------------------------------ the loop's ops */

/* One eval's state for the loop's ops (fwd_block.h). */
typedef struct fc_eval_ctx {
    gguf_cuda_fwd *c;
    const double *cs; /* the RoPE table of these positions */
    float *lg;        /* the logits on the device: freed by fc_eval */
} fc_eval_ctx;

static int fc_op_embed(void *ctx, const int32_t *tokens, int64_t n, float *x, float *part,
                       gguf_error *err)
{
    gguf_cuda_fwd *c = ((fc_eval_ctx *)ctx)->c;
    (void)part;
    const gguf_tensor *te = W(c, -1, GGUF_ROLE_TOKEN_EMBD);
    int rc;
    if ((rc = need(te, -1, GGUF_ROLE_TOKEN_EMBD, err)))
        return rc;
    fs_rows *rq = (fs_rows *)malloc((size_t)n * sizeof *rq);
    if (!rq)
        return fw_nomem(err, "embedding");
    for (int64_t t = 0; t < n; t++) {
        rq[t].t = te;
        rq[t].row0 = tokens[t];
        rq[t].n_rows = 1;
    }
    fc_embd_arg a = {x, c->hp->n_embd, c->ks};
    rc = fs_stream(c->fs, rq, n, fc_embd_chunk, &a, err);
    free(rq);
    return rc;
}

static int fc_op_norm(void *ctx, int64_t il, gguf_role role, gguf_role alt, float *y,
                      const float *x, int64_t n, gguf_error *err)
{
    gguf_cuda_fwd *c = ((fc_eval_ctx *)ctx)->c;
    const int64_t E = c->hp->n_embd;
    const gguf_tensor *w = W(c, il, role);
    if (!w && alt != GGUF_ROLE_UNKNOWN)
        w = W(c, il, alt);
    return fc_norm(c, y, x, n, 1, E, E, 0, w, err);
}

static int fc_op_attention(void *ctx, int64_t il, const float *cur, int64_t n, float *out,
                           bool *reduce, gguf_error *err)
{
    const fc_eval_ctx *v = (const fc_eval_ctx *)ctx;
    *reduce = false;
    return v->c->hp->is_mla ? attn_mla(v->c, il, cur, n, v->cs, out, err)
                            : attn_gqa(v->c, il, cur, n, v->cs, out, err);
}

/* The shared experts are added inside ffn_moe: has_shared stays false. */
static int fc_op_ffn(void *ctx, int64_t il, bool moe, const float *cur, int64_t n,
                     fb_ffn_out *out, gguf_error *err)
{
    gguf_cuda_fwd *c = ((fc_eval_ctx *)ctx)->c;
    out->reduce_routed = false;
    if (moe)
        return ffn_moe(c, il, cur, n, out->routed, err);
    const gguf_tensor *g = W(c, il, GGUF_ROLE_FFN_GATE), *u = W(c, il, GGUF_ROLE_FFN_UP),
                      *d = W(c, il, GGUF_ROLE_FFN_DOWN);
    int rc;
    if ((rc = need(g, il, GGUF_ROLE_FFN_GATE, err)) || (rc = need(u, il, GGUF_ROLE_FFN_UP, err)) ||
        (rc = need(d, il, GGUF_ROLE_FFN_DOWN, err)))
        return rc;
    return ffn_swiglu(c, g, u, d, 0, 0, g->ne[1], cur, n, out->routed, err);
}

static int fc_op_head(void *ctx, const float *cur, int64_t n, fb_logits *out, gguf_error *err)
{
    fc_eval_ctx *v = (fc_eval_ctx *)ctx;
    gguf_cuda_fwd *c = v->c;
    const int64_t E = c->hp->n_embd, V = c->hp->n_vocab;
    int rc;
    if ((rc = fc_alloc(c, &v->lg, (size_t)(n * V) * sizeof(float), err)))
        return rc;
    const gguf_tensor *wo = W(c, -1, GGUF_ROLE_OUTPUT);
    if (!wo)
        wo = W(c, -1, GGUF_ROLE_TOKEN_EMBD); /* tied embeddings */
    if ((rc = fc_mm(c, v->lg, 0, cur, E, wo, 0, V, NULL, n, err)))
        return rc;
    out->dev = v->lg;
    return 0;
}

static int fc_op_capture(void *ctx, int layer, gguf_capture_point p, const float *dev,
                         const float *host, int64_t width, int64_t n, gguf_error *err)
{
    gguf_cuda_fwd *c = ((fc_eval_ctx *)ctx)->c;
    return host ? fc_capture_host(c, layer, p, host, width, n, err)
                : fc_capture(c, layer, p, dev, width, n, err);
}

static void fc_op_measure(void *ctx)
{
    fc_sample_mem(((fc_eval_ctx *)ctx)->c);
}

static int fc_op_logits(void *ctx, const fb_logits *lg, int64_t n, float *logits_out,
                        gguf_error *err)
{
    gguf_cuda_fwd *c = ((fc_eval_ctx *)ctx)->c;
    /* a copy to pageable memory waits for the stream: timed as the sync */
    const double t0 = fc_now();
    if (logits_out)
        GC_TRY(err, cudaMemcpyAsync(logits_out, lg->dev,
                                    (size_t)(n * c->hp->n_vocab) * sizeof(float),
                                    cudaMemcpyDeviceToHost, c->ks));
    GC_TRY(err, cudaStreamSynchronize(c->ks));
    c->xf.host_sync_seconds += fc_now() - t0;
    GC_TRY(err, cudaGetLastError());
    c->n_past += n;
    return 0;
}

static const fb_ops fc_ops = {
    fc_op_embed, fc_op_norm,    fc_op_attention, fc_op_ffn,    NULL /* one GPU: no reduce */,
    fc_op_head,  fc_op_capture, fc_op_measure,   fc_op_logits,
};

static int fc_eval(gguf_cuda_fwd *c, const int32_t *tokens, int64_t n, float *logits_out,
                   gguf_error *err)
{
    const int64_t E = c->hp->n_embd;
    float *x = NULL, *cur = NULL, *y = NULL;
    double *cs = NULL;
    fc_eval_ctx v = {c, NULL, NULL};
    int rc;
    GC_GOTO(err, cudaSetDevice(c->device));
    if ((rc = fc_grow_cache(c, c->n_past + n, err)))
        return rc;
    if ((rc = fc_alloc(c, &x, (size_t)(n * E) * sizeof(float), err)) ||
        (rc = fc_alloc(c, &cur, (size_t)(n * E) * sizeof(float), err)) ||
        (rc = fc_alloc(c, &y, (size_t)(n * E) * sizeof(float), err)) ||
        (rc = fwd_rope_table(&c->set.rope, c->n_past, n, c->pool, c->ks, &cs, err)))
        goto done;
    v.cs = cs;
    {
        const fb_exec e = {&fc_ops, &v, c->m, c->ks, x, cur, y, NULL};
        rc = fb_run(&e, tokens, n, logits_out, err);
    }
done:
    fc_dfree(c, x);
    fc_dfree(c, cur);
    fc_dfree(c, y);
    fc_dfree(c, v.lg);
    fc_dfree(c, cs);
    /* Leave nothing queued behind a failure: the next call starts clean. */
    cudaError_t se = cudaStreamSynchronize(c->ks);
    if (!rc && se != cudaSuccess)
        rc = gguf_cuda_fail(err, se, "forward");
    return rc;
}

int gguf_cuda_fwd_eval(gguf_cuda_fwd *c, const int32_t *tokens, int64_t n, float *logits,
                       gguf_error *err)
{
    if (!c || !tokens || n < 1)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "forward: no tokens");
    const int64_t V = c->hp->n_vocab;
    for (int64_t t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= V)
            return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                             "forward: token %lld is %d, outside the vocabulary (%lld)",
                             (long long)t, tokens[t], (long long)V);
    const double t0 = fc_now();
    int rc = fc_eval(c, tokens, n, logits, err);
    const double dt = fc_now() - t0;
    c->st.seconds += dt;
    c->xf.stream_seconds += dt;
    return rc;
}

/* ------------------------------------------------------------ gguf_fwd_ctx */

static int fc_be_eval(void *impl, const int32_t *tokens, int64_t n, float *logits,
                      gguf_error *err)
{
    return gguf_cuda_fwd_eval((gguf_cuda_fwd *)impl, tokens, n, logits, err);
}

static int64_t fc_be_n_past(const void *impl)
{
    return gguf_cuda_fwd_n_past((const gguf_cuda_fwd *)impl);
}

static void fc_be_stats(const void *impl, gguf_fwd_stats *out)
{
    gguf_cuda_fwd_stats((const gguf_cuda_fwd *)impl, out, NULL);
}

static int fc_be_set_capture(void *impl, gguf_fwd_capture_fn fn, void *user)
{
    gguf_cuda_fwd *c = (gguf_cuda_fwd *)impl;
    c->o.capture = fn;
    c->o.capture_user = user;
    return 0;
}

static void fc_be_free(void *impl)
{
    gguf_cuda_fwd_free((gguf_cuda_fwd *)impl);
}

static const gguf_fwd_backend fc_backend = {"cuda", fc_be_eval, fc_be_n_past, fc_be_stats,
                                            fc_be_set_capture, fc_be_free};

int gguf_cuda_fwd_ctx_create(gguf_fwd_ctx **out, const gguf_model *m, const gguf_fwd_opts *opts,
                             const gguf_cuda_fwd_opts *copts, gguf_error *err)
{
    *out = NULL;
    gguf_cuda_fwd *c = NULL;
    int rc = gguf_cuda_fwd_create(&c, m, opts, copts, err);
    return rc ? rc : gguf_fwd_ctx_wrap(out, m, &fc_backend, c, err);
}

gguf_cuda_fwd *gguf_cuda_fwd_of(const gguf_fwd_ctx *ctx)
{
    return (gguf_cuda_fwd *)gguf_fwd_ctx_impl(ctx, &fc_backend);
}

/* ------------------------------------------------------------ bandwidth */

int gguf_cuda_h2d_bandwidth(double *bytes_per_s, size_t bytes, int reps, gguf_error *err)
{
    if (!bytes_per_s)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "cuda: h2d_bandwidth: NULL out");
    *bytes_per_s = 0;
    if (!bytes)
        bytes = (size_t)256 << 20;
    if (reps < 1)
        reps = 5;
    void *h = NULL, *d = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    int rc = 0;
    cudaError_t e = cudaHostAlloc(&h, bytes, cudaHostAllocDefault);
    if (e == cudaSuccess)
        e = cudaMalloc(&d, bytes);
    if (e == cudaSuccess)
        e = cudaEventCreate(&e0);
    if (e == cudaSuccess)
        e = cudaEventCreate(&e1);
    if (e == cudaSuccess)
        memset(h, 1, bytes);
    float best = 0;
    for (int r = 0; r <= reps && e == cudaSuccess; r++) { /* the first is a warm-up */
        float ms = 0;
        e = cudaEventRecord(e0, 0);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, 0);
        if (e == cudaSuccess)
            e = cudaEventRecord(e1, 0);
        if (e == cudaSuccess)
            e = cudaEventSynchronize(e1);
        if (e == cudaSuccess)
            e = cudaEventElapsedTime(&ms, e0, e1);
        if (e == cudaSuccess && r > 0 && (best == 0 || ms < best))
            best = ms;
    }
    if (e != cudaSuccess)
        rc = gguf_cuda_fail(err, e, "h2d bandwidth");
    else if (best > 0)
        *bytes_per_s = (double)bytes / ((double)best * 1e-3);
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    cudaFree(d);
    if (h)
        cudaFreeHost(h);
    return rc;
}
