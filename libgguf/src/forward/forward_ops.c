/* The ops of the reference forward pass. Activations are double; in f32
 * mode every op rounds what it writes to float, so a chain of ops computes
 * what an f32 implementation computes, except that every reduction (dot
 * products, norms, softmax sums) is accumulated in double. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "forward/forward_ops.h"

void fw_round(double *x, int64_t n, int prec)
{
    if (prec != GGUF_FWD_F32)
        return;
    for (int64_t i = 0; i < n; i++)
        x[i] = (double)(float)x[i];
}

static double rnd(double v, int prec)
{
    return prec == GGUF_FWD_F32 ? (double)(float)v : v;
}

double fw_dot(const double *a, const double *b, int64_t n)
{
    /* Four partial sums in a fixed order: deterministic, and not one long
     * dependency chain. */
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
    }
    for (; i < n; i++)
        s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

/* f32 weights . f64 activations. Four partial sums (lanes i mod 4) in a
 * fixed order, combined as (s0 + s1) + (s2 + s3); the tail goes to s0. Every
 * path below computes exactly these operations, so a result does not depend
 * on how tokens are grouped (one token, or four sharing the weight loads).
 * Plain C: the build uses -std=c11, so no FMA contraction changes rounding. */
typedef double fw_v2d __attribute__((vector_size(16)));

static inline fw_v2d w2(const float *w)
{
    return (fw_v2d){(double)w[0], (double)w[1]};
}

static inline fw_v2d x2(const double *x)
{
    fw_v2d v;
    memcpy(&v, x, sizeof v);
    return v;
}

static double dot_fd(const float *w, const double *x, int64_t n)
{
    fw_v2d a01 = {0, 0}, a23 = {0, 0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        a01 += w2(w + i) * x2(x + i);
        a23 += w2(w + i + 2) * x2(x + i + 2);
    }
    double s0 = a01[0], s1 = a01[1], s2 = a23[0], s3 = a23[1];
    for (; i < n; i++)
        s0 += (double)w[i] * x[i];
    return (s0 + s1) + (s2 + s3);
}

/* The same for four activation rows sharing one weight row. */
static void dot_fd4(const float *w, const double *x, int64_t xs, int64_t n, double out[4])
{
    const double *x0 = x, *x1 = x + xs, *x2p = x + 2 * xs, *x3 = x + 3 * xs;
    fw_v2d a0 = {0, 0}, b0 = {0, 0}, a1 = {0, 0}, b1 = {0, 0};
    fw_v2d a2 = {0, 0}, b2 = {0, 0}, a3 = {0, 0}, b3 = {0, 0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const fw_v2d wl = w2(w + i), wh = w2(w + i + 2);
        a0 += wl * x2(x0 + i);
        b0 += wh * x2(x0 + i + 2);
        a1 += wl * x2(x1 + i);
        b1 += wh * x2(x1 + i + 2);
        a2 += wl * x2(x2p + i);
        b2 += wh * x2(x2p + i + 2);
        a3 += wl * x2(x3 + i);
        b3 += wh * x2(x3 + i + 2);
    }
    double s[4][4] = {{a0[0], a0[1], b0[0], b0[1]},
                      {a1[0], a1[1], b1[0], b1[1]},
                      {a2[0], a2[1], b2[0], b2[1]},
                      {a3[0], a3[1], b3[0], b3[1]}};
    const double *xr[4] = {x0, x1, x2p, x3};
    for (int t = 0; t < 4; t++) {
        for (int64_t j = i; j < n; j++)
            s[t][0] += (double)w[j] * xr[t][j];
        out[t] = (s[t][0] + s[t][1]) + (s[t][2] + s[t][3]);
    }
}

void fw_rmsnorm(double *y, const double *x, const float *w, int64_t n, double eps, int prec)
{
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    const double scale = 1.0 / sqrt(ss / (double)n + eps);
    for (int64_t i = 0; i < n; i++) {
        /* f32 mode: the normalised value is a float before the weight
         * multiplies it, as in ggml (norm, then mul). */
        double v = rnd(x[i] * scale, prec);
        y[i] = w ? rnd(v * (double)w[i], prec) : v;
    }
}

