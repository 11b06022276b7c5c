/*
 * ggufkit_cuda/forward_cuda_tp.h - one rank of the tensor-parallel forward
 * pass on a GPU, over NCCL.
 *
 * Rank r computes exactly what the CPU's virtual tensor parallel
 * (gguf_fwd_tp_create, libgguf/src/forward/forward_exec.c) computes for rank r: the
 * weights are the plan's slices for r (gguf_shard_materialize: every piece
 * dequantized, transposed and placed as the plan says, injected faults
 * included), the shapes come from those slices, the engine settings from
 * the plan's runtime; the CPU's simulated collectives become NCCL ones on
 * the communicator (all-reduce after the row-parallel ops where the plan
 * says reduce_sum, the vocab-parallel embedding and the expert combination;
 * all-gather of the vocab-parallel logits). Captures carry the rank, so the
 * records of rank r compare point by point with the CPU's rank r.
 *
 * One process per rank, each with its own communicator (nccl_comm.h) whose
 * device the rank uses; every rank must make the same calls in the same
 * order. Compute is f32 (GGUF_FWD_F64 and absorbed MLA are refused with
 * GGUF_E_UNSUPPORTED); the glm-dsa indexer runs dense only, as in
 * forward_cuda.h. A rank's slices are built on its GPU per op from the
 * streamed quantized rows (the plan's pieces placed by device copies; only
 * the routed experts of an expert tensor) and freed after.
 *
 * Errors: those of forward_cuda.h and nccl_comm.h (a dead peer: GGUF_E_IO
 * within the communicator's deadline); GGUF_E_INVALID when the plan was not
 * built for this model or the rank is not the communicator's.
 */
#ifndef GGUFKIT_CUDA_FORWARD_CUDA_TP_H
#define GGUFKIT_CUDA_FORWARD_CUDA_TP_H

#include <stdint.h>

#include "gguf/error.h"
#include "gguf/forward.h"
#include "gguf/model.h"
#include "gguf/shard.h"
#include "ggufkit_cuda/forward_cuda.h"
#include "ggufkit_cuda/nccl_comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gguf_cuda_tp gguf_cuda_tp;

/* Rank gguf_nccl_comm_rank(comm) of the plan on the communicator's device.
 * plan, model and comm must outlive the context. copts (may be NULL): as for
 * one GPU (ggufkit_cuda/forward_cuda.h), but the device is the communicator's;
 * chunk_bytes, n_copy_threads (0: the host's cores shared among the ranks)
 * and host_register apply. */
int gguf_cuda_tp_create(gguf_cuda_tp **out, const gguf_model *m, const gguf_shard_plan *plan,
                        gguf_nccl_comm *comm, const gguf_fwd_opts *opts,
                        const gguf_cuda_fwd_opts *copts, gguf_error *err);
void gguf_cuda_tp_free(gguf_cuda_tp *c);
/* The same rank behind the interface of gguf/forward.h (backend "cuda-nccl"). */
int gguf_cuda_tp_ctx_create(gguf_fwd_ctx **out, const gguf_model *m, const gguf_shard_plan *plan,
                            gguf_nccl_comm *comm, const gguf_fwd_opts *opts,
                            const gguf_cuda_fwd_opts *copts, gguf_error *err);

/* As gguf_fwd_eval; logits (may be NULL) receives the gathered logits, the
 * same on every rank. */
int gguf_cuda_tp_eval(gguf_cuda_tp *c, const int32_t *tokens, int64_t n, float *logits,
                      gguf_error *err);

#ifdef __cplusplus
}
#endif
#endif /* GGUFKIT_CUDA_FORWARD_CUDA_TP_H */
