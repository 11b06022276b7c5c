/*
 * Import maps (gguf/import.h): the text format, parsed line by line with
 * every check that does not need the dump. Outside input: bounded and fuzzed
 * (tests/fuzz/fuzz_import_map.c).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error_lib.h"
#include "interop/import_internal.h"

/* ---------------------------------------------------------------- layouts */

static const char *const axis_names[] = {"seq", "hidden", "layer", "batch"};

int gguf_import_layout_parse(gguf_import_layout *out, const char *s, gguf_error *err)
{
    gguf_import_layout l = {0};
    unsigned seen = 0;
    const char *p = s ? s : "";
    for (;;) {
        const char *e = strchr(p, ',');
        const size_t n = e ? (size_t)(e - p) : strlen(p);
        int a = -1;
        for (int k = 0; k < 4; k++)
            if (strlen(axis_names[k]) == n && !memcmp(p, axis_names[k], n))
                a = k;
        if (a < 0)
            return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                             "layout '%s': '%.*s' is not an axis (seq, hidden, layer, batch)", s,
                             (int)(n > 32 ? 32 : n), p);
        if (seen & (1u << a))
            return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "layout '%s': '%s' twice", s,
                             axis_names[a]);
        seen |= 1u << a;
        l.axis[l.n_axes++] = (uint8_t)a;
        if (!e)
            break;
        p = e + 1;
    }
    if (!(seen & (1u << GGUF_IMPORT_AXIS_SEQ)) || !(seen & (1u << GGUF_IMPORT_AXIS_HIDDEN)))
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "layout '%s': needs both seq and hidden", s);
    *out = l;
    return 0;
}

char *gguf_import_layout_str(const gguf_import_layout *l, char *buf, size_t size)
{
    size_t k = 0;
    if (size)
        buf[0] = 0;
    for (int i = 0; i < l->n_axes && i < GGUF_IMPORT_MAX_AXES && k < size; i++) {
        const int w = snprintf(buf + k, size - k, "%s%s", i ? "," : "",
                               l->axis[i] < 4 ? axis_names[l->axis[i]] : "?");
        if (w < 0)
            break;
        k += (size_t)w;
    }
    return buf;
}

static bool layout_has(const gguf_import_layout *l, gguf_import_axis a)
{
    for (int i = 0; i < l->n_axes; i++)
        if (l->axis[i] == a)
            return true;
    return false;
}

/* ---------------------------------------------------------------- patterns */

static bool is_var_start(char c)
{
    return c >= 'a' && c <= 'z';
}

static bool is_var_char(char c)
{
    return is_var_start(c) || (c >= '0' && c <= '9') || c == '_';
}

/* "{name}" at p: the name's length, or -1. */
static int var_len(const char *p)
{
    if (p[0] != '{' || !is_var_start(p[1]))
        return -1;
    int n = 1;
    while (is_var_char(p[1 + n]))
        n++;
    if (n >= IMP_VAR_NAME || p[1 + n] != '}')
        return -1;
    return n;
}

int imp_pattern_vars(const char *pat, char names[][IMP_VAR_NAME], int cap)
{
    int k = 0;
    for (const char *p = pat; *p; p++) {
        if (*p == '}')
            return -1;
        if (*p != '{')
            continue;
        const int n = var_len(p);
        if (n < 0)
            return -1;
        if (k < cap)
            snprintf(names[k], IMP_VAR_NAME, "%.*s", n, p + 1);
        k++;
        p += n + 1;
    }
    return k;
}

/* ---------------------------------------------------------------- parsing */

typedef struct lctx {
    const char *name;
    int line;
    uint64_t off;
    gguf_error *err;
} lctx;

