/* SentencePiece tokenizer: llama.cpp's reference vectors for the llama-spm
 * vocabulary, and a round trip through a real model's vocabulary. Needs
 * ../shared/testdata (GGUFKIT_SHARED); skips with 77 without it. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/file.h"
#include "gguf/forward.h"
#include "gguf/tokenize.h"

static char shared_dir[512];

static char *slurp(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    ck_assert_msg(fp != NULL, "cannot open %s", path);
    fseek(fp, 0, SEEK_END);
    const long sz = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *b = malloc((size_t)sz + 1);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(fread(b, 1, (size_t)sz, fp), (size_t)sz);
    b[sz] = 0;
    fclose(fp);
    *len = (size_t)sz;
    return b;
}

static void open_tok(const char *rel, gguf_set **set, gguf_tokenizer **tok)
{
    char path[768];
    gguf_error err;
    snprintf(path, sizeof path, "%s/%s", shared_dir, rel);
    ck_assert_int_eq(gguf_set_open(set, path, NULL, &err), 0);
    ck_assert_msg(gguf_tokenizer_create(tok, *set, &err) == 0, "%s", err.message);
}

/* Each input is followed by "\n__ggml_vocab_test__\n"; line i of .out holds
 * the ids of input i (no BOS), space-separated. */
START_TEST(spm_reference_vectors)
{
    static const char sep[] = "\n__ggml_vocab_test__\n";
    char path[768];
    size_t il, ol;
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-llama-spm.gguf.inp", shared_dir);
    char *inp = slurp(path, &il);
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-llama-spm.gguf.out", shared_dir);
    char *outs = slurp(path, &ol);
    gguf_set *set;
    gguf_tokenizer *tok;
    open_tok("vocab/ggml-vocab-llama-spm.gguf", &set, &tok);

    int n_in = 0, n_match = 0;
    char *at = inp, *line = outs;
    for (char *end; (end = strstr(at, sep)) != NULL; at = end + sizeof sep - 1, n_in++) {
        char *nl = strchr(line, '\n');
        ck_assert_msg(nl != NULL, ".out has fewer lines than .inp has inputs");
        *nl = 0;
        int32_t want[4096];
        int64_t n_want = 0;
        for (char *p = line, *q; n_want < 4096; p = q) {
            const long v = strtol(p, &q, 10);
            if (q == p)
                break;
            want[n_want++] = (int32_t)v;
        }
        int32_t *ids;
        int64_t n;
        gguf_error err;
        ck_assert_int_eq(gguf_tokenize(tok, at, (size_t)(end - at), false, &ids, &n, &err), 0);
        const bool ok = n == n_want && memcmp(ids, want, (size_t)n * sizeof *ids) == 0;
        if (ok)
            n_match++;
        else
            fprintf(stderr, "vector %d ('%.*s'): %lld ids, want %lld\n", n_in,
                    (int)(end - at > 60 ? 60 : end - at), at, (long long)n, (long long)n_want);
        free(ids);
        line = nl + 1;
    }
    printf("llama-spm reference vectors: %d of %d match exactly\n", n_match, n_in);
    ck_assert_int_gt(n_in, 40);
    ck_assert_int_eq(n_match, n_in);
    gguf_tokenizer_free(tok);
    gguf_set_close(set);
    free(inp);
    free(outs);
}
END_TEST

static void detok(const gguf_set *set, const int32_t *ids, int64_t n, char *out, size_t size)
{
    size_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        char piece[64];
        const int l = gguf_fwd_token_text(gguf_set_meta(set), ids[i], piece, sizeof piece);
        ck_assert_int_ge(l, 0);
        ck_assert_uint_lt(at + (size_t)l, size);
        memcpy(out + at, piece, (size_t)l);
        at += (size_t)l;
    }
    out[at] = 0;
}

