/*
 * Engine module, parsers and requests: every case file of tests/data/engine
 * (curl's test-file habit: the options of a request and the body we must
 * send, an engine's recorded reply written from its documented format, and
 * the expected parse or error), then the corner cases one by one: request
 * errors, limits, error bodies, ids for text-only tokens.
 */
#include <check.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/engine.h"

/* ---- case files ---- */

typedef struct section {
    char name[32];
    char *text;
} section;

typedef struct tcase {
    char endpoint[32];
    section sec[8];
    int n;
} tcase;

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    size_t got = fread(b, 1, (size_t)n, f);
    b[got] = 0;
    fclose(f);
    return b;
}

/* Split a case file: "endpoint NAME" in the header, then "--- NAME" sections. */
static void parse_case(tcase *c, char *text)
{
    memset(c, 0, sizeof *c);
    char *p = text;
    section *cur = NULL;
    while (*p) {
        char *eol = strchr(p, '\n');
        char *next = eol ? eol + 1 : p + strlen(p);
        if (strncmp(p, "--- ", 4) == 0) {
            if (eol)
                *eol = 0;
            cur = &c->sec[c->n++];
            snprintf(cur->name, sizeof cur->name, "%s", p + 4);
            cur->text = next;
            if (cur > c->sec)
                p[-1] = 0; /* ends the previous section's text */
        } else if (!cur && strncmp(p, "endpoint ", 9) == 0) {
            if (eol)
                *eol = 0;
            snprintf(c->endpoint, sizeof c->endpoint, "%s", p + 9);
        }
        p = next;
    }
}

static const char *sec(const tcase *c, const char *name)
{
    for (int i = 0; i < c->n; i++)
        if (strcmp(c->sec[i].name, name) == 0)
            return c->sec[i].text;
    return NULL;
}

static void num(char *buf, size_t size, double v)
{
    if (isnan(v))
        snprintf(buf, size, "null");
    else if (isinf(v))
        snprintf(buf, size, v < 0 ? "-inf" : "inf");
    else
        snprintf(buf, size, "%.9g", v);
}

static void tok(char *buf, size_t size, int32_t id, const char *text)
{
    if (id >= 0) {
        snprintf(buf, size, "%d", id);
    } else {
        json_t *s = json_string(text ? text : "");
        char *d = json_dumps(s, JSON_ENCODE_ANY);
        snprintf(buf, size, "%s", d);
        free(d);
        json_decref(s);
    }
}

static void str_or_none(char **o, size_t *n, const char *label, const char *s)
{
    char *d = NULL;
    if (s) {
        json_t *j = json_string(s);
        d = json_dumps(j, JSON_ENCODE_ANY);
        json_decref(j);
    }
    int w = snprintf(*o, *n, "%s %s\n", label, d ? d : "none");
    *o += w;
    *n -= (size_t)w;
    free(d);
}

static void ids_or_none(char **o, size_t *n, const char *label, const int32_t *ids, int64_t k)
{
    int w = snprintf(*o, *n, "%s ", label);
    *o += w;
    *n -= (size_t)w;
    if (!ids) {
        w = snprintf(*o, *n, "none");
        *o += w;
        *n -= (size_t)w;
    }
    for (int64_t i = 0; ids && i < k; i++) {
        w = snprintf(*o, *n, "%s%d", i ? "," : "", ids[i]);
        *o += w;
        *n -= (size_t)w;
    }
    w = snprintf(*o, *n, "\n");
    *o += w;
    *n -= (size_t)w;
}

