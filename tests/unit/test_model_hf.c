/*
 * Models over Hugging Face checkpoints (gguf_model_open_hf): config.json,
 * one test per malformed class (the committed corpus tests/fuzz/corpus/
 * hf_config, each file named after its error), the values of real
 * configurations, and small checkpoints written here in F32 whose values say
 * where they come from (row r of q_proj holds r, row r of expert e holds
 * 1000 e + r), so that the GGUF layout of every row read can be checked:
 * llama's Q/K permutation, stacked experts, tied embeddings, llama3 RoPE
 * factors, and the checkpoint errors (missing, mis-shaped and unused
 * tensors).
 */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forward/forward_setup.h"
#include "gguf/forward.h"
#include "gguf/model.h"
#include "gguf/shard.h"
#include "helper_buf.h"
#include "helper_corpus.h"

/* ------------------------------------------------------------ config.json */

static char *corpus_file(const char *name, size_t *len)
{
    const char *src = getenv("GGUFKIT_SRC");
    ck_assert_msg(src != NULL, "GGUFKIT_SRC is not set");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fuzz/corpus/hf_config/%s", src, name);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s", path);
    char *buf = malloc(1 << 16);
    *len = fread(buf, 1, (1 << 16) - 1, f);
    buf[*len] = 0;
    fclose(f);
    return buf;
}

static int parse_corpus(const char *name, gguf_hparams *hp, gguf_error *err)
{
    size_t n;
    char *text = corpus_file(name, &n);
    const int rc = gguf_hparams_from_hf_config(hp, text, n, name, err);
    free(text);
    return rc;
}

static int corpus_one(const char *path, const char *name, gguf_error *err)
{
    (void)path;
    gguf_hparams hp;
    return parse_corpus(name, &hp, err);
}

START_TEST(corpus_named_errors)
{
    th_corpus_replay("hf_config", corpus_one, 40);
}
END_TEST

