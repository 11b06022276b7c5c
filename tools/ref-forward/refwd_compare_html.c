/*
 * The HTML report of ref-forward compare: one self-contained page (no script,
 * no network, inline SVG and CSS) that says at a glance whether B matches A
 * and, when it does not, where it first went wrong:
 *
 *   +--------------------------------------------------------------+
 *   | FAIL / PASS banner with the first divergence, what that      |
 *   |   capture point is and which tensors feed it                 |
 *   | the run: model (path, digest), command line, version, fault  |
 *   | records A and B, tolerances                                  |
 *   | plot: error (log scale) by capture point in forward order,   |
 *   |       one line per rank, tolerance dashed, first divergence  |
 *   |       ringed and labelled, points over tolerance in red      |
 *   | table: every capture point (worst rank, or "all ranks" when  |
 *   |   they agree exactly), over cells in red                     |
 *   | what each capture point means, the tensors that feed it      |
 *   +--------------------------------------------------------------+
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "refwd_compare.h"
#include "gguf/output.h"
#include "gguf/record.h"
#include "gguf/shard.h"

/* Rank colours (no red: red means "over tolerance"). */
static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b",
                                      "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};
#define N_PALETTE 9
#define RED "#d62728"

static void esc(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* The value plotted for an entry: rel_l2, or the share of tokens with other experts. */
static double plot_value(const gguf_cmp_entry *e)
{
    return e->kind == GGUF_CMP_KIND_EXPERTS ? 1 - e->experts : e->rel_l2;
}

typedef struct plot {
    double x0, y0, w, h; /* plot area */
    int lo, hi;          /* decades: 10^lo (bottom, also where exact zeros sit) .. 10^hi */
    int64_t n;           /* capture points */
} plot;

static double px(const plot *p, int64_t i) { return p->x0 + ((double)i + 0.5) * p->w / (double)p->n; }

static double py(const plot *p, double v)
{
    if (isnan(v) || v == INFINITY)
        return p->y0 - 6; /* above the top: drawn as "NaN/Inf" */
    double l = v > 0 ? log10(v) : p->lo;
    if (l < p->lo)
        l = p->lo;
    if (l > p->hi)
        l = p->hi;
    return p->y0 + p->h - (l - p->lo) / (double)(p->hi - p->lo) * p->h;
}

/* What each capture point is and the model tensors (GGUF names, blk.N.) that feed it, in
 * forward order (gguf/forward.h). A divergence at a point and not before it puts the fault
 * in these tensors, or in how the engine slices or combines them. */
static const struct {
    const char *op, *what, *tensors;
} points[] = {
    {"attn_norm", "attention input after its RMSNorm", "attn_norm (and the residual stream in)"},
    {"attn_out", "attention output after the out projection (before the residual add)",
     "attn_q or attn_q_a/attn_q_a_norm/attn_q_b, attn_k, attn_v or MLA's attn_kv_a_mqa/"
     "attn_kv_a_norm/attn_kv_b (attn_k_b, attn_v_b), q/k norms, attn_output; rope; the KV "
     "cache"},
    {"attn_residual", "residual stream after attention", "attn_out + the residual stream in"},
    {"ffn_norm", "FFN input after its RMSNorm", "ffn_norm"},
    {"moe_experts", "the experts the router chose per token (MoE blocks)",
     "ffn_gate_inp (router), exp_probs_b (selection bias)"},
    {"moe_weights", "the chosen experts' weights, normalised and scaled",
     "ffn_gate_inp, exp_probs_b; the routed scaling factor"},
    {"ffn_out", "FFN or MoE output, shared experts added (before the residual add)",
     "ffn_gate, ffn_up, ffn_down; MoE: ffn_gate_exps, ffn_up_exps, ffn_down_exps, "
     "ffn_*_shexp"},
    {"residual", "residual stream after the block", "attn_residual + ffn_out"},
    {"output_norm", "final RMSNorm output", "output_norm"},
    {"logits", "output projection (one score per vocabulary entry)",
     "output (token_embd when tied)"},
};

static int point_index(const char *op)
{
    for (size_t k = 0; op && k < sizeof points / sizeof points[0]; k++)
        if (!strcmp(points[k].op, op))
            return (int)k;
    return -1;
}

static void meta_row(FILE *f, const char *tag, const gguf_record *r, bool tmp)
{
    const gguf_record_meta *m = gguf_record_get_meta(r);
    fprintf(f, "<tr><th>%s</th><td>", tag);
    if (tmp)
        fputs("<i>made by this run (a temporary file, deleted after it)</i>", f);
    else
        esc(f, gguf_record_path(r));
    fprintf(f, "%s</td><td>", gguf_record_compressed(r) ? " (zstd)" : "");
    esc(f, m->backend);
    fputs("</td><td>", f);
    esc(f, m->precision);
    fprintf(f, "</td><td>%u</td><td>%u</td><td>%u</td><td>%llu</td><td>", m->tp, m->ep, m->ranks,
            (unsigned long long)m->n_tokens);
    esc(f, m->arch);
    fputs("</td><td><code>", f);
    esc(f, m->model_digest);
    fputs("</code></td><td>", f);
    esc(f, *m->fault ? m->fault : "-");
    fputs("</td></tr>\n", f);
}

static void write_plot(FILE *f, const gguf_cmp_result *res)
{
    /* Points in order: entries are sorted by point, then rank. */
    int64_t n = 0;
    int64_t *pidx = malloc((size_t)(res->n_entries ? res->n_entries : 1) * sizeof *pidx);
    if (!pidx)
        return;
    double vmin = INFINITY, vmax = 0;
    for (int64_t i = 0; i < res->n_entries; i++) {
        if (i == 0 || res->entries[i].point != res->entries[i - 1].point)
            n++;
        pidx[i] = n - 1;
        double v = plot_value(&res->entries[i]);
        if (isfinite(v) && v > 0) {
            vmin = v < vmin ? v : vmin;
            vmax = v > vmax ? v : vmax;
        }
    }
    double tol = res->tol.rel_l2;
    if (tol > 0) {
        vmin = tol < vmin ? tol : vmin;
        vmax = tol > vmax ? tol : vmax;
    }
    if (!(vmax > 0)) {
        vmin = 1e-12;
        vmax = 1;
    }
    plot p = {.x0 = 78, .y0 = 40, .w = 1100 - 78 - 150, .h = 330, .n = n ? n : 1};
    p.lo = (int)floor(log10(vmin)) - 1;
    p.hi = (int)ceil(log10(vmax));
    if (tol > 0 && p.hi < (int)ceil(log10(tol)) + 1)
        p.hi = (int)ceil(log10(tol)) + 1; /* a decade of room above the tolerance line */
    if (p.hi < p.lo + 3)
        p.hi = p.lo + 3;
    if (p.lo < -40)
        p.lo = -40;

    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1100\" height=\"470\" "
               "viewBox=\"0 0 1100 470\" role=\"img\" aria-label=\"error by capture point\">\n");
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#fff\" "
               "stroke=\"#999\"/>\n", p.x0, p.y0, p.w, p.h);
    /* Decades. */
    int step = (p.hi - p.lo) > 12 ? 2 : 1;
    for (int d = p.lo; d <= p.hi; d += step) {
        double y = py(&p, pow(10, d));
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#e6e6e6\"/>\n",
                p.x0, p.x0 + p.w, y, y);
        if (d == p.lo)
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"ax\" text-anchor=\"end\">&le;1e%d</text>\n",
                    p.x0 - 6, y + 4, d);
        else
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"ax\" text-anchor=\"end\">1e%d</text>\n",
                    p.x0 - 6, y + 4, d);
    }
    fprintf(f, "<text x=\"18\" y=\"%.1f\" class=\"ax\" transform=\"rotate(-90 18 %.1f)\" "
               "text-anchor=\"middle\">relative L2 error (router: share of tokens with other "
               "experts)</text>\n", p.y0 + p.h / 2, p.y0 + p.h / 2);
    /* Layer boundaries and labels: every layer when few, else a stride. */
    int32_t n_layers = 0;
    for (int64_t i = 0; i < res->n_entries; i++)
        if (res->entries[i].layer + 1 > n_layers)
            n_layers = res->entries[i].layer + 1;
    int stride = n_layers > 16 ? (n_layers + 15) / 16 : 1;
    int64_t last_group = INT64_MIN;
    double last_label = -1e9; /* labels closer than this would overlap: skip them */
    for (int64_t i = 0; i < res->n_entries; i++) {
        const gguf_cmp_entry *e = &res->entries[i];
        if (e->group == last_group && e->layer >= 0)
            continue;
        if (i > 0 && e->point == res->entries[i - 1].point)
            continue;
        last_group = e->group;
        double x = px(&p, pidx[i]);
        if (e->layer >= 0) {
            double xb = x - 0.5 * p.w / (double)p.n;
            fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#d0d0d0\"/>\n",
                    xb, xb, p.y0, p.y0 + p.h);
            if (e->layer % stride == 0 && xb - last_label >= 44 && xb < p.x0 + p.w - 30 &&
                (last_label = xb) > 0)
                fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"ax\">blk.%d</text>\n", xb + 2,
                        p.y0 + p.h + 16, e->layer);
        } else if (x - last_label >= 16) {
            last_label = x;
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"ax\" text-anchor=\"end\" "
                       "transform=\"rotate(-40 %.1f %.1f)\">", x, p.y0 + p.h + 16, x,
                    p.y0 + p.h + 16);
            esc(f, e->point);
            fputs("</text>\n", f);
        }
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"ax\" text-anchor=\"middle\">capture point in "
               "forward order (blk.N: where layer N starts; &#9670; router expert choice)"
               "</text>\n",
            p.x0 + p.w / 2, p.y0 + p.h + 62);
    /* Tolerance. */
    if (tol > 0) {
        double y = py(&p, tol);
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"" RED "\" "
                   "stroke-width=\"2.5\" stroke-dasharray=\"9 5\"/>\n", p.x0, p.x0 + p.w, y, y);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"tol\" text-anchor=\"end\">"
                   "tolerance %.0e</text>\n", p.x0 + p.w - 6, y - 6, tol);
    }
    /* One line per rank. */
    for (uint32_t r = 0; r < res->ranks; r++) {
        const char *col = palette[r % N_PALETTE];
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2.5\" "
                   "stroke-linejoin=\"round\" points=\"", col);
        /* Router captures have their own scale (share of tokens): markers only. */
        for (int64_t i = 0; i < res->n_entries; i++)
            if (res->entries[i].rank == r && res->entries[i].kind != GGUF_CMP_KIND_EXPERTS)
                fprintf(f, "%.1f,%.1f ", px(&p, pidx[i]), py(&p, plot_value(&res->entries[i])));
        fputs("\"/>\n", f);
    }
    /* Markers, with the numbers as tooltips. */
    for (int64_t i = 0; i < res->n_entries; i++) {
        const gguf_cmp_entry *e = &res->entries[i];
        double v = plot_value(e), x = px(&p, pidx[i]), y = py(&p, v);
        if (e->kind == GGUF_CMP_KIND_EXPERTS) {
            /* A diamond: grey when the expert sets agree, red when not. */
            fprintf(f, "<path d=\"M%.1f %.1fl6 6l-6 6l-6 -6z\" fill=\"%s\"><title>", x, y - 6,
                    e->over ? RED : "#aaa");
            esc(f, e->point);
            fprintf(f, " rank %u: experts agree on %.1f%% of tokens</title></path>\n", e->rank,
                    100 * e->experts);
            continue;
        }
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%s\" fill=\"%s\"><title>", x, y,
                e->over ? "5" : "3", e->over ? RED : palette[e->rank % N_PALETTE]);
        esc(f, e->point);
        fprintf(f, " rank %u: %s %.3g</title></circle>\n", e->rank,
                e->kind == GGUF_CMP_KIND_EXPERTS ? "other experts" : "rel_l2", v);
    }
    /* First divergence: a vertical rule, a ring and a label. */
    if (res->first >= 0) {
        const gguf_cmp_entry *e = &res->entries[res->first];
        double x = px(&p, pidx[res->first]), y = py(&p, plot_value(e));
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#000\" "
                   "stroke-width=\"1.5\" stroke-dasharray=\"3 3\"/>\n", x, x, p.y0, p.y0 + p.h);
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"10\" fill=\"none\" stroke=\"#000\" "
                   "stroke-width=\"2.5\"/>\n", x, y);
        bool right = x < p.x0 + p.w * 0.6;
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"first\" text-anchor=\"%s\">first "
                   "divergence: ", right ? x + 8 : x - 8, p.y0 - 10, right ? "start" : "end");
        esc(f, e->point);
        fprintf(f, ", rank %u</text>\n", e->rank);
    }
    /* Legend. */
    double lx = p.x0 + p.w + 16, ly = p.y0 + 30;
    uint32_t shown = res->ranks > 12 ? 12 : res->ranks;
    for (uint32_t r = 0; r < shown; r++, ly += 18)
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                   "stroke-width=\"3\"/><text x=\"%.1f\" y=\"%.1f\" class=\"lg\">rank %u</text>\n",
                lx, lx + 24, ly, ly, palette[r % N_PALETTE], lx + 30, ly + 4, r);
    if (shown < res->ranks) {
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"lg\">... %u ranks</text>\n", lx, ly + 4,
                res->ranks);
        ly += 18;
    }
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"" RED "\"/><text x=\"%.1f\" "
               "y=\"%.1f\" class=\"lg\">over tolerance</text>\n", lx + 12, ly + 6, lx + 30, ly + 10);
    if (res->ranks > 1)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"ax\">ranks that agree</text>"
                   "<text x=\"%.1f\" y=\"%.1f\" class=\"ax\">draw one line: the</text>"
                   "<text x=\"%.1f\" y=\"%.1f\" class=\"ax\">highest rank's colour</text>\n",
                lx, ly + 34, lx, ly + 49, lx, ly + 64);
    fputs("</svg>\n", f);
    free(pidx);
}

