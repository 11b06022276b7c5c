/* Attention of one rank: GQA (llama, qwen2/3, glm4moe) and MLA (deepseek2,
 * glm-dsa, with the glm-dsa lightning indexer). The rank's head count and
 * widths come from its weights, as an engine's would; the RoPE pairs and the
 * softmax scale from the runtime (the model's, or the plan's engine). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/error_lib.h"
#include "forward/forward_exec.h"
#include "forward/forward_stream.h"

static int less_than_a_head(int64_t il, int r, gguf_error *err)
{
    return gguf_fail(err, GGUF_E_BAD_SHAPE, GGUF_NO_OFFSET,
                     "forward: blk.%lld rank %d holds less than one head", (long long)il, r);
}

/* ------------------------------------------------------------ GQA */

/* The heads of every query row on all threads: item i is (token i / nh,
 * head i % nh), dealt round-robin because later tokens see more keys. */
typedef struct gqa_job {
    double *o, *sc;
    const double *q, *K, *V;
    int64_t nh, nkv, dk, dv, dvh, kw, vw, n_past, n, sc_len;
    double scale;
    int prec;
} gqa_job;

static void gqa_part(void *arg, int part, int n_parts)
{
    const gqa_job *j = arg;
    double *sc = j->sc + part * j->sc_len;
    for (int64_t i = part; i < j->n * j->nh; i += n_parts) {
        const int64_t t = i / j->nh, h = i % j->nh, g = h * j->nkv / j->nh;
        fw_attn_head(j->o + i * j->dv, j->q + i * j->dk, j->K + g * j->dk, j->kw,
                     j->V + g * j->dvh, j->vw, j->n_past + t + 1, NULL, j->dk, j->dv, j->scale,
                     sc, j->prec);
    }
}

static int attn_gqa(fw_exec *c, int r, int64_t il, const double *cur, int64_t n, double *out,
                    gguf_error *err)
{
    const gguf_hparams *hp = c->s.hp;
    const int64_t E = hp->n_embd, dk = hp->n_embd_head_k, dv = hp->n_embd_head_v;
    const int prec = c->s.prec;
    static const gguf_role roles[9] = {GGUF_ROLE_ATTN_Q,      GGUF_ROLE_ATTN_K,
                                       GGUF_ROLE_ATTN_V,      GGUF_ROLE_ATTN_Q_BIAS,
                                       GGUF_ROLE_ATTN_K_BIAS, GGUF_ROLE_ATTN_V_BIAS,
                                       GGUF_ROLE_ATTN_Q_NORM, GGUF_ROLE_ATTN_K_NORM,
                                       GGUF_ROLE_ATTN_OUT};
    fw_w w[9];
    memset(w, 0, sizeof w);
    const fw_w *wq = &w[0], *wk = &w[1], *wv = &w[2], *qn = &w[6], *kn = &w[7], *wo = &w[8];
    double *q = NULL, *o = NULL, *sc = NULL;
    int rc = 0;
    for (int i = 0; i < 9 && !rc; i++)
        rc = fw_w_get(c, r, il, roles[i], &w[i], err);
    if (rc)
        goto done;
    for (int i = 0; i < 9 && !rc; i++)
        if ((i < 3 || i == 8) && !fw_w_has(&w[i]))
            rc = fw_missing(il, roles[i], err);
    if (rc)
        goto done;
    const int64_t nh = fw_w_rows(wq) / dk, nkv = fw_w_rows(wk) / dk, vw = fw_w_rows(wv);
    if (nh < 1 || nkv < 1) {
        rc = less_than_a_head(il, r, err);
        goto done;
    }
    fw_kv *L;
    if ((rc = fw_kv_reserve(c, r, il, nkv * dk, vw, 0, &L, err)))
        goto done;
    fw_pool *pool;
    if ((rc = fw_exec_pool(c, &pool, err)))
        goto done;
    /* threads only for real work (one token over a short cache is microseconds) */
    const double work = (double)n * (double)nh * (double)(c->n_past + n) * (double)(dk + dv);
    int64_t parts = n * nh < fw_pool_threads(pool) ? n * nh : fw_pool_threads(pool);
    if (work < 65536.0)
        parts = 1;
    q = fw_xcalloc((size_t)(n * nh * dk), sizeof(double));
    o = fw_xcalloc((size_t)(n * nh * dv), sizeof(double));
    sc = fw_xcalloc((size_t)(parts * (c->n_past + n)), sizeof(double));
    if (!q || !o || !sc) {
        rc = fw_nomem(err, "attention");
        goto done;
    }
    double *kc = L->k + c->n_past * L->kw, *vc = L->v + c->n_past * L->vw;
    if ((rc = fw_mm(c, q, nh * dk, cur, E, 0, wq, &w[3], n, err)) ||
        (rc = fw_mm(c, kc, L->kw, cur, E, 0, wk, &w[4], n, err)) ||
        (rc = fw_mm(c, vc, L->vw, cur, E, 0, wv, &w[5], n, err)))
        goto done;
    if (fw_w_has(qn) && (rc = fw_norm_heads(c, q, n, nh, dk, nh * dk, qn, err)))
        goto done;
    if (fw_w_has(kn) && (rc = fw_norm_heads(c, kc, n, nkv, dk, L->kw, kn, err)))
        goto done;
    for (int64_t t = 0; t < n; t++) {
        fw_rope_apply_heads(&c->rt.rope, q + t * nh * dk, nh, dk, c->n_past + t, prec);
        fw_rope_apply_heads(&c->rt.rope, kc + t * L->kw, nkv, dk, c->n_past + t, prec);
    }
    /* query head h reads kv head h * nkv / nh (h / (nh / nkv) when it divides);
     * a rank whose value slice is narrower than a head (a broken plan) gets
     * nothing from it */
    const int64_t dvh = vw / nkv;
    if (dvh >= dv) {
        gqa_job j = {o, sc, q, L->k, L->v, nh, nkv, dk, dv, dvh, L->kw, L->vw, c->n_past, n,
                     c->n_past + n, c->rt.kq_scale, prec};
        fw_pool_run(pool, (int)parts, gqa_part, &j);
    }
    rc = fw_mm(c, out, E, o, nh * dv, 0, wo, NULL, n, err);
done:
    free(q);
    free(o);
    free(sc);
    for (int i = 0; i < 9; i++)
        fw_w_release(&w[i]);
    return rc;
}

