/*
 * The forward API: every error code it returns, the capture contract (names,
 * order, shapes, stopping a run), statistics, incremental evaluation, and a
 * one-rank virtual-TP context equal to the reference. The model is a small
 * llama and a small deepseek2 written by gguf-gen (GGUFKIT_GEN, set by ctest).
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/forward.h"
#include "gguf/model.h"
#include "gguf/shard.h"

static char dir[256];

static void make_model(const char *arch, char *out, size_t size)
{
    const char *gen = getenv("GGUFKIT_GEN");
    ck_assert_msg(gen && access(gen, X_OK) == 0, "GGUFKIT_GEN (gguf-gen) is not set or built");
    snprintf(out, size, "%s/%s.gguf", dir, arch);
    if (access(out, R_OK) == 0)
        return;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' model --arch %s --type Q8_0 --no-sync --force -q '%s'", gen,
             arch, out);
    ck_assert_int_eq(system(cmd), 0);
}

typedef struct open_model {
    gguf_set *set;
    gguf_model *m;
} open_model;

static open_model load(const char *arch)
{
    char path[512];
    make_model(arch, path, sizeof path);
    open_model om = {0};
    gguf_error err;
    ck_assert_int_eq(gguf_set_open(&om.set, path, NULL, &err), 0);
    ck_assert_msg(gguf_model_open(&om.m, om.set, &err) == 0, "%s", err.message);
    return om;
}

static void unload(open_model *om)
{
    gguf_model_free(om->m);
    gguf_set_free(om->set);
}

static const int32_t TOK[5] = {1, 5, 9, 200, 33};

START_TEST(bad_options)
{
    open_model om = load("llama");
    gguf_fwd_ctx *c = (gguf_fwd_ctx *)1;
    gguf_error err;
    gguf_fwd_opts o = {0};
    o.precision = 7;
    ck_assert_int_eq(gguf_fwd_ctx_create(&c, om.m, &o, &err), GGUF_E_INVALID);
    ck_assert_ptr_null(c);
    ck_assert(strstr(err.message, "precision") != NULL);
    o.precision = GGUF_FWD_F32;
    o.n_threads = -1;
    ck_assert_int_eq(gguf_fwd_ctx_create(&c, om.m, &o, &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_fwd_ctx_create(&c, NULL, NULL, &err), GGUF_E_INVALID);
    gguf_fwd_ctx_free(NULL); /* accepts NULL */
    unload(&om);
}
END_TEST

