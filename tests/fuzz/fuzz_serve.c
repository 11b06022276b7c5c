/*
 * libFuzzer target for the request layer of `ref-forward serve` (gguf/serve.h):
 * a whole request - method, path, Authorization header, body - through
 * gguf_serve_handle() against a small fake model (cheap logits, a byte
 * tokenizer, texts with split UTF-8), with the server's real limits.
 *
 * Input: "METHOD PATH\nAUTHORIZATION\nBODY" (the second line may be empty:
 * no header). A fragment on the path, which HTTP never sends, stands for what
 * the transport knows of the client: "#alive=N" (it goes away after N
 * liveness checks), "#framing" (its Content-Length headers differ).
 * Invariants checked on every answer: a status the API documents; a JSON
 * body (or server-sent events of JSON objects, then [DONE], for a stream); an error body is
 * {"error": {...}} whose code equals the status; a completion's every
 * prompt holds a token (decoding starts from the last prompt token's row).
 * Corpus: tests/fuzz/corpus/serve, named after what each request gets.
 */
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/serve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define V 48

static int64_t pos;

static int f_reset(void *user, gguf_error *err)
{
    pos = 0;
    return 0;
}

static int f_eval(void *user, const int32_t *t, int64_t n, float *logits, gguf_error *err)
{
    for (int64_t i = 0; i < n; i++, pos++)
        for (int j = 0; j < V; j++)
            logits[i * V + j] = (float)((t[i] * 31 + j * 17 + pos * 7) % 23) * 0.25f -
                                (j == 7 ? 100.0f : 0.0f);
    return 0;
}

static int f_text(void *user, int32_t id, char *buf, size_t size)
{
    if (id < 3)
        return snprintf(buf, size, "%s", "");
    if (id == 3)
        return snprintf(buf, size, "%s", "\xE2\x96"); /* half a character */
    if (id == 4)
        return snprintf(buf, size, "%s", "\x81 x");
    return snprintf(buf, size, "%c%c", 'a' + id % 26, id % 5 ? ' ' : '"');
}

/* The vocabulary's strings: control tokens' text (vLLM's texts write them). */
static int f_raw(void *user, int32_t id, char *buf, size_t size)
{
    if (id < 3)
        return snprintf(buf, size, "<ctl%d>", (int)id);
    return snprintf(buf, size, "tok%d", (int)id);
}

static int f_tokenize(void *user, const char *text, size_t len, bool bos, int32_t **ids,
                      int64_t *n, gguf_error *err)
{
    *ids = malloc((len + 2) * sizeof **ids);
    if (!*ids)
        return GGUF_E_NOMEM;
    *n = 0;
    if (bos)
        (*ids)[(*n)++] = 1;
    /* control bytes vanish, as in WordPiece: a text can give no tokens */
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)text[i] >= 0x20)
            (*ids)[(*n)++] = 3 + (unsigned char)text[i] % (V - 3);
    return 0;
}

typedef struct liveness {
    int checks_left;
    bool said_gone;
} liveness;

static bool f_alive(void *user)
{
    liveness *l = user;
    l->said_gone |= l->checks_left-- <= 0;
    return !l->said_gone;
}

static gguf_serve *server(void)
{
    static gguf_serve *s;
    if (s)
        return s;
    gguf_serve_model m = {0};
    m.n_vocab = V;
    m.n_ctx = 96;
    m.bos = 1;
    m.eos = 2;
    m.add_bos = true;
    m.strip_space = true;
    m.reset = f_reset;
    m.eval = f_eval;
    m.token_text = f_text;
    m.token_raw = f_raw;
    m.tokenize = f_tokenize;
    gguf_serve_opts o = {0};
    o.model_name = "fuzz";
    o.api_key = "k";
    o.max_body = 8192;
    o.max_tokens = 128;
    o.created = 1;
    gguf_error err;
    if (gguf_serve_create(&s, &m, &o, &err))
        __builtin_trap();
    return s;
}

/* Every prompt of a completion held a token: OpenAI usage counts at least
 * one per choice, llama-server's tokens_evaluated at least one per answer. */
