/*
 * The weight streamer of the GPU forward pass (fwd_gpu.h):
 * rows of quantized tensors from the file's mmap to dequantized f32 rows in
 * device memory, through three staging buffers, overlapping the host's
 * gather, the host-to-device copy and the GPU's work. Not installed.
 *
 * A request lists runs of rows (of one or several tensors). It is first cut
 * into chunks: consecutive runs of one type packed up to the chunk's size, so
 * the routed experts of an MoE layer travel as a few large copies, not one
 * small copy per expert. Chunks are staged in three buffers in turn, after
 * each other in a buffer while they fit (a norm weight does not take a whole
 * buffer); a chunk that starts buffer b is "fresh". Per chunk j in buffer b:
 *
 *   host team:    if fresh, wait h2d_done[b] (the buffer's last copy); gather
 *                 the runs' bytes from the mmap into pinned[b] at the chunk's
 *                 offset (worker threads, with non-temporal stores)
 *   host:         wait for the gather; copy stream: if fresh, wait
 *                 consumed[b]; pinned -> raw (a registered mapping: mmap ->
 *                 raw, one batched copy); record h2d_done[b]; start the
 *                 gather of chunk j + 1; compute stream: wait h2d_done[b];
 *                 dequantize into wbuf (one launch); the caller's function
 *                 for the chunk's parts; record consumed[b]
 *
 * so the workers gather one chunk while the copy engine moves another and
 * the GPU works on what arrived: transfers overlap compute across matmuls,
 * tensors and layers alike. After an idle spell (a sync for MoE routing) a
 * request's chunks start small and double, so the copy engine starts early.
 */
#ifndef GGUFKIT_FWD_STREAM_H
#define GGUFKIT_FWD_STREAM_H

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

#include "gguf/error.h"
#include "gguf/file.h"
#include "gguf/model.h"
#include "gguf/shard.h"

/* Rows [row0, row0 + n_rows) of t, counted over ne[1]*ne[2]*ne[3] rows of
 * ne[0] elements. */
typedef struct fs_rows {
    const gguf_tensor *t;
    int64_t row0, n_rows;
} fs_rows;

/* Called for each part of request entry i that landed in one chunk: w holds
 * its rows [r0, r0 + nr) (relative to the entry's row0) dequantized, nr rows
 * of t->ne[0] floats in device memory, valid for work queued on the compute
 * stream before the function returns. */
typedef int (*fs_rows_fn)(const float *w, int64_t i, int64_t r0, int64_t nr, void *arg,
                          gguf_error *err);

/* A part of request entry i in a chunk: its rows [r0, r0 + nr) at
 * float_off of the chunk's dequantized rows. Parts come in request order. */
typedef struct fs_part {
    int64_t i, r0, nr;
    int64_t float_off;
} fs_part;

/* Called once per chunk with its n parts (w: the chunk's dequantized rows,
 * valid as for fs_rows_fn): a caller that can treat several parts in one
 * launch (the experts of an MoE layer) does so here. */
typedef int (*fs_chunk_fn)(const float *w, const fs_part *parts, int n, void *arg,
                           gguf_error *err);

/* Figures summed over a streamer's life. */
typedef struct fs_stats {
    uint64_t bytes;      /* quantized bytes copied to the GPU */
    uint64_t floats;     /* elements dequantized */
    uint64_t chunks;
    double copy_seconds; /* host time gathering into pinned buffers */
    double wait_seconds; /* host time waiting for a pinned buffer to be free */
    double issue_seconds; /* host time queueing the dequant and the callers' work */
    uint64_t direct_bytes; /* of bytes: read in place from registered mappings */
    uint64_t registered_bytes;
    double register_seconds;
} fs_stats;

typedef struct fs_streamer fs_streamer;

/* Staging on the current device for work on `compute`: 3 x chunk_bytes of
 * pinned and raw device memory, chunk_floats floats of dequantized rows, a
 * copy stream and n_threads host copy threads. drop_pages: drop the mmap's
 * pages of each chunk once they are in pinned memory (MADV_DONTNEED).
 * @return 0; GGUF_E_NOMEM; the mapped CUDA error. */
int fs_create(fs_streamer **out, cudaStream_t compute, size_t chunk_bytes, int64_t chunk_floats,
              int n_threads, bool drop_pages, gguf_error *err);
/* Waits for queued work; accepts NULL. */
void fs_free(fs_streamer *s);

/* Stream the n entries of req in order; fn is called for every part, in
 * order. Returns when every chunk has been handed to the GPU.
 * @return 0; GGUF_E_BAD_TYPE for a type the GPU cannot dequantize;
 *         GGUF_E_UNSUPPORTED for a row larger than a chunk; fn's code. */
int fs_stream(fs_streamer *s, const fs_rows *req, int64_t n, fs_rows_fn fn, void *arg,
              gguf_error *err);
/* The same, fn called once per chunk. */
int fs_stream_chunks(fs_streamer *s, const fs_rows *req, int64_t n, fs_chunk_fn fn, void *arg,
                     gguf_error *err);

/*
 * Register the mappings of m's files with CUDA (cudaHostRegister, read-only):
 * the copy engine then reads the page cache in place and the host's gather
 * goes away. mode: 0 auto (only when the files fit in half the RAM: locking
 * reads every page and keeps it resident, whatever drop_pages says), 1
 * always (an error when CUDA refuses), -1 never. In auto a refused file is
 * gathered.
 * Unregistered by fs_free.
 */
int fs_register_model(fs_streamer *s, const gguf_model *m, int mode, gguf_error *err);

fs_stats fs_get_stats(const fs_streamer *s);
/* The compute stream given to fs_create. */
cudaStream_t fs_compute_stream(const fs_streamer *s);
/* Device bytes of dequantized rows the streamer holds. */
uint64_t fs_resident_bytes(const fs_streamer *s);

/*
 * Rank r's slice of plan entry idx into dst (device, n floats, zeroed by the
 * caller), on the GPU: what gguf_shard_materialize does on the host, the
 * pieces' rows streamed and placed (transposed where the piece says). keep,
 * when not NULL, has n_keep flags over the slice's slabs of ne[0]*ne[1]
 * floats (the local experts of an expert tensor): rows landing in a slab not
 * kept are not moved (they stay zero).
 */
int fs_materialize(fs_streamer *s, const gguf_shard_plan *plan, int64_t idx, int r, float *dst,
                   int64_t n, const bool *keep, int64_t n_keep, gguf_error *err);

#endif
