/* gguf_cpus_usable: the affinity mask, not the online CPUs. */
#include <check.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include "util/cpus.h"

START_TEST(follows_the_affinity_mask)
{
    cpu_set_t all, one;
    ck_assert_int_eq(sched_getaffinity(0, sizeof all, &all), 0);
    ck_assert_int_eq(gguf_cpus_usable(), CPU_COUNT(&all));
    int first = 0;
    while (!CPU_ISSET(first, &all))
        first++;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    ck_assert_int_eq(sched_setaffinity(0, sizeof one, &one), 0);
    ck_assert_int_eq(gguf_cpus_usable(), 1); /* as under taskset -c N */
    ck_assert_int_eq(sched_setaffinity(0, sizeof all, &all), 0);
    ck_assert_int_eq(gguf_cpus_usable(), CPU_COUNT(&all));
}
END_TEST

START_TEST(never_more_than_online)
{
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    const int n = gguf_cpus_usable();
    ck_assert_int_ge(n, 1);
    if (online > 0)
        ck_assert_int_le(n, online);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cpus");
    TCase *tc = tcase_create("usable");
    tcase_add_test(tc, follows_the_affinity_mask);
    tcase_add_test(tc, never_more_than_online);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
