/* The ggml type table. Sizes match ggml's type_traits (ggml.c) as of 2026. */
#include "gguf/types.h"
#include "util/error_lib.h"

#include <stddef.h>
#include <strings.h>

#define T(id, nm, bs, ts, q) [id] = {nm, bs, ts, q, false, true}
#define REMOVED(id, nm) [id] = {nm, 0, 0, true, true, false}

static const gguf_type_info type_table[GGUF_TYPE_COUNT] = {
    T(GGUF_TYPE_F32, "F32", 1, 4, false),
    T(GGUF_TYPE_F16, "F16", 1, 2, false),
    T(GGUF_TYPE_Q4_0, "Q4_0", 32, 18, true),
    T(GGUF_TYPE_Q4_1, "Q4_1", 32, 20, true),
    REMOVED(4, "Q4_2"),
    REMOVED(5, "Q4_3"),
    T(GGUF_TYPE_Q5_0, "Q5_0", 32, 22, true),
    T(GGUF_TYPE_Q5_1, "Q5_1", 32, 24, true),
    T(GGUF_TYPE_Q8_0, "Q8_0", 32, 34, true),
    /* ggml's block_q8_1 is 36 bytes (two f16 then 32 int8); gguf-py says 40. */
    T(GGUF_TYPE_Q8_1, "Q8_1", 32, 36, true),
    T(GGUF_TYPE_Q2_K, "Q2_K", 256, 84, true),
    T(GGUF_TYPE_Q3_K, "Q3_K", 256, 110, true),
    T(GGUF_TYPE_Q4_K, "Q4_K", 256, 144, true),
    T(GGUF_TYPE_Q5_K, "Q5_K", 256, 176, true),
    T(GGUF_TYPE_Q6_K, "Q6_K", 256, 210, true),
    T(GGUF_TYPE_Q8_K, "Q8_K", 256, 292, true),
    T(GGUF_TYPE_IQ2_XXS, "IQ2_XXS", 256, 66, true),
    T(GGUF_TYPE_IQ2_XS, "IQ2_XS", 256, 74, true),
    T(GGUF_TYPE_IQ3_XXS, "IQ3_XXS", 256, 98, true),
    T(GGUF_TYPE_IQ1_S, "IQ1_S", 256, 50, true),
    T(GGUF_TYPE_IQ4_NL, "IQ4_NL", 32, 18, true),
    T(GGUF_TYPE_IQ3_S, "IQ3_S", 256, 110, true),
    T(GGUF_TYPE_IQ2_S, "IQ2_S", 256, 82, true),
    T(GGUF_TYPE_IQ4_XS, "IQ4_XS", 256, 136, true),
    T(GGUF_TYPE_I8, "I8", 1, 1, false),
    T(GGUF_TYPE_I16, "I16", 1, 2, false),
    T(GGUF_TYPE_I32, "I32", 1, 4, false),
    T(GGUF_TYPE_I64, "I64", 1, 8, false),
    T(GGUF_TYPE_F64, "F64", 1, 8, false),
    T(GGUF_TYPE_IQ1_M, "IQ1_M", 256, 56, true),
    T(GGUF_TYPE_BF16, "BF16", 1, 2, false),
    REMOVED(31, "Q4_0_4_4"),
    REMOVED(32, "Q4_0_4_8"),
    REMOVED(33, "Q4_0_8_8"),
    T(GGUF_TYPE_TQ1_0, "TQ1_0", 256, 54, true),
    T(GGUF_TYPE_TQ2_0, "TQ2_0", 256, 66, true),
    REMOVED(36, "IQ4_NL_4_4"),
    REMOVED(37, "IQ4_NL_4_8"),
    REMOVED(38, "IQ4_NL_8_8"),
    T(GGUF_TYPE_MXFP4, "MXFP4", 32, 17, true),
    T(GGUF_TYPE_NVFP4, "NVFP4", 64, 36, true),
    T(GGUF_TYPE_Q1_0, "Q1_0", 128, 18, true),
};

const gguf_type_info *gguf_type_get(uint32_t type)
{
    if (type >= GGUF_TYPE_COUNT || type_table[type].name == NULL)
        return NULL;
    return &type_table[type];
}

bool gguf_type_is_valid(uint32_t type)
{
    const gguf_type_info *ti = gguf_type_get(type);
    return ti && ti->valid;
}

const char *gguf_type_name(uint32_t type)
{
    const gguf_type_info *ti = gguf_type_get(type);
    return ti ? ti->name : "unknown";
}

int gguf_type_from_name(const char *name)
{
    if (!name)
        return -1;
    for (int i = 0; i < GGUF_TYPE_COUNT; i++)
        if (type_table[i].valid && strcasecmp(type_table[i].name, name) == 0)
            return i;
    return -1;
}

int gguf_type_row_bytes(uint32_t type, int64_t n, uint64_t *out)
{
    const gguf_type_info *ti = gguf_type_get(type);
    if (!ti || !ti->valid)
        return GGUF_E_BAD_TYPE;
    if (n < 0 || n % ti->block_size != 0)
        return GGUF_E_BAD_SHAPE;
    uint64_t bytes;
    if (!gguf_mul_u64((uint64_t)n / ti->block_size, ti->type_size, &bytes))
        return GGUF_E_OVERFLOW;
    *out = bytes;
    return GGUF_OK;
}

static const char *const value_type_names[GGUF_VALUE_COUNT] = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
    "bool", "string", "array", "uint64", "int64", "float64",
};
static const uint8_t value_type_sizes[GGUF_VALUE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *gguf_value_type_name(uint32_t vtype)
{
    return vtype < GGUF_VALUE_COUNT ? value_type_names[vtype] : "unknown";
}

uint32_t gguf_value_type_size(uint32_t vtype)
{
    return vtype < GGUF_VALUE_COUNT ? value_type_sizes[vtype] : 0;
}
