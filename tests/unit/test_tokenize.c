/*
 * The tokenize module on small vocabularies built here, in memory (no shared
 * data): SPM, BPE and WPM by hand-checkable cases, special tokens, BOS/EOS,
 * detokenization, every refusal, and the rules that translate llama.cpp's
 * regexes for PCRE2. The shared vocabularies are in test_tokenize_vocab.c and
 * test_tokenize_pre.c.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/file.h"
#include "gguf/tokenize.h"
#include "helper_buf.h"
#include "tokenize/tokenize_internal.h"

/* ---- a small GGUF writer for vocabularies ---- */

enum { V_U32 = 4, V_I32 = 5, V_F32 = 6, V_BOOL = 7, V_STR = 8, V_ARR = 9 };

typedef struct vb {
    tbuf kv;
    uint64_t n_kv;
} vb;

static void vb_str(vb *b, const char *key, const char *v)
{
    tb_kv_str(&b->kv, key, v);
    b->n_kv++;
}

static void vb_u32(vb *b, const char *key, uint32_t v)
{
    tb_kv_u32(&b->kv, key, v);
    b->n_kv++;
}

static void vb_bool(vb *b, const char *key, bool v)
{
    tb_str(&b->kv, key);
    tb_u32(&b->kv, V_BOOL);
    tb_u8(&b->kv, v);
    b->n_kv++;
}

static void vb_strs(vb *b, const char *key, const char *const *v, size_t n)
{
    tb_str(&b->kv, key);
    tb_u32(&b->kv, V_ARR);
    tb_u32(&b->kv, V_STR);
    tb_u64(&b->kv, n);
    for (size_t i = 0; i < n; i++)
        tb_str(&b->kv, v[i]);
    b->n_kv++;
}

static void vb_i32s(vb *b, const char *key, const int32_t *v, size_t n)
{
    tb_str(&b->kv, key);
    tb_u32(&b->kv, V_ARR);
    tb_u32(&b->kv, V_I32);
    tb_u64(&b->kv, n);
    tb_bytes(&b->kv, v, n * sizeof *v);
    b->n_kv++;
}

static void vb_f32s(vb *b, const char *key, const float *v, size_t n)
{
    tb_str(&b->kv, key);
    tb_u32(&b->kv, V_ARR);
    tb_u32(&b->kv, V_F32);
    tb_u64(&b->kv, n);
    tb_bytes(&b->kv, v, n * sizeof *v);
    b->n_kv++;
}

typedef struct vocab_file {
    tbuf buf;
    gguf_file *f;
} vocab_file;

/* Finish the file (no tensors: a vocabulary-only GGUF) and open it from memory. */
static void vb_open(vb *b, vocab_file *out)
{
    memset(out, 0, sizeof *out);
    tb_header(&out->buf, 3, 0, b->n_kv);
    tb_bytes(&out->buf, b->kv.p, b->kv.n);
    tb_pad(&out->buf, 32);
    tb_free(&b->kv);
    gguf_error err;
    ck_assert_msg(gguf_file_open_memory(&out->f, out->buf.p, out->buf.n, "vocab.gguf", NULL,
                                        &err) == 0,
                  "%s", err.message);
}

static void vf_close(vocab_file *v)
{
    gguf_file_free(v->f);
    tb_free(&v->buf);
}

static gguf_tokenizer *vf_tok(const vocab_file *v)
{
    gguf_tokenizer *t;
    gguf_error err;
    ck_assert_msg(gguf_tokenizer_create_file(&t, v->f, &err) == 0, "%s", err.message);
    return t;
}

static int vf_tok_rc(const vocab_file *v, gguf_error *err)
{
    gguf_tokenizer *t = (gguf_tokenizer *)&t;
    const int rc = gguf_tokenizer_create_file(&t, v->f, err);
    if (rc)
        ck_assert_ptr_null(t);
    gguf_tokenizer_free(t);
    return rc;
}

/* ---- BPE: 256 byte tokens (id = byte), merges building "hello" and
 * " world", then three special tokens ---- */

enum { B_HE = 256, B_LL, B_HELL, B_HELLO, B_GW, B_OR, B_GWOR, B_LD, B_GWORLD, B_EOT, B_TOOL,
       B_BOS, B_N };

static char byte_tok[256][4];

