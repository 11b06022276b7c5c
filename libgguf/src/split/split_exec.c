/*
 * Execution of merge and split plans on top of gguf_writer: output checks,
 * kernel copies of tensor data, verification by XXH3-128 digests and the
 * ordering that makes --delete-inputs safe:
 *
 *   check outputs (inode, existence, free space)          nothing written yet
 *   for each output: temp file, header, copy, fsync, rename, fsync folder
 *   digest inputs and outputs, compare                     outputs complete
 *   only then: unlink the input parts, fsync their folder
 *
 * Any failure before the last step removes every temporary file and every
 * output this call renamed into place; the inputs are only read.
 */
#include "util/cpus.h"
#include "util/error_lib.h"
#include "gguf/output.h"
#include "gguf/split.h"
#include "gguf/write.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define COPY_STEP (256ull << 20)  /* bytes per copy call: progress and cancel granularity */
#define HASH_STEP (64ull << 20)   /* bytes per digest update from memory */
#define READ_STEP (1u << 20)      /* bytes per pread: small enough to stay in cache for the hash */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bool cancelled(const gguf_split_job_opts *o) { return o->cancel && *o->cancel; }

/* Folder of a path, in a malloc'd string. */
static char *dir_of(const char *path)
{
    char *c = strdup(path);
    if (!c)
        return NULL;
    char *d = strdup(dirname(c));
    free(c);
    return d;
}

/* ---------------------------------------------------------------- checks */

static uint64_t allocated_bytes(const gguf_file *f)
{
    struct stat st;
    if (fstat(gguf_file_fd(f), &st) != 0)
        return gguf_file_size(f);
    uint64_t a = (uint64_t)st.st_blocks * 512u;
    return a < gguf_file_size(f) ? a : gguf_file_size(f);
}

/*
 * Does the file system of folder dir share blocks with every input part (same
 * file system, and it clones)? Probed by cloning the first block of each part
 * into an unnamed temporary file there (O_TMPFILE: nothing to clean up).
 */
static bool shares_all(const gguf_set *in, const char *dir)
{
    int t = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (t < 0)
        return false;
    struct statvfs vfs;
    uint64_t bs = statvfs(dir, &vfs) == 0 && vfs.f_bsize ? vfs.f_bsize : 4096;
    bool ok = true;
    for (uint32_t i = 0; ok && i < gguf_set_part_count(in); i++) {
        const gguf_file *f = gguf_set_part(in, i);
        struct file_clone_range r = {.src_fd = gguf_file_fd(f),
                                     .src_offset = 0,
                                     .src_length = gguf_file_size(f) < bs ? 0 : bs,
                                     .dest_offset = (uint64_t)i * bs};
        /* src_length 0 clones to the end of a part smaller than a block */
        ok = r.src_fd >= 0 && ioctl(t, FICLONERANGE, &r) == 0;
    }
    close(t);
    return ok;
}

