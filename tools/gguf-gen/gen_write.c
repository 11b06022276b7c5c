/*
 * Writing a plan: one file, or a split set laid out as llama.cpp's gguf-split
 * lays it out (all metadata in the first part, then split.no, split.count and
 * split.tensors.count on every part; a new part when the tensor count or the
 * padded data size would pass the limit).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cli.h"
#include "gen.h"
#include "gguf/write.h"

#define GEN_CHUNK (4u << 20)

static uint64_t pad32(uint64_t n) { return (n + 31) & ~(uint64_t)31; }

static uint64_t tensor_bytes(const gen_tensor *t)
{
    uint64_t row = 0;
    gguf_type_row_bytes(t->type, t->ne[0], &row);
    return row * (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
}

/* First tensor index of each part into starts[0..n], starts[n] = n_t. */
static uint32_t plan_parts(const gen_plan *p, const gen_write_opts *o, uint32_t *starts)
{
    uint32_t n = 0;
    starts[n++] = 0;
    uint64_t cur_t = 0, cur_size = 0;
    for (uint32_t i = 0; i < p->n_t; i++) {
        uint64_t b = pad32(tensor_bytes(&p->t[i]));
        bool over = (o->split_max_tensors && cur_t >= o->split_max_tensors) ||
                    (o->split_max_size && cur_t > 0 && cur_size + b > o->split_max_size);
        if (over) {
            starts[n++] = i;
            cur_t = 0;
            cur_size = 0;
        }
        cur_t++;
        cur_size += b;
    }
    starts[n] = p->n_t;
    return n;
}

