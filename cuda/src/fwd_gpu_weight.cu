/* Weights of the GPU executor (fwd_gpu.h): the file's tensors streamed by
 * rows for one GPU, the plan's slices built on the GPU for a rank; one
 * matmul, norm and capture over both. */
#include "cuda_internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

extern "C" {
#include "gguf/dequant.h"
}
#include "fwd_common.h"
#include "fwd_cuda_internal.h"
#include "fwd_gpu.h"

double gx_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define GX_BLAS(err, call)                                                                    \
    do {                                                                                      \
        const cublasStatus_t gx_s_ = (call);                                                  \
        if (gx_s_ != CUBLAS_STATUS_SUCCESS)                                                   \
            return fwd_blas_fail((err), gx_s_, #call);                                        \
    } while (0)

/* ------------------------------------------------------------ fetch */

static void gx_count_resident(gx *c, int64_t n_floats)
{
    c->resident += (uint64_t)n_floats * sizeof(float);
    if (c->resident > c->st.peak_weight_bytes)
        c->st.peak_weight_bytes = c->resident;
}

bool gx_has(const gx_w *w)
{
    return w->t || w->d || w->h;
}

int64_t gx_rows(const gx_w *w)
{
    return w->ne[1] * w->ne[2] * w->ne[3];
}

bool gx_present(const gx *c, int64_t il, gguf_role role)
{
    return c->plan ? gguf_shard_plan_get(c->plan, il, role) != NULL
                   : gguf_model_get(c->m, il, role) != NULL;
}

int gx_need(const gx_w *w, int64_t il, gguf_role role, gguf_error *err)
{
    return gx_has(w) ? 0 : fw_missing(il, role, err);
}

/* The plan's entry index of e (the streamer materializes by index). */
static int64_t gx_plan_index(const gx *c, const gguf_shard_tensor *e)
{
    for (int64_t i = 0; i < gguf_shard_plan_count(c->plan); i++)
        if (gguf_shard_plan_at(c->plan, i) == e)
            return i;
    return -1;
}

/* Rank r's slice of e, as the CPU's gguf_shard_materialize places it: on
 * the host (w->h) with GX_HOST, else on the GPU (w->d) from the streamed
 * rows (only the kept slabs of an expert tensor). */
static int gx_get_slice(gx *c, const gguf_shard_tensor *e, gx_w *w, int flags, const bool *keep,
                        int64_t n_keep, gguf_error *err)
{
    const gguf_shard_slice *sl = &e->ranks[c->r];
    int64_t n = 1;
    for (int d = 0; d < 4; d++) {
        w->ne[d] = sl->ne[d] > 0 ? sl->ne[d] : 1;
        n *= w->ne[d];
    }
    const int64_t idx = gx_plan_index(c, e);
    w->n = n;
    w->e = e;
    if (flags & GX_HOST) {
        w->h = (float *)malloc((size_t)n * sizeof(float) + 4);
        if (!w->h)
            return fw_nomem(err, e->name);
        return gguf_shard_materialize(c->plan, idx, c->r, w->h, (size_t)n, err);
    }
    int rc = gx_zalloc(c, &w->d, (size_t)n * sizeof(float), err);
    if (rc)
        return rc;
    gx_count_resident(c, n);
    return fs_materialize(c->fs, c->plan, idx, c->r, w->d, n, keep, n_keep, err);
}

int gx_get(gx *c, int64_t il, gguf_role role, gx_w *w, int flags, const bool *keep,
           int64_t n_keep, gguf_error *err)
{
    memset(w, 0, sizeof *w);
    if (!c->plan) {
        const gguf_tensor *t = gguf_model_get(c->m, il, role);
        if (t) {
            w->t = t;
            for (int d = 0; d < 4; d++)
                w->ne[d] = t->ne[d] > 0 ? t->ne[d] : 1;
            w->n = w->ne[0] * gx_rows(w);
        }
        return 0;
    }
    const gguf_shard_tensor *e = gguf_shard_plan_get(c->plan, il, role);
    if (!e)
        return 0;
    int rc = gx_get_slice(c, e, w, flags, keep, n_keep, err);
    if (rc)
        gx_release(c, w);
    return rc;
}

void gx_release(gx *c, gx_w *w)
{
    if (w->d) {
        c->resident -= (uint64_t)w->n * sizeof(float);
        gx_dfree(c, w->d);
    }
    free(w->h);
    memset(w, 0, sizeof *w);
}

/* ------------------------------------------------------------ streamed rows */

int gx_stream(gx *c, const gguf_tensor *t, int64_t row0, int64_t n_rows, fs_rows_fn fn,
              void *arg, gguf_error *err)
{
    const fs_rows one = {t, row0, n_rows};
    return fs_stream(c->fs, &one, 1, fn, arg, err);
}

typedef struct gx_load_arg {
    float *dst;
    int64_t width;
    cudaStream_t s;
} gx_load_arg;

static int gx_load_chunk(const float *w, int64_t i, int64_t r0, int64_t nr, void *arg,
                         gguf_error *err)
{
    gx_load_arg *a = (gx_load_arg *)arg;
    (void)i;
    GC_TRY(err, cudaMemcpyAsync(a->dst + r0 * a->width, w, (size_t)(nr * a->width) * sizeof(float),
                                cudaMemcpyDeviceToDevice, a->s));
    return 0;
}

/* Rows [0, n_rows) of a file tensor into a new device buffer (free with
 * gx_unload). */
static int gx_load(gx *c, const gguf_tensor *t, int64_t n_rows, float **out, gguf_error *err)
{
    *out = NULL;
    const size_t n = (size_t)(n_rows * t->ne[0]);
    int rc = gx_alloc(c, out, n * sizeof(float), err);
    if (rc)
        return rc;
    gx_load_arg a = {*out, t->ne[0], c->ks};
    if ((rc = gx_stream(c, t, 0, n_rows, gx_load_chunk, &a, err))) {
        gx_dfree(c, *out);
        *out = NULL;
        return rc;
    }
    gx_count_resident(c, (int64_t)n);
    return 0;
}

static void gx_unload(gx *c, float *p, int64_t n_floats)
{
    if (!p)
        return;
    c->resident -= (uint64_t)n_floats * sizeof(float);
    gx_dfree(c, p);
}

int gx_on_device(gx *c, const gx_w *w, float **out, gguf_error *err)
{
    if (!w->t) {
        *out = w->d;
        return 0;
    }
    return gx_load(c, w->t, gx_rows(w), out, err);
}

void gx_release_dev(gx *c, const gx_w *w, float *p)
{
    if (w->t)
        gx_unload(c, p, w->n);
}

/* A vector weight's first `want` floats on the device: a streamed tensor's
 * first row, a slice zero-filled or cut (the CPU's fitv). */
static int gx_vec_dev(gx *c, const gx_w *w, int64_t want, float **out, gguf_error *err)
{
    if (w->t)
        return gx_load(c, w->t, 1, out, err);
    int rc = gx_zalloc(c, out, (size_t)want * sizeof(float), err);
    if (!rc && w->d) {
        const cudaError_t e = cudaMemcpyAsync(*out, w->d,
                                              (size_t)(w->n < want ? w->n : want) * sizeof(float),
                                              cudaMemcpyDeviceToDevice, c->ks);
        if (e != cudaSuccess) {
            gx_dfree(c, *out);
            *out = NULL;
            rc = gguf_cuda_fail(err, e, "vector weight");
        }
    }
    return rc;
}

static void gx_vec_free(gx *c, const gx_w *w, float *p)
{
    if (w->t)
        gx_unload(c, p, w->ne[0]);
    else
        gx_dfree(c, p);
}

int gx_host_vec(gx *c, const gx_w *w, int64_t want, float **out, gguf_error *err)
{
    *out = NULL;
    if (!gx_has(w))
        return 0;
    const int64_t have = w->t ? w->ne[0] : w->n;
    float *v = (float *)calloc((size_t)(want > have ? want : have) + 1, sizeof(float));
    if (!v)
        return fw_nomem(err, "vector weight");
    int rc = 0;
    if (w->t)
        rc = gguf_dequant_row(w->t->type, w->t->data, v, w->ne[0], err);
    else if (w->h)
        memcpy(v, w->h, (size_t)have * sizeof(float));
    else
        rc = gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                       "cuda forward: %s: no host copy of the slice", w->e->name);
    if (rc) {
        free(v);
        return rc;
    }
    if (!w->t && have > want)
        memset(v + want, 0, (size_t)(have - want) * sizeof(float));
    *out = v;
    return 0;
}

