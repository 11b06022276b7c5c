/*
 * --reference: GGUF tensors against the HF safetensors they were made from.
 *
 * The reference is read through libgguf's safetensors module (any dtype,
 * block-scaled FP8, NVFP4), dequantized a run of rows at a time. HF names and
 * llama's Q/K row permutation come from the model module (gguf/model.h:
 * gguf_role_parse, gguf_role_hf_name, gguf_llama_qk_row_to_hf); architectures
 * it does not know but that name tensors as llama does (mistral, granite) use
 * llama's table.
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

/* The floor a reference stored in a lossy format allows on its own: its own
 * quantization noise (E4M3 keeps 4 significant bits: about 31 dB on Gaussian
 * weights; NVFP4's E2M1 2 bits with a per-16 scale: about 20 dB). */
static double ref_floor_db(const gguf_st_weight *w)
{
    switch (w->format) {
    case GGUF_ST_FMT_FP8_SCALED: return 20.0;
    case GGUF_ST_FMT_NVFP4:
    case GGUF_ST_FMT_NVFP4_CT: return 10.0;
    default: break;
    }
    switch (w->data->dtype) {
    case GGUF_ST_F32:
    case GGUF_ST_F64: return 100.0;
    case GGUF_ST_F16: return 55.0;
    case GGUF_ST_BF16: return 40.0;
    case GGUF_ST_F8_E4M3:
    case GGUF_ST_F8_E5M2: return 20.0;
    default: return 1.0;
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

static bool is_llama_like(const char *arch)
{ /* llama's converter permutes attn_q/attn_k rows; these reuse it */
    return !strcmp(arch, "llama") || !strcmp(arch, "mistral") || !strcmp(arch, "granite");
}

/* The model module's HF name for a tensor, with "*" replaced by the expert
 * index when expert >= 0. Returns 0, or -1 when the module has none. */
static int map_name(const dv_model_info *mi, const char *gguf, int64_t expert, char *out,
                    size_t size, int *is_exps, int *is_llama_qk)
{
    gguf_arch arch = gguf_arch_from_name(mi->arch);
    if (arch == GGUF_ARCH_UNKNOWN && is_llama_like(mi->arch))
        arch = GGUF_ARCH_LLAMA;
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

bool dv_ref_is_kv_b_part(const char *gguf_name)
{
    const char *p = strstr(gguf_name, ".attn_k_b.weight");
    const char *q = strstr(gguf_name, ".attn_v_b.weight");
    return (p && !p[16]) || (q && !q[16]);
}

/* numpy shape of a GGUF tensor: reversed ne over its n_dims (at least 1) */
static int np_shape(const gguf_tensor *t, int64_t *shape)
{
    const int nd = t->n_dims ? (int)t->n_dims : 1;
    for (int i = 0; i < nd; i++)
        shape[i] = t->ne[nd - 1 - i];
    return nd;
}

static int same_shape(const gguf_st_weight *s, const int64_t *shape, int nd)
{
    /* trailing/leading 1s aside, shapes must match exactly */
    int64_t a[GGUF_ST_MAX_DIMS], b[8];
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

/* Find a reference weight; status "missing" / "skipped" when it cannot be used. */
static int find_ref(dv_ref_result *r, const gguf_st_set *st, const char *name, gguf_st_weight *w)
{
    gguf_error err;
    const int rc = gguf_st_weight_find(st, name, w, &err);
    if (rc == 0) {
        snprintf(r->ref_dtype, sizeof r->ref_dtype, "%s", gguf_st_dtype_name(w->data->dtype));
        snprintf(r->ref_format, sizeof r->ref_format, "%s", gguf_st_format_name(w->format));
        /* a lossy reference cannot vouch for more than its own precision */
        const double f = ref_floor_db(w);
        if (f < r->expect_snr_db)
            r->expect_snr_db = f;
        return 0;
    }
    if (rc == GGUF_E_NOT_FOUND && !gguf_st_set_tensor_find(st, name) &&
        !strstr(err.message, "_scale") && !strstr(err.message, "_packed")) {
        snprintf(r->status, sizeof r->status, "missing");
        snprintf(r->note, sizeof r->note, "no %s in the reference", name);
    } else { /* present but unusable: a scale missing or of the wrong shape */
        snprintf(r->status, sizeof r->status, "shape");
        snprintf(r->note, sizeof r->note, "%s", err.message);
    }
    return -1;
}

void dv_ref_map_free(dv_ref_map *m)
{
    free(m->experts);
    free(m->buf);
    memset(m, 0, sizeof *m);
}

void dv_ref_begin(dv_ref_result *r, dv_ref_map *m, const dv_model_info *mi, const gguf_st_set *st,
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
        if (nd != 3 || shape[0] < 1) {
            snprintf(r->status, sizeof r->status, "skipped");
            snprintf(r->note, sizeof r->note, "unexpected expert tensor rank");
            return;
        }
        m->experts = calloc((size_t)shape[0], sizeof *m->experts);
        if (!m->experts) {
            snprintf(r->status, sizeof r->status, "skipped");
            snprintf(r->note, sizeof r->note, "out of memory");
            return;
        }
        m->n_experts = shape[0];
        for (int64_t e = 0; e < shape[0]; e++) {
            char name[256];
            map_name(mi, t->name, e, name, sizeof name, &is_exps, &is_llama_qk);
            if (find_ref(r, st, name, &m->experts[e]) != 0) {
                dv_ref_map_free(m);
                return;
            }
            if (!same_shape(&m->experts[e], shape + 1, 2) || m->experts[e].cols != shape[2]) {
                shape_str(want, sizeof want, shape + 1, 2);
                shape_str(have, sizeof have, m->experts[e].shape, m->experts[e].n_dims);
                snprintf(r->status, sizeof r->status, "shape");
                snprintf(r->note, sizeof r->note, "%s is %s, expected %s", name, have, want);
                dv_ref_map_free(m);
                return;
            }
        }
        m->kind = 3;
        map_name(mi, t->name, -1, r->hf_name, sizeof r->hf_name, &is_exps, &is_llama_qk);
    } else {
        if (find_ref(r, st, r->hf_name, &m->src) != 0)
            return;
        if (!same_shape(&m->src, shape, nd) ||
            (m->src.cols != t->ne[0] && m->src.format != GGUF_ST_FMT_PLAIN)) {
            shape_str(want, sizeof want, shape, nd);
            shape_str(have, sizeof have, m->src.shape, m->src.n_dims);
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
    r->compared = true;
}

/* Reference elements for GGUF rows [row0, row0 + n) (each ne0 wide) into m->buf. */
static int ref_rows(dv_ref_map *m, const gguf_tensor *t, int64_t row0, int64_t n)
{
    const int64_t ne0 = t->ne[0] > 0 ? t->ne[0] : 1;
    const size_t need = (size_t)(n * ne0);
    if (need > m->buf_n) {
        float *b = realloc(m->buf, sizeof(float) * need);
        if (!b)
            return -1;
        m->buf = b;
        m->buf_n = need;
    }
    gguf_error err;
    if (m->kind == 1) {
        if (m->src.cols == ne0)
            return gguf_st_weight_rows(&m->src, row0, n, m->buf, &err);
        /* a plain reference whose last dimension differs only by 1s: element order */
        return gguf_st_tensor_to_f32(m->src.data, row0 * ne0, n * ne0, m->buf, &err);
    }
    for (int64_t i = 0; i < n;) {
        const int64_t row = row0 + i;
        if (m->kind == 2) { /* one row at a time: the permutation scatters them */
            const int64_t hf = gguf_llama_qk_row_to_hf(row, m->head_dim);
            if (gguf_st_weight_rows(&m->src, hf, 1, m->buf + i * ne0, &err) != 0)
                return -1;
            i++;
            continue;
        }
        /* experts: a run of rows inside one expert */
        const int64_t per = t->ne[1];
        const int64_t e = row / per, r = row % per;
        int64_t run = per - r;
        if (run > n - i)
            run = n - i;
        if (e >= m->n_experts ||
            gguf_st_weight_rows(&m->experts[e], r, run, m->buf + i * ne0, &err) != 0)
            return -1;
        i += run;
    }
    return 0;
}

void dv_ref_rows(dv_ref_result *r, dv_ref_map *m, const gguf_tensor *t, const float *x,
                 int64_t row0, int64_t n_rows)
{
    if (!r->compared)
        return;
    if (ref_rows(m, t, row0, n_rows) != 0) {
        r->compared = false;
        snprintf(r->status, sizeof r->status, "skipped");
        snprintf(r->note, sizeof r->note, "cannot read the reference rows (out of memory)");
        return;
    }
    const int64_t n = n_rows * (t->ne[0] > 0 ? t->ne[0] : 1);
    double err = 0, ref = 0;
    for (int64_t i = 0; i < n; i++) {
        const double b = m->buf[i];
        const double d = (double)x[i] - b;
        err += d * d;
        ref += b * b;
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

void dv_kv_b_compare(dv_ref_result *r, const gguf_st_set *st, int64_t layer,
                     const gguf_tensor *kb, const float *k, const gguf_tensor *vb,
                     const float *v)
{
    memset(r, 0, sizeof *r);
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
    gguf_st_weight ref;
    if (find_ref(r, st, r->hf_name, &ref) != 0)
        return;
    const int64_t rows = heads * (nope + vh);
    const int64_t want[2] = {rows, lora};
    if (!same_shape(&ref, want, 2) || ref.cols != lora) {
        char have[96];
        shape_str(have, sizeof have, ref.shape, ref.n_dims);
        snprintf(r->status, sizeof r->status, "shape");
        snprintf(r->note, sizeof r->note, "reference is %s %s, reassembled [%lld, %lld]",
                 r->ref_dtype, have, (long long)rows, (long long)lora);
        return;
    }
    float *kv = malloc(sizeof(float) * (size_t)(rows * lora));
    float *rf = malloc(sizeof(float) * (size_t)(rows * lora));
    gguf_error err;
    if (!kv || !rf || gguf_st_weight_dequant(&ref, rf, (uint64_t)(rows * lora), &err) != 0) {
        snprintf(r->status, sizeof r->status, "skipped");
        snprintf(r->note, sizeof r->note, "out of memory");
        free(kv);
        free(rf);
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
    double e2 = 0, rs = 0;
    for (int64_t i = 0; i < rows * lora; i++) {
        const double b = rf[i], d = (double)kv[i] - b;
        e2 += d * d;
        rs += b * b;
    }
    r->err_sq = e2;
    r->ref_sq = rs;
    r->compared = true;
    snprintf(r->note, sizeof r->note, "reassembled from attn_k_b (transposed per head) and "
             "attn_v_b; reference %s %s", r->ref_dtype, r->ref_format);
    finish(r);
    free(kv);
    free(rf);
}
