/*
 * The weight uploader (ggufkit_cuda/cuda_upload.h): chunked, double-buffered
 * upload + dequant equals the CPU scalar reference bit for bit, for chunk
 * sizes that cut tensors into many pieces (and a last partial chunk), from
 * pageable and misaligned host memory, with several loads queued before one
 * sync; options and arguments are checked.
 *
 * Exit 77 (skipped) with a message when no CUDA device is usable.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/dequant.h"
#include "gguf/types.h"
#include "ggufkit_cuda/cuda_dequant.h"
#include "ggufkit_cuda/cuda_device.h"
#include "ggufkit_cuda/cuda_upload.h"
#include "helper_dequant.h"

#define ERRMSG(e) ((e).message[0] ? (e).message : gguf_status_name((e).code))

/* Upload `nblocks` random blocks of `type` (from host + src_off) through an
 * uploader and compare with the CPU; returns differing elements. */
static int64_t check_upload(gguf_cuda_uploader *up, uint32_t type, int64_t nblocks,
                            uint32_t out_type, size_t src_off, uint64_t seed)
{
    const gguf_type_info *ti = gguf_type_get(type);
    const int64_t n = nblocks * ti->block_size;
    const size_t nbytes = (size_t)nblocks * ti->type_size;
    const size_t os = out_type == GGUF_TYPE_F32 ? 4 : 2;
    uint8_t *host = malloc(nbytes + src_off);
    float *ref = malloc((size_t)n * 4);
    uint8_t *got = malloc((size_t)n * os);
    ck_assert(host && ref && got);
    uint64_t st = seed;
    hd_fill(&st, host, nbytes + src_off);
    gguf_error e;
    void *dst;
    ck_assert_int_eq(gguf_cuda_malloc(&dst, (size_t)n * os, &e), 0);
    ck_assert_int_eq(gguf_cuda_memset_async(dst, 0xA5, (size_t)n * os, NULL, &e), 0);
    ck_assert_int_eq(gguf_cuda_device_sync(&e), 0);
    ck_assert_msg(gguf_cuda_uploader_load(up, type, host + src_off, n, out_type, dst, &e) == 0,
                  "%s", ERRMSG(e));
    memset(host, 0, nbytes + src_off); /* src may be reused once load returns */
    ck_assert_msg(gguf_cuda_uploader_sync(up, &e) == 0, "%s", ERRMSG(e));
    ck_assert_int_eq(gguf_cuda_memcpy(got, dst, (size_t)n * os, &e), 0);
    st = seed;
    hd_fill(&st, host, nbytes + src_off);
    ck_assert_int_eq(gguf_dequant_scalar_row(type, host + src_off, ref, n, &e), 0);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t w = 0, g = 0;
        if (os == 4)
            memcpy(&w, &ref[i], 4);
        else
            w = out_type == GGUF_TYPE_F16 ? gguf_fp32_to_fp16(ref[i]) : gguf_fp32_to_bf16(ref[i]);
        memcpy(&g, got + (size_t)i * os, os);
        if (g != w) {
            if (!bad)
                fprintf(stderr, "MISMATCH upload %s -> %s at %lld: gpu %08x cpu %08x\n",
                        ti->name, gguf_type_name(out_type), (long long)i, g, w);
            bad++;
        }
    }
    gguf_cuda_free(dst);
    free(host);
    free(ref);
    free(got);
    return bad;
}

START_TEST(tc_chunks)
{
    gguf_error e;
    gguf_cuda_uploader *up = NULL;
    /* 4 KiB chunks: a 1000-block Q4_K tensor is 36 chunks, the last partial */
    const gguf_cuda_uploader_opts o = {.chunk_bytes = 4096, .n_buffers = 2, .n_threads = 3};
    ck_assert_msg(gguf_cuda_uploader_create(&up, &o, &e) == 0, "%s", ERRMSG(e));
    int64_t bad = 0;
    for (uint32_t t = 0; t < GGUF_TYPE_COUNT; t++) {
        if (!gguf_cuda_dequant_supported(t))
            continue;
        const gguf_type_info *ti = gguf_type_get(t);
        const int64_t nblocks = ti->block_size == 1 ? 30001 : 1000;
        bad += check_upload(up, t, nblocks, GGUF_TYPE_F32, t % 3, 100 + t);
        bad += check_upload(up, t, nblocks, GGUF_TYPE_BF16, 0, 200 + t);
    }
    gguf_cuda_uploader_free(up);
    ck_assert_msg(bad == 0, "%lld elements differ", (long long)bad);
}
END_TEST

