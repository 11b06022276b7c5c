/*
 * Hyper-parameters from GGUF metadata, and the model: every tensor given a
 * role and a layer, required tensors present, shapes agreeing with the
 * hyper-parameters.
 *
 * Key names and defaults follow llama.cpp's llama-model.cpp (load_hparams),
 * which is what wrote or reads every file we meet. Two traps it documents:
 *  - deepseek2/glm-dsa files store head_count_kv = 1 (MLA keeps one shared
 *    latent); head counts for kv_b come from head_count, never from it;
 *  - their key_length/value_length are the latent cache widths
 *    (kv_lora + rope, kv_lora); the per-head widths are key_length_mla and
 *    value_length_mla. Legacy files (attn_kv_b) have only the plain keys,
 *    holding the per-head widths.
 */
#include "util/error_lib.h"
#include "model/model_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Sanity caps: larger values are treated as corrupt, and keep products in range. */
#define CAP_DIM (1ll << 24)
#define CAP_LAYERS 4096
#define CAP_EXPERTS 65536

typedef struct kctx {
    const gguf_file *f;
    const char *arch;
    const char *name;
    char missing[640];
    size_t mlen;
    int n_missing;
    int rc;
    gguf_error *err;
} kctx;

static void key_name(const kctx *k, const char *suffix, char *out, size_t size)
{
    snprintf(out, size, "%s.%s", k->arch, suffix);
}

static void note_missing(kctx *k, const char *key)
{
    k->n_missing++;
    if (k->mlen + strlen(key) + 3 < sizeof k->missing) {
        k->mlen += (size_t)snprintf(k->missing + k->mlen, sizeof k->missing - k->mlen, "%s%s",
                                    k->mlen ? ", " : "", key);
    }
}

static int key_fail(kctx *k, int code, const gguf_kv *kv, const char *key, const char *what)
{
    if (k->rc == 0)
        k->rc = gguf_fail(k->err, code, kv ? kv->offset : GGUF_NO_OFFSET, "%s: %s: %s", k->name,
                          key, what);
    return 0;
}

/*
 * Integer key: 1 when present (value in *out), 0 when absent (*out = def).
 * Arrays (per-layer values) are accepted when every element is equal.
 */
static int key_i64(kctx *k, const char *suffix, int64_t *out, bool required, int64_t def)
{
    char key[160];
    key_name(k, suffix, key, sizeof key);
    *out = def;
    const gguf_kv *kv = gguf_file_kv_find(k->f, key);
    if (!kv) {
        if (required)
            note_missing(k, key);
        return 0;
    }
    int64_t v = 0;
    if (kv->value.type == GGUF_VALUE_ARRAY) {
        if (kv->value.v.arr.n == 0)
            return key_fail(k, GGUF_E_BAD_VALUE, kv, key, "empty array");
        for (uint64_t i = 0; i < kv->value.v.arr.n; i++) {
            gguf_value e = gguf_value_elem(&kv->value, i);
            int64_t x;
            if (gguf_value_to_i64(&e, &x) != 0)
                return key_fail(k, GGUF_E_WRONG_TYPE, kv, key,
                                "array of non-integers");
            if (i == 0)
                v = x;
            else if (x != v)
                return key_fail(k, GGUF_E_UNSUPPORTED, kv, key,
                                "per-layer values that differ are not supported");
        }
    } else {
        int rc = gguf_value_to_i64(&kv->value, &v);
        if (rc == GGUF_E_WRONG_TYPE)
            return key_fail(k, rc, kv, key, "not an integer");
        if (rc != 0)
            return key_fail(k, GGUF_E_BAD_VALUE, kv, key, "out of range");
    }
    if (v < 0 || v > CAP_DIM)
        return key_fail(k, GGUF_E_BAD_VALUE, kv, key,
                        v < 0 ? "negative" : "over the sanity cap of 2^24");
    *out = v;
    return 1;
}

static int key_f64(kctx *k, const char *suffix, double *out, bool required, double def)
{
    char key[160];
    key_name(k, suffix, key, sizeof key);
    *out = def;
    const gguf_kv *kv = gguf_file_kv_find(k->f, key);
    if (!kv) {
        if (required)
            note_missing(k, key);
        return 0;
    }
    double v;
    if (gguf_value_to_f64(&kv->value, &v) != 0)
        return key_fail(k, GGUF_E_WRONG_TYPE, kv, key, "not a number");
    if (!isfinite(v))
        return key_fail(k, GGUF_E_BAD_VALUE, kv, key, "not finite");
    *out = v;
    return 1;
}

static int key_bool(kctx *k, const char *suffix, bool *out, bool def)
{
    char key[160];
    key_name(k, suffix, key, sizeof key);
    *out = def;
    const gguf_kv *kv = gguf_file_kv_find(k->f, key);
    if (!kv)
        return 0;
    if (kv->value.type == GGUF_VALUE_BOOL) {
        *out = kv->value.v.b;
        return 1;
    }
    int64_t v;
    if (gguf_value_to_i64(&kv->value, &v) != 0)
        return key_fail(k, GGUF_E_WRONG_TYPE, kv, key, "not a bool");
    *out = v != 0;
    return 1;
}

/* The GGUF key of a field, for the shared checks' messages: "ARCH.suffix". */
static void gguf_key_name(const void *arch, const char *suffix, char *out, size_t size)
{
    snprintf(out, size, "%s.%s", (const char *)arch, suffix);
}

static int bad(kctx *k, const char *fmt_key, const char *what)
{
    if (k->rc == 0)
        k->rc = gguf_fail(k->err, GGUF_E_BAD_VALUE, GGUF_NO_OFFSET, "%s: %s: %s", k->name,
                          fmt_key, what);
    return k->rc;
}

