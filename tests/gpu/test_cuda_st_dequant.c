/*
 * GPU dequantization of the scaled safetensors formats equals the CPU's
 * gguf_st_weight_rows() bit for bit: block-scaled FP8 (E4M3 and E5M2 weights;
 * F32, BF16 and F16 scales holding NaN, Inf, zero, subnormals and negatives;
 * a per-tensor scale; a stack of matrices), ModelOpt NVFP4 with all 256 E4M3
 * scale bytes, compressed-tensors NVFP4 (division by the global scale), and a
 * plain BF16 weight; every weight in row chunks that start anywhere, as a
 * forward pass streams them.
 *
 * Run on a GPU machine: tests/gpu/run_gpu.sh (or, in a CUDA build,
 * ctest -R gpu.test_cuda_st_dequant). Exit 77 (skipped) without a usable device.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/safetensors.h"
#include "ggufkit_cuda/cuda_device.h"
#include "ggufkit_cuda/cuda_st_dequant.h"
#include "helper_buf.h"

#define ERRMSG(e) ((e).message[0] ? (e).message : gguf_status_name((e).code))

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint8_t rnd8(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint8_t)(rng >> 24);
}

typedef struct part {
    const char *name, *dtype;
    int n_dims;
    int64_t shape[3];
    size_t bytes;
    uint8_t *data;
} part;

/* A safetensors image of the parts, in order. */
static uint8_t *image(const part *ps, int n, size_t *size)
{
    char hdr[4096];
    int k = snprintf(hdr, sizeof hdr, "{");
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        char shape[96] = "[";
        for (int d = 0; d < ps[i].n_dims; d++)
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld", d ? "," : "",
                     (long long)ps[i].shape[d]);
        strcat(shape, "]");
        k += snprintf(hdr + k, sizeof hdr - (size_t)k,
                      "%s\"%s\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":[%zu,%zu]}",
                      i ? "," : "", ps[i].name, ps[i].dtype, shape, off, off + ps[i].bytes);
        off += ps[i].bytes;
    }
    k += snprintf(hdr + k, sizeof hdr - (size_t)k, "}");
    tbuf b = {0};
    tb_u64(&b, (uint64_t)k);
    tb_bytes(&b, hdr, (size_t)k);
    for (int i = 0; i < n; i++)
        tb_bytes(&b, ps[i].data, ps[i].bytes);
    *size = b.n;
    return b.p;
}

static void fill_random(part *p)
{
    p->data = malloc(p->bytes);
    for (size_t i = 0; i < p->bytes; i++)
        p->data[i] = rnd8();
}

/* Plant special scale values (F32/BF16/F16 as their bit patterns). */
static void plant_scales(part *s)
{
    static const uint32_t f32[] = {0x7FC00001u, 0xFF800000u, 0x7F800000u, 0x00000000u,
                                   0x80000000u, 0x00000003u, 0xBF800000u, 0x3E800000u};
    static const uint16_t h16[] = {0x7E01, 0xFC00, 0x7C00, 0x0000, 0x8000, 0x0003, 0xBC00, 0x3400};
    static const uint16_t b16[] = {0x7FC1, 0xFF80, 0x7F80, 0x0000, 0x8000, 0x0003, 0xBF80, 0x3E80};
    const size_t esz = !strcmp(s->dtype, "F32") ? 4 : 2, n = s->bytes / esz;
    for (size_t i = 0; i < n; i++) {
        if (esz == 4) { /* positive finite scales of a sane range, then the specials */
            float v = 0.001f + (float)(rnd8()) / 64.0f;
            uint32_t u;
            memcpy(&u, &v, 4);
            if (i < 8)
                u = f32[i];
            memcpy(s->data + 4 * i, &u, 4);
        } else {
            uint16_t u = !strcmp(s->dtype, "BF16") ? (uint16_t)(0x3C00 | rnd8())
                                                   : (uint16_t)(0x2000 | rnd8());
            if (i < 8)
                u = !strcmp(s->dtype, "BF16") ? b16[i] : h16[i];
            memcpy(s->data + 2 * i, &u, 2);
        }
    }
}

