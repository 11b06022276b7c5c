/*
 * The weight uploader: pinned staging, a copy stream and a work stream, so
 * the host copy of chunk c+1, the PCIe copy of chunk c and the dequant of
 * chunk c-1 run at the same time (header: ggufkit_cuda/cuda_upload.h).
 */
#include "cuda_internal.h"

#include "ggufkit_cuda/cuda_dequant.h"
#include "ggufkit_cuda/cuda_upload.h"

extern "C" {
#include "util/cpus.h"
#include "gguf/types.h"
}

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GC_MAX_BUFFERS 8
#define GC_MAX_THREADS 64

struct gguf_cuda_uploader {
    size_t chunk_bytes;
    int n_buffers, n_threads;
    void *pinned[GC_MAX_BUFFERS];
    void *raw[GC_MAX_BUFFERS];
    cudaEvent_t copied[GC_MAX_BUFFERS]; /* pinned[b] -> raw[b] finished */
    cudaEvent_t done[GC_MAX_BUFFERS];   /* dequant of raw[b] finished */
    bool used[GC_MAX_BUFFERS];          /* the events above were recorded */
    cudaEvent_t last;                   /* end of the latest load on the work stream */
    cudaStream_t copy, work;
    int next; /* next buffer */
};

int gguf_cuda_host_alloc(void **out, size_t bytes, gguf_error *err)
{
    if (!out)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "cuda: host_alloc: NULL out");
    *out = NULL;
    if (bytes == 0)
        return GGUF_OK;
    GC_TRY(err, cudaMallocHost(out, bytes));
    return GGUF_OK;
}

void gguf_cuda_host_free(void *p)
{
    if (p && cudaFreeHost(p) != cudaSuccess)
        (void)cudaGetLastError();
}

void gguf_cuda_uploader_free(gguf_cuda_uploader *up)
{
    if (!up)
        return;
    if (up->work)
        (void)cudaStreamSynchronize(up->work);
    if (up->copy)
        (void)cudaStreamSynchronize(up->copy);
    for (int b = 0; b < GC_MAX_BUFFERS; b++) {
        gguf_cuda_host_free(up->pinned[b]);
        gguf_cuda_free(up->raw[b]);
        if (up->copied[b])
            (void)cudaEventDestroy(up->copied[b]);
        if (up->done[b])
            (void)cudaEventDestroy(up->done[b]);
    }
    if (up->last)
        (void)cudaEventDestroy(up->last);
    if (up->copy)
        (void)cudaStreamDestroy(up->copy);
    if (up->work)
        (void)cudaStreamDestroy(up->work);
    (void)cudaGetLastError();
    free(up);
}

