/*
 * gguf/forward.h - the reference forward pass of a GGUF model on the CPU.
 *
 * A plain, readable implementation of the architectures people deploy:
 * llama, qwen2, qwen3, qwen3moe, deepseek2, glm4moe and glm-dsa. It is the
 * yardstick every other backend (virtual tensor parallel, CUDA, a serving
 * engine) is compared against, so it favours being obviously right over being
 * fast:
 *
 *   - activations are kept in double; with GGUF_FWD_F32 every op rounds its
 *     result to float (f32 compute) while reductions (dot products, norms,
 *     softmax sums) accumulate in double; GGUF_FWD_F64 never rounds;
 *   - weights stream layer by layer from the file: each matmul thread
 *     dequantizes a cache-sized block of its rows right before multiplying
 *     it (the bytes read with pread, or through 4 MiB mapped windows dropped
 *     after use), so a few blocks per thread (plus small norms, and MLA's
 *     attn_k_b/attn_v_b) are resident at a time, far less than a layer; an
 *     MoE layer dequantizes only the experts some token routes to; a model
 *     over an HF checkpoint streams in chunks of at most 32 MiB of floats;
 *   - matmuls sum in a fixed order (four partial sums by index mod 4), so
 *     results do not depend on threads, on how tokens are batched, or on the
 *     SIMD path;
 *   - MLA attention is computed the plain way (kv_b expanded per head from
 *     attn_k_b / attn_v_b, or a legacy attn_kv_b) or the absorbed way (queries
 *     absorbed into the latent space, MQA over the compressed cache); the two
 *     agree to rounding;
 *   - the next-token-prediction (MTP/NextN) blocks at the end of glm4moe,
 *     glm-dsa and deepseek2 files are skipped, as llama.cpp does.
 *
 * Layout conventions: activations are row-major, one row per token
 * ([n_tokens][width]); weights are ggml matrices ne = [n_in, n_out] (row o of
 * n_in floats gives output o). Positions start at 0 and grow with every eval.
 *
 * Capture points (gguf_capture_point; their names are what records use, see
 * gguf/record.h), per block N:
 *   blk.N.attn_norm     attention input after its RMSNorm         [n_tok][n_embd]
 *   blk.N.attn_out      attention output after the out projection [n_tok][n_embd]
 *   blk.N.attn_residual residual stream after attention           [n_tok][n_embd]
 *   blk.N.ffn_norm      FFN input after its RMSNorm               [n_tok][n_embd]
 *   blk.N.moe_experts   chosen expert ids, as floats (MoE blocks) [n_tok][n_used]
 *   blk.N.moe_weights   their weights, normalised and scaled      [n_tok][n_used]
 *   blk.N.ffn_out       FFN or MoE output (shared experts added)  [n_tok][n_embd]
 *   blk.N.residual      residual stream after the block           [n_tok][n_embd]
 *   output_norm         final RMSNorm output                      [n_tok][n_embd]
 *   logits              output projection                         [n_tok][n_vocab]
 *
 * Backends: a gguf_fwd_ctx is one interface over several executors. The CPU
 * reference (gguf_fwd_ctx_create), its virtual tensor-parallel ranks
 * (gguf_fwd_tp_create) and any other backend that implements
 * gguf_fwd_backend (the GPU ones of ggufkit_cuda) are evaluated, captured and
 * recorded the same way.
 * The library never prints and keeps no global state; contexts are not
 * thread-safe, distinct contexts are.
 */
#ifndef GGUF_FORWARD_H
#define GGUF_FORWARD_H

#include "gguf/export.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/error.h"
#include "gguf/file.h"
#include "gguf/model.h"
#include "gguf/shard.h"

GGUF_BEGIN_DECLS

/* ---- captures ---- */

