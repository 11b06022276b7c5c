/*
 * gguf/types.h - the ggml tensor type table and GGUF metadata value types.
 *
 * Type ids are ggml's `enum ggml_type` as stored in GGUF tensor infos. Ids that
 * ggml once used and removed (4, 5, 31-33, 36-38) are known as removed: a file
 * that uses one gets GGUF_E_BAD_TYPE with the old name in the message.
 */
#ifndef GGUF_TYPES_H
#define GGUF_TYPES_H

#include "gguf/export.h"

#include <stdbool.h>
#include <stdint.h>

GGUF_BEGIN_DECLS

typedef enum gguf_type {
    GGUF_TYPE_F32     = 0,
    GGUF_TYPE_F16     = 1,
    GGUF_TYPE_Q4_0    = 2,
    GGUF_TYPE_Q4_1    = 3,
    /* 4 Q4_2, 5 Q4_3: removed */
    GGUF_TYPE_Q5_0    = 6,
    GGUF_TYPE_Q5_1    = 7,
    GGUF_TYPE_Q8_0    = 8,
    GGUF_TYPE_Q8_1    = 9,
    GGUF_TYPE_Q2_K    = 10,
    GGUF_TYPE_Q3_K    = 11,
    GGUF_TYPE_Q4_K    = 12,
    GGUF_TYPE_Q5_K    = 13,
    GGUF_TYPE_Q6_K    = 14,
    GGUF_TYPE_Q8_K    = 15,
    GGUF_TYPE_IQ2_XXS = 16,
    GGUF_TYPE_IQ2_XS  = 17,
    GGUF_TYPE_IQ3_XXS = 18,
    GGUF_TYPE_IQ1_S   = 19,
    GGUF_TYPE_IQ4_NL  = 20,
    GGUF_TYPE_IQ3_S   = 21,
    GGUF_TYPE_IQ2_S   = 22,
    GGUF_TYPE_IQ4_XS  = 23,
    GGUF_TYPE_I8      = 24,
    GGUF_TYPE_I16     = 25,
    GGUF_TYPE_I32     = 26,
    GGUF_TYPE_I64     = 27,
    GGUF_TYPE_F64     = 28,
    GGUF_TYPE_IQ1_M   = 29,
    GGUF_TYPE_BF16    = 30,
    /* 31 Q4_0_4_4, 32 Q4_0_4_8, 33 Q4_0_8_8: removed (repacked at load time now) */
    GGUF_TYPE_TQ1_0   = 34,
    GGUF_TYPE_TQ2_0   = 35,
    /* 36 IQ4_NL_4_4, 37 IQ4_NL_4_8, 38 IQ4_NL_8_8: removed */
    GGUF_TYPE_MXFP4   = 39,
    GGUF_TYPE_NVFP4   = 40,
    GGUF_TYPE_Q1_0    = 41,
    GGUF_TYPE_COUNT   = 42
} gguf_type;

typedef struct gguf_type_info {
    const char *name;      /* ggml's name, e.g. "Q4_K"; for removed ids the old name */
    uint32_t block_size;   /* elements per block (1 for plain types) */
    uint32_t type_size;    /* bytes per block */
    bool quantized;        /* block-quantized (needs dequantization) */
    bool removed;          /* id once used by ggml and since removed */
    bool valid;            /* a type a tensor may have today */
} gguf_type_info;

/* Table entry for an id, or NULL when the id was never assigned. */
const gguf_type_info *gguf_type_get(uint32_t type);

/* True for an id that a tensor may carry today (assigned and not removed). */
bool gguf_type_is_valid(uint32_t type);

/* Name of a type id; "unknown" for ids never assigned. Never NULL. */
const char *gguf_type_name(uint32_t type);

/* Type id for a name (case-insensitive, e.g. "q4_k"), or -1. */
int gguf_type_from_name(const char *name);

/*
 * Bytes of a row of n elements of a valid type into *out.
 * @return 0; GGUF_E_BAD_TYPE for an invalid type; GGUF_E_BAD_SHAPE when n is
 *         negative or not a multiple of the block size; GGUF_E_OVERFLOW.
 */
int gguf_type_row_bytes(uint32_t type, int64_t n, uint64_t *out);

/* ---- metadata value types (GGUF spec) ---- */
typedef enum gguf_value_type {
    GGUF_VALUE_UINT8   = 0,
    GGUF_VALUE_INT8    = 1,
    GGUF_VALUE_UINT16  = 2,
    GGUF_VALUE_INT16   = 3,
    GGUF_VALUE_UINT32  = 4,
    GGUF_VALUE_INT32   = 5,
    GGUF_VALUE_FLOAT32 = 6,
    GGUF_VALUE_BOOL    = 7,
    GGUF_VALUE_STRING  = 8,
    GGUF_VALUE_ARRAY   = 9,
    GGUF_VALUE_UINT64  = 10,
    GGUF_VALUE_INT64   = 11,
    GGUF_VALUE_FLOAT64 = 12,
    GGUF_VALUE_COUNT   = 13
} gguf_value_type;

/* "uint8", "string", "array", ...; "unknown" for other ids. Never NULL. */
const char *gguf_value_type_name(uint32_t vtype);

/* Size in bytes of a scalar value type (0 for string, array and unknown ids). */
uint32_t gguf_value_type_size(uint32_t vtype);

GGUF_END_DECLS
#endif /* GGUF_TYPES_H */
