/*
 * The IQ grids and value tables of libgguf/src/dequant/dequant_iq_tables.c are data
 * generated from gguf-py by testdata/iq_tables/gen_dequant_iq_tables.py.
 * Each table's FNV-1a 64 digest below was printed by that script
 * (`--digests`) from gguf-py 0.19.0's own decoding; an edit to the generated
 * file, or a regeneration from different data, fails here. Structural
 * properties that ggml's definitions imply are checked too.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/dequant.h"

static uint64_t fnv1a64(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 0xCBF29CE484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001B3ull;
    }
    return h;
}

#define DIGEST(table, expect)                                                        \
    ck_assert_msg(fnv1a64(table, sizeof(table)) == (expect), #table ": %016llx",     \
                  (unsigned long long)fnv1a64(table, sizeof(table)))

START_TEST(digests)
{
    ck_assert_uint_eq(sizeof gguf_iq2xxs_grid, 2048);
    ck_assert_uint_eq(sizeof gguf_iq1s_grid, 16384);
    DIGEST(gguf_iq2xxs_grid, 0xbb4ee025b5ac6e8eull);
    DIGEST(gguf_iq2xs_grid, 0xc9b1ee61e79909bdull);
    DIGEST(gguf_iq2s_grid, 0x123edd38a3b62b90ull);
    DIGEST(gguf_iq3xxs_grid, 0xdfa5dc83d6a155d5ull);
    DIGEST(gguf_iq3s_grid, 0xfa37020c25b44829ull);
    DIGEST(gguf_iq1s_grid, 0x6703ed863501ae2eull);
    DIGEST(gguf_iq2_ksigns, 0xf19ba8f8c3292ba5ull);
    DIGEST(gguf_iq4nl_values, 0x055d06d2d8fa0f75ull);
    DIGEST(gguf_fp4_e2m1_x2, 0x3f0e3c08af1e5eb5ull);
}
END_TEST

/* ksigns[i]: the 7 bits of i, and bit 7 set when i has an odd number of ones
 * (so every 8-sign group has an even number of minus signs). */
START_TEST(ksigns_parity)
{
    for (int i = 0; i < 128; i++) {
        const int odd = __builtin_popcount((unsigned)i) & 1;
        ck_assert_uint_eq(gguf_iq2_ksigns[i], (unsigned)(i | (odd << 7)));
    }
}
END_TEST

static int in_set(int v, const int *set, int n)
{
    for (int i = 0; i < n; i++)
        if (set[i] == v)
            return 1;
    return 0;
}

/* Each grid draws its elements from a small set, and no entry repeats. */
START_TEST(grid_values)
{
    static const int iq2[] = {0x08, 0x19, 0x2b};
    static const int iq3xxs[] = {0x04, 0x0c, 0x14, 0x1c, 0x24, 0x2c, 0x34, 0x3e};
    static const int iq3s[] = {1, 3, 5, 7, 9, 11, 13, 15};
    static const int iq1[] = {-1, 0, 1};
    for (int i = 0; i < 256; i++)
        for (int j = 0; j < 8; j++)
            ck_assert(in_set(gguf_iq2xxs_grid[i][j], iq2, 3));
    for (int i = 0; i < 512; i++)
        for (int j = 0; j < 8; j++)
            ck_assert(in_set(gguf_iq2xs_grid[i][j], iq2, 3));
    for (int i = 0; i < 1024; i++)
        for (int j = 0; j < 8; j++)
            ck_assert(in_set(gguf_iq2s_grid[i][j], iq2, 3));
    for (int i = 0; i < 256; i++)
        for (int j = 0; j < 4; j++)
            ck_assert(in_set(gguf_iq3xxs_grid[i][j], iq3xxs, 8));
    for (int i = 0; i < 512; i++)
        for (int j = 0; j < 4; j++)
            ck_assert(in_set(gguf_iq3s_grid[i][j], iq3s, 8));
    for (int i = 0; i < 2048; i++)
        for (int j = 0; j < 8; j++)
            ck_assert(in_set(gguf_iq1s_grid[i][j], iq1, 3));
    for (int i = 1; i < 2048; i++) /* sorted by packed value, hence distinct */
        ck_assert(memcmp(gguf_iq1s_grid[i - 1], gguf_iq1s_grid[i], 8) != 0);
    /* value tables: IQ4_NL is increasing; FP4 negatives mirror positives */
    for (int i = 1; i < 16; i++)
        ck_assert_int_lt(gguf_iq4nl_values[i - 1], gguf_iq4nl_values[i]);
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(gguf_fp4_e2m1_x2[i + 8], -gguf_fp4_e2m1_x2[i]);
    ck_assert_int_eq(gguf_fp4_e2m1_x2[7], 12);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("dequant_tables");
    TCase *tc = tcase_create("tables");
    tcase_add_test(tc, digests);
    tcase_add_test(tc, ksigns_parity);
    tcase_add_test(tc, grid_values);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