/* CPU rows vs GPU rows over chunks; returns the number of differing elements. */
static int64_t compare(const char *what, part *ps, int n_parts, const char *weight,
                       int expect_format)
{
    size_t size;
    uint8_t *img = image(ps, n_parts, &size);
    gguf_st_file *f;
    gguf_error e;
    ck_assert_msg(gguf_st_file_open_memory(&f, img, size, what, &e) == 0, "%s: %s", what,
                  ERRMSG(e));
    gguf_st_weight w;
    ck_assert_msg(gguf_st_weight_find_file(f, weight, &w, &e) == 0, "%s: %s", what, ERRMSG(e));
    ck_assert_int_eq(w.format, expect_format);
    const size_t n = (size_t)(w.rows * w.cols);
    float *cpu = malloc(sizeof(float) * n), *gpu = malloc(sizeof(float) * n);
    ck_assert_int_eq(gguf_st_weight_rows(&w, 0, w.rows, cpu, &e), 0);
    const uint64_t row_bytes = w.data->nbytes / (uint64_t)(w.rows ? w.rows : 1);
    void *dq = NULL, *ds = NULL;
    float *dd = NULL;
    ck_assert(gguf_cuda_malloc(&dq, w.data->nbytes + 1, &e) == 0);
    ck_assert(gguf_cuda_malloc((void **)&dd, sizeof(float) * n + 4, &e) == 0);
    if (w.scale) {
        ck_assert(gguf_cuda_malloc(&ds, w.scale->nbytes, &e) == 0);
        ck_assert(gguf_cuda_memcpy(ds, w.scale->data, w.scale->nbytes, &e) == 0);
    }
    /* chunks of 1, 7, 64 ... rows, starting anywhere */
    static const int64_t chunks[] = {1, 7, 64, 129, 1000000};
    int64_t row = 0;
    for (int k = 0; row < w.rows; k = (k + 1) % 5) {
        int64_t nr = chunks[k];
        if (nr > w.rows - row)
            nr = w.rows - row;
        ck_assert(gguf_cuda_memcpy(dq, w.data->data + (uint64_t)row * row_bytes,
                                   (size_t)((uint64_t)nr * row_bytes), &e) == 0);
        const int rc = gguf_cuda_st_dequant_rows(&w, dq, ds, row, nr, dd, NULL, &e);
        ck_assert_msg(rc == 0, "%s: %s", what, ERRMSG(e));
        ck_assert_msg(gguf_cuda_stream_sync(NULL, &e) == 0, "%s: %s", what, ERRMSG(e));
        ck_assert(gguf_cuda_memcpy(gpu + row * w.cols, dd, sizeof(float) * (size_t)(nr * w.cols),
                                   &e) == 0);
        row += nr;
    }
    int64_t diff = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&cpu[i], &gpu[i], 4)) {
            if (diff < 5) {
                uint32_t a, b;
                memcpy(&a, &cpu[i], 4);
                memcpy(&b, &gpu[i], 4);
                printf("MISMATCH %s [%zu]: cpu %08x gpu %08x\n", what, i, a, b);
            }
            diff++;
        }
    printf("%s: %zu elements, %lld differ\n", what, n, (long long)diff);
    gguf_cuda_free(dq);
    gguf_cuda_free(ds);
    gguf_cuda_free(dd);
    free(cpu);
    free(gpu);
    gguf_st_file_free(f);
    free(img);
    for (int i = 0; i < n_parts; i++)
        free(ps[i].data);
    return diff;
}

START_TEST(fp8_block_scaled)
{
    static const char *sdt[] = {"F32", "BF16", "F16"};
    for (int wt = 0; wt < 2; wt++)
        for (int k = 0; k < 3; k++) {
            part ps[2] = {
                {"w", wt ? "F8_E5M2" : "F8_E4M3", 2, {300, 260}, 300 * 260, NULL},
                {"w_scale_inv", sdt[k], 2, {3, 3}, 9 * (k ? 2 : 4), NULL},
            };
            fill_random(&ps[0]);
            for (int i = 0; i < 256; i++) /* every byte value */
                ps[0].data[i] = (uint8_t)i;
            fill_random(&ps[1]);
            plant_scales(&ps[1]);
            char what[64];
            snprintf(what, sizeof what, "%s weight, %s scale", ps[0].dtype, sdt[k]);
            ck_assert_int_eq(compare(what, ps, 2, "w", GGUF_ST_FMT_FP8_SCALED), 0);
        }
}
END_TEST

