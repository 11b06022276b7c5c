/* gguf-inspect's readable summary: header, metadata, tensor table, totals. */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "cli.h"
#include "inspect.h"

#define ARRAY_PREVIEW 8

static void text_str(FILE *out, const char *s, uint64_t n, uint64_t max)
{
    fputc('"', out);
    for (uint64_t i = 0; i < n && i < max; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n')
            fputs("\\n", out);
        else if (c < 0x20)
            fprintf(out, "\\x%02x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
    if (n > max)
        fprintf(out, "... (%llu bytes)", (unsigned long long)n);
}

/* A number or bool: integers exactly, floats in the shortest form that reads back to the
 * same float32 / float64 (integral ones as integers). */
static void text_scalar(FILE *out, const gguf_value *v)
{
    switch (v->type) {
    case GGUF_VALUE_UINT8: fprintf(out, "%u", v->v.u8); break;
    case GGUF_VALUE_INT8: fprintf(out, "%d", v->v.i8); break;
    case GGUF_VALUE_UINT16: fprintf(out, "%u", v->v.u16); break;
    case GGUF_VALUE_INT16: fprintf(out, "%d", v->v.i16); break;
    case GGUF_VALUE_UINT32: fprintf(out, "%" PRIu32, v->v.u32); break;
    case GGUF_VALUE_INT32: fprintf(out, "%" PRId32, v->v.i32); break;
    case GGUF_VALUE_UINT64: fprintf(out, "%" PRIu64, v->v.u64); break;
    case GGUF_VALUE_INT64: fprintf(out, "%" PRId64, v->v.i64); break;
    case GGUF_VALUE_FLOAT32:
    case GGUF_VALUE_FLOAT64: {
        const double d = v->type == GGUF_VALUE_FLOAT32 ? (double)v->v.f32 : v->v.f64;
        if (d != d || d - d != 0)
            fputs("null", out);
        else if (d == (double)(int64_t)d && d > -1e15 && d < 1e15 && (d != 0 || !signbit(d)))
            fprintf(out, "%" PRId64, (int64_t)d);
        else
            fprintf(out, v->type == GGUF_VALUE_FLOAT32 ? "%.9g" : "%.17g", d);
        break;
    }
    case GGUF_VALUE_BOOL: fputs(v->v.b ? "true" : "false", out); break;
    default: fputs("null", out);
    }
}

static void text_value(FILE *out, const gguf_value *v, int depth)
{
    if (v->type == GGUF_VALUE_STRING) {
        text_str(out, v->v.str.data, v->v.str.len, depth ? 40 : 200);
        return;
    }
    if (v->type != GGUF_VALUE_ARRAY) {
        text_scalar(out, v);
        return;
    }
    uint64_t n = v->v.arr.n;
    fputc('[', out);
    for (uint64_t i = 0; i < n && i < ARRAY_PREVIEW; i++) {
        gguf_value e = gguf_value_elem(v, i);
        fputs(i ? ", " : "", out);
        text_value(out, &e, depth + 1);
    }
    if (n > ARRAY_PREVIEW)
        fputs(", ...", out);
    fputc(']', out);
    if (n > ARRAY_PREVIEW || depth == 0)
        fprintf(out, " (%llu %s)", (unsigned long long)n, gguf_value_type_name(v->v.arr.type));
}

/* "45.44 K", "1.10 B": a count in the decimal unit its size calls for, as model sizes are
 * quoted ("7B"); empty below a thousand, where the number says it all. */
static const char *count_str(uint64_t n, char *buf, size_t size)
{
    static const char units[] = "KMBT";
    double v = (double)n;
    int u = -1;
    while (v >= 999.995 && u < 3) {
        v /= 1000.0;
        u++;
    }
    if (u < 0)
        buf[0] = '\0';
    else
        snprintf(buf, size, " (%.2f %c)", v, units[u]);
    return buf;
}

static void shape_str(const gguf_tensor *t, char *buf, size_t size)
{
    size_t k = 0;
    buf[k++] = '[';
    for (uint32_t d = 0; d < t->n_dims && k < size; d++)
        k += (size_t)snprintf(buf + k, size - k, "%s%lld", d ? ", " : "", (long long)t->ne[d]);
    if (k < size - 1) {
        buf[k++] = ']';
        buf[k] = '\0';
    }
}

void inspect_print_text(FILE *out, const gguf_set *s, const inspect_opts *o,
                        const inspect_digests *d)
{
    const gguf_file *meta = gguf_set_meta(s);
    uint32_t parts = gguf_set_part_count(s);
    char hb[32], hex[GGUF_DIGEST_HEX];
    uint64_t total_size = 0;
    for (uint32_t i = 0; i < parts; i++)
        total_size += gguf_file_size(gguf_set_part(s, i));

    fprintf(out, "file:        %s\n", gguf_file_path(meta));
    fprintf(out, "version:     %u\n", gguf_file_version(meta));
    fprintf(out, "alignment:   %u\n", gguf_file_alignment(meta));
    fprintf(out, "data offset: %llu\n", (unsigned long long)gguf_file_data_offset(meta));
    fprintf(out, "size:        %llu bytes (%s)\n", (unsigned long long)total_size,
            cli_human_bytes(total_size, hb, sizeof hb));
    if (parts > 1 || d->files) {
        fprintf(out, "\nsplit layout: %u part(s)\n", parts);
        for (uint32_t i = 0; i < parts; i++) {
            const gguf_file *f = gguf_set_part(s, i);
            fprintf(out, "  %u  %-48s %6lld tensors  %s", i + 1, gguf_file_path(f),
                    (long long)gguf_file_tensor_count(f),
                    cli_human_bytes(gguf_file_size(f), hb, sizeof hb));
            if (d->files)
                fprintf(out, "  xxh3-128 %s", gguf_digest_hex(&d->files[i], hex));
            fputc('\n', out);
        }
    }
    if (!o->tensors_only) {
        fprintf(out, "\nmetadata: %lld keys\n", (long long)gguf_file_kv_count(meta));
        for (int64_t i = 0; i < gguf_file_kv_count(meta); i++) {
            const gguf_kv *kv = gguf_file_kv_at(meta, i);
            if (!inspect_match(o, kv->key))
                continue;
            char tname[32];
            if (kv->value.type == GGUF_VALUE_ARRAY)
                snprintf(tname, sizeof tname, "arr[%s]", gguf_value_type_name(kv->value.v.arr.type));
            else
                snprintf(tname, sizeof tname, "%s", gguf_value_type_name(kv->value.type));
            fprintf(out, "  %-44s %-12s ", kv->key, tname);
            text_value(out, &kv->value, 0);
            fputc('\n', out);
        }
    }
    if (o->metadata_only)
        return;

    int64_t n = gguf_set_tensor_count(s);
    uint64_t by_type_bytes[GGUF_TYPE_COUNT] = {0}, by_type_elems[GGUF_TYPE_COUNT] = {0};
    uint64_t by_type_n[GGUF_TYPE_COUNT] = {0};
    uint64_t total_bytes = 0, total_elems = 0;
    int64_t shown = 0;
    fprintf(out, "\ntensors: %lld\n", (long long)n);
    fprintf(out, "  %-5s %-44s %-8s %-24s %14s %14s%s\n", "#", "name", "type", "shape (ne)",
            "offset", "bytes", parts > 1 ? "  part" : "");
    for (int64_t i = 0; i < n; i++) {
        const gguf_tensor *t = gguf_set_tensor_at(s, i);
        if (!inspect_match(o, t->name))
            continue;
        shown++;
        char shape[96];
        shape_str(t, shape, sizeof shape);
        fprintf(out, "  %-5lld %-44s %-8s %-24s %14llu %14llu", (long long)i, t->name,
                gguf_type_name(t->type), shape, (unsigned long long)t->file_offset,
                (unsigned long long)t->nbytes);
        if (parts > 1)
            fprintf(out, "  %u", t->part + 1);
        if (d->tensors)
            fprintf(out, "  %s", gguf_digest_hex(&d->tensors[i], hex));
        fputc('\n', out);
        by_type_bytes[t->type] += t->nbytes;
        by_type_elems[t->type] += (uint64_t)t->n_elements;
        by_type_n[t->type]++;
        total_bytes += t->nbytes;
        total_elems += (uint64_t)t->n_elements;
    }
    if (o->filter.set)
        fprintf(out, "  (%lld of %lld tensors match the filter)\n", (long long)shown, (long long)n);
    fprintf(out, "\ntotals by type:\n");
    for (int t = 0; t < GGUF_TYPE_COUNT; t++) {
        if (!by_type_n[t])
            continue;
        fprintf(out, "  %-8s %6llu tensors %16llu params %16llu bytes  %6.3f bpw\n",
                gguf_type_name((uint32_t)t), (unsigned long long)by_type_n[t],
                (unsigned long long)by_type_elems[t], (unsigned long long)by_type_bytes[t],
                by_type_elems[t] ? 8.0 * (double)by_type_bytes[t] / (double)by_type_elems[t] : 0);
    }
    char cb[32];
    fprintf(out, "parameters:  %llu%s\n", (unsigned long long)total_elems,
            count_str(total_elems, cb, sizeof cb));
    fprintf(out, "tensor data: %llu bytes (%s)\n", (unsigned long long)total_bytes,
            cli_human_bytes(total_bytes, hb, sizeof hb));
    fprintf(out, "bits/weight: %.3f\n",
            total_elems ? 8.0 * (double)total_bytes / (double)total_elems : 0.0);
    if (d->tensors)
        fprintf(out, "model xxh3-128: %s\n", gguf_digest_hex(&d->model, hex));
}
