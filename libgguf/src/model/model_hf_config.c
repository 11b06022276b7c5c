/*
 * Hyper-parameters from a Hugging Face config.json, for the architectures of
 * the model module, read the way transformers' configuration classes read
 * them (their defaults where a key is absent) and mapped onto the fields a
 * GGUF conversion would carry, so that one forward pass serves both:
 *
 *   architectures[0] / model_type              arch
 *   LlamaForCausalLM        llama              llama
 *   Qwen2ForCausalLM        qwen2              qwen2
 *   Qwen3ForCausalLM        qwen3              qwen3
 *   Qwen3MoeForCausalLM     qwen3_moe          qwen3moe
 *   DeepseekV2ForCausalLM   deepseek_v2        deepseek2
 *   DeepseekV3ForCausalLM   deepseek_v3, kimi_k2  deepseek2
 *   Glm4MoeForCausalLM      glm4_moe           glm4moe
 *   GlmMoeDsaForCausalLM    glm_moe_dsa        glm-dsa
 *
 * Keys: hidden_size, num_hidden_layers, num_attention_heads, vocab_size,
 * rms_norm_eps (required); num_key_value_heads, head_dim, intermediate_size,
 * max_position_embeddings, tie_word_embeddings, rope_theta, rope_scaling or
 * transformers 5's rope_parameters ("default", "linear", "llama3", "yarn");
 * MoE: num_experts | n_routed_experts, num_experts_per_tok,
 * moe_intermediate_size, n_shared_experts, first_k_dense_replace (or
 * mlp_layer_types), norm_topk_prob, routed_scaling_factor, n_group,
 * topk_group, scoring_func, topk_method; MLA: q_lora_rank (null: none),
 * kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim; glm4_moe:
 * partial_rotary_factor; glm_moe_dsa: index_n_heads, index_head_dim,
 * index_topk. What this forward cannot compute is refused by name (another
 * activation, sliding windows, sparse MoE steps, dynamic/longrope RoPE, MLA
 * RoPE that is not interleaved, YaRN mscale != mscale_all_dim).
 * NextN/MTP layers are not counted: n_layer is num_hidden_layers.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error_lib.h"
#include "model/model_internal.h"
#include "util/small_file.h"

#define CAP_DIM (1ll << 24) /* as for GGUF metadata */

typedef struct cfg {
    json_t *root;
    const char *name;
    gguf_error *err;
    int rc;
    char missing[480];
    size_t mlen;
} cfg;

static void cfg_fail(cfg *c, int code, const char *key, const char *what)
{
    if (!c->rc)
        c->rc = gguf_fail(c->err, code, GGUF_NO_OFFSET, "%s: %s: %s", c->name, key, what);
}

static void cfg_missing(cfg *c, const char *key)
{
    if (c->mlen + strlen(key) + 3 < sizeof c->missing)
        c->mlen += (size_t)snprintf(c->missing + c->mlen, sizeof c->missing - c->mlen, "%s%s",
                                    c->mlen ? ", " : "", key);
}

/* The value of key in obj; NULL when absent or null (HF writes null for "none"). */
static json_t *cfg_get(json_t *obj, const char *key)
{
    json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
    return json_is_null(v) ? NULL : v;
}

static int64_t cfg_int_in(cfg *c, json_t *obj, const char *key, bool required, int64_t def)
{
    json_t *v = cfg_get(obj, key);
    if (!v) {
        if (required)
            cfg_missing(c, key);
        return def;
    }
    double d;
    if (json_is_integer(v)) {
        d = (double)json_integer_value(v);
    } else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v))) {
        d = json_real_value(v);
    } else {
        cfg_fail(c, GGUF_E_WRONG_TYPE, key, "not an integer");
        return def;
    }
    if (d < 0 || d > (double)CAP_DIM) {
        cfg_fail(c, GGUF_E_BAD_VALUE, key, d < 0 ? "negative" : "over the sanity cap of 2^24");
        return def;
    }
    return (int64_t)d;
}

static int64_t cfg_int(cfg *c, const char *key, bool required, int64_t def)
{
    return cfg_int_in(c, c->root, key, required, def);
}

