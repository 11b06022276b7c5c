/* FFN of the GPU executor (fwd_gpu.h), one GPU and a rank alike: dense
 * SwiGLU, and MoE with the router logits on the GPU, the CPU's routing
 * (fw_moe_route) on host threads, the routed experts this executor owns as
 * one (padded, batched) GEMM per chunk of experts, and the shared experts.
 *
 * One GPU streams only the experts some token routes to, packed into few
 * large chunks (fwd_stream.h); a rank builds its slices of the expert
 * tensors with only those experts moved (fs_materialize) and runs the same
 * GEMMs over them. */
#include "cuda_internal.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "fwd_common.h"
#include "fwd_cuda_internal.h"
#include "fwd_gpu.h"

/* ------------------------------------------------------------ dense */

int gx_ffn_dense(gx *c, int64_t il, gguf_role rg, gguf_role ru, gguf_role rd, const float *x,
                 int64_t n, float *out, bool *reduce, gguf_error *err)
{
    const int64_t E = c->hp->n_embd;
    gx_w g, u, d;
    memset(&g, 0, sizeof g);
    u = d = g;
    float *hg = NULL, *hu = NULL;
    int rc;
    if ((rc = gx_get(c, il, rg, &g, 0, NULL, 0, err)) ||
        (rc = gx_get(c, il, ru, &u, 0, NULL, 0, err)) ||
        (rc = gx_get(c, il, rd, &d, 0, NULL, 0, err)) || (rc = gx_need(&g, il, rg, err)) ||
        (rc = gx_need(&u, il, ru, err)) || (rc = gx_need(&d, il, rd, err)))
        goto done;
    if (gx_rows(&g) != gx_rows(&u)) {
        rc = gguf_fail(err, GGUF_E_BAD_SHAPE, GGUF_NO_OFFSET,
                       "cuda forward: blk.%lld rank %d: gate and up slices differ",
                       (long long)il, c->r);
        goto done;
    }
    *reduce = d.e ? d.e->reduce_sum : false;
    {
        /* down ne = [ff', E]: ff' != ff only under a broken plan (gx_mm
         * takes the common part) */
        const int64_t ff = gx_rows(&g);
        if (!(rc = gx_alloc(c, &hg, (size_t)(n * ff) * sizeof(float), err)) &&
            !(rc = gx_alloc(c, &hu, (size_t)(n * ff) * sizeof(float), err)) &&
            !(rc = gx_mm(c, hg, ff, x, E, &g, NULL, n, err)) &&
            !(rc = gx_mm(c, hu, ff, x, E, &u, NULL, n, err))) {
            fk_swiglu(hg, hu, n * ff, c->ks);
            rc = gx_mm(c, out, E, hg, ff, &d, NULL, n, err);
        }
    }
done:
    gx_dfree(c, hg);
    gx_dfree(c, hu);
    gx_release(c, &g);
    gx_release(c, &u);
    gx_release(c, &d);
    return rc;
}

/* ------------------------------------------------------------ routing */

/* An MoE layer's routing on the host, token runs spread over the route pool.
 * The job is handed to the pool before the router logits are there: part 0
 * (the calling thread) waits for the GPU and then raises `ready`, the other
 * parts spin until it is raised. So the workers wake while the GPU still
 * computes the attention and the router, and the wake-up is off the layer's
 * critical path (from the logits' arrival to the experts' first copy the
 * copy engine idles). Each token is routed by fw_moe_route alone: the same
 * bits on any number of threads. */
typedef struct gx_route_job {
    gx *c;
    const fw_moe_cfg *cfg;
    double *logits; /* n x ne, filled from c->hlog */
    const float *bias;
    int64_t *ids;
    double *wts, *scr; /* scr: scr_n doubles per part */
    int64_t n, ne, nu, scr_n;
    int ready; /* 0 waiting, 1 the logits are there, -1 the wait failed */
    cudaError_t e;
    double t_ready; /* when they arrived */
} gx_route_job;

