/*
 * Shard plans at real scale: header-only replicas of GLM-5.1, DeepSeek-V3.1
 * and Kimi-K2 (tensor infos from ../shared/testdata/tensor-maps, metadata from
 * the models' published config.json) at tp 1, 2, 4, 8, 16 and ep 8, checked
 * against shapes worked out by hand, each plan in well under a second.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf/shard.h"
#include "helper_buf.h"
#include "helper_replica.h"

static const char *const glm51_kvs[] = {
    "str general.architecture glm-dsa",
    "u32 glm-dsa.block_count 79",
    "u32 glm-dsa.nextn_predict_layers 1",
    "u32 glm-dsa.context_length 202752",
    "u32 glm-dsa.embedding_length 6144",
    "u32 glm-dsa.feed_forward_length 12288",
    "u32 glm-dsa.attention.head_count 64",
    "u32 glm-dsa.attention.head_count_kv 1",
    "f32 glm-dsa.attention.layer_norm_rms_epsilon 1e-5",
    "u32 glm-dsa.attention.key_length 576",
    "u32 glm-dsa.attention.value_length 512",
    "u32 glm-dsa.attention.key_length_mla 256",
    "u32 glm-dsa.attention.value_length_mla 256",
    "u32 glm-dsa.attention.q_lora_rank 2048",
    "u32 glm-dsa.attention.kv_lora_rank 512",
    "u32 glm-dsa.rope.dimension_count 64",
    "f32 glm-dsa.rope.freq_base 1000000",
    "u32 glm-dsa.expert_count 256",
    "u32 glm-dsa.expert_used_count 8",
    "u32 glm-dsa.expert_shared_count 1",
    "u32 glm-dsa.expert_feed_forward_length 2048",
    "u32 glm-dsa.leading_dense_block_count 3",
    "u32 glm-dsa.expert_gating_func 2",
    "bool glm-dsa.expert_weights_norm true",
    "f32 glm-dsa.expert_weights_scale 2.5",
    "u32 glm-dsa.attention.indexer.head_count 32",
    "u32 glm-dsa.attention.indexer.key_length 128",
    "u32 glm-dsa.attention.indexer.top_k 2048",
    "u32 glm-dsa.vocab_size 154880",
    NULL,
};

#define DS_COMMON(A)                                                                          \
    "str general.architecture deepseek2", "u32 deepseek2.block_count 61",                     \
        "u32 deepseek2.embedding_length 7168", "u32 deepseek2.feed_forward_length 18432",    \
        "u32 deepseek2.attention.head_count_kv 1",                                           \
        "f32 deepseek2.attention.layer_norm_rms_epsilon 1e-6",                               \
        "u32 deepseek2.attention.key_length 576", "u32 deepseek2.attention.value_length 512", \
        "u32 deepseek2.attention.key_length_mla 192",                                        \
        "u32 deepseek2.attention.value_length_mla 128",                                      \
        "u32 deepseek2.attention.q_lora_rank 1536", "u32 deepseek2.attention.kv_lora_rank 512", \
        "u32 deepseek2.rope.dimension_count 64", "u32 deepseek2.expert_used_count 8",        \
        "u32 deepseek2.expert_shared_count 1", "u32 deepseek2.expert_feed_forward_length 2048", \
        "u32 deepseek2.expert_gating_func 2", "bool deepseek2.expert_weights_norm true",     \
        "str deepseek2.rope.scaling.type yarn",                                              \
        "u32 deepseek2.rope.scaling.original_context_length 4096",                           \
        "f32 deepseek2.rope.scaling.yarn_log_multiplier 0.1"

static const char *const dsv31_kvs[] = {
    DS_COMMON(0),
    "u32 deepseek2.attention.head_count 128",
    "u32 deepseek2.expert_count 256",
    "u32 deepseek2.leading_dense_block_count 3",
    "f32 deepseek2.expert_weights_scale 2.5",
    "u32 deepseek2.expert_group_count 8",
    "u32 deepseek2.expert_group_used_count 4",
    "f32 deepseek2.rope.scaling.factor 40",
    "u32 deepseek2.vocab_size 129280",
    NULL,
};

static const char *const kimi_kvs[] = {
    DS_COMMON(0),
    "u32 deepseek2.attention.head_count 64",
    "u32 deepseek2.expert_count 384",
    "u32 deepseek2.leading_dense_block_count 1",
    "f32 deepseek2.expert_weights_scale 2.827",
    "u32 deepseek2.expert_group_count 1",
    "u32 deepseek2.expert_group_used_count 1",
    "f32 deepseek2.rope.scaling.factor 64",
    "u32 deepseek2.vocab_size 163840",
    NULL,
};

static char *dir;
static hr_map map;
static gguf_file *meta;
static gguf_model *model;


static bool open_replica(const char *map_name, const char *const *kvs)
{
    const char *base = getenv("GGUFKIT_SHARED");
    char path[4096], mp[4096];
    snprintf(mp, sizeof mp, "%s/tensor-maps/%s", base ? base : "../shared/testdata", map_name);
    if (hr_map_load(&map, mp) != 0) {
        fprintf(stderr, "skip: %s not found\n", mp);

        return false;
    }
    dir = th_mkdtemp();
    snprintf(path, sizeof path, "%s/meta.gguf", dir);
    const char *none[] = {NULL};
    ck_assert_int_eq(hr_write_model(path, kvs, none), 0);
    gguf_error err;
    ck_assert_int_eq(gguf_file_open(&meta, path, NULL, &err), 0);
    int rc = gguf_model_open_parts(&model, meta, map.tp, map.n, map_name, &err);
    ck_assert_msg(rc == 0, "%s", err.message);
    return true;
}

static void close_replica(void)
{
    gguf_model_free(model);
    gguf_file_free(meta);
    hr_map_free(&map);
    if (dir) {
        th_rmdir(dir);
        free(dir);
    }
    model = NULL;
    meta = NULL;
    dir = NULL;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static gguf_shard_plan *timed_plan(int tp, int ep, double *secs)
{
    gguf_shard_opts o = {.tp = tp, .ep = ep, .engine = GGUF_ENGINE_SGLANG};
    gguf_shard_plan *p;
    gguf_error err;
    double t0 = now();
    int rc = gguf_shard_plan_create(&p, model, &o, &err);
    *secs = now() - t0;
    ck_assert_msg(rc == 0, "%s", err.message);
    /* a guard against a blow-up (quadratic in the tensors), not a speed target */
    ck_assert_msg(*secs < 30.0, "tp %d ep %d took %.3f s", tp, ep, *secs);
    return p;
}

