/*
 * gguf/npy.h - NumPy .npy arrays (format 1.0), written through gguf/output.h.
 *
 *   "\x93NUMPY" 1 0 | header length (u16 LE) | "{'descr': '<f4', 'fortran_order':
 *   False, 'shape': (a, b), }" padded with spaces and a final '\n' so that the
 *   data starts at a multiple of 64 bytes | the data, C order, little-endian
 *
 * Streaming: create with the shape, append the elements in order, commit. The
 * writer checks that exactly the promised count arrived.
 */
#ifndef GGUF_NPY_H
#define GGUF_NPY_H

#include <stdint.h>

#include "gguf/error.h"
#include "gguf/output.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GGUF_NPY_MAX_DIMS 8

typedef struct gguf_npy_writer gguf_npy_writer;

/*
 * A float32 array of n_dims (1..8) dimensions at path (atomically, see
 * gguf/output.h; opts may be NULL: then an existing file is replaced, as
 * tools that write .npy files always did).
 * @return 0; GGUF_E_INVALID (shape); the codes of gguf_output_create.
 */
int gguf_npy_create_f32(gguf_npy_writer **out, const char *path, const int64_t *shape, int n_dims,
                        const gguf_output_opts *opts, gguf_error *err);
/* Append n floats. @return 0; GGUF_E_INVALID past the shape; GGUF_E_IO/NOSPACE. */
int gguf_npy_append_f32(gguf_npy_writer *w, const float *x, uint64_t n, gguf_error *err);
/* @return 0; GGUF_E_INVALID when fewer elements than the shape arrived; the
 *         codes of gguf_output_commit. */
int gguf_npy_commit(gguf_npy_writer *w, gguf_error *err);
/* Before commit, removes the temporary file. NULL is fine. */
void gguf_npy_free(gguf_npy_writer *w);

/* A whole [rows, cols] float32 matrix in one call. */
int gguf_npy_write_f32(const char *path, const float *data, int64_t rows, int64_t cols,
                       gguf_error *err);

#ifdef __cplusplus
}
#endif
#endif /* GGUF_NPY_H */
