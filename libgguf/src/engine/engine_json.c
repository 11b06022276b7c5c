/* Engine module: JSON access with field paths in every error, and the
 * growing reply structure shared by the parsers. */
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "util/error_lib.h"

/* ---- paths ---- */

size_t eng_path_key(eng_path *p, const char *key)
{
    const size_t old = p->len;
    int n = snprintf(p->buf + p->len, sizeof p->buf - p->len, "%s%s", p->len ? "." : "", key);
    if (n > 0)
        p->len += (size_t)n < sizeof p->buf - p->len ? (size_t)n : sizeof p->buf - 1 - p->len;
    return old;
}

size_t eng_path_index(eng_path *p, size_t i)
{
    const size_t old = p->len;
    int n = snprintf(p->buf + p->len, sizeof p->buf - p->len, "[%zu]", i);
    if (n > 0)
        p->len += (size_t)n < sizeof p->buf - p->len ? (size_t)n : sizeof p->buf - 1 - p->len;
    return old;
}

void eng_path_pop(eng_path *p, size_t len)
{
    p->len = len;
    p->buf[len] = 0;
}

int eng_bad(gguf_error *err, const eng_path *p, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return gguf_fail(err, GGUF_E_BAD_VALUE, GGUF_NO_OFFSET, "reply: %s: %s",
                     p->len ? p->buf : "(root)", what);
}

const char *eng_json_kind(const json_t *v)
{
    switch (v ? json_typeof(v) : JSON_NULL) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER:
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* Count the values of a JSON text (roughly: every value but the root follows a
 * '[', ',' or ':' outside strings) and rewrite the escape \u0000 inside object
 * keys to \uFFFF in place. jansson keeps keys as C strings and refuses a NUL in
 * one, while engines send "\u0000" as the text of the NUL-byte token (vLLM's
 * top_logprobs of glm4moe). U+FFFF is a noncharacter no tokenizer writes: a
 * text holding it is read as unknown (eng_pos_add_alt), never as a token. */
static uint64_t scan_values(char *s, size_t n)
{
    uint64_t values = 1;
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        if (c == '[' || c == ',' || c == ':') {
            values++;
        } else if (c == '"') {
            const size_t start = i;
            bool nul = false;
            for (i++; i < n && s[i] != '"'; i++) {
                if (s[i] != '\\')
                    continue;
                if (i + 5 < n && memcmp(s + i + 1, "u0000", 5) == 0)
                    nul = true;
                i++;
            }
            if (!nul)
                continue;
            size_t j = i + 1;
            while (j < n && (s[j] == ' ' || s[j] == '\t' || s[j] == '\n' || s[j] == '\r'))
                j++;
            if (j < n && s[j] == ':') /* a key */
                for (size_t k = start + 1; k + 5 < i; k++) {
                    if (s[k] != '\\')
                        continue;
                    if (memcmp(s + k + 1, "u0000", 5) == 0)
                        memcpy(s + k + 1, "uFFFF", 5);
                    k++;
                }
        }
    }
    return values;
}

