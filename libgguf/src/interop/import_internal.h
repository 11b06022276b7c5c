/* Internal layout of the import module (gguf/import.h); shared by import_*.c. */
#ifndef GGUF_IMPORT_INTERNAL_H
#define GGUF_IMPORT_INTERNAL_H

#include "gguf/import.h"

#define IMP_VAR_NAME 16

/* A SOURCE of a map: FILE[:TENSOR][INDEX]. */
typedef struct imp_source {
    char *file;                 /* file pattern, '/'-separated */
    char *tensor;               /* tensor pattern or NULL */
    bool has_index, index_range;
    char index_var[IMP_VAR_NAME]; /* for VAR=A..B */
    int64_t idx_a, idx_b;       /* the index, or the range's ends (negative: from the end) */
    char *text;                 /* the SOURCE as written */
} imp_source;

typedef struct imp_entry {
    int line;
    uint64_t offset;            /* of the line in the map */
    bool optional;
    imp_source src;
    char *target;               /* point template, e.g. "blk.{i-1}.residual" */
    gguf_import_layout layout;
} imp_entry;

struct gguf_import_map {
    char *name;
    imp_entry *entries;
    int64_t n_entries;
    char backend[64];
    bool has_tokens;
    imp_source tokens;
    int tokens_line;
    bool v2_bf16;
};

/* Variable names a pattern binds, in order; returns the count or -1 (bad syntax). */
int imp_pattern_vars(const char *pat, char names[][IMP_VAR_NAME], int cap);

/* The point of an entry for the values of its variables (file, tensor, index order).
 * @return 0 or GGUF_E_BAD_VALUE with the reason in bad. */
int imp_expand_point(const imp_entry *e, const int64_t *vals, char *out, size_t cap, char *bad,
                     size_t badn);

/*
 * A compiled name pattern ('*', '?', {VAR}); match() fills the bound values
 * of the pattern's variables in order. Component patterns of a FILE never
 * see a '/'.
 */
typedef struct imp_matcher imp_matcher;
int imp_matcher_new(imp_matcher **out, const char *pat, bool file_component, gguf_error *err);
/* @return 1 on a match (vals filled), 0 on none, GGUF_E_LIMIT past the match limit. */
int imp_matcher_match(const imp_matcher *m, const char *s, int64_t *vals, int cap);
int imp_matcher_nvars(const imp_matcher *m);
bool imp_matcher_literal(const imp_matcher *m);
void imp_matcher_free(imp_matcher *m);

/* The files a FILE pattern matches below a folder (import_walk.c). */
typedef struct fmatch {
    char *path;
    int64_t vals[GGUF_IMPORT_MAX_VARS];
    int nvals;
} fmatch;

typedef struct fwalk {
    const char *pat; /* the whole FILE pattern, for messages */
    fmatch *m;       /* the matches, in name order per folder */
    int64_t n, cap;
    gguf_error *err;
} fwalk;

/* Match the components of comp (the pattern from there on) below folder base; vals holds
 * the nvals values bound so far. @return 0 or a gguf_status (err in w->err). */
int imp_walk_dir(fwalk *w, const char *base, const char *comp, int64_t *vals, int nvals);
void imp_fwalk_free(fwalk *w);

#endif
