/*
 * The GPU executor's contexts and the block loop's ops (fwd_gpu.h,
 * fwd_block.h), behind both APIs: ggufkit_cuda/forward_cuda.h (one GPU: no
 * plan, no communicator, the loop's reduce op NULL) and
 * ggufkit_cuda/forward_cuda_tp.h (rank r of a plan over NCCL). The two differ
 * only where the CPU's executor differs between its reference and its
 * virtual ranks: the embedding and the head are vocab-parallel on a rank,
 * and a rank reduces.
 */
#include "cuda_internal.h"

#include <stdlib.h>
#include <string.h>

extern "C" {
#include "util/cpus.h"
}
#include "fwd_block.h"
#include "fwd_common.h"
#include "fwd_cuda_internal.h"
#include "fwd_dl.h"
#include "fwd_gpu.h"
#include "ggufkit_cuda/forward_cuda_tp.h"

#define GX_CHUNK_BYTES_DEFAULT ((size_t)64 << 20)
/* Dequantized floats per chunk: 64 MiB of Q4_K is 119 Mi floats; 64 Mi
 * floats (256 MiB) keep quantized chunks of tens of MB, where per-chunk costs
 * vanish against the copy. */
#define GX_CHUNK_FLOATS ((int64_t)64 << 20)
/* cuBLAS's own workspace, which it allocates itself: counted against a cap. */
#define GX_BLAS_WORKSPACE ((size_t)32 << 20)

/* ------------------------------------------------------------ the loop's ops */

/* One eval's state for the loop's ops; its buffers are freed by gx_eval. */
typedef struct gx_eval_ctx {
    gx *c;
    const double *cs; /* the RoPE table of these positions */
    float *lg;        /* one GPU: the logits on the device */
    float *lr, *lall; /* a rank: its logits slice, every rank's (device) */
    float *hl, *hlg;  /* a rank: the gathered slices, the logits in vocab order (host) */
} gx_eval_ctx;

/* Embedding rows, one request entry per token, into x's rows. */
typedef struct gx_embd_arg {
    float *x;
    int64_t E;
    cudaStream_t s;
} gx_embd_arg;

static int gx_embd_chunk(const float *w, int64_t i, int64_t r0, int64_t nr, void *arg,
                         gguf_error *err)
{
    const gx_embd_arg *a = (const gx_embd_arg *)arg;
    (void)r0;
    (void)nr;
    GC_TRY(err, cudaMemcpyAsync(a->x + i * a->E, w, (size_t)a->E * sizeof(float),
                                cudaMemcpyDeviceToDevice, a->s));
    return 0;
}

/* One GPU: the tokens' rows streamed from the file. */
static int gx_embed_file(gx *c, const int32_t *tokens, int64_t n, float *x, gguf_error *err)
{
    const gguf_tensor *te = gguf_model_get(c->m, -1, GGUF_ROLE_TOKEN_EMBD);
    if (!te)
        return fw_missing(-1, GGUF_ROLE_TOKEN_EMBD, err);
    fs_rows *rq = (fs_rows *)malloc((size_t)n * sizeof *rq);
    if (!rq)
        return fw_nomem(err, "embedding");
    for (int64_t t = 0; t < n; t++) {
        rq[t].t = te;
        rq[t].row0 = tokens[t];
        rq[t].n_rows = 1;
    }
    gx_embd_arg a = {x, c->hp->n_embd, c->ks};
    int rc = fs_stream(c->fs, rq, n, gx_embd_chunk, &a, err);
    free(rq);
    return rc;
}

/* Rows of rank q's slice of (il, role) (ne[1]), 0 when absent. */
static int64_t gx_rows_of(const gx *c, int64_t il, gguf_role role, int q)
{
    const gguf_shard_tensor *e = gguf_shard_plan_get(c->plan, il, role);
    return e && e->ranks[q].ne[1] > 0 ? e->ranks[q].ne[1] : (e ? 1 : 0);
}

static int gx_allreduce(gx *c, float *buf, int64_t len, gguf_error *err)
{
    GC_TRY(err, cudaStreamSynchronize(c->ks));
    return gguf_nccl_all_reduce_sum(c->comm, buf, (size_t)len, (gguf_cuda_stream *)c->ks, err);
}

