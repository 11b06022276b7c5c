/*
 * bench_dequant: dequantization speed per type, in GB/s of float32 output,
 * for the scalar reference and the best path on one thread, and the best path
 * on all threads (a gguf_dequant_pool), next to memcpy bandwidth measured in
 * the same run (single thread, and all threads over the same buffer sizes).
 *
 *   bench_dequant [--elements N] [--threads N] [--reps N] [--types T,T,...]
 *
 * Results and the command used: docs/benchmarks.md, "Dequantization (CPU)".
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gguf/blocks.h"
#include "gguf/dequant.h"
#include "gguf/types.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng_state = 0x1234567;
static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Random blocks with realistic (normal, small) f16 scales: denormal or NaN
 * scales would measure the CPU's slow paths, not the code. */
static void fill(uint32_t type, uint8_t *buf, uint64_t n_blocks, uint32_t type_size)
{
    for (uint64_t i = 0; i < n_blocks * type_size; i += 8) {
        const uint64_t r = rnd();
        memcpy(buf + i, &r, n_blocks * type_size - i < 8 ? n_blocks * type_size - i : 8);
    }
    size_t off[2];
    int n = 0;
    switch (type) {
    case GGUF_TYPE_F16:
    case GGUF_TYPE_BF16:
        for (uint64_t i = 0; i < n_blocks; i++) { /* 0x2xxx: normal, about 0.001..0.06 */
            buf[2 * i + 1] = (uint8_t)(0x20 | (buf[2 * i + 1] & 0x8F));
            if (type == GGUF_TYPE_BF16)
                buf[2 * i + 1] = (uint8_t)(0x3C | (buf[2 * i + 1] & 0x80));
        }
        return;
    case GGUF_TYPE_F32:
        for (uint64_t i = 0; i < n_blocks; i++)
            buf[4 * i + 3] = (uint8_t)(0x3C | (buf[4 * i + 3] & 0x80));
        return;
    case GGUF_TYPE_F64:
        for (uint64_t i = 0; i < n_blocks; i++)
            buf[8 * i + 7] = (uint8_t)(0x3F | (buf[8 * i + 7] & 0x80));
        return;
    case GGUF_TYPE_Q8_K:
        for (uint64_t i = 0; i < n_blocks; i++) {
            const float d = 0.001f;
            memcpy(buf + i * type_size, &d, 4);
        }
        return;
    case GGUF_TYPE_Q4_1: off[0] = 0; off[1] = 2; n = 2; break;
    case GGUF_TYPE_Q5_1: off[0] = 0; off[1] = 2; n = 2; break;
    case GGUF_TYPE_Q2_K: off[0] = offsetof(gguf_block_q2_k, d); off[1] = off[0] + 2; n = 2; break;
    case GGUF_TYPE_Q3_K: off[0] = offsetof(gguf_block_q3_k, d); n = 1; break;
    case GGUF_TYPE_Q4_K:
    case GGUF_TYPE_Q5_K: off[0] = 0; off[1] = 2; n = 2; break;
    case GGUF_TYPE_Q6_K: off[0] = offsetof(gguf_block_q6_k, d); n = 1; break;
    case GGUF_TYPE_TQ1_0: off[0] = offsetof(gguf_block_tq1_0, d); n = 1; break;
    case GGUF_TYPE_TQ2_0: off[0] = offsetof(gguf_block_tq2_0, d); n = 1; break;
    case GGUF_TYPE_IQ1_M: /* d lives in the scale nibbles: set a normal one */
        for (uint64_t i = 0; i < n_blocks; i++) {
            uint8_t *s = buf + i * type_size + offsetof(gguf_block_iq1_m, scales);
            s[1] = (uint8_t)((s[1] & 0x0F) | 0x00);
            s[3] = (uint8_t)((s[3] & 0x0F) | 0x00);
            s[5] = (uint8_t)((s[5] & 0x0F) | 0x10);
            s[7] = (uint8_t)((s[7] & 0x0F) | 0x20);
        }
        return;
    case GGUF_TYPE_MXFP4:
        for (uint64_t i = 0; i < n_blocks; i++)
            buf[i * type_size] = (uint8_t)(110 + buf[i * type_size] % 16);
        return;
    case GGUF_TYPE_NVFP4:
        for (uint64_t i = 0; i < n_blocks; i++)
            for (int s = 0; s < 4; s++)
                buf[i * type_size + s] = (uint8_t)(0x20 + buf[i * type_size + s] % 0x20);
        return;
    case GGUF_TYPE_I8:
    case GGUF_TYPE_I16:
    case GGUF_TYPE_I32:
    case GGUF_TYPE_I64:
        return;
    case GGUF_TYPE_IQ1_S:
    case GGUF_TYPE_IQ2_XXS:
    case GGUF_TYPE_IQ2_XS:
    case GGUF_TYPE_IQ2_S:
    case GGUF_TYPE_IQ3_XXS:
    case GGUF_TYPE_IQ3_S:
    case GGUF_TYPE_IQ4_NL:
    case GGUF_TYPE_IQ4_XS:
    default: off[0] = 0; n = 1; break; /* d first */
    }
    for (uint64_t i = 0; i < n_blocks; i++)
        for (int k = 0; k < n; k++) {
            uint8_t *p = buf + i * type_size + off[k];
            p[1] = (uint8_t)(0x14 | (p[1] & 0x83)); /* exponent 5..8: 2^-10..2^-7 */
        }
}