void fw_layernorm(double *y, const double *x, const float *w, const float *b, int64_t n,
                  double eps, int prec)
{
    double mean = 0;
    for (int64_t i = 0; i < n; i++)
        mean += x[i];
    mean /= (double)n;
    double var = 0;
    for (int64_t i = 0; i < n; i++)
        var += (x[i] - mean) * (x[i] - mean);
    const double scale = 1.0 / sqrt(var / (double)n + eps);
    for (int64_t i = 0; i < n; i++) {
        double v = rnd((x[i] - mean) * scale, prec);
        if (w)
            v = rnd(v * (double)w[i], prec);
        if (b)
            v = rnd(v + (double)b[i], prec);
        y[i] = v;
    }
}

/* ---- matmul over threads ---- */

typedef struct mm_job {
    double *y;
    int64_t ys;
    const double *x;
    int64_t xs;
    const float *W;
    const float *bias;
    int64_t n_in, n_tok;
    int prec;
} mm_job;

static void mm_range(void *arg, int64_t o0, int64_t o1)
{
    const mm_job *j = arg;
    for (int64_t o = o0; o < o1; o++) {
        const float *w = j->W + o * j->n_in;
        const double b = j->bias ? (double)j->bias[o] : 0.0;
        int64_t t = 0;
        double d[4];
        for (; t < j->n_tok; t += 4) {
            const int k = j->n_tok - t >= 4 ? 4 : (int)(j->n_tok - t);
            if (k == 4)
                dot_fd4(w, j->x + t * j->xs, j->xs, j->n_in, d);
            else
                for (int u = 0; u < k; u++)
                    d[u] = dot_fd(w, j->x + (t + u) * j->xs, j->n_in);
            for (int u = 0; u < k; u++) {
                double s = d[u];
                if (j->bias)
                    s = rnd(s, j->prec) + b; /* ggml adds the bias as its own op */
                j->y[(t + u) * j->ys + o] = rnd(s, j->prec);
            }
        }
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* The same operations with AVX: one 4-lane accumulator per (row, token)
 * holds the partial sums s0..s3 (lane = i mod 4), so the results are
 * bit-identical to dot_fd / dot_fd4 (no FMA: products and sums are rounded
 * separately, as in the plain C). How the accumulators are grouped only
 * decides what shares a load: two rows by four tokens (two weight loads, four
 * activation loads, eight independent chains), or for the tokens left over
 * (all of them when decoding one token) four rows by one token, so that
 * the add latency of one chain is never the limit. Rows are taken in blocks
 * small enough to stay in cache while every token group passes over them. */
#define MM_BLOCK_FLOATS 32768 /* 128 KiB of weights per row block */

__attribute__((target("avx2"))) static inline __m256d mm_w4(const float *w)
{
    return _mm256_cvtps_pd(_mm_loadu_ps(w));
}

/* s0 + tail, then (s0 + s1) + (s2 + s3); bias and rounding as mm_range. */
__attribute__((target("avx2"))) static inline void mm_put(const mm_job *j, __m256d acc,
                                                          const float *w, const double *x,
                                                          int64_t o, int64_t t)
{
    double l[4];
    _mm256_storeu_pd(l, acc);
    double s0 = l[0];
    for (int64_t i = j->n_in & ~(int64_t)3; i < j->n_in; i++)
        s0 += (double)w[i] * x[i];
    double s = (s0 + l[1]) + (l[2] + l[3]);
    if (j->bias)
        s = rnd(s, j->prec) + (double)j->bias[o];
    j->y[t * j->ys + o] = rnd(s, j->prec);
}

/* rows o, o+1 by tokens t..t+3 */
__attribute__((target("avx2"))) static void mm_r2t4(const mm_job *j, int64_t o, int64_t t)
{
    const int64_t n4 = j->n_in & ~(int64_t)3;
    const float *w0 = j->W + o * j->n_in, *w1 = w0 + j->n_in;
    const double *x0 = j->x + t * j->xs, *x1 = x0 + j->xs, *x2 = x1 + j->xs, *x3 = x2 + j->xs;
    __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    __m256d b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    for (int64_t i = 0; i < n4; i += 4) {
        const __m256d u = mm_w4(w0 + i), v = mm_w4(w1 + i);
        __m256d xv = _mm256_loadu_pd(x0 + i);
        a0 = _mm256_add_pd(a0, _mm256_mul_pd(u, xv));
        b0 = _mm256_add_pd(b0, _mm256_mul_pd(v, xv));
        xv = _mm256_loadu_pd(x1 + i);
        a1 = _mm256_add_pd(a1, _mm256_mul_pd(u, xv));
        b1 = _mm256_add_pd(b1, _mm256_mul_pd(v, xv));
        xv = _mm256_loadu_pd(x2 + i);
        a2 = _mm256_add_pd(a2, _mm256_mul_pd(u, xv));
        b2 = _mm256_add_pd(b2, _mm256_mul_pd(v, xv));
        xv = _mm256_loadu_pd(x3 + i);
        a3 = _mm256_add_pd(a3, _mm256_mul_pd(u, xv));
        b3 = _mm256_add_pd(b3, _mm256_mul_pd(v, xv));
    }
    mm_put(j, a0, w0, x0, o, t);
    mm_put(j, a1, w0, x1, o, t + 1);
    mm_put(j, a2, w0, x2, o, t + 2);
    mm_put(j, a3, w0, x3, o, t + 3);
    mm_put(j, b0, w1, x0, o + 1, t);
    mm_put(j, b1, w1, x1, o + 1, t + 1);
    mm_put(j, b2, w1, x2, o + 1, t + 2);
    mm_put(j, b3, w1, x3, o + 1, t + 3);
}

/* row o by tokens t..t+3 */
__attribute__((target("avx2"))) static void mm_r1t4(const mm_job *j, int64_t o, int64_t t)
{
    const int64_t n4 = j->n_in & ~(int64_t)3;
    const float *w = j->W + o * j->n_in;
    const double *x0 = j->x + t * j->xs, *x1 = x0 + j->xs, *x2 = x1 + j->xs, *x3 = x2 + j->xs;
    __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i < n4; i += 4) {
        const __m256d u = mm_w4(w + i);
        a0 = _mm256_add_pd(a0, _mm256_mul_pd(u, _mm256_loadu_pd(x0 + i)));
        a1 = _mm256_add_pd(a1, _mm256_mul_pd(u, _mm256_loadu_pd(x1 + i)));
        a2 = _mm256_add_pd(a2, _mm256_mul_pd(u, _mm256_loadu_pd(x2 + i)));
        a3 = _mm256_add_pd(a3, _mm256_mul_pd(u, _mm256_loadu_pd(x3 + i)));
    }
    mm_put(j, a0, w, x0, o, t);
    mm_put(j, a1, w, x1, o, t + 1);
    mm_put(j, a2, w, x2, o, t + 2);
    mm_put(j, a3, w, x3, o, t + 3);
}

/* rows o..o+3 by token t */
__attribute__((target("avx2"))) static void mm_r4t1(const mm_job *j, int64_t o, int64_t t)
{
    const int64_t n = j->n_in, n4 = n & ~(int64_t)3;
    const float *w0 = j->W + o * n, *w1 = w0 + n, *w2 = w1 + n, *w3 = w2 + n;
    const double *x = j->x + t * j->xs;
    __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i < n4; i += 4) {
        const __m256d xv = _mm256_loadu_pd(x + i);
        a0 = _mm256_add_pd(a0, _mm256_mul_pd(mm_w4(w0 + i), xv));
        a1 = _mm256_add_pd(a1, _mm256_mul_pd(mm_w4(w1 + i), xv));
        a2 = _mm256_add_pd(a2, _mm256_mul_pd(mm_w4(w2 + i), xv));
        a3 = _mm256_add_pd(a3, _mm256_mul_pd(mm_w4(w3 + i), xv));
    }
    mm_put(j, a0, w0, x, o, t);
    mm_put(j, a1, w1, x, o + 1, t);
    mm_put(j, a2, w2, x, o + 2, t);
    mm_put(j, a3, w3, x, o + 3, t);
}

