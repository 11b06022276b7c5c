/*
 * Test helpers of the model and shard modules: small GGUF models written from
 * text specs, and header-only replicas of frontier models from tensor maps.
 */
#ifndef HELPER_REPLICA_H
#define HELPER_REPLICA_H

#include <stdint.h>

#include "gguf/file.h"

/*
 * Write a GGUF file. kvs: NULL-terminated "TYPE KEY VALUE" lines with TYPE
 * u32, i32, u64, f32, bool, str, arru32 (VALUE = 1,2,3). tensors: NULL-terminated "NAME TYPE NE0[,NE1...]"
 * lines (TYPE a ggml name such as f32, q8_0). Tensor data: F32 tensors hold
 * their flat element index plus 1000 * the tensor's position (so every value
 * of the file is distinct); other types hold a byte pattern.
 * @return 0 or a gguf_status.
 */
int hr_write_model(const char *path, const char *const *kvs, const char *const *tensors);

/* Same with one kv list made of two parts (base + overrides, later wins; a
 * line "del KEY" drops KEY). */
int hr_write_model2(const char *path, const char *const *base, const char *const *extra,
                    const char *const *tensors);

/* Tensor infos of a tensor map (../shared/testdata/tensor-maps/X.map), data NULL. */
typedef struct hr_map {
    gguf_tensor *t;
    const gguf_tensor **tp;
    int64_t n;
} hr_map;
int hr_map_load(hr_map *out, const char *path);
void hr_map_free(hr_map *m);

#endif

/*
 * Tiny specs for hr_write_model. hr_ds2_*: deepseek2 with MLA (q_lora 32,
 * kv_lora 32, nope 16, rope 8, v 16), 4 heads, n_embd 64, layer 0 dense
 * (n_ff 64), layer 1 MoE (4 experts of width 32, top 2, 1 shared), YaRN
 * factor 40. hr_llama_*: llama, n_embd 64, 4 heads, 2 kv heads, n_ff 96,
 * vocab 96, 2 layers. hr_qwen3moe_*: 4 heads, 2 kv heads, head 16, 8 experts
 * of width 48, 1 layer.
 */
extern const char *const hr_ds2_kvs[];
extern const char *const hr_ds2_tensors[];
extern const char *const hr_llama_kvs[];
extern const char *const hr_llama_tensors[];
extern const char *const hr_qwen3moe_kvs[];
extern const char *const hr_qwen3moe_tensors[];
