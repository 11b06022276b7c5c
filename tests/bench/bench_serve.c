/*
 * bench_serve MODEL.gguf REF_FORWARD [N_PROMPT=32] [N_GEN=16] [REQUESTS=40] [CLIENTS=4]
 *
 * What `ref-forward serve` adds to the bare forward pass, on the same model
 * and the same tokens, in one run:
 *   bare        gguf_fwd_ctx_create + eval of the prompt + N_GEN-1 greedy evals
 *               (what one completion needs of the forward, nothing else)
 *   handle      gguf_serve_handle() in process over the same forward: JSON in,
 *               log-softmax scoring (echo + logprobs 5: every position), JSON out
 *   http        `REF_FORWARD serve MODEL --port 0` over loopback with libcurl,
 *               one client after the other (latency)
 *   http xN     CLIENTS clients at once (requests per second; one forward at a
 *               time, so this shows the queue, not parallel speed-up)
 * bare and handle run interleaved (one of each per round) so that a busy
 * machine slows both alike. Each line: median latency, requests per second,
 * CPU seconds per request (of this process for bare and handle, of the
 * server process, from /proc, for http), and the median and CPU ratios to
 * bare: CPU time is the figure that a loaded machine disturbs least.
 * Figures: docs/benchmarks.md, section "serve".
 */
#include <curl/curl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gguf/forward.h"
#include "gguf/model.h"
#include "gguf/serve.h"

