/*
 * Streaming GGUF writer. Metadata and tensor infos are serialized into memory
 * as they are added (they are small); tensor data streams straight to the
 * temporary file of a gguf_output (gguf/output.h) through a bounded buffer or
 * copy_file_range. The output appears only at finish, by the output's commit
 * (fsync, rename, fsync of the folder).
 *
 * Data positions: tensor i occupies [data_offset + offset_i, + nbytes_i). What
 * lies between tensors (padding, and the gaps of an explicit layout) is filled
 * lazily, just before the next bytes are written: zeros through the buffer,
 * or a hole when the gap is a block or more. A range copy may carry several
 * tensors and the bytes between them from an input that has the same layout.
 */
#include "util/error_lib.h"
#include "gguf/output.h"
#include "gguf/write.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#define WBUF_SIZE (4u << 20)
#define COPY_CHUNK (256ull << 20) /* a multiple of every block size we align to */
#define HOLE_MIN 4096u            /* gaps at least this long are left as holes */
#define WRITEBACK_STEP (32ull << 20) /* written bytes handed to the disk early, at a time */

typedef struct wtensor {
    char *name;
    uint32_t type, n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    uint64_t nbytes, offset;
} wtensor;

typedef struct bytes {
    uint8_t *p;
    uint64_t n, cap;
} bytes;

struct gguf_writer {
    char *path;
    gguf_output *out;    /* the temporary file, its commit and cleanup */
    int fd;              /* gguf_output_fd(out) */
    uint64_t blk;        /* block of the output's file system (copy alignment) */
    bool local_fs;       /* a local file system: shifted copies go through pread/pwrite */
    gguf_writer_opts opts;
    uint32_t alignment;
    bool alignment_set;

    bytes kv;            /* serialized metadata pairs */
    uint64_t n_kv;
    char **keys;
    uint64_t cap_keys;

    wtensor *tensors;
    uint64_t n_tensors, cap_tensors;
    uint64_t data_size;  /* padded */

    bool header_done;
    uint64_t header_size, data_offset;
    uint64_t out_pos;    /* next byte of the file to write */
    uint64_t wb_pos;     /* bytes before this are handed to writeback already */
    uint64_t cur, cur_done; /* tensor being written, bytes of it written */
    uint8_t *buf;
    uint64_t buf_n, buf_pos; /* buffered bytes start at file offset buf_pos */
};

