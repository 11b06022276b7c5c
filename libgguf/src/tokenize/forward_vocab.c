/* Token text from the GGUF vocabulary, for printing what greedy decoding
 * produced. Not a tokenizer: only id -> bytes. */
#include <stdio.h>
#include <string.h>

#include "gguf/forward.h"

/* Decode one UTF-8 code point; returns its length (1 for a bad byte). */
static int utf8_next(const unsigned char *s, uint64_t n, uint32_t *cp)
{
    if (s[0] < 0x80 || n < 2) {
        *cp = s[0];
        return 1;
    }
    if ((s[0] & 0xE0) == 0xC0) {
        *cp = ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
        return 2;
    }
    if ((s[0] & 0xF0) == 0xE0 && n >= 3) {
        *cp = ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        return 3;
    }
    if ((s[0] & 0xF8) == 0xF0 && n >= 4) {
        *cp = ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
              ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
        return 4;
    }
    *cp = s[0];
    return 1;
}

/* GPT-2's byte-level alphabet: printable bytes stand for themselves, the
 * other 68 bytes are mapped in order to U+0100 and up. */
static int gpt2_byte(uint32_t cp)
{
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255))
        return (int)cp;
    if (cp < 256 || cp >= 256 + 68)
        return -1;
    uint32_t k = cp - 256;
    for (int b = 0; b < 256; b++) {
        if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))
            continue;
        if (k-- == 0)
            return b;
    }
    return -1;
}

static size_t put(char *buf, size_t size, size_t at, const void *src, size_t n)
{
    if (at + 1 >= size)
        return at;
    if (n > size - 1 - at)
        n = size - 1 - at;
    memcpy(buf + at, src, n);
    return at + n;
}

int gguf_fwd_token_text(const gguf_file *meta, int32_t id, char *buf, size_t size)
{
    if (buf && size)
        buf[0] = 0;
    const gguf_value *toks;
    if (!meta || gguf_get_arr(meta, "tokenizer.ggml.tokens", &toks, NULL) ||
        toks->v.arr.type != GGUF_VALUE_STRING)
        return GGUF_E_NOT_FOUND;
    if (id < 0 || (uint64_t)id >= toks->v.arr.n || !buf || size == 0)
        return GGUF_E_INVALID;
    const gguf_value *types;
    if (!gguf_get_arr(meta, "tokenizer.ggml.token_type", &types, NULL) &&
        (uint64_t)id < types->v.arr.n) {
        gguf_value tv = gguf_value_elem(types, (uint64_t)id);
        int64_t ty;
        if (!gguf_value_to_i64(&tv, &ty) && ty == 3) /* control */
            return 0;
    }
    gguf_str model = {"llama", 5};
    gguf_get_str(meta, "tokenizer.ggml.model", &model, NULL);
    const bool bpe = gguf_str_eq(model, "gpt2");
    gguf_str s = toks->v.arr.strs[id];
    const unsigned char *p = (const unsigned char *)s.data;
    size_t at = 0;
    if (!bpe && s.len == 6 && p[0] == '<' && p[1] == '0' && p[2] == 'x' && p[5] == '>') {
        unsigned v;
        if (sscanf((const char *)p + 3, "%2x", &v) == 1) {
            unsigned char b = (unsigned char)v;
            at = put(buf, size, at, &b, 1);
            buf[at] = 0;
            return (int)at;
        }
    }
    for (uint64_t i = 0; i < s.len;) {
        uint32_t cp;
        int l = utf8_next(p + i, s.len - i, &cp);
        if (bpe) {
            int b = gpt2_byte(cp);
            if (b >= 0) {
                unsigned char c = (unsigned char)b;
                at = put(buf, size, at, &c, 1);
            } else {
                at = put(buf, size, at, p + i, (size_t)l);
            }
        } else if (cp == 0x2581) {
            at = put(buf, size, at, " ", 1);
        } else {
            at = put(buf, size, at, p + i, (size_t)l);
        }
        i += (uint64_t)l;
    }
    buf[at] = 0;
    return (int)at;
}

static int32_t get_id(const gguf_file *meta, const char *key)
{
    int64_t v;
    if (!meta || gguf_get_i64(meta, key, &v, NULL) || v < 0 || v > INT32_MAX)
        return -1;
    return (int32_t)v;
}

int32_t gguf_fwd_token_bos(const gguf_file *meta)
{
    return get_id(meta, "tokenizer.ggml.bos_token_id");
}

int32_t gguf_fwd_token_eos(const gguf_file *meta)
{
    return get_id(meta, "tokenizer.ggml.eos_token_id");
}
