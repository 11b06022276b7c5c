/*
 * The manifest of a merge or split: per-tensor and per-file XXH3-128 digests
 * as JSON (schema in gguf/split.h), written atomically so CI never reads half
 * a manifest.
 */
#include "util/error_lib.h"
#include "gguf/output.h"
#include "gguf/split.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void json_str(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20)
            fprintf(out, "\\u%04x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

static void render(FILE *out, const gguf_set *in, const gguf_split_plan *p,
                   const gguf_split_report *r)
{
    char hex[GGUF_DIGEST_HEX];
    fprintf(out, "{\n  \"schema\": \"ggufkit.merge-manifest/1\",\n  \"operation\": \"%s\",\n",
            p->kind == GGUF_PLAN_MERGE ? "merge" : "split");
    fputs("  \"inputs\": [", out);
    for (uint32_t i = 0; i < gguf_set_part_count(in); i++) {
        const gguf_file *f = gguf_set_part(in, i);
        fprintf(out, "%s\n    {\"path\": ", i ? "," : "");
        json_str(out, gguf_file_path(f));
        fprintf(out, ", \"size\": %llu}", (unsigned long long)gguf_file_size(f));
    }
    fputs("\n  ],\n  \"outputs\": [", out);
    for (uint32_t k = 0; k < p->n_parts; k++) {
        fprintf(out, "%s\n    {\"path\": ", k ? "," : "");
        json_str(out, p->parts[k].path);
        fprintf(out, ", \"size\": %llu, \"tensors\": %lld, \"xxh3_128\": \"%s\"}",
                (unsigned long long)p->parts[k].size, (long long)p->parts[k].count,
                gguf_digest_hex(&r->file_digests[k], hex));
    }
    fprintf(out, "\n  ],\n  \"model_xxh3_128\": \"%s\",\n  \"tensors\": [",
            gguf_digest_hex(&r->model_digest, hex));
    uint32_t k = 0;
    for (int64_t i = 0; i < p->n_tensors; i++) {
        const gguf_tensor *t = gguf_set_tensor_at(in, i);
        while (k + 1 < p->n_parts && i >= p->parts[k].first + p->parts[k].count)
            k++;
        fprintf(out, "%s\n    {\"name\": ", i ? "," : "");
        json_str(out, t->name);
        fprintf(out, ", \"type\": \"%s\", \"shape\": [", gguf_type_name(t->type));
        for (uint32_t d = 0; d < t->n_dims; d++)
            fprintf(out, "%s%lld", d ? ", " : "", (long long)t->ne[d]);
        fprintf(out, "], \"nbytes\": %llu, \"output\": %u, \"xxh3_128\": \"%s\"}",
                (unsigned long long)t->nbytes, k, gguf_digest_hex(&r->tensor_digests[i], hex));
    }
    fputs("\n  ]\n}\n", out);
}

int gguf_split_check_manifest(const char *path, const gguf_set *in, const gguf_split_plan *p,
                              bool overwrite, gguf_error *err)
{
    gguf_error_clear(err);
    if (!path || !in || !p)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_split_check_manifest: bad args");
    for (uint32_t k = 0; k < p->n_parts; k++)
        if (strcmp(path, p->parts[k].path) == 0)
            return gguf_fail(err, GGUF_E_EXISTS, GGUF_NO_OFFSET,
                             "%s: the manifest would be written over an output", path);
    struct stat st;
    if (stat(path, &st) == 0) {
        for (uint32_t i = 0; i < gguf_set_part_count(in); i++) {
            struct stat ist;
            const gguf_file *f = gguf_set_part(in, i);
            if (fstat(gguf_file_fd(f), &ist) == 0 && ist.st_dev == st.st_dev &&
                ist.st_ino == st.st_ino)
                return gguf_fail(err, GGUF_E_EXISTS, GGUF_NO_OFFSET,
                                 "%s: the manifest is the input part %u (%s); refusing to write "
                                 "over an input",
                                 path, i + 1, gguf_file_path(f));
        }
    }
    if (!overwrite && lstat(path, &st) == 0)
        return gguf_fail(err, GGUF_E_EXISTS, GGUF_NO_OFFSET,
                         "%s: the manifest exists (use --force to replace it)", path);
    return GGUF_OK;
}

int gguf_split_manifest_write(const char *path, const gguf_set *in, const gguf_split_plan *p,
                              const gguf_split_report *r, bool overwrite, gguf_error *err)
{
    gguf_error_clear(err);
    if (!path || !in || !p || !r || !r->have_digests)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "gguf_split_manifest_write: no digests were computed");
    int crc = gguf_split_check_manifest(path, in, p, overwrite, err);
    if (crc)
        return crc;
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (!mem)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    render(mem, in, p, r);
    if (fclose(mem) != 0 || !text) {
        free(text);
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    }
    /* Temporary file, fsync, rename (no replace unless overwrite), folder fsync. */
    gguf_output_opts oo = {.overwrite = overwrite};
    int rc = gguf_output_write_file(path, text, len, &oo, err);
    free(text);
    return rc;
}
