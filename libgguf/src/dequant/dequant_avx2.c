/*
 * AVX2 + F16C kernels, compiled with per-function target attributes so the
 * library still runs on any x86-64; dequant.c calls them only after
 * __builtin_cpu_supports("avx2") and ("f16c").
 *
 * Bit-exactness with the reference (dequant_scalar.c) holds because every
 * element is computed by the same IEEE operations in the same order: integer
 * to float conversion (exact for these small integers), then one multiply
 * (and for the K-quants a multiply and a subtract, never fused: "fma" is
 * deliberately not in the target list). F16 scales are converted by F16C
 * (vcvtph2ps), which gives the reference's gguf_fp16_to_fp32 bits for every
 * half, NaN payloads and subnormals included (tests/unit/test_dequant.c
 * checks all 65536), at a fraction of the scalar helper's cost per block.
 *
 * Types without a kernel here use the reference under this path.
 */
#include "dequant/dequant_internal.h"

#include "gguf/blocks.h"
#include "gguf/types.h"

#include <stddef.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,f16c")))
#define OFF(type, field) offsetof(type, field)

/* A little-endian F16 field (a block scale) as a float. */
AVX2 static inline float rd_f16c(const uint8_t *p)
{
    return _cvtsh_ss(gguf_rd_u16(p));
}

/* ---- helpers: 8 int8 or int32 lanes -> scaled floats ---- */

/* y[0..7] = (float)q[0..7] * d, q the low 8 signed bytes of v */
AVX2 static inline void st8_i8_mul(float *y, __m128i v, __m256 d)
{
    _mm256_storeu_ps(y, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)), d));
}

/* gguf_nan_first for eight lanes: where r is NaN and a or b is, the first
 * NaN of (a, b), made quiet. The compiler may commute the add/sub below, so
 * the rule is applied explicitly, as in the reference. */
AVX2 static inline __m256 nan_first8(__m256 r, __m256 a, __m256 b)
{
    const __m256 rn = _mm256_cmp_ps(r, r, _CMP_UNORD_Q);
    if (!_mm256_movemask_ps(rn))
        return r;
    const __m256 quiet = _mm256_castsi256_ps(_mm256_set1_epi32(0x00400000));
    const __m256 an = _mm256_cmp_ps(a, a, _CMP_UNORD_Q), bn = _mm256_cmp_ps(b, b, _CMP_UNORD_Q);
    const __m256 pick = _mm256_or_ps(_mm256_blendv_ps(b, a, an), quiet);
    return _mm256_blendv_ps(r, pick, _mm256_and_ps(rn, _mm256_or_ps(an, bn)));
}

/* y[0..7] = d * (float)q - m */
AVX2 static inline void st8_i8_mul_sub(float *y, __m128i v, __m256 d, __m256 m)
{
    const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
    const __m256 p = _mm256_mul_ps(d, q);
    _mm256_storeu_ps(y, nan_first8(_mm256_sub_ps(p, m), p, m));
}

/* y[0..7] = (float)q * d + m */
AVX2 static inline void st8_i8_mul_add(float *y, __m128i v, __m256 d, __m256 m)
{
    const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
    const __m256 p = _mm256_mul_ps(q, d);
    _mm256_storeu_ps(y, nan_first8(_mm256_add_ps(p, m), p, m));
}

/* ---- plain types ---- */

AVX2 static void k_f16(const uint8_t *s, float *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + 2 * i))));
    for (; i < n; i++)
        y[i] = gguf_fp16_to_fp32(gguf_rd_u16(s + 2 * i));
}

AVX2 static void k_bf16(const uint8_t *s, float *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + 2 * i)));
        _mm256_storeu_si256((__m256i *)(y + i), _mm256_slli_epi32(w, 16));
    }
    for (; i < n; i++)
        y[i] = gguf_bf16_to_fp32(gguf_rd_u16(s + 2 * i));
}

/* ---- legacy blocks ---- */

AVX2 static void k_q4_0(const uint8_t *s, float *y, int64_t nb)
{
    const __m128i m4 = _mm_set1_epi8(15), e8 = _mm_set1_epi8(8);
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_q4_0), y += 32) {
        const __m256 d = _mm256_set1_ps(rd_f16c(s + OFF(gguf_block_q4_0, d)));
        const __m128i q = _mm_loadu_si128((const __m128i *)(s + OFF(gguf_block_q4_0, qs)));
        const __m128i lo = _mm_sub_epi8(_mm_and_si128(q, m4), e8);
        const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), m4), e8);
        st8_i8_mul(y, lo, d);
        st8_i8_mul(y + 8, _mm_srli_si128(lo, 8), d);
        st8_i8_mul(y + 16, hi, d);
        st8_i8_mul(y + 24, _mm_srli_si128(hi, 8), d);
    }
}

