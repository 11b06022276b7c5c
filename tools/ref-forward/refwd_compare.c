/* ref-forward compare: two activation records, capture point by capture point. */
#include "refwd_compare.h"

#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gguf/record.h"
#include "ref_forward.h"
#include "refwd_json.h"

enum { OPT_JSON = 300, OPT_HTML, OPT_TOL, OPT_ANY_MODEL, OPT_ANY_TOKENS, OPT_ALL, OPT_COMMON };

static const cli_opt compare_opts[] = {
    {OPT_TOL, "tol", 1, "SPEC",
     "tolerances: 1e-3 (rel_l2) or rel_l2=1e-3,kl=1e-4,top1=off,... over the defaults"},
    {OPT_JSON, "json", 0, NULL, "print one JSON object (schema in docs/records.md)"},
    {OPT_HTML, "html", 1, "REPORT.html", "also write a self-contained HTML report with a plot"},
    {OPT_ALL, "all", 0, NULL,
     "list every rank in the table (default: the worst rank per point; also -v)"},
    {OPT_ANY_MODEL, "any-model", 0, NULL, "compare records of different models (e.g. Q4 vs F16)"},
    {OPT_ANY_TOKENS, "any-tokens", 0, NULL, "compare records of different token lists"},
    {OPT_COMMON, "common", 0, NULL, "compare only the points both records have (engines that "
     "capture fewer points)"},
    {0, NULL, 0, NULL, NULL},
};

static const cli_spec compare_spec = {
    .tool = REF_FORWARD_TOOL " compare",
    .usage = "A.gguf B.gguf [OPTIONS]",
    .summary =
        "Compare activation record B against reference A (records from ref-forward --record,\n"
        "plain or zstd-compressed): per capture point relative L2 error, max abs error, cosine;\n"
        "for logits KL divergence, top-1 agreement and top-5 overlap; for router captures the\n"
        "sets of chosen experts. The first point over tolerance (layer, op, rank) is printed\n"
        "first. Default tolerances follow the records' precisions (docs/records.md).",
    .opts = compare_opts,
    .examples =
        "  ref-forward compare ref.gguf tp4.gguf\n"
        "  ref-forward compare golden.gguf.zst new.gguf --tol rel_l2=1e-3 --html report.html\n"
        "  ref-forward compare ref.gguf engine.gguf --json | jq .first_divergence\n"
        "  ref-forward compare golden.gguf.zst new.gguf -q   # one line, and only on a difference\n",
};

static const char *kind_name(uint32_t k)
{
    switch (k) {
    case GGUF_CMP_KIND_LOGITS: return "logits";
    case GGUF_CMP_KIND_EXPERTS: return "experts";
    case GGUF_CMP_KIND_WEIGHTS: return "weights";
    default: return "tensor";
    }
}

/* "rel_l2 0.93 > 0.0001, cosine 0.1 < 0.999999" for the bits over tolerance. */
static void over_text(const gguf_cmp_entry *e, const gguf_tol *t, char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = 0;
    for (uint32_t bit = 1; bit <= GGUF_CMP_NONFINITE && k < n; bit <<= 1) {
        if (!(e->over & bit))
            continue;
        const char *sep = k ? ", " : "";
        int w;
        switch (bit) {
        case GGUF_CMP_REL_L2: w = snprintf(buf + k, n - k, "%srel_l2 %.3g > %.3g", sep, e->rel_l2, t->rel_l2); break;
        case GGUF_CMP_MAX_ABS: w = snprintf(buf + k, n - k, "%smax_abs %.3g > %.3g", sep, e->max_abs, t->max_abs); break;
        case GGUF_CMP_COSINE: w = snprintf(buf + k, n - k, "%scosine %.9f < %.9f", sep, e->cosine, t->cosine); break;
        case GGUF_CMP_KL: w = snprintf(buf + k, n - k, "%skl %.3g > %.3g", sep, e->kl, t->kl); break;
        case GGUF_CMP_TOP1: w = snprintf(buf + k, n - k, "%stop1 %.3f < %.3f", sep, e->top1, t->top1); break;
        case GGUF_CMP_TOP5: w = snprintf(buf + k, n - k, "%stop5 %.3f < %.3f", sep, e->top5, t->top5); break;
        case GGUF_CMP_EXPERTS: w = snprintf(buf + k, n - k, "%sexperts %.3f < %.3f", sep, e->experts, t->experts); break;
        default: w = snprintf(buf + k, n - k, "%s%lld NaN/Inf values where A is finite", sep, (long long)e->nonfinite_b); break;
        }
        if (w < 0)
            break;
        k += (size_t)w;
    }
}

