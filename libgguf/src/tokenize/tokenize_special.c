/*
 * Special tokens: llama.cpp's corrections of token types by text, the list of
 * tokens matched in raw text, and the partition of the text around them
 * (llama_vocab::impl::tokenizer_st_partition).
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "util/error_lib.h"
#include "tokenize/tokenize_internal.h"

/* Texts llama.cpp treats as end-of-generation tokens: each becomes a control
 * token whatever its type in the file says. */
static const char *const eog_texts[] = {
    "<|eot_id|>",    "<|im_end|>",        "<|end|>",           "<|return|>",
    "<|call|>",      "<|flush|>",         "<|calls|>",         "<end_of_turn>",
    "<|endoftext|>", "</s>",              "<|eom_id|>",        "<EOT>",
    "_<EOT>",        "[EOT]",             "[EOS]",             "<|end_of_text|>",
    "<end_of_utterance>", "<｜end▁of▁sentence｜>",
};

/* Fill-in-the-middle tokens: when the file gives no id for a kind, the token
 * llama.cpp finds by text becomes a control token. */
typedef struct fim_kind {
    const char *keys[2];
    const char *texts[9];
} fim_kind;

static const fim_kind fim_kinds[] = {
    {{"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id"},
     {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
      "<|code_prefix|>", "<|prefix|>"}},
    {{"tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id"},
     {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
      "<|code_suffix|>", "<|suffix|>"}},
    {{"tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id"},
     {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
      "<|code_middle|>", "<|middle|>"}},
    {{"tokenizer.ggml.fim_pad_token_id", NULL},
     {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}},
    {{"tokenizer.ggml.fim_rep_token_id", NULL},
     {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}},
    {{"tokenizer.ggml.fim_sep_token_id", NULL}, {"<|file_sep|>"}},
};

static int32_t find_text(const gguf_tokenizer *t, const char *s)
{
    return tok_lookup(t, s, strlen(s));
}

static bool has_valid_id(const gguf_tokenizer *t, const gguf_file *meta, const char *key)
{
    int64_t v;
    return key && !gguf_get_i64(meta, key, &v, NULL) && v >= 0 && v < t->n_vocab;
}

static void mark(gguf_tokenizer *t, int32_t id, uint16_t set)
{
    if (id >= 0)
        t->attr[id] |= set;
}

/* general.name contains `what`, ignoring ASCII case. */
static bool name_has(const gguf_file *meta, const char *what)
{
    gguf_str name;
    if (gguf_get_str(meta, "general.name", &name, NULL))
        return false;
    const size_t wl = strlen(what);
    for (uint64_t i = 0; i + wl <= name.len; i++) {
        size_t k = 0;
        while (k < wl && tolower((unsigned char)name.data[i + k]) == what[k])
            k++;
        if (k == wl)
            return true;
    }
    return false;
}

static int by_length(const void *a, const void *b, void *ctx)
{
    const gguf_tokenizer *t = ctx;
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    const uint64_t lx = t->strs[x].len, ly = t->strs[y].len;
    if (lx != ly)
        return lx > ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

int tok_special_setup(gguf_tokenizer *t, const gguf_file *meta, gguf_error *err)
{
    for (size_t i = 0; i < sizeof eog_texts / sizeof eog_texts[0]; i++)
        mark(t, find_text(t, eog_texts[i]), TOK_ATTR_CONTROL);
    /* llama.cpp keeps the first match of an unordered map; the lowest id here. */
    for (size_t k = 0; k < sizeof fim_kinds / sizeof fim_kinds[0]; k++) {
        const fim_kind *f = &fim_kinds[k];
        if (has_valid_id(t, meta, f->keys[0]) || has_valid_id(t, meta, f->keys[1]))
            continue;
        int32_t best = -1;
        for (size_t j = 0; j < sizeof f->texts / sizeof f->texts[0] && f->texts[j]; j++) {
            const int32_t id = find_text(t, f->texts[j]);
            if (id >= 0 && (best < 0 || id < best))
                best = id;
        }
        mark(t, best, TOK_ATTR_CONTROL);
    }
    /* gpt-oss: these are shown even when special tokens are hidden. */
    static const char *const shown[] = {"<|channel|>", "<|message|>", "<|start|>",
                                        "<|constrain|>"};
    for (size_t i = 0; i < sizeof shown / sizeof shown[0]; i++) {
        const int32_t id = find_text(t, shown[i]);
        if (id >= 0)
            t->attr[id] = TOK_ATTR_USER_DEFINED;
    }
    /* o200k_harmony and solar-open: <|end|> is not an end of generation. */
    const int32_t end = find_text(t, "<|end|>");
    if (end >= 0 && ((find_text(t, "<|return|>") >= 0 && find_text(t, "<|call|>") >= 0) ||
                     (find_text(t, "<|calls|>") >= 0 && find_text(t, "<|flush|>") >= 0)))
        t->attr[end] = TOK_ATTR_USER_DEFINED;

    int64_t n = 0;
    for (int64_t id = 0; id < t->n_vocab; id++)
        n += (t->attr[id] & (TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN)) &&
             t->strs[id].len > 0;
    t->special = malloc((size_t)(n ? n : 1) * sizeof *t->special);
    if (!t->special)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "%s: tokenizer", t->path);
    for (int64_t id = 0; id < t->n_vocab; id++)
        if ((t->attr[id] & (TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN)) &&
            t->strs[id].len > 0)
            t->special[t->n_special++] = (int32_t)id;
    /* llama.cpp's std::sort by length leaves ties in no set order; by id here. */
    qsort_r(t->special, (size_t)t->n_special, sizeof *t->special, by_length, t);

    /* Phi-3: special tokens eat the whitespace after them, except these. */
    if (name_has(meta, "phi-3") || name_has(meta, "phi3")) {
        for (int64_t i = 0; i < t->n_special; i++)
            t->attr[t->special[i]] |= TOK_ATTR_RSTRIP;
        mark(t, find_text(t, "</s>"), TOK_ATTR_RSTRIP);
        static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
        for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) {
            const int32_t id = find_text(t, keep[i]);
            if (id >= 0)
                t->attr[id] &= (uint16_t)~TOK_ATTR_RSTRIP;
        }
    }
    return 0;
}