static void gx_spin(unsigned i)
{
    if (i % 64 == 63) {
        sched_yield(); /* more threads than free cores must still progress */
        return;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void gx_route_part(void *arg, int part, int n_parts)
{
    gx_route_job *j = (gx_route_job *)arg;
    if (part == 0) {
        const double t0 = gx_now();
        j->e = cudaStreamSynchronize(j->c->ks);
        j->t_ready = gx_now();
        j->c->xf.host_sync_seconds += j->t_ready - t0;
        __atomic_store_n(&j->ready, j->e == cudaSuccess ? 1 : -1, __ATOMIC_RELEASE);
    } else {
        for (unsigned i = 0; !__atomic_load_n(&j->ready, __ATOMIC_ACQUIRE); i++)
            gx_spin(i);
    }
    if (__atomic_load_n(&j->ready, __ATOMIC_ACQUIRE) < 0)
        return;
    const int64_t ne = j->ne, nu = j->nu;
    double *scr = j->scr + part * j->scr_n;
    for (int64_t t = j->n * part / n_parts; t < j->n * (part + 1) / n_parts; t++) {
        for (int64_t e = 0; e < ne; e++)
            j->logits[t * ne + e] = j->c->hlog[t * ne + e];
        fw_moe_route(j->cfg, j->logits + t * ne, j->bias, j->ids + t * nu, j->wts + t * nu, scr,
                     GGUF_FWD_F32);
    }
}

/* The least tokens a routing part takes (one token is ~3 us of routing on
 * one core; the workers are already awake when the logits arrive). */
#define GX_ROUTE_TOKENS 4

/* The most device memory that padding the routed experts' rows may add
 * (one batched GEMM per chunk instead of one GEMM per expert). */
#define GX_PAD_BYTES ((uint64_t)256 << 20)

/* Router logits on the GPU into c->hlog (pinned, copied back on the
 * stream: not there until the stream is synchronized). */
static int gx_router_logits(gx *c, int64_t il, const float *x, int64_t n, float **dlog,
                            gguf_error *err)
{
    const int64_t E = c->hp->n_embd, ne = c->hp->n_expert;
    gx_w gi;
    int rc;
    if ((rc = gx_get(c, il, GGUF_ROLE_FFN_GATE_INP, &gi, 0, NULL, 0, err)) ||
        (rc = gx_need(&gi, il, GGUF_ROLE_FFN_GATE_INP, err)) ||
        (rc = gx_alloc(c, dlog, (size_t)(n * ne) * sizeof(float), err)) ||
        (rc = gx_mm(c, *dlog, ne, x, E, &gi, NULL, n, err)))
        goto done;
    if (c->hlog_n < (size_t)(n * ne)) {
        cudaFreeHost(c->hlog);
        c->hlog = NULL;
        c->hlog_n = 0;
        GC_GOTO(err, cudaHostAlloc((void **)&c->hlog, (size_t)(n * ne) * sizeof(float),
                                   cudaHostAllocDefault));
        c->hlog_n = (size_t)(n * ne);
    }
    GC_GOTO(err, cudaMemcpyAsync(c->hlog, *dlog, (size_t)(n * ne) * sizeof(float),
                                 cudaMemcpyDeviceToHost, c->ks));
done:
    gx_release(c, &gi);
    return rc;
}

/* ------------------------------------------------------------ routed experts */

/* The GEMMs of routed experts, chunk by chunk: entry i (a slot) multiplies
 * n_tok_of[i] rows of x from x_off[i] into y from y_off[i]. With pad > 0
 * every slot owns pad rows (y_off, x_off pad rows apart): whole experts that
 * follow each other in the weights are one strided batched GEMM over pad
 * rows each; a part of an expert (cut at a chunk's end), and every expert
 * when pad is 0, is a GEMM of its own. */
typedef struct gx_moe_arg {
    cublasHandle_t blas;
    float *y;
    int64_t ys;
    const float *x;
    int64_t xs;
    int64_t n_in, pad;
    const int64_t *y_off, *x_off, *n_tok_of;
} gx_moe_arg;

static int gx_moe_chunk(const float *w, const fs_part *p, int n, void *arg, gguf_error *err)
{
    const gx_moe_arg *a = (const gx_moe_arg *)arg;
    const float one = 1.0f, zero = 0.0f;
    for (int k = 0; k < n;) {
        /* parts k .. k + run - 1: whole experts, slots and weights in a row */
        const int64_t full = p[k].r0 == 0 ? p[k].nr : 0;
        int run = 1;
        if (a->pad > 0 && full > 0)
            while (k + run < n && p[k + run].i == p[k].i + run && p[k + run].r0 == 0 &&
                   p[k + run].nr == full &&
                   p[k + run].float_off == p[k].float_off + run * full * a->n_in)
                run++;
        const float *x = a->x + a->x_off[p[k].i];
        float *y = a->y + a->y_off[p[k].i] + p[k].r0;
        cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
        if (run > 1)
            s = cublasSgemmStridedBatched(a->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)full,
                                          (int)a->pad, (int)a->n_in, &one, w + p[k].float_off,
                                          (int)a->n_in, (long long)(full * a->n_in), x,
                                          (int)a->xs, (long long)(a->pad * a->xs), &zero, y,
                                          (int)a->ys, (long long)(a->pad * a->ys), run);
        else if (a->n_tok_of[p[k].i] > 0)
            s = cublasSgemm(a->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)p[k].nr,
                            (int)a->n_tok_of[p[k].i], (int)a->n_in, &one, w + p[k].float_off,
                            (int)a->n_in, x, (int)a->xs, &zero, y, (int)a->ys);
        if (s != CUBLAS_STATUS_SUCCESS)
            return fwd_blas_fail(err, s, "routed experts");
        k += run;
    }
    return 0;
}