int gguf_split_check_outputs(const gguf_set *in, const gguf_split_plan *p, bool overwrite,
                             gguf_error *err)
{
    gguf_error_clear(err);
    if (!in || !p || !p->n_parts)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_split_check_outputs: bad args");
    uint32_t n_in = gguf_set_part_count(in);
    uint64_t alloc_in = 0, headers = 0;
    for (uint32_t i = 0; i < n_in; i++)
        alloc_in += allocated_bytes(gguf_set_part(in, i));
    for (uint32_t k = 0; k < p->n_parts; k++) {
        const char *out = p->parts[k].path;
        headers += p->parts[k].header_size + p->alignment;
        struct stat st, lst;
        if (stat(out, &st) == 0) {
            for (uint32_t i = 0; i < n_in; i++) {
                const gguf_file *f = gguf_set_part(in, i);
                struct stat ist;
                if (fstat(gguf_file_fd(f), &ist) == 0 && ist.st_dev == st.st_dev &&
                    ist.st_ino == st.st_ino)
                    return gguf_fail(err, GGUF_E_EXISTS, GGUF_NO_OFFSET,
                                     "%s: the output is the input part %u (%s); refusing to "
                                     "write over an input",
                                     out, i + 1, gguf_file_path(f));
            }
            if (S_ISDIR(st.st_mode))
                return gguf_fail(err, GGUF_E_EXISTS, GGUF_NO_OFFSET,
                                 "%s: the output is a folder; name the output file", out);
            if (!overwrite)
                return gguf_fail(err, GGUF_E_EXISTS, GGUF_NO_OFFSET,
                                 "%s: the output exists (use --force to replace it)", out);
        } else if (errno != ENOENT) {
            return gguf_fail_errno(err, GGUF_E_IO, errno, "%s: cannot check the output path",
                                   out);
        } else if (lstat(out, &lst) == 0 && !overwrite) {
            return gguf_fail(err, GGUF_E_EXISTS, GGUF_NO_OFFSET,
                             "%s: the output exists as a dangling symbolic link (use --force to "
                             "replace it)",
                             out);
        }
    }
    /* Outputs of one plan share a folder (one path, or one prefix). */
    char *dir = dir_of(p->parts[0].path);
    if (!dir)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    struct stat dst;
    int rc = GGUF_OK;
    if (stat(dir, &dst) != 0 || !S_ISDIR(dst.st_mode)) {
        rc = gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET,
                       "%s: the output folder %s does not exist", p->parts[0].path, dir);
        goto done;
    }
    struct statvfs vfs;
    if (statvfs(dir, &vfs) == 0) {
        /* Holes of sparse inputs stay holes in the outputs: count only what
         * the inputs really occupy, plus the new headers. */
        uint64_t need = alloc_in + headers;
        if (need > p->total_size)
            need = p->total_size;
        /* An aligned merge onto a file system that shares the inputs' blocks
         * writes only the headers and a block or two around each part's start
         * and end (and the file system's own metadata). */
        if (p->layout == GGUF_LAYOUT_ALIGNED && shares_all(in, dir)) {
            uint64_t bs = vfs.f_bsize ? (uint64_t)vfs.f_bsize : 4096;
            uint64_t small = headers + n_in * (2 * bs + p->alignment) + (1u << 20);
            if (small < need)
                need = small;
        }
        uint64_t avail = (uint64_t)vfs.f_bavail * (uint64_t)vfs.f_frsize;
        if (need > avail)
            rc = gguf_fail(err, GGUF_E_NOSPACE, GGUF_NO_OFFSET,
                           "%s: not enough free space: the output needs about %llu bytes, the "
                           "file system of %s has %llu available",
                           p->parts[0].path, (unsigned long long)need, dir,
                           (unsigned long long)avail);
    }
done:
    free(dir);
    return rc;
}

/* ---------------------------------------------------------------- writing */

static int add_u16(gguf_writer *w, const char *key, uint16_t x, gguf_error *err)
{
    gguf_value v;
    memset(&v, 0, sizeof v);
    v.type = GGUF_VALUE_UINT16;
    v.v.u16 = x;
    return gguf_writer_add_kv(w, key, &v, err);
}

/* Hash [off, off+n) of fd: data extents through a buffer, holes as zeros.
 * Returns 0 or an errno (ENODATA: the file ends early). */
static int hash_fd(const gguf_cancel_flag *cancel, atomic_ullong *done, gguf_hasher *h,
                   uint8_t *buf, const uint8_t *zeros, int fd, uint64_t off, uint64_t n)
{
    uint64_t end = off + n;
    while (off < end) {
        if (cancel && *cancel)
            return 0;
        off_t d = lseek(fd, (off_t)off, SEEK_DATA);
        uint64_t data = d < 0 ? (errno == ENXIO ? end : off) : (uint64_t)d;
        if (data > end)
            data = end;
        while (off < data) { /* a hole */
            uint64_t k = data - off < READ_STEP ? data - off : READ_STEP;
            gguf_hasher_update(h, zeros, (size_t)k);
            if (done)
                atomic_fetch_add(done, k);
            off += k;
        }
        if (off >= end)
            break;
        off_t e = lseek(fd, (off_t)off, SEEK_HOLE);
        uint64_t stop = (e < 0 || (uint64_t)e > end) ? end : (uint64_t)e;
        if (stop <= off)
            stop = end;
        while (off < stop) {
            if (cancel && *cancel)
                return 0;
            uint64_t k = stop - off < READ_STEP ? stop - off : READ_STEP;
            ssize_t r = pread(fd, buf, (size_t)k, (off_t)off);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                return r < 0 ? errno : ENODATA; /* the file shrank */
            gguf_hasher_update(h, buf, (size_t)r);
            if (done)
                atomic_fetch_add(done, (uint64_t)r);
            off += (uint64_t)r;
        }
    }
    return 0;
}

