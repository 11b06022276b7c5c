/*
 * GPU dequantization kernels, one decoder per ggml type, each a transcription
 * of libgguf/src/dequant_scalar.c (read them side by side; the block layouts
 * are drawn there and in gguf/blocks.h).
 *
 * Work split. Every type is cut into units of 8 consecutive output elements
 * (every block size is a multiple of 8; plain types use 8 elements as their
 * "block"). One thread decodes one unit and writes it with two 16-byte stores
 * (float32) or one (f16/bf16), so a warp writes 1 KiB (512 B) contiguously.
 * Input bytes are read straight from global memory through the read-only
 * path (__ldg) with the widest loads the block alignment allows (template A:
 * the alignment, in bytes, guaranteed for every block start); the few bytes
 * that many threads of a block share (scales) hit L1.
 *
 * Bit-exactness (see docs/cuda.md):
 *   - every product, sum and difference is rounded on its own: __fmul_rn,
 *     __fadd_rn, __fsub_rn (the compiler never fuses these into FMA) and the
 *     files are compiled with -fmad=false -ftz=false as a second guard;
 *   - operation order and operand order follow the reference exactly;
 *   - NaN results follow x86 SSE (what the CPU reference computes): a NaN
 *     operand propagates (the first one when both are NaN) with its quiet bit
 *     set; an invalid operation (0 * Inf, Inf - Inf) gives 0xFFC00000. The GPU
 *     would give 0x7FFFFFFF in both cases, so mul/add/sub below repair a NaN
 *     result from the operands;
 *   - the reference's "x * (+-1.0f)" sign multiplications compile (GCC -O2)
 *     to a sign flip, which also flips a NaN's sign: done here as a sign-bit
 *     xor (negif).
 */
#ifndef GGUFKIT_CUDA_DEQUANT_KERNELS_CUH
#define GGUFKIT_CUDA_DEQUANT_KERNELS_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "gguf/blocks.h"
#include "gguf/types.h"

#define GC_DEV static __device__ __forceinline__

/* Build-time knobs used for the measurements in docs/benchmarks.md:
 * GC_STORE_CS streaming (evict-first) stores; GC_UNROLL and GC_MIN_BLOCKS,
 * GC_PREFETCH, when defined, force one loop shape on every type (see
 * gc::tune). */
#ifndef GC_STORE_CS
#define GC_STORE_CS 0
#endif
#if defined(GC_UNROLL) && !defined(GC_MIN_BLOCKS)
#define GC_MIN_BLOCKS 5
#endif

namespace gc {

/* ---- x86 float semantics ------------------------------------------------ */

GC_DEV uint32_t fbits(float f) { return __float_as_uint(f); }
GC_DEV float ffrom(uint32_t u) { return __uint_as_float(u); }
GC_DEV bool isnan_bits(uint32_t u) { return (u & 0x7FFFFFFFu) > 0x7F800000u; }

/* The NaN an x86 SSE operation returns for operands a, b. */
GC_DEV float x86_nan(float a, float b)
{
    const uint32_t ua = fbits(a), ub = fbits(b);
    if (isnan_bits(ua))
        return ffrom(ua | 0x00400000u);
    if (isnan_bits(ub))
        return ffrom(ub | 0x00400000u);
    return ffrom(0xFFC00000u);
}
GC_DEV float mul(float a, float b)
{
    const float r = __fmul_rn(a, b);
    return isnan(r) ? x86_nan(a, b) : r;
}
GC_DEV float add(float a, float b)
{
    const float r = __fadd_rn(a, b);
    return isnan(r) ? x86_nan(a, b) : r;
}
GC_DEV float sub(float a, float b)
{
    const float r = __fsub_rn(a, b);
    return isnan(r) ? x86_nan(a, b) : r;
}
/* x with its sign bit flipped when s (0 or 1) is 1 */
GC_DEV float negif(float x, uint32_t s) { return ffrom(fbits(x) ^ (s << 31)); }

/* ---- conversions, bit for bit as libgguf's -------------------------------- */

/* gguf_fp16_to_fp32: exact; NaN keeps its payload, quiet bit set. */
GC_DEV float h2f(uint32_t h)
{
    if ((h & 0x7C00u) == 0x7C00u && (h & 0x3FFu))
        return ffrom(((h & 0x8000u) << 16) | 0x7FC00000u | ((h & 0x3FFu) << 13));
    return __half2float(__ushort_as_half((unsigned short)h));
}

/* gguf_fp32_to_fp16: round to nearest even (the hardware conversion), NaN
 * keeps its top payload bits and is made quiet. */
GC_DEV uint16_t f2h(float f)
{
    const uint32_t x = fbits(f), ax = x & 0x7FFFFFFFu;
    if (ax > 0x7F800000u)
        return (uint16_t)(((x >> 16) & 0x8000u) | 0x7E00u | ((ax >> 13) & 0x3FFu));
    return __half_as_ushort(__float2half_rn(f));
}

/* gguf_fp32_to_bf16 (ggml's rounding). */
GC_DEV uint16_t f2bf(float f)
{
    const uint32_t u = fbits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7FFFu + ((u >> 16) & 1))) >> 16);
}

/* gguf_e8m0_half: MXFP4 scale, halved. */
GC_DEV float e8m0_half(uint32_t e)
{
    return ffrom(e < 2 ? 0x00200000u << e : (e - 1) << 23);
}

/* gguf_ue4m3_half: NVFP4 scale, halved. */
GC_DEV float ue4m3_half(uint32_t x)
{
    if (x == 0 || x == 0x7F)
        return 0.0f;
    const uint32_t e = (x >> 3) & 0xF, m = x & 7;
    if (e == 0)
        return __fmul_rn((float)m, 0x1p-10f);
    return ffrom(((e + 119u) << 23) | (m << 20));
}

/* int -> float for |x| < 2^22, exactly: the integer is added to the bit
 * pattern of 1.5 * 2^23, and 1.5 * 2^23 is subtracted again. An integer add
 * and a float add at full rate, where I2F runs at a quarter of it (the
 * decoders convert one small integer per element). */
GC_DEV float i2f(int x) { return __fsub_rn(ffrom(0x4B400000u + (uint32_t)x), 12582912.0f); }

/* Each byte of w (a small unsigned value b) as the float b - bias, exactly:
 * one PRMT builds the bits of 1.5 * 2^23 + b, one FADD removes 1.5 * 2^23 +
 * bias. Decoders pack 4 quant values per word with a few word-wide bit
 * operations and then spend 2 instructions per element on the conversion. */
GC_DEV float bytef(uint32_t w, int i, float off)
{
    return __fsub_rn(ffrom(__byte_perm(w, 0x4B400000u, 0x7650u | (uint32_t)i)), off);
}
GC_DEV void expand8(uint2 q, float bias, float *f)
{
    const float off = 12582912.0f + bias;
#pragma unroll
    for (int j = 0; j < 8; j++)
        f[j] = bytef(j < 4 ? q.x : q.y, j & 3, off);
}
/* the same mask/shift on both words */
GC_DEV uint2 shr_and(uint2 q, int sh, uint32_t mask)
{
    return make_uint2((q.x >> sh) & mask, (q.y >> sh) & mask);
}
/* bits 0..3 of x to bit 0 of bytes 0..3 (no carries: the four shifted
 * copies of x never overlap) */
GC_DEV uint32_t spread4(uint32_t x) { return ((x & 15u) * 0x00204081u) & 0x01010101u; }

/* ---- loads from global memory --------------------------------------------
 * A is the alignment (bytes) the caller guarantees for p. */

__host__ __device__ constexpr int amin(int a, int b) { return a < b ? a : b; }

GC_DEV uint32_t ld8(const uint8_t *p) { return __ldg(p); }

template <int A> GC_DEV uint32_t ld16(const uint8_t *p)
{
    if constexpr (A >= 2)
        return __ldg((const unsigned short *)p);
    else
        return ld8(p) | (ld8(p + 1) << 8);
}

template <int A> GC_DEV uint32_t ld32(const uint8_t *p)
{
    if constexpr (A >= 4)
        return __ldg((const unsigned int *)p);
    else
        return ld16<A>(p) | (ld16<A>(p + 2) << 16);
}

