/*
 * Parsing one GGUF file. Every read goes through a cursor that knows how many
 * bytes remain, copies with memcpy (the map is never cast to wider types) and
 * reports the absolute offset of the field it failed on. Every size derived
 * from the file is overflow-checked and proven inside the file before use, so
 * allocations are bounded by the header's own size.
 */
#include "util/error_lib.h"
#include "format/file_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct cursor {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;
    const char *path;
    gguf_error *err;
} cursor;

static int need(cursor *c, uint64_t n, const char *field)
{
    if (c->size - c->pos < n)
        return gguf_fail(c->err, GGUF_E_TRUNCATED, c->pos,
                         "%s: %s: file ends at byte %llu, inside this field (needs %llu more "
                         "bytes; truncated download?)",
                         c->path, field, (unsigned long long)c->size,
                         (unsigned long long)(n - (c->size - c->pos)));
    return GGUF_OK;
}

static int read_bytes(cursor *c, void *dst, uint64_t n, const char *field)
{
    int rc = need(c, n, field);
    if (rc)
        return rc;
    memcpy(dst, c->base + c->pos, n);
    c->pos += n;
    return GGUF_OK;
}

static int read_u32(cursor *c, uint32_t *v, const char *field)
{
    return read_bytes(c, v, 4, field);
}

static int read_u64(cursor *c, uint64_t *v, const char *field)
{
    return read_bytes(c, v, 8, field);
}

/* Tracks allocations of one parse so a failure anywhere frees everything. */
static void *file_alloc(gguf_file *f, size_t n)
{
    if (f->n_allocs == f->cap_allocs) {
        size_t cap = f->cap_allocs ? f->cap_allocs * 2 : 64;
        void **a = realloc(f->allocs, cap * sizeof *a);
        if (!a)
            return NULL;
        f->allocs = a;
        f->cap_allocs = cap;
    }
    void *p = calloc(1, n ? n : 1);
    if (p)
        f->allocs[f->n_allocs++] = p;
    return p;
}

/* A GGUF string: u64 length then bytes. The view borrows from the map. */
static int read_str(cursor *c, gguf_str *s, const char *field)
{
    uint64_t len;
    uint64_t at = c->pos;
    int rc = read_u64(c, &len, field);
    if (rc)
        return rc;
    if (len > c->size - c->pos)
        return gguf_fail(c->err, GGUF_E_TRUNCATED, at,
                         "%s: %s: string length %llu runs past the end of the file "
                         "(%llu bytes left)",
                         c->path, field, (unsigned long long)len,
                         (unsigned long long)(c->size - c->pos));
    s->data = (const char *)c->base + c->pos;
    s->len = len;
    c->pos += len;
    return GGUF_OK;
}

/* A key or tensor name: bounded, valid UTF-8, copied NUL-terminated. */
static int read_name(gguf_file *f, cursor *c, const char **out, uint64_t *out_len,
                     const char *field)
{
    uint64_t at = c->pos;
    gguf_str s = {NULL, 0};
    int rc = read_str(c, &s, field);
    if (rc)
        return rc;
    if (s.len > GGUF_MAX_NAME_LEN)
        return gguf_fail(c->err, GGUF_E_LIMIT, at, "%s: %s: length %llu is over the limit %u",
                         c->path, field, (unsigned long long)s.len, GGUF_MAX_NAME_LEN);
    if (!gguf_utf8_valid(s.data, s.len))
        return gguf_fail(c->err, GGUF_E_BAD_UTF8, at + 8,
                         "%s: %s: not valid UTF-8 (or contains a NUL byte)", c->path, field);
    char *copy = file_alloc(f, s.len + 1);
    if (!copy)
        return gguf_fail(c->err, GGUF_E_NOMEM, at, "%s: %s: out of memory", c->path, field);
    memcpy(copy, s.data, s.len);
    *out = copy;
    if (out_len)
        *out_len = s.len;
    return GGUF_OK;
}

/* Smallest encoding of one item of a value type, to bound counts by bytes left. */
static uint64_t min_item_bytes(uint32_t vtype)
{
    if (vtype == GGUF_VALUE_STRING)
        return 8;
    if (vtype == GGUF_VALUE_ARRAY)
        return 12;
    return gguf_value_type_size(vtype);
}