static int lfail(const lctx *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int lfail(const lctx *c, int code, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return gguf_fail(c->err, code, c->off, "%s: line %d: %s", c->name, c->line, what);
}

static char *dupn(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

/* A decimal integer, optionally negative, at most 9 digits; whole string. */
static bool parse_int(const char *s, size_t n, int64_t *out)
{
    size_t i = 0;
    bool neg = false;
    if (n && s[0] == '-') {
        neg = true;
        i = 1;
    }
    if (i == n || n - i > 9)
        return false;
    int64_t v = 0;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = neg ? -v : v;
    return true;
}

/* Characters of FILE / TENSOR patterns. */
static int check_pattern(const lctx *c, const char *pat, bool file, const char *what)
{
    if (!*pat)
        return lfail(c, GGUF_E_BAD_VALUE, "%s: empty", what);
    if (imp_pattern_vars(pat, NULL, 0) < 0)
        return lfail(c, GGUF_E_BAD_VALUE,
                     "%s '%s': a '{' or '}' that is not a variable {name} (a-z, 0-9, _)", what,
                     pat);
    for (const char *p = pat; *p; p++) {
        const unsigned char ch = (unsigned char)*p;
        if (ch <= 0x20 || ch == 0x7F || ch == '[' || ch == ']' || ch == '\\' ||
            (file && ch == ':'))
            return lfail(c, GGUF_E_BAD_VALUE, "%s '%s': a character patterns may not hold", what,
                         pat);
    }
    if (!file)
        return 0;
    if (pat[0] == '/')
        return lfail(c, GGUF_E_BAD_VALUE, "file '%s': absolute (paths are relative to the dump "
                     "folder)", pat);
    for (const char *p = pat;;) {
        const char *e = strchr(p, '/');
        const size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
            return lfail(c, GGUF_E_BAD_VALUE, "file '%s': an empty, '.' or '..' component", pat);
        if (!e)
            break;
        p = e + 1;
    }
    return 0;
}

/* FILE[:TENSOR][INDEX] */
static int parse_source(const lctx *c, const char *s, imp_source *src, bool allow_index)
{
    memset(src, 0, sizeof *src);
    size_t n = strlen(s);
    if (!(src->text = strdup(s)))
        return gguf_fail(c->err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    if (n && s[n - 1] == ']') {
        const char *lb = strrchr(s, '[');
        if (!lb)
            return lfail(c, GGUF_E_BAD_VALUE, "'%s': ']' without '['", s);
        if (!allow_index)
            return lfail(c, GGUF_E_BAD_VALUE, "'%s': no index here", s);
        const char *in = lb + 1;
        const size_t ilen = (size_t)(s + n - 1 - in);
        const char *eq = memchr(in, '=', ilen);
        src->has_index = true;
        if (eq) {
            const size_t vl = (size_t)(eq - in);
            const char *dots = NULL;
            for (const char *q = eq + 1; q + 1 < s + n - 1; q++)
                if (q[0] == '.' && q[1] == '.') {
                    dots = q;
                    break;
                }
            bool ok = vl > 0 && vl < IMP_VAR_NAME && is_var_start(in[0]) && dots;
            for (size_t k = 1; ok && k < vl; k++)
                ok = is_var_char(in[k]);
            ok = ok && parse_int(eq + 1, (size_t)(dots - eq - 1), &src->idx_a) &&
                 parse_int(dots + 2, (size_t)(s + n - 1 - dots - 2), &src->idx_b);
            if (!ok)
                return lfail(c, GGUF_E_BAD_VALUE,
                             "'%s': an index is N or VAR=A..B (integers, negative from the end)",
                             s);
            snprintf(src->index_var, sizeof src->index_var, "%.*s", (int)vl, in);
            src->index_range = true;
        } else if (!parse_int(in, ilen, &src->idx_a)) {
            return lfail(c, GGUF_E_BAD_VALUE,
                         "'%s': an index is N or VAR=A..B (integers, negative from the end)", s);
        } else {
            src->idx_b = src->idx_a;
        }
        n = (size_t)(lb - s);
    }
    const char *colon = memchr(s, ':', n);
    const size_t fl = colon ? (size_t)(colon - s) : n;
    if (!(src->file = dupn(s, fl)) ||
        (colon && !(src->tensor = dupn(colon + 1, n - fl - 1))))
        return gguf_fail(c->err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    int rc = check_pattern(c, src->file, true, "file");
    if (!rc && src->tensor)
        rc = check_pattern(c, src->tensor, false, "tensor");
    return rc;
}

static void free_source(imp_source *s)
{
    free(s->file);
    free(s->tensor);
    free(s->text);
}

/*
 * The point template: [A-Za-z0-9._] and {VAR}, {VAR+N}, {VAR-N}. With vals,
 * expands into out; without, only checks (names[] are the bound variables).
 */
static int expand_target(const char *t, char names[][IMP_VAR_NAME], const int64_t *vals, int nv,
                         char *out, size_t cap, unsigned *used, char *bad, size_t badn)
{
    size_t k = 0;
    for (const char *p = t; *p;) {
        if (*p != '{') {
            const char ch = *p;
            if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '.' || ch == '_'))
                return snprintf(bad, badn, "'%c' is not a capture name character", ch),
                       GGUF_E_BAD_VALUE;
            if (k + 1 < cap)
                out[k] = ch;
            k++;
            p++;
            continue;
        }
        const char *e = strchr(p, '}');
        if (!e)
            return snprintf(bad, badn, "a '{' without '}'"), GGUF_E_BAD_VALUE;
        const char *q = p + 1;
        size_t vl = 0;
        while (q + vl < e && is_var_char(q[vl]))
            vl++;
        int64_t delta = 0;
        if (q + vl < e && !((q[vl] == '+' || q[vl] == '-') &&
                            parse_int(q + vl + 1, (size_t)(e - q - vl - 1), &delta) &&
                            delta >= 0))
            return snprintf(bad, badn, "'{%.*s}' is not {VAR}, {VAR+N} or {VAR-N}",
                            (int)(e - q > 32 ? 32 : e - q), q), GGUF_E_BAD_VALUE;
        if (q + vl < e && q[vl] == '-')
            delta = -delta;
        int v = -1;
        for (int i = 0; i < nv; i++)
            if (strlen(names[i]) == vl && !memcmp(names[i], q, vl))
                v = i;
        if (v < 0 || vl == 0)
            return snprintf(bad, badn, "variable '%.*s' is not bound by the source",
                            (int)(vl > 16 ? 16 : vl), q), GGUF_E_BAD_VALUE;
        *used |= 1u << v;
        if (vals) {
            const int64_t x = vals[v] + delta;
            if (x < 0)
                return snprintf(bad, badn, "{%.*s} is %lld (negative) when %s = %lld",
                                (int)(e - q > 32 ? 32 : e - q), q, (long long)x, names[v],
                                (long long)vals[v]), GGUF_E_BAD_VALUE;
            char num[24];
            const int w = snprintf(num, sizeof num, "%lld", (long long)x);
            for (int j = 0; j < w; j++, k++)
                if (k + 1 < cap)
                    out[k] = num[j];
        } else {
            if (k + 1 < cap)
                out[k] = '0';
            k++;
        }
        p = e + 1;
    }
    if (cap)
        out[k < cap ? k : cap - 1] = 0;
    if (k >= cap)
        return snprintf(bad, badn, "longer than %zu bytes", cap - 1), GGUF_E_BAD_VALUE;
    if (k == 0)
        return snprintf(bad, badn, "empty"), GGUF_E_BAD_VALUE;
    return 0;
}

/* The variables an entry binds (file, tensor, index), in that order. */
static int bound_vars(const imp_source *s, char names[][IMP_VAR_NAME], int cap)
{
    int n = imp_pattern_vars(s->file, names, cap);
    if (s->tensor) {
        const int m = imp_pattern_vars(s->tensor, n < cap ? names + n : NULL, n < cap ? cap - n : 0);
        n += m;
    }
    if (s->index_range) {
        if (n < cap)
            snprintf(names[n], IMP_VAR_NAME, "%s", s->index_var);
        n++;
    }
    return n;
}

int imp_expand_point(const imp_entry *e, const int64_t *vals, char *out, size_t cap, char *bad,
                     size_t badn)
{
    char names[GGUF_IMPORT_MAX_VARS][IMP_VAR_NAME];
    const int nv = bound_vars(&e->src, names, GGUF_IMPORT_MAX_VARS);
    unsigned used = 0;
    return expand_target(e->target, names, vals, nv, out, cap, &used, bad, badn);
}

static int parse_entry(const lctx *c, gguf_import_map *m, char *lhs, char *rhs,
                       const gguf_import_layout *layout)
{
    imp_entry *e = &m->entries[m->n_entries];
    memset(e, 0, sizeof *e);
    e->line = c->line;
    e->offset = c->off;
    e->layout = *layout;
    if (!strncmp(lhs, "optional", 8) && (lhs[8] == ' ' || lhs[8] == '\t')) {
        e->optional = true;
        lhs += 9;
        while (*lhs == ' ' || *lhs == '\t')
            lhs++;
    }
    if (!*lhs || strpbrk(lhs, " \t"))
        return lfail(c, GGUF_E_BAD_VALUE, "'%s': SOURCE -> POINT, without spaces inside either",
                     lhs);
    if (!*rhs || strpbrk(rhs, " \t"))
        return lfail(c, GGUF_E_BAD_VALUE, "'%s': one capture point after '->'", rhs);
    m->n_entries++; /* owned from here: freed with the map on failure */
    int rc = parse_source(c, lhs, &e->src, true);
    if (rc)
        return rc;
    if (!(e->target = strdup(rhs)))
        return gguf_fail(c->err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    char names[GGUF_IMPORT_MAX_VARS + 8][IMP_VAR_NAME];
    const int nv = bound_vars(&e->src, names, GGUF_IMPORT_MAX_VARS + 8);
    if (nv > GGUF_IMPORT_MAX_VARS)
        return lfail(c, GGUF_E_LIMIT, "'%s': more than 4 variables", lhs);
    for (int i = 0; i < nv; i++)
        for (int j = 0; j < i; j++)
            if (!strcmp(names[i], names[j]))
                return lfail(c, GGUF_E_DUPLICATE, "'%s': variable '%s' bound twice", lhs,
                             names[i]);
    char out[GGUF_RECORD_MAX_NAME + 1], bad[160];
    unsigned used = 0;
    if ((rc = expand_target(e->target, names, NULL, nv, out, sizeof out, &used, bad, sizeof bad)))
        return lfail(c, rc, "point '%s': %s", e->target, bad);
    for (int i = 0; i < nv; i++)
        if (!(used & (1u << i)))
            return lfail(c, GGUF_E_BAD_VALUE,
                         "variable '%s' is bound but not used in the point '%s' (every array "
                         "would give the same point)", names[i], e->target);
    if (e->src.has_index != layout_has(layout, GGUF_IMPORT_AXIS_LAYER)) {
        char ls[64];
        gguf_import_layout_str(layout, ls, sizeof ls);
        if (e->src.has_index)
            return lfail(c, GGUF_E_BAD_VALUE, "'%s': an index needs a layout with a layer axis "
                         "(the layout here is %s)", lhs, ls);
        return lfail(c, GGUF_E_BAD_VALUE, "'%s': the layout %s has a layer axis: give an index",
                     lhs, ls);
    }
    return 0;
}

static int parse_line(const lctx *c, gguf_import_map *m, char *s, gguf_import_layout *layout)
{
    char *arrow = strstr(s, "->");
    if (arrow) {
        if (m->n_entries >= (int64_t)GGUF_IMPORT_MAX_ENTRIES)
            return lfail(c, GGUF_E_LIMIT, "more than %s entries", "4096");
        char *lhs = s, *rhs = arrow + 2;
        char *t = arrow;
        while (t > lhs && (t[-1] == ' ' || t[-1] == '\t'))
            t--;
        *t = 0;
        while (*rhs == ' ' || *rhs == '\t')
            rhs++;
        return parse_entry(c, m, lhs, rhs, layout);
    }
    char *arg = s;
    while (*arg && *arg != ' ' && *arg != '\t')
        arg++;
    if (*arg)
        *arg++ = 0;
    while (*arg == ' ' || *arg == '\t')
        arg++;
    if (!*arg)
        return lfail(c, GGUF_E_BAD_VALUE, "'%s': not a statement (layout, backend, tokens, "
                     "npy-v2, or SOURCE -> POINT)", s);
    const bool one_word = !strpbrk(arg, " \t");
    if (!strcmp(s, "layout")) {
        gguf_import_layout l;
        gguf_error e2;
        if (!one_word || gguf_import_layout_parse(&l, arg, &e2))
            return lfail(c, GGUF_E_BAD_VALUE, "%s", one_word ? e2.message : "layout takes one "
                         "comma list, e.g. seq,hidden");
        *layout = l;
        return 0;
    }
    if (!strcmp(s, "backend")) {
        if (*m->backend)
            return lfail(c, GGUF_E_DUPLICATE, "backend given twice");
        bool ok = one_word && strlen(arg) < sizeof m->backend;
        for (const char *p = arg; ok && *p; p++)
            ok = is_var_char(*p) || (*p >= 'A' && *p <= 'Z') || *p == '-' || *p == '.';
        if (!ok)
            return lfail(c, GGUF_E_BAD_VALUE, "backend '%s': one name of letters, digits, '-', "
                         "'.', '_', under 64 bytes", arg);
        snprintf(m->backend, sizeof m->backend, "%s", arg);
        return 0;
    }
    if (!strcmp(s, "tokens")) {
        if (m->has_tokens)
            return lfail(c, GGUF_E_DUPLICATE, "tokens given twice");
        if (!one_word)
            return lfail(c, GGUF_E_BAD_VALUE, "tokens takes one SOURCE");
        m->has_tokens = true;
        m->tokens_line = c->line;
        int rc = parse_source(c, arg, &m->tokens, false);
        if (rc)
            return rc;
        if (imp_pattern_vars(m->tokens.file, NULL, 0) ||
            (m->tokens.tensor && imp_pattern_vars(m->tokens.tensor, NULL, 0)))
            return lfail(c, GGUF_E_BAD_VALUE, "tokens '%s': no variables here", arg);
        return 0;
    }
    if (!strcmp(s, "npy-v2")) {
        if (m->v2_bf16)
            return lfail(c, GGUF_E_DUPLICATE, "npy-v2 given twice");
        if (strcmp(arg, "bf16"))
            return lfail(c, GGUF_E_BAD_VALUE, "npy-v2 '%s': the only reading is bf16", arg);
        m->v2_bf16 = true;
        return 0;
    }
    return lfail(c, GGUF_E_BAD_VALUE, "'%s': not a statement (layout, backend, tokens, npy-v2, "
                 "or SOURCE -> POINT)", s);
}

void gguf_import_map_free(gguf_import_map *m)
{
    if (!m)
        return;
    for (int64_t i = 0; i < m->n_entries; i++) {
        free_source(&m->entries[i].src);
        free(m->entries[i].target);
    }
    if (m->has_tokens)
        free_source(&m->tokens);
    free(m->entries);
    free(m->name);
    free(m);
}

int gguf_import_map_open_memory(gguf_import_map **out, const char *text, size_t len, const char *name,
                                gguf_error *err)
{
    gguf_error_clear(err);
    if (!out || (!text && len))
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_import_map_open_memory: NULL");
    *out = NULL;
    if (!name)
        name = "<map>";
    if (len > GGUF_IMPORT_MAX_MAP)
        return gguf_fail(err, GGUF_E_LIMIT, GGUF_NO_OFFSET, "%s: %zu bytes, over %u", name, len,
                         GGUF_IMPORT_MAX_MAP);
    gguf_import_map *m = calloc(1, sizeof *m);
    char *line = malloc(GGUF_IMPORT_MAX_LINE + 1);
    if (!m || !line || !(m->name = strdup(name)) ||
        !(m->entries = calloc(16, sizeof *m->entries))) {
        free(line);
        gguf_import_map_free(m);
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    }
    int64_t cap = 16;
    gguf_import_layout layout = {2, {GGUF_IMPORT_AXIS_SEQ, GGUF_IMPORT_AXIS_HIDDEN, 0, 0}};
    int rc = 0;
    lctx c = {name, 0, 0, err};
    for (size_t i = 0; i < len && !rc;) {
        const char *nl = memchr(text + i, '\n', len - i);
        const size_t n = nl ? (size_t)(nl - text - i) : len - i;
        c.line++;
        c.off = i;
        if (n > GGUF_IMPORT_MAX_LINE) {
            rc = lfail(&c, GGUF_E_LIMIT, "longer than %s bytes", "4096");
            break;
        }
        if (memchr(text + i, 0, n)) {
            rc = gguf_fail(err, GGUF_E_BAD_UTF8, i, "%s: line %d: a NUL byte", name, c.line);
            break;
        }
        memcpy(line, text + i, n);
        line[n] = 0;
        i += n + 1;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = 0;
        char *s = line;
        while (*s == ' ' || *s == '\t' || *s == '\r')
            s++;
        size_t k = strlen(s);
        while (k && (s[k - 1] == ' ' || s[k - 1] == '\t' || s[k - 1] == '\r'))
            s[--k] = 0;
        if (!*s)
            continue;
        if (m->n_entries == cap) {
            imp_entry *ne = realloc(m->entries, (size_t)cap * 2 * sizeof *ne);
            if (!ne) {
                rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
                break;
            }
            m->entries = ne;
            cap *= 2;
        }
        rc = parse_line(&c, m, s, &layout);
    }
    free(line);
    if (rc) {
        gguf_import_map_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

int gguf_import_map_open(gguf_import_map **out, const char *path, gguf_error *err)
{
    gguf_error_clear(err);
    if (!out || !path)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_import_map_open: NULL");
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return gguf_fail_errno(err, errno == ENOENT ? GGUF_E_NOT_FOUND : GGUF_E_IO, errno, "%s",
                               path);
    char *buf = malloc(GGUF_IMPORT_MAX_MAP + 1);
    if (!buf) {
        fclose(f);
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    }
    const size_t n = fread(buf, 1, GGUF_IMPORT_MAX_MAP + 1, f);
    const int bad = ferror(f);
    fclose(f);
    int rc;
    if (bad)
        rc = gguf_fail(err, GGUF_E_IO, GGUF_NO_OFFSET, "%s: read error (a folder?)", path);
    else if (n > GGUF_IMPORT_MAX_MAP)
        rc = gguf_fail(err, GGUF_E_LIMIT, GGUF_NO_OFFSET, "%s: over %u bytes", path,
                       GGUF_IMPORT_MAX_MAP);
    else
        rc = gguf_import_map_open_memory(out, buf, n, path, err);
    free(buf);
    return rc;
}

const char *gguf_import_map_name(const gguf_import_map *m)
{
    return m->name;
}

int64_t gguf_import_map_entry_count(const gguf_import_map *m)
{
    return m ? m->n_entries : 0;
}

const char *gguf_import_map_backend(const gguf_import_map *m)
{
    return m->backend;
}
