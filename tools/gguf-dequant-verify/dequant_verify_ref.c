/*
 * --reference: GGUF tensors against the HF safetensors they were made from.
 *
 * HF names come from the model module (gguf/model.h: gguf_role_parse,
 * gguf_role_hf_name) for the architectures it knows; a small internal map
 * (llama-style dense blocks, MLA, MoE) covers the others.
 *
 * Layout facts used:
 *   - numpy shape = reversed ggml ne, so GGUF row r (ne[0] elements) is HF
 *     row r of the same tensor, element for element;
 *   - llama's converter permutes the rows of attn_q / attn_k per head:
 *       GGUF row h*hd + 2i + j  holds  HF row h*hd + j*hd/2 + i;
 *   - stacked experts (ffn_*_exps, ne [a, b, n_expert]) are HF's per-expert
 *     tensors mlp.experts.E.*_proj back to back;
 *   - MLA: HF kv_b_proj [n_head*(nope+v), kv_lora] holds per head nope k
 *     rows then v rows; GGUF attn_k_b (ne [nope, kv_lora, n_head]) is the k
 *     part transposed per head, attn_v_b (ne [kv_lora, v, n_head]) the v part.
 */
#include "dequant_verify.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/model.h"
#include "gguf/types.h"

/* Minimum SNR, in dB, a correct tensor of each type reaches against its
 * float source. Quantization noise of b bits gives roughly 6b - 7 dB on
 * Gaussian weights; these floors sit well under that, and well over what a
 * transposed or reordered tensor gives (about -3 dB: the error is as large as
 * both signals together). */
double dv_expect_snr_db(uint32_t type)
{
    switch (type) {
    case GGUF_TYPE_F32:
    case GGUF_TYPE_F64: return 100.0;
    case GGUF_TYPE_F16: return 55.0;
    case GGUF_TYPE_BF16: return 40.0;
    case GGUF_TYPE_Q8_0:
    case GGUF_TYPE_Q8_1:
    case GGUF_TYPE_Q8_K: return 30.0;
    case GGUF_TYPE_Q6_K: return 24.0;
    case GGUF_TYPE_Q5_0:
    case GGUF_TYPE_Q5_1:
    case GGUF_TYPE_Q5_K: return 18.0;
    case GGUF_TYPE_Q4_0:
    case GGUF_TYPE_Q4_1:
    case GGUF_TYPE_Q4_K:
    case GGUF_TYPE_IQ4_NL:
    case GGUF_TYPE_IQ4_XS:
    case GGUF_TYPE_MXFP4:
    case GGUF_TYPE_NVFP4: return 12.0;
    case GGUF_TYPE_Q3_K:
    case GGUF_TYPE_IQ3_XXS:
    case GGUF_TYPE_IQ3_S: return 7.0;
    case GGUF_TYPE_Q2_K:
    case GGUF_TYPE_IQ2_XXS:
    case GGUF_TYPE_IQ2_XS:
    case GGUF_TYPE_IQ2_S: return 3.0;
    default: return 1.0; /* 1-bit and ternary types, integers */
    }
}

void dv_model_info_read(dv_model_info *mi, const gguf_set *set)
{
    memset(mi, 0, sizeof *mi);
    const gguf_file *f = gguf_set_meta(set);
    gguf_str a;
    if (gguf_get_str(f, "general.architecture", &a, NULL) == 0)
        snprintf(mi->arch, sizeof mi->arch, "%.*s", (int)(a.len < 63 ? a.len : 63), a.data);
    char key[128];
    snprintf(key, sizeof key, "%s.attention.head_count", mi->arch);
    int64_t v;
    if (gguf_get_i64(f, key, &v, NULL) == 0)
        mi->n_head = v;
    snprintf(key, sizeof key, "%s.attention.head_count_kv", mi->arch);
    mi->n_head_kv = gguf_get_i64(f, key, &v, NULL) == 0 ? v : mi->n_head;
}

/* ---- names ---- */

typedef struct name_rule {
    const char *gguf; /* stem after "blk.N." */
    const char *hf;   /* after "model.layers.N."; "*" stands for the expert index */
} name_rule;

