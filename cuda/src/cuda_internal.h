/* Internal helpers shared by the .cu files of ggufkit_cuda. Not installed. */
#ifndef GGUFKIT_CUDA_INTERNAL_H
#define GGUFKIT_CUDA_INTERNAL_H

#include <cuda_runtime.h>

extern "C" {
#include "util/error_lib.h"
}

/* Map a CUDA runtime error to a gguf_status and fill err:
 * no device / no driver -> GGUF_E_IO + ENODEV, out of memory -> GGUF_E_NOMEM,
 * anything else -> GGUF_E_IO + EIO. `what` names the call. Clears CUDA's
 * last (non-sticky) error so later calls do not see it again. */
int gguf_cuda_fail(gguf_error *err, cudaError_t e, const char *what);

/* Evaluate a CUDA call; on failure return the mapped status from the
 * enclosing function. */
#define GC_TRY(err, call)                                                                     \
    do {                                                                                      \
        const cudaError_t gc_e_ = (call);                                                     \
        if (gc_e_ != cudaSuccess)                                                             \
            return gguf_cuda_fail((err), gc_e_, #call);                                       \
    } while (0)

/* The same in a function that owns resources: sets its `rc` and jumps to its
 * `done:` cleanup instead of returning past it. */
#define GC_GOTO(err, call)                                                                    \
    do {                                                                                      \
        const cudaError_t gc_e_ = (call);                                                     \
        if (gc_e_ != cudaSuccess) {                                                           \
            rc = gguf_cuda_fail((err), gc_e_, #call);                                         \
            goto done;                                                                        \
        }                                                                                     \
    } while (0)

#endif
