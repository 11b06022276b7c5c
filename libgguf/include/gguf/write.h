/*
 * gguf/write.h - a streaming GGUF writer that never holds the model in memory
 * and never leaves a half-written output behind.
 *
 * 1. gguf_writer_create(): a temporary file is created beside the output path
 *    (".NAME.XXXXXX.tmp", through gguf/output.h). The output itself is
 *    untouched until finish.
 * 2. Add metadata (gguf_writer_add_kv and helpers) and tensor infos
 *    (gguf_writer_add_tensor, or gguf_writer_add_tensor_at for an explicit
 *    data offset) in the order they should appear.
 * 3. Write tensor data in the same order: gguf_writer_write() with any chunking,
 *    or gguf_writer_copy_fd() to copy bytes from another file in the kernel
 *    (copy_file_range, holes preserved), or gguf_writer_copy_range() to copy
 *    several tensors with the bytes between them as one range. Padding between
 *    tensors is automatic (zeros; a gap of 4 KiB or more is left as a hole).
 * 4. gguf_writer_finish(): checks every tensor is complete, fsyncs the file,
 *    renames it into place (refusing to replace an existing file unless
 *    overwrite was asked for) and fsyncs the folder.
 * gguf_writer_free() before finish removes the temporary file: an error or an
 * interrupt at any point leaves no output.
 */
#ifndef GGUF_WRITE_H
#define GGUF_WRITE_H

#include "gguf/export.h"

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "gguf/error.h"
#include "gguf/file.h"

GGUF_BEGIN_DECLS

typedef struct gguf_writer gguf_writer;

typedef struct gguf_writer_opts {
    unsigned int version; /* GGUF_WRITER_OPTS_VERSION, or 0 for the same (see below) */
    uint32_t gguf_version; /* the GGUF version written, 2 or 3; 0 means 3 */
    uint32_t alignment;    /* 0: general.alignment if added, else 32 */
    bool overwrite;        /* replace an existing output */
    bool no_sync;          /* skip fsync (tests, scratch files) */
    /* Polled during long writes; non-zero makes the next call fail with
     * GGUF_E_INTERRUPTED (set it from a SIGINT/SIGTERM handler). */
    const gguf_cancel_flag *cancel;
} gguf_writer_opts;
/* The layout version of gguf_writer_opts: the library refuses a larger one with
 * GGUF_E_OPTS_VERSION (docs/conventions.md, "Options structs"). */
#define GGUF_WRITER_OPTS_VERSION 1
/* The defaults, version set: gguf_writer_opts o = GGUF_WRITER_OPTS_INIT; */
#define GGUF_WRITER_OPTS_INIT {.version = GGUF_WRITER_OPTS_VERSION}

/*
 * @return 0; GGUF_E_EXISTS if path exists and !overwrite; GGUF_E_IO.
 */
int gguf_writer_create(gguf_writer **out, const char *path, const gguf_writer_opts *opts,
                       gguf_error *err);

/* Remove the temporary file (if not finished) and free. Accepts NULL. */
void gguf_writer_free(gguf_writer *w);

/* Path of the temporary file being written (for messages and tests). */
const char *gguf_writer_temp_path(const gguf_writer *w);

/*
 * Add a metadata pair; the value (strings, arrays, nested arrays) is copied.
 * "general.alignment" (uint32, power of two) sets the data alignment.
 * @return 0; GGUF_E_DUPLICATE; GGUF_E_INVALID (after data started, bad value);
 *         GGUF_E_BAD_ALIGNMENT.
 */
int gguf_writer_add_kv(gguf_writer *w, const char *key, const gguf_value *v, gguf_error *err);
int gguf_writer_add_u32(gguf_writer *w, const char *key, uint32_t v, gguf_error *err);
int gguf_writer_add_i32(gguf_writer *w, const char *key, int32_t v, gguf_error *err);
int gguf_writer_add_u64(gguf_writer *w, const char *key, uint64_t v, gguf_error *err);
int gguf_writer_add_f32(gguf_writer *w, const char *key, float v, gguf_error *err);
int gguf_writer_add_bool(gguf_writer *w, const char *key, bool v, gguf_error *err);
int gguf_writer_add_str(gguf_writer *w, const char *key, const char *v, gguf_error *err);
/* An array of n scalars of type etype, packed in host (little-endian) order. */
int gguf_writer_add_arr(gguf_writer *w, const char *key, uint32_t etype, const void *items,
                        uint64_t n, gguf_error *err);