static void bpe_vocab(vb *b, const char *pre, bool with_merges)
{
    static const char *const extra[] = {"he", "ll", "hell", "hello", "\xC4\xA0w", "or",
                                        "\xC4\xA0wor", "ld", "\xC4\xA0world",
                                        "<|endoftext|>", "<tool>", "<|bos|>"};
    static const char *const merges[] = {"h e", "l l", "he ll", "hell o", "\xC4\xA0 w", "o r",
                                         "\xC4\xA0w or", "l d", "\xC4\xA0wor ld"};
    const char *toks[B_N];
    int32_t types[B_N];
    for (int i = 0; i < 256; i++) {
        tok_utf8_encode(tok_byte_to_cp((unsigned char)i), byte_tok[i]);
        toks[i] = byte_tok[i];
        types[i] = 1;
    }
    for (int i = 256; i < B_N; i++) {
        toks[i] = extra[i - 256];
        types[i] = 1;
    }
    types[B_EOT] = 3;
    types[B_TOOL] = 4;
    types[B_BOS] = 3;
    memset(b, 0, sizeof *b);
    vb_str(b, "general.architecture", "llama");
    vb_str(b, "tokenizer.ggml.model", "gpt2");
    if (pre)
        vb_str(b, "tokenizer.ggml.pre", pre);
    vb_strs(b, "tokenizer.ggml.tokens", toks, B_N);
    vb_i32s(b, "tokenizer.ggml.token_type", types, B_N);
    if (with_merges)
        vb_strs(b, "tokenizer.ggml.merges", merges, sizeof merges / sizeof *merges);
}

static void bpe_file(vocab_file *v, const char *pre, bool bos_eos)
{
    vb b;
    bpe_vocab(&b, pre, true);
    if (bos_eos) {
        vb_u32(&b, "tokenizer.ggml.bos_token_id", B_BOS);
        vb_u32(&b, "tokenizer.ggml.eos_token_id", B_EOT);
    }
    vb_open(&b, v);
}

static void expect_ids(const gguf_tokenizer *t, const char *text, const gguf_tokenize_opts *o,
                       const int32_t *want, int64_t n_want)
{
    int32_t *ids;
    int64_t n;
    gguf_error err;
    ck_assert_msg(gguf_tokenize_text(t, text, strlen(text), o, &ids, &n, &err) == 0, "%s",
                  err.message);
    bool ok = n == n_want && !memcmp(ids, want, (size_t)n * sizeof *ids);
    if (!ok) {
        fprintf(stderr, "'%s' ->", text);
        for (int64_t i = 0; i < n; i++)
            fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
    }
    ck_assert_msg(ok, "ids of '%s'", text);
    free(ids);
}

#define IDS(...) ((const int32_t[]){__VA_ARGS__}), (sizeof((const int32_t[]){__VA_ARGS__}) / 4)

START_TEST(bpe_merges_and_bytes)
{
    vocab_file v;
    bpe_file(&v, "gpt-2", true);
    gguf_tokenizer *t = vf_tok(&v);
    ck_assert_int_eq(gguf_tokenizer_type(t), GGUF_TOK_BPE);
    ck_assert_str_eq(gguf_tokenizer_model(t), "gpt2");
    ck_assert_str_eq(gguf_tokenizer_pre(t), "gpt-2");
    ck_assert_int_eq(gguf_tokenizer_n_vocab(t), B_N);
    gguf_tokenize_opts o;
    gguf_tokenize_opts_init(&o);
    /* lowest rank first: he, ll, hell, hello; " world" the same way */
    expect_ids(t, "hello world", &o, IDS(B_HELLO, B_GWORLD));
    /* " hello": the space is its own symbol, no merge joins it */
    expect_ids(t, " hello", &o, IDS(' ', B_HELLO));
    /* no merge: byte tokens, including the four of an emoji */
    expect_ids(t, "hi \xF0\x9F\x99\x82", &o, IDS('h', 'i', ' ', 0xF0, 0x9F, 0x99, 0x82));
    /* "lld": ll (rank 1) before ld (rank 7) */
    expect_ids(t, "lld", &o, IDS(B_LL, 'd'));
    gguf_tokenizer_free(t);
    vf_close(&v);
}
END_TEST

START_TEST(bpe_special_tokens)
{
    vocab_file v;
    bpe_file(&v, "gpt-2", true);
    gguf_tokenizer *t = vf_tok(&v);
    gguf_tokenize_opts o;
    gguf_tokenize_opts_init(&o);
    ck_assert(o.parse_special);
    ck_assert_int_eq(o.add_bos, GGUF_TOK_AUTO);
    /* control token in the text: its id (default), or plain text when off */
    expect_ids(t, "hello<|endoftext|>hello", &o, IDS(B_HELLO, B_EOT, B_HELLO));
    o.parse_special = false;
    int32_t *ids;
    int64_t n;
    gguf_error err;
    ck_assert_int_eq(gguf_tokenize_text(t, "<|endoftext|>", 13, &o, &ids, &n, &err), 0);
    ck_assert_int_gt(n, 1);
    for (int64_t i = 0; i < n; i++)
        ck_assert_int_ne(ids[i], B_EOT);
    free(ids);
    /* user-defined tokens are found either way */
    expect_ids(t, "hello<tool>", &o, IDS(B_HELLO, B_TOOL));
    o.parse_special = true;
    expect_ids(t, "<tool><|bos|>", &o, IDS(B_TOOL, B_BOS));
    ck_assert_int_eq(gguf_tokenizer_token_type(t, B_EOT), GGUF_TOKEN_CONTROL);
    ck_assert_int_eq(gguf_tokenizer_token_type(t, B_TOOL), GGUF_TOKEN_USER_DEFINED);
    ck_assert_int_eq(gguf_tokenizer_token_type(t, 'a'), GGUF_TOKEN_NORMAL);
    ck_assert_int_eq(gguf_tokenizer_token_type(t, B_N), -1);
    gguf_tokenizer_free(t);
    vf_close(&v);
}
END_TEST

