/*
 * Compare module: metrics against hand-computed values, KL and top-k, expert
 * sets, tolerance defaults and parsing, ordering of the first divergence
 * (layer, then op order, then rank), and records that cannot be compared.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/compare.h"
#include "gguf/record.h"
#include "helper_buf.h"

#define NEAR(x, y, eps) ck_assert_msg(fabs((x) - (y)) <= (eps), "%.17g != %.17g", (double)(x), (double)(y))

static char *tdir;
static void setup(void) { tdir = th_mkdtemp(); }
static void teardown(void)
{
    th_rmdir(tdir);
    free(tdir);
}

/* ---- metrics ---- */

START_TEST(generic_metrics)
{
    gguf_cmp_entry e;
    const float a[2] = {3, 4}, b[2] = {3, 5};
    gguf_cmp_arrays(&e, GGUF_CMP_KIND_TENSOR, a, b, 1, 2, NULL, NULL);
    NEAR(e.rel_l2, 0.2, 1e-15);            /* |(0,1)| / |(3,4)| = 1/5 */
    NEAR(e.max_abs, 1.0, 0);
    ck_assert_int_eq(e.max_abs_col, 1);
    NEAR(e.cosine, 29.0 / (5.0 * sqrt(34.0)), 1e-15); /* (9+20)/(5*sqrt(9+25)) */
    NEAR(e.norm_a, 5, 1e-15);
    ck_assert_int_eq(e.n_elements, 2);

    /* Two rows: the max is found in the second row. */
    const float c[4] = {1, 1, 1, 1}, d[4] = {1, 1, 1, -1};
    gguf_cmp_arrays(&e, GGUF_CMP_KIND_TENSOR, c, d, 2, 2, NULL, NULL);
    NEAR(e.rel_l2, 1.0, 1e-15);            /* |(0,0,0,2)| / 2 */
    NEAR(e.cosine, 0.5, 1e-15);            /* (1+1+1-1)/4 */
    ck_assert_int_eq(e.max_abs_row, 1);
    ck_assert_int_eq(e.max_abs_col, 1);
    NEAR(e.max_abs, 2, 0);
}
END_TEST

START_TEST(zero_and_nonfinite)
{
    gguf_cmp_entry e;
    const float z[3] = {0, 0, 0}, one[3] = {0, 1, 0};
    gguf_cmp_arrays(&e, GGUF_CMP_KIND_TENSOR, z, z, 1, 3, NULL, NULL);
    ck_assert(e.rel_l2 == 0 && e.cosine == 1 && e.max_abs == 0);
    gguf_cmp_arrays(&e, GGUF_CMP_KIND_TENSOR, z, one, 1, 3, NULL, NULL);
    ck_assert(isinf(e.rel_l2) && e.cosine == 0);
    gguf_tol t;
    gguf_tol_default(&t, "f32", "f32", NULL);
    ck_assert(gguf_cmp_check(&e, &t) & GGUF_CMP_REL_L2);

    const float a[3] = {1, 2, 3}, nb[3] = {1, NAN, 3};
    gguf_cmp_arrays(&e, GGUF_CMP_KIND_TENSOR, a, nb, 1, 3, NULL, NULL);
    ck_assert_int_eq(e.nonfinite_b, 1);
    ck_assert(isnan(e.rel_l2));
    ck_assert(isnan(e.max_abs));
    ck_assert_int_eq(e.max_abs_col, 1);
    uint32_t o = gguf_cmp_check(&e, &t);
    ck_assert(o & GGUF_CMP_NONFINITE);
    ck_assert(o & GGUF_CMP_REL_L2);   /* NaN is over any bound */
    ck_assert(o & GGUF_CMP_COSINE);
    /* With every bound off, NaN in B still counts. */
    gguf_tol off = {-1, -1, -1, -1, -1, -1, -1};
    ck_assert_uint_eq(gguf_cmp_check(&e, &off), GGUF_CMP_NONFINITE);
    const float ib[3] = {1, INFINITY, 3};
    gguf_cmp_arrays(&e, GGUF_CMP_KIND_TENSOR, a, ib, 1, 3, NULL, NULL);
    ck_assert(isinf(e.max_abs));
    ck_assert_int_eq(e.nonfinite_b, 1);
}
END_TEST

