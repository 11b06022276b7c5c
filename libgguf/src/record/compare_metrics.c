/*
 * Comparison metrics between two float arrays, and the tolerance rules.
 * Everything accumulates in double: the errors we look for are as small as
 * 1e-9 relative (f64 against f64), far below float's resolution.
 */
#include "util/error_lib.h"
#include "gguf/compare.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOPK 5

/* Near-ties of the reference's logits do not count against top-1 agreement:
 * with random or quantized weights two logits can be equal to rounding, and
 * either choice is right. The gap is relative to the row's largest |logit|. */
#define TOP1_TIE_REL 1e-5

typedef struct acc {
    double saa, sbb, sab, sdd, max_abs;
    int64_t max_row, max_col, nonfinite_a, nonfinite_b;
} acc;

static void acc_add(acc *s, double a, double b, int64_t row, int64_t col)
{
    if (!isfinite(a))
        s->nonfinite_a++;
    else if (!isfinite(b))
        s->nonfinite_b++;
    double d = b - a;
    s->saa += a * a;
    s->sbb += b * b;
    s->sab += a * b;
    s->sdd += d * d;
    double ad = fabs(d);
    /* NaN sticks: a NaN difference is the worst difference there is. */
    if (s->max_row < 0 || (!isnan(s->max_abs) && (ad > s->max_abs || isnan(ad)))) {
        s->max_abs = ad;
        s->max_row = row;
        s->max_col = col;
    }
}

static void acc_finish(const acc *s, gguf_cmp_entry *e)
{
    e->norm_a = sqrt(s->saa);
    e->norm_b = sqrt(s->sbb);
    if (s->saa == 0)
        e->rel_l2 = s->sdd == 0 ? 0 : INFINITY;
    else
        e->rel_l2 = sqrt(s->sdd) / e->norm_a;
    if (s->saa == 0 && s->sbb == 0)
        e->cosine = 1;
    else if (s->saa == 0 || s->sbb == 0)
        e->cosine = 0;
    else
        e->cosine = s->sab / (e->norm_a * e->norm_b);
    if (isnan(s->saa) || isnan(s->sbb) || isnan(s->sab)) {
        e->rel_l2 = NAN;
        e->cosine = NAN;
    }
    e->max_abs = s->max_row < 0 ? 0 : s->max_abs;
    e->max_abs_row = s->max_row < 0 ? 0 : s->max_row;
    e->max_abs_col = s->max_row < 0 ? 0 : s->max_col;
    e->nonfinite_a = s->nonfinite_a;
    e->nonfinite_b = s->nonfinite_b;
}

/* log-sum-exp of a row, in double. */
static double row_lse(const float *x, int64_t n)
{
    double m = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (x[i] > m)
            m = x[i];
    if (!isfinite(m))
        return m;
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += exp((double)x[i] - m);
    return m + log(s);
}

/* Indices of the k largest values, largest first (first index wins ties). */
static int topk(const float *x, int64_t n, int64_t *idx, int k)
{
    int m = 0;
    for (int64_t i = 0; i < n; i++) {
        if (m == k && !(x[i] > x[idx[m - 1]]))
            continue;
        int j = m < k ? m++ : k - 1;
        while (j > 0 && x[i] > x[idx[j - 1]]) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = i;
    }
    return m;
}

static void logits_metrics(gguf_cmp_entry *e, const float *a, const float *b, int64_t rows,
                           int64_t cols)
{
    double kl_sum = 0, kl_max = 0, top5_sum = 0;
    int64_t top1 = 0, kl_max_row = 0;
    int k = cols < TOPK ? (int)cols : TOPK;
    for (int64_t r = 0; r < rows; r++) {
        const float *ar = a + r * cols, *br = b + r * cols;
        double la = row_lse(ar, cols), lb = row_lse(br, cols), kl = 0;
        for (int64_t i = 0; i < cols; i++) {
            double lpa = (double)ar[i] - la, lpb = (double)br[i] - lb;
            double p = exp(lpa);
            if (p > 0)
                kl += p * (lpa - lpb);
        }
        if (kl < 0 && kl > -1e-12)
            kl = 0; /* rounding below zero */
        if (!(kl <= kl_max) && !isnan(kl_max)) {
            kl_max = kl;
            kl_max_row = r;
        }
        kl_sum += kl;
        int64_t ia[TOPK], ib[TOPK];
        topk(ar, cols, ia, k);
        topk(br, cols, ib, k);
        double amax = fabs((double)ar[ia[0]]);
        if (ia[0] == ib[0] || (double)ar[ib[0]] >= (double)ar[ia[0]] - TOP1_TIE_REL * amax)
            top1++;
        int common = 0;
        for (int i = 0; i < k; i++)
            for (int j = 0; j < k; j++)
                common += ia[i] == ib[j];
        top5_sum += k ? (double)common / k : 1;
    }
    e->kl = rows ? kl_sum / (double)rows : 0;
    e->kl_max = kl_max;
    e->kl_max_row = kl_max_row;
    e->top1 = rows ? (double)top1 / (double)rows : 1;
    e->top5 = rows ? top5_sum / (double)rows : 1;
}

