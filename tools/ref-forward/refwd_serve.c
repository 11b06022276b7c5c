/* ref-forward serve: an OpenAI-compatible HTTP server over the reference
 * forward pass (or a virtual-TP plan of it, faults included). The request
 * layer is libgguf's gguf/serve.h; this file parses options, wires the model
 * callbacks to gguf/forward.h and runs libmicrohttpd (one thread per
 * connection; the library queues the requests that need the model), with
 * what libmicrohttpd 0.9.75 leaves to its user: a deadline for a whole
 * request to arrive, a check that a client is still there while its request
 * runs, and a refusal of ambiguous framing. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "cli.h"
#include "gguf/forward.h"
#include "gguf/model.h"
#include "gguf/serve.h"
#include "gguf/shard.h"
#include "gguf/tokenize.h"
#include "ref_forward.h"

enum {
    OPT_HOST = 256,
    OPT_PORT,
    OPT_API_KEY,
    OPT_SERVED,
    OPT_MAX_BODY,
    OPT_MAX_TOKENS,
    OPT_QUEUE,
    OPT_REQUEST_TIMEOUT,
    OPT_MAX_PER_CLIENT,
    OPT_THREADS,
    OPT_TP,
    OPT_EP,
    OPT_ENGINE,
    OPT_INJECT,
    OPT_PRECISION,
    OPT_QUIRK,
};

static const cli_opt options[] = {
    {OPT_HOST, "host", 1, "H", "address to listen on (default 127.0.0.1; 0.0.0.0 or :: for all)"},
    {OPT_PORT, "port", 1, "P", "TCP port (default 8000; 0: a free port, printed)"},
    {OPT_API_KEY, "api-key", 1, "K", "require 'Authorization: Bearer K' on every path but "
     "/health (as vLLM's --api-key)"},
    {OPT_SERVED, "served-model", 1, "NAME", "model id in /v1/models and requests (default: "
     "MODEL as given)"},
    {OPT_MAX_BODY, "max-body", 1, "BYTES", "largest request body (default 1M; over it: 413)"},
    {OPT_MAX_TOKENS, "max-tokens", 1, "N", "tokens one request may hold, prompts and generated "
     "together (default 4096)"},
    {OPT_QUEUE, "queue", 1, "N", "model requests that may wait behind the running one "
     "(default 16; over it: 503)"},
    {OPT_REQUEST_TIMEOUT, "request-timeout", 1, "S", "seconds for a whole request, headers and "
     "body, to arrive after the connection opens or the previous answer (default 30; 0: no "
     "limit); a late one's connection is closed"},
    {OPT_MAX_PER_CLIENT, "max-per-client", 1, "N", "connections one client address may hold at "
     "once (default 16, or --queue + 1 if larger; 0: no limit); more are closed at once"},
    {OPT_THREADS, "threads", 1, "N", "matmul and dequantization threads of the forward (default 1)"},
    {OPT_PRECISION, "precision", 1, "f32|f64", "forward precision (default f32)"},
    {OPT_QUIRK, "quirk", 1, "llama-utf8-500", "play an engine's known bug: llama-utf8-500 answers "
     "a /completion whose text is not UTF-8 with llama-server's HTTP 500 (docs/serve.md)"},
    {OPT_TP, "tp", 1, "N", "serve N virtual tensor-parallel ranks of the shard plan"},
    {OPT_EP, "ep", 1, "M", "with --tp: expert-parallel size of the plan"},
    {OPT_ENGINE, "engine", 1, "vllm|sglang", "with --tp: whose sharding rules (default vllm)"},
    {OPT_INJECT, "fault", 1, "FAULT[@LAYER]", "with --tp: serve the plan broken by a fault of "
     "the catalog (docs/faults.md): a broken engine to test clients against"},
    {OPT_INJECT, "inject", 1, "FAULT[@LAYER]", NULL},
    {0, NULL, 0, NULL, NULL},
};

static const cli_spec spec = {
    REF_FORWARD_TOOL " serve",
    "MODEL.gguf [OPTIONS]",
    "Serve the reference forward pass of a GGUF model over HTTP as vLLM and llama-server do:\n"
    "/v1/completions (greedy, logprobs, echo), /completion (n_probs), /tokenize, /detokenize,\n"
    "/v1/models, /health. One forward at a time; waiting requests queue. A request whose\n"
    "client goes away is cancelled. Prints 'listening on http://HOST:PORT' once ready;\n"
    "SIGINT or SIGTERM stops it cleanly.",
    options,
    "  ref-forward serve stories260K.gguf --port 8000\n"
    "  ref-forward serve model.gguf --port 0 --api-key secret --served-model ref\n"
    "  ref-forward serve model.gguf --tp 4 --fault qkv-stream       # a broken engine\n"
    "  ref-forward serve model.gguf --request-timeout 10 --max-per-client 4\n"
    "  curl -s localhost:8000/v1/completions -H 'Content-Type: application/json' \\\n"
    "       -d '{\"prompt\": [1, 403, 407], \"max_tokens\": 4, \"logprobs\": 5}'\n",
};

/* ---- the model behind the callbacks ---- */

