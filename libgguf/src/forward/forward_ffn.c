/* FFN of one rank: dense SwiGLU, and MoE (routing, the routed experts the
 * rank owns, its part of the shared experts). */
#include <stdlib.h>
#include <string.h>

#include "util/error_lib.h"
#include "forward/forward_exec.h"
#include "forward/forward_stream.h"

typedef struct swiglu_job {
    double *hg;
    const double *hu;
    int prec;
} swiglu_job;

static void swiglu_range(void *arg, int64_t b, int64_t e)
{
    const swiglu_job *j = arg;
    fw_swiglu(j->hg + b, j->hg + b, j->hu + b, e - b, j->prec);
}

/* out [n][E] = down(silu(gate x) * up x): gate/up ne = [E, ff], down
 * ne = [ff', E] (ff' != ff only under a broken plan: the common part).
 * gate x and up x go to the context's scratch (every block needs them
 * again); the matmuls write every element of them (gate and up have ff
 * rows each), so what a buffer held before never shows. */
static int swiglu(fw_exec *c, const fw_w *g, const fw_w *u, const fw_w *d, const double *x,
                  int64_t n, double *out, gguf_error *err)
{
    const int64_t E = c->s.hp->n_embd, ff = fw_w_rows(g);
    double *hg = fw_exec_scratch(c, 0, (size_t)(n * ff));
    double *hu = fw_exec_scratch(c, 1, (size_t)(n * ff));
    if (!hg || !hu)
        return fw_nomem(err, "FFN");
    int rc;
    if (!(rc = fw_mm(c, hg, ff, x, E, 0, g, NULL, n, err)) &&
        !(rc = fw_mm(c, hu, ff, x, E, 0, u, NULL, n, err))) {
        swiglu_job j = {hg, hu, c->s.prec};
        if (!(rc = fw_exec_parallel(c, n * ff, 4096, swiglu_range, &j, err)))
            rc = fw_mm(c, out, E, hg, ff, 0, d, NULL, n, err);
    }
    return rc;
}

int fw_ffn_dense(fw_exec *c, int r, int64_t il, gguf_role rg, gguf_role ru, gguf_role rd,
                 const double *x, int64_t n, double *out, bool *reduce, gguf_error *err)
{
    fw_w g, u, d;
    memset(&g, 0, sizeof g);
    u = d = g;
    int rc;
    if ((rc = fw_w_get(c, r, il, rg, &g, err)) || (rc = fw_w_get(c, r, il, ru, &u, err)) ||
        (rc = fw_w_get(c, r, il, rd, &d, err)))
        goto done;
    if (!fw_w_has(&g) || !fw_w_has(&u) || !fw_w_has(&d)) {
        rc = fw_missing(il, !fw_w_has(&g) ? rg : !fw_w_has(&u) ? ru : rd, err);
        goto done;
    }
    if (fw_w_rows(&g) != fw_w_rows(&u)) {
        rc = gguf_fail(err, GGUF_E_BAD_SHAPE, GGUF_NO_OFFSET,
                       "forward: blk.%lld rank %d: gate and up slices differ", (long long)il, r);
        goto done;
    }
    *reduce = d.e ? d.e->reduce_sum : false;
    rc = swiglu(c, &g, &u, &d, x, n, out, err);
done:
    fw_w_release(&g);
    fw_w_release(&u);
    fw_w_release(&d);
    return rc;
}

/* The order in which a token's experts are summed: by expert id for the
 * single-rank reference (as HF's loop over experts does), by routing rank k
 * for virtual ranks (as engines' fused MoE kernels sum the top-k). */
