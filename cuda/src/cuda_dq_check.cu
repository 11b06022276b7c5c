/*
 * The GPU dequant checker (header: ggufkit_cuda/cuda_dq_check.h): the CPU's
 * floats and the quantized bytes go up, the GPU dequantizes with the kernels
 * of cuda_dequant*.cu and counts the differing elements on the device; only
 * the count comes back, once per tensor.
 *
 * Why the CPU's floats travel, and not digests of both sides: on the H200
 * host the CPU is the slow side (16 cores decode a 20B Q4_K model, 78 GB of
 * float32, in about 3.7 s), while the copy engine moves those 78 GB in about
 * 1.6 s at ~50 GB/s without any CPU time, overlapped with the decoding of the
 * next chunks. A digest would cost the CPU one more pass over every float (on
 * the side that bounds the run), and an exact count of the differing
 * elements would still need the element-wise pass on a mismatch. Comparing
 * on the device gives the exact count directly, NaN payloads included, and
 * costs the host nothing but the wait for a free slot.
 *
 * Why the quantized bytes are staged, not read from a registered mapping
 * (as fwd_stream.cu can): gguf-dequant-verify drops each chunk's pages once
 * read so that a 400 GB model keeps a bounded RSS, and registering the
 * mapping would pin the whole file resident (and take 0.2 s per 8 GB up
 * front). Staging copies about 1/7 of what the CPU writes for a K-quant
 * (9.4 MB per 16 Mi floats of Q4_K), on a team of threads, with
 * non-temporal stores.
 *
 * Slot s, events and streams:
 *
 *   host      wait copied[s] ─► decode into ref_host[s] (caller) ─► stage
 *             src into raw_host[s] ─► queue ───────────────────────────────┐
 *   copy      wait done[s] ─► ref_host[s] -> ref_dev[s], raw_host[s] ->    │
 *             raw_dev[s] ─► record copied[s]                               ◄┘
 *   work      wait copied[s] ─► dequant raw_dev[s] -> out ─► count(out vs
 *             ref_dev[s]) into counter ─► record done[s]
 *
 * One `out` buffer is enough: the dequant and the count of a chunk run in
 * order on the work stream, before the next chunk's dequant.
 */
#include "cuda_internal.h"
#include "dq_check_plan.h"

#include "ggufkit_cuda/cuda_dequant.h"
#include "ggufkit_cuda/cuda_dq_check.h"
#include "ggufkit_cuda/cuda_upload.h"
#include "ggufkit_cuda/host_copy.h"

extern "C" {
#include "gguf/types.h"
#include "util/cpus.h"
}

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DQC_MAX_SLOTS 8
#define DQC_MIN_CHUNK ((int64_t)4096)
#define DQC_MAX_CHUNK ((int64_t)1 << 30)
#define DQC_DEFAULT_CHUNK ((int64_t)16 << 20)
#define DQC_BYTES_PER_FLOAT 4 /* quantized bytes a slot holds per float: F32's */
#define DQC_THREADS 256       /* threads of a count block (a multiple of 32) */
/* Device bytes past a slot's quantized bytes: the dequant kernels read whole
 * aligned words and are not meant to pass a tensor's end, but a slot whose
 * chunk ends exactly at the allocation's end is where such a read would
 * fault; a few bytes of slack make that impossible. */
#define DQC_RAW_SLACK 256

