/*
 * config.json of `gguf-gen hf`: the configuration transformers' class of the
 * architecture would save for the model a GGUF describes, with the keys the
 * llama.cpp converter reads back (docs/models.md lists them per
 * architecture). NextN/MTP blocks are not counted in num_hidden_layers (HF
 * keeps them as num_nextn_predict_layers), as in real checkpoints.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen.h"
#include "gguf/forward.h"
#include "gguf/model.h"

typedef struct jbuf {
    char *p;
    size_t len, cap;
    bool oom;
} jbuf;

static void put(jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(jbuf *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        const int n = b->p ? vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap) : -1;
        va_end(ap);
        if (n >= 0 && (size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        const size_t cap = b->cap ? 2 * b->cap : 2048;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
}

static void put_moe(jbuf *b, const gguf_hparams *hp)
{
    put(b, ",\"n_routed_experts\":%lld,\"n_shared_experts\":%lld,\"num_experts_per_tok\":%lld,"
           "\"moe_intermediate_size\":%lld,\"first_k_dense_replace\":%lld,"
           "\"routed_scaling_factor\":%.17g,\"norm_topk_prob\":%s,\"n_group\":%lld,"
           "\"topk_group\":%lld,\"scoring_func\":\"%s\"",
        (long long)hp->n_expert, (long long)hp->n_expert_shared, (long long)hp->n_expert_used,
        (long long)hp->n_ff_exp, (long long)hp->n_layer_dense_lead, hp->routed_scale,
        hp->norm_topk ? "true" : "false", (long long)(hp->n_group > 0 ? hp->n_group : 1),
        (long long)(hp->topk_group > 0 ? hp->topk_group : 1),
        hp->gating == GGUF_GATING_SIGMOID ? "sigmoid" : "softmax");
}

static void put_mla(jbuf *b, const gguf_hparams *hp)
{
    if (hp->q_lora_rank > 0)
        put(b, ",\"q_lora_rank\":%lld", (long long)hp->q_lora_rank);
    else
        put(b, ",\"q_lora_rank\":null");
    put(b, ",\"kv_lora_rank\":%lld,\"qk_nope_head_dim\":%lld,\"qk_rope_head_dim\":%lld,"
           "\"v_head_dim\":%lld,\"num_key_value_heads\":%lld",
        (long long)hp->kv_lora_rank, (long long)hp->qk_nope, (long long)hp->qk_rope,
        (long long)hp->v_head, (long long)hp->n_head);
}

/* The RoPE scaling a GGUF carries, as config.json's rope_scaling. */
static void put_rope(jbuf *b, const gguf_model *m, const gguf_hparams *hp)
{
    put(b, ",\"rope_theta\":%.17g", hp->rope_freq_base);
    const gguf_tensor *rf = gguf_model_get(m, -1, GGUF_ROLE_ROPE_FREQS);
    if (rf && rf->type == GGUF_TYPE_F32) {
        /* gguf-gen's Llama-3 factors: low 1, high 4, original context 8192; the
         * largest divisor is the factor */
        float f = 1.0f;
        for (int64_t i = 0; i < rf->ne[0]; i++) {
            float v;
            memcpy(&v, rf->data + 4 * i, 4);
            if (v > f)
                f = v;
        }
        put(b, ",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":%.9g,"
               "\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
               "\"original_max_position_embeddings\":8192}",
            (double)f);
    } else if (hp->rope_scaling == GGUF_ROPE_SCALING_YARN) {
        const double ms = hp->yarn_log_mul / 0.1; /* the converter writes 0.1 * mscale_all_dim */
        put(b, ",\"rope_scaling\":{\"type\":\"yarn\",\"factor\":%.17g,"
               "\"original_max_position_embeddings\":%lld,\"beta_fast\":%.17g,"
               "\"beta_slow\":%.17g",
            hp->rope_factor, (long long)hp->yarn_orig_ctx, hp->yarn_beta_fast,
            hp->yarn_beta_slow);
        if (hp->is_mla)
            put(b, ",\"mscale\":%.17g,\"mscale_all_dim\":%.17g", ms, ms);
        put(b, "}");
    } else if (hp->rope_scaling == GGUF_ROPE_SCALING_LINEAR) {
        put(b, ",\"rope_scaling\":{\"type\":\"linear\",\"factor\":%.17g}", hp->rope_factor);
    }
}

