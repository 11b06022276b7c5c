/*
 * libFuzzer target for the tokenizers: text in, no crash, and
 * detokenize(tokenize(x)) == x wherever the vocabulary can spell x.
 *
 * Input: byte 0 picks the vocabulary (SPM, WPM, or byte-level BPE with one
 * pre-tokenizer family), byte 1 the switches (parse_special, BOS, EOS), the
 * rest is the text. The vocabularies are built here, in memory: every byte
 * has a token (BPE: its stand-in character; SPM: <0xNN>), a few merges and
 * pieces make longer tokens, and there are control and user-defined tokens.
 * Checks: invalid UTF-8 (by a checker of our own) is GGUF_E_BAD_UTF8 and
 * nothing else fails; BPE always round-trips (special tokens shown); SPM
 * round-trips when no special token splits the text; the two ways of finding
 * special tokens in the text give the same fragments; ids read from the input
 * detokenize without error. Corpus: tests/fuzz/corpus/tokenize.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/file.h"
#include "gguf/tokenize.h"
#include "tokenize/tokenize_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---- an in-memory GGUF with tokenizer metadata ---- */

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *p, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 256;
        b->p = realloc(b->p, b->cap);
        if (!b->p)
            abort();
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}
static void put_u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void put_str(buf *b, const char *s)
{
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}
static void kv_str(buf *b, const char *k, const char *v)
{
    put_str(b, k);
    put_u32(b, 8);
    put_str(b, v);
}
static void kv_strs(buf *b, const char *k, char **v, uint32_t n)
{
    put_str(b, k);
    put_u32(b, 9);
    put_u32(b, 8);
    put_u64(b, n);
    for (uint32_t i = 0; i < n; i++)
        put_str(b, v[i]);
}
static void kv_i32s(buf *b, const char *k, const int32_t *v, uint32_t n)
{
    put_str(b, k);
    put_u32(b, 9);
    put_u32(b, 5);
    put_u64(b, n);
    put(b, v, 4 * (size_t)n);
}
static void kv_f32s(buf *b, const char *k, const float *v, uint32_t n)
{
    put_str(b, k);
    put_u32(b, 9);
    put_u32(b, 6);
    put_u64(b, n);
    put(b, v, 4 * (size_t)n);
}
static void kv_u32(buf *b, const char *k, uint32_t v)
{
    put_str(b, k);
    put_u32(b, 4);
    put_u32(b, v);
}

static size_t utf8(uint32_t cp, char *o)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    o[0] = (char)(0xC0 | (cp >> 6)); /* stand-ins are below U+0800 */
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

static uint32_t stand_in(int b)
{
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))
        return (uint32_t)b;
    uint32_t n = 0;
    for (int c = 0; c < b; c++)
        n += !((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF));
    return 256 + n;
}

typedef struct vocab {
    gguf_file *f;
    gguf_tokenizer *t;
    buf data;
} vocab;

static void finish(vocab *v, buf *kv, uint64_t n_kv)
{
    buf b = {0};
    put(&b, "GGUF", 4);
    put_u32(&b, 3);
    put_u64(&b, 0);
    put_u64(&b, n_kv);
    put(&b, kv->p, kv->n);
    free(kv->p);
    while (b.n % 32)
        put(&b, "", 1);
    v->data = b;
    gguf_error err;
    if (gguf_file_open_memory(&v->f, b.p, b.n, "fuzz-vocab.gguf", NULL, &err) ||
        gguf_tokenizer_create_file(&v->t, v->f, &err)) {
        fprintf(stderr, "fuzz_tokenize: vocabulary: %s\n", err.message);
        abort();
    }
}

/* Byte-level BPE: 256 stand-ins, merges for a few English words (with and
 * without the leading "Ġ"), two special tokens. */
