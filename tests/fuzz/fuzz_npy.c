/*
 * libFuzzer target for the .npy reader: open the input from memory (as is, and
 * with '<V2' read as bfloat16), then read the first and last elements as float
 * and, for integer arrays, as int64, which walks the dtype conversions and the
 * Fortran-order transposition over whatever shape the header declares.
 * Corpus: tests/fuzz/corpus/npy (tests/fuzz/make_npy_corpus.py), malformed
 * inputs named after their error.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "gguf/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile float sink;

static void walk(const gguf_npy *a, const uint8_t *data, size_t size)
{
    const gguf_npy_info *in = gguf_npy_get_info(a);
    if (in->data_offset + in->nbytes != size || gguf_npy_data(a) + in->nbytes > data + size)
        __builtin_trap();
    if (in->n_elements == 0)
        return;
    const int64_t n = in->n_elements < 64 ? in->n_elements : 64;
    float f[64];
    int64_t v[64];
    gguf_error err;
    if (gguf_npy_read_f32(a, 0, n, f, &err) || gguf_npy_read_f32(a, in->n_elements - n, n, f, &err))
        __builtin_trap();
    sink += f[0];
    if (!gguf_npy_dtype_is_float(in->dtype) && gguf_npy_read_i64(a, in->n_elements - n, n, v, &err) == 0)
        sink += (float)v[0];
    if (gguf_npy_read_f32(a, in->n_elements, 1, f, &err) == 0)
        __builtin_trap(); /* past the end must fail */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (int k = 0; k < 2; k++) {
        const gguf_npy_opts o = {.v2_as_bf16 = k == 1};
        gguf_npy *a;
        gguf_error err;
        if (gguf_npy_open_memory(&a, data, size, "fuzz.npy", &o, &err) != 0)
            continue;
        walk(a, data, size);
        gguf_npy_free(a);
    }
    return 0;
}
