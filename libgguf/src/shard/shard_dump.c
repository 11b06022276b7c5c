/*
 * Engine dumps (gguf/shard_dump.h): the engine's parameters built from a shard
 * plan, written in vLLM's sharded-state layout, and a dump checked against the
 * plan with each differing tensor matched against the fault catalog.
 *
 *   DIR/model-rank-0-part-0.safetensors   rank 0: qkv_proj, o_proj, gate_up_proj, ...
 *   DIR/model-rank-1-part-0.safetensors   rank 1: the same names, its own slices
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error_lib.h"
#include "gguf/dequant.h"
#include "gguf/model.h"
#include "gguf/output.h"
#include "gguf/safetensors.h"
#include "gguf/shard_dump.h"
#include "gguf/types.h"

/* ---- names ---- */

static int replace(const char *s, const char *from, const char *to, char *out, size_t n)
{
    const char *p = strstr(s, from);
    if (!p)
        return -1;
    return (size_t)snprintf(out, n, "%.*s%s%s", (int)(p - s), s, to, p + strlen(from)) < n ? 0
                                                                                          : -1;
}

static int param_name(const gguf_shard_tensor *e, char *out, size_t n)
{
    if (!e->hf_name)
        return -1;
    const char *f = e->fused;
    if (f && !strcmp(f, "qkv_proj")) {
        static const char *parts[] = {"q_proj", "k_proj", "v_proj"};
        for (int k = 0; k < 3; k++)
            if (replace(e->hf_name, parts[k], "qkv_proj", out, n) == 0)
                return 0;
        return -1;
    }
    if (f && strstr(f, "gate_up_proj"))
        return replace(e->hf_name, "gate_proj", "gate_up_proj", out, n) == 0 ||
                       replace(e->hf_name, "up_proj", "gate_up_proj", out, n) == 0
                   ? 0
                   : -1;
    if (f && !strncmp(f, "experts.w", 9)) {
        const char *p = strstr(e->hf_name, "experts.");
        if (!p)
            return -1;
        return (size_t)snprintf(out, n, "%.*sexperts.%s_weight", (int)(p - e->hf_name),
                                e->hf_name, f + 8) < n ? 0 : -1;
    }
    return (size_t)snprintf(out, n, "%s", e->hf_name) < n ? 0 : -1;
}

int gguf_dump_params(const gguf_shard_plan *p, gguf_dump_param **out, int64_t *n,
                     gguf_error *err)
{
    const int64_t ne = gguf_shard_plan_count(p);
    const gguf_hparams *hp = gguf_model_hparams(gguf_shard_plan_model(p));
    gguf_dump_param *v = calloc((size_t)ne + 1, sizeof *v);
    if (!v)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    int64_t k = 0;
    for (int64_t i = 0; i < ne; i++) {
        const gguf_shard_tensor *e = gguf_shard_plan_at(p, i);
        if (!e->consumed ||
            ((e->role == GGUF_ROLE_ATTN_K_B || e->role == GGUF_ROLE_ATTN_V_B) && !e->is_virtual))
            continue;
        char name[256];
        if (param_name(e, name, sizeof name) != 0)
            continue;
        int64_t j = 0;
        while (j < k && strcmp(v[j].name, name))
            j++;
        if (j == k) {
            snprintf(v[k].name, sizeof v[k].name, "%s", name);
            v[k].experts = e->rule == GGUF_RULE_EXPERT;
            v[k].optional = e->layer >= hp->n_layer_main;
            k++;
        }
        if (v[j].n_entries < GGUF_DUMP_MAX_PARTS) {
            /* slot order */
            int at = v[j].n_entries++;
            while (at > 0 && gguf_shard_plan_at(p, v[j].entries[at - 1])->slot > e->slot) {
                v[j].entries[at] = v[j].entries[at - 1];
                at--;
            }
            v[j].entries[at] = (int32_t)i;
        }
    }
    *out = v;
    *n = k;
    return 0;
}

static int64_t prod(const int64_t ne[4])
{
    return ne[0] * ne[1] * ne[2] * ne[3];
}

/* llama's attn_q / attn_k, whose rows the converter permuted within each head. */
static bool qk_permuted(const gguf_shard_plan *p, const gguf_shard_tensor *e)
{
    const gguf_hparams *hp = gguf_model_hparams(gguf_shard_plan_model(p));
    return hp->llama_qk_permuted && (e->role == GGUF_ROLE_ATTN_Q || e->role == GGUF_ROLE_ATTN_K) &&
           e->t && e->t->data && e->ne[2] == 1 && e->ne[3] == 1 && hp->n_embd_head_k > 1 &&
           e->ne[1] % hp->n_embd_head_k == 0;
}

/*
 * Rank r's slice of entry i as the engine holds it: the plan cuts row ranges
 * [lo, hi) of the tensor; an engine cuts them from the HF tensor, whose row j is
 * the GGUF's row gguf_llama_qk_row_from_hf(j). So the rows of every piece taken
 * from a permuted q/k are read again through that map (a row range that is not
 * whole heads, as kv-heads-split cuts, gets the HF rows the engine would).
 */
