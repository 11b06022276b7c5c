/*
 * The tools' one JSON writer: documents are built as jansson values and
 * printed here, so that escaping, UTF-8 and separators are jansson's, in one
 * place, and no tool strings JSON together with printf.
 */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

struct json_t *cli_json_number(double v)
{
    if (!isfinite(v))
        return json_null();
    /* integral values print as integers */
    if (v == floor(v) && fabs(v) < 9007199254740992.0)
        return json_integer((json_int_t)v);
    return json_real(v);
}

/*
 * jansson's integers are signed 64-bit, so a uint64 above INT64_MAX (a GGUF file may
 * hold one) cannot be a json_integer. It travels as a string no other constructor can
 * make: its first byte is 0xFF, which is never UTF-8 (json_string, json_pack and
 * cli_json_text all insist on UTF-8), then its digits; cli_json_print writes the digits
 * bare, so that the number stays a number, exact.
 */
#define BIG_U64_TAG '\xFF'

/* Small integers are shared values (a vocabulary's 150k token types are a few
 * of them): made once, held here for the process's life, never changed. */
struct json_t *cli_json_int(int64_t v)
{
    static json_t *small[256];
    if (v < 0 || v >= 256)
        return json_integer((json_int_t)v);
    if (!small[v] && !(small[v] = json_integer((json_int_t)v)))
        return NULL;
    return json_incref(small[v]);
}

/* Whether this process ever made one: only then is a document walked for them. */
static bool big_u64_made;

struct json_t *cli_json_u64(uint64_t v)
{
    if (v <= (uint64_t)INT64_MAX)
        return json_integer((json_int_t)v);
    char tagged[24];
    const int n = snprintf(tagged, sizeof tagged, "%c%" PRIu64, BIG_U64_TAG, v);
    big_u64_made = true;
    return json_stringn_nocheck(tagged, (size_t)n);
}

/* The digits of a cli_json_u64 above INT64_MAX; NULL for any other value. */
static const char *big_u64_digits(const json_t *v)
{
    const char *s = json_is_string(v) ? json_string_value(v) : NULL;
    return s && s[0] == BIG_U64_TAG ? s + 1 : NULL;
}

static bool holds_big_u64(json_t *v)
{
    size_t i;
    const char *key;
    json_t *e;
    if (big_u64_digits(v))
        return true;
    if (json_is_array(v)) {
        json_array_foreach(v, i, e)
            if (holds_big_u64(e))
                return true;
    } else if (json_is_object(v)) {
        json_object_foreach(v, key, e)
            if (holds_big_u64(e))
                return true;
    }
    return false;
}

/* json_dumpf through a buffer of our own: jansson hands over a document in pieces of a
 * few bytes (a quote, a token, a comma), a vocabulary is a million of them, and a stdio
 * call per piece cost more than building the values. */
typedef struct dump_buf {
    FILE *out;
    size_t n;
    bool failed;
    char b[1 << 16];
} dump_buf;

static void dump_flush(dump_buf *d)
{
    if (d->n && fwrite(d->b, 1, d->n, d->out) != d->n)
        d->failed = true;
    d->n = 0;
}

static int dump_piece(const char *buf, size_t size, void *arg)
{
    dump_buf *d = arg;
    if (d->n + size > sizeof d->b)
        dump_flush(d);
    if (size > sizeof d->b) {
        if (fwrite(buf, 1, size, d->out) != size)
            d->failed = true;
    } else {
        memcpy(d->b + d->n, buf, size);
        d->n += size;
    }
    return d->failed ? -1 : 0;
}

static int dump(const json_t *v, FILE *out, size_t flags)
{
    static dump_buf d; /* a tool prints from one thread */
    d.out = out;
    d.n = 0;
    d.failed = false;
    const int rc = json_dump_callback(v, dump_piece, &d, flags);
    dump_flush(&d);
    return rc || d.failed ? -1 : 0;
}

/* What json_dumpf prints (one line, the separators flags ask for), the big uint64s
 * included: containers are walked here, every key and other value is jansson's. */
static int dump_walk(json_t *v, FILE *out, size_t flags)
{
    const char *digits = big_u64_digits(v);
    if (digits)
        return fputs(digits, out) < 0 ? -1 : 0;
    const bool compact = flags & JSON_COMPACT;
    const char *comma = compact ? "," : ", ", *colon = compact ? ":" : ": ";
    if (json_is_array(v)) {
        size_t i;
        json_t *e;
        if (fputc('[', out) == EOF)
            return -1;
        json_array_foreach(v, i, e)
            if ((i && fputs(comma, out) < 0) || dump_walk(e, out, flags) != 0)
                return -1;
        return fputc(']', out) == EOF ? -1 : 0;
    }
    if (json_is_object(v)) {
        const char *key;
        size_t key_len;
        json_t *e;
        bool first = true;
        if (fputc('{', out) == EOF)
            return -1;
        json_object_keylen_foreach(v, key, key_len, e) {
            json_t *k = json_stringn(key, key_len);
            const int rc = !k || (!first && fputs(comma, out) < 0) || dump(k, out, flags) != 0 ||
                           fputs(colon, out) < 0 || dump_walk(e, out, flags) != 0;
            json_decref(k);
            if (rc)
                return -1;
            first = false;
        }
        return fputc('}', out) == EOF ? -1 : 0;
    }
    return dump(v, out, flags);
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
    if (i == n) /* checked above: jansson need not check again */
        return json_stringn_nocheck(s, n);
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
    const size_t flags = JSON_ENCODE_ANY | JSON_REAL_PRECISION(17) | (compact ? JSON_COMPACT : 0);
    const int rc = big_u64_made && holds_big_u64(doc) ? dump_walk(doc, out, flags)
                                                      : dump(doc, out, flags);
    json_decref(doc);
    /* flushed here: a short document's write error (a full disk) shows now, not at exit */
    if (rc != 0 || fputc('\n', out) == EOF || fflush(out) != 0)
        return -1;
    return 0;
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