/* ------------------------------------------------------------ matmul */

/* y[t][r0 + o] = W[o] . x[t] for the nr rows of a part: one GEMM,
 * column-major W^T x. */
typedef struct gx_mm_arg {
    cublasHandle_t blas;
    float *y;
    int64_t ys;
    const float *x;
    int64_t xs;
    int64_t n_in, n_tok;
} gx_mm_arg;

static int gx_mm_chunk(const float *w, int64_t i, int64_t r0, int64_t nr, void *arg,
                       gguf_error *err)
{
    const gx_mm_arg *a = (const gx_mm_arg *)arg;
    const float one = 1.0f, zero = 0.0f;
    (void)i;
    if (a->n_tok < 1)
        return 0;
    GX_BLAS(err, cublasSgemm(a->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nr, (int)a->n_tok,
                             (int)a->n_in, &one, w, (int)a->n_in, a->x, (int)a->xs, &zero,
                             a->y + r0, (int)a->ys));
    return 0;
}

/* One GPU: the tensor's rows streamed, a GEMM per chunk as they land. */
static int gx_mm_streamed(gx *c, float *y, int64_t ys, const float *x, int64_t xw, const gx_w *w,
                          const gx_w *bias, int64_t n, gguf_error *err)
{
    const int64_t n_in = w->ne[0], n_out = gx_rows(w);
    gx_mm_arg a = {c->blas, y, ys ? ys : n_out, x, xw ? xw : n_in, n_in, n};
    int rc = gx_stream(c, w->t, 0, n_out, gx_mm_chunk, &a, err);
    if (rc || !bias || !gx_has(bias))
        return rc;
    float *b;
    if ((rc = gx_vec_dev(c, bias, n_out, &b, err)))
        return rc;
    fk_add_bias(y, b, n, n_out, a.ys, c->ks);
    gx_vec_free(c, bias, b);
    return 0;
}

