/*
 * ggufkit_cuda/cuda_upload.h - stream quantized weights from host memory (a
 * GGUF mmap) into the GPU and dequantize them there, overlapping the three
 * stages: host copy into pinned staging, host-to-device copy, GPU dequant.
 *
 * The first piece of the streaming GPU forward (issue 8): a layer's tensors
 * are uploaded while the previous layer computes, through a fixed amount of
 * pinned and device memory, whatever the model's size.
 *
 *   chunk c (buffer b = c % n_buffers):
 *     host:        wait until pinned[b]'s last copy finished; memcpy the chunk
 *                  from src into pinned[b] (n_threads threads)
 *     copy stream: wait until raw[b]'s last dequant finished; pinned[b] ->
 *                  raw[b]; record copied[b]
 *     work stream: wait copied[b]; dequantize raw[b] into dst; record done[b]
 *
 * Chunks are whole blocks. The result equals gguf_cuda_dequant_to() of the
 * whole tensor bit for bit (the kernels are the same, per block).
 *
 * An uploader is used from one host thread at a time.
 */
#ifndef GGUFKIT_CUDA_UPLOAD_H
#define GGUFKIT_CUDA_UPLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/error.h"
#include "ggufkit_cuda/cuda_device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gguf_cuda_uploader gguf_cuda_uploader;

typedef struct gguf_cuda_uploader_opts {
    size_t chunk_bytes; /* quantized bytes per chunk; 0: 64 MiB */
    int n_buffers;      /* pinned + device staging buffers; 0: 2 (double buffering) */
    int n_threads;      /* host threads copying into pinned memory; 0: the usable
                           CPUs, at most 16 (the host copy is the slowest stage) */
} gguf_cuda_uploader_opts;

/*
 * Allocate the staging buffers (n_buffers x chunk_bytes pinned host memory
 * and as much device memory) and two streams on the current device.
 * opts may be NULL.
 * @return 0; GGUF_E_INVALID for bad options; GGUF_E_NOMEM; GGUF_E_IO (ENODEV:
 *         no device).
 */
int gguf_cuda_uploader_create(gguf_cuda_uploader **out, const gguf_cuda_uploader_opts *opts,
                              gguf_error *err);

/* Wait for queued work and free everything. Accepts NULL. */
void gguf_cuda_uploader_free(gguf_cuda_uploader *up);

/*
 * Upload n elements of `type` from host memory src (the raw GGUF bytes, any
 * alignment, pageable or pinned) and dequantize them into the device buffer
 * dst as out_type (GGUF_TYPE_F32, F16 or BF16). Returns when the last chunk
 * has been handed to the GPU: src may be reused then; dst is complete after
 * gguf_cuda_uploader_sync(), or for work queued on `wait_stream` after the
 * uploader's completion has been made a dependency of it (see _wait).
 * @return as gguf_cuda_dequant_to; GGUF_E_INVALID for a NULL src/dst/up.
 */
int gguf_cuda_uploader_load(gguf_cuda_uploader *up, uint32_t type, const void *src, int64_t n,
                            uint32_t out_type, void *dst, gguf_error *err);

/* Make `stream` (NULL: the default stream) wait, on the GPU, for everything
 * loaded so far; the host does not block. */
int gguf_cuda_uploader_wait(gguf_cuda_uploader *up, gguf_cuda_stream *stream, gguf_error *err);

/* Block until everything loaded so far is in place; reports errors raised
 * by the queued copies and kernels. */
int gguf_cuda_uploader_sync(gguf_cuda_uploader *up, gguf_error *err);

/* Pinned (page-locked) host memory, e.g. for activations copied back and
 * forth. Free with gguf_cuda_host_free (accepts NULL). */
int gguf_cuda_host_alloc(void **out, size_t bytes, gguf_error *err);
void gguf_cuda_host_free(void *p);

#ifdef __cplusplus
}
#endif
#endif /* GGUFKIT_CUDA_UPLOAD_H */