static bool arch_is_mla(gguf_arch a)
{
    return a == GGUF_ARCH_DEEPSEEK2 || a == GGUF_ARCH_GLM_DSA;
}

static bool arch_is_moe(gguf_arch a)
{
    return a == GGUF_ARCH_QWEN3MOE || a == GGUF_ARCH_DEEPSEEK2 || a == GGUF_ARCH_GLM4MOE ||
           a == GGUF_ARCH_GLM_DSA;
}

/* Does the tensor list hold a tensor of this role in any layer? */
static const gguf_tensor *find_role_any(gguf_arch arch, const gguf_tensor *const *ts, int64_t n,
                                        gguf_role want)
{
    for (int64_t i = 0; i < n; i++) {
        gguf_role r;
        int64_t il;
        if (gguf_role_parse(arch, ts[i]->name, &r, &il) == 0 && r == want)
            return ts[i];
    }
    return NULL;
}

static int load_hparams(gguf_hparams *hp, const gguf_file *f, const char *name,
                        const gguf_tensor *const *ts, int64_t n, gguf_error *err)
{
    memset(hp, 0, sizeof *hp);
    gguf_str as;
    int rc = gguf_get_str(f, "general.architecture", &as, NULL);
    if (rc == GGUF_E_NOT_FOUND)
        return gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET,
                         "%s: missing metadata: general.architecture", name);
    if (rc != 0)
        return gguf_fail(err, GGUF_E_WRONG_TYPE, GGUF_NO_OFFSET,
                         "%s: general.architecture: not a string", name);
    if (as.len >= sizeof hp->arch_name)
        return gguf_fail(err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                         "%s: general.architecture: unknown architecture (too long)", name);
    memcpy(hp->arch_name, as.data, as.len);
    hp->arch_name[as.len] = '\0';
    hp->arch = gguf_arch_from_name(hp->arch_name);
    if (hp->arch == GGUF_ARCH_UNKNOWN)
        return gguf_fail(err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                         "%s: general.architecture: '%s' is not supported (llama, qwen2, qwen3, "
                         "qwen3moe, deepseek2, glm4moe, glm-dsa)",
                         name, hp->arch_name);
    const gguf_arch a = hp->arch;
    const bool mla = arch_is_mla(a), moe_arch = arch_is_moe(a);

    kctx k = {.f = f, .arch = hp->arch_name, .name = name, .err = err};

    key_i64(&k, "block_count", &hp->n_layer, true, 0);
    key_i64(&k, "embedding_length", &hp->n_embd, true, 0);
    key_i64(&k, "context_length", &hp->n_ctx_train, false, 0);
    key_i64(&k, "nextn_predict_layers", &hp->n_nextn, false, 0);
    key_i64(&k, "attention.head_count", &hp->n_head, true, 0);
    key_i64(&k, "attention.head_count_kv", &hp->n_head_kv, false, hp->n_head);
    key_f64(&k, "attention.layer_norm_rms_epsilon", &hp->rms_eps, true, 0);
    key_f64(&k, "rope.freq_base", &hp->rope_freq_base, false, 10000.0);
    /* Dense FFN width: MoE models with no dense layer may still carry it. */
    bool ff_required = !moe_arch || a == GGUF_ARCH_DEEPSEEK2 || a == GGUF_ARCH_GLM_DSA ||
                       a == GGUF_ARCH_GLM4MOE;
    key_i64(&k, "feed_forward_length", &hp->n_ff, ff_required && a != GGUF_ARCH_QWEN3MOE, 0);

    /* vocabulary */
    if (!key_i64(&k, "vocab_size", &hp->n_vocab, false, 0)) {
        const gguf_kv *tok = gguf_file_kv_find(f, "tokenizer.ggml.tokens");
        if (tok && tok->value.type == GGUF_VALUE_ARRAY)
            hp->n_vocab = (int64_t)tok->value.v.arr.n;
    }

    /* attention head widths */
    int64_t key_len = 0, val_len = 0, key_mla = 0, val_mla = 0;
    int has_kl = key_i64(&k, "attention.key_length", &key_len, false, 0);
    int has_vl = key_i64(&k, "attention.value_length", &val_len, false, 0);
    int has_rot = key_i64(&k, "rope.dimension_count", &hp->n_rot, mla, 0);

    if (mla) {
        hp->is_mla = true;
        key_i64(&k, "attention.q_lora_rank", &hp->q_lora_rank, a == GGUF_ARCH_GLM_DSA, 0);
        key_i64(&k, "attention.kv_lora_rank", &hp->kv_lora_rank, true, 0);
        int has_km = key_i64(&k, "attention.key_length_mla", &key_mla, false, 0);
        int has_vm = key_i64(&k, "attention.value_length_mla", &val_mla, false, 0);
        if (has_km || has_vm) {
            if (!has_km)
                note_missing(&k, "attention.key_length_mla");
            if (!has_vm)
                note_missing(&k, "attention.value_length_mla");
        } else {
            /* legacy layout: the plain keys hold the per-head widths */
            if (!has_kl) {
                char kn[160];
                key_name(&k, "attention.key_length_mla", kn, sizeof kn);
                note_missing(&k, kn);
            }
            key_mla = key_len;
            val_mla = has_vl ? val_len : 0;
            has_kl = has_vl = 0;
        }
        hp->qk_rope = hp->n_rot;
        hp->qk_nope = key_mla - hp->qk_rope;
        hp->v_head = val_mla;
        hp->n_embd_head_k = key_mla;
        hp->n_embd_head_v = val_mla;
    } else if (hp->n_head > 0) {
        hp->n_embd_head_k = has_kl ? key_len : hp->n_embd / hp->n_head;
        hp->n_embd_head_v = has_vl ? val_len : hp->n_embd / hp->n_head;
        if (!has_rot)
            hp->n_rot = hp->n_embd_head_k;
    }

    /* MoE */
    key_i64(&k, "expert_count", &hp->n_expert, moe_arch, 0);
    key_i64(&k, "expert_used_count", &hp->n_expert_used, moe_arch, 0);
    key_i64(&k, "expert_shared_count", &hp->n_expert_shared,
            a == GGUF_ARCH_DEEPSEEK2 || a == GGUF_ARCH_GLM4MOE || a == GGUF_ARCH_GLM_DSA, 0);
    key_i64(&k, "expert_feed_forward_length", &hp->n_ff_exp,
            moe_arch && a != GGUF_ARCH_QWEN3MOE, 0);
    key_i64(&k, "leading_dense_block_count", &hp->n_layer_dense_lead, false, 0);
    int64_t gating = 0;
    key_i64(&k, "expert_gating_func", &gating, false, 0);
    key_bool(&k, "expert_weights_norm", &hp->norm_topk, a == GGUF_ARCH_QWEN3MOE);
    key_f64(&k, "expert_weights_scale", &hp->routed_scale, false, 1.0);
    key_i64(&k, "expert_group_count", &hp->n_group, false, 0);
    key_i64(&k, "expert_group_used_count", &hp->topk_group, false, 0);
    int64_t shexp_ff = 0;
    int has_shexp_ff = key_i64(&k, "expert_shared_feed_forward_length", &shexp_ff, false, 0);

    /* DSA indexer */
    if (a == GGUF_ARCH_GLM_DSA) {
        key_i64(&k, "attention.indexer.head_count", &hp->idx_n_head, true, 0);
        key_i64(&k, "attention.indexer.key_length", &hp->idx_head_dim, true, 0);
        key_i64(&k, "attention.indexer.top_k", &hp->idx_top_k, true, 0);
    }

    /* RoPE scaling */
    hp->rope_scaling = GGUF_ROPE_SCALING_NONE;
    {
        char key[160];
        key_name(&k, "rope.scaling.type", key, sizeof key);
        gguf_str st;
        int r = gguf_get_str(f, key, &st, NULL);
        if (r == 0) {
            if (gguf_str_eq(st, "yarn"))
                hp->rope_scaling = GGUF_ROPE_SCALING_YARN;
            else if (gguf_str_eq(st, "linear"))
                hp->rope_scaling = GGUF_ROPE_SCALING_LINEAR;
            else if (gguf_str_eq(st, "longrope"))
                hp->rope_scaling = GGUF_ROPE_SCALING_LONGROPE;
            else if (!gguf_str_eq(st, "none"))
                bad(&k, key, "unknown scaling type (none, linear, yarn, longrope)");
        } else if (r != GGUF_E_NOT_FOUND) {
            bad(&k, key, "not a string");
        }
    }
    if (!key_f64(&k, "rope.scaling.factor", &hp->rope_factor, false, 1.0))
        key_f64(&k, "rope.scale_linear", &hp->rope_factor, false, 1.0);
    if (hp->rope_factor == 0.0)
        hp->rope_factor = 1.0;
    key_f64(&k, "rope.scaling.attn_factor", &hp->rope_attn_factor, false, 1.0);
    key_i64(&k, "rope.scaling.original_context_length", &hp->yarn_orig_ctx, false,
            hp->n_ctx_train);
    key_f64(&k, "rope.scaling.yarn_beta_fast", &hp->yarn_beta_fast, false, 32.0);
    key_f64(&k, "rope.scaling.yarn_beta_slow", &hp->yarn_beta_slow, false, 1.0);
    key_f64(&k, "rope.scaling.yarn_log_multiplier", &hp->yarn_log_mul, false, 0.0);

    if (k.rc)
        return k.rc;
    if (k.n_missing)
        return gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET, "%s: missing metadata: %s", name,
                         k.missing);

    /* ---- consistency ---- */
    const model_key_names kn = {gguf_key_name, hp->arch_name};
    rc = model_hparams_check(hp, name, &kn, err);
    if (rc)
        return rc;
    char kbuf[160];
