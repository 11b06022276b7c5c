/*
 * The fault catalog: plan transformations that reproduce what broken engine
 * loaders did. docs/faults.md gives each one its incident and a picture.
 */
#include "util/error_lib.h"
#include "shard/shard_internal.h"

#include <stdlib.h>
#include <string.h>

#include "gguf/types.h"

typedef struct fault_desc {
    const char *name;
    const char *summary;
    bool config;
} fault_desc;

static const fault_desc faults[GGUF_FAULT_COUNT] = {
    [GGUF_FAULT_NONE] = {"none", "no fault", false},
    [GGUF_FAULT_KV_B_WHOLE] = {"kv-b-whole", "MLA kv_b_proj loaded whole on every rank instead "
                                             "of the rank's whole heads", false},
    [GGUF_FAULT_KV_B_ROWS] = {"kv-b-rows", "kv_b_proj rows cut at offsets counted with the q/k "
                                           "head width (nope+rope), not whole heads", false},
    [GGUF_FAULT_KV_B_STACKED] = {"kv-b-stacked", "kv_b_proj reassembled as [K all heads; V all "
                                                 "heads] instead of per head [k_h; v_h]", false},
    [GGUF_FAULT_K_B_NO_TRANSPOSE] = {"k-b-no-transpose", "attn_k_b copied into kv_b_proj "
                                                         "without its transpose", false},
    [GGUF_FAULT_QKV_STREAM] = {"qkv-stream", "fused qkv_proj cut in stream order [Q;K;V] instead "
                                             "of slot order [q_r;k_r;v_r]", false},
    [GGUF_FAULT_GATE_UP_STREAM] = {"gate-up-stream", "fused gate_up_proj cut in stream order "
                                                     "[G;U] instead of slot order [g_r;u_r]",
                                   false},
    [GGUF_FAULT_RANK0_EVERYWHERE] = {"rank0-everywhere", "every rank given rank 0's slice",
                                     false},
    [GGUF_FAULT_KV_HEADS_SPLIT] = {"kv-heads-split", "kv heads split over ranks instead of "
                                                     "replicated when tp > n_kv (k norm sliced "
                                                     "with them)", false},
    [GGUF_FAULT_MLA_CACHE_SHARDED] = {"mla-cache-sharded", "MLA latent KV (kv_a_mqa, kv_a_norm) "
                                                           "sharded instead of replicated", false},
    [GGUF_FAULT_NO_ALLREDUCE] = {"no-allreduce", "row-parallel outputs used without the "
                                                 "all-reduce", false},
    [GGUF_FAULT_QUANT_OFF_BLOCK] = {"quant-off-block", "quantized tensor cut inside rows at a "
                                                       "block boundary rounded down, not at the "
                                                       "element offset", false},
    [GGUF_FAULT_VOCAB_NO_PAD] = {"vocab-no-pad", "vocab split without the engine's padding to "
                                                 "a multiple of 64", false},
    [GGUF_FAULT_EXPERT_OFFSET] = {"expert-offset", "experts owned with an offset of one (rank "
                                                   "holds experts lo+1..hi)", false},
    [GGUF_FAULT_NORM_SLICED] = {"norm-sliced", "a replicated norm (attn_norm) sliced over ranks",
                                false},
    [GGUF_FAULT_ROPE_PAIRS] = {"rope-pairs", "RoPE pair convention swapped (adjacent vs half): "
                                             "llama's Q/K permutation ignored", true},
    [GGUF_FAULT_YARN_MSCALE] = {"yarn-mscale", "YaRN mscale^2 missing from the attention softmax "
                                               "scale", true},
    [GGUF_FAULT_ROUTED_SCALE] = {"routed-scale", "routed_scaling_factor not applied to the "
                                                 "routed experts", true},
    [GGUF_FAULT_EXP_PROBS_B] = {"exp-probs-b", "expert selection bias (e_score_correction_bias) "
                                               "ignored", true},
    [GGUF_FAULT_SHARED_SCALED] = {"shared-scaled", "shared expert output scaled by "
                                                   "routed_scaling_factor", true},
    [GGUF_FAULT_ROUTED_SCALE_TWICE] = {"routed-scale-twice", "routed_scaling_factor applied "
                                                             "twice (in top-k and on the output)",
                                       true},
    [GGUF_FAULT_SHARED_DOUBLE_REDUCE] = {"shared-double-reduce", "shared expert output "
                                                                 "all-reduced twice: scaled by tp",
                                         true},
};

