/*
 * llama.cpp's own tokenizer test vectors, one test per vocabulary of
 * ../shared/testdata/vocab: each ggml-vocab-NAME.gguf.inp holds inputs
 * separated by "\n__ggml_vocab_test__\n", line i of .out the ids llama.cpp's
 * tokenizer gives input i (tests/test-tokenizer-0: no BOS/EOS, special tokens
 * not parsed). Every input must match exactly. Then every vector detokenizes
 * back to its text where the vocabulary can spell it (BPE: always). Skips
 * (77) when the folder is absent.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/file.h"
#include "gguf/forward.h"
#include "gguf/tokenize.h"
#include "tokenize/tokenize_internal.h"

static char vocab_dir[512], stories_path[768];

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

/* Runs every vector of vocabulary `name`; returns the number of inputs. */
static int run_vectors(const char *name, gguf_tok_type want_type, bool round_trip)
{
    static const char sep[] = "\n__ggml_vocab_test__\n";
    char path[768];
    size_t il, ol;
    snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf.inp", vocab_dir, name);
    char *inp = slurp(path, &il);
    snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf.out", vocab_dir, name);
    char *outs = slurp(path, &ol);
    snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf", vocab_dir, name);
    gguf_set *set;
    gguf_tokenizer *tok;
    gguf_error err;
    ck_assert_int_eq(gguf_set_open(&set, path, NULL, &err), 0);
    ck_assert_msg(gguf_tokenizer_create(&tok, set, &err) == 0, "%s", err.message);
    ck_assert_int_eq(gguf_tokenizer_type(tok), want_type);

    gguf_tokenize_opts opts;
    gguf_tokenize_opts_init(&opts);
    opts.add_bos = opts.add_eos = 0;
    opts.parse_special = false;
    int n_in = 0, n_match = 0, n_round = 0, n_spellable = 0;
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
        const size_t tl = (size_t)(end - at);
        ck_assert_msg(gguf_tokenize_text(tok, at, tl, &opts, &ids, &n, &err) == 0, "%s",
                      err.message);
        const bool ok = n == n_want && memcmp(ids, want, (size_t)n * sizeof *ids) == 0;
        n_match += ok;
        if (!ok) {
            fprintf(stderr, "%s vector %d ('%.*s'):\n  got ", name, n_in,
                    (int)(tl > 60 ? 60 : tl), at);
            for (int64_t k = 0; k < n; k++)
                fprintf(stderr, " %d", ids[k]);
            fprintf(stderr, "\n  want");
            for (int64_t k = 0; k < n_want; k++)
                fprintf(stderr, " %d", want[k]);
            fprintf(stderr, "\n");
        }
        /* back to text: exact where every character has tokens */
        char *back;
        size_t bl;
        ck_assert_int_eq(gguf_detokenize(tok, ids, n, NULL, &back, &bl, &err), 0);
        ck_assert_uint_eq(strlen(back), bl);
        bool spellable = true;
        for (int64_t k = 0; k < n; k++)
            spellable &= ids[k] != gguf_tokenizer_unk(tok);
        if (spellable) {
            n_spellable++;
            const bool same = bl == tl && !memcmp(back, at, tl);
            n_round += same;
            if (round_trip && !same)
                fprintf(stderr, "%s vector %d: detokenizes to '%s'\n", name, n_in, back);
        }
        free(back);
        free(ids);
        line = nl + 1;
    }
    printf("%s: %d of %d vectors match exactly; %d of %d spellable ones round-trip\n", name,
           n_match, n_in, n_round, n_spellable);
    ck_assert_int_gt(n_in, 40);
    ck_assert_int_eq(n_match, n_in);
    if (round_trip)
        ck_assert_int_eq(n_round, n_spellable);
    gguf_tokenizer_free(tok);
    gguf_set_free(set);
    free(inp);
    free(outs);
    return n_in;
}

#define VOCAB_TEST(fn, name, type, rt) \
    START_TEST(fn) { run_vectors(name, type, rt); } \
    END_TEST

