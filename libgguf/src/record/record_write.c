/*
 * Record writer. The forward pass hands over captures one at a time, before
 * the set of tensor names is known, but a GGUF header lists every tensor before
 * any data. So the floats go to an unlinked scratch file beside the output as
 * they arrive (memory stays at one capture), and finish writes the header with
 * the library writer and copies the data over in the kernel (copy_fd).
 *
 * With zstd, the plain GGUF is first finished under a scratch name in the same
 * folder (no fsync: it is never the output), then compressed into a second
 * temporary file which is fsynced and renamed into place, so the compressed
 * record is as atomic as a plain one.
 */
#include "util/error_lib.h"
#include "gguf/output.h"
#include "gguf/record.h"
#include "gguf/write.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

typedef struct rcap {
    char *name;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    uint64_t nbytes, spill_off;
} rcap;

struct gguf_record_writer {
    char *path;
    gguf_record_opts opts;
    /* owned copies of the metadata */
    char *model_digest, *backend, *precision, *plan_digest, *arch, *fault, *version;
    int32_t *tokens;
    uint64_t n_tokens;
    uint32_t tp, ep, ranks;

    int spill_fd;
    uint64_t spill_size;
    rcap *caps;
    int64_t n_caps, cap_caps;
    /* open-addressing set of names, for duplicates: indices + 1, 0 = empty */
    int64_t *slots;
    uint64_t n_slots;
    bool finished;
};

static char *dup_or_empty(const char *s) { return strdup(s ? s : ""); }

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Unlinked scratch file in the output's folder (same file system as the output). */
static int open_spill(gguf_record_writer *w, gguf_error *err)
{
    char *copy = strdup(w->path);
    if (!copy)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    const char *dir = dirname(copy);
    w->spill_fd = open(dir, O_RDWR | O_TMPFILE | O_CLOEXEC, 0600);
    if (w->spill_fd < 0) {
        /* No O_TMPFILE on this file system: a named file, unlinked at once. */
        size_t n = strlen(dir) + 48;
        char *tmp = malloc(n);
        if (!tmp) {
            free(copy);
            return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
        }
        snprintf(tmp, n, "%s/.record-spill.XXXXXX", dir);
        w->spill_fd = mkstemp(tmp);
        if (w->spill_fd >= 0)
            unlink(tmp);
        free(tmp);
    }
    free(copy);
    if (w->spill_fd < 0)
        return gguf_fail_errno(err, errno == ENOSPC ? GGUF_E_NOSPACE : GGUF_E_IO, errno,
                               "%s: cannot create a scratch file beside the output", w->path);
    return GGUF_OK;
}