/* The capture points in the order a block reaches them. */
typedef enum gguf_capture_point {
    GGUF_CAP_ATTN_NORM = 0,
    GGUF_CAP_ATTN_OUT,
    GGUF_CAP_ATTN_RESIDUAL,
    GGUF_CAP_FFN_NORM,
    GGUF_CAP_MOE_EXPERTS,
    GGUF_CAP_MOE_WEIGHTS,
    GGUF_CAP_FFN_OUT,
    GGUF_CAP_RESIDUAL,
    GGUF_CAP_OUTPUT_NORM, /* after the last block */
    GGUF_CAP_LOGITS,
    GGUF_CAP_COUNT
} gguf_capture_point;

/* "attn_norm", ..., "logits" (the op part of a capture name); NULL out of range. */
const char *gguf_capture_point_name(gguf_capture_point p);
/* The point of an op name ("ffn_out"). @return 0, or GGUF_E_NOT_FOUND. */
int gguf_capture_point_from_name(const char *op, gguf_capture_point *out);
/* true for the points made once per block (named "blk.N.OP"). */
bool gguf_capture_point_in_block(gguf_capture_point p);
/* The full name of a capture: "blk.3.attn_out" (layer >= 0 for block points)
 * or "logits". @return the length written (snprintf's). */
int gguf_capture_name(char *buf, size_t size, int layer, gguf_capture_point p);

typedef struct gguf_fwd_capture {
    const char *name;   /* "blk.3.attn_out", "logits" */
    int layer;          /* block index, -1 for output_norm and logits */
    const char *op;     /* "attn_out" (name without "blk.N.") */
    int rank;           /* -1 for the single-rank run; 0..tp-1 under virtual TP */
    const float *data;  /* ne[1] rows of ne[0] floats (f64 runs: rounded to
                           float), borrowed for the call */
    int64_t ne[2];      /* ne[0] = width, ne[1] = tokens of this eval */
    int64_t pos0;       /* position of the first row */
    gguf_capture_point point;
} gguf_fwd_capture;

/* Called at every capture point; a non-zero return stops the eval with that
 * code (a negative gguf_status; other values become GGUF_E_INTERRUPTED). */
typedef int (*gguf_fwd_capture_fn)(void *user, const gguf_fwd_capture *cap);

/* ---- evaluation ---- */

enum { GGUF_FWD_F32 = 0, GGUF_FWD_F64 = 1 };
enum { GGUF_FWD_MLA_PLAIN = 0, GGUF_FWD_MLA_ABSORBED = 1 };

typedef struct gguf_fwd_opts {
    unsigned int version; /* GGUF_FWD_OPTS_VERSION, or 0 for the same (see below) */
    int precision;        /* GGUF_FWD_F32 (default) or GGUF_FWD_F64 */
    int mla_mode;         /* GGUF_FWD_MLA_PLAIN (default) or _ABSORBED */
    int n_threads;        /* threads for matmuls, attention heads and SwiGLU (a pool
                             started with the context); 0 or 1 = the calling thread */
    bool dense_indexer;   /* glm-dsa: attend to every key, ignore the indexer */
    bool drop_pages;      /* after reading weights through the mapping, drop its pages
                             from the process (madvise DONTNEED) so that RSS stays a
                             few blocks of weights; only for models mapped from files
                             (gguf_set_open), never for gguf_file_open_memory buffers */
    int64_t idx_top_k;    /* glm-dsa: override the indexer top-k (0 = metadata) */
    gguf_fwd_capture_fn capture; /* optional */
    void *capture_user;
} gguf_fwd_opts;
/* The layout version of gguf_fwd_opts: the library refuses a larger one with
 * GGUF_E_OPTS_VERSION (docs/conventions.md, "Options structs"). */
#define GGUF_FWD_OPTS_VERSION 1
/* The defaults, version set: gguf_fwd_opts o = GGUF_FWD_OPTS_INIT; */
#define GGUF_FWD_OPTS_INIT {.version = GGUF_FWD_OPTS_VERSION}

typedef struct gguf_fwd_ctx gguf_fwd_ctx;