/* A rank: vocab-parallel, it serves ids [off, off + rows); the others' rows
 * stay zero and the all-reduce fills them in. */
static int gx_embed_ranks(gx *c, const int32_t *tokens, int64_t n, float *x, float *part,
                          gguf_error *err)
{
    const int64_t E = c->hp->n_embd;
    int64_t off = 0;
    for (int q = 0; q < c->r; q++)
        off += gx_rows_of(c, -1, GGUF_ROLE_TOKEN_EMBD, q);
    gx_w te;
    int rc;
    GC_TRY(err, cudaMemsetAsync(part, 0, (size_t)(n * E) * sizeof(float), c->ks));
    if ((rc = gx_get(c, -1, GGUF_ROLE_TOKEN_EMBD, &te, 0, NULL, 0, err)))
        return rc;
    const int64_t rows = te.ne[1], w = E < te.ne[0] ? E : te.ne[0];
    for (int64_t t = 0; t < n && te.d && !rc; t++) {
        const int64_t id = tokens[t];
        if (id < off || id >= off + rows)
            continue;
        const cudaError_t ce = cudaMemcpyAsync(part + t * E, te.d + (id - off) * te.ne[0],
                                               (size_t)w * sizeof(float),
                                               cudaMemcpyDeviceToDevice, c->ks);
        if (ce != cudaSuccess)
            rc = gguf_cuda_fail(err, ce, "embedding");
    }
    gx_release(c, &te);
    if (rc || (rc = gx_allreduce(c, part, n * E, err)))
        return rc;
    GC_TRY(err, cudaMemcpyAsync(x, part, (size_t)(n * E) * sizeof(float),
                                cudaMemcpyDeviceToDevice, c->ks));
    return 0;
}

static int gx_op_embed(void *ctx, const int32_t *tokens, int64_t n, float *x, float *part,
                       gguf_error *err)
{
    gx *c = ((gx_eval_ctx *)ctx)->c;
    return c->plan ? gx_embed_ranks(c, tokens, n, x, part, err)
                   : gx_embed_file(c, tokens, n, x, err);
}

static int gx_op_norm(void *ctx, int64_t il, gguf_role role, gguf_role alt, float *y,
                      const float *x, int64_t n, gguf_error *err)
{
    gx *c = ((gx_eval_ctx *)ctx)->c;
    const int64_t E = c->hp->n_embd;
    gx_w w;
    int rc;
    if ((rc = gx_get(c, il, role, &w, 0, NULL, 0, err)))
        return rc;
    if (!gx_has(&w) && alt != GGUF_ROLE_UNKNOWN && (rc = gx_get(c, il, alt, &w, 0, NULL, 0, err)))
        return rc;
    rc = gx_norm(c, y, x, n, 1, E, E, 0, &w, err);
    gx_release(c, &w);
    return rc;
}

static int gx_op_attention(void *ctx, int64_t il, const float *cur, int64_t n, float *out,
                           bool *reduce, gguf_error *err)
{
    const gx_eval_ctx *v = (const gx_eval_ctx *)ctx;
    return gx_attention(v->c, il, v->cs, cur, n, out, reduce, err);
}

static int gx_op_ffn(void *ctx, int64_t il, bool moe, const float *cur, int64_t n,
                     fb_ffn_out *out, gguf_error *err)
{
    gx *c = ((gx_eval_ctx *)ctx)->c;
    if (c->plan) { /* a rank writes its share of each */
        const size_t bytes = (size_t)(n * c->hp->n_embd) * sizeof(float);
        GC_TRY(err, cudaMemsetAsync(out->routed, 0, bytes, c->ks));
        GC_TRY(err, cudaMemsetAsync(out->shared, 0, bytes, c->ks));
    }
    if (moe)
        return gx_ffn_moe(c, il, cur, n, out->routed, out->shared, &out->reduce_routed,
                          &out->reduce_shared, &out->has_shared, err);
    return gx_ffn_dense(c, il, GGUF_ROLE_FFN_GATE, GGUF_ROLE_FFN_UP, GGUF_ROLE_FFN_DOWN, cur, n,
                        out->routed, &out->reduce_routed, err);
}