static int bytes_put(bytes *b, const void *p, uint64_t n)
{
    if (n == 0)
        return GGUF_OK; /* p may be NULL then; memcpy must not see it */
    if (b->cap - b->n < n) {
        uint64_t cap = b->cap ? b->cap : 4096;
        while (cap - b->n < n)
            cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (!q)
            return GGUF_E_NOMEM;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
    return GGUF_OK;
}

static int put_u32(bytes *b, uint32_t v) { return bytes_put(b, &v, 4); }
static int put_u64(bytes *b, uint64_t v) { return bytes_put(b, &v, 8); }
static int put_str(bytes *b, const char *s, uint64_t n)
{
    int rc = put_u64(b, n);
    return rc ? rc : bytes_put(b, s, n);
}

static int put_value(bytes *b, const gguf_value *v, int depth)
{
    int rc;
    if (v->type == GGUF_VALUE_STRING)
        return put_str(b, v->v.str.data, v->v.str.len);
    if (v->type != GGUF_VALUE_ARRAY) {
        uint32_t sz = gguf_value_type_size(v->type);
        if (!sz)
            return GGUF_E_BAD_TYPE;
        if (v->type == GGUF_VALUE_BOOL) {
            uint8_t c = v->v.b ? 1 : 0;
            return bytes_put(b, &c, 1);
        }
        return bytes_put(b, &v->v, sz);
    }
    if (depth >= GGUF_MAX_NESTING)
        return GGUF_E_LIMIT;
    uint32_t et = v->v.arr.type;
    uint64_t n = v->v.arr.n;
    if (et >= GGUF_VALUE_COUNT)
        return GGUF_E_BAD_TYPE;
    if ((rc = put_u32(b, et)) || (rc = put_u64(b, n)))
        return rc;
    if (et == GGUF_VALUE_STRING) {
        for (uint64_t i = 0; i < n; i++)
            if ((rc = put_str(b, v->v.arr.strs[i].data, v->v.arr.strs[i].len)))
                return rc;
        return GGUF_OK;
    }
    if (et == GGUF_VALUE_ARRAY) {
        for (uint64_t i = 0; i < n; i++) {
            if (v->v.arr.vals[i].type != GGUF_VALUE_ARRAY)
                return GGUF_E_INVALID;
            if ((rc = put_value(b, &v->v.arr.vals[i], depth + 1)))
                return rc;
        }
        return GGUF_OK;
    }
    uint64_t bytes_n;
    if (!gguf_mul_u64(n, gguf_value_type_size(et), &bytes_n))
        return GGUF_E_OVERFLOW;
    return n ? bytes_put(b, v->v.arr.raw, bytes_n) : GGUF_OK;
}

/* Local file systems, where a kernel copy is a page-cache copy that we can
 * do better for shifted ranges (copy_range); elsewhere (NFS, SMB, FUSE) the
 * kernel's copy may run on the server and is always preferred. */
static bool fs_is_local(const struct statfs *sf)
{
    switch ((unsigned long)sf->f_type) {
    case 0xEF53UL:     /* ext2/3/4 */
    case 0x58465342UL: /* XFS */
    case 0x9123683EUL: /* btrfs */
    case 0x01021994UL: /* tmpfs */
    case 0xF2F52010UL: /* F2FS */
        return true;
    default:
        return false;
    }
}

int gguf_writer_create(gguf_writer **out, const char *path, const gguf_writer_opts *opts,
                       gguf_error *err)
{
    if (opts && opts->version > GGUF_WRITER_OPTS_VERSION) {
        if (out)
            *out = NULL;
        return gguf_opts_version_fail(opts->version, GGUF_WRITER_OPTS_VERSION, "gguf_writer_opts", err);
    }
    gguf_error_clear(err);
    if (!out || !path || !*path)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_writer_create: bad args");
    *out = NULL;
    gguf_writer *w = calloc(1, sizeof *w);
    if (!w)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    w->fd = -1;
    if (opts)
        w->opts = *opts;
    if (!w->opts.gguf_version)
        w->opts.gguf_version = 3;
    int rc = GGUF_OK;
    if (w->opts.gguf_version != 2 && w->opts.gguf_version != 3) {
        rc = gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "%s: cannot write GGUF version %u",
                       path, w->opts.gguf_version);
        goto fail;
    }
    w->alignment = w->opts.alignment ? w->opts.alignment : GGUF_DEFAULT_ALIGNMENT;
    if ((w->alignment & (w->alignment - 1)) || w->alignment > GGUF_MAX_ALIGNMENT) {
        rc = gguf_fail(err, GGUF_E_BAD_ALIGNMENT, GGUF_NO_OFFSET, "%s: alignment %u is invalid",
                       path, w->alignment);
        goto fail;
    }
    w->alignment_set = w->opts.alignment != 0;
    w->path = strdup(path);
    w->buf = malloc(WBUF_SIZE);
    if (!w->path || !w->buf) {
        rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
        goto fail;
    }
    struct stat st;
    if (!w->opts.overwrite && lstat(path, &st) == 0) {
        rc = gguf_fail(err, GGUF_E_EXISTS, GGUF_NO_OFFSET,
                       "%s: the output exists (refusing to overwrite it)", path);
        goto fail;
    }
    gguf_output_opts oo = {.overwrite = w->opts.overwrite,
                           .no_sync = w->opts.no_sync,
                           .cancel = w->opts.cancel};
    if ((rc = gguf_output_create(&w->out, path, &oo, err)))
        goto fail;
    w->fd = gguf_output_fd(w->out);
    /* Range copies split at this block so that kernels which share extents
     * (XFS, btrfs) see block-aligned requests. */
    struct statfs sf;
    w->blk = 4096;
    if (fstatfs(w->fd, &sf) == 0) {
        if (sf.f_bsize >= 4096 && sf.f_bsize <= (1 << 20) &&
            !((uint64_t)sf.f_bsize & ((uint64_t)sf.f_bsize - 1)))
            w->blk = (uint64_t)sf.f_bsize;
        w->local_fs = fs_is_local(&sf);
    }
    *out = w;
    return GGUF_OK;
fail:
    gguf_writer_free(w);
    return rc;
}

void gguf_writer_free(gguf_writer *w)
{
    if (!w)
        return;
    gguf_output_free(w->out); /* removes the temporary file unless committed */
    for (uint64_t i = 0; i < w->n_kv; i++)
        free(w->keys[i]);
    free(w->keys);
    for (uint64_t i = 0; i < w->n_tensors; i++)
        free(w->tensors[i].name);
    free(w->tensors);
    free(w->kv.p);
    free(w->buf);
    free(w->path);
    free(w);
}