static int qk_rows_hf(const gguf_shard_plan *p, int64_t i, int r, float *out, gguf_error *err)
{
    const gguf_shard_tensor *e = gguf_shard_plan_at(p, i);
    const gguf_shard_slice *s = &e->ranks[r];
    const int64_t hd = gguf_model_hparams(gguf_shard_plan_model(p))->n_embd_head_k;
    if (e->cat_dim != 1 || e->n_dims != 2)
        return 0;
    float *tmp = NULL;
    int64_t tmp_n = 0;
    int rc = 0;
    for (int32_t k = 0; k < s->n_pieces && !rc; k++) {
        const gguf_shard_piece *pc = &s->pieces[k];
        const gguf_shard_tensor *src = gguf_shard_plan_at(p, pc->src);
        if (pc->transpose || !qk_permuted(p, src))
            continue;
        const int64_t ne0 = src->ne[0], w0 = pc->hi[0] - pc->lo[0];
        if (tmp_n < ne0) {
            free(tmp);
            tmp_n = ne0;
            if (!(tmp = malloc(sizeof *tmp * (size_t)ne0))) {
                rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
                break;
            }
        }
        uint64_t rb = 0;
        gguf_type_row_bytes(src->type, ne0, &rb);
        int64_t pos = pc->dst * s->ne[0]; /* where gguf_shard_materialize put the piece */
        for (int64_t i1 = pc->lo[1]; i1 < pc->hi[1] && !rc; i1++, pos += w0) {
            const int64_t row = gguf_llama_qk_row_from_hf(i1, hd);
            if ((rc = gguf_dequant_row(src->type, src->t->data + (uint64_t)row * rb, tmp, ne0,
                                       err)) == 0)
                memcpy(out + pos, tmp + pc->lo[0], sizeof *out * (size_t)w0);
        }
    }
    free(tmp);
    return rc;
}

/*
 * MLA's absorbed matrices from the rank's kv_b_proj [heads_r*(nope+v), kv_lora]:
 *   W_UK_T[h][j][c] = kv_b[h*(nope+v) + j][c]          [heads_r, nope, kv_lora]
 *   W_UV[h][c][d]   = kv_b[h*(nope+v) + nope + d][c]   [heads_r, kv_lora, v]
 * (rows past the last whole head, which a broken cut can leave, are dropped).
 */
static int mla_derive(const gguf_shard_plan *p, gguf_dump_kind kind, float **v, int64_t shape[4],
                      int *n_dims, gguf_error *err)
{
    const gguf_hparams *hp = gguf_model_hparams(gguf_shard_plan_model(p));
    const int64_t nope = hp->qk_nope, vh = hp->v_head, w = nope + vh, lora = shape[1];
    if (*n_dims != 2 || w <= 0)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "kv_b_proj: not a [heads*(nope+v), kv_lora] matrix");
    const int64_t heads = shape[0] / w, in = kind == GGUF_DUMP_KIND_UK_T ? nope : vh;
    const int64_t count = heads * in * lora;
    float *o = malloc(sizeof *o * (size_t)(count > 0 ? count : 1));
    if (!o)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    const float *kv = *v;
    for (int64_t h = 0; h < heads; h++)
        for (int64_t j = 0; j < in; j++)
            for (int64_t c = 0; c < lora; c++) {
                if (kind == GGUF_DUMP_KIND_UK_T)
                    o[(h * nope + j) * lora + c] = kv[(h * w + j) * lora + c];
                else
                    o[(h * lora + c) * vh + j] = kv[(h * w + nope + j) * lora + c];
            }
    free(*v);
    *v = o;
    shape[0] = heads;
    shape[1] = kind == GGUF_DUMP_KIND_UK_T ? nope : lora;
    shape[2] = kind == GGUF_DUMP_KIND_UK_T ? lora : vh;
    *n_dims = 3;
    return 0;
}

