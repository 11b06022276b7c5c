/* SentencePiece-style ("llama") tokenizer: greedy best-score bigram merging
 * over UTF-8 characters, byte-token fallback (llama.cpp's
 * llm_tokenizer_spm_session). See gguf/tokenize.h. */
#include <stdlib.h>
#include <string.h>

#include "util/error_lib.h"
#include "tokenize/tokenize_internal.h"

/* A piece of the text: a run of bytes in a doubly linked list. n == 0 once
 * merged into its left neighbour. */
typedef struct {
    int32_t prev, next;
    uint32_t off, n;
} sym;

/* A candidate merge of two adjacent pieces, valid while both still have the
 * lengths they had when it was queued (size = their sum). */
typedef struct {
    int32_t left, right;
    float score;
    uint32_t size;
} bigram;

/* Max-heap order: higher score first, then the leftmost pair. */
static bool before(const bigram *a, const bigram *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

typedef struct {
    bigram *v;
    size_t n, cap;
} heap;

static int heap_push(heap *h, bigram b)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 64;
        bigram *v = realloc(h->v, cap * sizeof *v);
        if (!v)
            return -1;
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0 && before(&b, &h->v[(i - 1) / 2])) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = b;
    return 0;
}

static bigram heap_pop(heap *h)
{
    const bigram top = h->v[0];
    const bigram last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && before(&h->v[c + 1], &h->v[c]))
            c++;
        if (!before(&h->v[c], &last))
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n)
        h->v[i] = last;
    return top;
}

/* Queue the merge of pieces l and r when their joined text is a token. */
static int try_pair(const gguf_tokenizer *t, const char *buf, const sym *s, int32_t l, int32_t r,
                    heap *h)
{
    if (l < 0 || r < 0)
        return 0;
    const int32_t id = tok_lookup(t, buf + s[l].off, (size_t)s[l].n + s[r].n);
    if (id < 0)
        return 0;
    const bigram b = {l, r, t->scores[id], s[l].n + s[r].n};
    return heap_push(h, b);
}

int tok_spm_encode(const gguf_tokenizer *t, const char *text, size_t len, bool space_prefix,
                   tok_ids *o, gguf_error *err)
{
    char *buf = NULL;
    sym *s = NULL;
    heap h = {0};
    int rc = 0;

    /* " " prefix, then every ' ' becomes U+2581 (3 bytes). */
    buf = malloc(3 * (len + 1));
    if (!buf)
        goto nomem;
    size_t bl = 0;
    for (size_t i = 0; i < len + space_prefix; i++) {
        const char c = i < (size_t)space_prefix ? ' ' : text[i - space_prefix];
        if (c == ' ') {
            memcpy(buf + bl, "\xE2\x96\x81", 3);
            bl += 3;
        } else {
            buf[bl++] = c;
        }
    }

    /* One piece per UTF-8 character. */
    s = malloc((bl ? bl : 1) * sizeof *s);
    if (!s)
        goto nomem;
    int32_t ns = 0;
    for (size_t off = 0; off < bl;) {
        uint32_t l = (uint32_t)tok_utf8_len((unsigned char)buf[off]);
        if (l > bl - off)
            l = (uint32_t)(bl - off);
        s[ns] = (sym){ns - 1, (off + l < bl) ? ns + 1 : -1, (uint32_t)off, l};
        ns++;
        off += l;
    }
    for (int32_t i = 1; i < ns; i++)
        if (try_pair(t, buf, s, i - 1, i, &h))
            goto nomem;

    while (h.n) {
        const bigram b = heap_pop(&h);
        sym *l = &s[b.left], *r = &s[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size)
            continue; /* stale: one side changed since it was queued */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            s[r->next].prev = b.left;
        if (try_pair(t, buf, s, l->prev, b.left, &h) ||
            try_pair(t, buf, s, b.left, l->next, &h))
            goto nomem;
    }

    /* Merged pieces are tokens by construction; a lone character may not be. */
    for (int32_t i = 0; i >= 0 && i < ns; i = s[i].next) {
        const int32_t id = tok_lookup(t, buf + s[i].off, s[i].n);
        if (id >= 0) {
            if (tok_ids_push(o, id))
                goto nomem;
            continue;
        }
        for (uint32_t k = 0; k < s[i].n; k++) {
            const unsigned char c = (unsigned char)buf[s[i].off + k];
            const int32_t bid = t->byte_tok[c] >= 0 ? t->byte_tok[c] : t->unk;
            if (bid < 0) {
                rc = gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET,
                               "gguf_tokenize: byte 0x%02X has no <0x%02X> token and %s no "
                               "unknown token",
                               c, c, t->path);
                goto done;
            }
            if (tok_ids_push(o, bid))
                goto nomem;
        }
    }
    goto done;
nomem:
    rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "gguf_tokenize: out of memory");
done:
    free(buf);
    free(s);
    free(h.v);
    return rc;
}
