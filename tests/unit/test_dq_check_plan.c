/*
 * The arithmetic of the GPU dequant checker (cuda/src/dq_check_plan.h), on the
 * CPU: how many elements of each type a slot holds, and where a caller's CPU
 * result lies against the slots' host buffers. Built with or without CUDA;
 * the checker itself is tested on a GPU by tests/gpu/test_cuda_dq_check.c.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "dq_check_plan.h"
#include "gguf/dequant.h"
#include "gguf/types.h"

/* Whole blocks (plain types: a multiple of 8), within both limits, and the
 * largest such count: one more block (8 plain elements) breaks a limit. */
START_TEST(slot_elems_every_type)
{
    static const int64_t floats[] = {4096, 4097, 65536, (int64_t)16 << 20, (int64_t)1 << 30};
    for (size_t k = 0; k < sizeof floats / sizeof floats[0]; k++) {
        const int64_t f = floats[k];
        const uint64_t bytes = (uint64_t)f * 4;
        for (uint32_t t = 0; t < GGUF_TYPE_COUNT; t++) {
            const gguf_type_info *ti = gguf_type_get(t);
            if (!ti || !ti->valid || !gguf_dequant_supported(t))
                continue;
            const int64_t e = dqc_slot_elems(ti->block_size, ti->type_size, f, bytes);
            const uint64_t step = ti->block_size == 1 ? 8 : ti->block_size;
            ck_assert_msg(e > 0, "%s: no element fits %lld floats", ti->name, (long long)f);
            ck_assert_int_eq((uint64_t)e % step, 0);
            ck_assert_int_le(e, f);
            const uint64_t b = (uint64_t)e / ti->block_size * ti->type_size;
            ck_assert_uint_le(b, bytes);
            const uint64_t e2 = (uint64_t)e + step;
            ck_assert_msg(e2 > (uint64_t)f || e2 / ti->block_size * ti->type_size > bytes,
                          "%s: %lld is not the most that fits %lld floats", ti->name,
                          (long long)e, (long long)f);
            /* every type but the 8-byte ones fills the floats (whole blocks) */
            if (ti->type_size / ti->block_size < 8)
                ck_assert_int_gt(e, f - (int64_t)step);
        }
    }
}
END_TEST

START_TEST(slot_elems_cases)
{
    const int64_t m = (int64_t)16 << 20;
    const gguf_type_info *q4k = gguf_type_get(GGUF_TYPE_Q4_K);
    ck_assert_int_eq(dqc_slot_elems(q4k->block_size, q4k->type_size, m, (uint64_t)m * 4), m);
    ck_assert_int_eq(dqc_slot_elems(q4k->block_size, q4k->type_size, 5000, 20000), 4864);
    ck_assert_int_eq(dqc_slot_elems(1, 4, m, (uint64_t)m * 4), m);      /* F32 */
    ck_assert_int_eq(dqc_slot_elems(1, 8, m, (uint64_t)m * 4), m / 2);  /* F64 */
    ck_assert_int_eq(dqc_slot_elems(1, 4, 4095, 4095 * 4), 4088);       /* multiple of 8 */
    ck_assert_int_eq(dqc_slot_elems(1, 2, 7, 1000), 0);                 /* not 8 plain */
    ck_assert_int_eq(dqc_slot_elems(256, 144, 255, 1 << 20), 0);        /* not one block */
    ck_assert_int_eq(dqc_slot_elems(256, 144, 1 << 20, 143), 0);
    ck_assert_int_eq(dqc_slot_elems(0, 144, 1 << 20, 1 << 20), 0);
    ck_assert_int_eq(dqc_slot_elems(32, 0, 1 << 20, 1 << 20), 0);
    ck_assert_int_eq(dqc_slot_elems(32, 18, 0, 1 << 20), 0);
    ck_assert_int_eq(dqc_slot_elems(32, 18, -64, 1 << 20), 0);
}
END_TEST

START_TEST(ref_slot)
{
    const uint64_t size = 4096;
    const uintptr_t bufs[3] = {0x100000, 0x200000, 0x300000};
    /* at a buffer's start, fitting: its index */
    ck_assert_int_eq(dqc_ref_slot(0x200000, size, bufs, 3, size), 1);
    ck_assert_int_eq(dqc_ref_slot(0x300000, 1, bufs, 3, size), 2);
    ck_assert_int_eq(dqc_ref_slot(0x100000, size, bufs, 3, size), 0);
    /* elsewhere: outside */
    ck_assert_int_eq(dqc_ref_slot(0x10000, 0x1000, bufs, 3, size), DQC_REF_OUTSIDE);
    ck_assert_int_eq(dqc_ref_slot(0x100000 + size, 0x1000, bufs, 3, size), DQC_REF_OUTSIDE);
    ck_assert_int_eq(dqc_ref_slot(0x100000 - 16, 16, bufs, 3, size), DQC_REF_OUTSIDE);
    ck_assert_int_eq(dqc_ref_slot(0x200000, 0, bufs, 3, size), DQC_REF_OUTSIDE);
    /* touching a buffer otherwise: a misuse */
    ck_assert_int_eq(dqc_ref_slot(0x200000, size + 4, bufs, 3, size), DQC_REF_OVERLAP);
    ck_assert_int_eq(dqc_ref_slot(0x200004, 16, bufs, 3, size), DQC_REF_OVERLAP);
    ck_assert_int_eq(dqc_ref_slot(0x100000 - 16, 17, bufs, 3, size), DQC_REF_OVERLAP);
    ck_assert_int_eq(dqc_ref_slot(0x100000 + size - 1, 2, bufs, 3, size), DQC_REF_OVERLAP);
    ck_assert_int_eq(dqc_ref_slot(0x0, 0x400000, bufs, 3, size), DQC_REF_OVERLAP);
    /* a range that wraps at the top of memory */
    ck_assert_int_eq(dqc_ref_slot(UINTPTR_MAX - 15, 32, bufs, 3, size), DQC_REF_OVERLAP);
    /* no buffers, or empty ones */
    ck_assert_int_eq(dqc_ref_slot(0x200000, size, bufs, 0, size), DQC_REF_OUTSIDE);
    ck_assert_int_eq(dqc_ref_slot(0x200000, size, bufs, 3, 0), DQC_REF_OUTSIDE);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("dq_check_plan");
    TCase *tc = tcase_create("plan");
    tcase_add_test(tc, slot_elems_every_type);
    tcase_add_test(tc, slot_elems_cases);
    tcase_add_test(tc, ref_slot);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
