/* Shard plans: every rule, every check, materialized slices, and the fault catalog. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/shard.h"
#include "helper_buf.h"
#include "helper_replica.h"

static char *dir;

static void setup(void) { dir = th_mkdtemp(); }
static void teardown(void)
{
    th_rmdir(dir);
    free(dir);
}

typedef struct fixture {
    gguf_set *s;
    gguf_model *m;
} fixture;

static fixture open_fx(const char *const *kvs, const char *const *extra, const char *const *ts)
{
    static int seq;
    char path[4096];
    snprintf(path, sizeof path, "%s/s%d.gguf", dir, seq++);
    ck_assert_int_eq(hr_write_model2(path, kvs, extra, ts), 0);
    fixture fx;
    gguf_error err;
    ck_assert_int_eq(gguf_set_open(&fx.s, path, NULL, &err), 0);
    int rc = gguf_model_open_flags(&fx.m, fx.s, GGUF_MODEL_ALLOW_MISSING, &err);
    ck_assert_msg(rc == 0, "%s", err.message);
    return fx;
}

static void close_fx(fixture *fx)
{
    gguf_model_free(fx->m);
    gguf_set_free(fx->s);
}

static gguf_shard_plan *plan(const gguf_model *m, int tp, int ep, gguf_engine eng)
{
    gguf_shard_opts o = {.tp = tp, .ep = ep, .engine = eng};
    gguf_shard_plan *p = NULL;
    gguf_error err;
    int rc = gguf_shard_plan_create(&p, m, &o, &err);
    ck_assert_msg(rc == 0, "%s", err.message);
    return p;
}

static const gguf_shard_slice *sl(const gguf_shard_plan *p, const char *name, int r)
{
    const gguf_shard_tensor *e = gguf_shard_plan_find(p, name);
    ck_assert_msg(e != NULL, "no entry %s", name);
    return &e->ranks[r];
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

static void ne_is(const gguf_shard_slice *s, int64_t a, int64_t b, int64_t c)
{
    ck_assert_msg(s->ne[0] == a && s->ne[1] == b && (c < 0 || s->ne[2] == c),
                  "shape [%lld, %lld, %lld], want [%lld, %lld, %lld]", (long long)s->ne[0],
                  (long long)s->ne[1], (long long)s->ne[2], (long long)a, (long long)b,
                  (long long)c);
}
#define NE2(s, a, b) ne_is((s), (a), (b), -1)
#define NE3(s, a, b, c) ne_is((s), (a), (b), (c))

/* Materialize a slice into a fresh buffer. */
static float *mat(const gguf_shard_plan *p, const char *name, int r, int64_t *n)
{
    const gguf_shard_tensor *e = gguf_shard_plan_find(p, name);
    const gguf_shard_slice *s = &e->ranks[r];
    *n = s->ne[0] * s->ne[1] * s->ne[2] * s->ne[3];
    float *buf = malloc((size_t)*n * sizeof *buf);
    gguf_error err;
    int rc = gguf_shard_materialize(p, e - gguf_shard_plan_at(p, 0), r, buf, (size_t)*n, &err);
    ck_assert_msg(rc == 0, "%s", err.message);
    return buf;
}

/* Value of element (d0, d1, d2) of a stored F32 test tensor. */
static float val(const gguf_model *m, const char *name, int64_t d0, int64_t d1, int64_t d2)
{
    const gguf_tensor *t = gguf_model_tensor_find(m, name)->t;
    const float *f = (const float *)t->data;
    return f[d0 + t->ne[0] * (d1 + t->ne[1] * d2)];
}

/* ---- rules ---- */

