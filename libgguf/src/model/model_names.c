/*
 * Tensor roles: GGUF names, HF (transformers) names, and the parsing of both.
 *
 * The GGUF side follows llama.cpp's llama-arch.cpp naming ("blk.%d.attn_k_b");
 * the HF side follows gguf-py's tensor_mapping.py for the architectures the
 * model module knows. One table serves every architecture: the roles an
 * architecture uses are decided by model_load.c, not here.
 */
#include "model/model_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const arch_names[GGUF_ARCH_COUNT] = {
    [GGUF_ARCH_UNKNOWN] = "unknown",   [GGUF_ARCH_LLAMA] = "llama",
    [GGUF_ARCH_QWEN2] = "qwen2",       [GGUF_ARCH_QWEN3] = "qwen3",
    [GGUF_ARCH_QWEN3MOE] = "qwen3moe", [GGUF_ARCH_DEEPSEEK2] = "deepseek2",
    [GGUF_ARCH_GLM4MOE] = "glm4moe",   [GGUF_ARCH_GLM_DSA] = "glm-dsa",
};

const char *gguf_arch_name(gguf_arch arch)
{
    if ((int)arch < 0 || arch >= GGUF_ARCH_COUNT)
        return "unknown";
    return arch_names[arch];
}

gguf_arch gguf_arch_from_name(const char *name)
{
    if (!name)
        return GGUF_ARCH_UNKNOWN;
    for (int a = 1; a < GGUF_ARCH_COUNT; a++)
        if (strcmp(arch_names[a], name) == 0)
            return (gguf_arch)a;
    return GGUF_ARCH_UNKNOWN;
}

/* Architectures llama.cpp's convert_hf_to_gguf.py writes through LlamaModel
 * (tensor names and the Q/K row permutation as llama's). */
static const char *const llama_named[] = {"mistral", "granite"};

gguf_arch gguf_arch_naming_from_name(const char *name)
{
    const gguf_arch a = gguf_arch_from_name(name);
    if (a != GGUF_ARCH_UNKNOWN || !name)
        return a;
    for (size_t i = 0; i < sizeof llama_named / sizeof *llama_named; i++)
        if (strcmp(llama_named[i], name) == 0)
            return GGUF_ARCH_LLAMA;
    return GGUF_ARCH_UNKNOWN;
}

typedef struct role_desc {
    const char *stem;     /* GGUF name without "blk.N." and ".weight" */
    const char *suffix;   /* "weight" or "bias" */
    bool global;
    const char *hf;       /* HF name; "%d" is the layer; NULL: none */
    const char *note;     /* how the GGUF tensor derives from the HF one */
} role_desc;