static int read_value(gguf_file *f, cursor *c, uint32_t vtype, gguf_value *v, int depth,
                      const char *field);

static int read_array(gguf_file *f, cursor *c, gguf_value *v, int depth, const char *field)
{
    uint64_t at = c->pos;
    uint32_t etype;
    uint64_t n;
    int rc = read_u32(c, &etype, field);
    if (!rc)
        rc = read_u64(c, &n, field);
    if (rc)
        return rc;
    if (etype >= GGUF_VALUE_COUNT)
        return gguf_fail(c->err, GGUF_E_BAD_TYPE, at,
                         "%s: %s: unknown array element type %u", c->path, field, etype);
    if (etype == GGUF_VALUE_ARRAY && depth + 1 >= GGUF_MAX_NESTING)
        return gguf_fail(c->err, GGUF_E_LIMIT, at,
                         "%s: %s: arrays nested deeper than %d", c->path, field,
                         GGUF_MAX_NESTING);
    uint64_t per = min_item_bytes(etype);
    if (n > (c->size - c->pos) / per)
        return gguf_fail(c->err, GGUF_E_TRUNCATED, at + 4,
                         "%s: %s: array of %llu %s items cannot fit in the %llu bytes left",
                         c->path, field, (unsigned long long)n, gguf_value_type_name(etype),
                         (unsigned long long)(c->size - c->pos));
    v->type = GGUF_VALUE_ARRAY;
    v->v.arr.type = etype;
    v->v.arr.n = n;
    v->v.arr.raw = NULL;
    v->v.arr.strs = NULL;
    v->v.arr.vals = NULL;
    if (etype == GGUF_VALUE_STRING) {
        gguf_str *strs = file_alloc(f, n * sizeof *strs);
        if (!strs)
            return gguf_fail(c->err, GGUF_E_NOMEM, at, "%s: %s: out of memory", c->path, field);
        for (uint64_t i = 0; i < n; i++) {
            rc = read_str(c, &strs[i], field);
            if (rc)
                return rc;
        }
        v->v.arr.strs = strs;
    } else if (etype == GGUF_VALUE_ARRAY) {
        gguf_value *vals = file_alloc(f, n * sizeof *vals);
        if (!vals)
            return gguf_fail(c->err, GGUF_E_NOMEM, at, "%s: %s: out of memory", c->path, field);
        for (uint64_t i = 0; i < n; i++) {
            rc = read_array(f, c, &vals[i], depth + 1, field);
            if (rc)
                return rc;
        }
        v->v.arr.vals = vals;
    } else {
        uint64_t bytes = n * per; /* cannot overflow: bounded by bytes left above */
        if (etype == GGUF_VALUE_BOOL) {
            for (uint64_t i = 0; i < n; i++)
                if (c->base[c->pos + i] > 1)
                    return gguf_fail(c->err, GGUF_E_BAD_VALUE, c->pos + i,
                                     "%s: %s: bool item %llu is %u, not 0 or 1", c->path,
                                     field, (unsigned long long)i, c->base[c->pos + i]);
        }
        v->v.arr.raw = c->base + c->pos;
        c->pos += bytes;
    }
    return GGUF_OK;
}

static int read_value(gguf_file *f, cursor *c, uint32_t vtype, gguf_value *v, int depth,
                      const char *field)
{
    memset(v, 0, sizeof *v);
    v->type = vtype;
    switch (vtype) {
    case GGUF_VALUE_STRING:
        return read_str(c, &v->v.str, field);
    case GGUF_VALUE_ARRAY:
        return read_array(f, c, v, depth, field);
    case GGUF_VALUE_BOOL: {
        uint64_t at = c->pos;
        int rc = read_bytes(c, &v->v.u8, 1, field);
        if (!rc && v->v.u8 > 1)
            return gguf_fail(c->err, GGUF_E_BAD_VALUE, at, "%s: %s: bool is %u, not 0 or 1",
                             c->path, field, v->v.u8);
        v->v.b = v->v.u8 != 0;
        return rc;
    }
    default:
        if (vtype >= GGUF_VALUE_COUNT)
            return gguf_fail(c->err, GGUF_E_BAD_TYPE, c->pos - 4,
                             "%s: %s: unknown value type %u", c->path, field, vtype);
        return read_bytes(c, &v->v, gguf_value_type_size(vtype), field);
    }
}

