/* Internals of the tokenize module, shared by tokenize_*.c. Not installed. */
#ifndef GGUF_TOKENIZE_INTERNAL_H
#define GGUF_TOKENIZE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/tokenize.h"

/* Token attributes, as llama.cpp derives them from tokenizer.ggml.token_type. */
enum {
    TOK_ATTR_UNKNOWN = 1u << 0,
    TOK_ATTR_UNUSED = 1u << 1,
    TOK_ATTR_NORMAL = 1u << 2,
    TOK_ATTR_CONTROL = 1u << 3,
    TOK_ATTR_USER_DEFINED = 1u << 4,
    TOK_ATTR_BYTE = 1u << 5,
    TOK_ATTR_RSTRIP = 1u << 8,
};

/* Cap on a pre-tokenizer family's regexes (deepseek-llm has 6). */
#define TOK_MAX_REGEX 8

/* A pre-tokenizer family: llama.cpp's regexes for one group of
 * tokenizer.ggml.pre values, and the flags llama.cpp sets for them. */
typedef struct tok_family {
    const char *id;                      /* e.g. "llama3", for docs and errors */
    const char *regex[TOK_MAX_REGEX];    /* llama.cpp's strings, NULL-terminated */
    bool ignore_merges, add_bos, no_bos, merges_optional;
} tok_family;

/* tokenizer.ggml.pre value -> family. */
typedef struct tok_pre_name {
    const char *name;
    const tok_family *fam;
} tok_pre_name;

/* One compiled pre-tokenizer regex (a pcre2_code and its JIT state). */
typedef struct tok_regex tok_regex;

/* BPE merge: (left symbol, right symbol) -> rank and merged symbol. */
typedef struct tok_merge {
    uint64_t key; /* left << 32 | right; UINT64_MAX = empty slot */
    uint32_t rank;
    int32_t result;
} tok_merge;

struct gguf_tokenizer {
    gguf_tok_type type;
    char model[16];
    char pre[64];
    const tok_family *fam;     /* BPE only */
    const char *path;          /* for messages (borrowed from the file) */

    int64_t n_vocab;
    const gguf_str *strs;      /* token texts, borrowed from the file */
    uint16_t *attr;            /* TOK_ATTR_* per token */
    float *scores;             /* SPM merge priorities (0 when absent) */
    uint32_t *slots;           /* text -> id: open addressing, id + 1, 0 = empty */
    uint64_t mask;
    size_t max_token_len;

    int32_t bos, eos, unk, sep;
    int16_t cp_byte[256 + 68]; /* GPT-2 stand-in code point -> byte, -1 */
    bool add_bos, add_eos, add_sep, add_space_prefix;

    /* SPM: <0xNN> token of each byte (or the byte itself as a token), -1 */
    int32_t byte_tok[256];

    /* BPE: symbols are token ids, then strings that only merges name */
    int32_t byte_sym[256];     /* symbol of each byte's stand-in character, -1 */
    gguf_str *extra;           /* texts of symbols n_vocab.. */
    char *extra_buf;
    int64_t n_extra;
    uint32_t *sym_slots;       /* extra text -> n_vocab + k: id + 1, 0 = empty */
    uint64_t sym_mask;
    tok_merge *merges;
    uint64_t merge_mask;
    int64_t n_merges;
    tok_regex *re[TOK_MAX_REGEX];
    int n_re;

    /* WPM: the splitter of normalised text */
    tok_regex *wpm_re;

    /* Special tokens, longest text first (llama.cpp's partition order). */
    int32_t *special;
    int64_t n_special;

    /* Pieces (token_to_piece with specials shown), concatenated. */
    char *piece_buf;
    uint64_t *piece_off;       /* n_vocab + 1 offsets */
};

/* ---- shared helpers (tokenize_vocab.c) ---- */
uint64_t tok_hash(const char *s, size_t n);
/* Id of the token whose text is s[0..n), or -1. */
int32_t tok_lookup(const gguf_tokenizer *t, const char *s, size_t n);

