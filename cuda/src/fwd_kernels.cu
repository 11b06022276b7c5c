/*
 * Element-wise and reduction kernels of the GPU forward pass. Each mirrors an
 * op of libgguf/src/forward/forward_ops.c in f32 mode: values are stored as float,
 * sums run in double, and every place where the CPU rounds to float rounds
 * here too. The order of a reduction differs (a tree over threads instead of
 * a left-to-right loop), so results agree to rounding, not bit for bit.
 * The files are compiled with -fmad=false, so a*c - b*s is two products and
 * a difference, as in C.
 */
#include "fwd_cuda_internal.h"

#include <math.h>

#define FK_THREADS 256

static inline unsigned fk_blocks(int64_t n)
{
    int64_t b = (n + FK_THREADS - 1) / FK_THREADS;
    return (unsigned)(b < 1 ? 1 : (b > 65535 * 64 ? 65535 * 64 : b));
}

/* Sum and max over a block of FK_THREADS threads. */
__device__ static double fk_block_sum(double v, double *sh)
{
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = FK_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s)
            sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

__device__ static double fk_block_max(double v, double *sh)
{
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = FK_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s && sh[threadIdx.x + s] > sh[threadIdx.x])
            sh[threadIdx.x] = sh[threadIdx.x + s];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

/* ---- RMSNorm (fw_rmsnorm) ---- */

__global__ static void k_rmsnorm(float *y, const float *x, const float *w, int64_t heads,
                                 int64_t width, int64_t tok_stride, int64_t head_stride,
                                 double eps)
{
    __shared__ double sh[FK_THREADS];
    const int64_t r = blockIdx.x, t = r / heads, h = r % heads;
    const float *xr = x + t * tok_stride + h * head_stride;
    float *yr = y + t * tok_stride + h * head_stride;
    double ss = 0;
    for (int64_t i = threadIdx.x; i < width; i += FK_THREADS)
        ss += (double)xr[i] * (double)xr[i];
    ss = fk_block_sum(ss, sh);
    const double scale = 1.0 / sqrt(ss / (double)width + eps);
    for (int64_t i = threadIdx.x; i < width; i += FK_THREADS) {
        float v = (float)((double)xr[i] * scale);
        yr[i] = w ? (float)((double)v * (double)w[i]) : v;
    }
}

void fk_rmsnorm(float *y, const float *x, const float *w, int64_t n_tok, int64_t heads,
                int64_t width, int64_t tok_stride, int64_t head_stride, double eps,
                cudaStream_t s)
{
    if (n_tok * heads < 1)
        return;
    k_rmsnorm<<<(unsigned)(n_tok * heads), FK_THREADS, 0, s>>>(y, x, w, heads, width, tok_stride,
                                                               head_stride, eps);
}

/* ---- RoPE (fw_rope_apply) ---- */

__global__ static void k_rope(float *x, int64_t n_tok, int64_t heads, int64_t tok_stride,
                              int64_t head_stride, const double *cs, int64_t half, int half_pairs)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_tok * heads * half)
        return;
    const int64_t k = i % half, h = (i / half) % heads, t = i / (half * heads);
    float *xh = x + t * tok_stride + h * head_stride;
    const double c = cs[(t * half + k) * 2], sn = cs[(t * half + k) * 2 + 1];
    const int64_t i0 = half_pairs ? k : 2 * k, i1 = half_pairs ? k + half : 2 * k + 1;
    const double a = xh[i0], b = xh[i1];
    xh[i0] = (float)(a * c - b * sn);
    xh[i1] = (float)(a * sn + b * c);
}

void fk_rope(float *x, int64_t n_tok, int64_t heads, int64_t tok_stride, int64_t head_stride,
             const double *cs, int64_t half, int half_pairs, cudaStream_t s)
{
    const int64_t n = n_tok * heads * half;
    if (n < 1)
        return;
    k_rope<<<fk_blocks(n), FK_THREADS, 0, s>>>(x, n_tok, heads, tok_stride, head_stride, cs, half,
                                                half_pairs);
}

