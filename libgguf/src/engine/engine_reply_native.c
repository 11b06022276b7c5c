/* Engine module: the native reply shapes of SGLang's /generate and
 * llama-server's /completion. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "util/error_lib.h"

/* A batch reply is an array of replies: the first one is ours (one prompt). */
static int single(json_t **obj, json_t *root, eng_path *p, gguf_error *err)
{
    if (json_is_array(root)) {
        if (json_array_size(root) == 0)
            return eng_bad(err, p, "is an empty array");
        eng_path_index(p, 0);
        root = json_array_get(root, 0);
    }
    if (!json_is_object(root))
        return eng_bad(err, p, "expected an object, got %s", eng_json_kind(root));
    *obj = root;
    return 0;
}

/* ---- SGLang /generate ---- */

/* [logprob | null, id, text | null] */
static int sgl_triple(double *lp, int32_t *id, const char **text, json_t *t, eng_path *p,
                      bool null_lp, gguf_error *err)
{
    if (!json_is_array(t) || json_array_size(t) < 2)
        return eng_bad(err, p, "expected [logprob, token id, text], got %s%s", eng_json_kind(t),
                       json_is_array(t) ? " of fewer than 2 entries" : "");
    size_t old = eng_path_index(p, 0);
    int rc = eng_number(lp, json_array_get(t, 0), p, null_lp, err);
    eng_path_pop(p, old);
    if (rc)
        return rc;
    *lp = eng_logprob_value(*lp);
    old = eng_path_index(p, 1);
    rc = eng_token_id(id, json_array_get(t, 1), p, err);
    eng_path_pop(p, old);
    if (rc)
        return rc;
    json_t *jt = json_array_get(t, 2);
    *text = NULL;
    if (jt && !json_is_null(jt)) {
        if (!json_is_string(jt)) {
            old = eng_path_index(p, 2);
            rc = eng_bad(err, p, "expected a string or null, got %s", eng_json_kind(jt));
            eng_path_pop(p, old);
            return rc;
        }
        *text = json_string_value(jt);
    }
    return 0;
}

/* meta_info.{input,output}_token_logprobs and their _top_logprobs. */
static int sgl_side(gguf_engine_reply *r, json_t *meta, const char *side, bool prompt,
                    eng_path *p, gguf_error *err)
{
    char key[40], topkey[40];
    snprintf(key, sizeof key, "%s_token_logprobs", side);
    snprintf(topkey, sizeof topkey, "%s_top_logprobs", side);
    json_t *toks, *tops;
    int rc = eng_get_array(&toks, meta, key, p, true, err);
    if (!rc)
        rc = eng_get_array(&tops, meta, topkey, p, true, err);
    if (rc || !toks)
        return rc;
    const size_t n = json_array_size(toks);
    if (tops && json_array_size(tops) != n) {
        const size_t old = eng_path_key(p, topkey);
        rc = eng_bad(err, p, "%zu entries for %zu tokens", json_array_size(tops), n);
        eng_path_pop(p, old);
        return rc;
    }
    r->found |= GGUF_REPLY_SGLANG;
    for (size_t i = 0; i < n; i++) {
        size_t o1 = eng_path_key(p, key), o2 = eng_path_index(p, i);
        double lp;
        int32_t id;
        const char *text;
        if ((rc = sgl_triple(&lp, &id, &text, json_array_get(toks, i), p, true, err)))
            return rc;
        eng_path_pop(p, o2);
        eng_path_pop(p, o1);
        gguf_engine_pos *pos = eng_reply_push(r, err);
        if (!pos)
            return err->code;
        pos->id = id;
        pos->logprob = lp;
        pos->prompt = prompt;
        if ((rc = eng_strdup(&pos->text, text, err)))
            return rc;
        json_t *top = tops ? json_array_get(tops, i) : NULL;
        if (!top || json_is_null(top))
            continue;
        o1 = eng_path_key(p, topkey);
        o2 = eng_path_index(p, i);
        if (!json_is_array(top))
            return eng_bad(err, p, "expected an array or null, got %s", eng_json_kind(top));
        for (size_t k = 0; k < json_array_size(top); k++) {
            const size_t o3 = eng_path_index(p, k);
            if ((rc = sgl_triple(&lp, &id, &text, json_array_get(top, k), p, false, err)))
                return rc;
            if ((rc = eng_pos_add_alt(pos, id, text, lp, err)))
                return rc;
            eng_path_pop(p, o3);
        }
        eng_pos_sort(pos);
        eng_path_pop(p, o2);
        eng_path_pop(p, o1);
    }
    if (prompt) {
        r->n_prompt = (int64_t)n;
        /* the input entries are the prompt's last n tokens (logprob_start_len);
         * they are its ids only when they are all of it, and never in place of
         * the ids the reply gives (a chat choice's prompt_token_ids: SGLang's
         * meta_info always holds the last prompt token) */
        json_t *pt = json_object_get(meta, "prompt_tokens");
        const bool whole = !json_is_integer(pt) || json_integer_value(pt) == (json_int_t)n;
        if (r->prompt_ids || !whole)
            return 0;
        r->prompt_ids = malloc((n ? n : 1) * sizeof *r->prompt_ids);
        if (!r->prompt_ids)
            return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory for prompt ids");
        for (size_t i = 0; i < n; i++)
            r->prompt_ids[i] = r->pos[i].id;
        r->n_prompt_ids = (int64_t)n;
    }
    return 0;
}

