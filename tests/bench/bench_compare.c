/*
 * bench_compare: cost of activation records and of comparing them, at the size of a
 * large deployment (defaults: GLM-5-like n_embd 6144, 78 blocks, 8 capture points a
 * block, 16 tokens, logits of 154880 ids; one rank).
 *
 *   bench_compare [--layers N] [--embd N] [--tokens N] [--points N] [--vocab N]
 *                 [--ranks N] [--level Z] [--dir DIR]
 *
 * Prints the record size, write time plain and zstd (MB/s of capture data), open time,
 * and compare time of two records (MB/s of floats read from both sides).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gguf/compare.h"
#include "gguf/record.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *const ops[] = {"attn_norm", "attn_out", "attn_residual", "ffn_norm",
                                  "moe_weights", "ffn_out", "residual", "extra"};

/* Activation-like data: a smooth-ish random walk, not compressible by repetition.
 * The same seed gives the same values; noise perturbs them by a relative amount. */
static void fill(float *buf, int64_t n, uint32_t *s, float noise)
{
    float v = 0;
    for (int64_t i = 0; i < n; i++) {
        *s = *s * 1664525u + 1013904223u;
        v = 0.9f * v + (float)((int32_t)(*s >> 8) - (1 << 23)) / (float)(1 << 23);
        buf[i] = v * (noise != 0 ? 1 + noise * (float)((i % 7) - 3) : 1);
    }
}

static int write_record(const char *path, int layers, int points, int64_t embd, int64_t tokens,
                        int64_t vocab, uint32_t ranks, bool zstd, int level, float noise,
                        double *secs, double *mb)
{
    int32_t *tok = malloc((size_t)tokens * sizeof *tok);
    for (int64_t i = 0; i < tokens; i++)
        tok[i] = (int32_t)(i + 1);
    gguf_record_meta m = {.tokens = tok, .n_tokens = (uint64_t)tokens, .backend = "bench",
                          .precision = "f32", .tp = ranks};
    gguf_record_opts o = {.zstd = zstd, .zstd_level = level, .overwrite = true, .no_sync = true};
    int64_t big = embd > vocab ? embd : vocab;
    float *buf = malloc((size_t)(big * tokens) * sizeof *buf);
    uint32_t s = 12345;
    gguf_record_writer *w;
    gguf_error err;
    double t0 = now(), bytes = 0;
    int rc = gguf_record_writer_create(&w, path, &m, &o, &err);
    for (int l = 0; !rc && l < layers; l++)
        for (int p = 0; !rc && p < points; p++)
            for (uint32_t r = 0; !rc && r < ranks; r++) {
                char name[64];
                snprintf(name, sizeof name, "blk.%d.%s", l, ops[p % 8]);
                int64_t ne[2] = {embd, tokens};
                fill(buf, embd * tokens, &s, noise);
                rc = gguf_record_add(w, name, r, 2, ne, buf, &err);
                bytes += (double)(embd * tokens) * 4;
            }
    for (uint32_t r = 0; !rc && r < ranks; r++) {
        int64_t ne[2] = {vocab, tokens};
        fill(buf, vocab * tokens, &s, noise);
        rc = gguf_record_add(w, "logits", r, 2, ne, buf, &err);
        bytes += (double)(vocab * tokens) * 4;
    }
    if (!rc)
        rc = gguf_record_writer_finish(w, &err);
    gguf_record_writer_free(w);
    *secs = now() - t0;
    *mb = bytes / 1e6;
    if (rc)
        fprintf(stderr, "bench_compare: %s\n", err.message);
    free(buf);
    free(tok);
    return rc;
}

int main(int argc, char **argv)
{
    int layers = 78, points = 8, level = 0;
    int64_t embd = 6144, tokens = 16, vocab = 154880;
    uint32_t ranks = 1;
    const char *dir = "/tmp";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--layers")) layers = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--embd")) embd = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--tokens")) tokens = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--points")) points = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--vocab")) vocab = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--ranks")) ranks = (uint32_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--level")) level = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--dir")) dir = argv[i + 1];
        else {
            fprintf(stderr, "bench_compare: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    char pa[4096], pb[4096], pz[4096];
    snprintf(pa, sizeof pa, "%s/bench_compare_a.%d.gguf", dir, (int)getpid());
    snprintf(pb, sizeof pb, "%s/bench_compare_b.%d.gguf", dir, (int)getpid());
    snprintf(pz, sizeof pz, "%s/bench_compare_a.%d.gguf.zst", dir, (int)getpid());
    double ta, tb, tz, mb;
    if (write_record(pa, layers, points, embd, tokens, vocab, ranks, false, 0, 0, &ta, &mb) ||
        write_record(pb, layers, points, embd, tokens, vocab, ranks, false, 0, 1e-6f, &tb, &mb) ||
        write_record(pz, layers, points, embd, tokens, vocab, ranks, true, level, 0, &tz, &mb))
        return 3;
    struct stat sa, sz;
    stat(pa, &sa);
    stat(pz, &sz);
    printf("record: %d layers x %d points x %u rank(s), %lld tokens, n_embd %lld, vocab %lld: "
           "%.1f MB of captures\n", layers, points, ranks, (long long)tokens, (long long)embd,
           (long long)vocab, mb);
    printf("write plain: %.3f s (%.0f MB/s), file %.1f MB\n", ta, mb / ta, (double)sa.st_size / 1e6);
    printf("write zstd (level %d): %.3f s (%.1f MB/s), file %.1f MB (%.1f%%)\n",
           level ? level : 3, tz, mb / tz, (double)sz.st_size / 1e6,
           100.0 * (double)sz.st_size / (double)sa.st_size);
    gguf_record *a, *b, *z;
    gguf_error err;
    double t0 = now();
    if (gguf_record_open(&a, pa, &err) || gguf_record_open(&b, pb, &err))
        return fprintf(stderr, "%s\n", err.message), 3;
    double t_open = now() - t0;
    t0 = now();
    if (gguf_record_open(&z, pz, &err))
        return fprintf(stderr, "%s\n", err.message), 3;
    double t_openz = now() - t0;
    printf("open two plain records: %.4f s; open zstd: %.3f s (%.0f MB/s)\n", t_open, t_openz,
           mb / t_openz);
    gguf_cmp_result *res;
    for (int k = 0; k < 2; k++) {
        t0 = now();
        int rc = gguf_compare(&res, a, k ? b : z, NULL, &err);
        double t = now() - t0;
        printf("compare A vs %s: %.3f s (%.0f MB/s of floats from both sides), %lld entries, "
               "status %s\n", k ? "B (perturbed)" : "zstd copy", t, 2 * mb / t,
               (long long)res->n_entries, gguf_status_name(rc));
        gguf_cmp_result_free(res);
    }
    gguf_record_free(a);
    gguf_record_free(b);
    gguf_record_free(z);
    unlink(pa);
    unlink(pb);
    unlink(pz);
    return 0;
}
