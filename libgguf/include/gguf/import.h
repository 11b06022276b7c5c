/*
 * gguf/import.h - hidden states that other systems dumped (an engine, HF
 * transformers, a debugging hook), turned into an activation record
 * (gguf/record.h) that `ref-forward compare` puts beside the reference.
 *
 * A *map* says which array of the dump is which capture point. It is a small
 * text format, one statement per line, '#' starts a comment:
 *
 *   # HF transformers: output_hidden_states stacked, saved with numpy
 *   backend hf-transformers
 *   layout layer,seq,hidden
 *   hidden_states.npy[0]        -> token_embd
 *   hidden_states.npy[i=1..-2]  -> blk.{i-1}.residual
 *   hidden_states.npy[-1]       -> output_norm
 *
 * Statements:
 *   layout AXES       the axis order of the arrays of the entries that follow
 *                     (default seq,hidden): a comma list of seq (tokens), hidden
 *                     (the row: n_embd, n_vocab, ...), layer (the axis an index
 *                     selects) and batch (size 1, dropped)
 *   backend NAME      record.backend of the record (an engine's name)
 *   tokens SOURCE     the input token ids: a 1-D (or [1, n]) integer array
 *   npy-v2 bf16       read .npy files whose descr is '<V2' as bfloat16
 *   [optional] SOURCE -> POINT
 *                     an entry: the array(s) SOURCE names give capture POINT;
 *                     without `optional`, an entry that matches nothing is an
 *                     error
 *
 *   SOURCE := FILE [':' TENSOR] ['[' INDEX ']']
 *     FILE    a path relative to the dump folder ('/' between folders, no '..'),
 *             a .npy file or a .safetensors file; '*' and '?' match within
 *             one path component
 *     TENSOR  a tensor name of a safetensors file ('*' matches any run); a
 *             safetensors FILE without TENSOR must hold exactly one tensor
 *     INDEX   N, or VAR=A..B (inclusive): positions along the layout's layer
 *             axis; negative numbers count from the end (-1 is the last)
 *   {VAR} in FILE or TENSOR matches a decimal number and binds VAR to it;
 *   POINT is a capture name (gguf/record.h) where {VAR}, {VAR+N}, {VAR-N}
 *   are replaced by the bound values. Each variable is bound once and used
 *   in POINT. A FILE or TENSOR may not contain whitespace, '#', ':' (FILE),
 *   '[' or ']'.
 *
 * Every array becomes one capture [n_tokens][width] whatever its layout; all
 * captures must have the same number of tokens. The record's captures are
 * written in forward order (token_embd, then blocks by layer and op, then
 * output_norm and logits). Patterns are matched with PCRE2 under a match
 * limit; maps, patterns and matches are bounded (GGUF_IMPORT_MAX_*).
 */
#ifndef GGUF_IMPORT_H
#define GGUF_IMPORT_H

#include "gguf/export.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/error.h"
#include "gguf/record.h"

GGUF_BEGIN_DECLS

#define GGUF_IMPORT_MAX_MAP (1u << 20)     /* bytes of a map file */
#define GGUF_IMPORT_MAX_LINE 4096u         /* bytes of one line */
#define GGUF_IMPORT_MAX_ENTRIES 4096u      /* entries of one map */
#define GGUF_IMPORT_MAX_VARS 4             /* variables of one entry */
#define GGUF_IMPORT_MAX_ITEMS 65536u       /* captures of one import */
#define GGUF_IMPORT_MAX_FILES 100000u      /* names listed in one folder */

/* ---- layouts ---- */

typedef enum gguf_import_axis {
    GGUF_IMPORT_AXIS_SEQ = 0,
    GGUF_IMPORT_AXIS_HIDDEN,
    GGUF_IMPORT_AXIS_LAYER,
    GGUF_IMPORT_AXIS_BATCH,
} gguf_import_axis;

#define GGUF_IMPORT_MAX_AXES 4

typedef struct gguf_import_layout {
    int n_axes;
    uint8_t axis[GGUF_IMPORT_MAX_AXES]; /* gguf_import_axis, outermost first */
} gguf_import_layout;

/*
 * "seq,hidden", "layer,seq,hidden", "seq,layer,hidden", "layer,batch,seq,hidden"...:
 * seq and hidden exactly once, layer and batch at most once.
 * @return 0 or GGUF_E_INVALID (err says what is wrong).
 */
int gguf_import_layout_parse(gguf_import_layout *out, const char *s, gguf_error *err);
/* The layout as text ("seq,hidden") into buf; returns buf. */
char *gguf_import_layout_str(const gguf_import_layout *l, char *buf, size_t size);

/* ---- maps ---- */

typedef struct gguf_import_map gguf_import_map;

/*
 * Parse a map from text (len bytes; no NUL needed). name is used in messages
 * ("hf.map: line 3: ..."). Everything that can be checked without the dump
 * is checked here: syntax, directives, patterns, variables, point templates.
 * @return 0; GGUF_E_BAD_VALUE (a line that is not a statement, with the
 *   line's number and byte offset); GGUF_E_DUPLICATE (backend, tokens or
 *   npy-v2 twice; a variable bound twice); GGUF_E_LIMIT (map, line, entries
 *   or variables over the caps); GGUF_E_BAD_UTF8 (a NUL byte); GGUF_E_NOMEM.
 */
