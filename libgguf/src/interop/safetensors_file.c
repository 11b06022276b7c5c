/*
 * One safetensors file: map it read-only, parse the header with jansson, and
 * prove every entry against the file before anything reads tensor data.
 *
 *   0        8                        8+N                                EOF
 *   | N u64  | {"T": {"dtype","shape", | T's bytes | U's bytes | ...      |
 *   |        |  "data_offsets":[b,e]}} | [b, e)    |           | no holes |
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/error_lib.h"
#include "interop/safetensors_internal.h"
#include "util/small_file.h"

static const struct {
    const char *name;
    uint32_t size;
} dtypes[GGUF_ST_DTYPE_COUNT] = {
    [GGUF_ST_BOOL] = {"BOOL", 1},       [GGUF_ST_U8] = {"U8", 1},
    [GGUF_ST_I8] = {"I8", 1},           [GGUF_ST_I16] = {"I16", 2},
    [GGUF_ST_U16] = {"U16", 2},         [GGUF_ST_I32] = {"I32", 4},
    [GGUF_ST_U32] = {"U32", 4},         [GGUF_ST_I64] = {"I64", 8},
    [GGUF_ST_U64] = {"U64", 8},         [GGUF_ST_F16] = {"F16", 2},
    [GGUF_ST_BF16] = {"BF16", 2},       [GGUF_ST_F32] = {"F32", 4},
    [GGUF_ST_F64] = {"F64", 8},         [GGUF_ST_F8_E4M3] = {"F8_E4M3", 1},
    [GGUF_ST_F8_E5M2] = {"F8_E5M2", 1}, [GGUF_ST_F8_E8M0] = {"F8_E8M0", 1},
};

const char *gguf_st_dtype_name(gguf_st_dtype d)
{
    return (unsigned)d < GGUF_ST_DTYPE_COUNT ? dtypes[d].name : "unknown";
}

uint32_t gguf_st_dtype_size(gguf_st_dtype d)
{
    return (unsigned)d < GGUF_ST_DTYPE_COUNT ? dtypes[d].size : 0;
}

int gguf_st_dtype_from_name(const char *name)
{
    for (int i = 0; i < GGUF_ST_DTYPE_COUNT; i++)
        if (!strcmp(name, dtypes[i].name))
            return i;
    return -1;
}

int gguf_st_cmp_name(const void *a, const void *b)
{
    return strcmp((*(gguf_st_tensor *const *)a)->name, (*(gguf_st_tensor *const *)b)->name);
}

const gguf_st_tensor *gguf_st_bsearch(gguf_st_tensor *const *v, int64_t n, const char *name)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        const int c = strcmp(v[mid]->name, name);
        if (c == 0)
            return v[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* Offset of an entry's quoted name in the header, for messages (the first
 * occurrence; 8, the header start, when it is written with escapes). */
static uint64_t entry_offset(const gguf_st_file *f, const char *name)
{
    const size_t n = strlen(name);
    const char *h = (const char *)f->base + 8;
    const size_t len = (size_t)(f->data_offset - 8);
    for (const char *p = h; p && (size_t)(p - h) + n + 2 <= len;) {
        p = memchr(p, '"', len - (size_t)(p - h));
        if (!p || (size_t)(p - h) + n + 2 > len)
            break;
        if (!memcmp(p + 1, name, n) && p[n + 1] == '"')
            return 8 + (uint64_t)(p - h);
        p++;
    }
    return 8;
}

typedef struct entry {
    const char *key;
    int dtype;
    int n_dims;
    int64_t shape[GGUF_ST_MAX_DIMS];
    int64_t n_elements;
    uint64_t begin, end;
} entry;

