/* The layer loop of the reference forward pass: embeddings, attention (GQA
 * or MLA, with the glm-dsa indexer), dense or MoE FFN, output head. Weights
 * are dequantized from the mmap right before the matmul that uses them, in
 * bounded chunks of rows, and freed right after. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "error_internal.h"
#include "forward_internal.h"
#include "gguf/dequant.h"

/* Most floats a matmul dequantizes at once (rows are grouped up to this). */
#define FW_CHUNK_FLOATS (8u << 20) /* 32 MiB */

/* ------------------------------------------------------------ helpers */

void *fw_xcalloc(size_t n, size_t sz)
{
    if (n == 0)
        n = 1;
    return calloc(n, sz);
}

int fw_nomem(gguf_error *err, const char *what)
{
    return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "forward: out of memory (%s)", what);
}

/* Dequantize rows [row0, row0+n_rows) of a tensor seen as a matrix of ne[0]
 * wide rows. The buffer counts as resident weights until fw_release(). */
static int fw_dequant(gguf_fwd_ctx *c, const gguf_tensor *t, int64_t row0, int64_t n_rows,
                      float **out, gguf_error *err)
{
    uint64_t row_bytes;
    int rc = gguf_type_row_bytes(t->type, t->ne[0], &row_bytes);
    if (rc)
        return gguf_fail(err, rc, t->file_offset, "%s: bad row", t->name);
    float *buf = malloc((size_t)(n_rows * t->ne[0]) * sizeof(float) + 1);
    if (!buf)
        return fw_nomem(err, t->name);
    rc = gguf_dequant_rows(t->type, t->data + (uint64_t)row0 * row_bytes, 0, buf, t->ne[0], n_rows,
                           &c->dq, err);
    if (rc) {
        free(buf);
        return rc;
    }
    if (c->o.drop_pages && c->page > 0) {
        /* Read-only file mapping: dropped pages are read again on demand. Only
         * whole pages inside the range, so neighbours are never touched. */
        uintptr_t b = (uintptr_t)(t->data + (uint64_t)row0 * row_bytes);
        uintptr_t e = b + (uintptr_t)((uint64_t)n_rows * row_bytes);
        b = (b + c->page - 1) & ~(uintptr_t)(c->page - 1);
        e &= ~(uintptr_t)(c->page - 1);
        if (e > b)
            madvise((void *)b, e - b, MADV_DONTNEED);
    }
    c->st.weight_bytes += (uint64_t)n_rows * row_bytes;
    c->st.dequant_floats += (uint64_t)(n_rows * t->ne[0]);
    c->resident += (uint64_t)(n_rows * t->ne[0]) * sizeof(float);
    if (c->resident > c->st.peak_weight_bytes)
        c->st.peak_weight_bytes = c->resident;
    *out = buf;
    return 0;
}

static void fw_release(gguf_fwd_ctx *c, float *buf, int64_t n_floats)
{
    if (!buf)
        return;
    c->resident -= (uint64_t)n_floats * sizeof(float);
    free(buf);
}

static int64_t t_rows(const gguf_tensor *t)
{
    return t->ne[1] * t->ne[2] * t->ne[3];
}

/* y[t][o] = W[row0+o] . x[t] (+ bias) for o < n_out, dequantizing W in
 * chunks. */
static int fw_mm(gguf_fwd_ctx *c, double *y, int64_t ys, const double *x, int64_t xs,
                 const gguf_tensor *w, int64_t row0, int64_t n_out, const gguf_tensor *bias,
                 int64_t n_tok, gguf_error *err)
{
    const int64_t n_in = w->ne[0];
    if (ys == 0)
        ys = n_out; /* packed over the whole output, not over one chunk */
    if (xs == 0)
        xs = n_in;
    float *b = NULL;
    int rc = 0;
    if (bias && (rc = fw_dequant(c, bias, 0, 1, &b, err)))
        return rc;
    int64_t chunk = (int64_t)FW_CHUNK_FLOATS / n_in;
    if (chunk < 1)
        chunk = 1;
    for (int64_t r = 0; r < n_out && !rc; r += chunk) {
        int64_t nr = n_out - r < chunk ? n_out - r : chunk;
        float *buf = NULL;
        if ((rc = fw_dequant(c, w, row0 + r, nr, &buf, err)))
            break;
        fw_matmul(y + r, ys, x, xs, buf, b ? b + row0 + r : NULL, n_in, nr, n_tok,
                  c->o.n_threads, c->prec);
        fw_release(c, buf, nr * n_in);
    }
    fw_release(c, b, bias ? bias->ne[0] : 0);
    return rc;
}

static const gguf_tensor *W(const gguf_fwd_ctx *c, int64_t il, gguf_role role)
{
    return gguf_model_get(c->m, il, role);
}

static int need(const gguf_tensor *t, int64_t il, gguf_role role, gguf_error *err)
{
    if (t)
        return 0;
    return gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET, "forward: blk.%lld.%s.%s missing",
                     (long long)il, gguf_role_name(role), gguf_role_suffix(role));
}

/* RMSNorm every row of x into y with a norm weight tensor. */
static int fw_norm_rows(gguf_fwd_ctx *c, double *y, const double *x, int64_t n_tok, int64_t width,
                        int64_t stride, const gguf_tensor *w, gguf_error *err)
{
    float *wf = NULL;
    int rc;
    if (w && (rc = fw_dequant(c, w, 0, 1, &wf, err)))
        return rc;
    for (int64_t t = 0; t < n_tok; t++)
        fw_rmsnorm(y + t * stride, x + t * stride, wf, width, c->hp->rms_eps, c->prec);
    fw_release(c, wf, w ? w->ne[0] : 0);
    return 0;
}

