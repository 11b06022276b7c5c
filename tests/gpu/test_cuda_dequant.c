/*
 * GPU dequantization equals the CPU scalar reference bit for bit: every type,
 * all three output types (F32, F16, BF16), aligned and misaligned buffers,
 * random blocks with planted special scales (NaN with payloads, signalling
 * NaN, +-Inf, subnormals, +-0, the largest half), every E8M0/UE4M3 scale byte,
 * a tensor large enough for the grid-stride loop, a run longer than one
 * launch (cut into 32-bit pieces), every tensor of the real
 * GGUF files under GGUFKIT_GPU_TESTDATA (or GGUFKIT_SHARED), and the error
 * codes of the API.
 *
 * Exit 77 (skipped) with a message when no CUDA device is usable.
 * Check runs without fork: a CUDA context does not survive fork().
 */
#include <check.h>
#include <ftw.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/blocks.h"
#include "gguf/dequant.h"
#include "gguf/file.h"
#include "gguf/types.h"
#include "ggufkit_cuda/cuda_dequant.h"
#include "ggufkit_cuda/cuda_device.h"
#include "helper_dequant.h"

#define ERRMSG(e) ((e).message[0] ? (e).message : gguf_status_name((e).code))

/* ---- CPU reference in any output type ---------------------------------- */

static size_t out_size(uint32_t out_type)
{
    return out_type == GGUF_TYPE_F32 ? 4 : 2;
}

/* The expected bytes: scalar reference, then the library's own rounding. */
static void cpu_expect(uint32_t type, const void *src, int64_t n, uint32_t out_type, void *out)
{
    float *f = malloc((size_t)(n ? n : 1) * sizeof(float));
    ck_assert_ptr_nonnull(f);
    gguf_error e;
    ck_assert_msg(gguf_dequant_scalar_row(type, src, f, n, &e) == 0, "cpu: %s", ERRMSG(e));
    if (out_type == GGUF_TYPE_F32) {
        memcpy(out, f, (size_t)n * 4);
    } else {
        uint16_t *h = out;
        for (int64_t i = 0; i < n; i++)
            h[i] = out_type == GGUF_TYPE_F16 ? gguf_fp32_to_fp16(f[i]) : gguf_fp32_to_bf16(f[i]);
    }
    free(f);
}

/*
 * Dequantize `nbytes` of host data on the GPU with the source placed at byte
 * offset src_off of a device buffer and the output at element offset dst_off,
 * compare with the CPU, and report the first difference. Returns the number
 * of differing elements.
 */
