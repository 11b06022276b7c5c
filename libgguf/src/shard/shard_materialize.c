/* A rank's slice of a plan entry as F32: pieces dequantized, transposed and placed. */
#include "util/error_lib.h"
#include "shard/shard_internal.h"

#include <stdlib.h>
#include <string.h>

#include "gguf/dequant.h"
#include "gguf/types.h"

int gguf_shard_materialize(const gguf_shard_plan *p, int64_t i, int r, float *out, size_t n,
                           gguf_error *err)
{
    if (!p || i < 0 || i >= p->n || r < 0 || r >= p->tp || !out)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "materialize: invalid argument");
    const gguf_shard_tensor *e = &p->e[i];
    const gguf_shard_slice *s = &e->ranks[r];
    const int64_t total = s->ne[0] * s->ne[1] * s->ne[2] * s->ne[3];
    if ((uint64_t)total > n)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "materialize: %s rank %d needs %lld floats, got %zu", e->name, r,
                         (long long)total, n);
    memset(out, 0, (size_t)total * sizeof *out);
    const int cd = e->cat_dim < 0 ? 1 : e->cat_dim;
    int64_t inner = 1;
    for (int d = 0; d < cd; d++)
        inner *= s->ne[d];
    float *tmp = NULL;
    int64_t tmp_n = 0, row_k = 0;
    int rc = 0;
    for (int32_t k = 0; k < s->n_pieces && rc == 0; k++) {
        const gguf_shard_piece *pc = &s->pieces[k];
        const gguf_shard_tensor *src = &p->e[pc->src];
        if (!src->t || !src->t->data) {
            rc = gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                           "materialize: %s has no data (header-only model)", src->name);
            break;
        }
        const int64_t ne0 = src->ne[0];
        if (tmp_n < ne0) {
            free(tmp);
            tmp = malloc((size_t)ne0 * sizeof *tmp);
            tmp_n = ne0;
            if (!tmp) {
                rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
                break;
            }
        }
        uint64_t rb = 0;
        gguf_type_row_bytes(src->type, ne0, &rb);
        const int64_t w0 = pc->hi[0] - pc->lo[0], w1 = pc->hi[1] - pc->lo[1];
        int64_t pos = pc->dst * (cd == 0 ? 1 : inner);
        for (int64_t i3 = pc->lo[3]; i3 < pc->hi[3] && rc == 0; i3++)
            for (int64_t i2 = pc->lo[2]; i2 < pc->hi[2] && rc == 0; i2++)
                for (int64_t i1 = pc->lo[1]; i1 < pc->hi[1]; i1++) {
                    int64_t row = i1 + src->ne[1] * (i2 + src->ne[2] * i3);
                    const uint8_t *data = src->t->data + (uint64_t)row * rb;
                    if ((rc = gguf_dequant_row(src->type, data, tmp, ne0, err)) != 0)
                        break;
                    if (pc->transpose) {
                        for (int64_t j = 0; j < w0; j++)
                            out[pos + j * w1 + (i1 - pc->lo[1])] = tmp[pc->lo[0] + j];
                    } else if (cd == 0) {
                        memcpy(out + row_k * s->ne[0] + pc->dst, tmp + pc->lo[0],
                               (size_t)w0 * sizeof *out);
                        row_k++;
                    } else {
                        memcpy(out + pos, tmp + pc->lo[0], (size_t)w0 * sizeof *out);
                        pos += w0;
                    }
                }
        if (cd == 0)
            row_k = 0;
    }
    free(tmp);
    return rc;
}