typedef struct backend {
    const gguf_model *m;
    const gguf_shard_plan *plan; /* NULL: the single-rank reference */
    gguf_fwd_opts fo;
    gguf_fwd_ctx *ctx;
    const gguf_file *meta;
    gguf_tokenizer *tk;
} backend;

static int be_reset(void *user, gguf_error *err)
{
    backend *b = user;
    gguf_fwd_ctx_free(b->ctx);
    b->ctx = NULL;
    return b->plan ? gguf_fwd_tp_create(&b->ctx, b->m, b->plan, &b->fo, err)
                   : gguf_fwd_ctx_create(&b->ctx, b->m, &b->fo, err);
}

static int be_eval(void *user, const int32_t *tokens, int64_t n, float *logits, gguf_error *err)
{
    backend *b = user;
    return gguf_fwd_eval(b->ctx, tokens, n, logits, err);
}

static int be_tokenize(void *user, const char *text, size_t len, bool add_bos, int32_t **ids,
                       int64_t *n, gguf_error *err)
{
    backend *b = user;
    return gguf_tokenize(b->tk, text, len, add_bos, ids, n, err);
}

static int be_token_text(void *user, int32_t id, char *buf, size_t size)
{
    backend *b = user;
    /* the tokenizer's pieces; the bare vocabulary only where it has none */
    return b->tk ? gguf_token_text(b->tk, id, buf, size)
                 : gguf_fwd_token_text(b->meta, id, buf, size);
}

/* The vocabulary's own string of a token (tokenizer.ggml.tokens[id]). */
static int be_token_raw(void *user, int32_t id, char *buf, size_t size)
{
    backend *b = user;
    const gguf_value *toks;
    if (size)
        buf[0] = 0;
    if (gguf_get_arr(b->meta, "tokenizer.ggml.tokens", &toks, NULL) ||
        toks->v.arr.type != GGUF_VALUE_STRING)
        return GGUF_E_NOT_FOUND;
    if (id < 0 || (uint64_t)id >= toks->v.arr.n || size == 0)
        return GGUF_E_INVALID;
    const gguf_str t = toks->v.arr.strs[id];
    const size_t n = t.len < size - 1 ? t.len : size - 1;
    memcpy(buf, t.data, n);
    buf[n] = 0;
    return (int)n;
}

/* ---- HTTP ---- */

/*
 * One TCP connection, from accept to close (libmicrohttpd's socket context).
 * libmicrohttpd's own timeout counts idle time only, so a client that sends
 * a byte a second (slowloris) would hold its slot as long as it liked: each
 * request must arrive whole, headers and body, within --request-timeout of
 * the connection's opening or of the previous answer on it, and the
 * watchdog thread shuts down the socket of one that does not.
 */
typedef struct peer {
    struct peer *prev, *next;
    int fd;
    double since;          /* when the request now arriving began (cli_now) */
    bool arriving;         /* its headers or body are still coming: the deadline runs */
    char addr[INET6_ADDRSTRLEN];
} peer;

typedef struct server {
    gguf_serve *srv;
    size_t max_body;
    double request_timeout; /* seconds; 0: no deadline */
    pthread_mutex_t mu;     /* the list of peers and their since/arriving */
    pthread_cond_t cv;      /* wakes the watchdog to stop (CLOCK_MONOTONIC) */
    bool stopping;
    peer *peers;
} server;

