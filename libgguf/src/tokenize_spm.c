/* SentencePiece-style ("llama") tokenizer: greedy best-score bigram merging
 * over UTF-8 characters, byte-token fallback. See gguf/tokenize.h. */
#include <stdlib.h>
#include <string.h>

#include "error_internal.h"
#include "gguf/tokenize.h"

struct gguf_tokenizer {
    int64_t n_vocab;
    const gguf_str *strs; /* borrowed from the set */
    float *scores;
    uint32_t *slots;      /* open-addressing table of id + 1 (0 = empty) */
    uint64_t mask;
    int32_t bytes[256];   /* <0xNN> token of each byte, or -1 */
    int32_t bos, eos, unk;
    bool add_bos, add_space_prefix;
};

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* The id of a token text, or -1. */
static int32_t lookup(const gguf_tokenizer *t, const char *s, size_t n)
{
    for (uint64_t i = hash_bytes(s, n) & t->mask;; i = (i + 1) & t->mask) {
        const uint32_t v = t->slots[i];
        if (!v)
            return -1;
        const gguf_str *e = &t->strs[v - 1];
        if (e->len == n && memcmp(e->data, s, n) == 0)
            return (int32_t)(v - 1);
    }
}

static int32_t meta_id(const gguf_file *meta, const char *key, int64_t n_vocab)
{
    int64_t v;
    if (gguf_get_i64(meta, key, &v, NULL) || v < 0 || v >= n_vocab)
        return -1;
    return (int32_t)v;
}

int gguf_tokenizer_create(gguf_tokenizer **out, const gguf_set *model, gguf_error *err)
{
    if (!out || !model)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_tokenizer_create: NULL argument");
    *out = NULL;
    const gguf_file *meta = gguf_set_meta(model);
    const char *path = gguf_file_path(meta);
    gguf_str kind = {"llama", 5};
    gguf_get_str(meta, "tokenizer.ggml.model", &kind, NULL);
    if (!gguf_str_eq(kind, "llama"))
        return gguf_fail(err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                         "%s: tokenizer.ggml.model: '%.*s' is not supported (only the "
                         "SentencePiece-style 'llama' tokenizer is)",
                         path, (int)(kind.len > 64 ? 64 : kind.len), kind.data);
    const gguf_value *toks;
    int rc = gguf_get_arr(meta, "tokenizer.ggml.tokens", &toks, err);
    if (rc)
        return rc;
    if (toks->v.arr.type != GGUF_VALUE_STRING)
        return gguf_fail(err, GGUF_E_WRONG_TYPE, GGUF_NO_OFFSET,
                         "%s: tokenizer.ggml.tokens: not an array of strings", path);
    const uint64_t nv = toks->v.arr.n;
    if (nv == 0 || nv >= INT32_MAX / 4)
        return gguf_fail(err, GGUF_E_BAD_VALUE, GGUF_NO_OFFSET,
                         "%s: tokenizer.ggml.tokens: %llu tokens", path, (unsigned long long)nv);

    gguf_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "%s: tokenizer", path);
    t->n_vocab = (int64_t)nv;
    t->strs = toks->v.arr.strs;
    uint64_t cap = 16;
    while (cap < 2 * nv)
        cap *= 2;
    t->mask = cap - 1;
    t->slots = calloc(cap, sizeof *t->slots);
    t->scores = calloc(nv, sizeof *t->scores);
    if (!t->slots || !t->scores) {
        gguf_tokenizer_free(t);
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "%s: tokenizer", path);
    }

    const gguf_value *sc;
    if (!gguf_get_arr(meta, "tokenizer.ggml.scores", &sc, NULL)) {
        if (sc->v.arr.n != nv) {
            gguf_tokenizer_free(t);
            return gguf_fail(err, GGUF_E_BAD_VALUE, GGUF_NO_OFFSET,
                             "%s: tokenizer.ggml.scores: %llu scores for %llu tokens", path,
                             (unsigned long long)sc->v.arr.n, (unsigned long long)nv);
        }
        for (uint64_t i = 0; i < nv; i++) {
            gguf_value e = gguf_value_elem(sc, i);
            double d;
            if (gguf_value_to_f64(&e, &d)) {
                gguf_tokenizer_free(t);
                return gguf_fail(err, GGUF_E_WRONG_TYPE, GGUF_NO_OFFSET,
                                 "%s: tokenizer.ggml.scores: not numbers", path);
            }
            t->scores[i] = (float)d;
        }
    }

    /* A text given twice keeps its last id, as llama.cpp's map does. */
    for (uint64_t id = 0; id < nv; id++) {
        const gguf_str *s = &t->strs[id];
        for (uint64_t i = hash_bytes(s->data, s->len) & t->mask;; i = (i + 1) & t->mask) {
            const uint32_t v = t->slots[i];
            if (!v || (t->strs[v - 1].len == s->len && !memcmp(t->strs[v - 1].data, s->data, s->len))) {
                t->slots[i] = (uint32_t)(id + 1);
                break;
            }
        }
    }

    static const char hex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; b++) {
        const char name[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
        t->bytes[b] = lookup(t, name, 6);
        if (t->bytes[b] < 0) {
            const char c = (char)b; /* vocabularies without byte tokens */
            t->bytes[b] = lookup(t, &c, 1);
        }
    }
    t->bos = meta_id(meta, "tokenizer.ggml.bos_token_id", t->n_vocab);
    t->eos = meta_id(meta, "tokenizer.ggml.eos_token_id", t->n_vocab);
    t->unk = meta_id(meta, "tokenizer.ggml.unknown_token_id", t->n_vocab);
    t->add_bos = true;
    gguf_get_bool(meta, "tokenizer.ggml.add_bos_token", &t->add_bos, NULL);
    t->add_space_prefix = true;
    gguf_get_bool(meta, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix, NULL);
    *out = t;
    return 0;
}

