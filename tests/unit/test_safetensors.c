/*
 * The safetensors module: one test per malformed-input class (code, the
 * field named in the message, the byte offset), the committed corpus
 * (tests/fuzz/corpus/safetensors, each file named after its error),
 * checkpoints (folder, index, configuration), and the scaled formats
 * against values worked out by hand from the formats' definitions.
 */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/safetensors.h"
#include "helper_buf.h"
#include "helper_corpus.h"

/* header JSON + data bytes -> a safetensors image */
static void st_build(tbuf *b, const char *json, const void *data, size_t n)
{
    tb_u64(b, strlen(json));
    tb_bytes(b, json, strlen(json));
    if (n)
        tb_bytes(b, data, n);
}

static int st_open(const char *json, const void *data, size_t n, gguf_st_file **f,
                   gguf_error *err)
{
    static tbuf b; /* kept alive while the file is open: freed by the next call */
    tb_free(&b);
    st_build(&b, json, data, n);
    return gguf_st_file_open_memory(f, b.p, b.n, "t.safetensors", err);
}

static void expect_fail(const char *json, size_t n_data, int code, const char *needle,
                        long long offset)
{
    uint8_t *data = calloc(1, n_data + 1);
    gguf_st_file *f = NULL;
    gguf_error err;
    const int rc = st_open(json, data, n_data, &f, &err);
    free(data);
    ck_assert_msg(rc == code, "expected %s, got %s: %s", gguf_status_name(code),
                  gguf_status_name(rc), err.message);
    ck_assert_ptr_null(f);
    ck_assert_msg(strstr(err.message, "t.safetensors") != NULL, "no file in: %s", err.message);
    if (needle)
        ck_assert_msg(strstr(err.message, needle) != NULL, "'%s' not in: %s", needle,
                      err.message);
    if (offset >= 0)
        ck_assert_msg(err.offset == (uint64_t)offset, "offset %llu, expected %lld: %s",
                      (unsigned long long)err.offset, offset, err.message);
}

START_TEST(valid_file)
{
    const char *j = "{\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[8,12]},"
                    "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                    "\"__metadata__\":{\"format\":\"pt\",\"by\":\"test\"}}   ";
    uint8_t d[12];
    const float a[2] = {1.5f, -2.0f};
    memcpy(d, a, 8);
    d[8] = 0x80; d[9] = 0x3F; d[10] = 0x40; d[11] = 0xC0; /* bf16 1.0, -3.0 */
    gguf_st_file *f;
    gguf_error err;
    ck_assert_int_eq(st_open(j, d, sizeof d, &f, &err), 0);
    ck_assert_int_eq(gguf_st_file_tensor_count(f), 2);
    ck_assert_str_eq(gguf_st_file_tensor_at(f, 0)->name, "a"); /* data order */
    const gguf_st_tensor *t = gguf_st_file_tensor_find(f, "b");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->dtype, GGUF_ST_BF16);
    ck_assert_int_eq(t->file_offset, 8 + strlen(j) + 8);
    float out[2];
    ck_assert_int_eq(gguf_st_tensor_to_f32(t, 0, 2, out, &err), 0);
    ck_assert(out[0] == 1.0f && out[1] == -3.0f);
    ck_assert_int_eq(gguf_st_file_meta_count(f), 2);
    const char *k, *v;
    gguf_st_file_meta_at(f, 0, &k, &v);
    ck_assert_str_eq(k, "by");
    ck_assert_str_eq(gguf_st_file_meta_get(f, "format"), "pt");
    ck_assert_ptr_null(gguf_st_file_tensor_find(f, "c"));
    gguf_st_weight w;
    ck_assert_int_eq(gguf_st_weight_find_file(f, "a", &w, &err), 0);
    ck_assert_int_eq(w.format, GGUF_ST_FMT_PLAIN);
    ck_assert_int_eq(gguf_st_weight_rows(&w, 0, 1, out, &err), 0);
    ck_assert(out[0] == 1.5f && out[1] == -2.0f);
    ck_assert_int_eq(gguf_st_weight_rows(&w, 1, 1, out, &err), GGUF_E_INVALID);
    gguf_st_file_free(f);
    /* empty: "{}" and nothing after */
    ck_assert_int_eq(st_open("{}", NULL, 0, &f, &err), 0);
    ck_assert_int_eq(gguf_st_file_tensor_count(f), 0);
    gguf_st_file_free(f);
}
END_TEST

