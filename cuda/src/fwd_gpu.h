/*
 * The one GPU executor of the forward pass: one GPU (ggufkit_cuda/forward_cuda.h)
 * and one NCCL rank (ggufkit_cuda/forward_cuda_tp.h) are the same code, as the
 * CPU's reference and virtual ranks are (libgguf/src/forward/forward_exec.c).
 * Without a plan the executor is rank 0 of 1: every weight is the file's
 * tensor, streamed by rows (fwd_stream.h), nothing is reduced (the loop's
 * reduce op is NULL) and captures carry rank -1. With a plan and a
 * communicator it is rank r: every weight is the plan's slice for r, built on
 * the GPU (fs_materialize), shapes come from the slices, the engine settings
 * from the plan's runtime, and partial sums are all-reduced over NCCL.
 *
 *   fwd_gpu_mem.cu     device memory: the pool, the --gpu-mem-limit cap, the KV cache
 *   fwd_gpu_weight.cu  weights of either kind: fetch, matmul, norm, release
 *   fwd_gpu_attn.cu    attention: GQA and MLA
 *   fwd_gpu_ffn.cu     FFN: dense SwiGLU and MoE (routing, routed and shared experts)
 *   fwd_gpu_exec.cu    the block loop's ops (fwd_block.h), eval, contexts, both APIs
 *
 * Not installed.
 */
#ifndef GGUFKIT_FWD_GPU_H
#define GGUFKIT_FWD_GPU_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

extern "C" {
#include "forward/forward_setup.h"
#include "forward/forward_stream.h"
}
#include "fwd_dl.h" /* after cublas_v2.h: cuBLAS through the loaded table */
#include "fwd_stream.h"
#include "ggufkit_cuda/forward_cuda.h"
#include "ggufkit_cuda/nccl_comm.h"

/* One layer's KV cache: keys (GQA) or the MLA latent [kv_cmpr | k_pe], and
 * values (GQA only), cap positions of kw and vw floats. */
typedef struct gx_cache {
    float *k, *v;
    int64_t kw, vw, cap;
} gx_cache;

struct gguf_cuda_fwd {
    fw_setup set;  /* checks, RoPE set-up, routing: shared with the CPU (forward_setup.h) */
    fw_runtime rt; /* the engine settings: the model's, or the plan's runtime */
    const gguf_model *m;
    const gguf_hparams *hp;
    gguf_fwd_opts o;
    /* rank r of tp on the communicator; plan and comm NULL, r 0, tp 1 for one GPU */
    const gguf_shard_plan *plan;
    gguf_nccl_comm *comm;
    int r, tp;
    int cap_rank; /* the rank captures carry: -1 for one GPU */
    int device;
    cudaStream_t ks;    /* compute (the streamer has the copy stream) */
    cudaMemPool_t pool; /* activations, scratch and slices: kept across syncs */
    cublasHandle_t blas;
    fs_streamer *fs;
    float *hlog; /* pinned: router logits come back without blocking the host */
    size_t hlog_n;
    fw_pool *route_pool; /* host threads routing a batch's tokens (NULL: the caller) */
    gx_cache *lc;
    int64_t n_past;
    gguf_fwd_stats st;
    gguf_cuda_fwd_xfer xf;
    uint64_t resident;
    bool moe_pad; /* routed experts' rows may be padded (gguf_cuda_fwd_opts.moe_pad) */
    size_t free0; /* free device memory before the context allocated any */
    /* --gpu-mem-limit: what the context holds, counted by its own allocations */
    size_t mem_limit, mem_fixed; /* the cap; staging + cuBLAS workspace */
    uint64_t mem_used;           /* pool allocations and the KV cache */
    struct gx_alloc_rec {
        void *p;
        size_t n;
    } *atab; /* live pool allocations (a few dozen at most) */
    int an, acap;
};
typedef struct gguf_cuda_fwd gx;

/* ---- device memory (fwd_gpu_mem.cu) ---- */

/* bytes from the pool on the compute stream (counted against the cap). */
int gx_alloc(gx *c, void *pp, size_t bytes, gguf_error *err);
/* The same, zeroed (on the stream). */
int gx_zalloc(gx *c, void *pp, size_t bytes, gguf_error *err);
/* Back to the pool, on the stream; NULL is fine. */
void gx_dfree(gx *c, void *p);
/* Room for `bytes` more under the cap (always, without one). */
int gx_mem_check(gx *c, uint64_t bytes, const char *what, gguf_error *err);
/* Device memory this context holds now, into xf.device_bytes when larger. */
void gx_sample_mem(gx *c);
/* b bytes as "N.N MiB" in buf. */
const char *gx_mib(uint64_t b, char *buf, size_t n);
/* Layer il's cache with room for `need` positions of kw (and vw) floats. */
int gx_cache_reserve(gx *c, int64_t il, int64_t kw, int64_t vw, int64_t need, gguf_error *err);