void gguf_tokenizer_free(gguf_tokenizer *tok)
{
    if (!tok)
        return;
    free(tok->slots);
    free(tok->scores);
    free(tok);
}

int64_t gguf_tokenizer_n_vocab(const gguf_tokenizer *tok) { return tok ? tok->n_vocab : 0; }
int32_t gguf_tokenizer_bos(const gguf_tokenizer *tok) { return tok ? tok->bos : -1; }
int32_t gguf_tokenizer_eos(const gguf_tokenizer *tok) { return tok ? tok->eos : -1; }
bool gguf_tokenizer_add_bos(const gguf_tokenizer *tok) { return tok && tok->add_bos; }

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
    const int32_t id = lookup(t, buf + s[l].off, (size_t)s[l].n + s[r].n);
    if (id < 0)
        return 0;
    const bigram b = {l, r, t->scores[id], s[l].n + s[r].n};
    return heap_push(h, b);
}

typedef struct {
    int32_t *v;
    int64_t n, cap;
} idvec;

static int emit(idvec *o, int32_t id)
{
    if (o->n == o->cap) {
        int64_t cap = o->cap ? 2 * o->cap : 64;
        int32_t *v = realloc(o->v, (size_t)cap * sizeof *v);
        if (!v)
            return -1;
        o->v = v;
        o->cap = cap;
    }
    o->v[o->n++] = id;
    return 0;
}

static uint32_t utf8_len(unsigned char c)
{
    static const uint8_t lens[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lens[c >> 4];
}

int gguf_tokenize(const gguf_tokenizer *tok, const char *text, size_t len, bool add_bos,
                  int32_t **out_ids, int64_t *n, gguf_error *err)
{
    if (!tok || (!text && len) || !out_ids || !n)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_tokenize: NULL argument");
    *out_ids = NULL;
    *n = 0;
    if (add_bos && tok->bos < 0)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "gguf_tokenize: the model has no tokenizer.ggml.bos_token_id");
    if (len > (1u << 30))
        return gguf_fail(err, GGUF_E_LIMIT, GGUF_NO_OFFSET, "gguf_tokenize: %zu bytes of text",
                         len);

    idvec o = {0};
    char *buf = NULL;
    sym *s = NULL;
    heap h = {0};
    int rc = 0;
    if (emit(&o, 0))
        goto nomem;
    o.n = 0;
    if (add_bos && emit(&o, tok->bos))
        goto nomem;
    if (len == 0)
        goto done;

    /* " " prefix, then every ' ' becomes U+2581 (3 bytes). */
    buf = malloc(3 * (len + 1));
    if (!buf)
        goto nomem;
    size_t bl = 0;
    for (size_t i = 0; i < len + tok->add_space_prefix; i++) {
        const char c = i < (size_t)tok->add_space_prefix ? ' ' : text[i - tok->add_space_prefix];
        if (c == ' ') {
            memcpy(buf + bl, "\xE2\x96\x81", 3);
            bl += 3;
        } else {
            buf[bl++] = c;
        }
    }

    /* One piece per UTF-8 character (a truncated one keeps what is left). */
    s = malloc(bl * sizeof *s);
    if (!s)
        goto nomem;
    int32_t ns = 0;
    for (size_t off = 0; off < bl;) {
        uint32_t l = utf8_len((unsigned char)buf[off]);
        if (l > bl - off)
            l = (uint32_t)(bl - off);
        s[ns] = (sym){ns - 1, (off + l < bl) ? ns + 1 : -1, (uint32_t)off, l};
        ns++;
        off += l;
    }
    for (int32_t i = 1; i < ns; i++)
        if (try_pair(tok, buf, s, i - 1, i, &h))
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
        if (try_pair(tok, buf, s, l->prev, b.left, &h) ||
            try_pair(tok, buf, s, b.left, l->next, &h))
            goto nomem;
    }

    /* Merged pieces are tokens by construction; a lone character may not be. */
    for (int32_t i = 0; i >= 0 && i < ns; i = s[i].next) {
        const int32_t id = lookup(tok, buf + s[i].off, s[i].n);
        if (id >= 0) {
            if (emit(&o, id))
                goto nomem;
            continue;
        }
        for (uint32_t k = 0; k < s[i].n; k++) {
            const unsigned char c = (unsigned char)buf[s[i].off + k];
            const int32_t bid = tok->bytes[c] >= 0 ? tok->bytes[c] : tok->unk;
            if (bid < 0) {
                rc = gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET,
                               "gguf_tokenize: byte 0x%02X has no <0x%02X> token and the "
                               "vocabulary no unknown token", c, c);
                goto fail;
            }
            if (emit(&o, bid))
                goto nomem;
        }
    }

done:
    free(buf);
    free(s);
    free(h.v);
    *out_ids = o.v;
    *n = o.n;
    return 0;
nomem:
    rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "gguf_tokenize: out of memory");
fail:
    free(buf);
    free(s);
    free(h.v);
    free(o.v);
    return rc;
}