/* Statistics of a context, summed over its evals. */
typedef struct gguf_fwd_stats {
    uint64_t weight_bytes;      /* bytes of quantized weights read (dequantized) */
    uint64_t dequant_floats;    /* floats produced by dequantization */
    uint64_t peak_weight_bytes; /* most dequantized weight bytes resident at once */
    uint64_t experts_loaded;    /* (layer, expert) pairs dequantized */
    double seconds;             /* wall time inside gguf_fwd_eval */
    /* Where the streamed matmuls' time goes (the CPU backend; 0 elsewhere): */
    uint64_t stream_calls;      /* matmuls streamed from the file */
    double stream_seconds;      /* their wall time, drops of mapped pages included */
    double stream_busy_seconds; /* time the threads spent in them, summed over threads */
    double drop_seconds;        /* dropping mapped slices after them (one thread) */
} gguf_fwd_stats;

/*
 * A context: KV cache and scratch for one sequence. opts may be NULL.
 * @return 0; GGUF_E_INVALID for bad options; GGUF_E_BAD_VALUE for
 *         hyper-parameters the ops cannot run (head_count not a multiple of
 *         head_count_kv, RoPE wider than the head or odd, more than 4096
 *         experts, ...); GGUF_E_BAD_TYPE / GGUF_E_NOMEM.
 */
int gguf_fwd_ctx_create(gguf_fwd_ctx **out, const gguf_model *m, const gguf_fwd_opts *opts,
                        gguf_error *err);
void gguf_fwd_ctx_free(gguf_fwd_ctx *ctx);

/*
 * Run n tokens at positions n_past .. n_past+n-1 (appending them to the KV
 * cache). logits, when not NULL, receives n rows of n_vocab floats.
 * @return 0; GGUF_E_INVALID for a token id outside the vocabulary or n < 1;
 *         GGUF_E_BAD_TYPE when a weight's type cannot be dequantized;
 *         GGUF_E_NOMEM; the capture callback's code.
 */
int gguf_fwd_eval(gguf_fwd_ctx *ctx, const int32_t *tokens, int64_t n, float *logits,
                  gguf_error *err);

/*
 * Virtual tensor parallel: a context that computes gguf_shard_plan_ranks(plan)
 * ranks on the CPU, each with only the weights the plan gives it (all slicing
 * comes from the plan, faults included) and the engine's collectives
 * simulated (all-reduce after row-parallel ops where the plan says so, vocab
 * all-gather, expert combination). Captures carry the rank (0..tp-1); every
 * rank keeps its own residual stream, so a broken plan diverges on the ranks
 * and at the op it breaks. The plan (and its model) must outlive the context.
 * Evaluation is gguf_fwd_eval; logits are the gathered ones of rank 0.
 * @return 0; GGUF_E_INVALID when the plan was built for another model;
 *         the codes of gguf_fwd_ctx_create.
 */
int gguf_fwd_tp_create(gguf_fwd_ctx **out, const gguf_model *m, const gguf_shard_plan *plan,
                       const gguf_fwd_opts *opts, gguf_error *err);

/* Tokens evaluated so far. */
int64_t gguf_fwd_ctx_n_past(const gguf_fwd_ctx *ctx);
void gguf_fwd_ctx_stats(const gguf_fwd_ctx *ctx, gguf_fwd_stats *out);
/* The model the context runs. */
const gguf_model *gguf_fwd_ctx_model(const gguf_fwd_ctx *ctx);
/* "cpu", "cpu-tp", "cuda", "cuda-tp": the backend's name (records carry it). */
const char *gguf_fwd_ctx_backend(const gguf_fwd_ctx *ctx);

/*
 * Replace the capture callback (NULL: none) for the next evals, e.g. to
 * record the prompt and not the decoded tokens.
 * @return 0; GGUF_E_UNSUPPORTED when the backend cannot capture.
 */
int gguf_fwd_ctx_set_capture(gguf_fwd_ctx *ctx, gguf_fwd_capture_fn fn, void *user);

/* ---- other backends behind the same context ---- */

/*
 * What a backend provides. eval and free are required; the others may be
 * NULL (n_past then counts the tokens given to eval; stats are zero;
 * set_capture is unsupported). impl is the backend's own state.
 */