static void sum_order(const int64_t *ids, int64_t nu, bool by_id, int64_t *order)
{
    for (int64_t k = 0; k < nu; k++)
        order[k] = k;
    if (!by_id)
        return;
    for (int64_t i = 1; i < nu; i++)
        for (int64_t j = i; j > 0 && ids[order[j]] < ids[order[j - 1]]; j--) {
            const int64_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
}

int fw_ffn_moe(fw_exec *c, int r, int64_t il, const double *x, int64_t n, fw_moe_out *out,
               gguf_error *err)
{
    const gguf_hparams *hp = c->s.hp;
    const int64_t E = hp->n_embd, ne = hp->n_expert, nu = hp->n_expert_used;
    const int prec = c->s.prec;
    static const gguf_role roles[5] = {GGUF_ROLE_FFN_GATE_INP, GGUF_ROLE_FFN_EXP_PROBS_B,
                                       GGUF_ROLE_FFN_GATE_EXPS, GGUF_ROLE_FFN_UP_EXPS,
                                       GGUF_ROLE_FFN_DOWN_EXPS};
    fw_w w[5];
    memset(w, 0, sizeof w);
    const fw_w *gi = &w[0], *bt = &w[1], *ge = &w[2], *ue = &w[3], *de = &w[4];
    double *logits = fw_xcalloc((size_t)(n * ne), sizeof(double));
    int64_t *ids = fw_xcalloc((size_t)(n * nu), sizeof(int64_t));
    double *wts = fw_xcalloc((size_t)(n * nu), sizeof(double));
    double *scr = fw_xcalloc((size_t)(2 * ne + hp->n_group + 2), sizeof(double));
    double *capv = fw_xcalloc((size_t)(n * nu), sizeof(double));
    double *xs = fw_xcalloc((size_t)(n * nu * E), sizeof(double));
    double *ys = fw_xcalloc((size_t)(n * nu * E), sizeof(double));
    double *wy = fw_xcalloc((size_t)(n * nu * E), sizeof(double)); /* weighted, per (t, k) */
    uint8_t *have = fw_xcalloc((size_t)(n * nu), 1);
    int64_t *pick = fw_xcalloc((size_t)(n * nu), sizeof(int64_t)); /* (t, k) of gathered rows */
    int64_t *order = fw_xcalloc((size_t)nu, sizeof(int64_t));
    float *bias = NULL;
    int rc = 0;
    if (!logits || !ids || !wts || !scr || !capv || !xs || !ys || !wy || !have || !pick ||
        !order) {
        rc = fw_nomem(err, "MoE");
        goto done;
    }
    for (int i = 0; i < 5 && !rc; i++)
        rc = fw_w_get(c, r, il, roles[i], &w[i], err);
    if (rc)
        goto done;
    for (int i = 0; i < 5 && !rc; i++)
        if (i != 1 && !fw_w_has(&w[i]))
            rc = fw_missing(il, roles[i], err);
    if (rc)
        goto done;
    /* routing, replicated on every rank */
    if ((rc = fw_mm(c, logits, ne, x, E, 0, gi, NULL, n, err)))
        goto done;
    if (fw_w_has(bt) && c->rt.use_exp_probs_b && (rc = fw_vec(c, bt, ne, &bias, err)))
        goto done;
    for (int64_t t = 0; t < n; t++)
        fw_moe_route(&c->rt.moe, logits + t * ne, bias, ids + t * nu, wts + t * nu, scr, prec);
    for (int64_t i = 0; i < n * nu; i++)
        capv[i] = (double)ids[i];
    if ((rc = fw_capture(c, (int)il, GGUF_CAP_MOE_EXPERTS, r, capv, nu, n, err)) ||
        (rc = fw_capture(c, (int)il, GGUF_CAP_MOE_WEIGHTS, r, wts, nu, n, err)))
        goto done;
    /* Each expert the rank owns (the engine's rule) that some token routes to:
     * gather its tokens and run it once, from the rank's local slices. */
    int64_t first = 0, end = ne;
    if (c->plan)
        gguf_shard_plan_experts(c->plan, r, &first, &end);
    const int64_t ffl = ge->ne[1], nloc = ge->ne[2];
    for (int64_t e = first; e < end; e++) {
        const int64_t le = e - first;
        if (le >= nloc || le >= de->ne[2])
            continue;
        int64_t m = 0;
        for (int64_t t = 0; t < n; t++)
            for (int64_t k = 0; k < nu; k++)
                if (ids[t * nu + k] == e) {
                    pick[m] = t * nu + k;
                    memcpy(xs + m * E, x + t * E, (size_t)E * sizeof(double));
                    m++;
                }
        if (m == 0)
            continue;
        c->st.experts_loaded++;
        const fw_w g1 = fw_w_sub(ge, le * ffl, ffl), u1 = fw_w_sub(ue, le * ffl, ffl),
                   d1 = fw_w_sub(de, le * E, E);
        if ((rc = swiglu(c, &g1, &u1, &d1, xs, m, ys, err)))
            goto done;
        for (int64_t i = 0; i < m; i++) {
            double *dst = wy + pick[i] * E;
            for (int64_t j = 0; j < E; j++) {
                double v = ys[i * E + j] * wts[pick[i]];
                if (prec == GGUF_FWD_F32)
                    v = (double)(float)v; /* weighted expert output, then the sum */
                dst[j] = v;
            }
            have[pick[i]] = 1;
        }
    }
    memset(out->routed, 0, (size_t)(n * E) * sizeof(double));
    for (int64_t t = 0; t < n; t++) {
        sum_order(ids + t * nu, nu, !c->plan, order);
        for (int64_t i = 0; i < nu; i++) {
            const int64_t k = order[i];
            if (!have[t * nu + k])
                continue;
            const double *src = wy + (t * nu + k) * E;
            for (int64_t j = 0; j < E; j++)
                out->routed[t * E + j] += src[j];
        }
    }
    fw_round(out->routed, n * E, prec);
    /* Expert parallel: a token's experts live on different ranks, so the
     * routed outputs are always combined (summed) over ranks; the plan's
     * reduce flag governs the moe-tp partial sums of one expert. */
    out->reduce_routed = c->plan && (de->e->reduce_sum || gguf_shard_plan_opts(c->plan)->ep > 1);
    fw_w sh;
    fw_w_file(c, il, GGUF_ROLE_FFN_GATE_SHEXP, &sh);
    out->has_shared = c->plan ? gguf_shard_plan_get(c->plan, il, GGUF_ROLE_FFN_GATE_SHEXP) != NULL
                              : fw_w_has(&sh);
    if (out->has_shared) {
        if ((rc = fw_ffn_dense(c, r, il, GGUF_ROLE_FFN_GATE_SHEXP, GGUF_ROLE_FFN_UP_SHEXP,
                               GGUF_ROLE_FFN_DOWN_SHEXP, x, n, out->shared, &out->reduce_shared,
                               err)))
            goto done;
        const double s = c->rt.shared_scale;
        if (s != 1.0 && s != 0.0)
            for (int64_t i = 0; i < n * E; i++)
                out->shared[i] *= s;
        fw_round(out->shared, n * E, prec);
    }
done:
    if (bias)
        fw_vec_free(c, bias, ne);
    for (int i = 0; i < 5; i++)
        fw_w_release(&w[i]);
    free(logits);
    free(ids);
    free(wts);
    free(scr);
    free(capv);
    free(xs);
    free(ys);
    free(wy);
    free(have);
    free(pick);
    free(order);
    return rc;
}
