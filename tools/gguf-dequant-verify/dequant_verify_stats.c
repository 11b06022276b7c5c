/* Per-tensor statistics, the scan for suspicious block scales, and the units
 * (blocks, rows) out of line with the rest of their tensor. */
#include "dequant_verify.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/blocks.h"
#include "gguf/types.h"

void dv_stats_init(dv_stats *s)
{
    memset(s, 0, sizeof *s);
    s->min = INFINITY;
    s->max = -INFINITY;
}

/* One pass over finite values with four independent accumulators (so the
 * additions do not wait on each other); a non-finite value is the rare path. */
static void stats_range(dv_stats *s, const float *x, uint64_t n)
{
    double sum[4] = {0}, sq[4] = {0};
    double mn = s->min, mx = s->max, amax = s->absmax;
    uint64_t nan = 0, inf = 0;
    uint64_t i = 0;
    const uint64_t n4 = n - n % 4;
    for (; i < n4; i += 4) {
        uint32_t u[4];
        memcpy(u, x + i, sizeof u);
        if (((u[0] | u[1] | u[2] | u[3]) & 0x7F800000u) == 0x7F800000u ||
            (u[0] & 0x7F800000u) == 0x7F800000u || (u[1] & 0x7F800000u) == 0x7F800000u ||
            (u[2] & 0x7F800000u) == 0x7F800000u || (u[3] & 0x7F800000u) == 0x7F800000u) {
            for (int k = 0; k < 4; k++) {
                const float v = x[i + k];
                if (isnan(v)) {
                    nan++;
                } else if (isinf(v)) {
                    inf++;
                } else {
                    const double d = v;
                    sum[k] += d;
                    sq[k] += d * d;
                    mn = d < mn ? d : mn;
                    mx = d > mx ? d : mx;
                    amax = fabs(d) > amax ? fabs(d) : amax;
                }
            }
            continue;
        }
        for (int k = 0; k < 4; k++) {
            const double d = x[i + k];
            sum[k] += d;
            sq[k] += d * d;
            mn = d < mn ? d : mn;
            mx = d > mx ? d : mx;
        }
    }
    for (; i < n; i++) {
        const float v = x[i];
        if (isnan(v)) {
            nan++;
        } else if (isinf(v)) {
            inf++;
        } else {
            const double d = v;
            sum[0] += d;
            sq[0] += d * d;
            mn = d < mn ? d : mn;
            mx = d > mx ? d : mx;
        }
    }
    if (-mn > amax)
        amax = -mn;
    if (mx > amax)
        amax = mx;
    s->sum += (sum[0] + sum[1]) + (sum[2] + sum[3]);
    s->sum_sq += (sq[0] + sq[1]) + (sq[2] + sq[3]);
    s->min = mn;
    s->max = mx;
    s->absmax = amax;
    s->n_finite += n - nan - inf;
    s->n_nan += nan;
    s->n_inf += inf;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define DV_STATS_AVX2 1

/* The same pass eight floats at a time: min/max in float (exact), sums in
 * double. A group of eight holding a NaN or Inf goes through stats_range. */
__attribute__((target("avx2"))) static void stats_range_avx2(dv_stats *s, const float *x,
                                                             uint64_t n)
{
    const __m256i expo = _mm256_set1_epi32(0x7F800000);
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    __m256d q0 = _mm256_setzero_pd(), q1 = _mm256_setzero_pd();
    __m256 mn = _mm256_set1_ps(INFINITY), mx = _mm256_set1_ps(-INFINITY);
    uint64_t i = 0, fin = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const __m256i nonfinite = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(v), expo), expo);
        if (!_mm256_testz_si256(nonfinite, nonfinite)) {
            stats_range(s, x + i, 8);
            continue;
        }
        mn = _mm256_min_ps(mn, v);
        mx = _mm256_max_ps(mx, v);
        const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
        const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
        s0 = _mm256_add_pd(s0, lo);
        s1 = _mm256_add_pd(s1, hi);
        q0 = _mm256_add_pd(q0, _mm256_mul_pd(lo, lo));
        q1 = _mm256_add_pd(q1, _mm256_mul_pd(hi, hi));
        fin += 8;
    }
    double sum[4], sq[4];
    float a[8], b[8];
    _mm256_storeu_pd(sum, _mm256_add_pd(s0, s1));
    _mm256_storeu_pd(sq, _mm256_add_pd(q0, q1));
    _mm256_storeu_ps(a, mn);
    _mm256_storeu_ps(b, mx);
    if (fin) {
        for (int k = 0; k < 8; k++) {
            s->min = a[k] < s->min ? a[k] : s->min;
            s->max = b[k] > s->max ? b[k] : s->max;
        }
        s->absmax = -s->min > s->absmax ? -s->min : s->absmax;
        s->absmax = s->max > s->absmax ? s->max : s->absmax;
        s->sum += (sum[0] + sum[1]) + (sum[2] + sum[3]);
        s->sum_sq += (sq[0] + sq[1]) + (sq[2] + sq[3]);
        s->n_finite += fin;
    }
    if (i < n)
        stats_range(s, x + i, n - i);
}
#endif