const char *gguf_writer_temp_path(const gguf_writer *w) { return gguf_output_temp_path(w->out); }

static int not_after_header(gguf_writer *w, gguf_error *err)
{
    if (w->header_done)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "%s: metadata and tensors must be added before data is written",
                         w->path);
    return GGUF_OK;
}

int gguf_writer_add_kv(gguf_writer *w, const char *key, const gguf_value *v, gguf_error *err)
{
    int rc = not_after_header(w, err);
    if (rc)
        return rc;
    if (!key || !v)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "%s: NULL key or value", w->path);
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->keys[i], key) == 0)
            return gguf_fail(err, GGUF_E_DUPLICATE, GGUF_NO_OFFSET, "%s: duplicate key '%s'",
                             w->path, key);
    if (strcmp(key, GGUF_KEY_ALIGNMENT) == 0) {
        uint32_t a = v->type == GGUF_VALUE_UINT32 ? v->v.u32 : 0;
        if (a == 0 || (a & (a - 1)) || a > GGUF_MAX_ALIGNMENT)
            return gguf_fail(err, GGUF_E_BAD_ALIGNMENT, GGUF_NO_OFFSET,
                             "%s: general.alignment must be a uint32 power of two <= 1 MiB",
                             w->path);
        if (w->n_tensors)
            return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                             "%s: general.alignment must be added before tensors", w->path);
        w->alignment = a;
    }
    if (w->n_kv == w->cap_keys) {
        uint64_t cap = w->cap_keys ? w->cap_keys * 2 : 64;
        char **k = realloc(w->keys, cap * sizeof *k);
        if (!k)
            return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
        w->keys = k;
        w->cap_keys = cap;
    }
    uint64_t mark = w->kv.n;
    size_t klen = strlen(key);
    if ((rc = put_str(&w->kv, key, klen)) || (rc = put_u32(&w->kv, v->type)) ||
        (rc = put_value(&w->kv, v, 0))) {
        w->kv.n = mark;
        return gguf_fail(err, rc, GGUF_NO_OFFSET, "%s: metadata '%s': %s", w->path, key,
                         gguf_strerror(rc));
    }
    w->keys[w->n_kv] = strdup(key);
    if (!w->keys[w->n_kv]) {
        w->kv.n = mark;
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    }
    w->n_kv++;
    return GGUF_OK;
}

#define SCALAR_ADDER(fn, ctype, vtype, field)                                                \
    int fn(gguf_writer *w, const char *key, ctype x, gguf_error *err)                        \
    {                                                                                        \
        gguf_value v;                                                                        \
        memset(&v, 0, sizeof v);                                                             \
        v.type = vtype;                                                                      \
        v.v.field = x;                                                                       \
        return gguf_writer_add_kv(w, key, &v, err);                                          \
    }
SCALAR_ADDER(gguf_writer_add_u32, uint32_t, GGUF_VALUE_UINT32, u32)
SCALAR_ADDER(gguf_writer_add_i32, int32_t, GGUF_VALUE_INT32, i32)
SCALAR_ADDER(gguf_writer_add_u64, uint64_t, GGUF_VALUE_UINT64, u64)
SCALAR_ADDER(gguf_writer_add_f32, float, GGUF_VALUE_FLOAT32, f32)
SCALAR_ADDER(gguf_writer_add_bool, bool, GGUF_VALUE_BOOL, b)

int gguf_writer_add_str(gguf_writer *w, const char *key, const char *s, gguf_error *err)
{
    gguf_value v;
    memset(&v, 0, sizeof v);
    v.type = GGUF_VALUE_STRING;
    v.v.str.data = s;
    v.v.str.len = strlen(s);
    return gguf_writer_add_kv(w, key, &v, err);
}

int gguf_writer_add_arr(gguf_writer *w, const char *key, uint32_t etype, const void *items,
                        uint64_t n, gguf_error *err)
{
    if (etype == GGUF_VALUE_STRING || etype == GGUF_VALUE_ARRAY || etype >= GGUF_VALUE_COUNT)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "%s: metadata '%s': gguf_writer_add_arr takes scalar items", w->path, key);
    gguf_value v;
    memset(&v, 0, sizeof v);
    v.type = GGUF_VALUE_ARRAY;
    v.v.arr.type = etype;
    v.v.arr.n = n;
    v.v.arr.raw = items;
    return gguf_writer_add_kv(w, key, &v, err);
}