static int64_t gpu_vs_cpu(const char *what, uint32_t type, const uint8_t *host, size_t nbytes,
                          int64_t n, uint32_t out_type, size_t src_off, size_t dst_off)
{
    const size_t os = out_size(out_type);
    const size_t obytes = (size_t)n * os;
    gguf_error e;
    void *dsrc = NULL, *ddst = NULL;
    ck_assert_msg(gguf_cuda_malloc(&dsrc, nbytes + src_off + 1, &e) == 0, "%s", ERRMSG(e));
    ck_assert_msg(gguf_cuda_malloc(&ddst, obytes + dst_off * os + 1, &e) == 0, "%s", ERRMSG(e));
    ck_assert_int_eq(gguf_cuda_memcpy((uint8_t *)dsrc + src_off, host, nbytes, &e), 0);
    /* poison the output: every element must be written */
    ck_assert_int_eq(gguf_cuda_memset_async(ddst, 0xA5, obytes + dst_off * os + 1, NULL, &e), 0);
    void *dout = (uint8_t *)ddst + dst_off * os;
    int rc = gguf_cuda_dequant_to(type, (uint8_t *)dsrc + src_off, out_type, dout, n, NULL, &e);
    ck_assert_msg(rc == 0, "%s: dequant %s: %s", what, gguf_type_name(type), ERRMSG(e));
    rc = gguf_cuda_stream_sync(NULL, &e);
    ck_assert_msg(rc == 0, "%s: run %s: %s", what, gguf_type_name(type), ERRMSG(e));

    uint8_t *got = malloc(obytes + 1), *want = malloc(obytes + 1);
    ck_assert(got && want);
    ck_assert_int_eq(gguf_cuda_memcpy(got, dout, obytes, &e), 0);
    cpu_expect(type, host, n, out_type, want);
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++) {
        if (memcmp(got + (size_t)i * os, want + (size_t)i * os, os) != 0) {
            if (first < 0)
                first = i;
            bad++;
        }
    }
    if (bad) {
        uint32_t g = 0, w = 0;
        memcpy(&g, got + (size_t)first * os, os);
        memcpy(&w, want + (size_t)first * os, os);
        const gguf_type_info *ti = gguf_type_get(type);
        const int64_t blk = first / ti->block_size;
        fprintf(stderr,
                "MISMATCH %s %s -> %s (src+%zu, dst+%zu): %lld of %lld differ; first at %lld "
                "(block %lld, element %lld): gpu %0*x cpu %0*x; block bytes:",
                what, gguf_type_name(type), gguf_type_name(out_type), src_off, dst_off,
                (long long)bad, (long long)n, (long long)first, (long long)blk,
                (long long)(first % ti->block_size), (int)(2 * os), g, (int)(2 * os), w);
        for (uint32_t b = 0; b < ti->type_size && b < 64; b++)
            fprintf(stderr, " %02x", host[(size_t)blk * ti->type_size + b]);
        fprintf(stderr, "\n");
    }
    free(got);
    free(want);
    gguf_cuda_free(dsrc);
    gguf_cuda_free(ddst);
    return bad;
}

/* ---- random blocks with special values ---------------------------------- */

static const uint16_t special_f16[] = {
    0x7E00, /* quiet NaN */
    0x7C01, /* signalling NaN, payload 1 */
    0xFE55, /* negative NaN with payload */
    0x7D23, /* signalling NaN, other payload */
    0x7C00, /* +Inf */
    0xFC00, /* -Inf */
    0x0001, /* smallest subnormal */
    0x83FF, /* largest negative subnormal */
    0x0000, /* +0 */
    0x8000, /* -0 */
    0x7BFF, /* largest half */
    0x3C00, /* 1 */
    0x0400, /* smallest normal */
};
#define N_SPECIAL_F16 (sizeof special_f16 / sizeof special_f16[0])

static const uint32_t special_f32[] = {
    0x7FC00000u, 0x7F800001u, 0xFFC12345u, 0x7FA00000u, 0x7F800000u, 0xFF800000u,
    0x00000001u, 0x807FFFFFu, 0x00000000u, 0x80000000u, 0x7F7FFFFFu, 0x3F800000u,
};
#define N_SPECIAL_F32 (sizeof special_f32 / sizeof special_f32[0])

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* Plant special scale values in every block (or every element of plain
 * types), cycling so that two scales of one block get different values. */
