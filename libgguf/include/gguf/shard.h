/*
 * gguf/shard.h - tensor- and expert-parallel shard plans, and the fault
 * catalog that breaks them on purpose.
 *
 * A plan says, for every tensor of a model and every rank, which slice of
 * which dimension that rank holds, the shape and bytes of the slice, and
 * whether it can be cut from the quantized bytes. It is the single source of
 * slicing for the multi-rank forward backends: a backend builds each rank's
 * weights from the plan's pieces, never from its own code, so a wrong plan
 * shows up as a divergence, and a fault injected into a plan proves the
 * checker catches it.
 *
 * Dimensions are ggml's (ne[0] innermost). An HF weight [out, in] is ggml
 * ne = [in, out]: HF "column parallel" (split the outputs) cuts ne[1] - whole
 * rows, always cuttable from quantized bytes; HF "row parallel" (split the
 * inputs, all-reduce the partial sums) cuts ne[0] - inside rows, cuttable only
 * on the type's block boundaries (32 or 256 elements).
 *
 * Ranks: rank r in [0, tp). With expert parallelism (ep > 1), rank r also has
 * an expert-parallel index and a MoE tensor-parallel index:
 *     vllm:   ep must equal tp (vLLM's EP size is tp*dp; dp = 1 here):
 *             ep_rank = r, moe_tp = 1
 *     sglang: ep divides tp, moe_tp = tp / ep,
 *             ep_rank = r / moe_tp, moe_tp_rank = r % moe_tp
 * Rank r owns experts [ep_rank*E/ep, (ep_rank+1)*E/ep).
 *
 * Lifetimes: a plan borrows the model it was built from (names, tensors);
 * everything it hands out lives until gguf_shard_plan_free().
 */
#ifndef GGUF_SHARD_H
#define GGUF_SHARD_H

#include "gguf/export.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/error.h"
#include "gguf/model.h"

GGUF_BEGIN_DECLS

typedef enum gguf_engine { GGUF_ENGINE_VLLM = 0, GGUF_ENGINE_SGLANG = 1 } gguf_engine;

/* "vllm", "sglang". */
const char *gguf_engine_name(gguf_engine e);
/* @return 0 and *out, or GGUF_E_INVALID for an unknown name. */
int gguf_engine_from_name(const char *name, gguf_engine *out);

typedef enum gguf_shard_rule {
    GGUF_RULE_REPLICATED = 0, /* the whole tensor on every rank */
    GGUF_RULE_COLUMN,         /* output rows (ne[1]) in tp equal chunks; outputs stay local */
    GGUF_RULE_ROW,            /* inputs (ne[0]) in tp equal chunks; outputs all-reduced (sum) */
    GGUF_RULE_VOCAB,          /* vocab rows (ne[1]), padded to the engine's multiple, then
                                 split; the padding rows are zeros; logits all-gathered */
    GGUF_RULE_MERGED,         /* a column slice that is one slot of a fused parameter
                                 (gate_up_proj: slot 0 gate, slot 1 up), slots in order */
    GGUF_RULE_QKV,            /* one slot of qkv_proj (0 q, 1 k, 2 v) by whole heads; kv heads
                                 replicated when tp > n_head_kv (rank r: kv head r*n_kv/tp) */
    GGUF_RULE_HEADS,          /* by whole attention heads along the head dimension: MLA
                                 q_b (rows), attn_k_b/attn_v_b (ne[2]), kv_b_proj (rows) */
    GGUF_RULE_EXPERT,         /* stacked experts: ne[2] by ep, and (moe_tp > 1) the
                                 intermediate: gate/up rows (ne[1]), down inputs (ne[0]) */
    GGUF_RULE_COUNT
} gguf_shard_rule;

/* "replicated", "column", "row", "vocab", "merged", "qkv", "heads", "expert". */
const char *gguf_shard_rule_name(gguf_shard_rule r);

/*
 * One piece of a rank's tensor: the box [lo[d], hi[d]) of a source tensor
 * (d = 0..3, ggml dims), placed at offset `dst` along the entry's cat_dim of
 * the rank's tensor:
 *   cat_dim 0: box row k goes to row k of the rank's tensor, columns
 *              [dst, dst + hi[0]-lo[0]) (row-parallel cuts);
 *   cat_dim d >= 1: the box's elements, in ggml order (dim 0 fastest), are
 *              written one after the other from element dst * ne[0]*..*ne[d-1]
 *              of the rank's tensor.
 * With `transpose` the box is 2-D (one index of dims 2 and 3) and its
 * transpose is written instead: one output row per dim-0 index (k_b -> the k
 * rows of kv_b_proj). Most slices are one piece of their own tensor; fused or
 * reassembled tensors and some faults take pieces of other tensors.
 */
