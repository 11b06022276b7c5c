/* Typed access to metadata values: conversions and array elements. */
#include "util/error_lib.h"
#include "format/file_internal.h"

#include <string.h>

int gguf_value_to_u64(const gguf_value *v, uint64_t *out)
{
    switch (v->type) {
    case GGUF_VALUE_UINT8: *out = v->v.u8; return GGUF_OK;
    case GGUF_VALUE_UINT16: *out = v->v.u16; return GGUF_OK;
    case GGUF_VALUE_UINT32: *out = v->v.u32; return GGUF_OK;
    case GGUF_VALUE_UINT64: *out = v->v.u64; return GGUF_OK;
    case GGUF_VALUE_INT8:
    case GGUF_VALUE_INT16:
    case GGUF_VALUE_INT32:
    case GGUF_VALUE_INT64: {
        int64_t s = 0;
        gguf_value_to_i64(v, &s);
        if (s < 0)
            return GGUF_E_BAD_VALUE;
        *out = (uint64_t)s;
        return GGUF_OK;
    }
    default: return GGUF_E_WRONG_TYPE;
    }
}

int gguf_value_to_i64(const gguf_value *v, int64_t *out)
{
    switch (v->type) {
    case GGUF_VALUE_INT8: *out = v->v.i8; return GGUF_OK;
    case GGUF_VALUE_INT16: *out = v->v.i16; return GGUF_OK;
    case GGUF_VALUE_INT32: *out = v->v.i32; return GGUF_OK;
    case GGUF_VALUE_INT64: *out = v->v.i64; return GGUF_OK;
    case GGUF_VALUE_UINT8: *out = v->v.u8; return GGUF_OK;
    case GGUF_VALUE_UINT16: *out = v->v.u16; return GGUF_OK;
    case GGUF_VALUE_UINT32: *out = v->v.u32; return GGUF_OK;
    case GGUF_VALUE_UINT64:
        if (v->v.u64 > (uint64_t)INT64_MAX)
            return GGUF_E_BAD_VALUE;
        *out = (int64_t)v->v.u64;
        return GGUF_OK;
    default: return GGUF_E_WRONG_TYPE;
    }
}

int gguf_value_to_f64(const gguf_value *v, double *out)
{
    if (v->type == GGUF_VALUE_FLOAT32) {
        *out = v->v.f32;
        return GGUF_OK;
    }
    if (v->type == GGUF_VALUE_FLOAT64) {
        *out = v->v.f64;
        return GGUF_OK;
    }
    int64_t i;
    if (gguf_value_to_i64(v, &i) == GGUF_OK) {
        *out = (double)i;
        return GGUF_OK;
    }
    uint64_t u;
    if (gguf_value_to_u64(v, &u) == GGUF_OK) {
        *out = (double)u;
        return GGUF_OK;
    }
    return GGUF_E_WRONG_TYPE;
}

gguf_value gguf_value_elem(const gguf_value *arr, uint64_t i)
{
    gguf_value e;
    memset(&e, 0, sizeof e);
    if (arr->type != GGUF_VALUE_ARRAY || i >= arr->v.arr.n)
        return e;
    uint32_t t = arr->v.arr.type;
    if (t == GGUF_VALUE_STRING) {
        e.type = t;
        e.v.str = arr->v.arr.strs[i];
    } else if (t == GGUF_VALUE_ARRAY) {
        e = arr->v.arr.vals[i];
    } else {
        uint32_t sz = gguf_value_type_size(t);
        e.type = t;
        memcpy(&e.v, (const uint8_t *)arr->v.arr.raw + i * sz, sz);
        if (t == GGUF_VALUE_BOOL)
            e.v.b = e.v.u8 != 0;
    }
    return e;
}

bool gguf_str_eq(gguf_str s, const char *cstr)
{
    size_t n = strlen(cstr);
    return s.len == n && memcmp(s.data, cstr, n) == 0;
}

static int lookup(const gguf_file *f, const char *key, const gguf_value **v, gguf_error *err)
{
    const gguf_kv *kv = gguf_file_kv_find(f, key);
    if (!kv)
        return gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET, "%s: metadata key '%s' is missing",
                         f->path, key);
    *v = &kv->value;
    return GGUF_OK;
}

static int convert_fail(const gguf_file *f, const char *key, const gguf_value *v, int rc,
                        const char *want, gguf_error *err)
{
    const gguf_kv *kv = gguf_file_kv_find(f, key);
    if (rc == GGUF_E_WRONG_TYPE)
        return gguf_fail(err, rc, kv->offset, "%s: metadata '%s': has type %s, expected %s",
                         f->path, key, gguf_value_type_name(v->type), want);
    return gguf_fail(err, rc, kv->offset, "%s: metadata '%s': value out of range for %s",
                     f->path, key, want);
}

int gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out, gguf_error *err)
{
    const gguf_value *v = NULL;
    int rc = lookup(f, key, &v, err);
    if (!rc && (rc = gguf_value_to_u64(v, out)))
        return convert_fail(f, key, v, rc, "an unsigned integer", err);
    return rc;
}

int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out, gguf_error *err)
{
    const gguf_value *v = NULL;
    int rc = lookup(f, key, &v, err);
    if (!rc && (rc = gguf_value_to_i64(v, out)))
        return convert_fail(f, key, v, rc, "an integer", err);
    return rc;
}

int gguf_get_f64(const gguf_file *f, const char *key, double *out, gguf_error *err)
{
    const gguf_value *v = NULL;
    int rc = lookup(f, key, &v, err);
    if (!rc && (rc = gguf_value_to_f64(v, out)))
        return convert_fail(f, key, v, rc, "a number", err);
    return rc;
}

int gguf_get_bool(const gguf_file *f, const char *key, bool *out, gguf_error *err)
{
    const gguf_value *v = NULL;
    int rc = lookup(f, key, &v, err);
    if (rc)
        return rc;
    if (v->type != GGUF_VALUE_BOOL)
        return convert_fail(f, key, v, GGUF_E_WRONG_TYPE, "bool", err);
    *out = v->v.b;
    return GGUF_OK;
}

int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, gguf_error *err)
{
    const gguf_value *v = NULL;
    int rc = lookup(f, key, &v, err);
    if (rc)
        return rc;
    if (v->type != GGUF_VALUE_STRING)
        return convert_fail(f, key, v, GGUF_E_WRONG_TYPE, "string", err);
    *out = v->v.str;
    return GGUF_OK;
}

int gguf_get_arr(const gguf_file *f, const char *key, const gguf_value **out, gguf_error *err)
{
    const gguf_value *v = NULL;
    int rc = lookup(f, key, &v, err);
    if (rc)
        return rc;
    if (v->type != GGUF_VALUE_ARRAY)
        return convert_fail(f, key, v, GGUF_E_WRONG_TYPE, "array", err);
    *out = v;
    return GGUF_OK;
}
