/*
 * gguf/diagnose.h - name the fault of an engine from its outputs alone.
 *
 * An engine that diverged from the reference (gguf/engine.h) answered some
 * prompts with log-probabilities. Each fault of the catalog (gguf/shard.h)
 * that can occur in the model, at the engine's tensor/expert-parallel sizes,
 * makes a faulty reference: the virtual tensor-parallel forward of the plan
 * broken by that fault (gguf_fwd_tp_create). A candidate reproduces the
 * engine when the engine AGREES with its faulty reference under the run's
 * tolerances (gguf_engine_judge), exactly as a correct engine agrees with the
 * clean one; the candidates that do are ranked by mean |dlogprob| of the
 * engine's tokens. Nothing is guessed: when no candidate reproduces the
 * engine the diagnosis says so, and when the best two both do and their
 * means are within a factor of two (the engine's own noise, as a bf16 engine
 * has, could then order them either way), it is ambiguous and names both.
 *
 * The search (docs/check-engine.md, "Diagnose"):
 *   1. every fault at every layer, once per tp size (configuration faults,
 *      which do not depend on tp, once), plus the clean plan as the baseline;
 *   2. when no fault reproduces at every layer and opts.layers is set, every
 *      weight fault at each single layer (an engine that broke one layer's
 *      tensors).
 * Candidates whose plans are identical (gguf_shard_plan_digest) are run once.
 * Each run is one forward of every answer's sequence on the CPU; runs go
 * opts.n_jobs at a time, each with its own context.
 */
#ifndef GGUF_DIAGNOSE_H
#define GGUF_DIAGNOSE_H

#include "gguf/export.h"

#include <stdbool.h>
#include <stdint.h>

#include "gguf/engine.h"
#include "gguf/error.h"
#include "gguf/model.h"
#include "gguf/shard.h"

GGUF_BEGIN_DECLS

/* One prompt's answer, as the check compared it (borrowed). */
typedef struct gguf_diag_answer {
    const gguf_engine_reply *reply;
    const int32_t *seq;          /* prompt ids, then the generated ids */
    int64_t n_seq, n_seq_prompt;
} gguf_diag_answer;

#define GGUF_DIAG_MAX_TP 16

typedef struct gguf_diag_opts {
    unsigned int version;        /* GGUF_DIAG_OPTS_VERSION, or 0 for the same */
    int tp[GGUF_DIAG_MAX_TP];    /* tp sizes to try; n_tp 0: 1, 2, 4, 8 where the
                                    model's heads, kv heads and ffn split evenly */
    int n_tp;
    int ep;                      /* expert-parallel size used with every tp; 0: none,
                                    and a fault that needs expert parallelism is tried
                                    at ep = tp */
    gguf_engine engine;          /* whose sharding rules */
    bool layers;                 /* step 2 of the search */
    int n_jobs;                  /* candidates run at once (0: 1) */
    int n_threads;               /* matmul threads of each run (0: 1) */
    bool drop_pages;             /* gguf_fwd_opts.drop_pages of each run: only for a
                                    model mapped from files */
    int64_t max_runs;            /* refuse a step 1 of more runs, skip a step 2 that
                                    would exceed it (0: no bound) */
    const gguf_cancel_flag *cancel; /* set: the search stops, GGUF_E_INTERRUPTED */
    /* called from the searching threads (serialized) after each run; may be NULL */
    void (*progress)(void *user, int64_t done, int64_t total);
    void *progress_user;
} gguf_diag_opts;
/* The layout version of gguf_diag_opts: a larger one is refused with
 * GGUF_E_OPTS_VERSION (docs/conventions.md, "Options structs"). */
#define GGUF_DIAG_OPTS_VERSION 1
#define GGUF_DIAG_OPTS_INIT {.version = GGUF_DIAG_OPTS_VERSION}

typedef struct gguf_diag_candidate {
    gguf_fault fault;            /* GGUF_FAULT_NONE: the clean plan (the baseline) */
    int64_t layer;               /* -1: every layer */
    int tp, ep;
    int64_t same_plan_as;        /* index of a candidate with an identical plan whose
                                    run this one shares, -1 */
    int run_error;               /* 0, or the code that stopped its faulty reference
                                    (a plan the forward cannot run: not compared) */
    bool reproduces;             /* the engine agrees with this faulty reference */
    double mean_abs_dlogprob;    /* over the engine's chosen tokens, every answer */
    double median_abs_dlogprob;
    double max_abs_dlogprob;
    double top1_agreement;
    int64_t n_positions, n_over;
} gguf_diag_candidate;

typedef enum gguf_diag_result {
    GGUF_DIAG_NONE = 0,          /* no fault of the catalog reproduces the engine */
    GGUF_DIAG_FAULT,             /* c[0] does, and clearly better than any other */
    GGUF_DIAG_AMBIGUOUS          /* c[0] and the runner-up both do, and the outputs do not
                                    separate them: the same plan, or the runner-up's mean
                                    |dlogprob| under twice c[0]'s */
} gguf_diag_result;

typedef struct gguf_diagnosis {
    gguf_diag_candidate *c;      /* reproducing first, then by mean |dlogprob| */
    int64_t n;
    gguf_diag_result result;
    int64_t runner_up;           /* the best fault after c[0] whose plan differs, -1 */
    int n_reproducing;           /* faults (the clean plan not counted) */
    int64_t n_runs;              /* forward runs made (answers x distinct plans) */
    int64_t n_not_applicable;    /* (fault, layer, tp) that cannot occur in this model */
    bool layers_tried;           /* step 2 ran */
    int64_t layers_runs_skipped; /* step 2 was wanted but would have cost this many
                                    runs, over opts.max_runs: not run */
    int tried_tp[GGUF_DIAG_MAX_TP]; /* the tp sizes searched */
    int n_tried_tp;
    double seconds;
} gguf_diagnosis;

/*
 * The candidates of a search, without running them: how many runs it costs.
 * Fills *n_candidates and *n_runs (step 1 only; step 2 adds up to layers x
 * weight faults x tp sizes more candidates).
 * @return 0; GGUF_E_INVALID (bad options, no tp size that the model allows);
 *         GGUF_E_OPTS_VERSION; GGUF_E_NOMEM.
 */
int gguf_diagnose_count(const gguf_model *m, int n_answers, const gguf_diag_opts *opts,
                        int64_t *n_candidates, int64_t *n_runs, gguf_error *err);

/*
 * Search the catalog for the faults that reproduce the answers.
 * m must hold tensor data (the forward runs it); tol is the run's
 * tolerance (the calibrated preset the check used).
 * @return 0 and *out (free with gguf_diagnosis_free); GGUF_E_INVALID (bad
 *         options, an answer without a reply); GGUF_E_LIMIT (more runs than
 *         opts.max_runs, the count in the message); GGUF_E_INTERRUPTED;
 *         GGUF_E_OPTS_VERSION; the forward's codes (GGUF_E_NOMEM,
 *         GGUF_E_BAD_TYPE).
 */
int gguf_diagnose(gguf_diagnosis **out, const gguf_model *m, const gguf_diag_answer *answers,
                  int n_answers, const gguf_engine_tol *tol, const gguf_diag_opts *opts,
                  gguf_error *err);

void gguf_diagnosis_free(gguf_diagnosis *d);

GGUF_END_DECLS
#endif /* GGUF_DIAGNOSE_H */
