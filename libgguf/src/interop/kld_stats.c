/* KLD module: llama.cpp's statistics of a model's logits against a
 * --kl-divergence-base file (perplexity.cpp: log_softmax() with a
 * kl_divergence_result, then kl_divergence()'s summary). The per-row
 * arithmetic is in float where llama.cpp's is, the sums in double, and the
 * percentiles interpolate in float as its percentile lambda does. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/error_lib.h"
#include "gguf/kld.h"

struct gguf_kld_acc {
    double sum_nll, sum_nll2, sum_nll_base, sum_nll_base2, sum_nll_nll_base;
    double sum_kld, sum_kld2, sum_p_diff, sum_p_diff2, sum_p_diff4;
    float max_p_diff;
    int64_t n_same_top, count, capacity;
    float *kld_values, *p_diff_values;
    float *logp; /* one decoded base row */
    int32_t n_vocab;
};

int gguf_kld_acc_create(gguf_kld_acc **out, int64_t capacity, gguf_error *err)
{
    *out = NULL;
    if (capacity < 1)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "kld: capacity %lld",
                         (long long)capacity);
    gguf_kld_acc *a = calloc(1, sizeof *a);
    if (a) {
        a->kld_values = malloc((size_t)capacity * sizeof(float));
        a->p_diff_values = malloc((size_t)capacity * sizeof(float));
    }
    if (!a || !a->kld_values || !a->p_diff_values) {
        gguf_kld_acc_free(a);
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory for %lld rows",
                         (long long)capacity);
    }
    a->capacity = capacity;
    *out = a;
    return 0;
}

void gguf_kld_acc_free(gguf_kld_acc *a)
{
    if (!a)
        return;
    free(a->kld_values);
    free(a->p_diff_values);
    free(a->logp);
    free(a);
}

int gguf_kld_acc_add(gguf_kld_acc *a, const gguf_kld_file *f, int64_t c, int64_t j,
                     const float *logits, gguf_error *err)
{
    const int32_t n_vocab = gguf_kld_n_vocab(f), n_ctx = gguf_kld_n_ctx(f);
    if (c < 0 || c >= gguf_kld_n_chunk(f) || j < 0 || j >= gguf_kld_rows_per_chunk(n_ctx))
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "kld: no row %lld of chunk %lld",
                         (long long)j, (long long)c);
    if (a->count >= a->capacity)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "kld: more than %lld rows",
                         (long long)a->capacity);
    if (a->n_vocab != n_vocab) {
        float *p = realloc(a->logp, (size_t)n_vocab * sizeof *p);
        if (!p)
            return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory for a row");
        a->logp = p;
        a->n_vocab = n_vocab;
    }
    float scale, min_log_prob;
    gguf_kld_row(f, c, j, &scale, &min_log_prob, a->logp);
    const int32_t tok = gguf_kld_tokens(f)[c * n_ctx + gguf_kld_first(n_ctx) + j + 1];

    float max_logit = logits[0];
    int32_t imax = 0;
    for (int32_t i = 1; i < n_vocab; i++)
        if (logits[i] > max_logit) {
            max_logit = logits[i];
            imax = i;
        }
    double sum_exp = 0.0;
    for (int32_t i = 0; i < n_vocab; i++)
        sum_exp += expf(logits[i] - max_logit);
    const float log_sum_exp = (float)log(sum_exp);
    const float nll = max_logit + log_sum_exp - logits[tok];
    a->sum_nll += nll;
    a->sum_nll2 += nll * nll; /* float products, as llama.cpp */
    const float nll_base = -a->logp[tok];
    a->sum_nll_base += nll_base;
    a->sum_nll_base2 += nll_base * nll_base;
    a->sum_nll_nll_base += nll * nll_base;

    max_logit += log_sum_exp;
    double sum = 0;
    int32_t imax_base = -1;
    float p_log_base_max = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        const float p_log_base = a->logp[i];
        if (i == 0 || p_log_base > p_log_base_max) {
            p_log_base_max = p_log_base;
            imax_base = i;
        }
        if (p_log_base > -16.f) {
            const float p_base = expf(p_log_base);
            sum += p_base * (p_log_base - logits[i] + max_logit);
        }
    }
    a->sum_kld += sum;
    a->sum_kld2 += sum * sum;
    a->n_same_top += imax == imax_base;

    const float p_base = expf(-nll_base), p = expf(-nll);
    const float p_diff = p - p_base;
    a->sum_p_diff += p_diff;
    const double p_diff2 = p_diff * p_diff; /* float product, as llama.cpp */
    a->sum_p_diff2 += p_diff2;
    a->sum_p_diff4 += p_diff2 * p_diff2;
    if (fabsf(p_diff) > a->max_p_diff)
        a->max_p_diff = fabsf(p_diff);
    a->kld_values[a->count] = (float)sum;
    a->p_diff_values[a->count] = p_diff;
    a->count++;
    return 0;
}

static void mean_unc(double sum, double sum2, int64_t count, double *mean, double *unc)
{
    *mean = *unc = 0;
    if (count < 1)
        return;
    const double f = sum / (double)count;
    double df = sum2 / (double)count - f * f;
    *mean = f;
    *unc = df > 0 && count > 10 ? sqrt(df / (double)(count - 1)) : 0.;
}