/* The canonical dump the expect sections are written in. */
static void dump_reply(const gguf_engine_reply *r, char *out, size_t size)
{
    char *o = out;
    size_t n = size;
    int w = snprintf(o, n, "n_pos %lld n_prompt %lld\nfound", (long long)r->n_pos,
                     (long long)r->n_prompt);
    o += w;
    n -= (size_t)w;
    const char *names[] = {"legacy", "content", "prompt_logprobs", "sglang", "llama", "token_ids"};
    for (int b = 0; b < 6; b++)
        if (r->found & (1u << b)) {
            w = snprintf(o, n, " %s", names[b]);
            o += w;
            n -= (size_t)w;
        }
    w = snprintf(o, n, "\n");
    o += w;
    n -= (size_t)w;
    ids_or_none(&o, &n, "prompt_ids", r->prompt_ids, r->n_prompt_ids);
    ids_or_none(&o, &n, "gen_ids", r->gen_ids, r->n_gen_ids);
    w = snprintf(o, n, "finish %s\n", r->finish_reason ? r->finish_reason : "none");
    o += w;
    n -= (size_t)w;
    str_or_none(&o, &n, "text", r->text);
    str_or_none(&o, &n, "reasoning", r->reasoning);
    for (int64_t i = 0; i < r->n_pos; i++) {
        const gguf_engine_pos *p = &r->pos[i];
        char t[128], l[32];
        tok(t, sizeof t, p->id, p->text);
        num(l, sizeof l, p->logprob);
        w = snprintf(o, n, "pos %lld %s %s %s%s", (long long)i,
                     p->prompt ? "prompt" : p->unscored ? "unscored" : "gen", t,
                     l, p->n_top ? " top" : "");
        o += w;
        n -= (size_t)w;
        for (int32_t k = 0; k < p->n_top; k++) {
            tok(t, sizeof t, p->top[k].id, p->top[k].text);
            num(l, sizeof l, p->top[k].logprob);
            w = snprintf(o, n, " %s:%s", t, l);
            o += w;
            n -= (size_t)w;
        }
        w = snprintf(o, n, "\n");
        o += w;
        n -= (size_t)w;
    }
}

/* expect text, whitespace at line ends ignored */
static void same_lines(const char *file, const char *got, const char *want)
{
    char *g = strdup(got), *w = strdup(want);
    char *sg = NULL, *sw = NULL;
    char *lg = strtok_r(g, "\n", &sg), *lw = strtok_r(w, "\n", &sw);
    int line = 1;
    while (lg || lw) {
        if (lg) {
            size_t k = strlen(lg);
            while (k && lg[k - 1] == ' ')
                lg[--k] = 0;
        }
        if (lw) {
            size_t k = strlen(lw);
            while (k && lw[k - 1] == ' ')
                lw[--k] = 0;
        }
        ck_assert_msg(lg && lw && strcmp(lg, lw) == 0, "%s: expect line %d:\n  got:  %s\n  want: %s",
                      file, line, lg ? lg : "(end)", lw ? lw : "(end)");
        lg = strtok_r(NULL, "\n", &sg);
        lw = strtok_r(NULL, "\n", &sw);
        line++;
    }
    free(g);
    free(w);
}

static void check_error(const char *file, int rc, const gguf_error *err, const char *want)
{
    char code[64];
    const char *sp = strchr(want, ' ');
    snprintf(code, sizeof code, "%.*s", (int)(sp ? sp - want : (long)strlen(want)), want);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", sp ? sp + 1 : "");
    size_t k = strlen(msg);
    while (k && (msg[k - 1] == '\n' || msg[k - 1] == ' '))
        msg[--k] = 0;
    ck_assert_msg(rc != 0, "%s: parsed, expected %s", file, code);
    ck_assert_msg(strcmp(gguf_status_name(rc), code) == 0, "%s: %s (%s), expected %s", file,
                  gguf_status_name(rc), err->message, code);
    ck_assert_msg(strstr(err->message, msg) != NULL, "%s: message '%s' lacks '%s'", file,
                  err->message, msg);
}

