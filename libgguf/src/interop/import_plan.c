/*
 * Import plans (gguf/import.h): a map matched against a dump folder, the
 * arrays opened and checked (shapes, layout, tokens, duplicates), then
 * converted capture by capture into a record.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/error_lib.h"
#include "gguf/npy.h"
#include "gguf/safetensors.h"
#include "interop/import_internal.h"


/* One opened file of the dump. */
typedef struct imp_file {
    char *path;
    gguf_npy *npy;        /* a .npy ... */
    gguf_st_file *st;     /* ... or a .safetensors */
    dev_t dev;
    ino_t ino;
} imp_file;

/* A capture to write, with where its numbers are. */
typedef struct imp_item {
    gguf_import_item pub;
    char point[GGUF_RECORD_MAX_NAME + 1];
    int64_t file;
    const gguf_st_tensor *t;   /* NULL for .npy */
    gguf_import_layout layout;
    int n_dims;
    int64_t shape[GGUF_IMPORT_MAX_AXES];
    int64_t group, op, seq;    /* forward order */
} imp_item;

struct gguf_import_plan {
    char *dir;
    imp_file *files;
    int64_t n_files, cap_files;
    imp_item *items;
    int64_t n_items, cap_items;
    int64_t n_tokens;
    int32_t *tokens;
    int64_t n_ids;
    const char *precision;
    bool v2_bf16;
};

/* ---------------------------------------------------------------- files */

static bool ends_with(const char *s, const char *suffix)
{
    const size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* Open (once) the file at path; *idx is its index in the plan. */
static int plan_file(gguf_import_plan *p, const char *path, int64_t *idx, gguf_error *err)
{
    for (int64_t i = 0; i < p->n_files; i++)
        if (!strcmp(p->files[i].path, path)) {
            *idx = i;
            return 0;
        }
    if (p->n_files == p->cap_files) {
        const int64_t cap = p->cap_files ? p->cap_files * 2 : 16;
        imp_file *f = realloc(p->files, (size_t)cap * sizeof *f);
        if (!f)
            return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
        p->files = f;
        p->cap_files = cap;
    }
    imp_file *f = &p->files[p->n_files];
    memset(f, 0, sizeof *f);
    int rc;
    if (ends_with(path, ".npy")) {
        const gguf_npy_opts o = {.v2_as_bf16 = p->v2_bf16};
        rc = gguf_npy_open(&f->npy, path, &o, err);
    } else if (ends_with(path, ".safetensors")) {
        rc = gguf_st_file_open(&f->st, path, err);
    } else {
        return gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET,
                         "%s: neither .npy nor .safetensors", path);
    }
    if (rc)
        return rc;
    if (!(f->path = strdup(path))) {
        gguf_npy_free(f->npy);
        gguf_st_file_free(f->st);
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    }
    struct stat sb;
    if (stat(path, &sb) == 0) {
        f->dev = sb.st_dev;
        f->ino = sb.st_ino;
    }
    *idx = p->n_files++;
    return 0;
}

/* ---------------------------------------------------------------- items */

static const char *const op_order[] = {"attn_norm", "attn_out", "attn_residual", "ffn_norm",
                                       "moe_experts", "moe_weights", "ffn_out", "residual"};

static void item_order(imp_item *it)
{
    char point[GGUF_RECORD_MAX_NAME + 1];
    uint32_t rank;
    int32_t layer = -1;
    const char *op = it->point;
    gguf_capture_parse_name(it->point, point, sizeof point, &rank, &layer, &op);
    if (layer >= 0) {
        it->group = layer;
        it->op = (int64_t)(sizeof op_order / sizeof op_order[0]);
        for (size_t k = 0; k < sizeof op_order / sizeof op_order[0]; k++)
            if (!strcmp(op, op_order[k]))
                it->op = (int64_t)k;
    } else {
        /* token_embd comes before the blocks, everything else after them */
        it->group = !strcmp(it->point, "token_embd") ? -1 : INT32_MAX;
        it->op = !strcmp(it->point, "output_norm") ? 0 : !strcmp(it->point, "logits") ? 1 : 2;
    }
}

