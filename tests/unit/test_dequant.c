/*
 * Dequantization: known answers, float conversions, special scales, every
 * fast path equal to the reference bit for bit, threads, slices, error codes.
 *
 * Known-answer blocks are built by hand from the layouts in gguf/blocks.h and
 * docs/dequant.md, with expected values worked out on paper (the comment next
 * to each says how), so they do not depend on the code under test. gguf-py
 * agreement on random and real data is tests/interop/test_dequant_gguf_py.py.
 */
#include <check.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/blocks.h"
#include "gguf/dequant.h"
#include "gguf/types.h"
#include "helper_dequant.h"

#define F16_ONE 0x3C00
#define F16_TWO 0x4000
#define F16_HALF 0x3800

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void dq(uint32_t type, const void *src, float *dst, int64_t n)
{
    gguf_error err;
    ck_assert_int_eq(gguf_dequant_scalar_row(type, src, dst, n, &err), 0);
    /* every available path must agree, so check them all on every vector */
    float *alt = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int p = GGUF_DEQUANT_AUTO; p < GGUF_DEQUANT_PATH_COUNT; p++) {
        if (!gguf_dequant_path_available(p))
            continue;
        ck_assert_int_eq(gguf_dequant_row_path(p, type, src, alt, n, &err), 0);
        ck_assert_msg(hd_first_bit_diff(dst, alt, n) < 0, "%s path %s differs",
                      gguf_type_name(type), gguf_dequant_path_name(p));
    }
    free(alt);
}

/* ====================================================================
 * Float conversions
 * ==================================================================== */

START_TEST(fp16_known)
{
    ck_assert_float_eq(gguf_fp16_to_fp32(0x3C00), 1.0f);
    ck_assert_float_eq(gguf_fp16_to_fp32(0xC000), -2.0f);
    ck_assert_float_eq(gguf_fp16_to_fp32(0x7BFF), 65504.0f);
    ck_assert_float_eq(gguf_fp16_to_fp32(0x0001), 0x1p-24f); /* smallest subnormal */
    ck_assert_float_eq(gguf_fp16_to_fp32(0x03FF), 1023 * 0x1p-24f);
    ck_assert_float_eq(gguf_fp16_to_fp32(0x0400), 0x1p-14f);
    ck_assert_uint_eq(bits(gguf_fp16_to_fp32(0x8000)), 0x80000000u);
    ck_assert_uint_eq(bits(gguf_fp16_to_fp32(0x7C00)), 0x7F800000u);
    ck_assert_uint_eq(bits(gguf_fp16_to_fp32(0xFC00)), 0xFF800000u);
    ck_assert_uint_eq(bits(gguf_fp16_to_fp32(0x7E00)), 0x7FC00000u);  /* quiet NaN */
    ck_assert_uint_eq(bits(gguf_fp16_to_fp32(0x7C01)), 0x7FC02000u);  /* signalling: quieted */
    ck_assert_uint_eq(bits(gguf_fp16_to_fp32(0xFD55)), 0xFFEAA000u);  /* payload kept */
}
END_TEST

START_TEST(fp16_roundtrip_all)
{
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = gguf_fp16_to_fp32((uint16_t)h);
        const uint16_t back = gguf_fp32_to_fp16(f);
        if (isnan(f))
            ck_assert_uint_eq(back, h | 0x0200); /* quiet bit forced */
        else
            ck_assert_uint_eq(back, h);
    }
}
END_TEST

START_TEST(fp16_rounding)
{
    ck_assert_uint_eq(gguf_fp32_to_fp16(65519.0f), 0x7BFF);
    ck_assert_uint_eq(gguf_fp32_to_fp16(65520.0f), 0x7C00);     /* ties to even: Inf */
    ck_assert_uint_eq(gguf_fp32_to_fp16(1.0f + 0x1p-11f), 0x3C00); /* tie -> even */
    ck_assert_uint_eq(gguf_fp32_to_fp16(1.0f + 0x1p-11f + 0x1p-20f), 0x3C01);
    ck_assert_uint_eq(gguf_fp32_to_fp16(0x1p-25f), 0x0000);    /* tie with 0 -> 0 */
    ck_assert_uint_eq(gguf_fp32_to_fp16(0x1.8p-25f), 0x0001);
    ck_assert_uint_eq(gguf_fp32_to_fp16(3 * 0x1p-25f), 0x0002); /* 1.5 ulp -> 2 */
    ck_assert_uint_eq(gguf_fp32_to_fp16(-INFINITY), 0xFC00);
    ck_assert_uint_eq(gguf_fp32_to_fp16(1e-30f), 0x0000);
}
END_TEST

START_TEST(bf16_conversions)
{
    ck_assert_float_eq(gguf_bf16_to_fp32(0x3F80), 1.0f);
    ck_assert_uint_eq(bits(gguf_bf16_to_fp32(0x7F81)), 0x7F810000u); /* sNaN kept as is */
    ck_assert_uint_eq(gguf_fp32_to_bf16(1.0f), 0x3F80);
    ck_assert_uint_eq(gguf_fp32_to_bf16(gguf_bf16_to_fp32(0x3F81)), 0x3F81);
    float tie;
    uint32_t u = 0x3F808000u; /* exactly between 0x3F80 and 0x3F81: even wins */
    memcpy(&tie, &u, 4);
    ck_assert_uint_eq(gguf_fp32_to_bf16(tie), 0x3F80);
    u = 0x3F818000u;
    memcpy(&tie, &u, 4);
    ck_assert_uint_eq(gguf_fp32_to_bf16(tie), 0x3F82);
    u = 0x7F800001u; /* signalling NaN: quiet bit 6 of the bf16 set */
    memcpy(&tie, &u, 4);
    ck_assert_uint_eq(gguf_fp32_to_bf16(tie), 0x7FC0);
}
END_TEST

/* UE4M3: 4 exponent bits (bias 7), 3 mantissa bits, no sign.
 *   0x01 = 1/8 * 2^-6 = 2^-9 (subnormal), 0x08 = 2^-6, 0x38 = 1, 0x7E = 1.75 * 2^8 = 448.
 * 0x7F is E4M3's NaN pattern: 0. Bit 7 (see docs/dequant.md) is dropped from
 * the value, as ggml's CPU code and gguf-py do, so 0x81 == 0x01 and 0xB8 == 1;
 * 0xFF escapes the 0x7F test and reads as 1.875 * 2^8 = 480. */
START_TEST(ue4m3_known)
{
    ck_assert_float_eq(gguf_ue4m3_to_fp32(0x00), 0.0f);
    ck_assert_float_eq(gguf_ue4m3_to_fp32(0x01), 0x1p-9f);
    ck_assert_float_eq(gguf_ue4m3_to_fp32(0x07), 7 * 0x1p-9f);
    ck_assert_float_eq(gguf_ue4m3_to_fp32(0x08), 0x1p-6f);
    ck_assert_float_eq(gguf_ue4m3_to_fp32(0x38), 1.0f);
    ck_assert_float_eq(gguf_ue4m3_to_fp32(0x3C), 1.5f);
    ck_assert_float_eq(gguf_ue4m3_to_fp32(0x7E), 448.0f);
    ck_assert_float_eq(gguf_ue4m3_to_fp32(0x7F), 0.0f);
    ck_assert_float_eq(gguf_ue4m3_to_fp32(0x80), 0.0f);
    ck_assert_float_eq(gguf_ue4m3_to_fp32(0x81), 0x1p-9f);
    ck_assert_float_eq(gguf_ue4m3_to_fp32(0xB8), 1.0f);
    ck_assert_float_eq(gguf_ue4m3_to_fp32(0xFE), 448.0f);
    ck_assert_float_eq(gguf_ue4m3_to_fp32(0xFF), 480.0f);
    for (int x = 0; x < 256; x++)
        ck_assert(gguf_ue4m3_to_fp32((uint8_t)x) >= 0.0f); /* never negative */
}
END_TEST