/* One request on a connection. */
typedef struct conn {
    peer *peer;            /* NULL: the connection is not tracked */
    char *body;
    size_t len, cap;
    bool too_large;
    size_t discarded;
    char framing[128];     /* why the framing is ambiguous; "" when it is not */
} conn;

static void peer_address(struct MHD_Connection *c, char *buf, size_t size)
{
    snprintf(buf, size, "?");
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    if (sa && sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, buf, (socklen_t)size);
    else if (sa && sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, buf, (socklen_t)size);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    server *sv = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *fd =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!fd)
            return;
        peer *p = calloc(1, sizeof *p);
        if (!p) {
            /* a connection without a deadline is what slowloris wants */
            shutdown(fd->connect_fd, SHUT_RDWR);
            return;
        }
        p->fd = fd->connect_fd;
        p->since = cli_now();
        p->arriving = true;
        peer_address(c, p->addr, sizeof p->addr);
        pthread_mutex_lock(&sv->mu);
        p->next = sv->peers;
        if (sv->peers)
            sv->peers->prev = p;
        sv->peers = p;
        pthread_mutex_unlock(&sv->mu);
        *socket_context = p;
        return;
    }
    peer *p = *socket_context;
    if (!p)
        return;
    /* Unlinked under the lock: the watchdog may be shutting this socket
     * down, and libmicrohttpd closes the descriptor only after we return. */
    pthread_mutex_lock(&sv->mu);
    if (p->prev)
        p->prev->next = p->next;
    else
        sv->peers = p->next;
    if (p->next)
        p->next->prev = p->prev;
    pthread_mutex_unlock(&sv->mu);
    free(p);
    *socket_context = NULL;
}

/* The request has arrived (or is answered before its body): the deadline
 * stops; it starts again for the next request once this one is answered. */
static void peer_set_arriving(server *sv, peer *p, bool arriving)
{
    if (!p)
        return;
    pthread_mutex_lock(&sv->mu);
    p->arriving = arriving;
    p->since = cli_now();
    pthread_mutex_unlock(&sv->mu);
}

/* With sv->mu held: shut down the sockets whose request is late. shutdown,
 * not close: the descriptor stays libmicrohttpd's, whose thread for the
 * connection reads end of file, drops it and closes it. */
static void drop_late_requests(server *sv)
{
    const double now = cli_now();
    for (peer *p = sv->peers; p; p = p->next) {
        if (!p->arriving || now - p->since < sv->request_timeout)
            continue;
        shutdown(p->fd, SHUT_RDWR);
        p->arriving = false; /* once */
        /* -v only: idle keep-alive connections of well-behaved clients end here too */
        if (cli_verbosity > 1)
            fprintf(stderr, "%s: %s: no whole request within %g s (--request-timeout): "
                    "connection closed\n", spec.tool, p->addr, sv->request_timeout);
    }
}

/* A few times a second: the deadline need not be sharper than that. */
static void *watchdog(void *arg)
{
    server *sv = arg;
    pthread_mutex_lock(&sv->mu);
    while (!sv->stopping) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += 250000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&sv->cv, &sv->mu, &until);
        drop_late_requests(sv);
    }
    pthread_mutex_unlock(&sv->mu);
    return NULL;
}

/*
 * Whether the client still holds its end of the connection. libmicrohttpd
 * does not watch the socket while a handler runs (one thread per
 * connection), so peek at it: end of file or an error means gone - a
 * half-close too, as nginx and uvicorn take it; bytes waiting (a pipelined
 * request) or nothing yet mean alive.
 */
static bool client_alive(void *user)
{
    const peer *p = user;
    char b;
    const ssize_t n = recv(p->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n >= 0)
        return n > 0;
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    conn *st = *con_cls;
    if (st) {
        peer_set_arriving(cls, st->peer, true);
        free(st->body);
        free(st);
        *con_cls = NULL;
    }
}

typedef struct lengths {
    int n;
    unsigned long long first;
    bool differ, transfer_encoding;
    char seen[2][24];      /* the first two values that differ, for the message */
} lengths;

