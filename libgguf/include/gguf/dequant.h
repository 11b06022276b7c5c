/*
 * gguf/dequant.h - dequantization of every ggml tensor type to float32.
 *
 * Three layers, all producing the same bits:
 *   - a scalar reference (gguf_dequant_scalar_row), written to be obviously
 *     right and checked bit for bit against gguf-py's gguf.quants.dequantize;
 *   - fast paths (AVX2 + F16C, chosen at run time; a portable path elsewhere)
 *     that equal the reference bit for bit, NaN payloads included;
 *   - threads over rows for whole tensors (gguf_dequant_rows), either started
 *     for one call or taken from a gguf_dequant_pool the caller owns.
 *
 * Rows are ggml rows: ne[0] elements, which for block types is a whole number
 * of blocks. A tensor is ne[1]*ne[2]*ne[3] such rows, back to back.
 *
 * Every function is reentrant; the library keeps no mutable global state.
 * Formats and traps (Q8_1's size, NVFP4's scale bit 7, IQ1_M's split scale):
 * docs/dequant.md. Block byte layouts: gguf/blocks.h.
 */
#ifndef GGUF_DEQUANT_H
#define GGUF_DEQUANT_H

#include "gguf/export.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/error.h"

GGUF_BEGIN_DECLS

/* ---- scalar conversions (exact, no rounding unless stated) ---- */

/* IEEE half -> float. Exact for every value; NaN keeps its payload with the
 * quiet bit set (what F16C's vcvtph2ps and CUDA's __half2float produce). */
float gguf_fp16_to_fp32(uint16_t h);

/* float -> IEEE half, round to nearest even; overflow gives Inf, NaN stays
 * NaN (quiet). */
uint16_t gguf_fp32_to_fp16(float f);

/* bfloat16 -> float: the 16 bits become the top half of the float. Exact. */
float gguf_bf16_to_fp32(uint16_t b);

/* float -> bfloat16, round to nearest even, NaN forced quiet (ggml's
 * ggml_compute_fp32_to_bf16, bit for bit). */
uint16_t gguf_fp32_to_bf16(float f);

/* NVFP4 UE4M3 scale byte -> float, the true value (not halved): 0x00 and 0x7F
 * give 0; bit 7 is ignored except that 0xFF gives 480 (ggml's CPU reading,
 * which gguf-py copies; see docs/dequant.md). */
float gguf_ue4m3_to_fp32(uint8_t x);

/* MXFP4 E8M0 scale byte -> float, 2^(e-127) (e = 0 gives 2^-127; 0xFF gives
 * 2^128 = Inf as ggml computes it, not NaN). */
float gguf_e8m0_to_fp32(uint8_t e);

/* ---- what can be dequantized ---- */

/* True when gguf_dequant_row handles the type (every valid type today). */
bool gguf_dequant_supported(uint32_t type);

/* Implementation choice; tests use it to force a path. */
typedef enum gguf_dequant_path {
    GGUF_DEQUANT_AUTO = 0,     /* the best path this CPU runs */
    GGUF_DEQUANT_SCALAR = 1,   /* the reference */
    GGUF_DEQUANT_PORTABLE = 2, /* plain C written for the auto-vectorizer */
    GGUF_DEQUANT_AVX2 = 3,     /* x86-64 AVX2 + F16C */
    GGUF_DEQUANT_PATH_COUNT = 4
} gguf_dequant_path;

/* "auto", "scalar", "portable", "avx2"; "unknown" otherwise. Never NULL. */
const char *gguf_dequant_path_name(int path);

/* True when this CPU (and this build) can run the path. AUTO, SCALAR and
 * PORTABLE are always available. */
bool gguf_dequant_path_available(int path);

/* The path AUTO resolves to on this CPU (AVX2 when available). */
gguf_dequant_path gguf_dequant_best_path(void);

/* ---- one row ---- */

/*
 * Dequantize n elements (a whole number of blocks) of type `type` from src
 * into dst[0..n-1], with the best path. src needs no alignment.
 * @return 0; GGUF_E_BAD_TYPE for an unknown or removed type id (the message
 *         names it); GGUF_E_BAD_SHAPE when n < 0 or n is not a multiple of the
 *         block size; GGUF_E_INVALID for NULL src/dst with n > 0.
 */
int gguf_dequant_row(uint32_t type, const void *src, float *dst, int64_t n, gguf_error *err);

/* Same with the scalar reference. */
int gguf_dequant_scalar_row(uint32_t type, const void *src, float *dst, int64_t n,
                            gguf_error *err);

/* Same with a chosen path; GGUF_E_UNSUPPORTED when the CPU lacks it,
 * GGUF_E_INVALID for a path id out of range. */
int gguf_dequant_row_path(int path, uint32_t type, const void *src, float *dst, int64_t n,
                          gguf_error *err);

/* ---- the scales of a block ---- */

/* What is odd about a block's scales (gguf_block_scale_flags), OR-ed. */
enum {
    GGUF_SCALE_ZERO = 1,         /* the main scale (d) is zero: the block decodes to 0 */
    GGUF_SCALE_NAN = 2,          /* a scale is NaN (MXFP4: exponent byte 0xFF) */
    GGUF_SCALE_INF = 4,          /* a scale is infinite */
    GGUF_SCALE_SUBNORMAL = 8,    /* the main scale is subnormal (MXFP4: exponent 0) */
    GGUF_SCALE_BAD_ENCODING = 16 /* a scale byte no conforming writer produces (NVFP4:
                                    bit 7 set in a UE4M3 scale) */
};

