/* serve: request bodies -> validated requests. Every refusal a client can get
 * for what it sent is decided here, with the field named in the message and
 * in the error object's "param".
 *
 * Field rules follow vLLM's CompletionRequest (OpenAI's legacy completions
 * plus vLLM's extensions) and llama-server's /completion; fields neither
 * this file nor the dialect knows are ignored, as both servers ignore them.
 * Sampling is greedy only: every setting that would change which token is
 * chosen must be absent, null, or its neutral value, else 400. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/serve_internal.h"

int serve_refuse(serve_err *e, int status, const char *param, const char *fmt, ...)
{
    e->status = status;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- the body and its fields ---- */

/* The body as a JSON object, or a refusal that says where it broke. */
static json_t *load_object(const char *body, size_t len, serve_err *e)
{
    if (len == 0) {
        serve_refuse(e, 400, "", "the request body is empty: expected a JSON object");
        return NULL;
    }
    if (!serve_utf8_valid(body, len)) {
        size_t at = 0;
        const unsigned char *u = (const unsigned char *)body;
        while (at < len) {
            const size_t l = serve_utf8_seq(u + at, len - at);
            if (!l)
                break;
            at += l;
        }
        serve_refuse(e, 400, "", "the request body is not valid UTF-8 (byte 0x%02X at offset %zu)",
                     u[at], at);
        return NULL;
    }
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!root) {
        serve_refuse(e, 400, "", "malformed JSON at line %d, column %d (offset %d): %s", je.line,
                     je.column, je.position, je.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        serve_refuse(e, 400, "", "the request body must be a JSON object");
        return NULL;
    }
    return root;
}

/* The field, or NULL when absent or null (both mean "the default"). */
static json_t *field(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_null(v) ? NULL : v;
}

/* An integer field in [lo, hi]; a real with an integral value is accepted
 * (pydantic's int does the same), a boolean is not. 0 absent, 1 set, -1 refused. */
static int get_int(json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out,
                   serve_err *e)
{
    json_t *v = field(o, key);
    if (!v)
        return 0;
    const double d = json_is_real(v) ? json_real_value(v) : 0;
    if (json_is_integer(v)) {
        const json_int_t i = json_integer_value(v);
        if (i < lo || i > hi)
            return serve_refuse(e, 400, key, "`%s` is %lld, outside [%lld, %lld]", key,
                                (long long)i, (long long)lo, (long long)hi);
        *out = (int64_t)i;
        return 1;
    }
    if (json_is_real(v) && d == floor(d) && fabs(d) < 9e15) {
        if (d < (double)lo || d > (double)hi)
            return serve_refuse(e, 400, key, "`%s` is %.17g, outside [%lld, %lld]", key, d,
                                (long long)lo, (long long)hi);
        *out = (int64_t)d;
        return 1;
    }
    return serve_refuse(e, 400, key, "`%s` must be an integer", key);
}

static int get_num(json_t *o, const char *key, double *out, serve_err *e)
{
    json_t *v = field(o, key);
    if (!v)
        return 0;
    if (!json_is_number(v))
        return serve_refuse(e, 400, key, "`%s` must be a number", key);
    *out = json_number_value(v);
    return 1;
}

static int get_bool(json_t *o, const char *key, bool *out, serve_err *e)
{
    json_t *v = field(o, key);
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return serve_refuse(e, 400, key, "`%s` must be true or false", key);
    *out = json_is_true(v);
    return 1;
}

static int get_str(json_t *o, const char *key, const char **out, size_t *len, serve_err *e)
{
    json_t *v = field(o, key);
    if (!v)
        return 0;
    if (!json_is_string(v))
        return serve_refuse(e, 400, key, "`%s` must be a string", key);
    *out = json_string_value(v);
    *len = json_string_length(v);
    return 1;
}

/* ---- greedy only ---- */

/* A number field that must equal its neutral value (or be absent). */
static int neutral_num(json_t *o, const char *key, double neutral, serve_err *e)
{
    double v = neutral;
    const int rc = get_num(o, key, &v, e);
    if (rc < 0)
        return -1;
    if (rc && v != neutral)
        return serve_refuse(e, 400, key,
                            "`%s` is %g: this server decodes greedily (the reference's argmax); "
                            "leave it out or set %g", key, v, neutral);
    return 0;
}

