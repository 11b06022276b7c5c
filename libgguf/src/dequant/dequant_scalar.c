/*
 * The scalar reference: one function per ggml type, written to be read next
 * to the layout drawings, not to be fast. Every fast path must produce these
 * exact bits, and these bits equal gguf-py's gguf.quants.dequantize (tests
 * prove both).
 *
 * Arithmetic order matters for bit-exactness: each formula below multiplies
 * and adds in the same order as ggml's dequantize_row_* and gguf-py's numpy
 * code (e.g. Q4_K is (d*sc)*q - (dmin*m), never d*(sc*q)). No FMA: the
 * project builds C11 without GNU extensions, where GCC does not contract.
 *
 * Fields are read byte-wise at offsetof() positions of the structs in
 * gguf/blocks.h; tensor data is often only 1- or 2-byte aligned.
 */
#include "dequant/dequant_internal.h"

#include "gguf/blocks.h"
#include "gguf/types.h"

#include <stddef.h>

/* No fused multiply-add: ggml and gguf-py round after every operation. GCC
 * does not contract in ISO C mode (-std=c11); clang needs to be told. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#define OFF(type, field) offsetof(type, field)

/* a*b + c and a*b - c with the NaN rule of gguf_nan_first */
static inline float mul_add(float a, float b, float c)
{
    const float p = a * b;
    return gguf_nan_first(p + c, p, c);
}
static inline float mul_sub(float a, float b, float c)
{
    const float p = a * b;
    return gguf_nan_first(p - c, p, c);
}

/* ======================================================================
 * Plain types: F32, F16, BF16, F64, I8, I16, I32, I64 (one element a block)
 * ====================================================================== */

static void dq_f32(const uint8_t *s, float *y, int64_t n)
{
    memcpy(y, s, (size_t)n * sizeof(float)); /* bits unchanged, NaNs included */
}

static void dq_f16(const uint8_t *s, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = gguf_fp16_to_fp32(gguf_rd_u16(s + 2 * i));
}

static void dq_bf16(const uint8_t *s, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = gguf_bf16_to_fp32(gguf_rd_u16(s + 2 * i));
}

static void dq_f64(const uint8_t *s, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        double v;
        memcpy(&v, s + 8 * i, sizeof v);
        y[i] = (float)v; /* round to nearest even; out of range gives Inf */
    }
}

static void dq_i8(const uint8_t *s, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = (float)(int8_t)s[i];
}

static void dq_i16(const uint8_t *s, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = (float)(int16_t)gguf_rd_u16(s + 2 * i);
}

static void dq_i32(const uint8_t *s, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = (float)(int32_t)gguf_rd_u32(s + 4 * i);
}

static void dq_i64(const uint8_t *s, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        int64_t v;
        memcpy(&v, s + 8 * i, sizeof v);
        y[i] = (float)v;
    }
}

/* ======================================================================
 * Legacy 32-element blocks: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1
 *
 *   Q4_0 (18 bytes)  +----+------------------+
 *                    | d  | qs[16]           |   x[j]    = d * ((qs[j] & 15) - 8)
 *                    +----+------------------+   x[j+16] = d * ((qs[j] >> 4) - 8)
 *   Q4_1 (20)        | d | m | qs[16] |            x = d * q + m
 *   Q5_0 (22)        | d | qh[4] | qs[16] |        5th bit of x[i] = bit i of qh (LE u32)
 *   Q5_1 (24)        | d | m | qh[4] | qs[16] |
 *   Q8_0 (34)        | d | qs[32] int8 |            x = d * qs
 *   Q8_1 (36)        | d | s | qs[32] int8 |        s = d*sum(qs), unused here
 * ====================================================================== */

static void dq_q4_0(const uint8_t *s, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_q4_0), y += 32) {
        const float d = gguf_rd_f16(s + OFF(gguf_block_q4_0, d));
        const uint8_t *qs = s + OFF(gguf_block_q4_0, qs);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((qs[j] & 15) - 8) * d;
            y[j + 16] = (float)((qs[j] >> 4) - 8) * d;
        }
    }
}