static const role_desc roles[GGUF_ROLE_COUNT] = {
    [GGUF_ROLE_UNKNOWN] = {"unknown", "weight", false, NULL, NULL},
    [GGUF_ROLE_TOKEN_EMBD] = {"token_embd", "weight", true, "model.embed_tokens.weight", NULL},
    [GGUF_ROLE_OUTPUT_NORM] = {"output_norm", "weight", true, "model.norm.weight", NULL},
    [GGUF_ROLE_OUTPUT] = {"output", "weight", true, "lm_head.weight", NULL},
    [GGUF_ROLE_ROPE_FREQS] = {"rope_freqs", "weight", true, NULL,
                              "computed by the converter from rope_scaling"},
    [GGUF_ROLE_ATTN_NORM] = {"attn_norm", "weight", false, "model.layers.%d.input_layernorm.weight",
                             NULL},
    [GGUF_ROLE_ATTN_Q] = {"attn_q", "weight", false, "model.layers.%d.self_attn.q_proj.weight",
                          NULL},
    [GGUF_ROLE_ATTN_K] = {"attn_k", "weight", false, "model.layers.%d.self_attn.k_proj.weight",
                          NULL},
    [GGUF_ROLE_ATTN_V] = {"attn_v", "weight", false, "model.layers.%d.self_attn.v_proj.weight",
                          NULL},
    [GGUF_ROLE_ATTN_Q_BIAS] = {"attn_q", "bias", false, "model.layers.%d.self_attn.q_proj.bias",
                               NULL},
    [GGUF_ROLE_ATTN_K_BIAS] = {"attn_k", "bias", false, "model.layers.%d.self_attn.k_proj.bias",
                               NULL},
    [GGUF_ROLE_ATTN_V_BIAS] = {"attn_v", "bias", false, "model.layers.%d.self_attn.v_proj.bias",
                               NULL},
    [GGUF_ROLE_ATTN_Q_NORM] = {"attn_q_norm", "weight", false,
                               "model.layers.%d.self_attn.q_norm.weight", NULL},
    [GGUF_ROLE_ATTN_K_NORM] = {"attn_k_norm", "weight", false,
                               "model.layers.%d.self_attn.k_norm.weight", NULL},
    [GGUF_ROLE_ATTN_OUT] = {"attn_output", "weight", false,
                            "model.layers.%d.self_attn.o_proj.weight", NULL},
    [GGUF_ROLE_ATTN_POST_NORM] = {"post_attention_norm", "weight", false,
                                  "model.layers.%d.post_attention_layernorm.weight",
                                  "the pre-FFN norm despite its name"},
    [GGUF_ROLE_ATTN_Q_A] = {"attn_q_a", "weight", false, "model.layers.%d.self_attn.q_a_proj.weight",
                            NULL},
    [GGUF_ROLE_ATTN_Q_A_NORM] = {"attn_q_a_norm", "weight", false,
                                 "model.layers.%d.self_attn.q_a_layernorm.weight", NULL},
    [GGUF_ROLE_ATTN_Q_B] = {"attn_q_b", "weight", false, "model.layers.%d.self_attn.q_b_proj.weight",
                            NULL},
    [GGUF_ROLE_ATTN_KV_A_MQA] = {"attn_kv_a_mqa", "weight", false,
                                 "model.layers.%d.self_attn.kv_a_proj_with_mqa.weight", NULL},
    [GGUF_ROLE_ATTN_KV_A_NORM] = {"attn_kv_a_norm", "weight", false,
                                  "model.layers.%d.self_attn.kv_a_layernorm.weight", NULL},
    [GGUF_ROLE_ATTN_KV_B] = {"attn_kv_b", "weight", false,
                             "model.layers.%d.self_attn.kv_b_proj.weight", NULL},
    [GGUF_ROLE_ATTN_K_B] = {"attn_k_b", "weight", false, "model.layers.%d.self_attn.kv_b_proj.weight",
                            "k part of kv_b_proj: viewed [n_head, nope+v, kv_lora], rows [0, nope) "
                            "of each head, transposed to [n_head, kv_lora, nope]"},
    [GGUF_ROLE_ATTN_V_B] = {"attn_v_b", "weight", false, "model.layers.%d.self_attn.kv_b_proj.weight",
                            "v part of kv_b_proj: viewed [n_head, nope+v, kv_lora], rows "
                            "[nope, nope+v) of each head, as is"},
    [GGUF_ROLE_FFN_NORM] = {"ffn_norm", "weight", false,
                            "model.layers.%d.post_attention_layernorm.weight", NULL},
    [GGUF_ROLE_FFN_GATE] = {"ffn_gate", "weight", false, "model.layers.%d.mlp.gate_proj.weight",
                            NULL},
    [GGUF_ROLE_FFN_UP] = {"ffn_up", "weight", false, "model.layers.%d.mlp.up_proj.weight", NULL},
    [GGUF_ROLE_FFN_DOWN] = {"ffn_down", "weight", false, "model.layers.%d.mlp.down_proj.weight",
                            NULL},
    [GGUF_ROLE_FFN_GATE_INP] = {"ffn_gate_inp", "weight", false, "model.layers.%d.mlp.gate.weight",
                                NULL},
    [GGUF_ROLE_FFN_EXP_PROBS_B] = {"exp_probs_b", "bias", false,
                                   "model.layers.%d.mlp.gate.e_score_correction_bias", NULL},
    [GGUF_ROLE_FFN_GATE_EXPS] = {"ffn_gate_exps", "weight", false,
                                 "model.layers.%d.mlp.experts.*.gate_proj.weight",
                                 "every expert stacked along ne[2]"},
    [GGUF_ROLE_FFN_UP_EXPS] = {"ffn_up_exps", "weight", false,
                               "model.layers.%d.mlp.experts.*.up_proj.weight",
                               "every expert stacked along ne[2]"},
    [GGUF_ROLE_FFN_DOWN_EXPS] = {"ffn_down_exps", "weight", false,
                                 "model.layers.%d.mlp.experts.*.down_proj.weight",
                                 "every expert stacked along ne[2]"},
    [GGUF_ROLE_FFN_GATE_SHEXP] = {"ffn_gate_shexp", "weight", false,
                                  "model.layers.%d.mlp.shared_experts.gate_proj.weight", NULL},
    [GGUF_ROLE_FFN_UP_SHEXP] = {"ffn_up_shexp", "weight", false,
                                "model.layers.%d.mlp.shared_experts.up_proj.weight", NULL},
    [GGUF_ROLE_FFN_DOWN_SHEXP] = {"ffn_down_shexp", "weight", false,
                                  "model.layers.%d.mlp.shared_experts.down_proj.weight", NULL},
    [GGUF_ROLE_IDX_K_NORM] = {"indexer.k_norm", "weight", false,
                              "model.layers.%d.self_attn.indexer.k_norm.weight", NULL},
    [GGUF_ROLE_IDX_K_NORM_BIAS] = {"indexer.k_norm", "bias", false,
                                   "model.layers.%d.self_attn.indexer.k_norm.bias", NULL},
    [GGUF_ROLE_IDX_PROJ] = {"indexer.proj", "weight", false,
                            "model.layers.%d.self_attn.indexer.weights_proj.weight", NULL},
    [GGUF_ROLE_IDX_ATTN_K] = {"indexer.attn_k", "weight", false,
                              "model.layers.%d.self_attn.indexer.wk.weight", NULL},
    [GGUF_ROLE_IDX_ATTN_Q_B] = {"indexer.attn_q_b", "weight", false,
                                "model.layers.%d.self_attn.indexer.wq_b.weight", NULL},
    [GGUF_ROLE_NEXTN_EH_PROJ] = {"nextn.eh_proj", "weight", false, "model.layers.%d.eh_proj.weight",
                                 NULL},
    [GGUF_ROLE_NEXTN_EMBED_TOKENS] = {"nextn.embed_tokens", "weight", false,
                                      "model.layers.%d.embed_tokens.weight", NULL},
    [GGUF_ROLE_NEXTN_ENORM] = {"nextn.enorm", "weight", false, "model.layers.%d.enorm.weight", NULL},
    [GGUF_ROLE_NEXTN_HNORM] = {"nextn.hnorm", "weight", false, "model.layers.%d.hnorm.weight", NULL},
    [GGUF_ROLE_NEXTN_SHARED_HEAD_HEAD] = {"nextn.shared_head_head", "weight", false,
                                          "model.layers.%d.shared_head.head.weight", NULL},
    [GGUF_ROLE_NEXTN_SHARED_HEAD_NORM] = {"nextn.shared_head_norm", "weight", false,
                                          "model.layers.%d.shared_head.norm.weight", NULL},
};

