/* The forward pass's set-up shared by every backend (forward_setup.h) and
 * the capture-point table. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/error_lib.h"
#include "forward/forward_setup.h"
#include "gguf/dequant.h"

/* ------------------------------------------------------------ capture points */

static const char *const cap_names[GGUF_CAP_COUNT] = {
    [GGUF_CAP_ATTN_NORM] = "attn_norm",     [GGUF_CAP_ATTN_OUT] = "attn_out",
    [GGUF_CAP_ATTN_RESIDUAL] = "attn_residual", [GGUF_CAP_FFN_NORM] = "ffn_norm",
    [GGUF_CAP_MOE_EXPERTS] = "moe_experts", [GGUF_CAP_MOE_WEIGHTS] = "moe_weights",
    [GGUF_CAP_FFN_OUT] = "ffn_out",         [GGUF_CAP_RESIDUAL] = "residual",
    [GGUF_CAP_OUTPUT_NORM] = "output_norm", [GGUF_CAP_LOGITS] = "logits",
};

const char *gguf_capture_point_name(gguf_capture_point p)
{
    return (unsigned)p < GGUF_CAP_COUNT ? cap_names[p] : NULL;
}

int gguf_capture_point_from_name(const char *op, gguf_capture_point *out)
{
    for (int p = 0; op && p < GGUF_CAP_COUNT; p++)
        if (strcmp(op, cap_names[p]) == 0) {
            *out = (gguf_capture_point)p;
            return 0;
        }
    return GGUF_E_NOT_FOUND;
}

bool gguf_capture_point_in_block(gguf_capture_point p)
{
    return (unsigned)p < GGUF_CAP_OUTPUT_NORM;
}

int gguf_capture_name(char *buf, size_t size, int layer, gguf_capture_point p)
{
    const char *op = gguf_capture_point_name(p);
    if (!op)
        op = "?";
    if (gguf_capture_point_in_block(p))
        return snprintf(buf, size, "blk.%d.%s", layer, op);
    return snprintf(buf, size, "%s", op);
}

int fw_emit(gguf_fwd_capture_fn cb, void *user, int layer, gguf_capture_point p, int rank,
            const float *data, int64_t width, int64_t n_tok, int64_t pos0, gguf_error *err)
{
    if (!cb)
        return 0;
    char name[64];
    gguf_capture_name(name, sizeof name, layer, p);
    const int lay = gguf_capture_point_in_block(p) ? layer : -1;
    gguf_fwd_capture cap = {name, lay, gguf_capture_point_name(p), rank, data,
                            {width, n_tok}, pos0, p};
    int rc = cb(user, &cap);
    if (rc) {
        if (rc > 0 || rc < GGUF_E_STATUS_MIN)
            rc = GGUF_E_INTERRUPTED;
        return gguf_fail(err, rc, GGUF_NO_OFFSET, "forward: capture %s stopped the run", name);
    }
    return 0;
}

/* ------------------------------------------------------------ plumbing */

void *fw_xcalloc(size_t n, size_t sz)
{
    if (n == 0)
        n = 1;
    return calloc(n, sz);
}

int fw_nomem(gguf_error *err, const char *what)
{
    return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "forward: out of memory (%s)", what);
}

double fw_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int fw_missing(int64_t layer, gguf_role role, gguf_error *err)
{
    if (layer < 0)
        return gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET, "forward: %s.%s missing",
                         gguf_role_name(role), gguf_role_suffix(role));
    return gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET, "forward: blk.%lld.%s.%s missing",
                     (long long)layer, gguf_role_name(role), gguf_role_suffix(role));
}

/* ------------------------------------------------------------ set-up */

/* What the ops rely on, beyond what the model module checks; NULL when fine. */
static const char *hparams_problem(const gguf_hparams *h)
{
    const int64_t rot = h->is_mla ? h->qk_rope : h->n_rot;
    if (h->n_embd < 1 || h->n_vocab < 1 || h->n_head < 1)
        return "empty model dimensions";
    if (!h->is_mla && (h->n_head_kv < 1 || h->n_head % h->n_head_kv))
        return "head_count is not a multiple of head_count_kv";
    if (rot % 2 || rot > (h->is_mla ? h->qk_rope : h->n_embd_head_k))
        return "rope.dimension_count is odd or larger than the head";
    if (h->is_mla && (h->kv_lora_rank < 1 || h->qk_nope < 0 || h->v_head < 1))
        return "MLA ranks or head sizes are not positive";
    if (h->idx_head_dim > 0 && h->idx_head_dim < rot)
        return "the indexer head is smaller than its RoPE part";
    if (h->n_expert > FW_MAX_EXPERTS || h->n_expert_used > h->n_expert ||
        (h->n_group > 1 && h->n_expert % h->n_group))
        return "expert counts or groups out of range";
    return NULL;
}