/* 8 bytes, little-endian: .x bytes 0..3, .y bytes 4..7 */
template <int A> GC_DEV uint2 ld64(const uint8_t *p)
{
    if constexpr (A >= 8) {
        return __ldg((const uint2 *)p);
    } else if constexpr (A == 2) {
        /* 2-aligned (most block types): two aligned words and, when p is
         * not 4-aligned, the last two bytes, joined by funnel shifts: three
         * loads instead of four. The first word may start 2 bytes before p,
         * inside the same aligned word of the same allocation. */
        const uintptr_t a = (uintptr_t)p;
        const unsigned int *w = (const unsigned int *)(a & ~(uintptr_t)3);
        const uint32_t odd = (uint32_t)(a & 2);
        const uint32_t w0 = __ldg(w), w1 = __ldg(w + 1);
        const uint32_t w2 = odd ? (uint32_t)__ldg((const unsigned short *)(p + 6)) : 0u;
        const uint32_t sh = odd ? 16u : 0u;
        return make_uint2(__funnelshift_r(w0, w1, sh), __funnelshift_r(w1, w2, sh));
    } else {
        return make_uint2(ld32<A>(p), ld32<A>(p + 4));
    }
}

/* byte j (compile-time after unrolling) of an 8-byte group */
GC_DEV uint32_t byte_at(uint2 q, int j) { return ((j < 4 ? q.x : q.y) >> (8 * (j & 3))) & 0xFFu; }

/* ---- device copies of libgguf's tables (generated, see gen_cuda_iq_tables.c) */
#include "cuda_iq_tables.inc"

/* A 16-entry int8 table held in four registers, looked up with byte_perm. */
struct tab16 {
    uint32_t w[4];
};
GC_DEV tab16 load_tab16(const uint8_t *t)
{
    const uint4 v = __ldg((const uint4 *)t);
    return tab16{{v.x, v.y, v.z, v.w}};
}
/* Four lookups at once: idx holds four indices (0..15) as bytes; the
 * result holds the four int8 values, offset by 128 (as unsigned bytes). */
GC_DEV uint32_t lookup4(const tab16 &t, uint32_t idx)
{
    const uint32_t x = idx & 0x07070707u, y = x | (x >> 4);
    const uint32_t sel = (y & 0xFFu) | ((y >> 4) & 0xF00u) | ((y >> 8) & 0xF000u);
    const uint32_t lo = __byte_perm(t.w[0], t.w[1], sel), hi = __byte_perm(t.w[2], t.w[3], sel);
    const uint32_t m = ((idx >> 3) & 0x01010101u) * 0xFFu;
    return ((lo & ~m) | (hi & m)) ^ 0x80808080u;
}
GC_DEV uint2 lookup8(const tab16 &t, uint2 idx)
{
    return make_uint2(lookup4(t, idx.x), lookup4(t, idx.y));
}
GC_DEV int lookup16(const tab16 &t, uint32_t idx)
{
    const uint32_t lo = __byte_perm(t.w[0], t.w[1], idx & 7);
    const uint32_t hi = __byte_perm(t.w[2], t.w[3], idx & 7);
    return (int)(int8_t)(uint8_t)((idx & 8) ? hi : lo);
}

/* (float)double as x86 cvtsd2ss: round to nearest even; NaN keeps the top
 * 23 payload bits and is made quiet. */
GC_DEV float d2f(uint64_t u)
{
    if ((u & 0x7FFFFFFFFFFFFFFFull) > 0x7FF0000000000000ull)
        return ffrom((uint32_t)(u >> 32 & 0x80000000u) | 0x7FC00000u |
                     (uint32_t)((u >> 29) & 0x7FFFFFu));
    return __double2float_rn(__longlong_as_double((long long)u));
}

/* Arithmetic policies. Decoders run with fast_ops first: plain IEEE
 * operations, each rounded on its own, which give the reference's bits for
 * every result that is not NaN. A unit whose output holds a NaN is decoded
 * again with x86_ops, which repair NaN results as x86 makes them (and convert
 * halves/doubles with NaN payloads exactly). A NaN output needs a NaN or
 * Inf scale (or NaN values in a float tensor), so real quantized tensors
 * never take the second pass; the decoders' guards (below) let the kernel
 * test one value per unit instead of its eight outputs. */
struct fast_ops {
    GC_DEV float mul(float a, float b) { return __fmul_rn(a, b); }
    GC_DEV float add(float a, float b) { return __fadd_rn(a, b); }
    GC_DEV float sub(float a, float b) { return __fsub_rn(a, b); }
    GC_DEV float h2f(uint32_t h) { return __half2float(__ushort_as_half((unsigned short)h)); }
    GC_DEV float d2f(uint64_t u) { return __double2float_rn(__longlong_as_double((long long)u)); }
};
struct x86_ops {
    GC_DEV float mul(float a, float b) { return gc::mul(a, b); }
    GC_DEV float add(float a, float b) { return gc::add(a, b); }
    GC_DEV float sub(float a, float b) { return gc::sub(a, b); }
    GC_DEV float h2f(uint32_t h) { return gc::h2f(h); }
    GC_DEV float d2f(uint64_t u) { return gc::d2f(u); }
};

/* ======================================================================
 * Decoders. Each: QK elements per block, BYTES per block, MAXA the largest
 * alignment (<= 8) every block start can have, and
 *     unit<A>(block, k, v): elements 8k..8k+7 of the block into v,
 * returning the unit's guard where GUARDED: a float (its scale, or a sum of
 * its scales) that is finite whenever no output of the fast pass can be
 * NaN. For quantized types that holds because every output is a finite
 * scale times a small integer or grid value (at most a subtraction of two
 * such finite products, far from overflow): a NaN needs a NaN or infinite
 * scale. Plain types (whose values may be NaN themselves) test the outputs.
 * Plain types: a "block" is 8 elements.
 * ====================================================================== */

struct ctx {
    tab16 t16;          /* IQ4_NL values or doubled E2M1 values, where used */
    const uint8_t *end; /* end of the row's blocks (MXFP4's word loads) */
};

/* 8 bytes at any alignment as 2 or 3 aligned word loads and funnel shifts
 * instead of 8 byte loads. The words may hold up to 3 bytes before p and
 * after p + 7: the caller makes sure those lie inside the buffer. */
GC_DEV uint2 ld64_words(const uint8_t *p)
{
    const uintptr_t a = (uintptr_t)p;
    const unsigned int *w = (const unsigned int *)(a & ~(uintptr_t)3);
    const uint32_t sh = 8u * (uint32_t)(a & 3);
    const uint32_t w0 = __ldg(w), w1 = __ldg(w + 1), w2 = sh ? __ldg(w + 2) : 0u;
    return make_uint2(__funnelshift_r(w0, w1, sh), __funnelshift_r(w1, w2, sh));
}

template <int T> struct dq;

/* ---- plain types ---- */

template <> struct dq<GGUF_TYPE_F32> {
    static constexpr int QK = 8, BYTES = 32, MAXA = 8;
    static constexpr bool GUARDED = false;
    template <int A, class M> GC_DEV float unit(const uint8_t *b, int, float *v, const ctx &)
    {
        const uint2 p0 = ld64<A>(b), p1 = ld64<A>(b + 8), p2 = ld64<A>(b + 16),
                    p3 = ld64<A>(b + 24);
        v[0] = ffrom(p0.x), v[1] = ffrom(p0.y), v[2] = ffrom(p1.x), v[3] = ffrom(p1.y);
        v[4] = ffrom(p2.x), v[5] = ffrom(p2.y), v[6] = ffrom(p3.x), v[7] = ffrom(p3.y);
        return 0.0f;
    }
};

template <> struct dq<GGUF_TYPE_F16> {
    static constexpr int QK = 8, BYTES = 16, MAXA = 8;
    static constexpr bool GUARDED = false;
    template <int A, class M> GC_DEV float unit(const uint8_t *b, int, float *v, const ctx &)
    {
        const uint2 p0 = ld64<A>(b), p1 = ld64<A>(b + 8);
        const uint32_t w[4] = {p0.x, p0.y, p1.x, p1.y};
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = M::h2f((w[j / 2] >> (16 * (j & 1))) & 0xFFFFu);
        return 0.0f;
    }
};

