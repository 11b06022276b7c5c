/*
 * bench_cuda_upload: quantized weights streamed from host memory into the GPU
 * and dequantized there (ggufkit_cuda/cuda_upload.h), against the plain
 * host-to-device copy bandwidth measured in the same run.
 *
 *   bench_cuda_upload [GIB]          (quantized bytes, default 2)
 *
 * A Q4_K tensor of GIB GiB (random quants, finite scales) in ordinary
 * (pageable, already resident) host memory, like a GGUF mmap whose pages are
 * cached, is loaded to BF16 on the GPU with several chunk sizes, staging
 * buffer counts and host copy thread counts. Rate = quantized bytes / wall time of load + sync. The
 * baselines are cudaMemcpy of 1 GiB from pinned and from pageable memory.
 * Each figure is the median of 5 runs after one warm-up.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef GGUFKIT_HAVE_CUDA
int main(void)
{
    fprintf(stderr, "bench_cuda_upload: built without CUDA\n");
    return 77;
}
#else

#include "gguf/blocks.h"
#include "gguf/dequant.h"
#include "gguf/types.h"
#include "ggufkit_cuda/cuda_device.h"
#include "ggufkit_cuda/cuda_upload.h"

static void die(const char *what, const gguf_error *e)
{
    fprintf(stderr, "bench_cuda_upload: error: %s: %s\n", what, e->message);
    exit(gguf_cuda_no_device(e) ? 77 : 3);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define RUNS 5

static double median_copy(void *dst, const void *src, size_t n)
{
    gguf_error e;
    double t[RUNS];
    if (gguf_cuda_memcpy(dst, src, n, &e))
        die("copy", &e);
    for (int i = 0; i < RUNS; i++) {
        const double t0 = now();
        if (gguf_cuda_memcpy(dst, src, n, &e))
            die("copy", &e);
        t[i] = now() - t0;
    }
    qsort(t, RUNS, sizeof t[0], cmp_d);
    return t[RUNS / 2];
}

int main(int argc, char **argv)
{
    const double gib = argc > 1 ? atof(argv[1]) : 2.0;
    if (gib <= 0 || gib > 64) {
        fprintf(stderr, "usage: bench_cuda_upload [GIB 0..64]\n");
        return 2;
    }
    gguf_error e;
    gguf_cuda_device_info info;
    int count;
    if (gguf_cuda_device_count(&count, &e) || gguf_cuda_device_info_get(0, &info, &e))
        die("device", &e);
    printf("device: %s, driver %d\n", info.name, info.driver_version);

    /* baselines: 1 GiB host -> device */
    const size_t base = (size_t)1 << 30;
    void *pinned, *dev;
    uint8_t *pageable = malloc(base);
    if (!pageable || gguf_cuda_host_alloc(&pinned, base, &e) || gguf_cuda_malloc(&dev, base, &e))
        die("baseline buffers", &e);
    memset(pageable, 0x3C, base);
    memset(pinned, 0x3C, base);
    const double h2d_pinned = (double)base / median_copy(dev, pinned, base) / 1e9;
    const double h2d_pageable = (double)base / median_copy(dev, pageable, base) / 1e9;
    printf("host->device copy, 1 GiB: pinned %.1f GB/s, pageable %.1f GB/s\n", h2d_pinned,
           h2d_pageable);
    gguf_cuda_host_free(pinned);
    gguf_cuda_free(dev);
    free(pageable);

    /* the tensor: Q4_K, finite scales */
    const gguf_type_info *ti = gguf_type_get(GGUF_TYPE_Q4_K);
    const int64_t nblocks = (int64_t)(gib * (double)(1u << 30)) / ti->type_size;
    const int64_t n = nblocks * ti->block_size;
    const size_t nbytes = (size_t)nblocks * ti->type_size;
    uint8_t *host = malloc(nbytes);
    if (!host)
        return 3;
    uint64_t s = 12345;
    const size_t pat = (size_t)65536 * ti->type_size < nbytes ? (size_t)65536 * ti->type_size : nbytes;
    for (size_t i = 0; i < pat; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        host[i] = (uint8_t)(s >> 56);
    }
    for (size_t b = 0; b + ti->type_size <= pat; b += ti->type_size) {
        const uint16_t d = gguf_fp32_to_fp16(0.01f), m = gguf_fp32_to_fp16(0.002f);
        memcpy(host + b, &d, 2);
        memcpy(host + b + 2, &m, 2);
    }
    for (size_t have = pat; have < nbytes;) {
        const size_t k = have < nbytes - have ? have : nbytes - have;
        memcpy(host + have, host, k);
        have += k;
    }
    void *out;
    if (gguf_cuda_malloc(&out, (size_t)n * 2, &e))
        die("output", &e);
    printf("tensor: Q4_K, %.2f GiB quantized, %lld elements -> BF16 (%.2f GiB)\n\n",
           (double)nbytes / (1u << 30), (long long)n, (double)n * 2 / (1u << 30));
    printf("%8s %8s %8s %10s %10s %9s\n", "chunk", "buffers", "threads", "time s", "GB/s",
           "%pinned");
    static const struct {
        size_t chunk;
        int buffers, threads;
    } cfg[] = {{16u << 20, 2, 1},  {64u << 20, 2, 1},  {64u << 20, 2, 4},  {64u << 20, 2, 8},
               {64u << 20, 2, 12}, {64u << 20, 2, 16}, {64u << 20, 3, 8},  {64u << 20, 3, 12},
               {64u << 20, 3, 16}, {16u << 20, 3, 16}, {256u << 20, 3, 16}};
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        gguf_cuda_uploader *up;
        const gguf_cuda_uploader_opts o = {cfg[c].chunk, cfg[c].buffers, cfg[c].threads};
        if (gguf_cuda_uploader_create(&up, &o, &e))
            die("uploader", &e);
        double tm[RUNS + 1];
        for (int r = 0; r <= RUNS; r++) {
            const double t0 = now();
            if (gguf_cuda_uploader_load(up, GGUF_TYPE_Q4_K, host, n, GGUF_TYPE_BF16, out, &e) ||
                gguf_cuda_uploader_sync(up, &e))
                die("load", &e);
            tm[r] = now() - t0;
        }
        qsort(tm + 1, RUNS, sizeof tm[0], cmp_d); /* tm[0]: warm-up */
        const double sec = tm[1 + RUNS / 2], gbs = (double)nbytes / sec / 1e9;
        printf("%5zu MiB %8d %8d %10.3f %10.1f %8.1f%%\n", cfg[c].chunk >> 20, cfg[c].buffers,
               cfg[c].threads, sec, gbs, 100.0 * gbs / h2d_pinned);
        fflush(stdout);
        gguf_cuda_uploader_free(up);
    }
    gguf_cuda_free(out);
    free(host);
    return 0;
}
#endif