/* ------------------------------------------------------------ glm-dsa indexer */

/* The indexer's selection for the pool: query t's scores and top-k, queries
 * dealt round-robin (later ones see more keys); per part a score row and a
 * selection buffer. */
typedef struct dsa_job {
    const double *iq, *wt, *ik;
    uint8_t *keep;
    double *score;
    int64_t *sel;
    int64_t nh, hd, top_k, n, n_past, n_keys_max, n_sel;
    double wscale;
} dsa_job;

static void dsa_select_part(void *arg, int part, int n_parts)
{
    const dsa_job *j = arg;
    double *score = j->score + part * j->n_keys_max;
    int64_t *sel = j->sel + part * j->n_sel;
    for (int64_t t = part; t < j->n; t += n_parts) {
        const int64_t nk = j->n_past + t + 1;
        uint8_t *kp = j->keep + t * j->n_keys_max;
        memset(kp, 0, (size_t)j->n_keys_max);
        if (nk <= j->top_k) {
            memset(kp, 1, (size_t)nk);
            continue;
        }
        for (int64_t k = 0; k < nk; k++) {
            double s = 0;
            for (int64_t h = 0; h < j->nh; h++) {
                double d = fw_dot(j->iq + (t * j->nh + h) * j->hd, j->ik + k * j->hd, j->hd);
                if (d > 0)
                    s += j->wt[t * j->nh + h] * j->wscale * d;
            }
            score[k] = s;
        }
        int64_t got = fw_topk(score, NULL, nk, j->top_k, sel);
        for (int64_t i = 0; i < got; i++)
            kp[sel[i]] = 1;
    }
}

/* For each query t, which of the keys 0..n_past+t it may attend to
 * (keep[t][j]). Scores are
 *   sum_h w[t][h] relu(iq[t][h] . ik[j]) / sqrt(idx_head_dim * idx_n_head)
 * and the top-k keys are kept; with n_past+t+1 <= top-k every key is. No plan
 * slices the indexer: every rank computes it from the file's tensors. */
