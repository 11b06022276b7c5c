/*
 * bench_forward: the CPU reference forward pass on all cores, every figure
 * next to its baseline measured in the same run.
 *
 *   bench_forward MODEL.gguf [N_TOKENS=64] [THREADS=online CPUs] [--reps N]
 *   bench_forward --once MODEL.gguf N_TOKENS THREADS     (one eval, for perf/callgrind)
 *
 * One run prints:
 *   1. memory read bandwidth of THREADS threads (each sums its own part of a
 *      buffer of 512 MiB or more), and of one thread;
 *   2. a one-token pass on 1 thread and on THREADS threads (best of --reps,
 *      each in a fresh context): seconds, GB/s of (quantized) weights read,
 *      and their ratio to the bandwidth of 1. (goal of issue 16: >= 0.5 on
 *      all threads);
 *   3. an N_TOKENS pass on 1 thread and on THREADS threads: seconds and the
 *      speed-up (goal of issue 16: >= 12 from 1 to 16 threads);
 * with the user and system time, page faults and peak RSS of each phase.
 * The file is read once first, so every pass finds it in the page cache.
 * Make the model with
 *     gguf-gen model --arch llama --preset 1b --type Q8_0 llama-1b.gguf
 * Figures: docs/benchmarks.md, section "forward".
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "gguf/forward.h"
#include "gguf/model.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double tv(struct timeval t)
{
    return (double)t.tv_sec + (double)t.tv_usec * 1e-6;
}

/* ---- what a phase cost the process: CPU time, faults, peak RSS ---- */

typedef struct phase {
    struct rusage ru;
    double t;
} phase;

/* Start a phase; the kernel's high-water mark of RSS is reset (clear_refs 5)
 * so that each phase reports its own peak. */
static void phase_begin(phase *p)
{
    int fd = open("/proc/self/clear_refs", O_WRONLY);
    if (fd >= 0) {
        if (write(fd, "5", 1) != 1) { /* older kernels: the peak is the process's */
        }
        close(fd);
    }
    getrusage(RUSAGE_SELF, &p->ru);
    p->t = now();
}

static long vm_hwm_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    if (kib < 0) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        kib = ru.ru_maxrss;
    }
    return kib;
}

static void phase_end(const phase *p, const char *what)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("  %-26s user %.2f s, system %.2f s, page faults %ld minor / %ld major, "
           "peak RSS %.1f MiB\n",
           what, tv(ru.ru_utime) - tv(p->ru.ru_utime), tv(ru.ru_stime) - tv(p->ru.ru_stime),
           ru.ru_minflt - p->ru.ru_minflt, ru.ru_majflt - p->ru.ru_majflt,
           (double)vm_hwm_kib() / 1024.0);
}

/* ---- memory read bandwidth ---- */

typedef struct bw_arg {
    uint64_t *p;
    size_t n;
    pthread_barrier_t *bar;
    double t0, t1;
    uint64_t sum;
} bw_arg;

static void *bw_main(void *v)
{
    bw_arg *a = v;
    for (size_t i = 0; i < a->n; i++) /* first touch by the reading thread */
        a->p[i] = i;
    pthread_barrier_wait(a->bar);
    a->t0 = now();
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= a->n; i += 4) {
        s0 += a->p[i];
        s1 += a->p[i + 1];
        s2 += a->p[i + 2];
        s3 += a->p[i + 3];
    }
    a->t1 = now();
    a->sum = s0 + s1 + s2 + s3;
    return NULL;
}

/* Bytes per second with which `threads` threads read a buffer of `bytes`
 * (each its own contiguous part), best of `reps`. */