int gguf_writer_add_arr_str(gguf_writer *w, const char *key, const char *const *items, uint64_t n,
                            gguf_error *err)
{
    gguf_str *strs = calloc(n ? n : 1, sizeof *strs);
    if (!strs)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    for (uint64_t i = 0; i < n; i++) {
        strs[i].data = items[i];
        strs[i].len = strlen(items[i]);
    }
    gguf_value v;
    memset(&v, 0, sizeof v);
    v.type = GGUF_VALUE_ARRAY;
    v.v.arr.type = GGUF_VALUE_STRING;
    v.v.arr.n = n;
    v.v.arr.strs = strs;
    int rc = gguf_writer_add_kv(w, key, &v, err);
    free(strs);
    return rc;
}

static uint64_t pad_to(uint64_t x, uint64_t a) { return (a - x % a) % a; }

int gguf_writer_add_tensor_at(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                              const int64_t *ne, uint64_t offset, gguf_error *err)
{
    int rc = not_after_header(w, err);
    if (rc)
        return rc;
    if (!name || n_dims > GGUF_MAX_DIMS || (n_dims && !ne))
        return gguf_fail(err, GGUF_E_BAD_SHAPE, GGUF_NO_OFFSET, "%s: tensor '%s': bad shape",
                         w->path, name ? name : "(null)");
    if (!gguf_type_is_valid(type))
        return gguf_fail(err, GGUF_E_BAD_TYPE, GGUF_NO_OFFSET, "%s: tensor '%s': type %u invalid",
                         w->path, name, type);
    if (offset == GGUF_WRITER_NEXT)
        offset = w->data_size;
    if (offset < w->data_size || offset % w->alignment)
        return gguf_fail(err, GGUF_E_BAD_OFFSET, GGUF_NO_OFFSET,
                         "%s: tensor '%s': data offset %llu must be a multiple of the alignment "
                         "(%u) at or after the end of the previous tensor (%llu)",
                         w->path, name, (unsigned long long)offset, w->alignment,
                         (unsigned long long)w->data_size);
    for (uint64_t i = 0; i < w->n_tensors; i++)
        if (strcmp(w->tensors[i].name, name) == 0)
            return gguf_fail(err, GGUF_E_DUPLICATE, GGUF_NO_OFFSET,
                             "%s: duplicate tensor name '%s'", w->path, name);
    wtensor t;
    memset(&t, 0, sizeof t);
    t.type = type;
    t.n_dims = n_dims;
    int64_t rows = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++)
        t.ne[d] = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] < 0)
            return gguf_fail(err, GGUF_E_BAD_SHAPE, GGUF_NO_OFFSET,
                             "%s: tensor '%s': ne[%u] is negative", w->path, name, d);
        t.ne[d] = ne[d];
        if (d > 0 && !gguf_mul_i64(rows, ne[d], &rows))
            return gguf_fail(err, GGUF_E_OVERFLOW, GGUF_NO_OFFSET,
                             "%s: tensor '%s': element count overflows", w->path, name);
    }
    uint64_t row_bytes;
    rc = gguf_type_row_bytes(type, t.ne[0], &row_bytes);
    if (rc || !gguf_mul_u64(row_bytes, (uint64_t)rows, &t.nbytes))
        return gguf_fail(err, rc ? rc : GGUF_E_OVERFLOW, GGUF_NO_OFFSET,
                         "%s: tensor '%s': ne[0] = %lld does not fit the %s block size or the "
                         "size overflows",
                         w->path, name, (long long)t.ne[0], gguf_type_name(type));
    t.offset = offset;
    uint64_t padded, end;
    if (!gguf_add_u64(t.nbytes, pad_to(t.nbytes, w->alignment), &padded) ||
        !gguf_add_u64(offset, padded, &end))
        return gguf_fail(err, GGUF_E_OVERFLOW, GGUF_NO_OFFSET, "%s: data size overflows",
                         w->path);
    if (w->n_tensors == w->cap_tensors) {
        uint64_t cap = w->cap_tensors ? w->cap_tensors * 2 : 256;
        wtensor *p = realloc(w->tensors, cap * sizeof *p);
        if (!p)
            return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
        w->tensors = p;
        w->cap_tensors = cap;
    }
    t.name = strdup(name);
    if (!t.name)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    w->tensors[w->n_tensors++] = t;
    w->data_size = end;
    return GGUF_OK;
}

int gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                           const int64_t *ne, gguf_error *err)
{
    return gguf_writer_add_tensor_at(w, name, type, n_dims, ne, GGUF_WRITER_NEXT, err);
}

static uint64_t header_bytes(const gguf_writer *w)
{
    uint64_t n = 4 + 4 + 8 + 8 + w->kv.n;
    for (uint64_t i = 0; i < w->n_tensors; i++)
        n += 8 + strlen(w->tensors[i].name) + 4 + 8ull * w->tensors[i].n_dims + 4 + 8;
    return n;
}

uint64_t gguf_writer_header_size(const gguf_writer *w) { return header_bytes(w); }

uint64_t gguf_writer_data_offset(const gguf_writer *w)
{
    uint64_t h = header_bytes(w);
    return h + pad_to(h, w->alignment);
}

uint64_t gguf_writer_total_size(const gguf_writer *w)
{
    return gguf_writer_data_offset(w) + w->data_size;
}

static int io_fail(gguf_writer *w, int e, const char *what, gguf_error *err)
{
    int code = (e == ENOSPC || e == EFBIG || e == EDQUOT) ? GGUF_E_NOSPACE : GGUF_E_IO;
    return gguf_fail_errno(err, code, e, "%s: %s", gguf_output_temp_path(w->out), what);
}

static int check_cancel(gguf_writer *w, gguf_error *err)
{
    if (w->opts.cancel && *w->opts.cancel)
        return gguf_fail(err, GGUF_E_INTERRUPTED, GGUF_NO_OFFSET,
                         "%s: interrupted; the partial output was removed", w->path);
    return GGUF_OK;
}

/*
 * Start the disk writing what was written up to `end`, every WRITEBACK_STEP
 * bytes (sync_file_range, which does not wait): the final fsync then waits
 * only for the last step, and the disk works while we copy instead of
 * after. Without it the whole output stays dirty in the page cache until
 * the commit's fsync, which then writes it all while nothing else happens.
 * Not with no_sync (the caller does not want the disk waited for at all).
 */
static void writeback_to(gguf_writer *w, uint64_t end)
{
    if (w->opts.no_sync || end < w->wb_pos + WRITEBACK_STEP)
        return;
    (void)sync_file_range(w->fd, (off_t)w->wb_pos, (off_t)(end - w->wb_pos),
                          SYNC_FILE_RANGE_WRITE);
    w->wb_pos = end;
}

/* The buffer to the file; with piece > 0 in writes that end at the file's
 * multiples of piece (see SHIFT_PIECE). */
static int flush_buf_in(gguf_writer *w, uint64_t piece, gguf_error *err)
{
    uint64_t done = 0;
    while (done < w->buf_n) {
        uint64_t n = w->buf_n - done;
        if (piece && n > piece - (w->buf_pos + done) % piece)
            n = piece - (w->buf_pos + done) % piece;
        ssize_t k = pwrite(w->fd, w->buf + done, n, (off_t)(w->buf_pos + done));
        if (k < 0) {
            if (errno == EINTR) {
                int rc = check_cancel(w, err);
                if (rc)
                    return rc;
                continue;
            }
            return io_fail(w, errno, "write failed", err);
        }
        done += (uint64_t)k;
    }
    w->buf_pos += w->buf_n;
    w->buf_n = 0;
    writeback_to(w, w->buf_pos);
    return GGUF_OK;
}

static int flush_buf(gguf_writer *w, gguf_error *err)
{
    return flush_buf_in(w, 0, err);
}

static int emit(gguf_writer *w, const void *p, uint64_t n, gguf_error *err)
{
    const uint8_t *s = p;
    while (n) {
        if (w->buf_n == WBUF_SIZE) {
            int rc = flush_buf(w, err);
            if (rc)
                return rc;
        }
        uint64_t k = WBUF_SIZE - w->buf_n < n ? WBUF_SIZE - w->buf_n : n;
        if (s)
            memcpy(w->buf + w->buf_n, s, k);
        else
            memset(w->buf + w->buf_n, 0, k);
        w->buf_n += k;
        w->out_pos += k;
        if (s)
            s += k;
        n -= k;
    }
    return GGUF_OK;
}

/* Bring the output up to file position `to` (>= out_pos): zeros for padding,
 * a hole for a gap of HOLE_MIN bytes or more (finish sets the file length). */