/* `temperature` 0; `top_k` -1, 0 or 1; the rest at their neutral values. */
static int check_greedy(json_t *o, serve_api api, serve_err *e)
{
    static const struct { const char *key; double neutral; } both[] = {
        {"temperature", 0}, {"top_p", 1}, {"min_p", 0}, {"presence_penalty", 0},
        {"frequency_penalty", 0}, {"repetition_penalty", 1}, {"typical_p", 1},
    };
    static const struct { const char *key; double neutral; } llama[] = {
        {"repeat_penalty", 1}, {"mirostat", 0}, {"dynatemp_range", 0},
        {"dry_multiplier", 0}, {"xtc_probability", 0}, {"top_n_sigma", -1},
    };
    for (size_t i = 0; i < sizeof both / sizeof both[0]; i++)
        if (neutral_num(o, both[i].key, both[i].neutral, e))
            return -1;
    if (api == SERVE_API_LLAMA)
        for (size_t i = 0; i < sizeof llama / sizeof llama[0]; i++)
            if (neutral_num(o, llama[i].key, llama[i].neutral, e))
                return -1;
    int64_t v = 0;
    int rc = get_int(o, "top_k", INT64_MIN, INT64_MAX, &v, e);
    if (rc < 0)
        return -1;
    if (rc && v != -1 && v != 0 && v != 1)
        return serve_refuse(e, 400, "top_k", "`top_k` is %lld: this server decodes greedily; "
                            "leave it out or set -1, 0 or 1", (long long)v);
    const char *count = api == SERVE_API_LLAMA ? "n_cmpl" : "n";
    rc = get_int(o, count, INT64_MIN, INT64_MAX, &v, e);
    if (rc < 0)
        return -1;
    if (rc && v != 1)
        return serve_refuse(e, 400, count, "`%s` is %lld: one greedy completion per prompt only",
                            count, (long long)v);
    rc = get_int(o, "best_of", INT64_MIN, INT64_MAX, &v, e);
    if (rc < 0)
        return -1;
    if (rc && v != 1)
        return serve_refuse(e, 400, "best_of", "`best_of` is %lld: one greedy completion only",
                            (long long)v);
    rc = get_int(o, "min_tokens", INT64_MIN, INT64_MAX, &v, e);
    if (rc < 0)
        return -1;
    if (rc && v != 0)
        return serve_refuse(e, 400, "min_tokens", "`min_tokens` is not supported (it masks EOS, "
                            "which is not greedy decoding)");
    bool b = false;
    if (get_bool(o, "use_beam_search", &b, e) < 0)
        return -1;
    if (b)
        return serve_refuse(e, 400, "use_beam_search", "beam search is not supported: greedy only");
    b = false;
    if (api == SERVE_API_LLAMA && get_bool(o, "post_sampling_probs", &b, e) < 0)
        return -1;
    if (b)
        return serve_refuse(e, 400, "post_sampling_probs", "`post_sampling_probs` is not "
                            "supported: probabilities are the model's, before any sampler");
    /* Constraints and biases change the argmax: absent, null, or empty. */
    static const char *const empty[] = {
        "logit_bias", "allowed_token_ids", "bad_words", "response_format", "structured_outputs",
        "guided_json", "guided_regex", "guided_choice", "guided_grammar", "logits_processors",
        "grammar", "json_schema", "prompt_embeds", "logprob_token_ids", "suffix",
        "truncate_prompt_tokens",
    };
    for (size_t i = 0; i < sizeof empty / sizeof empty[0]; i++) {
        json_t *v2 = field(o, empty[i]);
        if (!v2)
            continue;
        if ((json_is_array(v2) && json_array_size(v2) == 0) ||
            (json_is_object(v2) && json_object_size(v2) == 0) ||
            (json_is_string(v2) && json_string_length(v2) == 0))
            continue;
        return serve_refuse(e, 400, empty[i], "`%s` is not supported by this server (greedy "
                            "decoding of the reference, no constraints or biases)", empty[i]);
    }
    return 0;
}

/* ---- prompts ---- */

static int add_prompt(serve_creq *q, serve_prompt p)
{
    serve_prompt *np = realloc(q->prompts, (size_t)(q->n_prompts + 1) * sizeof *np);
    if (!np) {
        free(p.ids);
        free(p.text);
        return GGUF_E_NOMEM;
    }
    q->prompts = np;
    q->prompts[q->n_prompts++] = p;
    return 0;
}