static int setup_init(fw_setup *s, const gguf_model *m, const gguf_fwd_opts *opts, bool any,
                      gguf_error *err)
{
    memset(s, 0, sizeof *s);
    if (!m)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "forward: no model");
    if (!any && gguf_model_checkpoint(m))
        return gguf_fail(err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                         "%s: an HF checkpoint runs on the CPU reference only (this backend "
                         "reads GGUF tensor data); convert it to GGUF for the GPU",
                         gguf_model_name(m));
    if (opts)
        s->o = *opts;
    if (s->o.precision != GGUF_FWD_F32 && s->o.precision != GGUF_FWD_F64)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "forward: bad precision %d",
                         s->o.precision);
    if (s->o.n_threads < 0 || s->o.n_threads > 64)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "forward: bad thread count %d",
                         s->o.n_threads);
    const gguf_hparams *hp = gguf_model_hparams(m);
    const char *why = hparams_problem(hp);
    if (why)
        return gguf_fail(err, GGUF_E_BAD_VALUE, GGUF_NO_OFFSET, "%s: forward: %s",
                         gguf_model_name(m), why);
    s->m = m;
    s->hp = hp;
    s->prec = s->o.precision;
    if (hp->is_mla) {
        s->k_w = hp->kv_lora_rank + hp->qk_rope;
        s->v_w = 0;
    } else {
        s->k_w = hp->n_head_kv * hp->n_embd_head_k;
        s->v_w = hp->n_head_kv * hp->n_embd_head_v;
    }
    /* RoPE. MLA archs fold YaRN's magnitude into the softmax scale (mscale^2)
     * and leave cos/sin unscaled; other archs scale cos/sin by YaRN's
     * 1 + 0.1 ln(factor), as HF's attention_factor does. */
    const int64_t n_rot = hp->is_mla ? hp->qk_rope : hp->n_rot;
    if (hp->rope_scaling == GGUF_ROPE_SCALING_YARN && hp->rope_factor > 1.0) {
        double msc = hp->is_mla ? 1.0
                                : (hp->rope_attn_factor > 0 ? hp->rope_attn_factor : 1.0) *
                                      (1.0 + 0.1 * log(hp->rope_factor));
        fw_rope_init_yarn(&s->rope, hp->rope_pairs, n_rot, hp->rope_freq_base, hp->rope_factor,
                          hp->yarn_orig_ctx > 0 ? hp->yarn_orig_ctx : 4096, hp->yarn_beta_fast,
                          hp->yarn_beta_slow, msc);
    } else {
        fw_rope_init(&s->rope, hp->rope_pairs, n_rot, hp->rope_freq_base);
        if (hp->rope_scaling == GGUF_ROPE_SCALING_LINEAR && hp->rope_factor > 0)
            s->rope.freq_scale = 1.0 / hp->rope_factor;
    }
    s->kq_scale = hp->attn_scale > 0 ? hp->attn_scale : 1.0 / sqrt((double)hp->n_embd_head_k);
    /* llama 3.x: per-frequency divisors (rope_freqs.weight), n_rot/2 of them */
    const gguf_tensor *rf = gguf_model_get(m, -1, GGUF_ROLE_ROPE_FREQS);
    if (rf && rf->n_elements >= n_rot / 2) {
        s->rope_ff = malloc((size_t)rf->n_elements * sizeof(float));
        int rc = s->rope_ff ? gguf_dequant_row(rf->type, rf->data, s->rope_ff, rf->ne[0], err)
                            : fw_nomem(err, "rope_freqs");
        if (rc) {
            fw_setup_free(s);
            return rc;
        }
        s->rope.freq_factors = s->rope_ff;
    }
    s->moe = (fw_moe_cfg){hp->n_expert, hp->n_expert_used,
                          hp->gating == GGUF_GATING_SIGMOID ? GGUF_GATING_SIGMOID
                                                            : GGUF_GATING_SOFTMAX,
                          hp->n_group, hp->topk_group, hp->norm_topk,
                          hp->routed_scale > 0 ? hp->routed_scale : 1.0};
    s->use_exp_probs_b = true;
    s->shared_scale = 1.0;
    return 0;
}

int fw_setup_init(fw_setup *s, const gguf_model *m, const gguf_fwd_opts *opts, gguf_error *err)
{
    return setup_init(s, m, opts, false, err);
}

int fw_setup_init_any(fw_setup *s, const gguf_model *m, const gguf_fwd_opts *opts,
                      gguf_error *err)
{
    return setup_init(s, m, opts, true, err);
}

void fw_setup_free(fw_setup *s)
{
    if (!s)
        return;
    free(s->rope_ff);
    s->rope_ff = NULL;
}

void fw_runtime_init(fw_runtime *out, const fw_setup *s, const gguf_shard_runtime *rt)
{
    out->rope = s->rope;
    out->kq_scale = s->kq_scale;
    out->moe = s->moe;
    out->use_exp_probs_b = s->use_exp_probs_b;
    out->shared_scale = s->shared_scale;
    if (!rt)
        return;
    out->rope.type = rt->rope_pairs;
    if (rt->attn_scale > 0)
        out->kq_scale = rt->attn_scale;
    out->moe.norm = rt->norm_topk;
    out->moe.scale = rt->routed_scale > 0 ? rt->routed_scale : 1.0;
    out->use_exp_probs_b = rt->use_exp_probs_b;
    out->shared_scale = rt->shared_scale;
}