AVX2 static void k_q4_1(const uint8_t *s, float *y, int64_t nb)
{
    const __m128i m4 = _mm_set1_epi8(15);
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_q4_1), y += 32) {
        const __m256 d = _mm256_set1_ps(rd_f16c(s + OFF(gguf_block_q4_1, d)));
        const __m256 m = _mm256_set1_ps(rd_f16c(s + OFF(gguf_block_q4_1, m)));
        const __m128i q = _mm_loadu_si128((const __m128i *)(s + OFF(gguf_block_q4_1, qs)));
        const __m128i lo = _mm_and_si128(q, m4);
        const __m128i hi = _mm_and_si128(_mm_srli_epi16(q, 4), m4);
        st8_i8_mul_add(y, lo, d, m);
        st8_i8_mul_add(y + 8, _mm_srli_si128(lo, 8), d, m);
        st8_i8_mul_add(y + 16, hi, d, m);
        st8_i8_mul_add(y + 24, _mm_srli_si128(hi, 8), d, m);
    }
}

AVX2 static void k_q8_0(const uint8_t *s, float *y, int64_t nb)
{
    /* eight bytes at a time straight into the sign extension (vpmovsxbd from
     * memory), without splitting a 32-byte load with shuffles */
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_q8_0), y += 32) {
        const __m256 d = _mm256_set1_ps(rd_f16c(s + OFF(gguf_block_q8_0, d)));
        const uint8_t *q = s + OFF(gguf_block_q8_0, qs);
        for (int k = 0; k < 4; k++)
            st8_i8_mul(y + 8 * k, _mm_loadl_epi64((const __m128i *)(q + 8 * k)), d);
    }
}

/* ---- K-quants ---- */

AVX2 static void k_q2_k(const uint8_t *s, float *y, int64_t nb)
{
    const __m128i m3 = _mm_set1_epi8(3);
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_q2_k), y += 256) {
        const uint8_t *sc = s + OFF(gguf_block_q2_k, scales);
        const uint8_t *qs = s + OFF(gguf_block_q2_k, qs);
        const float d = rd_f16c(s + OFF(gguf_block_q2_k, d));
        const float dmin = rd_f16c(s + OFF(gguf_block_q2_k, dmin));
        for (int h = 0; h < 2; h++) {
            const __m128i q0 = _mm_loadu_si128((const __m128i *)(qs + 32 * h));
            const __m128i q1 = _mm_loadu_si128((const __m128i *)(qs + 32 * h + 16));
            for (int j = 0; j < 4; j++) {
                const __m128i sh = _mm_cvtsi32_si128(2 * j);
                const __m128i a = _mm_and_si128(_mm_srl_epi16(q0, sh), m3);
                const __m128i b = _mm_and_si128(_mm_srl_epi16(q1, sh), m3);
                const int k = 8 * h + 2 * j;
                const __m256 dl0 = _mm256_set1_ps(d * (float)(sc[k] & 15));
                const __m256 ml0 = _mm256_set1_ps(dmin * (float)(sc[k] >> 4));
                const __m256 dl1 = _mm256_set1_ps(d * (float)(sc[k + 1] & 15));
                const __m256 ml1 = _mm256_set1_ps(dmin * (float)(sc[k + 1] >> 4));
                float *o = y + 128 * h + 32 * j;
                st8_i8_mul_sub(o, a, dl0, ml0);
                st8_i8_mul_sub(o + 8, _mm_srli_si128(a, 8), dl0, ml0);
                st8_i8_mul_sub(o + 16, b, dl1, ml1);
                st8_i8_mul_sub(o + 24, _mm_srli_si128(b, 8), dl1, ml1);
            }
        }
    }
}

static int q3_scale(const uint8_t *sc, int k)
{
    const int lo = k < 8 ? sc[k] & 15 : sc[k - 8] >> 4;
    const int hi = (sc[8 + k % 4] >> (2 * (k / 4))) & 3;
    return (lo | (hi << 4)) - 32;
}