int gguf_record_writer_create(gguf_record_writer **out, const char *path,
                              const gguf_record_meta *meta, const gguf_record_opts *opts,
                              gguf_error *err)
{
    if (opts && opts->version > GGUF_RECORD_OPTS_VERSION) {
        if (out)
            *out = NULL;
        return gguf_opts_version_fail(opts->version, GGUF_RECORD_OPTS_VERSION, "gguf_record_opts", err);
    }
    gguf_error_clear(err);
    if (!out || !path || !*path || !meta)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_record_writer_create: bad args");
    *out = NULL;
    uint32_t tp = meta->tp ? meta->tp : 1, ep = meta->ep ? meta->ep : 1;
    uint64_t ranks = meta->ranks ? meta->ranks : (uint64_t)tp * ep;
    if (ranks > GGUF_RECORD_MAX_RANKS || tp > GGUF_RECORD_MAX_RANKS || ep > GGUF_RECORD_MAX_RANKS)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "%s: %llu ranks (tp %u, ep %u): over the limit of %u", path,
                         (unsigned long long)ranks, tp, ep, GGUF_RECORD_MAX_RANKS);
    if (meta->n_tokens && !meta->tokens)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "%s: tokens missing", path);
    gguf_record_writer *w = calloc(1, sizeof *w);
    if (!w)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    w->spill_fd = -1;
    if (opts)
        w->opts = *opts;
    w->tp = tp;
    w->ep = ep;
    w->ranks = (uint32_t)ranks;
    w->path = strdup(path);
    w->model_digest = dup_or_empty(meta->model_digest);
    w->backend = dup_or_empty(meta->backend);
    w->precision = dup_or_empty(meta->precision);
    w->plan_digest = dup_or_empty(meta->plan_digest);
    w->arch = dup_or_empty(meta->arch);
    w->fault = dup_or_empty(meta->fault);
    w->version = dup_or_empty(meta->ggufkit_version ? meta->ggufkit_version
                                                    : GGUF_RECORD_LIB_VERSION);
    w->n_tokens = meta->n_tokens;
    w->tokens = malloc(meta->n_tokens ? meta->n_tokens * sizeof *w->tokens : 1);
    int rc;
    if (!w->path || !w->model_digest || !w->backend || !w->precision || !w->plan_digest ||
        !w->arch || !w->fault || !w->version || !w->tokens) {
        rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
        goto fail;
    }
    if (meta->n_tokens)
        memcpy(w->tokens, meta->tokens, meta->n_tokens * sizeof *w->tokens);
    struct stat st;
    if (!w->opts.overwrite && lstat(path, &st) == 0) {
        rc = gguf_fail(err, GGUF_E_EXISTS, GGUF_NO_OFFSET,
                       "%s: the output exists (refusing to overwrite it)", path);
        goto fail;
    }
    if ((rc = open_spill(w, err)))
        goto fail;
    *out = w;
    return GGUF_OK;
fail:
    gguf_record_writer_free(w);
    return rc;
}

void gguf_record_writer_free(gguf_record_writer *w)
{
    if (!w)
        return;
    if (w->spill_fd >= 0)
        close(w->spill_fd);
    for (int64_t i = 0; i < w->n_caps; i++)
        free(w->caps[i].name);
    free(w->caps);
    free(w->slots);
    free(w->path);
    free(w->model_digest);
    free(w->backend);
    free(w->precision);
    free(w->plan_digest);
    free(w->arch);
    free(w->fault);
    free(w->version);
    free(w->tokens);
    free(w);
}

int64_t gguf_record_writer_count(const gguf_record_writer *w) { return w ? w->n_caps : 0; }

static int grow_slots(gguf_record_writer *w)
{
    uint64_t n = w->n_slots ? w->n_slots * 2 : 256;
    int64_t *s = calloc(n, sizeof *s);
    if (!s)
        return GGUF_E_NOMEM;
    for (int64_t i = 0; i < w->n_caps; i++) {
        uint64_t h = name_hash(w->caps[i].name) & (n - 1);
        while (s[h])
            h = (h + 1) & (n - 1);
        s[h] = i + 1;
    }
    free(w->slots);
    w->slots = s;
    w->n_slots = n;
    return GGUF_OK;
}

static bool name_taken(const gguf_record_writer *w, const char *name)
{
    if (!w->n_slots)
        return false;
    uint64_t h = name_hash(name) & (w->n_slots - 1);
    for (; w->slots[h]; h = (h + 1) & (w->n_slots - 1))
        if (!strcmp(w->caps[w->slots[h] - 1].name, name))
            return true;
    return false;
}

static int spill_write(gguf_record_writer *w, const void *p, size_t n, gguf_error *err)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t k = pwrite(w->spill_fd, b, n, (off_t)w->spill_size);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return gguf_fail_errno(err, errno == ENOSPC ? GGUF_E_NOSPACE : GGUF_E_IO,
                                   k < 0 ? errno : EIO, "%s: cannot write the scratch file",
                                   w->path);
        b += k;
        n -= (size_t)k;
        w->spill_size += (uint64_t)k;
    }
    return GGUF_OK;
}