static int parse_entry(gguf_st_file *f, const char *key, json_t *v, entry *e, gguf_error *err)
{
    const char *path = f->path;
    e->key = key;
    if (!json_is_object(v))
        return gguf_fail(err, GGUF_E_BAD_VALUE, entry_offset(f, key),
                         "%s: %s: the entry is not a JSON object", path, key);
    json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
           *off = json_object_get(v, "data_offsets");
    if (!json_is_string(dt))
        return gguf_fail(err, GGUF_E_BAD_VALUE, entry_offset(f, key),
                         "%s: %s: dtype: %s", path, key, dt ? "not a string" : "missing");
    e->dtype = gguf_st_dtype_from_name(json_string_value(dt));
    if (e->dtype < 0)
        return gguf_fail(err, GGUF_E_BAD_TYPE, entry_offset(f, key),
                         "%s: %s: dtype: unknown dtype \"%.32s\"", path, key,
                         json_string_value(dt));
    if (!json_is_array(sh))
        return gguf_fail(err, GGUF_E_BAD_VALUE, entry_offset(f, key), "%s: %s: shape: %s",
                         path, key, sh ? "not an array" : "missing");
    if (json_array_size(sh) > GGUF_ST_MAX_DIMS)
        return gguf_fail(err, GGUF_E_LIMIT, entry_offset(f, key),
                         "%s: %s: shape: %zu dimensions (at most %d)", path, key,
                         json_array_size(sh), GGUF_ST_MAX_DIMS);
    e->n_dims = (int)json_array_size(sh);
    int64_t n = 1;
    for (int d = 0; d < e->n_dims; d++) {
        json_t *x = json_array_get(sh, (size_t)d);
        if (!json_is_integer(x))
            return gguf_fail(err, GGUF_E_BAD_VALUE, entry_offset(f, key),
                             "%s: %s: shape[%d]: not an integer", path, key, d);
        const json_int_t k = json_integer_value(x);
        if (k < 0)
            return gguf_fail(err, GGUF_E_BAD_SHAPE, entry_offset(f, key),
                             "%s: %s: shape[%d]: %lld is negative", path, key, d, (long long)k);
        e->shape[d] = (int64_t)k;
        if (!gguf_mul_i64(n, (int64_t)k, &n))
            return gguf_fail(err, GGUF_E_OVERFLOW, entry_offset(f, key),
                             "%s: %s: shape: the element count overflows", path, key);
    }
    e->n_elements = n;
    if (!json_is_array(off) || json_array_size(off) != 2 ||
        !json_is_integer(json_array_get(off, 0)) || !json_is_integer(json_array_get(off, 1)))
        return gguf_fail(err, GGUF_E_BAD_VALUE, entry_offset(f, key),
                         "%s: %s: data_offsets: %s", path, key,
                         off ? "not an array of two integers" : "missing");
    const json_int_t b = json_integer_value(json_array_get(off, 0)),
                     en = json_integer_value(json_array_get(off, 1));
    if (b < 0 || en < 0)
        return gguf_fail(err, GGUF_E_BAD_OFFSET, entry_offset(f, key),
                         "%s: %s: data_offsets: negative offset", path, key);
    if (en < b)
        return gguf_fail(err, GGUF_E_BAD_OFFSET, entry_offset(f, key),
                         "%s: %s: data_offsets: end %lld is before begin %lld", path, key,
                         (long long)en, (long long)b);
    e->begin = (uint64_t)b;
    e->end = (uint64_t)en;
    uint64_t bytes;
    if (!gguf_mul_u64((uint64_t)n, dtypes[e->dtype].size, &bytes))
        return gguf_fail(err, GGUF_E_OVERFLOW, entry_offset(f, key),
                         "%s: %s: the byte count overflows", path, key);
    if (bytes != e->end - e->begin)
        return gguf_fail(err, GGUF_E_BAD_SHAPE, entry_offset(f, key),
                         "%s: %s: data_offsets: %llu bytes, but shape x %s makes %llu", path,
                         key, (unsigned long long)(e->end - e->begin),
                         dtypes[e->dtype].name, (unsigned long long)bytes);
    const uint64_t data_size = f->size - f->data_offset;
    if (e->end > data_size)
        return gguf_fail(err, GGUF_E_TRUNCATED, entry_offset(f, key),
                         "%s: %s: data_offsets: end %llu is past the data (%llu bytes)", path,
                         key, (unsigned long long)e->end, (unsigned long long)data_size);
    return 0;
}