AVX2 static void k_q3_k(const uint8_t *s, float *y, int64_t nb)
{
    const __m128i m3 = _mm_set1_epi8(3), one = _mm_set1_epi8(1), four = _mm_set1_epi8(4);
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_q3_k), y += 256) {
        const uint8_t *hm = s + OFF(gguf_block_q3_k, hmask);
        const uint8_t *qs = s + OFF(gguf_block_q3_k, qs);
        const uint8_t *sc = s + OFF(gguf_block_q3_k, scales);
        const float d = rd_f16c(s + OFF(gguf_block_q3_k, d));
        const __m128i h0 = _mm_loadu_si128((const __m128i *)hm);
        const __m128i h1 = _mm_loadu_si128((const __m128i *)(hm + 16));
        for (int h = 0; h < 2; h++) {
            const __m128i q0 = _mm_loadu_si128((const __m128i *)(qs + 32 * h));
            const __m128i q1 = _mm_loadu_si128((const __m128i *)(qs + 32 * h + 16));
            for (int j = 0; j < 4; j++) {
                const int plane = 4 * h + j; /* e / 32: the hmask bit */
                const __m128i sh = _mm_cvtsi32_si128(2 * j), hs = _mm_cvtsi32_si128(plane);
                /* q - (bit clear ? 4 : 0) = q - 4 + 4*bit */
                const __m128i b0 = _mm_and_si128(_mm_srl_epi16(h0, hs), one);
                const __m128i b1 = _mm_and_si128(_mm_srl_epi16(h1, hs), one);
                const __m128i a = _mm_sub_epi8(_mm_and_si128(_mm_srl_epi16(q0, sh), m3),
                                               _mm_sub_epi8(four, _mm_slli_epi16(b0, 2)));
                const __m128i b = _mm_sub_epi8(_mm_and_si128(_mm_srl_epi16(q1, sh), m3),
                                               _mm_sub_epi8(four, _mm_slli_epi16(b1, 2)));
                const int k = 2 * plane;
                const __m256 dl0 = _mm256_set1_ps(d * (float)q3_scale(sc, k));
                const __m256 dl1 = _mm256_set1_ps(d * (float)q3_scale(sc, k + 1));
                float *o = y + 32 * plane;
                st8_i8_mul(o, a, dl0);
                st8_i8_mul(o + 8, _mm_srli_si128(a, 8), dl0);
                st8_i8_mul(o + 16, b, dl1);
                st8_i8_mul(o + 24, _mm_srli_si128(b, 8), dl1);
            }
        }
    }
}

/* Scalar dl*q and dl*q - ml are (float)q then mul (then sub) in this order. */
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

AVX2 static inline void st32_sub(float *o, __m256i v, __m256 dl, __m256 ml)
{
    const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
    st8_i8_mul_sub(o, lo, dl, ml);
    st8_i8_mul_sub(o + 8, _mm_srli_si128(lo, 8), dl, ml);
    st8_i8_mul_sub(o + 16, hi, dl, ml);
    st8_i8_mul_sub(o + 24, _mm_srli_si128(hi, 8), dl, ml);
}

AVX2 static void k_q4_k(const uint8_t *s, float *y, int64_t nb)
{
    const __m256i m4 = _mm256_set1_epi8(15);
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_q4_k), y += 256) {
        const float d = rd_f16c(s + OFF(gguf_block_q4_k, d));
        const float dmin = rd_f16c(s + OFF(gguf_block_q4_k, dmin));
        const uint8_t *sc = s + OFF(gguf_block_q4_k, scales);
        const uint8_t *qs = s + OFF(gguf_block_q4_k, qs);
        for (int c = 0; c < 4; c++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
            for (int t = 0; t < 2; t++) {
                int scale, min;
                k4_scale_min(sc, 2 * c + t, &scale, &min);
                const __m256 dl = _mm256_set1_ps(d * (float)scale);
                const __m256 ml = _mm256_set1_ps(dmin * (float)min);
                const __m256i v = _mm256_and_si256(t ? _mm256_srli_epi16(q, 4) : q, m4);
                st32_sub(y + 32 * (2 * c + t), v, dl, ml);
            }
        }
    }
}

AVX2 static void k_q5_k(const uint8_t *s, float *y, int64_t nb)
{
    const __m256i m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_q5_k), y += 256) {
        const float d = rd_f16c(s + OFF(gguf_block_q5_k, d));
        const float dmin = rd_f16c(s + OFF(gguf_block_q5_k, dmin));
        const uint8_t *sc = s + OFF(gguf_block_q5_k, scales);
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(s + OFF(gguf_block_q5_k, qh)));
        const uint8_t *qs = s + OFF(gguf_block_q5_k, qs);
        for (int c = 0; c < 4; c++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
            for (int t = 0; t < 2; t++) {
                const int k = 2 * c + t;
                int scale, min;
                k4_scale_min(sc, k, &scale, &min);
                const __m256 dl = _mm256_set1_ps(d * (float)scale);
                const __m256 ml = _mm256_set1_ps(dmin * (float)min);
                const __m256i hb = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(k)), one);
                const __m256i v = _mm256_or_si256(_mm256_and_si256(t ? _mm256_srli_epi16(q, 4) : q, m4),
                                                  _mm256_slli_epi16(hb, 4));
                st32_sub(y + 32 * k, v, dl, ml);
            }
        }
    }
}