const char *gguf_role_name(gguf_role role)
{
    if ((int)role <= 0 || role >= GGUF_ROLE_COUNT)
        return "unknown";
    return roles[role].stem;
}

const char *gguf_role_suffix(gguf_role role)
{
    if ((int)role <= 0 || role >= GGUF_ROLE_COUNT)
        return "weight";
    return roles[role].suffix;
}

bool gguf_role_is_global(gguf_role role)
{
    return (int)role > 0 && role < GGUF_ROLE_COUNT && roles[role].global;
}

int model_role_gguf_name(gguf_role role, int64_t il, char *out, size_t size)
{
    int n;
    if (roles[role].global)
        n = snprintf(out, size, "%s.%s", roles[role].stem, roles[role].suffix);
    else
        n = snprintf(out, size, "blk.%lld.%s.%s", (long long)il, roles[role].stem,
                     roles[role].suffix);
    return (n < 0 || (size_t)n >= size) ? GGUF_E_LIMIT : GGUF_OK;
}

static const char *role_note(gguf_arch arch, gguf_role role)
{
    if (arch == GGUF_ARCH_LLAMA && (role == GGUF_ROLE_ATTN_Q || role == GGUF_ROLE_ATTN_K))
        return "rows of each head permuted: GGUF row h*hd+2i+j = HF row h*hd+j*hd/2+i "
               "(adjacent-pair RoPE on GGUF = HF half-split RoPE)";
    if (role == GGUF_ROLE_ATTN_POST_NORM && arch != GGUF_ARCH_GLM4MOE)
        return NULL;
    return roles[role].note;
}

int gguf_role_hf_name(gguf_arch arch, gguf_role role, int64_t il, char *out, size_t size,
                      const char **note)
{
    if (note)
        *note = NULL;
    if ((int)role <= 0 || role >= GGUF_ROLE_COUNT || !roles[role].hf || !out)
        return GGUF_E_NOT_FOUND;
    /* Substitute the layer for "%d" by hand: the patterns are data, not formats. */
    const char *pat = roles[role].hf;
    const char *d = roles[role].global ? NULL : strstr(pat, "%d");
    int n;
    if (d)
        n = snprintf(out, size, "%.*s%lld%s", (int)(d - pat), pat, (long long)il, d + 2);
    else
        n = snprintf(out, size, "%s", pat);
    if (n < 0 || (size_t)n >= size)
        return GGUF_E_LIMIT;
    if (note)
        *note = role_note(arch, role);
    return GGUF_OK;
}

