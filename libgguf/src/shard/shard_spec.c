/* Faults as users name them, and the digest of a plan (gguf/shard.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error_lib.h"
#include "gguf/hash.h"
#include "gguf/shard.h"

int gguf_fault_parse(const char *spec, gguf_fault *f, int64_t *layer, gguf_error *err)
{
    char name[96];
    *layer = -1;
    if (!spec || snprintf(name, sizeof name, "%s", spec) >= (int)sizeof name)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "fault '%s': too long",
                         spec ? spec : "");
    char *at = strchr(name, '@');
    if (at) {
        *at = 0;
        char *end;
        errno = 0;
        const long long v = strtoll(at + 1, &end, 10);
        if (end == at + 1 || *end || errno || v < 0)
            return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                             "fault '%s': not FAULT or FAULT@LAYER", spec);
        *layer = (int64_t)v;
    }
    if (gguf_fault_from_name(name, f) || *f == GGUF_FAULT_NONE)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "unknown fault '%s' (docs/faults.md lists them)", name);
    return 0;
}

int gguf_shard_apply_fault_spec(gguf_shard_plan *p, const char *spec, gguf_error *err)
{
    gguf_fault f;
    int64_t layer;
    int rc = gguf_fault_parse(spec, &f, &layer, err);
    return rc ? rc : gguf_shard_apply_fault(p, f, layer, err);
}

void gguf_shard_plan_digest(const gguf_shard_plan *p, char hex[GGUF_PLAN_DIGEST_HEX])
{
    gguf_hasher *h = NULL;
    hex[0] = 0;
    if (gguf_hasher_create(&h))
        return;
    const int tp = gguf_shard_plan_ranks(p);
    for (int64_t i = 0; i < gguf_shard_plan_count(p); i++) {
        const gguf_shard_tensor *e = gguf_shard_plan_at(p, i);
        gguf_hasher_update(h, e->name, strlen(e->name) + 1);
        int32_t f[6] = {(int32_t)e->rule, e->split_dim, e->expert_dim, e->cat_dim, e->slot,
                        (int32_t)e->reduce_sum};
        gguf_hasher_update(h, f, sizeof f);
        for (int r = 0; r < tp; r++) {
            const gguf_shard_slice *sl = &e->ranks[r];
            gguf_hasher_update(h, sl->ne, sizeof sl->ne);
            gguf_hasher_update(h, &sl->pad, sizeof sl->pad);
            for (int32_t k = 0; k < sl->n_pieces; k++) {
                const gguf_shard_piece *pc = &sl->pieces[k];
                int64_t v[11] = {pc->src, pc->transpose, pc->dst};
                memcpy(v + 3, pc->lo, sizeof pc->lo);
                memcpy(v + 7, pc->hi, sizeof pc->hi);
                gguf_hasher_update(h, v, sizeof v);
            }
        }
    }
    const gguf_shard_opts *o = gguf_shard_plan_opts(p);
    int32_t ov[4] = {o->tp, o->ep, (int32_t)o->engine, o->vocab_pad};
    gguf_hasher_update(h, ov, sizeof ov);
    const gguf_shard_runtime *rt = gguf_shard_plan_runtime(p);
    double rv[4] = {rt->attn_scale, rt->routed_scale, rt->shared_scale, (double)rt->rope_pairs};
    int32_t rb[3] = {rt->use_exp_probs_b, rt->norm_topk, rt->mla_cache_replicated};
    gguf_hasher_update(h, rv, sizeof rv);
    gguf_hasher_update(h, rb, sizeof rb);
    gguf_digest d;
    gguf_hasher_final(h, &d);
    gguf_hasher_free(h);
    gguf_digest_hex(&d, hex);
}
