/*
 * Where each block type keeps its scales, and what is odd about them
 * (gguf_block_scale_flags, gguf/dequant.h). A zero, NaN or infinite scale
 * turns a whole block into zeros or NaNs: the first thing to look at when a
 * quantized tensor decodes badly.
 */
#include <stddef.h>
#include <string.h>

#include "dequant/dequant_internal.h"
#include "gguf/blocks.h"
#include "gguf/dequant.h"
#include "gguf/types.h"

static unsigned classify_f16(uint16_t h)
{
    const int exp = (h >> 10) & 31, man = h & 1023;
    if (exp == 31)
        return man ? GGUF_SCALE_NAN : GGUF_SCALE_INF;
    if (exp == 0)
        return man ? GGUF_SCALE_SUBNORMAL : GGUF_SCALE_ZERO;
    return 0;
}

static unsigned classify_f32(uint32_t u)
{
    const uint32_t exp = (u >> 23) & 255, man = u & 0x7FFFFF;
    if (exp == 255)
        return man ? GGUF_SCALE_NAN : GGUF_SCALE_INF;
    if (exp == 0)
        return man ? GGUF_SCALE_SUBNORMAL : GGUF_SCALE_ZERO;
    return 0;
}

/* Offsets of the f16 scale fields of a block: d, then dmin / m where present.
 * Returns how many (0: the type keeps its scales otherwise, or has none). */
static int f16_fields(uint32_t type, size_t off[2])
{
#define F1(T, a) off[0] = offsetof(T, a); return 1
#define F2(T, a, b) off[0] = offsetof(T, a); off[1] = offsetof(T, b); return 2
    switch (type) {
    case GGUF_TYPE_Q4_0: F1(gguf_block_q4_0, d);
    case GGUF_TYPE_Q4_1: F2(gguf_block_q4_1, d, m);
    case GGUF_TYPE_Q5_0: F1(gguf_block_q5_0, d);
    case GGUF_TYPE_Q5_1: F2(gguf_block_q5_1, d, m);
    case GGUF_TYPE_Q8_0: F1(gguf_block_q8_0, d);
    case GGUF_TYPE_Q8_1: F1(gguf_block_q8_1, d);
    case GGUF_TYPE_Q2_K: F2(gguf_block_q2_k, d, dmin);
    case GGUF_TYPE_Q3_K: F1(gguf_block_q3_k, d);
    case GGUF_TYPE_Q4_K: F2(gguf_block_q4_k, d, dmin);
    case GGUF_TYPE_Q5_K: F2(gguf_block_q5_k, d, dmin);
    case GGUF_TYPE_Q6_K: F1(gguf_block_q6_k, d);
    case GGUF_TYPE_TQ1_0: F1(gguf_block_tq1_0, d);
    case GGUF_TYPE_TQ2_0: F1(gguf_block_tq2_0, d);
    case GGUF_TYPE_IQ2_XXS: F1(gguf_block_iq2_xxs, d);
    case GGUF_TYPE_IQ2_XS: F1(gguf_block_iq2_xs, d);
    case GGUF_TYPE_IQ2_S: F1(gguf_block_iq2_s, d);
    case GGUF_TYPE_IQ3_XXS: F1(gguf_block_iq3_xxs, d);
    case GGUF_TYPE_IQ3_S: F1(gguf_block_iq3_s, d);
    case GGUF_TYPE_IQ1_S: F1(gguf_block_iq1_s, d);
    case GGUF_TYPE_IQ4_NL: F1(gguf_block_iq4_nl, d);
    case GGUF_TYPE_IQ4_XS: F1(gguf_block_iq4_xs, d);
    case GGUF_TYPE_Q1_0: F1(gguf_block_q1_0, d);
    default: return 0;
    }
#undef F1
#undef F2
}

unsigned gguf_block_scale_flags(uint32_t type, const void *block)
{
    const uint8_t *b = block;
    size_t off[2];
    const int n = b ? f16_fields(type, off) : 0;
    if (!b)
        return 0;
    if (n > 0) {
        /* a zero or tiny dmin / m is normal (little or no offset): only d
         * counts as zero or subnormal; any field counts when NaN or Inf */
        unsigned flags = classify_f16(gguf_rd_u16(b + off[0]));
        if (n > 1)
            flags |= classify_f16(gguf_rd_u16(b + off[1])) & (GGUF_SCALE_NAN | GGUF_SCALE_INF);
        return flags;
    }
    switch (type) {
    case GGUF_TYPE_Q8_K:
        return classify_f32(gguf_rd_u32(b + offsetof(gguf_block_q8_k, d)));
    case GGUF_TYPE_IQ1_M:
        return classify_f16(gguf_iq1m_d_bits(b + offsetof(gguf_block_iq1_m, scales)));
    case GGUF_TYPE_MXFP4: {
        const uint8_t e = b[offsetof(gguf_block_mxfp4, e)];
        /* 0xFF is NaN in OCP MX; 0 is 2^-127 */
        return e == 0xFF ? GGUF_SCALE_NAN : e == 0 ? GGUF_SCALE_SUBNORMAL : 0;
    }
    case GGUF_TYPE_NVFP4: {
        unsigned flags = 0;
        for (int s = 0; s < 4; s++) {
            const uint8_t x = b[offsetof(gguf_block_nvfp4, d) + s];
            if (x & 0x80)
                flags |= GGUF_SCALE_BAD_ENCODING;
            else if (x == 0x7F)
                flags |= GGUF_SCALE_NAN;
            else if (x == 0)
                flags |= GGUF_SCALE_ZERO;
            else if (x < 8)
                flags |= GGUF_SCALE_SUBNORMAL;
        }
        return flags;
    }
    default:
        return 0;
    }
}
