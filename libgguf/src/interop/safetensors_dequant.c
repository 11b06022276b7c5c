/*
 * Safetensors weights to float32: plain dtypes element by element, and the
 * scaled formats (block-scaled FP8, NVFP4) by rows. The formulas and their
 * order of operations are fixed in gguf/safetensors.h; the CUDA kernels
 * (cuda/src/cuda_st_dequant.cu) evaluate the same ones.
 *
 * NVFP4, one row of C elements (C/2 bytes, C/16 group scales):
 *
 *   byte j:   [ hi nibble | lo nibble ]  ->  element 2j = e2m1(lo), 2j+1 = e2m1(hi)
 *   nibble:   S E E M  (E2M1: 0 0.5 1 1.5 2 3 4 6, sign in bit 3)
 *   group g:  elements 16g..16g+15, scale byte W_scale[r][g] (E4M3FN)
 *
 * A NaN result of a scaled product is always 0x7FC00000: x86 and the GPU
 * disagree on which NaN a product of NaNs gives, and the two must agree.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error_lib.h"
#include "gguf/dequant.h"
#include "interop/safetensors_internal.h"

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float gguf_fp8_e4m3_to_fp32(uint8_t x)
{
    const uint32_t sign = (uint32_t)(x >> 7) << 31;
    const uint32_t e = (x >> 3) & 15, m = x & 7;
    if (e == 15 && m == 7)
        return from_bits(sign | 0x7FC00000u);
    if (e == 0) { /* subnormal: m/8 * 2^-6, exact */
        const float v = (float)m * 0x1p-9f;
        return sign ? -v : v;
    }
    return from_bits(sign | (e - 7 + 127) << 23 | m << 20);
}

float gguf_fp8_e5m2_to_fp32(uint8_t x)
{
    return gguf_fp16_to_fp32((uint16_t)(x << 8));
}

float gguf_fp4_e2m1_to_fp32(uint8_t nibble)
{
    /* from the magnitude and the sign bit: nibble 8 is -0 (the shared table's int8
     * doubled values cannot say so) */
    const float m = (float)gguf_fp4_e2m1_x2[nibble & 7] * 0.5f;
    return nibble & 8 ? -m : m;
}

static float e8m0_to_fp32(uint8_t e)
{
    if (e == 0xFF)
        return from_bits(0x7FC00000u);
    return e == 0 ? from_bits(0x00400000u) : from_bits((uint32_t)e << 23);
}

/* Element i of a plain tensor as float. */
static float elem(const gguf_st_tensor *t, int64_t i)
{
    const uint8_t *p = t->data + (uint64_t)i * gguf_st_dtype_size(t->dtype);
    switch (t->dtype) {
    case GGUF_ST_BOOL: return p[0] ? 1.0f : 0.0f;
    case GGUF_ST_U8: return (float)p[0];
    case GGUF_ST_I8: return (float)(int8_t)p[0];
    case GGUF_ST_I16: { int16_t v; memcpy(&v, p, 2); return (float)v; }
    case GGUF_ST_U16: { uint16_t v; memcpy(&v, p, 2); return (float)v; }
    case GGUF_ST_I32: { int32_t v; memcpy(&v, p, 4); return (float)v; }
    case GGUF_ST_U32: { uint32_t v; memcpy(&v, p, 4); return (float)v; }
    case GGUF_ST_I64: { int64_t v; memcpy(&v, p, 8); return (float)v; }
    case GGUF_ST_U64: { uint64_t v; memcpy(&v, p, 8); return (float)v; }
    case GGUF_ST_F16: { uint16_t v; memcpy(&v, p, 2); return gguf_fp16_to_fp32(v); }
    case GGUF_ST_BF16: { uint16_t v; memcpy(&v, p, 2); return gguf_bf16_to_fp32(v); }
    case GGUF_ST_F32: { float v; memcpy(&v, p, 4); return v; }
    case GGUF_ST_F64: { double v; memcpy(&v, p, 8); return (float)v; }
    case GGUF_ST_F8_E4M3: return gguf_fp8_e4m3_to_fp32(p[0]);
    case GGUF_ST_F8_E5M2: return gguf_fp8_e5m2_to_fp32(p[0]);
    case GGUF_ST_F8_E8M0: return e8m0_to_fp32(p[0]);
    default: return 0.0f;
    }
}

