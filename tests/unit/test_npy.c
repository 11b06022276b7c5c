/*
 * The .npy reader: one test per malformed-input class (code, the field named
 * in the message, the byte offset), the committed corpus
 * (tests/fuzz/corpus/npy: ok--* written by numpy itself, GGUF_E_<CODE>--*
 * must fail with CODE), values of every dtype, Fortran order, format
 * versions, and the writer read back.
 */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/dequant.h"
#include "gguf/npy.h"
#include "helper_buf.h"
#include "helper_corpus.h"

/* A version-1.0 file with this header dict (padded like numpy) and n data bytes. */
static void npy_build(tbuf *b, const char *dict, size_t n_data)
{
    size_t len = strlen(dict);
    const size_t pad = (64 - (10 + len + 1) % 64) % 64;
    const size_t hlen = len + pad + 1;
    tb_bytes(b, "\x93NUMPY\x01\x00", 8);
    tb_u8(b, (uint8_t)(hlen & 0xFF));
    tb_u8(b, (uint8_t)(hlen >> 8));
    tb_bytes(b, dict, len);
    for (size_t i = 0; i < pad; i++)
        tb_u8(b, ' ');
    tb_u8(b, '\n');
    for (size_t i = 0; i < n_data; i++)
        tb_u8(b, (uint8_t)i);
}

static int npy_open_dict(const char *dict, size_t n_data, const gguf_npy_opts *o, gguf_npy **a,
                         gguf_error *err)
{
    static tbuf b; /* alive while the array is open: freed by the next call */
    tb_free(&b);
    npy_build(&b, dict, n_data);
    return gguf_npy_open_memory(a, b.p, b.n, "t.npy", o, err);
}

static void expect_fail(const char *dict, size_t n_data, int code, const char *needle,
                        long long offset)
{
    gguf_npy *a = NULL;
    gguf_error err;
    const int rc = npy_open_dict(dict, n_data, NULL, &a, &err);
    ck_assert_msg(rc == code, "%s: expected %s, got %s: %s", dict, gguf_status_name(code),
                  gguf_status_name(rc), err.message);
    ck_assert_ptr_null(a);
    ck_assert_msg(strstr(err.message, "t.npy") != NULL, "no file name: %s", err.message);
    if (needle)
        ck_assert_msg(strstr(err.message, needle) != NULL, "'%s' not in: %s", needle,
                      err.message);
    if (offset >= 0)
        ck_assert_msg(err.offset == (uint64_t)offset, "offset %llu, wanted %lld: %s",
                      (unsigned long long)err.offset, offset, err.message);
}

START_TEST(header_classes)
{
    /* the dict starts at byte 10 */
    expect_fail("{'descr': '<f4', 'fortran_order': False, 'shape': (2), }", 8, GGUF_E_BAD_VALUE,
                "'shape': (n) is not a tuple", 10 + 52);
    expect_fail("{'descr': '<f4', 'fortran_order': False, 'shape': (02,), }", 8, GGUF_E_BAD_VALUE,
                "'shape': a leading zero", 10 + 51);
    expect_fail("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", 8, GGUF_E_BAD_VALUE,
                "'shape': expected a non-negative integer", 10 + 51);
    expect_fail("{'descr': '<f4', 'fortran_order': 0, 'shape': (2,), }", 8, GGUF_E_BAD_VALUE,
                "'fortran_order': expected True or False", 10 + 34);
    expect_fail("{'descr': '<f4', 'fortran_order': Falsey, 'shape': (2,), }", 8, GGUF_E_BAD_VALUE,
                "'fortran_order'", -1);
    expect_fail("{'descr': '<f4', 'shape': (2,), }", 8, GGUF_E_BAD_VALUE,
                "key 'fortran_order' missing", 10);
    expect_fail("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}", 8,
                GGUF_E_BAD_VALUE, "unknown key 'extra'", 10 + 56);
    expect_fail("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 8,
                GGUF_E_DUPLICATE, "key 'descr' twice", 10 + 17);
    expect_fail("{\"descr\": \"<f4\", \"fortran_order\": false, \"shape\": [2]}", 8,
                GGUF_E_BAD_VALUE, "'fortran_order'", -1);
    expect_fail("['<f4']", 8, GGUF_E_BAD_VALUE, "not a dict", 10);
    expect_fail("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } junk", 8,
                GGUF_E_BAD_VALUE, "not spaces", 10 + 58);
    expect_fail("{'descr': '<f4' 'fortran_order': False, 'shape': (2,)}", 8, GGUF_E_BAD_VALUE,
                "expected ',' or '}'", -1);
    expect_fail("{'descr': '<f\\x34', 'fortran_order': False, 'shape': (2,)}", 8,
                GGUF_E_BAD_VALUE, "'descr': escape", -1);
    expect_fail("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3", 24, GGUF_E_BAD_VALUE,
                "'shape'", -1);
    expect_fail("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1)}", 4,
                GGUF_E_LIMIT, "more than 8 dimensions", -1);
    expect_fail("{'descr': '<f4', 'fortran_order': False, 'shape': (12345678901234567890,)}", 0,
                GGUF_E_LIMIT, "19 digits", 10 + 51);
    expect_fail("{'descr': '<f4', 'fortran_order': False, 'shape': (9999999999999999999,)}", 0,
                GGUF_E_OVERFLOW, "over 2^63-1", 10 + 51);
    expect_fail("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296)}", 0,
                GGUF_E_OVERFLOW, "element count overflows", -1);
    expect_fail("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904,)}", 0,
                GGUF_E_OVERFLOW, "byte count overflows", -1);
}
END_TEST