START_TEST(bpe_bos_eos)
{
    vocab_file v;
    bpe_file(&v, "gpt-2", true);
    gguf_tokenizer *t = vf_tok(&v);
    gguf_tokenize_opts o;
    gguf_tokenize_opts_init(&o);
    /* "gpt-2": llama.cpp adds neither by default */
    ck_assert(!gguf_tokenizer_add_bos(t));
    ck_assert(!gguf_tokenizer_add_eos(t));
    expect_ids(t, "hello", &o, IDS(B_HELLO));
    o.add_bos = 1;
    expect_ids(t, "hello", &o, IDS(B_BOS, B_HELLO));
    o.add_eos = 1;
    expect_ids(t, "hello", &o, IDS(B_BOS, B_HELLO, B_EOT));
    expect_ids(t, "", &o, IDS(B_BOS, B_EOT));
    /* the first API: add_bos as given, never EOS */
    int32_t *ids;
    int64_t n;
    gguf_error err;
    ck_assert_int_eq(gguf_tokenize(t, "hello", 5, true, &ids, &n, &err), 0);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(ids[0], B_BOS);
    free(ids);
    ck_assert_int_eq(gguf_tokenize(t, NULL, 0, false, &ids, &n, &err), 0);
    ck_assert_int_eq(n, 0);
    ck_assert_ptr_nonnull(ids);
    free(ids);
    ck_assert_int_eq(gguf_tokenize(NULL, "a", 1, false, &ids, &n, &err), GGUF_E_INVALID);
    gguf_tokenizer_free(t);
    vf_close(&v);

    /* llama3: BOS by default; add_bos_token in the file overrides */
    bpe_file(&v, "llama3", true);
    t = vf_tok(&v);
    ck_assert(gguf_tokenizer_add_bos(t));
    gguf_tokenize_opts_init(&o);
    expect_ids(t, "hello", &o, IDS(B_BOS, B_HELLO));
    o.add_bos = 0;
    expect_ids(t, "hello", &o, IDS(B_HELLO));
    gguf_tokenizer_free(t);
    vf_close(&v);

    vb b;
    bpe_vocab(&b, "gpt-2", true);
    vb_u32(&b, "tokenizer.ggml.bos_token_id", B_BOS);
    vb_u32(&b, "tokenizer.ggml.eos_token_id", B_EOT);
    vb_bool(&b, "tokenizer.ggml.add_bos_token", true);
    vb_bool(&b, "tokenizer.ggml.add_eos_token", true);
    vb_open(&b, &v);
    t = vf_tok(&v);
    gguf_tokenize_opts_init(&o);
    expect_ids(t, "hello", &o, IDS(B_BOS, B_HELLO, B_EOT));
    gguf_tokenizer_free(t);
    vf_close(&v);

    /* glm4 drops llama.cpp's default BOS: asking for one is an error */
    bpe_vocab(&b, "glm4", true);
    vb_open(&b, &v);
    t = vf_tok(&v);
    ck_assert_int_eq(gguf_tokenizer_bos(t), -1);
    gguf_tokenize_opts_init(&o);
    o.add_bos = 1;
    ck_assert_int_eq(gguf_tokenize_text(t, "hi", 2, &o, &ids, &n, &err), GGUF_E_INVALID);
    ck_assert_ptr_null(ids);
    ck_assert_msg(strstr(err.message, "BOS") != NULL, "%s", err.message);
    /* an id outside the vocabulary is ignored, as llama.cpp does */
    ck_assert_int_eq(gguf_tokenizer_eos(t), 11); /* its default for "gpt2" */
    gguf_tokenizer_free(t);
    vf_close(&v);
}
END_TEST

