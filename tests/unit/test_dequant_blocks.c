/*
 * gguf/blocks.h against the type table and ggml's field offsets: the header
 * the CPU and CUDA code share must agree with gguf_type_get() on every block
 * size, and put each field where ggml's block_* structs put it (offsets from
 * ggml-common.h, worked out from its field lists).
 */
#include <check.h>
#include <stddef.h>
#include <stdlib.h>

#include "gguf/blocks.h"
#include "gguf/types.h"

#define SIZE_IS(type, st) ck_assert_uint_eq(gguf_type_get(type)->type_size, sizeof(st))

START_TEST(sizes_match_type_table)
{
    SIZE_IS(GGUF_TYPE_Q4_0, gguf_block_q4_0);
    SIZE_IS(GGUF_TYPE_Q4_1, gguf_block_q4_1);
    SIZE_IS(GGUF_TYPE_Q5_0, gguf_block_q5_0);
    SIZE_IS(GGUF_TYPE_Q5_1, gguf_block_q5_1);
    SIZE_IS(GGUF_TYPE_Q8_0, gguf_block_q8_0);
    SIZE_IS(GGUF_TYPE_Q8_1, gguf_block_q8_1);
    SIZE_IS(GGUF_TYPE_Q2_K, gguf_block_q2_k);
    SIZE_IS(GGUF_TYPE_Q3_K, gguf_block_q3_k);
    SIZE_IS(GGUF_TYPE_Q4_K, gguf_block_q4_k);
    SIZE_IS(GGUF_TYPE_Q5_K, gguf_block_q5_k);
    SIZE_IS(GGUF_TYPE_Q6_K, gguf_block_q6_k);
    SIZE_IS(GGUF_TYPE_Q8_K, gguf_block_q8_k);
    SIZE_IS(GGUF_TYPE_TQ1_0, gguf_block_tq1_0);
    SIZE_IS(GGUF_TYPE_TQ2_0, gguf_block_tq2_0);
    SIZE_IS(GGUF_TYPE_IQ2_XXS, gguf_block_iq2_xxs);
    SIZE_IS(GGUF_TYPE_IQ2_XS, gguf_block_iq2_xs);
    SIZE_IS(GGUF_TYPE_IQ2_S, gguf_block_iq2_s);
    SIZE_IS(GGUF_TYPE_IQ3_XXS, gguf_block_iq3_xxs);
    SIZE_IS(GGUF_TYPE_IQ3_S, gguf_block_iq3_s);
    SIZE_IS(GGUF_TYPE_IQ1_S, gguf_block_iq1_s);
    SIZE_IS(GGUF_TYPE_IQ1_M, gguf_block_iq1_m);
    SIZE_IS(GGUF_TYPE_IQ4_NL, gguf_block_iq4_nl);
    SIZE_IS(GGUF_TYPE_IQ4_XS, gguf_block_iq4_xs);
    SIZE_IS(GGUF_TYPE_MXFP4, gguf_block_mxfp4);
    SIZE_IS(GGUF_TYPE_NVFP4, gguf_block_nvfp4);
    SIZE_IS(GGUF_TYPE_Q1_0, gguf_block_q1_0);
    ck_assert_uint_eq(gguf_type_get(GGUF_TYPE_NVFP4)->block_size, GGUF_QK_NVFP4);
    ck_assert_uint_eq(gguf_type_get(GGUF_TYPE_Q1_0)->block_size, GGUF_QK1_0);
    ck_assert_uint_eq(gguf_type_get(GGUF_TYPE_Q4_K)->block_size, GGUF_QK_K);
}
END_TEST

START_TEST(field_offsets)
{
    ck_assert_uint_eq(offsetof(gguf_block_q5_0, qh), 2);
    ck_assert_uint_eq(offsetof(gguf_block_q5_1, qs), 8);
    ck_assert_uint_eq(offsetof(gguf_block_q8_1, qs), 4);
    ck_assert_uint_eq(offsetof(gguf_block_q2_k, d), 80);
    ck_assert_uint_eq(offsetof(gguf_block_q3_k, scales), 96);
    ck_assert_uint_eq(offsetof(gguf_block_q3_k, d), 108);
    ck_assert_uint_eq(offsetof(gguf_block_q4_k, qs), 16);
    ck_assert_uint_eq(offsetof(gguf_block_q5_k, qh), 16);
    ck_assert_uint_eq(offsetof(gguf_block_q5_k, qs), 48);
    ck_assert_uint_eq(offsetof(gguf_block_q6_k, scales), 192);
    ck_assert_uint_eq(offsetof(gguf_block_q6_k, d), 208);
    ck_assert_uint_eq(offsetof(gguf_block_q8_k, bsums), 260);
    ck_assert_uint_eq(offsetof(gguf_block_tq1_0, qh), 48);
    ck_assert_uint_eq(offsetof(gguf_block_tq1_0, d), 52);
    ck_assert_uint_eq(offsetof(gguf_block_tq2_0, d), 64);
    ck_assert_uint_eq(offsetof(gguf_block_iq2_xs, scales), 66);
    ck_assert_uint_eq(offsetof(gguf_block_iq2_s, qh), 66);
    ck_assert_uint_eq(offsetof(gguf_block_iq2_s, scales), 74);
    ck_assert_uint_eq(offsetof(gguf_block_iq3_s, qh), 66);
    ck_assert_uint_eq(offsetof(gguf_block_iq3_s, signs), 74);
    ck_assert_uint_eq(offsetof(gguf_block_iq3_s, scales), 106);
    ck_assert_uint_eq(offsetof(gguf_block_iq1_s, qh), 34);
    ck_assert_uint_eq(offsetof(gguf_block_iq1_m, qh), 32);
    ck_assert_uint_eq(offsetof(gguf_block_iq1_m, scales), 48);
    ck_assert_uint_eq(offsetof(gguf_block_iq4_xs, scales_l), 4);
    ck_assert_uint_eq(offsetof(gguf_block_iq4_xs, qs), 8);
    ck_assert_uint_eq(offsetof(gguf_block_mxfp4, qs), 1);
    ck_assert_uint_eq(offsetof(gguf_block_nvfp4, qs), 4);
    ck_assert_uint_eq(offsetof(gguf_block_q1_0, qs), 2);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("dequant_blocks");
    TCase *tc = tcase_create("blocks");
    tcase_add_test(tc, sizes_match_type_table);
    tcase_add_test(tc, field_offsets);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
