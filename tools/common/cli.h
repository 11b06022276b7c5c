/*
 * cli.h - what every ggufkit tool shares: one option table that drives both
 * getopt_long and --help, error printing, exit codes, progress and JSON output.
 */
#ifndef GGUFKIT_CLI_H
#define GGUFKIT_CLI_H

#include <regex.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gguf/error.h"
#include "gguf/version.h"

#define GGUFKIT_VERSION GGUF_VERSION_STRING

enum { CLI_EXIT_OK = 0, CLI_EXIT_DIFF = 1, CLI_EXIT_USAGE = 2, CLI_EXIT_ENV = 3 };

/* Ids below 256 may double as short options; ids >= 256 are long-only. */
enum { CLI_OPT_HELP = 1000, CLI_OPT_VERSION, CLI_OPT_QUIET, CLI_OPT_VERBOSE };

typedef struct cli_opt {
    int id;              /* returned by cli_next; a char for a short option */
    const char *name;    /* long name without "--" */
    int has_arg;         /* 0 none, 1 required, 2 optional ("--opt=VALUE"; the tool may
                            take a following argument itself) */
    const char *arg;     /* argument name for --help, e.g. "N" */
    const char *help;
} cli_opt;

typedef struct cli_spec {
    const char *tool;
    const char *usage;     /* e.g. "[OPTIONS] MODEL.gguf" */
    const char *summary;   /* one paragraph */
    const cli_opt *opts;   /* terminated by {0} */
    const char *examples;  /* lines of examples */
} cli_spec;

extern int cli_verbosity; /* 0 quiet, 1 normal, 2 verbose */
/*
 * Next option: its id, or -1 when options end (then argv[*optind] is the first
 * positional). Handles --help, --version, -q, -v itself; prints usage and exits
 * 2 on an unknown option or a missing argument.
 */
int cli_next(const cli_spec *spec, int argc, char **argv, const char **arg, int *optind_out);
void cli_usage(const cli_spec *spec, FILE *out);

/* "TOOL: error: MESSAGE (offset N)" to stderr. */
void cli_error(const char *tool, const gguf_error *err);
void cli_errorf(const char *tool, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Library status -> exit code (docs/design.md): mismatch 1, environment 3, input 2. */
int cli_exit_code(int status);

/* Sizes: "1.5G", "300M", "4096", K/M/G/T powers of 1024 (decimals allowed). */
int cli_parse_size(const char *s, uint64_t *out);
/*
 * --split-max-size of gguf-merge and gguf-gen, llama-gguf-split's convention:
 * it reads "50G" as 50 * 10^9 bytes and "300M" as 300 * 10^6 (the usual reason
 * to split is an upload limit stated in decimal units), so K, M, G, T (with an
 * optional B) are powers of 1000; KiB, MiB, GiB, TiB powers of 1024; decimals
 * are allowed ("1.5G"); a bare number is bytes. At least 1 byte.
 * @return 0, or -1 for anything else.
 */
int cli_parse_split_size(const char *s, uint64_t *out);
int cli_parse_u64(const char *s, uint64_t *out);
/* Token ids as users write them: "1,17,42" (non-negative, no spaces). *out is
 * malloc'd. @return 0, or -1 (nothing allocated) for anything else. */
int cli_parse_ids(const char *s, int32_t **out, int64_t *n);
/* Human size into buf, e.g. "1.50 GiB". */
const char *cli_human_bytes(uint64_t n, char *buf, size_t size);

/* Progress on stderr, only on a terminal, at most ~5 lines a second. */
typedef struct cli_progress {
    bool enabled;
    const char *label;
    uint64_t total;
    double start, last;
} cli_progress;
void cli_progress_start(cli_progress *p, const char *label, uint64_t total);
void cli_progress_update(cli_progress *p, uint64_t done);
void cli_progress_end(cli_progress *p);
double cli_now(void);

/*
 * --filter, one meaning in every tool: a POSIX extended regular expression searched anywhere
 * in a name (unanchored: 'blk.0.' is a substring match, 'attn_(q|k)\\.' an alternative,
 * '^output' anchors). CLI_FILTER_HELP is the --help text of the option.
 */
#define CLI_FILTER_HELP "only names matching REGEX (POSIX extended, searched anywhere in the name)"
typedef struct cli_filter {
    bool set;
    regex_t re;
    const char *pattern;
    long long n_matched; /* names cli_filter_match accepted */
} cli_filter;
/* Compile pattern; an invalid one prints "TOOL: error: --filter: ..." and returns -1. */
int cli_filter_set(cli_filter *f, const char *tool, const char *pattern);
/* true when no filter is set or name matches; counts the matches. */
bool cli_filter_match(cli_filter *f, const char *name);
/* The same without counting. */
bool cli_filter_test(const cli_filter *f, const char *name);
/* A filter that matched none of n_names names: a warning on stderr, so that a pattern
 * meant as a glob or a typo does not pass for an empty result. */
void cli_filter_warn_empty(const cli_filter *f, const char *tool, long long n_names);
void cli_filter_free(cli_filter *f);

/*
 * The tools' one JSON writer (tools/common/cli_json.c): build a document of jansson
 * values (json_object_set_new, json_array_append_new, with the constructors below
 * for numbers and text) and print it with cli_json_print, never with printf.
 * Every object a tool prints at top level starts with "tool" (the command:
 * "shard-plan", "ref-forward compare") and "version" (ggufkit's):
 * cli_json_print_report puts them first. jansson's json_t, declared without its
 * header.
 */
struct json_t;
/* A number: NaN/Inf null, integral values (below 2^53) as integers, others as
 * reals (17 significant digits). NULL out of memory. */
struct json_t *cli_json_number(double v);
/* An integer; 0..255 are shared values (as many uses as wanted, one allocation).
 * NULL out of memory. */
struct json_t *cli_json_int(int64_t v);
/* A string of n bytes (strlen when n == SIZE_MAX); bytes that are not UTF-8
 * become U+FFFD; NULL s gives null. NULL out of memory. */
struct json_t *cli_json_text(const char *s, size_t n);
/* A uint64 as an exact JSON integer, also above INT64_MAX where jansson's integers
 * (signed 64-bit) end: such a value is printed by cli_json_print only (json_dumpf
 * refuses it). NULL out of memory. */
struct json_t *cli_json_u64(uint64_t v);
/* Print doc on one line and a newline: keys in insertion order, ", " and ": "
 * between items, or "," and ":" when compact. Takes the reference (doc is
 * freed). @return 0, or -1 when doc is NULL (a constructor ran out of memory)
 * or the write failed. */
int cli_json_print(FILE *out, struct json_t *doc, bool compact);
/* cli_json_print of a tool's report: "tool" and "version" first, then doc's keys
 * in their order. Takes the reference. @return as above. */
int cli_json_print_report(FILE *out, const char *tool, struct json_t *doc);

#endif
