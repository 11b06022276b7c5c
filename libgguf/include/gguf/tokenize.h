/*
 * gguf/tokenize.h - text <-> token ids from a GGUF vocabulary, the way
 * llama.cpp does it, from the metadata alone (tokenizer.ggml.*).
 *
 * Three algorithms, chosen by tokenizer.ggml.model:
 *
 *   "llama"  SentencePiece-style (SPM): " " prefix (add_space_prefix), every
 *            ' ' becomes U+2581 "▁", then adjacent pieces whose joined text is
 *            a token merge, highest score first (leftmost on ties); a piece
 *            with no token goes out as <0xNN> byte tokens.
 *   "gpt2"   byte-level BPE: the pre-tokenizer of tokenizer.ggml.pre splits the
 *            text into words with llama.cpp's regexes (run with PCRE2); each
 *            word's bytes become GPT-2's printable stand-in characters and
 *            merge pairwise by the rank of tokenizer.ggml.merges (lowest
 *            first, leftmost on ties).
 *   "bert"   WordPiece (WPM): accents stripped from precomposed letters,
 *            lowercase, split at whitespace and around punctuation and CJK
 *            characters; each word "▁word" takes the longest token at each
 *            position, or becomes [UNK] as a whole.
 *
 * Before that, special tokens written in the text become their ids (llama.cpp's
 * parse_special): control and unknown tokens when asked (on by default here),
 * user-defined tokens always, the longest texts first. BOS and EOS are added
 * as tokenizer.ggml.add_bos_token / add_eos_token say, with llama.cpp's
 * defaults, unless the caller overrides them.
 *
 * docs/tokenize.md lists every supported tokenizer.ggml.pre value with the
 * source of its regexes and each place where llama.cpp's own regex handling
 * differs from a standard engine's (its results are the ones reproduced).
 *
 * Thread safety: a tokenizer is read-only after creation; any number of
 * threads may tokenize and detokenize with it at once.
 */
#ifndef GGUF_TOKENIZE_H
#define GGUF_TOKENIZE_H

#include "gguf/export.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/error.h"
#include "gguf/file.h"

GGUF_BEGIN_DECLS

typedef struct gguf_tokenizer gguf_tokenizer;

typedef enum gguf_tok_type {
    GGUF_TOK_SPM = 1, /* tokenizer.ggml.model "llama" */
    GGUF_TOK_BPE = 2, /* "gpt2" */
    GGUF_TOK_WPM = 3, /* "bert" */
} gguf_tok_type;

/* Token types, the values of tokenizer.ggml.token_type. */
enum {
    GGUF_TOKEN_UNDEFINED = 0,
    GGUF_TOKEN_NORMAL = 1,
    GGUF_TOKEN_UNKNOWN = 2,
    GGUF_TOKEN_CONTROL = 3,
    GGUF_TOKEN_USER_DEFINED = 4,
    GGUF_TOKEN_UNUSED = 5,
    GGUF_TOKEN_BYTE = 6,
};

/*
 * Build a tokenizer from the metadata of `model` (its part 0): reads
 * tokenizer.ggml.model, .pre, .tokens (required), .merges (required for
 * "gpt2" except pre "kimi-k2"), .scores, .token_type, .bos_token_id,
 * .eos_token_id, .unknown_token_id, .seperator_token_id, .add_bos_token,
 * .add_eos_token, .add_sep_token, .add_space_prefix, and general.name (one
 * llama.cpp rule keys on it: phi-3's special tokens eat the whitespace after
 * them). A vocabulary-only file (no tensors) is a valid model.
 * The tokenizer borrows token texts from the set: free it before the set.
 * @return 0; GGUF_E_INVALID (NULL argument); GGUF_E_NOT_FOUND (no tokens, or
 *         no merges for "gpt2"); GGUF_E_UNSUPPORTED (tokenizer.ggml.model or
 *         .pre is a value this library does not know: the message names it and
 *         lists the supported ones); GGUF_E_WRONG_TYPE / GGUF_E_BAD_VALUE
 *         (arrays of the wrong type or length); GGUF_E_LIMIT (over 2^30 tokens
 *         or merges); GGUF_E_NOMEM.
 */