START_TEST(logits_kl_top)
{
    gguf_cmp_entry e;
    /* p = softmax(0, 0) = (1/2, 1/2); q = softmax(ln 3, 0) = (3/4, 1/4).
     * KL(p||q) = 1/2 ln(2/3) + 1/2 ln 2 = 1/2 ln(4/3). */
    const float a[2] = {0, 0}, b[2] = {(float)log(3.0), 0};
    gguf_cmp_arrays(&e, GGUF_CMP_KIND_LOGITS, a, b, 1, 2, NULL, NULL);
    NEAR(e.kl, 0.5 * log(4.0 / 3.0), 1e-7);
    NEAR(e.kl_max, e.kl, 0);
    NEAR(e.top1, 1.0, 0);                  /* tie in A: either choice agrees */
    NEAR(e.top5, 1.0, 0);                  /* k = 2 = n_vocab: same set */

    /* Identical rows: KL exactly 0. Shifting all logits changes nothing either. */
    const float s[3] = {1, 2, 3}, t[3] = {11, 12, 13};
    gguf_cmp_arrays(&e, GGUF_CMP_KIND_LOGITS, s, t, 1, 3, NULL, NULL);
    NEAR(e.kl, 0, 1e-12);

    /* Three tokens of 7: top-1 differs on token 1; top-5 sets share 4 of 5 on token 2. */
    const float la[21] = {
        9, 1, 2, 3, 4, 5, 0,       /* top1 0; top5 {0,5,4,3,2} */
        1, 9, 2, 3, 4, 5, 0,       /* top1 1 */
        9, 8, 7, 6, 5, 0, 1,       /* top5 {0,1,2,3,4} */
    };
    const float lb[21] = {
        9, 1, 2, 3, 4, 5, 0,       /* same */
        1, 2, 9, 3, 4, 5, 0,       /* top1 2: disagrees (A's gap is 7) */
        9, 8, 7, 6, 0, 5, 1,       /* top5 {0,1,2,3,5}: 4 of 5 */
    };
    gguf_cmp_arrays(&e, GGUF_CMP_KIND_LOGITS, la, lb, 3, 7, NULL, NULL);
    NEAR(e.top1, 2.0 / 3.0, 1e-15);
    NEAR(e.top5, (1.0 + 1.0 + 0.8) / 3.0, 1e-15);   /* token 1: {1,5,4,3,2} both */
    ck_assert(e.kl > 0);
    ck_assert(e.kl_max >= e.kl);
    ck_assert(e.kl_max_row == 1 || e.kl_max_row == 2);
    gguf_tol tol;
    gguf_tol_default(&tol, "f32", "f32", NULL);
    tol.top5 = 0.95; /* the f32 default, 0.9, lets one swap in three tokens pass */
    uint32_t o = gguf_cmp_check(&e, &tol);
    ck_assert(o & GGUF_CMP_TOP1);
    ck_assert(o & GGUF_CMP_TOP5);
    ck_assert(o & GGUF_CMP_KL);

    /* KL by hand on one row of three: p = softmax(1,2,3), q = softmax(3,2,1). */
    const float p3[3] = {1, 2, 3}, q3[3] = {3, 2, 1};
    double z = exp(1) + exp(2) + exp(3), kl = 0;
    for (int i = 0; i < 3; i++) {
        double p = exp(p3[i]) / z, q = exp(q3[i]) / z;
        kl += p * log(p / q);
    }
    gguf_cmp_arrays(&e, GGUF_CMP_KIND_LOGITS, p3, q3, 1, 3, NULL, NULL);
    NEAR(e.kl, kl, 1e-12);
    NEAR(e.top1, 0, 0);
}
END_TEST

