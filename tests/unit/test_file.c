/*
 * Parser tests: valid files of every metadata type, and one test (at least)
 * per malformed-input class, each checking the error code, that the message
 * names the field, and the byte offset.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/file.h"
#include "gguf/tokenize.h"
#include "helper_buf.h"

static int open_buf(const tbuf *b, gguf_file **f, gguf_error *err)
{
    return gguf_file_open_memory(f, b->p, b->n, "t.gguf", NULL, err);
}

/* Expect failure with code, a message containing needle, and (unless -1) offset. */
static void expect_fail(const tbuf *b, int code, const char *needle, long long offset)
{
    gguf_file *f = NULL;
    gguf_error err;
    int rc = open_buf(b, &f, &err);
    ck_assert_msg(rc == code, "expected %s, got %s: %s", gguf_status_name(code),
                  gguf_status_name(rc), err.message);
    ck_assert_ptr_null(f);
    ck_assert_msg(strstr(err.message, "t.gguf") != NULL, "no file name in: %s", err.message);
    if (needle)
        ck_assert_msg(strstr(err.message, needle) != NULL, "'%s' not in: %s", needle,
                      err.message);
    if (offset >= 0)
        ck_assert_msg(err.offset == (uint64_t)offset, "offset %llu, expected %lld: %s",
                      (unsigned long long)err.offset, offset, err.message);
}

/* A small valid file: 2 kvs, 2 tensors (F32 [4,2], Q8_0 [32]). */
static void make_valid(tbuf *b)
{
    tb_header(b, 3, 2, 2);
    tb_kv_str(b, "general.architecture", "llama");
    tb_kv_u32(b, "llama.block_count", 1);
    int64_t ne1[2] = {4, 2}, ne2[1] = {32};
    tb_tensor(b, "a.weight", 2, ne1, 0, 0);
    tb_tensor(b, "b.weight", 1, ne2, 8, 32);
    tb_pad(b, 32);
    for (int i = 0; i < 8; i++) {
        float v = (float)i;
        tb_bytes(b, &v, 4);
    }
    tb_zeros(b, 34);
    tb_pad(b, 32);
}