#define KEY(s) (key_name(&k, (s), kbuf, sizeof kbuf), kbuf)
    /* Modern MLA files also store the latent cache widths in the plain keys. */
    if (mla && has_kl && key_len != hp->kv_lora_rank + hp->qk_rope)
        return bad(&k, KEY("attention.key_length"),
                   "must equal kv_lora_rank + rope.dimension_count in an MLA file");
    if (mla && has_vl && val_len != hp->kv_lora_rank)
        return bad(&k, KEY("attention.value_length"), "must equal kv_lora_rank in an MLA file");
    if (gating < 0 || gating > GGUF_GATING_SOFTMAX_WEIGHT)
        return bad(&k, KEY("expert_gating_func"), "unknown value (1 softmax, 2 sigmoid, 3 "
                                                  "softmax_weight)");
#undef KEY
    hp->gating = (gguf_gating)gating;
    model_hparams_defaults(hp);

    /* qwen3moe may leave the expert width out: take it from the tensor. */
    if (hp->n_expert > 0 && hp->n_ff_exp == 0) {
        const gguf_tensor *t = find_role_any(a, ts, n, GGUF_ROLE_FFN_GATE_EXPS);
        if (t)
            hp->n_ff_exp = t->ne[1];
        else
            return gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET,
                             "%s: missing metadata: %s.expert_feed_forward_length", name,
                             hp->arch_name);
    }
    hp->n_ff_shexp = has_shexp_ff ? shexp_ff : hp->n_ff_exp * hp->n_expert_shared;

    /* derived flags */
    hp->attn_qkv_bias = find_role_any(a, ts, n, GGUF_ROLE_ATTN_Q_BIAS) != NULL;
    hp->attn_qk_norm = find_role_any(a, ts, n, GGUF_ROLE_ATTN_Q_NORM) != NULL;
    hp->has_exp_probs_b = find_role_any(a, ts, n, GGUF_ROLE_FFN_EXP_PROBS_B) != NULL;
    hp->tied_embeddings = find_role_any(a, ts, n, GGUF_ROLE_OUTPUT) == NULL;
    if (mla)
        hp->mla_kv_b_split = find_role_any(a, ts, n, GGUF_ROLE_ATTN_KV_B) == NULL;

    const gguf_tensor *emb = find_role_any(a, ts, n, GGUF_ROLE_TOKEN_EMBD);
    if (hp->n_vocab == 0 && emb)
        hp->n_vocab = emb->ne[1];
    if (hp->n_vocab <= 0)
        return gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET,
                         "%s: missing metadata: %s.vocab_size (and no tokenizer.ggml.tokens or "
                         "token_embd.weight to take it from)",
                         name, hp->arch_name);
    return GGUF_OK;
}

