/* The weight streamer of the GPU forward passes: see fwd_stream.h. */
#include "cuda_internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fwd_stream.h"
#include "gguf/model.h"
#include "ggufkit_cuda/cuda_dequant.h"
#include "ggufkit_cuda/host_copy.h"

/* Three staging buffers, filled in turn (small chunks share one): a chunk
 * that starts a buffer waits only for that buffer's last round, so the copy
 * engine always has work queued when the host's gather keeps up on average,
 * and runs up to two buffers' worth ahead of the GPU's work. The dequantized
 * rows need one buffer: the dequant and the callers' work run in order on
 * the compute stream. */
#define FS_BUFFERS 3
#define FS_MAX_REGIONS 64 /* registered files (parts of a split set) */

/* A chunk of the request being streamed: parts [first, first + n). A direct
 * chunk's parts lie in registered memory: the copy engine reads them in
 * place, without a gather into pinned staging. */
typedef struct fs_chunk {
    int first, n;
    bool direct;
    uint32_t type;
    size_t bytes;
    int64_t floats;
    /* where it is staged: buffer b from byte off; fresh: the first chunk of
     * this round in b, which must wait until b's last round is done */
    int b;
    size_t off;
    bool fresh;
} fs_chunk;

struct fs_streamer {
    cudaStream_t ks, cs; /* compute (the caller's), copy (ours) */
    size_t chunk_bytes;
    int64_t chunk_floats;
    bool drop_pages;
    long page;
    gguf_host_copy_team *team;
    void *pinned[FS_BUFFERS];
    void *raw[FS_BUFFERS];
    float *wbuf;
    cudaEvent_t h2d_done[FS_BUFFERS], consumed[FS_BUFFERS];
    /* the staging cursor: buffer cur_b filled up to cur_off. Small chunks
     * (norm weights, a layer's k and v) share a buffer, so that the copy
     * engine can run as far ahead of the GPU's work as three buffers hold,
     * not only three chunks. */
    int cur_b;
    size_t cur_off;
    double t_flushed; /* when the last chunk was handed to the GPU */
    /* the request's plan: its parts (and their sources), cut into chunks */
    fs_part *parts;
    gguf_host_copy_part *src;
    int n_parts, cap_parts;
    fs_chunk *chunks;
    int n_chunks, cap_chunks;
    /* a direct chunk's copies as one batch: cap_parts entries each */
    void **bdst;
    const void **bsrc;
    size_t *bsize;
    bool batch_ok;
    /* file mappings registered with CUDA (page-locked in place, read-only) */
    struct fs_region {
        const uint8_t *base;
        size_t size;
    } regions[FS_MAX_REGIONS];
    int n_regions;
    fs_stats st;
};

