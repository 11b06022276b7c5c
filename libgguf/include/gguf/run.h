/*
 * gguf/run.h - recording forward runs: a context's captures into an
 * activation record (gguf/record.h), with the metadata that says what ran
 * (model digest, tokens, backend, precision, ranks, plan digest, fault).
 * ref-forward, its GPU ranks and the engine check share it.
 *
 *     gguf_recorder *rec;
 *     gguf_recorder_create(&rec, ctx, set, tokens, n, "ref.gguf", &ro, &err);
 *     gguf_fwd_eval(ctx, tokens, n, logits, &err);   captures go to the record
 *     gguf_recorder_finish(rec, &err);               then the record appears
 *     gguf_recorder_free(rec);
 */
#ifndef GGUF_RUN_H
#define GGUF_RUN_H

#include "gguf/export.h"

#include <stdbool.h>
#include <stdint.h>

#include "gguf/error.h"
#include "gguf/file.h"
#include "gguf/forward.h"
#include "gguf/shard.h"

GGUF_BEGIN_DECLS

typedef struct gguf_run_record_opts {
    unsigned int version; /* GGUF_RUN_RECORD_OPTS_VERSION, or 0 for the same (see below) */
    bool zstd;                   /* a zstd frame around the record */
    bool no_sync;                /* scratch records: no fsync */
    int precision;               /* GGUF_FWD_F32 / _F64: record.precision */
    int n_threads;               /* threads hashing the model (0: 1) */
    const char *backend;         /* record.backend; NULL: the context's backend name */
    const gguf_shard_plan *plan; /* multi-rank runs: tp, ep, ranks, plan digest */
    const char *fault;           /* record.fault (NULL: none) */
    const char *model_digest;    /* hex digest when known (NULL: computed from the set;
                                    "" to leave it empty) */
} gguf_run_record_opts;
/* The layout version of gguf_run_record_opts: the library refuses a larger one with
 * GGUF_E_OPTS_VERSION (docs/conventions.md, "Options structs"). */
#define GGUF_RUN_RECORD_OPTS_VERSION 1
/* The defaults, version set: gguf_run_record_opts o = GGUF_RUN_RECORD_OPTS_INIT; */
#define GGUF_RUN_RECORD_OPTS_INIT {.version = GGUF_RUN_RECORD_OPTS_VERSION}

typedef struct gguf_recorder gguf_recorder;

/*
 * Start recording ctx's captures into a record at path (replaced when it
 * exists; it appears at finish). The context's capture callback is set to
 * the recorder's until finish or free. The record holds the next eval (the
 * one that starts at the context's current position: a prompt, say) and
 * ignores the evals after it (decoded tokens). tokens are the input the
 * record names.
 * @return 0; the codes of gguf_record_writer_create and gguf_digest_set;
 *         GGUF_E_UNSUPPORTED (the backend cannot capture); GGUF_E_NOMEM.
 */
int gguf_recorder_create(gguf_recorder **out, gguf_fwd_ctx *ctx, const gguf_set *set,
                         const int32_t *tokens, int64_t n_tokens, const char *path,
                         const gguf_run_record_opts *opts, gguf_error *err);
/* Stop capturing (later evals are not recorded) without writing. */
void gguf_recorder_stop(gguf_recorder *r);
/* Stop, write and move the record into place. @return the codes of
 * gguf_record_writer_finish, or the first capture error. */
int gguf_recorder_finish(gguf_recorder *r, gguf_error *err);
/* Before finish, nothing appears. Detaches from the context. NULL is fine. */
void gguf_recorder_free(gguf_recorder *r);

/* One eval of tokens, every capture into a record at path. */
int gguf_run_record(gguf_fwd_ctx *ctx, const gguf_set *set, const int32_t *tokens,
                    int64_t n_tokens, const char *path, const gguf_run_record_opts *opts,
                    gguf_error *err);

GGUF_END_DECLS
#endif /* GGUF_RUN_H */