/* ---------------- checks shared by GGUF metadata and HF config.json ---------------- */

static int check_fail(const char *name, const model_key_names *kn, const char *suffix,
                      const char *what, gguf_error *err)
{
    char key[160];
    kn->name(kn->user, suffix, key, sizeof key);
    return gguf_fail(err, GGUF_E_BAD_VALUE, GGUF_NO_OFFSET, "%s: %s: %s", name, key, what);
}

int model_hparams_check(gguf_hparams *hp, const char *name, const model_key_names *kn,
                        gguf_error *err)
{
    const bool mla = arch_is_mla(hp->arch), moe_arch = arch_is_moe(hp->arch);
#define BAD(suffix, what) return check_fail(name, kn, (suffix), (what), err)
    if (hp->n_layer <= 0 || hp->n_layer > CAP_LAYERS)
        BAD("block_count", "must be 1..4096");
    if (hp->n_embd <= 0)
        BAD("embedding_length", "must be positive");
    if (hp->n_head <= 0)
        BAD("attention.head_count", "must be positive");
    if (hp->n_head_kv <= 0)
        BAD("attention.head_count_kv", "must be positive");
    if (!mla && hp->n_head % hp->n_head_kv != 0) {
        char kh[160], msg[320];
        kn->name(kn->user, "attention.head_count", kh, sizeof kh);
        snprintf(msg, sizeof msg, "%lld does not divide %s %lld", (long long)hp->n_head_kv, kh,
                 (long long)hp->n_head);
        BAD("attention.head_count_kv", msg);
    }
    if (!(hp->rms_eps > 0.0 && hp->rms_eps < 1.0))
        BAD("attention.layer_norm_rms_epsilon", "must be in (0, 1)");
    if (hp->n_nextn >= hp->n_layer)
        BAD("nextn_predict_layers", "must be less than block_count");
    hp->n_layer_main = hp->n_layer - hp->n_nextn;
    if (hp->n_layer_dense_lead > hp->n_layer)
        BAD("leading_dense_block_count", "exceeds block_count");
    if (hp->n_embd_head_k <= 0 || hp->n_embd_head_v <= 0)
        BAD(mla ? "attention.key_length_mla" : "attention.key_length",
            "head width must be positive");
    if (hp->n_rot < 0 || hp->n_rot > hp->n_embd_head_k || hp->n_rot % 2 != 0)
        BAD("rope.dimension_count", "must be even and at most the head width");
    if (hp->arch == GGUF_ARCH_LLAMA && hp->n_rot != hp->n_embd_head_k)
        BAD("rope.dimension_count", "llama rotates the whole head: must equal the head width");
    if (mla) {
        if (hp->qk_nope < 1)
            BAD("attention.key_length_mla",
                "must exceed rope.dimension_count (qk_nope = key_length_mla - qk_rope)");
        if (hp->kv_lora_rank <= 0)
            BAD("attention.kv_lora_rank", "must be positive");
    }
    if (hp->n_expert > CAP_EXPERTS)
        BAD("expert_count", "over the cap of 65536");
    if (hp->n_expert_used > hp->n_expert)
        BAD("expert_used_count", "exceeds expert_count");
    if (hp->n_expert > 0 && hp->n_expert_used == 0)
        BAD("expert_used_count", "must be positive when expert_count is");
    if (moe_arch && hp->n_expert == 0 && hp->n_layer_dense_lead < hp->n_layer)
        BAD("expert_count", "must be positive: the model has MoE layers");
    if (hp->n_group > 1) {
        if (hp->n_expert % hp->n_group != 0)
            BAD("expert_group_count", "does not divide expert_count");
        if (hp->topk_group < 1 || hp->topk_group > hp->n_group)
            BAD("expert_group_used_count", "must be 1..expert_group_count");
    }
    if (hp->arch == GGUF_ARCH_GLM_DSA && (hp->idx_n_head <= 0 || hp->idx_head_dim <= 0))
        BAD("attention.indexer.head_count", "indexer heads and width must be positive");
#undef BAD
    return GGUF_OK;
}

