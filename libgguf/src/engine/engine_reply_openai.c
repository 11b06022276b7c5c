/* Engine module: the OpenAI-compatible reply shapes of /v1/completions and
 * /v1/chat/completions, with vLLM's extensions (prompt_logprobs,
 * prompt_token_ids, token_ids, "token_id:N" tokens). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "util/error_lib.h"

/* Legacy completions: logprobs.{tokens, token_logprobs, top_logprobs, text_offset}
 * as parallel arrays, top_logprobs[i] an object {token text: logprob}. */
static int parse_legacy(gguf_engine_reply *r, json_t *lp, eng_path *p, gguf_error *err)
{
    json_t *tokens, *lps, *tops, *offs;
    int rc = eng_get_array(&tokens, lp, "tokens", p, false, err);
    if (!rc)
        rc = eng_get_array(&lps, lp, "token_logprobs", p, false, err);
    if (!rc)
        rc = eng_get_array(&tops, lp, "top_logprobs", p, true, err);
    if (!rc)
        rc = eng_get_array(&offs, lp, "text_offset", p, true, err);
    if (rc)
        return rc;
    const size_t n = json_array_size(tokens);
    const struct {
        json_t *a;
        const char *name;
    } same[] = {{lps, "token_logprobs"}, {tops, "top_logprobs"}, {offs, "text_offset"}};
    for (size_t k = 0; k < sizeof same / sizeof same[0]; k++) {
        if (same[k].a && json_array_size(same[k].a) != n) {
            const size_t old = eng_path_key(p, same[k].name);
            rc = eng_bad(err, p, "%zu entries for %zu tokens", json_array_size(same[k].a), n);
            eng_path_pop(p, old);
            return rc;
        }
    }
    r->found |= GGUF_REPLY_LEGACY;
    for (size_t i = 0; i < n; i++) {
        gguf_engine_pos *pos = eng_reply_push(r, err);
        if (!pos)
            return err ? err->code : GGUF_E_NOMEM;
        size_t o1 = eng_path_key(p, "tokens"), o2 = eng_path_index(p, i);
        json_t *t = json_array_get(tokens, i);
        if (!json_is_string(t))
            return eng_bad(err, p, "expected a string, got %s", eng_json_kind(t));
        if ((rc = eng_set_token(&pos->id, &pos->text, -1, json_string_value(t), &r->found, err)))
            return rc;
        eng_path_pop(p, o2);
        eng_path_pop(p, o1);
        o1 = eng_path_key(p, "token_logprobs");
        o2 = eng_path_index(p, i);
        if ((rc = eng_number(&pos->logprob, json_array_get(lps, i), p, true, err)))
            return rc;
        pos->logprob = eng_logprob_value(pos->logprob);
        eng_path_pop(p, o2);
        eng_path_pop(p, o1);
        if (offs) {
            o1 = eng_path_key(p, "text_offset");
            o2 = eng_path_index(p, i);
            if (!json_is_integer(json_array_get(offs, i)))
                return eng_bad(err, p, "expected an integer, got %s",
                               eng_json_kind(json_array_get(offs, i)));
            eng_path_pop(p, o2);
            eng_path_pop(p, o1);
        }
        json_t *top = tops ? json_array_get(tops, i) : NULL;
        if (!top || json_is_null(top))
            continue;
        o1 = eng_path_key(p, "top_logprobs");
        o2 = eng_path_index(p, i);
        if (!json_is_object(top))
            return eng_bad(err, p, "expected an object or null, got %s", eng_json_kind(top));
        const char *key;
        json_t *val;
        json_object_foreach(top, key, val) {
            const size_t o3 = eng_path_key(p, key);
            double v; /* null: a NaN as JSON writers give it; the comparison flags it */
            if ((rc = eng_number(&v, val, p, true, err)))
                return rc;
            eng_path_pop(p, o3);
            if ((rc = eng_pos_add_alt(pos, -1, key, v, err)))
                return rc;
        }
        eng_pos_sort(pos);
        eng_path_pop(p, o2);
        eng_path_pop(p, o1);
    }
    return 0;
}

