/*
 * Pre-tokenizers without a shipped vocabulary: the shared gpt-2 vocabulary is
 * written again with another tokenizer.ggml.pre (or none), and the words each
 * pre-tokenizer cuts are compared with splits worked out by hand from the
 * regexes llama.cpp gives that value (src/llama-vocab.cpp; the reasoning for
 * each case is in the comment above it). Then the whole tokenizer must give
 * ids that spell the text back. Needs ../shared/testdata/vocab (skips, 77).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/file.h"
#include "gguf/tokenize.h"
#include "gguf/write.h"
#include "helper_buf.h"
#include "tokenize/tokenize_internal.h"

static char gpt2_path[768];
static char *tmp_dir;

/* The gpt-2 vocabulary with tokenizer.ggml.pre = pre (NULL: no such key). */
static gguf_tokenizer *with_pre(const char *pre, gguf_set **set)
{
    static int seq;
    char out[1024];
    snprintf(out, sizeof out, "%s/vocab-%d.gguf", tmp_dir, seq++);
    gguf_file *src;
    gguf_error err;
    ck_assert_int_eq(gguf_file_open(&src, gpt2_path, NULL, &err), 0);
    gguf_writer *w;
    const gguf_writer_opts wo = {.no_sync = true};
    ck_assert_int_eq(gguf_writer_create(&w, out, &wo, &err), 0);
    for (int64_t i = 0; i < gguf_file_kv_count(src); i++) {
        const gguf_kv *kv = gguf_file_kv_at(src, i);
        if (strcmp(kv->key, "tokenizer.ggml.pre"))
            ck_assert_int_eq(gguf_writer_add_kv(w, kv->key, &kv->value, &err), 0);
    }
    if (pre)
        ck_assert_int_eq(gguf_writer_add_str(w, "tokenizer.ggml.pre", pre, &err), 0);
    ck_assert_msg(gguf_writer_finish(w, &err) == 0, "%s", err.message);
    gguf_writer_free(w);
    gguf_file_free(src);
    gguf_tokenizer *t;
    ck_assert_int_eq(gguf_set_open(set, out, NULL, &err), 0);
    ck_assert_msg(gguf_tokenizer_create(&t, *set, &err) == 0, "%s", err.message);
    ck_assert_str_eq(gguf_tokenizer_pre(t), pre ? pre : "default");
    return t;
}

typedef struct split_case {
    const char *text;
    const char *words[24]; /* NULL-terminated */
} split_case;

static void check_splits(const char *pre, const split_case *cases, size_t n)
{
    gguf_set *set;
    gguf_tokenizer *t = with_pre(pre, &set);
    for (size_t c = 0; c < n; c++) {
        const char *text = cases[c].text;
        size_t *offs, *lens, nw;
        gguf_error err;
        ck_assert_int_eq(tok_bpe_words(t, text, strlen(text), &offs, &lens, &nw, &err), 0);
        size_t want = 0;
        while (cases[c].words[want])
            want++;
        bool ok = nw == want;
        for (size_t k = 0; ok && k < nw; k++)
            ok = lens[k] == strlen(cases[c].words[k]) &&
                 !memcmp(text + offs[k], cases[c].words[k], lens[k]);
        if (!ok) {
            fprintf(stderr, "%s: '%s' splits as", pre ? pre : "(none)", text);
            for (size_t k = 0; k < nw; k++)
                fprintf(stderr, " [%.*s]", (int)lens[k], text + offs[k]);
            fprintf(stderr, "\n");
        }
        ck_assert_msg(ok, "%s: case %zu", pre ? pre : "(none)", c);
        free(offs);
        free(lens);

        /* the whole tokenizer: ids that spell the text, at least one per word */
        int32_t *ids;
        int64_t ni;
        char *back;
        size_t bl;
        ck_assert_int_eq(gguf_tokenize_text(t, text, strlen(text), NULL, &ids, &ni, &err), 0);
        ck_assert_int_ge(ni, (int64_t)want);
        ck_assert_int_eq(gguf_detokenize(t, ids, ni, NULL, &back, &bl, &err), 0);
        ck_assert_str_eq(back, text);
        free(back);
        free(ids);
    }
    gguf_tokenizer_free(t);
    gguf_set_free(set);
}

