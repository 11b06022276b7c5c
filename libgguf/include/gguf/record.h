/*
 * gguf/record.h - activation records: what a forward pass computed at each
 * named capture point, kept as a GGUF file of F32 tensors.
 *
 * A record is an ordinary GGUF v3 file that gguf-py, llama.cpp's gguf tools and
 * gguf-inspect can read:
 *
 *   metadata                                   tensors (all F32, in capture order)
 *   general.type           = "ggufkit.record"   blk.0.attn_norm   ne = [n_embd, n_tokens]
 *   record.version         = 1 (u32)            blk.0.attn_out    ne = [n_embd, n_tokens]
 *   record.model_digest    = 32 hex (hash.h)    blk.0.moe_experts ne = [n_used, n_tokens]
 *   record.tokens          = [i32 ...]          blk.0.moe_weights ne = [n_used, n_tokens]
 *   record.backend         = "cpu"              blk.0.ffn_out     ne = [n_embd, n_tokens]
 *   record.precision       = "f32" | "f64" ...  blk.0.residual    ne = [n_embd, n_tokens]
 *   record.tp, record.ep   = u32                ...
 *   record.ranks           = u32 (tp*ep usually) output_norm      ne = [n_embd, n_tokens]
 *   record.plan_digest     = 32 hex or ""       logits           ne = [n_vocab, n_tokens]
 *   record.ggufkit_version = "0.1.0"
 *   record.arch, record.fault (optional strings)
 *
 * Capture names. A point is "blk.L.OP" (layer L, op OP) or a name without a
 * layer ("output_norm", "logits", "token_embd"). Points named "*.moe_experts"
 * hold the router's chosen expert ids as floats (exact below 2^24), one row of
 * n_used per token; "*.moe_weights" the matching routing weights. Records with
 * more than one rank (record.ranks > 1) name every tensor "POINT@RANK"
 * (e.g. "blk.3.attn_out@2"); single-rank records use the bare point name.
 * Names stay under 64 bytes so that ggml can load the file.
 *
 * Compression. With opts->zstd the file on disk is one zstd frame whose
 * content is exactly the GGUF file above (conventionally named .gguf.zst;
 * `zstd -d` gives back the plain record). gguf_record_open() detects the
 * zstd magic (28 B5 2F FD) whatever the file name and decompresses in memory.
 *
 * Writing is atomic: capture data is spilled to an unlinked scratch file beside
 * the output while the forward runs (memory stays bounded), and the record
 * appears under its name only at gguf_record_writer_finish(), after fsync and
 * rename. A failure or gguf_record_writer_free() before finish leaves nothing.
 */
#ifndef GGUF_RECORD_H
#define GGUF_RECORD_H

#include "gguf/export.h"

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/error.h"
#include "gguf/version.h"
#include "gguf/file.h"

GGUF_BEGIN_DECLS

#define GGUF_RECORD_TYPE "ggufkit.record"
#define GGUF_RECORD_VERSION 1u
#define GGUF_RECORD_MAX_NAME 63u   /* tensor name bytes, rank suffix included */
#define GGUF_RECORD_MAX_RANKS 4096u
#define GGUF_RECORD_LIB_VERSION GGUF_VERSION_STRING /* written as record.ggufkit_version */

/* Metadata keys of a record. */
#define GGUF_RKEY_TYPE "general.type"
#define GGUF_RKEY_VERSION "record.version"
#define GGUF_RKEY_MODEL_DIGEST "record.model_digest"
#define GGUF_RKEY_TOKENS "record.tokens"
#define GGUF_RKEY_BACKEND "record.backend"
#define GGUF_RKEY_PRECISION "record.precision"
#define GGUF_RKEY_TP "record.tp"
#define GGUF_RKEY_EP "record.ep"
#define GGUF_RKEY_RANKS "record.ranks"
#define GGUF_RKEY_PLAN_DIGEST "record.plan_digest"
#define GGUF_RKEY_VERSION_STR "record.ggufkit_version"
#define GGUF_RKEY_ARCH "record.arch"
#define GGUF_RKEY_FAULT "record.fault"