static void plain_run(const gguf_st_tensor *t, int64_t i0, int64_t n, float *dst)
{
    if (t->dtype == GGUF_ST_F32) {
        memcpy(dst, t->data + (uint64_t)i0 * 4, (size_t)n * 4);
        return;
    }
    if (t->dtype == GGUF_ST_BF16) {
        const uint8_t *p = t->data + (uint64_t)i0 * 2;
        for (int64_t i = 0; i < n; i++) {
            const uint32_t u = (uint32_t)(p[2 * i] | p[2 * i + 1] << 8) << 16;
            memcpy(&dst[i], &u, 4);
        }
        return;
    }
    for (int64_t i = 0; i < n; i++)
        dst[i] = elem(t, i0 + i);
}

int gguf_st_tensor_to_f32(const gguf_st_tensor *t, int64_t i0, int64_t n, float *dst,
                          gguf_error *err)
{
    if (!t || (!dst && n) || i0 < 0 || n < 0 || i0 > t->n_elements || n > t->n_elements - i0)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "%s: elements [%lld, +%lld) outside the tensor", t ? t->name : "NULL",
                         (long long)i0, (long long)n);
    plain_run(t, i0, n, dst);
    return 0;
}

/* ---- weights ---- */

static const char *format_names[GGUF_ST_FMT_COUNT] = {"plain", "fp8-scaled", "nvfp4",
                                                      "nvfp4-ct"};

const char *gguf_st_format_name(gguf_st_format f)
{
    return (unsigned)f < GGUF_ST_FMT_COUNT ? format_names[f] : "unknown";
}

typedef const gguf_st_tensor *(*find_fn)(const void *ctx, const char *name);

static const gguf_st_tensor *find_in_set(const void *ctx, const char *name)
{
    return gguf_st_set_tensor_find(ctx, name);
}

static const gguf_st_tensor *find_in_file(const void *ctx, const char *name)
{
    return gguf_st_file_tensor_find(ctx, name);
}

static const gguf_st_tensor *find_suffix(find_fn find, const void *ctx, const char *name,
                                         const char *suffix)
{
    char buf[1024];
    if ((size_t)snprintf(buf, sizeof buf, "%s%s", name, suffix) >= sizeof buf)
        return NULL;
    return find(ctx, buf);
}

static bool is_float_scale(gguf_st_dtype d)
{
    return d == GGUF_ST_F32 || d == GGUF_ST_BF16 || d == GGUF_ST_F16;
}