START_TEST(fp8_per_tensor_and_stacked)
{
    part a[2] = {{"w", "F8_E4M3", 2, {33, 17}, 33 * 17, NULL},
                 {"w_scale", "F32", 0, {0}, 4, NULL}};
    fill_random(&a[0]);
    a[1].data = malloc(4);
    const float s = 0.0123f;
    memcpy(a[1].data, &s, 4);
    ck_assert_int_eq(compare("per-tensor", a, 2, "w", GGUF_ST_FMT_FP8_SCALED), 0);
    part b[2] = {{"w", "F8_E4M3", 3, {2, 130, 40}, 2 * 130 * 40, NULL},
                 {"w_scale_inv", "F32", 3, {2, 2, 1}, 16, NULL}};
    fill_random(&b[0]);
    fill_random(&b[1]);
    plant_scales(&b[1]);
    ck_assert_int_eq(compare("stacked", b, 2, "w", GGUF_ST_FMT_FP8_SCALED), 0);
}
END_TEST

START_TEST(nvfp4_both_layouts)
{
    /* ModelOpt: every E4M3 scale byte appears (NaN 0x7F/0xFF and -0 included) */
    part a[3] = {{"w", "U8", 2, {200, 32}, 200 * 32, NULL},
                 {"w_scale", "F8_E4M3", 2, {200, 4}, 800, NULL},
                 {"w_scale_2", "F32", 0, {0}, 4, NULL}};
    fill_random(&a[0]);
    fill_random(&a[1]);
    for (int i = 0; i < 256; i++)
        a[1].data[i] = (uint8_t)i;
    a[2].data = malloc(4);
    const float g = 0.37f;
    memcpy(a[2].data, &g, 4);
    ck_assert_int_eq(compare("nvfp4", a, 3, "w", GGUF_ST_FMT_NVFP4), 0);
    part b[3] = {{"w_packed", "U8", 2, {50, 64}, 50 * 64, NULL},
                 {"w_scale", "F8_E4M3", 2, {50, 8}, 400, NULL},
                 {"w_global_scale", "F32", 1, {1}, 4, NULL}};
    fill_random(&b[0]);
    fill_random(&b[1]);
    b[2].data = malloc(4);
    const float gs = 3.0f;
    memcpy(b[2].data, &gs, 4);
    ck_assert_int_eq(compare("nvfp4-ct", b, 3, "w", GGUF_ST_FMT_NVFP4_CT), 0);
}
END_TEST

START_TEST(plain_bf16_and_errors)
{
    part a[1] = {{"w", "BF16", 2, {37, 19}, 37 * 19 * 2, NULL}};
    fill_random(&a[0]);
    ck_assert_int_eq(compare("bf16", a, 1, "w", GGUF_ST_FMT_PLAIN), 0);
    gguf_st_weight w;
    memset(&w, 0, sizeof w);
    gguf_error e;
    float x;
    ck_assert_int_eq(gguf_cuda_st_dequant_rows(&w, &x, &x, 0, 1, &x, NULL, &e), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_cuda_st_dequant_rows(NULL, &x, &x, 0, 1, &x, NULL, &e), GGUF_E_INVALID);
}
END_TEST

int main(void)
{
    int count = 0;
    gguf_error e;
    if (gguf_cuda_device_count(&count, &e) != 0 || count < 1) {
        fprintf(stderr, "test_cuda_st_dequant: skipped: %s\n",
                count < 1 && !e.message[0] ? "no CUDA device" : ERRMSG(e));
        return 77;
    }
    Suite *s = suite_create("cuda_st_dequant");
    TCase *tc = tcase_create("cuda_st_dequant");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, fp8_block_scaled);
    tcase_add_test(tc, fp8_per_tensor_and_stacked);
    tcase_add_test(tc, nvfp4_both_layouts);
    tcase_add_test(tc, plain_bf16_and_errors);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK); /* a CUDA context does not survive fork() */
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