static void make_bpe(vocab *v, const char *pre)
{
    static const char *const words[] = {"the", "and", "ing", "hello", "world", "def", "return",
                                        "123", "  ", "\n\n", "é"};
    char *tok[1024], *mer[1024];
    int32_t type[1024];
    uint32_t nt = 0, nm = 0;
    for (int b = 0; b < 256; b++) {
        char s[4] = {0};
        utf8(stand_in(b), s);
        tok[nt] = strdup(s);
        type[nt++] = 1;
    }
    for (size_t w = 0; w < sizeof words / sizeof *words; w++)
        for (int lead = 0; lead < 2; lead++) {
            char enc[64];
            size_t n = 0, first;
            if (lead)
                n += utf8(stand_in(' '), enc);
            for (const unsigned char *c = (const unsigned char *)words[w]; *c; c++)
                n += utf8(stand_in(*c), enc + n);
            enc[n] = 0;
            /* merges left to right: prefix + next character */
            first = (unsigned char)enc[0] >= 0xC0 ? 2 : 1;
            for (size_t at = first; at < n;) {
                const size_t cl = (unsigned char)enc[at] >= 0xC0 ? 2 : 1;
                char m[160];
                snprintf(m, sizeof m, "%.*s %.*s", (int)at, enc, (int)cl, enc + at);
                char whole[64];
                snprintf(whole, sizeof whole, "%.*s", (int)(at + cl), enc);
                bool dup = false;
                for (uint32_t k = 256; k < nt && !dup; k++)
                    dup = !strcmp(tok[k], whole);
                if (!dup) {
                    mer[nm++] = strdup(m);
                    tok[nt] = strdup(whole);
                    type[nt++] = 1;
                }
                at += cl;
            }
        }
    tok[nt] = strdup("<|endoftext|>");
    type[nt++] = 3;
    tok[nt] = strdup("<tool>");
    type[nt++] = 4;
    buf kv = {0};
    kv_str(&kv, "tokenizer.ggml.model", "gpt2");
    kv_str(&kv, "tokenizer.ggml.pre", pre);
    kv_strs(&kv, "tokenizer.ggml.tokens", tok, nt);
    kv_i32s(&kv, "tokenizer.ggml.token_type", type, nt);
    kv_strs(&kv, "tokenizer.ggml.merges", mer, nm);
    kv_u32(&kv, "tokenizer.ggml.bos_token_id", nt - 2);
    kv_u32(&kv, "tokenizer.ggml.eos_token_id", nt - 2);
    finish(v, &kv, 7);
    for (uint32_t i = 0; i < nt; i++)
        free(tok[i]);
    for (uint32_t i = 0; i < nm; i++)
        free(mer[i]);
}

/* SPM: <unk> <s> </s>, the 256 byte tokens, a few pieces with scores. */
static void make_spm(vocab *v)
{
    static const char *const pieces[] = {"\xE2\x96\x81", "\xE2\x96\x81t", "\xE2\x96\x81th",
                                         "\xE2\x96\x81the", "he", "ll", "o", "h", "e", "l",
                                         "\xE2\x96\x81h", "\xE2\x96\x81he", "llo",
                                         "\xE2\x96\x81hello", "t"};
    char *tok[300];
    int32_t type[300];
    float score[300];
    uint32_t nt = 0;
    const char *sp[] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3; i++) {
        tok[nt] = strdup(sp[i]);
        score[nt] = 0;
        type[nt++] = i ? 3 : 2;
    }
    for (int b = 0; b < 256; b++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        tok[nt] = strdup(s);
        score[nt] = 0;
        type[nt++] = 6;
    }
    for (size_t i = 0; i < sizeof pieces / sizeof *pieces; i++) {
        tok[nt] = strdup(pieces[i]);
        score[nt] = (float)i - 20;
        type[nt++] = 1;
    }
    buf kv = {0};
    kv_str(&kv, "tokenizer.ggml.model", "llama");
    kv_strs(&kv, "tokenizer.ggml.tokens", tok, nt);
    kv_i32s(&kv, "tokenizer.ggml.token_type", type, nt);
    kv_f32s(&kv, "tokenizer.ggml.scores", score, nt);
    finish(v, &kv, 4);
    for (uint32_t i = 0; i < nt; i++)
        free(tok[i]);
}

/* WPM: [PAD] [UNK] [CLS] [SEP] [MASK] and some word pieces. */
static void make_wpm(vocab *v)
{
    static const char *const toks[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                                       "\xE2\x96\x81hello", "\xE2\x96\x81the", "ing",
                                       "\xE2\x96\x81play", "\xE2\x96\x81,", "\xE2\x96\x81\xE4\xB8\xAD",
                                       "s", "\xE2\x96\x81" "a"};
    char *tok[16];
    int32_t type[16];
    const uint32_t nt = sizeof toks / sizeof *toks;
    for (uint32_t i = 0; i < nt; i++) {
        tok[i] = strdup(toks[i]);
        type[i] = i < 5 ? 3 : 1;
    }
    buf kv = {0};
    kv_str(&kv, "tokenizer.ggml.model", "bert");
    kv_strs(&kv, "tokenizer.ggml.tokens", tok, nt);
    kv_i32s(&kv, "tokenizer.ggml.token_type", type, nt);
    kv_u32(&kv, "tokenizer.ggml.unknown_token_id", 1);
    kv_u32(&kv, "tokenizer.ggml.bos_token_id", 2);
    kv_u32(&kv, "tokenizer.ggml.seperator_token_id", 3);
    finish(v, &kv, 6);
    for (uint32_t i = 0; i < nt; i++)
        free(tok[i]);
}