static const gguf_shard_slice *sl(const gguf_shard_plan *p, const char *name, int r)
{
    const gguf_shard_tensor *e = gguf_shard_plan_find(p, name);
    ck_assert_msg(e != NULL, "no entry %s", name);
    return &e->ranks[r];
}

static void shape(const gguf_shard_slice *s, int64_t a, int64_t b, int64_t c)
{
    ck_assert_msg(s->ne[0] == a && s->ne[1] == b && s->ne[2] == c,
                  "shape [%lld, %lld, %lld], want [%lld, %lld, %lld]", (long long)s->ne[0],
                  (long long)s->ne[1], (long long)s->ne[2], (long long)a, (long long)b,
                  (long long)c);
}

static bool has_check(const gguf_shard_plan *p, const char *code, gguf_check_level level)
{
    for (int64_t i = 0; i < gguf_shard_plan_check_count(p); i++) {
        const gguf_shard_check *c = gguf_shard_plan_check_at(p, i);
        if (!strcmp(c->code, code) && c->level == level)
            return true;
    }
    return false;
}

/* kv_b_proj per rank: (heads/tp) * (nope + v) rows of kv_lora, rows (heads/tp)*(nope+v)*r.. */
static void check_mla(const gguf_shard_plan *p, int tp, int64_t H, int64_t nope, int64_t rope,
                      int64_t v, int64_t L, int64_t q_lora, int64_t layer)
{
    char kvb[64], kb[64], qb[64], o[64];
    snprintf(kvb, sizeof kvb, "blk.%lld.attn_kv_b.weight", (long long)layer);
    snprintf(kb, sizeof kb, "blk.%lld.attn_k_b.weight", (long long)layer);
    snprintf(qb, sizeof qb, "blk.%lld.attn_q_b.weight", (long long)layer);
    snprintf(o, sizeof o, "blk.%lld.attn_output.weight", (long long)layer);
    const int64_t hr = H / tp, rows = hr * (nope + v);
    for (int r = 0; r < tp; r++) {
        const gguf_shard_slice *s = sl(p, kvb, r);
        shape(s, L, rows, 1);
        ck_assert_int_eq(s->range_lo, rows * r);
        ck_assert_int_eq(s->range_hi, rows * (r + 1));
        ck_assert_int_eq(s->n_pieces, 2 * hr); /* [k_h; v_h] for each of its heads */
        ck_assert_int_eq(s->pieces[0].lo[2], hr * r);
        shape(sl(p, kb, r), nope, L, hr);
        shape(sl(p, qb, r), q_lora, hr * (nope + rope), 1);
        shape(sl(p, o, r), hr * v, gguf_model_hparams(model)->n_embd, 1);
    }
}

