/*
 * gguf-inspect --tokenize TEXT / --detokenize IDS: the model's tokenizer
 * (gguf/tokenize.h) on text or ids, as text or JSON (docs/gguf-inspect.md).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gguf/tokenize.h"
#include "inspect.h"

#define MAX_INPUT (1u << 30)

/* All of standard input (at most 1 GiB). */
static int read_stdin(char **out, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    if (!b)
        return CLI_EXIT_ENV;
    for (;;) {
        if (n == cap) {
            if (cap > MAX_INPUT) {
                free(b);
                return CLI_EXIT_USAGE;
            }
            char *nb = realloc(b, cap * 2);
            if (!nb) {
                free(b);
                return CLI_EXIT_ENV;
            }
            b = nb;
            cap *= 2;
        }
        const size_t got = fread(b + n, 1, cap - n, stdin);
        n += got;
        if (got == 0)
            break;
    }
    if (ferror(stdin)) {
        free(b);
        return CLI_EXIT_ENV;
    }
    *out = b;
    *len = n;
    return 0;
}

static const char *type_name(int type)
{
    switch (type) {
    case GGUF_TOKEN_NORMAL: return "normal";
    case GGUF_TOKEN_UNKNOWN: return "unknown";
    case GGUF_TOKEN_CONTROL: return "control";
    case GGUF_TOKEN_USER_DEFINED: return "user-defined";
    case GGUF_TOKEN_UNUSED: return "unused";
    case GGUF_TOKEN_BYTE: return "byte";
    default: return "undefined";
    }
}