/* One tokenizer.ggml.pre value per regex family. */
static const char *const pres[] = {
    "default", "gpt-2", "llama3", "dbrx", "glm4", "jais-2", "deepseek-llm", "deepseek-v3",
    "deepseek-coder", "falcon", "starcoder", "qwen2", "qwen35", "bloom", "viking", "tekken",
    "gpt-4o", "kimi-k2", "seed-coder", "bailingmoe", "exaone-moe", "youtu", "chameleon",
};
enum { N_PRE = sizeof pres / sizeof *pres, N_VOCAB = N_PRE + 2 };

static vocab vocabs[N_VOCAB]; /* built on first use, kept for the process */

static const vocab *get_vocab(unsigned k)
{
    vocab *v = &vocabs[k];
    if (!v->t) {
        if (k == N_PRE)
            make_spm(v);
        else if (k == N_PRE + 1)
            make_wpm(v);
        else
            make_bpe(v, pres[k]);
    }
    return v;
}

/* Strict UTF-8, written apart from the library's checker. */
static bool valid_utf8(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        const uint8_t c = s[i];
        size_t len;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            len = 2, cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3, cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4, cp = c & 0x07;
        } else {
            return false;
        }
        if (n - i < len)
            return false;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return false;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
            return false;
        i += len;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    const unsigned k = data[0] % N_VOCAB;
    const gguf_tokenizer *t = get_vocab(k)->t;
    const uint8_t sw = data[1];
    const char *text = (const char *)data + 2;
    const size_t len = size - 2;

    gguf_tokenize_opts o;
    gguf_tokenize_opts_init(&o);
    o.parse_special = sw & 1;
    o.add_bos = sw & 2 ? 1 : 0;
    o.add_eos = sw & 4 ? 1 : 0;
    int32_t *ids;
    int64_t n;
    gguf_error err;
    const int rc = gguf_tokenize_text(t, text, len, &o, &ids, &n, &err);
    const bool valid = valid_utf8((const uint8_t *)text, len);
    if (!valid) {
        if (rc != GGUF_E_BAD_UTF8 || ids)
            __builtin_trap();
    } else if (rc) {
        __builtin_trap(); /* every valid text tokenizes with these vocabularies */
    }
    if (!rc) {
        const int64_t nv = gguf_tokenizer_n_vocab(t);
        for (int64_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= nv)
                __builtin_trap();
        /* BPE: every byte has a token, so the text comes back. SPM: the same
         * when no special token split it (the text after one gets its own
         * space prefix). WPM normalises: no round trip. */
        const gguf_tok_type ty = gguf_tokenizer_type(t);
        /* SPM also reads a "▁" in the text as a space */
        const bool spm_ambiguous = memmem(text, len, "\xE2\x96\x81", 3) ||
                                   (o.parse_special && memchr(text, '<', len));
        const gguf_detokenize_opts d = {.special = true};
        char *back;
        size_t bl;
        const int skip = (int)(o.add_bos != 0); /* BOS is not part of the text */
        if (gguf_detokenize(t, ids + skip, n - skip - (o.add_eos != 0), &d, &back, &bl, &err))
            __builtin_trap();
        if (ty == GGUF_TOK_BPE || (ty == GGUF_TOK_SPM && !spm_ambiguous))
            if (bl != len || memcmp(back, text, len))
                __builtin_trap();
        free(back);
        free(ids);
    }

    /* the indexed partition and llama.cpp's scan per special token agree */
    if (valid && len) {
        tok_frag *f1, *f2;
        size_t n1, n2;
        if (tok_special_partition_mode(t, text, len, o.parse_special, 1, &f1, &n1) ||
            tok_special_partition_mode(t, text, len, o.parse_special, 2, &f2, &n2))
            __builtin_trap();
        if (n1 != n2)
            __builtin_trap();
        for (size_t i = 0; i < n1; i++)
            if (f1[i].off != f2[i].off || f1[i].len != f2[i].len || f1[i].id != f2[i].id)
                __builtin_trap();
        free(f1);
        free(f2);
    }

    /* ids straight from the input: any id of the vocabulary detokenizes */
    const int64_t nv = gguf_tokenizer_n_vocab(t);
    int32_t raw[64];
    int64_t nr = 0;
    for (size_t i = 2; i + 1 < size && nr < 64; i += 2)
        raw[nr++] = (int32_t)((data[i] | data[i + 1] << 8) % nv);
    char *s;
    size_t sl;
    const gguf_detokenize_opts hidden = {.special = false};
    if (gguf_detokenize(t, raw, nr, &hidden, &s, &sl, &err) || s[sl] != 0)
        __builtin_trap();
    free(s);
    return 0;
}