static double cfg_num_in(cfg *c, json_t *obj, const char *key, bool required, double def)
{
    json_t *v = cfg_get(obj, key);
    if (!v) {
        if (required)
            cfg_missing(c, key);
        return def;
    }
    if (!json_is_number(v)) {
        cfg_fail(c, GGUF_E_WRONG_TYPE, key, "not a number");
        return def;
    }
    const double d = json_number_value(v);
    if (!isfinite(d)) {
        cfg_fail(c, GGUF_E_BAD_VALUE, key, "not finite");
        return def;
    }
    return d;
}

static double cfg_num(cfg *c, const char *key, bool required, double def)
{
    return cfg_num_in(c, c->root, key, required, def);
}

static bool cfg_bool(cfg *c, const char *key, bool def)
{
    json_t *v = cfg_get(c->root, key);
    if (!v)
        return def;
    if (!json_is_boolean(v)) {
        cfg_fail(c, GGUF_E_WRONG_TYPE, key, "not true or false");
        return def;
    }
    return json_is_true(v);
}

static const char *cfg_str_in(cfg *c, json_t *obj, const char *key)
{
    json_t *v = cfg_get(obj, key);
    if (v && !json_is_string(v)) {
        cfg_fail(c, GGUF_E_WRONG_TYPE, key, "not a string");
        return NULL;
    }
    return v ? json_string_value(v) : NULL;
}

/* bos_token_id / eos_token_id: an id, or a list whose first id counts; -1 absent. */
static int32_t cfg_token(cfg *c, const char *key)
{
    json_t *v = cfg_get(c->root, key);
    if (json_is_array(v))
        v = json_array_get(v, 0);
    if (!v)
        return -1;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
        cfg_fail(c, GGUF_E_BAD_VALUE, key, "not a token id (or a list of them)");
        return -1;
    }
    return (int32_t)json_integer_value(v);
}

/* ---------------------------------------------------------------- architecture */

static const struct {
    const char *cls, *type;
    gguf_arch arch;
} archs[] = {
    {"LlamaForCausalLM", "llama", GGUF_ARCH_LLAMA},
    {"Qwen2ForCausalLM", "qwen2", GGUF_ARCH_QWEN2},
    {"Qwen3ForCausalLM", "qwen3", GGUF_ARCH_QWEN3},
    {"Qwen3MoeForCausalLM", "qwen3_moe", GGUF_ARCH_QWEN3MOE},
    {"DeepseekV2ForCausalLM", "deepseek_v2", GGUF_ARCH_DEEPSEEK2},
    {"DeepseekV3ForCausalLM", "deepseek_v3", GGUF_ARCH_DEEPSEEK2},
    {"DeepseekV3ForCausalLM", "kimi_k2", GGUF_ARCH_DEEPSEEK2},
    {"Glm4MoeForCausalLM", "glm4_moe", GGUF_ARCH_GLM4MOE},
    {"GlmMoeDsaForCausalLM", "glm_moe_dsa", GGUF_ARCH_GLM_DSA},
};

static int find_arch(cfg *c, model_hf_config *o)
{
    const char *cls = NULL, *type = cfg_str_in(c, c->root, "model_type");
    json_t *a = cfg_get(c->root, "architectures");
    if (a && (!json_is_array(a) || (json_array_size(a) && !json_is_string(json_array_get(a, 0)))))
        cfg_fail(c, GGUF_E_WRONG_TYPE, "architectures", "not a list of class names");
    else if (a && json_array_size(a))
        cls = json_string_value(json_array_get(a, 0));
    if (c->rc)
        return c->rc;
    /* the class decides; model_type only without one */
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (cls ? !strcmp(cls, archs[i].cls) : type && !strcmp(type, archs[i].type)) {
            o->hp.arch = archs[i].arch;
            snprintf(o->hp.arch_name, sizeof o->hp.arch_name, "%s", gguf_arch_name(o->hp.arch));
            snprintf(o->model_type, sizeof o->model_type, "%s", type ? type : archs[i].type);
            o->deepseek_v2 = !strcmp(archs[i].cls, "DeepseekV2ForCausalLM");
            return 0;
        }
    if (cls)
        return gguf_fail(c->err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                         "%s: architectures: '%.80s' is not supported (LlamaForCausalLM, "
                         "Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, "
                         "DeepseekV2ForCausalLM, DeepseekV3ForCausalLM, Glm4MoeForCausalLM, "
                         "GlmMoeDsaForCausalLM)",
                         c->name, cls);
    if (type)
        return gguf_fail(c->err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                         "%s: model_type: '%.80s' is not supported (llama, qwen2, qwen3, "
                         "qwen3_moe, deepseek_v2, deepseek_v3, kimi_k2, glm4_moe, glm_moe_dsa)",
                         c->name, type);
    return gguf_fail(c->err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET,
                     "%s: missing: architectures (and model_type)", c->name);
}