const char *gguf_fault_name(gguf_fault f)
{
    if ((int)f < 0 || f >= GGUF_FAULT_COUNT)
        return "unknown";
    return faults[f].name;
}

const char *gguf_fault_summary(gguf_fault f)
{
    if ((int)f < 0 || f >= GGUF_FAULT_COUNT)
        return "unknown fault";
    return faults[f].summary;
}

int gguf_fault_from_name(const char *name, gguf_fault *out)
{
    for (int f = 0; name && f < GGUF_FAULT_COUNT; f++)
        if (!strcmp(faults[f].name, name)) {
            *out = (gguf_fault)f;
            return 0;
        }
    return GGUF_E_INVALID;
}

bool gguf_fault_is_config(gguf_fault f)
{
    return (int)f > 0 && f < GGUF_FAULT_COUNT && faults[f].config;
}

/* ---------------- helpers ---------------- */

static bool in_layer(const gguf_shard_tensor *e, int64_t layer)
{
    return layer < 0 || e->layer == layer;
}

static int64_t find_entry(const gguf_shard_plan *p, int64_t il, gguf_role r)
{
    const gguf_shard_tensor *e = gguf_shard_plan_get(p, il, r);
    return e ? e - p->e : -1;
}

/* One own piece: the entry's full box with dim d cut to [lo, hi), then pad. */
static int set_cut(gguf_shard_plan *p, int64_t i, int r, int d, int64_t lo, int64_t hi,
                   int64_t pad)
{
    const gguf_shard_tensor *e = &p->e[i];
    gguf_shard_piece pc;
    memset(&pc, 0, sizeof pc);
    pc.src = (int32_t)i;
    for (int k = 0; k < 4; k++)
        pc.hi[k] = e->ne[k];
    pc.lo[d] = lo;
    pc.hi[d] = hi;
    gguf_shard_slice *s = shard_slice(p, i, r);
    int rc = shard_set_pieces(s, &pc, hi > lo ? 1 : 0);
    if (rc)
        return rc;
    s->pad = pad;
    shard_slice_finish(p, i, r);
    return 0;
}

static int set_kvb(gguf_shard_plan *p, int64_t i, int r, int64_t a, int64_t b, bool stacked,
                   bool transpose_k)
{
    gguf_shard_piece *pc;
    int32_t n;
    int rc = shard_kvb_pieces(p, p->e[i].layer, a, b, stacked, transpose_k, 0, &pc, &n);
    if (rc)
        return rc;
    gguf_shard_slice *s = shard_slice(p, i, r);
    free((void *)s->pieces);
    s->pieces = pc;
    s->n_pieces = n;
    s->pad = 0;
    shard_slice_finish(p, i, r);
    s->range_lo = stacked ? -1 : a;
    s->range_hi = stacked ? -1 : b;
    return 0;
}

/*
 * Pieces for rows [a, a+len) of the concatenation of srcs (each n_rows[k] rows
 * along dim d), wrapping at the end; placed from dst 0.
 */