static int cmp_float(const void *x, const void *y)
{
    float a = *(const float *)x, b = *(const float *)y;
    return (a > b) - (a < b);
}

static void experts_metrics(gguf_cmp_entry *e, const float *a, const float *b, int64_t rows,
                            int64_t cols)
{
    float sa[64], sb[64];
    e->experts_first_row = -1;
    e->experts = 1;
    if (rows <= 0 || cols <= 0)
        return; /* an empty capture agrees; cols may be anything then */
    float *ha = cols <= 64 ? sa : malloc((size_t)cols * sizeof *ha);
    float *hb = cols <= 64 ? sb : malloc((size_t)cols * sizeof *hb);
    int64_t same = 0;
    e->experts_first_row = -1;
    for (int64_t r = 0; r < rows && ha && hb; r++) {
        memcpy(ha, a + r * cols, (size_t)cols * sizeof *ha);
        memcpy(hb, b + r * cols, (size_t)cols * sizeof *hb);
        qsort(ha, (size_t)cols, sizeof *ha, cmp_float);
        qsort(hb, (size_t)cols, sizeof *hb, cmp_float);
        if (!memcmp(ha, hb, (size_t)cols * sizeof *ha))
            same++;
        else if (e->experts_first_row < 0)
            e->experts_first_row = r;
    }
    e->experts = rows ? (double)same / (double)rows : 1;
    if (!ha || !hb)
        e->experts = NAN; /* out of memory: cannot say; NaN is over any bound */
    if (ha != sa)
        free(ha);
    if (hb != sb)
        free(hb);
}

void gguf_cmp_arrays(gguf_cmp_entry *e, uint32_t kind, const float *a, const float *b,
                     int64_t rows, int64_t cols, const float *ids_a, const float *ids_b)
{
    acc s = {.max_row = -1};
    e->kind = kind;
    e->rows = rows;
    e->cols = cols;
    e->n_elements = rows * cols;
    e->kl = e->kl_max = 0;
    e->kl_max_row = 0;
    e->top1 = e->top5 = e->experts = 1;
    e->experts_first_row = -1;
    if (kind == GGUF_CMP_KIND_WEIGHTS && ids_a && ids_b) {
        /* Pair weights by expert id; an expert on one side only meets a 0. */
        for (int64_t r = 0; r < rows; r++) {
            const float *xa = ids_a + r * cols, *xb = ids_b + r * cols;
            for (int64_t i = 0; i < cols; i++) {
                double wb = 0;
                for (int64_t j = 0; j < cols; j++)
                    if (xb[j] == xa[i]) {
                        wb = b[r * cols + j];
                        break;
                    }
                acc_add(&s, a[r * cols + i], wb, r, i);
            }
            for (int64_t j = 0; j < cols; j++) {
                bool found = false;
                for (int64_t i = 0; i < cols && !found; i++)
                    found = xa[i] == xb[j];
                if (!found)
                    acc_add(&s, 0, b[r * cols + j], r, j);
            }
        }
        experts_metrics(e, ids_a, ids_b, rows, cols);
    } else {
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++)
                acc_add(&s, a[r * cols + c], b[r * cols + c], r, c);
    }
    acc_finish(&s, e);
    if (kind == GGUF_CMP_KIND_LOGITS)
        logits_metrics(e, a, b, rows, cols);
    else if (kind == GGUF_CMP_KIND_EXPERTS)
        experts_metrics(e, a, b, rows, cols);
}

/* "over" when the bound is set and the value is worse or NaN. */
static bool above(double v, double bound) { return bound >= 0 && !(v <= bound); }
static bool below(double v, double bound) { return bound >= 0 && !(v >= bound); }

uint32_t gguf_cmp_check(gguf_cmp_entry *e, const gguf_tol *t)
{
    uint32_t o = 0;
    if (e->kind == GGUF_CMP_KIND_EXPERTS) {
        if (below(e->experts, t->experts))
            o |= GGUF_CMP_EXPERTS;
    } else {
        if (above(e->rel_l2, t->rel_l2))
            o |= GGUF_CMP_REL_L2;
        if (above(e->max_abs, t->max_abs))
            o |= GGUF_CMP_MAX_ABS;
        if (below(e->cosine, t->cosine))
            o |= GGUF_CMP_COSINE;
        if (e->nonfinite_b > 0)
            o |= GGUF_CMP_NONFINITE;
    }
    if (e->kind == GGUF_CMP_KIND_LOGITS) {
        if (above(e->kl, t->kl))
            o |= GGUF_CMP_KL;
        if (below(e->top1, t->top1))
            o |= GGUF_CMP_TOP1;
        if (below(e->top5, t->top5))
            o |= GGUF_CMP_TOP5;
    }
    e->over = o;
    return o;
}