/* What a record says about the run that made it. Strings are never NULL ("" when absent). */
typedef struct gguf_record_meta {
    const char *model_digest; /* hex model digest of gguf/hash.h */
    const int32_t *tokens;    /* the input token ids */
    uint64_t n_tokens;
    const char *backend;      /* "cpu", "cpu-tp", "cuda", "cuda-nccl", or an engine's name */
    const char *precision;    /* "f32", "f64", "bf16", "f16": selects default tolerances */
    uint32_t tp, ep;          /* 0 is read as 1 */
    uint32_t ranks;           /* ranks whose captures the record holds; 0 means tp*ep */
    const char *plan_digest;  /* shard plan digest, "" for single-device runs */
    const char *arch;         /* general.architecture of the model, optional */
    const char *fault;        /* the fault injected on purpose, "" when none */
    const char *ggufkit_version; /* writer: NULL means this library's version */
} gguf_record_meta;

/* ----------------------------------------------------------------- writing */

typedef struct gguf_record_writer gguf_record_writer;

typedef struct gguf_record_opts {
    unsigned int version; /* GGUF_RECORD_OPTS_VERSION, or 0 for the same (see below) */
    bool zstd;            /* write a zstd frame around the GGUF (see above) */
    int zstd_level;       /* 0: 3 (activations are near-random floats: level 19 is ~200x
                           * slower and saves under 1%) */
    bool overwrite;       /* replace an existing output */
    bool no_sync;         /* skip fsync (tests, scratch files) */
    const gguf_cancel_flag *cancel; /* non-zero makes the next call fail, GGUF_E_INTERRUPTED */
} gguf_record_opts;
/* The layout version of gguf_record_opts: the library refuses a larger one with
 * GGUF_E_OPTS_VERSION (docs/conventions.md, "Options structs"). */
#define GGUF_RECORD_OPTS_VERSION 1
/* The defaults, version set: gguf_record_opts o = GGUF_RECORD_OPTS_INIT; */
#define GGUF_RECORD_OPTS_INIT {.version = GGUF_RECORD_OPTS_VERSION}

/*
 * Start a record at path. meta is copied; opts may be NULL.
 * @return 0; GGUF_E_INVALID (NULL path or meta, ranks over GGUF_RECORD_MAX_RANKS);
 *         GGUF_E_EXISTS (path exists and !overwrite); GGUF_E_IO, GGUF_E_NOSPACE.
 */
int gguf_record_writer_create(gguf_record_writer **out, const char *path,
                              const gguf_record_meta *meta, const gguf_record_opts *opts,
                              gguf_error *err);

/*
 * Add one capture: n_dims (1..4) sizes in ne (ggml order: ne[0] is the row,
 * e.g. n_embd; ne[1] the tokens) and the F32 data, which is copied out at once.
 * rank must be below the record's ranks. Captures keep the order of the calls.
 * @return 0; GGUF_E_INVALID (empty name, '@' in it, name too long, rank out
 *         of range, bad shape); GGUF_E_DUPLICATE (same point and rank twice);
 *         GGUF_E_IO, GGUF_E_NOSPACE, GGUF_E_NOMEM, GGUF_E_INTERRUPTED.
 */
int gguf_record_add(gguf_record_writer *w, const char *point, uint32_t rank, uint32_t n_dims,
                    const int64_t *ne, const float *data, gguf_error *err);

/* Same, from doubles (rounded to float): for the f64 forward. */
int gguf_record_add_f64(gguf_record_writer *w, const char *point, uint32_t rank,
                        uint32_t n_dims, const int64_t *ne, const double *data,
                        gguf_error *err);

/* Number of captures added so far. */
int64_t gguf_record_writer_count(const gguf_record_writer *w);

