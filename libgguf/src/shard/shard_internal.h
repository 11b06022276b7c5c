/* Internal layout of gguf_shard_plan; shared by the shard_*.c files. Not installed. */
#ifndef GGUF_SHARD_INTERNAL_H
#define GGUF_SHARD_INTERNAL_H

#include "gguf/shard.h"

struct gguf_shard_plan {
    const gguf_model *m;
    gguf_shard_opts o;
    int tp, ep, moe_tp;
    int64_t vocab_padded;     /* vocabulary rows after the engine's padding */

    int64_t n, cap;
    gguf_shard_tensor *e;     /* entries; e[i].ranks points at slices + i*tp */
    gguf_shard_slice **sl;    /* per entry: tp slices (owned) */
    char **names;             /* owned names of virtual entries (NULL for stored) */
    int32_t *by_role;         /* (n_layer + 1) x GGUF_ROLE_COUNT: entry index + 1 */

    gguf_shard_check *checks;
    int64_t n_checks, cap_checks;

    gguf_shard_runtime rt;
    uint64_t *rank_bytes;     /* tp */
};

/* Mutable view of rank r's slice of entry i. */
static inline gguf_shard_slice *shard_slice(gguf_shard_plan *p, int64_t i, int r)
{
    return &p->sl[i][r];
}

/* Replace a slice's pieces with a copy of n pieces (owned by the slice). @return 0 or NOMEM. */
int shard_set_pieces(gguf_shard_slice *s, const gguf_shard_piece *pc, int32_t n);

/* Recompute ne, bytes, quant_cut_ok and reason of a slice from its pieces and pad. */
void shard_slice_finish(gguf_shard_plan *p, int64_t i, int r);

/* Recompute per-rank totals. */
void shard_totals(gguf_shard_plan *p);

/* Add a check (message formatted). @return 0 or NOMEM. */
int shard_check(gguf_shard_plan *p, gguf_check_level level, const char *code, const char *tensor,
                const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Pieces of the HF kv_b_proj rows [a, b) of layer il (per-head [k_h; v_h] order, or with
 * `stacked` the [K all heads; V all heads] order), placed from dst0. *out is malloc'd. */
int shard_kvb_pieces(gguf_shard_plan *p, int64_t il, int64_t a, int64_t b, bool stacked,
                     bool transpose_k, int64_t dst0, gguf_shard_piece **out, int32_t *n);

/* Balanced split of n into parts: part i is [n*i/parts, n*(i+1)/parts). */
static inline void shard_split(int64_t n, int64_t parts, int64_t i, int64_t *lo, int64_t *hi)
{
    *lo = n * i / parts;
    *hi = n * (i + 1) / parts;
}

#endif
