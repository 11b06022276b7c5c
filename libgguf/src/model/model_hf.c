/*
 * A model over a Hugging Face checkpoint (gguf_model_open_hf): config.json
 * for the hyper-parameters (model_hf_config.c), the safetensors module for
 * the weights, and every weight presented in the layout a GGUF conversion
 * would give it, so that the forward pass, the roles and the checks are the
 * GGUF model's. Each tensor info is a description (type F32, no data); its
 * rows come from gguf_model_tensor_rows, dequantized from the checkpoint:
 *
 *   GGUF tensor (ne)                      HF weight(s)               GGUF row r is
 *   most roles [in, out] / [n]            one tensor [out, in] / [n] HF row r
 *   llama attn_q / attn_k                 q_proj / k_proj            HF row qk_row_to_hf(r)
 *   ffn_{gate,up}_exps [in, ff, n_exp]    experts.E.*_proj [ff, in]  expert r / ff, row r % ff
 *   ffn_down_exps [ff, E, n_exp]          experts.E.down_proj [E, ff]  expert r / E, row r % E
 *   attn_kv_b [kv_lora, heads*(nope+v)]   kv_b_proj, as is (the forward splits it)
 *   rope_freqs [n_rot/2]                  none: computed from rope_type "llama3"
 *   output (tied: absent)                 lm_head, unless tie_word_embeddings
 *
 * NextN/MTP layers (model.layers.N with N >= num_hidden_layers) are not part
 * of the model, as the forward skips them for GGUF. Any other tensor that no
 * role takes (a bias the forward has no place for, ...) is an error: a
 * reference that silently drops weights would be wrong without saying so.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/error_lib.h"
#include "gguf/hash.h"
#include "gguf/safetensors.h"
#include "model/model_internal.h"
#include "util/small_file.h"

enum { HF_ROWS, HF_QK_PERM, HF_EXPERTS, HF_FLOATS };

typedef struct hf_src {
    int kind;
    int64_t w0, n_w;     /* weights hf->w[w0 .. w0+n_w): one, or one per expert */
    int64_t rows_per;    /* HF_EXPERTS: rows of one expert; HF_QK_PERM: head width */
    uint64_t row_bytes;  /* stored bytes one row reads (statistics) */
} hf_src;

struct model_hf {
    gguf_st_set *set;
    model_hf_config cfg;
    char *config_path;
    int64_t n, cap;      /* tensors */
    gguf_tensor *ts;
    hf_src *src;
    char (*gname)[MODEL_HF_LEN]; /* GGUF names of ts */
    gguf_st_weight *w;   /* the weights the sources read */
    int64_t n_w, cap_w;
    char **wname;        /* their HF names (gguf_st_weight borrows the name) */
    float *rope_ff;      /* llama3 rope_freqs */
    long page;
};

void model_hf_free(model_hf *hf)
{
    if (!hf)
        return;
    for (int64_t i = 0; i < hf->n_w; i++)
        free(hf->wname[i]);
    free(hf->wname);
    free(hf->w);
    free(hf->ts);
    free(hf->src);
    free(hf->gname);
    free(hf->rope_ff);
    free(hf->config_path);
    gguf_st_set_free(hf->set);
    free(hf);
}

bool gguf_model_path_is_hf(const char *path)
{
    if (!path)
        return false;
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return true;
    const size_t n = strlen(path);
    return (n >= 5 && !strcmp(path + n - 5, ".json")) ||
           (n >= 12 && !strcmp(path + n - 12, ".safetensors"));
}

/* ------------------------------------------------------------ building */

typedef struct build {
    gguf_model *m;
    model_hf *hf;
    const gguf_hparams *hp;
    gguf_error *err;
    char missing[480];
    size_t mlen;
    int n_missing;
    const gguf_st_tensor **used; /* stored tensors some weight reads */
    int64_t n_used, cap_used;
} build;

