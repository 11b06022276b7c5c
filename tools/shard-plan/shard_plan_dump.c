/*
 * shard-plan check-dump MODEL.gguf DUMP_DIR --tp N [--ep M] --engine vllm|sglang [--json]:
 * an engine's per-rank weights (vLLM's sharded-state files) against the plan, every
 * differing tensor named with the catalog fault that explains it. The work is in
 * libgguf (gguf/shard_dump.h); this file parses options and prints.
 */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gguf/file.h"
#include "gguf/model.h"
#include "gguf/shard_dump.h"
#include "shard_plan_tool.h"

enum { D_TP = 't', D_EP = 'e', D_ENGINE = 256, D_JSON, D_VOCAB_PAD };

static const cli_opt DOPTS[] = {
    {D_TP, "tp", 1, "N", "tensor-parallel ranks of the dump (required)"},
    {D_EP, "ep", 1, "M", "expert-parallel size (vllm: equal to --tp; sglang: divides --tp)"},
    {D_ENGINE, "engine", 1, "NAME", "vllm (default) or sglang: the plan's rules"},
    {D_VOCAB_PAD, "vocab-pad", 1, "N", "vocabulary padding multiple (default 64)"},
    {D_JSON, "json", 0, NULL, "findings as JSON (schema in docs/engine-dumps.md)"},
    {0, NULL, 0, NULL, NULL},
};

static const cli_spec DSPEC = {
    .tool = SP_TOOL " check-dump",
    .usage = "MODEL.gguf DUMP_DIR --tp N [--ep M] [--engine vllm|sglang] [--json]",
    .summary =
        "Compare the per-rank weights an engine saved (DUMP_DIR/model-rank-R-part-P.safetensors,\n"
        "vLLM's sharded-state layout: fused qkv_proj / gate_up_proj / experts.w13_weight /\n"
        "w2_weight, kv_b_proj, padded vocabulary) with the slices the plan gives each rank, in\n"
        "the dump's precision (the plan's float32 rounded to the dump's dtype; equal when the\n"
        "relative L2 error is at most 1e-3). vLLM 0.32's names are read too (routed_experts,\n"
        "_shared_experts._layer, fused_qkv_a_proj, mla_attn, W_UK_T / W_UV); llama's q/k rows\n"
        "are compared in HF order. A differing tensor is matched against the fault catalog:\n"
        "the fault whose plan gives exactly that tensor is named, else \"no known fault\".\n"
        "A NextN/MTP block the engine did not load is \"absent\", a tensor that is no\n"
        "parameter \"unknown\" (both notes). Exit 0 clean, 1 a rank differs, 2 an unreadable\n"
        "dump.",
    .opts = DOPTS,
    .examples = "  shard-plan check-dump glm5.gguf /dumps/glm5-tp8 --tp 8 --engine vllm\n"
                "  shard-plan model.gguf --tp 2 --fault kv-b-whole --write-shards d --dump-format vllm\n"
                "  shard-plan check-dump model.gguf d --tp 2 --json\n",
};

static void shape_str(char *out, size_t n, const int64_t *s, int nd)
{
    int k = snprintf(out, n, "[");
    for (int d = 0; d < nd && (size_t)k < n; d++)
        k += snprintf(out + k, n - (size_t)k, "%s%lld", d ? ", " : "", (long long)s[d]);
    if ((size_t)k < n)
        snprintf(out + k, n - (size_t)k, "]");
}

/* A finding's shape, or null (a dump that lacks the tensor has no shape; an unknown one no
 * expected shape). */
static json_t *shape_json(const int64_t *s, int nd, bool none)
{
    if (none)
        return json_null();
    json_t *a = json_array();
    for (int d = 0; a && d < nd; d++)
        if (json_array_append_new(a, json_integer(s[d])) != 0) {
            json_decref(a);
            a = NULL;
        }
    return a;
}