static void check_prompts(json_t *j)
{
    json_t *choices = json_object_get(j, "choices");
    if (json_is_array(choices) &&
        json_integer_value(json_object_get(json_object_get(j, "usage"), "prompt_tokens")) <
            (json_int_t)json_array_size(choices))
        __builtin_trap();
    const size_t n = json_is_array(j) ? json_array_size(j) : 1;
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_object_get(json_is_array(j) ? json_array_get(j, i) : j,
                                    "tokens_evaluated");
        if (t && json_integer_value(t) < 1)
            __builtin_trap();
    }
}

/* A stream: "data: JSON\n\n" events, each an object, then "data: [DONE]\n\n". */
static void check_stream(const gguf_serve_response *r)
{
    const char *b = r->body, *end = r->body + r->body_len;
    if (r->status != 200)
        __builtin_trap();
    for (;;) {
        if (end - b < 8 || memcmp(b, "data: ", 6) != 0)
            __builtin_trap();
        b += 6;
        const char *stop = strstr(b, "\n\n");
        if (!stop)
            __builtin_trap();
        if (stop - b == 6 && memcmp(b, "[DONE]", 6) == 0) {
            if (stop + 2 != end)
                __builtin_trap();
            return;
        }
        json_error_t je;
        json_t *j = json_loadb(b, (size_t)(stop - b), 0, &je);
        if (!json_is_object(j) || !json_is_array(json_object_get(j, "choices")))
            __builtin_trap();
        json_decref(j);
        b = stop + 2;
    }
}

static void check_body(const gguf_serve_response *r)
{
    if (strcmp(r->content_type, "text/event-stream") == 0) {
        check_stream(r);
        return;
    }
    json_error_t je;
    json_t *j = json_loadb(r->body, r->body_len, JSON_ALLOW_NUL, &je);
    if (!j)
        __builtin_trap();
    json_t *e = json_is_object(j) ? json_object_get(j, "error") : NULL;
    if ((r->status >= 400) != (e != NULL))
        __builtin_trap();
    if (e && json_integer_value(json_object_get(e, "code")) != r->status)
        __builtin_trap();
    if (r->status == 200)
        check_prompts(j);
    json_decref(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *in = malloc(size + 1);
    if (!in)
        return 0;
    memcpy(in, data, size);
    in[size] = 0;
    /* line 1: "METHOD PATH"; line 2: the Authorization header; the rest: body */
    char *nl1 = memchr(in, '\n', size);
    char *nl2 = nl1 ? memchr(nl1 + 1, '\n', size - (size_t)(nl1 + 1 - in)) : NULL;
    if (!nl1 || !nl2) {
        free(in);
        return 0;
    }
    *nl1 = *nl2 = 0;
    char *sp = strchr(in, ' ');
    const char *method = in, *path = "";
    if (sp) {
        *sp = 0;
        path = sp + 1;
    }
    gguf_serve_client cl = {0};
    liveness l = {0, false};
    char *frag = strchr(path, '#');
    if (frag) {
        *frag = 0;
        if (strncmp(frag + 1, "alive=", 6) == 0) {
            l.checks_left = atoi(frag + 7);
            cl.alive = f_alive;
            cl.user = &l;
        } else if (strcmp(frag + 1, "framing") == 0) {
            cl.bad_framing = "Content-Length headers that differ";
        }
    }
    gguf_serve_request q = {0};
    q.method = method;
    q.path = path;
    q.authorization = nl1[1] ? nl1 + 1 : NULL;
    q.body = nl2 + 1;
    q.body_len = size - (size_t)(nl2 + 1 - in);
    gguf_serve_response r;
    gguf_error err;
    if (gguf_serve_handle_client(server(), &q, &cl, &r, &err) != 0)
        __builtin_trap();
    static const int ok[] = {200, 400, 401, 404, 405, 413, 499, 500, 501, 503};
    bool known = false;
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        known |= r.status == ok[i];
    if (!known || r.status == 500 || r.status == 503 || !r.body || !r.content_type ||
        (r.status == 499) != l.said_gone ||
        (cl.bad_framing && r.status != 400))
        __builtin_trap();
    check_body(&r);
    gguf_serve_response_clear(&r);
    free(in);
    return 0;
}