static int nomem(build *b)
{
    return gguf_fail(b->err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "%s: out of memory", b->m->name);
}

static int mark_used(build *b, const gguf_st_tensor *t)
{
    if (!t)
        return 0;
    if (b->n_used == b->cap_used) {
        const int64_t cap = b->cap_used ? 2 * b->cap_used : 256;
        const gguf_st_tensor **u = realloc(b->used, (size_t)cap * sizeof *u);
        if (!u)
            return nomem(b);
        b->used = u;
        b->cap_used = cap;
    }
    b->used[b->n_used++] = t;
    return 0;
}

/* Is the stored tensor `name` (or compressed-tensors' NAME_packed) there? */
static bool stored(const gguf_st_set *s, const char *name)
{
    char packed[300];
    snprintf(packed, sizeof packed, "%s_packed", name);
    return gguf_st_set_tensor_find(s, name) || gguf_st_set_tensor_find(s, packed);
}

/* One more weight; *out its index. 1 when absent (nothing added). */
static int add_weight(build *b, const char *name, int64_t *out)
{
    model_hf *hf = b->hf;
    if (!stored(hf->set, name))
        return 1;
    if (hf->n_w == hf->cap_w) {
        const int64_t cap = hf->cap_w ? 2 * hf->cap_w : 256;
        gguf_st_weight *w = realloc(hf->w, (size_t)cap * sizeof *w);
        if (w)
            hf->w = w;
        char **wn = w ? realloc(hf->wname, (size_t)cap * sizeof *wn) : NULL;
        if (!wn)
            return nomem(b);
        hf->wname = wn;
        hf->cap_w = cap;
    }
    char *nm = strdup(name);
    if (!nm)
        return nomem(b);
    int rc = gguf_st_weight_find(hf->set, nm, &hf->w[hf->n_w], b->err);
    if (rc) {
        free(nm);
        return rc;
    }
    const gguf_st_weight *w = &hf->w[hf->n_w];
    if ((rc = mark_used(b, w->data)) || (rc = mark_used(b, w->scale)) ||
        (rc = mark_used(b, w->scale2))) {
        free(nm);
        return rc;
    }
    hf->wname[hf->n_w] = nm;
    *out = hf->n_w++;
    return 0;
}

static void note_missing(build *b, const char *name)
{
    if (b->n_missing++ < 6 && b->mlen + strlen(name) + 3 < sizeof b->missing)
        b->mlen += (size_t)snprintf(b->missing + b->mlen, sizeof b->missing - b->mlen, "%s%s",
                                    b->mlen ? ", " : "", name);
}

static int bad_shape(build *b, const gguf_st_weight *w, const int64_t *want, int nd)
{
    char got[96] = "", exp[96] = "";
    size_t g = 0, e = 0;
    for (int d = 0; d < w->n_dims; d++)
        g += (size_t)snprintf(got + g, sizeof got - g, "%s%lld", d ? ", " : "",
                              (long long)w->shape[d]);
    for (int d = nd - 1; d >= 0; d--)
        e += (size_t)snprintf(exp + e, sizeof exp - e, "%s%lld", d < nd - 1 ? ", " : "",
                              (long long)want[d]);
    const gguf_hparams *hp = b->hp;
    return gguf_fail(b->err, GGUF_E_BAD_SHAPE, w->data->file_offset,
                     "%s: %s: shape [%s], expected [%s] from %s (hidden_size %lld, "
                     "num_attention_heads %lld, head widths %lld/%lld)",
                     gguf_st_file_path(gguf_st_set_file(b->hf->set, w->data->file)), w->name,
                     got, exp, b->hf->config_path, (long long)hp->n_embd, (long long)hp->n_head,
                     (long long)hp->n_embd_head_k, (long long)hp->n_embd_head_v);
}

