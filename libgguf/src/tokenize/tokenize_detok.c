/*
 * ids -> bytes: each token's piece (llama.cpp's token_to_piece with special
 * tokens shown), computed once when the tokenizer is made, and their
 * concatenation. See gguf/tokenize.h.
 */
#include <stdlib.h>
#include <string.h>

#include "util/error_lib.h"
#include "tokenize/tokenize_internal.h"

size_t tok_piece_bytes(gguf_tok_type type, uint16_t a, gguf_str s, const int16_t *cp_byte, char *b)
{
    if (a & (TOK_ATTR_UNKNOWN | TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED)) {
        memcpy(b, s.data, s.len);
        return s.len;
    }
    if (type == GGUF_TOK_BPE) {
        if (!(a & TOK_ATTR_NORMAL))
            return 0;
        /* stand-in characters back to bytes; any other character as it is
         * (llama.cpp writes "[UNK_BYTE_0x..]" there) */
        size_t n = 0;
        for (uint64_t i = 0; i < s.len;) {
            const size_t l = tok_utf8_len((unsigned char)s.data[i]);
            const size_t avail = s.len - i;
            int byte = -1;
            if (l <= avail && tok_utf8_valid(s.data + i, l) == l) {
                size_t adv;
                const uint32_t cp = tok_utf8_decode((const unsigned char *)s.data + i, &adv);
                byte = cp >= 256 + 68 ? -1 : cp_byte ? cp_byte[cp] : tok_cp_to_byte(cp);
            }
            if (byte >= 0) {
                b[n++] = (char)byte;
                i += l;
            } else {
                const size_t k = l <= avail ? l : avail;
                memcpy(b + n, s.data + i, k);
                n += k;
                i += k;
            }
        }
        return n;
    }
    /* SPM and WPM */
    if (a & TOK_ATTR_NORMAL) {
        size_t n = 0;
        for (uint64_t i = 0; i < s.len;) {
            if (s.len - i >= 3 && !memcmp(s.data + i, "\xE2\x96\x81", 3)) {
                b[n++] = ' ';
                i += 3;
            } else {
                b[n++] = s.data[i++];
            }
        }
        return n;
    }
    if ((a & TOK_ATTR_BYTE) && s.len == 6 && !memcmp(s.data, "<0x", 3) && s.data[5] == '>') {
        char h[3] = {s.data[3], s.data[4], 0};
        char *end;
        const long v = strtol(h, &end, 16);
        if (end == h + 2) {
            b[0] = (char)v;
            return 1;
        }
    }
    return 0; /* unused, undefined, malformed byte tokens */
}

/* Writes the piece of token id to b; it is never longer than the token text. */
static size_t piece_of(const gguf_tokenizer *t, int64_t id, char *b)
{
    return tok_piece_bytes(t->type, t->attr[id], t->strs[id], t->cp_byte, b);
}

int tok_pieces_setup(gguf_tokenizer *t, gguf_error *err)
{
    for (uint32_t cp = 0; cp < 256 + 68; cp++)
        t->cp_byte[cp] = (int16_t)tok_cp_to_byte(cp);
    uint64_t total = 0;
    for (int64_t i = 0; i < t->n_vocab; i++)
        total += t->strs[i].len;
    t->piece_off = malloc(((size_t)t->n_vocab + 1) * sizeof *t->piece_off);
    t->piece_buf = malloc(total + 1);
    if (!t->piece_off || !t->piece_buf)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "%s: tokenizer pieces", t->path);
    /* A piece is never longer than its token's text. */
    uint64_t at = 0;
    for (int64_t i = 0; i < t->n_vocab; i++) {
        t->piece_off[i] = at;
        at += piece_of(t, i, t->piece_buf + at);
    }
    t->piece_off[t->n_vocab] = at;
    return 0;
}

int gguf_token_piece(const gguf_tokenizer *tok, int32_t id, bool special, const char **piece,
                     size_t *len)
{
    if (!tok || !piece || !len || id < 0 || id >= tok->n_vocab)
        return GGUF_E_INVALID;
    *piece = tok->piece_buf + tok->piece_off[id];
    *len = tok->piece_off[id + 1] - tok->piece_off[id];
    if (!special && (tok->attr[id] & (TOK_ATTR_UNKNOWN | TOK_ATTR_CONTROL)))
        *len = 0;
    return 0;
}

int gguf_token_text(const gguf_tokenizer *tok, int32_t id, char *buf, size_t size)
{
    if (buf && size)
        buf[0] = 0;
    const char *p;
    size_t l;
    if (!buf || !size || gguf_token_piece(tok, id, false, &p, &l) != 0)
        return GGUF_E_INVALID;
    if (l > size - 1)
        l = size - 1;
    memcpy(buf, p, l);
    buf[l] = 0;
    return (int)l;
}

int gguf_detokenize(const gguf_tokenizer *tok, const int32_t *ids, int64_t n,
                    const gguf_detokenize_opts *opts, char **out, size_t *len, gguf_error *err)
{
    if (opts && opts->version > GGUF_DETOKENIZE_OPTS_VERSION)
        return gguf_opts_version_fail(opts->version, GGUF_DETOKENIZE_OPTS_VERSION, "gguf_detokenize_opts",
                                      err);
    if (!tok || (!ids && n) || n < 0 || !out || !len)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_detokenize: NULL argument");
    *out = NULL;
    *len = 0;
    const gguf_detokenize_opts o = opts ? *opts : (gguf_detokenize_opts)GGUF_DETOKENIZE_OPTS_INIT;
    size_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= tok->n_vocab)
            return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                             "gguf_detokenize: ids[%lld]: %d is outside the vocabulary of %lld "
                             "tokens",
                             (long long)i, ids[i], (long long)tok->n_vocab);
        total += tok->piece_off[ids[i] + 1] - tok->piece_off[ids[i]];
    }
    char *b = malloc(total + 1);
    if (!b)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "gguf_detokenize: out of memory");
    /* llama.cpp drops one leading ' ' of the first piece when the tokenizer
     * adds a space prefix (lstrip of its first token). */
    bool strip = tok->add_space_prefix && !o.keep_prefix;
    size_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        const char *p;
        size_t l;
        gguf_token_piece(tok, ids[i], o.special, &p, &l);
        if (strip && l && p[0] == ' ')
            p++, l--;
        strip = false;
        memcpy(b + at, p, l);
        at += l;
    }
    b[at] = 0;
    *out = b;
    *len = at;
    return 0;
}