/* Append ids of text (tokenized, BOS when asked) to a prompt. */
static int tokenize_into(gguf_serve *s, const char *param, const char *text, size_t len,
                         bool bos, serve_prompt *p, serve_err *e)
{
    if (!s->m.tokenize)
        return serve_refuse(e, 501, param, "text prompts need a tokenizer, and this model has "
                            "none here: %s; send token ids instead",
                            s->m.tokenize_error ? s->m.tokenize_error : "unsupported vocabulary");
    int32_t *ids = NULL;
    int64_t n = 0;
    gguf_error ge = {0};
    const int rc = s->m.tokenize(s->m.user, text, len, bos, &ids, &n, &ge);
    if (rc == GGUF_E_NOMEM)
        return GGUF_E_NOMEM;
    if (rc)
        return serve_refuse(e, rc == GGUF_E_UNSUPPORTED ? 501 : 400, param,
                            "cannot tokenize the text: %s", ge.message);
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= s->m.n_vocab) {
            free(ids);
            return serve_refuse(e, 500, param, "the tokenizer returned id %d outside the "
                                "vocabulary", ids[i]);
        }
    if (n > s->max_tokens) {
        free(ids);
        return serve_refuse(e, 400, param, "the prompt is %lld tokens, over this server's limit "
                            "of %lld tokens per request", (long long)n, (long long)s->max_tokens);
    }
    int32_t *all = realloc(p->ids, (size_t)(p->n + n + 1) * sizeof *all);
    if (!all) {
        free(ids);
        return GGUF_E_NOMEM;
    }
    memcpy(all + p->n, ids, (size_t)n * sizeof *all);
    p->ids = all;
    p->n += n;
    free(ids);
    return 0;
}

static int check_id(gguf_serve *s, json_t *v, const char *param, int32_t *out, serve_err *e)
{
    if (!json_is_integer(v))
        return serve_refuse(e, 400, param, "`%s`: token ids must be integers", param);
    const json_int_t id = json_integer_value(v);
    if (id < 0 || id >= s->m.n_vocab)
        return serve_refuse(e, 400, param, "`%s`: token id %lld is outside the vocabulary "
                            "(0..%lld)", param, (long long)id, (long long)s->m.n_vocab - 1);
    *out = (int32_t)id;
    return 0;
}

/* An array of token ids (and, for llama-server, strings) as one prompt. */
static int token_prompt(gguf_serve *s, json_t *arr, bool mixed, bool add_special, serve_prompt *p,
                        serve_err *e)
{
    const size_t n = json_array_size(arr);
    if (n == 0)
        return serve_refuse(e, 400, "prompt", "`prompt`: a token list must not be empty");
    if (n > (size_t)s->max_tokens)
        return serve_refuse(e, 400, "prompt", "the prompt is %zu tokens, over this server's "
                            "limit of %lld tokens per request", n, (long long)s->max_tokens);
    p->ids = malloc((n + 1) * sizeof *p->ids);
    if (!p->ids)
        return GGUF_E_NOMEM;
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, i);
        if (mixed && json_is_string(v)) {
            /* llama-server: BOS when the first element is text */
            const bool bos = i == 0 && add_special && s->m.add_bos && s->m.bos >= 0;
            int rc = tokenize_into(s, "prompt", json_string_value(v), json_string_length(v), bos,
                                   p, e);
            if (rc)
                return rc;
            continue;
        }
        int32_t id = 0; /* set by check_id on success */
        if (check_id(s, v, "prompt", &id, e))
            return -1;
        int32_t *g = realloc(p->ids, (size_t)(p->n + 2) * sizeof *g);
        if (!g)
            return GGUF_E_NOMEM;
        p->ids = g;
        p->ids[p->n++] = id;
    }
    if (p->n == 0)
        return serve_refuse(e, 400, "prompt", "`prompt` holds no tokens");
    return 0;
}

static int text_prompt(gguf_serve *s, json_t *v, bool add_special, serve_prompt *p, serve_err *e)
{
    const size_t len = json_string_length(v);
    if (len == 0)
        return serve_refuse(e, 400, "prompt", "`prompt` must not be empty");
    p->text = malloc(len + 1);
    if (!p->text)
        return GGUF_E_NOMEM;
    memcpy(p->text, json_string_value(v), len + 1);
    p->text_len = len;
    const bool bos = add_special && s->m.add_bos && s->m.bos >= 0;
    const int rc = tokenize_into(s, "prompt", p->text, len, bos, p, e);
    if (rc)
        return rc;
    /* A tokenizer may find nothing to encode (WordPiece drops whitespace and
     * control characters); with no BOS either, there is no row to decode
     * from: refused as an empty token list is. */
    if (p->n == 0)
        return serve_refuse(e, 400, "prompt", "`prompt` gives no tokens: the tokenizer finds "
                            "nothing to encode in it%s", bos ? "" : " (and no BOS is added)");
    return 0;
}