/* The tensor info of (il, role) with shape ne (nd dims) and its source. */
static int add_tensor(build *b, int64_t il, gguf_role r, const int64_t ne[4], uint32_t nd,
                      hf_src src, uint64_t file_offset, uint32_t part)
{
    model_hf *hf = b->hf;
    if (hf->n == hf->cap) {
        const int64_t cap = hf->cap ? 2 * hf->cap : 64;
        gguf_tensor *ts = realloc(hf->ts, (size_t)cap * sizeof *ts);
        if (ts)
            hf->ts = ts;
        hf_src *ss = ts ? realloc(hf->src, (size_t)cap * sizeof *ss) : NULL;
        if (ss)
            hf->src = ss;
        char(*gn)[MODEL_HF_LEN] = ss ? realloc(hf->gname, (size_t)cap * sizeof *gn) : NULL;
        if (!gn)
            return nomem(b);
        hf->gname = gn;
        hf->cap = cap;
    }
    gguf_tensor *t = &hf->ts[hf->n];
    memset(t, 0, sizeof *t);
    if (model_role_gguf_name(r, il, hf->gname[hf->n], MODEL_HF_LEN))
        return gguf_fail(b->err, GGUF_E_LIMIT, GGUF_NO_OFFSET, "%s: layer %lld: name too long",
                         b->m->name, (long long)il);
    t->type = GGUF_TYPE_F32; /* the rows come as float32 */
    t->n_dims = nd;
    t->n_elements = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        t->ne[d] = d < 4 && ne[d] > 0 ? ne[d] : 1;
        t->n_elements *= t->ne[d];
    }
    t->nbytes = (uint64_t)t->n_elements * sizeof(float);
    t->file_offset = file_offset;
    t->part = part;
    t->index = (uint32_t)hf->n;
    hf->src[hf->n++] = src;
    return 0;
}

static uint64_t stored_row_bytes(const gguf_st_weight *w)
{
    uint64_t n = w->data->nbytes + (w->scale ? w->scale->nbytes : 0) +
                 (w->scale2 ? w->scale2->nbytes : 0);
    return w->rows > 0 ? n / (uint64_t)w->rows : n;
}

/* Does a weight have the logical shape of a GGUF tensor nd dims of ne? */
static bool shape_is(const gguf_st_weight *w, const int64_t *ne, uint32_t nd)
{
    if (nd == 1)
        return w->n_dims == 1 && w->shape[0] == ne[0];
    return w->n_dims == 2 && w->shape[0] == ne[1] && w->shape[1] == ne[0];
}

/* The weights of (il, role): one tensor, or one per expert ("*" in the name). */
static int add_role(build *b, int64_t il, gguf_role r, int want)
{
    model_hf *hf = b->hf;
    const gguf_hparams *hp = b->hp;
    char pat[MODEL_HF_LEN];
    int64_t ne[4];
    uint32_t nd;
    if (gguf_role_hf_name(hp->arch, r, il, pat, sizeof pat, NULL) != 0 ||
        model_expected_shape(hp, il, r, ne, &nd) != 0)
        return 0; /* no HF counterpart */
    const char *star = strchr(pat, '*');
    const int64_t n_w = star ? ne[2] : 1;
    hf_src src = {star ? HF_EXPERTS : HF_ROWS, hf->n_w, n_w, star ? ne[1] : 0, 0};
    if (hp->llama_qk_permuted && (r == GGUF_ROLE_ATTN_Q || r == GGUF_ROLE_ATTN_K)) {
        src.kind = HF_QK_PERM;
        src.rows_per = hp->n_embd_head_k;
    }
    for (int64_t e = 0; e < n_w; e++) {
        char name[MODEL_HF_LEN + 24];
        if (star)
            snprintf(name, sizeof name, "%.*s%lld%s", (int)(star - pat), pat, (long long)e,
                     star + 1);
        else
            snprintf(name, sizeof name, "%s", pat);
        int64_t wi = 0;
        int rc = add_weight(b, name, &wi);
        if (rc == 1) {
            if (want == 1)
                note_missing(b, name);
            if (e > 0 && want == 2)
                note_missing(b, name); /* some experts but not all */
            return 0;
        }
        if (rc)
            return rc;
        if (!shape_is(&hf->w[wi], ne, star ? 2 : nd))
            return bad_shape(b, &hf->w[wi], ne, star ? 2 : (int)nd);
        src.row_bytes = stored_row_bytes(&hf->w[wi]);
    }
    const gguf_st_tensor *d0 = hf->w[src.w0].data;
    return add_tensor(b, il, r, ne, nd, src, d0->file_offset, d0->file);
}