/* The routed experts this executor owns and how their weights arrive:
 * experts [first, first + n_own); rows of gate/up per expert ff, of down's
 * input fd; one GPU streams the file's rows, a rank has its slices. */
typedef struct gx_experts {
    int64_t first, n_own, ff, fd;
    gx_w g, u, d; /* a rank's slices (kept experts only) */
} gx_experts;

static void gx_experts_own(const gx *c, int64_t il, gx_experts *x)
{
    const gguf_hparams *hp = c->hp;
    memset(x, 0, sizeof *x);
    if (!c->plan) {
        x->n_own = hp->n_expert;
        x->ff = x->fd = hp->n_ff_exp;
        return;
    }
    int64_t end;
    gguf_shard_plan_experts(c->plan, c->r, &x->first, &end);
    const gguf_shard_slice *g =
        &gguf_shard_plan_get(c->plan, il, GGUF_ROLE_FFN_GATE_EXPS)->ranks[c->r];
    const gguf_shard_slice *d =
        &gguf_shard_plan_get(c->plan, il, GGUF_ROLE_FFN_DOWN_EXPS)->ranks[c->r];
    /* a slice holding fewer experts than the rank owns (a broken plan)
     * leaves the rest out, as the CPU does */
    const int64_t ng = g->ne[2] > 0 ? g->ne[2] : 1, nd = d->ne[2] > 0 ? d->ne[2] : 1;
    x->n_own = end - x->first;
    if (x->n_own > ng)
        x->n_own = ng;
    if (x->n_own > nd)
        x->n_own = nd;
    if (x->n_own < 0)
        x->n_own = 0;
    x->ff = g->ne[1] > 0 ? g->ne[1] : 1;
    x->fd = d->ne[0] > 0 ? d->ne[0] : 1;
}

static bool gx_owns(const gx_experts *x, int64_t e)
{
    return e >= x->first && e < x->first + x->n_own;
}

/* Rows of the routed experts, expert by expert (the CPU's order): slot j
 * (the j-th expert some token routes to) has ntok[j] rows from row
 * base / E. Padded, every slot has P rows (the most tokens of any
 * expert; the rest zeros), so that the whole experts of a chunk are one
 * strided batched GEMM; packed, the slots follow each other and every
 * expert is its own GEMM. Padding wins unless it multiplies the rows: a
 * GEMM launch costs the host about what the GPU spends on 128 rows of these
 * GEMMs. The pads' memory is bounded too: GX_PAD_BYTES at most, and a
 * quarter of what a --gpu-mem-limit leaves. */
typedef struct gx_layout {
    int64_t nx;        /* slots: experts with tokens */
    int64_t rows_n;    /* rows in the layout (pads included) */
    int64_t pad;       /* P when padded, else 0 */
    int64_t *slot_e;   /* the expert of each slot */
    int64_t *slot_row; /* its first row */
    int64_t *ntok;     /* its tokens */
    int32_t *rows;     /* rows_n: row -> token (-1: a pad), then per token its nu rows
                          and nu weights (float bits) in expert order */
} gx_layout;

static void gx_layout_free(gx_layout *l)
{
    free(l->slot_e);
    free(l->rows);
    memset(l, 0, sizeof *l);
}

