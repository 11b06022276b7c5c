/* Where the CPU executor's weights come from, and the two ops every weight
 * goes through (matmul, norm). Without a plan a weight is the file's tensor:
 * a matmul streams it (forward_stream.c: each thread dequantizes a cache-sized
 * block of its rows right before multiplying it, optionally dropping the
 * mapped pages after), so RSS stays a few blocks per thread. A model over
 * an HF checkpoint is dequantized (and put into GGUF layout) by
 * gguf_model_tensor_rows in chunks of at most 32 MiB of floats. With
 * a plan a weight is the rank's slice, materialized as floats by the shard
 * module, so every cut and every injected fault comes from the plan. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "util/error_lib.h"
#include "forward/forward_exec.h"

/* Most floats an HF checkpoint's matmul dequantizes at once (rows are grouped
 * up to this); GGUF tensors stream through forward_stream.c instead. */
#define FW_CHUNK_FLOATS (8u << 20) /* 32 MiB */
#include "forward/forward_stream.h"

static void note_resident(fw_exec *c, uint64_t floats)
{
    c->resident += floats * sizeof(float);
    if (c->resident > c->st.peak_weight_bytes)
        c->st.peak_weight_bytes = c->resident;
}

/* An HF checkpoint's rows on the pool: part i converts its contiguous share
 * of the rows (each row's conversion is the same whoever does it), with its
 * own status and error. */
typedef struct hf_rows_job {
    const gguf_model *m;
    const gguf_model_tensor *mt;
    float *buf;
    int64_t row0, n_rows, width;
    uint32_t flags;
    int *rc;
    uint64_t *bytes;
    gguf_error *errs;
} hf_rows_job;

static void hf_rows_part(void *arg, int part, int n_parts)
{
    const hf_rows_job *j = arg;
    const int64_t b = j->n_rows * part / n_parts, e = j->n_rows * (part + 1) / n_parts;
    if (e > b)
        j->rc[part] = gguf_model_tensor_rows(j->m, j->mt, j->row0 + b, e - b, j->buf + b * j->width,
                                             j->flags, &j->bytes[part], &j->errs[part]);
}

/* Rows [row0, row0+n_rows) of an HF checkpoint's weight into dst, counted as
 * resident weights: FP8 and NVFP4 conversions cost more than the matmul's
 * read of the floats, so they run on every thread (parts of at least 64 Ki
 * floats). */
static int rows_hf(fw_exec *c, const gguf_model_tensor *mt, int64_t row0, int64_t n_rows,
                   float *dst, gguf_error *err)
{
    const int64_t w = mt->t->ne[0];
    fw_pool *pool;
    int rc = fw_exec_pool(c, &pool, err);
    if (rc)
        return rc;
    int64_t parts = (n_rows * w) >> 16;
    if (parts > fw_pool_threads(pool))
        parts = fw_pool_threads(pool);
    if (parts > n_rows)
        parts = n_rows;
    if (parts < 1)
        parts = 1;
    int *rcs = calloc((size_t)parts, sizeof *rcs);
    uint64_t *bytes = calloc((size_t)parts, sizeof *bytes);
    gguf_error *errs = calloc((size_t)parts, sizeof *errs);
    if (!rcs || !bytes || !errs) {
        rc = fw_nomem(err, mt->t->name);
        goto done;
    }
    const uint32_t flags = c->s.o.drop_pages ? GGUF_MODEL_ROWS_DROP_PAGES : 0;
    hf_rows_job j = {c->s.m, mt, dst, row0, n_rows, w, flags, rcs, bytes, errs};
    fw_pool_run(pool, (int)parts, hf_rows_part, &j);
    uint64_t read = 0;
    for (int64_t i = 0; i < parts; i++) {
        if (rcs[i] && !rc) {
            rc = rcs[i];
            if (err)
                *err = errs[i];
        }
        read += bytes[i];
    }
    if (!rc) {
        c->st.weight_bytes += read;
        c->st.dequant_floats += (uint64_t)(n_rows * w);
        note_resident(c, (uint64_t)(n_rows * w));
    }
done:
    free(rcs);
    free(bytes);
    free(errs);
    return rc;
}

