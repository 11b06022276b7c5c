/* Test helpers for the dequant suites: a deterministic byte generator and
 * bitwise float comparison. */
#ifndef HELPER_DEQUANT_H
#define HELPER_DEQUANT_H

#include <stddef.h>
#include <stdint.h>

/* splitmix64: the same stream on every platform. */
uint64_t hd_rand(uint64_t *state);

/* Fill n bytes with random bits. */
void hd_fill(uint64_t *state, void *buf, size_t n);

/* Index of the first element whose bits differ, or -1 when all equal. */
int64_t hd_first_bit_diff(const float *a, const float *b, int64_t n);

/* Offsets (bytes from a block's start) of the F16 scales of a block type, up
 * to 2; returns how many. Used to plant NaN/Inf/subnormal/zero scales. */
int hd_f16_scale_offsets(uint32_t type, size_t off[2]);

#endif
