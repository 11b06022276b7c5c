/*
 * gguf/shard_dump.h - what a serving engine holds on each rank, as it saves it:
 * vLLM's sharded-state layout (ShardedStateLoader: one or more files
 * DIR/model-rank-R-part-P.safetensors per rank R, the rank's parameters under
 * the engine's module names), written from a shard plan and checked against
 * one, with faults diagnosed by content.
 *
 * The engine's parameters, from the plan's entries (gguf/shard.h):
 *   HF q_proj, k_proj, v_proj (slots 0 1 2)  -> self_attn.qkv_proj.weight (and .bias):
 *                                               the rank's q rows, then k, then v
 *   HF gate_proj, up_proj                    -> mlp.gate_up_proj.weight (gate rows, up rows)
 *   shared experts' gate/up                  -> mlp.shared_experts.gate_up_proj.weight
 *   experts.E.gate_proj/up_proj (stacked)    -> mlp.experts.w13_weight [E_local, 2*I_local, H]
 *                                               (per expert: gate rows then up rows)
 *   experts.E.down_proj                      -> mlp.experts.w2_weight  [E_local, H, I_local]
 *   MLA attn_k_b + attn_v_b                  -> self_attn.kv_b_proj.weight (the rank's heads,
 *                                               per head nope k rows then v rows)
 *   embed_tokens / lm_head                   -> the rank's rows of the vocabulary padded to
 *                                               the engine's multiple (zeros past the end)
 *   everything else                          -> its HF name, the plan's slice
 * Shapes are numpy order (the reverse of ggml ne). SGLang names its modules the
 * same way (qkv_proj, gate_up_proj, w13_weight, w2_weight, kv_b_proj); a dump
 * "in the same spirit" uses this layout with --engine sglang's plan.
 *
 * Lifetimes: a param list borrows the plan it was made from.
 */
#ifndef GGUF_SHARD_DUMP_H
#define GGUF_SHARD_DUMP_H

#include "gguf/export.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/error.h"
#include "gguf/shard.h"

GGUF_BEGIN_DECLS

#define GGUF_DUMP_MAX_PARTS 3

/* One engine parameter: the plan entries it is made of, in slot order. */
typedef struct gguf_dump_param {
    char name[256];            /* e.g. "model.layers.0.self_attn.qkv_proj.weight" */
    int32_t entries[GGUF_DUMP_MAX_PARTS];
    int n_entries;
    bool experts;              /* stacked experts: fused per expert along the rows */
} gguf_dump_param;

/*
 * The engine's parameter list of a plan (consumed entries with an HF name;
 * stored attn_k_b/attn_v_b appear only inside kv_b_proj). *out is malloc'd;
 * free() it. @return 0; GGUF_E_NOMEM.
 */
int gguf_dump_params(const gguf_shard_plan *p, gguf_dump_param **out, int64_t *n,
                     gguf_error *err);

/*
 * Rank r's tensor of a parameter as float32 (the plan's pieces, fused as the
 * engine fuses them), into a malloc'd *out, with its numpy shape.
 * @return 0; the codes of gguf_shard_materialize; GGUF_E_NOMEM.
 */
int gguf_dump_param_rank(const gguf_shard_plan *p, const gguf_dump_param *dp, int r,
                         float **out, int64_t shape[4], int *n_dims, gguf_error *err);

/*
 * Write DIR/model-rank-R-part-0.safetensors for every rank of the plan (its
 * faults included: that is how the tests make broken dumps), parameters in
 * BF16 (the engines' usual dtype), each file through gguf/output.h.
 * __metadata__ records {"format": "pt", "writer": "ggufkit shard-plan", "rank": R,
 * "tp": N, "engine": E}. @return 0; GGUF_E_IO / NOSPACE / EXISTS (a file exists and
 * !overwrite); the codes of gguf_dump_param_rank.
 */
int gguf_dump_write_vllm(const gguf_shard_plan *p, const char *dir, bool overwrite,
                         gguf_error *err);

/* ---- checking a dump ---- */

typedef enum gguf_dump_status {
    GGUF_DUMP_OK = 0,
    GGUF_DUMP_DIFFERS,   /* values differ beyond the tolerance */
    GGUF_DUMP_SHAPE,     /* another shape than the plan's */
    GGUF_DUMP_MISSING,   /* not in the rank's files */
} gguf_dump_status;

typedef struct gguf_dump_finding {
    int rank;
    const char *param;         /* borrowed from the check */
    gguf_dump_status status;
    double rel_l2;             /* ||dump - plan|| / ||plan|| (DIFFERS), else 0 */
    int64_t shape[4], want[4]; /* numpy shapes (dump, plan) */
    int n_dims, want_dims;
    gguf_fault fault;          /* the catalog fault whose plan gives exactly this tensor,
                                  or GGUF_FAULT_NONE ("no known fault") */
} gguf_dump_finding;

typedef struct gguf_dump_check gguf_dump_check;

/*
 * Check DIR's rank files against the plan: for every rank and parameter, the
 * dump (any dtype, converted to float) against the plan's tensor rounded to
 * the dump's dtype; equal when rel-L2 <= GGUF_DUMP_TOLERANCE. A differing
 * tensor is matched against the same parameter built from the plan with each
 * weight fault of the catalog applied (gguf_shard_apply_fault on a fresh
 * plan of `m` with the same options); the first fault whose tensor equals the
 * dump names the fault.
 * @return 0 (findings may still differ: see gguf_dump_check_failed);
 *   GGUF_E_NOT_FOUND  no model-rank-R-part-P.safetensors for a rank;
 *   GGUF_E_SPLIT      files for ranks >= tp, or a part twice;
 *   the codes of gguf_st_file_open (a rank file that is not valid safetensors);
 *   GGUF_E_NOMEM.
 */
int gguf_dump_check_run(gguf_dump_check **out, const gguf_model *m, const gguf_shard_opts *opts,
                        const char *dir, gguf_error *err);
void gguf_dump_check_free(gguf_dump_check *c);

#define GGUF_DUMP_TOLERANCE 1e-3

int64_t gguf_dump_check_count(const gguf_dump_check *c);
const gguf_dump_finding *gguf_dump_check_at(const gguf_dump_check *c, int64_t i);
/* Findings that are not OK. */
int64_t gguf_dump_check_failed(const gguf_dump_check *c);
/* The number of parameters per rank and the files read. */
int64_t gguf_dump_check_params(const gguf_dump_check *c);
int gguf_dump_check_files(const gguf_dump_check *c);

const char *gguf_dump_status_name(gguf_dump_status s); /* "ok", "differs", "shape", "missing" */

GGUF_END_DECLS
#endif /* GGUF_SHARD_DUMP_H */
