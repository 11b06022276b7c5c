/* Name lookup and UTF-8 checks shared by the modules that index tensors by
 * name (format, model). Library-private: not installed. */
#ifndef GGUF_UTIL_NAMES_H
#define GGUF_UTIL_NAMES_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf/file.h"

typedef struct gguf_name_index {
    uint32_t *slots;    /* tensor index + 1, 0 = empty */
    uint64_t mask;
} gguf_name_index;

/* Open-addressing hash from tensor name to position; keys borrowed. */
uint64_t gguf_name_hash(const char *s);
int gguf_name_index_build(gguf_name_index *ix, const gguf_tensor *const *items, int64_t n,
                          int64_t *dup_a, int64_t *dup_b);
int64_t gguf_name_index_find(const gguf_name_index *ix, const gguf_tensor *const *items,
                             const char *name);
void gguf_name_index_free(gguf_name_index *ix);

/* UTF-8 validity (no NUL bytes either: names must be C strings). */
bool gguf_utf8_valid(const char *s, uint64_t n);

#endif
