/*
 * Name patterns of import maps ('*', '?', {VAR}) compiled to anchored PCRE2
 * regexes: a library's matcher under a match limit, not a hand-written
 * backtracker that a hostile pattern could make exponential.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error_lib.h"
#include "interop/import_internal.h"

struct imp_matcher {
    pcre2_code *re;
    pcre2_match_context *mctx;
    int nvars;
    bool literal;
    char *lit; /* the pattern, when literal */
};

#define MATCH_LIMIT 100000u

int imp_matcher_new(imp_matcher **out, const char *pat, bool file_component, gguf_error *err)
{
    *out = NULL;
    imp_matcher *m = calloc(1, sizeof *m);
    const size_t n = strlen(pat);
    /* each pattern byte becomes at most 5 regex bytes ("[^/]*"; "{v}" 12 for 3) */
    char *rx = malloc(n * 5 + 32);
    if (!m || !rx) {
        free(m);
        free(rx);
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    }
    size_t k = 0;
    k += (size_t)sprintf(rx, "^(?:");
    m->literal = true;
    for (const char *p = pat; *p; p++) {
        const unsigned char ch = (unsigned char)*p;
        if (ch == '*') {
            k += (size_t)sprintf(rx + k, file_component ? "[^/]*" : ".*");
            m->literal = false;
        } else if (ch == '?') {
            k += (size_t)sprintf(rx + k, file_component ? "[^/]" : ".");
            m->literal = false;
        } else if (ch == '{') {
            const char *e = strchr(p, '}');
            if (!e)
                break; /* checked by the parser */
            k += (size_t)sprintf(rx + k, "([0-9]{1,9})");
            m->nvars++;
            m->literal = false;
            p = e;
        } else if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                   (ch >= '0' && ch <= '9') || ch >= 0x80) {
            rx[k++] = (char)ch;
        } else {
            rx[k++] = '\\'; /* any ASCII punctuation escaped is itself */
            rx[k++] = (char)ch;
        }
    }
    k += (size_t)sprintf(rx + k, ")\\z");
    if (m->literal && !(m->lit = strdup(pat))) {
        free(rx);
        imp_matcher_free(m);
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    }
    int ecode;
    PCRE2_SIZE eoff;
    m->re = pcre2_compile((PCRE2_SPTR)rx, k, PCRE2_DOTALL, &ecode, &eoff, NULL);
    free(rx);
    if (!m->re) {
        char msg[128];
        pcre2_get_error_message(ecode, (PCRE2_UCHAR *)msg, sizeof msg);
        imp_matcher_free(m);
        return gguf_fail(err, GGUF_E_BAD_VALUE, GGUF_NO_OFFSET, "pattern '%s': %s", pat, msg);
    }
    m->mctx = pcre2_match_context_create(NULL);
    if (!m->mctx) {
        imp_matcher_free(m);
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    }
    pcre2_set_match_limit(m->mctx, MATCH_LIMIT);
    pcre2_set_depth_limit(m->mctx, 1000);
    *out = m;
    return 0;
}

int imp_matcher_match(const imp_matcher *m, const char *s, int64_t *vals, int cap)
{
    if (m->literal)
        return !strcmp(m->lit, s);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(m->re, NULL);
    if (!md)
        return GGUF_E_NOMEM;
    const int rc = pcre2_match(m->re, (PCRE2_SPTR)s, strlen(s), 0, 0, md, m->mctx);
    int ret = 0;
    if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT) {
        ret = GGUF_E_LIMIT;
    } else if (rc > 0) {
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        for (int i = 0; i < m->nvars && i < cap; i++) {
            int64_t v = 0;
            for (PCRE2_SIZE j = ov[2 * (i + 1)]; j < ov[2 * (i + 1) + 1]; j++)
                v = v * 10 + (s[j] - '0');
            vals[i] = v;
        }
        ret = 1;
    }
    pcre2_match_data_free(md);
    return ret;
}

int imp_matcher_nvars(const imp_matcher *m)
{
    return m->nvars;
}

bool imp_matcher_literal(const imp_matcher *m)
{
    return m->literal;
}

void imp_matcher_free(imp_matcher *m)
{
    if (!m)
        return;
    pcre2_code_free(m->re);
    pcre2_match_context_free(m->mctx);
    free(m->lit);
    free(m);
}