/* prompt: "text" | [ids] | ["text", ...] | [[ids], ...]; llama-server adds
 * mixed [ids and "text"] as one prompt and batches of any of these. */
static int parse_prompts(gguf_serve *s, json_t *o, serve_api api, bool add_special, serve_creq *q,
                         serve_err *e)
{
    json_t *pr = field(o, "prompt");
    if (!pr)
        return serve_refuse(e, 400, "prompt", "`prompt` is required");
    if (json_is_string(pr)) {
        serve_prompt p = {0};
        int rc = text_prompt(s, pr, add_special, &p, e);
        if (rc) {
            free(p.ids);
            free(p.text);
            return rc;
        }
        return add_prompt(q, p);
    }
    if (!json_is_array(pr))
        return serve_refuse(e, 400, "prompt", "`prompt` must be a string, a list of token ids, "
                            "a list of strings or a list of token-id lists");
    const size_t n = json_array_size(pr);
    if (n == 0)
        return serve_refuse(e, 400, "prompt", "`prompt` must not be empty");
    size_t n_int = 0, n_str = 0, n_arr = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(pr, i);
        n_int += json_is_integer(v);
        n_str += json_is_string(v);
        n_arr += json_is_array(v);
    }
    if (n_int + n_str + n_arr != n)
        return serve_refuse(e, 400, "prompt", "`prompt` holds an element that is not a token id, "
                            "a string or a token-id list");
    const bool llama = api == SERVE_API_LLAMA;
    /* one prompt: ids only, or (llama-server) ids mixed with strings */
    if (n_arr == 0 && (n_str == 0 || (llama && n_int > 0))) {
        serve_prompt p = {0};
        int rc = token_prompt(s, pr, llama, add_special, &p, e);
        if (rc) {
            free(p.ids);
            return rc;
        }
        return add_prompt(q, p);
    }
    if (!llama && n_int > 0)
        return serve_refuse(e, 400, "prompt", "`prompt` mixes token ids with strings or lists");
    if (n > (size_t)s->max_tokens)
        return serve_refuse(e, 400, "prompt", "%zu prompts are more than this server's limit of "
                            "%lld tokens per request", n, (long long)s->max_tokens);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(pr, i);
        serve_prompt p = {0};
        int rc;
        if (json_is_string(v)) {
            rc = text_prompt(s, v, add_special, &p, e);
        } else if (json_is_array(v)) {
            /* vLLM: each inner list holds ids only */
            if (!llama)
                for (size_t j = 0; j < json_array_size(v); j++)
                    if (!json_is_integer(json_array_get(v, j)))
                        return serve_refuse(e, 400, "prompt", "`prompt[%zu]` must hold token ids "
                                            "only", i);
            rc = token_prompt(s, v, llama, add_special, &p, e);
        } else {
            rc = serve_refuse(e, 400, "prompt", "`prompt[%zu]` must be a string or a token-id "
                              "list", i);
        }
        if (rc) {
            free(p.ids);
            free(p.text);
            return rc;
        }
        if ((rc = add_prompt(q, p)))
            return rc;
    }
    return 0;
}

/* stop: "s" | ["s", ...] */
static int parse_stop(json_t *o, serve_creq *q, serve_err *e)
{
    json_t *st = field(o, "stop");
    if (!st)
        return 0;
    json_t *one = json_is_string(st) ? st : NULL;
    if (!one && !json_is_array(st))
        return serve_refuse(e, 400, "stop", "`stop` must be a string or a list of strings");
    const size_t n = one ? 1 : json_array_size(st);
    if (n > SERVE_MAX_STOP)
        return serve_refuse(e, 400, "stop", "`stop` holds %zu strings, more than %d", n,
                            SERVE_MAX_STOP);
    for (size_t i = 0; i < n; i++) {
        json_t *v = one ? one : json_array_get(st, i);
        if (!json_is_string(v))
            return serve_refuse(e, 400, "stop", "`stop[%zu]` must be a string", i);
        const size_t len = json_string_length(v);
        if (len > SERVE_MAX_STOP_LEN)
            return serve_refuse(e, 400, "stop", "`stop[%zu]` is %zu bytes, more than %d", i, len,
                                SERVE_MAX_STOP_LEN);
        if (len == 0)
            continue; /* matches nothing */
        char *c = malloc(len + 1);
        if (!c)
            return GGUF_E_NOMEM;
        memcpy(c, json_string_value(v), len + 1);
        q->stop[q->n_stop] = c;
        q->stop_len[q->n_stop++] = len;
    }
    return 0;
}

