/* Engine module: which fault of the catalog, injected into the reference,
 * makes it say what the engine said (gguf/diagnose.h). */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf/diagnose.h"
#include "gguf/forward.h"
#include "util/error_lib.h"

/* One (fault, layer, tp) of the search, before and after its run. */
typedef struct cand {
    gguf_diag_candidate out;
    char digest[GGUF_PLAN_DIGEST_HEX];
    int64_t order;               /* enumeration order: the tie-break of the ranking */
} cand;

typedef struct cand_list {
    cand *c;
    int64_t n, cap;
    int64_t n_not_applicable;
} cand_list;

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The plan an engine with fault f (at layer, or every layer) would load.
 * GGUF_E_UNSUPPORTED when the fault cannot occur there. */
static int faulty_plan(gguf_shard_plan **out, const gguf_model *m, const gguf_diag_opts *o, int tp,
                       int ep, gguf_fault f, int64_t layer, gguf_error *err)
{
    gguf_shard_opts so = {.tp = tp, .ep = ep, .engine = o->engine};
    int rc = gguf_shard_plan_create(out, m, &so, err);
    if (!rc && f != GGUF_FAULT_NONE)
        rc = gguf_shard_apply_fault(*out, f, layer, err);
    if (rc) {
        gguf_shard_plan_free(*out);
        *out = NULL;
    }
    return rc;
}

/* A tp size the model allows: the clean plan has no error check. */
static bool tp_fits(const gguf_model *m, const gguf_diag_opts *o, int tp)
{
    gguf_shard_plan *p = NULL;
    if (faulty_plan(&p, m, o, tp, o->ep, GGUF_FAULT_NONE, -1, NULL))
        return false;
    const bool ok = gguf_shard_plan_check_worst(p, GGUF_CHECK_ERROR) == 0;
    gguf_shard_plan_free(p);
    return ok;
}

static int tp_sizes(const gguf_model *m, const gguf_diag_opts *o, int *tps, int *n,
                    gguf_error *err)
{
    static const int automatic[] = {1, 2, 4, 8};
    *n = 0;
    if (o->version > GGUF_DIAG_OPTS_VERSION)
        return gguf_opts_version_fail(o->version, GGUF_DIAG_OPTS_VERSION, "gguf_diag_opts", err);
    if (o->n_tp < 0 || o->n_tp > GGUF_DIAG_MAX_TP || o->ep < 0)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "diagnose: bad tp or ep options");
    const int given = o->n_tp > 0;
    const int count = given ? o->n_tp : (int)(sizeof automatic / sizeof automatic[0]);
    for (int i = 0; i < count; i++) {
        const int tp = given ? o->tp[i] : automatic[i];
        if (tp < 1 || tp > 4096)
            return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "diagnose: tp %d out of range",
                             tp);
        if (given || tp_fits(m, o, tp))
            tps[(*n)++] = tp;
    }
    if (*n == 0)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "diagnose: no tp size of 1, 2, 4, 8 splits this model evenly%s",
                         o->ep ? " with this ep" : "");
    return 0;
}

static int add(cand_list *l, const gguf_model *m, const gguf_diag_opts *o, int tp, int ep,
               gguf_fault f, int64_t layer, gguf_error *err)
{
    gguf_shard_plan *p = NULL;
    gguf_error quiet = {0};
    int rc = faulty_plan(&p, m, o, tp, ep, f, layer, &quiet);
    if (rc == GGUF_E_UNSUPPORTED) {
        l->n_not_applicable++;
        return 0;
    }
    if (rc) {
        if (err)
            *err = quiet;
        return rc;
    }
    if (l->n == l->cap) {
        const int64_t cap = l->cap ? 2 * l->cap : 64;
        cand *c = realloc(l->c, (size_t)cap * sizeof *c);
        if (!c) {
            gguf_shard_plan_free(p);
            return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "diagnose: out of memory");
        }
        l->c = c;
        l->cap = cap;
    }
    cand *c = &l->c[l->n];
    memset(c, 0, sizeof *c);
    c->out.fault = f;
    c->out.layer = layer;
    c->out.tp = tp;
    c->out.ep = ep;
    c->out.same_plan_as = -1;
    c->order = l->n;
    gguf_shard_plan_digest(p, c->digest);
    gguf_shard_plan_free(p);
    for (int64_t j = 0; j < l->n; j++)
        if (l->c[j].out.same_plan_as < 0 && strcmp(l->c[j].digest, c->digest) == 0) {
            c->out.same_plan_as = j;
            break;
        }
    l->n++;
    return 0;
}

