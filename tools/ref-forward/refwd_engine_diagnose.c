/* ref-forward check-engine --diagnose: after DIVERGED, which fault of the
 * catalog makes the reference say what the engine said (gguf/diagnose.h);
 * printed as a table and a one-line finding, or as the "diagnosis" object of
 * --json. docs/check-engine.md, "After DIVERGED". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "refwd_engine.h"
#include "refwd_json.h"

static void on_progress(void *user, int64_t done, int64_t total)
{
    cli_progress *p = user;
    p->total = (uint64_t)total; /* grows when the one-layer step starts */
    cli_progress_update(p, (uint64_t)done);
}

int ce_diagnose(gguf_diagnosis **out, const gguf_model *m, ce_result *const *res, int n,
                const gguf_engine_tol *tol, const gguf_diag_opts *opts, gguf_error *err)
{
    gguf_diag_answer *a = calloc((size_t)n, sizeof *a);
    if (!a)
        return gguf_error_setf(err, GGUF_E_NOMEM, 0, "out of memory");
    for (int i = 0; i < n; i++)
        a[i] = (gguf_diag_answer){res[i]->reply, res[i]->seq, res[i]->n_seq, res[i]->n_seq_prompt};
    gguf_diag_opts o = *opts;
    int64_t n_cand = 0, n_runs = 0;
    int rc = gguf_diagnose_count(m, n, &o, &n_cand, &n_runs, err);
    cli_progress p;
    if (!rc) {
        cli_progress_start(&p, "diagnose: reference runs", (uint64_t)n_runs);
        o.progress = on_progress;
        o.progress_user = &p;
        rc = gguf_diagnose(out, m, a, n, tol, &o, err);
        cli_progress_end(&p);
    }
    free(a);
    return rc;
}

/* "kv-b-rows", "rope-pairs", "clean" (the plan without a fault). */
static const char *fault_label(const gguf_diag_candidate *c)
{
    return c->fault == GGUF_FAULT_NONE ? "clean" : gguf_fault_name(c->fault);
}

/* A configuration fault gives the same numbers at every tp (but one). */
static bool tp_matters(const gguf_diag_candidate *c)
{
    return !gguf_fault_is_config(c->fault) || c->fault == GGUF_FAULT_SHARED_DOUBLE_REDUCE;
}

static void where(char *buf, size_t size, const gguf_diag_candidate *c)
{
    char layer[32] = "every layer", tp[32] = "any tp", ep[24] = "";
    if (c->layer >= 0)
        snprintf(layer, sizeof layer, "layer %lld", (long long)c->layer);
    if (tp_matters(c) || c->fault == GGUF_FAULT_NONE)
        snprintf(tp, sizeof tp, "tp %d", c->tp);
    if (c->ep > 1)
        snprintf(ep, sizeof ep, ", ep %d", c->ep);
    ce_fmt(buf, size, "%s, %s%s", layer, tp, ep);
}

static const gguf_diag_candidate *runner_up(const gguf_diagnosis *d)
{
    return d->runner_up >= 0 ? &d->c[d->runner_up] : NULL;
}

static const gguf_diag_candidate *clean(const gguf_diagnosis *d)
{
    for (int64_t i = 0; i < d->n; i++)
        if (d->c[i].fault == GGUF_FAULT_NONE)
            return &d->c[i];
    return NULL;
}

const char *ce_diagnosis_result(const gguf_diagnosis *d)
{
    return d->result == GGUF_DIAG_FAULT ? "fault"
           : d->result == GGUF_DIAG_AMBIGUOUS ? "ambiguous" : "none";
}

