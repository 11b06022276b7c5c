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

/* A scale in [0.5, 1] * amp / maxcode: values reach at most amp. */
static float scale_for(gen_rng *r, float amp, float maxcode)
{
    return amp / maxcode * gen_rng_range(r, 0.5f, 1.0f);
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
    case GGUF_TYPE_Q4_K: {
        float d = scale_for(r, amp, 63 * 15);
        put_half(b + offsetof(gguf_block_q4_k, d), d);
        put_half(b + offsetof(gguf_block_q4_k, dmin), 7.5f * d);
        break;
    }
    case GGUF_TYPE_Q5_K: {
        float d = scale_for(r, amp, 63 * 31);
        put_half(b + offsetof(gguf_block_q5_k, d), d);
        put_half(b + offsetof(gguf_block_q5_k, dmin), 15.5f * d);
        break;
    }
    case GGUF_TYPE_Q6_K: /* x = d * sc(int8) * (q - 32) */
        put_half(b + offsetof(gguf_block_q6_k, d), scale_for(r, amp, 128 * 32));
        break;
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
    case GGUF_TYPE_IQ4_XS: /* d * (ls - 32) * table */
        put_half(b + offsetof(gguf_block_iq4_xs, d), scale_for(r, amp, 32 * 127));
        break;
    case GGUF_TYPE_MXFP4: {
        /* x = e2m1x2 * 2^(e - 128), |e2m1x2| <= 12 */
        int e0 = 128 + (int)floorf(log2f(amp / 12.0f));
        int e = e0 - (int)gen_rng_below(r, 2);
        b[offsetof(gguf_block_mxfp4, e)] = (uint8_t)(e < 1 ? 1 : e > 254 ? 254 : e);
        break;
    }
    case GGUF_TYPE_NVFP4: {
        /* x = e2m1x2 * ue4m3 / 2, |e2m1x2| <= 12; four sub-block scales */
        for (int s = 0; s < 4; s++)
            b[offsetof(gguf_block_nvfp4, d) + (size_t)s] = ue4m3_below(scale_for(r, amp, 12));
        break;
    }
    case GGUF_TYPE_Q1_0:
        put_half(b + offsetof(gguf_block_q1_0, d), scale_for(r, amp, 1));
        break;
    default:
        break;
    }
}

static double value_of(const gen_tensor *t, gen_rng *r)
{
    switch (t->init) {
    case GEN_INIT_NORM:
        return 1.0 + gen_rng_range(r, -t->scale, t->scale);
    case GEN_INIT_ZERO:
        return 0.0;
    default:
        return gen_rng_range(r, -t->scale, t->scale);
    }
}

void gen_fill_rows(const gen_tensor *t, gen_rng *r, uint8_t *out, int64_t n_rows)
{
    const gguf_type_info *ti = gguf_type_get(t->type);
    int64_t n = t->ne[0] * n_rows;
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
    for (int64_t i = 0; i < n; i++) {
        double v = value_of(t, r);
        switch (t->type) {
        case GGUF_TYPE_F32: {
            float f = (float)v;
            memcpy(out + i * 4, &f, 4);
            break;
        }
        case GGUF_TYPE_F16:
            put16(out + i * 2, gen_fp32_to_fp16((float)v));
            break;
        case GGUF_TYPE_BF16:
            put16(out + i * 2, gen_fp32_to_bf16((float)v));
            break;
        case GGUF_TYPE_F64:
            memcpy(out + i * 8, &v, 8);
            break;
        case GGUF_TYPE_I8:
        case GGUF_TYPE_I16:
        case GGUF_TYPE_I32:
        case GGUF_TYPE_I64: {
            /* Integers: small values around what the float would be, x100. */
            int64_t k = (int64_t)lround(v * 100.0);
            memcpy(out + i * ti->type_size, &k, ti->type_size); /* little-endian */
            break;
        }
        default:
            break;
        }
    }
}
