/*
 * Forward ops against values worked out by hand (the comment by each says
 * how), in f64 so that the expected values need no float rounding, plus the
 * f32 rounding rule, thread independence of the matmul, and the routing
 * rules of MoE (softmax / sigmoid, selection bias, groups, norm, scale).
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "forward/forward_ops.h"

#define F64 GGUF_FWD_F64
#define EPS 1e-6

static void near(double got, double want)
{
    ck_assert_msg(fabs(got - want) <= EPS, "got %.9f, want %.9f", got, want);
}

START_TEST(rmsnorm_by_hand)
{
    /* mean of squares of 1,2,3,4 = 30/4 = 7.5; 1/sqrt(7.5) = 0.365148372 */
    const double x[4] = {1, 2, 3, 4};
    const float w[4] = {1, 0.5f, 2, -1};
    double y[4];
    fw_rmsnorm(y, x, w, 4, 0.0, F64);
    near(y[0], 0.365148372);
    near(y[1], 0.365148372);
    near(y[2], 2.190890230); /* 3 * 0.365148372 * 2 */
    near(y[3], -1.460593487);
    /* eps counts: mean 7.5 + 2.5 = 10 -> scale 1/sqrt(10) */
    fw_rmsnorm(y, x, NULL, 4, 2.5, F64);
    near(y[3], 4 / sqrt(10.0));
}
END_TEST

START_TEST(layernorm_by_hand)
{
    /* mean 2.5, variance (2.25+0.25+0.25+2.25)/4 = 1.25 */
    const double x[4] = {1, 2, 3, 4};
    const float b[4] = {1, 1, 1, 1};
    double y[4];
    fw_layernorm(y, x, NULL, b, 4, 0.0, F64);
    near(y[0], 1 - 1.341640786);
    near(y[1], 1 - 0.447213595);
    near(y[3], 1 + 1.341640786);
}
END_TEST

START_TEST(matmul_by_hand)
{
    /* W rows (outputs): [1 2 3], [4 5 6]; x rows (tokens): [1 0 -1], [2 1 0] */
    const float W[6] = {1, 2, 3, 4, 5, 6};
    const float bias[2] = {0.5f, -1};
    const double x[6] = {1, 0, -1, 2, 1, 0};
    double y[4];
    fw_matmul(y, 0, x, 0, W, NULL, 3, 2, 2, 1, F64);
    near(y[0], -2);
    near(y[1], -2);
    near(y[2], 4);
    near(y[3], 13);
    fw_matmul(y, 0, x, 0, W, bias, 3, 2, 2, 1, F64);
    near(y[0], -1.5);
    near(y[3], 12);
}
END_TEST

START_TEST(matmul_threads_same_bits)
{
    enum { NI = 300, NO = 257, NT = 5 };
    float *W = malloc(sizeof(float) * NI * NO);
    double *x = malloc(sizeof(double) * NI * NT), *a = malloc(sizeof(double) * NO * NT),
           *b = malloc(sizeof(double) * NO * NT);
    uint32_t s = 12345;
    for (int i = 0; i < NI * NO; i++) {
        s = s * 1664525u + 1013904223u;
        W[i] = (float)((int)(s >> 8) % 2001 - 1000) / 1000.0f;
    }
    for (int i = 0; i < NI * NT; i++)
        x[i] = sin(i * 0.37);
    fw_matmul(a, 0, x, 0, W, NULL, NI, NO, NT, 1, GGUF_FWD_F32);
    fw_matmul(b, 0, x, 0, W, NULL, NI, NO, NT, 3, GGUF_FWD_F32);
    ck_assert(memcmp(a, b, sizeof(double) * NO * NT) == 0);
    /* f32 mode: every output is a float */
    for (int i = 0; i < NO * NT; i++)
        ck_assert(a[i] == (double)(float)a[i]);
    free(W);
    free(x);
    free(a);
    free(b);
}
END_TEST

/* The documented summation order, written out plainly: four partial sums
 * by i mod 4, the tail into the first, combined as (s0 + s1) + (s2 + s3).
 * Every matmul path (plain C, four tokens at once, AVX2) must give exactly
 * these bits, whatever the token count. */
