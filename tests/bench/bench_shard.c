/*
 * bench_shard: model open and shard-plan build times on a (replica) model.
 *
 *   gguf-gen replica ../shared/testdata/tensor-maps/GLM-5.1-Q4_K.map glm51.gguf
 *   build/tests/bench_shard glm51.gguf [REPS]
 *
 * Prints, for the set open, the model open, and a plan at tp 1, 2, 4, 8, 16 and at tp 8 / ep 8
 * (sglang), the best and median wall time over REPS runs (default 20), the number of plan
 * entries and pieces, and the largest rank's bytes. Also the time to materialize one rank's
 * kv_b_proj (F32) when the file has data (not for sparse replicas: zeros, but still timed).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf/file.h"
#include "gguf/model.h"
#include "gguf/shard.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *what, double *t, int n, const char *extra)
{
    qsort(t, (size_t)n, sizeof *t, cmp);
    printf("%-28s best %9.3f ms  median %9.3f ms  %s\n", what, t[0] * 1e3, t[n / 2] * 1e3,
           extra ? extra : "");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_shard MODEL.gguf [REPS]\n");
        return 2;
    }
    int reps = argc > 2 ? atoi(argv[2]) : 20;
    if (reps < 1)
        reps = 1;
    double *t = calloc((size_t)reps, sizeof *t);
    gguf_error err;
    gguf_set *s = NULL;
    gguf_model *m = NULL;
    for (int k = 0; k < reps; k++) {
        double t0 = now();
        if (gguf_set_open(&s, argv[1], NULL, &err)) {
            fprintf(stderr, "%s\n", err.message);
            return 2;
        }
        t[k] = now() - t0;
        if (k + 1 < reps)
            gguf_set_free(s);
    }
    report("set open (header parse)", t, reps, NULL);
    for (int k = 0; k < reps; k++) {
        double t0 = now();
        if (gguf_model_open(&m, s, &err)) {
            fprintf(stderr, "%s\n", err.message);
            return 2;
        }
        t[k] = now() - t0;
        if (k + 1 < reps)
            gguf_model_free(m);
    }
    char extra[160];
    snprintf(extra, sizeof extra, "%lld tensors, arch %s",
             (long long)gguf_model_tensor_count(m), gguf_model_hparams(m)->arch_name);
    report("model open (roles, checks)", t, reps, extra);

    const int cfg[][2] = {{1, 0}, {2, 0}, {4, 0}, {8, 0}, {16, 0}, {8, 8}};
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        gguf_shard_opts o = {.tp = cfg[c][0], .ep = cfg[c][1],
                             .engine = cfg[c][1] ? GGUF_ENGINE_SGLANG : GGUF_ENGINE_VLLM};
        gguf_shard_plan *p = NULL;
        for (int k = 0; k < reps; k++) {
            double t0 = now();
            if (gguf_shard_plan_create(&p, m, &o, &err)) {
                fprintf(stderr, "%s\n", err.message);
                return 2;
            }
            t[k] = now() - t0;
            if (k + 1 < reps)
                gguf_shard_plan_free(p);
        }
        long long pieces = 0;
        for (int64_t i = 0; i < gguf_shard_plan_count(p); i++)
            for (int r = 0; r < o.tp; r++)
                pieces += gguf_shard_plan_at(p, i)->ranks[r].n_pieces;
        char what[64];
        snprintf(what, sizeof what, "plan tp %d%s", o.tp, o.ep ? " ep 8 (sglang)" : "");
        snprintf(extra, sizeof extra, "%lld entries, %lld pieces, largest rank %.2f GiB",
                 (long long)gguf_shard_plan_count(p), pieces,
                 (double)gguf_shard_plan_max_rank_bytes(p, NULL) / (1u << 30));
        report(what, t, reps, extra);
        if (o.tp == 8 && !o.ep) {
            /* one rank's reassembled kv_b (F32) of the first MLA layer, if any */
            const gguf_shard_tensor *e = NULL;
            for (int64_t il = 0; il < gguf_model_hparams(m)->n_layer && !e; il++)
                e = gguf_shard_plan_get(p, il, GGUF_ROLE_ATTN_KV_B);
            if (e) {
                const gguf_shard_slice *sl = &e->ranks[1];
                size_t n = (size_t)(sl->ne[0] * sl->ne[1] * sl->ne[2] * sl->ne[3]);
                float *buf = malloc(n * sizeof *buf);
                int mr = reps < 5 ? reps : 5;
                for (int k = 0; k < mr; k++) {
                    double t0 = now();
                    if (gguf_shard_materialize(p, e - gguf_shard_plan_at(p, 0), 1, buf, n, &err)) {
                        fprintf(stderr, "%s\n", err.message);
                        return 2;
                    }
                    t[k] = now() - t0;
                }
                snprintf(extra, sizeof extra, "%s rank 1, %.1f MiB of F32", e->name,
                         (double)n * 4 / (1 << 20));
                report("materialize kv_b (tp 8)", t, mr, extra);
                free(buf);
            }
        }
        gguf_shard_plan_free(p);
    }
    gguf_model_free(m);
    gguf_set_free(s);
    free(t);
    return 0;
}
