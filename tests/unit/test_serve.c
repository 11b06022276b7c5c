/* serve (gguf/serve.h): the request layer over a fake model whose logits are
 * a known function of (position, token), so that every log-probability the
 * server returns is recomputed here independently (log-softmax in long
 * double); routing, the API key, every refusal class, the queue, cancel,
 * and the vLLM / llama-server response shapes. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/serve_internal.h"
#include "gguf/serve.h"

/* ---- the fake model ---- */

#define FV 40
#define TIE_TOKEN 8 /* after this token every logit is equal */

typedef struct fake {
    int64_t pos;
    int resets;
    bool fail;             /* eval fails */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool gate_closed;      /* eval waits until opened */
    int in_eval;
} fake;

static fake F;

/* The logits after token t at position pos. */
static void row_of(int64_t pos, int32_t t, float *row)
{
    for (int j = 0; j < FV; j++) {
        if (t == TIE_TOKEN) {
            row[j] = 0.5f;
            continue;
        }
        double v = 3.0 * sin(0.7 * j + 1.3 * t + 0.17 * (double)pos);
        if (j == (t * 7 + 3) % FV)
            v += 4.0;
        row[j] = (float)v;
    }
}

static int f_reset(void *user, gguf_error *err)
{
    fake *f = user;
    f->pos = 0;
    f->resets++;
    return 0;
}

static int f_eval(void *user, const int32_t *tokens, int64_t n, float *logits, gguf_error *err)
{
    fake *f = user;
    pthread_mutex_lock(&f->mu);
    f->in_eval++;
    pthread_cond_broadcast(&f->cv);
    while (f->gate_closed)
        pthread_cond_wait(&f->cv, &f->mu);
    f->in_eval--;
    pthread_mutex_unlock(&f->mu);
    if (f->fail)
        return gguf_error_setf(err, GGUF_E_BAD_TYPE, 0, "fake: weight type 99");
    for (int64_t i = 0; i < n; i++)
        row_of(f->pos + i, tokens[i], logits + i * FV);
    f->pos += n;
    return 0;
}

static const char *const texts[FV] = {
    "", "", "", "\xC3", "\xA9", " the", " cat", "\xC3\xA9", "!", "a", "b", "c", "d", "e", "f",
    "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q", "r", "s", "t", "u", "v", "w", "x",
    "y", "z", " ", ",", ".", "\n", "?",
};

static int f_text(void *user, int32_t id, char *buf, size_t size)
{
    if (id < 0 || id >= FV)
        return GGUF_E_INVALID;
    return snprintf(buf, size, "%s", texts[id]);
}

/* The vocabulary's own strings (vLLM's return_token_strs, control tokens' text). */
static const char *const raws[FV] = {
    "<unk>", "<s>", "</s>", "<0xC3>", "<0xA9>", "\xE2\x96\x81" "the", "\xE2\x96\x81" "cat", "\xC3\xA9",
    "!", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q", "r",
    "s", "t", "u", "v", "w", "x", "y", "z", "\xE2\x96\x81", ",", ".", "<0x0A>", "?",
};

static int f_raw(void *user, int32_t id, char *buf, size_t size)
{
    if (id < 0 || id >= FV)
        return GGUF_E_INVALID;
    return snprintf(buf, size, "%s", raws[id]);
}

static int f_tokenize(void *user, const char *text, size_t len, bool bos, int32_t **ids,
                      int64_t *n, gguf_error *err)
{
    *ids = malloc((len + 2) * sizeof **ids);
    *n = 0;
    if (bos)
        (*ids)[(*n)++] = 1;
    for (size_t i = 0; i < len; i++) {
        const unsigned char c = (unsigned char)text[i];
        if (c == '\t')
            continue; /* vanishes, as control characters do in WordPiece */
        int32_t id = 39;
        if (c >= 'a' && c <= 'z')
            id = 9 + (c - 'a');
        else if (c == ' ')
            id = 35;
        else if (c == ',')
            id = 36;
        else if (c == '.')
            id = 37;
        else if (c == '!')
            id = 8;
        (*ids)[(*n)++] = id;
    }
    return 0;
}

static gguf_serve *make(const char *key, int max_queue, bool tokenizer)
{
    memset(&F, 0, sizeof F);
    pthread_mutex_init(&F.mu, NULL);
    pthread_cond_init(&F.cv, NULL);
    gguf_serve_model m = {0};
    m.user = &F;
    m.n_vocab = FV;
    m.n_ctx = 64;
    m.bos = 1;
    m.eos = 2;
    m.add_bos = true;
    m.strip_space = true;
    m.reset = f_reset;
    m.eval = f_eval;
    m.token_text = f_text;
    m.token_raw = f_raw;
    if (tokenizer)
        m.tokenize = f_tokenize;
    else
        m.tokenize_error = "tokenizer.ggml.model: 'gpt2' is not supported";
    gguf_serve_opts o = {0};
    o.model_name = "fake";
    o.api_key = key;
    o.max_body = 4096;
    o.max_tokens = 100;
    o.max_queue = max_queue;
    o.created = 1700000000;
    gguf_serve *s = NULL;
    gguf_error err;
    ck_assert_int_eq(gguf_serve_create(&s, &m, &o, &err), 0);
    return s;
}

/* One request; the parsed body (NULL when not JSON) and the response. */
static json_t *call2(gguf_serve *s, const char *method, const char *path, const char *auth,
                     const char *body, size_t len, gguf_serve_response *r)
{
    gguf_serve_request q = {method, path, auth, body, len, false};
    gguf_error err;
    ck_assert_int_eq(gguf_serve_handle(s, &q, r, &err), 0);
    ck_assert_ptr_nonnull(r->body);
    ck_assert_uint_eq(strlen(r->body), r->body_len);
    return json_loadb(r->body, r->body_len, JSON_ALLOW_NUL, NULL);
}

static json_t *call(gguf_serve *s, const char *method, const char *path, const char *body,
                    int want_status)
{
    gguf_serve_response r;
    json_t *j = call2(s, method, path, NULL, body, body ? strlen(body) : 0, &r);
    ck_assert_msg(r.status == want_status, "%s %s %s: status %d, want %d: %s", method, path,
                  body ? body : "", r.status, want_status, r.body);
    ck_assert_msg(j != NULL, "not JSON: %s", r.body);
    gguf_serve_response_clear(&r);
    return j;
}

static json_t *post(gguf_serve *s, const char *body, int want_status)
{
    return call(s, "POST", "/v1/completions", body, want_status);
}

/* An error object: code == status, the type, and the param. */
static void assert_error(json_t *j, int status, const char *param, const char *in_message)
{
    json_t *e = json_object_get(j, "error");
    ck_assert_msg(json_is_object(e), "no error object");
    ck_assert_int_eq(json_integer_value(json_object_get(e, "code")), status);
    ck_assert(json_is_string(json_object_get(e, "type")));
    const char *msg = json_string_value(json_object_get(e, "message"));
    ck_assert_ptr_nonnull(msg);
    if (in_message)
        ck_assert_msg(strstr(msg, in_message), "'%s' not in '%s'", in_message, msg);
    json_t *p = json_object_get(e, "param");
    if (param)
        ck_assert_str_eq(json_string_value(p), param);
    else
        ck_assert(json_is_null(p));
    json_decref(j);
}

static void refuse(gguf_serve *s, const char *body, int status, const char *param,
                   const char *in_message)
{
    assert_error(post(s, body, status), status, param, in_message);
}