/* One record's line; a temporary record of this run (deleted after it) is
 * named as such, not by a path that will not exist. */
static void describe(FILE *out, const char *tag, const gguf_record *r, bool temporary)
{
    const gguf_record_meta *m = gguf_record_get_meta(r);
    fprintf(out, "%s: %s (%s%s, %s, tp %u, ep %u, %u rank%s, %llu tokens%s%s)\n", tag,
            temporary ? "this run" : gguf_record_path(r), *m->backend ? m->backend : "?", "",
            *m->precision ? m->precision : "f32", m->tp, m->ep, m->ranks, m->ranks == 1 ? "" : "s",
            (unsigned long long)m->n_tokens, *m->fault ? ", fault " : "", m->fault);
}

static void print_bound(FILE *out, const char *name, const char *op, double v, bool *first)
{
    if (v < 0)
        return;
    fprintf(out, "%s%s %s %.3g", *first ? "" : ", ", name, op, v);
    *first = false;
}

static void print_tol(FILE *out, const gguf_cmp_result *res)
{
    const gguf_tol *t = &res->tol;
    bool first = true;
    fprintf(out, "tolerance (%s): ", res->tol_origin);
    print_bound(out, "rel_l2", "<=", t->rel_l2, &first);
    print_bound(out, "max_abs", "<=", t->max_abs, &first);
    if (t->cosine >= 0) {
        fprintf(out, "%scosine >= %.12g", first ? "" : ", ", t->cosine);
        first = false;
    }
    print_bound(out, "kl", "<=", t->kl, &first);
    print_bound(out, "top1", ">=", t->top1, &first);
    print_bound(out, "top5", ">=", t->top5, &first);
    print_bound(out, "experts", ">=", t->experts, &first);
    fputc('\n', out);
}

/* Of the entries [i, j) of one point, the one to show: first over, else worst rel_l2. */
static int64_t pick(const gguf_cmp_result *res, int64_t i, int64_t j)
{
    int64_t best = i;
    for (int64_t k = i; k < j; k++) {
        const gguf_cmp_entry *e = &res->entries[k], *b = &res->entries[best];
        if (e->over && !b->over)
            return k;
        if (!b->over && (e->rel_l2 > b->rel_l2 || isnan(e->rel_l2)))
            best = k;
    }
    return best;
}

/* "token 1: A chose experts 3 5, B chose 3 6" for the first token whose sets differ. */
static void print_expert_sets(FILE *out, const gguf_record *a, const gguf_record *b,
                              const gguf_cmp_entry *e)
{
    uint32_t ra = gguf_record_get_meta(a)->ranks, rb = gguf_record_get_meta(b)->ranks;
    const gguf_capture *ca = gguf_record_capture_find(a, e->point, ra == 1 ? 0 : e->rank);
    const gguf_capture *cb = gguf_record_capture_find(b, e->point, rb == 1 ? 0 : e->rank);
    int64_t t = e->experts_first_row;
    fprintf(out, "  first token with other experts: %lld", (long long)t);
    if (ca && cb && t >= 0 && ca->ne[0] <= 64) {
        const gguf_capture *c[2] = {ca, cb};
        for (int k = 0; k < 2; k++) {
            fprintf(out, k ? "; B chose" : ": A chose");
            for (int64_t j = 0; j < c[k]->ne[0]; j++)
                fprintf(out, " %g", (double)c[k]->data[t * c[k]->ne[0] + j]);
        }
    }
    fputc('\n', out);
}