typedef struct frag_vec {
    tok_frag *v;
    size_t n, cap;
} frag_vec;

static int frag_push(frag_vec *f, size_t off, size_t len, int32_t id)
{
    if (f->n == f->cap) {
        const size_t cap = f->cap ? 2 * f->cap : 16;
        tok_frag *v = realloc(f->v, cap * sizeof *v);
        if (!v)
            return GGUF_E_NOMEM;
        f->v = v;
        f->cap = cap;
    }
    f->v[f->n++] = (tok_frag){off, len, id};
    return 0;
}

/*
 * Each special token in turn (longest first) cuts every raw fragment where it
 * occurs, left to right; a token with rstrip also drops the ASCII whitespace
 * after it (llama.cpp's lstrip is only set for values not supported here:
 * jina-v2, modern-bert). This is the plain form: one scan of the text per
 * special token.
 */
static int partition_scan(const gguf_tokenizer *t, const char *text, size_t len,
                          bool parse_special, tok_frag **out, size_t *n)
{
    frag_vec cur = {0}, next = {0};
    if (frag_push(&cur, 0, len, -1))
        return GGUF_E_NOMEM;
    for (int64_t s = 0; s < t->n_special; s++) {
        const int32_t id = t->special[s];
        const uint16_t a = t->attr[id];
        if (!parse_special && (a & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN)))
            continue;
        const gguf_str tx = t->strs[id];
        if (tx.len > len || !memmem(text, len, tx.data, tx.len))
            continue; /* nowhere in the text */
        next.n = 0;
        for (size_t i = 0; i < cur.n; i++) {
            const tok_frag f = cur.v[i];
            if (f.id >= 0) {
                if (frag_push(&next, f.off, f.len, f.id))
                    goto nomem;
                continue;
            }
            size_t pos = f.off;
            const size_t end = f.off + f.len;
            const char *m;
            while (pos < end && (m = memmem(text + pos, end - pos, tx.data, tx.len))) {
                const size_t at = (size_t)(m - text);
                const size_t left = at - pos;
                if ((left && frag_push(&next, pos, left, -1)) || frag_push(&next, 0, 0, id))
                    goto nomem;
                pos = at + tx.len;
                if (a & TOK_ATTR_RSTRIP)
                    while (pos < end && isspace((unsigned char)text[pos]))
                        pos++;
            }
            if (pos < end && frag_push(&next, pos, end - pos, -1))
                goto nomem;
        }
        const frag_vec tmp = cur;
        cur = next;
        next = tmp;
    }
    free(next.v);
    *out = cur.v;
    *n = cur.n;
    return 0;
nomem:
    free(cur.v);
    free(next.v);
    return GGUF_E_NOMEM;
}

/* Byte states of the indexed form. */
enum { RAW = 0, CLAIMED = 1, DROPPED = 2 };

typedef struct claim {
    size_t off, len;
    int32_t id;
} claim;

static int by_offset(const void *a, const void *b)
{
    const size_t x = ((const claim *)a)->off, y = ((const claim *)b)->off;
    return x < y ? -1 : x > y;
}

