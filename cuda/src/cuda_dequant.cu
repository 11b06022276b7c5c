/*
 * gguf_cuda_dequant*: argument checks (the same rules and codes as the CPU
 * API in gguf/dequant.h), then one launch of the type's kernel. The kernels
 * live in cuda_dequant_kernels.cuh, instantiated per type family in
 * cuda_dequant_{plain,legacy,kquant,iq}.cu so the build compiles them in
 * parallel.
 */
#include "cuda_dequant_kernels.cuh"
#include "cuda_internal.h"

#include "ggufkit_cuda/cuda_dequant.h"

extern "C" {
#include "gguf/dequant.h"
#include "gguf/types.h"
}

#include <errno.h>

static cudaError_t launch(uint32_t type, const gc_launch *l, bool *handled)
{
    cudaError_t e = gc_launch_plain(type, l, handled);
    if (!*handled)
        e = gc_launch_legacy(type, l, handled);
    if (!*handled)
        e = gc_launch_kquant(type, l, handled);
    if (!*handled)
        e = gc_launch_iq(type, l, handled);
    return e;
}

bool gguf_cuda_dequant_supported(uint32_t type)
{
    switch (type) {
    case GGUF_TYPE_F32: case GGUF_TYPE_F16: case GGUF_TYPE_BF16: case GGUF_TYPE_F64:
    case GGUF_TYPE_I8: case GGUF_TYPE_I16: case GGUF_TYPE_I32: case GGUF_TYPE_I64:
    case GGUF_TYPE_Q4_0: case GGUF_TYPE_Q4_1: case GGUF_TYPE_Q5_0: case GGUF_TYPE_Q5_1:
    case GGUF_TYPE_Q8_0: case GGUF_TYPE_Q8_1: case GGUF_TYPE_Q1_0: case GGUF_TYPE_MXFP4:
    case GGUF_TYPE_NVFP4: case GGUF_TYPE_IQ4_NL: case GGUF_TYPE_Q2_K: case GGUF_TYPE_Q3_K:
    case GGUF_TYPE_Q4_K: case GGUF_TYPE_Q5_K: case GGUF_TYPE_Q6_K: case GGUF_TYPE_Q8_K:
    case GGUF_TYPE_TQ1_0: case GGUF_TYPE_TQ2_0: case GGUF_TYPE_IQ4_XS: case GGUF_TYPE_IQ2_XXS:
    case GGUF_TYPE_IQ2_XS: case GGUF_TYPE_IQ2_S: case GGUF_TYPE_IQ3_XXS: case GGUF_TYPE_IQ3_S:
    case GGUF_TYPE_IQ1_S: case GGUF_TYPE_IQ1_M:
        return gguf_dequant_supported(type);
    default:
        return false;
    }
}

/* Device memory check: a host pointer handed to a kernel would poison the
 * whole CUDA context with an illegal-address error, so refuse it here. */
static int check_device_ptr(const void *p, const char *what, gguf_error *err)
{
    cudaPointerAttributes a;
    const cudaError_t e = cudaPointerGetAttributes(&a, p);
    if (e != cudaSuccess)
        return gguf_cuda_fail(err, e, "cudaPointerGetAttributes");
    if (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged ||
        (a.type == cudaMemoryTypeHost && a.devicePointer != NULL))
        return GGUF_OK;
    return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                     "cuda: dequant: %s %p is not device memory", what, p);
}

static int alignment_of(const void *p)
{
    const uintptr_t u = (uintptr_t)p;
    int a = 1;
    while (a < 16 && (u & (uintptr_t)(2 * a - 1)) == 0)
        a *= 2;
    return a;
}

int gguf_cuda_dequant_to(uint32_t type, const void *src, uint32_t out_type, void *dst,
                         int64_t n, gguf_cuda_stream *stream, gguf_error *err)
{
    const gguf_type_info *ti = gguf_type_get(type);
    if (!ti)
        return gguf_fail(err, GGUF_E_BAD_TYPE, GGUF_NO_OFFSET, "cuda: dequant: type id %u is unknown",
                         type);
    if (!ti->valid)
        return gguf_fail(err, GGUF_E_BAD_TYPE, GGUF_NO_OFFSET,
                         "cuda: dequant: type %s (id %u) was removed from ggml", ti->name, type);
    if (!gguf_cuda_dequant_supported(type))
        return gguf_fail(err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                         "cuda: dequant: type %s has no GPU dequantization", ti->name);
    if (out_type != GGUF_TYPE_F32 && out_type != GGUF_TYPE_F16 && out_type != GGUF_TYPE_BF16)
        return gguf_fail(err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                         "cuda: dequant: output type %s is not F32, F16 or BF16",
                         gguf_type_name(out_type));
    if (n < 0 || n % ti->block_size != 0)
        return gguf_fail(err, GGUF_E_BAD_SHAPE, GGUF_NO_OFFSET,
                         "cuda: dequant: %lld elements is not a whole number of %s blocks of %u",
                         (long long)n, ti->name, ti->block_size);
    if (n == 0)
        return GGUF_OK;
    if (!src || !dst)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "cuda: dequant: NULL buffer");
    int rc = check_device_ptr(src, "source", err);
    if (rc == GGUF_OK)
        rc = check_device_ptr(dst, "destination", err);
    if (rc != GGUF_OK)
        return rc;

    int dev = 0, sms = 0;
    GC_TRY(err, cudaGetDevice(&dev));
    GC_TRY(err, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    gc_launch l;
    l.src = (const uint8_t *)src;
    l.dst = dst;
    l.n = (uint64_t)n;
    l.out_type = out_type;
    l.src_align = alignment_of(src);
    l.vec = alignment_of(dst) >= 16;
    /* 8 resident blocks of 256 threads per SM, four rounds of them: enough
     * warps in flight to cover memory latency; the loop does the rest. */
    l.max_blocks = (unsigned)(sms > 0 ? sms : 1) * 8u * 4u;
    l.stream = (cudaStream_t)stream;
    bool handled = false;
    const cudaError_t e = launch(type, &l, &handled);
    if (!handled)
        return gguf_fail(err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                         "cuda: dequant: type %s has no GPU kernel", ti->name);
    if (e != cudaSuccess)
        return gguf_cuda_fail(err, e, "dequant kernel launch");
    return GGUF_OK;
}

int gguf_cuda_dequant(uint32_t type, const void *src, float *dst, int64_t n,
                      gguf_cuda_stream *stream, gguf_error *err)
{
    return gguf_cuda_dequant_to(type, src, GGUF_TYPE_F32, dst, n, stream, err);
}