/* log-softmax of the fake's row, independently, in long double */
static double want_lp(int64_t pos, int32_t prev, int32_t tok)
{
    float row[FV];
    row_of(pos, prev, row);
    long double m = row[0], sum = 0;
    for (int j = 1; j < FV; j++)
        if (row[j] > m)
            m = row[j];
    for (int j = 0; j < FV; j++)
        sum += expl((long double)row[j] - m);
    return (double)((long double)row[tok] - m - logl(sum));
}

static int32_t want_argmax(int64_t pos, int32_t prev)
{
    float row[FV];
    row_of(pos, prev, row);
    int best = 0;
    for (int j = 1; j < FV; j++)
        if (row[j] > row[best])
            best = j;
    return best;
}

/* ---- tests ---- */

START_TEST(health_models_routes)
{
    gguf_serve *s = make(NULL, 0, true);
    json_t *j = call(s, "GET", "/health", NULL, 200);
    ck_assert_str_eq(json_string_value(json_object_get(j, "status")), "ok");
    json_decref(j);
    j = call(s, "GET", "/v1/models?x=1", NULL, 200);
    json_t *card = json_array_get(json_object_get(j, "data"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(card, "id")), "fake");
    ck_assert_int_eq(json_integer_value(json_object_get(card, "max_model_len")), 64);
    json_decref(j);
    assert_error(call(s, "GET", "/v1/nothing", NULL, 404), 404, NULL, "/v1/nothing");
    gguf_serve_response r;
    j = call2(s, "GET", "/v1/completions", NULL, NULL, 0, &r);
    ck_assert_int_eq(r.status, 405);
    ck_assert_str_eq(r.allow, "POST");
    gguf_serve_response_clear(&r);
    assert_error(j, 405, NULL, "POST");
    j = call2(s, "POST", "/health", NULL, "{}", 2, &r);
    ck_assert_int_eq(r.status, 405);
    ck_assert_str_eq(r.allow, "GET, HEAD");
    gguf_serve_response_clear(&r);
    assert_error(j, 405, NULL, NULL);
    j = call(s, "GET", "/tokenizer_info", NULL, 200);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "eos_token_id")), 2);
    ck_assert(json_is_string(json_object_get(j, "eos_token")));
    json_decref(j);
    gguf_serve_free(s);
}
END_TEST

START_TEST(api_key)
{
    gguf_serve *s = make("sekrit", 0, true);
    gguf_serve_response r;
    const char *body = "{\"prompt\": [1, 9], \"max_tokens\": 1}";
    json_t *j = call2(s, "POST", "/v1/completions", NULL, body, strlen(body), &r);
    ck_assert_int_eq(r.status, 401);
    ck_assert(r.www_authenticate);
    gguf_serve_response_clear(&r);
    assert_error(j, 401, NULL, "Unauthorized");
    const char *bad[] = {"Bearer sekri", "Bearer sekrit2", "Basic sekrit", "sekrit", "Bearer",
                         "Bearer  sekrit", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        j = call2(s, "POST", "/v1/completions", bad[i], body, strlen(body), &r);
        ck_assert_msg(r.status == 401, "'%s' accepted", bad[i]);
        gguf_serve_response_clear(&r);
        json_decref(j);
    }
    /* unknown paths are not revealed without the key */
    j = call2(s, "GET", "/v1/nothing", NULL, NULL, 0, &r);
    ck_assert_int_eq(r.status, 401);
    gguf_serve_response_clear(&r);
    json_decref(j);
    const char *good[] = {"Bearer sekrit", "bearer sekrit", "BEARER sekrit"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        j = call2(s, "POST", "/v1/completions", good[i], body, strlen(body), &r);
        ck_assert_msg(r.status == 200, "'%s' refused: %s", good[i], r.body);
        gguf_serve_response_clear(&r);
        json_decref(j);
    }
    /* /health never needs the key */
    j = call2(s, "GET", "/health", NULL, NULL, 0, &r);
    ck_assert_int_eq(r.status, 200);
    gguf_serve_response_clear(&r);
    json_decref(j);
    gguf_serve_free(s);
}
END_TEST

START_TEST(body_refusals)
{
    gguf_serve *s = make(NULL, 0, true);
    refuse(s, "", 400, NULL, "empty");
    refuse(s, "{\"prompt\": [1, 2]", 400, NULL, "malformed JSON");
    refuse(s, "[1, 2]", 400, NULL, "JSON object");
    refuse(s, "{\"prompt\": [1], \"prompt\": [2]}", 400, NULL, "duplicate");
    refuse(s, "{\"prompt\": \"caf\xC3\"}", 400, NULL, "UTF-8");
    refuse(s, "{\"prompt\": \"\xED\xA0\x80\"}", 400, NULL, "UTF-8"); /* a surrogate */
    /* NUL is valid JSON (a model's text can hold it): echoed back as sent */
    json_t *j = post(s, "{\"prompt\": \"a\\u0000b\", \"max_tokens\": 0, \"echo\": true}", 200);
    json_t *t = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text");
    ck_assert_uint_eq(json_string_length(t), 3);
    ck_assert_mem_eq(json_string_value(t), "a\0b", 3);
    json_decref(j);
    /* over max_body: by the transport's flag and by length */
    gguf_serve_response r;
    char *big = malloc(5000);
    memset(big, ' ', 5000);
    gguf_serve_request q = {"POST", "/v1/completions", NULL, big, 5000, false};
    gguf_error err;
    ck_assert_int_eq(gguf_serve_handle(s, &q, &r, &err), 0);
    ck_assert_int_eq(r.status, 413);
    assert_error(json_loadb(r.body, r.body_len, 0, NULL), 413, NULL, "--max-body");
    gguf_serve_response_clear(&r);
    q.body_len = 10;
    q.body_too_large = true;
    ck_assert_int_eq(gguf_serve_handle(s, &q, &r, &err), 0);
    ck_assert_int_eq(r.status, 413);
    gguf_serve_response_clear(&r);
    free(big);
    gguf_serve_free(s);
}
END_TEST

