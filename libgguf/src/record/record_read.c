/*
 * Record reader: open a plain or zstd-compressed record, check that it is one,
 * and index its captures by (point, rank).
 */
#include "util/error_lib.h"
#include "gguf/record.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#define MAX_DECOMPRESSED (64ull << 30)

struct gguf_record {
    char *path;
    gguf_file *file;
    void *buf;          /* decompressed or realigned bytes, owned; NULL for mmapped files */
    bool compressed;
    gguf_record_meta meta;
    int32_t *tokens;
    gguf_capture *caps;
    char *names;        /* point strings, NUL-separated */
    int64_t n_caps;
    int64_t *slots;     /* open addressing on (point, rank): capture index + 1 */
    uint64_t n_slots;
};

static const uint8_t zstd_magic[4] = {0x28, 0xB5, 0x2F, 0xFD};

static uint64_t key_hash(const char *point, uint32_t rank)
{
    uint64_t h = 1469598103934665603ull ^ rank;
    for (; *point; point++)
        h = (h ^ (unsigned char)*point) * 1099511628211ull;
    return h ^ (h >> 29);
}

int gguf_capture_parse_name(const char *name, char *point_out, size_t point_size,
                            uint32_t *rank, int32_t *layer, const char **op_in_point)
{
    if (!name || !point_out || !point_size)
        return GGUF_E_INVALID;
    const char *at = strrchr(name, '@');
    size_t plen = at ? (size_t)(at - name) : strlen(name);
    uint32_t r = 0;
    if (at) {
        const char *d = at + 1;
        if (!*d)
            return GGUF_E_BAD_VALUE;
        uint64_t v = 0;
        for (; *d; d++) {
            if (*d < '0' || *d > '9' || v > GGUF_RECORD_MAX_RANKS)
                return GGUF_E_BAD_VALUE;
            v = v * 10 + (uint64_t)(*d - '0');
        }
        if (v >= GGUF_RECORD_MAX_RANKS)
            return GGUF_E_BAD_VALUE;
        r = (uint32_t)v;
    }
    if (!plen || plen >= point_size || memchr(name, '@', plen))
        return GGUF_E_BAD_VALUE;
    memcpy(point_out, name, plen);
    point_out[plen] = 0;
    int32_t l = -1;
    const char *op = point_out;
    if (!strncmp(point_out, "blk.", 4)) {
        const char *d = point_out + 4;
        int64_t v = 0;
        const char *s = d;
        while (*d >= '0' && *d <= '9' && v < 1000000)
            v = v * 10 + (*d++ - '0');
        if (d > s && *d == '.' && d[1]) {
            l = (int32_t)v;
            op = d + 1;
        }
    }
    if (rank)
        *rank = r;
    if (layer)
        *layer = l;
    if (op_in_point)
        *op_in_point = op;
    return GGUF_OK;
}

void gguf_record_free(gguf_record *r)
{
    if (!r)
        return;
    gguf_file_free(r->file);
    free(r->buf);
    free(r->path);
    free(r->tokens);
    free(r->caps);
    free(r->names);
    free(r->slots);
    free(r);
}

const char *gguf_record_path(const gguf_record *r) { return r->path; }
bool gguf_record_compressed(const gguf_record *r) { return r->compressed; }
const gguf_record_meta *gguf_record_get_meta(const gguf_record *r) { return &r->meta; }
const gguf_file *gguf_record_file(const gguf_record *r) { return r->file; }
int64_t gguf_record_capture_count(const gguf_record *r) { return r->n_caps; }

const gguf_capture *gguf_record_capture_at(const gguf_record *r, int64_t i)
{
    return i >= 0 && i < r->n_caps ? &r->caps[i] : NULL;
}

const gguf_capture *gguf_record_capture_find(const gguf_record *r, const char *point,
                                             uint32_t rank)
{
    if (!r || !point || !r->n_slots)
        return NULL;
    uint64_t h = key_hash(point, rank) & (r->n_slots - 1);
    for (; r->slots[h]; h = (h + 1) & (r->n_slots - 1)) {
        const gguf_capture *c = &r->caps[r->slots[h] - 1];
        if (c->rank == rank && !strcmp(c->point, point))
            return c;
    }
    return NULL;
}

