/* Engine module: an engine's log-probabilities against the reference's
 * log-softmax over the full vocabulary, position by position, and the
 * tolerances that decide whether they agree. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "util/error_lib.h"

/* Reference tokens taken into the KL's union at most (the engine's k is
 * usually 5 to 20). */
#define REF_UNION_MAX 64
/* Probabilities below this are floored in the KL's logarithms. */
#define KL_FLOOR 1e-30

static const struct {
    const char *name;
    gguf_engine_tol tol;
} presets[] = {
    /* see gguf/engine.h and docs/check-engine.md for the measurements */
    {"default", {0.05, 5e-3, 0.9, 0.02, 0.2, 0.01}},
    {"strict", {1e-3, 1e-5, 1.0, 1e-3, -1, -1}},
    {"bf16", {0.1, 0.05, 0.9, 0.1, 0.2, 0.05}},
    {"quant", {2.5, 0.5, 0.9, 0.25, 0.2, -1}},
};

int gguf_engine_tol_preset(gguf_engine_tol *tol, const char *name)
{
    for (size_t i = 0; name && i < sizeof presets / sizeof presets[0]; i++)
        if (strcmp(name, presets[i].name) == 0) {
            *tol = presets[i].tol;
            return 0;
        }
    return GGUF_E_INVALID;
}

int gguf_engine_tol_parse(gguf_engine_tol *tol, const char *spec, gguf_error *err)
{
    if (!spec)
        return 0;
    char buf[512];
    if (strlen(spec) >= sizeof buf)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "--tol: the spec is too long");
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL;
    for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (!eq) {
            /* a bare number sets the main bound, as in ref-forward compare's --tol */
            char *end;
            const double v = strtod(item, &end);
            if (end != item && !*end) {
                if (!(v >= 0) || isinf(v))
                    return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                                     "--tol: '%s' is not a number >= 0 or off", item);
                tol->dlogprob = v;
                continue;
            }
            if (gguf_engine_tol_preset(tol, item))
                return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                                 "--tol: '%s' is neither NAME=VALUE nor a preset (default, "
                                 "strict, bf16, quant)", item);
            continue;
        }
        *eq = 0;
        const char *val = eq + 1;
        double v = -1;
        if (strcmp(val, "off") != 0) {
            char *end;
            v = strtod(val, &end);
            if (end == val || *end || !(v >= 0) || isinf(v))
                return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                                 "--tol: %s: '%s' is not a number >= 0 or off", item, val);
        }
        if (strcmp(item, "dlogprob") == 0)
            tol->dlogprob = v;
        else if (strcmp(item, "kl") == 0)
            tol->kl = v;
        else if (strcmp(item, "top1") == 0) {
            if (v > 1)
                return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                                 "--tol: top1: %s is a fraction over 1", val);
            tol->top1 = v;
        } else if (strcmp(item, "tie") == 0) {
            tol->tie = v;
        } else if (strcmp(item, "outliers") == 0) {
            if (v > 1)
                return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                                 "--tol: outliers: %s is a fraction over 1", val);
            tol->outliers = v;
        } else if (strcmp(item, "median") == 0) {
            tol->median = v;
        } else if (!strcmp(item, "rel_l2") || !strcmp(item, "max_abs") ||
                   !strcmp(item, "cosine") || !strcmp(item, "top5") ||
                   !strcmp(item, "experts")) {
            return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                             "--tol: '%s' bounds hidden states (ref-forward compare); an engine "
                             "is checked on logprobs: dlogprob, kl, top1, tie, outliers, median",
                             item);
        } else {
            return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                             "--tol: unknown name '%s' (dlogprob, kl, top1, tie, outliers, "
                             "median)", item);
        }
    }
    return 0;
}

/* The best n ids of a log-softmax row, best first (lower id first on ties). */
static int top_ids(const double *lsm, int64_t V, int32_t *ids, int n)
{
    int have = 0;
    for (int64_t i = 0; i < V; i++) {
        const double v = lsm[i];
        if (have == n && !(v > lsm[ids[n - 1]]))
            continue;
        int j = have < n ? have++ : n - 1;
        while (j > 0 && lsm[ids[j - 1]] < v) {
            ids[j] = ids[j - 1];
            j--;
        }
        ids[j] = (int32_t)i;
    }
    return have;
}

/*
 * KL(ref || engine) over S = the engine's alternatives (and the position's
 * token) plus the reference's top n_ref, with everything else in one tail
 * bucket on each side. A token of S the engine did not report is given the
 * smallest probability among the engine's top-k (the most it can have, as it
 * is not in that top-k); the position's own token is left out of that
 * minimum, as engines add it to the top-k when it is not among them.
 */