int fw_capture(gguf_fwd_ctx *c, int layer, const char *op, int rank, const double *data,
               int64_t width, int64_t n_tok, gguf_error *err)
{
    if (!c->o.capture)
        return 0;
    float *f = malloc((size_t)(width * n_tok) * sizeof(float) + 1);
    if (!f)
        return fw_nomem(err, "capture");
    for (int64_t i = 0; i < width * n_tok; i++)
        f[i] = (float)data[i];
    char name[64];
    if (layer >= 0)
        snprintf(name, sizeof name, "blk.%d.%s", layer, op);
    else
        snprintf(name, sizeof name, "%s", op);
    gguf_fwd_capture cap = {name, layer, op, rank, f, {width, n_tok}, c->n_past};
    int rc = c->o.capture(c->o.capture_user, &cap);
    free(f);
    if (rc) {
        if (rc > 0 || rc < GGUF_E_STATUS_MIN)
            rc = GGUF_E_INTERRUPTED;
        return gguf_fail(err, rc, GGUF_NO_OFFSET, "forward: capture %s stopped the run", name);
    }
    return 0;
}

/* ------------------------------------------------------------ context */

int gguf_fwd_ctx_create(gguf_fwd_ctx **out, const gguf_model *m, const gguf_fwd_opts *opts,
                        gguf_error *err)
{
    *out = NULL;
    if (!m)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "forward: no model");
    gguf_fwd_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return fw_nomem(err, "context");
    c->m = m;
    c->hp = gguf_model_hparams(m);
    if (opts)
        c->o = *opts;
    if (c->o.precision != GGUF_FWD_F32 && c->o.precision != GGUF_FWD_F64) {
        int p = c->o.precision;
        free(c);
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "forward: bad precision %d", p);
    }
    if (c->o.n_threads < 0 || c->o.n_threads > 64) {
        int nt = c->o.n_threads;
        free(c);
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "forward: bad thread count %d", nt);
    }
    /* What the ops rely on, beyond what the model module checks. */
    {
        const gguf_hparams *h = gguf_model_hparams(m);
        const char *why = NULL;
        const int64_t rot = h->is_mla ? h->qk_rope : h->n_rot;
        if (h->n_embd < 1 || h->n_vocab < 1 || h->n_head < 1)
            why = "empty model dimensions";
        else if (!h->is_mla && (h->n_head_kv < 1 || h->n_head % h->n_head_kv))
            why = "head_count is not a multiple of head_count_kv";
        else if (rot % 2 || rot > (h->is_mla ? h->qk_rope : h->n_embd_head_k))
            why = "rope.dimension_count is odd or larger than the head";
        else if (h->is_mla && (h->kv_lora_rank < 1 || h->qk_nope < 0 || h->v_head < 1))
            why = "MLA ranks or head sizes are not positive";
        else if (h->idx_head_dim > 0 && h->idx_head_dim < rot)
            why = "the indexer head is smaller than its RoPE part";
        else if (h->n_expert > FW_MAX_EXPERTS || h->n_expert_used > h->n_expert ||
                 (h->n_group > 1 && h->n_expert % h->n_group))
            why = "expert counts or groups out of range";
        if (why) {
            free(c);
            return gguf_fail(err, GGUF_E_BAD_VALUE, GGUF_NO_OFFSET, "%s: forward: %s",
                             gguf_model_name(m), why);
        }
    }
    c->prec = c->o.precision;
    c->page = sysconf(_SC_PAGESIZE);
    c->dq.n_threads = c->o.n_threads;
    const gguf_hparams *hp = c->hp;
    if (hp->is_mla) {
        c->k_w = hp->kv_lora_rank + hp->qk_rope;
        c->v_w = 0;
    } else {
        c->k_w = hp->n_head_kv * hp->n_embd_head_k;
        c->v_w = hp->n_head_kv * hp->n_embd_head_v;
    }
    /* RoPE. MLA archs fold YaRN's magnitude into the softmax scale (mscale^2)
     * and leave cos/sin unscaled; other archs scale cos/sin by YaRN's
     * 1 + 0.1 ln(factor), as HF's attention_factor does. */
    const int64_t n_rot = hp->is_mla ? hp->qk_rope : hp->n_rot;
    if (hp->rope_scaling == GGUF_ROPE_SCALING_YARN && hp->rope_factor > 1.0) {
        double msc = hp->is_mla ? 1.0
                                : (hp->rope_attn_factor > 0 ? hp->rope_attn_factor : 1.0) *
                                      (1.0 + 0.1 * log(hp->rope_factor));
        fw_rope_init_yarn(&c->rope, hp->rope_pairs, n_rot, hp->rope_freq_base, hp->rope_factor,
                          hp->yarn_orig_ctx > 0 ? hp->yarn_orig_ctx : 4096, hp->yarn_beta_fast,
                          hp->yarn_beta_slow, msc);
    } else {
        fw_rope_init(&c->rope, hp->rope_pairs, n_rot, hp->rope_freq_base);
        if (hp->rope_scaling == GGUF_ROPE_SCALING_LINEAR && hp->rope_factor > 0)
            c->rope.freq_scale = 1.0 / hp->rope_factor;
    }
    c->kq_scale = hp->attn_scale > 0 ? hp->attn_scale : 1.0 / sqrt((double)hp->n_embd_head_k);
    /* llama 3.x: per-frequency divisors (rope_freqs.weight), n_rot/2 of them */
    const gguf_tensor *rf = gguf_model_get(m, -1, GGUF_ROLE_ROPE_FREQS);
    if (rf && rf->n_elements >= n_rot / 2) {
        c->rope_ff = malloc((size_t)rf->n_elements * sizeof(float));
        int rrc = c->rope_ff ? gguf_dequant_row(rf->type, rf->data, c->rope_ff, rf->ne[0], err)
                             : fw_nomem(err, "rope_freqs");
        if (rrc) {
            free(c->rope_ff);
            free(c);
            return rrc;
        }
        c->rope.freq_factors = c->rope_ff;
    }
    c->lc = calloc((size_t)(hp->n_layer > 0 ? hp->n_layer : 1), sizeof *c->lc);
    if (!c->lc) {
        free(c->rope_ff);
        free(c);
        return fw_nomem(err, "cache");
    }
    *out = c;
    return 0;
}

