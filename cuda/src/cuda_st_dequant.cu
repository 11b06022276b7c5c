/*
 * Block-scaled FP8 and NVFP4 (ModelOpt, compressed-tensors) on the GPU: the
 * formulas of gguf/safetensors.h, one thread per output element, products
 * rounded with __fmul_rn/__fdiv_rn (and -fmad=false), NaN results made the
 * CPU's canonical 0x7FC00000, so the bits equal gguf_st_weight_rows().
 */
#include "cuda_internal.h"

#include "ggufkit_cuda/cuda_dequant.h"
#include "ggufkit_cuda/cuda_st_dequant.h"

extern "C" {
#include "gguf/types.h"
}

#include <errno.h>

namespace {

/* E2M1 magnitudes; the sign is bit 3 (nibble 8 is -0, as on the CPU) */
__constant__ float k_e2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

__device__ __forceinline__ float bits_f(uint32_t u)
{
    return __uint_as_float(u);
}

__device__ __forceinline__ float canon(float v)
{
    return v != v ? bits_f(0x7FC00000u) : v;
}

/* E4M3FN, exactly as gguf_fp8_e4m3_to_fp32 */
__device__ __forceinline__ float e4m3(uint8_t x)
{
    const uint32_t sign = (uint32_t)(x >> 7) << 31;
    const uint32_t e = (x >> 3) & 15, m = x & 7;
    if (e == 15 && m == 7)
        return bits_f(sign | 0x7FC00000u);
    if (e == 0) {
        const float v = __fmul_rn((float)m, 0x1p-9f);
        return sign ? -v : v;
    }
    return bits_f(sign | (e - 7 + 127) << 23 | m << 20);
}

/* IEEE half bits -> float (finite values exact; NaN made quiet) */
__device__ __forceinline__ float half_bits(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h >> 15) << 31;
    const uint32_t e = (h >> 10) & 31, m = h & 1023;
    if (e == 31)
        return bits_f(sign | 0x7F800000u | (m ? 0x00400000u | m << 13 : 0));
    if (e == 0) {
        const float v = __fmul_rn((float)m, 0x1p-24f);
        return sign ? -v : v;
    }
    return bits_f(sign | (e - 15 + 127) << 23 | m << 13);
}

__device__ __forceinline__ float scale_at(const uint8_t *s, int dtype, int64_t i)
{
    if (dtype == GGUF_ST_F32) {
        const uint8_t *p = s + 4 * i;
        return bits_f((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                      (uint32_t)p[3] << 24);
    }
    const uint16_t h = (uint16_t)(s[2 * i] | s[2 * i + 1] << 8);
    return dtype == GGUF_ST_BF16 ? bits_f((uint32_t)h << 16) : half_bits(h);
}

struct fp8_args {
    const uint8_t *q, *s;
    float *dst;
    int64_t n, cols, row0, mat_rows, scale_rows, scale_cols, block_rows, block_cols;
    int e5m2, scale_dtype, one_scale;
};

__global__ void fp8_kernel(fp8_args a)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < a.n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = a.row0 + i / a.cols, c = i % a.cols;
        int64_t si = 0;
        if (!a.one_scale) {
            const int64_t b = r / a.mat_rows, rr = r % a.mat_rows;
            si = (b * a.scale_rows + rr / a.block_rows) * a.scale_cols + c / a.block_cols;
        }
        const uint8_t x = a.q[i];
        const float v = a.e5m2 ? half_bits((uint16_t)(x << 8)) : e4m3(x);
        a.dst[i] = canon(__fmul_rn(v, scale_at(a.s, a.scale_dtype, si)));
    }
}

struct fp4_args {
    const uint8_t *q, *s;
    float *dst;
    int64_t n, cols, row0;
    float global;
    int ct;
};

__global__ void nvfp4_kernel(fp4_args a)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < a.n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t lr = i / a.cols, c = i % a.cols, r = a.row0 + lr;
        const uint8_t byte = a.q[lr * (a.cols / 2) + c / 2];
        const uint8_t nib = c & 1 ? byte >> 4 : byte & 15;
        const float f8 = e4m3(a.s[r * (a.cols / 16) + c / 16]);
        const float b = a.ct ? __fdiv_rn(f8, a.global) : __fmul_rn(f8, a.global);
        const float mag = k_e2m1[nib & 7];
        const float e = nib & 8 ? -mag : mag;
        a.dst[i] = canon(__fmul_rn(e, b));
    }
}