static enum MHD_Result add_length(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *value)
{
    lengths *l = cls;
    if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0)
        l->transfer_encoding = true;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) != 0)
        return MHD_YES;
    char *end;
    errno = 0;
    const unsigned long long v = strtoull(value ? value : "", &end, 10);
    const bool ok = value && value[0] && !errno && !*end;
    if (l->n++ == 0) {
        l->first = v;
        snprintf(l->seen[0], sizeof l->seen[0], "%.20s", value ? value : "");
    } else if (!l->differ && (!ok || v != l->first)) {
        l->differ = true;
        snprintf(l->seen[1], sizeof l->seen[1], "%.20s", value ? value : "");
    }
    return MHD_YES;
}

/*
 * Framing two parties could read two ways (request smuggling): Content-Length
 * headers that differ - libmicrohttpd 0.9.75 reads the first and would take
 * the rest of the body as the next request - or Content-Length beside
 * Transfer-Encoding (RFC 9112 6.1: reject, or close after answering).
 * Identical repeated lengths are one length (RFC 9110 8.6).
 * @return true and the reason in why.
 */
static bool ambiguous_framing(struct MHD_Connection *c, char *why, size_t size)
{
    lengths l = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, add_length, &l);
    if (l.differ)
        snprintf(why, size, "Content-Length headers that differ ('%s' and '%s')", l.seen[0],
                 l.seen[1]);
    else if (l.n && l.transfer_encoding)
        snprintf(why, size, "Content-Length beside Transfer-Encoding");
    return l.differ || (l.n && l.transfer_encoding);
}

static enum MHD_Result reply(struct MHD_Connection *c, gguf_serve_response *r, bool close)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(r->body_len, r->body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        gguf_serve_response_clear(r);
        return MHD_NO;
    }
    r->body = NULL; /* MHD frees it */
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, r->content_type);
    if (r->allow)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->allow);
    if (r->www_authenticate)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (close)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    const enum MHD_Result ok = MHD_queue_response(c, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    gguf_serve_response_clear(r);
    return ok;
}

static enum MHD_Result answer(server *sv, struct MHD_Connection *c, const char *url,
                              const char *method, conn *st)
{
    peer_set_arriving(sv, st->peer, false);
    gguf_serve_request rq = {0};
    rq.method = method;
    rq.path = url;
    rq.authorization = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                   MHD_HTTP_HEADER_AUTHORIZATION);
    rq.body = st->body ? st->body : "";
    rq.body_len = st->len;
    rq.body_too_large = st->too_large;
    gguf_serve_client cl = {0};
    cl.bad_framing = st->framing[0] ? st->framing : NULL;
    if (st->peer) {
        cl.alive = client_alive;
        cl.user = st->peer;
    }
    gguf_serve_response r;
    const double t0 = cli_now();
    gguf_error err = {0};
    if (gguf_serve_handle_client(sv->srv, &rq, &cl, &r, &err) && !r.body)
        return MHD_NO;
    if (cli_verbosity > 1)
        fprintf(stderr, "%s: %s %s %d %zu bytes %.1f ms\n", spec.tool, method, url, r.status,
                r.body_len, 1e3 * (cli_now() - t0));
    if (r.status == 499) {
        /* nobody to answer: drop the connection */
        if (cli_verbosity > 0)
            fprintf(stderr, "%s: %s: %s %s: the client went away: request cancelled after "
                    "%.1f s\n", spec.tool, st->peer ? st->peer->addr : "?", method, url,
                    cli_now() - t0);
        gguf_serve_response_clear(&r);
        return MHD_NO;
    }
    return reply(c, &r, cl.bad_framing != NULL);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    server *sv = cls;
    conn *st = *con_cls;
    if (!st) {
        st = calloc(1, sizeof *st);
        if (!st)
            return MHD_NO;
        *con_cls = st;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        st->peer = ci ? ci->socket_context : NULL;
        /* Answered now, the body unread: libmicrohttpd then closes the
         * connection after the answer, so no leftover is read as a request. */
        if (ambiguous_framing(c, st->framing, sizeof st->framing))
            return answer(sv, c, url, method, st);
        /* A declared length far over the limit: answer now, read nothing. */
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl) {
            char *end;
            errno = 0;
            const unsigned long long n = strtoull(cl, &end, 10);
            if (errno || *end || n > 16ull * sv->max_body) {
                st->too_large = true;
                return answer(sv, c, url, method, st);
            }
        }
        return MHD_YES;
    }
    if (*upload_data_size) {
        const size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (st->too_large || st->len + n > sv->max_body) {
            /* read and drop the rest, so that the client reads our 413;
             * a client that keeps sending far past the limit is cut off */
            st->too_large = true;
            free(st->body);
            st->body = NULL;
            st->len = st->cap = 0;
            st->discarded += n;
            return st->discarded > 16 * sv->max_body ? MHD_NO : MHD_YES;
        }
        if (st->len + n > st->cap) {
            size_t cap = st->cap ? st->cap : 4096;
            while (cap < st->len + n)
                cap *= 2;
            char *p = realloc(st->body, cap);
            if (!p)
                return MHD_NO;
            st->body = p;
            st->cap = cap;
        }
        memcpy(st->body + st->len, upload_data, n);
        st->len += n;
        return MHD_YES;
    }
    return answer(sv, c, url, method, st);
}

