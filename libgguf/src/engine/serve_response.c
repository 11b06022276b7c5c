/* serve: results -> JSON bodies.
 *
 * /v1/completions answers as vLLM's non-streaming CompletionResponse:
 *   {"id": "cmpl-...", "object": "text_completion", "created", "model",
 *    "choices": [{"index", "text", "logprobs": null | {"text_offset",
 *    "token_logprobs", "tokens", "top_logprobs"}, "finish_reason": "length" |
 *    "stop", "stop_reason": null | "stop string" | token id,
 *    "prompt_logprobs"?, "prompt_token_ids"?, "token_ids"?}],
 *    "usage": {"prompt_tokens", "completion_tokens", "total_tokens"}}
 * with vLLM's conventions: each top_logprobs entry maps the chosen token
 * first, then the top k, by their text (so k or k+1 entries); log-probs
 * below -9999 are clamped to -9999; text_offset adds up the code-point
 * lengths of the token strings; with echo the prompt's tokens come first
 * and the first of them has null log-probabilities.
 *
 * /completion answers as llama-server: {"index", "content", "tokens", "id_slot",
 * "stop", "model", "tokens_predicted", "tokens_evaluated", "prompt",
 * "truncated", "stop_type": "eos" | "limit" | "word", "stopping_word",
 * "completion_probabilities"?: [{"id", "token", "bytes", "logprob",
 * "top_logprobs": [{"id", "token", "bytes", "logprob"}]}]}, an array of them
 * for several prompts. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/serve_internal.h"

/* Builders that remember a failed allocation instead of checking each call. */
typedef struct jb {
    bool bad;
} jb;

static json_t *jchk(jb *b, json_t *v)
{
    if (!v)
        b->bad = true;
    return v;
}

static void jset(jb *b, json_t *o, const char *key, json_t *v)
{
    if (!v || !o || json_object_set_new(o, key, v))
        b->bad = true;
}

static void jpush(jb *b, json_t *a, json_t *v)
{
    if (!v || !a || json_array_append_new(a, v))
        b->bad = true;
}

/* A log-probability as vLLM writes it: clamped at -9999, NaN as null. */
static json_t *jlp(double v)
{
    if (isnan(v))
        return json_null();
    if (v < -9999.0)
        v = -9999.0;
    if (v > 9999.0)
        v = 9999.0;
    return json_real(v);
}

int serve_json_response(json_t *root, int status, gguf_serve_response *r)
{
    char *s = root ? json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(root);
    if (!s)
        return GGUF_E_NOMEM;
    r->status = status;
    r->content_type = "application/json";
    r->body = s;
    r->body_len = strlen(s);
    return 0;
}

static const char *error_type(int status)
{
    switch (status) {
    case 400: return "BadRequestError";
    case 401: return "AuthenticationError";
    case 404: return "NotFoundError";
    case 405: return "MethodNotAllowedError";
    case 413: return "RequestTooLargeError";
    case 499: return "ClientClosedRequestError"; /* nginx's 499: never read, for the logs */
    case 501: return "NotImplementedError";
    case 503: return "ServiceUnavailableError";
    default: return "InternalServerError";
    }
}

int serve_error_response(const serve_err *e, gguf_serve_response *r)
{
    jb b = {0};
    json_t *root = jchk(&b, json_object()), *inner = jchk(&b, json_object());
    jset(&b, inner, "message", serve_json_text(e->message, strlen(e->message)));
    jset(&b, inner, "type", json_string(error_type(e->status)));
    jset(&b, inner, "param", e->param[0] ? json_string(e->param) : json_null());
    jset(&b, inner, "code", json_integer(e->status));
    jset(&b, root, "error", inner);
    if (b.bad) {
        json_decref(root);
        return GGUF_E_NOMEM;
    }
    return serve_json_response(root, e->status, r);
}

/* ---- /v1/completions ---- */

/* The text of token `id` at position i of sq in `tokens`, as a top_logprobs
 * key or as decoded_token: vLLM decodes each with the earlier tokens of its
 * kind as context (a prompt position: the prompt's tokens after the first,
 * whose entry is null; a generated one: the tokens generated before it);
 * with `scored` false (the echoed first token) the token alone. */