static int fill_to(gguf_writer *w, uint64_t to, gguf_error *err)
{
    uint64_t n = to - w->out_pos;
    if (n < HOLE_MIN)
        return emit(w, NULL, n, err);
    int rc = flush_buf(w, err);
    if (rc)
        return rc;
    w->out_pos = to;
    w->buf_pos = to;
    return GGUF_OK;
}

int gguf_writer_write_header(gguf_writer *w, gguf_error *err)
{
    if (w->header_done)
        return GGUF_OK;
    bytes h = {0};
    int rc = bytes_put(&h, "GGUF", 4);
    if (!rc)
        rc = put_u32(&h, w->opts.gguf_version);
    if (!rc)
        rc = put_u64(&h, w->n_tensors);
    if (!rc)
        rc = put_u64(&h, w->n_kv);
    if (!rc)
        rc = bytes_put(&h, w->kv.p, w->kv.n);
    for (uint64_t i = 0; !rc && i < w->n_tensors; i++) {
        const wtensor *t = &w->tensors[i];
        rc = put_str(&h, t->name, strlen(t->name));
        if (!rc)
            rc = put_u32(&h, t->n_dims);
        for (uint32_t d = 0; !rc && d < t->n_dims; d++)
            rc = put_u64(&h, (uint64_t)t->ne[d]);
        if (!rc)
            rc = put_u32(&h, t->type);
        if (!rc)
            rc = put_u64(&h, t->offset);
    }
    if (rc) {
        free(h.p);
        return gguf_fail(err, rc, GGUF_NO_OFFSET, "%s: out of memory", w->path);
    }
    w->header_size = h.n;
    w->data_offset = h.n + pad_to(h.n, w->alignment);
    rc = emit(w, h.p, h.n, err);
    free(h.p);
    if (!rc)
        rc = emit(w, NULL, w->data_offset - w->header_size, err);
    if (rc)
        return rc;
    w->header_done = true;
    w->cur = 0;
    w->cur_done = 0;
    return GGUF_OK;
}

/* Step over finished tensors (zero-sized ones included); their padding is
 * filled when the next bytes are written. */
static void advance(gguf_writer *w)
{
    while (w->cur < w->n_tensors && w->cur_done == w->tensors[w->cur].nbytes) {
        w->cur++;
        w->cur_done = 0;
    }
}

static int data_room(gguf_writer *w, uint64_t n, gguf_error *err)
{
    int rc = gguf_writer_write_header(w, err);
    if (!rc)
        advance(w);
    if (!rc)
        rc = check_cancel(w, err);
    if (!rc && n && w->cur >= w->n_tensors)
        rc = gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                       "%s: more tensor data written than the tensor infos declare", w->path);
    return rc;
}

/* Before the first byte of the current tensor: fill up to its start. */
static int to_current(gguf_writer *w, gguf_error *err)
{
    if (w->cur_done)
        return GGUF_OK;
    return fill_to(w, w->data_offset + w->tensors[w->cur].offset, err);
}

int gguf_writer_write(gguf_writer *w, const void *data, uint64_t n, gguf_error *err)
{
    const uint8_t *p = data;
    int rc = data_room(w, n, err);
    while (!rc && n) {
        const wtensor *t = &w->tensors[w->cur];
        uint64_t k = t->nbytes - w->cur_done < n ? t->nbytes - w->cur_done : n;
        if ((rc = to_current(w, err)) || (rc = emit(w, p, k, err)))
            break;
        w->cur_done += k;
        p += k;
        n -= k;
        rc = data_room(w, n, err);
    }
    return rc;
}

/*
 * Where source and destination agree modulo a page or more, the first kernel
 * copies stop at the next block boundary, then at the next boundary of the
 * largest power of two (up to COPY_ALIGN) they agree modulo:
 * - file systems that share extents (XFS, btrfs) refuse a clone whose start
 *   is not block-aligned on both sides, and then copy the whole request;
 * - a kernel copy is written in pipe-sized pieces from its start (64 KiB);
 *   measured on Linux 6.18 ext4, a 256 MiB copy starting at a destination
 *   offset that is 4 KiB- but not 64 KiB-aligned took 1.3 s with its fsync,
 *   against 0.85-0.94 s from a 64 KiB-aligned one (docs/benchmarks.md).
 * Both heads are block-aligned ranges, so the clone still covers them.
 */