/* Say what a non-GGUF file is, since people feed tools whatever they downloaded. */
static int classify_not_gguf(const uint8_t *p, uint64_t n, const char *path, gguf_error *err)
{
    if (n == 0)
        return gguf_fail(err, GGUF_E_NOT_GGUF, 0, "%s: the file is empty (0 bytes)", path);
    static const char lfs[] = "version https://git-lfs";
    if (n >= sizeof lfs - 1 && memcmp(p, lfs, sizeof lfs - 1) == 0)
        return gguf_fail(err, GGUF_E_NOT_GGUF, 0,
                         "%s: this is a Git LFS pointer file (%llu bytes), not the model; "
                         "fetch the real file (git lfs pull)",
                         path, (unsigned long long)n);
    uint64_t i = 0;
    while (i < n && i < 512 && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r' || p[i] == '\n' ||
                                p[i] == 0xEF || p[i] == 0xBB || p[i] == 0xBF))
        i++;
    if (n - i >= 5 && p[i] == '<') {
        char head[16] = {0};
        uint64_t k = n - i < 15 ? n - i : 15;
        memcpy(head, p + i, k);
        if (strncasecmp(head, "<!doctype", 9) == 0 || strncasecmp(head, "<html", 5) == 0 ||
            strncasecmp(head, "<?xml", 5) == 0 || strncasecmp(head, "<head", 5) == 0)
            return gguf_fail(err, GGUF_E_NOT_GGUF, 0,
                             "%s: this is an HTML/XML page (%llu bytes), not a model; the "
                             "download probably failed or needs a login",
                             path, (unsigned long long)n);
    }
    if (n >= 10) {
        uint64_t hlen;
        memcpy(&hlen, p, 8);
        if (hlen > 1 && hlen <= n - 8 && p[8] == '{')
            return gguf_fail(err, GGUF_E_NOT_GGUF, 0,
                             "%s: this is a safetensors file, not GGUF", path);
    }
    if (n < 4 && memcmp(p, "GGUF", n) == 0)
        return gguf_fail(err, GGUF_E_TRUNCATED, 0,
                         "%s: magic: file ends after %llu bytes", path, (unsigned long long)n);
    return gguf_fail(err, GGUF_E_BAD_MAGIC, 0,
                     "%s: magic: expected \"GGUF\", found bytes %02x %02x %02x %02x", path,
                     n > 0 ? p[0] : 0, n > 1 ? p[1] : 0, n > 2 ? p[2] : 0, n > 3 ? p[3] : 0);
}