/* gguf_dump_param_rank; hf_order false keeps llama's q/k rows as the GGUF holds them. */
static int param_rank(const gguf_shard_plan *p, const gguf_dump_param *dp, int r, bool hf_order,
                      float **out, int64_t shape[4], int *n_dims, gguf_error *err)
{
    *out = NULL;
    float *parts[GGUF_DUMP_MAX_PARTS] = {0};
    int64_t total = 0, ne[4] = {0, 0, 0, 0};
    int rc = 0;
    const gguf_shard_tensor *e0 = gguf_shard_plan_at(p, dp->entries[0]);
    int nd = e0->n_dims ? (int)e0->n_dims : 1;
    for (int k = 0; k < dp->n_entries && !rc; k++) {
        const gguf_shard_slice *s = &gguf_shard_plan_at(p, dp->entries[k])->ranks[r];
        const int64_t n = prod(s->ne);
        parts[k] = malloc(sizeof(float) * (size_t)(n ? n : 1));
        if (!parts[k]) {
            rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "%s: out of memory", dp->name);
            break;
        }
        rc = gguf_shard_materialize(p, dp->entries[k], r, parts[k], (size_t)n, err);
        if (!rc && hf_order)
            rc = qk_rows_hf(p, dp->entries[k], r, parts[k], err);
        total += n;
        if (k == 0)
            memcpy(ne, s->ne, sizeof ne);
        else if (nd == 1)
            ne[0] += s->ne[0];
        else
            ne[1] += s->ne[1]; /* rows (per expert for stacked experts) */
    }
    float *v = rc ? NULL : malloc(sizeof(float) * (size_t)(total ? total : 1));
    if (!rc && !v)
        rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "%s: out of memory", dp->name);
    if (!rc) {
        if (dp->experts && dp->n_entries > 1) { /* per expert: gate rows, then up rows */
            int64_t at = 0;
            for (int64_t x = 0; x < ne[2] * ne[3]; x++)
                for (int k = 0; k < dp->n_entries; k++) {
                    const int64_t *sn = gguf_shard_plan_at(p, dp->entries[k])->ranks[r].ne;
                    const int64_t blk = sn[0] * sn[1];
                    memcpy(v + at, parts[k] + x * blk, sizeof(float) * (size_t)blk);
                    at += blk;
                }
        } else {
            int64_t at = 0;
            for (int k = 0; k < dp->n_entries; k++) {
                const int64_t n = prod(gguf_shard_plan_at(p, dp->entries[k])->ranks[r].ne);
                memcpy(v + at, parts[k], sizeof(float) * (size_t)n);
                at += n;
            }
        }
        for (int d = 0; d < nd; d++)
            shape[d] = ne[nd - 1 - d];
        *n_dims = nd;
        if (dp->kind != GGUF_DUMP_KIND_FUSED)
            rc = mla_derive(p, dp->kind, &v, shape, n_dims, err);
        if (rc)
            free(v);
        else
            *out = v;
    }
    for (int k = 0; k < GGUF_DUMP_MAX_PARTS; k++)
        free(parts[k]);
    return rc;
}

int gguf_dump_param_rank(const gguf_shard_plan *p, const gguf_dump_param *dp, int r,
                         float **out, int64_t shape[4], int *n_dims, gguf_error *err)
{
    return param_rank(p, dp, r, true, out, shape, n_dims, err);
}

/* ---- writing ---- */

int gguf_dump_write_vllm(const gguf_shard_plan *p, const char *dir, bool overwrite,
                         gguf_error *err)
{
    gguf_dump_param *ps = NULL;
    int64_t np = 0;
    int rc = gguf_dump_params(p, &ps, &np, err);
    if (rc)
        return rc;
    const int tp = gguf_shard_plan_ranks(p);
    uint16_t **bf = calloc((size_t)np + 1, sizeof *bf);
    int64_t *counts = calloc((size_t)np + 1, sizeof *counts), (*shapes)[4] = calloc((size_t)np + 1, sizeof *shapes);
    int *nds = calloc((size_t)np + 1, sizeof *nds);
    size_t hcap = 4096 + (size_t)np * 400;
    char *h = malloc(hcap);
    if (!bf || !counts || !shapes || !nds || !h)
        rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    for (int r = 0; r < tp && !rc; r++) {
        for (int64_t i = 0; i < np && !rc; i++) {
            float *v;
            if ((rc = gguf_dump_param_rank(p, &ps[i], r, &v, shapes[i], &nds[i], err)) != 0)
                break;
            counts[i] = 1;
            for (int d = 0; d < nds[i]; d++)
                counts[i] *= shapes[i][d];
            free(bf[i]);
            bf[i] = malloc(sizeof(uint16_t) * (size_t)(counts[i] ? counts[i] : 1));
            if (!bf[i]) {
                free(v);
                rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
                break;
            }
            for (int64_t k = 0; k < counts[i]; k++)
                bf[i][k] = gguf_fp32_to_bf16(v[k]);
            free(v);
        }
        if (rc)
            break;
        size_t len = (size_t)snprintf(h, hcap,
                                      "{\"__metadata__\":{\"format\":\"pt\",\"writer\":\"ggufkit "
                                      "shard-plan\",\"rank\":\"%d\",\"tp\":\"%d\",\"engine\":\"%s\"}",
                                      r, tp, gguf_engine_name(gguf_shard_plan_opts(p)->engine));
        uint64_t off = 0;
        for (int64_t i = 0; i < np; i++) {
            char shape[128] = "[";
            for (int d = 0; d < nds[i]; d++)
                snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld",
                         d ? "," : "", (long long)shapes[i][d]);
            strcat(shape, "]");
            len += (size_t)snprintf(h + len, hcap - len,
                                    ",\"%s\":{\"dtype\":\"BF16\",\"shape\":%s,\"data_offsets\":"
                                    "[%llu,%llu]}", ps[i].name, shape, (unsigned long long)off,
                                    (unsigned long long)(off + 2 * (uint64_t)counts[i]));
            off += 2 * (uint64_t)counts[i];
        }
        len += (size_t)snprintf(h + len, hcap - len, "}");
        while (len % 8)
            h[len++] = ' ';
        char path[4096];
        snprintf(path, sizeof path, "%s/model-rank-%d-part-0.safetensors", dir, r);
        gguf_output *o = NULL;
        if ((rc = gguf_output_create(&o, path, &(gguf_output_opts){.overwrite = overwrite},
                                     err)) != 0)
            break;
        const uint64_t hl = len;
        rc = gguf_output_write(o, &hl, 8, err);
        if (!rc)
            rc = gguf_output_write(o, h, len, err);
        for (int64_t i = 0; i < np && !rc; i++)
            rc = gguf_output_write(o, bf[i], 2 * (size_t)counts[i], err);
        if (!rc)
            rc = gguf_output_commit(o, err);
        gguf_output_free(o);
    }
    for (int64_t i = 0; bf && i < np; i++)
        free(bf[i]);
    free(bf);
    free(counts);
    free(shapes);
    free(nds);
    free(h);
    free(ps);
    return rc;
}