static void dq_q4_1(const uint8_t *s, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_q4_1), y += 32) {
        const float d = gguf_rd_f16(s + OFF(gguf_block_q4_1, d));
        const float m = gguf_rd_f16(s + OFF(gguf_block_q4_1, m));
        const uint8_t *qs = s + OFF(gguf_block_q4_1, qs);
        for (int j = 0; j < 16; j++) {
            y[j] = mul_add((float)(qs[j] & 15), d, m);
            y[j + 16] = mul_add((float)(qs[j] >> 4), d, m);
        }
    }
}

static void dq_q5_0(const uint8_t *s, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_q5_0), y += 32) {
        const float d = gguf_rd_f16(s + OFF(gguf_block_q5_0, d));
        const uint32_t qh = gguf_rd_u32(s + OFF(gguf_block_q5_0, qh));
        const uint8_t *qs = s + OFF(gguf_block_q5_0, qs);
        for (int j = 0; j < 16; j++) {
            const int lo = (qs[j] & 15) | (int)(((qh >> j) & 1) << 4);
            const int hi = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            y[j] = (float)(lo - 16) * d;
            y[j + 16] = (float)(hi - 16) * d;
        }
    }
}

static void dq_q5_1(const uint8_t *s, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_q5_1), y += 32) {
        const float d = gguf_rd_f16(s + OFF(gguf_block_q5_1, d));
        const float m = gguf_rd_f16(s + OFF(gguf_block_q5_1, m));
        const uint32_t qh = gguf_rd_u32(s + OFF(gguf_block_q5_1, qh));
        const uint8_t *qs = s + OFF(gguf_block_q5_1, qs);
        for (int j = 0; j < 16; j++) {
            const int lo = (qs[j] & 15) | (int)(((qh >> j) & 1) << 4);
            const int hi = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            y[j] = mul_add((float)lo, d, m);
            y[j + 16] = mul_add((float)hi, d, m);
        }
    }
}

static void dq_q8_0(const uint8_t *s, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_q8_0), y += 32) {
        const float d = gguf_rd_f16(s + OFF(gguf_block_q8_0, d));
        const uint8_t *qs = s + OFF(gguf_block_q8_0, qs);
        for (int j = 0; j < 32; j++)
            y[j] = (float)(int8_t)qs[j] * d;
    }
}

static void dq_q8_1(const uint8_t *s, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_q8_1), y += 32) {
        const float d = gguf_rd_f16(s + OFF(gguf_block_q8_1, d));
        const uint8_t *qs = s + OFF(gguf_block_q8_1, qs);
        for (int j = 0; j < 32; j++)
            y[j] = (float)(int8_t)qs[j] * d;
    }
}

/* ======================================================================
 * K-quants: 256-element super-blocks. Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K
 *
 *   Q2_K (84)   | scales[16] | qs[64] | d | dmin |
 *       16 sub-blocks of 16; scales[k]: low nibble scale, high nibble min.
 *       Element e = 128h + 32j + l (h half, j 2-bit plane, l 0..31) is
 *       (qs[32h + l] >> 2j) & 3, in sub-block 8h + 2j + l/16:
 *           x = (d * (sc & 15)) * q - (dmin * (sc >> 4))
 *
 *   Q3_K (110)  | hmask[32] | qs[64] | scales[12] | d |
 *       low 2 bits as in Q2_K; bit (e / 32) of hmask[e % 32] set means q,
 *       clear means q - 4. 16 signed 6-bit scales (minus 32):
 *           byte  0.. 7: low nibbles of scales 0..7, high nibbles 8..15
 *           byte  8..11: 2-bit pairs, scale k uses bits 2(k/4) of byte 8 + k%4
 *
 *   Q4_K (144)  | d | dmin | scales[12] | qs[128] |
 *   Q5_K (176)  | d | dmin | scales[12] | qh[32] | qs[128] |
 *       8 sub-blocks of 32 with a 6-bit scale and a 6-bit min each:
 *           byte 0..3  SSssssss  scale k (k<4) low 6 bits; top 2 bits: scale k+4 high
 *           byte 4..7  MMmmmmmm  min k   (k<4) low 6 bits; top 2 bits: min k+4 high
 *           byte 8..11 mmmmssss  low nibble scale k+4, high nibble min k+4
 *       sub-block 2c + t takes nibble t of qs[32c + l]; Q5_K adds bit
 *       (2c + t) of qh[l] as bit 4.   x = (d * sc) * q - (dmin * m)
 *
 *   Q6_K (210)  | ql[128] | qh[64] | scales[16] int8 | d |
 *       Element e = 128h + 32c + l (c 0..3): low 4 bits from nibble c/2 of
 *       ql[64h + 32(c%2) + l], high 2 bits (qh[32h + l] >> 2c) & 3; minus 32.
 *           x = (d * scales[e / 16]) * q
 *
 *   Q8_K (292)  | d float32 | qs[256] int8 | bsums[16] int16 |   x = d * qs
 * ====================================================================== */

