/*
 * Atomic outputs (gguf/output.h) and the .npy writer (gguf/npy.h): the output
 * appears only at commit, a failure or a free before commit leaves nothing,
 * temporary names are unique, existing files are kept unless overwrite.
 */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/npy.h"
#include "gguf/output.h"
#include "helper_buf.h"

static char *tdir;
static char pbuf[4096];

static void setup(void) { tdir = th_mkdtemp(); }
static void teardown(void)
{
    th_rmdir(tdir);
    free(tdir);
}

static const char *tpath(const char *name)
{
    snprintf(pbuf, sizeof pbuf, "%s/%s", tdir, name);
    return pbuf;
}

static int entries(void)
{
    DIR *d = opendir(tdir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *b = malloc(1 << 16);
    *n = fread(b, 1, 1 << 16, f);
    fclose(f);
    return b;
}

START_TEST(appears_at_commit_only)
{
    gguf_output *o = NULL;
    gguf_error err;
    char path[4096];
    snprintf(path, sizeof path, "%s", tpath("a.txt"));
    ck_assert_int_eq(gguf_output_create(&o, path, NULL, &err), 0);
    FILE *f = gguf_output_stream(o);
    ck_assert_ptr_nonnull(f);
    fprintf(f, "hello %d\n", 42);
    ck_assert_int_eq(access(path, F_OK), -1); /* not yet */
    ck_assert_int_eq(entries(), 1);           /* the temporary file */
    const char *tmp = gguf_output_temp_path(o);
    ck_assert_ptr_nonnull(strstr(tmp, "/.a.txt."));
    ck_assert_int_eq(gguf_output_commit(o, &err), 0);
    gguf_output_free(o);
    size_t n;
    char *b = slurp(path, &n);
    ck_assert_uint_eq(n, 9);
    ck_assert_int_eq(memcmp(b, "hello 42\n", 9), 0);
    free(b);
    ck_assert_int_eq(entries(), 1);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_ne(st.st_mode & 0044, 0); /* not mkstemp's 0600 (umask 022 in tests) */
}
END_TEST

START_TEST(free_before_commit_leaves_nothing)
{
    gguf_output *o = NULL;
    gguf_error err;
    ck_assert_int_eq(gguf_output_create(&o, tpath("b.bin"), NULL, &err), 0);
    ck_assert_int_eq(gguf_output_write(o, "xyz", 3, &err), 0);
    gguf_output_free(o);
    ck_assert_int_eq(entries(), 0);
}
END_TEST

START_TEST(existing_file_kept_unless_overwrite)
{
    gguf_error err;
    char path[4096];
    snprintf(path, sizeof path, "%s", tpath("c.bin"));
    ck_assert_int_eq(gguf_output_write_file(path, "old", 3, NULL, &err), 0);
    ck_assert_int_eq(gguf_output_write_file(path, "new", 3, NULL, &err), GGUF_E_EXISTS);
    ck_assert_ptr_nonnull(strstr(err.message, "c.bin"));
    size_t n;
    char *b = slurp(path, &n);
    ck_assert_int_eq(memcmp(b, "old", 3), 0);
    free(b);
    gguf_output_opts ow = {.overwrite = true};
    ck_assert_int_eq(gguf_output_write_file(path, "new!", 4, &ow, &err), 0);
    b = slurp(path, &n);
    ck_assert_uint_eq(n, 4);
    ck_assert_int_eq(memcmp(b, "new!", 4), 0);
    free(b);
    ck_assert_int_eq(entries(), 1);
}
END_TEST

START_TEST(appeared_meanwhile_not_replaced)
{
    gguf_output *o = NULL;
    gguf_error err;
    char path[4096];
    snprintf(path, sizeof path, "%s", tpath("d.bin"));
    ck_assert_int_eq(gguf_output_create(&o, path, NULL, &err), 0);
    ck_assert_int_eq(gguf_output_write(o, "mine", 4, &err), 0);
    FILE *f = fopen(path, "w");
    fputs("theirs", f);
    fclose(f);
    ck_assert_int_eq(gguf_output_commit(o, &err), GGUF_E_EXISTS);
    gguf_output_free(o);
    ck_assert_int_eq(entries(), 1);
}
END_TEST

START_TEST(unique_temporary_names)
{
    gguf_output *a = NULL, *b = NULL;
    gguf_error err;
    gguf_output_opts ow = {.overwrite = true, .no_sync = true};
    ck_assert_int_eq(gguf_output_create(&a, tpath("e.bin"), &ow, &err), 0);
    ck_assert_int_eq(gguf_output_create(&b, tpath("e.bin"), &ow, &err), 0);
    ck_assert_str_ne(gguf_output_temp_path(a), gguf_output_temp_path(b));
    gguf_output_free(a);
    gguf_output_free(b);
    ck_assert_int_eq(entries(), 0);
}
END_TEST

START_TEST(missing_folder_is_io_error)
{
    gguf_output *o = NULL;
    gguf_error err;
    ck_assert_int_eq(gguf_output_create(&o, tpath("no/such/dir/f.bin"), NULL, &err), GGUF_E_IO);
    ck_assert_ptr_null(o);
    ck_assert_ptr_nonnull(strstr(err.message, "f.bin"));
    ck_assert_int_eq(gguf_output_create(&o, "", NULL, &err), GGUF_E_INVALID);
}
END_TEST

START_TEST(small_file_read_whole)
{
    gguf_error err;
    char *text;
    size_t n = 99;
    ck_assert_int_eq(gguf_output_write_file(tpath("p.txt"), "1,2\n3", 5, NULL, &err), 0);
    ck_assert_int_eq(gguf_read_small_file(tpath("p.txt"), 5, &text, &n, &err), 0);
    ck_assert_uint_eq(n, 5);
    ck_assert_str_eq(text, "1,2\n3");
    free(text);
    ck_assert_int_eq(gguf_read_small_file(tpath("p.txt"), 4, &text, NULL, &err), GGUF_E_LIMIT);
    ck_assert_ptr_null(text);
    ck_assert_int_eq(gguf_read_small_file(tpath("none"), 4, &text, &n, &err), GGUF_E_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(err.message, "none"));
    ck_assert_int_eq(gguf_read_small_file(tdir, 4, &text, &n, &err), GGUF_E_IO);
    ck_assert_int_ne(err.sys_errno, 0);
    ck_assert_int_eq(gguf_read_small_file(NULL, 4, &text, &n, &err), GGUF_E_INVALID);

    /* a pipe is read to its end, and held to the same limit */
    int fd[2];
    ck_assert_int_eq(pipe(fd), 0);
    ck_assert_int_eq(write(fd[1], "abcdef", 6), 6);
    close(fd[1]);
    char dev[64];
    snprintf(dev, sizeof dev, "/dev/fd/%d", fd[0]);
    ck_assert_int_eq(gguf_read_small_file(dev, 6, &text, &n, &err), 0);
    ck_assert_uint_eq(n, 6);
    ck_assert_str_eq(text, "abcdef");
    free(text);
    close(fd[0]);
    ck_assert_int_eq(pipe(fd), 0);
    ck_assert_int_eq(write(fd[1], "abcdef", 6), 6);
    close(fd[1]);
    snprintf(dev, sizeof dev, "/dev/fd/%d", fd[0]);
    ck_assert_int_eq(gguf_read_small_file(dev, 5, &text, &n, &err), GGUF_E_LIMIT);
    close(fd[0]);
}
END_TEST

START_TEST(npy_layout)
{
    gguf_error err;
    const float v[6] = {1, 2, 3, 4, 5, 6};
    char path[4096];
    snprintf(path, sizeof path, "%s", tpath("m.npy"));
    ck_assert_int_eq(gguf_npy_write_f32(path, v, 2, 3, &err), 0);
    size_t n;
    unsigned char *b = (unsigned char *)slurp(path, &n);
    ck_assert_uint_eq(n, 128 + 24);
    ck_assert_int_eq(memcmp(b, "\x93NUMPY\x01\x00", 8), 0);
    ck_assert_uint_eq(b[8] | b[9] << 8, 118);
    const char *want = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    ck_assert_int_eq(memcmp(b + 10, want, strlen(want)), 0);
    ck_assert_uint_eq(b[127], '\n');
    ck_assert_int_eq(memcmp(b + 128, v, sizeof v), 0);
    free(b);
    /* replacing is the .npy default */
    ck_assert_int_eq(gguf_npy_write_f32(path, v, 1, 6, &err), 0);
    /* one dimension keeps the tuple comma */
    gguf_npy_writer *w = NULL;
    const int64_t shape[1] = {4};
    ck_assert_int_eq(gguf_npy_writer_create_f32(&w, tpath("v.npy"), shape, 1, NULL, &err), 0);
    ck_assert_int_eq(gguf_npy_writer_append_f32(w, v, 3, &err), 0);
    ck_assert_int_eq(gguf_npy_writer_append_f32(w, v, 2, &err), GGUF_E_INVALID); /* past the shape */
    ck_assert_int_eq(gguf_npy_writer_commit(w, &err), GGUF_E_INVALID);           /* one short */
    ck_assert_int_eq(gguf_npy_writer_append_f32(w, v, 1, &err), 0);
    ck_assert_int_eq(gguf_npy_writer_commit(w, &err), 0);
    gguf_npy_writer_free(w);
    b = (unsigned char *)slurp(tpath("v.npy"), &n);
    ck_assert_ptr_nonnull(strstr((char *)b + 10, "'shape': (4,), }"));
    free(b);
    ck_assert_int_eq(entries(), 2);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("output");
    TCase *tc = tcase_create("output");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, appears_at_commit_only);
    tcase_add_test(tc, free_before_commit_leaves_nothing);
    tcase_add_test(tc, existing_file_kept_unless_overwrite);
    tcase_add_test(tc, appeared_meanwhile_not_replaced);
    tcase_add_test(tc, unique_temporary_names);
    tcase_add_test(tc, missing_folder_is_io_error);
    tcase_add_test(tc, small_file_read_whole);
    tcase_add_test(tc, npy_layout);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