/* Llama 3's per-frequency divisors, as transformers' "llama3" RoPE and the
 * llama.cpp converter compute them (float32 steps): 1 for wavelengths below
 * original/high_freq_factor, factor above original/low_freq_factor, between
 * them 1 / ((1 - s) / factor + s), s = (original / wavelength - low) / (high - low). */
static int add_rope_freqs(build *b)
{
    model_hf *hf = b->hf;
    const model_hf_config *c = &hf->cfg;
    const int64_t n = b->hp->n_rot / 2;
    if (!(hf->rope_ff = malloc((size_t)(n > 0 ? n : 1) * sizeof(float))))
        return nomem(b);
    const float base = (float)b->hp->rope_freq_base, factor = (float)c->l3_factor;
    const float lo = (float)c->l3_low, hi = (float)c->l3_high, old = (float)c->l3_orig;
    const float dim = (float)(2 * n), lo_wl = old / lo, hi_wl = old / hi;
    for (int64_t i = 0; i < n; i++) {
        const float freq = 1.0f / powf(base, (float)(2 * i) / dim);
        const float wl = 2.0f * 3.14159265358979323846f / freq;
        float f = 1.0f;
        if (wl > lo_wl) {
            f = factor;
        } else if (wl >= hi_wl) {
            const float s = (old / wl - lo) / (hi - lo);
            f = 1.0f / ((1.0f - s) / factor + s);
        }
        hf->rope_ff[i] = f;
    }
    int64_t ne[4] = {n, 1, 1, 1};
    int rc = add_tensor(b, -1, GGUF_ROLE_ROPE_FREQS, ne, 1, (hf_src){HF_FLOATS, 0, 0, 0, 0}, 0,
                        0);
    if (!rc)
        hf->ts[hf->n - 1].data = (const uint8_t *)hf->rope_ff;
    return rc;
}

static int cmp_ptr(const void *a, const void *b)
{
    const uintptr_t x = (uintptr_t)*(const void *const *)a, y = (uintptr_t)*(const void *const *)b;
    return x < y ? -1 : x > y;
}

/* "model.layers.N." with N >= num_hidden_layers: a NextN/MTP layer. */
static bool mtp_layer(const char *name, int64_t n_layer)
{
    if (strncmp(name, "model.layers.", 13) != 0)
        return false;
    char *end;
    const long long il = strtoll(name + 13, &end, 10);
    return end != name + 13 && *end == '.' && il >= n_layer;
}