enum { SCI, FIX9, FIX3 };

static void cell(FILE *f, uint32_t over, int style, double v)
{
    fprintf(f, "<td%s>", over ? " class=\"bad\"" : "");
    if (isnan(v))
        fputs("NaN", f);
    else if (style == SCI)
        fprintf(f, "%.3e", v);
    else if (style == FIX9)
        fprintf(f, "%.9f", v);
    else
        fprintf(f, "%.3f", v);
    fputs("</td>", f);
}

static void write_table(FILE *f, const gguf_cmp_result *res)
{
    fputs("<table class=\"res\"><tr><th>point</th><th>layer</th><th>op</th><th>rank</th>"
          "<th>rel_l2</th><th>max_abs</th><th>cosine</th><th>KL</th><th>top1</th><th>top5</th>"
          "<th>experts</th><th>status</th></tr>\n", f);
    for (int64_t i = 0; i < res->n_entries;) {
        int64_t j = i, k = i;
        while (j < res->n_entries && res->entries[j].point == res->entries[i].point)
            j++;
        /* The row shown: the first rank over tolerance, else the worst rel_l2. */
        for (int64_t m = i; m < j; m++) {
            const gguf_cmp_entry *e = &res->entries[m], *b = &res->entries[k];
            if ((e->over && !b->over) || (!b->over && !e->over && e->rel_l2 > b->rel_l2)) {
                k = m;
                if (e->over)
                    break;
            }
        }
        const gguf_cmp_entry *e = &res->entries[k];
        fprintf(f, "<tr%s><td", k == res->first ? " class=\"first\"" : "");
        const int pi = point_index(e->op);
        if (pi >= 0) {
            fputs(" title=\"", f);
            esc(f, points[pi].what);
            fputs("\"", f);
        }
        fputc('>', f);
        esc(f, e->point);
        if (e->layer >= 0)
            fprintf(f, "</td><td>%d</td><td>", e->layer);
        else
            fputs("</td><td>-</td><td>", f);
        esc(f, e->op);
        /* ranks that hold the same values (a residual stream after the all-reduce) have
         * no worst one */
        bool same = j - i > 1;
        for (int64_t m = i + 1; same && m < j; m++) {
            const gguf_cmp_entry *x = &res->entries[m], *y = &res->entries[i];
            same = x->over == y->over && x->rel_l2 == y->rel_l2 && x->max_abs == y->max_abs &&
                   x->cosine == y->cosine && x->kl == y->kl && x->top1 == y->top1 &&
                   x->top5 == y->top5 && x->experts == y->experts;
        }
        if (same)
            fputs("</td><td>all ranks</td>", f);
        else
            fprintf(f, "</td><td>%u%s</td>", e->rank, j - i > 1 ? " (worst)" : "");
        if (e->kind == GGUF_CMP_KIND_EXPERTS) {
            fputs("<td>-</td><td>-</td><td>-</td>", f);
        } else {
            cell(f, e->over & (GGUF_CMP_REL_L2 | GGUF_CMP_NONFINITE), SCI, e->rel_l2);
            cell(f, e->over & GGUF_CMP_MAX_ABS, SCI, e->max_abs);
            cell(f, e->over & GGUF_CMP_COSINE, FIX9, e->cosine);
        }
        if (e->kind == GGUF_CMP_KIND_LOGITS) {
            cell(f, e->over & GGUF_CMP_KL, SCI, e->kl);
            cell(f, e->over & GGUF_CMP_TOP1, FIX3, e->top1);
            cell(f, e->over & GGUF_CMP_TOP5, FIX3, e->top5);
        } else {
            fputs("<td></td><td></td><td></td>", f);
        }
        if (e->kind == GGUF_CMP_KIND_EXPERTS || e->kind == GGUF_CMP_KIND_WEIGHTS)
            cell(f, e->over & GGUF_CMP_EXPERTS, FIX3, e->experts);
        else
            fputs("<td></td>", f);
        fprintf(f, "<td>%s</td></tr>\n",
                !e->over ? "ok" : k == res->first ? "<b>FIRST DIVERGENCE</b>" : "over");
        i = j;
    }
    fputs("</table>\n", f);
}

