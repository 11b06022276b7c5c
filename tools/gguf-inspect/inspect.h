/* gguf-inspect: shared declarations of its output formats. */
#ifndef GGUF_INSPECT_H
#define GGUF_INSPECT_H

#include <stdbool.h>
#include <stdio.h>

#include "cli.h"
#include "gguf/file.h"
#include "gguf/hash.h"

typedef struct inspect_opts {
    bool json, metadata_only, tensors_only, hash;
    cli_filter filter; /* --filter (cli.h: one meaning in every tool) */
    int threads;
} inspect_opts;

/* Digests computed once, shared by both formats (NULL arrays when --hash is off). */
typedef struct inspect_digests {
    gguf_digest *tensors;   /* set order */
    gguf_digest model;
    gguf_digest *files;     /* per part */
} inspect_digests;

bool inspect_match(const inspect_opts *o, const char *name);
void inspect_print_text(FILE *out, const gguf_set *s, const inspect_opts *o,
                        const inspect_digests *d);
/* @return 0, or -1 when out of memory or the write failed (nothing or a part printed). */
int inspect_print_json(FILE *out, const gguf_set *s, const inspect_opts *o,
                       const inspect_digests *d);

/* --tokenize / --detokenize (inspect_tok.c). */
typedef struct inspect_tok_opts {
    const char *tokenize;   /* text, or "-" for standard input */
    const char *detokenize; /* ids, or "-" */
    int add_bos, add_eos;   /* GGUF_TOK_AUTO, 0, 1 */
    bool no_special, json;
} inspect_tok_opts;

/* Runs one of them on the model; returns the exit code. */
int inspect_tok_run(const char *tool, const char *path, const gguf_set *s,
                    const inspect_tok_opts *o);

#endif
