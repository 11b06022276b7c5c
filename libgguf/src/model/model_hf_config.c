/*
 * Hyper-parameters from a Hugging Face config.json, for the architectures of
 * the model module, read the way transformers' configuration classes read
 * them (their defaults where a key is absent, every spelling they accept)
 * and mapped onto the fields a GGUF conversion would carry, so that one
 * forward pass serves both:
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
 * max_position_embeddings, tie_word_embeddings; MoE: the expert count,
 * num_experts_per_tok, moe_intermediate_size, n_shared_experts,
 * first_k_dense_replace (or mlp_layer_types), norm_topk_prob,
 * routed_scaling_factor, n_group, topk_group, scoring_func, topk_method; MLA:
 * q_lora_rank (null: none), kv_lora_rank, qk_nope_head_dim,
 * qk_rope_head_dim, v_head_dim; glm_moe_dsa: index_n_heads, index_head_dim,
 * index_topk, and which layers run their indexer (indexer_types, or
 * index_topk_pattern / index_topk_freq / index_skip_topk_offset).
 *
 * Spellings, as transformers 5 reads them (and the 4.x files it still loads):
 *   - RoPE: transformers 5 saves rope_parameters {rope_type, rope_theta,
 *     partial_rotary_factor, factor, ...}; 4.x files have rope_theta and
 *     partial_rotary_factor at the top and rope_scaling {type | rope_type,
 *     ...}. A non-empty rope_scaling wins over rope_parameters, keys inside
 *     the dict win over the top-level ones, and a top-level
 *     original_max_position_embeddings wins over the dict's
 *     (convert_rope_params_to_dict, standardize_rope_params).
 *   - the expert count, through the classes' attribute_map (a name nobody
 *     reads must not disagree; two names that disagree are an error):
 *       qwen3_moe    num_experts, num_local_experts
 *       deepseek_v2  n_routed_experts, num_experts
 *       deepseek_v3, glm4_moe   n_routed_experts, num_local_experts
 *       glm_moe_dsa  n_routed_experts, num_local_experts, num_experts
 *   - hidden_act "swish" is SiLU (ACT2FN).
 *
 * A key that changes what transformers computes is read, or refused by name
 * where the forward cannot compute it (another activation, sliding windows
 * that cover a layer, sparse MoE steps, biases beyond q/k/v, dynamic/
 * longrope RoPE, per-layer-type RoPE, YaRN without truncation, MLA RoPE that
 * is not interleaved, YaRN mscale != mscale_all_dim, DSA layers that share
 * another layer's top-k, DeepSeek-V2's group-limited routing), or where
 * transformers ignores a key that other readers honour and the value says
 * otherwise (scoring_func, topk_method or norm_topk_prob against what the
 * class computes). Keys that only training, caching or initialisation read
 * are ignored. NextN/MTP layers are not counted: n_layer is
 * num_hidden_layers.
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

static bool cfg_bool_in(cfg *c, json_t *obj, const char *key, bool def)
{
    json_t *v = cfg_get(obj, key);
    if (!v)
        return def;
    if (!json_is_boolean(v)) {
        cfg_fail(c, GGUF_E_WRONG_TYPE, key, "not true or false");
        return def;
    }
    return json_is_true(v);
}

static bool cfg_bool(cfg *c, const char *key, bool def)
{
    return cfg_bool_in(c, c->root, key, def);
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

/*
 * A count stored under one of several names (a class's attribute_map, a key
 * transformers renamed). read[]: the names the class reads, the first
 * present counts; other[]: names other classes use, which this class
 * ignores. Two present names that disagree are an error naming both:
 * transformers would take one of them silently, another reader the other.
 * Lists end with NULL.
 */
