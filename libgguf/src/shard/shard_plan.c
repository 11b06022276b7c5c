/*
 * Shard plans: which slice of every tensor each tensor-/expert-parallel rank
 * holds, as vLLM and SGLang cut HF checkpoints, expressed on GGUF tensors.
 *
 * The rules, per role (HF parameter -> engine layer -> what a rank holds):
 *
 *   token_embd, output        VocabParallelEmbedding / ParallelLMHead: rows
 *                             padded to a multiple of 64, then tp chunks
 *   norms, router, biases of  replicated
 *   the router, q_a, kv_a,
 *   the DSA indexer, eh_proj
 *   attn_q/k/v (+bias)        QKVParallelLinear: q by whole heads; k/v by whole
 *                             kv heads, each kv head replicated on tp/n_kv
 *                             ranks when tp > n_kv; slots [q_r; k_r; v_r]
 *   attn_output               RowParallelLinear: inputs by whole heads, sum
 *   attn_q_b (MLA)            ColumnParallelLinear by whole heads (nope+rope rows)
 *   kv_b_proj (MLA)           ColumnParallelLinear by whole heads (nope+v rows
 *                             each); GGUF stores it as attn_k_b (transposed) and
 *                             attn_v_b: a virtual entry reassembles it per head
 *   ffn_gate/up (+shexp)      MergedColumnParallelLinear gate_up_proj: slots
 *                             [gate_r; up_r]
 *   ffn_down (+shexp)         RowParallelLinear, sum
 *   ffn_*_exps                FusedMoE: experts split over ep, intermediate over
 *                             moe_tp (w13 rows, w2 inputs), sum
 */
#include "util/error_lib.h"
#include "shard/shard_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/types.h"

const char *gguf_engine_name(gguf_engine e)
{
    return e == GGUF_ENGINE_SGLANG ? "sglang" : e == GGUF_ENGINE_VLLM ? "vllm" : "unknown";
}

int gguf_engine_from_name(const char *name, gguf_engine *out)
{
    if (name && !strcmp(name, "vllm")) {
        *out = GGUF_ENGINE_VLLM;
        return 0;
    }
    if (name && !strcmp(name, "sglang")) {
        *out = GGUF_ENGINE_SGLANG;
        return 0;
    }
    return GGUF_E_INVALID;
}

static const char *const rule_names[GGUF_RULE_COUNT] = {
    "replicated", "column", "row", "vocab", "merged", "qkv", "heads", "expert",
};

const char *gguf_shard_rule_name(gguf_shard_rule r)
{
    if ((int)r < 0 || r >= GGUF_RULE_COUNT)
        return "unknown";
    return rule_names[r];
}

/* ---------------- helpers ---------------- */

int shard_check(gguf_shard_plan *p, gguf_check_level level, const char *code, const char *tensor,
                const char *fmt, ...)
{
    if (p->n_checks == p->cap_checks) {
        int64_t cap = p->cap_checks ? p->cap_checks * 2 : 32;
        gguf_shard_check *c = realloc(p->checks, (size_t)cap * sizeof *c);
        if (!c)
            return GGUF_E_NOMEM;
        p->checks = c;
        p->cap_checks = cap;
    }
    gguf_shard_check *c = &p->checks[p->n_checks++];
    c->level = level;
    c->code = code;
    c->tensor = tensor;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->message, sizeof c->message, fmt, ap);
    va_end(ap);
    return 0;
}

int shard_set_pieces(gguf_shard_slice *s, const gguf_shard_piece *pc, int32_t n)
{
    gguf_shard_piece *np = NULL;
    if (n > 0) {
        np = malloc((size_t)n * sizeof *np);
        if (!np)
            return GGUF_E_NOMEM;
        memcpy(np, pc, (size_t)n * sizeof *np);
    }
    free((void *)s->pieces);
    s->pieces = np;
    s->n_pieces = n;
    return 0;
}

static gguf_shard_piece whole_piece(const gguf_shard_tensor *e, int32_t self)
{
    gguf_shard_piece pc;
    memset(&pc, 0, sizeof pc);
    pc.src = self;
    for (int d = 0; d < 4; d++) {
        pc.lo[d] = 0;
        pc.hi[d] = e->ne[d];
    }
    return pc;
}

static int64_t box_elems(const gguf_shard_piece *pc)
{
    int64_t n = 1;
    for (int d = 0; d < 4; d++)
        n *= pc->hi[d] - pc->lo[d];
    return n;
}