static void stats_any(dv_stats *s, const float *x, uint64_t n)
{
#ifdef DV_STATS_AVX2
    if (__builtin_cpu_supports("avx2")) {
        stats_range_avx2(s, x, n);
        return;
    }
#endif
    stats_range(s, x, n);
}

typedef struct stats_part {
    dv_stats s;
    const float *x;
    uint64_t n;
} stats_part;

static void *stats_thread(void *p)
{
    stats_part *sp = p;
    stats_any(&sp->s, sp->x, sp->n);
    return NULL;
}

void dv_stats_add(dv_stats *s, const float *x, uint64_t n, int threads)
{
    if (threads > 64)
        threads = 64;
    if (threads <= 1 || n < (1u << 20)) {
        stats_any(s, x, n);
        return;
    }
    stats_part parts[64];
    pthread_t th[64];
    int started[64] = {0};
    for (int t = 0; t < threads; t++) {
        dv_stats_init(&parts[t].s);
        const uint64_t lo = n * (uint64_t)t / (uint64_t)threads;
        const uint64_t hi = n * (uint64_t)(t + 1) / (uint64_t)threads;
        parts[t].x = x + lo;
        parts[t].n = hi - lo;
        if (t > 0)
            started[t] = pthread_create(&th[t], NULL, stats_thread, &parts[t]) == 0;
    }
    stats_any(&parts[0].s, parts[0].x, parts[0].n);
    for (int t = 1; t < threads; t++) {
        if (started[t])
            pthread_join(th[t], NULL);
        else
            stats_any(&parts[t].s, parts[t].x, parts[t].n);
    }
    /* merge in a fixed order: the result does not depend on timing */
    for (int t = 0; t < threads; t++) {
        const dv_stats *p = &parts[t].s;
        s->sum += p->sum;
        s->sum_sq += p->sum_sq;
        if (p->n_finite) {
            s->min = p->min < s->min ? p->min : s->min;
            s->max = p->max > s->max ? p->max : s->max;
            s->absmax = p->absmax > s->absmax ? p->absmax : s->absmax;
        }
        s->n_finite += p->n_finite;
        s->n_nan += p->n_nan;
        s->n_inf += p->n_inf;
    }
}

double dv_stats_mean(const dv_stats *s)
{
    return s->n_finite ? s->sum / (double)s->n_finite : NAN;
}

double dv_stats_std(const dv_stats *s)
{
    if (!s->n_finite)
        return NAN;
    const double m = dv_stats_mean(s);
    const double var = s->sum_sq / (double)s->n_finite - m * m;
    return var > 0 ? sqrt(var) : 0.0;
}

/* ---- suspicious scales (where each type keeps them: the library) ---- */

void dv_scan_scales(dv_stats *s, uint32_t type, const uint8_t *data, uint64_t n_blocks)
{
    const gguf_type_info *ti = gguf_type_get(type);
    if (!ti || !ti->quantized)
        return;
    for (uint64_t i = 0; i < n_blocks; i++) {
        const unsigned f = gguf_block_scale_flags(type, data + i * ti->type_size);
        s->blk_zero += (f & GGUF_SCALE_ZERO) != 0;
        s->blk_nan += (f & GGUF_SCALE_NAN) != 0;
        s->blk_inf += (f & GGUF_SCALE_INF) != 0;
        s->blk_subnormal += (f & GGUF_SCALE_SUBNORMAL) != 0;
        s->blk_bad_encoding += (f & GGUF_SCALE_BAD_ENCODING) != 0;
    }
    s->n_blocks += n_blocks;
}

/* ---- units out of line (see dequant_verify.h) ---- */

void dv_units_init(dv_units *u)
{
    memset(u, 0, sizeof *u);
    u->worst_excess = -1;
    u->median_snr_db = INFINITY;
    u->flag_at = pow(10.0, DV_OUTLIER_DB / 10.0);
}

void dv_units_free(dv_units *u)
{
    free(u->held);
    u->held = NULL;
    u->n_held = u->cap_held = 0;
}

/* The k-th smallest of v[0..n) (v is reordered): quickselect with a
 * three-way partition, so that many equal values (exact units) stay linear. */
static double quickselect(double *v, size_t n, size_t k)
{
    size_t lo = 0, hi = n; /* the k-th lies in [lo, hi) */
    while (hi - lo > 1) {
        const double piv = v[lo + (hi - lo) / 2];
        size_t lt = lo, i = lo, gt = hi;
        while (i < gt) {
            const double t = v[i];
            if (t < piv) {
                v[i++] = v[lt];
                v[lt++] = t;
            } else if (t > piv) {
                v[i] = v[--gt];
                v[gt] = t;
            } else {
                i++;
            }
        }
        if (k < lt)
            hi = lt;
        else if (k >= gt)
            lo = gt;
        else
            return piv;
    }
    return v[lo];
}