/* Copies of the metadata strings, NUL-terminated, kept in one allocation. */
typedef struct strpool {
    char *p;
    size_t n, cap;
} strpool;

static int get_meta_strings(gguf_record *r, strpool *pool, gguf_error *err)
{
    static const char *const keys[] = {GGUF_RKEY_MODEL_DIGEST, GGUF_RKEY_BACKEND,
                                       GGUF_RKEY_PRECISION,    GGUF_RKEY_PLAN_DIGEST,
                                       GGUF_RKEY_ARCH,         GGUF_RKEY_FAULT,
                                       GGUF_RKEY_VERSION_STR};
    size_t offs[7];
    for (int i = 0; i < 7; i++) {
        gguf_str s = {"", 0};
        int rc = gguf_get_str(r->file, keys[i], &s, NULL);
        if (rc && rc != GGUF_E_NOT_FOUND)
            return gguf_fail(err, GGUF_E_BAD_VALUE, GGUF_NO_OFFSET, "%s: %s: not a string",
                             r->path, keys[i]);
        if (rc)
            s = (gguf_str){"", 0};
        if (pool->cap - pool->n < s.len + 1) {
            size_t cap = pool->cap ? pool->cap : 256;
            while (cap - pool->n < s.len + 1)
                cap *= 2;
            char *q = realloc(pool->p, cap);
            if (!q)
                return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
            pool->p = q;
            pool->cap = cap;
        }
        offs[i] = pool->n;
        memcpy(pool->p + pool->n, s.data, s.len);
        pool->p[pool->n + s.len] = 0;
        pool->n += s.len + 1;
    }
    const char **dst[7] = {&r->meta.model_digest, &r->meta.backend,  &r->meta.precision,
                           &r->meta.plan_digest,  &r->meta.arch,     &r->meta.fault,
                           &r->meta.ggufkit_version};
    for (int i = 0; i < 7; i++)
        *dst[i] = pool->p + offs[i];
    return GGUF_OK;
}

static int get_u32_key(gguf_record *r, const char *key, uint32_t *out, gguf_error *err)
{
    uint64_t v = 1;
    int rc = gguf_get_u64(r->file, key, &v, NULL);
    if (rc == GGUF_E_NOT_FOUND)
        v = 1;
    else if (rc || v == 0 || v > GGUF_RECORD_MAX_RANKS)
        return gguf_fail(err, GGUF_E_BAD_VALUE, GGUF_NO_OFFSET,
                         "%s: %s: must be an integer in 1..%u", r->path, key,
                         GGUF_RECORD_MAX_RANKS);
    *out = (uint32_t)v;
    return GGUF_OK;
}