static int parse_header(gguf_file *f, cursor *c)
{
    if (c->size < 4 || memcmp(c->base, "GGUF", 4) != 0)
        return classify_not_gguf(c->base, c->size, c->path, c->err);
    c->pos = 4;
    uint32_t version;
    int rc = read_u32(c, &version, "version");
    if (rc)
        return rc;
    /* A big-endian file stores 3 as 00 00 00 03: read little-endian, 0x03000000. */
    if ((version & 0xFFFF) == 0 && version != 0)
        return gguf_fail(c->err, GGUF_E_BAD_VERSION, 4,
                         "%s: version: big-endian GGUF (version bytes %08x) is not supported",
                         c->path, version);
    if (version == 1)
        return gguf_fail(c->err, GGUF_E_BAD_VERSION, 4,
                         "%s: version: GGUF version 1 (2023, 32-bit counts) is not supported; "
                         "convert the model again",
                         c->path);
    if (version != 2 && version != 3)
        return gguf_fail(c->err, GGUF_E_BAD_VERSION, 4,
                         "%s: version: unknown GGUF version %u (supported: 2, 3)", c->path,
                         version);
    f->version = version;

    uint64_t n_tensors, n_kv;
    uint64_t at_nt = c->pos;
    rc = read_u64(c, &n_tensors, "n_tensors");
    if (rc)
        return rc;
    uint64_t at_nkv = c->pos;
    rc = read_u64(c, &n_kv, "n_kv");
    if (rc)
        return rc;
    /* Each kv needs >= 13 bytes and each tensor info >= 24; bound counts by bytes left. */
    if (n_kv > (c->size - c->pos) / 13)
        return gguf_fail(c->err, GGUF_E_TRUNCATED, at_nkv,
                         "%s: n_kv: %llu key/value pairs cannot fit in the %llu bytes left",
                         c->path, (unsigned long long)n_kv,
                         (unsigned long long)(c->size - c->pos));
    if (n_tensors > (c->size - c->pos) / 24 || n_tensors > UINT32_MAX - 1)
        return gguf_fail(c->err, GGUF_E_TRUNCATED, at_nt,
                         "%s: n_tensors: %llu tensor infos cannot fit in the %llu bytes left",
                         c->path, (unsigned long long)n_tensors,
                         (unsigned long long)(c->size - c->pos));

    f->n_kv = (int64_t)n_kv;
    f->kvs = file_alloc(f, n_kv * sizeof *f->kvs);
    if (!f->kvs)
        return gguf_fail(c->err, GGUF_E_NOMEM, at_nkv, "%s: out of memory", c->path);
    f->alignment = GGUF_DEFAULT_ALIGNMENT;

    char field[96];
    for (uint64_t i = 0; i < n_kv; i++) {
        gguf_kv *kv = &f->kvs[i];
        kv->offset = c->pos;
        snprintf(field, sizeof field, "metadata[%llu].key", (unsigned long long)i);
        rc = read_name(f, c, &kv->key, &kv->key_len, field);
        if (rc)
            return rc;
        for (uint64_t j = 0; j < i; j++)
            if (strcmp(f->kvs[j].key, kv->key) == 0)
                return gguf_fail(c->err, GGUF_E_DUPLICATE, kv->offset,
                                 "%s: metadata[%llu]: duplicate key '%s' (first at "
                                 "metadata[%llu])",
                                 c->path, (unsigned long long)i, kv->key,
                                 (unsigned long long)j);
        uint32_t vtype;
        snprintf(field, sizeof field, "metadata '%s'", kv->key);
        rc = read_u32(c, &vtype, field);
        if (rc)
            return rc;
        rc = read_value(f, c, vtype, &kv->value, 0, field);
        if (rc)
            return rc;
        if (strcmp(kv->key, GGUF_KEY_ALIGNMENT) == 0) {
            if (vtype != GGUF_VALUE_UINT32)
                return gguf_fail(c->err, GGUF_E_BAD_ALIGNMENT, kv->offset,
                                 "%s: general.alignment: has type %s, must be uint32", c->path,
                                 gguf_value_type_name(vtype));
            uint32_t a = kv->value.v.u32;
            if (a == 0 || (a & (a - 1)) != 0 || a > GGUF_MAX_ALIGNMENT)
                return gguf_fail(c->err, GGUF_E_BAD_ALIGNMENT, kv->offset,
                                 "%s: general.alignment: %u is %s", c->path, a,
                                 a == 0 ? "zero"
                                 : (a & (a - 1)) ? "not a power of two"
                                                 : "larger than 1 MiB");
            f->alignment = a;
        }
    }

    /* The name index is built before tensor infos need it; only O(1) memory per entry. */
    f->n_tensors = (int64_t)n_tensors;
    f->tensors = file_alloc(f, n_tensors * sizeof *f->tensors);
    if (!f->tensors)
        return gguf_fail(c->err, GGUF_E_NOMEM, at_nt, "%s: out of memory", c->path);
    for (uint64_t i = 0; i < n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        t->info_offset = c->pos;
        t->index = (uint32_t)i;
        snprintf(field, sizeof field, "tensor_infos[%llu].name", (unsigned long long)i);
        rc = read_name(f, c, &t->name, NULL, field);
        if (rc)
            return rc;
        snprintf(field, sizeof field, "tensor '%.48s'.n_dims", t->name);
        uint64_t at = c->pos;
        rc = read_u32(c, &t->n_dims, field);
        if (rc)
            return rc;
        if (t->n_dims > GGUF_MAX_DIMS)
            return gguf_fail(c->err, GGUF_E_BAD_SHAPE, at,
                             "%s: tensor '%s': n_dims %u is over the maximum %d", c->path,
                             t->name, t->n_dims, GGUF_MAX_DIMS);
        int64_t n_el = 1;
        for (int d = 0; d < GGUF_MAX_DIMS; d++)
            t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            snprintf(field, sizeof field, "tensor '%.48s'.ne[%u]", t->name, d);
            at = c->pos;
            uint64_t ne;
            rc = read_u64(c, &ne, field);
            if (rc)
                return rc;
            if (ne > (uint64_t)INT64_MAX)
                return gguf_fail(c->err, GGUF_E_BAD_SHAPE, at,
                                 "%s: tensor '%s': ne[%u] = %lld is negative", c->path,
                                 t->name, d, (long long)(int64_t)ne);
            t->ne[d] = (int64_t)ne;
            if (!gguf_mul_i64(n_el, (int64_t)ne, &n_el))
                return gguf_fail(c->err, GGUF_E_OVERFLOW, at,
                                 "%s: tensor '%s': element count overflows at ne[%u] = %llu",
                                 c->path, t->name, d, (unsigned long long)ne);
        }
        t->n_elements = n_el;
        snprintf(field, sizeof field, "tensor '%.48s'.type", t->name);
        at = c->pos;
        rc = read_u32(c, &t->type, field);
        if (rc)
            return rc;
        const gguf_type_info *ti = gguf_type_get(t->type);
        if (!ti || !ti->valid)
            return gguf_fail(c->err, GGUF_E_BAD_TYPE, at,
                             "%s: tensor '%s': type id %u is %s%s", c->path, t->name, t->type,
                             ti ? "removed from ggml: " : "unknown",
                             ti ? ti->name : "");
        if (t->ne[0] % ti->block_size != 0)
            return gguf_fail(c->err, GGUF_E_BAD_SHAPE, at,
                             "%s: tensor '%s': ne[0] = %lld is not a multiple of the %s block "
                             "size %u",
                             c->path, t->name, (long long)t->ne[0], ti->name, ti->block_size);
        uint64_t row_bytes, nbytes;
        if (gguf_type_row_bytes(t->type, t->ne[0], &row_bytes) ||
            !gguf_mul_u64(row_bytes, (uint64_t)(t->ne[0] ? n_el / t->ne[0] : 0), &nbytes))
            return gguf_fail(c->err, GGUF_E_OVERFLOW, at,
                             "%s: tensor '%s': byte size overflows", c->path, t->name);
        t->nbytes = nbytes;
        snprintf(field, sizeof field, "tensor '%.48s'.offset", t->name);
        at = c->pos;
        rc = read_u64(c, &t->offset, field);
        if (rc)
            return rc;
        if (t->offset % f->alignment != 0)
            return gguf_fail(c->err, GGUF_E_BAD_OFFSET, at,
                             "%s: tensor '%s': data offset %llu is not a multiple of the "
                             "alignment %u",
                             c->path, t->name, (unsigned long long)t->offset, f->alignment);
    }
    f->header_size = c->pos;
    return GGUF_OK;
}