START_TEST(field_refusals)
{
    gguf_serve *s = make(NULL, 0, true);
    /* wrong types */
    refuse(s, "{\"prompt\": [1], \"max_tokens\": \"5\"}", 400, "max_tokens", "integer");
    refuse(s, "{\"prompt\": [1], \"max_tokens\": true}", 400, "max_tokens", "integer");
    refuse(s, "{\"prompt\": [1], \"max_tokens\": 1.5}", 400, "max_tokens", "integer");
    refuse(s, "{\"prompt\": [1], \"echo\": 1}", 400, "echo", "true or false");
    refuse(s, "{\"prompt\": [1], \"logprobs\": \"2\"}", 400, "logprobs", NULL);
    refuse(s, "{\"prompt\": [1], \"temperature\": \"0\"}", 400, "temperature", "number");
    refuse(s, "{\"prompt\": [1], \"model\": 3}", 400, "model", "string");
    refuse(s, "{\"prompt\": [1], \"stop\": 3}", 400, "stop", NULL);
    refuse(s, "{\"prompt\": [1], \"stop\": [\"a\", 3]}", 400, "stop", NULL);
    refuse(s, "{\"prompt\": [1], \"seed\": \"x\"}", 400, "seed", "integer");
    refuse(s, "{\"prompt\": [1], \"stop_token_ids\": [1.5]}", 400, "stop_token_ids", NULL);
    /* values out of range or unknown */
    refuse(s, "{\"prompt\": [1], \"max_tokens\": -1}", 400, "max_tokens", NULL);
    refuse(s, "{\"prompt\": [1], \"logprobs\": 21}", 400, "logprobs", "20");
    refuse(s, "{\"prompt\": [1], \"logprobs\": -1}", 400, "logprobs", NULL);
    refuse(s, "{\"prompt\": [1], \"prompt_logprobs\": 50}", 400, "prompt_logprobs", NULL);
    refuse(s, "{\"prompt\": [1, 40]}", 400, "prompt", "outside the vocabulary");
    refuse(s, "{\"prompt\": [-1]}", 400, "prompt", "outside the vocabulary");
    refuse(s, "{\"prompt\": [1], \"stop_token_ids\": [99]}", 400, "stop_token_ids", NULL);
    refuse(s, "{\"prompt\": [1], \"model\": \"gpt-4\"}", 404, "model", "does not exist");
    char many[400] = "{\"prompt\": [1], \"stop\": [";
    for (int i = 0; i < 17; i++)
        strcat(many, i ? ", \"x\"" : "\"x\"");
    strcat(many, "]}");
    refuse(s, many, 400, "stop", "16");
    /* prompts */
    refuse(s, "{}", 400, "prompt", "required");
    refuse(s, "{\"prompt\": null}", 400, "prompt", "required");
    refuse(s, "{\"prompt\": \"\"}", 400, "prompt", "empty");
    refuse(s, "{\"prompt\": []}", 400, "prompt", "empty");
    refuse(s, "{\"prompt\": [[]]}", 400, "prompt", "empty");
    refuse(s, "{\"prompt\": [1, \"a\"]}", 400, "prompt", "mixes");
    refuse(s, "{\"prompt\": [[1], \"a\", [1, 2.5]]}", 400, "prompt", NULL);
    refuse(s, "{\"prompt\": {\"a\": 1}}", 400, "prompt", NULL);
    refuse(s, "{\"prompt\": [true]}", 400, "prompt", NULL);
    /* greedy only */
    refuse(s, "{\"prompt\": [1], \"temperature\": 0.7}", 400, "temperature", "greedily");
    refuse(s, "{\"prompt\": [1], \"top_p\": 0.9}", 400, "top_p", "greedily");
    refuse(s, "{\"prompt\": [1], \"top_k\": 40}", 400, "top_k", NULL);
    refuse(s, "{\"prompt\": [1], \"min_p\": 0.05}", 400, "min_p", NULL);
    refuse(s, "{\"prompt\": [1], \"presence_penalty\": 0.5}", 400, "presence_penalty", NULL);
    refuse(s, "{\"prompt\": [1], \"frequency_penalty\": 0.5}", 400, "frequency_penalty", NULL);
    refuse(s, "{\"prompt\": [1], \"repetition_penalty\": 1.1}", 400, "repetition_penalty", NULL);
    refuse(s, "{\"prompt\": [1], \"n\": 2}", 400, "n", NULL);
    refuse(s, "{\"prompt\": [1], \"best_of\": 3}", 400, "best_of", NULL);
    refuse(s, "{\"prompt\": [1], \"use_beam_search\": true}", 400, "use_beam_search", NULL);
    refuse(s, "{\"prompt\": [1], \"min_tokens\": 2}", 400, "min_tokens", NULL);
    refuse(s, "{\"prompt\": [1], \"logit_bias\": {\"5\": 10}}", 400, "logit_bias", NULL);
    refuse(s, "{\"prompt\": [1], \"response_format\": {\"type\": \"json_object\"}}", 400,
           "response_format", NULL);
    refuse(s, "{\"prompt\": [1], \"suffix\": \"x\"}", 400, "suffix", NULL);
    /* neutral settings pass */
    json_t *j = post(s, "{\"prompt\": [1], \"max_tokens\": 1, \"temperature\": 0, \"top_p\": 1, "
                        "\"top_k\": -1, \"n\": 1, \"best_of\": null, \"logit_bias\": {}, "
                        "\"presence_penalty\": 0, \"seed\": 1234, \"user\": \"u\", "
                        "\"unknown_field\": [1, {\"x\": 2}], \"bad_words\": []}", 200);
    json_decref(j);
    /* budgets: per request (100) and the model's context (64) */
    refuse(s, "{\"prompt\": [1, 2], \"max_tokens\": 99}", 400, "max_tokens", "--max-tokens");
    refuse(s, "{\"prompt\": [[1, 2], [1, 2]], \"max_tokens\": 49}", 400, "max_tokens", NULL);
    refuse(s, "{\"prompt\": [1, 2], \"max_tokens\": 63}", 400, "max_tokens", "context length");
    j = post(s, "{\"prompt\": [1, 2], \"max_tokens\": 62}", 200);
    json_decref(j);
    gguf_serve_free(s);
}
END_TEST

/* Scores of echo + logprobs against the independent log-softmax. */
START_TEST(echo_logprobs_values)
{
    gguf_serve *s = make(NULL, 0, true);
    json_t *j = post(s, "{\"prompt\": [1, 9, 10, 11], \"max_tokens\": 3, \"logprobs\": 3, "
                        "\"echo\": true, \"return_token_ids\": true, "
                        "\"return_tokens_as_token_ids\": true}", 200);
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    json_t *lp = json_object_get(c, "logprobs");
    json_t *tlp = json_object_get(lp, "token_logprobs");
    json_t *top = json_object_get(lp, "top_logprobs");
    json_t *toks = json_object_get(lp, "tokens");
    json_t *gen = json_object_get(c, "token_ids");
    ck_assert_int_eq(json_array_size(tlp), 7);
    ck_assert_int_eq(json_array_size(gen), 3);
    ck_assert(json_is_null(json_array_get(tlp, 0)));
    ck_assert(json_is_null(json_array_get(top, 0)));
    int32_t ids[7] = {1, 9, 10, 11};
    for (int i = 0; i < 3; i++)
        ids[4 + i] = (int32_t)json_integer_value(json_array_get(gen, (size_t)i));
    for (int i = 1; i < 7; i++) {
        const double want = want_lp(i - 1, ids[i - 1], ids[i]);
        const double got = json_real_value(json_array_get(tlp, (size_t)i));
        ck_assert_msg(fabs(got - want) < 1e-12, "position %d: %.17g, want %.17g", i, got, want);
        char key[32];
        snprintf(key, sizeof key, "token_id:%d", ids[i]);
        ck_assert_str_eq(json_string_value(json_array_get(toks, (size_t)i)), key);
        /* the chosen token first, then the top 3 by log-probability */
        json_t *d = json_array_get(top, (size_t)i);
        ck_assert(json_object_size(d) >= 3 && json_object_size(d) <= 4);
        ck_assert_str_eq(json_object_iter_key(json_object_iter(d)), key);
        double best = -INFINITY;
        const char *k;
        json_t *v;
        json_object_foreach(d, k, v) {
            const int id = atoi(k + strlen("token_id:"));
            ck_assert(fabs(json_real_value(v) - want_lp(i - 1, ids[i - 1], id)) < 1e-12);
            if (json_real_value(v) > best)
                best = json_real_value(v);
        }
        const int32_t am = want_argmax(i - 1, ids[i - 1]);
        ck_assert(fabs(best - want_lp(i - 1, ids[i - 1], am)) < 1e-12);
        if (i >= 4) /* generated: greedy */
            ck_assert_int_eq(ids[i], am);
    }
    /* vLLM's prompt_logprobs rides along with echo: rank and decoded token */
    json_t *plp = json_object_get(c, "prompt_logprobs");
    ck_assert_int_eq(json_array_size(plp), 4);
    ck_assert(json_is_null(json_array_get(plp, 0)));
    json_t *e = json_object_get(json_array_get(plp, 2), "10");
    ck_assert(fabs(json_real_value(json_object_get(e, "logprob")) - want_lp(1, 9, 10)) < 1e-12);
    float row[FV];
    row_of(1, 9, row);
    int rank = 1;
    for (int q = 0; q < FV; q++)
        rank += row[q] > row[10];
    ck_assert_int_eq(json_integer_value(json_object_get(e, "rank")), rank);
    json_t *usage = json_object_get(j, "usage");
    ck_assert_int_eq(json_integer_value(json_object_get(usage, "prompt_tokens")), 4);
    ck_assert_int_eq(json_integer_value(json_object_get(usage, "completion_tokens")), 3);
    json_decref(j);
    gguf_serve_free(s);
}
END_TEST