START_TEST(bpe_detokenize)
{
    vocab_file v;
    bpe_file(&v, "gpt-2", true);
    gguf_tokenizer *t = vf_tok(&v);
    gguf_error err;
    char *s;
    size_t n;
    const int32_t ids[] = {B_BOS, B_HELLO, B_GWORLD, B_TOOL, B_EOT, 0xF0, 0x9F};
    ck_assert_int_eq(gguf_detokenize(t, ids, 7, NULL, &s, &n, &err), 0);
    /* control tokens hidden, user-defined shown, a cut emoji kept as bytes */
    ck_assert_uint_eq(n, 19);
    ck_assert_mem_eq(s, "hello world<tool>\xF0\x9F", 19);
    ck_assert_int_eq(s[n], 0);
    free(s);
    const gguf_detokenize_opts shown = {.special = true};
    ck_assert_int_eq(gguf_detokenize(t, ids, 5, &shown, &s, &n, &err), 0);
    ck_assert_str_eq(s, "<|bos|>hello world<tool><|endoftext|>");
    free(s);
    const char *p;
    size_t pl;
    ck_assert_int_eq(gguf_token_piece(t, B_GW, false, &p, &pl), 0);
    ck_assert_uint_eq(pl, 2);
    ck_assert_mem_eq(p, " w", 2);
    ck_assert_int_eq(gguf_token_piece(t, 0x0A, false, &p, &pl), 0); /* "Ċ" is '\n' */
    ck_assert_uint_eq(pl, 1);
    ck_assert_int_eq(p[0], '\n');
    ck_assert_int_eq(gguf_token_piece(t, B_EOT, false, &p, &pl), 0);
    ck_assert_uint_eq(pl, 0);
    ck_assert_int_eq(gguf_token_piece(t, B_N, false, &p, &pl), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_token_piece(t, -1, false, &p, &pl), GGUF_E_INVALID);
    const int32_t bad[] = {1, B_N};
    ck_assert_int_eq(gguf_detokenize(t, bad, 2, NULL, &s, &n, &err), GGUF_E_INVALID);
    ck_assert_ptr_null(s);
    ck_assert_msg(strstr(err.message, "ids[1]") != NULL, "%s", err.message);
    ck_assert_int_eq(gguf_detokenize(t, NULL, 0, NULL, &s, &n, &err), 0);
    ck_assert_uint_eq(n, 0);
    ck_assert_str_eq(s, "");
    free(s);
    /* every byte string of valid UTF-8 comes back */
    static const char text[] = "Grüße 🙂 — naïve\t\r\n  ok<tool>";
    int32_t *tid;
    int64_t tn;
    ck_assert_int_eq(gguf_tokenize_text(t, text, strlen(text), NULL, &tid, &tn, &err), 0);
    ck_assert_int_eq(gguf_detokenize(t, tid, tn, NULL, &s, &n, &err), 0);
    ck_assert_str_eq(s, text);
    free(s);
    free(tid);
    gguf_tokenizer_free(t);
    vf_close(&v);
}
END_TEST

START_TEST(invalid_utf8)
{
    static const struct {
        const char *s;
        size_t at;
    } bad[] = {
        {"ab\x80", 2},              /* stray continuation byte */
        {"\xC3", 0},                /* truncated */
        {"x\xC3(", 1},              /* continuation missing */
        {"\xC0\xAF", 0},            /* overlong '/' */
        {"\xE0\x80\xAF", 0},        /* overlong */
        {"\xED\xA0\x80", 0},        /* surrogate U+D800 */
        {"\xF4\x90\x80\x80", 0},    /* past U+10FFFF */
        {"ok \xF8\x88\x80\x80\x80", 3}, /* 5-byte form */
        {"\xFF", 0},
    };
    vocab_file v;
    bpe_file(&v, "llama3", true);
    gguf_tokenizer *t = vf_tok(&v);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int32_t *ids = (int32_t *)&ids;
        int64_t n;
        gguf_error err;
        ck_assert_int_eq(gguf_tokenize_text(t, bad[i].s, strlen(bad[i].s), NULL, &ids, &n, &err),
                         GGUF_E_BAD_UTF8);
        ck_assert_ptr_null(ids);
        char want[64];
        snprintf(want, sizeof want, "invalid UTF-8 at byte %zu", bad[i].at);
        ck_assert_msg(strstr(err.message, want) != NULL, "%s", err.message);
        ck_assert_uint_eq(tok_utf8_valid(bad[i].s, strlen(bad[i].s)), bad[i].at);
    }
    /* the largest code point and U+FFFF are fine */
    int32_t *ids;
    int64_t n;
    ck_assert_int_eq(gguf_tokenize_text(t, "\xF4\x8F\xBF\xBF\xEF\xBF\xBF", 7, NULL, &ids, &n, NULL), 0);
    free(ids);
    gguf_tokenizer_free(t);
    vf_close(&v);
}
END_TEST

