/*
 * shard-plan --write-shards: one GGUF per rank holding that rank's slices
 * (the stored bytes where the cut allows, else F32), the plan recorded in
 * metadata, and an XXH3-128 manifest of every file and tensor.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "gguf/hash.h"
#include "gguf/output.h"
#include "gguf/types.h"
#include "gguf/write.h"
#include "shard_plan_tool.h"

static const uint8_t zeros[65536];

typedef struct wctx {
    gguf_writer *w;
    gguf_hasher *h;
    gguf_error *err;
} wctx;

static int put(wctx *c, const void *data, uint64_t n)
{
    gguf_hasher_update(c->h, data, (size_t)n);
    return gguf_writer_write(c->w, data, n, c->err);
}

static int put_zeros(wctx *c, uint64_t n)
{
    while (n) {
        uint64_t k = n < sizeof zeros ? n : sizeof zeros;
        int rc = put(c, zeros, k);
        if (rc)
            return rc;
        n -= k;
    }
    return 0;
}

/*
 * Can the slice be written as the stored bytes? The plan says so through quant_cut_ok; a
 * faulted plan (quant-off-block) may claim it for cuts that are not whole blocks, which a GGUF
 * cannot hold: those are written in F32 (the same wrong elements, dequantized).
 */
static bool bytes_ok(const gguf_shard_plan *p, const gguf_shard_tensor *e,
                     const gguf_shard_slice *s)
{
    const gguf_type_info *ti = gguf_type_get(e->type);
    uint64_t rb;
    if (!s->quant_cut_ok || !ti || gguf_type_row_bytes(e->type, s->ne[0], &rb) != 0)
        return false;
    for (int32_t k = 0; k < s->n_pieces; k++) {
        const gguf_shard_piece *pc = &s->pieces[k];
        if (pc->transpose || gguf_shard_plan_at(p, pc->src)->type != e->type ||
            pc->lo[0] % ti->block_size || pc->hi[0] % ti->block_size)
            return false;
    }
    return (uint64_t)s->pad % ti->block_size == 0 || e->cat_dim != 0;
}

static bool written(const gguf_shard_tensor *e)
{
    return !e->is_virtual && e->consumed;
}

/* Bytes of box row k of a piece, cut from the stored rows. */
static const uint8_t *box_row(const gguf_shard_plan *p, const gguf_shard_piece *pc, int64_t k,
                              uint64_t *len)
{
    const gguf_shard_tensor *src = gguf_shard_plan_at(p, pc->src);
    const gguf_type_info *ti = gguf_type_get(src->type);
    const int64_t n1 = pc->hi[1] - pc->lo[1], n2 = pc->hi[2] - pc->lo[2];
    const int64_t i1 = pc->lo[1] + k % n1, i2 = pc->lo[2] + (k / n1) % n2,
                  i3 = pc->lo[3] + k / (n1 * n2);
    uint64_t rb = 0;
    gguf_type_row_bytes(src->type, src->ne[0], &rb);
    const int64_t row = i1 + src->ne[1] * (i2 + src->ne[2] * i3);
    *len = (uint64_t)(pc->hi[0] - pc->lo[0]) / ti->block_size * ti->type_size;
    return src->t->data + (uint64_t)row * rb +
           (uint64_t)pc->lo[0] / ti->block_size * ti->type_size;
}

static int64_t box_rows(const gguf_shard_piece *pc)
{
    return (pc->hi[1] - pc->lo[1]) * (pc->hi[2] - pc->lo[2]) * (pc->hi[3] - pc->lo[3]);
}

static int write_bytes(wctx *c, const gguf_shard_plan *p, const gguf_shard_tensor *e,
                       const gguf_shard_slice *s)
{
    const gguf_type_info *ti = gguf_type_get(e->type);
    int rc = 0;
    uint64_t len;
    if (e->cat_dim == 0) {
        const int64_t rows = s->ne[1] * s->ne[2] * s->ne[3];
        for (int64_t k = 0; k < rows && !rc; k++) {
            for (int32_t q = 0; q < s->n_pieces && !rc; q++) {
                const uint8_t *b = box_row(p, &s->pieces[q], k, &len);
                rc = put(c, b, len);
            }
            if (!rc && s->pad)
                rc = put_zeros(c, (uint64_t)s->pad / ti->block_size * ti->type_size);
        }
        return rc;
    }
    for (int32_t q = 0; q < s->n_pieces && !rc; q++) {
        const int64_t rows = box_rows(&s->pieces[q]);
        for (int64_t k = 0; k < rows && !rc; k++) {
            const uint8_t *b = box_row(p, &s->pieces[q], k, &len);
            rc = put(c, b, len);
        }
    }
    if (!rc && s->pad) {
        uint64_t rb = 0;
        gguf_type_row_bytes(e->type, s->ne[0], &rb);
        int64_t per = 1; /* rows of ne[0] per unit of cat_dim */
        for (int d = 1; d < e->cat_dim; d++)
            per *= s->ne[d];
        rc = put_zeros(c, (uint64_t)s->pad * (uint64_t)per * rb);
    }
    return rc;
}