static bool ends_with(const char *s, const char *suffix)
{
    const size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* Every stored tensor is read by some weight, is a companion (scales), or is
 * something the forward rightly ignores; anything else is refused. */
static int check_unused(build *b)
{
    const gguf_st_set *s = b->hf->set;
    qsort(b->used, (size_t)b->n_used, sizeof *b->used, cmp_ptr);
    int64_t n_bad = 0;
    const char *first = NULL;
    for (int64_t i = 0; i < gguf_st_set_tensor_count(s); i++) {
        const gguf_st_tensor *t = gguf_st_set_tensor_at(s, i);
        if (bsearch(&t, b->used, (size_t)b->n_used, sizeof *b->used, cmp_ptr) ||
            gguf_st_is_companion(s, t->name) || mtp_layer(t->name, b->hp->n_layer) ||
            ends_with(t->name, ".rotary_emb.inv_freq") || ends_with(t->name, ".k_scale") ||
            ends_with(t->name, ".v_scale") ||
            (b->hp->tied_embeddings && !strcmp(t->name, "lm_head.weight")))
            continue;
        if (!first)
            first = t->name;
        n_bad++;
    }
    if (!n_bad)
        return 0;
    return gguf_fail(b->err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                     "%s: %lld tensor(s) that no role of the %s forward takes (first: %s): "
                     "refusing to run without them",
                     b->m->name, (long long)n_bad, b->hp->arch_name, first);
}

/* Any layer holds the HF tensor of a role. */
static bool any_layer(const build *b, gguf_role r)
{
    char name[MODEL_HF_LEN];
    for (int64_t il = 0; il < b->hp->n_layer; il++)
        if (gguf_role_hf_name(b->hp->arch, r, il, name, sizeof name, NULL) == 0 &&
            stored(b->hf->set, name))
            return true;
    return false;
}

static int build_tensors(build *b)
{
    model_hf *hf = b->hf;
    gguf_hparams *hp = &b->m->hp;
    hp->attn_qkv_bias = any_layer(b, GGUF_ROLE_ATTN_Q_BIAS);
    hp->attn_qk_norm = any_layer(b, GGUF_ROLE_ATTN_Q_NORM);
    hp->has_exp_probs_b = hp->n_expert > 0 && any_layer(b, GGUF_ROLE_FFN_EXP_PROBS_B);
    hp->mla_kv_b_split = false; /* kv_b_proj is one tensor: the legacy layout */
    if (!hp->tied_embeddings && !stored(hf->set, "lm_head.weight"))
        return gguf_fail(b->err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET,
                         "%s: lm_head.weight: missing, and %s says tie_word_embeddings is false",
                         b->m->name, hf->config_path);
    if (hf->cfg.l3_factor > 0 && hp->arch != GGUF_ARCH_LLAMA)
        return gguf_fail(b->err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                         "%s: rope_type llama3: per-frequency factors are llama's only",
                         hf->config_path);
    int rc = 0;
    for (int64_t il = -1; il < hp->n_layer && !rc; il++)
        for (int r = 1; r < GGUF_ROLE_COUNT && !rc; r++) {
            const int want = model_role_expected(hp, il, (gguf_role)r);
            if (!want || (r == GGUF_ROLE_OUTPUT && hp->tied_embeddings))
                continue;
            if (r == GGUF_ROLE_ROPE_FREQS)
                rc = hf->cfg.l3_factor > 0 ? add_rope_freqs(b) : 0;
            else
                rc = add_role(b, il, (gguf_role)r, want);
        }
    if (rc)
        return rc;
    if (b->n_missing)
        return gguf_fail(b->err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET,
                         "%s: missing %d tensor(s) the %s forward needs: %s%s", b->m->name,
                         b->n_missing, hp->arch_name, b->missing,
                         b->n_missing > 6 ? ", ..." : "");
    return check_unused(b);
}

/* The folder of a checkpoint path (itself, or the folder of a file in it). */
static char *folder_of(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return strdup(path);
    const char *slash = strrchr(path, '/');
    return slash ? strndup(path, (size_t)(slash - path) + (slash == path)) : strdup(".");
}

int gguf_model_open_hf(gguf_model **out, const char *path, gguf_error *err)
{
    gguf_error_clear(err);
    if (!out || !path)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_model_open_hf: NULL");
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0)
        return gguf_fail_errno(err, errno == ENOENT ? GGUF_E_NOT_FOUND : GGUF_E_IO, errno, "%s",
                               path);
    gguf_model *m = calloc(1, sizeof *m);
    model_hf *hf = calloc(1, sizeof *hf);
    char *dir = folder_of(path), *text = NULL;
    build b = {.m = m, .hf = hf, .err = err};
    int rc = 0;
    if (!m || !hf || !dir || !(m->name = strdup(path)) ||
        !(hf->config_path = malloc(strlen(dir) + 16))) {
        rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "%s: out of memory", path);
        goto done;
    }
    m->hf = hf;
    hf->page = sysconf(_SC_PAGESIZE);
    sprintf(hf->config_path, "%s/config.json", dir);
    size_t len = 0;
    if ((rc = gguf_read_small_file(hf->config_path, GGUF_ST_MAX_CONFIG, &text, &len, err)) ||
        (rc = model_hf_config_parse(&hf->cfg, text, len, hf->config_path, err)))
        goto done;
    m->hp = hf->cfg.hp;
    b.hp = &m->hp;
    /* a config.json path names its folder */
    if ((rc = gguf_st_set_open(&hf->set, ends_with(path, "config.json") ? dir : path, err)))
        goto done;
    const gguf_st_quant *q = gguf_st_set_quant(hf->set);
    if (q->scheme == GGUF_ST_SCHEME_OTHER) {
        rc = gguf_fail(err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                       "%s: quantization '%s' (%s) is not one the safetensors module dequantizes "
                       "(fp8 block-scaled, FP8, NVFP4, compressed-tensors FP8/NVFP4)",
                       path, q->method, q->source);
        goto done;
    }
    if ((rc = build_tensors(&b)))
        goto done;
    const gguf_tensor **tp = malloc((size_t)(hf->n ? hf->n : 1) * sizeof *tp);
    if (!tp) {
        rc = nomem(&b);
        goto done;
    }
    for (int64_t i = 0; i < hf->n; i++) {
        hf->ts[i].name = hf->gname[i];
        tp[i] = &hf->ts[i];
    }
    rc = model_assemble(m, tp, hf->n, 0, err);
    free(tp);