int eng_parse_generate(gguf_engine_reply *r, json_t *root, gguf_error *err)
{
    eng_path p = {{0}, 0};
    json_t *obj = NULL, *meta = NULL, *ids = NULL;
    int rc = single(&obj, root, &p, err);
    const char *s;
    if (!rc)
        rc = eng_get_string(&s, obj, "text", &p, true, err);
    if (!rc)
        rc = eng_strdup(&r->text, s, err);
    if (!rc)
        rc = eng_get_array(&ids, obj, "output_ids", &p, true, err);
    if (!rc && ids) {
        const size_t old = eng_path_key(&p, "output_ids");
        rc = eng_id_array(&r->gen_ids, &r->n_gen_ids, ids, &p, err);
        eng_path_pop(&p, old);
    }
    if (!rc)
        rc = eng_get_object(&meta, obj, "meta_info", &p, false, err);
    if (rc)
        return rc;
    eng_path_key(&p, "meta_info");
    json_t *fr = json_object_get(meta, "finish_reason");
    if (json_is_object(fr))
        fr = json_object_get(fr, "type");
    if (json_is_string(fr) && (rc = eng_strdup(&r->finish_reason, json_string_value(fr), err)))
        return rc;
    return eng_parse_sglang_meta(r, meta, &p, err);
}

int eng_parse_sglang_meta(gguf_engine_reply *r, json_t *meta, eng_path *p, gguf_error *err)
{
    int rc = sgl_side(r, meta, "input", true, p, err);
    return rc ? rc : sgl_side(r, meta, "output", false, p, err);
}

/* ---- llama-server /completion ---- */

/* {id, token, logprob} or, with post_sampling_probs, {id, token, prob}. */
static int llama_entry(int32_t *id, const char **text, double *lp, json_t *e, eng_path *p,
                       gguf_error *err)
{
    if (!json_is_object(e))
        return eng_bad(err, p, "expected an object, got %s", eng_json_kind(e));
    size_t old = eng_path_key(p, "id");
    int rc = eng_token_id(id, json_object_get(e, "id"), p, err);
    eng_path_pop(p, old);
    if (rc)
        return rc;
    if ((rc = eng_get_string(text, e, "token", p, true, err)))
        return rc;
    json_t *jl = json_object_get(e, "logprob");
    const bool is_prob = !jl && json_object_get(e, "prob");
    old = eng_path_key(p, is_prob ? "prob" : "logprob");
    if (is_prob)
        jl = json_object_get(e, "prob");
    if (!jl)
        rc = eng_bad(err, p, "missing (expected a number)");
    else /* null: llama-server's JSON for a NaN; the comparison flags it */
        rc = eng_number(lp, jl, p, true, err);
    if (!rc && is_prob && !isnan(*lp)) {
        if (*lp < 0 || *lp > 1)
            rc = eng_bad(err, p, "%g is not a probability", *lp);
        *lp = *lp > 0 ? log(*lp) : -INFINITY;
    }
    eng_path_pop(p, old);
    if (!rc)
        *lp = eng_logprob_value(*lp);
    return rc;
}