/* One {id?, token, logprob} entry of the chat-style shape. */
static int content_token(int32_t *id, const char **text, double *lp, json_t *e, eng_path *p,
                         gguf_error *err)
{
    if (!json_is_object(e))
        return eng_bad(err, p, "expected an object, got %s", eng_json_kind(e));
    *id = -1;
    json_t *jid = json_object_get(e, "id");
    if (jid && !json_is_null(jid)) {
        const size_t old = eng_path_key(p, "id");
        int rc = eng_token_id(id, jid, p, err);
        eng_path_pop(p, old);
        if (rc)
            return rc;
    }
    int rc = eng_get_string(text, e, "token", p, *id >= 0, err);
    if (rc)
        return rc;
    const size_t old = eng_path_key(p, "logprob");
    json_t *jl = json_object_get(e, "logprob");
    if (!jl)
        rc = eng_bad(err, p, "missing (expected a number)");
    else
        rc = eng_number(lp, jl, p, true, err);
    eng_path_pop(p, old);
    if (!rc)
        *lp = eng_logprob_value(*lp);
    return rc;
}

/* Chat style: logprobs.content[{id?, token, logprob, bytes, top_logprobs[...]}]
 * (OpenAI chat; llama-server uses it for /v1/completions too). */
static int parse_content(gguf_engine_reply *r, json_t *content, eng_path *p, gguf_error *err)
{
    r->found |= GGUF_REPLY_CONTENT;
    const size_t n = json_array_size(content);
    for (size_t i = 0; i < n; i++) {
        const size_t o1 = eng_path_index(p, i);
        json_t *e = json_array_get(content, i);
        int32_t id;
        const char *text;
        double lp;
        int rc = content_token(&id, &text, &lp, e, p, err);
        if (rc)
            return rc;
        gguf_engine_pos *pos = eng_reply_push(r, err);
        if (!pos)
            return err ? err->code : GGUF_E_NOMEM;
        if ((rc = eng_set_token(&pos->id, &pos->text, id, text, &r->found, err)))
            return rc;
        pos->logprob = lp;
        json_t *tops;
        if ((rc = eng_get_array(&tops, e, "top_logprobs", p, true, err)))
            return rc;
        const size_t o2 = eng_path_key(p, "top_logprobs");
        for (size_t k = 0; tops && k < json_array_size(tops); k++) {
            const size_t o3 = eng_path_index(p, k);
            if ((rc = content_token(&id, &text, &lp, json_array_get(tops, k), p, err)))
                return rc;
            if ((rc = eng_pos_add_alt(pos, id, text, lp, err)))
                return rc;
            eng_path_pop(p, o3);
        }
        eng_path_pop(p, o2);
        eng_pos_sort(pos);
        eng_path_pop(p, o1);
    }
    return 0;
}

/* vLLM's prompt_logprobs: [null | {"ID": {logprob, rank, decoded_token}}], one
 * entry per prompt token; the token's own entry is among them. */