START_TEST(config_values)
{
    gguf_hparams hp;
    gguf_error err;
    ck_assert_int_eq(parse_corpus("ok--deepseek-v3.json", &hp, &err), 0);
    ck_assert_int_eq(hp.arch, GGUF_ARCH_DEEPSEEK2);
    ck_assert_str_eq(hp.arch_name, "deepseek2");
    ck_assert(hp.is_mla && !hp.mla_kv_b_split && !hp.tied_embeddings);
    ck_assert_int_eq(hp.n_head_kv, 1); /* one latent, as the GGUF says */
    ck_assert_int_eq(hp.n_embd_head_k, 96);
    ck_assert_int_eq(hp.n_rot, 32);
    ck_assert_int_eq(hp.qk_nope, 64);
    ck_assert_int_eq(hp.n_layer_dense_lead, 1);
    ck_assert_int_eq(hp.gating, GGUF_GATING_SIGMOID);
    ck_assert_int_eq(hp.n_group, 2);
    ck_assert_int_eq(hp.n_ff_shexp, 64);
    ck_assert(hp.norm_topk);
    ck_assert_double_eq(hp.routed_scale, 2.5);
    ck_assert_int_eq(hp.rope_scaling, GGUF_ROPE_SCALING_YARN);
    ck_assert_int_eq(hp.yarn_orig_ctx, 4096);
    ck_assert_double_eq_tol(hp.yarn_log_mul, 0.1, 1e-15);
    const double ms = 1 + 0.1 * log(40.0);
    ck_assert_double_eq_tol(hp.attn_scale, ms * ms / sqrt(96.0), 1e-15);
    ck_assert_int_eq(hp.rope_pairs, GGUF_ROPE_ADJACENT);

    ck_assert_int_eq(parse_corpus("ok--deepseek-v2.json", &hp, &err), 0);
    ck_assert_int_eq(hp.gating, GGUF_GATING_SOFTMAX);
    ck_assert_int_eq(hp.q_lora_rank, 0);  /* null: a plain q_proj */
    ck_assert_int_eq(hp.n_group, 0);      /* greedy ignores groups */

    ck_assert_int_eq(parse_corpus("ok--glm-dsa.json", &hp, &err), 0);
    ck_assert_int_eq(hp.arch, GGUF_ARCH_GLM_DSA);
    ck_assert_int_eq(hp.n_layer_dense_lead, 1); /* mlp_layer_types */
    ck_assert_int_eq(hp.idx_n_head, 4);
    ck_assert_int_eq(hp.idx_top_k, 16);
    ck_assert_double_eq(hp.rope_freq_base, 1e6);
    ck_assert_int_eq(hp.rope_scaling, GGUF_ROPE_SCALING_NONE);

    ck_assert_int_eq(parse_corpus("ok--glm4moe.json", &hp, &err), 0);
    ck_assert_int_eq(hp.n_rot, 16); /* head_dim 32 x partial_rotary_factor 0.5 */
    ck_assert_int_eq(hp.rope_pairs, GGUF_ROPE_HALF);
    ck_assert_int_eq(hp.gating, GGUF_GATING_SIGMOID);
    ck_assert_int_eq(hp.n_layer, 3); /* the MTP layer is not counted */
    ck_assert_int_eq(hp.n_nextn, 0);

    ck_assert_int_eq(parse_corpus("ok--qwen3moe.json", &hp, &err), 0);
    ck_assert_int_eq(hp.gating, GGUF_GATING_SOFTMAX);
    ck_assert_int_eq(hp.n_expert, 8);
    ck_assert_int_eq(hp.n_ff_exp, 32);
    ck_assert(hp.norm_topk);

    ck_assert_int_eq(parse_corpus("ok--qwen3-yarn.json", &hp, &err), 0);
    ck_assert_int_eq(hp.rope_scaling, GGUF_ROPE_SCALING_YARN);
    ck_assert_double_eq(hp.rope_factor, 4.0);
    ck_assert_double_eq(hp.rope_attn_factor, 1.0);
    ck_assert_int_eq(hp.yarn_orig_ctx, 32768);

    ck_assert_int_eq(parse_corpus("ok--qwen2.json", &hp, &err), 0);
    ck_assert_int_eq(hp.n_embd_head_k, 16); /* no head_dim: hidden / heads */
    ck_assert(hp.tied_embeddings);

    ck_assert_int_eq(parse_corpus("ok--llama.json", &hp, &err), 0);
    ck_assert(hp.llama_qk_permuted);
    ck_assert_double_eq(hp.rope_freq_base, 10000.0);
    ck_assert_double_eq(hp.rms_eps, 1e-5);
}
END_TEST

/* The shared checks name config.json's keys, not GGUF's. */
START_TEST(messages_name_config_keys)
{
    gguf_hparams hp;
    gguf_error err;
    ck_assert_int_eq(parse_corpus("GGUF_E_BAD_VALUE--heads-kv.json", &hp, &err),
                     GGUF_E_BAD_VALUE);
    ck_assert_msg(strstr(err.message, "num_key_value_heads: 3 does not divide "
                                      "num_attention_heads 4"), "%s", err.message);
    ck_assert_int_eq(parse_corpus("GGUF_E_NOT_FOUND--missing-keys.json", &hp, &err),
                     GGUF_E_NOT_FOUND);
    ck_assert_msg(strstr(err.message, "missing: hidden_size, vocab_size"), "%s", err.message);
    ck_assert_int_eq(parse_corpus("GGUF_E_BAD_VALUE--not-json.json", &hp, &err),
                     GGUF_E_BAD_VALUE);
    ck_assert_uint_gt(err.offset, 0); /* where the JSON breaks */
    ck_assert_int_eq(gguf_hparams_from_hf_config(NULL, "{}", 2, "x", &err), GGUF_E_INVALID);
}
END_TEST

/* ------------------------------------------------------------ checkpoints */

/* A safetensors file of F32 tensors, each value from val(name, row, col). */
typedef struct ckpt {
    char hdr[1 << 16];
    size_t hl;
    tbuf data;
} ckpt;

static float val(const char *name, int64_t r, int64_t c)
{
    const char *e = strstr(name, "experts.");
    if (e)
        return (float)(1000 * atoi(e + 8) + r);
    if (strstr(name, "_proj"))
        return (float)r; /* a row says which it is */
    return 1.0f + 0.01f * (float)(r + c);
}

