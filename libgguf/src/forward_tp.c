/* Virtual tensor parallel on the CPU: tp ranks computed one after the other,
 * each with only the weights the shard plan gives it (gguf_shard_materialize)
 * and with the engine's collectives simulated exactly:
 *
 *   embedding   vocab-parallel: rank r looks up the ids of its vocab range
 *               (zeros elsewhere), all-reduce (sum);
 *   attention   q/k/v (or MLA q_b, kv_b) by heads: each rank attends with its
 *               heads; the out projection is row-parallel: partial sums,
 *               all-reduced when the plan says reduce_sum;
 *   FFN         gate/up column-parallel, down row-parallel + all-reduce;
 *   MoE         router replicated; each rank runs the experts it owns (expert
 *               parallel) with its slice of their intermediate (moe tp); the
 *               partial outputs are combined by all-reduce;
 *   head        vocab-parallel logits, all-gathered in rank order and cut to
 *               n_vocab.
 *
 * Every rank keeps its own residual stream, KV cache and captures (rank r),
 * so a plan that breaks the math on one rank shows up on that rank, at the op
 * where it happens. Shapes a rank works with (its heads, its FFN width) come
 * from its slices, as an engine's would; the engine settings a fault may
 * change (RoPE pairs, softmax scale, routing) come from the plan's runtime.
 * The glm-dsa indexer is replicated on every rank (no plan slices it): it
 * is computed from the stored tensors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error_internal.h"
#include "forward_internal.h"

typedef struct fw_tp_cache {
    double *k, *v, *idx_k; /* per rank and layer; widths in kw, vw */
    int64_t kw, vw;
} fw_tp_cache;

struct fw_tp_state {
    fw_tp_cache *cache; /* [tp][n_layer] */
    int64_t cap;
    double **x;         /* residual per rank [n][E] */
};

/* A rank's weight: the plan's slice materialized as F32. */
typedef struct tpw {
    float *f;
    int64_t ne[4];
    int64_t n;
    const gguf_shard_tensor *e;
} tpw;

static void tpw_free(tpw *w)
{
    free(w->f);
    memset(w, 0, sizeof *w);
}

static int tp_get(gguf_fwd_ctx *c, int64_t il, gguf_role role, int r, tpw *w, gguf_error *err)
{
    memset(w, 0, sizeof *w);
    const gguf_shard_tensor *e = gguf_shard_plan_get(c->plan, il, role);
    if (!e)
        return 0;
    int64_t idx = e - gguf_shard_plan_at(c->plan, 0);
    if (idx < 0 || idx >= gguf_shard_plan_count(c->plan) || gguf_shard_plan_at(c->plan, idx) != e) {
        for (idx = 0; idx < gguf_shard_plan_count(c->plan); idx++)
            if (gguf_shard_plan_at(c->plan, idx) == e)
                break;
    }
    const gguf_shard_slice *s = &e->ranks[r];
    int64_t n = 1;
    for (int d = 0; d < 4; d++) {
        w->ne[d] = s->ne[d] > 0 ? s->ne[d] : 1;
        n *= w->ne[d];
    }
    w->f = malloc((size_t)n * sizeof(float) + 4);
    if (!w->f)
        return fw_nomem(err, e->name);
    int rc = gguf_shard_materialize(c->plan, idx, r, w->f, (size_t)n, err);
    if (rc) {
        free(w->f);
        w->f = NULL;
        return rc;
    }
    w->n = n;
    w->e = e;
    c->st.weight_bytes += s->bytes;
    c->st.dequant_floats += (uint64_t)n;
    return 0;
}

/* A vector weight of length want: the slice, zero-filled or cut. */
static float *fitv(const tpw *w, int64_t want)
{
    float *v = calloc((size_t)(want > 0 ? want : 1), sizeof(float));
    if (v && w->f)
        memcpy(v, w->f, (size_t)(w->n < want ? w->n : want) * sizeof(float));
    return v;
}

/* y [n][n_out] = x [n][xw] . W^T with W ne = [n_in, n_out]; when the widths
 * disagree (a broken plan), the common part is used. bias may be NULL. */
static int tp_mm(gguf_fwd_ctx *c, double *y, int64_t ys, const double *x, int64_t xw,
                 const tpw *w, const tpw *bias, int64_t n, gguf_error *err)
{
    const int64_t n_in = w->ne[0], n_out = w->ne[1] * w->ne[2] * w->ne[3];
    float *b = bias && bias->f ? fitv(bias, n_out) : NULL;
    const double *xx = x;
    double *tmp = NULL;
    if (xw != n_in) {
        tmp = fw_xcalloc((size_t)(n * n_in), sizeof(double));
        if (!tmp) {
            free(b);
            return fw_nomem(err, "tp matmul");
        }
        for (int64_t t = 0; t < n; t++)
            memcpy(tmp + t * n_in, x + t * xw, (size_t)(xw < n_in ? xw : n_in) * sizeof(double));
        xx = tmp;
    }
    fw_matmul(y, ys ? ys : n_out, xx, n_in, w->f, b, n_in, n_out, n, c->o.n_threads, c->prec);
    free(tmp);
    free(b);
    return 0;
}

