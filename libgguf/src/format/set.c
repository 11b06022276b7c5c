/*
 * Split sets: a model stored as PREFIX-00001-of-000NN.gguf ... parts, opened as
 * one logical model. Metadata lives in part 0; tensors are the parts' tensors
 * in part order. Every part's split keys are checked, not just the first's.
 */
#include "util/error_lib.h"
#include "format/file_internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct gguf_set {
    uint32_t n_parts;
    gguf_file **parts;
    int64_t n_tensors;
    const gguf_tensor **tensors;
    gguf_name_index index;
};

bool gguf_split_parse_name(const char *path, char *prefix, size_t prefix_size, uint32_t *no,
                           uint32_t *count)
{
    /* ...-NNNNN-of-MMMMM.gguf: 5+ digits each, as llama.cpp writes them. */
    size_t n = strlen(path);
    static const char ext[] = ".gguf";
    if (n < sizeof ext - 1 + 15 || strcmp(path + n - (sizeof ext - 1), ext) != 0)
        return false;
    size_t end = n - (sizeof ext - 1);
    size_t p = end;
    while (p > 0 && isdigit((unsigned char)path[p - 1]))
        p--;
    size_t count_len = end - p;
    if (count_len < 5 || count_len > 9 || p < 4 || memcmp(path + p - 4, "-of-", 4) != 0)
        return false;
    size_t q = p - 4;
    size_t r = q;
    while (r > 0 && isdigit((unsigned char)path[r - 1]))
        r--;
    size_t no_len = q - r;
    if (no_len < 5 || no_len > 9 || r < 1 || path[r - 1] != '-')
        return false;
    uint32_t a = (uint32_t)strtoul(path + r, NULL, 10);
    uint32_t b = (uint32_t)strtoul(path + p, NULL, 10);
    if (a < 1 || b < 1 || a > b)
        return false;
    size_t plen = r - 1;
    if (prefix) {
        if (plen + 1 > prefix_size)
            return false;
        memcpy(prefix, path, plen);
        prefix[plen] = '\0';
    }
    *no = a;
    *count = b;
    return true;
}

int gguf_split_part_name(char *out, size_t size, const char *prefix, uint32_t no, uint32_t count)
{
    int n = snprintf(out, size, "%s-%05u-of-%05u.gguf", prefix, no, count);
    return (n < 0 || (size_t)n >= size) ? GGUF_E_LIMIT : GGUF_OK;
}

/* A split key, if present, as an unsigned integer; -1 if absent. */
static int split_key(const gguf_file *f, const char *key, int64_t *out, gguf_error *err)
{
    const gguf_kv *kv = gguf_file_kv_find(f, key);
    if (!kv) {
        *out = -1;
        return GGUF_OK;
    }
    int64_t v;
    if (gguf_value_to_i64(&kv->value, &v) != GGUF_OK || v < 0)
        return gguf_fail(err, GGUF_E_SPLIT, kv->offset,
                         "%s: %s: must be a non-negative integer (has type %s)", f->path, key,
                         gguf_value_type_name(kv->value.type));
    *out = v;
    return GGUF_OK;
}

