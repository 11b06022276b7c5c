/* The CPU executor of the forward pass: one description of a block
 * (forward_exec.c) run over one rank (the reference) or tp virtual ranks
 * (a shard plan), with the ops of forward_attn.c and forward_ffn.c taking
 * their weights from forward_weights.c. The single-rank and the multi-rank
 * runs differ only in where a weight comes from (the file, streamed and
 * dequantized chunk by chunk; an HF checkpoint's weight, streamed the same
 * way through the model module's rows; or the rank's slice of the plan) and
 * in the collectives between ranks. Not installed. */
#ifndef GGUF_FORWARD_EXEC_H
#define GGUF_FORWARD_EXEC_H

#include "forward/forward_setup.h"
#include "gguf/dequant.h"

/* KV cache of one layer of one rank: widths are the rank's own. */
typedef struct fw_kv {
    double *k;     /* [cap][kw]: GQA keys, or the MLA latent [kv_cmpr | k_pe] */
    double *v;     /* [cap][vw]: GQA values (NULL for MLA) */
    double *idx_k; /* [cap][idx_head_dim]: glm-dsa indexer keys */
    int64_t kw, vw, iw;
} fw_kv;

typedef struct fw_exec {
    fw_setup s;
    fw_runtime rt;               /* the model's, or the plan's engine runtime */
    const gguf_shard_plan *plan; /* NULL: one rank reading the file */
    int tp;                      /* ranks (1 without a plan) */
    int64_t n_past, cap;
    fw_kv *kv;                   /* [tp][n_layer] */
    double **x;                  /* residual stream of each rank [n][E] */
    gguf_fwd_stats st;
    bool hf;                     /* the model is an HF checkpoint (gguf_model_open_hf) */
    uint64_t resident;           /* dequantized weight bytes alive now */
    gguf_dequant_opts dq;
    long page;
    struct fw_stream *stream;    /* threads and buffers of fw_mm over file tensors
                                    (forward_stream.c), made on first use */
} fw_exec;

/* The rank number captures carry: -1 for the single-rank reference. */
static inline int fw_cap_rank(const fw_exec *c, int r)
{
    return c->plan ? r : -1;
}

/* ---- weights (forward_weights.c) ---- */

/* A weight as a matrix of rows ne[0] wide: stored rows of the file (t,
 * dequantized chunk by chunk when used), of an HF checkpoint (hf, its rows
 * dequantized the same way by gguf_model_tensor_rows; t its tensor info) or
 * floats (a rank's slice). */
typedef struct fw_w {
    const gguf_tensor *t;
    const gguf_model_tensor *hf; /* the checkpoint's weight, or NULL */
    int64_t row0;               /* first row of t */
    float *f;
    bool own;                   /* f is freed by fw_w_release */
    int64_t ne[4];              /* ne[0] = inputs; rows = ne[1] * ne[2] * ne[3] */
    const gguf_shard_tensor *e; /* the plan's entry (its reduce flag), or NULL */
} fw_w;

static inline bool fw_w_has(const fw_w *w)
{
    return w->t || w->f;
}
static inline int64_t fw_w_rows(const fw_w *w)
{
    return w->ne[1] * w->ne[2] * w->ne[3];
}

/* Rank r's weight of (layer, role): the file's tensor without a plan, the
 * plan's slice (materialized as floats) with one. Absent: fw_w_has() false. */
int fw_w_get(fw_exec *c, int r, int64_t il, gguf_role role, fw_w *w, gguf_error *err);
/* The file's (or checkpoint's) tensor whatever the plan (weights no plan
 * slices: the indexer). */
void fw_w_file(fw_exec *c, int64_t il, gguf_role role, fw_w *w);
void fw_w_release(fw_w *w);
/* Rows [row0, row0 + n) of w as a view (borrowed). */
fw_w fw_w_sub(const fw_w *w, int64_t row0, int64_t n);

/* The first row of w as `want` floats (cut, or zero-filled past its end),
 * into a new buffer counted as resident weights; release with fw_vec_free. */