static int gx_layout_build(gx *c, const gx_experts *x, const int64_t *ids, const double *wts,
                           int64_t n, gx_layout *l, gguf_error *err)
{
    const gguf_hparams *hp = c->hp;
    const int64_t E = hp->n_embd, ne = hp->n_expert, nu = hp->n_expert_used;
    memset(l, 0, sizeof *l);
    int64_t *start = (int64_t *)calloc((size_t)(ne + 1), sizeof(int64_t));
    int64_t *base = (int64_t *)malloc((size_t)(ne + nu + 1) * sizeof(int64_t));
    l->slot_e = (int64_t *)malloc((size_t)(3 * ne + 1) * sizeof(int64_t));
    if (!start || !base || !l->slot_e) {
        free(start);
        free(base);
        gx_layout_free(l);
        return fw_nomem(err, "MoE rows");
    }
    l->slot_row = l->slot_e + ne;
    l->ntok = l->slot_e + 2 * ne;
    /* tokens per expert, then where each expert's rows start */
    for (int64_t i = 0; i < n * nu; i++)
        if (ids[i] >= 0 && ids[i] < ne && gx_owns(x, ids[i]))
            start[ids[i] + 1]++;
    int64_t P = 0, nx = 0;
    for (int64_t e = 0; e < ne; e++) {
        P = start[e + 1] > P ? start[e + 1] : P;
        nx += start[e + 1] > 0;
        start[e + 1] += start[e];
    }
    const int64_t m = start[ne];
    const uint64_t row_bytes = (uint64_t)(2 * E + 2 * x->ff) * sizeof(float);
    uint64_t room = GX_PAD_BYTES;
    if (c->mem_limit) {
        const uint64_t held = c->mem_fixed + c->mem_used + (uint64_t)(m + 1) * row_bytes;
        const uint64_t left = c->mem_limit > held ? c->mem_limit - held : 0;
        /* a quarter of it: the pool's free blocks of other sizes count
         * against the device too */
        room = left / 4 < room ? left / 4 : room;
    }
    const bool padded = c->moe_pad && nx * P <= m + 128 * nx &&
                        (uint64_t)(nx * P - m) * row_bytes <= room;
    l->pad = padded ? P : 0;
    l->rows_n = padded ? nx * P : m;
    l->rows = (int32_t *)malloc((size_t)(l->rows_n + 2 * n * nu + 1) * sizeof(int32_t));
    if (!l->rows) {
        free(start);
        free(base);
        gx_layout_free(l);
        return fw_nomem(err, "MoE rows");
    }
    int32_t *trow = l->rows + l->rows_n, *tw = trow + n * nu;
    for (int64_t i = 0; i < l->rows_n; i++)
        l->rows[i] = -1;
    nx = 0;
    for (int64_t e = 0; e < ne; e++) {
        const int64_t me = start[e + 1] - start[e];
        base[e] = padded ? nx * P : start[e];
        if (me == 0)
            continue; /* never routed to: never moved */
        l->slot_e[nx] = e;
        l->slot_row[nx] = base[e];
        l->ntok[nx] = me;
        nx++;
    }
    l->nx = nx;
    /* token by token (an expert's rows in token order), each token's
     * entries then sorted by expert (nu is small) */
    int64_t *te = base + ne; /* the token's experts so far, sorted */
    for (int64_t t = 0; t < n; t++) {
        int64_t got = 0;
        for (int64_t k = 0; k < nu; k++) {
            const int64_t e = ids[t * nu + k];
            trow[t * nu + k] = -1;
            memset(&tw[t * nu + k], 0, sizeof *tw);
            if (e < 0 || e >= ne || !gx_owns(x, e))
                continue;
            const int64_t r = base[e]++;
            const float wv = (float)wts[t * nu + k];
            l->rows[r] = (int32_t)t;
            int64_t j = got++;
            for (; j > 0 && te[j - 1] > e; j--) { /* a larger expert moves up */
                trow[t * nu + j] = trow[t * nu + j - 1];
                tw[t * nu + j] = tw[t * nu + j - 1];
                te[j] = te[j - 1];
            }
            trow[t * nu + j] = (int32_t)r;
            memcpy(&tw[t * nu + j], &wv, sizeof wv);
            te[j] = e;
        }
    }
    free(start);
    free(base);
    return 0;
}