void model_hparams_defaults(gguf_hparams *hp)
{
    const gguf_arch a = hp->arch;
    const bool mla = arch_is_mla(a);
    hp->is_mla = mla;
    if (hp->gating == GGUF_GATING_NONE && hp->n_expert > 0)
        hp->gating = (a == GGUF_ARCH_GLM4MOE || a == GGUF_ARCH_GLM_DSA) ? GGUF_GATING_SIGMOID
                                                                        : GGUF_GATING_SOFTMAX;
    hp->rope_pairs = (a == GGUF_ARCH_LLAMA || mla) ? GGUF_ROPE_ADJACENT : GGUF_ROPE_HALF;
    hp->llama_qk_permuted = a == GGUF_ARCH_LLAMA;
    hp->yarn_mscale = 1.0;
    if (hp->rope_scaling == GGUF_ROPE_SCALING_YARN && hp->yarn_log_mul > 0.0 &&
        hp->rope_factor > 1.0)
        hp->yarn_mscale = 1.0 + hp->yarn_log_mul * log(hp->rope_factor);
    /* Only the MLA models fold mscale into the softmax scale (DeepSeek's YaRN);
     * elsewhere YaRN scales cos/sin through rope_attn_factor. */
    hp->attn_scale = 1.0 / sqrt((double)hp->n_embd_head_k);
    if (mla)
        hp->attn_scale *= hp->yarn_mscale * hp->yarn_mscale;
}

/* ---------------- roles expected per layer ---------------- */

gguf_layer_kind model_layer_kind(const gguf_hparams *hp, int64_t il)
{
    if (il >= hp->n_layer_main)
        return GGUF_LAYER_NEXTN;
    if (hp->n_expert == 0 || il < hp->n_layer_dense_lead)
        return GGUF_LAYER_DENSE;
    return GGUF_LAYER_MOE;
}

/* 1 required, 2 optional, 0 not part of the layer. */
int model_role_expected(const gguf_hparams *hp, int64_t il, gguf_role r)
{
    const gguf_arch a = hp->arch;
    if (r <= GGUF_ROLE_UNKNOWN || r >= GGUF_ROLE_COUNT)
        return 0;
    if (il < 0) {
        switch (r) {
        case GGUF_ROLE_TOKEN_EMBD:
        case GGUF_ROLE_OUTPUT_NORM:
            return 1;
        case GGUF_ROLE_OUTPUT:
            return 2; /* tied embeddings when absent */
        case GGUF_ROLE_ROPE_FREQS:
            return a == GGUF_ARCH_LLAMA ? 2 : 0;
        default:
            return 0;
        }
    }
    if (il >= hp->n_layer || gguf_role_is_global(r))
        return 0;
    const gguf_layer_kind kind = model_layer_kind(hp, il);
    const bool nextn = kind == GGUF_LAYER_NEXTN;
    const bool ffn_moe = hp->n_expert > 0 && il >= hp->n_layer_dense_lead;
    switch (r) {
    case GGUF_ROLE_ATTN_NORM:
    case GGUF_ROLE_ATTN_OUT:
        return 1;
    case GGUF_ROLE_ATTN_Q:
        return (!hp->is_mla || hp->q_lora_rank == 0) ? 1 : 0;
    case GGUF_ROLE_ATTN_K:
    case GGUF_ROLE_ATTN_V:
        return hp->is_mla ? 0 : 1;
    case GGUF_ROLE_ATTN_Q_BIAS:
    case GGUF_ROLE_ATTN_K_BIAS:
    case GGUF_ROLE_ATTN_V_BIAS:
        return hp->is_mla ? 0 : (a == GGUF_ARCH_QWEN2 ? 1 : 2);
    case GGUF_ROLE_ATTN_Q_NORM:
    case GGUF_ROLE_ATTN_K_NORM:
        if (a == GGUF_ARCH_QWEN3 || a == GGUF_ARCH_QWEN3MOE)
            return 1;
        return a == GGUF_ARCH_GLM4MOE ? 2 : 0;
    case GGUF_ROLE_ATTN_POST_NORM:
        return a == GGUF_ARCH_GLM4MOE ? 1 : 0;
    case GGUF_ROLE_FFN_NORM:
        return a == GGUF_ARCH_GLM4MOE ? 0 : 1;
    case GGUF_ROLE_ATTN_Q_A:
    case GGUF_ROLE_ATTN_Q_A_NORM:
    case GGUF_ROLE_ATTN_Q_B:
        return hp->is_mla && hp->q_lora_rank > 0 ? 1 : 0;
    case GGUF_ROLE_ATTN_KV_A_MQA:
    case GGUF_ROLE_ATTN_KV_A_NORM:
        return hp->is_mla ? 1 : 0;
    case GGUF_ROLE_ATTN_KV_B:
        return hp->is_mla && !hp->mla_kv_b_split ? 1 : 0;
    case GGUF_ROLE_ATTN_K_B:
    case GGUF_ROLE_ATTN_V_B:
        return hp->is_mla && hp->mla_kv_b_split ? 1 : 0;
    case GGUF_ROLE_FFN_GATE:
    case GGUF_ROLE_FFN_UP:
    case GGUF_ROLE_FFN_DOWN:
        return ffn_moe ? 0 : 1;
    case GGUF_ROLE_FFN_GATE_INP:
    case GGUF_ROLE_FFN_GATE_EXPS:
    case GGUF_ROLE_FFN_UP_EXPS:
    case GGUF_ROLE_FFN_DOWN_EXPS:
        return ffn_moe ? 1 : 0;
    case GGUF_ROLE_FFN_EXP_PROBS_B:
        if (!ffn_moe)
            return 0;
        return a == GGUF_ARCH_GLM4MOE ? 1 : (a == GGUF_ARCH_QWEN3MOE ? 0 : 2);
    case GGUF_ROLE_FFN_GATE_SHEXP:
    case GGUF_ROLE_FFN_UP_SHEXP:
    case GGUF_ROLE_FFN_DOWN_SHEXP:
        return ffn_moe && hp->n_expert_shared > 0 ? 1 : 0;
    case GGUF_ROLE_IDX_K_NORM:
    case GGUF_ROLE_IDX_K_NORM_BIAS:
    case GGUF_ROLE_IDX_PROJ:
    case GGUF_ROLE_IDX_ATTN_K:
    case GGUF_ROLE_IDX_ATTN_Q_B:
        return a == GGUF_ARCH_GLM_DSA ? 1 : 0;
    case GGUF_ROLE_NEXTN_EH_PROJ:
    case GGUF_ROLE_NEXTN_ENORM:
    case GGUF_ROLE_NEXTN_HNORM:
        return nextn ? 1 : 0;
    case GGUF_ROLE_NEXTN_EMBED_TOKENS:
    case GGUF_ROLE_NEXTN_SHARED_HEAD_HEAD:
    case GGUF_ROLE_NEXTN_SHARED_HEAD_NORM:
        return nextn ? 2 : 0;
    default:
        return 0;
    }
}

