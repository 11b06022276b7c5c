/* Host helpers of the GPU executor (fwd_gpu.h): the cuBLAS handle, its
 * errors, the RoPE table. Not installed. */
#ifndef GGUFKIT_FWD_COMMON_H
#define GGUFKIT_FWD_COMMON_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "forward/forward_setup.h"
}

/* Map a cuBLAS status to a gguf_status and fill err: allocation failures
 * GGUF_E_NOMEM, a library that cannot start GGUF_E_IO + ENODEV, anything else
 * GGUF_E_IO + EIO. `what` names the call. */
int fwd_blas_fail(gguf_error *err, cublasStatus_t s, const char *what);

/* A cuBLAS handle on stream s set up as the reference wants it: no TF32, no
 * reduced-precision or split-K tricks that change with the GPU
 * (CUBLAS_PEDANTIC_MATH), no atomics (deterministic). Loads cuBLAS first
 * (fwd_dl.h). On failure nothing is left allocated. */
int fwd_blas_reference(cublasHandle_t *out, cudaStream_t s, gguf_error *err);

/* cos and sin (YaRN, frequency factors and mscale included) of every
 * rotated pair for positions pos0 .. pos0 + n - 1, from the CPU's own
 * fw_rope_apply (a pair (1, 0) rotates to (cos, sin) exactly in f64 mode),
 * in device memory allocated on stream s from pool (free with cudaFreeAsync):
 * [n][n_rot / 2][cos, sin] doubles. */
int fwd_rope_table(const fw_rope *r, int64_t pos0, int64_t n, cudaMemPool_t pool,
                   cudaStream_t s, double **out, gguf_error *err);

#endif