void gguf_fwd_ctx_free(gguf_fwd_ctx *c)
{
    if (!c)
        return;
    fw_tp_free(c);
    for (int64_t i = 0; i < c->hp->n_layer; i++) {
        free(c->lc[i].k);
        free(c->lc[i].v);
        free(c->lc[i].idx_k);
    }
    free(c->lc);
    free(c->rope_ff);
    free(c);
}

int64_t gguf_fwd_ctx_n_past(const gguf_fwd_ctx *c)
{
    return c ? c->n_past : 0;
}

void gguf_fwd_ctx_stats(const gguf_fwd_ctx *c, gguf_fwd_stats *out)
{
    if (c && out)
        *out = c->st;
}

int64_t gguf_fwd_argmax(const float *row, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (row[i] > row[best])
            best = i;
    return best;
}

static int grow_cache(gguf_fwd_ctx *c, int64_t need_pos, gguf_error *err)
{
    if (need_pos <= c->cap)
        return 0;
    int64_t cap = c->cap ? c->cap : 64;
    while (cap < need_pos)
        cap *= 2;
    const gguf_hparams *hp = c->hp;
    for (int64_t i = 0; i < hp->n_layer_main; i++) {
        fw_layer_cache *l = &c->lc[i];
        double *k = realloc(l->k, (size_t)(cap * c->k_w) * sizeof(double) + 8);
        if (!k)
            return fw_nomem(err, "KV cache");
        l->k = k;
        if (c->v_w) {
            double *v = realloc(l->v, (size_t)(cap * c->v_w) * sizeof(double) + 8);
            if (!v)
                return fw_nomem(err, "KV cache");
            l->v = v;
        }
        if (hp->idx_head_dim > 0 && W(c, i, GGUF_ROLE_IDX_ATTN_K)) {
            double *ik = realloc(l->idx_k, (size_t)(cap * hp->idx_head_dim) * sizeof(double) + 8);
            if (!ik)
                return fw_nomem(err, "indexer cache");
            l->idx_k = ik;
        }
    }
    c->cap = cap;
    return 0;
}

/* ------------------------------------------------------------ attention */

/* Per-head RMSNorm (qwen3, glm4moe q/k norms). */
static int head_norm(gguf_fwd_ctx *c, double *x, int64_t n_tok, int64_t n_heads, int64_t hd,
                     int64_t stride, const gguf_tensor *w, gguf_error *err)
{
    float *wf;
    int rc = fw_dequant(c, w, 0, 1, &wf, err);
    if (rc)
        return rc;
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t h = 0; h < n_heads; h++)
            fw_rmsnorm(x + t * stride + h * hd, x + t * stride + h * hd, wf, hd, c->hp->rms_eps,
                       c->prec);
    fw_release(c, wf, w->ne[0]);
    return 0;
}

static int attn_gqa(gguf_fwd_ctx *c, int64_t il, const double *cur, int64_t n, double *out,
                    gguf_error *err)
{
    const gguf_hparams *hp = c->hp;
    const int64_t nh = hp->n_head, nkv = hp->n_head_kv, dk = hp->n_embd_head_k,
                  dv = hp->n_embd_head_v, E = hp->n_embd;
    fw_layer_cache *L = &c->lc[il];
    double *q = fw_xcalloc((size_t)(n * nh * dk), sizeof(double));
    double *o = fw_xcalloc((size_t)(n * nh * dv), sizeof(double));
    double *sc = fw_xcalloc((size_t)(c->n_past + n), sizeof(double));
    int rc = 0;
    if (!q || !o || !sc) {
        rc = fw_nomem(err, "attention");
        goto done;
    }
    const gguf_tensor *wq = W(c, il, GGUF_ROLE_ATTN_Q), *wk = W(c, il, GGUF_ROLE_ATTN_K),
                      *wv = W(c, il, GGUF_ROLE_ATTN_V);
    if ((rc = need(wq, il, GGUF_ROLE_ATTN_Q, err)) || (rc = need(wk, il, GGUF_ROLE_ATTN_K, err)) ||
        (rc = need(wv, il, GGUF_ROLE_ATTN_V, err)))
        goto done;
    double *kc = L->k + c->n_past * c->k_w, *vc = L->v + c->n_past * c->v_w;
    if ((rc = fw_mm(c, q, 0, cur, E, wq, 0, nh * dk, W(c, il, GGUF_ROLE_ATTN_Q_BIAS), n, err)) ||
        (rc = fw_mm(c, kc, 0, cur, E, wk, 0, nkv * dk, W(c, il, GGUF_ROLE_ATTN_K_BIAS), n, err)) ||
        (rc = fw_mm(c, vc, 0, cur, E, wv, 0, nkv * dv, W(c, il, GGUF_ROLE_ATTN_V_BIAS), n, err)))
        goto done;
    const gguf_tensor *qn = W(c, il, GGUF_ROLE_ATTN_Q_NORM), *kn = W(c, il, GGUF_ROLE_ATTN_K_NORM);
    if (qn && (rc = head_norm(c, q, n, nh, dk, nh * dk, qn, err)))
        goto done;
    if (kn && (rc = head_norm(c, kc, n, nkv, dk, nkv * dk, kn, err)))
        goto done;
    for (int64_t t = 0; t < n; t++) {
        for (int64_t h = 0; h < nh; h++)
            fw_rope_apply(&c->rope, q + t * nh * dk + h * dk, c->n_past + t, c->prec);
        for (int64_t h = 0; h < nkv; h++)
            fw_rope_apply(&c->rope, kc + t * nkv * dk + h * dk, c->n_past + t, c->prec);
    }
    /* query head h reads kv head h * nkv / nh (h / (nh / nkv) when it divides) */
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < nh; h++) {
            const int64_t g = h * nkv / nh;
            fw_attn_head(o + (t * nh + h) * dv, q + (t * nh + h) * dk, L->k + g * dk, c->k_w,
                         L->v + g * dv, c->v_w, c->n_past + t + 1, NULL, dk, dv, c->kq_scale, sc,
                         c->prec);
        }
    rc = fw_mm(c, out, 0, o, nh * dv, W(c, il, GGUF_ROLE_ATTN_OUT), 0, E, NULL, n, err);