/* row o by token t */
__attribute__((target("avx2"))) static void mm_r1t1(const mm_job *j, int64_t o, int64_t t)
{
    const int64_t n4 = j->n_in & ~(int64_t)3;
    const float *w = j->W + o * j->n_in;
    const double *x = j->x + t * j->xs;
    __m256d a = _mm256_setzero_pd();
    for (int64_t i = 0; i < n4; i += 4)
        a = _mm256_add_pd(a, _mm256_mul_pd(mm_w4(w + i), _mm256_loadu_pd(x + i)));
    mm_put(j, a, w, x, o, t);
}

__attribute__((target("avx2"))) static void mm_range_avx2(void *arg, int64_t o0, int64_t o1)
{
    const mm_job *j = arg;
    int64_t block = MM_BLOCK_FLOATS / (j->n_in > 0 ? j->n_in : 1);
    block = block < 4 ? 4 : block & ~(int64_t)3;
    const int64_t t4 = j->n_tok & ~(int64_t)3;
    for (int64_t b0 = o0; b0 < o1; b0 += block) {
        const int64_t b1 = o1 - b0 < block ? o1 : b0 + block;
        for (int64_t t = 0; t < t4; t += 4) {
            int64_t o = b0;
            for (; o + 2 <= b1; o += 2)
                mm_r2t4(j, o, t);
            if (o < b1)
                mm_r1t4(j, o, t);
        }
        for (int64_t t = t4; t < j->n_tok; t++) {
            int64_t o = b0;
            for (; o + 4 <= b1; o += 4)
                mm_r4t1(j, o, t);
            for (; o < b1; o++)
                mm_r1t1(j, o, t);
        }
    }
}
#endif