typedef struct gguf_fwd_backend {
    const char *name;
    int (*eval)(void *impl, const int32_t *tokens, int64_t n, float *logits, gguf_error *err);
    int64_t (*n_past)(const void *impl);
    void (*stats)(const void *impl, gguf_fwd_stats *out);
    int (*set_capture)(void *impl, gguf_fwd_capture_fn fn, void *user);
    void (*free)(void *impl);
} gguf_fwd_backend;

/*
 * A context over a backend: it checks the tokens (ids inside the model's
 * vocabulary, n >= 1) and times the evals; the backend computes. On success
 * the context owns impl (freed through be->free); on failure impl is freed.
 * @return 0; GGUF_E_INVALID (NULL be, eval or free); GGUF_E_NOMEM.
 */
int gguf_fwd_ctx_wrap(gguf_fwd_ctx **out, const gguf_model *m, const gguf_fwd_backend *be,
                      void *impl, gguf_error *err);
/* The backend's state when ctx runs backend be, else NULL. */
void *gguf_fwd_ctx_impl(const gguf_fwd_ctx *ctx, const gguf_fwd_backend *be);

/* ---- runs ---- */

/* A greedy continuation (gguf_fwd_generate). */
typedef struct gguf_fwd_generation {
    int32_t *ids;    /* the generated ids (EOS included when it came) */
    int64_t n_ids;
    float *logits;   /* with keep_logits: n_rows rows of n_vocab floats, one per
                        evaluated position (prompt, then every generated token
                        but the last) */
    int64_t n_rows;
} gguf_fwd_generation;

/*
 * Evaluate tokens, then decode greedily (argmax, first on ties) up to
 * n_predict ids, stopping after `eos` (when eos >= 0). The context's capture
 * callback sees the prompt eval and each decode step.
 * @return 0; the codes of gguf_fwd_eval; GGUF_E_NOMEM. out is filled on
 *         success and freed on failure.
 */
int gguf_fwd_generate(gguf_fwd_ctx *ctx, const int32_t *tokens, int64_t n, int64_t n_predict,
                      int32_t eos, bool keep_logits, gguf_fwd_generation *out, gguf_error *err);
void gguf_fwd_generation_free(gguf_fwd_generation *g);

/* Index of the largest value of a row (the first one on ties). */
int64_t gguf_fwd_argmax(const float *row, int64_t n);

/* ---- vocabulary ---- */

/*
 * The vocabulary-only form of gguf_token_text (gguf/tokenize.h), for models
 * whose tokenizer gguf_tokenizer_create cannot build: prefer gguf_token_text
 * wherever a tokenizer exists (it applies llama.cpp's token types).
 * Write the text of token `id` of tokenizer.ggml.tokens in meta into buf
 * (size bytes, always NUL-terminated, truncated when too small), decoded as
 * the tokenizer decodes pieces (gguf_token_piece) but with the token types as
 * the file has them: with tokenizer.ggml.model "llama" (SentencePiece) or
 * "bert" a normal token's U+2581 becomes a space and a byte token <0xNN> that
 * byte; with "gpt2" a normal token's byte-level symbols become their bytes;
 * unknown and user-defined tokens give their text as it is; control tokens
 * (token_type 3), unused ones and malformed byte tokens give "".
 * @return bytes written (excluding the NUL), or a negative gguf_status:
 *         GGUF_E_NOT_FOUND without a vocabulary, GGUF_E_INVALID for an id out
 *         of range, GGUF_E_NOMEM.
 */
int gguf_fwd_token_text(const gguf_file *meta, int32_t id, char *buf, size_t size);
/* tokenizer.ggml.bos_token_id / eos_token_id, or -1 when absent. */
int32_t gguf_fwd_token_bos(const gguf_file *meta);
int32_t gguf_fwd_token_eos(const gguf_file *meta);

GGUF_END_DECLS
#endif /* GGUF_FORWARD_H */