START_TEST(valid_small)
{
    tbuf b = {0};
    make_valid(&b);
    gguf_file *f;
    gguf_error err;
    ck_assert_int_eq(open_buf(&b, &f, &err), 0);
    ck_assert_int_eq(gguf_file_version(f), 3);
    ck_assert_int_eq(gguf_file_kv_count(f), 2);
    ck_assert_int_eq(gguf_file_tensor_count(f), 2);
    gguf_str s;
    ck_assert_int_eq(gguf_get_str(f, "general.architecture", &s, NULL), 0);
    ck_assert(gguf_str_eq(s, "llama"));
    uint64_t u;
    ck_assert_int_eq(gguf_get_u64(f, "llama.block_count", &u, NULL), 0);
    ck_assert_int_eq(u, 1);
    ck_assert_int_eq(gguf_get_u64(f, "missing", &u, &err), GGUF_E_NOT_FOUND);
    ck_assert(strstr(err.message, "missing") != NULL);
    ck_assert_int_eq(gguf_get_u64(f, "general.architecture", &u, &err), GGUF_E_WRONG_TYPE);
    const gguf_tensor *t = gguf_file_tensor_find(f, "b.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->type, 8);
    ck_assert_int_eq(t->nbytes, 34);
    ck_assert_int_eq(t->file_offset, gguf_file_data_offset(f) + 32);
    const gguf_tensor *a = gguf_file_tensor_find(f, "a.weight");
    float v;
    memcpy(&v, a->data + 4 * 5, 4);
    ck_assert(v == 5.0f);
    ck_assert_ptr_null(gguf_file_tensor_find(f, "c.weight"));
    gguf_file_free(f);
    tb_free(&b);
}
END_TEST

START_TEST(every_value_type)
{
    tbuf b = {0};
    tb_header(&b, 3, 0, 14);
    const char *keys[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str",
                          "u64", "i64", "f64"};
    uint32_t types[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12};
    for (int i = 0; i < 12; i++) {
        tb_str(&b, keys[i]);
        tb_u32(&b, types[i]);
        switch (types[i]) {
        case 0: tb_u8(&b, 200); break;
        case 1: tb_u8(&b, (uint8_t)-5); break;
        case 2: { uint16_t x = 60000; tb_bytes(&b, &x, 2); break; }
        case 3: { int16_t x = -30000; tb_bytes(&b, &x, 2); break; }
        case 4: tb_u32(&b, 4000000000u); break;
        case 5: tb_u32(&b, (uint32_t)-7); break;
        case 6: { float x = 1.5f; tb_bytes(&b, &x, 4); break; }
        case 7: tb_u8(&b, 1); break;
        case 8: tb_str(&b, "héllo"); break;
        case 10: tb_u64(&b, UINT64_MAX); break;
        case 11: tb_u64(&b, (uint64_t)INT64_MIN); break;
        case 12: { double x = -2.25; tb_bytes(&b, &x, 8); break; }
        }
    }
    /* array of strings, array of arrays of u16 */
    tb_str(&b, "arr.str");
    tb_u32(&b, 9);
    tb_u32(&b, 8);
    tb_u64(&b, 2);
    tb_str(&b, "x");
    tb_str(&b, "yz");
    tb_str(&b, "arr.nested");
    tb_u32(&b, 9);
    tb_u32(&b, 9);
    tb_u64(&b, 2);
    for (int k = 0; k < 2; k++) {
        tb_u32(&b, 2);
        tb_u64(&b, 3);
        for (uint16_t j = 0; j < 3; j++) {
            uint16_t x = (uint16_t)(10 * k + j);
            tb_bytes(&b, &x, 2);
        }
    }
    gguf_file *f;
    gguf_error err;
    ck_assert_int_eq(open_buf(&b, &f, &err), 0);
    uint64_t u;
    int64_t i;
    double d;
    ck_assert_int_eq(gguf_get_u64(f, "u8", &u, NULL), 0);
    ck_assert_int_eq(u, 200);
    ck_assert_int_eq(gguf_get_i64(f, "i8", &i, NULL), 0);
    ck_assert_int_eq(i, -5);
    ck_assert_int_eq(gguf_get_u64(f, "i8", &u, NULL), GGUF_E_BAD_VALUE);
    ck_assert_int_eq(gguf_get_u64(f, "u16", &u, NULL), 0);
    ck_assert_int_eq(u, 60000);
    ck_assert_int_eq(gguf_get_i64(f, "i16", &i, NULL), 0);
    ck_assert_int_eq(i, -30000);
    ck_assert_int_eq(gguf_get_u64(f, "u32", &u, NULL), 0);
    ck_assert_int_eq(u, 4000000000u);
    ck_assert_int_eq(gguf_get_i64(f, "i32", &i, NULL), 0);
    ck_assert_int_eq(i, -7);
    ck_assert_int_eq(gguf_get_f64(f, "f32", &d, NULL), 0);
    ck_assert(d == 1.5);
    bool bo;
    ck_assert_int_eq(gguf_get_bool(f, "bool", &bo, NULL), 0);
    ck_assert(bo);
    gguf_str s;
    ck_assert_int_eq(gguf_get_str(f, "str", &s, NULL), 0);
    ck_assert(gguf_str_eq(s, "héllo"));
    ck_assert_int_eq(gguf_get_u64(f, "u64", &u, NULL), 0);
    ck_assert(u == UINT64_MAX);
    ck_assert_int_eq(gguf_get_i64(f, "u64", &i, NULL), GGUF_E_BAD_VALUE);
    ck_assert_int_eq(gguf_get_i64(f, "i64", &i, NULL), 0);
    ck_assert(i == INT64_MIN);
    ck_assert_int_eq(gguf_get_f64(f, "f64", &d, NULL), 0);
    ck_assert(d == -2.25);
    const gguf_value *arr;
    ck_assert_int_eq(gguf_get_arr(f, "arr.str", &arr, NULL), 0);
    ck_assert_int_eq(arr->v.arr.n, 2);
    gguf_value e = gguf_value_elem(arr, 1);
    ck_assert(gguf_str_eq(e.v.str, "yz"));
    ck_assert_int_eq(gguf_get_arr(f, "arr.nested", &arr, NULL), 0);
    gguf_value inner = gguf_value_elem(arr, 1);
    ck_assert_int_eq(inner.type, GGUF_VALUE_ARRAY);
    gguf_value x = gguf_value_elem(&inner, 2);
    ck_assert_int_eq(x.type, GGUF_VALUE_UINT16);
    ck_assert_int_eq(x.v.u16, 12);
    gguf_file_free(f);
    tb_free(&b);
}
END_TEST

/* Every prefix of a valid file fails cleanly (truncated at every field). */
START_TEST(truncated_everywhere)
{
    tbuf b = {0};
    make_valid(&b);
    /* Trailing padding after the last tensor is optional; everything before it is not. */
    size_t data_end = b.n - 30;
    for (size_t n = 0; n < data_end; n++) {
        gguf_file *f = NULL;
        gguf_error err;
        int rc = gguf_file_open_memory(&f, b.p, n, "t.gguf", NULL, &err);
        ck_assert_msg(rc != 0, "prefix of %zu bytes opened", n);
        ck_assert_msg(rc == GGUF_E_TRUNCATED || (n == 0 && rc == GGUF_E_NOT_GGUF),
                      "prefix %zu: %s: %s", n, gguf_status_name(rc), err.message);
        ck_assert_ptr_null(f);
        if (n >= 4)
            ck_assert_msg(err.offset <= n, "offset %llu beyond %zu",
                          (unsigned long long)err.offset, n);
    }
    tb_free(&b);
}
END_TEST

START_TEST(huge_counts)
{
    tbuf b = {0};
    tb_header(&b, 3, 0, UINT64_MAX / 2);
    expect_fail(&b, GGUF_E_TRUNCATED, "n_kv", 16);
    tb_free(&b);
    tb_header(&b, 3, UINT64_MAX, 0);
    expect_fail(&b, GGUF_E_TRUNCATED, "n_tensors", 8);
    tb_free(&b);
}
END_TEST

START_TEST(string_past_end)
{
    tbuf b = {0};
    tb_header(&b, 3, 0, 1);
    tb_u64(&b, 1000); /* key length */
    tb_bytes(&b, "abc", 3);
    tb_zeros(&b, 16);
    expect_fail(&b, GGUF_E_TRUNCATED, "metadata[0].key", 24);
    tb_free(&b);
    tb_header(&b, 3, 0, 1);
    tb_str(&b, "k");
    tb_u32(&b, 8);
    tb_u64(&b, UINT64_MAX);
    expect_fail(&b, GGUF_E_TRUNCATED, "metadata 'k'", 24 + 9 + 4);
    tb_free(&b);
}
END_TEST

START_TEST(array_past_end)
{
    tbuf b = {0};
    tb_header(&b, 3, 0, 1);
    tb_str(&b, "k");
    tb_u32(&b, 9);
    tb_u32(&b, 4);
    tb_u64(&b, 1ull << 40);
    tb_u32(&b, 1);
    expect_fail(&b, GGUF_E_TRUNCATED, "array", 24 + 9 + 4 + 4);
    tb_free(&b);
}
END_TEST

START_TEST(nesting_depth)
{
    tbuf b = {0};
    tb_header(&b, 3, 0, 1);
    tb_str(&b, "deep");
    tb_u32(&b, 9);
    for (int i = 0; i < 20; i++) {
        tb_u32(&b, 9);
        tb_u64(&b, 1);
    }
    tb_u32(&b, 4);
    tb_u64(&b, 0);
    expect_fail(&b, GGUF_E_LIMIT, "nested", -1);
    tb_free(&b);
}
END_TEST

START_TEST(bad_dims_and_shapes)
{
    tbuf b = {0};
    int64_t ne5[5] = {1, 1, 1, 1, 1};
    tb_header(&b, 3, 1, 0);
    tb_tensor(&b, "t", 5, ne5, 0, 0);
    expect_fail(&b, GGUF_E_BAD_SHAPE, "n_dims 5", 24 + 9);
    tb_free(&b);

    int64_t neg[2] = {4, -3};
    tb_header(&b, 3, 1, 0);
    tb_tensor(&b, "t", 2, neg, 0, 0);
    expect_fail(&b, GGUF_E_BAD_SHAPE, "negative", 24 + 9 + 4 + 8);
    tb_free(&b);

    int64_t big[2] = {INT64_MAX, 2};
    tb_header(&b, 3, 1, 0);
    tb_tensor(&b, "t", 2, big, 0, 0);
    expect_fail(&b, GGUF_E_OVERFLOW, "overflows", 24 + 9 + 4 + 8);
    tb_free(&b);

    int64_t bytes_over[1] = {INT64_MAX};
    tb_header(&b, 3, 1, 0);
    tb_tensor(&b, "t", 1, bytes_over, 0, 0); /* F32: elements fit, bytes do not */
    expect_fail(&b, GGUF_E_OVERFLOW, "byte size", -1);
    tb_free(&b);

    int64_t odd[1] = {33};
    tb_header(&b, 3, 1, 0);
    tb_tensor(&b, "t", 1, odd, 8, 0); /* Q8_0 needs multiples of 32 */
    expect_fail(&b, GGUF_E_BAD_SHAPE, "block size", -1);
    tb_free(&b);
}
END_TEST

START_TEST(zero_sized_tensor_is_valid)
{
    tbuf b = {0};
    int64_t ne[2] = {0, 4};
    tb_header(&b, 3, 1, 0);
    tb_tensor(&b, "empty", 2, ne, 0, 0);
    tb_pad(&b, 32);
    gguf_file *f;
    ck_assert_int_eq(open_buf(&b, &f, NULL), 0);
    ck_assert_int_eq(gguf_file_tensor_at(f, 0)->nbytes, 0);
    ck_assert_int_eq(gguf_file_tensor_at(f, 0)->n_elements, 0);
    gguf_file_free(f);
    tb_free(&b);
}
END_TEST

START_TEST(bad_types)
{
    tbuf b = {0};
    int64_t ne[1] = {32};
    tb_header(&b, 3, 1, 0);
    tb_tensor(&b, "t", 1, ne, 99, 0);
    expect_fail(&b, GGUF_E_BAD_TYPE, "type id 99 is unknown", -1);
    tb_free(&b);
    tb_header(&b, 3, 1, 0);
    tb_tensor(&b, "t", 1, ne, 4, 0);
    expect_fail(&b, GGUF_E_BAD_TYPE, "removed from ggml: Q4_2", -1);
    tb_free(&b);
    tb_header(&b, 3, 1, 0);
    tb_tensor(&b, "t", 1, ne, 31, 0);
    expect_fail(&b, GGUF_E_BAD_TYPE, "Q4_0_4_4", -1);
    tb_free(&b);
    tb_header(&b, 3, 0, 1);
    tb_str(&b, "k");
    tb_u32(&b, 13);
    expect_fail(&b, GGUF_E_BAD_TYPE, "unknown value type 13", -1);
    tb_free(&b);
    tb_header(&b, 3, 0, 1);
    tb_str(&b, "k");
    tb_u32(&b, 9);
    tb_u32(&b, 77);
    tb_u64(&b, 0);
    expect_fail(&b, GGUF_E_BAD_TYPE, "element type 77", -1);
    tb_free(&b);
    tb_header(&b, 3, 0, 1);
    tb_str(&b, "k");
    tb_u32(&b, 7);
    tb_u8(&b, 2);
    expect_fail(&b, GGUF_E_BAD_VALUE, "bool", -1);
    tb_free(&b);
}
END_TEST

START_TEST(bad_alignment)
{
    uint32_t bad[] = {0, 3, 48, 1u << 30};
    for (int i = 0; i < 4; i++) {
        tbuf b = {0};
        tb_header(&b, 3, 0, 1);
        tb_kv_u32(&b, "general.alignment", bad[i]);
        expect_fail(&b, GGUF_E_BAD_ALIGNMENT, "general.alignment", 24);
        tb_free(&b);
    }
    tbuf b = {0};
    tb_header(&b, 3, 0, 1);
    tb_kv_str(&b, "general.alignment", "32");
    expect_fail(&b, GGUF_E_BAD_ALIGNMENT, "must be uint32", 24);
    tb_free(&b);
}
END_TEST

START_TEST(bad_data_offsets)
{
    int64_t ne[1] = {8};
    tbuf b = {0};
    /* misaligned */
    tb_header(&b, 3, 1, 0);
    tb_tensor(&b, "t", 1, ne, 0, 4);
    tb_pad(&b, 32);
    tb_zeros(&b, 64);
    expect_fail(&b, GGUF_E_BAD_OFFSET, "not a multiple of the alignment", -1);
    tb_free(&b);
    /* past the end of the file */
    tb_header(&b, 3, 1, 0);
    tb_tensor(&b, "t", 1, ne, 0, 64);
    tb_pad(&b, 32);
    tb_zeros(&b, 64);
    expect_fail(&b, GGUF_E_TRUNCATED, "runs past the end", 24);
    tb_free(&b);
    /* overlapping */
    int64_t ne2[1] = {16};
    tb_header(&b, 3, 2, 0);
    tb_tensor(&b, "a", 1, ne2, 0, 0);
    tb_tensor(&b, "b", 1, ne, 0, 32);
    tb_pad(&b, 32);
    tb_zeros(&b, 128);
    expect_fail(&b, GGUF_E_BAD_OFFSET, "overlaps", -1);
    tb_free(&b);
    /* offset near UINT64_MAX: overflow */
    tb_header(&b, 3, 1, 0);
    tb_tensor(&b, "t", 1, ne, 0, UINT64_MAX - 31);
    tb_pad(&b, 32);
    expect_fail(&b, GGUF_E_OVERFLOW, "overflows", 24);
    tb_free(&b);
}
END_TEST

START_TEST(duplicates)
{
    tbuf b = {0};
    tb_header(&b, 3, 0, 2);
    tb_kv_u32(&b, "a.key", 1);
    size_t second = b.n;
    tb_kv_u32(&b, "a.key", 2);
    expect_fail(&b, GGUF_E_DUPLICATE, "duplicate key 'a.key'", (long long)second);
    tb_free(&b);
    int64_t ne[1] = {8};
    tb_header(&b, 3, 2, 0);
    tb_tensor(&b, "w", 1, ne, 0, 0);
    size_t t2 = b.n;
    tb_tensor(&b, "w", 1, ne, 0, 32);
    tb_pad(&b, 32);
    tb_zeros(&b, 64);
    expect_fail(&b, GGUF_E_DUPLICATE, "duplicate tensor name 'w'", (long long)t2);
    tb_free(&b);
}
END_TEST

START_TEST(bad_utf8)
{
    tbuf b = {0};
    tb_header(&b, 3, 0, 1);
    tb_u64(&b, 3);
    tb_bytes(&b, "a\xff" "b", 3);
    tb_u32(&b, 4);
    tb_u32(&b, 1);
    expect_fail(&b, GGUF_E_BAD_UTF8, "metadata[0].key", 32);
    tb_free(&b);
    int64_t ne[1] = {8};
    tb_header(&b, 3, 1, 0);
    tb_u64(&b, 2);
    tb_bytes(&b, "\xc0\x80", 2); /* overlong NUL */
    tb_u32(&b, 1);
    tb_u64(&b, (uint64_t)ne[0]);
    tb_u32(&b, 0);
    tb_u64(&b, 0);
    expect_fail(&b, GGUF_E_BAD_UTF8, "tensor_infos[0].name", 32);
    tb_free(&b);
}
END_TEST

START_TEST(name_too_long)
{
    tbuf b = {0};
    tb_header(&b, 3, 0, 1);
    tb_u64(&b, 70000);
    tb_zeros(&b, 70000);
    tb_u32(&b, 4);
    tb_u32(&b, 1);
    expect_fail(&b, GGUF_E_LIMIT, "over the limit", 24);
    tb_free(&b);
}
END_TEST

START_TEST(not_gguf)
{
    tbuf b = {0};
    expect_fail(&b, GGUF_E_NOT_GGUF, "empty", 0);
    const char *lfs = "version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 123\n";
    tb_bytes(&b, lfs, strlen(lfs));
    expect_fail(&b, GGUF_E_NOT_GGUF, "Git LFS pointer", 0);
    tb_free(&b);
    const char *html = "\n  <!DOCTYPE html><html><body>Not found</body></html>";
    tb_bytes(&b, html, strlen(html));
    expect_fail(&b, GGUF_E_NOT_GGUF, "HTML", 0);
    tb_free(&b);
    tb_u64(&b, 20);
    tb_bytes(&b, "{\"__metadata__\":{}} ", 20);
    expect_fail(&b, GGUF_E_NOT_GGUF, "safetensors", 0);
    tb_free(&b);
    tb_bytes(&b, "GGML\x03\0\0\0", 8);
    expect_fail(&b, GGUF_E_BAD_MAGIC, "magic", 0);
    tb_free(&b);
}
END_TEST

START_TEST(bad_versions)
{
    tbuf b = {0};
    tb_header(&b, 1, 0, 0);
    expect_fail(&b, GGUF_E_BAD_VERSION, "version 1", 4);
    tb_free(&b);
    tb_header(&b, 0x03000000u, 0, 0);
    expect_fail(&b, GGUF_E_BAD_VERSION, "big-endian", 4);
    tb_free(&b);
    tb_header(&b, 4, 0, 0);
    expect_fail(&b, GGUF_E_BAD_VERSION, "unknown GGUF version 4", 4);
    tb_free(&b);
    tb_header(&b, 2, 0, 0);
    gguf_file *f;
    ck_assert_int_eq(open_buf(&b, &f, NULL), 0);
    ck_assert_int_eq(gguf_file_version(f), 2);
    gguf_file_free(f);
    tb_free(&b);
}
END_TEST

START_TEST(open_path_errors)
{
    gguf_file *f;
    gguf_error err;
    ck_assert_int_eq(gguf_file_open(&f, "/nonexistent/x.gguf", NULL, &err), GGUF_E_NOT_FOUND);
    ck_assert(strstr(err.message, "/nonexistent/x.gguf") != NULL);
    ck_assert_int_eq(gguf_file_open(&f, "/tmp", NULL, &err), GGUF_E_NOT_GGUF);
    ck_assert(strstr(err.message, "not a regular file") != NULL);
}
END_TEST

START_TEST(status_names)
{
    for (int c = 0; c >= GGUF_E_STATUS_MIN; c--) {
        ck_assert(strncmp(gguf_status_name(c), "GGUF_", 5) == 0);
        ck_assert(strcmp(gguf_strerror(c), "unknown error") != 0);
    }
    ck_assert_str_eq(gguf_status_name(-999), "GGUF_E_UNKNOWN");
}
END_TEST

/* GGUF_E_OPTS_VERSION: an options struct newer than the library is refused,
 * naming the struct; 0 (a zeroed struct) and the current version are known. */
START_TEST(opts_version)
{
    tbuf b = {0};
    make_valid(&b);
    gguf_file *f = NULL;
    gguf_error err;
    gguf_open_opts o = GGUF_OPEN_OPTS_INIT;
    ck_assert_uint_eq(o.version, GGUF_OPEN_OPTS_VERSION);
    ck_assert_int_eq(gguf_file_open_memory(&f, b.p, b.n, "t.gguf", &o, &err), 0);
    gguf_file_free(f);
    o.version = 0;
    ck_assert_int_eq(gguf_file_open_memory(&f, b.p, b.n, "t.gguf", &o, &err), 0);
    gguf_file_free(f);
    o.version = GGUF_OPEN_OPTS_VERSION + 1;
    ck_assert_int_eq(gguf_file_open_memory(&f, b.p, b.n, "t.gguf", &o, &err),
                     GGUF_E_OPTS_VERSION);
    ck_assert_ptr_nonnull(strstr(err.message, "gguf_open_opts"));
    ck_assert_str_eq(gguf_status_name(GGUF_E_OPTS_VERSION), "GGUF_E_OPTS_VERSION");
    gguf_tokenize_opts to;
    gguf_tokenize_opts_init(&to);
    ck_assert_uint_eq(to.version, GGUF_TOKENIZE_OPTS_VERSION);
    tb_free(&b);
}
END_TEST

START_TEST(type_table)
{
    ck_assert_str_eq(gguf_type_name(GGUF_TYPE_Q4_K), "Q4_K");
    ck_assert_int_eq(gguf_type_get(GGUF_TYPE_Q8_1)->type_size, 36);
    ck_assert_int_eq(gguf_type_get(GGUF_TYPE_NVFP4)->block_size, 64);
    ck_assert(!gguf_type_is_valid(4));
    ck_assert(gguf_type_get(4)->removed);
    ck_assert_ptr_null(gguf_type_get(200));
    ck_assert_int_eq(gguf_type_from_name("iq2_xxs"), GGUF_TYPE_IQ2_XXS);
    ck_assert_int_eq(gguf_type_from_name("Q4_2"), -1);
    uint64_t n;
    ck_assert_int_eq(gguf_type_row_bytes(GGUF_TYPE_Q4_K, 512, &n), 0);
    ck_assert_int_eq(n, 288);
    ck_assert_int_eq(gguf_type_row_bytes(GGUF_TYPE_Q4_K, 100, &n), GGUF_E_BAD_SHAPE);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("file");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, valid_small);
    tcase_add_test(tc, every_value_type);
    tcase_add_test(tc, truncated_everywhere);
    tcase_add_test(tc, huge_counts);
    tcase_add_test(tc, string_past_end);
    tcase_add_test(tc, array_past_end);
    tcase_add_test(tc, nesting_depth);
    tcase_add_test(tc, bad_dims_and_shapes);
    tcase_add_test(tc, zero_sized_tensor_is_valid);
    tcase_add_test(tc, bad_types);
    tcase_add_test(tc, bad_alignment);
    tcase_add_test(tc, bad_data_offsets);
    tcase_add_test(tc, duplicates);
    tcase_add_test(tc, bad_utf8);
    tcase_add_test(tc, name_too_long);
    tcase_add_test(tc, not_gguf);
    tcase_add_test(tc, bad_versions);
    tcase_add_test(tc, open_path_errors);
    tcase_add_test(tc, status_names);
    tcase_add_test(tc, opts_version);
    tcase_add_test(tc, type_table);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
