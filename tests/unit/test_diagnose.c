/*
 * Engine module, diagnosis (gguf/diagnose.h): an "engine" whose answer is the
 * greedy continuation of a faulty virtual-TP reference (deepseek2 written by
 * gguf-gen, tp 2, kv-b-rows) is diagnosed as that fault, with a runner-up that
 * does not reproduce it; the clean reference's answer is not pinned on any
 * fault (faults that change nothing these tokens reach agree with it too,
 * ranked behind it); the run bound, cancellation, the count and every bad argument.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/diagnose.h"
#include "gguf/forward.h"

#define N_PROMPT 4
#define N_GEN 4
#define N_SEQ (N_PROMPT + N_GEN)

static char dir[] = "/tmp/ggufkit-diagnose-XXXXXX";
static gguf_set *set;
static gguf_model *model;

static void setup(void)
{
    const char *gen = getenv("GGUFKIT_GEN");
    ck_assert_msg(gen && access(gen, X_OK) == 0, "GGUFKIT_GEN (gguf-gen) is not set or built");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[512], cmd[1024];
    snprintf(path, sizeof path, "%s/ds.gguf", dir);
    snprintf(cmd, sizeof cmd, "'%s' model --arch deepseek2 --kv-heads 2 --vocab 500 --type Q8_0 "
             "--no-sync --force -q '%s'", gen, path);
    ck_assert_int_eq(system(cmd), 0);
    gguf_error err;
    ck_assert_int_eq(gguf_set_open(&set, path, NULL, &err), 0);
    ck_assert_msg(gguf_model_open(&model, set, &err) == 0, "%s", err.message);
}

static void teardown(void)
{
    gguf_model_free(model);
    gguf_set_free(set);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* log-softmax of row into out; the argmax. */
static int32_t log_softmax(const float *row, int64_t V, double *out)
{
    double mx = -INFINITY, sum = 0;
    int32_t best = 0;
    for (int64_t v = 0; v < V; v++)
        if (row[v] > mx) {
            mx = row[v];
            best = (int32_t)v;
        }
    for (int64_t v = 0; v < V; v++)
        sum += exp(row[v] - mx);
    for (int64_t v = 0; v < V; v++)
        out[v] = row[v] - mx - log(sum);
    return best;
}

typedef struct answer {
    int32_t seq[N_SEQ];
    gguf_engine_reply *reply;
} answer;

/* What an engine computing `fault` at tp 2 answers for the prompt: its greedy
 * tokens, each with its log-probability and the top 3 (llama-server's shape). */
static void engine_answer(answer *a, gguf_fault fault)
{
    static const int32_t prompt[N_PROMPT] = {1, 5, 9, 200};
    const int64_t V = gguf_model_hparams(model)->n_vocab;
    gguf_error err;
    gguf_shard_plan *plan = NULL;
    gguf_shard_opts so = {.tp = 2};
    ck_assert_int_eq(gguf_shard_plan_create(&plan, model, &so, &err), 0);
    if (fault != GGUF_FAULT_NONE)
        ck_assert_int_eq(gguf_shard_apply_fault(plan, fault, -1, &err), 0);
    memcpy(a->seq, prompt, sizeof prompt);
    float *logits = malloc((size_t)(N_SEQ * V) * sizeof *logits);
    double *lp = malloc((size_t)V * sizeof *lp);
    char *body = malloc(16384);
    size_t len = (size_t)snprintf(body, 16384, "{\"choices\":[{\"logprobs\":{\"content\":[");
    for (int g = 0; g < N_GEN; g++) {
        /* one eval of the whole sequence so far (greedy decode) */
        gguf_fwd_ctx *ctx = NULL;
        gguf_fwd_opts fo = {0};
        ck_assert_int_eq(gguf_fwd_tp_create(&ctx, model, plan, &fo, &err), 0);
        ck_assert_int_eq(gguf_fwd_eval(ctx, a->seq, N_PROMPT + g, logits, &err), 0);
        gguf_fwd_ctx_free(ctx);
        const int32_t tok = log_softmax(logits + (N_PROMPT + g - 1) * V, V, lp);
        a->seq[N_PROMPT + g] = tok;
        len += (size_t)snprintf(body + len, 16384 - len, "%s{\"id\":%d,\"token\":\"t\","
                                "\"logprob\":%.9g,\"top_logprobs\":[", g ? "," : "", tok, lp[tok]);
        for (int k = 0; k < 3; k++) {
            int32_t best = -1;
            for (int32_t v = 0; v < V; v++)
                if (lp[v] > -1e300 && (best < 0 || lp[v] > lp[best]))
                    best = v;
            len += (size_t)snprintf(body + len, 16384 - len, "%s{\"id\":%d,\"token\":\"t\","
                                    "\"logprob\":%.9g}", k ? "," : "", best, lp[best]);
            lp[best] = -1e308;
        }
        len += (size_t)snprintf(body + len, 16384 - len, "]}");
    }
    len += (size_t)snprintf(body + len, 16384 - len, "]}}]}");
    ck_assert_msg(gguf_engine_reply_parse(&a->reply, GGUF_EP_COMPLETIONS, body, len, &err) == 0,
                  "%s", err.message);
    free(body);
    free(lp);
    free(logits);
    gguf_shard_plan_free(plan);
}

static gguf_diag_opts tp2(void)
{
    gguf_diag_opts o = GGUF_DIAG_OPTS_INIT;
    o.tp[0] = 2;
    o.n_tp = 1;
    o.n_jobs = 2;
    o.layers = true;
    return o;
}