/* Options of a request from the case's JSON. */
static void request_from(gguf_engine_request *rq, json_t *o, gguf_engine_endpoint ep,
                          int32_t *ids, char *msgs, size_t msgs_size)
{
    memset(rq, 0, sizeof *rq);
    rq->endpoint = ep;
    json_t *v;
    if ((v = json_object_get(o, "api")))
        if (gguf_engine_api_from_name(json_string_value(v), &rq->api) != 0)
            rq->api = (gguf_engine_api)-1; /* an unknown name: the build refuses it */
    if ((v = json_object_get(o, "model")))
        rq->model = json_string_value(v);
    if ((v = json_object_get(o, "text")))
        rq->text = json_string_value(v);
    if ((v = json_object_get(o, "chat")))
        rq->chat = json_string_value(v);
    if ((v = json_object_get(o, "messages"))) {
        snprintf(msgs, msgs_size, "%s", json_string_value(v));
        rq->messages = msgs;
    }
    if ((v = json_object_get(o, "tokens"))) {
        for (size_t i = 0; i < json_array_size(v); i++)
            ids[i] = (int32_t)json_integer_value(json_array_get(v, i));
        rq->tokens = ids;
        rq->n_tokens = (int64_t)json_array_size(v);
    }
    rq->max_tokens = json_integer_value(json_object_get(o, "max_tokens"));
    rq->top_k = (int)json_integer_value(json_object_get(o, "top_k"));
    rq->echo = json_is_true(json_object_get(o, "echo"));
    rq->add_special = json_is_true(json_object_get(o, "add_special"));
}

static void run_case(const char *dir, const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *text = slurp(path);
    ck_assert_msg(text != NULL, "cannot read %s", path);
    tcase c;
    parse_case(&c, text);
    gguf_engine_endpoint ep;
    ck_assert_msg(gguf_engine_endpoint_from_name(c.endpoint, &ep) == 0, "%s: endpoint '%s'", name,
                  c.endpoint);
    gguf_error err;
    /* the request we send, against the case's body */
    const char *opts = sec(&c, "options"), *want_rq = sec(&c, "request");
    if (opts && want_rq) {
        json_error_t je;
        json_t *o = json_loads(opts, 0, &je), *want = json_loads(want_rq, 0, &je);
        ck_assert_msg(o && want, "%s: options/request not JSON: %s", name, je.text);
        int32_t ids[64];
        char msgs[1024];
        gguf_engine_request rq;
        request_from(&rq, o, ep, ids, msgs, sizeof msgs);
        char *body = NULL;
        int rc = gguf_engine_request_build(&body, &rq, &err);
        ck_assert_msg(rc == 0, "%s: request: %s", name, err.message);
        json_t *got = json_loads(body, 0, &je);
        ck_assert_msg(got && json_equal(got, want), "%s: request body\n  got:  %s\n  want: %s",
                      name, body, want_rq);
        free(body);
        json_decref(got);
        json_decref(want);
        json_decref(o);
    }
    const char *expect = sec(&c, "expect"), *error = sec(&c, "error");
    ck_assert_msg(expect || error, "%s: no expect or error section", name);
    char out[16384];
    if (ep == GGUF_EP_MODELS) {
        gguf_engine_probe p = {0};
        if ((p.models = sec(&c, "models")))
            p.models_len = strlen(p.models);
        if ((p.model_info = sec(&c, "model_info")))
            p.model_info_len = strlen(p.model_info);
        if ((p.props = sec(&c, "props")))
            p.props_len = strlen(p.props);
        gguf_engine_api api = GGUF_API_AUTO;
        char model[256];
        int rc = gguf_engine_detect(&api, model, sizeof model, &p, &err);
        if (error) {
            check_error(name, rc, &err, error);
        } else {
            ck_assert_msg(rc == 0, "%s: %s", name, err.message);
            snprintf(out, sizeof out, "api %s model %s\n", gguf_engine_api_name(api), model);
            same_lines(name, out, expect);
        }
    } else if (ep == GGUF_EP_TOKENIZE) {
        const char *reply = sec(&c, "reply");
        int32_t *ids = NULL;
        int64_t n = 0;
        int rc = gguf_engine_tokens_parse(&ids, &n, reply, strlen(reply), &err);
        if (error) {
            check_error(name, rc, &err, error);
            ck_assert(ids == NULL);
        } else {
            ck_assert_msg(rc == 0, "%s: %s", name, err.message);
            char *o = out;
            size_t left = sizeof out;
            ids_or_none(&o, &left, "ids", ids, n);
            same_lines(name, out, expect);
        }
        free(ids);
    } else {
        const char *reply = sec(&c, "reply");
        ck_assert_msg(reply != NULL, "%s: no reply section", name);
        gguf_engine_reply *r = NULL;
        int rc = gguf_engine_reply_parse(&r, ep, reply, strlen(reply), &err);
        if (error) {
            check_error(name, rc, &err, error);
            ck_assert(r == NULL);
        } else {
            ck_assert_msg(rc == 0, "%s: %s", name, err.message);
            dump_reply(r, out, sizeof out);
            same_lines(name, out, expect);
        }
        gguf_engine_reply_free(r);
    }
    free(text);
}