/* The same texts for every family: */
#define T_MIXED "Hello world 1234567 don't"
#define T_CODE "    x = foo(bar)\n\n\tend"
#define T_CJK "你好世界 🚀🚀 ok"
#define T_ARABIC "مرحبا ١٢٣٤"
#define T_MARK "e\xCC\x81te" /* e + U+0301 COMBINING ACUTE + te */
#define T_SPACES "a  \n  b"
#define T_CASE "HelloWorld XMLHttp don't"
#define T_TILDE "~\xC3\xA9 x~Y"  /* ~é x~Y */
#define T_HAN "HelloWorld中文abc"

/*
 * llama3 (and llama-bpe, glm4, chatglm-bpe, dbrx): (?:'s|'t|...) |
 * [^\r\n\p{L}\p{N}]?\p{L}+ | \p{N}{1,3} | " ?[^\s\p{L}\p{N}]+[\r\n]*" |
 * \s*[\r\n]+ | \s+(?!\S) | \s+
 */
static const split_case llama3_cases[] = {
    /* a space before digits is alone (\s+); digits go by three; "'t" is a
     * contraction of its own */
    {T_MIXED, {"Hello", " world", " ", "123", "456", "7", " don", "'t"}},
    /* four spaces before "x": \s+(?!\S) leaves one for " x"; "(" is the
     * optional non-letter before "bar"; ")" takes the newlines after it;
     * a tab may lead a word */
    {T_CODE, {"   ", " x", " =", " foo", "(bar", ")\n\n", "\tend"}},
    /* CJK are letters; emoji are neither letters nor digits */
    {T_CJK, {"你好世界", " 🚀🚀", " ok"}},
    /* Arabic-Indic digits are \p{N} */
    {T_ARABIC, {"مرحبا", " ", "١٢٣", "٤"}},
    /* a combining mark is not \p{L}: it ends "e" and leads "te" */
    {T_MARK, {"e", "\xCC\x81te"}},
    /* \s*[\r\n]+ ends at the last newline; one space stays for " b" */
    {T_SPACES, {"a", "  \n", " ", " b"}},
};

/* qwen2 (and deepseek-r1-qwen, stablelm2): llama3's regex with \p{N} alone. */
static const split_case qwen2_cases[] = {
    {T_MIXED, {"Hello", " world", " ", "1", "2", "3", "4", "5", "6", "7", " don", "'t"}},
    {T_ARABIC, {"مرحبا", " ", "١", "٢", "٣", "٤"}},
    {T_MARK, {"e", "\xCC\x81te"}},
};

/* qwen35: [\p{L}\p{M}]+ words, so the mark stays inside. */
static const split_case qwen35_cases[] = {
    {T_MARK, {"e\xCC\x81te"}},
    {T_MIXED, {"Hello", " world", " ", "1", "2", "3", "4", "5", "6", "7", " don", "'t"}},
};

/*
 * deepseek-v3: three regexes, each splitting the pieces of the one before:
 * \p{N}{1,3}; [一-龥぀-ゟ゠-ヿ]+; then "[ASCII punctuation][A-Za-z]+ |
 * [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ | " ?[\p{P}\p{S}]+[\r\n]*" | ...".
 */
static const split_case deepseek_v3_cases[] = {
    /* digits first; the space before them is left at the end of "Hello world " */
    {T_MIXED, {"Hello", " world", " ", "123", "456", "7", " don", "'t"}},
    /* the mark is inside [\p{L}\p{M}]+ */
    {T_MARK, {"e\xCC\x81te"}},
    /* kanji, hiragana and katakana are one piece */
    {"日本語のテキスト", {"日本語のテキスト"}},
    /* "=" and ";//" are punctuation/symbol runs; "1" was cut out first */
    {"x=1;//ok", {"x", "=", "1", ";//", "ok"}},
    /* llama.cpp's '~' is not \p{S} here: it may lead a word ("~é"), and "~Y"
     * is the ASCII-punctuation-plus-letters case */
    {T_TILDE, {"~\xC3\xA9", " x", "~Y"}},
};

/* kimi-k2: llama.cpp's own splitter: Han runs, then whole non-Han letter runs
 * with an optional contraction (no split at case changes). */
static const split_case kimi_k2_cases[] = {
    {T_MIXED, {"Hello", " world", " ", "123", "456", "7", " don't"}},
    {T_HAN, {"HelloWorld", "中文", "abc"}},
    {T_CJK, {"你好世界", " 🚀🚀", " ok"}},
};

