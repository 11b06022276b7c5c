/* cuBLAS and NCCL loaded on first use; see fwd_dl.h for why. */
#include "cuda_internal.h"

#include <cublas_v2.h>
#if defined(GGUFKIT_HAVE_NCCL)
#include <nccl.h>
#endif
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "fwd_dl.h"

#define FWD_STR2(x) #x
#define FWD_STR(x) FWD_STR2(x)

typedef struct fwd_lib {
    pthread_once_t once;
    bool ok;
    char why[512];
} fwd_lib;

/* Open the first library of names[] that loads; fill the n symbols. */
static bool fwd_open(const char *const *names, const char *const *syms, void **out, int n,
                     char *why, size_t why_size)
{
    void *h = NULL;
    const char *tried = names[0];
    for (int i = 0; names[i] && !h; i++) {
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!h && i == 0)
            snprintf(why, why_size, "cannot load %s: %s", names[0], dlerror());
    }
    if (!h)
        return false;
    for (int i = 0; i < n; i++) {
        out[i] = dlsym(h, syms[i]);
        if (!out[i]) {
            snprintf(why, why_size, "%s has no %s", tried, syms[i]);
            return false; /* the handle stays open: harmless, and nothing else holds it */
        }
    }
    return true;
}

static int fwd_fail(gguf_error *err, const char *why)
{
    gguf_fail(err, GGUF_E_IO, GGUF_NO_OFFSET, "cuda: %s", why);
    if (err)
        err->sys_errno = ENOENT;
    return GGUF_E_IO;
}

/* ---- cuBLAS ---- */

static fwd_blas_api fwd_blas_table;
static fwd_lib fwd_blas_lib = {PTHREAD_ONCE_INIT, false, ""};

static void fwd_blas_init(void)
{
    static const char *const names[] = {"libcublas.so." FWD_STR(CUBLAS_VER_MAJOR), "libcublas.so",
                                        NULL};
    static const char *const syms[] = {"cublasCreate_v2",      "cublasDestroy_v2",
                                       "cublasSetStream_v2",   "cublasSetMathMode",
                                       "cublasSetAtomicsMode", "cublasSgemm_v2",
                                       "cublasSgemmStridedBatched"};
    void *p[7];
    if (!fwd_open(names, syms, p, 7, fwd_blas_lib.why, sizeof fwd_blas_lib.why))
        return;
    memcpy(&fwd_blas_table.create, &p[0], sizeof p[0]);
    memcpy(&fwd_blas_table.destroy, &p[1], sizeof p[1]);
    memcpy(&fwd_blas_table.set_stream, &p[2], sizeof p[2]);
    memcpy(&fwd_blas_table.set_math_mode, &p[3], sizeof p[3]);
    memcpy(&fwd_blas_table.set_atomics_mode, &p[4], sizeof p[4]);
    memcpy(&fwd_blas_table.sgemm, &p[5], sizeof p[5]);
    memcpy(&fwd_blas_table.sgemm_strided_batched, &p[6], sizeof p[6]);
    fwd_blas_lib.ok = true;
}

int fwd_blas_load(gguf_error *err)
{
    pthread_once(&fwd_blas_lib.once, fwd_blas_init);
    return fwd_blas_lib.ok ? 0 : fwd_fail(err, fwd_blas_lib.why);
}

const fwd_blas_api *fwd_blas_api_get(void)
{
    return &fwd_blas_table;
}

/* ---- NCCL ---- */

#if defined(GGUFKIT_HAVE_NCCL)
static fwd_nccl_api fwd_nccl_table;
static fwd_lib fwd_nccl_lib = {PTHREAD_ONCE_INIT, false, ""};

static void fwd_nccl_init(void)
{
    static const char *const names[] = {"libnccl.so." FWD_STR(NCCL_MAJOR), "libnccl.so", NULL};
    static const char *const syms[] = {"ncclGetUniqueId",    "ncclCommInitRankConfig",
                                       "ncclCommGetAsyncError", "ncclCommAbort",
                                       "ncclCommFinalize",   "ncclCommDestroy",
                                       "ncclAllReduce",      "ncclAllGather",
                                       "ncclGetErrorString"};
    void *p[9];
    if (!fwd_open(names, syms, p, 9, fwd_nccl_lib.why, sizeof fwd_nccl_lib.why))
        return;
    memcpy(&fwd_nccl_table.get_unique_id, &p[0], sizeof p[0]);
    memcpy(&fwd_nccl_table.comm_init_rank_config, &p[1], sizeof p[1]);
    memcpy(&fwd_nccl_table.comm_get_async_error, &p[2], sizeof p[2]);
    memcpy(&fwd_nccl_table.comm_abort, &p[3], sizeof p[3]);
    memcpy(&fwd_nccl_table.comm_finalize, &p[4], sizeof p[4]);
    memcpy(&fwd_nccl_table.comm_destroy, &p[5], sizeof p[5]);
    memcpy(&fwd_nccl_table.all_reduce, &p[6], sizeof p[6]);
    memcpy(&fwd_nccl_table.all_gather, &p[7], sizeof p[7]);
    memcpy(&fwd_nccl_table.get_error_string, &p[8], sizeof p[8]);
    fwd_nccl_lib.ok = true;
}

int fwd_nccl_load(gguf_error *err)
{
    pthread_once(&fwd_nccl_lib.once, fwd_nccl_init);
    return fwd_nccl_lib.ok ? 0 : fwd_fail(err, fwd_nccl_lib.why);
}

const fwd_nccl_api *fwd_nccl_api_get(void)
{
    return &fwd_nccl_table;
}
#else
int fwd_nccl_load(gguf_error *err)
{
    return fwd_fail(err, "this build has no NCCL (nccl.h not found by CMake)");
}
#endif
