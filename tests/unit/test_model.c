/* Model module: hyper-parameters, roles, HF names, and every error class of the loader. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/model.h"
#include "gguf/shard.h"
#include "helper_buf.h"
#include "helper_replica.h"

static char *dir;
static char path[4096];

static void setup(void) { dir = th_mkdtemp(); }
static void teardown(void)
{
    th_rmdir(dir);
    free(dir);
}

/* Write a model from specs (base kvs + overrides) and open it; set/model NULL on failure. */
static int open_spec(const char *const *kvs, const char *const *extra, const char *const *ts,
                     gguf_set **set, gguf_model **m, gguf_error *err)
{
    static int seq;
    snprintf(path, sizeof path, "%s/m%d.gguf", dir, seq++);
    ck_assert_int_eq(hr_write_model2(path, kvs, extra, ts), 0);
    *set = NULL;
    *m = NULL;
    int rc = gguf_set_open(set, path, NULL, err);
    ck_assert_int_eq(rc, 0);
    rc = gguf_model_open(m, *set, err);
    return rc;
}

/* A tensor list with one line replaced (or dropped when repl is NULL). */
static const char **tensors_with(const char *const *ts, const char *prefix, const char *repl)
{
    static const char *out[128];
    int n = 0;
    for (int i = 0; ts[i]; i++) {
        if (!strncmp(ts[i], prefix, strlen(prefix))) {
            if (repl)
                out[n++] = repl;
            continue;
        }
        out[n++] = ts[i];
    }
    out[n] = NULL;
    return out;
}

START_TEST(ds2_hparams)
{
    gguf_set *s;
    gguf_model *m;
    gguf_error err;
    ck_assert_int_eq(open_spec(hr_ds2_kvs, NULL, hr_ds2_tensors, &s, &m, &err), 0);
    const gguf_hparams *h = gguf_model_hparams(m);
    ck_assert_int_eq(h->arch, GGUF_ARCH_DEEPSEEK2);
    ck_assert_str_eq(h->arch_name, "deepseek2");
    ck_assert_int_eq(h->n_embd, 64);
    ck_assert_int_eq(h->n_layer, 2);
    ck_assert_int_eq(h->n_layer_main, 2);
    ck_assert_int_eq(h->n_head, 4);
    ck_assert_int_eq(h->n_head_kv, 1); /* as stored: never used for kv_b */
    ck_assert(h->is_mla);
    ck_assert(h->mla_kv_b_split);
    ck_assert_int_eq(h->q_lora_rank, 32);
    ck_assert_int_eq(h->kv_lora_rank, 32);
    ck_assert_int_eq(h->qk_nope, 16);
    ck_assert_int_eq(h->qk_rope, 8);
    ck_assert_int_eq(h->v_head, 16);
    ck_assert_int_eq(h->n_embd_head_k, 24);
    ck_assert_int_eq(h->n_embd_head_v, 16);
    ck_assert_int_eq(h->n_expert, 4);
    ck_assert_int_eq(h->n_expert_used, 2);
    ck_assert_int_eq(h->n_expert_shared, 1);
    ck_assert_int_eq(h->n_ff_exp, 32);
    ck_assert_int_eq(h->n_ff_shexp, 32);
    ck_assert_int_eq(h->n_layer_dense_lead, 1);
    ck_assert_int_eq(h->gating, GGUF_GATING_SIGMOID);
    ck_assert(h->norm_topk);
    ck_assert_double_eq_tol(h->routed_scale, 2.5, 1e-6);
    ck_assert_int_eq(h->n_group, 2);
    ck_assert_int_eq(h->topk_group, 1);
    ck_assert(h->has_exp_probs_b);
    ck_assert(!h->tied_embeddings);
    ck_assert_int_eq(h->rope_pairs, GGUF_ROPE_ADJACENT);
    ck_assert_int_eq(h->rope_scaling, GGUF_ROPE_SCALING_YARN);
    ck_assert_int_eq(h->yarn_orig_ctx, 4096);
    double ms = 1.0 + 0.1 * log(40.0);
    ck_assert_double_eq_tol(h->yarn_mscale, ms, 1e-6);
    ck_assert_double_eq_tol(h->attn_scale, ms * ms / sqrt(24.0), 1e-6);
    ck_assert_int_eq(gguf_model_layer_kind(m, 0), GGUF_LAYER_DENSE);
    ck_assert_int_eq(gguf_model_layer_kind(m, 1), GGUF_LAYER_MOE);
    /* per-layer access */
    ck_assert_ptr_nonnull(gguf_model_get(m, 0, GGUF_ROLE_FFN_GATE));
    ck_assert_ptr_null(gguf_model_get(m, 0, GGUF_ROLE_FFN_GATE_EXPS));
    const gguf_tensor *kb = gguf_model_get(m, 1, GGUF_ROLE_ATTN_K_B);
    ck_assert_ptr_nonnull(kb);
    ck_assert_str_eq(kb->name, "blk.1.attn_k_b.weight");
    ck_assert_ptr_nonnull(gguf_model_get(m, -1, GGUF_ROLE_OUTPUT));
    ck_assert_ptr_null(gguf_model_get(m, 2, GGUF_ROLE_ATTN_NORM));
    const gguf_model_tensor *mt = gguf_model_tensor_find(m, "blk.1.attn_v_b.weight");
    ck_assert_ptr_nonnull(mt);
    ck_assert_int_eq(mt->role, GGUF_ROLE_ATTN_V_B);
    ck_assert_int_eq(mt->layer, 1);
    ck_assert_str_eq(mt->hf_name, "model.layers.1.self_attn.kv_b_proj.weight");
    ck_assert_ptr_nonnull(strstr(mt->hf_note, "v part"));
    mt = gguf_model_tensor_find(m, "blk.1.ffn_up_exps.weight");
    ck_assert_str_eq(mt->hf_name, "model.layers.1.mlp.experts.*.up_proj.weight");
    int64_t ne[4];
    uint32_t nd;
    ck_assert_int_eq(gguf_model_expected_shape(m, 1, GGUF_ROLE_ATTN_K_B, ne, &nd), 0);
    ck_assert_int_eq(nd, 3);
    ck_assert_int_eq(ne[0], 16);
    ck_assert_int_eq(ne[1], 32);
    ck_assert_int_eq(ne[2], 4);
    ck_assert_int_eq(gguf_model_expected_shape(m, 0, GGUF_ROLE_FFN_UP_EXPS, ne, &nd),
                     GGUF_E_NOT_FOUND);
    ck_assert_int_eq(gguf_model_role_expected(m, 1, GGUF_ROLE_FFN_EXP_PROBS_B), 2);
    ck_assert_int_eq(gguf_model_role_expected(m, 1, GGUF_ROLE_ATTN_K), 0);
    gguf_model_free(m);
    gguf_set_free(s);
}
END_TEST