int gguf_import_map_open_memory(gguf_import_map **out, const char *text, size_t len, const char *name,
                                gguf_error *err);
/* Read a map file (at most GGUF_IMPORT_MAX_MAP bytes) and parse it.
 * @return the codes of gguf_import_map_open_memory; GGUF_E_NOT_FOUND; GGUF_E_IO. */
int gguf_import_map_open(gguf_import_map **out, const char *path, gguf_error *err);
void gguf_import_map_free(gguf_import_map *m); /* NULL is fine */

const char *gguf_import_map_name(const gguf_import_map *m);
int64_t gguf_import_map_entry_count(const gguf_import_map *m);
/* The backend statement, or "" */
const char *gguf_import_map_backend(const gguf_import_map *m);

/* ---- resolving a map against a dump, and writing the record ---- */

typedef struct gguf_import_opts {
    unsigned int version; /* GGUF_IMPORT_OPTS_VERSION, or 0 for the same (see below) */
    const gguf_import_layout *layout; /* NULL: each entry's layout from the map */
    bool v2_as_bf16;                  /* '<V2' .npy as bfloat16 (also the map's npy-v2) */
} gguf_import_opts;
/* The layout version of gguf_import_opts: the library refuses a larger one with
 * GGUF_E_OPTS_VERSION (docs/conventions.md, "Options structs"). */
#define GGUF_IMPORT_OPTS_VERSION 1
/* The defaults, version set: gguf_import_opts o = GGUF_IMPORT_OPTS_INIT; */
#define GGUF_IMPORT_OPTS_INIT {.version = GGUF_IMPORT_OPTS_VERSION}

/* One capture the import will write. Strings borrow from the plan. */
typedef struct gguf_import_item {
    const char *point;     /* "blk.3.residual" */
    const char *file;      /* the source file's path */
    const char *tensor;    /* the safetensors tensor, NULL for a .npy */
    int64_t index;         /* position along the layer axis, -1 without one */
    int line;              /* the map line of the entry */
    const char *dtype;     /* the source dtype: "bf16", "f32", ... */
    int64_t n_tokens, width;
} gguf_import_item;

typedef struct gguf_import_plan gguf_import_plan;

/*
 * Match every entry of the map against the folder dir and open what it
 * names; nothing is converted yet. On failure err names the map line, the
 * file, the tensor and what is wrong.
 * @return 0;
 *   GGUF_E_NOT_FOUND  dir missing; an entry (not optional) or tokens that
 *                     match nothing; a FILE that is neither .npy nor .safetensors
 *                     when a TENSOR is given;
 *   GGUF_E_BAD_SHAPE  an array whose dimensions do not fit the layout, a batch
 *                     axis over 1, an index outside the layer axis, captures with
 *                     different numbers of tokens, tokens not 1-D;
 *   GGUF_E_BAD_VALUE  a point that is not a capture name after substitution (a
 *                     negative layer, too long, a rank suffix), an index on a
 *                     layout without layer (or the reverse), a safetensors file
 *                     without TENSOR holding several tensors, a token id out of
 *                     int32 range;
 *   GGUF_E_BAD_TYPE   a tokens array of floats, a capture of a dtype that is not
 *                     a number;
 *   GGUF_E_DUPLICATE  two arrays for one point (naming both lines);
 *   GGUF_E_LIMIT      more than GGUF_IMPORT_MAX_ITEMS captures or
 *                     GGUF_IMPORT_MAX_FILES names in a folder, a pattern over
 *                     PCRE2's match limit;
 *   the codes of gguf_npy_open and gguf_st_file_open for a file they refuse;
 *   GGUF_E_IO; GGUF_E_NOMEM.
 */
int gguf_import_resolve(gguf_import_plan **out, const gguf_import_map *map, const char *dir,
                        const gguf_import_opts *opts, gguf_error *err);
void gguf_import_plan_free(gguf_import_plan *p); /* NULL is fine */

/* Captures in the order they will be written (forward order). */
int64_t gguf_import_plan_count(const gguf_import_plan *p);
const gguf_import_item *gguf_import_plan_item(const gguf_import_plan *p, int64_t i);
/* The sequence length every capture has. */
int64_t gguf_import_plan_n_tokens(const gguf_import_plan *p);
/* The token ids of the map's tokens statement (*n = 0 and NULL without one). */
const int32_t *gguf_import_plan_tokens(const gguf_import_plan *p, int64_t *n);
/* The loosest precision of the captures' dtypes: "bf16", "f16", "f32" or
 * "f64" (integer arrays count as "f32"). */
const char *gguf_import_plan_precision(const gguf_import_plan *p);

/*
 * Convert every capture to float32 [n_tokens][width] and write the record
 * at path (gguf/record.h: atomic; opts may be NULL). meta is the record's
 * metadata as the caller wants it (tokens, backend, precision, model digest,
 * arch); its ranks, tp and ep are taken as 1.
 * @return 0; GGUF_E_BAD_VALUE (meta->n_tokens neither 0 nor the plan's
 *   n_tokens); GGUF_E_EXISTS (path is one of the dump's files, or exists
 *   without opts->overwrite); the codes of the record writer.
 */
int gguf_import_plan_write(const gguf_import_plan *p, const char *path,
                           const gguf_record_meta *meta, const gguf_record_opts *opts,
                           gguf_error *err);

GGUF_END_DECLS
#endif /* GGUF_IMPORT_H */