START_TEST(refusals)
{
    vocab_file v;
    vb b;
    gguf_error err;
    memset(&b, 0, sizeof b);
    vb_str(&b, "tokenizer.ggml.model", "rwkv");
    vb_strs(&b, "tokenizer.ggml.tokens", (const char *const[]){"a"}, 1);
    vb_open(&b, &v);
    ck_assert_int_eq(vf_tok_rc(&v, &err), GGUF_E_UNSUPPORTED);
    ck_assert_msg(strstr(err.message, "tokenizer.ggml.model: 'rwkv' is not supported") &&
                      strstr(err.message, "llama, gpt2, bert"),
                  "%s", err.message);
    vf_close(&v);

    bpe_vocab(&b, "llama3-typo", true);
    vb_open(&b, &v);
    ck_assert_int_eq(vf_tok_rc(&v, &err), GGUF_E_UNSUPPORTED);
    ck_assert_msg(strstr(err.message, "tokenizer.ggml.pre: 'llama3-typo' is not supported") &&
                      strstr(err.message, "default, llama3,"),
                  "%s", err.message);
    vf_close(&v);

    bpe_vocab(&b, "gpt-2", false); /* no merges */
    vb_open(&b, &v);
    ck_assert_int_eq(vf_tok_rc(&v, &err), GGUF_E_NOT_FOUND);
    ck_assert_msg(strstr(err.message, "tokenizer.ggml.merges") != NULL, "%s", err.message);
    vf_close(&v);

    /* Kimi-K2 files may have no merges (llama.cpp allows it): characters stay apart */
    bpe_vocab(&b, "kimi-k2", false);
    vb_open(&b, &v);
    gguf_tokenizer *t = vf_tok(&v);
    gguf_tokenize_opts o;
    gguf_tokenize_opts_init(&o);
    expect_ids(t, "he", &o, IDS('h', 'e'));
    gguf_tokenizer_free(t);
    vf_close(&v);

    memset(&b, 0, sizeof b);
    vb_str(&b, "tokenizer.ggml.model", "llama");
    vb_open(&b, &v);
    ck_assert_int_eq(vf_tok_rc(&v, &err), GGUF_E_NOT_FOUND); /* no tokens */
    vf_close(&v);

    memset(&b, 0, sizeof b);
    vb_str(&b, "tokenizer.ggml.model", "llama");
    vb_i32s(&b, "tokenizer.ggml.tokens", (const int32_t[]){1, 2}, 2);
    vb_open(&b, &v);
    ck_assert_int_eq(vf_tok_rc(&v, &err), GGUF_E_WRONG_TYPE);
    vf_close(&v);

    memset(&b, 0, sizeof b);
    vb_str(&b, "tokenizer.ggml.model", "llama");
    vb_strs(&b, "tokenizer.ggml.tokens", (const char *const[]){"a", "b"}, 2);
    vb_i32s(&b, "tokenizer.ggml.token_type", (const int32_t[]){1}, 1);
    vb_open(&b, &v);
    ck_assert_int_eq(vf_tok_rc(&v, &err), GGUF_E_BAD_VALUE);
    ck_assert_msg(strstr(err.message, "tokenizer.ggml.token_type: 1 types for 2 tokens"), "%s",
                  err.message);
    vf_close(&v);

    memset(&b, 0, sizeof b);
    vb_str(&b, "tokenizer.ggml.model", "llama");
    vb_strs(&b, "tokenizer.ggml.tokens", (const char *const[]){"a", "b"}, 2);
    vb_f32s(&b, "tokenizer.ggml.scores", (const float[]){1}, 1);
    vb_open(&b, &v);
    ck_assert_int_eq(vf_tok_rc(&v, &err), GGUF_E_BAD_VALUE);
    vf_close(&v);

    ck_assert_int_eq(gguf_tokenizer_create_file(NULL, NULL, &err), GGUF_E_INVALID);
    gguf_tokenizer_free(NULL);
}
END_TEST

/* Fragments field by field (the struct has padding). */
static bool same_frags(const tok_frag *a, const tok_frag *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i].off != b[i].off || a[i].len != b[i].len || a[i].id != b[i].id)
            return false;
    return true;
}

/* The partition of the text around special tokens: llama.cpp's order (longest
 * text first, whatever comes first in the text), and the indexed method agrees
 * with one scan per token. */
