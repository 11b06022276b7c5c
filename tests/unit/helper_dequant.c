#include "helper_dequant.h"

#include "gguf/blocks.h"
#include "gguf/types.h"

#include <string.h>

uint64_t hd_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void hd_fill(uint64_t *state, void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n > 0) {
        const uint64_t r = hd_rand(state);
        const size_t k = n < 8 ? n : 8;
        memcpy(p, &r, k);
        p += k;
        n -= k;
    }
}

int64_t hd_first_bit_diff(const float *a, const float *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0)
            return i;
    return -1;
}

#define O(t, f) offsetof(t, f)

int hd_f16_scale_offsets(uint32_t type, size_t off[2])
{
    switch (type) {
    case GGUF_TYPE_Q4_0: off[0] = O(gguf_block_q4_0, d); return 1;
    case GGUF_TYPE_Q4_1: off[0] = O(gguf_block_q4_1, d); off[1] = O(gguf_block_q4_1, m); return 2;
    case GGUF_TYPE_Q5_0: off[0] = O(gguf_block_q5_0, d); return 1;
    case GGUF_TYPE_Q5_1: off[0] = O(gguf_block_q5_1, d); off[1] = O(gguf_block_q5_1, m); return 2;
    case GGUF_TYPE_Q8_0: off[0] = O(gguf_block_q8_0, d); return 1;
    case GGUF_TYPE_Q8_1: off[0] = O(gguf_block_q8_1, d); return 1;
    case GGUF_TYPE_Q2_K: off[0] = O(gguf_block_q2_k, d); off[1] = O(gguf_block_q2_k, dmin); return 2;
    case GGUF_TYPE_Q3_K: off[0] = O(gguf_block_q3_k, d); return 1;
    case GGUF_TYPE_Q4_K: off[0] = O(gguf_block_q4_k, d); off[1] = O(gguf_block_q4_k, dmin); return 2;
    case GGUF_TYPE_Q5_K: off[0] = O(gguf_block_q5_k, d); off[1] = O(gguf_block_q5_k, dmin); return 2;
    case GGUF_TYPE_Q6_K: off[0] = O(gguf_block_q6_k, d); return 1;
    case GGUF_TYPE_TQ1_0: off[0] = O(gguf_block_tq1_0, d); return 1;
    case GGUF_TYPE_TQ2_0: off[0] = O(gguf_block_tq2_0, d); return 1;
    case GGUF_TYPE_IQ2_XXS: off[0] = O(gguf_block_iq2_xxs, d); return 1;
    case GGUF_TYPE_IQ2_XS: off[0] = O(gguf_block_iq2_xs, d); return 1;
    case GGUF_TYPE_IQ2_S: off[0] = O(gguf_block_iq2_s, d); return 1;
    case GGUF_TYPE_IQ3_XXS: off[0] = O(gguf_block_iq3_xxs, d); return 1;
    case GGUF_TYPE_IQ3_S: off[0] = O(gguf_block_iq3_s, d); return 1;
    case GGUF_TYPE_IQ1_S: off[0] = O(gguf_block_iq1_s, d); return 1;
    case GGUF_TYPE_IQ4_NL: off[0] = O(gguf_block_iq4_nl, d); return 1;
    case GGUF_TYPE_IQ4_XS: off[0] = O(gguf_block_iq4_xs, d); return 1;
    case GGUF_TYPE_Q1_0: off[0] = O(gguf_block_q1_0, d); return 1;
    default: return 0;
    }
}