int gguf_writer_add_arr_str(gguf_writer *w, const char *key, const char *const *items, uint64_t n,
                            gguf_error *err);

/*
 * Declare the next tensor. ne has n_dims entries (ggml order). Its data
 * follows the previous tensor's, padded to the alignment (the contiguous
 * layout llama.cpp's loader requires).
 * @return 0; GGUF_E_DUPLICATE; GGUF_E_BAD_TYPE; GGUF_E_BAD_SHAPE; GGUF_E_OVERFLOW.
 */
int gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                           const int64_t *ne, gguf_error *err);

#define GGUF_WRITER_NEXT UINT64_MAX /* offset: right after the previous tensor */

/*
 * Declare the next tensor at data offset `offset` (relative to the data
 * section, as stored in the file): a multiple of the alignment, at or after
 * the padded end of the previous tensor. The bytes of a gap are zeros (a hole
 * when 4 KiB or more). The GGUF format allows gaps and gguf-py reads them;
 * llama.cpp's gguf_init_from_file refuses any tensor whose offset is not the
 * padded end of the previous one, so use gaps only for files that need not
 * load there.
 * @return the codes of gguf_writer_add_tensor; GGUF_E_BAD_OFFSET.
 */
int gguf_writer_add_tensor_at(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                              const int64_t *ne, uint64_t offset, gguf_error *err);

/* Bytes of the whole output file once every tensor is written (header+padding+data). */
uint64_t gguf_writer_total_size(const gguf_writer *w);
/* Bytes of the header (metadata + infos), before the padding to the data section. */
uint64_t gguf_writer_header_size(const gguf_writer *w);
/* File offset of the data section: the header padded to the alignment. */
uint64_t gguf_writer_data_offset(const gguf_writer *w);

/*
 * Write the header; implied by the first data call. After it, adding metadata
 * or tensors fails with GGUF_E_INVALID.
 */
int gguf_writer_write_header(gguf_writer *w, gguf_error *err);

/* Append n bytes of tensor data (tensors in declaration order, any chunking). */
int gguf_writer_write(gguf_writer *w, const void *data, uint64_t n, gguf_error *err);

/*
 * Append n bytes of tensor data read from fd at offset: copy_file_range where
 * the kernel can (reflinks on file systems that have them), else pread/pwrite
 * through a bounded buffer; holes in the input stay holes in the output.
 */
int gguf_writer_copy_fd(gguf_writer *w, int fd, uint64_t offset, uint64_t n, gguf_error *err);

/*
 * Copy [in_offset, in_offset + n) of fd to [out_offset, out_offset + n) of the
 * data section (out_offset relative to it, as tensor offsets are): one kernel
 * copy for any number of tensors, the bytes between them taken from fd as
 * they are, so fd must hold the tensors in the same relative layout (the
 * caller checks; gguf_split_execute does). out_offset must continue the data
 * written so far: equal to the current position, or within the padding before
 * the next tensor (never skipping tensor bytes); the range ends at most at the
 * end of the data section. Holes of fd stay holes. Where fd and the output
 * share a file system that shares extents (XFS, btrfs) and in_offset and
 * out_offset agree modulo its block, the aligned middle of the range is
 * cloned, not copied.
 * @return 0; GGUF_E_INVALID (range out of order or past the data);
 *         GGUF_E_TRUNCATED (fd shorter than the range); GGUF_E_IO;
 *         GGUF_E_NOSPACE; GGUF_E_INTERRUPTED.
 */
int gguf_writer_copy_range(gguf_writer *w, int fd, uint64_t in_offset, uint64_t out_offset,
                           uint64_t n, gguf_error *err);

/* Finish: verify completeness, fsync, rename into place, fsync the folder. */
int gguf_writer_finish(gguf_writer *w, gguf_error *err);

GGUF_END_DECLS
#endif /* GGUF_WRITE_H */