/* ---- element-wise ---- */

__global__ static void k_swiglu(float *g, const float *u, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const double x = g[i];
        const float si = (float)(x / (1.0 + exp(-x)));
        g[i] = (float)((double)si * (double)u[i]);
    }
}

void fk_swiglu(float *g, const float *u, int64_t n, cudaStream_t s)
{
    if (n > 0)
        k_swiglu<<<fk_blocks(n), FK_THREADS, 0, s>>>(g, u, n);
}

__global__ static void k_add(float *x, const float *y, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] = __fadd_rn(x[i], y[i]);
}

void fk_add(float *x, const float *y, int64_t n, cudaStream_t s)
{
    if (n > 0)
        k_add<<<fk_blocks(n), FK_THREADS, 0, s>>>(x, y, n);
}

__global__ static void k_add_bias(float *y, const float *b, int64_t n_tok, int64_t width,
                                  int64_t stride)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_tok * width;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = i / width, o = i % width;
        y[t * stride + o] = __fadd_rn(y[t * stride + o], b[o]);
    }
}

void fk_add_bias(float *y, const float *b, int64_t n_tok, int64_t width, int64_t stride,
                 cudaStream_t s)
{
    if (n_tok * width > 0)
        k_add_bias<<<fk_blocks(n_tok * width), FK_THREADS, 0, s>>>(y, b, n_tok, width, stride);
}

/* ---- attention (fw_attn_head) ---- */

#define FK_ATTN_KEYS 4 /* keys a warp scores at once: their loads in flight together */
#define FK_ATTN_QREG 8 /* q held in registers up to 8 x 32 dimensions */
#define FK_ATTN_PV 8   /* values a thread loads before adding them in order */
#define FK_ATTN_SMEM ((size_t)40 << 10) /* scores in shared memory up to this */

/* One block per (token, head). A warp per key for the scores (lanes over
 * the head's dimensions, coalesced; a fixed shuffle order), and for the
 * output FK_THREADS / dv groups of dv threads, each over a contiguous run of
 * keys, their partial sums added in group order: every thread busy and the
 * same bits run after run. The work is a few dozen dependent loads per
 * thread, so the loads are issued in batches (FK_ATTN_KEYS keys, FK_ATTN_PV
 * values) before their sums, which keep their order; the scores stay in
 * shared memory when they fit. */