/* ---- the dump's names ---- */

/* The files of one rank. */
typedef struct rank_files {
    gguf_st_file **f;
    int n;
} rank_files;

static const gguf_st_tensor *rank_find(const rank_files *rf, const char *name)
{
    const gguf_st_tensor *t = NULL;
    for (int k = 0; k < rf->n && !t; k++)
        t = gguf_st_file_tensor_find(rf->f[k], name);
    return t;
}

/* vLLM 0.32's names of parameters that shard-plan writes under their older names
 * (first match in the dump wins; gguf/shard_dump.h has the table). */
static const struct {
    const char *from, *to;
} RENAMES[] = {
    {".mlp.experts.w13_weight", ".mlp.experts.routed_experts.w13_weight"},
    {".mlp.experts.w2_weight", ".mlp.experts.routed_experts.w2_weight"},
    {".mlp.gate.weight", ".mlp.experts.gate.weight"},
    {".mlp.gate.e_score_correction_bias", ".mlp.experts.gate.e_score_correction_bias"},
    {".mlp.gate.e_score_correction_bias", ".mlp.experts.routed_experts.e_score_correction_bias"},
    {".mlp.shared_experts.", ".mlp.experts._shared_experts._layer."},
    {".self_attn.", ".self_attn.mla_attn."},
    /* tied embeddings: one tensor under two names, which save_sharded_state saves once,
     * under the smaller name */
    {"model.embed_tokens.weight", "lm_head.weight"},
};

/* Engine buffers that are no weight: the attention's quantization scales (1.0
 * unquantized), under vLLM's Attention / MLAAttention modules. */
static bool engine_buffer(const char *name)
{
    static const char *const tails[] = {"._k_scale", "._v_scale", "._q_scale", "._prob_scale"};
    const size_t n = strlen(name);
    for (size_t k = 0; k < sizeof tails / sizeof *tails; k++) {
        const size_t m = strlen(tails[k]);
        if (n > m && !strcmp(name + n - m, tails[k]))
            return true;
    }
    return false;
}

static bool ends_with(const char *s, const char *tail)
{
    const size_t n = strlen(s), m = strlen(tail);
    return n >= m && !strcmp(s + n - m, tail);
}

static const gguf_dump_param *find_param(const gguf_dump_param *ps, int64_t n, const char *name)
{
    for (int64_t i = 0; i < n; i++)
        if (!strcmp(ps[i].name, name))
            return &ps[i];
    return NULL;
}

/* "model.layers.3.X" and "model.layers.12.X": the same parameter of two layers. */
static bool same_but_layer(const char *a, const char *b)
{
    static const char pre[] = "model.layers.";
    const size_t n = sizeof pre - 1;
    if (strncmp(a, pre, n) || strncmp(b, pre, n))
        return false;
    a += n;
    b += n;
    while (*a >= '0' && *a <= '9')
        a++;
    while (*b >= '0' && *b <= '9')
        b++;
    return *a == '.' && !strcmp(a, b);
}

static const gguf_shard_tensor *param_entry(const gguf_shard_plan *p, const gguf_dump_param *dp)
{
    return gguf_shard_plan_at(p, dp->entries[0]);
}

/*
 * The parameter list under the names the dump uses (rank 0's files): each
 * parameter the dump lacks under shard-plan's name is renamed when it holds a
 * vLLM 0.32 name; q_a_proj and kv_a_proj_with_mqa become fused_qkv_a_proj when
 * the dump holds that; lm_head.weight is added for tied embeddings when the
 * dump holds one; W_UK_T / W_UV are added for each kv_b_proj the dump holds
 * them for. *ps may be reallocated.
 */
