/*
 * NCCL communicators with deadlines (ggufkit_cuda/nccl_comm.h).
 *
 * Why polling: a blocking NCCL call waits forever for a rank that died, and
 * a process stuck in a collective cannot even be interrupted cleanly. With
 * a non-blocking communicator (config.blocking = 0) every call returns at
 * once; we then poll ncclCommGetAsyncError (and the stream, for
 * collectives) until done, failed or past the deadline, and on the last two
 * abort the communicator so that nothing stays queued on the GPU.
 */
#include "cuda_internal.h"

#include "ggufkit_cuda/nccl_comm.h"
#include "gguf/output.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#if defined(GGUFKIT_HAVE_NCCL)
#include <nccl.h>

#include "fwd_dl.h"

struct gguf_nccl_comm {
    ncclComm_t comm;
    cudaStream_t stream;
    int rank, world, device;
    double timeout_s;
    bool broken;
};

static double nc_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void nc_nap(void)
{
    struct timespec ts = {0, 200000}; /* 0.2 ms */
    nanosleep(&ts, NULL);
}

static int nc_fail(gguf_error *err, int sys, const char *fmt, int rank, const char *what,
                   const char *why)
{
    gguf_fail(err, GGUF_E_IO, GGUF_NO_OFFSET, fmt, rank, what, why);
    if (err)
        err->sys_errno = sys;
    return GGUF_E_IO;
}

bool gguf_nccl_available(void)
{
    return true;
}

/* Wait until the communicator's pending operation is done (ncclSuccess), or
 * fail on an error or past `deadline`; also waits for `stream` when given. */
static int nc_wait(gguf_nccl_comm *c, cudaStream_t stream, double deadline, const char *what,
                   gguf_error *err)
{
    for (;;) {
        ncclResult_t ar = ncclSuccess;
        ncclResult_t qr = ncclCommGetAsyncError(c->comm, &ar);
        if (qr != ncclSuccess)
            ar = qr;
        if (ar != ncclSuccess && ar != ncclInProgress) {
            c->broken = true;
            ncclCommAbort(c->comm);
            c->comm = NULL;
            return nc_fail(err, EIO, "nccl: rank %d: %s failed: %s (a peer rank may have died)",
                           c->rank, what, ncclGetErrorString(ar));
        }
        bool done = ar == ncclSuccess;
        if (done && stream) {
            cudaError_t e = cudaStreamQuery(stream);
            if (e != cudaSuccess && e != cudaErrorNotReady) {
                c->broken = true;
                return gguf_cuda_fail(err, e, what);
            }
            done = e == cudaSuccess;
        }
        if (done)
            return 0;
        if (nc_now() > deadline) {
            c->broken = true;
            ncclCommAbort(c->comm);
            c->comm = NULL;
            char why[96];
            snprintf(why, sizeof why, "no answer within %.0f s", c->timeout_s);
            return nc_fail(err, ETIMEDOUT,
                           "nccl: rank %d: %s timed out: %s (a peer rank died, hangs or never "
                           "started)",
                           c->rank, what, why);
        }
        nc_nap();
    }
}

/* Rank 0: write the id to path; it appears whole (gguf/output.h), so a rank
 * that polls for it never reads half of it. */
static int nc_write_id(const char *path, const ncclUniqueId *id, gguf_error *err)
{
    gguf_output_opts oo = {};
    oo.overwrite = true;
    return gguf_output_write_file(path, id, sizeof *id, &oo, err);
}

static int nc_read_id(const char *path, ncclUniqueId *id, double deadline, int rank,
                      gguf_error *err)
{
    for (;;) {
        int fd = open(path, O_RDONLY);
        if (fd >= 0) {
            ssize_t r = read(fd, id, sizeof *id);
            close(fd);
            if (r == (ssize_t)sizeof *id)
                return 0;
        }
        if (nc_now() > deadline) {
            gguf_fail(err, GGUF_E_IO, GGUF_NO_OFFSET,
                      "nccl: rank %d: %s: rank 0 did not publish the communicator id in time",
                      rank, path);
            if (err)
                err->sys_errno = ETIMEDOUT;
            return GGUF_E_IO;
        }
        struct timespec ts = {0, 5000000}; /* 5 ms */
        nanosleep(&ts, NULL);
    }
}

int gguf_nccl_comm_create(gguf_nccl_comm **out, int rank, int world, int device,
                          const char *rdv_path, double timeout_s, gguf_error *err)
{
    if (!out)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "nccl: NULL out");
    *out = NULL;
    if (world < 1 || rank < 0 || rank >= world || device < 0 || !rdv_path || !*rdv_path ||
        !(timeout_s > 0))
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "nccl: bad communicator arguments (rank %d of %d, device %d)", rank,
                         world, device);
    {
        int lrc = fwd_nccl_load(err);
        if (lrc)
            return lrc;
    }
    /* NVLS (NVLink SHARP multicast) off unless the user chose otherwise. */
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    int n_dev = 0;
    GC_TRY(err, cudaGetDeviceCount(&n_dev));
    if (device >= n_dev)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "nccl: rank %d wants device %d, this host has %d", rank, device, n_dev);
    GC_TRY(err, cudaSetDevice(device));
    gguf_nccl_comm *c = (gguf_nccl_comm *)calloc(1, sizeof *c);
    if (!c)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "nccl: out of memory");
    c->rank = rank;
    c->world = world;
    c->device = device;
    c->timeout_s = timeout_s;
    const double deadline = nc_now() + timeout_s;
    ncclUniqueId id;
    int rc = 0;
    cudaError_t ce = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (ce != cudaSuccess) {
        rc = gguf_cuda_fail(err, ce, "cudaStreamCreate");
        goto fail;
    }
    if (rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) {
            rc = nc_fail(err, EIO, "nccl: rank %d: %s: %s", rank, "ncclGetUniqueId",
                         ncclGetErrorString(r));
            goto fail;
        }
        if ((rc = nc_write_id(rdv_path, &id, err)))
            goto fail;
    } else if ((rc = nc_read_id(rdv_path, &id, deadline, rank, err))) {
        goto fail;
    }
    {
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        cfg.blocking = 0;
        ncclResult_t r = ncclCommInitRankConfig(&c->comm, world, id, rank, &cfg);
        if (r != ncclSuccess && r != ncclInProgress) {
            if (c->comm)
                ncclCommAbort(c->comm);
            c->comm = NULL;
            rc = nc_fail(err, EIO, "nccl: rank %d: %s: %s", rank, "ncclCommInitRankConfig",
                         ncclGetErrorString(r));
            goto fail;
        }
        if ((rc = nc_wait(c, NULL, deadline, "communicator init (waiting for every rank)", err)))
            goto fail;
    }
    *out = c;
    return 0;