START_TEST(e8m0_known)
{
    ck_assert_float_eq(gguf_e8m0_to_fp32(127), 1.0f);
    ck_assert_float_eq(gguf_e8m0_to_fp32(128), 2.0f);
    ck_assert_float_eq(gguf_e8m0_to_fp32(1), 0x1p-126f);
    ck_assert_float_eq(gguf_e8m0_to_fp32(0), 0x1p-127f);
    ck_assert(isinf(gguf_e8m0_to_fp32(255)));
}
END_TEST

/* ====================================================================
 * Known answers, one or more per type
 * ==================================================================== */

START_TEST(ka_plain)
{
    float y[4];
    const int8_t i8[4] = {-128, -1, 0, 127};
    dq(GGUF_TYPE_I8, i8, y, 4);
    ck_assert_float_eq(y[0], -128.0f);
    ck_assert_float_eq(y[3], 127.0f);
    const int16_t i16[2] = {-32768, 12345};
    dq(GGUF_TYPE_I16, i16, y, 2);
    ck_assert_float_eq(y[0], -32768.0f);
    ck_assert_float_eq(y[1], 12345.0f);
    const int32_t i32[2] = {16777217, -7}; /* 2^24 + 1 rounds to even: 2^24 */
    dq(GGUF_TYPE_I32, i32, y, 2);
    ck_assert_float_eq(y[0], 16777216.0f);
    ck_assert_float_eq(y[1], -7.0f);
    const int64_t i64[2] = {INT64_MIN, 3};
    dq(GGUF_TYPE_I64, i64, y, 2);
    ck_assert_float_eq(y[0], -0x1p63f);
    ck_assert_float_eq(y[1], 3.0f);
    const double f64[3] = {0.1, 1e300, -2.5};
    dq(GGUF_TYPE_F64, f64, y, 3);
    ck_assert_float_eq(y[0], 0.1f);
    ck_assert(isinf(y[1]));
    ck_assert_float_eq(y[2], -2.5f);
    const uint32_t f32[2] = {0x7F800001u, 0x3F800000u}; /* sNaN passes unchanged */
    dq(GGUF_TYPE_F32, f32, y, 2);
    ck_assert_uint_eq(bits(y[0]), 0x7F800001u);
    const uint16_t f16[9] = {0x3C00, 0xC000, 0x0001, 0x7C00, 0x7E00, 0x8000, 0x3555, 0x7BFF, 0x0400};
    dq(GGUF_TYPE_F16, f16, y, 4); /* 4 here; the 9-long row runs the AVX2 tail below */
    ck_assert_float_eq(y[1], -2.0f);
    float y9[9];
    dq(GGUF_TYPE_F16, f16, y9, 9);
    ck_assert_float_eq(y9[8], 0x1p-14f);
    const uint16_t bf[9] = {0x3F80, 0xC000, 0x0001, 0x7F80, 0x7FC0, 0x8000, 0x3EAB, 0x7F7F, 0x0080};
    dq(GGUF_TYPE_BF16, bf, y9, 9);
    ck_assert_float_eq(y9[0], 1.0f);
    ck_assert_float_eq(y9[1], -2.0f);
    ck_assert_uint_eq(bits(y9[8]), 0x00800000u);
}
END_TEST

/* Q4_0, d = 1: qs[j] = j | (15 - j) << 4 gives x[j] = j - 8, x[j+16] = 7 - j. */
START_TEST(ka_q4_0_q4_1)
{
    uint8_t b[20];
    float y[32];
    put16(b, F16_ONE);
    for (int j = 0; j < 16; j++)
        b[2 + j] = (uint8_t)(j | (15 - j) << 4);
    dq(GGUF_TYPE_Q4_0, b, y, 32);
    for (int j = 0; j < 16; j++) {
        ck_assert_float_eq(y[j], (float)(j - 8));
        ck_assert_float_eq(y[j + 16], (float)(7 - j));
    }
    /* Q4_1, d = 2, m = 0.5: x[j] = 2j + 0.5, x[j+16] = 2(15-j) + 0.5 */
    put16(b, F16_TWO);
    put16(b + 2, F16_HALF);
    for (int j = 0; j < 16; j++)
        b[4 + j] = (uint8_t)(j | (15 - j) << 4);
    dq(GGUF_TYPE_Q4_1, b, y, 32);
    for (int j = 0; j < 16; j++) {
        ck_assert_float_eq(y[j], 2.0f * j + 0.5f);
        ck_assert_float_eq(y[j + 16], 2.0f * (15 - j) + 0.5f);
    }
}
END_TEST

/* Q5_0, d = 1, qs all zero, qh = 0x80000001: element 0 and 31 have bit 4 set:
 * x[0] = 16 - 16 = 0, x[31] = 0, all others -16. Q5_1 with m = 0.5, d = 1:
 * x[0] = 16.5, x[1] = 0.5. */
START_TEST(ka_q5)
{
    uint8_t b[24] = {0};
    float y[32];
    put16(b, F16_ONE);
    b[2] = 0x01;
    b[5] = 0x80;
    dq(GGUF_TYPE_Q5_0, b, y, 32);
    for (int j = 0; j < 32; j++)
        ck_assert_float_eq(y[j], (j == 0 || j == 31) ? 0.0f : -16.0f);
    memset(b, 0, sizeof b);
    put16(b, F16_ONE);
    put16(b + 2, F16_HALF);
    b[4] = 0x01;
    dq(GGUF_TYPE_Q5_1, b, y, 32);
    ck_assert_float_eq(y[0], 16.5f);
    ck_assert_float_eq(y[1], 0.5f);
}
END_TEST

/* Q8_0 / Q8_1 / Q8_K: x = d * q with q = j - 16 (and for Q8_K j - 128).
 * Q8_1 is read as 36 bytes: d, s (ignored, set to garbage), qs. */
