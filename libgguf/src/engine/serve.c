/* serve: the server object - routing, the API key, the queue in front of the
 * model, counters. See gguf/serve.h for the endpoints and the refusals. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/error_lib.h"
#include "engine/serve_internal.h"

static char *dup_str(const char *s)
{
    const size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d)
        memcpy(d, s, n + 1);
    return d;
}

int gguf_serve_create(gguf_serve **out, const gguf_serve_model *model,
                      const gguf_serve_opts *opts, gguf_error *err)
{
    if (opts && opts->version > GGUF_SERVE_OPTS_VERSION) {
        if (out)
            *out = NULL;
        return gguf_opts_version_fail(opts->version, GGUF_SERVE_OPTS_VERSION, "gguf_serve_opts", err);
    }
    if (!out || !model || !opts)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_serve_create: NULL argument");
    *out = NULL;
    if (!opts->model_name || !opts->model_name[0])
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "serve: no model name");
    if (!model->reset || !model->eval || !model->token_text || model->n_vocab < 1 ||
        model->n_vocab > INT32_MAX || model->n_ctx < 0 || model->bos >= model->n_vocab ||
        model->eos >= model->n_vocab)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "serve: the model needs reset, eval and token_text callbacks, a "
                         "vocabulary and BOS/EOS ids inside it");
    if (opts->max_tokens < 0 || opts->max_tokens > (1 << 24) || opts->max_logprobs < 0 ||
        opts->max_logprobs > 1024 || opts->max_queue < -1 || opts->max_queue > 65536)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "serve: limits out of range (max_tokens 0..16777216, max_logprobs "
                         "0..1024, max_queue -1..65536)");
    gguf_serve *s = calloc(1, sizeof *s);
    if (!s)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "serve: out of memory");
    s->m = *model;
    s->model_name = dup_str(opts->model_name);
    if (opts->api_key && opts->api_key[0]) {
        s->api_key = dup_str(opts->api_key);
        s->api_key_len = strlen(opts->api_key);
    }
    if (!s->model_name || (opts->api_key && opts->api_key[0] && !s->api_key)) {
        gguf_serve_free(s);
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "serve: out of memory");
    }
    s->max_body = opts->max_body ? opts->max_body : (1u << 20);
    s->max_tokens = opts->max_tokens ? opts->max_tokens : 4096;
    s->max_logprobs = opts->max_logprobs ? opts->max_logprobs : 20;
    s->max_queue = opts->max_queue < 0 ? 0 : opts->max_queue ? opts->max_queue : 16;
    s->created = opts->created;
    s->quirks = opts->quirks;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    atomic_init(&s->cancel, false);
    *out = s;
    return 0;
}

void gguf_serve_free(gguf_serve *s)
{
    if (!s)
        return;
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->model_name);
    free(s->api_key);
    free(s);
}

void gguf_serve_cancel(gguf_serve *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    atomic_store(&s->cancel, true);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void gguf_serve_get_stats(gguf_serve *s, gguf_serve_stats *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->stats;
    pthread_mutex_unlock(&s->mu);
}

void gguf_serve_response_clear(gguf_serve_response *resp)
{
    if (!resp)
        return;
    free(resp->body);
    memset(resp, 0, sizeof *resp);
}

/* ---- the queue: a ticket lock ---- */

/* 0 when this request may run the model; -1 with e filled (503) when the
 * queue is full or the server shuts down. */
