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
#include "gguf/output.h"
#include "gguf/safetensors.h"
#include "gguf/shard_dump.h"

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

int gguf_dump_param_rank(const gguf_shard_plan *p, const gguf_dump_param *dp, int r,
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
        *out = v;
    }
    for (int k = 0; k < GGUF_DUMP_MAX_PARTS; k++)
        free(parts[k]);
    return rc;
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

/* ---- checking ---- */

struct gguf_dump_check {
    gguf_dump_finding *f;
    int64_t n, cap, n_failed, n_params;
    char (*names)[256];
    int n_files;
};

const char *gguf_dump_status_name(gguf_dump_status s)
{
    static const char *n[] = {"ok", "differs", "shape", "missing"};
    return (unsigned)s < 4 ? n[s] : "unknown";
}

void gguf_dump_check_free(gguf_dump_check *c)
{
    if (!c)
        return;
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

static const gguf_dump_param *find_param(const gguf_dump_param *ps, int64_t n, const char *name)
{
    for (int64_t i = 0; i < n; i++)
        if (!strcmp(ps[i].name, name))
            return &ps[i];
    return NULL;
}

/* The catalog fault whose plan gives exactly the dumped tensor, or NONE. */
static gguf_fault diagnose(fault_plan *fp, const gguf_model *m, const gguf_shard_opts *opts,
                           const char *name, int r, const gguf_st_tensor *t, const float *dump)
{
    for (int f = 1; f < GGUF_FAULT_COUNT; f++) {
        if (gguf_fault_is_config((gguf_fault)f))
            continue;
        fault_plan *x = &fp[f];
        if (x->state == 0) {
            x->state = -1;
            if (gguf_shard_plan_build(&x->p, m, opts, NULL) == 0 &&
                gguf_shard_apply_fault(x->p, (gguf_fault)f, -1, NULL) == 0 &&
                gguf_dump_params(x->p, &x->ps, &x->n, NULL) == 0)
                x->state = 1;
        }
        if (x->state != 1)
            continue;
        const gguf_dump_param *dp = find_param(x->ps, x->n, name);
        float *v;
        int64_t shape[4];
        int nd;
        if (!dp || gguf_dump_param_rank(x->p, dp, r, &v, shape, &nd, NULL) != 0)
            continue;
        const bool hit = same_shape(t, shape, nd) && rel_l2(t, dump, v, t->n_elements) <=
                                                         GGUF_DUMP_TOLERANCE;
        free(v);
        if (hit)
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
    c->n_failed += f->status != GGUF_DUMP_OK;
    return 0;
}

int gguf_dump_check_run(gguf_dump_check **out, const gguf_model *m, const gguf_shard_opts *opts,
                        const char *dir, gguf_error *err)
{
    gguf_error_clear(err);
    *out = NULL;
    gguf_shard_plan *p = NULL;
    int rc = gguf_shard_plan_build(&p, m, opts, err);
    if (rc)
        return rc;
    const int tp = gguf_shard_plan_ranks(p);
    gguf_dump_check *c = calloc(1, sizeof *c);
    gguf_st_file ***files = calloc((size_t)tp, sizeof *files);
    int *n_files = calloc((size_t)tp, sizeof *n_files);
    fault_plan fp[GGUF_FAULT_COUNT];
    memset(fp, 0, sizeof fp);
    gguf_dump_param *ps = NULL;
    int64_t np = 0;
    struct dirent **ents = NULL;
    int n_ents = 0;
    if (!c || !files || !n_files) {
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
        gguf_st_file **nf = realloc(files[r], sizeof *nf * (size_t)(n_files[r] + 1));
        if (!nf) {
            rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
            break;
        }
        files[r] = nf;
        if ((rc = gguf_st_file_open(&files[r][n_files[r]], path, err)) != 0)
            break;
        n_files[r]++;
        c->n_files++;
    }
    for (int r = 0; r < tp && !rc; r++)
        if (!n_files[r])
            rc = gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET,
                           "%s: no model-rank-%d-part-*.safetensors (the plan has %d ranks)", dir,
                           r, tp);
    if (rc || (rc = gguf_dump_params(p, &ps, &np, err)) != 0)
        goto done;
    c->n_params = np;
    c->names = calloc((size_t)np + 1, sizeof *c->names);
    if (!c->names) {
        rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i < np; i++)
        memcpy(c->names[i], ps[i].name, sizeof c->names[i]);
    for (int r = 0; r < tp && !rc; r++)
        for (int64_t i = 0; i < np && !rc; i++) {
            gguf_dump_finding f = {.rank = r, .param = c->names[i], .fault = GGUF_FAULT_NONE};
            const gguf_st_tensor *t = NULL;
            for (int k = 0; k < n_files[r] && !t; k++)
                t = gguf_st_file_tensor_find(files[r][k], ps[i].name);
            float *want = NULL, *dump = NULL;
            if ((rc = gguf_dump_param_rank(p, &ps[i], r, &want, f.want, &f.want_dims, err)) != 0)
                break;
            if (!t) {
                f.status = GGUF_DUMP_MISSING;
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
                if (!same_shape(t, f.want, f.want_dims)) {
                    f.status = GGUF_DUMP_SHAPE;
                } else {
                    f.rel_l2 = rel_l2(t, dump, want, t->n_elements);
                    f.status = f.rel_l2 <= GGUF_DUMP_TOLERANCE ? GGUF_DUMP_OK : GGUF_DUMP_DIFFERS;
                }
                if (f.status != GGUF_DUMP_OK)
                    f.fault = diagnose(fp, m, opts, ps[i].name, r, t, dump);
            }
            free(want);
            free(dump);
            rc = add_finding(c, &f, err);
        }
done:
    for (int i = 0; i < n_ents; i++)
        free(ents[i]);
    free(ents);
    for (int r = 0; files && r < tp; r++) {
        for (int k = 0; k < n_files[r]; k++)
            gguf_st_file_close(files[r][k]);
        free(files[r]);
    }
    free(files);
    free(n_files);
    for (int f = 0; f < GGUF_FAULT_COUNT; f++) {
        gguf_shard_plan_free(fp[f].p);
        free(fp[f].ps);
    }
    free(ps);
    gguf_shard_plan_free(p);
    if (rc) {
        gguf_dump_check_free(c);
        return rc;
    }
    *out = c;
    return 0;
}