static void print_table(FILE *out, const gguf_record *a, const gguf_record *b,
                        const gguf_cmp_result *res, bool all, bool tmp_a, bool tmp_b)
{
    describe(out, "A", a, tmp_a);
    describe(out, "B", b, tmp_b);
    print_tol(out, res);
    if (res->first >= 0) {
        const gguf_cmp_entry *e = &res->entries[res->first];
        char why[512];
        over_text(e, &res->tol, why, sizeof why);
        fprintf(out, "\nFIRST DIVERGENCE: %s (", e->point);
        if (e->layer >= 0)
            fprintf(out, "layer %d", e->layer);
        else
            fprintf(out, "no layer");
        fprintf(out, ", op %s, rank %u): %s\n", e->op, e->rank, why);
        if (e->kind == GGUF_CMP_KIND_EXPERTS)
            print_expert_sets(out, a, b, e);
        else
            fprintf(out, "  largest difference: token %lld, column %lld, |b - a| = %.4g\n",
                    (long long)e->max_abs_row, (long long)e->max_abs_col, e->max_abs);
    }
    fprintf(out, "\n%-24s %5s %10s %10s %14s  %-30s %s\n", "point", "rank", "rel_l2", "max_abs",
            "cosine", "logits / router", "status");
    for (int64_t i = 0; i < res->n_entries;) {
        int64_t j = i;
        while (j < res->n_entries && res->entries[j].point == res->entries[i].point)
            j++;
        for (int64_t k = all ? i : pick(res, i, j); k < (all ? j : pick(res, i, j) + 1); k++) {
            const gguf_cmp_entry *e = &res->entries[k];
            char rank[16], extra[64] = "";
            if (res->ranks == 1)
                snprintf(rank, sizeof rank, "-");
            else
                snprintf(rank, sizeof rank, "%u", e->rank);
            if (e->kind == GGUF_CMP_KIND_LOGITS)
                snprintf(extra, sizeof extra, "kl %.2e top1 %.3f top5 %.3f", e->kl, e->top1,
                         e->top5);
            else if (e->kind == GGUF_CMP_KIND_EXPERTS || e->kind == GGUF_CMP_KIND_WEIGHTS)
                snprintf(extra, sizeof extra, "experts %.3f", e->experts);
            const char *status = !e->over ? "ok" : k == res->first ? "OVER (first)" : "OVER";
            if (e->kind == GGUF_CMP_KIND_EXPERTS)
                fprintf(out, "%-24s %5s %10s %10s %14s  %-30s %s\n", e->point, rank, "-", "-",
                        "-", extra, status);
            else
                fprintf(out, "%-24s %5s %10.3e %10.3e %14.10f  %-30s %s\n", e->point, rank,
                        e->rel_l2, e->max_abs, e->cosine, extra, status);
        }
        i = j;
    }
    if (res->extra_in_b)
        fprintf(out, "\n%lld capture(s) of B have no counterpart in A (not compared)\n",
                (long long)res->extra_in_b);
    if (res->missing_in_b)
        fprintf(out, "\n%lld capture(s) of A are missing in B (--common: not compared)\n",
                (long long)res->missing_in_b);
    if (res->first >= 0)
        fprintf(out, "\nresult: DIFFERENT: %lld of %lld comparisons over tolerance\n",
                (long long)res->n_over, (long long)res->n_entries);
    else
        fprintf(out, "\nresult: SAME within tolerance: %lld comparisons\n",
                (long long)res->n_entries);
}

static json_t *json_record(const gguf_record *r)
{
    const gguf_record_meta *m = gguf_record_get_meta(r);
    json_t *tokens = json_array();
    for (uint64_t i = 0; tokens && i < m->n_tokens; i++)
        tokens = refwd_json_push(tokens, json_integer(m->tokens[i]));
    return json_pack("{s:o, s:b, s:o, s:o, s:o, s:o, s:I, s:I, s:I, s:o, s:o, s:o, s:o}",
                     "path", cli_json_text(gguf_record_path(r), SIZE_MAX),
                     "compressed", gguf_record_compressed(r),
                     "model_digest", cli_json_text(m->model_digest, SIZE_MAX),
                     "arch", cli_json_text(m->arch, SIZE_MAX),
                     "backend", cli_json_text(m->backend, SIZE_MAX),
                     "precision", cli_json_text(m->precision, SIZE_MAX),
                     "tp", (json_int_t)m->tp, "ep", (json_int_t)m->ep,
                     "ranks", (json_int_t)m->ranks,
                     "plan_digest", cli_json_text(m->plan_digest, SIZE_MAX),
                     "fault", cli_json_text(m->fault, SIZE_MAX),
                     "ggufkit_version", cli_json_text(m->ggufkit_version, SIZE_MAX),
                     "tokens", tokens);
}