START_TEST(case_files)
{
    const char *src = getenv("GGUFKIT_SRC");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/data/engine", src ? src : ".");
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "cannot open %s (GGUFKIT_SRC)", dir);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        const size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".case") != 0)
            continue;
        run_case(dir, e->d_name);
        n++;
    }
    closedir(d);
    ck_assert_int_ge(n, 30);
}
END_TEST

/* ---- requests ---- */

START_TEST(request_errors)
{
    gguf_engine_request rq = {0};
    char *body = NULL;
    gguf_error err;
    const int32_t ids[2] = {1, 2};
    rq.api = GGUF_API_VLLM;
    rq.endpoint = GGUF_EP_COMPLETIONS;
    rq.max_tokens = 4;
    rq.top_k = 5;
    /* no prompt, two prompts */
    ck_assert_int_eq(gguf_engine_request_build(&body, &rq, &err), GGUF_E_INVALID);
    rq.text = "x";
    rq.tokens = ids;
    rq.n_tokens = 2;
    ck_assert_int_eq(gguf_engine_request_build(&body, &rq, &err), GGUF_E_INVALID);
    ck_assert_ptr_null(body);
    /* token ids for chat */
    rq.text = NULL;
    rq.endpoint = GGUF_EP_CHAT;
    ck_assert_int_eq(gguf_engine_request_build(&body, &rq, &err), GGUF_E_INVALID);
    ck_assert(strstr(err.message, "messages") != NULL);
    /* messages that are not an array */
    rq.tokens = NULL;
    rq.n_tokens = 0;
    rq.messages = "{\"role\": \"user\"}";
    ck_assert_int_eq(gguf_engine_request_build(&body, &rq, &err), GGUF_E_INVALID);
    rq.messages = "[{";
    ck_assert_int_eq(gguf_engine_request_build(&body, &rq, &err), GGUF_E_INVALID);
    /* counts */
    rq.messages = "[]";
    rq.max_tokens = 0;
    ck_assert_int_eq(gguf_engine_request_build(&body, &rq, &err), GGUF_E_INVALID);
    rq.max_tokens = 1;
    rq.top_k = GGUF_ENGINE_MAX_TOP + 1;
    ck_assert_int_eq(gguf_engine_request_build(&body, &rq, &err), GGUF_E_INVALID);
    rq.top_k = 0;
    ck_assert_int_eq(gguf_engine_request_build(&body, &rq, &err), 0);
    free(body);
    /* endpoints without a body; tokens to /tokenize; llama-server chat tokenize */
    rq.endpoint = GGUF_EP_MODELS;
    ck_assert_int_eq(gguf_engine_request_build(&body, &rq, &err), GGUF_E_INVALID);
    rq.endpoint = GGUF_EP_TOKENIZE;
    rq.messages = NULL;
    rq.tokens = ids;
    rq.n_tokens = 2;
    ck_assert_int_eq(gguf_engine_request_build(&body, &rq, &err), GGUF_E_INVALID);
    rq.tokens = NULL;
    rq.n_tokens = 0;
    rq.chat = "hi";
    rq.api = GGUF_API_LLAMA_SERVER;
    ck_assert_int_eq(gguf_engine_request_build(&body, &rq, &err), GGUF_E_INVALID);
    /* text with quotes and control bytes stays valid JSON */
    rq.chat = NULL;
    rq.api = GGUF_API_OPENAI;
    rq.endpoint = GGUF_EP_COMPLETIONS;
    rq.text = "a\"b\\c\n\x01";
    ck_assert_int_eq(gguf_engine_request_build(&body, &rq, &err), 0);
    json_t *j = json_loads(body, 0, NULL);
    ck_assert_str_eq(json_string_value(json_object_get(j, "prompt")), rq.text);
    json_decref(j);
    free(body);
}
END_TEST