START_TEST(llama_and_qwen3moe)
{
    gguf_set *s;
    gguf_model *m;
    gguf_error err;
    ck_assert_int_eq(open_spec(hr_llama_kvs, NULL, hr_llama_tensors, &s, &m, &err), 0);
    const gguf_hparams *h = gguf_model_hparams(m);
    ck_assert_int_eq(h->arch, GGUF_ARCH_LLAMA);
    ck_assert_int_eq(h->n_head_kv, 2);
    ck_assert_int_eq(h->n_embd_head_k, 16);
    ck_assert_int_eq(h->n_rot, 16);
    ck_assert(h->llama_qk_permuted);
    ck_assert_int_eq(h->rope_pairs, GGUF_ROPE_ADJACENT);
    ck_assert(!h->is_mla);
    ck_assert_int_eq(h->n_expert, 0);
    ck_assert_double_eq_tol(h->attn_scale, 0.25, 1e-9);
    const gguf_model_tensor *q = gguf_model_tensor_find(m, "blk.0.attn_q.weight");
    ck_assert_ptr_nonnull(strstr(q->hf_note, "permuted"));
    gguf_model_free(m);
    gguf_set_free(s);

    ck_assert_int_eq(open_spec(hr_qwen3moe_kvs, NULL, hr_qwen3moe_tensors, &s, &m, &err), 0);
    h = gguf_model_hparams(m);
    ck_assert_int_eq(h->arch, GGUF_ARCH_QWEN3MOE);
    ck_assert_int_eq(h->rope_pairs, GGUF_ROPE_HALF);
    ck_assert(h->tied_embeddings);
    ck_assert(h->attn_qk_norm);
    ck_assert(h->norm_topk);
    ck_assert_int_eq(h->gating, GGUF_GATING_SOFTMAX);
    ck_assert_int_eq(h->n_ff_exp, 48);
    ck_assert_int_eq(h->n_expert_shared, 0);
    ck_assert_ptr_null(gguf_model_get(m, -1, GGUF_ROLE_OUTPUT));
    gguf_model_free(m);
    gguf_set_free(s);
}
END_TEST