template <> struct dq<GGUF_TYPE_BF16> {
    static constexpr int QK = 8, BYTES = 16, MAXA = 8;
    static constexpr bool GUARDED = false;
    template <int A, class M> GC_DEV float unit(const uint8_t *b, int, float *v, const ctx &)
    {
        const uint2 p0 = ld64<A>(b), p1 = ld64<A>(b + 8);
        const uint32_t w[4] = {p0.x, p0.y, p1.x, p1.y};
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = ffrom(((w[j / 2] >> (16 * (j & 1))) & 0xFFFFu) << 16);
        return 0.0f;
    }
};

template <> struct dq<GGUF_TYPE_F64> {
    static constexpr int QK = 8, BYTES = 64, MAXA = 8;
    static constexpr bool GUARDED = false;
    template <int A, class M> GC_DEV float unit(const uint8_t *b, int, float *v, const ctx &)
    {
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const uint2 p = ld64<A>(b + 8 * j);
            v[j] = M::d2f((uint64_t)p.x | ((uint64_t)p.y << 32));
        }
        return 0.0f;
    }
};

template <> struct dq<GGUF_TYPE_I8> {
    static constexpr int QK = 8, BYTES = 8, MAXA = 8;
    static constexpr bool GUARDED = false;
    template <int A, class M> GC_DEV float unit(const uint8_t *b, int, float *v, const ctx &)
    {
        const uint2 p = ld64<A>(b);
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = i2f((int8_t)byte_at(p, j));
        return 0.0f;
    }
};

template <> struct dq<GGUF_TYPE_I16> {
    static constexpr int QK = 8, BYTES = 16, MAXA = 8;
    static constexpr bool GUARDED = false;
    template <int A, class M> GC_DEV float unit(const uint8_t *b, int, float *v, const ctx &)
    {
        const uint2 p0 = ld64<A>(b), p1 = ld64<A>(b + 8);
        const uint32_t w[4] = {p0.x, p0.y, p1.x, p1.y};
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = i2f((int16_t)((w[j / 2] >> (16 * (j & 1))) & 0xFFFFu));
        return 0.0f;
    }
};

template <> struct dq<GGUF_TYPE_I32> {
    static constexpr int QK = 8, BYTES = 32, MAXA = 8;
    static constexpr bool GUARDED = false;
    template <int A, class M> GC_DEV float unit(const uint8_t *b, int, float *v, const ctx &)
    {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const uint2 p = ld64<A>(b + 8 * j);
            v[2 * j] = __int2float_rn((int32_t)p.x);
            v[2 * j + 1] = __int2float_rn((int32_t)p.y);
        }
        return 0.0f;
    }
};

template <> struct dq<GGUF_TYPE_I64> {
    static constexpr int QK = 8, BYTES = 64, MAXA = 8;
    static constexpr bool GUARDED = false;
    template <int A, class M> GC_DEV float unit(const uint8_t *b, int, float *v, const ctx &)
    {
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const uint2 p = ld64<A>(b + 8 * j);
            v[j] = __ll2float_rn((long long)((uint64_t)p.x | ((uint64_t)p.y << 32)));
        }
        return 0.0f;
    }
};

/* ---- legacy 32-element blocks ---- */

/* Q4_0: unit k takes qs[8(k&1) ..] low (k < 2) or high nibbles. */
template <> struct dq<GGUF_TYPE_Q4_0> {
    static constexpr int QK = 32, BYTES = 18, MAXA = 2;
    static constexpr bool GUARDED = true;
    template <int A, class M> GC_DEV float unit(const uint8_t *b, int k, float *v, const ctx &)
    {
        const float d = M::h2f(ld16<A>(b));
        const uint2 q = ld64<amin(A, 2)>(b + 2 + 8 * (k & 1));
        const int sh = 4 * (k >> 1);
        expand8(shr_and(q, sh, 0x0F0F0F0Fu), 8.0f, v);
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = M::mul(v[j], d);
        return d;
    }
};

template <> struct dq<GGUF_TYPE_Q4_1> {
    static constexpr int QK = 32, BYTES = 20, MAXA = 4;
    static constexpr bool GUARDED = true;
    template <int A, class M> GC_DEV float unit(const uint8_t *b, int k, float *v, const ctx &)
    {
        const uint32_t dm = ld32<A>(b);
        const float d = M::h2f(dm & 0xFFFF), m = M::h2f(dm >> 16);
        const uint2 q = ld64<amin(A, 4)>(b + 4 + 8 * (k & 1));
        const int sh = 4 * (k >> 1);
        expand8(shr_and(q, sh, 0x0F0F0F0Fu), 0.0f, v);
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = M::add(M::mul(v[j], d), m);
        return __fadd_rn(d, m);
    }
};

/* Q5_0/Q5_1: element e's 5th bit is bit e of qh (e = 8k + j). */
template <> struct dq<GGUF_TYPE_Q5_0> {
    static constexpr int QK = 32, BYTES = 22, MAXA = 2;
    static constexpr bool GUARDED = true;
    template <int A, class M> GC_DEV float unit(const uint8_t *b, int k, float *v, const ctx &)
    {
        const float d = M::h2f(ld16<A>(b));
        const uint32_t qh = ld32<amin(A, 2)>(b + 2) >> (8 * k);
        const uint2 q = ld64<amin(A, 2)>(b + 6 + 8 * (k & 1));
        const int sh = 4 * (k >> 1);
        uint2 x = shr_and(q, sh, 0x0F0F0F0Fu);
        x.x |= spread4(qh) << 4;
        x.y |= spread4(qh >> 4) << 4;
        expand8(x, 16.0f, v);
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = M::mul(v[j], d);
        return d;
    }
};

template <> struct dq<GGUF_TYPE_Q5_1> {
    static constexpr int QK = 32, BYTES = 24, MAXA = 8;
    static constexpr bool GUARDED = true;
    template <int A, class M> GC_DEV float unit(const uint8_t *b, int k, float *v, const ctx &)
    {
        const uint32_t dm = ld32<amin(A, 4)>(b);
        const float d = M::h2f(dm & 0xFFFF), m = M::h2f(dm >> 16);
        const uint32_t qh = ld32<amin(A, 4)>(b + 4) >> (8 * k);
        const uint2 q = ld64<A>(b + 8 + 8 * (k & 1));
        const int sh = 4 * (k >> 1);
        uint2 x = shr_and(q, sh, 0x0F0F0F0Fu);
        x.x |= spread4(qh) << 4;
        x.y |= spread4(qh >> 4) << 4;
        expand8(x, 0.0f, v);
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = M::add(M::mul(v[j], d), m);
        return __fadd_rn(d, m);
    }
};

template <> struct dq<GGUF_TYPE_Q8_0> {
    static constexpr int QK = 32, BYTES = 34, MAXA = 2;
    static constexpr bool GUARDED = true;
    template <int A, class M> GC_DEV float unit(const uint8_t *b, int k, float *v, const ctx &)
    {
        const float d = M::h2f(ld16<A>(b));
        const uint2 q = ld64<amin(A, 2)>(b + 2 + 8 * k);
        expand8(make_uint2(q.x ^ 0x80808080u, q.y ^ 0x80808080u), 128.0f, v);
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = M::mul(v[j], d);
        return d;
    }
};

template <> struct dq<GGUF_TYPE_Q8_1> {
    static constexpr int QK = 32, BYTES = 36, MAXA = 4;
    static constexpr bool GUARDED = true;
    template <int A, class M> GC_DEV float unit(const uint8_t *b, int k, float *v, const ctx &)
    {
        const float d = M::h2f(ld16<A>(b));
        const uint2 q = ld64<amin(A, 4)>(b + 4 + 8 * k);
        expand8(make_uint2(q.x ^ 0x80808080u, q.y ^ 0x80808080u), 128.0f, v);
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = M::mul(v[j], d);
        return d;
    }
};