done:
    free(text);
    free(dir);
    free(b.used);
    if (rc) {
        if (!m || !m->hf)
            model_hf_free(hf);
        gguf_model_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

/* ------------------------------------------------------------ reading */

const gguf_st_set *gguf_model_checkpoint(const gguf_model *m)
{
    return m && m->hf ? m->hf->set : NULL;
}

void gguf_model_hf_tokens(const gguf_model *m, int32_t *bos, int32_t *eos)
{
    if (bos)
        *bos = m && m->hf ? m->hf->cfg.bos : -1;
    if (eos)
        *eos = m && m->hf ? m->hf->cfg.eos : -1;
}

/* Drop the mapped pages wholly inside rows [r0, r0+n) of a stored tensor of
 * `rows` rows: they are read again on demand (read-only file mapping). */
static void drop(const model_hf *hf, const gguf_st_tensor *t, int64_t rows, int64_t r0,
                 int64_t n)
{
    if (!t || rows <= 0 || hf->page <= 0)
        return;
    const uint64_t rb = t->nbytes / (uint64_t)rows;
    uintptr_t a = (uintptr_t)(t->data + (uint64_t)r0 * rb), e = a + (uintptr_t)(rb * (uint64_t)n);
    a = (a + (uintptr_t)hf->page - 1) & ~(uintptr_t)(hf->page - 1);
    e &= ~(uintptr_t)(hf->page - 1);
    if (e > a)
        madvise((void *)a, e - a, MADV_DONTNEED);
}

static int rows_of(const model_hf *hf, const gguf_st_weight *w, int64_t r0, int64_t n,
                   float *dst, uint32_t flags, gguf_error *err)
{
    const int rc = gguf_st_weight_rows(w, r0, n, dst, err);
    if (!rc && (flags & GGUF_MODEL_ROWS_DROP_PAGES)) {
        drop(hf, w->data, w->rows, r0, n);
        if (w->format != GGUF_ST_FMT_FP8_SCALED) /* NVFP4 group scales: a row each */
            drop(hf, w->scale, w->rows, r0, n);
    }
    return rc;
}

int gguf_model_tensor_rows(const gguf_model *m, const gguf_model_tensor *mt, int64_t row0,
                           int64_t n_rows, float *dst, uint32_t flags, uint64_t *bytes_read,
                           gguf_error *err)
{
    if (bytes_read)
        *bytes_read = 0;
    if (!m || !m->hf || !mt || mt < m->mt || mt >= m->mt + m->n || !dst)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "gguf_model_tensor_rows: not a tensor of a model over a checkpoint");
    const model_hf *hf = m->hf;
    const gguf_tensor *t = mt->t;
    const hf_src *s = &hf->src[t->index];
    const int64_t W = t->ne[0], rows = W > 0 ? t->n_elements / W : 0;
    if (row0 < 0 || n_rows < 0 || row0 > rows || n_rows > rows - row0)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "%s: rows [%lld, +%lld) outside its %lld rows", t->name,
                         (long long)row0, (long long)n_rows, (long long)rows);
    int rc = 0;
    switch (s->kind) {
    case HF_FLOATS:
        memcpy(dst, hf->rope_ff + row0 * W, (size_t)(n_rows * W) * sizeof(float));
        return 0;
    case HF_ROWS:
        rc = rows_of(hf, &hf->w[s->w0], row0, n_rows, dst, flags, err);
        break;
    case HF_QK_PERM:
        /* GGUF row h*hd + 2i + j is HF row h*hd + j*hd/2 + i */
        for (int64_t r = 0; r < n_rows && !rc; r++)
            rc = rows_of(hf, &hf->w[s->w0], gguf_llama_qk_row_to_hf(row0 + r, s->rows_per), 1,
                         dst + r * W, flags, err);
        break;
    default: /* HF_EXPERTS: runs split at expert boundaries */
        for (int64_t r = 0; r < n_rows && !rc;) {
            const int64_t g = row0 + r, e = g / s->rows_per, lr = g % s->rows_per;
            const int64_t k = s->rows_per - lr < n_rows - r ? s->rows_per - lr : n_rows - r;
            rc = rows_of(hf, &hf->w[s->w0 + e], lr, k, dst + r * W, flags, err);
            r += k;
        }
    }
    if (!rc && bytes_read)
        *bytes_read = s->row_bytes * (uint64_t)n_rows;
    return rc;
}