void shard_slice_finish(gguf_shard_plan *p, int64_t i, int r)
{
    const gguf_shard_tensor *e = &p->e[i];
    gguf_shard_slice *s = shard_slice(p, i, r);
    const int cd = e->cat_dim < 0 ? 1 : e->cat_dim;
    const gguf_shard_piece *f = s->n_pieces ? &s->pieces[0] : NULL;
    /* Dims other than cat_dim: the first piece's box when it is a plain cut of
     * the entry itself, else the entry's own (pieces of other tensors fill it). */
    const bool own = f && f->src == (int32_t)i && !f->transpose;
    for (int d = 0; d < 4; d++)
        s->ne[d] = own ? f->hi[d] - f->lo[d] : e->ne[d];
    if (cd == 0) {
        int64_t w = 0;
        for (int32_t k = 0; k < s->n_pieces; k++)
            w += s->pieces[k].hi[0] - s->pieces[k].lo[0];
        s->ne[0] = w + s->pad;
    } else {
        int64_t inner = 1;
        for (int d = 0; d < cd; d++)
            inner *= s->ne[d];
        int64_t rows = 0;
        for (int32_t k = 0; k < s->n_pieces; k++)
            rows += inner ? box_elems(&s->pieces[k]) / inner : 0;
        /* dims above cat_dim stay as the first piece has them */
        int64_t above = 1;
        for (int d = cd + 1; d < 4; d++)
            above *= s->ne[d];
        s->ne[cd] = (above ? rows / above : rows) + s->pad;
    }

    /* Can the slice come straight from the stored bytes? */
    s->quant_cut_ok = true;
    s->reason = NULL;
    uint32_t type = e->type;
    for (int32_t k = 0; k < s->n_pieces; k++) {
        const gguf_shard_piece *pc = &s->pieces[k];
        const gguf_shard_tensor *src = &p->e[pc->src];
        const gguf_type_info *ti = gguf_type_get(src->type);
        bool quant = ti && ti->block_size > 1;
        if (pc->transpose && quant) {
            s->quant_cut_ok = false;
            s->reason = "attn_k_b is stored transposed relative to kv_b_proj: quantized "
                        "blocks cannot be transposed, dequantize first";
            break;
        } else if (src->type != type) {
            s->quant_cut_ok = false;
            s->reason = "its pieces come from tensors of different types: reassembled in F32";
        } else if (quant && (pc->lo[0] % ti->block_size || pc->hi[0] % ti->block_size)) {
            s->quant_cut_ok = false;
            s->reason = "inner-dimension cut off the type's block boundary: dequantize first";
        }
    }
    int64_t n = s->ne[0] * s->ne[1] * s->ne[2] * s->ne[3];
    uint64_t rb = 0;
    if (s->quant_cut_ok && gguf_type_row_bytes(type, s->ne[0], &rb) == 0)
        s->bytes = rb * (uint64_t)(s->ne[1] * s->ne[2] * s->ne[3]);
    else {
        s->quant_cut_ok = false;
        if (!s->reason)
            s->reason = "row width not whole blocks of the type: dequantize first";
        s->bytes = (uint64_t)n * 4u;
    }
    /* The range of the entry along split_dim, when one piece of itself gives it. */
    if (!e->is_virtual) {
        s->range_lo = s->range_hi = -1;
        if (e->split_dim >= 0 && s->n_pieces == 1 && f->src == (int32_t)i && !f->transpose) {
            s->range_lo = f->lo[e->split_dim];
            s->range_hi = f->hi[e->split_dim];
        } else if (e->split_dim < 0 && s->n_pieces == 1 && f->src == (int32_t)i) {
            s->range_lo = 0;
            s->range_hi = e->ne[0];
        }
    }
}

void shard_totals(gguf_shard_plan *p)
{
    for (int r = 0; r < p->tp; r++) {
        uint64_t b = 0;
        for (int64_t i = 0; i < p->n; i++)
            if (!p->e[i].is_virtual && p->e[i].consumed)
                b += p->sl[i][r].bytes;
        p->rank_bytes[r] = b;
    }
}

static int32_t entry_of(const gguf_shard_plan *p, int64_t il, gguf_role r)
{
    const gguf_hparams *hp = gguf_model_hparams(p->m);
    if (il < -1 || il >= hp->n_layer || (int)r <= 0 || r >= GGUF_ROLE_COUNT)
        return -1;
    return p->by_role[(il + 1) * GGUF_ROLE_COUNT + r] - 1;
}

int shard_kvb_pieces(gguf_shard_plan *p, int64_t il, int64_t a, int64_t b, bool stacked,
                     bool transpose_k, int64_t dst0, gguf_shard_piece **out, int32_t *n)
{
    const gguf_hparams *hp = gguf_model_hparams(p->m);
    const int64_t H = hp->n_head, nope = hp->qk_nope, v = hp->v_head, L = hp->kv_lora_rank;
    const int64_t s = nope + v;
    int32_t kb = entry_of(p, il, GGUF_ROLE_ATTN_K_B), vb = entry_of(p, il, GGUF_ROLE_ATTN_V_B);
    int32_t kv = entry_of(p, il, GGUF_ROLE_ATTN_KV_B);
    bool legacy = kb < 0 || vb < 0;
    *out = NULL;
    *n = 0;
    if (legacy && kv < 0)
        return GGUF_E_NOT_FOUND;
    /* at most two pieces per head the range touches (all heads when stacked) */
    int64_t cap = stacked || b <= a ? 2 * H + 2 : 2 * ((b - 1) / s - a / s + 1) + 2;
    gguf_shard_piece *pc = malloc((size_t)cap * sizeof *pc);
    if (!pc)
        return GGUF_E_NOMEM;
    int32_t k = 0;
    int64_t dst = dst0;
    /* Walk the row range part by part: (head, k or v, local rows). */
    const int64_t h_first = stacked || b <= a ? 0 : a / s;
    const int64_t h_end = stacked || b <= a ? H : ((b - 1) / s + 1 < H ? (b - 1) / s + 1 : H);
    for (int64_t h = h_first; h < h_end; h++) {
        for (int part = 0; part < 2 && k < cap; part++) {
            int64_t base, len = part ? v : nope;
            if (stacked)
                base = part ? H * nope + h * v : h * nope;
            else
                base = h * s + (part ? nope : 0);
            int64_t x0 = base > a ? base : a, x1 = base + len < b ? base + len : b;
            if (x0 >= x1)
                continue;
            int64_t j0 = x0 - base, j1 = x1 - base;
            gguf_shard_piece *q = &pc[k++];
            memset(q, 0, sizeof *q);
            for (int d = 0; d < 4; d++) {
                q->lo[d] = 0;
                q->hi[d] = 1;
            }
            if (legacy) {
                int64_t row = h * s + (part ? nope : 0);
                q->src = kv;
                q->hi[0] = L;
                q->lo[1] = row + j0;
                q->hi[1] = row + j1;
            } else if (!part) {
                q->src = kb;
                q->lo[2] = h;
                q->hi[2] = h + 1;
                if (transpose_k || j0 != 0 || j1 != nope) {
                    q->transpose = true;
                    q->lo[0] = j0;
                    q->hi[0] = j1;
                    q->hi[1] = L;
                } else {
                    q->hi[0] = nope; /* raw reshape of the head, no transpose */
                    q->hi[1] = L;
                }
            } else {
                q->src = vb;
                q->hi[0] = L;
                q->lo[1] = j0;
                q->hi[1] = j1;
                q->lo[2] = h;
                q->hi[2] = h + 1;
            }
            q->dst = dst;
            dst += j1 - j0;
        }
    }
    *out = pc;
    *n = k;
    return 0;
}

