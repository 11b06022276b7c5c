/*
 * gguf/model.h - what a GGUF file describes: the architecture, its
 * hyper-parameters, and the role of every tensor (with its HuggingFace name).
 *
 * A gguf_model is built over an open gguf_set (or over a metadata file plus a
 * list of tensor infos, for header-only replicas). Building it reads the
 * metadata keys the forward pass needs, checks them against each other and
 * against the tensor shapes, and gives every tensor a role and a layer:
 *
 *     blk.3.attn_k_b.weight  ->  layer 3, GGUF_ROLE_ATTN_K_B,
 *                                HF "model.layers.3.self_attn.kv_b_proj.weight" (k part, transposed)
 *
 * Supported architectures (general.architecture):
 *   llama      dense; the llama converter permutes the rows of attn_q/attn_k
 *              so that adjacent-pair RoPE on the GGUF equals HF's half-split
 *              RoPE (see gguf_llama_qk_row_to_hf)
 *   qwen2      dense, q/k/v biases, half-split RoPE
 *   qwen3      dense, per-head q/k RMS norms, half-split RoPE
 *   qwen3moe   qwen3 attention, routed experts (softmax), no shared expert
 *   deepseek2  DeepSeek-V2/V3/R1, Kimi-K2: MLA (q_lora or plain q; attn_k_b +
 *              attn_v_b, or legacy attn_kv_b), leading dense layers, routed +
 *              shared experts, softmax or sigmoid gating, exp_probs_b, group-
 *              limited routing, YaRN with mscale, adjacent-pair RoPE
 *   glm4moe    GLM-4.5/4.6: GQA with q/k/v biases and optional q/k norms,
 *              partial half-split RoPE; its post_attention_norm is the pre-FFN
 *              norm; MoE like deepseek2 (sigmoid); next-token-prediction
 *              (NextN/MTP) blocks counted in block_count
 *   glm-dsa    GLM-5: the deepseek2 layout plus the DSA indexer tensors and
 *              NextN blocks counted in block_count
 *
 * Lifetimes: the model borrows the set (or the meta file and tensor infos) it
 * was built on; they must outlive it. Every pointer it hands out borrows from
 * the model and lives until gguf_model_free().
 */
#ifndef GGUF_MODEL_H
#define GGUF_MODEL_H

#include "gguf/export.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/error.h"
#include "gguf/file.h"
#include "gguf/hash.h"
#include "gguf/safetensors.h"

GGUF_BEGIN_DECLS

typedef enum gguf_arch {
    GGUF_ARCH_UNKNOWN = 0,
    GGUF_ARCH_LLAMA,
    GGUF_ARCH_QWEN2,
    GGUF_ARCH_QWEN3,
    GGUF_ARCH_QWEN3MOE,
    GGUF_ARCH_DEEPSEEK2,
    GGUF_ARCH_GLM4MOE,
    GGUF_ARCH_GLM_DSA,
    GGUF_ARCH_COUNT
} gguf_arch;

/* "llama", "deepseek2", "glm-dsa", ... (the general.architecture string); "unknown". */
const char *gguf_arch_name(gguf_arch arch);
/* Architecture for a general.architecture string, or GGUF_ARCH_UNKNOWN. */
gguf_arch gguf_arch_from_name(const char *name);
/*
 * The architecture whose tensor names and converter layouts a
 * general.architecture string shares: gguf_arch_from_name's answer, or, for
 * an architecture this library does not model but that llama.cpp converts
 * with llama's converter (names, and attn_q/attn_k rows permuted per head:
 * "mistral", "granite"), GGUF_ARCH_LLAMA. Tools that map tensor names (not
 * the forward pass, which needs the hyper-parameters too) use this.
 * @return the architecture, or GGUF_ARCH_UNKNOWN (also for NULL).
 */
gguf_arch gguf_arch_naming_from_name(const char *name);

