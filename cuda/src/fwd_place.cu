/*
 * A rank's shard slice built on the GPU (fs_materialize, fwd_stream.h): the
 * rows of each piece stream as quantized bytes and are dequantized and
 * placed on the device, where gguf_shard_materialize (shard_materialize.c)
 * dequantizes and places them on the host. The placement rules are that
 * function's, group of rows by group of rows, so injected faults come out
 * the same: a piece's rows for fixed (i2, i3) are one group; placed
 *   transposed   column by column from the piece's position (pos),
 *   cat_dim 0    row k at k * ne[0] + dst (k counts the piece's rows),
 *   otherwise    one after another from pos.
 */
#include "cuda_internal.h"

#include <stdlib.h>
#include <string.h>

#include "fwd_cuda_internal.h"
#include "fwd_stream.h"

typedef enum { FP_ROWS, FP_COLS0, FP_TRANSPOSE } fp_mode;

/* Where one group of rows goes. */
typedef struct fp_group {
    fp_mode mode;
    int64_t base;  /* float index of the group's first value in dst */
    int64_t lo0, w0, ld; /* columns [lo0, lo0 + w0) of rows ld wide */
    int64_t pitch; /* FP_COLS0: dst row width; FP_TRANSPOSE: the piece's w1 */
} fp_group;

typedef struct fp_arg {
    float *dst;
    const fp_group *g;
    cudaStream_t s;
} fp_arg;

static int fp_place(const float *w, int64_t i, int64_t r0, int64_t nr, void *arg, gguf_error *err)
{
    const fp_arg *a = (const fp_arg *)arg;
    const fp_group *g = &a->g[i];
    const size_t f = sizeof(float);
    switch (g->mode) {
    case FP_ROWS:
        GC_TRY(err, cudaMemcpy2DAsync(a->dst + g->base + r0 * g->w0, (size_t)g->w0 * f, w + g->lo0,
                                      (size_t)g->ld * f, (size_t)g->w0 * f, (size_t)nr,
                                      cudaMemcpyDeviceToDevice, a->s));
        break;
    case FP_COLS0:
        GC_TRY(err, cudaMemcpy2DAsync(a->dst + g->base + r0 * g->pitch, (size_t)g->pitch * f,
                                      w + g->lo0, (size_t)g->ld * f, (size_t)g->w0 * f,
                                      (size_t)nr, cudaMemcpyDeviceToDevice, a->s));
        break;
    case FP_TRANSPOSE:
        fk_place_t(a->dst + g->base + r0, w + g->lo0, nr, g->w0, g->ld, g->pitch, a->s);
        GC_TRY(err, cudaGetLastError());
        break;
    }
    return 0;
}

int fs_materialize(fs_streamer *s, const gguf_shard_plan *plan, int64_t idx, int r, float *dst,
                   int64_t n, const bool *keep, int64_t n_keep, gguf_error *err)
{
    if (!plan || idx < 0 || idx >= gguf_shard_plan_count(plan) || r < 0 ||
        r >= gguf_shard_plan_ranks(plan) || !dst)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "materialize: invalid argument");
    const gguf_shard_tensor *e = gguf_shard_plan_at(plan, idx);
    const gguf_shard_slice *sl = &e->ranks[r];
    const int cd = e->cat_dim < 0 ? 1 : e->cat_dim;
    int64_t inner = 1;
    for (int d = 0; d < cd; d++)
        inner *= sl->ne[d];
    const int64_t slab = sl->ne[0] * sl->ne[1] > 0 ? sl->ne[0] * sl->ne[1] : 1;
    int64_t n_groups = 0;
    for (int32_t k = 0; k < sl->n_pieces; k++) {
        const gguf_shard_piece *pc = &sl->pieces[k];
        if (pc->hi[2] > pc->lo[2] && pc->hi[3] > pc->lo[3])
            n_groups += (pc->hi[2] - pc->lo[2]) * (pc->hi[3] - pc->lo[3]);
    }
    fs_rows *req = (fs_rows *)malloc((size_t)(n_groups + 1) * sizeof *req);
    fp_group *g = (fp_group *)malloc((size_t)(n_groups + 1) * sizeof *g);
    if (!req || !g) {
        free(req);
        free(g);
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "materialize: out of memory");
    }
    int64_t m = 0;
    int rc = 0;
    for (int32_t k = 0; k < sl->n_pieces && !rc; k++) {
        const gguf_shard_piece *pc = &sl->pieces[k];
        const gguf_shard_tensor *src = gguf_shard_plan_at(plan, pc->src);
        if (!src || !src->t || !src->t->data) {
            rc = gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                           "materialize: %s has no data (header-only model)",
                           src ? src->name : "?");
            break;
        }
        const int64_t ne0 = src->ne[0], w0 = pc->hi[0] - pc->lo[0], w1 = pc->hi[1] - pc->lo[1];
        int64_t pos = pc->dst * (cd == 0 ? 1 : inner), row_k = 0;
        for (int64_t i3 = pc->lo[3]; i3 < pc->hi[3] && !rc; i3++)
            for (int64_t i2 = pc->lo[2]; i2 < pc->hi[2] && !rc; i2++) {
                fp_group q = {FP_ROWS, pos, pc->lo[0], w0, ne0, 0};
                int64_t end = pos + w1 * w0; /* one past the last value written */
                if (pc->transpose) {
                    q.mode = FP_TRANSPOSE;
                    q.pitch = w1;
                } else if (cd == 0) {
                    q.mode = FP_COLS0;
                    q.base = row_k * sl->ne[0] + pc->dst;
                    q.pitch = sl->ne[0];
                    end = w1 > 0 ? (row_k + w1 - 1) * sl->ne[0] + pc->dst + w0 : q.base;
                    row_k += w1;
                } else {
                    pos += w1 * w0;
                }
                if (w0 < 1 || w1 < 1)
                    continue;
                if (pc->lo[0] < 0 || pc->hi[0] > ne0 || q.base < 0 || end > n) {
                    rc = gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                                   "materialize: %s rank %d: a piece of %s falls outside the "
                                   "slice (%lld floats)",
                                   e->name, r, src->name, (long long)n);
                    break;
                }
                const int64_t sb = q.base / slab;
                if (keep && !pc->transpose && sb < n_keep && !keep[sb])
                    continue; /* an expert no token routes to: never moved */
                req[m].t = src->t;
                req[m].row0 = pc->lo[1] + src->ne[1] * (i2 + src->ne[2] * i3);
                req[m].n_rows = w1;
                g[m++] = q;
            }
    }
    if (!rc) {
        fp_arg a = {dst, g, fs_compute_stream(s)};
        rc = fs_stream(s, req, m, fp_place, &a, err);
    }
    free(req);
    free(g);
    return rc;
}