/* ---- K-quants ---- */

/* Q2_K: unit k = elements 8k..: half h = k/16, plane j = (k/4)%4,
 * l0 = 8(k%4); sub-block 8h + 2j + l0/16. */
template <> struct dq<GGUF_TYPE_Q2_K> {
    static constexpr int QK = 256, BYTES = 84, MAXA = 4;
    static constexpr bool GUARDED = true;
    template <int A, class M> GC_DEV float unit(const uint8_t *b, int k, float *v, const ctx &)
    {
        const int h = k >> 4, pl = (k >> 2) & 3, l0 = 8 * (k & 3);
        const uint32_t dd = ld32<amin(A, 4)>(b + 80);
        const float d = M::h2f(dd & 0xFFFF), dmin = M::h2f(dd >> 16);
        const uint32_t sc = ld8(b + 8 * h + 2 * pl + l0 / 16);
        const float dl = M::mul(d, i2f((int)(sc & 15)));
        const float ml = M::mul(dmin, i2f((int)(sc >> 4)));
        const uint2 q = ld64<amin(A, 8)>(b + 16 + 32 * h + l0);
        expand8(shr_and(q, 2 * pl, 0x03030303u), 0.0f, v);
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = M::sub(M::mul(dl, v[j]), ml);
        return __fadd_rn(dl, ml);
    }
};

template <> struct dq<GGUF_TYPE_Q3_K> {
    static constexpr int QK = 256, BYTES = 110, MAXA = 2;
    static constexpr bool GUARDED = true;
    template <int A, class M> GC_DEV float unit(const uint8_t *b, int k, float *v, const ctx &)
    {
        const int h = k >> 4, pl = (k >> 2) & 3, l0 = 8 * (k & 3);
        const int s = k >> 1; /* scale index e / 16 */
        const uint8_t *sc = b + 96;
        const int lo = s < 8 ? (int)(ld8(sc + s) & 15) : (int)(ld8(sc + s - 8) >> 4);
        const int hi = (int)((ld8(sc + 8 + (s & 3)) >> (2 * (s >> 2))) & 3);
        const float d = M::h2f(ld16<amin(A, 4)>(b + 108));
        const float dl = M::mul(d, i2f((lo | (hi << 4)) - 32));
        const uint2 q = ld64<amin(A, 8)>(b + 32 + 32 * h + l0);
        const uint2 hm = ld64<amin(A, 8)>(b + l0);
        const int hb = k >> 2; /* bit e / 32 of hmask */
        /* q - (hbit ? 0 : 4) = (q | hbit << 2) - 4 */
        const uint2 q2 = shr_and(q, 2 * pl, 0x03030303u), h1 = shr_and(hm, hb, 0x01010101u);
        expand8(make_uint2(q2.x | (h1.x << 2), q2.y | (h1.y << 2)), 4.0f, v);
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = M::mul(dl, v[j]);
        return dl;
    }
};

/* Scale and min of sub-block s (0..7) of Q4_K/Q5_K from their 12 bytes, held
 * as three little-endian words (one 16-byte header load instead of byte loads). */
GC_DEV void k4_scale_min(uint32_t w0, uint32_t w1, uint32_t w2, int s, int *scale, int *min)
{
    const int sh = 8 * (s & 3);
    const uint32_t lo = (w0 >> sh) & 0xFF, mn = (w1 >> sh) & 0xFF, c = (w2 >> sh) & 0xFF;
    if (s < 4) {
        *scale = (int)(lo & 63);
        *min = (int)(mn & 63);
    } else {
        *scale = (int)((c & 15) | ((lo >> 6) << 4));
        *min = (int)((c >> 4) | ((mn >> 6) << 4));
    }
}

template <> struct dq<GGUF_TYPE_Q4_K> {
    static constexpr int QK = 256, BYTES = 144, MAXA = 8;
    static constexpr bool GUARDED = true;
    template <int A, class M> GC_DEV float unit(const uint8_t *b, int k, float *v, const ctx &)
    {
        const int s = k >> 2, c = s >> 1, sh = 4 * (s & 1), l0 = 8 * (k & 3);
        const uint2 h0 = ld64<amin(A, 8)>(b), h1 = ld64<amin(A, 8)>(b + 8);
        const float d = M::h2f(h0.x & 0xFFFF), dmin = M::h2f(h0.x >> 16);
        int scale, min;
        k4_scale_min(h0.y, h1.x, h1.y, s, &scale, &min);
        const float dl = M::mul(d, i2f(scale)), ml = M::mul(dmin, i2f(min));
        const uint2 q = ld64<amin(A, 8)>(b + 16 + 32 * c + l0);
        expand8(shr_and(q, sh, 0x0F0F0F0Fu), 0.0f, v);
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = M::sub(M::mul(dl, v[j]), ml);
        return __fadd_rn(dl, ml);
    }
};

template <> struct dq<GGUF_TYPE_Q5_K> {
    static constexpr int QK = 256, BYTES = 176, MAXA = 8;
    static constexpr bool GUARDED = true;
    template <int A, class M> GC_DEV float unit(const uint8_t *b, int k, float *v, const ctx &)
    {
        const int s = k >> 2, c = s >> 1, sh = 4 * (s & 1), l0 = 8 * (k & 3);
        const uint2 h0 = ld64<amin(A, 8)>(b), h1 = ld64<amin(A, 8)>(b + 8);
        const float d = M::h2f(h0.x & 0xFFFF), dmin = M::h2f(h0.x >> 16);
        int scale, min;
        k4_scale_min(h0.y, h1.x, h1.y, s, &scale, &min);
        const float dl = M::mul(d, i2f(scale)), ml = M::mul(dmin, i2f(min));
        const uint2 qh = ld64<amin(A, 8)>(b + 16 + l0);
        const uint2 q = ld64<amin(A, 8)>(b + 48 + 32 * c + l0);
        const uint2 lo = shr_and(q, sh, 0x0F0F0F0Fu), hi = shr_and(qh, s, 0x01010101u);
        expand8(make_uint2(lo.x | (hi.x << 4), lo.y | (hi.y << 4)), 0.0f, v);
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = M::sub(M::mul(dl, v[j]), ml);
        return __fadd_rn(dl, ml);
    }
};

template <> struct dq<GGUF_TYPE_Q6_K> {
    static constexpr int QK = 256, BYTES = 210, MAXA = 2;
    static constexpr bool GUARDED = true;
    template <int A, class M> GC_DEV float unit(const uint8_t *b, int k, float *v, const ctx &)
    {
        const int h = k >> 4, c = (k >> 2) & 3, l0 = 8 * (k & 3);
        const uint2 ql = ld64<amin(A, 8)>(b + 64 * h + 32 * (c & 1) + l0);
        const uint2 qh = ld64<amin(A, 8)>(b + 128 + 32 * h + l0);
        const float d = M::h2f(ld16<amin(A, 16)>(b + 208));
        const float dl = M::mul(d, i2f((int8_t)ld8(b + 192 + (k >> 1))));
        const int shl = 4 * (c >> 1), shh = 2 * c;
        const uint2 lo = shr_and(ql, shl, 0x0F0F0F0Fu), hi = shr_and(qh, shh, 0x03030303u);
        expand8(make_uint2(lo.x | (hi.x << 4), lo.y | (hi.y << 4)), 32.0f, v);
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = M::mul(dl, v[j]);
        return dl;
    }
};

template <> struct dq<GGUF_TYPE_Q8_K> {
    static constexpr int QK = 256, BYTES = 292, MAXA = 4;
    static constexpr bool GUARDED = true;
    template <int A, class M> GC_DEV float unit(const uint8_t *b, int k, float *v, const ctx &)
    {
        const float d = ffrom(ld32<A>(b));
        const uint2 q = ld64<amin(A, 4)>(b + 4 + 8 * k);
        expand8(make_uint2(q.x ^ 0x80808080u, q.y ^ 0x80808080u), 128.0f, v);
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = M::mul(d, v[j]);
        return d;
    }
};

/* ---- ternary ---- */