/* The GEMMs of one expert tensor (`rows` rows per expert) over the layout's
 * slots: the routed experts' rows streamed from the file in one request
 * (one GPU: they travel packed into few chunks), or over a rank's slice
 * (expert e's slab at (e - first) * rows * n_in floats). */
static int gx_moe_gemms(gx *c, int64_t il, const gx_experts *x, const gx_layout *l,
                        gguf_role role, const gx_w *slice, int64_t rows, const gx_moe_arg *a,
                        gguf_error *err)
{
    if (l->nx < 1)
        return 0;
    if (c->plan) {
        fs_part *parts = (fs_part *)malloc((size_t)l->nx * sizeof *parts);
        if (!parts)
            return fw_nomem(err, "MoE");
        for (int64_t j = 0; j < l->nx; j++) {
            parts[j].i = j;
            parts[j].r0 = 0;
            parts[j].nr = rows;
            parts[j].float_off = (l->slot_e[j] - x->first) * rows * a->n_in;
        }
        int rc = gx_moe_chunk(slice->d, parts, (int)l->nx, (void *)a, err);
        free(parts);
        return rc;
    }
    const gguf_tensor *t = gguf_model_get(c->m, il, role);
    fs_rows *req = (fs_rows *)malloc((size_t)l->nx * sizeof *req);
    if (!req)
        return fw_nomem(err, "MoE");
    for (int64_t j = 0; j < l->nx; j++) {
        req[j].t = t;
        req[j].row0 = l->slot_e[j] * rows;
        req[j].n_rows = rows;
    }
    int rc = fs_stream_chunks(c->fs, req, l->nx, gx_moe_chunk, (void *)a, err);
    free(req);
    return rc;
}

/* A rank's slices of the three expert tensors, only the experts some token
 * routes to moved. */
static int gx_experts_fetch(gx *c, int64_t il, gx_experts *x, const gx_layout *l,
                            gguf_error *err)
{
    if (!c->plan)
        return 0;
    const int64_t ne = c->hp->n_expert;
    bool *keep = (bool *)calloc((size_t)ne + 1, sizeof(bool));
    if (!keep)
        return fw_nomem(err, "MoE");
    for (int64_t j = 0; j < l->nx; j++)
        keep[l->slot_e[j] - x->first] = true;
    int rc;
    if (!(rc = gx_get(c, il, GGUF_ROLE_FFN_GATE_EXPS, &x->g, 0, keep, ne, err)) &&
        !(rc = gx_get(c, il, GGUF_ROLE_FFN_UP_EXPS, &x->u, 0, keep, ne, err)))
        rc = gx_get(c, il, GGUF_ROLE_FFN_DOWN_EXPS, &x->d, 0, keep, ne, err);
    free(keep);
    return rc;
}

static void gx_experts_release(gx *c, gx_experts *x)
{
    gx_release(c, &x->g);
    gx_release(c, &x->u);
    gx_release(c, &x->d);
}

/* The routed experts' output into routed: gather the rows, gate and up,
 * SwiGLU, down, combined token by token (experts in the CPU's order). */
