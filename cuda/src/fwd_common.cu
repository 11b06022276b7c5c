/* Host helpers shared by the GPU forward backends: see fwd_common.h. */
#include "cuda_internal.h"

#include <errno.h>
#include <stdlib.h>

#include "fwd_common.h"
#include "fwd_dl.h"

int fwd_blas_fail(gguf_error *err, cublasStatus_t s, const char *what)
{
    if (s == CUBLAS_STATUS_ALLOC_FAILED)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "cuda: %s: out of device memory",
                         what);
    int rc = gguf_fail(err, GGUF_E_IO, GGUF_NO_OFFSET, "cuda: %s: cuBLAS status %d", what,
                       (int)s);
    if (err)
        err->sys_errno = s == CUBLAS_STATUS_NOT_INITIALIZED ? ENODEV : EIO;
    return rc;
}

int fwd_blas_reference(cublasHandle_t *out, cudaStream_t s, gguf_error *err)
{
    *out = NULL;
    int rc = fwd_blas_load(err);
    if (rc)
        return rc;
    cublasHandle_t h = NULL;
    cublasStatus_t bs = cublasCreate(&h);
    if (bs == CUBLAS_STATUS_SUCCESS)
        bs = cublasSetStream(h, s);
    if (bs == CUBLAS_STATUS_SUCCESS)
        bs = cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH);
    if (bs == CUBLAS_STATUS_SUCCESS)
        bs = cublasSetAtomicsMode(h, CUBLAS_ATOMICS_NOT_ALLOWED);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        if (h)
            cublasDestroy(h);
        return fwd_blas_fail(err, bs, "cuBLAS set-up");
    }
    *out = h;
    return 0;
}

int fwd_rope_table(const fw_rope *r, int64_t pos0, int64_t n, cudaMemPool_t pool,
                   cudaStream_t s, double **out, gguf_error *err)
{
    *out = NULL;
    const int64_t half = r->n_rot / 2;
    const bool hp = r->type == GGUF_ROPE_HALF;
    const size_t nd = (size_t)(n * (half > 0 ? half : 1) * 2);
    double *h = (double *)calloc(nd, sizeof(double));
    double *x = (double *)calloc((size_t)(r->n_rot + 2), sizeof(double));
    if (!h || !x) {
        free(h);
        free(x);
        return fw_nomem(err, "RoPE table");
    }
    /* rotate the unit vector of every pair: the result is (cos, sin) */
    for (int64_t t = 0; t < n; t++) {
        for (int64_t k = 0; k < half; k++) {
            x[hp ? k : 2 * k] = 1.0;
            x[hp ? k + half : 2 * k + 1] = 0.0;
        }
        fw_rope_apply(r, x, pos0 + t, GGUF_FWD_F64);
        for (int64_t k = 0; k < half; k++) {
            h[(t * half + k) * 2] = x[hp ? k : 2 * k];
            h[(t * half + k) * 2 + 1] = x[hp ? k + half : 2 * k + 1];
        }
    }
    free(x);
    cudaError_t e = cudaMallocFromPoolAsync((void **)out, nd * sizeof(double), pool, s);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(*out, h, nd * sizeof(double), cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(s); /* h is freed next */
    free(h);
    if (e != cudaSuccess) {
        if (*out)
            (void)cudaFreeAsync(*out, s);
        *out = NULL;
        return gguf_cuda_fail(err, e, "RoPE table");
    }
    return 0;
}