__global__ static void k_attn(fk_attn_args a, int scores_shared)
{
    __shared__ double sh[FK_THREADS];
    extern __shared__ double fk_scores[];
    const int64_t t = blockIdx.x / a.nh, h = blockIdx.x % a.nh, g = h * a.nkv / a.nh;
    const int64_t nk = a.n_past + t + 1, nk_all = a.n_past + a.n_tok;
    const float *q = a.q + t * a.q_tok_stride + h * a.q_head_stride;
    double *sc = scores_shared ? fk_scores : a.scr + (int64_t)blockIdx.x * nk_all;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    constexpr int W = FK_THREADS / 32;
    const bool qreg = a.dk <= 32 * FK_ATTN_QREG;
    double qr[FK_ATTN_QREG];
#pragma unroll
    for (int r = 0; r < FK_ATTN_QREG; r++)
        qr[r] = qreg && lane + 32 * r < a.dk ? (double)q[lane + 32 * r] : 0.0;
    double mx = -INFINITY;
    for (int64_t j0 = warp; j0 < nk; j0 += (int64_t)W * FK_ATTN_KEYS) {
        double d[FK_ATTN_KEYS];
#pragma unroll
        for (int u = 0; u < FK_ATTN_KEYS; u++) {
            const int64_t j = j0 + (int64_t)u * W;
            d[u] = 0;
            if (j >= nk) /* the same for every lane of the warp */
                continue;
            const float *k = a.k + j * a.k_pos_stride + g * a.k_head_stride;
            if (qreg) {
#pragma unroll
                for (int r = 0; r < FK_ATTN_QREG; r++)
                    if (lane + 32 * r < a.dk)
                        d[u] += qr[r] * (double)k[lane + 32 * r];
            } else {
                for (int64_t i = lane; i < a.dk; i += 32)
                    d[u] += (double)q[i] * (double)k[i];
            }
        }
        for (int off = 16; off > 0; off >>= 1) {
#pragma unroll
            for (int u = 0; u < FK_ATTN_KEYS; u++)
                d[u] += __shfl_down_sync(0xffffffffu, d[u], off);
        }
        if (lane == 0) {
#pragma unroll
            for (int u = 0; u < FK_ATTN_KEYS; u++) {
                const int64_t j = j0 + (int64_t)u * W;
                if (j < nk) {
                    const double v = (double)(float)(d[u] * a.scale);
                    sc[j] = v;
                    mx = v > mx ? v : mx;
                }
            }
        }
    }
    mx = fk_block_max(mx, sh); /* also a barrier: every score is written */
    double sum = 0;
    for (int64_t j = threadIdx.x; j < nk; j += FK_THREADS) {
        const double e = (double)(float)exp(sc[j] - mx);
        sc[j] = e;
        sum += e;
    }
    sum = fk_block_sum(sum, sh); /* also a barrier: every sc[j] is written */
    for (int64_t j = threadIdx.x; j < nk; j += FK_THREADS)
        sc[j] = (double)(float)(sc[j] / sum);
    __syncthreads();
    float *o = a.out + t * a.out_tok_stride + h * a.dv;
    const float *v = a.v + g * a.v_head_stride;
    const int64_t vs = a.v_pos_stride;
    const int64_t ng = a.dv < FK_THREADS ? FK_THREADS / a.dv : 1;
    /* sum over keys [j0, j1) of column d, in key order */
    auto pv = [&](int64_t d, int64_t j0, int64_t j1) {
        double acc = 0;
        int64_t j = j0;
        for (; j + FK_ATTN_PV <= j1; j += FK_ATTN_PV) {
            double s8[FK_ATTN_PV];
            float v8[FK_ATTN_PV];
#pragma unroll
            for (int u = 0; u < FK_ATTN_PV; u++) {
                s8[u] = sc[j + u];
                v8[u] = v[(j + u) * vs + d];
            }
#pragma unroll
            for (int u = 0; u < FK_ATTN_PV; u++)
                acc += s8[u] * (double)v8[u];
        }
        for (; j < j1; j++)
            acc += sc[j] * (double)v[j * vs + d];
        return acc;
    };
    if (ng == 1) {
        for (int64_t d = threadIdx.x; d < a.dv; d += FK_THREADS)
            o[d] = (float)pv(d, 0, nk);
        return;
    }
    const int64_t grp = threadIdx.x / a.dv, d = threadIdx.x % a.dv;
    sh[threadIdx.x] = grp < ng ? pv(d, grp * nk / ng, (grp + 1) * nk / ng) : 0.0;
    __syncthreads();
    if (grp == 0) {
        double r = sh[d];
        for (int64_t k = 1; k < ng; k++)
            r += sh[k * a.dv + d];
        o[d] = (float)r;
    }
}

void fk_attn(const fk_attn_args *a, cudaStream_t s)
{
    if (a->n_tok * a->nh <= 0)
        return;
    const size_t bytes = (size_t)(a->n_past + a->n_tok) * sizeof(double);
    const bool in_shared = bytes <= FK_ATTN_SMEM;
    k_attn<<<(unsigned)(a->n_tok * a->nh), FK_THREADS, in_shared ? bytes : 0, s>>>(*a, in_shared);
}

/* ---- MoE ---- */