int fw_vec(fw_exec *c, const fw_w *w, int64_t want, float **out, gguf_error *err);
void fw_vec_free(fw_exec *c, float *v, int64_t want);
/* All rows of w as floats (resident until fw_vec_free(c, p, rows * ne[0])). */
int fw_w_floats(fw_exec *c, const fw_w *w, float **out, gguf_error *err);

/* y[t][o] = W[o] . x[t] (+ bias[o]) for every row o of w and n_tok rows of
 * x, xw wide (rows xs apart; 0: xw). When xw differs from w's inputs (a
 * broken plan), the common part is used and the rest is zero. ys: row
 * stride of y (0: packed). bias may be NULL or absent. */
int fw_mm(fw_exec *c, double *y, int64_t ys, const double *x, int64_t xw, int64_t xs,
          const fw_w *w, const fw_w *bias, int64_t n_tok, gguf_error *err);
/* RMSNorm of n_tok rows `width` wide (stride apart) with w's first row as
 * the weight (absent: none; cut or zero-filled to width). y may alias x. */
int fw_norm(fw_exec *c, double *y, const double *x, int64_t n_tok, int64_t width,
            int64_t stride, const fw_w *w, gguf_error *err);
/* The same per head: n_heads heads of hd values per token. */
int fw_norm_heads(fw_exec *c, double *x, int64_t n_tok, int64_t n_heads, int64_t hd,
                  int64_t stride, const fw_w *w, gguf_error *err);

/* Hand rows of doubles to the capture callback (as floats). */
int fw_capture(fw_exec *c, int layer, gguf_capture_point p, int r, const double *data,
               int64_t width, int64_t n_tok, gguf_error *err);

/* The KV cache of (rank, layer), sized for the eval's positions with these
 * widths (the first eval fixes them). */
int fw_kv_reserve(fw_exec *c, int r, int64_t il, int64_t kw, int64_t vw, int64_t iw,
                  fw_kv **out, gguf_error *err);

/* ---- ops over a rank (forward_attn.c, forward_ffn.c) ---- */

/* Attention of rank r for n rows cur [n][E]: out [n][E] is the rank's
 * (partial, when the out projection is row-parallel) output. */
int fw_attn(fw_exec *c, int r, int64_t il, const double *cur, int64_t n, double *out,
            gguf_error *err);

/* Dense SwiGLU FFN with gate/up/down of roles rg/ru/rd; *reduce: the plan
 * says the output is a partial sum to all-reduce. */
int fw_ffn_dense(fw_exec *c, int r, int64_t il, gguf_role rg, gguf_role ru, gguf_role rd,
                 const double *x, int64_t n, double *out, bool *reduce, gguf_error *err);

/* MoE FFN of rank r: the routed experts it owns (routed, partial over ranks)
 * and its part of the shared experts (shared; *has_shared false when none). */
typedef struct fw_moe_out {
    double *routed, *shared;
    bool reduce_routed, reduce_shared, has_shared;
} fw_moe_out;
int fw_ffn_moe(fw_exec *c, int r, int64_t il, const double *x, int64_t n, fw_moe_out *out,
               gguf_error *err);

/* The glm-dsa lightning indexer over the file's tensors (forward_attn.c). */
int fw_dsa_indexer(fw_exec *c, int64_t il, double *idx_cache, const double *cur,
                   const double *qr, int64_t n, uint8_t *keep, int64_t n_keys_max,
                   gguf_error *err);

/* ---- the executor (forward_exec.c) ---- */

int fw_exec_create(fw_exec **out, const gguf_model *m, const gguf_shard_plan *plan,
                   const gguf_fwd_opts *opts, gguf_error *err);
int fw_exec_eval(fw_exec *c, const int32_t *tokens, int64_t n, float *logits, gguf_error *err);
void fw_exec_free(fw_exec *c);

#endif /* GGUF_FORWARD_EXEC_H */
