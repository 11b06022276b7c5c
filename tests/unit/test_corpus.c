/*
 * Every committed malformed input must fail with the error its name carries
 * (GGUF_E_<CODE>--what.gguf), and every ok--*.gguf seed must open.
 */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/file.h"

START_TEST(named_errors)
{
    const char *src = getenv("GGUFKIT_SRC");
    ck_assert_msg(src != NULL, "GGUFKIT_SRC is not set");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus/parser", src);
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int checked = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        gguf_file *f = NULL;
        gguf_error err;
        int rc = gguf_file_open(&f, path, NULL, &err);
        if (strncmp(e->d_name, "ok--", 4) == 0) {
            ck_assert_msg(rc == 0, "%s: %s", e->d_name, err.message);
        } else {
            const char *sep = strstr(e->d_name, "--");
            ck_assert_ptr_nonnull(sep);
            char want[64];
            snprintf(want, sizeof want, "%.*s", (int)(sep - e->d_name), e->d_name);
            ck_assert_msg(strcmp(gguf_status_name(rc), want) == 0, "%s: got %s: %s",
                          e->d_name, gguf_status_name(rc), err.message);
            ck_assert_msg(strstr(err.message, e->d_name) != NULL, "%s: message lacks the file: %s",
                          e->d_name, err.message);
        }
        gguf_file_free(f);
        checked++;
    }
    closedir(d);
    ck_assert_int_ge(checked, 30);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("corpus");
    TCase *tc = tcase_create("corpus");
    tcase_add_test(tc, named_errors);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