static int parse_stop_ids(gguf_serve *s, json_t *o, serve_creq *q, serve_err *e)
{
    json_t *st = field(o, "stop_token_ids");
    if (!st)
        return 0;
    if (!json_is_array(st))
        return serve_refuse(e, 400, "stop_token_ids", "`stop_token_ids` must be a list of token "
                            "ids");
    if (json_array_size(st) > SERVE_MAX_STOP_IDS)
        return serve_refuse(e, 400, "stop_token_ids", "`stop_token_ids` holds more than %d ids",
                            SERVE_MAX_STOP_IDS);
    for (size_t i = 0; i < json_array_size(st); i++)
        if (check_id(s, json_array_get(st, i), "stop_token_ids", &q->stop_ids[q->n_stop_ids++], e))
            return -1;
    return 0;
}

/* Every prompt fits the model's context with its tokens to generate, and
 * the request fits the server's budget. max_tokens < 0: as many as fit. */
static int budget(gguf_serve *s, serve_creq *q, int64_t max_tokens, const char *param,
                  serve_err *e)
{
    int64_t prompt_total = 0, longest = 0;
    for (int64_t i = 0; i < q->n_prompts; i++) {
        prompt_total += q->prompts[i].n;
        if (q->prompts[i].n > longest)
            longest = q->prompts[i].n;
    }
    if (prompt_total > s->max_tokens)
        return serve_refuse(e, 400, "prompt", "the prompts hold %lld tokens, over this server's "
                            "limit of %lld tokens per request (--max-tokens)",
                            (long long)prompt_total, (long long)s->max_tokens);
    if (s->m.n_ctx > 0 && longest > s->m.n_ctx)
        return serve_refuse(e, 400, "prompt", "this model's maximum context length is %lld "
                            "tokens, and a prompt holds %lld", (long long)s->m.n_ctx,
                            (long long)longest);
    if (max_tokens < 0) {
        /* llama-server's n_predict -1: until EOS, within both limits */
        int64_t room = (s->max_tokens - prompt_total) / q->n_prompts;
        if (s->m.n_ctx > 0 && s->m.n_ctx - longest < room)
            room = s->m.n_ctx - longest;
        q->max_tokens = room;
        return 0;
    }
    if (max_tokens > (s->max_tokens - prompt_total) / q->n_prompts)
        return serve_refuse(e, 400, param, "%lld prompt tokens and %s %lld for each of %lld "
                            "prompts are over this server's limit of %lld tokens per request "
                            "(--max-tokens)", (long long)prompt_total, param,
                            (long long)max_tokens, (long long)q->n_prompts,
                            (long long)s->max_tokens);
    if (s->m.n_ctx > 0 && longest + max_tokens > s->m.n_ctx)
        return serve_refuse(e, 400, param, "this model's maximum context length is %lld tokens; "
                            "you requested %lld (%lld in the prompt, %lld to generate)",
                            (long long)s->m.n_ctx, (long long)(longest + max_tokens),
                            (long long)longest, (long long)max_tokens);
    q->max_tokens = max_tokens;
    return 0;
}

static int check_model(gguf_serve *s, json_t *o, serve_err *e)
{
    const char *name = NULL; /* set by get_str when the key is there */
    size_t len = 0;
    const int rc = get_str(o, "model", &name, &len, e);
    if (rc < 0)
        return -1;
    if (rc && (len != strlen(s->model_name) || memcmp(name, s->model_name, len) != 0))
        return serve_refuse(e, 404, "model", "The model `%.200s` does not exist: this server "
                            "serves `%.200s`", name, s->model_name);
    return 0;
}

