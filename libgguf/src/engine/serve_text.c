/* serve: UTF-8 checks and repair, token texts, growing buffers.
 * JSON strings must be valid UTF-8, and a token's bytes need not be (a byte
 * token can end inside a character): every text that leaves the server goes
 * through serve_utf8_repair, which replaces each invalid byte with U+FFFD as
 * Python's bytes.decode(errors="replace") does for vLLM. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/serve_internal.h"

void serve_buf_add(serve_buf *b, const void *data, size_t n)
{
    if (b->nomem)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) {
            if (cap > SIZE_MAX / 2) {
                b->nomem = true;
                return;
            }
            cap *= 2;
        }
        char *p = realloc(b->p, cap);
        if (!p) {
            b->nomem = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, data, n);
    b->n += n;
    b->p[b->n] = 0;
}

void serve_buf_free(serve_buf *b)
{
    free(b->p);
    *b = (serve_buf){0};
}

size_t serve_utf8_seq(const unsigned char *s, size_t n)
{
    if (n == 0)
        return 0;
    const unsigned c = s[0];
    if (c < 0x80)
        return 1;
    size_t len;
    unsigned lo = 0x80, hi = 0xBF; /* range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0)
            lo = 0xA0; /* overlong */
        else if (c == 0xED)
            hi = 0x9F; /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0)
            lo = 0x90; /* overlong */
        else if (c == 0xF4)
            hi = 0x8F; /* past U+10FFFF */
    } else {
        return 0;
    }
    if (len > n || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return len;
}

bool serve_utf8_valid(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        const size_t l = serve_utf8_seq(u + i, n - i);
        if (l == 0)
            return false;
        i += l;
    }
    return true;
}

size_t serve_utf8_repair(const char *in, size_t n, char *out)
{
    const unsigned char *u = (const unsigned char *)in;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        const size_t l = serve_utf8_seq(u + i, n - i);
        if (l == 0) {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        } else {
            memcpy(out + o, in + i, l);
            o += l;
            i += l;
        }
    }
    out[o] = 0;
    return o;
}

