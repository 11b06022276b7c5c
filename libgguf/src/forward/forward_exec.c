/* The block loop of the CPU forward pass, one description for every rank
 * count:
 *
 *   embedding   token rows (virtual ranks: vocab-parallel lookup, all-reduce)
 *   per block   attn_norm -> attention -> [all-reduce] -> residual
 *               ffn_norm  -> dense FFN or MoE (+ shared experts) -> [all-reduce]
 *               -> residual
 *   head        output_norm -> logits (virtual ranks: vocab-parallel rows,
 *               all-gathered in rank order and cut to n_vocab)
 *
 * Without a plan there is one rank, reading the file, and no collective.
 * With a plan (virtual tensor parallel) each of the tp ranks computes with
 * only the weights the plan gives it and keeps its own residual stream, KV
 * cache and captures (rank r), and the engine's collectives are simulated
 * exactly: all-reduce (sum in rank order) after row-parallel ops where the
 * plan says reduce_sum, and always over expert-parallel MoE outputs. A plan
 * that breaks the math on one rank so shows up on that rank, at the op where
 * it happens. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/error_lib.h"
#include "forward/forward_exec.h"
#include "forward/forward_stream.h"

/* ------------------------------------------------------------ collectives */

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

static void add_rows(double *x, const double *y, int64_t n, int prec)
{
    for (int64_t i = 0; i < n; i++)
        x[i] += y[i];
    fw_round(x, n, prec);
}

/* ------------------------------------------------------------ context */

int fw_exec_create(fw_exec **out, const gguf_model *m, const gguf_shard_plan *plan,
                   const gguf_fwd_opts *opts, gguf_error *err)
{
    *out = NULL;
    fw_exec *c = calloc(1, sizeof *c);
    if (!c)
        return fw_nomem(err, "context");
    int rc = fw_setup_init_any(&c->s, m, opts, err);
    if (rc) {
        free(c);
        return rc;
    }
    c->hf = gguf_model_checkpoint(m) != NULL;
    c->plan = plan;
    c->tp = plan ? gguf_shard_plan_ranks(plan) : 1;
    fw_runtime_init(&c->rt, &c->s, plan ? gguf_shard_plan_runtime(plan) : NULL);
    c->page = sysconf(_SC_PAGESIZE);
    c->dq.n_threads = c->s.o.n_threads;
    /* the threads start here, not inside the first eval */
    if ((rc = fw_stream_create(&c->stream, c->s.o.n_threads, err))) {
        fw_exec_free(c);
        return rc;
    }
    const int64_t nl = c->s.hp->n_layer > 0 ? c->s.hp->n_layer : 1;
    c->kv = calloc((size_t)(c->tp * nl), sizeof *c->kv);
    c->x = calloc((size_t)c->tp, sizeof *c->x);
    if (!c->kv || !c->x) {
        fw_exec_free(c);
        return fw_nomem(err, "cache");
    }
    *out = c;
    return 0;
}

void fw_exec_free(fw_exec *c)
{
    if (!c)
        return;
    if (c->kv)
        for (int64_t i = 0; i < (int64_t)c->tp * c->s.hp->n_layer; i++) {
            free(c->kv[i].k);
            free(c->kv[i].v);
            free(c->kv[i].idx_k);
        }
    if (c->x)
        for (int r = 0; r < c->tp; r++)
            free(c->x[r]);
    free(c->kv);
    free(c->x);
    fw_stream_free(c->stream);
    fw_setup_free(&c->s);
    free(c);
}

/* Room for need_pos positions in every cache allocated so far (the others
 * are sized on first use), and the residual streams for n tokens. */
static int prepare(fw_exec *c, int64_t need_pos, int64_t n, gguf_error *err)
{
    if (need_pos > c->cap) {
        int64_t cap = c->cap ? c->cap : 64;
        while (cap < need_pos)
            cap *= 2;
        for (int64_t i = 0; i < (int64_t)c->tp * c->s.hp->n_layer; i++) {
            fw_kv *L = &c->kv[i];
            double **bufs[3] = {&L->k, &L->v, &L->idx_k};
            const int64_t widths[3] = {L->kw, L->vw, L->iw};
            for (int b = 0; b < 3; b++) {
                if (!*bufs[b])
                    continue;
                double *q = realloc(*bufs[b], (size_t)(cap * (widths[b] > 0 ? widths[b] : 1)) *
                                                      sizeof(double) + 8);
                if (!q)
                    return fw_nomem(err, "KV cache");
                *bufs[b] = q;
            }
        }
        c->cap = cap;
    }
    for (int r = 0; r < c->tp; r++) {
        free(c->x[r]);
        c->x[r] = fw_xcalloc((size_t)(n * c->s.hp->n_embd), sizeof(double));
        if (!c->x[r])
            return fw_nomem(err, "activations");
    }
    return 0;
}