static void bound(FILE *f, const char *name, const char *op, double v)
{
    if (v >= 0)
        fprintf(f, "<span class=\"tolv\">%s %s %.12g</span> ", name, op, v);
}

/* The run: which model, how it was made, by which version, with which fault. */
static void write_run(FILE *f, const gguf_record *a, const gguf_record *b,
                      const refwd_compare_args *args)
{
    const gguf_record_meta *ma = gguf_record_get_meta(a), *mb = gguf_record_get_meta(b);
    fputs("<table class=\"run\">\n<tr><th>model</th><td>", f);
    if (args->model && *args->model) {
        fputs("<code>", f);
        esc(f, args->model);
        fputs("</code>, ", f);
    }
    fputs("digest <code>", f);
    esc(f, *ma->model_digest ? ma->model_digest : "(not recorded)");
    fputs("</code>", f);
    if (strcmp(ma->model_digest, mb->model_digest) != 0) {
        fputs(" (A); B: <code>", f);
        esc(f, *mb->model_digest ? mb->model_digest : "(not recorded)");
        fputs("</code>", f);
    }
    fputs(" <span class=\"note\">(XXH3-128 of the tensors: <code>gguf-inspect --hash</code>"
          ")</span></td></tr>\n", f);
    if (args->command) {
        fputs("<tr><th>command</th><td><code>", f);
        esc(f, args->command);
        fputs("</code></td></tr>\n", f);
    }
    fputs("<tr><th>version</th><td>ggufkit " GGUFKIT_VERSION, f);
    const char *va = ma->ggufkit_version ? ma->ggufkit_version : "";
    const char *vb = mb->ggufkit_version ? mb->ggufkit_version : "";
    if (*va && *vb && (strcmp(va, GGUFKIT_VERSION) || strcmp(vb, GGUFKIT_VERSION))) {
        fputs(" (records written by ", f);
        esc(f, va);
        fputs(" and ", f);
        esc(f, vb);
        fputc(')', f);
    }
    fputs("</td></tr>\n<tr><th>fault injected</th><td>", f);
    const char *fault = *mb->fault ? mb->fault : ma->fault;
    if (!*fault) {
        fputs("none", f);
    } else {
        gguf_fault ft;
        int64_t layer;
        fputs("<b>", f);
        esc(f, fault);
        fputs("</b>", f);
        if (gguf_fault_parse(fault, &ft, &layer, NULL) == 0) {
            fputs(": ", f);
            esc(f, gguf_fault_summary(ft));
            if (layer >= 0)
                fprintf(f, " (block %lld only)", (long long)layer);
        }
        fputs(" <span class=\"note\">(on purpose: the record of ", f);
        fputs(*mb->fault ? "B" : "A", f);
        fputs(" comes from a plan broken by this fault; docs/faults.md)</span>", f);
    }
    fputs("</td></tr>\n</table>\n", f);
}

