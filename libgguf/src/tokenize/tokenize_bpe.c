/*
 * Byte-level BPE ("gpt2"), as llama.cpp's llm_tokenizer_bpe_session does it:
 *
 *   text --(pre-tokenizer regexes, each splitting the pieces of the last)--> words
 *   word --(each byte -> its GPT-2 stand-in character, one symbol each)--> symbols
 *        --(merge the adjacent pair with the lowest merge rank, leftmost on
 *           ties, until no pair has a rank)--> symbols
 *   symbol --(its text is a token)--> id; else each byte of its text that is a
 *           one-byte token, the others dropped
 *
 * Symbols are numbered instead of compared as strings: a symbol whose text is a
 * token has that token's id; texts that only merges name get ids after the
 * vocabulary. A merge is then (left id, right id) -> (rank, merged id).
 */
#include <stdlib.h>
#include <string.h>

#include "util/error_lib.h"
#include "tokenize/tokenize_internal.h"

/* ---- setup ---- */

typedef struct extra_vec {
    uint64_t *off; /* into buf */
    uint64_t *len;
    int64_t n, cap;
    char *buf;
    uint64_t bn, bcap;
} extra_vec;

static int32_t extra_find(const gguf_tokenizer *t, const extra_vec *x, const char *s, size_t n)
{
    if (!t->sym_slots)
        return -1;
    for (uint64_t i = tok_hash(s, n) & t->sym_mask;; i = (i + 1) & t->sym_mask) {
        const uint32_t v = t->sym_slots[i];
        if (!v)
            return -1;
        if (x->len[v - 1] == n && !memcmp(x->buf + x->off[v - 1], s, n))
            return (int32_t)(t->n_vocab + v - 1);
    }
}

/* The symbol of a text: its token id, an existing extra, or a new extra. */
static int32_t intern(gguf_tokenizer *t, extra_vec *x, const char *s, size_t n)
{
    const int32_t id = tok_lookup(t, s, n);
    if (id >= 0)
        return id;
    const int32_t e = extra_find(t, x, s, n);
    if (e >= 0)
        return e;
    if (x->n == x->cap || 2 * (uint64_t)(x->n + 1) > t->sym_mask + 1) {
        /* grow the list and rehash the table at half load */
        const int64_t cap = x->cap ? 2 * x->cap : 64;
        uint64_t *off = realloc(x->off, (size_t)cap * sizeof *off);
        if (!off)
            return -2;
        x->off = off;
        uint64_t *len = realloc(x->len, (size_t)cap * sizeof *len);
        if (!len)
            return -2;
        x->len = len;
        x->cap = cap;
        uint64_t slots = 16;
        while (slots < 2 * (uint64_t)cap)
            slots *= 2;
        uint32_t *tab = calloc(slots, sizeof *tab);
        if (!tab)
            return -2;
        for (int64_t k = 0; k < x->n; k++)
            for (uint64_t i = tok_hash(x->buf + x->off[k], x->len[k]) & (slots - 1);;
                 i = (i + 1) & (slots - 1))
                if (!tab[i]) {
                    tab[i] = (uint32_t)(k + 1);
                    break;
                }
        free(t->sym_slots);
        t->sym_slots = tab;
        t->sym_mask = slots - 1;
    }
    if (x->bn + n > x->bcap) {
        uint64_t cap = x->bcap ? x->bcap : 4096;
        while (cap < x->bn + n)
            cap *= 2;
        char *b = realloc(x->buf, cap);
        if (!b)
            return -2;
        x->buf = b;
        x->bcap = cap;
    }
    memcpy(x->buf + x->bn, s, n);
    x->off[x->n] = x->bn;
    x->len[x->n] = n;
    x->bn += n;
    for (uint64_t i = tok_hash(s, n) & t->sym_mask;; i = (i + 1) & t->sym_mask)
        if (!t->sym_slots[i]) {
            t->sym_slots[i] = (uint32_t)(x->n + 1);
            break;
        }
    return (int32_t)(t->n_vocab + x->n++);
}