/* ---- options ---- */

typedef struct serve_args {
    const char *model, *host, *api_key, *served, *inject;
    unsigned port;
    uint64_t max_body;
    int64_t max_tokens;
    int queue, threads, tp, ep, precision;
    unsigned quirks;
    unsigned request_timeout; /* seconds; 0: none */
    int max_per_client;       /* -1: the default, from --queue; 0: none */
    gguf_engine engine;
} serve_args;

static int parse_args(int argc, char **argv, serve_args *a)
{
    int c, optind_ = 1;
    const char *arg;
    a->host = "127.0.0.1";
    a->port = 8000;
    a->max_body = 1u << 20;
    a->max_tokens = 4096;
    a->queue = 16;
    a->threads = 1;
    a->request_timeout = 30;
    a->max_per_client = -1;
    for (;;) {
        c = cli_next(&spec, argc, argv, &arg, &optind_);
        if (c == -1) {
            if (optind_ >= argc)
                break;
            /* GNU getopt moves positionals to the end and, once options end,
             * points back at the first of them however optind was moved: seen
             * again, the model means there is nothing left to parse. Under
             * POSIXLY_CORRECT options may still follow the model. */
            const bool again = argv[optind_] == a->model;
            if (a->model && (!again || optind_ + 1 < argc)) {
                cli_errorf(spec.tool, "unexpected argument '%s' (see --help)",
                           argv[again ? optind_ + 1 : optind_]);
                return -1;
            }
            if (again)
                break;
            a->model = argv[optind_];
            optind = optind_ + 1;
            continue;
        }
        uint64_t v;
        switch (c) {
        case OPT_HOST: a->host = arg; break;
        case OPT_API_KEY: a->api_key = arg; break;
        case OPT_SERVED:
            if (!arg[0]) {
                cli_errorf(spec.tool, "--served-model: the name is empty");
                return -1;
            }
            a->served = arg;
            break;
        case OPT_INJECT: a->inject = arg; break;
        case OPT_PORT:
            if (cli_parse_u64(arg, &v) || v > 65535) {
                cli_errorf(spec.tool, "--port: '%s' is not a port from 0 to 65535", arg);
                return -1;
            }
            a->port = (unsigned)v;
            break;
        case OPT_MAX_BODY:
            if (cli_parse_size(arg, &v) || v < 64 || v > (1ull << 30)) {
                cli_errorf(spec.tool, "--max-body: '%s' is not a size from 64 bytes to 1G", arg);
                return -1;
            }
            a->max_body = v;
            break;
        case OPT_MAX_TOKENS:
            if (cli_parse_u64(arg, &v) || v < 1 || v > (1u << 24)) {
                cli_errorf(spec.tool, "--max-tokens: '%s' is not a count from 1 to 16777216", arg);
                return -1;
            }
            a->max_tokens = (int64_t)v;
            break;
        case OPT_QUEUE:
            if (cli_parse_u64(arg, &v) || v > 4096) {
                cli_errorf(spec.tool, "--queue: '%s' is not a count from 0 to 4096", arg);
                return -1;
            }
            a->queue = (int)v;
            break;
        case OPT_REQUEST_TIMEOUT:
            if (cli_parse_u64(arg, &v) || v > 86400) {
                cli_errorf(spec.tool, "--request-timeout: '%s' is not a number of seconds from 0 "
                           "to 86400", arg);
                return -1;
            }
            a->request_timeout = (unsigned)v;
            break;
        case OPT_MAX_PER_CLIENT:
            if (cli_parse_u64(arg, &v) || v > 65536) {
                cli_errorf(spec.tool, "--max-per-client: '%s' is not a count from 0 to 65536", arg);
                return -1;
            }
            a->max_per_client = (int)v;
            break;
        case OPT_THREADS:
            if (cli_parse_u64(arg, &v) || v < 1 || v > 64) {
                cli_errorf(spec.tool, "--threads: '%s' is not a number from 1 to 64", arg);
                return -1;
            }
            a->threads = (int)v;
            break;
        case OPT_QUIRK:
            if (strcmp(arg, "llama-utf8-500") == 0) {
                a->quirks |= GGUF_SERVE_QUIRK_LLAMA_UTF8_500;
            } else {
                cli_errorf(spec.tool, "--quirk: '%s' is not llama-utf8-500", arg);
                return -1;
            }
            break;
        case OPT_PRECISION:
            if (strcmp(arg, "f32") == 0) {
                a->precision = GGUF_FWD_F32;
            } else if (strcmp(arg, "f64") == 0) {
                a->precision = GGUF_FWD_F64;
            } else {
                cli_errorf(spec.tool, "--precision: '%s' is not f32 or f64", arg);
                return -1;
            }
            break;
        case OPT_TP:
        case OPT_EP:
            if (cli_parse_u64(arg, &v) || v < 1 || v > 4096) {
                cli_errorf(spec.tool, "--%s: '%s' is not a number from 1 to 4096",
                           c == OPT_TP ? "tp" : "ep", arg);
                return -1;
            }
            *(c == OPT_TP ? &a->tp : &a->ep) = (int)v;
            break;
        case OPT_ENGINE:
            if (gguf_engine_from_name(arg, &a->engine)) {
                cli_errorf(spec.tool, "--engine: '%s' is not vllm or sglang", arg);
                return -1;
            }
            break;
        }
    }
    if (!a->model) {
        cli_errorf(spec.tool, "expected a MODEL.gguf argument (see --help)");
        return -1;
    }
    if ((a->ep || a->inject) && !a->tp) {
        cli_errorf(spec.tool, "--%s needs --tp", a->ep ? "ep" : "fault");
        return -1;
    }
    /* one client may fill the queue it was given: the running request and
     * --queue waiting ones */
    if (a->max_per_client < 0)
        a->max_per_client = a->queue + 1 > 16 ? a->queue + 1 : 16;
    return 0;
}

