/*
 * gguf-gen hf MODEL.gguf OUT_DIR [--format bf16|fp8|nvfp4] [--files N]
 *
 * Writes the Hugging Face checkpoint a GGUF was "converted from": the same
 * weights under their HF names and layouts (llama's Q/K rows un-permuted,
 * stacked experts one tensor per expert, MLA's attn_k_b + attn_v_b joined
 * into kv_b_proj), as safetensors files with model.safetensors.index.json,
 * and config.json (the architecture's HF configuration, gen_hfcfg.c; +
 * hf_quant_config.json for NVFP4). Projection weights
 * ("*_proj.weight", experts included) are stored as
 *   bf16   BF16 (round to nearest even);
 *   fp8    DeepSeek-V3's block-scaled FP8: F8_E4M3 with weight_scale_inv F32
 *          per 128 x 128 block (scale = block amax / 448);
 *   nvfp4  ModelOpt NVFP4: U8 pairs of E2M1 (low nibble first), F8_E4M3
 *          weight_scale per 16 elements, F32 weight_scale_2 = amax / (6 * 448),
 *          F32 input_scale 1;
 * every other tensor as BF16. The quantizers are written from the formats'
 * definitions (round to nearest, ties to even), independently of the
 * library's dequantizers, which the tests check against numpy.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "gen.h"
#include "gguf/dequant.h"
#include "gguf/file.h"
#include "gguf/model.h"
#include "gguf/output.h"
#include "gguf/safetensors.h"

enum { H_FORMAT = 400, H_FILES };

static const cli_opt hf_opts[] = {
    {H_FORMAT, "format", 1, "bf16|fp8|nvfp4", "how projection weights are stored (default bf16)"},
    {H_FILES, "files", 1, "N", "safetensors files to spread the tensors over (default 2)"},
    {0, NULL, 0, NULL, NULL},
};

static const cli_spec hf_spec = {
    GEN_TOOL " hf",
    "MODEL.gguf OUT_DIR [--format bf16|fp8|nvfp4] [--files N]",
    "Write the HF safetensors checkpoint MODEL.gguf would have been converted from, with its\n"
    "projection weights in BF16, block-scaled FP8 (DeepSeek-V3 layout) or NVFP4 (ModelOpt\n"
    "layout), an index and config.json (+ hf_quant_config.json).",
    hf_opts,
    "  gguf-gen hf model.gguf ckpt-fp8/ --format fp8\n",
};

typedef enum { FMT_BF16, FMT_FP8, FMT_NVFP4 } hf_format;

/* One HF tensor to write: float values and how to store them. */
typedef struct hf_tensor {
    char name[256];
    int64_t rows, cols; /* 1-D tensors: rows 0 */
    float *v;
    bool quant;
} hf_tensor;

typedef struct hf_list {
    hf_tensor *t;
    size_t n, cap;
} hf_list;

static hf_tensor *hf_add(hf_list *l, const char *name, int64_t rows, int64_t cols)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        hf_tensor *nt = realloc(l->t, sizeof *nt * l->cap);
        if (!nt)
            return NULL;
        l->t = nt;
    }
    hf_tensor *t = &l->t[l->n];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->rows = rows;
    t->cols = cols;
    t->v = malloc(sizeof(float) * (size_t)((rows ? rows : 1) * cols));
    if (!t->v)
        return NULL;
    l->n++;
    const size_t n = strlen(name);
    t->quant = rows > 0 && n > 12 && !strcmp(name + n - 12, "_proj.weight");
    return t;
}

/* ---- encoders (from the format definitions) ---- */

/* E4M3FN magnitudes of codes 0..126, ascending. */
static void e4m3_table(float tab[127])
{
    for (int c = 0; c < 127; c++)
        tab[c] = gguf_fp8_e4m3_to_fp32((uint8_t)c);
}

/* Round to the nearest E4M3FN code, ties to the even code, saturating at 448. */
static uint8_t e4m3_encode(const float tab[127], float x)
{
    const uint8_t sign = signbit(x) ? 0x80 : 0;
    float a = fabsf(x);
    if (isnan(x))
        return 0x7F;
    if (a >= 448.0f)
        return sign | 126;
    int lo = 0, hi = 126; /* tab[lo] <= a < tab[hi] */
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (tab[mid] <= a)
            lo = mid;
        else
            hi = mid;
    }
    const float dl = a - tab[lo], dh = tab[hi] - a;
    const int c = dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi);
    return sign | (uint8_t)c;
}