static int parse_meta(gguf_st_file *f, json_t *m, gguf_error *err)
{
    if (!json_is_object(m))
        return gguf_fail(err, GGUF_E_BAD_VALUE, entry_offset(f, "__metadata__"),
                         "%s: __metadata__: not a JSON object", f->path);
    const size_t n = json_object_size(m);
    f->meta = calloc(2 * n + 1, sizeof *f->meta);
    if (!f->meta)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "%s: out of memory", f->path);
    const char *k;
    json_t *v;
    json_object_foreach(m, k, v) {
        if (!json_is_string(v))
            return gguf_fail(err, GGUF_E_BAD_VALUE, entry_offset(f, k),
                             "%s: __metadata__.%s: not a string", f->path, k);
        char *kk = strdup(k), *vv = strdup(json_string_value(v));
        f->meta[2 * f->n_meta] = kk;
        f->meta[2 * f->n_meta + 1] = vv;
        f->n_meta++;
        if (!kk || !vv)
            return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "%s: out of memory", f->path);
        if (strlen(vv) != json_string_length(v))
            return gguf_fail(err, GGUF_E_BAD_UTF8, entry_offset(f, k),
                             "%s: __metadata__.%s: the value holds a NUL", f->path, k);
    }
    /* key order, so that listings do not depend on the hash table */
    for (int64_t i = 1; i < f->n_meta; i++)
        for (int64_t j = i; j > 0 && strcmp(f->meta[2 * j - 2], f->meta[2 * j]) > 0; j--) {
            char *a = f->meta[2 * j - 2], *b = f->meta[2 * j - 1];
            f->meta[2 * j - 2] = f->meta[2 * j];
            f->meta[2 * j - 1] = f->meta[2 * j + 1];
            f->meta[2 * j] = a;
            f->meta[2 * j + 1] = b;
        }
    return 0;
}

