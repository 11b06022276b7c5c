/*
 * libFuzzer target for import maps (gguf/import.h): parse the input; for a map
 * that parses, compile every entry's FILE and TENSOR patterns into PCRE2
 * matchers and match them against a few names, and expand every point for a
 * few variable values, which walks the pattern translation, the match limit
 * and the point templates over whatever the map declares.
 * Corpus: tests/fuzz/corpus/import_map (tests/fuzz/make_import_map_corpus.py),
 * malformed maps named after their error.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "interop/import_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const names[] = {
    "hidden_states.npy", "layer_12.npy", "model.layers.3.input_layernorm.0", "a/b",
    "TP0_PP0_Rank0_pid42", "0000000000000000000000000000000000000000000001", "",
};

static void try_pattern(const char *pat, bool file)
{
    imp_matcher *m;
    gguf_error err;
    if (imp_matcher_new(&m, pat, file, &err))
        return;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int64_t v[GGUF_IMPORT_MAX_VARS];
        const int hit = imp_matcher_match(m, names[i], v, GGUF_IMPORT_MAX_VARS);
        if (hit > 1 || (hit < 0 && hit != GGUF_E_LIMIT && hit != GGUF_E_NOMEM))
            __builtin_trap();
    }
    imp_matcher_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gguf_import_map *m;
    gguf_error err;
    if (gguf_import_map_open_memory(&m, (const char *)data, size, "fuzz.map", &err) != 0)
        return 0;
    for (int64_t i = 0; i < m->n_entries; i++) {
        const imp_entry *e = &m->entries[i];
        try_pattern(e->src.file, true);
        if (e->src.tensor)
            try_pattern(e->src.tensor, false);
        static const int64_t vals[][GGUF_IMPORT_MAX_VARS + 1] = {
            {0, 0, 0, 0, 0}, {1, 2, 3, 4, 5}, {999999999, 1, 0, 7, 2}};
        for (size_t k = 0; k < sizeof vals / sizeof vals[0]; k++) {
            char out[GGUF_RECORD_MAX_NAME + 1], bad[200];
            if (imp_expand_point(e, vals[k], out, sizeof out, bad, sizeof bad) == 0 &&
                strlen(out) > GGUF_RECORD_MAX_NAME)
                __builtin_trap();
        }
    }
    gguf_import_map_free(m);
    return 0;
}