static void plant_specials(uint32_t type, uint8_t *buf, int64_t nblocks)
{
    const gguf_type_info *ti = gguf_type_get(type);
    size_t off[2];
    const int nf = hd_f16_scale_offsets(type, off);
    for (int64_t b = 0; b < nblocks; b++) {
        uint8_t *blk = buf + (size_t)b * ti->type_size;
        for (int f = 0; f < nf; f++)
            put16(blk + off[f], special_f16[(size_t)(b * (f ? 7 : 1) + 3 * f) % N_SPECIAL_F16]);
        switch (type) {
        case GGUF_TYPE_Q8_K: {
            const uint32_t v = special_f32[(size_t)b % N_SPECIAL_F32];
            memcpy(blk + offsetof(gguf_block_q8_k, d), &v, 4);
            break;
        }
        case GGUF_TYPE_IQ1_M: { /* the f16 scale lives in the top nibbles */
            const uint16_t h = special_f16[(size_t)b % N_SPECIAL_F16];
            uint8_t *sc = blk + offsetof(gguf_block_iq1_m, scales);
            for (int k = 0; k < 4; k++)
                sc[2 * k + 1] = (uint8_t)((sc[2 * k + 1] & 0x0F) | (((h >> (4 * k)) & 15) << 4));
            break;
        }
        case GGUF_TYPE_MXFP4:
            blk[offsetof(gguf_block_mxfp4, e)] = (uint8_t)b; /* all 256 E8M0 bytes */
            break;
        case GGUF_TYPE_NVFP4:
            for (int s = 0; s < 4; s++)
                blk[offsetof(gguf_block_nvfp4, d) + s] = (uint8_t)(4 * b + s); /* all UE4M3 */
            break;
        case GGUF_TYPE_F16:
        case GGUF_TYPE_BF16:
            if (b % 5 == 0)
                put16(blk, special_f16[(size_t)(b / 5) % N_SPECIAL_F16]);
            break;
        case GGUF_TYPE_F32:
            if (b % 5 == 0)
                memcpy(blk, &special_f32[(size_t)(b / 5) % N_SPECIAL_F32], 4);
            break;
        case GGUF_TYPE_F64:
            if (b % 5 == 0) {
                static const uint64_t d64[] = {0x7FF8000000000000ull, 0x7FF0000000000001ull,
                                               0xFFF123456789ABCDull, 0x7FF0000000000000ull,
                                               0x0000000000000001ull, 0x47EFFFFFF0000000ull,
                                               0x47EFFFFFE0000000ull, 0x3690000000000000ull,
                                               0x8000000000000000ull};
                memcpy(blk, &d64[(size_t)(b / 5) % (sizeof d64 / sizeof d64[0])], 8);
            }
            break;
        default:
            break;
        }
    }
}

static const uint32_t out_types[3] = {GGUF_TYPE_F32, GGUF_TYPE_F16, GGUF_TYPE_BF16};

/* placements: (source byte offset, output element offset) */
static const size_t placements[3][2] = {{0, 0}, {1, 1}, {2, 0}};

static int64_t check_type(uint32_t type, int special, uint64_t seed)
{
    const gguf_type_info *ti = gguf_type_get(type);
    /* plain types: an element count that is not a multiple of 8 (tail path) */
    const int64_t nblocks = ti->block_size == 1 ? 20011 : (ti->block_size >= 256 ? 1500 : 6000);
    const int64_t n = nblocks * ti->block_size;
    const size_t nbytes = (size_t)nblocks * ti->type_size;
    uint8_t *host = malloc(nbytes);
    ck_assert_ptr_nonnull(host);
    uint64_t st = seed ^ ((uint64_t)type << 32);
    hd_fill(&st, host, nbytes);
    if (special)
        plant_specials(type, host, nblocks);
    int64_t bad = 0;
    char what[64];
    snprintf(what, sizeof what, "%s blocks", special ? "special" : "random");
    for (int o = 0; o < 3; o++)
        for (int p = 0; p < 3; p++)
            bad += gpu_vs_cpu(what, type, host, nbytes, n, out_types[o], placements[p][0],
                              placements[p][1]);
    free(host);
    return bad;
}

START_TEST(tc_every_type_random)
{
    int64_t bad = 0;
    int types = 0;
    for (uint32_t t = 0; t < GGUF_TYPE_COUNT; t++) {
        if (!gguf_dequant_supported(t))
            continue;
        ck_assert_msg(gguf_cuda_dequant_supported(t), "%s has no GPU kernel", gguf_type_name(t));
        bad += check_type(t, 0, 0x1234);
        types++;
    }
    fprintf(stderr, "random blocks: %d types x 3 outputs x 3 placements\n", types);
    ck_assert_msg(bad == 0, "%lld elements differ (see MISMATCH lines)", (long long)bad);
}
END_TEST