static int add_merge(gguf_tokenizer *t, int32_t a, int32_t b, int32_t c, uint32_t rank)
{
    const uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (uint64_t i = (key * 0x9E3779B97F4A7C15ull >> 17) & t->merge_mask;;
         i = (i + 1) & t->merge_mask) {
        tok_merge *m = &t->merges[i];
        if (m->key == UINT64_MAX) {
            *m = (tok_merge){key, rank, c};
            return 1;
        }
        if (m->key == key)
            return 0; /* the first rank of a pair wins, as llama.cpp's emplace */
    }
}

static inline const tok_merge *find_merge(const gguf_tokenizer *t, int32_t a, int32_t b)
{
    const uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (uint64_t i = (key * 0x9E3779B97F4A7C15ull >> 17) & t->merge_mask;;
         i = (i + 1) & t->merge_mask) {
        const tok_merge *m = &t->merges[i];
        if (m->key == key)
            return m;
        if (m->key == UINT64_MAX)
            return NULL;
    }
}

int tok_bpe_setup(gguf_tokenizer *t, const gguf_file *meta, gguf_error *err)
{
    for (int i = 0; i < TOK_MAX_REGEX && t->fam->regex[i]; i++) {
        const int rc = tok_regex_compile(&t->re[i], t->fam->regex[i], t->path, err);
        if (rc)
            return rc;
        t->n_re = i + 1;
    }

    const gguf_value *mv;
    uint64_t nm = 0;
    int rc = gguf_get_arr(meta, "tokenizer.ggml.merges", &mv, NULL);
    if (rc) {
        if (!t->fam->merges_optional)
            return gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET,
                             "%s: tokenizer.ggml.merges: not found (a \"gpt2\" vocabulary needs "
                             "its merges)",
                             t->path);
    } else {
        if (mv->v.arr.type != GGUF_VALUE_STRING)
            return gguf_fail(err, GGUF_E_WRONG_TYPE, GGUF_NO_OFFSET,
                             "%s: tokenizer.ggml.merges: not an array of strings", t->path);
        nm = mv->v.arr.n;
        if (nm > (1u << 30))
            return gguf_fail(err, GGUF_E_LIMIT, GGUF_NO_OFFSET,
                             "%s: tokenizer.ggml.merges: %llu merges (at most 2^30)", t->path,
                             (unsigned long long)nm);
    }
    uint64_t cap = 16;
    while (cap < 2 * nm)
        cap *= 2;
    t->merges = malloc(cap * sizeof *t->merges);
    if (!t->merges)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "%s: tokenizer merges", t->path);
    for (uint64_t i = 0; i < cap; i++)
        t->merges[i].key = UINT64_MAX;
    t->merge_mask = cap - 1;

    extra_vec x = {0};
    char *both = NULL;
    size_t both_cap = 0;
    rc = 0;
    for (uint64_t i = 0; i < nm; i++) {
        const gguf_str s = mv->v.arr.strs[i];
        /* "left right", split at the first ' ' after the first byte */
        const char *sp = s.len > 1 ? memchr(s.data + 1, ' ', s.len - 1) : NULL;
        if (!sp)
            continue; /* llama.cpp files it under an empty pair: never used */
        const size_t ln = (size_t)(sp - s.data), rn = s.len - ln - 1;
        if (!rn)
            continue;
        if (ln + rn > both_cap) {
            both_cap = 2 * (ln + rn);
            char *nb = realloc(both, both_cap);
            if (!nb)
                goto nomem;
            both = nb;
        }
        memcpy(both, s.data, ln);
        memcpy(both + ln, sp + 1, rn);
        const int32_t a = intern(t, &x, s.data, ln);
        const int32_t b = intern(t, &x, sp + 1, rn);
        const int32_t c = intern(t, &x, both, ln + rn);
        if (a < -1 || b < -1 || c < -1)
            goto nomem;
        t->n_merges += add_merge(t, a, b, c, (uint32_t)i);
    }
    free(both);
    both = NULL;
    for (int b = 0; b < 256; b++) {
        char s[4];
        const size_t n = tok_utf8_encode(tok_byte_to_cp((unsigned char)b), s);
        t->byte_sym[b] = tok_lookup(t, s, n);
        if (t->byte_sym[b] < 0)
            t->byte_sym[b] = extra_find(t, &x, s, n); /* -1 when merges never name it */
    }

    /* Extras as strings now that their buffer no longer moves. */
    t->n_extra = x.n;
    t->extra_buf = x.buf;
    x.buf = NULL;
    if (x.n) {
        t->extra = malloc((size_t)x.n * sizeof *t->extra);
        if (!t->extra)
            goto nomem;
        for (int64_t k = 0; k < x.n; k++)
            t->extra[k] = (gguf_str){t->extra_buf + x.off[k], x.len[k]};
    }
    goto done;