/* Without a given ep, a fault that only expert parallelism makes possible
 * (experts owned by the wrong rank) is tried at ep = tp: what vLLM's
 * --enable-expert-parallel and SGLang's --ep-size tp do. Other faults give the
 * same numbers with the experts split either way. */
static int add_sized(cand_list *l, const gguf_model *m, const gguf_diag_opts *o, int tp,
                     gguf_fault f, int64_t layer, gguf_error *err)
{
    const int64_t before = l->n_not_applicable;
    int rc = add(l, m, o, tp, o->ep, f, layer, err);
    if (!rc && l->n_not_applicable > before && o->ep == 0 && tp > 1 &&
        gguf_model_hparams(m)->n_expert % tp == 0 && gguf_model_hparams(m)->n_expert > 0) {
        l->n_not_applicable = before;
        rc = add(l, m, o, tp, tp, f, layer, err);
    }
    return rc;
}

/* Step 1: every fault at every layer; configuration faults (the same
 * numbers at any tp) at the first tp size only, except the one that scales
 * with tp. */
static int enumerate_all_layers(cand_list *l, const gguf_model *m, const gguf_diag_opts *o,
                                const int *tps, int n_tp, gguf_error *err)
{
    int rc = add(l, m, o, tps[0], o->ep, GGUF_FAULT_NONE, -1, err);
    for (int t = 0; !rc && t < n_tp; t++)
        for (int f = GGUF_FAULT_NONE + 1; !rc && f < GGUF_FAULT_COUNT; f++) {
            if (t > 0 && gguf_fault_is_config((gguf_fault)f) &&
                f != GGUF_FAULT_SHARED_DOUBLE_REDUCE)
                continue;
            rc = add_sized(l, m, o, tps[t], (gguf_fault)f, -1, err);
        }
    return rc;
}

/* Step 2: every weight fault at each single layer. */
static int enumerate_each_layer(cand_list *l, const gguf_model *m, const gguf_diag_opts *o,
                                const int *tps, int n_tp, gguf_error *err)
{
    const int64_t n_layer = gguf_model_hparams(m)->n_layer_main;
    int rc = 0;
    for (int t = 0; !rc && t < n_tp; t++)
        for (int f = GGUF_FAULT_NONE + 1; !rc && f < GGUF_FAULT_COUNT; f++)
            for (int64_t il = 0; !rc && il < n_layer && !gguf_fault_is_config((gguf_fault)f); il++)
                rc = add_sized(l, m, o, tps[t], (gguf_fault)f, il, err);
    return rc;
}

static int64_t count_runs(const cand_list *l, int64_t from, int n_answers)
{
    int64_t n = 0;
    for (int64_t i = from; i < l->n; i++)
        n += l->c[i].out.same_plan_as < 0;
    return n * n_answers;
}

int gguf_diagnose_count(const gguf_model *m, int n_answers, const gguf_diag_opts *opts,
                        int64_t *n_candidates, int64_t *n_runs, gguf_error *err)
{
    int tps[GGUF_DIAG_MAX_TP], n_tp;
    cand_list l = {0};
    int rc = tp_sizes(m, opts, tps, &n_tp, err);
    if (!rc)
        rc = enumerate_all_layers(&l, m, opts, tps, n_tp, err);
    if (!rc) {
        *n_candidates = l.n;
        *n_runs = count_runs(&l, 0, n_answers);
    }
    free(l.c);
    return rc;
}

/* ---- the runs ---- */

typedef struct search {
    const gguf_model *m;
    const gguf_diag_answer *answers;
    int n_answers;
    const gguf_engine_tol *tol;
    const gguf_diag_opts *o;
    cand *c;
    int64_t end;                 /* the end of this step's candidates */
    int64_t next;                /* the next to take (under mu) */
    int64_t done, total;         /* runs, for progress */
    pthread_mutex_t mu;
    int rc;                      /* the first failure */
    gguf_error err;
} search;

