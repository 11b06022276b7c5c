/*
 * ggufkit_cuda/host_copy.h - memcpy by a team of host threads, for filling
 * pinned staging buffers from a file's mmap at PCIe speed (used by the GPU
 * forward pass, ggufkit_cuda/forward_cuda.h). No GPU needed.
 */
#ifndef GGUFKIT_CUDA_HOST_COPY_H
#define GGUFKIT_CUDA_HOST_COPY_H

#include <stddef.h>

#include "gguf/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gguf_host_copy_team gguf_host_copy_team;

/* Start n_threads - 1 workers (the caller is the last member; at most 32 in
 * all; fewer when threads cannot start). @return 0; GGUF_E_INVALID;
 * GGUF_E_NOMEM. */
int gguf_host_copy_team_create(gguf_host_copy_team **out, int n_threads, gguf_error *err);
/* Stop the workers and free. Accepts NULL. */
void gguf_host_copy_team_free(gguf_host_copy_team *t);
/* Members that copy (workers + the caller). */
int gguf_host_copy_team_size(const gguf_host_copy_team *t);
/* memcpy(dst, src, n) split over the team; returns when all of it is
 * copied. Buffers must not overlap. t may be NULL (plain memcpy). */
void gguf_host_copy(gguf_host_copy_team *t, void *dst, const void *src, size_t n);

/* A piece of a gather: n bytes from src. */
typedef struct gguf_host_copy_part {
    const void *src;
    size_t n;
} gguf_host_copy_part;

/* Copy the parts one after another into dst (dst + sum of the earlier parts'
 * n), the total split evenly over the team whatever the parts' sizes. */
void gguf_host_copy_gather(gguf_host_copy_team *t, void *dst, const gguf_host_copy_part *parts,
                           int n_parts);

/* A gather done by the workers alone while the caller goes on (queueing GPU
 * work for the previous chunk): returns at once, except for jobs too small
 * to share (under 256 KiB) or a team without workers, copied before it
 * returns. parts, dst and the sources must stay valid until
 * gguf_host_copy_wait. A new job waits for the previous one. */
void gguf_host_copy_gather_start(gguf_host_copy_team *t, void *dst,
                                 const gguf_host_copy_part *parts, int n_parts);
/* Block until the team's job is done. t may be NULL. */
void gguf_host_copy_wait(gguf_host_copy_team *t);

#ifdef __cplusplus
}
#endif
#endif /* GGUFKIT_CUDA_HOST_COPY_H */