/*
 * Classify the scales of one block of `type` (type_size bytes at block, any
 * alignment). The library owns where each type keeps its scales (gguf/blocks.h):
 * the f16 d of the legacy, K, TQ and IQ types, where a zero or subnormal d
 * counts and the second f16 field (dmin, m) counts only when NaN or Inf (a
 * small offset is normal); Q8_K's f32 d; IQ1_M's d spread over the top
 * nibbles of its sub-block scales; MXFP4's E8M0 exponent; NVFP4's four UE4M3
 * sub-block scales (each zero, subnormal, 0x7F NaN, or bit 7 set).
 * @return an OR of GGUF_SCALE_*; 0 for ordinary scales, for a type without
 *         block scales (F32, F16, BF16, ...) and for an unknown type id.
 */
unsigned gguf_block_scale_flags(uint32_t type, const void *block);

/* ---- many rows, threads ---- */

/* A fixed set of worker threads the caller creates once and reuses. It holds
 * no data between calls; one call at a time per pool. */
typedef struct gguf_dequant_pool gguf_dequant_pool;

/*
 * Start n_threads workers (1..1024; 0 means one per CPU the process may use).
 * @return 0; GGUF_E_INVALID for n_threads < 0 or > 1024; GGUF_E_NOMEM;
 *         GGUF_E_IO when a thread cannot be started (sys_errno set).
 */
int gguf_dequant_pool_create(gguf_dequant_pool **out, int n_threads, gguf_error *err);

/* Join the workers and free the pool. Accepts NULL. */
void gguf_dequant_pool_free(gguf_dequant_pool *pool);

/* Number of workers of a pool (0 for NULL). */
int gguf_dequant_pool_size(const gguf_dequant_pool *pool);

typedef struct gguf_dequant_opts {
    unsigned int version; /* GGUF_DEQUANT_OPTS_VERSION, or 0 for the same (see below) */
    int path;                /* gguf_dequant_path; 0 = AUTO */
    int n_threads;           /* without a pool: threads started for this call;
                                0 or 1 = the calling thread only */
    gguf_dequant_pool *pool; /* optional; when set, n_threads is ignored */
} gguf_dequant_opts;
/* The layout version of gguf_dequant_opts: the library refuses a larger one with
 * GGUF_E_OPTS_VERSION (docs/conventions.md, "Options structs"). */
#define GGUF_DEQUANT_OPTS_VERSION 1
/* The defaults, version set: gguf_dequant_opts o = GGUF_DEQUANT_OPTS_INIT; */
#define GGUF_DEQUANT_OPTS_INIT {.version = GGUF_DEQUANT_OPTS_VERSION}

/*
 * Dequantize n_rows rows of ne0 elements each. Row r starts at
 * (const char *)src + r * src_row_stride (0 = packed: the row size in bytes)
 * and lands at dst + r * ne0. opts may be NULL (AUTO, one thread). Rows are
 * split over the threads in contiguous runs; the result does not depend on
 * the thread count.
 * @return as gguf_dequant_row; GGUF_E_INVALID for n_rows < 0 or a stride
 *         smaller than a row; GGUF_E_OVERFLOW when the sizes overflow;
 *         GGUF_E_IO / GGUF_E_NOMEM when per-call threads cannot be started.
 */
int gguf_dequant_rows(uint32_t type, const void *src, uint64_t src_row_stride, float *dst,
                      int64_t ne0, int64_t n_rows, const gguf_dequant_opts *opts,
                      gguf_error *err);

/*
 * Dequantize a rectangle of a tensor seen as a matrix of n_rows_total rows of
 * ne0 elements (packed, as in a GGUF file): rows [row0, row0+n_rows) and
 * columns [col0, col0+n_cols), into dst (n_rows x n_cols, packed). Only the
 * blocks inside the rectangle are read. col0 and n_cols must fall on block
 * boundaries (multiples of the block size).
 * @return as gguf_dequant_rows; GGUF_E_BAD_SHAPE when col0 or n_cols is not on
 *         a block boundary, or ne0 is not whole blocks; GGUF_E_INVALID when
 *         the rectangle is not inside the tensor.
 */
int gguf_dequant_slice(uint32_t type, const void *tensor_data, int64_t ne0,
                       int64_t n_rows_total, int64_t row0, int64_t n_rows, int64_t col0,
                       int64_t n_cols, float *dst, const gguf_dequant_opts *opts,
                       gguf_error *err);

/* ---- lookup tables, for other implementations (CUDA) to share ----
 * Generated once from gguf-py's data by testdata/gen_dequant_iq_tables.py;
 * digests are checked by tests/unit/test_dequant_tables.c. Grid entries are
 * the element magnitudes in element order (IQ1 grids: -1, 0, +1 as int8). */
extern const uint8_t gguf_iq2xxs_grid[256][8];
extern const uint8_t gguf_iq2xs_grid[512][8];
extern const uint8_t gguf_iq2s_grid[1024][8];
extern const uint8_t gguf_iq3xxs_grid[256][4];
extern const uint8_t gguf_iq3s_grid[512][4];
extern const int8_t gguf_iq1s_grid[2048][8];
extern const uint8_t gguf_iq2_ksigns[128]; /* 7 sign bits + parity as bit 7 */
extern const int8_t gguf_iq4nl_values[16];
extern const int8_t gguf_fp4_e2m1_x2[16]; /* E2M1 values times two (MXFP4, NVFP4) */
#define GGUF_IQ1S_DELTA 0.125f

GGUF_END_DECLS
#endif /* GGUF_DEQUANT_H */
