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

/* Checks shared by the entry points: type, output type. */
static int check_types(uint32_t type, uint32_t out_type, const gguf_type_info **out,
                       gguf_error *err)
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
    *out = ti;
    return GGUF_OK;
}

/* n_rows rows of n elements: row r's source at src + r * src_row_stride,
 * its output right after row r-1's. Arguments already checked. */
static int launch_rows(const gguf_type_info *ti, uint32_t type, const uint8_t *src,
                       uint64_t src_row_stride, uint64_t n_rows, uint64_t n, uint32_t out_type,
                       void *dst, gguf_cuda_stream *stream, gguf_error *err)
{
    int rc = check_device_ptr(src, "source", err);
    if (rc == GGUF_OK)
        rc = check_device_ptr(dst, "destination", err);
    if (rc != GGUF_OK)
        return rc;
    const uint64_t out_size = out_type == GGUF_TYPE_F32 ? 4 : 2;
    if (n_rows > 1 && ti->block_size == 1 && n % 8 != 0) {
        /* plain types, rows not a multiple of 8 elements: one call a row, so
         * that each row's tail gets its own tail kernel */
        for (uint64_t r = 0; r < n_rows; r++) {
            rc = launch_rows(ti, type, src + r * src_row_stride, 0, 1, n, out_type,
                             (uint8_t *)dst + r * n * out_size, stream, err);
            if (rc != GGUF_OK)
                return rc;
        }
        return GGUF_OK;
    }
    int dev = 0, sms = 0;
    GC_TRY(err, cudaGetDevice(&dev));
    GC_TRY(err, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    gc_launch l;
    l.src = src;
    l.dst = dst;
    l.n = n;
    l.n_rows = n_rows;
    l.src_row_stride = src_row_stride;
    l.out_type = out_type;
    /* every row's start must have the alignment the kernel assumes */
    l.src_align = alignment_of(src);
    if (n_rows > 1 && alignment_of((const void *)(uintptr_t)src_row_stride) < l.src_align)
        l.src_align = alignment_of((const void *)(uintptr_t)src_row_stride);
    l.vec = alignment_of(dst) >= 16 && (n_rows == 1 || (n * out_size) % 16 == 0);
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

int gguf_cuda_dequant_to(uint32_t type, const void *src, uint32_t out_type, void *dst,
                         int64_t n, gguf_cuda_stream *stream, gguf_error *err)
{
    const gguf_type_info *ti = NULL; /* set by check_types on success */
    int rc = check_types(type, out_type, &ti, err);
    if (rc != GGUF_OK)
        return rc;
    if (n < 0 || n % ti->block_size != 0)
        return gguf_fail(err, GGUF_E_BAD_SHAPE, GGUF_NO_OFFSET,
                         "cuda: dequant: %lld elements is not a whole number of %s blocks of %u",
                         (long long)n, ti->name, ti->block_size);
    if (n == 0)
        return GGUF_OK;
    if (!src || !dst)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "cuda: dequant: NULL buffer");
    return launch_rows(ti, type, (const uint8_t *)src, 0, 1, (uint64_t)n, out_type, dst, stream,
                       err);
}

int gguf_cuda_dequant_slice(uint32_t type, const void *tensor_data, int64_t ne0,
                            int64_t n_rows_total, int64_t row0, int64_t n_rows, int64_t col0,
                            int64_t n_cols, uint32_t out_type, void *dst,
                            gguf_cuda_stream *stream, gguf_error *err)
{
    const gguf_type_info *ti = NULL; /* set by check_types on success */
    int rc = check_types(type, out_type, &ti, err);
    if (rc != GGUF_OK)
        return rc;
    const int64_t qk = ti->block_size;
    if (ne0 < 0 || ne0 % qk || col0 % qk || n_cols % qk)
        return gguf_fail(err, GGUF_E_BAD_SHAPE, GGUF_NO_OFFSET,
                         "cuda: dequant slice: ne0 %lld, col0 %lld and n_cols %lld must be "
                         "multiples of the %s block size %lld",
                         (long long)ne0, (long long)col0, (long long)n_cols, ti->name,
                         (long long)qk);
    if (n_rows_total < 0 || row0 < 0 || n_rows < 0 || col0 < 0 || n_cols < 0 ||
        row0 > n_rows_total - n_rows || col0 > ne0 - n_cols)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "cuda: dequant slice: rows [%lld, +%lld) x columns [%lld, +%lld) are "
                         "not inside %lld x %lld",
                         (long long)row0, (long long)n_rows, (long long)col0, (long long)n_cols,
                         (long long)n_rows_total, (long long)ne0);
    if (n_rows == 0 || n_cols == 0)
        return GGUF_OK;
    if (!tensor_data || !dst)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "cuda: dequant slice: NULL buffer");
    const uint64_t row_bytes = (uint64_t)(ne0 / qk) * ti->type_size;
    const uint8_t *src = (const uint8_t *)tensor_data + (uint64_t)row0 * row_bytes +
                         (uint64_t)(col0 / qk) * ti->type_size;
    return launch_rows(ti, type, src, row_bytes, (uint64_t)n_rows, (uint64_t)n_cols, out_type,
                       dst, stream, err);
}

int gguf_cuda_dequant(uint32_t type, const void *src, float *dst, int64_t n,
                      gguf_cuda_stream *stream, gguf_error *err)
{
    return gguf_cuda_dequant_to(type, src, GGUF_TYPE_F32, dst, n, stream, err);
}