static json_t *tok_at(const gguf_serve *s, const serve_creq *q, const serve_seq *sq, int64_t i,
                      int32_t id, bool scored)
{
    if (q->tokens_as_ids)
        return serve_json_token(s, id, true);
    serve_buf t = {0};
    if (!scored) {
        serve_buf raw = {0};
        serve_hf_decode(s, &id, 1, &raw);
        json_t *j = raw.nomem ? NULL : serve_json_text(raw.p, raw.n);
        serve_buf_free(&raw);
        return j;
    }
    const int64_t from = i < sq->n_prompt ? 1 : sq->n_prompt;
    const int64_t n_ctx = i > from ? i - from : 0;
    serve_vllm_token(s, id, sq->ids + (i - n_ctx), n_ctx, &t);
    json_t *j = t.nomem ? NULL : json_stringn(t.p ? t.p : "", t.n);
    serve_buf_free(&t);
    return j;
}

/* Positions [from, to) of seq in vLLM's CompletionLogProbs; text_offset
 * starts at *offset and *offset ends past the last token (a stream's chunks
 * continue it). */
static json_t *openai_logprobs(const gguf_serve *s, const serve_creq *q, const serve_seq *sq,
                               int64_t from, int64_t to, int k, int64_t *offset, jb *b)
{
    json_t *lp = jchk(b, json_object());
    json_t *offs = jchk(b, json_array()), *tlp = jchk(b, json_array());
    json_t *toks = jchk(b, json_array()), *top = jchk(b, json_array());
    for (int64_t i = from; i < to && !b->bad; i++) {
        const int32_t id = sq->ids[i];
        json_t *t = jchk(b, tok_at(s, q, sq, i, id, sq->scored[i]));
        if (!t)
            break;
        json_incref(t); /* kept for the top_logprobs key below */
        jpush(b, toks, t);
        jpush(b, offs, json_integer(*offset));
        *offset += serve_utf8_count(json_string_value(t), json_string_length(t));
        if (!sq->scored[i]) {
            jpush(b, tlp, json_null());
            jpush(b, top, json_null());
            json_decref(t);
            continue;
        }
        jpush(b, tlp, jlp(sq->lp[i]));
        json_t *d = jchk(b, json_object());
        jset(b, d, json_string_value(t), jlp(sq->lp[i]));
        json_decref(t);
        for (int j = 0; j < k && j < sq->k; j++) {
            const int32_t tid = sq->top_id[i * sq->k + j];
            if (tid < 0)
                break;
            json_t *key = jchk(b, tok_at(s, q, sq, i, tid, true));
            if (key)
                jset(b, d, json_string_value(key), jlp(sq->top_lp[i * sq->k + j]));
            json_decref(key);
        }
        jpush(b, top, d);
    }
    jset(b, lp, "text_offset", offs);
    jset(b, lp, "token_logprobs", tlp);
    jset(b, lp, "tokens", toks);
    jset(b, lp, "top_logprobs", top);
    return lp;
}

/* vLLM's prompt_logprobs: [null, {"id": {"logprob", "rank", "decoded_token"}, ...}, ...] */
static json_t *prompt_logprobs(const gguf_serve *s, const serve_creq *q, const serve_seq *sq,
                               jb *b)
{
    json_t *a = jchk(b, json_array());
    for (int64_t i = 0; i < sq->n_prompt && !b->bad; i++) {
        if (!sq->scored[i]) {
            jpush(b, a, json_null());
            continue;
        }
        json_t *d = jchk(b, json_object());
        const int kk = q->prompt_logprobs;
        for (int j = -1; j < kk && j < sq->k; j++) {
            const int32_t id = j < 0 ? sq->ids[i] : sq->top_id[i * sq->k + j];
            if (id < 0)
                break;
            char key[24];
            snprintf(key, sizeof key, "%d", (int)id);
            if (j >= 0 && json_object_get(d, key))
                continue;
            int32_t rank = j < 0 ? sq->rank[i] : j + 1;
            json_t *e = jchk(b, json_object());
            jset(b, e, "logprob", jlp(j < 0 ? sq->lp[i] : sq->top_lp[i * sq->k + j]));
            jset(b, e, "rank", json_integer(rank));
            /* the real text, never "token_id:N" (vLLM's Logprob.decoded_token) */
            serve_buf t = {0};
            const int64_t n_ctx = i > 1 ? i - 1 : 0;
            serve_vllm_token(s, id, sq->ids + (i - n_ctx), n_ctx, &t);
            jset(b, e, "decoded_token", t.nomem ? NULL : json_stringn(t.p ? t.p : "", t.n));
            serve_buf_free(&t);
            jset(b, d, key, e);
        }
        jpush(b, a, d);
    }
    return a;
}