/* Big chunks, three buffers, several loads queued before one sync. */
START_TEST(tc_queued)
{
    gguf_error e;
    gguf_cuda_uploader *up = NULL;
    const gguf_cuda_uploader_opts o = {.chunk_bytes = 1 << 20, .n_buffers = 3, .n_threads = 0};
    ck_assert_int_eq(gguf_cuda_uploader_create(&up, &o, &e), 0);
    static const uint32_t types[] = {GGUF_TYPE_Q4_K, GGUF_TYPE_Q8_0, GGUF_TYPE_IQ2_XS,
                                     GGUF_TYPE_BF16};
    enum { NT = sizeof types / sizeof types[0] };
    void *dst[NT];
    float *ref[NT];
    uint8_t *host[NT];
    int64_t n[NT];
    for (int i = 0; i < NT; i++) {
        const gguf_type_info *ti = gguf_type_get(types[i]);
        n[i] = (int64_t)(1 << 22) / ti->block_size * ti->block_size;
        const size_t nbytes = (size_t)(n[i] / ti->block_size) * ti->type_size;
        host[i] = malloc(nbytes);
        ref[i] = malloc((size_t)n[i] * 4);
        ck_assert(host[i] && ref[i]);
        uint64_t st = 7 + i;
        hd_fill(&st, host[i], nbytes);
        ck_assert_int_eq(gguf_dequant_scalar_row(types[i], host[i], ref[i], n[i], &e), 0);
        ck_assert_int_eq(gguf_cuda_malloc(&dst[i], (size_t)n[i] * 4, &e), 0);
        ck_assert_int_eq(gguf_cuda_uploader_load(up, types[i], host[i], n[i], GGUF_TYPE_F32,
                                                 dst[i], &e), 0);
    }
    /* the default stream waits on the GPU, then the host waits for it */
    ck_assert_int_eq(gguf_cuda_uploader_wait(up, NULL, &e), 0);
    ck_assert_int_eq(gguf_cuda_stream_sync(NULL, &e), 0);
    for (int i = 0; i < NT; i++) {
        float *got = malloc((size_t)n[i] * 4);
        ck_assert_ptr_nonnull(got);
        ck_assert_int_eq(gguf_cuda_memcpy(got, dst[i], (size_t)n[i] * 4, &e), 0);
        ck_assert_msg(hd_first_bit_diff(got, ref[i], n[i]) == -1, "%s differs",
                      gguf_type_name(types[i]));
        free(got);
        free(host[i]);
        free(ref[i]);
        gguf_cuda_free(dst[i]);
    }
    gguf_cuda_uploader_free(up);
}
END_TEST

START_TEST(tc_errors)
{
    gguf_error e;
    gguf_cuda_uploader *up = NULL;
    gguf_cuda_uploader_opts o = {.chunk_bytes = 100, .n_buffers = 0, .n_threads = 0};
    ck_assert_int_eq(gguf_cuda_uploader_create(&up, &o, &e), GGUF_E_INVALID);
    o.chunk_bytes = 0;
    o.n_buffers = 99;
    ck_assert_int_eq(gguf_cuda_uploader_create(&up, &o, &e), GGUF_E_INVALID);
    o.n_buffers = 0;
    o.n_threads = -1;
    ck_assert_int_eq(gguf_cuda_uploader_create(&up, &o, &e), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_cuda_uploader_create(NULL, NULL, &e), GGUF_E_INVALID);
    o.n_threads = 0;
    o.chunk_bytes = 4096;
    ck_assert_int_eq(gguf_cuda_uploader_create(&up, &o, &e), 0);
    static uint8_t src[4096];
    void *dst;
    ck_assert_int_eq(gguf_cuda_malloc(&dst, 1 << 16, &e), 0);
    ck_assert_int_eq(gguf_cuda_uploader_load(up, 4, src, 32, GGUF_TYPE_F32, dst, &e),
                     GGUF_E_BAD_TYPE);
    ck_assert_int_eq(gguf_cuda_uploader_load(up, GGUF_TYPE_Q4_0, src, 33, GGUF_TYPE_F32, dst, &e),
                     GGUF_E_BAD_SHAPE);
    ck_assert_int_eq(gguf_cuda_uploader_load(up, GGUF_TYPE_Q4_0, NULL, 32, GGUF_TYPE_F32, dst, &e),
                     GGUF_E_INVALID);
    ck_assert_int_eq(gguf_cuda_uploader_load(up, GGUF_TYPE_Q4_0, src, 32, GGUF_TYPE_Q8_0, dst, &e),
                     GGUF_E_UNSUPPORTED);
    ck_assert_int_eq(gguf_cuda_uploader_load(up, GGUF_TYPE_F64, src, 8, GGUF_TYPE_F32, dst, &e), 0);
    ck_assert_int_eq(gguf_cuda_uploader_load(up, GGUF_TYPE_Q4_0, src, 0, GGUF_TYPE_F32, dst, &e), 0);
    ck_assert_int_eq(gguf_cuda_uploader_load(NULL, GGUF_TYPE_Q4_0, src, 32, GGUF_TYPE_F32, dst, &e),
                     GGUF_E_INVALID);
    ck_assert_int_eq(gguf_cuda_uploader_sync(up, &e), 0);
    ck_assert_int_eq(gguf_cuda_uploader_sync(NULL, &e), GGUF_E_INVALID);
    gguf_cuda_free(dst);
    gguf_cuda_uploader_free(up);
    gguf_cuda_uploader_free(NULL);
    void *pinned = NULL;
    ck_assert_int_eq(gguf_cuda_host_alloc(&pinned, 1 << 20, &e), 0);
    ck_assert_ptr_nonnull(pinned);
    gguf_cuda_host_free(pinned);
    gguf_cuda_host_free(NULL);
}
END_TEST

int main(void)
{
    gguf_error e;
    int count = 0;
    if (gguf_cuda_device_count(&count, &e) != 0) {
        fprintf(stderr, "test_cuda_upload: skipped: %s\n", ERRMSG(e));
        return 77;
    }
    Suite *s = suite_create("cuda_upload");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, tc_errors);
    tcase_add_test(tc, tc_chunks);
    tcase_add_test(tc, tc_queued);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