START_TEST(names)
{
    gguf_engine_api a;
    for (int i = 0; i <= GGUF_API_LLAMA_SERVER; i++) {
        ck_assert_int_eq(gguf_engine_api_from_name(gguf_engine_api_name(i), &a), 0);
        ck_assert_int_eq(a, i);
    }
    ck_assert_int_eq(gguf_engine_api_from_name("tgi", &a), GGUF_E_INVALID);
    gguf_engine_endpoint e;
    for (int i = 0; i < GGUF_EP_COUNT; i++) {
        ck_assert_int_eq(gguf_engine_endpoint_from_name(gguf_engine_endpoint_name(i), &e), 0);
        ck_assert_int_eq(e, i);
        ck_assert(gguf_engine_endpoint_path(i)[0] == '/');
    }
    ck_assert_ptr_null(gguf_engine_endpoint_path(GGUF_EP_COUNT));
}
END_TEST

/* ---- replies ---- */

START_TEST(reply_limits)
{
    /* more than GGUF_ENGINE_MAX_TOP alternatives at one position */
    size_t cap = 64 * (GGUF_ENGINE_MAX_TOP + 2) + 256, n = 0;
    char *b = malloc(cap);
    n += (size_t)snprintf(b + n, cap - n, "{\"choices\":[{\"logprobs\":{\"tokens\":[\"a\"],"
                                          "\"token_logprobs\":[-1],\"top_logprobs\":[{");
    for (int i = 0; i <= GGUF_ENGINE_MAX_TOP; i++)
        n += (size_t)snprintf(b + n, cap - n, "%s\"token_id:%d\":-1", i ? "," : "", i);
    n += (size_t)snprintf(b + n, cap - n, "}]}}]}");
    gguf_engine_reply *r = NULL;
    gguf_error err;
    ck_assert_int_eq(gguf_engine_reply_parse(&r, GGUF_EP_COMPLETIONS, b, n, &err), GGUF_E_LIMIT);
    ck_assert_ptr_null(r);
    free(b);
    /* a body over the size limit is refused before parsing */
    ck_assert_int_eq(gguf_engine_reply_parse(&r, GGUF_EP_COMPLETIONS, "{}",
                                             (size_t)GGUF_ENGINE_MAX_BODY + 1, &err),
                     GGUF_E_LIMIT);
    /* an endpoint that does not generate */
    ck_assert_int_eq(gguf_engine_reply_parse(&r, GGUF_EP_TOKENIZE, "{}", 2, &err), GGUF_E_INVALID);
    /* NUL escapes are valid JSON; NULL err is fine */
    const char *nul = "{\"choices\":[{\"text\":\"a\\u0000b\",\"logprobs\":{\"tokens\":[\"\\u0000\"],"
                      "\"token_logprobs\":[-1]}}]}";
    ck_assert_int_eq(gguf_engine_reply_parse(&r, GGUF_EP_COMPLETIONS, nul, strlen(nul), NULL), 0);
    ck_assert_int_eq(r->n_pos, 1);
    gguf_engine_reply_free(r);
    ck_assert_int_eq(gguf_engine_reply_parse(&r, GGUF_EP_COMPLETIONS, "[", 1, NULL),
                     GGUF_E_BAD_VALUE);
    gguf_engine_reply_free(NULL);
}
END_TEST

