/*
 * The GPU dequant checker (ggufkit_cuda/cuda_dq_check.h) against the CPU:
 * for every type the GPU dequantizes, the CPU's floats decoded into the
 * checker's pinned buffers chunk by chunk (as gguf-dequant-verify --gpu does),
 * and handed over from the caller's own memory (copied and cut into pieces),
 * must count 0 differing elements; one flipped bit in one element of one
 * chunk must count exactly 1, as must a NaN payload, the sign of a NaN and
 * the sign of a zero (bits, not float equality: equal NaNs count 0); counts
 * are per finish; hundreds of chunks in flight on 2 and 8 slots, tensors smaller
 * than a chunk and than 4 elements, 2^25-element chunks; the argument errors.
 * GGUFKIT_GPU_QUICK=1 (for compute-sanitizer): 16 chunks in flight instead of
 * 256, no 2^25-element chunks.
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
#include "ggufkit_cuda/cuda_dq_check.h"
#include "helper_dequant.h"

#define ERRMSG(e) ((e).message[0] ? (e).message : gguf_status_name((e).code))

/* A checker; chunk_elems and n_slots as given (0: defaults). */
static gguf_cuda_dq_check *make_checker(int64_t chunk_elems, int n_slots)
{
    gguf_cuda_dq_check_opts o = GGUF_CUDA_DQ_CHECK_OPTS_INIT;
    o.chunk_elems = chunk_elems;
    o.n_slots = n_slots;
    o.n_copy_threads = 3;
    gguf_cuda_dq_check *chk = NULL;
    gguf_error e = {0};
    ck_assert_msg(gguf_cuda_dq_check_create(&chk, &o, &e) == 0, "%s", ERRMSG(e));
    return chk;
}

/* nblocks random blocks of type (seeded), and the CPU's floats of them. */
typedef struct tensor {
    uint32_t type;
    int64_t n;
    size_t nbytes;
    uint8_t *src;
    float *ref;
} tensor;

static tensor make_tensor(uint32_t type, int64_t nblocks, uint64_t seed)
{
    const gguf_type_info *ti = gguf_type_get(type);
    tensor t = {type, nblocks * ti->block_size, (size_t)nblocks * ti->type_size, NULL, NULL};
    t.src = malloc(t.nbytes + 1);
    t.ref = malloc((size_t)t.n * sizeof(float) + 4);
    ck_assert(t.src && t.ref);
    uint64_t st = seed;
    hd_fill(&st, t.src, t.nbytes);
    gguf_error e = {0};
    ck_assert_msg(gguf_dequant_scalar_row(type, t.src, t.ref, t.n, &e) == 0, "%s", ERRMSG(e));
    return t;
}

static void free_tensor(tensor *t)
{
    free(t->src);
    free(t->ref);
}

/* One flipped bit: element `at` of the chunk starting at element `first`. */
typedef struct flip {
    int64_t at;
    uint32_t mask;
} flip;

/*
 * The tool's way: per chunk of at most `chunk` elements (whole blocks), take
 * the host buffer, decode the chunk into it on the CPU, flip the bits asked
 * for, submit. Returns the count of finish.
 */
static uint64_t check_in_place(gguf_cuda_dq_check *chk, const tensor *t, int64_t chunk,
                               const flip *flips, int n_flips)
{
    const gguf_type_info *ti = gguf_type_get(t->type);
    const int64_t cap = gguf_cuda_dq_check_capacity(chk, t->type);
    ck_assert_int_gt(cap, 0);
    if (chunk <= 0 || chunk > cap)
        chunk = cap;
    chunk -= chunk % ti->block_size;
    ck_assert_int_gt(chunk, 0);
    gguf_error e = {0};
    for (int64_t e0 = 0; e0 < t->n; e0 += chunk) {
        const int64_t m = t->n - e0 < chunk ? t->n - e0 : chunk;
        const uint8_t *src = t->src + (size_t)(e0 / ti->block_size) * ti->type_size;
        const size_t mb = (size_t)(m / ti->block_size) * ti->type_size;
        float *buf = NULL;
        ck_assert_msg(gguf_cuda_dq_check_host_buffer(chk, &buf, &e) == 0, "%s", ERRMSG(e));
        ck_assert_ptr_nonnull(buf);
        ck_assert_int_eq(gguf_dequant_scalar_row(t->type, src, buf, m, &e), 0);
        for (int f = 0; f < n_flips; f++)
            if (flips[f].at >= e0 && flips[f].at < e0 + m) {
                uint32_t w;
                memcpy(&w, &buf[flips[f].at - e0], 4);
                w ^= flips[f].mask;
                memcpy(&buf[flips[f].at - e0], &w, 4);
            }
        ck_assert_msg(gguf_cuda_dq_check_submit(chk, t->type, src, mb, buf, m, &e) == 0,
                      "%s: %s", ti->name, ERRMSG(e));
    }
    uint64_t n_diff = 99;
    ck_assert_msg(gguf_cuda_dq_check_finish(chk, &n_diff, &e) == 0, "%s", ERRMSG(e));
    return n_diff;
}

