/* The plan of a model: metadata pairs and tensor descriptions, owned. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen.h"

int gen_fail(gguf_error *err, int code, const char *fmt, ...)
{
    char msg[sizeof err->message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return gguf_error_setf(err, code, 0, "%s", msg);
}

void gen_plan_init(gen_plan *p) { memset(p, 0, sizeof *p); }

static void kv_free(gen_kv *kv)
{
    if (kv->own_strs)
        for (uint64_t i = 0; i < kv->v.v.arr.n; i++)
            free(kv->own_strs[i]);
    free(kv->own_strs);
    free(kv->strs);
    free(kv->own);
    free(kv->key);
    memset(kv, 0, sizeof *kv);
}

void gen_plan_free(gen_plan *p)
{
    if (!p)
        return;
    for (uint32_t i = 0; i < p->n_kv; i++)
        kv_free(&p->kv[i]);
    free(p->kv);
    free(p->t);
    memset(p, 0, sizeof *p);
}

const gen_kv *gen_kv_find(const gen_plan *p, const char *key)
{
    for (uint32_t i = 0; i < p->n_kv; i++)
        if (!strcmp(p->kv[i].key, key))
            return &p->kv[i];
    return NULL;
}

/* The slot for key: the existing one emptied, or a new one at the end. */
static gen_kv *kv_slot(gen_plan *p, const char *key)
{
    for (uint32_t i = 0; i < p->n_kv; i++) {
        if (!strcmp(p->kv[i].key, key)) {
            char *k = p->kv[i].key;
            p->kv[i].key = NULL;
            kv_free(&p->kv[i]);
            p->kv[i].key = k;
            return &p->kv[i];
        }
    }
    if (p->n_kv == p->cap_kv) {
        uint32_t cap = p->cap_kv ? p->cap_kv * 2 : 64;
        gen_kv *n = realloc(p->kv, cap * sizeof *n);
        if (!n) {
            p->err = GGUF_E_NOMEM;
            return NULL;
        }
        p->kv = n;
        p->cap_kv = cap;
    }
    gen_kv *kv = &p->kv[p->n_kv];
    memset(kv, 0, sizeof *kv);
    kv->key = strdup(key);
    if (!kv->key) {
        p->err = GGUF_E_NOMEM;
        return NULL;
    }
    p->n_kv++;
    return kv;
}

#define KV_SCALAR(fn, ctype, vtype, field)                                                         \
    void fn(gen_plan *p, const char *key, ctype v)                                                 \
    {                                                                                              \
        gen_kv *kv = kv_slot(p, key);                                                              \
        if (kv) {                                                                                  \
            kv->v.type = vtype;                                                                    \
            kv->v.v.field = v;                                                                     \
        }                                                                                          \
    }
KV_SCALAR(gen_kv_u32, uint32_t, GGUF_VALUE_UINT32, u32)
KV_SCALAR(gen_kv_i32, int32_t, GGUF_VALUE_INT32, i32)
KV_SCALAR(gen_kv_u16, uint16_t, GGUF_VALUE_UINT16, u16)
KV_SCALAR(gen_kv_f32, float, GGUF_VALUE_FLOAT32, f32)
KV_SCALAR(gen_kv_bool, bool, GGUF_VALUE_BOOL, b)

void gen_kv_str(gen_plan *p, const char *key, const char *v)
{
    gen_kv *kv = kv_slot(p, key);
    if (!kv)
        return;
    kv->own = strdup(v);
    if (!kv->own) {
        p->err = GGUF_E_NOMEM;
        return;
    }
    kv->v.type = GGUF_VALUE_STRING;
    kv->v.v.str.data = kv->own;
    kv->v.v.str.len = strlen(v);
}

void gen_kv_arr(gen_plan *p, const char *key, uint32_t etype, const void *items, uint64_t n)
{
    gen_kv *kv = kv_slot(p, key);
    if (!kv)
        return;
    size_t sz = gguf_value_type_size(etype) * (size_t)n;
    kv->own = malloc(sz ? sz : 1);
    if (!kv->own) {
        p->err = GGUF_E_NOMEM;
        return;
    }
    memcpy(kv->own, items, sz);
    kv->v.type = GGUF_VALUE_ARRAY;
    kv->v.v.arr.type = etype;
    kv->v.v.arr.n = n;
    kv->v.v.arr.raw = kv->own;
}

void gen_kv_arr_str(gen_plan *p, const char *key, char **items, uint64_t n)
{
    gen_kv *kv = kv_slot(p, key);
    if (!kv) {
        for (uint64_t i = 0; i < n; i++)
            free(items[i]);
        free(items);
        return;
    }
    kv->own_strs = items;
    kv->v.type = GGUF_VALUE_ARRAY;
    kv->v.v.arr.type = GGUF_VALUE_STRING;
    kv->v.v.arr.n = n;
    kv->strs = calloc(n ? n : 1, sizeof *kv->strs);
    if (!kv->strs) {
        p->err = GGUF_E_NOMEM;
        return;
    }
    for (uint64_t i = 0; i < n; i++) {
        kv->strs[i].data = items[i];
        kv->strs[i].len = strlen(items[i]);
    }
    kv->v.v.arr.strs = kv->strs;
}

static void arch_key(char *out, size_t size, const char *arch, const char *fmt)
{
    const char *s = strstr(fmt, "%s");
    if (!s) {
        snprintf(out, size, "%s", fmt);
        return;
    }
    snprintf(out, size, "%.*s%s%s", (int)(s - fmt), fmt, arch, s + 2);
}

void gen_kv_u32a(gen_plan *p, const char *arch, const char *fmt, uint32_t v)
{
    char k[256];
    arch_key(k, sizeof k, arch, fmt);
    gen_kv_u32(p, k, v);
}

void gen_kv_f32a(gen_plan *p, const char *arch, const char *fmt, float v)
{
    char k[256];
    arch_key(k, sizeof k, arch, fmt);
    gen_kv_f32(p, k, v);
}

void gen_kv_boola(gen_plan *p, const char *arch, const char *fmt, bool v)
{
    char k[256];
    arch_key(k, sizeof k, arch, fmt);
    gen_kv_bool(p, k, v);
}

void gen_kv_stra(gen_plan *p, const char *arch, const char *fmt, const char *v)
{
    char k[256];
    arch_key(k, sizeof k, arch, fmt);
    gen_kv_str(p, k, v);
}

gen_tensor *gen_tensor_add(gen_plan *p, uint8_t init, bool weight, uint32_t n_dims,
                           const int64_t *ne, const char *fmt, ...)
{
    if (p->n_t == p->cap_t) {
        uint32_t cap = p->cap_t ? p->cap_t * 2 : 256;
        gen_tensor *n = realloc(p->t, cap * sizeof *n);
        if (!n) {
            p->err = GGUF_E_NOMEM;
            return NULL;
        }
        p->t = n;
        p->cap_t = cap;
    }
    gen_tensor *t = &p->t[p->n_t++];
    memset(t, 0, sizeof *t);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->type = GGUF_TYPE_F32;
    t->n_dims = n_dims;
    for (uint32_t i = 0; i < GGUF_MAX_DIMS; i++)
        t->ne[i] = i < n_dims ? ne[i] : 1;
    t->init = init;
    t->weight = weight;
    t->scale = init == GEN_INIT_NORM ? 0.1f : init == GEN_INIT_BIAS ? 0.02f : 0.06f;
    return t;
}