static void ck_add(ckpt *k, const char *name, int64_t rows, int64_t cols)
{
    const size_t off = k->data.n, n = (size_t)((rows ? rows : 1) * cols);
    for (int64_t r = 0; r < (rows ? rows : 1); r++)
        for (int64_t c = 0; c < cols; c++) {
            const float v = val(name, r, c);
            tb_bytes(&k->data, &v, 4);
        }
    char shape[64];
    if (rows)
        snprintf(shape, sizeof shape, "[%lld,%lld]", (long long)rows, (long long)cols);
    else
        snprintf(shape, sizeof shape, "[%lld]", (long long)cols);
    k->hl += (size_t)snprintf(k->hdr + k->hl, sizeof k->hdr - k->hl,
                              "%s\"%s\":{\"dtype\":\"F32\",\"shape\":%s,\"data_offsets\":[%zu,%zu]}",
                              k->hl ? "," : "{", name, shape, off, off + n * 4);
}

static void ck_write(ckpt *k, const char *dir, const char *config)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/config.json", dir);
    ck_assert_int_eq(th_write_file(p, config, strlen(config)), 0);
    k->hl += (size_t)snprintf(k->hdr + k->hl, sizeof k->hdr - k->hl, "}");
    tbuf f = {0};
    tb_u64(&f, k->hl);
    tb_bytes(&f, k->hdr, k->hl);
    tb_bytes(&f, k->data.p, k->data.n);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    ck_assert_int_eq(th_write_file(p, f.p, f.n), 0);
    tb_free(&f);
    tb_free(&k->data);
    memset(k, 0, sizeof *k);
}

#define LLAMA_CFG                                                                                \
    "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":8,\"intermediate_size\":16,"      \
    "\"num_hidden_layers\":1,\"num_attention_heads\":2,"                                        \
    "\"head_dim\":4,\"rms_norm_eps\":1e-5,\"vocab_size\":10,\"bos_token_id\":3,"                 \
    "\"eos_token_id\":[4,5]"

/* The tensors of the 1-layer llama; skip (may be NULL) is left out, extra added. */
static void llama_tensors(ckpt *k, const char *skip, bool lm_head, const char *extra)
{
    static const struct {
        const char *n;
        int64_t r, c;
    } ts[] = {
        {"model.embed_tokens.weight", 10, 8},
        {"model.norm.weight", 0, 8},
        {"model.layers.0.input_layernorm.weight", 0, 8},
        {"model.layers.0.self_attn.q_proj.weight", 8, 8},
        {"model.layers.0.self_attn.k_proj.weight", 4, 8},
        {"model.layers.0.self_attn.v_proj.weight", 4, 8},
        {"model.layers.0.self_attn.o_proj.weight", 8, 8},
        {"model.layers.0.post_attention_layernorm.weight", 0, 8},
        {"model.layers.0.mlp.gate_proj.weight", 16, 8},
        {"model.layers.0.mlp.up_proj.weight", 16, 8},
        {"model.layers.0.mlp.down_proj.weight", 8, 16},
    };
    if (lm_head)
        ck_add(k, "lm_head.weight", 10, 8);
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        if (!skip || strcmp(skip, ts[i].n))
            ck_add(k, ts[i].n, ts[i].r, ts[i].c);
    if (extra)
        ck_add(k, extra, 0, 8);
}

static int open_llama(const char *dir, const char *cfg_tail, const char *skip, bool lm_head,
                      const char *extra, gguf_model **m, gguf_error *err)
{
    static ckpt k;
    llama_tensors(&k, skip, lm_head, extra);
    char cfg[2048];
    snprintf(cfg, sizeof cfg, "%s%s%s}", LLAMA_CFG, cfg_tail,
             strstr(cfg_tail, "num_key_value_heads") ? "" : ",\"num_key_value_heads\":1");
    ck_write(&k, dir, cfg);
    return gguf_model_open_hf(m, dir, err);
}