static int cmp_begin(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int parse_header(gguf_st_file *f, gguf_error *err)
{
    const char *path = f->path;
    if (f->size < 8)
        return gguf_fail(err, GGUF_E_NOT_GGUF, 0,
                         "%s: %llu bytes: too small for a safetensors file", path,
                         (unsigned long long)f->size);
    if (!memcmp(f->base, "GGUF", 4))
        return gguf_fail(err, GGUF_E_NOT_GGUF, 0, "%s: a GGUF file, not safetensors", path);
    uint64_t n = 0;
    memcpy(&n, f->base, 8);
    if (n > GGUF_ST_MAX_HEADER)
        return gguf_fail(err, GGUF_E_LIMIT, 0,
                         "%s: header length: %llu bytes (at most %u)", path,
                         (unsigned long long)n, GGUF_ST_MAX_HEADER);
    if (n > f->size - 8)
        return gguf_fail(err, GGUF_E_TRUNCATED, 0,
                         "%s: header length: %llu bytes, but the file has %llu after it", path,
                         (unsigned long long)n, (unsigned long long)(f->size - 8));
    f->data_offset = 8 + n;
    const char *h = (const char *)f->base + 8;
    if (n < 2 || h[0] != '{')
        return gguf_fail(err, GGUF_E_BAD_MAGIC, 8,
                         "%s: header: does not start with '{' (not a safetensors file)", path);
    if (gguf_json_depth(h, (size_t)n, GGUF_ST_MAX_DEPTH) > GGUF_ST_MAX_DEPTH)
        return gguf_fail(err, GGUF_E_LIMIT, 8, "%s: header: JSON nested deeper than %d", path,
                         GGUF_ST_MAX_DEPTH);
    json_error_t je;
    json_t *root = json_loadb(h, (size_t)n, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        const int code = gguf_json_error_status(&je);
        return gguf_fail(err, code, 8 + (uint64_t)je.position, "%s: header: %s%s", path,
                         code == GGUF_E_BAD_UTF8 ? "invalid UTF-8: " : "", je.text);
    }
    int rc = 0;
    entry *es = NULL;
    if (!json_is_object(root)) {
        rc = gguf_fail(err, GGUF_E_BAD_MAGIC, 8, "%s: header: not a JSON object", path);
        goto done;
    }
    if (json_object_size(root) > GGUF_ST_MAX_TENSORS) {
        rc = gguf_fail(err, GGUF_E_LIMIT, 8, "%s: header: %zu entries (at most %u)", path,
                       json_object_size(root), GGUF_ST_MAX_TENSORS);
        goto done;
    }
    es = calloc(json_object_size(root) + 1, sizeof *es);
    if (!es) {
        rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "%s: out of memory", path);
        goto done;
    }
    int64_t ne = 0;
    size_t names_len = 0;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (!strcmp(key, "__metadata__")) {
            if ((rc = parse_meta(f, v, err)) != 0)
                goto done;
            continue;
        }
        if (!key[0]) {
            rc = gguf_fail(err, GGUF_E_BAD_VALUE, 8, "%s: header: an empty tensor name", path);
            goto done;
        }
        if ((rc = parse_entry(f, key, v, &es[ne], err)) != 0)
            goto done;
        names_len += strlen(key) + 1;
        ne++;
    }
    qsort(es, (size_t)ne, sizeof *es, cmp_begin);
    /* the ranges must tile [0, data size) exactly */
    uint64_t at = 0;
    for (int64_t i = 0; i < ne; i++) {
        if (es[i].begin < at) {
            rc = gguf_fail(err, GGUF_E_BAD_OFFSET, entry_offset(f, es[i].key),
                           "%s: %s: data_offsets: [%llu, %llu) overlaps %s", path, es[i].key,
                           (unsigned long long)es[i].begin, (unsigned long long)es[i].end,
                           es[i - 1].key);
            goto done;
        }
        if (es[i].begin > at) {
            rc = gguf_fail(err, GGUF_E_BAD_OFFSET, entry_offset(f, es[i].key),
                           "%s: %s: data_offsets: begins at %llu, leaving a gap of %llu bytes "
                           "after %s", path, es[i].key, (unsigned long long)es[i].begin,
                           (unsigned long long)(es[i].begin - at),
                           i ? es[i - 1].key : "the header");
            goto done;
        }
        at = es[i].end;
    }
    if (at != f->size - f->data_offset) {
        rc = gguf_fail(err, GGUF_E_BAD_OFFSET, f->data_offset + at,
                       "%s: data: %llu bytes after the last tensor are not indexed", path,
                       (unsigned long long)(f->size - f->data_offset - at));
        goto done;
    }
    f->tensors = calloc((size_t)ne + 1, sizeof *f->tensors);
    f->by_name = calloc((size_t)ne + 1, sizeof *f->by_name);
    f->names = malloc(names_len + 1);
    if (!f->tensors || !f->by_name || !f->names) {
        rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "%s: out of memory", path);
        goto done;
    }
    char *np = f->names;
    for (int64_t i = 0; i < ne; i++) {
        gguf_st_tensor *t = &f->tensors[i];
        const size_t kl = strlen(es[i].key);
        memcpy(np, es[i].key, kl + 1);
        t->name = np;
        np += kl + 1;
        t->dtype = (gguf_st_dtype)es[i].dtype;
        t->n_dims = es[i].n_dims;
        memcpy(t->shape, es[i].shape, sizeof t->shape);
        t->n_elements = es[i].n_elements;
        t->nbytes = es[i].end - es[i].begin;
        t->file_offset = f->data_offset + es[i].begin;
        t->data = f->base + t->file_offset;
        f->by_name[i] = t;
    }
    f->n_tensors = ne;
    qsort(f->by_name, (size_t)ne, sizeof *f->by_name, gguf_st_cmp_name);