START_TEST(tc_every_type_special)
{
    int64_t bad = 0;
    for (uint32_t t = 0; t < GGUF_TYPE_COUNT; t++)
        if (gguf_dequant_supported(t))
            bad += check_type(t, 1, 0x9876);
    ck_assert_msg(bad == 0, "%lld elements differ (see MISMATCH lines)", (long long)bad);
}
END_TEST

/* Larger than one pass of the grid: exercises the grid-stride loop. */
START_TEST(tc_large)
{
    static const uint32_t types[] = {GGUF_TYPE_Q4_0, GGUF_TYPE_Q4_K, GGUF_TYPE_IQ2_XXS,
                                     GGUF_TYPE_F16};
    int64_t bad = 0;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        const gguf_type_info *ti = gguf_type_get(types[i]);
        const int64_t n = (int64_t)1 << 25;
        const size_t nbytes = (size_t)(n / ti->block_size) * ti->type_size;
        uint8_t *host = malloc(nbytes);
        ck_assert_ptr_nonnull(host);
        uint64_t st = 77 + i;
        hd_fill(&st, host, nbytes);
        bad += gpu_vs_cpu("large", types[i], host, nbytes, n, GGUF_TYPE_F32, 0, 0);
        free(host);
    }
    ck_assert_msg(bad == 0, "%lld elements differ", (long long)bad);
}
END_TEST

/* A run longer than one launch: the launcher cuts a row into pieces of 2^30
 * units (2^33 elements) so that the kernel counts units in 32 bits. IQ1_S
 * (the fewest bytes per element with 256-element blocks) to BF16: 1.7 GB in,
 * 17 GB out. The blocks repeat a random pattern; the elements around the cut
 * and at the end are compared with the CPU. Skipped on smaller devices. */
static int64_t check_window(const uint8_t *pattern, int64_t pat_blocks, const uint16_t *dev_out,
                            int64_t first_block, int64_t n_blocks)
{
    const uint32_t type = GGUF_TYPE_IQ1_S;
    const gguf_type_info *ti = gguf_type_get(type);
    const int64_t n = n_blocks * ti->block_size;
    uint8_t *blocks = malloc((size_t)n_blocks * ti->type_size);
    uint16_t *want = malloc((size_t)n * 2), *got = malloc((size_t)n * 2);
    ck_assert(blocks && want && got);
    for (int64_t b = 0; b < n_blocks; b++)
        memcpy(blocks + (size_t)b * ti->type_size,
               pattern + (size_t)((first_block + b) % pat_blocks) * ti->type_size, ti->type_size);
    cpu_expect(type, blocks, n, GGUF_TYPE_BF16, want);
    gguf_error e;
    ck_assert_int_eq(
        gguf_cuda_memcpy(got, dev_out + first_block * ti->block_size, (size_t)n * 2, &e), 0);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += got[i] != want[i];
    if (bad)
        fprintf(stderr, "MISMATCH pieces: %lld of %lld elements from block %lld differ\n",
                (long long)bad, (long long)n, (long long)first_block);
    free(blocks);
    free(want);
    free(got);
    return bad;
}