static int cmp_item(const void *a, const void *b)
{
    const imp_item *x = a, *y = b;
    if (x->group != y->group)
        return x->group < y->group ? -1 : 1;
    if (x->op != y->op)
        return x->op < y->op ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static const char *dtype_of(const gguf_import_plan *p, const imp_item *it)
{
    if (it->t)
        return gguf_st_dtype_name(it->t->dtype);
    return gguf_npy_dtype_name(gguf_npy_get_info(p->files[it->file].npy)->dtype);
}

/* Looseness of a dtype's precision: 0 f64, 1 f32 (and ints), 2 f16, 3 bf16. */
static int looseness(const char *dt)
{
    if (!strcmp(dt, "f64") || !strcmp(dt, "F64"))
        return 0;
    if (!strcmp(dt, "f16") || !strcmp(dt, "F16"))
        return 2;
    if (!strcmp(dt, "bf16") || !strcmp(dt, "BF16"))
        return 3;
    return 1;
}

static int layout_pos(const gguf_import_layout *l, gguf_import_axis a)
{
    for (int i = 0; i < l->n_axes; i++)
        if (l->axis[i] == a)
            return i;
    return -1;
}

/* "TENSOR in FILE" or "FILE" for messages. */
static void where(char *buf, size_t n, const char *file, const gguf_st_tensor *t)
{
    if (t)
        snprintf(buf, n, "%s: tensor '%s'", file, t->name);
    else
        snprintf(buf, n, "%s", file);
}

static void shape_str(char *buf, size_t n, const int64_t *shape, int nd)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < nd && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < n)
        snprintf(buf + k, n - k, "]");
}