static void dq_q2_k(const uint8_t *s, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_q2_k), y += 256) {
        const uint8_t *sc = s + OFF(gguf_block_q2_k, scales);
        const uint8_t *qs = s + OFF(gguf_block_q2_k, qs);
        const float d = gguf_rd_f16(s + OFF(gguf_block_q2_k, d));
        const float dmin = gguf_rd_f16(s + OFF(gguf_block_q2_k, dmin));
        for (int e = 0; e < 256; e++) {
            const int h = e / 128, j = (e / 32) % 4, l = e % 32;
            const int k = 8 * h + 2 * j + l / 16;
            const float dl = d * (float)(sc[k] & 15);
            const float ml = dmin * (float)(sc[k] >> 4);
            const int q = (qs[32 * h + l] >> (2 * j)) & 3;
            y[e] = mul_sub(dl, (float)q, ml);
        }
    }
}

static int q3_k_scale(const uint8_t *sc, int k)
{
    const int lo = k < 8 ? sc[k] & 15 : sc[k - 8] >> 4;
    const int hi = (sc[8 + k % 4] >> (2 * (k / 4))) & 3;
    return (lo | (hi << 4)) - 32;
}

static void dq_q3_k(const uint8_t *s, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_q3_k), y += 256) {
        const uint8_t *hm = s + OFF(gguf_block_q3_k, hmask);
        const uint8_t *qs = s + OFF(gguf_block_q3_k, qs);
        const uint8_t *sc = s + OFF(gguf_block_q3_k, scales);
        const float d = gguf_rd_f16(s + OFF(gguf_block_q3_k, d));
        for (int e = 0; e < 256; e++) {
            const int h = e / 128, j = (e / 32) % 4, l = e % 32;
            const float dl = d * (float)q3_k_scale(sc, e / 16);
            const int lo = (qs[32 * h + l] >> (2 * j)) & 3;
            const int q = lo - ((hm[l] >> (e / 32)) & 1 ? 0 : 4);
            y[e] = dl * (float)q;
        }
    }
}

/* Scale and min k (0..7) of Q4_K / Q5_K. */
static void k4_scale_min(const uint8_t *sc, int k, int *scale, int *min)
{
    if (k < 4) {
        *scale = sc[k] & 63;
        *min = sc[k + 4] & 63;
    } else {
        *scale = (sc[k + 4] & 15) | ((sc[k - 4] >> 6) << 4);
        *min = (sc[k + 4] >> 4) | ((sc[k] >> 6) << 4);
    }
}

static void dq_q4_k(const uint8_t *s, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_q4_k), y += 256) {
        const float d = gguf_rd_f16(s + OFF(gguf_block_q4_k, d));
        const float dmin = gguf_rd_f16(s + OFF(gguf_block_q4_k, dmin));
        const uint8_t *sc = s + OFF(gguf_block_q4_k, scales);
        const uint8_t *qs = s + OFF(gguf_block_q4_k, qs);
        for (int k = 0; k < 8; k++) {
            int scale, min;
            k4_scale_min(sc, k, &scale, &min);
            const float dl = d * (float)scale, ml = dmin * (float)min;
            const int c = k / 2, shift = 4 * (k % 2);
            for (int l = 0; l < 32; l++)
                y[32 * k + l] = mul_sub(dl, (float)((qs[32 * c + l] >> shift) & 15), ml);
        }
    }
}

