/* Pinned host-to-device bandwidth of this machine's GPU
 * (gguf_cuda_h2d_bandwidth, ggufkit_cuda/forward_cuda.h). */
#include "cuda_internal.h"

#include <string.h>

#include "ggufkit_cuda/forward_cuda.h"

int gguf_cuda_h2d_bandwidth(double *bytes_per_s, size_t bytes, int reps, gguf_error *err)
{
    if (!bytes_per_s)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "cuda: h2d_bandwidth: NULL out");
    *bytes_per_s = 0;
    if (!bytes)
        bytes = (size_t)256 << 20;
    if (reps < 1)
        reps = 5;
    void *h = NULL, *d = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    int rc = 0;
    cudaError_t e = cudaHostAlloc(&h, bytes, cudaHostAllocDefault);
    if (e == cudaSuccess)
        e = cudaMalloc(&d, bytes);
    if (e == cudaSuccess)
        e = cudaEventCreate(&e0);
    if (e == cudaSuccess)
        e = cudaEventCreate(&e1);
    if (e == cudaSuccess)
        memset(h, 1, bytes);
    float best = 0;
    for (int r = 0; r <= reps && e == cudaSuccess; r++) { /* the first is a warm-up */
        float ms = 0;
        e = cudaEventRecord(e0, 0);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, 0);
        if (e == cudaSuccess)
            e = cudaEventRecord(e1, 0);
        if (e == cudaSuccess)
            e = cudaEventSynchronize(e1);
        if (e == cudaSuccess)
            e = cudaEventElapsedTime(&ms, e0, e1);
        if (e == cudaSuccess && r > 0 && (best == 0 || ms < best))
            best = ms;
    }
    if (e != cudaSuccess)
        rc = gguf_cuda_fail(err, e, "h2d bandwidth");
    else if (best > 0)
        *bytes_per_s = (double)bytes / ((double)best * 1e-3);
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    cudaFree(d);
    if (h)
        cudaFreeHost(h);
    return rc;
}