typedef struct copy_state {
    const gguf_split_job_opts *o;
    uint64_t done, total;
    uint64_t n_ranges;
    /* Digests of the input tensors, taken just before each chunk is copied: the
     * copy then reads the chunk from the page cache, so a verified merge of a
     * model larger than memory reads its inputs from disk once, not twice. */
    gguf_digest *in_digests; /* NULL: no digests */
    gguf_hasher *h;
    uint8_t *buf, *zeros;
} copy_state;

/* Are the n bytes of fd at off all zeros? Read with pread, not through the map:
 * an input that shrank must give an error later, not a SIGBUS here. */
static bool zero_bytes(int fd, uint64_t off, uint64_t n, uint8_t *buf)
{
    while (n) {
        ssize_t r = pread(fd, buf, (size_t)n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false; /* the tensor-by-tensor copy reports it */
        for (ssize_t k = 0; k < r; k++)
            if (buf[k])
                return false;
        off += (uint64_t)r;
        n -= (uint64_t)r;
    }
    return true;
}

/*
 * End of the run of tensors from i (before end) that one range copy carries:
 * tensors of one input part at the same offsets relative to tensor i as in the
 * output, with only zeros between them (their padding), so the copy gives the
 * same bytes as a tensor-by-tensor copy. A whole part, when it was written
 * with the same alignment (the usual case); a single tensor otherwise.
 */
static int64_t run_end(const gguf_set *in, const gguf_split_plan *p, int64_t i, int64_t end,
                       uint8_t *buf)
{
    const gguf_tensor *a = gguf_set_tensor_at(in, i);
    int fd = gguf_file_fd(gguf_set_part(in, a->part));
    int64_t j = i + 1;
    if (fd < 0) /* opened from memory: written from there, tensor by tensor */
        return j;
    for (; j < end; j++) {
        const gguf_tensor *prev = gguf_set_tensor_at(in, j - 1), *t = gguf_set_tensor_at(in, j);
        uint64_t prev_end = prev->file_offset + prev->nbytes;
        if (t->part != a->part || t->file_offset < prev_end ||
            t->file_offset - prev_end >= p->alignment ||
            t->file_offset - a->file_offset != p->offsets[j] - p->offsets[i] ||
            !zero_bytes(fd, prev_end, t->file_offset - prev_end, buf))
            break;
    }
    return j;
}

static int read_fail(const gguf_set *in, const gguf_tensor *t, int e, uint64_t at,
                     gguf_error *err)
{
    const char *path = gguf_file_path(gguf_set_part(in, t->part));
    if (e == ENODATA)
        return gguf_fail(err, GGUF_E_TRUNCATED, at,
                         "%s: input ended while reading tensor '%s' (file shrank?)", path,
                         t->name);
    return gguf_fail_errno(err, GGUF_E_IO, e, "%s: read failed", path);
}

/* Tensors [i, j) from memory (an input opened from a buffer): written through
 * the writer's buffer, digested on the way. */
static int write_from_memory(const gguf_set *in, gguf_writer *w, int64_t i, int64_t j,
                             copy_state *cs, gguf_error *err)
{
    int rc = GGUF_OK;
    for (; !rc && i < j; i++) {
        const gguf_tensor *t = gguf_set_tensor_at(in, i);
        if (cs->in_digests)
            gguf_hasher_reset(cs->h);
        for (uint64_t off = 0; !rc && off < t->nbytes; off += COPY_STEP) {
            uint64_t n = t->nbytes - off < COPY_STEP ? t->nbytes - off : COPY_STEP;
            if (cs->in_digests)
                gguf_hasher_update(cs->h, t->data + off, (size_t)n);
            if (!(rc = gguf_writer_write(w, t->data + off, n, err))) {
                cs->done += n;
                if (cs->o->progress)
                    cs->o->progress(cs->o->progress_ctx, GGUF_SPLIT_PHASE_COPY, cs->done,
                                    cs->total);
            }
        }
        if (!rc && cs->in_digests)
            gguf_hasher_final(cs->h, &cs->in_digests[i]);
    }
    return rc;
}

/*
 * Copy the run [i, j) (see run_end) as one range of its input file, in steps
 * of COPY_STEP at multiples of COPY_STEP of the input offset (so that, in an
 * aligned layout, every step but the first starts block-aligned on both
 * sides). Before each step, the input bytes of the tensors it holds are
 * digested (they are then in the page cache for the copy).
 */
static int copy_run(const gguf_set *in, const gguf_split_plan *p, gguf_writer *w, int64_t i,
                    int64_t j, copy_state *cs, gguf_error *err)
{
    const gguf_tensor *a = gguf_set_tensor_at(in, i), *z = gguf_set_tensor_at(in, j - 1);
    int fd = gguf_file_fd(gguf_set_part(in, a->part));
    if (fd < 0)
        return write_from_memory(in, w, i, j, cs, err);
    const gguf_split_job_opts *o = cs->o;
    const uint64_t in0 = a->file_offset, in_end = z->file_offset + z->nbytes;
    uint64_t pos = in0;
    int64_t h = i; /* the tensor being digested */
    int rc = GGUF_OK;
    if (cs->in_digests)
        gguf_hasher_reset(cs->h);
    do {
        uint64_t stop = (pos / COPY_STEP + 1) * COPY_STEP, data = 0;
        if (stop > in_end)
            stop = in_end;
        for (; h < j; h++) {
            const gguf_tensor *t = gguf_set_tensor_at(in, h);
            uint64_t ts = t->file_offset, te = ts + t->nbytes;
            uint64_t from = ts > pos ? ts : pos, to = te < stop ? te : stop;
            if (from < to) {
                data += to - from;
                int e = cs->in_digests ? hash_fd(o->cancel, NULL, cs->h, cs->buf, cs->zeros, fd,
                                                 from, to - from)
                                       : 0;
                if (e)
                    return read_fail(in, t, e, from, err);
            }
            if (te > stop)
                break; /* continues in the next step */
            if (cs->in_digests) {
                gguf_hasher_final(cs->h, &cs->in_digests[h]);
                gguf_hasher_reset(cs->h);
            }
        }
        rc = gguf_writer_copy_range(w, fd, pos, p->offsets[i] + (pos - in0), stop - pos, err);
        if (rc)
            return rc;
        cs->done += data;
        if (o->progress)
            o->progress(o->progress_ctx, GGUF_SPLIT_PHASE_COPY, cs->done, cs->total);
        pos = stop;
    } while (pos < in_end);
    return GGUF_OK;
}

static int write_part(const gguf_set *in, const gguf_split_plan *p, uint32_t k, copy_state *cs,
                      gguf_error *err)
{
    const gguf_split_part *part = &p->parts[k];
    const gguf_split_job_opts *o = cs->o;
    gguf_writer_opts wo = {.gguf_version = p->version,
                           .alignment = p->alignment,
                           .overwrite = o->overwrite,
                           .no_sync = o->no_sync,
                           .cancel = o->cancel};
    gguf_writer *w = NULL;
    int rc = gguf_writer_create(&w, part->path, &wo, err);
    if (rc)
        return rc;
    const gguf_file *meta = gguf_set_meta(in);
    if (p->kind == GGUF_PLAN_MERGE || k == 0) {
        for (int64_t i = 0; !rc && i < gguf_file_kv_count(meta); i++) {
            const gguf_kv *kv = gguf_file_kv_at(meta, i);
            if (!gguf_split_is_split_key(kv->key))
                rc = gguf_writer_add_kv(w, kv->key, &kv->value, err);
        }
    } else if (p->alignment != GGUF_DEFAULT_ALIGNMENT) {
        rc = gguf_writer_add_u32(w, GGUF_KEY_ALIGNMENT, p->alignment, err);
    }
    if (!rc && p->kind == GGUF_PLAN_SPLIT) {
        if (!(rc = add_u16(w, GGUF_KEY_SPLIT_NO, (uint16_t)k, err)) &&
            !(rc = add_u16(w, GGUF_KEY_SPLIT_COUNT, (uint16_t)p->n_parts, err)))
            rc = gguf_writer_add_i32(w, GGUF_KEY_SPLIT_TENSORS, (int32_t)p->n_tensors, err);
    }
    const int64_t end = part->first + part->count;
    for (int64_t i = part->first; !rc && i < end; i++) {
        const gguf_tensor *t = gguf_set_tensor_at(in, i);
        rc = gguf_writer_add_tensor_at(w, t->name, t->type, t->n_dims, t->ne, p->offsets[i], err);
    }
    if (!rc && gguf_writer_total_size(w) != part->size)
        rc = gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                       "%s: internal error: the plan says %llu bytes, the writer %llu",
                       part->path, (unsigned long long)part->size,
                       (unsigned long long)gguf_writer_total_size(w));
    if (!rc)
        rc = gguf_writer_write_header(w, err);
    for (int64_t i = part->first; !rc && i < end;) {
        int64_t j = run_end(in, p, i, end, cs->buf);
        rc = copy_run(in, p, w, i, j, cs, err);
        cs->n_ranges++;
        i = j;
    }
    if (!rc && cancelled(o))
        rc = gguf_fail(err, GGUF_E_INTERRUPTED, GGUF_NO_OFFSET,
                       "%s: interrupted; the partial output was removed", part->path);
    if (!rc)
        rc = gguf_writer_finish(w, err);
    gguf_writer_free(w); /* removes the temporary file unless finished */
    return rc;
}

