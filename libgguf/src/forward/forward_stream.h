/* The CPU forward pass on all cores: a persistent pool of worker threads
 * (forward_pool.c) and the streaming matmul over a file tensor
 * (forward_stream.c), which dequantizes each thread's rows a cache-sized
 * block at a time right before multiplying them, their bytes read from the
 * page cache in large windows (pread, or mapped in and dropped). Not
 * installed. */
#ifndef GGUF_FORWARD_STREAM_H
#define GGUF_FORWARD_STREAM_H

#include <stdint.h>

#include "gguf/error.h"
#include "gguf/file.h"

/* ---- the pool (forward_pool.c) ---- */

typedef struct fw_pool fw_pool;

/* fn runs once per part, parts 0..n_parts-1, each on its own thread (part 0
 * on the caller's). */
typedef void (*fw_part_fn)(void *arg, int part, int n_parts);

/* n_threads threads in all, the caller included (n_threads - 1 are started;
 * 1..1024). @return 0; GGUF_E_INVALID for a count out of range; GGUF_E_NOMEM;
 * GGUF_E_IO when a thread cannot be started. */
int fw_pool_create(fw_pool **out, int n_threads, gguf_error *err);
/* Stop and join the workers. Accepts NULL. */
void fw_pool_free(fw_pool *p);
/* Threads of the pool, the caller included (1 for NULL). */
int fw_pool_threads(const fw_pool *p);
/* Run fn over n_parts parts and return when all are done; thread i takes
 * parts i, i + threads, ... One caller at a time; NULL pool or one part:
 * the caller runs them all. */
void fw_pool_run(fw_pool *p, int n_parts, fw_part_fn fn, void *arg);

/* ---- streaming a file tensor through a matmul (forward_stream.c) ---- */

struct fw_exec;
typedef struct fw_stream fw_stream;

/* The pool and per-thread buffers of an executor (fw_exec_create makes
 * them; fw_exec_pool on first use for an executor made by hand). */
int fw_stream_create(fw_stream **out, int n_threads, gguf_error *err);
void fw_stream_free(fw_stream *s);

/* The executor's pool: NULL with one thread (fw_pool_run runs every part
 * on the caller then). */
int fw_exec_pool(struct fw_exec *c, fw_pool **out, gguf_error *err);

/* Run fn over [0, n) in contiguous ranges on c's threads; ranges of at least
 * min_per_part items (one range when n is smaller). */
int fw_exec_parallel(struct fw_exec *c, int64_t n, int64_t min_per_part,
                     void (*fn)(void *arg, int64_t begin, int64_t end), void *arg,
                     gguf_error *err);

/* A buffer of at least n doubles in `slot` (0..FW_SCRATCH_SLOTS-1), kept
 * for the context's life and handed out again: for activations every block
 * needs anew (fresh ones cost a page fault per 4 KiB in every block and an
 * unmap after). Its contents are left over from the last use. NULL when out
 * of memory or for a bad slot. */
#define FW_SCRATCH_SLOTS 3
/* Slots 0 and 1: the FFN's gate and up rows; this one: a checkpoint's
 * dequantized rows (floats, at most 32 MiB), chunk after chunk. */
#define FW_SCRATCH_HF_ROWS 2
double *fw_exec_scratch(struct fw_exec *c, int slot, size_t n);

/* How tensors of the model's file are read when pages are dropped:
 * FW_SRC_AUTO probes the page cache on the first tensor of 1 MiB or more and
 * settles on FW_SRC_MAP (the mapping, windows mapped in and dropped) where
 * the file sits in large folios, or FW_SRC_READ (pread into per-thread
 * buffers) where it sits in small pages. Tests force one. */
enum { FW_SRC_AUTO = 0, FW_SRC_MAP = 1, FW_SRC_READ = 2 };
void fw_stream_set_source(fw_stream *s, int source);
int fw_stream_source(fw_stream *s);

/* y[t][o] = W[o] . x[t] (+ bias[o]) for rows [row0, row0 + n_rows) of file
 * tensor t (a matrix of rows t->ne[0] wide) and n_tok rows of x (xs apart),
 * into y (rows ys apart), exactly as fw_matmul over the dequantized rows
 * computes it, whatever the thread count. Counts the bytes read, the floats
 * dequantized and the buffers resident in c's statistics.
 * @return 0; GGUF_E_BAD_TYPE / GGUF_E_BAD_SHAPE for a tensor the dequant
 *         module refuses; GGUF_E_NOMEM; on the read path GGUF_E_IO (a read
 *         failed, sys_errno set) and GGUF_E_TRUNCATED (the file shrank after
 *         it was opened), naming the file, the tensor and the offset. */
int fw_stream_mm(struct fw_exec *c, double *y, int64_t ys, const double *x, int64_t xs,
                 const gguf_tensor *t, int64_t row0, int64_t n_rows, const float *bias,
                 int64_t n_tok, gguf_error *err);

#endif /* GGUF_FORWARD_STREAM_H */