START_TEST(matmul_summation_order)
{
    enum { NI = 301, NO = 9, NT = 7 };
    float W[NI * NO];
    double x[NI * NT], y[NO * NT];
    for (int i = 0; i < NI * NO; i++)
        W[i] = (float)sin(i * 0.7) * 3.0f;
    for (int i = 0; i < NI * NT; i++)
        x[i] = cos(i * 0.11) / 7.0;
    fw_matmul(y, 0, x, 0, W, NULL, NI, NO, NT, 1, F64);
    for (int t = 0; t < NT; t++)
        for (int o = 0; o < NO; o++) {
            double p[4] = {0, 0, 0, 0};
            int i = 0;
            for (; i + 4 <= NI; i += 4)
                for (int l = 0; l < 4; l++)
                    p[l] += (double)W[o * NI + i + l] * x[t * NI + i + l];
            for (; i < NI; i++)
                p[0] += (double)W[o * NI + i] * x[t * NI + i];
            const double want = (p[0] + p[1]) + (p[2] + p[3]);
            ck_assert_msg(y[t * NO + o] == want, "t %d o %d: %.17g != %.17g", t, o,
                          y[t * NO + o], want);
        }
}
END_TEST

START_TEST(softmax_by_hand)
{
    /* e^-2, e^-1, 1 over their sum 1.503214724 */
    double x[3] = {1, 2, 3};
    fw_softmax(x, 3, F64);
    near(x[0], 0.090030573);
    near(x[1], 0.244728471);
    near(x[2], 0.665240956);
    double m[2] = {-INFINITY, -INFINITY};
    fw_softmax(m, 2, F64);
    ck_assert(m[0] == 0 && m[1] == 0);
}
END_TEST

START_TEST(silu_swiglu_by_hand)
{
    /* silu(1) = 1 / (1 + e^-1) = 0.731058579 */
    near(fw_silu(1), 0.731058579);
    near(fw_silu(0), 0);
    const double g[2] = {1, -2}, u[2] = {2, 3};
    double o[2];
    fw_swiglu(o, g, u, 2, F64);
    near(o[0], 1.462117157);
    near(o[1], 3 * (-2 / (1 + exp(2.0))));
}
END_TEST

START_TEST(rope_adjacent_and_half)
{
    /* n_rot 4, base 10000, pos 1: pair 0 turns by 1 rad, pair 1 by
     * 10000^(-2/4) = 0.01 rad. */
    fw_rope r;
    fw_rope_init(&r, GGUF_ROPE_ADJACENT, 4, 10000);
    double x[4] = {1, 0, 0, 1};
    fw_rope_apply(&r, x, 1, F64);
    near(x[0], cos(1.0));
    near(x[1], sin(1.0));
    near(x[2], -sin(0.01));
    near(x[3], cos(0.01));
    /* half-split: pairs (0,2) and (1,3) */
    fw_rope_init(&r, GGUF_ROPE_HALF, 4, 10000);
    double y[4] = {1, 0, 0, 1};
    fw_rope_apply(&r, y, 1, F64);
    near(y[0], cos(1.0));
    near(y[2], sin(1.0));
    near(y[1], -sin(0.01));
    near(y[3], cos(0.01));
    /* position 0 is the identity; partial rotation leaves the tail alone */
    fw_rope_init(&r, GGUF_ROPE_ADJACENT, 2, 10000);
    double z[4] = {1, 2, 3, 4};
    fw_rope_apply(&r, z, 0, F64);
    near(z[0], 1);
    near(z[1], 2);
    fw_rope_apply(&r, z, 5, F64);
    near(z[2], 3);
    near(z[3], 4);
}
END_TEST

START_TEST(rope_yarn_by_hand)
{
    /* n_rot 4, base 1e4, factor 4, original context 64, betas 32 / 1:
     * corr dim(32) = 4 ln(64/(64 pi)) / (2 ln 1e4) = -0.2486 -> floor -> 0
     * corr dim(1)  = 4 ln(64/(2 pi)) / (2 ln 1e4)  =  0.5040 -> ceil  -> 1
     * pair 0: ramp 1 -> extrapolated (theta = pos); pair 1: ramp 0 ->
     * interpolated (theta = pos * 0.01 / 4). pos 2, mscale 1.5. */
    fw_rope r;
    fw_rope_init_yarn(&r, GGUF_ROPE_ADJACENT, 4, 10000, 4, 64, 32, 1, 1.5);
    near(r.corr_lo, 0);
    near(r.corr_hi, 1);
    double x[4] = {1, 0, 1, 0};
    fw_rope_apply(&r, x, 2, F64);
    near(x[0], 1.5 * cos(2.0));
    near(x[1], 1.5 * sin(2.0));
    near(x[2], 1.5 * cos(0.005));
    near(x[3], 1.5 * sin(0.005));
}
END_TEST

