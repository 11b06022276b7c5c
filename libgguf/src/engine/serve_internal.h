/* Internals of the serve module (gguf/serve.h), shared by its files:
 *   serve.c           the server object: routing, API key, queue, stats
 *   serve_request.c   JSON bodies -> validated requests (every refusal is here)
 *   serve_run.c       one prompt through the model: chunked prompt eval,
 *                     log-softmax scoring, greedy decoding, stops
 *   serve_response.c  results -> vLLM / llama-server JSON bodies, error bodies
 *   serve_text.c      UTF-8 checks and repair, token pieces, growing buffers
 * Not installed. */
#ifndef GGUF_SERVE_INTERNAL_H
#define GGUF_SERVE_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/serve.h"
#include "gguf/version.h"

#define SERVE_MAX_STOP 16          /* stop strings per request */
#define SERVE_MAX_STOP_LEN 512     /* bytes of one stop string */
#define SERVE_MAX_STOP_IDS 256     /* stop_token_ids per request */
#define SERVE_PIECE_MAX 512        /* bytes of one token's text */
#define SERVE_FINGERPRINT "ggufkit-" GGUF_VERSION_STRING /* system_fingerprint */
#define SERVE_CHUNK_FLOATS (8u << 20) /* logits floats per eval call (32 MiB) */

struct gguf_serve {
    gguf_serve_model m;
    char *model_name;
    char *api_key;
    size_t api_key_len;
    size_t max_body;
    int64_t max_tokens;
    int max_logprobs;
    int max_queue;           /* waiting requests allowed behind the running one */
    int64_t created;
    unsigned quirks;         /* GGUF_SERVE_QUIRK_* */
    /* queue: a ticket lock, so that waiting requests run in arrival order */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t next_ticket, serving;
    atomic_bool cancel;
    uint64_t next_id;        /* response ids */
    gguf_serve_stats stats;
};

/* ---- refusals ---- */

typedef struct serve_err {
    int status;              /* HTTP status */
    char param[64];          /* the request field concerned, "" for none */
    char message[512];
} serve_err;

