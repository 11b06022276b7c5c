/*
 * gguf/serve.h - the request layer of an OpenAI-compatible HTTP server over
 * a model: routing, API-key check, request parsing and validation, greedy
 * decoding with log-probabilities, and the JSON responses, as one pure call
 * (a request in, a status and a body out), so that every byte a client can
 * send is fuzzed without a socket and without a model.
 *
 * The transport (libmicrohttpd in `ref-forward serve`) stays thin: it reads
 * at most opts.max_body bytes of a body, calls gguf_serve_handle() and sends
 * what comes back. The model enters through callbacks (gguf_serve_model):
 * the reference forward pass in the tool, a fake one in the fuzzer and the
 * unit tests.
 *
 * Endpoints (docs/serve.md has the request and response shapes):
 *
 *   GET  /health, /v1/health   {"status": "ok"}; never needs the API key
 *   GET  /v1/models            the one served model (vLLM's ModelList)
 *   POST /v1/completions       OpenAI legacy completions as vLLM answers them:
 *                              string, token-id, or batch prompts; greedy
 *                              only; `logprobs` (0..max_logprobs) in the
 *                              {tokens, token_logprobs, top_logprobs,
 *                              text_offset} shape; `echo` with prompt
 *                              log-probabilities (the first one null);
 *                              `stop`, `stop_token_ids`, `ignore_eos`;
 *                              vLLM's `prompt_logprobs`,
 *                              `return_tokens_as_token_ids`,
 *                              `return_token_ids`
 *   POST /completion,          llama-server's native completion with
 *        /completions          `n_predict` and `n_probs`
 *                              (completion_probabilities[].top_logprobs)
 *   POST /tokenize             vLLM ({"prompt"}) and llama-server
 *                              ({"content"}) request shapes
 *   POST /detokenize           {"tokens": [...]} -> {"prompt", "content"}
 *   GET  /tokenizer_info       bos/eos token texts (lm-evaluation-harness's
 *                              remote tokenizer probes it)
 *
 * Log-probabilities are the log-softmax, in double, of the float logits the
 * model callback returns; top-k lists are ordered by log-probability, ties
 * by lower token id; a generated token is the argmax (the first on ties).
 *
 * Refusals are OpenAI-style error objects,
 *     {"error": {"message": "...", "type": "BadRequestError", "param": "temperature", "code": 400}}
 * with status 400 (malformed JSON, a body that is not UTF-8, a field of the
 * wrong type, a value out of range or unknown, a sampling setting other than
 * greedy, too many tokens, a prompt of no tokens - a text prompt too, when
 * the tokenizer finds nothing in it - and framing the transport found
 * ambiguous), 401 (API key), 404 (no such path, another model name), 405
 * (method), 413 (body over max_body), 501 (a text prompt when the vocabulary
 * has no tokenizer here), 503 (queue full, shutting down), 500 (the forward
 * pass failed) and 499 (the client went away while its request waited or
 * ran: nobody reads that answer). Fields this layer does not know are
 * ignored, as vLLM ignores them.
 *
 * Concurrency: gguf_serve_handle() may be called from many threads at once.
 * Requests that run the model take turns (one forward at a time); at most
 * opts.max_queue of them wait, later ones get 503 at once. The library never
 * prints and keeps no global state.
 */
#ifndef GGUF_SERVE_H
#define GGUF_SERVE_H

#include "gguf/export.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/error.h"

GGUF_BEGIN_DECLS

/*
 * What the request layer needs of a model. Callbacks are called with `user`
 * and never concurrently with each other for reset/eval (the queue serialises
 * them); tokenize and token_text may run concurrently with everything and
 * must be thread-safe.
 */
typedef struct gguf_serve_model {
    void *user;
    int64_t n_vocab;       /* rows of the logits; token ids are 0..n_vocab-1 */
    int64_t n_ctx;         /* most tokens one sequence may hold; 0 = no limit */
    int32_t bos, eos;      /* -1 when the vocabulary has none */
    bool add_bos;          /* text prompts get BOS first (when the request allows) */
    bool strip_space;      /* decoding a whole sequence drops the first leading
                              space (SentencePiece's space prefix) */
    /* Start a new sequence (drop the KV cache). */
    int (*reset)(void *user, gguf_error *err);
    /* Append n tokens to the sequence; logits receives n rows of n_vocab floats. */
    int (*eval)(void *user, const int32_t *tokens, int64_t n, float *logits, gguf_error *err);
    /*
     * Text -> ids (malloc'd, freed by the caller). NULL when this vocabulary
     * cannot be tokenized here: text prompts then get 501 with
     * tokenize_error as the message.
     */
    int (*tokenize)(void *user, const char *text, size_t len, bool add_bos, int32_t **ids,
                    int64_t *n, gguf_error *err);
    const char *tokenize_error;
    /* Bytes of token id's text into buf (NUL-terminated, truncated to size);
     * "" for control tokens. @return bytes written or a negative gguf_status. */
    int (*token_text)(void *user, int32_t id, char *buf, size_t size);
    /* The token's string as the vocabulary stores it ("<s>", "<0xE2>",
     * "\u2581upon"), NUL-terminated, truncated to size: vLLM's
     * return_token_strs, and control tokens in vLLM's decoded texts. NULL:
     * token_text stands in, and control tokens are "". Thread-safe.
     * @return bytes written or a negative gguf_status. */
    int (*token_raw)(void *user, int32_t id, char *buf, size_t size);
} gguf_serve_model;