static int tp_norm(gguf_fwd_ctx *c, double *y, const double *x, int64_t n, int64_t width,
                   int64_t stride, const tpw *w, gguf_error *err)
{
    float *wf = w->f ? fitv(w, width) : NULL;
    if (w->f && !wf)
        return fw_nomem(err, "norm");
    for (int64_t t = 0; t < n; t++)
        fw_rmsnorm(y + t * stride, x + t * stride, wf, width, c->hp->rms_eps, c->prec);
    free(wf);
    return 0;
}

static int grow(double **p, int64_t cap, int64_t w, gguf_error *err)
{
    double *q = realloc(*p, (size_t)(cap * (w > 0 ? w : 1)) * sizeof(double) + 8);
    if (!q)
        return fw_nomem(err, "tp cache");
    *p = q;
    return 0;
}

static int tp_cache_reserve(gguf_fwd_ctx *c, fw_tp_cache *L, int64_t kw, int64_t vw, int64_t idxw,
                            gguf_error *err)
{
    struct fw_tp_state *s = c->tps;
    if (L->k && (L->kw != kw || L->vw != vw))
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "virtual tp: a rank's KV width changed between evals");
    L->kw = kw;
    L->vw = vw;
    int rc;
    if ((rc = grow(&L->k, s->cap, kw, err)) || (vw && (rc = grow(&L->v, s->cap, vw, err))) ||
        (idxw && (rc = grow(&L->idx_k, s->cap, idxw, err))))
        return rc;
    return 0;
}

/* ---- attention of rank r: partial output of the row-parallel out projection ---- */

static int tp_attn_gqa(gguf_fwd_ctx *c, int64_t il, int r, const fw_rope *rope, double scale,
                       const double *cur, int64_t n, double *part, gguf_error *err)
{
    const gguf_hparams *hp = c->hp;
    const int64_t E = hp->n_embd, dk = hp->n_embd_head_k, dv = hp->n_embd_head_v;
    tpw wq, wk, wv, bq, bk, bv, qn, kn, wo;
    memset(&wq, 0, sizeof wq);
    wk = wv = bq = bk = bv = qn = kn = wo = wq;
    double *q = NULL, *o = NULL, *sc = NULL;
    float *qnf = NULL, *knf = NULL;
    int rc;
    if ((rc = tp_get(c, il, GGUF_ROLE_ATTN_Q, r, &wq, err)) ||
        (rc = tp_get(c, il, GGUF_ROLE_ATTN_K, r, &wk, err)) ||
        (rc = tp_get(c, il, GGUF_ROLE_ATTN_V, r, &wv, err)) ||
        (rc = tp_get(c, il, GGUF_ROLE_ATTN_Q_BIAS, r, &bq, err)) ||
        (rc = tp_get(c, il, GGUF_ROLE_ATTN_K_BIAS, r, &bk, err)) ||
        (rc = tp_get(c, il, GGUF_ROLE_ATTN_V_BIAS, r, &bv, err)) ||
        (rc = tp_get(c, il, GGUF_ROLE_ATTN_Q_NORM, r, &qn, err)) ||
        (rc = tp_get(c, il, GGUF_ROLE_ATTN_K_NORM, r, &kn, err)) ||
        (rc = tp_get(c, il, GGUF_ROLE_ATTN_OUT, r, &wo, err)))
        goto done;
    if (!wq.f || !wk.f || !wv.f || !wo.f) {
        rc = gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET, "virtual tp: blk.%lld: no q/k/v/o",
                       (long long)il);
        goto done;
    }
    const int64_t nh = wq.ne[1] / dk, nkv = wk.ne[1] / dk, vw = wv.ne[1];
    if (nh < 1 || nkv < 1) {
        rc = gguf_fail(err, GGUF_E_BAD_SHAPE, GGUF_NO_OFFSET,
                       "virtual tp: blk.%lld rank %d holds less than one head", (long long)il, r);
        goto done;
    }
    fw_tp_cache *L = &c->tps->cache[(int64_t)r * c->hp->n_layer + il];
    if ((rc = tp_cache_reserve(c, L, nkv * dk, vw, 0, err)))
        goto done;
    q = fw_xcalloc((size_t)(n * nh * dk), sizeof(double));
    o = fw_xcalloc((size_t)(n * nh * dv), sizeof(double));
    sc = fw_xcalloc((size_t)(c->n_past + n), sizeof(double));
    if (!q || !o || !sc) {
        rc = fw_nomem(err, "tp attention");
        goto done;
    }
    double *kc = L->k + c->n_past * L->kw, *vc = L->v + c->n_past * L->vw;
    if ((rc = tp_mm(c, q, nh * dk, cur, E, &wq, &bq, n, err)) ||
        (rc = tp_mm(c, kc, L->kw, cur, E, &wk, &bk, n, err)) ||
        (rc = tp_mm(c, vc, L->vw, cur, E, &wv, &bv, n, err)))
        goto done;
    if (qn.f) {
        qnf = fitv(&qn, dk);
        for (int64_t t = 0; t < n; t++)
            for (int64_t h = 0; h < nh; h++)
                fw_rmsnorm(q + (t * nh + h) * dk, q + (t * nh + h) * dk, qnf, dk, hp->rms_eps,
                           c->prec);
    }
    if (kn.f) {
        knf = fitv(&kn, dk);
        for (int64_t t = 0; t < n; t++)
            for (int64_t h = 0; h < nkv; h++)
                fw_rmsnorm(kc + t * L->kw + h * dk, kc + t * L->kw + h * dk, knf, dk, hp->rms_eps,
                           c->prec);
    }
    for (int64_t t = 0; t < n; t++) {
        for (int64_t h = 0; h < nh; h++)
            fw_rope_apply(rope, q + (t * nh + h) * dk, c->n_past + t, c->prec);
        for (int64_t h = 0; h < nkv; h++)
            fw_rope_apply(rope, kc + t * L->kw + h * dk, c->n_past + t, c->prec);
    }
    const int64_t dvh = vw / nkv; /* value width per kv head on this rank */
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < nh; h++) {
            const int64_t g = h * nkv / nh; /* the kv head of query head h */
            double *oh = o + (t * nh + h) * dv;
            if (dvh >= dv)
                fw_attn_head(oh, q + (t * nh + h) * dk, L->k + g * dk, L->kw, L->v + g * dvh,
                             L->vw, c->n_past + t + 1, NULL, dk, dv, scale, sc, c->prec);
        }
    rc = tp_mm(c, part, E, o, nh * dv, &wo, NULL, n, err);
