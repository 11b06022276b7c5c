/*
 * config.json as transformers writes and reads it: the spellings of
 * transformers 5 (rope_parameters, the attribute_map names of the expert
 * count) beside the 4.x ones, which key wins where two say the same thing,
 * and the keys refused by name. The values come from the committed corpus
 * tests/fuzz/corpus/hf_config (tests/fuzz/make_hf_config_corpus.py).
 *
 * With arguments, `test_hf_config_spellings --json CONFIG.json...` prints
 * what the parser makes of each file, one JSON object a line (the status
 * and message on failure): tests/interop/test_hf_config_transformers.py
 * compares it with transformers' own configuration objects.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/model.h"
#include "model/model_internal.h"

static char *read_text(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *q = realloc(buf, cap *= 2);
            if (!q)
                free(buf);
            buf = q;
        }
    }
    fclose(f);
    *len = n;
    return buf;
}

static int parse_corpus(const char *name, model_hf_config *o, gguf_error *err)
{
    const char *src = getenv("GGUFKIT_SRC");
    ck_assert_msg(src != NULL, "GGUFKIT_SRC is not set");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fuzz/corpus/hf_config/%s", src, name);
    size_t n;
    char *text = read_text(path, &n);
    ck_assert_msg(text != NULL, "%s", path);
    const int rc = model_hf_config_parse(o, text, n, name, err);
    free(text);
    return rc;
}

static void want_error(const char *name, int code, const char *needle)
{
    model_hf_config o;
    gguf_error err;
    ck_assert_int_eq(parse_corpus(name, &o, &err), code);
    ck_assert_msg(strstr(err.message, needle) != NULL, "%s: no '%s' in: %s", name, needle,
                  err.message);
}

/* ------------------------------------------------------------ spellings */

START_TEST(expert_count_names)
{
    model_hf_config o;
    gguf_error err;
    /* Qwen3MoeConfig: attribute_map num_experts -> num_local_experts (what 5.x saves) */
    ck_assert_int_eq(parse_corpus("ok--qwen3moe-num-local-experts.json", &o, &err), 0);
    ck_assert_int_eq(o.hp.n_expert, 8);
    ck_assert_double_eq(o.hp.rope_freq_base, 1e6);
    ck_assert_int_eq(parse_corpus("ok--qwen3moe-both-expert-names.json", &o, &err), 0);
    ck_assert_int_eq(o.hp.n_expert, 8);
    ck_assert_int_eq(parse_corpus("ok--qwen3moe.json", &o, &err), 0); /* 4.x num_experts */
    ck_assert_int_eq(o.hp.n_expert, 8);
    /* DeepseekV2Config: num_experts -> n_routed_experts */
    ck_assert_int_eq(parse_corpus("ok--deepseek-v2-num-experts.json", &o, &err), 0);
    ck_assert_int_eq(o.hp.n_expert, 8);
    /* DeepseekV3Config / Glm4MoeConfig: num_local_experts -> n_routed_experts */
    ck_assert_int_eq(parse_corpus("ok--deepseek-v3-num-local-experts.json", &o, &err), 0);
    ck_assert_int_eq(o.hp.n_expert, 8);
    ck_assert_int_eq(parse_corpus("ok--glm4moe-rope-parameters.json", &o, &err), 0);
    ck_assert_int_eq(o.hp.n_expert, 8);
    /* GlmMoeDsaConfig: num_experts too (its __post_init__) */
    ck_assert_int_eq(parse_corpus("ok--glm-dsa-num-experts.json", &o, &err), 0);
    ck_assert_int_eq(o.hp.n_expert, 8);
    ck_assert_int_eq(o.hp.n_layer_dense_lead, 1);
    want_error("GGUF_E_BAD_VALUE--experts-disagree.json", GGUF_E_BAD_VALUE,
               "num_experts: 16 disagrees with num_local_experts 8");
    want_error("GGUF_E_BAD_VALUE--experts-unread-name.json", GGUF_E_BAD_VALUE,
               "num_experts: not read by transformers' DeepseekV3Config (it reads "
               "n_routed_experts or num_local_experts)");
}
END_TEST

