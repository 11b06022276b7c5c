/*
 * libFuzzer target for llama.cpp's KL-divergence files (gguf/kld.h): open the
 * input from memory, decode every row (at most 64), and run the statistics
 * against fake logits, which walks the token lookups and percentiles over
 * whatever sizes the header declares.
 * Corpus: tests/fuzz/corpus/kld, written by make_kld_corpus.py (valid files
 * and malformed ones named after the error they must produce).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "gguf/kld.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gguf_kld_file *f;
    gguf_error err;
    if (gguf_kld_open_memory(&f, data, size, "fuzz.kld", &err) != 0)
        return 0;
    const int32_t V = gguf_kld_n_vocab(f), ctx = gguf_kld_n_ctx(f);
    const int64_t rows = gguf_kld_rows_per_chunk(ctx);
    float *lp = malloc((size_t)V * sizeof *lp), *logits = malloc((size_t)V * sizeof *logits);
    gguf_kld_acc *acc = NULL;
    if (lp && logits && gguf_kld_acc_create(&acc, 64, &err) == 0) {
        for (int32_t i = 0; i < V; i++)
            logits[i] = (float)(i % 7) - 3.0f;
        int64_t done = 0;
        for (int64_t c = 0; c < gguf_kld_n_chunk(f) && done < 64; c++)
            for (int64_t j = 0; j < rows && done < 64; j++, done++) {
                float s, m;
                gguf_kld_row(f, c, j, &s, &m, lp);
                if (!(s >= 0) || !(m <= 0))
                    __builtin_trap(); /* validated at open */
                if (gguf_kld_acc_add(acc, f, c, j, logits, &err) != 0)
                    __builtin_trap();
            }
        gguf_kld_stats st;
        gguf_kld_acc_stats(acc, &st);
        if (st.count != done || (done && !(st.max_kld >= st.min_kld)))
            __builtin_trap();
    }
    gguf_kld_acc_free(acc);
    free(lp);
    free(logits);
    gguf_kld_free(f);
    return 0;
}