/* TQ1_0 packs five base-3 digits per byte: digit kk of byte q is
 * ((q * 3^kk) & 0xFF) * 3 >> 8. tq_digits4 takes that digit of the four
 * bytes of w at once, in two 16-bit lanes per word (even and odd bytes: the
 * products stay below 2^16), and returns the digits as bytes. */
GC_DEV uint32_t tq_digits4(uint32_t w, uint32_t pow3)
{
    uint32_t e = ((w & 0x00FF00FFu) * pow3) & 0x00FF00FFu;
    uint32_t o = (((w >> 8) & 0x00FF00FFu) * pow3) & 0x00FF00FFu;
    e = ((e * 3) >> 8) & 0x00030003u;
    o = ((o * 3) >> 8) & 0x00030003u;
    return e | (o << 8);
}
/* 3^kk for kk = 0..4 */
GC_DEV uint32_t tq_pow3(int kk)
{
    return __byte_perm(0x1B090301u, 0x51u, 0x7770u | (uint32_t)kk); /* bytes 1..3: zero */
}

/* One path for all units (a warp holds the 32 units of one block, and three
 * branches on k would run one after the other): elements 0..159 are digit
 * kk of qs[l], e = 32 kk + l; 160..239 digit kk of qs[32 + l], e = 160 +
 * 16 kk + l; 240..255 digit kk of qh[l], e = 240 + 4 kk + l. */
template <> struct dq<GGUF_TYPE_TQ1_0> {
    static constexpr int QK = 256, BYTES = 54, MAXA = 2;
    static constexpr bool GUARDED = true;
    template <int A, class M> GC_DEV float unit(const uint8_t *b, int k, float *v, const ctx &)
    {
        const float d = M::h2f(ld16<amin(A, 4)>(b + 52));
        /* selects, not branches: the lanes of a warp take all three */
        const bool qs0 = k < 20, qh = k >= 30;
        const int off = qs0 ? 8 * (k & 3) : qh ? 48 : 32 + 8 * ((k - 20) & 1);
        const int kk_lo = qs0 ? k >> 2 : qh ? 2 * (k - 30) : (k - 20) >> 1;
        const int kk_hi = kk_lo + (qh ? 1 : 0);
        const uint32_t w0 = ld32<amin(A, 4)>(b + off);
        const uint32_t w1 = ld32<amin(A, 4)>(b + (qh ? off : off + 4));
        expand8(make_uint2(tq_digits4(w0, tq_pow3(kk_lo)), tq_digits4(w1, tq_pow3(kk_hi))), 1.0f, v);
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = M::mul(v[j], d);
        return d;
    }
};

template <> struct dq<GGUF_TYPE_TQ2_0> {
    static constexpr int QK = 256, BYTES = 66, MAXA = 2;
    static constexpr bool GUARDED = true;
    template <int A, class M> GC_DEV float unit(const uint8_t *b, int k, float *v, const ctx &)
    {
        const int h = k >> 4, pl = (k >> 2) & 3, l0 = 8 * (k & 3);
        const float d = M::h2f(ld16<amin(A, 64)>(b + 64));
        const uint2 q = ld64<amin(A, 8)>(b + 32 * h + l0);
        expand8(shr_and(q, 2 * pl, 0x03030303u), 1.0f, v);
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = M::mul(v[j], d);
        return d;
    }
};

/* ---- IQ types ---- */

/* one 8-wide grid row of a W=8 grid */
GC_DEV uint2 grid8(const uint8_t *grid, uint32_t idx) { return __ldg((const uint2 *)grid + idx); }
GC_DEV uint32_t grid4(const uint8_t *grid, uint32_t idx)
{
    return __ldg((const unsigned int *)grid + idx);
}

/* IQ2_XXS: unit k = group l = k%4 of 32-block ib = k/4. */
template <> struct dq<GGUF_TYPE_IQ2_XXS> {
    static constexpr int QK = 256, BYTES = 66, MAXA = 2;
    static constexpr bool GUARDED = true;
    template <int A, class M> GC_DEV float unit(const uint8_t *b, int k, float *v, const ctx &)
    {
        const int ib = k >> 2, l = k & 3;
        const float d = M::h2f(ld16<A>(b));
        const uint8_t *q = b + 2 + 8 * ib;
        const uint32_t idx = ld8(q + l);
        const uint32_t aux = ld32<amin(A, 2)>(q + 4);
        const float db = M::mul(M::mul(d, M::add(0.5f, i2f((int)(aux >> 28)))), 0.25f);
        const uint32_t signs = ld8(gc_iq2_ksigns + ((aux >> (7 * l)) & 127));
        const uint2 g = grid8(gc_iq2xxs_grid, idx);
        expand8(g, 0.0f, v);
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = negif(M::mul(db, v[j]), (signs >> j) & 1);
        return db;
    }
};

template <> struct dq<GGUF_TYPE_IQ2_XS> {
    static constexpr int QK = 256, BYTES = 74, MAXA = 2;
    static constexpr bool GUARDED = true;
    template <int A, class M> GC_DEV float unit(const uint8_t *b, int k, float *v, const ctx &)
    {
        const int ib = k >> 2, l = k & 3;
        const float d = M::h2f(ld16<A>(b));
        const uint32_t sc = ld8(b + 66 + ib);
        const float db = M::mul(M::mul(d, M::add(0.5f, i2f((int)((l >> 1) ? sc >> 4 : sc & 15)))), 0.25f);
        const uint32_t qv = ld16<amin(A, 2)>(b + 2 + 2 * (4 * ib + l));
        const uint32_t signs = ld8(gc_iq2_ksigns + (qv >> 9));
        const uint2 g = grid8(gc_iq2xs_grid, qv & 511);
        expand8(g, 0.0f, v);
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = negif(M::mul(db, v[j]), (signs >> j) & 1);
        return db;
    }
};

template <> struct dq<GGUF_TYPE_IQ2_S> {
    static constexpr int QK = 256, BYTES = 82, MAXA = 2;
    static constexpr bool GUARDED = true;
    template <int A, class M> GC_DEV float unit(const uint8_t *b, int k, float *v, const ctx &)
    {
        const int ib = k >> 2, l = k & 3;
        const float d = M::h2f(ld16<A>(b));
        const uint32_t sc = ld8(b + 74 + ib);
        const float db = M::mul(M::mul(d, M::add(0.5f, i2f((int)((l >> 1) ? sc >> 4 : sc & 15)))), 0.25f);
        const uint32_t qh = ld8(b + 66 + ib);
        const uint32_t idx = ld8(b + 2 + 4 * ib + l) | (((qh >> (2 * l)) & 3) << 8);
        const uint32_t signs = ld8(b + 2 + 32 + 4 * ib + l);
        const uint2 g = grid8(gc_iq2s_grid, idx);
        expand8(g, 0.0f, v);
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = negif(M::mul(db, v[j]), (signs >> j) & 1);
        return db;
    }
};

template <> struct dq<GGUF_TYPE_IQ3_XXS> {
    static constexpr int QK = 256, BYTES = 98, MAXA = 2;
    static constexpr bool GUARDED = true;
    template <int A, class M> GC_DEV float unit(const uint8_t *b, int k, float *v, const ctx &)
    {
        const int ib = k >> 2, l = k & 3;
        const float d = M::h2f(ld16<A>(b));
        const uint8_t *qs = b + 2;
        const uint32_t aux = ld32<amin(A, 2)>(qs + 64 + 4 * ib);
        const float db = M::mul(M::mul(d, M::add(0.5f, i2f((int)(aux >> 28)))), 0.5f);
        const uint32_t signs = ld8(gc_iq2_ksigns + ((aux >> (7 * l)) & 127));
        const uint32_t i12 = ld16<amin(A, 2)>(qs + 8 * ib + 2 * l);
        const uint2 g = make_uint2(grid4(gc_iq3xxs_grid, i12 & 0xFF), grid4(gc_iq3xxs_grid, i12 >> 8));
        expand8(g, 0.0f, v);
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = negif(M::mul(db, v[j]), (signs >> j) & 1);
        return db;
    }
};