START_TEST(tc_pieces)
{
    const uint32_t type = GGUF_TYPE_IQ1_S;
    const gguf_type_info *ti = gguf_type_get(type);
    const int64_t cut = (int64_t)1 << 33, n = cut + ((int64_t)1 << 20);
    const int64_t nblocks = n / ti->block_size, pat_blocks = 4096;
    const size_t in_bytes = (size_t)nblocks * ti->type_size, out_bytes = (size_t)n * 2;
    gguf_error e;
    gguf_cuda_device_info info;
    ck_assert_int_eq(gguf_cuda_device_info_get(0, &info, &e), 0);
    if (info.total_mem < in_bytes + out_bytes + ((size_t)2 << 30)) {
        fprintf(stderr, "pieces: skipped: needs %.1f GiB of device memory\n",
                (double)(in_bytes + out_bytes) / (1u << 30));
        return;
    }
    uint8_t *pattern = malloc((size_t)pat_blocks * ti->type_size);
    ck_assert_ptr_nonnull(pattern);
    uint64_t st = 0x5151;
    hd_fill(&st, pattern, (size_t)pat_blocks * ti->type_size);
    void *src = NULL, *dst = NULL;
    ck_assert_msg(gguf_cuda_malloc(&src, in_bytes, &e) == 0, "%s", ERRMSG(e));
    ck_assert_msg(gguf_cuda_malloc(&dst, out_bytes, &e) == 0, "%s", ERRMSG(e));
    const size_t pat = (size_t)pat_blocks * ti->type_size;
    ck_assert_int_eq(gguf_cuda_memcpy(src, pattern, pat, &e), 0);
    for (size_t have = pat; have < in_bytes;) { /* replicate by doubling */
        const size_t m = have < in_bytes - have ? have : in_bytes - have;
        ck_assert_int_eq(gguf_cuda_memcpy_async((uint8_t *)src + have, src, m, NULL, &e), 0);
        have += m;
    }
    ck_assert_msg(gguf_cuda_dequant_to(type, src, GGUF_TYPE_BF16, dst, n, NULL, &e) == 0, "%s",
                  ERRMSG(e));
    ck_assert_msg(gguf_cuda_stream_sync(NULL, &e) == 0, "%s", ERRMSG(e));
    const int64_t win = 64; /* blocks on each side */
    int64_t bad = check_window(pattern, pat_blocks, dst, cut / ti->block_size - win, 2 * win);
    bad += check_window(pattern, pat_blocks, dst, nblocks - win, win);
    fprintf(stderr, "pieces: %lld elements of IQ1_S to BF16, around the cut and the end\n",
            (long long)n);
    gguf_cuda_free(src);
    gguf_cuda_free(dst);
    free(pattern);
    ck_assert_msg(bad == 0, "%lld elements differ", (long long)bad);
}
END_TEST

START_TEST(tc_errors)
{
    gguf_error e;
    void *src = NULL, *dst = NULL;
    ck_assert_int_eq(gguf_cuda_malloc(&src, 4096, &e), 0);
    ck_assert_int_eq(gguf_cuda_malloc(&dst, 4096 * 4, &e), 0);
    ck_assert_int_eq(gguf_cuda_dequant(4, src, dst, 32, NULL, &e), GGUF_E_BAD_TYPE); /* Q4_2 */
    ck_assert_int_eq(gguf_cuda_dequant(99, src, dst, 32, NULL, &e), GGUF_E_BAD_TYPE);
    ck_assert_int_eq(gguf_cuda_dequant(GGUF_TYPE_Q4_0, src, dst, 33, NULL, &e), GGUF_E_BAD_SHAPE);
    ck_assert_int_eq(gguf_cuda_dequant(GGUF_TYPE_Q4_K, src, dst, -256, NULL, &e),
                     GGUF_E_BAD_SHAPE);
    ck_assert_int_eq(gguf_cuda_dequant(GGUF_TYPE_Q4_0, NULL, dst, 32, NULL, &e), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_cuda_dequant(GGUF_TYPE_Q4_0, src, NULL, 32, NULL, &e), GGUF_E_INVALID);
    static uint8_t host_buf[64];
    static float host_out[64];
    ck_assert_int_eq(gguf_cuda_dequant(GGUF_TYPE_Q4_0, host_buf, dst, 32, NULL, &e),
                     GGUF_E_INVALID);
    ck_assert_int_eq(gguf_cuda_dequant(GGUF_TYPE_Q4_0, src, host_out, 32, NULL, &e),
                     GGUF_E_INVALID);
    ck_assert_int_eq(gguf_cuda_dequant_to(GGUF_TYPE_Q4_0, src, GGUF_TYPE_Q8_0, dst, 32, NULL, &e),
                     GGUF_E_UNSUPPORTED);
    ck_assert_int_eq(gguf_cuda_dequant(GGUF_TYPE_Q4_0, src, dst, 0, NULL, &e), 0);
    ck_assert_int_eq(gguf_cuda_dequant(GGUF_TYPE_Q4_0, NULL, NULL, 0, NULL, &e), 0);
    ck_assert(!gguf_cuda_dequant_supported(4));
    ck_assert(!gguf_cuda_dequant_supported(GGUF_TYPE_COUNT));
    /* nothing above poisoned the context: a real call still works */
    ck_assert_int_eq(gguf_cuda_memset_async(src, 0x11, 4096, NULL, &e), 0);
    ck_assert_int_eq(gguf_cuda_dequant(GGUF_TYPE_Q4_0, src, dst, 32, NULL, &e), 0);
    ck_assert_int_eq(gguf_cuda_stream_sync(NULL, &e), 0);
    gguf_cuda_free(src);
    gguf_cuda_free(dst);
    gguf_cuda_free(NULL);
    gguf_cuda_stream_free(NULL);
    gguf_cuda_event_free(NULL);
}
END_TEST