START_TEST(ka_q8)
{
    uint8_t b[2 * 292];
    float y[512];
    put16(b, F16_HALF);
    for (int j = 0; j < 32; j++)
        b[2 + j] = (uint8_t)(int8_t)(j - 16);
    dq(GGUF_TYPE_Q8_0, b, y, 32);
    for (int j = 0; j < 32; j++)
        ck_assert_float_eq(y[j], 0.5f * (float)(j - 16));

    /* two Q8_1 blocks back to back: the second starts at byte 36, not 40 */
    for (int k = 0; k < 2; k++) {
        uint8_t *p = b + 36 * k;
        put16(p, k ? F16_TWO : F16_ONE);
        put16(p + 2, 0x7C00); /* s = Inf: must not leak into the values */
        for (int j = 0; j < 32; j++)
            p[4 + j] = (uint8_t)(int8_t)(j - 16);
    }
    ck_assert_uint_eq(gguf_type_get(GGUF_TYPE_Q8_1)->type_size, 36);
    dq(GGUF_TYPE_Q8_1, b, y, 64);
    for (int j = 0; j < 32; j++) {
        ck_assert_float_eq(y[j], (float)(j - 16));
        ck_assert_float_eq(y[32 + j], 2.0f * (float)(j - 16));
    }

    const float d = 0.25f;
    memcpy(b, &d, 4);
    for (int j = 0; j < 256; j++)
        b[4 + j] = (uint8_t)(int8_t)(j - 128);
    memset(b + 260, 0xAB, 32); /* bsums: ignored */
    dq(GGUF_TYPE_Q8_K, b, y, 256);
    for (int j = 0; j < 256; j++)
        ck_assert_float_eq(y[j], 0.25f * (float)(j - 128));
}
END_TEST

/* Q2_K, d = 1, dmin = 0.5. Sub-block k has scale k%16 (low nibble) and min 1:
 * scales[k] = 0x10 | (k & 15). qs bytes 0x1B = 00 01 10 11 (planes 0..3 hold
 * 3, 2, 1, 0). Element e = 128h + 32j + l: q = 3 - j, sub-block e/16:
 *     x = (e/16) * (3 - j) - 0.5 */
START_TEST(ka_q2_k)
{
    uint8_t b[84];
    float y[256];
    for (int k = 0; k < 16; k++)
        b[k] = (uint8_t)(0x10 | k);
    memset(b + 16, 0x1B, 64);
    put16(b + 80, F16_ONE);
    put16(b + 82, F16_HALF);
    dq(GGUF_TYPE_Q2_K, b, y, 256);
    for (int e = 0; e < 256; e++) {
        const int j = (e / 32) % 4;
        ck_assert_float_eq(y[e], (float)(e / 16) * (float)(3 - j) - 0.5f);
    }
}
END_TEST

/* Q3_K, d = 1. All 16 scales = 33 (stored 33 + ... -> 33 - 32 = 1): low
 * nibbles 1 (bytes 0..7 = 0x11), high pairs 2 (bytes 8..11 = 0xAA).
 * qs = 0 everywhere; hmask byte l has bit p set when plane p is even:
 * x = 0 for even planes (e/32 even), -4 for odd planes. */
START_TEST(ka_q3_k)
{
    uint8_t b[110];
    float y[256];
    memset(b, 0x55, 32);
    memset(b + 32, 0, 64);
    memset(b + 96, 0x11, 8);
    memset(b + 104, 0xAA, 4);
    put16(b + 108, F16_ONE);
    dq(GGUF_TYPE_Q3_K, b, y, 256);
    for (int e = 0; e < 256; e++)
        ck_assert_float_eq(y[e], (e / 32) % 2 ? -4.0f : 0.0f);
    /* scale 5 for sub-block 1 only (elements 16..31, plane 0): low nibble of
     * byte 1 = 5, high bits 0 -> 5 - 32 = -27; qs plane 0 = 3, hmask bits all
     * set (no -4): x = -27 * 3. Other sub-blocks: scale 0 - 32. */
    memset(b, 0xFF, 32);
    memset(b + 32, 0x03, 64);
    memset(b + 96, 0, 12);
    b[96 + 1] = 5;
    dq(GGUF_TYPE_Q3_K, b, y, 256);
    ck_assert_float_eq(y[16], -27.0f * 3.0f);
    ck_assert_float_eq(y[0], -32.0f * 3.0f);
    ck_assert_float_eq(y[32], -32.0f * 0.0f);
}
END_TEST

/* Q4_K: d = 1, dmin = 1. Scales: sub-block k scale k+1, min k (6 bits):
 *   bytes 0..3 = scale 1..4, bytes 4..7 = min 0..3, bytes 8..11 low nibble
 *   scale 5..8 (8 = 0b1000, fits), high nibble min 4..7; no high bits.
 * qs = 0x21: low nibble 1 (sub-blocks 2c), high 2 (2c+1):
 *   x = (k+1) * q - k,  q = 1 for even k, 2 for odd k. */
START_TEST(ka_q4_k_q5_k)
{
    uint8_t b[176];
    float y[256];
    put16(b, F16_ONE);
    put16(b + 2, F16_ONE);
    for (int k = 0; k < 4; k++) {
        b[4 + k] = (uint8_t)(k + 1);
        b[8 + k] = (uint8_t)k;
        b[12 + k] = (uint8_t)((k + 5) | (k + 4) << 4);
    }
    memset(b + 16, 0x21, 128);
    dq(GGUF_TYPE_Q4_K, b, y, 256);
    for (int e = 0; e < 256; e++) {
        const int k = e / 32, q = k % 2 ? 2 : 1;
        ck_assert_float_eq(y[e], (float)(k + 1) * (float)q - (float)k);
    }
    /* 6-bit scale 63 and min 63 for sub-block 4: bytes 8 (low nibble scale
     * 15, high nibble min 15), byte 0 top bits = scale high 3, byte 4 top
     * bits = min high 3. Other sub-blocks keep their low bits. */
    b[4 + 8] = 0xFF;
    b[4 + 0] |= 0xC0;
    b[4 + 4] |= 0xC0;
    dq(GGUF_TYPE_Q4_K, b, y, 256);
    ck_assert_float_eq(y[128], 63.0f * 1.0f - 63.0f);
    ck_assert_float_eq(y[0], 1.0f * 1.0f - 0.0f); /* sub-block 0 unchanged */

    /* Q5_K: same header, qh bit k of every byte set for odd k: q += 16 */
    uint8_t c[176];
    put16(c, F16_ONE);
    put16(c + 2, F16_ONE);
    for (int k = 0; k < 4; k++) {
        c[4 + k] = (uint8_t)(k + 1);
        c[8 + k] = (uint8_t)k;
        c[12 + k] = (uint8_t)((k + 5) | (k + 4) << 4);
    }
    memset(c + 16, 0xAA, 32);
    memset(c + 48, 0x21, 128);
    dq(GGUF_TYPE_Q5_K, c, y, 256);
    for (int e = 0; e < 256; e++) {
        const int k = e / 32, q = k % 2 ? 2 + 16 : 1;
        ck_assert_float_eq(y[e], (float)(k + 1) * (float)q - (float)k);
    }
}
END_TEST

/* Q6_K: d = 0.5, scales[k] = k - 8. ql = 0x00, qh = 0xFF: every q = 48 - 32 = 16.
 * x = (0.5 * (e/16 - 8)) * 16. Then ql = 0x0F everywhere, qh = 0: low-nibble
 * elements (c = 0, 1) q = 15 - 32 = -17, high-nibble elements (c = 2, 3) -32. */