static int64_t cfg_int_names(cfg *c, const char *const *read, const char *const *other,
                             const char *cls, bool required, int64_t def)
{
    int64_t v = def;
    const char *from = NULL;
    for (int pass = 0; pass < 2; pass++)
        for (const char *const *k = pass ? other : read; *k; k++) {
            if (!cfg_get(c->root, *k))
                continue;
            const int64_t x = cfg_int(c, *k, false, def);
            char what[200];
            if (!from && pass) {
                snprintf(what, sizeof what, "not read by transformers' %s (it reads %s%s%s)", cls,
                         read[0], read[1] ? " or " : "", read[1] ? read[1] : "");
                cfg_fail(c, GGUF_E_BAD_VALUE, *k, what);
            } else if (!from) {
                v = x;
                from = *k;
            } else if (x != v) {
                snprintf(what, sizeof what, "%lld disagrees with %s %lld", (long long)x, from,
                         (long long)v);
                cfg_fail(c, GGUF_E_BAD_VALUE, *k, what);
            }
        }
    if (!from && required && !c->rc) {
        char key[120];
        snprintf(key, sizeof key, "%s%s%s%s", read[0], read[1] ? " (or " : "",
                 read[1] ? read[1] : "", read[1] ? ")" : "");
        cfg_missing(c, key);
    }
    return v;
}

/* ---------------------------------------------------------------- architecture */

/* The class each config follows; kimi_k2 is DeepSeek-V3's (DeepseekV3ForCausalLM). */
typedef enum cfg_kind { K_LLAMA, K_QWEN2, K_QWEN3, K_QWEN3MOE, K_DSV2, K_DSV3, K_GLM4MOE, K_DSA }
    cfg_kind;

static const struct {
    const char *cls, *type, *config;
    gguf_arch arch;
    cfg_kind kind;
} archs[] = {
    {"LlamaForCausalLM", "llama", "LlamaConfig", GGUF_ARCH_LLAMA, K_LLAMA},
    {"Qwen2ForCausalLM", "qwen2", "Qwen2Config", GGUF_ARCH_QWEN2, K_QWEN2},
    {"Qwen3ForCausalLM", "qwen3", "Qwen3Config", GGUF_ARCH_QWEN3, K_QWEN3},
    {"Qwen3MoeForCausalLM", "qwen3_moe", "Qwen3MoeConfig", GGUF_ARCH_QWEN3MOE, K_QWEN3MOE},
    {"DeepseekV2ForCausalLM", "deepseek_v2", "DeepseekV2Config", GGUF_ARCH_DEEPSEEK2, K_DSV2},
    {"DeepseekV3ForCausalLM", "deepseek_v3", "DeepseekV3Config", GGUF_ARCH_DEEPSEEK2, K_DSV3},
    {"DeepseekV3ForCausalLM", "kimi_k2", "DeepseekV3Config", GGUF_ARCH_DEEPSEEK2, K_DSV3},
    {"Glm4MoeForCausalLM", "glm4_moe", "Glm4MoeConfig", GGUF_ARCH_GLM4MOE, K_GLM4MOE},
    {"GlmMoeDsaForCausalLM", "glm_moe_dsa", "GlmMoeDsaConfig", GGUF_ARCH_GLM_DSA, K_DSA},
};

static int find_arch(cfg *c, model_hf_config *o, cfg_kind *kind, const char **config_cls)
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
            o->deepseek_v2 = archs[i].kind == K_DSV2;
            *kind = archs[i].kind;
            *config_cls = archs[i].config;
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

/* original_max_position_embeddings of llama3 / YaRN: a top-level key wins
 * (transformers' standardize_rope_params, for Phi-3's files), then the dict's,
 * then max_position_embeddings. 0 when none is there. */
static int64_t rope_orig_ctx(cfg *c, json_t *r, int64_t n_ctx_train)
{
    const char *k = "original_max_position_embeddings";
    if (cfg_get(c->root, k))
        return cfg_int(c, k, false, 0);
    return cfg_int_in(c, r, k, false, n_ctx_train);
}

