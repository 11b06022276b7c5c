/*
 * AVX2 + F16C kernels, compiled with per-function target attributes so the
 * library still runs on any x86-64; dequant.c calls them only after
 * __builtin_cpu_supports("avx2") and ("f16c").
 *
 * Bit-exactness with the reference (dequant_scalar.c) holds because every
 * element is computed by the same IEEE operations in the same order: integer
 * to float conversion (exact for these small integers), then one multiply
 * (and for the K-quants a multiply and a subtract, never fused: "fma" is
 * deliberately not in the target list). Scales are decoded with the scalar
 * helpers, so F16 scale conversion is shared, not re-implemented.
 *
 * Types without a kernel here use the reference under this path.
 */
#include "dequant_internal.h"

#include "gguf/blocks.h"
#include "gguf/types.h"

#include <stddef.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,f16c")))
#define OFF(type, field) offsetof(type, field)

/* ---- helpers: 8 int8 or int32 lanes -> scaled floats ---- */

/* y[0..7] = (float)q[0..7] * d, q the low 8 signed bytes of v */
AVX2 static inline void st8_i8_mul(float *y, __m128i v, __m256 d)
{
    _mm256_storeu_ps(y, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)), d));
}

/* y[0..7] = d * (float)q - m */
AVX2 static inline void st8_i8_mul_sub(float *y, __m128i v, __m256 d, __m256 m)
{
    const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
    _mm256_storeu_ps(y, _mm256_sub_ps(_mm256_mul_ps(d, q), m));
}

/* y[0..7] = (float)q * d + m */
AVX2 static inline void st8_i8_mul_add(float *y, __m128i v, __m256 d, __m256 m)
{
    const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
    _mm256_storeu_ps(y, _mm256_add_ps(_mm256_mul_ps(q, d), m));
}

/* 32 signed bytes times d */
AVX2 static inline void st32_i8_mul(float *y, __m256i v, __m256 d)
{
    const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
    st8_i8_mul(y, lo, d);
    st8_i8_mul(y + 8, _mm_srli_si128(lo, 8), d);
    st8_i8_mul(y + 16, hi, d);
    st8_i8_mul(y + 24, _mm_srli_si128(hi, 8), d);
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
        const __m256 d = _mm256_set1_ps(gguf_rd_f16(s + OFF(gguf_block_q4_0, d)));
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
        const __m256 d = _mm256_set1_ps(gguf_rd_f16(s + OFF(gguf_block_q4_1, d)));
        const __m256 m = _mm256_set1_ps(gguf_rd_f16(s + OFF(gguf_block_q4_1, m)));
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
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_q8_0), y += 32) {
        const __m256 d = _mm256_set1_ps(gguf_rd_f16(s + OFF(gguf_block_q8_0, d)));
        st32_i8_mul(y, _mm256_loadu_si256((const __m256i *)(s + OFF(gguf_block_q8_0, qs))), d);
    }
}

/* ---- K-quants ---- */

AVX2 static void k_q2_k(const uint8_t *s, float *y, int64_t nb)
{
    const __m128i m3 = _mm_set1_epi8(3);
    for (int64_t i = 0; i < nb; i++, s += sizeof(gguf_block_q2_k), y += 256) {
        const uint8_t *sc = s + OFF(gguf_block_q2_k, scales);
        const uint8_t *qs = s + OFF(gguf_block_q2_k, qs);
        const float d = gguf_rd_f16(s + OFF(gguf_block_q2_k, d));
        const float dmin = gguf_rd_f16(s + OFF(gguf_block_q2_k, dmin));
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
        const float d = gguf_rd_f16(s + OFF(gguf_block_q3_k, d));
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
        const float d = gguf_rd_f16(s + OFF(gguf_block_q4_k, d));
        const float dmin = gguf_rd_f16(s + OFF(gguf_block_q4_k, dmin));
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
        const float d = gguf_rd_f16(s + OFF(gguf_block_q5_k, d));
        const float dmin = gguf_rd_f16(s + OFF(gguf_block_q5_k, dmin));
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
        const float d = gguf_rd_f16(s + OFF(gguf_block_q6_k, d));
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
        const __m256 d = _mm256_set1_ps(gguf_rd_f16(s + OFF(gguf_block_iq4_nl, d)));
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
        const float d = gguf_rd_f16(s + OFF(gguf_block_iq4_xs, d));
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