START_TEST(ka_q6_k)
{
    uint8_t b[210];
    float y[256];
    memset(b, 0, 128);
    memset(b + 128, 0xFF, 64);
    for (int k = 0; k < 16; k++)
        b[192 + k] = (uint8_t)(int8_t)(k - 8);
    put16(b + 208, F16_HALF);
    dq(GGUF_TYPE_Q6_K, b, y, 256);
    for (int e = 0; e < 256; e++)
        ck_assert_float_eq(y[e], 0.5f * (float)(e / 16 - 8) * 16.0f);
    memset(b, 0x0F, 128);
    memset(b + 128, 0, 64);
    dq(GGUF_TYPE_Q6_K, b, y, 256);
    for (int e = 0; e < 256; e++) {
        const int c = (e / 32) % 4;
        ck_assert_float_eq(y[e], 0.5f * (float)(e / 16 - 8) * (c < 2 ? -17.0f : -32.0f));
    }
}
END_TEST

/* TQ2_0: qs 0x24 = 00 10 01 00: planes 0..3 hold 0, 1, 2, 0 -> -1, 0, 1, -1.
 * TQ1_0: byte 0 is all-zero digits (-1), byte 255... the fixed-point digit of
 * 243 * 256 / 243: a byte b encodes digits by ceil(v * 256 / 243); v = 0 -> b = 0
 * (digits 0 -> -1); v = 242 (all digits 2) -> b = 255 (all +1). */
START_TEST(ka_ternary)
{
    uint8_t b[66];
    float y[256];
    memset(b, 0x24, 64);
    put16(b + 64, F16_TWO);
    dq(GGUF_TYPE_TQ2_0, b, y, 256);
    static const float plane[4] = {-2.0f, 0.0f, 2.0f, -2.0f};
    for (int e = 0; e < 256; e++)
        ck_assert_float_eq(y[e], plane[(e / 32) % 4]);

    uint8_t t[54];
    memset(t, 0, 48);
    memset(t + 48, 255, 4);
    put16(t + 52, F16_ONE);
    dq(GGUF_TYPE_TQ1_0, t, y, 256);
    for (int e = 0; e < 240; e++)
        ck_assert_float_eq(y[e], -1.0f);
    for (int e = 240; e < 256; e++)
        ck_assert_float_eq(y[e], 1.0f);
    /* one digit pattern by hand: v = 1*81 + 0*27 + 2*9 + 1*3 + 0 = 102 means
     * digits (most significant first) 1 0 2 1 0; b = ceil(102*256/243) = 108 */
    t[0] = 108;
    dq(GGUF_TYPE_TQ1_0, t, y, 256);
    ck_assert_float_eq(y[0], 0.0f);   /* digit 1 -> 0 */
    ck_assert_float_eq(y[32], -1.0f); /* digit 0 */
    ck_assert_float_eq(y[64], 1.0f);  /* digit 2 */
    ck_assert_float_eq(y[96], 0.0f);
    ck_assert_float_eq(y[128], -1.0f);
}
END_TEST

/* MXFP4: e = 127 -> scale 1 (halved table doubled). Nibbles 0..15 map to
 * 0, .5, 1, 1.5, 2, 3, 4, 6, -0, -.5, ... -6. NVFP4 with scale bytes 0x38 (1),
 * 0x40 (2), 0x30 (0.5), 0x7F (0) per sub-block. */
START_TEST(ka_fp4)
{
    static const float e2m1[16] = {0, .5f, 1, 1.5f, 2, 3, 4, 6, 0.0f, -.5f, -1, -1.5f, -2, -3, -4, -6};
    uint8_t b[36];
    float y[64];
    b[0] = 127;
    for (int j = 0; j < 16; j++)
        b[1 + j] = (uint8_t)(j | (15 - j) << 4);
    dq(GGUF_TYPE_MXFP4, b, y, 32);
    for (int j = 0; j < 16; j++) {
        ck_assert_float_eq(y[j], e2m1[j]);
        ck_assert_float_eq(y[j + 16], e2m1[15 - j]);
    }
    b[0] = 130; /* 2^3 */
    dq(GGUF_TYPE_MXFP4, b, y, 32);
    ck_assert_float_eq(y[7], 48.0f);

    const uint8_t sc[4] = {0x38, 0x40, 0x30, 0x7F};
    memcpy(b, sc, 4);
    for (int j = 0; j < 32; j++)
        b[4 + j] = (uint8_t)((j % 16) | (15 - j % 16) << 4);
    dq(GGUF_TYPE_NVFP4, b, y, 64);
    static const float scale[4] = {1.0f, 2.0f, 0.5f, 0.0f};
    for (int s = 0; s < 4; s++)
        for (int j = 0; j < 8; j++) {
            const int q = (8 * s + j) % 16;
            ck_assert_float_eq(y[16 * s + j], e2m1[q] * scale[s]);
            ck_assert_float_eq(y[16 * s + 8 + j], e2m1[15 - q] * scale[s]);
        }
}
END_TEST

/* The NVFP4 bit-7 decision (docs/dequant.md): a scale byte with bit 7 set
 * gives the same block as without it (0xFF excepted), never a negative one. */
START_TEST(nvfp4_scale_bit7)
{
    uint8_t a[36], b[36];
    float ya[64], yb[64];
    uint64_t st = 7;
    hd_fill(&st, a, sizeof a);
    for (int x = 0; x < 127; x++) {
        memcpy(b, a, sizeof a);
        for (int s = 0; s < 4; s++) {
            a[s] = (uint8_t)x;
            b[s] = (uint8_t)(x | 0x80);
        }
        dq(GGUF_TYPE_NVFP4, a, ya, 64);
        dq(GGUF_TYPE_NVFP4, b, yb, 64);
        ck_assert_int_lt(hd_first_bit_diff(ya, yb, 64), 0);
    }
    memset(b, 0xFF, 4);
    memset(b + 4, 0x77, 32); /* nibble 7 = 6.0 */
    dq(GGUF_TYPE_NVFP4, b, yb, 64);
    ck_assert_float_eq(yb[0], 6.0f * 480.0f);
}
END_TEST

/* IQ4_NL / IQ4_XS use ggml's non-linear table {-127, -104, ..., 113}. */
START_TEST(ka_iq4)
{
    uint8_t b[136];
    float y[256];
    put16(b, F16_ONE);
    for (int j = 0; j < 16; j++)
        b[2 + j] = (uint8_t)(j | (15 - j) << 4);
    dq(GGUF_TYPE_IQ4_NL, b, y, 32);
    ck_assert_float_eq(y[0], -127.0f);
    ck_assert_float_eq(y[15], 113.0f);
    ck_assert_float_eq(y[16], 113.0f);
    ck_assert_float_eq(y[8], 1.0f);
    /* IQ4_XS: d = 1, sub-block ib scale = 33 + ib - 32 = ib + 1:
     * low nibbles (ib+1)&15 in scales_l, high bits 2 (= 32) in scales_h. */
    put16(b, F16_ONE);
    put16(b + 2, 0xAAAA);
    for (int k = 0; k < 4; k++)
        b[4 + k] = (uint8_t)((2 * k + 1) | (2 * k + 2) << 4);
    memset(b + 8, 0x88, 128); /* nibble 8 -> value 1 */
    dq(GGUF_TYPE_IQ4_XS, b, y, 256);
    for (int e = 0; e < 256; e++)
        ck_assert_float_eq(y[e], (float)(e / 32 + 1));
}
END_TEST

/* IQ2_XXS: grid 0 is eight 8s; scale nibble 1 -> db = d * 1.5 * 0.25.
 * Sign index 1 = ksigns[1] = 0x81: elements 0 and 7 negative. */