done:
    free(q);
    free(o);
    free(sc);
    return rc;
}

/* The glm-dsa lightning indexer: for each query t, which of the keys
 * 0..n_past+t it may attend to (keep[t][j]). Scores are
 *   sum_h w[t][h] relu(iq[t][h] . ik[j]) / sqrt(idx_head_dim * idx_n_head)
 * and the top-k keys are kept; with n_past+t+1 <= top-k every key is. */
int fw_dsa_indexer(gguf_fwd_ctx *c, int64_t il, double *idx_cache, const double *cur,
                   const double *qr, int64_t n, uint8_t *keep, int64_t n_keys_max, gguf_error *err)
{
    const gguf_hparams *hp = c->hp;
    const int64_t nh = hp->idx_n_head, hd = hp->idx_head_dim, E = hp->n_embd;
    const int64_t top_k = c->o.idx_top_k > 0 ? c->o.idx_top_k : hp->idx_top_k;
    const gguf_tensor *wqb = W(c, il, GGUF_ROLE_IDX_ATTN_Q_B), *wk = W(c, il, GGUF_ROLE_IDX_ATTN_K),
                      *wp = W(c, il, GGUF_ROLE_IDX_PROJ), *kn = W(c, il, GGUF_ROLE_IDX_K_NORM),
                      *knb = W(c, il, GGUF_ROLE_IDX_K_NORM_BIAS);
    if (!wqb || !wk || !wp || c->o.dense_indexer || top_k <= 0) {
        memset(keep, 1, (size_t)(n * n_keys_max));
        return 0;
    }
    double *iq = fw_xcalloc((size_t)(n * nh * hd), sizeof(double));
    double *wt = fw_xcalloc((size_t)(n * nh), sizeof(double));
    double *score = fw_xcalloc((size_t)n_keys_max, sizeof(double));
    int64_t *sel = fw_xcalloc((size_t)(top_k < n_keys_max ? top_k : n_keys_max) + 1, sizeof(int64_t));
    float *knw = NULL, *knbw = NULL;
    int rc = 0;
    if (!iq || !wt || !score || !sel) {
        rc = fw_nomem(err, "indexer");
        goto done;
    }
    double *ik = idx_cache + c->n_past * hd;
    if ((rc = fw_mm(c, iq, 0, qr, hp->q_lora_rank, wqb, 0, nh * hd, NULL, n, err)) ||
        (rc = fw_mm(c, ik, 0, cur, E, wk, 0, hd, NULL, n, err)) ||
        (rc = fw_mm(c, wt, 0, cur, E, wp, 0, nh, NULL, n, err)))
        goto done;
    if ((kn && (rc = fw_dequant(c, kn, 0, 1, &knw, err))) ||
        (knb && (rc = fw_dequant(c, knb, 0, 1, &knbw, err))))
        goto done;
    /* The indexer's RoPE part comes first in each head, and is always the
     * adjacent-pair form. */
    fw_rope ir = c->rope;
    ir.type = GGUF_ROPE_ADJACENT;
    for (int64_t t = 0; t < n; t++) {
        fw_layernorm(ik + t * hd, ik + t * hd, knw, knbw, hd, 1e-6, c->prec);
        fw_rope_apply(&ir, ik + t * hd, c->n_past + t, c->prec);
        for (int64_t h = 0; h < nh; h++)
            fw_rope_apply(&ir, iq + (t * nh + h) * hd, c->n_past + t, c->prec);
    }
    const double wscale = 1.0 / sqrt((double)(hd * nh));
    for (int64_t t = 0; t < n; t++) {
        const int64_t nk = c->n_past + t + 1;
        uint8_t *kp = keep + t * n_keys_max;
        memset(kp, 0, (size_t)n_keys_max);
        if (nk <= top_k) {
            memset(kp, 1, (size_t)nk);
            continue;
        }
        for (int64_t j = 0; j < nk; j++) {
            double s = 0;
            for (int64_t h = 0; h < nh; h++) {
                double d = fw_dot(iq + (t * nh + h) * hd, idx_cache + j * hd, hd);
                if (d > 0)
                    s += wt[t * nh + h] * wscale * d;
            }
            score[j] = s;
        }
        int64_t got = fw_topk(score, NULL, nk, top_k, sel);
        for (int64_t i = 0; i < got; i++)
            kp[sel[i]] = 1;
    }
done:
    if (knw)
        fw_release(c, knw, kn->ne[0]);
    if (knbw)
        fw_release(c, knbw, knb->ne[0]);
    free(iq);
    free(wt);
    free(score);
    free(sel);
    return rc;
}

/* MLA attention over a latent cache (rows [kv_cmpr (R) | k_pe (rope)], KW
 * apart) for n queries q ([n][nh][nope+rope], RoPE applied), with k_b as
 * [nh][R][nope] and v_b as [nh][dv][R]; keep[t][j] selects keys. Output o
 * [n][nh*dv]. Plain: keys and values expanded per head; absorbed: k_b
 * folded into the queries, v_b applied after. */