void fw_matmul(double *y, int64_t y_stride, const double *x, int64_t x_stride, const float *W,
               const float *bias, int64_t n_in, int64_t n_out, int64_t n_tok, int n_threads,
               int prec)
{
    mm_job j = {y, y_stride ? y_stride : n_out, x, x_stride ? x_stride : n_in, W, bias,
                n_in, n_tok, prec};
    /* Threads only pay off on real work. */
    if ((double)n_in * (double)n_out * (double)n_tok < 262144.0)
        n_threads = 1;
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx2")) {
        fw_parallel(n_threads, n_out, mm_range_avx2, &j);
        return;
    }
#endif
    fw_parallel(n_threads, n_out, mm_range, &j);
}

typedef struct par_slot {
    fw_range_fn fn;
    void *arg;
    int64_t b, e;
} par_slot;

static void *par_main(void *p)
{
    par_slot *s = p;
    s->fn(s->arg, s->b, s->e);
    return NULL;
}

void fw_parallel(int n_threads, int64_t n, fw_range_fn fn, void *arg)
{
    if (n_threads > 64)
        n_threads = 64;
    if (n_threads <= 1 || n < 2) {
        fn(arg, 0, n);
        return;
    }
    if (n < n_threads)
        n_threads = (int)n;
    pthread_t th[64];
    par_slot slot[64];
    bool started[64] = {false};
    for (int i = 0; i < n_threads; i++) {
        slot[i] = (par_slot){fn, arg, n * i / n_threads, n * (i + 1) / n_threads};
        if (i > 0)
            started[i] = pthread_create(&th[i], NULL, par_main, &slot[i]) == 0;
    }
    fn(arg, slot[0].b, slot[0].e);
    for (int i = 1; i < n_threads; i++) {
        if (started[i])
            pthread_join(th[i], NULL);
        else
            fn(arg, slot[i].b, slot[i].e); /* could not start: do it here */
    }
}

/* ---- element-wise ---- */

void fw_softmax(double *x, int64_t n, int prec)
{
    double mx = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (x[i] > mx)
            mx = x[i];
    if (mx == -INFINITY) { /* everything masked: no weight anywhere */
        for (int64_t i = 0; i < n; i++)
            x[i] = 0;
        return;
    }
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = rnd(exp(x[i] - mx), prec);
        sum += x[i];
    }
    for (int64_t i = 0; i < n; i++)
        x[i] = rnd(x[i] / sum, prec);
}

double fw_silu(double x)
{
    return x / (1.0 + exp(-x));
}

double fw_sigmoid(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

void fw_swiglu(double *out, const double *gate, const double *up, int64_t n, int prec)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = rnd(rnd(fw_silu(gate[i]), prec) * up[i], prec);
}

/* ---- RoPE ---- */

void fw_rope_init(fw_rope *r, int type, int64_t n_rot, double base)
{
    *r = (fw_rope){type, n_rot, base, 1.0, 0.0, 0.0, 0.0, 1.0, NULL};
}

/* The pair index at which a rotation of wavelength beta completes n_rot / 2
 * turns over the original context (YaRN's correction dimension). */
