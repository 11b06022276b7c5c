/* Engine module: names of dialects and endpoints, the entry point of the
 * reply parsers, /tokenize and error bodies, dialect detection, and ids for
 * text-only tokens. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "util/error_lib.h"

static const char *const api_names[] = {"auto", "openai", "vllm", "sglang", "llama-server"};

const char *gguf_engine_api_name(gguf_engine_api api)
{
    return (unsigned)api < sizeof api_names / sizeof api_names[0] ? api_names[api] : "unknown";
}

int gguf_engine_api_from_name(const char *name, gguf_engine_api *out)
{
    for (unsigned i = 0; name && i < sizeof api_names / sizeof api_names[0]; i++)
        if (strcmp(name, api_names[i]) == 0) {
            *out = (gguf_engine_api)i;
            return 0;
        }
    return GGUF_E_INVALID;
}

static const struct {
    const char *path, *name;
} endpoints[GGUF_EP_COUNT] = {
    {"/v1/completions", "completions"}, {"/v1/chat/completions", "chat"},
    {"/generate", "generate"},          {"/completion", "completion"},
    {"/tokenize", "tokenize"},          {"/v1/models", "models"},
    {"/get_model_info", "model_info"},  {"/props", "props"},
};

const char *gguf_engine_endpoint_path(gguf_engine_endpoint ep)
{
    return (unsigned)ep < GGUF_EP_COUNT ? endpoints[ep].path : NULL;
}

const char *gguf_engine_endpoint_name(gguf_engine_endpoint ep)
{
    return (unsigned)ep < GGUF_EP_COUNT ? endpoints[ep].name : NULL;
}

int gguf_engine_endpoint_from_name(const char *name, gguf_engine_endpoint *out)
{
    for (unsigned i = 0; name && i < GGUF_EP_COUNT; i++)
        if (strcmp(name, endpoints[i].name) == 0) {
            *out = (gguf_engine_endpoint)i;
            return 0;
        }
    return GGUF_E_INVALID;
}

/* ---- replies ---- */

int gguf_engine_reply_parse(gguf_engine_reply **out, gguf_engine_endpoint ep, const char *body,
                            size_t len, gguf_error *err_in)
{
    gguf_error local;
    gguf_error *err = err_in ? err_in : &local; /* the parsers read err->code back */
    *out = NULL;
    if (ep != GGUF_EP_COMPLETIONS && ep != GGUF_EP_CHAT && ep != GGUF_EP_GENERATE &&
        ep != GGUF_EP_COMPLETION)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "%s is not an endpoint that generates", gguf_engine_endpoint_path(ep)
                                                                     ? gguf_engine_endpoint_path(ep)
                                                                     : "(unknown)");
    json_t *root;
    int rc = eng_load(&root, body, len, err);
    if (rc)
        return rc;
    gguf_engine_reply *r = eng_reply_new();
    if (!r) {
        json_decref(root);
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory for a reply");
    }
    /* a 200 that carries an error object is refused with the server's message */
    json_t *e = json_is_object(root) ? json_object_get(root, "error") : NULL;
    if (e && !json_is_null(e) && !json_object_get(root, "choices")) {
        char msg[300];
        gguf_engine_error_message(body, len, msg, sizeof msg);
        rc = gguf_fail(err, GGUF_E_BAD_VALUE, GGUF_NO_OFFSET, "reply: error: %s", msg);
    } else if (ep == GGUF_EP_GENERATE) {
        rc = eng_parse_generate(r, root, err);
    } else if (ep == GGUF_EP_COMPLETION) {
        rc = eng_parse_completion(r, root, err);
    } else {
        rc = eng_parse_openai(r, root, ep, err);
    }
    json_decref(root);
    if (rc) {
        gguf_engine_reply_free(r);
        return rc;
    }
    *out = r;
    return 0;
}