static void dq_q5_k(const uint8_t *s, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_q5_k), y += 256) {
        const float d = gguf_rd_f16(s + OFF(gguf_block_q5_k, d));
        const float dmin = gguf_rd_f16(s + OFF(gguf_block_q5_k, dmin));
        const uint8_t *sc = s + OFF(gguf_block_q5_k, scales);
        const uint8_t *qh = s + OFF(gguf_block_q5_k, qh);
        const uint8_t *qs = s + OFF(gguf_block_q5_k, qs);
        for (int k = 0; k < 8; k++) {
            int scale, min;
            k4_scale_min(sc, k, &scale, &min);
            const float dl = d * (float)scale, ml = dmin * (float)min;
            const int c = k / 2, shift = 4 * (k % 2);
            for (int l = 0; l < 32; l++) {
                const int q = ((qs[32 * c + l] >> shift) & 15) | (((qh[l] >> k) & 1) << 4);
                y[32 * k + l] = mul_sub(dl, (float)q, ml);
            }
        }
    }
}

static void dq_q6_k(const uint8_t *s, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_q6_k), y += 256) {
        const uint8_t *ql = s + OFF(gguf_block_q6_k, ql);
        const uint8_t *qh = s + OFF(gguf_block_q6_k, qh);
        const uint8_t *sc = s + OFF(gguf_block_q6_k, scales);
        const float d = gguf_rd_f16(s + OFF(gguf_block_q6_k, d));
        for (int e = 0; e < 256; e++) {
            const int h = e / 128, c = (e / 32) % 4, l = e % 32;
            const int lo = (ql[64 * h + 32 * (c % 2) + l] >> (4 * (c / 2))) & 15;
            const int hi = (qh[32 * h + l] >> (2 * c)) & 3;
            const float dl = d * (float)(int8_t)sc[e / 16];
            y[e] = dl * (float)((lo | (hi << 4)) - 32);
        }
    }
}

static void dq_q8_k(const uint8_t *s, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_q8_k), y += 256) {
        const float d = gguf_bits_to_f32(gguf_rd_u32(s + OFF(gguf_block_q8_k, d)));
        const uint8_t *qs = s + OFF(gguf_block_q8_k, qs);
        for (int j = 0; j < 256; j++)
            y[j] = d * (float)(int8_t)qs[j];
    }
}

/* ======================================================================
 * Ternary: TQ1_0, TQ2_0 (values -1, 0, +1 times d)
 *
 *   TQ1_0 (54)  | qs[48] | qh[4] | d |
 *       Each byte holds 5 (qs) or 4 (qh) base-3 digits as a fixed-point
 *       fraction: digit k of byte b is ((uint8)(b * 3^k) * 3) >> 8.
 *       elements   0..159: digit k of qs[l],      e = 32k + l   (l < 32)
 *       elements 160..239: digit k of qs[32 + l], e = 160 + 16k + l (l < 16)
 *       elements 240..255: digit k of qh[l],      e = 240 + 4k + l  (l < 4)
 *   TQ2_0 (66)  | qs[64] | d |   e = 128h + 32j + l: ((qs[32h+l] >> 2j) & 3) - 1
 * ====================================================================== */

static float tq_digit(uint8_t b, int k, float d)
{
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    const uint8_t v = (uint8_t)(b * pow3[k]);
    return (float)((int)(((unsigned)v * 3) >> 8) - 1) * d;
}

static void dq_tq1_0(const uint8_t *s, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_tq1_0), y += 256) {
        const uint8_t *qs = s + OFF(gguf_block_tq1_0, qs);
        const uint8_t *qh = s + OFF(gguf_block_tq1_0, qh);
        const float d = gguf_rd_f16(s + OFF(gguf_block_tq1_0, d));
        for (int k = 0; k < 5; k++)
            for (int l = 0; l < 32; l++)
                y[32 * k + l] = tq_digit(qs[l], k, d);
        for (int k = 0; k < 5; k++)
            for (int l = 0; l < 16; l++)
                y[160 + 16 * k + l] = tq_digit(qs[32 + l], k, d);
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 4; l++)
                y[240 + 4 * k + l] = tq_digit(qh[l], k, d);
    }
}

static void dq_tq2_0(const uint8_t *s, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_tq2_0), y += 256) {
        const uint8_t *qs = s + OFF(gguf_block_tq2_0, qs);
        const float d = gguf_rd_f16(s + OFF(gguf_block_tq2_0, d));
        for (int e = 0; e < 256; e++) {
            const int h = e / 128, j = (e / 32) % 4, l = e % 32;
            y[e] = (float)(((qs[32 * h + l] >> (2 * j)) & 3) - 1) * d;
        }
    }
}