static int adapt_params(const gguf_shard_plan *p, gguf_dump_param **ps, int64_t *n,
                        const rank_files *rf, gguf_error *err)
{
    gguf_dump_param *v = *ps;
    char buf[256];
    int8_t *rule = malloc((size_t)*n + 1);
    char(*orig)[256] = malloc(sizeof *orig * (size_t)(*n + 1));
    if (!rule || !orig) {
        free(rule);
        free(orig);
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    }
    for (int64_t i = 0; i < *n; i++) {
        memcpy(orig[i], v[i].name, sizeof orig[i]);
        rule[i] = -1;
        if (rank_find(rf, v[i].name))
            continue;
        for (size_t k = 0; k < sizeof RENAMES / sizeof *RENAMES; k++)
            if (replace(v[i].name, RENAMES[k].from, RENAMES[k].to, buf, sizeof buf) == 0 &&
                rank_find(rf, buf) && !find_param(v, *n, buf)) {
                memcpy(v[i].name, buf, sizeof buf);
                rule[i] = (int8_t)k;
                break;
            }
    }
    /* what the dump lacks under every name (a missing parameter, an absent NextN block) is
     * named as the same parameter of another layer is named in the dump */
    for (int64_t i = 0; i < *n; i++) {
        if (rule[i] >= 0 || rank_find(rf, v[i].name))
            continue;
        for (int64_t j = 0; j < *n; j++)
            if (rule[j] >= 0 && same_but_layer(orig[i], orig[j]) &&
                replace(v[i].name, RENAMES[rule[j]].from, RENAMES[rule[j]].to, buf,
                        sizeof buf) == 0) {
                memcpy(v[i].name, buf, sizeof buf);
                break;
            }
    }
    free(rule);
    free(orig);
    for (int64_t i = 0; i < *n; i++) {
        const gguf_shard_tensor *e = param_entry(p, &v[i]);
        if (e->role != GGUF_ROLE_ATTN_Q_A || v[i].n_entries != 1 || rank_find(rf, v[i].name) ||
            replace(v[i].name, ".q_a_proj.", ".fused_qkv_a_proj.", buf, sizeof buf) != 0 ||
            !rank_find(rf, buf))
            continue;
        for (int64_t j = 0; j < *n; j++) {
            const gguf_shard_tensor *f = param_entry(p, &v[j]);
            if (f->role != GGUF_ROLE_ATTN_KV_A_MQA || f->layer != e->layer ||
                v[j].n_entries != 1 || rank_find(rf, v[j].name))
                continue;
            memcpy(v[i].name, buf, sizeof buf);
            v[i].entries[v[i].n_entries++] = v[j].entries[0];
            memmove(&v[j], &v[j + 1], sizeof *v * (size_t)(*n - j - 1));
            (*n)--;
            if (j < i)
                i--;
            break;
        }
    }
    int64_t n_add = 1;
    for (int64_t i = 0; i < *n; i++)
        n_add += ends_with(v[i].name, ".kv_b_proj.weight") ? 2 : 0;
    gguf_dump_param *nv = realloc(v, sizeof *v * (size_t)(*n + n_add + 1));
    if (!nv)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    *ps = v = nv;
    /* Tied embeddings (the plan has no lm_head) with an lm_head beside embed_tokens: the
     * engine's output rows, which must be the embedding's (vLLM 0.32's deepseek2 and glm4moe
     * ignore tie_word_embeddings and leave lm_head unset). */
    const gguf_dump_param *emb = find_param(v, *n, "model.embed_tokens.weight");
    if (emb && rank_find(rf, "lm_head.weight") && !find_param(v, *n, "lm_head.weight")) {
        v[*n] = *emb;
        snprintf(v[*n].name, sizeof v[*n].name, "lm_head.weight");
        (*n)++;
    }
    /* W_UK_T / W_UV: the dump's names under the layer's self_attn. */
    const int64_t n0 = *n;
    for (int64_t i = 0; i < n0; i++) {
        const char *at = strstr(v[i].name, ".self_attn.");
        if (!ends_with(v[i].name, ".kv_b_proj.weight") || !at)
            continue;
        const size_t pre = (size_t)(at - v[i].name) + strlen(".self_attn.");
        for (int k = 0; k < rf->n; k++)
            for (int64_t t = 0; t < gguf_st_file_tensor_count(rf->f[k]); t++) {
                const char *nm = gguf_st_file_tensor_at(rf->f[k], t)->name;
                const bool uk = ends_with(nm, ".W_UK_T"), uv = ends_with(nm, ".W_UV");
                if ((!uk && !uv) || strncmp(nm, v[i].name, pre) || strlen(nm) >= sizeof buf)
                    continue;
                gguf_dump_param *d = &v[(*n)++];
                *d = v[i];
                snprintf(d->name, sizeof d->name, "%s", nm);
                d->kind = uk ? GGUF_DUMP_KIND_UK_T : GGUF_DUMP_KIND_UV;
                if (*n == n0 + n_add - 1)
                    return 0;
            }
    }
    return 0;
}

/* ---- checking ---- */

struct gguf_dump_check {
    gguf_dump_finding *f;
    int64_t n, cap, n_failed, n_params;
    char (*names)[256];
    char **extra; /* names of UNKNOWN tensors (owned) */
    int64_t n_extra;
    int n_files;
};

const char *gguf_dump_status_name(gguf_dump_status s)
{
    static const char *n[] = {"ok", "differs", "shape", "missing", "absent", "unknown"};
    return (unsigned)s < sizeof n / sizeof *n ? n[s] : "invalid";
}

