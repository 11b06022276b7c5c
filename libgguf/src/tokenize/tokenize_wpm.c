/*
 * WordPiece ("bert"), as llama.cpp's llm_tokenizer_wpm_session does it:
 *
 *   each code point --(first code point of its NFD form: accents of
 *                      precomposed letters go; then simple lowercase)-->
 *   split: whitespace ends a word; NUL, U+FFFD and control/format/private-use
 *          characters vanish; punctuation, ASCII symbols and CJK ideographs
 *          are words of their own; everything else extends the current word
 *   word --("▁" + word; at each position the longest token, else the whole
 *           word is [UNK])--> ids
 *
 * The two maps are libunistring's (its Unicode database, as PCRE2's is for
 * the character classes, which are PCRE2 properties in one splitter regex).
 */
#include <stdlib.h>
#include <string.h>
#include <unicase.h>
#include <uninorm.h>

#include "util/error_lib.h"
#include "tokenize/tokenize_internal.h"

/* llama.cpp's is_chinese_char ranges (the HF BERT tokenizer's, with its
 * 0x2B920 start kept). */
#define CJK                                                                          \
    "\\x{4E00}-\\x{9FFF}\\x{3400}-\\x{4DBF}\\x{20000}-\\x{2A6DF}\\x{2A700}-\\x{2B73F}" \
    "\\x{2B740}-\\x{2B81F}\\x{2B920}-\\x{2CEAF}\\x{F900}-\\x{FAFF}\\x{2F800}-\\x{2FA1F}"
#define DROP "\\x{0}\\x{FFFD}\\p{Cc}\\p{Cf}\\p{Co}\\p{Cs}"
#define SINGLE "\\p{P}$+<=>^`|~" CJK

/* Groups: 1 whitespace, 2 dropped, 3 a word of one character, 4 word text. */
static const char wpm_pattern[] = "(\\p{White_Space}+)|([" DROP "])|([" SINGLE "])|"
                                  "([^\\p{White_Space}" DROP SINGLE "]+)";

int tok_wpm_setup(gguf_tokenizer *t, gguf_error *err)
{
    return tok_regex_compile_raw(&t->wpm_re, wpm_pattern, t->path, err);
}

/* The first code point of cp's full canonical decomposition: the mapping
 * applied to its first code point until none is left (Hangul included). */
static uint32_t nfd_first(uint32_t cp)
{
    ucs4_t d[UC_DECOMPOSITION_MAX_LENGTH];
    while (uc_canonical_decomposition(cp, d) > 0)
        cp = d[0];
    return cp;
}

/* Simple (one code point) lowercase of UnicodeData.txt: İ (U+0130) gives i,
 * the first code point of its full lowercase. */
static uint32_t lower(uint32_t cp)
{
    return uc_tolower(cp);
}

typedef struct wpm_ctx {
    const gguf_tokenizer *t;
    const char *norm;
    char *word;   /* "▁" + the current word */
    size_t wn, wcap;
    tok_ids *out;
} wpm_ctx;

/* The longest tokens that spell "▁" + word, or [UNK]. */
static int flush_word(wpm_ctx *c)
{
    if (c->wn <= 3)
        return 0; /* only the "▁" */
    const gguf_tokenizer *t = c->t;
    const int64_t mark = c->out->n;
    const size_t n = c->wn;
    int rc;
    for (size_t i = 0; i < n;) {
        size_t j = i + t->max_token_len + 1 < n ? i + t->max_token_len + 1 : n;
        int32_t id = -1;
        for (; j > i; j--)
            if ((id = tok_lookup(t, c->word + i, j - i)) >= 0)
                break;
        if (id < 0) {
            c->out->n = mark; /* no token at i: the word is unknown */
            break;
        }
        if ((rc = tok_ids_push(c->out, id)))
            return rc;
        i = j;
    }
    c->wn = 3;
    if (c->out->n == mark) {
        if (t->unk < 0)
            return GGUF_E_NOT_FOUND;
        return tok_ids_push(c->out, t->unk);
    }
    return 0;
}

static int word_add(wpm_ctx *c, const char *s, size_t n)
{
    if (c->wn + n > c->wcap) {
        size_t cap = c->wcap ? c->wcap : 64;
        while (cap < c->wn + n)
            cap *= 2;
        char *w = realloc(c->word, cap);
        if (!w)
            return GGUF_E_NOMEM;
        c->word = w;
        c->wcap = cap;
    }
    memcpy(c->word + c->wn, s, n);
    c->wn += n;
    return 0;
}

static int on_group(void *vctx, int group, size_t off, size_t n)
{
    wpm_ctx *c = vctx;
    int rc;
    switch (group) {
    case 2: return 0; /* dropped; the word goes on */
    case 3:
        if ((rc = flush_word(c)) || (rc = word_add(c, c->norm + off, n)))
            return rc;
        return flush_word(c);
    case 4: return word_add(c, c->norm + off, n);
    default: return flush_word(c); /* whitespace */
    }
}

int tok_wpm_encode(const gguf_tokenizer *t, tok_matcher *m, const char *text, size_t len,
                   tok_ids *out, gguf_error *err)
{
    /* Normalise: at most 4 bytes out per code point in. */
    char *norm = malloc(4 * len + 1);
    wpm_ctx c = {t, norm, NULL, 0, 0, out};
    int rc = norm ? word_add(&c, "\xE2\x96\x81", 3) : GGUF_E_NOMEM;
    if (rc)
        goto done;
    size_t nl = 0;
    for (size_t i = 0; i < len;) {
        size_t adv;
        const uint32_t cp = tok_utf8_decode((const unsigned char *)text + i, &adv);
        nl += tok_utf8_encode(lower(nfd_first(cp)), norm + nl);
        i += adv;
    }
    rc = tok_regex_scan(t->wpm_re, m, norm, nl, on_group, &c);
    if (!rc)
        rc = flush_word(&c);
done:
    free(norm);
    free(c.word);
    if (rc == GGUF_E_NOT_FOUND)
        return gguf_fail(err, rc, GGUF_NO_OFFSET,
                         "gguf_tokenize: a word has no tokens and %s no [UNK] token", t->path);
    if (rc == GGUF_E_LIMIT)
        return gguf_fail(err, rc, GGUF_NO_OFFSET,
                         "gguf_tokenize: the WordPiece splitter ran past PCRE2's match limits");
    if (rc)
        return gguf_fail(err, rc, GGUF_NO_OFFSET, "gguf_tokenize: out of memory");
    return 0;
}
