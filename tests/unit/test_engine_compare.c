/*
 * Engine module, comparison: an engine's positions against reference
 * logits whose log-softmax is known by hand (rows of log-probabilities that
 * already sum to one), the KL estimator over the union of the top-k with its
 * substitutions and tail bucket, near-ties, the top-1 tolerance, the mapping
 * of positions to reference rows, and the tolerance presets and specs.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/engine.h"

#define NEAR(x, y, eps) ck_assert_msg(fabs((x) - (y)) <= (eps), "%.17g != %.17g", (double)(x), (double)(y))

/* Reference rows over a vocabulary of 4: row r = log of probs[r]. */
static float *rows_of(const double (*probs)[4], int n)
{
    float *l = malloc((size_t)n * 4 * sizeof *l);
    for (int r = 0; r < n; r++)
        for (int v = 0; v < 4; v++)
            l[r * 4 + v] = (float)log(probs[r][v]);
    return l;
}

static gguf_engine_reply *parse(const char *body)
{
    gguf_engine_reply *r = NULL;
    gguf_error err;
    int rc = gguf_engine_reply_parse(&r, GGUF_EP_COMPLETIONS, body, strlen(body), &err);
    ck_assert_msg(rc == 0, "%s", err.message);
    return r;
}

static gguf_engine_tol tol_default(void)
{
    gguf_engine_tol t;
    ck_assert_int_eq(gguf_engine_tol_preset(&t, "default"), 0);
    return t;
}

START_TEST(identical)
{
    /* prompt [2], generated token 0 with the reference's own numbers */
    static const double p[1][4] = {{0.5, 0.25, 0.125, 0.125}};
    float *l = rows_of(p, 1);
    char body[512];
    snprintf(body, sizeof body,
             "{\"choices\":[{\"logprobs\":{\"content\":[{\"id\":0,\"token\":\"a\",\"logprob\":%.17g,"
             "\"top_logprobs\":[{\"id\":0,\"logprob\":%.17g},{\"id\":1,\"logprob\":%.17g}]}]}}]}",
             log(0.5), log(0.5), log(0.25));
    gguf_engine_reply *r = parse(body);
    gguf_engine_cmp *c;
    gguf_error err;
    const gguf_engine_tol t = tol_default();
    ck_assert_int_eq(gguf_engine_compare(&c, r, 1, l, 1, 4, &t, &err), 0);
    ck_assert_int_eq(c->n_pos, 1);
    ck_assert(c->agree);
    ck_assert_int_eq(c->first_divergent, -1);
    const gguf_engine_cmp_pos *q = &c->pos[0];
    ck_assert_int_eq(q->seq, 1);
    ck_assert(q->top1_agree && !q->tie && q->over == 0);
    NEAR(q->dlogprob, 0, 1e-7);
    NEAR(q->kl, 0, 1e-7);
    NEAR(q->ref_gap, log(2.0), 1e-7);
    ck_assert_int_eq(q->ref_top[0], 0);
    ck_assert_int_eq(q->ref_top[1], 1);
    NEAR(c->top1_agreement, 1, 0);
    gguf_engine_cmp_free(c);
    gguf_engine_reply_free(r);
    free(l);
}
END_TEST

START_TEST(engine_nan)
{
    /* llama-server writes a NaN log-probability as null: the reply parses, and
     * the position diverges whatever the tolerances (an engine computing NaNs
     * is broken), with the chosen token the reference's own */
    static const double p[1][4] = {{0.5, 0.25, 0.125, 0.125}};
    float *l = rows_of(p, 1);
    const char *body = "{\"choices\":[{\"logprobs\":{\"content\":[{\"id\":0,\"token\":\"a\","
                       "\"logprob\":null,\"top_logprobs\":[{\"id\":0,\"logprob\":null},"
                       "{\"id\":1,\"logprob\":null}]}]}}]}";
    gguf_engine_reply *r = parse(body);
    gguf_engine_cmp *c;
    gguf_error err;
    gguf_engine_tol t;
    ck_assert_int_eq(gguf_engine_tol_parse(&t, "quant,dlogprob=off,kl=off", &err), 0);
    ck_assert_int_eq(gguf_engine_compare(&c, r, 1, l, 1, 4, &t, &err), 0);
    ck_assert(!c->agree);
    ck_assert_int_eq(c->first_divergent, 0);
    ck_assert(c->pos[0].over & GGUF_ENG_DLOGPROB);
    ck_assert(isinf(c->max_abs_dlogprob));
    gguf_engine_cmp_free(c);
    gguf_engine_reply_free(r);
    free(l);
}
END_TEST