START_TEST(stories_round_trip)
{
    gguf_set *set;
    gguf_tokenizer *tok;
    gguf_error err;
    int32_t *ids;
    int64_t n;
    char back[512];
    open_tok("models/stories260K.gguf", &set, &tok);
    ck_assert_int_eq(gguf_tokenizer_n_vocab(tok), 512);
    ck_assert(gguf_tokenizer_add_bos(tok));
    const char *text = "Once upon a time";
    ck_assert_int_eq(gguf_tokenize(tok, text, strlen(text), true, &ids, &n, &err), 0);
    /* BOS, then the ids greedy decoding of this model writes for this text */
    const int32_t want[] = {1, 403, 407, 261, 378};
    ck_assert_int_eq(n, 5);
    ck_assert_mem_eq(ids, want, sizeof want);
    detok(set, ids, n, back, sizeof back);
    ck_assert_str_eq(back, " Once upon a time"); /* the space prefix comes back */
    free(ids);

    /* Characters the 512-token vocabulary lacks go through byte tokens and
     * come back unchanged. */
    const char *odd = "Ein Äpfel, 3 € und \xF0\x9F\x98\x80!\n\tok";
    ck_assert_int_eq(gguf_tokenize(tok, odd, strlen(odd), false, &ids, &n, &err), 0);
    ck_assert_int_gt(n, 10);
    detok(set, ids, n, back, sizeof back);
    ck_assert_str_eq(back + 1, odd);
    ck_assert_int_eq(back[0], ' ');
    free(ids);

    /* Empty text: nothing, or BOS alone (no space prefix) */
    ck_assert_int_eq(gguf_tokenize(tok, "", 0, false, &ids, &n, &err), 0);
    ck_assert_int_eq(n, 0);
    ck_assert_ptr_nonnull(ids);
    free(ids);
    ck_assert_int_eq(gguf_tokenize(tok, NULL, 0, true, &ids, &n, &err), 0);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(ids[0], gguf_tokenizer_bos(tok));
    free(ids);
    ck_assert_int_eq(gguf_tokenize(NULL, "a", 1, false, &ids, &n, &err), GGUF_E_INVALID);
    gguf_tokenizer_free(tok);
    gguf_tokenizer_free(NULL);
    gguf_set_close(set);
}
END_TEST

START_TEST(bpe_and_wpm_unsupported)
{
    static const char *const vocabs[] = {"vocab/ggml-vocab-gpt-2.gguf",
                                         "vocab/ggml-vocab-bert-bge.gguf"};
    for (size_t i = 0; i < sizeof vocabs / sizeof *vocabs; i++) {
        char path[768];
        gguf_set *set;
        gguf_tokenizer *tok = (gguf_tokenizer *)&tok;
        gguf_error err;
        snprintf(path, sizeof path, "%s/%s", shared_dir, vocabs[i]);
        ck_assert_int_eq(gguf_set_open(&set, path, NULL, &err), 0);
        ck_assert_int_eq(gguf_tokenizer_create(&tok, set, &err), GGUF_E_UNSUPPORTED);
        ck_assert_ptr_null(tok);
        ck_assert_msg(strstr(err.message, "tokenizer.ggml.model") != NULL, "%s", err.message);
        gguf_set_close(set);
    }
}
END_TEST

int main(void)
{
    const char *shared = getenv("GGUFKIT_SHARED");
    char probe[768];
    if (shared)
        snprintf(probe, sizeof probe, "%s/vocab/ggml-vocab-llama-spm.gguf.inp", shared);
    if (!shared || access(probe, R_OK) != 0 ||
        snprintf(probe, sizeof probe, "%s/models/stories260K.gguf", shared) < 0 ||
        access(probe, R_OK) != 0) {
        printf("SKIP: test_tokenize needs GGUFKIT_SHARED with vocab/ and models/stories260K.gguf\n");
        return 77;
    }
    snprintf(shared_dir, sizeof shared_dir, "%s", shared);
    Suite *s = suite_create("tokenize");
    TCase *tc = tcase_create("spm");
    tcase_add_test(tc, spm_reference_vectors);
    tcase_add_test(tc, stories_round_trip);
    tcase_add_test(tc, bpe_and_wpm_unsupported);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