static void rows_of(const gguf_model *m, int64_t il, gguf_role r, float *dst)
{
    const gguf_model_tensor *mt = gguf_model_get_info(m, il, r);
    ck_assert_ptr_nonnull(mt);
    const int64_t rows = mt->t->n_elements / mt->t->ne[0];
    gguf_error err;
    uint64_t bytes;
    ck_assert_int_eq(gguf_model_tensor_rows(m, mt, 0, rows, dst, 0, &bytes, &err), 0);
    ck_assert_uint_eq(bytes, (uint64_t)(rows * mt->t->ne[0] * 4));
}

START_TEST(llama_checkpoint)
{
    char *dir = th_mkdtemp();
    gguf_model *m = NULL;
    gguf_error err;
    ck_assert_msg(open_llama(dir, ",\"tie_word_embeddings\":false", NULL, true, NULL, &m,
                             &err) == 0, "%s", err.message);
    ck_assert_ptr_nonnull(gguf_model_checkpoint(m));
    ck_assert_ptr_null(gguf_model_meta(m));
    const gguf_hparams *hp = gguf_model_hparams(m);
    ck_assert(!hp->tied_embeddings && hp->llama_qk_permuted);
    ck_assert_int_eq(gguf_model_tensor_count(m), 12);
    /* GGUF names, shapes and HF names, as for a conversion */
    const gguf_model_tensor *q = gguf_model_tensor_find(m, "blk.0.attn_q.weight");
    ck_assert_ptr_nonnull(q);
    ck_assert_int_eq(q->role, GGUF_ROLE_ATTN_Q);
    ck_assert_str_eq(q->hf_name, "model.layers.0.self_attn.q_proj.weight");
    ck_assert_int_eq(q->t->ne[0], 8);
    ck_assert_int_eq(q->t->ne[1], 8);
    ck_assert_ptr_null(q->t->data);
    /* rows come in the converter's order: GGUF row g holds HF row qk_row_to_hf(g) */
    float f[16 * 8];
    rows_of(m, 0, GGUF_ROLE_ATTN_Q, f);
    for (int64_t g = 0; g < 8; g++)
        ck_assert_float_eq(f[g * 8 + 3], (float)gguf_llama_qk_row_to_hf(g, 4));
    ck_assert_float_eq(f[1 * 8], 2.0f); /* head 0: GGUF row 1 = HF row 2 */
    rows_of(m, 0, GGUF_ROLE_ATTN_K, f);
    for (int64_t g = 0; g < 4; g++)
        ck_assert_float_eq(f[g * 8], (float)gguf_llama_qk_row_to_hf(g, 4));
    rows_of(m, 0, GGUF_ROLE_ATTN_V, f); /* v is not permuted */
    for (int64_t g = 0; g < 4; g++)
        ck_assert_float_eq(f[g * 8], (float)g);
    /* a run of rows in the middle */
    const gguf_model_tensor *up = gguf_model_get_info(m, 0, GGUF_ROLE_FFN_UP);
    ck_assert_int_eq(gguf_model_tensor_rows(m, up, 5, 3, f, GGUF_MODEL_ROWS_DROP_PAGES, NULL,
                                            &err), 0);
    ck_assert_float_eq(f[0], 5.0f);
    ck_assert_float_eq(f[2 * 8 + 7], 7.0f);
    ck_assert_int_eq(gguf_model_tensor_rows(m, up, 14, 3, f, 0, NULL, &err), GGUF_E_INVALID);
    ck_assert_ptr_nonnull(gguf_model_get(m, -1, GGUF_ROLE_OUTPUT));
    int32_t bos, eos;
    gguf_model_hf_tokens(m, &bos, &eos);
    ck_assert_int_eq(bos, 3);
    ck_assert_int_eq(eos, 4); /* the first of a list */
    /* the forward runs it, as the CPU reference over a checkpoint */
    gguf_fwd_ctx *ctx = NULL;
    ck_assert_int_eq(gguf_fwd_ctx_create(&ctx, m, NULL, &err), 0);
    ck_assert_str_eq(gguf_fwd_ctx_backend(ctx), "cpu-hf");
    const int32_t toks[3] = {1, 7, 2};
    float lg[30];
    ck_assert_msg(gguf_fwd_eval(ctx, toks, 3, lg, &err) == 0, "%s", err.message);
    for (int i = 0; i < 30; i++)
        ck_assert(isfinite(lg[i]));
    gguf_fwd_ctx_free(ctx);
    /* virtual ranks slice GGUF tensors: refused */
    gguf_shard_plan *plan = NULL;
    gguf_shard_opts so = {.tp = 2};
    if (gguf_shard_plan_create(&plan, m, &so, &err) == 0) {
        ck_assert_int_eq(gguf_fwd_tp_create(&ctx, m, plan, NULL, &err), GGUF_E_UNSUPPORTED);
        ck_assert_msg(strstr(err.message, "HF checkpoint"), "%s", err.message);
    }
    gguf_shard_plan_free(plan);
    /* backends that read tensor data (the GPU's set-up) refuse it; the CPU's takes it */
    fw_setup su;
    ck_assert_int_eq(fw_setup_init(&su, m, NULL, &err), GGUF_E_UNSUPPORTED);
    ck_assert_msg(strstr(err.message, "CPU reference only"), "%s", err.message);
    ck_assert_int_eq(fw_setup_init_any(&su, m, NULL, &err), 0);
    fw_setup_free(&su);
    /* the digest is stable and follows the bytes */
    gguf_digest d1, d2;
    ck_assert_int_eq(gguf_model_hf_digest(m, &d1, &err), 0);
    ck_assert_int_eq(gguf_model_hf_digest(m, &d2, &err), 0);
    ck_assert(gguf_digest_equal(&d1, &d2));
    gguf_model_free(m);
    /* the same checkpoint through its config.json and its file */
    char p[4200];
    snprintf(p, sizeof p, "%s/config.json", dir);
    ck_assert_msg(gguf_model_open_hf(&m, p, &err) == 0, "%s", err.message);
    ck_assert_int_eq(gguf_model_tensor_count(m), 12);
    gguf_model_free(m);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    ck_assert(gguf_model_path_is_hf(p) && gguf_model_path_is_hf(dir) &&
              !gguf_model_path_is_hf("m.gguf"));
    ck_assert_msg(gguf_model_open_hf(&m, p, &err) == 0, "%s", err.message);
    gguf_model_free(m);
    /* a changed value changes the digest */
    ck_assert_int_eq(open_llama(dir, ",\"tie_word_embeddings\":false", NULL, true,
                                "model.layers.0.self_attn.rotary_emb.inv_freq", &m, &err), 0);
    ck_assert_int_eq(gguf_model_hf_digest(m, &d2, &err), 0);
    ck_assert(!gguf_digest_equal(&d1, &d2));
    /* GGUF models are not read through the checkpoint rows */
    float one[8];
    ck_assert_int_eq(gguf_model_tensor_rows(NULL, NULL, 0, 1, one, 0, NULL, &err),
                     GGUF_E_INVALID);
    gguf_model_free(m);
    th_rmdir(dir);
    free(dir);
}
END_TEST