AVX2 static void k_q6_k(const uint8_t *s, float *y, int64_t nb)
{
    const __m256i m4 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3), e32 = _mm256_set1_epi8(32);
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_q6_k), y += 256) {
        const uint8_t *ql = s + OFF(gguf_block_q6_k, ql);
        const uint8_t *qh = s + OFF(gguf_block_q6_k, qh);
        const uint8_t *sc = s + OFF(gguf_block_q6_k, scales);
        const float d = rd_f16c(s + OFF(gguf_block_q6_k, d));
        for (int h = 0; h < 2; h++) {
            const __m256i hh = _mm256_loadu_si256((const __m256i *)(qh + 32 * h));
            for (int c = 0; c < 4; c++) {
                const __m256i l = _mm256_loadu_si256((const __m256i *)(ql + 64 * h + 32 * (c % 2)));
                const __m256i lo = _mm256_and_si256(c / 2 ? _mm256_srli_epi16(l, 4) : l, m4);
                const __m256i hi = _mm256_and_si256(_mm256_srl_epi16(hh, _mm_cvtsi32_si128(2 * c)), m3);
                const __m256i q = _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), e32);
                const int e = 128 * h + 32 * c;
                const __m256 d0 = _mm256_set1_ps(d * (float)(int8_t)sc[e / 16]);
                const __m256 d1 = _mm256_set1_ps(d * (float)(int8_t)sc[e / 16 + 1]);
                const __m128i a = _mm256_castsi256_si128(q), b = _mm256_extracti128_si256(q, 1);
                st8_i8_mul(y + e, a, d0);
                st8_i8_mul(y + e + 8, _mm_srli_si128(a, 8), d0);
                st8_i8_mul(y + e + 16, b, d1);
                st8_i8_mul(y + e + 24, _mm_srli_si128(b, 8), d1);
            }
        }
    }
}

/* ---- table types: IQ4_NL, IQ4_XS, MXFP4, NVFP4 ---- */

AVX2 static inline __m128i lut16(const int8_t *table)
{
    return _mm_loadu_si128((const __m128i *)table);
}

AVX2 static void k_iq4_nl(const uint8_t *s, float *y, int64_t nb)
{
    const __m128i tab = lut16(gguf_iq4nl_values), m4 = _mm_set1_epi8(15);
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_iq4_nl), y += 32) {
        const __m256 d = _mm256_set1_ps(rd_f16c(s + OFF(gguf_block_iq4_nl, d)));
        const __m128i q = _mm_loadu_si128((const __m128i *)(s + OFF(gguf_block_iq4_nl, qs)));
        const __m128i lo = _mm_shuffle_epi8(tab, _mm_and_si128(q, m4));
        const __m128i hi = _mm_shuffle_epi8(tab, _mm_and_si128(_mm_srli_epi16(q, 4), m4));
        st8_i8_mul(y, lo, d);
        st8_i8_mul(y + 8, _mm_srli_si128(lo, 8), d);
        st8_i8_mul(y + 16, hi, d);
        st8_i8_mul(y + 24, _mm_srli_si128(hi, 8), d);
    }
}

AVX2 static void k_iq4_xs(const uint8_t *s, float *y, int64_t nb)
{
    const __m128i tab = lut16(gguf_iq4nl_values), m4 = _mm_set1_epi8(15);
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_iq4_xs), y += 256) {
        const float d = rd_f16c(s + OFF(gguf_block_iq4_xs, d));
        const uint16_t sh = gguf_rd_u16(s + OFF(gguf_block_iq4_xs, scales_h));
        const uint8_t *sl = s + OFF(gguf_block_iq4_xs, scales_l);
        const uint8_t *qs = s + OFF(gguf_block_iq4_xs, qs);
        for (int ib = 0; ib < 8; ib++) {
            const int ls = ((sl[ib / 2] >> (4 * (ib % 2))) & 15) | (((sh >> (2 * ib)) & 3) << 4);
            const __m256 dl = _mm256_set1_ps(d * (float)(ls - 32));
            const __m128i q = _mm_loadu_si128((const __m128i *)(qs + 16 * ib));
            const __m128i lo = _mm_shuffle_epi8(tab, _mm_and_si128(q, m4));
            const __m128i hi = _mm_shuffle_epi8(tab, _mm_and_si128(_mm_srli_epi16(q, 4), m4));
            float *o = y + 32 * ib;
            st8_i8_mul(o, lo, dl);
            st8_i8_mul(o + 8, _mm_srli_si128(lo, 8), dl);
            st8_i8_mul(o + 16, hi, dl);
            st8_i8_mul(o + 24, _mm_srli_si128(hi, 8), dl);
        }
    }
}