VOCAB_TEST(vocab_gpt_2, "gpt-2", GGUF_TOK_BPE, true)
VOCAB_TEST(vocab_deepseek_llm, "deepseek-llm", GGUF_TOK_BPE, true)
VOCAB_TEST(vocab_deepseek_coder, "deepseek-coder", GGUF_TOK_BPE, true)
VOCAB_TEST(vocab_falcon, "falcon", GGUF_TOK_BPE, true)
VOCAB_TEST(vocab_starcoder, "starcoder", GGUF_TOK_BPE, true)
VOCAB_TEST(vocab_mpt, "mpt", GGUF_TOK_BPE, true)
VOCAB_TEST(vocab_refact, "refact", GGUF_TOK_BPE, true)
/* WPM lowercases, strips accents and drops whitespace: no round trip. */
VOCAB_TEST(vocab_bert_bge, "bert-bge", GGUF_TOK_WPM, false)
/* SPM: byte tokens spell everything; the space prefix is dropped again. */
VOCAB_TEST(vocab_phi_3, "phi-3", GGUF_TOK_SPM, true)
VOCAB_TEST(vocab_llama_spm, "llama-spm", GGUF_TOK_SPM, true)

/* Fragments field by field (the struct has padding). */
static bool same_frags(const tok_frag *a, const tok_frag *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i].off != b[i].off || a[i].len != b[i].len || a[i].id != b[i].id)
            return false;
    return true;
}

/* Real vocabularies with many special tokens (deepseek's 2400 user-defined
 * ones, mpt's runs of spaces, phi-3's rstrip, starcoder's controls): the
 * indexed partition gives what llama.cpp's scan per token gives, on texts
 * made of their special texts, whitespace and letters. */
START_TEST(partition_methods_agree)
{
    static const char *const names[] = {"deepseek-llm", "deepseek-coder", "mpt", "phi-3",
                                        "starcoder", "falcon"};
    for (size_t v = 0; v < sizeof names / sizeof *names; v++) {
        char path[768];
        snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf", vocab_dir, names[v]);
        gguf_set *set;
        gguf_tokenizer *t;
        gguf_error err;
        ck_assert_int_eq(gguf_set_open(&set, path, NULL, &err), 0);
        ck_assert_int_eq(gguf_tokenizer_create(&t, set, &err), 0);
        unsigned seed = 99;
        for (int round = 0; round < 400; round++) {
            char text[512];
            size_t len = 0;
            while (len < 400) {
                seed = seed * 1103515245u + 12345u;
                const unsigned k = seed >> 16;
                if (k % 3 == 0 && t->n_special) {
                    const gguf_str s = t->strs[t->special[k % (unsigned)t->n_special]];
                    if (s.len < 64) {
                        memcpy(text + len, s.data, s.len);
                        len += s.len;
                    }
                } else {
                    text[len++] = " \n\tab  x\xC3\xB8"[k % 11];
                }
            }
            for (int ps = 0; ps < 2; ps++) {
                tok_frag *f1, *f2;
                size_t n1, n2;
                ck_assert_int_eq(tok_special_partition_mode(t, text, len, ps, 1, &f1, &n1), 0);
                ck_assert_int_eq(tok_special_partition_mode(t, text, len, ps, 2, &f2, &n2), 0);
                ck_assert_msg(n1 == n2 && same_frags(f1, f2, n1), "%s", names[v]);
                free(f1);
                free(f2);
            }
        }
        gguf_tokenizer_free(t);
        gguf_set_free(set);
    }
}
END_TEST

/* The trained stories260K model (SPM, 512 tokens): the ids greedy decoding
 * writes for its own text, and pieces that agree with the forward module's
 * gguf_fwd_token_text (which the forward tool prints with today). */