fail:
    gguf_nccl_comm_free(c);
    return rc;
}

void gguf_nccl_comm_free(gguf_nccl_comm *c)
{
    if (!c)
        return;
    (void)cudaSetDevice(c->device);
    if (c->comm) {
        if (c->broken) {
            ncclCommAbort(c->comm);
        } else {
            /* Finalize flushes; bounded like everything else, then destroy
             * (or abort when a peer is gone). */
            ncclResult_t r = ncclCommFinalize(c->comm);
            bool ok = r == ncclSuccess || r == ncclInProgress;
            if (ok) {
                gguf_error e;
                ok = nc_wait(c, NULL, nc_now() + c->timeout_s, "finalize", &e) == 0;
            }
            if (c->comm) {
                if (ok)
                    ncclCommDestroy(c->comm);
                else
                    ncclCommAbort(c->comm);
            }
        }
    }
    if (c->stream) {
        (void)cudaStreamSynchronize(c->stream);
        (void)cudaStreamDestroy(c->stream);
    }
    free(c);
}

int gguf_nccl_comm_rank(const gguf_nccl_comm *c)
{
    return c ? c->rank : -1;
}

int gguf_nccl_comm_world(const gguf_nccl_comm *c)
{
    return c ? c->world : 0;
}

int gguf_nccl_comm_device(const gguf_nccl_comm *c)
{
    return c ? c->device : -1;
}

static int nc_ready(gguf_nccl_comm *c, const void *p, gguf_error *err)
{
    if (!c || !p)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "nccl: NULL communicator or buffer");
    if (c->broken || !c->comm)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "nccl: rank %d: the communicator failed earlier", c->rank);
    GC_TRY(err, cudaSetDevice(c->device));
    return 0;
}

int gguf_nccl_all_reduce_sum(gguf_nccl_comm *c, float *buf, size_t n, gguf_cuda_stream *stream,
                             gguf_error *err)
{
    int rc = nc_ready(c, buf, err);
    if (rc)
        return rc;
    cudaStream_t s = stream ? (cudaStream_t)stream : c->stream;
    const double deadline = nc_now() + c->timeout_s;
    ncclResult_t r = ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, c->comm, s);
    if (r != ncclSuccess && r != ncclInProgress) {
        c->broken = true;
        return nc_fail(err, EIO, "nccl: rank %d: %s: %s", c->rank, "all-reduce",
                       ncclGetErrorString(r));
    }
    return nc_wait(c, s, deadline, "all-reduce", err);
}

int gguf_nccl_all_gather(gguf_nccl_comm *c, const float *send, float *recv, size_t n,
                         gguf_cuda_stream *stream, gguf_error *err)
{
    int rc = nc_ready(c, send, err);
    if (rc || (rc = nc_ready(c, recv, err)))
        return rc;
    cudaStream_t s = stream ? (cudaStream_t)stream : c->stream;
    const double deadline = nc_now() + c->timeout_s;
    ncclResult_t r = ncclAllGather(send, recv, n, ncclFloat32, c->comm, s);
    if (r != ncclSuccess && r != ncclInProgress) {
        c->broken = true;
        return nc_fail(err, EIO, "nccl: rank %d: %s: %s", c->rank, "all-gather",
                       ncclGetErrorString(r));
    }
    return nc_wait(c, s, deadline, "all-gather", err);
}

#else /* no NCCL in this build */

static int nc_none(gguf_error *err)
{
    return gguf_fail(err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                     "nccl: this build has no NCCL (nccl.h / libnccl not found by CMake)");
}

bool gguf_nccl_available(void)
{
    return false;
}

int gguf_nccl_comm_create(gguf_nccl_comm **out, int rank, int world, int device,
                          const char *rdv_path, double timeout_s, gguf_error *err)
{
    if (out)
        *out = NULL;
    return nc_none(err);
}

void gguf_nccl_comm_free(gguf_nccl_comm *c)
{
}

int gguf_nccl_comm_rank(const gguf_nccl_comm *c)
{
    return -1;
}

int gguf_nccl_comm_world(const gguf_nccl_comm *c)
{
    return 0;
}

int gguf_nccl_comm_device(const gguf_nccl_comm *c)
{
    return -1;
}

int gguf_nccl_all_reduce_sum(gguf_nccl_comm *c, float *buf, size_t n, gguf_cuda_stream *stream,
                             gguf_error *err)
{
    return nc_none(err);
}

int gguf_nccl_all_gather(gguf_nccl_comm *c, const float *send, float *recv, size_t n,
                         gguf_cuda_stream *stream, gguf_error *err)
{
    return nc_none(err);
}
#endif
