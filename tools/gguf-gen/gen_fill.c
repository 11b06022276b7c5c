/*
 * Tensor data: deterministic values for plain types, and for block types
 * random codes under small, finite scales.
 *
 * Every block is first filled with random bytes (every bit pattern of a code
 * field is a valid code: grid indices, sign bits, nibbles, ternary digits),
 * then its scale fields are overwritten so that dequantized values stay within
 * about +-A, where A is the tensor's amplitude (0.06 for weights). The divisor
 * of each type is the largest |code * sub-scale| its layout can express, so
 * the bound holds whatever the random codes are. Field offsets come from
 * gguf/blocks.h.
 */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "gen.h"
#include "gguf/blocks.h"

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static void put_half(uint8_t *p, float f) { put16(p, gen_fp32_to_fp16(f)); }

static void random_bytes(gen_rng *r, uint8_t *p, size_t n)
{
    while (n >= 8) {
        uint64_t x = gen_rng_next(r);
        memcpy(p, &x, 8);
        p += 8;
        n -= 8;
    }
    if (n) {
        uint64_t x = gen_rng_next(r);
        memcpy(p, &x, n);
    }
}

/* A scale in [0.6, 1] * amp / maxcode: values reach at most amp. The layouts
 * below pick sub-scale ranges so that this d is a normal half for amp 0.06. */
static float scale_for(gen_rng *r, float amp, float maxcode)
{
    return amp / maxcode * gen_rng_range(r, 0.6f, 1.0f);
}

/* UE4M3 (bias 7, no sign) as gguf-py and ggml's CPU path read it, times 0.5 */
static float ue4m3_half(uint8_t x)
{
    int e = (x >> 3) & 15, m = x & 7;
    if (x == 0 || x == 0x7f)
        return 0.0f;
    float v = e == 0 ? (float)m * (1.0f / 512.0f) : (1.0f + (float)m / 8.0f) * ldexpf(1.0f, e - 7);
    return v * 0.5f;
}

/* Largest UE4M3 byte (bit 7 clear) whose value does not exceed target. */
static uint8_t ue4m3_below(float target)
{
    uint8_t best = 1;
    for (int x = 1; x < 0x7f; x++)
        if (ue4m3_half((uint8_t)x) <= target && ue4m3_half((uint8_t)x) > ue4m3_half(best))
            best = (uint8_t)x;
    return best;
}

/*
 * Q4_K / Q5_K: eight 6-bit scales and eight 6-bit mins packed in 12 bytes
 *   bytes 0-3:  sc[0..3] (bits 0-5), sc[4..7] bits 4-5 (bits 6-7)
 *   bytes 4-7:  mn[0..3] (bits 0-5), mn[4..7] bits 4-5 (bits 6-7)
 *   bytes 8-11: sc[4..7] bits 0-3 (low nibble), mn[4..7] bits 0-3 (high nibble)
 */