static int parse_prompt_logprobs(gguf_engine_reply *r, json_t *arr, eng_path *p,
                                 gguf_error *err)
{
    const size_t n = json_array_size(arr);
    int rc = eng_reply_prepend(r, (int64_t)n, err);
    if (rc)
        return rc;
    r->found |= GGUF_REPLY_PROMPT_LOGPROBS;
    r->n_prompt = (int64_t)n;
    const bool ids = r->prompt_ids && r->n_prompt_ids == (int64_t)n;
    for (size_t i = 0; i < n; i++) {
        gguf_engine_pos *pos = &r->pos[i];
        pos->prompt = true;
        if (ids)
            pos->id = r->prompt_ids[i];
        json_t *e = json_array_get(arr, i);
        if (json_is_null(e))
            continue;
        const size_t o1 = eng_path_index(p, i);
        if (!json_is_object(e))
            return eng_bad(err, p, "expected an object or null, got %s", eng_json_kind(e));
        const char *key;
        json_t *val;
        json_object_foreach(e, key, val) {
            const size_t o2 = eng_path_key(p, key);
            char *end;
            long long id = strtoll(key, &end, 10);
            if (!*key || *end || id < 0 || id > INT32_MAX)
                return eng_bad(err, p, "the key is not a token id");
            if (!json_is_object(val))
                return eng_bad(err, p, "expected an object, got %s", eng_json_kind(val));
            const size_t o3 = eng_path_key(p, "logprob");
            double lp;
            json_t *jl = json_object_get(val, "logprob");
            if (!jl)
                return eng_bad(err, p, "missing (expected a number)");
            if ((rc = eng_number(&lp, jl, p, true, err))) /* null: a NaN */
                return rc;
            eng_path_pop(p, o3);
            const char *text = NULL;
            if ((rc = eng_get_string(&text, val, "decoded_token", p, true, err)))
                return rc;
            if ((rc = eng_pos_add_alt(pos, (int32_t)id, text, lp, err)))
                return rc;
            if ((int32_t)id == pos->id) {
                pos->logprob = eng_logprob_value(lp);
                if ((rc = eng_strdup(&pos->text, text, err)))
                    return rc;
            }
            eng_path_pop(p, o2);
        }
        eng_pos_sort(pos);
        eng_path_pop(p, o1);
    }
    return 0;
}

/* "ids" of obj at key, into *out (left alone when absent). */
static int opt_ids(int32_t **out, int64_t *n, json_t *obj, const char *key, eng_path *p,
                   gguf_error *err)
{
    json_t *a;
    int rc = eng_get_array(&a, obj, key, p, true, err);
    if (rc || !a || *out)
        return rc;
    const size_t old = eng_path_key(p, key);
    rc = eng_id_array(out, n, a, p, err);
    eng_path_pop(p, old);
    return rc;
}

static int join_text(char **out, const char *a, const char *b, gguf_error *err)
{
    const size_t la = a ? strlen(a) : 0, lb = b ? strlen(b) : 0;
    *out = malloc(la + lb + 1);
    if (!*out)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory for the text");
    memcpy(*out, a ? a : "", la);
    memcpy(*out + la, b ? b : "", lb + 1);
    return 0;
}

