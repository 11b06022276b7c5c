/*
 * gguf/blocks.h - byte layouts of every ggml quantized block, shared by the C
 * library and the CUDA kernels.
 *
 * One struct per block type, field for field in file order, little-endian on
 * disk. The rules that keep one header valid as C11 and as CUDA C++ (nvcc):
 *   - only uint8_t / int8_t / uint16_t / int16_t / float fields, no bit-fields,
 *     no unions, no compiler packing pragmas: every size below is reached with
 *     natural alignment and no padding, and the static assertions prove it;
 *   - IEEE half values are stored as uint16_t (gguf_half_t): convert with
 *     gguf_fp16_to_fp32() (gguf/dequant.h) or __half on the device;
 *   - tensor data is only 1- or 2-byte aligned at a block boundary for most
 *     types (18-, 22-, 17-byte blocks ...). Host code reads fields through
 *     offsetof() and memcpy, never through a pointer to a struct placed on
 *     unaligned file bytes. Device code may cast when it copied the data to an
 *     aligned buffer.
 *
 * Element order inside a block is described next to each struct and drawn in
 * full in libgguf/src/dequant_*.c and docs/dequant.md.
 */
#ifndef GGUF_BLOCKS_H
#define GGUF_BLOCKS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define GGUF_BLOCK_ASSERT(cond, msg) static_assert(cond, msg)
extern "C" {
#else
#define GGUF_BLOCK_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

typedef uint16_t gguf_half_t; /* IEEE 754 binary16 bits */
typedef uint16_t gguf_bf16_t; /* bfloat16 bits (upper half of a float32) */

/* Elements per block. */
#define GGUF_QK4_0 32
#define GGUF_QK4_1 32
#define GGUF_QK5_0 32
#define GGUF_QK5_1 32
#define GGUF_QK8_0 32
#define GGUF_QK8_1 32
#define GGUF_QK_K 256 /* the K-quants, IQ types (but IQ4_NL) and TQ types */
#define GGUF_K_SCALE_SIZE 12
#define GGUF_QK4_NL 32
#define GGUF_QK_MXFP4 32
#define GGUF_QK_NVFP4 64
#define GGUF_QK_NVFP4_SUB 16 /* elements per UE4M3 scale inside an NVFP4 block */
#define GGUF_QK1_0 128

/* ---- legacy 32-element blocks ------------------------------------------ */

/* Q4_0: x[i] = d * (q[i] - 8); q[i] = qs[i] & 15, q[i+16] = qs[i] >> 4. */
typedef struct gguf_block_q4_0 {
    gguf_half_t d;
    uint8_t qs[GGUF_QK4_0 / 2];
} gguf_block_q4_0;
GGUF_BLOCK_ASSERT(sizeof(gguf_block_q4_0) == 18, "block_q4_0 size");

/* Q4_1: x[i] = d * q[i] + m. */
typedef struct gguf_block_q4_1 {
    gguf_half_t d;
    gguf_half_t m;
    uint8_t qs[GGUF_QK4_1 / 2];
} gguf_block_q4_1;
GGUF_BLOCK_ASSERT(sizeof(gguf_block_q4_1) == 20, "block_q4_1 size");

/* Q5_0: 5th bit of element i is bit i of the little-endian uint32 qh. */
typedef struct gguf_block_q5_0 {
    gguf_half_t d;
    uint8_t qh[4];
    uint8_t qs[GGUF_QK5_0 / 2];
} gguf_block_q5_0;
GGUF_BLOCK_ASSERT(sizeof(gguf_block_q5_0) == 22, "block_q5_0 size");

typedef struct gguf_block_q5_1 {
    gguf_half_t d;
    gguf_half_t m;
    uint8_t qh[4];
    uint8_t qs[GGUF_QK5_1 / 2];
} gguf_block_q5_1;
GGUF_BLOCK_ASSERT(sizeof(gguf_block_q5_1) == 24, "block_q5_1 size");

/* Q8_0: x[i] = d * qs[i]. */
typedef struct gguf_block_q8_0 {
    gguf_half_t d;
    int8_t qs[GGUF_QK8_0];
} gguf_block_q8_0;
GGUF_BLOCK_ASSERT(sizeof(gguf_block_q8_0) == 34, "block_q8_0 size");

/* Q8_1: x[i] = d * qs[i]; s = d * sum(qs) is a cached sum, not needed to
 * dequantize. ggml's layout is 36 bytes; gguf-py's size table says 40 (an old
 * layout with two float32). See docs/dequant.md. */
typedef struct gguf_block_q8_1 {
    gguf_half_t d;
    gguf_half_t s;
    int8_t qs[GGUF_QK8_1];
} gguf_block_q8_1;
GGUF_BLOCK_ASSERT(sizeof(gguf_block_q8_1) == 36, "block_q8_1 size");

/* ---- K-quants, 256-element super-blocks --------------------------------- */

/* Q2_K: 16 sub-blocks of 16; scales[j] low nibble scale, high nibble min. */
typedef struct gguf_block_q2_k {
    uint8_t scales[GGUF_QK_K / 16];
    uint8_t qs[GGUF_QK_K / 4];
    gguf_half_t d;
    gguf_half_t dmin;
} gguf_block_q2_k;
GGUF_BLOCK_ASSERT(sizeof(gguf_block_q2_k) == 84, "block_q2_K size");

/* Q3_K: 2 low bits in qs, high bit in hmask (set = no -4 offset), 6-bit
 * signed scales packed in 12 bytes. */
typedef struct gguf_block_q3_k {
    uint8_t hmask[GGUF_QK_K / 8];
    uint8_t qs[GGUF_QK_K / 4];
    uint8_t scales[12];
    gguf_half_t d;
} gguf_block_q3_k;
GGUF_BLOCK_ASSERT(sizeof(gguf_block_q3_k) == 110, "block_q3_K size");

/* Q4_K: 8 sub-blocks of 32, 6-bit scale and min each, packed in 12 bytes. */
typedef struct gguf_block_q4_k {
    gguf_half_t d;
    gguf_half_t dmin;
    uint8_t scales[GGUF_K_SCALE_SIZE];
    uint8_t qs[GGUF_QK_K / 2];
} gguf_block_q4_k;
GGUF_BLOCK_ASSERT(sizeof(gguf_block_q4_k) == 144, "block_q4_K size");

typedef struct gguf_block_q5_k {
    gguf_half_t d;
    gguf_half_t dmin;
    uint8_t scales[GGUF_K_SCALE_SIZE];
    uint8_t qh[GGUF_QK_K / 8];
    uint8_t qs[GGUF_QK_K / 2];
} gguf_block_q5_k;
GGUF_BLOCK_ASSERT(sizeof(gguf_block_q5_k) == 176, "block_q5_K size");

/* Q6_K: 4 low bits in ql, 2 high bits in qh, 16 int8 scales. */
typedef struct gguf_block_q6_k {
    uint8_t ql[GGUF_QK_K / 2];
    uint8_t qh[GGUF_QK_K / 4];
    int8_t scales[GGUF_QK_K / 16];
    gguf_half_t d;
} gguf_block_q6_k;
GGUF_BLOCK_ASSERT(sizeof(gguf_block_q6_k) == 210, "block_q6_K size");

/* Q8_K: float32 scale (the only K type with one); bsums are cached sums of
 * 16-element groups, not needed to dequantize. */
typedef struct gguf_block_q8_k {
    float d;
    int8_t qs[GGUF_QK_K];
    int16_t bsums[GGUF_QK_K / 16];
} gguf_block_q8_k;
GGUF_BLOCK_ASSERT(sizeof(gguf_block_q8_k) == 292, "block_q8_K size");

/* ---- ternary ------------------------------------------------------------ */

/* TQ1_0: base-3 digits, 5 per byte in qs, 4 per byte in qh. */
typedef struct gguf_block_tq1_0 {
    uint8_t qs[(GGUF_QK_K - 4 * GGUF_QK_K / 64) / 5];
    uint8_t qh[GGUF_QK_K / 64];
    gguf_half_t d;
} gguf_block_tq1_0;
GGUF_BLOCK_ASSERT(sizeof(gguf_block_tq1_0) == 54, "block_tq1_0 size");

/* TQ2_0: 2 bits per element, value - 1 in {-1, 0, 1}. */
typedef struct gguf_block_tq2_0 {
    uint8_t qs[GGUF_QK_K / 4];
    gguf_half_t d;
} gguf_block_tq2_0;
GGUF_BLOCK_ASSERT(sizeof(gguf_block_tq2_0) == 66, "block_tq2_0 size");

/* ---- IQ types (lattice codebooks) --------------------------------------- */

/* IQ2_XXS: per 32 elements two uint32 (little-endian): 4 grid indices (bytes)
 * then 4 x 7-bit sign indices and a 4-bit scale in the top bits. */
typedef struct gguf_block_iq2_xxs {
    gguf_half_t d;
    uint16_t qs[GGUF_QK_K / 8];
} gguf_block_iq2_xxs;
GGUF_BLOCK_ASSERT(sizeof(gguf_block_iq2_xxs) == 66, "block_iq2_xxs size");

/* IQ2_XS: per 8 elements a uint16: 9-bit grid index, 7-bit sign index. */
typedef struct gguf_block_iq2_xs {
    gguf_half_t d;
    uint16_t qs[GGUF_QK_K / 8];
    uint8_t scales[GGUF_QK_K / 32];
} gguf_block_iq2_xs;
GGUF_BLOCK_ASSERT(sizeof(gguf_block_iq2_xs) == 74, "block_iq2_xs size");

/* IQ2_S: qs[0..31] grid index low bytes, qs[32..63] explicit sign bytes. */
typedef struct gguf_block_iq2_s {
    gguf_half_t d;
    uint8_t qs[GGUF_QK_K / 4];
    uint8_t qh[GGUF_QK_K / 32];
    uint8_t scales[GGUF_QK_K / 32];
} gguf_block_iq2_s;
GGUF_BLOCK_ASSERT(sizeof(gguf_block_iq2_s) == 82, "block_iq2_s size");

/* IQ3_XXS: qs[0..63] grid indices, qs[64..95] 8 uint32 of signs + scale. */
typedef struct gguf_block_iq3_xxs {
    gguf_half_t d;
    uint8_t qs[3 * GGUF_QK_K / 8];
} gguf_block_iq3_xxs;
GGUF_BLOCK_ASSERT(sizeof(gguf_block_iq3_xxs) == 98, "block_iq3_xxs size");

typedef struct gguf_block_iq3_s {
    gguf_half_t d;
    uint8_t qs[GGUF_QK_K / 4];
    uint8_t qh[GGUF_QK_K / 32];
    uint8_t signs[GGUF_QK_K / 8];
    uint8_t scales[GGUF_QK_K / 64];
} gguf_block_iq3_s;
GGUF_BLOCK_ASSERT(sizeof(gguf_block_iq3_s) == 110, "block_iq3_s size");

/* IQ1_S: qh[k]: bits 0-11 high grid-index bits, 12-14 scale, 15 delta sign. */
typedef struct gguf_block_iq1_s {
    gguf_half_t d;
    uint8_t qs[GGUF_QK_K / 8];
    uint16_t qh[GGUF_QK_K / 32];
} gguf_block_iq1_s;
GGUF_BLOCK_ASSERT(sizeof(gguf_block_iq1_s) == 50, "block_iq1_s size");

/* IQ1_M: no separate d: the f16 super-block scale is the top nibbles of the
 * four uint16 in scales (nibble of scales[0] lowest). */
typedef struct gguf_block_iq1_m {
    uint8_t qs[GGUF_QK_K / 8];
    uint8_t qh[GGUF_QK_K / 16];
    uint8_t scales[GGUF_QK_K / 32];
} gguf_block_iq1_m;
GGUF_BLOCK_ASSERT(sizeof(gguf_block_iq1_m) == 56, "block_iq1_m size");

/* IQ4_NL: like Q4_0 but the nibble indexes a non-linear 16-value table. */
typedef struct gguf_block_iq4_nl {
    gguf_half_t d;
    uint8_t qs[GGUF_QK4_NL / 2];
} gguf_block_iq4_nl;
GGUF_BLOCK_ASSERT(sizeof(gguf_block_iq4_nl) == 18, "block_iq4_nl size");

/* IQ4_XS: 8 sub-blocks of 32 with 6-bit scales (low 4 bits in scales_l,
 * high 2 bits in scales_h), values from the IQ4_NL table. */
typedef struct gguf_block_iq4_xs {
    gguf_half_t d;
    uint16_t scales_h;
    uint8_t scales_l[GGUF_QK_K / 64];
    uint8_t qs[GGUF_QK_K / 2];
} gguf_block_iq4_xs;
GGUF_BLOCK_ASSERT(sizeof(gguf_block_iq4_xs) == 136, "block_iq4_xs size");

/* ---- micro-scaled FP4 --------------------------------------------------- */

/* MXFP4 (OCP MX): E8M0 shared exponent, 32 E2M1 values. */
typedef struct gguf_block_mxfp4 {
    uint8_t e;
    uint8_t qs[GGUF_QK_MXFP4 / 2];
} gguf_block_mxfp4;
GGUF_BLOCK_ASSERT(sizeof(gguf_block_mxfp4) == 17, "block_mxfp4 size");

/* NVFP4: four UE4M3 scales (one per 16 elements) then 4 x 8 bytes of E2M1.
 * Sub-block s: element j (0..7) is the low nibble of qs[8s+j], element j+8
 * the high nibble. Bit 7 of a scale byte: see docs/dequant.md. */
typedef struct gguf_block_nvfp4 {
    uint8_t d[GGUF_QK_NVFP4 / GGUF_QK_NVFP4_SUB];
    uint8_t qs[GGUF_QK_NVFP4 / 2];
} gguf_block_nvfp4;
GGUF_BLOCK_ASSERT(sizeof(gguf_block_nvfp4) == 36, "block_nvfp4 size");

/* ---- 1-bit -------------------------------------------------------------- */

/* Q1_0: x[i] = bit i set ? +d : -d, bits LSB first. */
typedef struct gguf_block_q1_0 {
    gguf_half_t d;
    uint8_t qs[GGUF_QK1_0 / 8];
} gguf_block_q1_0;
GGUF_BLOCK_ASSERT(sizeof(gguf_block_q1_0) == 18, "block_q1_0 size");

#ifdef __cplusplus
}
#endif
#endif /* GGUF_BLOCKS_H */
