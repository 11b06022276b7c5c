/*
 * gguf/npy.h - NumPy .npy arrays: a writer (format 1.0, float32, through
 * gguf/output.h) and a validating reader (formats 1.0, 2.0 and 3.0).
 *
 *   "\x93NUMPY" | major minor | header length | "{'descr': '<f4', 'fortran_order':
 *   (6 bytes)    | (2 bytes)   | u16 LE (1.0)  |  False, 'shape': (a, b), }" padded
 *                |             | u32 LE (2.0,  |  with spaces and a final '\n' so the
 *                |             |  3.0)         |  data starts at a multiple of 64
 *   ... the data: shape's product x item size bytes, C order unless fortran_order
 *
 * Writing: create with the shape, append the elements in order, commit. The
 * writer checks that exactly the promised count arrived.
 *
 * Reading (gguf_npy_open): the header is a Python literal, not JSON; it is
 * parsed by a small bounded parser of exactly the grammar numpy writes, never
 * evaluated:
 *   - a dict of exactly the keys 'descr', 'fortran_order', 'shape' (any order,
 *     each once, an optional trailing comma), then only spaces and '\n';
 *   - 'descr' a quoted string naming a plain dtype: '<f2' '<f4' '<f8' (and
 *     '>' big-endian), '|i1' '<i2' '<i4' '<i8', '|u1' '<u2' '<u4' '<u8', '|b1';
 *     '<V2' / '|V2' (2-byte void: how ml_dtypes saves bfloat16, since the
 *     file cannot say more) only when the caller says it is bfloat16;
 *     structured dtypes (a list) are refused;
 *   - 'fortran_order' True or False; a Fortran-order array is read in C order
 *     (transposed on the fly), so callers always see numpy's logical order;
 *   - 'shape' a tuple of non-negative decimal integers without leading zeros:
 *     (), (n,), (a, b) or (a, b,); at most GGUF_NPY_MAX_DIMS dimensions;
 *   - header length at most GGUF_NPY_MAX_HEADER; element and byte counts
 *     checked for overflow; the data must end exactly at the end of the file
 *     (trailing bytes, as left by several np.save calls into one file, are
 *     refused).
 * The file is mapped read-only; after a successful open the accessors only
 * fail on a bad range.
 */
#ifndef GGUF_NPY_H
#define GGUF_NPY_H

#include "gguf/export.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/error.h"
#include "gguf/output.h"

GGUF_BEGIN_DECLS

#define GGUF_NPY_MAX_DIMS 8

typedef struct gguf_npy_writer gguf_npy_writer;

/*
 * A float32 array of n_dims (1..8) dimensions at path (atomically, see
 * gguf/output.h; opts may be NULL: then an existing file is replaced, as
 * tools that write .npy files always did).
 * @return 0; GGUF_E_INVALID (shape); the codes of gguf_output_create.
 */
int gguf_npy_writer_create_f32(gguf_npy_writer **out, const char *path, const int64_t *shape,
                               int n_dims, const gguf_output_opts *opts, gguf_error *err);
/* Append n floats. @return 0; GGUF_E_INVALID past the shape; GGUF_E_IO/NOSPACE. */
int gguf_npy_writer_append_f32(gguf_npy_writer *w, const float *x, uint64_t n, gguf_error *err);
/* @return 0; GGUF_E_INVALID when fewer elements than the shape arrived; the
 *         codes of gguf_output_commit. */
int gguf_npy_writer_commit(gguf_npy_writer *w, gguf_error *err);
/* Before commit, removes the temporary file. NULL is fine. */
void gguf_npy_writer_free(gguf_npy_writer *w);

/* A whole [rows, cols] float32 matrix in one call. */
int gguf_npy_write_f32(const char *path, const float *data, int64_t rows, int64_t cols,
                       gguf_error *err);

/* ------------------------------------------------------------------ reading */

#define GGUF_NPY_MAX_HEADER 65536u /* bytes of the header dict */

typedef enum gguf_npy_dtype {
    GGUF_NPY_BOOL = 0,
    GGUF_NPY_I8, GGUF_NPY_I16, GGUF_NPY_I32, GGUF_NPY_I64,
    GGUF_NPY_U8, GGUF_NPY_U16, GGUF_NPY_U32, GGUF_NPY_U64,
    GGUF_NPY_F16, GGUF_NPY_F32, GGUF_NPY_F64,
    GGUF_NPY_BF16, /* '<V2' read as bfloat16 (gguf_npy_opts.v2_as_bf16) */
    GGUF_NPY_DTYPE_COUNT
} gguf_npy_dtype;

/* "bool", "i8", ..., "f32", "bf16"; "unknown" out of range. */
const char *gguf_npy_dtype_name(gguf_npy_dtype d);
/* true for the float dtypes (f16, f32, f64, bf16). */
bool gguf_npy_dtype_is_float(gguf_npy_dtype d);