int fw_dsa_indexer(fw_exec *c, int64_t il, double *idx_cache, const double *cur,
                   const double *qr, int64_t n, uint8_t *keep, int64_t n_keys_max,
                   gguf_error *err)
{
    const gguf_hparams *hp = c->s.hp;
    const int64_t nh = hp->idx_n_head, hd = hp->idx_head_dim, E = hp->n_embd;
    const int64_t top_k = c->s.o.idx_top_k > 0 ? c->s.o.idx_top_k : hp->idx_top_k;
    const int prec = c->s.prec;
    fw_w wqb, wk, wp, kn, knb;
    fw_w_file(c, il, GGUF_ROLE_IDX_ATTN_Q_B, &wqb);
    fw_w_file(c, il, GGUF_ROLE_IDX_ATTN_K, &wk);
    fw_w_file(c, il, GGUF_ROLE_IDX_PROJ, &wp);
    fw_w_file(c, il, GGUF_ROLE_IDX_K_NORM, &kn);
    fw_w_file(c, il, GGUF_ROLE_IDX_K_NORM_BIAS, &knb);
    if (!fw_w_has(&wqb) || !fw_w_has(&wk) || !fw_w_has(&wp) || c->s.o.dense_indexer ||
        top_k <= 0) {
        memset(keep, 1, (size_t)(n * n_keys_max));
        return 0;
    }
    fw_pool *pool;
    int rc = fw_exec_pool(c, &pool, err);
    if (rc)
        return rc;
    /* threads only for real work: the scores are n * keys * nh * hd products */
    const int64_t n_sel = (top_k < n_keys_max ? top_k : n_keys_max) + 1;
    int parts = n < fw_pool_threads(pool) ? (int)n : fw_pool_threads(pool);
    if ((double)n * (double)n_keys_max * (double)(nh * hd) < 65536.0)
        parts = 1;
    double *iq = fw_xcalloc((size_t)(n * nh * hd), sizeof(double));
    double *wt = fw_xcalloc((size_t)(n * nh), sizeof(double));
    double *score = fw_xcalloc((size_t)(parts * n_keys_max), sizeof(double));
    int64_t *sel = fw_xcalloc((size_t)(parts * n_sel), sizeof(int64_t));
    float *knw = NULL, *knbw = NULL;
    if (!iq || !wt || !score || !sel) {
        rc = fw_nomem(err, "indexer");
        goto done;
    }
    double *ik = idx_cache + c->n_past * hd;
    if ((rc = fw_mm(c, iq, 0, qr, hp->q_lora_rank, 0, &wqb, NULL, n, err)) ||
        (rc = fw_mm(c, ik, 0, cur, E, 0, &wk, NULL, n, err)) ||
        (rc = fw_mm(c, wt, 0, cur, E, 0, &wp, NULL, n, err)))
        goto done;
    if ((fw_w_has(&kn) && (rc = fw_vec(c, &kn, kn.ne[0], &knw, err))) ||
        (fw_w_has(&knb) && (rc = fw_vec(c, &knb, knb.ne[0], &knbw, err))))
        goto done;
    /* The indexer's RoPE part comes first in each head, and is always the
     * adjacent-pair form. */
    fw_rope ir = c->s.rope;
    ir.type = GGUF_ROPE_ADJACENT;
    for (int64_t t = 0; t < n; t++) {
        fw_layernorm(ik + t * hd, ik + t * hd, knw, knbw, hd, 1e-6, prec);
        fw_rope_apply(&ir, ik + t * hd, c->n_past + t, prec);
        for (int64_t h = 0; h < nh; h++)
            fw_rope_apply(&ir, iq + (t * nh + h) * hd, c->n_past + t, prec);
    }
    dsa_job j = {iq, wt, idx_cache, keep, score, sel, nh, hd, top_k, n, c->n_past, n_keys_max,
                 n_sel, 1.0 / sqrt((double)(hd * nh))};
    fw_pool_run(pool, parts, dsa_select_part, &j);
done:
    if (knw)
        fw_vec_free(c, knw, kn.ne[0]);
    if (knbw)
        fw_vec_free(c, knbw, knb.ne[0]);
    free(iq);
    free(wt);
    free(score);
    free(sel);
    return rc;
}

/* ------------------------------------------------------------ MLA */

