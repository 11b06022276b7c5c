/* shard-plan: the text and JSON reports. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "gguf/types.h"
#include "shard_plan_tool.h"

#define VIRTUAL_NOTE " (HF kv_b_proj)"

static const char *level_name(gguf_check_level l)
{
    return l == GGUF_CHECK_ERROR ? "error" : l == GGUF_CHECK_WARN ? "warn" : "info";
}

static void shape_str(char *buf, size_t size, const int64_t *ne, uint32_t nd)
{
    int n = snprintf(buf, size, "[");
    for (uint32_t d = 0; d < nd && n > 0 && (size_t)n < size; d++)
        n += snprintf(buf + n, size - (size_t)n, "%s%" PRId64, d ? ", " : "", ne[d]);
    if (n > 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, "]");
}

static uint32_t dims_of(const gguf_shard_tensor *e)
{
    return e->n_dims ? e->n_dims : 1;
}

/* "ne[1] 3584/rank", "experts 32/rank + ne[1] 256/rank", "whole" */
static void split_str(char *buf, size_t size, const gguf_shard_plan *p, const gguf_shard_tensor *e)
{
    const gguf_shard_slice *s = &e->ranks[0];
    int n = 0;
    buf[0] = '\0';
    if (e->expert_dim >= 0) {
        int64_t a, b;
        gguf_shard_plan_experts(p, 0, &a, &b);
        n += snprintf(buf, size, "experts %" PRId64 "/rank", b - a);
    }
    if (e->split_dim >= 0)
        snprintf(buf + n, size - (size_t)n, "%sne[%d] %" PRId64 "/rank%s", n ? " + " : "",
                 e->split_dim, s->ne[e->split_dim] - (e->cat_dim == e->split_dim ? s->pad : 0),
                 s->pad ? " +pad" : "");
    if (!buf[0])
        snprintf(buf, size, "whole");
}

static void rank_line(FILE *out, const gguf_shard_tensor *e, int r)
{
    const gguf_shard_slice *s = &e->ranks[r];
    char sh[96], hb[32];
    shape_str(sh, sizeof sh, s->ne, dims_of(e));
    fprintf(out, "    r%-3d %-22s", r, sh);
    if (s->range_lo >= 0 && e->split_dim >= 0)
        fprintf(out, " ne[%d] [%" PRId64 ", %" PRId64 ")", e->split_dim, s->range_lo,
                s->range_hi);
    else if (s->n_pieces != 1)
        fprintf(out, " %d pieces", s->n_pieces);
    if (s->pad)
        fprintf(out, " +%" PRId64 " pad", s->pad);
    fprintf(out, " %s %s\n", cli_human_bytes(s->bytes, hb, sizeof hb),
            s->quant_cut_ok ? "ok" : s->reason);
}

