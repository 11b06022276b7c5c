/*
 * Merge and split plans: which tensors go to which output file, and the exact
 * size of each file. The sizes are computed with the same layout rules as
 * gguf_writer (write.c), and gguf_split_execute checks them against
 * gguf_writer_total_size before writing a byte, so a --split-max-size limit
 * holds for the real files, headers and padding included:
 *
 *   file = header | pad to alignment | t0 | pad | t1 | pad | ... | tn | pad
 *   header = "GGUF" u32 version, u64 n_tensors, u64 n_kv, kv pairs, tensor infos
 */
#include "util/error_lib.h"
#include "gguf/split.h"

#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

static uint64_t pad_to(uint64_t x, uint64_t a) { return (a - x % a) % a; }

static uint64_t value_bytes(const gguf_value *v, int depth)
{
    if (v->type == GGUF_VALUE_STRING)
        return 8 + v->v.str.len;
    if (v->type != GGUF_VALUE_ARRAY)
        return gguf_value_type_size(v->type); /* 0 for unknown ids */
    if (depth >= GGUF_MAX_NESTING)
        return 0;
    uint32_t et = v->v.arr.type;
    uint64_t n = v->v.arr.n, total = 4 + 8;
    if (et == GGUF_VALUE_STRING) {
        for (uint64_t i = 0; i < n; i++)
            if (!gguf_add_u64(total, 8 + v->v.arr.strs[i].len, &total))
                return 0;
        return total;
    }
    if (et == GGUF_VALUE_ARRAY) {
        for (uint64_t i = 0; i < n; i++) {
            uint64_t b = value_bytes(&v->v.arr.vals[i], depth + 1);
            if (!b || !gguf_add_u64(total, b, &total))
                return 0;
        }
        return total;
    }
    uint32_t sz = gguf_value_type_size(et);
    uint64_t items;
    if (!sz || !gguf_mul_u64(n, sz, &items) || !gguf_add_u64(total, items, &total))
        return 0;
    return total;
}

uint64_t gguf_split_kv_bytes(const char *key, const gguf_value *v)
{
    uint64_t b = value_bytes(v, 0);
    return b ? 8 + strlen(key) + 4 + b : 0;
}

bool gguf_split_is_split_key(const char *key)
{
    return strncmp(key, "split.", 6) == 0;
}

static uint64_t info_bytes(const gguf_tensor *t)
{
    return 8 + strlen(t->name) + 4 + 8ull * t->n_dims + 4 + 8;
}

/* Header bytes of the model metadata as part 1 / a merge carries it: no split.* keys. */
static int meta_bytes(const gguf_file *f, uint64_t *out, gguf_error *err)
{
    uint64_t n = 4 + 4 + 8 + 8;
    for (int64_t i = 0; i < gguf_file_kv_count(f); i++) {
        const gguf_kv *kv = gguf_file_kv_at(f, i);
        if (gguf_split_is_split_key(kv->key))
            continue;
        uint64_t b = gguf_split_kv_bytes(kv->key, &kv->value);
        if (!b || !gguf_add_u64(n, b, &n))
            return gguf_fail(err, GGUF_E_OVERFLOW, kv->offset, "%s: %s: metadata size overflows",
                             gguf_file_path(f), kv->key);
    }
    *out = n;
    return GGUF_OK;
}

/* Bytes of the three split keys (fixed types, so independent of the values). */
static uint64_t split_keys_bytes(void)
{
    gguf_value u16 = {.type = GGUF_VALUE_UINT16}, i32 = {.type = GGUF_VALUE_INT32};
    return gguf_split_kv_bytes(GGUF_KEY_SPLIT_NO, &u16) +
           gguf_split_kv_bytes(GGUF_KEY_SPLIT_COUNT, &u16) +
           gguf_split_kv_bytes(GGUF_KEY_SPLIT_TENSORS, &i32);
}

static uint64_t padded_nbytes(const gguf_tensor *t, uint32_t align)
{
    return t->nbytes + pad_to(t->nbytes, align);
}

