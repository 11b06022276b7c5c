/*
 * gguf/tokenize.h - text -> token ids from a GGUF vocabulary.
 *
 * Only SentencePiece-style vocabularies (tokenizer.ggml.model = "llama") are
 * supported, with the algorithm llama.cpp uses for them:
 *
 *   text --(" " prefix, ' ' -> U+2581 "▁")--> UTF-8 characters
 *        --(merge the adjacent pair whose joined text is a token with the
 *           highest score; the leftmost pair wins ties; repeat)--> pieces
 *        --(a piece with no token: its bytes as <0xNN> tokens)--> ids
 *
 * The space prefix follows tokenizer.ggml.add_space_prefix (default true) and
 * is not added to empty text. Special tokens written in the text (e.g. "<s>")
 * are not recognised: they are tokenized as plain text.
 */
#ifndef GGUF_TOKENIZE_H
#define GGUF_TOKENIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/error.h"
#include "gguf/file.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gguf_tokenizer gguf_tokenizer;

/*
 * Build a tokenizer from the metadata of `model` (its part 0): reads
 * tokenizer.ggml.tokens (required), .scores, .token_type, .bos_token_id,
 * .eos_token_id, .unknown_token_id, .add_bos_token, .add_space_prefix.
 * The tokenizer borrows token strings from the set: free it before closing it.
 * @return 0; GGUF_E_INVALID (NULL argument); GGUF_E_NOT_FOUND (no tokens);
 *         GGUF_E_UNSUPPORTED (tokenizer.ggml.model is not "llama", e.g. BPE
 *         "gpt2" or WPM "bert"); GGUF_E_WRONG_TYPE / GGUF_E_BAD_VALUE
 *         (arrays of the wrong type or length); GGUF_E_NOMEM.
 */
int gguf_tokenizer_create(gguf_tokenizer **out, const gguf_set *model, gguf_error *err);

/* Accepts NULL. */
void gguf_tokenizer_free(gguf_tokenizer *tok);

/*
 * Tokenize len bytes of text (need not be NUL-terminated nor valid UTF-8;
 * invalid bytes fall back to byte tokens). With add_bos the BOS id comes first.
 * *out_ids is owned by the caller (free()); it is non-NULL on success even
 * when *n is 0.
 * @return 0; GGUF_E_INVALID (NULL argument, or add_bos without a BOS id);
 *         GGUF_E_NOT_FOUND (a byte has neither a <0xNN> token nor an unknown
 *         token to fall back to); GGUF_E_NOMEM; GGUF_E_LIMIT (text over 1 GiB).
 */
int gguf_tokenize(const gguf_tokenizer *tok, const char *text, size_t len, bool add_bos,
                  int32_t **out_ids, int64_t *n, gguf_error *err);

int64_t gguf_tokenizer_n_vocab(const gguf_tokenizer *tok);
int32_t gguf_tokenizer_bos(const gguf_tokenizer *tok); /* -1 when the model has none */
int32_t gguf_tokenizer_eos(const gguf_tokenizer *tok); /* -1 when the model has none */
/* tokenizer.ggml.add_bos_token, default true for "llama" vocabularies. */
bool gguf_tokenizer_add_bos(const gguf_tokenizer *tok);

#ifdef __cplusplus
}
#endif
#endif /* GGUF_TOKENIZE_H */