nomem:
    rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "%s: tokenizer merges", t->path);
done:
    free(both);
    free(x.off);
    free(x.len);
    free(x.buf);
    return rc;
}

/* ---- encoding ---- */

typedef struct bigram {
    uint32_t rank;
    int32_t left, right;
    uint32_t size;
} bigram;

/* Words seen in this call and their ids: natural text repeats its words, and a
 * cached word skips the merges. Only short words are kept, and at most
 * CACHE_MAX of them, so a call's memory stays bounded. */
#define CACHE_WORD_MAX 48
#define CACHE_MAX (1u << 16)

typedef struct cache_slot {
    uint64_t hash; /* 0 = empty */
    uint32_t word, ids; /* offsets into the arenas */
    uint16_t wlen, n;
} cache_slot;

struct tok_bpe_state {
    cache_slot *slots;
    uint32_t mask, used;
    char *words;
    size_t wn, wcap;
    int32_t *ids_arena;
    size_t in, icap;
    /* symbols of the current word */
    int32_t *id, *prev, *next;
    uint32_t *start, *len;
    size_t cap;
    bigram *heap;
    size_t hn, hcap;
    char *scratch; /* stand-in text of a word */
    size_t scap;
};

int tok_bpe_state_create(tok_bpe_state **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? 0 : GGUF_E_NOMEM;
}

void tok_bpe_state_free(tok_bpe_state *s)
{
    if (!s)
        return;
    free(s->slots);
    free(s->words);
    free(s->ids_arena);
    free(s->id);
    free(s->prev);
    free(s->next);
    free(s->start);
    free(s->len);
    free(s->heap);
    free(s->scratch);
    free(s);
}

static int state_reserve(tok_bpe_state *s, size_t n)
{
    if (n <= s->cap)
        return 0;
    size_t cap = s->cap ? s->cap : 64;
    while (cap < n)
        cap *= 2;
    int32_t *id = realloc(s->id, cap * sizeof *id);
    if (id)
        s->id = id;
    int32_t *pv = realloc(s->prev, cap * sizeof *pv);
    if (pv)
        s->prev = pv;
    int32_t *nx = realloc(s->next, cap * sizeof *nx);
    if (nx)
        s->next = nx;
    uint32_t *st = realloc(s->start, cap * sizeof *st);
    if (st)
        s->start = st;
    uint32_t *ln = realloc(s->len, cap * sizeof *ln);
    if (ln)
        s->len = ln;
    if (!id || !pv || !nx || !st || !ln)
        return GGUF_E_NOMEM;
    s->cap = cap;
    return 0;
}