/* Remove outputs [0, n) this call put in place. */
static void remove_outputs(const gguf_split_plan *p, uint32_t n)
{
    for (uint32_t k = 0; k < n; k++)
        unlink(p->parts[k].path);
    if (n)
        gguf_fsync_parent(p->parts[0].path);
}

/* ---------------------------------------------------------------- digests */

typedef struct djob {
    int fd;              /* read with pread, holes hashed as zeros without reading */
    uint64_t off;
    const uint8_t *data; /* used when fd < 0 (files opened from memory) */
    uint64_t n;
    gguf_digest *out;
} djob;

typedef struct dpool {
    djob *jobs;
    int64_t n_jobs;
    atomic_llong next;
    atomic_ullong done;
    atomic_int running;
    atomic_int failed; /* errno of a failed read, or -1 for out of memory */
    const gguf_cancel_flag *cancel;
} dpool;

static void *dworker(void *arg)
{
    dpool *dp = arg;
    gguf_hasher *h = NULL;
    uint8_t *buf = malloc(READ_STEP);
    uint8_t *zeros = calloc(1, READ_STEP);
    if (!buf || !zeros || gguf_hasher_create(&h) != GGUF_OK) {
        atomic_store(&dp->failed, -1);
        goto out;
    }
    for (;;) {
        long long i = atomic_fetch_add(&dp->next, 1);
        if (i >= dp->n_jobs || (dp->cancel && *dp->cancel) || atomic_load(&dp->failed))
            break;
        const djob *j = &dp->jobs[i];
        gguf_hasher_reset(h);
        if (j->fd >= 0) {
            int e = hash_fd(dp->cancel, &dp->done, h, buf, zeros, j->fd, j->off, j->n);
            if (e) {
                atomic_store(&dp->failed, e);
                break;
            }
        } else {
            for (uint64_t off = 0; off < j->n; off += HASH_STEP) {
                uint64_t k = j->n - off < HASH_STEP ? j->n - off : HASH_STEP;
                gguf_hasher_update(h, j->data + off, (size_t)k);
                atomic_fetch_add(&dp->done, k);
            }
        }
        gguf_hasher_final(h, j->out);
    }
out:
    gguf_hasher_free(h);
    free(buf);
    free(zeros);
    atomic_fetch_sub(&dp->running, 1);
    return NULL;
}