/* Text: echo of a text prompt, text_offset in code points, UTF-8 repair,
 * top-k ties by lower id. */
START_TEST(text_and_ties)
{
    gguf_serve *s = make(NULL, 0, true);
    /* token 8 ("!") makes every next logit equal: top-3 = ids 0, 1, 2 and the
     * argmax is id 0 */
    json_t *j = post(s, "{\"prompt\": [1, 8], \"max_tokens\": 1, \"logprobs\": 3}", 200);
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    json_t *lp = json_object_get(c, "logprobs");
    ck_assert_double_eq_tol(json_real_value(json_array_get(json_object_get(lp, "token_logprobs"),
                                                           0)), -log((double)FV), 1e-12);
    json_decref(j);
    j = post(s, "{\"prompt\": [1, 8], \"max_tokens\": 1, \"logprobs\": 3, "
                "\"return_tokens_as_token_ids\": true}", 200);
    c = json_array_get(json_object_get(j, "choices"), 0);
    json_t *d = json_array_get(json_object_get(json_object_get(c, "logprobs"), "top_logprobs"), 0);
    const char *want[] = {"token_id:0", "token_id:1", "token_id:2"};
    void *it = json_object_iter(d);
    for (int i = 0; i < 3; i++, it = json_object_iter_next(d, it))
        ck_assert_str_eq(json_object_iter_key(it), want[i]);
    json_decref(j);
    /* echo of token ids, as vLLM writes it: BOS as its text, the first leading
     * space dropped, a split character joined; of the byte tokens the first
     * is "" and the one that completes the character carries it */
    j = post(s, "{\"prompt\": [1, 5, 3, 4, 6], \"max_tokens\": 0, \"echo\": true, "
                "\"logprobs\": 0}", 200);
    c = json_array_get(json_object_get(j, "choices"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(c, "text")), "<s>the\xC3\xA9 cat");
    lp = json_object_get(c, "logprobs");
    json_t *toks = json_object_get(lp, "tokens"), *off = json_object_get(lp, "text_offset");
    const char *const want_toks[] = {"<s>", "the", "", "\xC3\xA9", "cat"};
    for (int i = 0; i < 5; i++)
        ck_assert_str_eq(json_string_value(json_array_get(toks, (size_t)i)), want_toks[i]);
    /* vLLM counts one generated token for an echo with max_tokens 0 */
    json_t *u = json_object_get(j, "usage");
    ck_assert_int_eq(json_integer_value(json_object_get(u, "completion_tokens")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(u, "total_tokens")), 6);
    const int offs[] = {0, 3, 6, 6, 7};
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(json_integer_value(json_array_get(off, (size_t)i)), offs[i]);
    ck_assert_str_eq(json_string_value(json_object_get(c, "finish_reason")), "length");
    json_decref(j);
    /* a text prompt is echoed as sent; BOS added (add_special_tokens) */
    j = post(s, "{\"prompt\": \"ab c\", \"max_tokens\": 2, \"echo\": true, \"logprobs\": 0}",
             200);
    c = json_array_get(json_object_get(j, "choices"), 0);
    ck_assert(strncmp(json_string_value(json_object_get(c, "text")), "ab c", 4) == 0);
    char gen[64];
    snprintf(gen, sizeof gen, "%s", json_string_value(json_object_get(c, "text")) + 4);
    json_decref(j);
    /* with return_token_ids vLLM echoes no text: the generated text alone */
    j = post(s, "{\"prompt\": \"ab c\", \"max_tokens\": 2, \"echo\": true, \"logprobs\": 0, "
                "\"return_token_ids\": true}", 200);
    c = json_array_get(json_object_get(j, "choices"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(c, "text")), gen);
    json_t *pids = json_object_get(c, "prompt_token_ids");
    ck_assert_int_eq(json_array_size(pids), 5);
    ck_assert_int_eq(json_integer_value(json_array_get(pids, 0)), 1);
    json_decref(j);
    j = post(s, "{\"prompt\": \"ab\", \"max_tokens\": 1, \"add_special_tokens\": false, "
                "\"return_token_ids\": true}", 200);
    c = json_array_get(json_object_get(j, "choices"), 0);
    ck_assert_int_eq(json_array_size(json_object_get(c, "prompt_token_ids")), 2);
    ck_assert(json_is_null(json_object_get(c, "logprobs")));
    json_decref(j);
    gguf_serve_free(s);
}
END_TEST

/* The greedy continuation of a prompt, computed here. */
static int greedy(const int32_t *prompt, int n, int max, int32_t *out)
{
    int32_t prev = prompt[n - 1];
    for (int g = 0; g < max; g++) {
        out[g] = want_argmax(n - 1 + g, prev);
        prev = out[g];
    }
    return max;
}

START_TEST(stops_and_batches)
{
    gguf_serve *s = make(NULL, 0, true);
    int32_t p[2] = {1, 9}, g[20];
    greedy(p, 2, 20, g);
    /* find the first generated token with a one-character text to stop on */
    int at = -1;
    for (int i = 0; i < 20 && at < 0; i++)
        if (g[i] >= 9 && g[i] <= 34)
            at = i;
    ck_assert_msg(at >= 0, "the fake's continuation has no letter");
    char body[256];
    snprintf(body, sizeof body, "{\"prompt\": [1, 9], \"max_tokens\": 20, \"stop\": \"%s\", "
             "\"return_token_ids\": true}", texts[g[at]]);
    json_t *j = post(s, body, 200);
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(c, "finish_reason")), "stop");
    ck_assert_str_eq(json_string_value(json_object_get(c, "stop_reason")), texts[g[at]]);
    ck_assert_ptr_null(strstr(json_string_value(json_object_get(c, "text")), texts[g[at]]));
    /* the token that completed the stop string is still in the output */
    ck_assert_int_eq(json_array_size(json_object_get(c, "token_ids")), at + 1);
    json_decref(j);
    /* stop_token_ids */
    snprintf(body, sizeof body, "{\"prompt\": [1, 9], \"max_tokens\": 20, \"stop_token_ids\": "
             "[%d], \"return_token_ids\": true}", g[2]);
    j = post(s, body, 200);
    c = json_array_get(json_object_get(j, "choices"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(c, "finish_reason")), "stop");
    ck_assert_int_eq(json_integer_value(json_object_get(c, "stop_reason")), g[2]);
    json_decref(j);
    /* a batch: one choice per prompt, in order, each its own sequence */
    j = post(s, "{\"prompt\": [[1, 9], [1, 10, 11]], \"max_tokens\": 4, \"return_token_ids\": "
                "true}", 200);
    json_t *ch = json_object_get(j, "choices");
    ck_assert_int_eq(json_array_size(ch), 2);
    int32_t p2[3] = {1, 10, 11}, g2[4];
    greedy(p2, 3, 4, g2);
    for (int i = 0; i < 2; i++) {
        json_t *ci = json_array_get(ch, (size_t)i);
        ck_assert_int_eq(json_integer_value(json_object_get(ci, "index")), i);
        json_t *t = json_object_get(ci, "token_ids");
        for (int k = 0; k < 4 && (i ? g2[k] : g[k]) != 2; k++)
            ck_assert_int_eq(json_integer_value(json_array_get(t, (size_t)k)), i ? g2[k] : g[k]);
    }
    json_decref(j);
    j = post(s, "{\"prompt\": [\"ab\", \"cd\"], \"max_tokens\": 1}", 200);
    ck_assert_int_eq(json_array_size(json_object_get(j, "choices")), 2);
    json_decref(j);
    gguf_serve_free(s);
}
END_TEST