START_TEST(names_and_permutation)
{
    char buf[128];
    const char *note;
    ck_assert_int_eq(gguf_role_hf_name(GGUF_ARCH_GLM4MOE, GGUF_ROLE_ATTN_POST_NORM, 7, buf,
                                       sizeof buf, &note),
                     0);
    ck_assert_str_eq(buf, "model.layers.7.post_attention_layernorm.weight");
    ck_assert_ptr_nonnull(strstr(note, "pre-FFN"));
    ck_assert_int_eq(gguf_role_hf_name(GGUF_ARCH_LLAMA, GGUF_ROLE_TOKEN_EMBD, -1, buf, sizeof buf,
                                       NULL),
                     0);
    ck_assert_str_eq(buf, "model.embed_tokens.weight");
    ck_assert_int_eq(gguf_role_hf_name(GGUF_ARCH_LLAMA, GGUF_ROLE_ATTN_Q, 3, buf, 8, NULL),
                     GGUF_E_LIMIT);
    ck_assert_int_eq(gguf_role_hf_name(GGUF_ARCH_LLAMA, GGUF_ROLE_ROPE_FREQS, -1, buf, 64, NULL),
                     GGUF_E_NOT_FOUND);

    gguf_role r;
    int64_t il;
    ck_assert_int_eq(gguf_role_parse(GGUF_ARCH_GLM_DSA, "blk.12.indexer.k_norm.bias", &r, &il), 0);
    ck_assert_int_eq(r, GGUF_ROLE_IDX_K_NORM_BIAS);
    ck_assert_int_eq(il, 12);
    ck_assert_int_eq(gguf_role_parse(GGUF_ARCH_GLM_DSA, "blk.78.nextn.eh_proj.weight", &r, &il), 0);
    ck_assert_int_eq(r, GGUF_ROLE_NEXTN_EH_PROJ);
    ck_assert_int_eq(gguf_role_parse(GGUF_ARCH_LLAMA, "output.weight", &r, &il), 0);
    ck_assert_int_eq(r, GGUF_ROLE_OUTPUT);
    ck_assert_int_eq(il, -1);
    ck_assert_int_eq(gguf_role_parse(GGUF_ARCH_LLAMA, "blk.x.attn_q.weight", &r, &il),
                     GGUF_E_NOT_FOUND);
    ck_assert_int_eq(gguf_role_parse(GGUF_ARCH_LLAMA, "blk.1.output.weight", &r, &il),
                     GGUF_E_NOT_FOUND);

    char out[2][128];
    int n;
    ck_assert_int_eq(gguf_hf_to_gguf_name(GGUF_ARCH_DEEPSEEK2, true,
                                          "model.layers.3.self_attn.kv_b_proj.weight", out, &n),
                     0);
    ck_assert_int_eq(n, 2);
    ck_assert_str_eq(out[0], "blk.3.attn_k_b.weight");
    ck_assert_str_eq(out[1], "blk.3.attn_v_b.weight");
    ck_assert_int_eq(gguf_hf_to_gguf_name(GGUF_ARCH_DEEPSEEK2, false,
                                          "model.layers.3.self_attn.kv_b_proj.weight", out, &n),
                     0);
    ck_assert_int_eq(n, 1);
    ck_assert_str_eq(out[0], "blk.3.attn_kv_b.weight");
    ck_assert_int_eq(gguf_hf_to_gguf_name(GGUF_ARCH_DEEPSEEK2, true,
                                          "model.layers.3.mlp.experts.17.up_proj.weight", out, &n),
                     0);
    ck_assert_str_eq(out[0], "blk.3.ffn_up_exps.weight");
    ck_assert_int_eq(gguf_hf_to_gguf_name(GGUF_ARCH_GLM4MOE, false,
                                          "model.layers.2.post_attention_layernorm.weight", out,
                                          &n),
                     0);
    ck_assert_str_eq(out[0], "blk.2.post_attention_norm.weight");
    ck_assert_int_eq(gguf_hf_to_gguf_name(GGUF_ARCH_LLAMA, false,
                                          "model.layers.2.post_attention_layernorm.weight", out,
                                          &n),
                     0);
    ck_assert_str_eq(out[0], "blk.2.ffn_norm.weight");
    ck_assert_int_eq(gguf_hf_to_gguf_name(GGUF_ARCH_LLAMA, false, "model.layers.2.nope", out, &n),
                     GGUF_E_NOT_FOUND);

    /* the permutation is a bijection and its own documented inverse */
    for (int64_t row = 0; row < 64; row++) {
        int64_t hf = gguf_llama_qk_row_to_hf(row, 16);
        ck_assert_int_eq(gguf_llama_qk_row_from_hf(hf, 16), row);
    }
    ck_assert_int_eq(gguf_llama_qk_row_to_hf(1, 8), 4);  /* i=0, j=1 -> hd/2 */
    ck_assert_int_eq(gguf_llama_qk_row_to_hf(2, 8), 1);  /* i=1, j=0 */
    ck_assert_int_eq(gguf_llama_qk_row_to_hf(9, 8), 12); /* head 1 */
    ck_assert_str_eq(gguf_arch_name(gguf_arch_from_name("glm-dsa")), "glm-dsa");
    ck_assert_int_eq(gguf_arch_from_name("gpt2"), GGUF_ARCH_UNKNOWN);
    /* tensor naming: llama's converter's other architectures */
    ck_assert_int_eq(gguf_arch_naming_from_name("mistral"), GGUF_ARCH_LLAMA);
    ck_assert_int_eq(gguf_arch_naming_from_name("granite"), GGUF_ARCH_LLAMA);
    ck_assert_int_eq(gguf_arch_naming_from_name("qwen3moe"), GGUF_ARCH_QWEN3MOE);
    ck_assert_int_eq(gguf_arch_naming_from_name("gpt2"), GGUF_ARCH_UNKNOWN);
    ck_assert_int_eq(gguf_arch_naming_from_name(NULL), GGUF_ARCH_UNKNOWN);
}
END_TEST