static double yarn_corr_dim(int64_t n_rot, int64_t orig_ctx, double beta, double base)
{
    return (double)n_rot * log((double)orig_ctx / (beta * 2.0 * M_PI)) / (2.0 * log(base));
}

void fw_rope_init_yarn(fw_rope *r, int type, int64_t n_rot, double base, double factor,
                       int64_t orig_ctx, double beta_fast, double beta_slow, double mscale)
{
    fw_rope_init(r, type, n_rot, base);
    r->freq_scale = 1.0 / factor;
    r->ext_factor = 1.0;
    double lo = floor(yarn_corr_dim(n_rot, orig_ctx, beta_fast, base));
    double hi = ceil(yarn_corr_dim(n_rot, orig_ctx, beta_slow, base));
    r->corr_lo = lo < 0 ? 0 : lo;
    r->corr_hi = hi > (double)(n_rot - 1) ? (double)(n_rot - 1) : hi;
    r->mscale = mscale;
}

void fw_rope_apply(const fw_rope *r, double *x, int64_t pos, int prec)
{
    fw_rope_apply_heads(r, x, 1, 0, pos, prec);
}

void fw_rope_apply_heads(const fw_rope *r, double *x, int64_t n_heads, int64_t stride,
                         int64_t pos, int prec)
{
    const int64_t half = r->n_rot / 2;
    for (int64_t k = 0; k < half; k++) {
        double theta_extrap = (double)pos * pow(r->base, -2.0 * (double)k / (double)r->n_rot);
        if (r->freq_factors)
            theta_extrap /= (double)r->freq_factors[k]; /* llama 3.x rope_freqs */
        double theta = theta_extrap * r->freq_scale;
        if (r->ext_factor != 0.0) {
            /* Low pair indices (fast rotations) keep their original
             * frequency, high ones are interpolated, a linear ramp between. */
            double y = ((double)k - r->corr_lo) / fmax(0.001, r->corr_hi - r->corr_lo);
            double ramp = (1.0 - fmin(1.0, fmax(0.0, y))) * r->ext_factor;
            theta = theta * (1.0 - ramp) + theta_extrap * ramp;
        }
        const double c = cos(theta) * r->mscale, s = sin(theta) * r->mscale;
        const int64_t i0 = r->type == GGUF_ROPE_HALF ? k : 2 * k;
        const int64_t i1 = r->type == GGUF_ROPE_HALF ? k + half : 2 * k + 1;
        for (int64_t h = 0; h < n_heads; h++) { /* one angle, every head */
            double *xh = x + h * stride;
            const double a = xh[i0], b = xh[i1];
            xh[i0] = rnd(a * c - b * s, prec);
            xh[i1] = rnd(a * s + b * c, prec);
        }
    }
}

/* ---- attention ---- */

void fw_attn_head(double *out, const double *q, const double *K, int64_t k_stride,
                  const double *V, int64_t v_stride, int64_t n_keys, const uint8_t *keep,
                  int64_t dk, int64_t dv, double scale, double *scratch, int prec)
{
    for (int64_t j = 0; j < n_keys; j++)
        scratch[j] = keep && !keep[j] ? -INFINITY : rnd(fw_dot(q, K + j * k_stride, dk) * scale, prec);
    fw_softmax(scratch, n_keys, prec);
    for (int64_t d = 0; d < dv; d++)
        out[d] = 0;
    for (int64_t j = 0; j < n_keys; j++) {
        const double p = scratch[j];
        if (p == 0)
            continue;
        const double *v = V + j * v_stride;
        for (int64_t d = 0; d < dv; d++)
            out[d] += p * v[d];
    }
    fw_round(out, dv, prec);
}

/* ---- MoE routing ---- */

/* Top k by insertion into a sorted list, in one pass: an entry moves ahead
 * of another only when strictly greater, so ties keep the lower index first,
 * as passes of selection would pick them. -1 when a NaN is met (the passes
 * then decide, NaN handling included). */
static int64_t topk_insert(const double *scores, const uint8_t *keep, int64_t n, int64_t k,
                           int64_t *idx)
{
    int64_t got = 0;
    for (int64_t i = 0; i < n; i++) {
        if (keep && !keep[i])
            continue;
        const double v = scores[i];
        if (v != v)
            return -1;
        if (got == k && !(v > scores[idx[k - 1]]))
            continue;
        int64_t j = got < k ? got++ : k - 1;
        for (; j > 0 && v > scores[idx[j - 1]]; j--)
            idx[j] = idx[j - 1];
        idx[j] = i;
    }
    return got;
}