START_TEST(attention_by_hand)
{
    /* q = [1 0], keys [1 0] [0 1] [2 0] -> scores 1 0 2 -> softmax
     * 0.244728 0.090031 0.665241; values 1 2 3 -> 2.420512 */
    const double q[2] = {1, 0}, K[6] = {1, 0, 0, 1, 2, 0}, V[3] = {1, 2, 3};
    double out[1], scr[3];
    fw_attn_head(out, q, K, 2, V, 1, 3, NULL, 2, 1, 1.0, scr, F64);
    near(out[0], 0.244728471 + 2 * 0.090030573 + 3 * 0.665240956);
    /* causal: the first query sees only the first key */
    fw_attn_head(out, q, K, 2, V, 1, 1, NULL, 2, 1, 1.0, scr, F64);
    near(out[0], 1);
    /* selection mask (DSA indexer): keys 0 and 2 -> softmax(1, 2) */
    const uint8_t keep[3] = {1, 0, 1};
    fw_attn_head(out, q, K, 2, V, 1, 3, keep, 2, 1, 1.0, scr, F64);
    near(out[0], 0.268941421 + 3 * 0.731058579);
    /* scale multiplies the scores: 0.5 -> softmax(0.5, 0, 1) */
    fw_attn_head(out, q, K, 2, V, 1, 3, NULL, 2, 1, 0.5, scr, F64);
    const double e0 = exp(0.5), e1 = 1, e2 = exp(1.0), s = e0 + e1 + e2;
    near(out[0], (e0 + 2 * e1 + 3 * e2) / s);
}
END_TEST

START_TEST(topk_ties_and_mask)
{
    const double s[4] = {1, 3, 3, 2};
    int64_t idx[3];
    ck_assert_int_eq(fw_topk(s, NULL, 4, 2, idx), 2);
    ck_assert_int_eq(idx[0], 1);
    ck_assert_int_eq(idx[1], 2);
    const uint8_t keep[4] = {1, 0, 1, 0};
    ck_assert_int_eq(fw_topk(s, keep, 4, 3, idx), 2);
    ck_assert_int_eq(idx[0], 2);
    ck_assert_int_eq(idx[1], 0);
}
END_TEST

/* The rule fw_topk promises, written the slow way: k passes, each taking
 * the best entry not taken yet, the first one seen on a tie. */
static int64_t topk_oracle(const double *s, const uint8_t *keep, int64_t n, int64_t k,
                           int64_t *idx)
{
    uint8_t taken[64] = {0};
    int64_t got = 0;
    for (; got < k; got++) {
        int64_t best = -1;
        for (int64_t i = 0; i < n; i++)
            if ((!keep || keep[i]) && !taken[i] && (best < 0 || s[i] > s[best]))
                best = i;
        if (best < 0)
            break;
        taken[best] = 1;
        idx[got] = best;
    }
    return got;
}

START_TEST(topk_against_passes)
{
    /* scores from a few values (many ties), some masked, -0.0 and +0.0,
     * infinities, and a NaN in some rounds; every k from 1 to n + 1 */
    const double vals[] = {0.5, -1.0, 2.0, 0.0, -0.0, 2.0, INFINITY, -INFINITY, 0.25};
    uint64_t r = 12345;
    for (int round = 0; round < 400; round++) {
        const int64_t n = 1 + round % 40;
        double s[64];
        uint8_t keep[64];
        for (int64_t i = 0; i < n; i++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            s[i] = vals[(r >> 33) % 9];
            keep[i] = (r >> 20) % 5 != 0;
        }
        if (round % 7 == 3)
            s[(r >> 40) % (uint64_t)n] = NAN;
        for (int64_t k = 1; k <= n + 1; k++) {
            int64_t a[65], b[65];
            const uint8_t *kp = round % 2 ? keep : NULL;
            const int64_t ga = fw_topk(s, kp, n, k, a), gb = topk_oracle(s, kp, n, k, b);
            ck_assert_int_eq(ga, gb);
            for (int64_t i = 0; i < ga; i++)
                ck_assert_msg(a[i] == b[i], "round %d n %lld k %lld: position %lld is %lld, "
                              "want %lld", round, (long long)n, (long long)k, (long long)i,
                              (long long)a[i], (long long)b[i]);
        }
    }
}
END_TEST

