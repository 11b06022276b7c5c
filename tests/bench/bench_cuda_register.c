/*
 * Can the copy engine read a GGUF's mmap directly? Registers the file's
 * whole mapping with CUDA (read-only, page-locked in place) and measures the
 * registration time and host-to-device copies straight from the page cache,
 * in expert-sized pieces and in large ones, against pinned-buffer bandwidth.
 *
 *   bench_cuda_register MODEL.gguf [PIECE_MIB]
 *
 * Then, with nothing registered, the same file in windows: each window
 * registered just before its copy and unregistered once the copy is over
 * (three in flight), as a model larger than the RAM would stream without a
 * host gather; and the registration alone (register + unregister, no copy).
 *
 * Exit 77 without a GPU; 0 with a line of key=value pairs, also when the
 * registration is refused (registered=0 and the CUDA error).
 */
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "gguf/file.h"
#include "ggufkit_cuda/cuda_device.h"
#include "ggufkit_cuda/forward_cuda.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The file from offset 4096 in windows of w bytes, each registered before
 * its copy and unregistered once its copy is over (ring of three); with copy
 * false only register + unregister. GB/s over at most 4 GiB. */
static double windowed(const uint8_t *base, size_t size, size_t w, bool copy, void *dev,
                       size_t dev_bytes, cudaStream_t s)
{
    enum { RING = 3 };
    cudaEvent_t ev[RING];
    const uint8_t *reg[RING] = {0};
    for (int k = 0; k < RING; k++)
        cudaEventCreateWithFlags(&ev[k], cudaEventDisableTiming);
    const size_t total = size - 4096 < ((size_t)4 << 30) ? size - 4096 : (size_t)4 << 30;
    size_t moved = 0;
    bool ok = true;
    const double a = now();
    for (size_t off = 4096, j = 0; ok && off + w <= 4096 + total; off += w, j++) {
        const int k = (int)(j % RING);
        if (reg[k]) {
            cudaEventSynchronize(ev[k]);
            cudaHostUnregister((void *)reg[k]);
        }
        reg[k] = base + off;
        ok = cudaHostRegister((void *)reg[k], w, cudaHostRegisterReadOnly) == cudaSuccess;
        if (!ok) {
            reg[k] = NULL;
            break;
        }
        if (copy)
            cudaMemcpyAsync((char *)dev + (moved % (dev_bytes - w)), reg[k], w,
                            cudaMemcpyHostToDevice, s);
        cudaEventRecord(ev[k], s);
        moved += w;
    }
    cudaStreamSynchronize(s);
    for (int k = 0; k < RING; k++) {
        if (reg[k])
            cudaHostUnregister((void *)reg[k]);
        cudaEventDestroy(ev[k]);
    }
    return ok ? (double)moved / (now() - a) : 0;
}

static void windows(const uint8_t *base, size_t size, void *dev, size_t dev_bytes, cudaStream_t s)
{
    const size_t mib[] = {1, 4, 16, 64};
    for (size_t i = 0; i < sizeof mib / sizeof *mib; i++) {
        const size_t w = mib[i] << 20;
        const double only = windowed(base, size, w, false, dev, dev_bytes, s);
        const double with = windowed(base, size, w, true, dev, dev_bytes, s);
        printf("window_MiB=%zu register_unregister_GBps=%.2f windowed_copy_GBps=%.2f\n",
               mib[i], only / 1e9, with / 1e9);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.gguf [PIECE_MIB]\n", argv[0]);
        return 2;
    }
    gguf_error err = {0};
    int n_dev;
    if (gguf_cuda_device_count(&n_dev, &err)) {
        printf("skipped: no usable CUDA device (%s)\n", err.message);
        return 77;
    }
    gguf_file *f = NULL;
    if (gguf_file_open(&f, argv[1], NULL, &err)) {
        fprintf(stderr, "%s\n", err.message);
        return 2;
    }
    const uint8_t *base = gguf_file_bytes(f);
    const size_t size = (size_t)gguf_file_size(f);
    const size_t piece = (argc > 2 ? (size_t)atoll(argv[2]) : 4) << 20;
    volatile uint64_t sum = 0;
    for (size_t i = 0; i < size; i += 4096)
        sum += base[i]; /* page cache and page tables in place */
    double h2d = 0;
    gguf_cuda_h2d_bandwidth(&h2d, 0, 5, &err);
    void *dev = NULL;
    const size_t dev_bytes = (size_t)1 << 30;
    if (cudaMalloc(&dev, dev_bytes) != cudaSuccess)
        return 3;
    const double t0 = now();
    cudaError_t e = cudaHostRegister((void *)base, (size + 4095) & ~(size_t)4095,
                                     cudaHostRegisterReadOnly);
    const double t1 = now();
    if (e != cudaSuccess) {
        printf("registered=0 error=%s register_s=%.3f size_MiB=%.0f\n", cudaGetErrorString(e),
               t1 - t0, (double)size / 1048576.0);
        return 0;
    }
    cudaStream_t s;
    cudaStreamCreate(&s);
    double rate[2];
    const size_t pieces[2] = {piece, (size_t)64 << 20};
    for (int k = 0; k < 2; k++) {
        const size_t total = size - 4096 < ((size_t)4 << 30) ? size - 4096 : (size_t)4 << 30;
        const double a = now();
        size_t moved = 0;
        for (size_t off = 4096; off + pieces[k] <= 4096 + total; off += pieces[k]) {
            cudaMemcpyAsync((char *)dev + (moved % (dev_bytes - pieces[k])), base + off, pieces[k],
                            cudaMemcpyHostToDevice, s);
            moved += pieces[k];
        }
        e = cudaStreamSynchronize(s);
        rate[k] = (double)moved / (now() - a);
    }
    const double t2 = now();
    cudaHostUnregister((void *)base);
    const double t3 = now();
    windows(base, size, dev, dev_bytes, s);
    printf("registered=1 sync=%s size_MiB=%.0f register_s=%.3f register_GBps=%.2f "
           "piece_MiB=%zu from_mmap_GBps=%.2f from_mmap_64MiB_GBps=%.2f pinned_h2d_GBps=%.2f "
           "unregister_s=%.3f\n",
           cudaGetErrorString(e), (double)size / 1048576.0, t1 - t0,
           (double)size / (t1 - t0) / 1e9, piece >> 20, rate[0] / 1e9, rate[1] / 1e9, h2d / 1e9,
           t3 - t2);
    cudaFree(dev);
    gguf_file_free(f);
    return 0;
}
