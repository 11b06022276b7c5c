/*
 * Streaming benchmark of the GPU forward pass: weight bytes per second moved
 * into the GPU during an eval, against the host-to-device bandwidth from
 * pinned memory measured in the same run (target: at least 70%).
 *
 *   bench_cuda_forward MODEL.gguf [N_TOKENS [COPY_THREADS [CHUNK_MIB [REGISTER [ROUTE_THREADS [MOE_PAD]]]]]]
 *
 * REGISTER: the host_register option (0 auto, 1 always, -1 never: gather
 * every chunk into pinned staging). ROUTE_THREADS: n_route_threads (0 auto,
 * 1 the calling thread). MOE_PAD: moe_pad (0 auto, -1 one GEMM per expert).
 *
 * One warm-up eval (the file's pages come into the page cache), then two
 * timed evals of N_TOKENS (default 64) each in a fresh context: the first
 * (context set-up costs included: cuBLAS heuristics, the memory pool's
 * growth, the KV cache) and the second (the steady state of a longer run).
 * Pages are not dropped, so the figure is the streaming path itself, not the
 * disk. The GPU holds two chunks of weights at a time whatever the model's
 * size, so any model larger than the GPU's memory shows the streaming rate;
 * device_MiB is the most device memory the context held (against model_MiB
 * of weights). Prints a line of key=value pairs per timed eval. Exit 77
 * without a GPU.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/cpus.h"
#include "gguf/file.h"
#include "gguf/forward.h"
#include "gguf/model.h"
#include "ggufkit_cuda/cuda_device.h"
#include "ggufkit_cuda/forward_cuda.h"

/* Evals of n tokens each in one context; the figures of each eval are the
 * difference of the context's counters around it. */