/* Digest every job on n_threads threads, reporting progress from this thread. */
static int digest_jobs(djob *jobs, int64_t n, const gguf_split_job_opts *o, gguf_error *err)
{
    uint64_t total = 0;
    for (int64_t i = 0; i < n; i++)
        total += jobs[i].n;
    int nt = o->n_threads > 0 ? o->n_threads : gguf_cpus_usable();
    if (nt < 1)
        nt = 1;
    if (nt > 64)
        nt = 64;
    if (nt > n)
        nt = n > 0 ? (int)n : 1;
    dpool dp = {.jobs = jobs, .n_jobs = n, .cancel = o->cancel};
    atomic_init(&dp.next, 0);
    atomic_init(&dp.done, 0);
    atomic_init(&dp.running, nt);
    atomic_init(&dp.failed, 0);
    pthread_t th[64];
    int started = 0;
    for (int i = 0; i < nt; i++) {
        if (pthread_create(&th[started], NULL, dworker, &dp) != 0) {
            atomic_fetch_sub(&dp.running, 1);
            continue;
        }
        started++;
    }
    if (!started) {
        atomic_store(&dp.running, 1);
        dworker(&dp);
    }
    while (atomic_load(&dp.running) > 0) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
        if (o->progress)
            o->progress(o->progress_ctx, GGUF_SPLIT_PHASE_VERIFY, atomic_load(&dp.done), total);
    }
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    if (o->progress)
        o->progress(o->progress_ctx, GGUF_SPLIT_PHASE_VERIFY, atomic_load(&dp.done), total);
    if (cancelled(o))
        return gguf_fail(err, GGUF_E_INTERRUPTED, GGUF_NO_OFFSET,
                         "interrupted while computing digests");
    int f = atomic_load(&dp.failed);
    if (f < 0)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    if (f > 0)
        return gguf_fail_errno(err, GGUF_E_IO, f, "read failed while computing digests");
    return GGUF_OK;
}