static double kl_union(const double *lsm, int64_t V, const gguf_engine_pos *pos,
                       const int32_t *ref_ids, int n_ref)
{
    int32_t ids[GGUF_ENGINE_MAX_TOP + REF_UNION_MAX + 1];
    double q[GGUF_ENGINE_MAX_TOP + REF_UNION_MAX + 1];
    int n = 0;
    double min_lp = INFINITY;
    for (int32_t k = 0; k <= pos->n_top; k++) {
        const int32_t id = k < pos->n_top ? pos->top[k].id : pos->id;
        const double lp = k < pos->n_top ? pos->top[k].logprob : pos->logprob;
        if (id < 0 || id >= V || isnan(lp))
            continue;
        int dup = 0;
        for (int j = 0; j < n && !dup; j++)
            dup = ids[j] == id;
        if (dup)
            continue;
        ids[n] = id;
        q[n++] = exp(lp);
        if (lp < min_lp && (id != pos->id || pos->n_top <= 1))
            min_lp = lp;
    }
    if (n == 0)
        return NAN;
    if (isinf(min_lp))
        min_lp = log(q[n - 1]);
    const int n_eng = n;
    for (int r = 0; r < n_ref; r++) {
        int dup = 0;
        for (int j = 0; j < n_eng && !dup; j++)
            dup = ids[j] == ref_ids[r];
        if (!dup) {
            ids[n] = ref_ids[r];
            q[n++] = exp(min_lp);
        }
    }
    double sp = 0, sq = 0, kl = 0;
    for (int j = 0; j < n; j++)
        sq += q[j];
    const double scale = sq > 1 ? 1 / sq : 1;
    sq = 0;
    for (int j = 0; j < n; j++) {
        const double p = exp(lsm[ids[j]]), qq = q[j] * scale;
        sp += p;
        sq += qq;
        if (p > 0)
            kl += p * (lsm[ids[j]] - log(qq > KL_FLOOR ? qq : KL_FLOOR));
    }
    const double pt = sp < 1 ? 1 - sp : 0, qt = sq < 1 ? 1 - sq : 0;
    if (pt > 0)
        kl += pt * (log(pt) - log(qt > KL_FLOOR ? qt : KL_FLOOR));
    return kl > 0 ? kl : 0;
}