/* Fill e and return -1, so that parsers can `return serve_refuse(...)`. */
int serve_refuse(serve_err *e, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- requests ---- */

typedef enum serve_api { SERVE_API_OPENAI = 0, SERVE_API_LLAMA = 1 } serve_api;

typedef struct serve_prompt {
    int32_t *ids;
    int64_t n;
    char *text;              /* a text prompt as given (echo), else NULL */
    size_t text_len;
} serve_prompt;

typedef struct serve_creq {
    serve_api api;
    serve_prompt *prompts;
    int64_t n_prompts;
    int64_t max_tokens;      /* generated tokens per prompt (after the budget) */
    int logprobs;            /* OpenAI `logprobs`; -1: none */
    int prompt_logprobs;     /* vLLM `prompt_logprobs` (echo sets it too); -1: none */
    bool echo;
    bool ignore_eos;
    bool tokens_as_ids;      /* return_tokens_as_token_ids */
    bool return_token_ids;
    bool stream;             /* answered as server-sent events, a chunk per token */
    bool include_usage;      /* stream_options.include_usage: a last chunk with usage */
    bool prompt_logprobs_field; /* the choice carries vLLM's prompt_logprobs */
    int n_probs;             /* llama-server `n_probs`; 0: none */
    bool return_tokens;      /* llama-server `return_tokens` */
    int n_stop;
    char *stop[SERVE_MAX_STOP];
    size_t stop_len[SERVE_MAX_STOP];
    int n_stop_ids;
    int32_t stop_ids[SERVE_MAX_STOP_IDS];
} serve_creq;

typedef struct serve_tokreq {
    bool llama;              /* {"content"} shape */
    bool with_pieces;        /* llama-server: tokens as {id, piece} */
    bool return_token_strs;  /* vLLM */
    int32_t *ids;
    int64_t n;
} serve_tokreq;

/* Parse and validate a completion body (api picks the dialect). On a refusal
 * returns -1 with e filled; GGUF_E_NOMEM on allocation failure. */
int serve_parse_completion(gguf_serve *s, serve_api api, const char *body, size_t len,
                           serve_creq *q, serve_err *e);
void serve_creq_free(serve_creq *q);
int serve_parse_tokenize(gguf_serve *s, const char *body, size_t len, serve_tokreq *q,
                         serve_err *e);
int serve_parse_detokenize(gguf_serve *s, const char *body, size_t len, serve_tokreq *q,
                           serve_err *e);

/* ---- running one prompt ---- */

enum {
    SERVE_FIN_LENGTH = 0,    /* max_tokens reached */
    SERVE_FIN_EOS,           /* the EOS token */
    SERVE_FIN_STOP_STR,      /* a stop string (stop_index) */
    SERVE_FIN_STOP_ID,       /* a stop token id (stop_id) */
};

typedef struct serve_seq {
    int32_t *ids;            /* n_prompt + n_gen tokens */
    int64_t n_prompt, n_gen;
    /* Scores of token i given tokens < i (position 0 has none): the
     * log-probability, the 1-based rank in the vocabulary, and the top k
     * (flat, k per position). scored[i] says which positions were scored. */
    int k;
    double *lp;
    int32_t *rank;
    int32_t *top_id;
    double *top_lp;
    bool *scored;
    char *text;              /* generated bytes, cut before a stop string */
    size_t text_len;
    int finish;
    int stop_index;
    int32_t stop_id;
    bool client_gone;        /* stopped because cl->alive said false */
} serve_seq;

/* Run prompt p of q (at least one token): eval, scores where q asks for
 * them, greedy tokens. Before each model call it checks the server's cancel
 * flag and cl->alive (cl is never NULL).
 * @return 0; GGUF_E_INTERRUPTED (shutting down, or out->client_gone);
 *         GGUF_E_INVALID (an empty prompt: the parser lets none through);
 *         GGUF_E_NOMEM; the model's codes. */
int serve_run(gguf_serve *s, const gguf_serve_client *cl, const serve_creq *q,
              const serve_prompt *p, serve_seq *out, gguf_error *err);
void serve_seq_free(serve_seq *q);

/* ---- responses ---- */

/* The body of an error response, status from e. @return 0 or GGUF_E_NOMEM. */
int serve_error_response(const serve_err *e, gguf_serve_response *r);
/* Body of a finished completion request in q's dialect. */
int serve_completion_response(gguf_serve *s, const serve_creq *q, const serve_seq *seqs,
                              gguf_serve_response *r);
int serve_tokenize_response(gguf_serve *s, const serve_tokreq *q, gguf_serve_response *r);
int serve_detokenize_response(gguf_serve *s, const serve_tokreq *q, gguf_serve_response *r);
int serve_models_response(gguf_serve *s, gguf_serve_response *r);
int serve_tokenizer_info_response(gguf_serve *s, gguf_serve_response *r);
int serve_version_response(gguf_serve *s, gguf_serve_response *r);
/* GGUF_SERVE_QUIRK_LLAMA_UTF8_500: llama-server's 500 for sq's text. */
int serve_llama_parse_error(const serve_seq *sq, gguf_serve_response *r);
/* json -> r->body (compact, 17 significant digits); takes the reference. */
int serve_json_response(json_t *root, int status, gguf_serve_response *r);

/* ---- text ---- */

typedef struct serve_buf {
    char *p;
    size_t n, cap;
    bool nomem;              /* an append failed: the content is incomplete */
} serve_buf;

void serve_buf_add(serve_buf *b, const void *data, size_t n);
void serve_buf_free(serve_buf *b);

/* Length of the valid UTF-8 sequence at s (n bytes left), 0 when invalid
 * (overlong, surrogate, past U+10FFFF, truncated). */
size_t serve_utf8_seq(const unsigned char *s, size_t n);
bool serve_utf8_valid(const char *s, size_t n);
/* Copy with every invalid byte replaced by U+FFFD; out holds 3*n+1 bytes.
 * @return bytes written (out is NUL-terminated). */
size_t serve_utf8_repair(const char *in, size_t n, char *out);
/* Code points of valid UTF-8 (Python's len()). */
int64_t serve_utf8_count(const char *s, size_t n);

/* Raw bytes of a token's text into buf (SERVE_PIECE_MAX); "" on failure. */
size_t serve_piece(const gguf_serve *s, int32_t id, char *buf);
/* A JSON string of valid UTF-8 (repaired) from n bytes; NULL on NOMEM. */
json_t *serve_json_text(const char *p, size_t n);
/* The token as the response shows it: "token_id:ID" when as_id, else its
 * repaired text. */
json_t *serve_json_token(const gguf_serve *s, int32_t id, bool as_id);
/* The text of a whole sequence (strip_space applied), into b. */
void serve_decode(const gguf_serve *s, const int32_t *ids, int64_t n, serve_buf *b);

/* The token's string as the vocabulary stores it (token_raw; else its text),
 * repaired; NULL on NOMEM. */
json_t *serve_json_raw(const gguf_serve *s, int32_t id);
/* vLLM's texts (its Hugging Face tokenizer's decode, serve_text.c): the raw
 * bytes of ids with control tokens as their vocabulary string and the first
 * other token's leading space dropped (strip_space), appended to b. */
void serve_hf_decode(const gguf_serve *s, const int32_t *ids, int64_t n, serve_buf *b);
/* Whether the repaired text of p[0..n) ends with a whole character that is
 * not U+FFFD (vLLM's detokenizer holds back text that does not). */
bool serve_text_ends_whole(const char *p, size_t n);
/* The generated text of ids[0..n) as vLLM's detokenizer writes it (control
 * tokens skipped, the first token's leading space kept, text that ends inside
 * a character held back until a later token completes it and never written
 * if none does; with stop, which the last token completed, cut before its
 * first occurrence), into out (reset). emit[g] (NULL: not wanted) = bytes of
 * out a stream has written once token g was generated: what was taken but
 * its last `hold` characters (vLLM holds back the longest stop string less
 * one), all of it after the last token.
 * @return 0 or GGUF_E_NOMEM. */
int serve_vllm_gen_text(const gguf_serve *s, const int32_t *ids, int64_t n, const char *stop,
                        size_t stop_len, int64_t hold, serve_buf *out, int64_t *emit);
/* The text vLLM writes for token id after the tokens ctx[0..n_ctx) (the
 * sequence's earlier tokens, of which it reads the last four): its decoded
 * text, or where that ends inside a character, the character it completes
 * or "" (vLLM's _correct_decoded_token). Valid UTF-8, into out (reset). */
void serve_vllm_token(const gguf_serve *s, int32_t id, const int32_t *ctx, int64_t n_ctx,
                      serve_buf *out);

#endif
