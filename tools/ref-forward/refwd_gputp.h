/* ref-forward --backend cuda --tp N: tensor parallel on N GPUs of this host
 * over NCCL, one process per GPU, compared with the single-GPU run.
 *
 * The tool re-executes itself once per rank (GGUFKIT_RANK, GGUFKIT_WORLD,
 * GGUFKIT_RDV, GGUFKIT_RANK_RECORD in the environment); each rank writes its
 * captures to its own record; the launcher merges them into one record with
 * the rank of each (backend "cuda-nccl"), runs the single-GPU reference (or
 * takes --compare REF) and compares, as --tp does on the CPU. Under mpirun
 * (OMPI_COMM_WORLD_RANK/_SIZE or PMI_RANK/PMI_SIZE) with GGUFKIT_RDV on a
 * shared file system the ranks run where mpirun starts them; see
 * docs/ref-forward.md. */
#ifndef REFWD_GPUTP_H
#define REFWD_GPUTP_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf/file.h"
#include "gguf/forward.h"
#include "gguf/model.h"
#include "gguf/shard.h"

typedef struct refwd_gpu_tp_args {
    const char *model;
    const gguf_set *set;
    const gguf_model *m;
    const int32_t *tokens;
    int64_t n_tokens;
    int tp, ep;
    gguf_engine engine;
    const char *inject, *compare, *tol, *html, *record;
    bool json;
    gguf_fwd_opts fo;
    int host_register; /* each rank's gguf_cuda_fwd_opts.host_register */
    char **argv; /* to re-execute this tool for each rank */
} refwd_gpu_tp_args;

/* The whole --backend cuda --tp run; returns the tool's exit code. */
int refwd_gpu_tp(const refwd_gpu_tp_args *a);

#endif