START_TEST(special_partition)
{
    /* user-defined tokens: "bcd" before "ab" (longer), 20 more to pass the
     * indexed method's threshold, overlapping ones among them */
    const char *toks[256 + 24];
    int32_t types[256 + 24];
    char extra[24][8];
    for (int i = 0; i < 256; i++) {
        tok_utf8_encode(tok_byte_to_cp((unsigned char)i), byte_tok[i]);
        toks[i] = byte_tok[i];
        types[i] = 1;
    }
    static const char *const named[] = {"ab", "bcd", "<x>", "<x><y>"};
    for (int i = 0; i < 24; i++) {
        if (i < 4)
            snprintf(extra[i], sizeof extra[i], "%s", named[i]);
        else
            snprintf(extra[i], sizeof extra[i], "%c%c", 'k' + i % 8, 'k' + (i + i / 8) % 8);
        toks[256 + i] = extra[i];
        types[256 + i] = i == 2 ? 3 : 4; /* "<x>" is a control token */
    }
    vb b;
    memset(&b, 0, sizeof b);
    vb_str(&b, "tokenizer.ggml.model", "gpt2");
    vb_str(&b, "tokenizer.ggml.pre", "gpt-2");
    vb_strs(&b, "tokenizer.ggml.tokens", toks, 256 + 24);
    vb_i32s(&b, "tokenizer.ggml.token_type", types, 256 + 24);
    vb_strs(&b, "tokenizer.ggml.merges", (const char *const[]){"a b"}, 1);
    vocab_file v;
    vb_open(&b, &v);
    gguf_tokenizer *t = vf_tok(&v);
    gguf_tokenize_opts o;
    gguf_tokenize_opts_init(&o);
    /* "bcd" is cut out first, so "ab" never sees its "b" */
    expect_ids(t, "abcd", &o, IDS('a', 257));
    expect_ids(t, "ab cd", &o, IDS(256, ' ', 'c', 'd'));
    /* the longer "<x><y>" first; a lone "<x>" is control: text without parse_special */
    expect_ids(t, "<x><y><x>", &o, IDS(259, 258));
    o.parse_special = false;
    expect_ids(t, "<x><y><x>", &o, IDS(259, '<', 'x', '>'));

    /* both methods on random strings over the tokens' letters */
    unsigned seed = 12345;
    for (int round = 0; round < 3000; round++) {
        char text[64];
        const size_t len = 1 + (seed = seed * 1103515245u + 12345u) % 60;
        for (size_t i = 0; i < len; i++)
            text[i] = "abcd<>xy klmnopqr"[(seed = seed * 1103515245u + 12345u) >> 16 & 15];
        for (int ps = 0; ps < 2; ps++) {
            tok_frag *f1, *f2;
            size_t n1, n2;
            ck_assert_int_eq(tok_special_partition_mode(t, text, len, ps, 1, &f1, &n1), 0);
            ck_assert_int_eq(tok_special_partition_mode(t, text, len, ps, 2, &f2, &n2), 0);
            ck_assert_msg(n1 == n2 && same_frags(f1, f2, n1), "'%.*s'", (int)len, text);
            free(f1);
            free(f2);
        }
    }
    gguf_tokenizer_free(t);
    vf_close(&v);
}
END_TEST

/* ---- SPM: <unk> <s> </s>, byte tokens, then pieces of "▁hello" with
 * scores that make the whole word win ---- */

START_TEST(spm_basics)
{
    enum { S_BYTES = 3, S_SP = 259, S_H, S_E, S_L, S_O, S_SPH, S_SPHE, S_LL, S_LLO, S_HELLO, S_N };
    static char names[256][8];
    const char *toks[S_N] = {"<unk>", "<s>", "</s>"};
    int32_t types[S_N] = {2, 3, 3};
    float scores[S_N] = {0};
    for (int i = 0; i < 256; i++) {
        snprintf(names[i], sizeof names[i], "<0x%02X>", i);
        toks[S_BYTES + i] = names[i];
        types[S_BYTES + i] = 6;
    }
    static const char *const words[] = {"\xE2\x96\x81", "h", "e", "l", "o", "\xE2\x96\x81h",
                                        "\xE2\x96\x81he", "ll", "llo", "\xE2\x96\x81hello"};
    for (int i = S_SP; i < S_N; i++) {
        toks[i] = words[i - S_SP];
        types[i] = 1;
        scores[i] = (float)(i - S_SP); /* longer pieces score higher */
    }
    vb b;
    memset(&b, 0, sizeof b);
    vb_str(&b, "tokenizer.ggml.model", "llama");
    vb_strs(&b, "tokenizer.ggml.tokens", toks, S_N);
    vb_i32s(&b, "tokenizer.ggml.token_type", types, S_N);
    vb_f32s(&b, "tokenizer.ggml.scores", scores, S_N);
    vocab_file v;
    vb_open(&b, &v);
    gguf_tokenizer *t = vf_tok(&v);
    ck_assert_int_eq(gguf_tokenizer_type(t), GGUF_TOK_SPM);
    ck_assert_str_eq(gguf_tokenizer_pre(t), "default");
    /* llama.cpp's defaults without ids in the file: BOS 1, EOS 2, UNK 0, BOS added */
    ck_assert_int_eq(gguf_tokenizer_bos(t), 1);
    ck_assert_int_eq(gguf_tokenizer_eos(t), 2);
    ck_assert_int_eq(gguf_tokenizer_unk(t), 0);
    ck_assert(gguf_tokenizer_add_bos(t));
    gguf_tokenize_opts o;
    gguf_tokenize_opts_init(&o);
    /* ll, llo, ▁h, ▁he, then ▁he + llo = ▁hello: highest score first */
    expect_ids(t, "hello", &o, IDS(1, S_HELLO));
    o.add_bos = 0;
    /* é has no token: its two bytes as byte tokens */
    expect_ids(t, "\xC3\xA9", &o, IDS(S_SP, S_BYTES + 0xC3, S_BYTES + 0xA9));
    /* a special token in the text; the text after it gets a space prefix too */
    expect_ids(t, "<s>hello", &o, IDS(1, S_HELLO));
    o.parse_special = false;
    expect_ids(t, "<s>", &o, IDS(S_SP, S_BYTES + '<', S_BYTES + 's', S_BYTES + '>'));
    /* detokenize: the space prefix goes again, unless asked to keep it */
    int32_t *ids;
    int64_t n;
    char *s;
    size_t sl;
    gguf_error err;
    ck_assert_int_eq(gguf_tokenize_text(t, "hello é", 8, &o, &ids, &n, &err), 0);
    ck_assert_int_eq(gguf_detokenize(t, ids, n, NULL, &s, &sl, &err), 0);
    ck_assert_str_eq(s, "hello é");
    free(s);
    const gguf_detokenize_opts keep = {.keep_prefix = true};
    ck_assert_int_eq(gguf_detokenize(t, ids, n, &keep, &s, &sl, &err), 0);
    ck_assert_str_eq(s, " hello é");
    free(s);
    free(ids);
    const int32_t withbos[] = {1, S_HELLO, 2};
    ck_assert_int_eq(gguf_detokenize(t, withbos, 3, NULL, &s, &sl, &err), 0);
    ck_assert_str_eq(s, " hello"); /* as llama.cpp: only a first text token is stripped */
    free(s);
    gguf_tokenizer_free(t);
    vf_close(&v);
}
END_TEST

