/*
 * ggufkit_cuda/nccl_comm.h - NCCL communicators for the tensor-parallel GPU
 * forward (issue 8), with deadlines: a dead or stuck rank makes the others
 * fail with a clear error, never hang.
 *
 * One process per GPU. Rendezvous through a file that every rank can read
 * (a local temporary file for ranks launched on one host, a shared file
 * system across hosts): rank 0 writes NCCL's unique id to it (temporary file
 * + rename, so a reader never sees half of it), the others poll for it.
 *
 * Every call that can wait on other ranks takes the communicator's deadline
 * (timeout_s): communicator creation (non-blocking init, polled), and each
 * collective (queued on a stream, then polled with cudaStreamQuery and
 * ncclCommGetAsyncError). On timeout or on an asynchronous NCCL error the
 * communicator is aborted (ncclCommAbort) and the call returns GGUF_E_IO
 * with a message naming the rank, the collective and the cause; tools exit 3.
 * After such an error only gguf_nccl_comm_free may be called.
 *
 * NVLink SHARP (NVLS) stays off: creation sets NCCL_NVLS_ENABLE=0 in the
 * environment unless the variable is already set (NVLS multicast needs
 * fabric-manager set-up that the machines this runs on do not have).
 *
 * Built with NCCL when CMake finds nccl.h and libnccl (the CUDA toolkit's
 * folders first); otherwise every function returns GGUF_E_UNSUPPORTED and
 * gguf_nccl_available() is false.
 */
#ifndef GGUFKIT_CUDA_NCCL_COMM_H
#define GGUFKIT_CUDA_NCCL_COMM_H

#include <stdbool.h>
#include <stddef.h>

#include "gguf/error.h"
#include "ggufkit_cuda/cuda_device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gguf_nccl_comm gguf_nccl_comm;

/* True when this build has NCCL. */
bool gguf_nccl_available(void);

/*
 * Join a communicator of `world` ranks as `rank` on CUDA device `device`
 * (made current for the calling thread). rdv_path: the rendezvous file
 * (rank 0 creates it; remove it after the run). timeout_s > 0 bounds the
 * rendezvous, the init and every later collective.
 * @return 0; GGUF_E_INVALID (bad rank/world/device, NULL path);
 *         GGUF_E_IO (ENODEV: no GPU; ETIMEDOUT: a rank did not come in
 *         time; EIO: NCCL failed); GGUF_E_UNSUPPORTED without NCCL.
 */
int gguf_nccl_comm_create(gguf_nccl_comm **out, int rank, int world, int device,
                          const char *rdv_path, double timeout_s, gguf_error *err);

/* Destroy (or abort, after an error) and free. Accepts NULL. */
void gguf_nccl_comm_free(gguf_nccl_comm *c);

int gguf_nccl_comm_rank(const gguf_nccl_comm *c);
int gguf_nccl_comm_world(const gguf_nccl_comm *c);
int gguf_nccl_comm_device(const gguf_nccl_comm *c);

/* In-place sum of n floats of device memory over all ranks, queued on
 * stream (NULL: the communicator's own), and waited for under the deadline.
 * @return 0; GGUF_E_IO (ETIMEDOUT: a peer did not join in time, the
 *         communicator is aborted; EIO: NCCL or CUDA error). */
int gguf_nccl_all_reduce_sum(gguf_nccl_comm *c, float *buf, size_t n, gguf_cuda_stream *stream,
                             gguf_error *err);

/* recv[r * n + i] = send of rank r [i]: n floats from every rank into
 * world * n floats of device memory. Errors as gguf_nccl_all_reduce_sum. */
int gguf_nccl_all_gather(gguf_nccl_comm *c, const float *send, float *recv, size_t n,
                         gguf_cuda_stream *stream, gguf_error *err);

#ifdef __cplusplus
}
#endif
#endif /* GGUFKIT_CUDA_NCCL_COMM_H */