template <> struct dq<GGUF_TYPE_IQ3_S> {
    static constexpr int QK = 256, BYTES = 110, MAXA = 2;
    static constexpr bool GUARDED = true;
    template <int A, class M> GC_DEV float unit(const uint8_t *b, int k, float *v, const ctx &)
    {
        const int ib = k >> 2, l = k & 3;
        const float d = M::h2f(ld16<A>(b));
        const uint32_t scb = ld8(b + 106 + ib / 2);
        const float db = M::mul(d, i2f(1 + 2 * (int)((scb >> (4 * (ib & 1))) & 15)));
        const uint32_t qh = ld8(b + 66 + ib);
        const uint32_t i12 = ld16<amin(A, 2)>(b + 2 + 8 * ib + 2 * l);
        const uint32_t i1 = (i12 & 0xFF) | (((qh >> (2 * l)) & 1) << 8);
        const uint32_t i2 = (i12 >> 8) | (((qh >> (2 * l + 1)) & 1) << 8);
        const uint32_t sg = ld8(b + 74 + 4 * ib + l);
        const uint2 g = make_uint2(grid4(gc_iq3s_grid, i1), grid4(gc_iq3s_grid, i2));
        expand8(g, 0.0f, v);
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = negif(M::mul(db, v[j]), (sg >> j) & 1);
        return db;
    }
};

#define GC_IQ1S_DELTA 0.125f

template <> struct dq<GGUF_TYPE_IQ1_S> {
    static constexpr int QK = 256, BYTES = 50, MAXA = 2;
    static constexpr bool GUARDED = true;
    template <int A, class M> GC_DEV float unit(const uint8_t *b, int k, float *v, const ctx &)
    {
        const int ib = k >> 2, l = k & 3;
        const float d = M::h2f(ld16<A>(b));
        const uint32_t qh = ld16<amin(A, 2)>(b + 34 + 2 * ib);
        const float dl = M::mul(d, i2f(2 * (int)((qh >> 12) & 7) + 1));
        const float delta = (qh & 0x8000) ? -GC_IQ1S_DELTA : GC_IQ1S_DELTA;
        const uint32_t idx = ld8(b + 2 + 4 * ib + l) | (((qh >> (3 * l)) & 7) << 8);
        const uint2 g = grid8(gc_iq1s_grid, idx);
        expand8(make_uint2(g.x ^ 0x80808080u, g.y ^ 0x80808080u), 128.0f, v);
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = M::mul(dl, __fadd_rn(v[j], delta));
        return dl;
    }
};

template <> struct dq<GGUF_TYPE_IQ1_M> {
    static constexpr int QK = 256, BYTES = 56, MAXA = 8;
    static constexpr bool GUARDED = true;
    template <int A, class M> GC_DEV float unit(const uint8_t *b, int k, float *v, const ctx &)
    {
        const int ib = k >> 2, l = k & 3;
        const uint2 scw = ld64<amin(A, 8)>(b + 48); /* four LE uint16 */
        const uint32_t s0 = scw.x & 0xFFFF, s1 = scw.x >> 16, s2 = scw.y & 0xFFFF, s3 = scw.y >> 16;
        const uint32_t dbits = (s0 >> 12) | ((s1 >> 8) & 0x00F0) | ((s2 >> 4) & 0x0F00) | (s3 & 0xF000);
        const float d = M::h2f(dbits);
        const uint32_t sw = (ib >> 1) == 0 ? s0 : (ib >> 1) == 1 ? s1 : (ib >> 1) == 2 ? s2 : s3;
        const uint32_t sv = sw >> (6 * (ib & 1));
        const float dl = M::mul(d, i2f(2 * (int)((sv >> (3 * (l >> 1))) & 7) + 1));
        const uint32_t nib = (ld8(b + 32 + 2 * ib + (l >> 1)) >> (4 * (l & 1))) & 15;
        const uint32_t idx = ld8(b + 4 * ib + l) | ((nib & 7) << 8);
        const float delta = (nib & 8) ? -GC_IQ1S_DELTA : GC_IQ1S_DELTA;
        const uint2 g = grid8(gc_iq1s_grid, idx);
        expand8(make_uint2(g.x ^ 0x80808080u, g.y ^ 0x80808080u), 128.0f, v);
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = M::mul(dl, __fadd_rn(v[j], delta));
        return dl;
    }
};

template <> struct dq<GGUF_TYPE_IQ4_NL> {
    static constexpr int QK = 32, BYTES = 18, MAXA = 2;
    static constexpr bool GUARDED = true;
    template <int A, class M> GC_DEV float unit(const uint8_t *b, int k, float *v, const ctx &c)
    {
        const float d = M::h2f(ld16<A>(b));
        const uint2 q = ld64<amin(A, 2)>(b + 2 + 8 * (k & 1));
        const int sh = 4 * (k >> 1);
        expand8(lookup8(c.t16, shr_and(q, sh, 0x0F0F0F0Fu)), 128.0f, v);
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = M::mul(d, v[j]);
        return d;
    }
};

template <> struct dq<GGUF_TYPE_IQ4_XS> {
    static constexpr int QK = 256, BYTES = 136, MAXA = 8;
    static constexpr bool GUARDED = true;
    template <int A, class M> GC_DEV float unit(const uint8_t *b, int k, float *v, const ctx &c)
    {
        const int ib = k >> 2, part = k & 3;
        const uint32_t hdr = ld32<amin(A, 4)>(b); /* d, scales_h */
        const float d = M::h2f(hdr & 0xFFFF);
        const uint32_t sh_bits = hdr >> 16;
        const uint32_t sl = ld8(b + 4 + ib / 2);
        const int ls = (int)(((sl >> (4 * (ib & 1))) & 15) | (((sh_bits >> (2 * ib)) & 3) << 4));
        const float dl = M::mul(d, i2f(ls - 32));
        const uint2 q = ld64<amin(A, 8)>(b + 8 + 16 * ib + 8 * (part & 1));
        const int sh = 4 * (part >> 1);
        expand8(lookup8(c.t16, shr_and(q, sh, 0x0F0F0F0Fu)), 128.0f, v);
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = M::mul(dl, v[j]);
        return dl;
    }
};

/* ---- micro-scaled FP4 ---- */

template <> struct dq<GGUF_TYPE_MXFP4> {
    static constexpr int QK = 32, BYTES = 17, MAXA = 1;
    static constexpr bool GUARDED = true;
    template <int A, class M> GC_DEV float unit(const uint8_t *b, int k, float *v, const ctx &c)
    {
        const float d = e8m0_half(ld8(b));
        /* 17-byte blocks start at any byte. Word loads unless the last
         * word would reach past the row; the first word starts at most 2
         * bytes before the block: inside the buffer, or in the aligned word
         * of its first byte, which the (256-byte aligned) allocation holds */
        const uint8_t *p = b + 1 + 8 * (k & 1);
        const uint2 q = ((uintptr_t)(p + 7) | 3) < (uintptr_t)c.end ? ld64_words(p) : ld64<1>(p);
        const int sh = 4 * (k >> 1);
        expand8(lookup8(c.t16, shr_and(q, sh, 0x0F0F0F0Fu)), 128.0f, v);
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = M::mul(v[j], d);
        return d;
    }
};

template <> struct dq<GGUF_TYPE_NVFP4> {
    static constexpr int QK = 64, BYTES = 36, MAXA = 4;
    static constexpr bool GUARDED = true;
    template <int A, class M> GC_DEV float unit(const uint8_t *b, int k, float *v, const ctx &c)
    {
        const int sb = k >> 1, sh = 4 * (k & 1);
        const float d = ue4m3_half(ld8(b + sb));
        const uint2 q = ld64<amin(A, 4)>(b + 4 + 8 * sb);
        expand8(lookup8(c.t16, shr_and(q, sh, 0x0F0F0F0Fu)), 128.0f, v);
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = M::mul(d, v[j]);
        return d;
    }
};

/* ---- 1-bit ---- */

