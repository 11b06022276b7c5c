/* The row kernels of the dequant module, offered to the rest of the library
 * (the forward pass dequantizes cache-sized pieces and picks a kernel once).
 * Library-private: not installed. */
#ifndef GGUF_DEQUANT_KERNEL_H
#define GGUF_DEQUANT_KERNEL_H

#include <stdint.h>

#include "gguf/dequant.h"

/* Dequantize n_blocks whole blocks (plain types: elements) from src to dst.
 * src has no alignment; the kernels read it byte-wise or with unaligned loads. */
typedef void (*gguf_dequant_fn)(const uint8_t *src, float *dst, int64_t n_blocks);

/* The kernel `path` runs for `type` (AUTO: the best this CPU has), with the
 * checks every entry point makes; for callers that dequantize many small
 * pieces (the forward pass, a cache-sized block of rows at a time) and would
 * otherwise pay the type and CPU checks per piece. @return as
 * gguf_dequant_row_path. */
int gguf_dequant_kernel(int path, uint32_t type, gguf_dequant_fn *out, gguf_error *err);

#endif