int check_dev(const void *p, const char *what, gguf_error *err)
{
    cudaPointerAttributes at;
    const cudaError_t e = cudaPointerGetAttributes(&at, p);
    if (e != cudaSuccess)
        return gguf_cuda_fail(err, e, "cudaPointerGetAttributes");
    if (at.type == cudaMemoryTypeDevice || at.type == cudaMemoryTypeManaged ||
        (at.type == cudaMemoryTypeHost && at.devicePointer != NULL))
        return GGUF_OK;
    return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "cuda: st dequant: %s %p is not device memory",
                     what, p);
}

unsigned grid_for(int64_t n)
{
    const int64_t g = (n + 255) / 256;
    return (unsigned)(g < 65535 ? (g > 0 ? g : 1) : 65535);
}

} // namespace

int gguf_cuda_st_dequant_rows(const gguf_st_weight *w, const void *data, const void *scale,
                              int64_t row0, int64_t n_rows, float *dst, gguf_cuda_stream *stream,
                              gguf_error *err)
{
    if (!w || !w->data || !data || !dst || row0 < 0 || n_rows < 0 || row0 > w->rows ||
        n_rows > w->rows - row0)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "cuda: st dequant: %s: NULL or rows outside the weight",
                         w && w->name ? w->name : "NULL");
    const int64_t n = n_rows * w->cols;
    if (n == 0)
        return GGUF_OK;
    if (w->format == GGUF_ST_FMT_PLAIN) {
        const uint32_t t = w->data->dtype == GGUF_ST_F32    ? GGUF_TYPE_F32
                           : w->data->dtype == GGUF_ST_F16  ? GGUF_TYPE_F16
                           : w->data->dtype == GGUF_ST_BF16 ? GGUF_TYPE_BF16
                                                            : GGUF_TYPE_COUNT;
        if (t == GGUF_TYPE_COUNT)
            return gguf_fail(err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                             "cuda: st dequant: %s: plain %s is not handled on the GPU", w->name,
                             gguf_st_dtype_name(w->data->dtype));
        return gguf_cuda_dequant(t, data, dst, n, stream, err);
    }
    if (!scale || !w->scale)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "cuda: st dequant: %s: no scale",
                         w->name);
    int rc;
    if ((rc = check_dev(data, "data", err)) || (rc = check_dev(scale, "scale", err)) ||
        (rc = check_dev(dst, "dst", err)))
        return rc;
    cudaStream_t s = (cudaStream_t)stream;
    if (w->format == GGUF_ST_FMT_FP8_SCALED) {
        fp8_args a;
        a.q = (const uint8_t *)data;
        a.s = (const uint8_t *)scale;
        a.dst = dst;
        a.n = n;
        a.cols = w->cols;
        a.row0 = row0;
        a.mat_rows = w->mat_rows > 0 ? w->mat_rows : 1;
        a.scale_rows = w->scale_rows;
        a.scale_cols = w->scale_cols;
        a.block_rows = w->block_rows;
        a.block_cols = w->block_cols;
        a.e5m2 = w->data->dtype == GGUF_ST_F8_E5M2;
        a.scale_dtype = (int)w->scale->dtype;
        a.one_scale = w->scale->n_elements == 1;
        fp8_kernel<<<grid_for(n), 256, 0, s>>>(a);
    } else {
        fp4_args a;
        a.q = (const uint8_t *)data;
        a.s = (const uint8_t *)scale;
        a.dst = dst;
        a.n = n;
        a.cols = w->cols;
        a.row0 = row0;
        a.global = w->global;
        a.ct = w->format == GGUF_ST_FMT_NVFP4_CT;
        nvfp4_kernel<<<grid_for(n), 256, 0, s>>>(a);
    }
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? GGUF_OK : gguf_cuda_fail(err, e, "st dequant launch");
}