static int gx_op_reduce(void *ctx, float *buf, int64_t len, gguf_error *err)
{
    return gx_allreduce(((gx_eval_ctx *)ctx)->c, buf, len, err);
}

/* One GPU: the logits on the device. */
static int gx_head_file(gx_eval_ctx *v, const float *cur, int64_t n, fb_logits *out,
                        gguf_error *err)
{
    gx *c = v->c;
    const int64_t E = c->hp->n_embd, V = c->hp->n_vocab;
    gx_w wo;
    int rc;
    if ((rc = gx_get(c, -1, GGUF_ROLE_OUTPUT, &wo, 0, NULL, 0, err)))
        return rc;
    if (!gx_has(&wo)) /* tied embeddings */
        (void)gx_get(c, -1, GGUF_ROLE_TOKEN_EMBD, &wo, 0, NULL, 0, err);
    /* the vocabulary's rows, not a padded tensor's */
    wo.ne[1] = V;
    wo.ne[2] = wo.ne[3] = 1;
    if (!(rc = gx_need(&wo, -1, GGUF_ROLE_OUTPUT, err)) &&
        !(rc = gx_alloc(c, &v->lg, (size_t)(n * V) * sizeof(float), err)) &&
        !(rc = gx_mm(c, v->lg, V, cur, E, &wo, NULL, n, err)))
        out->dev = v->lg;
    gx_release(c, &wo);
    return rc;
}

/* A rank: vocab-parallel rows, all-gathered (padded to the widest rank)
 * and placed in rank order on the host, cut to n_vocab. */
static int gx_head_ranks(gx_eval_ctx *v, const float *cur, int64_t n, fb_logits *out,
                         gguf_error *err)
{
    gx *c = v->c;
    const int64_t E = c->hp->n_embd, V = c->hp->n_vocab;
    const gguf_role head = gguf_shard_plan_get(c->plan, -1, GGUF_ROLE_OUTPUT)
                               ? GGUF_ROLE_OUTPUT
                               : GGUF_ROLE_TOKEN_EMBD;
    int64_t rmax = 1;
    for (int q = 0; q < c->tp; q++)
        if (gx_rows_of(c, -1, head, q) > rmax)
            rmax = gx_rows_of(c, -1, head, q);
    gx_w wo;
    int rc;
    if ((rc = gx_get(c, -1, head, &wo, 0, NULL, 0, err)))
        return rc;
    if (!(rc = gx_need(&wo, -1, GGUF_ROLE_OUTPUT, err)) &&
        !(rc = gx_zalloc(c, &v->lr, (size_t)(n * rmax) * sizeof(float), err)) &&
        !(rc = gx_alloc(c, &v->lall, (size_t)(c->tp * n * rmax) * sizeof(float), err)))
        rc = gx_mm(c, v->lr, rmax, cur, E, &wo, NULL, n, err);
    gx_release(c, &wo);
    if (rc)
        return rc;
    GC_TRY(err, cudaStreamSynchronize(c->ks));
    if ((rc = gguf_nccl_all_gather(c->comm, v->lr, v->lall, (size_t)(n * rmax),
                                   (gguf_cuda_stream *)c->ks, err)))
        return rc;
    v->hl = (float *)malloc((size_t)(c->tp * n * rmax) * sizeof(float));
    v->hlg = (float *)calloc((size_t)(n * V) + 1, sizeof(float));
    if (!v->hl || !v->hlg)
        return fw_nomem(err, "logits");
    GC_TRY(err, cudaMemcpyAsync(v->hl, v->lall, (size_t)(c->tp * n * rmax) * sizeof(float),
                                cudaMemcpyDeviceToHost, c->ks));
    GC_TRY(err, cudaStreamSynchronize(c->ks));
    int64_t off = 0;
    for (int q = 0; q < c->tp; q++) {
        const int64_t rows = gx_rows_of(c, -1, head, q);
        for (int64_t t = 0; t < n; t++)
            for (int64_t j = 0; j < rows && off + j < V; j++)
                v->hlg[t * V + off + j] = v->hl[((int64_t)q * n + t) * rmax + j];
        off += rows;
    }
    out->host = v->hlg;
    return 0;
}