START_TEST(expert_sets)
{
    gguf_cmp_entry e;
    const float a[6] = {1, 2, 3, 4, 7, 0}, b[6] = {2, 1, 3, 5, 0, 7};
    gguf_cmp_arrays(&e, GGUF_CMP_KIND_EXPERTS, a, b, 3, 2, NULL, NULL);
    NEAR(e.experts, 2.0 / 3.0, 1e-15);     /* rows 0 and 2 are the same sets */
    ck_assert_int_eq(e.experts_first_row, 1);
    gguf_tol t;
    gguf_tol_default(&t, "f64", "f64", NULL);
    ck_assert_uint_eq(gguf_cmp_check(&e, &t), GGUF_CMP_EXPERTS);

    /* Weights paired by expert id: a swapped order is no difference. */
    const float ia[2] = {1, 2}, ib[2] = {2, 1}, wa[2] = {0.7f, 0.3f}, wb[2] = {0.3f, 0.7f};
    gguf_cmp_arrays(&e, GGUF_CMP_KIND_WEIGHTS, wa, wb, 1, 2, ia, ib);
    NEAR(e.rel_l2, 0, 0);
    /* Expert 2 replaced by 5: weights (0.7, 0.3, 0) against (0.7, 0, 0.3). */
    const float ic[2] = {1, 5}, wc[2] = {0.7f, 0.3f};
    gguf_cmp_arrays(&e, GGUF_CMP_KIND_WEIGHTS, wa, wc, 1, 2, ia, ic);
    NEAR(e.rel_l2, sqrt(0.09 + 0.09) / sqrt(0.49 + 0.09), 1e-6);
    NEAR(e.experts, 0, 0);
}
END_TEST