void sp_print_text(FILE *out, const gguf_shard_plan *p, const sp_args *a)
{
    const gguf_model *m = gguf_shard_plan_model(p);
    const gguf_hparams *hp = gguf_model_hparams(m);
    const gguf_shard_opts *o = gguf_shard_plan_opts(p);
    const int tp = gguf_shard_plan_ranks(p);
    fprintf(out, "model: %s\n", a->model);
    fprintf(out, "  arch %s, %" PRId64 " blocks", hp->arch_name, hp->n_layer);
    if (hp->n_nextn)
        fprintf(out, " (%" PRId64 " NextN)", hp->n_nextn);
    fprintf(out, ", %" PRId64 " tensors, %" PRId64 " heads", gguf_model_tensor_count(m),
            hp->n_head);
    if (hp->is_mla)
        fprintf(out, " (MLA: kv_lora %" PRId64 ", nope %" PRId64 ", rope %" PRId64 ", v %" PRId64
                     ")",
                hp->kv_lora_rank, hp->qk_nope, hp->qk_rope, hp->v_head);
    else
        fprintf(out, ", %" PRId64 " kv heads", hp->n_head_kv);
    if (hp->n_expert)
        fprintf(out, ", %" PRId64 " experts", hp->n_expert);
    fprintf(out, "\nplan: engine %s, tp %d, ep %d, moe_tp %d\n\n", gguf_engine_name(o->engine), tp,
            o->ep > 1 ? o->ep : 1, gguf_shard_plan_moe_tp(p));
    /* the name column fits the longest name shown (virtual kv_b entries carry
     * a note), so that the other columns stay aligned */
    int nw = 36;
    for (int64_t i = 0; i < gguf_shard_plan_count(p); i++) {
        const gguf_shard_tensor *e = gguf_shard_plan_at(p, i);
        if (!cli_filter_test(&a->filter, e->name))
            continue;
        const int len = (int)strlen(e->name) + (e->is_virtual ? (int)strlen(VIRTUAL_NOTE) : 0);
        if (len > nw && len < 160)
            nw = len;
    }
    fprintf(out, "%-*s %-10s %-6s %-20s %-20s %-30s %11s  %s\n", nw, "TENSOR", "RULE", "TYPE",
            "SHAPE", "RANK 0", "SPLIT", "RANK 0 SIZE", "CUT");
    for (int64_t i = 0; i < gguf_shard_plan_count(p); i++) {
        const gguf_shard_tensor *e = gguf_shard_plan_at(p, i);
        if (!cli_filter_test(&a->filter, e->name))
            continue;
        char full[96], r0[96], sp[64], hb[32], nm[160];
        shape_str(full, sizeof full, e->ne, dims_of(e));
        shape_str(r0, sizeof r0, e->ranks[0].ne, dims_of(e));
        split_str(sp, sizeof sp, p, e);
        snprintf(nm, sizeof nm, "%s%s", e->name, e->is_virtual ? VIRTUAL_NOTE : "");
        bool all_ok = true;
        for (int r = 0; r < tp; r++)
            all_ok = all_ok && e->ranks[r].quant_cut_ok;
        fprintf(out, "%-*s %-10s %-6s %-20s %-20s %-30s %11s  %s%s%s\n", nw, nm,
                gguf_shard_rule_name(e->rule), gguf_type_name(e->type), full, r0, sp,
                cli_human_bytes(e->ranks[0].bytes, hb, sizeof hb), all_ok ? "ok" : "dequant",
                e->reduce_sum ? " all-reduce" : "", e->consumed ? "" : " UNCONSUMED");
        if (a->verbose)
            for (int r = 0; r < tp; r++)
                rank_line(out, e, r);
    }
    fprintf(out, "\nchecks:\n");
    int64_t nc = gguf_shard_plan_check_count(p);
    if (!nc)
        fprintf(out, "  none\n");
    for (int64_t i = 0; i < nc; i++) {
        const gguf_shard_check *c = gguf_shard_plan_check_at(p, i);
        fprintf(out, "  %-5s %-12s %s\n", level_name(c->level), c->code, c->message);
    }
    const gguf_shard_runtime *rt = gguf_shard_plan_runtime(p);
    fprintf(out, "\nruntime: rope pairs %s, attention scale %.6g, routed scale %.6g, "
                 "selection bias %s, shared scale %.6g, MLA cache %s\n",
            rt->rope_pairs == GGUF_ROPE_ADJACENT ? "adjacent" : "half", rt->attn_scale,
            rt->routed_scale, rt->use_exp_probs_b ? "on" : "off", rt->shared_scale,
            rt->mla_cache_replicated ? "replicated" : "sharded");
    fprintf(out, "\nbytes per rank:\n");
    for (int r = 0; r < tp; r++) {
        char hb[32];
        fprintf(out, "  rank %-3d %12s  (%" PRIu64 " bytes)\n", r,
                cli_human_bytes(gguf_shard_plan_rank_bytes(p, r), hb, sizeof hb),
                gguf_shard_plan_rank_bytes(p, r));
    }
    int big;
    uint64_t mx = gguf_shard_plan_max_rank_bytes(p, &big);
    char hb[32];
    fprintf(out, "  largest: rank %d, %s\n", big, cli_human_bytes(mx, hb, sizeof hb));
    if (hp->n_nextn > 0) {
        /* engines load the NextN blocks only for speculative decoding */
        uint64_t best = 0;
        for (int r = 0; r < tp; r++) {
            uint64_t b = 0;
            for (int64_t i = 0; i < gguf_shard_plan_count(p); i++) {
                const gguf_shard_tensor *e = gguf_shard_plan_at(p, i);
                if (!e->is_virtual && e->consumed && e->layer < hp->n_layer_main)
                    b += e->ranks[r].bytes;
            }
            if (b > best)
                best = b;
        }
        fprintf(out, "  largest without the NextN blocks (no speculative decoding): %s\n",
                cli_human_bytes(best, hb, sizeof hb));
    }
}