START_TEST(glm51_q4k)
{
    if (!open_replica("GLM-5.1-Q4_K.map", glm51_kvs))
        return;
    ck_assert_int_eq(gguf_model_tensor_count(model), 1809);
    const int tps[] = {1, 2, 4, 8, 16};
    for (size_t k = 0; k < 5; k++) {
        int tp = tps[k];
        double secs;
        gguf_shard_plan *p = timed_plan(tp, 0, &secs);
        check_mla(p, tp, 64, 192, 64, 256, 512, 2048, 3);
        check_mla(p, tp, 64, 192, 64, 256, 512, 2048, 78); /* the NextN block too */
        /* experts: every expert, intermediate 2048/tp */
        shape(sl(p, "blk.3.ffn_gate_exps.weight", tp - 1), 6144, 2048 / tp, 256);
        shape(sl(p, "blk.3.ffn_down_exps.weight", tp - 1), 2048 / tp, 6144, 256);
        /* Q6_K down: 2048/16 = 128 is not on a 256-element block */
        ck_assert(sl(p, "blk.3.ffn_down_exps.weight", 0)->quant_cut_ok == (tp < 16));
        ck_assert(has_check(p, "quant_block", GGUF_CHECK_WARN) == (tp >= 16));
        shape(sl(p, "token_embd.weight", 0), 6144, 154880 / tp, 1);
        shape(sl(p, "blk.0.ffn_down.weight", 0), 12288 / tp, 6144, 1);
        /* DSA indexer and the latent stay whole */
        shape(sl(p, "blk.3.indexer.attn_q_b.weight", tp - 1), 2048, 4096, 1);
        shape(sl(p, "blk.3.attn_kv_a_mqa.weight", tp - 1), 6144, 576, 1);
        ck_assert_int_eq(gguf_shard_plan_check_worst(p, GGUF_CHECK_ERROR), 0);
        if (tp == 8) {
            /* the DESIGN.md deployment: about 51 GiB per GPU for a 402 GB file */
            uint64_t mx = gguf_shard_plan_max_rank_bytes(p, NULL);
            ck_assert_uint_gt(mx, 50ull << 30);
            ck_assert_uint_lt(mx, 56ull << 30);
            fprintf(stderr, "GLM-5.1 Q4_K tp 8: largest rank %.2f GiB, plan %.1f ms\n",
                    (double)mx / (1u << 30), secs * 1e3);
        }
        gguf_shard_plan_free(p);
    }
    /* tp 8, ep 8: 32 whole experts per rank */
    double secs;
    gguf_shard_plan *p = timed_plan(8, 8, &secs);
    for (int r = 0; r < 8; r++) {
        const gguf_shard_slice *s = sl(p, "blk.40.ffn_up_exps.weight", r);
        shape(s, 6144, 2048, 32);
        ck_assert_int_eq(s->pieces[0].lo[2], 32 * r);
        ck_assert(s->quant_cut_ok);
        shape(sl(p, "blk.40.ffn_down_exps.weight", r), 2048, 6144, 32);
    }
    check_mla(p, 8, 64, 192, 64, 256, 512, 2048, 10);
    gguf_shard_plan_free(p);
    close_replica();
}
END_TEST

