/*
 * Record against record: pair captures by point and rank, check that the two
 * runs are comparable at all (same model, same tokens, same shapes), compute
 * the metrics, order the entries the way the forward ran, and name the first
 * divergence.
 */
#include "util/error_lib.h"
#include "gguf/compare.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gguf_cmp_result_free(gguf_cmp_result *res)
{
    if (!res)
        return;
    free(res->entries);
    free(res);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

static int entry_cmp(const void *x, const void *y)
{
    const gguf_cmp_entry *a = x, *b = y;
    if (a->group != b->group)
        return a->group < b->group ? -1 : 1;
    if (a->order != b->order)
        return a->order < b->order ? -1 : 1;
    return (a->rank > b->rank) - (a->rank < b->rank);
}

static void shape_str(const gguf_capture *c, char *buf, size_t n)
{
    int k = snprintf(buf, n, "[");
    for (uint32_t d = 0; d < c->n_dims && k > 0 && (size_t)k < n; d++)
        k += snprintf(buf + k, n - (size_t)k, "%s%lld", d ? ", " : "", (long long)c->ne[d]);
    if (k > 0 && (size_t)k < n)
        snprintf(buf + k, n - (size_t)k, "]");
}

static bool same_shape(const gguf_capture *a, const gguf_capture *b)
{
    for (int d = 0; d < GGUF_MAX_DIMS; d++)
        if (a->ne[d] != b->ne[d])
            return false;
    return true;
}

static int check_runs(const gguf_record *a, const gguf_record *b, uint32_t flags,
                      gguf_error *err)
{
    const gguf_record_meta *ma = gguf_record_get_meta(a), *mb = gguf_record_get_meta(b);
    if (!(flags & GGUF_CMP_ANY_MODEL) && *ma->model_digest && *mb->model_digest &&
        strcmp(ma->model_digest, mb->model_digest))
        return gguf_fail(err, GGUF_E_BAD_VALUE, GGUF_NO_OFFSET,
                         "%s: record.model_digest: %s, but %s has %s: records of different "
                         "models (allow with --any-model)", gguf_record_path(b),
                         mb->model_digest, gguf_record_path(a), ma->model_digest);
    if (!(flags & GGUF_CMP_ANY_TOKENS)) {
        bool same = ma->n_tokens == mb->n_tokens;
        uint64_t i = 0;
        for (; same && i < ma->n_tokens; i++)
            same = ma->tokens[i] == mb->tokens[i];
        if (!same)
            return gguf_fail(err, GGUF_E_BAD_VALUE, GGUF_NO_OFFSET,
                             "%s: record.tokens: differ from %s's (%llu against %llu tokens%s): "
                             "runs of different inputs", gguf_record_path(b),
                             gguf_record_path(a), (unsigned long long)mb->n_tokens,
                             (unsigned long long)ma->n_tokens,
                             ma->n_tokens == mb->n_tokens ? ", different ids" : "");
    }
    return GGUF_OK;
}

int gguf_compare(gguf_cmp_result **out, const gguf_record *a, const gguf_record *b,
                 const gguf_cmp_opts *opts, gguf_error *err)
{
    if (opts && opts->version > GGUF_CMP_OPTS_VERSION) {
        if (out)
            *out = NULL;
        return gguf_opts_version_fail(opts->version, GGUF_CMP_OPTS_VERSION, "gguf_cmp_opts", err);
    }
    gguf_error_clear(err);
    if (!out || !a || !b)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_compare: bad args");
    *out = NULL;
    uint32_t flags = opts ? opts->flags : 0;
    int rc = check_runs(a, b, flags, err);
    if (rc)
        return rc;
    const gguf_record_meta *ma = gguf_record_get_meta(a), *mb = gguf_record_get_meta(b);
    uint32_t ra = ma->ranks, rb = mb->ranks;
    if (ra != rb && ra != 1 && rb != 1)
        return gguf_fail(err, GGUF_E_BAD_VALUE, GGUF_NO_OFFSET,
                         "%s: %u ranks cannot be paired with the %u ranks of %s (equal counts, "
                         "or one side single-rank)", gguf_record_path(b), rb, ra,
                         gguf_record_path(a));
    uint32_t ranks = ra > rb ? ra : rb;
    int64_t na = gguf_record_capture_count(a);
    if (na == 0)
        return gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET, "%s: the record has no captures",
                         gguf_record_path(a));

    gguf_cmp_result *res = calloc(1, sizeof *res);
    /* At most one entry per capture of A and rank of the wider side. */
    uint64_t cap = (uint64_t)na * (ra == 1 ? ranks : 1);
    if (res)
        res->entries = calloc(cap, sizeof *res->entries);
    if (!res || !res->entries) {
        gguf_cmp_result_free(res);
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    }
    res->ranks = ranks;
    res->first = -1;
    if (opts && opts->tol) {
        res->tol = *opts->tol;
        snprintf(res->tol_origin, sizeof res->tol_origin, "given");
    } else {
        gguf_tol_default(&res->tol, ma->precision, mb->precision, res->tol_origin);
    }

    /* Where the blocks start in A: layer-less points before it sort first. */
    int64_t first_blk = na;
    for (int64_t i = 0; i < na && first_blk == na; i++)
        if (gguf_record_capture_at(a, i)->layer >= 0)
            first_blk = i;

    for (int64_t i = 0; i < na; i++) {
        const gguf_capture *ca = gguf_record_capture_at(a, i);
        /* Each point once: at its first capture in A (the lowest rank written first). */
        bool seen = false;
        for (uint32_t r = 0; r < ra && !seen; r++) {
            const gguf_capture *o = gguf_record_capture_find(a, ca->point, r);
            seen = o && o->index < i;
        }
        if (seen)
            continue;
        uint32_t kind = !strcmp(ca->point, "logits")      ? GGUF_CMP_KIND_LOGITS
                        : ends_with(ca->op, "moe_experts") ? GGUF_CMP_KIND_EXPERTS
                        : ends_with(ca->op, "moe_weights") ? GGUF_CMP_KIND_WEIGHTS
                                                           : GGUF_CMP_KIND_TENSOR;
        char ids_point[GGUF_RECORD_MAX_NAME + 8] = "";
        if (kind == GGUF_CMP_KIND_WEIGHTS) {
            size_t n = strlen(ca->point) - strlen("moe_weights");
            snprintf(ids_point, sizeof ids_point, "%.*smoe_experts", (int)n, ca->point);
        }
        for (uint32_t r = 0; r < ranks; r++) {
            uint32_t rka = ra == 1 ? 0 : r, rkb = rb == 1 ? 0 : r;
            const gguf_capture *pa = gguf_record_capture_find(a, ca->point, rka);
            const gguf_capture *pb = gguf_record_capture_find(b, ca->point, rkb);
            if (!pa) {
                rc = gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET,
                               "%s: capture '%s' rank %u: missing (other ranks have it)",
                               gguf_record_path(a), ca->point, rka);
                goto fail;
            }
            if (!pb && (flags & GGUF_CMP_COMMON)) {
                res->missing_in_b++;
                continue;
            }
            if (!pb) {
                rc = gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET,
                               "%s: capture '%s' rank %u: missing (%s has it)",
                               gguf_record_path(b), ca->point, rkb, gguf_record_path(a));
                goto fail;
            }
            if (!same_shape(pa, pb)) {
                char sa[96], sb[96];
                shape_str(pa, sa, sizeof sa);
                shape_str(pb, sb, sizeof sb);
                rc = gguf_fail(err, GGUF_E_BAD_SHAPE, pb->file_offset,
                               "%s: capture '%s' rank %u: shape %s, but %s has %s",
                               gguf_record_path(b), ca->point, rkb, sb, gguf_record_path(a), sa);
                goto fail;
            }
            const float *ia = NULL, *ib = NULL;
            if (kind == GGUF_CMP_KIND_WEIGHTS) {
                const gguf_capture *xa = gguf_record_capture_find(a, ids_point, rka);
                const gguf_capture *xb = gguf_record_capture_find(b, ids_point, rkb);
                if (xa && xb && same_shape(xa, pa) && same_shape(xb, pb)) {
                    ia = xa->data;
                    ib = xb->data;
                }
            }
            gguf_cmp_entry *e = &res->entries[res->n_entries++];
            int64_t cols = pa->ne[0], rows = cols ? pa->n_elements / cols : 0;
            gguf_cmp_arrays(e, kind, pa->data, pb->data, rows, cols, ia, ib);
            e->point = pa->point;
            e->op = pa->op;
            e->layer = pa->layer;
            e->rank = r;
            e->order = i;
            e->group = pa->layer >= 0 ? pa->layer : i < first_blk ? -1 : INT32_MAX;
            if (gguf_cmp_check(e, &res->tol))
                res->n_over++;
        }
    }
    if (res->n_entries == 0) {
        rc = gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET,
                       "%s: no capture point in common with %s", gguf_record_path(b),
                       gguf_record_path(a));
        goto fail;
    }
    qsort(res->entries, (size_t)res->n_entries, sizeof *res->entries, entry_cmp);
    for (int64_t i = 0; i < res->n_entries && res->first < 0; i++)
        if (res->entries[i].over)
            res->first = i;

    /* Captures of B that A does not have are reported, not compared. */
    for (int64_t i = 0; i < gguf_record_capture_count(b); i++) {
        const gguf_capture *cb = gguf_record_capture_at(b, i);
        bool found = false;
        for (uint32_t r = 0; r < ra && !found; r++)
            found = gguf_record_capture_find(a, cb->point, r) != NULL;
        res->extra_in_b += !found;
    }

    *out = res;
    if (res->first >= 0) {
        const gguf_cmp_entry *e = &res->entries[res->first];
        char what[160] = "";
        size_t k = 0;
        for (uint32_t bit = 1; bit <= GGUF_CMP_NONFINITE && k < sizeof what - 40; bit <<= 1) {
            if (!(e->over & bit))
                continue;
            double v = bit == GGUF_CMP_REL_L2    ? e->rel_l2
                       : bit == GGUF_CMP_MAX_ABS ? e->max_abs
                       : bit == GGUF_CMP_COSINE  ? e->cosine
                       : bit == GGUF_CMP_KL      ? e->kl
                       : bit == GGUF_CMP_TOP1    ? e->top1
                       : bit == GGUF_CMP_TOP5    ? e->top5
                       : bit == GGUF_CMP_EXPERTS ? e->experts
                                                 : (double)e->nonfinite_b;
            /* Cosines near 1 need their digits: 0.99997 is not "1". */
            k += (size_t)snprintf(what + k, sizeof what - k,
                                  bit == GGUF_CMP_COSINE ? "%s%s %.9f" : "%s%s %.3g",
                                  k ? ", " : "", gguf_cmp_metric_name(bit), v);
        }
        char layer[24];
        if (e->layer >= 0)
            snprintf(layer, sizeof layer, "layer %d", e->layer);
        else
            snprintf(layer, sizeof layer, "no layer");
        return gguf_fail(err, GGUF_E_MISMATCH, GGUF_NO_OFFSET,
                         "%s: first divergence at %s (%s, op %s, rank %u): %s; %lld of %lld "
                         "comparisons over tolerance", gguf_record_path(b), e->point, layer,
                         e->op, e->rank, what, (long long)res->n_over,
                         (long long)res->n_entries);
    }
    return GGUF_OK;
fail:
    gguf_cmp_result_free(res);
    return rc;
}