/* One faulty reference over one answer: its comparison with the engine. */
static int run_answer(const gguf_model *m, const gguf_shard_plan *plan, const gguf_diag_answer *a,
                      const gguf_engine_tol *tol, const gguf_diag_opts *o, gguf_engine_cmp **cmp,
                      gguf_error *err)
{
    const int64_t V = gguf_model_hparams(m)->n_vocab;
    const int64_t n_eval = a->n_seq - 1;
    if (!a->reply || n_eval < 1 || a->n_seq_prompt < 1)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "diagnose: an answer without a reply or a sequence");
    float *logits = malloc((size_t)(n_eval * V) * sizeof(float));
    if (!logits)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "diagnose: out of memory for %lld "
                         "rows of logits", (long long)n_eval);
    gguf_fwd_opts fo = {0};
    fo.n_threads = o->n_threads > 0 ? o->n_threads : 1;
    fo.drop_pages = o->drop_pages;
    gguf_fwd_ctx *ctx = NULL;
    int rc = gguf_fwd_tp_create(&ctx, m, plan, &fo, err);
    if (!rc)
        rc = gguf_fwd_eval(ctx, a->seq, n_eval, logits, err);
    gguf_fwd_ctx_free(ctx);
    if (!rc)
        rc = gguf_engine_compare(cmp, a->reply, a->n_seq_prompt, logits, n_eval, V, tol, err);
    free(logits);
    return rc;
}

/* The pooled numbers of one candidate over every answer. */
static void pool(gguf_diag_candidate *d, gguf_engine_cmp *const *cmp, int n,
                 const gguf_engine_tol *tol)
{
    double sum = 0;
    int64_t n_chosen = 0, agree = 0, counted = 0;
    d->max_abs_dlogprob = 0;
    d->n_positions = d->n_over = 0;
    for (int i = 0; i < n; i++) {
        const gguf_engine_cmp *c = cmp[i];
        for (int64_t k = 0; k < c->n_pos; k++)
            if (!isnan(c->pos[k].dlogprob)) {
                sum += c->pos[k].dlogprob;
                n_chosen++;
            }
        if (c->max_abs_dlogprob > d->max_abs_dlogprob || isnan(c->max_abs_dlogprob))
            d->max_abs_dlogprob = c->max_abs_dlogprob;
        agree += c->n_agree;
        counted += c->n_counted;
        d->n_positions += c->n_pos;
        d->n_over += c->n_over;
    }
    d->mean_abs_dlogprob = n_chosen ? sum / (double)n_chosen : NAN;
    d->top1_agreement = counted ? (double)agree / (double)counted : 1.0;
    d->reproduces = gguf_engine_judge((const gguf_engine_cmp *const *)cmp, n, tol,
                                      &d->median_abs_dlogprob);
}

static int run_candidate(search *s, cand *c, gguf_error *err)
{
    gguf_shard_plan *plan = NULL;
    gguf_engine_cmp **cmp = calloc((size_t)s->n_answers, sizeof *cmp);
    if (!cmp)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "diagnose: out of memory");
    int rc = faulty_plan(&plan, s->m, s->o, c->out.tp, c->out.ep, c->out.fault, c->out.layer,
                         err);
    for (int i = 0; !rc && i < s->n_answers; i++) {
        if (s->o->cancel && *s->o->cancel) {
            rc = gguf_fail(err, GGUF_E_INTERRUPTED, GGUF_NO_OFFSET, "diagnose: cancelled");
            break;
        }
        rc = run_answer(s->m, plan, &s->answers[i], s->tol, s->o, &cmp[i], err);
        pthread_mutex_lock(&s->mu);
        s->done++;
        if (s->o->progress)
            s->o->progress(s->o->progress_user, s->done, s->total);
        pthread_mutex_unlock(&s->mu);
    }
    if (!rc)
        pool(&c->out, cmp, s->n_answers, s->tol);
    for (int i = 0; i < s->n_answers; i++)
        gguf_engine_cmp_free(cmp[i]);
    free(cmp);
    gguf_shard_plan_free(plan);
    return rc;
}