static void shape_str(char *out, size_t size, const int64_t *shape, int n)
{
    int k = snprintf(out, size, "[");
    for (int i = 0; i < n && (size_t)k < size; i++)
        k += snprintf(out + k, size - (size_t)k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if ((size_t)k < size)
        snprintf(out + k, size - (size_t)k, "]");
}

/* The matrix view of a logical shape. */
static void set_view(gguf_st_weight *w)
{
    const int n = w->n_dims;
    w->cols = n ? w->shape[n - 1] : 1;
    w->n_elements = 1;
    for (int d = 0; d < n; d++)
        w->n_elements *= w->shape[d];
    w->rows = w->cols ? w->n_elements / w->cols : 0;
    if (!w->cols) {
        w->rows = 1;
        for (int d = 0; d + 1 < n; d++)
            w->rows *= w->shape[d];
    }
    w->mat_rows = n >= 2 ? w->shape[n - 2] : 1;
}

static int64_t ceil_div(int64_t a, int64_t b)
{
    return b ? (a + b - 1) / b : 0;
}

static int fp8_scaled(gguf_st_weight *w, const gguf_st_tensor *sc, const gguf_st_quant *q,
                      const char *path, gguf_error *err)
{
    char want[96], have[96];
    w->format = GGUF_ST_FMT_FP8_SCALED;
    w->scale = sc;
    if (!is_float_scale(sc->dtype))
        return gguf_fail(err, GGUF_E_BAD_TYPE, sc->file_offset,
                         "%s: %s: dtype %s, expected F32, BF16 or F16 for a scale", path,
                         sc->name, gguf_st_dtype_name(sc->dtype));
    const int64_t R = w->mat_rows, C = w->cols;
    if (sc->n_elements == 1) { /* per tensor */
        w->scale_rows = w->scale_cols = 1;
        w->block_rows = R > 0 ? R : 1;
        w->block_cols = C > 0 ? C : 1;
        /* a stack of matrices with one scale each is [E, 1, 1]; one scale for all is [] */
        return 0;
    }
    int64_t sr, scn, batch = 1;
    if (sc->n_dims == 1 && w->n_dims == 2 && sc->shape[0] == R) { /* per channel as [R] */
        sr = R;
        scn = 1;
    } else if (sc->n_dims == w->n_dims && w->n_dims >= 2) {
        for (int d = 0; d + 2 < w->n_dims; d++) {
            if (sc->shape[d] != w->shape[d])
                goto bad;
            batch *= w->shape[d];
        }
        sr = sc->shape[sc->n_dims - 2];
        scn = sc->shape[sc->n_dims - 1];
    } else {
        goto bad;
    }
    (void)batch;
    if (sr < 1 || scn < 1)
        goto bad;
    /* the block: configured; else DeepSeek's 128 x 128 where the grid fits it; else the
     * smallest block the grid implies (a per-channel [R, 1] scale gives 1 x C) */
    if (q && q->block[0] > 0 && q->block[1] > 0 && !(scn == 1 && sr == R)) {
        w->block_rows = q->block[0];
        w->block_cols = q->block[1];
    } else if (ceil_div(R, 128) == sr && ceil_div(C, 128) == scn && !(scn == 1 && sr == R)) {
        w->block_rows = w->block_cols = 128;
    } else {
        w->block_rows = ceil_div(R, sr);
        w->block_cols = ceil_div(C, scn);
    }
    if (w->block_rows < 1)
        w->block_rows = 1;
    if (w->block_cols < 1)
        w->block_cols = 1;
    if (ceil_div(R, w->block_rows) != sr || ceil_div(C, w->block_cols) != scn)
        goto bad;
    w->scale_rows = sr;
    w->scale_cols = scn;
    return 0;
bad:
    shape_str(have, sizeof have, sc->shape, sc->n_dims);
    shape_str(want, sizeof want, w->shape, w->n_dims);
    return gguf_fail(err, GGUF_E_BAD_SHAPE, sc->file_offset,
                     "%s: %s: shape %s does not cover weight %s %s%s", path, sc->name, have,
                     w->name, want,
                     q && q->block[0] > 0 ? " in blocks of the configured weight_block_size"
                                          : "");
}

static int nvfp4(gguf_st_weight *w, const gguf_st_tensor *packed, const gguf_st_tensor *sc,
                 const gguf_st_tensor *s2, bool ct, const char *path, gguf_error *err)
{
    char want[96], have[96];
    w->format = ct ? GGUF_ST_FMT_NVFP4_CT : GGUF_ST_FMT_NVFP4;
    w->data = packed;
    w->scale = sc;
    w->scale2 = s2;
    if (packed->dtype != GGUF_ST_U8 || packed->n_dims < 1)
        return gguf_fail(err, GGUF_E_BAD_TYPE, packed->file_offset,
                         "%s: %s: dtype %s with %d dims, expected U8 packed E2M1 nibbles", path,
                         packed->name, gguf_st_dtype_name(packed->dtype), packed->n_dims);
    if (sc->dtype != GGUF_ST_F8_E4M3)
        return gguf_fail(err, GGUF_E_BAD_TYPE, sc->file_offset,
                         "%s: %s: dtype %s, expected F8_E4M3 group scales", path, sc->name,
                         gguf_st_dtype_name(sc->dtype));
    if (!is_float_scale(s2->dtype) || s2->n_elements != 1)
        return gguf_fail(err, GGUF_E_BAD_TYPE, s2->file_offset,
                         "%s: %s: dtype %s with %lld elements, expected one F32 scale", path,
                         s2->name, gguf_st_dtype_name(s2->dtype), (long long)s2->n_elements);
    w->n_dims = packed->n_dims;
    memcpy(w->shape, packed->shape, sizeof w->shape);
    if (w->shape[w->n_dims - 1] > INT64_MAX / 2)
        return gguf_fail(err, GGUF_E_OVERFLOW, packed->file_offset, "%s: %s: too wide", path,
                         packed->name);
    w->shape[w->n_dims - 1] *= 2;
    set_view(w);
    bool ok = sc->n_dims == w->n_dims && w->cols % 16 == 0;
    for (int d = 0; ok && d + 1 < w->n_dims; d++)
        ok = sc->shape[d] == w->shape[d];
    if (ok)
        ok = sc->shape[w->n_dims - 1] == w->cols / 16;
    if (!ok) {
        shape_str(have, sizeof have, sc->shape, sc->n_dims);
        shape_str(want, sizeof want, w->shape, w->n_dims);
        return gguf_fail(err, GGUF_E_BAD_SHAPE, sc->file_offset,
                         "%s: %s: shape %s, expected one E4M3 scale per 16 elements of %s "
                         "(logical shape %s: packed width x 2)", path, sc->name, have,
                         packed->name, want);
    }
    w->block_rows = 1;
    w->block_cols = 16;
    w->scale_rows = w->mat_rows;
    w->scale_cols = w->cols / 16;
    plain_run(s2, 0, 1, &w->global);
    return 0;
}

static int weight_find(find_fn find, const void *ctx, const gguf_st_quant *q, const char *path,
                       const char *name, gguf_st_weight *w, gguf_error *err)
{
    gguf_error_clear(err);
    memset(w, 0, sizeof *w);
    if (!name)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_st_weight_find: NULL");
    w->name = name;
    const gguf_st_scheme scheme = q ? q->scheme : GGUF_ST_SCHEME_NONE;
    const gguf_st_tensor *t = find(ctx, name);
    if (!t) {
        const gguf_st_tensor *p = find_suffix(find, ctx, name, "_packed");
        if (!p)
            return gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET, "%s: %s: no such tensor",
                             path, name);
        const gguf_st_tensor *sc = find_suffix(find, ctx, name, "_scale"),
                             *gs = find_suffix(find, ctx, name, "_global_scale");
        if (!sc || !gs)
            return gguf_fail(err, GGUF_E_NOT_FOUND, p->file_offset,
                             "%s: %s_packed: no %s%s beside it", path, name, name,
                             !sc ? "_scale" : "_global_scale");
        return nvfp4(w, p, sc, gs, true, path, err);
    }
    w->data = t;
    w->n_dims = t->n_dims;
    memcpy(w->shape, t->shape, sizeof w->shape);
    set_view(w);
    if (t->dtype == GGUF_ST_F8_E4M3 || t->dtype == GGUF_ST_F8_E5M2) {
        const gguf_st_tensor *sc = find_suffix(find, ctx, name, "_scale_inv");
        if (!sc)
            sc = find_suffix(find, ctx, name, "_scale");
        if (sc)
            return fp8_scaled(w, sc, q, path, err);
        if (scheme == GGUF_ST_SCHEME_FP8_BLOCK || scheme == GGUF_ST_SCHEME_FP8 ||
            scheme == GGUF_ST_SCHEME_CT_FP8)
            return gguf_fail(err, GGUF_E_NOT_FOUND, t->file_offset,
                             "%s: %s: an %s weight of a %s checkpoint without %s_scale_inv or "
                             "%s_scale", path, name, gguf_st_dtype_name(t->dtype),
                             gguf_st_scheme_name(scheme), name, name);
        return 0;
    }
    if (t->dtype == GGUF_ST_U8) {
        const gguf_st_tensor *sc = find_suffix(find, ctx, name, "_scale"),
                             *s2 = find_suffix(find, ctx, name, "_scale_2");
        if (sc && sc->dtype == GGUF_ST_F8_E4M3) {
            if (!s2)
                return gguf_fail(err, GGUF_E_NOT_FOUND, sc->file_offset,
                                 "%s: %s: NVFP4 group scales without %s_scale_2", path, name,
                                 name);
            return nvfp4(w, t, sc, s2, false, path, err);
        }
        if (scheme == GGUF_ST_SCHEME_NVFP4 && s2)
            return gguf_fail(err, GGUF_E_NOT_FOUND, t->file_offset,
                             "%s: %s: an NVFP4 weight without F8_E4M3 %s_scale", path, name,
                             name);
    }
    return 0;
}