START_TEST(rules_mla_moe)
{
    fixture fx = open_fx(hr_ds2_kvs, NULL, hr_ds2_tensors);
    gguf_shard_plan *p = plan(fx.m, 2, 0, GGUF_ENGINE_VLLM);
    ck_assert_int_eq(gguf_shard_plan_ranks(p), 2);
    ck_assert_int_eq(gguf_shard_plan_moe_tp(p), 2);
    /* virtual kv_b: 2 heads of (16 + 16) rows per rank, rows 64r..64(r+1) */
    const gguf_shard_tensor *kvb = gguf_shard_plan_get(p, 1, GGUF_ROLE_ATTN_KV_B);
    ck_assert_ptr_nonnull(kvb);
    ck_assert(kvb->is_virtual);
    ck_assert_str_eq(kvb->name, "blk.1.attn_kv_b.weight");
    ck_assert_str_eq(kvb->hf_name, "model.layers.1.self_attn.kv_b_proj.weight");
    ck_assert_int_eq(kvb->rule, GGUF_RULE_HEADS);
    for (int r = 0; r < 2; r++) {
        NE2(&kvb->ranks[r], 32, 64);
        ck_assert_int_eq(kvb->ranks[r].range_lo, 64 * r);
        ck_assert_int_eq(kvb->ranks[r].range_hi, 64 * (r + 1));
        ck_assert(kvb->ranks[r].quant_cut_ok); /* F32 transposes without dequantization */
    }
    NE3(sl(p, "blk.1.attn_k_b.weight", 1), 16, 32, 2);
    ck_assert_int_eq(sl(p, "blk.1.attn_k_b.weight", 1)->range_lo, 2);
    NE2(sl(p, "blk.0.attn_q_b.weight", 1), 32, 48);
    ck_assert_int_eq(sl(p, "blk.0.attn_q_b.weight", 1)->range_lo, 48);
    const gguf_shard_tensor *o = gguf_shard_plan_find(p, "blk.0.attn_output.weight");
    ck_assert_int_eq(o->rule, GGUF_RULE_ROW);
    ck_assert(o->reduce_sum);
    NE2(&o->ranks[1], 32, 64);
    ck_assert_int_eq(o->ranks[1].range_lo, 32);
    /* replicated latent, router, norms */
    ck_assert_int_eq(gguf_shard_plan_find(p, "blk.0.attn_kv_a_mqa.weight")->rule,
                     GGUF_RULE_REPLICATED);
    NE2(sl(p, "blk.0.attn_kv_a_mqa.weight", 1), 64, 40);
    ck_assert_int_eq(gguf_shard_plan_find(p, "blk.1.ffn_gate_inp.weight")->rule,
                     GGUF_RULE_REPLICATED);
    /* dense gate/up: merged slots; down: row */
    const gguf_shard_tensor *g = gguf_shard_plan_find(p, "blk.0.ffn_gate.weight");
    ck_assert_int_eq(g->rule, GGUF_RULE_MERGED);
    ck_assert_str_eq(g->fused, "gate_up_proj");
    ck_assert_int_eq(g->slot, 0);
    ck_assert_int_eq(gguf_shard_plan_find(p, "blk.0.ffn_up.weight")->slot, 1);
    NE2(&g->ranks[1], 64, 32);
    /* experts without ep: every expert, intermediate split */
    const gguf_shard_tensor *ge = gguf_shard_plan_find(p, "blk.1.ffn_gate_exps.weight");
    ck_assert_int_eq(ge->rule, GGUF_RULE_EXPERT);
    NE3(&ge->ranks[1], 64, 16, 4);
    NE3(sl(p, "blk.1.ffn_down_exps.weight", 1), 16, 64, 4);
    ck_assert(gguf_shard_plan_find(p, "blk.1.ffn_down_exps.weight")->reduce_sum);
    /* shared expert like a dense MLP */
    NE2(sl(p, "blk.1.ffn_down_shexp.weight", 0), 16, 64);
    /* vocab: 64 rows, 32 per rank */
    NE2(sl(p, "output.weight", 1), 64, 32);
    ck_assert_int_eq(gguf_shard_plan_check_worst(p, GGUF_CHECK_WARN), 0);
    /* totals: every stored byte at least once */
    uint64_t sum = gguf_shard_plan_rank_bytes(p, 0) + gguf_shard_plan_rank_bytes(p, 1);
    ck_assert_uint_gt(sum, 0);
    int big;
    ck_assert_uint_eq(gguf_shard_plan_max_rank_bytes(p, &big),
                      gguf_shard_plan_rank_bytes(p, big));
    gguf_shard_plan_free(p);

    /* sglang, tp 2, ep 2: experts split by expert, moe_tp 1 */
    p = plan(fx.m, 2, 2, GGUF_ENGINE_SGLANG);
    ck_assert_int_eq(gguf_shard_plan_moe_tp(p), 1);
    ge = gguf_shard_plan_find(p, "blk.1.ffn_gate_exps.weight");
    NE3(&ge->ranks[1], 64, 32, 2);
    ck_assert_int_eq(ge->ranks[1].pieces[0].lo[2], 2);
    ck_assert(!gguf_shard_plan_find(p, "blk.1.ffn_down_exps.weight")->reduce_sum);
    int64_t a, b;
    gguf_shard_plan_experts(p, 1, &a, &b);
    ck_assert_int_eq(a, 2);
    ck_assert_int_eq(b, 4);
    gguf_shard_plan_free(p);
    close_fx(&fx);
}
END_TEST

