/* Internal layout of gguf_model; shared by the model_*.c files. Not installed. */
#ifndef GGUF_MODEL_INTERNAL_H
#define GGUF_MODEL_INTERNAL_H

#include "gguf/model.h"
#include "util/names.h"

typedef struct model_hf model_hf; /* a model over an HF checkpoint (model_hf.c) */

struct gguf_model {
    char *name;
    const gguf_file *meta;    /* NULL for a model over an HF checkpoint */
    gguf_hparams hp;
    int64_t n;
    gguf_model_tensor *mt;
    const gguf_tensor **tp;   /* mt[i].t, for the name index */
    gguf_name_index ix;
    int32_t *by_role;         /* (n_layer + 1) x GGUF_ROLE_COUNT: index + 1, row 0 global */
    char *hf_arena;           /* HF names, MODEL_HF_LEN bytes per tensor */
    model_hf *hf;             /* the checkpoint and its weights, or NULL (GGUF) */
};

#define MODEL_HF_LEN 128

/* "blk.N.STEM.SUFFIX" or "STEM.SUFFIX" for global roles. @return 0 or GGUF_E_LIMIT. */
int model_role_gguf_name(gguf_role role, int64_t il, char *out, size_t size);

/* How a source names a hyper-parameter in messages: the GGUF key suffix
 * ("block_count") becomes "llama.block_count", or config.json's key. */
typedef struct model_key_names {
    void (*name)(const void *user, const char *gguf_suffix, char *out, size_t size);
    const void *user;
} model_key_names;

/* The checks of the hyper-parameters against each other that every source
 * gets (sizes, heads, RoPE width, MLA ranks, expert counts and groups, the
 * indexer); sets n_layer_main. @return 0 or GGUF_E_BAD_VALUE naming the key. */
int model_hparams_check(gguf_hparams *hp, const char *name, const model_key_names *kn,
                        gguf_error *err);
/* What derives from the architecture and the values alone: is_mla, the
 * default gating, RoPE pairs, llama's permuted Q/K, YaRN mscale, softmax scale. */
void model_hparams_defaults(gguf_hparams *hp);

gguf_layer_kind model_layer_kind(const gguf_hparams *hp, int64_t il);
/* 1 required, 2 optional, 0 not part of layer il. */
int model_role_expected(const gguf_hparams *hp, int64_t il, gguf_role r);
int model_expected_shape(const gguf_hparams *hp, int64_t il, gguf_role r, int64_t ne[4],
                         uint32_t *nd);

/* Give m (name and hp set) its tensors: roles, layers, HF names, the name
 * index, required tensors present and shapes as the hyper-parameters say. */
int model_assemble(gguf_model *m, const gguf_tensor *const *ts, int64_t n, uint32_t flags,
                   gguf_error *err);

void model_hf_free(model_hf *hf); /* NULL is fine */

/* What config.json says beyond the hyper-parameters (model_hf_config.c). */
typedef struct model_hf_config {
    gguf_hparams hp;             /* tied_embeddings from tie_word_embeddings; the flags that
                                    depend on tensors (biases, q/k norms, exp_probs_b) false */
    bool tie;                    /* tie_word_embeddings */
    bool deepseek_v2;            /* DeepseekV2ForCausalLM (its class defaults) */
    int32_t bos, eos;            /* bos_token_id / eos_token_id (first of a list), -1 absent */
    double l3_factor, l3_low, l3_high; /* rope_type "llama3" (l3_factor > 0): rope_freqs */
    int64_t l3_orig;             /* its original_max_position_embeddings */
    char model_type[32];
} model_hf_config;

/* Parse config.json text (name in messages); checks as for GGUF metadata.
 * @return 0 or the codes of gguf_hparams_from_hf_config. */
int model_hf_config_parse(model_hf_config *out, const char *json, size_t len, const char *name,
                          gguf_error *err);

#endif