static int gx_op_head(void *ctx, const float *cur, int64_t n, fb_logits *out, gguf_error *err)
{
    gx_eval_ctx *v = (gx_eval_ctx *)ctx;
    return v->c->plan ? gx_head_ranks(v, cur, n, out, err) : gx_head_file(v, cur, n, out, err);
}

static int gx_op_capture(void *ctx, int layer, gguf_capture_point p, const float *dev,
                         const float *host, int64_t width, int64_t n, gguf_error *err)
{
    return gx_capture(((gx_eval_ctx *)ctx)->c, layer, p, dev, host, width, n, err);
}

static void gx_op_measure(void *ctx)
{
    gx_sample_mem(((gx_eval_ctx *)ctx)->c);
}

static int gx_op_logits(void *ctx, const fb_logits *lg, int64_t n, float *logits_out,
                        gguf_error *err)
{
    gx *c = ((gx_eval_ctx *)ctx)->c;
    const size_t bytes = (size_t)(n * c->hp->n_vocab) * sizeof(float);
    /* a copy to pageable memory waits for the stream: timed as the sync */
    const double t0 = gx_now();
    if (logits_out && lg->dev)
        GC_TRY(err, cudaMemcpyAsync(logits_out, lg->dev, bytes, cudaMemcpyDeviceToHost, c->ks));
    GC_TRY(err, cudaStreamSynchronize(c->ks));
    c->xf.host_sync_seconds += gx_now() - t0;
    GC_TRY(err, cudaGetLastError());
    if (logits_out && !lg->dev)
        memcpy(logits_out, lg->host, bytes);
    c->n_past += n;
    return 0;
}

/* One GPU has nothing to reduce: the loop's reduce op is NULL. */
static const fb_ops gx_one_ops = {
    gx_op_embed, gx_op_norm,    gx_op_attention, gx_op_ffn,    NULL,
    gx_op_head,  gx_op_capture, gx_op_measure,   gx_op_logits,
};
static const fb_ops gx_rank_ops = {
    gx_op_embed, gx_op_norm,    gx_op_attention, gx_op_ffn,    gx_op_reduce,
    gx_op_head,  gx_op_capture, gx_op_measure,   gx_op_logits,
};

/* One GPU: every layer's KV cache grown before the eval, not by each layer's
 * attention: growing synchronizes the stream, and a sync inside the eval restarts
 * the streamer's chunk sizes small (more chunks, other GEMM shapes, other bits).
 * A rank's widths come from its slices: they grow at their first use. */
static int gx_grow_caches(gx *c, int64_t need, gguf_error *err)
{
    for (int64_t il = 0; !c->plan && il < c->hp->n_layer_main; il++) {
        int rc = gx_cache_reserve(c, il, c->set.k_w, c->set.v_w, need, err);
        if (rc)
            return rc;
    }
    return 0;
}

static int gx_eval(gx *c, const int32_t *tokens, int64_t n, float *logits_out, gguf_error *err)
{
    const int64_t E = c->hp->n_embd;
    const size_t rows = (size_t)(n * E) * sizeof(float);
    float *x = NULL, *cur = NULL, *part = NULL, *part2 = NULL;
    double *cs = NULL;
    gx_eval_ctx v;
    memset(&v, 0, sizeof v);
    v.c = c;
    int rc;
    GC_GOTO(err, cudaSetDevice(c->device));
    if ((rc = gx_grow_caches(c, c->n_past + n, err)))
        goto done;
    if ((rc = gx_alloc(c, &x, rows, err)) || (rc = gx_alloc(c, &cur, rows, err)) ||
        (rc = gx_alloc(c, &part, rows, err)) || (rc = gx_alloc(c, &part2, rows, err)) ||
        (rc = fwd_rope_table(&c->rt.rope, c->n_past, n, c->pool, c->ks, &cs, err)))
        goto done;
    v.cs = cs;
    {
        const fb_exec e = {c->comm ? &gx_rank_ops : &gx_one_ops, &v, c->m, c->ks, x, cur, part,
                           part2};
        rc = fb_run(&e, tokens, n, logits_out, err);
    }
done:
    gx_dfree(c, x);
    gx_dfree(c, cur);
    gx_dfree(c, part);
    gx_dfree(c, part2);
    gx_dfree(c, v.lg);
    gx_dfree(c, v.lr);
    gx_dfree(c, v.lall);
    gx_dfree(c, cs);
    /* Leave nothing queued behind a failure: the next call starts clean. */
    cudaError_t se = cudaStreamSynchronize(c->ks);
    if (!rc && se != cudaSuccess)
        rc = gguf_cuda_fail(err, se, "forward");
    free(v.hl);
    free(v.hlg);
    return rc;
}