struct gguf_cuda_dq_check {
    int64_t chunk_elems;
    uint64_t raw_bytes;             /* quantized bytes per slot */
    int n_slots;
    float *ref_host[DQC_MAX_SLOTS]; /* pinned: the CPU's floats */
    void *raw_host[DQC_MAX_SLOTS];  /* pinned: staged quantized bytes */
    float *ref_dev[DQC_MAX_SLOTS];
    void *raw_dev[DQC_MAX_SLOTS];
    cudaEvent_t copied[DQC_MAX_SLOTS]; /* slot s's host buffers read by the copy engine */
    cudaEvent_t done[DQC_MAX_SLOTS];   /* slot s's device buffers read by the count */
    bool used[DQC_MAX_SLOTS];          /* the events above were recorded */
    float *out;                        /* device: the GPU's dequantized chunk */
    unsigned long long *count_dev;     /* device: differing elements of the tensor */
    unsigned long long *count_host;    /* pinned: where finish reads it */
    cudaStream_t copy, work;
    gguf_host_copy_team *team;
    unsigned count_blocks;             /* most blocks of a count launch */
    int cur;                           /* the slot of the next submit */
    bool handed;                       /* ref_host[cur] was handed out since the last submit */
    bool broken;                       /* a CUDA call failed: refuse further work */
    gguf_cuda_dq_check_stats st;
};

static double dqc_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the count kernel ----
 *
 * Elements [0, n) of a and b as 32-bit words; adds the number of unequal
 * words to *count. a and b are the starts of cudaMalloc'd buffers (256-byte
 * aligned), so the 16-byte loads of the main loop are aligned; the last n % 4
 * words are read one by one. Every thread reaches the shuffles and the
 * barrier (no early return), as the full-warp masks require. A block's sum is
 * at most n <= 2^30, so 32 bits hold it; one 64-bit atomic per block that
 * found a difference. */
__global__ void __launch_bounds__(DQC_THREADS)
    dqc_count_kernel(const uint32_t *__restrict__ a, const uint32_t *__restrict__ b, uint64_t n,
                     unsigned long long *__restrict__ count)
{
    const uint64_t tid = (uint64_t)blockIdx.x * DQC_THREADS + threadIdx.x;
    const uint64_t stride = (uint64_t)gridDim.x * DQC_THREADS;
    const uint64_t n4 = n / 4;
    const uint4 *a4 = (const uint4 *)a, *b4 = (const uint4 *)b;
    uint32_t c = 0;
    for (uint64_t i = tid; i < n4; i += stride) {
        const uint4 x = a4[i], y = b4[i];
        c += (uint32_t)(x.x != y.x) + (uint32_t)(x.y != y.y) + (uint32_t)(x.z != y.z) +
             (uint32_t)(x.w != y.w);
    }
    for (uint64_t i = n4 * 4 + tid; i < n; i += stride)
        c += (uint32_t)(a[i] != b[i]);
    for (int off = 16; off > 0; off >>= 1)
        c += __shfl_down_sync(0xffffffffu, c, off);
    __shared__ uint32_t warp_sum[DQC_THREADS / 32];
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    if (lane == 0)
        warp_sum[warp] = c;
    __syncthreads();
    if (warp == 0) {
        c = lane < DQC_THREADS / 32 ? warp_sum[lane] : 0u;
        for (int off = 16; off > 0; off >>= 1)
            c += __shfl_down_sync(0xffffffffu, c, off);
        if (lane == 0 && c != 0)
            atomicAdd(count, (unsigned long long)c);
    }
}

/* ---- life ---- */

void gguf_cuda_dq_check_free(gguf_cuda_dq_check *chk)
{
    if (!chk)
        return;
    if (chk->work)
        (void)cudaStreamSynchronize(chk->work);
    if (chk->copy)
        (void)cudaStreamSynchronize(chk->copy);
    for (int s = 0; s < DQC_MAX_SLOTS; s++) {
        gguf_cuda_host_free(chk->ref_host[s]);
        gguf_cuda_host_free(chk->raw_host[s]);
        gguf_cuda_free(chk->ref_dev[s]);
        gguf_cuda_free(chk->raw_dev[s]);
        if (chk->copied[s])
            (void)cudaEventDestroy(chk->copied[s]);
        if (chk->done[s])
            (void)cudaEventDestroy(chk->done[s]);
    }
    gguf_cuda_free(chk->out);
    gguf_cuda_free(chk->count_dev);
    gguf_cuda_host_free(chk->count_host);
    if (chk->copy)
        (void)cudaStreamDestroy(chk->copy);
    if (chk->work)
        (void)cudaStreamDestroy(chk->work);
    (void)cudaGetLastError();
    gguf_host_copy_team_free(chk->team);
    free(chk);
}