int gguf_tokenizer_create(gguf_tokenizer **out, const gguf_set *model, gguf_error *err);

/* Same, from one file's metadata (e.g. a file opened from memory). */
int gguf_tokenizer_create_file(gguf_tokenizer **out, const gguf_file *meta, gguf_error *err);

/* Accepts NULL. */
void gguf_tokenizer_free(gguf_tokenizer *tok);

/* For add_bos and add_eos: do what the metadata says. */
#define GGUF_TOK_AUTO (-1)

typedef struct gguf_tokenize_opts {
    unsigned int version; /* GGUF_TOKENIZE_OPTS_VERSION, or 0 for the same (see below) */
    int add_bos;        /* GGUF_TOK_AUTO (default), 0 never, 1 always */
    int add_eos;        /* the same for the closing token: EOS, or SEP for "bert" */
    bool parse_special; /* control and unknown tokens written in the text become
                           their ids (default true); user-defined ones always do */
} gguf_tokenize_opts;
/* The layout version of gguf_tokenize_opts: the library refuses a larger one with
 * GGUF_E_OPTS_VERSION (docs/conventions.md, "Options structs"). */
#define GGUF_TOKENIZE_OPTS_VERSION 1
/* The defaults, version set: gguf_tokenize_opts o = GGUF_TOKENIZE_OPTS_INIT; */
#define GGUF_TOKENIZE_OPTS_INIT                                                             \
    {.version = GGUF_TOKENIZE_OPTS_VERSION, .add_bos = GGUF_TOK_AUTO, .add_eos = GGUF_TOK_AUTO, \
     .parse_special = true}

/* The defaults: {GGUF_TOK_AUTO, GGUF_TOK_AUTO, true}. */
void gguf_tokenize_opts_init(gguf_tokenize_opts *opts);

/*
 * Tokenize len bytes of text (need not be NUL-terminated; must be valid
 * UTF-8). opts may be NULL for the defaults. *out_ids is owned by the caller
 * (free()); it is non-NULL on success even when *n is 0.
 * @return 0; GGUF_E_INVALID (NULL argument, or a BOS/EOS/SEP to add that the
 *         vocabulary does not have); GGUF_E_BAD_UTF8 (the text is not valid
 *         UTF-8; the message gives the byte offset in the text);
 *         GGUF_E_NOT_FOUND (SPM: a byte with neither a byte token nor an
 *         unknown token; WPM: an unknown word without an unknown token);
 *         GGUF_E_LIMIT (text over 1 GiB, or a pre-tokenizer regex ran past
 *         PCRE2's limits); GGUF_E_NOMEM.
 */
int gguf_tokenize_text(const gguf_tokenizer *tok, const char *text, size_t len,
                       const gguf_tokenize_opts *opts, int32_t **out_ids, int64_t *n,
                       gguf_error *err);

/*
 * gguf_tokenize_text with add_bos as given (true: BOS first; false: none), no
 * EOS, special tokens parsed. Kept for the callers of the first version.
 */
int gguf_tokenize(const gguf_tokenizer *tok, const char *text, size_t len, bool add_bos,
                  int32_t **out_ids, int64_t *n, gguf_error *err);

/*
 * The bytes token `id` stands for (llama.cpp's token_to_piece): BPE stand-in
 * characters decoded to bytes, SPM's "▁" as ' ' and <0xNN> as the byte, WPM's
 * word-start "▁" as ' '. Control and unknown tokens give their text when
 * `special` is true and nothing otherwise; user-defined tokens always give
 * their text; unused and undefined tokens give nothing. A piece need not be
 * valid UTF-8 (a byte token is part of a character). *piece borrows from the
 * tokenizer (valid until it is freed); it is not NUL-terminated.
 * @return 0; GGUF_E_INVALID (NULL argument or id outside the vocabulary).
 */
int gguf_token_piece(const gguf_tokenizer *tok, int32_t id, bool special, const char **piece,
                     size_t *len);

