/*
 * The tools' one JSON writer: documents are built as jansson values and
 * printed here, so that escaping, UTF-8 and separators are jansson's, in one
 * place, and no tool strings JSON together with printf.
 */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

struct json_t *cli_json_number(double v)
{
    if (!isfinite(v))
        return json_null();
    /* integral values print as integers (cli_json_num's convention) */
    if (v == floor(v) && fabs(v) < 9007199254740992.0)
        return json_integer((json_int_t)v);
    return json_real(v);
}

/* Length of the valid UTF-8 sequence at p (at most n bytes), 0 if invalid. */
static size_t utf8_len(const unsigned char *p, size_t n)
{
    const unsigned char c = p[0];
    const size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3
                     : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (!len || len > n || (len == 2 && c < 0xC2))
        return 0;
    for (size_t k = 1; k < len; k++)
        if ((p[k] & 0xC0) != 0x80)
            return 0;
    if (len == 3) {
        const unsigned cp = ((c & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
        if (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
    } else if (len == 4) {
        const unsigned cp = ((c & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) |
                            ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
        if (cp < 0x10000 || cp > 0x10FFFF)
            return 0;
    }
    return len;
}

struct json_t *cli_json_text(const char *s, size_t n)
{
    if (!s)
        return json_null();
    if (n == SIZE_MAX)
        n = strlen(s);
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        const size_t l = p[i] ? utf8_len(p + i, n - i) : 0;
        if (!l)
            break;
        i += l;
    }
    if (i == n)
        return json_stringn(s, n);
    /* invalid bytes (a token can end inside a character) become U+FFFD */
    char *b = malloc(3 * n + 1);
    if (!b)
        return NULL;
    size_t at = 0;
    for (i = 0; i < n;) {
        const size_t l = p[i] ? utf8_len(p + i, n - i) : 0;
        if (l) {
            memcpy(b + at, p + i, l);
            at += l;
            i += l;
        } else if (!p[i]) {
            b[at++] = 0; /* NUL is valid JSON text (escaped) */
            i++;
        } else {
            memcpy(b + at, "\xEF\xBF\xBD", 3);
            at += 3;
            i++;
        }
    }
    json_t *v = json_stringn(b, at);
    free(b);
    return v;
}

int cli_json_print(FILE *out, struct json_t *doc, bool compact)
{
    if (!doc)
        return -1;
    /* one line (no indent); ", " and ": " between items unless compact */
    const int rc = json_dumpf(doc, out, JSON_ENCODE_ANY | JSON_REAL_PRECISION(17) |
                                            (compact ? JSON_COMPACT : 0));
    json_decref(doc);
    if (rc != 0)
        return -1;
    return fputc('\n', out) == EOF ? -1 : 0;
}

int cli_json_print_report(FILE *out, const char *tool, struct json_t *doc)
{
    json_t *all = doc ? json_pack("{s:s, s:s}", "tool", tool, "version", GGUFKIT_VERSION) : NULL;
    if (all && json_object_update(all, doc) != 0) {
        json_decref(all);
        all = NULL;
    }
    json_decref(doc);
    return cli_json_print(out, all, false);
}
