/*
 * --gpu: the CUDA dequantization (ggufkit_cuda/cuda_dequant.h) must equal the
 * CPU reference bit for bit, on every tensor, chunk by chunk.
 *
 * A build without CUDA, or a machine without a usable GPU, is not a
 * verification failure: the check reports why it was skipped.
 */
#include "dequant_verify.h"

#include <stdlib.h>
#include <string.h>

#include "gguf/types.h"

#if defined(GGUFKIT_HAVE_CUDA) && defined(__has_include)
#if __has_include("ggufkit_cuda/cuda_dequant.h")
#define DV_HAVE_GPU_DEQUANT 1
#include "ggufkit_cuda/cuda_dequant.h"
#include "ggufkit_cuda/cuda_device.h"
#endif
#endif

#ifdef DV_HAVE_GPU_DEQUANT

/* Device buffers, grown as needed and reused across tensors (a tool, not the
 * library: one run, one thread). */
static void *dev_src;
static float *dev_dst;
static size_t dev_src_size, dev_dst_size;
static float *host_out;
static size_t host_out_size;

bool dv_gpu_available(char *why, size_t why_size)
{
    int count = 0;
    gguf_error err;
    if (gguf_cuda_device_count(&count, &err) != 0 || count < 1) {
        snprintf(why, why_size, "no CUDA device (%s)", err.message);
        return false;
    }
    gguf_cuda_device_info info;
    if (gguf_cuda_device_info_get(0, &info, &err) == 0)
        snprintf(why, why_size, "%s", info.name);
    return true;
}

static int grow(void **p, size_t *have, size_t need, char *why, size_t why_size)
{
    if (need <= *have)
        return 0;
    gguf_error err;
    gguf_cuda_free(*p);
    *p = NULL;
    *have = 0;
    if (gguf_cuda_malloc(p, need, &err) != 0) {
        snprintf(why, why_size, "%s", err.message);
        return -1;
    }
    *have = need;
    return 0;
}

int dv_gpu_compare_rows(const gguf_tensor *t, const float *x, int64_t row0, int64_t n_rows,
                        uint64_t *n_diff, char *why, size_t why_size)
{
    gguf_error err;
    const int64_t ne0 = t->ne[0];
    uint64_t row_bytes;
    if (gguf_type_row_bytes(t->type, ne0, &row_bytes) != 0) {
        snprintf(why, why_size, "%s: bad row size", t->name);
        return -1;
    }
    const size_t in = (size_t)(row_bytes * (uint64_t)n_rows);
    const size_t n = (size_t)(ne0 * n_rows);
    if (!gguf_cuda_dequant_supported(t->type)) {
        snprintf(why, why_size, "the GPU kernels do not handle %s", gguf_type_name(t->type));
        return -1;
    }
    if (grow(&dev_src, &dev_src_size, in ? in : 1, why, why_size) != 0 ||
        grow((void **)&dev_dst, &dev_dst_size, sizeof(float) * (n ? n : 1), why, why_size) != 0)
        return -1;
    if (host_out_size < n) {
        float *h = realloc(host_out, sizeof(float) * n);
        if (!h) {
            snprintf(why, why_size, "out of memory");
            return -1;
        }
        host_out = h;
        host_out_size = n;
    }
    if (gguf_cuda_memcpy(dev_src, t->data + (uint64_t)row0 * row_bytes, in, &err) != 0 ||
        gguf_cuda_dequant(t->type, dev_src, dev_dst, (int64_t)n, NULL, &err) != 0 ||
        gguf_cuda_stream_sync(NULL, &err) != 0 ||
        gguf_cuda_memcpy(host_out, dev_dst, sizeof(float) * n, &err) != 0) {
        snprintf(why, why_size, "%s: %s", t->name, err.message);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (memcmp(&host_out[i], &x[i], sizeof(float)) != 0)
            (*n_diff)++;
    return 0;
}

void dv_gpu_release(void)
{
    gguf_cuda_free(dev_src);
    gguf_cuda_free(dev_dst);
    free(host_out);
    dev_src = NULL;
    dev_dst = NULL;
    host_out = NULL;
    dev_src_size = dev_dst_size = host_out_size = 0;
}

#else /* no CUDA dequantization in this build */

bool dv_gpu_available(char *why, size_t why_size)
{
#ifdef GGUFKIT_HAVE_CUDA
    snprintf(why, why_size, "this build's CUDA library has no dequantization API");
#else
    snprintf(why, why_size, "this build has no CUDA support (configure where nvcc exists)");
#endif
    return false;
}

int dv_gpu_compare_rows(const gguf_tensor *t, const float *x, int64_t row0, int64_t n_rows,
                        uint64_t *n_diff, char *why, size_t why_size)
{
    (void)t;
    (void)x;
    (void)row0;
    (void)n_rows;
    (void)n_diff;
    snprintf(why, why_size, "GPU dequantization is not available");
    return -1;
}

void dv_gpu_release(void)
{
}

#endif