/* ------------------------------------------------------------ contexts */

static void gx_free(gx *c)
{
    if (!c)
        return;
    if (c->ks) {
        (void)cudaSetDevice(c->device);
        (void)cudaStreamSynchronize(c->ks);
    }
    if (c->lc && c->hp)
        for (int64_t i = 0; i < c->hp->n_layer; i++) {
            cudaFree(c->lc[i].k);
            cudaFree(c->lc[i].v);
        }
    free(c->lc);
    free(c->atab);
    if (c->hlog)
        cudaFreeHost(c->hlog);
    fs_free(c->fs);
    fw_pool_free(c->route_pool);
    if (c->blas)
        cublasDestroy(c->blas);
    if (c->ks)
        cudaStreamDestroy(c->ks);
    if (c->pool)
        cudaMemPoolDestroy(c->pool);
    fw_setup_free(&c->set);
    free(c);
}

/* The options, the precision and the MLA mode this executor runs. */
static int gx_check_opts(const gguf_fwd_opts *fo, const gguf_cuda_fwd_opts *co, bool rank,
                         gguf_error *err)
{
    const char *who = rank ? "cuda tp" : "cuda forward";
    if (fo->precision == GGUF_FWD_F64)
        return gguf_fail(err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                         "%s: f64 precision is CPU only (the GPU computes f32)", who);
    if (fo->mla_mode == GGUF_FWD_MLA_ABSORBED)
        return gguf_fail(err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                         "%s: absorbed MLA is CPU only (the GPU expands kv_b per head)", who);
    if (co->device < 0 || co->n_copy_threads < 0 || co->n_copy_threads > 32 ||
        co->host_register < -1 || co->host_register > 1 || co->moe_pad < -1 ||
        co->moe_pad > 0 || co->n_route_threads < 0 || co->n_route_threads > 64)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "%s: bad options", who);
    return 0;
}

/* The stream, the pool, the device memory figures. */
static int gx_start_device(gx *c, gguf_error *err)
{
    int n_dev = 0;
    cudaError_t e = cudaGetDeviceCount(&n_dev);
    if (e == cudaSuccess && n_dev < 1)
        e = cudaErrorNoDevice;
    if (e != cudaSuccess)
        return gguf_cuda_fail(err, e, "cudaGetDeviceCount");
    if (c->device >= n_dev)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "cuda forward: device %d, but %d device(s)", c->device, n_dev);
    GC_TRY(err, cudaSetDevice(c->device));
    size_t tot = 0;
    GC_TRY(err, cudaMemGetInfo(&c->free0, &tot));
    GC_TRY(err, cudaStreamCreateWithFlags(&c->ks, cudaStreamNonBlocking));
    /* The default pool gives its memory back at every synchronization
     * (release threshold 0), and each MoE layer synchronizes for its
     * routing: the next layer's allocations would map memory again. */
    cudaMemPoolProps pp;
    memset(&pp, 0, sizeof pp);
    pp.allocType = cudaMemAllocationTypePinned;
    pp.location.type = cudaMemLocationTypeDevice;
    pp.location.id = c->device;
    GC_TRY(err, cudaMemPoolCreate(&c->pool, &pp));
    uint64_t keep = UINT64_MAX;
    GC_TRY(err, cudaMemPoolSetAttribute(c->pool, cudaMemPoolAttrReleaseThreshold, &keep));
    return 0;
}

/* The weight streamer, sized to the cap when there is one. Ranks on one
 * host share its cores: a few copy threads each. */