AVX2 static void k_mxfp4(const uint8_t *s, float *y, int64_t nb)
{
    const __m128i tab = lut16(gguf_fp4_e2m1_x2), m4 = _mm_set1_epi8(15);
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_mxfp4), y += 32) {
        const __m256 d = _mm256_set1_ps(gguf_e8m0_half(s[OFF(gguf_block_mxfp4, e)]));
        const __m128i q = _mm_loadu_si128((const __m128i *)(s + OFF(gguf_block_mxfp4, qs)));
        const __m128i lo = _mm_shuffle_epi8(tab, _mm_and_si128(q, m4));
        const __m128i hi = _mm_shuffle_epi8(tab, _mm_and_si128(_mm_srli_epi16(q, 4), m4));
        st8_i8_mul(y, lo, d);
        st8_i8_mul(y + 8, _mm_srli_si128(lo, 8), d);
        st8_i8_mul(y + 16, hi, d);
        st8_i8_mul(y + 24, _mm_srli_si128(hi, 8), d);
    }
}

AVX2 static void k_nvfp4(const uint8_t *s, float *y, int64_t nb)
{
    const __m128i tab = lut16(gguf_fp4_e2m1_x2), m4 = _mm_set1_epi8(15);
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_nvfp4), y += 64) {
        const uint8_t *ds = s + OFF(gguf_block_nvfp4, d);
        const __m128i q0 = _mm_loadu_si128((const __m128i *)(s + OFF(gguf_block_nvfp4, qs)));
        const __m128i q1 = _mm_loadu_si128((const __m128i *)(s + OFF(gguf_block_nvfp4, qs) + 16));
        const __m128i lo0 = _mm_shuffle_epi8(tab, _mm_and_si128(q0, m4));
        const __m128i hi0 = _mm_shuffle_epi8(tab, _mm_and_si128(_mm_srli_epi16(q0, 4), m4));
        const __m128i lo1 = _mm_shuffle_epi8(tab, _mm_and_si128(q1, m4));
        const __m128i hi1 = _mm_shuffle_epi8(tab, _mm_and_si128(_mm_srli_epi16(q1, 4), m4));
        const __m256 d0 = _mm256_set1_ps(gguf_ue4m3_half(ds[0]));
        const __m256 d1 = _mm256_set1_ps(gguf_ue4m3_half(ds[1]));
        const __m256 d2 = _mm256_set1_ps(gguf_ue4m3_half(ds[2]));
        const __m256 d3 = _mm256_set1_ps(gguf_ue4m3_half(ds[3]));
        st8_i8_mul(y, lo0, d0);
        st8_i8_mul(y + 8, hi0, d0);
        st8_i8_mul(y + 16, _mm_srli_si128(lo0, 8), d1);
        st8_i8_mul(y + 24, _mm_srli_si128(hi0, 8), d1);
        st8_i8_mul(y + 32, lo1, d2);
        st8_i8_mul(y + 40, hi1, d2);
        st8_i8_mul(y + 48, _mm_srli_si128(lo1, 8), d3);
        st8_i8_mul(y + 56, _mm_srli_si128(hi1, 8), d3);
    }
}

/* ---- Q5_0 / Q5_1: the fifth bits of 32 elements from one LE u32 ---- */

/* byte e of the result = 0x10 when bit e of qh is set, else 0 */
AVX2 static inline __m256i q5_high_bits(uint32_t qh)
{
    const __m256i rep = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh),
                                            _mm256_set_epi64x(0x0303030303030303ll, 0x0202020202020202ll,
                                                              0x0101010101010101ll, 0));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i on = _mm256_cmpeq_epi8(_mm256_and_si256(rep, bit), bit);
    return _mm256_and_si256(on, _mm256_set1_epi8(0x10));
}

AVX2 static void k_q5_0(const uint8_t *s, float *y, int64_t nb)
{
    const __m128i m4 = _mm_set1_epi8(15), e16 = _mm_set1_epi8(16);
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_q5_0), y += 32) {
        const __m256 d = _mm256_set1_ps(rd_f16c(s + OFF(gguf_block_q5_0, d)));
        const __m256i hb = q5_high_bits(gguf_rd_u32(s + OFF(gguf_block_q5_0, qh)));
        const __m128i q = _mm_loadu_si128((const __m128i *)(s + OFF(gguf_block_q5_0, qs)));
        const __m128i lo = _mm_sub_epi8(_mm_or_si128(_mm_and_si128(q, m4), _mm256_castsi256_si128(hb)), e16);
        const __m128i hi = _mm_sub_epi8(
            _mm_or_si128(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm256_extracti128_si256(hb, 1)), e16);
        st8_i8_mul(y, lo, d);
        st8_i8_mul(y + 8, _mm_srli_si128(lo, 8), d);
        st8_i8_mul(y + 16, hi, d);
        st8_i8_mul(y + 24, _mm_srli_si128(hi, 8), d);
    }
}