/* ------------------------------------------------------------ embedding, head */

static int embed(fw_exec *c, const int32_t *tokens, int64_t n, double **part, gguf_error *err)
{
    const int64_t E = c->s.hp->n_embd;
    if (!c->plan) {
        fw_w te;
        fw_w_file(c, -1, GGUF_ROLE_TOKEN_EMBD, &te);
        if (!fw_w_has(&te))
            return fw_missing(-1, GGUF_ROLE_TOKEN_EMBD, err);
        for (int64_t t = 0; t < n; t++) {
            const fw_w row = fw_w_sub(&te, tokens[t], 1);
            float *f;
            int rc = fw_vec(c, &row, E, &f, err);
            if (rc)
                return rc;
            for (int64_t i = 0; i < E; i++)
                c->x[0][t * E + i] = f[i];
            fw_vec_free(c, f, E);
        }
        return 0;
    }
    /* vocab-parallel: rank r serves ids [off_r, off_r + rows_r), zeros elsewhere */
    int64_t off = 0;
    for (int r = 0; r < c->tp; r++) {
        fw_w te;
        int rc = fw_w_get(c, r, -1, GGUF_ROLE_TOKEN_EMBD, &te, err);
        if (rc)
            return rc;
        const int64_t rows = te.ne[1];
        memset(part[r], 0, (size_t)(n * E) * sizeof(double));
        for (int64_t t = 0; t < n; t++) {
            const int64_t id = tokens[t];
            if (id >= off && id < off + rows && te.f)
                for (int64_t i = 0; i < E; i++)
                    part[r][t * E + i] = te.f[(id - off) * te.ne[0] + i];
        }
        off += rows;
        fw_w_release(&te);
    }
    allreduce(part, c->tp, n * E, true, c->s.prec);
    for (int r = 0; r < c->tp; r++)
        memcpy(c->x[r], part[r], (size_t)(n * E) * sizeof(double));
    return 0;
}

/* output_norm and the logits rows each rank holds (its vocab slice; the
 * whole vocabulary for one rank), gathered in rank order into lg. */
static int head(fw_exec *c, double **cur, int64_t n, double *lg, gguf_error *err)
{
    const int64_t E = c->s.hp->n_embd, V = c->s.hp->n_vocab;
    int64_t off = 0;
    int rc = 0;
    for (int r = 0; r < c->tp && !rc; r++) {
        fw_w nw, wo;
        memset(&wo, 0, sizeof wo);
        if ((rc = fw_w_get(c, r, -1, GGUF_ROLE_OUTPUT_NORM, &nw, err)))
            break;
        rc = fw_norm(c, cur[r], c->x[r], n, E, E, &nw, err);
        fw_w_release(&nw);
        if (rc || (rc = fw_capture(c, -1, GGUF_CAP_OUTPUT_NORM, r, cur[r], E, n, err)))
            break;
        if ((rc = fw_w_get(c, r, -1, GGUF_ROLE_OUTPUT, &wo, err)))
            break;
        if (!fw_w_has(&wo) && (rc = fw_w_get(c, r, -1, GGUF_ROLE_TOKEN_EMBD, &wo, err)))
            break; /* tied embeddings */
        if (!fw_w_has(&wo)) {
            rc = fw_missing(-1, GGUF_ROLE_OUTPUT, err);
            break;
        }
        const int64_t rows = fw_w_rows(&wo), keep = off >= V ? 0 : rows < V - off ? rows : V - off;
        if (keep > 0) {
            const fw_w kept = fw_w_sub(&wo, 0, keep);
            rc = fw_mm(c, lg + off, V, cur[r], E, 0, &kept, NULL, n, err);
        }
        fw_w_release(&wo);
        off += rows;
    }
    return rc;
}

/* ------------------------------------------------------------ eval */