/* One array of an entry (vals: the variables bound by FILE and TENSOR). */
static int add_array(gguf_import_plan *p, const gguf_import_map *map, const imp_entry *e,
                     const gguf_import_layout *layout, int64_t fidx, const gguf_st_tensor *t,
                     const int64_t *vals, int nvals, gguf_error *err)
{
    const imp_file *f = &p->files[fidx];
    int nd;
    const int64_t *shape;
    if (t) {
        nd = t->n_dims;
        shape = t->shape;
        if (t->dtype == GGUF_ST_F8_E4M3 || t->dtype == GGUF_ST_F8_E5M2 ||
            t->dtype == GGUF_ST_F8_E8M0)
            return gguf_fail(err, GGUF_E_BAD_TYPE, t->file_offset,
                             "%s: line %d: %s: tensor '%s': dtype %s is a scaled format, not "
                             "activations", map->name, e->line, f->path, t->name,
                             gguf_st_dtype_name(t->dtype));
    } else {
        const gguf_npy_info *in = gguf_npy_get_info(f->npy);
        nd = in->n_dims;
        shape = in->shape;
    }
    char wh[600], ss[160], ls[64];
    where(wh, sizeof wh, f->path, t);
    shape_str(ss, sizeof ss, shape, nd);
    gguf_import_layout_str(layout, ls, sizeof ls);
    if (nd != layout->n_axes)
        return gguf_fail(err, GGUF_E_BAD_SHAPE, t ? t->file_offset : GGUF_NO_OFFSET,
                         "%s: line %d: %s: shape %s has %d dimensions, layout %s has %d",
                         map->name, e->line, wh, ss, nd, ls, layout->n_axes);
    const int pb = layout_pos(layout, GGUF_IMPORT_AXIS_BATCH);
    if (pb >= 0 && shape[pb] != 1)
        return gguf_fail(err, GGUF_E_BAD_SHAPE, GGUF_NO_OFFSET,
                         "%s: line %d: %s: shape %s: the batch axis (layout %s) holds %lld, not 1",
                         map->name, e->line, wh, ss, ls, (long long)shape[pb]);
    const int pl = layout_pos(layout, GGUF_IMPORT_AXIS_LAYER);
    if ((pl >= 0) != e->src.has_index)
        return gguf_fail(err, GGUF_E_BAD_VALUE, GGUF_NO_OFFSET,
                         "%s: line %d: %s: layout %s %s", map->name, e->line, e->src.text, ls,
                         pl >= 0 ? "has a layer axis: give an index"
                                 : "has no layer axis for the index");
    int64_t a = 0, b = 0;
    if (pl >= 0) {
        const int64_t nl = shape[pl];
        a = e->src.idx_a < 0 ? nl + e->src.idx_a : e->src.idx_a;
        b = e->src.idx_b < 0 ? nl + e->src.idx_b : e->src.idx_b;
        if (a < 0 || a >= nl || b < 0 || b >= nl) {
            char ix[64];
            if (e->src.index_range)
                snprintf(ix, sizeof ix, "%lld..%lld", (long long)e->src.idx_a,
                         (long long)e->src.idx_b);
            else
                snprintf(ix, sizeof ix, "%lld", (long long)e->src.idx_a);
            return gguf_fail(err, GGUF_E_BAD_SHAPE, GGUF_NO_OFFSET,
                             "%s: line %d: %s: index [%s] outside the %lld positions of the "
                             "layer axis (shape %s, layout %s)", map->name, e->line, wh, ix,
                             (long long)nl, ss, ls);
        }
        if (!e->src.index_range)
            b = a;
        if (a > b)
            return gguf_fail(err, GGUF_E_BAD_SHAPE, GGUF_NO_OFFSET,
                             "%s: line %d: %s: range %lld..%lld selects nothing of %lld layers",
                             map->name, e->line, wh, (long long)e->src.idx_a,
                             (long long)e->src.idx_b, (long long)nl);
    }
    const int ps = layout_pos(layout, GGUF_IMPORT_AXIS_SEQ);
    const int ph = layout_pos(layout, GGUF_IMPORT_AXIS_HIDDEN);
    for (int64_t k = a; k <= b; k++) {
        if (p->n_items == (int64_t)GGUF_IMPORT_MAX_ITEMS)
            return gguf_fail(err, GGUF_E_LIMIT, GGUF_NO_OFFSET, "%s: over %u captures",
                             map->name, GGUF_IMPORT_MAX_ITEMS);
        if (p->n_items == p->cap_items) {
            const int64_t cap = p->cap_items ? p->cap_items * 2 : 64;
            imp_item *ni = realloc(p->items, (size_t)cap * sizeof *ni);
            if (!ni)
                return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
            p->items = ni;
            p->cap_items = cap;
        }
        imp_item *it = &p->items[p->n_items];
        memset(it, 0, sizeof *it);
        int64_t v[GGUF_IMPORT_MAX_VARS + 1];
        memcpy(v, vals, (size_t)nvals * sizeof *v);
        v[nvals] = k;
        char bad[200];
        int rc = imp_expand_point(e, v, it->point, sizeof it->point, bad, sizeof bad);
        if (rc)
            return gguf_fail(err, rc, GGUF_NO_OFFSET, "%s: line %d: point '%s' for %s: %s",
                             map->name, e->line, e->target, wh, bad);
        char pt[GGUF_RECORD_MAX_NAME + 1];
        uint32_t rank;
        int32_t layer;
        const char *op;
        if (gguf_capture_parse_name(it->point, pt, sizeof pt, &rank, &layer, &op) ||
            strcmp(pt, it->point) || (!strncmp(pt, "blk.", 4) && layer < 0))
            return gguf_fail(err, GGUF_E_BAD_VALUE, GGUF_NO_OFFSET,
                             "%s: line %d: '%s' (for %s) is not a capture point name",
                             map->name, e->line, it->point, wh);
        for (int64_t j = 0; j < p->n_items; j++)
            if (!strcmp(p->items[j].point, it->point))
                return gguf_fail(err, GGUF_E_DUPLICATE, GGUF_NO_OFFSET,
                                 "%s: line %d and line %d both give %s (%s%s%s and %s)",
                                 map->name, p->items[j].pub.line, e->line, it->point,
                                 p->files[p->items[j].file].path,
                                 p->items[j].t ? ":" : "",
                                 p->items[j].t ? p->items[j].t->name : "", wh);
        it->file = fidx;
        it->t = t;
        it->layout = *layout;
        it->n_dims = nd;
        memcpy(it->shape, shape, (size_t)nd * sizeof *shape);
        it->seq = p->n_items;
        it->pub.index = pl >= 0 ? k : -1;
        it->pub.line = e->line;
        it->pub.n_tokens = shape[ps];
        it->pub.width = shape[ph];
        item_order(it);
        p->n_items++;
    }
    return 0;
}