/* One MLA call's work for the pool. Items are (position or token, head)
 * pairs dealt round-robin; each item's arithmetic is what one thread would
 * do, so the bits do not depend on the thread count. */
typedef struct mla_job {
    const double *lat; /* the latent cache, rows KW apart */
    const double *q;   /* [n][nh][dk], RoPE applied */
    const float *kb, *vb;
    const uint8_t *keep;
    double *o;       /* [n][nh][dv] */
    double *kx, *vx; /* plain: keys [nk_all][nh][dk], values [nk_all][nh][dv] */
    double *scratch; /* per part: scratch_len doubles */
    int64_t KW, R, nh, nope, rope, dk, dv, n, n_past, nk_all, scratch_len;
    double scale;
    int prec;
} mla_job;

/* Plain, step 1: keys and values of cached position j, head h. */
static void mla_expand_part(void *arg, int part, int n_parts)
{
    const mla_job *m = arg;
    for (int64_t i = part; i < m->nk_all * m->nh; i += n_parts) {
        const int64_t j = i / m->nh, h = i % m->nh;
        const double *lj = m->lat + j * m->KW;
        double *kh = m->kx + i * m->dk, *vh = m->vx + i * m->dv;
        for (int64_t e = 0; e < m->nope; e++)
            kh[e] = 0;
        for (int64_t r = 0; r < m->R; r++) {
            const float *kr = m->kb + (h * m->R + r) * m->nope;
            const double lr = lj[r];
            for (int64_t e = 0; e < m->nope; e++)
                kh[e] += (double)kr[e] * lr;
        }
        fw_round(kh, m->nope, m->prec);
        memcpy(kh + m->nope, lj + m->R, (size_t)m->rope * sizeof(double));
        for (int64_t d = 0; d < m->dv; d++) {
            const float *vr = m->vb + (h * m->dv + d) * m->R;
            double s = 0;
            for (int64_t r = 0; r < m->R; r++)
                s += (double)vr[r] * lj[r];
            vh[d] = s;
        }
        fw_round(vh, m->dv, m->prec);
    }
}

/* Plain, step 2: attention of token t, head h over the expanded keys. */
static void mla_plain_part(void *arg, int part, int n_parts)
{
    const mla_job *m = arg;
    double *sc = m->scratch + part * m->scratch_len;
    for (int64_t i = part; i < m->n * m->nh; i += n_parts) {
        const int64_t t = i / m->nh, h = i % m->nh;
        fw_attn_head(m->o + i * m->dv, m->q + i * m->dk, m->kx + h * m->dk, m->nh * m->dk,
                     m->vx + h * m->dv, m->nh * m->dv, m->n_past + t + 1,
                     m->keep + t * m->nk_all, m->dk, m->dv, m->scale, sc, m->prec);
    }
}

/* Absorbed: k_b folded into the query (q_abs[r] = sum_j q_nope[j] k_b[h][r][j],
 * Q' = [q_abs | q_pe]), attention over the latent, then v_b. */
static void mla_absorbed_part(void *arg, int part, int n_parts)
{
    const mla_job *m = arg;
    const int64_t R = m->R, dq = R + m->rope;
    double *tmpw = m->scratch + part * m->scratch_len, *qah = tmpw + m->nope, *ol = qah + dq,
           *sc = ol + R;
    for (int64_t i = part; i < m->n * m->nh; i += n_parts) {
        const int64_t t = i / m->nh, h = i % m->nh;
        const double *qh = m->q + i * m->dk;
        for (int64_t r = 0; r < R; r++) {
            const float *kr = m->kb + (h * R + r) * m->nope;
            for (int64_t j = 0; j < m->nope; j++)
                tmpw[j] = kr[j];
            qah[r] = fw_dot(qh, tmpw, m->nope);
        }
        fw_round(qah, R, m->prec);
        memcpy(qah + R, qh + m->nope, (size_t)m->rope * sizeof(double));
        fw_attn_head(ol, qah, m->lat, m->KW, m->lat, m->KW, m->n_past + t + 1,
                     m->keep + t * m->nk_all, dq, R, m->scale, sc, m->prec);
        double *oh = m->o + i * m->dv;
        for (int64_t d = 0; d < m->dv; d++) {
            const float *vr = m->vb + (h * m->dv + d) * R;
            double s = 0;
            for (int64_t r = 0; r < R; r++)
                s += (double)vr[r] * ol[r];
            oh[d] = s;
        }
        fw_round(oh, m->dv, m->prec);
    }
}