int64_t serve_utf8_count(const char *s, size_t n)
{
    int64_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

size_t serve_piece(const gguf_serve *s, int32_t id, char *buf)
{
    buf[0] = 0;
    if (id < 0 || id >= s->m.n_vocab)
        return 0;
    const int l = s->m.token_text(s->m.user, id, buf, SERVE_PIECE_MAX);
    if (l <= 0) {
        buf[0] = 0;
        return 0;
    }
    return (size_t)l < SERVE_PIECE_MAX ? (size_t)l : SERVE_PIECE_MAX - 1;
}

json_t *serve_json_text(const char *p, size_t n)
{
    if (n == 0)
        return json_string("");
    if (n > (SIZE_MAX - 1) / 3)
        return NULL;
    char *tmp = malloc(3 * n + 1);
    if (!tmp)
        return NULL;
    const size_t l = serve_utf8_repair(p, n, tmp);
    json_t *j = json_stringn(tmp, l);
    free(tmp);
    return j;
}

json_t *serve_json_token(const gguf_serve *s, int32_t id, bool as_id)
{
    if (as_id) {
        char b[32];
        snprintf(b, sizeof b, "token_id:%d", (int)id);
        return json_string(b);
    }
    char piece[SERVE_PIECE_MAX];
    const size_t n = serve_piece(s, id, piece);
    return serve_json_text(piece, n);
}

void serve_decode(const gguf_serve *s, const int32_t *ids, int64_t n, serve_buf *b)
{
    bool first = true;
    serve_buf_add(b, "", 0);
    for (int64_t i = 0; i < n; i++) {
        char piece[SERVE_PIECE_MAX];
        size_t l = serve_piece(s, ids[i], piece);
        const char *p = piece;
        if (l && first && s->m.strip_space && p[0] == ' ') {
            p++;
            l--;
        }
        if (l || p != piece)
            first = false;
        serve_buf_add(b, p, l);
    }
}

/* ---- token texts as vLLM writes them ----
 *
 * vLLM 0.32 writes every text through its Hugging Face tokenizer's decode
 * (skip_special_tokens false): control tokens as their vocabulary string
 * ("<s>"), and with a SentencePiece vocabulary the leading space of the first
 * token that is not a control token dropped (the legacy Llama tokenizer's
 * Strip decoder: decode([1, 300]) is "<s>big" for "▁big"). A token alone that
 * ends inside a character (U+FFFD at the end) is re-decoded with up to four
 * tokens before it (vllm/v1/engine/logprobs.py, _correct_decoded_token): the
 * token that completes a character carries it, the others are "". */

json_t *serve_json_raw(const gguf_serve *s, int32_t id)
{
    char buf[SERVE_PIECE_MAX];
    if (!s->m.token_raw || id < 0 || id >= s->m.n_vocab)
        return serve_json_token(s, id, false);
    const int l = s->m.token_raw(s->m.user, id, buf, sizeof buf);
    const size_t n = l <= 0 ? 0 : (size_t)l < sizeof buf ? (size_t)l : sizeof buf - 1;
    return serve_json_text(buf, n);
}

/* What HF's decoder does with one token: a control token is its vocabulary
 * string (or nothing, skip_special_tokens), a byte-fallback token (<0xNN>)
 * one byte of a group, anything else its text. */
enum { HF_TEXT, HF_CONTROL, HF_BYTE };

static int hf_piece(const gguf_serve *s, int32_t id, char *buf, size_t *len)
{
    size_t n = serve_piece(s, id, buf);
    char raw[SERVE_PIECE_MAX];
    int l = -1;
    if (s->m.token_raw && id >= 0 && id < s->m.n_vocab)
        l = s->m.token_raw(s->m.user, id, raw, sizeof raw);
    if (n == 0 && l > 0) {
        n = (size_t)l < sizeof raw ? (size_t)l : sizeof raw - 1;
        memcpy(buf, raw, n);
        buf[n] = 0;
        *len = n;
        return HF_CONTROL;
    }
    *len = n;
    if (n == 1 && (l == 6 ? raw[0] == '<' && raw[1] == '0' && raw[2] == 'x' && raw[5] == '>'
                          : l < 0 && ((unsigned char)buf[0] & 0x80)))
        return HF_BYTE;
    return HF_TEXT;
}

/* HF's decode as a stream of tokens: `done` holds the finished text, `pend`
 * the bytes of a run of byte-fallback tokens, which ByteFallback writes as
 * their UTF-8 when the whole run is valid and as one U+FFFD per byte when it
 * is not (so a run that ends inside a character spoils the whole run). */
typedef struct hf_dec {
    const gguf_serve *s;
    bool strip;              /* drop the first text token's leading space */
    bool skip_special;       /* control tokens write nothing */
    bool seen_text;
    serve_buf done, pend;
} hf_dec;

static void hf_flush(hf_dec *d)
{
    if (d->pend.n == 0)
        return;
    if (serve_utf8_valid(d->pend.p, d->pend.n))
        serve_buf_add(&d->done, d->pend.p, d->pend.n);
    else
        for (size_t i = 0; i < d->pend.n; i++)
            serve_buf_add(&d->done, "\xEF\xBF\xBD", 3);
    d->pend.n = 0;
}

static void hf_step(hf_dec *d, int32_t id)
{
    char piece[SERVE_PIECE_MAX];
    size_t l;
    const int kind = hf_piece(d->s, id, piece, &l);
    serve_buf_add(&d->done, "", 0);
    serve_buf_add(&d->pend, "", 0);
    if (kind == HF_BYTE) {
        serve_buf_add(&d->pend, piece, l);
        d->seen_text = true;
        return;
    }
    if (kind == HF_CONTROL && d->skip_special)
        return;
    hf_flush(d);
    const char *p = piece;
    if (kind == HF_TEXT && !d->seen_text && d->strip && l && p[0] == ' ') {
        p++;
        l--;
    }
    if (kind == HF_TEXT && (l || p != piece))
        d->seen_text = true;
    /* a text piece is valid UTF-8 in a SentencePiece vocabulary; a byte-level
     * one that is not (part of a character) is repaired byte by byte */
    char fixed[3 * SERVE_PIECE_MAX + 1];
    const size_t n = serve_utf8_repair(p, l, fixed);
    serve_buf_add(&d->done, fixed, n);
}

/* The text so far (done + the pending run as it would be written), into out. */
static void hf_current(hf_dec *d, serve_buf *out)
{
    out->n = 0;
    serve_buf_add(out, "", 0);
    serve_buf_add(out, d->done.p, d->done.n);
    if (d->pend.n && serve_utf8_valid(d->pend.p, d->pend.n))
        serve_buf_add(out, d->pend.p, d->pend.n);
    else
        for (size_t i = 0; i < d->pend.n; i++)
            serve_buf_add(out, "\xEF\xBF\xBD", 3);
    out->nomem |= d->done.nomem || d->pend.nomem;
}

static void hf_dec_free(hf_dec *d)
{
    serve_buf_free(&d->done);
    serve_buf_free(&d->pend);
}

void serve_hf_decode(const gguf_serve *s, const int32_t *ids, int64_t n, serve_buf *b)
{
    hf_dec d = {s, s->m.strip_space, false, false, {0}, {0}};
    for (int64_t i = 0; i < n; i++)
        hf_step(&d, ids[i]);
    serve_buf cur = {0};
    hf_current(&d, &cur);
    serve_buf_add(b, "", 0);
    serve_buf_add(b, cur.p, cur.n);
    b->nomem |= cur.nomem;
    serve_buf_free(&cur);
    hf_dec_free(&d);
}

bool serve_text_ends_whole(const char *p, size_t n)
{
    const unsigned char *u = (const unsigned char *)p;
    if (n == 0)
        return true;
    for (size_t l = 1; l <= 4 && l <= n; l++)
        if (serve_utf8_seq(u + n - l, l) == l) /* a whole character ends here */
            return !(l == 3 && memcmp(p + n - 3, "\xEF\xBF\xBD", 3) == 0);
    return false;
}

int serve_vllm_gen_text(const gguf_serve *s, const int32_t *ids, int64_t n, const char *stop,
                        size_t stop_len, int64_t hold, serve_buf *out, int64_t *emit)
{
    hf_dec d = {s, false, true, true, {0}, {0}};
    serve_buf cur = {0};
    out->n = 0;
    serve_buf_add(out, "", 0);
    size_t written = 0;
    for (int64_t g = 0; g < n && !out->nomem; g++) {
        hf_step(&d, ids[g]);
        hf_current(&d, &cur);
        if (cur.nomem)
            break;
        bool stopped = false;
        if (stop && stop_len && g + 1 == n) {
            /* the last token completed a stop string: the text ends before it */
            for (size_t at = 0; at + stop_len <= cur.n; at++)
                if (memcmp(cur.p + at, stop, stop_len) == 0) {
                    cur.n = at;
                    stopped = true;
                    break;
                }
        }
        if (stopped) {
            out->n = 0;
            serve_buf_add(out, cur.p, cur.n);
        } else if (serve_text_ends_whole(cur.p, cur.n) && cur.n >= out->n &&
                   memcmp(cur.p, out->p, out->n) == 0) {
            /* vLLM's detokenizer takes text that ends on a whole character, as a
             * continuation of what it took */
            serve_buf_add(out, cur.p + out->n, cur.n - out->n);
        }
        /* a stream writes what it took but the last `hold` characters (a stop
         * string may yet begin there), and all of it at the end */
        size_t w = out->n;
        if (g + 1 < n)
            for (int64_t k = 0; k < hold && w > 0; k++) {
                w--;
                while (w > 0 && ((unsigned char)out->p[w] & 0xC0) == 0x80)
                    w--;
            }
        if (w > written || g + 1 == n)
            written = w;
        if (emit)
            emit[g] = (int64_t)written;
    }
    const bool nomem = cur.nomem || out->nomem;
    serve_buf_free(&cur);
    hf_dec_free(&d);
    return nomem ? GGUF_E_NOMEM : 0;
}

/* The decoded text of ids (HF's decode([...]), special tokens written), into
 * out (reset first). */
static void hf_text(const gguf_serve *s, const int32_t *ids, int64_t n, serve_buf *out)
{
    out->n = 0;
    serve_hf_decode(s, ids, n, out);
}

static bool ends_fffd(const serve_buf *b)
{
    return b->n >= 3 && memcmp(b->p + b->n - 3, "\xEF\xBF\xBD", 3) == 0;
}

void serve_vllm_token(const gguf_serve *s, int32_t id, const int32_t *ctx, int64_t n_ctx,
                      serve_buf *out)
{
    hf_text(s, &id, 1, out);
    if (out->nomem || !ends_fffd(out))
        return;
    int32_t seq[5];
    serve_buf full = {0}, part = {0};
    const int64_t max_ctx = n_ctx < 4 ? n_ctx : 4;
    for (int64_t nc = 1; nc <= max_ctx; nc++) {
        const int32_t *c = ctx + n_ctx - nc;
        memcpy(seq, c, (size_t)nc * sizeof *seq);
        seq[nc] = id;
        hf_text(s, seq, nc + 1, &full);
        if (full.nomem)
            break;
        if (ends_fffd(&full))
            continue;
        /* context tokens that end inside a character were written as "": their
         * text belongs to this token */
        int64_t clean_end = nc;
        for (int64_t j = nc - 1; j >= 0; j--) {
            hf_text(s, &c[j], 1, &part);
            if (!ends_fffd(&part))
                break;
            clean_end = j;
        }
        part.n = 0;
        if (clean_end > 0)
            hf_text(s, c, clean_end, &part);
        size_t common = 0;
        while (common < part.n && common < full.n && part.p[common] == full.p[common])
            common++;
        while (common > 0 && common < full.n && ((unsigned char)full.p[common] & 0xC0) == 0x80)
            common--; /* whole characters only */
        out->n = 0;
        serve_buf_add(out, "", 0);
        serve_buf_add(out, full.p + common, full.n - common);
        out->nomem |= full.nomem || part.nomem;
        serve_buf_free(&full);
        serve_buf_free(&part);
        return;
    }
    out->n = 0;
    out->nomem |= full.nomem;
    if (out->p)
        out->p[0] = 0;
    serve_buf_free(&full);
    serve_buf_free(&part);
}