static int write_rank(const gguf_shard_plan *p, const sp_args *a, int r, const char *path,
                      FILE *manifest, const gguf_cancel_flag *cancel, gguf_error *err)
{
    const gguf_model *m = gguf_shard_plan_model(p);
    const gguf_file *meta = gguf_model_meta(m);
    const gguf_shard_opts *o = gguf_shard_plan_opts(p);
    const int tp = gguf_shard_plan_ranks(p);
    gguf_writer_opts wo = {.overwrite = a->force, .cancel = cancel};
    gguf_writer *w = NULL;
    gguf_hasher *h = NULL;
    gguf_digest *dig = NULL;
    float *fbuf = NULL;
    size_t fcap = 0;
    const char **names = NULL, **rules = NULL;
    int64_t *ranges = NULL;
    int rc = gguf_writer_create(&w, path, &wo, err);
    if (rc)
        return rc;
    if (gguf_hasher_create(&h) != 0) {
        rc = GGUF_E_NOMEM;
        goto done;
    }
    for (int64_t k = 0; k < gguf_file_kv_count(meta); k++) {
        const gguf_kv *kv = gguf_file_kv_at(meta, k);
        if (!strncmp(kv->key, "split.", 6) || !strncmp(kv->key, "shard.", 6))
            continue;
        if ((rc = gguf_writer_add_kv(w, kv->key, &kv->value, err)) != 0)
            goto done;
    }
    const int64_t n = gguf_shard_plan_count(p);
    names = calloc((size_t)n + 1, sizeof *names);
    rules = calloc((size_t)n + 1, sizeof *rules);
    ranges = calloc((size_t)(2 * n + 2), sizeof *ranges);
    dig = calloc((size_t)n + 1, sizeof *dig);
    if (!names || !rules || !ranges || !dig) {
        rc = GGUF_E_NOMEM;
        goto done;
    }
    uint64_t nw = 0;
    for (int64_t i = 0; i < n; i++) {
        const gguf_shard_tensor *e = gguf_shard_plan_at(p, i);
        if (!written(e))
            continue;
        names[nw] = e->name;
        rules[nw] = gguf_shard_rule_name(e->rule);
        ranges[2 * nw] = e->ranks[r].range_lo;
        ranges[2 * nw + 1] = e->ranks[r].range_hi;
        nw++;
    }
    const char *faults[SP_MAX_FAULTS];
    for (int k = 0; k < a->n_faults; k++)
        faults[k] = gguf_fault_name(a->faults[k]);
    if ((rc = gguf_writer_add_u32(w, "shard.tp", (uint32_t)tp, err)) ||
        (rc = gguf_writer_add_u32(w, "shard.ep", (uint32_t)(o->ep > 1 ? o->ep : 1), err)) ||
        (rc = gguf_writer_add_u32(w, "shard.moe_tp", (uint32_t)gguf_shard_plan_moe_tp(p), err)) ||
        (rc = gguf_writer_add_u32(w, "shard.rank", (uint32_t)r, err)) ||
        (rc = gguf_writer_add_str(w, "shard.engine", gguf_engine_name(o->engine), err)) ||
        (rc = gguf_writer_add_u32(w, "shard.vocab_pad", (uint32_t)o->vocab_pad, err)) ||
        (rc = gguf_writer_add_str(w, "shard.source", a->model, err)) ||
        (rc = gguf_writer_add_arr_str(w, "shard.faults", faults, (uint64_t)a->n_faults, err)) ||
        (rc = gguf_writer_add_arr_str(w, "shard.tensor.names", names, nw, err)) ||
        (rc = gguf_writer_add_arr_str(w, "shard.tensor.rules", rules, nw, err)) ||
        (rc = gguf_writer_add_arr(w, "shard.tensor.ranges", GGUF_VALUE_INT64, ranges, 2 * nw,
                                  err)))
        goto done;
    for (int64_t i = 0; i < n; i++) {
        const gguf_shard_tensor *e = gguf_shard_plan_at(p, i);
        if (!written(e))
            continue;
        const gguf_shard_slice *s = &e->ranks[r];
        uint32_t type = bytes_ok(p, e, s) ? e->type : GGUF_TYPE_F32;
        if ((rc = gguf_writer_add_tensor(w, e->name, type, e->n_dims ? e->n_dims : 1, s->ne,
                                         err)) != 0)
            goto done;
    }
    wctx c = {w, h, err};
    for (int64_t i = 0; i < n && !rc; i++) {
        const gguf_shard_tensor *e = gguf_shard_plan_at(p, i);
        if (!written(e))
            continue;
        const gguf_shard_slice *s = &e->ranks[r];
        if (!e->t || !e->t->data) {
            rc = gguf_error_setf(err, GGUF_E_INVALID, 0, "%s: %s: no tensor data to write", a->model,
                         e->name);
            break;
        }
        gguf_hasher_reset(h);
        if (bytes_ok(p, e, s)) {
            rc = write_bytes(&c, p, e, s);
        } else {
            size_t need = (size_t)(s->ne[0] * s->ne[1] * s->ne[2] * s->ne[3]);
            if (need > fcap) {
                free(fbuf);
                fbuf = malloc(need * sizeof *fbuf);
                fcap = fbuf ? need : 0;
                if (!fbuf) {
                    rc = GGUF_E_NOMEM;
                    break;
                }
            }
            rc = gguf_shard_materialize(p, i, r, fbuf, fcap, err);
            if (!rc)
                rc = put(&c, fbuf, need * sizeof *fbuf);
        }
        gguf_hasher_final(h, &dig[i]);
    }
    if (!rc)
        rc = gguf_writer_finish(w, err);
    if (!rc) {
        gguf_file *f = NULL;
        gguf_digest fd;
        char hx[GGUF_DIGEST_HEX];
        if ((rc = gguf_file_open(&f, path, NULL, err)) != 0)
            goto done;
        gguf_digest_file(f, &fd);
        const char *base = strrchr(path, '/');
        fprintf(manifest, "rank %d file %s %" PRIu64 " %s\n", r, gguf_digest_hex(&fd, hx),
                gguf_file_size(f), base ? base + 1 : path);
        gguf_file_free(f);
        for (int64_t i = 0; i < n; i++) {
            const gguf_shard_tensor *e = gguf_shard_plan_at(p, i);
            if (written(e))
                fprintf(manifest, "rank %d tensor %s %" PRIu64 " %s\n", r,
                        gguf_digest_hex(&dig[i], hx), e->ranks[r].bytes, e->name);
        }
    }
done:
    if (rc && err && err->code == GGUF_OK)
        gguf_error_setf(err, rc, 0, "%s: %s", path, gguf_strerror(rc));
    gguf_writer_free(w);
    gguf_hasher_free(h);
    free(fbuf);
    free(names);
    free(rules);
    free(ranges);
    free(dig);
    return rc;
}