START_TEST(every_dtype)
{
    static const char *names[] = {"BOOL", "U8", "I8", "I16", "U16", "I32", "U32", "I64",
                                  "U64", "F16", "BF16", "F32", "F64", "F8_E4M3", "F8_E5M2",
                                  "F8_E8M0"};
    for (int d = 0; d < GGUF_ST_DTYPE_COUNT; d++) {
        ck_assert_str_eq(gguf_st_dtype_name(d), names[d]);
        ck_assert_int_eq(gguf_st_dtype_from_name(names[d]), d);
        char j[256];
        const unsigned sz = gguf_st_dtype_size(d);
        snprintf(j, sizeof j, "{\"x\":{\"dtype\":\"%s\",\"shape\":[1,2],\"data_offsets\":[0,%u]}}",
                 names[d], 2 * sz);
        uint8_t data[16] = {0};
        data[0] = 1; /* element 0 has its low byte 1, element 1 is zero */
        gguf_st_file *f;
        gguf_error err;
        ck_assert_msg(st_open(j, data, 2 * sz, &f, &err) == 0, "%s: %s", names[d], err.message);
        float v[2];
        ck_assert_int_eq(gguf_st_tensor_to_f32(gguf_st_file_tensor_at(f, 0), 0, 2, v, &err), 0);
        if (d <= GGUF_ST_U64)
            ck_assert_msg(v[0] == 1.0f && v[1] == 0.0f, "%s: %g %g", names[d], v[0], v[1]);
        gguf_st_file_free(f);
    }
    ck_assert_int_eq(gguf_st_dtype_from_name("F4"), -1);
}
END_TEST

START_TEST(fp8_conversions)
{
    /* E4M3FN: S EEEE MMM, bias 7 */
    ck_assert(gguf_fp8_e4m3_to_fp32(0x38) == 1.0f);
    ck_assert(gguf_fp8_e4m3_to_fp32(0x7E) == 448.0f);
    ck_assert(gguf_fp8_e4m3_to_fp32(0x01) == 0x1p-9f);
    ck_assert(gguf_fp8_e4m3_to_fp32(0x08) == 0x1p-6f);
    ck_assert(gguf_fp8_e4m3_to_fp32(0xC4) == -3.0f);
    ck_assert(isnan(gguf_fp8_e4m3_to_fp32(0x7F)) && isnan(gguf_fp8_e4m3_to_fp32(0xFF)));
    ck_assert(signbit(gguf_fp8_e4m3_to_fp32(0x80)) && gguf_fp8_e4m3_to_fp32(0x80) == 0.0f);
    ck_assert(!isinf(gguf_fp8_e4m3_to_fp32(0x78)));
    /* E5M2: the top byte of a half */
    ck_assert(gguf_fp8_e5m2_to_fp32(0x3C) == 1.0f);
    ck_assert(gguf_fp8_e5m2_to_fp32(0x7B) == 57344.0f);
    ck_assert(isinf(gguf_fp8_e5m2_to_fp32(0x7C)));
    ck_assert(isnan(gguf_fp8_e5m2_to_fp32(0x7D)));
    ck_assert(gguf_fp8_e5m2_to_fp32(0x01) == 0x1p-16f);
    /* E2M1 */
    static const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    for (int i = 0; i < 16; i++)
        ck_assert(gguf_fp4_e2m1_to_fp32((uint8_t)i) == (i & 8 ? -e2m1[i & 7] : e2m1[i & 7]));
    ck_assert(signbit(gguf_fp4_e2m1_to_fp32(8)));
}
END_TEST

START_TEST(header_length)
{
    gguf_st_file *f;
    gguf_error err;
    ck_assert_int_eq(gguf_st_file_open_memory(&f, "\x02\0\0", 3, "t.safetensors", &err),
                     GGUF_E_NOT_GGUF);
    tbuf b = {0};
    tb_u64(&b, 200);
    tb_bytes(&b, "{}", 2);
    ck_assert_int_eq(gguf_st_file_open_memory(&f, b.p, b.n, "t.safetensors", &err),
                     GGUF_E_TRUNCATED);
    ck_assert_int_eq(err.offset, 0);
    ck_assert(strstr(err.message, "header length") != NULL);
    tb_free(&b);
    tb_u64(&b, (uint64_t)GGUF_ST_MAX_HEADER + 1);
    tb_bytes(&b, "{}", 2);
    ck_assert_int_eq(gguf_st_file_open_memory(&f, b.p, b.n, "t.safetensors", &err),
                     GGUF_E_LIMIT);
    tb_free(&b);
}
END_TEST