START_TEST(wrong_token)
{
    /* the engine picks token 1 (0.6) where the reference has token 0 (0.5) */
    static const double p[1][4] = {{0.5, 0.25, 0.125, 0.125}};
    float *l = rows_of(p, 1);
    char body[512];
    snprintf(body, sizeof body,
             "{\"choices\":[{\"logprobs\":{\"content\":[{\"id\":1,\"token\":\"b\",\"logprob\":%.17g,"
             "\"top_logprobs\":[{\"id\":1,\"logprob\":%.17g},{\"id\":0,\"logprob\":%.17g}]}]}}]}",
             log(0.6), log(0.6), log(0.3));
    gguf_engine_reply *r = parse(body);
    gguf_engine_cmp *c;
    gguf_error err;
    const gguf_engine_tol t = tol_default();
    ck_assert_int_eq(gguf_engine_compare(&c, r, 1, l, 1, 4, &t, &err), 0);
    const gguf_engine_cmp_pos *q = &c->pos[0];
    ck_assert(!c->agree);
    ck_assert_int_eq(c->first_divergent, 0);
    ck_assert_int_eq(q->engine_top1, 1);
    ck_assert_int_eq(q->ref_top1, 0);
    ck_assert_uint_eq(q->over, GGUF_ENG_TOP1 | GGUF_ENG_DLOGPROB | GGUF_ENG_KL);
    NEAR(q->dlogprob, log(2.4), 1e-7);       /* |ln .6 - ln .25| */
    NEAR(q->dlogprob_top, log(2.4), 1e-7); /* max(|ln .6 - ln .25|, |ln .3 - ln .5|) */
    /* KL over {0, 1} + tail: .5 ln(.5/.3) + .25 ln(.25/.6) + .25 ln(.25/.1) */
    NEAR(q->kl, 0.2656183105130592, 1e-7);
    NEAR(c->top1_agreement, 0, 0);
    NEAR(c->max_abs_dlogprob, log(2.4), 1e-7);
    gguf_engine_cmp_free(c);
    gguf_engine_reply_free(r);
    free(l);
}
END_TEST

START_TEST(union_substitution)
{
    /* a prompt position (echo): token 3, the engine's top-2 is {0, 2}; the
     * reference's top-2 is {0, 1}: token 1 gets the engine's smallest top-k
     * probability (.125), the prompt token's own logprob is left out of it.
     * p = .5 .125 .125 .25 (sum 1), q = .5 .125 .125 .125 (tail .125):
     * KL = .25 ln(.25/.125) */
    static const double p[2][4] = {{0.5, 0.25, 0.125, 0.125}, {0.25, 0.25, 0.25, 0.25}};
    float *l = rows_of(p, 2);
    char body[512];
    snprintf(body, sizeof body,
             "{\"choices\":[{\"logprobs\":{\"content\":["
             "{\"id\":2,\"token\":\"c\",\"logprob\":null},"
             "{\"id\":3,\"token\":\"d\",\"logprob\":%.17g,\"top_logprobs\":[{\"id\":0,\"logprob\":"
             "%.17g},{\"id\":2,\"logprob\":%.17g}]},"
             "{\"id\":0,\"token\":\"a\",\"logprob\":%.17g}]}}],"
             "\"usage\":{\"completion_tokens\":1}}",
             log(0.125), log(0.5), log(0.125), log(0.5));
    gguf_engine_reply *r = parse(body);
    ck_assert_int_eq(r->n_prompt, 2);
    gguf_engine_cmp *c;
    gguf_error err;
    const gguf_engine_tol t = tol_default();
    /* sequence: [2, 3, 0]: prompt 2 tokens, the generated 0 at index 2 */
    ck_assert_int_eq(gguf_engine_compare(&c, r, 2, l, 2, 4, &t, &err), 0);
    ck_assert_int_eq(c->n_skipped, 1); /* the first token has no row */
    ck_assert_int_eq(c->n_pos, 2);
    const gguf_engine_cmp_pos *q = &c->pos[0];
    ck_assert(q->prompt);
    ck_assert_int_eq(q->seq, 1);
    ck_assert_int_eq(q->index, 1);
    NEAR(q->kl, 0.17328679513998632, 1e-7);
    /* the prompt position (sequence index 1) is row 0; the generated one row 1 */
    NEAR(q->ref_logprob, log(0.125), 1e-7);
    ck_assert_int_eq(c->pos[1].seq, 2);
    NEAR(c->pos[1].ref_logprob, log(0.25), 1e-7);
    gguf_engine_cmp_free(c);
    gguf_engine_reply_free(r);
    free(l);
}
END_TEST

