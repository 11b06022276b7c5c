/* Internal layout of the safetensors module; shared by safetensors_*.c. */
#ifndef GGUF_SAFETENSORS_INTERNAL_H
#define GGUF_SAFETENSORS_INTERNAL_H

#include "gguf/safetensors.h"

struct gguf_st_file {
    char *path;
    const uint8_t *base;
    uint64_t size;
    bool mapped;
    uint64_t data_offset;
    int64_t n_tensors;
    gguf_st_tensor *tensors;     /* data order */
    gguf_st_tensor **by_name;    /* sorted by name */
    int64_t n_meta;
    char **meta;                 /* key, value, key, value ... sorted by key */
    char *names;                 /* one block holding every tensor name */
};

/* Lookup in an array of tensor pointers sorted by name. */
const gguf_st_tensor *gguf_st_bsearch(gguf_st_tensor *const *v, int64_t n, const char *name);
int gguf_st_cmp_name(const void *a, const void *b);

#endif
