/* shard-plan: the text and JSON reports. */
#include <inttypes.h>
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

static void jints(FILE *out, const int64_t *v, int n)
{
    fputc('[', out);
    for (int k = 0; k < n; k++)
        fprintf(out, "%s%" PRId64, k ? "," : "", v[k]);
    fputc(']', out);
}

static void jstr_or_null(FILE *out, const char *s)
{
    if (s)
        cli_json_str(out, s, SIZE_MAX);
    else
        fputs("null", out);
}

void sp_print_json(FILE *out, const gguf_shard_plan *p, const sp_args *a)
{
    const gguf_model *m = gguf_shard_plan_model(p);
    const gguf_hparams *hp = gguf_model_hparams(m);
    const gguf_shard_opts *o = gguf_shard_plan_opts(p);
    const int tp = gguf_shard_plan_ranks(p);
    cli_json_begin(out, SP_TOOL);
    fputs(",\"model\":", out);
    cli_json_str(out, a->model, SIZE_MAX);
    fputs(",\"arch\":", out);
    cli_json_str(out, hp->arch_name, SIZE_MAX);
    fprintf(out, ",\"engine\":\"%s\",\"tp\":%d,\"ep\":%d,\"moe_tp\":%d,\"vocab_pad\":%d",
            gguf_engine_name(o->engine), tp, o->ep > 1 ? o->ep : 1, gguf_shard_plan_moe_tp(p),
            o->vocab_pad);
    /* each fault as FAULT or FAULT@LAYER, the spelling of --fault and of a record's fault */
    fputs(",\"faults\":[", out);
    for (int k = 0; k < a->n_faults; k++) {
        const int64_t layer = a->fault_layers[k] >= 0 ? a->fault_layers[k] : a->fault_layer;
        fprintf(out, "%s\"%s", k ? "," : "", gguf_fault_name(a->faults[k]));
        if (layer >= 0)
            fprintf(out, "@%lld", (long long)layer);
        fputc('"', out);
    }
    fputc(']', out);
    const gguf_shard_runtime *rt = gguf_shard_plan_runtime(p);
    fprintf(out, ",\"runtime\":{\"rope_pairs\":\"%s\",\"attn_scale\":",
            rt->rope_pairs == GGUF_ROPE_ADJACENT ? "adjacent" : "half");
    cli_json_num(out, rt->attn_scale);
    fputs(",\"routed_scale\":", out);
    cli_json_num(out, rt->routed_scale);
    fprintf(out, ",\"use_exp_probs_b\":%s,\"norm_topk\":%s,\"shared_scale\":",
            rt->use_exp_probs_b ? "true" : "false", rt->norm_topk ? "true" : "false");
    cli_json_num(out, rt->shared_scale);
    fprintf(out, ",\"mla_cache_replicated\":%s}", rt->mla_cache_replicated ? "true" : "false");
    fputs(",\"tensors\":[", out);
    bool first = true;
    for (int64_t i = 0; i < gguf_shard_plan_count(p); i++) {
        const gguf_shard_tensor *e = gguf_shard_plan_at(p, i);
        if (!cli_filter_test(&a->filter, e->name))
            continue;
        fputs(first ? "\n{" : ",\n{", out);
        first = false;
        fputs("\"name\":", out);
        cli_json_str(out, e->name, SIZE_MAX);
        fputs(",\"hf_name\":", out);
        jstr_or_null(out, e->hf_name);
        fprintf(out, ",\"role\":\"%s\",\"layer\":%" PRId64 ",\"rule\":\"%s\"",
                gguf_role_name(e->role), e->layer, gguf_shard_rule_name(e->rule));
        fprintf(out, ",\"split_dim\":%d,\"expert_dim\":%d,\"cat_dim\":%d,\"fused\":", e->split_dim,
                e->expert_dim, e->cat_dim);
        jstr_or_null(out, e->fused);
        fprintf(out, ",\"slot\":%d,\"reduce_sum\":%s,\"virtual\":%s,\"consumed\":%s", e->slot,
                e->reduce_sum ? "true" : "false", e->is_virtual ? "true" : "false",
                e->consumed ? "true" : "false");
        fprintf(out, ",\"type\":\"%s\",\"ne\":", gguf_type_name(e->type));
        jints(out, e->ne, (int)dims_of(e));
        fputs(",\"ranks\":[", out);
        for (int r = 0; r < tp; r++) {
            const gguf_shard_slice *s = &e->ranks[r];
            fprintf(out, "%s{\"rank\":%d,\"ne\":", r ? "," : "", r);
            jints(out, s->ne, (int)dims_of(e));
            if (s->range_lo >= 0)
                fprintf(out, ",\"range\":[%" PRId64 ",%" PRId64 "]", s->range_lo, s->range_hi);
            else
                fputs(",\"range\":null", out);
            fprintf(out, ",\"pad\":%" PRId64 ",\"bytes\":%" PRIu64 ",\"quant_cut_ok\":%s,\"reason\":",
                    s->pad, s->bytes, s->quant_cut_ok ? "true" : "false");
            jstr_or_null(out, s->quant_cut_ok ? NULL : s->reason);
            fputs(",\"pieces\":[", out);
            for (int32_t k = 0; k < s->n_pieces; k++) {
                const gguf_shard_piece *pc = &s->pieces[k];
                fprintf(out, "%s{\"src\":", k ? "," : "");
                cli_json_str(out, gguf_shard_plan_at(p, pc->src)->name, SIZE_MAX);
                fprintf(out, ",\"transpose\":%s,\"lo\":", pc->transpose ? "true" : "false");
                jints(out, pc->lo, 4);
                fputs(",\"hi\":", out);
                jints(out, pc->hi, 4);
                fprintf(out, ",\"dst\":%" PRId64 "}", pc->dst);
            }
            fputs("]}", out);
        }
        fputs("]}", out);
    }
    fputs("\n],\"checks\":[", out);
    for (int64_t i = 0; i < gguf_shard_plan_check_count(p); i++) {
        const gguf_shard_check *c = gguf_shard_plan_check_at(p, i);
        fprintf(out, "%s\n{\"level\":\"%s\",\"code\":\"%s\",\"tensor\":", i ? "," : "",
                level_name(c->level), c->code);
        jstr_or_null(out, c->tensor);
        fputs(",\"message\":", out);
        cli_json_str(out, c->message, SIZE_MAX);
        fputc('}', out);
    }
    int big;
    uint64_t mx = gguf_shard_plan_max_rank_bytes(p, &big);
    fputs("\n],\"rank_bytes\":[", out);
    for (int r = 0; r < tp; r++)
        fprintf(out, "%s%" PRIu64, r ? "," : "", gguf_shard_plan_rank_bytes(p, r));
    fprintf(out, "],\"max_rank\":%d,\"max_rank_bytes\":%" PRIu64 ",\"errors\":%" PRId64
                 ",\"warnings\":%" PRId64 "}\n",
            big, mx, gguf_shard_plan_check_worst(p, GGUF_CHECK_ERROR),
            gguf_shard_plan_check_worst(p, GGUF_CHECK_WARN) -
                gguf_shard_plan_check_worst(p, GGUF_CHECK_ERROR));
}