int sp_write_shards(const gguf_shard_plan *p, const sp_args *a, const gguf_cancel_flag *cancel,
                    gguf_error *err)
{
    gguf_error_clear(err);
    if (mkdir(a->shards_dir, 0777) != 0 && errno != EEXIST)
        return gguf_error_setf(err, GGUF_E_IO, errno, "%s: cannot create the folder: %s", a->shards_dir,
                       strerror(errno));
    const int tp = gguf_shard_plan_ranks(p);
    char mpath[4096];
    snprintf(mpath, sizeof mpath, "%s/manifest.txt", a->shards_dir);
    /* the manifest appears whole, after every rank file, or not at all */
    gguf_output *o = NULL;
    int rc = gguf_output_create(&o, mpath, &(gguf_output_opts){.overwrite = true}, err);
    if (rc)
        return rc;
    FILE *mf = gguf_output_stream(o);
    if (!mf) {
        gguf_output_free(o);
        return gguf_error_setf(err, GGUF_E_NOMEM, 0, "%s: out of memory", mpath);
    }
    fprintf(mf, "# shard-plan manifest: %s, engine %s, tp %d, XXH3-128 of files and tensors\n",
            a->model, gguf_engine_name(gguf_shard_plan_opts(p)->engine), tp);
    cli_progress pr;
    cli_progress_start(&pr, "writing shards", (uint64_t)tp);
    for (int r = 0; r < tp && !rc; r++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/rank-%02d-of-%02d.gguf", a->shards_dir, r, tp);
        rc = write_rank(p, a, r, path, mf, cancel, err);
        cli_progress_update(&pr, (uint64_t)r + 1);
    }
    cli_progress_end(&pr);
    if (!rc)
        rc = gguf_output_commit(o, err);
    gguf_output_free(o);
    return rc;
}