/* ---------------------------------------------------------------- RoPE */

/* rope_theta and the scaling: transformers 5 keeps both in rope_parameters,
 * older configs have rope_theta and rope_scaling ("type" or "rope_type"). */
static void read_rope(cfg *c, model_hf_config *o)
{
    gguf_hparams *hp = &o->hp;
    json_t *rp = cfg_get(c->root, "rope_parameters");
    json_t *rs = cfg_get(c->root, "rope_scaling");
    if ((rp && !json_is_object(rp)) || (rs && !json_is_object(rs))) {
        cfg_fail(c, GGUF_E_WRONG_TYPE, rp && !json_is_object(rp) ? "rope_parameters"
                                                                 : "rope_scaling",
                 "not a JSON object (one set of RoPE parameters for every layer)");
        return;
    }
    json_t *r = rp ? rp : rs;
    hp->rope_freq_base = cfg_get(r, "rope_theta") ? cfg_num_in(c, r, "rope_theta", false, 0)
                                                  : cfg_num(c, "rope_theta", false, 10000.0);
    const char *type = cfg_str_in(c, r, "rope_type");
    if (!type)
        type = cfg_str_in(c, r, "type");
    hp->rope_factor = 1.0;
    hp->rope_attn_factor = 1.0;
    hp->yarn_beta_fast = 32.0;
    hp->yarn_beta_slow = 1.0;
    hp->yarn_orig_ctx = hp->n_ctx_train;
    if (!type || !strcmp(type, "default"))
        return;
    hp->rope_factor = cfg_num_in(c, r, "factor", true, 1.0);
    if (!strcmp(type, "linear")) {
        hp->rope_scaling = GGUF_ROPE_SCALING_LINEAR;
    } else if (!strcmp(type, "llama3")) {
        o->l3_factor = hp->rope_factor;
        o->l3_low = cfg_num_in(c, r, "low_freq_factor", true, 1.0);
        o->l3_high = cfg_num_in(c, r, "high_freq_factor", true, 4.0);
        o->l3_orig = cfg_int_in(c, r, "original_max_position_embeddings", true, 8192);
        hp->rope_factor = 1.0; /* the factors are per frequency (rope_freqs) */
        if (!c->rc && !(o->l3_factor >= 1 && o->l3_high > o->l3_low && o->l3_low > 0))
            cfg_fail(c, GGUF_E_BAD_VALUE, "rope_scaling",
                     "llama3 needs factor >= 1 and high_freq_factor > low_freq_factor > 0");
    } else if (!strcmp(type, "yarn")) {
        hp->rope_scaling = GGUF_ROPE_SCALING_YARN;
        hp->yarn_orig_ctx = cfg_int_in(c, r, "original_max_position_embeddings", false,
                                       hp->n_ctx_train);
        hp->yarn_beta_fast = cfg_num_in(c, r, "beta_fast", false, 32.0);
        hp->yarn_beta_slow = cfg_num_in(c, r, "beta_slow", false, 1.0);
        const double ms = cfg_num_in(c, r, "mscale", false, 0.0);
        const double msa = cfg_num_in(c, r, "mscale_all_dim", false, 0.0);
        const double af = cfg_num_in(c, r, "attention_factor", false, 0.0);
        if (hp->is_mla) {
            /* DeepSeek: softmax scale times mscale(mscale_all_dim)^2, cos/sin times
             * mscale(mscale)/mscale(mscale_all_dim): 1 only when the two agree. */
            if (!(msa > 0 && ms == msa) || af != 0.0)
                cfg_fail(c, GGUF_E_UNSUPPORTED, "rope_scaling",
                         "MLA YaRN needs mscale == mscale_all_dim > 0 and no attention_factor "
                         "(the only form a GGUF conversion can carry)");
            hp->yarn_log_mul = 0.1 * msa;
        } else {
            if (ms != 0.0 || msa != 0.0)
                cfg_fail(c, GGUF_E_UNSUPPORTED, "rope_scaling",
                         "YaRN with mscale / mscale_all_dim outside MLA models");
            /* cos/sin times attention_factor (default 0.1 ln(factor) + 1) */
            if (af > 0 && hp->rope_factor > 1)
                hp->rope_attn_factor = af / (1.0 + 0.1 * log(hp->rope_factor));
        }
    } else {
        char what[160];
        snprintf(what, sizeof what, "RoPE type '%.40s' is not supported (default, linear, "
                 "llama3, yarn)", type);
        cfg_fail(c, GGUF_E_UNSUPPORTED, rp ? "rope_parameters" : "rope_scaling", what);
    }
    if (!c->rc && !(hp->rope_factor > 0))
        cfg_fail(c, GGUF_E_BAD_VALUE, "rope_scaling.factor", "must be positive");
}