int gguf_cuda_uploader_create(gguf_cuda_uploader **out, const gguf_cuda_uploader_opts *opts,
                              gguf_error *err)
{
    if (!out)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "cuda: uploader: NULL out");
    *out = NULL;
    gguf_cuda_uploader_opts o = {0, 0, 0};
    if (opts)
        o = *opts;
    if (o.n_buffers < 0 || o.n_buffers > GC_MAX_BUFFERS || o.n_threads < 0 ||
        o.n_threads > GC_MAX_THREADS)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "cuda: uploader: n_buffers %d (1..%d) or n_threads %d (1..%d) out of range",
                         o.n_buffers, GC_MAX_BUFFERS, o.n_threads, GC_MAX_THREADS);
    if (o.chunk_bytes == 0)
        o.chunk_bytes = (size_t)64 << 20;
    if (o.chunk_bytes < 4096)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "cuda: uploader: chunk of %zu bytes is below 4096", o.chunk_bytes);
    int count;
    int rc = gguf_cuda_device_count(&count, err);
    if (rc)
        return rc;
    gguf_cuda_uploader *up = (gguf_cuda_uploader *)calloc(1, sizeof *up);
    if (!up)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "cuda: uploader: out of memory");
    up->chunk_bytes = o.chunk_bytes;
    up->n_buffers = o.n_buffers ? o.n_buffers : 2;
    if (o.n_threads == 0) {
        /* the host copy is the stage that limits: use the machine (H200
         * host, 16 cores: 8 threads 50%, 16 threads 76% of pinned H2D) */
        const long cpus = gguf_cpus_usable();
        o.n_threads = cpus < 1 ? 1 : cpus > 16 ? 16 : (int)cpus;
    }
    up->n_threads = o.n_threads;
    cudaError_t e = cudaStreamCreateWithFlags(&up->copy, cudaStreamNonBlocking);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&up->work, cudaStreamNonBlocking);
    if (e == cudaSuccess)
        e = cudaEventCreateWithFlags(&up->last, cudaEventDisableTiming);
    for (int b = 0; e == cudaSuccess && b < up->n_buffers; b++) {
        e = cudaEventCreateWithFlags(&up->copied[b], cudaEventDisableTiming);
        if (e == cudaSuccess)
            e = cudaEventCreateWithFlags(&up->done[b], cudaEventDisableTiming);
    }
    if (e != cudaSuccess) {
        rc = gguf_cuda_fail(err, e, "uploader streams and events");
        gguf_cuda_uploader_free(up);
        return rc;
    }
    for (int b = 0; b < up->n_buffers; b++) {
        rc = gguf_cuda_host_alloc(&up->pinned[b], up->chunk_bytes, err);
        if (rc == GGUF_OK)
            rc = gguf_cuda_malloc(&up->raw[b], up->chunk_bytes, err);
        if (rc != GGUF_OK) {
            gguf_cuda_uploader_free(up);
            return rc;
        }
    }
    *out = up;
    return GGUF_OK;
}

/* ---- parallel host copy into pinned memory ---- */

typedef struct copy_job {
    uint8_t *dst;
    const uint8_t *src;
    size_t n;
} copy_job;

static void *copy_worker(void *arg)
{
    const copy_job *j = (const copy_job *)arg;
    memcpy(j->dst, j->src, j->n);
    return NULL;
}

/* memcpy over up to n_threads threads (the caller is one of them); slices of
 * at least 1 MiB. Falls back to the calling thread when a thread cannot be
 * started. */
static void parallel_copy(uint8_t *dst, const uint8_t *src, size_t n, int n_threads)
{
    int t = n_threads < 1 ? 1 : n_threads;
    while (t > 1 && n / (size_t)t < ((size_t)1 << 20))
        t--;
    copy_job jobs[GC_MAX_THREADS] = {};
    pthread_t tid[GC_MAX_THREADS];
    bool started[GC_MAX_THREADS] = {false};
    const size_t slice = (n / (size_t)t + 63) & ~(size_t)63;
    for (int i = 0; i < t; i++) {
        const size_t off = (size_t)i * slice;
        jobs[i].dst = dst + off;
        jobs[i].src = src + off;
        jobs[i].n = off >= n ? 0 : (n - off < slice ? n - off : slice);
    }
    for (int i = 1; i < t; i++)
        started[i] = pthread_create(&tid[i], NULL, copy_worker, &jobs[i]) == 0;
    copy_worker(&jobs[0]);
    for (int i = 1; i < t; i++) {
        if (started[i])
            pthread_join(tid[i], NULL);
        else
            copy_worker(&jobs[i]);
    }
}