static int evals(const gguf_model *m, const gguf_cuda_fwd_opts *co, int64_t n, int n_evals,
                 gguf_fwd_stats *st, gguf_cuda_fwd_xfer *xf, gguf_error *err)
{
    const int64_t V = gguf_model_hparams(m)->n_vocab;
    int32_t *tok = malloc((size_t)n * sizeof(int32_t));
    float *lg = malloc((size_t)(n * V) * sizeof(float));
    if (!tok || !lg) {
        free(tok);
        free(lg);
        return GGUF_E_NOMEM;
    }
    gguf_cuda_fwd *c = NULL;
    int rc = gguf_cuda_fwd_create(&c, m, NULL, co, err);
    gguf_fwd_stats s0 = {0}, s1;
    gguf_cuda_fwd_xfer x0 = {0}, x1;
    for (int k = 0; k < n_evals && !rc; k++) {
        for (int64_t i = 0; i < n; i++)
            tok[i] = (int32_t)(((i + k * n) * 7919 + 1) % V);
        rc = gguf_cuda_fwd_eval(c, tok, n, lg, err);
        if (rc)
            break;
        gguf_cuda_fwd_stats(c, &s1, &x1);
        st[k] = s1;
        st[k].seconds = s1.seconds - s0.seconds;
        st[k].experts_loaded = s1.experts_loaded - s0.experts_loaded;
        xf[k] = x1;
        xf[k].h2d_bytes = x1.h2d_bytes - x0.h2d_bytes;
        xf[k].chunks = x1.chunks - x0.chunks;
        xf[k].host_copy_seconds = x1.host_copy_seconds - x0.host_copy_seconds;
        xf[k].host_wait_seconds = x1.host_wait_seconds - x0.host_wait_seconds;
        xf[k].host_issue_seconds = x1.host_issue_seconds - x0.host_issue_seconds;
        xf[k].host_sync_seconds = x1.host_sync_seconds - x0.host_sync_seconds;
        xf[k].host_route_seconds = x1.host_route_seconds - x0.host_route_seconds;
        s0 = s1;
        x0 = x1;
    }
    gguf_cuda_fwd_free(c);
    free(tok);
    free(lg);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.gguf [N_TOKENS [COPY_THREADS [CHUNK_MIB [REGISTER [ROUTE_THREADS "
                "[MOE_PAD]]]]]]\n",
                argv[0]);
        return 2;
    }
    gguf_error err = {0};
    int n_dev;
    if (gguf_cuda_device_count(&n_dev, &err)) {
        printf("skipped: no usable CUDA device (%s)\n", err.message);
        return 77;
    }
    const int64_t n = argc > 2 ? atoll(argv[2]) : 64;
    gguf_cuda_fwd_opts co = {0};
    co.n_copy_threads = argc > 3 ? atoi(argv[3]) : 0;
    co.chunk_bytes = argc > 4 ? (size_t)atoll(argv[4]) << 20 : 0;
    co.host_register = argc > 5 ? atoi(argv[5]) : 0;
    co.n_route_threads = argc > 6 ? atoi(argv[6]) : 0;
    co.moe_pad = argc > 7 ? atoi(argv[7]) : 0;
    gguf_set *set = NULL;
    gguf_model *m = NULL;
    int rc = gguf_set_open(&set, argv[1], NULL, &err);
    if (!rc)
        rc = gguf_model_open(&m, set, &err);
    double h2d = 0;
    if (!rc)
        rc = gguf_cuda_h2d_bandwidth(&h2d, 0, 5, &err);
    gguf_fwd_stats st[2];
    gguf_cuda_fwd_xfer xf[2];
    if (!rc) /* warm-up: the page cache, the CUDA context, lazily loaded kernels */
        rc = evals(m, &co, n, 1, st, xf, &err);
    if (!rc) /* the first eval of a fresh context, then a second one in it */
        rc = evals(m, &co, n, 2, st, xf, &err);
    if (rc) {
        fprintf(stderr, "bench_cuda_forward: %s\n", err.message);
        gguf_model_free(m);
        gguf_set_free(set);
        return 3;
    }
    uint64_t model_bytes = 0;
    for (int64_t i = 0; i < gguf_set_tensor_count(set); i++)
        model_bytes += gguf_set_tensor_at(set, i)->nbytes;
    /* what the library chose for 0 (auto): printed, not passed */
    const int ncpu = gguf_cpus_usable();
    const int nth = co.n_copy_threads ? co.n_copy_threads : ncpu > 16 ? 16 : ncpu;
    const int nrt = co.n_route_threads ? co.n_route_threads : ncpu > 8 ? 8 : ncpu;
    for (int k = 0; k < 2; k++) {
        /* the host copy rate tells which stage limits: the gather into pinned
         * memory (host_copy_GBps near stream_GBps), the host queueing work
         * (issue_s), the copy engine or the GPU (the host waits: wait_s,
         * sync_s) */
        const gguf_fwd_stats *t = &st[k];
        const gguf_cuda_fwd_xfer *x = &xf[k];
        const double rate = t->seconds > 0 ? (double)x->h2d_bytes / t->seconds : 0;
        /* the host copies only what it gathers (not what the copy engine
         * reads in place from a registered mapping) */
        const uint64_t direct = k ? x->direct_bytes - xf[0].direct_bytes : x->direct_bytes;
        const uint64_t gathered = x->h2d_bytes - direct;
        const double hc = gathered && x->host_copy_seconds > 0
                              ? (double)gathered / x->host_copy_seconds
                              : 0;
        printf("model=%s arch=%s eval=%s tokens=%lld weight_bytes=%llu chunks=%llu "
               "experts_loaded=%llu seconds=%.3f stream_GBps=%.2f h2d_GBps=%.2f ratio=%.1f%% "
               "host_copy_GBps=%.2f host_copy_s=%.3f wait_s=%.3f issue_s=%.3f sync_s=%.3f route_s=%.3f "
               "copy_threads=%d route_threads=%d moe_pad=%d chunk_MiB=%zu device_MiB=%.0f model_MiB=%.0f direct_bytes=%llu "
               "registered_MiB=%.0f register_s=%.3f\n",
               argv[1], gguf_model_hparams(m)->arch_name, k ? "second" : "first", (long long)n,
               (unsigned long long)x->h2d_bytes, (unsigned long long)x->chunks,
               (unsigned long long)t->experts_loaded, t->seconds, rate / 1e9, h2d / 1e9,
               h2d > 0 ? 100.0 * rate / h2d : 0.0, hc / 1e9, x->host_copy_seconds,
               x->host_wait_seconds, x->host_issue_seconds, x->host_sync_seconds,
               x->host_route_seconds, nth, nrt, co.moe_pad,
               co.chunk_bytes ? co.chunk_bytes >> 20 : (size_t)64,
               (double)x->device_bytes / 1048576.0, (double)model_bytes / 1048576.0,
               (unsigned long long)direct,
               (double)x->registered_bytes / 1048576.0, x->register_seconds);
    }
    gguf_model_free(m);
    gguf_set_free(set);
    return 0;
}