int model_expected_shape(const gguf_hparams *hp, int64_t il, gguf_role r, int64_t ne[4],
                         uint32_t *nd)
{
    if (!model_role_expected(hp, il, r))
        return GGUF_E_NOT_FOUND;
    const int64_t E = hp->n_embd, V = hp->n_vocab, H = hp->n_head, HKV = hp->n_head_kv;
    const int64_t hk = hp->n_embd_head_k, hv = hp->n_embd_head_v;
    int64_t a = 0, b = 1, c = 1;
    uint32_t d = 1;
#define S1(x) (a = (x), d = 1)
#define S2(x, y) (a = (x), b = (y), d = 2)
#define S3(x, y, z) (a = (x), b = (y), c = (z), d = 3)
    switch (r) {
    case GGUF_ROLE_TOKEN_EMBD:
    case GGUF_ROLE_OUTPUT:
    case GGUF_ROLE_NEXTN_EMBED_TOKENS:
    case GGUF_ROLE_NEXTN_SHARED_HEAD_HEAD:
        S2(E, V);
        break;
    case GGUF_ROLE_OUTPUT_NORM:
    case GGUF_ROLE_ATTN_NORM:
    case GGUF_ROLE_ATTN_POST_NORM:
    case GGUF_ROLE_FFN_NORM:
    case GGUF_ROLE_NEXTN_ENORM:
    case GGUF_ROLE_NEXTN_HNORM:
    case GGUF_ROLE_NEXTN_SHARED_HEAD_NORM:
        S1(E);
        break;
    case GGUF_ROLE_ROPE_FREQS:
        S1(hp->n_rot / 2);
        break;
    case GGUF_ROLE_ATTN_Q:
        S2(E, H * hk);
        break;
    case GGUF_ROLE_ATTN_K:
        S2(E, HKV * hk);
        break;
    case GGUF_ROLE_ATTN_V:
        S2(E, HKV * hv);
        break;
    case GGUF_ROLE_ATTN_Q_BIAS:
        S1(H * hk);
        break;
    case GGUF_ROLE_ATTN_K_BIAS:
        S1(HKV * hk);
        break;
    case GGUF_ROLE_ATTN_V_BIAS:
        S1(HKV * hv);
        break;
    case GGUF_ROLE_ATTN_Q_NORM:
    case GGUF_ROLE_ATTN_K_NORM:
        S1(hk);
        break;
    case GGUF_ROLE_ATTN_OUT:
        S2(H * hv, E);
        break;
    case GGUF_ROLE_ATTN_Q_A:
        S2(E, hp->q_lora_rank);
        break;
    case GGUF_ROLE_ATTN_Q_A_NORM:
        S1(hp->q_lora_rank);
        break;
    case GGUF_ROLE_ATTN_Q_B:
        S2(hp->q_lora_rank, H * hk);
        break;
    case GGUF_ROLE_ATTN_KV_A_MQA:
        S2(E, hp->kv_lora_rank + hp->qk_rope);
        break;
    case GGUF_ROLE_ATTN_KV_A_NORM:
        S1(hp->kv_lora_rank);
        break;
    case GGUF_ROLE_ATTN_KV_B:
        S2(hp->kv_lora_rank, H * (hp->qk_nope + hp->v_head));
        break;
    case GGUF_ROLE_ATTN_K_B:
        S3(hp->qk_nope, hp->kv_lora_rank, H);
        break;
    case GGUF_ROLE_ATTN_V_B:
        S3(hp->kv_lora_rank, hp->v_head, H);
        break;
    case GGUF_ROLE_FFN_GATE:
    case GGUF_ROLE_FFN_UP:
        S2(E, hp->n_ff);
        break;
    case GGUF_ROLE_FFN_DOWN:
        S2(hp->n_ff, E);
        break;
    case GGUF_ROLE_FFN_GATE_INP:
        S2(E, hp->n_expert);
        break;
    case GGUF_ROLE_FFN_EXP_PROBS_B:
        S1(hp->n_expert);
        break;
    case GGUF_ROLE_FFN_GATE_EXPS:
    case GGUF_ROLE_FFN_UP_EXPS:
        S3(E, hp->n_ff_exp, hp->n_expert);
        break;
    case GGUF_ROLE_FFN_DOWN_EXPS:
        S3(hp->n_ff_exp, E, hp->n_expert);
        break;
    case GGUF_ROLE_FFN_GATE_SHEXP:
    case GGUF_ROLE_FFN_UP_SHEXP:
        S2(E, hp->n_ff_shexp);
        break;
    case GGUF_ROLE_FFN_DOWN_SHEXP:
        S2(hp->n_ff_shexp, E);
        break;
    case GGUF_ROLE_IDX_K_NORM:
    case GGUF_ROLE_IDX_K_NORM_BIAS:
        S1(hp->idx_head_dim);
        break;
    case GGUF_ROLE_IDX_PROJ:
        S2(E, hp->idx_n_head);
        break;
    case GGUF_ROLE_IDX_ATTN_K:
        S2(E, hp->idx_head_dim);
        break;
    case GGUF_ROLE_IDX_ATTN_Q_B:
        S2(hp->q_lora_rank, hp->idx_n_head * hp->idx_head_dim);
        break;
    case GGUF_ROLE_NEXTN_EH_PROJ:
        S2(2 * E, E);
        break;
    default:
        return GGUF_E_NOT_FOUND;
    }
#undef S1
#undef S2
#undef S3
    ne[0] = a;
    ne[1] = b;
    ne[2] = c;
    ne[3] = 1;
    *nd = d;
    return GGUF_OK;
}

