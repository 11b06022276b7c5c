/*
 * gguf/output.h - files that appear whole or not at all (and small files
 * read whole, at the end).
 *
 * Every file ggufkit writes (merged models, records, reports, .npy arrays,
 * manifests) goes through this: the bytes go to a temporary file beside the
 * output with a unique, unpredictable name (".NAME.XXXXXX.tmp", created with
 * O_EXCL), then commit fsyncs it, renames it into place and fsyncs the
 * folder. Until commit the output path is untouched; an error, a full disk or
 * gguf_output_free() before commit removes the temporary file and leaves
 * nothing behind.
 *
 *     gguf_output *o;
 *     if (gguf_output_create(&o, "report.json", NULL, &err)) ...
 *     fprintf(gguf_output_stream(o), "{...}");      or gguf_output_write()
 *     rc = gguf_output_commit(o, &err);
 *     gguf_output_free(o);
 */
#ifndef GGUF_OUTPUT_H
#define GGUF_OUTPUT_H

#include "gguf/export.h"

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gguf/error.h"

GGUF_BEGIN_DECLS

typedef struct gguf_output_opts {
    unsigned int version; /* GGUF_OUTPUT_OPTS_VERSION, or 0 for the same (see below) */
    bool overwrite; /* replace an existing file; default: GGUF_E_EXISTS at create
                       when the path exists, and at commit when one appeared */
    bool no_sync;   /* skip the fsyncs (scratch files nobody keeps) */
    /* Polled by commit after the fsync and before the rename: non-zero makes
     * it fail with GGUF_E_INTERRUPTED and leaves no output (a SIGINT during
     * the fsync of a large file must not let it appear). May be NULL. */
    const gguf_cancel_flag *cancel;
} gguf_output_opts;
/* The layout version of gguf_output_opts: the library refuses a larger one with
 * GGUF_E_OPTS_VERSION (docs/conventions.md, "Options structs"). */
#define GGUF_OUTPUT_OPTS_VERSION 1
/* The defaults, version set: gguf_output_opts o = GGUF_OUTPUT_OPTS_INIT; */
#define GGUF_OUTPUT_OPTS_INIT {.version = GGUF_OUTPUT_OPTS_VERSION}

typedef struct gguf_output gguf_output;

/*
 * Create the temporary file beside path (same folder, so that rename is
 * atomic), mode 0666 minus the umask. opts may be NULL.
 * @return 0; GGUF_E_INVALID (NULL or empty path); GGUF_E_EXISTS (path exists
 *         and !overwrite); GGUF_E_IO / GGUF_E_NOSPACE (folder missing, not
 *         writable, full); GGUF_E_NOMEM.
 */
int gguf_output_create(gguf_output **out, const char *path, const gguf_output_opts *opts,
                       gguf_error *err);

/* The temporary file's descriptor, for writers of their own (copy_file_range,
 * pwrite); owned by the output. */
int gguf_output_fd(const gguf_output *o);
/* The path the output will have, and the temporary one it has now. */
const char *gguf_output_path(const gguf_output *o);
const char *gguf_output_temp_path(const gguf_output *o);

/*
 * A stdio stream on the temporary file, for text writers (fprintf). Made on
 * first use and owned by the output; commit flushes it and reports any write
 * error it met. Do not mix with gguf_output_write().
 * @return the stream, or NULL when out of memory.
 */
FILE *gguf_output_stream(gguf_output *o);

/* Write n bytes (all of them; EINTR and short writes are retried).
 * @return 0; GGUF_E_IO / GGUF_E_NOSPACE naming the output. */
int gguf_output_write(gguf_output *o, const void *data, size_t n, gguf_error *err);

/*
 * Flush, fsync, check the cancel flag, rename into place (refusing to replace
 * a file unless overwrite), fsync the folder. Call once; free the output after.
 * @return 0; GGUF_E_IO / GGUF_E_NOSPACE; GGUF_E_EXISTS (the path appeared
 *         meanwhile and !overwrite); GGUF_E_INTERRUPTED (cancel flag set).
 *         On failure gguf_output_free() removes the temporary file.
 */
int gguf_output_commit(gguf_output *o, gguf_error *err);

/* Free; before a successful commit, the temporary file is removed. NULL is fine. */
void gguf_output_free(gguf_output *o);

/* One call for a whole buffer: create, write, commit, free. */
int gguf_output_write_file(const char *path, const void *data, size_t n,
                           const gguf_output_opts *opts, gguf_error *err);

/* fsync the folder that holds path (after a rename or unlink of its own);
 * best effort, @return 0 or -1 with errno. */
int gguf_fsync_parent(const char *path);

/* ---- the other way: small files read whole ---- */

/*
 * Read a whole file of at most max_bytes bytes (a config.json, an index, a
 * prompts or token list) into memory. A regular file is sized first; any
 * other readable file (a pipe, /dev/stdin, a process substitution) is read
 * to its end. *out is malloc'd, NUL-terminated (the NUL not counted in
 * *len; the text may hold NULs of its own) and owned by the caller (free());
 * it is NULL on failure. len may be NULL.
 * @return 0; GGUF_E_INVALID (NULL path or out); GGUF_E_NOT_FOUND (no such
 *         file); GGUF_E_IO (cannot open or read it, a folder; err->sys_errno
 *         says why); GGUF_E_LIMIT (longer than max_bytes); GGUF_E_NOMEM.
 *         Messages name the path.
 */
int gguf_read_small_file(const char *path, size_t max_bytes, char **out, size_t *len,
                         gguf_error *err);

GGUF_END_DECLS
#endif /* GGUF_OUTPUT_H */