static int cmp_by_offset(const void *a, const void *b)
{
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int check_data(gguf_file *f, gguf_error *err)
{
    uint64_t data = f->header_size;
    uint64_t pad = (f->alignment - data % f->alignment) % f->alignment;
    if (!gguf_add_u64(data, pad, &data))
        return gguf_fail(err, GGUF_E_OVERFLOW, f->header_size, "%s: data offset overflows",
                         f->path);
    f->data_offset = data;
    if (f->n_tensors == 0)
        return GGUF_OK; /* vocabulary-only files may end right after the header */
    if (data > f->size)
        return gguf_fail(err, GGUF_E_TRUNCATED, f->header_size,
                         "%s: data section: starts at %llu but the file has only %llu bytes "
                         "(truncated download?)",
                         f->path, (unsigned long long)data, (unsigned long long)f->size);
    uint64_t avail = f->size - data;
    const gguf_tensor **order = malloc((size_t)f->n_tensors * sizeof *order);
    if (!order)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "%s: out of memory", f->path);
    int rc = GGUF_OK;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        uint64_t end;
        if (!gguf_add_u64(t->offset, t->nbytes, &end)) {
            rc = gguf_fail(err, GGUF_E_OVERFLOW, t->info_offset,
                           "%s: tensor '%s': offset + size overflows", f->path, t->name);
            goto done;
        }
        if (end > avail) {
            rc = gguf_fail(err, GGUF_E_TRUNCATED, t->info_offset,
                           "%s: tensor '%s': data [%llu, %llu) runs past the end of the file "
                           "(%llu bytes; truncated download?)",
                           f->path, t->name, (unsigned long long)(data + t->offset),
                           (unsigned long long)(data + end), (unsigned long long)f->size);
            goto done;
        }
        t->file_offset = data + t->offset;
        t->data = f->base + t->file_offset;
        order[i] = t;
    }
    qsort(order, (size_t)f->n_tensors, sizeof *order, cmp_by_offset);
    for (int64_t i = 1; i < f->n_tensors; i++) {
        const gguf_tensor *a = order[i - 1], *b = order[i];
        if (a->nbytes && b->nbytes && a->offset + a->nbytes > b->offset) {
            rc = gguf_fail(err, GGUF_E_BAD_OFFSET, b->info_offset,
                           "%s: tensor '%s': data at %llu overlaps tensor '%s' [%llu, %llu)",
                           f->path, b->name, (unsigned long long)(data + b->offset), a->name,
                           (unsigned long long)(data + a->offset),
                           (unsigned long long)(data + a->offset + a->nbytes));
            goto done;
        }
    }