int gguf_st_weight_find(const gguf_st_set *s, const char *name, gguf_st_weight *out,
                        gguf_error *err)
{
    if (!s || !out)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_st_weight_find: NULL");
    return weight_find(find_in_set, s, gguf_st_set_quant(s), gguf_st_set_path(s), name, out,
                       err);
}

int gguf_st_weight_find_file(const gguf_st_file *f, const char *name, gguf_st_weight *out,
                             gguf_error *err)
{
    if (!f || !out)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_st_weight_find: NULL");
    return weight_find(find_in_file, f, NULL, gguf_st_file_path(f), name, out, err);
}

static bool ends_with(const char *s, const char *suffix, size_t *stem)
{
    const size_t n = strlen(s), m = strlen(suffix);
    if (n <= m || strcmp(s + n - m, suffix))
        return false;
    *stem = n - m;
    return true;
}

bool gguf_st_is_companion(const gguf_st_set *s, const char *name)
{
    static const char *const suffixes[] = {"_scale_inv", "_scale_2", "_global_scale", "_scale",
                                           "_packed"};
    size_t stem;
    if (ends_with(name, "input_scale", &stem) || ends_with(name, "input_global_scale", &stem))
        return true;
    for (size_t k = 0; k < sizeof suffixes / sizeof *suffixes; k++) {
        if (!ends_with(name, suffixes[k], &stem) || stem >= 1024)
            continue;
        char base[1024];
        memcpy(base, name, stem);
        base[stem] = 0;
        if (gguf_st_set_tensor_find(s, base) ||
            (strcmp(suffixes[k], "_packed") && find_suffix(find_in_set, s, base, "_packed")))
            return true;
    }
    return false;
}