/* gpt-4o (and llama4): upper* lower+ | upper+ lower* words with an optional
 * contraction, where "upper" is a letter that is not a-z and "lower" one
 * that is not A-Z; \p{N}{1,3}. */
static const split_case gpt4o_cases[] = {
    {T_CASE, {"Hello", "World", " XMLHttp", " don't"}},
    {T_MIXED, {"Hello", " world", " ", "123", "456", "7", " don't"}},
};

/* tekken: the same words without contractions; \p{N} alone. */
static const split_case tekken_cases[] = {
    {T_CASE, {"Hello", "World", " XMLHttp", " don", "'t"}},
    {T_MIXED, {"Hello", " world", " ", "1", "2", "3", "4", "5", "6", "7", " don", "'t"}},
};

/* command-r and smollm (starcoder's): \p{N} first, then GPT-2's regex. */
static const split_case starcoder_cases[] = {
    {T_MIXED, {"Hello", " world", " ", "1", "2", "3", "4", "5", "6", "7", " don", "'t"}},
    /* GPT-2's regex has no \s*[\r\n]+: \s+(?!\S) takes all but the last space */
    {T_SPACES, {"a", "  \n ", " b"}},
};

/* olmo (GPT-2's regex alone): " ?\p{N}+" keeps the digits whole. */
static const split_case olmo_cases[] = {
    {T_MIXED, {"Hello", " world", " 1234567", " don", "'t"}},
    {T_CJK, {"你好世界", " 🚀🚀", " ok"}},
};

/* No tokenizer.ggml.pre: llama.cpp's 'default': punctuation runs first,
 * GPT-2's regex, \p{N}+, then [0-9]{3}. */
static const split_case default_cases[] = {
    {T_MIXED, {"Hello", " world", " ", "123", "456", "7", " don", "'", "t"}},
};

START_TEST(pre_llama3)
{
    check_splits("llama3", llama3_cases, sizeof llama3_cases / sizeof *llama3_cases);
    check_splits("llama-bpe", llama3_cases, sizeof llama3_cases / sizeof *llama3_cases);
    check_splits("glm4", llama3_cases, sizeof llama3_cases / sizeof *llama3_cases);
    check_splits("chatglm-bpe", llama3_cases, sizeof llama3_cases / sizeof *llama3_cases);
    check_splits("dbrx", llama3_cases, sizeof llama3_cases / sizeof *llama3_cases);
}
END_TEST

START_TEST(pre_qwen)
{
    check_splits("qwen2", qwen2_cases, sizeof qwen2_cases / sizeof *qwen2_cases);
    check_splits("deepseek-r1-qwen", qwen2_cases, sizeof qwen2_cases / sizeof *qwen2_cases);
    check_splits("stablelm2", qwen2_cases, sizeof qwen2_cases / sizeof *qwen2_cases);
    check_splits("qwen35", qwen35_cases, sizeof qwen35_cases / sizeof *qwen35_cases);
}
END_TEST

START_TEST(pre_deepseek_v3)
{
    check_splits("deepseek-v3", deepseek_v3_cases,
                 sizeof deepseek_v3_cases / sizeof *deepseek_v3_cases);
}
END_TEST

START_TEST(pre_kimi_k2)
{
    check_splits("kimi-k2", kimi_k2_cases, sizeof kimi_k2_cases / sizeof *kimi_k2_cases);
}
END_TEST

START_TEST(pre_gpt4o_tekken)
{
    check_splits("gpt-4o", gpt4o_cases, sizeof gpt4o_cases / sizeof *gpt4o_cases);
    check_splits("llama4", gpt4o_cases, sizeof gpt4o_cases / sizeof *gpt4o_cases);
    check_splits("tekken", tekken_cases, sizeof tekken_cases / sizeof *tekken_cases);
}
END_TEST

START_TEST(pre_gpt2_family)
{
    check_splits("command-r", starcoder_cases, sizeof starcoder_cases / sizeof *starcoder_cases);
    check_splits("smollm", starcoder_cases, sizeof starcoder_cases / sizeof *starcoder_cases);
    check_splits("olmo", olmo_cases, sizeof olmo_cases / sizeof *olmo_cases);
    check_splits(NULL, default_cases, sizeof default_cases / sizeof *default_cases);
}
END_TEST

/* Every supported value builds a tokenizer that round-trips mixed text; an
 * unknown one is refused with the list; invalid UTF-8 is an error. */
