/*
 * libFuzzer target for safetensors: open the input from memory, then for every
 * tensor resolve it as a weight (scales found by name beside it) and
 * dequantize its first and last rows, which walks the plain conversions and
 * the FP8 / NVFP4 formulas over whatever shapes the input declares.
 * Corpus: tests/fuzz/corpus/safetensors (tests/fuzz/make_st_corpus.py),
 * malformed inputs named after their error.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile float sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gguf_st_file *f;
    gguf_error err;
    if (gguf_st_file_open_memory(&f, data, size, "fuzz.safetensors", &err) != 0)
        return 0;
    for (int64_t i = 0; i < gguf_st_file_tensor_count(f); i++) {
        const gguf_st_tensor *t = gguf_st_file_tensor_at(f, i);
        if (gguf_st_file_tensor_find(f, t->name) != t)
            __builtin_trap();
        if (t->data + t->nbytes > data + size)
            __builtin_trap();
        gguf_st_weight w;
        if (gguf_st_weight_find_file(f, t->name, &w, &err) != 0)
            continue;
        if (w.cols > (1 << 16) || w.rows < 1)
            continue;
        float *row = malloc(sizeof(float) * (size_t)(w.cols ? w.cols : 1));
        if (!row)
            continue;
        if (gguf_st_weight_rows(&w, 0, 1, row, &err) == 0 && w.cols)
            sink += row[0];
        if (gguf_st_weight_rows(&w, w.rows - 1, 1, row, &err) == 0 && w.cols)
            sink += row[w.cols - 1];
        free(row);
    }
    for (int64_t i = 0; i < gguf_st_file_meta_count(f); i++) {
        const char *k, *v;
        gguf_st_file_meta_at(f, i, &k, &v);
        sink += (float)strlen(k) + (float)strlen(v);
    }
    gguf_st_file_free(f);
    return 0;
}
