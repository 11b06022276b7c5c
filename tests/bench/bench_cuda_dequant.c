/*
 * bench_cuda_dequant: GPU dequantization bandwidth per type, against a
 * device-to-device copy measured in the same run (and a write-only memset,
 * the ceiling of outputs that are mostly writes).
 *
 *   bench_cuda_dequant [LOG2_ELEMENTS] [REPS]      (defaults 29 and 20)
 *
 * For each type: a tensor of 2^LOG2 elements (2 GiB of float32 output at the
 * default), realistic blocks (random quants, finite scales; no NaN) built on
 * the host and replicated on the device; two such input/output sets used in
 * turn so nothing is served from L2. Time: median of REPS launches timed with
 * CUDA events after 3 warm-up launches. Effective bandwidth = (quantized bytes
 * read + output bytes written) / time. The copy baseline is cudaMemcpy
 * device-to-device of a 2 GiB buffer, counted as bytes read + written.
 * Results go to stdout as a table (and docs/benchmarks.md records them).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef GGUFKIT_HAVE_CUDA
int main(void)
{
    fprintf(stderr, "bench_cuda_dequant: built without CUDA\n");
    return 77;
}
#else

#include "gguf/blocks.h"
#include "gguf/dequant.h"
#include "gguf/types.h"
#include "ggufkit_cuda/cuda_dequant.h"
#include "ggufkit_cuda/cuda_device.h"

#define MAX_REPS 200

static void die(const char *what, const gguf_error *e)
{
    fprintf(stderr, "bench_cuda_dequant: error: %s: %s\n", what, e->message);
    exit(gguf_cuda_no_device(e) ? 77 : 3);
}

static uint64_t rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float frand(uint64_t *s) /* in [-1, 1) */
{
    return (float)((double)(rng(s) >> 11) / 4503599627370496.0 - 1.0);
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* A half scale in [1e-3, 0.1): what real weights carry. */
static uint16_t scale_h(uint64_t *s)
{
    return gguf_fp32_to_fp16(0.001f + 0.099f * (frand(s) * 0.5f + 0.5f));
}

/* Fill `bytes` of host memory with realistic data of `type`. */
static void make_pattern(uint32_t type, uint8_t *p, size_t bytes, uint64_t *s)
{
    const gguf_type_info *ti = gguf_type_get(type);
    for (size_t i = 0; i < bytes; i++)
        p[i] = (uint8_t)rng(s);
    const size_t nb = bytes / ti->type_size;
    for (size_t b = 0; b < nb; b++) {
        uint8_t *blk = p + b * ti->type_size;
        switch (type) {
        case GGUF_TYPE_F32: {
            const float f = frand(s);
            memcpy(blk, &f, 4);
            break;
        }
        case GGUF_TYPE_F64: {
            const double d = frand(s);
            memcpy(blk, &d, 8);
            break;
        }
        case GGUF_TYPE_F16: put16(blk, gguf_fp32_to_fp16(frand(s))); break;
        case GGUF_TYPE_BF16: put16(blk, gguf_fp32_to_bf16(frand(s))); break;
        case GGUF_TYPE_Q4_1: case GGUF_TYPE_Q5_1: case GGUF_TYPE_Q2_K: case GGUF_TYPE_Q4_K:
        case GGUF_TYPE_Q5_K:
            put16(blk, scale_h(s)); /* d then m/dmin: the first two halves */
            put16(blk + 2, scale_h(s));
            if (type == GGUF_TYPE_Q2_K) {
                put16(blk + offsetof(gguf_block_q2_k, d), scale_h(s));
                put16(blk + offsetof(gguf_block_q2_k, dmin), scale_h(s));
            }
            break;
        case GGUF_TYPE_Q3_K: put16(blk + offsetof(gguf_block_q3_k, d), scale_h(s)); break;
        case GGUF_TYPE_Q6_K: put16(blk + offsetof(gguf_block_q6_k, d), scale_h(s)); break;
        case GGUF_TYPE_TQ1_0: put16(blk + offsetof(gguf_block_tq1_0, d), scale_h(s)); break;
        case GGUF_TYPE_TQ2_0: put16(blk + offsetof(gguf_block_tq2_0, d), scale_h(s)); break;
        case GGUF_TYPE_Q8_K: {
            const float d = 0.01f;
            memcpy(blk, &d, 4);
            break;
        }
        case GGUF_TYPE_IQ1_M: {
            const uint16_t h = scale_h(s);
            uint8_t *sc = blk + offsetof(gguf_block_iq1_m, scales);
            for (int k = 0; k < 4; k++)
                sc[2 * k + 1] = (uint8_t)((sc[2 * k + 1] & 0x0F) | (((h >> (4 * k)) & 15) << 4));
            break;
        }
        case GGUF_TYPE_MXFP4: blk[0] = (uint8_t)(120 + rng(s) % 8); break;
        case GGUF_TYPE_NVFP4:
            for (int k = 0; k < 4; k++)
                blk[k] = (uint8_t)(0x30 + rng(s) % 16);
            break;
        case GGUF_TYPE_I8: case GGUF_TYPE_I16: case GGUF_TYPE_I32: case GGUF_TYPE_I64: break;
        default: put16(blk, scale_h(s)); break; /* d first: Q4_0 .. Q8_1, IQ*, Q1_0 */
        }
    }
}

static int cmp_float(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

typedef struct timing {
    gguf_cuda_event *ev[MAX_REPS + 1];
} timing;

/* Median ms of reps runs of fn(i) (i = rep index, for rotation). */
typedef int (*run_fn)(int i, void *ctx, gguf_error *e);

static float time_median(run_fn fn, void *ctx, int reps, timing *t)
{
    gguf_error e;
    for (int i = 0; i < 3; i++)
        if (fn(i, ctx, &e))
            die("warm-up", &e);
    if (gguf_cuda_device_sync(&e))
        die("sync", &e);
    float ms[MAX_REPS];
    for (int i = 0; i < reps; i++) {
        if (gguf_cuda_event_record(t->ev[i], NULL, &e) || fn(i, ctx, &e) ||
            gguf_cuda_event_record(t->ev[i + 1], NULL, &e))
            die("run", &e);
        if (gguf_cuda_event_elapsed_ms(&ms[i], t->ev[i], t->ev[i + 1], &e))
            die("elapsed", &e);
    }
    qsort(ms, (size_t)reps, sizeof ms[0], cmp_float);
    return ms[reps / 2];
}

typedef struct copy_ctx {
    void *a[2], *b[2];
    size_t bytes;
} copy_ctx;

static int run_fill(int i, void *c, gguf_error *e)
{
    copy_ctx *x = c;
    return gguf_cuda_memset_async(x->b[i & 1], 0x3C, x->bytes, NULL, e);
}

static int run_copy(int i, void *c, gguf_error *e)
{
    copy_ctx *x = c;
    return gguf_cuda_memcpy_async(x->b[i & 1], x->a[i & 1], x->bytes, NULL, e);
}

typedef struct dq_ctx {
    uint32_t type, out_type;
    void *src[2], *dst[2];
    int64_t n;
} dq_ctx;

static int run_dq(int i, void *c, gguf_error *e)
{
    dq_ctx *x = c;
    return gguf_cuda_dequant_to(x->type, x->src[i & 1], x->out_type, x->dst[i & 1], x->n, NULL, e);
}

/* Issue 16's goal: every type, both outputs, at >= 80% of the copy. */
#define TARGET 0.80

int main(int argc, char **argv)
{
    const int log2n = argc > 1 ? atoi(argv[1]) : 29;
    int reps = argc > 2 ? atoi(argv[2]) : 20;
    if (log2n < 12 || log2n > 32 || reps < 1) {
        fprintf(stderr, "usage: bench_cuda_dequant [LOG2_ELEMENTS 12..32] [REPS]\n");
        return 2;
    }
    if (reps > MAX_REPS)
        reps = MAX_REPS;
    gguf_error e;
    int count;
    if (gguf_cuda_device_count(&count, &e))
        die("device", &e);
    gguf_cuda_device_info info;
    if (gguf_cuda_device_info_get(0, &info, &e))
        die("device info", &e);
    printf("device: %s (sm_%d%d, %d SMs, %.0f GiB, L2 %.0f MiB, bus %d bits), driver %d, "
           "runtime %d\n",
           info.name, info.cc_major, info.cc_minor, info.sm_count,
           (double)info.total_mem / (1u << 30), (double)info.l2_bytes / (1u << 20),
           info.mem_bus_bits, info.driver_version, info.runtime_version);
    const int64_t n = (int64_t)1 << log2n;
    printf("elements per tensor: %lld (float32 output %.2f GiB), reps %d, median\n",
           (long long)n, (double)n * 4 / (1u << 30), reps);

    timing t;
    for (int i = 0; i <= reps; i++)
        if (gguf_cuda_event_create(&t.ev[i], &e))
            die("event", &e);

    /* copy baseline: as many bytes as a float32 output */
    copy_ctx cc;
    cc.bytes = (size_t)n * 4;
    for (int k = 0; k < 2; k++)
        if (gguf_cuda_malloc(&cc.a[k], cc.bytes, &e) || gguf_cuda_malloc(&cc.b[k], cc.bytes, &e) ||
            gguf_cuda_memset_async(cc.a[k], 0x3C, cc.bytes, NULL, &e))
            die("copy buffers", &e);
    const float copy_ms = time_median(run_copy, &cc, reps, &t);
    const double copy_gbs = 2.0 * (double)cc.bytes / (copy_ms * 1e-3) / 1e9;
    printf("copy (cudaMemcpy D2D, %.2f GiB): %.3f ms, %.1f GB/s (read + write)\n",
           (double)cc.bytes / (1u << 30), copy_ms, copy_gbs);
    /* the write-only ceiling: float32 output is mostly writes */
    const float fill_ms = time_median(run_fill, &cc, reps, &t);
    printf("write only (cudaMemset, %.2f GiB): %.3f ms, %.1f GB/s (%.1f%% of copy)\n",
           (double)cc.bytes / (1u << 30), fill_ms, (double)cc.bytes / (fill_ms * 1e-3) / 1e9,
           100.0 * (double)cc.bytes / (fill_ms * 1e-3) / 1e9 / copy_gbs);
    for (int k = 0; k < 2; k++) {
        gguf_cuda_free(cc.a[k]);
        gguf_cuda_free(cc.b[k]);
    }

    printf("\n%-8s %8s %5s %9s %9s %7s %7s\n", "type", "B/elem", "out", "ms", "GB/s", "%copy",
           "target");
    int below = 0;
    for (uint32_t type = 0; type < GGUF_TYPE_COUNT; type++) {
        if (!gguf_cuda_dequant_supported(type))
            continue;
        const gguf_type_info *ti = gguf_type_get(type);
        const size_t in_bytes = (size_t)(n / ti->block_size) * ti->type_size;
        /* a host pattern of at most 64 MiB, replicated by doubling copies */
        size_t pat = (size_t)4096 * ti->type_size * (ti->block_size == 1 ? 64 : 16);
        if (pat > in_bytes)
            pat = in_bytes;
        uint8_t *host = malloc(pat);
        if (!host)
            return 3;
        uint64_t seed = 0xC0FFEE + type;
        make_pattern(type, host, pat, &seed);
        dq_ctx dc = {.type = type, .n = n};
        for (int k = 0; k < 2; k++) {
            if (gguf_cuda_malloc(&dc.src[k], in_bytes, &e) ||
                gguf_cuda_malloc(&dc.dst[k], (size_t)n * 4, &e) ||
                gguf_cuda_memcpy(dc.src[k], host, pat, &e))
                die("buffers", &e);
            for (size_t have = pat; have < in_bytes;) {
                const size_t m = have < in_bytes - have ? have : in_bytes - have;
                if (gguf_cuda_memcpy_async((uint8_t *)dc.src[k] + have, dc.src[k], m, NULL, &e))
                    die("replicate", &e);
                have += m;
            }
        }
        free(host);
        static const uint32_t outs[2] = {GGUF_TYPE_F32, GGUF_TYPE_BF16};
        for (int o = 0; o < 2; o++) {
            dc.out_type = outs[o];
            const float ms = time_median(run_dq, &dc, reps, &t);
            const double bytes = (double)in_bytes + (double)n * (o == 0 ? 4 : 2);
            const double gbs = bytes / (ms * 1e-3) / 1e9;
            const double frac = gbs / copy_gbs;
            if (frac < TARGET)
                below++;
            printf("%-8s %8.4f %5s %9.3f %9.1f %6.1f%% %6s%s\n", ti->name,
                   (double)ti->type_size / ti->block_size, o == 0 ? "f32" : "bf16", ms, gbs,
                   100.0 * frac, ">=80%", frac < TARGET ? "  BELOW" : "");
        }
        fflush(stdout);
        for (int k = 0; k < 2; k++) {
            gguf_cuda_free(dc.src[k]);
            gguf_cuda_free(dc.dst[k]);
        }
    }
    for (int i = 0; i <= reps; i++)
        gguf_cuda_event_free(t.ev[i]);
    printf("\ntype/output pairs below target: %d\n", below);
    return 0;
}
#endif