/* ======================================================================
 * IQ types: values from fixed lattice grids (dequant_iq_tables.c)
 *
 *   IQ2_XXS (66)  | d | 8 x { u32 grid_idx[4 bytes], u32 signs_scale } |
 *       per 32 elements: 4 groups of 8 take grid iq2xxs[byte l]; sign index
 *       l is bits 7l..7l+6 of the second word, expanded by ksigns (8th sign =
 *       parity); scale = top 4 bits:  db = d * (0.5 + s) * 0.25
 *   IQ2_XS  (74)  | d | qs[32] u16 | scales[8] |
 *       qs: 9-bit grid index, 7-bit sign index; scales nibble per 16 elements
 *   IQ2_S   (82)  | d | qs[32] | signs[32] | qh[8] | scales[8] |
 *       10-bit grid index: qs[4ib+l] | bits 2l..2l+1 of qh[ib] << 8;
 *       signs are explicit bytes
 *   IQ3_XXS (98)  | d | qs[64] | 8 x u32 signs_scale |
 *       two 4-wide grid entries per 8 elements; db = d * (0.5 + s) * 0.5
 *   IQ3_S  (110)  | d | qs[64] | qh[8] | signs[32] | scales[4] |
 *       9-bit grid index (bit k of qh[ib]); db = d * (1 + 2 * nibble)
 *   IQ1_S   (50)  | d | qs[32] | qh[8] u16 |
 *       qh: bits 3l..3l+2 high index bits of group l, bits 12..14 scale,
 *       bit 15 delta sign; x = (d * (2s + 1)) * (grid + delta), delta 1/8
 *   IQ1_M   (56)  | qs[32] | qh[16] | scales[8] |
 *       d is split over the top nibbles of the four LE u16 in scales;
 *       3-bit scale per 16 elements; qh nibble per group: 3 index bits +
 *       delta sign (bit 3)
 *   IQ4_NL  (18)  | d | qs[16] |   x = d * iq4nl[nibble] (layout of Q4_0)
 *   IQ4_XS (136)  | d | scales_h u16 | scales_l[4] | qs[128] |
 *       6-bit scale per 32 elements, minus 32; values from iq4nl
 * ====================================================================== */

/* The grid value times the scale, negated where the sign bit is set. A
 * negation, not a multiply by -1: it flips the sign bit of every value, NaN
 * included, so every implementation gives the same bits (a compiler may turn
 * x * -1.0f into -x anyway; this says so explicitly). */
static float signed_by(float v, uint8_t signs, int j)
{
    return (signs >> j) & 1 ? -v : v;
}

static void dq_iq2_xxs(const uint8_t *s, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_iq2_xxs), y += 256) {
        const float d = gguf_rd_f16(s + OFF(gguf_block_iq2_xxs, d));
        const uint8_t *q = s + OFF(gguf_block_iq2_xxs, qs);
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t *idx = q + 8 * ib;
            const uint32_t aux = gguf_rd_u32(q + 8 * ib + 4);
            const float db = d * (0.5f + (float)(aux >> 28)) * 0.25f;
            for (int l = 0; l < 4; l++) {
                const uint8_t *g = gguf_iq2xxs_grid[idx[l]];
                const uint8_t signs = gguf_iq2_ksigns[(aux >> (7 * l)) & 127];
                for (int j = 0; j < 8; j++)
                    y[32 * ib + 8 * l + j] = signed_by(db * (float)g[j], signs, j);
            }
        }
    }
}

static void dq_iq2_xs(const uint8_t *s, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_iq2_xs), y += 256) {
        const float d = gguf_rd_f16(s + OFF(gguf_block_iq2_xs, d));
        const uint8_t *q = s + OFF(gguf_block_iq2_xs, qs);
        const uint8_t *sc = s + OFF(gguf_block_iq2_xs, scales);
        for (int ib = 0; ib < 8; ib++) {
            const float db[2] = {d * (0.5f + (float)(sc[ib] & 15)) * 0.25f,
                                 d * (0.5f + (float)(sc[ib] >> 4)) * 0.25f};
            for (int l = 0; l < 4; l++) {
                const uint16_t v = gguf_rd_u16(q + 2 * (4 * ib + l));
                const uint8_t *g = gguf_iq2xs_grid[v & 511];
                const uint8_t signs = gguf_iq2_ksigns[v >> 9];
                for (int j = 0; j < 8; j++)
                    y[32 * ib + 8 * l + j] = signed_by(db[l / 2] * (float)g[j], signs, j);
            }
        }
    }
}