START_TEST(ka_iq_grids)
{
    uint8_t b[110];
    float y[256];
    memset(b, 0, sizeof b);
    put16(b, F16_ONE);
    for (int ib = 0; ib < 8; ib++) {
        const uint32_t aux = (1u << 28) | 1u; /* scale 1, group 0 sign index 1 */
        for (int k = 0; k < 4; k++)
            b[2 + 8 * ib + 4 + k] = (uint8_t)(aux >> (8 * k));
    }
    dq(GGUF_TYPE_IQ2_XXS, b, y, 256);
    const float db = 1.0f * 1.5f * 0.25f;
    ck_assert_float_eq(y[0], -db * 8.0f);
    ck_assert_float_eq(y[1], db * 8.0f);
    ck_assert_float_eq(y[7], -db * 8.0f);
    ck_assert_float_eq(y[8], db * 8.0f);

    /* IQ1_S: d = 1, qh = 0 (scale 0 -> dl = 1, delta +1/8), index 0 (all -1):
     * x = -1 + 0.125 = -0.875 */
    memset(b, 0, sizeof b);
    put16(b, F16_ONE);
    dq(GGUF_TYPE_IQ1_S, b, y, 256);
    for (int e = 0; e < 256; e++)
        ck_assert_float_eq(y[e], -0.875f);
    ck_assert_int_eq(gguf_iq1s_grid[0][0], -1);

    /* IQ1_M: d = 2 (0x4000) spread over nibbles: scales u16 k top nibble =
     * nibble k of 0x4000 -> only sc[3] top nibble = 4. Scale fields 0 ->
     * dl = 2; qh nibble 8 -> delta -1/8; index 0 -> x = 2 * (-1 - 0.125). */
    memset(b, 0, 56);
    memset(b + 32, 0x88, 16);
    put16(b + 48 + 6, 0x4000);
    dq(GGUF_TYPE_IQ1_M, b, y, 256);
    for (int e = 0; e < 256; e++)
        ck_assert_float_eq(y[e], 2.0f * (-1.0f - 0.125f));

    /* IQ3_S: d = 1, scale nibble 0 -> db = 1; grid 0 = {1,1,1,1} */
    memset(b, 0, 110);
    put16(b, F16_ONE);
    dq(GGUF_TYPE_IQ3_S, b, y, 256);
    for (int e = 0; e < 256; e++)
        ck_assert_float_eq(y[e], 1.0f);
}
END_TEST

/* Q1_0: d = 0.5, bits alternate 1 0 1 0 ... (0x55): +d, -d, ... */
START_TEST(ka_q1_0)
{
    uint8_t b[18];
    float y[128];
    put16(b, F16_HALF);
    memset(b + 2, 0x55, 16);
    dq(GGUF_TYPE_Q1_0, b, y, 128);
    for (int j = 0; j < 128; j++)
        ck_assert_float_eq(y[j], j % 2 ? -0.5f : 0.5f);
}
END_TEST

/* ====================================================================
 * Fast paths == reference, on random blocks and special scales
 * ==================================================================== */

static void compare_paths(uint32_t type, const uint8_t *src, int64_t n)
{
    float *ref = malloc(sizeof(float) * (size_t)n), *got = malloc(sizeof(float) * (size_t)n);
    ck_assert_int_eq(gguf_dequant_scalar_row(type, src, ref, n, NULL), 0);
    for (int p = GGUF_DEQUANT_AUTO; p < GGUF_DEQUANT_PATH_COUNT; p++) {
        if (!gguf_dequant_path_available(p))
            continue;
        memset(got, 0x5A, sizeof(float) * (size_t)n);
        ck_assert_int_eq(gguf_dequant_row_path(p, type, src, got, n, NULL), 0);
        const int64_t at = hd_first_bit_diff(ref, got, n);
        ck_assert_msg(at < 0, "%s path %s: element %lld %08x != %08x", gguf_type_name(type),
                      gguf_dequant_path_name(p), (long long)at, at < 0 ? 0 : bits(ref[at]),
                      at < 0 ? 0 : bits(got[at]));
    }
    free(ref);
    free(got);
}

START_TEST(paths_random)
{
    const uint32_t type = (uint32_t)_i;
    const gguf_type_info *ti = gguf_type_get(type);
    if (!ti || !ti->valid)
        return;
    const int64_t nblocks = ti->block_size == 1 ? 1031 : 257; /* odd: AVX2 tails */
    const int64_t n = nblocks * ti->block_size;
    const size_t bytes = (size_t)nblocks * ti->type_size;
    uint8_t *src = malloc(bytes + 1);
    uint64_t st = 1000 + type;
    hd_fill(&st, src, bytes + 1);
    compare_paths(type, src, n);
    compare_paths(type, src + 1, n); /* misaligned source */
    free(src);
}
END_TEST

START_TEST(paths_special_scales)
{
    const uint32_t type = (uint32_t)_i;
    const gguf_type_info *ti = gguf_type_get(type);
    size_t off[2];
    const int n_off = ti && ti->valid ? hd_f16_scale_offsets(type, off) : 0;
    if (n_off == 0)
        return;
    /* NaN (quiet, signalling, negative), +-Inf, subnormals, zeros, max */
    static const uint16_t specials[] = {0x7E00, 0x7C01, 0xFE55, 0x7C00, 0xFC00, 0x0001,
                                        0x83FF, 0x0000, 0x8000, 0x7BFF, 0x0400};
    const int ns = (int)(sizeof specials / sizeof specials[0]);
    const int64_t nblocks = ns * ns;
    uint8_t *src = malloc((size_t)nblocks * ti->type_size);
    uint64_t st = 77 + type;
    hd_fill(&st, src, (size_t)nblocks * ti->type_size);
    for (int a = 0; a < ns; a++)
        for (int b = 0; b < ns; b++) {
            uint8_t *blk = src + (size_t)(a * ns + b) * ti->type_size;
            put16(blk + off[0], specials[a]);
            if (n_off > 1)
                put16(blk + off[1], specials[b]);
        }
    compare_paths(type, src, nblocks * ti->block_size);
    /* the special scale shows in the output as IEEE says: NaN scale -> NaN */
    float *y = malloc(sizeof(float) * (size_t)(nblocks * ti->block_size));
    ck_assert_int_eq(gguf_dequant_row(type, src, y, nblocks * ti->block_size, NULL), 0);
    ck_assert(isnan(y[0]));
    free(y);
    free(src);
}
END_TEST

/* Every half through the F16 kernels: the AVX2 path converts block scales
 * with F16C, which must equal gguf_fp16_to_fp32 for all 65536 bit patterns
 * (NaN payloads, signalling NaNs, subnormals). */
START_TEST(paths_f16_all)
{
    uint8_t *src = malloc(2 * 65536);
    for (int h = 0; h < 65536; h++)
        put16(src + 2 * h, (uint16_t)h);
    compare_paths(GGUF_TYPE_F16, src, 65536);
    free(src);
}
END_TEST

