/* The ops of the reference forward pass (forward_ops.c): plain functions on
 * double activations with explicit arguments, shared by every CPU executor
 * (forward_exec.c) and used by the GPU backend for what it computes on the
 * host (RoPE tables, MoE routing). Not installed; unit tests check each op by
 * hand (tests/unit/test_forward_ops.c). */
#ifndef GGUF_FORWARD_OPS_H
#define GGUF_FORWARD_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf/forward.h"
#include "gguf/model.h"

/* ---- ops: activations are double, rows are token-major ---- */

/* Round to float when prec is GGUF_FWD_F32 (f32 compute), else nothing. */
void fw_round(double *x, int64_t n, int prec);

/* y = x / sqrt(mean(x^2) + eps) * w (w may be NULL). y may alias x. */
void fw_rmsnorm(double *y, const double *x, const float *w, int64_t n, double eps, int prec);

/* y = (x - mean) / sqrt(var + eps) * w + b (w, b may be NULL). y may alias x. */
void fw_layernorm(double *y, const double *x, const float *w, const float *b, int64_t n,
                  double eps, int prec);

/* y[t][o] = sum_i W[o][i] x[t][i] (+ bias[o]); W is ne = [n_in, n_out].
 * Rows of x are x_stride apart, rows of y y_stride apart (0 = packed).
 * The sum runs in double in a fixed order: results do not depend on
 * n_threads. */
void fw_matmul(double *y, int64_t y_stride, const double *x, int64_t x_stride, const float *W,
               const float *bias, int64_t n_in, int64_t n_out, int64_t n_tok, int n_threads,
               int prec);

/* Dot product in double. */
double fw_dot(const double *a, const double *b, int64_t n);

/* In-place softmax of n values (max subtracted, sum in double). */
void fw_softmax(double *x, int64_t n, int prec);

double fw_silu(double x);
double fw_sigmoid(double x);

/* out[i] = silu(gate[i]) * up[i]. out may alias gate or up. */
void fw_swiglu(double *out, const double *gate, const double *up, int64_t n, int prec);

/* RoPE, both pair conventions, with YaRN. */
typedef struct fw_rope {
    int type;          /* gguf_rope_pairs: GGUF_ROPE_ADJACENT / _HALF */
    int64_t n_rot;     /* rotated dims (even), the rest pass through */
    double base;
    double freq_scale; /* 1 / factor */
    double ext_factor; /* 1 with YaRN, 0 without */
    double corr_lo, corr_hi; /* YaRN ramp over pair index */
    double mscale;     /* cos/sin magnitude */
    const float *freq_factors; /* n_rot/2 divisors of the frequencies (rope_freqs), or NULL */
} fw_rope;

/* Plain RoPE (no scaling). */
void fw_rope_init(fw_rope *r, int type, int64_t n_rot, double base);
/* YaRN: factor > 1, original context, betas; mscale multiplies cos and sin. */
void fw_rope_init_yarn(fw_rope *r, int type, int64_t n_rot, double base, double factor,
                       int64_t orig_ctx, double beta_fast, double beta_slow, double mscale);
/* Rotate the first n_rot values of x (one head) for position pos. */
void fw_rope_apply(const fw_rope *r, double *x, int64_t pos, int prec);
/* The same on n_heads heads of x, stride apart, all at position pos: the
 * angles are computed once for all of them (the same values, so the same
 * bits as fw_rope_apply per head). */
void fw_rope_apply_heads(const fw_rope *r, double *x, int64_t n_heads, int64_t stride,
                         int64_t pos, int prec);

/*
 * Causal attention of one query head over n_keys keys (positions 0..n_keys-1):
 * out[dv] = sum_j softmax_j(scale * q.k_j) v_j, skipping keys with keep[j] == 0
 * when keep is not NULL. scratch holds n_keys doubles.
 */
void fw_attn_head(double *out, const double *q, const double *K, int64_t k_stride,
                  const double *V, int64_t v_stride, int64_t n_keys, const uint8_t *keep,
                  int64_t dk, int64_t dv, double scale, double *scratch, int prec);

/* MoE routing of one token. Contexts refuse models with more experts. */
#define FW_MAX_EXPERTS 4096
typedef struct fw_moe_cfg {
    int64_t n_expert, n_used;
    int gating;          /* gguf_gating: GGUF_GATING_SOFTMAX / _SIGMOID */
    int64_t n_group, n_group_used; /* group-limited top-k when n_group_used < n_group */
    bool norm;           /* normalise chosen weights to sum 1 */
    double scale;        /* multiply chosen weights (1 = none) */
} fw_moe_cfg;

/*
 * From router logits (n_expert) and an optional selection bias, choose
 * n_used experts: probabilities by softmax or sigmoid; selection on
 * probabilities + bias; with groups, each group scores the sum of its two
 * best biased probabilities and only the n_group_used best groups compete;
 * weights are the unbiased probabilities of the chosen ones, normalised
 * and scaled. ids are in order of decreasing selection score (ties: lower id
 * first). scratch holds 2*n_expert + n_group doubles.
 */
void fw_moe_route(const fw_moe_cfg *cfg, const double *logits, const float *bias,
                  int64_t *ids, double *weights, double *scratch, int prec);

/* Top-k indices of scores (decreasing, ties: lower index first), k <= n;
 * entries with keep == 0 (keep may be NULL) are never chosen; returns how
 * many were chosen. */
int64_t fw_topk(const double *scores, const uint8_t *keep, int64_t n, int64_t k, int64_t *idx);

/* ---- run threads over a range ---- */
typedef void (*fw_range_fn)(void *arg, int64_t begin, int64_t end);
void fw_parallel(int n_threads, int64_t n, fw_range_fn fn, void *arg);

#endif /* GGUF_FORWARD_OPS_H */