done:
    free(order);
    return rc;
}

static int build_index(gguf_file *f, gguf_error *err)
{
    const gguf_tensor **items = malloc(((size_t)f->n_tensors + 1) * sizeof *items);
    if (!items)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "%s: out of memory", f->path);
    for (int64_t i = 0; i < f->n_tensors; i++)
        items[i] = &f->tensors[i];
    int64_t a = 0, b = 0;
    int rc = gguf_name_index_build(&f->index, items, f->n_tensors, &a, &b);
    free(items);
    if (rc == GGUF_E_DUPLICATE)
        return gguf_fail(err, rc, f->tensors[b].info_offset,
                         "%s: tensor_infos[%lld]: duplicate tensor name '%s' (first at "
                         "tensor_infos[%lld])",
                         f->path, (long long)b, f->tensors[b].name, (long long)a);
    if (rc)
        return gguf_fail(err, rc, GGUF_NO_OFFSET, "%s: out of memory", f->path);
    return GGUF_OK;
}

static int parse_all(gguf_file *f, gguf_error *err)
{
    cursor c = {f->base, f->size, 0, f->path, err};
    int rc = parse_header(f, &c);
    if (!rc)
        rc = build_index(f, err);
    if (!rc)
        rc = check_data(f, err);
    return rc;
}

static gguf_file *file_new(const char *path)
{
    gguf_file *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->fd = -1;
    f->path = strdup(path ? path : "<memory>");
    if (!f->path) {
        free(f);
        return NULL;
    }
    return f;
}

int gguf_file_open_memory(gguf_file **out, const void *data, size_t size, const char *name,
                          const gguf_open_opts *opts, gguf_error *err)
{
    if (opts && opts->version > GGUF_OPEN_OPTS_VERSION) {
        if (out)
            *out = NULL;
        return gguf_opts_version_fail(opts->version, GGUF_OPEN_OPTS_VERSION, "gguf_open_opts", err);
    }
    (void)opts;
    gguf_error_clear(err);
    if (!out || (!data && size))
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_file_open_memory: bad args");
    *out = NULL;
    gguf_file *f = file_new(name);
    if (!f)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    static const uint8_t empty[1];
    f->base = data ? data : empty;
    f->size = size;
    int rc = parse_all(f, err);
    if (rc) {
        gguf_file_free(f);
        return rc;
    }
    *out = f;
    return GGUF_OK;
}