AVX2 static void k_q5_1(const uint8_t *s, float *y, int64_t nb)
{
    const __m128i m4 = _mm_set1_epi8(15);
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_q5_1), y += 32) {
        const __m256 d = _mm256_set1_ps(rd_f16c(s + OFF(gguf_block_q5_1, d)));
        const __m256 m = _mm256_set1_ps(rd_f16c(s + OFF(gguf_block_q5_1, m)));
        const __m256i hb = q5_high_bits(gguf_rd_u32(s + OFF(gguf_block_q5_1, qh)));
        const __m128i q = _mm_loadu_si128((const __m128i *)(s + OFF(gguf_block_q5_1, qs)));
        const __m128i lo = _mm_or_si128(_mm_and_si128(q, m4), _mm256_castsi256_si128(hb));
        const __m128i hi = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm256_extracti128_si256(hb, 1));
        st8_i8_mul_add(y, lo, d, m);
        st8_i8_mul_add(y + 8, _mm_srli_si128(lo, 8), d, m);
        st8_i8_mul_add(y + 16, hi, d, m);
        st8_i8_mul_add(y + 24, _mm_srli_si128(hi, 8), d, m);
    }
}

/* ---- TQ2_0 and Q1_0 ---- */

AVX2 static void k_tq2_0(const uint8_t *s, float *y, int64_t nb)
{
    const __m128i m3 = _mm_set1_epi8(3), one = _mm_set1_epi8(1);
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_tq2_0), y += 256) {
        const uint8_t *qs = s + OFF(gguf_block_tq2_0, qs);
        const __m256 d = _mm256_set1_ps(rd_f16c(s + OFF(gguf_block_tq2_0, d)));
        for (int h = 0; h < 2; h++) {
            const __m128i q0 = _mm_loadu_si128((const __m128i *)(qs + 32 * h));
            const __m128i q1 = _mm_loadu_si128((const __m128i *)(qs + 32 * h + 16));
            for (int j = 0; j < 4; j++) {
                const __m128i sh = _mm_cvtsi32_si128(2 * j);
                const __m128i a = _mm_sub_epi8(_mm_and_si128(_mm_srl_epi16(q0, sh), m3), one);
                const __m128i b = _mm_sub_epi8(_mm_and_si128(_mm_srl_epi16(q1, sh), m3), one);
                float *o = y + 128 * h + 32 * j;
                st8_i8_mul(o, a, d);
                st8_i8_mul(o + 8, _mm_srli_si128(a, 8), d);
                st8_i8_mul(o + 16, b, d);
                st8_i8_mul(o + 24, _mm_srli_si128(b, 8), d);
            }
        }
    }
}

/* lanes j of the result: all ones when bit j of b is set */
AVX2 static inline __m256 bits8_mask(unsigned b)
{
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)b), bit), bit));
}

AVX2 static void k_q1_0(const uint8_t *s, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_q1_0), y += 128) {
        const float d = rd_f16c(s + OFF(gguf_block_q1_0, d));
        const __m256 pd = _mm256_set1_ps(d), nd = _mm256_set1_ps(-d);
        const uint8_t *qs = s + OFF(gguf_block_q1_0, qs);
        for (int k = 0; k < 16; k++)
            _mm256_storeu_ps(y + 8 * k, _mm256_blendv_ps(nd, pd, bits8_mask(qs[k])));
    }
}

/* ---- IQ grids: db * grid, negated (sign bit flipped, as the reference
 * does) where the sign bit is set ---- */

AVX2 static inline __m256 signs8(unsigned b)
{
    return _mm256_and_ps(bits8_mask(b), _mm256_set1_ps(-0.0f));
}

AVX2 static inline __m256 grid8_u8(const uint8_t *g)
{
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)g)));
}

AVX2 static inline __m256 grid44_u8(const uint8_t *g1, const uint8_t *g2)
{
    uint32_t a, b;
    memcpy(&a, g1, 4);
    memcpy(&b, g2, 4);
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_setr_epi32((int)a, (int)b, 0, 0)));
}

AVX2 static inline void st_grid(float *o, __m256 db, __m256 g, unsigned signs)
{
    _mm256_storeu_ps(o, _mm256_xor_ps(_mm256_mul_ps(db, g), signs8(signs)));
}

AVX2 static void k_iq2_xxs(const uint8_t *s, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_iq2_xxs), y += 256) {
        const float d = rd_f16c(s + OFF(gguf_block_iq2_xxs, d));
        const uint8_t *q = s + OFF(gguf_block_iq2_xxs, qs);
        for (int ib = 0; ib < 8; ib++) {
            const uint32_t aux = gguf_rd_u32(q + 8 * ib + 4);
            const __m256 db = _mm256_set1_ps(d * (0.5f + (float)(aux >> 28)) * 0.25f);
            for (int l = 0; l < 4; l++)
                st_grid(y + 32 * ib + 8 * l, db, grid8_u8(gguf_iq2xxs_grid[q[8 * ib + l]]),
                        gguf_iq2_ksigns[(aux >> (7 * l)) & 127]);
        }
    }
}

