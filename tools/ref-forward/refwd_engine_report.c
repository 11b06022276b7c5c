/* ref-forward check-engine: what a run prints. The text table (the first
 * divergent positions with the engine's and the reference's best tokens side
 * by side), the --json contract (docs/check-engine.md) and the --html page
 * (inline SVG, no script). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gguf/forward.h"
#include "gguf/output.h"
#include "ref_forward.h"
#include "refwd_engine.h"
#include "refwd_json.h"

/* Length of a valid UTF-8 sequence at s (n bytes left), or 0. */
static int utf8_len(const unsigned char *s, size_t n)
{
    if (s[0] < 0x80)
        return 1;
    const int len = (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3
                    : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0 || (size_t)len > n || (len == 2 && s[0] < 0xC2))
        return 0;
    for (int i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return len;
}

const char *ce_piece(const gguf_file *meta, int32_t id, char *buf, size_t size)
{
    char raw[256];
    int l = id >= 0 ? gguf_fwd_token_text(meta, id, raw, sizeof raw) : -1;
    if (l == 0) {
        /* control tokens detokenize to nothing: show their markup */
        const gguf_value *toks;
        if (gguf_get_arr(meta, "tokenizer.ggml.tokens", &toks, NULL) == 0 &&
            (uint64_t)id < toks->v.arr.n && toks->v.arr.type == GGUF_VALUE_STRING) {
            const gguf_str s = toks->v.arr.strs[id];
            l = (int)(s.len < sizeof raw - 1 ? s.len : sizeof raw - 1);
            memcpy(raw, s.data, (size_t)l);
            raw[l] = 0;
        }
    }
    if (l < 0) {
        snprintf(buf, size, "?");
        return buf;
    }
    size_t j = 0;
    for (int i = 0; i < l && j + 5 < size; i++) {
        const unsigned char c = (unsigned char)raw[i];
        const int u = utf8_len((const unsigned char *)raw + i, (size_t)(l - i));
        if (u > 1 && j + (size_t)u + 1 < size) { /* a whole character */
            memcpy(buf + j, raw + i, (size_t)u);
            j += (size_t)u;
            i += u - 1;
        } else if (u == 0)
            j += (size_t)snprintf(buf + j, size - j, "\\x%02x", c);
        else if (c == '\n')
            j += (size_t)snprintf(buf + j, size - j, "\\n");
        else if (c == '\t')
            j += (size_t)snprintf(buf + j, size - j, "\\t");
        else if (c == '\\')
            j += (size_t)snprintf(buf + j, size - j, "\\\\");
        else if (c == '"') /* pieces are printed in quotes */
            j += (size_t)snprintf(buf + j, size - j, "\\\"");
        else if (c < 0x20 || c == 0x7f)
            j += (size_t)snprintf(buf + j, size - j, "\\x%02x", c);
        else
            buf[j++] = (char)c;
    }
    buf[j < size ? j : size - 1] = 0;
    return buf;
}

void ce_totals_compute(ce_totals *t, ce_result *const *res, int n)
{
    memset(t, 0, sizeof *t);
    t->first_prompt = -1;
    t->first_pos = -1;
    t->tokenization_match = -1;
    int64_t counted = 0, agree = 0, n_kl = 0;
    double kl = 0;
    const gguf_engine_cmp **cmps = calloc((size_t)(n ? n : 1), sizeof *cmps);
    int n_cmp = 0;
    bool mismatch = false;
    for (int i = 0; i < n; i++) {
        const gguf_engine_cmp *c = res[i]->cmp;
        if (!c)
            continue;
        if (cmps)
            cmps[n_cmp++] = c;
        /* an engine that ran another prompt than the one sent diverged,
         * whatever its numbers say on the prompt it ran */
        if (res[i]->prompt_mismatch >= 0 && !mismatch) {
            mismatch = true;
            t->first_prompt = i;
            t->first_pos = -1;
        }
        counted += c->n_counted;
        agree += c->n_agree;
        t->n_positions += c->n_pos;
        t->n_over += c->n_over;
        for (int64_t k = 0; k < c->n_pos; k++)
            if (!isnan(c->pos[k].kl)) {
                kl += c->pos[k].kl;
                n_kl++;
            }
        if (c->max_abs_dlogprob > t->max_abs_dlogprob || isinf(c->max_abs_dlogprob))
            t->max_abs_dlogprob = c->max_abs_dlogprob;
        if (res[i]->tok_match == 0)
            t->tokenization_match = 0;
        else if (res[i]->tok_match == 1 && t->tokenization_match < 0)
            t->tokenization_match = 1;
    }
    /* the verdict pools every prompt: a near-tie here and there is forgiven
     * in proportion to all the positions compared (gguf_engine_judge) */
    t->agree = cmps && n_cmp > 0 && !mismatch &&
               gguf_engine_judge(cmps, n_cmp, &cmps[0]->tol, &t->median_abs_dlogprob);
    if (cmps && n_cmp > 0 && mismatch)
        gguf_engine_judge(cmps, n_cmp, &cmps[0]->tol, &t->median_abs_dlogprob);
    free(cmps);
    for (int i = 0; i < n && !t->agree && t->first_prompt < 0; i++) {
        const gguf_engine_cmp *c = res[i]->cmp;
        for (int64_t k = 0; c && k < c->n_pos; k++)
            if (c->pos[k].over) {
                t->first_prompt = i;
                t->first_pos = k;
                break;
            }
    }
    t->top1_agreement = counted ? (double)agree / (double)counted : 1.0;
    t->kl_topk_mean = n_kl ? kl / (double)n_kl : 0;
}

/* Index into c->pos of the first generated position over a bound from the
 * first divergence on, -1 when none (or when the comparison agrees). */
static int64_t first_generated(const gguf_engine_cmp *c)
{
    for (int64_t k = c->first_divergent < 0 ? c->n_pos : c->first_divergent; k < c->n_pos; k++)
        if (!c->pos[k].prompt && c->pos[k].over)
            return k;
    return -1;
}

/* ---- text ---- */

/* A bound as the user wrote it: a check that is off (bound < 0) is "off". */
static void tol_text(char *buf, size_t size, double v)
{
    if (v < 0)
        snprintf(buf, size, "off");
    else
        snprintf(buf, size, "%g", v);
}

static const char *over_names(uint32_t over, char *buf, size_t size)
{
    buf[0] = 0;
    if (over & GGUF_ENG_TOP1)
        strncat(buf, "top1 ", size - strlen(buf) - 1);
    if (over & GGUF_ENG_DLOGPROB)
        strncat(buf, "dlogprob ", size - strlen(buf) - 1);
    if (over & GGUF_ENG_KL)
        strncat(buf, "kl ", size - strlen(buf) - 1);
    size_t l = strlen(buf);
    if (l)
        buf[l - 1] = 0;
    return buf;
}

/* "piece"(lp) for up to 5 tokens into buf. */
static void top_list(char *buf, size_t size, const gguf_file *meta, const int32_t *ids,
                     const double *lps, int n)
{
    size_t j = 0;
    buf[0] = 0;
    for (int k = 0; k < n && k < 5 && j < size; k++) {
        char piece[64];
        j += (size_t)snprintf(buf + j, size - j, "%s\"%s\" %.2f", k ? ", " : "",
                              ce_piece(meta, ids[k], piece, sizeof piece), lps[k]);
    }
}

static void engine_top(const gguf_engine_pos *p, int32_t *ids, double *lps, int *n)
{
    *n = 0;
    for (int32_t k = 0; k < p->n_top && *n < 5; k++)
        if (p->top[k].id >= 0) {
            ids[*n] = p->top[k].id;
            lps[(*n)++] = p->top[k].logprob;
        }
    if (*n == 0 && p->id >= 0 && !isnan(p->logprob)) {
        ids[0] = p->id;
        lps[0] = p->logprob;
        *n = 1;
    }
}

static void print_row(FILE *out, const ce_report *rep, const ce_result *r,
                      const gguf_engine_cmp_pos *cp, bool first)
{
    char piece[64], et[400], rt[400];
    int32_t ids[5];
    double lps[5];
    int n;
    engine_top(&r->reply->pos[cp->index], ids, lps, &n);
    top_list(et, sizeof et, rep->meta, ids, lps, n);
    top_list(rt, sizeof rt, rep->meta, cp->ref_top, cp->ref_top_lp, cp->n_ref_top);
    char dl[16] = "-", kl[16] = "-", el[16] = "-";
    if (!isnan(cp->engine_logprob))
        snprintf(el, sizeof el, "%.4f", cp->engine_logprob);
    const double worst = isnan(cp->dlogprob_top) ? cp->dlogprob
                         : isnan(cp->dlogprob)   ? cp->dlogprob_top
                                                 : fmax(cp->dlogprob, cp->dlogprob_top);
    if (!isnan(worst))
        snprintf(dl, sizeof dl, "%.2e", worst);
    if (!isnan(cp->kl))
        snprintf(kl, sizeof kl, "%.2e", cp->kl);
    const char mark = first ? '>' : cp->over ? '*' : cp->tie ? '~' : ' ';
    fprintf(out, "%c %5lld %5lld %-4s %7d %-14.14s %9s %9.4f %9s %9s\n", mark,
            (long long)cp->index, (long long)cp->seq, cp->prompt ? "in" : "gen", cp->token,
            ce_piece(rep->meta, cp->token, piece, sizeof piece), el, cp->ref_logprob, dl, kl);
    char ob[40];
    fprintf(out, "        engine:    %s\n        reference: %s%s%s%s\n", et, rt,
            cp->over ? "   [over: " : "", cp->over ? over_names(cp->over, ob, sizeof ob) : "",
            cp->over ? "]" : "");
}

void ce_print_text(FILE *out, const ce_report *rep, ce_result *const *res, int n,
                   const ce_totals *t)
{
    if (cli_verbosity == 0) /* -q: the result line only */
        goto result;
    fprintf(out, "engine:    %s (%s%s%s)\n", rep->url, rep->api,
            rep->served_model && *rep->served_model ? ", model " : "",
            rep->served_model ? rep->served_model : "");
    fprintf(out, "reference: %s (%s, %s)\n", rep->model_path, rep->arch, rep->backend);
    for (int i = 0; i < n; i++) {
        const ce_result *r = res[i];
        const gguf_engine_cmp *c = r->cmp;
        if (!c)
            continue;
        const gguf_engine_reply *rp = r->reply;
        if (n > 1)
            fprintf(out, "\n== prompt %d\n", i);
        fprintf(out, "prompt:    %lld tokens (ids from %s); tokenization: %s\n",
                (long long)r->n_seq_prompt, r->prompt_ids_from ? r->prompt_ids_from : "?",
                r->tok_note);
        fprintf(out, "generated: %lld tokens via %s", (long long)(rp->n_pos - rp->n_prompt),
                gguf_engine_endpoint_path(r->endpoint));
        if (rp->finish_reason)
            fprintf(out, " (finish: %s)", rp->finish_reason);
        fprintf(out, "\n");
        if (rp->text) {
            /* printable: newlines as \n, bytes that are no UTF-8 as \xNN */
            char shown[200];
            size_t j = 0, at = 0;
            const size_t len = strlen(rp->text);
            while (at < len && j + 8 < sizeof shown) {
                const unsigned char ch = (unsigned char)rp->text[at];
                const int u = utf8_len((const unsigned char *)rp->text + at, len - at);
                if (ch == '\n') {
                    j += (size_t)snprintf(shown + j, sizeof shown - j, "\\n");
                } else if (u == 0 || ch < 0x20 || ch == 0x7f) {
                    j += (size_t)snprintf(shown + j, sizeof shown - j, "\\x%02x", ch);
                } else {
                    memcpy(shown + j, rp->text + at, (size_t)u);
                    j += (size_t)u;
                    at += (size_t)u - 1;
                }
                at++;
            }
            shown[j] = 0;
            fprintf(out, "text:      \"%s%s\"\n", shown, at < len ? "..." : "");
        }
        if (rp->reasoning)
            fprintf(out, "           (reasoning: %zu bytes of it)\n", strlen(rp->reasoning));
        for (int k = 0; k < r->n_notes; k++)
            fprintf(out, "note:      %s\n", r->notes[k]);
        fprintf(out, "compared:  %lld positions (%lld prompt), %lld near-ties; top-1 agreement "
                     "%.4f (%lld of %lld), KL(top-k) mean %.3e max %.3e, max |dlogprob| %.3e\n",
                (long long)c->n_pos, (long long)(rp->n_prompt - c->n_skipped),
                (long long)c->n_ties, c->top1_agreement, (long long)c->n_agree,
                (long long)c->n_counted, c->kl_topk_mean, c->kl_topk_max, c->max_abs_dlogprob);
        if (r->prompt_mismatch >= 0) {
            fprintf(out, "verdict:   DIVERGED: the engine answered another prompt: its prompt ids "
                         "differ from the ids sent at token %lld (sent %d, engine %d; -1: past "
                         "the end); the table compares the prompt it ran\n",
                    (long long)r->prompt_mismatch, r->sent_id, r->engine_id);
        }
        fprintf(out, "outliers:  %lld of %lld positions over a per-position bound; median "
                     "|dlogprob| %.3e\n",
                (long long)c->n_over, (long long)c->n_pos, c->median_abs_dlogprob);
        if (c->agree) {
            fprintf(out, "%s%s\n", r->prompt_mismatch >= 0 ? "           (on its own prompt: agree"
                                                          : "verdict:   agree",
                    r->prompt_mismatch >= 0 ? ")" : c->n_over ? " (the outliers are within "
                                                               "the tolerance: near-ties)" : "");
        } else {
            const gguf_engine_cmp_pos *f = c->first_divergent >= 0 ? &c->pos[c->first_divergent]
                                                                   : NULL;
            const int64_t g = first_generated(c);
            if (!f) {
                fprintf(out, "verdict:   DIVERGED (top-1 agreement below %.4f, or median "
                             "|dlogprob| %.3e over %g)\n",
                        c->tol.top1, c->median_abs_dlogprob, c->tol.median);
            } else {
                fprintf(out, "verdict:   DIVERGED at %s position %lld (sequence index %lld)\n",
                        f->prompt ? "prompt" : "generated",
                        (long long)(f->prompt ? f->index : f->index - rp->n_prompt),
                        (long long)f->seq);
                if (f->prompt && g >= 0)
                    fprintf(out, "           first divergent generated position: %lld (sequence "
                                 "index %lld)\n",
                            (long long)(c->pos[g].index - rp->n_prompt), (long long)c->pos[g].seq);
            }
        }
        /* the table: from the first divergence (or the first generated
         * position) on, rep->show rows */
        int64_t start = c->first_divergent;
        if (start < 0)
            for (start = 0; start < c->n_pos && c->pos[start].prompt; start++)
                ;
        if (start >= c->n_pos || cli_verbosity > 1) /* -v: every position */
            start = 0;
        if (c->n_pos > 0 && rep->show > 0) {
            fprintf(out, "\n  %5s %5s %-4s %7s %-14s %9s %9s %9s %9s\n", "pos", "seq", "kind",
                    "token", "piece", "engine", "reference", "|dlogp|", "KL");
            for (int64_t k = start; k < c->n_pos && k < start + rep->show; k++)
                print_row(out, rep, r, &c->pos[k], k == c->first_divergent);
        }
    }
    char tl[6][24];
    const double tv[6] = {rep->tol->dlogprob, rep->tol->kl,       rep->tol->top1,
                          rep->tol->tie,      rep->tol->outliers, rep->tol->median};
    for (int k = 0; k < 6; k++)
        tol_text(tl[k], sizeof tl[k], tv[k]);
    fprintf(out, "\ntolerances: dlogprob %s, kl %s, top1 %s, tie %s, outliers %s, median %s\n",
            tl[0], tl[1], tl[2], tl[3], tl[4], tl[5]);
    fprintf(out, "legend:     > first divergence, * over a bound, ~ near-tie (top-1 not "
                 "counted); seq = index in the teacher-forced sequence\n");
result:
    fprintf(out, "result: %s", t->agree ? "AGREE" : "DIVERGED");
    if (n > 1)
        fprintf(out, " (%d prompts)", n);
    fprintf(out, "; top-1 agreement %.4f, KL(top-k) mean %.3e, max |dlogprob| %.3e, median "
                 "%.3e, outliers %lld of %lld, tokenization %s\n",
            t->top1_agreement, t->kl_topk_mean, t->max_abs_dlogprob, t->median_abs_dlogprob,
            (long long)t->n_over, (long long)t->n_positions,
            t->tokenization_match < 0 ? "not checked"
            : t->tokenization_match   ? "agrees"
                                      : "DIFFERS");
}

/* ---- JSON ---- */

/* A token's text: bytes that are not UTF-8 (a token can end inside a
 * character) become U+FFFD. */
static json_t *json_piece(const gguf_file *meta, int32_t id)
{
    char raw[256];
    const int l = gguf_fwd_token_text(meta, id, raw, sizeof raw);
    return cli_json_text(l > 0 ? raw : "", SIZE_MAX);
}

/* Up to 5 {id, piece, logprob}. */
static json_t *json_tops(const gguf_file *meta, const int32_t *ids, const double *lps, int n)
{
    json_t *a = json_array();
    for (int k = 0; a && k < n; k++)
        a = refwd_json_push(a, json_pack("{s:i, s:o, s:o}", "id", ids[k], "piece",
                                         json_piece(meta, ids[k]), "logprob",
                                         cli_json_number(lps[k])));
    return a;
}

/* The bounds over which a position is, by name: ["top1", "dlogprob", "kl"]. */
static json_t *json_over(uint32_t over)
{
    json_t *a = json_array();
    if (over & GGUF_ENG_TOP1)
        a = refwd_json_push(a, json_string("top1"));
    if (over & GGUF_ENG_DLOGPROB)
        a = refwd_json_push(a, json_string("dlogprob"));
    if (over & GGUF_ENG_KL)
        a = refwd_json_push(a, json_string("kl"));
    return a;
}

/* A position row (docs/check-engine.md, "A position row"). */
static json_t *json_row(const ce_report *rep, const ce_result *r, const gguf_engine_cmp_pos *cp)
{
    int32_t ids[5];
    double lps[5];
    int n;
    engine_top(&r->reply->pos[cp->index], ids, lps, &n);
    json_t *o = json_pack("{s:I, s:I, s:b, s:i, s:o}", "index", (json_int_t)cp->index,
                          "seq", (json_int_t)cp->seq, "prompt", cp->prompt, "token", cp->token,
                          "piece", json_piece(rep->meta, cp->token));
    o = refwd_json_put(o, "engine_logprob", cli_json_number(cp->engine_logprob));
    o = refwd_json_put(o, "ref_logprob", cli_json_number(cp->ref_logprob));
    o = refwd_json_put(o, "dlogprob", cli_json_number(cp->dlogprob));
    o = refwd_json_put(o, "dlogprob_top", cli_json_number(cp->dlogprob_top));
    o = refwd_json_put(o, "kl", cli_json_number(cp->kl));
    o = refwd_json_put(o, "engine_top1", json_integer(cp->engine_top1));
    o = refwd_json_put(o, "ref_top1", json_integer(cp->ref_top1));
    o = refwd_json_put(o, "top1_agree", json_boolean(cp->top1_agree));
    o = refwd_json_put(o, "tie", json_boolean(cp->tie));
    o = refwd_json_put(o, "ref_gap", cli_json_number(cp->ref_gap));
    o = refwd_json_put(o, "over", json_over(cp->over));
    o = refwd_json_put(o, "engine_top", json_tops(rep->meta, ids, lps, n));
    return refwd_json_put(o, "reference_top", json_tops(rep->meta, cp->ref_top, cp->ref_top_lp,
                                                        cp->n_ref_top));
}

/* A bound; a check that is off is null (the contract of docs/check-engine.md). */
static json_t *json_tol(double v)
{
    return v < 0 ? json_null() : cli_json_number(v);
}

/* 1 true, 0 false, -1 (not checked) null. */
static json_t *json_match(int m)
{
    return m < 0 ? json_null() : json_boolean(m);
}

/* An index, or null for -1. */
static json_t *json_index(int64_t i)
{
    return i >= 0 ? json_integer(i) : json_null();
}

/* The first divergence over every prompt, or null. */
static json_t *json_first(const ce_report *rep, ce_result *const *res, const ce_totals *t)
{
    if (t->first_prompt < 0 || t->first_pos < 0)
        return json_null();
    const ce_result *r = res[t->first_prompt];
    const gguf_engine_cmp_pos *cp = &r->cmp->pos[t->first_pos];
    return json_pack("{s:i, s:I, s:o, s:o}", "prompt", t->first_prompt,
                     "position", (json_int_t)cp->index, "generated_position",
                     cp->prompt ? json_null() : json_integer(cp->index - r->reply->n_prompt),
                     "row", json_row(rep, r, cp));
}

static json_t *json_tolerances(const gguf_engine_tol *tol)
{
    return json_pack("{s:o, s:o, s:o, s:o, s:o, s:o}", "dlogprob", json_tol(tol->dlogprob),
                     "kl", json_tol(tol->kl), "top1", json_tol(tol->top1), "tie",
                     json_tol(tol->tie), "outliers", json_tol(tol->outliers), "median",
                     json_tol(tol->median));
}

/* One prompt's object of "prompts". */
static json_t *json_prompt(const ce_report *rep, const ce_result *r)
{
    const gguf_engine_cmp *c = r->cmp;
    const gguf_engine_reply *rp = r->reply;
    /* the first divergence as a position index, and as an index among the generated tokens */
    const int64_t first = c->first_divergent >= 0 ? c->pos[c->first_divergent].index : -1;
    const int64_t g = first_generated(c);
    const int64_t first_generated_at = g >= 0 ? c->pos[g].index - rp->n_prompt : -1;
    json_t *o = json_object();
    o = refwd_json_put(o, "index", json_integer(r->index));
    o = refwd_json_put(o, "ok", json_boolean(c->agree && r->prompt_mismatch < 0));
    o = refwd_json_put(o, "prompt_mismatch",
                       r->prompt_mismatch < 0 ? json_null()
                       : json_pack("{s:I, s:i, s:i}", "index", (json_int_t)r->prompt_mismatch,
                                   "sent", r->sent_id, "engine", r->engine_id));
    o = refwd_json_put(o, "unresolved_positions", json_integer(r->n_unresolved));
    o = refwd_json_put(o, "first_divergence", json_index(first));
    o = refwd_json_put(o, "first_divergence_generated", json_index(first_generated_at));
    o = refwd_json_put(o, "top1_agreement", cli_json_number(c->top1_agreement));
    o = refwd_json_put(o, "kl_topk_mean", cli_json_number(c->kl_topk_mean));
    o = refwd_json_put(o, "kl_topk_max", cli_json_number(c->kl_topk_max));
    o = refwd_json_put(o, "max_abs_dlogprob", cli_json_number(c->max_abs_dlogprob));
    o = refwd_json_put(o, "median_abs_dlogprob", cli_json_number(c->median_abs_dlogprob));
    o = refwd_json_put(o, "outliers", json_integer(c->n_over));
    o = refwd_json_put(o, "tokenization_match", json_match(r->tok_match));
    o = refwd_json_put(o, "tokenization", cli_json_text(r->tok_note, SIZE_MAX));
    o = refwd_json_put(o, "endpoint", json_string(gguf_engine_endpoint_path(r->endpoint)));
    o = refwd_json_put(o, "prompt_ids_from",
                       cli_json_text(r->prompt_ids_from ? r->prompt_ids_from : "", SIZE_MAX));
    o = refwd_json_put(o, "prompt_tokens", refwd_json_ids(r->seq, r->n_seq_prompt));
    o = refwd_json_put(o, "generated", refwd_json_ids(r->seq + r->n_seq_prompt,
                                                      r->n_seq - r->n_seq_prompt));
    o = refwd_json_put(o, "our_tokens", r->our_ids ? refwd_json_ids(r->our_ids, r->n_our_ids)
                                                   : json_null());
    o = refwd_json_put(o, "text", cli_json_text(rp->text ? rp->text : "", SIZE_MAX));
    o = refwd_json_put(o, "reasoning", cli_json_text(rp->reasoning, SIZE_MAX)); /* NULL: null */
    o = refwd_json_put(o, "finish_reason", cli_json_text(rp->finish_reason, SIZE_MAX));
    o = refwd_json_put(o, "prompt_positions", json_integer(rp->n_prompt - c->n_skipped));
    o = refwd_json_put(o, "near_ties", json_integer(c->n_ties));
    json_t *notes = json_array(), *positions = json_array();
    for (int k = 0; notes && k < r->n_notes; k++)
        notes = refwd_json_push(notes, cli_json_text(r->notes[k], SIZE_MAX));
    for (int64_t k = 0; positions && k < c->n_pos; k++)
        positions = refwd_json_push(positions, json_row(rep, r, &c->pos[k]));
    o = refwd_json_put(o, "notes", notes);
    return refwd_json_put(o, "positions", positions);
}

int ce_print_json(FILE *out, const ce_report *rep, ce_result *const *res, int n,
                  const ce_totals *t)
{
    json_t *o = json_object(), *prompts = json_array();
    o = refwd_json_put(o, "ok", json_boolean(t->agree));
    o = refwd_json_put(o, "first_divergence", json_first(rep, res, t));
    o = refwd_json_put(o, "top1_agreement", cli_json_number(t->top1_agreement));
    o = refwd_json_put(o, "kl_topk_mean", cli_json_number(t->kl_topk_mean));
    o = refwd_json_put(o, "max_abs_dlogprob", cli_json_number(t->max_abs_dlogprob));
    o = refwd_json_put(o, "median_abs_dlogprob", cli_json_number(t->median_abs_dlogprob));
    o = refwd_json_put(o, "positions", json_integer(t->n_positions));
    o = refwd_json_put(o, "outliers", json_integer(t->n_over));
    o = refwd_json_put(o, "tokenization_match", json_match(t->tokenization_match));
    o = refwd_json_put(o, "url", cli_json_text(rep->url, SIZE_MAX));
    o = refwd_json_put(o, "api", cli_json_text(rep->api, SIZE_MAX));
    o = refwd_json_put(o, "served_model", rep->served_model && *rep->served_model
                                              ? cli_json_text(rep->served_model, SIZE_MAX)
                                              : json_null());
    o = refwd_json_put(o, "model", cli_json_text(rep->model_path, SIZE_MAX));
    o = refwd_json_put(o, "backend", cli_json_text(rep->backend, SIZE_MAX));
    o = refwd_json_put(o, "tolerances", json_tolerances(rep->tol));
    for (int i = 0; prompts && i < n; i++)
        if (res[i]->cmp)
            prompts = refwd_json_push(prompts, json_prompt(rep, res[i]));
    o = refwd_json_put(o, "prompts", prompts);
    o = refwd_json_put(o, "diagnosis", rep->diagnosis ? ce_diagnosis_json(rep->diagnosis)
                                                      : json_null());
    return cli_json_print_report(out, REF_FORWARD_TOOL " check-engine", o);
}

/* ---- HTML ---- */

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

/* y of a value on a log scale 1e-8 .. 1e2 (zero at the bottom, inf at the top). */
static double ylog(double v, double y0, double h)
{
    double l = v > 0 ? log10(v) : -8;
    if (isinf(v) || l > 2)
        l = 2;
    if (l < -8)
        l = -8;
    return y0 + h - (l + 8) / 10 * h;
}

static void html_plot(FILE *f, const ce_report *rep, const ce_result *r)
{
    const gguf_engine_cmp *c = r->cmp;
    const double W = 900, H = 260, x0 = 60, y0 = 20, w = W - x0 - 20, h = H - y0 - 40;
    const int64_t n = c->n_pos ? c->n_pos : 1;
    fprintf(f, "<svg width=\"%.0f\" height=\"%.0f\" xmlns=\"http://www.w3.org/2000/svg\" "
               "font-family=\"sans-serif\" font-size=\"11\">\n", W, H);
    fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"#fafafa\" "
               "stroke=\"#ccc\"/>\n", x0, y0, w, h);
    for (int d = -8; d <= 2; d += 2) {
        const double y = ylog(pow(10, d), y0, h);
        fprintf(f, "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>"
                   "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">1e%d</text>\n",
                x0, x0 + w, y, y, x0 - 4, y + 4, d);
    }
    if (rep->tol->dlogprob > 0) {
        const double y = ylog(rep->tol->dlogprob, y0, h);
        fprintf(f, "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#1f77b4\" "
                   "stroke-dasharray=\"4 3\"/>\n", x0, x0 + w, y, y);
    }
    if (rep->tol->kl > 0) {
        const double y = ylog(rep->tol->kl, y0, h);
        fprintf(f, "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ff7f0e\" "
                   "stroke-dasharray=\"4 3\"/>\n", x0, x0 + w, y, y);
    }
    /* the boundary between prompt and generated positions */
    int64_t g = 0;
    while (g < c->n_pos && c->pos[g].prompt)
        g++;
    if (g > 0 && g < c->n_pos) {
        const double x = x0 + (double)g * w / (double)n;
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.0f\" y2=\"%.0f\" stroke=\"#999\"/>"
                   "<text x=\"%.1f\" y=\"%.0f\">generated &#8594;</text>\n",
                x, x, y0, y0 + h, x + 3, y0 + 12);
    }
    for (int series = 0; series < 2; series++) {
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.2\" points=\"",
                series ? "#ff7f0e" : "#1f77b4");
        for (int64_t k = 0; k < c->n_pos; k++) {
            const gguf_engine_cmp_pos *p = &c->pos[k];
            const double v = series ? p->kl
                             : isnan(p->dlogprob_top) ? p->dlogprob
                             : isnan(p->dlogprob)     ? p->dlogprob_top
                                                      : fmax(p->dlogprob, p->dlogprob_top);
            if (isnan(v))
                continue;
            fprintf(f, "%.1f,%.1f ", x0 + ((double)k + 0.5) * w / (double)n, ylog(v, y0, h));
        }
        fputs("\"/>\n", f);
    }
    for (int64_t k = 0; k < c->n_pos; k++) {
        const gguf_engine_cmp_pos *p = &c->pos[k];
        const double x = x0 + ((double)k + 0.5) * w / (double)n;
        if (p->over & GGUF_ENG_TOP1 || p->tie)
            fprintf(f, "<rect x=\"%.1f\" y=\"%.0f\" width=\"3\" height=\"6\" fill=\"%s\"><title>"
                       "%s at %lld</title></rect>\n", x - 1.5, y0 + h + 4,
                    p->over & GGUF_ENG_TOP1 ? "#d62728" : "#999",
                    p->over & GGUF_ENG_TOP1 ? "top-1 differs" : "near-tie", (long long)p->index);
    }
    if (c->first_divergent >= 0) {
        const gguf_engine_cmp_pos *p = &c->pos[c->first_divergent];
        const double x = x0 + ((double)c->first_divergent + 0.5) * w / (double)n;
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.0f\" y2=\"%.0f\" stroke=\"#d62728\"/>"
                   "<text x=\"%.1f\" y=\"%.0f\" fill=\"#d62728\">first divergence: position "
                   "%lld</text>\n",
                x, x, y0, y0 + h, x + 3, y0 + h - 6, (long long)p->index);
    }
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\">position</text>"
               "<text x=\"%.0f\" y=\"%.0f\" fill=\"#1f77b4\">max |dlogprob|</text>"
               "<text x=\"%.0f\" y=\"%.0f\" fill=\"#ff7f0e\">KL over the top-k union</text>"
               "<text x=\"%.0f\" y=\"%.0f\" fill=\"#d62728\">red ticks: top-1 differs</text>"
               "\n</svg>\n",
            x0 + w / 2, H - 6, x0, H - 6, x0 + 130, H - 6, x0 + w - 150, H - 6);
}