int gguf_file_open(gguf_file **out, const char *path, const gguf_open_opts *opts,
                   gguf_error *err)
{
    if (opts && opts->version > GGUF_OPEN_OPTS_VERSION) {
        if (out)
            *out = NULL;
        return gguf_opts_version_fail(opts->version, GGUF_OPEN_OPTS_VERSION, "gguf_open_opts", err);
    }
    (void)opts;
    gguf_error_clear(err);
    if (!out || !path)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_file_open: bad args");
    *out = NULL;
    gguf_file *f = file_new(path);
    if (!f)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    int rc;
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) {
        rc = gguf_fail_errno(err, errno == ENOENT ? GGUF_E_NOT_FOUND : GGUF_E_IO, errno,
                             "%s: cannot open", path);
        goto fail;
    }
    struct stat st;
    if (fstat(f->fd, &st) != 0) {
        rc = gguf_fail_errno(err, GGUF_E_IO, errno, "%s: cannot stat", path);
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = gguf_fail(err, GGUF_E_NOT_GGUF, GGUF_NO_OFFSET, "%s: not a regular file (%s)",
                       path, S_ISDIR(st.st_mode) ? "a directory" : "a device, pipe or socket");
        goto fail;
    }
    f->size = (uint64_t)st.st_size;
    if (f->size > 0) {
        void *m = mmap(NULL, (size_t)f->size, PROT_READ, MAP_SHARED, f->fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            if (e == ENOMEM)
                rc = gguf_fail_errno(err, GGUF_E_NOMEM, e,
                                     "%s: cannot mmap %llu bytes: out of memory or address space "
                                     "(ulimit -v?)",
                                     path, (unsigned long long)f->size);
            else
                rc = gguf_fail_errno(err, GGUF_E_IO, e, "%s: cannot mmap %llu bytes", path,
                                     (unsigned long long)f->size);
            goto fail;
        }
        f->base = m;
        f->mapped = true;
    } else {
        static const uint8_t empty[1];
        f->base = empty;
    }
    rc = parse_all(f, err);
    if (rc)
        goto fail;
    *out = f;
    return GGUF_OK;
fail:
    gguf_file_free(f);
    return rc;
}

void gguf_file_free(gguf_file *f)
{
    if (!f)
        return;
    if (f->mapped)
        munmap((void *)f->base, (size_t)f->size);
    if (f->fd >= 0)
        close(f->fd);
    for (size_t i = 0; i < f->n_allocs; i++)
        free(f->allocs[i]);
    free(f->allocs);
    gguf_name_index_free(&f->index);
    free(f->path);
    free(f);
}

const char *gguf_file_path(const gguf_file *f) { return f->path; }
uint32_t gguf_file_version(const gguf_file *f) { return f->version; }
uint32_t gguf_file_alignment(const gguf_file *f) { return f->alignment; }
uint64_t gguf_file_data_offset(const gguf_file *f) { return f->data_offset; }
uint64_t gguf_file_size(const gguf_file *f) { return f->size; }
uint64_t gguf_file_header_size(const gguf_file *f) { return f->header_size; }
const uint8_t *gguf_file_bytes(const gguf_file *f) { return f->base; }
int gguf_file_fd(const gguf_file *f) { return f->fd; }
int64_t gguf_file_kv_count(const gguf_file *f) { return f->n_kv; }
int64_t gguf_file_tensor_count(const gguf_file *f) { return f->n_tensors; }

const gguf_kv *gguf_file_kv_at(const gguf_file *f, int64_t i)
{
    return (i >= 0 && i < f->n_kv) ? &f->kvs[i] : NULL;
}

const gguf_kv *gguf_file_kv_find(const gguf_file *f, const char *key)
{
    if (!key)
        return NULL;
    for (int64_t i = 0; i < f->n_kv; i++)
        if (strcmp(f->kvs[i].key, key) == 0)
            return &f->kvs[i];
    return NULL;
}

const gguf_tensor *gguf_file_tensor_at(const gguf_file *f, int64_t i)
{
    return (i >= 0 && i < f->n_tensors) ? &f->tensors[i] : NULL;
}

const gguf_tensor *gguf_file_tensor_find(const gguf_file *f, const char *name)
{
    /* The index stores positions; tensors[] is contiguous so a tiny shim suffices. */
    if (!f->index.slots || !name)
        return NULL;
    uint64_t h = gguf_name_hash(name) & f->index.mask;
    while (f->index.slots[h]) {
        const gguf_tensor *t = &f->tensors[f->index.slots[h] - 1];
        if (strcmp(t->name, name) == 0)
            return t;
        h = (h + 1) & f->index.mask;
    }
    return NULL;
}