/* The k-th smallest of n non-negative values (v is reordered). Their bit
 * patterns sort as the values do: a histogram of the top 16 bits finds the
 * k-th's bucket in one branch-free pass, and quickselect finishes inside it
 * (a million units: milliseconds, where quickselect alone mispredicts). */
static double select_kth(double *v, size_t n, size_t k)
{
    enum { BITS = 16 };
    uint32_t *count = n > 4096 ? calloc((size_t)1 << BITS, sizeof *count) : NULL;
    if (!count)
        return quickselect(v, n, k);
    for (size_t i = 0; i < n; i++) {
        uint64_t u;
        memcpy(&u, &v[i], sizeof u);
        count[u >> (64 - BITS)]++;
    }
    size_t below = 0, b = 0;
    while (below + count[b] <= k)
        below += count[b++];
    free(count);
    size_t m = 0; /* the bucket's values to the front */
    for (size_t i = 0; i < n; i++) {
        uint64_t u;
        memcpy(&u, &v[i], sizeof u);
        if (u >> (64 - BITS) == b)
            v[m++] = v[i];
    }
    return quickselect(v, m, k - below);
}

enum { MED_MSE, MED_REL, MED_PEAK, MED_SNR };

/* Median over the held units (NaN errors left out) of one quantity. */
static double units_median(const dv_units *u, int what, double *v)
{
    size_t n = 0;
    for (size_t i = 0; i < u->n_held; i++) {
        const dv_unit *x = &u->held[i];
        if (isnan(x->err))
            continue;
        if (what == MED_MSE && (x->err > 0 || x->sig > 0))
            v[n++] = x->err / x->n;
        else if (what == MED_REL && x->peak > 0)
            v[n++] = x->err / x->peak;
        else if (what == MED_PEAK && x->peak > 0)
            v[n++] = x->peak / x->n;
        else if (what == MED_SNR && x->sig > 0)
            v[n++] = x->err / x->sig;
    }
    return n ? select_kth(v, n, n / 2) : 0.0;
}

/* The medians from the held units: E0, R0 (floored) and the median unit SNR. */
static void units_medians(dv_units *u, double *scratch)
{
    const double floor = pow(10.0, -DV_OUTLIER_FLOOR_DB / 10.0);
    const double me = units_median(u, MED_MSE, scratch);
    const double mr = units_median(u, MED_REL, scratch);
    const double mp = units_median(u, MED_PEAK, scratch);
    const double ms = units_median(u, MED_SNR, scratch);
    u->e0 = me > mp * floor ? me : mp * floor;
    u->r0 = mr > floor ? mr : floor;
    u->median_snr_db = ms > 0 ? -10.0 * log10(ms) : INFINITY;
    u->fixed = true;
}

double dv_unit_excess(const dv_units *u, const dv_unit *x)
{
    if (isnan(x->err))
        return INFINITY;
    if (x->err <= 0)
        return 0.0;
    const double a = u->e0 > 0 ? (x->err / x->n) / u->e0 : INFINITY;
    const double b = x->peak > 0 ? (x->err / x->peak) / u->r0 : INFINITY;
    return a < b ? a : b;
}

static void units_score(dv_units *u, const dv_unit *x)
{
    const double ex = dv_unit_excess(u, x);
    u->count++;
    u->flagged += ex >= u->flag_at;
    if (ex > u->worst_excess) {
        u->worst_excess = ex;
        u->worst = *x;
    }
}

/* Fix the medians from what is held, score it and let it go (later units are
 * scored as they come). */
static void units_flush(dv_units *u)
{
    if (!u->fixed) {
        double *scratch = malloc(sizeof(double) * (u->n_held ? u->n_held : 1));
        if (!scratch) {
            u->oom = true;
            return;
        }
        units_medians(u, scratch);
        free(scratch);
    }
    for (size_t i = 0; i < u->n_held; i++)
        units_score(u, &u->held[i]);
    dv_units_free(u);
}

void dv_units_add(dv_units *u, const dv_unit *x)
{
    if (u->oom)
        return;
    if (u->fixed) { /* past DV_UNITS_CAP: scored against the first units' medians */
        u->from_first = true;
        units_score(u, x);
        return;
    }
    if (u->n_held == u->cap_held) {
        const size_t cap = u->cap_held ? u->cap_held * 2 : 1024;
        dv_unit *h = realloc(u->held, sizeof *h * cap);
        if (!h) {
            u->oom = true;
            return;
        }
        u->held = h;
        u->cap_held = cap;
    }
    u->held[u->n_held++] = *x;
    if (u->n_held == DV_UNITS_CAP) /* enough to know the tensor: fix the medians */
        units_flush(u);
}

void dv_units_finish(dv_units *u)
{
    if (!u->oom && (!u->fixed || u->n_held))
        units_flush(u);
    dv_units_free(u);
}