/* The caller's own memory: the whole tensor in one submit (copied, cut into
 * pieces), from src + src_off; the buffers are clobbered right after the
 * submit returns (they may be reused then). */
static uint64_t check_copied(gguf_cuda_dq_check *chk, const tensor *t, size_t src_off,
                             const flip *flips, int n_flips)
{
    uint8_t *src = malloc(t->nbytes + src_off);
    float *ref = malloc((size_t)t->n * sizeof(float) + 4);
    ck_assert(src && ref);
    memcpy(src + src_off, t->src, t->nbytes);
    memcpy(ref, t->ref, (size_t)t->n * sizeof(float));
    for (int f = 0; f < n_flips; f++) {
        uint32_t w;
        memcpy(&w, &ref[flips[f].at], 4);
        w ^= flips[f].mask;
        memcpy(&ref[flips[f].at], &w, 4);
    }
    gguf_error e = {0};
    ck_assert_msg(gguf_cuda_dq_check_submit(chk, t->type, src + src_off, t->nbytes, ref, t->n,
                                            &e) == 0,
                  "%s: %s", gguf_type_name(t->type), ERRMSG(e));
    memset(src, 0x5A, t->nbytes + src_off);
    memset(ref, 0xA5, (size_t)t->n * sizeof(float));
    uint64_t n_diff = 99;
    ck_assert_msg(gguf_cuda_dq_check_finish(chk, &n_diff, &e) == 0, "%s", ERRMSG(e));
    free(src);
    free(ref);
    return n_diff;
}

/* Every type, several chunks and a partial last one, both ways. */
START_TEST(tc_types)
{
    gguf_cuda_dq_check *chk = make_checker(4096, 3);
    int n_types = 0;
    for (uint32_t type = 0; type < GGUF_TYPE_COUNT; type++) {
        if (!gguf_cuda_dequant_supported(type))
            continue;
        n_types++;
        const gguf_type_info *ti = gguf_type_get(type);
        /* about 5.3 chunks of 4096; plain types a count that is not a
         * multiple of 8 or 4 (the kernels' tails) */
        const int64_t nblocks = ti->block_size == 1 ? 21803 : (4096 * 5 + 1300) / ti->block_size;
        tensor t = make_tensor(type, nblocks, 1000 + type);
        const uint64_t a = check_in_place(chk, &t, 0, NULL, 0);
        const uint64_t b = check_copied(chk, &t, type % 3, NULL, 0);
        ck_assert_msg(a == 0 && b == 0, "%s: %llu / %llu elements differ", ti->name,
                      (unsigned long long)a, (unsigned long long)b);
        /* one flipped bit (the lowest of the mantissa) in the third chunk */
        const flip f = {2 * 4096 + 77, 1u};
        ck_assert_msg(check_in_place(chk, &t, 0, &f, 1) == 1, "%s: one flip", ti->name);
        ck_assert_msg(check_copied(chk, &t, 1, &f, 1) == 1, "%s: one flip, copied", ti->name);
        free_tensor(&t);
    }
    ck_assert_int_ge(n_types, 30);
    gguf_cuda_dq_check_stats st;
    gguf_cuda_dq_check_get_stats(chk, &st);
    ck_assert_uint_eq(st.tensors, (uint64_t)n_types * 4);
    ck_assert_uint_ge(st.chunks, (uint64_t)n_types * 4 * 6);
    ck_assert_uint_gt(st.ref_copied_bytes, 0);
    gguf_cuda_dq_check_free(chk);
}
END_TEST