static int gx_start_streamer(gx *c, const gguf_cuda_fwd_opts *co, gguf_error *err)
{
    const long ncpu = gguf_cpus_usable() / c->tp;
    const int nth = co->n_copy_threads ? co->n_copy_threads
                                       : (int)(ncpu < 1 ? 1 : ncpu > 16 ? 16 : ncpu);
    size_t cb = co->chunk_bytes ? co->chunk_bytes : GX_CHUNK_BYTES_DEFAULT;
    if (co->mem_limit && cb > co->mem_limit / 16)
        cb = co->mem_limit / 16; /* three raw chunks: 3/16 of the cap */
    /* 4 floats per quantized byte cover every type but F32/F16 rows, for
     * which the bytes bind first */
    int64_t cf = (int64_t)cb * 4 < GX_CHUNK_FLOATS ? (int64_t)cb * 4 : GX_CHUNK_FLOATS;
    if (co->mem_limit && cf > (int64_t)(co->mem_limit / 32))
        cf = (int64_t)(co->mem_limit / 32); /* the dequantized chunk: an eighth of the cap */
    if (co->mem_limit) {
        /* the floor: staging, cuBLAS's workspace, and one token's activations
         * through the widest layer (x, cur, y, and a few rows of scratch) */
        const gguf_hparams *hp = c->hp;
        const int64_t wide = hp->n_ff > hp->n_vocab ? hp->n_ff : hp->n_vocab;
        c->mem_limit = co->mem_limit;
        c->mem_fixed = 3 * cb + (size_t)cf * sizeof(float) + GX_BLAS_WORKSPACE;
        const uint64_t floor = c->mem_fixed + (uint64_t)(8 * hp->n_embd + 2 * wide) * 4;
        if (cb < ((size_t)1 << 20) || cf < hp->n_embd || floor > co->mem_limit) {
            char a[32], b[32];
            return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET,
                             "cuda: --gpu-mem-limit %s: not even one layer fits (staging and "
                             "one token's activations need %s)",
                             gx_mib(co->mem_limit, a, sizeof a),
                             gx_mib(floor > 16 * ((uint64_t)1 << 20) ? floor : 16u << 20, b,
                                    sizeof b));
        }
        /* under a cap the pool keeps no more than the cap leaves for
         * activations: what fragmentation leaves reserved beyond that is
         * given back at the next synchronization */
        uint64_t keep = c->mem_limit - c->mem_fixed;
        GC_TRY(err, cudaMemPoolSetAttribute(c->pool, cudaMemPoolAttrReleaseThreshold, &keep));
    }
    int rc = fs_create(&c->fs, c->ks, cb, cf, nth, c->o.drop_pages, err);
    return rc ? rc : fs_register_model(c->fs, c->m, co->host_register, err);
}

/* Host threads routing an MoE layer: routing a 64-token batch over 128
 * experts is ~0.2 ms on one core, all of it time the copy engine idles: 8
 * threads take most of it. */
static int gx_start_routing(gx *c, const gguf_cuda_fwd_opts *co, gguf_error *err)
{
    if (c->hp->n_expert <= 0)
        return 0;
    const long ncpu = gguf_cpus_usable() / c->tp;
    const int nrt = co->n_route_threads ? co->n_route_threads
                                        : (int)(ncpu < 1 ? 1 : ncpu > 8 ? 8 : ncpu);
    return nrt > 1 ? fw_pool_create(&c->route_pool, nrt, err) : 0;
}