static void dq_iq2_s(const uint8_t *s, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_iq2_s), y += 256) {
        const float d = gguf_rd_f16(s + OFF(gguf_block_iq2_s, d));
        const uint8_t *qs = s + OFF(gguf_block_iq2_s, qs);
        const uint8_t *signs = qs + 32;
        const uint8_t *qh = s + OFF(gguf_block_iq2_s, qh);
        const uint8_t *sc = s + OFF(gguf_block_iq2_s, scales);
        for (int ib = 0; ib < 8; ib++) {
            const float db[2] = {d * (0.5f + (float)(sc[ib] & 15)) * 0.25f,
                                 d * (0.5f + (float)(sc[ib] >> 4)) * 0.25f};
            for (int l = 0; l < 4; l++) {
                const int idx = qs[4 * ib + l] | (((qh[ib] >> (2 * l)) & 3) << 8);
                const uint8_t *g = gguf_iq2s_grid[idx];
                for (int j = 0; j < 8; j++)
                    y[32 * ib + 8 * l + j] = signed_by(db[l / 2] * (float)g[j], signs[4 * ib + l], j);
            }
        }
    }
}

static void dq_iq3_xxs(const uint8_t *s, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_iq3_xxs), y += 256) {
        const float d = gguf_rd_f16(s + OFF(gguf_block_iq3_xxs, d));
        const uint8_t *qs = s + OFF(gguf_block_iq3_xxs, qs);
        const uint8_t *ss = qs + 64;
        for (int ib = 0; ib < 8; ib++) {
            const uint32_t aux = gguf_rd_u32(ss + 4 * ib);
            const float db = d * (0.5f + (float)(aux >> 28)) * 0.5f;
            for (int l = 0; l < 4; l++) {
                const uint8_t signs = gguf_iq2_ksigns[(aux >> (7 * l)) & 127];
                const uint8_t *g1 = gguf_iq3xxs_grid[qs[8 * ib + 2 * l]];
                const uint8_t *g2 = gguf_iq3xxs_grid[qs[8 * ib + 2 * l + 1]];
                for (int j = 0; j < 4; j++) {
                    y[32 * ib + 8 * l + j] = signed_by(db * (float)g1[j], signs, j);
                    y[32 * ib + 8 * l + j + 4] = signed_by(db * (float)g2[j], signs, j + 4);
                }
            }
        }
    }
}

static void dq_iq3_s(const uint8_t *s, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_iq3_s), y += 256) {
        const float d = gguf_rd_f16(s + OFF(gguf_block_iq3_s, d));
        const uint8_t *qs = s + OFF(gguf_block_iq3_s, qs);
        const uint8_t *qh = s + OFF(gguf_block_iq3_s, qh);
        const uint8_t *signs = s + OFF(gguf_block_iq3_s, signs);
        const uint8_t *sc = s + OFF(gguf_block_iq3_s, scales);
        for (int ib = 0; ib < 8; ib++) {
            const float db = d * (float)(1 + 2 * ((sc[ib / 2] >> (4 * (ib % 2))) & 15));
            for (int l = 0; l < 4; l++) {
                const int i1 = qs[8 * ib + 2 * l] | (((qh[ib] >> (2 * l)) & 1) << 8);
                const int i2 = qs[8 * ib + 2 * l + 1] | (((qh[ib] >> (2 * l + 1)) & 1) << 8);
                const uint8_t *g1 = gguf_iq3s_grid[i1], *g2 = gguf_iq3s_grid[i2];
                const uint8_t sg = signs[4 * ib + l];
                for (int j = 0; j < 4; j++) {
                    y[32 * ib + 8 * l + j] = signed_by(db * (float)g1[j], sg, j);
                    y[32 * ib + 8 * l + j + 4] = signed_by(db * (float)g2[j], sg, j + 4);
                }
            }
        }
    }
}