/*
 * Which elements of a head RoPE rotates together.
 *   ADJACENT (ggml "norm"): pairs (x[2i], x[2i+1]) - llama (after the
 *            converter's Q/K row permutation), deepseek2, glm-dsa.
 *   HALF     (ggml "neox"): pairs (x[i], x[i + n_rot/2]) - qwen2/3, glm4moe,
 *            and HF's own rotate_half form.
 */
typedef enum gguf_rope_pairs { GGUF_ROPE_ADJACENT = 0, GGUF_ROPE_HALF = 1 } gguf_rope_pairs;

typedef enum gguf_rope_scaling {
    GGUF_ROPE_SCALING_NONE = 0,
    GGUF_ROPE_SCALING_LINEAR,
    GGUF_ROPE_SCALING_YARN,
    GGUF_ROPE_SCALING_LONGROPE
} gguf_rope_scaling;

/* Values of ARCH.expert_gating_func (llama.cpp's numbering). */
typedef enum gguf_gating {
    GGUF_GATING_NONE = 0,           /* absent: the architecture's default applies */
    GGUF_GATING_SOFTMAX = 1,
    GGUF_GATING_SIGMOID = 2,
    GGUF_GATING_SOFTMAX_WEIGHT = 3
} gguf_gating;

/*
 * Hyper-parameters. Every count is an int64_t (0 when the feature is absent);
 * the metadata key each field comes from is given with ARCH = the architecture
 * string. Fields marked "derived" are computed, not stored in the file.
 */