/* ---- WPM: [PAD] .. [UNK]=100 [CLS] [SEP] [MASK], then word pieces ---- */

START_TEST(wpm_basics)
{
    enum { W_HELLO = 104, W_WORLD, W_PLAY, W_ING, W_COMMA, W_N };
    static char names[100][16];
    const char *toks[W_N];
    int32_t types[W_N];
    for (int i = 0; i < 100; i++) {
        snprintf(names[i], sizeof names[i], "[unused%d]", i);
        toks[i] = names[i];
        types[i] = 1;
    }
    toks[0] = "[PAD]";
    types[0] = 3;
    static const char *const rest[] = {"[UNK]", "[CLS]", "[SEP]", "[MASK]",
                                       "\xE2\x96\x81hello", "\xE2\x96\x81world",
                                       "\xE2\x96\x81play", "ing", "\xE2\x96\x81,"};
    for (int i = 100; i < W_N; i++) {
        toks[i] = rest[i - 100];
        types[i] = i < 104 ? 3 : 1;
    }
    vb b;
    memset(&b, 0, sizeof b);
    vb_str(&b, "tokenizer.ggml.model", "bert");
    vb_str(&b, "tokenizer.ggml.pre", "bert-bge");
    vb_strs(&b, "tokenizer.ggml.tokens", toks, W_N);
    vb_i32s(&b, "tokenizer.ggml.token_type", types, W_N);
    vocab_file v;
    vb_open(&b, &v);
    gguf_tokenizer *t = vf_tok(&v);
    ck_assert_int_eq(gguf_tokenizer_type(t), GGUF_TOK_WPM);
    ck_assert_int_eq(gguf_tokenizer_sep(t), 102);
    gguf_tokenize_opts o;
    gguf_tokenize_opts_init(&o);
    /* accent stripped, lowercase, punctuation apart, "play"+"ing", unknown
     * words (and "!") as [UNK]; [CLS] ... [SEP] by default */
    expect_ids(t, "H\xC3\xA9llo, PLAYING\u00A0world!", &o,
               IDS(101, W_HELLO, W_COMMA, W_PLAY, W_ING, W_WORLD, 100, 102));
    o.add_bos = o.add_eos = 0;
    /* CJK ideographs are words of one character; controls vanish */
    expect_ids(t, "\xE4\xB8\xAD\xE6\x96\x87 hel\x01lo", &o, IDS(100, 100, W_HELLO));
    expect_ids(t, " \t\n", &o, (const int32_t[]){0}, 0);
    /* pieces: "▁" is a space, continuation pieces join */
    int32_t *ids;
    int64_t n;
    char *s;
    size_t sl;
    gguf_error err;
    ck_assert_int_eq(gguf_tokenize_text(t, "play playing", 12, &o, &ids, &n, &err), 0);
    ck_assert_int_eq(gguf_detokenize(t, ids, n, NULL, &s, &sl, &err), 0);
    ck_assert_str_eq(s, " play playing");
    free(s);
    free(ids);
    gguf_tokenizer_free(t);
    vf_close(&v);
}
END_TEST

/* ---- the translation rules (tokenize_pre.c, docs/tokenize.md) ---- */

static void expect_translation(const char *src, const char *want)
{
    char *got;
    ck_assert_int_eq(tok_regex_translate(src, &got), 0);
    ck_assert_msg(!strcmp(got, want), "'%s' -> '%s', want '%s'", src, got, want);
    free(got);
}

#define NAWS "[^\\x00-\\x7F\\P{White_Space}]"