static int gx_routed(gx *c, int64_t il, gx_experts *x, const gx_layout *l, const float *in,
                     int64_t n, float *routed, double t_route, gguf_error *err)
{
    const int64_t E = c->hp->n_embd, nu = c->hp->n_expert_used, R = l->rows_n;
    const int64_t ff = x->ff, fd = x->fd;
    float *xs = NULL, *ys = NULL, *hg = NULL, *hu = NULL, *hd = NULL;
    int32_t *drows = NULL;
    int64_t *off = (int64_t *)malloc((size_t)(3 * l->nx + 1) * sizeof(int64_t));
    int64_t *off_e = off, *off_g = off ? off + l->nx : NULL, *off_d = off ? off + 2 * l->nx : NULL;
    int rc = 0;
    if (!off)
        return fw_nomem(err, "MoE");
    for (int64_t j = 0; j < l->nx; j++) {
        off_e[j] = l->slot_row[j] * E;
        off_g[j] = l->slot_row[j] * ff;
        off_d[j] = l->slot_row[j] * fd;
    }
    if ((rc = gx_experts_fetch(c, il, x, l, err)) ||
        (rc = gx_alloc(c, &drows, (size_t)(R + 2 * n * nu + 1) * sizeof(int32_t), err)) ||
        (rc = gx_alloc(c, &xs, (size_t)((R + 1) * E) * sizeof(float), err)) ||
        (rc = gx_alloc(c, &ys, (size_t)((R + 1) * E) * sizeof(float), err)) ||
        (rc = gx_alloc(c, &hg, (size_t)((R + 1) * ff) * sizeof(float), err)) ||
        (rc = gx_alloc(c, &hu, (size_t)((R + 1) * ff) * sizeof(float), err)))
        goto done;
    /* pageable: staged before the call returns, so the layout may be freed */
    GC_GOTO(err, cudaMemcpyAsync(drows, l->rows, (size_t)(R + 2 * n * nu) * sizeof(int32_t),
                                 cudaMemcpyHostToDevice, c->ks));
    /* every routed row's input, expert by expert */
    fk_gather(xs, in, drows, R, E, c->ks);
    c->st.experts_loaded += (uint64_t)l->nx;
    c->xf.host_route_seconds += gx_now() - t_route;
    {
        const gx_moe_arg ag = {c->blas, hg, ff, xs, E, E, l->pad, off_g, off_e, l->ntok};
        gx_moe_arg au = ag;
        au.y = hu;
        if ((rc = gx_moe_gemms(c, il, x, l, GGUF_ROLE_FFN_GATE_EXPS, &x->g, ff, &ag, err)) ||
            (rc = gx_moe_gemms(c, il, x, l, GGUF_ROLE_FFN_UP_EXPS, &x->u, ff, &au, err)))
            goto done;
    }
    fk_swiglu(hg, hu, R * ff, c->ks);
    if (fd != ff) { /* a broken plan: the common part of the hidden rows */
        if ((rc = gx_zalloc(c, &hd, (size_t)((R + 1) * fd) * sizeof(float), err)))
            goto done;
        GC_GOTO(err, cudaMemcpy2DAsync(hd, (size_t)fd * sizeof(float), hg,
                                       (size_t)ff * sizeof(float),
                                       (size_t)(ff < fd ? ff : fd) * sizeof(float), (size_t)R,
                                       cudaMemcpyDeviceToDevice, c->ks));
    }
    {
        const gx_moe_arg ad = {c->blas, ys, E, hd ? hd : hg, fd, fd, l->pad, off_e,
                               hd ? off_d : off_g, l->ntok};
        if ((rc = gx_moe_gemms(c, il, x, l, GGUF_ROLE_FFN_DOWN_EXPS, &x->d, E, &ad, err)))
            goto done;
    }
    fk_moe_combine(routed, ys, drows + R, (const float *)(const void *)(drows + R + n * nu), n,
                   nu, E, NULL, c->ks);
    GC_GOTO(err, cudaGetLastError());
done:
    gx_dfree(c, xs);
    gx_dfree(c, ys);
    gx_dfree(c, hg);
    gx_dfree(c, hu);
    gx_dfree(c, hd);
    gx_dfree(c, drows);
    free(off);
    return rc;
}

/* ------------------------------------------------------------ the layer */

/* Routing of the n tokens on the route pool (see gx_route_part); the
 * experts' ids and weights into ids/wts, captured. *t_route: when the
 * router logits arrived. */