/* Corruptions: exact counts, per finish. */
START_TEST(tc_corrupt)
{
    gguf_cuda_dq_check *chk = make_checker(4096, 3);
    tensor t = make_tensor(GGUF_TYPE_Q4_K, 10 * 16 + 3, 7); /* 10 chunks and 768 elements */
    ck_assert_uint_eq(check_in_place(chk, &t, 0, NULL, 0), 0);
    const flip one = {4096 * 2 + 1234, 1u << 3};
    ck_assert_uint_eq(check_in_place(chk, &t, 0, &one, 1), 1);
    ck_assert_uint_eq(check_in_place(chk, &t, 0, NULL, 0), 0); /* the count starts again */
    /* in three chunks: the first element, one in the middle, the last one */
    const flip three[3] = {{0, 1u << 31}, {4096 * 5 + 17, 1u << 22}, {t.n - 1, 1u}};
    ck_assert_uint_eq(check_in_place(chk, &t, 0, three, 3), 3);
    ck_assert_uint_eq(check_copied(chk, &t, 0, three, 3), 3);
    /* two bits of one element are one element */
    const flip two_bits = {100, 3u};
    ck_assert_uint_eq(check_in_place(chk, &t, 0, &two_bits, 1), 1);
    /* smaller chunks than a slot: the same counts */
    ck_assert_uint_eq(check_in_place(chk, &t, 1024, three, 3), 3);
    free_tensor(&t);
    gguf_cuda_dq_check_free(chk);
}
END_TEST

/* Bits, not values: equal NaNs count 0; a NaN's payload or sign and a zero's
 * sign count 1 each. F32 tensors dequantize to their own bits. */
START_TEST(tc_nan)
{
    gguf_cuda_dq_check *chk = make_checker(4096, 2);
    static const uint32_t specials[] = {0x7FC00001u, 0x7F800001u, 0x80000000u, 0xFFC00000u,
                                        0x7F800000u, 0x00000001u, 0x7FFFFFFFu};
    enum { NS = sizeof specials / sizeof specials[0] };
    tensor t = make_tensor(GGUF_TYPE_F32, 1003, 11);
    for (int i = 0; i < NS; i++) {
        memcpy(t.src + 4 * (size_t)(i * 100), &specials[i], 4); /* in the quantized bytes */
        memcpy(&t.ref[i * 100], &specials[i], 4);               /* and the CPU's result */
    }
    memcpy(t.src + 4 * 1002, &specials[0], 4); /* the tail element */
    memcpy(&t.ref[1002], &specials[0], 4);
    ck_assert_uint_eq(check_copied(chk, &t, 0, NULL, 0), 0);
    ck_assert_uint_eq(check_in_place(chk, &t, 0, NULL, 0), 0);
    const flip f[4] = {
        {0, 0x3u},         /* NaN payload 1 -> 2 */
        {200, 0x80000000u}, /* -0 -> +0 */
        {300, 0x80000000u}, /* 0xFFC00000 -> 0x7FC00000: the NaN's sign */
        {1002, 0x00000010u} /* the last element, a NaN's payload */
    };
    ck_assert_uint_eq(check_copied(chk, &t, 0, f, 4), 4);
    ck_assert_uint_eq(check_in_place(chk, &t, 0, f, 4), 4);
    free_tensor(&t);
    gguf_cuda_dq_check_free(chk);
}
END_TEST