static double read_bandwidth(int threads, size_t bytes, int reps)
{
    const size_t per = bytes / (size_t)threads / 32 * 4; /* uint64 per thread, whole lines */
    uint64_t *buf = malloc(per * (size_t)threads * sizeof(uint64_t));
    pthread_t *th = calloc((size_t)threads, sizeof *th);
    bw_arg *a = calloc((size_t)threads, sizeof *a);
    double best = 0;
    volatile uint64_t sink = 0;
    for (int rep = 0; buf && th && a && rep < reps; rep++) {
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, (unsigned)threads);
        for (int i = 0; i < threads; i++) {
            a[i] = (bw_arg){buf + per * (size_t)i, per, &bar, 0, 0, 0};
            if (i > 0)
                pthread_create(&th[i], NULL, bw_main, &a[i]);
        }
        bw_main(&a[0]);
        double t0 = a[0].t0, t1 = a[0].t1;
        for (int i = 1; i < threads; i++) {
            pthread_join(th[i], NULL);
            t0 = a[i].t0 < t0 ? a[i].t0 : t0;
            t1 = a[i].t1 > t1 ? a[i].t1 : t1;
            sink += a[i].sum;
        }
        pthread_barrier_destroy(&bar);
        const double bw = (double)(per * (size_t)threads * sizeof(uint64_t)) / (t1 - t0);
        best = bw > best ? bw : best;
    }
    (void)sink;
    free(buf);
    free(th);
    free(a);
    return best;
}

/* ---- forward passes ---- */

/* Read the whole file once, so every pass finds it in the page cache. */
static void warm(const char *path)
{
    int fd = open(path, O_RDONLY);
    static char buf[1 << 20];
    while (fd >= 0 && read(fd, buf, sizeof buf) > 0) {
    }
    if (fd >= 0)
        close(fd);
}

/* One eval of n tokens in a fresh context; its stats in *st. */
static int pass(const gguf_model *m, int n, int threads, gguf_fwd_stats *st)
{
    const gguf_hparams *hp = gguf_model_hparams(m);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n);
    float *logits = malloc(sizeof(float) * (size_t)n * (size_t)hp->n_vocab);
    gguf_fwd_ctx *ctx = NULL;
    gguf_error err;
    int rc = !tok || !logits;
    for (int i = 0; !rc && i < n; i++)
        tok[i] = (int32_t)((i * 37 + 1) % hp->n_vocab);
    gguf_fwd_opts o = {0};
    o.n_threads = threads;
    o.drop_pages = true;
    if (!rc && ((rc = gguf_fwd_ctx_create(&ctx, m, &o, &err)) ||
                (rc = gguf_fwd_eval(ctx, tok, n, logits, &err))))
        fprintf(stderr, "bench_forward: %s\n", err.message);
    if (!rc)
        gguf_fwd_ctx_stats(ctx, st);
    gguf_fwd_ctx_free(ctx);
    free(tok);
    free(logits);
    return rc ? 3 : 0;
}

static int once(const gguf_model *m, int n, int threads)
{
    gguf_fwd_stats st;
    phase ph;
    phase_begin(&ph);
    if (pass(m, n, threads, &st))
        return 3;
    printf("%d tokens, %d thread(s): %.3f s, %.2f GB/s of weights (%.2f GiB), peak "
           "dequantized %.2f MiB\n",
           n, threads, st.seconds, (double)st.weight_bytes / st.seconds / 1e9,
           (double)st.weight_bytes / (1 << 30), (double)st.peak_weight_bytes / (1 << 20));
    phase_end(&ph, "");
    return 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: bench_forward MODEL.gguf [N_TOKENS=64] [THREADS=all] [--reps N]\n"
                    "       bench_forward --once MODEL.gguf N_TOKENS THREADS\n");
    return 2;
}