/* ---------------- building ---------------- */

static int grow(gguf_shard_plan *p)
{
    if (p->n < p->cap)
        return 0;
    int64_t cap = p->cap ? p->cap * 2 : 256;
    gguf_shard_tensor *e = realloc(p->e, (size_t)cap * sizeof *e);
    if (!e)
        return GGUF_E_NOMEM;
    p->e = e;
    gguf_shard_slice **sl = realloc(p->sl, (size_t)cap * sizeof *sl);
    if (!sl)
        return GGUF_E_NOMEM;
    p->sl = sl;
    char **nm = realloc(p->names, (size_t)cap * sizeof *nm);
    if (!nm)
        return GGUF_E_NOMEM;
    p->names = nm;
    p->cap = cap;
    return 0;
}

/* Append an entry with tp empty slices; returns its index or a negative code. */
static int64_t new_entry(gguf_shard_plan *p)
{
    if (grow(p))
        return GGUF_E_NOMEM;
    int64_t i = p->n;
    memset(&p->e[i], 0, sizeof p->e[i]);
    p->names[i] = NULL;
    p->sl[i] = calloc((size_t)p->tp, sizeof **p->sl);
    if (!p->sl[i])
        return GGUF_E_NOMEM;
    for (int r = 0; r < p->tp; r++)
        p->sl[i][r].range_lo = p->sl[i][r].range_hi = -1;
    p->n++;
    return i;
}

typedef struct rule_spec {
    gguf_shard_rule rule;
    int split_dim, expert_dim, cat_dim;
    const char *fused;
    int slot;
    bool reduce;
    int64_t unit;  /* elements along split_dim per unit (head width, or 1) */
    int64_t units; /* units along split_dim */
} rule_spec;

static rule_spec spec_for(const gguf_shard_plan *p, const gguf_shard_tensor *e)
{
    const gguf_hparams *hp = gguf_model_hparams(p->m);
    rule_spec s = {GGUF_RULE_REPLICATED, -1, -1, 1, NULL, -1, false, 1, 1};
    const bool bias = e->n_dims == 1;
    const int row_dim = bias ? 0 : 1;
    switch (e->role) {
    case GGUF_ROLE_TOKEN_EMBD:
    case GGUF_ROLE_OUTPUT:
    case GGUF_ROLE_NEXTN_EMBED_TOKENS:
    case GGUF_ROLE_NEXTN_SHARED_HEAD_HEAD:
        s.rule = GGUF_RULE_VOCAB;
        s.split_dim = 1;
        s.units = e->ne[1];
        break;
    case GGUF_ROLE_ATTN_Q:
    case GGUF_ROLE_ATTN_Q_BIAS:
        if (hp->is_mla) {
            s.rule = GGUF_RULE_HEADS;
        } else {
            s.rule = GGUF_RULE_QKV;
            s.fused = "qkv_proj";
            s.slot = 0;
        }
        s.split_dim = row_dim;
        s.cat_dim = row_dim;
        s.unit = hp->n_embd_head_k;
        s.units = hp->n_head;
        break;
    case GGUF_ROLE_ATTN_K:
    case GGUF_ROLE_ATTN_K_BIAS:
    case GGUF_ROLE_ATTN_V:
    case GGUF_ROLE_ATTN_V_BIAS: {
        bool isk = e->role == GGUF_ROLE_ATTN_K || e->role == GGUF_ROLE_ATTN_K_BIAS;
        s.rule = GGUF_RULE_QKV;
        s.fused = "qkv_proj";
        s.slot = isk ? 1 : 2;
        s.split_dim = row_dim;
        s.cat_dim = row_dim;
        s.unit = isk ? hp->n_embd_head_k : hp->n_embd_head_v;
        s.units = hp->n_head_kv;
        break;
    }
    case GGUF_ROLE_ATTN_OUT:
        s.rule = GGUF_RULE_ROW;
        s.split_dim = 0;
        s.cat_dim = 0;
        s.reduce = true;
        s.unit = hp->n_embd_head_v;
        s.units = hp->n_head;
        break;
    case GGUF_ROLE_ATTN_Q_B:
        s.rule = GGUF_RULE_HEADS;
        s.split_dim = 1;
        s.unit = hp->n_embd_head_k;
        s.units = hp->n_head;
        break;
    case GGUF_ROLE_ATTN_KV_B:
        s.rule = GGUF_RULE_HEADS;
        s.fused = "kv_b_proj";
        s.split_dim = 1;
        s.unit = hp->qk_nope + hp->v_head;
        s.units = hp->n_head;
        break;
    case GGUF_ROLE_ATTN_K_B:
    case GGUF_ROLE_ATTN_V_B:
        s.rule = GGUF_RULE_HEADS;
        s.fused = "kv_b_proj";
        s.split_dim = 2;
        s.cat_dim = 2;
        s.units = hp->n_head;
        break;
    case GGUF_ROLE_FFN_GATE:
    case GGUF_ROLE_FFN_UP:
    case GGUF_ROLE_FFN_GATE_SHEXP:
    case GGUF_ROLE_FFN_UP_SHEXP:
        s.rule = GGUF_RULE_MERGED;
        s.fused = (e->role == GGUF_ROLE_FFN_GATE || e->role == GGUF_ROLE_FFN_UP)
                      ? "gate_up_proj"
                      : "shared_experts.gate_up_proj";
        s.slot = (e->role == GGUF_ROLE_FFN_GATE || e->role == GGUF_ROLE_FFN_GATE_SHEXP) ? 0 : 1;
        s.split_dim = 1;
        s.units = e->ne[1];
        break;
    case GGUF_ROLE_FFN_DOWN:
    case GGUF_ROLE_FFN_DOWN_SHEXP:
        s.rule = GGUF_RULE_ROW;
        s.split_dim = 0;
        s.cat_dim = 0;
        s.reduce = true;
        s.units = e->ne[0];
        break;
    case GGUF_ROLE_FFN_GATE_EXPS:
    case GGUF_ROLE_FFN_UP_EXPS:
        s.rule = GGUF_RULE_EXPERT;
        s.fused = "experts.w13";
        s.slot = e->role == GGUF_ROLE_FFN_GATE_EXPS ? 0 : 1;
        s.split_dim = p->moe_tp > 1 ? 1 : -1;
        s.expert_dim = p->ep > 1 ? 2 : -1;
        s.cat_dim = 2;
        s.units = e->ne[1];
        break;
    case GGUF_ROLE_FFN_DOWN_EXPS:
        s.rule = GGUF_RULE_EXPERT;
        s.fused = "experts.w2";
        s.split_dim = p->moe_tp > 1 ? 0 : -1;
        s.expert_dim = p->ep > 1 ? 2 : -1;
        s.cat_dim = 2;
        s.reduce = true;
        s.units = e->ne[0];
        break;
    default:
        break; /* replicated */
    }
    return s;
}

