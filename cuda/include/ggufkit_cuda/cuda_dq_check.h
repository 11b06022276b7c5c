/*
 * ggufkit_cuda/cuda_dq_check.h - check the GPU dequantization against a CPU
 * result on the GPU, asynchronously, chunk after chunk (gguf-dequant-verify
 * --gpu).
 *
 * The caller dequantizes a chunk on the CPU straight into a pinned host buffer
 * that the checker hands out, and submits it with the chunk's quantized bytes.
 * The checker queues, on its own streams: the upload of both, the GPU's
 * dequantization of the bytes (the kernels of ggufkit_cuda/cuda_dequant.h) and
 * a kernel that counts the elements whose 32 bits differ from the CPU's (as
 * memcmp of each float would: NaN payloads, signs of zeros count). Submit
 * returns once the work is queued, so the CPU decodes chunk k+1 while the GPU
 * uploads and compares chunk k; the count of a tensor comes back from
 * gguf_cuda_dq_check_finish. Nothing but that count travels back.
 *
 *   per chunk (slot s, n_slots of them in turn):
 *     host:        gguf_cuda_dq_check_host_buffer: wait until the GPU has read
 *                  slot s's last contents (event copied[s]); decode into it;
 *                  gguf_cuda_dq_check_submit: copy the quantized bytes into
 *                  slot s's pinned staging (a team of host threads)
 *     copy stream: wait done[s] (the GPU's last use of slot s's device
 *                  buffers); CPU floats and quantized bytes -> device; record
 *                  copied[s]
 *     work stream: wait copied[s]; dequantize; count differences into the
 *                  tensor's device counter; record done[s]
 *
 * Memory is fixed at creation: per slot, chunk_elems floats and 4 x
 * chunk_elems bytes of quantized data, pinned on the host and on the device,
 * plus one chunk of dequantized floats on the device (defaults: 3 slots of 16
 * Mi floats, 384 MiB pinned, 448 MiB of device memory).
 *
 * A checker works on the device that was current when it was created and is
 * used from one host thread at a time. Errors: as in ggufkit_cuda/cuda_device.h
 * (GGUF_E_IO with ENODEV where there is no usable GPU, with EIO when a CUDA call
 * fails; GGUF_E_NOMEM). After a CUDA failure the checker refuses further work
 * (GGUF_E_IO) and can only be freed.
 */
#ifndef GGUFKIT_CUDA_DQ_CHECK_H
#define GGUFKIT_CUDA_DQ_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gguf_cuda_dq_check gguf_cuda_dq_check;

typedef struct gguf_cuda_dq_check_opts {
    unsigned int version; /* GGUF_CUDA_DQ_CHECK_OPTS_VERSION, or 0 for the same */
    int64_t chunk_elems;  /* floats one slot holds: 0 for 16 Mi (64 MiB); 4096 to 2^30 */
    int n_slots;          /* chunks in flight: 0 for 3; 2 to 8 */
    int n_copy_threads;   /* host threads that copy into the pinned slots: 0 for the
                             CPUs the process may use, at most 16; 1 to 32 */
} gguf_cuda_dq_check_opts;
/* The layout version of gguf_cuda_dq_check_opts: the library refuses a larger
 * one with GGUF_E_OPTS_VERSION (docs/conventions.md, "Options structs"). */
#define GGUF_CUDA_DQ_CHECK_OPTS_VERSION 1
/* The defaults, version set: gguf_cuda_dq_check_opts o = GGUF_CUDA_DQ_CHECK_OPTS_INIT; */
#define GGUF_CUDA_DQ_CHECK_OPTS_INIT {.version = GGUF_CUDA_DQ_CHECK_OPTS_VERSION}

/* What a checker did, summed over its life (gguf_cuda_dq_check_get_stats). */
typedef struct gguf_cuda_dq_check_stats {
    uint64_t chunks;           /* chunks queued (a submit that copies may cut its
                                  elements into several) */
    uint64_t src_bytes;        /* quantized bytes uploaded */
    uint64_t ref_bytes;        /* CPU floats uploaded, in bytes */
    uint64_t ref_copied_bytes; /* of ref_bytes: copied into a slot by submit, the
                                  CPU result not being in a host buffer */
    uint64_t tensors;          /* gguf_cuda_dq_check_finish calls */
    double stage_seconds;      /* host time copying into pinned slots */
    double wait_seconds;       /* host time waiting for a slot the GPU still read */
    double finish_seconds;     /* host time waiting in gguf_cuda_dq_check_finish */
} gguf_cuda_dq_check_stats;

