/*
 * MLA kv_b layouts (gguf_mla_kv_b_split / _join, gguf/model.h), element by
 * element: a synthetic case whose every value names its own position, and
 * HF's kv_b_proj of ../shared/testdata/hf/deepseek_v3 (transformers' BF16
 * weights) against the attn_k_b / attn_v_b that llama.cpp's converter wrote
 * from it (model-f32.gguf). A change of the row order, the transpose or the
 * head stride fails both.
 */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/file.h"
#include "gguf/model.h"

/* kv_b[h*(nope+dv)+j][r] = 1e6*h + 1e3*j + r: every value says where it is */
START_TEST(synthetic_positions)
{
    enum { NH = 3, R = 5, NOPE = 4, DV = 2 };
    float kv[NH * (NOPE + DV) * R], kb[NH * R * NOPE], vb[NH * DV * R], back[sizeof kv / 4];
    for (int h = 0; h < NH; h++)
        for (int j = 0; j < NOPE + DV; j++)
            for (int r = 0; r < R; r++)
                kv[(h * (NOPE + DV) + j) * R + r] = 1e6f * h + 1e3f * j + r;
    gguf_mla_kv_b_split(kv, NH, R, NOPE, DV, kb, vb);
    for (int h = 0; h < NH; h++)
        for (int r = 0; r < R; r++)
            for (int j = 0; j < NOPE; j++) /* k_b ne [nope, R, nh]: j fastest */
                ck_assert_float_eq(kb[(h * R + r) * NOPE + j], 1e6f * h + 1e3f * j + r);
    for (int h = 0; h < NH; h++)
        for (int d = 0; d < DV; d++)
            for (int r = 0; r < R; r++) /* v_b ne [R, dv, nh]: r fastest */
                ck_assert_float_eq(vb[(h * DV + d) * R + r], 1e6f * h + 1e3f * (NOPE + d) + r);
    gguf_mla_kv_b_join(kb, vb, NH, R, NOPE, DV, back);
    ck_assert_int_eq(memcmp(back, kv, sizeof kv), 0);
}
END_TEST

static const char *shared_dir(void)
{
    const char *s = getenv("GGUFKIT_SHARED");
    return s && *s ? s : "../shared/testdata";
}

/* One BF16 tensor of a safetensors file as floats (NULL when absent). */
static float *st_bf16(const char *path, const char *name, int64_t *rows, int64_t *cols)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    uint64_t hl = 0;
    float *out = NULL;
    char *hdr = NULL;
    if (fread(&hl, 8, 1, f) != 1 || hl > (1u << 26))
        goto done;
    hdr = malloc(hl + 1);
    if (fread(hdr, 1, hl, f) != hl)
        goto done;
    json_error_t je;
    json_t *root = json_loadb(hdr, hl, 0, &je);
    json_t *t = root ? json_object_get(root, name) : NULL;
    json_t *shape = t ? json_object_get(t, "shape") : NULL;
    json_t *offs = t ? json_object_get(t, "data_offsets") : NULL;
    if (shape && offs && !strcmp(json_string_value(json_object_get(t, "dtype")), "BF16")) {
        *rows = json_integer_value(json_array_get(shape, 0));
        *cols = json_integer_value(json_array_get(shape, 1));
        const int64_t n = *rows * *cols;
        uint16_t *raw = malloc((size_t)n * 2);
        out = malloc((size_t)n * sizeof(float));
        fseek(f, (long)(8 + hl + json_integer_value(json_array_get(offs, 0))), SEEK_SET);
        if (fread(raw, 2, (size_t)n, f) == (size_t)n) {
            for (int64_t i = 0; i < n; i++) {
                uint32_t u = (uint32_t)raw[i] << 16;
                memcpy(&out[i], &u, 4);
            }
        } else {
            free(out);
            out = NULL;
        }
        free(raw);
    }
    json_decref(root);
done:
    free(hdr);
    fclose(f);
    return out;
}

START_TEST(hf_deepseek_v3)
{
    char dir[4096], st[4200], gg[4200];
    snprintf(dir, sizeof dir, "%s/hf/deepseek_v3", shared_dir());
    snprintf(st, sizeof st, "%s/model.safetensors", dir);
    snprintf(gg, sizeof gg, "%s/model-f32.gguf", dir);
    gguf_set *set = NULL;
    gguf_error err;
    ck_assert_msg(gguf_set_open(&set, gg, NULL, &err) == 0, "%s", err.message);
    const int64_t NH = 4, R = 256, NOPE = 64, DV = 64;
    for (int layer = 0; layer < 2; layer++) {
        char name[128];
        int64_t rows = 0, cols = 0;
        snprintf(name, sizeof name, "model.layers.%d.self_attn.kv_b_proj.weight", layer);
        float *kv = st_bf16(st, name, &rows, &cols);
        ck_assert_ptr_nonnull(kv);
        ck_assert_int_eq(rows, NH * (NOPE + DV));
        ck_assert_int_eq(cols, R);
        snprintf(name, sizeof name, "blk.%d.attn_k_b.weight", layer);
        const gguf_tensor *tk = gguf_set_tensor_find(set, name);
        snprintf(name, sizeof name, "blk.%d.attn_v_b.weight", layer);
        const gguf_tensor *tv = gguf_set_tensor_find(set, name);
        ck_assert_ptr_nonnull(tk);
        ck_assert_ptr_nonnull(tv);
        ck_assert_int_eq(tk->type, GGUF_TYPE_F32);
        ck_assert_int_eq(tk->ne[0], NOPE);
        ck_assert_int_eq(tk->ne[1], R);
        ck_assert_int_eq(tv->ne[0], R);
        ck_assert_int_eq(tv->ne[1], DV);
        const size_t nk = (size_t)(NH * R * NOPE), nv = (size_t)(NH * DV * R);
        float *kb = malloc(nk * 4), *vb = malloc(nv * 4), *joined = malloc((nk + nv) * 4);
        gguf_mla_kv_b_split(kv, NH, R, NOPE, DV, kb, vb);
        ck_assert_msg(memcmp(kb, tk->data, nk * 4) == 0, "layer %d: k_b differs from HF", layer);
        ck_assert_msg(memcmp(vb, tv->data, nv * 4) == 0, "layer %d: v_b differs from HF", layer);
        gguf_mla_kv_b_join((const float *)tk->data, (const float *)tv->data, NH, R, NOPE, DV,
                           joined);
        ck_assert_msg(memcmp(joined, kv, (nk + nv) * 4) == 0, "layer %d: join differs", layer);
        free(kv);
        free(kb);
        free(vb);
        free(joined);
    }
    gguf_set_free(set);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("mla_layout");
    TCase *tc = tcase_create("kv_b");
    tcase_add_test(tc, synthetic_positions);
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/hf/deepseek_v3/model.safetensors", shared_dir());
    FILE *f = fopen(probe, "rb");
    if (f) {
        fclose(f);
        tcase_add_test(tc, hf_deepseek_v3);
    } else {
        fprintf(stderr, "test_mla_layout: %s absent: the HF comparison is skipped\n", probe);
    }
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