static int64_t ep_rank_of(const gguf_shard_plan *p, int r)
{
    return p->ep > 1 ? r / p->moe_tp : 0;
}

/* Pieces of stored entry i on rank r, by its rule. */
static int build_slice(gguf_shard_plan *p, int64_t i, int r, const rule_spec *s)
{
    const gguf_hparams *hp = gguf_model_hparams(p->m);
    gguf_shard_tensor *e = &p->e[i];
    gguf_shard_slice *sl = shard_slice(p, i, r);
    gguf_shard_piece pc = whole_piece(e, (int32_t)i);
    int32_t npc = 1;
    int64_t lo, hi;
    const int tp = p->tp;
    switch (s->rule) {
    case GGUF_RULE_REPLICATED:
        break;
    case GGUF_RULE_VOCAB: {
        int64_t per = p->vocab_padded / tp, V = e->ne[1];
        if (p->vocab_padded % tp)
            shard_split(p->vocab_padded, tp, r, &lo, &hi), per = hi - lo;
        else
            lo = per * r, hi = lo + per;
        int64_t rlo = lo < V ? lo : V, rhi = hi < V ? hi : V;
        pc.lo[1] = rlo;
        pc.hi[1] = rhi;
        sl->pad = (hi - lo) - (rhi - rlo);
        if (rhi <= rlo)
            npc = 0;
        break;
    }
    case GGUF_RULE_QKV:
        if (s->slot > 0 && hp->n_head_kv < tp) {
            /* fewer kv heads than ranks: each rank holds one whole kv head */
            int64_t h = (int64_t)r * hp->n_head_kv / tp;
            lo = h * s->unit;
            hi = lo + s->unit;
        } else {
            shard_split(s->units, tp, r, &lo, &hi);
            lo *= s->unit;
            hi *= s->unit;
        }
        pc.lo[s->split_dim] = lo;
        pc.hi[s->split_dim] = hi;
        break;
    case GGUF_RULE_EXPERT: {
        if (p->ep > 1) {
            int64_t elo, ehi;
            gguf_shard_plan_experts(p, r, &elo, &ehi);
            pc.lo[2] = elo;
            pc.hi[2] = ehi;
        }
        if (p->moe_tp > 1) {
            shard_split(s->units, p->moe_tp, r % p->moe_tp, &lo, &hi);
            pc.lo[s->split_dim] = lo;
            pc.hi[s->split_dim] = hi;
        }
        break;
    }
    default: /* column, row, merged, heads */
        shard_split(s->units, tp, r, &lo, &hi);
        pc.lo[s->split_dim] = lo * s->unit;
        pc.hi[s->split_dim] = hi * s->unit;
        break;
    }
    int rc = shard_set_pieces(sl, &pc, npc);
    if (rc)
        return rc;
    shard_slice_finish(p, i, r);
    if (s->rule == GGUF_RULE_VOCAB) {
        sl->range_lo = pc.lo[1];
        sl->range_hi = pc.hi[1];
    }
    return 0;
}

static const char *layer_role_name(const gguf_shard_plan *p, int64_t il, gguf_role r, char *buf,
                                   size_t size)
{
    (void)p;
    if (gguf_role_is_global(r))
        snprintf(buf, size, "%s.%s", gguf_role_name(r), gguf_role_suffix(r));
    else
        snprintf(buf, size, "blk.%lld.%s.%s", (long long)il, gguf_role_name(r),
                 gguf_role_suffix(r));
    return buf;
}