START_TEST(not_json_object)
{
    expect_fail("[1, 2]", 0, GGUF_E_BAD_MAGIC, "'{'", 8);
    expect_fail("GGUF", 0, GGUF_E_BAD_MAGIC, "header", 8);
    /* malformed JSON: the offset is where jansson stopped */
    expect_fail("{\"a\": }", 0, GGUF_E_BAD_VALUE, "header", -1);
    expect_fail("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4,
                GGUF_E_BAD_VALUE, "header", -1);
}
END_TEST

START_TEST(bad_utf8)
{
    expect_fail("{\"a\xff\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4,
                GGUF_E_BAD_UTF8, "UTF-8", -1);
    expect_fail("{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4,
                GGUF_E_BAD_UTF8, NULL, -1);
    expect_fail("{\"__metadata__\":{\"k\":\"\xc3\x28\"}}", 0, GGUF_E_BAD_UTF8, NULL, -1);
}
END_TEST

START_TEST(deep_json)
{
    char j[512];
    int k = snprintf(j, sizeof j, "{\"__metadata__\":");
    for (int i = 0; i < 40; i++)
        j[k++] = '[';
    for (int i = 0; i < 40; i++)
        j[k++] = ']';
    snprintf(j + k, sizeof j - (size_t)k, "}");
    expect_fail(j, 0, GGUF_E_LIMIT, "nested", 8);
}
END_TEST

START_TEST(duplicate_names)
{
    expect_fail("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                8, GGUF_E_DUPLICATE, "duplicate", -1);
}
END_TEST

START_TEST(bad_entries)
{
    expect_fail("{\"w\": 3}", 0, GGUF_E_BAD_VALUE, "w: the entry is not a JSON object", 9);
    expect_fail("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, GGUF_E_BAD_VALUE,
                "w: dtype: missing", 9);
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, GGUF_E_BAD_VALUE,
                "w: shape: missing", 9);
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4,
                GGUF_E_BAD_VALUE, "shape[0]: not an integer", 9);
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 0, GGUF_E_BAD_VALUE,
                "data_offsets: missing", 9);
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4,
                GGUF_E_BAD_VALUE, "data_offsets", 9);
    expect_fail("{\"__metadata__\":{\"k\":1}}", 0, GGUF_E_BAD_VALUE, "__metadata__.k", -1);
    expect_fail("{\"__metadata__\":[]}", 0, GGUF_E_BAD_VALUE, "__metadata__", -1);
    expect_fail("{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                GGUF_E_BAD_VALUE, "empty tensor name", 8);
}
END_TEST

START_TEST(bad_dtype)
{
    expect_fail("{\"w\":{\"dtype\":\"Q4_K\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                GGUF_E_BAD_TYPE, "w: dtype: unknown dtype \"Q4_K\"", 9);
}
END_TEST

START_TEST(bad_shapes)
{
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
                GGUF_E_BAD_SHAPE, "shape[0]: -1 is negative", 9);
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                "\"data_offsets\":[0,4]}}", 4, GGUF_E_LIMIT, "9 dimensions", 9);
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
                "\"data_offsets\":[0,4]}}", 4, GGUF_E_OVERFLOW, "overflows", 9);
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],"
                "\"data_offsets\":[0,4]}}", 4, GGUF_E_OVERFLOW, "byte count", 9);
    /* bytes must equal elements x dtype size */
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4,
                GGUF_E_BAD_SHAPE, "4 bytes, but shape x F32 makes 8", 9);
}
END_TEST