/* What each capture point is and which tensors feed it. */
static void write_points(FILE *f)
{
    fputs("<h2 style=\"font-size:16px\">What the capture points are</h2>\n<p class=\"note\">"
          "Points run in this order in every block N (names <code>blk.N.POINT</code>); a point "
          "that diverges while the one before it agrees puts the cause in the tensors feeding it, "
          "or in how they were sliced and combined across ranks. Tensor names are the GGUF's "
          "(<code>blk.N.NAME.weight</code>).</p>\n<table><tr><th>point</th><th>what it holds"
          "</th><th>fed by</th></tr>\n", f);
    for (size_t k = 0; k < sizeof points / sizeof points[0]; k++) {
        fputs("<tr><td><code>", f);
        esc(f, points[k].op);
        fputs("</code></td><td>", f);
        esc(f, points[k].what);
        fputs("</td><td>", f);
        esc(f, points[k].tensors);
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n", f);
}

static void write_page(FILE *f, const gguf_record *a, const gguf_record *b,
                       const gguf_cmp_result *res, const refwd_compare_args *args)
{
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
          "<title>ggufkit compare: ", f);
    if ((args->tmp_a || args->tmp_b) && args->model) {
        esc(f, args->model); /* the records' names mean nothing after the run */
    } else {
        esc(f, gguf_record_path(b));
        fputs(" vs ", f);
        esc(f, gguf_record_path(a));
    }
    fputs("</title>\n<style>\n"
          "body{font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:24px;"
          "color:#222;background:#fafafa}\n"
          "h1{font-size:20px;margin:0 0 12px}\n"
          ".banner{padding:12px 16px;border-radius:6px;font-size:17px;margin-bottom:14px;"
          "color:#fff}\n.pass{background:#2e7d32}.fail{background:" RED "}\n"
          "table{border-collapse:collapse;font-size:13px;margin:8px 0 16px}\n"
          "td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}\n"
          "th{background:#f0f0f0}\ntd.bad{background:#fde0e0;color:#a00;font-weight:bold}\n"
          "tr.first td{border-top:2px solid #000;border-bottom:2px solid #000}\n"
          ".ax{font-size:12px;fill:#444}.lg{font-size:13px;fill:#222}\n"
          ".tol{font-size:12px;fill:" RED ";font-weight:bold}\n"
          ".first{font-size:13px;font-weight:bold;fill:#000}\n"
          ".tolv{display:inline-block;margin-right:10px;font-family:monospace}\n"
          "svg{background:#fff;border:1px solid #ddd;border-radius:4px}\n"
          ".note{font-size:12px;color:#666}\n"
          "table.run th{width:110px}\n"
          "</style></head><body>\n<h1>ggufkit compare</h1>\n", f);
    if (res->first >= 0) {
        const gguf_cmp_entry *e = &res->entries[res->first];
        fputs("<div class=\"banner fail\">DIFFERENT &mdash; first divergence at <b>", f);
        esc(f, e->point);
        fputs("</b> (", f);
        if (e->layer >= 0)
            fprintf(f, "layer %d, ", e->layer);
        fputs("op ", f);
        esc(f, e->op);
        fprintf(f, ", rank %u): ", e->rank);
        if (e->kind == GGUF_CMP_KIND_EXPERTS)
            fprintf(f, "experts agree on %.1f%% of tokens", 100 * e->experts);
        else
            fprintf(f, "relative L2 error %.3g, cosine %.9f", e->rel_l2, e->cosine);
        fprintf(f, ". %lld of %lld comparisons over tolerance.</div>\n", (long long)res->n_over,
                (long long)res->n_entries);
    } else {
        fprintf(f, "<div class=\"banner pass\">SAME within tolerance &mdash; %lld comparisons "
                   "over %u rank%s.</div>\n", (long long)res->n_entries, res->ranks,
                res->ranks == 1 ? "" : "s");
    }
    fputs("<table><tr><th></th><th>record</th><th>backend</th><th>precision</th><th>tp</th>"
          "<th>ep</th><th>ranks</th><th>tokens</th><th>arch</th><th>model digest</th>"
          "<th>fault</th></tr>\n", f);
    meta_row(f, "A (reference)", a, args->tmp_a);
    meta_row(f, "B", b, args->tmp_b);
    fputs("</table>\n<p>Tolerance (", f);
    esc(f, res->tol_origin);
    fputs("): ", f);
    bound(f, "rel_l2", "&le;", res->tol.rel_l2);
    bound(f, "max_abs", "&le;", res->tol.max_abs);
    bound(f, "cosine", "&ge;", res->tol.cosine);
    bound(f, "KL", "&le;", res->tol.kl);
    bound(f, "top1", "&ge;", res->tol.top1);
    bound(f, "top5", "&ge;", res->tol.top5);
    bound(f, "experts", "&ge;", res->tol.experts);
    fputs("</p>\n", f);
    write_plot(f, res);
    /* under the plot (the banner and the plot fit one screen): the first divergence in
     * words, then the run that made the records */
    if (res->first >= 0) {
        const gguf_cmp_entry *e = &res->entries[res->first];
        const int pi = point_index(e->op);
        if (pi >= 0) {
            fputs("<p>First divergence at <b>", f);
            esc(f, e->point);
            fputs("</b>: the ", f);
            esc(f, points[pi].what);
            fputs(". Fed by ", f);
            esc(f, points[pi].tensors);
            fputs(" (the points before it agree: look there first).</p>\n", f);
        }
    }
    fputs("<h2 style=\"font-size:16px\">The run</h2>\n", f);
    write_run(f, a, b, args);
    fputs("<h2 style=\"font-size:16px\">Capture points</h2>\n", f);
    write_table(f, res);
    write_points(f);
    fputs("<p style=\"font-size:12px;color:#666\">Written by ggufkit " GGUFKIT_VERSION
          " ref-forward compare. Metrics and schema: docs/records.md.</p>\n</body></html>\n", f);
}

int refwd_compare_write_html(const char *path, const gguf_record *a, const gguf_record *b,
                             const gguf_cmp_result *res, const refwd_compare_args *args,
                             gguf_error *err)
{
    static const refwd_compare_args none;
    if (!args)
        args = &none;
    /* gguf/output.h: no half-written report, whatever happens */
    gguf_output *o = NULL;
    gguf_output_opts oo = {.overwrite = true};
    int rc = gguf_output_create(&o, path, &oo, err);
    FILE *f = rc ? NULL : gguf_output_stream(o);
    if (!rc && !f)
        rc = gguf_error_setf(err, GGUF_E_NOMEM, 0, "%s: out of memory", path);
    if (!rc) {
        write_page(f, a, b, res, args);
        rc = gguf_output_commit(o, err);
    }
    gguf_output_free(o);
    return rc;
}