static int plan_checks(gguf_shard_plan *p)
{
    const gguf_hparams *hp = gguf_model_hparams(p->m);
    const int tp = p->tp;
    int rc = 0;
#define CHK(...)                                                                              \
    do {                                                                                      \
        if ((rc = shard_check(p, __VA_ARGS__)) != 0)                                          \
            return rc;                                                                        \
    } while (0)
    if (hp->n_head % tp)
        CHK(GGUF_CHECK_ERROR, "heads", NULL,
            "%lld attention heads do not divide over tp %d: ranks would hold parts of heads",
            (long long)hp->n_head, tp);
    if (!hp->is_mla) {
        if (hp->n_head_kv >= tp && hp->n_head_kv % tp)
            CHK(GGUF_CHECK_ERROR, "kv_heads", NULL, "%lld kv heads do not divide over tp %d",
                (long long)hp->n_head_kv, tp);
        else if (hp->n_head_kv < tp && tp % hp->n_head_kv)
            CHK(GGUF_CHECK_ERROR, "kv_heads", NULL,
                "tp %d is not a multiple of the %lld kv heads: they cannot be replicated evenly",
                tp, (long long)hp->n_head_kv);
        else if (hp->n_head_kv < tp)
            CHK(GGUF_CHECK_INFO, "kv_heads", NULL,
                "tp %d > %lld kv heads: each kv head replicated on %lld ranks (rank r holds kv "
                "head r*%lld/%d)",
                tp, (long long)hp->n_head_kv, (long long)(tp / hp->n_head_kv),
                (long long)hp->n_head_kv, tp);
    } else {
        CHK(GGUF_CHECK_INFO, "kv_heads", NULL,
            "MLA: head_count_kv = %lld is the shared latent; kv_b_proj is split by the %lld "
            "attention heads, the latent cache (kv_a_mqa) is replicated",
            (long long)hp->n_head_kv, (long long)hp->n_head);
    }
    bool has_dense = false, has_moe = false;
    for (int64_t il = 0; il < hp->n_layer; il++) {
        if (entry_of(p, il, GGUF_ROLE_FFN_UP) >= 0)
            has_dense = true;
        if (entry_of(p, il, GGUF_ROLE_FFN_UP_EXPS) >= 0)
            has_moe = true;
    }
    if (has_dense && hp->n_ff % tp)
        CHK(GGUF_CHECK_ERROR, "ffn", NULL, "FFN width %lld does not divide over tp %d",
            (long long)hp->n_ff, tp);
    if (has_moe && hp->n_ff_shexp && hp->n_ff_shexp % tp)
        CHK(GGUF_CHECK_ERROR, "ffn", NULL, "shared expert width %lld does not divide over tp %d",
            (long long)hp->n_ff_shexp, tp);
    if (has_moe && hp->n_ff_exp % p->moe_tp)
        CHK(GGUF_CHECK_ERROR, "expert_ffn", NULL,
            "expert width %lld does not divide over the MoE tensor-parallel size %d",
            (long long)hp->n_ff_exp, p->moe_tp);
    if (p->ep > 1 && hp->n_expert % p->ep)
        CHK(GGUF_CHECK_ERROR, "experts_ep", NULL, "%lld experts do not divide over ep %d",
            (long long)hp->n_expert, p->ep);
    if (p->ep > 1 && !has_moe)
        CHK(GGUF_CHECK_WARN, "experts_ep", NULL, "ep %d given but the model has no experts",
            p->ep);
    if (p->ep > 1 && p->o.engine == GGUF_ENGINE_VLLM && p->ep != tp)
        CHK(GGUF_CHECK_ERROR, "ep_config", NULL,
            "vllm: the expert-parallel size is tp*dp = %d (dp 1); --ep %d cannot differ", tp,
            p->ep);
    if (p->ep > 1 && p->o.engine == GGUF_ENGINE_SGLANG && tp % p->ep)
        CHK(GGUF_CHECK_ERROR, "ep_config", NULL, "sglang: ep %d must divide tp %d", p->ep, tp);
    if (p->vocab_padded % tp)
        CHK(GGUF_CHECK_ERROR, "vocab", NULL,
            "vocabulary %lld padded to %lld (multiple of %d) does not divide over tp %d",
            (long long)hp->n_vocab, (long long)p->vocab_padded, p->o.vocab_pad, tp);
    else if (p->vocab_padded != hp->n_vocab)
        CHK(GGUF_CHECK_INFO, "vocab", NULL,
            "vocabulary %lld padded to %lld (multiple of %d): %lld rows per rank, %lld zero rows "
            "on the last rank(s)",
            (long long)hp->n_vocab, (long long)p->vocab_padded, p->o.vocab_pad,
            (long long)(p->vocab_padded / tp), (long long)(p->vocab_padded - hp->n_vocab));

    /* Quantized cuts that need dequantization, aggregated by role. The kv_b of MLA models
     * (reassembled from a transposed attn_k_b) is an info line of its own. The stored
     * tensors make one warning in all: a model whose widths are not whole blocks per rank
     * has the same cause in every row-parallel role (attn_output, ffn_down, the experts'
     * down...), and four lines for one caution read like four problems. The tensor table
     * (CUT: dequant) and the JSON (quant_cut_ok, reason per rank) name each tensor. */
    {
        char list[200] = "";
        size_t len = 0;
        int n_roles = 0, n_listed = 0;
        int64_t n_tensors = 0;
        const gguf_shard_tensor *first_e = NULL;
        const char *first_reason = "";
        for (int role = 1; role < GGUF_ROLE_COUNT; role++) {
            int64_t count = 0, first = -1;
            for (int64_t i = 0; i < p->n; i++) {
                if (p->e[i].role != (gguf_role)role)
                    continue;
                for (int r = 0; r < tp; r++)
                    if (!p->sl[i][r].quant_cut_ok) {
                        if (first < 0)
                            first = i;
                        count++;
                        break;
                    }
            }
            if (!count)
                continue;
            const gguf_shard_tensor *e = &p->e[first];
            const gguf_shard_slice *bad = NULL;
            for (int r = 0; r < tp && !bad; r++)
                if (!e->ranks[r].quant_cut_ok)
                    bad = &e->ranks[r];
            /* Name the type that blocks the cut: for the virtual kv_b (reassembled, so F32
             * itself) that is the stored attn_k_b its transposed pieces come from. */
            uint32_t type = e->type;
            const char *from = "";
            for (int32_t k = 0; bad && k < bad->n_pieces; k++)
                if (bad->pieces[k].transpose) {
                    type = p->e[bad->pieces[k].src].type;
                    from = "attn_k_b ";
                    break;
                }
            const gguf_type_info *ti = gguf_type_get(type);
            const unsigned block = ti ? ti->block_size : 1;
            if (e->is_virtual) {
                CHK(GGUF_CHECK_INFO, "quant_block", e->name,
                    "%s%s (%lld tensor%s, %s%s, block %u): %s", e->name,
                    count > 1 ? " and alike" : "", (long long)count, count > 1 ? "s" : "", from,
                    gguf_type_name(type), block, bad ? bad->reason : "");
                continue;
            }
            if (!first_e) {
                first_e = e;
                first_reason = bad ? bad->reason : "";
            }
            n_roles++;
            n_tensors += count;
            if (len + 48 < sizeof list) {
                int w = snprintf(list + len, sizeof list - len, "%s%s %lld %s/%u",
                                 n_listed ? ", " : "", gguf_role_name((gguf_role)role),
                                 (long long)count, gguf_type_name(type), block);
                if (w > 0 && (size_t)w < sizeof list - len) {
                    len += (size_t)w;
                    n_listed++;
                }
            }
        }
        if (n_roles == 1) {
            const gguf_type_info *ti = gguf_type_get(first_e->type);
            CHK(GGUF_CHECK_WARN, "quant_block", first_e->name,
                "%s%s (%lld tensor%s, %s, block %u): %s", first_e->name,
                n_tensors > 1 ? " and alike" : "", (long long)n_tensors,
                n_tensors > 1 ? "s" : "", gguf_type_name(first_e->type),
                ti ? ti->block_size : 1, first_reason);
        } else if (n_roles > 1) {
            CHK(GGUF_CHECK_WARN, "quant_block", first_e->name,
                "%lld tensors cut inside a quantized block at tp %d, dequantize first (role, "
                "tensors, type/block: %s%s; CUT column or -v for each)",
                (long long)n_tensors, tp, list, n_listed < n_roles ? ", ..." : "");
        }
    }

    /* Tensors the engine expects but the file lacks; tensors nobody consumes. */
    int64_t n_missing = 0;
    for (int64_t il = -1; il < hp->n_layer; il++)
        for (int role = 1; role < GGUF_ROLE_COUNT; role++) {
            if (gguf_model_role_expected(p->m, il, (gguf_role)role) != 1)
                continue;
            if (gguf_model_get(p->m, il, (gguf_role)role))
                continue;
            if (n_missing++ < 20) {
                char nm[128], hf[160];
                if (gguf_role_hf_name(hp->arch, (gguf_role)role, il, hf, sizeof hf, NULL) != 0)
                    snprintf(hf, sizeof hf, "no HF name");
                CHK(GGUF_CHECK_ERROR, "missing", NULL,
                    "%s: the engine loads it (HF %s) but the file lacks it",
                    layer_role_name(p, il, (gguf_role)role, nm, sizeof nm), hf);
            }
        }
    if (n_missing > 20)
        CHK(GGUF_CHECK_ERROR, "missing", NULL, "%lld more missing tensors",
            (long long)(n_missing - 20));
    for (int64_t i = 0; i < p->n; i++)
        if (!p->e[i].consumed)
            CHK(GGUF_CHECK_WARN, "unconsumed", p->e[i].name,
                "%s: no engine layer consumes this tensor (%s)", p->e[i].name,
                p->e[i].role == GGUF_ROLE_UNKNOWN ? "unknown name"
                                                  : "not part of this architecture's layer");
    /* DeepSeek-V3-style routing (sigmoid scores) selects experts with a bias the HF model
     * calls e_score_correction_bias; the engines load it for noaux_tc routing */
    if (has_moe && hp->gating == GGUF_GATING_SIGMOID && !hp->has_exp_probs_b)
        CHK(GGUF_CHECK_WARN, "missing", NULL,
            "sigmoid expert routing without exp_probs_b.bias (HF mlp.gate.e_score_correction_bias): "
            "engines using noaux_tc routing expect it");
    if (hp->n_nextn > 0)
        CHK(GGUF_CHECK_INFO, "nextn", NULL,
            "blocks %lld..%lld are next-token-prediction (MTP) blocks: loaded only for "
            "speculative decoding, sharded like the others",
            (long long)hp->n_layer_main, (long long)(hp->n_layer - 1));
#undef CHK
    return 0;
}