/* The executor: one GPU without plan and comm, else rank comm's rank. */
static int gx_create(gx **out, const gguf_model *m, const gguf_shard_plan *plan,
                     gguf_nccl_comm *comm, const gguf_fwd_opts *opts,
                     const gguf_cuda_fwd_opts *copts, gguf_error *err)
{
    *out = NULL;
    gguf_fwd_opts fo = {};
    if (opts)
        fo = *opts;
    gguf_cuda_fwd_opts co = {};
    if (copts)
        co = *copts;
    if (plan)
        co.device = 0; /* the communicator's device, not the option's */
    int rc = gx_check_opts(&fo, &co, plan != NULL, err);
    if (rc)
        return rc;
    gx *c = (gx *)calloc(1, sizeof *c);
    if (!c)
        return fw_nomem(err, "context");
    if ((rc = fw_setup_init(&c->set, m, &fo, err))) {
        free(c);
        return rc;
    }
    fw_runtime_init(&c->rt, &c->set, plan ? gguf_shard_plan_runtime(plan) : NULL);
    c->m = m;
    c->hp = gguf_model_hparams(m);
    c->o = fo;
    c->plan = plan;
    c->comm = comm;
    c->r = comm ? gguf_nccl_comm_rank(comm) : 0;
    c->tp = plan ? gguf_shard_plan_ranks(plan) : 1;
    c->cap_rank = plan ? c->r : -1;
    c->device = comm ? gguf_nccl_comm_device(comm) : copts ? copts->device : 0;
    c->moe_pad = co.moe_pad >= 0;
    c->lc = (gx_cache *)calloc((size_t)(c->hp->n_layer > 0 ? c->hp->n_layer : 1), sizeof *c->lc);
    if (!c->lc)
        rc = fw_nomem(err, "cache");
    if (!rc && !(rc = gx_start_device(c, err)) && !(rc = gx_start_streamer(c, &co, err)) &&
        !(rc = fwd_blas_reference(&c->blas, c->ks, err)))
        rc = gx_start_routing(c, &co, err);
    if (rc) {
        gx_free(c);
        return rc;
    }
    /* the two dequantized chunks are always there */
    c->resident = fs_resident_bytes(c->fs);
    c->st.peak_weight_bytes = c->resident;
    *out = c;
    return 0;
}

static int gx_eval_checked(gx *c, const int32_t *tokens, int64_t n, float *logits,
                           gguf_error *err)
{
    if (!c || !tokens || n < 1)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "forward: no tokens");
    const int64_t V = c->hp->n_vocab;
    for (int64_t t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= V)
            return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                             "forward: token %lld is %d, outside the vocabulary (%lld)",
                             (long long)t, tokens[t], (long long)V);
    const double t0 = gx_now();
    int rc = gx_eval(c, tokens, n, logits, err);
    const double dt = gx_now() - t0;
    c->st.seconds += dt;
    c->xf.stream_seconds += dt;
    return rc;
}

/* ------------------------------------------------------------ one GPU (forward_cuda.h) */

int gguf_cuda_fwd_create(gguf_cuda_fwd **out, const gguf_model *m, const gguf_fwd_opts *opts,
                         const gguf_cuda_fwd_opts *copts, gguf_error *err)
{
    if (!out)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "cuda forward: NULL out");
    return gx_create(out, m, NULL, NULL, opts, copts, err);
}

void gguf_cuda_fwd_free(gguf_cuda_fwd *c)
{
    gx_free(c);
}

int gguf_cuda_fwd_eval(gguf_cuda_fwd *c, const int32_t *tokens, int64_t n, float *logits,
                       gguf_error *err)
{
    return gx_eval_checked(c, tokens, n, logits, err);
}

int64_t gguf_cuda_fwd_n_past(const gguf_cuda_fwd *c)
{
    return c ? c->n_past : 0;
}

void gguf_cuda_fwd_stats(const gguf_cuda_fwd *c, gguf_fwd_stats *out, gguf_cuda_fwd_xfer *xfer)
{
    if (!c)
        return;
    const fs_stats fs = fs_get_stats(c->fs);
    if (out) {
        *out = c->st;
        out->weight_bytes = fs.bytes;
        out->dequant_floats = fs.floats;
    }
    if (xfer) {
        *xfer = c->xf;
        xfer->h2d_bytes = fs.bytes;
        xfer->chunks = fs.chunks;
        xfer->host_copy_seconds = fs.copy_seconds;
        xfer->host_wait_seconds = fs.wait_seconds;
        xfer->host_issue_seconds = fs.issue_seconds;
        xfer->direct_bytes = fs.direct_bytes;
        xfer->registered_bytes = fs.registered_bytes;
        xfer->register_seconds = fs.register_seconds;
    }
}

/* ------------------------------------------------------------ gguf_fwd_ctx */

static int gx_be_eval(void *impl, const int32_t *tokens, int64_t n, float *logits,
                      gguf_error *err)
{
    return gx_eval_checked((gx *)impl, tokens, n, logits, err);
}

static int64_t gx_be_n_past(const void *impl)
{
    return ((const gx *)impl)->n_past;
}

