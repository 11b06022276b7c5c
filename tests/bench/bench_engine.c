/*
 * What check-engine costs besides the reference forward pass: parsing an
 * engine's reply and comparing it with the reference, per position, for the
 * vocabularies of real models (Llama 2: 32000, Llama 3: 128256, GLM-4.5/5:
 * 151552), as a ratio to a baseline measured in the same run: one
 * log-softmax over the vocabulary in double, the least the comparison must do
 * per position.
 *
 *   bench_engine [POSITIONS] [TOP_K]      (default 512 positions, top 20)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf/engine.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A vLLM legacy reply (echo off): n positions, k alternatives each, ids as "token_id:N". */
static char *make_reply(int n, int k, int V, size_t *len)
{
    size_t cap = (size_t)n * (size_t)(k + 2) * 48 + 1024, at = 0;
    char *b = malloc(cap);
    at += (size_t)snprintf(b + at, cap - at, "{\"choices\":[{\"text\":\"x\",\"logprobs\":{\"tokens\":[");
    for (int i = 0; i < n; i++)
        at += (size_t)snprintf(b + at, cap - at, "%s\"token_id:%d\"", i ? "," : "", (i * 7919) % V);
    at += (size_t)snprintf(b + at, cap - at, "],\"token_logprobs\":[");
    for (int i = 0; i < n; i++)
        at += (size_t)snprintf(b + at, cap - at, "%s%.17g", i ? "," : "", -0.5 - 0.001 * i);
    at += (size_t)snprintf(b + at, cap - at, "],\"top_logprobs\":[");
    for (int i = 0; i < n; i++) {
        at += (size_t)snprintf(b + at, cap - at, "%s{", i ? "," : "");
        for (int j = 0; j < k; j++)
            at += (size_t)snprintf(b + at, cap - at, "%s\"token_id:%d\":%.17g", j ? "," : "",
                                   ((i * 7919) + j * 104729) % V, -0.5 - 0.25 * j);
        at += (size_t)snprintf(b + at, cap - at, "}");
    }
    at += (size_t)snprintf(b + at, cap - at, "]}}],\"usage\":{\"completion_tokens\":%d}}", n);
    *len = at;
    return b;
}

int main(int argc, char **argv)
{
    const int n = argc > 1 ? atoi(argv[1]) : 512, k = argc > 2 ? atoi(argv[2]) : 20;
    const int vocabs[3] = {32000, 128256, 151552};
    printf("positions %d, top-%d\n", n, k);
    printf("%8s %12s %14s %16s %12s %8s\n", "vocab", "reply bytes", "parse ms/pos",
           "compare ms/pos", "lsm ms/pos", "ratio");
    for (int v = 0; v < 3; v++) {
        const int V = vocabs[v];
        size_t len;
        char *body = make_reply(n, k, V, &len);
        float *logits = malloc((size_t)(n + 1) * (size_t)V * sizeof *logits);
        for (size_t i = 0; i < (size_t)(n + 1) * (size_t)V; i++)
            logits[i] = (float)((i * 2654435761u) % 1000) / 100.0f;
        gguf_error err;
        double t0 = now();
        gguf_engine_reply *r = NULL;
        if (gguf_engine_reply_parse(&r, GGUF_EP_COMPLETIONS, body, len, &err)) {
            fprintf(stderr, "parse: %s\n", err.message);
            return 1;
        }
        const double t_parse = now() - t0;
        gguf_engine_tol tol;
        gguf_engine_tol_preset(&tol, "default");
        gguf_engine_cmp *c = NULL;
        t0 = now();
        if (gguf_engine_compare(&c, r, 1, logits, n + 1, V, &tol, &err)) {
            fprintf(stderr, "compare: %s\n", err.message);
            return 1;
        }
        const double t_cmp = now() - t0;
        /* baseline: a log-softmax in double per row, nothing else */
        double *lsm = malloc((size_t)V * sizeof *lsm), sink = 0;
        t0 = now();
        for (int p = 0; p < n; p++) {
            const float *row = logits + (size_t)p * (size_t)V;
            double mx = -INFINITY, s = 0;
            for (int i = 0; i < V; i++)
                mx = row[i] > mx ? row[i] : mx;
            for (int i = 0; i < V; i++)
                s += exp((double)row[i] - mx);
            const double lse = mx + log(s);
            for (int i = 0; i < V; i++)
                lsm[i] = (double)row[i] - lse;
            sink += lsm[p % V];
        }
        const double t_lsm = now() - t0;
        printf("%8d %12zu %14.4f %16.4f %12.4f %8.2f%s\n", V, len, t_parse * 1e3 / n,
               t_cmp * 1e3 / n, t_lsm * 1e3 / n, t_cmp / t_lsm, sink == 0.123 ? " " : "");
        gguf_engine_cmp_free(c);
        gguf_engine_reply_free(r);
        free(lsm);
        free(logits);
        free(body);
    }
    return 0;
}