/* ---- rows ---- */

static float canon(float v)
{
    return v != v ? from_bits(0x7FC00000u) : v;
}

static int fp8_rows(const gguf_st_weight *w, int64_t row0, int64_t n, float *dst,
                    gguf_error *err)
{
    const gguf_st_tensor *t = w->data;
    float lut[256];
    for (int i = 0; i < 256; i++)
        lut[i] = t->dtype == GGUF_ST_F8_E4M3 ? gguf_fp8_e4m3_to_fp32((uint8_t)i)
                                             : gguf_fp8_e5m2_to_fp32((uint8_t)i);
    const int64_t C = w->cols;
    /* one row of scales at a time (scale_cols <= C) */
    float *sr = malloc(sizeof(float) * (size_t)(w->scale_cols > 0 ? w->scale_cols : 1));
    if (!sr)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "%s: out of memory", w->name);
    for (int64_t i = 0; i < n; i++) {
        const int64_t r = row0 + i;
        const uint8_t *src = t->data + (uint64_t)r * (uint64_t)C;
        float *out = dst + i * C;
        int64_t si = 0; /* first scale of this row's block row */
        if (w->scale->n_elements > 1) {
            const int64_t b = r / w->mat_rows, rr = r % w->mat_rows;
            si = (b * w->scale_rows + rr / w->block_rows) * w->scale_cols;
            plain_run(w->scale, si, w->scale_cols, sr);
        } else {
            plain_run(w->scale, 0, 1, sr);
        }
        /* block by block: one scale each, no division per element */
        for (int64_t c0 = 0, b = 0; c0 < C; c0 += w->block_cols, b++) {
            const int64_t c1 = C - c0 < w->block_cols ? C : c0 + w->block_cols;
            const float s = sr[b];
            for (int64_t c = c0; c < c1; c++)
                out[c] = canon(lut[src[c]] * s);
        }
    }
    free(sr);
    return 0;
}

