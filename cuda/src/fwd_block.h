/*
 * The block loop of the GPU forward pass (as libgguf/src/forward/forward_exec.c
 * is for the CPU):
 *
 *   embedding   token rows into x
 *   per block   attn_norm -> attention -> [reduce] -> residual
 *               ffn_norm (else attn_post_norm) -> dense FFN or MoE
 *               -> [reduce] (+ shared experts, [reduce]) -> residual
 *   head        output_norm -> logits
 *
 * with a capture at every point of gguf_capture_point. The executor
 * (fwd_gpu.h) gives the ops, one set for one GPU (reduce NULL) and one for an
 * NCCL rank (reduce over the communicator). The loop owns
 * nothing: buffers belong to the executor, so an op that fails returns and the
 * executor's cleanup runs. Not installed.
 */
#ifndef GGUFKIT_FWD_BLOCK_H
#define GGUFKIT_FWD_BLOCK_H

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

extern "C" {
#include "forward/forward_setup.h"
}

/* The FFN's output: routed (or dense) rows and the shared experts' rows, each
 * with its reduce flag; the loop sets routed = part, shared = part2, both
 * flags true and has_shared false before the call. */
typedef struct fb_ffn_out {
    float *routed, *shared;
    bool reduce_routed, reduce_shared, has_shared;
} fb_ffn_out;

/* Where the logits [n][n_vocab] are once the head ran: on the device or on
 * the host (one of the two). */
typedef struct fb_logits {
    const float *dev, *host;
} fb_logits;

/* An executor's ops; ctx is its state for the eval. Rows are [n][n_embd]
 * floats unless said otherwise; every op returns 0 or a gguf_status. */
typedef struct fb_ops {
    /* Token rows into x; part is scratch of x's size. */
    int (*embed)(void *ctx, const int32_t *tokens, int64_t n, float *x, float *part,
                 gguf_error *err);
    /* y = RMSNorm(x) with the weight of (il, role), else of (il, alt) when
     * alt is not GGUF_ROLE_UNKNOWN, else none. il -1: the output norm. */
    int (*norm)(void *ctx, int64_t il, gguf_role role, gguf_role alt, float *y, const float *x,
                int64_t n, gguf_error *err);
    /* Attention of block il into out; *reduce: out is a partial sum. */
    int (*attention)(void *ctx, int64_t il, const float *cur, int64_t n, float *out,
                     bool *reduce, gguf_error *err);
    /* The FFN of block il (MoE when moe). */
    int (*ffn)(void *ctx, int64_t il, bool moe, const float *cur, int64_t n, fb_ffn_out *out,
               gguf_error *err);
    /* All-reduce (sum) of len floats over the ranks; NULL: one rank. */
    int (*reduce)(void *ctx, float *buf, int64_t len, gguf_error *err);
    /* The logits of the output-normed rows cur. */
    int (*head)(void *ctx, const float *cur, int64_t n, fb_logits *out, gguf_error *err);
    /* Rows to the capture callback, from the device (dev) or the host (host). */
    int (*capture)(void *ctx, int layer, gguf_capture_point p, const float *dev,
                   const float *host, int64_t width, int64_t n, gguf_error *err);
    /* After every block and after the logits' capture; NULL: nothing. */
    void (*measure)(void *ctx);
    /* The logits to the caller's logits_out (NULL: only finish the eval). */
    int (*logits)(void *ctx, const fb_logits *lg, int64_t n, float *logits_out,
                  gguf_error *err);
} fb_ops;

/* One eval's executor: its ops and state, the stream its ops queue on (the
 * residual adds go there too) and its activations, [n][n_embd] each. */
typedef struct fb_exec {
    const fb_ops *ops;
    void *ctx;
    const gguf_model *m;
    cudaStream_t s;
    float *x;     /* the residual stream */
    float *cur;   /* normed rows: the input of attention, FFN and head */
    float *part;  /* attention's and the FFN's output */
    float *part2; /* the shared experts' output */
} fb_exec;

/* Embedding, the n_layer_main blocks and the head for n tokens; the logits
 * into logits_out (may be NULL). */
int fb_run(const fb_exec *e, const int32_t *tokens, int64_t n, float *logits_out,
           gguf_error *err);

#endif
