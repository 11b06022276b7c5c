/* Device memory of the GPU executor (fwd_gpu.h): allocations from the
 * context's pool on the compute stream, counted against --gpu-mem-limit,
 * and the per-layer KV cache. */
#include "cuda_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fwd_gpu.h"

const char *gx_mib(uint64_t b, char *buf, size_t n)
{
    snprintf(buf, n, "%.1f MiB", (double)b / 1048576.0);
    return buf;
}

int gx_mem_check(gx *c, uint64_t bytes, const char *what, gguf_error *err)
{
    if (!c->mem_limit || c->mem_fixed + c->mem_used + bytes <= c->mem_limit)
        return 0;
    char a[32], b[32], d[32], u[32];
    return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET,
                     "cuda: --gpu-mem-limit %s: %s needs %s more (held: %s of staging and "
                     "workspace, %s of activations and KV cache)",
                     gx_mib(c->mem_limit, a, sizeof a), what, gx_mib(bytes, b, sizeof b),
                     gx_mib(c->mem_fixed, d, sizeof d), gx_mib(c->mem_used, u, sizeof u));
}

int gx_alloc(gx *c, void *pp, size_t bytes, gguf_error *err)
{
    void **p = (void **)pp;
    *p = NULL;
    if (!bytes)
        bytes = 16;
    if (c->mem_limit) {
        int rc = gx_mem_check(c, bytes, "an activation or scratch buffer", err);
        if (rc)
            return rc;
        if (c->an == c->acap) {
            const int cap = c->acap ? 2 * c->acap : 64;
            void *t = realloc(c->atab, (size_t)cap * sizeof *c->atab);
            if (!t)
                return fw_nomem(err, "allocation table");
            c->atab = (struct gguf_cuda_fwd::gx_alloc_rec *)t;
            c->acap = cap;
        }
    }
    GC_TRY(err, cudaMallocFromPoolAsync(p, bytes, c->pool, c->ks));
    if (c->mem_limit) {
        c->atab[c->an].p = *p;
        c->atab[c->an].n = bytes;
        c->an++;
        c->mem_used += bytes;
    }
    return 0;
}

int gx_zalloc(gx *c, void *pp, size_t bytes, gguf_error *err)
{
    int rc = gx_alloc(c, pp, bytes, err);
    if (rc)
        return rc;
    const cudaError_t e = cudaMemsetAsync(*(void **)pp, 0, bytes ? bytes : 16, c->ks);
    if (e != cudaSuccess) {
        gx_dfree(c, *(void **)pp);
        *(void **)pp = NULL;
        return gguf_cuda_fail(err, e, "cudaMemsetAsync");
    }
    return 0;
}

void gx_dfree(gx *c, void *p)
{
    if (!p)
        return;
    (void)cudaFreeAsync(p, c->ks);
    for (int i = c->an - 1; i >= 0; i--)
        if (c->atab[i].p == p) {
            c->mem_used -= c->atab[i].n;
            c->atab[i] = c->atab[--c->an];
            break;
        }
}

void gx_sample_mem(gx *c)
{
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) == cudaSuccess && c->free0 > fr &&
        (uint64_t)(c->free0 - fr) > c->xf.device_bytes)
        c->xf.device_bytes = (uint64_t)(c->free0 - fr);
}

/* *buf grown from old_cap to cap rows of w floats, contents kept; on
 * failure *buf is as it was and nothing leaks. */
static int gx_grow_buf(gx *c, float **buf, int64_t old_cap, int64_t cap, int64_t w,
                       gguf_error *err)
{
    float *nb = NULL;
    const int64_t had = *buf ? old_cap : 0; /* rows the buffer holds now */
    int rc = gx_mem_check(c, (uint64_t)((cap - had) * w) * sizeof(float), "the KV cache", err);
    if (rc)
        return rc;
    GC_GOTO(err, cudaMalloc(&nb, (size_t)(cap * w) * sizeof(float)));
    if (*buf)
        GC_GOTO(err, cudaMemcpyAsync(nb, *buf, (size_t)(old_cap * w) * sizeof(float),
                                     cudaMemcpyDeviceToDevice, c->ks));
    GC_GOTO(err, cudaStreamSynchronize(c->ks));
    cudaFree(*buf);
    *buf = nb;
    nb = NULL;
    c->mem_used += (uint64_t)((cap - had) * w) * sizeof(float);
done:
    cudaFree(nb);
    return rc;
}

int gx_cache_reserve(gx *c, int64_t il, int64_t kw, int64_t vw, int64_t need, gguf_error *err)
{
    gx_cache *L = &c->lc[il];
    if (L->k && (L->kw != kw || L->vw != vw))
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "cuda forward: blk.%lld: the KV width changed between evals",
                         (long long)il);
    if (L->k && need <= L->cap)
        return 0;
    if (!L->k) {
        L->kw = kw;
        L->vw = vw;
    }
    int64_t cap = L->cap ? L->cap : 64;
    while (cap < need)
        cap *= 2;
    int rc = gx_grow_buf(c, &L->k, L->cap, cap, kw > 0 ? kw : 1, err);
    if (!rc && vw > 0)
        rc = gx_grow_buf(c, &L->v, L->cap, cap, vw, err);
    if (rc)
        return rc; /* a grown k keeps its larger buffer; cap stays: the next call grows v */
    L->cap = cap;
    return 0;
}