int main(int argc, char **argv)
{
    const char *pos[3] = {NULL, NULL, NULL};
    int n_pos = 0, reps = 3;
    bool one = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--once"))
            one = true;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (argv[i][0] == '-' || n_pos == 3)
            return usage();
        else
            pos[n_pos++] = argv[i];
    }
    if (!pos[0] || reps < 1)
        return usage();
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    const int n_tok = pos[1] ? atoi(pos[1]) : 64;
    const int threads = pos[2] ? atoi(pos[2]) : (int)(cpus > 0 ? cpus : 1);
    if (n_tok < 1 || threads < 1)
        return usage();
    gguf_error err;
    gguf_set *set = NULL;
    gguf_model *m = NULL;
    if (gguf_set_open(&set, pos[0], NULL, &err) || gguf_model_open(&m, set, &err)) {
        fprintf(stderr, "bench_forward: %s\n", err.message);
        return 2;
    }
    int rc = 0;
    if (one) {
        rc = once(m, n_tok, threads);
        goto done;
    }
    const gguf_hparams *hp = gguf_model_hparams(m);
    uint64_t total = 0;
    for (int64_t i = 0; i < gguf_model_tensor_count(m); i++)
        total += gguf_model_tensor_at(m, i)->t->nbytes;
    printf("model       %s (%s, %lld blocks, n_embd %lld, %.2f GiB of tensors)\n", pos[0],
           hp->arch_name, (long long)hp->n_layer, (long long)hp->n_embd,
           (double)total / (1 << 30));
    printf("machine     %ld online CPUs; passes on %d thread(s)\n\n", cpus, threads);
    warm(pos[0]);

    /* 1. the baseline: what THREADS threads can read */
    phase ph;
    const size_t bw_bytes = (size_t)512 << 20;
    const double bw_all = read_bandwidth(threads, bw_bytes, 5);
    const double bw_one = read_bandwidth(1, bw_bytes, 3);
    printf("memory read bandwidth (sum of a 512 MiB buffer, best of 5 / 3)\n");
    printf("  %d thread(s)  %8.2f GB/s\n", threads, bw_all / 1e9);
    printf("  1 thread     %8.2f GB/s\n\n", bw_one / 1e9);

    /* 2. one token: streaming the weights, on 1 thread and on all */
    printf("one-token pass, best of %d (%.2f GiB of weights read per pass)\n", reps,
           (double)total / (1 << 30));
    double gbs = 0;
    for (int k = 0; k < 2 && !rc; k++) {
        const int th = k == 0 ? 1 : threads;
        gguf_fwd_stats st, best = {0};
        phase_begin(&ph);
        for (int r = 0; r < reps && !rc; r++)
            if (!(rc = pass(m, 1, th, &st)) && (best.seconds == 0 || st.seconds < best.seconds))
                best = st;
        if (rc)
            goto done;
        gbs = (double)best.weight_bytes / best.seconds;
        printf("  %2d thread(s) %8.4f s  %8.2f GB/s of weights = %.3f of the %s read bandwidth\n",
               th, best.seconds, gbs / 1e9, gbs / (k == 0 ? bw_one : bw_all),
               k == 0 ? "1-thread" : "all-thread");
        /* where the best pass's time went: the streamed matmuls' wall time, how much of it
         * the threads worked (the rest: waiting for the slowest, hand-offs), the drops */
        printf("     matmuls:  %llu streamed, %.4f s of the pass; threads busy %.4f s = %.0f%% of "
               "%d x that; drops %.4f s\n",
               (unsigned long long)best.stream_calls, best.stream_seconds,
               best.stream_busy_seconds,
               best.stream_seconds > 0 ? 100.0 * best.stream_busy_seconds /
                                             (th * best.stream_seconds)
                                       : 0.0,
               th, best.drop_seconds);
        phase_end(&ph, "   all passes:");
    }
    printf("  weights / all-thread read bandwidth = %.3f   (goal >= 0.5)\n\n", gbs / bw_all);

    /* 3. N tokens: 1 thread against THREADS */
    gguf_fwd_stats s1, sn;
    printf("%d-token pass\n", n_tok);
    phase_begin(&ph);
    if ((rc = pass(m, n_tok, 1, &s1)))
        goto done;
    printf("  1 thread     %8.3f s (%.2f tokens/s)\n", s1.seconds, n_tok / s1.seconds);
    phase_end(&ph, "1 thread:");
    phase_begin(&ph);
    if ((rc = pass(m, n_tok, threads, &sn)))
        goto done;
    printf("  %d thread(s) %8.3f s (%.2f tokens/s)\n", threads, sn.seconds, n_tok / sn.seconds);
    phase_end(&ph, "all threads:");
    printf("  speed-up 1 -> %d threads = %.2f   (goal >= 12 on 16 threads)\n", threads,
           s1.seconds / sn.seconds);
    printf("  peak dequantized weights %.2f MiB\n", (double)sn.peak_weight_bytes / (1 << 20));
done:
    gguf_model_free(m);
    gguf_set_free(set);
    return rc;
}