/* Length of the UTF-8 sequence starting with byte c (1 for a stray byte). */
static inline size_t tok_utf8_len(unsigned char c)
{
    static const uint8_t lens[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lens[c >> 4];
}

/* Strict UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
 * Returns the length of the valid prefix: len when all of s is valid. */
size_t tok_utf8_valid(const char *s, size_t len);
/* Decode the code point at s (valid UTF-8, n bytes available); *adv its length. */
uint32_t tok_utf8_decode(const unsigned char *s, size_t *adv);
/* Encode cp into out (4 bytes room); returns the length. */
size_t tok_utf8_encode(uint32_t cp, char *out);

/* GPT-2's byte -> printable stand-in code point, and back (-1 if none). */
uint32_t tok_byte_to_cp(unsigned char b);
int tok_cp_to_byte(uint32_t cp);

/* A growable list of ids. */
typedef struct tok_ids {
    int32_t *v;
    int64_t n, cap;
} tok_ids;
int tok_ids_push(tok_ids *o, int32_t id);

/* ---- pre-tokenizers (tokenize_pre.c) ---- */
extern const tok_pre_name gguf_tok_pre_names[];
extern const size_t gguf_tok_pre_name_count;
extern const tok_family gguf_tok_family_default; /* no tokenizer.ggml.pre */

/* Compile llama.cpp's regex `src` for PCRE2 (see tok_regex_translate). */
int tok_regex_compile(tok_regex **out, const char *src, const char *path, gguf_error *err);
/* Compile a regex that needs no translation (PCRE2 syntax, UTF + UCP). */
int tok_regex_compile_raw(tok_regex **out, const char *pattern, const char *path,
                          gguf_error *err);
void tok_regex_free(tok_regex *r);
/* llama.cpp's regex -> the PCRE2 pattern that matches the same text; *out is
 * malloc'd. The rules are in docs/tokenize.md and tokenize_pre.c. */
int tok_regex_translate(const char *src, char **out);

/* Per-call matching state (match data, JIT stack), one per tokenize call. */
typedef struct tok_matcher tok_matcher;
int tok_matcher_create(tok_matcher **out);
void tok_matcher_free(tok_matcher *m);

/*
 * Pieces of s[0..len) under regex r, llama.cpp style: every match is a piece
 * and so is every run of text between matches. Calls emit(ctx, off, n) in
 * order (offsets relative to s). Returns 0, the first non-zero value emit
 * returned, or GGUF_E_LIMIT when PCRE2 gives up (its match or JIT stack limit).
 */
typedef int (*tok_emit_fn)(void *ctx, size_t off, size_t n);
int tok_regex_split(const tok_regex *r, tok_matcher *m, const char *s, size_t len,
                    tok_emit_fn emit, void *ctx);
/* Like tok_regex_split, but reports which capture group matched (1-based; 0
 * for text between matches). For the WPM splitter. */
typedef int (*tok_group_fn)(void *ctx, int group, size_t off, size_t n);
int tok_regex_scan(const tok_regex *r, tok_matcher *m, const char *s, size_t len,
                   tok_group_fn fn, void *ctx);

/* ---- the algorithms: each appends ids for one fragment of raw text ---- */
int tok_spm_encode(const gguf_tokenizer *t, const char *text, size_t len, bool space_prefix,
                   tok_ids *out, gguf_error *err);
int tok_bpe_setup(gguf_tokenizer *t, const gguf_file *meta, gguf_error *err);
typedef struct tok_bpe_state tok_bpe_state;
int tok_bpe_state_create(tok_bpe_state **out);
void tok_bpe_state_free(tok_bpe_state *s);
int tok_bpe_encode(const gguf_tokenizer *t, tok_bpe_state *st, tok_matcher *m,
                   const char *text, size_t len, tok_ids *out, gguf_error *err);
int tok_wpm_setup(gguf_tokenizer *t, gguf_error *err);
int tok_wpm_encode(const gguf_tokenizer *t, tok_matcher *m, const char *text, size_t len,
                   tok_ids *out, gguf_error *err);

/* Pre-tokenizer words of text (BPE), for tests: offsets and lengths. */
int tok_bpe_words(const gguf_tokenizer *t, const char *text, size_t len, size_t **offs,
                  size_t **lens, size_t *n, gguf_error *err);

/* ---- special tokens (tokenize_special.c) ---- */
int tok_special_setup(gguf_tokenizer *t, const gguf_file *meta, gguf_error *err);

/* A fragment of the text: raw text (id < 0) or a special token already found. */
typedef struct tok_frag {
    size_t off, len;
    int32_t id;
} tok_frag;
int tok_special_partition(const gguf_tokenizer *t, const char *text, size_t len,
                          bool parse_special, tok_frag **out, size_t *n);
/* The same with the method forced (tests): 0 chosen by size, 1 one scan per
 * special token (llama.cpp's way), 2 the text indexed by byte pairs. */
int tok_special_partition_mode(const gguf_tokenizer *t, const char *text, size_t len,
                               bool parse_special, int mode, tok_frag **out, size_t *n);

/* ---- pieces (tokenize_detok.c) ---- */
int tok_pieces_setup(gguf_tokenizer *t, gguf_error *err);
/*
 * The one decoder of a token's stored text: the bytes it stands for
 * (llama.cpp's token_to_piece with special tokens shown), written to b, never
 * more than s.len bytes. attr is the token's TOK_ATTR_*; cp_byte GPT-2's
 * stand-in table (indexed by code points below 256 + 68), or NULL to look
 * each character up. The tokenizer's pieces and gguf_fwd_token_text use it.
 */
size_t tok_piece_bytes(gguf_tok_type type, uint16_t attr, gguf_str s, const int16_t *cp_byte,
                       char *b);
/* TOK_ATTR_* of a tokenizer.ggml.token_type value as the file says (before
 * llama.cpp's corrections); 0 (undefined) for values out of range. */
uint16_t tok_attr_of_type(int64_t v);

#endif