done:
    free(q);
    free(o);
    free(sc);
    free(qnf);
    free(knf);
    tpw_free(&wq);
    tpw_free(&wk);
    tpw_free(&wv);
    tpw_free(&bq);
    tpw_free(&bk);
    tpw_free(&bv);
    tpw_free(&qn);
    tpw_free(&kn);
    tpw_free(&wo);
    return rc;
}

static int tp_attn_mla(gguf_fwd_ctx *c, int64_t il, int r, const fw_rope *rope, double scale,
                       const double *cur, int64_t n, double *part, gguf_error *err)
{
    const gguf_hparams *hp = c->hp;
    const int64_t E = hp->n_embd, nope = hp->qk_nope, rp = hp->qk_rope, dk = nope + rp,
                  dv = hp->v_head, nk_all = c->n_past + n;
    tpw wqa, qan, wqb, wq, wkva, kvan, wkvb, wo;
    memset(&wqa, 0, sizeof wqa);
    qan = wqb = wq = wkva = kvan = wkvb = wo = wqa;
    double *qr = NULL, *q = NULL, *o = NULL;
    uint8_t *keep = NULL;
    float *kb = NULL, *vb = NULL;
    int rc;
    if ((rc = tp_get(c, il, GGUF_ROLE_ATTN_Q_A, r, &wqa, err)) ||
        (rc = tp_get(c, il, GGUF_ROLE_ATTN_Q_A_NORM, r, &qan, err)) ||
        (rc = tp_get(c, il, GGUF_ROLE_ATTN_Q_B, r, &wqb, err)) ||
        (rc = tp_get(c, il, GGUF_ROLE_ATTN_Q, r, &wq, err)) ||
        (rc = tp_get(c, il, GGUF_ROLE_ATTN_KV_A_MQA, r, &wkva, err)) ||
        (rc = tp_get(c, il, GGUF_ROLE_ATTN_KV_A_NORM, r, &kvan, err)) ||
        (rc = tp_get(c, il, GGUF_ROLE_ATTN_KV_B, r, &wkvb, err)) ||
        (rc = tp_get(c, il, GGUF_ROLE_ATTN_OUT, r, &wo, err)))
        goto done;
    const tpw *wqh = wqb.f ? &wqb : &wq;
    if (!wqh->f || !wkva.f || !wkvb.f || !wo.f) {
        rc = gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET,
                       "virtual tp: blk.%lld: MLA weights missing from the plan", (long long)il);
        goto done;
    }
    const int64_t nh = wqh->ne[1] / dk, KW = wkva.ne[1], R = KW - rp;
    if (nh < 1 || R < 1) {
        rc = gguf_fail(err, GGUF_E_BAD_SHAPE, GGUF_NO_OFFSET,
                       "virtual tp: blk.%lld rank %d holds less than one head", (long long)il, r);
        goto done;
    }
    fw_tp_cache *L = &c->tps->cache[(int64_t)r * hp->n_layer + il];
    const bool has_idx = hp->idx_head_dim > 0 && gguf_model_get(c->m, il, GGUF_ROLE_IDX_ATTN_K);
    if ((rc = tp_cache_reserve(c, L, KW, 0, has_idx ? hp->idx_head_dim : 0, err)))
        goto done;
    q = fw_xcalloc((size_t)(n * nh * dk), sizeof(double));
    o = fw_xcalloc((size_t)(n * nh * dv), sizeof(double));
    keep = fw_xcalloc((size_t)(n * nk_all), 1);
    if (!q || !o || !keep) {
        rc = fw_nomem(err, "tp MLA");
        goto done;
    }
    if (wqb.f) {
        const int64_t ql = wqa.ne[1];
        qr = fw_xcalloc((size_t)(n * ql), sizeof(double));
        if (!qr) {
            rc = fw_nomem(err, "tp MLA");
            goto done;
        }
        if ((rc = tp_mm(c, qr, ql, cur, E, &wqa, NULL, n, err)) ||
            (rc = tp_norm(c, qr, qr, n, ql, ql, &qan, err)) ||
            (rc = tp_mm(c, q, nh * dk, qr, ql, &wqb, NULL, n, err)))
            goto done;
    } else if ((rc = tp_mm(c, q, nh * dk, cur, E, &wq, NULL, n, err))) {
        goto done;
    }
    double *lat = L->k + c->n_past * KW;
    if ((rc = tp_mm(c, lat, KW, cur, E, &wkva, NULL, n, err)) ||
        (rc = tp_norm(c, lat, lat, n, R, KW, &kvan, err)))
        goto done;
    for (int64_t t = 0; t < n; t++) {
        fw_rope_apply(rope, lat + t * KW + R, c->n_past + t, c->prec);
        for (int64_t h = 0; h < nh; h++)
            fw_rope_apply(rope, q + (t * nh + h) * dk + nope, c->n_past + t, c->prec);
    }
    if (has_idx && qr && hp->q_lora_rank == wqa.ne[1]) {
        if ((rc = fw_dsa_indexer(c, il, L->idx_k, cur, qr, n, keep, nk_all, err)))
            goto done;
    } else {
        memset(keep, 1, (size_t)(n * nk_all));
    }
    /* kv_b_proj as the engine loads it: [R, heads*(nope+v)], head h's rows
     * h*(nope+v) .. : nope k rows, then v rows */
    const int64_t Rb = wkvb.ne[0], hb = wkvb.ne[1] / (nope + dv);
    kb = calloc((size_t)(nh * R * nope) + 1, sizeof(float));
    vb = calloc((size_t)(nh * dv * R) + 1, sizeof(float));
    if (!kb || !vb) {
        rc = fw_nomem(err, "tp kv_b");
        goto done;
    }
    const int64_t Ru = Rb < R ? Rb : R;
    for (int64_t h = 0; h < nh && h < hb; h++) {
        for (int64_t j = 0; j < nope; j++)
            for (int64_t i = 0; i < Ru; i++)
                kb[(h * R + i) * nope + j] = wkvb.f[(h * (nope + dv) + j) * Rb + i];
        for (int64_t d = 0; d < dv; d++)
            for (int64_t i = 0; i < Ru; i++)
                vb[(h * dv + d) * R + i] = wkvb.f[(h * (nope + dv) + nope + d) * Rb + i];
    }
    const double save = c->kq_scale;
    c->kq_scale = scale;
    rc = fw_mla_core(c, L->k, KW, R, nh, nope, rp, dv, q, kb, vb, keep, n, o, err);
    c->kq_scale = save;
    if (!rc)
        rc = tp_mm(c, part, E, o, nh * dv, &wo, NULL, n, err);