START_TEST(near_tie)
{
    /* reference: tokens 0 and 1 within .01 nats; the engine took 1, its own best by a hair
     * (a greedy engine's choice is the best of its own list) */
    float l[4] = {0.0f, -0.01f, -5.0f, -5.0f};
    double lse = log(exp(0.0) + exp(-0.01) + 2 * exp(-5.0));
    char body[512];
    snprintf(body, sizeof body,
             "{\"choices\":[{\"logprobs\":{\"content\":[{\"id\":1,\"token\":\"b\",\"logprob\":%.17g,"
             "\"top_logprobs\":[{\"id\":1,\"logprob\":%.17g},{\"id\":0,\"logprob\":%.17g}]}]}}]}",
             -lse, -lse, -lse - 0.001);
    gguf_engine_reply *r = parse(body);
    gguf_engine_cmp *c;
    gguf_error err;
    gguf_engine_tol t = tol_default();
    ck_assert_int_eq(gguf_engine_compare(&c, r, 1, l, 1, 4, &t, &err), 0);
    ck_assert(c->pos[0].tie);
    ck_assert(!c->pos[0].top1_agree);
    ck_assert_uint_eq(c->pos[0].over, 0);
    ck_assert(c->agree);
    ck_assert_int_eq(c->n_ties, 1);
    ck_assert_int_eq(c->n_counted, 0);
    gguf_engine_cmp_free(c);
    /* a tie threshold below the gap: the flip counts */
    t.tie = 0.005;
    ck_assert_int_eq(gguf_engine_compare(&c, r, 1, l, 1, 4, &t, &err), 0);
    ck_assert(!c->pos[0].tie);
    ck_assert(!c->agree);
    ck_assert_uint_eq(c->pos[0].over, GGUF_ENG_TOP1);
    gguf_engine_cmp_free(c);
    gguf_engine_reply_free(r);
}
END_TEST