/* The plan of --tp, broken by --inject when asked. */
static int build_plan(const serve_args *a, const gguf_model *m, gguf_shard_plan **out,
                      gguf_error *err)
{
    gguf_shard_opts so = {0};
    so.tp = a->tp;
    so.ep = a->ep;
    so.engine = a->engine;
    int rc = gguf_shard_plan_create(out, m, &so, err);
    if (rc || !a->inject)
        return rc;
    char name[96];
    snprintf(name, sizeof name, "%s", a->inject);
    int64_t layer = -1;
    char *at = strchr(name, '@');
    if (at) {
        *at = 0;
        char *end;
        layer = strtoll(at + 1, &end, 10);
        if (end == at + 1 || *end || layer < 0)
            return gguf_error_setf(err, GGUF_E_INVALID, 0, "--fault: '%s' is not FAULT or "
                                   "FAULT@LAYER", a->inject);
    }
    gguf_fault f;
    if (gguf_fault_from_name(name, &f) || f == GGUF_FAULT_NONE)
        return gguf_error_setf(err, GGUF_E_INVALID, 0, "--fault: unknown fault '%s' "
                               "(docs/faults.md lists them)", name);
    return gguf_shard_apply_fault(*out, f, layer, err);
}

/* --host as a socket address (IPv4 or IPv6 literal, or localhost). */
static int host_addr(const char *host, unsigned port, struct sockaddr_storage *ss, bool *v6)
{
    memset(ss, 0, sizeof *ss);
    if (strcmp(host, "localhost") == 0)
        host = "127.0.0.1";
    struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        *v6 = false;
        return 0;
    }
    if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        *v6 = true;
        return 0;
    }
    return -1;
}