static int queue_enter(gguf_serve *s, serve_err *e)
{
    pthread_mutex_lock(&s->mu);
    if (atomic_load(&s->cancel)) {
        pthread_mutex_unlock(&s->mu);
        return serve_refuse(e, 503, "", "the server is shutting down");
    }
    /* in the system: the running request (if any) and the waiting ones */
    const uint64_t in = s->next_ticket - s->serving;
    if (in > (uint64_t)s->max_queue) {
        s->stats.queue_full++;
        pthread_mutex_unlock(&s->mu);
        return serve_refuse(e, 503, "", "the queue is full (%llu requests waiting for the "
                            "model, --queue %d): try again later",
                            (unsigned long long)(in - 1), s->max_queue);
    }
    const uint64_t t = s->next_ticket++;
    if ((int)(t - s->serving) > s->stats.max_waiting)
        s->stats.max_waiting = (int)(t - s->serving);
    while (s->serving != t && !atomic_load(&s->cancel))
        pthread_cond_wait(&s->cv, &s->mu);
    if (s->serving != t) {
        /* cancelled while waiting: nobody will run after us */
        pthread_mutex_unlock(&s->mu);
        return serve_refuse(e, 503, "", "the server is shutting down");
    }
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static void queue_leave(gguf_serve *s, bool client_gone)
{
    pthread_mutex_lock(&s->mu);
    s->serving++;
    s->stats.model_requests++;
    s->stats.client_gone += client_gone;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* ---- routes ---- */

typedef enum route {
    R_NONE = 0, R_HEALTH, R_MODELS, R_VERSION, R_COMPLETIONS, R_LLAMA, R_TOKENIZE, R_DETOKENIZE, R_TOKINFO,
} route;

static const struct {
    const char *path;
    route r;
    const char *method; /* the one method it answers */
} routes[] = {
    {"/health", R_HEALTH, "GET"},          {"/v1/health", R_HEALTH, "GET"},
    {"/v1/models", R_MODELS, "GET"},       {"/v1/completions", R_COMPLETIONS, "POST"},
    {"/completion", R_LLAMA, "POST"},      {"/completions", R_LLAMA, "POST"},
    {"/tokenize", R_TOKENIZE, "POST"},     {"/detokenize", R_DETOKENIZE, "POST"},
    {"/tokenizer_info", R_TOKINFO, "GET"}, {"/version", R_VERSION, "GET"},
};

static int find_route(const char *path, size_t len)
{
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (strlen(routes[i].path) == len && memcmp(routes[i].path, path, len) == 0)
            return (int)i;
    return -1;
}

/* "Bearer KEY" (scheme case-insensitive), compared in time independent of
 * where the key differs, as vLLM compares digests. */
static bool authorized(const gguf_serve *s, const char *h)
{
    if (!s->api_key)
        return true;
    if (!h || strncasecmp(h, "bearer ", 7) != 0)
        return false;
    const char *k = h + 7;
    const size_t n = strlen(k);
    unsigned char diff = n != s->api_key_len;
    for (size_t i = 0; i < s->api_key_len; i++)
        diff |= (unsigned char)s->api_key[i] ^ (unsigned char)(i < n ? k[i] : 0);
    return diff == 0;
}

static int run_completion(gguf_serve *s, serve_api api, const gguf_serve_request *req,
                          const gguf_serve_client *cl, gguf_serve_response *resp, serve_err *e)
{
    serve_creq q;
    int rc = serve_parse_completion(s, api, req->body, req->body_len, &q, e);
    if (rc)
        return rc;
    serve_seq *seqs = calloc((size_t)q.n_prompts, sizeof *seqs);
    if (!seqs) {
        serve_creq_free(&q);
        return GGUF_E_NOMEM;
    }
    if ((rc = queue_enter(s, e)) == 0) {
        gguf_error ge = {0};
        bool gone = false;
        for (int64_t i = 0; i < q.n_prompts && !rc; i++) {
            rc = serve_run(s, cl, &q, &q.prompts[i], &seqs[i], &ge);
            gone |= seqs[i].client_gone;
        }
        queue_leave(s, gone);
        if (rc == GGUF_E_INTERRUPTED && gone)
            rc = serve_refuse(e, 499, "", "the client closed the connection: the request was "
                              "cancelled");
        else if (rc == GGUF_E_INTERRUPTED)
            rc = serve_refuse(e, 503, "", "the server is shutting down");
        else if (rc && rc != GGUF_E_NOMEM)
            rc = serve_refuse(e, 500, "", "the forward pass failed: %s", ge.message);
        if (!rc && api == SERVE_API_LLAMA && (s->quirks & GGUF_SERVE_QUIRK_LLAMA_UTF8_500))
            for (int64_t i = 0; i < q.n_prompts && !rc; i++)
                if (!serve_utf8_valid(seqs[i].text ? seqs[i].text : "", seqs[i].text_len))
                    rc = serve_llama_parse_error(&seqs[i], resp);
        if (!rc && !resp->body)
            rc = serve_completion_response(s, &q, seqs, resp);
    }
    for (int64_t i = 0; i < q.n_prompts; i++)
        serve_seq_free(&seqs[i]);
    free(seqs);
    serve_creq_free(&q);
    return rc;
}

static int dispatch(gguf_serve *s, const gguf_serve_request *req, const gguf_serve_client *cl,
                    gguf_serve_response *resp, serve_err *e)
{
    /* First: when the transport cannot tell where this request ends, nothing
     * it holds (headers after the framing, body) is the client's for sure. */
    if (cl->bad_framing)
        return serve_refuse(e, 400, "", "the request's framing is ambiguous: %.300s",
                            cl->bad_framing);
    const char *path = req->path ? req->path : "";
    const char *q = strchr(path, '?');
    const size_t plen = q ? (size_t)(q - path) : strlen(path);
    const int ri = find_route(path, plen);
    const bool open = ri >= 0 && routes[ri].r == R_HEALTH;
    if (!open && !authorized(s, req->authorization)) {
        resp->www_authenticate = true;
        return serve_refuse(e, 401, "", "Unauthorized: send the API key as 'Authorization: "
                            "Bearer KEY'");
    }
    if (ri < 0)
        return serve_refuse(e, 404, "", "no such endpoint: %.*s", (int)(plen > 200 ? 200 : plen),
                            path);
    const char *method = req->method ? req->method : "";
    /* HEAD is GET without a body; the transport drops the body */
    if (strcmp(method, routes[ri].method) != 0 &&
        !(strcmp(method, "HEAD") == 0 && strcmp(routes[ri].method, "GET") == 0)) {
        resp->allow = strcmp(routes[ri].method, "GET") == 0 ? "GET, HEAD" : routes[ri].method;
        return serve_refuse(e, 405, "", "%s takes %s, not %.16s", routes[ri].path,
                            routes[ri].method, method);
    }
    if (req->body_too_large || req->body_len > s->max_body)
        return serve_refuse(e, 413, "", "the request body is over this server's limit of %zu "
                            "bytes (--max-body)", s->max_body);
    serve_tokreq t;
    int rc;
    switch (routes[ri].r) {
    case R_HEALTH: {
        json_t *o = json_pack("{s:s}", "status", "ok");
        return serve_json_response(o, 200, resp);
    }
    case R_MODELS: return serve_models_response(s, resp);
    case R_TOKINFO: return serve_tokenizer_info_response(s, resp);
    case R_VERSION: return serve_version_response(s, resp);
    case R_COMPLETIONS: return run_completion(s, SERVE_API_OPENAI, req, cl, resp, e);
    case R_LLAMA: return run_completion(s, SERVE_API_LLAMA, req, cl, resp, e);
    case R_TOKENIZE:
        if ((rc = serve_parse_tokenize(s, req->body, req->body_len, &t, e)))
            return rc;
        rc = serve_tokenize_response(s, &t, resp);
        free(t.ids);
        return rc;
    case R_DETOKENIZE:
        if ((rc = serve_parse_detokenize(s, req->body, req->body_len, &t, e)))
            return rc;
        rc = serve_detokenize_response(s, &t, resp);
        free(t.ids);
        return rc;
    default: return serve_refuse(e, 404, "", "no such endpoint");
    }
}

/* When even an error body cannot be built. */
static const char nomem_body[] =
    "{\"error\":{\"message\":\"out of memory\",\"type\":\"InternalServerError\","
    "\"param\":null,\"code\":500}}";

int gguf_serve_handle(gguf_serve *s, const gguf_serve_request *req, gguf_serve_response *resp,
                      gguf_error *err)
{
    return gguf_serve_handle_client(s, req, NULL, resp, err);
}

int gguf_serve_handle_client(gguf_serve *s, const gguf_serve_request *req,
                             const gguf_serve_client *client, gguf_serve_response *resp,
                             gguf_error *err)
{
    static const gguf_serve_client nothing_known = {0};
    if (!s || !req || !resp)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_serve_handle: NULL argument");
    memset(resp, 0, sizeof *resp);
    serve_err e = {0};
    int rc = dispatch(s, req, client ? client : &nothing_known, resp, &e);
    if (rc == -1) {
        const bool www = resp->www_authenticate;
        const char *allow = resp->allow;
        gguf_serve_response_clear(resp);
        rc = serve_error_response(&e, resp);
        resp->www_authenticate = www;
        resp->allow = allow;
    }
    if (rc) {
        gguf_serve_response_clear(resp);
        resp->body = malloc(sizeof nomem_body);
        if (resp->body) {
            memcpy(resp->body, nomem_body, sizeof nomem_body);
            resp->body_len = sizeof nomem_body - 1;
        }
        resp->status = 500;
        resp->content_type = "application/json";
    }
    pthread_mutex_lock(&s->mu);
    s->stats.requests++;
    s->stats.refused += resp->status >= 400 && resp->status != 404;
    s->stats.not_found += resp->status == 404;
    pthread_mutex_unlock(&s->mu);
    if (rc)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "serve: out of memory");
    return 0;
}