static uint8_t e2m1_encode(float x)
{
    static const float mag[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    const uint8_t sign = signbit(x) ? 8 : 0;
    const float a = fabsf(x);
    int best = 0;
    for (int c = 1; c < 8; c++) {
        const float d = fabsf(a - mag[c]), db = fabsf(a - mag[best]);
        if (d < db || (d == db && c % 2 == 0))
            best = c;
    }
    return sign | (uint8_t)best;
}

/* ---- building the HF tensors from the GGUF ---- */

static int dequant_all(const gguf_tensor *t, float *out, gguf_error *err)
{
    const int64_t ne0 = t->ne[0];
    return gguf_dequant_rows(t->type, t->data, 0, out, ne0, ne0 ? t->n_elements / ne0 : 0, NULL,
                             err);
}

static int build(const gguf_model *m, hf_list *l, gguf_error *err)
{
    const gguf_hparams *hp = gguf_model_hparams(m);
    for (int64_t i = 0; i < gguf_model_tensor_count(m); i++) {
        const gguf_model_tensor *mt = gguf_model_tensor_at(m, i);
        const gguf_tensor *t = mt->t;
        if (!mt->hf_name || mt->role == GGUF_ROLE_ATTN_V_B)
            continue;
        float *x = malloc(sizeof(float) * (size_t)(t->n_elements ? t->n_elements : 1));
        if (!x)
            return GGUF_E_NOMEM;
        int rc = dequant_all(t, x, err);
        if (rc) {
            free(x);
            return rc;
        }
        const int64_t ne0 = t->ne[0], ne1 = t->n_dims >= 2 ? t->ne[1] : 0;
        hf_tensor *h = NULL;
        if (mt->role == GGUF_ROLE_ATTN_K_B) { /* join with attn_v_b into kv_b_proj */
            const gguf_tensor *vb = gguf_model_get(m, mt->layer, GGUF_ROLE_ATTN_V_B);
            const int64_t nope = t->ne[0], lora = t->ne[1], heads = t->ne[2], vh = vb->ne[1];
            float *v = malloc(sizeof(float) * (size_t)vb->n_elements);
            char name[256];
            snprintf(name, sizeof name, "model.layers.%lld.self_attn.kv_b_proj.weight",
                     (long long)mt->layer);
            if (!v || (rc = dequant_all(vb, v, err)) != 0 ||
                !(h = hf_add(l, name, heads * (nope + vh), lora))) {
                free(v);
                free(x);
                return rc ? rc : GGUF_E_NOMEM;
            }
            for (int64_t hd = 0; hd < heads; hd++) {
                float *dst = h->v + hd * (nope + vh) * lora;
                for (int64_t r = 0; r < nope; r++)
                    for (int64_t c = 0; c < lora; c++)
                        dst[r * lora + c] = x[(hd * lora + c) * nope + r];
                memcpy(dst + nope * lora, v + hd * vh * lora, sizeof(float) * (size_t)(vh * lora));
            }
            free(v);
        } else if (strchr(mt->hf_name, '*')) { /* stacked experts: one tensor each */
            const char *star = strchr(mt->hf_name, '*');
            for (int64_t e = 0; e < t->ne[2]; e++) {
                char name[256];
                snprintf(name, sizeof name, "%.*s%lld%s", (int)(star - mt->hf_name),
                         mt->hf_name, (long long)e, star + 1);
                if (!(h = hf_add(l, name, ne1, ne0))) {
                    free(x);
                    return GGUF_E_NOMEM;
                }
                memcpy(h->v, x + e * ne1 * ne0, sizeof(float) * (size_t)(ne1 * ne0));
            }
        } else {
            if (!(h = hf_add(l, mt->hf_name, ne1, ne0))) {
                free(x);
                return GGUF_E_NOMEM;
            }
            const bool perm = hp->llama_qk_permuted &&
                              (mt->role == GGUF_ROLE_ATTN_Q || mt->role == GGUF_ROLE_ATTN_K);
            const int64_t hd = hp->n_embd_head_k;
            for (int64_t r = 0; r < (ne1 ? ne1 : 1); r++) {
                const int64_t src = perm ? gguf_llama_qk_row_from_hf(r, hd) : r;
                memcpy(h->v + r * ne0, x + src * ne0, sizeof(float) * (size_t)ne0);
            }
        }
        free(x);
    }
    return 0;
}

/* ---- writing ---- */

typedef struct blob {
    char name[300];
    const char *dtype;
    int64_t shape[2];
    int n_dims;
    uint8_t *bytes;
    size_t n;
} blob;

static int add_blob(blob **bs, size_t *nb, const char *name, const char *dtype, int n_dims,
                    int64_t a, int64_t b, size_t n)
{
    blob *nbs = realloc(*bs, sizeof **bs * (*nb + 1));
    if (!nbs)
        return -1;
    *bs = nbs;
    blob *x = &nbs[*nb];
    memset(x, 0, sizeof *x);
    snprintf(x->name, sizeof x->name, "%s", name);
    x->dtype = dtype;
    x->n_dims = n_dims;
    x->shape[0] = a;
    x->shape[1] = b;
    x->n = n;
    x->bytes = calloc(1, n ? n : 1);
    if (!x->bytes)
        return -1;
    (*nb)++;
    return 0;
}

static int encode(const hf_tensor *t, hf_format fmt, blob **bs, size_t *nb)
{
    const int64_t R = t->rows ? t->rows : 1, C = t->cols, n = R * C;
    const int nd = t->rows ? 2 : 1;
    const int64_t a = t->rows ? t->rows : t->cols;
    char nm[300];
    if (!t->quant || fmt == FMT_BF16 || (fmt == FMT_NVFP4 && C % 16)) {
        if (add_blob(bs, nb, t->name, "BF16", nd, a, C, (size_t)n * 2))
            return -1;
        uint8_t *p = (*bs)[*nb - 1].bytes;
        for (int64_t i = 0; i < n; i++) {
            const uint16_t h = gguf_fp32_to_bf16(t->v[i]);
            p[2 * i] = (uint8_t)h;
            p[2 * i + 1] = (uint8_t)(h >> 8);
        }
        return 0;
    }
    float tab[127];
    e4m3_table(tab);
    if (fmt == FMT_FP8) {
        const int64_t sr = (R + 127) / 128, sc = (C + 127) / 128;
        if (add_blob(bs, nb, t->name, "F8_E4M3", 2, R, C, (size_t)n))
            return -1;
        snprintf(nm, sizeof nm, "%s_scale_inv", t->name);
        if (add_blob(bs, nb, nm, "F32", 2, sr, sc, (size_t)(sr * sc * 4)))
            return -1;
        uint8_t *q = (*bs)[*nb - 2].bytes;
        float *s = (float *)(void *)(*bs)[*nb - 1].bytes;
        for (int64_t br = 0; br < sr; br++)
            for (int64_t bc = 0; bc < sc; bc++) {
                float amax = 0;
                for (int64_t r = br * 128; r < R && r < br * 128 + 128; r++)
                    for (int64_t c = bc * 128; c < C && c < bc * 128 + 128; c++)
                        amax = fmaxf(amax, fabsf(t->v[r * C + c]));
                const float scale = amax > 0 ? amax / 448.0f : 1.0f;
                s[br * sc + bc] = scale;
                for (int64_t r = br * 128; r < R && r < br * 128 + 128; r++)
                    for (int64_t c = bc * 128; c < C && c < bc * 128 + 128; c++)
                        q[r * C + c] = e4m3_encode(tab, t->v[r * C + c] / scale);
            }
        return 0;
    }
    /* NVFP4 */
    float amax = 0;
    for (int64_t i = 0; i < n; i++)
        amax = fmaxf(amax, fabsf(t->v[i]));
    const float s2 = amax > 0 ? amax / (6.0f * 448.0f) : 1.0f;
    if (add_blob(bs, nb, t->name, "U8", 2, R, C / 2, (size_t)(n / 2)))
        return -1;
    snprintf(nm, sizeof nm, "%s_scale", t->name);
    if (add_blob(bs, nb, nm, "F8_E4M3", 2, R, C / 16, (size_t)(n / 16)))
        return -1;
    snprintf(nm, sizeof nm, "%s_scale_2", t->name);
    if (add_blob(bs, nb, nm, "F32", 0, 0, 0, 4))
        return -1;
    const size_t base = t->name[0] ? strlen(t->name) - 6 : 0; /* drop "weight" */
    snprintf(nm, sizeof nm, "%.*sinput_scale", (int)base, t->name);
    if (add_blob(bs, nb, nm, "F32", 0, 0, 0, 4))
        return -1;
    blob *b = *bs + *nb - 4;
    memcpy(b[2].bytes, &s2, 4);
    const float one = 1.0f;
    memcpy(b[3].bytes, &one, 4);
    for (int64_t r = 0; r < R; r++)
        for (int64_t g = 0; g < C / 16; g++) {
            const float *x = t->v + r * C + g * 16;
            float ga = 0;
            for (int k = 0; k < 16; k++)
                ga = fmaxf(ga, fabsf(x[k]));
            const uint8_t s8 = e4m3_encode(tab, ga / 6.0f / s2);
            b[1].bytes[r * (C / 16) + g] = s8;
            const float bs_ = gguf_fp8_e4m3_to_fp32(s8) * s2;
            for (int k = 0; k < 16; k += 2) {
                const uint8_t lo = bs_ > 0 ? e2m1_encode(x[k] / bs_) : 0;
                const uint8_t hi = bs_ > 0 ? e2m1_encode(x[k + 1] / bs_) : 0;
                b[0].bytes[r * (C / 2) + g * 8 + k / 2] = (uint8_t)(lo | hi << 4);
            }
        }
    return 0;
}

static int write_file(const char *path, const blob *bs, size_t from, size_t to, gguf_error *err)
{
    size_t cap = 4096, len = 0;
    char *h = malloc(cap);
    if (!h)
        return GGUF_E_NOMEM;
    uint64_t off = 0;
    len += (size_t)snprintf(h + len, cap - len, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (size_t i = from; i < to; i++) {
        if (cap - len < 512) {
            char *nh = realloc(h, cap *= 2);
            if (!nh) {
                free(h);
                return GGUF_E_NOMEM;
            }
            h = nh;
        }
        char shape[64];
        if (bs[i].n_dims == 2)
            snprintf(shape, sizeof shape, "[%lld,%lld]", (long long)bs[i].shape[0],
                     (long long)bs[i].shape[1]);
        else if (bs[i].n_dims == 1)
            snprintf(shape, sizeof shape, "[%lld]", (long long)bs[i].shape[0]);
        else
            snprintf(shape, sizeof shape, "[]");
        len += (size_t)snprintf(h + len, cap - len,
                                ",\"%s\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":[%llu,%llu]}",
                                bs[i].name, bs[i].dtype, shape, (unsigned long long)off,
                                (unsigned long long)(off + bs[i].n));
        off += bs[i].n;
    }
    len += (size_t)snprintf(h + len, cap - len, "}");
    while (len % 8) /* the data starts 8-aligned, as HF's writer pads */
        h[len++] = ' ';
    gguf_output *o;
    int rc = gguf_output_create(&o, path, &(gguf_output_opts){.overwrite = true}, err);
    if (!rc) {
        const uint64_t n = len;
        rc = gguf_output_write(o, &n, 8, err);
        if (!rc)
            rc = gguf_output_write(o, h, len, err);
        for (size_t i = from; i < to && !rc; i++)
            rc = gguf_output_write(o, bs[i].bytes, bs[i].n, err);
        if (!rc)
            rc = gguf_output_commit(o, err);
        gguf_output_free(o);
    }
    free(h);
    return rc;
}

static int write_text(const char *dir, const char *name, const char *text, gguf_error *err)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return gguf_output_write_file(p, text, strlen(text), &(gguf_output_opts){.overwrite = true},
                                  err);
}

