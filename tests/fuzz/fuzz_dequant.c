/*
 * libFuzzer target for dequantization: the first byte picks a type id (valid,
 * removed or unknown), the rest is block data. Every CPU path must give the
 * reference's bits (trap otherwise), a slice of the same bytes seen as a
 * matrix must equal the matching rows of the whole, and invalid ids or sizes
 * must fail cleanly. Corpus: tests/fuzz/corpus/dequant (one seed per type).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/dequant.h"
#include "gguf/types.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const uint32_t type = data[0] % 48; /* ids past GGUF_TYPE_COUNT test the errors */
    const uint8_t *src = data + 1;
    const size_t bytes = size - 1;
    const gguf_type_info *ti = gguf_type_get(type);
    if (!ti || !ti->valid) {
        float y[1];
        if (gguf_dequant_row(type, src, y, 0, NULL) != GGUF_E_BAD_TYPE)
            __builtin_trap();
        return 0;
    }
    const int64_t nb = (int64_t)(bytes / ti->type_size);
    const int64_t n = nb * ti->block_size;
    if (n == 0)
        return 0;
    float *ref = malloc(sizeof(float) * (size_t)n), *got = malloc(sizeof(float) * (size_t)n);
    if (!ref || !got)
        abort();
    if (gguf_dequant_scalar_row(type, src, ref, n, NULL) != 0)
        __builtin_trap();
    for (int p = GGUF_DEQUANT_AUTO; p < GGUF_DEQUANT_PATH_COUNT; p++) {
        if (!gguf_dequant_path_available(p))
            continue;
        if (gguf_dequant_row_path(p, type, src, got, n, NULL) != 0 ||
            memcmp(ref, got, sizeof(float) * (size_t)n) != 0)
            __builtin_trap();
    }
    /* the same bytes as rows of one block: rows [nb/3, nb/3 + nb/2), all threads */
    const int64_t r0 = nb / 3, nr = nb / 2;
    gguf_dequant_opts o = {.n_threads = 3};
    if (gguf_dequant_slice(type, src, ti->block_size, nb, r0, nr, 0, ti->block_size, got, &o,
                           NULL) != 0 ||
        memcmp(ref + r0 * ti->block_size, got, sizeof(float) * (size_t)(nr * ti->block_size)) != 0)
        __builtin_trap();
    if (ti->block_size > 1 && gguf_dequant_row(type, src, got, n - 1, NULL) != GGUF_E_BAD_SHAPE)
        __builtin_trap();
    free(ref);
    free(got);
    return 0;
}