/*
 * Write the record and move it into place (fsync + rename). Call once.
 * @return 0; GGUF_E_IO, GGUF_E_NOSPACE, GGUF_E_EXISTS, GGUF_E_NOMEM,
 *         GGUF_E_INTERRUPTED. On failure nothing appears at path.
 */
int gguf_record_writer_finish(gguf_record_writer *w, gguf_error *err);

/* Free; before finish this discards everything. Accepts NULL. */
void gguf_record_writer_free(gguf_record_writer *w);

/* ----------------------------------------------------------------- reading */

typedef struct gguf_record gguf_record;

/* One capture of an open record. Pointers borrow from the record. */
typedef struct gguf_capture {
    const char *name;     /* tensor name, e.g. "blk.3.attn_out@2" */
    const char *point;    /* without the rank: "blk.3.attn_out" */
    const char *op;       /* "attn_out"; the whole point when it has no layer */
    int32_t layer;        /* L of "blk.L.", or -1 */
    uint32_t rank;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    int64_t n_elements;
    const float *data;    /* n_elements floats, 4-byte aligned */
    int64_t index;        /* position in the record (capture order) */
    uint64_t file_offset; /* of the data in the (decompressed) GGUF */
} gguf_capture;

/*
 * Open a record, plain or zstd-compressed (detected by magic).
 * Checks that the file is a valid GGUF, that general.type is "ggufkit.record",
 * that every tensor is F32 and every name parses, with rank < record.ranks.
 * @return 0; the codes of gguf_file_open; GGUF_E_NOT_FOUND (general.type
 *         missing: a GGUF but not a record); GGUF_E_BAD_VALUE (another
 *         general.type, bad record metadata, bad rank suffix);
 *         GGUF_E_BAD_TYPE (a capture that is not F32); GGUF_E_BAD_OFFSET (capture
 *         data not 4-byte aligned: general.alignment below 4); GGUF_E_UNSUPPORTED
 *         (record.version newer than this library); GGUF_E_TRUNCATED or
 *         GGUF_E_NOT_GGUF (corrupt zstd frame); GGUF_E_LIMIT (decompressed
 *         size over 64 GiB); GGUF_E_NOMEM.
 */
int gguf_record_open(gguf_record **out, const char *path, gguf_error *err);

/* Same over a caller's buffer (copied when compressed or misaligned). */
int gguf_record_open_memory(gguf_record **out, const void *data, size_t size, const char *name,
                            gguf_error *err);

void gguf_record_free(gguf_record *r);

/* The file's path (or name) as given to open. */
const char *gguf_record_path(const gguf_record *r);
/* True when the file on disk was zstd-compressed. */
bool gguf_record_compressed(const gguf_record *r);
/* The parsed metadata; strings borrow from the record, absent ones are "". */
const gguf_record_meta *gguf_record_get_meta(const gguf_record *r);
/* The underlying GGUF (decompressed view for .zst records). */
const gguf_file *gguf_record_file(const gguf_record *r);

int64_t gguf_record_capture_count(const gguf_record *r);
const gguf_capture *gguf_record_capture_at(const gguf_record *r, int64_t i);
/* By point and rank; NULL when absent. O(1). */
const gguf_capture *gguf_record_capture_find(const gguf_record *r, const char *point,
                                             uint32_t rank);

/*
 * Split a capture name into point and rank ("blk.3.ffn_out@2" -> "blk.3.ffn_out", 2;
 * no suffix -> rank 0) and a point into layer and op. point_out gets at most
 * point_size bytes. @return 0 or GGUF_E_BAD_VALUE (empty point, bad suffix).
 */
int gguf_capture_parse_name(const char *name, char *point_out, size_t point_size,
                            uint32_t *rank, int32_t *layer, const char **op_in_point);

GGUF_END_DECLS
#endif /* GGUF_RECORD_H */