/* Read "blk.N." and return a pointer past it, or NULL. */
static const char *parse_blk(const char *s, int64_t *il)
{
    if (strncmp(s, "blk.", 4) != 0)
        return NULL;
    s += 4;
    if (*s < '0' || *s > '9')
        return NULL;
    int64_t v = 0;
    while (*s >= '0' && *s <= '9') {
        v = v * 10 + (*s - '0');
        if (v > 1000000)
            return NULL;
        s++;
    }
    if (*s != '.')
        return NULL;
    *il = v;
    return s + 1;
}

int gguf_role_parse(gguf_arch arch, const char *name, gguf_role *role, int64_t *layer)
{
    (void)arch;
    if (!name)
        return GGUF_E_NOT_FOUND;
    int64_t il = -1;
    const char *rest = parse_blk(name, &il);
    if (!rest)
        rest = name;
    size_t len = strlen(rest);
    for (int r = 1; r < GGUF_ROLE_COUNT; r++) {
        if (roles[r].global != (il < 0))
            continue;
        size_t sl = strlen(roles[r].stem), xl = strlen(roles[r].suffix);
        if (len == sl + 1 + xl && strncmp(rest, roles[r].stem, sl) == 0 && rest[sl] == '.' &&
            strcmp(rest + sl + 1, roles[r].suffix) == 0) {
            if (role)
                *role = (gguf_role)r;
            if (layer)
                *layer = il;
            return GGUF_OK;
        }
    }
    return GGUF_E_NOT_FOUND;
}

/* Match s against an HF pattern with at most one "%d" and one "*" (any digits). */
static bool hf_match(const char *pat, const char *s, int64_t *il)
{
    while (*pat) {
        if (pat[0] == '%' && pat[1] == 'd') {
            if (*s < '0' || *s > '9')
                return false;
            int64_t v = 0;
            while (*s >= '0' && *s <= '9') {
                v = v * 10 + (*s++ - '0');
                if (v > 1000000)
                    return false;
            }
            *il = v;
            pat += 2;
        } else if (*pat == '*') {
            if (*s < '0' || *s > '9')
                return false;
            while (*s >= '0' && *s <= '9')
                s++;
            pat++;
        } else if (*pat++ != *s++) {
            return false;
        }
    }
    return *s == '\0';
}

int gguf_hf_to_gguf_name(gguf_arch arch, bool kv_b_split, const char *hf_name, char out[2][128],
                         int *n)
{
    if (n)
        *n = 0;
    if (!hf_name || !out || !n)
        return GGUF_E_NOT_FOUND;
    for (int r = 1; r < GGUF_ROLE_COUNT; r++) {
        const char *pat = roles[r].hf;
        int64_t il = -1;
        if (!pat || !hf_match(pat, hf_name, &il))
            continue;
        /* Several roles share an HF name; pick the one this architecture uses. */
        if (r == GGUF_ROLE_ATTN_POST_NORM && arch != GGUF_ARCH_GLM4MOE)
            continue;
        if (r == GGUF_ROLE_FFN_NORM && arch == GGUF_ARCH_GLM4MOE)
            continue;
        if (r == GGUF_ROLE_ATTN_KV_B && kv_b_split)
            continue;
        if ((r == GGUF_ROLE_ATTN_K_B || r == GGUF_ROLE_ATTN_V_B) && !kv_b_split)
            continue;
        if (r == GGUF_ROLE_ATTN_V_B)
            continue; /* emitted with K_B below */
        if (model_role_gguf_name((gguf_role)r, il, out[0], 128) != GGUF_OK)
            return GGUF_E_LIMIT;
        *n = 1;
        if (r == GGUF_ROLE_ATTN_K_B) {
            if (model_role_gguf_name(GGUF_ROLE_ATTN_V_B, il, out[1], 128) != GGUF_OK)
                return GGUF_E_LIMIT;
            *n = 2;
        }
        return GGUF_OK;
    }
    return GGUF_E_NOT_FOUND;
}

int64_t gguf_llama_qk_row_to_hf(int64_t row, int64_t hd)
{
    if (hd < 2)
        return row;
    int64_t h = row / hd, r = row % hd;
    int64_t i = r / 2, j = r % 2;
    return h * hd + j * (hd / 2) + i;
}

int64_t gguf_llama_qk_row_from_hf(int64_t row, int64_t hd)
{
    if (hd < 2)
        return row;
    int64_t h = row / hd, r = row % hd;
    int64_t j = r / (hd / 2), i = r % (hd / 2);
    return h * hd + 2 * i + j;
}