/* ---------------------------------------------------------------- MoE */

/* How many leading layers are dense: mlp_layer_types (GLM-5 in transformers
 * 5: "dense"... then "sparse"...) or first_k_dense_replace. */
static int64_t dense_lead(cfg *c, int64_t def)
{
    json_t *t = cfg_get(c->root, "mlp_layer_types");
    if (!t)
        return cfg_int(c, "first_k_dense_replace", false, def);
    if (!json_is_array(t)) {
        cfg_fail(c, GGUF_E_WRONG_TYPE, "mlp_layer_types", "not a list");
        return 0;
    }
    size_t i = 0;
    while (i < json_array_size(t) && json_is_string(json_array_get(t, i)) &&
           !strcmp(json_string_value(json_array_get(t, i)), "dense"))
        i++;
    const size_t lead = i;
    while (i < json_array_size(t) && json_is_string(json_array_get(t, i)) &&
           !strcmp(json_string_value(json_array_get(t, i)), "sparse"))
        i++;
    if (i != json_array_size(t))
        cfg_fail(c, GGUF_E_UNSUPPORTED, "mlp_layer_types",
                 "only \"dense\" layers followed by \"sparse\" ones are supported");
    return (int64_t)lead;
}

static void read_moe(cfg *c, model_hf_config *o)
{
    gguf_hparams *hp = &o->hp;
    const gguf_arch a = hp->arch;
    /* defaults of transformers' classes: DeepseekV2Config, DeepseekV3Config, ... */
    const bool ds = a == GGUF_ARCH_DEEPSEEK2, v2 = ds && o->deepseek_v2, v3 = ds && !v2;
    hp->n_expert = cfg_get(c->root, "n_routed_experts") ? cfg_int(c, "n_routed_experts", true, 0)
                                                        : cfg_int(c, "num_experts", true, 0);
    hp->n_expert_used = cfg_int(c, "num_experts_per_tok", true, 0);
    hp->n_ff_exp = cfg_int(c, "moe_intermediate_size", true, 0);
    if (a == GGUF_ARCH_QWEN3MOE) {
        /* transformers' Qwen3MoeConfig: norm_topk_prob defaults to false */
        hp->norm_topk = cfg_bool(c, "norm_topk_prob", false);
        hp->gating = GGUF_GATING_SOFTMAX;
        json_t *only = cfg_get(c->root, "mlp_only_layers");
        if (cfg_int(c, "decoder_sparse_step", false, 1) != 1 ||
            (only && (!json_is_array(only) || json_array_size(only))))
            cfg_fail(c, GGUF_E_UNSUPPORTED, "decoder_sparse_step",
                     "MoE in every layer only (decoder_sparse_step 1, no mlp_only_layers)");
        return;
    }
    hp->n_expert_shared = cfg_int(c, "n_shared_experts", false, a == GGUF_ARCH_GLM4MOE ? 1 : 0);
    hp->n_ff_shexp = hp->n_ff_exp * hp->n_expert_shared;
    hp->n_layer_dense_lead = dense_lead(c, a == GGUF_ARCH_GLM4MOE ? 1 : v2 ? 0 : 3);
    hp->norm_topk = cfg_bool(c, "norm_topk_prob", !v2);
    hp->routed_scale =
        cfg_num(c, "routed_scaling_factor", false, v3 || a == GGUF_ARCH_GLM_DSA ? 2.5 : 1.0);
    hp->n_group = cfg_int(c, "n_group", false, v3 ? 8 : 1);
    hp->topk_group = cfg_int(c, "topk_group", false, v3 ? 4 : 1);
    if (cfg_int(c, "moe_layer_freq", false, 1) != 1)
        cfg_fail(c, GGUF_E_UNSUPPORTED, "moe_layer_freq", "MoE in every layer after the "
                                                          "dense ones only (moe_layer_freq 1)");
    const char *sf = cfg_str_in(c, c->root, "scoring_func");
    const char *tm = cfg_str_in(c, c->root, "topk_method");
    if (!sf)
        sf = v2 ? "softmax" : "sigmoid";
    if (!strcmp(sf, "softmax"))
        hp->gating = GGUF_GATING_SOFTMAX;
    else if (!strcmp(sf, "sigmoid"))
        hp->gating = GGUF_GATING_SIGMOID;
    else
        cfg_fail(c, GGUF_E_UNSUPPORTED, "scoring_func", "not softmax or sigmoid");
    /* DeepSeek-V2's "greedy" ignores the groups */
    if (tm && !strcmp(tm, "greedy"))
        hp->n_group = hp->topk_group = 0;
    else if (tm && strcmp(tm, "group_limited_greedy") && strcmp(tm, "noaux_tc"))
        cfg_fail(c, GGUF_E_UNSUPPORTED, "topk_method",
                 "not greedy, group_limited_greedy or noaux_tc");
}