/* Options checked and defaults filled in. */
static int dqc_opts(gguf_cuda_dq_check_opts *o, const gguf_cuda_dq_check_opts *opts,
                    gguf_error *err)
{
    memset(o, 0, sizeof *o);
    if (opts) {
        if (opts->version > GGUF_CUDA_DQ_CHECK_OPTS_VERSION)
            return gguf_opts_version_fail(opts->version, GGUF_CUDA_DQ_CHECK_OPTS_VERSION,
                                          "gguf_cuda_dq_check_opts", err);
        *o = *opts;
    }
    if (o->chunk_elems == 0)
        o->chunk_elems = DQC_DEFAULT_CHUNK;
    if (o->n_slots == 0)
        o->n_slots = 3;
    if (o->n_copy_threads == 0) {
        const int cpus = gguf_cpus_usable();
        o->n_copy_threads = cpus < 1 ? 1 : cpus > 16 ? 16 : cpus;
    }
    if (o->chunk_elems < DQC_MIN_CHUNK || o->chunk_elems > DQC_MAX_CHUNK)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "cuda: dq_check: chunk_elems %lld is not in [%lld, %lld]",
                         (long long)o->chunk_elems, (long long)DQC_MIN_CHUNK,
                         (long long)DQC_MAX_CHUNK);
    if (o->n_slots < 2 || o->n_slots > DQC_MAX_SLOTS)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "cuda: dq_check: n_slots %d is not in [2, %d]", o->n_slots,
                         DQC_MAX_SLOTS);
    if (o->n_copy_threads < 1 || o->n_copy_threads > 32)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "cuda: dq_check: n_copy_threads %d is not in [1, 32]",
                         o->n_copy_threads);
    return GGUF_OK;
}

int gguf_cuda_dq_check_create(gguf_cuda_dq_check **out, const gguf_cuda_dq_check_opts *opts,
                              gguf_error *err)
{
    if (!out)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "cuda: dq_check: NULL out");
    *out = NULL;
    gguf_cuda_dq_check_opts o;
    int rc = dqc_opts(&o, opts, err);
    if (rc)
        return rc;
    int count;
    if ((rc = gguf_cuda_device_count(&count, err)) != 0)
        return rc;
    gguf_cuda_dq_check *chk = (gguf_cuda_dq_check *)calloc(1, sizeof *chk);
    if (!chk)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "cuda: dq_check: out of memory");
    chk->chunk_elems = o.chunk_elems;
    chk->raw_bytes = (uint64_t)o.chunk_elems * DQC_BYTES_PER_FLOAT;
    chk->n_slots = o.n_slots;
    int dev = 0, sms = 0;
    rc = gguf_host_copy_team_create(&chk->team, o.n_copy_threads, err);
    if (rc)
        goto done;
    GC_GOTO(err, cudaGetDevice(&dev));
    GC_GOTO(err, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    /* 8 resident blocks of 256 threads per SM: enough loads in flight to run
     * at memory speed; the grid-stride loop does the rest */
    chk->count_blocks = (unsigned)(sms > 0 ? sms : 1) * 8u;
    GC_GOTO(err, cudaStreamCreateWithFlags(&chk->copy, cudaStreamNonBlocking));
    GC_GOTO(err, cudaStreamCreateWithFlags(&chk->work, cudaStreamNonBlocking));
    for (int s = 0; s < chk->n_slots; s++) {
        GC_GOTO(err, cudaEventCreateWithFlags(&chk->copied[s], cudaEventDisableTiming));
        GC_GOTO(err, cudaEventCreateWithFlags(&chk->done[s], cudaEventDisableTiming));
        const size_t fbytes = (size_t)chk->chunk_elems * sizeof(float);
        if ((rc = gguf_cuda_host_alloc((void **)&chk->ref_host[s], fbytes, err)) != 0 ||
            (rc = gguf_cuda_host_alloc(&chk->raw_host[s], (size_t)chk->raw_bytes, err)) != 0 ||
            (rc = gguf_cuda_malloc((void **)&chk->ref_dev[s], fbytes, err)) != 0 ||
            (rc = gguf_cuda_malloc(&chk->raw_dev[s], (size_t)chk->raw_bytes + DQC_RAW_SLACK,
                                   err)) != 0)
            goto done;
    }
    if ((rc = gguf_cuda_malloc((void **)&chk->out, (size_t)chk->chunk_elems * sizeof(float),
                               err)) != 0 ||
        (rc = gguf_cuda_malloc((void **)&chk->count_dev, sizeof *chk->count_dev, err)) != 0 ||
        (rc = gguf_cuda_host_alloc((void **)&chk->count_host, sizeof *chk->count_host, err)) != 0)
        goto done;
    GC_GOTO(err, cudaMemsetAsync(chk->count_dev, 0, sizeof *chk->count_dev, chk->work));
    GC_GOTO(err, cudaStreamSynchronize(chk->work));
    *out = chk;
    return GGUF_OK;
done:
    gguf_cuda_dq_check_free(chk);
    return rc;
}

