/*
 * libFuzzer target for records: open the input as a record (plain or zstd, from
 * memory), touch every capture's first and last value, and compare the record
 * with itself, which walks every metric over whatever shapes the input declares.
 * Corpus: tests/fuzz/corpus/record, malformed inputs named after their error.
 */
#include <stddef.h>
#include <stdint.h>

#include "gguf/compare.h"
#include "gguf/record.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile float sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gguf_record *r;
    gguf_error err;
    if (gguf_record_open_memory(&r, data, size, "fuzz.gguf", &err) != 0)
        return 0;
    for (int64_t i = 0; i < gguf_record_capture_count(r); i++) {
        const gguf_capture *c = gguf_record_capture_at(r, i);
        if (c->n_elements)
            sink += c->data[0] + c->data[c->n_elements - 1];
        if (gguf_record_capture_find(r, c->point, c->rank) != c)
            __builtin_trap();
    }
    gguf_cmp_result *res = NULL;
    int rc = gguf_compare(&res, r, r, NULL, &err);
    if ((rc == 0 || rc == GGUF_E_MISMATCH) != (res != NULL))
        __builtin_trap();
    gguf_cmp_result_free(res);
    gguf_record_free(r);
    return 0;
}