static void pack_k_scales(uint8_t *q, const uint8_t *sc, const uint8_t *mn)
{
    for (int j = 0; j < 4; j++) {
        q[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        q[j + 4] = (uint8_t)((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
        q[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
    }
}

/*
 * Q4_K / Q5_K with x = d*sc*q - dmin*mn: sub-scales 8..15 and mn = sc with
 * dmin = d*qmax/2 centre every sub-block, |x| <= d*15*qmax/2. Small sub-scales
 * keep d a normal half (real files often have subnormal d; tools flag those).
 */
static void fill_k_minmax(gen_rng *r, float amp, uint8_t *b, size_t off_d, size_t off_dmin,
                          size_t off_scales, float qmax)
{
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; j++)
        sc[j] = mn[j] = (uint8_t)(8 + gen_rng_below(r, 8));
    pack_k_scales(b + off_scales, sc, mn);
    float d = gen_fp16_to_fp32(gen_fp32_to_fp16(scale_for(r, amp, 15 * qmax / 2)));
    put_half(b + off_d, d);
    put_half(b + off_dmin, d * qmax / 2);
}

static void fill_block(uint32_t type, gen_rng *r, float amp, uint8_t *b, uint32_t size)
{
    random_bytes(r, b, size);
    switch (type) {
    case GGUF_TYPE_Q4_0:
        put_half(b + offsetof(gguf_block_q4_0, d), scale_for(r, amp, 8));
        break;
    case GGUF_TYPE_Q4_1: {
        float d = scale_for(r, amp, 8);
        put_half(b + offsetof(gguf_block_q4_1, d), d);
        put_half(b + offsetof(gguf_block_q4_1, m), -8.0f * d);
        break;
    }
    case GGUF_TYPE_Q5_0:
        put_half(b + offsetof(gguf_block_q5_0, d), scale_for(r, amp, 16));
        break;
    case GGUF_TYPE_Q5_1: {
        float d = scale_for(r, amp, 16);
        put_half(b + offsetof(gguf_block_q5_1, d), d);
        put_half(b + offsetof(gguf_block_q5_1, m), -16.0f * d);
        break;
    }
    case GGUF_TYPE_Q8_0:
        put_half(b + offsetof(gguf_block_q8_0, d), scale_for(r, amp, 128));
        break;
    case GGUF_TYPE_Q8_1: {
        /* s is the cached d * sum(qs): keep it consistent. */
        float d = gen_fp16_to_fp32(gen_fp32_to_fp16(scale_for(r, amp, 128)));
        int sum = 0;
        for (int i = 0; i < GGUF_QK8_1; i++)
            sum += (int8_t)b[offsetof(gguf_block_q8_1, qs) + (size_t)i];
        put_half(b + offsetof(gguf_block_q8_1, d), d);
        put_half(b + offsetof(gguf_block_q8_1, s), d * (float)sum);
        break;
    }
    case GGUF_TYPE_Q2_K: {
        /* x = d * sc * q - dmin * m, sc and m nibbles, q in 0..3 */
        float d = scale_for(r, amp, 45);
        put_half(b + offsetof(gguf_block_q2_k, d), d);
        put_half(b + offsetof(gguf_block_q2_k, dmin), 1.5f * d);
        break;
    }
    case GGUF_TYPE_Q3_K: /* x = d * (sc - 32) * q, q in -4..3 */
        put_half(b + offsetof(gguf_block_q3_k, d), scale_for(r, amp, 128));
        break;
    case GGUF_TYPE_Q4_K:
        fill_k_minmax(r, amp, b, offsetof(gguf_block_q4_k, d), offsetof(gguf_block_q4_k, dmin),
                      offsetof(gguf_block_q4_k, scales), 15);
        break;
    case GGUF_TYPE_Q5_K:
        fill_k_minmax(r, amp, b, offsetof(gguf_block_q5_k, d), offsetof(gguf_block_q5_k, dmin),
                      offsetof(gguf_block_q5_k, scales), 31);
        break;
    case GGUF_TYPE_Q6_K: {
        /* x = d * sc(int8) * (q - 32); sub-scales +-(8..15) keep d normal */
        int8_t *sc = (int8_t *)(b + offsetof(gguf_block_q6_k, scales));
        for (int j = 0; j < GGUF_QK_K / 16; j++) {
            int v = 8 + (int)gen_rng_below(r, 8);
            sc[j] = (int8_t)(gen_rng_below(r, 2) ? v : -v);
        }
        put_half(b + offsetof(gguf_block_q6_k, d), scale_for(r, amp, 15 * 32));
        break;
    }
    case GGUF_TYPE_Q8_K: {
        float d = scale_for(r, amp, 128);
        memcpy(b + offsetof(gguf_block_q8_k, d), &d, 4);
        for (int g = 0; g < GGUF_QK_K / 16; g++) {
            int16_t s = 0;
            for (int i = 0; i < 16; i++)
                s = (int16_t)(s + (int8_t)b[offsetof(gguf_block_q8_k, qs) + (size_t)(g * 16 + i)]);
            memcpy(b + offsetof(gguf_block_q8_k, bsums) + (size_t)g * 2, &s, 2);
        }
        break;
    }
    case GGUF_TYPE_TQ1_0:
        put_half(b + offsetof(gguf_block_tq1_0, d), scale_for(r, amp, 1));
        break;
    case GGUF_TYPE_TQ2_0:
        put_half(b + offsetof(gguf_block_tq2_0, d), scale_for(r, amp, 2));
        break;
    case GGUF_TYPE_IQ2_XXS: /* d * (0.5 + ls) * 0.25 * grid (<= 43) */
        put_half(b + offsetof(gguf_block_iq2_xxs, d), scale_for(r, amp, 15.5f * 0.25f * 43));
        break;
    case GGUF_TYPE_IQ2_XS:
        put_half(b + offsetof(gguf_block_iq2_xs, d), scale_for(r, amp, 15.5f * 0.25f * 43));
        break;
    case GGUF_TYPE_IQ2_S:
        put_half(b + offsetof(gguf_block_iq2_s, d), scale_for(r, amp, 15.5f * 0.25f * 43));
        break;
    case GGUF_TYPE_IQ3_XXS: /* d * (0.5 + ls) * 0.5 * grid (<= 62) */
        put_half(b + offsetof(gguf_block_iq3_xxs, d), scale_for(r, amp, 15.5f * 0.5f * 62));
        break;
    case GGUF_TYPE_IQ3_S: /* d * (1 + 2 ls) * grid (<= 15) */
        put_half(b + offsetof(gguf_block_iq3_s, d), scale_for(r, amp, 31 * 15));
        break;
    case GGUF_TYPE_IQ1_S: /* d * (2 ls + 1) * (grid +- 0.125) */
        put_half(b + offsetof(gguf_block_iq1_s, d), scale_for(r, amp, 15 * 1.125f));
        break;
    case GGUF_TYPE_IQ1_M: {
        /*
         * The f16 super-block scale lives in the top nibble of each of the
         * four little-endian uint16 of scales[8]:
         *   scales: [lo0 hi0][lo1 hi1][lo2 hi2][lo3 hi3]
         *   d bits 0-3 = hi0 >> 4, 4-7 = hi1 >> 4, 8-11 = hi2 >> 4, 12-15 = hi3 >> 4
         */
        uint16_t d = gen_fp32_to_fp16(scale_for(r, amp, 15 * 1.125f));
        uint8_t *sc = b + offsetof(gguf_block_iq1_m, scales);
        for (int i = 0; i < 4; i++)
            sc[2 * i + 1] = (uint8_t)((sc[2 * i + 1] & 0x0f) | (((d >> (4 * i)) & 15) << 4));
        break;
    }
    case GGUF_TYPE_IQ4_NL: /* d * table (|table| <= 127) */
        put_half(b + offsetof(gguf_block_iq4_nl, d), scale_for(r, amp, 127));
        break;
    case GGUF_TYPE_IQ4_XS: {
        /* d * (ls - 32) * table; ls - 32 in -4..3 keeps d normal. ls of
         * sub-block i: low 4 bits = nibble i of scales_l, high 2 = bits 2i of scales_h */
        uint8_t *sl = b + offsetof(gguf_block_iq4_xs, scales_l);
        uint16_t sh = 0;
        memset(sl, 0, GGUF_QK_K / 64);
        for (int i = 0; i < GGUF_QK_K / 32; i++) {
            unsigned ls = 28 + gen_rng_below(r, 8);
            sl[i / 2] |= (uint8_t)((ls & 15) << (4 * (i % 2)));
            sh |= (uint16_t)((ls >> 4) << (2 * i));
        }
        put16(b + offsetof(gguf_block_iq4_xs, scales_h), sh);
        put_half(b + offsetof(gguf_block_iq4_xs, d), scale_for(r, amp, 4 * 127));
        break;
    }
    case GGUF_TYPE_MXFP4: {
        /* x = e2m1x2 * 2^(e - 128), |e2m1x2| <= 12 */
        int e0 = 128 + (int)floorf(log2f(amp / 12.0f));
        int e = e0 - (int)gen_rng_below(r, 2);
        b[offsetof(gguf_block_mxfp4, e)] = (uint8_t)(e < 1 ? 1 : e > 254 ? 254 : e);
        break;
    }
    case GGUF_TYPE_NVFP4: {
        /* x = e2m1x2 * ue4m3 / 2. Scales stay normal UE4M3 (exponent >= 1, the
         * smallest being 2^-6): to keep |x| near amp the codes avoid the two
         * largest magnitudes (x2 values 8 and 12 become 3 and 4... via & ~2). */
        for (int s = 0; s < 4; s++) {
            uint8_t e = ue4m3_below(scale_for(r, amp, 6));
            b[offsetof(gguf_block_nvfp4, d) + (size_t)s] = e < 8 ? 8 : e;
        }
        uint8_t *qs = b + offsetof(gguf_block_nvfp4, qs);
        for (int i = 0; i < GGUF_QK_NVFP4 / 2; i++)
            for (int h = 0; h < 2; h++) {
                uint8_t n = (uint8_t)((qs[i] >> (4 * h)) & 15);
                if ((n & 7) > 5)
                    n = (uint8_t)(n & ~2);
                qs[i] = (uint8_t)((qs[i] & ~(15 << (4 * h))) | (n << (4 * h)));
            }
        break;
    }
    case GGUF_TYPE_Q1_0:
        put_half(b + offsetof(gguf_block_q1_0, d), scale_for(r, amp, 1));
        break;
    default:
        break;
    }
}

static inline double value_of(const gen_tensor *t, gen_rng *r)
{
    double v = gen_rng_range(r, -t->scale, t->scale);
    return t->init == GEN_INIT_NORM ? 1.0 + v : v; /* ZERO never gets here */
}

/*
 * Llama 3 RoPE frequency divisors, in float32 steps as the converter computes
 * them (LlamaModel.generate_extra_tensors, low/high frequency factors 1 and 4):
 * 1 for short wavelengths, `factor` for long ones, a smooth blend between.
 */
static float llama3_rope_factor(const gen_tensor *t, int64_t i)
{
    float base = t->p[0], factor = t->p[1], old_ctx = t->p[2];
    float dim = (float)(t->ne[0] * 2);
    float freq = 1.0f / powf(base, (float)(2 * i) / dim);
    float wavelen = 2.0f * 3.14159265358979323846f / freq;
    float low_wavelen = old_ctx / 1.0f, high_wavelen = old_ctx / 4.0f;
    if (wavelen < high_wavelen)
        return 1.0f;
    if (wavelen > low_wavelen)
        return factor;
    float smooth = (old_ctx / wavelen - 1.0f) / (4.0f - 1.0f);
    return 1.0f / ((1.0f - smooth) / factor + smooth);
}

void gen_fill_rows(const gen_tensor *t, gen_rng *r, uint8_t *out, int64_t n_rows)
{
    const gguf_type_info *ti = gguf_type_get(t->type);
    int64_t n = t->ne[0] * n_rows;
    if (t->init == GEN_INIT_ROPE_FREQS && t->type == GGUF_TYPE_F32) {
        for (int64_t i = 0; i < n; i++) {
            float v = llama3_rope_factor(t, i % t->ne[0]);
            memcpy(out + i * 4, &v, 4);
        }
        return;
    }
    if (t->init == GEN_INIT_ZERO) {
        uint64_t bytes = 0;
        gguf_type_row_bytes(t->type, t->ne[0], &bytes);
        memset(out, 0, (size_t)(bytes * (uint64_t)n_rows));
        return;
    }
    if (ti->quantized) {
        int64_t nb = n / ti->block_size;
        for (int64_t i = 0; i < nb; i++)
            fill_block(t->type, r, t->scale, out + i * ti->type_size, ti->type_size);
        return;
    }
    /* One loop per type: the value stream is the same for every type. */
    switch (t->type) {
    case GGUF_TYPE_F32:
        for (int64_t i = 0; i < n; i++) {
            float v = (float)value_of(t, r);
            memcpy(out + i * 4, &v, 4);
        }
        break;
    case GGUF_TYPE_F16:
        for (int64_t i = 0; i < n; i++)
            put16(out + i * 2, gen_fp32_to_fp16((float)value_of(t, r)));
        break;
    case GGUF_TYPE_BF16:
        for (int64_t i = 0; i < n; i++)
            put16(out + i * 2, gen_fp32_to_bf16((float)value_of(t, r)));
        break;
    case GGUF_TYPE_F64:
        for (int64_t i = 0; i < n; i++) {
            double v = value_of(t, r);
            memcpy(out + i * 8, &v, 8);
        }
        break;
    default: /* I8 .. I64: small integers, the value x 100, little-endian */
        for (int64_t i = 0; i < n; i++) {
            int64_t k = (int64_t)lround(value_of(t, r) * 100.0);
            memcpy(out + i * ti->type_size, &k, ti->type_size);
        }
        break;
    }
}