int64_t gguf_cuda_dq_check_capacity(const gguf_cuda_dq_check *chk, uint32_t type)
{
    if (!chk || !gguf_cuda_dequant_supported(type))
        return 0;
    const gguf_type_info *ti = gguf_type_get(type);
    if (!ti || !ti->valid)
        return 0;
    return dqc_slot_elems(ti->block_size, ti->type_size, chk->chunk_elems, chk->raw_bytes);
}

/* A CUDA failure: the queued work is in an unknown state, so the checker
 * takes no more. */
static int dqc_broken(gguf_cuda_dq_check *chk, gguf_error *err, cudaError_t e, const char *what)
{
    chk->broken = true;
    return gguf_cuda_fail(err, e, what);
}

#define DQC_TRY(chk, err, call)                                                               \
    do {                                                                                      \
        const cudaError_t dqc_e_ = (call);                                                    \
        if (dqc_e_ != cudaSuccess)                                                            \
            return dqc_broken((chk), (err), dqc_e_, #call);                                   \
    } while (0)

static int dqc_refuse_broken(gguf_error *err)
{
    return gguf_fail(err, GGUF_E_IO, GGUF_NO_OFFSET,
                     "cuda: dq_check: an earlier CUDA call failed; the checker takes no more work");
}

/* Wait until the copy engine has read slot s's host buffers. */
static int dqc_wait_slot(gguf_cuda_dq_check *chk, int s, gguf_error *err)
{
    if (!chk->used[s])
        return GGUF_OK;
    const double t0 = dqc_now();
    DQC_TRY(chk, err, cudaEventSynchronize(chk->copied[s]));
    chk->st.wait_seconds += dqc_now() - t0;
    return GGUF_OK;
}

int gguf_cuda_dq_check_host_buffer(gguf_cuda_dq_check *chk, float **buf, gguf_error *err)
{
    if (!chk || !buf)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "cuda: dq_check: host_buffer: NULL argument");
    *buf = NULL;
    if (chk->broken)
        return dqc_refuse_broken(err);
    const int rc = dqc_wait_slot(chk, chk->cur, err);
    if (rc)
        return rc;
    chk->handed = true;
    *buf = chk->ref_host[chk->cur];
    return GGUF_OK;
}

/*
 * One piece into slot chk->cur: n elements (whole blocks, at most the
 * capacity), src_bytes of quantized bytes at src; the CPU's floats already in
 * ref_host[cur] (in_place) or at ref (copied here).
 */
