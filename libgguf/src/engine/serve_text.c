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