/* A bound: null when off. */
static json_t *json_bound(double v)
{
    return v < 0 ? json_null() : cli_json_number(v);
}

static json_t *json_tolerances(const gguf_cmp_result *res)
{
    const gguf_tol *t = &res->tol;
    return json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
                     "origin", cli_json_text(res->tol_origin, SIZE_MAX),
                     "rel_l2", json_bound(t->rel_l2), "max_abs", json_bound(t->max_abs),
                     "cosine", json_bound(t->cosine), "kl", json_bound(t->kl),
                     "top1", json_bound(t->top1), "top5", json_bound(t->top5),
                     "experts", json_bound(t->experts));
}

/* The metrics over tolerance, by name: ["rel_l2", "cosine"]. */
static json_t *json_over(uint32_t over)
{
    json_t *a = json_array();
    for (uint32_t bit = 1; a && bit <= GGUF_CMP_NONFINITE; bit <<= 1)
        if (over & bit)
            a = refwd_json_push(a, json_string(gguf_cmp_metric_name(bit)));
    return a;
}

static json_t *json_layer(int layer)
{
    return layer >= 0 ? json_integer(layer) : json_null();
}

static json_t *json_first_divergence(const gguf_cmp_result *res)
{
    if (res->first < 0)
        return json_null();
    const gguf_cmp_entry *e = &res->entries[res->first];
    return json_pack("{s:I, s:o, s:o, s:o, s:I, s:o}", "index", (json_int_t)res->first,
                     "point", cli_json_text(e->point, SIZE_MAX), "layer", json_layer(e->layer),
                     "op", cli_json_text(e->op, SIZE_MAX), "rank", (json_int_t)e->rank,
                     "over", json_over(e->over));
}

/* One comparison: its metrics depend on what the point holds (kind). */
static json_t *json_entry(const gguf_cmp_entry *e)
{
    json_t *o = json_pack("{s:o, s:o, s:o, s:I, s:s, s:I, s:I, s:b, s:o}",
                          "point", cli_json_text(e->point, SIZE_MAX),
                          "layer", json_layer(e->layer), "op", cli_json_text(e->op, SIZE_MAX),
                          "rank", (json_int_t)e->rank, "kind", kind_name(e->kind),
                          "rows", (json_int_t)e->rows, "cols", (json_int_t)e->cols,
                          "ok", !e->over, "over", json_over(e->over));
    if (e->kind != GGUF_CMP_KIND_EXPERTS) {
        o = refwd_json_put(o, "rel_l2", cli_json_number(e->rel_l2));
        o = refwd_json_put(o, "max_abs", cli_json_number(e->max_abs));
        o = refwd_json_put(o, "max_abs_at", json_pack("[I, I]", (json_int_t)e->max_abs_row,
                                                      (json_int_t)e->max_abs_col));
        o = refwd_json_put(o, "cosine", cli_json_number(e->cosine));
        o = refwd_json_put(o, "norm_a", cli_json_number(e->norm_a));
        o = refwd_json_put(o, "norm_b", cli_json_number(e->norm_b));
        o = refwd_json_put(o, "nonfinite_a", json_integer(e->nonfinite_a));
        o = refwd_json_put(o, "nonfinite_b", json_integer(e->nonfinite_b));
    }
    if (e->kind == GGUF_CMP_KIND_LOGITS) {
        o = refwd_json_put(o, "kl", cli_json_number(e->kl));
        o = refwd_json_put(o, "kl_max", cli_json_number(e->kl_max));
        o = refwd_json_put(o, "kl_max_token", json_integer(e->kl_max_row));
        o = refwd_json_put(o, "top1", cli_json_number(e->top1));
        o = refwd_json_put(o, "top5", cli_json_number(e->top5));
    }
    if (e->kind == GGUF_CMP_KIND_EXPERTS || e->kind == GGUF_CMP_KIND_WEIGHTS) {
        o = refwd_json_put(o, "experts", cli_json_number(e->experts));
        o = refwd_json_put(o, "experts_first_token", e->experts_first_row >= 0
                                                         ? json_integer(e->experts_first_row)
                                                         : json_null());
    }
    return o;
}