int fw_mla_core(gguf_fwd_ctx *c, const double *cache, int64_t KW, int64_t R, int64_t nh,
                int64_t nope, int64_t rope, int64_t dv, const double *q, const float *kb,
                const float *vb, const uint8_t *keep, int64_t n, double *o, gguf_error *err)
{
    const int64_t dk = nope + rope, nk_all = c->n_past + n;
    const double *lat_all = cache;
    double *kx = NULL, *vx = NULL, *qa = NULL, *ol = NULL;
    double *sc = fw_xcalloc((size_t)nk_all, sizeof(double));
    int rc = 0;
    if (!sc) {
        rc = fw_nomem(err, "MLA");
        goto done;
    }
    if (c->o.mla_mode == GGUF_FWD_MLA_ABSORBED) {
        /* q_abs[h][r] = sum_j q_nope[h][j] k_b[h][r][j]; Q' = [q_abs | q_pe] */
        const int64_t dq = R + rope;
        qa = fw_xcalloc((size_t)(n * nh * dq), sizeof(double));
        ol = fw_xcalloc((size_t)R, sizeof(double));
        double *tmpw = fw_xcalloc((size_t)nope, sizeof(double));
        if (!qa || !ol || !tmpw) {
            free(tmpw);
            rc = fw_nomem(err, "MLA");
            goto done;
        }
        for (int64_t t = 0; t < n; t++)
            for (int64_t h = 0; h < nh; h++) {
                const double *qh = q + (t * nh + h) * dk;
                double *qah = qa + (t * nh + h) * dq;
                for (int64_t r = 0; r < R; r++) {
                    const float *kr = kb + (h * R + r) * nope;
                    for (int64_t j = 0; j < nope; j++)
                        tmpw[j] = kr[j];
                    qah[r] = fw_dot(qh, tmpw, nope);
                }
                fw_round(qah, R, c->prec);
                memcpy(qah + R, qh + nope, (size_t)rope * sizeof(double));
            }
        free(tmpw);
        for (int64_t t = 0; t < n; t++)
            for (int64_t h = 0; h < nh; h++) {
                fw_attn_head(ol, qa + (t * nh + h) * dq, lat_all, KW, lat_all, KW, c->n_past + t + 1,
                             keep + t * nk_all, dq, R, c->kq_scale, sc, c->prec);
                double *oh = o + (t * nh + h) * dv;
                for (int64_t d = 0; d < dv; d++) {
                    const float *vr = vb + (h * dv + d) * R;
                    double s = 0;
                    for (int64_t r = 0; r < R; r++)
                        s += (double)vr[r] * ol[r];
                    oh[d] = s;
                }
                fw_round(oh, dv, c->prec);
            }
    } else {
        /* expand keys and values of every cached position, per head */
        kx = fw_xcalloc((size_t)(nk_all * nh * dk), sizeof(double));
        vx = fw_xcalloc((size_t)(nk_all * nh * dv), sizeof(double));
        if (!kx || !vx) {
            rc = fw_nomem(err, "MLA");
            goto done;
        }
        for (int64_t j = 0; j < nk_all; j++) {
            const double *lj = lat_all + j * KW;
            for (int64_t h = 0; h < nh; h++) {
                double *kh = kx + (j * nh + h) * dk, *vh = vx + (j * nh + h) * dv;
                for (int64_t i = 0; i < nope; i++)
                    kh[i] = 0;
                for (int64_t r = 0; r < R; r++) {
                    const float *kr = kb + (h * R + r) * nope;
                    const double lr = lj[r];
                    for (int64_t i = 0; i < nope; i++)
                        kh[i] += (double)kr[i] * lr;
                }
                fw_round(kh, nope, c->prec);
                memcpy(kh + nope, lj + R, (size_t)rope * sizeof(double));
                for (int64_t d = 0; d < dv; d++) {
                    const float *vr = vb + (h * dv + d) * R;
                    double s = 0;
                    for (int64_t r = 0; r < R; r++)
                        s += (double)vr[r] * lj[r];
                    vh[d] = s;
                }
                fw_round(vh, dv, c->prec);
            }
        }
        for (int64_t t = 0; t < n; t++)
            for (int64_t h = 0; h < nh; h++)
                fw_attn_head(o + (t * nh + h) * dv, q + (t * nh + h) * dk, kx + h * dk, nh * dk,
                             vx + h * dv, nh * dv, c->n_past + t + 1, keep + t * nk_all, dk, dv,
                             c->kq_scale, sc, c->prec);
    }
done:
    free(sc);
    free(kx);
    free(vx);
    free(qa);
    free(ol);
    return rc;
}

/* MLA. The cache holds the latent [kv_cmpr (normed) | k_pe (roped)] per
 * position. Plain: expand per-head keys [k_nope | k_pe] and values from the
 * latent with attn_k_b / attn_v_b (or a legacy attn_kv_b). Absorbed: fold
 * attn_k_b into the queries, attend over the latent (MQA), then expand the
 * result with attn_v_b. */