START_TEST(rope_spellings)
{
    model_hf_config o;
    gguf_error err;
    /* partial_rotary_factor inside rope_parameters (5.x) wins over the default 0.5 */
    ck_assert_int_eq(parse_corpus("ok--glm4moe-rope-parameters.json", &o, &err), 0);
    ck_assert_int_eq(o.hp.n_rot, 8); /* head_dim 32 x 0.25 */
    ck_assert_int_eq(parse_corpus("ok--glm4moe.json", &o, &err), 0); /* 4.x: at the top */
    ck_assert_int_eq(o.hp.n_rot, 16);
    /* a non-empty rope_scaling wins over rope_parameters; its theta from the top */
    ck_assert_int_eq(parse_corpus("ok--qwen3-rope-scaling-wins.json", &o, &err), 0);
    ck_assert_int_eq(o.hp.rope_scaling, GGUF_ROPE_SCALING_YARN);
    ck_assert_double_eq(o.hp.rope_freq_base, 1e6);
    ck_assert_int_eq(o.hp.yarn_orig_ctx, 32768);
    /* a top-level original_max_position_embeddings wins over the dict's */
    ck_assert_int_eq(parse_corpus("ok--qwen3-orig-ctx-top-level.json", &o, &err), 0);
    ck_assert_int_eq(o.hp.yarn_orig_ctx, 8192);
    /* 4.x llama3 at the top */
    ck_assert_int_eq(parse_corpus("ok--llama3-rope.json", &o, &err), 0);
    ck_assert_double_eq(o.hp.rope_freq_base, 500000.0);
    ck_assert_double_eq(o.l3_factor, 8.0);
    ck_assert_int_eq(o.l3_orig, 8192);
    want_error("GGUF_E_UNSUPPORTED--rope-per-layer-type.json", GGUF_E_UNSUPPORTED,
               "rope_parameters: RoPE parameters per layer type ('full_attention')");
    want_error("GGUF_E_UNSUPPORTED--yarn-no-truncate.json", GGUF_E_UNSUPPORTED,
               "rope_scaling: YaRN with truncate false");
    want_error("GGUF_E_BAD_VALUE--qwen3-partial-rope.json", GGUF_E_BAD_VALUE,
               "partial_rotary_factor: 0.5: transformers' Qwen3Config rotates the whole head");
}
END_TEST

START_TEST(layers_and_routing)
{
    model_hf_config o;
    gguf_error err;
    ck_assert_int_eq(parse_corpus("ok--llama-swish.json", &o, &err), 0);
    /* use_sliding_window, but every layer below max_window_layers: full attention */
    ck_assert_int_eq(parse_corpus("ok--qwen2-sliding-unused.json", &o, &err), 0);
    /* first_k_dense_replace past the last layer: every layer dense */
    ck_assert_int_eq(parse_corpus("ok--glm-dsa-first-k-clipped.json", &o, &err), 0);
    ck_assert_int_eq(o.hp.n_layer_dense_lead, 2);
    ck_assert_int_eq(parse_corpus("ok--deepseek-v2.json", &o, &err), 0);
    ck_assert(!o.hp.norm_topk && o.hp.gating == GGUF_GATING_SOFTMAX && o.hp.n_group == 0);
    want_error("GGUF_E_UNSUPPORTED--sliding-window.json", GGUF_E_UNSUPPORTED,
               "use_sliding_window: sliding-window attention");
    want_error("GGUF_E_UNSUPPORTED--sliding-layer-types.json", GGUF_E_UNSUPPORTED,
               "layer_types: sliding-window attention");
    want_error("GGUF_E_UNSUPPORTED--dsa-shared-indexer.json", GGUF_E_UNSUPPORTED,
               "indexer_types: a layer that reuses another layer's indexer top-k");
    want_error("GGUF_E_UNSUPPORTED--dsa-topk-pattern.json", GGUF_E_UNSUPPORTED,
               "index_topk_pattern: a layer that reuses");
    want_error("GGUF_E_UNSUPPORTED--dsa-topk-freq.json", GGUF_E_UNSUPPORTED,
               "index_topk_freq: layers that reuse");
    want_error("GGUF_E_UNSUPPORTED--v2-norm-topk.json", GGUF_E_UNSUPPORTED,
               "norm_topk_prob: true: transformers' DeepseekV2 never normalizes");
    want_error("GGUF_E_UNSUPPORTED--v2-sigmoid.json", GGUF_E_UNSUPPORTED,
               "scoring_func: sigmoid: transformers' DeepseekV2 routes with softmax only");
    want_error("GGUF_E_UNSUPPORTED--v2-group-limited.json", GGUF_E_UNSUPPORTED,
               "topk_method: group_limited_greedy scores a group by its best expert");
    want_error("GGUF_E_UNSUPPORTED--v3-softmax.json", GGUF_E_UNSUPPORTED,
               "scoring_func: softmax: transformers' DeepseekV3Config routes with sigmoid");
    want_error("GGUF_E_UNSUPPORTED--v3-greedy-groups.json", GGUF_E_UNSUPPORTED,
               "topk_method: 'greedy': transformers' DeepseekV3Config routes as noaux_tc");
    want_error("GGUF_E_UNSUPPORTED--attention-bias.json", GGUF_E_UNSUPPORTED,
               "attention_bias: true: an o_proj bias");
    want_error("GGUF_E_UNSUPPORTED--mlp-bias.json", GGUF_E_UNSUPPORTED, "mlp_bias: true");
    want_error("GGUF_E_BAD_VALUE--mla-kv-heads.json", GGUF_E_BAD_VALUE,
               "num_key_value_heads: MLA takes one key and value per query head");
    want_error("GGUF_E_BAD_VALUE--v3-head-dim.json", GGUF_E_BAD_VALUE,
               "head_dim: transformers' DeepseekV3 rotates head_dim dims");
    want_error("GGUF_E_BAD_VALUE--dense-layers-disagree.json", GGUF_E_BAD_VALUE,
               "mlp_layer_types: 1 leading dense layers, first_k_dense_replace says otherwise");
}
END_TEST