START_TEST(descr_classes)
{
    expect_fail("{'descr': '<c8', 'fortran_order': False, 'shape': (1,)}", 8, GGUF_E_BAD_TYPE,
                "'descr': '<c8' is not a dtype", 10 + 10);
    expect_fail("{'descr': '|O', 'fortran_order': False, 'shape': (1,)}", 8, GGUF_E_BAD_TYPE,
                "'|O'", -1);
    expect_fail("{'descr': '=f4', 'fortran_order': False, 'shape': (1,)}", 4, GGUF_E_BAD_TYPE,
                "'=f4'", -1);
    expect_fail("{'descr': '<i1', 'fortran_order': False, 'shape': (1,)}", 1, GGUF_E_BAD_TYPE,
                "'<i1'", -1); /* numpy writes '|i1' */
    expect_fail("{'descr': '|f4', 'fortran_order': False, 'shape': (1,)}", 4, GGUF_E_BAD_TYPE,
                "'|f4'", -1);
    expect_fail("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,)}", 4,
                GGUF_E_UNSUPPORTED, "structured", 10 + 10);
    /* '<V2' is bfloat16 only when the caller says so */
    expect_fail("{'descr': '<V2', 'fortran_order': False, 'shape': (2,)}", 4, GGUF_E_BAD_TYPE,
                "--npy-v2 bf16", 10 + 10);
    gguf_npy *a;
    gguf_error err;
    const gguf_npy_opts o = {.v2_as_bf16 = true};
    ck_assert_int_eq(npy_open_dict("{'descr': '<V2', 'fortran_order': False, 'shape': (2,)}", 4,
                                   &o, &a, &err), 0);
    ck_assert_int_eq(gguf_npy_get_info(a)->dtype, GGUF_NPY_BF16);
    float f[2];
    ck_assert_int_eq(gguf_npy_read_f32(a, 0, 2, f, &err), 0);
    ck_assert(f[0] == gguf_bf16_to_fp32(0x0100) && f[1] == gguf_bf16_to_fp32(0x0302));
    gguf_npy_free(a);
}
END_TEST

START_TEST(file_classes)
{
    gguf_npy *a = NULL;
    gguf_error err;
    ck_assert_int_eq(gguf_npy_open_memory(&a, "", 0, "e.npy", NULL, &err), GGUF_E_BAD_MAGIC);
    ck_assert_int_eq(gguf_npy_open_memory(&a, "GGUF\3\0\0\0xxxx", 12, "g.npy", NULL, &err),
                     GGUF_E_BAD_MAGIC);
    ck_assert_int_eq(gguf_npy_open_memory(&a, "\x93NUMPY\x05\x00\x10\x00", 10, "v.npy", NULL,
                                          &err), GGUF_E_BAD_VERSION);
    ck_assert(strstr(err.message, "version 5.0") && err.offset == 6);
    ck_assert_int_eq(gguf_npy_open_memory(&a, "\x93NUMPY\x02\x00\x10\x00", 10, "l.npy", NULL,
                                          &err), GGUF_E_TRUNCATED);
    ck_assert_int_eq(gguf_npy_open_memory(&a, "\x93NUMPY\x01\x00\xff\x00{'de", 14, "h.npy",
                                          NULL, &err), GGUF_E_TRUNCATED);
    ck_assert(strstr(err.message, "header length 255") && err.offset == 8);
    /* data: one byte short, one byte over */
    expect_fail("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 7, GGUF_E_TRUNCATED,
                "need 8 bytes, the file has 7", 128);
    expect_fail("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 9, GGUF_E_BAD_OFFSET,
                "1 bytes after the array", 136);
    ck_assert_int_eq(gguf_npy_open(&a, "/nonexistent/x.npy", NULL, &err), GGUF_E_NOT_FOUND);
    ck_assert_int_eq(gguf_npy_open(&a, "/tmp", NULL, &err), GGUF_E_NOT_GGUF);
}
END_TEST