static double covariance(double suma, double sumb, double sumab, int64_t count)
{
    if (count < 10)
        return 0.0;
    const double n = (double)count;
    return (sumab / n - (suma / n) * (sumb / n)) / (n - 1);
}

static int cmp_float(const void *x, const void *y)
{
    const float a = *(const float *)x, b = *(const float *)y;
    return (a > b) - (a < b);
}

/* llama.cpp's percentile lambda: interpolation computed in float. */
static float percentile(const float *v, int64_t n, float fraction)
{
    if (fraction <= 0)
        return v[0];
    if (fraction >= 1)
        return v[n - 1];
    float p = fraction * (float)(size_t)(n - 1);
    const size_t ip = (size_t)p;
    p -= (float)ip;
    const size_t next = ip + 1 < (size_t)n - 1 ? ip + 1 : (size_t)n - 1;
    return (1 - p) * v[ip] + p * v[next];
}

static float median(const float *v, int64_t n)
{
    return n % 2 == 0 ? 0.5f * (v[n / 2] + v[n / 2 - 1]) : v[n / 2];
}

void gguf_kld_acc_stats(gguf_kld_acc *a, gguf_kld_stats *s)
{
    memset(s, 0, sizeof *s);
    const int64_t n = a->count;
    s->count = n;
    if (n == 0)
        return;
    qsort(a->kld_values, (size_t)n, sizeof(float), cmp_float);
    qsort(a->p_diff_values, (size_t)n, sizeof(float), cmp_float);
    double lp, lp_unc, lb, lb_unc;
    mean_unc(a->sum_nll, a->sum_nll2, n, &lp, &lp_unc);
    mean_unc(a->sum_nll_base, a->sum_nll_base2, n, &lb, &lb_unc);
    s->ppl = exp(lp);
    s->ppl_unc = s->ppl * lp_unc;
    s->ppl_base = exp(lb);
    s->ppl_base_unc = s->ppl_base * lb_unc;
    const double cov = covariance(a->sum_nll, a->sum_nll_base, a->sum_nll_nll_base, n);
    s->cor_ln_ppl = lp_unc > 0 && lb_unc > 0 ? cov / (lp_unc * lb_unc) : 0;
    s->ln_ppl_ratio = lp - lb;
    const double r2 = lp_unc * lp_unc + lb_unc * lb_unc - 2.0 * cov;
    s->ln_ppl_ratio_unc = r2 > 0 ? sqrt(r2) : 0;
    s->ppl_ratio = exp(s->ln_ppl_ratio);
    s->ppl_ratio_unc = s->ppl_ratio * s->ln_ppl_ratio_unc;
    /* the covariance of PPL(Q) and PPL(base) to first order, as llama.cpp */
    s->ppl_diff = s->ppl - s->ppl_base;
    const double d2 = s->ppl_unc * s->ppl_unc + s->ppl_base_unc * s->ppl_base_unc -
                      2.0 * s->ppl * s->ppl_base * cov;
    s->ppl_diff_unc = d2 > 0 ? sqrt(d2) : 0;

    mean_unc(a->sum_kld, a->sum_kld2, n, &s->mean_kld, &s->mean_kld_unc);
    const float *k = a->kld_values;
    s->max_kld = k[n - 1];
    s->p999_kld = percentile(k, n, 0.999f);
    s->p99_kld = percentile(k, n, 0.990f);
    s->p95_kld = percentile(k, n, 0.950f);
    s->p90_kld = percentile(k, n, 0.900f);
    s->median_kld = median(k, n);
    s->p10_kld = percentile(k, n, 0.100f);
    s->p5_kld = percentile(k, n, 0.050f);
    s->p1_kld = percentile(k, n, 0.010f);
    s->p01_kld = percentile(k, n, 0.001f);
    s->min_kld = k[0];

    mean_unc(a->sum_p_diff, a->sum_p_diff2, n, &s->mean_dp, &s->mean_dp_unc);
    const float *d = a->p_diff_values;
    s->max_dp = d[n - 1];
    s->p999_dp = percentile(d, n, 0.999f);
    s->p99_dp = percentile(d, n, 0.990f);
    s->p95_dp = percentile(d, n, 0.950f);
    s->p90_dp = percentile(d, n, 0.900f);
    s->p75_dp = percentile(d, n, 0.750f);
    s->median_dp = median(d, n);
    s->p25_dp = percentile(d, n, 0.250f);
    s->p10_dp = percentile(d, n, 0.100f);
    s->p5_dp = percentile(d, n, 0.050f);
    s->p1_dp = percentile(d, n, 0.010f);
    s->p01_dp = percentile(d, n, 0.001f);
    s->min_dp = d[0];
    double mse, mse_unc;
    mean_unc(a->sum_p_diff2, a->sum_p_diff4, n, &mse, &mse_unc);
    s->rms_dp = sqrt(mse);
    s->rms_dp_unc = s->rms_dp > 0 ? 0.5 / s->rms_dp * mse_unc : 0;
    s->same_top_p = (double)a->n_same_top / (double)n;
    s->same_top_p_unc =
        n > 1 ? sqrt(s->same_top_p * (1.0 - s->same_top_p) / (double)(n - 1)) : 0;
}