/* Min-heap: lowest rank first, then the leftmost pair. */
static inline bool bg_before(const bigram *a, const bigram *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static int heap_push(tok_bpe_state *s, bigram b)
{
    if (s->hn == s->hcap) {
        const size_t cap = s->hcap ? 2 * s->hcap : 64;
        bigram *v = realloc(s->heap, cap * sizeof *v);
        if (!v)
            return GGUF_E_NOMEM;
        s->heap = v;
        s->hcap = cap;
    }
    size_t i = s->hn++;
    while (i > 0 && bg_before(&b, &s->heap[(i - 1) / 2])) {
        s->heap[i] = s->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    s->heap[i] = b;
    return 0;
}

static bigram heap_pop(tok_bpe_state *s)
{
    const bigram top = s->heap[0];
    const bigram last = s->heap[--s->hn];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= s->hn)
            break;
        if (c + 1 < s->hn && bg_before(&s->heap[c + 1], &s->heap[c]))
            c++;
        if (!bg_before(&s->heap[c], &last))
            break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (s->hn)
        s->heap[i] = last;
    return top;
}

static int try_pair(const gguf_tokenizer *t, tok_bpe_state *s, int32_t l, int32_t r)
{
    if (l < 0 || r < 0 || s->id[l] < 0 || s->id[r] < 0)
        return 0;
    const tok_merge *m = find_merge(t, s->id[l], s->id[r]);
    if (!m)
        return 0;
    return heap_push(s, (bigram){m->rank, l, r, s->len[l] + s->len[r]});
}

/* The stand-in text of raw bytes w[0..n) into the scratch buffer. */
static int stand_in(tok_bpe_state *s, const unsigned char *w, size_t n, size_t *out_len)
{
    if (2 * n > s->scap) {
        size_t cap = s->scap ? s->scap : 256;
        while (cap < 2 * n)
            cap *= 2;
        char *b = realloc(s->scratch, cap);
        if (!b)
            return GGUF_E_NOMEM;
        s->scratch = b;
        s->scap = cap;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += tok_utf8_encode(tok_byte_to_cp(w[i]), s->scratch + k);
    *out_len = k;
    return 0;
}

static int encode_word(const gguf_tokenizer *t, tok_bpe_state *s, const unsigned char *w,
                       size_t n, tok_ids *out)
{
    int rc;
    if (t->fam->ignore_merges) { /* a word that is a token stays whole */
        size_t k;
        if ((rc = stand_in(s, w, n, &k)))
            return rc;
        const int32_t id = tok_lookup(t, s->scratch, k);
        if (id >= 0)
            return tok_ids_push(out, id);
    }
    if ((rc = state_reserve(s, n)))
        return rc;
    for (size_t i = 0; i < n; i++) {
        s->id[i] = t->byte_sym[w[i]];
        s->start[i] = (uint32_t)i;
        s->len[i] = 1;
        s->prev[i] = (int32_t)i - 1;
        s->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    s->hn = 0;
    for (size_t i = 1; i < n; i++)
        if ((rc = try_pair(t, s, (int32_t)i - 1, (int32_t)i)))
            return rc;
    while (s->hn) {
        const bigram b = heap_pop(s);
        const int32_t l = b.left, r = b.right;
        if (!s->len[l] || !s->len[r] || s->len[l] + s->len[r] != b.size)
            continue; /* stale: one side changed since it was queued */
        s->id[l] = find_merge(t, s->id[l], s->id[r])->result;
        s->len[l] += s->len[r];
        s->len[r] = 0;
        s->next[l] = s->next[r];
        if (s->next[r] >= 0)
            s->prev[s->next[r]] = l;
        if ((rc = try_pair(t, s, s->prev[l], l)) || (rc = try_pair(t, s, l, s->next[l])))
            return rc;
    }
    for (int32_t i = 0; i >= 0; i = s->next[i]) {
        const int32_t id = s->id[i];
        if (id >= 0 && id < t->n_vocab) {
            if ((rc = tok_ids_push(out, id)))
                return rc;
            continue;
        }
        /* not a token: the bytes of its text that are one-byte tokens */
        size_t k;
        if ((rc = stand_in(s, w + s->start[i], s->len[i], &k)))
            return rc;
        for (size_t j = 0; j < k; j++) {
            const int32_t bid = tok_lookup(t, s->scratch + j, 1);
            if (bid >= 0 && (rc = tok_ids_push(out, bid)))
                return rc;
        }
    }
    return 0;
}

static uint64_t word_hash(const unsigned char *w, size_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    for (size_t i = 0; i < n; i++)
        h = (h ^ w[i]) * 0x100000001B3ull;
    return h | 1; /* never 0, the empty mark */
}

/* The cached ids of word w, or NULL (then *slot is where it would go, or NULL
 * when the cache takes no more). */
static const cache_slot *cache_find(tok_bpe_state *s, const unsigned char *w, size_t n,
                                    uint64_t h, cache_slot **slot)
{
    *slot = NULL;
    if (!s->slots)
        return NULL;
    for (uint32_t i = (uint32_t)h & s->mask;; i = (i + 1) & s->mask) {
        cache_slot *c = &s->slots[i];
        if (!c->hash) {
            if (2 * (s->used + 1) <= s->mask + 1)
                *slot = c;
            return NULL;
        }
        if (c->hash == h && c->wlen == n && !memcmp(s->words + c->word, w, n))
            return c;
    }
}

static int cache_grow(tok_bpe_state *s)
{
    const uint32_t cap = s->slots ? 2 * (s->mask + 1) : 1024;
    if (cap > 2 * CACHE_MAX)
        return 0; /* full: words are no longer added */
    cache_slot *t = calloc(cap, sizeof *t);
    if (!t)
        return GGUF_E_NOMEM;
    for (uint32_t i = 0; s->slots && i <= s->mask; i++)
        if (s->slots[i].hash)
            for (uint32_t k = (uint32_t)s->slots[i].hash & (cap - 1);; k = (k + 1) & (cap - 1))
                if (!t[k].hash) {
                    t[k] = s->slots[i];
                    break;
                }
    free(s->slots);
    s->slots = t;
    s->mask = cap - 1;
    return 0;
}

static int cache_add(tok_bpe_state *s, cache_slot *slot, uint64_t h, const unsigned char *w,
                     size_t n, const int32_t *ids, size_t ni)
{
    if (ni > UINT16_MAX)
        return 0;
    if (s->wn + n > s->wcap) {
        const size_t cap = s->wcap ? 2 * s->wcap + n : 1 << 16;
        char *b = realloc(s->words, cap);
        if (!b)
            return GGUF_E_NOMEM;
        s->words = b;
        s->wcap = cap;
    }
    if (s->in + ni > s->icap) {
        const size_t cap = s->icap ? 2 * s->icap + ni : 1 << 14;
        int32_t *b = realloc(s->ids_arena, cap * sizeof *b);
        if (!b)
            return GGUF_E_NOMEM;
        s->ids_arena = b;
        s->icap = cap;
    }
    memcpy(s->words + s->wn, w, n);
    memcpy(s->ids_arena + s->in, ids, ni * sizeof *ids);
    *slot = (cache_slot){h, (uint32_t)s->wn, (uint32_t)s->in, (uint16_t)n, (uint16_t)ni};
    s->wn += n;
    s->in += ni;
    s->used++;
    return 0;
}

/* encode_word through the cache. */
static int encode_cached(const gguf_tokenizer *t, tok_bpe_state *s, const unsigned char *w,
                         size_t n, tok_ids *out)
{
    if (n > CACHE_WORD_MAX)
        return encode_word(t, s, w, n, out);
    int rc;
    if ((!s->slots || 2 * (s->used + 1) > s->mask + 1) && (rc = cache_grow(s)))
        return rc;
    const uint64_t h = word_hash(w, n);
    cache_slot *slot;
    const cache_slot *hit = cache_find(s, w, n, h, &slot);
    if (hit) {
        for (uint16_t i = 0; i < hit->n; i++)
            if ((rc = tok_ids_push(out, s->ids_arena[hit->ids + i])))
                return rc;
        return 0;
    }
    const int64_t start = out->n;
    if ((rc = encode_word(t, s, w, n, out)))
        return rc;
    return slot ? cache_add(s, slot, h, w, n, out->v + start, (size_t)(out->n - start)) : 0;
}

/* Words come out of a chain of regexes: each regex splits the pieces of the
 * one before it, the last one's pieces are the words. */
typedef struct word_ctx {
    const gguf_tokenizer *t;
    tok_bpe_state *st;
    tok_matcher *m;
    const char *base;
    int level;
    tok_ids *out;      /* encode the words into out, or, when NULL, */
    const char *origin; /* record them as offsets from origin */
    size_t *offs, *lens, n, cap;
} word_ctx;

static int on_piece(void *vctx, size_t off, size_t n);

static int split_level(word_ctx *c, int level, const char *s, size_t len)
{
    word_ctx sub = *c;
    sub.level = level;
    sub.base = s;
    const int rc = tok_regex_split(c->t->re[level], c->m, s, len, on_piece, &sub);
    c->offs = sub.offs, c->lens = sub.lens, c->n = sub.n, c->cap = sub.cap;
    return rc;
}

static int on_piece(void *vctx, size_t off, size_t n)
{
    word_ctx *c = vctx;
    const char *s = c->base + off;
    if (c->level + 1 < c->t->n_re)
        return split_level(c, c->level + 1, s, n);
    if (c->out)
        return encode_cached(c->t, c->st, (const unsigned char *)s, n, c->out);
    if (c->n == c->cap) {
        const size_t cap = c->cap ? 2 * c->cap : 64;
        size_t *o = realloc(c->offs, cap * sizeof *o);
        if (!o)
            return GGUF_E_NOMEM;
        c->offs = o;
        size_t *l = realloc(c->lens, cap * sizeof *l);
        if (!l)
            return GGUF_E_NOMEM;
        c->lens = l;
        c->cap = cap;
    }
    c->offs[c->n] = (size_t)(s - c->origin);
    c->lens[c->n++] = n;
    return 0;
}

static int split_error(const gguf_tokenizer *t, int rc, gguf_error *err)
{
    if (rc == GGUF_E_LIMIT)
        return gguf_fail(err, rc, GGUF_NO_OFFSET,
                         "gguf_tokenize: the pre-tokenizer regex of '%s' ran past PCRE2's "
                         "match limits",
                         t->pre);
    return gguf_fail(err, rc, GGUF_NO_OFFSET, "gguf_tokenize: out of memory");
}

int tok_bpe_encode(const gguf_tokenizer *t, tok_bpe_state *st, tok_matcher *m, const char *text,
                   size_t len, tok_ids *out, gguf_error *err)
{
    if (t->n_re == 0) /* cannot happen: every family has a regex */
        return encode_word(t, st, (const unsigned char *)text, len, out);
    word_ctx c = {.t = t, .st = st, .m = m, .base = text, .out = out};
    const int rc = split_level(&c, 0, text, len);
    return rc ? split_error(t, rc, err) : 0;
}

int tok_bpe_words(const gguf_tokenizer *t, const char *text, size_t len, size_t **offs,
                  size_t **lens, size_t *n, gguf_error *err)
{
    *offs = *lens = NULL;
    *n = 0;
    if (!t || t->type != GGUF_TOK_BPE)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "tok_bpe_words: not a BPE tokenizer");
    tok_matcher *m;
    if (tok_matcher_create(&m))
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "tok_bpe_words: out of memory");
    word_ctx c = {.t = t, .m = m, .base = text, .origin = text};
    const int rc = len ? split_level(&c, 0, text, len) : 0;
    tok_matcher_free(m);
    if (rc) {
        free(c.offs);
        free(c.lens);
        return split_error(t, rc, err);
    }
    *offs = c.offs;
    *lens = c.lens;
    *n = c.n;
    return 0;
}