/* NVFP4 / MXFP4 scale bytes, all 256 values each */
START_TEST(paths_fp4_all_scales)
{
    uint8_t src[256 * 36];
    uint64_t st = 5;
    hd_fill(&st, src, sizeof src);
    for (int x = 0; x < 256; x++) {
        memset(src + 36 * x, x, 4);
        src[17 * x] = (uint8_t)x; /* MXFP4 view of the same buffer: e of block x */
    }
    compare_paths(GGUF_TYPE_NVFP4, src, 256 * 64);
    compare_paths(GGUF_TYPE_MXFP4, src, 256 * 32);
}
END_TEST

/* Two NaN operands (Q4_1's d and m, Q4_K's d and dmin): the result is the
 * first NaN in formula order, made quiet, on every path and with any
 * compiler (found by fuzz_dequant under clang, which commuted the add). */
START_TEST(two_nan_operands)
{
    uint8_t b[144];
    float y[256];
    memset(b, 0x33, sizeof b);
    put16(b, 0x7C01);     /* d: signalling NaN, payload 1 */
    put16(b + 2, 0xFE02); /* m: negative quiet NaN, payload 2 */
    dq(GGUF_TYPE_Q4_1, b, y, 32);
    for (int j = 0; j < 32; j++)
        ck_assert_uint_eq(bits(y[j]), 0x7FC02000u); /* d's NaN, quiet */
    put16(b, 0x3C00);     /* d = 1: now m's NaN comes out */
    dq(GGUF_TYPE_Q4_1, b, y, 32);
    ck_assert_uint_eq(bits(y[0]), 0xFFC04000u);
    memset(b, 0x21, sizeof b);
    put16(b, 0xFC05);     /* Q4_K d: negative signalling NaN */
    put16(b + 2, 0x7E07); /* dmin: quiet NaN */
    dq(GGUF_TYPE_Q4_K, b, y, 256);
    for (int e = 0; e < 256; e++)
        ck_assert_uint_eq(bits(y[e]), 0xFFC0A000u);
    put16(b, 0x3C00);
    dq(GGUF_TYPE_Q4_K, b, y, 256);
    ck_assert_uint_eq(bits(y[0]), 0x7FC0E000u); /* dmin's NaN */
}
END_TEST

/* ====================================================================
 * Threads, pools, slices
 * ==================================================================== */

START_TEST(rows_threads)
{
    const uint32_t types[] = {GGUF_TYPE_Q4_K, GGUF_TYPE_F16, GGUF_TYPE_IQ2_XS, GGUF_TYPE_Q8_0};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const uint32_t type = types[t];
        const gguf_type_info *ti = gguf_type_get(type);
        const int64_t ne0 = 2 * 256, n_rows = 37;
        uint64_t rb;
        ck_assert_int_eq(gguf_type_row_bytes(type, ne0, &rb), 0);
        uint8_t *src = malloc(rb * n_rows);
        uint64_t st = 3;
        hd_fill(&st, src, rb * n_rows);
        float *ref = malloc(sizeof(float) * ne0 * n_rows), *got = malloc(sizeof(float) * ne0 * n_rows);
        for (int64_t r = 0; r < n_rows; r++)
            ck_assert_int_eq(gguf_dequant_scalar_row(type, src + r * rb, ref + r * ne0, ne0, NULL), 0);
        const int counts[] = {0, 1, 2, 3, 8, 100};
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
            gguf_dequant_opts o = {.path = GGUF_DEQUANT_AUTO, .n_threads = counts[c]};
            memset(got, 0, sizeof(float) * ne0 * n_rows);
            ck_assert_int_eq(gguf_dequant_rows(type, src, 0, got, ne0, n_rows, &o, NULL), 0);
            ck_assert_int_lt(hd_first_bit_diff(ref, got, ne0 * n_rows), 0);
        }
        gguf_dequant_pool *pool;
        ck_assert_int_eq(gguf_dequant_pool_create(&pool, 4, NULL), 0);
        ck_assert_int_eq(gguf_dequant_pool_size(pool), 4);
        for (int rep = 0; rep < 20; rep++) { /* reuse: generations must not mix */
            gguf_dequant_opts o = {.pool = pool};
            memset(got, 0, sizeof(float) * ne0 * n_rows);
            const int64_t rows = rep % 2 ? n_rows : 3; /* fewer rows than workers too */
            ck_assert_int_eq(gguf_dequant_rows(type, src, rb, got, ne0, rows, &o, NULL), 0);
            ck_assert_int_lt(hd_first_bit_diff(ref, got, ne0 * rows), 0);
        }
        gguf_dequant_pool_free(pool);
        /* stride larger than a row: every other row */
        gguf_dequant_opts o2 = {.n_threads = 2, .path = GGUF_DEQUANT_SCALAR};
        ck_assert_int_eq(gguf_dequant_rows(type, src, 2 * rb, got, ne0, n_rows / 2, &o2, NULL), 0);
        for (int64_t r = 0; r < n_rows / 2; r++)
            ck_assert_int_lt(hd_first_bit_diff(ref + 2 * r * ne0, got + r * ne0, ne0), 0);
        (void)ti;
        free(src);
        free(ref);
        free(got);
    }
    gguf_dequant_pool_free(NULL);
    ck_assert_int_eq(gguf_dequant_pool_size(NULL), 0);
}
END_TEST

START_TEST(slices)
{
    const uint32_t types[] = {GGUF_TYPE_Q6_K, GGUF_TYPE_BF16, GGUF_TYPE_Q4_0, GGUF_TYPE_NVFP4};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const uint32_t type = types[t];
        const int64_t bs = gguf_type_get(type)->block_size;
        const int64_t ne0 = 4 * 256, n_rows = 9;
        uint64_t rb;
        ck_assert_int_eq(gguf_type_row_bytes(type, ne0, &rb), 0);
        uint8_t *src = malloc(rb * n_rows);
        uint64_t st = 11;
        hd_fill(&st, src, rb * n_rows);
        float *full = malloc(sizeof(float) * ne0 * n_rows), *part = malloc(sizeof(float) * ne0 * n_rows);
        ck_assert_int_eq(gguf_dequant_rows(type, src, 0, full, ne0, n_rows, NULL, NULL), 0);
        const int64_t cases[][4] = {{0, 9, 0, ne0}, {2, 3, bs, 2 * bs}, {8, 1, ne0 - bs, bs},
                                    {0, 9, 256, 512}, {4, 0, 0, bs}, {3, 2, 0, 0}};
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            const int64_t r0 = cases[c][0], nr = cases[c][1], c0 = cases[c][2], nc = cases[c][3];
            gguf_dequant_opts o = {.n_threads = 2};
            ck_assert_int_eq(gguf_dequant_slice(type, src, ne0, n_rows, r0, nr, c0, nc, part, &o, NULL), 0);
            for (int64_t r = 0; r < nr; r++)
                ck_assert_int_lt(hd_first_bit_diff(full + (r0 + r) * ne0 + c0, part + r * nc, nc), 0);
        }
        free(src);
        free(full);
        free(part);
    }
}
END_TEST

/* A slice reads only its blocks: the rest of the buffer may be anything,
 * here a tensor "backed" by an allocation that ends right after the slice. */