START_TEST(bad_offsets)
{
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4,
                GGUF_E_BAD_OFFSET, "end 0 is before begin 4", 9);
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4,
                GGUF_E_BAD_OFFSET, "negative", 9);
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4,
                GGUF_E_TRUNCATED, "past the data", 9);
    /* overlap: b starts inside a */
    expect_fail("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                8, GGUF_E_BAD_OFFSET, "overlaps a", -1);
    /* gap before the first, between two */
    expect_fail("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
                GGUF_E_BAD_OFFSET, "gap of 4 bytes after the header", 9);
    expect_fail("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                12, GGUF_E_BAD_OFFSET, "b: data_offsets: begins at 8", -1);
    /* bytes nobody indexes */
    const char *j = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    expect_fail(j, 6, GGUF_E_BAD_OFFSET, "2 bytes after the last tensor", (long long)(8 + strlen(j) + 4));
    /* JSON order does not matter: b then a, tiled */
    gguf_st_file *f;
    gguf_error err;
    uint8_t d[8] = {0};
    ck_assert_int_eq(st_open("{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
                             "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                             d, 8, &f, &err), 0);
    gguf_st_file_free(f);
}
END_TEST

START_TEST(path_errors)
{
    gguf_st_file *f;
    gguf_error err;
    ck_assert_int_eq(gguf_st_file_open(&f, "/nonexistent/x.safetensors", &err), GGUF_E_NOT_FOUND);
    ck_assert_int_eq(gguf_st_file_open(&f, "/", &err), GGUF_E_NOT_GGUF);
    gguf_st_set *s;
    ck_assert_int_eq(gguf_st_set_open(&s, "/nonexistent", &err), GGUF_E_NOT_FOUND);
    char *dir = th_mkdtemp();
    ck_assert_int_eq(gguf_st_set_open(&s, dir, &err), GGUF_E_NOT_FOUND);
    ck_assert(strstr(err.message, "no model.safetensors.index.json") != NULL);
    th_rmdir(dir);
    free(dir);
}
END_TEST

/* ---- scaled formats ---- */

static void put_f32(uint8_t *p, float v)
{
    memcpy(p, &v, 4);
}

START_TEST(fp8_block_rows)
{
    /* weight 3 x 8 F8_E4M3 in blocks of 2 x 4 -> scale_inv [2, 2] F32 */
    const char *j = "{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[3,8],\"data_offsets\":[0,24]},"
                    "\"w_scale_inv\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[24,40]}}";
    uint8_t d[40];
    for (int i = 0; i < 24; i++)
        d[i] = (uint8_t)(0x30 + i * 3); /* 0.5 .. */
    const float s[4] = {2.0f, 0.5f, -1.0f, 3.0f};
    for (int i = 0; i < 4; i++)
        put_f32(d + 24 + 4 * i, s[i]);
    gguf_st_file *f;
    gguf_error err;
    ck_assert_int_eq(st_open(j, d, sizeof d, &f, &err), 0);
    gguf_st_weight w;
    ck_assert_int_eq(gguf_st_weight_find_file(f, "w", &w, &err), 0);
    ck_assert_int_eq(w.format, GGUF_ST_FMT_FP8_SCALED);
    ck_assert_int_eq(w.block_rows, 2);
    ck_assert_int_eq(w.block_cols, 4);
    float all[24], part[8];
    ck_assert_int_eq(gguf_st_weight_dequant(&w, all, 24, &err), 0);
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 8; c++) {
            const float want = gguf_fp8_e4m3_to_fp32(d[r * 8 + c]) * s[(r / 2) * 2 + c / 4];
            ck_assert_msg(all[r * 8 + c] == want, "[%d][%d] %g != %g", r, c, all[r * 8 + c],
                          want);
        }
    ck_assert_int_eq(gguf_st_weight_rows(&w, 2, 1, part, &err), 0);
    ck_assert(!memcmp(part, all + 16, sizeof part));
    ck_assert_int_eq(gguf_st_weight_rows(&w, 2, 2, part, &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_st_weight_dequant(&w, all, 23, &err), GGUF_E_INVALID);
    gguf_st_file_free(f);
}
END_TEST

START_TEST(fp8_scale_shapes)
{
    uint8_t d[64] = {0};
    gguf_st_file *f;
    gguf_error err;
    gguf_st_weight w;
    /* per tensor: one scale */
    ck_assert_int_eq(st_open("{\"w\":{\"dtype\":\"F8_E5M2\",\"shape\":[2,2],\"data_offsets\":[0,4]},"
                             "\"w_scale\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[4,6]}}",
                             d, 6, &f, &err), 0);
    ck_assert_int_eq(gguf_st_weight_find_file(f, "w", &w, &err), 0);
    ck_assert_int_eq(w.block_rows * w.block_cols, 4);
    gguf_st_file_free(f);
    /* a grid that cannot cover the weight */
    ck_assert_int_eq(st_open("{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[2,2],\"data_offsets\":[0,4]},"
                             "\"w_scale_inv\":{\"dtype\":\"F32\",\"shape\":[3,1],\"data_offsets\":[4,16]}}",
                             d, 16, &f, &err), 0);
    ck_assert_int_eq(gguf_st_weight_find_file(f, "w", &w, &err), GGUF_E_BAD_SHAPE);
    ck_assert(strstr(err.message, "w_scale_inv: shape [3, 1] does not cover weight w [2, 2]"));
    gguf_st_file_free(f);
    /* a scale of the wrong dtype */
    ck_assert_int_eq(st_open("{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[2,2],\"data_offsets\":[0,4]},"
                             "\"w_scale_inv\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                             d, 8, &f, &err), 0);
    ck_assert_int_eq(gguf_st_weight_find_file(f, "w", &w, &err), GGUF_E_BAD_TYPE);
    ck_assert(strstr(err.message, "w_scale_inv: dtype I32"));
    gguf_st_file_free(f);
}
END_TEST

/* NVFP4 ModelOpt: 2 x 32 weight, packed [2, 16], scales [2, 2] E4M3, scale_2 F32 */
START_TEST(nvfp4_rows)
{
    const char *j =
        "{\"w\":{\"dtype\":\"U8\",\"shape\":[2,16],\"data_offsets\":[0,32]},"
        "\"w_scale\":{\"dtype\":\"F8_E4M3\",\"shape\":[2,2],\"data_offsets\":[32,36]},"
        "\"w_scale_2\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[36,40]},"
        "\"w_input_scale\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[40,44]}}";
    uint8_t d[44] = {0};
    for (int i = 0; i < 32; i++)
        d[i] = (uint8_t)(i * 37 + 11);
    d[32] = 0x38; /* 1.0 */
    d[33] = 0x40; /* 2.0 */
    d[34] = 0xB0; /* -0.5 */
    d[35] = 0x7F; /* NaN */
    put_f32(d + 36, 0.25f);
    put_f32(d + 40, 1000.0f); /* input scale: ignored */
    gguf_st_file *f;
    gguf_error err;
    ck_assert_int_eq(st_open(j, d, sizeof d, &f, &err), 0);
    gguf_st_weight w;
    ck_assert_int_eq(gguf_st_weight_find_file(f, "w", &w, &err), 0);
    ck_assert_int_eq(w.format, GGUF_ST_FMT_NVFP4);
    ck_assert_int_eq(w.cols, 32);
    ck_assert_int_eq(w.n_dims, 2);
    ck_assert_int_eq(w.shape[1], 32);
    float out[64];
    ck_assert_int_eq(gguf_st_weight_dequant(&w, out, 64, &err), 0);
    const float sc[4] = {1.0f, 2.0f, -0.5f, NAN};
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 32; c++) {
            const uint8_t byte = d[r * 16 + c / 2];
            const uint8_t nib = c % 2 ? byte >> 4 : byte & 15; /* low nibble first */
            const float want = gguf_fp4_e2m1_to_fp32(nib) * (sc[r * 2 + c / 16] * 0.25f);
            const float got = out[r * 32 + c];
            if (isnan(want)) {
                uint32_t u;
                memcpy(&u, &got, 4);
                ck_assert_msg(u == 0x7FC00000u, "NaN is canonical: %08x", u);
            } else {
                ck_assert_msg(got == want, "[%d][%d] %g != %g", r, c, got, want);
            }
        }
    gguf_st_file_free(f);
}
END_TEST

START_TEST(nvfp4_ct_and_errors)
{
    const char *j =
        "{\"w_packed\":{\"dtype\":\"U8\",\"shape\":[1,8],\"data_offsets\":[0,8]},"
        "\"w_scale\":{\"dtype\":\"F8_E4M3\",\"shape\":[1,1],\"data_offsets\":[8,9]},"
        "\"w_global_scale\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[9,13]}}";
    uint8_t d[13];
    for (int i = 0; i < 8; i++)
        d[i] = (uint8_t)(0x21 + i * 0x11);
    d[8] = 0x48; /* 4.0 */
    put_f32(d + 9, 3.0f);
    gguf_st_file *f;
    gguf_error err;
    ck_assert_int_eq(st_open(j, d, sizeof d, &f, &err), 0);
    gguf_st_weight w;
    ck_assert_int_eq(gguf_st_weight_find_file(f, "w", &w, &err), 0);
    ck_assert_int_eq(w.format, GGUF_ST_FMT_NVFP4_CT);
    float out[16];
    ck_assert_int_eq(gguf_st_weight_rows(&w, 0, 1, out, &err), 0);
    const float b = 4.0f / 3.0f; /* divided by the global scale, rounded once */
    for (int c = 0; c < 16; c++) {
        const uint8_t nib = c % 2 ? d[c / 2] >> 4 : d[c / 2] & 15;
        ck_assert(out[c] == gguf_fp4_e2m1_to_fp32(nib) * b);
    }
    ck_assert_int_eq(gguf_st_weight_find_file(f, "v", &w, &err), GGUF_E_NOT_FOUND);
    gguf_st_file_free(f);
    /* group scales without scale_2 */
    uint8_t z[16] = {0};
    ck_assert_int_eq(st_open("{\"w\":{\"dtype\":\"U8\",\"shape\":[1,8],\"data_offsets\":[0,8]},"
                             "\"w_scale\":{\"dtype\":\"F8_E4M3\",\"shape\":[1,1],\"data_offsets\":[8,9]}}",
                             z, 9, &f, &err), 0);
    ck_assert_int_eq(gguf_st_weight_find_file(f, "w", &w, &err), GGUF_E_NOT_FOUND);
    ck_assert(strstr(err.message, "without w_scale_2"));
    gguf_st_file_free(f);
    /* one scale per 16 elements, not per 8 */
    ck_assert_int_eq(st_open("{\"w\":{\"dtype\":\"U8\",\"shape\":[1,8],\"data_offsets\":[0,8]},"
                             "\"w_scale\":{\"dtype\":\"F8_E4M3\",\"shape\":[1,2],\"data_offsets\":[8,10]},"
                             "\"w_scale_2\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[10,14]}}",
                             z, 14, &f, &err), 0);
    ck_assert_int_eq(gguf_st_weight_find_file(f, "w", &w, &err), GGUF_E_BAD_SHAPE);
    ck_assert(strstr(err.message, "one E4M3 scale per 16 elements"));
    gguf_st_file_free(f);
}
END_TEST

/* ---- checkpoints on disk ---- */

static void write_st(const char *dir, const char *name, const char *json, const void *d,
                     size_t n)
{
    tbuf b = {0};
    st_build(&b, json, d, n);
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    ck_assert_int_eq(th_write_file(p, b.p, b.n), 0);
    tb_free(&b);
}

static void write_text(const char *dir, const char *name, const char *text)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    ck_assert_int_eq(th_write_file(p, text, strlen(text)), 0);
}

START_TEST(index_and_config)
{
    char *dir = th_mkdtemp();
    uint8_t d[64] = {0};
    d[0] = 0x38;
    write_st(dir, "model-00001-of-00002.safetensors",
             "{\"a.weight\":{\"dtype\":\"F8_E4M3\",\"shape\":[2,2],\"data_offsets\":[0,4]},"
             "\"a.weight_scale_inv\":{\"dtype\":\"F32\",\"shape\":[1,1],\"data_offsets\":[4,8]}}",
             d, 8);
    write_st(dir, "model-00002-of-00002.safetensors",
             "{\"b.weight\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]},"
             "\"c.weight\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[4,6]}}", d, 6);
    write_text(dir, "model.safetensors.index.json",
               "{\"metadata\":{\"total_size\":14},\"weight_map\":{"
               "\"a.weight\":\"model-00001-of-00002.safetensors\","
               "\"a.weight_scale_inv\":\"model-00001-of-00002.safetensors\","
               "\"b.weight\":\"model-00002-of-00002.safetensors\","
               "\"c.weight\":\"model-00002-of-00002.safetensors\"}}");
    write_text(dir, "config.json",
               "{\"model_type\":\"x\",\"quantization_config\":{\"quant_method\":\"fp8\","
               "\"fmt\":\"e4m3\",\"weight_block_size\":[128,128]}}");
    gguf_st_set *s;
    gguf_error err;
    ck_assert_msg(gguf_st_set_open(&s, dir, &err) == 0, "%s", err.message);
    ck_assert_int_eq(gguf_st_set_file_count(s), 2);
    ck_assert_int_eq(gguf_st_set_tensor_count(s), 4);
    ck_assert_int_eq(gguf_st_set_quant(s)->scheme, GGUF_ST_SCHEME_FP8_BLOCK);
    ck_assert_int_eq(gguf_st_set_quant(s)->block[0], 128);
    ck_assert_str_eq(gguf_st_set_quant(s)->source, "config.json");
    ck_assert(gguf_st_is_companion(s, "a.weight_scale_inv"));
    ck_assert(!gguf_st_is_companion(s, "a.weight"));
    gguf_st_weight w;
    ck_assert_int_eq(gguf_st_weight_find(s, "a.weight", &w, &err), 0);
    ck_assert_int_eq(w.format, GGUF_ST_FMT_FP8_SCALED);
    /* an FP8 weight without its scale in an fp8 checkpoint is an error */
    ck_assert_int_eq(gguf_st_weight_find(s, "c.weight", &w, &err), GGUF_E_NOT_FOUND);
    ck_assert(strstr(err.message, "c.weight_scale_inv"));
    gguf_st_set_free(s);
    /* the index file itself, and a single file of the folder */
    char p[4096];
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    ck_assert_int_eq(gguf_st_set_open(&s, p, &err), 0);
    gguf_st_set_free(s);
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
    ck_assert_int_eq(gguf_st_set_open(&s, p, &err), 0);
    ck_assert_int_eq(gguf_st_set_tensor_count(s), 2);
    gguf_st_set_free(s);
    /* an index naming a tensor its file lacks */
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\":{\"z.weight\":\"model-00002-of-00002.safetensors\"}}");
    ck_assert_int_eq(gguf_st_set_open(&s, dir, &err), GGUF_E_SPLIT);
    ck_assert(strstr(err.message, "weight_map.z.weight: not in model-00002-of-00002"));
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\":{\"b.weight\":\"model-00002-of-00002.safetensors\"}}");
    ck_assert_int_eq(gguf_st_set_open(&s, dir, &err), GGUF_E_SPLIT);
    ck_assert(strstr(err.message, "c.weight of"));
    ck_assert(strstr(err.message, "is not listed"));
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\":{\"b.weight\":\"../etc/model.safetensors\"}}");
    ck_assert_int_eq(gguf_st_set_open(&s, dir, &err), GGUF_E_SPLIT);
    write_text(dir, "model.safetensors.index.json", "{\"weight_map\":[]}");
    ck_assert_int_eq(gguf_st_set_open(&s, dir, &err), GGUF_E_BAD_VALUE);
    ck_assert(strstr(err.message, "weight_map: not a JSON object"));
    /* the same name in two files */
    write_st(dir, "model-00003-of-00003.safetensors",
             "{\"b.weight\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]}}", d, 4);
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\":{\"b.weight\":\"model-00002-of-00002.safetensors\","
               "\"c.weight\":\"model-00003-of-00003.safetensors\"}}");
    ck_assert_int_eq(gguf_st_set_open(&s, dir, &err), GGUF_E_SPLIT);
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\":{\"b.weight\":\"model-00002-of-00002.safetensors\","
               "\"c.weight\":\"model-00002-of-00002.safetensors\","
               "\"x\":\"model-00003-of-00003.safetensors\"}}");
    ck_assert_int_eq(gguf_st_set_open(&s, dir, &err), GGUF_E_SPLIT);
    th_rmdir(dir);
    free(dir);
}
END_TEST