int gguf_engine_compare(gguf_engine_cmp **out, const gguf_engine_reply *r, int64_t n_seq_prompt,
                        const float *logits, int64_t n_rows, int64_t V,
                        const gguf_engine_tol *tol_in, gguf_error *err)
{
    *out = NULL;
    gguf_engine_tol tol;
    if (tol_in)
        tol = *tol_in;
    else
        gguf_engine_tol_preset(&tol, "default");
    if (V < 1 || n_rows < 0 || (n_rows && !logits))
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "compare: no reference logits");
    gguf_engine_cmp *c = calloc(1, sizeof *c);
    double *lsm = malloc((size_t)V * sizeof *lsm);
    if (c)
        c->pos = calloc((size_t)(r->n_pos ? r->n_pos : 1), sizeof *c->pos);
    if (!c || !lsm || !c->pos) {
        free(lsm);
        gguf_engine_cmp_free(c);
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory for the comparison");
    }
    c->tol = tol;
    c->first_divergent = -1;
    int rc = 0;
    double kl_sum = 0, dlp_sum = 0;
    int64_t n_kl = 0, n_dlp = 0;
    for (int64_t i = 0; i < r->n_pos; i++) {
        const gguf_engine_pos *p = &r->pos[i];
        const int64_t seq = p->prompt ? n_seq_prompt - r->n_prompt + i
                                      : n_seq_prompt + (i - r->n_prompt);
        /* the first token has no logprob; nor has a prompt position the engine
         * did not score (null with no alternatives: the first of SGLang's
         * input entries, logprob_start_len) - "not given", not the engine's NaN */
        if (seq <= 0 || (p->prompt && isnan(p->logprob) && p->n_top == 0)) {
            c->n_skipped++;
            continue;
        }
        if (p->unscored) {
            c->n_unscored++;
            continue;
        }
        /* the last generated position may name no token (text-only replies:
         * docs/check-engine.md): its alternatives are compared, its token not */
        const bool unknown = p->id < 0 && !p->prompt && i == r->n_pos - 1;
        if ((p->id < 0 && !unknown) || p->id >= V) {
            rc = gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                           "compare: position %lld (%s token '%s'): %s", (long long)i,
                           p->prompt ? "prompt" : "generated", p->text ? p->text : "",
                           p->id < 0 ? "no token id" : "token id outside the vocabulary");
            goto done;
        }
        if (seq - 1 >= n_rows) {
            rc = gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                           "compare: position %lld needs reference row %lld of %lld",
                           (long long)i, (long long)(seq - 1), (long long)n_rows);
            goto done;
        }
        /* log-softmax of the reference row, in double */
        const float *row = logits + (seq - 1) * V;
        double mx = -INFINITY, sum = 0;
        for (int64_t v = 0; v < V; v++)
            if (row[v] > mx)
                mx = row[v];
        for (int64_t v = 0; v < V; v++)
            sum += exp((double)row[v] - mx);
        const double lse = mx + log(sum);
        for (int64_t v = 0; v < V; v++)
            lsm[v] = (double)row[v] - lse;

        gguf_engine_cmp_pos *cp = &c->pos[c->n_pos++];
        cp->index = i;
        cp->seq = seq;
        cp->token = p->id;
        cp->prompt = p->prompt;
        /* the engine's k: its alternatives, less the position's own token
         * (vLLM and OpenAI add it to the top-k; prompt tokens are rarely in it) */
        int n_alt = 0, own = 0;
        for (int32_t k = 0; k < p->n_top; k++) {
            n_alt += p->top[k].id >= 0 && p->top[k].id < V;
            own |= p->top[k].id == p->id;
        }
        const int k_ref = n_alt - (own && n_alt > 1);
        int32_t ref_ids[REF_UNION_MAX > GGUF_ENGINE_CMP_TOP ? REF_UNION_MAX : GGUF_ENGINE_CMP_TOP];
        const int want = n_alt > REF_UNION_MAX ? REF_UNION_MAX
                                               : (n_alt > GGUF_ENGINE_CMP_TOP ? n_alt
                                                                              : GGUF_ENGINE_CMP_TOP);
        const int n_ref = top_ids(lsm, V, ref_ids, want < 2 ? 2 : want);
        cp->n_ref_top = n_ref < GGUF_ENGINE_CMP_TOP ? n_ref : GGUF_ENGINE_CMP_TOP;
        for (int k = 0; k < cp->n_ref_top; k++) {
            cp->ref_top[k] = ref_ids[k];
            cp->ref_top_lp[k] = lsm[ref_ids[k]];
        }
        cp->ref_top1 = ref_ids[0];
        cp->ref_gap = n_ref > 1 ? lsm[ref_ids[0]] - lsm[ref_ids[1]] : INFINITY;
        cp->tie = tol.tie >= 0 && cp->ref_gap < tol.tie;
        /* the engine's top-1: what it chose when generating greedily, else
         * its best alternative - unknown when any alternative has no id: a
         * reply keyed by text (OpenAI's top_logprobs) keeps one entry of the
         * tokens that share a text, so the true best may be the one hidden */
        cp->engine_top1 = -1;
        bool all_ids = true;
        for (int32_t k = 0; k < p->n_top; k++)
            all_ids = all_ids && p->top[k].id >= 0 && p->top[k].id < V;
        /* a generated token below one of the engine's own alternatives: its
         * sampler was not greedy (a repetition penalty it defaults to); the
         * distributions are compared, the choice is reported */
        bool not_greedy = false;
        for (int32_t k = 0; !p->prompt && p->id >= 0 && k < p->n_top; k++)
            not_greedy |= p->top[k].id >= 0 && p->top[k].id != p->id &&
                          p->top[k].logprob > p->logprob + 1e-6;
        c->n_not_greedy += not_greedy;
        if (all_ids && p->n_top > 0)
            cp->engine_top1 = p->top[0].id;
        else if (!p->prompt && !not_greedy)
            cp->engine_top1 = p->id; /* greedy: nothing it wrote beat its choice */
        cp->engine_logprob = unknown ? NAN : p->logprob;
        cp->ref_logprob = unknown ? NAN : lsm[p->id];
        cp->dlogprob = unknown || isnan(p->logprob) ? NAN : fabs(p->logprob - lsm[p->id]);
        cp->dlogprob_top = NAN;
        for (int32_t k = 0; k < p->n_top; k++) {
            const int32_t id = p->top[k].id;
            if (id < 0 || id >= V)
                continue;
            const double d = fabs(p->top[k].logprob - lsm[id]);
            if (isnan(cp->dlogprob_top) || d > cp->dlogprob_top || isnan(d))
                cp->dlogprob_top = d;
        }
        /* the estimator takes the engine's list as its whole top-k: with an
         * alternative it could not name, a token of the reference's top may
         * be the one missing, and the KL is not known */
        cp->kl = n_alt && all_ids ? kl_union(lsm, V, p, ref_ids, k_ref < n_ref ? k_ref : n_ref)
                                  : NAN;

        if (cp->engine_top1 >= 0) {
            cp->top1_agree = cp->engine_top1 == cp->ref_top1;
            /* a near-tie forgives a flip when the engine's choice is within
             * tie of the reference's best */
            const bool forgiven = !cp->top1_agree && tol.tie >= 0 &&
                                  lsm[cp->ref_top1] - lsm[cp->engine_top1] < tol.tie;
            if (!forgiven) {
                c->n_counted++;
                c->n_agree += cp->top1_agree;
                if (!cp->top1_agree)
                    cp->over |= GGUF_ENG_TOP1;
            }
        }
        /* a NaN from the engine (null in its JSON) where it owes a number is a
         * divergence, whatever the tolerances; a prompt position scored as the
         * next token of its prefix (check-engine --prompt-by-prefix) owes only
         * its top K, which need not hold the prompt's own token */
        const bool own_unknown = p->prompt && p->n_top > 0 && !own;
        bool engine_nan = isnan(p->logprob) && !unknown && !own_unknown;
        for (int32_t k = 0; k < p->n_top; k++)
            engine_nan |= isnan(p->top[k].logprob);
        if (engine_nan) {
            cp->over |= GGUF_ENG_DLOGPROB;
            c->max_abs_dlogprob = INFINITY;
            c->engine_nan = true;
        }
        c->n_ties += cp->tie;
        const double worst = isnan(cp->dlogprob_top) ? cp->dlogprob
                             : isnan(cp->dlogprob)   ? cp->dlogprob_top
                                                     : fmax(cp->dlogprob, cp->dlogprob_top);
        if (!isnan(worst) && (worst > c->max_abs_dlogprob || isinf(worst)))
            c->max_abs_dlogprob = worst;
        if (tol.dlogprob >= 0 && !isnan(worst) && !(worst <= tol.dlogprob))
            cp->over |= GGUF_ENG_DLOGPROB;
        if (!isnan(cp->dlogprob)) {
            dlp_sum += cp->dlogprob;
            n_dlp++;
        }
        if (!isnan(cp->kl)) {
            kl_sum += cp->kl;
            n_kl++;
            if (cp->kl > c->kl_topk_max)
                c->kl_topk_max = cp->kl;
            if (tol.kl >= 0 && cp->kl > tol.kl)
                cp->over |= GGUF_ENG_KL;
        }
    }
    c->top1_agreement = c->n_counted ? (double)c->n_agree / (double)c->n_counted : 1.0;
    c->kl_topk_mean = n_kl ? kl_sum / (double)n_kl : 0;
    c->mean_abs_dlogprob = n_dlp ? dlp_sum / (double)n_dlp : 0;
    for (int64_t k = 0; k < c->n_pos; k++)
        c->n_over += c->pos[k].over != 0;
    const gguf_engine_cmp *self = c;
    c->agree = gguf_engine_judge(&self, 1, &tol, &c->median_abs_dlogprob);
    for (int64_t k = 0; !c->agree && k < c->n_pos && c->first_divergent < 0; k++)
        if (c->pos[k].over)
            c->first_divergent = k;