START_TEST(names_the_fault)
{
    answer a;
    engine_answer(&a, GGUF_FAULT_KV_B_ROWS);
    const gguf_diag_answer da = {a.reply, a.seq, N_SEQ, N_PROMPT};
    gguf_engine_tol tol;
    gguf_engine_tol_preset(&tol, "default");
    gguf_diag_opts o = tp2();
    gguf_diagnosis *d = NULL;
    gguf_error err;
    ck_assert_msg(gguf_diagnose(&d, model, &da, 1, &tol, &o, &err) == 0, "%s", err.message);
    ck_assert_int_eq(d->result, GGUF_DIAG_FAULT);
    ck_assert_int_eq(d->c[0].fault, GGUF_FAULT_KV_B_ROWS);
    ck_assert_int_eq(d->c[0].layer, -1);
    ck_assert_int_eq(d->c[0].tp, 2);
    ck_assert(d->c[0].reproduces && d->c[0].mean_abs_dlogprob < 1e-4);
    ck_assert_int_ge(d->runner_up, 1);
    ck_assert(!d->c[d->runner_up].reproduces);
    ck_assert(!d->layers_tried); /* found at every layer: no one-layer step */
    ck_assert_int_eq(d->n_tried_tp, 1);
    int64_t n_cand, n_runs;
    ck_assert_int_eq(gguf_diagnose_count(model, 1, &o, &n_cand, &n_runs, &err), 0);
    ck_assert_int_eq(n_cand, d->n);
    ck_assert_int_eq(n_runs, d->n_runs);
    gguf_diagnosis_free(d);
    /* a bound below the first step's runs refuses the search */
    o.max_runs = 3;
    ck_assert_int_eq(gguf_diagnose(&d, model, &da, 1, &tol, &o, &err), GGUF_E_LIMIT);
    ck_assert_ptr_null(d);
    ck_assert(strstr(err.message, "more than the bound of 3") != NULL);
    /* a raised cancel flag stops it */
    gguf_cancel_flag stop = 1;
    o = tp2();
    o.cancel = &stop;
    ck_assert_int_eq(gguf_diagnose(&d, model, &da, 1, &tol, &o, &err), GGUF_E_INTERRUPTED);
    ck_assert_ptr_null(d);
    gguf_engine_reply_free(a.reply);
}
END_TEST

START_TEST(clean_answer_names_nothing)
{
    /* the clean plan's own answer: nothing but the clean candidate reproduces it,
     * and that is no fault (check-engine would have said AGREE) */
    answer a;
    engine_answer(&a, GGUF_FAULT_NONE);
    const gguf_diag_answer da = {a.reply, a.seq, N_SEQ, N_PROMPT};
    gguf_engine_tol tol;
    gguf_engine_tol_preset(&tol, "default");
    gguf_diag_opts o = tp2();
    o.layers = false;
    gguf_diagnosis *d = NULL;
    gguf_error err;
    ck_assert_msg(gguf_diagnose(&d, model, &da, 1, &tol, &o, &err) == 0, "%s", err.message);
    ck_assert_int_eq(d->c[0].fault, GGUF_FAULT_NONE);
    ck_assert(d->c[0].reproduces);
    ck_assert_int_eq(d->result, GGUF_DIAG_NONE);
    gguf_diagnosis_free(d);
    gguf_engine_reply_free(a.reply);
}
END_TEST

START_TEST(bad_arguments)
{
    gguf_engine_tol tol;
    gguf_engine_tol_preset(&tol, "default");
    gguf_diag_opts o = tp2();
    gguf_diagnosis *d = (gguf_diagnosis *)1;
    gguf_error err;
    const int32_t seq[2] = {1, 2};
    gguf_diag_answer da = {NULL, seq, 2, 1};
    ck_assert_int_eq(gguf_diagnose(&d, model, NULL, 1, &tol, &o, &err), GGUF_E_INVALID);
    ck_assert_ptr_null(d);
    ck_assert_int_eq(gguf_diagnose(&d, model, &da, 0, &tol, &o, &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_diagnose(&d, NULL, &da, 1, &tol, &o, &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_diagnose(&d, model, &da, 1, &tol, &o, &err), GGUF_E_INVALID);
    ck_assert(strstr(err.message, "without a reply") != NULL);
    int64_t n_cand, n_runs;
    o.tp[0] = 0;
    ck_assert_int_eq(gguf_diagnose_count(model, 1, &o, &n_cand, &n_runs, &err), GGUF_E_INVALID);
    o.n_tp = GGUF_DIAG_MAX_TP + 1;
    ck_assert_int_eq(gguf_diagnose_count(model, 1, &o, &n_cand, &n_runs, &err), GGUF_E_INVALID);
    /* the automatic sizes are those the model splits evenly: 1, 2, 4, 8 here */
    o.n_tp = 0;
    ck_assert_int_eq(gguf_diagnose_count(model, 1, &o, &n_cand, &n_runs, &err), 0);
    /* a layout newer than the library's */
    o.version = GGUF_DIAG_OPTS_VERSION + 1;
    ck_assert_int_eq(gguf_diagnose_count(model, 1, &o, &n_cand, &n_runs, &err),
                     GGUF_E_OPTS_VERSION);
    ck_assert_int_eq(gguf_diagnose(&d, model, &da, 1, &tol, &o, &err), GGUF_E_OPTS_VERSION);
    ck_assert_int_gt(n_cand, 20);
    gguf_diagnosis_free(NULL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("diagnose");
    TCase *t = tcase_create("diagnose");
    tcase_add_unchecked_fixture(t, setup, teardown);
    tcase_set_timeout(t, 300);
    tcase_add_test(t, names_the_fault);
    tcase_add_test(t, clean_answer_names_nothing);
    tcase_add_test(t, bad_arguments);
    suite_add_tcase(s, t);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