template <> struct dq<GGUF_TYPE_Q1_0> {
    static constexpr int QK = 128, BYTES = 18, MAXA = 2;
    static constexpr bool GUARDED = true;
    template <int A, class M> GC_DEV float unit(const uint8_t *b, int k, float *v, const ctx &)
    {
        const float d = M::h2f(ld16<A>(b));
        const uint32_t bits = ld8(b + 2 + k);
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = negif(d, ((bits >> j) & 1) ^ 1); /* set: d, clear: -d */
        return d;
    }
};

/* ======================================================================
 * Output
 * ====================================================================== */

template <int O> struct out_t;
template <> struct out_t<GGUF_TYPE_F32> {
    static constexpr int SIZE = 4;
};
template <> struct out_t<GGUF_TYPE_F16> {
    static constexpr int SIZE = 2;
};
template <> struct out_t<GGUF_TYPE_BF16> {
    static constexpr int SIZE = 2;
};

/* Half outputs. exact: the unit holds a NaN, whose bits need the slow
 * conversion; otherwise round to nearest even directly. */
template <int O> GC_DEV uint16_t to_half(float f, bool exact)
{
    if constexpr (O == GGUF_TYPE_F16) {
        return exact ? f2h(f) : __half_as_ushort(__float2half_rn(f));
    } else {
        if (exact)
            return f2bf(f);
        const uint32_t u = fbits(f);
        return (uint16_t)((u + (0x7FFFu + ((u >> 16) & 1))) >> 16);
    }
}

/* Per-warp staging for float32 output: 32 lanes x 8 floats. */
struct stage {
    float4 w[8][64]; /* 8 warps of 256 threads, 32 lanes x 2 float4 each */
};

/*
 * Write elements [8u, 8u + 8) of dst.
 *   vec:  dst is 16-byte aligned;
 *   full: all 32 lanes of the warp hold consecutive units (u - lane .. + 31).
 * Float32 from a full warp goes through shared memory, so that each store
 * instruction of the warp writes 512 contiguous bytes: lane L's own 32 bytes
 * as two 16-byte stores 32 bytes apart would leave every sector half
 * written per instruction, which measured 20-40% slower on H200.
 */
template <int O>
GC_DEV void store8(void *dst, uint64_t u, const float *v, bool vec, bool full, bool exact,
                   stage *st)
{
    if constexpr (O == GGUF_TYPE_F32) {
        float *y = (float *)dst + 8 * u;
        if (vec && full) {
            const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
            float4 *w = st->w[warp];
            w[2 * lane] = make_float4(v[0], v[1], v[2], v[3]);
            w[2 * lane + 1] = make_float4(v[4], v[5], v[6], v[7]);
            __syncwarp();
            float4 *base = (float4 *)((float *)dst + 8 * (u - (uint64_t)lane));
#if GC_STORE_CS
            __stcs(base + lane, w[lane]);
            __stcs(base + 32 + lane, w[32 + lane]);
#else
            base[lane] = w[lane];
            base[32 + lane] = w[32 + lane];
#endif
            __syncwarp();
        } else if (vec) {
            ((float4 *)y)[0] = make_float4(v[0], v[1], v[2], v[3]);
            ((float4 *)y)[1] = make_float4(v[4], v[5], v[6], v[7]);
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++)
                y[j] = v[j];
        }
    } else {
        uint32_t w[4];
        if (!exact) {
            /* hardware round-to-nearest-even, two at a time: the same bits as
             * gguf_fp32_to_fp16/_bf16 for every value but NaN */
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float2 f = make_float2(v[2 * j], v[2 * j + 1]);
                if constexpr (O == GGUF_TYPE_F16) {
                    const __half2 hh = __float22half2_rn(f);
                    w[j] = *(const uint32_t *)&hh;
                } else {
                    const __nv_bfloat162 bb = __float22bfloat162_rn(f);
                    w[j] = *(const uint32_t *)&bb;
                }
            }
        } else {
#pragma unroll
            for (int j = 0; j < 4; j++)
                w[j] = to_half<O>(v[2 * j], true) | ((uint32_t)to_half<O>(v[2 * j + 1], true) << 16);
        }
        uint16_t *y = (uint16_t *)dst + 8 * u;
        if (vec) {
#if GC_STORE_CS
            __stcs((uint4 *)y, make_uint4(w[0], w[1], w[2], w[3]));
#else
            *(uint4 *)y = make_uint4(w[0], w[1], w[2], w[3]);
#endif
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++)
                y[j] = (uint16_t)(w[j / 2] >> (16 * (j & 1)));
        }
    }
}

/* ======================================================================
 * The kernel: a grid-stride loop over units.
 * ====================================================================== */

template <int T> GC_DEV ctx make_ctx(const uint8_t *end)
{
    ctx c;
    c.end = end;
    if constexpr (T == GGUF_TYPE_IQ4_NL || T == GGUF_TYPE_IQ4_XS)
        c.t16 = load_tab16(gc_iq4nl_values);
    else if constexpr (T == GGUF_TYPE_MXFP4 || T == GGUF_TYPE_NVFP4)
        c.t16 = load_tab16(gc_fp4_e2m1_x2);
    else
        c.t16 = tab16{{0, 0, 0, 0}};
    return c;
}

/* The loop's shape per type: UNROLL units per thread per trip, decoded
 * before any is stored so that their loads are in flight together;
 * MIN_BLOCKS resident blocks of 256 threads per SM asked of the register
 * allocator (4: 64 registers, 32 warps; 5: 51 registers, 40 warps);
 * PREFETCH: how many trips ahead each thread asks L2 for its next blocks.
 * The quantized kernels wait on their loads (ncu on H200: 65% of a warp's
 * cycles in long-scoreboard stalls for Q4_K with BF16 output), so a
 * prefetch that takes no register and no wait hides most of that latency;
 * plain types, Q8_1 and Q8_K read enough bytes per element that the extra
 * requests cost more than they hide. 4 units with 64 registers is faster
 * for most types, 2 units with 51 registers for Q5_K and IQ3_S.
 * All measured (docs/benchmarks.md, "CUDA dequantization"). */
template <int T> struct tune {
#ifdef GC_UNROLL
    static constexpr int UNROLL = GC_UNROLL, MIN_BLOCKS = GC_MIN_BLOCKS;
#else
    static constexpr bool two = T == GGUF_TYPE_Q5_K || T == GGUF_TYPE_IQ3_S;
    static constexpr int UNROLL = two ? 2 : 4, MIN_BLOCKS = two ? 5 : 4;
#endif
#ifdef GC_PREFETCH
    static constexpr int PREFETCH = GC_PREFETCH;
#else
    static constexpr int PREFETCH =
        dq<T>::GUARDED && T != GGUF_TYPE_Q8_1 && T != GGUF_TYPE_Q8_K ? 1 : 0;
#endif
};