AVX2 static void k_iq2_xs(const uint8_t *s, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_iq2_xs), y += 256) {
        const float d = rd_f16c(s + OFF(gguf_block_iq2_xs, d));
        const uint8_t *q = s + OFF(gguf_block_iq2_xs, qs);
        const uint8_t *sc = s + OFF(gguf_block_iq2_xs, scales);
        for (int ib = 0; ib < 8; ib++) {
            const __m256 db[2] = {_mm256_set1_ps(d * (0.5f + (float)(sc[ib] & 15)) * 0.25f),
                                  _mm256_set1_ps(d * (0.5f + (float)(sc[ib] >> 4)) * 0.25f)};
            for (int l = 0; l < 4; l++) {
                const uint16_t v = gguf_rd_u16(q + 2 * (4 * ib + l));
                st_grid(y + 32 * ib + 8 * l, db[l / 2], grid8_u8(gguf_iq2xs_grid[v & 511]),
                        gguf_iq2_ksigns[v >> 9]);
            }
        }
    }
}

AVX2 static void k_iq2_s(const uint8_t *s, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_iq2_s), y += 256) {
        const float d = rd_f16c(s + OFF(gguf_block_iq2_s, d));
        const uint8_t *qs = s + OFF(gguf_block_iq2_s, qs);
        const uint8_t *qh = s + OFF(gguf_block_iq2_s, qh);
        const uint8_t *sc = s + OFF(gguf_block_iq2_s, scales);
        for (int ib = 0; ib < 8; ib++) {
            const __m256 db[2] = {_mm256_set1_ps(d * (0.5f + (float)(sc[ib] & 15)) * 0.25f),
                                  _mm256_set1_ps(d * (0.5f + (float)(sc[ib] >> 4)) * 0.25f)};
            for (int l = 0; l < 4; l++) {
                const int idx = qs[4 * ib + l] | (((qh[ib] >> (2 * l)) & 3) << 8);
                st_grid(y + 32 * ib + 8 * l, db[l / 2], grid8_u8(gguf_iq2s_grid[idx]),
                        qs[32 + 4 * ib + l]);
            }
        }
    }
}

AVX2 static void k_iq3_xxs(const uint8_t *s, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_iq3_xxs), y += 256) {
        const float d = rd_f16c(s + OFF(gguf_block_iq3_xxs, d));
        const uint8_t *qs = s + OFF(gguf_block_iq3_xxs, qs);
        for (int ib = 0; ib < 8; ib++) {
            const uint32_t aux = gguf_rd_u32(qs + 64 + 4 * ib);
            const __m256 db = _mm256_set1_ps(d * (0.5f + (float)(aux >> 28)) * 0.5f);
            for (int l = 0; l < 4; l++)
                st_grid(y + 32 * ib + 8 * l, db,
                        grid44_u8(gguf_iq3xxs_grid[qs[8 * ib + 2 * l]], gguf_iq3xxs_grid[qs[8 * ib + 2 * l + 1]]),
                        gguf_iq2_ksigns[(aux >> (7 * l)) & 127]);
        }
    }
}

AVX2 static void k_iq3_s(const uint8_t *s, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_iq3_s), y += 256) {
        const float d = rd_f16c(s + OFF(gguf_block_iq3_s, d));
        const uint8_t *qs = s + OFF(gguf_block_iq3_s, qs);
        const uint8_t *qh = s + OFF(gguf_block_iq3_s, qh);
        const uint8_t *signs = s + OFF(gguf_block_iq3_s, signs);
        const uint8_t *sc = s + OFF(gguf_block_iq3_s, scales);
        for (int ib = 0; ib < 8; ib++) {
            const __m256 db = _mm256_set1_ps(d * (float)(1 + 2 * ((sc[ib / 2] >> (4 * (ib % 2))) & 15)));
            for (int l = 0; l < 4; l++) {
                const int i1 = qs[8 * ib + 2 * l] | (((qh[ib] >> (2 * l)) & 1) << 8);
                const int i2 = qs[8 * ib + 2 * l + 1] | (((qh[ib] >> (2 * l + 1)) & 1) << 8);
                st_grid(y + 32 * ib + 8 * l, db, grid44_u8(gguf_iq3s_grid[i1], gguf_iq3s_grid[i2]),
                        signs[4 * ib + l]);
            }
        }
    }
}