int gguf_shard_plan_create(gguf_shard_plan **out, const gguf_model *m, const gguf_shard_opts *opts,
                           gguf_error *err)
{
    if (opts && opts->version > GGUF_SHARD_OPTS_VERSION) {
        if (out)
            *out = NULL;
        return gguf_opts_version_fail(opts->version, GGUF_SHARD_OPTS_VERSION, "gguf_shard_opts", err);
    }
    if (!out || !m || !opts)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "shard plan: NULL argument");
    *out = NULL;
    const gguf_hparams *hp = gguf_model_hparams(m);
    if (opts->tp < 1 || opts->tp > 4096)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "shard plan: tp %d out of 1..4096",
                         opts->tp);
    if (opts->ep < 0 || (opts->ep > 1 && opts->ep > opts->tp))
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "shard plan: ep %d must be 0..tp (%d): experts are spread over the tp "
                         "ranks",
                         opts->ep, opts->tp);
    if (opts->ep > 1 && hp->n_expert > 0 && opts->ep > hp->n_expert)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "shard plan: ep %d exceeds the %lld experts", opts->ep,
                         (long long)hp->n_expert);
    if (opts->engine != GGUF_ENGINE_VLLM && opts->engine != GGUF_ENGINE_SGLANG)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "shard plan: unknown engine");
    if (opts->vocab_pad < 0 || opts->vocab_pad > (1 << 20))
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "shard plan: vocab_pad %d",
                         opts->vocab_pad);

    gguf_shard_plan *p = calloc(1, sizeof *p);
    if (!p)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    int rc = 0;
    p->m = m;
    p->o = *opts;
    if (p->o.vocab_pad == 0)
        p->o.vocab_pad = 64; /* vLLM and SGLang: DEFAULT_VOCAB_PADDING_SIZE */
    p->tp = opts->tp;
    p->ep = opts->ep > 1 ? opts->ep : 1;
    p->moe_tp = p->ep > 1 ? (p->tp % p->ep ? 1 : p->tp / p->ep) : p->tp;
    p->vocab_padded = (hp->n_vocab + p->o.vocab_pad - 1) / p->o.vocab_pad * p->o.vocab_pad;
    p->rank_bytes = calloc((size_t)p->tp, sizeof *p->rank_bytes);
    p->by_role = calloc((size_t)(hp->n_layer + 1) * GGUF_ROLE_COUNT, sizeof *p->by_role);
    if (!p->rank_bytes || !p->by_role) {
        rc = GGUF_E_NOMEM;
        goto done;
    }
    p->rt.rope_pairs = hp->rope_pairs;
    p->rt.attn_scale = hp->attn_scale;
    p->rt.routed_scale = hp->routed_scale;
    p->rt.use_exp_probs_b = hp->has_exp_probs_b;
    p->rt.norm_topk = hp->norm_topk;
    p->rt.shared_scale = 1.0;
    p->rt.mla_cache_replicated = true;

    /* Stored tensors, in model order; room for them and a virtual kv_b per layer up front. */
    const int64_t nt = gguf_model_tensor_count(m);
    p->cap = nt + hp->n_layer + 1;
    p->e = malloc((size_t)p->cap * sizeof *p->e);
    p->sl = malloc((size_t)p->cap * sizeof *p->sl);
    p->names = malloc((size_t)p->cap * sizeof *p->names);
    if (!p->e || !p->sl || !p->names) {
        rc = GGUF_E_NOMEM;
        goto done;
    }
    for (int64_t k = 0; k < nt; k++) {
        const gguf_model_tensor *mt = gguf_model_tensor_at(m, k);
        int64_t i = new_entry(p);
        if (i < 0) {
            rc = (int)i;
            goto done;
        }
        gguf_shard_tensor *e = &p->e[i];
        e->name = mt->t->name;
        e->hf_name = mt->hf_name;
        e->role = mt->role;
        e->layer = mt->layer;
        e->t = mt->t;
        e->type = mt->t->type;
        e->n_dims = mt->t->n_dims;
        for (int d = 0; d < 4; d++)
            e->ne[d] = mt->t->ne[d];
        e->consumed = mt->role != GGUF_ROLE_UNKNOWN &&
                      gguf_model_role_expected(m, mt->layer, mt->role) != 0;
        if (mt->role != GGUF_ROLE_UNKNOWN && mt->layer >= -1 && mt->layer < hp->n_layer)
            p->by_role[(mt->layer + 1) * GGUF_ROLE_COUNT + mt->role] = (int32_t)(i + 1);
    }
    for (int64_t i = 0; i < p->n; i++) {
        gguf_shard_tensor *e = &p->e[i];
        rule_spec s = spec_for(p, e);
        if (!e->consumed)
            s = (rule_spec){GGUF_RULE_REPLICATED, -1, -1, 1, NULL, -1, false, 1, 1};
        e->rule = s.rule;
        e->split_dim = s.split_dim;
        e->expert_dim = s.expert_dim;
        e->cat_dim = s.cat_dim;
        e->fused = s.fused;
        e->slot = s.slot;
        e->reduce_sum = s.reduce && p->tp > 1;
        if (s.rule == GGUF_RULE_EXPERT)
            e->reduce_sum = s.reduce && p->moe_tp > 1;
        for (int r = 0; r < p->tp; r++)
            if ((rc = build_slice(p, i, r, &s)) != 0)
                goto done;
    }

    /* Virtual kv_b_proj entries: what the engines load, reassembled per head. */
    if (hp->is_mla && hp->mla_kv_b_split) {
        for (int64_t il = 0; il < hp->n_layer; il++) {
            int32_t kb = entry_of(p, il, GGUF_ROLE_ATTN_K_B);
            int32_t vb = entry_of(p, il, GGUF_ROLE_ATTN_V_B);
            if (kb < 0 || vb < 0)
                continue;
            int64_t i = new_entry(p);
            if (i < 0) {
                rc = (int)i;
                goto done;
            }
            gguf_shard_tensor *e = &p->e[i];
            char nm[96];
            snprintf(nm, sizeof nm, "blk.%lld.attn_kv_b.weight", (long long)il);
            p->names[i] = strdup(nm);
            if (!p->names[i]) {
                rc = GGUF_E_NOMEM;
                goto done;
            }
            e->name = p->names[i];
            e->hf_name = p->e[kb].hf_name; /* model.layers.N.self_attn.kv_b_proj.weight */
            e->role = GGUF_ROLE_ATTN_KV_B;
            e->layer = il;
            e->rule = GGUF_RULE_HEADS;
            e->split_dim = 1;
            e->expert_dim = -1;
            e->cat_dim = 1;
            e->fused = "kv_b_proj";
            e->slot = -1;
            e->is_virtual = true;
            e->consumed = true;
            e->type = p->e[kb].type == p->e[vb].type ? p->e[kb].type : GGUF_TYPE_F32;
            e->n_dims = 2;
            e->ne[0] = hp->kv_lora_rank;
            e->ne[1] = hp->n_head * (hp->qk_nope + hp->v_head);
            e->ne[2] = e->ne[3] = 1;
            p->by_role[(il + 1) * GGUF_ROLE_COUNT + GGUF_ROLE_ATTN_KV_B] = (int32_t)(i + 1);
            const int64_t hs = hp->qk_nope + hp->v_head;
            for (int r = 0; r < p->tp; r++) {
                int64_t h0, h1;
                shard_split(hp->n_head, p->tp, r, &h0, &h1);
                gguf_shard_piece *pc;
                int32_t npc;
                if ((rc = shard_kvb_pieces(p, il, h0 * hs, h1 * hs, false, true, 0, &pc, &npc)))
                    goto done;
                gguf_shard_slice *sl = shard_slice(p, i, r);
                free((void *)sl->pieces);
                sl->pieces = pc;
                sl->n_pieces = npc;
                shard_slice_finish(p, i, r);
                sl->range_lo = h0 * hs;
                sl->range_hi = h1 * hs;
            }
        }
    }
    for (int64_t i = 0; i < p->n; i++)
        p->e[i].ranks = p->sl[i];
    if ((rc = plan_checks(p)) != 0)
        goto done;
    shard_totals(p);
