/*
 * Writes the IQ / FP4 lookup tables of libgguf (gguf/dequant.h) as CUDA
 * __device__ arrays, to stdout. Run by the build: the GPU kernels include its
 * output, so their tables are libgguf's tables byte for byte and cannot drift.
 */
#include <stdint.h>
#include <stdio.h>

#include "gguf/dequant.h"

static int emit(const char *name, const char *ctype, const void *data, size_t n, size_t align)
{
    const uint8_t *p = data;
    if (printf("static __device__ __align__(%zu) const %s %s[%zu] = {", align, ctype, name, n) < 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        printf("%s0x%02x", i == 0 ? "\n    " : i % 16 ? ", " : ",\n    ", (unsigned)p[i]);
    return printf("\n};\n\n") < 0 ? -1 : 0;
}

int main(void)
{
    printf("/* GENERATED at build time by cuda/src/gen_cuda_iq_tables.c from libgguf's\n"
           " * tables (libgguf/src/dequant/dequant_iq_tables.c). Do not edit. Flat byte arrays:\n"
           " * row r of a grid of W-byte rows starts at byte W*r. */\n\n");
    int rc = 0;
    rc |= emit("gc_iq2xxs_grid", "uint8_t", gguf_iq2xxs_grid, sizeof gguf_iq2xxs_grid, 8);
    rc |= emit("gc_iq2xs_grid", "uint8_t", gguf_iq2xs_grid, sizeof gguf_iq2xs_grid, 8);
    rc |= emit("gc_iq2s_grid", "uint8_t", gguf_iq2s_grid, sizeof gguf_iq2s_grid, 8);
    rc |= emit("gc_iq3xxs_grid", "uint8_t", gguf_iq3xxs_grid, sizeof gguf_iq3xxs_grid, 4);
    rc |= emit("gc_iq3s_grid", "uint8_t", gguf_iq3s_grid, sizeof gguf_iq3s_grid, 4);
    rc |= emit("gc_iq1s_grid", "uint8_t", gguf_iq1s_grid, sizeof gguf_iq1s_grid, 8);
    rc |= emit("gc_iq2_ksigns", "uint8_t", gguf_iq2_ksigns, sizeof gguf_iq2_ksigns, 16);
    rc |= emit("gc_iq4nl_values", "uint8_t", gguf_iq4nl_values, sizeof gguf_iq4nl_values, 16);
    rc |= emit("gc_fp4_e2m1_x2", "uint8_t", gguf_fp4_e2m1_x2, sizeof gguf_fp4_e2m1_x2, 16);
    if (fflush(stdout) != 0)
        rc = -1;
    return rc ? 1 : 0;
}