static double fs_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int fs_create(fs_streamer **out, cudaStream_t compute, size_t chunk_bytes, int64_t chunk_floats,
              int n_threads, bool drop_pages, gguf_error *err)
{
    *out = NULL;
    fs_streamer *s = (fs_streamer *)calloc(1, sizeof *s);
    if (!s)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "streamer: out of memory");
    s->ks = compute;
    s->chunk_bytes = chunk_bytes;
    s->chunk_floats = chunk_floats;
    s->drop_pages = drop_pages;
    s->page = sysconf(_SC_PAGESIZE);
    s->batch_ok = true;
    /* the caller queues GPU work while the workers gather: n_threads workers */
    int rc = gguf_host_copy_team_create(&s->team, n_threads + 1, err);
    cudaError_t e = rc ? cudaSuccess : cudaStreamCreateWithFlags(&s->cs, cudaStreamNonBlocking);
    for (int b = 0; b < FS_BUFFERS && !rc && e == cudaSuccess; b++) {
        e = cudaHostAlloc(&s->pinned[b], chunk_bytes, cudaHostAllocDefault);
        if (e == cudaSuccess)
            e = cudaMalloc(&s->raw[b], chunk_bytes);
        if (e == cudaSuccess)
            e = cudaEventCreateWithFlags(&s->h2d_done[b], cudaEventDisableTiming);
        if (e == cudaSuccess)
            e = cudaEventCreateWithFlags(&s->consumed[b], cudaEventDisableTiming);
    }
    if (!rc && e == cudaSuccess)
        e = cudaMalloc((void **)&s->wbuf, (size_t)chunk_floats * sizeof(float));
    if (!rc && e != cudaSuccess)
        rc = gguf_cuda_fail(err, e, "streaming buffers");
    if (rc) {
        fs_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

void fs_free(fs_streamer *s)
{
    if (!s)
        return;
    if (s->ks)
        (void)cudaStreamSynchronize(s->ks);
    if (s->cs)
        (void)cudaStreamSynchronize(s->cs);
    for (int b = 0; b < FS_BUFFERS; b++) {
        if (s->pinned[b])
            cudaFreeHost(s->pinned[b]);
        cudaFree(s->raw[b]);
        if (s->h2d_done[b])
            cudaEventDestroy(s->h2d_done[b]);
        if (s->consumed[b])
            cudaEventDestroy(s->consumed[b]);
    }
    cudaFree(s->wbuf);
    for (int i = 0; i < s->n_regions; i++)
        cudaHostUnregister((void *)s->regions[i].base);
    if (s->cs)
        cudaStreamDestroy(s->cs);
    gguf_host_copy_team_free(s->team);
    free(s->parts);
    free(s->src);
    free(s->bdst);
    free(s->bsrc);
    free(s->bsize);
    free(s->chunks);
    free(s);
}

fs_stats fs_get_stats(const fs_streamer *s)
{
    return s->st;
}

cudaStream_t fs_compute_stream(const fs_streamer *s)
{
    return s->ks;
}

uint64_t fs_resident_bytes(const fs_streamer *s)
{
    return (uint64_t)s->chunk_floats * sizeof(float);
}

static int fs_add(fs_streamer *s, int64_t i, int64_t r0, int64_t nr, const void *src, size_t bytes,
                  int64_t floats, gguf_error *err)
{
    if (s->n_parts == s->cap_parts) {
        const int cap = s->cap_parts ? 2 * s->cap_parts : 64;
        fs_part *p = (fs_part *)realloc(s->parts, (size_t)cap * sizeof *p);
        if (p)
            s->parts = p;
        gguf_host_copy_part *c = (gguf_host_copy_part *)realloc(s->src, (size_t)cap * sizeof *c);
        if (c)
            s->src = c;
        void **bd = (void **)realloc(s->bdst, (size_t)cap * sizeof *bd);
        if (bd)
            s->bdst = bd;
        const void **bs = (const void **)realloc(s->bsrc, (size_t)cap * sizeof *bs);
        if (bs)
            s->bsrc = bs;
        size_t *bz = (size_t *)realloc(s->bsize, (size_t)cap * sizeof *bz);
        if (bz)
            s->bsize = bz;
        if (!p || !c || !bd || !bs || !bz)
            return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "streamer: out of memory");
        s->cap_parts = cap;
    }
    fs_chunk *ch = &s->chunks[s->n_chunks - 1];
    bool in = false;
    for (int k = 0; k < s->n_regions && !in; k++)
        in = (const uint8_t *)src >= s->regions[k].base &&
             (const uint8_t *)src + bytes <= s->regions[k].base + s->regions[k].size;
    ch->direct = ch->direct && in;
    fs_part *p = &s->parts[s->n_parts];
    p->i = i;
    p->r0 = r0;
    p->nr = nr;
    p->float_off = ch->floats;
    s->src[s->n_parts].src = src;
    s->src[s->n_parts].n = bytes;
    s->n_parts++;
    ch->n++;
    ch->bytes += bytes;
    ch->floats += floats;
    return 0;
}

static int fs_open_chunk(fs_streamer *s, uint32_t type, gguf_error *err)
{
    if (s->n_chunks == s->cap_chunks) {
        const int cap = s->cap_chunks ? 2 * s->cap_chunks : 16;
        fs_chunk *c = (fs_chunk *)realloc(s->chunks, (size_t)cap * sizeof *c);
        if (!c)
            return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "streamer: out of memory");
        s->chunks = c;
        s->cap_chunks = cap;
    }
    fs_chunk *c = &s->chunks[s->n_chunks++];
    c->first = s->n_parts;
    c->n = 0;
    c->direct = s->n_regions > 0;
    c->type = type;
    c->bytes = 0;
    c->floats = 0;
    return 0;
}

/* Staging places for the planned chunks: after the cursor in the current
 * buffer when they fit, else from the start of the next one. Offsets are
 * 256-byte aligned (the dequant kernels load words). */