/* Parts for items of about `per_item` multiply-adds each: the pool's
 * threads for real work, one for microseconds of it. */
static int mla_parts(const fw_pool *pool, int64_t items, double per_item)
{
    if ((double)items * per_item < 65536.0)
        return 1;
    return items < fw_pool_threads(pool) ? (int)items : fw_pool_threads(pool);
}

/* MLA attention over a latent cache (rows [kv_cmpr (R) | k_pe (rope)], KW
 * apart) for n queries q ([n][nh][nope+rope], RoPE applied), with k_b as
 * [nh][R][nope] and v_b as [nh][dv][R]; keep[t][j] selects keys. Output o
 * [n][nh*dv]. Plain: keys and values expanded per head; absorbed: k_b
 * folded into the queries, v_b applied after. Heads run on the pool. */
static int mla_core(fw_exec *c, const double *cache, int64_t KW, int64_t R, int64_t nh,
                    int64_t nope, int64_t rope, int64_t dv, const double *q, const float *kb,
                    const float *vb, const uint8_t *keep, int64_t n, double scale, double *o,
                    gguf_error *err)
{
    const int64_t dk = nope + rope, nk_all = c->n_past + n;
    const bool absorbed = c->s.o.mla_mode == GGUF_FWD_MLA_ABSORBED;
    mla_job m = {cache, q,  kb,   vb,   keep, o,        NULL,     NULL, NULL, KW, R, nh,
                 nope,  rope, dk, dv, n,   c->n_past, nk_all, 0,    scale, c->s.prec};
    fw_pool *pool;
    int rc = fw_exec_pool(c, &pool, err);
    if (rc)
        return rc;
    const int parts = absorbed ? mla_parts(pool, n * nh,
                                           (double)(R * nope + nk_all * (dk + 2 * R) + dv * R))
                               : mla_parts(pool, n * nh, (double)(nk_all * (dk + dv)));
    m.scratch_len = absorbed ? nope + (R + rope) + R + nk_all : nk_all;
    m.scratch = fw_xcalloc((size_t)(parts * m.scratch_len), sizeof(double));
    if (!m.scratch)
        return fw_nomem(err, "MLA");
    if (absorbed) {
        fw_pool_run(pool, parts, mla_absorbed_part, &m);
    } else {
        m.kx = fw_xcalloc((size_t)(nk_all * nh * dk), sizeof(double));
        m.vx = fw_xcalloc((size_t)(nk_all * nh * dv), sizeof(double));
        if (!m.kx || !m.vx) {
            rc = fw_nomem(err, "MLA");
        } else {
            fw_pool_run(pool, mla_parts(pool, nk_all * nh, (double)(R * (nope + dv))),
                        mla_expand_part, &m);
            fw_pool_run(pool, parts, mla_plain_part, &m);
        }
        free(m.kx);
        free(m.vx);
    }
    free(m.scratch);
    return rc;
}

/* k_b [nh][R][nope] and v_b [nh][dv][R] of rank r (fw_vec_free with nh*R*nope
 * and nh*dv*R floats). Without a plan: the file's attn_k_b / attn_v_b as they
 * are, or a legacy attn_kv_b split. With a plan: the rank's kv_b_proj slice
 * as the engine loads it ([heads*(nope+dv)][R']) split, where a slice of
 * other sizes (a broken plan) fills what it covers and leaves zeros. */