__global__ static void k_gather(float *dst, const float *src, const int32_t *rows, int64_t m,
                                int64_t E)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < m * E;
         i += (int64_t)gridDim.x * blockDim.x)
    {
        const int32_t r = rows[i / E];
        dst[i] = r >= 0 ? src[(int64_t)r * E + i % E] : 0.0f;
    }
}

void fk_gather(float *dst, const float *src, const int32_t *rows, int64_t m, int64_t E,
               cudaStream_t s)
{
    if (m * E > 0)
        k_gather<<<fk_blocks(m * E), FK_THREADS, 0, s>>>(dst, src, rows, m, E);
}

/* One expert at a time, and a token routes to an expert at most once, so no
 * two threads add to the same value: no atomics, a fixed order. */
__global__ static void k_moe_acc(double *acc, const float *ys, const int32_t *rows,
                                 const float *w, int64_t m, int64_t E)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < m * E;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / E;
        acc[(int64_t)rows[r] * E + i % E] += (double)(float)((double)ys[i] * (double)w[r]);
    }
}

void fk_moe_acc(double *acc, const float *ys, const int32_t *rows, const float *w, int64_t m,
                int64_t E, cudaStream_t s)
{
    if (m * E > 0)
        k_moe_acc<<<fk_blocks(m * E), FK_THREADS, 0, s>>>(acc, ys, rows, w, m, E);
}

/* One thread per output value: the token's experts in expert order, as
 * k_moe_acc expert by expert then k_acc_out would add them (the same bits),
 * in one launch instead of one per routed expert. */
__global__ static void k_moe_combine(float *out, const float *ys, const int32_t *trow,
                                     const float *tw, int64_t n, int64_t nu, int64_t E,
                                     const float *add)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n * E;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = i / E, col = i % E;
        double acc = 0.0;
        for (int64_t k = 0; k < nu; k++) {
            const int32_t r = trow[t * nu + k];
            if (r >= 0)
                acc += (double)(float)((double)ys[(int64_t)r * E + col] * (double)tw[t * nu + k]);
        }
        const float v = (float)acc;
        out[i] = add ? __fadd_rn(v, add[i]) : v;
    }
}

void fk_moe_combine(float *out, const float *ys, const int32_t *trow, const float *tw, int64_t n,
                    int64_t nu, int64_t E, const float *add, cudaStream_t s)
{
    if (n * E > 0)
        k_moe_combine<<<fk_blocks(n * E), FK_THREADS, 0, s>>>(out, ys, trow, tw, n, nu, E, add);
}

__global__ static void k_acc_out(float *out, const double *acc, const float *add, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float v = (float)acc[i];
        out[i] = add ? __fadd_rn(v, add[i]) : v;
    }
}

void fk_acc_out(float *out, const double *acc, const float *add, int64_t n, cudaStream_t s)
{
    if (n > 0)
        k_acc_out<<<fk_blocks(n), FK_THREADS, 0, s>>>(out, acc, add, n);
}

__global__ static void k_scale(float *x, int64_t n, double s)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] = (float)((double)x[i] * s);
}

void fk_scale(float *x, int64_t n, double s, cudaStream_t st)
{
    if (n > 0)
        k_scale<<<fk_blocks(n), FK_THREADS, 0, st>>>(x, n, s);
}

/* ---- transposed placement of a shard piece (gguf_shard_materialize) ---- */

__global__ static void k_place_t(float *out, const float *w, int64_t nr, int64_t w0, int64_t ld,
                                 int64_t out_ld)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nr * w0;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t k = i / w0, j = i % w0;
        out[j * out_ld + k] = w[k * ld + j];
    }
}

void fk_place_t(float *out, const float *w, int64_t nr, int64_t w0, int64_t ld, int64_t out_ld,
                cudaStream_t s)
{
    if (nr * w0 > 0)
        k_place_t<<<fk_blocks(nr * w0), FK_THREADS, 0, s>>>(out, w, nr, w0, ld, out_ld);
}