typedef struct gguf_hparams {
    gguf_arch arch;
    char arch_name[32];          /* general.architecture */

    /* sizes */
    int64_t n_vocab;             /* ARCH.vocab_size, else len(tokenizer.ggml.tokens),
                                    else token_embd ne[1]; checked against token_embd */
    int64_t n_ctx_train;         /* ARCH.context_length (0 when absent) */
    int64_t n_embd;              /* ARCH.embedding_length */
    int64_t n_layer;             /* ARCH.block_count: includes NextN blocks */
    int64_t n_nextn;             /* ARCH.nextn_predict_layers: the last n_nextn blocks */
    int64_t n_layer_main;        /* derived: n_layer - n_nextn, the blocks the forward runs */
    int64_t n_ff;                /* ARCH.feed_forward_length: dense FFN width */

    /* attention */
    int64_t n_head;              /* ARCH.attention.head_count */
    int64_t n_head_kv;           /* ARCH.attention.head_count_kv (default n_head). For MLA
                                    files this is 1 (one shared latent): NEVER size kv_b or
                                    shard heads from it; use n_head. */
    int64_t n_embd_head_k;       /* per-head q/k width; MLA: qk_nope + qk_rope */
    int64_t n_embd_head_v;       /* per-head v width; MLA: v_head */
    double rms_eps;              /* ARCH.attention.layer_norm_rms_epsilon */
    bool attn_qkv_bias;          /* derived: attn_q.bias present (qwen2, glm4moe) */
    bool attn_qk_norm;           /* derived: attn_q_norm present (qwen3, some glm4moe) */

    /* RoPE */
    int64_t n_rot;               /* ARCH.rope.dimension_count (default n_embd_head_k);
                                    MLA: = qk_rope */
    double rope_freq_base;       /* ARCH.rope.freq_base (default 10000) */
    gguf_rope_pairs rope_pairs;  /* derived from the architecture */
    bool llama_qk_permuted;      /* derived: llama's attn_q/attn_k rows are permuted */
    gguf_rope_scaling rope_scaling; /* ARCH.rope.scaling.type ("none","linear","yarn") */
    double rope_factor;          /* ARCH.rope.scaling.factor (1 when absent) */
    double rope_attn_factor;     /* ARCH.rope.scaling.attn_factor (1 when absent) */
    int64_t yarn_orig_ctx;       /* ARCH.rope.scaling.original_context_length */
    double yarn_beta_fast;       /* ARCH.rope.scaling.yarn_beta_fast (default 32) */
    double yarn_beta_slow;       /* ARCH.rope.scaling.yarn_beta_slow (default 1) */
    double yarn_log_mul;         /* ARCH.rope.scaling.yarn_log_multiplier as stored: the
                                    converter writes 0.1 * mscale_all_dim (0 when absent) */
    double yarn_mscale;          /* derived: 1 + yarn_log_mul * ln(rope_factor) for YaRN
                                    with yarn_log_mul > 0, else 1 */
    double attn_scale;           /* derived softmax scale: yarn_mscale^2 / sqrt(n_embd_head_k)
                                    (1/sqrt(n_embd_head_k) without YaRN mscale) */

    /* MLA (deepseek2, glm-dsa) */
    bool is_mla;                 /* derived: the architecture uses MLA */
    bool mla_kv_b_split;         /* derived: attn_k_b/attn_v_b (true) or legacy attn_kv_b */
    int64_t q_lora_rank;         /* ARCH.attention.q_lora_rank (0: plain attn_q) */
    int64_t kv_lora_rank;        /* ARCH.attention.kv_lora_rank */
    int64_t qk_nope;             /* derived: key_length_mla - rope.dimension_count */
    int64_t qk_rope;             /* ARCH.rope.dimension_count */
    int64_t v_head;              /* ARCH.attention.value_length_mla (legacy: value_length) */

    /* MoE */
    int64_t n_expert;            /* ARCH.expert_count (0: dense model) */
    int64_t n_expert_used;       /* ARCH.expert_used_count */
    int64_t n_expert_shared;     /* ARCH.expert_shared_count (0 when absent) */
    int64_t n_ff_exp;            /* ARCH.expert_feed_forward_length: one expert's width */
    int64_t n_ff_shexp;          /* derived: n_ff_exp * n_expert_shared (or the
                                    ffn_*_shexp width found in the file) */
    int64_t n_layer_dense_lead;  /* ARCH.leading_dense_block_count (0 when absent) */
    gguf_gating gating;          /* ARCH.expert_gating_func, with the arch default applied */
    bool norm_topk;              /* ARCH.expert_weights_norm (qwen3moe default true) */
    double routed_scale;         /* ARCH.expert_weights_scale (1 when absent) */
    int64_t n_group;             /* ARCH.expert_group_count (0/1: no group routing) */
    int64_t topk_group;          /* ARCH.expert_group_used_count */
    bool has_exp_probs_b;        /* derived: exp_probs_b.bias present (selection bias) */

    /* DSA indexer (glm-dsa) */
    int64_t idx_n_head;          /* ARCH.attention.indexer.head_count */
    int64_t idx_head_dim;        /* ARCH.attention.indexer.key_length */
    int64_t idx_top_k;           /* ARCH.attention.indexer.top_k */

    bool tied_embeddings;        /* derived: no output.weight; token_embd is the head */
} gguf_hparams;

/*
 * Tensor roles. Global roles have layer -1; every other role lives in a block.
 * GGUF tensor names: "blk.N." + gguf_role_name(role) + ".weight" (or ".bias").
 */