void ce_print_diagnosis(FILE *out, const gguf_diagnosis *d, int show)
{
    char tps[96] = "";
    size_t len = 0;
    for (int i = 0; i < d->n_tried_tp && len < sizeof tps; i++)
        len += (size_t)snprintf(tps + len, sizeof tps - len, "%s%d", i ? ", " : "",
                                d->tried_tp[i]);
    fprintf(out, "%sdiagnose:  %lld candidates (faults of the catalog at tp %s), %lld not "
                 "possible in this model, %lld reference runs, %.1f s\n",
            cli_verbosity < 1 ? "" : "\n", (long long)d->n, tps, (long long)d->n_not_applicable, (long long)d->n_runs,
            d->seconds);
    const int64_t rows = cli_verbosity < 1 ? 0 : show < d->n ? show : d->n;
    if (rows > 0)
        fprintf(out, "   %-22s %-24s %-10s %11s %11s %7s\n", "fault", "where", "reproduces",
                "mean|dlp|", "max|dlp|", "top-1");
    for (int64_t i = 0; i < rows; i++) {
        const gguf_diag_candidate *c = &d->c[i];
        char w[64];
        where(w, sizeof w, c);
        if (c->run_error) {
            fprintf(out, "   %-22s %-24s (its plan does not run: %s)\n", fault_label(c), w,
                    gguf_strerror(c->run_error));
            continue;
        }
        fprintf(out, " %c %-22s %-24s %-10s %11.3e %11.3e %7.4f", c->reproduces ? '>' : ' ',
                fault_label(c), w, c->reproduces ? "yes" : "no", c->mean_abs_dlogprob,
                c->max_abs_dlogprob, c->top1_agreement);
        if (c->same_plan_as >= 0)
            fprintf(out, "  (same plan as %s)", fault_label(&d->c[c->same_plan_as]));
        fputc('\n', out);
    }
    if (rows > 0 && rows < d->n)
        fprintf(out, "   ... %lld more (-v: all)\n", (long long)(d->n - rows));
    if (d->layers_runs_skipped)
        fprintf(out, "note:      one layer at a time was not tried: %lld more runs, over "
                     "--max-runs\n", (long long)d->layers_runs_skipped);
    const gguf_diag_candidate *best = &d->c[0], *next = runner_up(d), *base = clean(d);
    char w[64], w2[64];
    where(w, sizeof w, best);
    const char *result = ce_diagnosis_result(d);
    if (strcmp(result, "fault") == 0) {
        fprintf(out, "diagnosis: %s (%s) reproduces the engine: mean |dlogprob| %.3e",
                fault_label(best), w, best->mean_abs_dlogprob);
        if (next) {
            where(w2, sizeof w2, next);
            fprintf(out, "; runner-up %s (%s) %.3e%s", fault_label(next), w2,
                    next->mean_abs_dlogprob, next->reproduces ? ", also within the tolerance "
                    "but more than twice as far" : ", does not reproduce");
        }
        fprintf(out, "\n           %s\n", gguf_fault_summary(best->fault));
    } else if (strcmp(result, "ambiguous") == 0) {
        fputs("diagnosis: ambiguous: these faults reproduce the engine and its outputs do not "
              "tell them apart:", out);
        int named = 0;
        for (int64_t i = 0; i < d->n && d->c[i].reproduces; i++) {
            if (d->c[i].fault == GGUF_FAULT_NONE ||
                (i > 0 && d->c[i].same_plan_as != 0 &&
                 d->c[i].mean_abs_dlogprob >= 2 * best->mean_abs_dlogprob))
                continue;
            where(w2, sizeof w2, &d->c[i]);
            fprintf(out, "%s %s (%s, %.3e)", named++ ? "," : "", fault_label(&d->c[i]), w2,
                    d->c[i].mean_abs_dlogprob);
        }
        fputs("\n           more prompts, or a weight dump (shard-plan check-dump), can\n", out);
    } else {
        fprintf(out, "diagnosis: no fault of the catalog reproduces the engine");
        if (best->fault != GGUF_FAULT_NONE && best->run_error == 0)
            fprintf(out, " (closest: %s, %s, mean |dlogprob| %.3e", fault_label(best), w,
                    best->mean_abs_dlogprob);
        else if (next)
            fprintf(out, " (closest: %s, mean |dlogprob| %.3e", fault_label(next),
                    next->mean_abs_dlogprob);
        if (base)
            fprintf(out, "; the clean reference: %.3e", base->mean_abs_dlogprob);
        fputs(")\n           the engine's fault is not one the catalog models: compare its "
              "weights (shard-plan check-dump) or its hidden states\n", out);
    }
}

static void html_text(FILE *f, const char *s)
{
    for (; *s; s++)
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        default: fputc(*s, f);
        }
}