done:
    if (rc) {
        gguf_shard_plan_free(p);
        return gguf_fail(err, rc, GGUF_NO_OFFSET, "%s: shard plan: %s", gguf_model_name(m),
                         gguf_strerror(rc));
    }
    *out = p;
    return 0;
}

void gguf_shard_plan_free(gguf_shard_plan *p)
{
    if (!p)
        return;
    for (int64_t i = 0; i < p->n; i++) {
        if (p->sl[i])
            for (int r = 0; r < p->tp; r++)
                free((void *)p->sl[i][r].pieces);
        free(p->sl[i]);
        free(p->names[i]);
    }
    free(p->e);
    free(p->sl);
    free(p->names);
    free(p->by_role);
    free(p->checks);
    free(p->rank_bytes);
    free(p);
}

/* ---------------- accessors ---------------- */

const gguf_model *gguf_shard_plan_model(const gguf_shard_plan *p)
{
    return p->m;
}

const gguf_shard_opts *gguf_shard_plan_opts(const gguf_shard_plan *p)
{
    return &p->o;
}

int gguf_shard_plan_ranks(const gguf_shard_plan *p)
{
    return p->tp;
}

int gguf_shard_plan_moe_tp(const gguf_shard_plan *p)
{
    return p->moe_tp;
}