/* Checks and bookkeeping shared by both add flavours; data goes in after. */
static int add_begin(gguf_record_writer *w, const char *point, uint32_t rank, uint32_t n_dims,
                     const int64_t *ne, const void *data, rcap *c, gguf_error *err)
{
    gguf_error_clear(err);
    if (!w || !point || !ne || !data)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_record_add: bad args");
    if (w->finished)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "%s: record already finished",
                         w->path);
    if (w->opts.cancel && *w->opts.cancel)
        return gguf_fail(err, GGUF_E_INTERRUPTED, GGUF_NO_OFFSET, "%s: interrupted", w->path);
    if (!*point || strchr(point, '@'))
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "%s: capture '%s': a point name is non-empty and has no '@'", w->path,
                         point);
    if (rank >= w->ranks)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "%s: capture '%s': rank %u out of range (record has %u ranks)",
                         w->path, point, rank, w->ranks);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "%s: capture '%s': %u dimensions", w->path, point, n_dims);
    char name[GGUF_RECORD_MAX_NAME + 16];
    int len = w->ranks > 1 ? snprintf(name, sizeof name, "%s@%u", point, rank)
                           : snprintf(name, sizeof name, "%s", point);
    if (len < 0 || (size_t)len > GGUF_RECORD_MAX_NAME)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "%s: capture '%s': name longer than %u bytes", w->path, point,
                         GGUF_RECORD_MAX_NAME);
    uint64_t n = 1;
    memset(c, 0, sizeof *c);
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        c->ne[d] = d < n_dims ? ne[d] : 1;
        if (c->ne[d] <= 0)
            return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                             "%s: capture '%s': ne[%u] = %lld", w->path, point, d,
                             (long long)c->ne[d]);
        if (!gguf_mul_u64(n, (uint64_t)c->ne[d], &n))
            return gguf_fail(err, GGUF_E_OVERFLOW, GGUF_NO_OFFSET,
                             "%s: capture '%s': size overflows", w->path, point);
    }
    if (!gguf_mul_u64(n, 4, &c->nbytes) || c->nbytes > (uint64_t)SIZE_MAX / 2)
        return gguf_fail(err, GGUF_E_OVERFLOW, GGUF_NO_OFFSET,
                         "%s: capture '%s': size overflows", w->path, point);
    c->n_dims = n_dims;
    if (name_taken(w, name))
        return gguf_fail(err, GGUF_E_DUPLICATE, GGUF_NO_OFFSET,
                         "%s: capture '%s' rank %u added twice", w->path, point, rank);
    if (w->n_caps == w->cap_caps) {
        int64_t cap = w->cap_caps ? w->cap_caps * 2 : 64;
        rcap *p = realloc(w->caps, (size_t)cap * sizeof *p);
        if (!p)
            return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
        w->caps = p;
        w->cap_caps = cap;
    }
    if ((uint64_t)(w->n_caps + 1) * 2 > w->n_slots && grow_slots(w))
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    c->name = strdup(name);
    if (!c->name)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    c->spill_off = w->spill_size;
    return GGUF_OK;
}

static void add_commit(gguf_record_writer *w, const rcap *c)
{
    w->caps[w->n_caps] = *c;
    uint64_t h = name_hash(c->name) & (w->n_slots - 1);
    while (w->slots[h])
        h = (h + 1) & (w->n_slots - 1);
    w->slots[h] = ++w->n_caps;
}

int gguf_record_add(gguf_record_writer *w, const char *point, uint32_t rank, uint32_t n_dims,
                    const int64_t *ne, const float *data, gguf_error *err)
{
    rcap c;
    int rc = add_begin(w, point, rank, n_dims, ne, data, &c, err);
    if (rc)
        return rc;
    if ((rc = spill_write(w, data, (size_t)c.nbytes, err))) {
        free(c.name);
        return rc;
    }
    add_commit(w, &c);
    return GGUF_OK;
}

