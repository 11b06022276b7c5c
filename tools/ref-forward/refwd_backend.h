/* ref-forward: a forward context (gguf/forward.h) on the backend the user
 * chose, so that every subcommand runs, records and compares a CPU or a GPU
 * run the same way.
 *   cpu   gguf_fwd_ctx_create (the reference)
 *   cuda  gguf_cuda_fwd_ctx_create (one GPU), only in builds with CUDA */
#ifndef REFWD_BACKEND_H
#define REFWD_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gguf/error.h"
#include "gguf/forward.h"
#include "gguf/model.h"

typedef enum refwd_backend { REFWD_CPU = 0, REFWD_CUDA = 1 } refwd_backend;

/* "cpu" or "cuda" into *out; -1 for anything else. */
int refwd_backend_parse(const char *s, refwd_backend *out);
const char *refwd_backend_name(refwd_backend b);

/* Fail early and cleanly when the backend cannot run here (no CUDA in this
 * build, no GPU): GGUF_E_IO with a message that says so. */
int refwd_backend_probe(refwd_backend b, gguf_error *err);

/* What --backend cuda takes beyond gguf_fwd_opts (ignored by the CPU). */
typedef struct refwd_gpu_opts {
    int host_register; /* gguf_cuda_fwd_opts.host_register: 0 auto, 1 on, -1 off */
    size_t mem_limit;  /* gguf_cuda_fwd_opts.mem_limit: 0 none */
} refwd_gpu_opts;

/* g may be NULL (defaults). */
int refwd_ctx_create(gguf_fwd_ctx **out, refwd_backend b, const gguf_model *m,
                     const gguf_fwd_opts *fo, const refwd_gpu_opts *g, gguf_error *err);
/* With --stats: one line on what moved to the GPU (nothing for the CPU). */
void refwd_print_xfer(const gguf_fwd_ctx *ctx, FILE *out);

#endif