static void nvfp4_rows(const gguf_st_weight *w, int64_t row0, int64_t n, float *dst)
{
    float e2m1[16], f8[256];
    for (int i = 0; i < 16; i++)
        e2m1[i] = gguf_fp4_e2m1_to_fp32((uint8_t)i);
    for (int i = 0; i < 256; i++)
        f8[i] = gguf_fp8_e4m3_to_fp32((uint8_t)i);
    const int64_t C = w->cols, G = C / 16;
    const bool ct = w->format == GGUF_ST_FMT_NVFP4_CT;
    for (int64_t i = 0; i < n; i++) {
        const int64_t r = row0 + i;
        const uint8_t *q = w->data->data + (uint64_t)r * (uint64_t)(C / 2);
        const uint8_t *sc = w->scale->data + (uint64_t)r * (uint64_t)G;
        float *out = dst + i * C;
        for (int64_t g = 0; g < G; g++) {
            const float b = ct ? f8[sc[g]] / w->global : f8[sc[g]] * w->global;
            for (int j = 0; j < 8; j++) {
                const uint8_t byte = q[g * 8 + j];
                out[g * 16 + 2 * j] = canon(e2m1[byte & 15] * b);
                out[g * 16 + 2 * j + 1] = canon(e2m1[byte >> 4] * b);
            }
        }
    }
}

int gguf_st_weight_rows(const gguf_st_weight *w, int64_t row0, int64_t n_rows, float *dst,
                        gguf_error *err)
{
    if (!w || !w->data || (!dst && n_rows) || row0 < 0 || n_rows < 0 || row0 > w->rows ||
        n_rows > w->rows - row0)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "%s: rows [%lld, +%lld) outside the %lld rows",
                         w && w->name ? w->name : "NULL", (long long)row0, (long long)n_rows,
                         w ? (long long)w->rows : 0LL);
    switch (w->format) {
    case GGUF_ST_FMT_FP8_SCALED: return fp8_rows(w, row0, n_rows, dst, err);
    case GGUF_ST_FMT_NVFP4:
    case GGUF_ST_FMT_NVFP4_CT: nvfp4_rows(w, row0, n_rows, dst); break;
    default: plain_run(w->data, row0 * w->cols, n_rows * w->cols, dst); break;
    }
    return 0;
}

int gguf_st_weight_dequant(const gguf_st_weight *w, float *dst, uint64_t n, gguf_error *err)
{
    if (!w || n < (uint64_t)w->n_elements)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "%s: room for %llu floats, the weight has %lld",
                         w && w->name ? w->name : "NULL", (unsigned long long)n,
                         w ? (long long)w->n_elements : 0LL);
    return gguf_st_weight_rows(w, 0, w->rows, dst, err);
}