/*
 * A checker on the current device: its pinned host and device buffers, two
 * streams, the events and the copy threads. opts may be NULL (the defaults).
 * @return 0; GGUF_E_OPTS_VERSION; GGUF_E_INVALID (a NULL out, an option out of
 *         range); GGUF_E_NOMEM (host, pinned or device memory); GGUF_E_IO
 *         (ENODEV: no usable GPU; EIO: another CUDA failure).
 */
int gguf_cuda_dq_check_create(gguf_cuda_dq_check **out, const gguf_cuda_dq_check_opts *opts,
                              gguf_error *err);

/* Wait for the queued work (its errors are dropped) and free everything.
 * Accepts NULL. */
void gguf_cuda_dq_check_free(gguf_cuda_dq_check *chk);

/*
 * How many elements of `type` one slot holds: chunk_elems floats and 4 x
 * chunk_elems quantized bytes, rounded down to whole blocks (plain types: to a
 * multiple of 8). A submit of the host buffer may not pass more; a submit of
 * other memory is cut into pieces of this size. 0 for a NULL checker or a type
 * the GPU cannot dequantize. F64 and I64 hold half of chunk_elems; every other
 * type all of it (K-quants: the multiple of 256 at or below it).
 */
int64_t gguf_cuda_dq_check_capacity(const gguf_cuda_dq_check *chk, uint32_t type);

/*
 * The pinned host buffer the next submit uploads from (chunk_elems floats),
 * once the GPU no longer reads it: decode the CPU's floats into it and pass
 * it to gguf_cuda_dq_check_submit as ref, with no copy. It is the caller's to
 * write until that submit; after it, the GPU reads it asynchronously, and the
 * caller may still read it (its statistics) but not write it before this
 * function hands it out again. Called twice without a submit in between, it
 * returns the same buffer. The buffer lives as long as the checker.
 * @return 0; GGUF_E_INVALID (NULL arguments); GGUF_E_IO (a CUDA failure,
 *         reported by the wait).
 */
int gguf_cuda_dq_check_host_buffer(gguf_cuda_dq_check *chk, float **buf, gguf_error *err);

/*
 * Queue the check of n elements of `type`: src holds their quantized bytes as
 * in the GGUF file (src_bytes = n / block size x block bytes; host memory,
 * pageable or not, any alignment), ref the CPU's float32 result. ref is
 * either the buffer gguf_cuda_dq_check_host_buffer handed out last (then n is
 * at most gguf_cuda_dq_check_capacity(chk, type), and nothing is copied), or
 * any other host memory outside the checker's buffers (copied into the slots,
 * cut into pieces of the capacity). The differing elements are added to the
 * count of the current tensor. Returns when the work is queued: src and a ref
 * of the caller's own may be reused or unmapped then (their bytes are in
 * pinned staging). n == 0 does nothing.
 * @return 0; GGUF_E_INVALID (NULL arguments, src_bytes not the size of n
 *         elements, a ref inside the checker's buffers that is not the one
 *         handed out, or longer than the capacity); GGUF_E_BAD_TYPE (unknown or
 *         removed type); GGUF_E_UNSUPPORTED (no GPU dequantization for it);
 *         GGUF_E_BAD_SHAPE (n < 0 or not whole blocks); GGUF_E_IO (a CUDA call
 *         failed: the checker is broken).
 */
int gguf_cuda_dq_check_submit(gguf_cuda_dq_check *chk, uint32_t type, const void *src,
                              size_t src_bytes, const float *ref, int64_t n, gguf_error *err);

/*
 * Wait for everything submitted and give the number of elements that
 * differed since the previous finish (the tensor's count, exact); the count
 * starts again at 0. Errors raised by the queued copies and kernels are
 * reported here.
 * @return 0; GGUF_E_INVALID (NULL arguments); GGUF_E_IO (a CUDA failure: the
 *         checker is broken; *n_diff is 0).
 */
int gguf_cuda_dq_check_finish(gguf_cuda_dq_check *chk, uint64_t *n_diff, gguf_error *err);

/* The checker's figures so far into *out (zeros for a NULL checker). */
void gguf_cuda_dq_check_get_stats(const gguf_cuda_dq_check *chk, gguf_cuda_dq_check_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* GGUFKIT_CUDA_DQ_CHECK_H */