typedef struct gguf_shard_piece {
    int32_t src;         /* index of the source entry in the plan (a stored tensor) */
    bool transpose;
    int64_t lo[4], hi[4];
    int64_t dst;
} gguf_shard_piece;

/*
 * What rank r holds of one entry. A slice can hold more than the rank needs
 * (kv-b-whole gives every rank all heads of kv_b): a backend then uses it from
 * the start, as the engine's loader did (its parameter views the first rows).
 */
typedef struct gguf_shard_slice {
    int32_t n_pieces;
    const gguf_shard_piece *pieces;
    int64_t ne[4];       /* the rank's shape (ggml order), padding included */
    int64_t pad;         /* zeros appended along cat_dim (vocab padding; some faults) */
    int64_t range_lo;    /* the range of the full entry along split_dim that the rank */
    int64_t range_hi;    /* holds, when one contiguous range; else both -1 */
    uint64_t bytes;      /* bytes held: source type when quant_cut_ok, else F32 */
    bool quant_cut_ok;   /* every piece cuts from the stored bytes as they are */
    const char *reason;  /* when !quant_cut_ok: why the slice must be dequantized first */
} gguf_shard_slice;

/* One entry of the plan: a stored tensor, or a virtual (HF-side) tensor. */
typedef struct gguf_shard_tensor {
    const char *name;          /* GGUF name; virtual entries: e.g. "blk.3.attn_kv_b.weight" */
    const char *hf_name;       /* NULL when none */
    gguf_role role;
    int64_t layer;             /* -1 for global tensors */
    gguf_shard_rule rule;
    int split_dim;             /* ggml dim cut over tp (or moe_tp); -1 when not cut */
    int expert_dim;            /* 2 for stacked experts split over ep, else -1 */
    int cat_dim;               /* dim along which the pieces are placed */
    const char *fused;         /* HF fused parameter ("qkv_proj", "gate_up_proj",
                                  "experts.w13", "kv_b_proj") or NULL */
    int slot;                  /* position in the fused parameter, -1 when not fused */
    bool reduce_sum;           /* the op's partial outputs must be all-reduced (row rule) */
    bool is_virtual;           /* not stored in the file: kv_b_proj reassembled from
                                  attn_k_b/attn_v_b (what engines load); rank pieces point
                                  into the stored tensors */
    bool consumed;             /* the engine loads it (false: nobody consumes it) */
    const gguf_tensor *t;      /* the stored tensor; NULL for virtual entries */
    uint32_t type;             /* t->type, or the stored parts' type */
    uint32_t n_dims;
    int64_t ne[4];             /* the full (unsharded) shape */
    const gguf_shard_slice *ranks; /* tp entries */
} gguf_shard_tensor;

typedef enum gguf_check_level { GGUF_CHECK_INFO = 0, GGUF_CHECK_WARN, GGUF_CHECK_ERROR } gguf_check_level;

/* A finding of the plan's checks. */
typedef struct gguf_shard_check {
    gguf_check_level level;
    const char *code;      /* stable: "heads", "kv_heads", "ffn", "expert_ffn", "vocab",
                              "quant_block", "experts_ep", "ep_config", "missing",
                              "unconsumed", "fault" */
    const char *tensor;    /* the tensor concerned, or NULL */
    char message[320];
} gguf_shard_check;

/*
 * Settings an engine applies while loading, outside the weights. The
 * configuration faults change these; a backend must honour them.
 */
typedef struct gguf_shard_runtime {
    gguf_rope_pairs rope_pairs; /* the pairs the engine rotates (the model's, normally) */
    double attn_scale;          /* softmax scale the engine uses */
    double routed_scale;        /* factor on the routed experts' weights */
    bool use_exp_probs_b;       /* selection bias applied (when the model has it) */
    bool norm_topk;             /* top-k weights renormalised */
    double shared_scale;        /* factor on the shared experts' output (1) */
    bool mla_cache_replicated;  /* every rank keeps the whole latent KV cache */
} gguf_shard_runtime;

typedef struct gguf_shard_opts {
    unsigned int version; /* GGUF_SHARD_OPTS_VERSION, or 0 for the same (see below) */
    int tp;                /* tensor-parallel ranks, >= 1 */
    int ep;                /* expert-parallel size; 0 or 1: experts not split by expert */
    gguf_engine engine;
    int vocab_pad;         /* vocab padding multiple; 0: the engine's (64 for both) */
} gguf_shard_opts;
/* The layout version of gguf_shard_opts: the library refuses a larger one with
 * GGUF_E_OPTS_VERSION (docs/conventions.md, "Options structs"). */