START_TEST(regex_translation)
{
    /* W: llama.cpp's whitespace is the White_Space property */
    expect_translation("\\s+(?!\\S)", "\\p{White_Space}+(?!\\P{White_Space})");
    expect_translation("[^\\s\\p{L}]", "(?:[^\\p{White_Space}\\p{L}])");
    /* ECMAScript classes are ASCII */
    expect_translation("\\d{3}", "[0-9]{3}");
    /* T: with collapsed categories, '~' is not \p{S} */
    expect_translation("[\\p{P}\\p{S}]+", "(?:(?!~)[\\p{P}\\p{S}])+");
    expect_translation("[^\\r\\n\\p{L}\\p{P}\\p{S}]?", "(?:~|[^\\r\\n\\p{L}\\p{P}\\p{S}])?");
    expect_translation("\\p{S}", "(?:(?!~)\\p{S})");
    /* ... unless the class names '~' itself, or a range covers it */
    expect_translation("[\\p{S}~]", "(?:[\\p{S}~])");
    expect_translation("[\\p{S}{-~]", "(?:[\\p{S}{-~])");
    /* C: \p{Lu} and the like are \p{L} */
    expect_translation("\\p{Lu}[\\p{Ll}\\p{M}]", "\\p{L}(?:[\\p{L}\\p{M}])");
    /* V: a class whose range covers non-ASCII whitespace does not take it */
    expect_translation("[一-龥ࠀ-一]+", "(?:(?!" NAWS ")[一-龥ࠀ-一])+");
    /* ... and one that takes U+000B takes them all */
    expect_translation("[\\x0b]", "(?:" NAWS "|[\\x0b])");
    /* without \p{...} there is no collapse: \p{S}-free regexes keep '~' as is */
    expect_translation("[!-/:-~]", "(?:[!-/:-~])");
    /* K: the Kimi-K2 splitter */
    char *k2;
    ck_assert_int_eq(tok_regex_translate("\\p{Han}+", &k2), 0);
    ck_assert(!strncmp(k2, "[\\x{4E00}-\\x{9FFF}", 18));
    free(k2);
    /* every regex of the table translates and compiles */
    for (size_t i = 0; i < gguf_tok_pre_name_count; i++)
        for (int k = 0; k < TOK_MAX_REGEX && gguf_tok_pre_names[i].fam->regex[k]; k++) {
            tok_regex *r;
            gguf_error err;
            ck_assert_msg(tok_regex_compile(&r, gguf_tok_pre_names[i].fam->regex[k], "t", &err) ==
                              0,
                          "%s: %s", gguf_tok_pre_names[i].name, err.message);
            tok_regex_free(r);
        }
}
END_TEST

static int count_match(void *ctx, size_t off, size_t n)
{
    (void)off;
    (void)n;
    ++*(int *)ctx;
    return 0;
}

static int group_of(void *ctx, int group, size_t off, size_t n)
{
    (void)off;
    (void)n;
    *(int *)ctx = group;
    return 0;
}

/* Rule W relies on PCRE2's White_Space being llama.cpp's whitespace set
 * (unicode_set_whitespace): check every code point. */
START_TEST(white_space_is_llamas)
{
    static const uint32_t llama_ws[] = {0x09,   0x0A,   0x0B,   0x0C,   0x0D,   0x20,   0x85,
                                        0xA0,   0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004,
                                        0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200A, 0x2028,
                                        0x2029, 0x202F, 0x205F, 0x3000};
    tok_regex *r;
    tok_matcher *m;
    gguf_error err;
    ck_assert_int_eq(tok_regex_compile_raw(&r, "(\\p{White_Space})", "t", &err), 0);
    ck_assert_int_eq(tok_matcher_create(&m), 0);
    size_t k = 0;
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF)
            continue;
        char s[4];
        const size_t n = tok_utf8_encode(cp, s);
        int group = -1;
        ck_assert_int_eq(tok_regex_scan(r, m, s, n, group_of, &group), 0);
        const bool want = k < sizeof llama_ws / sizeof *llama_ws && llama_ws[k] == cp;
        ck_assert_msg((group == 1) == want, "U+%04X", cp);
        k += want;
    }
    ck_assert_uint_eq(k, sizeof llama_ws / sizeof *llama_ws);
    /* the splitter keeps the text between matches as pieces of their own */
    int pieces = 0;
    ck_assert_int_eq(tok_regex_split(r, m, "a b  c", 6, count_match, &pieces), 0);
    ck_assert_int_eq(pieces, 6); /* a, ' ', b, ' ', ' ', c */
    tok_matcher_free(m);
    tok_regex_free(r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tokenize");
    TCase *tc = tcase_create("tokenize");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, bpe_merges_and_bytes);
    tcase_add_test(tc, bpe_special_tokens);
    tcase_add_test(tc, bpe_bos_eos);
    tcase_add_test(tc, bpe_detokenize);
    tcase_add_test(tc, invalid_utf8);
    tcase_add_test(tc, refusals);
    tcase_add_test(tc, special_partition);
    tcase_add_test(tc, spm_basics);
    tcase_add_test(tc, wpm_basics);
    tcase_add_test(tc, regex_translation);
    tcase_add_test(tc, white_space_is_llamas);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