/* k passes over n, each taking the best entry not taken yet (strict >: the
 * lower index wins a tie; a NaN wins only a pass it starts). */
static int64_t topk_passes(const double *scores, const uint8_t *keep, int64_t n, int64_t k,
                           int64_t *idx)
{
    int64_t got = 0;
    for (; got < k; got++) {
        int64_t best = -1;
        for (int64_t i = 0; i < n; i++) {
            if (keep && !keep[i])
                continue;
            bool taken = false;
            for (int64_t j = 0; j < got && !taken; j++)
                taken = idx[j] == i;
            if (taken)
                continue;
            if (best < 0 || scores[i] > scores[best])
                best = i;
        }
        if (best < 0)
            break;
        idx[got] = best;
    }
    return got;
}

/* MoE routing calls this for every token of every layer: the single pass
 * costs about n compares where the passes cost k * n (and more), which was
 * most of the host's time routing a 64-token batch. */
int64_t fw_topk(const double *scores, const uint8_t *keep, int64_t n, int64_t k, int64_t *idx)
{
    if (k <= 0)
        return 0;
    const int64_t got = topk_insert(scores, keep, n, k, idx);
    return got >= 0 ? got : topk_passes(scores, keep, n, k, idx);
}

void fw_moe_route(const fw_moe_cfg *cfg, const double *logits, const float *bias,
                  int64_t *ids, double *weights, double *scratch, int prec)
{
    const int64_t ne = cfg->n_expert;
    double *probs = scratch, *sel = scratch + ne, *gscore = scratch + 2 * ne;
    for (int64_t e = 0; e < ne; e++)
        probs[e] = logits[e];
    if (cfg->gating == GGUF_GATING_SIGMOID) {
        for (int64_t e = 0; e < ne; e++)
            probs[e] = rnd(fw_sigmoid(probs[e]), prec);
    } else {
        fw_softmax(probs, ne, prec);
    }
    for (int64_t e = 0; e < ne; e++)
        sel[e] = bias ? rnd(probs[e] + (double)bias[e], prec) : probs[e];

    uint8_t keep_buf[FW_MAX_EXPERTS];
    uint8_t *keep = NULL;
    if (cfg->n_group > 1 && cfg->n_group_used < cfg->n_group && ne <= FW_MAX_EXPERTS &&
        cfg->n_group <= FW_MAX_EXPERTS) {
        /* Group-limited selection: a group's score is the sum of its two
         * best members; experts outside the best groups cannot be chosen. */
        const int64_t per = ne / cfg->n_group;
        const int64_t top = per < 2 ? per : 2;
        for (int64_t g = 0; g < cfg->n_group; g++) {
            int64_t best[2];
            int64_t got = fw_topk(sel + g * per, NULL, per, top, best);
            double s = 0;
            for (int64_t i = 0; i < got; i++)
                s += sel[g * per + best[i]];
            gscore[g] = rnd(s, prec);
        }
        int64_t gids[FW_MAX_EXPERTS];
        int64_t ng = fw_topk(gscore, NULL, cfg->n_group, cfg->n_group_used, gids);
        keep = keep_buf;
        memset(keep, 0, (size_t)ne);
        for (int64_t i = 0; i < ng; i++)
            memset(keep + gids[i] * per, 1, (size_t)per);
    }
    int64_t got = fw_topk(sel, keep, ne, cfg->n_used, ids);
    for (int64_t i = got; i < cfg->n_used; i++)
        ids[i] = -1;
    double sum = 0;
    for (int64_t i = 0; i < got; i++) {
        weights[i] = probs[ids[i]];
        sum += weights[i];
    }
    for (int64_t i = 0; i < got; i++) {
        if (cfg->norm)
            weights[i] = rnd(weights[i] / (sum > 6.103515625e-5 ? sum : 6.103515625e-5), prec);
        if (cfg->scale != 1.0 && cfg->scale != 0.0)
            weights[i] = rnd(weights[i] * cfg->scale, prec);
    }
    for (int64_t i = got; i < cfg->n_used; i++)
        weights[i] = 0;
}
