/*
 * ref-forward check-engine: the pieces behind the subcommand.
 *
 *   refwd_check_engine.c   options, the run over the prompts, exit codes
 *   refwd_engine_query.c   one prompt against the engine: the request in its
 *                          dialect, the prompt's token ids, the reply
 *   refwd_engine_report.c  the text table, the --json contract, the --html page
 *
 * The library does the work (gguf/engine.h: requests, replies, comparison,
 * transport); these files decide what to ask and print what came back.
 */
#ifndef REFWD_ENGINE_H
#define REFWD_ENGINE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "gguf/diagnose.h"
#include "gguf/engine.h"
#include "gguf/file.h"
#include "gguf/tokenize.h"
#include "refwd_http.h"

/* One prompt of the run: exactly one of the four is set. */
typedef struct ce_prompt {
    char *text;         /* --prompt */
    char *chat;         /* --chat */
    char *messages;     /* --messages (a JSON array, as text) */
    int32_t *tokens;    /* --tokens */
    int64_t n_tokens;
} ce_prompt;

/* What a run needs to know about the engine and the reference. */
typedef struct ce_ctx {
    refwd_http *http;
    gguf_engine_api api;          /* resolved (never AUTO) */
    const char *served_model;     /* "model" of requests, NULL: omitted */
    int64_t n_predict;
    int top_k;
    bool no_echo;                 /* generated positions only */
    bool prompt_by_prefix;        /* llama-server: prompt positions one request per prefix */
    const gguf_file *meta;        /* the reference's metadata (vocabulary); NULL for an
                                     HF checkpoint without --vocab */
    const gguf_tokenizer *tok;    /* its tokenizer, NULL when it has none */
    int64_t n_vocab;
    int64_t max_positions;        /* bound on the sequence the reference runs */
    gguf_engine_text *texts;      /* how the engine may write each token, built on demand */
    int64_t n_texts;
} ce_ctx;

/* The outcome of one prompt. */
typedef struct ce_result {
    int index;
    gguf_engine_endpoint endpoint;
    gguf_engine_reply *reply;
    int32_t *seq;                 /* prompt ids, then the generated ids */
    int64_t n_seq, n_seq_prompt;
    const char *prompt_ids_from;  /* "request", "reply", "/tokenize", "echo" */
    int tok_match;                /* our tokenizer agrees: 1, 0; -1 not checked */
    char tok_note[200];
    int32_t *our_ids;             /* our tokenization when checked */
    int64_t n_our_ids;
    int64_t prompt_mismatch;      /* first index where the engine's prompt ids differ
                                     from the ids sent, -1 when they agree: a finding */
    int32_t sent_id, engine_id;   /* the ids there (-1: past the end of one of them) */
    int64_t n_unresolved;         /* generated positions left out: tokens written as text
                                     that name no single token (docs/check-engine.md) */
    char notes[6][240];           /* said in the report (fallbacks, limits) */
    int n_notes;
    gguf_engine_cmp *cmp;
} ce_result;

/* snprintf that may truncate on purpose (messages into fixed buffers). */
void ce_fmt(char *dst, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Add a note to r (printf-style); extra notes beyond 6 are dropped. */
void ce_note(ce_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ce_result_clear(ce_result *r);

/* refwd_engine_query.c */

/* Probe /v1/models, /get_model_info, /props and pick the dialect; fills
 * ctx->api and, when it was not given, the served model name (model, size).
 * @return 0 or a gguf_status with err filled. */
int ce_detect(ce_ctx *ctx, char *model, size_t size, gguf_error *err);

/* The endpoint a prompt goes to in ctx's dialect. */
gguf_engine_endpoint ce_endpoint(const ce_ctx *ctx, const ce_prompt *p);

/* Ask the engine for prompt p and fill r (reply, seq, tokenization check).
 * @return 0 or a gguf_status with err filled (GGUF_E_IO: the engine failed;
 *         GGUF_E_BAD_VALUE: a malformed reply; others: refused or unusable). */
int ce_query(ce_ctx *ctx, const ce_prompt *p, ce_result *r, gguf_error *err);

/* refwd_engine_report.c */

typedef struct ce_report {
    const char *model_path;
    const char *arch;
    const char *backend;
    const char *url;
    const char *api;
    const char *served_model;
    const gguf_file *meta;
    const gguf_engine_tol *tol;
    int show;                     /* table rows */
    const gguf_diagnosis *diagnosis; /* --diagnose's finding (the "diagnosis" of --json,
                                        a section of --html), NULL: none */
    const char *command;          /* the command line (--html) */
} ce_report;

/* Totals over every prompt. */
typedef struct ce_totals {
    bool agree;
    int first_prompt;             /* prompt of the first divergence, -1 */
    int64_t first_pos;            /* its index into that prompt's cmp->pos */
    double top1_agreement, kl_topk_mean, max_abs_dlogprob;
    int tokenization_match;       /* 1 all checked agree, 0 one differs, -1 none checked */
    int64_t n_positions;
    int64_t n_over;               /* positions over a per-position bound */
    double median_abs_dlogprob;   /* pooled over every prompt */
} ce_totals;

void ce_totals_compute(ce_totals *t, ce_result *const *res, int n);
void ce_print_text(FILE *out, const ce_report *rep, ce_result *const *res, int n,
                   const ce_totals *t);
/* The --json object (docs/check-engine.md, "JSON"). @return 0, or -1 out of
 * memory or when out cannot be written. */
int ce_print_json(FILE *out, const ce_report *rep, ce_result *const *res, int n,
                  const ce_totals *t);
/* @return 0 or a gguf_status (err filled). */
int ce_write_html(const char *path, const ce_report *rep, ce_result *const *res, int n,
                  const ce_totals *t, gguf_error *err);

/* refwd_engine_diagnose.c */

/* gguf_diagnose over the answers of res (progress on a terminal).
 * @return 0 or a gguf_status (err filled). */
int ce_diagnose(gguf_diagnosis **out, const gguf_model *m, ce_result *const *res, int n,
                const gguf_engine_tol *tol, const gguf_diag_opts *opts, gguf_error *err);
/* "fault", "ambiguous" or "none". */
const char *ce_diagnosis_result(const gguf_diagnosis *d);
/* The candidates' table (show rows) and the finding. */
void ce_print_diagnosis(FILE *out, const gguf_diagnosis *d, int show);
/* The finding and the ranked candidates as an HTML section. */
void ce_html_diagnosis(FILE *f, const gguf_diagnosis *d);
/* The "diagnosis" object of --json (a new reference; NULL when out of memory). */
struct json_t *ce_diagnosis_json(const gguf_diagnosis *d);

/* A token's text for display (escapes made printable), into buf. */
const char *ce_piece(const gguf_file *meta, int32_t id, char *buf, size_t size);

#endif