START_TEST(kvb_materialized_per_head)
{
    fixture fx = open_fx(hr_ds2_kvs, NULL, hr_ds2_tensors);
    gguf_shard_plan *p = plan(fx.m, 2, 0, GGUF_ENGINE_VLLM);
    const int64_t L = 32, nope = 16, v = 16, s = nope + v;
    for (int r = 0; r < 2; r++) {
        int64_t n;
        float *f = mat(p, "blk.0.attn_kv_b.weight", r, &n);
        ck_assert_int_eq(n, L * 2 * s);
        for (int64_t row = 0; row < 2 * s; row++) {
            int64_t h = 2 * r + row / s, j = row % s;
            for (int64_t c = 0; c < L; c++) {
                float want = j < nope ? val(fx.m, "blk.0.attn_k_b.weight", j, c, h)
                                      : val(fx.m, "blk.0.attn_v_b.weight", c, j - nope, h);
                ck_assert_float_eq(f[row * L + c], want);
            }
        }
        free(f);
        /* a row-parallel slice: columns 32r.. of every row */
        f = mat(p, "blk.0.attn_output.weight", r, &n);
        ck_assert_int_eq(n, 32 * 64);
        for (int64_t row = 0; row < 64; row++)
            for (int64_t c = 0; c < 32; c++)
                ck_assert_float_eq(f[row * 32 + c],
                                   val(fx.m, "blk.0.attn_output.weight", 32 * r + c, row, 0));
        free(f);
    }
    gguf_shard_plan_free(p);
    close_fx(&fx);
}
END_TEST

START_TEST(rules_qkv_vocab_checks)
{
    fixture fx = open_fx(hr_llama_kvs, NULL, hr_llama_tensors);
    /* tp 4 > 2 kv heads: each kv head on 2 ranks */
    gguf_shard_plan *p = plan(fx.m, 4, 0, GGUF_ENGINE_VLLM);
    const gguf_shard_tensor *k = gguf_shard_plan_find(p, "blk.0.attn_k.weight");
    ck_assert_int_eq(k->rule, GGUF_RULE_QKV);
    ck_assert_int_eq(k->slot, 1);
    ck_assert_str_eq(k->fused, "qkv_proj");
    int64_t want_lo[4] = {0, 0, 16, 16};
    for (int r = 0; r < 4; r++) {
        NE2(&k->ranks[r], 64, 16);
        ck_assert_int_eq(k->ranks[r].range_lo, want_lo[r]);
    }
    NE2(sl(p, "blk.0.attn_q.weight", 3), 64, 16);
    ck_assert_int_eq(sl(p, "blk.0.attn_q.weight", 3)->range_lo, 48);
    ck_assert(has_check(p, "kv_heads", GGUF_CHECK_INFO));
    /* vocab 96 padded to 128: 32 rows per rank, rank 3 all padding */
    const gguf_shard_slice *v2 = sl(p, "token_embd.weight", 2), *v3 = sl(p, "token_embd.weight", 3);
    NE2(v2, 64, 32);
    ck_assert_int_eq(v2->range_lo, 64);
    ck_assert_int_eq(v2->range_hi, 96);
    NE2(v3, 64, 32);
    ck_assert_int_eq(v3->pad, 32);
    ck_assert_int_eq(v3->n_pieces, 0);
    ck_assert(has_check(p, "vocab", GGUF_CHECK_INFO));
    int64_t n;
    float *f = mat(p, "token_embd.weight", 3, &n);
    for (int64_t e = 0; e < n; e++)
        ck_assert_float_eq(f[e], 0.0f);
    free(f);
    gguf_shard_plan_free(p);

    /* tp 8: 4 heads do not divide, 8 is a multiple of 2 kv heads */
    p = plan(fx.m, 8, 0, GGUF_ENGINE_VLLM);
    ck_assert(has_check(p, "heads", GGUF_CHECK_ERROR));
    gguf_shard_plan_free(p);
    /* tp 3: heads, kv heads, ffn 96 / 3 fine, vocab 128 / 3 not */
    p = plan(fx.m, 3, 0, GGUF_ENGINE_VLLM);
    ck_assert(has_check(p, "heads", GGUF_CHECK_ERROR));
    ck_assert(has_check(p, "kv_heads", GGUF_CHECK_ERROR));
    ck_assert(has_check(p, "vocab", GGUF_CHECK_ERROR));
    ck_assert(!has_check(p, "ffn", GGUF_CHECK_ERROR));
    gguf_shard_plan_free(p);
    p = plan(fx.m, 64, 0, GGUF_ENGINE_VLLM);
    ck_assert(has_check(p, "ffn", GGUF_CHECK_ERROR));
    gguf_shard_plan_free(p);
    close_fx(&fx);
}
END_TEST

