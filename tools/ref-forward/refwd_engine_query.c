/* ref-forward check-engine: one prompt against the engine. The request in
 * the engine's dialect, the reply, and the prompt's token ids as the engine
 * saw them (from the request, the reply, its /tokenize or its echo), so that
 * the reference is teacher-forced on exactly the engine's tokens. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "gguf/forward.h"
#include "gguf/tokenize.h"
#include "refwd_engine.h"

void ce_fmt(char *dst, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst, size, fmt, ap);
    va_end(ap);
}

void ce_note(ce_result *r, const char *fmt, ...)
{
    if (r->n_notes >= (int)(sizeof r->notes / sizeof r->notes[0]))
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->notes[r->n_notes++], sizeof r->notes[0], fmt, ap);
    va_end(ap);
}

void ce_result_clear(ce_result *r)
{
    gguf_engine_reply_free(r->reply);
    gguf_engine_cmp_free(r->cmp);
    free(r->seq);
    free(r->our_ids);
    memset(r, 0, sizeof *r);
}

/* GET path; NULL body when the endpoint does not exist. */
static int probe(ce_ctx *ctx, const char *path, char **body, size_t *len, gguf_error *err)
{
    long status;
    gguf_error e = {0};
    int rc = refwd_http_call(ctx->http, path, NULL, body, len, &status, &e);
    if (rc == 0)
        return 0;
    free(*body);
    *body = NULL;
    if (rc == GGUF_E_IO || status == 401 || status == 403) {
        *err = e;
        if (status == 401 || status == 403)
            snprintf(err->message + strlen(err->message),
                     sizeof err->message - strlen(err->message), " (give --api-key)");
        return rc;
    }
    return 0; /* 404, 405, other refusals: this probe says nothing */
}

int ce_detect(ce_ctx *ctx, char *model, size_t size, gguf_error *err)
{
    char *b[3] = {NULL, NULL, NULL};
    size_t n[3] = {0, 0, 0};
    const gguf_engine_endpoint eps[3] = {GGUF_EP_MODELS, GGUF_EP_MODEL_INFO, GGUF_EP_PROPS};
    int rc = 0;
    /* a dialect given by the user needs only the model name */
    const int n_probe = ctx->api == GGUF_API_AUTO ? 3 : 1;
    for (int i = 0; i < n_probe && !rc; i++)
        rc = probe(ctx, gguf_engine_endpoint_path(eps[i]), &b[i], &n[i], err);
    if (!rc && ctx->api == GGUF_API_AUTO) {
        gguf_engine_probe p = {b[0], n[0], b[1], n[1], b[2], n[2]};
        rc = gguf_engine_detect(&ctx->api, model, size, &p, err);
        if (rc == GGUF_E_NOT_FOUND)
            snprintf(err->message + strlen(err->message),
                     sizeof err->message - strlen(err->message), " at %s (give --api)",
                     refwd_http_url(ctx->http));
    } else if (!rc && b[0]) {
        gguf_engine_probe p = {b[0], n[0], NULL, 0, NULL, 0};
        gguf_engine_api ignored;
        gguf_error e;
        gguf_engine_detect(&ignored, model, size, &p, &e); /* the name only */
    }
    for (int i = 0; i < 3; i++)
        free(b[i]);
    return rc;
}

gguf_engine_endpoint ce_endpoint(const ce_ctx *ctx, const ce_prompt *p)
{
    if (p->chat || p->messages)
        return GGUF_EP_CHAT;
    switch (ctx->api) {
    case GGUF_API_SGLANG: return GGUF_EP_GENERATE;
    case GGUF_API_LLAMA_SERVER: return GGUF_EP_COMPLETION;
    default: return GGUF_EP_COMPLETIONS;
    }
}

/* err's message gets "METHOD URL: " in front (reply errors name only the field). */
static int with_url(gguf_error *err, int rc, const ce_ctx *ctx, const char *path)
{
    char msg[sizeof err->message];
    snprintf(msg, sizeof msg, "%s", err->message);
    ce_fmt(err->message, sizeof err->message, "POST %s%s: %s", refwd_http_url(ctx->http),
           path, msg);
    return rc;
}

/* POST a body built from rq to its endpoint. */
static int post(ce_ctx *ctx, const gguf_engine_request *rq, char **reply, size_t *len,
                gguf_error *err)
{
    char *body = NULL;
    int rc = gguf_engine_request_build(&body, rq, err);
    if (rc)
        return rc;
    long status;
    rc = refwd_http_call(ctx->http, gguf_engine_endpoint_path(rq->endpoint), body, reply,
                               len, &status, err);
    free(body);
    return rc;
}

/* The engine's /tokenize for text or chat messages (vLLM, SGLang,
 * llama-server, ref-forward serve). */