/* ---- every error class ---- */

static void expect_fail(const char *const *extra, const char *const *ts, int code,
                        const char *needle)
{
    gguf_set *s;
    gguf_model *m;
    gguf_error err;
    int rc = open_spec(hr_ds2_kvs, extra, ts ? ts : hr_ds2_tensors, &s, &m, &err);
    ck_assert_msg(rc == code, "rc %d (%s), want %d: %s", rc, gguf_status_name(rc), code,
                  err.message);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(err.message, needle) != NULL, "message '%s' lacks '%s'", err.message,
                  needle);
    gguf_set_free(s);
}

START_TEST(err_missing_keys_listed)
{
    const char *extra[] = {"del deepseek2.attention.kv_lora_rank", "del deepseek2.expert_count",
                           NULL};
    expect_fail(extra, NULL, GGUF_E_NOT_FOUND,
                "missing metadata: deepseek2.attention.kv_lora_rank, deepseek2.expert_count");
}
END_TEST

START_TEST(err_missing_arch)
{
    const char *extra[] = {"del general.architecture", NULL};
    expect_fail(extra, NULL, GGUF_E_NOT_FOUND, "general.architecture");
}
END_TEST

START_TEST(err_unsupported_arch)
{
    const char *extra[] = {"str general.architecture gpt2", NULL};
    expect_fail(extra, NULL, GGUF_E_UNSUPPORTED, "'gpt2' is not supported");
}
END_TEST

START_TEST(err_wrong_type)
{
    const char *extra[] = {"str deepseek2.attention.head_count four", NULL};
    expect_fail(extra, NULL, GGUF_E_WRONG_TYPE, "deepseek2.attention.head_count: not an integer");
}
END_TEST

START_TEST(err_mla_key_length)
{
    /* key_length of an MLA file is kv_lora + rope, not the per-head width */
    const char *extra[] = {"u32 deepseek2.attention.key_length 24", NULL};
    expect_fail(extra, NULL, GGUF_E_BAD_VALUE, "kv_lora_rank + rope.dimension_count");
}
END_TEST