START_TEST(quant_block_check)
{
    /* Q8_0 ffn_down with 96 inputs: tp 2 cuts at 48 (not a multiple of 32), tp 3 at 32 */
    const char *ts[64];
    int n = 0;
    for (int i = 0; hr_llama_tensors[i]; i++) {
        if (!strncmp(hr_llama_tensors[i], "blk.0.ffn_down.", 15))
            ts[n++] = "blk.0.ffn_down.weight q8_0 96,64";
        else
            ts[n++] = hr_llama_tensors[i];
    }
    ts[n] = NULL;
    fixture fx = open_fx(hr_llama_kvs, NULL, ts);
    gguf_shard_plan *p = plan(fx.m, 2, 0, GGUF_ENGINE_VLLM);
    const gguf_shard_slice *s = sl(p, "blk.0.ffn_down.weight", 1);
    ck_assert(!s->quant_cut_ok);
    ck_assert_ptr_nonnull(strstr(s->reason, "block boundary"));
    ck_assert_uint_eq(s->bytes, 48 * 64 * 4); /* F32 after dequantization */
    ck_assert(has_check(p, "quant_block", GGUF_CHECK_WARN));
    /* rows of a quantized tensor are always cuttable */
    ck_assert(sl(p, "blk.0.attn_q.weight", 1)->quant_cut_ok);
    /* materialized from Q8_0 equals the dequantized whole, columns 48.. */
    int64_t cnt;
    float *f = mat(p, "blk.0.ffn_down.weight", 1, &cnt);
    ck_assert_int_eq(cnt, 48 * 64);
    free(f);
    gguf_shard_plan_free(p);

    p = plan(fx.m, 3, 0, GGUF_ENGINE_VLLM);
    s = sl(p, "blk.0.ffn_down.weight", 1);
    ck_assert(s->quant_cut_ok);
    ck_assert_uint_eq(s->bytes, 64 * 34); /* one Q8_0 block (34 bytes) per row */
    ck_assert(!has_check(p, "quant_block", GGUF_CHECK_WARN));
    gguf_shard_plan_free(p);
    close_fx(&fx);
}
END_TEST

START_TEST(expert_checks)
{
    fixture fx = open_fx(hr_qwen3moe_kvs, NULL, hr_qwen3moe_tensors);
    /* expert width 48 over tp 4 -> 12 each: fine; over tp 32: not */
    gguf_shard_plan *p = plan(fx.m, 4, 2, GGUF_ENGINE_SGLANG);
    ck_assert_int_eq(gguf_shard_plan_moe_tp(p), 2);
    ck_assert_int_eq(gguf_shard_plan_ep_rank(p, 3), 1);
    NE3(sl(p, "blk.0.ffn_up_exps.weight", 3), 64, 24, 4);
    ck_assert_int_eq(sl(p, "blk.0.ffn_up_exps.weight", 3)->pieces[0].lo[2], 4);
    ck_assert_int_eq(sl(p, "blk.0.ffn_up_exps.weight", 3)->pieces[0].lo[1], 24);
    ck_assert_int_eq(gguf_shard_plan_check_worst(p, GGUF_CHECK_ERROR), 0);
    gguf_shard_plan_free(p);
    p = plan(fx.m, 4, 2, GGUF_ENGINE_VLLM);
    ck_assert(has_check(p, "ep_config", GGUF_CHECK_ERROR));
    gguf_shard_plan_free(p);
    p = plan(fx.m, 3, 3, GGUF_ENGINE_SGLANG);
    ck_assert(has_check(p, "experts_ep", GGUF_CHECK_ERROR));
    gguf_shard_plan_free(p);
    p = plan(fx.m, 32, 0, GGUF_ENGINE_VLLM);
    ck_assert(has_check(p, "expert_ffn", GGUF_CHECK_ERROR));
    gguf_shard_plan_free(p);
    /* invalid options */
    gguf_shard_opts o = {.tp = 0};
    gguf_shard_plan *q;
    gguf_error err;
    ck_assert_int_eq(gguf_shard_plan_create(&q, fx.m, &o, &err), GGUF_E_INVALID);
    o.tp = 2;
    o.ep = 4;
    ck_assert_int_eq(gguf_shard_plan_create(&q, fx.m, &o, &err), GGUF_E_INVALID);
    o.ep = 0;
    o.engine = (gguf_engine)7;
    ck_assert_int_eq(gguf_shard_plan_create(&q, fx.m, &o, &err), GGUF_E_INVALID);
    gguf_engine eg;
    ck_assert_int_eq(gguf_engine_from_name("sglang", &eg), 0);
    ck_assert_int_eq(eg, GGUF_ENGINE_SGLANG);
    ck_assert_int_eq(gguf_engine_from_name("tgi", &eg), GGUF_E_INVALID);
    close_fx(&fx);
}
END_TEST