extern char **environ;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* utime + stime of a process, in seconds */
static double cpu_of(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return 0;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static double bare_med, bare_cpu;

static void report(const char *what, double *lat, int n, double wall, double cpu)
{
    qsort(lat, (size_t)n, sizeof *lat, cmp_d);
    const double med = lat[n / 2], cpu_per = cpu / n;
    if (bare_med == 0) {
        bare_med = med;
        bare_cpu = cpu_per;
    }
    printf("%-10s %10.3f %8.1f %10.3f %8.3f %8.3f\n", what, 1e3 * med, n / wall, 1e3 * cpu_per,
           med / bare_med, cpu_per / bare_cpu);
}

/* ---- the forward, as serve's callbacks use it ---- */

typedef struct be {
    const gguf_model *m;
    gguf_fwd_ctx *ctx;
    const gguf_file *meta;
} be;

static int b_reset(void *u, gguf_error *err)
{
    be *b = u;
    gguf_fwd_ctx_free(b->ctx);
    b->ctx = NULL;
    return gguf_fwd_ctx_create(&b->ctx, b->m, NULL, err);
}

static int b_eval(void *u, const int32_t *t, int64_t n, float *lg, gguf_error *err)
{
    be *b = u;
    return gguf_fwd_eval(b->ctx, t, n, lg, err);
}

static int b_text(void *u, int32_t id, char *buf, size_t size)
{
    be *b = u;
    return gguf_fwd_token_text(b->meta, id, buf, size);
}

/* ---- HTTP clients ---- */

static size_t sink(char *p, size_t s, size_t n, void *u)
{
    return s * n;
}

typedef struct client {
    const char *url, *body;
    int n;
    double *lat;
    int fails;
} client;

static void *run_client(void *arg)
{
    client *c = arg;
    CURL *h = curl_easy_init();
    struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_URL, c->url);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, c->body);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink);
    for (int i = 0; i < c->n; i++) {
        const double t0 = now();
        long code = 0;
        if (curl_easy_perform(h) != CURLE_OK ||
            curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code) != CURLE_OK || code != 200)
            c->fails++;
        c->lat[i] = now() - t0;
    }
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_serve MODEL.gguf REF_FORWARD [N_PROMPT=32] [N_GEN=16] "
                        "[REQUESTS=40] [CLIENTS=4]\n");
        return 2;
    }
    const int n_prompt = argc > 3 ? atoi(argv[3]) : 32, n_gen = argc > 4 ? atoi(argv[4]) : 16;
    const int reqs = argc > 5 ? atoi(argv[5]) : 40, clients = argc > 6 ? atoi(argv[6]) : 4;
    if (n_prompt < 1 || n_gen < 1 || reqs < 1 || clients < 1 || clients > 64)
        return 2;
    gguf_error err = {0};
    gguf_set *set = NULL;
    gguf_model *m = NULL;
    if (gguf_set_open(&set, argv[1], NULL, &err) || gguf_model_open(&m, set, &err)) {
        fprintf(stderr, "bench_serve: %s\n", err.message);
        return 1;
    }
    const int64_t V = gguf_model_hparams(m)->n_vocab;
    int32_t *tok = malloc((size_t)n_prompt * sizeof *tok);
    char *body = malloc((size_t)n_prompt * 12 + 256);
    int at = sprintf(body, "{\"prompt\": [");
    for (int i = 0; i < n_prompt; i++) {
        tok[i] = i == 0 ? 1 : (int32_t)((i * 37 + 11) % V);
        at += sprintf(body + at, "%s%d", i ? ", " : "", tok[i]);
    }
    sprintf(body + at, "], \"max_tokens\": %d, \"logprobs\": 5, \"echo\": true, "
                       "\"ignore_eos\": true}", n_gen);
    printf("model %s, vocab %lld, prompt %d tokens, %d generated, %d requests, %d clients\n",
           argv[1], (long long)V, n_prompt, n_gen, reqs, clients);
    printf("%-10s %10s %8s %10s %8s %8s\n", "mode", "median ms", "req/s", "cpu ms/req",
           "x bare", "cpu x");
    double *lat = malloc((size_t)reqs * sizeof *lat), *lat2 = malloc((size_t)reqs * sizeof *lat);
    float *lg = malloc((size_t)(n_prompt * V) * sizeof *lg);

    be b = {m, NULL, gguf_set_meta(set)};
    gguf_serve_model sm = {0};
    sm.user = &b;
    sm.n_vocab = V;
    sm.bos = sm.eos = -1;
    sm.reset = b_reset;
    sm.eval = b_eval;
    sm.token_text = b_text;
    gguf_serve_opts so = {0};
    so.model_name = "bench";
    so.max_tokens = n_prompt + n_gen + 1;
    gguf_serve *srv = NULL;
    if (gguf_serve_create(&srv, &sm, &so, &err))
        return fprintf(stderr, "bench_serve: %s\n", err.message), 1;
    gguf_serve_request rq = {"POST", "/v1/completions", NULL, body, strlen(body), false};
    double wall_bare = 0, wall_handle = 0, cpu_bare = 0, cpu_handle = 0;
    for (int r = 0; r < reqs; r++) {
        /* bare forward: what one completion needs of it */
        double t0 = now(), c0 = cpu_now();
        gguf_fwd_ctx *ctx = NULL;
        if (gguf_fwd_ctx_create(&ctx, m, NULL, &err) || gguf_fwd_eval(ctx, tok, n_prompt, lg, &err))
            return fprintf(stderr, "bench_serve: %s\n", err.message), 1;
        const float *last = lg + (int64_t)(n_prompt - 1) * V;
        for (int g = 0; g + 1 < n_gen; g++) {
            int32_t next = (int32_t)gguf_fwd_argmax(last, V);
            if (gguf_fwd_eval(ctx, &next, 1, lg, &err))
                return fprintf(stderr, "bench_serve: %s\n", err.message), 1;
            last = lg;
        }
        gguf_fwd_ctx_free(ctx);
        lat[r] = now() - t0;
        wall_bare += lat[r];
        cpu_bare += cpu_now() - c0;
        /* the request layer in process, same forward */
        gguf_serve_response resp;
        t0 = now();
        c0 = cpu_now();
        if (gguf_serve_handle(srv, &rq, &resp, &err) || resp.status != 200)
            return fprintf(stderr, "bench_serve: %d %s\n", resp.status, resp.body), 1;
        lat2[r] = now() - t0;
        wall_handle += lat2[r];
        cpu_handle += cpu_now() - c0;
        gguf_serve_response_clear(&resp);
    }
    report("bare", lat, reqs, wall_bare, cpu_bare);
    report("handle", lat2, reqs, wall_handle, cpu_handle);
    gguf_serve_free(srv);
    gguf_fwd_ctx_free(b.ctx);

    /* over HTTP: the real server */
    int pfd[2];
    if (pipe(pfd))
        return 1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
    posix_spawn_file_actions_addclose(&fa, pfd[0]);
    char *sargv[] = {argv[2], "serve", "--port", "0", "-q", argv[1], NULL};
    pid_t pid;
    if (posix_spawn(&pid, argv[2], &fa, NULL, sargv, environ))
        return fprintf(stderr, "bench_serve: cannot run %s\n", argv[2]), 1;
    close(pfd[1]);
    FILE *out = fdopen(pfd[0], "r");
    char line[256] = "", url[300];
    if (!fgets(line, sizeof line, out) || strncmp(line, "listening on ", 13) != 0)
        return fprintf(stderr, "bench_serve: the server did not start: %s\n", line), 1;
    line[strcspn(line, "\n")] = 0;
    snprintf(url, sizeof url, "%s/v1/completions", line + 13);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    client one = {url, body, reqs, lat, 0};
    double w0 = now(), c0 = cpu_of(pid);
    run_client(&one);
    report("http", lat, reqs, now() - w0, cpu_of(pid) - c0);
    client cs[64];
    pthread_t th[64];
    double *all = malloc((size_t)(reqs + clients) * sizeof *all);
    const int per = (reqs + clients - 1) / clients;
    w0 = now();
    c0 = cpu_of(pid);
    for (int i = 0; i < clients; i++) {
        cs[i] = (client){url, body, per, all + i * per, 0};
        pthread_create(&th[i], NULL, run_client, &cs[i]);
    }
    int n_all = 0, fails = one.fails;
    for (int i = 0; i < clients; i++) {
        pthread_join(th[i], NULL);
        n_all += cs[i].n;
        fails += cs[i].fails;
    }
    const double wall = now() - w0, cpu = cpu_of(pid) - c0;
    char label[32];
    snprintf(label, sizeof label, "http x%d", clients);
    report(label, all, n_all, wall, cpu);
    kill(pid, SIGTERM);
    int st = 0;
    waitpid(pid, &st, 0);
    fclose(out);
    if (fails)
        printf("%d requests failed\n", fails);
    curl_global_cleanup();
    free(all);
    free(lat);
    free(lat2);
    free(lg);
    free(tok);
    free(body);
    gguf_model_free(m);
    gguf_set_free(set);
    return fails ? 1 : 0;
}
