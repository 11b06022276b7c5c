/*
 * gguf-inspect --json. The contract (docs/gguf-inspect.md), relied on outside
 * the project: top-level `version`, `alignment`, `metadata` (key -> value,
 * arrays as JSON arrays) and `tensors` (name, type, shape in ggml ne order,
 * offset = absolute byte offset in its file, nbytes, and `file` for split sets).
 */
#include <string.h>

#include "cli.h"
#include "inspect.h"

/* Strings are written as UTF-8; invalid sequences become U+FFFD so the JSON stays valid. */
static void json_utf8(FILE *out, const char *s, uint64_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    fputc('"', out);
    uint64_t i = 0;
    while (i < n) {
        unsigned char c = p[i];
        if (c < 0x80) {
            switch (c) {
            case '"': fputs("\\\"", out); break;
            case '\\': fputs("\\\\", out); break;
            case '\n': fputs("\\n", out); break;
            case '\r': fputs("\\r", out); break;
            case '\t': fputs("\\t", out); break;
            default:
                if (c < 0x20 || c == 0x7f)
                    fprintf(out, "\\u%04x", c);
                else
                    fputc(c, out);
            }
            i++;
            continue;
        }
        int len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c <= 0xDF ? 2 : 0;
        bool ok = len > 0 && n - i >= (uint64_t)len;
        for (int k = 1; ok && k < len; k++)
            ok = (p[i + k] & 0xC0) == 0x80;
        if (ok && len == 3) {
            unsigned cp = ((c & 0x0Fu) << 12) | ((p[i + 1] & 0x3Fu) << 6) | (p[i + 2] & 0x3Fu);
            ok = cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF);
        } else if (ok && len == 4) {
            unsigned cp = ((c & 0x07u) << 18) | ((p[i + 1] & 0x3Fu) << 12) |
                          ((p[i + 2] & 0x3Fu) << 6) | (p[i + 3] & 0x3Fu);
            ok = cp >= 0x10000 && cp <= 0x10FFFF;
        }
        if (ok) {
            fwrite(p + i, 1, (size_t)len, out);
            i += (uint64_t)len;
        } else {
            fputs("\\ufffd", out);
            i++;
        }
    }
    fputc('"', out);
}

static void json_scalar(FILE *out, const gguf_value *v)
{
    switch (v->type) {
    case GGUF_VALUE_UINT8: fprintf(out, "%u", v->v.u8); break;
    case GGUF_VALUE_INT8: fprintf(out, "%d", v->v.i8); break;
    case GGUF_VALUE_UINT16: fprintf(out, "%u", v->v.u16); break;
    case GGUF_VALUE_INT16: fprintf(out, "%d", v->v.i16); break;
    case GGUF_VALUE_UINT32: fprintf(out, "%u", v->v.u32); break;
    case GGUF_VALUE_INT32: fprintf(out, "%d", v->v.i32); break;
    case GGUF_VALUE_UINT64: fprintf(out, "%llu", (unsigned long long)v->v.u64); break;
    case GGUF_VALUE_INT64: fprintf(out, "%lld", (long long)v->v.i64); break;
    /* Shortest forms that read back to the same float32 / float64. */
    case GGUF_VALUE_FLOAT32:
        if (v->v.f32 != v->v.f32 || v->v.f32 - v->v.f32 != 0)
            fputs("null", out);
        else
            fprintf(out, "%.9g", (double)v->v.f32);
        break;
    case GGUF_VALUE_FLOAT64:
        if (v->v.f64 != v->v.f64 || v->v.f64 - v->v.f64 != 0)
            fputs("null", out);
        else
            fprintf(out, "%.17g", v->v.f64);
        break;
    case GGUF_VALUE_BOOL: fputs(v->v.b ? "true" : "false", out); break;
    case GGUF_VALUE_STRING: json_utf8(out, v->v.str.data, v->v.str.len); break;
    default: fputs("null", out);
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
            fputc(',', out);
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
    fprintf(out, "{\"version\":%u,\"alignment\":%u,\"data_offset\":%llu",
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
        json_digest(out, "model_xxh3_128", &d->model);
    fputs("}\n", out);
}