/* Parsing what numpy writes: spacing, key order, (n,), (), trailing comma or not. */
START_TEST(grammar)
{
    static const struct {
        const char *dict;
        int nd;
        int64_t d0;
    } ok[] = {
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 1, 2},
        {"{'shape':(2,),'fortran_order':False,'descr':'<f4'}", 1, 2},
        {"{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (1, 2)}", 2, 1},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2,), }", 2, 1},
        {"  {'descr': '<f4', 'fortran_order': False, 'shape': ( 2 , ) }\t", 1, 2},
        {"{'descr': '<f4', 'fortran_order': True, 'shape': (), }", 0, 0},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        gguf_npy *a;
        gguf_error err;
        const size_t n = ok[i].nd == 0 ? 4 : 8;
        ck_assert_msg(npy_open_dict(ok[i].dict, n, NULL, &a, &err) == 0, "%s: %s", ok[i].dict,
                      err.message);
        const gguf_npy_info *in = gguf_npy_get_info(a);
        ck_assert_int_eq(in->n_dims, ok[i].nd);
        if (ok[i].nd)
            ck_assert_int_eq(in->shape[0], ok[i].d0);
        ck_assert_int_eq(in->n_elements, (int64_t)n / 4);
        ck_assert_str_eq(in->descr, "<f4");
        gguf_npy_free(a);
    }
}
END_TEST

/* The committed corpus: ok--* (written by numpy) opens, GGUF_E_<CODE>--* fails with CODE. */
static int corpus_one(const char *path, const char *name, gguf_error *err)
{
    (void)name;
    const gguf_npy_opts o = {.v2_as_bf16 = true};
    gguf_npy *a = NULL;
    const int rc = gguf_npy_open(&a, path, &o, err);
    gguf_npy_free(a);
    return rc;
}

START_TEST(corpus_named_errors)
{
    th_corpus_replay("npy", corpus_one, 35);
}
END_TEST

static gguf_npy *open_corpus(const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fuzz/corpus/npy/%s", getenv("GGUFKIT_SRC"), name);
    gguf_npy *a = NULL;
    gguf_error err;
    const gguf_npy_opts o = {.v2_as_bf16 = true};
    ck_assert_msg(gguf_npy_open(&a, path, &o, &err) == 0, "%s", err.message);
    return a;
}