char *gen_hf_config(const gguf_model *m, const char *quant)
{
    const gguf_hparams *hp = gguf_model_hparams(m);
    const gguf_file *meta = gguf_model_meta(m);
    const gguf_arch a = hp->arch;
    const bool v2 = a == GGUF_ARCH_DEEPSEEK2 && hp->gating != GGUF_GATING_SIGMOID;
    static const char *const cls[GGUF_ARCH_COUNT][2] = {
        [GGUF_ARCH_LLAMA] = {"LlamaForCausalLM", "llama"},
        [GGUF_ARCH_QWEN2] = {"Qwen2ForCausalLM", "qwen2"},
        [GGUF_ARCH_QWEN3] = {"Qwen3ForCausalLM", "qwen3"},
        [GGUF_ARCH_QWEN3MOE] = {"Qwen3MoeForCausalLM", "qwen3_moe"},
        [GGUF_ARCH_DEEPSEEK2] = {"DeepseekV3ForCausalLM", "deepseek_v3"},
        [GGUF_ARCH_GLM4MOE] = {"Glm4MoeForCausalLM", "glm4_moe"},
        [GGUF_ARCH_GLM_DSA] = {"GlmMoeDsaForCausalLM", "glm_moe_dsa"},
    };
    if (a <= GGUF_ARCH_UNKNOWN || a >= GGUF_ARCH_COUNT)
        return NULL;
    jbuf b = {0};
    put(&b, "{\"architectures\":[\"%s\"],\"model_type\":\"%s\"",
        v2 ? "DeepseekV2ForCausalLM" : cls[a][0], v2 ? "deepseek_v2" : cls[a][1]);
    put(&b, ",\"hidden_size\":%lld,\"num_hidden_layers\":%lld,\"num_attention_heads\":%lld,"
            "\"vocab_size\":%lld,\"rms_norm_eps\":%.17g,\"max_position_embeddings\":%lld,"
            "\"tie_word_embeddings\":%s,\"hidden_act\":\"silu\",\"torch_dtype\":\"bfloat16\"",
        (long long)hp->n_embd, (long long)hp->n_layer_main, (long long)hp->n_head,
        (long long)hp->n_vocab, hp->rms_eps,
        (long long)(hp->n_ctx_train > 0 ? hp->n_ctx_train : 4096),
        hp->tied_embeddings ? "true" : "false");
    if (hp->n_ff > 0)
        put(&b, ",\"intermediate_size\":%lld", (long long)hp->n_ff);
    const int32_t bos = gguf_fwd_token_bos(meta), eos = gguf_fwd_token_eos(meta);
    if (bos >= 0)
        put(&b, ",\"bos_token_id\":%d", bos);
    if (eos >= 0)
        put(&b, ",\"eos_token_id\":%d", eos);
    if (!hp->is_mla) {
        put(&b, ",\"num_key_value_heads\":%lld", (long long)hp->n_head_kv);
        if (a != GGUF_ARCH_QWEN2) /* Qwen2 configs have no head_dim */
            put(&b, ",\"head_dim\":%lld", (long long)hp->n_embd_head_k);
    }
    put_rope(&b, m, hp);
    switch (a) {
    case GGUF_ARCH_QWEN3:
        put(&b, ",\"attention_bias\":false");
        break;
    case GGUF_ARCH_QWEN3MOE:
        put(&b, ",\"num_experts\":%lld,\"num_experts_per_tok\":%lld,\"moe_intermediate_size\":%lld,"
                "\"norm_topk_prob\":%s,\"decoder_sparse_step\":1,\"mlp_only_layers\":[]",
            (long long)hp->n_expert, (long long)hp->n_expert_used, (long long)hp->n_ff_exp,
            hp->norm_topk ? "true" : "false");
        break;
    case GGUF_ARCH_GLM4MOE:
        put(&b, ",\"partial_rotary_factor\":%.17g,\"attention_bias\":%s,\"use_qk_norm\":%s,"
                "\"num_nextn_predict_layers\":%lld",
            (double)hp->n_rot / (double)hp->n_embd_head_k, hp->attn_qkv_bias ? "true" : "false",
            hp->attn_qk_norm ? "true" : "false", (long long)hp->n_nextn);
        put_moe(&b, hp);
        break;
    case GGUF_ARCH_DEEPSEEK2:
        put_mla(&b, hp);
        put_moe(&b, hp);
        put(&b, ",\"topk_method\":\"%s\"",
            hp->has_exp_probs_b ? "noaux_tc" : hp->n_group > 1 ? "group_limited_greedy"
                                                               : "greedy");
        break;
    case GGUF_ARCH_GLM_DSA:
        put_mla(&b, hp);
        put_moe(&b, hp);
        put(&b, ",\"index_n_heads\":%lld,\"index_head_dim\":%lld,\"index_topk\":%lld,"
                "\"num_nextn_predict_layers\":%lld",
            (long long)hp->idx_n_head, (long long)hp->idx_head_dim, (long long)hp->idx_top_k,
            (long long)hp->n_nextn);
        break;
    default:
        break;
    }
    put(&b, "%s}\n", quant ? quant : "");
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