int eng_load(json_t **out, const char *body, size_t len, gguf_error *err)
{
    *out = NULL;
    if (len > GGUF_ENGINE_MAX_BODY)
        return gguf_fail(err, GGUF_E_LIMIT, GGUF_NO_OFFSET,
                         "reply: %zu bytes, over the limit of %u", len, GGUF_ENGINE_MAX_BODY);
    char *copy = malloc(len + 1);
    if (!copy)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory for a reply");
    if (len)
        memcpy(copy, body, len);
    copy[len] = 0;
    /* parsed values cost jansson ~50 bytes each: bound them, not only the bytes */
    const uint64_t values = scan_values(copy, len);
    if (values > GGUF_ENGINE_MAX_VALUES) {
        free(copy);
        return gguf_fail(err, GGUF_E_LIMIT, GGUF_NO_OFFSET,
                         "reply: about %llu JSON values, over the limit of %u",
                         (unsigned long long)values, GGUF_ENGINE_MAX_VALUES);
    }
    json_error_t je;
    json_t *v = json_loadb(copy, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    free(copy);
    if (!v) {
        char start[48];
        size_t n = len < sizeof start - 1 ? len : sizeof start - 1;
        for (size_t i = 0; i < n; i++)
            start[i] = (body[i] >= 0x20 && body[i] < 0x7f) ? body[i] : '.';
        start[n] = 0;
        return gguf_fail(err, GGUF_E_BAD_VALUE, je.position >= 0 ? (uint64_t)je.position
                                                                  : GGUF_NO_OFFSET,
                         "reply: not JSON: %s (line %d, column %d; body starts \"%s\")", je.text,
                         je.line, je.column, start);
    }
    *out = v;
    return 0;
}

static int get_child(json_t **out, json_t *obj, const char *key, eng_path *p, bool opt,
                     json_type want, const char *want_name, gguf_error *err)
{
    json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (!v || json_is_null(v)) {
        if (opt)
            return 0;
        const size_t old = eng_path_key(p, key);
        int rc = eng_bad(err, p, v ? "is null, expected %s" : "missing (expected %s)", want_name);
        eng_path_pop(p, old);
        return rc;
    }
    if (json_typeof(v) != want) {
        const size_t old = eng_path_key(p, key);
        int rc = eng_bad(err, p, "expected %s, got %s", want_name, eng_json_kind(v));
        eng_path_pop(p, old);
        return rc;
    }
    *out = v;
    return 0;
}

int eng_get_array(json_t **out, json_t *obj, const char *key, eng_path *p, bool opt,
                  gguf_error *err)
{
    return get_child(out, obj, key, p, opt, JSON_ARRAY, "an array", err);
}

int eng_get_object(json_t **out, json_t *obj, const char *key, eng_path *p, bool opt,
                   gguf_error *err)
{
    return get_child(out, obj, key, p, opt, JSON_OBJECT, "an object", err);
}

int eng_get_string(const char **out, json_t *obj, const char *key, eng_path *p, bool opt,
                   gguf_error *err)
{
    json_t *v;
    int rc = get_child(&v, obj, key, p, opt, JSON_STRING, "a string", err);
    *out = v ? json_string_value(v) : NULL;
    return rc;
}

int eng_number(double *out, const json_t *v, const eng_path *p, bool null_ok, gguf_error *err)
{
    if (json_is_integer(v)) {
        *out = (double)json_integer_value(v);
        return 0;
    }
    if (json_is_real(v)) {
        *out = json_real_value(v);
        return 0;
    }
    if (null_ok && (!v || json_is_null(v))) {
        *out = NAN;
        return 0;
    }
    return eng_bad(err, p, "expected a number%s, got %s", null_ok ? " or null" : "",
                   eng_json_kind(v));
}

int eng_token_id(int32_t *out, const json_t *v, const eng_path *p, gguf_error *err)
{
    if (!json_is_integer(v))
        return eng_bad(err, p, "expected a token id, got %s", eng_json_kind(v));
    json_int_t id = json_integer_value(v);
    if (id < 0 || id > INT32_MAX)
        return eng_bad(err, p, "token id %lld is out of range", (long long)id);
    *out = (int32_t)id;
    return 0;
}

int eng_id_array(int32_t **out, int64_t *n, const json_t *arr, eng_path *p, gguf_error *err)
{
    *out = NULL;
    *n = 0;
    const size_t count = json_array_size(arr);
    if (count > GGUF_ENGINE_MAX_POSITIONS)
        return gguf_fail(err, GGUF_E_LIMIT, GGUF_NO_OFFSET, "reply: %s: %zu token ids, over %d",
                         p->buf, count, GGUF_ENGINE_MAX_POSITIONS);
    int32_t *ids = malloc((count ? count : 1) * sizeof *ids);
    if (!ids)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory for token ids");
    for (size_t i = 0; i < count; i++) {
        const size_t old = eng_path_index(p, i);
        int rc = eng_token_id(&ids[i], json_array_get(arr, i), p, err);
        eng_path_pop(p, old);
        if (rc) {
            free(ids);
            return rc;
        }
    }
    *out = ids;
    *n = (int64_t)count;
    return 0;
}

int32_t eng_token_id_text(const char *s)
{
    static const char prefix[] = "token_id:";
    if (!s || strncmp(s, prefix, sizeof prefix - 1) != 0)
        return -1;
    const char *d = s + sizeof prefix - 1;
    if (*d < '0' || *d > '9')
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(d, &end, 10);
    if (errno || *end || v > INT32_MAX)
        return -1;
    return (int32_t)v;
}

double eng_logprob_value(double v)
{
    /* vLLM clamps -inf to -9999.0, llama-server writes -FLT_MAX for log(0) */
    if (v <= -9999.0)
        return -INFINITY;
    return v;
}

/* ---- the reply ---- */

typedef struct reply_box {
    gguf_engine_reply r;
    int64_t cap;
} reply_box;

gguf_engine_reply *eng_reply_new(void)
{
    reply_box *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->r.completion_tokens = -1;
    return &b->r;
}

static void pos_init(gguf_engine_pos *p)
{
    memset(p, 0, sizeof *p);
    p->id = -1;
    p->logprob = NAN;
}

static int grow(gguf_engine_reply *r, int64_t extra, gguf_error *err)
{
    reply_box *b = (reply_box *)r;
    if (r->n_pos + extra > GGUF_ENGINE_MAX_POSITIONS)
        return gguf_fail(err, GGUF_E_LIMIT, GGUF_NO_OFFSET,
                         "reply: more than %d token positions", GGUF_ENGINE_MAX_POSITIONS);
    if (r->n_pos + extra <= b->cap)
        return 0;
    int64_t cap = b->cap ? b->cap : 16;
    while (cap < r->n_pos + extra)
        cap *= 2;
    gguf_engine_pos *p = realloc(r->pos, (size_t)cap * sizeof *p);
    if (!p)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory for %lld positions",
                         (long long)cap);
    r->pos = p;
    b->cap = cap;
    return 0;
}