int eng_parse_openai(gguf_engine_reply *r, json_t *root, gguf_engine_endpoint ep,
                     gguf_error *err)
{
    eng_path p = {{0}, 0};
    if (!json_is_object(root))
        return eng_bad(err, &p, "expected an object, got %s", eng_json_kind(root));
    const char *s;
    int rc = eng_get_string(&s, root, "model", &p, true, err);
    if (!rc)
        rc = eng_strdup(&r->model, s, err);
    json_t *choices, *c;
    if (!rc)
        rc = eng_get_array(&choices, root, "choices", &p, false, err);
    if (rc)
        return rc;
    if (json_array_size(choices) == 0) {
        eng_path_key(&p, "choices");
        return eng_bad(err, &p, "is empty");
    }
    eng_path_key(&p, "choices");
    eng_path_index(&p, 0);
    c = json_array_get(choices, 0);
    if (!json_is_object(c))
        return eng_bad(err, &p, "expected an object, got %s", eng_json_kind(c));
    if ((rc = eng_get_string(&s, c, "finish_reason", &p, true, err)) ||
        (rc = eng_strdup(&r->finish_reason, s, err)))
        return rc;
    if (ep == GGUF_EP_CHAT) {
        json_t *msg;
        if ((rc = eng_get_object(&msg, c, "message", &p, true, err)))
            return rc;
        if (msg) {
            const size_t old = eng_path_key(&p, "message");
            const char *content, *reasoning = NULL, *alt = NULL;
            rc = eng_get_string(&content, msg, "content", &p, true, err);
            if (!rc)
                rc = eng_get_string(&reasoning, msg, "reasoning_content", &p, true, err);
            if (!rc)
                rc = eng_get_string(&alt, msg, "reasoning", &p, true, err);
            if (rc)
                return rc;
            if (!reasoning)
                reasoning = alt;
            if ((rc = eng_strdup(&r->reasoning, reasoning, err)) ||
                (rc = join_text(&r->text, reasoning, content, err)))
                return rc;
            eng_path_pop(&p, old);
        }
    } else {
        if ((rc = eng_get_string(&s, c, "text", &p, true, err)) ||
            (rc = eng_strdup(&r->text, s, err)))
            return rc;
    }
    /* ids first: prompt_logprobs takes its tokens from them */
    if ((rc = opt_ids(&r->gen_ids, &r->n_gen_ids, c, "token_ids", &p, err)) ||
        (rc = opt_ids(&r->prompt_ids, &r->n_prompt_ids, c, "prompt_token_ids", &p, err)))
        return rc;
    /* SGLang's chat with return_meta_info: the /generate log-probabilities,
     * ids included, in place of logprobs.content's text-only tokens */
    json_t *meta = ep == GGUF_EP_CHAT ? json_object_get(c, "meta_info") : NULL, *lp = NULL;
    if (json_is_object(meta) && json_object_get(meta, "output_token_logprobs")) {
        const size_t old = eng_path_key(&p, "meta_info");
        if ((rc = eng_parse_sglang_meta(r, meta, &p, err)))
            return rc;
        eng_path_pop(&p, old);
    } else if ((rc = eng_get_object(&lp, c, "logprobs", &p, true, err))) {
        return rc;
    }
    if (lp) {
        const size_t old = eng_path_key(&p, "logprobs");
        json_t *content = json_object_get(lp, "content");
        if (content && !json_is_null(content)) {
            if (!json_is_array(content)) {
                eng_path_key(&p, "content");
                return eng_bad(err, &p, "expected an array, got %s",
                               eng_json_kind(content));
            }
            eng_path_key(&p, "content");
            rc = parse_content(r, content, &p, err);
        } else if (json_object_get(lp, "tokens")) {
            rc = parse_legacy(r, lp, &p, err);
        } else if (!content) {
            rc = eng_bad(err, &p, "has neither content nor tokens");
        }
        if (rc)
            return rc;
        eng_path_pop(&p, old);
    }
    eng_path_pop(&p, 0);
    /* chat replies carry vLLM's prompt fields at the top level */
    if ((rc = opt_ids(&r->prompt_ids, &r->n_prompt_ids, root, "prompt_token_ids", &p, err)))
        return rc;
    json_t *usage;
    if ((rc = eng_get_object(&usage, root, "usage", &p, true, err)))
        return rc;
    if (usage) {
        /* the split of an echo: a count that is not one, or more tokens than
         * the reply has, would count the prompt as generated */
        json_t *ct = json_object_get(usage, "completion_tokens");
        const size_t old = eng_path_key(&p, "usage");
        eng_path_key(&p, "completion_tokens");
        if (ct && !json_is_null(ct)) {
            if (!json_is_integer(ct) || json_integer_value(ct) < 0)
                return eng_bad(err, &p, "expected a count, got %s", eng_json_kind(ct));
            r->completion_tokens = (int64_t)json_integer_value(ct);
            if (r->n_pos > 0 && r->completion_tokens > r->n_pos)
                return eng_bad(err, &p, "%lld, more than the reply's %lld positions",
                               (long long)r->completion_tokens, (long long)r->n_pos);
            if (r->n_pos > 0)
                r->n_prompt = r->n_pos - r->completion_tokens;
        }
        eng_path_pop(&p, old);
    }
    for (int64_t i = 0; i < r->n_prompt; i++)
        r->pos[i].prompt = true;
    json_t *pl = NULL;
    eng_path_key(&p, "choices");
    eng_path_index(&p, 0);
    if ((rc = eng_get_array(&pl, c, "prompt_logprobs", &p, true, err)))
        return rc;
    if (!pl) {
        eng_path_pop(&p, 0);
        if ((rc = eng_get_array(&pl, root, "prompt_logprobs", &p, true, err)))
            return rc;
    } else {
        eng_path_key(&p, "prompt_logprobs");
    }
    if (pl && r->n_prompt == 0) {
        if (p.len == 0)
            eng_path_key(&p, "prompt_logprobs");
        return parse_prompt_logprobs(r, pl, &p, err);
    }
    return 0;
}