done:
    free(es);
    json_decref(root);
    return rc;
}

void gguf_st_file_free(gguf_st_file *f)
{
    if (!f)
        return;
    if (f->mapped && f->base)
        munmap((void *)f->base, (size_t)f->size);
    for (int64_t i = 0; i < 2 * f->n_meta; i++)
        free(f->meta[i]);
    free(f->meta);
    free(f->tensors);
    free(f->by_name);
    free(f->names);
    free(f->path);
    free(f);
}

static int finish_open(gguf_st_file *f, gguf_st_file **out, gguf_error *err)
{
    const int rc = parse_header(f, err);
    if (rc) {
        gguf_st_file_free(f);
        return rc;
    }
    *out = f;
    return 0;
}

int gguf_st_file_open_memory(gguf_st_file **out, const void *data, size_t size,
                             const char *name, gguf_error *err)
{
    gguf_error_clear(err);
    if (!out || (!data && size))
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_st_file_open_memory: NULL");
    *out = NULL;
    gguf_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(name ? name : "<memory>"))) {
        free(f);
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    }
    f->base = data;
    f->size = size;
    return finish_open(f, out, err);
}

int gguf_st_file_open(gguf_st_file **out, const char *path, gguf_error *err)
{
    gguf_error_clear(err);
    if (!out || !path)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_st_file_open: NULL");
    *out = NULL;
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return gguf_fail_errno(err, errno == ENOENT ? GGUF_E_NOT_FOUND : GGUF_E_IO, errno,
                               "%s", path);
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        const int e = errno;
        close(fd);
        return gguf_fail_errno(err, GGUF_E_IO, e, "%s: stat", path);
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return gguf_fail(err, GGUF_E_NOT_GGUF, GGUF_NO_OFFSET,
                         "%s: not a regular file (a folder or a device)", path);
    }
    gguf_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        close(fd);
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "%s: out of memory", path);
    }
    f->size = (uint64_t)sb.st_size;
    if (f->size > 0) {
        void *m = mmap(NULL, (size_t)f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            const int e = errno;
            close(fd);
            gguf_st_file_free(f);
            return gguf_fail_errno(err, e == ENOMEM ? GGUF_E_NOMEM : GGUF_E_IO, e, "%s: mmap",
                                   path);
        }
        f->base = m;
        f->mapped = true;
    }
    close(fd);
    return finish_open(f, out, err);
}

const char *gguf_st_file_path(const gguf_st_file *f)
{
    return f->path;
}

uint64_t gguf_st_file_size(const gguf_st_file *f)
{
    return f->size;
}

uint64_t gguf_st_file_data_offset(const gguf_st_file *f)
{
    return f->data_offset;
}

int64_t gguf_st_file_tensor_count(const gguf_st_file *f)
{
    return f ? f->n_tensors : 0;
}

const gguf_st_tensor *gguf_st_file_tensor_at(const gguf_st_file *f, int64_t i)
{
    return f && i >= 0 && i < f->n_tensors ? &f->tensors[i] : NULL;
}

const gguf_st_tensor *gguf_st_file_tensor_find(const gguf_st_file *f, const char *name)
{
    return f && name ? gguf_st_bsearch(f->by_name, f->n_tensors, name) : NULL;
}

int64_t gguf_st_file_meta_count(const gguf_st_file *f)
{
    return f ? f->n_meta : 0;
}

void gguf_st_file_meta_at(const gguf_st_file *f, int64_t i, const char **key, const char **value)
{
    const bool ok = f && i >= 0 && i < f->n_meta;
    if (key)
        *key = ok ? f->meta[2 * i] : NULL;
    if (value)
        *value = ok ? f->meta[2 * i + 1] : NULL;
}

const char *gguf_st_file_meta_get(const gguf_st_file *f, const char *key)
{
    for (int64_t i = 0; f && i < f->n_meta; i++)
        if (!strcmp(f->meta[2 * i], key))
            return f->meta[2 * i + 1];
    return NULL;
}