int gguf_engine_tokens_parse(int32_t **ids, int64_t *n, const char *body, size_t len,
                             gguf_error *err)
{
    *ids = NULL;
    *n = 0;
    json_t *root;
    int rc = eng_load(&root, body, len, err);
    if (rc)
        return rc;
    eng_path p = {{0}, 0};
    json_t *arr = NULL;
    if (!json_is_object(root)) {
        rc = eng_bad(err, &p, "expected an object, got %s", eng_json_kind(root));
        goto done;
    }
    const char *key = json_object_get(root, "tokens") ? "tokens" : "input_ids";
    if ((rc = eng_get_array(&arr, root, key, &p, false, err)))
        goto done;
    eng_path_key(&p, key);
    /* llama-server's with_pieces: [{"id", "piece"}] */
    json_t *first = json_array_get(arr, 0);
    if (json_is_object(first)) {
        const size_t count = json_array_size(arr);
        if (count > GGUF_ENGINE_MAX_POSITIONS) {
            rc = gguf_fail(err, GGUF_E_LIMIT, GGUF_NO_OFFSET, "reply: %s: %zu tokens, over %d",
                           p.buf, count, GGUF_ENGINE_MAX_POSITIONS);
            goto done;
        }
        *ids = malloc(count * sizeof **ids);
        if (!*ids) {
            rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory for token ids");
            goto done;
        }
        for (size_t i = 0; i < count; i++) {
            const size_t o1 = eng_path_index(&p, i);
            json_t *e = json_array_get(arr, i);
            if (!json_is_object(e)) {
                rc = eng_bad(err, &p, "expected an object, got %s", eng_json_kind(e));
                goto done;
            }
            const size_t o2 = eng_path_key(&p, "id");
            if ((rc = eng_token_id(&(*ids)[i], json_object_get(e, "id"), &p, err)))
                goto done;
            eng_path_pop(&p, o2);
            eng_path_pop(&p, o1);
        }
        *n = (int64_t)count;
    } else {
        rc = eng_id_array(ids, n, arr, &p, err);
    }
done:
    if (rc) {
        free(*ids);
        *ids = NULL;
        *n = 0;
    }
    json_decref(root);
    return rc;
}

static void copy_clean(char *buf, size_t size, const char *s, size_t n)
{
    size_t j = 0;
    for (size_t i = 0; i < n && j + 1 < size; i++)
        buf[j++] = ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) ? ' ' : s[i];
    buf[j] = 0;
}

char *gguf_engine_error_message(const char *body, size_t len, char *buf, size_t size)
{
    if (!buf || size == 0)
        return buf;
    buf[0] = 0;
    if (!body)
        return buf;
    json_error_t je;
    json_t *root = len <= GGUF_ENGINE_MAX_BODY ? json_loadb(body, len, JSON_ALLOW_NUL, &je) : NULL;
    const char *msg = NULL;
    char *dumped = NULL;
    if (json_is_object(root)) {
        json_t *e = json_object_get(root, "error");
        if (json_is_object(e))
            e = json_object_get(e, "message");
        if (!json_is_string(e))
            e = json_object_get(root, "detail");
        if (!json_is_string(e) && json_object_get(root, "detail"))
            msg = dumped = json_dumps(json_object_get(root, "detail"), JSON_COMPACT);
        if (!msg && !json_is_string(e))
            e = json_object_get(root, "message");
        if (!msg && json_is_string(e))
            msg = json_string_value(e);
    }
    if (msg) {
        copy_clean(buf, size, msg, strlen(msg));
    } else {
        copy_clean(buf, size, body, len < 200 ? len : 200);
    }
    free(dumped);
    json_decref(root);
    return buf;
}

/* ---- detection ---- */

int gguf_engine_detect(gguf_engine_api *api, char *model, size_t size,
                       const gguf_engine_probe *probe, gguf_error *err)
{
    if (model && size)
        model[0] = 0;
    const char *owned = NULL;
    json_t *models = NULL, *props = NULL, *info = NULL;
    json_error_t je;
    int rc = 0;
    bool have_list = false;
    if (probe->models) {
        models = json_loadb(probe->models, probe->models_len, JSON_ALLOW_NUL, &je);
        json_t *data = json_is_object(models) ? json_object_get(models, "data") : NULL;
        if (!json_is_array(data)) {
            rc = gguf_fail(err, GGUF_E_BAD_VALUE, GGUF_NO_OFFSET,
                           "reply: /v1/models: data: expected a list of models");
            goto done;
        }
        have_list = true;
        json_t *m0 = json_array_get(data, 0);
        if (json_is_object(m0)) {
            json_t *id = json_object_get(m0, "id");
            if (json_is_string(id) && model && size)
                copy_clean(model, size, json_string_value(id), strlen(json_string_value(id)));
            json_t *o = json_object_get(m0, "owned_by");
            owned = json_is_string(o) ? json_string_value(o) : NULL;
        }
    }
    /* ref-forward serve answers with vLLM's extensions (gguf/serve.h) */
    if (owned && (strcmp(owned, "vllm") == 0 || strcmp(owned, "ggufkit") == 0)) {
        *api = GGUF_API_VLLM;
        goto done;
    }
    if (owned && strcmp(owned, "sglang") == 0) {
        *api = GGUF_API_SGLANG;
        goto done;
    }
    if (owned && strcmp(owned, "llamacpp") == 0) {
        *api = GGUF_API_LLAMA_SERVER;
        goto done;
    }
    if (probe->props) {
        props = json_loadb(probe->props, probe->props_len, JSON_ALLOW_NUL, &je);
        if (json_is_object(props) && json_object_get(props, "default_generation_settings")) {
            *api = GGUF_API_LLAMA_SERVER;
            goto done;
        }
    }
    if (probe->model_info) {
        info = json_loadb(probe->model_info, probe->model_info_len, JSON_ALLOW_NUL, &je);
        if (json_is_object(info) && json_object_get(info, "model_path")) {
            *api = GGUF_API_SGLANG;
            goto done;
        }
    }
    if (have_list) {
        *api = GGUF_API_OPENAI;
        goto done;
    }
    rc = gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET,
                   "no known API: /v1/models %s, /get_model_info %s, /props %s",
                   probe->models ? "answered" : "did not answer",
                   probe->model_info ? "answered without model_path" : "did not answer",
                   probe->props ? "answered without default_generation_settings"
                                : "did not answer");