static int stream_pieces(gguf_shard_plan *p, int64_t i, int r, const int64_t *srcs,
                         const int64_t *n_rows, int n_src, int d, int64_t a, int64_t len)
{
    int64_t total = 0;
    for (int k = 0; k < n_src; k++)
        total += n_rows[k];
    gguf_shard_piece pcs[16];
    int32_t n = 0;
    int64_t pos = a % total, dst = 0;
    while (len > 0 && n < 16) {
        int64_t off = pos, k = 0;
        while (off >= n_rows[k]) {
            off -= n_rows[k];
            k++;
        }
        int64_t take = n_rows[k] - off < len ? n_rows[k] - off : len;
        gguf_shard_piece *pc = &pcs[n++];
        memset(pc, 0, sizeof *pc);
        pc->src = (int32_t)srcs[k];
        for (int q = 0; q < 4; q++)
            pc->hi[q] = p->e[srcs[k]].ne[q];
        pc->lo[d] = off;
        pc->hi[d] = off + take;
        pc->dst = dst;
        dst += take;
        len -= take;
        pos = (pos + take) % total;
    }
    gguf_shard_slice *s = shard_slice(p, i, r);
    int rc = shard_set_pieces(s, pcs, n);
    if (rc)
        return rc;
    s->pad = 0;
    shard_slice_finish(p, i, r);
    s->range_lo = s->range_hi = -1;
    return 0;
}

static int64_t slice_rows(const gguf_shard_plan *p, int64_t i, int r, int d)
{
    return p->sl[i][r].ne[d];
}

static int unsupported(gguf_error *err, gguf_fault f, const char *why)
{
    return gguf_fail(err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET, "fault %s: %s", gguf_fault_name(f),
                     why);
}

/* ---------------- the faults ---------------- */

static int fault_kvb(gguf_shard_plan *p, gguf_fault f, int64_t layer, int64_t *count,
                     gguf_error *err)
{
    const gguf_hparams *hp = gguf_model_hparams(p->m);
    if (!hp->is_mla)
        return unsupported(err, f, "the model has no MLA kv_b_proj");
    if (f == GGUF_FAULT_K_B_NO_TRANSPOSE && !hp->mla_kv_b_split)
        return unsupported(err, f, "the file stores a legacy attn_kv_b, no attn_k_b");
    if ((f == GGUF_FAULT_KV_B_WHOLE || f == GGUF_FAULT_KV_B_ROWS) && p->tp == 1)
        return unsupported(err, f, "tp 1: the one rank holds all of kv_b_proj anyway");
    const int64_t s = hp->qk_nope + hp->v_head, qk = hp->qk_nope + hp->qk_rope;
    const int64_t R = hp->n_head * s;
    if (f == GGUF_FAULT_KV_B_ROWS && qk == s)
        return unsupported(err, f, "qk_rope equals v_head: the offsets would be right");
    for (int64_t il = 0; il < hp->n_layer; il++) {
        if (layer >= 0 && il != layer)
            continue;
        int64_t i = find_entry(p, il, GGUF_ROLE_ATTN_KV_B);
        if (i < 0)
            continue;
        for (int r = 0; r < p->tp; r++) {
            int64_t h0, h1, rc = 0;
            shard_split(hp->n_head, p->tp, r, &h0, &h1);
            switch (f) {
            case GGUF_FAULT_KV_B_WHOLE:
                rc = set_kvb(p, i, r, 0, R, false, true);
                break;
            case GGUF_FAULT_KV_B_ROWS: {
                int64_t a = h0 * qk, len = (h1 - h0) * s;
                if (a + len > R)
                    a = R - len;
                rc = set_kvb(p, i, r, a, a + len, false, true);
                break;
            }
            case GGUF_FAULT_KV_B_STACKED:
                rc = set_kvb(p, i, r, h0 * s, h1 * s, true, true);
                break;
            default: /* K_B_NO_TRANSPOSE */
                rc = set_kvb(p, i, r, h0 * s, h1 * s, false, false);
                break;
            }
            if (rc)
                return (int)rc;
        }
        (*count)++;
    }
    return 0;
}