static int engine_tokenize(ce_ctx *ctx, const ce_prompt *p, const char *text, int32_t **ids,
                           int64_t *n, gguf_error *err)
{
    gguf_engine_request rq = {0};
    rq.api = ctx->api;
    rq.endpoint = GGUF_EP_TOKENIZE;
    rq.model = ctx->served_model;
    rq.text = text;
    if (!text) {
        rq.chat = p->chat;
        rq.messages = p->messages;
    }
    rq.add_special = true; /* as the completion itself adds BOS */
    char *reply = NULL;
    size_t len = 0;
    int rc = post(ctx, &rq, &reply, &len, err);
    if (!rc && (rc = gguf_engine_tokens_parse(ids, n, reply, len, err)))
        with_url(err, rc, ctx, "/tokenize");
    free(reply);
    return rc;
}

/* llama-server's chat template through /apply-template (the prompt text). */
static int apply_template(ce_ctx *ctx, const ce_prompt *p, char **text, gguf_error *err)
{
    json_t *msgs = p->messages ? json_loads(p->messages, 0, NULL)
                               : json_pack("[{s:s, s:s}]", "role", "user", "content", p->chat);
    json_t *o = json_pack("{s:o}", "messages", msgs);
    char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!body)
        return gguf_error_setf(err, GGUF_E_INVALID, 0, "messages: not a JSON array");
    char *reply = NULL;
    size_t len = 0;
    long status;
    int rc = refwd_http_call(ctx->http, "/apply-template", body, &reply, &len, &status, err);
    free(body);
    if (!rc) {
        json_t *r = json_loadb(reply, len, JSON_ALLOW_NUL, NULL);
        json_t *pr = json_is_object(r) ? json_object_get(r, "prompt") : NULL;
        if (json_is_string(pr))
            *text = strdup(json_string_value(pr));
        else
            rc = gguf_error_setf(err, GGUF_E_BAD_VALUE, 0,
                                 "POST %s/apply-template: reply: prompt: missing",
                                 refwd_http_url(ctx->http));
        json_decref(r);
    }
    free(reply);
    return rc;
}

static const char *const *vocab_table(ce_ctx *ctx)
{
    if (ctx->vocab)
        return ctx->vocab;
    const char **v = calloc((size_t)ctx->n_vocab, sizeof *v);
    if (!v)
        return NULL;
    char buf[512];
    for (int64_t i = 0; i < ctx->n_vocab; i++) {
        int l = gguf_fwd_token_text(ctx->meta, (int32_t)i, buf, sizeof buf);
        /* control tokens come out empty: engines write their markup */
        v[i] = l > 0 ? strdup(buf) : NULL;
    }
    ctx->vocab = v;
    return v;
}

static bool needs_ids(const gguf_engine_reply *r)
{
    for (int64_t i = 0; i < r->n_pos; i++) {
        if (r->pos[i].id < 0)
            return true;
        for (int32_t k = 0; k < r->pos[i].n_top; k++)
            if (r->pos[i].top[k].id < 0)
                return true;
    }
    return false;
}

/* Our tokenizer on the prompt text, against the engine's ids. */
static void check_tokenization(ce_ctx *ctx, const char *text, ce_result *r)
{
    gguf_tokenizer *tk = NULL;
    gguf_error e = {0};
    r->tok_match = -1;
    if (gguf_tokenizer_create(&tk, ctx->set, &e)) {
        ce_fmt(r->tok_note, sizeof r->tok_note, "not checked: %s", e.message);
        return;
    }
    int rc = gguf_tokenize(tk, text, strlen(text), gguf_tokenizer_add_bos(tk), &r->our_ids,
                           &r->n_our_ids, &e);
    gguf_tokenizer_free(tk);
    if (rc) {
        ce_fmt(r->tok_note, sizeof r->tok_note, "not checked: %s", e.message);
        return;
    }
    int64_t i = 0;
    while (i < r->n_our_ids && i < r->n_seq_prompt && r->our_ids[i] == r->seq[i])
        i++;
    r->tok_match = i == r->n_our_ids && i == r->n_seq_prompt;
    if (r->tok_match)
        snprintf(r->tok_note, sizeof r->tok_note, "ours agrees (%lld tokens)",
                 (long long)r->n_our_ids);
    else
        snprintf(r->tok_note, sizeof r->tok_note,
                 "ours DIFFERS at token %lld (engine %lld tokens, ours %lld)", (long long)i,
                 (long long)r->n_seq_prompt, (long long)r->n_our_ids);
}