START_TEST(sigmoid_without_bias)
{
    const char *ts[64];
    int n = 0;
    for (int i = 0; hr_ds2_tensors[i]; i++)
        if (strncmp(hr_ds2_tensors[i], "blk.1.exp_probs_b.", 18))
            ts[n++] = hr_ds2_tensors[i];
    ts[n] = NULL;
    fixture fx = open_fx(hr_ds2_kvs, NULL, ts);
    gguf_shard_plan *p = plan(fx.m, 2, 0, GGUF_ENGINE_VLLM);
    ck_assert(has_check(p, "missing", GGUF_CHECK_WARN));
    ck_assert(!has_check(p, "missing", GGUF_CHECK_ERROR));
    gguf_shard_plan_free(p);
    close_fx(&fx);
}
END_TEST

START_TEST(missing_and_unconsumed)
{
    const char *ts[64];
    int n = 0;
    for (int i = 0; hr_llama_tensors[i]; i++)
        if (strncmp(hr_llama_tensors[i], "blk.1.attn_v.", 13))
            ts[n++] = hr_llama_tensors[i];
    ts[n++] = "blk.0.mystery.weight f32 8";
    ts[n] = NULL;
    fixture fx = open_fx(hr_llama_kvs, NULL, ts);
    gguf_shard_plan *p = plan(fx.m, 2, 0, GGUF_ENGINE_VLLM);
    ck_assert(has_check(p, "missing", GGUF_CHECK_ERROR));
    ck_assert(has_check(p, "unconsumed", GGUF_CHECK_WARN));
    ck_assert(!gguf_shard_plan_find(p, "blk.0.mystery.weight")->consumed);
    bool named = false;
    for (int64_t i = 0; i < gguf_shard_plan_check_count(p); i++)
        if (strstr(gguf_shard_plan_check_at(p, i)->message, "blk.1.attn_v.weight"))
            named = true;
    ck_assert(named);
    gguf_shard_plan_free(p);
    close_fx(&fx);
}
END_TEST

/* ---- faults ---- */

static gguf_shard_plan *faulted(const gguf_model *m, int tp, int ep, gguf_fault f, int want_rc)
{
    gguf_shard_plan *p = plan(m, tp, ep, GGUF_ENGINE_SGLANG);
    gguf_error err;
    int rc = gguf_shard_apply_fault(p, f, -1, &err);
    ck_assert_msg(rc == want_rc, "%s: rc %d: %s", gguf_fault_name(f), rc, err.message);
    if (rc == 0)
        ck_assert(has_check(p, "fault", GGUF_CHECK_ERROR));
    return p;
}