/* libmicrohttpd's own messages: with -v only (a failure to listen is said
 * once, by the tool, with the address). */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    if (cli_verbosity < 2)
        return;
    fprintf(stderr, "%s: libmicrohttpd: ", spec.tool);
    vfprintf(stderr, fmt, ap);
}

int refwd_serve_main(int argc, char **argv)
{
    serve_args a = {0};
    if (parse_args(argc, argv, &a))
        return CLI_EXIT_USAGE;
    int ret = CLI_EXIT_USAGE, rc;
    gguf_error err = {0};
    gguf_set *set = NULL;
    gguf_model *m = NULL;
    gguf_shard_plan *plan = NULL;
    gguf_serve *srv = NULL;
    struct MHD_Daemon *d = NULL;
    backend be = {0};
    char tok_err[sizeof err.message] = "";
    server sv = {0};
    pthread_t watcher;
    bool watching = false;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&sv.mu, NULL);
    pthread_cond_init(&sv.cv, &ca);
    pthread_condattr_destroy(&ca);

    struct sockaddr_storage addr;
    bool v6 = false;
    if (host_addr(a.host, a.port, &addr, &v6)) {
        cli_errorf(spec.tool, "--host: '%s' is not an IPv4 or IPv6 address", a.host);
        goto done;
    }
    if ((rc = gguf_set_open(&set, a.model, NULL, &err)) ||
        (rc = gguf_model_open(&m, set, &err)) ||
        (a.tp && (rc = build_plan(&a, m, &plan, &err)))) {
        cli_error(spec.tool, &err);
        ret = cli_exit_code(rc);
        goto done;
    }
    /* A plan the engine could not load as it is (heads not divisible, ...)
     * is served anyway, as the engine would run it: say so. */
    for (int64_t i = 0; plan && i < gguf_shard_plan_check_count(plan); i++) {
        const gguf_shard_check *ck = gguf_shard_plan_check_at(plan, i);
        if (ck->level == GGUF_CHECK_ERROR && strcmp(ck->code, "fault") != 0)
            fprintf(stderr, "%s: warning: the plan: %s: %s\n", spec.tool, ck->code, ck->message);
    }
    const gguf_hparams *hp = gguf_model_hparams(m);
    be.m = m;
    be.plan = plan;
    be.meta = gguf_set_meta(set);
    be.fo.n_threads = a.threads;
    be.fo.precision = a.precision;

    gguf_serve_model sm = {0};
    sm.user = &be;
    sm.n_vocab = hp->n_vocab;
    sm.n_ctx = hp->n_ctx_train;
    sm.bos = gguf_fwd_token_bos(be.meta);
    sm.eos = gguf_fwd_token_eos(be.meta);
    if (sm.bos >= sm.n_vocab)
        sm.bos = -1;
    if (sm.eos >= sm.n_vocab)
        sm.eos = -1;
    sm.reset = be_reset;
    sm.eval = be_eval;
    sm.token_text = be_token_text;
    sm.token_raw = be_token_raw;
    gguf_error terr = {0};
    if (gguf_tokenizer_create(&be.tk, set, &terr) == 0) {
        sm.tokenize = be_tokenize;
        sm.add_bos = gguf_tokenizer_add_bos(be.tk);
    } else {
        snprintf(tok_err, sizeof tok_err, "%s", terr.message);
        sm.tokenize_error = tok_err;
    }
    gguf_str model_kind;
    bool space = true;
    if (gguf_get_str(be.meta, "tokenizer.ggml.model", &model_kind, NULL) == 0 &&
        gguf_str_eq(model_kind, "llama")) {
        gguf_get_bool(be.meta, "tokenizer.ggml.add_space_prefix", &space, NULL);
        sm.strip_space = space;
    }

    gguf_serve_opts so = {0};
    so.model_name = a.served ? a.served : a.model;
    so.api_key = a.api_key;
    so.max_body = (size_t)a.max_body;
    so.max_tokens = a.max_tokens;
    so.max_queue = a.queue ? a.queue : -1;
    so.created = (int64_t)time(NULL);
    so.quirks = a.quirks;
    if ((rc = gguf_serve_create(&srv, &sm, &so, &err))) {
        cli_error(spec.tool, &err);
        ret = cli_exit_code(rc);
        goto done;
    }

    /* SIGINT/SIGTERM are taken by sigwait() below: block them before any
     * thread starts, so that every thread inherits the mask. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    sv.srv = srv;
    sv.max_body = (size_t)a.max_body;
    sv.request_timeout = a.request_timeout;
    if (a.request_timeout) {
        if (pthread_create(&watcher, NULL, watchdog, &sv)) {
            cli_errorf(spec.tool, "cannot start the request-deadline thread");
            ret = CLI_EXIT_ENV;
            goto done;
        }
        watching = true;
    }
    const unsigned limit = (unsigned)(2 * a.queue + 64);
    d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                             MHD_USE_AUTO | MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0),
                         (uint16_t)a.port, NULL, NULL, on_request, &sv,
                         MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                         MHD_OPTION_NOTIFY_COMPLETED, on_completed, &sv,
                         MHD_OPTION_NOTIFY_CONNECTION, on_connection, &sv,
                         MHD_OPTION_CONNECTION_LIMIT, limit,
                         MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)a.max_per_client,
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)60,
                         MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                         MHD_OPTION_END);
    if (!d) {
        cli_errorf(spec.tool, "cannot listen on %s port %u: %s", a.host, a.port,
                   errno ? strerror(errno) : "libmicrohttpd failed to start");
        ret = CLI_EXIT_ENV;
        goto done;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    const unsigned port = info ? info->port : a.port;
    /* The ready line comes last: whoever waits for it finds the rest written. */
    if (cli_verbosity > 0) {
        fprintf(stderr, "%s: serving %s as '%s' (%s, vocab %lld, %s%s%s), tokenizer: %s\n",
                spec.tool, a.model, so.model_name, hp->arch_name, (long long)hp->n_vocab,
                plan ? "virtual tp" : "reference", plan && a.inject ? ", fault " : "",
                plan && a.inject ? a.inject : "", sm.tokenize ? "yes" : tok_err);
    }
    printf("listening on http://%s%s%s:%u\n", v6 ? "[" : "", a.host, v6 ? "]" : "", port);
    fflush(stdout);

    int sig = 0;
    sigwait(&sigs, &sig);
    if (cli_verbosity > 0)
        fprintf(stderr, "%s: %s: shutting down\n", spec.tool, sig == SIGINT ? "SIGINT" : "SIGTERM");
    gguf_serve_cancel(srv);
    MHD_stop_daemon(d);
    d = NULL;
    gguf_serve_stats st;
    gguf_serve_get_stats(srv, &st);
    if (cli_verbosity > 0)
        fprintf(stderr, "%s: %llu request(s) (%llu refused, %llu for paths it does not have, %llu "
                        "ran the model), %llu tokens evaluated in %.3f s\n",
                spec.tool, (unsigned long long)st.requests, (unsigned long long)st.refused,
                (unsigned long long)st.not_found, (unsigned long long)st.model_requests,
                (unsigned long long)st.tokens_evaluated, st.forward_seconds);
    ret = CLI_EXIT_OK;
done:
    if (d)
        MHD_stop_daemon(d);
    if (watching) {
        pthread_mutex_lock(&sv.mu);
        sv.stopping = true;
        pthread_cond_broadcast(&sv.cv);
        pthread_mutex_unlock(&sv.mu);
        pthread_join(watcher, NULL);
    }
    pthread_cond_destroy(&sv.cv);
    pthread_mutex_destroy(&sv.mu);
    gguf_serve_free(srv);
    gguf_fwd_ctx_free(be.ctx);
    gguf_tokenizer_free(be.tk);
    gguf_shard_plan_free(plan);
    gguf_model_free(m);
    gguf_set_free(set);
    return ret;
}