/* Every (file, tensor) an entry names, each through add_array (or, for
 * tokens, collected into *one). */
static int match_source(gguf_import_plan *p, const gguf_import_map *map, const imp_source *src,
                        int line, const imp_entry *e, const gguf_import_layout *layout,
                        int64_t *n_found, int64_t *one_file, const gguf_st_tensor **one_t,
                        gguf_error *err)
{
    fwalk w = {src->file, NULL, 0, 0, err};
    int64_t vals[GGUF_IMPORT_MAX_VARS] = {0};
    int rc = imp_walk_dir(&w, p->dir, src->file, vals, 0);
    imp_matcher *tm = NULL;
    if (!rc && src->tensor)
        rc = imp_matcher_new(&tm, src->tensor, false, err);
    for (int64_t i = 0; i < w.n && !rc; i++) {
        int64_t fidx = -1;
        if (src->tensor && !ends_with(w.m[i].path, ".safetensors")) {
            rc = gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET,
                           "%s: line %d: %s: a tensor name needs a .safetensors file", map->name,
                           line, w.m[i].path);
            break;
        }
        if ((rc = plan_file(p, w.m[i].path, &fidx, err)))
            break;
        const imp_file *f = &p->files[fidx];
        if (f->npy) {
            (*n_found)++;
            if (e)
                rc = add_array(p, map, e, layout, fidx, NULL, w.m[i].vals, w.m[i].nvals, err);
            else
                *one_file = fidx;
            continue;
        }
        const int64_t nt = gguf_st_file_tensor_count(f->st);
        if (!src->tensor) {
            if (nt != 1) {
                rc = gguf_fail(err, GGUF_E_BAD_VALUE, GGUF_NO_OFFSET,
                               "%s: line %d: %s holds %lld tensors: name one (FILE:TENSOR)",
                               map->name, line, f->path, (long long)nt);
                break;
            }
        }
        for (int64_t j = 0; j < nt && !rc; j++) {
            const gguf_st_tensor *t = gguf_st_file_tensor_at(f->st, j);
            int64_t v[GGUF_IMPORT_MAX_VARS];
            memcpy(v, w.m[i].vals, sizeof v);
            int nv = w.m[i].nvals;
            if (tm) {
                const int hit = imp_matcher_match(tm, t->name, v + nv, GGUF_IMPORT_MAX_VARS - nv);
                if (hit < 0) {
                    rc = gguf_fail(err, hit, GGUF_NO_OFFSET, "%s: line %d: '%s': over the match "
                                   "limit on '%s'", map->name, line, src->tensor, t->name);
                    break;
                }
                if (!hit)
                    continue;
                nv += imp_matcher_nvars(tm);
            }
            (*n_found)++;
            if (e) {
                rc = add_array(p, map, e, layout, fidx, t, v, nv, err);
            } else {
                *one_file = fidx;
                *one_t = t;
            }
        }
    }
    imp_matcher_free(tm);
    imp_fwalk_free(&w);
    return rc;
}

/* ---------------------------------------------------------------- tokens */