typedef enum gguf_role {
    GGUF_ROLE_UNKNOWN = 0,
    /* global */
    GGUF_ROLE_TOKEN_EMBD,        /* token_embd.weight        [n_embd, n_vocab] */
    GGUF_ROLE_OUTPUT_NORM,       /* output_norm.weight       [n_embd] */
    GGUF_ROLE_OUTPUT,            /* output.weight            [n_embd, n_vocab] */
    GGUF_ROLE_ROPE_FREQS,        /* rope_freqs.weight        [n_rot/2] (llama 3.x) */
    /* attention, plain */
    GGUF_ROLE_ATTN_NORM,         /* [n_embd] */
    GGUF_ROLE_ATTN_Q,            /* [n_embd, n_head*head_k] (MLA without q_lora too) */
    GGUF_ROLE_ATTN_K,            /* [n_embd, n_head_kv*head_k] */
    GGUF_ROLE_ATTN_V,            /* [n_embd, n_head_kv*head_v] */
    GGUF_ROLE_ATTN_Q_BIAS,       /* attn_q.bias [n_head*head_k] */
    GGUF_ROLE_ATTN_K_BIAS,
    GGUF_ROLE_ATTN_V_BIAS,
    GGUF_ROLE_ATTN_Q_NORM,       /* [head_k], applied per head */
    GGUF_ROLE_ATTN_K_NORM,       /* [head_k], applied per head */
    GGUF_ROLE_ATTN_OUT,          /* [n_head*head_v, n_embd] */
    GGUF_ROLE_ATTN_POST_NORM,    /* glm4moe post_attention_norm: the PRE-FFN norm */
    /* attention, MLA */
    GGUF_ROLE_ATTN_Q_A,          /* [n_embd, q_lora] */
    GGUF_ROLE_ATTN_Q_A_NORM,     /* [q_lora] */
    GGUF_ROLE_ATTN_Q_B,          /* [q_lora, n_head*(nope+rope)] */
    GGUF_ROLE_ATTN_KV_A_MQA,     /* [n_embd, kv_lora+rope] */
    GGUF_ROLE_ATTN_KV_A_NORM,    /* [kv_lora] */
    GGUF_ROLE_ATTN_KV_B,         /* legacy [kv_lora, n_head*(nope+v)] */
    GGUF_ROLE_ATTN_K_B,          /* [nope, kv_lora, n_head]: HF k part, transposed */
    GGUF_ROLE_ATTN_V_B,          /* [kv_lora, v_head, n_head]: HF v part */
    /* FFN, dense */
    GGUF_ROLE_FFN_NORM,          /* [n_embd] */
    GGUF_ROLE_FFN_GATE,          /* [n_embd, n_ff] */
    GGUF_ROLE_FFN_UP,            /* [n_embd, n_ff] */
    GGUF_ROLE_FFN_DOWN,          /* [n_ff, n_embd] */
    /* FFN, MoE */
    GGUF_ROLE_FFN_GATE_INP,      /* router [n_embd, n_expert] */
    GGUF_ROLE_FFN_EXP_PROBS_B,   /* exp_probs_b.bias [n_expert] */
    GGUF_ROLE_FFN_GATE_EXPS,     /* [n_embd, n_ff_exp, n_expert] */
    GGUF_ROLE_FFN_UP_EXPS,       /* [n_embd, n_ff_exp, n_expert] */
    GGUF_ROLE_FFN_DOWN_EXPS,     /* [n_ff_exp, n_embd, n_expert] */
    GGUF_ROLE_FFN_GATE_SHEXP,    /* [n_embd, n_ff_shexp] */
    GGUF_ROLE_FFN_UP_SHEXP,
    GGUF_ROLE_FFN_DOWN_SHEXP,    /* [n_ff_shexp, n_embd] */
    /* DSA indexer (glm-dsa) */
    GGUF_ROLE_IDX_K_NORM,        /* indexer.k_norm.weight [idx_head_dim] */
    GGUF_ROLE_IDX_K_NORM_BIAS,   /* indexer.k_norm.bias   [idx_head_dim] */
    GGUF_ROLE_IDX_PROJ,          /* indexer.proj.weight   [n_embd, idx_n_head] */
    GGUF_ROLE_IDX_ATTN_K,        /* indexer.attn_k.weight [n_embd, idx_head_dim] */
    GGUF_ROLE_IDX_ATTN_Q_B,      /* indexer.attn_q_b.weight [q_lora, idx_n_head*idx_head_dim] */
    /* next-token prediction (NextN/MTP) blocks */
    GGUF_ROLE_NEXTN_EH_PROJ,     /* [2*n_embd, n_embd] */
    GGUF_ROLE_NEXTN_EMBED_TOKENS,
    GGUF_ROLE_NEXTN_ENORM,
    GGUF_ROLE_NEXTN_HNORM,
    GGUF_ROLE_NEXTN_SHARED_HEAD_HEAD,
    GGUF_ROLE_NEXTN_SHARED_HEAD_NORM,
    GGUF_ROLE_COUNT
} gguf_role;