/* ---------------- the model ---------------- */

static int32_t *slot(const gguf_model *m, int64_t il, gguf_role r)
{
    return &m->by_role[(il + 1) * GGUF_ROLE_COUNT + r];
}

int model_assemble(gguf_model *m, const gguf_tensor *const *ts, int64_t n, uint32_t flags,
                   gguf_error *err)
{
    int rc = GGUF_OK;
    const gguf_hparams *hp = &m->hp;

    m->n = n;
    m->mt = calloc((size_t)(n ? n : 1), sizeof *m->mt);
    m->tp = calloc((size_t)(n ? n : 1), sizeof *m->tp);
    m->hf_arena = calloc((size_t)(n ? n : 1), MODEL_HF_LEN);
    m->by_role = calloc((size_t)(hp->n_layer + 1) * GGUF_ROLE_COUNT, sizeof *m->by_role);
    if (!m->mt || !m->tp || !m->hf_arena || !m->by_role) {
        rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "%s: out of memory", m->name);
        goto done;
    }
    for (int64_t i = 0; i < n; i++) {
        const gguf_tensor *t = ts[i];
        gguf_model_tensor *mt = &m->mt[i];
        m->tp[i] = t;
        mt->t = t;
        mt->layer = -1;
        mt->role = GGUF_ROLE_UNKNOWN;
        gguf_role r;
        int64_t il;
        if (gguf_role_parse(hp->arch, t->name, &r, &il) != 0) {
            /* blk.N.something unknown: still record its layer */
            const char *s = t->name;
            if (strncmp(s, "blk.", 4) == 0)
                mt->layer = strtoll(s + 4, NULL, 10);
            continue;
        }
        if (il >= hp->n_layer) {
            rc = gguf_fail(err, GGUF_E_BAD_VALUE, t->info_offset,
                           "%s: %s: block %lld beyond %s.block_count = %lld", m->name, t->name,
                           (long long)il, hp->arch_name, (long long)hp->n_layer);
            goto done;
        }
        mt->role = r;
        mt->layer = il;
        *slot(m, il, r) = (int32_t)(i + 1);
        char *hf = m->hf_arena + (size_t)i * MODEL_HF_LEN;
        if (gguf_role_hf_name(hp->arch, r, il, hf, MODEL_HF_LEN, &mt->hf_note) == 0)
            mt->hf_name = hf;
    }
    int64_t da = 0, db = 0;
    rc = gguf_name_index_build(&m->ix, m->tp, n, &da, &db);
    if (rc == GGUF_E_DUPLICATE) {
        rc = gguf_fail(err, rc, GGUF_NO_OFFSET, "%s: tensor '%s' appears twice", m->name,
                       m->tp[db]->name);
        goto done;
    } else if (rc) {
        rc = gguf_fail(err, rc, GGUF_NO_OFFSET, "%s: out of memory", m->name);
        goto done;
    }

    /* Required tensors present, shapes as the hyper-parameters say. */
    char missing[512];
    size_t ml = 0;
    int n_missing = 0;
    missing[0] = '\0';
    for (int64_t il = -1; il < hp->n_layer; il++) {
        for (int r = 1; r < GGUF_ROLE_COUNT; r++) {
            int want = model_role_expected(hp, il, (gguf_role)r);
            if (!want)
                continue;
            int32_t ix = *slot(m, il, (gguf_role)r);
            if (!ix) {
                if (want == 1) {
                    char nm[128];
                    model_role_gguf_name((gguf_role)r, il, nm, sizeof nm);
                    if (n_missing < 6 && ml + strlen(nm) + 3 < sizeof missing)
                        ml += (size_t)snprintf(missing + ml, sizeof missing - ml, "%s%s",
                                               ml ? ", " : "", nm);
                    n_missing++;
                }
                continue;
            }
            const gguf_tensor *t = m->mt[ix - 1].t;
            int64_t ne[4];
            uint32_t nd;
            if (model_expected_shape(hp, il, (gguf_role)r, ne, &nd) != 0)
                continue;
            bool same = true;
            for (int d = 0; d < 4; d++)
                if (t->ne[d] != ne[d])
                    same = false;
            if (!same) {
                rc = gguf_fail(err, GGUF_E_BAD_SHAPE, t->info_offset,
                               "%s: %s: shape [%lld, %lld, %lld], expected [%lld, %lld, %lld] "
                               "from the %s hyper-parameters (n_embd %lld, n_head %lld, "
                               "head_k %lld, head_v %lld)",
                               m->name, t->name, (long long)t->ne[0], (long long)t->ne[1],
                               (long long)t->ne[2], (long long)ne[0], (long long)ne[1],
                               (long long)ne[2], hp->arch_name, (long long)hp->n_embd,
                               (long long)hp->n_head, (long long)hp->n_embd_head_k,
                               (long long)hp->n_embd_head_v);
                goto done;
            }
        }
    }
    if (n_missing && !(flags & GGUF_MODEL_ALLOW_MISSING)) {
        rc = gguf_fail(err, GGUF_E_NOT_FOUND, GGUF_NO_OFFSET,
                       "%s: missing %d tensor(s) the %s architecture requires: %s%s", m->name,
                       n_missing, hp->arch_name, missing, n_missing > 6 ? ", ..." : "");
        goto done;
    }