/*
 * gguf_token_piece (special tokens hidden) copied into buf as a C string:
 * size bytes at most, always NUL-terminated, cut short (possibly inside a
 * UTF-8 character) when the piece does not fit. For printing one token of a
 * decode; for a whole text use gguf_detokenize.
 * @return the bytes written, excluding the NUL (0 for control, unknown and
 *         unused tokens); GGUF_E_INVALID (NULL tok or buf, size 0, or id
 *         outside the vocabulary; buf, when given, then holds "").
 */
int gguf_token_text(const gguf_tokenizer *tok, int32_t id, char *buf, size_t size);

typedef struct gguf_detokenize_opts {
    unsigned int version; /* GGUF_DETOKENIZE_OPTS_VERSION, or 0 for the same (see below) */
    bool special;      /* show control and unknown tokens' text (default false) */
    bool keep_prefix;  /* SPM: keep the " " the tokenizer put before the text;
                          default false: a leading ' ' of the first token's piece
                          is dropped when add_space_prefix is on, as llama.cpp does */
} gguf_detokenize_opts;
/* The layout version of gguf_detokenize_opts: the library refuses a larger one with
 * GGUF_E_OPTS_VERSION (docs/conventions.md, "Options structs"). */
#define GGUF_DETOKENIZE_OPTS_VERSION 1
/* The defaults, version set: gguf_detokenize_opts o = GGUF_DETOKENIZE_OPTS_INIT; */
#define GGUF_DETOKENIZE_OPTS_INIT {.version = GGUF_DETOKENIZE_OPTS_VERSION}

/*
 * The text of n ids: their pieces, concatenated (nothing cleaned up, so that
 * detokenize(tokenize(x)) == x where the vocabulary can spell x). Bytes that
 * do not form whole UTF-8 characters (a character cut at the end, byte
 * tokens) are kept as they are. opts may be NULL (defaults: specials hidden,
 * prefix dropped). *out is malloc'd, NUL-terminated (not counted in *len),
 * owned by the caller.
 * @return 0; GGUF_E_INVALID (NULL argument, n < 0, or an id outside the
 *         vocabulary: the message says which position); GGUF_E_NOMEM.
 */
int gguf_detokenize(const gguf_tokenizer *tok, const int32_t *ids, int64_t n,
                    const gguf_detokenize_opts *opts, char **out, size_t *len,
                    gguf_error *err);

gguf_tok_type gguf_tokenizer_type(const gguf_tokenizer *tok);
/* tokenizer.ggml.model: "llama", "gpt2" or "bert". */
const char *gguf_tokenizer_model(const gguf_tokenizer *tok);
/* tokenizer.ggml.pre as written ("default" when absent). */
const char *gguf_tokenizer_pre(const gguf_tokenizer *tok);
int64_t gguf_tokenizer_n_vocab(const gguf_tokenizer *tok);
int32_t gguf_tokenizer_bos(const gguf_tokenizer *tok); /* -1 when the model has none */
int32_t gguf_tokenizer_eos(const gguf_tokenizer *tok); /* -1 when the model has none */
int32_t gguf_tokenizer_unk(const gguf_tokenizer *tok); /* -1 when the model has none */
int32_t gguf_tokenizer_sep(const gguf_tokenizer *tok); /* -1 when the model has none */
/* Whether BOS / the closing token are added by default (GGUF_TOK_AUTO). */
bool gguf_tokenizer_add_bos(const gguf_tokenizer *tok);
bool gguf_tokenizer_add_eos(const gguf_tokenizer *tok);
/* GGUF_TOKEN_* of id after llama.cpp's corrections (e.g. "<|im_end|>" is
 * control whatever the file says); -1 for an id outside the vocabulary. */
int gguf_tokenizer_token_type(const gguf_tokenizer *tok, int32_t id);

/* The tokenizer.ggml.pre values "gpt2" vocabularies may have, in the order
 * docs/tokenize.md lists them; *n gets the count. */
const char *const *gguf_tokenizer_pre_names(size_t *n);

GGUF_END_DECLS
#endif /* GGUF_TOKENIZE_H */