START_TEST(not_greedy_and_unscored)
{
    /* the engine generated token 1 although its own list puts 0 first (a repetition
     * penalty), then a draft token it never scored: the distributions are compared */
    float l[8] = {0.0f, -0.5f, -5.0f, -5.0f, 0.0f, -0.5f, -5.0f, -5.0f};
    double lse = log(exp(0.0) + exp(-0.5) + 2 * exp(-5.0));
    char body[768];
    snprintf(body, sizeof body,
             "{\"completion_probabilities\":[{\"id\":1,\"token\":\"b\",\"logprob\":%.17g,"
             "\"top_logprobs\":[{\"id\":0,\"token\":\"a\",\"logprob\":%.17g},{\"id\":1,"
             "\"token\":\"b\",\"logprob\":%.17g}]},{\"id\":0,\"token\":\"a\",\"logprob\":0,"
             "\"top_logprobs\":[]}]}",
             -0.5 - lse, -lse, -0.5 - lse);
    gguf_engine_reply *r;
    gguf_error err;
    ck_assert_int_eq(gguf_engine_reply_parse(&r, GGUF_EP_COMPLETION, body, strlen(body), &err), 0);
    ck_assert(r->pos[1].unscored);
    gguf_engine_cmp *c;
    gguf_engine_tol t = tol_default();
    ck_assert_int_eq(gguf_engine_compare(&c, r, 1, l, 2, 4, &t, &err), 0);
    ck_assert_int_eq(c->n_not_greedy, 1);
    ck_assert_int_eq(c->pos[0].engine_top1, 0);
    ck_assert(c->pos[0].top1_agree);
    ck_assert_int_eq(c->n_unscored, 1);
    ck_assert_int_eq(c->n_pos, 1);
    ck_assert(c->agree);
    gguf_engine_cmp_free(c);
    gguf_engine_reply_free(r);
}
END_TEST

START_TEST(top1_fraction)
{
    /* four generated positions, the third disagrees (engine logprobs exact) */
    static const double p[4][4] = {{0.5, 0.25, 0.125, 0.125},
                                   {0.5, 0.25, 0.125, 0.125},
                                   {0.5, 0.25, 0.125, 0.125},
                                   {0.5, 0.25, 0.125, 0.125}};
    float *l = rows_of(p, 4);
    char body[1024];
    snprintf(body, sizeof body,
             "{\"choices\":[{\"logprobs\":{\"content\":["
             "{\"id\":0,\"token\":\"a\",\"logprob\":%.17g},{\"id\":0,\"token\":\"a\",\"logprob\":%.17g},"
             "{\"id\":1,\"token\":\"b\",\"logprob\":%.17g},{\"id\":0,\"token\":\"a\",\"logprob\":%.17g}"
             "]}}]}",
             log(0.5), log(0.5), log(0.25), log(0.5));
    gguf_engine_reply *r = parse(body);
    gguf_engine_cmp *c;
    gguf_error err;
    gguf_engine_tol t = tol_default();
    ck_assert_int_eq(gguf_engine_compare(&c, r, 1, l, 4, 4, &t, &err), 0);
    ck_assert(!c->agree);
    ck_assert_int_eq(c->first_divergent, 2);
    NEAR(c->top1_agreement, 0.75, 0);
    ck_assert(isnan(c->pos[2].kl)); /* no alternatives: no KL */
    gguf_engine_cmp_free(c);
    /* 3 of 4 is enough for top1=0.5, and one outlier in four for outliers=0.25: no
     * divergence */
    ck_assert_int_eq(gguf_engine_tol_parse(&t, "top1=0.5,outliers=0.25", &err), 0);
    ck_assert_int_eq(gguf_engine_compare(&c, r, 1, l, 4, 4, &t, &err), 0);
    ck_assert(c->agree);
    ck_assert_int_eq(c->first_divergent, -1);
    ck_assert_uint_eq(c->pos[2].over, GGUF_ENG_TOP1); /* marked all the same */
    gguf_engine_cmp_free(c);
    /* not for top1=0.9: the flip is the first divergence */
    ck_assert_int_eq(gguf_engine_tol_parse(&t, "top1=0.9", &err), 0);
    ck_assert_int_eq(gguf_engine_compare(&c, r, 1, l, 4, 4, &t, &err), 0);
    ck_assert(!c->agree);
    ck_assert_int_eq(c->first_divergent, 2);
    gguf_engine_cmp_free(c);
    /* the rows must cover every position; ids must be known */
    ck_assert_int_eq(gguf_engine_compare(&c, r, 1, l, 3, 4, &t, &err), GGUF_E_INVALID);
    ck_assert(strstr(err.message, "row 3") != NULL);
    r->pos[1].id = -1;
    ck_assert_int_eq(gguf_engine_compare(&c, r, 1, l, 4, 4, &t, &err), GGUF_E_INVALID);
    ck_assert(strstr(err.message, "position 1") != NULL);
    r->pos[1].id = 7;
    ck_assert_int_eq(gguf_engine_compare(&c, r, 1, l, 4, 4, &t, &err), GGUF_E_INVALID);
    ck_assert(strstr(err.message, "outside the vocabulary") != NULL);
    gguf_engine_reply_free(r);
    free(l);
}
END_TEST