static int attn_mla(gguf_fwd_ctx *c, int64_t il, const double *cur, int64_t n, double *out,
                    gguf_error *err)
{
    const gguf_hparams *hp = c->hp;
    const int64_t nh = hp->n_head, nope = hp->qk_nope, rope = hp->qk_rope, dk = nope + rope,
                  dv = hp->v_head, R = hp->kv_lora_rank, E = hp->n_embd, KW = c->k_w;
    const int64_t nk_all = c->n_past + n;
    fw_layer_cache *L = &c->lc[il];
    double *q = fw_xcalloc((size_t)(n * nh * dk), sizeof(double));
    double *qr = NULL;
    double *o = fw_xcalloc((size_t)(n * nh * dv), sizeof(double));
    uint8_t *keep = fw_xcalloc((size_t)(n * nk_all), 1);
    float *kb = NULL, *vb = NULL;
    int rc = 0;
    if (!q || !o || !keep) {
        rc = fw_nomem(err, "MLA");
        goto done;
    }
    /* queries */
    if (hp->q_lora_rank > 0) {
        qr = fw_xcalloc((size_t)(n * hp->q_lora_rank), sizeof(double));
        if (!qr) {
            rc = fw_nomem(err, "MLA");
            goto done;
        }
        const gguf_tensor *wqa = W(c, il, GGUF_ROLE_ATTN_Q_A), *wqb = W(c, il, GGUF_ROLE_ATTN_Q_B);
        if ((rc = need(wqa, il, GGUF_ROLE_ATTN_Q_A, err)) ||
            (rc = need(wqb, il, GGUF_ROLE_ATTN_Q_B, err)) ||
            (rc = fw_mm(c, qr, 0, cur, E, wqa, 0, hp->q_lora_rank, NULL, n, err)) ||
            (rc = fw_norm_rows(c, qr, qr, n, hp->q_lora_rank, hp->q_lora_rank,
                               W(c, il, GGUF_ROLE_ATTN_Q_A_NORM), err)) ||
            (rc = fw_mm(c, q, 0, qr, hp->q_lora_rank, wqb, 0, nh * dk, NULL, n, err)))
            goto done;
    } else {
        const gguf_tensor *wq = W(c, il, GGUF_ROLE_ATTN_Q);
        if ((rc = need(wq, il, GGUF_ROLE_ATTN_Q, err)) ||
            (rc = fw_mm(c, q, 0, cur, E, wq, 0, nh * dk, NULL, n, err)))
            goto done;
    }
    /* latent */
    double *lat = L->k + c->n_past * KW;
    const gguf_tensor *wkva = W(c, il, GGUF_ROLE_ATTN_KV_A_MQA);
    if ((rc = need(wkva, il, GGUF_ROLE_ATTN_KV_A_MQA, err)) ||
        (rc = fw_mm(c, lat, 0, cur, E, wkva, 0, KW, NULL, n, err)) ||
        (rc = fw_norm_rows(c, lat, lat, n, R, KW, W(c, il, GGUF_ROLE_ATTN_KV_A_NORM), err)))
        goto done;
    for (int64_t t = 0; t < n; t++) {
        fw_rope_apply(&c->rope, lat + t * KW + R, c->n_past + t, c->prec);
        for (int64_t h = 0; h < nh; h++)
            fw_rope_apply(&c->rope, q + (t * nh + h) * dk + nope, c->n_past + t, c->prec);
    }
    /* indexer selection (glm-dsa), else all causal keys */
    if (L->idx_k && qr) {
        if ((rc = fw_dsa_indexer(c, il, L->idx_k, cur, qr, n, keep, nk_all, err)))
            goto done;
    } else {
        memset(keep, 1, (size_t)(n * nk_all));
    }
    /* kv_b: k_b as [nh][R][nope], v_b as [nh][dv][R] */
    const gguf_tensor *tkb = W(c, il, GGUF_ROLE_ATTN_K_B), *tvb = W(c, il, GGUF_ROLE_ATTN_V_B),
                      *tkv = W(c, il, GGUF_ROLE_ATTN_KV_B);
    if (tkb && tvb) {
        if ((rc = fw_dequant(c, tkb, 0, t_rows(tkb), &kb, err)) ||
            (rc = fw_dequant(c, tvb, 0, t_rows(tvb), &vb, err)))
            goto done;
    } else if (tkv) {
        /* legacy attn_kv_b [R, nh*(nope+dv)]: rows h*(nope+dv)+j */
        float *kv;
        if ((rc = fw_dequant(c, tkv, 0, t_rows(tkv), &kv, err)))
            goto done;
        kb = malloc((size_t)(nh * R * nope) * sizeof(float) + 1);
        vb = malloc((size_t)(nh * dv * R) * sizeof(float) + 1);
        if (!kb || !vb) {
            fw_release(c, kv, t_rows(tkv) * R);
            rc = fw_nomem(err, "kv_b");
            goto done;
        }
        c->resident += (uint64_t)(nh * R * (nope + dv)) * sizeof(float);
        for (int64_t h = 0; h < nh; h++) {
            for (int64_t j = 0; j < nope; j++)
                for (int64_t r = 0; r < R; r++)
                    kb[(h * R + r) * nope + j] = kv[(h * (nope + dv) + j) * R + r];
            for (int64_t d = 0; d < dv; d++)
                memcpy(vb + (h * dv + d) * R, kv + (h * (nope + dv) + nope + d) * R,
                       (size_t)R * sizeof(float));
        }
        fw_release(c, kv, t_rows(tkv) * R);
        if (c->resident > c->st.peak_weight_bytes)
            c->st.peak_weight_bytes = c->resident;
    } else {
        rc = need(NULL, il, GGUF_ROLE_ATTN_K_B, err);
        goto done;
    }

    if ((rc = fw_mla_core(c, L->k, KW, R, nh, nope, rope, dv, q, kb, vb, keep, n, o, err)))
        goto done;
    rc = fw_mm(c, out, 0, o, nh * dv, W(c, il, GGUF_ROLE_ATTN_OUT), 0, E, NULL, n, err);
done:
    if (kb)
        fw_release(c, kb, nh * R * nope);
    if (vb)
        fw_release(c, vb, nh * R * dv);
    free(q);
    free(qr);
    free(o);
    free(keep);
    return rc;
}

/* ------------------------------------------------------------ FFN */

/* SwiGLU FFN on n rows: out = down(silu(gate x) * up x). Weights are rows
 * [row0, row0+n_ff) of gate/up and rows [drow0, drow0+n_embd) of down
 * (expert slices of stacked tensors). */