/* A file of holes to copy from: the writer keeps holes as holes. */
static int holes_fd(uint64_t size)
{
    int fd = memfd_create("gguf-gen-holes", MFD_CLOEXEC);
    if (fd < 0)
        return -1;
    if (ftruncate(fd, (off_t)size) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int write_data(gguf_writer *w, const gen_tensor *t, const gen_write_opts *o, int hfd,
                      uint8_t *buf, cli_progress *prog, uint64_t *done, gguf_error *err)
{
    uint64_t total = tensor_bytes(t);
    if (o->sparse) {
        if (hfd >= 0)
            return gguf_writer_copy_fd(w, hfd, 0, total, err);
        memset(buf, 0, GEN_CHUNK);
        for (uint64_t off = 0; off < total;) {
            uint64_t k = total - off < GEN_CHUNK ? total - off : GEN_CHUNK;
            int rc = gguf_writer_write(w, buf, k, err);
            if (rc)
                return rc;
            off += k;
        }
        return 0;
    }
    uint64_t row = 0;
    gguf_type_row_bytes(t->type, t->ne[0], &row);
    int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
    int64_t per = row ? (int64_t)(GEN_CHUNK / row) : rows;
    if (per < 1)
        per = 1;
    gen_rng r;
    gen_rng_seed(&r, o->seed, t->name);
    uint8_t *big = NULL;
    uint8_t *dst = buf;
    if (row > GEN_CHUNK) { /* one row larger than the chunk: rare (huge ne[0]) */
        big = malloc(row);
        if (!big)
            return gen_fail(err, GGUF_E_NOMEM, "out of memory");
        dst = big;
    }
    int rc = 0;
    for (int64_t i = 0; i < rows && !rc; i += per) {
        int64_t n = rows - i < per ? rows - i : per;
        gen_fill_rows(t, &r, dst, n);
        rc = gguf_writer_write(w, dst, row * (uint64_t)n, err);
        *done += row * (uint64_t)n;
        cli_progress_update(prog, *done);
    }
    free(big);
    return rc;
}

static int write_part(const gen_plan *p, const char *path, bool split, uint32_t part,
                      uint32_t n_parts, uint32_t t0, uint32_t t1, const gen_write_opts *o, int hfd, uint8_t *buf,
                      cli_progress *prog, uint64_t *done, gguf_error *err)
{
    gguf_writer_opts wo = {0};
    wo.overwrite = o->overwrite;
    wo.no_sync = o->no_sync;
    wo.cancel = o->cancel;
    gguf_writer *w = NULL;
    int rc = gguf_writer_create(&w, path, &wo, err);
    if (rc)
        return rc;
    if (part == 0)
        for (uint32_t i = 0; i < p->n_kv && !rc; i++)
            rc = gguf_writer_add_kv(w, p->kv[i].key, &p->kv[i].v, err);
    if (split && !rc) {
        gguf_value v = {.type = GGUF_VALUE_UINT16};
        v.v.u16 = (uint16_t)part;
        rc = gguf_writer_add_kv(w, GGUF_KEY_SPLIT_NO, &v, err);
        v.v.u16 = (uint16_t)n_parts;
        if (!rc)
            rc = gguf_writer_add_kv(w, GGUF_KEY_SPLIT_COUNT, &v, err);
        if (!rc)
            rc = gguf_writer_add_i32(w, GGUF_KEY_SPLIT_TENSORS, (int32_t)p->n_t, err);
    }
    for (uint32_t i = t0; i < t1 && !rc; i++)
        rc = gguf_writer_add_tensor(w, p->t[i].name, p->t[i].type, p->t[i].n_dims, p->t[i].ne,
                                    err);
    if (!rc)
        rc = gguf_writer_write_header(w, err);
    for (uint32_t i = t0; i < t1 && !rc; i++)
        rc = write_data(w, &p->t[i], o, hfd, buf, prog, done, err);
    if (!rc)
        rc = gguf_writer_finish(w, err);
    gguf_writer_free(w);
    return rc;
}

int gen_plan_write(const gen_plan *p, const char *out_path, const gen_write_opts *o,
                   uint32_t *n_parts_out, gguf_error *err)
{
    if (p->err)
        return gen_fail(err, p->err, "%s: out of memory", out_path);
    uint32_t *starts = calloc((size_t)p->n_t + 2, sizeof *starts);
    uint8_t *buf = malloc(GEN_CHUNK);
    int rc = 0, hfd = -1;
    char *prefix = NULL, *name = NULL;
    uint32_t n_parts = 0, written = 0;
    if (!starts || !buf) {
        rc = gen_fail(err, GGUF_E_NOMEM, "out of memory");
        goto done;
    }
    bool split = o->split_max_tensors || o->split_max_size;
    n_parts = split ? plan_parts(p, o, starts) : 1;
    starts[n_parts] = p->n_t;
    if (n_parts > 65535) {
        rc = gen_fail(err, GGUF_E_LIMIT, "%s: %u parts: more than split.count (u16) can hold", out_path, n_parts);
        goto done;
    }
    uint64_t total = 0, maxb = 0;
    for (uint32_t i = 0; i < p->n_t; i++) {
        uint64_t b = tensor_bytes(&p->t[i]);
        total += b;
        maxb = b > maxb ? b : maxb;
    }
    if (o->sparse)
        hfd = holes_fd(maxb ? maxb : 1);
    size_t plen = strlen(out_path);
    prefix = strdup(out_path);
    name = malloc(plen + 64);
    if (!prefix || !name) {
        rc = gen_fail(err, GGUF_E_NOMEM, "out of memory");
        goto done;
    }
    if (plen > 5 && !strcmp(prefix + plen - 5, ".gguf"))
        prefix[plen - 5] = 0;
    cli_progress prog;
    cli_progress_start(&prog, "writing", o->sparse ? 0 : total);
    uint64_t done_bytes = 0;
    for (uint32_t i = 0; i < n_parts && !rc; i++) {
        if (split)
            gguf_split_part_name(name, plen + 64, prefix, i + 1, n_parts);
        else
            snprintf(name, plen + 64, "%s", out_path);
        rc = write_part(p, name, split, i, n_parts, starts[i], starts[i + 1], o, hfd, buf, &prog,
                        &done_bytes, err);
        if (!rc)
            written++;
    }
    cli_progress_end(&prog);
    if (n_parts_out)
        *n_parts_out = split ? n_parts : 0; /* 0: one plain file */
    if (rc && split) /* no half set left behind */
        for (uint32_t i = 0; i < written; i++) {
            gguf_split_part_name(name, plen + 64, prefix, i + 1, n_parts);
            unlink(name);
        }
done:
    if (hfd >= 0)
        close(hfd);
    free(name);
    free(prefix);
    free(buf);
    free(starts);
    return rc;
}