static int fault_qkv_stream(gguf_shard_plan *p, int64_t layer, int64_t *count, gguf_error *err)
{
    const gguf_hparams *hp = gguf_model_hparams(p->m);
    if (hp->is_mla)
        return unsupported(err, GGUF_FAULT_QKV_STREAM, "MLA has no fused qkv_proj");
    if (p->tp == 1)
        return unsupported(err, GGUF_FAULT_QKV_STREAM, "tp 1: stream order equals slot order");
    static const gguf_role sets[2][3] = {
        {GGUF_ROLE_ATTN_Q, GGUF_ROLE_ATTN_K, GGUF_ROLE_ATTN_V},
        {GGUF_ROLE_ATTN_Q_BIAS, GGUF_ROLE_ATTN_K_BIAS, GGUF_ROLE_ATTN_V_BIAS},
    };
    for (int64_t il = 0; il < hp->n_layer; il++) {
        if (layer >= 0 && il != layer)
            continue;
        for (int set = 0; set < 2; set++) {
            int64_t idx[3], rows[3];
            bool ok = true;
            for (int k = 0; k < 3; k++) {
                idx[k] = find_entry(p, il, sets[set][k]);
                if (idx[k] < 0)
                    ok = false;
            }
            if (!ok)
                continue;
            const int d = p->e[idx[0]].n_dims == 1 ? 0 : 1;
            for (int k = 0; k < 3; k++)
                rows[k] = p->e[idx[k]].ne[d];
            /* sizes each rank expects, taken before any change */
            int64_t (*want)[3] = malloc((size_t)p->tp * sizeof *want);
            if (!want)
                return GGUF_E_NOMEM;
            for (int r = 0; r < p->tp; r++)
                for (int k = 0; k < 3; k++)
                    want[r][k] = slice_rows(p, idx[k], r, d);
            for (int r = 0; r < p->tp; r++) {
                int64_t F = want[r][0] + want[r][1] + want[r][2];
                int64_t a = (int64_t)r * F;
                for (int k = 0; k < 3; k++) {
                    int rc = stream_pieces(p, idx[k], r, idx, rows, 3, d, a, want[r][k]);
                    if (rc) {
                        free(want);
                        return rc;
                    }
                    a += want[r][k];
                }
            }
            free(want);
            (*count)++;
        }
    }
    return 0;
}

static int fault_gate_up_stream(gguf_shard_plan *p, int64_t layer, int64_t *count,
                                gguf_error *err)
{
    const gguf_hparams *hp = gguf_model_hparams(p->m);
    if (p->tp == 1)
        return unsupported(err, GGUF_FAULT_GATE_UP_STREAM, "tp 1: stream order equals slot order");
    static const gguf_role pairs[2][2] = {
        {GGUF_ROLE_FFN_GATE, GGUF_ROLE_FFN_UP},
        {GGUF_ROLE_FFN_GATE_SHEXP, GGUF_ROLE_FFN_UP_SHEXP},
    };
    for (int64_t il = 0; il < hp->n_layer; il++) {
        if (layer >= 0 && il != layer)
            continue;
        for (int k = 0; k < 2; k++) {
            int64_t idx[2] = {find_entry(p, il, pairs[k][0]), find_entry(p, il, pairs[k][1])};
            if (idx[0] < 0 || idx[1] < 0)
                continue;
            int64_t rows[2] = {p->e[idx[0]].ne[1], p->e[idx[1]].ne[1]};
            int64_t *want = malloc((size_t)p->tp * 2 * sizeof *want);
            if (!want)
                return GGUF_E_NOMEM;
            for (int r = 0; r < p->tp; r++)
                for (int s = 0; s < 2; s++)
                    want[2 * r + s] = slice_rows(p, idx[s], r, 1);
            for (int r = 0; r < p->tp; r++) {
                int64_t a = (int64_t)r * (want[2 * r] + want[2 * r + 1]);
                for (int s = 0; s < 2; s++) {
                    int rc = stream_pieces(p, idx[s], r, idx, rows, 2, 1, a, want[2 * r + s]);
                    if (rc) {
                        free(want);
                        return rc;
                    }
                    a += want[2 * r + s];
                }
            }
            free(want);
            (*count)++;
        }
    }
    if (*count == 0)
        return unsupported(err, GGUF_FAULT_GATE_UP_STREAM,
                           "no dense or shared-expert gate/up pair in the chosen layers");
    return 0;
}