static json_t *finding_json(const gguf_dump_finding *f)
{
    const bool no_dump = f->status == GGUF_DUMP_MISSING || f->status == GGUF_DUMP_ABSENT;
    return json_pack("{s:i, s:o, s:s, s:o, s:o, s:o, s:b, s:o}", "rank", f->rank,
        "param", cli_json_text(f->param, SIZE_MAX), "status", gguf_dump_status_name(f->status),
        "rel_l2", cli_json_number(f->status == GGUF_DUMP_DIFFERS ? f->rel_l2 : NAN),
        "shape", shape_json(f->shape, f->n_dims, no_dump),
        "expected_shape", shape_json(f->want, f->want_dims, f->status == GGUF_DUMP_UNKNOWN),
        "padded", f->padded,
        "fault", f->fault ? json_string(gguf_fault_name(f->fault)) : json_null());
}

/* --json (schema in docs/engine-dumps.md): every finding but the ok ones.
 * @return 0, or -1 out of memory or when the write failed. */
static int print_json(const gguf_dump_check *ck, const gguf_shard_opts *o, const char *model,
                      const char *dump, int64_t bad, int64_t absent, int64_t unknown)
{
    json_t *findings = json_array();
    for (int64_t i = 0; findings && i < gguf_dump_check_count(ck); i++) {
        const gguf_dump_finding *f = gguf_dump_check_at(ck, i);
        if (f->status != GGUF_DUMP_OK && json_array_append_new(findings, finding_json(f)) != 0) {
            json_decref(findings);
            findings = NULL;
        }
    }
    json_t *doc = json_pack("{s:o, s:o, s:s, s:i, s:i, s:{s:o}, s:i, s:I, s:o, s:I, s:I, s:I, s:b}",
        "model", cli_json_text(model, SIZE_MAX), "dump", cli_json_text(dump, SIZE_MAX),
        "engine", gguf_engine_name(o->engine), "tp", o->tp, "ep", o->ep > 1 ? o->ep : 1,
        "tolerances", "rel_l2", cli_json_number(GGUF_DUMP_TOLERANCE),
        "files", gguf_dump_check_files(ck),
        "params_per_rank", (json_int_t)gguf_dump_check_params(ck),
        "findings", findings, "failed", (json_int_t)bad, "absent", (json_int_t)absent,
        "unknown", (json_int_t)unknown, "ok", bad == 0);
    return cli_json_print_report(stdout, SP_TOOL " check-dump", doc);
}