static void part_finish(gguf_split_part *p, uint32_t align)
{
    p->size = p->header_size + pad_to(p->header_size, align) + p->data_size;
}

static gguf_split_plan *plan_new(const gguf_set *in, gguf_split_kind kind)
{
    gguf_split_plan *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    const gguf_file *meta = gguf_set_meta(in);
    p->kind = kind;
    p->n_tensors = gguf_set_tensor_count(in);
    p->alignment = gguf_file_alignment(meta);
    p->version = gguf_file_version(meta);
    return p;
}

void gguf_split_plan_free(gguf_split_plan *p)
{
    if (!p)
        return;
    for (uint32_t i = 0; i < p->n_parts; i++)
        free(p->parts[i].path);
    free(p->parts);
    free(p->offsets);
    free(p);
}

const char *gguf_merge_layout_name(gguf_merge_layout layout)
{
    return layout == GGUF_LAYOUT_ALIGNED ? "aligned" : "contiguous";
}

static bool pow2(uint64_t x) { return x && !(x & (x - 1)); }

/* The block an aligned merge keeps offsets modulo: at least 2 MiB, the largest
 * page-cache folio on x86-64 (measured on Linux 6.18 ext4: a 256 MiB
 * copy_file_range whose destination offset differs from the source's modulo
 * 4-16 KiB took 1.1-1.3 s with its fsync, against 0.87-0.92 s when they agree
 * modulo 32 KiB or more, docs/benchmarks.md); the output file system's f_bsize
 * where larger (extents are shared in whole blocks); the alignment, so that
 * offsets stay multiples of it. */
static uint32_t layout_block(const char *output, uint32_t want, uint32_t align)
{
    uint64_t b = want;
    if (!b) {
        b = GGUF_LAYOUT_BLOCK_DEFAULT;
        char *c = strdup(output);
        struct statvfs vfs;
        if (c && statvfs(dirname(c), &vfs) == 0 && pow2(vfs.f_bsize) && vfs.f_bsize > b &&
            vfs.f_bsize <= GGUF_LAYOUT_BLOCK_MAX)
            b = vfs.f_bsize;
        free(c);
    }
    if (b < 4096)
        b = 4096;
    if (b < align)
        b = align;
    return (uint32_t)b;
}

/* Does tensor t continue the input run of prev, with the padding the output
 * gives prev? Then it keeps its place relative to prev in an aligned merge. */
static bool continues(const gguf_tensor *prev, const gguf_tensor *t, uint32_t align)
{
    return prev && t->part == prev->part &&
           t->file_offset == prev->file_offset + padded_nbytes(prev, align);
}