/* Values of the numpy-written seeds: every dtype, byte order, Fortran order, versions. */
START_TEST(values)
{
    gguf_error err;
    float f[24];
    int64_t v[3];
    static const char *const six[] = {"ok--f4.npy", "ok--f2.npy", "ok--f8-big-endian.npy",
                                      "ok--version-2.npy", "ok--version-3.npy"};
    for (size_t k = 0; k < sizeof six / sizeof six[0]; k++) {
        gguf_npy *a = open_corpus(six[k]);
        const gguf_npy_info *in = gguf_npy_get_info(a);
        ck_assert_int_eq(in->n_dims, 2);
        ck_assert(in->shape[0] == 2 && in->shape[1] == 3);
        ck_assert_int_eq(gguf_npy_read_f32(a, 0, 6, f, &err), 0);
        for (int i = 0; i < 6; i++)
            ck_assert_msg(f[i] == (float)i, "%s[%d] = %g", six[k], i, f[i]);
        ck_assert_int_eq(gguf_npy_read_f32(a, 4, 2, f, &err), 0);
        ck_assert(f[0] == 4 && f[1] == 5);
        ck_assert_int_eq(gguf_npy_read_i64(a, 0, 1, v, &err), GGUF_E_BAD_TYPE);
        gguf_npy_free(a);
    }
    gguf_npy *a = open_corpus("ok--version-3.npy");
    ck_assert_int_eq(gguf_npy_get_info(a)->major, 3);
    gguf_npy_free(a);
    /* arange(24).reshape(2,3,4) stored in Fortran order reads back in C order */
    a = open_corpus("ok--fortran.npy");
    ck_assert(gguf_npy_get_info(a)->fortran_order);
    ck_assert_int_eq(gguf_npy_read_f32(a, 0, 24, f, &err), 0);
    for (int i = 0; i < 24; i++)
        ck_assert_msg(f[i] == (float)i, "fortran[%d] = %g", i, f[i]);
    ck_assert_int_eq(gguf_npy_read_f32(a, 7, 9, f, &err), 0);
    for (int i = 0; i < 9; i++)
        ck_assert(f[i] == (float)(7 + i));
    gguf_npy_free(a);
    a = open_corpus("ok--v2.npy");
    ck_assert_int_eq(gguf_npy_read_f32(a, 0, 6, f, &err), 0);
    for (int i = 0; i < 6; i++)
        ck_assert(f[i] == gguf_bf16_to_fp32((uint16_t)i));
    gguf_npy_free(a);
    a = open_corpus("ok--i8.npy");
    ck_assert_int_eq(gguf_npy_read_i64(a, 0, 3, v, &err), 0);
    ck_assert(v[0] == 1 && v[1] == 17 && v[2] == 42);
    ck_assert_int_eq(gguf_npy_read_f32(a, 2, 1, f, &err), 0);
    ck_assert(f[0] == 42);
    ck_assert_int_eq(gguf_npy_read_i64(a, 2, 2, v, &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_npy_read_i64(a, -1, 1, v, &err), GGUF_E_INVALID);
    gguf_npy_free(a);
    a = open_corpus("ok--u1.npy");
    ck_assert_int_eq(gguf_npy_read_i64(a, 0, 3, v, &err), 0);
    ck_assert(v[0] == 1 && v[1] == 2 && v[2] == 255);
    gguf_npy_free(a);
    a = open_corpus("ok--scalar.npy");
    ck_assert_int_eq(gguf_npy_get_info(a)->n_dims, 0);
    ck_assert_int_eq(gguf_npy_read_f32(a, 0, 1, f, &err), 0);
    ck_assert(f[0] == 3.5f);
    gguf_npy_free(a);
    a = open_corpus("ok--empty.npy");
    ck_assert_int_eq(gguf_npy_get_info(a)->n_elements, 0);
    ck_assert_int_eq(gguf_npy_read_f32(a, 0, 1, f, &err), GGUF_E_INVALID);
    gguf_npy_free(a);
}
END_TEST

/* What the writer writes, the reader reads back. */
START_TEST(writer_round_trip)
{
    char *dir = th_mkdtemp();
    char path[4096];
    snprintf(path, sizeof path, "%s/w.npy", dir);
    float x[12];
    for (int i = 0; i < 12; i++)
        x[i] = (float)i * 0.25f - 1.0f;
    gguf_error err;
    ck_assert_int_eq(gguf_npy_write_f32(path, x, 3, 4, &err), 0);
    gguf_npy *a;
    ck_assert_int_eq(gguf_npy_open(&a, path, NULL, &err), 0);
    const gguf_npy_info *in = gguf_npy_get_info(a);
    ck_assert(in->n_dims == 2 && in->shape[0] == 3 && in->shape[1] == 4);
    ck_assert_int_eq(in->data_offset % 64, 0);
    float y[12];
    ck_assert_int_eq(gguf_npy_read_f32(a, 0, 12, y, &err), 0);
    ck_assert(!memcmp(x, y, sizeof x));
    gguf_npy_free(a);
    th_rmdir(dir);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("npy");
    TCase *tc = tcase_create("npy");
    tcase_add_test(tc, header_classes);
    tcase_add_test(tc, descr_classes);
    tcase_add_test(tc, file_classes);
    tcase_add_test(tc, grammar);
    tcase_add_test(tc, corpus_named_errors);
    tcase_add_test(tc, values);
    tcase_add_test(tc, writer_round_trip);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
