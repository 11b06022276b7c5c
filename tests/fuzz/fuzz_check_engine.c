/*
 * libFuzzer target for check-engine's queries (tools/ref-forward/refwd_engine_query.c): the
 * prompt's ids and the reply's positions as ce_query learns them from whatever the engine
 * answers - the prompt ids it reports, its echo, its /tokenize, usage, token_ids - and what
 * an HTTP status means (refwd_http_reply.c). The transport is a stand-in that answers each
 * request with the next body of the input.
 *
 * Input: a first line "API KIND ECHO" (API: o v s l for openai, vllm, sglang, llama-server;
 * KIND: t text, k tokens, c chat; ECHO: e, n, or p for --prompt-by-prefix), then the
 * engine's answers separated by lines "--- STATUS" (an HTTP status; the first answer's
 * status is 200; a 500 first sends llama-server's queries one token per request). Invariants:
 * ce_query
 * returns a gguf status and, on success, a sequence whose every id is inside the vocabulary or
 * -1 only as its last (the unknown last token), a reply whose positions all have ids but that
 * one, and prompt ids that end with the reply's echoed prompt positions.
 * Corpus: tests/fuzz/corpus/check_engine.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refwd_engine.h"
#include "refwd_http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define V 64
#define MAX_ANSWERS 8

static struct {
    const char *body[MAX_ANSWERS];
    size_t len[MAX_ANSWERS];
    long status[MAX_ANSWERS];
    int n, next;
} answers;

struct refwd_http {
    int unused;
};

const char *refwd_http_url(const refwd_http *h)
{
    (void)h;
    return "http://fuzz";
}

int refwd_http_call(refwd_http *h, const char *path, const char *body, char **reply,
                    size_t *reply_len, long *status, gguf_error *err)
{
    (void)h;
    (void)body;
    const int i = answers.next++;
    const bool have = i < answers.n;
    *status = have ? answers.status[i] : 404;
    const size_t n = have ? answers.len[i] : 0;
    *reply = malloc(n + 1);
    if (!*reply)
        return gguf_error_setf(err, GGUF_E_NOMEM, 0, "out of memory");
    if (n)
        memcpy(*reply, answers.body[i], n);
    (*reply)[n] = 0;
    if (reply_len)
        *reply_len = n;
    return refwd_http_status(body ? "POST" : "GET", path, *status, *reply, n, err);
}

static void check(const ce_result *r)
{
    const gguf_engine_reply *rp = r->reply;
    if (!rp || r->n_seq < 1 || r->n_seq_prompt < 1 || r->n_seq_prompt > r->n_seq)
        __builtin_trap();
    for (int64_t i = 0; i < r->n_seq; i++)
        if (r->seq[i] >= V || (r->seq[i] < 0 && !(i == r->n_seq - 1 && r->seq[i] == -1)))
            __builtin_trap();
    for (int64_t i = 0; i < rp->n_pos; i++)
        if (rp->pos[i].id < 0 && i != rp->n_pos - 1)
            __builtin_trap();
    if (rp->n_prompt > r->n_seq_prompt)
        __builtin_trap();
    for (int64_t i = 0; i < rp->n_prompt; i++)
        if (rp->pos[i].id != r->seq[r->n_seq_prompt - rp->n_prompt + i])
            __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = 0;
    char *nl = memchr(text, '\n', size);
    if (!nl || nl - text < 5) {
        free(text);
        return 0;
    }
    const char api_c = text[0], kind = text[2], echo = text[4];
    memset(&answers, 0, sizeof answers);
    char *at = nl + 1, *end = text + size;
    long status = 200;
    while (at <= end && answers.n < MAX_ANSWERS) {
        char *sep = NULL;
        for (char *s = at; s + 4 <= end; s++)
            if ((s == at || s[-1] == '\n') && memcmp(s, "--- ", 4) == 0) {
                sep = s;
                break;
            }
        const size_t n = (size_t)((sep ? sep : end) - at);
        answers.body[answers.n] = at;
        answers.len[answers.n] = n > 0 && at[n - 1] == '\n' && sep ? n - 1 : n;
        answers.status[answers.n++] = status;
        if (!sep)
            break;
        status = strtol(sep + 4, &at, 10);
        at = memchr(sep, '\n', (size_t)(end - sep));
        at = at ? at + 1 : end;
    }
    ce_ctx ctx = {0};
    refwd_http http = {0};
    ctx.http = &http;
    ctx.api = api_c == 'v' ? GGUF_API_VLLM : api_c == 's' ? GGUF_API_SGLANG
              : api_c == 'l' ? GGUF_API_LLAMA_SERVER : GGUF_API_OPENAI;
    ctx.served_model = "m";
    ctx.n_predict = 4;
    ctx.top_k = 2;
    ctx.no_echo = echo != 'e' && echo != 'p';
    ctx.prompt_by_prefix = echo == 'p'; /* llama-server's prompt, one request per prefix */
    ctx.n_vocab = V;
    ctx.max_positions = 4096;
    ce_prompt p = {0};
    int32_t toks[3] = {1, 5, 9};
    char hello[] = "hello";
    char msgs[] = "[{\"role\":\"user\",\"content\":\"hi\"}]";
    if (kind == 'k') {
        p.tokens = toks;
        p.n_tokens = 3;
    } else if (kind == 'c') {
        p.messages = msgs;
    } else {
        p.text = hello;
    }
    ce_result r = {0};
    gguf_error err = {0};
    const int rc = ce_query(&ctx, &p, &r, &err);
    if (rc > 0)
        __builtin_trap();
    if (rc == 0)
        check(&r);
    ce_result_clear(&r);
    free(text);
    return 0;
}