/* ---------------------------------------------------------------- the config */

static int parse(cfg *c, model_hf_config *o)
{
    gguf_hparams *hp = &o->hp;
    int rc = find_arch(c, o);
    if (rc)
        return rc;
    const gguf_arch a = hp->arch;
    const bool mla = a == GGUF_ARCH_DEEPSEEK2 || a == GGUF_ARCH_GLM_DSA;
    const bool moe = a == GGUF_ARCH_QWEN3MOE || a == GGUF_ARCH_GLM4MOE || mla;
    hp->is_mla = mla;
    hp->n_embd = cfg_int(c, "hidden_size", true, 0);
    hp->n_layer = cfg_int(c, "num_hidden_layers", true, 0);
    hp->n_head = cfg_int(c, "num_attention_heads", true, 0);
    hp->n_vocab = cfg_int(c, "vocab_size", true, 0);
    hp->rms_eps = cfg_num(c, "rms_norm_eps", true, 0);
    hp->n_ctx_train = cfg_int(c, "max_position_embeddings", false, 0);
    hp->n_head_kv = cfg_int(c, "num_key_value_heads", false, hp->n_head);
    hp->n_ff = cfg_int(c, "intermediate_size", !moe || a == GGUF_ARCH_GLM4MOE || mla, 0);
    o->tie = cfg_bool(c, "tie_word_embeddings", false);
    o->bos = cfg_token(c, "bos_token_id");
    o->eos = cfg_token(c, "eos_token_id");
    const char *act = cfg_str_in(c, c->root, "hidden_act");
    if (act && strcmp(act, "silu"))
        cfg_fail(c, GGUF_E_UNSUPPORTED, "hidden_act", "only silu (SwiGLU) is supported");
    if (cfg_bool(c, "use_sliding_window", false))
        cfg_fail(c, GGUF_E_UNSUPPORTED, "use_sliding_window", "sliding-window attention");
    if (mla) {
        hp->n_head_kv = 1; /* one shared latent, as a GGUF conversion says */
        hp->q_lora_rank = cfg_int(c, "q_lora_rank", false, 0);
        hp->kv_lora_rank = cfg_int(c, "kv_lora_rank", true, 0);
        hp->qk_nope = cfg_int(c, "qk_nope_head_dim", true, 0);
        hp->qk_rope = cfg_int(c, "qk_rope_head_dim", true, 0);
        hp->v_head = cfg_int(c, "v_head_dim", true, 0);
        hp->n_rot = hp->qk_rope;
        hp->n_embd_head_k = hp->qk_nope + hp->qk_rope;
        hp->n_embd_head_v = hp->v_head;
        if (cfg_get(c->root, "rope_interleave") && !cfg_bool(c, "rope_interleave", true))
            cfg_fail(c, GGUF_E_UNSUPPORTED, "rope_interleave",
                     "false (split-half RoPE on the MLA rope part) is not supported");
        if (a == GGUF_ARCH_GLM_DSA) {
            hp->idx_n_head = cfg_int(c, "index_n_heads", true, 0);
            hp->idx_head_dim = cfg_int(c, "index_head_dim", true, 0);
            hp->idx_top_k = cfg_int(c, "index_topk", true, 0);
        }
    } else if (hp->n_head > 0) {
        const int64_t hd = cfg_int(c, "head_dim", false, hp->n_embd / hp->n_head);
        hp->n_embd_head_k = hp->n_embd_head_v = hd;
        const double prf =
            cfg_num(c, "partial_rotary_factor", false, a == GGUF_ARCH_GLM4MOE ? 0.5 : 1.0);
        hp->n_rot = (int64_t)((double)hd * prf);
    }
    if (moe)
        read_moe(c, o);
    read_rope(c, o);
    if (!c->rc && !c->mlen && hp->n_vocab < 1)
        cfg_fail(c, GGUF_E_BAD_VALUE, "vocab_size", "must be positive");
    if (c->rc)
        return c->rc;
    if (c->mlen)
        return gguf_fail(c->err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET, "%s: missing: %s", c->name,
                         c->missing);
    return 0;
}