START_TEST(tied_and_ignored)
{
    char *dir = th_mkdtemp();
    gguf_model *m = NULL;
    gguf_error err;
    /* tied: lm_head present is ignored, as transformers ties it */
    ck_assert_msg(open_llama(dir, ",\"tie_word_embeddings\":true", NULL, true, NULL, &m, &err) == 0,
                  "%s", err.message);
    ck_assert(gguf_model_hparams(m)->tied_embeddings);
    ck_assert_ptr_null(gguf_model_get(m, -1, GGUF_ROLE_OUTPUT));
    gguf_model_free(m);
    /* an MTP layer (past num_hidden_layers) and rotary buffers are not the forward's */
    ck_assert_msg(open_llama(dir, "", NULL, true, "model.layers.1.enorm.weight", &m, &err) == 0,
                  "%s", err.message);
    gguf_model_free(m);
    th_rmdir(dir);
    free(dir);
}
END_TEST

START_TEST(checkpoint_errors)
{
    char *dir = th_mkdtemp();
    gguf_model *m = NULL;
    gguf_error err;
    ck_assert_int_eq(open_llama(dir, "", "model.layers.0.self_attn.k_proj.weight", true, NULL,
                                &m, &err), GGUF_E_NOT_FOUND);
    ck_assert_msg(strstr(err.message, "model.layers.0.self_attn.k_proj.weight"), "%s",
                  err.message);
    ck_assert_int_eq(open_llama(dir, "", NULL, false, NULL, &m, &err), GGUF_E_NOT_FOUND);
    ck_assert_msg(strstr(err.message, "lm_head.weight") && strstr(err.message,
                  "tie_word_embeddings"), "%s", err.message);
    ck_assert_int_eq(open_llama(dir, "", NULL, true, "model.layers.0.self_attn.o_proj.bias", &m,
                                &err), GGUF_E_UNSUPPORTED);
    ck_assert_msg(strstr(err.message, "model.layers.0.self_attn.o_proj.bias"), "%s",
                  err.message);
    /* config.json says 2 KV heads of 4: k_proj must have 8 rows */
    ck_assert_int_eq(open_llama(dir, ",\"num_key_value_heads\":2", NULL, true, NULL, &m, &err),
                     GGUF_E_BAD_SHAPE);
    ck_assert_msg(strstr(err.message, "k_proj.weight: shape [4, 8], expected [8, 8]") &&
                  strstr(err.message, "model.safetensors"), "%s", err.message);
    ck_assert_uint_gt(err.offset, 8);
    ck_assert_int_eq(open_llama(dir, ",\"hidden_act\":\"relu\"", NULL, true, NULL, &m, &err),
                     GGUF_E_UNSUPPORTED);
    ck_assert_msg(strstr(err.message, "config.json: hidden_act"), "%s", err.message);
    ck_assert_ptr_null(m);
    char p[4200];
    snprintf(p, sizeof p, "%s/config.json", dir);
    remove(p);
    ck_assert_int_eq(gguf_model_open_hf(&m, dir, &err), GGUF_E_NOT_FOUND);
    ck_assert_msg(strstr(err.message, "config.json"), "%s", err.message);
    th_rmdir(dir);
    free(dir);
}
END_TEST