/* Length of the valid UTF-8 character at p (n bytes left), 0 if there is none. */
static size_t utf8_char(const unsigned char *p, size_t n)
{
    const unsigned char c = p[0];
    const size_t len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? (c <= 0xEF ? 3 : 0)
                     : c >= 0xC2 && c <= 0xDF ? 2 : 0;
    if (!len || n < len)
        return 0;
    for (size_t k = 1; k < len; k++)
        if ((p[k] & 0xC0) != 0x80)
            return 0;
    const unsigned cp = len == 2 ? 0
                      : len == 3 ? ((c & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6)
                                 : ((c & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12);
    if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    return len;
}

/* A piece for people: quoted, escapes for controls, \xNN for bytes that are
 * not whole UTF-8 characters. */
static void print_piece(FILE *out, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    fputc('"', out);
    for (size_t i = 0; i < n;) {
        const unsigned char c = p[i];
        if (c >= 0x80) {
            const size_t l = utf8_char(p + i, n - i);
            if (l) {
                fwrite(p + i, 1, l, out);
                i += l;
            } else {
                fprintf(out, "\\x%02X", c);
                i++;
            }
            continue;
        }
        switch (c) {
        case '\n': fputs("\\n", out); break;
        case '\t': fputs("\\t", out); break;
        case '\r': fputs("\\r", out); break;
        case '"': fputs("\\\"", out); break;
        case '\\': fputs("\\\\", out); break;
        default:
            if (c < 0x20 || c == 0x7F)
                fprintf(out, "\\x%02X", c);
            else
                fputc(c, out);
        }
        i++;
    }
    fputc('"', out);
}

/* The bytes as lowercase hex digits (the exact bytes, where "piece" and "text" show
 * U+FFFD for those that are not UTF-8). */
static json_t *hex_json(const char *s, size_t n)
{
    char *hex = malloc(2 * n + 1);
    if (!hex)
        return NULL;
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        hex[2 * i] = digits[(unsigned char)s[i] >> 4];
        hex[2 * i + 1] = digits[(unsigned char)s[i] & 15];
    }
    json_t *v = json_stringn(hex, 2 * n);
    free(hex);
    return v;
}

/* Appends v to *a; out of memory, both are freed and *a becomes NULL (the report is then
 * not printed, rather than printed with an element missing). */
static void append(json_t **a, json_t *v)
{
    if (json_array_append_new(*a, v) != 0) {
        json_decref(*a);
        *a = NULL;
    }
}

static json_t *token_json(const gguf_tokenizer *tk, int32_t id)
{
    const char *p;
    size_t pl;
    gguf_token_piece(tk, id, true, &p, &pl);
    return json_pack("{s:i, s:o, s:o, s:s}", "id", (int)id, "piece", cli_json_text(p, pl),
                     "hex", hex_json(p, pl), "type", type_name(gguf_tokenizer_token_type(tk, id)));
}

/*
 * The JSON values of each token id, made at its first use and then shared by reference
 * (jansson counts them): a text repeats its tokens, and a token object of its own per
 * token (some hundreds of bytes) would make the report of a few MB of text take GB.
 */
typedef struct id_values {
    const gguf_tokenizer *tk;
    int64_t n_vocab;
    json_t **number; /* by id: the id as a number, NULL until used */
    json_t **token;  /* by id: {"id", "piece", "hex", "type"}, NULL until used */
} id_values;

static int id_values_init(id_values *v, const gguf_tokenizer *tk)
{
    v->tk = tk;
    v->n_vocab = gguf_tokenizer_n_vocab(tk);
    v->number = calloc((size_t)v->n_vocab + 1, sizeof *v->number);
    v->token = calloc((size_t)v->n_vocab + 1, sizeof *v->token);
    return v->number && v->token ? 0 : -1;
}

static void id_values_free(id_values *v)
{
    for (int64_t i = 0; i < v->n_vocab; i++) {
        json_decref(v->number ? v->number[i] : NULL);
        json_decref(v->token ? v->token[i] : NULL);
    }
    free(v->number);
    free(v->token);
}

/* The number id and the token object of id, shared, with a reference for the caller. Ids
 * come from the tokenizer or passed gguf_detokenize's check: all are in the vocabulary. */
static json_t *id_number(id_values *v, int32_t id)
{
    if (id < 0 || id >= v->n_vocab)
        return json_integer(id);
    if (!v->number[id])
        v->number[id] = json_integer(id);
    return json_incref(v->number[id]);
}

static json_t *id_token(id_values *v, int32_t id)
{
    if (id < 0 || id >= v->n_vocab)
        return token_json(v->tk, id);
    if (!v->token[id])
        v->token[id] = token_json(v->tk, id);
    return json_incref(v->token[id]);
}

static json_t *ids_json(id_values *v, const int32_t *ids, int64_t n)
{
    json_t *a = json_array();
    for (int64_t i = 0; a && i < n; i++)
        append(&a, id_number(v, ids[i]));
    return a;
}

/* The keys both reports start with, after tool and version; then the report's own. */
static int print_report(const char *path, const gguf_tokenizer *tk, json_t *own)
{
    json_t *doc = json_pack("{s:o, s:o, s:o, s:I}", "model", cli_json_text(path, SIZE_MAX),
        "tokenizer", cli_json_text(gguf_tokenizer_model(tk), SIZE_MAX),
        "pre", cli_json_text(gguf_tokenizer_pre(tk), SIZE_MAX),
        "n_vocab", (json_int_t)gguf_tokenizer_n_vocab(tk));
    if (!own || (doc && json_object_update(doc, own) != 0)) {
        json_decref(doc);
        doc = NULL;
    }
    json_decref(own);
    return cli_json_print_report(stdout, "gguf-inspect", doc);
}

/* --tokenize --json: the ids, then each token's piece, bytes and type. */
static int print_tokens_json(const char *path, const gguf_tokenizer *tk, const inspect_tok_opts *o,
                             bool bos, bool eos, const int32_t *ids, int64_t n)
{
    id_values v;
    json_t *own = NULL;
    if (id_values_init(&v, tk) == 0) {
        json_t *tokens = json_array();
        for (int64_t i = 0; tokens && i < n; i++)
            append(&tokens, id_token(&v, ids[i]));
        own = json_pack("{s:b, s:b, s:b, s:I, s:o, s:o}", "add_bos", bos, "add_eos", eos,
                        "parse_special", !o->no_special, "n_tokens", (json_int_t)n,
                        "ids", ids_json(&v, ids, n), "tokens", tokens);
    }
    id_values_free(&v);
    return print_report(path, tk, own);
}

/* --detokenize --json: the ids, the text (U+FFFD for bytes that are not UTF-8) and its
 * bytes. */
static int print_text_json(const char *path, const gguf_tokenizer *tk, const inspect_tok_opts *o,
                           const int32_t *ids, int64_t n, const char *text, size_t len)
{
    size_t at = 0;
    while (at < len) {
        const size_t l = (unsigned char)text[at] < 0x80
                             ? 1
                             : utf8_char((const unsigned char *)text + at, len - at);
        if (!l)
            break;
        at += l;
    }
    id_values v;
    json_t *own = NULL;
    if (id_values_init(&v, tk) == 0)
        own = json_pack("{s:b, s:o, s:o, s:o, s:b}", "special", !o->no_special,
                        "ids", ids_json(&v, ids, n), "text", cli_json_text(text, len),
                        "hex", hex_json(text, len), "utf8", at == len);
    id_values_free(&v);
    return print_report(path, tk, own);
}

static int do_tokenize(const char *tool, const char *path, const gguf_tokenizer *tk,
                       const inspect_tok_opts *o, const char *text, size_t len)
{
    gguf_tokenize_opts to;
    gguf_tokenize_opts_init(&to);
    to.add_bos = o->add_bos;
    to.add_eos = o->add_eos;
    to.parse_special = !o->no_special;
    int32_t *ids;
    int64_t n;
    gguf_error err;
    const int rc = gguf_tokenize_text(tk, text, len, &to, &ids, &n, &err);
    if (rc) {
        cli_errorf(tool, "%s: --tokenize: %s", path, err.message);
        return cli_exit_code(rc);
    }
    const bool bos = o->add_bos == GGUF_TOK_AUTO ? gguf_tokenizer_add_bos(tk) : o->add_bos;
    const bool eos = o->add_eos == GGUF_TOK_AUTO ? gguf_tokenizer_add_eos(tk) : o->add_eos;
    int ret = CLI_EXIT_OK;
    if (o->json) {
        if (print_tokens_json(path, tk, o, bos, eos, ids, n) != 0) {
            cli_errorf(tool, "cannot write the JSON report");
            ret = CLI_EXIT_ENV;
        }
    } else {
        printf("tokenizer: %s, pre %s, %lld tokens; BOS %s, EOS %s, special tokens %s\n",
               gguf_tokenizer_model(tk), gguf_tokenizer_pre(tk),
               (long long)gguf_tokenizer_n_vocab(tk), bos ? "added" : "not added",
               eos ? "added" : "not added", o->no_special ? "not parsed" : "parsed");
        printf("%lld tokens:", (long long)n);
        for (int64_t i = 0; i < n; i++)
            printf(" %d", ids[i]);
        putchar('\n');
        for (int64_t i = 0; i < n; i++) {
            const char *p;
            size_t pl;
            gguf_token_piece(tk, ids[i], true, &p, &pl);
            printf("%8d  ", ids[i]);
            print_piece(stdout, p, pl);
            const int ty = gguf_tokenizer_token_type(tk, ids[i]);
            if (ty != GGUF_TOKEN_NORMAL)
                printf("  %s", type_name(ty));
            putchar('\n');
        }
    }
    free(ids);
    return ret;
}

/* "1,2,3", "1 2 3" or "[1, 2, 3]". */
static int parse_ids(const char *tool, const char *s, int32_t **out, int64_t *n)
{
    int64_t cap = 16, k = 0;
    int32_t *v = malloc((size_t)cap * sizeof *v);
    if (!v)
        return CLI_EXIT_ENV;
    for (const char *p = s; *p;) {
        if (strchr(" \t\r\n,[]", *p)) {
            p++;
            continue;
        }
        char *end;
        const long long x = *p >= '0' && *p <= '9' ? strtoll(p, &end, 10) : -1;
        if (x < 0 || x > INT32_MAX || (*end && !strchr(" \t\r\n,[]", *end))) {
            const char *e = p;
            while (*e && !strchr(" \t\r\n,[]", *e))
                e++;
            cli_errorf(tool, "--detokenize: '%.*s' is not a token id", (int)(e - p > 40 ? 40 : e - p),
                       p);
            free(v);
            return CLI_EXIT_USAGE;
        }
        if (k == cap) {
            int32_t *nv = realloc(v, (size_t)(cap *= 2) * sizeof *v);
            if (!nv) {
                free(v);
                return CLI_EXIT_ENV;
            }
            v = nv;
        }
        v[k++] = (int32_t)x;
        p = end;
    }
    *out = v;
    *n = k;
    return 0;
}

static int do_detokenize(const char *tool, const char *path, const gguf_tokenizer *tk,
                         const inspect_tok_opts *o, const char *spec)
{
    int32_t *ids;
    int64_t n;
    int ret = parse_ids(tool, spec, &ids, &n);
    if (ret)
        return ret;
    const gguf_detokenize_opts dopts = {.special = !o->no_special};
    char *text;
    size_t len;
    gguf_error err;
    const int rc = gguf_detokenize(tk, ids, n, &dopts, &text, &len, &err);
    if (rc) {
        cli_errorf(tool, "%s: --detokenize: %s", path, err.message);
        free(ids);
        return cli_exit_code(rc);
    }
    if (o->json) {
        if (print_text_json(path, tk, o, ids, n, text, len) != 0) {
            cli_errorf(tool, "cannot write the JSON report");
            ret = CLI_EXIT_ENV;
        }
    } else {
        fwrite(text, 1, len, stdout);
        putchar('\n');
    }
    free(text);
    free(ids);
    return ret;
}

int inspect_tok_run(const char *tool, const char *path, const gguf_set *s,
                    const inspect_tok_opts *o)
{
    char *input = NULL;
    size_t len = 0;
    const char *arg = o->tokenize ? o->tokenize : o->detokenize;
    if (!strcmp(arg, "-")) {
        const int r = read_stdin(&input, &len);
        if (r) {
            cli_errorf(tool, "cannot read standard input%s",
                       r == CLI_EXIT_USAGE ? " (over 1 GiB)" : "");
            return r;
        }
        if (o->detokenize) { /* ids as a C string */
            char *z = realloc(input, len + 1);
            if (!z) {
                free(input);
                return CLI_EXIT_ENV;
            }
            input = z;
            input[len] = 0;
        }
    }
    gguf_tokenizer *tk;
    gguf_error err;
    int rc = gguf_tokenizer_create(&tk, s, &err);
    if (rc) {
        cli_error(tool, &err);
        free(input);
        return cli_exit_code(rc);
    }
    int ret;
    if (o->tokenize)
        ret = input ? do_tokenize(tool, path, tk, o, input, len)
                    : do_tokenize(tool, path, tk, o, arg, strlen(arg));
    else
        ret = do_detokenize(tool, path, tk, o, input ? input : arg);
    gguf_tokenizer_free(tk);
    free(input);
    return ret;
}