const char *gguf_cmp_metric_name(uint32_t bit)
{
    switch (bit) {
    case GGUF_CMP_REL_L2: return "rel_l2";
    case GGUF_CMP_MAX_ABS: return "max_abs";
    case GGUF_CMP_COSINE: return "cosine";
    case GGUF_CMP_KL: return "kl";
    case GGUF_CMP_TOP1: return "top1";
    case GGUF_CMP_TOP5: return "top5";
    case GGUF_CMP_EXPERTS: return "experts";
    case GGUF_CMP_NONFINITE: return "nonfinite";
    default: return "";
    }
}

/* 0 f64, 1 f32 (and unknown), 2 f16/bf16: looser is larger. */
static int prec_class(const char *p)
{
    if (!p || !*p)
        return 1;
    if (!strcmp(p, "f64"))
        return 0;
    if (!strcmp(p, "f16") || !strcmp(p, "bf16") || !strcmp(p, "fp16"))
        return 2;
    return 1;
}

void gguf_tol_default(gguf_tol *t, const char *pa, const char *pb, char *origin)
{
    int ca = prec_class(pa), cb = prec_class(pb), c = ca > cb ? ca : cb;
    static const gguf_tol table[3] = {
        /* f64 runs: records keep F32, so two f64 runs that differ only in summation
         * order can still round a value to neighbouring floats (2^-24 relative). */
        {.rel_l2 = 1e-6, .max_abs = -1, .cosine = 1 - 1e-10, .kl = 1e-10, .top1 = 1,
         .top5 = 1, .experts = 1},
        {.rel_l2 = 1e-4, .max_abs = -1, .cosine = 1 - 1e-6, .kl = 1e-5, .top1 = 1,
         .top5 = 0.9, .experts = 1},
        {.rel_l2 = 5e-2, .max_abs = -1, .cosine = 0.99, .kl = 1e-2, .top1 = 0.9,
         .top5 = 0.8, .experts = 0.9},
    };
    *t = table[c];
    if (origin)
        snprintf(origin, 64, "default %.24s vs %.24s", pa && *pa ? pa : "f32",
                 pb && *pb ? pb : "f32");
}

int gguf_tol_parse(gguf_tol *t, const char *spec, gguf_error *err)
{
    gguf_error_clear(err);
    if (!t || !spec || !*spec)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "--tol: empty");
    const char *p = spec;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char item[96];
        if (len == 0 || len >= sizeof item)
            return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "--tol: bad item in '%s'",
                             spec);
        memcpy(item, p, len);
        item[len] = 0;
        char whole[96];
        memcpy(whole, item, len + 1); /* for messages: item is cut at '=' below */
        char *eq = strchr(item, '=');
        const char *name = eq ? item : "rel_l2", *val = eq ? eq + 1 : item;
        if (eq)
            *eq = 0;
        double v;
        if (!strcmp(val, "off")) {
            v = -1;
        } else {
            char *e;
            errno = 0;
            v = strtod(val, &e);
            if (!*val || *e || errno || !isfinite(v) || v < 0)
                return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                                 "--tol: '%s': not a non-negative number or 'off'", whole);
        }
        double *dst = !strcmp(name, "rel_l2")    ? &t->rel_l2
                      : !strcmp(name, "max_abs") ? &t->max_abs
                      : !strcmp(name, "cosine")  ? &t->cosine
                      : !strcmp(name, "kl")      ? &t->kl
                      : !strcmp(name, "top1")    ? &t->top1
                      : !strcmp(name, "top5")    ? &t->top5
                      : !strcmp(name, "experts") ? &t->experts
                                                 : NULL;
        if (!dst && (!strcmp(name, "dlogprob") || !strcmp(name, "tie") ||
                     !strcmp(name, "outliers") || !strcmp(name, "median")))
            return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                             "--tol: '%s' bounds an engine's logprobs (check-engine); records "
                             "are checked on: rel_l2, max_abs, cosine, kl, top1, top5, experts",
                             name);
        if (!dst)
            return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                             "--tol: unknown name '%s' (rel_l2, max_abs, cosine, kl, top1, "
                             "top5, experts)", name);
        if ((dst == &t->cosine || dst == &t->top1 || dst == &t->top5 || dst == &t->experts) &&
            v > 1)
            return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                             "--tol: '%s': a fraction is at most 1", whole);
        *dst = v;
        p += len;
        if (*p == ',')
            p++;
    }
    return GGUF_OK;
}