START_TEST(stories_round_trip)
{
    gguf_set *set;
    gguf_tokenizer *tok;
    gguf_error err;
    int32_t *ids;
    int64_t n;
    ck_assert_int_eq(gguf_set_open(&set, stories_path, NULL, &err), 0);
    ck_assert_msg(gguf_tokenizer_create(&tok, set, &err) == 0, "%s", err.message);
    ck_assert_int_eq(gguf_tokenizer_n_vocab(tok), 512);
    ck_assert(gguf_tokenizer_add_bos(tok));
    const char *text = "Once upon a time";
    ck_assert_int_eq(gguf_tokenize(tok, text, strlen(text), true, &ids, &n, &err), 0);
    const int32_t want[] = {1, 403, 407, 261, 378};
    ck_assert_int_eq(n, 5);
    ck_assert_mem_eq(ids, want, sizeof want);
    free(ids);

    /* characters the 512-token vocabulary lacks go through byte tokens */
    const char *odd = "Ein \xC3\x84pfel, 3 \xE2\x82\xAC und \xF0\x9F\x98\x80!\n\tok <s> </s>";
    ck_assert_int_eq(gguf_tokenize(tok, odd, strlen(odd), false, &ids, &n, &err), 0);
    ck_assert_int_gt(n, 10);
    char back[512], *s;
    size_t at = 0, sl;
    for (int64_t i = 0; i < n; i++) {
        char piece[64];
        const char *p;
        size_t pl;
        const int l = gguf_fwd_token_text(gguf_set_meta(set), ids[i], piece, sizeof piece);
        ck_assert_int_ge(l, 0);
        ck_assert_int_eq(gguf_token_piece(tok, ids[i], false, &p, &pl), 0);
        ck_assert_uint_eq(pl, (size_t)l);
        ck_assert_mem_eq(p, piece, pl);
        char copy[64];
        ck_assert_int_eq(gguf_token_text(tok, ids[i], copy, sizeof copy), l);
        ck_assert_str_eq(copy, piece);
        memcpy(back + at, piece, (size_t)l);
        at += (size_t)l;
    }
    back[at] = 0;
    ck_assert_int_eq(back[0], ' '); /* the space prefix */
    ck_assert_int_eq(gguf_detokenize(tok, ids, n, NULL, &s, &sl, &err), 0);
    ck_assert_str_eq(s, back + 1);  /* dropped again by default */
    /* "<s>" and "</s>" were parsed as control tokens: hidden in the text */
    ck_assert_ptr_null(strstr(s, "<s>"));
    free(s);
    const gguf_detokenize_opts shown = {.special = true};
    ck_assert_int_eq(gguf_detokenize(tok, ids, n, &shown, &s, &sl, &err), 0);
    /* llama.cpp's SPM gives text after a special token a space prefix too */
    ck_assert_str_eq(s, "Ein \xC3\x84pfel, 3 \xE2\x82\xAC und \xF0\x9F\x98\x80!\n\tok <s>  </s>");
    free(s);
    /* gguf_token_text: cut to the buffer, always terminated; errors leave "" */
    char small[3];
    ck_assert_int_eq(gguf_token_text(tok, 403, small, sizeof small), 2);
    ck_assert_uint_eq(strlen(small), 2);
    ck_assert_int_eq(gguf_token_text(tok, 1, small, sizeof small), 0); /* BOS: control */
    ck_assert_int_eq(gguf_token_text(tok, 512, small, sizeof small), GGUF_E_INVALID);
    ck_assert_str_eq(small, "");
    ck_assert_int_eq(gguf_token_text(tok, 403, NULL, 0), GGUF_E_INVALID);
    /* one decoder: the bare vocabulary's text is the tokenizer's for every id */
    for (int32_t id = 0; id < 512; id++) {
        char a[64], b[64];
        if (gguf_tokenizer_token_type(tok, id) == GGUF_TOKEN_UNKNOWN)
            continue; /* <unk>: the vocabulary form shows it, gguf_token_text hides it */
        ck_assert_int_eq(gguf_fwd_token_text(gguf_set_meta(set), id, a, sizeof a),
                         gguf_token_text(tok, id, b, sizeof b));
        ck_assert_str_eq(a, b);
    }
    free(ids);
    gguf_tokenizer_free(tok);
    gguf_set_free(set);
}
END_TEST

int main(void)
{
    const char *shared = getenv("GGUFKIT_SHARED");
    char probe[768];
    if (shared)
        snprintf(probe, sizeof probe, "%s/vocab/ggml-vocab-gpt-2.gguf.inp", shared);
    if (shared)
        snprintf(stories_path, sizeof stories_path, "%s/models/stories260K.gguf", shared);
    if (!shared || access(probe, R_OK) != 0 || access(stories_path, R_OK) != 0) {
        printf("SKIP: test_tokenize_vocab needs GGUFKIT_SHARED with vocab/ (llama.cpp's "
               "ggml-vocab-*.gguf and their .inp/.out vectors) and models/stories260K.gguf\n");
        return 77;
    }
    snprintf(vocab_dir, sizeof vocab_dir, "%s/vocab", shared);
    Suite *s = suite_create("tokenize_vocab");
    TCase *tc = tcase_create("vectors");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, vocab_gpt_2);
    tcase_add_test(tc, vocab_deepseek_llm);
    tcase_add_test(tc, vocab_deepseek_coder);
    tcase_add_test(tc, vocab_falcon);
    tcase_add_test(tc, vocab_starcoder);
    tcase_add_test(tc, vocab_mpt);
    tcase_add_test(tc, vocab_refact);
    tcase_add_test(tc, vocab_bert_bge);
    tcase_add_test(tc, vocab_phi_3);
    tcase_add_test(tc, vocab_llama_spm);
    tcase_add_test(tc, stories_round_trip);
    tcase_add_test(tc, partition_methods_agree);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
