/*
 * Import dumps: the files a FILE pattern names below a folder, one path
 * component at a time (a literal component is looked up, a pattern lists the
 * folder, names in order, dot files skipped), with the variables bound.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/error_lib.h"
#include "interop/import_internal.h"

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int walk_add(fwalk *w, const char *path, const int64_t *vals, int nvals)
{
    if (w->n == w->cap) {
        const int64_t cap = w->cap ? w->cap * 2 : 16;
        fmatch *m = realloc(w->m, (size_t)cap * sizeof *m);
        if (!m)
            return gguf_fail(w->err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
        w->m = m;
        w->cap = cap;
    }
    fmatch *f = &w->m[w->n];
    if (!(f->path = strdup(path)))
        return gguf_fail(w->err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    memcpy(f->vals, vals, sizeof f->vals);
    f->nvals = nvals;
    w->n++;
    return 0;
}

/* Match the components of the pattern from comp on, below folder base. */
int imp_walk_dir(fwalk *w, const char *base, const char *comp, int64_t *vals, int nvals)
{
    const char *slash = strchr(comp, '/');
    const size_t cl = slash ? (size_t)(slash - comp) : strlen(comp);
    char cpat[1024];
    if (cl >= sizeof cpat)
        return gguf_fail(w->err, GGUF_E_LIMIT, GGUF_NO_OFFSET, "'%s': a component over 1023 bytes",
                         w->pat);
    memcpy(cpat, comp, cl);
    cpat[cl] = 0;
    imp_matcher *m;
    int rc = imp_matcher_new(&m, cpat, true, w->err);
    if (rc)
        return rc;
    char **names = NULL;
    int64_t nn = 0;
    if (imp_matcher_literal(m)) {
        names = malloc(sizeof *names);
        if (!names || !(names[0] = strdup(cpat))) {
            free(names);
            imp_matcher_free(m);
            return gguf_fail(w->err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
        }
        nn = 1;
    } else {
        DIR *d = opendir(base);
        if (!d) {
            imp_matcher_free(m);
            if (errno == ENOENT || errno == ENOTDIR)
                return 0; /* nothing matches below a missing folder */
            return gguf_fail_errno(w->err, GGUF_E_IO, errno, "%s", base);
        }
        int64_t cap = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.')
                continue;
            if (nn == (int64_t)GGUF_IMPORT_MAX_FILES) {
                rc = gguf_fail(w->err, GGUF_E_LIMIT, GGUF_NO_OFFSET, "%s: over %u names",
                               base, GGUF_IMPORT_MAX_FILES);
                break;
            }
            if (nn == cap) {
                cap = cap ? cap * 2 : 64;
                char **t = realloc(names, (size_t)cap * sizeof *t);
                if (!t) {
                    rc = gguf_fail(w->err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
                    break;
                }
                names = t;
            }
            if (!(names[nn] = strdup(e->d_name))) {
                rc = gguf_fail(w->err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
                break;
            }
            nn++;
        }
        closedir(d);
        if (!rc && nn > 1)
            qsort(names, (size_t)nn, sizeof *names, cmp_str);
    }
    for (int64_t i = 0; i < nn && !rc; i++) {
        int64_t v[GGUF_IMPORT_MAX_VARS];
        memcpy(v, vals, sizeof v);
        const int nv = imp_matcher_nvars(m);
        const int hit = imp_matcher_match(m, names[i], v + nvals, GGUF_IMPORT_MAX_VARS - nvals);
        if (hit < 0) {
            rc = gguf_fail(w->err, hit, GGUF_NO_OFFSET, "'%s': over the match limit on '%s'",
                           cpat, names[i]);
            break;
        }
        if (!hit)
            continue;
        char path[4096];
        if ((size_t)snprintf(path, sizeof path, "%s/%s", base, names[i]) >= sizeof path) {
            rc = gguf_fail(w->err, GGUF_E_LIMIT, GGUF_NO_OFFSET, "%s/%s: path too long", base,
                           names[i]);
            break;
        }
        struct stat sb;
        if (stat(path, &sb) != 0)
            continue;
        if (slash) {
            if (S_ISDIR(sb.st_mode))
                rc = imp_walk_dir(w, path, slash + 1, v, nvals + nv);
        } else if (S_ISREG(sb.st_mode)) {
            rc = walk_add(w, path, v, nvals + nv);
        } else if (imp_matcher_literal(m)) {
            rc = gguf_fail(w->err, GGUF_E_NOT_GGUF, GGUF_NO_OFFSET,
                           "%s: not a regular file (a folder or a device)", path);
        }
    }
    for (int64_t i = 0; i < nn; i++)
        free(names[i]);
    free(names);
    imp_matcher_free(m);
    return rc;
}

void imp_fwalk_free(fwalk *w)
{
    for (int64_t i = 0; i < w->n; i++)
        free(w->m[i].path);
    free(w->m);
}