gguf_engine_pos *eng_reply_push(gguf_engine_reply *r, gguf_error *err)
{
    if (grow(r, 1, err))
        return NULL;
    gguf_engine_pos *p = &r->pos[r->n_pos++];
    pos_init(p);
    return p;
}

int eng_reply_prepend(gguf_engine_reply *r, int64_t n, gguf_error *err)
{
    int rc = grow(r, n, err);
    if (rc)
        return rc;
    memmove(r->pos + n, r->pos, (size_t)r->n_pos * sizeof *r->pos);
    for (int64_t i = 0; i < n; i++)
        pos_init(&r->pos[i]);
    r->n_pos += n;
    return 0;
}

int eng_strdup(char **out, const char *s, gguf_error *err)
{
    *out = NULL;
    if (!s)
        return 0;
    *out = strdup(s);
    return *out ? 0 : gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory for a string");
}

int eng_set_token(int32_t *id, char **text, int32_t given_id, const char *s, uint32_t *found,
                  gguf_error *err)
{
    *id = given_id;
    if (given_id < 0) {
        int32_t t = eng_token_id_text(s);
        if (t >= 0) {
            *id = t;
            if (found)
                *found |= GGUF_REPLY_TOKEN_IDS;
            return 0; /* the text is the placeholder, not the token's text */
        }
    }
    free(*text);
    return eng_strdup(text, s, err);
}

int eng_pos_add_alt(gguf_engine_pos *pos, int32_t id, const char *text, double logprob,
                    gguf_error *err)
{
    if (pos->n_top >= GGUF_ENGINE_MAX_TOP)
        return gguf_fail(err, GGUF_E_LIMIT, GGUF_NO_OFFSET,
                         "reply: more than %d alternatives at one position", GGUF_ENGINE_MAX_TOP);
    /* capacity 4, then doubled whenever n_top reaches a power of two */
    if (pos->n_top == 0 || (pos->n_top >= 4 && (pos->n_top & (pos->n_top - 1)) == 0)) {
        int32_t cap = pos->n_top ? pos->n_top * 2 : 4;
        gguf_engine_alt *a = realloc(pos->top, (size_t)cap * sizeof *a);
        if (!a)
            return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory for alternatives");
        pos->top = a;
    }
    gguf_engine_alt *a = &pos->top[pos->n_top];
    a->text = NULL;
    /* a key that held a NUL (eng_load) names no token we could look up */
    if (text && strstr(text, "\xef\xbf\xbf"))
        text = NULL;
    int rc = eng_set_token(&a->id, &a->text, id, text, NULL, err);
    if (rc)
        return rc;
    a->logprob = eng_logprob_value(logprob);
    pos->n_top++;
    return 0;
}

void eng_pos_sort(gguf_engine_pos *pos)
{
    /* insertion sort: stable, and lists are short (<= GGUF_ENGINE_MAX_TOP) */
    for (int32_t i = 1; i < pos->n_top; i++) {
        gguf_engine_alt a = pos->top[i];
        int32_t j = i;
        while (j > 0 && pos->top[j - 1].logprob < a.logprob) {
            pos->top[j] = pos->top[j - 1];
            j--;
        }
        pos->top[j] = a;
    }
}

void gguf_engine_reply_free(gguf_engine_reply *r)
{
    if (!r)
        return;
    for (int64_t i = 0; i < r->n_pos; i++) {
        gguf_engine_pos *p = &r->pos[i];
        for (int32_t k = 0; k < p->n_top; k++)
            free(p->top[k].text);
        free(p->top);
        free(p->text);
    }
    free(r->pos);
    free(r->prompt_ids);
    free(r->gen_ids);
    free(r->text);
    free(r->reasoning);
    free(r->finish_reason);
    free(r->model);
    free((reply_box *)r);
}
