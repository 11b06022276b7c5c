/*
 * gguf-inspect --json. The contract (docs/gguf-inspect.md), relied on outside
 * the project: top-level `gguf_version`, `alignment`, `metadata` (key -> value,
 * arrays as JSON arrays) and `tensors` (name, type, shape in ggml ne order,
 * offset = absolute byte offset in its file, nbytes, and `file` for split sets).
 *
 * The document is built whole as jansson values and printed on one line by
 * cli_json_print_report: a 150k-token vocabulary (tokens, scores, types,
 * merges) costs tens of MB while it is held, freed once printed.
 */
#include <jansson.h>
#include <stdio.h>

#include "cli.h"
#include "inspect.h"

/* Appends v to *a; out of memory, both are freed and *a becomes NULL, so that
 * a document with an element missing is never printed. */
static void append(json_t **a, json_t *v)
{
    if (json_array_append_new(*a, v) != 0) {
        json_decref(*a);
        *a = NULL;
    }
}

/* Sets key in *o the same way. */
static void set(json_t **o, const char *key, json_t *v)
{
    if (json_object_set_new(*o, key, v) != 0) {
        json_decref(*o);
        *o = NULL;
    }
}

static json_t *json_scalar(const gguf_value *v)
{
    switch (v->type) {
    case GGUF_VALUE_UINT8: return cli_json_int(v->v.u8);
    case GGUF_VALUE_INT8: return cli_json_int(v->v.i8);
    case GGUF_VALUE_UINT16: return cli_json_int(v->v.u16);
    case GGUF_VALUE_INT16: return cli_json_int(v->v.i16);
    case GGUF_VALUE_UINT32: return cli_json_int(v->v.u32);
    case GGUF_VALUE_INT32: return cli_json_int(v->v.i32);
    case GGUF_VALUE_UINT64: return cli_json_u64(v->v.u64);
    case GGUF_VALUE_INT64: return cli_json_int(v->v.i64);
    /* a float32 as the double it converts to: exact, in 17 significant digits */
    case GGUF_VALUE_FLOAT32: return cli_json_number((double)v->v.f32);
    case GGUF_VALUE_FLOAT64: return cli_json_number(v->v.f64);
    case GGUF_VALUE_BOOL: return json_boolean(v->v.b);
    case GGUF_VALUE_STRING: return cli_json_text(v->v.str.data, (size_t)v->v.str.len);
    default: return json_null();
    }
}

/* One metadata value, arrays in full (arrays of arrays nested). */
static json_t *json_value(const gguf_value *v)
{
    if (v->type != GGUF_VALUE_ARRAY)
        return json_scalar(v);
    json_t *a = json_array();
    for (uint64_t i = 0; a && i < v->v.arr.n; i++) {
        const gguf_value e = gguf_value_elem(v, i);
        append(&a, json_value(&e));
    }
    return a;
}

static json_t *json_digest(const gguf_digest *d)
{
    char hex[GGUF_DIGEST_HEX];
    return json_string(gguf_digest_hex(d, hex));
}

/* Sizes and offsets within a file fit in a signed 64-bit integer (off_t). */
static json_t *files_json(const gguf_set *s, const inspect_digests *d)
{
    json_t *files = json_array();
    for (uint32_t i = 0; files && i < gguf_set_part_count(s); i++) {
        const gguf_file *f = gguf_set_part(s, i);
        json_t *o = json_pack("{s:o, s:I, s:I, s:I, s:I}",
            "path", cli_json_text(gguf_file_path(f), SIZE_MAX),
            "size", (json_int_t)gguf_file_size(f),
            "data_offset", (json_int_t)gguf_file_data_offset(f),
            "n_tensors", (json_int_t)gguf_file_tensor_count(f),
            "n_kv", (json_int_t)gguf_file_kv_count(f));
        if (d->files)
            set(&o, "xxh3_128", json_digest(&d->files[i]));
        append(&files, o);
    }
    return files;
}