static int parse_openai(gguf_serve *s, json_t *o, serve_creq *q, serve_err *e)
{
    int rc;
    if (check_model(s, o, e) || check_greedy(o, SERVE_API_OPENAI, e))
        return -1;
    bool add_special = true, b = false;
    if (get_bool(o, "add_special_tokens", &add_special, e) < 0 ||
        get_bool(o, "echo", &q->echo, e) < 0 || get_bool(o, "ignore_eos", &q->ignore_eos, e) < 0 ||
        get_bool(o, "return_tokens_as_token_ids", &q->tokens_as_ids, e) < 0 ||
        get_bool(o, "return_token_ids", &q->return_token_ids, e) < 0 ||
        get_bool(o, "stream", &q->stream, e) < 0 ||
        get_bool(o, "skip_special_tokens", &b, e) < 0 ||
        get_bool(o, "include_stop_str_in_output", &b, e) < 0)
        return -1;
    json_t *so = field(o, "stream_options");
    if (so && !json_is_object(so))
        return serve_refuse(e, 400, "stream_options", "`stream_options` must be an object");
    if (so && (get_bool(so, "include_usage", &q->include_usage, e) < 0 ||
               get_bool(so, "continuous_usage_stats", &b, e) < 0))
        return -1;
    if (so && !q->stream)
        return serve_refuse(e, 400, "stream_options", "`stream_options` needs `stream` true");
    int64_t v, seed;
    if (get_int(o, "seed", INT64_MIN, INT64_MAX, &seed, e) < 0)
        return -1;
    q->logprobs = -1;
    if ((rc = get_int(o, "logprobs", 0, s->max_logprobs, &v, e)) < 0) {
        snprintf(e->message, sizeof e->message, "`logprobs` must be an integer from 0 to %d "
                 "(this server's most; vLLM's max_logprobs is 20)", s->max_logprobs);
        return -1;
    }
    if (rc)
        q->logprobs = (int)v;
    q->prompt_logprobs = -1;
    if ((rc = get_int(o, "prompt_logprobs", 0, s->max_logprobs, &v, e)) < 0) {
        snprintf(e->message, sizeof e->message, "`prompt_logprobs` must be an integer from 0 to "
                 "%d", s->max_logprobs);
        return -1;
    }
    if (rc) {
        q->prompt_logprobs = (int)v;
        q->prompt_logprobs_field = true;
    } else if (q->echo && q->logprobs >= 0) {
        /* vLLM: echo scores the prompt with the same k, and says so */
        q->prompt_logprobs = q->logprobs;
        q->prompt_logprobs_field = true;
    }
    if (q->stream && q->prompt_logprobs_field && rc)
        return serve_refuse(e, 400, "prompt_logprobs", "`prompt_logprobs` are not available "
                            "when `stream` is true");
    if (parse_stop(o, q, e) || parse_stop_ids(s, o, q, e))
        return -1;
    if ((rc = parse_prompts(s, o, SERVE_API_OPENAI, add_special, q, e)))
        return rc;
    int64_t max_tokens = 16; /* OpenAI's and vLLM's default */
    if (get_int(o, "max_tokens", 0, INT32_MAX, &max_tokens, e) < 0)
        return -1;
    return budget(s, q, max_tokens, "max_tokens", e);
}

static int parse_llama(gguf_serve *s, json_t *o, serve_creq *q, serve_err *e)
{
    int rc;
    if (check_model(s, o, e) || check_greedy(o, SERVE_API_LLAMA, e))
        return -1;
    bool b = false;
    if (get_bool(o, "stream", &b, e) < 0)
        return -1;
    if (b)
        return serve_refuse(e, 400, "stream", "`stream` is not supported on /completion: ask "
                            "for the whole answer");
    bool add_special = true;
    if (get_bool(o, "return_tokens", &q->return_tokens, e) < 0 ||
        get_bool(o, "ignore_eos", &q->ignore_eos, e) < 0 ||
        get_bool(o, "cache_prompt", &b, e) < 0 || get_bool(o, "add_special", &add_special, e) < 0)
        return -1;
    int64_t v;
    if (get_int(o, "seed", INT64_MIN, INT64_MAX, &v, e) < 0)
        return -1;
    q->logprobs = q->prompt_logprobs = -1;
    if ((rc = get_int(o, "n_probs", 0, s->max_logprobs, &v, e)) < 0) {
        snprintf(e->message, sizeof e->message, "`n_probs` must be an integer from 0 to %d "
                 "(this server's most)", s->max_logprobs);
        return -1;
    }
    q->n_probs = rc ? (int)v : 0;
    if (parse_stop(o, q, e))
        return -1;
    if ((rc = parse_prompts(s, o, SERVE_API_LLAMA, add_special, q, e)))
        return rc;
    /* n_predict (or its alias max_tokens): -1 = until EOS or the limits */
    int64_t n_predict = -1;
    const char *param = "n_predict";
    if ((rc = get_int(o, "n_predict", -1, INT32_MAX, &n_predict, e)) < 0)
        return -1;
    if (!rc && (rc = get_int(o, "max_tokens", -1, INT32_MAX, &n_predict, e)) != 0) {
        if (rc < 0)
            return -1;
        param = "max_tokens";
    }
    return budget(s, q, n_predict, param, e);
}