START_TEST(slice_touches_only_its_blocks)
{
    const int64_t ne0 = 1024, n_rows = 4; /* Q8_0: 32 blocks of 34 bytes a row */
    const uint64_t rb = 32 * 34;
    /* rows 1..2, columns [64, 96): bytes from 1*rb + 2*34 to 2*rb + 3*34 */
    const uint64_t first = rb + 2 * 34, last = 2 * rb + 3 * 34;
    uint8_t *mem = malloc(last - first);
    uint64_t st = 2;
    hd_fill(&st, mem, last - first);
    const uint8_t *fake_base = mem - first; /* never dereferenced outside [first, last) */
    float out[2 * 32];
    ck_assert_int_eq(gguf_dequant_slice(GGUF_TYPE_Q8_0, fake_base, ne0, n_rows, 1, 2, 64, 32, out,
                                        NULL, NULL),
                     0);
    float ref[32];
    ck_assert_int_eq(gguf_dequant_scalar_row(GGUF_TYPE_Q8_0, mem, ref, 32, NULL), 0);
    ck_assert_int_lt(hd_first_bit_diff(ref, out, 32), 0);
    free(mem);
}
END_TEST

/* ====================================================================
 * Errors: one test per code the module returns
 * ==================================================================== */

START_TEST(err_bad_type)
{
    gguf_error err;
    float y[32];
    uint8_t b[64] = {0};
    ck_assert_int_eq(gguf_dequant_row(99, b, y, 32, &err), GGUF_E_BAD_TYPE);
    ck_assert_int_eq(err.code, GGUF_E_BAD_TYPE);
    ck_assert_ptr_nonnull(strstr(err.message, "99"));
    ck_assert_int_eq(gguf_dequant_row(4, b, y, 32, &err), GGUF_E_BAD_TYPE); /* Q4_2: removed */
    ck_assert_ptr_nonnull(strstr(err.message, "Q4_2"));
    ck_assert_int_eq(gguf_dequant_row(GGUF_TYPE_COUNT, b, y, 32, NULL), GGUF_E_BAD_TYPE);
    ck_assert_int_eq(gguf_dequant_rows(36, b, 0, y, 32, 1, NULL, &err), GGUF_E_BAD_TYPE);
    ck_assert_int_eq(gguf_dequant_slice(31, b, 32, 1, 0, 1, 0, 32, y, NULL, &err), GGUF_E_BAD_TYPE);
    ck_assert(!gguf_dequant_supported(4));
    ck_assert(!gguf_dequant_supported(1000));
    for (uint32_t t = 0; t < GGUF_TYPE_COUNT; t++)
        if (gguf_type_is_valid(t))
            ck_assert_msg(gguf_dequant_supported(t), "%s", gguf_type_name(t));
}
END_TEST

START_TEST(err_bad_shape)
{
    gguf_error err;
    float y[64];
    uint8_t b[64] = {0};
    ck_assert_int_eq(gguf_dequant_row(GGUF_TYPE_Q4_0, b, y, 33, &err), GGUF_E_BAD_SHAPE);
    ck_assert_ptr_nonnull(strstr(err.message, "Q4_0"));
    ck_assert_int_eq(gguf_dequant_row(GGUF_TYPE_F32, b, y, -1, &err), GGUF_E_BAD_SHAPE);
    ck_assert_int_eq(gguf_dequant_rows(GGUF_TYPE_Q4_K, b, 0, y, 128, 1, NULL, &err), GGUF_E_BAD_SHAPE);
    /* slice columns off block boundaries */
    ck_assert_int_eq(gguf_dequant_slice(GGUF_TYPE_Q8_0, b, 64, 1, 0, 1, 16, 32, y, NULL, &err),
                     GGUF_E_BAD_SHAPE);
    ck_assert_int_eq(gguf_dequant_slice(GGUF_TYPE_Q8_0, b, 64, 1, 0, 1, 0, 48, y, NULL, &err),
                     GGUF_E_BAD_SHAPE);
    /* zero elements is fine */
    ck_assert_int_eq(gguf_dequant_row(GGUF_TYPE_Q4_0, NULL, NULL, 0, &err), 0);
}
END_TEST

