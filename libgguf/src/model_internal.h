/* Internal layout of gguf_model; shared by the model_*.c files. Not installed. */
#ifndef GGUF_MODEL_INTERNAL_H
#define GGUF_MODEL_INTERNAL_H

#include "gguf/model.h"
#include "file_internal.h"

struct gguf_model {
    char *name;
    const gguf_file *meta;
    gguf_hparams hp;
    int64_t n;
    gguf_model_tensor *mt;
    const gguf_tensor **tp;   /* mt[i].t, for the name index */
    gguf_name_index ix;
    int32_t *by_role;         /* (n_layer + 1) x GGUF_ROLE_COUNT: index + 1, row 0 global */
    char *hf_arena;           /* HF names, MODEL_HF_LEN bytes per tensor */
};

#define MODEL_HF_LEN 128

/* "blk.N.STEM.SUFFIX" or "STEM.SUFFIX" for global roles. @return 0 or GGUF_E_LIMIT. */
int model_role_gguf_name(gguf_role role, int64_t il, char *out, size_t size);

#endif