done:
    free(qr);
    free(q);
    free(o);
    free(keep);
    free(kb);
    free(vb);
    tpw_free(&wqa);
    tpw_free(&qan);
    tpw_free(&wqb);
    tpw_free(&wq);
    tpw_free(&wkva);
    tpw_free(&kvan);
    tpw_free(&wkvb);
    tpw_free(&wo);
    return rc;
}

/* ---- FFN of rank r ---- */

/* SwiGLU with gate/up W ne = [E, ff] (column slices) and down ne = [ff, E]. */
static int tp_swiglu(gguf_fwd_ctx *c, const float *g, const float *u, int64_t ff_gu,
                     const float *d, int64_t ff_d, const double *x, int64_t n, double *out,
                     gguf_error *err)
{
    const int64_t E = c->hp->n_embd;
    const int64_t ff = ff_gu;
    double *hg = fw_xcalloc((size_t)(n * ff), sizeof(double));
    double *hu = fw_xcalloc((size_t)(n * ff), sizeof(double));
    double *hd = fw_xcalloc((size_t)(n * ff_d), sizeof(double));
    if (!hg || !hu || !hd) {
        free(hg);
        free(hu);
        free(hd);
        return fw_nomem(err, "tp FFN");
    }
    fw_matmul(hg, ff, x, E, g, NULL, E, ff, n, c->o.n_threads, c->prec);
    fw_matmul(hu, ff, x, E, u, NULL, E, ff, n, c->o.n_threads, c->prec);
    fw_swiglu(hg, hg, hu, n * ff, c->prec);
    for (int64_t t = 0; t < n; t++)
        memcpy(hd + t * ff_d, hg + t * ff, (size_t)(ff < ff_d ? ff : ff_d) * sizeof(double));
    fw_matmul(out, E, hd, ff_d, d, NULL, ff_d, E, n, c->o.n_threads, c->prec);
    free(hg);
    free(hu);
    free(hd);
    return 0;
}