template <int T, int A>
__global__ void __launch_bounds__(256, tune<T>::MIN_BLOCKS)
    k_dequant(const uint8_t *__restrict__ src, void *__restrict__ dst, uint32_t n_units, int vec,
              uint32_t out_type, uint64_t src_row_stride, uint64_t dst_row_bytes)
{
    using D = dq<T>;
    constexpr int U = tune<T>::UNROLL;
    /* rectangles: blockIdx.y is the row, n_units the units of one row (fewer
     * than 2^31: the launcher cuts longer runs, so unit arithmetic is 32-bit) */
    src += (uint64_t)blockIdx.y * src_row_stride;
    dst = (uint8_t *)dst + (uint64_t)blockIdx.y * dst_row_bytes;
    constexpr uint32_t UPB = D::QK / 8; /* units per block: a power of two */
    static_assert((UPB & (UPB - 1)) == 0, "units per block");
    __shared__ stage st;
    const ctx c = make_ctx<T>(src + (uint64_t)(n_units / UPB) * D::BYTES);
    const uint32_t stride = gridDim.x * blockDim.x;
    const uint32_t lane = threadIdx.x & 31;
    for (uint32_t u0 = blockIdx.x * blockDim.x + threadIdx.x; u0 < n_units;
         u0 += stride * U) {
        float v[U][8], g[U];
        /* the blocks of a later trip into L2 (no register, no wait) */
        if constexpr (tune<T>::PREFETCH > 0) {
#pragma unroll
            for (int i = 0; i < U; i++) {
                const uint32_t un = u0 + (U * tune<T>::PREFETCH + i) * stride;
                if (un < n_units)
                    asm volatile("prefetch.global.L2 [%0];" ::"l"(
                        src + (uint64_t)(un / UPB) * D::BYTES + (un % UPB) * (D::BYTES / UPB)));
            }
        }
        /* 1: decode every unit (past the end: decode the last one again, so
         * there is no branch between the loads) */
#pragma unroll
        for (int i = 0; i < U; i++) {
            uint32_t u = u0 + i * stride;
            u = u < n_units ? u : n_units - 1;
            g[i] = D::template unit<A, fast_ops>(src + (uint64_t)(u / UPB) * D::BYTES,
                                                 (int)(u % UPB), v[i], c);
        }
        /* 2: units that may hold a NaN again, with the x86 NaN rules (a
         * quantized type's output can only be NaN when its guard, a sum of
         * the unit's scales, is not finite: one test instead of eight);
         * 3: store */
#pragma unroll
        for (int i = 0; i < U; i++) {
            const uint32_t u = u0 + i * stride;
            if (u >= n_units)
                break;
            bool nan = false;
            if constexpr (D::GUARDED) {
                nan = !(fabsf(g[i]) < __int_as_float(0x7F800000));
            } else {
#pragma unroll
                for (int j = 0; j < 8; j++)
                    nan |= isnan(v[i][j]);
            }
            if (nan)
                D::template unit<A, x86_ops>(src + (uint64_t)(u / UPB) * D::BYTES,
                                             (int)(u % UPB), v[i], c);
            const bool full = u - lane + 32 <= n_units;
            /* the output type is a uniform branch, not a template argument:
             * a third of the kernels to compile for each architecture */
            if (out_type == GGUF_TYPE_F32)
                store8<GGUF_TYPE_F32>(dst, u, v[i], vec != 0, full, nan, &st);
            else if (out_type == GGUF_TYPE_F16)
                store8<GGUF_TYPE_F16>(dst, u, v[i], vec != 0, full, nan, &st);
            else
                store8<GGUF_TYPE_BF16>(dst, u, v[i], vec != 0, full, nan, &st);
        }
    }
}

/* Plain types whose n is not a multiple of 8: the last n % 8 elements, one
 * thread each, through byte loads. */
template <int T, int O>
__global__ void k_dequant_tail(const uint8_t *__restrict__ src, void *__restrict__ dst,
                               uint64_t first, int count)
{
    const int i = threadIdx.x;
    if (i >= count)
        return;
    constexpr int ES = dq<T>::BYTES / 8;
    const uint64_t e = first + (uint64_t)i;
    const uint8_t *p = src + e * ES;
    float f;
    if constexpr (T == GGUF_TYPE_F32)
        f = ffrom(ld32<1>(p));
    else if constexpr (T == GGUF_TYPE_F16)
        f = h2f(ld16<1>(p));
    else if constexpr (T == GGUF_TYPE_BF16)
        f = ffrom(ld16<1>(p) << 16);
    else if constexpr (T == GGUF_TYPE_F64)
        f = d2f((uint64_t)ld32<1>(p) | ((uint64_t)ld32<1>(p + 4) << 32));
    else if constexpr (T == GGUF_TYPE_I8)
        f = (float)(int8_t)ld8(p);
    else if constexpr (T == GGUF_TYPE_I16)
        f = (float)(int16_t)ld16<1>(p);
    else if constexpr (T == GGUF_TYPE_I32)
        f = __int2float_rn((int32_t)ld32<1>(p));
    else
        f = __ll2float_rn((long long)((uint64_t)ld32<1>(p) | ((uint64_t)ld32<1>(p + 4) << 32)));
    if constexpr (O == GGUF_TYPE_F32)
        ((float *)dst)[e] = f;
    else
        ((uint16_t *)dst)[e] = to_half<O>(f, true);
}

} /* namespace gc */

/* Launch description handed from the dispatcher to the per-family launchers. */
struct gc_launch {
    const uint8_t *src;
    void *dst;
    uint64_t n;          /* elements (of each row) */
    uint64_t n_rows;     /* rows (1: one contiguous run) */
    uint64_t src_row_stride; /* bytes from one row's source to the next */
    uint32_t out_type;   /* GGUF_TYPE_F32 / F16 / BF16 */
    int src_align;       /* alignment of src in bytes (1, 2, 4, 8, 16 ...) */
    int vec;             /* dst is 16-byte aligned */
    unsigned max_blocks; /* grid cap */
    cudaStream_t stream;
};

/* Per-family launchers (cuda_dequant_*.cu). Return cudaSuccess after queueing,
 * cudaErrorInvalidValue when the type is not theirs (*handled = false). */
cudaError_t gc_launch_plain(uint32_t type, const gc_launch *l, bool *handled);
cudaError_t gc_launch_legacy(uint32_t type, const gc_launch *l, bool *handled);
cudaError_t gc_launch_kquant(uint32_t type, const gc_launch *l, bool *handled);
cudaError_t gc_launch_iq(uint32_t type, const gc_launch *l, bool *handled);

/* The generic launcher used by the families: picks A and O. */
/* Units per launch along a row: the kernel counts units in 32 bits. A
 * multiple of every type's units per block, so pieces start at blocks. */
#define GC_PIECE_UNITS (1ull << 30)

template <int T> cudaError_t gc_launch_type(const gc_launch *l)
{
    using D = gc::dq<T>;
    constexpr uint64_t UPB = D::QK / 8;
    const uint64_t n_units = l->n / 8;
    const uint64_t out_size = l->out_type == GGUF_TYPE_F32 ? 4 : 2;
    const uint64_t rows = l->n_rows ? l->n_rows : 1;
    for (uint64_t p0 = 0; p0 < n_units; p0 += GC_PIECE_UNITS) {
        const uint64_t pu = n_units - p0 < GC_PIECE_UNITS ? n_units - p0 : GC_PIECE_UNITS;
        for (uint64_t r0 = 0; r0 < rows; r0 += 65535) {
            const uint64_t nr = rows - r0 < 65535 ? rows - r0 : 65535;
            uint64_t blocks = (pu + 255) / 256, cap = l->max_blocks / nr;
            if (cap < 1)
                cap = 1;
            if (blocks > cap)
                blocks = cap;
            /* A: the block-start alignment we can promise, at most D::MAXA */
            const int a = l->src_align;
            const dim3 grid((unsigned)blocks, (unsigned)nr), block(256);
            const uint8_t *src = l->src + r0 * l->src_row_stride + p0 / UPB * D::BYTES;
            void *dst = (uint8_t *)l->dst + (r0 * l->n + p0 * 8) * out_size;
#define GC_GO(A)                                                                         \
    gc::k_dequant<T, A><<<grid, block, 0, l->stream>>>(src, dst, (uint32_t)pu, l->vec,   \
                                                       l->out_type, l->src_row_stride, \
                                                       l->n * out_size)
            if (a >= D::MAXA)
                GC_GO(D::MAXA);
            else
                GC_GO(1);
#undef GC_GO
            const cudaError_t e = cudaGetLastError();
            if (e != cudaSuccess)
                return e;
        }
    }
    if constexpr (D::QK == 8 && D::BYTES <= 64) {
        const int tail = (int)(l->n % 8);
        if (tail) {
            const uint64_t first = l->n - (uint64_t)tail;
            if (l->out_type == GGUF_TYPE_F32)
                gc::k_dequant_tail<T, GGUF_TYPE_F32><<<1, 8, 0, l->stream>>>(l->src, l->dst, first, tail);
            else if (l->out_type == GGUF_TYPE_F16)
                gc::k_dequant_tail<T, GGUF_TYPE_F16><<<1, 8, 0, l->stream>>>(l->src, l->dst, first, tail);
            else
                gc::k_dequant_tail<T, GGUF_TYPE_BF16><<<1, 8, 0, l->stream>>>(l->src, l->dst, first, tail);
            return cudaGetLastError();
        }
    }
    return cudaSuccess;
}

#endif