int eng_parse_completion(gguf_engine_reply *r, json_t *root, gguf_error *err)
{
    eng_path p = {{0}, 0};
    json_t *obj = NULL, *ids = NULL, *probs = NULL;
    int rc = single(&obj, root, &p, err);
    const char *s;
    if (!rc)
        rc = eng_get_string(&s, obj, "content", &p, true, err);
    if (!rc)
        rc = eng_strdup(&r->text, s, err);
    if (!rc)
        rc = eng_get_string(&s, obj, "stop_type", &p, true, err);
    if (!rc)
        rc = eng_strdup(&r->finish_reason, s, err);
    if (!rc)
        rc = eng_get_string(&s, obj, "model", &p, true, err);
    if (!rc)
        rc = eng_strdup(&r->model, s, err);
    if (!rc)
        rc = eng_get_array(&ids, obj, "tokens", &p, true, err);
    if (!rc && ids && json_array_size(ids) > 0) {
        const size_t old = eng_path_key(&p, "tokens");
        rc = eng_id_array(&r->gen_ids, &r->n_gen_ids, ids, &p, err);
        eng_path_pop(&p, old);
    }
    /* completion_probabilities in the source, probs in the README's example */
    const char *key = obj && json_object_get(obj, "completion_probabilities")
                          ? "completion_probabilities"
                          : "probs";
    if (!rc)
        rc = eng_get_array(&probs, obj, key, &p, true, err);
    if (rc || !probs)
        return rc;
    r->found |= GGUF_REPLY_LLAMA;
    eng_path_key(&p, key);
    for (size_t i = 0; i < json_array_size(probs); i++) {
        const size_t o1 = eng_path_index(&p, i);
        json_t *e = json_array_get(probs, i);
        int32_t id;
        const char *text;
        double lp;
        if ((rc = llama_entry(&id, &text, &lp, e, &p, err)))
            return rc;
        gguf_engine_pos *pos = eng_reply_push(r, err);
        if (!pos)
            return err->code;
        pos->id = id;
        pos->logprob = lp;
        if ((rc = eng_strdup(&pos->text, text, err)))
            return rc;
        json_t *tops = json_object_get(e, "top_logprobs");
        const char *tkey = "top_logprobs";
        if (!tops) {
            tops = json_object_get(e, "top_probs");
            tkey = "top_probs";
        }
        if (!tops || json_is_null(tops)) {
            eng_path_pop(&p, o1);
            continue;
        }
        const size_t o2 = eng_path_key(&p, tkey);
        if (!json_is_array(tops))
            return eng_bad(err, &p, "expected an array, got %s", eng_json_kind(tops));
        for (size_t k = 0; k < json_array_size(tops); k++) {
            const size_t o3 = eng_path_index(&p, k);
            if ((rc = llama_entry(&id, &text, &lp, json_array_get(tops, k), &p, err)))
                return rc;
            if ((rc = eng_pos_add_alt(pos, id, text, lp, err)))
                return rc;
            eng_path_pop(&p, o3);
        }
        eng_pos_sort(pos);
        eng_path_pop(&p, o2);
        eng_path_pop(&p, o1);
    }
    /* speculative decoding: llama-server gives an accepted draft token
     * probability 1 and no alternatives (it never scored it); among scored
     * positions such a one is unscored, not a logprob of 0 */
    bool scored = false;
    for (int64_t i = 0; i < r->n_pos; i++)
        scored |= r->pos[i].n_top > 0;
    for (int64_t i = 0; scored && i < r->n_pos; i++)
        if (r->pos[i].n_top == 0 && r->pos[i].logprob == 0) {
            r->pos[i].unscored = true;
            r->pos[i].logprob = NAN;
        }
    return 0;
}