static int index_record(gguf_record *r, gguf_error *err)
{
    const gguf_file *f = r->file;
    gguf_str type;
    int rc = gguf_get_str(f, GGUF_RKEY_TYPE, &type, NULL);
    if (rc == GGUF_E_NOT_FOUND)
        return gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET,
                         "%s: general.type: missing: a GGUF file but not a ggufkit record",
                         r->path);
    if (rc || !gguf_str_eq(type, GGUF_RECORD_TYPE)) {
        const gguf_kv *kv = gguf_file_kv_find(f, GGUF_RKEY_TYPE);
        return gguf_fail(err, GGUF_E_BAD_VALUE, kv ? kv->offset : GGUF_NO_OFFSET,
                         "%s: general.type: '%.*s', not '%s': not a ggufkit record", r->path,
                         rc ? 0 : (int)(type.len > 64 ? 64 : type.len), rc ? "" : type.data,
                         GGUF_RECORD_TYPE);
    }
    uint64_t version = 0;
    if (gguf_get_u64(f, GGUF_RKEY_VERSION, &version, NULL) || version == 0)
        return gguf_fail(err, GGUF_E_BAD_VALUE, GGUF_NO_OFFSET,
                         "%s: %s: missing or not a positive integer", r->path,
                         GGUF_RKEY_VERSION);
    if (version > GGUF_RECORD_VERSION)
        return gguf_fail(err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                         "%s: record version %llu is newer than this ggufkit reads (%u)",
                         r->path, (unsigned long long)version, GGUF_RECORD_VERSION);

    strpool pool = {0};
    if ((rc = get_meta_strings(r, &pool, err)) ||
        (rc = get_u32_key(r, GGUF_RKEY_TP, &r->meta.tp, err)) ||
        (rc = get_u32_key(r, GGUF_RKEY_EP, &r->meta.ep, err)) ||
        (rc = get_u32_key(r, GGUF_RKEY_RANKS, &r->meta.ranks, err))) {
        free(pool.p);
        return rc;
    }

    const gguf_value *tok = NULL;
    rc = gguf_get_arr(f, GGUF_RKEY_TOKENS, &tok, NULL);
    if (rc && rc != GGUF_E_NOT_FOUND) {
        free(pool.p);
        return gguf_fail(err, GGUF_E_BAD_VALUE, GGUF_NO_OFFSET,
                         "%s: %s: not an array of integers", r->path, GGUF_RKEY_TOKENS);
    }
    if (!rc) {
        if (tok->v.arr.type == GGUF_VALUE_STRING || tok->v.arr.type == GGUF_VALUE_ARRAY ||
            tok->v.arr.type == GGUF_VALUE_FLOAT32 || tok->v.arr.type == GGUF_VALUE_FLOAT64) {
            free(pool.p);
            return gguf_fail(err, GGUF_E_BAD_VALUE, GGUF_NO_OFFSET,
                             "%s: %s: not an array of integers", r->path, GGUF_RKEY_TOKENS);
        }
        r->tokens = malloc((tok->v.arr.n ? tok->v.arr.n : 1) * sizeof *r->tokens);
        if (!r->tokens) {
            free(pool.p);
            return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
        }
        for (uint64_t i = 0; i < tok->v.arr.n; i++) {
            gguf_value e = gguf_value_elem(tok, i);
            int64_t v;
            if (gguf_value_to_i64(&e, &v) || v < INT32_MIN || v > INT32_MAX) {
                free(pool.p);
                return gguf_fail(err, GGUF_E_BAD_VALUE, GGUF_NO_OFFSET,
                                 "%s: %s[%llu]: not a 32-bit token id", r->path,
                                 GGUF_RKEY_TOKENS, (unsigned long long)i);
            }
            r->tokens[i] = (int32_t)v;
        }
        r->meta.n_tokens = tok->v.arr.n;
    }
    r->meta.tokens = r->tokens;

    /* Points: the names without the rank suffix, in one pool after the metadata strings. */
    int64_t n = gguf_file_tensor_count(f);
    size_t need = pool.n;
    for (int64_t i = 0; i < n; i++)
        need += strlen(gguf_file_tensor_at(f, i)->name) + 1;
    /* Re-point the metadata strings into the pool once it has moved. */
    const char **dst[7] = {&r->meta.model_digest, &r->meta.backend,  &r->meta.precision,
                           &r->meta.plan_digest,  &r->meta.arch,     &r->meta.fault,
                           &r->meta.ggufkit_version};
    size_t offs[7];
    /* GCC 12 at -O3 wrongly sees this read as following the realloc below. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuse-after-free"
#endif
    for (int i = 0; i < 7; i++)
        offs[i] = (size_t)(*dst[i] - pool.p);
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic pop
#endif
    char *np = realloc(pool.p, need ? need : 1);
    if (!np) {
        free(pool.p);
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    }
    for (int i = 0; i < 7; i++)
        *dst[i] = np + offs[i];
    r->names = np;
    size_t pos = pool.n;

    r->caps = calloc(n ? (size_t)n : 1, sizeof *r->caps);
    r->n_slots = 16;
    while (r->n_slots < (uint64_t)n * 2)
        r->n_slots *= 2;
    r->slots = calloc(r->n_slots, sizeof *r->slots);
    if (!r->caps || !r->slots)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    for (int64_t i = 0; i < n; i++) {
        const gguf_tensor *t = gguf_file_tensor_at(f, i);
        gguf_capture *c = &r->caps[i];
        if (t->type != GGUF_TYPE_F32)
            return gguf_fail(err, GGUF_E_BAD_TYPE, t->info_offset,
                             "%s: capture '%s': type %s, records hold F32 only", r->path,
                             t->name, gguf_type_name(t->type));
        size_t room = need - pos;
        if (gguf_capture_parse_name(t->name, np + pos, room, &c->rank, &c->layer, &c->op))
            return gguf_fail(err, GGUF_E_BAD_VALUE, t->info_offset,
                             "%s: capture '%s': bad name (expected POINT or POINT@RANK)",
                             r->path, t->name);
        c->point = np + pos;
        pos += strlen(c->point) + 1;
        if (c->rank >= r->meta.ranks)
            return gguf_fail(err, GGUF_E_BAD_VALUE, t->info_offset,
                             "%s: capture '%s': rank %u, but record.ranks is %u", r->path,
                             t->name, c->rank, r->meta.ranks);
        if (r->meta.ranks > 1 && !strchr(t->name, '@'))
            return gguf_fail(err, GGUF_E_BAD_VALUE, t->info_offset,
                             "%s: capture '%s': a record of %u ranks names every capture "
                             "POINT@RANK", r->path, t->name, r->meta.ranks);
        if (gguf_record_capture_find(r, c->point, c->rank))
            return gguf_fail(err, GGUF_E_DUPLICATE, t->info_offset,
                             "%s: capture '%s' appears twice", r->path, t->name);
        if ((uintptr_t)t->data % sizeof(float))
            return gguf_fail(err, GGUF_E_BAD_OFFSET, t->file_offset,
                             "%s: capture '%s': data not 4-byte aligned (general.alignment "
                             "below 4?)", r->path, t->name);
        c->name = t->name;
        c->n_dims = t->n_dims;
        memcpy(c->ne, t->ne, sizeof c->ne);
        c->n_elements = t->n_elements;
        c->data = (const float *)(const void *)t->data;
        c->index = i;
        c->file_offset = t->file_offset;
        r->n_caps = i + 1;
        uint64_t h = key_hash(c->point, c->rank) & (r->n_slots - 1);
        while (r->slots[h])
            h = (h + 1) & (r->n_slots - 1);
        r->slots[h] = i + 1;
    }
    return GGUF_OK;
}

/* Decompress one zstd frame (or several) into a new buffer. */
static int decompress(const char *name, const void *src, size_t n, void **out, size_t *out_n,
                      gguf_error *err)
{
    unsigned long long want = ZSTD_getFrameContentSize(src, n);
    if (want == ZSTD_CONTENTSIZE_ERROR)
        return gguf_fail(err, GGUF_E_NOT_GGUF, 0, "%s: corrupt zstd frame header", name);
    if (want != ZSTD_CONTENTSIZE_UNKNOWN && want > MAX_DECOMPRESSED)
        return gguf_fail(err, GGUF_E_LIMIT, 0, "%s: decompressed size %llu over the limit",
                         name, want);
    /* Trust the declared size only as far as the input could plausibly expand; a
     * tiny file claiming gigabytes grows the buffer as data really arrives. */
    uint64_t plausible = (uint64_t)n * 64 + (1u << 20);
    uint64_t first = want != ZSTD_CONTENTSIZE_UNKNOWN && want < plausible ? want : plausible;
    size_t cap = first ? (size_t)first : 4096;
    ZSTD_DCtx *d = ZSTD_createDCtx();
    uint8_t *buf = malloc(cap);
    if (!d || !buf) {
        ZSTD_freeDCtx(d);
        free(buf);
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    }
    ZSTD_inBuffer in = {src, n, 0};
    size_t pos = 0, left = 1;
    int rc = GGUF_OK;
    while (in.pos < in.size || left) {
        if (pos == cap) {
            if (cap >= MAX_DECOMPRESSED) {
                rc = gguf_fail(err, GGUF_E_LIMIT, GGUF_NO_OFFSET,
                               "%s: decompressed size over the limit", name);
                break;
            }
            size_t ncap = cap * 2; /* cap > 0 always: realloc never frees here */
            uint8_t *q = realloc(buf, ncap);
            if (!q) {
                rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
                break;
            }
            buf = q;
            cap = ncap;
        }
        ZSTD_outBuffer ob = {buf, cap, pos};
        size_t before_in = in.pos;
        left = ZSTD_decompressStream(d, &ob, &in);
        if (ZSTD_isError(left)) {
            rc = gguf_fail(err, GGUF_E_NOT_GGUF, in.pos, "%s: corrupt zstd data: %s", name,
                           ZSTD_getErrorName(left));
            break;
        }
        bool progress = ob.pos != pos || in.pos != before_in;
        pos = ob.pos;
        if (!progress && in.pos == in.size && pos < cap) {
            rc = gguf_fail(err, GGUF_E_TRUNCATED, n, "%s: zstd data ends inside a frame", name);
            break;
        }
    }
    ZSTD_freeDCtx(d);
    if (rc) {
        free(buf);
        return rc;
    }
    *out = buf;
    *out_n = pos;
    return GGUF_OK;
}