static void fs_place(fs_streamer *s)
{
    for (int j = 0; j < s->n_chunks; j++) {
        fs_chunk *c = &s->chunks[j];
        const size_t off = (s->cur_off + 255) & ~(size_t)255;
        c->fresh = s->cur_off == 0 || off + c->bytes > s->chunk_bytes;
        if (c->fresh) {
            s->cur_b = s->cur_off == 0 ? s->cur_b : (s->cur_b + 1) % FS_BUFFERS;
            c->off = 0;
        } else {
            c->off = off;
        }
        c->b = s->cur_b;
        s->cur_off = c->off + c->bytes;
    }
}

/* Cut the request into chunks: consecutive runs of one type packed up to the
 * chunk's size. When the copy engine is idle (after a sync, as for MoE
 * routing), nothing overlaps the gather of the first chunk: the chunks start
 * small and double, so that the copy engine starts early. */
static int fs_plan(fs_streamer *s, const fs_rows *req, int64_t n, gguf_error *err)
{
    s->n_parts = 0;
    s->n_chunks = 0;
    const size_t small = s->chunk_bytes / 16 > ((size_t)1 << 20) ? s->chunk_bytes / 16
                                                                   : s->chunk_bytes;
    const int last = s->cur_b;
    /* idle: the last copy is over and the host did something else for a
     * while (when the host's gather is the slower stage the copy engine is
     * always idle when the next chunk starts, but without a gap) */
    size_t limit = fs_now() - s->t_flushed > 1e-4 &&
                           cudaEventQuery(s->h2d_done[last]) == cudaSuccess
                       ? small
                       : s->chunk_bytes;
    for (int64_t i = 0; i < n; i++) {
        const gguf_tensor *t = req[i].t;
        uint64_t rb;
        int rc = gguf_type_row_bytes(t->type, t->ne[0], &rb);
        if (rc)
            return gguf_fail(err, rc, t->file_offset, "%s: bad row", t->name);
        if (!gguf_cuda_dequant_supported(t->type))
            return gguf_fail(err, GGUF_E_BAD_TYPE, t->file_offset,
                             "%s: type %u cannot be dequantized on the GPU", t->name, t->type);
        if (rb > s->chunk_bytes || t->ne[0] > s->chunk_floats)
            return gguf_fail(err, GGUF_E_UNSUPPORTED, t->file_offset,
                             "%s: one row (%llu bytes) is larger than a streaming chunk", t->name,
                             (unsigned long long)rb);
        for (int64_t r = 0; r < req[i].n_rows;) {
            fs_chunk *c = s->n_chunks ? &s->chunks[s->n_chunks - 1] : NULL;
            int64_t fit = 0;
            if (c && c->type == t->type) {
                fit = c->bytes < limit ? (int64_t)((limit - c->bytes) / rb) : 0;
                const int64_t fit_f = (s->chunk_floats - c->floats) / t->ne[0];
                if (fit_f < fit)
                    fit = fit_f;
            }
            if (fit < 1) {
                if (c)
                    limit = limit * 2 < s->chunk_bytes ? limit * 2 : s->chunk_bytes;
                if ((rc = fs_open_chunk(s, t->type, err)))
                    return rc;
                c = &s->chunks[s->n_chunks - 1];
                fit = (int64_t)(limit / rb);
                const int64_t fit_f = s->chunk_floats / t->ne[0];
                if (fit_f < fit)
                    fit = fit_f;
                if (fit < 1)
                    fit = 1; /* a row larger than the ramp's first chunk */
            }
            if (fit > req[i].n_rows - r)
                fit = req[i].n_rows - r;
            if ((rc = fs_add(s, i, r, fit, t->data + (uint64_t)(req[i].row0 + r) * rb,
                             (size_t)((uint64_t)fit * rb), fit * t->ne[0], err)))
                return rc;
            r += fit;
        }
    }
    fs_place(s);
    return 0;
}

/* Drop the mapped pages of [p, p + n) (read again on demand): whole pages
 * inside the range only. */
static void fs_drop(const fs_streamer *s, const void *p, size_t n)
{
    uintptr_t pb = (uintptr_t)p, pe = pb + (uintptr_t)n;
    pb = (pb + (uintptr_t)s->page - 1) & ~(uintptr_t)(s->page - 1);
    pe &= ~(uintptr_t)(s->page - 1);
    if (pe > pb)
        madvise((void *)pb, pe - pb, MADV_DONTNEED);
}