static int ffn_swiglu(gguf_fwd_ctx *c, const gguf_tensor *g, const gguf_tensor *u,
                      const gguf_tensor *d, int64_t row0, int64_t drow0, int64_t n_ff,
                      const double *x, int64_t n, double *out, gguf_error *err)
{
    const int64_t E = c->hp->n_embd;
    double *hg = fw_xcalloc((size_t)(n * n_ff), sizeof(double));
    double *hu = fw_xcalloc((size_t)(n * n_ff), sizeof(double));
    int rc = 0;
    if (!hg || !hu)
        rc = fw_nomem(err, "FFN");
    if (!rc && !(rc = fw_mm(c, hg, 0, x, E, g, row0, n_ff, NULL, n, err)) &&
        !(rc = fw_mm(c, hu, 0, x, E, u, row0, n_ff, NULL, n, err))) {
        fw_swiglu(hg, hg, hu, n * n_ff, c->prec);
        rc = fw_mm(c, out, 0, hg, n_ff, d, drow0, E, NULL, n, err);
    }
    free(hg);
    free(hu);
    return rc;
}

static int ffn_moe(gguf_fwd_ctx *c, int64_t il, const double *x, int64_t n, double *out,
                   gguf_error *err)
{
    const gguf_hparams *hp = c->hp;
    const int64_t E = hp->n_embd, ne = hp->n_expert, nu = hp->n_expert_used, nff = hp->n_ff_exp;
    double *logits = fw_xcalloc((size_t)(n * ne), sizeof(double));
    int64_t *ids = fw_xcalloc((size_t)(n * nu), sizeof(int64_t));
    double *wts = fw_xcalloc((size_t)(n * nu), sizeof(double));
    double *scr = fw_xcalloc((size_t)(2 * ne + hp->n_group + 2), sizeof(double));
    double *xs = fw_xcalloc((size_t)(n * E), sizeof(double));
    double *ys = fw_xcalloc((size_t)(n * E), sizeof(double));
    double *acc = fw_xcalloc((size_t)(n * E), sizeof(double));
    double *cap = fw_xcalloc((size_t)(n * nu), sizeof(double));
    int64_t *rows = fw_xcalloc((size_t)n, sizeof(int64_t));
    double *roww = fw_xcalloc((size_t)n, sizeof(double));
    float *bias = NULL;
    const gguf_tensor *bt = W(c, il, GGUF_ROLE_FFN_EXP_PROBS_B);
    int rc = 0;
    if (!logits || !ids || !wts || !scr || !xs || !ys || !acc || !cap || !rows || !roww) {
        rc = fw_nomem(err, "MoE");
        goto done;
    }
    const gguf_tensor *gi = W(c, il, GGUF_ROLE_FFN_GATE_INP),
                      *ge = W(c, il, GGUF_ROLE_FFN_GATE_EXPS), *ue = W(c, il, GGUF_ROLE_FFN_UP_EXPS),
                      *de = W(c, il, GGUF_ROLE_FFN_DOWN_EXPS);
    if ((rc = need(gi, il, GGUF_ROLE_FFN_GATE_INP, err)) ||
        (rc = need(ge, il, GGUF_ROLE_FFN_GATE_EXPS, err)) ||
        (rc = need(ue, il, GGUF_ROLE_FFN_UP_EXPS, err)) ||
        (rc = need(de, il, GGUF_ROLE_FFN_DOWN_EXPS, err)))
        goto done;
    if ((rc = fw_mm(c, logits, 0, x, E, gi, 0, ne, NULL, n, err)))
        goto done;
    if (bt && (rc = fw_dequant(c, bt, 0, 1, &bias, err)))
        goto done;
    fw_moe_cfg cfg = {ne, nu, hp->gating == GGUF_GATING_SIGMOID ? GGUF_GATING_SIGMOID
                                                                 : GGUF_GATING_SOFTMAX,
                      hp->n_group, hp->topk_group, hp->norm_topk,
                      hp->routed_scale > 0 ? hp->routed_scale : 1.0};
    for (int64_t t = 0; t < n; t++)
        fw_moe_route(&cfg, logits + t * ne, bias, ids + t * nu, wts + t * nu, scr, c->prec);
    for (int64_t i = 0; i < n * nu; i++)
        cap[i] = (double)ids[i];
    if ((rc = fw_capture(c, (int)il, "moe_experts", -1, cap, nu, n, err)) ||
        (rc = fw_capture(c, (int)il, "moe_weights", -1, wts, nu, n, err)))
        goto done;
    /* Each expert some token routes to: gather its tokens, run it once. */
    for (int64_t e = 0; e < ne; e++) {
        int64_t m = 0;
        for (int64_t t = 0; t < n; t++)
            for (int64_t k = 0; k < nu; k++)
                if (ids[t * nu + k] == e) {
                    rows[m] = t;
                    roww[m] = wts[t * nu + k];
                    memcpy(xs + m * E, x + t * E, (size_t)E * sizeof(double));
                    m++;
                }
        if (m == 0)
            continue;
        c->st.experts_loaded++;
        if ((rc = ffn_swiglu(c, ge, ue, de, e * nff, e * E, nff, xs, m, ys, err)))
            goto done;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < E; j++) {
                double v = ys[i * E + j] * roww[i];
                if (c->prec == GGUF_FWD_F32)
                    v = (double)(float)v; /* weighted expert output, then the sum */
                acc[rows[i] * E + j] += v;
            }
    }
    fw_round(acc, n * E, c->prec);
    /* shared experts */
    const gguf_tensor *gs = W(c, il, GGUF_ROLE_FFN_GATE_SHEXP), *us = W(c, il, GGUF_ROLE_FFN_UP_SHEXP),
                      *ds = W(c, il, GGUF_ROLE_FFN_DOWN_SHEXP);
    if (gs && us && ds) {
        if ((rc = ffn_swiglu(c, gs, us, ds, 0, 0, gs->ne[1], x, n, ys, err)))
            goto done;
        for (int64_t i = 0; i < n * E; i++)
            acc[i] += ys[i];
        fw_round(acc, n * E, c->prec);
    }
    memcpy(out, acc, (size_t)(n * E) * sizeof(double));