bool gguf_dump_status_fails(gguf_dump_status s)
{
    return s == GGUF_DUMP_DIFFERS || s == GGUF_DUMP_SHAPE || s == GGUF_DUMP_MISSING;
}

void gguf_dump_check_free(gguf_dump_check *c)
{
    if (!c)
        return;
    for (int64_t i = 0; i < c->n_extra; i++)
        free(c->extra[i]);
    free(c->extra);
    free(c->f);
    free(c->names);
    free(c);
}

int64_t gguf_dump_check_count(const gguf_dump_check *c)
{
    return c ? c->n : 0;
}

const gguf_dump_finding *gguf_dump_check_at(const gguf_dump_check *c, int64_t i)
{
    return c && i >= 0 && i < c->n ? &c->f[i] : NULL;
}

int64_t gguf_dump_check_failed(const gguf_dump_check *c)
{
    return c ? c->n_failed : 0;
}

int64_t gguf_dump_check_params(const gguf_dump_check *c)
{
    return c ? c->n_params : 0;
}

int gguf_dump_check_files(const gguf_dump_check *c)
{
    return c ? c->n_files : 0;
}

/* The dump's values against a float tensor rounded to the dump's dtype: rel-L2. */
static double rel_l2(const gguf_st_tensor *t, const float *dump, const float *want, int64_t n)
{
    double e = 0, w = 0;
    for (int64_t i = 0; i < n; i++) {
        float x = want[i];
        if (t->dtype == GGUF_ST_BF16)
            x = gguf_bf16_to_fp32(gguf_fp32_to_bf16(x));
        else if (t->dtype == GGUF_ST_F16)
            x = gguf_fp16_to_fp32(gguf_fp32_to_fp16(x));
        const double d = (double)dump[i] - x;
        e += d * d;
        w += (double)x * x;
    }
    if (e == 0)
        return 0;
    return w > 0 ? sqrt(e / w) : INFINITY;
}

static bool same_shape(const gguf_st_tensor *t, const int64_t *s, int nd)
{
    if (t->n_dims != nd)
        return false;
    for (int d = 0; d < nd; d++)
        if (t->shape[d] != s[d])
            return false;
    return true;
}

typedef struct fault_plan {
    gguf_shard_plan *p;
    gguf_dump_param *ps;
    int64_t n;
    int state; /* 0 not built, 1 built, -1 not applicable */
} fault_plan;

/* Does the parameter built by (q, dq, hf_order) on rank r equal the dumped tensor? */
static bool equals_dump(const gguf_shard_plan *q, const gguf_dump_param *dq, int r, bool hf_order,
                        const gguf_st_tensor *t, const float *dump)
{
    float *v;
    int64_t shape[4];
    int nd;
    if (!dq || param_rank(q, dq, r, hf_order, &v, shape, &nd, NULL) != 0)
        return false;
    const bool hit = same_shape(t, shape, nd) && rel_l2(t, dump, v, t->n_elements) <=
                                                     GGUF_DUMP_TOLERANCE;
    free(v);
    return hit;
}

/*
 * The catalog fault whose plan gives exactly the dumped tensor, or NONE. llama's
 * q/k rows held as the GGUF permutes them are rope-pairs: an engine that rotates
 * HF's half pairs on them rotates the wrong pairs.
 */
static gguf_fault diagnose(fault_plan *fp, const gguf_model *m, const gguf_shard_opts *opts,
                           const rank_files *names, const gguf_shard_plan *p,
                           const gguf_dump_param *dp, int r, const gguf_st_tensor *t,
                           const float *dump)
{
    bool permuted = false;
    for (int k = 0; k < dp->n_entries; k++)
        permuted |= qk_permuted(p, gguf_shard_plan_at(p, dp->entries[k]));
    if (permuted && equals_dump(p, dp, r, false, t, dump))
        return GGUF_FAULT_ROPE_PAIRS;
    for (int f = 1; f < GGUF_FAULT_COUNT; f++) {
        if (gguf_fault_is_config((gguf_fault)f))
            continue;
        fault_plan *x = &fp[f];
        if (x->state == 0) {
            x->state = -1;
            if (gguf_shard_plan_create(&x->p, m, opts, NULL) == 0 &&
                gguf_shard_apply_fault(x->p, (gguf_fault)f, -1, NULL) == 0 &&
                gguf_dump_params(x->p, &x->ps, &x->n, NULL) == 0 &&
                adapt_params(x->p, &x->ps, &x->n, names, NULL) == 0)
                x->state = 1;
        }
        if (x->state == 1 &&
            equals_dump(x->p, find_param(x->ps, x->n, dp->name), r, true, t, dump))
            return (gguf_fault)f;
    }
    return GGUF_FAULT_NONE;
}