START_TEST(moe_softmax_norm_scale)
{
    /* logits ln 1..4 -> probabilities 0.1 0.2 0.3 0.4; top 2: experts 3, 2 */
    const double lg[4] = {0, log(2.0), log(3.0), log(4.0)};
    fw_moe_cfg cfg = {4, 2, GGUF_GATING_SOFTMAX, 0, 0, false, 1.0};
    int64_t ids[2];
    double w[2], scr[16];
    fw_moe_route(&cfg, lg, NULL, ids, w, scr, F64);
    ck_assert_int_eq(ids[0], 3);
    ck_assert_int_eq(ids[1], 2);
    near(w[0], 0.4);
    near(w[1], 0.3);
    cfg.norm = true; /* 4/7, 3/7 */
    cfg.scale = 2.0;
    fw_moe_route(&cfg, lg, NULL, ids, w, scr, F64);
    near(w[0], 8.0 / 7);
    near(w[1], 6.0 / 7);
}
END_TEST

START_TEST(moe_sigmoid_bias_groups)
{
    /* logits 0, ln 3, 0, 0 -> sigmoid 0.5 0.75 0.5 0.5; bias .1 0 0 .3 ->
     * selection scores 0.6 0.75 0.5 0.8. */
    const double lg[4] = {0, log(3.0), 0, 0};
    const float bias[4] = {0.1f, 0.0f, 0.0f, 0.3f};
    fw_moe_cfg cfg = {4, 2, GGUF_GATING_SIGMOID, 0, 0, true, 1.0};
    int64_t ids[2];
    double w[2], scr[16];
    /* no groups: experts 3 (0.8) and 1 (0.75); weights are the UNBIASED
     * 0.5 and 0.75, normalised: 0.4 0.6 */
    fw_moe_route(&cfg, lg, bias, ids, w, scr, F64);
    ck_assert_int_eq(ids[0], 3);
    ck_assert_int_eq(ids[1], 1);
    near(w[0], 0.4);
    near(w[1], 0.6);
    /* two groups {0,1} {2,3}, one used: group scores 0.6+0.75 = 1.35 and
     * 0.5+0.8 = 1.3 -> group 0 only, so expert 3 (the best single score)
     * is out: experts 1, 0 with weights 0.75, 0.5 -> 0.6 0.4 -> x2.5 */
    cfg.n_group = 2;
    cfg.n_group_used = 1;
    cfg.scale = 2.5;
    fw_moe_route(&cfg, lg, bias, ids, w, scr, F64);
    ck_assert_int_eq(ids[0], 1);
    ck_assert_int_eq(ids[1], 0);
    near(w[0], 1.5);
    near(w[1], 1.0);
}
END_TEST

START_TEST(f32_rounding)
{
    /* 1/3 is not a float: f32 mode rounds, f64 keeps it */
    double a = 1.0 / 3, b = 1.0 / 3;
    fw_round(&a, 1, GGUF_FWD_F32);
    fw_round(&b, 1, GGUF_FWD_F64);
    ck_assert(a == (double)(1.0f / 3));
    ck_assert(b == 1.0 / 3);
    ck_assert(a != b);
}
END_TEST

static Suite *ops_suite(void)
{
    Suite *s = suite_create("forward_ops");
    TCase *tc = tcase_create("ops");
    tcase_add_test(tc, rmsnorm_by_hand);
    tcase_add_test(tc, layernorm_by_hand);
    tcase_add_test(tc, matmul_by_hand);
    tcase_add_test(tc, matmul_threads_same_bits);
    tcase_add_test(tc, matmul_summation_order);
    tcase_add_test(tc, softmax_by_hand);
    tcase_add_test(tc, silu_swiglu_by_hand);
    tcase_add_test(tc, rope_adjacent_and_half);
    tcase_add_test(tc, rope_yarn_by_hand);
    tcase_add_test(tc, attention_by_hand);
    tcase_add_test(tc, topk_ties_and_mask);
    tcase_add_test(tc, topk_against_passes);
    tcase_add_test(tc, moe_softmax_norm_scale);
    tcase_add_test(tc, moe_sigmoid_bias_groups);
    tcase_add_test(tc, f32_rounding);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(ops_suite());
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