/* IQ1: dl * (grid + delta) */
AVX2 static inline void st_iq1(float *o, __m256 dl, const int8_t *g, __m256 delta)
{
    const __m256 gv = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)g)));
    _mm256_storeu_ps(o, _mm256_mul_ps(dl, _mm256_add_ps(gv, delta)));
}

AVX2 static void k_iq1_s(const uint8_t *s, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_iq1_s), y += 256) {
        const float d = rd_f16c(s + OFF(gguf_block_iq1_s, d));
        const uint8_t *qs = s + OFF(gguf_block_iq1_s, qs);
        const uint8_t *qhp = s + OFF(gguf_block_iq1_s, qh);
        for (int ib = 0; ib < 8; ib++) {
            const uint16_t qh = gguf_rd_u16(qhp + 2 * ib);
            const __m256 dl = _mm256_set1_ps(d * (float)(2 * ((qh >> 12) & 7) + 1));
            const __m256 delta = _mm256_set1_ps(qh & 0x8000 ? -GGUF_IQ1S_DELTA : GGUF_IQ1S_DELTA);
            for (int l = 0; l < 4; l++)
                st_iq1(y + 32 * ib + 8 * l, dl, gguf_iq1s_grid[qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8)],
                       delta);
        }
    }
}

AVX2 static void k_iq1_m(const uint8_t *s, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_iq1_m), y += 256) {
        const uint8_t *qs = s + OFF(gguf_block_iq1_m, qs);
        const uint8_t *qh = s + OFF(gguf_block_iq1_m, qh);
        const uint8_t *scp = s + OFF(gguf_block_iq1_m, scales);
        uint16_t sc[4];
        for (int k = 0; k < 4; k++)
            sc[k] = gguf_rd_u16(scp + 2 * k);
        const float d = gguf_fp16_to_fp32(gguf_iq1m_d_bits(scp));
        for (int ib = 0; ib < 8; ib++) {
            const int sv = sc[ib / 2] >> (6 * (ib % 2));
            const __m256 dl[2] = {_mm256_set1_ps(d * (float)(2 * (sv & 7) + 1)),
                                  _mm256_set1_ps(d * (float)(2 * ((sv >> 3) & 7) + 1))};
            for (int l = 0; l < 4; l++) {
                const int nib = (qh[2 * ib + l / 2] >> (4 * (l % 2))) & 15;
                const __m256 delta = _mm256_set1_ps(nib & 8 ? -GGUF_IQ1S_DELTA : GGUF_IQ1S_DELTA);
                st_iq1(y + 32 * ib + 8 * l, dl[l / 2], gguf_iq1s_grid[qs[4 * ib + l] | ((nib & 7) << 8)], delta);
            }
        }
    }
}

gguf_dequant_fn gguf_dequant_avx2_kernel(uint32_t type)
{
    switch (type) {
    case GGUF_TYPE_F16: return k_f16;
    case GGUF_TYPE_BF16: return k_bf16;
    case GGUF_TYPE_Q4_0: return k_q4_0;
    case GGUF_TYPE_Q4_1: return k_q4_1;
    case GGUF_TYPE_Q8_0: return k_q8_0;
    case GGUF_TYPE_Q2_K: return k_q2_k;
    case GGUF_TYPE_Q3_K: return k_q3_k;
    case GGUF_TYPE_Q4_K: return k_q4_k;
    case GGUF_TYPE_Q5_K: return k_q5_k;
    case GGUF_TYPE_Q6_K: return k_q6_k;
    case GGUF_TYPE_IQ4_NL: return k_iq4_nl;
    case GGUF_TYPE_IQ4_XS: return k_iq4_xs;
    case GGUF_TYPE_MXFP4: return k_mxfp4;
    case GGUF_TYPE_NVFP4: return k_nvfp4;
    case GGUF_TYPE_Q5_0: return k_q5_0;
    case GGUF_TYPE_Q5_1: return k_q5_1;
    case GGUF_TYPE_TQ2_0: return k_tq2_0;
    case GGUF_TYPE_Q1_0: return k_q1_0;
    case GGUF_TYPE_IQ2_XXS: return k_iq2_xxs;
    case GGUF_TYPE_IQ2_XS: return k_iq2_xs;
    case GGUF_TYPE_IQ2_S: return k_iq2_s;
    case GGUF_TYPE_IQ3_XXS: return k_iq3_xxs;
    case GGUF_TYPE_IQ3_S: return k_iq3_s;
    case GGUF_TYPE_IQ1_S: return k_iq1_s;
    case GGUF_TYPE_IQ1_M: return k_iq1_m;
    default: return NULL;
    }
}

#else /* not x86-64 */

gguf_dequant_fn gguf_dequant_avx2_kernel(uint32_t type)
{
    (void)type;
    return NULL;
}

#endif