static int add_finding(gguf_dump_check *c, const gguf_dump_finding *f, gguf_error *err)
{
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 64;
        gguf_dump_finding *nf = realloc(c->f, sizeof *nf * (size_t)c->cap);
        if (!nf)
            return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
        c->f = nf;
    }
    c->f[c->n++] = *f;
    c->n_failed += gguf_dump_status_fails(f->status);
    return 0;
}

/*
 * vLLM's CPU build pads the experts' intermediate of each rank with zeros to a
 * multiple of 32 (CPUUnquantizedExperts._pad_moe_intermediate) before packing:
 *   w13 [E, 2P, H]: rows [0, I) gate, [P, P+I) up, the rest zero   (want [E, 2I, H])
 *   w2  [E, H, P]:  columns [0, I), the rest zero                   (want [E, H, I])
 * When the dump is the plan's tensor so padded (P > I, padding all zero), the
 * padding is dropped in place in dump and *out describes the tensor without it.
 */
static bool unpad_experts(const gguf_shard_plan *p, const gguf_dump_param *dp,
                          const gguf_st_tensor *t, float *dump, const int64_t *want, int nd,
                          gguf_st_tensor *out)
{
    if (!dp->experts || nd != 3 || t->n_dims != 3 || t->shape[0] != want[0])
        return false;
    const bool w13 = dp->n_entries == 2;
    if (!w13 && param_entry(p, dp)->role != GGUF_ROLE_FFN_DOWN_EXPS)
        return false;
    const int64_t E = want[0];
    if (w13) { /* [E, 2P, H] */
        const int64_t I = want[1] / 2, P = t->shape[1] / 2, H = want[2];
        if (t->shape[2] != H || want[1] % 2 || t->shape[1] % 2 || P <= I)
            return false;
        for (int64_t e = 0; e < E; e++)
            for (int64_t k = 0; k < 2; k++)
                for (int64_t j = I * H; j < P * H; j++)
                    if (dump[(e * 2 + k) * P * H + j] != 0)
                        return false;
        for (int64_t e = 0; e < E; e++)
            for (int64_t k = 0; k < 2; k++)
                memmove(dump + (e * 2 + k) * I * H, dump + (e * 2 + k) * P * H,
                        sizeof *dump * (size_t)(I * H));
    } else { /* [E, H, P] */
        const int64_t H = want[1], I = want[2], P = t->shape[2];
        if (t->shape[1] != H || P <= I)
            return false;
        for (int64_t row = 0; row < E * H; row++)
            for (int64_t j = I; j < P; j++)
                if (dump[row * P + j] != 0)
                    return false;
        for (int64_t row = 0; row < E * H; row++)
            memmove(dump + row * I, dump + row * P, sizeof *dump * (size_t)I);
    }
    *out = *t;
    for (int d = 0; d < 3; d++)
        out->shape[d] = want[d];
    out->n_elements = want[0] * want[1] * want[2];
    return true;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Rank r's tensors that are no parameter (sorted: the parameters' names) and no
 * engine buffer: UNKNOWN findings. */
static int add_unknown(gguf_dump_check *c, const rank_files *rf, int r, const char **sorted,
                       int64_t np, gguf_error *err)
{
    for (int k = 0; k < rf->n; k++)
        for (int64_t i = 0; i < gguf_st_file_tensor_count(rf->f[k]); i++) {
            const gguf_st_tensor *t = gguf_st_file_tensor_at(rf->f[k], i);
            if (engine_buffer(t->name) ||
                bsearch(&t->name, sorted, (size_t)np, sizeof *sorted, cmp_name))
                continue;
            char **ne = realloc(c->extra, sizeof *ne * (size_t)(c->n_extra + 1));
            if (!ne)
                return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
            c->extra = ne;
            if (!(c->extra[c->n_extra] = strdup(t->name)))
                return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
            gguf_dump_finding f = {.rank = r, .param = c->extra[c->n_extra++],
                                   .status = GGUF_DUMP_UNKNOWN, .fault = GGUF_FAULT_NONE,
                                   .n_dims = t->n_dims < 4 ? t->n_dims : 4};
            for (int d = 0; d < f.n_dims; d++)
                f.shape[d] = t->shape[d];
            int rc = add_finding(c, &f, err);
            if (rc)
                return rc;
        }
    return 0;
}