/* config.json's key for a GGUF key suffix, in the shared checks' messages. */
static void hf_key_name(const void *user, const char *suffix, char *out, size_t size)
{
    const gguf_arch a = *(const gguf_arch *)user;
    const bool mla = a == GGUF_ARCH_DEEPSEEK2 || a == GGUF_ARCH_GLM_DSA;
    static const char *const map[][2] = {
        {"block_count", "num_hidden_layers"},
        {"embedding_length", "hidden_size"},
        {"attention.head_count", "num_attention_heads"},
        {"attention.head_count_kv", "num_key_value_heads"},
        {"attention.layer_norm_rms_epsilon", "rms_norm_eps"},
        {"nextn_predict_layers", "num_nextn_predict_layers"},
        {"leading_dense_block_count", "first_k_dense_replace"},
        {"attention.key_length", "head_dim"},
        {"attention.key_length_mla", "qk_nope_head_dim"},
        {"attention.kv_lora_rank", "kv_lora_rank"},
        {"expert_used_count", "num_experts_per_tok"},
        {"expert_group_count", "n_group"},
        {"expert_group_used_count", "topk_group"},
        {"attention.indexer.head_count", "index_n_heads"},
    };
    const char *k = suffix;
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(map[i][0], suffix))
            k = map[i][1];
    if (!strcmp(suffix, "expert_count"))
        k = a == GGUF_ARCH_QWEN3MOE ? "num_experts" : "n_routed_experts";
    if (!strcmp(suffix, "rope.dimension_count"))
        k = mla ? "qk_rope_head_dim"
                : a == GGUF_ARCH_GLM4MOE ? "partial_rotary_factor" : "head_dim";
    snprintf(out, size, "%s", k);
}

int model_hf_config_parse(model_hf_config *out, const char *json, size_t len, const char *name,
                          gguf_error *err)
{
    memset(out, 0, sizeof *out);
    out->bos = out->eos = -1;
    if (!json)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "%s: no config text", name);
    if (gguf_json_depth(json, len, GGUF_ST_MAX_DEPTH) > GGUF_ST_MAX_DEPTH)
        return gguf_fail(err, GGUF_E_LIMIT, 0, "%s: JSON nested deeper than %d", name,
                         GGUF_ST_MAX_DEPTH);
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return gguf_fail(err, json_error_code(&je) == json_error_invalid_utf8 ? GGUF_E_BAD_UTF8
                                                                              : GGUF_E_BAD_VALUE,
                         (uint64_t)je.position, "%s: %s (line %d)", name, je.text, je.line);
    cfg c = {.root = root, .name = name, .err = err};
    int rc = json_is_object(root)
                 ? parse(&c, out)
                 : gguf_fail(err, GGUF_E_BAD_VALUE, 0, "%s: not a JSON object", name);
    if (!rc) {
        const model_key_names kn = {hf_key_name, &out->hp.arch};
        rc = model_hparams_check(&out->hp, name, &kn, err);
    }
    if (!rc) {
        model_hparams_defaults(&out->hp);
        out->hp.tied_embeddings = out->tie;
    }
    json_decref(root);
    return rc;
}

int gguf_hparams_from_hf_config(gguf_hparams *out, const char *json, size_t len,
                                const char *name, gguf_error *err)
{
    if (!out)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_hparams_from_hf_config: NULL");
    model_hf_config c;
    const int rc = model_hf_config_parse(&c, json, len, name ? name : "config.json", err);
    *out = c.hp;
    return rc;
}