/*
 * rope_theta, the scaling and the rotated width. transformers 5 keeps them in
 * rope_parameters; 4.x files have rope_theta / partial_rotary_factor at the
 * top and rope_scaling ("type" or "rope_type"). Order of precedence as in
 * convert_rope_params_to_dict: a non-empty rope_scaling over
 * rope_parameters, then the dict's keys over the top-level ones.
 */
static void read_rope(cfg *c, model_hf_config *o, cfg_kind kind, const char *cls)
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
    json_t *r = rs && json_object_size(rs) ? rs : rp;
    const char *rkey = r == rs ? "rope_scaling" : "rope_parameters";
    const char *k;
    json_t *v;
    json_object_foreach(r, k, v) {
        if (!json_is_object(v))
            continue;
        /* nested by layer type: the config class takes it, but the models'
         * rotary embeddings read rope_parameters["rope_type"] and fail */
        char what[200];
        snprintf(what, sizeof what, "RoPE parameters per layer type ('%.40s') are not "
                 "supported (one set for every layer)", k);
        cfg_fail(c, GGUF_E_UNSUPPORTED, rkey, what);
        return;
    }
    hp->rope_freq_base = cfg_get(r, "rope_theta") ? cfg_num_in(c, r, "rope_theta", false, 0)
                                                  : cfg_num(c, "rope_theta", false, 10000.0);
    /* the rotated width: glm4_moe rotates head_dim x partial_rotary_factor
     * (default 0.5); the others' rotary embeddings rotate the whole head (MLA:
     * qk_rope_head_dim), so any other factor is a contradiction */
    const char *pk = "partial_rotary_factor";
    const double prf = cfg_get(r, pk) ? cfg_num_in(c, r, pk, false, 1.0)
                                      : cfg_num(c, pk, false, kind == K_GLM4MOE ? 0.5 : 1.0);
    if (kind == K_GLM4MOE) {
        hp->n_rot = (int64_t)((double)hp->n_embd_head_k * prf);
    } else if (prf != 1.0 && !c->rc) {
        char what[200];
        snprintf(what, sizeof what, "%g: transformers' %s rotates the whole %s (1 only)", prf, cls,
                 hp->is_mla ? "qk_rope_head_dim" : "head");
        cfg_fail(c, GGUF_E_BAD_VALUE, pk, what);
    }
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
    /* MLA: a non-default RoPE multiplies the softmax scale by
     * mscale(mscale_all_dim)^2 (yarn_apply_mscale): only YaRN carries it */
    if (hp->is_mla && strcmp(type, "yarn") && cfg_num_in(c, r, "mscale_all_dim", false, 0) != 0)
        cfg_fail(c, GGUF_E_UNSUPPORTED, rkey, "mscale_all_dim outside YaRN");
    if (!strcmp(type, "linear")) {
        hp->rope_scaling = GGUF_ROPE_SCALING_LINEAR;
    } else if (!strcmp(type, "llama3")) {
        o->l3_factor = hp->rope_factor;
        o->l3_low = cfg_num_in(c, r, "low_freq_factor", true, 1.0);
        o->l3_high = cfg_num_in(c, r, "high_freq_factor", true, 4.0);
        o->l3_orig = rope_orig_ctx(c, r, hp->n_ctx_train);
        if (!o->l3_orig)
            cfg_missing(c, "original_max_position_embeddings");
        hp->rope_factor = 1.0; /* the factors are per frequency (rope_freqs) */
        if (!c->rc && !(o->l3_factor >= 1 && o->l3_high > o->l3_low && o->l3_low > 0))
            cfg_fail(c, GGUF_E_BAD_VALUE, rkey,
                     "llama3 needs factor >= 1 and high_freq_factor > low_freq_factor > 0");
    } else if (!strcmp(type, "yarn")) {
        hp->rope_scaling = GGUF_ROPE_SCALING_YARN;
        hp->yarn_orig_ctx = rope_orig_ctx(c, r, hp->n_ctx_train);
        /* transformers: `beta_fast or 32`, `beta_slow or 1` */
        hp->yarn_beta_fast = cfg_num_in(c, r, "beta_fast", false, 0.0);
        hp->yarn_beta_slow = cfg_num_in(c, r, "beta_slow", false, 0.0);
        if (hp->yarn_beta_fast == 0.0)
            hp->yarn_beta_fast = 32.0;
        if (hp->yarn_beta_slow == 0.0)
            hp->yarn_beta_slow = 1.0;
        if (!cfg_bool_in(c, r, "truncate", true))
            cfg_fail(c, GGUF_E_UNSUPPORTED, rkey,
                     "YaRN with truncate false (the correction range is always rounded)");
        const double ms = cfg_num_in(c, r, "mscale", false, 0.0);
        const double msa = cfg_num_in(c, r, "mscale_all_dim", false, 0.0);
        const double af = cfg_num_in(c, r, "attention_factor", false, 0.0);
        if (hp->is_mla) {
            /* DeepSeek: softmax scale times mscale(mscale_all_dim)^2, cos/sin times
             * mscale(mscale)/mscale(mscale_all_dim): 1 only when the two agree. */
            if (!(msa > 0 && ms == msa) || af != 0.0)
                cfg_fail(c, GGUF_E_UNSUPPORTED, rkey,
                         "MLA YaRN needs mscale == mscale_all_dim > 0 and no attention_factor "
                         "(the only form a GGUF conversion can carry)");
            hp->yarn_log_mul = 0.1 * msa;
        } else {
            if (ms != 0.0 || msa != 0.0)
                cfg_fail(c, GGUF_E_UNSUPPORTED, rkey,
                         "YaRN with mscale / mscale_all_dim outside MLA models");
            /* cos/sin times attention_factor (default 0.1 ln(factor) + 1); the
             * forward applies YaRN (and so a factor) only for factor > 1 */
            if (af > 0 && hp->rope_factor > 1)
                hp->rope_attn_factor = af / (1.0 + 0.1 * log(hp->rope_factor));
            else if (af > 0 && af != 1.0)
                cfg_fail(c, GGUF_E_UNSUPPORTED, rkey, "YaRN attention_factor with factor <= 1");
        }
    } else {
        char what[160];
        snprintf(what, sizeof what, "RoPE type '%.40s' is not supported (default, linear, "
                 "llama3, yarn)", type);
        cfg_fail(c, GGUF_E_UNSUPPORTED, rkey, what);
    }
    if (!c->rc && !(hp->rope_factor > 0)) {
        char key[40];
        snprintf(key, sizeof key, "%s.factor", rkey);
        cfg_fail(c, GGUF_E_BAD_VALUE, key, "must be positive");
    }
}