int serve_parse_completion(gguf_serve *s, serve_api api, const char *body, size_t len,
                           serve_creq *q, serve_err *e)
{
    memset(q, 0, sizeof *q);
    q->api = api;
    json_t *o = load_object(body, len, e);
    if (!o)
        return -1;
    const int rc = api == SERVE_API_LLAMA ? parse_llama(s, o, q, e) : parse_openai(s, o, q, e);
    json_decref(o);
    if (rc)
        serve_creq_free(q);
    return rc;
}

void serve_creq_free(serve_creq *q)
{
    if (!q)
        return;
    for (int64_t i = 0; i < q->n_prompts; i++) {
        free(q->prompts[i].ids);
        free(q->prompts[i].text);
    }
    free(q->prompts);
    for (int i = 0; i < q->n_stop; i++)
        free(q->stop[i]);
    memset(q, 0, sizeof *q);
}

/* ---- /tokenize, /detokenize ---- */

int serve_parse_tokenize(gguf_serve *s, const char *body, size_t len, serve_tokreq *q,
                         serve_err *e)
{
    memset(q, 0, sizeof *q);
    json_t *o = load_object(body, len, e);
    if (!o)
        return -1;
    int rc = -1;
    const char *text = NULL;
    size_t tlen = 0;
    bool add_special = true;
    if (check_model(s, o, e))
        goto done;
    if (field(o, "messages")) {
        serve_refuse(e, 400, "messages", "chat templates are not supported: send `prompt` text");
        goto done;
    }
    int got = get_str(o, "prompt", &text, &tlen, e);
    if (got < 0)
        goto done;
    if (!got) {
        /* llama-server: {"content", "add_special" (default false), "with_pieces"} */
        if ((got = get_str(o, "content", &text, &tlen, e)) < 0)
            goto done;
        if (!got) {
            serve_refuse(e, 400, "prompt", "`prompt` (or llama-server's `content`) is required");
            goto done;
        }
        q->llama = true;
        add_special = false;
        if (get_bool(o, "add_special", &add_special, e) < 0 ||
            get_bool(o, "with_pieces", &q->with_pieces, e) < 0)
            goto done;
    } else if (get_bool(o, "add_special_tokens", &add_special, e) < 0 ||
               get_bool(o, "return_token_strs", &q->return_token_strs, e) < 0) {
        goto done;
    }
    serve_prompt p = {0};
    rc = tokenize_into(s, q->llama ? "content" : "prompt", text, tlen,
                       add_special && s->m.add_bos && s->m.bos >= 0, &p, e);
    q->ids = p.ids;
    q->n = p.n;
done:
    json_decref(o);
    if (rc) {
        free(q->ids);
        q->ids = NULL;
    }
    return rc;
}

int serve_parse_detokenize(gguf_serve *s, const char *body, size_t len, serve_tokreq *q,
                           serve_err *e)
{
    memset(q, 0, sizeof *q);
    json_t *o = load_object(body, len, e);
    if (!o)
        return -1;
    int rc = -1;
    if (check_model(s, o, e))
        goto done;
    json_t *t = field(o, "tokens");
    if (!t || !json_is_array(t)) {
        serve_refuse(e, 400, "tokens", "`tokens` must be a list of token ids");
        goto done;
    }
    const size_t n = json_array_size(t);
    q->ids = malloc((n + 1) * sizeof *q->ids);
    if (!q->ids) {
        rc = GGUF_E_NOMEM;
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        if (check_id(s, json_array_get(t, i), "tokens", &q->ids[i], e))
            goto done;
    q->n = (int64_t)n;
    rc = 0;
done:
    json_decref(o);
    if (rc) {
        free(q->ids);
        q->ids = NULL;
    }
    return rc;
}