/* The ggufkit.compare/1 object (docs/records.md). @return 0, or -1 out of
 * memory or when out cannot be written. */
static int print_json(FILE *out, const gguf_record *a, const gguf_record *b,
                      const gguf_cmp_result *res)
{
    json_t *entries = json_array();
    for (int64_t i = 0; entries && i < res->n_entries; i++)
        entries = refwd_json_push(entries, json_entry(&res->entries[i]));
    json_t *doc = json_pack("{s:s, s:b, s:o, s:o, s:o, s:I, s:I, s:I, s:I, s:I, s:o, s:o}",
                            "schema", "ggufkit.compare/1", "ok", res->first < 0,
                            "a", json_record(a), "b", json_record(b),
                            "tolerances", json_tolerances(res), "ranks", (json_int_t)res->ranks,
                            "n_comparisons", (json_int_t)res->n_entries,
                            "n_over", (json_int_t)res->n_over,
                            "extra_in_b", (json_int_t)res->extra_in_b,
                            "missing_in_b", (json_int_t)res->missing_in_b,
                            "first_divergence", json_first_divergence(res), "entries", entries);
    return cli_json_print_report(out, REF_FORWARD_TOOL " compare", doc);
}

/* -q's line. The record's path leads it, unless the record is a temporary file
 * of this run, deleted after it: then its name alone ("tp: first divergence
 * at ..."), not a path that no longer exists. */
static void print_first_divergence(FILE *out, const gguf_record *b, const gguf_error *err,
                                   bool temporary)
{
    const char *path = gguf_record_path(b), *msg = err->message;
    const size_t n = strlen(path);
    if (temporary && strncmp(msg, path, n) == 0 && msg[n] == ':') {
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        const char *dot = strstr(base, ".gguf");
        fprintf(out, "%.*s%s\n", (int)(dot ? (size_t)(dot - base) : strlen(base)), base,
                msg + n);
        return;
    }
    fprintf(out, "%s\n", msg);
}

int refwd_compare_files(const char *ref_path, const char *test_path,
                        const refwd_compare_args *args, FILE *out)
{
    static const refwd_compare_args none;
    const char *tool = REF_FORWARD_TOOL;
    if (!args)
        args = &none;
    gguf_record *a = NULL, *b = NULL;
    gguf_cmp_result *res = NULL;
    gguf_error err;
    int ret = CLI_EXIT_USAGE, rc;
    gguf_tol tol;
    gguf_cmp_opts opts = {.flags = args->flags};

    if ((rc = gguf_record_open(&a, ref_path, &err)) || (rc = gguf_record_open(&b, test_path, &err))) {
        cli_error(tool, &err);
        ret = cli_exit_code(rc);
        goto done;
    }
    if (args->tol) {
        const gguf_record_meta *ma = gguf_record_get_meta(a), *mb = gguf_record_get_meta(b);
        gguf_tol_default(&tol, ma->precision, mb->precision, NULL);
        if ((rc = gguf_tol_parse(&tol, args->tol, &err))) {
            cli_error(tool, &err);
            goto done;
        }
        opts.tol = &tol;
    }
    rc = gguf_compare(&res, a, b, &opts, &err);
    if (rc && rc != GGUF_E_MISMATCH) {
        cli_error(tool, &err);
        ret = cli_exit_code(rc);
        goto done;
    }
    if (args->tol)
        snprintf(res->tol_origin, sizeof res->tol_origin, "--tol %.50s", args->tol);
    if (args->json) {
        if (print_json(out, a, b, res) != 0) {
            cli_errorf(tool, "cannot write the JSON report");
            ret = CLI_EXIT_ENV;
            goto done;
        }
    } else if (cli_verbosity == 0 && rc == GGUF_E_MISMATCH)
        print_first_divergence(out, b, &err, args->tmp_b); /* -q: one line */
    else if (cli_verbosity > 0)
        print_table(out, a, b, res, args->all || cli_verbosity > 1, args->tmp_a, args->tmp_b);
    fflush(out);
    ret = rc == GGUF_E_MISMATCH ? CLI_EXIT_DIFF : CLI_EXIT_OK;
    if (args->html) {
        gguf_error herr;
        int hrc = refwd_compare_write_html(args->html, a, b, res, args, &herr);
        if (hrc) {
            cli_error(tool, &herr);
            ret = cli_exit_code(hrc);
        }
    }
done:
    gguf_cmp_result_free(res);
    gguf_record_free(a);
    gguf_record_free(b);
    return ret;
}