/* ---------------------------------------------------------------- layer types */

/* Which layers attend through a sliding window, as transformers decides:
 * Qwen2/Qwen3 from layer_types (or layer i >= max_window_layers), Qwen3-MoE
 * every layer, and only with use_sliding_window and a sliding_window. */
static void check_sliding(cfg *c, cfg_kind kind, int64_t n_layer)
{
    const bool qwen = kind == K_QWEN2 || kind == K_QWEN3 || kind == K_QWEN3MOE;
    if (!cfg_bool(c, "use_sliding_window", false))
        return;
    json_t *sw = json_object_get(c->root, "sliding_window"); /* absent: the default 4096 */
    if (qwen && json_is_null(sw))
        return;
    if (!qwen || kind == K_QWEN3MOE) {
        cfg_fail(c, GGUF_E_UNSUPPORTED, "use_sliding_window", "sliding-window attention");
        return;
    }
    json_t *lt = cfg_get(c->root, "layer_types");
    if (lt && !json_is_array(lt)) {
        cfg_fail(c, GGUF_E_WRONG_TYPE, "layer_types", "not a list");
        return;
    }
    const int64_t mwl = lt ? 0 : cfg_int(c, "max_window_layers", false, 28);
    for (int64_t il = 0; il < n_layer && !c->rc; il++) {
        json_t *t = lt ? json_array_get(lt, (size_t)il) : NULL;
        if (lt ? json_is_string(t) && !strcmp(json_string_value(t), "sliding_attention")
               : il >= mwl)
            cfg_fail(c, GGUF_E_UNSUPPORTED, lt ? "layer_types" : "use_sliding_window",
                     "sliding-window attention (in layers this forward runs in full)");
    }
}