static void dq_iq1_s(const uint8_t *s, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_iq1_s), y += 256) {
        const float d = gguf_rd_f16(s + OFF(gguf_block_iq1_s, d));
        const uint8_t *qs = s + OFF(gguf_block_iq1_s, qs);
        const uint8_t *qhp = s + OFF(gguf_block_iq1_s, qh);
        for (int ib = 0; ib < 8; ib++) {
            const uint16_t qh = gguf_rd_u16(qhp + 2 * ib);
            const float dl = d * (float)(2 * ((qh >> 12) & 7) + 1);
            const float delta = qh & 0x8000 ? -GGUF_IQ1S_DELTA : GGUF_IQ1S_DELTA;
            for (int l = 0; l < 4; l++) {
                const int idx = qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8);
                const int8_t *g = gguf_iq1s_grid[idx];
                for (int j = 0; j < 8; j++)
                    y[32 * ib + 8 * l + j] = dl * ((float)g[j] + delta);
            }
        }
    }
}

static void dq_iq1_m(const uint8_t *s, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_iq1_m), y += 256) {
        const uint8_t *qs = s + OFF(gguf_block_iq1_m, qs);
        const uint8_t *qh = s + OFF(gguf_block_iq1_m, qh);
        const uint8_t *scp = s + OFF(gguf_block_iq1_m, scales);
        uint16_t sc[4];
        for (int k = 0; k < 4; k++)
            sc[k] = gguf_rd_u16(scp + 2 * k);
        /* the f16 scale: top nibble of sc[k] is nibble k of d */
        const float d = gguf_fp16_to_fp32(gguf_iq1m_d_bits(scp));
        for (int ib = 0; ib < 8; ib++) {
            const int sv = sc[ib / 2] >> (6 * (ib % 2));
            const float dl[2] = {d * (float)(2 * (sv & 7) + 1), d * (float)(2 * ((sv >> 3) & 7) + 1)};
            for (int l = 0; l < 4; l++) {
                const int nib = (qh[2 * ib + l / 2] >> (4 * (l % 2))) & 15;
                const int idx = qs[4 * ib + l] | ((nib & 7) << 8);
                const float delta = nib & 8 ? -GGUF_IQ1S_DELTA : GGUF_IQ1S_DELTA;
                const int8_t *g = gguf_iq1s_grid[idx];
                for (int j = 0; j < 8; j++)
                    y[32 * ib + 8 * l + j] = dl[l / 2] * ((float)g[j] + delta);
            }
        }
    }
}

static void dq_iq4_nl(const uint8_t *s, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_iq4_nl), y += 32) {
        const float d = gguf_rd_f16(s + OFF(gguf_block_iq4_nl, d));
        const uint8_t *qs = s + OFF(gguf_block_iq4_nl, qs);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)gguf_iq4nl_values[qs[j] & 15];
            y[j + 16] = d * (float)gguf_iq4nl_values[qs[j] >> 4];
        }
    }
}

static void dq_iq4_xs(const uint8_t *s, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_iq4_xs), y += 256) {
        const float d = gguf_rd_f16(s + OFF(gguf_block_iq4_xs, d));
        const uint16_t sh = gguf_rd_u16(s + OFF(gguf_block_iq4_xs, scales_h));
        const uint8_t *sl = s + OFF(gguf_block_iq4_xs, scales_l);
        const uint8_t *qs = s + OFF(gguf_block_iq4_xs, qs);
        for (int ib = 0; ib < 8; ib++) {
            const int ls = ((sl[ib / 2] >> (4 * (ib % 2))) & 15) | (((sh >> (2 * ib)) & 3) << 4);
            const float dl = d * (float)(ls - 32);
            const uint8_t *q = qs + 16 * ib;
            for (int j = 0; j < 16; j++) {
                y[32 * ib + j] = dl * (float)gguf_iq4nl_values[q[j] & 15];
                y[32 * ib + j + 16] = dl * (float)gguf_iq4nl_values[q[j] >> 4];
            }
        }
    }
}

/* ======================================================================
 * Micro-scaled FP4: MXFP4, NVFP4. Values are E2M1 stored doubled
 * (0, 1, 2, 3, 4, 6, 8, 12, then the negatives) with the scale halved.
 *
 *   MXFP4 (17)  | e | qs[16] |       scale 2^(e-127)/2 (E8M0); x[j] low, x[j+16] high nibble
 *   NVFP4 (36)  | d0 d1 d2 d3 | qs[32] |
 *       sub-block s (16 elements) uses scale ds (UE4M3, halved) and
 *       qs[8s..8s+7]: element j low nibble, element j+8 high nibble
 * ====================================================================== */

