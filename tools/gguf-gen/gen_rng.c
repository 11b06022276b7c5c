/* Seeded pseudo-random numbers and the float conversions the generator needs. */
#include <string.h>

#include "gen.h"

uint64_t gen_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The stream of a tensor depends on the seed and its name only (FNV-1a). */
void gen_rng_seed(gen_rng *r, uint64_t seed, const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *c = name ? name : ""; *c; c++)
        h = (h ^ (uint8_t)*c) * 0x100000001b3ull;
    uint64_t st = seed ^ h;
    for (int i = 0; i < 4; i++)
        r->s[i] = gen_splitmix64(&st);
}

uint32_t gen_rng_below(gen_rng *r, uint32_t n)
{
    return (uint32_t)(((gen_rng_next(r) >> 32) * (uint64_t)n) >> 32);
}

/* float -> binary16, round to nearest even; overflow to Inf; NaN stays NaN. */
uint16_t gen_fp32_to_fp16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t a = x & 0x7fffffffu;
    /* Fast path for results that are normal halves (2^-14 <= |f| < 65520): round
     * to nearest even at bit 13, then rebias the exponent (127 -> 15); a carry
     * out of the mantissa correctly bumps the exponent, up to Inf. */
    if (a >= 0x38800000u && a < 0x477ff000u) {
        uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
        return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
    }
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t man = x & 0x7fffffu;
    if (exp == 0xff)
        return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0));
    int32_t e = (int32_t)exp - 127 + 15;
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10)
            return (uint16_t)sign;
        man |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t h = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1)))
            h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
        h++; /* may carry into the exponent, up to Inf: correct */
    return (uint16_t)(sign | h);
}

float gen_fp16_to_fp32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t x;
    if (exp == 0x1f) {
        x = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0) {
        if (!man) {
            x = sign;
        } else {
            int e = -1;
            do {
                man <<= 1;
                e++;
            } while (!(man & 0x400u));
            x = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else {
        x = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

uint16_t gen_fp32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 64); /* quiet NaN */
    return (uint16_t)((x + (0x7fffu + ((x >> 16) & 1))) >> 16);
}