typedef struct bench_cfg {
    int64_t elements;
    int threads;
    int reps;
} bench_cfg;

/* best-of-reps seconds of one configuration */
static double time_rows(uint32_t type, const uint8_t *src, float *dst, int64_t ne0,
                        int64_t rows, int path, gguf_dequant_pool *pool, int reps)
{
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        gguf_dequant_opts o = {.path = path, .pool = pool};
        const double t0 = now();
        if (gguf_dequant_rows(type, src, 0, dst, ne0, rows, &o, NULL) != 0)
            return -1;
        const double t = now() - t0;
        if (t < best)
            best = t;
    }
    return best;
}

typedef struct copy_job {
    const uint8_t *src;
    uint8_t *dst;
    size_t n;
} copy_job;

static void *copy_part(void *p)
{
    copy_job *j = p;
    memcpy(j->dst, j->src, j->n);
    return NULL;
}

static double memcpy_gbs(size_t bytes, int threads, int reps)
{
    uint8_t *a = malloc(bytes), *b = malloc(bytes);
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    double best = 1e30;
    pthread_t th[256];
    copy_job jobs[256];
    for (int r = 0; r < reps; r++) {
        const double t0 = now();
        for (int i = 0; i < threads; i++) {
            const size_t lo = bytes * (size_t)i / (size_t)threads, hi = bytes * (size_t)(i + 1) / (size_t)threads;
            jobs[i] = (copy_job){a + lo, b + lo, hi - lo};
            if (i > 0)
                pthread_create(&th[i], NULL, copy_part, &jobs[i]);
        }
        copy_part(&jobs[0]);
        for (int i = 1; i < threads; i++)
            pthread_join(th[i], NULL);
        const double t = now() - t0;
        if (t < best)
            best = t;
    }
    free(a);
    free(b);
    return (double)bytes / best / 1e9;
}

int main(int argc, char **argv)
{
    bench_cfg cfg = {.elements = 16 << 20, .threads = (int)sysconf(_SC_NPROCESSORS_ONLN), .reps = 3};
    const char *types = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--elements") && i + 1 < argc)
            cfg.elements = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            cfg.threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            cfg.reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--types") && i + 1 < argc)
            types = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--elements N] [--threads N] [--reps N] [--types Q4_K,Q8_0]\n",
                    argv[0]);
            return 2;
        }
    }
    if (cfg.threads < 1 || cfg.threads > 256)
        cfg.threads = 1;
    cfg.elements = (cfg.elements / 1024 + 1) * 1024; /* whole 256- and 1024-element rows */
    const int64_t ne0 = 4096;
    const int64_t rows = (cfg.elements + ne0 - 1) / ne0;
    const int64_t n = rows * ne0;
    float *dst = malloc(sizeof(float) * (size_t)n);
    memset(dst, 0, sizeof(float) * (size_t)n); /* fault the pages in before timing */
    gguf_dequant_pool *pool = NULL;
    gguf_dequant_pool_create(&pool, cfg.threads, NULL);

    const size_t out_bytes = sizeof(float) * (size_t)n;
    const double mc1 = memcpy_gbs(out_bytes, 1, cfg.reps);
    const double mcn = memcpy_gbs(out_bytes, cfg.threads, cfg.reps);
    printf("# %lld elements a run (%.0f MiB of float32), best of %d; best path: %s; %d threads\n",
           (long long)n, (double)out_bytes / 1048576.0, cfg.reps,
           gguf_dequant_path_name(gguf_dequant_best_path()), cfg.threads);
    printf("# memcpy of the same size: %.2f GB/s on 1 thread, %.2f GB/s on %d threads\n", mc1, mcn,
           cfg.threads);
    printf("| type | in bits/elem | scalar 1T GB/s | %s 1T GB/s | %s %dT GB/s | %dT vs memcpy %dT |\n",
           gguf_dequant_path_name(gguf_dequant_best_path()),
           gguf_dequant_path_name(gguf_dequant_best_path()), cfg.threads, cfg.threads, cfg.threads);
    printf("|---|---:|---:|---:|---:|---:|\n");
    for (uint32_t type = 0; type < GGUF_TYPE_COUNT; type++) {
        const gguf_type_info *ti = gguf_type_get(type);
        if (!ti || !ti->valid)
            continue;
        if (types) {
            const char *p = strstr(types, ti->name);
            const size_t l = strlen(ti->name);
            if (!p || (p != types && p[-1] != ',') || (p[l] && p[l] != ','))
                continue;
        }
        const uint64_t n_blocks = (uint64_t)n / ti->block_size;
        uint8_t *src = malloc(n_blocks * ti->type_size);
        fill(type, src, n_blocks, ti->type_size);
        const double ts = time_rows(type, src, dst, ne0, rows, GGUF_DEQUANT_SCALAR, NULL, cfg.reps);
        const double tb = time_rows(type, src, dst, ne0, rows, GGUF_DEQUANT_AUTO, NULL, cfg.reps);
        const double tn = time_rows(type, src, dst, ne0, rows, GGUF_DEQUANT_AUTO, pool, cfg.reps);
        const double gb = (double)out_bytes / 1e9;
        printf("| %s | %.3g | %.2f | %.2f | %.2f | %.0f%% |\n", ti->name,
               8.0 * ti->type_size / ti->block_size, gb / ts, gb / tb, gb / tn,
               100.0 * (gb / tn) / mcn);
        fflush(stdout);
        free(src);
    }
    gguf_dequant_pool_free(pool);
    free(dst);
    return 0;
}