static const name_rule block_rules[] = {
    {"attn_norm", "input_layernorm"},
    {"ffn_norm", "post_attention_layernorm"},
    {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"},
    {"attn_q_norm", "self_attn.q_norm"},
    {"attn_k_norm", "self_attn.k_norm"},
    {"attn_q_a", "self_attn.q_a_proj"},
    {"attn_q_a_norm", "self_attn.q_a_layernorm"},
    {"attn_q_b", "self_attn.q_b_proj"},
    {"attn_kv_a_mqa", "self_attn.kv_a_proj_with_mqa"},
    {"attn_kv_a_norm", "self_attn.kv_a_layernorm"},
    {"attn_kv_b", "self_attn.kv_b_proj"},
    {"ffn_gate", "mlp.gate_proj"},
    {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
    {"ffn_gate_inp", "mlp.gate"},
    {"exp_probs_b", "mlp.gate.e_score_correction_bias"},
    {"ffn_gate_shexp", "mlp.shared_experts.gate_proj"},
    {"ffn_up_shexp", "mlp.shared_experts.up_proj"},
    {"ffn_down_shexp", "mlp.shared_experts.down_proj"},
    {"ffn_gate_exps", "mlp.experts.*.gate_proj"},
    {"ffn_up_exps", "mlp.experts.*.up_proj"},
    {"ffn_down_exps", "mlp.experts.*.down_proj"},
    {NULL, NULL},
};

/* GGUF name -> HF name. expert >= 0 fills the expert index of *_exps (else "*").
 * Returns 0, or -1 when the name has no counterpart here. */
static int hf_name(const char *gguf, int64_t expert, char *out, size_t size, int *is_exps)
{
    *is_exps = 0;
    if (!strcmp(gguf, "token_embd.weight"))
        return snprintf(out, size, "model.embed_tokens.weight") < 0;
    if (!strcmp(gguf, "output_norm.weight"))
        return snprintf(out, size, "model.norm.weight") < 0;
    if (!strcmp(gguf, "output.weight"))
        return snprintf(out, size, "lm_head.weight") < 0;
    long long layer;
    int off = 0;
    if (sscanf(gguf, "blk.%lld.%n", &layer, &off) != 1 || off == 0)
        return -1;
    const char *stem = gguf + off;
    const char *dot = strrchr(stem, '.');
    if (!dot || (strcmp(dot, ".weight") && strcmp(dot, ".bias")))
        return -1;
    const size_t stem_len = (size_t)(dot - stem);
    for (const name_rule *r = block_rules; r->gguf; r++) {
        if (strlen(r->gguf) != stem_len || strncmp(stem, r->gguf, stem_len))
            continue;
        char part[128];
        const char *star = strchr(r->hf, '*');
        if (star) {
            *is_exps = 1;
            if (expert >= 0)
                snprintf(part, sizeof part, "%.*s%lld%s", (int)(star - r->hf), r->hf,
                         (long long)expert, star + 1);
            else
                snprintf(part, sizeof part, "%s", r->hf);
        } else {
            snprintf(part, sizeof part, "%s", r->hf);
        }
        /* exp_probs_b.bias is a whole HF name already (no .bias suffix) */
        if (!strcmp(r->gguf, "exp_probs_b"))
            snprintf(out, size, "model.layers.%lld.%s", layer, part);
        else
            snprintf(out, size, "model.layers.%lld.%s%s", layer, part, dot);
        return 0;
    }
    return -1;
}

static int is_llama_like(const char *arch);

/* The model module's name for a tensor, with "*" replaced by the expert
 * index when expert >= 0. Returns 0, or -1 when the module has none. */
static int hf_name_model(const dv_model_info *mi, const char *gguf, int64_t expert, char *out,
                         size_t size, int *is_exps, int *is_llama_qk)
{
    const gguf_arch arch = gguf_arch_from_name(mi->arch);
    gguf_role role;
    int64_t layer;
    char name[256];
    const char *note = NULL;
    if (arch == GGUF_ARCH_UNKNOWN || gguf_role_parse(arch, gguf, &role, &layer) != 0 ||
        gguf_role_hf_name(arch, role, layer, name, sizeof name, &note) != 0)
        return -1;
    *is_exps = role == GGUF_ROLE_FFN_GATE_EXPS || role == GGUF_ROLE_FFN_UP_EXPS ||
               role == GGUF_ROLE_FFN_DOWN_EXPS;
    *is_llama_qk = arch == GGUF_ARCH_LLAMA && (role == GGUF_ROLE_ATTN_Q || role == GGUF_ROLE_ATTN_K);
    const char *star = strchr(name, '*');
    if (star && expert >= 0)
        snprintf(out, size, "%.*s%lld%s", (int)(star - name), name, (long long)expert, star + 1);
    else
        snprintf(out, size, "%s", name);
    return 0;
}

/* Model module first, the internal map for architectures it does not know. */
static int map_name(const dv_model_info *mi, const char *gguf, int64_t expert, char *out,
                    size_t size, int *is_exps, int *is_llama_qk)
{
    if (hf_name_model(mi, gguf, expert, out, size, is_exps, is_llama_qk) == 0)
        return 0;
    *is_llama_qk = 0;
    if (hf_name(gguf, expert, out, size, is_exps) != 0)
        return -1;
    if (is_llama_like(mi->arch)) {
        const size_t n = strlen(gguf);
        *is_llama_qk = n > 14 && (!strcmp(gguf + n - 14, ".attn_q.weight") ||
                                  !strcmp(gguf + n - 14, ".attn_k.weight"));
    }
    return 0;
}

bool dv_ref_is_kv_b_part(const char *gguf_name)
{
    const char *p = strstr(gguf_name, ".attn_k_b.weight");
    const char *q = strstr(gguf_name, ".attn_v_b.weight");
    return (p && !p[16]) || (q && !q[16]);
}

static int is_llama_like(const char *arch)
{ /* llama's converter permutes attn_q/attn_k rows; these reuse it */
    return !strcmp(arch, "llama") || !strcmp(arch, "mistral") || !strcmp(arch, "granite");
}

/* numpy shape of a GGUF tensor: reversed ne over its n_dims (at least 1) */
static int np_shape(const gguf_tensor *t, int64_t *shape)
{
    const int nd = t->n_dims ? (int)t->n_dims : 1;
    for (int i = 0; i < nd; i++)
        shape[i] = t->ne[nd - 1 - i];
    return nd;
}

static int same_shape(const dv_st_tensor *s, const int64_t *shape, int nd)
{
    /* trailing/leading 1s aside, shapes must match exactly */
    int64_t a[8], b[8];
    int na = 0, nb = 0;
    for (int i = 0; i < s->n_dims; i++)
        if (s->shape[i] != 1)
            a[na++] = s->shape[i];
    for (int i = 0; i < nd; i++)
        if (shape[i] != 1)
            b[nb++] = shape[i];
    if (na != nb)
        return 0;
    for (int i = 0; i < na; i++)
        if (a[i] != b[i])
            return 0;
    return 1;
}

static void shape_str(char *out, size_t size, const int64_t *shape, int nd)
{
    int k = snprintf(out, size, "[");
    for (int i = 0; i < nd && (size_t)k < size; i++)
        k += snprintf(out + k, size - (size_t)k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if ((size_t)k < size)
        snprintf(out + k, size - (size_t)k, "]");
}

void dv_ref_begin(dv_ref_result *r, dv_ref_map *m, const dv_model_info *mi, const dv_st_set *st,
                  const gguf_tensor *t)
{
    memset(r, 0, sizeof *r);
    memset(m, 0, sizeof *m);
    r->expect_snr_db = dv_expect_snr_db(t->type);
    int is_exps, is_llama_qk;
    if (map_name(mi, t->name, 0, r->hf_name, sizeof r->hf_name, &is_exps, &is_llama_qk) != 0) {
        snprintf(r->status, sizeof r->status, "skipped");
        snprintf(r->note, sizeof r->note, "no HF name known for this tensor");
        return;
    }
    int64_t shape[4];
    const int nd = np_shape(t, shape);
    char want[96], have[96];
    if (is_exps) {
        /* [n_expert, a, b]: one HF tensor [a, b] per expert */
        if (nd != 3 || shape[0] > 1024) {
            snprintf(r->status, sizeof r->status, "skipped");
            snprintf(r->note, sizeof r->note, "unexpected expert tensor rank");
            return;
        }
        m->kind = 3;
        m->n_experts = shape[0];
        for (int64_t e = 0; e < shape[0]; e++) {
            char name[256];
            map_name(mi, t->name, e, name, sizeof name, &is_exps, &is_llama_qk);
            m->experts[e] = dv_st_find(st, name);
            if (!m->experts[e]) {
                snprintf(r->status, sizeof r->status, "missing");
                snprintf(r->note, sizeof r->note, "no %s in the reference", name);
                m->kind = 0;
                return;
            }
            if (!same_shape(m->experts[e], shape + 1, 2)) {
                shape_str(want, sizeof want, shape + 1, 2);
                shape_str(have, sizeof have, m->experts[e]->shape, m->experts[e]->n_dims);
                snprintf(r->status, sizeof r->status, "shape");
                snprintf(r->note, sizeof r->note, "%s is %s, expected %s", name, have, want);
                m->kind = 0;
                return;
            }
        }
        map_name(mi, t->name, -1, r->hf_name, sizeof r->hf_name, &is_exps, &is_llama_qk);
    } else {
        m->src = dv_st_find(st, r->hf_name);
        if (!m->src) {
            snprintf(r->status, sizeof r->status, "missing");
            snprintf(r->note, sizeof r->note, "no %s in the reference", r->hf_name);
            return;
        }
        if (!same_shape(m->src, shape, nd)) {
            shape_str(want, sizeof want, shape, nd);
            shape_str(have, sizeof have, m->src->shape, m->src->n_dims);
            snprintf(r->status, sizeof r->status, "shape");
            snprintf(r->note, sizeof r->note, "reference is %s, GGUF (numpy order) %s", have, want);
            return;
        }
        m->kind = 1;
        const size_t n = strlen(t->name);
        const int q = n > 14 && !strcmp(t->name + n - 14, ".attn_q.weight");
        if (is_llama_qk && nd == 2) {
            const int64_t heads = q ? mi->n_head : mi->n_head_kv;
            if (heads > 0 && shape[0] % heads == 0 && (shape[0] / heads) % 2 == 0) {
                m->kind = 2;
                m->head_dim = shape[0] / heads;
                snprintf(r->note, sizeof r->note,
                         "rows un-permuted per head (llama converter's RoPE permutation)");
            }
        }
    }
    if (m->src && m->src->dtype == DV_ST_OTHER) {
        snprintf(r->status, sizeof r->status, "skipped");
        snprintf(r->note, sizeof r->note, "reference dtype %s is not F32/F16/BF16",
                 m->src->dtype_name);
        m->kind = 0;
        return;
    }
    if (m->kind == 3)
        for (int64_t e = 0; e < m->n_experts; e++)
            if (m->experts[e]->dtype == DV_ST_OTHER) {
                snprintf(r->status, sizeof r->status, "skipped");
                snprintf(r->note, sizeof r->note, "reference dtype %s is not F32/F16/BF16",
                         m->experts[e]->dtype_name);
                m->kind = 0;
                return;
            }
    r->compared = true;
}

/* HF row of a GGUF row of a llama-permuted q/k tensor. */
static int64_t llama_hf_row(int64_t row, int64_t hd)
{
    const int64_t h = row / hd, w = row % hd;
    return h * hd + (w % 2) * (hd / 2) + w / 2;
}

void dv_ref_rows(dv_ref_result *r, const dv_ref_map *m, const gguf_tensor *t, const float *x,
                 int64_t row0, int64_t n_rows)
{
    if (!r->compared)
        return;
    const int64_t ne0 = t->ne[0];
    double err = 0, ref = 0;
    for (int64_t i = 0; i < n_rows; i++) {
        const int64_t row = row0 + i;
        const dv_st_tensor *src = m->src;
        int64_t base = row * ne0;
        if (m->kind == 2) {
            base = llama_hf_row(row, m->head_dim) * ne0;
        } else if (m->kind == 3) {
            const int64_t rows_per_expert = t->ne[1];
            src = m->experts[row / rows_per_expert];
            base = (row % rows_per_expert) * ne0;
        }
        const float *xr = x + i * ne0;
        for (int64_t c = 0; c < ne0; c++) {
            const double b = dv_st_get(src, base + c);
            const double d = (double)xr[c] - b;
            err += d * d;
            ref += b * b;
        }
    }
    r->err_sq += err;
    r->ref_sq += ref;
}

static void finish(dv_ref_result *r)
{
    r->rel_rms = r->ref_sq > 0 ? sqrt(r->err_sq / r->ref_sq) : (r->err_sq > 0 ? INFINITY : 0.0);
    r->snr_db = r->err_sq > 0 ? 10.0 * log10(r->ref_sq / r->err_sq) : INFINITY;
    if (isnan(r->err_sq))
        r->snr_db = -INFINITY;
    const bool ok = r->err_sq == 0 || r->snr_db >= r->expect_snr_db;
    snprintf(r->status, sizeof r->status, "%s", ok ? "ok" : "fail");
}

void dv_ref_end(dv_ref_result *r, const gguf_tensor *t)
{
    (void)t;
    if (r->compared)
        finish(r);
}

void dv_kv_b_compare(dv_ref_result *r, bool *roundtrip_ok, const dv_st_set *st, int64_t layer,
                     const gguf_tensor *kb, const float *k, const gguf_tensor *vb,
                     const float *v)
{
    memset(r, 0, sizeof *r);
    *roundtrip_ok = false;
    snprintf(r->hf_name, sizeof r->hf_name, "model.layers.%lld.self_attn.kv_b_proj.weight",
             (long long)layer);
    /* the worse of the two types sets the expectation */
    const double ek = dv_expect_snr_db(kb->type), ev = dv_expect_snr_db(vb->type);
    r->expect_snr_db = ek < ev ? ek : ev;
    const int64_t nope = kb->ne[0], lora = kb->ne[1], heads = kb->ne[2];
    const int64_t vh = vb->ne[1];
    if (vb->ne[0] != lora || vb->ne[2] != heads) {
        snprintf(r->status, sizeof r->status, "shape");
        snprintf(r->note, sizeof r->note, "attn_k_b ne [%lld, %lld, %lld] and attn_v_b ne "
                 "[%lld, %lld, %lld] disagree", (long long)nope, (long long)lora,
                 (long long)heads, (long long)vb->ne[0], (long long)vh, (long long)vb->ne[2]);
        return;
    }
    const int64_t rows = heads * (nope + vh);
    float *kv = malloc(sizeof(float) * (size_t)(rows * lora));
    if (!kv) {
        snprintf(r->status, sizeof r->status, "skipped");
        snprintf(r->note, sizeof r->note, "out of memory");
        return;
    }
    /* reassemble: per head, nope rows of k (k_b transposed) then vh rows of v */
    for (int64_t h = 0; h < heads; h++) {
        float *dst = kv + h * (nope + vh) * lora;
        for (int64_t i = 0; i < nope; i++)
            for (int64_t c = 0; c < lora; c++)
                dst[i * lora + c] = k[(h * lora + c) * nope + i];
        memcpy(dst + nope * lora, v + h * vh * lora, sizeof(float) * (size_t)(vh * lora));
    }
    /* split again: must give back k_b and v_b bit for bit */
    bool same = true;
    for (int64_t h = 0; h < heads && same; h++) {
        const float *src = kv + h * (nope + vh) * lora;
        for (int64_t i = 0; i < nope && same; i++)
            for (int64_t c = 0; c < lora; c++)
                if (memcmp(&src[i * lora + c], &k[(h * lora + c) * nope + i], 4)) {
                    same = false;
                    break;
                }
        if (memcmp(src + nope * lora, v + h * vh * lora, sizeof(float) * (size_t)(vh * lora)))
            same = false;
    }
    *roundtrip_ok = same;
    const dv_st_tensor *ref = dv_st_find(st, r->hf_name);
    if (!ref) {
        snprintf(r->status, sizeof r->status, "missing");
        snprintf(r->note, sizeof r->note, "no %s in the reference", r->hf_name);
        free(kv);
        return;
    }
    const int64_t want[2] = {rows, lora};
    if (!same_shape(ref, want, 2) || ref->dtype == DV_ST_OTHER) {
        char have[96];
        shape_str(have, sizeof have, ref->shape, ref->n_dims);
        snprintf(r->status, sizeof r->status, "shape");
        snprintf(r->note, sizeof r->note, "reference is %s %s, reassembled [%lld, %lld]",
                 ref->dtype_name, have, (long long)rows, (long long)lora);
        free(kv);
        return;
    }
    double err = 0, rs = 0;
    for (int64_t i = 0; i < rows * lora; i++) {
        const double b = dv_st_get(ref, i), d = (double)kv[i] - b;
        err += d * d;
        rs += b * b;
    }
    r->err_sq = err;
    r->ref_sq = rs;
    r->compared = true;
    snprintf(r->note, sizeof r->note, "reassembled from attn_k_b (transposed per head) and attn_v_b");
    finish(r);
    free(kv);
}