int gguf_record_add_f64(gguf_record_writer *w, const char *point, uint32_t rank,
                        uint32_t n_dims, const int64_t *ne, const double *data,
                        gguf_error *err)
{
    rcap c;
    int rc = add_begin(w, point, rank, n_dims, ne, data, &c, err);
    if (rc)
        return rc;
    float buf[4096];
    uint64_t n = c.nbytes / 4;
    for (uint64_t i = 0; i < n && !rc;) {
        uint64_t k = n - i < 4096 ? n - i : 4096;
        for (uint64_t j = 0; j < k; j++)
            buf[j] = (float)data[i + j];
        rc = spill_write(w, buf, (size_t)k * 4, err);
        i += k;
    }
    if (rc) {
        free(c.name);
        return rc;
    }
    add_commit(w, &c);
    return GGUF_OK;
}

/* The plain GGUF record, through the library writer. */
static int write_gguf(gguf_record_writer *w, const char *path, bool no_sync, bool overwrite,
                      gguf_error *err)
{
    gguf_writer_opts wo = {.overwrite = overwrite, .no_sync = no_sync, .cancel = w->opts.cancel};
    gguf_writer *gw = NULL;
    int rc = gguf_writer_create(&gw, path, &wo, err);
    if (rc)
        return rc;
    if ((rc = gguf_writer_add_str(gw, GGUF_RKEY_TYPE, GGUF_RECORD_TYPE, err)) ||
        (rc = gguf_writer_add_u32(gw, GGUF_RKEY_VERSION, GGUF_RECORD_VERSION, err)) ||
        (rc = gguf_writer_add_str(gw, GGUF_RKEY_VERSION_STR, w->version, err)) ||
        (rc = gguf_writer_add_str(gw, GGUF_RKEY_MODEL_DIGEST, w->model_digest, err)) ||
        (rc = gguf_writer_add_str(gw, GGUF_RKEY_ARCH, w->arch, err)) ||
        (rc = gguf_writer_add_arr(gw, GGUF_RKEY_TOKENS, GGUF_VALUE_INT32, w->tokens, w->n_tokens,
                                  err)) ||
        (rc = gguf_writer_add_str(gw, GGUF_RKEY_BACKEND, w->backend, err)) ||
        (rc = gguf_writer_add_str(gw, GGUF_RKEY_PRECISION, w->precision, err)) ||
        (rc = gguf_writer_add_u32(gw, GGUF_RKEY_TP, w->tp, err)) ||
        (rc = gguf_writer_add_u32(gw, GGUF_RKEY_EP, w->ep, err)) ||
        (rc = gguf_writer_add_u32(gw, GGUF_RKEY_RANKS, w->ranks, err)) ||
        (rc = gguf_writer_add_str(gw, GGUF_RKEY_PLAN_DIGEST, w->plan_digest, err)) ||
        (rc = gguf_writer_add_str(gw, GGUF_RKEY_FAULT, w->fault, err)))
        goto done;
    for (int64_t i = 0; i < w->n_caps; i++)
        if ((rc = gguf_writer_add_tensor(gw, w->caps[i].name, GGUF_TYPE_F32, w->caps[i].n_dims,
                                         w->caps[i].ne, err)))
            goto done;
    for (int64_t i = 0; i < w->n_caps; i++)
        if ((rc = gguf_writer_copy_fd(gw, w->spill_fd, w->caps[i].spill_off, w->caps[i].nbytes,
                                      err)))
            goto done;
    rc = gguf_writer_finish(gw, err);
done:
    gguf_writer_free(gw);
    return rc;
}