/* The GGUF name stem, e.g. "attn_k_b", "token_embd", "indexer.k_norm"; "unknown". */
const char *gguf_role_name(gguf_role role);
/* The tensor-name suffix: "bias" for the *_BIAS roles and exp_probs_b, else "weight". */
const char *gguf_role_suffix(gguf_role role);
/* True for roles of the global (non-block) tensors. */
bool gguf_role_is_global(gguf_role role);

typedef enum gguf_layer_kind {
    GGUF_LAYER_DENSE = 0,        /* dense FFN */
    GGUF_LAYER_MOE,              /* routed experts (plus shared experts if any) */
    GGUF_LAYER_NEXTN             /* a next-token-prediction block (not run by the forward) */
} gguf_layer_kind;

/* One tensor of the model as the model module sees it. */
typedef struct gguf_model_tensor {
    const gguf_tensor *t;        /* borrowed from the set (or the caller's list) */
    gguf_role role;
    int64_t layer;               /* -1 for global tensors */
    const char *hf_name;         /* e.g. "model.layers.3.mlp.experts.*.gate_proj.weight" */
    const char *hf_note;         /* NULL, or how the GGUF tensor derives from the HF one,
                                    e.g. "k part of kv_b_proj, per head, transposed" */
} gguf_model_tensor;

typedef struct gguf_model gguf_model;

/*
 * Build a model over an open set. Reads the metadata of the set's first part.
 * Unknown tensors (no role in the architecture's table) are kept with
 * GGUF_ROLE_UNKNOWN; tensors the architecture requires but the file lacks,
 * and shapes that disagree with the hyper-parameters, are errors.
 * @return 0;
 *   GGUF_E_NOT_FOUND   a required key or tensor is missing (the message lists
 *                      every missing key, e.g. "m.gguf: missing metadata:
 *                      deepseek2.attention.kv_lora_rank, deepseek2.expert_count");
 *   GGUF_E_WRONG_TYPE  a key has a non-numeric type;
 *   GGUF_E_BAD_VALUE   a value is out of range or inconsistent (names the key(s)
 *                      and the tensor, e.g. "blk.0.attn_k_b.weight: ne[2] = 4,
 *                      expected n_head = 8 (deepseek2.attention.head_count)");
 *   GGUF_E_BAD_SHAPE   a tensor's shape disagrees with the hyper-parameters;
 *   GGUF_E_UNSUPPORTED an architecture this module does not know, or per-layer
 *                      values (arrays) that differ between layers;
 *   GGUF_E_INVALID     a NULL argument;
 *   GGUF_E_NOMEM.
 */
int gguf_model_open(gguf_model **out, const gguf_set *set, gguf_error *err);

/*
 * Same over a metadata file (its own tensors ignored) and a caller's list of
 * tensor infos (data may be NULL): header-only replicas of models too large
 * to hold, e.g. built from ../shared/testdata/tensor-maps. Both must outlive
 * the model. `name` is used in messages. Also GGUF_E_DUPLICATE when a name
 * appears twice in the list.
 */
int gguf_model_open_parts(gguf_model **out, const gguf_file *meta,
                          const gguf_tensor *const *tensors, int64_t n_tensors, const char *name,
                          gguf_error *err);

enum {
    /* Open even when tensors the architecture requires are missing (shape
     * checks still apply to those present): for tools that report what is
     * missing, such as shard-plan. The forward pass must not use this. */
    GGUF_MODEL_ALLOW_MISSING = 1u << 0,
};

/* gguf_model_open / gguf_model_open_parts with flags (GGUF_MODEL_*). */
int gguf_model_open_flags(gguf_model **out, const gguf_set *set, uint32_t flags, gguf_error *err);
int gguf_model_open_parts_flags(gguf_model **out, const gguf_file *meta,
                                const gguf_tensor *const *tensors, int64_t n_tensors,
                                const char *name, uint32_t flags, gguf_error *err);

