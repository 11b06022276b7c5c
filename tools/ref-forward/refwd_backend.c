/* ref-forward: the CPU and CUDA forward contexts (refwd_backend.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "refwd_backend.h"

#if defined(GGUFKIT_HAVE_CUDA)
#include "ggufkit_cuda/cuda_device.h"
#include "ggufkit_cuda/forward_cuda.h"
#endif

int refwd_backend_parse(const char *s, refwd_backend *out)
{
    if (strcmp(s, "cpu") == 0)
        *out = REFWD_CPU;
    else if (strcmp(s, "cuda") == 0)
        *out = REFWD_CUDA;
    else
        return -1;
    return 0;
}

const char *refwd_backend_name(refwd_backend b)
{
    return b == REFWD_CUDA ? "cuda" : "cpu";
}

#if !defined(GGUFKIT_HAVE_CUDA)
static int no_cuda(gguf_error *err)
{
    return gguf_error_setf(err, GGUF_E_IO, ENODEV,
                           "--backend cuda: this ref-forward was built without CUDA (no nvcc at "
                           "build time)");
}
#endif

int refwd_backend_probe(refwd_backend b, gguf_error *err)
{
    if (b == REFWD_CPU)
        return 0;
#if defined(GGUFKIT_HAVE_CUDA)
    int n = 0;
    int rc = gguf_cuda_device_count(&n, err);
    if (rc && gguf_cuda_no_device(err)) {
        char why[400];
        snprintf(why, sizeof why, "%.399s", err->message);
        gguf_error_setf(err, rc, err->sys_errno,
                        "--backend cuda: no usable GPU on this machine (%s); run without "
                        "--backend cuda for the CPU reference",
                        why);
    }
    return rc;
#else
    return no_cuda(err);
#endif
}

int refwd_ctx_create(gguf_fwd_ctx **out, refwd_backend b, const gguf_model *m,
                     const gguf_fwd_opts *fo, const refwd_gpu_opts *g, gguf_error *err)
{
    *out = NULL;
    if (b == REFWD_CPU)
        return gguf_fwd_ctx_create(out, m, fo, err);
#if defined(GGUFKIT_HAVE_CUDA)
    gguf_cuda_fwd_opts co = {0};
    if (g) {
        co.host_register = g->host_register;
        co.mem_limit = g->mem_limit;
    }
    return gguf_cuda_fwd_ctx_create(out, m, fo, &co, err);
#else
    (void)g;
    return no_cuda(err);
#endif
}

void refwd_print_xfer(const gguf_fwd_ctx *ctx, FILE *out)
{
#if defined(GGUFKIT_HAVE_CUDA)
    const gguf_cuda_fwd *gpu = gguf_cuda_fwd_of(ctx);
    if (!gpu)
        return;
    gguf_fwd_stats st;
    gguf_cuda_fwd_xfer xf;
    gguf_cuda_fwd_stats(gpu, &st, &xf);
    fprintf(out,
            "gpu: %.2f GB of quantized weights to the GPU in %llu chunks, %.2f GB/s over the "
            "eval; %.2f GB read in place from the registered mapping (%.0f MiB registered "
            "in %.2f s), the rest gathered by the host (%.2f s); %.0f MiB of device memory "
            "held\n",
            (double)xf.h2d_bytes / 1e9, (unsigned long long)xf.chunks,
            xf.stream_seconds > 0 ? (double)xf.h2d_bytes / xf.stream_seconds / 1e9 : 0.0,
            (double)xf.direct_bytes / 1e9, (double)xf.registered_bytes / 1048576.0,
            xf.register_seconds, xf.host_copy_seconds, (double)xf.device_bytes / 1048576.0);
#else
    (void)ctx;
    (void)out;
#endif
}