START_TEST(err_invalid)
{
    gguf_error err;
    float y[32];
    uint8_t b[64] = {0};
    ck_assert_int_eq(gguf_dequant_row(GGUF_TYPE_Q8_0, NULL, y, 32, &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_dequant_row(GGUF_TYPE_Q8_0, b, NULL, 32, &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_dequant_row_path(-1, GGUF_TYPE_Q8_0, b, y, 32, &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_dequant_row_path(GGUF_DEQUANT_PATH_COUNT, GGUF_TYPE_Q8_0, b, y, 32, &err),
                     GGUF_E_INVALID);
    ck_assert_int_eq(gguf_dequant_rows(GGUF_TYPE_Q8_0, b, 0, y, 32, -1, NULL, &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_dequant_rows(GGUF_TYPE_Q8_0, b, 10, y, 32, 1, NULL, &err), GGUF_E_INVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "stride"));
    /* rectangles outside the tensor */
    ck_assert_int_eq(gguf_dequant_slice(GGUF_TYPE_Q8_0, b, 32, 1, 1, 1, 0, 32, y, NULL, &err),
                     GGUF_E_INVALID);
    ck_assert_int_eq(gguf_dequant_slice(GGUF_TYPE_Q8_0, b, 32, 1, 0, 1, 32, 32, y, NULL, &err),
                     GGUF_E_INVALID);
    ck_assert_int_eq(gguf_dequant_slice(GGUF_TYPE_Q8_0, b, 32, 1, -1, 1, 0, 32, y, NULL, &err),
                     GGUF_E_INVALID);
    gguf_dequant_pool *pool = (gguf_dequant_pool *)b;
    ck_assert_int_eq(gguf_dequant_pool_create(&pool, -1, &err), GGUF_E_INVALID);
    ck_assert_ptr_null(pool);
    ck_assert_int_eq(gguf_dequant_pool_create(&pool, 1025, &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_dequant_pool_create(NULL, 1, &err), GGUF_E_INVALID);
    ck_assert_str_eq(gguf_dequant_path_name(GGUF_DEQUANT_AVX2), "avx2");
    ck_assert_str_eq(gguf_dequant_path_name(42), "unknown");
    ck_assert(!gguf_dequant_path_available(42));
}
END_TEST

START_TEST(err_overflow)
{
    gguf_error err;
    float y[32];
    uint8_t b[64] = {0};
    ck_assert_int_eq(gguf_dequant_rows(GGUF_TYPE_Q8_0, b, 0, y, INT64_C(1) << 40, INT64_C(1) << 40,
                                       NULL, &err),
                     GGUF_E_OVERFLOW);
    ck_assert_int_eq(gguf_dequant_slice(GGUF_TYPE_F32, b, INT64_C(1) << 40, INT64_C(1) << 40, 0, 1,
                                        0, 1, y, NULL, &err),
                     GGUF_E_OVERFLOW);
}
END_TEST

START_TEST(err_unsupported_path)
{
    /* AVX2 is refused exactly when the CPU lacks it, and AUTO always works */
    gguf_error err;
    float y[32];
    uint8_t b[34] = {0};
    const int rc = gguf_dequant_row_path(GGUF_DEQUANT_AVX2, GGUF_TYPE_Q8_0, b, y, 32, &err);
    ck_assert_int_eq(rc, gguf_dequant_path_available(GGUF_DEQUANT_AVX2) ? 0 : GGUF_E_UNSUPPORTED);
    ck_assert_int_eq(gguf_dequant_row_path(GGUF_DEQUANT_AUTO, GGUF_TYPE_Q8_0, b, y, 32, &err), 0);
    ck_assert(gguf_dequant_best_path() == GGUF_DEQUANT_AVX2 ||
              gguf_dequant_best_path() == GGUF_DEQUANT_PORTABLE);
}
END_TEST

/* The scale layouts gguf-dequant-verify's scan relies on, one per kind of
 * field: an f16 d (and dmin), Q8_K's f32 d, IQ1_M's nibbles, E8M0, UE4M3. */
START_TEST(block_scale_flags)
{
    uint8_t b[512] = {0};
    ck_assert_uint_eq(gguf_block_scale_flags(GGUF_TYPE_Q8_0, b), GGUF_SCALE_ZERO);
    b[0] = 0x00, b[1] = 0x3C; /* d = 1.0 */
    ck_assert_uint_eq(gguf_block_scale_flags(GGUF_TYPE_Q8_0, b), 0);
    b[0] = 0x01, b[1] = 0x00; /* d subnormal */
    ck_assert_uint_eq(gguf_block_scale_flags(GGUF_TYPE_Q8_0, b), GGUF_SCALE_SUBNORMAL);
    b[0] = 0x00, b[1] = 0x7C; /* d = Inf */
    ck_assert_uint_eq(gguf_block_scale_flags(GGUF_TYPE_Q4_1, b), GGUF_SCALE_INF);

    /* Q4_K: a zero dmin is normal, a NaN dmin is not */
    memset(b, 0, sizeof b);
    const size_t d = offsetof(gguf_block_q4_k, d), dm = offsetof(gguf_block_q4_k, dmin);
    b[d + 1] = 0x3C;
    ck_assert_uint_eq(gguf_block_scale_flags(GGUF_TYPE_Q4_K, b), 0);
    b[dm] = 0x01, b[dm + 1] = 0x7C;
    ck_assert_uint_eq(gguf_block_scale_flags(GGUF_TYPE_Q4_K, b), GGUF_SCALE_NAN);

    /* Q8_K: f32 d */
    memset(b, 0, sizeof b);
    ck_assert_uint_eq(gguf_block_scale_flags(GGUF_TYPE_Q8_K, b), GGUF_SCALE_ZERO);
    const float one = 1.0f;
    memcpy(b + offsetof(gguf_block_q8_k, d), &one, 4);
    ck_assert_uint_eq(gguf_block_scale_flags(GGUF_TYPE_Q8_K, b), 0);

    /* IQ1_M: d = 0x3C00 spread over the top nibbles of the four uint16 */
    memset(b, 0, sizeof b);
    uint8_t *sc = b + offsetof(gguf_block_iq1_m, scales);
    ck_assert_uint_eq(gguf_block_scale_flags(GGUF_TYPE_IQ1_M, b), GGUF_SCALE_ZERO);
    sc[5] = 0xC0; /* nibble 2 (bits 8-11 of d) = 0xC */
    sc[7] = 0x30; /* nibble 3 = 0x3 */
    ck_assert_uint_eq(gguf_block_scale_flags(GGUF_TYPE_IQ1_M, b), 0);
    sc[7] = 0x70; /* d = 0x7C00: Inf */
    ck_assert_uint_eq(gguf_block_scale_flags(GGUF_TYPE_IQ1_M, b), GGUF_SCALE_INF);
    sc[1] = 0x10; /* and a mantissa bit (nibble 0 of d): NaN */
    ck_assert_uint_eq(gguf_block_scale_flags(GGUF_TYPE_IQ1_M, b), GGUF_SCALE_NAN);

    /* MXFP4's exponent byte, NVFP4's four UE4M3 scales */
    memset(b, 0, sizeof b);
    b[offsetof(gguf_block_mxfp4, e)] = 0xFF;
    ck_assert_uint_eq(gguf_block_scale_flags(GGUF_TYPE_MXFP4, b), GGUF_SCALE_NAN);
    b[offsetof(gguf_block_mxfp4, e)] = 127;
    ck_assert_uint_eq(gguf_block_scale_flags(GGUF_TYPE_MXFP4, b), 0);
    memset(b, 0, sizeof b);
    uint8_t *ns = b + offsetof(gguf_block_nvfp4, d);
    ns[0] = 0x38, ns[1] = 0x80 | 0x38, ns[2] = 0x7F, ns[3] = 3;
    ck_assert_uint_eq(gguf_block_scale_flags(GGUF_TYPE_NVFP4, b),
                      GGUF_SCALE_BAD_ENCODING | GGUF_SCALE_NAN | GGUF_SCALE_SUBNORMAL);

    /* no block scales, unknown ids */
    ck_assert_uint_eq(gguf_block_scale_flags(GGUF_TYPE_F16, b), 0);
    ck_assert_uint_eq(gguf_block_scale_flags(9999, b), 0);
}
END_TEST

static Suite *dequant_suite(void)
{
    Suite *s = suite_create("dequant");
    TCase *tc = tcase_create("conversions");
    tcase_add_test(tc, fp16_known);
    tcase_add_test(tc, fp16_roundtrip_all);
    tcase_add_test(tc, fp16_rounding);
    tcase_add_test(tc, bf16_conversions);
    tcase_add_test(tc, ue4m3_known);
    tcase_add_test(tc, e8m0_known);
    tcase_add_test(tc, block_scale_flags);
    suite_add_tcase(s, tc);

    tc = tcase_create("known_answers");
    tcase_add_test(tc, ka_plain);
    tcase_add_test(tc, ka_q4_0_q4_1);
    tcase_add_test(tc, ka_q5);
    tcase_add_test(tc, ka_q8);
    tcase_add_test(tc, ka_q2_k);
    tcase_add_test(tc, ka_q3_k);
    tcase_add_test(tc, ka_q4_k_q5_k);
    tcase_add_test(tc, ka_q6_k);
    tcase_add_test(tc, ka_ternary);
    tcase_add_test(tc, ka_fp4);
    tcase_add_test(tc, nvfp4_scale_bit7);
    tcase_add_test(tc, ka_iq4);
    tcase_add_test(tc, ka_iq_grids);
    tcase_add_test(tc, ka_q1_0);
    suite_add_tcase(s, tc);

    tc = tcase_create("paths");
    tcase_add_loop_test(tc, paths_random, 0, GGUF_TYPE_COUNT);
    tcase_add_loop_test(tc, paths_special_scales, 0, GGUF_TYPE_COUNT);
    tcase_add_test(tc, paths_fp4_all_scales);
    tcase_add_test(tc, paths_f16_all);
    tcase_add_test(tc, two_nan_operands);
    suite_add_tcase(s, tc);

    tc = tcase_create("rows");
    tcase_add_test(tc, rows_threads);
    tcase_add_test(tc, slices);
    tcase_add_test(tc, slice_touches_only_its_blocks);
    suite_add_tcase(s, tc);

    tc = tcase_create("errors");
    tcase_add_test(tc, err_bad_type);
    tcase_add_test(tc, err_bad_shape);
    tcase_add_test(tc, err_invalid);
    tcase_add_test(tc, err_overflow);
    tcase_add_test(tc, err_unsupported_path);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(dequant_suite());
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