static int tp_ffn_dense(gguf_fwd_ctx *c, int64_t il, int r, gguf_role rg, gguf_role ru,
                        gguf_role rd, const double *x, int64_t n, double *part, bool *reduce,
                        gguf_error *err)
{
    tpw g, u, d;
    memset(&g, 0, sizeof g);
    u = d = g;
    int rc;
    if ((rc = tp_get(c, il, rg, r, &g, err)) || (rc = tp_get(c, il, ru, r, &u, err)) ||
        (rc = tp_get(c, il, rd, r, &d, err)))
        goto done;
    if (!g.f || !u.f || !d.f) {
        rc = gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET, "virtual tp: blk.%lld: no FFN",
                       (long long)il);
        goto done;
    }
    if (g.ne[1] != u.ne[1]) {
        rc = gguf_fail(err, GGUF_E_BAD_SHAPE, GGUF_NO_OFFSET,
                       "virtual tp: blk.%lld rank %d: gate and up slices differ", (long long)il, r);
        goto done;
    }
    *reduce = d.e->reduce_sum;
    rc = tp_swiglu(c, g.f, u.f, g.ne[1], d.f, d.ne[0], x, n, part, err);
done:
    tpw_free(&g);
    tpw_free(&u);
    tpw_free(&d);
    return rc;
}

/* MoE of rank r: the routed part of the experts it owns (moe_part) and its
 * slice of the shared experts (sh_part, zero when none). Routing is
 * replicated; its captures are made per rank. */