/* Tensors smaller than one chunk, and than the count kernel's 4-word loads. */
START_TEST(tc_small)
{
    gguf_cuda_dq_check *chk = make_checker(0, 0); /* the defaults: 16 Mi floats, 3 slots */
    static const uint32_t types[] = {GGUF_TYPE_Q4_K, GGUF_TYPE_IQ2_XXS, GGUF_TYPE_Q8_0,
                                     GGUF_TYPE_MXFP4};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        tensor t = make_tensor(types[i], 1, 50 + i);
        ck_assert_uint_eq(check_in_place(chk, &t, 0, NULL, 0), 0);
        const flip f = {t.n - 1, 1u << 12};
        ck_assert_uint_eq(check_in_place(chk, &t, 0, &f, 1), 1);
        ck_assert_uint_eq(check_copied(chk, &t, 3, &f, 1), 1);
        free_tensor(&t);
    }
    for (int64_t n = 1; n <= 9; n++) {
        tensor t = make_tensor(GGUF_TYPE_F16, n, 60 + (uint64_t)n);
        ck_assert_uint_eq(check_in_place(chk, &t, 0, NULL, 0), 0);
        for (int64_t at = 0; at < n; at++) {
            const flip f = {at, 1u << 30};
            ck_assert_msg(check_in_place(chk, &t, 0, &f, 1) == 1, "n %lld at %lld",
                          (long long)n, (long long)at);
        }
        ck_assert_uint_eq(check_copied(chk, &t, 1, NULL, 0), 0);
        free_tensor(&t);
    }
    gguf_cuda_dq_check_free(chk);
}
END_TEST

/* Many chunks queued back to back (2 and 8 slots); counts add up over
 * several submits until the finish; 2^25-element chunks (the count kernel's
 * grid-stride loop, several rounds). */
static bool quick_run(void)
{
    const char *quick = getenv("GGUFKIT_GPU_QUICK");
    return quick && *quick && *quick != '0';
}

START_TEST(tc_in_flight)
{
    /* 256 chunks of 4096 (GGUFKIT_GPU_QUICK=1: 16) */
    const int64_t n_chunks = quick_run() ? 16 : 256;
    for (int slots = 2; slots <= 8; slots += 6) {
        gguf_cuda_dq_check *chk = make_checker(4096, slots);
        tensor t = make_tensor(GGUF_TYPE_Q8_0, n_chunks * 4096 / 32, 90 + (uint64_t)slots);
        const flip f = {4096 * (n_chunks * 3 / 4) + 5, 1u << 9};
        ck_assert_uint_eq(check_in_place(chk, &t, 0, &f, 1), 1);
        ck_assert_uint_eq(check_copied(chk, &t, 0, &f, 1), 1);
        /* two "tensors" before one finish: their counts add */
        gguf_error e = {0};
        float *buf;
        for (int k = 0; k < 2; k++) {
            for (int64_t e0 = 0; e0 < 4096 * 3; e0 += 4096) {
                ck_assert_int_eq(gguf_cuda_dq_check_host_buffer(chk, &buf, &e), 0);
                memcpy(buf, t.ref + e0, 4096 * sizeof(float));
                if (e0 == 4096)
                    buf[7] = buf[7] == 1.0f ? 2.0f : 1.0f;
                ck_assert_int_eq(gguf_cuda_dq_check_submit(chk, t.type, t.src + e0 / 32 * 34,
                                                           4096 / 32 * 34, buf, 4096, &e),
                                 0);
            }
        }
        uint64_t n_diff = 0;
        ck_assert_int_eq(gguf_cuda_dq_check_finish(chk, &n_diff, &e), 0);
        ck_assert_uint_eq(n_diff, 2);
        gguf_cuda_dq_check_stats st;
        gguf_cuda_dq_check_get_stats(chk, &st);
        ck_assert_uint_eq(st.chunks, (uint64_t)(2 * n_chunks + 6));
        ck_assert_uint_eq(st.tensors, 3);
        free_tensor(&t);
        gguf_cuda_dq_check_free(chk);
    }
    /* GGUFKIT_GPU_QUICK=1 (compute-sanitizer runs): not the 2^25-element chunks */
    if (quick_run())
        return;
    gguf_cuda_dq_check *chk = make_checker((int64_t)1 << 25, 2);
    tensor t = make_tensor(GGUF_TYPE_Q4_K, ((int64_t)1 << 26) / 256 + 1, 5);
    const flip f[3] = {{0, 1u}, {((int64_t)1 << 25) + 3, 1u << 20}, {t.n - 1, 1u << 31}};
    ck_assert_uint_eq(check_in_place(chk, &t, 0, f, 3), 3);
    ck_assert_uint_eq(check_copied(chk, &t, 0, NULL, 0), 0);
    free_tensor(&t);
    gguf_cuda_dq_check_free(chk);
}
END_TEST

