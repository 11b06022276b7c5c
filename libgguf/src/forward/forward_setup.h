/* What every backend of the forward pass derives from the model and the
 * options before it computes anything: the checks of the hyper-parameters,
 * the RoPE/YaRN set-up, the softmax scale, the KV cache widths and the MoE
 * routing configuration, and the engine runtime a shard plan imposes. One
 * place for this plumbing, so that the CPU reference, its virtual ranks and
 * the GPU backends agree on it while each computes with its own numerics.
 * Not installed; the GPU backend (cuda/) includes it. */
#ifndef GGUF_FORWARD_SETUP_H
#define GGUF_FORWARD_SETUP_H

#include "forward/forward_ops.h"
#include "gguf/shard.h"

typedef struct fw_setup {
    const gguf_model *m;
    const gguf_hparams *hp;
    gguf_fwd_opts o;
    int prec;             /* GGUF_FWD_F32 / _F64 */
    int64_t k_w, v_w;     /* KV cache row widths: GQA n_head_kv * head sizes; MLA the
                             latent kv_lora_rank + qk_rope and v_w 0 */
    fw_rope rope;         /* attention RoPE (YaRN, rope_freqs included) */
    double kq_scale;      /* softmax scale (MLA YaRN: mscale^2 folded in) */
    float *rope_ff;       /* rope_freqs.weight dequantized (owned; NULL when absent) */
    fw_moe_cfg moe;       /* routing as the model says */
    bool use_exp_probs_b; /* the selection bias is applied when the model has it */
    double shared_scale;  /* factor on the shared experts' output */
} fw_setup;

/*
 * Check opts and the hyper-parameters the ops rely on, and derive the rest.
 * @return 0; GGUF_E_INVALID (no model, bad precision or thread count);
 *         GGUF_E_BAD_VALUE (hyper-parameters the ops cannot run);
 *         GGUF_E_BAD_TYPE / GGUF_E_NOMEM (rope_freqs).
 */
int fw_setup_init(fw_setup *s, const gguf_model *m, const gguf_fwd_opts *opts, gguf_error *err);
/* The same for a backend that also reads models over an HF checkpoint
 * (gguf_model_open_hf: their tensors have no data, their rows come from
 * gguf_model_tensor_rows). fw_setup_init refuses those with
 * GGUF_E_UNSUPPORTED: backends that read tensor data (the GPU) cannot run them. */
int fw_setup_init_any(fw_setup *s, const gguf_model *m, const gguf_fwd_opts *opts,
                      gguf_error *err);
void fw_setup_free(fw_setup *s);

/* The settings an engine's runtime changes (a shard plan's; faults can break
 * them): RoPE pairs, softmax scale, routing normalisation and scale, the
 * selection bias, the shared experts' factor. rt NULL: the model's own. */
typedef struct fw_runtime {
    fw_rope rope;
    double kq_scale;
    fw_moe_cfg moe;
    bool use_exp_probs_b;
    double shared_scale;
} fw_runtime;
void fw_runtime_init(fw_runtime *out, const fw_setup *s, const gguf_shard_runtime *rt);

/* ---- shared plumbing ---- */

void *fw_xcalloc(size_t n, size_t sz);
int fw_nomem(gguf_error *err, const char *what);
double fw_now(void);
/* GGUF_E_NOT_FOUND naming blk.N.ROLE (layer -1: the global tensor). */
int fw_missing(int64_t layer, gguf_role role, gguf_error *err);
/* Hand a capture to cb (rank -1: single-rank run): the name from the point,
 * a capture callback's non-zero return becomes the eval's error. */
int fw_emit(gguf_fwd_capture_fn cb, void *user, int layer, gguf_capture_point p, int rank,
            const float *data, int64_t width, int64_t n_tok, int64_t pos0, gguf_error *err);

#endif /* GGUF_FORWARD_SETUP_H */