typedef struct gguf_serve_opts {
    unsigned int version; /* GGUF_SERVE_OPTS_VERSION, or 0 for the same (see below) */
    const char *model_name; /* the id /v1/models lists and requests may name
                               (required; copied) */
    const char *api_key;    /* required as "Authorization: Bearer KEY" on every
                               path but /health; NULL or "": none (copied) */
    size_t max_body;        /* bytes of a request body; 0 = 1 MiB */
    int64_t max_tokens;     /* tokens one request may hold in all: the sum over
                               its prompts of prompt + generated; 0 = 4096 */
    int max_logprobs;       /* the most `logprobs`, `prompt_logprobs`, `n_probs`;
                               0 = 20 */
    int max_queue;          /* model requests that may wait behind the running
                               one; 0 = 16, -1 = none */
    int64_t created;        /* "created" of /v1/models (Unix time) */
    unsigned quirks;        /* GGUF_SERVE_QUIRK_* bits: an engine's known bugs, played on
                               purpose (clients' tests); 0: none */
} gguf_serve_opts;
/* The layout version of gguf_serve_opts: the library refuses a larger one with
 * GGUF_E_OPTS_VERSION (docs/conventions.md, "Options structs"). */
#define GGUF_SERVE_OPTS_VERSION 1
/* The defaults, version set: gguf_serve_opts o = GGUF_SERVE_OPTS_INIT; */
#define GGUF_SERVE_OPTS_INIT {.version = GGUF_SERVE_OPTS_VERSION}

/* llama-server before its PEG chat parser degraded gracefully (llama.cpp issue
 * 27543): a /completion whose generated text is not valid UTF-8 answers HTTP
 * 500 {"error": {"code": 500, "message": "Failed to parse input at pos 0:
 * TEXT", "type": "server_error"}} instead of the completion. */
#define GGUF_SERVE_QUIRK_LLAMA_UTF8_500 (1u << 0)

typedef struct gguf_serve gguf_serve;

/*
 * A server over `model` (the struct is copied; what its user and
 * tokenize_error pointers point to must outlive the server).
 * @return 0; GGUF_E_INVALID (NULL argument, no model_name, no eval/reset/
 *         token_text callback, n_vocab < 1, limits out of range); GGUF_E_NOMEM.
 */
int gguf_serve_create(gguf_serve **out, const gguf_serve_model *model,
                      const gguf_serve_opts *opts, gguf_error *err);

/* Accepts NULL. Call only once no gguf_serve_handle() is running. */
void gguf_serve_free(gguf_serve *s);

/*
 * Shutting down: requests waiting in the queue, and those that come later,
 * get 503; a running one stops at its next forward call and gets 503.
 * Thread-safe, async-signal-unsafe.
 */
void gguf_serve_cancel(gguf_serve *s);

/* A request as the transport read it. Strings are NUL-terminated. */
typedef struct gguf_serve_request {
    const char *method;        /* "GET", "POST", ... */
    const char *path;          /* "/v1/completions" (a query string is ignored) */
    const char *authorization; /* the Authorization header, or NULL */
    const char *body;          /* body_len bytes, need not be NUL-terminated */
    size_t body_len;
    bool body_too_large;       /* the transport stopped reading at max_body */
} gguf_serve_request;

/* What the transport knows of the client beyond its request. */
typedef struct gguf_serve_client {
    /* Non-NULL: the transport found the request's framing ambiguous (two
     * Content-Length headers that differ, Content-Length beside
     * Transfer-Encoding), so that nothing after the headers can be trusted:
     * 400 naming this reason, before any other check. */
    const char *bad_framing;
    /* Asked from the calling thread before each forward call of a model
     * request (so between generated tokens too): false when the client has
     * gone away. The request then stops, counts in stats.client_gone and
     * gets 499, which the transport need not send. NULL: never asked. */
    bool (*alive)(void *user);
    void *user;
} gguf_serve_client;

typedef struct gguf_serve_response {
    int status;                /* HTTP status */
    const char *content_type;  /* static string */
    char *body;                /* body_len bytes (malloc'd; also NUL-terminated) */
    size_t body_len;
    const char *allow;         /* 405: the Allow header, else NULL (static) */
    bool www_authenticate;     /* 401: send "WWW-Authenticate: Bearer" */
} gguf_serve_response;

/*
 * Answer one request. Every outcome, a refusal included, is a response; the
 * call fails only when not even an error body could be allocated.
 * @return 0 and *resp (free with gguf_serve_response_clear); GGUF_E_INVALID
 *         (NULL argument); GGUF_E_NOMEM (then *resp is a static 500 whose
 *         body must still be cleared).
 */
int gguf_serve_handle(gguf_serve *s, const gguf_serve_request *req, gguf_serve_response *resp,
                      gguf_error *err);

/* gguf_serve_handle() with what the transport knows of the client (NULL:
 * nothing, as gguf_serve_handle). Same returns. */
int gguf_serve_handle_client(gguf_serve *s, const gguf_serve_request *req,
                             const gguf_serve_client *client, gguf_serve_response *resp,
                             gguf_error *err);

/* Free the body and zero the response. Accepts NULL. */
void gguf_serve_response_clear(gguf_serve_response *resp);

/* Counters since create (thread-safe snapshot). */
typedef struct gguf_serve_stats {
    uint64_t requests;        /* answered, refusals included */
    uint64_t refused;         /* status >= 400, but 404 */
    uint64_t not_found;       /* 404: a path the server does not have (clients probe:
                                 check-engine asks /get_model_info and /props) */
    uint64_t model_requests;  /* that ran the model */
    uint64_t tokens_evaluated;
    uint64_t queue_full;      /* 503 because the queue was full */
    uint64_t client_gone;     /* model requests stopped (499): the client went away */
    int max_waiting;          /* the most requests seen waiting at once */
    double forward_seconds;   /* inside reset/eval */
} gguf_serve_stats;
void gguf_serve_get_stats(gguf_serve *s, gguf_serve_stats *out);

GGUF_END_DECLS
#endif /* GGUF_SERVE_H */
