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
 * Row order: an engine holds HF's rows. llama's converter permutes the rows of
 * each head of attn_q / attn_k for llama.cpp's adjacent-pair RoPE
 * (gguf_llama_qk_row_to_hf); the q and k slots of qkv_proj are built with that
 * permutation undone (the plan's row ranges taken from the HF-order tensor).
 *
 * vLLM 0.32 names some parameters otherwise; the checker reads the dump under
 * either name (gguf_dump_check_run adapts the list to the names rank 0 holds):
 *   mlp.experts.w13_weight / w2_weight  -> mlp.experts.routed_experts.w13_weight / w2_weight
 *   mlp.gate.weight                     -> mlp.experts.gate.weight (qwen3moe, deepseek2)
 *   mlp.gate.e_score_correction_bias    -> mlp.experts.gate.e_score_correction_bias
 *                                          (deepseek2), mlp.experts.routed_experts.
 *                                          e_score_correction_bias (glm4moe)
 *   mlp.shared_experts.X                -> mlp.experts._shared_experts._layer.X
 *   self_attn.X (MLA: o_proj, q_b_proj, -> self_attn.mla_attn.X
 *                q_a_layernorm)
 *   self_attn.q_a_proj + kv_a_proj_with_mqa -> self_attn.fused_qkv_a_proj.weight (MLA with
 *                                          q_lora: q_a rows then kv_a rows, replicated)
 * and adds what MLA computes from kv_b_proj, checked against the rank's kv_b_proj:
 *   ...mla_attn.W_UK_T  [heads_r, nope, kv_lora]  the k rows of each head
 *   ...mla_attn.W_UV    [heads_r, kv_lora, v]     the v rows of each head, transposed
 * Engine buffers that hold no weight (attention scales: names ending in
 * _k_scale, _v_scale, _q_scale, _prob_scale) are skipped. Tied embeddings: the
 * dump's lm_head.weight is the embedding's rows (save_sharded_state saves a
 * shared tensor once, under the smaller name: lm_head.weight alone stands for
 * both). Stacked experts whose intermediate vLLM's CPU build padded with zeros
 * (to a multiple of 32) are compared without the padding.
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

/* What a parameter is made of. */
typedef enum gguf_dump_kind {
    GGUF_DUMP_KIND_FUSED = 0,  /* its entries, fused along the rows (or one entry as is) */
    GGUF_DUMP_KIND_UK_T,       /* from kv_b_proj (its entries): per head the k rows,
                                  numpy [heads_r, nope, kv_lora] */
    GGUF_DUMP_KIND_UV,         /* from kv_b_proj: per head the v rows transposed,
                                  numpy [heads_r, kv_lora, v_head] */
} gguf_dump_kind;

/* One engine parameter: the plan entries it is made of, in slot order. */
typedef struct gguf_dump_param {
    char name[256];            /* e.g. "model.layers.0.self_attn.qkv_proj.weight" */
    int32_t entries[GGUF_DUMP_MAX_PARTS];
    int n_entries;
    bool experts;              /* stacked experts: fused per expert along the rows */
    bool optional;             /* a NextN/MTP block's: engines load it only for
                                  speculative decoding, so a dump may leave it out */
    gguf_dump_kind kind;
} gguf_dump_param;

/*
 * The engine's parameter list of a plan (consumed entries with an HF name;
 * stored attn_k_b/attn_v_b appear only inside kv_b_proj), under the names
 * shard-plan writes (the table above, left column). *out is malloc'd;
 * free() it. @return 0; GGUF_E_NOMEM.
 */
int gguf_dump_params(const gguf_shard_plan *p, gguf_dump_param **out, int64_t *n,
                     gguf_error *err);

/*
 * Rank r's tensor of a parameter as float32 (the plan's pieces, fused as the
 * engine fuses them, llama's q/k rows in HF order), into a malloc'd *out, with
 * its numpy shape.
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
    GGUF_DUMP_ABSENT,    /* an optional parameter (NextN/MTP) not in the rank's files: a
                            note, not a failure */
    GGUF_DUMP_UNKNOWN,   /* a tensor of the rank's files that is no parameter of the plan
                            and no known engine buffer: not compared, a note */
} gguf_dump_status;

typedef struct gguf_dump_finding {
    int rank;
    const char *param;         /* borrowed from the check: the name the dump uses; for
                                  MISSING/ABSENT the name the same parameter of another
                                  layer has there, else shard-plan's; UNKNOWN: the dump's */
    gguf_dump_status status;
    double rel_l2;             /* ||dump - plan|| / ||plan|| (DIFFERS), else 0 */
    int64_t shape[4], want[4]; /* numpy shapes (dump, plan) */
    int n_dims, want_dims;
    gguf_fault fault;          /* the catalog fault whose plan gives exactly this tensor,
                                  or GGUF_FAULT_NONE ("no known fault") */
    bool padded;               /* stacked experts whose intermediate the engine padded with
                                  zeros (vLLM CPU: to a multiple of 32); compared without
                                  them; shape is the dump's */
} gguf_dump_finding;

typedef struct gguf_dump_check gguf_dump_check;

/*
 * Check DIR's rank files against the plan: for every rank and parameter, the
 * dump (any dtype, converted to float) against the plan's tensor rounded to
 * the dump's dtype; equal when rel-L2 <= GGUF_DUMP_TOLERANCE. The parameter
 * list is read under the names rank 0's files use (shard-plan's, or vLLM
 * 0.32's: the table above). A differing tensor is matched against the same
 * parameter built from the plan with each weight fault of the catalog applied
 * (gguf_shard_apply_fault on a fresh plan of `m` with the same options); the
 * first fault whose tensor equals the dump names the fault. llama's q/k slots
 * held in the GGUF's permuted order (the permutation not undone) are named
 * GGUF_FAULT_ROPE_PAIRS. Findings: every (rank, parameter), then per rank the
 * UNKNOWN tensors of its files.
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
/* Findings that fail the check: DIFFERS, SHAPE, MISSING (not ABSENT, UNKNOWN). */
int64_t gguf_dump_check_failed(const gguf_dump_check *c);
/* The number of parameters per rank and the files read. */
int64_t gguf_dump_check_params(const gguf_dump_check *c);
int gguf_dump_check_files(const gguf_dump_check *c);

/* "ok", "differs", "shape", "missing", "absent", "unknown" ("invalid" out of range). */
const char *gguf_dump_status_name(gguf_dump_status s);
/* True for DIFFERS, SHAPE and MISSING. */
bool gguf_dump_status_fails(gguf_dump_status s);

GGUF_END_DECLS
#endif /* GGUF_SHARD_DUMP_H */