int gen_hf_main(int argc, char **argv)
{
    hf_format fmt = FMT_BF16;
    uint64_t n_files = 2;
    const char *arg;
    int oi = 1, c;
    while ((c = cli_next(&hf_spec, argc, argv, &arg, &oi)) != -1) {
        if (c == H_FORMAT) {
            if (!strcmp(arg, "bf16"))
                fmt = FMT_BF16;
            else if (!strcmp(arg, "fp8"))
                fmt = FMT_FP8;
            else if (!strcmp(arg, "nvfp4"))
                fmt = FMT_NVFP4;
            else {
                cli_errorf(hf_spec.tool, "--format: '%s' is not bf16, fp8 or nvfp4", arg);
                return CLI_EXIT_USAGE;
            }
        } else if (c == H_FILES) {
            if (cli_parse_u64(arg, &n_files) || n_files < 1 || n_files > 99) {
                cli_errorf(hf_spec.tool, "--files: '%s' is not 1..99", arg);
                return CLI_EXIT_USAGE;
            }
        }
    }
    if (argc - oi != 2) {
        cli_errorf(hf_spec.tool, "expected MODEL.gguf OUT_DIR (see --help)");
        return CLI_EXIT_USAGE;
    }
    const char *in = argv[oi], *dir = argv[oi + 1];
    gguf_error err = {0};
    gguf_set *set = NULL;
    gguf_model *m = NULL;
    hf_list l = {0};
    blob *bs = NULL;
    size_t nb = 0;
    char *idx = NULL, *cfg = NULL;
    int ret = CLI_EXIT_OK, rc;
    if ((rc = gguf_set_open(&set, in, NULL, &err)) != 0 ||
        (rc = gguf_model_open(&m, set, &err)) != 0 || (rc = build(m, &l, &err)) != 0) {
        if (!err.message[0])
            gguf_error_setf(&err, rc, 0, "%s: %s", in, gguf_strerror(rc));
        cli_error(hf_spec.tool, &err);
        ret = cli_exit_code(rc);
        goto done;
    }
    for (size_t i = 0; i < l.n; i++)
        if (encode(&l.t[i], fmt, &bs, &nb) != 0) {
            cli_errorf(hf_spec.tool, "out of memory");
            ret = CLI_EXIT_ENV;
            goto done;
        }
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        cli_errorf(hf_spec.tool, "%s: %s", dir, strerror(errno));
        ret = CLI_EXIT_ENV;
        goto done;
    }
    if (n_files > nb)
        n_files = nb ? nb : 1;
    /* the index: every blob in its file; companions stay in their weight's file */
    size_t cap = 4096 + nb * 400, len = 0;
    idx = malloc(cap);
    if (!idx) {
        ret = CLI_EXIT_ENV;
        goto done;
    }
    uint64_t total = 0;
    for (size_t i = 0; i < nb; i++)
        total += bs[i].n;
    len += (size_t)snprintf(idx, cap, "{\"metadata\":{\"total_size\":%llu},\"weight_map\":{",
                            (unsigned long long)total);
    size_t from = 0;
    for (uint64_t f = 0; f < n_files; f++) {
        size_t to = f + 1 == n_files ? nb : nb * (f + 1) / n_files;
        while (to < nb && to > from && strstr(bs[to].name, "_scale") &&
               !strstr(bs[to].name, "input_scale"))
            to++;
        while (to < nb && strstr(bs[to].name, "input_scale"))
            to++;
        char fname[64], path[4200];
        snprintf(fname, sizeof fname, "model-%05llu-of-%05llu.safetensors",
                 (unsigned long long)f + 1, (unsigned long long)n_files);
        snprintf(path, sizeof path, "%s/%s", dir, fname);
        if ((rc = write_file(path, bs, from, to, &err)) != 0) {
            cli_error(hf_spec.tool, &err);
            ret = cli_exit_code(rc);
            goto done;
        }
        for (size_t i = from; i < to; i++)
            len += (size_t)snprintf(idx + len, cap - len, "%s\"%s\":\"%s\"", len && idx[len - 1] == '{' ? "" : ",",
                                    bs[i].name, fname);
        from = to;
    }
    snprintf(idx + len, cap - len, "}}\n");
    const char *q = fmt == FMT_FP8 ? ",\"quantization_config\":{\"quant_method\":\"fp8\",\"fmt\":"
                                     "\"e4m3\",\"activation_scheme\":\"dynamic\","
                                     "\"weight_block_size\":[128,128]}"
                    : fmt == FMT_NVFP4 ? ",\"quantization_config\":{\"quant_method\":\"modelopt\","
                                         "\"quant_algo\":\"NVFP4\"}"
                                       : "";
    cfg = gen_hf_config(m, q);
    if (!cfg) {
        cli_errorf(hf_spec.tool, "out of memory");
        ret = CLI_EXIT_ENV;
        goto done;
    }
    if ((rc = write_text(dir, "model.safetensors.index.json", idx, &err)) != 0 ||
        (rc = write_text(dir, "config.json", cfg, &err)) != 0 ||
        (fmt == FMT_NVFP4 &&
         (rc = write_text(dir, "hf_quant_config.json",
                          "{\"producer\":{\"name\":\"modelopt\",\"version\":\"gguf-gen\"},"
                          "\"quantization\":{\"quant_algo\":\"NVFP4\",\"group_size\":16,"
                          "\"exclude_modules\":[\"lm_head\"]}}\n", &err)) != 0)) {
        cli_error(hf_spec.tool, &err);
        ret = cli_exit_code(rc);
        goto done;
    }
    if (cli_verbosity > 0)
        printf("%s: %zu HF tensors (%zu stored) in %llu files, %s\n", dir, l.n, nb,
               (unsigned long long)n_files,
               fmt == FMT_FP8 ? "fp8 block-scaled" : fmt == FMT_NVFP4 ? "nvfp4" : "bf16");
done:
    for (size_t i = 0; i < l.n; i++)
        free(l.t[i].v);
    free(l.t);
    for (size_t i = 0; i < nb; i++)
        free(bs[i].bytes);
    free(bs);
    free(idx);
    free(cfg);
    gguf_model_free(m);
    gguf_set_free(set);
    return ret;
}