int gguf_merge_plan_opts(gguf_split_plan **out, const gguf_set *in, const char *output,
                         const gguf_merge_opts *opts, gguf_error *err)
{
    if (opts && opts->version > GGUF_MERGE_OPTS_VERSION) {
        if (out)
            *out = NULL;
        return gguf_opts_version_fail(opts->version, GGUF_MERGE_OPTS_VERSION, "gguf_merge_opts", err);
    }
    gguf_error_clear(err);
    if (!out || !in || !output || !*output)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_merge_plan: bad args");
    *out = NULL;
    gguf_merge_opts o = {0};
    if (opts)
        o = *opts;
    if ((o.layout != GGUF_LAYOUT_CONTIGUOUS && o.layout != GGUF_LAYOUT_ALIGNED) ||
        (o.block && (!pow2(o.block) || o.block > GGUF_LAYOUT_BLOCK_MAX)))
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "%s: layout %d with block %u: the block must be a power of two up to "
                         "16 MiB",
                         output, (int)o.layout, o.block);
    gguf_split_plan *p = plan_new(in, GGUF_PLAN_MERGE);
    if (!p || !(p->parts = calloc(1, sizeof *p->parts)) || !(p->parts[0].path = strdup(output)) ||
        !(p->offsets = calloc((size_t)p->n_tensors + 1, sizeof *p->offsets))) {
        gguf_split_plan_free(p);
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    }
    p->n_parts = 1;
    p->layout = o.layout;
    if (o.layout == GGUF_LAYOUT_ALIGNED)
        p->block = layout_block(output, o.block, p->alignment);
    gguf_split_part *part = &p->parts[0];
    int rc = meta_bytes(gguf_set_meta(in), &part->header_size, err);
    for (int64_t i = 0; !rc && i < p->n_tensors; i++)
        if (!gguf_add_u64(part->header_size, info_bytes(gguf_set_tensor_at(in, i)),
                          &part->header_size))
            rc = gguf_fail(err, GGUF_E_OVERFLOW, GGUF_NO_OFFSET, "%s: merged size overflows",
                           output);
    const uint64_t data_start = part->header_size + pad_to(part->header_size, p->alignment);
    const gguf_tensor *prev = NULL;
    for (int64_t i = 0; !rc && i < p->n_tensors; i++) {
        const gguf_tensor *t = gguf_set_tensor_at(in, i);
        uint64_t off = part->data_size;
        if (p->block && !continues(prev, t, p->alignment)) {
            /* A new input run: start it where the output file offset agrees with
             * the input's modulo the block (both are multiples of the alignment,
             * which divides the block, so the offset stays aligned). */
            uint64_t b = p->block, want = t->file_offset % b, have = (data_start + off) % b;
            off += (want + b - have) % b;
        }
        p->offsets[i] = off;
        if (!gguf_add_u64(off, padded_nbytes(t, p->alignment), &part->data_size) ||
            part->data_size > UINT64_MAX / 2)
            rc = gguf_fail(err, GGUF_E_OVERFLOW, GGUF_NO_OFFSET, "%s: merged size overflows",
                           output);
        prev = t;
    }
    if (rc) {
        gguf_split_plan_free(p);
        return rc;
    }
    part->count = p->n_tensors;
    part_finish(part, p->alignment);
    p->total_size = part->size;
    *out = p;
    return GGUF_OK;
}

int gguf_merge_plan(gguf_split_plan **out, const gguf_set *in, const char *output,
                    gguf_error *err)
{
    return gguf_merge_plan_opts(out, in, output, NULL, err);
}

static int add_part(gguf_split_plan *p, uint32_t *cap, uint64_t header, int64_t first,
                    gguf_error *err)
{
    if (p->n_parts == GGUF_SPLIT_MAX_PARTS)
        return gguf_fail(err, GGUF_E_LIMIT, GGUF_NO_OFFSET,
                         "the split needs more than %u parts (split.count is a uint16); raise "
                         "the limits",
                         GGUF_SPLIT_MAX_PARTS);
    if (p->n_parts == *cap) {
        uint32_t c = *cap ? *cap * 2 : 16;
        gguf_split_part *q = realloc(p->parts, c * sizeof *q);
        if (!q)
            return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
        p->parts = q;
        *cap = c;
    }
    gguf_split_part *part = &p->parts[p->n_parts++];
    memset(part, 0, sizeof *part);
    part->first = first;
    part->header_size = header;
    return GGUF_OK;
}

static int too_big(const gguf_split_part *part, uint32_t no, uint64_t max, gguf_error *err)
{
    return gguf_fail(err, GGUF_E_LIMIT, GGUF_NO_OFFSET,
                     "part %u would be %llu bytes (header %llu) with only %lld tensor(s), over "
                     "the --split-max-size limit of %llu bytes",
                     no, (unsigned long long)part->size, (unsigned long long)part->header_size,
                     (long long)part->count, (unsigned long long)max);
}

