/*
 * Devices, memory, streams and events: thin checked wrappers over the CUDA
 * runtime, so that C callers (tools, tests, benchmarks) see no CUDA types and
 * get gguf_status codes.
 */
#include "cuda_internal.h"

#include "ggufkit_cuda/cuda_device.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int gguf_cuda_fail(gguf_error *err, cudaError_t e, const char *what)
{
    (void)cudaGetLastError(); /* clear a non-sticky error */
    const char *name = cudaGetErrorName(e), *text = cudaGetErrorString(e);
    int code = GGUF_E_IO, sys = EIO;
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
        e == cudaErrorDevicesUnavailable || e == cudaErrorSystemDriverMismatch ||
        e == cudaErrorCompatNotSupportedOnDevice || e == cudaErrorNoKernelImageForDevice)
        sys = ENODEV;
    else if (e == cudaErrorMemoryAllocation)
        code = GGUF_E_NOMEM, sys = 0;
    if (sys == ENODEV)
        gguf_fail(err, code, GGUF_NO_OFFSET, "cuda: no usable CUDA device: %s (%s)", text, name);
    else
        gguf_fail(err, code, GGUF_NO_OFFSET, "cuda: %s: %s (%s)", what, text, name);
    if (err)
        err->sys_errno = sys;
    return code;
}

bool gguf_cuda_no_device(const gguf_error *err)
{
    return err && err->code == GGUF_E_IO && err->sys_errno == ENODEV;
}

int gguf_cuda_device_count(int *count, gguf_error *err)
{
    if (!count)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "cuda: device_count: NULL count");
    *count = 0;
    int n = 0;
    GC_TRY(err, cudaGetDeviceCount(&n));
    if (n <= 0)
        return gguf_cuda_fail(err, cudaErrorNoDevice, "cudaGetDeviceCount");
    *count = n;
    return GGUF_OK;
}

int gguf_cuda_device_info_get(int device, gguf_cuda_device_info *out, gguf_error *err)
{
    int n;
    int rc = gguf_cuda_device_count(&n, err);
    if (rc)
        return rc;
    if (!out || device < 0 || device >= n)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "cuda: device %d of %d", device, n);
    cudaDeviceProp p;
    GC_TRY(err, cudaGetDeviceProperties(&p, device));
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%.255s", p.name);
    out->cc_major = p.major;
    out->cc_minor = p.minor;
    out->sm_count = p.multiProcessorCount;
    out->total_mem = p.totalGlobalMem;
    out->l2_bytes = (uint64_t)p.l2CacheSize;
    out->mem_bus_bits = p.memoryBusWidth;
    int clk = 0;
    if (cudaDeviceGetAttribute(&clk, cudaDevAttrMemoryClockRate, device) != cudaSuccess)
        (void)cudaGetLastError(), clk = 0;
    out->mem_clock_khz = clk;
    GC_TRY(err, cudaDriverGetVersion(&out->driver_version));
    GC_TRY(err, cudaRuntimeGetVersion(&out->runtime_version));
    return GGUF_OK;
}

int gguf_cuda_set_device(int device, gguf_error *err)
{
    GC_TRY(err, cudaSetDevice(device));
    return GGUF_OK;
}

int gguf_cuda_device_sync(gguf_error *err)
{
    GC_TRY(err, cudaDeviceSynchronize());
    return GGUF_OK;
}

int gguf_cuda_malloc(void **out, size_t bytes, gguf_error *err)
{
    if (!out)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "cuda: malloc: NULL out");
    *out = NULL;
    if (bytes == 0)
        return GGUF_OK;
    void *p = NULL;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        const int rc = gguf_cuda_fail(err, e, "cudaMalloc");
        if (rc == GGUF_E_NOMEM)
            gguf_error_setf(err, rc, 0, "cuda: out of device memory allocating %zu bytes", bytes);
        return rc;
    }
    *out = p;
    return GGUF_OK;
}

void gguf_cuda_free(void *p)
{
    if (p && cudaFree(p) != cudaSuccess)
        (void)cudaGetLastError();
}

int gguf_cuda_memcpy(void *dst, const void *src, size_t n, gguf_error *err)
{
    if (n && (!dst || !src))
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "cuda: memcpy: NULL buffer");
    if (n)
        GC_TRY(err, cudaMemcpy(dst, src, n, cudaMemcpyDefault));
    return GGUF_OK;
}

int gguf_cuda_memcpy_async(void *dst, const void *src, size_t n, gguf_cuda_stream *stream,
                           gguf_error *err)
{
    if (n && (!dst || !src))
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "cuda: memcpy: NULL buffer");
    if (n)
        GC_TRY(err, cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, (cudaStream_t)stream));
    return GGUF_OK;
}

int gguf_cuda_memset_async(void *dst, int value, size_t n, gguf_cuda_stream *stream,
                           gguf_error *err)
{
    if (n && !dst)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "cuda: memset: NULL buffer");
    if (n)
        GC_TRY(err, cudaMemsetAsync(dst, value, n, (cudaStream_t)stream));
    return GGUF_OK;
}

int gguf_cuda_stream_create(gguf_cuda_stream **out, gguf_error *err)
{
    if (!out)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "cuda: stream: NULL out");
    *out = NULL;
    cudaStream_t s;
    GC_TRY(err, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    *out = (gguf_cuda_stream *)s;
    return GGUF_OK;
}

void gguf_cuda_stream_free(gguf_cuda_stream *stream)
{
    if (stream && cudaStreamDestroy((cudaStream_t)stream) != cudaSuccess)
        (void)cudaGetLastError();
}

int gguf_cuda_stream_sync(gguf_cuda_stream *stream, gguf_error *err)
{
    GC_TRY(err, cudaStreamSynchronize((cudaStream_t)stream));
    GC_TRY(err, cudaGetLastError());
    return GGUF_OK;
}

int gguf_cuda_event_create(gguf_cuda_event **out, gguf_error *err)
{
    if (!out)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "cuda: event: NULL out");
    *out = NULL;
    cudaEvent_t e;
    GC_TRY(err, cudaEventCreate(&e));
    *out = (gguf_cuda_event *)e;
    return GGUF_OK;
}

void gguf_cuda_event_free(gguf_cuda_event *ev)
{
    if (ev && cudaEventDestroy((cudaEvent_t)ev) != cudaSuccess)
        (void)cudaGetLastError();
}

int gguf_cuda_event_record(gguf_cuda_event *ev, gguf_cuda_stream *stream, gguf_error *err)
{
    if (!ev)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "cuda: event: NULL event");
    GC_TRY(err, cudaEventRecord((cudaEvent_t)ev, (cudaStream_t)stream));
    return GGUF_OK;
}

int gguf_cuda_event_elapsed_ms(float *ms, gguf_cuda_event *start, gguf_cuda_event *end,
                               gguf_error *err)
{
    if (!ms || !start || !end)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "cuda: elapsed: NULL argument");
    GC_TRY(err, cudaEventSynchronize((cudaEvent_t)end));
    GC_TRY(err, cudaEventElapsedTime(ms, (cudaEvent_t)start, (cudaEvent_t)end));
    return GGUF_OK;
}
