/* MLA kv_b layouts (gguf/model.h): HF's kv_b_proj against GGUF's attn_k_b
 * and attn_v_b. */
#include <string.h>

#include "gguf/model.h"

void gguf_mla_kv_b_split(const float *kv_b, int64_t n_head, int64_t kv_lora, int64_t nope,
                         int64_t v_head, float *k_b, float *v_b)
{
    const int64_t R = kv_lora, per = nope + v_head;
    for (int64_t h = 0; h < n_head; h++) {
        const float *head = kv_b + h * per * R;
        for (int64_t j = 0; j < nope; j++)
            for (int64_t r = 0; r < R; r++)
                k_b[(h * R + r) * nope + j] = head[j * R + r];
        memcpy(v_b + h * v_head * R, head + nope * R, (size_t)(v_head * R) * sizeof(float));
    }
}

void gguf_mla_kv_b_join(const float *k_b, const float *v_b, int64_t n_head, int64_t kv_lora,
                        int64_t nope, int64_t v_head, float *kv_b)
{
    const int64_t R = kv_lora, per = nope + v_head;
    for (int64_t h = 0; h < n_head; h++) {
        float *head = kv_b + h * per * R;
        for (int64_t j = 0; j < nope; j++)
            for (int64_t r = 0; r < R; r++)
                head[j * R + r] = k_b[(h * R + r) * nope + j];
        memcpy(head + nope * R, v_b + h * v_head * R, (size_t)(v_head * R) * sizeof(float));
    }
}