/* A non-default stream and the async API. */
START_TEST(tc_stream)
{
    gguf_error e;
    gguf_cuda_stream *s = NULL;
    ck_assert_int_eq(gguf_cuda_stream_create(&s, &e), 0);
    const int64_t n = 256 * 64;
    const size_t nbytes = 64 * sizeof(gguf_block_q6_k);
    uint8_t *host = malloc(nbytes);
    float *got = malloc((size_t)n * 4), *want = malloc((size_t)n * 4);
    ck_assert(host && got && want);
    uint64_t st = 5;
    hd_fill(&st, host, nbytes);
    void *src, *dst;
    ck_assert_int_eq(gguf_cuda_malloc(&src, nbytes, &e), 0);
    ck_assert_int_eq(gguf_cuda_malloc(&dst, (size_t)n * 4, &e), 0);
    ck_assert_int_eq(gguf_cuda_memcpy_async(src, host, nbytes, s, &e), 0);
    ck_assert_int_eq(gguf_cuda_dequant(GGUF_TYPE_Q6_K, src, dst, n, s, &e), 0);
    ck_assert_int_eq(gguf_cuda_memcpy_async(got, dst, (size_t)n * 4, s, &e), 0);
    ck_assert_int_eq(gguf_cuda_stream_sync(s, &e), 0);
    ck_assert_int_eq(gguf_dequant_scalar_row(GGUF_TYPE_Q6_K, host, want, n, &e), 0);
    ck_assert_int_eq(hd_first_bit_diff(got, want, n), -1);
    gguf_cuda_free(src);
    gguf_cuda_free(dst);
    gguf_cuda_stream_free(s);
    free(host);
    free(got);
    free(want);
}
END_TEST

/* ---- rectangles (tensor-parallel slices) -------------------------------- */