START_TEST(tolerances)
{
    gguf_tol t;
    char origin[64];
    gguf_tol_default(&t, "f32", "f64", origin);
    NEAR(t.rel_l2, 1e-4, 0);
    ck_assert_str_eq(origin, "default f32 vs f64");
    ck_assert(t.max_abs < 0);
    gguf_tol_default(&t, "f64", "f64", origin);
    NEAR(t.rel_l2, 1e-6, 0);
    gguf_tol_default(&t, "bf16", "f64", origin);
    NEAR(t.rel_l2, 5e-2, 0);
    ck_assert_str_eq(origin, "default bf16 vs f64");
    gguf_tol_default(&t, "", NULL, origin);
    NEAR(t.rel_l2, 1e-4, 0);

    gguf_error err;
    ck_assert_int_eq(gguf_tol_parse(&t, "1e-3", &err), 0);
    NEAR(t.rel_l2, 1e-3, 0);
    ck_assert_int_eq(gguf_tol_parse(&t, "kl=0.5,top1=off,max_abs=2", &err), 0);
    NEAR(t.kl, 0.5, 0);
    ck_assert(t.top1 < 0);
    NEAR(t.max_abs, 2, 0);
    NEAR(t.rel_l2, 1e-3, 0);
    ck_assert_int_eq(gguf_tol_parse(&t, "foo=1", &err), GGUF_E_INVALID);
    ck_assert(strstr(err.message, "unknown name 'foo'") != NULL);
    /* check-engine's names are refused with what they mean */
    ck_assert_int_eq(gguf_tol_parse(&t, "dlogprob=0.1", &err), GGUF_E_INVALID);
    ck_assert(strstr(err.message, "'dlogprob' bounds an engine's logprobs (check-engine)") != NULL);
    ck_assert_int_eq(gguf_tol_parse(&t, "rel_l2=-1", &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_tol_parse(&t, "cosine=2", &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_tol_parse(&t, "rel_l2=abc", &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_tol_parse(&t, "", &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_tol_parse(&t, "kl=1,,", &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_tol_parse(&t, "rel_l2=nan", &err), GGUF_E_INVALID);

    /* Bounds are inclusive. */
    gguf_cmp_entry e = {.kind = GGUF_CMP_KIND_TENSOR, .rel_l2 = 1e-4, .cosine = 1, .max_abs = 0};
    gguf_tol_default(&t, "f32", "f32", NULL);
    ck_assert_uint_eq(gguf_cmp_check(&e, &t), 0);
    e.rel_l2 = 1.0001e-4;
    ck_assert_uint_eq(gguf_cmp_check(&e, &t), GGUF_CMP_REL_L2);
    t.max_abs = 0.5;
    e.max_abs = 0.6;
    ck_assert_uint_eq(gguf_cmp_check(&e, &t), GGUF_CMP_REL_L2 | GGUF_CMP_MAX_ABS);
}
END_TEST

/* ---- records ---- */

typedef struct cap_spec {
    const char *point;
    uint32_t rank;
    int64_t cols, rows;
    float bias;   /* added to the base values: 0 = same as the reference */
} cap_spec;

static const int32_t toks[2] = {5, 6};

static char *make_record(const char *name, uint32_t ranks, const char *digest,
                         const int32_t *tk, uint64_t ntk, const cap_spec *caps, int n)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", tdir, name);
    gguf_record_meta m = {.model_digest = digest, .tokens = tk, .n_tokens = ntk,
                          .backend = "cpu", .precision = "f32", .tp = ranks};
    gguf_record_opts o = {.no_sync = true};
    gguf_record_writer *w;
    gguf_error err;
    ck_assert_msg(gguf_record_writer_create(&w, path, &m, &o, &err) == 0, "%s", err.message);
    for (int i = 0; i < n; i++) {
        int64_t k = caps[i].cols * caps[i].rows;
        float *d = malloc((size_t)k * sizeof *d);
        for (int64_t j = 0; j < k; j++)
            d[j] = (float)(j % 7) - 3.0f + (j == 1 ? caps[i].bias : 0);
        int64_t ne[2] = {caps[i].cols, caps[i].rows};
        ck_assert_msg(gguf_record_add(w, caps[i].point, caps[i].rank, 2, ne, d, &err) == 0, "%s",
                      err.message);
        free(d);
    }
    ck_assert_int_eq(gguf_record_writer_finish(w, &err), 0);
    gguf_record_writer_free(w);
    return path;
}

static gguf_record *open_rec(const char *path)
{
    gguf_record *r;
    gguf_error err;
    ck_assert_msg(gguf_record_open(&r, path, &err) == 0, "%s", err.message);
    return r;
}

#define DIG "00000000000000000000000000000001"

/* Reference: token_embd, blk.0..blk.10 (written out of order), output_norm, logits. */
static const cap_spec ref[] = {
    {"token_embd", 0, 8, 2, 0},
    {"blk.10.attn_out", 0, 8, 2, 0}, {"blk.10.ffn_out", 0, 8, 2, 0},
    {"blk.0.attn_out", 0, 8, 2, 0},  {"blk.0.ffn_out", 0, 8, 2, 0},
    {"blk.2.attn_out", 0, 8, 2, 0},  {"blk.2.ffn_out", 0, 8, 2, 0},
    {"output_norm", 0, 8, 2, 0},     {"logits", 0, 16, 2, 0},
};

START_TEST(identical_records)
{
    gguf_record *a = open_rec(make_record("a.gguf", 1, DIG, toks, 2, ref, 9));
    gguf_record *b = open_rec(make_record("b.gguf", 1, DIG, toks, 2, ref, 9));
    gguf_cmp_result *res;
    gguf_error err;
    ck_assert_msg(gguf_compare(&res, a, b, NULL, &err) == 0, "%s", err.message);
    ck_assert_int_eq(res->n_entries, 9);
    ck_assert_int_eq(res->first, -1);
    ck_assert_int_eq(res->n_over, 0);
    ck_assert_str_eq(res->tol_origin, "default f32 vs f32");
    /* Sorted: token_embd, blk.0 x2, blk.2 x2, blk.10 x2, output_norm, logits. */
    const char *order[9] = {"token_embd", "blk.0.attn_out", "blk.0.ffn_out", "blk.2.attn_out",
                            "blk.2.ffn_out", "blk.10.attn_out", "blk.10.ffn_out", "output_norm",
                            "logits"};
    for (int i = 0; i < 9; i++)
        ck_assert_str_eq(res->entries[i].point, order[i]);
    ck_assert_uint_eq(res->entries[8].kind, GGUF_CMP_KIND_LOGITS);
    ck_assert(res->entries[8].kl == 0 && res->entries[8].top1 == 1);
    gguf_cmp_result_free(res);
    gguf_record_free(a);
    gguf_record_free(b);
}
END_TEST

START_TEST(first_divergence_order)
{
    /* B: two ranks against the single-rank A. Divergences (all big): blk.10.attn_out rank 0
     * (earlier in the file, later layer), blk.2.ffn_out rank 0, blk.2.attn_out rank 1,
     * logits on both ranks. The first is blk.2.attn_out rank 1: layer 2 before layer 10,
     * and attn_out ran before ffn_out in A. B's own order is scrambled on purpose. */
    cap_spec bs[18];
    int n = 0;
    for (int r = 1; r >= 0; r--)
        for (int i = 8; i >= 0; i--) {
            bs[n] = ref[i];
            bs[n].rank = (uint32_t)r;
            if ((r == 0 && !strcmp(ref[i].point, "blk.10.attn_out")) ||
                (r == 0 && !strcmp(ref[i].point, "blk.2.ffn_out")) ||
                (r == 1 && !strcmp(ref[i].point, "blk.2.attn_out")) ||
                !strcmp(ref[i].point, "logits"))
                bs[n].bias = 50;
            n++;
        }
    gguf_record *a = open_rec(make_record("a.gguf", 1, DIG, toks, 2, ref, 9));
    gguf_record *b = open_rec(make_record("b.gguf", 2, DIG, toks, 2, bs, 18));
    gguf_cmp_result *res;
    gguf_error err;
    ck_assert_int_eq(gguf_compare(&res, a, b, NULL, &err), GGUF_E_MISMATCH);
    ck_assert_int_eq(res->n_entries, 18);
    ck_assert_int_eq(res->n_over, 5);
    ck_assert_uint_eq(res->ranks, 2);
    const gguf_cmp_entry *f = &res->entries[res->first];
    ck_assert_str_eq(f->point, "blk.2.attn_out");
    ck_assert_int_eq(f->layer, 2);
    ck_assert_str_eq(f->op, "attn_out");
    ck_assert_uint_eq(f->rank, 1);
    ck_assert(f->over & GGUF_CMP_REL_L2);
    ck_assert_int_eq(f->max_abs_col, 1);
    ck_assert_int_eq(f->max_abs_row, 0);
    NEAR(f->max_abs, 50, 1e-6);
    ck_assert_msg(strstr(err.message, "first divergence at blk.2.attn_out (layer 2, op attn_out, "
                                      "rank 1)") != NULL, "%s", err.message);
    ck_assert(strstr(err.message, "b.gguf") != NULL);
    /* Entries of one point are rank-ordered. */
    ck_assert_str_eq(res->entries[res->first - 1].point, "blk.2.attn_out");
    ck_assert_uint_eq(res->entries[res->first - 1].rank, 0);
    ck_assert_uint_eq(res->entries[res->first - 1].over, 0);
    gguf_cmp_result_free(res);

    /* A looser bound lets it pass; KL, top-1 and top-5 still flag the logits. */
    gguf_tol t;
    gguf_tol_default(&t, "f32", "f32", NULL);
    t.rel_l2 = 100;
    t.cosine = -1;
    gguf_cmp_opts o = {.tol = &t};
    ck_assert_int_eq(gguf_compare(&res, a, b, &o, &err), GGUF_E_MISMATCH);
    ck_assert_str_eq(res->entries[res->first].point, "logits");
    ck_assert_str_eq(res->tol_origin, "given");
    ck_assert_int_eq(res->n_over, 2);
    gguf_cmp_result_free(res);
    gguf_record_free(a);
    gguf_record_free(b);
}
END_TEST

START_TEST(not_comparable)
{
    gguf_record *a = open_rec(make_record("a.gguf", 1, DIG, toks, 2, ref, 9));
    gguf_cmp_result *res = (gguf_cmp_result *)1;
    gguf_error err;
    gguf_record *b;

    /* Missing capture. */
    b = open_rec(make_record("m.gguf", 1, DIG, toks, 2, ref, 8));
    ck_assert_int_eq(gguf_compare(&res, a, b, NULL, &err), GGUF_E_NOT_FOUND);
    ck_assert_ptr_null(res);
    ck_assert_msg(strstr(err.message, "m.gguf: capture 'logits' rank 0: missing") != NULL, "%s",
                  err.message);
    /* With GGUF_CMP_COMMON the missing point is skipped and counted. */
    gguf_cmp_opts common = {.flags = GGUF_CMP_COMMON};
    ck_assert_int_eq(gguf_compare(&res, a, b, &common, &err), 0);
    ck_assert_int_eq(res->missing_in_b, 1);
    ck_assert_int_eq(res->n_entries, 8);
    gguf_cmp_result_free(res);
    /* The other way round: extra captures of B are counted, not compared. */
    gguf_record *a8 = b;
    ck_assert_int_eq(gguf_compare(&res, a8, a, NULL, &err), 0);
    ck_assert_int_eq(res->extra_in_b, 1);
    gguf_cmp_result_free(res);
    gguf_record_free(a8);

    /* Shape mismatch. */
    cap_spec s[9];
    memcpy(s, ref, sizeof s);
    s[5].cols = 4;
    b = open_rec(make_record("s.gguf", 1, DIG, toks, 2, s, 9));
    ck_assert_int_eq(gguf_compare(&res, a, b, NULL, &err), GGUF_E_BAD_SHAPE);
    ck_assert_msg(strstr(err.message, "'blk.2.attn_out' rank 0: shape [4, 2], but") != NULL,
                  "%s", err.message);
    gguf_record_free(b);

    /* Another model; allowed on request. */
    b = open_rec(make_record("d.gguf", 1, "00000000000000000000000000000002", toks, 2, ref, 9));
    ck_assert_int_eq(gguf_compare(&res, a, b, NULL, &err), GGUF_E_BAD_VALUE);
    ck_assert(strstr(err.message, "different models") != NULL);
    gguf_cmp_opts o = {.flags = GGUF_CMP_ANY_MODEL};
    ck_assert_int_eq(gguf_compare(&res, a, b, &o, &err), 0);
    gguf_cmp_result_free(res);
    gguf_record_free(b);

    /* Other tokens. */
    const int32_t t3[3] = {5, 6, 7};
    b = open_rec(make_record("t.gguf", 1, DIG, t3, 3, ref, 9));
    ck_assert_int_eq(gguf_compare(&res, a, b, NULL, &err), GGUF_E_BAD_VALUE);
    ck_assert(strstr(err.message, "different inputs") != NULL);
    o.flags = GGUF_CMP_ANY_TOKENS;
    ck_assert_int_eq(gguf_compare(&res, a, b, &o, &err), 0);
    gguf_cmp_result_free(res);
    gguf_record_free(b);

    /* Ranks that cannot be paired: 2 against 3. */
    cap_spec r2[2] = {{"logits", 0, 4, 1, 0}, {"logits", 1, 4, 1, 0}};
    cap_spec r3[3] = {{"logits", 0, 4, 1, 0}, {"logits", 1, 4, 1, 0}, {"logits", 2, 4, 1, 0}};
    gguf_record *x = open_rec(make_record("r2.gguf", 2, DIG, toks, 2, r2, 2));
    gguf_record *y = open_rec(make_record("r3.gguf", 3, DIG, toks, 2, r3, 3));
    ck_assert_int_eq(gguf_compare(&res, x, y, NULL, &err), GGUF_E_BAD_VALUE);
    ck_assert(strstr(err.message, "cannot be paired") != NULL);
    /* A multi-rank reference that lacks a rank. */
    gguf_record *one = open_rec(make_record("r1.gguf", 1, DIG, toks, 2, r2, 1));
    ck_assert_int_eq(gguf_compare(&res, x, one, NULL, &err), 0);
    gguf_cmp_result_free(res);
    gguf_record_free(one);
    gguf_record *y2 = open_rec(make_record("r3b.gguf", 3, DIG, toks, 2, r3, 2));
    ck_assert_int_eq(gguf_compare(&res, y2, y, NULL, &err), GGUF_E_NOT_FOUND);
    ck_assert_msg(strstr(err.message, "r3b.gguf: capture 'logits' rank 2: missing") != NULL,
                  "%s", err.message);
    gguf_record_free(y2);
    gguf_record_free(x);
    gguf_record_free(y);

    /* Nothing in common, even with GGUF_CMP_COMMON. */
    cap_spec other[1] = {{"blk.0.something_else", 0, 8, 2, 0}};
    b = open_rec(make_record("o.gguf", 1, DIG, toks, 2, other, 1));
    gguf_cmp_opts co = {.flags = GGUF_CMP_COMMON};
    ck_assert_int_eq(gguf_compare(&res, a, b, &co, &err), GGUF_E_NOT_FOUND);
    ck_assert(strstr(err.message, "no capture point in common") != NULL);
    gguf_record_free(b);

    /* No captures at all. */
    b = open_rec(make_record("e.gguf", 1, DIG, toks, 2, ref, 0));
    ck_assert_int_eq(gguf_compare(&res, b, a, NULL, &err), GGUF_E_NOT_FOUND);
    gguf_record_free(b);
    gguf_record_free(a);
}
END_TEST

START_TEST(router_records)
{
    /* Router captures compare as sets; weights pair by expert id. */
    gguf_record_meta m = {.model_digest = DIG, .tokens = toks, .n_tokens = 2,
                          .precision = "f64"};
    gguf_record_opts o = {.no_sync = true};
    const float ea[4] = {3, 1, 0, 2}, eb[4] = {1, 3, 2, 0}, ec[4] = {1, 3, 2, 5};
    const float wa[4] = {0.6f, 0.4f, 0.5f, 0.5f}, wb[4] = {0.4f, 0.6f, 0.5f, 0.5f};
    int64_t ne[2] = {2, 2};
    const float *sets[3] = {ea, eb, ec}, *ws[3] = {wa, wb, wb};
    gguf_record *r[3];
    for (int k = 0; k < 3; k++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/moe%d.gguf", tdir, k);
        gguf_record_writer *w;
        gguf_error err;
        ck_assert_int_eq(gguf_record_writer_create(&w, path, &m, &o, &err), 0);
        ck_assert_int_eq(gguf_record_add(w, "blk.1.moe_experts", 0, 2, ne, sets[k], &err), 0);
        ck_assert_int_eq(gguf_record_add(w, "blk.1.moe_weights", 0, 2, ne, ws[k], &err), 0);
        ck_assert_int_eq(gguf_record_writer_finish(w, &err), 0);
        gguf_record_writer_free(w);
        r[k] = open_rec(path);
    }
    gguf_cmp_result *res;
    gguf_error err;
    ck_assert_msg(gguf_compare(&res, r[0], r[1], NULL, &err) == 0, "%s", err.message);
    ck_assert_uint_eq(res->entries[0].kind, GGUF_CMP_KIND_EXPERTS);
    ck_assert_uint_eq(res->entries[1].kind, GGUF_CMP_KIND_WEIGHTS);
    NEAR(res->entries[1].rel_l2, 0, 0);
    ck_assert_str_eq(res->tol_origin, "default f64 vs f64");
    gguf_cmp_result_free(res);
    ck_assert_int_eq(gguf_compare(&res, r[0], r[2], NULL, &err), GGUF_E_MISMATCH);
    const gguf_cmp_entry *f = &res->entries[res->first];
    ck_assert_str_eq(f->point, "blk.1.moe_experts");
    ck_assert_uint_eq(f->over, GGUF_CMP_EXPERTS);
    NEAR(f->experts, 0.5, 0);
    ck_assert_int_eq(f->experts_first_row, 1);
    ck_assert(strstr(err.message, "experts 0.5") != NULL);
    gguf_cmp_result_free(res);
    for (int k = 0; k < 3; k++)
        gguf_record_free(r[k]);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("compare");
    TCase *t = tcase_create("metrics");
    tcase_add_test(t, generic_metrics);
    tcase_add_test(t, zero_and_nonfinite);
    tcase_add_test(t, logits_kl_top);
    tcase_add_test(t, expert_sets);
    tcase_add_test(t, tolerances);
    suite_add_tcase(s, t);
    TCase *r = tcase_create("records");
    tcase_add_checked_fixture(r, setup, teardown);
    tcase_add_test(r, identical_records);
    tcase_add_test(r, first_divergence_order);
    tcase_add_test(r, not_comparable);
    tcase_add_test(r, router_records);
    suite_add_tcase(s, r);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