/* ---------------- JSON ---------------- */

/* Appends v to *a; out of memory, both are freed and *a becomes NULL, so that a plan with
 * an element missing is never printed. */
static void append(json_t **a, json_t *v)
{
    if (json_array_append_new(*a, v) != 0) {
        json_decref(*a);
        *a = NULL;
    }
}

static json_t *ints_json(const int64_t *v, int n)
{
    json_t *a = json_array();
    for (int k = 0; a && k < n; k++)
        append(&a, json_integer(v[k]));
    return a;
}

/* Each fault as FAULT or FAULT@LAYER, the spelling of --fault and of a record's fault. */
static json_t *faults_json(const sp_args *a)
{
    json_t *faults = json_array();
    for (int k = 0; faults && k < a->n_faults; k++) {
        const int64_t layer = a->fault_layers[k] >= 0 ? a->fault_layers[k] : a->fault_layer;
        const char *name = gguf_fault_name(a->faults[k]);
        append(&faults, layer >= 0 ? json_sprintf("%s@%" PRId64, name, layer) : json_string(name));
    }
    return faults;
}

static json_t *runtime_json(const gguf_shard_runtime *rt)
{
    return json_pack("{s:s, s:o, s:o, s:b, s:b, s:o, s:b}",
        "rope_pairs", rt->rope_pairs == GGUF_ROPE_ADJACENT ? "adjacent" : "half",
        "attn_scale", cli_json_number(rt->attn_scale),
        "routed_scale", cli_json_number(rt->routed_scale),
        "use_exp_probs_b", rt->use_exp_probs_b, "norm_topk", rt->norm_topk,
        "shared_scale", cli_json_number(rt->shared_scale),
        "mla_cache_replicated", rt->mla_cache_replicated);
}

static json_t *piece_json(const gguf_shard_plan *p, const gguf_shard_piece *pc)
{
    return json_pack("{s:o, s:b, s:o, s:o, s:I}",
        "src", cli_json_text(gguf_shard_plan_at(p, pc->src)->name, SIZE_MAX),
        "transpose", pc->transpose, "lo", ints_json(pc->lo, 4), "hi", ints_json(pc->hi, 4),
        "dst", (json_int_t)pc->dst);
}

/* What rank r holds of e. Byte counts are sizes of tensors in memory: int64 holds them. */
static json_t *slice_json(const gguf_shard_plan *p, const gguf_shard_tensor *e, int r)
{
    const gguf_shard_slice *s = &e->ranks[r];
    json_t *pieces = json_array();
    for (int32_t k = 0; pieces && k < s->n_pieces; k++)
        append(&pieces, piece_json(p, &s->pieces[k]));
    return json_pack("{s:i, s:o, s:o, s:I, s:I, s:b, s:o, s:o}", "rank", r,
        "ne", ints_json(s->ne, (int)dims_of(e)),
        "range", s->range_lo >= 0 ? json_pack("[I, I]", (json_int_t)s->range_lo,
                                              (json_int_t)s->range_hi)
                                  : json_null(),
        "pad", (json_int_t)s->pad, "bytes", (json_int_t)s->bytes, "quant_cut_ok", s->quant_cut_ok,
        "reason", cli_json_text(s->quant_cut_ok ? NULL : s->reason, SIZE_MAX), "pieces", pieces);
}