static int64_t check_slice(uint32_t type, int64_t ne0, int64_t rows, int64_t row0, int64_t nr,
                           int64_t col0, int64_t nc, uint32_t out_type, uint64_t seed)
{
    const gguf_type_info *ti = gguf_type_get(type);
    const size_t nbytes = (size_t)(ne0 / ti->block_size) * ti->type_size * (size_t)rows;
    const size_t os = out_size(out_type);
    const int64_t n = nr * nc;
    uint8_t *host = malloc(nbytes);
    float *ref = malloc((size_t)n * 4 + 4);
    uint8_t *got = malloc((size_t)n * os + 4);
    ck_assert(host && ref && got);
    uint64_t st = seed;
    hd_fill(&st, host, nbytes);
    gguf_error e;
    const gguf_dequant_opts o = {.path = GGUF_DEQUANT_SCALAR};
    ck_assert_msg(gguf_dequant_slice(type, host, ne0, rows, row0, nr, col0, nc, ref, &o, &e) == 0,
                  "cpu slice: %s", ERRMSG(e));
    void *dsrc, *ddst;
    ck_assert_int_eq(gguf_cuda_malloc(&dsrc, nbytes, &e), 0);
    ck_assert_int_eq(gguf_cuda_malloc(&ddst, (size_t)n * os + 4, &e), 0);
    ck_assert_int_eq(gguf_cuda_memcpy(dsrc, host, nbytes, &e), 0);
    ck_assert_int_eq(gguf_cuda_memset_async(ddst, 0xA5, (size_t)n * os, NULL, &e), 0);
    ck_assert_msg(gguf_cuda_dequant_slice(type, dsrc, ne0, rows, row0, nr, col0, nc, out_type,
                                          ddst, NULL, &e) == 0 &&
                      gguf_cuda_stream_sync(NULL, &e) == 0,
                  "gpu slice %s: %s", ti->name, ERRMSG(e));
    ck_assert_int_eq(gguf_cuda_memcpy(got, ddst, (size_t)n * os, &e), 0);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t w = 0, g = 0;
        if (os == 4)
            memcpy(&w, &ref[i], 4);
        else
            w = out_type == GGUF_TYPE_F16 ? gguf_fp32_to_fp16(ref[i]) : gguf_fp32_to_bf16(ref[i]);
        memcpy(&g, got + (size_t)i * os, os);
        if (g != w && !bad++)
            fprintf(stderr, "MISMATCH slice %s -> %s [%lld,+%lld)x[%lld,+%lld) at %lld: gpu %08x "
                            "cpu %08x\n",
                    ti->name, gguf_type_name(out_type), (long long)row0, (long long)nr,
                    (long long)col0, (long long)nc, (long long)i, g, w);
    }
    gguf_cuda_free(dsrc);
    gguf_cuda_free(ddst);
    free(host);
    free(ref);
    free(got);
    return bad;
}

START_TEST(tc_slices)
{
    int64_t bad = 0;
    for (uint32_t t = 0; t < GGUF_TYPE_COUNT; t++) {
        if (!gguf_dequant_supported(t))
            continue;
        const int64_t qk = gguf_type_get(t)->block_size;
        if (qk == 1) { /* plain: rows of 45, a slice of 21 columns (tails) */
            bad += check_slice(t, 45, 37, 5, 20, 3, 21, GGUF_TYPE_F32, 11 + t);
            bad += check_slice(t, 48, 9, 1, 7, 8, 32, GGUF_TYPE_BF16, 12 + t);
        } else {
            bad += check_slice(t, 6 * qk, 37, 5, 20, qk, 3 * qk, GGUF_TYPE_F32, 13 + t);
            bad += check_slice(t, 6 * qk, 37, 0, 37, 0, 6 * qk, GGUF_TYPE_BF16, 14 + t);
            bad += check_slice(t, 5 * qk, 11, 3, 8, 4 * qk, qk, GGUF_TYPE_F16, 15 + t);
        }
    }
    /* more rows than one launch's grid.y (65535) */
    bad += check_slice(GGUF_TYPE_Q4_0, 64, 70001, 1, 70000, 32, 32, GGUF_TYPE_F32, 99);
    ck_assert_msg(bad == 0, "%lld elements differ", (long long)bad);

    gguf_error e;
    void *d;
    ck_assert_int_eq(gguf_cuda_malloc(&d, 1 << 16, &e), 0);
    ck_assert_int_eq(gguf_cuda_dequant_slice(GGUF_TYPE_Q4_0, d, 64, 4, 0, 4, 16, 32,
                                             GGUF_TYPE_F32, d, NULL, &e), GGUF_E_BAD_SHAPE);
    ck_assert_int_eq(gguf_cuda_dequant_slice(GGUF_TYPE_Q4_0, d, 64, 4, 2, 3, 0, 32,
                                             GGUF_TYPE_F32, d, NULL, &e), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_cuda_dequant_slice(GGUF_TYPE_Q4_0, d, 64, 4, 0, 1, 64, 32,
                                             GGUF_TYPE_F32, d, NULL, &e), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_cuda_dequant_slice(GGUF_TYPE_Q4_0, d, 64, 4, 0, 0, 0, 32,
                                             GGUF_TYPE_F32, d, NULL, &e), 0);
    ck_assert_int_eq(gguf_cuda_dequant_slice(4, d, 64, 4, 0, 1, 0, 32, GGUF_TYPE_F32, d, NULL,
                                             &e), GGUF_E_BAD_TYPE);
    gguf_cuda_free(d);
}
END_TEST