/* ------------------------------------------------------------ digest */

int gguf_model_hf_digest(const gguf_model *m, gguf_digest *out, gguf_error *err)
{
    if (!m || !m->hf || !out)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "gguf_model_hf_digest: not a model over a checkpoint");
    gguf_hasher *h;
    if (gguf_hasher_create(&h))
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    const gguf_st_set *s = m->hf->set;
    for (int64_t i = 0; i < gguf_st_set_tensor_count(s); i++) {
        const gguf_st_tensor *t = gguf_st_set_tensor_at(s, i);
        uint8_t rec[4 + 4 + 8 * GGUF_ST_MAX_DIMS + 16];
        size_t k = 0;
        const uint32_t dt = (uint32_t)t->dtype, nd = (uint32_t)t->n_dims;
        memcpy(rec + k, &dt, 4);
        k += 4;
        memcpy(rec + k, &nd, 4);
        k += 4;
        for (int d = 0; d < t->n_dims; d++, k += 8)
            memcpy(rec + k, &t->shape[d], 8);
        gguf_digest dg;
        gguf_digest_bytes(t->data, (size_t)t->nbytes, &dg);
        for (int j = 7; j >= 0; j--)
            rec[k++] = (uint8_t)(dg.hi >> (8 * j));
        for (int j = 7; j >= 0; j--)
            rec[k++] = (uint8_t)(dg.lo >> (8 * j));
        gguf_hasher_update(h, t->name, strlen(t->name) + 1);
        gguf_hasher_update(h, rec, k);
    }
    gguf_hasher_final(h, out);
    gguf_hasher_free(h);
    return 0;
}