static int tp_ffn_moe(gguf_fwd_ctx *c, int64_t il, int r, const double *x, int64_t n,
                      double *moe_part, double *sh_part, bool *red_moe, bool *red_sh,
                      bool *has_sh, gguf_error *err)
{
    const gguf_hparams *hp = c->hp;
    const gguf_shard_runtime *rt = gguf_shard_plan_runtime(c->plan);
    const int64_t E = hp->n_embd, ne = hp->n_expert, nu = hp->n_expert_used;
    tpw gi, bt, ge, ue, de;
    memset(&gi, 0, sizeof gi);
    bt = ge = ue = de = gi;
    double *logits = fw_xcalloc((size_t)(n * ne), sizeof(double));
    int64_t *ids = fw_xcalloc((size_t)(n * nu), sizeof(int64_t));
    double *wts = fw_xcalloc((size_t)(n * nu), sizeof(double));
    double *scr = fw_xcalloc((size_t)(2 * ne + hp->n_group + 2), sizeof(double));
    double *capv = fw_xcalloc((size_t)(n * nu), sizeof(double));
    double *y = fw_xcalloc((size_t)E, sizeof(double));
    int rc = 0;
    if (!logits || !ids || !wts || !scr || !capv || !y) {
        rc = fw_nomem(err, "tp MoE");
        goto done;
    }
    if ((rc = tp_get(c, il, GGUF_ROLE_FFN_GATE_INP, r, &gi, err)) ||
        (rc = tp_get(c, il, GGUF_ROLE_FFN_EXP_PROBS_B, r, &bt, err)) ||
        (rc = tp_get(c, il, GGUF_ROLE_FFN_GATE_EXPS, r, &ge, err)) ||
        (rc = tp_get(c, il, GGUF_ROLE_FFN_UP_EXPS, r, &ue, err)) ||
        (rc = tp_get(c, il, GGUF_ROLE_FFN_DOWN_EXPS, r, &de, err)))
        goto done;
    if (!gi.f || !ge.f || !ue.f || !de.f) {
        rc = gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET, "virtual tp: blk.%lld: no experts",
                       (long long)il);
        goto done;
    }
    if ((rc = tp_mm(c, logits, ne, x, E, &gi, NULL, n, err)))
        goto done;
    float *bias = bt.f && rt->use_exp_probs_b ? fitv(&bt, ne) : NULL;
    fw_moe_cfg cfg = {ne, nu, hp->gating == GGUF_GATING_SIGMOID ? GGUF_GATING_SIGMOID
                                                                 : GGUF_GATING_SOFTMAX,
                      hp->n_group, hp->topk_group, rt->norm_topk,
                      rt->routed_scale > 0 ? rt->routed_scale : 1.0};
    for (int64_t t = 0; t < n; t++)
        fw_moe_route(&cfg, logits + t * ne, bias, ids + t * nu, wts + t * nu, scr, c->prec);
    free(bias);
    for (int64_t i = 0; i < n * nu; i++)
        capv[i] = (double)ids[i];
    if ((rc = fw_capture(c, (int)il, "moe_experts", r, capv, nu, n, err)) ||
        (rc = fw_capture(c, (int)il, "moe_weights", r, wts, nu, n, err)))
        goto done;
    /* the experts this rank owns (the engine's rule), from its local slices */
    int64_t first, end;
    gguf_shard_plan_experts(c->plan, r, &first, &end);
    const int64_t ffl = ge.ne[1], ffd = de.ne[0], nloc = ge.ne[2];
    memset(moe_part, 0, (size_t)(n * E) * sizeof(double));
    for (int64_t t = 0; t < n; t++)
        for (int64_t k = 0; k < nu; k++) {
            const int64_t e = ids[t * nu + k], le = e - first;
            if (e < first || e >= end || le >= nloc || le >= de.ne[2])
                continue;
            c->st.experts_loaded++;
            if ((rc = tp_swiglu(c, ge.f + le * ffl * E, ue.f + le * ffl * E, ffl,
                                de.f + le * ffd * E, ffd, x + t * E, 1, y, err)))
                goto done;
            for (int64_t j = 0; j < E; j++) {
                double v = y[j] * wts[t * nu + k];
                if (c->prec == GGUF_FWD_F32)
                    v = (double)(float)v;
                moe_part[t * E + j] += v;
            }
        }
    fw_round(moe_part, n * E, c->prec);
    /* Expert parallel: each token's experts live on different ranks, so the
     * routed outputs are always combined (summed) over ranks; the plan's
     * reduce flag governs the moe-tp partial sums of one expert. */
    *red_moe = de.e->reduce_sum || gguf_shard_plan_opts(c->plan)->ep > 1;
    *has_sh = gguf_shard_plan_get(c->plan, il, GGUF_ROLE_FFN_GATE_SHEXP) != NULL;
    if (*has_sh) {
        if ((rc = tp_ffn_dense(c, il, r, GGUF_ROLE_FFN_GATE_SHEXP, GGUF_ROLE_FFN_UP_SHEXP,
                               GGUF_ROLE_FFN_DOWN_SHEXP, x, n, sh_part, red_sh, err)))
            goto done;
        if (rt->shared_scale != 1.0 && rt->shared_scale != 0.0)
            for (int64_t i = 0; i < n * E; i++)
                sh_part[i] *= rt->shared_scale;
        fw_round(sh_part, n * E, c->prec);
    }
done:
    tpw_free(&gi);
    tpw_free(&bt);
    tpw_free(&ge);
    tpw_free(&ue);
    tpw_free(&de);
    free(logits);
    free(ids);
    free(wts);
    free(scr);
    free(capv);
    free(y);
    return rc;
}

/* ---- collectives ---- */

/* All-reduce (sum in rank order) when reduce, else every rank keeps its own. */
static void allreduce(double **parts, int tp, int64_t len, bool reduce, int prec)
{
    if (!reduce)
        return;
    for (int64_t i = 0; i < len; i++) {
        double s = 0;
        for (int r = 0; r < tp; r++)
            s += parts[r][i];
        for (int r = 0; r < tp; r++)
            parts[r][i] = s;
    }
    for (int r = 0; r < tp; r++)
        fw_round(parts[r], len, prec);
}

/* ---- eval ---- */

static int tp_state_init(gguf_fwd_ctx *c, int64_t need_pos, int64_t n, gguf_error *err)
{
    if (!c->tps) {
        c->tps = calloc(1, sizeof *c->tps);
        if (!c->tps)
            return fw_nomem(err, "tp state");
        c->tps->cache = calloc((size_t)(c->tp * (c->hp->n_layer > 0 ? c->hp->n_layer : 1)),
                               sizeof(fw_tp_cache));
        c->tps->x = calloc((size_t)c->tp, sizeof(double *));
        if (!c->tps->cache || !c->tps->x)
            return fw_nomem(err, "tp state");
    }
    if (need_pos > c->tps->cap) {
        int64_t cap = c->tps->cap ? c->tps->cap : 64;
        while (cap < need_pos)
            cap *= 2;
        c->tps->cap = cap;
        for (int64_t i = 0; i < (int64_t)c->tp * c->hp->n_layer; i++) {
            fw_tp_cache *L = &c->tps->cache[i];
            int rc;
            if (L->k && ((rc = grow(&L->k, cap, L->kw, err)) ||
                         (L->v && (rc = grow(&L->v, cap, L->vw, err))) ||
                         (L->idx_k && (rc = grow(&L->idx_k, cap, c->hp->idx_head_dim, err)))))
                return rc;
        }
    }
    for (int r = 0; r < c->tp; r++) {
        free(c->tps->x[r]);
        c->tps->x[r] = fw_xcalloc((size_t)(n * c->hp->n_embd), sizeof(double));
        if (!c->tps->x[r])
            return fw_nomem(err, "tp activations");
    }
    return 0;
}

