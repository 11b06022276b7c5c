/*
 * A GPT-2 style byte-level BPE vocabulary (tokenizer.ggml.model "gpt2"), as the
 * converter writes it for most models today: tokens, token types and merges,
 * no scores.
 *
 *   ids 0..255   the 256 bytes, each as GPT-2's printable stand-in character
 *                ("!" .. "~", then the Latin-1 range, then U+0100.. for the
 *                rest: space is "Ġ" U+0120, newline "Ċ" U+010A), in GPT-2's order
 *   ids 256..    one token per merge, merges building English words left to right
 *                ("Ġ t" -> "Ġt", "Ġt h" -> "Ġth", "Ġth e" -> "Ġthe"), then
 *                filler words "ĠtokN" the same way
 *   last id      "<|endoftext|>" (control), BOS and EOS
 */
#include <stdlib.h>
#include <string.h>

#include "gen.h"

/* GPT-2's bytes_to_unicode(): the code point standing for byte b. */
static uint32_t byte_char(int b)
{
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))
        return (uint32_t)b;
    int n = 0; /* bytes without a printable stand-in, in order, get 256 + n */
    for (int c = 0; c < b; c++)
        if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF)))
            n++;
    return 256u + (uint32_t)n;
}

/* The byte whose stand-in comes at position i of GPT-2's vocabulary order. */
static int byte_at(int i)
{
    static const int ranges[3][2] = {{'!', '~'}, {0xA1, 0xAC}, {0xAE, 0xFF}};
    for (int r = 0; r < 3; r++) {
        int len = ranges[r][1] - ranges[r][0] + 1;
        if (i < len)
            return ranges[r][0] + i;
        i -= len;
    }
    for (int b = 0; b < 256; b++) /* the rest, in byte order */
        if (byte_char(b) >= 256 && i-- == 0)
            return b;
    return 0;
}

static size_t put_utf8(char *o, uint32_t c)
{
    if (c < 0x80) {
        o[0] = (char)c;
        return 1;
    }
    o[0] = (char)(0xC0 | (c >> 6)); /* every stand-in is below U+0800 */
    o[1] = (char)(0x80 | (c & 0x3F));
    return 2;
}

/* A string of bytes in stand-in characters. */
static char *encode(const char *s)
{
    char *o = malloc(strlen(s) * 2 + 1);
    if (!o)
        return NULL;
    size_t n = 0;
    for (const unsigned char *c = (const unsigned char *)s; *c; c++)
        n += put_utf8(o + n, byte_char(*c));
    o[n] = 0;
    return o;
}

/* Length in bytes of the UTF-8 character at s. */
static size_t char_len(const char *s) { return ((unsigned char)*s & 0x80) ? 2 : 1; }

typedef struct vocab {
    char **tok;
    char **merge;
    uint32_t n_tok, n_merge, cap;
    uint32_t *slots; /* open addressing over tok: id + 1, 0 = empty; 2^k >= 2 cap */
    uint32_t mask;
    bool oom;
} vocab;