static int fault_rank0(gguf_shard_plan *p, int64_t layer, int64_t *count, gguf_error *err)
{
    if (p->tp == 1)
        return unsupported(err, GGUF_FAULT_RANK0_EVERYWHERE, "tp 1: there is only rank 0");
    for (int64_t i = 0; i < p->n; i++) {
        gguf_shard_tensor *e = &p->e[i];
        if (e->rule == GGUF_RULE_REPLICATED || !in_layer(e, layer))
            continue;
        const gguf_shard_slice *s0 = &p->sl[i][0];
        for (int r = 1; r < p->tp; r++) {
            gguf_shard_slice *s = shard_slice(p, i, r);
            int rc = shard_set_pieces(s, s0->pieces, s0->n_pieces);
            if (rc)
                return rc;
            s->pad = s0->pad;
            shard_slice_finish(p, i, r);
            s->range_lo = s0->range_lo;
            s->range_hi = s0->range_hi;
        }
        (*count)++;
    }
    return 0;
}

static int fault_kv_heads_split(gguf_shard_plan *p, int64_t layer, int64_t *count,
                                gguf_error *err)
{
    const gguf_hparams *hp = gguf_model_hparams(p->m);
    if (hp->is_mla)
        return unsupported(err, GGUF_FAULT_KV_HEADS_SPLIT, "MLA has no kv heads to replicate");
    if (p->tp <= hp->n_head_kv)
        return unsupported(err, GGUF_FAULT_KV_HEADS_SPLIT,
                           "tp is not above the number of kv heads: nothing is replicated");
    static const gguf_role roles[] = {GGUF_ROLE_ATTN_K, GGUF_ROLE_ATTN_V, GGUF_ROLE_ATTN_K_BIAS,
                                      GGUF_ROLE_ATTN_V_BIAS, GGUF_ROLE_ATTN_K_NORM};
    for (int64_t il = 0; il < hp->n_layer; il++) {
        if (layer >= 0 && il != layer)
            continue;
        for (size_t k = 0; k < sizeof roles / sizeof roles[0]; k++) {
            int64_t i = find_entry(p, il, roles[k]);
            if (i < 0)
                continue;
            gguf_shard_tensor *e = &p->e[i];
            const bool norm = roles[k] == GGUF_ROLE_ATTN_K_NORM;
            const int d = e->n_dims == 1 ? 0 : 1;
            const int64_t hd = norm ? e->ne[0]
                                    : (roles[k] == GGUF_ROLE_ATTN_V || roles[k] ==
                                       GGUF_ROLE_ATTN_V_BIAS)
                                          ? hp->n_embd_head_v
                                          : hp->n_embd_head_k;
            const int64_t total = norm ? hd * hp->n_head_kv : e->ne[d];
            if (norm) {
                e->split_dim = 0;
                e->cat_dim = 0;
                e->rule = GGUF_RULE_COLUMN;
            }
            for (int r = 0; r < p->tp; r++) {
                int64_t lo, hi;
                shard_split(total, p->tp, r, &lo, &hi);
                if (norm) { /* the per-head norm cut like the part of the head it scales */
                    int64_t len = hi - lo;
                    lo %= hd;
                    hi = lo + len < hd ? lo + len : hd;
                }
                int rc = set_cut(p, i, r, d, lo, hi, hd - (hi - lo));
                if (rc)
                    return rc;
            }
            (*count)++;
        }
    }
    return 0;
}

