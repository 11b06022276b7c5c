/* ref-forward: one forward context whatever the backend, so that the run
 * path (refwd_run.c) records and compares a CPU or a GPU run the same way.
 *   cpu   gguf/forward.h (the reference)
 *   cuda  ggufkit_cuda/forward_cuda.h (one GPU), only in builds with CUDA */
#ifndef REFWD_BACKEND_H
#define REFWD_BACKEND_H

#include <stdint.h>
#include <stdio.h>

#include "gguf/error.h"
#include "gguf/forward.h"
#include "gguf/model.h"

typedef enum refwd_backend { REFWD_CPU = 0, REFWD_CUDA = 1 } refwd_backend;

typedef struct refwd_ctx refwd_ctx;

/* "cpu" or "cuda" into *out; -1 for anything else. */
int refwd_backend_parse(const char *s, refwd_backend *out);
const char *refwd_backend_name(refwd_backend b);

/* Fail early and cleanly when the backend cannot run here (no CUDA in this
 * build, no GPU): GGUF_E_IO with a message that says so. */
int refwd_backend_probe(refwd_backend b, gguf_error *err);

/* host_register: the GPU's gguf_cuda_fwd_opts.host_register (0 auto, 1 on,
 * -1 off); ignored by the CPU. */
int refwd_ctx_create(refwd_ctx **out, refwd_backend b, const gguf_model *m,
                     const gguf_fwd_opts *fo, int host_register, gguf_error *err);
int refwd_ctx_eval(refwd_ctx *c, const int32_t *tokens, int64_t n, float *logits,
                   gguf_error *err);
int64_t refwd_ctx_n_past(const refwd_ctx *c);
void refwd_ctx_stats(const refwd_ctx *c, gguf_fwd_stats *out);
/* With --stats: one line on what moved to the GPU (nothing for the CPU). */
void refwd_ctx_print_xfer(const refwd_ctx *c, FILE *out);
void refwd_ctx_free(refwd_ctx *c);

#endif