done:
    json_decref(models);
    json_decref(props);
    json_decref(info);
    return rc;
}

/* ---- ids for text ---- */

/* Open-addressing table from token text to id (-2: several tokens share it). */
typedef struct text_map {
    const char **key;
    int32_t *id;
    size_t cap;
} text_map;

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int map_build(text_map *m, const gguf_engine_text *texts, int64_t n)
{
    m->cap = 16;
    while (m->cap < (size_t)n * 2)
        m->cap *= 2;
    m->key = calloc(m->cap, sizeof *m->key);
    m->id = malloc(m->cap * sizeof *m->id);
    if (!m->key || !m->id)
        return GGUF_E_NOMEM;
    for (int64_t i = 0; i < n; i++) {
        const char *s = texts[i].text;
        if (!s || !s[0] || texts[i].id < 0) /* "" names no token (several write as "") */
            continue;
        size_t h = hash_str(s) & (m->cap - 1);
        while (m->key[h] && strcmp(m->key[h], s) != 0)
            h = (h + 1) & (m->cap - 1);
        if (!m->key[h]) {
            m->key[h] = s;
            m->id[h] = texts[i].id;
        } else if (m->id[h] != texts[i].id) {
            m->id[h] = -2;
        }
    }
    return 0;
}

static int32_t map_find(const text_map *m, const char *s)
{
    if (!s || !*s)
        return -1;
    size_t h = hash_str(s) & (m->cap - 1);
    while (m->key[h]) {
        if (strcmp(m->key[h], s) == 0)
            return m->id[h] >= 0 ? m->id[h] : -1;
        h = (h + 1) & (m->cap - 1);
    }
    return -1;
}

int64_t gguf_engine_reply_resolve(gguf_engine_reply *r, const gguf_engine_text *texts,
                                  int64_t n_texts, const int32_t *prompt_ids,
                                  int64_t n_prompt_ids)
{
    text_map m = {0};
    if (texts && n_texts > 0 && map_build(&m, texts, n_texts)) {
        free(m.key);
        free(m.id);
        return GGUF_E_NOMEM;
    }
    int64_t missing = 0;
    for (int64_t i = 0; i < r->n_pos; i++) {
        gguf_engine_pos *p = &r->pos[i];
        /* echoed prompt positions are the last n_prompt prompt tokens: their
         * ids are known, and their text is only the engine's rendering */
        const int64_t at = n_prompt_ids - r->n_prompt + i;
        const bool known = p->prompt && prompt_ids && at >= 0 && at < n_prompt_ids;
        if (known && p->id < 0)
            p->id = prompt_ids[at];
        if (m.key) {
            if (p->id < 0)
                p->id = map_find(&m, p->text);
            for (int32_t k = 0; k < p->n_top; k++)
                if (p->top[k].id < 0)
                    p->top[k].id = map_find(&m, p->top[k].text);
        }
        if (known) {
            if (isnan(p->logprob))
                for (int32_t k = 0; k < p->n_top; k++)
                    if (p->top[k].id == p->id) {
                        p->logprob = p->top[k].logprob;
                        break;
                    }
        }
        missing += p->id < 0;
    }
    free(m.key);
    free(m.id);
    return missing;
}

void gguf_engine_reply_truncate(gguf_engine_reply *r, int64_t n)
{
    if (!r || n < 0 || n >= r->n_pos)
        return;
    for (int64_t i = n; i < r->n_pos; i++) {
        gguf_engine_pos *p = &r->pos[i];
        for (int32_t k = 0; k < p->n_top; k++)
            free(p->top[k].text);
        free(p->top);
        free(p->text);
    }
    r->n_pos = n;
    if (r->n_prompt > n)
        r->n_prompt = n;
}