static int temp_beside(const char *path, const char *suffix, char **out_path, int *out_fd,
                       gguf_error *err)
{
    char *dcopy = strdup(path), *bcopy = strdup(path);
    size_t n = strlen(path) + 64;
    char *tmp = malloc(n);
    int rc = GGUF_OK;
    *out_fd = -1;
    if (!dcopy || !bcopy || !tmp) {
        free(tmp);
        rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
        goto done;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    for (unsigned attempt = 0; attempt < 100; attempt++) {
        unsigned r = (unsigned)ts.tv_nsec ^ ((unsigned)getpid() << 8) ^ (attempt * 2654435761u);
        snprintf(tmp, n, "%s/.%s.%08x%s", dirname(dcopy), basename(bcopy), r, suffix);
        strcpy(dcopy, path);
        strcpy(bcopy, path);
        *out_fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (*out_fd >= 0 || errno != EEXIST)
            break;
    }
    if (*out_fd < 0) {
        rc = gguf_fail_errno(err, errno == ENOSPC ? GGUF_E_NOSPACE : GGUF_E_IO, errno,
                             "%s: cannot create a temporary file beside the output", path);
        free(tmp);
        tmp = NULL;
    }
    *out_path = tmp;
done:
    free(dcopy);
    free(bcopy);
    return rc;
}

/* Compress the finished plain record at raw into path, atomically. */
static int compress_into_place(gguf_record_writer *w, const char *raw, gguf_error *err)
{
    int rc = GGUF_OK, in_fd = -1;
    gguf_output *out = NULL;
    void *map = MAP_FAILED;
    size_t size = 0;
    ZSTD_CCtx *cctx = NULL;
    uint8_t *obuf = NULL;
    struct stat st;

    in_fd = open(raw, O_RDONLY | O_CLOEXEC);
    if (in_fd < 0 || fstat(in_fd, &st) != 0) {
        rc = gguf_fail_errno(err, GGUF_E_IO, errno, "%s: cannot reopen the plain record", raw);
        goto done;
    }
    size = (size_t)st.st_size;
    map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, in_fd, 0);
    if (map == MAP_FAILED) {
        rc = gguf_fail_errno(err, GGUF_E_IO, errno, "%s: cannot map the plain record", raw);
        goto done;
    }
    gguf_output_opts oo = {.overwrite = w->opts.overwrite, .no_sync = w->opts.no_sync};
    if ((rc = gguf_output_create(&out, w->path, &oo, err)))
        goto done;
    cctx = ZSTD_createCCtx();
    size_t ocap = ZSTD_CStreamOutSize();
    obuf = malloc(ocap);
    if (!cctx || !obuf) {
        rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
        goto done;
    }
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel,
                           w->opts.zstd_level ? w->opts.zstd_level : 3);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
    ZSTD_CCtx_setPledgedSrcSize(cctx, size); /* the reader learns the size from the frame */
    ZSTD_inBuffer in = {map, size, 0};
    for (;;) {
        if (w->opts.cancel && *w->opts.cancel) {
            rc = gguf_fail(err, GGUF_E_INTERRUPTED, GGUF_NO_OFFSET, "%s: interrupted", w->path);
            goto done;
        }
        ZSTD_outBuffer ob = {obuf, ocap, 0};
        size_t left = ZSTD_compressStream2(cctx, &ob, &in, ZSTD_e_end);
        if (ZSTD_isError(left)) {
            rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "%s: zstd: %s", w->path,
                           ZSTD_getErrorName(left));
            goto done;
        }
        if ((rc = gguf_output_write(out, obuf, ob.pos, err)))
            goto done;
        if (!left)
            break;
    }
    rc = gguf_output_commit(out, err);
done:
    gguf_output_free(out);
    if (map != MAP_FAILED)
        munmap(map, size);
    if (in_fd >= 0)
        close(in_fd);
    ZSTD_freeCCtx(cctx);
    free(obuf);
    return rc;
}

int gguf_record_writer_finish(gguf_record_writer *w, gguf_error *err)
{
    gguf_error_clear(err);
    if (!w || w->finished)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "gguf_record_writer_finish: bad args or already finished");
    int rc;
    if (!w->opts.zstd) {
        rc = write_gguf(w, w->path, w->opts.no_sync, w->opts.overwrite, err);
    } else {
        /* Reserve a unique scratch name, then let the writer create it (it refuses
         * to replace files, so remove the placeholder first). */
        char *raw = NULL;
        int fd;
        if ((rc = temp_beside(w->path, ".raw", &raw, &fd, err)))
            return rc;
        close(fd);
        unlink(raw);
        rc = write_gguf(w, raw, true, false, err);
        if (!rc)
            rc = compress_into_place(w, raw, err);
        unlink(raw);
        free(raw);
    }
    if (!rc)
        w->finished = true;
    return rc;
}