static int finish_open(gguf_record *r, gguf_record **out, gguf_error *err)
{
    int rc = index_record(r, err);
    if (rc) {
        gguf_record_free(r);
        return rc;
    }
    *out = r;
    return GGUF_OK;
}

static gguf_record *record_new(const char *name)
{
    gguf_record *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->path = strdup(name ? name : "<memory>");
    if (!r->path) {
        free(r);
        return NULL;
    }
    return r;
}

int gguf_record_open_memory(gguf_record **out, const void *data, size_t size, const char *name,
                            gguf_error *err)
{
    gguf_error_clear(err);
    if (!out || (!data && size))
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_record_open_memory: bad args");
    *out = NULL;
    gguf_record *r = record_new(name);
    if (!r)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    const void *view = data;
    size_t vsize = size;
    int rc;
    if (size >= 4 && !memcmp(data, zstd_magic, 4)) {
        if ((rc = decompress(r->path, data, size, &r->buf, &vsize, err))) {
            gguf_record_free(r);
            return rc;
        }
        r->compressed = true;
        view = r->buf;
    } else if ((uintptr_t)data % 32) {
        /* Captures are read as floats in place: give them an aligned home. */
        r->buf = malloc(size ? size : 1);
        if (!r->buf) {
            gguf_record_free(r);
            return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
        }
        memcpy(r->buf, data, size);
        view = r->buf;
    }
    if ((rc = gguf_file_open_memory(&r->file, view, vsize, r->path, NULL, err))) {
        gguf_record_free(r);
        return rc;
    }
    return finish_open(r, out, err);
}