/* metadata (key -> value) and metadata_types (key -> "type" or "array[type]") of the keys
 * --filter keeps. Keys are valid UTF-8 and unique (the library proves both at open). */
static void add_metadata(json_t **doc, const gguf_file *meta, const inspect_opts *o)
{
    json_t *values = json_object(), *types = json_object();
    for (int64_t i = 0; i < gguf_file_kv_count(meta) && values && types; i++) {
        const gguf_kv *kv = gguf_file_kv_at(meta, i);
        if (!inspect_match(o, kv->key))
            continue;
        const gguf_value *v = &kv->value;
        set(&values, kv->key, json_value(v));
        set(&types, kv->key, v->type == GGUF_VALUE_ARRAY
                                 ? json_sprintf("array[%s]", gguf_value_type_name(v->v.arr.type))
                                 : json_string(gguf_value_type_name(v->type)));
    }
    if (!values || !types) {
        json_decref(values);
        json_decref(types);
        values = types = NULL;
    }
    set(doc, "metadata", values);
    set(doc, "metadata_types", types);
}

static json_t *tensor_json(const gguf_set *s, const gguf_tensor *t, const gguf_digest *digest)
{
    json_t *shape = json_array();
    for (uint32_t k = 0; shape && k < t->n_dims; k++)
        append(&shape, json_integer(t->ne[k]));
    json_t *o = json_pack("{s:o, s:s, s:o, s:I, s:I, s:I}",
        "name", cli_json_text(t->name, SIZE_MAX), "type", gguf_type_name(t->type),
        "shape", shape, "offset", (json_int_t)t->file_offset,
        "nbytes", (json_int_t)t->nbytes, "n_elements", (json_int_t)t->n_elements);
    if (gguf_set_part_count(s) > 1) {
        set(&o, "file", cli_json_text(gguf_file_path(gguf_set_part(s, t->part)), SIZE_MAX));
        set(&o, "part", json_integer(t->part));
    }
    if (digest)
        set(&o, "xxh3_128", json_digest(digest));
    return o;
}

/* tensors (those --filter keeps) and their totals. */
static void add_tensors(json_t **doc, const gguf_set *s, const inspect_opts *o,
                        const inspect_digests *d)
{
    json_t *tensors = json_array();
    uint64_t total_bytes = 0, total_elems = 0;
    int64_t matched = 0;
    for (int64_t i = 0; tensors && i < gguf_set_tensor_count(s); i++) {
        const gguf_tensor *t = gguf_set_tensor_at(s, i);
        if (!inspect_match(o, t->name))
            continue;
        total_bytes += t->nbytes;
        total_elems += (uint64_t)t->n_elements;
        matched++;
        append(&tensors, tensor_json(s, t, d->tensors ? &d->tensors[i] : NULL));
    }
    set(doc, "tensors", tensors);
    /* sums over a set's files: beyond one file's range in principle */
    set(doc, "totals", json_pack("{s:I, s:o, s:o, s:o}", "n_tensors", (json_int_t)matched,
        "nbytes", cli_json_u64(total_bytes), "n_elements", cli_json_u64(total_elems),
        "bits_per_weight",
        cli_json_number(total_elems ? 8.0 * (double)total_bytes / (double)total_elems : 0)));
}

int inspect_print_json(FILE *out, const gguf_set *s, const inspect_opts *o,
                       const inspect_digests *d)
{
    const gguf_file *meta = gguf_set_meta(s);
    json_t *doc = json_pack("{s:I, s:I, s:I, s:o}", "gguf_version",
        (json_int_t)gguf_file_version(meta), "alignment", (json_int_t)gguf_file_alignment(meta),
        "data_offset", (json_int_t)gguf_file_data_offset(meta), "files", files_json(s, d));
    if (!o->tensors_only)
        add_metadata(&doc, meta, o);
    if (!o->metadata_only)
        add_tensors(&doc, s, o, d);
    if (d->tensors)
        set(&doc, "model_digest", json_digest(&d->model));
    return cli_json_print_report(out, "gguf-inspect", doc);
}