START_TEST(glm51_bf16_and_faults)
{
    if (!open_replica("GLM-5.1-BF16.map", glm51_kvs))
        return;
    double secs;
    gguf_shard_plan *p = timed_plan(8, 0, &secs);
    /* the incident: kv_b whole on every rank = [28672, 512] instead of [3584, 512] */
    gguf_error err;
    ck_assert_int_eq(gguf_shard_apply_fault(p, GGUF_FAULT_KV_B_WHOLE, -1, &err), 0);
    shape(sl(p, "blk.5.attn_kv_b.weight", 7), 512, 28672, 1);
    gguf_shard_plan_free(p);
    p = timed_plan(8, 0, &secs);
    ck_assert_int_eq(gguf_shard_apply_fault(p, GGUF_FAULT_KV_B_ROWS, -1, &err), 0);
    const gguf_shard_slice *s = sl(p, "blk.5.attn_kv_b.weight", 1);
    shape(s, 512, 3584, 1);
    ck_assert_int_eq(s->range_lo, 8 * 256); /* 2048: inside head 4 (448 rows a head) */
    gguf_shard_plan_free(p);
    close_replica();
}
END_TEST

START_TEST(deepseek_v31)
{
    if (!open_replica("DeepSeek-V3.1-Terminus-BF16.map", dsv31_kvs))
        return;
    ck_assert_int_eq(gguf_model_tensor_count(model), 1086);
    const int tps[] = {1, 2, 4, 8, 16};
    for (size_t k = 0; k < 5; k++) {
        int tp = tps[k];
        double secs;
        gguf_shard_plan *p = timed_plan(tp, 0, &secs);
        check_mla(p, tp, 128, 128, 64, 128, 512, 1536, 0);
        check_mla(p, tp, 128, 128, 64, 128, 512, 1536, 60);
        shape(sl(p, "blk.3.ffn_up_exps.weight", 0), 7168, 2048 / tp, 256);
        shape(sl(p, "blk.0.ffn_gate.weight", 0), 7168, 18432 / tp, 1);
        shape(sl(p, "blk.3.ffn_down_shexp.weight", 0), 2048 / tp, 7168, 1);
        /* 129280 = 64 * 2020: no padding; per rank 129280/tp */
        shape(sl(p, "output.weight", tp - 1), 7168, 129280 / tp, 1);
        ck_assert_int_eq(gguf_shard_plan_check_worst(p, GGUF_CHECK_ERROR), 0);
        gguf_shard_plan_free(p);
    }
    double secs;
    gguf_shard_plan *p = timed_plan(8, 8, &secs);
    shape(sl(p, "blk.60.ffn_gate_exps.weight", 7), 7168, 2048, 32);
    ck_assert_int_eq(sl(p, "blk.60.ffn_gate_exps.weight", 7)->pieces[0].lo[2], 224);
    gguf_shard_plan_free(p);
    close_replica();
}
END_TEST

START_TEST(kimi_k2)
{
    if (!open_replica("Kimi-K2-Thinking-BF16.map", kimi_kvs))
        return;
    ck_assert_int_eq(gguf_model_tensor_count(model), 1096);
    const int tps[] = {1, 2, 4, 8, 16};
    for (size_t k = 0; k < 5; k++) {
        int tp = tps[k];
        double secs;
        gguf_shard_plan *p = timed_plan(tp, 0, &secs);
        check_mla(p, tp, 64, 128, 64, 128, 512, 1536, 1);
        shape(sl(p, "blk.1.ffn_up_exps.weight", 0), 7168, 2048 / tp, 384);
        shape(sl(p, "token_embd.weight", 0), 7168, 163840 / tp, 1);
        ck_assert_int_eq(gguf_shard_plan_check_worst(p, GGUF_CHECK_ERROR), 0);
        gguf_shard_plan_free(p);
    }
    double secs;
    gguf_shard_plan *p = timed_plan(8, 8, &secs);
    shape(sl(p, "blk.1.ffn_down_exps.weight", 3), 2048, 7168, 48);
    ck_assert_int_eq(sl(p, "blk.1.ffn_down_exps.weight", 3)->pieces[0].lo[2], 144);
    gguf_shard_plan_free(p);
    close_replica();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("shard_scale");
    TCase *tc = tcase_create("replicas");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, glm51_q4k);
    tcase_add_test(tc, glm51_bf16_and_faults);
    tcase_add_test(tc, deepseek_v31);
    tcase_add_test(tc, kimi_k2);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
