/*
 * bench_weight_read: the ways the CPU forward pass can read a model's weights
 * from the page cache, on THREADS threads, next to the memory read bandwidth
 * measured in the same run.
 *
 *   bench_weight_read FILE [THREADS=online CPUs] [--reps N]
 *
 * The file is cut into "tensors" of 16 MiB; each tensor is shared out among
 * the threads in contiguous runs, as the forward pass shares out a matmul's
 * rows, and every byte is summed (a stand-in for the dequantization that
 * reads it). The ways:
 *   pread       pread of 256 KiB windows into a buffer per thread (what the
 *               forward does when it drops pages);
 *   map-fault   the file's mmap, pages faulted in on first touch, dropped
 *               with MADV_DONTNEED per 4 MiB window;
 *   map-pop     the same, each window mapped in first with one
 *               MADV_POPULATE_READ (what the forward does for the parts of a
 *               split set it has no descriptor of);
 *   map-kept    the mmap with pages kept mapped after a first pass (no kernel
 *               work at all: the floor, at the price of an RSS as big as the
 *               file).
 * Each line: GB/s (wall, best of --reps), its ratio to the read bandwidth of
 * the same threads over anonymous memory, and user/system time and minor
 * faults per pass. Figures: docs/benchmarks.md, section "forward".
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

#define TENSOR (16u << 20)
#define READ_WIN (256u << 10)
#define MAP_WIN (4u << 20)

enum { PREAD, MAP_FAULT, MAP_POP, MAP_KEPT, ANON, N_WAYS };
static const char *const names[N_WAYS] = {"pread", "map-fault", "map-pop", "map-kept",
                                          "anonymous"};

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

typedef struct job {
    int way, fd, threads;
    const uint8_t *map; /* the file's mapping, or the anonymous buffer */
    size_t size;
    pthread_barrier_t *bar;
} job;

typedef struct arg {
    const job *j;
    int index;
    uint8_t *buf;
    uint64_t sum;
} arg;

static uint64_t sum(const uint8_t *p, size_t n)
{
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        uint64_t v[4];
        memcpy(v, p + i, sizeof v);
        s0 += v[0];
        s1 += v[1];
        s2 += v[2];
        s3 += v[3];
    }
    for (; i < n; i++)
        s0 += p[i];
    return s0 + s1 + s2 + s3;
}

static void span(const uint8_t *b, size_t n, uintptr_t *pb, size_t *len)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t lo = (uintptr_t)b & ~(page - 1), hi = ((uintptr_t)b + n + page - 1) & ~(page - 1);
    *pb = lo;
    *len = hi - lo;
}

static void *run(void *v)
{
    arg *a = v;
    const job *j = a->j;
    pthread_barrier_wait(j->bar);
    for (size_t t0 = 0; t0 < j->size; t0 += TENSOR) {
        const size_t tn = j->size - t0 < TENSOR ? j->size - t0 : TENSOR;
        size_t b = t0 + tn * (size_t)a->index / (size_t)j->threads;
        const size_t e = t0 + tn * (size_t)(a->index + 1) / (size_t)j->threads;
        const size_t win = j->way == PREAD ? READ_WIN : MAP_WIN;
        for (; b < e; b += win) {
            const size_t n = e - b < win ? e - b : win;
            uintptr_t pb;
            size_t len;
            span(j->map + b, n, &pb, &len);
            if (j->way == PREAD) {
                size_t got = 0;
                while (got < n) {
                    const ssize_t r = pread(j->fd, a->buf + got, n - got, (off_t)(b + got));
                    if (r <= 0)
                        break;
                    got += (size_t)r;
                }
                a->sum += sum(a->buf, n);
                continue;
            }
            if (j->way == MAP_POP)
                madvise((void *)pb, len, MADV_POPULATE_READ);
            a->sum += sum(j->map + b, n);
            if (j->way == MAP_FAULT || j->way == MAP_POP)
                madvise((void *)pb, len, MADV_DONTNEED);
        }
    }
    return NULL;
}

/* One pass of `way` on `threads` threads: seconds (wall). */
static double pass(int way, int fd, const uint8_t *map, size_t size, int threads)
{
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)threads + 1);
    job j = {way, fd, threads, map, size, &bar};
    pthread_t *th = calloc((size_t)threads, sizeof *th);
    arg *a = calloc((size_t)threads, sizeof *a);
    for (int i = 0; i < threads; i++) {
        a[i] = (arg){&j, i, way == PREAD ? malloc(READ_WIN) : NULL, 0};
        pthread_create(&th[i], NULL, run, &a[i]);
    }
    pthread_barrier_wait(&bar);
    const double t0 = now();
    volatile uint64_t sink = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        sink += a[i].sum;
        free(a[i].buf);
    }
    const double t = now() - t0;
    (void)sink;
    pthread_barrier_destroy(&bar);
    free(th);
    free(a);
    return t;
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN), reps = 3, n_pos = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (n_pos == 0 && argv[i][0] != '-')
            path = argv[i], n_pos++;
        else if (n_pos == 1 && argv[i][0] != '-')
            threads = atoi(argv[i]), n_pos++;
        else
            path = NULL, n_pos = 9;
    }
    if (!path || threads < 1 || reps < 1) {
        fprintf(stderr, "usage: bench_weight_read FILE [THREADS=online CPUs] [--reps N]\n");
        return 2;
    }
    const int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size < (off_t)TENSOR) {
        fprintf(stderr, "bench_weight_read: %s: cannot open, or smaller than 16 MiB\n", path);
        return 2;
    }
    const size_t size = (size_t)st.st_size;
    const uint8_t *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    uint8_t *anon = malloc(size);
    if (map == MAP_FAILED || !anon) {
        fprintf(stderr, "bench_weight_read: cannot map or allocate %zu bytes\n", size);
        return 3;
    }
    for (size_t i = 0; i < size; i += 4096) /* page it in: the baseline reads memory */
        anon[i] = (uint8_t)i;
    pass(PREAD, fd, map, size, threads); /* the file into the page cache */
    printf("file        %s (%.2f GiB), %d thread(s), best of %d\n", path,
           (double)size / (1 << 30), threads, reps);
    static const int order[N_WAYS] = {ANON, PREAD, MAP_FAULT, MAP_POP, MAP_KEPT};
    double bw = 0;
    for (int k = 0; k < N_WAYS; k++) {
        const int way = order[k];
        const uint8_t *src = way == ANON ? anon : map;
        if (way == MAP_KEPT)
            pass(way, fd, map, size, threads); /* map everything once */
        double best = 0, user = 0, sys = 0;
        long flt = 0;
        for (int r = 0; r < reps; r++) {
            struct rusage r0, r1;
            getrusage(RUSAGE_SELF, &r0);
            const double t = pass(way, fd, src, size, threads);
            getrusage(RUSAGE_SELF, &r1);
            best = best == 0 || t < best ? t : best;
            user += tv(r1.ru_utime) - tv(r0.ru_utime);
            sys += tv(r1.ru_stime) - tv(r0.ru_stime);
            flt += r1.ru_minflt - r0.ru_minflt;
        }
        const double gbs = (double)size / best / 1e9;
        if (way == ANON)
            bw = gbs;
        printf("  %-10s %7.2f GB/s  %5.2f of anonymous  user %.3f s  system %.3f s  faults %ld "
               "(per pass)\n",
               names[way], gbs, gbs / bw, user / reps, sys / reps, flt / reps);
    }
    munmap((void *)map, size);
    free(anon);
    close(fd);
    return 0;
}
