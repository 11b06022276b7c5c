/* cuBLAS and NCCL loaded on first use (dlopen), not linked: a tool that
 * links ggufkit_cuda maps neither library unless it runs a GPU forward, so
 * the CPU paths keep their small address space (ref-forward runs under
 * ulimit -v in tests/integration/test_ref_forward_memory.sh, and cuBLASLt
 * alone maps hundreds of MB) and run where the libraries are absent.
 *
 * Include this after <cublas_v2.h> / <nccl.h>: the API names used by
 * fwd_*.cu become calls through a table filled once per process
 * (pthread_once; immutable afterwards). Call fwd_blas_load() /
 * fwd_nccl_load() before the first use; they fail cleanly (GGUF_E_IO,
 * ENOENT, the library named) when the library cannot be loaded. Not
 * installed. */
#ifndef GGUFKIT_FWD_DL_H
#define GGUFKIT_FWD_DL_H

#include "gguf/error.h"

#if defined(CUBLAS_V2_H_)
typedef struct fwd_blas_api {
    decltype(&cublasCreate_v2) create;
    decltype(&cublasDestroy_v2) destroy;
    decltype(&cublasSetStream_v2) set_stream;
    decltype(&cublasSetMathMode) set_math_mode;
    decltype(&cublasSetAtomicsMode) set_atomics_mode;
    decltype(&cublasSgemm_v2) sgemm;
    decltype(&cublasSgemmStridedBatched) sgemm_strided_batched;
} fwd_blas_api;
const fwd_blas_api *fwd_blas_api_get(void);
#undef cublasCreate
#undef cublasDestroy
#undef cublasSetStream
#undef cublasSgemm
#define cublasCreate (fwd_blas_api_get()->create)
#define cublasDestroy (fwd_blas_api_get()->destroy)
#define cublasSetStream (fwd_blas_api_get()->set_stream)
#define cublasSetMathMode (fwd_blas_api_get()->set_math_mode)
#define cublasSetAtomicsMode (fwd_blas_api_get()->set_atomics_mode)
#define cublasSgemm (fwd_blas_api_get()->sgemm)
#define cublasSgemmStridedBatched (fwd_blas_api_get()->sgemm_strided_batched)
#endif

#if defined(NCCL_H_)
typedef struct fwd_nccl_api {
    decltype(&ncclGetUniqueId) get_unique_id;
    decltype(&ncclCommInitRankConfig) comm_init_rank_config;
    decltype(&ncclCommGetAsyncError) comm_get_async_error;
    decltype(&ncclCommAbort) comm_abort;
    decltype(&ncclCommFinalize) comm_finalize;
    decltype(&ncclCommDestroy) comm_destroy;
    decltype(&ncclAllReduce) all_reduce;
    decltype(&ncclAllGather) all_gather;
    decltype(&ncclGetErrorString) get_error_string;
} fwd_nccl_api;
const fwd_nccl_api *fwd_nccl_api_get(void);
#define ncclGetUniqueId (fwd_nccl_api_get()->get_unique_id)
#define ncclCommInitRankConfig (fwd_nccl_api_get()->comm_init_rank_config)
#define ncclCommGetAsyncError (fwd_nccl_api_get()->comm_get_async_error)
#define ncclCommAbort (fwd_nccl_api_get()->comm_abort)
#define ncclCommFinalize (fwd_nccl_api_get()->comm_finalize)
#define ncclCommDestroy (fwd_nccl_api_get()->comm_destroy)
#define ncclAllReduce (fwd_nccl_api_get()->all_reduce)
#define ncclAllGather (fwd_nccl_api_get()->all_gather)
#define ncclGetErrorString (fwd_nccl_api_get()->get_error_string)
#endif

/* 0 once the library and every symbol above are loaded; else GGUF_E_IO
 * (sys_errno ENOENT) naming the library and dlerror()'s reason. */
int fwd_blas_load(gguf_error *err);
int fwd_nccl_load(gguf_error *err);

#endif