/* The same into a new buffer, as dequant(). */
static int dequant_hf(fw_exec *c, const gguf_model_tensor *mt, int64_t row0, int64_t n_rows,
                      float **out, gguf_error *err)
{
    float *buf = malloc((size_t)(n_rows * mt->t->ne[0]) * sizeof(float) + 1);
    if (!buf)
        return fw_nomem(err, mt->t->name);
    int rc = rows_hf(c, mt, row0, n_rows, buf, err);
    if (rc) {
        free(buf);
        return rc;
    }
    *out = buf;
    return 0;
}

/* Dequantize rows [row0, row0+n_rows) of a weight's stored tensor seen as a
 * matrix of ne[0] wide rows. The buffer counts as resident weights until
 * release(). */
static int dequant(fw_exec *c, const fw_w *fw, int64_t row0, int64_t n_rows, float **out,
                   gguf_error *err)
{
    if (fw->hf)
        return dequant_hf(c, fw->hf, row0, n_rows, out, err);
    const gguf_tensor *t = fw->t;
    uint64_t row_bytes;
    int rc = gguf_type_row_bytes(t->type, t->ne[0], &row_bytes);
    if (rc)
        return gguf_fail(err, rc, t->file_offset, "%s: bad row", t->name);
    float *buf = malloc((size_t)(n_rows * t->ne[0]) * sizeof(float) + 1);
    if (!buf)
        return fw_nomem(err, t->name);
    rc = gguf_dequant_rows(t->type, t->data + (uint64_t)row0 * row_bytes, 0, buf, t->ne[0], n_rows,
                           &c->dq, err);
    if (rc) {
        free(buf);
        return rc;
    }
    if (c->s.o.drop_pages && c->page > 0) {
        /* Read-only file mapping: dropped pages are read again on demand. Only
         * whole pages inside the range, so neighbours are never touched. */
        uintptr_t b = (uintptr_t)(t->data + (uint64_t)row0 * row_bytes);
        uintptr_t e = b + (uintptr_t)((uint64_t)n_rows * row_bytes);
        b = (b + c->page - 1) & ~(uintptr_t)(c->page - 1);
        e &= ~(uintptr_t)(c->page - 1);
        if (e > b)
            madvise((void *)b, e - b, MADV_DONTNEED);
    }
    c->st.weight_bytes += (uint64_t)n_rows * row_bytes;
    c->st.dequant_floats += (uint64_t)(n_rows * t->ne[0]);
    note_resident(c, (uint64_t)(n_rows * t->ne[0]));
    *out = buf;
    return 0;
}

static void release(fw_exec *c, float *buf, int64_t n_floats)
{
    if (!buf)
        return;
    c->resident -= (uint64_t)n_floats * sizeof(float);
    free(buf);
}

/* ------------------------------------------------------------ getting weights */

void fw_w_file(fw_exec *c, int64_t il, gguf_role role, fw_w *w)
{
    memset(w, 0, sizeof *w);
    const gguf_model_tensor *mt = gguf_model_get_info(c->s.m, il, role);
    if (!mt)
        return;
    const gguf_tensor *t = mt->t;
    w->t = t;
    w->hf = c->hf ? mt : NULL;
    for (int d = 0; d < 4; d++)
        w->ne[d] = t->ne[d] > 0 ? t->ne[d] : 1;
}

/* The index of a plan entry (the plan hands out pointers into its array). */
static int64_t plan_index(const gguf_shard_plan *p, const gguf_shard_tensor *e)
{
    int64_t idx = e - gguf_shard_plan_at(p, 0);
    if (idx >= 0 && idx < gguf_shard_plan_count(p) && gguf_shard_plan_at(p, idx) == e)
        return idx;
    for (idx = 0; idx < gguf_shard_plan_count(p); idx++)
        if (gguf_shard_plan_at(p, idx) == e)
            return idx;
    return -1;
}