static int gx_route(gx *c, int64_t il, int64_t n, int64_t *ids, double *wts, double *t_route,
                    gguf_error *err)
{
    const gguf_hparams *hp = c->hp;
    const int64_t ne = hp->n_expert, nu = hp->n_expert_used;
    const int64_t scr_n = 2 * ne + hp->n_group + 2;
    int n_parts = n > 0 ? (int)((n + GX_ROUTE_TOKENS - 1) / GX_ROUTE_TOKENS) : 1;
    if (n_parts > fw_pool_threads(c->route_pool))
        n_parts = fw_pool_threads(c->route_pool);
    double *logits = (double *)malloc((size_t)(n * ne) * sizeof(double) + 1);
    double *scr = (double *)malloc((size_t)(n_parts * scr_n) * sizeof(double));
    float *bias = NULL, *cap = NULL;
    gx_w bt;
    memset(&bt, 0, sizeof bt);
    int rc = 0;
    if (!logits || !scr) {
        rc = fw_nomem(err, "MoE");
        goto done;
    }
    /* the selection bias is on the host: ready before the logits are */
    if (c->rt.use_exp_probs_b &&
        ((rc = gx_get(c, il, GGUF_ROLE_FFN_EXP_PROBS_B, &bt, GX_HOST, NULL, 0, err)) ||
         (rc = gx_host_vec(c, &bt, ne, &bias, err))))
        goto done;
    {
        gx_route_job rj = {c, &c->rt.moe, logits, bias, ids, wts, scr, n, ne, nu, scr_n, 0,
                           cudaSuccess, 0};
        fw_pool_run(c->route_pool, n_parts, gx_route_part, &rj);
        if (rj.e != cudaSuccess) {
            rc = gguf_cuda_fail(err, rj.e, "cudaStreamSynchronize (the router logits)");
            goto done;
        }
        *t_route = rj.t_ready;
    }
    if (c->o.capture) {
        cap = (float *)malloc((size_t)(n * nu) * sizeof(float) * 2 + 1);
        if (!cap) {
            rc = fw_nomem(err, "MoE");
            goto done;
        }
        for (int64_t i = 0; i < n * nu; i++) {
            cap[i] = (float)ids[i];
            cap[n * nu + i] = (float)wts[i];
        }
        if ((rc = gx_capture(c, (int)il, GGUF_CAP_MOE_EXPERTS, NULL, cap, nu, n, err)) ||
            (rc = gx_capture(c, (int)il, GGUF_CAP_MOE_WEIGHTS, NULL, cap + n * nu, nu, n, err)))
            goto done;
    }
done:
    gx_release(c, &bt);
    free(logits);
    free(scr);
    free(bias);
    free(cap);
    return rc;
}

static int gx_experts_check(const gx *c, int64_t il, gguf_error *err)
{
    const gguf_role need[] = {GGUF_ROLE_FFN_GATE_EXPS, GGUF_ROLE_FFN_UP_EXPS,
                              GGUF_ROLE_FFN_DOWN_EXPS};
    for (size_t i = 0; i < sizeof need / sizeof *need; i++)
        if (!gx_present(c, il, need[i]))
            return fw_missing(il, need[i], err);
    return 0;
}

int gx_ffn_moe(gx *c, int64_t il, const float *x, int64_t n, float *routed, float *shared,
               bool *red_routed, bool *red_shared, bool *has_shared, gguf_error *err)
{
    const gguf_hparams *hp = c->hp;
    const int64_t E = hp->n_embd, nu = hp->n_expert_used;
    float *dlog = NULL;
    int64_t *ids = (int64_t *)malloc((size_t)(n * nu) * sizeof(int64_t) + 1);
    double *wts = (double *)malloc((size_t)(n * nu) * sizeof(double) + 1);
    gx_experts own;
    gx_layout l;
    memset(&own, 0, sizeof own);
    memset(&l, 0, sizeof l);
    double t_route = 0;
    int rc = 0;
    *red_routed = *red_shared = *has_shared = false;
    if (!ids || !wts) {
        rc = fw_nomem(err, "MoE");
        goto done;
    }
    if ((rc = gx_experts_check(c, il, err)) || (rc = gx_router_logits(c, il, x, n, &dlog, err)))
        goto done;
    /* The shared experts need no routing: they stream while the GPU
     * computes the router logits, instead of after the wait for them. */
    if (gx_present(c, il, GGUF_ROLE_FFN_GATE_SHEXP)) {
        if ((rc = gx_ffn_dense(c, il, GGUF_ROLE_FFN_GATE_SHEXP, GGUF_ROLE_FFN_UP_SHEXP,
                               GGUF_ROLE_FFN_DOWN_SHEXP, x, n, shared, red_shared, err)))
            goto done;
        *has_shared = true;
        if (c->rt.shared_scale != 1.0 && c->rt.shared_scale != 0.0)
            fk_scale(shared, n * E, c->rt.shared_scale, c->ks);
    }
    if ((rc = gx_route(c, il, n, ids, wts, &t_route, err)))
        goto done;
    gx_experts_own(c, il, &own);
    if ((rc = gx_layout_build(c, &own, ids, wts, n, &l, err)) ||
        (rc = gx_routed(c, il, &own, &l, x, n, routed, t_route, err)))
        goto done;
    if (c->plan)
        *red_routed = own.d.e->reduce_sum || gguf_shard_plan_opts(c->plan)->ep > 1;
done:
    gx_experts_release(c, &own);
    gx_layout_free(&l);
    gx_dfree(c, dlog);
    free(ids);
    free(wts);
    return rc;
}