START_TEST(llama_completion)
{
    gguf_serve *s = make(NULL, 0, true);
    json_t *j = call(s, "POST", "/completion", "{\"prompt\": [1, 9, 10], \"n_predict\": 3, "
                                               "\"n_probs\": 2, \"return_tokens\": true}", 200);
    int32_t p[3] = {1, 9, 10}, g[3];
    greedy(p, 3, 3, g);
    json_t *probs = json_object_get(j, "completion_probabilities");
    ck_assert_int_eq(json_array_size(probs), 3);
    for (int i = 0; i < 3; i++) {
        json_t *e = json_array_get(probs, (size_t)i);
        ck_assert_int_eq(json_integer_value(json_object_get(e, "id")), g[i]);
        const int32_t prev = i ? g[i - 1] : 10;
        ck_assert(fabs(json_real_value(json_object_get(e, "logprob")) - want_lp(2 + i, prev, g[i]))
                  < 1e-12);
        json_t *top = json_object_get(e, "top_logprobs");
        ck_assert_int_eq(json_array_size(top), 2);
        ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(top, 0), "id")), g[i]);
        ck_assert(json_is_array(json_object_get(e, "bytes")));
    }
    json_t *tk = json_object_get(j, "tokens");
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(json_integer_value(json_array_get(tk, (size_t)i)), g[i]);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "tokens_evaluated")), 3);
    ck_assert_str_eq(json_string_value(json_object_get(j, "stop_type")),
                     g[0] == 2 || g[1] == 2 || g[2] == 2 ? "eos" : "limit");
    json_decref(j);
    /* several prompts: an array; mixed ids and text as one prompt */
    j = call(s, "POST", "/completion", "{\"prompt\": [\"ab\", [1, 9]], \"n_predict\": 1}", 200);
    ck_assert_int_eq(json_array_size(j), 2);
    json_decref(j);
    j = call(s, "POST", "/completion", "{\"prompt\": [1, \"ab\", 9], \"n_predict\": 1}", 200);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "tokens_evaluated")), 4);
    json_decref(j);
    /* n_predict -1: until EOS or the limits (context 64, request 100) */
    j = call(s, "POST", "/completion", "{\"prompt\": [1, 9], \"n_predict\": -1, "
                                       "\"ignore_eos\": true}", 200);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "tokens_predicted")), 62);
    json_decref(j);
    assert_error(call(s, "POST", "/completion", "{\"prompt\": [1], \"n_probs\": 21}", 400), 400,
                 "n_probs", NULL);
    assert_error(call(s, "POST", "/completion", "{\"prompt\": [1], \"stream\": true}", 400), 400,
                 "stream", NULL);
    assert_error(call(s, "POST", "/completion", "{\"prompt\": [1], \"post_sampling_probs\": true}",
                      400), 400, "post_sampling_probs", NULL);
    assert_error(call(s, "POST", "/completion", "{\"prompt\": [1], \"repeat_penalty\": 1.1}", 400),
                 400, "repeat_penalty", NULL);
    gguf_serve_free(s);
}
END_TEST

START_TEST(tokenize_endpoints)
{
    gguf_serve *s = make(NULL, 0, true);
    json_t *j = call(s, "POST", "/tokenize", "{\"prompt\": \"ab\", \"return_token_strs\": true}",
                     200);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "count")), 3);
    ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(j, "tokens"), 0)), 1);
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(j, "token_strs"), 1)), "a");
    json_decref(j);
    /* llama-server's shape: no BOS by default, pieces on request */
    j = call(s, "POST", "/tokenize", "{\"content\": \"ab\", \"with_pieces\": true}", 200);
    json_t *t0 = json_array_get(json_object_get(j, "tokens"), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(t0, "id")), 9);
    ck_assert_str_eq(json_string_value(json_object_get(t0, "piece")), "a");
    json_decref(j);
    j = call(s, "POST", "/detokenize", "{\"tokens\": [1, 5, 6]}", 200);
    ck_assert_str_eq(json_string_value(json_object_get(j, "prompt")), "<s>the cat"); /* vLLM */
    ck_assert_str_eq(json_string_value(json_object_get(j, "content")), "the cat"); /* llama */
    json_decref(j);
    assert_error(call(s, "POST", "/detokenize", "{\"tokens\": [1, 99]}", 400), 400, "tokens",
                 NULL);
    assert_error(call(s, "POST", "/detokenize", "{\"tokens\": \"1\"}", 400), 400, "tokens", NULL);
    assert_error(call(s, "POST", "/tokenize", "{\"messages\": []}", 400), 400, "messages", NULL);
    assert_error(call(s, "POST", "/tokenize", "{}", 400), 400, "prompt", NULL);
    gguf_serve_free(s);
    /* a vocabulary without a tokenizer: text gets 501, ids work */
    s = make(NULL, 0, false);
    assert_error(call(s, "POST", "/tokenize", "{\"prompt\": \"ab\"}", 501), 501, "prompt", "gpt2");
    refuse(s, "{\"prompt\": \"ab\"}", 501, "prompt", "send token ids");
    j = post(s, "{\"prompt\": [1, 9], \"max_tokens\": 1}", 200);
    json_decref(j);
    gguf_serve_free(s);
}
END_TEST

/* The data lines of an event stream, parsed; "[DONE]" as NULL at the end. */
static int sse_events(const char *body, json_t **ev, int max)
{
    int n = 0;
    for (const char *p = body; *p && n < max;) {
        ck_assert(strncmp(p, "data: ", 6) == 0);
        const char *end = strstr(p, "\n\n");
        ck_assert_ptr_nonnull(end);
        if (strncmp(p + 6, "[DONE]", 6) == 0) {
            ev[n++] = NULL;
            ck_assert_str_eq(end, "\n\n"); /* the last event */
            break;
        }
        ev[n] = json_loadb(p + 6, (size_t)(end - p - 6), 0, NULL);
        ck_assert_ptr_nonnull(ev[n]);
        n++;
        p = end + 2;
    }
    return n;
}

/* stream: true answers as vLLM streams: one chunk per generated token, the
 * finish reason and system_fingerprint on the last, then [DONE]; the texts
 * join to the whole answer's text. */