START_TEST(tc_errors)
{
    gguf_error e = {0};
    gguf_cuda_dq_check *chk = NULL;
    gguf_cuda_dq_check_opts o = GGUF_CUDA_DQ_CHECK_OPTS_INIT;
    o.version = GGUF_CUDA_DQ_CHECK_OPTS_VERSION + 1;
    ck_assert_int_eq(gguf_cuda_dq_check_create(&chk, &o, &e), GGUF_E_OPTS_VERSION);
    ck_assert_ptr_null(chk);
    o.version = 0; /* what a zeroed struct holds: version 1 */
    o.chunk_elems = 100;
    ck_assert_int_eq(gguf_cuda_dq_check_create(&chk, &o, &e), GGUF_E_INVALID);
    o.chunk_elems = ((int64_t)1 << 30) + 1;
    ck_assert_int_eq(gguf_cuda_dq_check_create(&chk, &o, &e), GGUF_E_INVALID);
    o.chunk_elems = 4096;
    o.n_slots = 1;
    ck_assert_int_eq(gguf_cuda_dq_check_create(&chk, &o, &e), GGUF_E_INVALID);
    o.n_slots = 9;
    ck_assert_int_eq(gguf_cuda_dq_check_create(&chk, &o, &e), GGUF_E_INVALID);
    o.n_slots = 2;
    o.n_copy_threads = 33;
    ck_assert_int_eq(gguf_cuda_dq_check_create(&chk, &o, &e), GGUF_E_INVALID);
    o.n_copy_threads = -1;
    ck_assert_int_eq(gguf_cuda_dq_check_create(&chk, &o, &e), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_cuda_dq_check_create(NULL, NULL, &e), GGUF_E_INVALID);
    o.n_copy_threads = 1;
    ck_assert_msg(gguf_cuda_dq_check_create(&chk, &o, &e) == 0, "%s", ERRMSG(e));

    ck_assert_int_eq(gguf_cuda_dq_check_capacity(chk, GGUF_TYPE_Q4_K), 4096);
    ck_assert_int_eq(gguf_cuda_dq_check_capacity(chk, GGUF_TYPE_F32), 4096);
    ck_assert_int_eq(gguf_cuda_dq_check_capacity(chk, GGUF_TYPE_F64), 2048);
    ck_assert_int_eq(gguf_cuda_dq_check_capacity(chk, 4), 0); /* removed Q4_2 */
    ck_assert_int_eq(gguf_cuda_dq_check_capacity(NULL, GGUF_TYPE_Q4_K), 0);

    static uint8_t src[4096 * 8];
    static float mine[8192];
    ck_assert_int_eq(gguf_cuda_dq_check_submit(NULL, GGUF_TYPE_Q4_0, src, 18, mine, 32, &e),
                     GGUF_E_INVALID);
    ck_assert_int_eq(gguf_cuda_dq_check_submit(chk, 4, src, 18, mine, 32, &e), GGUF_E_BAD_TYPE);
    ck_assert_int_eq(gguf_cuda_dq_check_submit(chk, 9999, src, 18, mine, 32, &e),
                     GGUF_E_BAD_TYPE);
    ck_assert_int_eq(gguf_cuda_dq_check_submit(chk, GGUF_TYPE_Q4_0, src, 18, mine, 33, &e),
                     GGUF_E_BAD_SHAPE);
    ck_assert_int_eq(gguf_cuda_dq_check_submit(chk, GGUF_TYPE_Q4_0, src, 18, mine, -32, &e),
                     GGUF_E_BAD_SHAPE);
    ck_assert_int_eq(gguf_cuda_dq_check_submit(chk, GGUF_TYPE_Q4_0, src, 17, mine, 32, &e),
                     GGUF_E_INVALID);
    ck_assert_int_eq(gguf_cuda_dq_check_submit(chk, GGUF_TYPE_Q4_0, NULL, 18, mine, 32, &e),
                     GGUF_E_INVALID);
    ck_assert_int_eq(gguf_cuda_dq_check_submit(chk, GGUF_TYPE_Q4_0, src, 18, NULL, 32, &e),
                     GGUF_E_INVALID);
    ck_assert_int_eq(gguf_cuda_dq_check_submit(chk, GGUF_TYPE_Q4_0, src, 0, mine, 0, &e), 0);

    /* the host buffer: no more than a slot; not at its start; not handed out */
    float *b0 = NULL, *again = NULL;
    ck_assert_int_eq(gguf_cuda_dq_check_host_buffer(chk, &b0, &e), 0);
    ck_assert_int_eq(gguf_cuda_dq_check_host_buffer(chk, &again, &e), 0);
    ck_assert_ptr_eq(b0, again);
    memset(b0, 0, 4096 * sizeof(float));
    ck_assert_int_eq(gguf_cuda_dq_check_submit(chk, GGUF_TYPE_F32, src, 4104 * 4, b0, 4104, &e),
                     GGUF_E_INVALID);
    ck_assert_int_eq(gguf_cuda_dq_check_submit(chk, GGUF_TYPE_F32, src, 8 * 4, b0 + 8, 8, &e),
                     GGUF_E_INVALID);
    ck_assert_int_eq(gguf_cuda_dq_check_submit(chk, GGUF_TYPE_F64, src, 4096 * 8, b0, 4096, &e),
                     GGUF_E_INVALID); /* F64: a slot holds 2048 */
    memset(src, 0, sizeof src);
    ck_assert_int_eq(gguf_cuda_dq_check_submit(chk, GGUF_TYPE_F32, src, 4096 * 4, b0, 4096, &e),
                     0);
    /* b0 was submitted: the next slot is another; after two submits slot 0
     * comes back, but must be taken with host_buffer first */
    ck_assert_int_eq(gguf_cuda_dq_check_submit(chk, GGUF_TYPE_F32, src, 64 * 4, b0, 64, &e),
                     GGUF_E_INVALID);
    float *b1 = NULL;
    ck_assert_int_eq(gguf_cuda_dq_check_host_buffer(chk, &b1, &e), 0);
    ck_assert_ptr_ne(b0, b1);
    memset(b1, 0, 64 * sizeof(float));
    ck_assert_int_eq(gguf_cuda_dq_check_submit(chk, GGUF_TYPE_F32, src, 64 * 4, b1, 64, &e), 0);
    ck_assert_int_eq(gguf_cuda_dq_check_submit(chk, GGUF_TYPE_F32, src, 64 * 4, b0, 64, &e),
                     GGUF_E_INVALID);
    /* the argument errors left the checker usable: zeros against zeros */
    uint64_t n_diff = 99;
    ck_assert_msg(gguf_cuda_dq_check_finish(chk, &n_diff, &e) == 0, "%s", ERRMSG(e));
    ck_assert_uint_eq(n_diff, 0);
    ck_assert_int_eq(gguf_cuda_dq_check_host_buffer(NULL, &b0, &e), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_cuda_dq_check_host_buffer(chk, NULL, &e), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_cuda_dq_check_finish(NULL, &n_diff, &e), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_cuda_dq_check_finish(chk, NULL, &e), GGUF_E_INVALID);
    gguf_cuda_dq_check_stats st;
    gguf_cuda_dq_check_get_stats(NULL, &st);
    ck_assert_uint_eq(st.chunks, 0);
    gguf_cuda_dq_check_get_stats(chk, NULL);
    gguf_cuda_dq_check_free(chk);
    gguf_cuda_dq_check_free(NULL);
}
END_TEST

int main(void)
{
    gguf_error e;
    int count = 0;
    if (gguf_cuda_device_count(&count, &e) != 0) {
        fprintf(stderr, "test_cuda_dq_check: skipped: %s\n", ERRMSG(e));
        return 77;
    }
    Suite *s = suite_create("cuda_dq_check");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, tc_errors);
    tcase_add_test(tc, tc_small);
    tcase_add_test(tc, tc_nan);
    tcase_add_test(tc, tc_corrupt);
    tcase_add_test(tc, tc_types);
    tcase_add_test(tc, tc_in_flight);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