#define GGUF_SHARD_OPTS_VERSION 1
/* The defaults, version set: gguf_shard_opts o = GGUF_SHARD_OPTS_INIT; */
#define GGUF_SHARD_OPTS_INIT {.version = GGUF_SHARD_OPTS_VERSION}

typedef struct gguf_shard_plan gguf_shard_plan;

/*
 * Build the plan. Divisibility problems do not fail the build: they become
 * checks of level GGUF_CHECK_ERROR (the slices are then balanced floor
 * splits, so the plan still covers the tensor).
 * @return 0; GGUF_E_INVALID (tp < 1 or > 4096, ep < 0, ep > number of
 *         experts, unknown engine); GGUF_E_NOMEM.
 */
int gguf_shard_plan_create(gguf_shard_plan **out, const gguf_model *m, const gguf_shard_opts *opts,
                           gguf_error *err);
void gguf_shard_plan_free(gguf_shard_plan *p);

const gguf_model *gguf_shard_plan_model(const gguf_shard_plan *p);
const gguf_shard_opts *gguf_shard_plan_opts(const gguf_shard_plan *p);
int gguf_shard_plan_ranks(const gguf_shard_plan *p);  /* tp */
int gguf_shard_plan_moe_tp(const gguf_shard_plan *p); /* intermediate split of experts */
/* Expert-parallel index of rank r, and the range of experts it owns. */
int gguf_shard_plan_ep_rank(const gguf_shard_plan *p, int r);
void gguf_shard_plan_experts(const gguf_shard_plan *p, int r, int64_t *first, int64_t *end);

/* Entries: every stored tensor in model order, then virtual entries. */
int64_t gguf_shard_plan_count(const gguf_shard_plan *p);
const gguf_shard_tensor *gguf_shard_plan_at(const gguf_shard_plan *p, int64_t i);
const gguf_shard_tensor *gguf_shard_plan_find(const gguf_shard_plan *p, const char *name);
/*
 * The entry a backend uses for (layer, role). For ATTN_KV_B in a file with
 * split attn_k_b/attn_v_b this is the virtual kv_b_proj entry.
 */
const gguf_shard_tensor *gguf_shard_plan_get(const gguf_shard_plan *p, int64_t layer,
                                             gguf_role role);

const gguf_shard_runtime *gguf_shard_plan_runtime(const gguf_shard_plan *p);

int64_t gguf_shard_plan_check_count(const gguf_shard_plan *p);
const gguf_shard_check *gguf_shard_plan_check_at(const gguf_shard_plan *p, int64_t i);
/* Number of checks at `level` or above. */
int64_t gguf_shard_plan_check_worst(const gguf_shard_plan *p, gguf_check_level level);

/* Bytes of stored tensors rank r holds (virtual and unconsumed entries not counted;
 * NextN blocks counted). */
uint64_t gguf_shard_plan_rank_bytes(const gguf_shard_plan *p, int r);
/* The largest rank: its bytes, and its index into *rank (may be NULL). */
uint64_t gguf_shard_plan_max_rank_bytes(const gguf_shard_plan *p, int *rank);

/*
 * Materialize rank r's slice of entry i as F32 into out (n floats, n = the
 * product of the slice's ne): pieces dequantized, transposed and placed,
 * padding zero. Needs the tensors' data (not for header-only models).
 * @return 0; GGUF_E_INVALID (bad index/rank, n too small, no data);
 *         GGUF_E_BAD_TYPE (a type that cannot be dequantized); GGUF_E_NOMEM.
 */
int gguf_shard_materialize(const gguf_shard_plan *p, int64_t i, int r, float *out, size_t n,
                           gguf_error *err);

/* ------------------------------------------------------------------------
 * The fault catalog. Each fault models a real incident (docs/faults.md cites
 * the engine issue); applying it transforms the plan (pieces, rules, reduce
 * flags) or its runtime settings exactly as the broken engine did.
 * ---------------------------------------------------------------------- */
