/* Name hashing for O(1) tensor lookup, and UTF-8 validation of names. */
#include "util/names.h"

#include <stdlib.h>
#include <string.h>

uint64_t gguf_name_hash(const char *s)
{
    /* FNV-1a: names are short, and this needs no state. */
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) {
        h ^= (uint8_t)*s;
        h *= 1099511628211ull;
    }
    return h;
}

int gguf_name_index_build(gguf_name_index *ix, const gguf_tensor *const *items, int64_t n,
                          int64_t *dup_a, int64_t *dup_b)
{
    uint64_t cap = 16;
    while (cap < (uint64_t)n * 2)
        cap <<= 1;
    ix->slots = calloc(cap, sizeof *ix->slots);
    if (!ix->slots)
        return GGUF_E_NOMEM;
    ix->mask = cap - 1;
    for (int64_t i = 0; i < n; i++) {
        uint64_t h = gguf_name_hash(items[i]->name) & ix->mask;
        while (ix->slots[h]) {
            int64_t j = (int64_t)ix->slots[h] - 1;
            if (strcmp(items[j]->name, items[i]->name) == 0) {
                *dup_a = j;
                *dup_b = i;
                return GGUF_E_DUPLICATE;
            }
            h = (h + 1) & ix->mask;
        }
        ix->slots[h] = (uint32_t)(i + 1);
    }
    return GGUF_OK;
}

int64_t gguf_name_index_find(const gguf_name_index *ix, const gguf_tensor *const *items,
                             const char *name)
{
    if (!ix->slots || !name)
        return -1;
    uint64_t h = gguf_name_hash(name) & ix->mask;
    while (ix->slots[h]) {
        int64_t j = (int64_t)ix->slots[h] - 1;
        if (strcmp(items[j]->name, name) == 0)
            return j;
        h = (h + 1) & ix->mask;
    }
    return -1;
}

void gguf_name_index_free(gguf_name_index *ix)
{
    free(ix->slots);
    ix->slots = NULL;
}

bool gguf_utf8_valid(const char *str, uint64_t n)
{
    const uint8_t *s = (const uint8_t *)str;
    uint64_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c == 0)
            return false;
        if (c < 0x80) {
            i++;
            continue;
        }
        int len;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            cp = c & 0x07;
        } else {
            return false;
        }
        if (n - i < (uint64_t)len)
            return false;
        for (int k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        /* Overlong forms, surrogates and values past U+10FFFF are invalid. */
        if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += (uint64_t)len;
    }
    return true;
}