static uint32_t str_hash(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

/* True when s is a token already; else false and, when add_id > 0, records id add_id - 1. */
static bool has_or_add(vocab *v, const char *s, uint32_t add_id)
{
    for (uint32_t i = str_hash(s) & v->mask;; i = (i + 1) & v->mask) {
        if (!v->slots[i]) {
            if (add_id)
                v->slots[i] = add_id;
            return false;
        }
        if (!strcmp(v->tok[v->slots[i] - 1], s))
            return true;
    }
}

/* Add the merges that build word w (stand-in characters) left to right. */
static void add_word(vocab *v, const char *w)
{
    size_t len = strlen(w), first = char_len(w);
    char *left = malloc(len + 1), *both = malloc(len + 1), *m = malloc(2 * len + 2);
    if (!left || !both || !m) {
        v->oom = true;
        free(left), free(both), free(m);
        return;
    }
    memcpy(left, w, first);
    left[first] = 0;
    for (size_t pos = first; pos < len && v->n_tok < v->cap; pos += char_len(w + pos)) {
        size_t cl = char_len(w + pos);
        memcpy(both, w, pos + cl);
        both[pos + cl] = 0;
        if (!has_or_add(v, both, 0)) {
            snprintf(m, 2 * len + 2, "%s %.*s", left, (int)cl, w + pos);
            v->tok[v->n_tok] = strdup(both);
            v->merge[v->n_merge++] = strdup(m);
            if (!v->tok[v->n_tok] || !v->merge[v->n_merge - 1]) {
                v->oom = true;
                break;
            }
            has_or_add(v, both, v->n_tok + 1);
            v->n_tok++;
        }
        memcpy(left, both, pos + cl + 1);
    }
    free(left), free(both), free(m);
}

int gen_vocab_gpt2_add(gen_plan *p, uint32_t n)
{
    static const char *const words[] = {
        "the", "and", "to", "of", "is", "in", "it", "was", "he", "she", "they", "Once", "upon",
        "time", "there", "little", "girl", "boy", "day", "big", "happy", "said", "with", "her",
        "his", "on", "for", "you", "that", "had", "saw", "play", "dog", "cat", "sun", "tree",
        "went", "home", "friend", "mom", "very", "wanted", "one", "not", "be", "have", "at",
        "but", "so", "what", "all", "we", "can", "out", "up", "The", "capital", "France",
        "Paris", "What",
    };
    if (n < 258)
        return -1;
    vocab v = {0};
    v.cap = n - 1; /* the last id is <|endoftext|> */
    v.tok = calloc(n, sizeof *v.tok);
    v.merge = calloc(n, sizeof *v.merge);
    int32_t *type = calloc(n, sizeof *type);
    uint32_t size = 1024;
    while (size < 2 * n)
        size *= 2;
    v.slots = calloc(size, sizeof *v.slots);
    v.mask = size - 1;
    if (!v.tok || !v.merge || !type || !v.slots) {
        free(v.tok), free(v.merge), free(type), free(v.slots);
        p->err = GGUF_E_NOMEM;
        return 0;
    }
    for (int i = 0; i < 256; i++) {
        char s[4] = {0};
        put_utf8(s, byte_char(byte_at(i)));
        if (!(v.tok[v.n_tok] = strdup(s)))
            v.oom = true;
        else
            has_or_add(&v, s, v.n_tok + 1);
        v.n_tok++;
    }
    for (size_t w = 0; w < sizeof words / sizeof words[0] && !v.oom; w++) {
        char plain[64];
        snprintf(plain, sizeof plain, " %s", words[w]);
        char *e = encode(plain);
        if (e)
            add_word(&v, e);
        free(e);
        if ((e = encode(words[w])))
            add_word(&v, e);
        free(e);
    }
    for (uint32_t k = 0; v.n_tok < v.cap && !v.oom; k++) {
        char plain[32];
        snprintf(plain, sizeof plain, " tok%u", k);
        char *e = encode(plain);
        if (e)
            add_word(&v, e);
        free(e);
    }
    free(v.slots);
    v.tok[v.n_tok++] = strdup("<|endoftext|>");
    for (uint32_t i = 0; i < n; i++) {
        if (!v.tok[i])
            v.oom = true;
        type[i] = i == n - 1 ? 3 : 1; /* control, normal */
    }
    if (v.oom) {
        p->err = GGUF_E_NOMEM;
        for (uint32_t i = 0; i < n; i++)
            free(v.tok[i]), free(v.merge[i]);
        free(v.tok), free(v.merge), free(type);
        return 0;
    }
    gen_kv_str(p, "tokenizer.ggml.model", "gpt2");
    gen_kv_str(p, "tokenizer.ggml.pre", "gpt-2");
    gen_kv_arr_str(p, "tokenizer.ggml.tokens", v.tok, n);
    gen_kv_arr(p, "tokenizer.ggml.token_type", GGUF_VALUE_INT32, type, n);
    gen_kv_arr_str(p, "tokenizer.ggml.merges", v.merge, v.n_merge);
    gen_kv_u32(p, "tokenizer.ggml.bos_token_id", n - 1);
    gen_kv_u32(p, "tokenizer.ggml.eos_token_id", n - 1);
    free(type);
    return 0;
}
