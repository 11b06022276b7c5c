/*
 * gguf-inspect --json. The contract (docs/gguf-inspect.md), relied on outside
 * the project: top-level `version`, `alignment`, `metadata` (key -> value,
 * arrays as JSON arrays) and `tensors` (name, type, shape in ggml ne order,
 * offset = absolute byte offset in its file, nbytes, and `file` for split sets).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "inspect.h"

/* Decimal digits of v, fast: long integer arrays (token types, ids) are common. */
static void json_u64(FILE *out, uint64_t v)
{
    char buf[24];
    int k = 24;
    do {
        buf[--k] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    fwrite_unlocked(buf + k, 1, (size_t)(24 - k), out);
}

static void json_i64(FILE *out, int64_t v)
{
    if (v < 0) {
        putc_unlocked('-', out);
        json_u64(out, (uint64_t)0 - (uint64_t)v);
    } else {
        json_u64(out, (uint64_t)v);
    }
}

static void json_scalar(FILE *out, const gguf_value *v)
{
    switch (v->type) {
    case GGUF_VALUE_UINT8: json_u64(out, v->v.u8); break;
    case GGUF_VALUE_INT8: json_i64(out, v->v.i8); break;
    case GGUF_VALUE_UINT16: json_u64(out, v->v.u16); break;
    case GGUF_VALUE_INT16: json_i64(out, v->v.i16); break;
    case GGUF_VALUE_UINT32: json_u64(out, v->v.u32); break;
    case GGUF_VALUE_INT32: json_i64(out, v->v.i32); break;
    case GGUF_VALUE_UINT64: json_u64(out, v->v.u64); break;
    case GGUF_VALUE_INT64: json_i64(out, v->v.i64); break;
    /* Shortest forms that read back to the same float32 / float64; integers exactly. */
    case GGUF_VALUE_FLOAT32:
    case GGUF_VALUE_FLOAT64: {
        double d = v->type == GGUF_VALUE_FLOAT32 ? (double)v->v.f32 : v->v.f64;
        if (d != d || d - d != 0)
            fputs_unlocked("null", out);
        else if (d == (double)(int64_t)d && d > -1e15 && d < 1e15 && (d != 0 || !signbit(d)))
            json_i64(out, (int64_t)d);
        else
            fprintf(out, v->type == GGUF_VALUE_FLOAT32 ? "%.9g" : "%.17g", d);
        break;
    }
    case GGUF_VALUE_BOOL: fputs_unlocked(v->v.b ? "true" : "false", out); break;
    case GGUF_VALUE_STRING: cli_json_str(out, v->v.str.data, (size_t)v->v.str.len); break;
    default: fputs_unlocked("null", out);
    }
}

void inspect_json_value(FILE *out, const gguf_value *v)
{
    if (v->type != GGUF_VALUE_ARRAY) {
        json_scalar(out, v);
        return;
    }
    fputc('[', out);
    for (uint64_t i = 0; i < v->v.arr.n; i++) {
        if (i)
            putc_unlocked(',', out);
        gguf_value e = gguf_value_elem(v, i);
        inspect_json_value(out, &e);
    }
    fputc(']', out);
}

static void json_digest(FILE *out, const char *key, const gguf_digest *d)
{
    char hex[GGUF_DIGEST_HEX];
    fprintf(out, ",\"%s\":\"%s\"", key, gguf_digest_hex(d, hex));
}

void inspect_print_json(FILE *out, const gguf_set *s, const inspect_opts *o,
                        const inspect_digests *d)
{
    const gguf_file *meta = gguf_set_meta(s);
    uint32_t parts = gguf_set_part_count(s);
    cli_json_begin(out, "gguf-inspect");
    fprintf(out, ",\"gguf_version\":%u,\"alignment\":%u,\"data_offset\":%llu",
            gguf_file_version(meta), gguf_file_alignment(meta),
            (unsigned long long)gguf_file_data_offset(meta));
    fputs(",\"files\":[", out);
    for (uint32_t i = 0; i < parts; i++) {
        const gguf_file *f = gguf_set_part(s, i);
        fprintf(out, "%s{\"path\":", i ? "," : "");
        cli_json_str(out, gguf_file_path(f), SIZE_MAX);
        fprintf(out, ",\"size\":%llu,\"data_offset\":%llu,\"n_tensors\":%lld,\"n_kv\":%lld",
                (unsigned long long)gguf_file_size(f),
                (unsigned long long)gguf_file_data_offset(f),
                (long long)gguf_file_tensor_count(f), (long long)gguf_file_kv_count(f));
        if (d->files)
            json_digest(out, "xxh3_128", &d->files[i]);
        fputc('}', out);
    }
    fputc(']', out);
    if (!o->tensors_only) {
        fputs(",\"metadata\":{", out);
        bool first = true;
        for (int64_t i = 0; i < gguf_file_kv_count(meta); i++) {
            const gguf_kv *kv = gguf_file_kv_at(meta, i);
            if (!inspect_match(o, kv->key))
                continue;
            if (!first)
                fputc(',', out);
            first = false;
            cli_json_str(out, kv->key, kv->key_len);
            fputc(':', out);
            inspect_json_value(out, &kv->value);
        }
        fputs("},\"metadata_types\":{", out);
        first = true;
        for (int64_t i = 0; i < gguf_file_kv_count(meta); i++) {
            const gguf_kv *kv = gguf_file_kv_at(meta, i);
            if (!inspect_match(o, kv->key))
                continue;
            if (!first)
                fputc(',', out);
            first = false;
            cli_json_str(out, kv->key, kv->key_len);
            if (kv->value.type == GGUF_VALUE_ARRAY)
                fprintf(out, ":\"array[%s]\"", gguf_value_type_name(kv->value.v.arr.type));
            else
                fprintf(out, ":\"%s\"", gguf_value_type_name(kv->value.type));
        }
        fputc('}', out);
    }
    if (!o->metadata_only) {
        fputs(",\"tensors\":[", out);
        bool first = true;
        int64_t n = gguf_set_tensor_count(s);
        uint64_t total_bytes = 0, total_elems = 0;
        int64_t matched = 0;
        for (int64_t i = 0; i < n; i++) {
            const gguf_tensor *t = gguf_set_tensor_at(s, i);
            if (!inspect_match(o, t->name))
                continue;
            total_bytes += t->nbytes;
            total_elems += (uint64_t)t->n_elements;
            matched++;
            if (!first)
                fputc(',', out);
            first = false;
            fputs("{\"name\":", out);
            cli_json_str(out, t->name, SIZE_MAX);
            fprintf(out, ",\"type\":\"%s\",\"shape\":[", gguf_type_name(t->type));
            for (uint32_t k = 0; k < t->n_dims; k++)
                fprintf(out, "%s%lld", k ? "," : "", (long long)t->ne[k]);
            fprintf(out, "],\"offset\":%llu,\"nbytes\":%llu,\"n_elements\":%lld",
                    (unsigned long long)t->file_offset, (unsigned long long)t->nbytes,
                    (long long)t->n_elements);
            if (parts > 1) {
                fputs(",\"file\":", out);
                cli_json_str(out, gguf_file_path(gguf_set_part(s, t->part)), SIZE_MAX);
                fprintf(out, ",\"part\":%u", t->part);
            }
            if (d->tensors)
                json_digest(out, "xxh3_128", &d->tensors[i]);
            fputc('}', out);
        }
        fprintf(out, "],\"totals\":{\"n_tensors\":%lld,\"nbytes\":%llu,\"n_elements\":%llu",
                (long long)matched, (unsigned long long)total_bytes, (unsigned long long)total_elems);
        fputs(",\"bits_per_weight\":", out);
        cli_json_num(out, total_elems ? 8.0 * (double)total_bytes / (double)total_elems : 0);
        fputc('}', out);
    }
    if (d->tensors)
        json_digest(out, "model_digest", &d->model);
    fputs("}\n", out);
}