void ce_html_diagnosis(FILE *f, const gguf_diagnosis *d)
{
    const gguf_diag_candidate *best = &d->c[0];
    char w[64];
    fputs("<h3>diagnosis</h3>\n<p>", f);
    if (d->result == GGUF_DIAG_NONE) {
        fputs("no fault of the catalog reproduces the engine", f);
    } else {
        where(w, sizeof w, best);
        fprintf(f, "%s<b>%s</b> (%s) reproduces the engine: ",
                d->result == GGUF_DIAG_AMBIGUOUS ? "ambiguous: " : "", fault_label(best), w);
        html_text(f, gguf_fault_summary(best->fault));
    }
    fprintf(f, "<br>%lld candidates, %lld reference runs, %.1f s; a candidate reproduces the "
               "engine when the engine agrees with that faulty reference under the tolerances "
               "above</p>\n<table><tr><th>fault</th><th>where</th><th>reproduces</th>"
               "<th>mean |dlogprob|</th><th>max |dlogprob|</th><th>top-1</th></tr>\n",
            (long long)d->n, (long long)d->n_runs, d->seconds);
    for (int64_t i = 0; i < d->n && i < 12; i++) {
        const gguf_diag_candidate *c = &d->c[i];
        where(w, sizeof w, c);
        fprintf(f, "<tr class=\"%s\"><td>%s</td><td>%s</td><td>%s</td><td>%.3e</td>"
                   "<td>%.3e</td><td>%.4f</td></tr>\n", c->reproduces ? "ok" : "",
                fault_label(c), w, c->run_error ? "(does not run)" : c->reproduces ? "yes" : "no",
                c->mean_abs_dlogprob, c->max_abs_dlogprob, c->top1_agreement);
    }
    fputs("</table>\n", f);
}

static json_t *num(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

static json_t *candidate_json(const gguf_diagnosis *d, const gguf_diag_candidate *c)
{
    json_t *o = json_object();
    o = refwd_json_put(o, "fault", json_string(fault_label(c)));
    o = refwd_json_put(o, "layer", c->layer >= 0 ? json_integer(c->layer) : json_null());
    o = refwd_json_put(o, "tp", tp_matters(c) || c->fault == GGUF_FAULT_NONE
                                    ? json_integer(c->tp) : json_null());
    o = refwd_json_put(o, "ep", json_integer(c->ep));
    o = refwd_json_put(o, "reproduces", json_boolean(c->reproduces));
    o = refwd_json_put(o, "mean_abs_dlogprob", num(c->mean_abs_dlogprob));
    o = refwd_json_put(o, "median_abs_dlogprob", num(c->median_abs_dlogprob));
    o = refwd_json_put(o, "max_abs_dlogprob", num(c->max_abs_dlogprob));
    o = refwd_json_put(o, "top1_agreement", num(c->top1_agreement));
    o = refwd_json_put(o, "outliers", json_integer(c->n_over));
    o = refwd_json_put(o, "same_plan_as", c->same_plan_as >= 0
                       ? json_string(fault_label(&d->c[c->same_plan_as])) : json_null());
    return refwd_json_put(o, "run_error", c->run_error ? json_string(gguf_strerror(c->run_error))
                                                       : json_null());
}

json_t *ce_diagnosis_json(const gguf_diagnosis *d)
{
    json_t *o = json_object(), *cands = json_array(), *tps = json_array();
    const char *result = ce_diagnosis_result(d);
    const gguf_diag_candidate *best = &d->c[0], *next = runner_up(d), *base = clean(d);
    o = refwd_json_put(o, "result", json_string(result));
    o = refwd_json_put(o, "fault", strcmp(result, "fault") == 0
                                       ? candidate_json(d, best) : json_null());
    o = refwd_json_put(o, "runner_up", next ? candidate_json(d, next) : json_null());
    /* how much further the runner-up is from the engine than the finding (nats) */
    o = refwd_json_put(o, "margin", next && strcmp(result, "fault") == 0
                                        ? num(next->mean_abs_dlogprob - best->mean_abs_dlogprob)
                                        : json_null());
    o = refwd_json_put(o, "clean_mean_abs_dlogprob", base ? num(base->mean_abs_dlogprob)
                                                          : json_null());
    for (int i = 0; tps && i < d->n_tried_tp; i++)
        tps = refwd_json_push(tps, json_integer(d->tried_tp[i]));
    o = refwd_json_put(o, "tp_tried", tps);
    o = refwd_json_put(o, "layers_tried", json_boolean(d->layers_tried));
    o = refwd_json_put(o, "layers_runs_skipped", json_integer(d->layers_runs_skipped));
    o = refwd_json_put(o, "runs", json_integer(d->n_runs));
    o = refwd_json_put(o, "not_applicable", json_integer(d->n_not_applicable));
    o = refwd_json_put(o, "seconds", json_real(d->seconds));
    for (int64_t i = 0; cands && i < d->n; i++)
        cands = refwd_json_push(cands, candidate_json(d, &d->c[i]));
    return refwd_json_put(o, "candidates", cands);
}