done:
    free(lsm);
    if (rc) {
        gguf_engine_cmp_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void gguf_engine_cmp_free(gguf_engine_cmp *c)
{
    if (!c)
        return;
    free(c->pos);
    free(c);
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

bool gguf_engine_judge(const gguf_engine_cmp *const *c, int n, const gguf_engine_tol *tol,
                       double *median_out)
{
    int64_t n_pos = 0, n_over = 0, counted = 0, agree = 0, n_dlp = 0;
    bool nan = false;
    for (int i = 0; i < n; i++) {
        n_pos += c[i]->n_pos;
        n_over += c[i]->n_over;
        counted += c[i]->n_counted;
        agree += c[i]->n_agree;
        nan |= c[i]->engine_nan;
        for (int64_t k = 0; k < c[i]->n_pos; k++)
            n_dlp += !isnan(c[i]->pos[k].dlogprob);
    }
    /* the median of the chosen tokens' |dlogprob|: a fault moves most of
     * them, a near-tie only a few */
    double median = 0;
    double *v = malloc((size_t)(n_dlp ? n_dlp : 1) * sizeof *v);
    if (!v)
        return false;
    int64_t m = 0;
    for (int i = 0; i < n; i++)
        for (int64_t k = 0; k < c[i]->n_pos; k++)
            if (!isnan(c[i]->pos[k].dlogprob))
                v[m++] = c[i]->pos[k].dlogprob;
    if (m) {
        qsort(v, (size_t)m, sizeof *v, cmp_double);
        median = m % 2 ? v[m / 2] : 0.5 * (v[m / 2 - 1] + v[m / 2]);
    }
    free(v);
    if (median_out)
        *median_out = median;
    const double allowed = tol->outliers >= 0 ? tol->outliers * (double)n_pos : 0;
    const double top1 = counted ? (double)agree / (double)counted : 1.0;
    return !nan && (double)n_over <= allowed && !(tol->median >= 0 && median > tol->median) &&
           !(tol->top1 >= 0 && top1 < tol->top1);
}