done:
    return rc;
}

static int model_build(gguf_model **out, const gguf_file *meta, const gguf_tensor *const *ts,
                       int64_t n, const char *name, uint32_t flags, gguf_error *err)
{
    *out = NULL;
    gguf_model *m = calloc(1, sizeof *m);
    if (!m)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "%s: out of memory", name);
    int rc = GGUF_OK;
    m->meta = meta;
    m->name = strdup(name ? name : "model");
    if (!m->name)
        rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "%s: out of memory", name);
    if (!rc)
        rc = load_hparams(&m->hp, meta, m->name, ts, n, err);
    if (!rc)
        rc = model_assemble(m, ts, n, flags, err);
    if (rc) {
        gguf_model_free(m);
        return rc;
    }
    *out = m;
    return GGUF_OK;
}

int gguf_model_open_flags(gguf_model **out, const gguf_set *set, uint32_t flags, gguf_error *err)
{
    if (!out || !set)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_model_open: NULL argument");
    *out = NULL;
    int64_t n = gguf_set_tensor_count(set);
    const gguf_tensor **ts = malloc((size_t)(n ? n : 1) * sizeof *ts);
    if (!ts)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    for (int64_t i = 0; i < n; i++)
        ts[i] = gguf_set_tensor_at(set, i);
    const gguf_file *meta = gguf_set_meta(set);
    int rc = model_build(out, meta, ts, n, gguf_file_path(meta), flags, err);
    free(ts);
    return rc;
}

int gguf_model_open(gguf_model **out, const gguf_set *set, gguf_error *err)
{
    return gguf_model_open_flags(out, set, 0, err);
}

int gguf_model_open_parts_flags(gguf_model **out, const gguf_file *meta,
                                const gguf_tensor *const *tensors, int64_t n_tensors,
                                const char *name, uint32_t flags, gguf_error *err)
{
    if (!out || !meta || (n_tensors > 0 && !tensors) || n_tensors < 0)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "gguf_model_open_parts: invalid argument");
    *out = NULL;
    return model_build(out, meta, tensors, n_tensors, name ? name : gguf_file_path(meta), flags,
                       err);
}

int gguf_model_open_parts(gguf_model **out, const gguf_file *meta,
                          const gguf_tensor *const *tensors, int64_t n_tensors, const char *name,
                          gguf_error *err)
{
    return gguf_model_open_parts_flags(out, meta, tensors, n_tensors, name, 0, err);
}

const gguf_file *gguf_model_meta(const gguf_model *m)
{
    return m->meta;
}

void gguf_model_free(gguf_model *m)
{
    if (!m)
        return;
    model_hf_free(m->hf);
    gguf_name_index_free(&m->ix);
    free(m->by_role);
    free(m->hf_arena);
    free(m->tp);
    free(m->mt);
    free(m->name);
    free(m);
}

const gguf_hparams *gguf_model_hparams(const gguf_model *m)
{
    return &m->hp;
}

const char *gguf_model_name(const gguf_model *m)
{
    return m->name;
}

int64_t gguf_model_tensor_count(const gguf_model *m)
{
    return m->n;
}

const gguf_model_tensor *gguf_model_tensor_at(const gguf_model *m, int64_t i)
{
    if (i < 0 || i >= m->n)
        return NULL;
    return &m->mt[i];
}

const gguf_model_tensor *gguf_model_tensor_find(const gguf_model *m, const char *name)
{
    int64_t i = gguf_name_index_find(&m->ix, m->tp, name);
    return i < 0 ? NULL : &m->mt[i];
}

const gguf_model_tensor *gguf_model_get_info(const gguf_model *m, int64_t layer, gguf_role role)
{
    if (!m || (int)role <= 0 || role >= GGUF_ROLE_COUNT || layer < -1 || layer >= m->hp.n_layer)
        return NULL;
    int32_t ix = *slot(m, layer, role);
    return ix ? &m->mt[ix - 1] : NULL;
}

const gguf_tensor *gguf_model_get(const gguf_model *m, int64_t layer, gguf_role role)
{
    const gguf_model_tensor *mt = gguf_model_get_info(m, layer, role);
    return mt ? mt->t : NULL;
}

gguf_layer_kind gguf_model_layer_kind(const gguf_model *m, int64_t il)
{
    return model_layer_kind(&m->hp, il);
}

int gguf_model_expected_shape(const gguf_model *m, int64_t il, gguf_role role, int64_t ne[4],
                              uint32_t *n_dims)
{
    uint32_t nd = 0;
    int rc = model_expected_shape(&m->hp, il, role, ne, &nd);
    if (rc == 0 && n_dims)
        *n_dims = nd;
    return rc;
}

int gguf_model_role_expected(const gguf_model *m, int64_t il, gguf_role role)
{
    return model_role_expected(&m->hp, il, role);
}