/* Llama 3's RoPE factors against transformers' _compute_llama3_parameters,
 * written out here in double: inv_freq / inv_freq_llama. */
START_TEST(llama3_rope_freqs)
{
    char *dir = th_mkdtemp();
    gguf_model *m = NULL;
    gguf_error err;
    ck_assert_msg(open_llama(dir, ",\"rope_theta\":500000.0,\"rope_scaling\":{\"rope_type\":"
                             "\"llama3\",\"factor\":8.0,\"low_freq_factor\":1.0,"
                             "\"high_freq_factor\":4.0,\"original_max_position_embeddings\":8}",
                             NULL, true, NULL, &m, &err) == 0, "%s", err.message);
    const gguf_tensor *rf = gguf_model_get(m, -1, GGUF_ROLE_ROPE_FREQS);
    ck_assert_ptr_nonnull(rf);
    ck_assert_int_eq(rf->ne[0], 2);
    for (int i = 0; i < 2; i++) {
        const double inv = 1.0 / pow(500000.0, 2.0 * i / 4.0), wl = 2 * M_PI / inv;
        const double lo_wl = 8.0 / 1.0, hi_wl = 8.0 / 4.0;
        double llama = inv;
        if (wl > lo_wl) {
            llama = inv / 8.0;
        } else if (wl >= hi_wl) {
            const double s = (8.0 / wl - 1.0) / (4.0 - 1.0);
            llama = (1 - s) * inv / 8.0 + s * inv;
        }
        float got;
        memcpy(&got, rf->data + 4 * i, 4);
        ck_assert_double_eq_tol(got, inv / llama, 1e-6 * inv / llama);
    }
    gguf_model_free(m);
    th_rmdir(dir);
    free(dir);
}
END_TEST