static json_t *id_array(const int32_t *ids, int64_t n, jb *b)
{
    json_t *a = jchk(b, json_array());
    for (int64_t i = 0; i < n && !b->bad; i++)
        jpush(b, a, json_integer(ids[i]));
    return a;
}

/* The generated text as vLLM writes it, into text; emit[g]: how much of it a
 * stream has written after token g (vLLM's detokenizer holds back text that
 * ends inside a character). NULL on NOMEM. */
static int64_t *gen_text(const gguf_serve *s, const serve_creq *q, const serve_seq *sq,
                         serve_buf *text)
{
    int64_t *emit = malloc((size_t)(sq->n_gen + 1) * sizeof *emit);
    const bool stop = sq->finish == SERVE_FIN_STOP_STR;
    int64_t hold = 0; /* the longest stop string in characters, less one */
    for (int i = 0; i < q->n_stop; i++) {
        const int64_t c = serve_utf8_count(q->stop[i], q->stop_len[i]);
        if (c - 1 > hold)
            hold = c - 1;
    }
    if (!emit || serve_vllm_gen_text(s, sq->ids + sq->n_prompt, sq->n_gen,
                                     stop ? q->stop[sq->stop_index] : NULL,
                                     stop ? q->stop_len[sq->stop_index] : 0, hold, text, emit)) {
        free(emit);
        return NULL;
    }
    return emit;
}

/* The echoed prompt: a text prompt as sent, token ids decoded (control
 * tokens as their text); "" with return_token_ids, as vLLM does. */
static void prompt_text(const gguf_serve *s, const serve_creq *q, const serve_prompt *p,
                        const serve_seq *sq, serve_buf *text)
{
    serve_buf_add(text, "", 0);
    if (q->return_token_ids)
        return;
    if (p->text)
        serve_buf_add(text, p->text, p->text_len);
    else
        serve_hf_decode(s, sq->ids, sq->n_prompt, text);
}

static void set_finish(jb *b, json_t *c, const serve_creq *q, const serve_seq *sq)
{
    jset(b, c, "finish_reason", json_string(sq->finish == SERVE_FIN_LENGTH ? "length" : "stop"));
    if (sq->finish == SERVE_FIN_STOP_STR)
        jset(b, c, "stop_reason",
             serve_json_text(q->stop[sq->stop_index], q->stop_len[sq->stop_index]));
    else if (sq->finish == SERVE_FIN_STOP_ID)
        jset(b, c, "stop_reason", json_integer(sq->stop_id));
    else
        jset(b, c, "stop_reason", json_null());
}