static int fault_mla_cache(gguf_shard_plan *p, int64_t layer, int64_t *count, gguf_error *err)
{
    const gguf_hparams *hp = gguf_model_hparams(p->m);
    if (!hp->is_mla)
        return unsupported(err, GGUF_FAULT_MLA_CACHE_SHARDED, "the model has no MLA latent");
    if (p->tp == 1)
        return unsupported(err, GGUF_FAULT_MLA_CACHE_SHARDED, "tp 1: nothing to shard");
    for (int64_t il = 0; il < hp->n_layer; il++) {
        if (layer >= 0 && il != layer)
            continue;
        for (int k = 0; k < 2; k++) {
            int64_t i = find_entry(p, il, k ? GGUF_ROLE_ATTN_KV_A_NORM : GGUF_ROLE_ATTN_KV_A_MQA);
            if (i < 0)
                continue;
            gguf_shard_tensor *e = &p->e[i];
            const int d = e->n_dims == 1 ? 0 : 1;
            e->rule = GGUF_RULE_COLUMN;
            e->split_dim = d;
            e->cat_dim = d;
            for (int r = 0; r < p->tp; r++) {
                int64_t lo, hi;
                shard_split(e->ne[d], p->tp, r, &lo, &hi);
                int rc = set_cut(p, i, r, d, lo, hi, e->ne[d] - (hi - lo));
                if (rc)
                    return rc;
            }
            (*count)++;
        }
    }
    p->rt.mla_cache_replicated = false;
    return 0;
}

static int fault_quant_off_block(gguf_shard_plan *p, int64_t layer, int64_t *count)
{
    for (int64_t i = 0; i < p->n; i++) {
        gguf_shard_tensor *e = &p->e[i];
        const gguf_type_info *ti = gguf_type_get(e->type);
        if (e->is_virtual || !in_layer(e, layer) || !ti || ti->block_size <= 1)
            continue;
        bool hit = false;
        for (int r = 0; r < p->tp; r++) {
            gguf_shard_slice *s = shard_slice(p, i, r);
            if (s->n_pieces != 1 || s->pieces[0].src != (int32_t)i)
                continue;
            gguf_shard_piece pc = s->pieces[0];
            if (pc.lo[0] % ti->block_size == 0 && pc.hi[0] % ti->block_size == 0)
                continue;
            /* the loader cut bytes at lo * type_size / block_size: whole blocks, rounded down */
            int64_t w = pc.hi[0] - pc.lo[0];
            pc.lo[0] = pc.lo[0] / ti->block_size * ti->block_size;
            pc.hi[0] = pc.lo[0] + w;
            if (pc.hi[0] > e->ne[0]) {
                pc.hi[0] = e->ne[0];
                pc.lo[0] = pc.hi[0] - w;
            }
            int rc = shard_set_pieces(s, &pc, 1);
            if (rc)
                return rc;
            shard_slice_finish(p, i, r);
            s->quant_cut_ok = true; /* what the broken loader believed */
            s->reason = NULL;
            hit = true;
        }
        if (hit)
            (*count)++;
    }
    return 0;
}

static int fault_vocab(gguf_shard_plan *p, int64_t layer, int64_t *count, gguf_error *err)
{
    const int64_t V = gguf_model_hparams(p->m)->n_vocab;
    const int64_t per_pad = p->vocab_padded / p->tp, per = (V + p->tp - 1) / p->tp;
    if (per == per_pad || p->tp == 1)
        return unsupported(err, GGUF_FAULT_VOCAB_NO_PAD,
                           "the padded and unpadded splits agree at this tp");
    for (int64_t i = 0; i < p->n; i++) {
        gguf_shard_tensor *e = &p->e[i];
        if (e->rule != GGUF_RULE_VOCAB || !in_layer(e, layer))
            continue;
        for (int r = 0; r < p->tp; r++) {
            int64_t lo = (int64_t)r * per, hi = lo + per_pad;
            if (lo > V)
                lo = V;
            if (hi > V)
                hi = V;
            int rc = set_cut(p, i, r, 1, lo, hi, per_pad - (hi - lo));
            if (rc)
                return rc;
        }
        (*count)++;
    }
    return 0;
}

