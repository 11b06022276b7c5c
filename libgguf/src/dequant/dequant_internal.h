/* Internal interface between the dequant API (dequant.c) and its row kernels
 * (dequant_scalar.c, dequant_avx2.c). Not installed. */
#ifndef GGUF_DEQUANT_INTERNAL_H
#define GGUF_DEQUANT_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "gguf/dequant.h"
#include "dequant/dequant_kernel.h"

/* Reference kernel of a type, NULL when the type has none (invalid id). */
gguf_dequant_fn gguf_dequant_scalar_kernel(uint32_t type);

/* AVX2+F16C kernel of a type, NULL when the type has no specialised kernel
 * (the caller then uses the reference, which is what the path means for it). */
gguf_dequant_fn gguf_dequant_avx2_kernel(uint32_t type);

/* Little-endian field readers: file bytes are never read through casts. */
static inline uint16_t gguf_rd_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t gguf_rd_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline float gguf_rd_f16(const uint8_t *p)
{
    return gguf_fp16_to_fp32(gguf_rd_u16(p));
}
/* IQ1_M's f16 super-block scale: nibble k of d is the top nibble of the k-th
 * little-endian uint16 of scales[8] (the low bits hold the sub-block scales). */
static inline uint16_t gguf_iq1m_d_bits(const uint8_t *scales)
{
    const uint16_t s0 = gguf_rd_u16(scales), s1 = gguf_rd_u16(scales + 2);
    const uint16_t s2 = gguf_rd_u16(scales + 4), s3 = gguf_rd_u16(scales + 6);
    return (uint16_t)((s0 >> 12) | ((s1 >> 8) & 0x00F0) | ((s2 >> 4) & 0x0F00) | (s3 & 0xF000));
}
static inline float gguf_bits_to_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline uint32_t gguf_f32_to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/*
 * NaN propagation made explicit. When both operands of an add or subtract
 * can be NaN (q*d + m with NaN d and m; dl*q - ml with NaN d and dmin), IEEE
 * leaves open which NaN comes out, and compilers commute such operations
 * freely (clang does, also for intrinsics), so the bits would depend on the
 * compiler. Every path therefore returns, for a NaN result: the first NaN
 * operand in formula order, made quiet (what x86 hardware does when the
 * operands are in that order); a NaN made from no NaN (Inf - Inf) stays the
 * default NaN the hardware produced.
 */
static inline float gguf_nan_first(float r, float a, float b)
{
    if (r == r)
        return r;
    if (a != a)
        return gguf_bits_to_f32(gguf_f32_to_bits(a) | 0x00400000u);
    if (b != b)
        return gguf_bits_to_f32(gguf_f32_to_bits(b) | 0x00400000u);
    return r;
}

/* MXFP4: E8M0 halved (the E2M1 table is doubled), bit-exact with ggml. */
static inline float gguf_e8m0_half(uint8_t e)
{
    return gguf_bits_to_f32(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}

/* NVFP4: UE4M3 halved, bit-exact with ggml's CPU code (see docs/dequant.md). */
static inline float gguf_ue4m3_half(uint8_t x)
{
    if (x == 0 || x == 0x7F)
        return 0.0f;
    const uint32_t e = (x >> 3) & 0xF, m = x & 7;
    if (e == 0)
        return (float)m * 0x1p-10f; /* m * 2^-9, halved: exact */
    return gguf_bits_to_f32(((e + 119u) << 23) | (m << 20)); /* (1+m/8) 2^(e-7) / 2 */
}

#endif