void fw_tp_free(gguf_fwd_ctx *c)
{
    if (!c->tps)
        return;
    if (c->tps->cache)
        for (int64_t i = 0; i < (int64_t)c->tp * c->hp->n_layer; i++) {
            free(c->tps->cache[i].k);
            free(c->tps->cache[i].v);
            free(c->tps->cache[i].idx_k);
        }
    if (c->tps->x)
        for (int r = 0; r < c->tp; r++)
            free(c->tps->x[r]);
    free(c->tps->cache);
    free(c->tps->x);
    free(c->tps);
    c->tps = NULL;
}

int fw_tp_eval(gguf_fwd_ctx *c, const int32_t *tokens, int64_t n, float *logits_out,
               gguf_error *err)
{
    const gguf_hparams *hp = c->hp;
    const gguf_shard_runtime *rt = gguf_shard_plan_runtime(c->plan);
    const int tp = c->tp;
    const int64_t E = hp->n_embd, V = hp->n_vocab;
    int rc = tp_state_init(c, c->n_past + n, n, err);
    if (rc)
        return rc;
    double **x = c->tps->x;
    double **cur = calloc((size_t)tp, sizeof(double *));
    double **part = calloc((size_t)tp, sizeof(double *));
    double **part2 = calloc((size_t)tp, sizeof(double *));
    double *lg = NULL, *lr = NULL;
    if (!cur || !part || !part2) {
        rc = fw_nomem(err, "tp");
        goto done;
    }
    for (int r = 0; r < tp; r++) {
        cur[r] = fw_xcalloc((size_t)(n * E), sizeof(double));
        part[r] = fw_xcalloc((size_t)(n * E), sizeof(double));
        part2[r] = fw_xcalloc((size_t)(n * E), sizeof(double));
        if (!cur[r] || !part[r] || !part2[r]) {
            rc = fw_nomem(err, "tp");
            goto done;
        }
    }
    /* the engine's RoPE and softmax scale, from the plan's runtime */
    fw_rope rope = c->rope;
    rope.type = rt->rope_pairs;
    const double scale = rt->attn_scale > 0 ? rt->attn_scale : c->kq_scale;

    /* vocab-parallel embedding: rank r serves ids [off_r, off_r + rows_r) */
    {
        int64_t off = 0;
        for (int r = 0; r < tp; r++) {
            tpw te;
            if ((rc = tp_get(c, -1, GGUF_ROLE_TOKEN_EMBD, r, &te, err)))
                goto done;
            const int64_t rows = te.ne[1];
            for (int64_t t = 0; t < n; t++) {
                const int64_t id = tokens[t];
                if (id >= off && id < off + rows && te.f)
                    for (int64_t i = 0; i < E; i++)
                        part[r][t * E + i] = te.f[(id - off) * te.ne[0] + i];
            }
            off += rows;
            tpw_free(&te);
        }
        allreduce(part, tp, n * E, true, c->prec);
        for (int r = 0; r < tp; r++)
            memcpy(x[r], part[r], (size_t)(n * E) * sizeof(double));
    }

    for (int64_t il = 0; il < hp->n_layer_main; il++) {
        const int L = (int)il;
        bool reduce = true;
        for (int r = 0; r < tp; r++) {
            tpw nw;
            if ((rc = tp_get(c, il, GGUF_ROLE_ATTN_NORM, r, &nw, err)))
                goto done;
            rc = tp_norm(c, cur[r], x[r], n, E, E, &nw, err);
            tpw_free(&nw);
            if (rc || (rc = fw_capture(c, L, "attn_norm", r, cur[r], E, n, err)))
                goto done;
            rc = hp->is_mla ? tp_attn_mla(c, il, r, &rope, scale, cur[r], n, part[r], err)
                            : tp_attn_gqa(c, il, r, &rope, scale, cur[r], n, part[r], err);
            if (rc)
                goto done;
        }
        const gguf_shard_tensor *eo = gguf_shard_plan_get(c->plan, il, GGUF_ROLE_ATTN_OUT);
        reduce = eo ? eo->reduce_sum : true;
        allreduce(part, tp, n * E, reduce, c->prec);
        for (int r = 0; r < tp; r++) {
            if ((rc = fw_capture(c, L, "attn_out", r, part[r], E, n, err)))
                goto done;
            fw_add_rows(x[r], part[r], n * E, c->prec);
            if ((rc = fw_capture(c, L, "attn_residual", r, x[r], E, n, err)))
                goto done;
        }
        const bool moe = gguf_model_layer_kind(c->m, il) == GGUF_LAYER_MOE;
        bool red_moe = true, red_sh = true, has_sh = false;
        for (int r = 0; r < tp; r++) {
            tpw nw;
            if ((rc = tp_get(c, il, GGUF_ROLE_FFN_NORM, r, &nw, err)))
                goto done;
            if (!nw.f && (rc = tp_get(c, il, GGUF_ROLE_ATTN_POST_NORM, r, &nw, err)))
                goto done;
            rc = tp_norm(c, cur[r], x[r], n, E, E, &nw, err);
            tpw_free(&nw);
            if (rc || (rc = fw_capture(c, L, "ffn_norm", r, cur[r], E, n, err)))
                goto done;
            memset(part2[r], 0, (size_t)(n * E) * sizeof(double));
            if (moe)
                rc = tp_ffn_moe(c, il, r, cur[r], n, part[r], part2[r], &red_moe, &red_sh,
                                &has_sh, err);
            else
                rc = tp_ffn_dense(c, il, r, GGUF_ROLE_FFN_GATE, GGUF_ROLE_FFN_UP,
                                  GGUF_ROLE_FFN_DOWN, cur[r], n, part[r], &red_moe, err);
            if (rc)
                goto done;
        }
        allreduce(part, tp, n * E, red_moe, c->prec);
        if (has_sh) {
            allreduce(part2, tp, n * E, red_sh, c->prec);
            for (int r = 0; r < tp; r++)
                fw_add_rows(part[r], part2[r], n * E, c->prec);
        }
        for (int r = 0; r < tp; r++) {
            if ((rc = fw_capture(c, L, "ffn_out", r, part[r], E, n, err)))
                goto done;
            fw_add_rows(x[r], part[r], n * E, c->prec);
            if ((rc = fw_capture(c, L, "residual", r, x[r], E, n, err)))
                goto done;
        }
    }

    /* final norm; vocab-parallel head, all-gathered in rank order */
    lg = fw_xcalloc((size_t)(n * V), sizeof(double));
    if (!lg) {
        rc = fw_nomem(err, "logits");
        goto done;
    }
    const gguf_role head = gguf_shard_plan_get(c->plan, -1, GGUF_ROLE_OUTPUT) ? GGUF_ROLE_OUTPUT
                                                                             : GGUF_ROLE_TOKEN_EMBD;
    int64_t off = 0;
    for (int r = 0; r < tp; r++) {
        tpw nw, wo;
        if ((rc = tp_get(c, -1, GGUF_ROLE_OUTPUT_NORM, r, &nw, err)))
            goto done;
        rc = tp_norm(c, cur[r], x[r], n, E, E, &nw, err);
        tpw_free(&nw);
        if (rc || (rc = fw_capture(c, -1, "output_norm", r, cur[r], E, n, err)))
            goto done;
        if ((rc = tp_get(c, -1, head, r, &wo, err)))
            goto done;
        const int64_t rows = wo.ne[1];
        free(lr);
        lr = fw_xcalloc((size_t)(n * rows), sizeof(double));
        if (!lr || (rc = tp_mm(c, lr, rows, cur[r], E, &wo, NULL, n, err))) {
            tpw_free(&wo);
            rc = rc ? rc : fw_nomem(err, "logits");
            goto done;
        }
        tpw_free(&wo);
        for (int64_t t = 0; t < n; t++)
            for (int64_t j = 0; j < rows && off + j < V; j++)
                lg[t * V + off + j] = lr[t * rows + j];
        off += rows;
    }
    /* every rank holds the gathered logits */
    for (int r = 0; r < tp; r++)
        if ((rc = fw_capture(c, -1, "logits", r, lg, V, n, err)))
            goto done;
    if (logits_out)
        for (int64_t i = 0; i < n * V; i++)
            logits_out[i] = (float)lg[i];
    c->n_past += n;
done:
    for (int r = 0; cur && part && part2 && r < tp; r++) {
        free(cur[r]);
        free(part[r]);
        free(part2[r]);
    }
    free(cur);
    free(part);
    free(part2);
    free(lg);
    free(lr);
    return rc;
}

int gguf_fwd_tp_create(gguf_fwd_ctx **out, const gguf_model *m, const gguf_shard_plan *plan,
                       const gguf_fwd_opts *opts, gguf_error *err)
{
    *out = NULL;
    if (!plan || gguf_shard_plan_model(plan) != m)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "virtual tp: the plan was not built for this model");
    int rc = gguf_fwd_ctx_create(out, m, opts, err);
    if (rc)
        return rc;
    (*out)->plan = plan;
    (*out)->tp = gguf_shard_plan_ranks(plan);
    return 0;
}