static int mla_kv_b(fw_exec *c, int r, int64_t il, int64_t nh, int64_t R, int64_t nope,
                    int64_t dv, float **kb, float **vb, gguf_error *err)
{
    *kb = *vb = NULL;
    fw_w tkb, tvb, tkv;
    memset(&tkv, 0, sizeof tkv);
    float *kv = NULL;
    int64_t kv_n = 0; /* floats of kv */
    int rc = 0;
    if (!c->plan) {
        fw_w_file(c, il, GGUF_ROLE_ATTN_K_B, &tkb);
        fw_w_file(c, il, GGUF_ROLE_ATTN_V_B, &tvb);
        if (fw_w_has(&tkb) && fw_w_has(&tvb)) {
            if ((rc = fw_w_floats(c, &tkb, kb, err)))
                return rc;
            if ((rc = fw_w_floats(c, &tvb, vb, err))) {
                fw_vec_free(c, *kb, nh * R * nope);
                *kb = NULL;
            }
            return rc;
        }
    }
    if ((rc = fw_w_get(c, r, il, GGUF_ROLE_ATTN_KV_B, &tkv, err)))
        goto done;
    if (!fw_w_has(&tkv)) {
        rc = fw_missing(il, c->plan ? GGUF_ROLE_ATTN_KV_B : GGUF_ROLE_ATTN_K_B, err);
        goto done;
    }
    if ((rc = fw_w_floats(c, &tkv, &kv, err)))
        goto done;
    const int64_t Rb = tkv.ne[0], hb = fw_w_rows(&tkv) / (nope + dv);
    kv_n = fw_w_rows(&tkv) * Rb;
    if (Rb != R || hb != nh) {
        /* cut or zero-fill to [nh][nope+dv][R] */
        float *fit = calloc((size_t)(nh * (nope + dv) * R) + 1, sizeof(float));
        if (!fit) {
            rc = fw_nomem(err, "kv_b");
            goto done;
        }
        const int64_t Ru = Rb < R ? Rb : R;
        for (int64_t h = 0; h < nh && h < hb; h++)
            for (int64_t j = 0; j < nope + dv; j++)
                memcpy(fit + (h * (nope + dv) + j) * R, kv + (h * (nope + dv) + j) * Rb,
                       (size_t)Ru * sizeof(float));
        fw_vec_free(c, kv, kv_n);
        kv = fit;
        kv_n = nh * (nope + dv) * R;
        c->resident += (uint64_t)kv_n * sizeof(float);
    }
    *kb = malloc((size_t)(nh * R * nope) * sizeof(float) + 1);
    *vb = malloc((size_t)(nh * dv * R) * sizeof(float) + 1);
    if (!*kb || !*vb) {
        free(*kb);
        free(*vb);
        *kb = *vb = NULL;
        rc = fw_nomem(err, "kv_b");
        goto done;
    }
    c->resident += (uint64_t)(nh * R * (nope + dv)) * sizeof(float);
    if (c->resident > c->st.peak_weight_bytes)
        c->st.peak_weight_bytes = c->resident;
    gguf_mla_kv_b_split(kv, nh, R, nope, dv, *kb, *vb);
done:
    if (kv)
        fw_vec_free(c, kv, kv_n);
    fw_w_release(&tkv);
    return rc;
}

