/* ref-forward: the HTTP transport of check-engine (refwd_http.h), a thin libcurl wrapper. Failures of
 * the environment (no server, timeout, 5xx) are GGUF_E_IO naming the URL and
 * the status; a refused request (4xx) carries the server's own message. */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refwd_http.h"

struct refwd_http {
    CURL *curl;
    char *base;
    struct curl_slist *headers;
    long timeout_ms, connect_ms;
};

typedef struct sink {
    char *p;
    size_t n, cap;
    bool over;
} sink;

static size_t on_data(char *data, size_t size, size_t nmemb, void *user)
{
    sink *s = user;
    const size_t n = size * nmemb;
    if (s->n + n > GGUF_ENGINE_MAX_BODY) {
        s->over = true;
        return 0; /* aborts the transfer */
    }
    if (s->n + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 4096;
        while (cap < s->n + n + 1)
            cap *= 2;
        char *p = realloc(s->p, cap);
        if (!p)
            return 0;
        s->p = p;
        s->cap = cap;
    }
    memcpy(s->p + s->n, data, n);
    s->n += n;
    s->p[s->n] = 0;
    return n;
}

int refwd_http_create(refwd_http **out, const char *url,
                            const refwd_http_opts *opts, gguf_error *err)
{
    *out = NULL;
    if (!url || (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0))
        return gguf_error_setf(err, GGUF_E_INVALID, 0,
                         "--url: '%s' is not an http:// or https:// URL", url ? url : "");
    refwd_http_opts o = {0};
    if (opts)
        o = *opts;
    for (const char *const *h = o.headers; h && *h; h++)
        if (!strchr(*h, ':') || **h == ':')
            return gguf_error_setf(err, GGUF_E_INVALID, 0,
                             "--header: '%s' is not 'Name: value'", *h);
    refwd_http *c = calloc(1, sizeof *c);
    if (!c)
        return gguf_error_setf(err, GGUF_E_NOMEM, 0, "out of memory for a client");
    c->base = strdup(url);
    int rc = 0;
    if (!c->base) {
        rc = gguf_error_setf(err, GGUF_E_NOMEM, 0, "out of memory for a client");
        goto done;
    }
    /* endpoints are appended to the server's root: drop "/" and "/v1" */
    size_t n = strlen(c->base);
    while (n > 0 && c->base[n - 1] == '/')
        c->base[--n] = 0;
    if (n >= 3 && strcmp(c->base + n - 3, "/v1") == 0)
        c->base[n - 3] = 0;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK || !(c->curl = curl_easy_init())) {
        rc = gguf_error_setf(err, GGUF_E_IO, 0, "libcurl cannot start");
        goto done;
    }
    c->timeout_ms = (long)((o.timeout > 0 ? o.timeout : 600) * 1000);
    c->connect_ms = (long)((o.connect_timeout > 0 ? o.connect_timeout : 10) * 1000);
    /* the list is rebuilt from scratch on any failure: one error path */
    bool ok = (c->headers = curl_slist_append(NULL, "Accept: application/json")) != NULL;
    if (ok && o.api_key) {
        const size_t len = strlen(o.api_key) + 32;
        char *h = malloc(len);
        ok = h != NULL;
        if (ok) {
            snprintf(h, len, "Authorization: Bearer %s", o.api_key);
            struct curl_slist *l = curl_slist_append(c->headers, h);
            ok = l != NULL;
            free(h);
        }
    }
    for (const char *const *h = o.headers; ok && h && *h; h++)
        ok = curl_slist_append(c->headers, *h) != NULL;
    if (!ok)
        rc = gguf_error_setf(err, GGUF_E_NOMEM, 0, "out of memory for headers");
done:
    if (rc) {
        refwd_http_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void refwd_http_free(refwd_http *h)
{
    if (!h)
        return;
    if (h->curl) {
        curl_easy_cleanup(h->curl);
        curl_global_cleanup();
    }
    curl_slist_free_all(h->headers);
    free(h->base);
    free(h);
}

const char *refwd_http_url(const refwd_http *h)
{
    return h ? h->base : "";
}

int refwd_http_call(refwd_http *h, const char *path, const char *body, char **reply,
                          size_t *reply_len, long *status, gguf_error *err)
{
    *reply = NULL;
    if (reply_len)
        *reply_len = 0;
    *status = 0;
    const char *method = body ? "POST" : "GET";
    const size_t ulen = strlen(h->base) + strlen(path) + 1;
    char *url = malloc(ulen);
    struct curl_slist *hdrs = NULL;
    sink s = {0};
    int rc = 0;
    if (!url)
        return gguf_error_setf(err, GGUF_E_NOMEM, 0, "out of memory for a URL");
    snprintf(url, ulen, "%s%s", h->base, path);
    /* a JSON body gets its content type on this request only */
    hdrs = curl_slist_append(NULL, "Content-Type: application/json");
    for (struct curl_slist *x = h->headers; hdrs && x; x = x->next) {
        struct curl_slist *t = curl_slist_append(hdrs, x->data);
        if (!t) {
            curl_slist_free_all(hdrs);
            hdrs = NULL;
        } else {
            hdrs = t;
        }
    }
    if (!hdrs) {
        rc = gguf_error_setf(err, GGUF_E_NOMEM, 0, "out of memory for headers");
        goto done;
    }
    char errbuf[CURL_ERROR_SIZE] = "";
    CURL *c = h->curl;
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, body ? hdrs : h->headers);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, h->timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, h->connect_ms);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "ggufkit-check-engine");
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    } else {
        curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
    }
    const CURLcode cc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    if (cc != CURLE_OK) {
        if (s.over)
            rc = gguf_error_setf(err, GGUF_E_IO, 0,
                           "%s %s: the reply is over %u bytes", method, url, GGUF_ENGINE_MAX_BODY);
        else if (cc == CURLE_OPERATION_TIMEDOUT)
            rc = gguf_error_setf(err, GGUF_E_IO, 0, "%s %s: timed out after %.1f s (%s)",
                           method, url, (double)h->timeout_ms / 1000, errbuf);
        else
            rc = gguf_error_setf(err, GGUF_E_IO, 0, "%s %s: %s%s", method, url,
                           cc == CURLE_COULDNT_CONNECT ? "engine unreachable: " : "",
                           errbuf[0] ? errbuf : curl_easy_strerror(cc));
        goto done;
    }
    rc = refwd_http_status(method, url, *status, s.p, s.n, err);
    if (!s.p) { /* an empty body is still a string */
        s.p = calloc(1, 1);
        if (!s.p && !rc)
            rc = gguf_error_setf(err, GGUF_E_NOMEM, 0, "out of memory for a reply");
    }
    *reply = s.p;
    s.p = NULL;
    if (reply_len)
        *reply_len = s.n;
done:
    free(s.p);
    curl_slist_free_all(hdrs);
    free(url);
    return rc;
}