int gguf_record_open(gguf_record **out, const char *path, gguf_error *err)
{
    gguf_error_clear(err);
    if (!out || !path)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_record_open: bad args");
    *out = NULL;
    uint8_t head[4] = {0};
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return gguf_fail_errno(err, errno == ENOENT ? GGUF_E_NOT_FOUND : GGUF_E_IO, errno,
                               "%s: cannot open", path);
    struct stat st;
    ssize_t k = pread(fd, head, 4, 0);
    if (k == 4 && !memcmp(head, zstd_magic, 4) && fstat(fd, &st) == 0) {
        /* Compressed: read it whole (records are small) and open from memory. */
        size_t n = (size_t)st.st_size, got = 0;
        uint8_t *raw = malloc(n ? n : 1);
        if (!raw) {
            close(fd);
            return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
        }
        while (got < n) {
            ssize_t m = pread(fd, raw + got, n - got, (off_t)got);
            if (m < 0 && errno == EINTR)
                continue;
            if (m <= 0)
                break;
            got += (size_t)m;
        }
        close(fd);
        if (got < n) {
            free(raw);
            return gguf_fail_errno(err, GGUF_E_IO, errno, "%s: cannot read", path);
        }
        int rc = gguf_record_open_memory(out, raw, n, path, err);
        free(raw);
        return rc;
    }
    close(fd);
    gguf_record *r = record_new(path);
    if (!r)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    int rc = gguf_file_open(&r->file, path, NULL, err);
    if (rc) {
        gguf_record_free(r);
        return rc;
    }
    return finish_open(r, out, err);
}