static json_t *openai_choice(const gguf_serve *s, const serve_creq *q, const serve_prompt *p,
                             const serve_seq *sq, int64_t index, jb *b)
{
    json_t *c = jchk(b, json_object());
    jset(b, c, "index", json_integer(index));
    serve_buf text = {0};
    if (q->echo)
        prompt_text(s, q, p, sq, &text);
    serve_buf gen = {0};
    int64_t *emit = gen_text(s, q, sq, &gen);
    b->bad |= !emit;
    if (emit && q->max_tokens > 0)
        serve_buf_add(&text, gen.p, gen.n);
    free(emit);
    serve_buf_free(&gen);
    b->bad |= text.nomem;
    jset(b, c, "text", serve_json_text(text.p ? text.p : "", text.n));
    serve_buf_free(&text);
    if (q->logprobs >= 0) {
        const int64_t from = q->echo ? 0 : sq->n_prompt;
        int64_t offset = 0;
        jset(b, c, "logprobs", openai_logprobs(s, q, sq, from, sq->n_prompt + sq->n_gen,
                                               q->logprobs, &offset, b));
    } else {
        jset(b, c, "logprobs", json_null());
    }
    set_finish(b, c, q, sq);
    jset(b, c, "token_ids", q->return_token_ids ? id_array(sq->ids + sq->n_prompt, sq->n_gen, b)
                                                : json_null());
    jset(b, c, "prompt_logprobs",
         q->prompt_logprobs_field ? prompt_logprobs(s, q, sq, b) : json_null());
    jset(b, c, "prompt_token_ids",
         q->return_token_ids ? id_array(sq->ids, sq->n_prompt, b) : json_null());
    jset(b, c, "routed_experts", json_null());
    return c;
}

/* vLLM counts the one token it generates for an echo with max_tokens 0
 * (it asks its engine for one and returns none). */
static int64_t counted_gen(const serve_creq *q, const serve_seq *sq)
{
    return q->echo && q->max_tokens == 0 ? 1 : sq->n_gen;
}

static json_t *usage(int64_t n_prompt, int64_t n_gen, bool details, jb *b)
{
    json_t *u = jchk(b, json_object());
    jset(b, u, "prompt_tokens", json_integer(n_prompt));
    jset(b, u, "total_tokens", json_integer(n_prompt + n_gen));
    jset(b, u, "completion_tokens", json_integer(n_gen));
    if (details) {
        jset(b, u, "prompt_tokens_details", json_null());
        jset(b, u, "completion_tokens_details", json_null());
    }
    return u;
}

/* The fields every response of one request shares: id, object, created, model. */
static json_t *openai_head(gguf_serve *s, const char *cid, int64_t created, jb *b)
{
    json_t *root = jchk(b, json_object());
    jset(b, root, "id", json_string(cid));
    jset(b, root, "object", json_string("text_completion"));
    jset(b, root, "created", json_integer((json_int_t)created));
    jset(b, root, "model", json_string(s->model_name));
    return root;
}

static void completion_id(gguf_serve *s, char *cid, size_t size)
{
    pthread_mutex_lock(&s->mu);
    const uint64_t id = ++s->next_id;
    pthread_mutex_unlock(&s->mu);
    snprintf(cid, size, "cmpl-%016llx%08llx", (unsigned long long)id,
             (unsigned long long)(s->created & 0xFFFFFFFF));
}

static json_t *openai_response(gguf_serve *s, const serve_creq *q, const serve_seq *seqs, jb *b)
{
    char cid[48];
    completion_id(s, cid, sizeof cid);
    json_t *root = openai_head(s, cid, (int64_t)time(NULL), b);
    json_t *choices = jchk(b, json_array());
    int64_t n_prompt = 0, n_gen = 0;
    for (int64_t i = 0; i < q->n_prompts && !b->bad; i++) {
        jpush(b, choices, openai_choice(s, q, &q->prompts[i], &seqs[i], i, b));
        n_prompt += seqs[i].n_prompt;
        n_gen += counted_gen(q, &seqs[i]);
    }
    jset(b, root, "choices", choices);
    jset(b, root, "service_tier", json_null());
    jset(b, root, "system_fingerprint", json_string(SERVE_FINGERPRINT));
    jset(b, root, "usage", usage(n_prompt, n_gen, true, b));
    jset(b, root, "kv_transfer_params", json_null());
    jset(b, root, "ec_transfer_params", json_null());
    jset(b, root, "metrics", json_null());
    return root;
}

/* ---- stream: true ----
 * vLLM's completion_stream_generator: per prompt, one chunk per generated
 * token (the first with the echoed prompt in front of it; an echo with
 * max_tokens 0 is one chunk of the prompt), each {id, object, created, model,
 * choices: [{index, text, logprobs, finish_reason, stop_reason,
 * prompt_token_ids, token_ids}]}; the text a chunk adds is what the
 * detokenizer lets out at that token (often "" inside a character);
 * finish_reason is null but on the last chunk, which also carries
 * system_fingerprint; with stream_options.include_usage a last chunk of
 * {..., choices: [], usage, system_fingerprint} instead; then [DONE]. The
 * chunks are written once the whole answer is known (docs/serve.md). */