int ce_query(ce_ctx *ctx, const ce_prompt *p, ce_result *r, gguf_error *err)
{
    const gguf_engine_endpoint ep = ce_endpoint(ctx, p);
    const char *path = gguf_engine_endpoint_path(ep);
    r->endpoint = ep;
    r->tok_match = -1;
    gguf_engine_request rq = {0};
    rq.api = ctx->api;
    rq.endpoint = ep;
    rq.model = ep == GGUF_EP_GENERATE || ep == GGUF_EP_COMPLETION ? NULL : ctx->served_model;
    rq.text = p->text;
    rq.tokens = p->tokens;
    rq.n_tokens = p->n_tokens;
    rq.chat = p->chat;
    rq.messages = p->messages;
    rq.max_tokens = ctx->n_predict;
    rq.top_k = ctx->top_k;
    /* prompt log-probabilities where the dialect has them (OpenAI echo,
     * vLLM prompt_logprobs, SGLang logprob_start_len); llama-server has none,
     * and OpenAI's chat has no echo */
    rq.echo = !ctx->no_echo && ctx->api != GGUF_API_LLAMA_SERVER &&
              (ep != GGUF_EP_CHAT || ctx->api == GGUF_API_VLLM);
    char *body = NULL;
    size_t len = 0;
    int rc = post(ctx, &rq, &body, &len, err);
    if (!rc && (rc = gguf_engine_reply_parse(&r->reply, ep, body, len, err)))
        with_url(err, rc, ctx, path);
    free(body);
    if (rc)
        return rc;
    gguf_engine_reply *rp = r->reply;
    if (rp->n_pos - rp->n_prompt <= 0)
        return gguf_error_setf(err, GGUF_E_BAD_VALUE, 0,
                               "POST %s%s: the reply has no log-probabilities of generated "
                               "tokens (does the server return logprobs?)",
                               refwd_http_url(ctx->http), path);
    if (ep == GGUF_EP_CHAT && ctx->api == GGUF_API_SGLANG && !rp->prompt_ids)
        /* its /tokenize takes no messages: the reply is the only source */
        return gguf_error_setf(err, GGUF_E_UNSUPPORTED, 0,
                               "POST %s%s: the reply has no prompt_token_ids (SGLang before "
                               "0.5.13 ignores return_prompt_token_ids): use --prompt or "
                               "--tokens (its /generate)",
                               refwd_http_url(ctx->http), path);
    if (ctx->no_echo)
        ce_note(r, "--no-echo: generated positions only");
    else if (!rq.echo || rp->n_prompt == 0)
        ce_note(r, "%s: no prompt log-probabilities: generated positions only",
                gguf_engine_api_name(ctx->api));

    /* the prompt's ids as the engine saw them */
    int32_t *ids = NULL;
    int64_t n_ids = 0;
    char *templated = NULL;
    bool differs = false;
    if (p->tokens) {
        ids = malloc((size_t)p->n_tokens * sizeof *ids);
        if (!ids)
            return gguf_error_setf(err, GGUF_E_NOMEM, 0, "out of memory");
        memcpy(ids, p->tokens, (size_t)p->n_tokens * sizeof *ids);
        n_ids = p->n_tokens;
        r->prompt_ids_from = "request";
        differs = rp->prompt_ids &&
                  (rp->n_prompt_ids != n_ids ||
                   memcmp(rp->prompt_ids, ids, (size_t)n_ids * sizeof *ids) != 0);
        if (differs)
            ce_note(r, "the engine reports prompt ids that differ from the ids sent: "
                       "its own are used");
    }
    if (rp->prompt_ids && (!ids || differs)) {
        free(ids);
        ids = malloc((size_t)(rp->n_prompt_ids ? rp->n_prompt_ids : 1) * sizeof *ids);
        if (!ids)
            return gguf_error_setf(err, GGUF_E_NOMEM, 0, "out of memory");
        memcpy(ids, rp->prompt_ids, (size_t)rp->n_prompt_ids * sizeof *ids);
        n_ids = rp->n_prompt_ids;
        r->prompt_ids_from = "reply";
    }
    if (!ids && ep == GGUF_EP_CHAT && ctx->api == GGUF_API_LLAMA_SERVER) {
        if ((rc = apply_template(ctx, p, &templated, err)))
            return rc;
        rc = engine_tokenize(ctx, p, templated, &ids, &n_ids, err);
        free(templated);
        if (rc)
            return rc;
        r->prompt_ids_from = "/apply-template + /tokenize";
    } else if (!ids && ep == GGUF_EP_CHAT) {
        if ((rc = engine_tokenize(ctx, p, NULL, &ids, &n_ids, err)))
            return rc;
        r->prompt_ids_from = "/tokenize";
    } else if (!ids && rp->n_prompt > 0) {
        /* the echo is the whole prompt (OpenAI echo) */
        if (needs_ids(rp) && !vocab_table(ctx))
            return gguf_error_setf(err, GGUF_E_NOMEM, 0, "out of memory");
        gguf_engine_reply_resolve(rp, ctx->vocab, ctx->vocab ? ctx->n_vocab : 0, NULL, 0);
        bool all = true;
        for (int64_t i = 0; i < rp->n_prompt; i++)
            all = all && rp->pos[i].id >= 0;
        if (all) {
            ids = malloc((size_t)rp->n_prompt * sizeof *ids);
            if (!ids)
                return gguf_error_setf(err, GGUF_E_NOMEM, 0, "out of memory");
            for (int64_t i = 0; i < rp->n_prompt; i++)
                ids[i] = rp->pos[i].id;
            n_ids = rp->n_prompt;
            r->prompt_ids_from = "echo";
        }
    }
    if (!ids) {
        gguf_error e = {0};
        rc = engine_tokenize(ctx, p, p->text, &ids, &n_ids, &e);
        if (rc) {
            free(ids);
            return gguf_error_setf(err, rc == GGUF_E_IO ? GGUF_E_IO : GGUF_E_UNSUPPORTED, 0,
                                   "cannot learn the engine's prompt token ids (no ids in the "
                                   "reply, no echo, %s): give --tokens",
                                   e.message);
        }
        r->prompt_ids_from = "/tokenize";
    }
    if (rp->n_prompt > n_ids) {
        free(ids);
        return gguf_error_setf(err, GGUF_E_BAD_VALUE, 0,
                               "POST %s%s: reply: %lld prompt positions for a prompt of %lld "
                               "tokens", refwd_http_url(ctx->http), path,
                               (long long)rp->n_prompt, (long long)n_ids);
    }

    /* ids for text-only positions and alternatives */
    if (needs_ids(rp) && !vocab_table(ctx)) {
        free(ids);
        return gguf_error_setf(err, GGUF_E_NOMEM, 0, "out of memory");
    }
    gguf_engine_reply_resolve(rp, ctx->vocab, ctx->vocab ? ctx->n_vocab : 0, ids, n_ids);
    for (int64_t i = 0; i < rp->n_pos; i++) {
        const gguf_engine_pos *q = &rp->pos[i];
        if (q->id >= 0)
            continue;
        free(ids);
        return gguf_error_setf(err, GGUF_E_UNSUPPORTED, 0,
                               "%s position %lld: the engine wrote the token as text only "
                               "('%s') and it matches no single token of the vocabulary: "
                               "ask for ids (--api vllm sends return_tokens_as_token_ids)",
                               q->prompt ? "prompt" : "generated",
                               (long long)(q->prompt ? i : i - rp->n_prompt),
                               q->text ? q->text : "");
    }
    for (int64_t i = 0; i < rp->n_prompt; i++)
        if (rp->pos[i].id != ids[n_ids - rp->n_prompt + i]) {
            free(ids);
            return gguf_error_setf(err, GGUF_E_BAD_VALUE, 0,
                                   "POST %s%s: reply: echoed prompt position %lld is token %d, "
                                   "the engine's prompt has %d there",
                                   refwd_http_url(ctx->http), path, (long long)i,
                                   rp->pos[i].id, ids[n_ids - rp->n_prompt + i]);
        }

    /* the teacher-forced sequence */
    const int64_t n_gen = rp->n_pos - rp->n_prompt;
    r->seq = malloc((size_t)(n_ids + n_gen) * sizeof *r->seq);
    if (!r->seq) {
        free(ids);
        return gguf_error_setf(err, GGUF_E_NOMEM, 0, "out of memory");
    }
    memcpy(r->seq, ids, (size_t)n_ids * sizeof *ids);
    for (int64_t j = 0; j < n_gen; j++)
        r->seq[n_ids + j] = rp->pos[rp->n_prompt + j].id;
    r->n_seq_prompt = n_ids;
    r->n_seq = n_ids + n_gen;
    free(ids);
    if (rp->gen_ids && (rp->n_gen_ids != n_gen ||
                        memcmp(rp->gen_ids, r->seq + n_ids, (size_t)n_gen * sizeof(int32_t))))
        ce_note(r, "the reply's token ids (%lld) differ from its log-probability positions "
                   "(%lld): the positions are used", (long long)rp->n_gen_ids, (long long)n_gen);
    for (int64_t i = 0; i < r->n_seq; i++)
        if (r->seq[i] >= ctx->n_vocab)
            return gguf_error_setf(err, GGUF_E_BAD_VALUE, 0,
                                   "the engine's token %d (sequence index %lld) is outside the "
                                   "reference's vocabulary of %lld: another model?",
                                   r->seq[i], (long long)i, (long long)ctx->n_vocab);
    if (p->text)
        check_tokenization(ctx, p->text, r);
    else
        snprintf(r->tok_note, sizeof r->tok_note, "%s",
                 p->tokens ? "not applicable (token ids given)"
                           : "not checked (the engine applied its chat template)");
    return 0;
}