/* Structural check of output tensor j against input tensor i. */
static bool same_info(const gguf_tensor *a, const gguf_tensor *b)
{
    if (strcmp(a->name, b->name) != 0 || a->type != b->type || a->n_dims != b->n_dims ||
        a->nbytes != b->nbytes)
        return false;
    for (int d = 0; d < GGUF_MAX_DIMS; d++)
        if (a->ne[d] != b->ne[d])
            return false;
    return true;
}

static int verify_and_digest(const gguf_set *in, const gguf_split_plan *p,
                             const gguf_split_job_opts *o, gguf_split_report *r, gguf_error *err)
{
    bool verify = o->verify || o->delete_inputs;
    int64_t n = p->n_tensors;
    gguf_file **outs = calloc(p->n_parts, sizeof *outs);
    gguf_digest *out_d = calloc((size_t)n + 1, sizeof *out_d);
    djob *jobs = calloc(2 * (size_t)n + p->n_parts + 1, sizeof *jobs);
    const gguf_tensor **ts = calloc((size_t)n + 1, sizeof *ts);
    /* Input digests were taken during the copy (copy_state). */
    r->file_digests = calloc(p->n_parts, sizeof *r->file_digests);
    int rc = GGUF_OK;
    if (!outs || !out_d || !jobs || !ts || !r->tensor_digests || !r->file_digests) {
        rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
        goto done;
    }
    int64_t nj = 0;
    for (uint32_t k = 0; k < p->n_parts; k++) {
        const gguf_split_part *part = &p->parts[k];
        /* Reopening validates the output as any reader would. */
        if ((rc = gguf_file_open(&outs[k], part->path, NULL, err)))
            goto done;
        /* Before inputs are deleted, read the output back from the device, not from
         * the page cache: the file is fsynced, so its pages are clean and can go. */
        if (o->delete_inputs && !o->no_sync)
            (void)posix_fadvise(gguf_file_fd(outs[k]), 0, 0, POSIX_FADV_DONTNEED);
        if (gguf_file_tensor_count(outs[k]) != part->count ||
            gguf_file_size(outs[k]) != part->size) {
            rc = gguf_fail(err, GGUF_E_MISMATCH, GGUF_NO_OFFSET,
                           "%s: the output has %lld tensors and %llu bytes, the plan says %lld "
                           "and %llu",
                           part->path, (long long)gguf_file_tensor_count(outs[k]),
                           (unsigned long long)gguf_file_size(outs[k]), (long long)part->count,
                           (unsigned long long)part->size);
            goto done;
        }
        for (int64_t j = 0; j < part->count; j++) {
            const gguf_tensor *a = gguf_set_tensor_at(in, part->first + j);
            const gguf_tensor *b = gguf_file_tensor_at(outs[k], j);
            if (!same_info(a, b)) {
                rc = gguf_fail(err, GGUF_E_MISMATCH, b->info_offset,
                               "%s: tensor %lld is '%s', expected '%s' with the input's type "
                               "and shape",
                               part->path, (long long)j, b->name, a->name);
                goto done;
            }
            ts[part->first + j] = a;
            if (verify)
                jobs[nj++] = (djob){gguf_file_fd(outs[k]), b->file_offset, b->data, b->nbytes,
                                    &out_d[part->first + j]};
        }
        if (o->digests)
            jobs[nj++] = (djob){gguf_file_fd(outs[k]), 0, gguf_file_bytes(outs[k]),
                                gguf_file_size(outs[k]), &r->file_digests[k]};
    }
    double t0 = now_s();
    if ((rc = digest_jobs(jobs, nj, o, err)))
        goto done;
    r->seconds_digest = now_s() - t0;
    gguf_digest_model(ts, r->tensor_digests, n, &r->model_digest);
    r->have_digests = o->digests;
    r->n_tensors = n;
    if (verify) {
        for (uint32_t k = 0; k < p->n_parts; k++) {
            const gguf_split_part *part = &p->parts[k];
            for (int64_t j = 0; j < part->count; j++) {
                int64_t i = part->first + j;
                if (!gguf_digest_equal(&r->tensor_digests[i], &out_d[i])) {
                    char a[GGUF_DIGEST_HEX], b[GGUF_DIGEST_HEX];
                    const gguf_tensor *t = gguf_set_tensor_at(in, i);
                    rc = gguf_fail(err, GGUF_E_MISMATCH,
                                   gguf_file_tensor_at(outs[k], j)->file_offset,
                                   "%s: tensor '%s': digest %s differs from the input's %s (%s)",
                                   part->path, t->name, gguf_digest_hex(&out_d[i], b),
                                   gguf_digest_hex(&r->tensor_digests[i], a),
                                   gguf_file_path(gguf_set_part(in, t->part)));
                    goto done;
                }
            }
        }
        r->verified = true;
        r->seconds_verify = r->seconds_digest;
    }
done:
    if (outs)
        for (uint32_t k = 0; k < p->n_parts; k++)
            gguf_file_free(outs[k]);
    free(outs);
    free(out_d);
    free(jobs);
    free(ts);
    return rc;
}