/* Start the gather of chunk j into its place in a pinned buffer, once that
 * buffer's copies of the last round are over (a fresh chunk). */
static int fs_gather(fs_streamer *s, int j, gguf_error *err)
{
    const fs_chunk *c = &s->chunks[j];
    if (c->direct)
        return 0;
    const double t0 = fs_now();
    if (c->fresh)
        GC_TRY(err, cudaEventSynchronize(s->h2d_done[c->b]));
    const double t1 = fs_now();
    gguf_host_copy_gather_start(s->team, (char *)s->pinned[c->b] + c->off, s->src + c->first,
                                c->n);
    s->st.wait_seconds += t1 - t0;
    s->st.copy_seconds += fs_now() - t1;
    return 0;
}

/* A direct chunk's parts straight from the registered mapping into raw[b]:
 * parts adjacent in the file as one copy, all of them in one batch call
 * (one cudaMemcpyAsync each where the driver has no batches). The routed
 * experts of an MoE layer are dozens of parts a chunk: one call each cost
 * the host more time than the copy engine took to move them. */
static int fs_copy_direct(fs_streamer *s, const fs_chunk *c, gguf_error *err)
{
    int n = 0;
    size_t off = c->off;
    for (int k = c->first; k < c->first + c->n; k++) {
        const uint8_t *src = (const uint8_t *)s->src[k].src;
        if (n && (const uint8_t *)s->bsrc[n - 1] + s->bsize[n - 1] == src) {
            s->bsize[n - 1] += s->src[k].n;
        } else {
            s->bdst[n] = (char *)s->raw[c->b] + off;
            s->bsrc[n] = src;
            s->bsize[n] = s->src[k].n;
            n++;
        }
        off += s->src[k].n;
    }
    if (n > 1 && s->batch_ok) {
        cudaMemcpyAttributes at;
        memset(&at, 0, sizeof at);
        at.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
        size_t at_idx = 0;
        const cudaError_t e = cudaMemcpyBatchAsync(s->bdst, s->bsrc, s->bsize, (size_t)n, &at,
                                                   &at_idx, 1, s->cs);
        if (e == cudaSuccess)
            return 0;
        (void)cudaGetLastError();
        s->batch_ok = false; /* not on this driver: one copy each from now on */
    }
    for (int k = 0; k < n; k++)
        GC_TRY(err, cudaMemcpyAsync(s->bdst[k], s->bsrc[k], s->bsize[k], cudaMemcpyHostToDevice,
                                    s->cs));
    return 0;
}

/* Chunk j (gathered) to the GPU: the copy, then (after the next chunk's
 * gather has started) the dequant and fn for each part. */
static int fs_run(fs_streamer *s, int j, fs_chunk_fn fn, void *arg, gguf_error *err)
{
    const fs_chunk *c = &s->chunks[j];
    const int b = c->b;
    char *raw = (char *)s->raw[b] + c->off;
    double t0 = fs_now();
    if (!c->direct)
        gguf_host_copy_wait(s->team);
    s->st.copy_seconds += fs_now() - t0;
    /* a fresh chunk overwrites what the GPU read in the buffer's last round */
    if (c->fresh)
        GC_TRY(err, cudaStreamWaitEvent(s->cs, s->consumed[b], 0));
    if (c->direct) {
        int rc = fs_copy_direct(s, c, err);
        if (rc)
            return rc;
    } else {
        GC_TRY(err, cudaMemcpyAsync(raw, (char *)s->pinned[b] + c->off, c->bytes,
                                    cudaMemcpyHostToDevice, s->cs));
    }
    GC_TRY(err, cudaEventRecord(s->h2d_done[b], s->cs));
    if (s->drop_pages && !c->direct)
        for (int k = c->first; k < c->first + c->n; k++)
            fs_drop(s, s->src[k].src, s->src[k].n);
    int rc = 0;
    if (j + 1 < s->n_chunks && (rc = fs_gather(s, j + 1, err)))
        return rc;
    t0 = fs_now();
    GC_TRY(err, cudaStreamWaitEvent(s->ks, s->h2d_done[b], 0));
    rc = gguf_cuda_dequant(c->type, raw, s->wbuf, c->floats, (gguf_cuda_stream *)s->ks, err);
    if (!rc)
        rc = fn(s->wbuf, s->parts + c->first, c->n, arg, err);
    /* recorded even after a failure: the buffer's next user must not wait
     * on work that was never queued */
    const cudaError_t e = cudaEventRecord(s->consumed[b], s->ks);
    if (!rc && e != cudaSuccess)
        rc = gguf_cuda_fail(err, e, "cudaEventRecord");
    s->st.issue_seconds += fs_now() - t0;
    s->t_flushed = fs_now();
    s->st.bytes += c->bytes;
    if (c->direct)
        s->st.direct_bytes += c->bytes;
    s->st.floats += (uint64_t)c->floats;
    s->st.chunks++;
    return rc;
}