START_TEST(stream_chunks)
{
    gguf_serve *s = make(NULL, 0, true);
    json_t *whole = post(s, "{\"prompt\": [1, 9], \"max_tokens\": 3, \"logprobs\": 1}", 200);
    json_t *wc = json_array_get(json_object_get(whole, "choices"), 0);
    gguf_serve_response r;
    const char *body = "{\"prompt\": [1, 9], \"max_tokens\": 3, \"logprobs\": 1, \"stream\": true}";
    json_t *j = call2(s, "POST", "/v1/completions", NULL, body, strlen(body), &r);
    ck_assert_ptr_null(j);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.content_type, "text/event-stream");
    json_t *ev[8];
    int n = sse_events(r.body, ev, 8);
    ck_assert_int_eq(n, 4); /* 3 tokens, [DONE] */
    ck_assert_ptr_null(ev[3]);
    char text[256] = "";
    for (int i = 0; i < 3; i++) {
        ck_assert_str_eq(json_string_value(json_object_get(ev[i], "object")), "text_completion");
        json_t *c = json_array_get(json_object_get(ev[i], "choices"), 0);
        strncat(text, json_string_value(json_object_get(c, "text")), sizeof text - strlen(text) - 1);
        json_t *lp = json_object_get(c, "logprobs");
        ck_assert_int_eq(json_array_size(json_object_get(lp, "tokens")), 1);
        /* the same token and log-probability as the whole answer's position i */
        ck_assert(json_equal(json_array_get(json_object_get(lp, "token_logprobs"), 0),
                             json_array_get(json_object_get(json_object_get(wc, "logprobs"),
                                                            "token_logprobs"), (size_t)i)));
        ck_assert(json_is_null(json_object_get(c, "prompt_token_ids")));
        ck_assert(json_is_null(json_object_get(c, "token_ids")));
        ck_assert(json_is_null(json_object_get(c, "stop_reason")));
        ck_assert_ptr_null(json_object_get(ev[i], "usage"));
        if (i < 2) {
            ck_assert(json_is_null(json_object_get(c, "finish_reason")));
            ck_assert_ptr_null(json_object_get(ev[i], "system_fingerprint"));
        } else {
            ck_assert_str_eq(json_string_value(json_object_get(c, "finish_reason")), "length");
            ck_assert(json_is_string(json_object_get(ev[i], "system_fingerprint")));
        }
        json_decref(ev[i]);
    }
    ck_assert_str_eq(text, json_string_value(json_object_get(wc, "text")));
    json_decref(whole);
    gguf_serve_response_clear(&r);
    /* echo with max_tokens 0: one chunk of the prompt; include_usage: a last chunk of usage */
    body = "{\"prompt\": [1, 9, 10], \"max_tokens\": 0, \"echo\": true, \"logprobs\": 0, "
           "\"stream\": true, \"stream_options\": {\"include_usage\": true}}";
    call2(s, "POST", "/v1/completions", NULL, body, strlen(body), &r);
    n = sse_events(r.body, ev, 8);
    ck_assert_int_eq(n, 3);
    json_t *c = json_array_get(json_object_get(ev[0], "choices"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(c, "text")), "<s>ab");
    ck_assert_int_eq(json_array_size(json_object_get(c, "prompt_token_ids")), 3);
    ck_assert_ptr_null(json_object_get(ev[0], "system_fingerprint"));
    ck_assert_int_eq(json_array_size(json_object_get(ev[1], "choices")), 0);
    json_t *u = json_object_get(ev[1], "usage");
    ck_assert_int_eq(json_integer_value(json_object_get(u, "prompt_tokens")), 3);
    ck_assert_int_eq(json_integer_value(json_object_get(u, "completion_tokens")), 1);
    ck_assert(json_is_string(json_object_get(ev[1], "system_fingerprint")));
    json_decref(ev[0]);
    json_decref(ev[1]);
    gguf_serve_response_clear(&r);
    refuse(s, "{\"prompt\": [1], \"stream_options\": {\"include_usage\": true}}", 400,
           "stream_options", "stream");
    gguf_serve_free(s);
}
END_TEST

/* The fields vLLM 0.32 always writes, null or not, and its other endpoints. */
START_TEST(vllm_fields)
{
    gguf_serve *s = make(NULL, 0, true);
    json_t *j = post(s, "{\"prompt\": [1, 9], \"max_tokens\": 1}", 200);
    const char *const nulls[] = {"service_tier", "kv_transfer_params", "ec_transfer_params",
                                 "metrics"};
    for (size_t i = 0; i < sizeof nulls / sizeof nulls[0]; i++)
        ck_assert(json_is_null(json_object_get(j, nulls[i])));
    ck_assert(json_is_string(json_object_get(j, "system_fingerprint")));
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    const char *const cnulls[] = {"logprobs", "stop_reason", "token_ids", "prompt_logprobs",
                                  "prompt_token_ids", "routed_experts"};
    for (size_t i = 0; i < sizeof cnulls / sizeof cnulls[0]; i++)
        ck_assert(json_is_null(json_object_get(c, cnulls[i])));
    json_t *u = json_object_get(j, "usage");
    ck_assert(json_is_null(json_object_get(u, "prompt_tokens_details")));
    ck_assert(json_is_null(json_object_get(u, "completion_tokens_details")));
    json_decref(j);
    /* decoded_token is the text even when tokens are "token_id:N" */
    j = post(s, "{\"prompt\": [1, 5, 3, 4], \"max_tokens\": 1, \"prompt_logprobs\": 0, "
                "\"return_tokens_as_token_ids\": true, \"logprobs\": 0}", 200);
    c = json_array_get(json_object_get(j, "choices"), 0);
    json_t *plp = json_object_get(c, "prompt_logprobs");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(
                         json_array_get(plp, 1), "5"), "decoded_token")), "the");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(
                         json_array_get(plp, 2), "3"), "decoded_token")), "");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(
                         json_array_get(plp, 3), "4"), "decoded_token")), "\xC3\xA9");
    ck_assert(strncmp(json_string_value(json_array_get(json_object_get(
                          json_object_get(c, "logprobs"), "tokens"), 0)), "token_id:", 9) == 0);
    json_decref(j);
    j = call(s, "GET", "/version", NULL, 200);
    ck_assert(json_is_string(json_object_get(j, "version")));
    json_decref(j);
    j = call(s, "GET", "/v1/models", NULL, 200);
    json_t *perm = json_array_get(json_object_get(json_array_get(json_object_get(j, "data"), 0),
                                                  "permission"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(perm, "object")), "model_permission");
    ck_assert(json_is_true(json_object_get(perm, "allow_logprobs")));
    ck_assert(json_is_null(json_object_get(perm, "group")));
    json_decref(j);
    /* return_token_strs: the vocabulary's strings; /detokenize's prompt: BOS as its text */
    j = call(s, "POST", "/tokenize", "{\"prompt\": \"a\", \"return_token_strs\": true}", 200);
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(j, "token_strs"), 0)),
                     "<s>");
    json_decref(j);
    j = call(s, "POST", "/detokenize", "{\"tokens\": [1, 5, 3]}", 200);
    ck_assert_str_eq(json_string_value(json_object_get(j, "prompt")), "<s>the\xEF\xBF\xBD");
    ck_assert_str_eq(json_string_value(json_object_get(j, "content")), "the\xEF\xBF\xBD");
    json_decref(j);
    gguf_serve_free(s);
}
END_TEST

/* vLLM's texts: a token that ends inside a character is "" and the one that
 * completes it carries it; the generated text holds back an unfinished
 * character (for good at the end), and a run of byte tokens that is not
 * UTF-8 is one U+FFFD per byte, the ASCII among them too (HF's ByteFallback). */