int fw_w_get(fw_exec *c, int r, int64_t il, gguf_role role, fw_w *w, gguf_error *err)
{
    if (!c->plan) {
        fw_w_file(c, il, role, w);
        return 0;
    }
    memset(w, 0, sizeof *w);
    const gguf_shard_tensor *e = gguf_shard_plan_get(c->plan, il, role);
    if (!e)
        return 0;
    const gguf_shard_slice *s = &e->ranks[r];
    int64_t n = 1;
    for (int d = 0; d < 4; d++) {
        w->ne[d] = s->ne[d] > 0 ? s->ne[d] : 1;
        n *= w->ne[d];
    }
    w->f = malloc((size_t)n * sizeof(float) + 4);
    if (!w->f)
        return fw_nomem(err, e->name);
    int rc = gguf_shard_materialize(c->plan, plan_index(c->plan, e), r, w->f, (size_t)n, err);
    if (rc) {
        free(w->f);
        w->f = NULL;
        return rc;
    }
    w->own = true;
    w->e = e;
    c->st.weight_bytes += s->bytes;
    c->st.dequant_floats += (uint64_t)n;
    return 0;
}

void fw_w_release(fw_w *w)
{
    if (w->own)
        free(w->f);
    memset(w, 0, sizeof *w);
}

fw_w fw_w_sub(const fw_w *w, int64_t row0, int64_t n)
{
    fw_w s = *w;
    s.own = false;
    s.ne[1] = n;
    s.ne[2] = s.ne[3] = 1;
    if (w->t)
        s.row0 = w->row0 + row0;
    else
        s.f = w->f + row0 * w->ne[0];
    return s;
}

int fw_vec(fw_exec *c, const fw_w *w, int64_t want, float **out, gguf_error *err)
{
    *out = NULL;
    const int64_t have = w->t ? w->ne[0] : w->ne[0] * fw_w_rows(w);
    float *row = NULL;
    int rc;
    if (w->t) {
        if ((rc = dequant(c, w, w->row0, 1, &row, err)))
            return rc;
        if (have == want) {
            *out = row;
            return 0;
        }
    }
    float *v = calloc((size_t)(want > 0 ? want : 1), sizeof(float));
    if (!v) {
        release(c, row, have);
        return fw_nomem(err, "weight vector");
    }
    memcpy(v, row ? row : w->f, (size_t)(have < want ? have : want) * sizeof(float));
    release(c, row, have);
    note_resident(c, (uint64_t)want);
    *out = v;
    return 0;
}

void fw_vec_free(fw_exec *c, float *v, int64_t want)
{
    release(c, v, want);
}

int fw_w_floats(fw_exec *c, const fw_w *w, float **out, gguf_error *err)
{
    const int64_t rows = fw_w_rows(w);
    if (w->t)
        return dequant(c, w, w->row0, rows, out, err);
    float *v = malloc((size_t)(rows * w->ne[0]) * sizeof(float) + 1);
    if (!v)
        return fw_nomem(err, "weights");
    memcpy(v, w->f, (size_t)(rows * w->ne[0]) * sizeof(float));
    note_resident(c, (uint64_t)(rows * w->ne[0]));
    *out = v;
    return 0;
}

/* ------------------------------------------------------------ matmul, norms */

int fw_mm(fw_exec *c, double *y, int64_t ys, const double *x, int64_t xw, int64_t xs,
          const fw_w *w, const fw_w *bias, int64_t n_tok, gguf_error *err)
{
    const int64_t n_in = w->ne[0], n_out = fw_w_rows(w);
    if (ys == 0)
        ys = n_out; /* packed over the whole output, not over one chunk */
    if (xs == 0)
        xs = xw;
    const double *xx = x;
    double *tmp = NULL;
    int rc = 0;
    if (xw != n_in) {
        /* a broken plan: the widths disagree; use the common part */
        tmp = fw_xcalloc((size_t)(n_tok * n_in), sizeof(double));
        if (!tmp)
            return fw_nomem(err, "matmul");
        for (int64_t t = 0; t < n_tok; t++)
            memcpy(tmp + t * n_in, x + t * xs, (size_t)(xw < n_in ? xw : n_in) * sizeof(double));
        xx = tmp;
        xs = n_in;
    }
    float *b = NULL;
    if (bias && fw_w_has(bias) && (rc = fw_vec(c, bias, n_out, &b, err))) {
        free(tmp);
        return rc;
    }
    if (w->f) {
        fw_matmul(y, ys, xx, xs, w->f, b, n_in, n_out, n_tok, c->s.o.n_threads, c->s.prec);
    } else if (!w->hf) {
        /* dequantized a cache-sized block at a time on every thread */
        rc = fw_stream_mm(c, y, ys, xx, xs, w->t, w->row0, n_out, b, n_tok, err);
    } else {
        int64_t chunk = (int64_t)FW_CHUNK_FLOATS / n_in;
        if (chunk < 1)
            chunk = 1;
        /* one buffer kept by the context for every chunk: a fresh one would
         * cost a page fault and a zeroed page per 4 KiB of every chunk */
        const int64_t cap = (chunk < n_out ? chunk : n_out) * n_in;
        float *buf = (float *)fw_exec_scratch(c, FW_SCRATCH_HF_ROWS, (size_t)(cap / 2 + 1));
        if (!buf)
            rc = fw_nomem(err, "checkpoint rows");
        for (int64_t r = 0; r < n_out && !rc; r += chunk) {
            const int64_t nr = n_out - r < chunk ? n_out - r : chunk;
            if ((rc = rows_hf(c, w->hf, w->row0 + r, nr, buf, err)))
                break;
            fw_matmul(y + r, ys, xx, xs, buf, b ? b + r : NULL, n_in, nr, n_tok,
                      c->s.o.n_threads, c->s.prec);
            c->resident -= (uint64_t)(nr * n_in) * sizeof(float);
        }
    }
    if (b)
        fw_vec_free(c, b, n_out);
    free(tmp);
    return rc;
}