int fs_stream_chunks(fs_streamer *s, const fs_rows *req, int64_t n, fs_chunk_fn fn, void *arg,
                     gguf_error *err)
{
    int rc = fs_plan(s, req, n, err);
    if (rc || s->n_chunks == 0)
        return rc;
    rc = fs_gather(s, 0, err);
    for (int j = 0; j < s->n_chunks && !rc; j++)
        rc = fs_run(s, j, fn, arg, err);
    /* nothing may still be copying into a pinned buffer after a failure */
    gguf_host_copy_wait(s->team);
    return rc;
}

/* fs_stream's function, called part by part */
typedef struct fs_each {
    fs_rows_fn fn;
    void *arg;
} fs_each;

static int fs_each_part(const float *w, const fs_part *parts, int n, void *arg, gguf_error *err)
{
    const fs_each *e = (const fs_each *)arg;
    int rc = 0;
    for (int k = 0; k < n && !rc; k++)
        rc = e->fn(w + parts[k].float_off, parts[k].i, parts[k].r0, parts[k].nr, e->arg, err);
    return rc;
}

int fs_stream(fs_streamer *s, const fs_rows *req, int64_t n, fs_rows_fn fn, void *arg,
              gguf_error *err)
{
    fs_each e = {fn, arg};
    return fs_stream_chunks(s, req, n, fs_each_part, &e, err);
}

int fs_register_model(fs_streamer *s, const gguf_model *m, int mode, gguf_error *err)
{
    if (mode < 0 || s->n_regions > 0)
        return 0;
    /* a file's mapping starts at data - file_offset of any of its tensors;
     * the tensors' data ends where the registration ends */
    const uint8_t *base[FS_MAX_REGIONS] = {0};
    size_t end[FS_MAX_REGIONS] = {0};
    uint64_t total = 0;
    for (int64_t i = 0; i < gguf_model_tensor_count(m); i++) {
        const gguf_tensor *t = gguf_model_tensor_at(m, i)->t;
        if (!t || !t->data)
            return 0; /* header-only: nothing to stream */
        if (t->part >= FS_MAX_REGIONS)
            return mode > 0 ? gguf_fail(err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                                        "streamer: more than %d files to register",
                                        FS_MAX_REGIONS)
                            : 0;
        base[t->part] = t->data - t->file_offset;
        if (t->file_offset + t->nbytes > end[t->part])
            end[t->part] = (size_t)(t->file_offset + t->nbytes);
    }
    for (int k = 0; k < FS_MAX_REGIONS; k++)
        total += end[k];
    /* auto: only a model that fits in half the RAM (locking reads every
     * page, routed or not, and keeps it resident); drop_pages then applies to
     * the gathered chunks of a larger model */
    const long page = s->page > 0 ? s->page : 4096;
    const double ram = (double)sysconf(_SC_PHYS_PAGES) * (double)page;
    if (mode == 0 && (double)total > ram / 2)
        return 0;
    const double t0 = fs_now();
    for (int k = 0; k < FS_MAX_REGIONS; k++) {
        if (!base[k])
            continue;
        const size_t size = (end[k] + (size_t)page - 1) & ~(size_t)(page - 1);
        const cudaError_t e = cudaHostRegister((void *)base[k], size, cudaHostRegisterReadOnly);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            if (mode > 0)
                return gguf_cuda_fail(err, e, "registering the model's pages (--host-register)");
            continue; /* that file's chunks are gathered */
        }
        s->regions[s->n_regions].base = base[k];
        s->regions[s->n_regions].size = size;
        s->n_regions++;
        s->st.registered_bytes += size;
    }
    s->st.register_seconds += fs_now() - t0;
    return 0;
}