static int read_tokens(gguf_import_plan *p, const gguf_import_map *map, gguf_error *err)
{
    int64_t found = 0, fidx = -1;
    const gguf_st_tensor *t = NULL;
    int rc = match_source(p, map, &map->tokens, map->tokens_line, NULL, NULL, &found, &fidx, &t,
                          err);
    if (rc)
        return rc;
    if (found != 1)
        return gguf_fail(err, found ? GGUF_E_DUPLICATE : GGUF_E_NOT_FOUND, GGUF_NO_OFFSET,
                         "%s: line %d: tokens '%s' matches %lld arrays in %s (one wanted)",
                         map->name, map->tokens_line, map->tokens.text, (long long)found, p->dir);
    const imp_file *f = &p->files[fidx];
    int nd;
    const int64_t *shape;
    int64_t n;
    if (t) {
        nd = t->n_dims;
        shape = t->shape;
        n = t->n_elements;
    } else {
        const gguf_npy_info *in = gguf_npy_get_info(f->npy);
        nd = in->n_dims;
        shape = in->shape;
        n = in->n_elements;
    }
    char wh[600];
    where(wh, sizeof wh, f->path, t);
    if (!(nd == 1 || (nd == 2 && shape[0] == 1)))
        return gguf_fail(err, GGUF_E_BAD_SHAPE, GGUF_NO_OFFSET,
                         "%s: line %d: tokens %s: not 1-D (or [1, n])", map->name,
                         map->tokens_line, wh);
    int64_t *ids = malloc((size_t)(n ? n : 1) * sizeof *ids);
    if (!ids || !(p->tokens = malloc((size_t)(n ? n : 1) * sizeof *p->tokens))) {
        free(ids);
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    }
    if (t) {
        const uint32_t sz = gguf_st_dtype_size(t->dtype);
        const bool sgn = t->dtype == GGUF_ST_I8 || t->dtype == GGUF_ST_I16 ||
                         t->dtype == GGUF_ST_I32 || t->dtype == GGUF_ST_I64;
        const bool uns = t->dtype == GGUF_ST_U8 || t->dtype == GGUF_ST_U16 ||
                         t->dtype == GGUF_ST_U32 || t->dtype == GGUF_ST_U64;
        if (!sgn && !uns) {
            free(ids);
            return gguf_fail(err, GGUF_E_BAD_TYPE, t->file_offset,
                             "%s: line %d: tokens %s: dtype %s is not an integer type",
                             map->name, map->tokens_line, wh, gguf_st_dtype_name(t->dtype));
        }
        for (int64_t i = 0; i < n; i++) {
            uint64_t u = 0;
            memcpy(&u, t->data + (uint64_t)i * sz, sz); /* little-endian host, as safetensors */
            if (sgn && sz < 8 && (u >> (sz * 8 - 1)) & 1)
                u |= ~0ull << (sz * 8); /* sign-extend */
            ids[i] = (int64_t)u;
        }
    } else if ((rc = gguf_npy_read_i64(f->npy, 0, n, ids, err))) {
        free(ids);
        return gguf_fail(err, rc, GGUF_NO_OFFSET, "%s: line %d: tokens %s: %s", map->name,
                         map->tokens_line, wh, err ? err->message : "");
    }
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] > INT32_MAX) {
            const long long v = (long long)ids[i];
            free(ids);
            return gguf_fail(err, GGUF_E_BAD_VALUE, GGUF_NO_OFFSET,
                             "%s: line %d: tokens %s: id %lld at %lld is not a token id",
                             map->name, map->tokens_line, wh, v, (long long)i);
        }
        p->tokens[i] = (int32_t)ids[i];
    }
    free(ids);
    p->n_ids = n;
    return 0;
}

/* ---------------------------------------------------------------- the plan */

void gguf_import_plan_free(gguf_import_plan *p)
{
    if (!p)
        return;
    for (int64_t i = 0; i < p->n_files; i++) {
        gguf_npy_free(p->files[i].npy);
        gguf_st_file_free(p->files[i].st);
        free(p->files[i].path);
    }
    free(p->files);
    free(p->items);
    free(p->tokens);
    free(p->dir);
    free(p);
}