START_TEST(err_inconsistent_values)
{
    const char *e1[] = {"u32 deepseek2.expert_used_count 9", NULL};
    expect_fail(e1, NULL, GGUF_E_BAD_VALUE, "expert_used_count: exceeds expert_count");
    const char *e2[] = {"u32 deepseek2.expert_group_count 3", NULL};
    expect_fail(e2, NULL, GGUF_E_BAD_VALUE, "does not divide expert_count");
    const char *e3[] = {"u32 deepseek2.rope.dimension_count 24", NULL};
    expect_fail(e3, NULL, GGUF_E_BAD_VALUE, "key_length_mla: must exceed");
    const char *e4[] = {"f32 deepseek2.attention.layer_norm_rms_epsilon 0", NULL};
    expect_fail(e4, NULL, GGUF_E_BAD_VALUE, "layer_norm_rms_epsilon");
    const char *e5[] = {"u32 deepseek2.block_count 0", NULL};
    expect_fail(e5, NULL, GGUF_E_BAD_VALUE, "block_count");
    const char *e6[] = {"u32 deepseek2.expert_gating_func 7", NULL};
    expect_fail(e6, NULL, GGUF_E_BAD_VALUE, "expert_gating_func");
    const char *e7[] = {"str deepseek2.rope.scaling.type weird", NULL};
    expect_fail(e7, NULL, GGUF_E_BAD_VALUE, "rope.scaling.type");
    const char *e8[] = {"u64 deepseek2.embedding_length 99999999999", NULL};
    expect_fail(e8, NULL, GGUF_E_BAD_VALUE, "sanity cap");
}
END_TEST

START_TEST(err_head_kv_not_divisor)
{
    gguf_set *s;
    gguf_model *m;
    gguf_error err;
    const char *extra[] = {"u32 llama.attention.head_count_kv 3", NULL};
    int rc = open_spec(hr_llama_kvs, extra, hr_llama_tensors, &s, &m, &err);
    ck_assert_int_eq(rc, GGUF_E_BAD_VALUE);
    ck_assert_ptr_nonnull(strstr(err.message, "llama.attention.head_count_kv: 3 does not divide"));
    gguf_set_free(s);
}
END_TEST

START_TEST(err_missing_tensor)
{
    const char **ts = tensors_with(hr_ds2_tensors, "blk.1.attn_k_b.", NULL);
    expect_fail(NULL, ts, GGUF_E_NOT_FOUND, "blk.1.attn_k_b.weight");
}
END_TEST

START_TEST(err_bad_shape)
{
    /* k_b sized from head_count_kv = 1: the classic mistake */
    const char **ts =
        tensors_with(hr_ds2_tensors, "blk.0.attn_k_b.", "blk.0.attn_k_b.weight f32 16,32,1");
    expect_fail(NULL, ts, GGUF_E_BAD_SHAPE, "blk.0.attn_k_b.weight: shape [16, 32, 1], expected "
                                            "[16, 32, 4]");
}
END_TEST

START_TEST(err_block_beyond_count)
{
    const char *ts[64];
    int n = 0;
    for (int i = 0; hr_ds2_tensors[i]; i++)
        ts[n++] = hr_ds2_tensors[i];
    ts[n++] = "blk.5.attn_norm.weight f32 64";
    ts[n] = NULL;
    expect_fail(NULL, ts, GGUF_E_BAD_VALUE, "block 5 beyond deepseek2.block_count = 2");
}
END_TEST

START_TEST(err_array_per_layer)
{
    gguf_set *s;
    gguf_model *m;
    gguf_error err;
    /* per-layer arrays are accepted when every layer has the same value */
    const char *same[] = {"arru32 llama.attention.head_count_kv 2,2", NULL};
    ck_assert_int_eq(open_spec(hr_llama_kvs, same, hr_llama_tensors, &s, &m, &err), 0);
    ck_assert_int_eq(gguf_model_hparams(m)->n_head_kv, 2);
    gguf_model_free(m);
    gguf_set_free(s);
    const char *diff[] = {"arru32 llama.attention.head_count_kv 2,4", NULL};
    ck_assert_int_eq(open_spec(hr_llama_kvs, diff, hr_llama_tensors, &s, &m, &err),
                     GGUF_E_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.message, "per-layer values that differ"));
    gguf_set_free(s);
}
END_TEST

