/*
 * ggufkit_cuda/cuda_device.h - the GPU as seen from C: devices, device memory,
 * streams and events, behind a C API with no CUDA types in it.
 *
 * Built only where nvcc exists (target ggufkit_cuda; users see
 * GGUFKIT_HAVE_CUDA=1). Every function returns 0 or a negative gguf_status
 * (gguf/error.h) and fills the optional gguf_error:
 *
 *   GGUF_E_IO      with sys_errno ENODEV: no usable CUDA device or driver
 *                  (tools exit 3, tests skip with 77); test it with
 *                  gguf_cuda_no_device();
 *   GGUF_E_IO      with sys_errno EIO: any other CUDA runtime failure (the
 *                  message names the call and CUDA's error name);
 *   GGUF_E_NOMEM   device memory exhausted;
 *   GGUF_E_INVALID a bad argument (NULL, negative size, host memory where
 *                  device memory is needed).
 *
 * Streams: a gguf_cuda_stream is CUDA's stream under an opaque name; NULL
 * means the default stream. Work queued on a stream runs in order; functions
 * named *_async return once the work is queued, and errors raised while it
 * runs are reported by the next gguf_cuda_stream_sync().
 *
 * The library keeps no state of its own: the current device is CUDA's
 * (per host thread), as with the CUDA runtime itself.
 */
#ifndef GGUFKIT_CUDA_DEVICE_H
#define GGUFKIT_CUDA_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gguf_cuda_stream gguf_cuda_stream; /* a cudaStream_t */
typedef struct gguf_cuda_event gguf_cuda_event;   /* a cudaEvent_t */

typedef struct gguf_cuda_device_info {
    char name[256];            /* e.g. "NVIDIA H200" */
    int cc_major, cc_minor;    /* compute capability, e.g. 9.0 */
    int sm_count;              /* multiprocessors */
    uint64_t total_mem;        /* bytes of device memory */
    uint64_t l2_bytes;         /* L2 cache size */
    int mem_bus_bits;          /* memory bus width */
    int mem_clock_khz;         /* memory clock (0 where the runtime no longer says) */
    int driver_version;        /* e.g. 13000 */
    int runtime_version;       /* the CUDA runtime linked in */
} gguf_cuda_device_info;

/* True when err says "no usable CUDA device or driver" (GGUF_E_IO, ENODEV). */
bool gguf_cuda_no_device(const gguf_error *err);

/*
 * Number of CUDA devices into *count.
 * @return 0 (count >= 1); GGUF_E_IO/ENODEV when there is no device or no
 *         driver (count is then 0); GGUF_E_IO/EIO on other failures.
 */
int gguf_cuda_device_count(int *count, gguf_error *err);

/* Properties of device `device`. @return 0; GGUF_E_INVALID for a bad index;
 * errors as gguf_cuda_device_count. */
int gguf_cuda_device_info_get(int device, gguf_cuda_device_info *out, gguf_error *err);

/* Make `device` current for this host thread. */
int gguf_cuda_set_device(int device, gguf_error *err);

/* Wait for all work on the current device; reports errors of earlier work. */
int gguf_cuda_device_sync(gguf_error *err);

/* ---- memory ---- */

/* Device memory of `bytes` bytes (256-byte aligned) into *out; bytes == 0
 * gives NULL. Free with gguf_cuda_free. @return 0; GGUF_E_NOMEM. */
int gguf_cuda_malloc(void **out, size_t bytes, gguf_error *err);

/* Free device memory. Accepts NULL. */
void gguf_cuda_free(void *p);

/* Copy n bytes between any two of host and device memory (the direction is
 * found from the pointers) and wait for it. */
int gguf_cuda_memcpy(void *dst, const void *src, size_t n, gguf_error *err);

/* Same, queued on a stream (host memory should be pinned to overlap). */
int gguf_cuda_memcpy_async(void *dst, const void *src, size_t n, gguf_cuda_stream *stream,
                           gguf_error *err);

/* Set n bytes of device memory to the byte `value`, queued on a stream. */
int gguf_cuda_memset_async(void *dst, int value, size_t n, gguf_cuda_stream *stream,
                           gguf_error *err);

/* ---- streams and events ---- */

/* A new non-blocking stream on the current device. Free with
 * gguf_cuda_stream_free (accepts NULL). */
int gguf_cuda_stream_create(gguf_cuda_stream **out, gguf_error *err);
void gguf_cuda_stream_free(gguf_cuda_stream *stream);

/* Wait until everything queued on the stream (NULL: the default stream) has
 * run; returns the first error raised by that work. */
int gguf_cuda_stream_sync(gguf_cuda_stream *stream, gguf_error *err);

/* Timing events (with timing enabled). Free accepts NULL. */
int gguf_cuda_event_create(gguf_cuda_event **out, gguf_error *err);
void gguf_cuda_event_free(gguf_cuda_event *ev);
int gguf_cuda_event_record(gguf_cuda_event *ev, gguf_cuda_stream *stream, gguf_error *err);

/* Milliseconds between two recorded events; waits for `end`. */
int gguf_cuda_event_elapsed_ms(float *ms, gguf_cuda_event *start, gguf_cuda_event *end,
                               gguf_error *err);

#ifdef __cplusplus
}
#endif
#endif /* GGUFKIT_CUDA_DEVICE_H */