/* ---- weights (fwd_gpu_weight.cu) ---- */

/* A weight as this executor computes with it: the file's tensor, streamed
 * by rows (one GPU), or the plan's slice for this rank on the device. */
typedef struct gx_w {
    const gguf_tensor *t;        /* streamed: the file's tensor */
    float *d;                    /* a rank: its slice on the device */
    float *h;                    /* or on the host, where asked (GX_HOST) */
    int64_t ne[4], n;            /* the shape computed with */
    const gguf_shard_tensor *e;  /* the plan's entry (NULL for one GPU) */
} gx_w;

enum {
    GX_HOST = 1, /* a rank's slice on the host only (read there: kv_b, a bias) */
};

/* (il, role) into w; an absent weight leaves w empty (gx_has false).
 * keep/n_keep (may be NULL): a rank's expert tensor moves only the kept
 * slabs (fs_materialize). */
int gx_get(gx *c, int64_t il, gguf_role role, gx_w *w, int flags, const bool *keep,
           int64_t n_keep, gguf_error *err);
void gx_release(gx *c, gx_w *w);
bool gx_has(const gx_w *w);
int64_t gx_rows(const gx_w *w);
/* Whether (il, role) exists: in the file (one GPU), in the plan (a rank). */
bool gx_present(const gx *c, int64_t il, gguf_role role);
/* A missing weight: GGUF_E_NOT_FOUND naming blk.il.role. */
int gx_need(const gx_w *w, int64_t il, gguf_role role, gguf_error *err);

/* y [n][n_out] (rows ys apart; 0: n_out) = x [n][xw] . W^T (+ bias), W
 * ne = [n_in, n_out]; where xw != n_in (a broken plan) the common part of x
 * is used, as the CPU's fw_mm does. bias may be NULL or empty. */
int gx_mm(gx *c, float *y, int64_t ys, const float *x, int64_t xw, const gx_w *w,
          const gx_w *bias, int64_t n, gguf_error *err);
/* RMSNorm of n_tok * heads rows of width (see fk_rmsnorm) with w's first
 * `width` values as the weight (none when w is empty). */
int gx_norm(gx *c, float *y, const float *x, int64_t n_tok, int64_t heads, int64_t width,
            int64_t tok_stride, int64_t head_stride, const gx_w *w, gguf_error *err);
/* The whole weight on the device: a rank's slice as it is; a streamed
 * tensor loaded into a new buffer. *out is w->d or a buffer for
 * gx_release_dev. */
int gx_on_device(gx *c, const gx_w *w, float **out, gguf_error *err);
void gx_release_dev(gx *c, const gx_w *w, float *p);
/* The first `want` values of a vector weight on the host, zero-filled past
 * the slice (malloc'ed; free()). NULL when w is empty. */
int gx_host_vec(gx *c, const gx_w *w, int64_t want, float **out, gguf_error *err);
/* Stream rows of a file tensor (fs_stream on the context's streamer). */
int gx_stream(gx *c, const gguf_tensor *t, int64_t row0, int64_t n_rows, fs_rows_fn fn,
              void *arg, gguf_error *err);

/* ---- the block's ops (fwd_gpu_attn.cu, fwd_gpu_ffn.cu) ---- */

/* Attention of block il into out [n][n_embd] (a partial sum on a rank:
 * *reduce says whether to all-reduce it). cs: the RoPE table. */
int gx_attention(gx *c, int64_t il, const double *cs, const float *cur, int64_t n, float *out,
                 bool *reduce, gguf_error *err);
/* Dense SwiGLU of (rg, ru, rd) into out; *reduce as above. */
int gx_ffn_dense(gx *c, int64_t il, gguf_role rg, gguf_role ru, gguf_role rd, const float *x,
                 int64_t n, float *out, bool *reduce, gguf_error *err);
/* An MoE layer: the routed experts this executor owns into routed, the
 * shared experts (if any) into shared; their reduce flags. */
int gx_ffn_moe(gx *c, int64_t il, const float *x, int64_t n, float *routed, float *shared,
               bool *red_routed, bool *red_shared, bool *has_shared, gguf_error *err);

/* Rows to the capture callback from the device (dev) or the host (host). */
int gx_capture(gx *c, int layer, gguf_capture_point p, const float *dev, const float *host,
               int64_t width, int64_t n_tok, gguf_error *err);

double gx_now(void);

#endif