static int check_part(const gguf_file *f, uint32_t index, uint32_t count, const gguf_file *first,
                      gguf_error *err)
{
    int64_t no = -1, cnt = -1, tot = -1;
    int rc;
    if ((rc = split_key(f, GGUF_KEY_SPLIT_NO, &no, err)) ||
        (rc = split_key(f, GGUF_KEY_SPLIT_COUNT, &cnt, err)) ||
        (rc = split_key(f, GGUF_KEY_SPLIT_TENSORS, &tot, err)))
        return rc;
    if (count > 1 && (no < 0 || cnt < 0))
        return gguf_fail(err, GGUF_E_SPLIT, GGUF_NO_OFFSET,
                         "%s: part %u of %u has no split.no/split.count keys", f->path,
                         index + 1, count);
    if (no >= 0 && no != (int64_t)index)
        return gguf_fail(err, GGUF_E_SPLIT, gguf_file_kv_find(f, GGUF_KEY_SPLIT_NO)->offset,
                         "%s: split.no is %lld but the file name says part %u (split.no is "
                         "0-based: expected %u)",
                         f->path, (long long)no, index + 1, index);
    if (cnt >= 0 && cnt != (int64_t)count)
        return gguf_fail(err, GGUF_E_SPLIT,
                         gguf_file_kv_find(f, GGUF_KEY_SPLIT_COUNT)->offset,
                         "%s: split.count is %lld but the set has %u parts", f->path,
                         (long long)cnt, count);
    if (first && f->version != first->version)
        return gguf_fail(err, GGUF_E_SPLIT, 4, "%s: GGUF version %u differs from part 1's %u",
                         f->path, f->version, first->version);
    /* llama.cpp's gguf-split writes general.alignment only into part 1, so a later part
     * without the key uses the default 32; one that declares another value than part 1
     * belongs to another set (or was rewritten). */
    if (first && f->alignment != first->alignment && gguf_file_kv_find(f, GGUF_KEY_ALIGNMENT))
        return gguf_fail(err, GGUF_E_SPLIT, gguf_file_kv_find(f, GGUF_KEY_ALIGNMENT)->offset,
                         "%s: alignment %u differs from part 1's %u", f->path, f->alignment,
                         first->alignment);
    return GGUF_OK;
}

static int build_set(gguf_set *s, gguf_error *err)
{
    int64_t total = 0;
    for (uint32_t i = 0; i < s->n_parts; i++)
        total += s->parts[i]->n_tensors;
    s->tensors = malloc(((size_t)total + 1) * sizeof *s->tensors);
    if (!s->tensors)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    int64_t k = 0;
    for (uint32_t i = 0; i < s->n_parts; i++)
        for (int64_t j = 0; j < s->parts[i]->n_tensors; j++) {
            s->parts[i]->tensors[j].part = i;
            s->tensors[k++] = &s->parts[i]->tensors[j];
        }
    s->n_tensors = total;

    const gguf_file *first = s->parts[0];
    int64_t expect = -1;
    int rc = split_key(first, GGUF_KEY_SPLIT_TENSORS, &expect, err);
    if (rc)
        return rc;
    if (s->n_parts > 1 && expect < 0)
        return gguf_fail(err, GGUF_E_SPLIT, GGUF_NO_OFFSET,
                         "%s: split.tensors.count is missing from part 1", first->path);
    if (expect >= 0 && expect != total)
        return gguf_fail(err, GGUF_E_SPLIT,
                         gguf_file_kv_find(first, GGUF_KEY_SPLIT_TENSORS)->offset,
                         "%s: split.tensors.count says %lld tensors but the %u part(s) hold "
                         "%lld (a part is missing tensors or is from another set)",
                         first->path, (long long)expect, s->n_parts, (long long)total);
    for (uint32_t i = 1; i < s->n_parts; i++) {
        int64_t t = -1;
        if ((rc = split_key(s->parts[i], GGUF_KEY_SPLIT_TENSORS, &t, err)))
            return rc;
        if (t >= 0 && t != expect)
            return gguf_fail(err, GGUF_E_SPLIT, GGUF_NO_OFFSET,
                             "%s: split.tensors.count %lld differs from part 1's %lld (parts "
                             "of different sets?)",
                             s->parts[i]->path, (long long)t, (long long)expect);
    }
    int64_t a = 0, b = 0;
    rc = gguf_name_index_build(&s->index, s->tensors, total, &a, &b);
    if (rc == GGUF_E_DUPLICATE)
        return gguf_fail(err, rc, s->tensors[b]->info_offset,
                         "%s: tensor '%s' is also in %s: duplicate tensor name in the set",
                         s->parts[s->tensors[b]->part]->path, s->tensors[b]->name,
                         s->parts[s->tensors[a]->part]->path);
    if (rc)
        return gguf_fail(err, rc, GGUF_NO_OFFSET, "out of memory");
    return GGUF_OK;
}