START_TEST(faults_mla)
{
    fixture fx = open_fx(hr_ds2_kvs, NULL, hr_ds2_tensors);
    gguf_shard_plan *p = faulted(fx.m, 2, 0, GGUF_FAULT_KV_B_WHOLE, 0);
    NE2(sl(p, "blk.0.attn_kv_b.weight", 1), 32, 128);
    gguf_shard_plan_free(p);

    /* rows offset with nope+rope = 24 per head: rank 1 starts at 48, not 64 */
    p = faulted(fx.m, 2, 0, GGUF_FAULT_KV_B_ROWS, 0);
    const gguf_shard_slice *s = sl(p, "blk.0.attn_kv_b.weight", 1);
    NE2(s, 32, 64);
    ck_assert_int_eq(s->range_lo, 48);
    gguf_shard_plan_free(p);

    /* stacked: rank 0's first rows are k of heads 0,1, then k of heads 2,3 */
    p = faulted(fx.m, 2, 0, GGUF_FAULT_KV_B_STACKED, 0);
    int64_t n;
    float *f = mat(p, "blk.0.attn_kv_b.weight", 0, &n);
    ck_assert_float_eq(f[16 * 32 + 0], val(fx.m, "blk.0.attn_k_b.weight", 0, 0, 1));
    ck_assert_float_eq(f[32 * 32 + 0], val(fx.m, "blk.0.attn_k_b.weight", 0, 0, 2));
    free(f);
    gguf_shard_plan_free(p);

    /* no transpose: the head's bytes reinterpreted */
    p = faulted(fx.m, 2, 0, GGUF_FAULT_K_B_NO_TRANSPOSE, 0);
    f = mat(p, "blk.0.attn_kv_b.weight", 0, &n);
    ck_assert_float_eq(f[1], val(fx.m, "blk.0.attn_k_b.weight", 1, 0, 0));
    NE2(sl(p, "blk.0.attn_kv_b.weight", 0), 32, 64);
    free(f);
    gguf_shard_plan_free(p);

    p = faulted(fx.m, 2, 0, GGUF_FAULT_MLA_CACHE_SHARDED, 0);
    s = sl(p, "blk.0.attn_kv_a_mqa.weight", 1);
    NE2(s, 64, 40);
    ck_assert_int_eq(s->pad, 20);
    ck_assert(!gguf_shard_plan_runtime(p)->mla_cache_replicated);
    gguf_shard_plan_free(p);

    p = faulted(fx.m, 2, 0, GGUF_FAULT_NO_ALLREDUCE, 0);
    ck_assert(!gguf_shard_plan_find(p, "blk.0.attn_output.weight")->reduce_sum);
    gguf_shard_plan_free(p);

    p = faulted(fx.m, 2, 2, GGUF_FAULT_EXPERT_OFFSET, 0);
    s = sl(p, "blk.1.ffn_up_exps.weight", 1);
    ck_assert_int_eq(s->n_pieces, 2); /* experts 3 and, wrapped, 0 */
    ck_assert_int_eq(s->pieces[0].lo[2], 3);
    ck_assert_int_eq(s->pieces[1].lo[2], 0);
    NE3(s, 64, 32, 2);
    gguf_shard_plan_free(p);

    p = faulted(fx.m, 2, 0, GGUF_FAULT_GATE_UP_STREAM, 0);
    /* rank 1's gate slot holds the first half of up */
    s = sl(p, "blk.0.ffn_gate.weight", 1);
    ck_assert_int_eq(s->pieces[0].src,
                     gguf_shard_plan_find(p, "blk.0.ffn_up.weight") - gguf_shard_plan_at(p, 0));
    ck_assert_int_eq(s->pieces[0].lo[1], 0);
    gguf_shard_plan_free(p);

    p = faulted(fx.m, 2, 0, GGUF_FAULT_RANK0_EVERYWHERE, 0);
    ck_assert_int_eq(sl(p, "blk.0.attn_q_b.weight", 1)->range_lo, 0);
    ck_assert_int_eq(sl(p, "blk.0.attn_kv_b.weight", 1)->range_lo, 0);
    gguf_shard_plan_free(p);

    p = faulted(fx.m, 2, 0, GGUF_FAULT_NORM_SLICED, 0);
    s = sl(p, "blk.0.attn_norm.weight", 1);
    ck_assert_int_eq(s->ne[0], 64);
    ck_assert_int_eq(s->pad, 32);
    ck_assert_int_eq(s->pieces[0].lo[0], 32);
    gguf_shard_plan_free(p);

    /* config faults */
    p = faulted(fx.m, 1, 0, GGUF_FAULT_YARN_MSCALE, 0);
    const gguf_hparams *h = gguf_model_hparams(fx.m);
    ck_assert_double_eq_tol(gguf_shard_plan_runtime(p)->attn_scale, 1.0 / sqrt(24.0), 1e-9);
    ck_assert_double_eq_tol(h->attn_scale, gguf_shard_plan_runtime(p)->attn_scale *
                                               h->yarn_mscale * h->yarn_mscale, 1e-9);
    gguf_shard_plan_free(p);
    p = faulted(fx.m, 1, 0, GGUF_FAULT_ROPE_PAIRS, 0);
    ck_assert_int_eq(gguf_shard_plan_runtime(p)->rope_pairs, GGUF_ROPE_HALF);
    gguf_shard_plan_free(p);
    p = faulted(fx.m, 1, 0, GGUF_FAULT_ROUTED_SCALE, 0);
    ck_assert_double_eq(gguf_shard_plan_runtime(p)->routed_scale, 1.0);
    gguf_shard_plan_free(p);
    p = faulted(fx.m, 1, 0, GGUF_FAULT_EXP_PROBS_B, 0);
    ck_assert(!gguf_shard_plan_runtime(p)->use_exp_probs_b);
    gguf_shard_plan_free(p);
    p = faulted(fx.m, 1, 0, GGUF_FAULT_SHARED_SCALED, 0);
    ck_assert_double_eq_tol(gguf_shard_plan_runtime(p)->shared_scale, 2.5, 1e-6);
    gguf_shard_plan_free(p);

    p = faulted(fx.m, 1, 0, GGUF_FAULT_ROUTED_SCALE_TWICE, 0);
    ck_assert_double_eq_tol(gguf_shard_plan_runtime(p)->routed_scale, 6.25, 1e-6);
    gguf_shard_plan_free(p);
    p = faulted(fx.m, 2, 0, GGUF_FAULT_SHARED_DOUBLE_REDUCE, 0);
    ck_assert_double_eq(gguf_shard_plan_runtime(p)->shared_scale, 2.0);
    gguf_shard_plan_free(p);
    gguf_shard_plan_free(faulted(fx.m, 1, 0, GGUF_FAULT_SHARED_DOUBLE_REDUCE, GGUF_E_UNSUPPORTED));

    /* faults that cannot happen here */
    gguf_shard_plan_free(faulted(fx.m, 1, 0, GGUF_FAULT_KV_B_WHOLE, GGUF_E_UNSUPPORTED));
    gguf_shard_plan_free(faulted(fx.m, 2, 0, GGUF_FAULT_QKV_STREAM, GGUF_E_UNSUPPORTED));
    gguf_shard_plan_free(faulted(fx.m, 2, 0, GGUF_FAULT_KV_HEADS_SPLIT, GGUF_E_UNSUPPORTED));
    gguf_shard_plan_free(faulted(fx.m, 2, 0, GGUF_FAULT_EXPERT_OFFSET, GGUF_E_UNSUPPORTED));
    gguf_shard_plan_free(faulted(fx.m, 2, 0, GGUF_FAULT_QUANT_OFF_BLOCK, GGUF_E_UNSUPPORTED));
    gguf_shard_plan_free(faulted(fx.m, 2, 0, GGUF_FAULT_VOCAB_NO_PAD, GGUF_E_UNSUPPORTED));
    /* one layer only */
    p = plan(fx.m, 2, 0, GGUF_ENGINE_VLLM);
    gguf_error err;
    ck_assert_int_eq(gguf_shard_apply_fault(p, GGUF_FAULT_KV_B_WHOLE, 1, &err), 0);
    NE2(sl(p, "blk.0.attn_kv_b.weight", 1), 32, 64);
    NE2(sl(p, "blk.1.attn_kv_b.weight", 1), 32, 128);
    ck_assert_int_eq(gguf_shard_apply_fault(p, GGUF_FAULT_KV_B_WHOLE, 9, &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_shard_apply_fault(p, GGUF_FAULT_NONE, -1, &err), GGUF_E_INVALID);
    gguf_shard_plan_free(p);
    close_fx(&fx);
}
END_TEST

START_TEST(faults_dense)
{
    const char *extra[] = {"u32 llama.attention.key_length 16", NULL};
    const char *ts[64];
    int n = 0;
    for (int i = 0; hr_llama_tensors[i]; i++) {
        if (!strncmp(hr_llama_tensors[i], "blk.0.ffn_down.", 15))
            ts[n++] = "blk.0.ffn_down.weight q8_0 96,64";
        else
            ts[n++] = hr_llama_tensors[i];
    }
    ts[n] = NULL;
    fixture fx = open_fx(hr_llama_kvs, extra, ts);

    /* qkv in stream order at tp 2: rank 0's k slot holds q rows 32..47 */
    gguf_shard_plan *p = faulted(fx.m, 2, 0, GGUF_FAULT_QKV_STREAM, 0);
    const gguf_shard_slice *s = sl(p, "blk.0.attn_k.weight", 0);
    int64_t qi = gguf_shard_plan_find(p, "blk.0.attn_q.weight") - gguf_shard_plan_at(p, 0);
    ck_assert_int_eq(s->pieces[0].src, qi);
    ck_assert_int_eq(s->pieces[0].lo[1], 32);
    NE2(s, 64, 16);
    /* rank 1 reads stream rows 64..127 = all of K then all of V: its q slot is K */
    s = sl(p, "blk.0.attn_q.weight", 1);
    ck_assert_int_eq(s->pieces[0].src,
                     gguf_shard_plan_find(p, "blk.0.attn_k.weight") - gguf_shard_plan_at(p, 0));
    ck_assert_int_eq(s->pieces[0].lo[1], 0);
    ck_assert_int_eq(s->pieces[0].hi[1], 32);
    gguf_shard_plan_free(p);

    /* kv heads split at tp 4 > 2: each rank 8 rows of a 16-row head, then zeros */
    p = faulted(fx.m, 4, 0, GGUF_FAULT_KV_HEADS_SPLIT, 0);
    s = sl(p, "blk.0.attn_k.weight", 1);
    NE2(s, 64, 16);
    ck_assert_int_eq(s->pieces[0].lo[1], 8);
    ck_assert_int_eq(s->pad, 8);
    gguf_shard_plan_free(p);

    /* quantized inner cut rounded down to the block: rank 1 gets 32..80, not 48..96 */
    p = faulted(fx.m, 2, 0, GGUF_FAULT_QUANT_OFF_BLOCK, 0);
    s = sl(p, "blk.0.ffn_down.weight", 1);
    ck_assert_int_eq(s->pieces[0].lo[0], 32);
    ck_assert_int_eq(s->pieces[0].hi[0], 80);
    ck_assert(s->quant_cut_ok);
    gguf_shard_plan_free(p);

    /* vocab 96 at tp 4: padded split 32 per rank, unpadded 24 */
    p = faulted(fx.m, 4, 0, GGUF_FAULT_VOCAB_NO_PAD, 0);
    s = sl(p, "output.weight", 1);
    ck_assert_int_eq(s->pieces[0].lo[1], 24);
    NE2(s, 64, 32);
    gguf_shard_plan_free(p);

    gguf_shard_plan_free(faulted(fx.m, 2, 0, GGUF_FAULT_KV_B_WHOLE, GGUF_E_UNSUPPORTED));
    gguf_shard_plan_free(faulted(fx.m, 2, 0, GGUF_FAULT_KV_HEADS_SPLIT, GGUF_E_UNSUPPORTED));
    gguf_shard_plan_free(faulted(fx.m, 1, 0, GGUF_FAULT_YARN_MSCALE, GGUF_E_UNSUPPORTED));
    gguf_shard_plan_free(faulted(fx.m, 1, 0, GGUF_FAULT_ROUTED_SCALE, GGUF_E_UNSUPPORTED));
    gguf_shard_plan_free(faulted(fx.m, 1, 0, GGUF_FAULT_RANK0_EVERYWHERE, GGUF_E_UNSUPPORTED));

    /* names round trip */
    for (int k = 1; k < GGUF_FAULT_COUNT; k++) {
        gguf_fault g;
        ck_assert_int_eq(gguf_fault_from_name(gguf_fault_name((gguf_fault)k), &g), 0);
        ck_assert_int_eq(g, k);
        ck_assert_ptr_nonnull(gguf_fault_summary((gguf_fault)k));
    }
    gguf_fault g;
    ck_assert_int_eq(gguf_fault_from_name("bogus", &g), GGUF_E_INVALID);
    ck_assert(gguf_fault_is_config(GGUF_FAULT_ROPE_PAIRS));
    ck_assert(!gguf_fault_is_config(GGUF_FAULT_KV_B_WHOLE));
    close_fx(&fx);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("shard");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, rules_mla_moe);
    tcase_add_test(tc, kvb_materialized_per_head);
    tcase_add_test(tc, rules_qkv_vocab_checks);
    tcase_add_test(tc, quant_block_check);
    tcase_add_test(tc, expert_checks);
    tcase_add_test(tc, missing_and_unconsumed);
    tcase_add_test(tc, sigmoid_without_bias);
    tcase_add_test(tc, faults_mla);
    tcase_add_test(tc, faults_dense);
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