/* ---- every tensor of real files ----------------------------------------- */

static int64_t g_file_bad, g_files, g_tensors;

static int check_file(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    const size_t len = strlen(path);
    if (flag != FTW_F || len < 5 || strcmp(path + len - 5, ".gguf") != 0)
        return 0;
    gguf_file *f = NULL;
    gguf_error e;
    if (gguf_file_open(&f, path, NULL, &e) != 0) {
        fprintf(stderr, "files: %s: not opened (%s), skipped\n", path, ERRMSG(e));
        return 0;
    }
    g_files++;
    for (int64_t i = 0; i < gguf_file_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_file_tensor_at(f, i);
        if (t->n_elements == 0)
            continue;
        char what[300];
        snprintf(what, sizeof what, "%s:%s", path, t->name);
        g_file_bad += gpu_vs_cpu(what, t->type, t->data, t->nbytes, t->n_elements,
                                 GGUF_TYPE_F32, 0, 0);
        g_file_bad += gpu_vs_cpu(what, t->type, t->data, t->nbytes, t->n_elements,
                                 GGUF_TYPE_BF16, 0, 0);
        g_tensors++;
    }
    gguf_file_free(f);
    return 0;
}

START_TEST(tc_real_files)
{
    const char *dir = getenv("GGUFKIT_GPU_TESTDATA");
    if (!dir || !*dir)
        dir = getenv("GGUFKIT_SHARED");
    struct stat st;
    if (!dir || stat(dir, &st) != 0) {
        fprintf(stderr, "real files: skipped: no GGUFKIT_GPU_TESTDATA / GGUFKIT_SHARED folder\n");
        return;
    }
    g_file_bad = g_files = g_tensors = 0;
    ck_assert_int_eq(nftw(dir, check_file, 16, FTW_PHYS), 0);
    fprintf(stderr, "real files: %lld files, %lld tensors compared (F32 and BF16 out)\n",
            (long long)g_files, (long long)g_tensors);
    ck_assert_msg(g_file_bad == 0, "%lld elements differ", (long long)g_file_bad);
}
END_TEST

int main(void)
{
    gguf_error e;
    int count = 0;
    if (gguf_cuda_device_count(&count, &e) != 0) {
        fprintf(stderr, "test_cuda_dequant: skipped: %s\n", ERRMSG(e));
        return 77;
    }
    gguf_cuda_device_info info;
    if (gguf_cuda_device_info_get(0, &info, &e) == 0)
        fprintf(stderr, "device 0: %s, sm_%d%d, %d SMs, %.1f GiB\n", info.name, info.cc_major,
                info.cc_minor, info.sm_count, (double)info.total_mem / (1u << 30));
    Suite *s = suite_create("cuda_dequant");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    /* GGUFKIT_GPU_QUICK=1: a short run for compute-sanitizer */
    const char *quick = getenv("GGUFKIT_GPU_QUICK");
    const int full = !(quick && *quick && *quick != '0');
    tcase_add_test(tc, tc_errors);
    tcase_add_test(tc, tc_stream);
    if (full)
        tcase_add_test(tc, tc_every_type_random);
    tcase_add_test(tc, tc_every_type_special);
    tcase_add_test(tc, tc_slices);
    if (full) {
        tcase_add_test(tc, tc_large);
        tcase_add_test(tc, tc_pieces);
        tcase_add_test(tc, tc_real_files);
    }
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