char *refwd_command_line(int argc, char **argv)
{
    size_t n = 64;
    for (int i = 0; i < argc; i++)
        n += 4 * strlen(argv[i]) + 3;
    char *s = malloc(n), *p = s;
    if (!s)
        return NULL;
    p += sprintf(p, "%s", REF_FORWARD_TOOL);
    const char *base = argc > 0 ? strrchr(argv[0], '/') : NULL;
    base = base ? base + 1 : argc > 0 ? argv[0] : "";
    for (int i = strcmp(base, REF_FORWARD_TOOL) ? 0 : 1; i < argc; i++) {
        const char *a = argv[i];
        bool plain = *a != 0;
        for (const char *c = a; *c && plain; c++)
            plain = strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                           "-_./=:,@+%", *c) != NULL;
        *p++ = ' ';
        if (plain) {
            p += sprintf(p, "%s", a);
            continue;
        }
        *p++ = '\'';
        for (const char *c = a; *c; c++) {
            if (*c == '\'') {
                memcpy(p, "'\\''", 4);
                p += 4;
            } else {
                *p++ = *c;
            }
        }
        *p++ = '\'';
        *p = 0;
    }
    return s;
}

int refwd_compare_main(int argc, char **argv)
{
    refwd_compare_args args = {0};
    char *command = refwd_command_line(argc, argv); /* before getopt permutes argv */
    const char *arg, *pos[2] = {NULL, NULL};
    int optind_out = 1, id, n_pos = 0, ret = CLI_EXIT_USAGE;
    for (;;) {
        id = cli_next(&compare_spec, argc, argv, &arg, &optind_out);
        if (id == -1) {
            /* A positional: take it and go on, so options may follow the records. */
            if (optind_out >= argc)
                break;
            if (n_pos == 2) {
                cli_errorf(compare_spec.tool, "unexpected argument '%s': expected two records, "
                           "A (reference) and B", argv[optind_out]);
                goto done;
            }
            pos[n_pos++] = argv[optind_out];
            optind = optind_out + 1;
            continue;
        }
        switch (id) {
        case OPT_JSON: args.json = true; break;
        case OPT_HTML: args.html = arg; break;
        case OPT_TOL: args.tol = arg; break;
        case OPT_ALL: args.all = true; break;
        case OPT_ANY_MODEL: args.flags |= GGUF_CMP_ANY_MODEL; break;
        case OPT_ANY_TOKENS: args.flags |= GGUF_CMP_ANY_TOKENS; break;
        case OPT_COMMON: args.flags |= GGUF_CMP_COMMON; break;
        default: goto done;
        }
    }
    if (n_pos != 2) {
        cli_errorf(compare_spec.tool, "expected two records, A (reference) and B, got %d", n_pos);
        fprintf(stderr, "Try '%s --help'.\n", compare_spec.tool);
        goto done;
    }
    args.command = command;
    ret = refwd_compare_files(pos[0], pos[1], &args, stdout);
done:
    free(command);
    return ret;
}
