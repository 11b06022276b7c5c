/*
 * ggufkit_cuda/cuda_dequant.h - dequantization of every ggml tensor type on
 * the GPU, bit for bit equal to the CPU scalar reference (gguf/dequant.h).
 *
 * Input is the tensor's bytes exactly as stored in the GGUF file, copied to
 * device memory (any byte alignment; aligned inputs read faster). Output is
 * float32, or float16 / bfloat16 where the consumer wants it, in element
 * order, written to device memory.
 *
 * Bit-exactness: every value equals what gguf_dequant_scalar_row() gives on
 * the CPU, and for F16/BF16 output what gguf_fp32_to_fp16()/_bf16() then
 * give, including NaN payloads and signs, infinities, signed zeros and
 * subnormals. The kernels evaluate each formula in the reference's operation
 * order with explicitly rounded operations (__fmul_rn/__fadd_rn, and the
 * files are compiled with -fmad=false -ftz=false), and reproduce the x86 rules
 * for NaN results (first NaN operand, made quiet; invalid operations give the
 * default NaN 0xFFC00000) where the GPU would give its canonical NaN. The IQ
 * lattice tables are generated at build time from libgguf's own tables
 * (gguf_iq2xxs_grid ...), so the two cannot drift. docs/cuda.md has details.
 *
 * Errors: as in ggufkit_cuda/cuda_device.h, plus GGUF_E_BAD_TYPE (unknown or
 * removed type id), GGUF_E_BAD_SHAPE (n not whole blocks), GGUF_E_UNSUPPORTED
 * (an output type other than F32/F16/BF16).
 */
#ifndef GGUFKIT_CUDA_DEQUANT_H
#define GGUFKIT_CUDA_DEQUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf/error.h"
#include "ggufkit_cuda/cuda_device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* True when the GPU kernels handle `type` (every type gguf_dequant_supported
 * accepts). */
bool gguf_cuda_dequant_supported(uint32_t type);

/*
 * Dequantize n elements (a whole number of blocks) of `type` from the device
 * buffer src (the raw GGUF bytes) to float32 in the device buffer dst,
 * queued on `stream` (NULL: the default stream). Returns once queued; call
 * gguf_cuda_stream_sync() to wait and to see errors raised while running.
 * n == 0 does nothing.
 * @return 0; GGUF_E_BAD_TYPE; GGUF_E_BAD_SHAPE for n < 0 or not whole blocks;
 *         GGUF_E_INVALID for NULL or host buffers; GGUF_E_IO (ENODEV: no
 *         device; EIO: the launch failed).
 */
int gguf_cuda_dequant(uint32_t type, const void *src, float *dst, int64_t n,
                      gguf_cuda_stream *stream, gguf_error *err);

/*
 * Same, with the output type chosen: GGUF_TYPE_F32, GGUF_TYPE_F16 (IEEE half)
 * or GGUF_TYPE_BF16; dst holds n elements of that type. Half outputs are the
 * float32 results rounded to nearest even as gguf_fp32_to_fp16/_bf16 do.
 * @return as gguf_cuda_dequant; GGUF_E_UNSUPPORTED for another out_type.
 */
int gguf_cuda_dequant_to(uint32_t type, const void *src, uint32_t out_type, void *dst,
                         int64_t n, gguf_cuda_stream *stream, gguf_error *err);

/*
 * A rectangle of a tensor seen as n_rows_total rows of ne0 elements (packed,
 * as in a GGUF file, at tensor_data in device memory): rows [row0, row0 +
 * n_rows) and columns [col0, col0 + n_cols), into dst as n_rows x n_cols
 * packed elements of out_type. Only the blocks inside the rectangle are read:
 * a tensor-parallel rank's slice comes straight from the whole tensor.
 * Same bits as gguf_dequant_slice() on the CPU.
 * @return as gguf_cuda_dequant_to; GGUF_E_BAD_SHAPE when ne0, col0 or n_cols
 *         is not a multiple of the block size; GGUF_E_INVALID when the
 *         rectangle is not inside the tensor.
 */
int gguf_cuda_dequant_slice(uint32_t type, const void *tensor_data, int64_t ne0,
                            int64_t n_rows_total, int64_t row0, int64_t n_rows, int64_t col0,
                            int64_t n_cols, uint32_t out_type, void *dst,
                            gguf_cuda_stream *stream, gguf_error *err);

#ifdef __cplusplus
}
#endif
#endif /* GGUFKIT_CUDA_DEQUANT_H */