static int block(fw_exec *c, int64_t il, int64_t n, double **cur, double **part, double **part2,
                 gguf_error *err)
{
    const int64_t E = c->s.hp->n_embd;
    const int L = (int)il, tp = c->tp, prec = c->s.prec;
    int rc;
    for (int r = 0; r < tp; r++) {
        fw_w nw;
        if ((rc = fw_w_get(c, r, il, GGUF_ROLE_ATTN_NORM, &nw, err)))
            return rc;
        rc = fw_norm(c, cur[r], c->x[r], n, E, E, &nw, err);
        fw_w_release(&nw);
        if (rc || (rc = fw_capture(c, L, GGUF_CAP_ATTN_NORM, r, cur[r], E, n, err)) ||
            (rc = fw_attn(c, r, il, cur[r], n, part[r], err)))
            return rc;
    }
    if (c->plan) {
        const gguf_shard_tensor *eo = gguf_shard_plan_get(c->plan, il, GGUF_ROLE_ATTN_OUT);
        allreduce(part, tp, n * E, eo ? eo->reduce_sum : true, prec);
    }
    for (int r = 0; r < tp; r++) {
        if ((rc = fw_capture(c, L, GGUF_CAP_ATTN_OUT, r, part[r], E, n, err)))
            return rc;
        add_rows(c->x[r], part[r], n * E, prec);
        if ((rc = fw_capture(c, L, GGUF_CAP_ATTN_RESIDUAL, r, c->x[r], E, n, err)))
            return rc;
    }
    const bool moe = gguf_model_layer_kind(c->s.m, il) == GGUF_LAYER_MOE;
    bool red = true, red_sh = true, has_sh = false;
    for (int r = 0; r < tp; r++) {
        fw_w nw;
        if ((rc = fw_w_get(c, r, il, GGUF_ROLE_FFN_NORM, &nw, err)))
            return rc;
        if (!fw_w_has(&nw) && (rc = fw_w_get(c, r, il, GGUF_ROLE_ATTN_POST_NORM, &nw, err)))
            return rc;
        rc = fw_norm(c, cur[r], c->x[r], n, E, E, &nw, err);
        fw_w_release(&nw);
        if (rc || (rc = fw_capture(c, L, GGUF_CAP_FFN_NORM, r, cur[r], E, n, err)))
            return rc;
        memset(part2[r], 0, (size_t)(n * E) * sizeof(double));
        if (moe) {
            fw_moe_out mo = {part[r], part2[r], true, true, false};
            rc = fw_ffn_moe(c, r, il, cur[r], n, &mo, err);
            red = mo.reduce_routed;
            red_sh = mo.reduce_shared;
            has_sh = mo.has_shared;
        } else {
            rc = fw_ffn_dense(c, r, il, GGUF_ROLE_FFN_GATE, GGUF_ROLE_FFN_UP, GGUF_ROLE_FFN_DOWN,
                              cur[r], n, part[r], &red, err);
        }
        if (rc)
            return rc;
    }
    if (c->plan)
        allreduce(part, tp, n * E, red, prec);
    if (has_sh) {
        if (c->plan)
            allreduce(part2, tp, n * E, red_sh, prec);
        for (int r = 0; r < tp; r++)
            add_rows(part[r], part2[r], n * E, prec);
    }
    for (int r = 0; r < tp; r++) {
        if ((rc = fw_capture(c, L, GGUF_CAP_FFN_OUT, r, part[r], E, n, err)))
            return rc;
        add_rows(c->x[r], part[r], n * E, prec);
        if ((rc = fw_capture(c, L, GGUF_CAP_RESIDUAL, r, c->x[r], E, n, err)))
            return rc;
    }
    return 0;
}

int fw_exec_eval(fw_exec *c, const int32_t *tokens, int64_t n, float *logits_out,
                 gguf_error *err)
{
    const int64_t E = c->s.hp->n_embd, V = c->s.hp->n_vocab;
    const int tp = c->tp;
    int rc = prepare(c, c->n_past + n, n, err);
    if (rc)
        return rc;
    double **cur = calloc((size_t)tp, sizeof(double *));
    double **part = calloc((size_t)tp, sizeof(double *));
    double **part2 = calloc((size_t)tp, sizeof(double *));
    double *lg = NULL;
    if (!cur || !part || !part2) {
        rc = fw_nomem(err, "activations");
        goto done;
    }
    for (int r = 0; r < tp; r++) {
        cur[r] = fw_xcalloc((size_t)(n * E), sizeof(double));
        part[r] = fw_xcalloc((size_t)(n * E), sizeof(double));
        part2[r] = fw_xcalloc((size_t)(n * E), sizeof(double));
        if (!cur[r] || !part[r] || !part2[r]) {
            rc = fw_nomem(err, "activations");
            goto done;
        }
    }
    if ((rc = embed(c, tokens, n, part, err)))
        goto done;
    for (int64_t il = 0; il < c->s.hp->n_layer_main; il++)
        if ((rc = block(c, il, n, cur, part, part2, err)))
            goto done;
    lg = fw_xcalloc((size_t)(n * V), sizeof(double));
    if (!lg) {
        rc = fw_nomem(err, "logits");
        goto done;
    }
    if ((rc = head(c, cur, n, lg, err)))
        goto done;
    /* every rank holds the gathered logits */
    for (int r = 0; r < tp; r++)
        if ((rc = fw_capture(c, -1, GGUF_CAP_LOGITS, r, lg, V, n, err)))
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
    return rc;
}