typedef struct gguf_npy_opts {
    unsigned int version; /* GGUF_NPY_OPTS_VERSION, or 0 for the same (see below) */
    bool v2_as_bf16; /* read a 2-byte void descr ('<V2', '|V2') as bfloat16 */
} gguf_npy_opts;
/* The layout version of gguf_npy_opts: the library refuses a larger one with
 * GGUF_E_OPTS_VERSION (docs/conventions.md, "Options structs"). */
#define GGUF_NPY_OPTS_VERSION 1
/* The defaults, version set: gguf_npy_opts o = GGUF_NPY_OPTS_INIT; */
#define GGUF_NPY_OPTS_INIT {.version = GGUF_NPY_OPTS_VERSION}

/* What the header says, validated. */
typedef struct gguf_npy_info {
    int major, minor;            /* format version: 1.0, 2.0 or 3.0 */
    char descr[8];               /* as written, e.g. "<f4" */
    gguf_npy_dtype dtype;
    bool big_endian;
    uint32_t item_size;          /* bytes per element */
    bool fortran_order;
    int n_dims;                  /* 0 (a scalar) .. GGUF_NPY_MAX_DIMS */
    int64_t shape[GGUF_NPY_MAX_DIMS];
    int64_t n_elements;
    uint64_t data_offset;        /* where the data starts in the file */
    uint64_t nbytes;             /* n_elements x item_size */
} gguf_npy_info;

typedef struct gguf_npy gguf_npy;

/*
 * Open and validate a .npy file, mapped read-only. opts may be NULL.
 * @return 0; GGUF_E_NOT_FOUND; GGUF_E_IO (open, stat, mmap; sys_errno);
 *   GGUF_E_NOT_GGUF   a folder or device;
 *   GGUF_E_BAD_MAGIC  not "\x93NUMPY" (an empty or short file too);
 *   GGUF_E_BAD_VERSION a format other than 1.0, 2.0, 3.0;
 *   GGUF_E_TRUNCATED  the header or the data ends past the end of the file;
 *   GGUF_E_LIMIT      header over GGUF_NPY_MAX_HEADER, more than
 *                     GGUF_NPY_MAX_DIMS dimensions, a dimension over 19 digits;
 *   GGUF_E_BAD_VALUE  the header is not the dict described above (syntax, a
 *                     missing or unknown key, a value of the wrong kind, a
 *                     leading zero, bytes after the dict that are not spaces);
 *   GGUF_E_DUPLICATE  a key twice;
 *   GGUF_E_BAD_TYPE   an unknown descr, or '<V2' without opts->v2_as_bf16;
 *   GGUF_E_UNSUPPORTED a structured dtype (a list descr);
 *   GGUF_E_OVERFLOW   the element or byte count overflows 64 bits;
 *   GGUF_E_BAD_OFFSET bytes after the array's data;
 *   GGUF_E_NOMEM. err names the file and the header field, with its offset.
 */
int gguf_npy_open(gguf_npy **out, const char *path, const gguf_npy_opts *opts, gguf_error *err);

/* Same over a caller's buffer (borrowed; must outlive the array); `name` is
 * used in messages. For tests and fuzzing. */
int gguf_npy_open_memory(gguf_npy **out, const void *data, size_t size, const char *name,
                         const gguf_npy_opts *opts, gguf_error *err);

void gguf_npy_free(gguf_npy *a); /* NULL is fine */

const char *gguf_npy_path(const gguf_npy *a);
/* The validated header; borrowed until gguf_npy_free. */
const gguf_npy_info *gguf_npy_get_info(const gguf_npy *a);
/* The raw data bytes (info->nbytes, unaligned, in the file's order). */
const uint8_t *gguf_npy_data(const gguf_npy *a);

/*
 * Elements [i0, i0 + n) in numpy's logical C order (a Fortran-order file is
 * transposed on the fly) converted to float: f16/bf16 exactly, f64 rounded to
 * nearest, integers and bools as their values (exact below 2^24).
 * @return 0; GGUF_E_INVALID (NULL, a range outside the array).
 */
int gguf_npy_read_f32(const gguf_npy *a, int64_t i0, int64_t n, float *dst, gguf_error *err);

/*
 * Elements [i0, i0 + n) of an integer (or bool) array as int64, exactly
 * (u64 above INT64_MAX is refused). For token ids.
 * @return 0; GGUF_E_INVALID (range); GGUF_E_BAD_TYPE (a float dtype);
 *         GGUF_E_BAD_VALUE (a u64 over INT64_MAX, naming the element).
 */
int gguf_npy_read_i64(const gguf_npy *a, int64_t i0, int64_t n, int64_t *dst, gguf_error *err);

GGUF_END_DECLS
#endif /* GGUF_NPY_H */
