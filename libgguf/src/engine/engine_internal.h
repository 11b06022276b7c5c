/* Internal helpers of the engine module: JSON access that names the path of
 * every field it rejects, and the growing reply. Not installed. */
#ifndef GGUF_ENGINE_INTERNAL_H
#define GGUF_ENGINE_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/engine.h"

/* The JSON path of the field being read, e.g. "choices[0].logprobs". */
typedef struct eng_path {
    char buf[256];
    size_t len;
} eng_path;

/* Append ".key" ("key" at the root) or "[i]"; return the length to pop back to. */
size_t eng_path_key(eng_path *p, const char *key);
size_t eng_path_index(eng_path *p, size_t i);
void eng_path_pop(eng_path *p, size_t len);

/* GGUF_E_BAD_VALUE "reply: PATH: what" (what may use printf formats). */
int eng_bad(gguf_error *err, const eng_path *p, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* "an object", "a string", "null", ... for messages. */
const char *eng_json_kind(const json_t *v);

/* Load a body (no NUL bytes, no duplicate keys); GGUF_E_BAD_VALUE naming the
 * line and column, GGUF_E_LIMIT over GGUF_ENGINE_MAX_BODY. */
int eng_load(json_t **out, const char *body, size_t len, gguf_error *err);

/* Typed reads of child key of obj (path p points at obj). "opt" variants
 * accept a missing key or null (return 0 and leave *out / return NULL). */
int eng_get_array(json_t **out, json_t *obj, const char *key, eng_path *p, bool opt,
                  gguf_error *err);
int eng_get_object(json_t **out, json_t *obj, const char *key, eng_path *p, bool opt,
                   gguf_error *err);
int eng_get_string(const char **out, json_t *obj, const char *key, eng_path *p, bool opt,
                   gguf_error *err);

/* A number (integer or real) into *out; null gives NAN when null_ok. p names v. */
int eng_number(double *out, const json_t *v, const eng_path *p, bool null_ok, gguf_error *err);
/* A token id: an integer 0..INT32_MAX. */
int eng_token_id(int32_t *out, const json_t *v, const eng_path *p, gguf_error *err);
/* An array of token ids (malloc'd; non-NULL on success). */
int eng_id_array(int32_t **out, int64_t *n, const json_t *arr, eng_path *p, gguf_error *err);

/* "token_id:N" (vLLM's return_tokens_as_token_ids) -> N, else -1. */
int32_t eng_token_id_text(const char *s);

/* A logprob as engines clamp them: vLLM writes -9999 for -inf, llama-server
 * -FLT_MAX; both read as -INFINITY. */
double eng_logprob_value(double v);

/* The growing reply. */
gguf_engine_reply *eng_reply_new(void);
/* A new position at the end (zeroed, id -1, logprob NAN); NULL when out of
 * memory or over GGUF_ENGINE_MAX_POSITIONS (err filled). */
gguf_engine_pos *eng_reply_push(gguf_engine_reply *r, gguf_error *err);
/* Insert n zeroed positions at the front. */
int eng_reply_prepend(gguf_engine_reply *r, int64_t n, gguf_error *err);
/* Append an alternative to pos (text copied, may be NULL). */
int eng_pos_add_alt(gguf_engine_pos *pos, int32_t id, const char *text, double logprob,
                    gguf_error *err);
/* Sort pos's alternatives by logprob descending, stable. */
void eng_pos_sort(gguf_engine_pos *pos);
/* strdup that fills err (GGUF_E_NOMEM); NULL in gives NULL out without error. */
int eng_strdup(char **out, const char *s, gguf_error *err);
/* Set id (from "token_id:N" when id < 0) and text of a position or alternative. */
int eng_set_token(int32_t *id, char **text, int32_t given_id, const char *s, uint32_t *found,
                  gguf_error *err);

/* Parsers of one family (engine_reply_openai.c, engine_reply_native.c). */
int eng_parse_openai(gguf_engine_reply *r, json_t *root, gguf_engine_endpoint ep,
                     gguf_error *err);
int eng_parse_generate(gguf_engine_reply *r, json_t *root, gguf_error *err);
/* SGLang's meta_info: {input,output}_token_logprobs of [logprob, id, text]
 * and their _top_logprobs (the /generate reply, and each chat choice that
 * asked return_meta_info). */
int eng_parse_sglang_meta(gguf_engine_reply *r, json_t *meta, eng_path *p, gguf_error *err);
int eng_parse_completion(gguf_engine_reply *r, json_t *root, gguf_error *err);

#endif