int gguf_shard_plan_ep_rank(const gguf_shard_plan *p, int r)
{
    return (int)ep_rank_of(p, r);
}

void gguf_shard_plan_experts(const gguf_shard_plan *p, int r, int64_t *first, int64_t *end)
{
    const gguf_hparams *hp = gguf_model_hparams(p->m);
    if (p->ep <= 1) {
        *first = 0;
        *end = hp->n_expert;
        return;
    }
    shard_split(hp->n_expert, p->ep, ep_rank_of(p, r), first, end);
}

int64_t gguf_shard_plan_count(const gguf_shard_plan *p)
{
    return p->n;
}

const gguf_shard_tensor *gguf_shard_plan_at(const gguf_shard_plan *p, int64_t i)
{
    if (i < 0 || i >= p->n)
        return NULL;
    return &p->e[i];
}

const gguf_shard_tensor *gguf_shard_plan_find(const gguf_shard_plan *p, const char *name)
{
    if (!name)
        return NULL;
    const gguf_model_tensor *mt = gguf_model_tensor_find(p->m, name);
    if (mt) /* stored entries come first, in model order */
        return &p->e[mt - gguf_model_tensor_at(p->m, 0)];
    for (int64_t i = gguf_model_tensor_count(p->m); i < p->n; i++)
        if (!strcmp(p->e[i].name, name))
            return &p->e[i];
    return NULL;
}

const gguf_shard_tensor *gguf_shard_plan_get(const gguf_shard_plan *p, int64_t layer,
                                             gguf_role role)
{
    int32_t i = entry_of(p, layer, role);
    return i < 0 ? NULL : &p->e[i];
}

const gguf_shard_runtime *gguf_shard_plan_runtime(const gguf_shard_plan *p)
{
    return &p->rt;
}

int64_t gguf_shard_plan_check_count(const gguf_shard_plan *p)
{
    return p->n_checks;
}

const gguf_shard_check *gguf_shard_plan_check_at(const gguf_shard_plan *p, int64_t i)
{
    if (i < 0 || i >= p->n_checks)
        return NULL;
    return &p->checks[i];
}

int64_t gguf_shard_plan_check_worst(const gguf_shard_plan *p, gguf_check_level level)
{
    int64_t n = 0;
    for (int64_t i = 0; i < p->n_checks; i++)
        if (p->checks[i].level >= level)
            n++;
    return n;
}

uint64_t gguf_shard_plan_rank_bytes(const gguf_shard_plan *p, int r)
{
    if (r < 0 || r >= p->tp)
        return 0;
    return p->rank_bytes[r];
}

uint64_t gguf_shard_plan_max_rank_bytes(const gguf_shard_plan *p, int *rank)
{
    int best = 0;
    for (int r = 1; r < p->tp; r++)
        if (p->rank_bytes[r] > p->rank_bytes[best])
            best = r;
    if (rank)
        *rank = best;
    return p->rank_bytes[best];
}
