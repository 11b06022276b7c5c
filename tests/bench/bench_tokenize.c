/*
 * Benchmark of the tokenizer: one thread, the whole text in one call.
 *   bench_tokenize VOCAB.gguf TEXT_FILE [REPS] [--special]
 * Prints: tokenizer creation time, tokens, best-of-REPS tokenize time, tokens/s and MB/s,
 * and the detokenize time. Special tokens in the text are not parsed unless --special
 * (HF's comparison in bench_tokenize.sh has none registered).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf/file.h"
#include "gguf/tokenize.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_tokenize VOCAB.gguf TEXT_FILE [REPS] [--special]\n");
        return 2;
    }
    const int reps = argc > 3 && argv[3][0] != '-' ? atoi(argv[3]) : 5;
    const bool special = argc > 3 && !strcmp(argv[argc - 1], "--special");
    FILE *fp = fopen(argv[2], "rb");
    if (!fp) {
        perror(argv[2]);
        return 2;
    }
    fseek(fp, 0, SEEK_END);
    const long len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *text = malloc((size_t)len + 1);
    if (!text || fread(text, 1, (size_t)len, fp) != (size_t)len) {
        fprintf(stderr, "cannot read %s\n", argv[2]);
        return 3;
    }
    fclose(fp);

    gguf_set *set;
    gguf_tokenizer *tok;
    gguf_error err;
    double t0 = now();
    if (gguf_set_open(&set, argv[1], NULL, &err) || gguf_tokenizer_create(&tok, set, &err)) {
        fprintf(stderr, "%s\n", err.message);
        return 2;
    }
    const double t_create = now() - t0;
    gguf_tokenize_opts o;
    gguf_tokenize_opts_init(&o);
    o.add_bos = o.add_eos = 0;
    o.parse_special = special;
    double best = 1e30;
    int64_t n = 0;
    int32_t *ids = NULL;
    for (int r = 0; r < reps; r++) {
        free(ids);
        t0 = now();
        if (gguf_tokenize_text(tok, text, (size_t)len, &o, &ids, &n, &err)) {
            fprintf(stderr, "%s\n", err.message);
            return 2;
        }
        const double dt = now() - t0;
        if (dt < best)
            best = dt;
    }
    char *back;
    size_t bl;
    t0 = now();
    if (gguf_detokenize(tok, ids, n, NULL, &back, &bl, &err)) {
        fprintf(stderr, "%s\n", err.message);
        return 2;
    }
    const double t_detok = now() - t0;
    printf("%s %s pre %s: create %.3f s, %ld bytes -> %lld tokens, tokenize %.4f s (best of %d): "
           "%.0f tokens/s, %.2f MB/s; detokenize %.4f s%s\n",
           argv[1], gguf_tokenizer_model(tok), gguf_tokenizer_pre(tok), t_create, len,
           (long long)n, best, reps, (double)n / best, (double)len / best / 1e6, t_detok,
           bl == (size_t)len && !memcmp(back, text, bl) ? "" : " (text differs)");
    free(back);
    free(ids);
    free(text);
    gguf_tokenizer_free(tok);
    gguf_set_free(set);
    return 0;
}
