/*
 * libFuzzer target for the engine module's parsers: the reply of every
 * endpoint, /tokenize, the detection probes and error bodies, then ids from
 * a small vocabulary and the comparison with fake reference logits, which
 * walks the metrics over whatever positions the input declares.
 *
 * Input: a case file of tests/data/engine ("endpoint NAME", "--- reply"
 * section: its corpus is that folder, corpus/engine links to it), or any
 * bytes, the first selecting the endpoint and the rest being the body.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/engine.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define V 64

static const char *find(const char *hay, size_t n, const char *needle)
{
    const size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(hay + i, needle, k) == 0)
            return hay + i;
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const char *in = (const char *)data;
    const char *body = in + 1;
    size_t len = size - 1;
    gguf_engine_endpoint ep = (gguf_engine_endpoint)(data[0] % GGUF_EP_COUNT);
    /* a case file: its endpoint and reply section */
    const char *e = find(in, size, "endpoint ");
    const char *r = find(in, size, "\n--- reply\n");
    if (e && r) {
        static const char *const names[] = {"completions", "chat", "generate", "completion",
                                            "tokenize"};
        for (int i = 0; i < 5; i++)
            if ((size_t)(e + 9 - in) + strlen(names[i]) <= size &&
                memcmp(e + 9, names[i], strlen(names[i])) == 0)
                ep = (gguf_engine_endpoint)i;
        body = r + 11;
        const char *end = find(body, size - (size_t)(body - in), "\n--- ");
        len = end ? (size_t)(end - body) : size - (size_t)(body - in);
    }

    gguf_error err;
    gguf_engine_reply *rep = NULL;
    int rc = gguf_engine_reply_parse(&rep, ep, body, len, &err);
    if ((rc == 0) != (rep != NULL))
        __builtin_trap();
    if (rep) {
        static gguf_engine_text vocab[V];
        static char texts[V][4];
        for (int i = 0; i < V; i++) {
            texts[i][0] = (char)('A' + i % 26);
            texts[i][1] = (char)('a' + i / 26);
            texts[i][2] = 0;
            vocab[i].text = texts[i];
            vocab[i].id = i;
        }
        const int32_t prompt[4] = {1, 2, 3, 4};
        if (gguf_engine_reply_resolve(rep, vocab, V, prompt, 4) < 0)
            __builtin_trap();
        /* fake reference rows: enough for every position */
        const int64_t rows = rep->n_pos + 4;
        float *logits = malloc((size_t)(rows * V) * sizeof(float));
        for (int64_t i = 0; logits && i < rows * V; i++)
            logits[i] = (float)((i * 7919) % 101) / 10.0f;
        gguf_engine_cmp *c = NULL;
        gguf_engine_tol tol;
        gguf_engine_tol_preset(&tol, "default");
        if (logits) {
            rc = gguf_engine_compare(&c, rep, 4, logits, rows, V, &tol, &err);
            if ((rc == 0) != (c != NULL))
                __builtin_trap();
            if (c && (c->top1_agreement < 0 || c->top1_agreement > 1 || c->n_pos > rep->n_pos))
                __builtin_trap();
        }
        gguf_engine_cmp_free(c);
        free(logits);
        gguf_engine_reply_free(rep);
    }

    int32_t *ids = NULL;
    int64_t n = 0;
    rc = gguf_engine_tokens_parse(&ids, &n, body, len, &err);
    if ((rc == 0) != (ids != NULL) || n < 0)
        __builtin_trap();
    free(ids);

    gguf_engine_probe p = {body, len, body, len, body, len};
    gguf_engine_api api;
    char model[64];
    gguf_engine_detect(&api, model, sizeof model, &p, &err);
    p.models = NULL;
    gguf_engine_detect(&api, model, sizeof model, &p, &err);

    char msg[128];
    gguf_engine_error_message(body, len, msg, sizeof msg);
    if (strlen(msg) >= sizeof msg)
        __builtin_trap();
    return 0;
}