int gguf_import_resolve(gguf_import_plan **out, const gguf_import_map *map, const char *dir,
                        const gguf_import_opts *opts, gguf_error *err)
{
    if (opts && opts->version > GGUF_IMPORT_OPTS_VERSION) {
        if (out)
            *out = NULL;
        return gguf_opts_version_fail(opts->version, GGUF_IMPORT_OPTS_VERSION, "gguf_import_opts", err);
    }
    gguf_error_clear(err);
    if (!out || !map || !dir)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_import_resolve: NULL");
    *out = NULL;
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET, "%s: no such folder", dir);
    gguf_import_plan *p = calloc(1, sizeof *p);
    if (!p || !(p->dir = strdup(dir))) {
        free(p);
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    }
    p->v2_bf16 = map->v2_bf16 || (opts && opts->v2_as_bf16);
    int rc = 0;
    for (int64_t i = 0; i < map->n_entries && !rc; i++) {
        const imp_entry *e = &map->entries[i];
        const gguf_import_layout *layout = opts && opts->layout ? opts->layout : &e->layout;
        int64_t found = 0, fi;
        const gguf_st_tensor *t;
        rc = match_source(p, map, &e->src, e->line, e, layout, &found, &fi, &t, err);
        if (!rc && !found && !e->optional)
            rc = gguf_fail(err, GGUF_E_NOT_FOUND, e->offset,
                           "%s: line %d: '%s' matches nothing in %s (write 'optional' before "
                           "an entry that may be absent)", map->name, e->line, e->src.text, dir);
    }
    if (!rc && p->n_items == 0)
        rc = gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET,
                       "%s: the map gives no capture from %s", map->name, dir);
    if (!rc && map->has_tokens)
        rc = read_tokens(p, map, err);
    if (rc) {
        gguf_import_plan_free(p);
        return rc;
    }
    /* one sequence length for every capture (and the tokens) */
    int worst = 0;
    const imp_item *first = &p->items[0];
    for (int64_t i = 0; i < p->n_items; i++) {
        imp_item *it = &p->items[i];
        if (it->pub.n_tokens != first->pub.n_tokens) {
            char a[600], b[600];
            where(a, sizeof a, p->files[first->file].path, first->t);
            where(b, sizeof b, p->files[it->file].path, it->t);
            rc = gguf_fail(err, GGUF_E_BAD_SHAPE, GGUF_NO_OFFSET,
                           "%s: %s has %lld tokens (%s, line %d), %s has %lld (%s, line %d)",
                           map->name, it->point, (long long)it->pub.n_tokens, b, it->pub.line,
                           first->point, (long long)first->pub.n_tokens, a, first->pub.line);
            break;
        }
        const int l = looseness(dtype_of(p, it));
        if (l > worst)
            worst = l;
    }
    p->n_tokens = first->pub.n_tokens;
    if (!rc && map->has_tokens && p->n_ids != p->n_tokens)
        rc = gguf_fail(err, GGUF_E_BAD_SHAPE, GGUF_NO_OFFSET,
                       "%s: line %d: tokens '%s' holds %lld ids, the captures %lld tokens",
                       map->name, map->tokens_line, map->tokens.text, (long long)p->n_ids,
                       (long long)p->n_tokens);
    if (rc) {
        gguf_import_plan_free(p);
        return rc;
    }
    static const char *const prec[] = {"f64", "f32", "f16", "bf16"};
    p->precision = prec[worst];
    qsort(p->items, (size_t)p->n_items, sizeof *p->items, cmp_item);
    for (int64_t i = 0; i < p->n_items; i++) {
        imp_item *it = &p->items[i];
        it->pub.point = it->point;
        it->pub.file = p->files[it->file].path;
        it->pub.tensor = it->t ? it->t->name : NULL;
        it->pub.dtype = dtype_of(p, it);
    }
    *out = p;
    return 0;
}

int64_t gguf_import_plan_count(const gguf_import_plan *p)
{
    return p ? p->n_items : 0;
}

const gguf_import_item *gguf_import_plan_item(const gguf_import_plan *p, int64_t i)
{
    return p && i >= 0 && i < p->n_items ? &p->items[i].pub : NULL;
}

int64_t gguf_import_plan_n_tokens(const gguf_import_plan *p)
{
    return p->n_tokens;
}

const int32_t *gguf_import_plan_tokens(const gguf_import_plan *p, int64_t *n)
{
    *n = p->tokens ? p->n_ids : 0;
    return p->tokens;
}

const char *gguf_import_plan_precision(const gguf_import_plan *p)
{
    return p->precision;
}