static void *worker(void *arg)
{
    search *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (s->next < s->end && s->c[s->next].out.same_plan_as >= 0)
            s->next++;
        const int64_t i = s->rc ? s->end : s->next++;
        pthread_mutex_unlock(&s->mu);
        if (i >= s->end)
            return NULL;
        gguf_error e = {0};
        const int rc = run_candidate(s, &s->c[i], &e);
        if (rc && rc != GGUF_E_NOMEM && rc != GGUF_E_INTERRUPTED) {
            /* this fault makes a model the forward refuses: no reference to compare */
            s->c[i].out.run_error = rc;
            s->c[i].out.mean_abs_dlogprob = NAN;
        } else if (rc) {
            pthread_mutex_lock(&s->mu);
            if (!s->rc) {
                s->rc = rc;
                s->err = e;
            }
            pthread_mutex_unlock(&s->mu);
        }
    }
}

/* Run candidates [first, end) on n_jobs threads (the caller is one of them). */
static int run_step(search *s, int64_t first, int64_t end, gguf_error *err)
{
    s->next = first;
    s->end = end;
    const int jobs = s->o->n_jobs > 1 ? s->o->n_jobs : 1;
    pthread_t th[64];
    int started = 0;
    for (int j = 1; j < jobs && j < 64; j++)
        if (pthread_create(&th[started], NULL, worker, s) == 0)
            started++;
    worker(s);
    for (int j = 0; j < started; j++)
        pthread_join(th[j], NULL);
    if (s->rc) {
        if (err)
            *err = s->err;
        return s->rc;
    }
    for (int64_t i = first; i < end; i++) {
        cand *c = &s->c[i];
        if (c->out.same_plan_as >= 0) {
            const gguf_diag_candidate src = s->c[c->out.same_plan_as].out;
            c->out.run_error = src.run_error;
            c->out.reproduces = src.reproduces;
            c->out.mean_abs_dlogprob = src.mean_abs_dlogprob;
            c->out.median_abs_dlogprob = src.median_abs_dlogprob;
            c->out.max_abs_dlogprob = src.max_abs_dlogprob;
            c->out.top1_agreement = src.top1_agreement;
            c->out.n_positions = src.n_positions;
            c->out.n_over = src.n_over;
        }
    }
    return 0;
}

static int rank_cmp(const void *pa, const void *pb)
{
    const cand *a = pa, *b = pb;
    if (a->out.reproduces != b->out.reproduces)
        return a->out.reproduces ? -1 : 1;
    const double x = a->out.mean_abs_dlogprob, y = b->out.mean_abs_dlogprob;
    if (isnan(x) != isnan(y))
        return isnan(x) ? 1 : -1;
    if (x < y)
        return -1;
    if (x > y)
        return 1;
    return a->order < b->order ? -1 : a->order > b->order;
}

/* Sort by rank and point same_plan_as at the sorted positions. */
static int rank(gguf_diagnosis *d, cand *c, int64_t n, gguf_error *err)
{
    int64_t *where = malloc((size_t)(n ? n : 1) * sizeof *where);
    d->c = calloc((size_t)(n ? n : 1), sizeof *d->c);
    if (!where || !d->c) {
        free(where);
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "diagnose: out of memory");
    }
    qsort(c, (size_t)n, sizeof *c, rank_cmp);
    for (int64_t i = 0; i < n; i++)
        where[c[i].order] = i;
    for (int64_t i = 0; i < n; i++) {
        d->c[i] = c[i].out;
        if (d->c[i].same_plan_as >= 0)
            d->c[i].same_plan_as = where[d->c[i].same_plan_as];
        d->n_reproducing += d->c[i].reproduces && d->c[i].fault != GGUF_FAULT_NONE;
    }
    d->n = n;
    free(where);
    d->runner_up = -1;
    for (int64_t i = 1; i < n && d->runner_up < 0; i++)
        if (d->c[i].fault != GGUF_FAULT_NONE && d->c[i].same_plan_as != 0 && !d->c[i].run_error)
            d->runner_up = i;
    const gguf_diag_candidate *best = n ? &d->c[0] : NULL;
    if (!best || !best->reproduces || best->fault == GGUF_FAULT_NONE) {
        d->result = GGUF_DIAG_NONE;
        return 0;
    }
    d->result = GGUF_DIAG_FAULT;
    for (int64_t i = 1; i < n; i++) {
        const gguf_diag_candidate *o = &d->c[i];
        if (o->fault == GGUF_FAULT_NONE || !o->reproduces)
            continue;
        if (o->same_plan_as == 0 || o->mean_abs_dlogprob < 2 * best->mean_abs_dlogprob)
            d->result = GGUF_DIAG_AMBIGUOUS;
    }
    return 0;
}