START_TEST(clamped_logprobs)
{
    /* vLLM's -9999 for a zero probability: -inf, an infinite difference */
    static const double p[1][4] = {{0.5, 0.25, 0.125, 0.125}};
    float *l = rows_of(p, 1);
    gguf_engine_reply *r = parse("{\"choices\":[{\"logprobs\":{\"content\":[{\"id\":0,\"token\":"
                                 "\"a\",\"logprob\":-9999.0}]}}]}");
    ck_assert(isinf(r->pos[0].logprob));
    gguf_engine_cmp *c;
    gguf_error err;
    const gguf_engine_tol t = tol_default();
    ck_assert_int_eq(gguf_engine_compare(&c, r, 1, l, 1, 4, &t, &err), 0);
    ck_assert(isinf(c->pos[0].dlogprob));
    ck_assert(isinf(c->max_abs_dlogprob));
    ck_assert(!c->agree);
    gguf_engine_cmp_free(c);
    gguf_engine_reply_free(r);
    free(l);
}
END_TEST

START_TEST(tolerances)
{
    gguf_engine_tol t;
    gguf_error err;
    ck_assert_int_eq(gguf_engine_tol_preset(&t, "strict"), 0);
    ck_assert(t.dlogprob < 0.01 && t.top1 == 1);
    ck_assert_int_eq(gguf_engine_tol_preset(&t, "nope"), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_engine_tol_parse(&t, "quant,kl=0.4,tie=off", &err), 0);
    NEAR(t.kl, 0.4, 0);
    ck_assert(t.tie < 0);
    NEAR(t.dlogprob, 2.5, 0);
    ck_assert_int_eq(gguf_engine_tol_parse(&t, "dlogprob=x", &err), GGUF_E_INVALID);
    ck_assert(strstr(err.message, "dlogprob") != NULL);
    /* one grammar with ref-forward compare's --tol: a bare number sets the main bound */
    ck_assert_int_eq(gguf_engine_tol_parse(&t, "bf16,0.2", &err), 0);
    NEAR(t.dlogprob, 0.2, 0);
    NEAR(t.kl, 0.05, 0);
    ck_assert_int_eq(gguf_engine_tol_parse(&t, "-1", &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_engine_tol_parse(&t, "nan", &err), GGUF_E_INVALID);
    /* compare's names are refused with what they mean */
    ck_assert_int_eq(gguf_engine_tol_parse(&t, "rel_l2=1e-3", &err), GGUF_E_INVALID);
    ck_assert(strstr(err.message, "'rel_l2' bounds hidden states (ref-forward compare)") != NULL);
    ck_assert_int_eq(gguf_engine_tol_parse(&t, "top1=1.5", &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_engine_tol_parse(&t, "kl=-1", &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_engine_tol_parse(&t, "speed=3", &err), GGUF_E_INVALID);
    ck_assert(strstr(err.message, "speed") != NULL);
    ck_assert_int_eq(gguf_engine_tol_parse(&t, "fast", &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_engine_tol_parse(&t, NULL, &err), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("engine_compare");
    TCase *t = tcase_create("compare");
    tcase_add_test(t, identical);
    tcase_add_test(t, wrong_token);
    tcase_add_test(t, engine_nan);
    tcase_add_test(t, union_substitution);
    tcase_add_test(t, near_tie);
    tcase_add_test(t, top1_fraction);
    tcase_add_test(t, not_greedy_and_unscored);
    tcase_add_test(t, clamped_logprobs);
    tcase_add_test(t, tolerances);
    suite_add_tcase(s, t);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