START_TEST(bad_tokens)
{
    open_model om = load("llama");
    const gguf_hparams *hp = gguf_model_hparams(om.m);
    gguf_fwd_ctx *c;
    gguf_error err;
    ck_assert_int_eq(gguf_fwd_ctx_create(&c, om.m, NULL, &err), 0);
    ck_assert_int_eq(gguf_fwd_eval(c, TOK, 0, NULL, &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_fwd_eval(c, NULL, 3, NULL, &err), GGUF_E_INVALID);
    int32_t bad[2] = {1, (int32_t)hp->n_vocab};
    ck_assert_int_eq(gguf_fwd_eval(c, bad, 2, NULL, &err), GGUF_E_INVALID);
    ck_assert(strstr(err.message, "outside the vocabulary") != NULL);
    bad[1] = -3;
    ck_assert_int_eq(gguf_fwd_eval(c, bad, 2, NULL, &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_fwd_ctx_n_past(c), 0); /* nothing was evaluated */
    gguf_fwd_ctx_free(c);
    unload(&om);
}
END_TEST

typedef struct seen {
    int n;
    char first[64], last[64];
    int stop_at;   /* stop at this capture (1-based), 0 = never */
    int stop_code;
    int64_t last_ne0, last_ne1;
    int bad_rank;
    int tp_ranks_seen;
} seen;

static int on_capture(void *user, const gguf_fwd_capture *cap)
{
    seen *s = user;
    s->n++;
    if (s->n == 1)
        snprintf(s->first, sizeof s->first, "%s", cap->name);
    snprintf(s->last, sizeof s->last, "%s", cap->name);
    s->last_ne0 = cap->ne[0];
    s->last_ne1 = cap->ne[1];
    if (cap->rank != -1)
        s->bad_rank++;
    if (cap->layer >= 0) {
        char want[64];
        snprintf(want, sizeof want, "blk.%d.%s", cap->layer, cap->op);
        ck_assert_str_eq(want, cap->name);
    }
    return s->stop_at && s->n == s->stop_at ? s->stop_code : 0;
}

START_TEST(captures)
{
    open_model om = load("llama");
    const gguf_hparams *hp = gguf_model_hparams(om.m);
    gguf_fwd_ctx *c;
    gguf_error err;
    seen s = {0};
    gguf_fwd_opts o = {0};
    o.capture = on_capture;
    o.capture_user = &s;
    ck_assert_int_eq(gguf_fwd_ctx_create(&c, om.m, &o, &err), 0);
    ck_assert_int_eq(gguf_fwd_eval(c, TOK, 5, NULL, &err), 0);
    /* six points per dense block, then output_norm and logits */
    ck_assert_int_eq(s.n, 6 * (int)hp->n_layer_main + 2);
    ck_assert_str_eq(s.first, "blk.0.attn_norm");
    ck_assert_str_eq(s.last, "logits");
    ck_assert_int_eq(s.last_ne0, hp->n_vocab);
    ck_assert_int_eq(s.last_ne1, 5);
    ck_assert_int_eq(s.bad_rank, 0);
    gguf_fwd_ctx_free(c);

    /* a callback's error code stops the run; other values become INTERRUPTED */
    seen s2 = {0};
    s2.stop_at = 3;
    s2.stop_code = GGUF_E_MISMATCH;
    o.capture_user = &s2;
    ck_assert_int_eq(gguf_fwd_ctx_create(&c, om.m, &o, &err), 0);
    ck_assert_int_eq(gguf_fwd_eval(c, TOK, 5, NULL, &err), GGUF_E_MISMATCH);
    ck_assert_int_eq(s2.n, 3);
    ck_assert_int_eq(gguf_fwd_ctx_n_past(c), 0);
    gguf_fwd_ctx_free(c);
    seen s3 = {0};
    s3.stop_at = 1;
    s3.stop_code = 42;
    o.capture_user = &s3;
    ck_assert_int_eq(gguf_fwd_ctx_create(&c, om.m, &o, &err), 0);
    ck_assert_int_eq(gguf_fwd_eval(c, TOK, 5, NULL, &err), GGUF_E_INTERRUPTED);
    gguf_fwd_ctx_free(c);
    unload(&om);
}
END_TEST

START_TEST(moe_captures_and_stats)
{
    open_model om = load("deepseek2");
    const gguf_hparams *hp = gguf_model_hparams(om.m);
    gguf_fwd_ctx *c;
    gguf_error err;
    seen s = {0};
    gguf_fwd_opts o = {0};
    o.capture = on_capture;
    o.capture_user = &s;
    ck_assert_int_eq(gguf_fwd_ctx_create(&c, om.m, &o, &err), 0);
    ck_assert_int_eq(gguf_fwd_eval(c, TOK, 5, NULL, &err), 0);
    /* MoE blocks add moe_experts and moe_weights */
    const int moe_blocks = (int)(hp->n_layer_main - hp->n_layer_dense_lead);
    ck_assert_int_eq(s.n, 6 * (int)hp->n_layer_main + 2 * moe_blocks + 2);
    gguf_fwd_stats st;
    gguf_fwd_ctx_stats(c, &st);
    ck_assert(st.weight_bytes > 0);
    ck_assert(st.peak_weight_bytes > 0 && st.peak_weight_bytes <= (33u << 20));
    /* only routed experts are loaded: at most 5 tokens x n_used per MoE block */
    ck_assert(st.experts_loaded >= (uint64_t)hp->n_expert_used);
    ck_assert(st.experts_loaded <= (uint64_t)(moe_blocks * 5 * hp->n_expert_used));
    ck_assert(st.seconds >= 0);
    gguf_fwd_ctx_free(c);
    unload(&om);
}
END_TEST

static float *run_logits(const gguf_model *m, const gguf_fwd_opts *o, int split)
{
    const int64_t V = gguf_model_hparams(m)->n_vocab;
    float *lg = malloc(sizeof(float) * (size_t)(5 * V));
    gguf_fwd_ctx *c;
    gguf_error err;
    ck_assert_int_eq(gguf_fwd_ctx_create(&c, m, o, &err), 0);
    if (split) { /* 2 tokens, then 3 through the KV cache */
        ck_assert_int_eq(gguf_fwd_eval(c, TOK, 2, lg, &err), 0);
        ck_assert_int_eq(gguf_fwd_ctx_n_past(c), 2);
        ck_assert_int_eq(gguf_fwd_eval(c, TOK + 2, 3, lg + 2 * V, &err), 0);
    } else {
        ck_assert_int_eq(gguf_fwd_eval(c, TOK, 5, lg, &err), 0);
    }
    ck_assert_int_eq(gguf_fwd_ctx_n_past(c), 5);
    gguf_fwd_ctx_free(c);
    return lg;
}

static double rel(const float *a, const float *b, int64_t n)
{
    double d = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        s += (double)b[i] * b[i];
    }
    return sqrt(d / s);
}

START_TEST(incremental_equals_batch)
{
    const char *archs[2] = {"llama", "deepseek2"};
    for (int k = 0; k < 2; k++) {
        open_model om = load(archs[k]);
        const int64_t V = gguf_model_hparams(om.m)->n_vocab;
        float *a = run_logits(om.m, NULL, 0), *b = run_logits(om.m, NULL, 1);
        ck_assert_msg(rel(b, a, 5 * V) < 1e-6, "%s: %g", archs[k], rel(b, a, 5 * V));
        /* f64 and absorbed MLA agree with the default */
        gguf_fwd_opts o = {0};
        o.precision = GGUF_FWD_F64;
        o.mla_mode = GGUF_FWD_MLA_ABSORBED;
        float *d = run_logits(om.m, &o, 0);
        ck_assert_msg(rel(d, a, 5 * V) < 1e-5, "%s: %g", archs[k], rel(d, a, 5 * V));
        free(a);
        free(b);
        free(d);
        unload(&om);
    }
}
END_TEST

START_TEST(tp_one_rank_equals_reference)
{
    const char *archs[2] = {"llama", "deepseek2"};
    for (int k = 0; k < 2; k++) {
        open_model om = load(archs[k]);
        const int64_t V = gguf_model_hparams(om.m)->n_vocab;
        gguf_error err;
        gguf_shard_plan *p;
        gguf_shard_opts so = {.tp = 1, .ep = 0, .engine = GGUF_ENGINE_VLLM};
        ck_assert_int_eq(gguf_shard_plan_create(&p, om.m, &so, &err), 0);
        gguf_fwd_ctx *c;
        ck_assert_int_eq(gguf_fwd_tp_create(&c, om.m, p, NULL, &err), 0);
        float *lg = malloc(sizeof(float) * (size_t)(5 * V));
        ck_assert_int_eq(gguf_fwd_eval(c, TOK, 5, lg, &err), 0);
        float *ref = run_logits(om.m, NULL, 0);
        ck_assert_msg(rel(lg, ref, 5 * V) < 1e-6, "%s: %g", archs[k], rel(lg, ref, 5 * V));
        gguf_fwd_ctx_free(c);
        /* tp 2: batch and incremental (KV cache per rank) agree with the reference */
        gguf_shard_plan *p2;
        gguf_shard_opts so2 = {.tp = 2, .ep = 0, .engine = GGUF_ENGINE_VLLM};
        ck_assert_int_eq(gguf_shard_plan_create(&p2, om.m, &so2, &err), 0);
        ck_assert_int_eq(gguf_fwd_tp_create(&c, om.m, p2, NULL, &err), 0);
        ck_assert_int_eq(gguf_fwd_eval(c, TOK, 2, lg, &err), 0);
        ck_assert_int_eq(gguf_fwd_eval(c, TOK + 2, 3, lg + 2 * V, &err), 0);
        ck_assert_msg(rel(lg, ref, 5 * V) < 1e-5, "%s tp2: %g", archs[k], rel(lg, ref, 5 * V));
        gguf_fwd_stats st;
        gguf_fwd_ctx_stats(c, &st);
        ck_assert(st.weight_bytes > 0);
        gguf_fwd_ctx_free(c);
        gguf_shard_plan_free(p2);
        /* a plan of another model is refused */
        open_model other = load(k ? "llama" : "deepseek2");
        ck_assert_int_eq(gguf_fwd_tp_create(&c, other.m, p, NULL, &err), GGUF_E_INVALID);
        ck_assert_ptr_null(c);
        unload(&other);
        gguf_shard_plan_free(p);
        free(lg);
        free(ref);
        unload(&om);
    }
}
END_TEST

/* Id of a token string in a vocabulary file, or -1. */
static int32_t find_token(const gguf_file *f, const char *text)
{
    const gguf_value *toks;
    if (gguf_get_arr(f, "tokenizer.ggml.tokens", &toks, NULL))
        return -1;
    for (uint64_t i = 0; i < toks->v.arr.n; i++)
        if (gguf_str_eq(toks->v.arr.strs[i], text))
            return (int32_t)i;
    return -1;
}

START_TEST(token_text)
{
    const char *shared = getenv("GGUFKIT_SHARED");
    char path[512];
    gguf_file *f;
    gguf_error err;
    char buf[64];
    if (!shared)
        return; /* the vocabularies live in ../shared/testdata */
    /* SentencePiece: U+2581 is a space, <0x0A> a byte, control tokens nothing */
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-llama-spm.gguf", shared);
    if (access(path, R_OK) == 0) {
        ck_assert_int_eq(gguf_file_open(&f, path, NULL, &err), 0);
        int32_t id = find_token(f, "\xe2\x96\x81the");
        ck_assert_int_ge(id, 0);
        ck_assert_int_eq(gguf_fwd_token_text(f, id, buf, sizeof buf), 4);
        ck_assert_str_eq(buf, " the");
        id = find_token(f, "<0x0A>");
        ck_assert_int_eq(gguf_fwd_token_text(f, id, buf, sizeof buf), 1);
        ck_assert_str_eq(buf, "\n");
        ck_assert_int_eq(gguf_fwd_token_text(f, gguf_fwd_token_bos(f), buf, sizeof buf), 0);
        ck_assert_int_eq(gguf_fwd_token_text(f, -1, buf, sizeof buf), GGUF_E_INVALID);
        ck_assert_int_eq(gguf_fwd_token_text(f, 1 << 30, buf, sizeof buf), GGUF_E_INVALID);
        /* truncation keeps the NUL */
        id = find_token(f, "\xe2\x96\x81the");
        ck_assert_int_eq(gguf_fwd_token_text(f, id, buf, 3), 2);
        ck_assert_str_eq(buf, " t");
        gguf_file_free(f);
    }
    /* GPT-2 byte-level: U+0120 is a space byte */
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-gpt-2.gguf", shared);
    if (access(path, R_OK) == 0) {
        ck_assert_int_eq(gguf_file_open(&f, path, NULL, &err), 0);
        int32_t id = find_token(f, "\xc4\xa0the");
        ck_assert_int_ge(id, 0);
        ck_assert_int_eq(gguf_fwd_token_text(f, id, buf, sizeof buf), 4);
        ck_assert_str_eq(buf, " the");
        id = find_token(f, "\xc4\x8a"); /* U+010A: the newline byte */
        ck_assert_int_ge(id, 0);
        gguf_fwd_token_text(f, id, buf, sizeof buf);
        ck_assert_str_eq(buf, "\n");
        gguf_file_free(f);
    }
}
END_TEST

START_TEST(argmax_first_on_ties)
{
    const float row[5] = {1, 3, 3, -1, 2};
    ck_assert_int_eq(gguf_fwd_argmax(row, 5), 1);
    ck_assert_int_eq(gguf_fwd_argmax(row, 1), 0);
}
END_TEST

static Suite *api_suite(void)
{
    Suite *s = suite_create("forward_api");
    TCase *tc = tcase_create("api");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, bad_options);
    tcase_add_test(tc, bad_tokens);
    tcase_add_test(tc, captures);
    tcase_add_test(tc, moe_captures_and_stats);
    tcase_add_test(tc, incremental_equals_batch);
    tcase_add_test(tc, tp_one_rank_equals_reference);
    tcase_add_test(tc, token_text);
    tcase_add_test(tc, argmax_first_on_ties);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    snprintf(dir, sizeof dir, "%s/ggufkit-fwapi-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir))
        return EXIT_FAILURE;
    SRunner *sr = srunner_create(api_suite());
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        return EXIT_FAILURE;
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
