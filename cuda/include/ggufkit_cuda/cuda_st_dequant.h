/*
 * ggufkit_cuda/cuda_st_dequant.h - the scaled safetensors formats (block-scaled
 * FP8, ModelOpt NVFP4, compressed-tensors NVFP4) dequantized on the GPU, bit
 * for bit equal to gguf_st_weight_rows() on the CPU (gguf/safetensors.h has
 * the formulas and their order of operations; NaN results are 0x7FC00000 on
 * both sides).
 *
 * The weight is described by the CPU's gguf_st_weight (found with
 * gguf_st_weight_find); the bytes are the caller's device copies:
 *   data   the stored bytes of rows [row0, row0 + n_rows) only, as in the file
 *          (n_rows * cols bytes for FP8, n_rows * cols / 2 for NVFP4): a
 *          forward pass streams a weight in row chunks;
 *   scale  the whole scale tensor (w->scale->nbytes bytes; small), or NULL for
 *          plain weights.
 * Plain F32 / F16 / BF16 weights go through gguf_cuda_dequant's kernels.
 */
#ifndef GGUFKIT_CUDA_ST_DEQUANT_H
#define GGUFKIT_CUDA_ST_DEQUANT_H

#include <stdint.h>

#include "gguf/error.h"
#include "gguf/safetensors.h"
#include "ggufkit_cuda/cuda_device.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Queue the dequantization of rows [row0, row0 + n_rows) of w into dst
 * (n_rows * w->cols floats, device memory) on `stream` (NULL: default).
 * Returns once queued; gguf_cuda_stream_sync() waits and reports run errors.
 * @return 0; GGUF_E_INVALID (NULL or host pointers, rows outside the weight,
 *         no scale for a scaled format); GGUF_E_UNSUPPORTED (a plain dtype
 *         other than F32/F16/BF16); GGUF_E_IO (ENODEV: no device; EIO: the
 *         launch failed).
 */
int gguf_cuda_st_dequant_rows(const gguf_st_weight *w, const void *data, const void *scale,
                              int64_t row0, int64_t n_rows, float *dst, gguf_cuda_stream *stream,
                              gguf_error *err);

#ifdef __cplusplus
}
#endif
#endif /* GGUFKIT_CUDA_ST_DEQUANT_H */