static int delete_inputs(const gguf_set *in, gguf_split_report *r, gguf_error *err)
{
    uint32_t n = gguf_set_part_count(in);
    for (uint32_t i = 0; i < n; i++) {
        const char *path = gguf_file_path(gguf_set_part(in, i));
        if (unlink(path) != 0) {
            int e = errno;
            if (r->n_deleted)
                gguf_fsync_parent(gguf_file_path(gguf_set_part(in, 0)));
            return gguf_fail_errno(err, GGUF_E_IO, e,
                                   "%s: cannot delete the input part %u (the output is complete "
                                   "and verified; %u part(s) were deleted)",
                                   path, i + 1, r->n_deleted);
        }
        r->n_deleted++;
    }
    if (n)
        gguf_fsync_parent(gguf_file_path(gguf_set_part(in, 0)));
    return GGUF_OK;
}

int gguf_split_execute(const gguf_set *in, const gguf_split_plan *p,
                       const gguf_split_job_opts *opts, gguf_split_report **report,
                       gguf_error *err)
{
    if (opts && opts->version > GGUF_SPLIT_JOB_OPTS_VERSION)
        return gguf_opts_version_fail(opts->version, GGUF_SPLIT_JOB_OPTS_VERSION, "gguf_split_job_opts",
                                      err);
    gguf_error_clear(err);
    if (report)
        *report = NULL;
    if (!in || !p || !p->n_parts || !p->offsets || p->n_tensors != gguf_set_tensor_count(in))
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_split_execute: bad args");
    gguf_split_job_opts o = {0};
    if (opts)
        o = *opts;
    copy_state cs = {.o = &o};
    gguf_split_report *r = calloc(1, sizeof *r);
    if (!r)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    int rc = gguf_split_check_outputs(in, p, o.overwrite, err);
    if (rc)
        goto fail;
    for (int64_t i = 0; i < p->n_tensors; i++)
        cs.total += gguf_set_tensor_at(in, i)->nbytes;
    cs.buf = malloc(READ_STEP); /* padding checks (run_end) and input digests */
    if (!cs.buf) {
        rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
        goto fail;
    }
    if (o.verify || o.digests || o.delete_inputs) {
        r->tensor_digests = calloc((size_t)p->n_tensors + 1, sizeof *r->tensor_digests);
        cs.zeros = calloc(1, READ_STEP);
        if (!r->tensor_digests || !cs.zeros || gguf_hasher_create(&cs.h) != GGUF_OK) {
            rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
            goto fail;
        }
        cs.in_digests = r->tensor_digests;
    }
    double t0 = now_s();
    uint32_t written = 0;
    for (uint32_t k = 0; k < p->n_parts; k++) {
        if ((rc = write_part(in, p, k, &cs, err))) {
            remove_outputs(p, written);
            if (rc == GGUF_E_NOSPACE && err) {
                /* Say it plainly: EFBIG (a file size limit) reads "File too large". */
                char why[sizeof err->message];
                int e = err->sys_errno;
                snprintf(why, sizeof why, "%s", err->message);
                gguf_fail(err, rc, GGUF_NO_OFFSET,
                          "%s: disk full while writing (%s); the partial output was removed "
                          "and the inputs are untouched",
                          p->parts[k].path, why);
                err->sys_errno = e;
            }
            goto fail;
        }
        written++;
        r->bytes_written += p->parts[k].size;
    }
    r->n_outputs = written;
    r->n_ranges = cs.n_ranges;
    r->seconds_copy = now_s() - t0;
    if (o.verify || o.digests || o.delete_inputs) {
        if ((rc = verify_and_digest(in, p, &o, r, err))) {
            remove_outputs(p, written);
            r->n_outputs = 0;
            if (err && (rc == GGUF_E_INTERRUPTED || rc == GGUF_E_MISMATCH)) {
                char why[sizeof err->message];
                uint64_t at = err->offset;
                snprintf(why, sizeof why, "%s", err->message);
                if (rc == GGUF_E_INTERRUPTED)
                    snprintf(why, sizeof why, "%s: interrupted while verifying",
                             p->parts[0].path);
                gguf_fail(err, rc, at, "%s; the output%s removed, the inputs are untouched", why,
                          p->n_parts > 1 ? "s were" : " was");
            }
            goto fail;
        }
    }
    if (o.delete_inputs && (rc = delete_inputs(in, r, err)))
        goto fail;
    if (report)
        *report = r;
    else
        gguf_split_report_free(r);
    rc = GGUF_OK;
    goto done;
fail:
    gguf_split_report_free(r);
done:
    gguf_hasher_free(cs.h);
    free(cs.buf);
    free(cs.zeros);
    return rc;
}

void gguf_split_report_free(gguf_split_report *r)
{
    if (!r)
        return;
    free(r->tensor_digests);
    free(r->file_digests);
    free(r);
}