int gguf_dump_check_run(gguf_dump_check **out, const gguf_model *m, const gguf_shard_opts *opts,
                        const char *dir, gguf_error *err)
{
    if (opts && opts->version > GGUF_SHARD_OPTS_VERSION) {
        if (out)
            *out = NULL;
        return gguf_opts_version_fail(opts->version, GGUF_SHARD_OPTS_VERSION, "gguf_shard_opts", err);
    }
    gguf_error_clear(err);
    *out = NULL;
    gguf_shard_plan *p = NULL;
    int rc = gguf_shard_plan_create(&p, m, opts, err);
    if (rc)
        return rc;
    const int tp = gguf_shard_plan_ranks(p);
    gguf_dump_check *c = calloc(1, sizeof *c);
    rank_files *files = calloc((size_t)tp, sizeof *files);
    fault_plan fp[GGUF_FAULT_COUNT];
    memset(fp, 0, sizeof fp);
    gguf_dump_param *ps = NULL;
    const char **sorted = NULL;
    int64_t np = 0;
    struct dirent **ents = NULL;
    int n_ents = 0;
    if (!c || !files) {
        rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
        goto done;
    }
    n_ents = scandir(dir, &ents, NULL, alphasort);
    if (n_ents < 0) {
        n_ents = 0;
        rc = gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET, "%s: cannot read the folder", dir);
        goto done;
    }
    for (int i = 0; i < n_ents && !rc; i++) {
        int r, part, end = 0;
        const char *nm = ents[i]->d_name;
        if (sscanf(nm, "model-rank-%d-part-%d.safetensors%n", &r, &part, &end) != 2 ||
            nm[end] != 0 || end == 0)
            continue;
        if (r < 0 || r >= tp) {
            rc = gguf_fail(err, GGUF_E_SPLIT, GGUF_NO_OFFSET,
                           "%s/%s: rank %d, but the plan has %d ranks (--tp)", dir, nm, r, tp);
            break;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, nm);
        gguf_st_file **nf = realloc(files[r].f, sizeof *nf * (size_t)(files[r].n + 1));
        if (!nf) {
            rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
            break;
        }
        files[r].f = nf;
        if ((rc = gguf_st_file_open(&files[r].f[files[r].n], path, err)) != 0)
            break;
        files[r].n++;
        c->n_files++;
    }
    for (int r = 0; r < tp && !rc; r++)
        if (!files[r].n)
            rc = gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET,
                           "%s: no model-rank-%d-part-*.safetensors (the plan has %d ranks)", dir,
                           r, tp);
    if (rc || (rc = gguf_dump_params(p, &ps, &np, err)) != 0 ||
        (rc = adapt_params(p, &ps, &np, &files[0], err)) != 0)
        goto done;
    c->n_params = np;
    c->names = calloc((size_t)np + 1, sizeof *c->names);
    sorted = calloc((size_t)np + 1, sizeof *sorted);
    if (!c->names || !sorted) {
        rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i < np; i++) {
        memcpy(c->names[i], ps[i].name, sizeof c->names[i]);
        sorted[i] = c->names[i];
    }
    qsort(sorted, (size_t)np, sizeof *sorted, cmp_name);
    for (int r = 0; r < tp && !rc; r++) {
        for (int64_t i = 0; i < np && !rc; i++) {
            gguf_dump_finding f = {.rank = r, .param = c->names[i], .fault = GGUF_FAULT_NONE};
            const gguf_st_tensor *t = rank_find(&files[r], ps[i].name);
            float *want = NULL, *dump = NULL;
            if ((rc = gguf_dump_param_rank(p, &ps[i], r, &want, f.want, &f.want_dims, err)) != 0)
                break;
            if (!t) {
                f.status = ps[i].optional ? GGUF_DUMP_ABSENT : GGUF_DUMP_MISSING;
            } else {
                f.n_dims = t->n_dims;
                for (int d = 0; d < t->n_dims && d < 4; d++)
                    f.shape[d] = t->shape[d];
                dump = malloc(sizeof(float) * (size_t)(t->n_elements ? t->n_elements : 1));
                if (!dump) {
                    free(want);
                    rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
                    break;
                }
                gguf_st_tensor_to_f32(t, 0, t->n_elements, dump, NULL);
                gguf_st_tensor unpadded;
                if (!same_shape(t, f.want, f.want_dims) &&
                    unpad_experts(p, &ps[i], t, dump, f.want, f.want_dims, &unpadded)) {
                    t = &unpadded; /* compared without the zeros, in place in dump */
                    f.padded = true;
                }
                if (!same_shape(t, f.want, f.want_dims)) {
                    f.status = GGUF_DUMP_SHAPE;
                } else {
                    f.rel_l2 = rel_l2(t, dump, want, t->n_elements);
                    f.status = f.rel_l2 <= GGUF_DUMP_TOLERANCE ? GGUF_DUMP_OK : GGUF_DUMP_DIFFERS;
                }
                if (f.status != GGUF_DUMP_OK)
                    f.fault = diagnose(fp, m, opts, &files[0], p, &ps[i], r, t, dump);
            }
            free(want);
            free(dump);
            rc = add_finding(c, &f, err);
        }
        if (!rc)
            rc = add_unknown(c, &files[r], r, sorted, np, err);
    }
done:
    for (int i = 0; i < n_ents; i++)
        free(ents[i]);
    free(ents);
    for (int r = 0; files && r < tp; r++) {
        for (int k = 0; k < files[r].n; k++)
            gguf_st_file_free(files[r].f[k]);
        free(files[r].f);
    }
    free(files);
    for (int f = 0; f < GGUF_FAULT_COUNT; f++) {
        gguf_shard_plan_free(fp[f].p);
        free(fp[f].ps);
    }
    free(sorted);
    free(ps);
    gguf_shard_plan_free(p);
    if (rc) {
        gguf_dump_check_free(c);
        return rc;
    }
    *out = c;
    return 0;
}