/* The metadata file the model reads (the set's first part, or `meta`); NULL
 * for a model over an HF checkpoint (gguf_model_open_hf). */
const gguf_file *gguf_model_meta(const gguf_model *m);

void gguf_model_free(gguf_model *m);

/* Hyper-parameters (never NULL for an open model). */
const gguf_hparams *gguf_model_hparams(const gguf_model *m);
/* The name used in messages (the first part's path, or `name`). */
const char *gguf_model_name(const gguf_model *m);

/* Every tensor, in set order. */
int64_t gguf_model_tensor_count(const gguf_model *m);
const gguf_model_tensor *gguf_model_tensor_at(const gguf_model *m, int64_t i);
/* By GGUF name (O(1)); NULL if absent. */
const gguf_model_tensor *gguf_model_tensor_find(const gguf_model *m, const char *name);

/*
 * The tensor of a role in a layer (layer -1 for global roles), or NULL when
 * the model has none (e.g. no ATTN_Q_BIAS in llama, no OUTPUT when tied:
 * use TOKEN_EMBD then - see hparams.tied_embeddings).
 */
const gguf_tensor *gguf_model_get(const gguf_model *m, int64_t layer, gguf_role role);
const gguf_model_tensor *gguf_model_get_info(const gguf_model *m, int64_t layer, gguf_role role);

/* Kind of block il (0 <= il < n_layer). */
gguf_layer_kind gguf_model_layer_kind(const gguf_model *m, int64_t il);

/*
 * The shape a role must have in layer il given the hyper-parameters (ggml ne
 * order), into ne[4] and *n_dims. Works also for tensors the file lacks.
 * @return 0; GGUF_E_NOT_FOUND when the role does not exist in that layer of
 *         this architecture (e.g. FFN_GATE_EXPS in a dense layer).
 */
int gguf_model_expected_shape(const gguf_model *m, int64_t il, gguf_role role, int64_t ne[4],
                              uint32_t *n_dims);

/*
 * Whether a role is expected in layer il: 1 required, 2 optional (biases,
 * q/k norms, exp_probs_b, nextn extras), 0 not part of that layer.
 */
int gguf_model_role_expected(const gguf_model *m, int64_t il, gguf_role role);

/*
 * HF (transformers) name of a role in layer il into out, e.g.
 * "model.layers.3.self_attn.q_a_proj.weight"; experts stacked by GGUF are
 * named with "*" for the expert index. *note (may be NULL) receives NULL or a
 * note on how the GGUF tensor is derived (permuted, transposed, split).
 * @return 0; GGUF_E_NOT_FOUND for a role with no HF counterpart;
 *         GGUF_E_LIMIT when out is too small.
 */
int gguf_role_hf_name(gguf_arch arch, gguf_role role, int64_t il, char *out, size_t size,
                      const char **note);

/*
 * Parse a GGUF tensor name into role and layer for an architecture
 * ("blk.12.ffn_up_exps.weight" -> GGUF_ROLE_FFN_UP_EXPS, 12).
 * @return 0; GGUF_E_NOT_FOUND when the name has no role.
 */
int gguf_role_parse(gguf_arch arch, const char *gguf_name, gguf_role *role, int64_t *layer);

/*
 * HF name -> GGUF name for an architecture (expert index dropped:
 * "model.layers.3.mlp.experts.17.up_proj.weight" -> "blk.3.ffn_up_exps.weight";
 * kv_b_proj -> "blk.N.attn_k_b.weight" and "blk.N.attn_v_b.weight" when
 * split, so up to two names come back). *n receives 1 or 2.
 * @return 0; GGUF_E_NOT_FOUND; GGUF_E_LIMIT when a buffer is too small.
 */
int gguf_hf_to_gguf_name(gguf_arch arch, bool kv_b_split, const char *hf_name, char out[2][128],
                         int *n);