/*
 * The same result with the text indexed once: positions chained by the two
 * bytes found there, so each token looks only where its first two bytes are.
 * A byte is raw until a token claims it or a strip drops it; raw fragments
 * are the runs of raw bytes, so "inside one fragment" is "every byte raw", and
 * "left to right, after the previous match" is a walk of the chain in order.
 */
static int partition_indexed(const gguf_tokenizer *t, const char *text, size_t len,
                             bool parse_special, tok_frag **out, size_t *n)
{
    const unsigned char *u = (const unsigned char *)text;
    uint8_t *state = calloc(len, 1);
    int32_t *head = malloc(65536 * sizeof *head);
    int32_t *chain = malloc(len * sizeof *chain);
    claim *cl = NULL;
    size_t ncl = 0, ccap = 0;
    frag_vec f = {0};
    int rc = GGUF_E_NOMEM;
    if (!state || !head || !chain)
        goto done;
    for (size_t i = 0; i < 65536; i++)
        head[i] = -1;
    for (size_t i = len - 1; i-- > 0;) { /* build back to front: chains run forward */
        const uint32_t b = (uint32_t)u[i] << 8 | u[i + 1];
        chain[i] = head[b];
        head[b] = (int32_t)i;
    }
    for (int64_t s = 0; s < t->n_special; s++) {
        const int32_t id = t->special[s];
        const uint16_t a = t->attr[id];
        if (!parse_special && (a & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN)))
            continue;
        const gguf_str tx = t->strs[id];
        if (tx.len > len)
            continue;
        size_t from = 0; /* a match starts after the previous one (and its strip) */
        int32_t p = -1;
        const char *m1 = NULL;
        if (tx.len == 1)
            m1 = memchr(text, tx.data[0], len);
        else
            p = head[(uint32_t)(unsigned char)tx.data[0] << 8 | (unsigned char)tx.data[1]];
        for (;;) {
            size_t at;
            if (tx.len == 1) {
                if (!m1)
                    break;
                at = (size_t)(m1 - text);
                m1 = at + 1 < len ? memchr(text + at + 1, tx.data[0], len - at - 1) : NULL;
            } else {
                if (p < 0)
                    break;
                at = (size_t)p;
                p = chain[p];
            }
            if (at < from || at + tx.len > len || memcmp(text + at, tx.data, tx.len))
                continue;
            bool raw = true;
            for (size_t k = 0; k < tx.len && raw; k++)
                raw = state[at + k] == RAW;
            if (!raw)
                continue;
            if (ncl == ccap) {
                ccap = ccap ? 2 * ccap : 64;
                claim *c = realloc(cl, ccap * sizeof *c);
                if (!c)
                    goto done;
                cl = c;
            }
            cl[ncl++] = (claim){at, tx.len, id};
            memset(state + at, CLAIMED, tx.len);
            size_t end = at + tx.len;
            if (a & TOK_ATTR_RSTRIP)
                for (; end < len && state[end] == RAW && isspace(u[end]); end++)
                    state[end] = DROPPED;
            from = end;
        }
    }
    if (ncl)
        qsort(cl, ncl, sizeof *cl, by_offset);
    size_t c = 0;
    for (size_t i = 0; i < len;) {
        if (c < ncl && cl[c].off == i) {
            if (frag_push(&f, 0, 0, cl[c].id))
                goto done;
            i += cl[c++].len;
            continue;
        }
        if (state[i] == DROPPED) {
            i++;
            continue;
        }
        size_t e = i;
        while (e < len && state[e] == RAW)
            e++;
        if (frag_push(&f, i, e - i, -1))
            goto done;
        i = e;
    }
    *out = f.v;
    *n = f.n;
    f.v = NULL;
    rc = 0;
done:
    free(f.v);
    free(state);
    free(head);
    free(chain);
    free(cl);
    return rc;
}

int tok_special_partition_mode(const gguf_tokenizer *t, const char *text, size_t len,
                               bool parse_special, int mode, tok_frag **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    if (mode == 0) {
        /* Few special tokens: one scan each is cheap. Many (deepseek's 2400,
         * reserved ranges): index the text, unless it is huge. */
        int64_t k = 0;
        for (int64_t s = 0; s < t->n_special && k <= 16; s++)
            k += parse_special || !(t->attr[t->special[s]] & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN));
        mode = k > 16 && len >= 2 && len <= (256u << 20) ? 2 : 1;
    }
    if (mode == 2 && len >= 2)
        return partition_indexed(t, text, len, parse_special, out, n);
    return partition_scan(t, text, len, parse_special, out, n);
}

int tok_special_partition(const gguf_tokenizer *t, const char *text, size_t len,
                          bool parse_special, tok_frag **out, size_t *n)
{
    return tok_special_partition_mode(t, text, len, parse_special, 0, out, n);
}