START_TEST(error_messages)
{
    char buf[64];
    const char *openai = "{\"error\":{\"message\":\"The model `x` does not exist.\",\"code\":404}}";
    ck_assert_str_eq(gguf_engine_error_message(openai, strlen(openai), buf, sizeof buf),
                     "The model `x` does not exist.");
    const char *plain = "{\"error\":\"bad\\nthing\"}";
    ck_assert_str_eq(gguf_engine_error_message(plain, strlen(plain), buf, sizeof buf), "bad thing");
    const char *fastapi = "{\"detail\":[{\"loc\":[\"body\"],\"msg\":\"x\"}]}";
    ck_assert(strstr(gguf_engine_error_message(fastapi, strlen(fastapi), buf, sizeof buf),
                     "\"msg\":\"x\"") != NULL);
    const char *msg = "{\"message\":\"slot unavailable\"}";
    ck_assert_str_eq(gguf_engine_error_message(msg, strlen(msg), buf, sizeof buf),
                     "slot unavailable");
    const char *html = "<html>\n502</html>";
    ck_assert_str_eq(gguf_engine_error_message(html, strlen(html), buf, sizeof buf),
                     "<html> 502</html>");
    /* truncated to the buffer */
    char small[8];
    ck_assert_str_eq(gguf_engine_error_message(html, strlen(html), small, sizeof small), "<html> ");
    ck_assert_str_eq(gguf_engine_error_message(NULL, 0, buf, sizeof buf), "");
}
END_TEST

START_TEST(resolve_ids)
{
    const gguf_engine_text vocab[6] = {{"<unk>", 0}, {" Paris", 1}, {".", 2},
                                       {",", 3},     {" a", 4},     {" a", 5}};
    const char *body = "{\"choices\":[{\"text\":\"x\",\"logprobs\":{\"tokens\":[\"A\",\"B\",\" Paris\","
                       "\".\"],\"token_logprobs\":[null,-1,-0.5,-0.25],\"top_logprobs\":[null,"
                       "{\"B\":-1,\"C\":-2},{\" Paris\":-0.5,\" a\":-1.5},{\".\":-0.25,\",\":-2,"
                       "\"?\":-3}]}}],\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":2}}";
    gguf_engine_reply *r;
    gguf_error err;
    ck_assert_int_eq(gguf_engine_reply_parse(&r, GGUF_EP_COMPLETIONS, body, strlen(body), &err), 0);
    ck_assert_int_eq(r->n_prompt, 2);
    const int32_t prompt[3] = {7, 8, 9};
    /* the echo covers the last two prompt tokens: 8 and 9 */
    const int64_t missing = gguf_engine_reply_resolve(r, vocab, 6, prompt, 3);
    ck_assert_int_eq(missing, 0);
    ck_assert_int_eq(r->pos[0].id, 8);
    ck_assert_int_eq(r->pos[1].id, 9);
    ck_assert_int_eq(r->pos[2].id, 1);
    ck_assert_int_eq(r->pos[3].id, 2);
    /* " a" is ambiguous (4 and 5), "?" unknown: left at -1 */
    ck_assert_int_eq(r->pos[2].top[1].id, -1);
    ck_assert_int_eq(r->pos[3].top[2].id, -1);
    ck_assert_int_eq(r->pos[3].top[1].id, 3);
    gguf_engine_reply_free(r);
    /* without a vocabulary the text-only generated tokens stay unresolved */
    ck_assert_int_eq(gguf_engine_reply_parse(&r, GGUF_EP_COMPLETIONS, body, strlen(body), &err), 0);
    ck_assert_int_eq(gguf_engine_reply_resolve(r, NULL, 0, NULL, 0), 4);
    gguf_engine_reply_free(r);
}
END_TEST