#define COPY_ALIGN (2ull << 20)
static uint64_t head_chunk(const gguf_writer *w, uint64_t off, uint64_t chunk)
{
    uint64_t x = off ^ w->out_pos, agree = x ? (x & (~x + 1)) : COPY_ALIGN;
    if (agree > COPY_ALIGN)
        agree = COPY_ALIGN;
    if (agree < 4096)
        return chunk; /* shifted by less than a page: nothing lines up */
    uint64_t step = (w->out_pos % w->blk && agree >= w->blk) ? w->blk : agree;
    uint64_t head = (step - w->out_pos % step) % step;
    return head && head < chunk ? head : chunk;
}

/*
 * A copy whose source and destination disagree below the page (the default
 * contiguous merge: a part's data lands shifted by the difference of the
 * headers) costs a kernel copy 15-40% more than an aligned one on Linux
 * 6.18 ext4 (every source page straddles two destination pages). On a local
 * file system such copies go through pread into our buffer (512 KiB at a
 * time, still in L2) and pwrite in pieces that end at the destination's
 * 128 KiB boundaries. The page cache takes a folio as large as the write: on
 * a VM that hands freed memory back to its host (free page reporting) large
 * folios come from memory the host must fault in again. Merging 1 GiB there
 * (12 runs each, every order of the three): 256 KiB pieces 0.53-1.28 s
 * (median 0.79), 128 KiB 0.49-0.79 s (0.59), 64 KiB 0.54-0.82 s and once
 * 2.96 s (0.64); 2 MiB pieces took 4.1-4.6 s on that VM in an earlier series
 * (docs/benchmarks.md). On the 16-core device machine 2 MiB pieces took
 * 1.03 s (median of 5) against 1.18 s shifted and 1.00 s aligned through
 * copy_file_range.
 */
#define SHIFT_PIECE (128ull << 10)
#define SHIFT_READ (512ull << 10)

/* Copy [off, off+n) of fd to the output at w->out_pos, in the kernel where possible. */
static int copy_range(gguf_writer *w, int fd, uint64_t off, uint64_t n, gguf_error *err)
{
    const bool shifted = ((off ^ w->out_pos) & 4095) != 0;
    bool try_cfr = !(shifted && w->local_fs);
    while (n) {
        int rc = check_cancel(w, err);
        if (rc)
            return rc;
        uint64_t chunk = n < COPY_CHUNK ? n : COPY_CHUNK;
        chunk = head_chunk(w, off, chunk);
        if (try_cfr) {
            loff_t in = (loff_t)off, outp = (loff_t)w->out_pos;
            ssize_t k = copy_file_range(fd, &in, w->fd, &outp, chunk, 0);
            if (k > 0) {
                off += (uint64_t)k;
                w->out_pos += (uint64_t)k;
                n -= (uint64_t)k;
                writeback_to(w, w->out_pos);
                continue;
            }
            if (k == 0)
                return gguf_fail(err, GGUF_E_TRUNCATED, off,
                                 "%s: input ended while copying (file shrank?)", w->path);
            if (errno == EINTR)
                continue;
            if (errno != EXDEV && errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP &&
                errno != EBADF)
                return io_fail(w, errno, "copy failed", err);
            try_cfr = false; /* fall back to pread/pwrite below */
        }
        uint64_t k = chunk < WBUF_SIZE ? chunk : WBUF_SIZE;
        if (shifted && k > SHIFT_READ - w->out_pos % SHIFT_READ)
            k = SHIFT_READ - w->out_pos % SHIFT_READ;
        ssize_t r = pread(fd, w->buf, k, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return gguf_fail_errno(err, GGUF_E_IO, errno, "%s: read of the input failed", w->path);
        if (r == 0)
            return gguf_fail(err, GGUF_E_TRUNCATED, off,
                             "%s: input ended while copying (file shrank?)", w->path);
        w->buf_n = (uint64_t)r;
        w->buf_pos = w->out_pos;
        if ((rc = flush_buf_in(w, shifted ? SHIFT_PIECE : 0, err)))
            return rc;
        w->out_pos += (uint64_t)r;
        off += (uint64_t)r;
        n -= (uint64_t)r;
    }
    return GGUF_OK;
}

/* Copy preserving holes: data extents are copied, holes only move the position. */
static int copy_sparse(gguf_writer *w, int fd, uint64_t off, uint64_t n, gguf_error *err)
{
    uint64_t end = off + n;
    /* SEEK_DATA past the end of a file that shrank reports ENXIO, the same as a
     * trailing hole: without this check a truncated input became zeros. */
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size < end)
        return gguf_fail(err, GGUF_E_TRUNCATED, (uint64_t)st.st_size,
                         "%s: input ended while copying (file shrank to %llu bytes?)", w->path,
                         (unsigned long long)st.st_size);
    while (off < end) {
        off_t d = lseek(fd, (off_t)off, SEEK_DATA);
        if (d < 0 && errno == ENXIO)
            d = (off_t)end; /* only a hole remains */
        else if (d < 0)
            return copy_range(w, fd, off, end - off, err); /* no SEEK_DATA here */
        uint64_t data = (uint64_t)d < end ? (uint64_t)d : end;
        w->out_pos += data - off; /* the hole */
        off = data;
        if (off >= end)
            break;
        off_t h = lseek(fd, (off_t)off, SEEK_HOLE);
        uint64_t hole = (h < 0 || (uint64_t)h > end) ? end : (uint64_t)h;
        int rc = copy_range(w, fd, off, hole - off, err);
        if (rc)
            return rc;
        off = hole;
    }
    return GGUF_OK;
}

