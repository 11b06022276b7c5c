/* ref-forward: the HTTP transport of check-engine, a thin libcurl client.
 * The dialects, request bodies and reply parsers are libgguf's engine module
 * (gguf/engine.h: pure, fuzzed); only the network lives here, so that libgguf
 * itself needs no network library. */
#ifndef REFWD_HTTP_H
#define REFWD_HTTP_H

#include <stddef.h>

#include "gguf/engine.h"


typedef struct refwd_http refwd_http;

typedef struct refwd_http_opts {
    double timeout;               /* seconds for a whole request; <= 0: 600 */
    double connect_timeout;       /* seconds to connect; <= 0: 10 */
    const char *api_key;          /* "Authorization: Bearer KEY" when set */
    const char *const *headers;   /* extra "Name: value" lines, NULL-terminated */
} refwd_http_opts;

/*
 * A client for base URL url ("http://127.0.0.1:8000", a trailing "/" or
 * "/v1" is dropped). opts may be NULL.
 * @return 0; GGUF_E_INVALID (not an http:// or https:// URL, a header
 *         without ':'); GGUF_E_IO (libcurl cannot start); GGUF_E_NOMEM.
 */
int refwd_http_create(refwd_http **out, const char *url,
                            const refwd_http_opts *opts, gguf_error *err);
void refwd_http_free(refwd_http *h);
/* The base URL in use. */
const char *refwd_http_url(const refwd_http *h);

/*
 * GET (body NULL) or POST (a JSON body) path; *reply receives the body
 * (malloc'd, NUL-terminated, free()) and *status the HTTP status, also when
 * the request failed with a status.
 * @return 0 for 2xx; GGUF_E_IO for an unreachable server, a timeout, a
 *         reply over GGUF_ENGINE_MAX_BODY or HTTP 5xx (message: URL,
 *         status, the server's message); GGUF_E_NOT_FOUND for 404 and 405
 *         (the endpoint does not exist: probes use it); GGUF_E_UNSUPPORTED
 *         for any other status (4xx: the request was refused, with the
 *         server's message); GGUF_E_NOMEM.
 */
int refwd_http_call(refwd_http *h, const char *path, const char *body, char **reply,
                          size_t *reply_len, long *status, gguf_error *err);

/*
 * What a reply's status means (refwd_http_reply.c, pure: fuzzed with
 * check-engine's queries): 0 for 2xx; else GGUF_E_IO for 5xx and statuses
 * outside 100..599, GGUF_E_NOT_FOUND for 404 and 405, GGUF_E_UNSUPPORTED for
 * any other refusal, the message naming METHOD URL, the status and the
 * server's own message (control bytes replaced).
 */
int refwd_http_status(const char *method, const char *url, long status, const char *body,
                      size_t len, gguf_error *err);

#endif