static int dqc_queue(gguf_cuda_dq_check *chk, uint32_t type, const uint8_t *src,
                     size_t src_bytes, const float *ref, bool in_place, int64_t n,
                     gguf_error *err)
{
    const int s = chk->cur;
    int rc = dqc_wait_slot(chk, s, err);
    if (rc)
        return rc;
    const size_t ref_bytes = (size_t)n * sizeof(float);
    double t0 = dqc_now();
    if (!in_place) {
        gguf_host_copy(chk->team, chk->ref_host[s], ref, ref_bytes);
        chk->st.ref_copied_bytes += ref_bytes;
    }
    chk->st.stage_seconds += dqc_now() - t0;
    /* the floats first: the copy engine starts on them while the host
     * stages the quantized bytes */
    if (chk->used[s])
        DQC_TRY(chk, err, cudaStreamWaitEvent(chk->copy, chk->done[s], 0));
    DQC_TRY(chk, err, cudaMemcpyAsync(chk->ref_dev[s], chk->ref_host[s], ref_bytes,
                                      cudaMemcpyHostToDevice, chk->copy));
    t0 = dqc_now();
    gguf_host_copy(chk->team, chk->raw_host[s], src, src_bytes);
    chk->st.stage_seconds += dqc_now() - t0;
    DQC_TRY(chk, err, cudaMemcpyAsync(chk->raw_dev[s], chk->raw_host[s], src_bytes,
                                      cudaMemcpyHostToDevice, chk->copy));
    DQC_TRY(chk, err, cudaEventRecord(chk->copied[s], chk->copy));
    /* from here on slot s's host buffers belong to the copy engine until
     * copied[s] */
    chk->used[s] = true;
    chk->handed = false;
    chk->cur = (s + 1) % chk->n_slots;
    DQC_TRY(chk, err, cudaStreamWaitEvent(chk->work, chk->copied[s], 0));
    rc = gguf_cuda_dequant(type, chk->raw_dev[s], chk->out, n, (gguf_cuda_stream *)chk->work,
                           err);
    if (rc) {
        chk->broken = true;
        return rc;
    }
    const uint64_t n4 = (uint64_t)n / 4;
    uint64_t blocks = (n4 + DQC_THREADS - 1) / DQC_THREADS;
    if (blocks > chk->count_blocks)
        blocks = chk->count_blocks;
    if (blocks == 0)
        blocks = 1; /* fewer than 4 elements: the tail loop alone */
    dqc_count_kernel<<<(unsigned)blocks, DQC_THREADS, 0, chk->work>>>(
        (const uint32_t *)chk->out, (const uint32_t *)chk->ref_dev[s], (uint64_t)n,
        chk->count_dev);
    DQC_TRY(chk, err, cudaGetLastError());
    DQC_TRY(chk, err, cudaEventRecord(chk->done[s], chk->work));
    chk->st.chunks++;
    chk->st.src_bytes += src_bytes;
    chk->st.ref_bytes += ref_bytes;
    return GGUF_OK;
}

