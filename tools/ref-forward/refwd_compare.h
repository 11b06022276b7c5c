/*
 * ref-forward compare: compare two activation records and report.
 *
 *   ref-forward compare A.gguf B.gguf [--json] [--html REPORT.html] [--tol SPEC] ...
 *
 * refwd_compare_main is the subcommand (main.c dispatches "compare" to it);
 * refwd_compare_files is the same work for the run path's `--compare REF.gguf`
 * once its own record is written.
 */
#ifndef REFWD_COMPARE_H
#define REFWD_COMPARE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "gguf/compare.h"

typedef struct refwd_compare_args {
    const char *tol;      /* --tol SPEC on top of the defaults, or NULL */
    const char *html;     /* write the HTML report here, or NULL */
    bool json;            /* one JSON object (docs/records.md) instead of the table */
    bool all;             /* the table lists every rank, not the worst per point */
    uint32_t flags;       /* GGUF_CMP_ANY_MODEL, GGUF_CMP_ANY_TOKENS */
    /* What the HTML report names besides the records (each may be NULL/false): */
    const char *model;    /* the model the records were made from */
    const char *command;  /* the command line (refwd_command_line) */
    bool tmp_a, tmp_b;    /* that record is a temporary file of this run, deleted after it */
} refwd_compare_args;

/* The command line as a shell would take it back: "ref-forward compare a.gguf 'b c.gguf'"
 * (malloc'd; NULL when out of memory). argv[0] is the tool or the subcommand's name. */
char *refwd_command_line(int argc, char **argv);

/*
 * Compare test_path against ref_path (A = reference) and write the table or
 * JSON to out, the HTML report when asked. Errors go to stderr as
 * "ref-forward: error: ...". @return the exit code: 0 within tolerance,
 * 1 over tolerance, 2 bad input, 3 environment.
 */
int refwd_compare_files(const char *ref_path, const char *test_path,
                        const refwd_compare_args *args, FILE *out);

/* The subcommand; argv[0] is "compare". */
int refwd_compare_main(int argc, char **argv);

/* compare_html.c: the self-contained HTML page with the SVG error plot.
 * @return 0 or a gguf_status (I/O), err filled. */
int refwd_compare_write_html(const char *path, const gguf_record *a, const gguf_record *b,
                             const gguf_cmp_result *res, const refwd_compare_args *args,
                             gguf_error *err);

#endif
