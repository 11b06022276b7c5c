/*
 * libFuzzer target for the GGUF parser: open the input from memory, then walk
 * everything an accessor can reach (every value, every array element, every
 * tensor's first and last byte). Any crash, hang, leak or sanitizer report is a bug.
 */
#include <stddef.h>
#include <stdint.h>

#include "gguf/file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

static void walk_value(const gguf_value *v)
{
    if (v->type == GGUF_VALUE_STRING) {
        if (v->v.str.len)
            sink += (uint8_t)v->v.str.data[v->v.str.len - 1];
        return;
    }
    if (v->type != GGUF_VALUE_ARRAY)
        return;
    for (uint64_t i = 0; i < v->v.arr.n; i++) {
        gguf_value e = gguf_value_elem(v, i);
        walk_value(&e);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gguf_file *f;
    gguf_error err;
    if (gguf_file_open_memory(&f, data, size, "fuzz.gguf", NULL, &err) != 0)
        return 0;
    for (int64_t i = 0; i < gguf_file_kv_count(f); i++) {
        const gguf_kv *kv = gguf_file_kv_at(f, i);
        walk_value(&kv->value);
        uint64_t u;
        double d;
        gguf_get_u64(f, kv->key, &u, NULL);
        gguf_get_f64(f, kv->key, &d, NULL);
    }
    for (int64_t i = 0; i < gguf_file_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_file_tensor_at(f, i);
        if (gguf_file_tensor_find(f, t->name) != t)
            __builtin_trap();
        if (t->nbytes)
            sink += t->data[0] + t->data[t->nbytes - 1];
    }
    gguf_file_free(f);
    return 0;
}