static int fault_expert_offset(gguf_shard_plan *p, int64_t layer, int64_t *count, gguf_error *err)
{
    if (p->ep <= 1)
        return unsupported(err, GGUF_FAULT_EXPERT_OFFSET, "experts are not split by ep");
    const int64_t E = gguf_model_hparams(p->m)->n_expert;
    for (int64_t i = 0; i < p->n; i++) {
        gguf_shard_tensor *e = &p->e[i];
        if (e->rule != GGUF_RULE_EXPERT || !in_layer(e, layer))
            continue;
        for (int r = 0; r < p->tp; r++) {
            gguf_shard_slice *s = shard_slice(p, i, r);
            if (s->n_pieces != 1)
                continue;
            gguf_shard_piece pc[2] = {s->pieces[0], s->pieces[0]};
            int64_t lo = pc[0].lo[2] + 1, hi = pc[0].hi[2] + 1;
            int32_t n = 1;
            pc[0].lo[2] = lo;
            pc[0].hi[2] = hi < E ? hi : E;
            if (hi > E) { /* wraps to expert 0 */
                pc[1].lo[2] = 0;
                pc[1].hi[2] = hi - E;
                pc[1].dst = pc[0].hi[2] - pc[0].lo[2];
                n = 2;
            }
            int rc = shard_set_pieces(s, pc, n);
            if (rc)
                return rc;
            shard_slice_finish(p, i, r);
        }
        (*count)++;
    }
    return 0;
}

static int fault_norm_sliced(gguf_shard_plan *p, int64_t layer, int64_t *count, gguf_error *err)
{
    if (p->tp == 1)
        return unsupported(err, GGUF_FAULT_NORM_SLICED, "tp 1: nothing to slice");
    for (int64_t i = 0; i < p->n; i++) {
        gguf_shard_tensor *e = &p->e[i];
        if (e->role != GGUF_ROLE_ATTN_NORM || !in_layer(e, layer))
            continue;
        e->rule = GGUF_RULE_COLUMN;
        e->split_dim = 0;
        e->cat_dim = 0;
        for (int r = 0; r < p->tp; r++) {
            int64_t lo, hi;
            shard_split(e->ne[0], p->tp, r, &lo, &hi);
            int rc = set_cut(p, i, r, 0, lo, hi, e->ne[0] - (hi - lo));
            if (rc)
                return rc;
        }
        (*count)++;
    }
    return 0;
}