/* Experts are one tensor each: row r of ffn_*_exps is expert r / ff's row r % ff. */
START_TEST(experts_checkpoint)
{
    char *dir = th_mkdtemp();
    static ckpt k;
    ck_add(&k, "model.embed_tokens.weight", 10, 8);
    ck_add(&k, "model.norm.weight", 0, 8);
    ck_add(&k, "lm_head.weight", 10, 8);
    ck_add(&k, "model.layers.0.input_layernorm.weight", 0, 8);
    ck_add(&k, "model.layers.0.post_attention_layernorm.weight", 0, 8);
    ck_add(&k, "model.layers.0.self_attn.q_proj.weight", 8, 8);
    ck_add(&k, "model.layers.0.self_attn.k_proj.weight", 4, 8);
    ck_add(&k, "model.layers.0.self_attn.v_proj.weight", 4, 8);
    ck_add(&k, "model.layers.0.self_attn.o_proj.weight", 8, 8);
    ck_add(&k, "model.layers.0.self_attn.q_norm.weight", 0, 4);
    ck_add(&k, "model.layers.0.self_attn.k_norm.weight", 0, 4);
    ck_add(&k, "model.layers.0.mlp.gate.weight", 4, 8);
    for (int e = 0; e < 4; e++) {
        char n[128];
        snprintf(n, sizeof n, "model.layers.0.mlp.experts.%d.gate_proj.weight", e);
        ck_add(&k, n, 6, 8);
        snprintf(n, sizeof n, "model.layers.0.mlp.experts.%d.up_proj.weight", e);
        ck_add(&k, n, 6, 8);
        snprintf(n, sizeof n, "model.layers.0.mlp.experts.%d.down_proj.weight", e);
        ck_add(&k, n, 8, 6);
    }
    ck_write(&k, dir,
             "{\"architectures\":[\"Qwen3MoeForCausalLM\"],\"hidden_size\":8,"
             "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"num_key_value_heads\":1,"
             "\"head_dim\":4,\"rms_norm_eps\":1e-6,\"vocab_size\":10,\"num_experts\":4,"
             "\"num_experts_per_tok\":2,\"moe_intermediate_size\":6,\"norm_topk_prob\":true}");
    gguf_model *m = NULL;
    gguf_error err;
    ck_assert_msg(gguf_model_open_hf(&m, dir, &err) == 0, "%s", err.message);
    const gguf_model_tensor *g = gguf_model_get_info(m, 0, GGUF_ROLE_FFN_GATE_EXPS);
    ck_assert_ptr_nonnull(g);
    ck_assert_str_eq(g->hf_name, "model.layers.0.mlp.experts.*.gate_proj.weight");
    ck_assert_int_eq(g->t->ne[0], 8);
    ck_assert_int_eq(g->t->ne[1], 6);
    ck_assert_int_eq(g->t->ne[2], 4);
    float f[4 * 8 * 8];
    rows_of(m, 0, GGUF_ROLE_FFN_GATE_EXPS, f);
    for (int64_t r = 0; r < 24; r++)
        ck_assert_float_eq(f[r * 8 + 5], (float)(1000 * (r / 6) + r % 6));
    /* a run across an expert boundary */
    ck_assert_int_eq(gguf_model_tensor_rows(m, g, 4, 4, f, 0, NULL, &err), 0);
    ck_assert_float_eq(f[0], 4.0f);
    ck_assert_float_eq(f[2 * 8], 1000.0f);
    ck_assert_float_eq(f[3 * 8], 1001.0f);
    rows_of(m, 0, GGUF_ROLE_FFN_DOWN_EXPS, f);
    for (int64_t r = 0; r < 32; r++)
        ck_assert_float_eq(f[r * 6], (float)(1000 * (r / 8) + r % 8));
    gguf_fwd_ctx *ctx = NULL;
    ck_assert_int_eq(gguf_fwd_ctx_create(&ctx, m, NULL, &err), 0);
    const int32_t toks[2] = {1, 2};
    ck_assert_msg(gguf_fwd_eval(ctx, toks, 2, NULL, &err) == 0, "%s", err.message);
    gguf_fwd_ctx_free(ctx);
    gguf_model_free(m);
    th_rmdir(dir);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("model_hf");
    TCase *tc = tcase_create("model_hf");
    tcase_add_test(tc, corpus_named_errors);
    tcase_add_test(tc, config_values);
    tcase_add_test(tc, messages_name_config_keys);
    tcase_add_test(tc, llama_checkpoint);
    tcase_add_test(tc, tied_and_ignored);
    tcase_add_test(tc, checkpoint_errors);
    tcase_add_test(tc, llama3_rope_freqs);
    tcase_add_test(tc, experts_checkpoint);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