int gguf_set_open(gguf_set **out, const char *path, const gguf_open_opts *opts, gguf_error *err)
{
    if (opts && opts->version > GGUF_OPEN_OPTS_VERSION) {
        if (out)
            *out = NULL;
        return gguf_opts_version_fail(opts->version, GGUF_OPEN_OPTS_VERSION, "gguf_open_opts", err);
    }
    gguf_error_clear(err);
    if (!out || !path)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_set_open: bad args");
    *out = NULL;
    gguf_set *s = calloc(1, sizeof *s);
    if (!s)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    size_t plen = strlen(path) + 1;
    char *prefix = malloc(plen);
    char *name = malloc(plen + 32);
    int rc = GGUF_OK;
    if (!prefix || !name) {
        rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
        goto done;
    }
    uint32_t no = 1, count = 1;
    bool split = !(opts && (opts->flags & GGUF_OPEN_SINGLE)) &&
                 gguf_split_parse_name(path, prefix, plen, &no, &count);
    if (!split)
        count = 1;
    s->parts = calloc(count, sizeof *s->parts);
    if (!s->parts) {
        rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
        goto done;
    }
    s->n_parts = count;
    for (uint32_t i = 0; i < count; i++) {
        const char *p = path;
        if (split) {
            gguf_split_part_name(name, plen + 32, prefix, i + 1, count);
            p = name;
        }
        rc = gguf_file_open(&s->parts[i], p, opts, err);
        if (rc == GGUF_E_NOT_FOUND && split) {
            rc = gguf_fail(err, GGUF_E_SPLIT, GGUF_NO_OFFSET,
                           "%s: part %u of %u is missing (opened from %s)", p, i + 1, count,
                           path);
            goto done;
        }
        if (rc)
            goto done;
        if (!split) {
            int64_t cnt = -1;
            if ((rc = split_key(s->parts[0], GGUF_KEY_SPLIT_COUNT, &cnt, err)))
                goto done;
            if (cnt > 1 && !(opts && (opts->flags & GGUF_OPEN_SINGLE))) {
                rc = gguf_fail(err, GGUF_E_SPLIT, GGUF_NO_OFFSET,
                               "%s: split.count is %lld but the name does not follow "
                               "PREFIX-NNNNN-of-NNNNN.gguf, so the other parts cannot be found",
                               path, (long long)cnt);
                goto done;
            }
            if (opts && (opts->flags & GGUF_OPEN_SINGLE))
                break;
        }
        rc = check_part(s->parts[i], i, count, i ? s->parts[0] : NULL, err);
        if (rc)
            goto done;
    }
    if (opts && (opts->flags & GGUF_OPEN_SINGLE)) {
        /* A lone part of a set: its tensors, without the set-level total check. */
        const gguf_file *f = s->parts[0];
        s->n_tensors = f->n_tensors;
        s->tensors = malloc(((size_t)f->n_tensors + 1) * sizeof *s->tensors);
        if (!s->tensors) {
            rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
            goto done;
        }
        for (int64_t j = 0; j < f->n_tensors; j++)
            s->tensors[j] = &f->tensors[j];
        int64_t a, b;
        rc = gguf_name_index_build(&s->index, s->tensors, s->n_tensors, &a, &b);
        goto done;
    }
    rc = build_set(s, err);
done:
    free(prefix);
    free(name);
    if (rc) {
        gguf_set_free(s);
        return rc;
    }
    *out = s;
    return GGUF_OK;
}

void gguf_set_free(gguf_set *s)
{
    if (!s)
        return;
    for (uint32_t i = 0; i < s->n_parts; i++)
        gguf_file_free(s->parts[i]);
    free(s->parts);
    free(s->tensors);
    gguf_name_index_free(&s->index);
    free(s);
}

uint32_t gguf_set_part_count(const gguf_set *s) { return s->n_parts; }

const gguf_file *gguf_set_part(const gguf_set *s, uint32_t i)
{
    return i < s->n_parts ? s->parts[i] : NULL;
}

const gguf_file *gguf_set_meta(const gguf_set *s) { return s->parts[0]; }
int64_t gguf_set_tensor_count(const gguf_set *s) { return s->n_tensors; }

const gguf_tensor *gguf_set_tensor_at(const gguf_set *s, int64_t i)
{
    return (i >= 0 && i < s->n_tensors) ? s->tensors[i] : NULL;
}

const gguf_tensor *gguf_set_tensor_find(const gguf_set *s, const char *name)
{
    int64_t i = gguf_name_index_find(&s->index, s->tensors, name);
    return i >= 0 ? s->tensors[i] : NULL;
}