int gguf_cuda_uploader_load(gguf_cuda_uploader *up, uint32_t type, const void *src, int64_t n,
                            uint32_t out_type, void *dst, gguf_error *err)
{
    if (!up)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "cuda: uploader: NULL uploader");
    const gguf_type_info *ti = gguf_type_get(type);
    if (!ti || !ti->valid)
        return gguf_fail(err, GGUF_E_BAD_TYPE, GGUF_NO_OFFSET,
                         "cuda: uploader: type id %u is unknown or removed", type);
    if (!gguf_cuda_dequant_supported(type))
        return gguf_fail(err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                         "cuda: uploader: type %s has no GPU dequantization", ti->name);
    if (out_type != GGUF_TYPE_F32 && out_type != GGUF_TYPE_F16 && out_type != GGUF_TYPE_BF16)
        return gguf_fail(err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                         "cuda: uploader: output type %s is not F32, F16 or BF16",
                         gguf_type_name(out_type));
    if (n < 0 || n % ti->block_size != 0)
        return gguf_fail(err, GGUF_E_BAD_SHAPE, GGUF_NO_OFFSET,
                         "cuda: uploader: %lld elements is not a whole number of %s blocks of %u",
                         (long long)n, ti->name, ti->block_size);
    if (n == 0)
        return GGUF_OK;
    if (!src || !dst)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "cuda: uploader: NULL buffer");

    const size_t out_size = out_type == GGUF_TYPE_F32 ? 4 : 2;
    /* whole blocks per chunk; plain types: a multiple of 8 elements too */
    uint64_t blocks_per_chunk = up->chunk_bytes / ti->type_size;
    if (ti->block_size == 1)
        blocks_per_chunk &= ~(uint64_t)7;
    if (blocks_per_chunk == 0)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "cuda: uploader: chunk of %zu bytes holds no %s block", up->chunk_bytes,
                         ti->name);
    const uint64_t n_blocks = (uint64_t)n / ti->block_size;
    const uint8_t *s = (const uint8_t *)src;
    uint8_t *d = (uint8_t *)dst;
    for (uint64_t b0 = 0; b0 < n_blocks; b0 += blocks_per_chunk) {
        const uint64_t nb = n_blocks - b0 < blocks_per_chunk ? n_blocks - b0 : blocks_per_chunk;
        const size_t bytes = (size_t)(nb * ti->type_size);
        const int b = up->next;
        up->next = (up->next + 1) % up->n_buffers;
        if (up->used[b])
            GC_TRY(err, cudaEventSynchronize(up->copied[b])); /* pinned[b] is free */
        parallel_copy((uint8_t *)up->pinned[b], s + b0 * ti->type_size, bytes, up->n_threads);
        if (up->used[b])
            GC_TRY(err, cudaStreamWaitEvent(up->copy, up->done[b], 0)); /* raw[b] is free */
        GC_TRY(err, cudaMemcpyAsync(up->raw[b], up->pinned[b], bytes, cudaMemcpyHostToDevice,
                                    up->copy));
        GC_TRY(err, cudaEventRecord(up->copied[b], up->copy));
        GC_TRY(err, cudaStreamWaitEvent(up->work, up->copied[b], 0));
        const int rc = gguf_cuda_dequant_to(type, up->raw[b], out_type,
                                            d + b0 * ti->block_size * out_size,
                                            (int64_t)(nb * ti->block_size),
                                            (gguf_cuda_stream *)up->work, err);
        if (rc != GGUF_OK)
            return rc;
        GC_TRY(err, cudaEventRecord(up->done[b], up->work));
        up->used[b] = true;
    }
    GC_TRY(err, cudaEventRecord(up->last, up->work));
    return GGUF_OK;
}

int gguf_cuda_uploader_wait(gguf_cuda_uploader *up, gguf_cuda_stream *stream, gguf_error *err)
{
    if (!up)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "cuda: uploader: NULL uploader");
    GC_TRY(err, cudaStreamWaitEvent((cudaStream_t)stream, up->last, 0));
    return GGUF_OK;
}

int gguf_cuda_uploader_sync(gguf_cuda_uploader *up, gguf_error *err)
{
    if (!up)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "cuda: uploader: NULL uploader");
    GC_TRY(err, cudaStreamSynchronize(up->copy));
    GC_TRY(err, cudaStreamSynchronize(up->work));
    return GGUF_OK;
}