START_TEST(prompt_logprobs_without_ids)
{
    /* prompt_logprobs without prompt_token_ids: ids come from the request */
    const char *body = "{\"choices\":[{\"text\":\"x\",\"logprobs\":{\"tokens\":[\"token_id:5\"],"
                       "\"token_logprobs\":[-0.5]},\"prompt_logprobs\":[null,{\"3\":{\"logprob\":"
                       "-2.0},\"4\":{\"logprob\":-0.25}}]}]}";
    gguf_engine_reply *r;
    gguf_error err;
    ck_assert_int_eq(gguf_engine_reply_parse(&r, GGUF_EP_COMPLETIONS, body, strlen(body), &err), 0);
    ck_assert_int_eq(r->n_prompt, 2);
    ck_assert_int_eq(r->pos[1].id, -1);
    ck_assert(isnan(r->pos[1].logprob));
    const int32_t prompt[2] = {1, 3};
    ck_assert_int_eq(gguf_engine_reply_resolve(r, NULL, 0, prompt, 2), 0);
    ck_assert_int_eq(r->pos[1].id, 3);
    ck_assert(r->pos[1].logprob == -2.0);
    ck_assert_int_eq(r->pos[2].id, 5);
    gguf_engine_reply_free(r);
}
END_TEST

/* For tests/engines/capture_vllm_cases.py, which writes case files from a real server:
 * `--request CASE` prints the body built from the case's options, `--dump CASE` the parse of
 * its reply in the expect format. */
static int tool_mode(const char *mode, const char *path)
{
    char *text = slurp(path);
    if (!text)
        return 2;
    tcase c;
    parse_case(&c, text);
    gguf_engine_endpoint ep;
    gguf_error err;
    int ret = 2;
    if (gguf_engine_endpoint_from_name(c.endpoint, &ep) != 0)
        goto done;
    if (strcmp(mode, "--request") == 0) {
        json_error_t je;
        json_t *o = json_loads(sec(&c, "options") ? sec(&c, "options") : "", 0, &je);
        int32_t ids[64];
        char msgs[1024];
        gguf_engine_request rq;
        char *body = NULL;
        if (o) {
            request_from(&rq, o, ep, ids, msgs, sizeof msgs);
            if (gguf_engine_request_build(&body, &rq, &err) == 0) {
                printf("%s\n", body);
                ret = 0;
            }
        }
        free(body);
        json_decref(o);
    } else if (strcmp(mode, "--dump") == 0 && sec(&c, "reply")) {
        const char *reply = sec(&c, "reply");
        static char out[1 << 16];
        if (ep == GGUF_EP_TOKENIZE) {
            int32_t *ids = NULL;
            int64_t n = 0;
            if (gguf_engine_tokens_parse(&ids, &n, reply, strlen(reply), &err) == 0) {
                char *o = out;
                size_t left = sizeof out;
                ids_or_none(&o, &left, "ids", ids, n);
                fputs(out, stdout);
                ret = 0;
            }
            free(ids);
        } else {
            gguf_engine_reply *r = NULL;
            if (gguf_engine_reply_parse(&r, ep, reply, strlen(reply), &err) == 0) {
                dump_reply(r, out, sizeof out);
                fputs(out, stdout);
                ret = 0;
            }
            gguf_engine_reply_free(r);
        }
    }
done:
    free(text);
    return ret;
}

int main(int argc, char **argv)
{
    if (argc == 3)
        return tool_mode(argv[1], argv[2]);
    Suite *s = suite_create("engine");
    TCase *t = tcase_create("parse");
    tcase_add_test(t, case_files);
    tcase_add_test(t, request_errors);
    tcase_add_test(t, names);
    tcase_add_test(t, reply_limits);
    tcase_add_test(t, error_messages);
    tcase_add_test(t, resolve_ids);
    tcase_add_test(t, prompt_logprobs_without_ids);
    suite_add_tcase(s, t);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