static bool any_fault_reproduces(const cand *c, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (c[i].out.reproduces && c[i].out.fault != GGUF_FAULT_NONE)
            return true;
    return false;
}

int gguf_diagnose(gguf_diagnosis **out, const gguf_model *m, const gguf_diag_answer *answers,
                  int n_answers, const gguf_engine_tol *tol, const gguf_diag_opts *opts,
                  gguf_error *err)
{
    *out = NULL;
    if (opts && opts->version > GGUF_DIAG_OPTS_VERSION)
        return gguf_opts_version_fail(opts->version, GGUF_DIAG_OPTS_VERSION, "gguf_diag_opts", err);
    if (!m || !answers || n_answers < 1 || !tol || !opts)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "diagnose: nothing to diagnose");
    for (int i = 0; i < n_answers; i++)
        if (!answers[i].reply || !answers[i].seq || answers[i].n_seq < 2 ||
            answers[i].n_seq_prompt < 1 || answers[i].n_seq_prompt > answers[i].n_seq)
            return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                             "diagnose: answer %d without a reply or a sequence", i);
    const double t0 = now_seconds();
    gguf_diagnosis *d = calloc(1, sizeof *d);
    cand_list l = {0};
    search s = {.m = m, .answers = answers, .n_answers = n_answers, .tol = tol, .o = opts};
    if (!d)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "diagnose: out of memory");
    pthread_mutex_init(&s.mu, NULL);
    int rc = tp_sizes(m, opts, d->tried_tp, &d->n_tried_tp, err);
    if (!rc)
        rc = enumerate_all_layers(&l, m, opts, d->tried_tp, d->n_tried_tp, err);
    int64_t step1 = l.n;
    s.total = count_runs(&l, 0, n_answers);
    if (!rc && opts->max_runs > 0 && s.total > opts->max_runs)
        rc = gguf_fail(err, GGUF_E_LIMIT, GGUF_NO_OFFSET, "diagnose: %lld reference runs, more "
                       "than the bound of %lld", (long long)s.total, (long long)opts->max_runs);
    s.c = l.c;
    if (!rc)
        rc = run_step(&s, 0, step1, err);
    if (!rc && opts->layers && !any_fault_reproduces(l.c, l.n)) {
        rc = enumerate_each_layer(&l, m, opts, d->tried_tp, d->n_tried_tp, err);
        s.c = l.c;
        const int64_t more = count_runs(&l, step1, n_answers);
        d->layers_tried = true;
        if (!rc && opts->max_runs > 0 && s.total + more > opts->max_runs) {
            /* too costly: said in the diagnosis, the candidates of step 1 kept */
            d->layers_tried = false;
            d->layers_runs_skipped = more;
            l.n = step1;
        } else if (!rc) {
            s.total += more;
            rc = run_step(&s, step1, l.n, err);
        }
    }
    d->n_runs = s.done;
    d->n_not_applicable = l.n_not_applicable;
    if (!rc)
        rc = rank(d, l.c, l.n, err);
    d->seconds = now_seconds() - t0;
    pthread_mutex_destroy(&s.mu);
    free(l.c);
    if (rc) {
        gguf_diagnosis_free(d);
        return rc;
    }
    *out = d;
    return 0;
}

void gguf_diagnosis_free(gguf_diagnosis *d)
{
    if (!d)
        return;
    free(d->c);
    free(d);
}
