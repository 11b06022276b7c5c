/* Kernels of the GPU forward pass (fwd_kernels.cu) as launch functions on a
 * stream, used by the GPU executor (fwd_gpu.h). Activations are f32, row
 * major, one row per token; reductions accumulate in double and results are
 * rounded to float where the CPU's f32 mode rounds (forward_ops.c). Not
 * installed. */
#ifndef GGUFKIT_FWD_CUDA_INTERNAL_H
#define GGUFKIT_FWD_CUDA_INTERNAL_H

#include <cuda_runtime.h>
#include <stdint.h>

/* RMSNorm of n_tok * heads rows of `width` floats: row (t, h) starts at
 * t * tok_stride + h * head_stride. y may alias x; w may be NULL. */
void fk_rmsnorm(float *y, const float *x, const float *w, int64_t n_tok, int64_t heads,
                int64_t width, int64_t tok_stride, int64_t head_stride, double eps,
                cudaStream_t s);

/* RoPE on the first 2*half values of heads (t, h) at x + t*tok_stride +
 * h*head_stride; cs holds [n_tok][half] pairs (cos, sin) in double.
 * half_pairs: GGUF_ROPE_HALF pairs (k, k+half), else (2k, 2k+1). */
void fk_rope(float *x, int64_t n_tok, int64_t heads, int64_t tok_stride, int64_t head_stride,
             const double *cs, int64_t half, int half_pairs, cudaStream_t s);

/* g[i] = rnd(rnd(silu(g[i])) * u[i]) */
void fk_swiglu(float *g, const float *u, int64_t n, cudaStream_t s);
/* x[i] += y[i] (f32 add) */
void fk_add(float *x, const float *y, int64_t n, cudaStream_t s);
/* y[t][o] += b[o] for n_tok rows of width, rows stride apart */
void fk_add_bias(float *y, const float *b, int64_t n_tok, int64_t width, int64_t stride,
                 cudaStream_t s);

/* Causal attention, one block per (token, head): keys 0..n_past+t, query head
 * h reads kv head h*nkv/nh. Scores rnd(q.k * scale), softmax as fw_softmax,
 * out = sum p_j v_j (double sums). scr: n_tok*nh*(n_past+n_tok) doubles. */
typedef struct fk_attn_args {
    float *out;
    int64_t out_tok_stride; /* out head h at out + t*out_tok_stride + h*dv */
    const float *q;
    int64_t q_tok_stride, q_head_stride;
    const float *k;
    int64_t k_pos_stride, k_head_stride;
    const float *v;
    int64_t v_pos_stride, v_head_stride;
    int64_t n_tok, nh, nkv, dk, dv, n_past;
    double scale;
    double *scr;
} fk_attn_args;
void fk_attn(const fk_attn_args *a, cudaStream_t s);

/* dst[i] = src[rows[i]] for m rows of width E; a row -1 is zeros */
void fk_gather(float *dst, const float *src, const int32_t *rows, int64_t m, int64_t E,
               cudaStream_t s);
/* acc[rows[i]][j] += (double)(float)(ys[i][j] * w[i]) */
void fk_moe_acc(double *acc, const float *ys, const int32_t *rows, const float *w, int64_t m,
                int64_t E, cudaStream_t s);
/* out[t][j] = (float)sum over k of (double)(float)(ys[trow[t][k]][j] * tw[t][k])
 * (k < nu in the order given, rows -1 left out), summed in double from 0;
 * with add: rnd(that + add[t][j]). What fk_moe_acc expert by expert and
 * fk_acc_out compute, when each token's rows are in expert order. */
void fk_moe_combine(float *out, const float *ys, const int32_t *trow, const float *tw, int64_t n,
                    int64_t nu, int64_t E, const float *add, cudaStream_t s);
/* x[i] = rnd(x[i] * s) */
void fk_scale(float *x, int64_t n, double s, cudaStream_t st);
/* out[i] = (float)acc[i]; with add: out[i] = rnd((float)acc[i] + add[i]) */
void fk_acc_out(float *out, const double *acc, const float *add, int64_t n, cudaStream_t s);

/* out[j * out_ld + k] = w[k * ld + j] for nr rows k and w0 columns j: rows of
 * a dequantized piece placed as columns (a transposed shard piece). */
void fk_place_t(float *out, const float *w, int64_t nr, int64_t w0, int64_t ld, int64_t out_ld,
                cudaStream_t s);

#endif