static int sse_add(serve_buf *out, json_t *chunk, jb *b)
{
    char *js = !b->bad && chunk ? json_dumps(chunk, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(chunk);
    if (!js) {
        b->bad = true;
        return -1;
    }
    serve_buf_add(out, "data: ", 6);
    serve_buf_add(out, js, strlen(js));
    serve_buf_add(out, "\n\n", 2);
    free(js);
    return 0;
}

static void stream_prompt(gguf_serve *s, const serve_creq *q, const serve_prompt *p,
                          const serve_seq *sq, int64_t index, const char *cid, int64_t created,
                          serve_buf *out, jb *b)
{
    serve_buf gen = {0};
    int64_t *emit = gen_text(s, q, sq, &gen);
    if (!emit) {
        serve_buf_free(&gen);
        b->bad = true;
        return;
    }
    /* chunks: max_tokens 0 with echo: the prompt alone; else one per token */
    const bool prompt_only = q->echo && q->max_tokens == 0;
    const int64_t n_chunks = prompt_only ? 1 : sq->n_gen;
    int64_t offset = 0, emitted = 0;
    for (int64_t g = 0; g < n_chunks && !b->bad; g++) {
        json_t *chunk = openai_head(s, cid, created, b);
        json_t *choices = jchk(b, json_array()), *c = jchk(b, json_object());
        jset(b, c, "index", json_integer(index));
        serve_buf text = {0};
        const bool first = g == 0;
        if (first && q->echo)
            prompt_text(s, q, p, sq, &text);
        else
            serve_buf_add(&text, "", 0);
        if (!prompt_only) {
            serve_buf_add(&text, gen.p + emitted, (size_t)(emit[g] - emitted));
            emitted = emit[g];
        }
        b->bad |= text.nomem;
        jset(b, c, "text", serve_json_text(text.p ? text.p : "", text.n));
        serve_buf_free(&text);
        const int64_t from = first && q->echo ? 0 : sq->n_prompt + g;
        const int64_t to = prompt_only ? sq->n_prompt : sq->n_prompt + g + 1;
        jset(b, c, "logprobs", q->logprobs >= 0
                                   ? openai_logprobs(s, q, sq, from, to, q->logprobs, &offset, b)
                                   : json_null());
        const bool last = g + 1 == n_chunks;
        if (last) {
            set_finish(b, c, q, sq);
        } else {
            jset(b, c, "finish_reason", json_null());
            jset(b, c, "stop_reason", json_null());
        }
        /* the prompt's ids ride on the first chunk of an echo, or of return_token_ids */
        jset(b, c, "prompt_token_ids", first && (q->echo || q->return_token_ids)
                                           ? id_array(sq->ids, sq->n_prompt, b) : json_null());
        jset(b, c, "token_ids", q->return_token_ids
                                    ? id_array(sq->ids + sq->n_prompt + g, prompt_only ? 0 : 1, b)
                                    : json_null());
        jpush(b, choices, c);
        jset(b, chunk, "choices", choices);
        if (last && !q->include_usage)
            jset(b, chunk, "system_fingerprint", json_string(SERVE_FINGERPRINT));
        sse_add(out, chunk, b);
    }
    free(emit);
    serve_buf_free(&gen);
}

static int openai_stream(gguf_serve *s, const serve_creq *q, const serve_seq *seqs,
                         gguf_serve_response *r)
{
    jb b = {0};
    char cid[48];
    completion_id(s, cid, sizeof cid);
    const int64_t created = (int64_t)time(NULL);
    serve_buf out = {0};
    int64_t n_prompt = 0, n_gen = 0;
    for (int64_t i = 0; i < q->n_prompts && !b.bad; i++) {
        stream_prompt(s, q, &q->prompts[i], &seqs[i], i, cid, created, &out, &b);
        n_prompt += seqs[i].n_prompt;
        n_gen += counted_gen(q, &seqs[i]);
    }
    if (q->include_usage && !b.bad) {
        json_t *chunk = openai_head(s, cid, created, &b);
        jset(&b, chunk, "choices", jchk(&b, json_array()));
        jset(&b, chunk, "usage", usage(n_prompt, n_gen, false, &b));
        jset(&b, chunk, "system_fingerprint", json_string(SERVE_FINGERPRINT));
        sse_add(&out, chunk, &b);
    }
    serve_buf_add(&out, "data: [DONE]\n\n", 14);
    if (b.bad || out.nomem) {
        serve_buf_free(&out);
        return GGUF_E_NOMEM;
    }
    r->status = 200;
    r->content_type = "text/event-stream";
    r->body = out.p;
    r->body_len = out.n;
    return 0;
}

/* ---- /completion (llama-server) ---- */

static json_t *llama_prob(const gguf_serve *s, int32_t id, double lp, jb *b)
{
    json_t *o = jchk(b, json_object());
    char piece[SERVE_PIECE_MAX];
    const size_t n = serve_piece(s, id, piece);
    jset(b, o, "id", json_integer(id));
    jset(b, o, "token", serve_json_text(piece, n));
    json_t *bytes = jchk(b, json_array());
    for (size_t i = 0; i < n; i++)
        jpush(b, bytes, json_integer((unsigned char)piece[i]));
    jset(b, o, "bytes", bytes);
    jset(b, o, "logprob", jlp(lp));
    return o;
}

static json_t *llama_one(gguf_serve *s, const serve_creq *q, const serve_prompt *p,
                         const serve_seq *sq, int64_t index, jb *b)
{
    json_t *o = jchk(b, json_object());
    jset(b, o, "index", json_integer(index));
    jset(b, o, "content", serve_json_text(sq->text ? sq->text : "", sq->text_len));
    jset(b, o, "tokens", q->return_tokens ? id_array(sq->ids + sq->n_prompt, sq->n_gen, b)
                                          : json_array());
    jset(b, o, "id_slot", json_integer(0));
    jset(b, o, "stop", json_true());
    jset(b, o, "model", json_string(s->model_name));
    jset(b, o, "tokens_predicted", json_integer(sq->n_gen));
    jset(b, o, "tokens_evaluated", json_integer(sq->n_prompt));
    serve_buf ptext = {0};
    if (p->text)
        serve_buf_add(&ptext, p->text, p->text_len);
    else
        serve_decode(s, sq->ids, sq->n_prompt, &ptext);
    b->bad |= ptext.nomem;
    jset(b, o, "prompt", serve_json_text(ptext.p ? ptext.p : "", ptext.n));
    serve_buf_free(&ptext);
    jset(b, o, "truncated", json_false());
    const char *type = sq->finish == SERVE_FIN_LENGTH ? "limit"
                       : sq->finish == SERVE_FIN_STOP_STR ? "word" : "eos";
    jset(b, o, "stop_type", json_string(type));
    jset(b, o, "stopping_word", sq->finish == SERVE_FIN_STOP_STR
                                    ? serve_json_text(q->stop[sq->stop_index],
                                                      q->stop_len[sq->stop_index])
                                    : json_string(""));
    jset(b, o, "tokens_cached", json_integer(0));
    json_t *gs = jchk(b, json_object());
    jset(b, gs, "n_predict", json_integer(q->max_tokens));
    jset(b, gs, "temperature", json_real(0));
    jset(b, gs, "n_probs", json_integer(q->n_probs));
    jset(b, gs, "model", json_string(s->model_name));
    jset(b, o, "generation_settings", gs);
    if (q->n_probs > 0) {
        json_t *probs = jchk(b, json_array());
        for (int64_t i = sq->n_prompt; i < sq->n_prompt + sq->n_gen && !b->bad; i++) {
            json_t *e = llama_prob(s, sq->ids[i], sq->lp[i], b);
            json_t *top = jchk(b, json_array());
            for (int j = 0; j < q->n_probs && j < sq->k; j++) {
                const int32_t tid = sq->top_id[i * sq->k + j];
                if (tid < 0)
                    break;
                jpush(b, top, llama_prob(s, tid, sq->top_lp[i * sq->k + j], b));
            }
            jset(b, e, "top_logprobs", top);
            jpush(b, probs, e);
        }
        jset(b, o, "completion_probabilities", probs);
    }
    return o;
}

int serve_completion_response(gguf_serve *s, const serve_creq *q, const serve_seq *seqs,
                              gguf_serve_response *r)
{
    jb b = {0};
    json_t *root;
    if (q->api == SERVE_API_LLAMA) {
        if (q->n_prompts == 1) {
            root = llama_one(s, q, &q->prompts[0], &seqs[0], 0, &b);
        } else {
            root = jchk(&b, json_array());
            for (int64_t i = 0; i < q->n_prompts && !b.bad; i++)
                jpush(&b, root, llama_one(s, q, &q->prompts[i], &seqs[i], i, &b));
        }
    } else if (q->stream) {
        return openai_stream(s, q, seqs, r);
    } else {
        root = openai_response(s, q, seqs, &b);
    }
    if (b.bad) {
        json_decref(root);
        return GGUF_E_NOMEM;
    }
    return serve_json_response(root, 200, r);
}

/* ---- tokenizer endpoints ---- */

int serve_tokenize_response(gguf_serve *s, const serve_tokreq *q, gguf_serve_response *r)
{
    jb b = {0};
    json_t *root = jchk(&b, json_object());
    json_t *toks = jchk(&b, json_array());
    for (int64_t i = 0; i < q->n && !b.bad; i++) {
        if (q->with_pieces) {
            json_t *e = jchk(&b, json_object());
            jset(&b, e, "id", json_integer(q->ids[i]));
            jset(&b, e, "piece", serve_json_token(s, q->ids[i], false));
            jpush(&b, toks, e);
        } else {
            jpush(&b, toks, json_integer(q->ids[i]));
        }
    }
    jset(&b, root, "count", json_integer(q->n));
    jset(&b, root, "max_model_len", json_integer(s->m.n_ctx > 0 ? s->m.n_ctx : s->max_tokens));
    jset(&b, root, "tokens", toks);
    if (q->return_token_strs) {
        /* the vocabulary's own strings (HF's convert_ids_to_tokens: "<0xE2>",
         * "\u2581upon", "<s>"), as vLLM returns them */
        json_t *strs = jchk(&b, json_array());
        for (int64_t i = 0; i < q->n && !b.bad; i++)
            jpush(&b, strs, serve_json_raw(s, q->ids[i]));
        jset(&b, root, "token_strs", strs);
    } else if (!q->llama) {
        jset(&b, root, "token_strs", json_null());
    }
    if (b.bad) {
        json_decref(root);
        return GGUF_E_NOMEM;
    }
    return serve_json_response(root, 200, r);
}

int serve_detokenize_response(gguf_serve *s, const serve_tokreq *q, gguf_serve_response *r)
{
    jb b = {0};
    serve_buf text = {0}, vtext = {0};
    serve_decode(s, q->ids, q->n, &text);
    serve_hf_decode(s, q->ids, q->n, &vtext); /* vLLM: control tokens as their text */
    b.bad |= text.nomem || vtext.nomem;
    json_t *root = jchk(&b, json_object());
    jset(&b, root, "prompt", serve_json_text(vtext.p ? vtext.p : "", vtext.n));
    jset(&b, root, "content", serve_json_text(text.p ? text.p : "", text.n));
    serve_buf_free(&text);
    serve_buf_free(&vtext);
    if (b.bad) {
        json_decref(root);
        return GGUF_E_NOMEM;
    }
    return serve_json_response(root, 200, r);
}

int serve_models_response(gguf_serve *s, gguf_serve_response *r)
{
    jb b = {0};
    json_t *root = jchk(&b, json_object()), *data = jchk(&b, json_array());
    json_t *card = jchk(&b, json_object());
    jset(&b, card, "id", json_string(s->model_name));
    jset(&b, card, "object", json_string("model"));
    jset(&b, card, "created", json_integer(s->created));
    jset(&b, card, "owned_by", json_string("ggufkit"));
    jset(&b, card, "root", json_string(s->model_name));
    jset(&b, card, "parent", json_null());
    jset(&b, card, "max_model_len", json_integer(s->m.n_ctx > 0 ? s->m.n_ctx : s->max_tokens));
    /* vLLM's ModelPermission, fixed values (vllm/entrypoints/openai/engine/protocol.py) */
    json_t *perm = jchk(&b, json_object()), *perms = jchk(&b, json_array());
    char pid[48];
    snprintf(pid, sizeof pid, "modelperm-%016llx", (unsigned long long)s->created);
    jset(&b, perm, "id", json_string(pid));
    jset(&b, perm, "object", json_string("model_permission"));
    jset(&b, perm, "created", json_integer(s->created));
    jset(&b, perm, "allow_create_engine", json_false());
    jset(&b, perm, "allow_sampling", json_true());
    jset(&b, perm, "allow_logprobs", json_true());
    jset(&b, perm, "allow_search_indices", json_false());
    jset(&b, perm, "allow_view", json_true());
    jset(&b, perm, "allow_fine_tuning", json_false());
    jset(&b, perm, "organization", json_string("*"));
    jset(&b, perm, "group", json_null());
    jset(&b, perm, "is_blocking", json_false());
    jpush(&b, perms, perm);
    jset(&b, card, "permission", perms);
    jpush(&b, data, card);
    jset(&b, root, "object", json_string("list"));
    jset(&b, root, "data", data);
    if (b.bad) {
        json_decref(root);
        return GGUF_E_NOMEM;
    }
    return serve_json_response(root, 200, r);
}

int serve_llama_parse_error(const serve_seq *sq, gguf_serve_response *r)
{
    /* llama-server's error body (server-common.cpp format_error_response),
     * its message as common_chat_peg_parse threw it, the text repaired as its
     * JSON dump repairs it */
    serve_buf m = {0};
    serve_buf_add(&m, "Failed to parse input at pos 0: ", 32);
    serve_buf_add(&m, sq->text ? sq->text : "", sq->text_len);
    json_t *e = json_object(), *root = json_object();
    if (m.nomem || !e || !root || json_object_set_new(e, "code", json_integer(500)) ||
        json_object_set_new(e, "message", serve_json_text(m.p, m.n)) ||
        json_object_set_new(e, "type", json_string("server_error")) ||
        json_object_set_new(root, "error", e)) {
        serve_buf_free(&m);
        json_decref(root);
        return GGUF_E_NOMEM;
    }
    serve_buf_free(&m);
    return serve_json_response(root, 500, r);
}

int serve_version_response(gguf_serve *s, gguf_serve_response *r)
{
    (void)s;
    json_t *o = json_pack("{s:s}", "version", "ggufkit-" GGUF_VERSION_STRING);
    return serve_json_response(o, 200, r);
}

int serve_tokenizer_info_response(gguf_serve *s, gguf_serve_response *r)
{
    jb b = {0};
    json_t *root = jchk(&b, json_object());
    jset(&b, root, "tokenizer_class", json_string("gguf"));
    jset(&b, root, "bos_token", s->m.bos >= 0 ? serve_json_token(s, s->m.bos, false) : json_null());
    jset(&b, root, "eos_token", s->m.eos >= 0 ? serve_json_token(s, s->m.eos, false) : json_null());
    jset(&b, root, "bos_token_id", s->m.bos >= 0 ? json_integer(s->m.bos) : json_null());
    jset(&b, root, "eos_token_id", s->m.eos >= 0 ? json_integer(s->m.eos) : json_null());
    jset(&b, root, "pad_token", json_null());
    jset(&b, root, "add_bos_token", json_boolean(s->m.add_bos));
    jset(&b, root, "model_max_length", json_integer(s->m.n_ctx > 0 ? s->m.n_ctx : s->max_tokens));
    jset(&b, root, "can_tokenize", json_boolean(s->m.tokenize != NULL));
    if (b.bad) {
        json_decref(root);
        return GGUF_E_NOMEM;
    }
    return serve_json_response(root, 200, r);
}