static void gx_be_stats(const void *impl, gguf_fwd_stats *out)
{
    gguf_cuda_fwd_stats((const gx *)impl, out, NULL);
}

static int gx_be_set_capture(void *impl, gguf_fwd_capture_fn fn, void *user)
{
    gx *c = (gx *)impl;
    c->o.capture = fn;
    c->o.capture_user = user;
    return 0;
}

static void gx_be_free(void *impl)
{
    gx_free((gx *)impl);
}

/* The same executor under two names: records say which ran. */
static const gguf_fwd_backend gx_one_backend = {"cuda", gx_be_eval, gx_be_n_past, gx_be_stats,
                                                gx_be_set_capture, gx_be_free};
static const gguf_fwd_backend gx_rank_backend = {"cuda-nccl", gx_be_eval, gx_be_n_past,
                                                 gx_be_stats, gx_be_set_capture, gx_be_free};

int gguf_cuda_fwd_ctx_create(gguf_fwd_ctx **out, const gguf_model *m, const gguf_fwd_opts *opts,
                             const gguf_cuda_fwd_opts *copts, gguf_error *err)
{
    *out = NULL;
    gx *c = NULL;
    int rc = gguf_cuda_fwd_create(&c, m, opts, copts, err);
    return rc ? rc : gguf_fwd_ctx_wrap(out, m, &gx_one_backend, c, err);
}

gguf_cuda_fwd *gguf_cuda_fwd_of(const gguf_fwd_ctx *ctx)
{
    return (gguf_cuda_fwd *)gguf_fwd_ctx_impl(ctx, &gx_one_backend);
}

/* ------------------------------------------------------------ a rank (forward_cuda_tp.h) */

struct gguf_cuda_tp {
    gx *x;
};

static int gx_create_rank(gx **out, const gguf_model *m, const gguf_shard_plan *plan,
                          gguf_nccl_comm *comm, const gguf_fwd_opts *opts,
                          const gguf_cuda_fwd_opts *copts, gguf_error *err)
{
    *out = NULL;
    if (!plan || !comm || gguf_shard_plan_model(plan) != m)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "cuda tp: the plan was not built for this model");
    const int r = gguf_nccl_comm_rank(comm), tp = gguf_shard_plan_ranks(plan);
    if (r < 0 || r >= tp || gguf_nccl_comm_world(comm) != tp)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "cuda tp: rank %d of %d, but the plan has %d ranks", r,
                         gguf_nccl_comm_world(comm), tp);
    return gx_create(out, m, plan, comm, opts, copts, err);
}

int gguf_cuda_tp_create(gguf_cuda_tp **out, const gguf_model *m, const gguf_shard_plan *plan,
                        gguf_nccl_comm *comm, const gguf_fwd_opts *opts,
                        const gguf_cuda_fwd_opts *copts, gguf_error *err)
{
    if (!out)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "cuda tp: NULL out");
    *out = NULL;
    gguf_cuda_tp *t = (gguf_cuda_tp *)calloc(1, sizeof *t);
    if (!t)
        return fw_nomem(err, "cuda tp");
    int rc = gx_create_rank(&t->x, m, plan, comm, opts, copts, err);
    if (rc) {
        free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void gguf_cuda_tp_free(gguf_cuda_tp *c)
{
    if (!c)
        return;
    gx_free(c->x);
    free(c);
}

int gguf_cuda_tp_eval(gguf_cuda_tp *c, const int32_t *tokens, int64_t n, float *logits,
                      gguf_error *err)
{
    return gx_eval_checked(c ? c->x : NULL, tokens, n, logits, err);
}

int gguf_cuda_tp_ctx_create(gguf_fwd_ctx **out, const gguf_model *m, const gguf_shard_plan *plan,
                            gguf_nccl_comm *comm, const gguf_fwd_opts *opts,
                            const gguf_cuda_fwd_opts *copts, gguf_error *err)
{
    *out = NULL;
    gx *c = NULL;
    int rc = gx_create_rank(&c, m, plan, comm, opts, copts, err);
    return rc ? rc : gguf_fwd_ctx_wrap(out, m, &gx_rank_backend, c, err);
}