/* A rank: one GEMM on the slice; the common part of x where widths differ. */
static int gx_mm_slice(gx *c, float *y, int64_t ys, const float *x, int64_t xw, const gx_w *w,
                       const gx_w *bias, int64_t n, gguf_error *err)
{
    const int64_t n_in = w->ne[0], n_out = gx_rows(w);
    if (!ys)
        ys = n_out;
    const float *xx = x;
    float *tmp = NULL, *b = NULL;
    const float one = 1.0f, zero = 0.0f;
    int rc = 0;
    if (xw != n_in) {
        if ((rc = gx_zalloc(c, &tmp, (size_t)(n * n_in) * sizeof(float), err)))
            return rc;
        const int64_t cw = xw < n_in ? xw : n_in;
        GC_GOTO(err, cudaMemcpy2DAsync(tmp, (size_t)n_in * sizeof(float), x,
                                       (size_t)xw * sizeof(float), (size_t)cw * sizeof(float),
                                       (size_t)n, cudaMemcpyDeviceToDevice, c->ks));
        xx = tmp;
    }
    {
        const cublasStatus_t bs = cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)n_out,
                                              (int)n, (int)n_in, &one, w->d, (int)n_in, xx,
                                              (int)n_in, &zero, y, (int)ys);
        if (bs != CUBLAS_STATUS_SUCCESS) {
            rc = fwd_blas_fail(err, bs, "sgemm");
            goto done;
        }
    }
    if (bias && gx_has(bias)) {
        if ((rc = gx_vec_dev(c, bias, n_out, &b, err)))
            goto done;
        fk_add_bias(y, b, n, n_out, ys, c->ks);
    }
done:
    gx_dfree(c, b);
    gx_dfree(c, tmp);
    return rc;
}

int gx_mm(gx *c, float *y, int64_t ys, const float *x, int64_t xw, const gx_w *w,
          const gx_w *bias, int64_t n, gguf_error *err)
{
    return w->t ? gx_mm_streamed(c, y, ys, x, xw, w, bias, n, err)
                : gx_mm_slice(c, y, ys, x, xw, w, bias, n, err);
}

int gx_norm(gx *c, float *y, const float *x, int64_t n_tok, int64_t heads, int64_t width,
            int64_t tok_stride, int64_t head_stride, const gx_w *w, gguf_error *err)
{
    float *wf = NULL;
    int rc;
    if (gx_has(w) && (rc = gx_vec_dev(c, w, width, &wf, err)))
        return rc;
    fk_rmsnorm(y, x, wf, n_tok, heads, width, tok_stride, head_stride, c->hp->rms_eps, c->ks);
    if (wf)
        gx_vec_free(c, w, wf);
    return 0;
}

/* ------------------------------------------------------------ captures */

int gx_capture(gx *c, int layer, gguf_capture_point p, const float *dev, const float *host,
               int64_t width, int64_t n_tok, gguf_error *err)
{
    if (!c->o.capture)
        return 0;
    if (host)
        return fw_emit(c->o.capture, c->o.capture_user, layer, p, c->cap_rank, host, width,
                       n_tok, c->n_past, err);
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
    int rc = fw_emit(c->o.capture, c->o.capture_user, layer, p, c->cap_rank, f, width, n_tok,
                     c->n_past, err);
    free(f);
    return rc;
}