int gguf_shard_apply_fault(gguf_shard_plan *p, gguf_fault f, int64_t layer, gguf_error *err)
{
    if (!p || (int)f <= 0 || f >= GGUF_FAULT_COUNT)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "fault: invalid argument");
    const gguf_hparams *hp = gguf_model_hparams(p->m);
    if (layer >= hp->n_layer)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "fault %s: layer %lld beyond %lld",
                         gguf_fault_name(f), (long long)layer, (long long)hp->n_layer);
    int64_t count = 0;
    int rc = 0;
    switch (f) {
    case GGUF_FAULT_KV_B_WHOLE:
    case GGUF_FAULT_KV_B_ROWS:
    case GGUF_FAULT_KV_B_STACKED:
    case GGUF_FAULT_K_B_NO_TRANSPOSE:
        rc = fault_kvb(p, f, layer, &count, err);
        break;
    case GGUF_FAULT_QKV_STREAM:
        rc = fault_qkv_stream(p, layer, &count, err);
        break;
    case GGUF_FAULT_GATE_UP_STREAM:
        rc = fault_gate_up_stream(p, layer, &count, err);
        break;
    case GGUF_FAULT_RANK0_EVERYWHERE:
        rc = fault_rank0(p, layer, &count, err);
        break;
    case GGUF_FAULT_KV_HEADS_SPLIT:
        rc = fault_kv_heads_split(p, layer, &count, err);
        break;
    case GGUF_FAULT_MLA_CACHE_SHARDED:
        rc = fault_mla_cache(p, layer, &count, err);
        break;
    case GGUF_FAULT_NO_ALLREDUCE:
        if (p->tp == 1)
            return unsupported(err, f, "tp 1: there is nothing to reduce");
        for (int64_t i = 0; i < p->n; i++)
            if (p->e[i].reduce_sum && in_layer(&p->e[i], layer)) {
                p->e[i].reduce_sum = false;
                count++;
            }
        break;
    case GGUF_FAULT_QUANT_OFF_BLOCK:
        rc = fault_quant_off_block(p, layer, &count);
        if (!rc && !count)
            return unsupported(err, f,
                               "every inner cut of a quantized tensor is on a block boundary at "
                               "this tp");
        break;
    case GGUF_FAULT_VOCAB_NO_PAD:
        rc = fault_vocab(p, layer, &count, err);
        break;
    case GGUF_FAULT_EXPERT_OFFSET:
        rc = fault_expert_offset(p, layer, &count, err);
        break;
    case GGUF_FAULT_NORM_SLICED:
        rc = fault_norm_sliced(p, layer, &count, err);
        break;
    case GGUF_FAULT_ROPE_PAIRS:
        if (hp->n_rot == 0)
            return unsupported(err, f, "the model has no RoPE");
        p->rt.rope_pairs =
            p->rt.rope_pairs == GGUF_ROPE_ADJACENT ? GGUF_ROPE_HALF : GGUF_ROPE_ADJACENT;
        count = 1;
        break;
    case GGUF_FAULT_YARN_MSCALE:
        if (hp->yarn_mscale == 1.0 || !hp->is_mla)
            return unsupported(err, f, "no YaRN mscale in this model's attention scale");
        p->rt.attn_scale = hp->attn_scale / (hp->yarn_mscale * hp->yarn_mscale);
        count = 1;
        break;
    case GGUF_FAULT_ROUTED_SCALE:
        if (hp->n_expert == 0 || hp->routed_scale == 1.0)
            return unsupported(err, f, "routed_scaling_factor is 1 or the model has no experts");
        p->rt.routed_scale = 1.0;
        count = 1;
        break;
    case GGUF_FAULT_EXP_PROBS_B:
        if (!hp->has_exp_probs_b)
            return unsupported(err, f, "the model has no exp_probs_b");
        p->rt.use_exp_probs_b = false;
        count = 1;
        break;
    case GGUF_FAULT_SHARED_SCALED:
        if (hp->n_expert_shared == 0 || hp->routed_scale == 1.0)
            return unsupported(err, f, "no shared expert, or routed_scaling_factor is 1");
        p->rt.shared_scale = hp->routed_scale;
        count = 1;
        break;
    case GGUF_FAULT_ROUTED_SCALE_TWICE:
        if (hp->n_expert == 0 || hp->routed_scale == 1.0)
            return unsupported(err, f, "routed_scaling_factor is 1 or the model has no experts");
        p->rt.routed_scale = hp->routed_scale * hp->routed_scale;
        count = 1;
        break;
    case GGUF_FAULT_SHARED_DOUBLE_REDUCE:
        if (hp->n_expert_shared == 0)
            return unsupported(err, f, "the model has no shared expert");
        if (p->tp == 1)
            return unsupported(err, f, "tp 1: an all-reduce over one rank changes nothing");
        p->rt.shared_scale = (double)p->tp;
        count = 1;
        break;
    default:
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "fault: invalid fault");
    }
    if (rc == GGUF_E_NOMEM)
        return gguf_fail(err, rc, GGUF_NO_OFFSET, "fault %s: out of memory", gguf_fault_name(f));
    if (rc)
        return rc;
    if (count == 0)
        return unsupported(err, f, layer >= 0 ? "no tensor of that kind in the chosen layer"
                                              : "no tensor of that kind in this model");
    for (int64_t i = 0; i < p->n; i++)
        p->e[i].ranks = p->sl[i];
    shard_totals(p);
    rc = shard_check(p, GGUF_CHECK_ERROR, "fault", NULL, "fault injected: %s (%s), %lld %s%s",
                     gguf_fault_name(f), gguf_fault_summary(f), (long long)count,
                     gguf_fault_is_config(f) ? "setting" : "tensor(s)",
                     layer >= 0 ? " in one layer" : "");
    return rc ? gguf_fail(err, rc, GGUF_NO_OFFSET, "out of memory") : 0;
}