int ce_write_html(const char *path, const ce_report *rep, ce_result *const *res, int n,
                  const ce_totals *t, gguf_error *err)
{
    gguf_output *o = NULL;
    gguf_output_opts oo = {0};
    oo.overwrite = true;
    int rc = gguf_output_create(&o, path, &oo, err);
    if (rc)
        return rc;
    FILE *f = gguf_output_stream(o);
    if (!f) {
        gguf_output_free(o);
        return gguf_error_setf(err, GGUF_E_NOMEM, 0, "%s: out of memory", path);
    }
    fputs("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>check-engine</title>\n"
          "<style>body{font-family:sans-serif;margin:20px}table{border-collapse:collapse;"
          "font-size:12px}td,th{border:1px solid #ddd;padding:2px 6px;text-align:left}"
          ".over{background:#fdd}.tie{color:#888}.banner{padding:8px;font-size:18px}"
          ".ok{background:#dfd}.bad{background:#fdd}</style></head><body>\n", f);
    fprintf(f, "<div class=\"banner %s\">%s</div>\n<p>engine <b>", t->agree ? "ok" : "bad",
            t->agree ? "AGREE" : "DIVERGED");
    esc(f, rep->url);
    fputs("</b> (", f);
    esc(f, rep->api);
    fputs(") against the reference <b>", f);
    esc(f, rep->model_path);
    char tl[4][24];
    const double tv[4] = {rep->tol->dlogprob, rep->tol->kl, rep->tol->top1, rep->tol->tie};
    for (int k = 0; k < 4; k++)
        tol_text(tl[k], sizeof tl[k], tv[k]);
    fprintf(f, "</b> (%s)<br>top-1 agreement %.4f, KL(top-k) mean %.3e, max |dlogprob| %.3e; "
               "tolerances dlogprob %s, kl %s, top1 %s, tie %s</p>\n",
            rep->backend, t->top1_agreement, t->kl_topk_mean, t->max_abs_dlogprob, tl[0], tl[1],
            tl[2], tl[3]);
    fputs("<p>command <code>", f);
    esc(f, rep->command ? rep->command : "");
    fputs("</code><br>ggufkit " GGUFKIT_VERSION "</p>\n", f);
    if (rep->diagnosis)
        ce_html_diagnosis(f, rep->diagnosis);
    for (int i = 0; i < n; i++) {
        const ce_result *r = res[i];
        const gguf_engine_cmp *c = r->cmp;
        if (!c)
            continue;
        fprintf(f, "<h3>prompt %d: %s</h3>\n<p>tokenization: ", i,
                c->agree && r->prompt_mismatch < 0 ? "agree" : "diverged");
        esc(f, r->tok_note);
        fputs("</p>\n", f);
        html_plot(f, rep, r);
        fputs("<table><tr><th>pos</th><th>kind</th><th>token</th><th>engine lp</th>"
              "<th>ref lp</th><th>|dlogprob|</th><th>KL</th><th>engine top</th>"
              "<th>reference top</th></tr>\n", f);
        for (int64_t k = 0; k < c->n_pos; k++) {
            const gguf_engine_cmp_pos *p = &c->pos[k];
            char piece[64], et[400], rt[400];
            int32_t ids[5];
            double lps[5];
            int nt;
            engine_top(&r->reply->pos[p->index], ids, lps, &nt);
            top_list(et, sizeof et, rep->meta, ids, lps, nt);
            top_list(rt, sizeof rt, rep->meta, p->ref_top, p->ref_top_lp, p->n_ref_top);
            fprintf(f, "<tr class=\"%s\"><td>%lld</td><td>%s</td><td>%d \"", 
                    p->over ? "over" : p->tie ? "tie" : "", (long long)p->index,
                    p->prompt ? "prompt" : "generated", p->token);
            esc(f, ce_piece(rep->meta, p->token, piece, sizeof piece));
            fprintf(f, "\"</td><td>%.4f</td><td>%.4f</td><td>%.2e</td><td>%.2e</td><td>",
                    p->engine_logprob, p->ref_logprob, p->dlogprob, p->kl);
            esc(f, et);
            fputs("</td><td>", f);
            esc(f, rt);
            fputs("</td></tr>\n", f);
        }
        fputs("</table>\n", f);
    }
    fputs("</body></html>\n", f);
    rc = gguf_output_commit(o, err);
    gguf_output_free(o);
    return rc;
}