/*
 * llama's Q/K row permutation. The llama converter reorders the rows of each
 * head of attn_q (and attn_k, with n_head_kv heads) so that adjacent-pair RoPE
 * on the GGUF reproduces HF's half-split RoPE:
 *     GGUF row  h*hd + 2*i + j   holds   HF row  h*hd + j*hd/2 + i
 * for i < hd/2, j in {0,1}. Returns the HF row of a GGUF row (head_dim hd even).
 */
int64_t gguf_llama_qk_row_to_hf(int64_t gguf_row, int64_t head_dim);

/*
 * MLA's kv_b_proj against GGUF's attn_k_b / attn_v_b, element for element.
 * HF keeps one matrix; llama.cpp's converter stores its k part transposed and
 * its v part as two tensors (and older converters kept one attn_kv_b):
 *
 *   kv_b [n_head*(nope+v_head)][kv_lora]  HF kv_b_proj.weight, GGUF attn_kv_b
 *            row h*(nope+v_head) + j:  j < nope: head h's k row j
 *                                      else:     head h's v row j - nope
 *   k_b  [n_head][kv_lora][nope]          GGUF attn_k_b, ne [nope, kv_lora, n_head]:
 *            k_b[h][r][j] = kv_b[h*(nope+v_head) + j][r]            (transposed)
 *   v_b  [n_head][v_head][kv_lora]        GGUF attn_v_b, ne [kv_lora, v_head, n_head]:
 *            v_b[h][d][r] = kv_b[h*(nope+v_head) + nope + d][r]
 *
 * split: kv_b -> k_b, v_b; join: k_b, v_b -> kv_b. Arrays do not overlap.
 * The forward pass, the shard plans' virtual kv_b_proj and the checks against
 * the original checkpoint all go through these two.
 */
void gguf_mla_kv_b_split(const float *kv_b, int64_t n_head, int64_t kv_lora, int64_t nope,
                         int64_t v_head, float *k_b, float *v_b);
void gguf_mla_kv_b_join(const float *k_b, const float *v_b, int64_t n_head, int64_t kv_lora,
                        int64_t nope, int64_t v_head, float *kv_b);
/* The inverse: the GGUF row holding an HF row. */
int64_t gguf_llama_qk_row_from_hf(int64_t hf_row, int64_t head_dim);

/* ---- models over a Hugging Face checkpoint ----
 *
 * The same model from config.json and the safetensors files, each weight
 * presented as the tensor a GGUF conversion would hold: the same names
 * ("blk.3.attn_q.weight"), roles, shapes (ggml ne order) and checks, so that
 * every consumer of a gguf_model (the forward pass) runs it unchanged. What
 * differs from a conversion, and how it is handled:
 *   - hyper-parameters come from config.json (gguf_hparams_from_hf_config);
 *   - llama's q_proj/k_proj rows are in HF order: rows read through
 *     gguf_model_tensor_rows come permuted as the converter permutes them
 *     (gguf_llama_qk_row_to_hf), so adjacent-pair RoPE applies as for GGUF;
 *   - MLA's kv_b_proj is one tensor: the model has the legacy ATTN_KV_B role
 *     (hparams.mla_kv_b_split false), which the forward splits;
 *   - experts are one tensor per expert: FFN_*_EXPS rows are read from
 *     experts.E.*_proj (row r of the stack: expert r / rows_per_expert);
 *   - tie_word_embeddings: no OUTPUT tensor (lm_head ignored when present);
 *   - e_score_correction_bias is FFN_EXP_PROBS_B;
 *   - llama3 RoPE: ROPE_FREQS is computed from rope_scaling (it has data);
 *   - NextN/MTP layers are not part of the model (n_nextn 0);
 *   - a stored tensor no role takes is an error (nothing is dropped silently).
 * Tensor infos of such a model have type F32 and data NULL (ROPE_FREQS
 * aside); gguf_model_meta() is NULL. Weights are read by rows, dequantized by
 * the safetensors module (BF16/F16/F32, FP8 block-scaled, NVFP4, ...).
 */