/* ------------------------------------------------------------ --json */

static void json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        const unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

static void dump(const char *path)
{
    size_t n;
    char *text = read_text(path, &n);
    model_hf_config o;
    gguf_error err;
    gguf_error_clear(&err);
    const int rc = text ? model_hf_config_parse(&o, text, n, path, &err) : GGUF_E_IO;
    free(text);
    printf("{\"file\": ");
    json_str(path);
    printf(", \"status\": \"%s\", \"message\": ", rc ? gguf_status_name(rc) : "ok");
    json_str(rc ? err.message : "");
    if (rc) {
        printf("}\n");
        return;
    }
    const gguf_hparams *h = &o.hp;
    static const char *const scaling[] = {"none", "linear", "yarn", "longrope"};
    static const char *const gating[] = {"none", "softmax", "sigmoid", "softmax_weight"};
#define I(k, v) printf(", \"%s\": %lld", k, (long long)(v))
#define D(k, v) printf(", \"%s\": %.17g", k, (double)(v))
#define B(k, v) printf(", \"%s\": %s", k, (v) ? "true" : "false")
    printf(", \"arch\": \"%s\", \"model_type\": ", h->arch_name);
    json_str(o.model_type);
    I("n_vocab", h->n_vocab);
    I("n_ctx_train", h->n_ctx_train);
    I("n_embd", h->n_embd);
    I("n_layer", h->n_layer);
    I("n_ff", h->n_ff);
    I("n_head", h->n_head);
    I("n_head_kv", h->n_head_kv);
    I("n_embd_head_k", h->n_embd_head_k);
    I("n_embd_head_v", h->n_embd_head_v);
    D("rms_eps", h->rms_eps);
    I("n_rot", h->n_rot);
    D("rope_freq_base", h->rope_freq_base);
    printf(", \"rope_scaling\": \"%s\"", scaling[h->rope_scaling & 3]);
    D("rope_factor", h->rope_factor);
    D("rope_attn_factor", h->rope_attn_factor);
    I("yarn_orig_ctx", h->yarn_orig_ctx);
    D("yarn_beta_fast", h->yarn_beta_fast);
    D("yarn_beta_slow", h->yarn_beta_slow);
    D("yarn_log_mul", h->yarn_log_mul);
    D("yarn_mscale", h->yarn_mscale);
    D("attn_scale", h->attn_scale);
    D("l3_factor", o.l3_factor);
    D("l3_low", o.l3_low);
    D("l3_high", o.l3_high);
    I("l3_orig", o.l3_orig);
    B("is_mla", h->is_mla);
    I("q_lora_rank", h->q_lora_rank);
    I("kv_lora_rank", h->kv_lora_rank);
    I("qk_nope", h->qk_nope);
    I("qk_rope", h->qk_rope);
    I("v_head", h->v_head);
    I("n_expert", h->n_expert);
    I("n_expert_used", h->n_expert_used);
    I("n_expert_shared", h->n_expert_shared);
    I("n_ff_exp", h->n_ff_exp);
    I("n_ff_shexp", h->n_ff_shexp);
    I("n_layer_dense_lead", h->n_layer_dense_lead);
    printf(", \"gating\": \"%s\"", gating[h->gating & 3]);
    B("norm_topk", h->norm_topk);
    D("routed_scale", h->routed_scale);
    I("n_group", h->n_group);
    I("topk_group", h->topk_group);
    I("idx_n_head", h->idx_n_head);
    I("idx_head_dim", h->idx_head_dim);
    I("idx_top_k", h->idx_top_k);
    B("tied_embeddings", h->tied_embeddings);
    I("bos", o.bos);
    I("eos", o.eos);
#undef I
#undef D
#undef B
    printf("}\n");
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--json")) {
        for (int i = 2; i < argc; i++)
            dump(argv[i]);
        return 0;
    }
    Suite *s = suite_create("hf_config_spellings");
    TCase *tc = tcase_create("hf_config_spellings");
    tcase_add_test(tc, expert_count_names);
    tcase_add_test(tc, rope_spellings);
    tcase_add_test(tc, layers_and_routing);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
