/* Internal layout of gguf_file; shared by file.c, set.c and value.c. */
#ifndef GGUF_FILE_INTERNAL_H
#define GGUF_FILE_INTERNAL_H

#include "gguf/file.h"

typedef struct gguf_name_index {
    uint32_t *slots;    /* tensor index + 1, 0 = empty */
    uint64_t mask;
} gguf_name_index;

struct gguf_file {
    char *path;
    int fd;
    const uint8_t *base;
    uint64_t size;
    bool mapped;
    uint32_t version;
    uint32_t alignment;
    uint64_t header_size;
    uint64_t data_offset;

    int64_t n_kv;
    gguf_kv *kvs;
    int64_t n_tensors;
    gguf_tensor *tensors;
    gguf_name_index index;

    /* Everything the parse allocates (value trees, names), freed in one go. */
    void **allocs;
    size_t n_allocs, cap_allocs;
};

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