int gguf_writer_copy_fd(gguf_writer *w, int fd, uint64_t offset, uint64_t n, gguf_error *err)
{
    int rc = data_room(w, n, err);
    while (!rc && n) {
        const wtensor *t = &w->tensors[w->cur];
        uint64_t k = t->nbytes - w->cur_done < n ? t->nbytes - w->cur_done : n;
        if ((rc = to_current(w, err)) || (rc = flush_buf(w, err)))
            break;
        if ((rc = copy_sparse(w, fd, offset, k, err)))
            break;
        w->buf_pos = w->out_pos;
        w->cur_done += k;
        offset += k;
        n -= k;
        rc = data_room(w, n, err);
    }
    return rc;
}

int gguf_writer_copy_range(gguf_writer *w, int fd, uint64_t in_offset, uint64_t out_offset,
                           uint64_t n, gguf_error *err)
{
    int rc = data_room(w, n, err);
    if (rc || !n)
        return rc;
    const wtensor *t = &w->tensors[w->cur];
    uint64_t pos = w->out_pos - w->data_offset, end;
    /* The range starts where the data stands (continuing a tensor or a range
     * that ended in padding) or further on in the padding before the current
     * tensor; it never skips bytes of a tensor. */
    bool ok = gguf_add_u64(out_offset, n, &end) && end <= w->data_size && out_offset >= pos &&
              (w->cur_done ? out_offset == pos : out_offset <= t->offset);
    if (!ok)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "%s: copy of data [%llu, %llu) does not continue the data written so "
                         "far (%llu bytes; tensor '%s' next)",
                         w->path, (unsigned long long)out_offset,
                         (unsigned long long)(out_offset + n), (unsigned long long)pos, t->name);
    if ((rc = fill_to(w, w->data_offset + out_offset, err)) || (rc = flush_buf(w, err)) ||
        (rc = copy_sparse(w, fd, in_offset, n, err)))
        return rc;
    w->buf_pos = w->out_pos;
    while (w->cur < w->n_tensors && w->tensors[w->cur].offset + w->tensors[w->cur].nbytes <= end)
        w->cur++;
    w->cur_done = 0;
    if (w->cur < w->n_tensors && end > w->tensors[w->cur].offset)
        w->cur_done = end - w->tensors[w->cur].offset;
    return GGUF_OK;
}

int gguf_writer_finish(gguf_writer *w, gguf_error *err)
{
    int rc = gguf_writer_write_header(w, err);
    if (rc)
        return rc;
    advance(w);
    if (w->cur < w->n_tensors)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "%s: tensor '%s': only %llu of %llu bytes were written", w->path,
                         w->tensors[w->cur].name, (unsigned long long)w->cur_done,
                         (unsigned long long)w->tensors[w->cur].nbytes);
    if ((rc = fill_to(w, w->data_offset + w->data_size, err)) || (rc = flush_buf(w, err)))
        return rc;
    /* A trailing hole leaves the file short: set its length explicitly. */
    if (ftruncate(w->fd, (off_t)w->out_pos) != 0)
        return io_fail(w, errno, "cannot set the file length", err);
    if ((rc = check_cancel(w, err)))
        return rc;
    /* fsync, the cancel flag once more, rename (no replace unless overwrite),
     * fsync of the folder. */
    return gguf_output_commit(w->out, err);
}