int fw_norm(fw_exec *c, double *y, const double *x, int64_t n_tok, int64_t width,
            int64_t stride, const fw_w *w, gguf_error *err)
{
    float *wf = NULL;
    int rc;
    if (w && fw_w_has(w) && (rc = fw_vec(c, w, width, &wf, err)))
        return rc;
    for (int64_t t = 0; t < n_tok; t++)
        fw_rmsnorm(y + t * stride, x + t * stride, wf, width, c->s.hp->rms_eps, c->s.prec);
    if (wf)
        fw_vec_free(c, wf, width);
    return 0;
}

int fw_norm_heads(fw_exec *c, double *x, int64_t n_tok, int64_t n_heads, int64_t hd,
                  int64_t stride, const fw_w *w, gguf_error *err)
{
    float *wf = NULL;
    int rc = fw_vec(c, w, hd, &wf, err);
    if (rc)
        return rc;
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t h = 0; h < n_heads; h++)
            fw_rmsnorm(x + t * stride + h * hd, x + t * stride + h * hd, wf, hd,
                       c->s.hp->rms_eps, c->s.prec);
    fw_vec_free(c, wf, hd);
    return 0;
}

/* ------------------------------------------------------------ captures, caches */

int fw_capture(fw_exec *c, int layer, gguf_capture_point p, int r, const double *data,
               int64_t width, int64_t n_tok, gguf_error *err)
{
    if (!c->s.o.capture)
        return 0;
    float *f = malloc((size_t)(width * n_tok) * sizeof(float) + 1);
    if (!f)
        return fw_nomem(err, "capture");
    for (int64_t i = 0; i < width * n_tok; i++)
        f[i] = (float)data[i];
    int rc = fw_emit(c->s.o.capture, c->s.o.capture_user, layer, p, fw_cap_rank(c, r), f, width,
                     n_tok, c->n_past, err);
    free(f);
    return rc;
}

static int grow(double **p, int64_t cap, int64_t w, gguf_error *err)
{
    double *q = realloc(*p, (size_t)(cap * (w > 0 ? w : 1)) * sizeof(double) + 8);
    if (!q)
        return fw_nomem(err, "KV cache");
    *p = q;
    return 0;
}

int fw_kv_reserve(fw_exec *c, int r, int64_t il, int64_t kw, int64_t vw, int64_t iw,
                  fw_kv **out, gguf_error *err)
{
    fw_kv *L = &c->kv[(int64_t)r * c->s.hp->n_layer + il];
    *out = L;
    if (L->k) {
        if (L->kw != kw || L->vw != vw || L->iw != iw)
            return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                             "forward: blk.%lld rank %d: the KV width changed between evals",
                             (long long)il, r);
        return 0;
    }
    L->kw = kw;
    L->vw = vw;
    L->iw = iw;
    int rc;
    if ((rc = grow(&L->k, c->cap, kw, err)) || (vw && (rc = grow(&L->v, c->cap, vw, err))) ||
        (iw && (rc = grow(&L->idx_k, c->cap, iw, err))))
        return rc;
    return 0;
}