START_TEST(unknown_tensor_kept)
{
    const char *ts[64];
    int n = 0;
    for (int i = 0; hr_llama_tensors[i]; i++)
        ts[n++] = hr_llama_tensors[i];
    ts[n++] = "blk.1.mystery.weight f32 8";
    ts[n] = NULL;
    gguf_set *s;
    gguf_model *m;
    gguf_error err;
    ck_assert_int_eq(open_spec(hr_llama_kvs, NULL, ts, &s, &m, &err), 0);
    const gguf_model_tensor *mt = gguf_model_tensor_find(m, "blk.1.mystery.weight");
    ck_assert_int_eq(mt->role, GGUF_ROLE_UNKNOWN);
    ck_assert_int_eq(mt->layer, 1);
    ck_assert_ptr_null(mt->hf_name);
    gguf_model_free(m);
    gguf_set_free(s);
}
END_TEST

START_TEST(allow_missing_and_parts)
{
    gguf_set *s;
    gguf_model *m;
    gguf_error err;
    const char **ts = tensors_with(hr_ds2_tensors, "blk.0.attn_q_b.", NULL);
    snprintf(path, sizeof path, "%s/miss.gguf", dir);
    ck_assert_int_eq(hr_write_model(path, hr_ds2_kvs, ts), 0);
    ck_assert_int_eq(gguf_set_open(&s, path, NULL, &err), 0);
    ck_assert_int_eq(gguf_model_open(&m, s, &err), GGUF_E_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(err.message, "missing 1 tensor(s) the deepseek2 architecture "
                                              "requires: blk.0.attn_q_b.weight"));
    ck_assert_int_eq(gguf_model_open_flags(&m, s, GGUF_MODEL_ALLOW_MISSING, &err), 0);
    ck_assert_ptr_null(gguf_model_get(m, 0, GGUF_ROLE_ATTN_Q_B));
    ck_assert_int_eq(gguf_model_role_expected(m, 0, GGUF_ROLE_ATTN_Q_B), 1);
    ck_assert_ptr_eq(gguf_model_meta(m), gguf_set_meta(s));
    ck_assert_str_eq(gguf_model_name(m), path);
    /* the same model over the meta file and a hand-made tensor list */
    const gguf_tensor *list[64];
    int64_t n = gguf_set_tensor_count(s);
    for (int64_t i = 0; i < n; i++)
        list[i] = gguf_set_tensor_at(s, i);
    gguf_model *m2;
    ck_assert_int_eq(gguf_model_open_parts(&m2, gguf_set_meta(s), list, n, "parts", &err),
                     GGUF_E_NOT_FOUND);
    ck_assert_int_eq(gguf_model_open_parts_flags(&m2, gguf_set_meta(s), list, n, "parts",
                                                 GGUF_MODEL_ALLOW_MISSING, &err),
                     0);
    ck_assert_str_eq(gguf_model_name(m2), "parts");
    ck_assert_int_eq(gguf_model_tensor_count(m2), n);
    ck_assert_ptr_null(gguf_model_tensor_at(m2, n));
    ck_assert_ptr_null(gguf_model_tensor_find(m2, "nope"));
    gguf_model_free(m2);
    /* duplicate names in a caller's list */
    list[n] = list[0];
    ck_assert_int_eq(gguf_model_open_parts(&m2, gguf_set_meta(s), list, n + 1, "dup", &err),
                     GGUF_E_DUPLICATE);
    ck_assert_int_eq(gguf_model_open_parts(&m2, NULL, list, n, "x", &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_model_open(&m2, NULL, &err), GGUF_E_INVALID);
    gguf_model_free(m);
    gguf_model_free(NULL);
    gguf_set_free(s);
}
END_TEST

START_TEST(every_role_named)
{
    for (int r = 1; r < GGUF_ROLE_COUNT; r++) {
        const char *nm = gguf_role_name((gguf_role)r);
        ck_assert_str_ne(nm, "unknown");
        /* a name built from the role parses back to it */
        char buf[160];
        if (gguf_role_is_global((gguf_role)r))
            snprintf(buf, sizeof buf, "%s.%s", nm, gguf_role_suffix((gguf_role)r));
        else
            snprintf(buf, sizeof buf, "blk.7.%s.%s", nm, gguf_role_suffix((gguf_role)r));
        gguf_role back;
        int64_t il;
        ck_assert_int_eq(gguf_role_parse(GGUF_ARCH_DEEPSEEK2, buf, &back, &il), 0);
        ck_assert_int_eq(back, r);
        ck_assert_int_eq(il, gguf_role_is_global((gguf_role)r) ? -1 : 7);
    }
    ck_assert_str_eq(gguf_role_name(GGUF_ROLE_COUNT), "unknown");
    ck_assert_str_eq(gguf_role_suffix(GGUF_ROLE_FFN_EXP_PROBS_B), "bias");
    ck_assert_str_eq(gguf_arch_name(GGUF_ARCH_COUNT), "unknown");
}
END_TEST

/*
 * Every metadata key of the deepseek2 spec deleted, given the wrong type, zero, huge or
 * negative: the loader returns a code (never crashes, never accepts garbage silently), and
 * whatever it accepts still plans and takes every fault without crashing (ASan builds).
 */
START_TEST(metadata_sweep)
{
    static const char *const variants[][2] = {{"del", ""},          {"str", "x"},
                                              {"u32", "0"},          {"u64", "99999999999"},
                                              {"i32", "-3"},         {"f32", "-1"},
                                              {"u32", "3"}};
    int n_ok = 0, n_err = 0;
    for (int k = 1; hr_ds2_kvs[k]; k++) {
        char key[128];
        sscanf(hr_ds2_kvs[k], "%*s %127s", key);
        for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
            char line[256];
            snprintf(line, sizeof line, "%s %s %s", variants[v][0], key, variants[v][1]);
            const char *extra[] = {line, NULL};
            gguf_set *s;
            gguf_model *m;
            gguf_error err;
            int rc = open_spec(hr_ds2_kvs, extra, hr_ds2_tensors, &s, &m, &err);
            if (rc == 0) {
                n_ok++;
                gguf_shard_opts o = {.tp = 2, .ep = 2, .engine = GGUF_ENGINE_SGLANG};
                gguf_shard_plan *p;
                if (gguf_shard_plan_create(&p, m, &o, &err) == 0) {
                    for (int f = 1; f < GGUF_FAULT_COUNT; f++)
                        gguf_shard_apply_fault(p, (gguf_fault)f, -1, &err);
                    gguf_shard_plan_free(p);
                }
                gguf_model_free(m);
            } else {
                n_err++;
                ck_assert_msg(rc < 0 && rc >= GGUF_E_STATUS_MIN, "%s: rc %d", line, rc);
                ck_assert_msg(err.message[0] != '\0', "%s: no message", line);
                ck_assert_ptr_null(m);
            }
            gguf_set_free(s);
        }
    }
    ck_assert_int_gt(n_ok, 10);  /* optional keys may go */
    ck_assert_int_gt(n_err, 60); /* required or inconsistent ones may not */
}
END_TEST