typedef enum gguf_fault {
    GGUF_FAULT_NONE = 0,
    GGUF_FAULT_KV_B_WHOLE,          /* kv_b_proj whole on every rank */
    GGUF_FAULT_KV_B_ROWS,           /* kv_b rows cut with the q/k head width (nope+rope)
                                       instead of kv_b's (nope+v): not whole heads */
    GGUF_FAULT_KV_B_STACKED,        /* k and v halves stacked [K all heads; V all heads],
                                       not interleaved per head, then cut by rows */
    GGUF_FAULT_K_B_NO_TRANSPOSE,    /* k_b used without its transpose */
    GGUF_FAULT_QKV_STREAM,          /* fused qkv cut in stream order, not slot order */
    GGUF_FAULT_GATE_UP_STREAM,      /* fused gate_up cut in stream order, not slot order */
    GGUF_FAULT_RANK0_EVERYWHERE,    /* every rank given rank 0's slice */
    GGUF_FAULT_KV_HEADS_SPLIT,      /* kv heads split, not replicated, when tp > n_head_kv;
                                       the per-head k norm sliced with them */
    GGUF_FAULT_MLA_CACHE_SHARDED,   /* MLA latent (kv_a_mqa, kv_a_norm) sharded over ranks */
    GGUF_FAULT_NO_ALLREDUCE,        /* row-parallel outputs not all-reduced */
    GGUF_FAULT_QUANT_OFF_BLOCK,     /* inner cuts of quantized tensors off block boundaries */
    GGUF_FAULT_VOCAB_NO_PAD,        /* vocab split without the engine's padding */
    GGUF_FAULT_EXPERT_OFFSET,       /* experts owned with an offset of one */
    GGUF_FAULT_NORM_SLICED,         /* a replicated norm (attn_norm) sliced over ranks */
    GGUF_FAULT_ROPE_PAIRS,          /* config: RoPE pair convention swapped (llama's Q/K
                                       permutation ignored) */
    GGUF_FAULT_YARN_MSCALE,         /* config: YaRN mscale^2 missing from the softmax scale */
    GGUF_FAULT_ROUTED_SCALE,        /* config: routed_scaling_factor not applied */
    GGUF_FAULT_EXP_PROBS_B,         /* config: expert selection bias (e_score_correction)
                                       ignored */
    GGUF_FAULT_SHARED_SCALED,       /* config: shared expert scaled by routed_scaling_factor */
    GGUF_FAULT_ROUTED_SCALE_TWICE,  /* config: routed_scaling_factor applied twice */
    GGUF_FAULT_SHARED_DOUBLE_REDUCE,/* config: shared expert output all-reduced twice (x tp) */
    GGUF_FAULT_COUNT
} gguf_fault;

/* Stable kebab-case name ("kv-b-whole"), or "none"/"unknown". */
const char *gguf_fault_name(gguf_fault f);
/* One line describing the fault. */
const char *gguf_fault_summary(gguf_fault f);
/* @return 0 and *out, or GGUF_E_INVALID for an unknown name. */
int gguf_fault_from_name(const char *name, gguf_fault *out);
/* True for faults that change the runtime settings rather than the weights. */
bool gguf_fault_is_config(gguf_fault f);

/*
 * Apply a fault to the plan, to one layer (layer >= 0) or to all (-1).
 * A "fault" check (level ERROR) records it.
 * @return 0; GGUF_E_UNSUPPORTED when the fault cannot occur in this model or
 *         plan (no MLA, tp 1, tp <= n_head_kv, no quantized inner cut, no
 *         padding to omit, ...), with the reason in err; GGUF_E_INVALID;
 *         GGUF_E_NOMEM.
 */
int gguf_shard_apply_fault(gguf_shard_plan *p, gguf_fault f, int64_t layer, gguf_error *err);

/*
 * A fault as users write it: "FAULT" (every layer) or "FAULT@LAYER".
 * @return 0 with *f and *layer (-1: all); GGUF_E_INVALID naming the text and
 *         what is wrong (unknown fault, a layer that is not a number).
 */
int gguf_fault_parse(const char *spec, gguf_fault *f, int64_t *layer, gguf_error *err);

/* gguf_fault_parse, then gguf_shard_apply_fault. */
int gguf_shard_apply_fault_spec(gguf_shard_plan *p, const char *spec, gguf_error *err);

#define GGUF_PLAN_DIGEST_HEX 33
/*
 * A digest of everything a plan says: per entry its rule, flags and every
 * rank's pieces and shape, then the options and the runtime settings. Two
 * runs with the same digest sliced the model the same way (records carry it).
 * hex receives 32 hex digits and a NUL ("" when out of memory).
 */
void gguf_shard_plan_digest(const gguf_shard_plan *p, char hex[GGUF_PLAN_DIGEST_HEX]);

GGUF_END_DECLS
#endif /* GGUF_SHARD_H */