START_TEST(vllm_texts)
{
    gguf_serve *s = make(NULL, 0, true);
    serve_buf b = {0};
    const int32_t ctx[] = {5, 3};
    serve_vllm_token(s, 3, ctx, 1, &b);
    ck_assert_str_eq(b.p, "");
    serve_vllm_token(s, 4, ctx, 2, &b);
    ck_assert_str_eq(b.p, "\xC3\xA9");
    serve_vllm_token(s, 6, ctx, 2, &b);
    ck_assert_str_eq(b.p, "cat"); /* alone: HF strips the leading space */
    serve_buf_free(&b);
    int64_t emit[4];
    const int32_t g1[] = {5, 3, 4, 6};
    ck_assert_int_eq(serve_vllm_gen_text(s, g1, 4, NULL, 0, 0, &b, emit), 0);
    ck_assert_str_eq(b.p, " the\xC3\xA9 cat");
    ck_assert(emit[0] == 4 && emit[1] == 4 && emit[2] == 6 && emit[3] == 10);
    const int32_t g2[] = {6, 3};
    serve_vllm_gen_text(s, g2, 2, NULL, 0, 0, &b, emit);
    ck_assert_str_eq(b.p, " cat"); /* the lone 0xC3 never written */
    const int32_t g3[] = {3, 9, 6}; /* 0xC3 'a'(a text token) ' cat' */
    serve_vllm_gen_text(s, g3, 3, NULL, 0, 0, &b, emit);
    ck_assert_str_eq(b.p, "\xEF\xBF\xBD" "a cat");
    ck_assert(emit[0] == 0 && emit[1] == 4);
    const int32_t g4[] = {2, 9}; /* EOS skipped */
    serve_vllm_gen_text(s, g4, 2, NULL, 0, 0, &b, NULL);
    ck_assert_str_eq(b.p, "a");
    /* a stop string the last token completed cuts the text, also what was
     * taken before; a stream holds back the stop's length less one */
    const int32_t g5[] = {9, 10, 11}; /* "abc", stop "bc" */
    serve_vllm_gen_text(s, g5, 3, "bc", 2, 1, &b, emit);
    ck_assert_str_eq(b.p, "a");
    ck_assert(emit[0] == 0 && emit[1] == 1 && emit[2] == 1);
    serve_buf_free(&b);
    gguf_serve_free(s);
}
END_TEST

START_TEST(forward_failure)
{
    gguf_serve *s = make(NULL, 0, true);
    F.fail = true;
    assert_error(post(s, "{\"prompt\": [1, 9]}", 500), 500, NULL, "weight type 99");
    F.fail = false;
    json_decref(post(s, "{\"prompt\": [1, 9]}", 200));
    gguf_serve_free(s);
}
END_TEST

/* ---- the queue ---- */

typedef struct job {
    gguf_serve *s;
    int status;
} job;

static void *run_job(void *arg)
{
    job *jb = arg;
    const char *body = "{\"prompt\": [1, 9], \"max_tokens\": 3}";
    gguf_serve_request q = {"POST", "/v1/completions", NULL, body, strlen(body), false};
    gguf_serve_response r;
    gguf_error err;
    if (gguf_serve_handle(jb->s, &q, &r, &err) == 0)
        jb->status = r.status;
    gguf_serve_response_clear(&r);
    return NULL;
}

static void wait_for(bool (*cond)(gguf_serve *), gguf_serve *s)
{
    for (int i = 0; i < 60000 && !cond(s); i++) /* a minute: a loaded machine */
        usleep(1000);
    ck_assert_msg(cond(s), "timed out");
}

static bool one_in_eval(gguf_serve *s)
{
    pthread_mutex_lock(&F.mu);
    const bool b = F.in_eval == 1;
    pthread_mutex_unlock(&F.mu);
    return b;
}

static bool one_waiting(gguf_serve *s)
{
    gguf_serve_stats st;
    gguf_serve_get_stats(s, &st);
    return st.max_waiting >= 1;
}

static void open_gate(void)
{
    pthread_mutex_lock(&F.mu);
    F.gate_closed = false;
    pthread_cond_broadcast(&F.cv);
    pthread_mutex_unlock(&F.mu);
}

START_TEST(queue_full_then_drains)
{
    gguf_serve *s = make(NULL, 1, true);
    F.gate_closed = true;
    job a = {s, 0}, b = {s, 0};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, run_job, &a);
    wait_for(one_in_eval, s);   /* a runs the model and blocks */
    pthread_create(&tb, NULL, run_job, &b);
    wait_for(one_waiting, s);   /* b waits: the queue (1) is full */
    assert_error(post(s, "{\"prompt\": [1, 9]}", 503), 503, NULL, "queue is full");
    /* requests that do not need the model are not queued */
    json_decref(call(s, "GET", "/health", NULL, 200));
    json_decref(call(s, "POST", "/tokenize", "{\"prompt\": \"a\"}", 200));
    open_gate();
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    ck_assert_int_eq(a.status, 200);
    ck_assert_int_eq(b.status, 200);
    gguf_serve_stats st;
    gguf_serve_get_stats(s, &st);
    ck_assert_uint_eq(st.queue_full, 1);
    ck_assert_uint_eq(st.model_requests, 2);
    gguf_serve_free(s);
}
END_TEST

START_TEST(cancel_stops_running_and_waiting)
{
    gguf_serve *s = make(NULL, 4, true);
    F.gate_closed = true;
    job a = {s, 0}, b = {s, 0};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, run_job, &a);
    wait_for(one_in_eval, s);
    pthread_create(&tb, NULL, run_job, &b);
    wait_for(one_waiting, s);
    gguf_serve_cancel(s);
    pthread_join(tb, NULL);     /* the waiting one leaves at once */
    ck_assert_int_eq(b.status, 503);
    open_gate();                /* the running one stops at its next forward call */
    pthread_join(ta, NULL);
    ck_assert_int_eq(a.status, 503);
    assert_error(post(s, "{\"prompt\": [1, 9]}", 503), 503, NULL, "shutting down");
    gguf_serve_free(s);
}
END_TEST