int gguf_cuda_dq_check_submit(gguf_cuda_dq_check *chk, uint32_t type, const void *src,
                              size_t src_bytes, const float *ref, int64_t n, gguf_error *err)
{
    if (!chk)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "cuda: dq_check: NULL checker");
    if (chk->broken)
        return dqc_refuse_broken(err);
    const gguf_type_info *ti = gguf_type_get(type);
    if (!ti || !ti->valid)
        return gguf_fail(err, GGUF_E_BAD_TYPE, GGUF_NO_OFFSET,
                         "cuda: dq_check: type id %u is unknown or removed", type);
    if (!gguf_cuda_dequant_supported(type))
        return gguf_fail(err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                         "cuda: dq_check: type %s has no GPU dequantization", ti->name);
    if (n < 0 || n % ti->block_size != 0)
        return gguf_fail(err, GGUF_E_BAD_SHAPE, GGUF_NO_OFFSET,
                         "cuda: dq_check: %lld elements is not a whole number of %s blocks of %u",
                         (long long)n, ti->name, ti->block_size);
    const uint64_t want = (uint64_t)(n / ti->block_size) * ti->type_size;
    if (src_bytes != want)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "cuda: dq_check: %zu source bytes for %lld %s elements (%llu expected)",
                         src_bytes, (long long)n, ti->name, (unsigned long long)want);
    if (n == 0)
        return GGUF_OK;
    if (!src || !ref)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "cuda: dq_check: NULL buffer");
    const int64_t cap = gguf_cuda_dq_check_capacity(chk, type);
    if (cap <= 0) /* cannot happen for chunk_elems >= 4096; kept as a guard */
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "cuda: dq_check: a slot holds no %s block", ti->name);
    uintptr_t bufs[DQC_MAX_SLOTS];
    for (int s = 0; s < chk->n_slots; s++)
        bufs[s] = (uintptr_t)chk->ref_host[s];
    const int slot = dqc_ref_slot((uintptr_t)ref, (uint64_t)n * sizeof(float), bufs,
                                  chk->n_slots, (uint64_t)chk->chunk_elems * sizeof(float));
    const uint8_t *s8 = (const uint8_t *)src;
    if (slot != DQC_REF_OUTSIDE) {
        if (slot != chk->cur || !chk->handed || n > cap)
            return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                             "cuda: dq_check: ref %p is inside the checker's buffers but is not "
                             "the one gguf_cuda_dq_check_host_buffer handed out last, or holds "
                             "%lld elements where a slot holds %lld %s elements",
                             (const void *)ref, (long long)n, (long long)cap, ti->name);
        return dqc_queue(chk, type, s8, src_bytes, ref, true, n, err);
    }
    /* the caller's own memory: pieces of the capacity, each copied into a slot */
    for (int64_t e0 = 0; e0 < n; e0 += cap) {
        const int64_t m = n - e0 < cap ? n - e0 : cap;
        const uint64_t b0 = (uint64_t)(e0 / ti->block_size) * ti->type_size;
        const size_t mb = (size_t)((uint64_t)(m / ti->block_size) * ti->type_size);
        const int rc = dqc_queue(chk, type, s8 + b0, mb, ref + e0, false, m, err);
        if (rc)
            return rc;
    }
    return GGUF_OK;
}

int gguf_cuda_dq_check_finish(gguf_cuda_dq_check *chk, uint64_t *n_diff, gguf_error *err)
{
    if (!chk || !n_diff)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "cuda: dq_check: finish: NULL argument");
    *n_diff = 0;
    if (chk->broken)
        return dqc_refuse_broken(err);
    const double t0 = dqc_now();
    DQC_TRY(chk, err, cudaMemcpyAsync(chk->count_host, chk->count_dev, sizeof *chk->count_dev,
                                      cudaMemcpyDeviceToHost, chk->work));
    DQC_TRY(chk, err, cudaMemsetAsync(chk->count_dev, 0, sizeof *chk->count_dev, chk->work));
    /* the work stream waited for every copy it used; the copy stream's own
     * errors are reported by its sync */
    DQC_TRY(chk, err, cudaStreamSynchronize(chk->work));
    DQC_TRY(chk, err, cudaStreamSynchronize(chk->copy));
    *n_diff = (uint64_t)*chk->count_host;
    chk->st.finish_seconds += dqc_now() - t0;
    chk->st.tensors++;
    return GGUF_OK;
}

void gguf_cuda_dq_check_get_stats(const gguf_cuda_dq_check *chk, gguf_cuda_dq_check_stats *out)
{
    if (!out)
        return;
    memset(out, 0, sizeof *out);
    if (chk)
        *out = chk->st;
}