/* ---- real files from ../shared/testdata ---- */

static const char *shared(const char *rel)
{
    const char *base = getenv("GGUFKIT_SHARED");
    static char p[4096];
    snprintf(p, sizeof p, "%s/%s", base ? base : "../shared/testdata", rel);
    return p;
}

static gguf_model *open_real(const char *rel, gguf_set **s)
{
    gguf_error err;
    *s = NULL;
    if (gguf_set_open(s, shared(rel), NULL, &err) != 0)
        return NULL; /* absent: the caller skips */
    gguf_model *m = NULL;
    int rc = gguf_model_open(&m, *s, &err);
    ck_assert_msg(rc == 0, "%s", err.message);
    return m;
}

START_TEST(real_deepseek_v3)
{
    gguf_set *s;
    gguf_model *m = open_real("hf/deepseek_v3/model-f32.gguf", &s);
    if (!m)
        return;
    const gguf_hparams *h = gguf_model_hparams(m);
    /* facts from config.json beside the file */
    ck_assert_int_eq(h->arch, GGUF_ARCH_DEEPSEEK2);
    ck_assert_int_eq(h->n_embd, 128);
    ck_assert_int_eq(h->n_layer, 2);
    ck_assert_int_eq(h->n_head, 4);
    ck_assert_int_eq(h->n_head_kv, 1);
    ck_assert_int_eq(h->q_lora_rank, 256);
    ck_assert_int_eq(h->kv_lora_rank, 256);
    ck_assert_int_eq(h->qk_nope, 64);
    ck_assert_int_eq(h->qk_rope, 32);
    ck_assert_int_eq(h->v_head, 64);
    ck_assert_int_eq(h->n_expert, 8);
    ck_assert_int_eq(h->n_expert_used, 2);
    ck_assert_int_eq(h->n_expert_shared, 1);
    ck_assert_int_eq(h->n_ff_exp, 64);
    ck_assert_int_eq(h->n_ff, 256);
    ck_assert_int_eq(h->n_layer_dense_lead, 1);
    ck_assert_int_eq(h->n_group, 2);
    ck_assert_int_eq(h->topk_group, 1);
    ck_assert_int_eq(h->gating, GGUF_GATING_SIGMOID);
    ck_assert(h->norm_topk);
    ck_assert(h->has_exp_probs_b);
    ck_assert_double_eq_tol(h->routed_scale, 2.5, 1e-6);
    ck_assert_int_eq(h->n_vocab, 1024);
    ck_assert_double_eq_tol(h->rope_factor, 40.0, 1e-6);
    ck_assert_int_eq(h->yarn_orig_ctx, 4096);
    ck_assert_double_eq_tol(h->yarn_beta_fast, 32.0, 1e-6);
    ck_assert_double_eq_tol(h->rms_eps, 1e-6, 1e-9);
    double ms = 1.0 + 0.1 * log(40.0);
    ck_assert_double_eq_tol(h->attn_scale, ms * ms / sqrt(96.0), 1e-6);
    ck_assert(h->mla_kv_b_split);
    ck_assert_int_eq(gguf_model_layer_kind(m, 1), GGUF_LAYER_MOE);
    for (int64_t i = 0; i < gguf_model_tensor_count(m); i++)
        ck_assert_int_ne(gguf_model_tensor_at(m, i)->role, GGUF_ROLE_UNKNOWN);
    gguf_model_free(m);
    gguf_set_free(s);
}
END_TEST