START_TEST(create_checks)
{
    gguf_serve *s = NULL;
    gguf_error err;
    gguf_serve_model m = {0};
    gguf_serve_opts o = {0};
    ck_assert_int_eq(gguf_serve_create(&s, &m, &o, &err), GGUF_E_INVALID);
    o.model_name = "x";
    ck_assert_int_eq(gguf_serve_create(&s, &m, &o, &err), GGUF_E_INVALID);
    m.reset = f_reset;
    m.eval = f_eval;
    m.token_text = f_text;
    m.n_vocab = FV;
    m.bos = FV;
    ck_assert_int_eq(gguf_serve_create(&s, &m, &o, &err), GGUF_E_INVALID);
    m.bos = -1;
    m.eos = -1;
    o.max_logprobs = 5000;
    ck_assert_int_eq(gguf_serve_create(&s, &m, &o, &err), GGUF_E_INVALID);
    o.max_logprobs = 0;
    ck_assert_int_eq(gguf_serve_create(&s, &m, &o, &err), 0);
    gguf_serve_request q = {0};
    gguf_serve_response r;
    ck_assert_int_eq(gguf_serve_handle(s, NULL, &r, &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_serve_handle(s, &q, &r, &err), 0); /* no method, no path: 404 */
    ck_assert_int_eq(r.status, 404);
    gguf_serve_response_clear(&r);
    gguf_serve_free(s);
    gguf_serve_free(NULL);
    gguf_serve_response_clear(NULL);
}
END_TEST

/* A text prompt the tokenizer finds nothing in: 400 as an empty id list,
 * before the queue and the model (decoding would start from a logits row
 * that no eval wrote). */
START_TEST(text_without_tokens)
{
    gguf_serve *s = make(NULL, 0, true);
    refuse(s, "{\"prompt\": \"\\t\", \"add_special_tokens\": false}", 400, "prompt", "no tokens");
    refuse(s, "{\"prompt\": \"\\t\\t\", \"add_special_tokens\": false, \"max_tokens\": 0, "
              "\"echo\": true}", 400, "prompt", "no tokens");
    refuse(s, "{\"prompt\": [\"ab\", \"\\t\"], \"add_special_tokens\": false}", 400, "prompt",
           "no tokens");
    assert_error(call(s, "POST", "/completion", "{\"prompt\": \"\\t\", \"add_special\": false}",
                      400), 400, "prompt", "no tokens");
    assert_error(call(s, "POST", "/completion", "{\"prompt\": [\"\\t\", \"\\t\"], "
                                                "\"add_special\": false}", 400),
                 400, "prompt", "no tokens");
    /* a mixed llama-server prompt holds the ids beside the text */
    json_decref(call(s, "POST", "/completion", "{\"prompt\": [\"\\t\", 5], \"add_special\": "
                                               "false, \"n_predict\": 1}", 200));
    gguf_serve_stats st;
    gguf_serve_get_stats(s, &st);
    ck_assert_uint_eq(st.model_requests, 1);
    ck_assert_int_eq(F.resets, 1);
    /* BOS alone is a prompt */
    json_t *j = post(s, "{\"prompt\": \"\\t\", \"max_tokens\": 1}", 200);
    json_t *u = json_object_get(j, "usage");
    ck_assert_int_eq(json_integer_value(json_object_get(u, "prompt_tokens")), 1);
    json_decref(j);
    /* /tokenize may answer no tokens: nothing is decoded */
    j = call(s, "POST", "/tokenize", "{\"prompt\": \"\\t\", \"add_special_tokens\": false}", 200);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "count")), 0);
    json_decref(j);
    gguf_serve_free(s);
}
END_TEST

/* What the transport knows of the client: ambiguous framing comes first (a
 * 400 even without the API key), and a client gone away stops its request. */
START_TEST(framing_first)
{
    gguf_serve *s = make("sekrit", 0, true);
    const char *body = "{\"prompt\": [1, 9], \"max_tokens\": 1}";
    gguf_serve_request q = {"POST", "/v1/completions", NULL, body, strlen(body), false};
    gguf_serve_client cl = {0};
    cl.bad_framing = "Content-Length headers that differ ('5' and '36')";
    gguf_serve_response r;
    gguf_error err;
    ck_assert_int_eq(gguf_serve_handle_client(s, &q, &cl, &r, &err), 0);
    ck_assert_int_eq(r.status, 400);
    ck_assert(!r.www_authenticate);
    assert_error(json_loadb(r.body, r.body_len, 0, NULL), 400, NULL, "'5' and '36'");
    gguf_serve_response_clear(&r);
    ck_assert_int_eq(F.resets, 0);
    /* without it: the API key as before; a NULL client is gguf_serve_handle */
    ck_assert_int_eq(gguf_serve_handle_client(s, &q, NULL, &r, &err), 0);
    ck_assert_int_eq(r.status, 401);
    gguf_serve_response_clear(&r);
    gguf_serve_free(s);
}
END_TEST

typedef struct liveness {
    int calls;
    int alive_for;          /* calls answered true, then false */
} liveness;

static bool alive_for_a_while(void *user)
{
    liveness *l = user;
    return l->calls++ < l->alive_for;
}

START_TEST(client_gone_stops_the_request)
{
    gguf_serve *s = make(NULL, 0, true);
    const char *body = "{\"prompt\": [1, 9, 10], \"max_tokens\": 50, \"ignore_eos\": true}";
    gguf_serve_request q = {"POST", "/v1/completions", NULL, body, strlen(body), false};
    /* gone after the reset, the prompt and 4 generated tokens: asked before
     * each model call, so no more than 1 + 4 evals happen */
    liveness l = {0, 6};
    gguf_serve_client cl = {NULL, alive_for_a_while, &l};
    gguf_serve_response r;
    gguf_error err;
    ck_assert_int_eq(gguf_serve_handle_client(s, &q, &cl, &r, &err), 0);
    ck_assert_int_eq(r.status, 499);
    json_t *j = json_loadb(r.body, r.body_len, 0, NULL);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "error"), "type")),
                     "ClientClosedRequestError");
    assert_error(j, 499, NULL, "client closed");
    gguf_serve_response_clear(&r);
    ck_assert_int_eq(l.calls, 7);
    gguf_serve_stats st;
    gguf_serve_get_stats(s, &st);
    ck_assert_uint_eq(st.client_gone, 1);
    ck_assert_uint_eq(st.tokens_evaluated, 3 + 4);
    /* gone before its turn: the model is not touched */
    l = (liveness){0, 0};
    ck_assert_int_eq(gguf_serve_handle_client(s, &q, &cl, &r, &err), 0);
    ck_assert_int_eq(r.status, 499);
    gguf_serve_response_clear(&r);
    ck_assert_int_eq(F.resets, 1);
    gguf_serve_get_stats(s, &st);
    ck_assert_uint_eq(st.client_gone, 2);
    ck_assert_uint_eq(st.tokens_evaluated, 7);
    /* the server goes on; a client that stays gets its whole answer, and
     * requests that run no model never ask */
    l = (liveness){0, 1000};
    ck_assert_int_eq(gguf_serve_handle_client(s, &q, &cl, &r, &err), 0);
    ck_assert_int_eq(r.status, 200);
    gguf_serve_response_clear(&r);
    ck_assert_int_eq(l.calls, 1 + 1 + 49);
    l = (liveness){0, 0};
    gguf_serve_request h = {"GET", "/health", NULL, NULL, 0, false};
    ck_assert_int_eq(gguf_serve_handle_client(s, &h, &cl, &r, &err), 0);
    ck_assert_int_eq(r.status, 200);
    gguf_serve_response_clear(&r);
    ck_assert_int_eq(l.calls, 0);
    gguf_serve_free(s);
}
END_TEST

static Suite *suite(void)
{
    Suite *su = suite_create("serve");
    TCase *tc = tcase_create("serve");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, health_models_routes);
    tcase_add_test(tc, api_key);
    tcase_add_test(tc, body_refusals);
    tcase_add_test(tc, field_refusals);
    tcase_add_test(tc, echo_logprobs_values);
    tcase_add_test(tc, text_and_ties);
    tcase_add_test(tc, stops_and_batches);
    tcase_add_test(tc, llama_completion);
    tcase_add_test(tc, tokenize_endpoints);
    tcase_add_test(tc, stream_chunks);
    tcase_add_test(tc, vllm_fields);
    tcase_add_test(tc, vllm_texts);
    tcase_add_test(tc, forward_failure);
    tcase_add_test(tc, queue_full_then_drains);
    tcase_add_test(tc, cancel_stops_running_and_waiting);
    tcase_add_test(tc, create_checks);
    tcase_add_test(tc, text_without_tokens);
    tcase_add_test(tc, framing_first);
    tcase_add_test(tc, client_gone_stops_the_request);
    suite_add_tcase(su, tc);
    return su;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