/* GLM-5 (GlmMoeDsaConfig): a layer whose indexer_types entry is "shared"
 * reuses the previous full layer's top-k. Without indexer_types, the class
 * derives them from index_topk_pattern ("FSS...") or index_topk_freq /
 * index_skip_topk_offset: layer i is full when max(i - offset + 1, 0) is a
 * multiple of freq. The forward runs every layer's indexer. */
static void check_indexer_types(cfg *c, int64_t n_layer)
{
    json_t *it = cfg_get(c->root, "indexer_types");
    const char *key = "indexer_types";
    if (!it && cfg_get(c->root, "index_topk_pattern")) {
        key = "index_topk_pattern";
        it = cfg_get(c->root, key);
    }
    if (it) {
        const bool str = json_is_string(it);
        if (!str && !json_is_array(it)) {
            cfg_fail(c, GGUF_E_WRONG_TYPE, key, "not a list (or a string of F and S)");
            return;
        }
        const char *s = str ? json_string_value(it) : NULL;
        const size_t n = str ? strlen(s) : json_array_size(it);
        if (n < (size_t)n_layer) {
            cfg_fail(c, GGUF_E_BAD_VALUE, key, "fewer entries than num_hidden_layers");
            return;
        }
        for (int64_t il = 0; il < n_layer && !c->rc; il++) {
            const char *t = str ? NULL : json_string_value(json_array_get(it, (size_t)il));
            const bool full = str ? s[il] == 'F' : t && (!strcmp(t, "full") || !strcmp(t, "F"));
            if (!full)
                cfg_fail(c, GGUF_E_UNSUPPORTED, key,
                         "a layer that reuses another layer's indexer top-k (\"shared\"): "
                         "the forward runs every layer's indexer (\"full\" only)");
        }
        return;
    }
    int64_t freq = cfg_int(c, "index_topk_freq", false, 1);
    const int64_t off = cfg_int(c, "index_skip_topk_offset", false, 2);
    if (freq < 1)
        freq = 1;
    for (int64_t il = 0; il < n_layer && !c->rc; il++) {
        const int64_t d = il - off + 1;
        if ((d > 0 ? d : 0) % freq)
            cfg_fail(c, GGUF_E_UNSUPPORTED, "index_topk_freq",
                     "layers that reuse another layer's indexer top-k: the forward runs every "
                     "layer's indexer");
    }
}

/* ---------------------------------------------------------------- MoE */

/* How many leading layers are dense: mlp_layer_types (GLM-5 in transformers
 * 5: "dense"... then "sparse"...) or first_k_dense_replace; both present
 * must agree. */
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
    /* GlmMoeDsaConfig derives mlp_layer_types from min(first_k_dense_replace, layers) */
    const int64_t fk = cfg_int(c, "first_k_dense_replace", false, -1);
    const int64_t n = (int64_t)json_array_size(t);
    if (fk >= 0 && (fk < n ? fk : n) != (int64_t)lead) {
        char what[120];
        snprintf(what, sizeof what, "%zu leading dense layers, first_k_dense_replace says "
                 "otherwise", lead);
        cfg_fail(c, GGUF_E_BAD_VALUE, "mlp_layer_types", what);
    }
    return (int64_t)lead;
}