START_TEST(duplicate_across_files)
{
    char *dir = th_mkdtemp();
    uint8_t d[8] = {0};
    write_st(dir, "a.safetensors",
             "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", d, 4);
    write_st(dir, "b.safetensors",
             "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", d, 4);
    gguf_st_set *s;
    gguf_error err;
    ck_assert_int_eq(gguf_st_set_open(&s, dir, &err), GGUF_E_DUPLICATE);
    ck_assert(strstr(err.message, "x: in both"));
    th_rmdir(dir);
    free(dir);
}
END_TEST

START_TEST(quant_configs)
{
    char *dir = th_mkdtemp();
    uint8_t d[8] = {0};
    write_st(dir, "model.safetensors",
             "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", d, 4);
    static const struct {
        const char *file, *text;
        int scheme;
    } cases[] = {
        {"hf_quant_config.json",
         "{\"producer\":{\"name\":\"modelopt\"},\"quantization\":{\"quant_algo\":\"NVFP4\","
         "\"group_size\":16,\"exclude_modules\":[\"lm_head\"]}}", GGUF_ST_SCHEME_NVFP4},
        {"config.json", "{\"quantization_config\":{\"quant_method\":\"modelopt\","
                        "\"quant_algo\":\"NVFP4\"}}", GGUF_ST_SCHEME_NVFP4},
        {"config.json", "{\"quantization_config\":{\"quant_method\":\"compressed-tensors\","
                        "\"format\":\"nvfp4-pack-quantized\"}}", GGUF_ST_SCHEME_CT_NVFP4},
        {"config.json", "{\"quantization_config\":{\"quant_method\":\"compressed-tensors\","
                        "\"format\":\"float-quantized\",\"config_groups\":{\"g\":{\"weights\":"
                        "{\"block_structure\":[64,32]}}}}}", GGUF_ST_SCHEME_CT_FP8},
        {"config.json", "{\"quantization_config\":{\"quant_method\":\"fp8\"}}",
         GGUF_ST_SCHEME_FP8},
        {"config.json", "{\"quantization_config\":{\"quant_method\":\"gptq\"}}",
         GGUF_ST_SCHEME_OTHER},
        {"config.json", "{\"model_type\":\"llama\"}", GGUF_ST_SCHEME_NONE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/hf_quant_config.json", dir);
        remove(p);
        write_text(dir, cases[i].file, cases[i].text);
        gguf_st_set *s;
        gguf_error err;
        ck_assert_msg(gguf_st_set_open(&s, dir, &err) == 0, "%zu: %s", i, err.message);
        ck_assert_msg((int)gguf_st_set_quant(s)->scheme == cases[i].scheme, "%zu: %s", i,
                      gguf_st_scheme_name(gguf_st_set_quant(s)->scheme));
        if (cases[i].scheme == GGUF_ST_SCHEME_CT_FP8)
            ck_assert_int_eq(gguf_st_set_quant(s)->block[0], 64);
        gguf_st_set_free(s);
    }
    /* broken configuration files are errors naming the key */
    write_text(dir, "config.json", "{\"quantization_config\":{\"quant_method\":\"fp8\","
                                   "\"weight_block_size\":[128]}}");
    gguf_st_set *s;
    gguf_error err;
    ck_assert_int_eq(gguf_st_set_open(&s, dir, &err), GGUF_E_BAD_VALUE);
    ck_assert(strstr(err.message, "weight_block_size"));
    write_text(dir, "config.json", "{\"quantization_config\": ");
    ck_assert_int_eq(gguf_st_set_open(&s, dir, &err), GGUF_E_BAD_VALUE);
    write_text(dir, "hf_quant_config.json", "{\"quantization\":{}}");
    ck_assert_int_eq(gguf_st_set_open(&s, dir, &err), GGUF_E_BAD_VALUE);
    ck_assert(strstr(err.message, "quant_algo"));
    write_text(dir, "hf_quant_config.json",
               "{\"quantization\":{\"quant_algo\":\"NVFP4\",\"group_size\":32}}");
    ck_assert_int_eq(gguf_st_set_open(&s, dir, &err), GGUF_E_UNSUPPORTED);
    th_rmdir(dir);
    free(dir);
}
END_TEST

/* The committed corpus: GGUF_E_<CODE>--what.safetensors fails with CODE; ok--* opens. */
static int corpus_one(const char *path, const char *name, gguf_error *err)
{
    (void)name;
    gguf_st_file *f = NULL;
    const int rc = gguf_st_file_open(&f, path, err);
    gguf_st_file_free(f);
    return rc;
}

START_TEST(corpus_named_errors)
{
    th_corpus_replay("safetensors", corpus_one, 20);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("safetensors");
    TCase *tc = tcase_create("safetensors");
    tcase_add_test(tc, valid_file);
    tcase_add_test(tc, every_dtype);
    tcase_add_test(tc, fp8_conversions);
    tcase_add_test(tc, header_length);
    tcase_add_test(tc, not_json_object);
    tcase_add_test(tc, bad_utf8);
    tcase_add_test(tc, deep_json);
    tcase_add_test(tc, duplicate_names);
    tcase_add_test(tc, bad_entries);
    tcase_add_test(tc, bad_dtype);
    tcase_add_test(tc, bad_shapes);
    tcase_add_test(tc, bad_offsets);
    tcase_add_test(tc, path_errors);
    tcase_add_test(tc, fp8_block_rows);
    tcase_add_test(tc, fp8_scale_shapes);
    tcase_add_test(tc, nvfp4_rows);
    tcase_add_test(tc, nvfp4_ct_and_errors);
    tcase_add_test(tc, index_and_config);
    tcase_add_test(tc, duplicate_across_files);
    tcase_add_test(tc, quant_configs);
    tcase_add_test(tc, corpus_named_errors);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
