/* ref-forward check-engine: one prompt against the engine. The request in
 * the engine's dialect, the reply, and the prompt's token ids as the engine
 * saw them (from the request, the reply, its /tokenize or its echo), so that
 * the reference is teacher-forced on exactly the engine's tokens. */
#include <math.h>
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

/* POST a body built from rq to its endpoint; *status: the HTTP status (0
 * when none came). */
static int post_status(ce_ctx *ctx, const gguf_engine_request *rq, char **reply, size_t *len,
                       long *status, gguf_error *err)
{
    char *body = NULL;
    *status = 0;
    int rc = gguf_engine_request_build(&body, rq, err);
    if (rc)
        return rc;
    rc = refwd_http_call(ctx->http, gguf_engine_endpoint_path(rq->endpoint), body, reply,
                               len, status, err);
    free(body);
    return rc;
}

static int post(ce_ctx *ctx, const gguf_engine_request *rq, char **reply, size_t *len,
                gguf_error *err)
{
    long status;
    return post_status(ctx, rq, reply, len, &status, err);
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
    const char *path = "/tokenize";
    int rc = post(ctx, &rq, &reply, &len, err);
    if (rc == GGUF_E_NOT_FOUND && text && ctx->api == GGUF_API_OPENAI) {
        /* llama-cpp-python's server: /extras/tokenize {"input"} (its
         * llama_cpp/server/app.py), BOS added as its completions add it */
        json_t *o = json_pack("{s:s}", "input", text);
        char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        long status;
        free(reply);
        reply = NULL;
        path = "/extras/tokenize";
        rc = body ? refwd_http_call(ctx->http, path, body, &reply, &len, &status, err)
                  : gguf_error_setf(err, GGUF_E_NOMEM, 0, "out of memory");
        free(body);
    }
    if (!rc && (rc = gguf_engine_tokens_parse(ids, n, reply, len, err)))
        with_url(err, rc, ctx, path);
    if (!rc && *n == 0) {
        free(*ids);
        *ids = NULL;
        rc = gguf_error_setf(err, GGUF_E_BAD_VALUE, 0,
                             "POST %s%s: reply: tokens: empty (a prompt has at least one "
                             "token)", refwd_http_url(ctx->http), path);
    }
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

/* Whether a piece can name a token when an engine writes it as text: engines
 * write UTF-8 in JSON, so a piece that is empty, holds a NUL or is not whole
 * UTF-8 (a byte token, part of a character) never appears as itself; vLLM
 * writes such tokens as "" (docs/check-engine.md), which names no token. */
static bool piece_nameable(const char *s, size_t n)
{
    if (n == 0 || memchr(s, 0, n))
        return false;
    for (size_t i = 0; i < n;) {
        const unsigned char c = (unsigned char)s[i];
        const size_t l = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3
                       : (c & 0xF8) == 0xF0 ? 4 : 0;
        if (!l || i + l > n)
            return false;
        for (size_t k = 1; k < l; k++)
            if (((unsigned char)s[i + k] & 0xC0) != 0x80)
                return false;
        i += l;
    }
    return true;
}

static int add_text(ce_ctx *ctx, const char *s, size_t n, int32_t id)
{
    char *copy = strndup(s, n);
    if (!copy)
        return -1;
    ctx->texts[ctx->n_texts].text = copy;
    ctx->texts[ctx->n_texts++].id = id;
    return 0;
}

/* The texts an engine may write for each token: its piece, special tokens'
 * markup included (engines echo "<|system|>" as it is); with a SentencePiece
 * vocabulary also the piece without its leading space, as HF's decoder writes
 * a token alone (vLLM: "friend" for "▁friend", which "friend" also writes:
 * such a text then names neither). NULL when there is no vocabulary. */
static const gguf_engine_text *text_table(ce_ctx *ctx)
{
    if (ctx->texts || !ctx->tok)
        return ctx->texts;
    ctx->texts = calloc((size_t)ctx->n_vocab * 2, sizeof *ctx->texts);
    if (!ctx->texts)
        return NULL;
    const bool spm = gguf_tokenizer_type(ctx->tok) == GGUF_TOK_SPM;
    for (int64_t i = 0; i < ctx->n_vocab; i++) {
        const char *piece;
        size_t len;
        if (gguf_token_piece(ctx->tok, (int32_t)i, true, &piece, &len) != 0 ||
            !piece_nameable(piece, len))
            continue;
        if (add_text(ctx, piece, len, (int32_t)i) ||
            (spm && len > 1 && piece[0] == ' ' && add_text(ctx, piece + 1, len - 1, (int32_t)i)))
            return NULL;
    }
    return ctx->texts;
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
    gguf_error e = {0};
    r->tok_match = -1;
    if (!ctx->tok) {
        snprintf(r->tok_note, sizeof r->tok_note,
                 "not checked (no GGUF vocabulary: give --vocab MODEL.gguf)");
        return;
    }
    if (gguf_tokenize(ctx->tok, text, strlen(text), gguf_tokenizer_add_bos(ctx->tok), &r->our_ids,
                      &r->n_our_ids, &e)) {
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

/* Ids of the echoed prompt from its text alone (OpenAI echo without ids):
 * every position must name one token. rp is left as it was. */
static int ids_from_echo(ce_ctx *ctx, gguf_engine_reply *rp, int32_t **ids, int64_t *n)
{
    *ids = NULL;
    *n = 0;
    if (!text_table(ctx))
        return ctx->tok ? GGUF_E_NOMEM : 0;
    int32_t *saved = malloc((size_t)rp->n_prompt * sizeof *saved);
    if (!saved)
        return GGUF_E_NOMEM;
    for (int64_t i = 0; i < rp->n_prompt; i++)
        saved[i] = rp->pos[i].id;
    if (gguf_engine_reply_resolve(rp, ctx->texts, ctx->n_texts, NULL, 0) < 0) {
        free(saved);
        return GGUF_E_NOMEM;
    }
    bool all = true;
    for (int64_t i = 0; i < rp->n_prompt; i++) {
        all = all && rp->pos[i].id >= 0;
        const int32_t id = rp->pos[i].id;
        rp->pos[i].id = saved[i];
        saved[i] = id;
    }
    if (all) {
        *ids = saved;
        *n = rp->n_prompt;
    } else {
        free(saved);
    }
    return 0;
}

/* The first index where two id lists differ, -1 when equal. */
static int64_t first_difference(const int32_t *a, int64_t na, const int32_t *b, int64_t nb)
{
    int64_t i = 0;
    while (i < na && i < nb && a[i] == b[i])
        i++;
    return i == na && i == nb ? -1 : i;
}

/* ---- llama-server, one token per request ----
 * llama-server answers HTTP 500 ("Failed to parse input at pos 0") when the
 * text it generated is not valid UTF-8 (its chat parser, llama.cpp issue
 * 27543), which is what a broken model writes; and it returns no prompt
 * log-probabilities. Both are met by asking for one token (n_predict 1) over
 * a prefix of token ids: the engine's next token and its top K there. */

/* One token after ids[0..n). *have: the reply scored it (llama-server writes
 * no probabilities for a token that ends inside a character); *pos then owns
 * the position (free with pos_clear). *tok: the token it generated, -1 none;
 * *eos: it stopped at the end of text. *status: the HTTP status. */
static int llama_next(ce_ctx *ctx, const int32_t *ids, int64_t n, gguf_engine_pos *pos,
                      bool *have, int32_t *tok, bool *eos, long *status, gguf_error *err)
{
    gguf_engine_request rq = {0};
    rq.api = ctx->api;
    rq.endpoint = GGUF_EP_COMPLETION;
    rq.tokens = ids;
    rq.n_tokens = n;
    rq.max_tokens = 1;
    rq.top_k = ctx->top_k;
    char *body = NULL;
    size_t len = 0;
    gguf_engine_reply *rp = NULL;
    *have = false;
    *tok = -1;
    *eos = false;
    int rc = post_status(ctx, &rq, &body, &len, status, err);
    if (!rc && (rc = gguf_engine_reply_parse(&rp, GGUF_EP_COMPLETION, body, len, err)))
        with_url(err, rc, ctx, "/completion");
    free(body);
    if (rc)
        return rc;
    if (rp->n_pos > rp->n_prompt) {
        *pos = rp->pos[rp->n_prompt];
        memset(&rp->pos[rp->n_prompt], 0, sizeof rp->pos[0]); /* moved out */
        *have = true;
    }
    *tok = rp->n_gen_ids > 0 ? rp->gen_ids[0] : *have ? pos->id : -1;
    *eos = rp->finish_reason && strcmp(rp->finish_reason, "eos") == 0;
    gguf_engine_reply_free(rp);
    return 0;
}

static void pos_clear(gguf_engine_pos *q)
{
    for (int32_t k = 0; k < q->n_top; k++)
        free(q->top[k].text);
    free(q->top);
    free(q->text);
    memset(q, 0, sizeof *q);
}

/* The prompt's ids as llama-server runs them: given, or from its /tokenize
 * (text: BOS added as its completions add it; chat: its template first). */
static int llama_prompt_ids(ce_ctx *ctx, const ce_prompt *p, int32_t **ids, int64_t *n,
                            gguf_error *err)
{
    if (p->tokens) {
        *ids = malloc((size_t)p->n_tokens * sizeof **ids);
        if (!*ids)
            return gguf_error_setf(err, GGUF_E_NOMEM, 0, "out of memory");
        memcpy(*ids, p->tokens, (size_t)p->n_tokens * sizeof **ids);
        *n = p->n_tokens;
        return 0;
    }
    if (p->text)
        return engine_tokenize(ctx, p, p->text, ids, n, err);
    char *templated = NULL;
    int rc = apply_template(ctx, p, &templated, err);
    if (!rc)
        rc = engine_tokenize(ctx, p, templated, ids, n, err);
    free(templated);
    return rc;
}

/* The whole generation failed with HTTP 500 (why: msg): the engine's tokens
 * one request at a time, each over the prompt and the tokens before it, into
 * r->reply (generated positions only). */
static int llama_token_by_token(ce_ctx *ctx, const ce_prompt *p, ce_result *r, const char *msg,
                                gguf_error *err)
{
    int32_t *seq = NULL;
    int64_t n_ids = 0;
    int rc = llama_prompt_ids(ctx, p, &seq, &n_ids, err);
    if (rc)
        return rc;
    int32_t *grown = realloc(seq, (size_t)(n_ids + ctx->n_predict) * sizeof *seq);
    gguf_engine_reply *rp = calloc(1, sizeof *rp);
    if (rp) {
        rp->pos = calloc((size_t)ctx->n_predict, sizeof *rp->pos);
        rp->gen_ids = malloc((size_t)ctx->n_predict * sizeof *rp->gen_ids);
    }
    if (!grown || !rp || !rp->pos || !rp->gen_ids) {
        free(grown ? grown : seq);
        gguf_engine_reply_free(rp);
        return gguf_error_setf(err, GGUF_E_NOMEM, 0, "out of memory");
    }
    seq = grown;
    rp->completion_tokens = -1;
    rp->found = GGUF_REPLY_LLAMA;
    int64_t n_unscored = 0;
    for (int64_t j = 0; j < ctx->n_predict; j++) {
        gguf_engine_pos q = {0};
        bool have, eos;
        int32_t tok;
        long status;
        gguf_error e = {0};
        rc = llama_next(ctx, seq, n_ids + j, &q, &have, &tok, &eos, &status, &e);
        if (rc && status == 500 && j > 0) {
            /* this token alone is not UTF-8 either: what came before stands */
            ce_note(r, "generated position %lld: HTTP 500 on that token alone too: compared up "
                       "to it", (long long)j);
            rc = 0;
            break;
        }
        if (rc && status == 500) {
            /* not even its first token alone: no generated position can be
             * read; the prompt's positions give the verdict (the caller scores
             * them by prefix) */
            ce_note(r, "llama-server answered HTTP 500 on its first generated token alone too: "
                       "no generated position compared");
            rc = 0;
            break;
        }
        if (rc) {
            *err = e;
            break;
        }
        if (tok < 0) {
            rc = gguf_error_setf(err, GGUF_E_BAD_VALUE, 0, "POST %s/completion: n_predict 1 "
                                 "over %lld tokens: reply: no generated token",
                                 refwd_http_url(ctx->http), (long long)(n_ids + j));
            break;
        }
        if (!have) {
            /* no probabilities for a token inside a character: in the sequence,
             * not compared */
            q = (gguf_engine_pos){.id = tok, .logprob = NAN, .unscored = true};
            n_unscored++;
        }
        rp->pos[rp->n_pos++] = q;
        rp->gen_ids[rp->n_gen_ids++] = tok;
        seq[n_ids + j] = tok;
        if (eos)
            break;
    }
    free(seq);
    if (rc) {
        gguf_engine_reply_free(rp);
        return rc;
    }
    r->reply = rp;
    ce_note(r, "llama-server answered the whole generation with HTTP 500 (%.80s): asked one "
               "token per request over its own tokens (%lld answered)", msg,
            (long long)rp->n_pos);
    if (n_unscored)
        ce_note(r, "%lld generated token(s) inside a character came without probabilities: "
                   "in the sequence, not compared", (long long)n_unscored);
    return 0;
}

/* llama-server writes no probabilities for a generated token whose text ends
 * inside a character (server-context.cpp process_token: add_token only when
 * the text is complete), while `tokens` lists every token: such tokens become
 * unscored positions, in the sequence and not compared. @return the number
 * put in, -1 when the lists do not align (left to the caller's check), or
 * GGUF_E_NOMEM. */
static int64_t llama_align(gguf_engine_reply *rp)
{
    const int64_t n_gen = rp->n_pos - rp->n_prompt;
    if (!rp->gen_ids || rp->n_gen_ids <= n_gen)
        return 0;
    gguf_engine_pos *np = calloc((size_t)(rp->n_prompt + rp->n_gen_ids), sizeof *np);
    if (!np)
        return GGUF_E_NOMEM;
    int64_t k = 0, added = 0;
    for (int64_t j = 0; j < rp->n_gen_ids; j++) {
        gguf_engine_pos *dst = &np[rp->n_prompt + j];
        if (k < n_gen && rp->pos[rp->n_prompt + k].id == rp->gen_ids[j]) {
            *dst = rp->pos[rp->n_prompt + k++];
        } else {
            *dst = (gguf_engine_pos){.id = rp->gen_ids[j], .logprob = NAN, .unscored = true};
            added++;
        }
    }
    if (k < n_gen) {
        free(np);
        return -1;
    }
    memcpy(np, rp->pos, (size_t)rp->n_prompt * sizeof *np);
    free(rp->pos);
    rp->pos = np;
    rp->n_pos = rp->n_prompt + rp->n_gen_ids;
    return added;
}

/* --prompt-by-prefix: prompt positions 1.. of ids scored as the engine's next
 * token after each prefix, put in front of rp's generated positions: the
 * engine's top K there, the prompt token's log-probability where it is among
 * them (else its alternatives alone are compared). */
static int llama_score_prompt(ce_ctx *ctx, ce_result *r, gguf_engine_reply *rp,
                              const int32_t *ids, int64_t n_ids, gguf_error *err)
{
    gguf_engine_pos *np = calloc((size_t)(n_ids + rp->n_pos), sizeof *np);
    if (!np)
        return gguf_error_setf(err, GGUF_E_NOMEM, 0, "out of memory");
    np[0] = (gguf_engine_pos){.id = ids[0], .logprob = NAN, .prompt = true};
    int64_t n_failed = 0;
    for (int64_t i = 1; i < n_ids; i++) {
        gguf_engine_pos q = {0};
        bool have, eos;
        int32_t tok;
        long status;
        gguf_error e = {0};
        int rc = llama_next(ctx, ids, i, &q, &have, &tok, &eos, &status, &e);
        if (rc && status != 500) {
            for (int64_t k = 0; k < i; k++)
                pos_clear(&np[k]);
            free(np);
            *err = e;
            return rc;
        }
        if (rc || !have) {
            /* its next token is not UTF-8 (500) or inside a character (no
             * probabilities): the position is in the sequence, not compared */
            np[i] = (gguf_engine_pos){.id = ids[i], .logprob = NAN, .prompt = true,
                                      .unscored = true};
            n_failed++;
            continue;
        }
        free(q.text);
        q.text = NULL;
        q.logprob = NAN;
        for (int32_t k = 0; k < q.n_top; k++)
            if (q.top[k].id == ids[i])
                q.logprob = q.top[k].logprob;
        q.id = ids[i];
        q.prompt = true;
        np[i] = q;
    }
    memcpy(np + n_ids, rp->pos, (size_t)rp->n_pos * sizeof *np);
    free(rp->pos);
    rp->pos = np;
    rp->n_pos += n_ids;
    rp->n_prompt = n_ids;
    if (n_failed == n_ids - 1 && rp->n_pos == n_ids)
        return gguf_error_setf(err, GGUF_E_IO, 0, "POST %s/completion: llama-server failed on "
                               "every request (HTTP 500 or no probabilities for each next token: "
                               "its text is not UTF-8 at every step): no position to compare",
                               refwd_http_url(ctx->http));
    ce_note(r, "prompt positions by prefix: %lld scored one request each (n_predict 1 over each "
               "prefix)%s", (long long)(n_ids - 1 - n_failed),
            n_failed ? ", the others gave no probabilities: not compared" : "");
    return 0;
}

int ce_query(ce_ctx *ctx, const ce_prompt *p, ce_result *r, gguf_error *err)
{
    const gguf_engine_endpoint ep = ce_endpoint(ctx, p);
    const char *path = gguf_engine_endpoint_path(ep);
    r->endpoint = ep;
    r->tok_match = -1;
    r->prompt_mismatch = -1;
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
    long status;
    int rc = post_status(ctx, &rq, &body, &len, &status, err);
    bool by_prefix = ctx->prompt_by_prefix;
    if (rc && status == 500 && ctx->api == GGUF_API_LLAMA_SERVER &&
        (ep == GGUF_EP_COMPLETION || ep == GGUF_EP_CHAT)) {
        /* llama-server fails on a generation that is not UTF-8: a verdict all
         * the same, one token per request */
        char msg[sizeof err->message];
        snprintf(msg, sizeof msg, "%s", err->message);
        rc = llama_token_by_token(ctx, p, r, msg, err);
        /* no generated position: the prompt's, by prefix, still give a verdict */
        by_prefix |= !rc && r->reply->n_pos == 0 && !ctx->no_echo;
    } else if (!rc && (rc = gguf_engine_reply_parse(&r->reply, ep, body, len, err))) {
        with_url(err, rc, ctx, path);
    }
    free(body);
    if (rc)
        return rc;
    gguf_engine_reply *rp = r->reply;
    if (rq.echo && (rp->found & GGUF_REPLY_LEGACY) && !(rp->found & GGUF_REPLY_PROMPT_LOGPROBS) &&
        rp->completion_tokens < 0)
        /* an echo without the count cannot be split into prompt and generated */
        return gguf_error_setf(err, GGUF_E_BAD_VALUE, 0,
                               "POST %s%s: reply: usage.completion_tokens: missing (the echoed "
                               "prompt cannot be told from the generated tokens)",
                               refwd_http_url(ctx->http), path);
    if (rp->n_pos - rp->n_prompt <= 0 && !by_prefix)
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
    else if ((!rq.echo || rp->n_prompt == 0) && !by_prefix)
        ce_note(r, "%s: no prompt log-probabilities: generated positions only",
                gguf_engine_api_name(ctx->api));

    /* the prompt's ids as the engine saw them */
    int32_t *ids = NULL;
    int64_t n_ids = 0;
    char *templated = NULL;
    if (p->tokens) {
        ids = malloc((size_t)p->n_tokens * sizeof *ids);
        if (!ids)
            return gguf_error_setf(err, GGUF_E_NOMEM, 0, "out of memory");
        memcpy(ids, p->tokens, (size_t)p->n_tokens * sizeof *ids);
        n_ids = p->n_tokens;
        r->prompt_ids_from = "request";
        /* an engine that ran other ids than those sent answered another prompt:
         * a finding about the deployment, compared on the engine's own ids */
        if (rp->prompt_ids) {
            const int64_t d = first_difference(ids, n_ids, rp->prompt_ids, rp->n_prompt_ids);
            if (d >= 0) {
                r->prompt_mismatch = d;
                r->sent_id = d < n_ids ? ids[d] : -1;
                r->engine_id = d < rp->n_prompt_ids ? rp->prompt_ids[d] : -1;
                free(ids);
                ids = NULL;
            }
        }
    }
    if (rp->prompt_ids && !ids) {
        if (rp->n_prompt_ids == 0)
            return gguf_error_setf(err, GGUF_E_BAD_VALUE, 0,
                                   "POST %s%s: reply: prompt_token_ids: empty",
                                   refwd_http_url(ctx->http), path);
        ids = malloc((size_t)rp->n_prompt_ids * sizeof *ids);
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
        if ((rc = engine_tokenize(ctx, p, NULL, &ids, &n_ids, err)) == GGUF_E_NOT_FOUND)
            return gguf_error_setf(err, GGUF_E_UNSUPPORTED, 0,
                                   "the engine's chat reply has no prompt ids and it has no "
                                   "/tokenize for messages (%s): check it with --prompt or "
                                   "--tokens", refwd_http_url(ctx->http));
        if (rc)
            return rc;
        r->prompt_ids_from = "/tokenize";
    } else if (!ids && rp->n_prompt > 0) {
        /* the echo is the whole prompt (OpenAI echo) when each piece names a token */
        if ((rc = ids_from_echo(ctx, rp, &ids, &n_ids)))
            return gguf_error_setf(err, rc, 0, "out of memory");
        if (ids)
            r->prompt_ids_from = "echo";
    }
    if (!ids) {
        gguf_error e = {0};
        rc = engine_tokenize(ctx, p, p->text, &ids, &n_ids, &e);
        if (rc) {
            free(ids);
            return gguf_error_setf(err, rc == GGUF_E_IO ? GGUF_E_IO : GGUF_E_UNSUPPORTED, 0,
                                   "cannot learn the engine's prompt token ids (no ids in the "
                                   "reply, no echo that names each token, %s): give --tokens",
                                   e.message);
        }
        r->prompt_ids_from = "/tokenize";
    }
    if (n_ids == 0) {
        free(ids);
        return gguf_error_setf(err, GGUF_E_BAD_VALUE, 0,
                               "POST %s%s: the engine's prompt has no tokens (%s)",
                               refwd_http_url(ctx->http), path, r->prompt_ids_from);
    }
    if (rp->n_prompt > n_ids) {
        free(ids);
        return gguf_error_setf(err, GGUF_E_BAD_VALUE, 0,
                               "POST %s%s: reply: %lld prompt positions for a prompt of %lld "
                               "tokens", refwd_http_url(ctx->http), path,
                               (long long)rp->n_prompt, (long long)n_ids);
    }

    /* every engine-given id of an echoed position must be the prompt's: any
     * other is a reply that contradicts itself */
    for (int64_t i = 0; i < rp->n_prompt; i++) {
        gguf_engine_pos *q = &rp->pos[i];
        const int32_t want = ids[n_ids - rp->n_prompt + i];
        if (ctx->api == GGUF_API_SGLANG && q->id == 0 && want != 0 && want >= ctx->n_vocab - 1) {
            /* SGLang reports an input id of vocab_size - 1 and over as 0, and
             * scores that id: the prompt's token stands, its logprob is unknown */
            q->id = want;
            q->logprob = NAN;
            for (int32_t k = 0; k < q->n_top; k++)
                free(q->top[k].text);
            free(q->top);
            q->top = NULL;
            q->n_top = 0;
            ce_note(r, "prompt position %lld: SGLang reported token %d as 0 (ids from "
                       "vocab_size - 1 on): not compared", (long long)i, want);
        }
    }
    for (int64_t i = 0; i < rp->n_prompt; i++)
        if (rp->pos[i].id >= 0 && rp->pos[i].id != ids[n_ids - rp->n_prompt + i]) {
            const int32_t got = rp->pos[i].id, want = ids[n_ids - rp->n_prompt + i];
            free(ids);
            return gguf_error_setf(err, GGUF_E_BAD_VALUE, 0,
                                   "POST %s%s: reply: echoed prompt position %lld is token %d, "
                                   "the engine's prompt has %d there",
                                   refwd_http_url(ctx->http), path, (long long)i, got, want);
        }

    if (ctx->api == GGUF_API_LLAMA_SERVER) {
        const int64_t added = llama_align(rp);
        if (added == GGUF_E_NOMEM) {
            free(ids);
            return gguf_error_setf(err, GGUF_E_NOMEM, 0, "out of memory");
        }
        if (added > 0)
            ce_note(r, "%lld generated token(s) inside a character came without probabilities "
                       "(llama-server scores only the token that completes one): in the "
                       "sequence, not compared", (long long)added);
    }
    if (by_prefix && rp->n_prompt == 0 &&
        (rc = llama_score_prompt(ctx, r, rp, ids, n_ids, err))) {
        free(ids);
        return rc;
    }

    /* ids for text-only positions and alternatives: prompt positions from the
     * prompt's ids, generated ones from their text where it names one token */
    if (needs_ids(rp) && !text_table(ctx) && ctx->tok) {
        free(ids);
        return gguf_error_setf(err, GGUF_E_NOMEM, 0, "out of memory");
    }
    gguf_engine_reply_resolve(rp, ctx->texts, ctx->n_texts, ids, n_ids);
    for (int64_t j = 0; rp->gen_ids && j < rp->n_gen_ids && rp->n_prompt + j < rp->n_pos; j++)
        if (rp->pos[rp->n_prompt + j].id < 0) /* the reply's own ids (vLLM token_ids) */
            rp->pos[rp->n_prompt + j].id = rp->gen_ids[j];
    int64_t cut = -1;
    for (int64_t i = rp->n_prompt; i < rp->n_pos && cut < 0; i++)
        if (rp->pos[i].id < 0)
            cut = i;
    if (cut >= 0) {
        /* a token the text does not name (vLLM writes a piece that is part of a
         * character as "", and its whole text as U+FFFD): its alternatives are
         * compared, the tokens after it cannot be teacher-forced */
        const gguf_engine_pos *q = &rp->pos[cut];
        r->n_unresolved = rp->n_pos - cut - 1;
        ce_note(r, "generated position %lld: the engine wrote the token as %s%s%s, which names "
                   "no single token: its alternatives are compared, not its token, and the %lld "
                   "positions after it are not compared (ask for ids: --api vllm)",
                (long long)(cut - rp->n_prompt), q->text ? "\"" : "no text",
                q->text ? q->text : "", q->text ? "\"" : "", (long long)r->n_unresolved);
        gguf_engine_reply_truncate(rp, cut + 1);
    }

    /* the teacher-forced sequence */
    const int64_t n_gen = rp->n_pos - rp->n_prompt;
    if (ctx->max_positions > 0 && n_ids + n_gen > ctx->max_positions) {
        free(ids);
        return gguf_error_setf(err, GGUF_E_LIMIT, 0,
                               "the engine's sequence has %lld tokens (%lld prompt, %lld "
                               "generated), over the limit of %lld (the model's context length "
                               "or --max-positions)",
                               (long long)(n_ids + n_gen), (long long)n_ids, (long long)n_gen,
                               (long long)ctx->max_positions);
    }
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
    /* generated ids that contradict the log-probability positions: the reply
     * is not one answer (ids past a cut position were not compared) */
    if (rp->gen_ids) {
        const int64_t n_check = n_gen < rp->n_gen_ids ? n_gen : rp->n_gen_ids;
        const int64_t d = first_difference(rp->gen_ids, n_check, r->seq + n_ids, n_check);
        if (d >= 0 || (cut < 0 && rp->n_gen_ids != n_gen))
            return gguf_error_setf(err, GGUF_E_BAD_VALUE, 0,
                                   "POST %s%s: reply: token_ids contradict the log-probability "
                                   "positions (%lld ids for %lld positions%s)",
                                   refwd_http_url(ctx->http), path, (long long)rp->n_gen_ids,
                                   (long long)(n_gen + r->n_unresolved),
                                   d >= 0 ? ", a different token" : "");
    }
    for (int64_t i = 0; i < r->n_seq; i++) /* -1: the unknown last token, never evaluated */
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
