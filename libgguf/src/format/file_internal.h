/* Internal layout of gguf_file; shared by file.c, set.c and value.c. */
#ifndef GGUF_FILE_INTERNAL_H
#define GGUF_FILE_INTERNAL_H

#include "gguf/file.h"
#include "util/names.h"

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

#endif