/* ---------------------------------------------------------------- writing */

/* Logical elements [i0, i0+n) of an item's array as floats. */
static int read_run(const gguf_import_plan *p, const imp_item *it, int64_t i0, int64_t n,
                    float *dst, gguf_error *err)
{
    if (it->t)
        return gguf_st_tensor_to_f32(it->t, i0, n, dst, err);
    return gguf_npy_read_f32(p->files[it->file].npy, i0, n, dst, err);
}

/* The item as [n_tokens][width] floats, whatever its layout. */
static int gather(const gguf_import_plan *p, const imp_item *it, float *dst, gguf_error *err)
{
    int64_t stride[GGUF_IMPORT_MAX_AXES];
    int64_t s = 1;
    for (int d = it->n_dims - 1; d >= 0; d--) {
        stride[d] = s;
        s *= it->shape[d];
    }
    const int ps = layout_pos(&it->layout, GGUF_IMPORT_AXIS_SEQ);
    const int ph = layout_pos(&it->layout, GGUF_IMPORT_AXIS_HIDDEN);
    const int pl = layout_pos(&it->layout, GGUF_IMPORT_AXIS_LAYER);
    const int64_t base = pl >= 0 ? it->pub.index * stride[pl] : 0;
    const int64_t T = it->pub.n_tokens, W = it->pub.width;
    for (int64_t t = 0; t < T; t++) {
        const int64_t row = base + t * stride[ps];
        if (stride[ph] == 1) {
            int rc = read_run(p, it, row, W, dst + t * W, err);
            if (rc)
                return rc;
            continue;
        }
        for (int64_t h = 0; h < W; h++) {
            int rc = read_run(p, it, row + h * stride[ph], 1, dst + t * W + h, err);
            if (rc)
                return rc;
        }
    }
    return 0;
}

int gguf_import_plan_write(const gguf_import_plan *p, const char *path,
                           const gguf_record_meta *meta, const gguf_record_opts *opts,
                           gguf_error *err)
{
    if (opts && opts->version > GGUF_RECORD_OPTS_VERSION)
        return gguf_opts_version_fail(opts->version, GGUF_RECORD_OPTS_VERSION, "gguf_record_opts",
                                      err);
    gguf_error_clear(err);
    if (!p || !path || !meta)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_import_plan_write: NULL");
    if (meta->n_tokens && (int64_t)meta->n_tokens != p->n_tokens)
        return gguf_fail(err, GGUF_E_BAD_VALUE, GGUF_NO_OFFSET,
                         "%s: %llu token ids given, the captures hold %lld tokens", path,
                         (unsigned long long)meta->n_tokens, (long long)p->n_tokens);
    struct stat sb;
    if (stat(path, &sb) == 0)
        for (int64_t i = 0; i < p->n_files; i++)
            if (p->files[i].dev == sb.st_dev && p->files[i].ino == sb.st_ino)
                return gguf_fail(err, GGUF_E_EXISTS, GGUF_NO_OFFSET,
                                 "%s: is one of the dump's files (inputs are never replaced)",
                                 path);
    gguf_record_meta m = *meta;
    m.tp = m.ep = m.ranks = 1;
    gguf_record_writer *w = NULL;
    int rc = gguf_record_writer_create(&w, path, &m, opts, err);
    float *buf = NULL;
    for (int64_t i = 0; i < p->n_items && !rc; i++) {
        const imp_item *it = &p->items[i];
        const int64_t ne[2] = {it->pub.width, it->pub.n_tokens};
        const size_t count = (size_t)(ne[0] * ne[1]);
        float *nb = realloc(buf, (count ? count : 1) * sizeof *buf);
        if (!nb) {
            rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "%s: out of memory", it->point);
            break;
        }
        buf = nb;
        if ((rc = gather(p, it, buf, err)))
            break;
        rc = gguf_record_add(w, it->point, 0, 2, ne, buf, err);
    }
    if (!rc)
        rc = gguf_record_writer_finish(w, err);
    free(buf);
    gguf_record_writer_free(w);
    return rc;
}