static void read_moe(cfg *c, model_hf_config *o, cfg_kind kind, const char *cls)
{
    gguf_hparams *hp = &o->hp;
    static const char *const qwen_n[] = {"num_local_experts", "num_experts", NULL};
    static const char *const qwen_x[] = {"n_routed_experts", NULL};
    static const char *const v2_n[] = {"n_routed_experts", "num_experts", NULL};
    static const char *const v2_x[] = {"num_local_experts", NULL};
    static const char *const v3_n[] = {"n_routed_experts", "num_local_experts", NULL};
    static const char *const v3_x[] = {"num_experts", NULL};
    static const char *const dsa_n[] = {"n_routed_experts", "num_local_experts", "num_experts",
                                        NULL};
    static const char *const none[] = {NULL};
    const char *const *names = kind == K_QWEN3MOE ? qwen_n
                               : kind == K_DSV2   ? v2_n
                               : kind == K_DSA    ? dsa_n
                                                  : v3_n;
    const char *const *others = kind == K_QWEN3MOE ? qwen_x
                                : kind == K_DSV2   ? v2_x
                                : kind == K_DSA    ? none
                                                   : v3_x;
    hp->n_expert = cfg_int_names(c, names, others, cls, true, 0);
    hp->n_expert_used = cfg_int(c, "num_experts_per_tok", true, 0);
    hp->n_ff_exp = cfg_int(c, "moe_intermediate_size", true, 0);
    if (kind == K_QWEN3MOE) {
        /* transformers' Qwen3MoeConfig: norm_topk_prob defaults to false */
        hp->norm_topk = cfg_bool(c, "norm_topk_prob", false);
        hp->gating = GGUF_GATING_SOFTMAX;
        hp->routed_scale = 1.0; /* no routed_scaling_factor in Qwen3MoeSparseMoeBlock */
        json_t *only = cfg_get(c->root, "mlp_only_layers");
        if (cfg_int(c, "decoder_sparse_step", false, 1) != 1 ||
            (only && (!json_is_array(only) || json_array_size(only))))
            cfg_fail(c, GGUF_E_UNSUPPORTED, "decoder_sparse_step",
                     "MoE in every layer only (decoder_sparse_step 1, no mlp_only_layers)");
        return;
    }
    /* the defaults of DeepseekV2Config, DeepseekV3Config, Glm4MoeConfig, GlmMoeDsaConfig */
    const bool v2 = kind == K_DSV2;
    hp->n_expert_shared = cfg_int(c, "n_shared_experts", false, v2 ? 2 : 1);
    hp->n_ff_shexp = hp->n_ff_exp * hp->n_expert_shared;
    hp->n_layer_dense_lead = dense_lead(c, kind == K_GLM4MOE ? 1 : v2 ? 0 : 3);
    hp->routed_scale = cfg_num(c, "routed_scaling_factor", false,
                               kind == K_DSV3 || kind == K_DSA ? 2.5 : 1.0);
    hp->n_group = cfg_int(c, "n_group", false, kind == K_DSV3 ? 8 : 1);
    hp->topk_group = cfg_int(c, "topk_group", false, kind == K_DSV3 ? 4 : 1);
    const bool groups = hp->n_group > 1 && hp->topk_group < hp->n_group;
    if (cfg_int(c, "moe_layer_freq", false, 1) != 1)
        cfg_fail(c, GGUF_E_UNSUPPORTED, "moe_layer_freq", "MoE in every layer after the "
                                                          "dense ones only (moe_layer_freq 1)");
    const char *sf = cfg_str_in(c, c->root, "scoring_func");
    const char *tm = cfg_str_in(c, c->root, "topk_method");
    if (sf && strcmp(sf, "softmax") && strcmp(sf, "sigmoid"))
        cfg_fail(c, GGUF_E_UNSUPPORTED, "scoring_func", "not softmax or sigmoid");
    char what[200];
    if (v2) {
        /* DeepseekV2Moe: softmax, never normalized (norm_topk_prob is not
         * read, DeepSeek's own code reads it), greedy or group-limited by each
         * group's best expert */
        hp->gating = GGUF_GATING_SOFTMAX;
        hp->norm_topk = false;
        if (sf && strcmp(sf, "softmax"))
            cfg_fail(c, GGUF_E_UNSUPPORTED, "scoring_func",
                     "sigmoid: transformers' DeepseekV2 routes with softmax only");
        if (cfg_bool(c, "norm_topk_prob", false))
            cfg_fail(c, GGUF_E_UNSUPPORTED, "norm_topk_prob",
                     "true: transformers' DeepseekV2 never normalizes the top-k weights "
                     "(DeepSeek's code does): ambiguous");
        if (!tm || !strcmp(tm, "greedy")) {
            hp->n_group = hp->topk_group = 0;
        } else if (strcmp(tm, "group_limited_greedy")) {
            snprintf(what, sizeof what, "'%.40s': transformers' DeepseekV2 takes greedy or "
                     "group_limited_greedy", tm);
            cfg_fail(c, GGUF_E_UNSUPPORTED, "topk_method", what);
        } else if (groups) {
            cfg_fail(c, GGUF_E_UNSUPPORTED, "topk_method",
                     "group_limited_greedy scores a group by its best expert; the forward's "
                     "group routing sums the best two (noaux_tc)");
        }
        return;
    }
    /* DeepseekV3 / Glm4Moe / GlmMoeDsa: sigmoid, the selection bias
     * e_score_correction_bias, groups scored by their best two
     * (noaux_tc); scoring_func and topk_method are not read */
    hp->gating = GGUF_GATING_SIGMOID;
    hp->norm_topk = cfg_bool(c, "norm_topk_prob", true);
    if (sf && strcmp(sf, "sigmoid")) {
        snprintf(what, sizeof what, "%s: transformers' %s routes with sigmoid only", sf, cls);
        cfg_fail(c, GGUF_E_UNSUPPORTED, "scoring_func", what);
    }
    if (tm && strcmp(tm, "noaux_tc") &&
        (groups || (strcmp(tm, "greedy") && strcmp(tm, "group_limited_greedy")))) {
        snprintf(what, sizeof what, "'%.40s': transformers' %s routes as noaux_tc (groups "
                 "scored by their best two)", tm, cls);
        cfg_fail(c, GGUF_E_UNSUPPORTED, "topk_method", what);
    }
}