int gguf_split_plan_create(gguf_split_plan **out, const gguf_set *in, const char *prefix,
                           const gguf_split_limits *lim, gguf_error *err)
{
    gguf_error_clear(err);
    if (!out || !in || !prefix || !*prefix)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_split_plan_create: bad args");
    *out = NULL;
    gguf_split_limits l = {0};
    if (lim)
        l = *lim;
    if (!l.max_tensors && !l.max_size)
        l.max_tensors = 128;
    gguf_split_plan *p = plan_new(in, GGUF_PLAN_SPLIT);
    if (!p)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    uint32_t cap = 0, align = p->alignment;
    uint64_t h0, hk = 4 + 4 + 8 + 8 + split_keys_bytes();
    int rc = meta_bytes(gguf_set_meta(in), &h0, err);
    if (rc)
        goto fail;
    h0 += split_keys_bytes();
    if (align != GGUF_DEFAULT_ALIGNMENT) {
        gguf_value a = {.type = GGUF_VALUE_UINT32};
        hk += gguf_split_kv_bytes(GGUF_KEY_ALIGNMENT, &a);
    }
    if ((rc = add_part(p, &cap, h0, 0, err)))
        goto fail;
    part_finish(&p->parts[0], align);
    if (l.max_size && p->parts[0].size > l.max_size) {
        rc = too_big(&p->parts[0], 1, l.max_size, err);
        goto fail;
    }
    if (l.no_tensor_first_split && p->n_tensors > 0 && (rc = add_part(p, &cap, hk, 0, err)))
        goto fail;
    for (int64_t i = 0; i < p->n_tensors; i++) {
        const gguf_tensor *t = gguf_set_tensor_at(in, i);
        gguf_split_part *part = &p->parts[p->n_parts - 1];
        gguf_split_part next = *part;
        next.count++;
        if (!gguf_add_u64(next.header_size, info_bytes(t), &next.header_size) ||
            !gguf_add_u64(next.data_size, padded_nbytes(t, align), &next.data_size) ||
            next.header_size > UINT64_MAX / 2 || next.data_size > UINT64_MAX / 2) {
            rc = gguf_fail(err, GGUF_E_OVERFLOW, GGUF_NO_OFFSET, "part size overflows");
            goto fail;
        }
        part_finish(&next, align);
        bool over = (l.max_size && next.size > l.max_size) ||
                    (l.max_tensors && (uint64_t)next.count > l.max_tensors);
        /* A full part is closed; so is part 1 when the metadata leaves no room
         * for its first tensor (it then holds the metadata only). */
        if (over && (part->count > 0 || p->n_parts == 1)) {
            if ((rc = add_part(p, &cap, hk, i, err)))
                goto fail;
            part = &p->parts[p->n_parts - 1];
            next = *part;
            next.count = 1;
            next.header_size += info_bytes(t);
            next.data_size = padded_nbytes(t, align);
            part_finish(&next, align);
        }
        if (l.max_size && next.size > l.max_size) {
            rc = gguf_fail(err, GGUF_E_LIMIT, t->info_offset,
                           "%s: tensor '%s' (%llu bytes) does not fit in one part of at most "
                           "%llu bytes (it needs %llu with the part's header and padding)",
                           gguf_file_path(gguf_set_part(in, t->part)), t->name,
                           (unsigned long long)t->nbytes, (unsigned long long)l.max_size,
                           (unsigned long long)next.size);
            goto fail;
        }
        *part = next;
    }
    size_t plen = strlen(prefix) + 32;
    if (!(p->offsets = calloc((size_t)p->n_tensors + 1, sizeof *p->offsets))) {
        rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
        goto fail;
    }
    for (uint32_t i = 0; i < p->n_parts; i++) {
        gguf_split_part *part = &p->parts[i];
        part_finish(part, align);
        p->total_size += part->size;
        uint64_t off = 0; /* parts are contiguous: llama.cpp loads them */
        for (int64_t j = part->first; j < part->first + part->count; j++) {
            p->offsets[j] = off;
            off += padded_nbytes(gguf_set_tensor_at(in, j), align);
        }
        part->path = malloc(plen);
        if (!part->path) {
            rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
            goto fail;
        }
        gguf_split_part_name(part->path, plen, prefix, i + 1, p->n_parts);
    }
    *out = p;
    return GGUF_OK;
fail:
    gguf_split_plan_free(p); /* paths not yet allocated are NULL (add_part zeroes parts) */
    return rc;
}