done:
    if (bias)
        fw_release(c, bias, bt->ne[0]);
    free(logits);
    free(ids);
    free(wts);
    free(scr);
    free(xs);
    free(ys);
    free(acc);
    free(cap);
    free(rows);
    free(roww);
    return rc;
}

/* ------------------------------------------------------------ eval */

double fw_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void fw_add_rows(double *x, const double *y, int64_t n, int prec)
{
    for (int64_t i = 0; i < n; i++)
        x[i] += y[i];
    fw_round(x, n, prec);
}

int gguf_fwd_eval(gguf_fwd_ctx *c, const int32_t *tokens, int64_t n, float *logits_out,
                  gguf_error *err)
{
    if (!c || !tokens || n < 1)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "forward: no tokens");
    const gguf_hparams *hp = c->hp;
    const int64_t E = hp->n_embd, V = hp->n_vocab;
    for (int64_t t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= V)
            return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                             "forward: token %lld is %d, outside the vocabulary (%lld)",
                             (long long)t, tokens[t], (long long)V);
    const double t0 = fw_now();
    if (c->plan) {
        int trc = fw_tp_eval(c, tokens, n, logits_out, err);
        c->st.seconds += fw_now() - t0;
        return trc;
    }
    int rc = grow_cache(c, c->n_past + n, err);
    if (rc)
        return rc;
    double *x = fw_xcalloc((size_t)(n * E), sizeof(double));
    double *cur = fw_xcalloc((size_t)(n * E), sizeof(double));
    double *y = fw_xcalloc((size_t)(n * E), sizeof(double));
    double *lg = NULL;
    if (!x || !cur || !y) {
        rc = fw_nomem(err, "activations");
        goto done;
    }
    /* embeddings: one row of token_embd per token */
    const gguf_tensor *te = W(c, -1, GGUF_ROLE_TOKEN_EMBD);
    if ((rc = need(te, -1, GGUF_ROLE_TOKEN_EMBD, err)))
        goto done;
    for (int64_t t = 0; t < n; t++) {
        float *row;
        if ((rc = fw_dequant(c, te, tokens[t], 1, &row, err)))
            goto done;
        for (int64_t i = 0; i < E; i++)
            x[t * E + i] = row[i];
        fw_release(c, row, E);
    }
    for (int64_t il = 0; il < hp->n_layer_main; il++) {
        const int L = (int)il;
        if ((rc = fw_norm_rows(c, cur, x, n, E, E, W(c, il, GGUF_ROLE_ATTN_NORM), err)) ||
            (rc = fw_capture(c, L, "attn_norm", -1, cur, E, n, err)))
            goto done;
        rc = hp->is_mla ? attn_mla(c, il, cur, n, y, err) : attn_gqa(c, il, cur, n, y, err);
        if (rc || (rc = fw_capture(c, L, "attn_out", -1, y, E, n, err)))
            goto done;
        fw_add_rows(x, y, n * E, c->prec);
        if ((rc = fw_capture(c, L, "attn_residual", -1, x, E, n, err)))
            goto done;
        const gguf_tensor *fn = W(c, il, GGUF_ROLE_FFN_NORM);
        if (!fn)
            fn = W(c, il, GGUF_ROLE_ATTN_POST_NORM);
        if ((rc = fw_norm_rows(c, cur, x, n, E, E, fn, err)) ||
            (rc = fw_capture(c, L, "ffn_norm", -1, cur, E, n, err)))
            goto done;
        if (gguf_model_layer_kind(c->m, il) == GGUF_LAYER_MOE) {
            rc = ffn_moe(c, il, cur, n, y, err);
        } else {
            const gguf_tensor *g = W(c, il, GGUF_ROLE_FFN_GATE), *u = W(c, il, GGUF_ROLE_FFN_UP),
                              *d = W(c, il, GGUF_ROLE_FFN_DOWN);
            if (!(rc = need(g, il, GGUF_ROLE_FFN_GATE, err)) &&
                !(rc = need(u, il, GGUF_ROLE_FFN_UP, err)) &&
                !(rc = need(d, il, GGUF_ROLE_FFN_DOWN, err)))
                rc = ffn_swiglu(c, g, u, d, 0, 0, g->ne[1], cur, n, y, err);
        }
        if (rc || (rc = fw_capture(c, L, "ffn_out", -1, y, E, n, err)))
            goto done;
        fw_add_rows(x, y, n * E, c->prec);
        if ((rc = fw_capture(c, L, "residual", -1, x, E, n, err)))
            goto done;
    }
    if ((rc = fw_norm_rows(c, cur, x, n, E, E, W(c, -1, GGUF_ROLE_OUTPUT_NORM), err)) ||
        (rc = fw_capture(c, -1, "output_norm", -1, cur, E, n, err)))
        goto done;
    lg = fw_xcalloc((size_t)(n * V), sizeof(double));
    if (!lg) {
        rc = fw_nomem(err, "logits");
        goto done;
    }
    const gguf_tensor *wo = W(c, -1, GGUF_ROLE_OUTPUT);
    if (!wo)
        wo = te; /* tied embeddings */
    if ((rc = fw_mm(c, lg, 0, cur, E, wo, 0, V, NULL, n, err)) ||
        (rc = fw_capture(c, -1, "logits", -1, lg, V, n, err)))
        goto done;
    if (logits_out)
        for (int64_t i = 0; i < n * V; i++)
            logits_out[i] = (float)lg[i];
    c->n_past += n;
done:
    free(x);
    free(cur);
    free(y);
    free(lg);
    c->st.seconds += fw_now() - t0;
    return rc;
}