/* ---------------------------------------------------------------- the config */

static int parse(cfg *c, model_hf_config *o)
{
    gguf_hparams *hp = &o->hp;
    cfg_kind kind = K_LLAMA;
    const char *cls = "";
    int rc = find_arch(c, o, &kind, &cls);
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
    /* absent: the class default (None means num_attention_heads) */
    const int64_t kv_def = kind == K_QWEN2 || kind == K_QWEN3 ? 32
                           : kind == K_QWEN3MOE               ? 4
                           : kind == K_GLM4MOE                ? 8
                                                              : hp->n_head;
    hp->n_head_kv = cfg_int(c, "num_key_value_heads", false, kv_def);
    hp->n_ff = cfg_int(c, "intermediate_size", !moe || a == GGUF_ARCH_GLM4MOE || mla, 0);
    o->tie = cfg_bool(c, "tie_word_embeddings", false);
    o->bos = cfg_token(c, "bos_token_id");
    o->eos = cfg_token(c, "eos_token_id");
    const char *act = cfg_str_in(c, c->root, "hidden_act");
    if (act && strcmp(act, "silu") && strcmp(act, "swish")) /* ACT2FN: both SiLU */
        cfg_fail(c, GGUF_E_UNSUPPORTED, "hidden_act", "only silu (SwiGLU) is supported");
    check_sliding(c, kind, hp->n_layer);
    /* biases: q/k/v are the forward's (Qwen2 always, GLM-4.5 with
     * attention_bias); the others' attention_bias adds o_proj's (and MLA's
     * q_a/kv_a) biases, mlp_bias the MLP's */
    if (kind != K_QWEN2 && kind != K_GLM4MOE && cfg_bool(c, "attention_bias", false))
        cfg_fail(c, GGUF_E_UNSUPPORTED, "attention_bias",
                 mla ? "true: q_a_proj, kv_a_proj_with_mqa and o_proj biases"
                     : "true: an o_proj bias (q/k/v biases only)");
    if ((kind == K_LLAMA || kind == K_DSV2) && cfg_bool(c, "mlp_bias", false))
        cfg_fail(c, GGUF_E_UNSUPPORTED, "mlp_bias", "true: MLP biases");
    if (mla) {
        hp->n_head_kv = 1; /* one shared latent, as a GGUF conversion says */
        /* transformers' MLA attention repeats k/v num_heads / num_key_value_heads times */
        if (cfg_get(c->root, "num_key_value_heads") &&
            cfg_int(c, "num_key_value_heads", false, 0) != hp->n_head)
            cfg_fail(c, GGUF_E_BAD_VALUE, "num_key_value_heads",
                     "MLA takes one key and value per query head: must equal "
                     "num_attention_heads");
        hp->q_lora_rank = cfg_int(c, "q_lora_rank", false, 0);
        hp->kv_lora_rank = cfg_int(c, "kv_lora_rank", true, 0);
        hp->qk_nope = cfg_int(c, "qk_nope_head_dim", true, 0);
        hp->qk_rope = cfg_int(c, "qk_rope_head_dim", true, 0);
        hp->v_head = cfg_int(c, "v_head_dim", true, 0);
        hp->n_rot = hp->qk_rope;
        hp->n_embd_head_k = hp->qk_nope + hp->qk_rope;
        hp->n_embd_head_v = hp->v_head;
        /* DeepseekV3Config keeps a head_dim from the file (its rotary
         * embedding's width); V2 and GLM-5 set it to qk_rope_head_dim */
        if (kind == K_DSV3 && cfg_get(c->root, "head_dim") &&
            cfg_int(c, "head_dim", false, 0) != hp->qk_rope)
            cfg_fail(c, GGUF_E_BAD_VALUE, "head_dim",
                     "transformers' DeepseekV3 rotates head_dim dims: must equal "
                     "qk_rope_head_dim");
        if (cfg_get(c->root, "rope_interleave") && !cfg_bool(c, "rope_interleave", true))
            cfg_fail(c, GGUF_E_UNSUPPORTED, "rope_interleave",
                     "false (split-half RoPE on the MLA rope part) is not supported");
        if (a == GGUF_ARCH_GLM_DSA) {
            hp->idx_n_head = cfg_int(c, "index_n_heads", true, 0);
            hp->idx_head_dim = cfg_int(c, "index_head_dim", true, 0);
            hp->idx_top_k = cfg_int(c, "index_topk", true, 0);
            json_t *mlt = cfg_get(c->root, "mlp_layer_types");
            if (json_is_array(mlt) && json_array_size(mlt) < (size_t)hp->n_layer)
                cfg_fail(c, GGUF_E_BAD_VALUE, "mlp_layer_types",
                         "fewer entries than num_hidden_layers");
            check_indexer_types(c, hp->n_layer);
        }
    } else if (hp->n_head > 0) {
        /* Qwen3Config's head_dim defaults to 128; the others divide */
        const int64_t hd = cfg_int(c, "head_dim", false,
                                   kind == K_QWEN3 ? 128 : hp->n_embd / hp->n_head);
        hp->n_embd_head_k = hp->n_embd_head_v = hd;
        hp->n_rot = hd;
    }
    if (moe)
        read_moe(c, o, kind, cls);
    /* layer i is an MoE layer when i >= first_k_dense_replace: a larger value
     * makes every layer dense, as in transformers */
    if (hp->n_layer_dense_lead > hp->n_layer)
        hp->n_layer_dense_lead = hp->n_layer;
    read_rope(c, o, kind, cls);
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
        return gguf_fail(err, gguf_json_error_status(&je), (uint64_t)je.position,
                         "%s: %s (line %d)", name, je.text, je.line);
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