START_TEST(real_llama_and_stories)
{
    gguf_set *s;
    gguf_model *m = open_real("hf/llama/model-f32.gguf", &s);
    if (!m)
        return;
    const gguf_hparams *h = gguf_model_hparams(m);
    ck_assert_int_eq(h->n_embd, 128);
    ck_assert_int_eq(h->n_head, 4);
    ck_assert_int_eq(h->n_head_kv, 2);
    ck_assert_int_eq(h->n_embd_head_k, 32);
    ck_assert_int_eq(h->n_vocab, 1024);
    gguf_model_free(m);
    gguf_set_free(s);

    m = open_real("models/stories260K.gguf", &s);
    if (!m)
        return;
    h = gguf_model_hparams(m);
    ck_assert_int_eq(h->n_vocab, 512); /* from tokenizer.ggml.tokens: no vocab_size key */
    ck_assert_int_eq(h->n_layer, 5);
    ck_assert_int_eq(h->n_head_kv, 4);
    ck_assert_int_eq(h->n_ff, 172);
    ck_assert_int_eq(h->n_rot, 8);
    ck_assert_int_eq(h->n_ctx_train, 2048);
    gguf_model_free(m);
    gguf_set_free(s);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, ds2_hparams);
    tcase_add_test(tc, llama_and_qwen3moe);
    tcase_add_test(tc, names_and_permutation);
    tcase_add_test(tc, err_missing_keys_listed);
    tcase_add_test(tc, err_missing_arch);
    tcase_add_test(tc, err_unsupported_arch);
    tcase_add_test(tc, err_wrong_type);
    tcase_add_test(tc, err_mla_key_length);
    tcase_add_test(tc, err_inconsistent_values);
    tcase_add_test(tc, err_head_kv_not_divisor);
    tcase_add_test(tc, err_missing_tensor);
    tcase_add_test(tc, err_bad_shape);
    tcase_add_test(tc, err_block_beyond_count);
    tcase_add_test(tc, err_array_per_layer);
    tcase_add_test(tc, unknown_tensor_kept);
    tcase_add_test(tc, allow_missing_and_parts);
    tcase_add_test(tc, every_role_named);
    tcase_add_test(tc, metadata_sweep);
    tcase_add_test(tc, real_deepseek_v3);
    tcase_add_test(tc, real_llama_and_stories);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