/* One entry of the plan; a NULL hf_name or fused is null (cli_json_text). */
static json_t *tensor_json(const gguf_shard_plan *p, const gguf_shard_tensor *e)
{
    json_t *ranks = json_array();
    for (int r = 0; ranks && r < gguf_shard_plan_ranks(p); r++)
        append(&ranks, slice_json(p, e, r));
    return json_pack("{s:o, s:o, s:s, s:I, s:s, s:i, s:i, s:i, s:o, s:i, s:b, s:b, s:b, s:s, "
                     "s:o, s:o}",
        "name", cli_json_text(e->name, SIZE_MAX), "hf_name", cli_json_text(e->hf_name, SIZE_MAX),
        "role", gguf_role_name(e->role), "layer", (json_int_t)e->layer,
        "rule", gguf_shard_rule_name(e->rule), "split_dim", e->split_dim,
        "expert_dim", e->expert_dim, "cat_dim", e->cat_dim,
        "fused", cli_json_text(e->fused, SIZE_MAX),
        "slot", e->slot, "reduce_sum", e->reduce_sum, "virtual", e->is_virtual,
        "consumed", e->consumed, "type", gguf_type_name(e->type),
        "ne", ints_json(e->ne, (int)dims_of(e)), "ranks", ranks);
}

static json_t *checks_json(const gguf_shard_plan *p)
{
    json_t *checks = json_array();
    for (int64_t i = 0; checks && i < gguf_shard_plan_check_count(p); i++) {
        const gguf_shard_check *c = gguf_shard_plan_check_at(p, i);
        append(&checks, json_pack("{s:s, s:o, s:o, s:o}", "level", level_name(c->level),
            "code", cli_json_text(c->code, SIZE_MAX), "tensor", cli_json_text(c->tensor, SIZE_MAX),
            "message", cli_json_text(c->message, SIZE_MAX)));
    }
    return checks;
}

int sp_print_json(FILE *out, const gguf_shard_plan *p, const sp_args *a)
{
    const gguf_hparams *hp = gguf_model_hparams(gguf_shard_plan_model(p));
    const gguf_shard_opts *o = gguf_shard_plan_opts(p);
    const int tp = gguf_shard_plan_ranks(p);
    json_t *tensors = json_array();
    for (int64_t i = 0; tensors && i < gguf_shard_plan_count(p); i++) {
        const gguf_shard_tensor *e = gguf_shard_plan_at(p, i);
        if (cli_filter_test(&a->filter, e->name))
            append(&tensors, tensor_json(p, e));
    }
    json_t *rank_bytes = json_array();
    for (int r = 0; rank_bytes && r < tp; r++)
        append(&rank_bytes, json_integer((json_int_t)gguf_shard_plan_rank_bytes(p, r)));
    int big;
    const uint64_t mx = gguf_shard_plan_max_rank_bytes(p, &big);
    const int64_t errors = gguf_shard_plan_check_worst(p, GGUF_CHECK_ERROR);
    const int64_t warnings = gguf_shard_plan_check_worst(p, GGUF_CHECK_WARN) - errors;
    json_t *doc = json_pack("{s:o, s:o, s:s, s:i, s:i, s:i, s:i, s:o, s:o, s:o, s:o, s:o, s:i, "
                            "s:I, s:I, s:I}",
        "model", cli_json_text(a->model, SIZE_MAX), "arch", cli_json_text(hp->arch_name, SIZE_MAX),
        "engine", gguf_engine_name(o->engine), "tp", tp, "ep", o->ep > 1 ? o->ep : 1,
        "moe_tp", gguf_shard_plan_moe_tp(p), "vocab_pad", o->vocab_pad, "faults", faults_json(a),
        "runtime", runtime_json(gguf_shard_plan_runtime(p)), "tensors", tensors,
        "checks", checks_json(p), "rank_bytes", rank_bytes, "max_rank", big,
        "max_rank_bytes", (json_int_t)mx, "errors", (json_int_t)errors,
        "warnings", (json_int_t)warnings);
    return cli_json_print_report(out, SP_TOOL, doc);
}