int sp_check_dump_main(int argc, char **argv)
{
    gguf_shard_opts o = {.engine = GGUF_ENGINE_VLLM};
    bool json = false, have_tp = false;
    const char *arg, *pos[4];
    int n_pos = 0, oi = 1, c;
    while ((c = cli_next(&DSPEC, argc, argv, &arg, &oi)) != -1) {
        uint64_t v;
        switch (c) {
        case D_TP:
        case D_EP:
        case D_VOCAB_PAD:
            if (cli_parse_u64(arg, &v) || v < 1 || v > 4096) {
                cli_errorf(DSPEC.tool, "'%s' is not a number in 1..4096", arg);
                return CLI_EXIT_USAGE;
            }
            if (c == D_TP) {
                o.tp = (int)v;
                have_tp = true;
            } else if (c == D_EP) {
                o.ep = (int)v;
            } else {
                o.vocab_pad = (int)v;
            }
            break;
        case D_ENGINE:
            if (gguf_engine_from_name(arg, &o.engine) != 0) {
                cli_errorf(DSPEC.tool, "--engine: '%s' is not vllm or sglang", arg);
                return CLI_EXIT_USAGE;
            }
            break;
        case D_JSON: json = true; break;
        default: return CLI_EXIT_USAGE;
        }
    }
    for (; oi < argc; oi++)
        if (n_pos < 4)
            pos[n_pos++] = argv[oi];
    if (n_pos != 2 || !have_tp) {
        cli_errorf(DSPEC.tool, "expected MODEL.gguf DUMP_DIR and --tp N (see --help)");
        return CLI_EXIT_USAGE;
    }
    gguf_error err = {0};
    gguf_set *set = NULL;
    gguf_model *m = NULL;
    gguf_dump_check *ck = NULL;
    int rc, ret = CLI_EXIT_OK;
    if ((rc = gguf_set_open(&set, pos[0], NULL, &err)) != 0 ||
        (rc = gguf_model_open_flags(&m, set, GGUF_MODEL_ALLOW_MISSING, &err)) != 0 ||
        (rc = gguf_dump_check_run(&ck, m, &o, pos[1], &err)) != 0) {
        cli_error(DSPEC.tool, &err);
        ret = cli_exit_code(rc);
        if (rc == GGUF_E_NOT_FOUND || rc == GGUF_E_SPLIT)
            ret = CLI_EXIT_USAGE; /* an unreadable dump is bad input */
        goto done;
    }
    const int64_t n = gguf_dump_check_count(ck), bad = gguf_dump_check_failed(ck);
    int64_t absent = 0, unknown = 0;
    for (int64_t i = 0; i < n; i++) {
        absent += gguf_dump_check_at(ck, i)->status == GGUF_DUMP_ABSENT;
        unknown += gguf_dump_check_at(ck, i)->status == GGUF_DUMP_UNKNOWN;
    }
    char a[96], b[96];
    if (json) {
        if (print_json(ck, &o, pos[0], pos[1], bad, absent, unknown) != 0) {
            cli_errorf(DSPEC.tool, "cannot write the JSON report");
            ret = CLI_EXIT_ENV;
            goto done;
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            const gguf_dump_finding *f = gguf_dump_check_at(ck, i);
            if ((f->status == GGUF_DUMP_OK || f->status == GGUF_DUMP_ABSENT) && cli_verbosity < 2)
                continue;
            printf("rank %d %-52s %s", f->rank, f->param, gguf_dump_status_name(f->status));
            if (f->status == GGUF_DUMP_DIFFERS)
                printf(" (rel-L2 %.3g)", f->rel_l2);
            if (f->padded) {
                shape_str(a, sizeof a, f->shape, f->n_dims);
                printf(" (%s: zero padding of the intermediate left out)", a);
            }
            if (f->status == GGUF_DUMP_SHAPE) {
                shape_str(a, sizeof a, f->shape, f->n_dims);
                shape_str(b, sizeof b, f->want, f->want_dims);
                printf(" (%s, the plan says %s)", a, b);
            }
            if (f->status == GGUF_DUMP_ABSENT)
                printf(": a NextN/MTP block's, not loaded by the engine");
            if (f->status == GGUF_DUMP_UNKNOWN) {
                shape_str(a, sizeof a, f->shape, f->n_dims);
                printf(" %s: no parameter of the plan (not compared)", a);
            }
            if (gguf_dump_status_fails(f->status))
                printf(": %s%s", f->fault ? "fault " : "no known fault",
                       f->fault ? gguf_fault_name(f->fault) : "");
            printf("\n");
        }
        /* the faults found, each once */
        bool seen[GGUF_FAULT_COUNT] = {false};
        for (int64_t i = 0; i < n; i++)
            seen[gguf_dump_check_at(ck, i)->fault] = true;
        printf("%s: %d ranks, %lld parameters each, %lld differ", pos[1], o.tp,
               (long long)gguf_dump_check_params(ck), (long long)bad);
        if (absent)
            printf(", %lld absent (NextN/MTP, not loaded)", (long long)absent);
        if (unknown)
            printf(", %lld unknown (not compared)", (long long)unknown);
        for (int f = 1; f < GGUF_FAULT_COUNT; f++)
            if (seen[f])
                printf("; fault %s: %s", gguf_fault_name((gguf_fault)f),
                       gguf_fault_summary((gguf_fault)f));
        printf("\n");
    }
    if (bad)
        ret = CLI_EXIT_DIFF;
done:
    gguf_dump_check_free(ck);
    gguf_model_free(m);
    gguf_set_free(set);
    return ret;
}