START_TEST(pre_every_name)
{
    static const char text[] = "Grüße, 世界! x=1_000; 🙂\t\n  done.";
    size_t n;
    const char *const *names = gguf_tokenizer_pre_names(&n);
    ck_assert_uint_ge(n, 60);
    gguf_tokenize_opts o;
    gguf_tokenize_opts_init(&o);
    o.add_bos = o.add_eos = 0;
    for (size_t i = 0; i < n; i++) {
        gguf_set *set;
        gguf_tokenizer *t = with_pre(names[i], &set);
        int32_t *ids;
        int64_t ni;
        char *back;
        size_t bl;
        gguf_error err;
        ck_assert_msg(gguf_tokenize_text(t, text, strlen(text), &o, &ids, &ni, &err) == 0, "%s: %s",
                      names[i], err.message);
        ck_assert_int_eq(gguf_detokenize(t, ids, ni, NULL, &back, &bl, &err), 0);
        ck_assert_msg(!strcmp(back, text), "%s: '%s'", names[i], back);
        free(back);
        free(ids);
        /* invalid UTF-8: an error, not a crash */
        static const char *const bad[] = {"a\x80", "\xC3", "\xE0\x80\x80", "\xED\xA0\x80",
                                          "\xF4\x90\x80\x80", "ok\xFF"};
        for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
            ck_assert_int_eq(gguf_tokenize_text(t, bad[k], strlen(bad[k]), &o, &ids, &ni, &err),
                             GGUF_E_BAD_UTF8);
            ck_assert_ptr_null(ids);
        }
        gguf_tokenizer_free(t);
        gguf_set_free(set);
    }
}
END_TEST

START_TEST(pre_unknown_refused)
{
    char out[1024];
    snprintf(out, sizeof out, "%s/unknown.gguf", tmp_dir);
    gguf_file *src;
    gguf_error err;
    ck_assert_int_eq(gguf_file_open(&src, gpt2_path, NULL, &err), 0);
    gguf_writer *w;
    const gguf_writer_opts wo = {.no_sync = true};
    ck_assert_int_eq(gguf_writer_create(&w, out, &wo, &err), 0);
    for (int64_t i = 0; i < gguf_file_kv_count(src); i++) {
        const gguf_kv *kv = gguf_file_kv_at(src, i);
        if (strcmp(kv->key, "tokenizer.ggml.pre"))
            gguf_writer_add_kv(w, kv->key, &kv->value, &err);
    }
    gguf_writer_add_str(w, "tokenizer.ggml.pre", "no-such-pre", &err);
    ck_assert_int_eq(gguf_writer_finish(w, &err), 0);
    gguf_writer_free(w);
    gguf_file_free(src);
    gguf_set *set;
    gguf_tokenizer *t = (gguf_tokenizer *)&t;
    ck_assert_int_eq(gguf_set_open(&set, out, NULL, &err), 0);
    ck_assert_int_eq(gguf_tokenizer_create(&t, set, &err), GGUF_E_UNSUPPORTED);
    ck_assert_ptr_null(t);
    ck_assert_msg(strstr(err.message, "tokenizer.ggml.pre: 'no-such-pre' is not supported") &&
                      strstr(err.message, "llama-bpe") && strstr(err.message, "kimi-k2") &&
                      strstr(err.message, "deepseek-v3"),
                  "%s", err.message);
    gguf_set_free(set);
}
END_TEST

int main(void)
{
    const char *shared = getenv("GGUFKIT_SHARED");
    if (shared)
        snprintf(gpt2_path, sizeof gpt2_path, "%s/vocab/ggml-vocab-gpt-2.gguf", shared);
    if (!shared || access(gpt2_path, R_OK) != 0) {
        printf("SKIP: test_tokenize_pre needs GGUFKIT_SHARED with vocab/ggml-vocab-gpt-2.gguf\n");
        return 77;
    }
    tmp_dir = th_mkdtemp();
    Suite *s = suite_create("tokenize_pre");
    TCase *tc = tcase_create("pre");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, pre_llama3);
    tcase_add_test(tc, pre_qwen);
    tcase_add_test(tc, pre_deepseek_v3);
    tcase_add_test(tc, pre_kimi_k2);
    tcase_add_test(tc, pre_gpt4o_tekken);
    tcase_add_test(tc, pre_gpt2_family);
    tcase_add_test(tc, pre_every_name);
    tcase_add_test(tc, pre_unknown_refused);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    th_rmdir(tmp_dir);
    free(tmp_dir);
    return failed ? 1 : 0;
}