static int attn_mla(fw_exec *c, int r, int64_t il, const double *cur, int64_t n, double *out,
                    gguf_error *err)
{
    const gguf_hparams *hp = c->s.hp;
    const int64_t E = hp->n_embd, nope = hp->qk_nope, rp = hp->qk_rope, dk = nope + rp,
                  dv = hp->v_head, nk_all = c->n_past + n;
    const int prec = c->s.prec;
    static const gguf_role roles[7] = {GGUF_ROLE_ATTN_Q_A,      GGUF_ROLE_ATTN_Q_A_NORM,
                                       GGUF_ROLE_ATTN_Q_B,      GGUF_ROLE_ATTN_Q,
                                       GGUF_ROLE_ATTN_KV_A_MQA, GGUF_ROLE_ATTN_KV_A_NORM,
                                       GGUF_ROLE_ATTN_OUT};
    fw_w w[7];
    memset(w, 0, sizeof w);
    const fw_w *wqa = &w[0], *qan = &w[1], *wqb = &w[2], *wq = &w[3], *wkva = &w[4],
               *kvan = &w[5], *wo = &w[6];
    double *qr = NULL, *q = NULL, *o = NULL;
    uint8_t *keep = NULL;
    float *kb = NULL, *vb = NULL;
    int64_t nh = 0, R = 0;
    int rc = 0;
    for (int i = 0; i < 7 && !rc; i++)
        rc = fw_w_get(c, r, il, roles[i], &w[i], err);
    if (rc)
        goto done;
    const fw_w *wqh = fw_w_has(wqb) ? wqb : wq;
    if (!fw_w_has(wqh) || !fw_w_has(wkva) || !fw_w_has(wo)) {
        rc = fw_missing(il, !fw_w_has(wqh) ? GGUF_ROLE_ATTN_Q_B
                            : !fw_w_has(wkva) ? GGUF_ROLE_ATTN_KV_A_MQA : GGUF_ROLE_ATTN_OUT,
                        err);
        goto done;
    }
    nh = fw_w_rows(wqh) / dk;
    const int64_t KW = fw_w_rows(wkva);
    R = KW - rp;
    if (nh < 1 || R < 1) {
        rc = less_than_a_head(il, r, err);
        goto done;
    }
    const bool has_idx = hp->idx_head_dim > 0 && gguf_model_get(c->s.m, il, GGUF_ROLE_IDX_ATTN_K);
    fw_kv *L;
    if ((rc = fw_kv_reserve(c, r, il, KW, 0, has_idx ? hp->idx_head_dim : 0, &L, err)))
        goto done;
    q = fw_xcalloc((size_t)(n * nh * dk), sizeof(double));
    o = fw_xcalloc((size_t)(n * nh * dv), sizeof(double));
    keep = fw_xcalloc((size_t)(n * nk_all), 1);
    if (!q || !o || !keep) {
        rc = fw_nomem(err, "MLA");
        goto done;
    }
    /* queries: through the q LoRA (q_a, its norm, q_b), or one attn_q */
    if (fw_w_has(wqb)) {
        const int64_t ql = fw_w_rows(wqa);
        qr = fw_xcalloc((size_t)(n * ql), sizeof(double));
        if (!qr) {
            rc = fw_nomem(err, "MLA");
            goto done;
        }
        if ((rc = fw_mm(c, qr, ql, cur, E, 0, wqa, NULL, n, err)) ||
            (rc = fw_norm(c, qr, qr, n, ql, ql, qan, err)) ||
            (rc = fw_mm(c, q, nh * dk, qr, ql, 0, wqb, NULL, n, err)))
            goto done;
    } else if ((rc = fw_mm(c, q, nh * dk, cur, E, 0, wq, NULL, n, err))) {
        goto done;
    }
    /* the latent [kv_cmpr (normed) | k_pe (roped)] into the cache */
    double *lat = L->k + c->n_past * KW;
    if ((rc = fw_mm(c, lat, KW, cur, E, 0, wkva, NULL, n, err)) ||
        (rc = fw_norm(c, lat, lat, n, R, KW, kvan, err)))
        goto done;
    for (int64_t t = 0; t < n; t++) {
        fw_rope_apply(&c->rt.rope, lat + t * KW + R, c->n_past + t, prec);
        for (int64_t h = 0; h < nh; h++)
            fw_rope_apply(&c->rt.rope, q + (t * nh + h) * dk + nope, c->n_past + t, prec);
    }
    /* indexer selection (glm-dsa), else all causal keys */
    if (has_idx && qr && hp->q_lora_rank == fw_w_rows(wqa)) {
        if ((rc = fw_dsa_indexer(c, il, L->idx_k, cur, qr, n, keep, nk_all, err)))
            goto done;
    } else {
        memset(keep, 1, (size_t)(n * nk_all));
    }
    if ((rc = mla_kv_b(c, r, il, nh, R, nope, dv, &kb, &vb, err)) ||
        (rc = mla_core(c, L->k, KW, R, nh, nope, rp, dv, q, kb, vb, keep, n, c->rt.kq_scale, o,
                       err)))
        goto done;
    rc = fw_mm(c, out, E, o, nh * dv, 0, wo, NULL, n, err);
done:
    if (kb)
        fw_vec_free(c, kb, nh * R * nope);
    if (vb)
        fw_vec_free(c, vb, nh * R * dv);
    free(qr);
    free(q);
    free(o);
    free(keep);
    for (int i = 0; i < 7; i++)
        fw_w_release(&w[i]);
    return rc;
}

int fw_attn(fw_exec *c, int r, int64_t il, const double *cur, int64_t n, double *out,
            gguf_error *err)
{
    return c->s.hp->is_mla ? attn_mla(c, r, il, cur, n, out, err)
                           : attn_gqa(c, r, il, cur, n, out, err);
}