static void dq_mxfp4(const uint8_t *s, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_mxfp4), y += 32) {
        const float d = gguf_e8m0_half(s[OFF(gguf_block_mxfp4, e)]);
        const uint8_t *qs = s + OFF(gguf_block_mxfp4, qs);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)gguf_fp4_e2m1_x2[qs[j] & 15] * d;
            y[j + 16] = (float)gguf_fp4_e2m1_x2[qs[j] >> 4] * d;
        }
    }
}

static void dq_nvfp4(const uint8_t *s, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_nvfp4), y += 64) {
        const uint8_t *ds = s + OFF(gguf_block_nvfp4, d);
        const uint8_t *qs = s + OFF(gguf_block_nvfp4, qs);
        for (int sb = 0; sb < 4; sb++) {
            const float d = gguf_ue4m3_half(ds[sb]);
            for (int j = 0; j < 8; j++) {
                y[16 * sb + j] = d * (float)gguf_fp4_e2m1_x2[qs[8 * sb + j] & 15];
                y[16 * sb + j + 8] = d * (float)gguf_fp4_e2m1_x2[qs[8 * sb + j] >> 4];
            }
        }
    }
}

/* ======================================================================
 * 1-bit: Q1_0
 *
 *   Q1_0 (18)  | d | qs[16] |     x[j] = bit j (LSB first) set ? d : -d
 * ====================================================================== */

static void dq_q1_0(const uint8_t *s, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_q1_0), y += 128) {
        const float d = gguf_rd_f16(s + OFF(gguf_block_q1_0, d));
        const uint8_t *qs = s + OFF(gguf_block_q1_0, qs);
        for (int j = 0; j < 128; j++)
            y[j] = (qs[j / 8] >> (j % 8)) & 1 ? d : -d;
    }
}

/* ====================================================================== */

gguf_dequant_fn gguf_dequant_scalar_kernel(uint32_t type)
{
    switch (type) {
    case GGUF_TYPE_F32: return dq_f32;
    case GGUF_TYPE_F16: return dq_f16;
    case GGUF_TYPE_BF16: return dq_bf16;
    case GGUF_TYPE_F64: return dq_f64;
    case GGUF_TYPE_I8: return dq_i8;
    case GGUF_TYPE_I16: return dq_i16;
    case GGUF_TYPE_I32: return dq_i32;
    case GGUF_TYPE_I64: return dq_i64;
    case GGUF_TYPE_Q4_0: return dq_q4_0;
    case GGUF_TYPE_Q4_1: return dq_q4_1;
    case GGUF_TYPE_Q5_0: return dq_q5_0;
    case GGUF_TYPE_Q5_1: return dq_q5_1;
    case GGUF_TYPE_Q8_0: return dq_q8_0;
    case GGUF_TYPE_Q8_1: return dq_q8_1;
    case GGUF_TYPE_Q2_K: return dq_q2_k;
    case GGUF_TYPE_Q3_K: return dq_q3_k;
    case GGUF_TYPE_Q4_K: return dq_q4_k;
    case GGUF_TYPE_Q5_K: return dq_q5_k;
    case GGUF_TYPE_Q6_K: return dq_q6_k;
    case GGUF_TYPE_Q8_K: return dq_q8_k;
    case GGUF_TYPE_TQ1_0: return dq_tq1_0;
    case GGUF_TYPE_TQ2_0: return dq_tq2_0;
    case GGUF_TYPE_IQ2_XXS: return dq_iq2_xxs;
    case GGUF_TYPE_IQ2_XS: return dq_iq2_xs;
    case GGUF_TYPE_IQ2_S: return dq_iq2_s;
    case GGUF_TYPE_IQ3_XXS: return dq_iq3_xxs;
    case GGUF_TYPE_IQ3_S: return dq_iq3_s;
    case GGUF_TYPE_IQ1_S: return dq_iq1_s;
    case GGUF_TYPE_IQ1_M: return dq_iq1_m;
    case GGUF_TYPE_IQ4_NL: return dq_iq4_nl;
    case GGUF_TYPE_IQ4_XS: return dq_iq4_xs;
    case GGUF_TYPE_MXFP4: return dq_mxfp4;
    case GGUF_TYPE_NVFP4: return dq_nvfp4;
    case GGUF_TYPE_Q1_0: return dq_q1_0;
    default: return NULL;
    }
}
