/*
 * bench_forward MODEL.gguf [N_TOKENS=64] [THREADS=1]
 *
 * The reference forward pass over a prompt of N_TOKENS: tokens per second,
 * bytes of (quantized) weights streamed per second next to the memory read
 * bandwidth measured in the same run, and peak RSS next to the size of the
 * largest block (as stored and dequantized to f32). Make the model with
 *     gguf-gen model --arch llama --preset 1b --type Q8_0 llama-1b.gguf
 * Figures: docs/benchmarks.md, section "forward".
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "gguf/forward.h"
#include "gguf/model.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Read bandwidth: sum a 256 MiB buffer, best of 3 passes. */
static double read_bandwidth(void)
{
    const size_t n = (256u << 20) / sizeof(uint64_t);
    uint64_t *buf = malloc(n * sizeof(uint64_t));
    if (!buf)
        return 0;
    for (size_t i = 0; i < n; i++)
        buf[i] = i;
    double best = 0;
    volatile uint64_t sink = 0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now();
        uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (size_t i = 0; i < n; i += 4) {
            s0 += buf[i];
            s1 += buf[i + 1];
            s2 += buf[i + 2];
            s3 += buf[i + 3];
        }
        sink += s0 + s1 + s2 + s3;
        double bw = (double)(n * sizeof(uint64_t)) / (now() - t0);
        if (bw > best)
            best = bw;
    }
    free(buf);
    (void)sink;
    return best;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_forward MODEL.gguf [N_TOKENS=64] [THREADS=1]\n");
        return 2;
    }
    const int n_tok = argc > 2 ? atoi(argv[2]) : 64;
    const int threads = argc > 3 ? atoi(argv[3]) : 1;
    gguf_error err;
    gguf_set *set = NULL;
    gguf_model *m = NULL;
    gguf_fwd_ctx *ctx = NULL;
    if (gguf_set_open(&set, argv[1], NULL, &err) || gguf_model_open(&m, set, &err)) {
        fprintf(stderr, "bench_forward: %s\n", err.message);
        return 2;
    }
    const gguf_hparams *hp = gguf_model_hparams(m);
    /* the largest block, as stored and as f32 */
    uint64_t max_bytes = 0, max_f32 = 0, total = 0;
    int64_t max_layer = -1;
    for (int64_t il = 0; il < hp->n_layer; il++) {
        uint64_t b = 0, f = 0;
        for (int64_t i = 0; i < gguf_model_tensor_count(m); i++) {
            const gguf_model_tensor *mt = gguf_model_tensor_at(m, i);
            if (mt->layer == il) {
                b += mt->t->nbytes;
                f += (uint64_t)mt->t->n_elements * 4;
            }
        }
        if (b > max_bytes) {
            max_bytes = b;
            max_f32 = f;
            max_layer = il;
        }
    }
    for (int64_t i = 0; i < gguf_model_tensor_count(m); i++)
        total += gguf_model_tensor_at(m, i)->t->nbytes;

    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n_tok);
    for (int i = 0; i < n_tok; i++)
        tok[i] = (int32_t)((i * 37 + 1) % hp->n_vocab);
    gguf_fwd_opts o = {0};
    o.n_threads = threads;
    o.drop_pages = true;
    float *logits = malloc(sizeof(float) * (size_t)(n_tok * hp->n_vocab));
    struct rusage ru0;
    getrusage(RUSAGE_SELF, &ru0);
    if (!logits || gguf_fwd_ctx_create(&ctx, m, &o, &err) ||
        gguf_fwd_eval(ctx, tok, n_tok, logits, &err)) {
        fprintf(stderr, "bench_forward: %s\n", err.message);
        return 3;
    }
    gguf_fwd_stats st;
    gguf_fwd_ctx_stats(ctx, &st);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru); /* before the bandwidth buffer exists */
    /* CPU time of the forward: on a shared machine the wall time mostly
     * measures the other processes */
    const double cpu = (double)(ru.ru_utime.tv_sec - ru0.ru_utime.tv_sec) +
                       (double)(ru.ru_utime.tv_usec - ru0.ru_utime.tv_usec) * 1e-6 +
                       (double)(ru.ru_stime.tv_sec - ru0.ru_stime.tv_sec) +
                       (double)(ru.ru_stime.tv_usec - ru0.ru_stime.tv_usec) * 1e-6;
    const double bw = read_bandwidth();
    const double rss = (double)ru.ru_maxrss * 1024.0;
    const double MiB = 1024.0 * 1024.0;
    printf("model            %s (%s, %lld blocks, n_embd %lld, %.2f GiB)\n", argv[1],
           hp->arch_name, (long long)hp->n_layer, (long long)hp->n_embd, (double)total / (MiB * 1024));
    printf("prompt           %d tokens, %d thread(s)\n", n_tok, threads);
    printf("time             %.2f s\n", st.seconds);
    printf("cpu time         %.2f s (user + system, all threads)\n", cpu);
    printf("tokens/s         %.2f wall, %.2f per cpu-second\n", n_tok / st.seconds, n_tok / cpu);
    printf("matmul rate      %.1f GFLOP per cpu-second (2 x params x tokens)\n",
           2.0 * (double)st.dequant_floats * n_tok / cpu / 1e9);
    printf("weights read     %.1f MiB/s  (%.2f GiB in total)\n",
           (double)st.weight_bytes / st.seconds / MiB, (double)st.weight_bytes / (MiB * 1024));
    printf("memory read bw   %.0f MiB/s  (sum of a 256 MiB buffer, best of 3)\n", bw / MiB);
    printf("streamed / bw    %.4f\n", (double)st.weight_bytes / st.seconds / bw);
    printf("peak RSS         %.1f MiB\n", rss / MiB);
    printf("largest block    blk.%lld: %.1f MiB stored, %.1f MiB as f32\n", (long long)max_layer,
           (double)max_bytes / MiB, (double)max_f32 / MiB);
    printf("peak dequantized %.1f MiB at once\n", (double)st.peak_weight_bytes / MiB);
    gguf_fwd_ctx_free(ctx);
    gguf_model_free(m);
    gguf_set_close(set);
    free(tok);
    free(logits);
    return 0;
}