/*
 * Hyper-parameters from the text of a config.json (len bytes; name in
 * messages). Flags that depend on the tensors (attn_qkv_bias, attn_qk_norm,
 * has_exp_probs_b) are left false; tied_embeddings is tie_word_embeddings.
 * @return 0;
 *   GGUF_E_BAD_VALUE   not a JSON object, malformed JSON (offset: where), a
 *                      value out of range or inconsistent (named by its key);
 *   GGUF_E_BAD_UTF8    invalid UTF-8;
 *   GGUF_E_LIMIT       nested deeper than GGUF_ST_MAX_DEPTH;
 *   GGUF_E_NOT_FOUND   required keys missing (all listed);
 *   GGUF_E_WRONG_TYPE  a key of the wrong JSON type;
 *   GGUF_E_UNSUPPORTED an architecture, activation, RoPE type or layout the
 *                      forward cannot compute (named);
 *   GGUF_E_INVALID     NULL arguments.
 */
int gguf_hparams_from_hf_config(gguf_hparams *out, const char *json, size_t len,
                                const char *name, gguf_error *err);

/* True when path names a checkpoint rather than a GGUF: a folder, a .json
 * (config.json or model.safetensors.index.json) or a .safetensors file. */
bool gguf_model_path_is_hf(const char *path);

/*
 * Open the checkpoint at path (a folder with config.json; its config.json;
 * its model.safetensors.index.json; or one .safetensors file beside a
 * config.json) and build its model. The model owns the checkpoint.
 * @return 0; the codes of gguf_st_set_open and gguf_hparams_from_hf_config;
 *   GGUF_E_NOT_FOUND   tensors the forward needs are missing (HF names
 *                      listed), lm_head without tie_word_embeddings;
 *   GGUF_E_BAD_SHAPE   a weight's shape disagrees with config.json (named,
 *                      with its file and offset);
 *   GGUF_E_UNSUPPORTED a quantization the safetensors module does not read,
 *                      a stored tensor no role takes;
 *   GGUF_E_NOMEM.
 */
int gguf_model_open_hf(gguf_model **out, const char *path, gguf_error *err);

/* The checkpoint of a model from gguf_model_open_hf (borrowed), else NULL. */
const gguf_st_set *gguf_model_checkpoint(const gguf_model *m);

/* config.json's bos_token_id / eos_token_id (the first of a list); -1 when
 * absent or for a GGUF model (whose ids are in its tokenizer metadata). */
void gguf_model_hf_tokens(const gguf_model *m, int32_t *bos, int32_t *eos);

enum {
    /* gguf_model_tensor_rows: drop the mapped pages of the rows read (they
     * are read again on demand), so that memory stays about one chunk. */
    GGUF_MODEL_ROWS_DROP_PAGES = 1u << 0,
};

/*
 * Rows [row0, row0 + n_rows) of tensor mt of a model over a checkpoint, as
 * float32 in the tensor's GGUF layout (ne[0] floats a row; rows counted over
 * ne[1..3], experts stacked), into dst. Reads only the bytes of those rows
 * (and their scales). *bytes_read (may be NULL): stored bytes read.
 * @return 0; GGUF_E_INVALID (a GGUF model, or a tensor not of m; rows outside);
 *         the codes of gguf_st_weight_rows.
 */
int gguf_model_tensor_rows(const gguf_model *m, const gguf_model_tensor *mt, int64_t row0,
                           int64_t n_rows, float *dst, uint32_t flags, uint64_t *bytes_read,
                           gguf_error *err);

/*
 * The checkpoint's digest (what records carry as record.model_digest): XXH3-128
 * over every stored tensor in name order of its name, a NUL, its dtype (u32
 * LE, gguf_st_dtype), n_dims (u32 LE), shape (i64 LE each) and the XXH3-128
 * of its bytes (16 bytes, high half first). Never equal to a GGUF's digest.
 * @return 0; GGUF_E_INVALID (a GGUF model); GGUF_E_NOMEM.
 */
int gguf_model_hf_digest(const gguf_model *m, gguf_digest *out, gguf_error *err);

GGUF_END_DECLS
#endif /* GGUF_MODEL_H */
