/*
 * Architectures: metadata keys and tensors as llama.cpp's converter
 * (convert_hf_to_gguf.py) writes them, in the converter's order (the order of
 * the sorted HF checkpoint: output, token_embd, blocks, output_norm). Checked
 * against ../shared/testdata/hf/{llama,deepseek_v3}/model-f32.gguf and the
 * GLM-5.1 tensor map.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gen.h"

const char *const gen_archs[] = {"llama",     "qwen2",   "qwen3",   "qwen3moe",
                                 "deepseek2", "glm4moe", "glm-dsa", NULL};

enum { A_LLAMA, A_QWEN2, A_QWEN3, A_QWEN3MOE, A_DEEPSEEK2, A_GLM4MOE, A_GLMDSA };

static int arch_id(const char *a)
{
    for (int i = 0; gen_archs[i]; i++)
        if (!strcmp(gen_archs[i], a))
            return i;
    return -1;
}

#define SET0(f, v)                                                                                 \
    do {                                                                                           \
        if (!m->f)                                                                                 \
            m->f = (v);                                                                            \
    } while (0)

int gen_model_defaults(gen_model_opts *m)
{
    int a = arch_id(m->arch);
    if (a < 0)
        return -1;
    bool mla = a == A_DEEPSEEK2 || a == A_GLMDSA;
    bool moe = a == A_QWEN3MOE || a == A_GLM4MOE || mla;
    SET0(layers, 2);
    SET0(embd, 256);
    SET0(heads, 16);
    SET0(kv_heads, 8);
    SET0(head_dim, 16);
    SET0(ff, 512);
    SET0(vocab, 512);
    SET0(ctx, 2048);
    if (moe) {
        SET0(experts, 8);
        SET0(experts_used, 2);
        SET0(expert_ff, 256);
    }
    if (mla) {
        SET0(kv_lora, 64);
        SET0(qk_nope, 32);
        SET0(qk_rope, 16);
        SET0(v_head, 32);
        SET0(expert_groups, 1);
        SET0(groups_used, 1);
    }
    if (a == A_GLMDSA) {
        SET0(indexer_heads, 8);
        SET0(indexer_head_dim, 32);
        SET0(indexer_top_k, 64);
    }
    if (m->q_lora == GEN_UNSET)
        m->q_lora = mla ? 128 : 0;
    if (m->dense_layers == GEN_UNSET)
        m->dense_layers = moe && a != A_QWEN3MOE ? 1 : 0;
    if (m->shared_experts == GEN_UNSET)
        m->shared_experts = moe && a != A_QWEN3MOE ? 1 : 0;
    if (m->nextn == GEN_UNSET)
        m->nextn = a == A_GLM4MOE || a == A_GLMDSA ? 1 : 0;
    if (m->yarn < 0)
        m->yarn = a == A_DEEPSEEK2;
    if (!m->expert_scale)
        m->expert_scale = m->softmax ? 1.0f : 2.5f;
    if (!m->rope_base)
        m->rope_base = (a == A_LLAMA || a == A_DEEPSEEK2) ? 10000.0f : 1000000.0f;
    if (!m->rms_eps)
        m->rms_eps = (a == A_LLAMA || a == A_GLM4MOE || a == A_GLMDSA) ? 1e-5f : 1e-6f;
    if (!m->rope_dim)
        m->rope_dim = mla ? m->qk_rope : a == A_GLM4MOE ? m->head_dim / 2 : m->head_dim;
    if (!m->name)
        m->name = m->arch;
    return 0;
}

int gen_model_preset(gen_model_opts *m, const char *preset)
{
    if (!strcmp(preset, "tiny"))
        return 0; /* the defaults */
    if (!strcmp(preset, "1b")) {
        /* Llama-3.2-1B-like sizes: 1.1 billion parameters for llama, 0.7 to 1.0 for
         * the MoE architectures (8 experts of 512) */
        m->layers = 16, m->embd = 2048, m->heads = 32, m->kv_heads = 8, m->head_dim = 64;
        m->ff = 8192, m->vocab = 32768, m->experts = 8, m->experts_used = 2;
        m->expert_ff = 512, m->q_lora = 512, m->kv_lora = 256, m->qk_nope = 64;
        m->qk_rope = 32, m->v_head = 64;
        return 0;
    }
    if (!strcmp(preset, "20b")) {
        /* 19.5 billion parameters for llama, 19 to 21.3 for the MoE architectures */
        m->layers = 48, m->embd = 6144, m->heads = 48, m->kv_heads = 8, m->head_dim = 128;
        m->ff = 16384, m->vocab = 65536, m->experts = 32, m->experts_used = 4;
        m->expert_ff = 512, m->q_lora = 1536, m->kv_lora = 512, m->qk_nope = 128;
        m->qk_rope = 64, m->v_head = 128;
        return 0;
    }
    return -1;
}

uint32_t gen_file_type(uint32_t t)
{
    switch (t) {
    case GGUF_TYPE_F32: return 0;
    case GGUF_TYPE_F16: return 1;
    case GGUF_TYPE_Q4_0: return 2;
    case GGUF_TYPE_Q4_1: return 3;
    case GGUF_TYPE_Q8_0: return 7;
    case GGUF_TYPE_Q5_0: return 8;
    case GGUF_TYPE_Q5_1: return 9;
    case GGUF_TYPE_Q2_K: return 10;
    case GGUF_TYPE_Q3_K: return 12;  /* Q3_K_M */
    case GGUF_TYPE_Q4_K: return 15;  /* Q4_K_M */
    case GGUF_TYPE_Q5_K: return 17;  /* Q5_K_M */
    case GGUF_TYPE_Q6_K: return 18;
    case GGUF_TYPE_IQ2_XXS: return 19;
    case GGUF_TYPE_IQ2_XS: return 20;
    case GGUF_TYPE_IQ3_XXS: return 23;
    case GGUF_TYPE_IQ1_S: return 24;
    case GGUF_TYPE_IQ4_NL: return 25;
    case GGUF_TYPE_IQ3_S: return 26;
    case GGUF_TYPE_IQ2_S: return 28;
    case GGUF_TYPE_IQ4_XS: return 30;
    case GGUF_TYPE_IQ1_M: return 31;
    case GGUF_TYPE_BF16: return 32;
    case GGUF_TYPE_TQ1_0: return 36;
    case GGUF_TYPE_TQ2_0: return 37;
    case GGUF_TYPE_MXFP4: return 38;
    case GGUF_TYPE_NVFP4: return 39;
    case GGUF_TYPE_Q1_0: return 40;
    default: return 1024; /* GUESSED: no file type names this tensor type */
    }
}

/*
 * general.size_label as gguf-py computes it from the tensors (GGUFWriter's
 * parameter count and utility.size_label): "558K", "1.1B", or for MoE models
 * "8x1.1M" = experts x (shared parameters + parameters of one expert).
 */
void gen_size_label(gen_plan *p)
{
    uint64_t total = 0, shared = 0, expert = 0, expert_sum = 0, n_exp_t = 0;
    for (uint32_t i = 0; i < p->n_t; i++) {
        const gen_tensor *t = &p->t[i];
        uint64_t size = 1;
        for (uint32_t d = 0; d < t->n_dims; d++)
            size *= (uint64_t)t->ne[d];
        bool bias = strstr(t->name, ".bias") != NULL;
        if (strstr(t->name, "_exps.") && t->n_dims >= 3) {
            /* numpy shape[-3] (shape[-2] for biases) is ggml ne[2] (ne[1]) */
            uint64_t n = (uint64_t)t->ne[bias ? 1 : 2];
            expert += size / n;
            expert_sum += n;
            n_exp_t++;
        } else {
            shared += size;
        }
        total += size;
    }
    uint64_t n_exp = n_exp_t ? expert_sum / n_exp_t : 0;
    double v = (double)(n_exp ? shared + expert : total);
    const char *suffix = "K";
    double scaled = v * 1e-3;
    if (v > 1e12)
        scaled = v * 1e-12, suffix = "T";
    else if (v > 1e9)
        scaled = v * 1e-9, suffix = "B";
    else if (v > 1e6)
        scaled = v * 1e-6, suffix = "M";
    /* digits of round(scaled) (half to even, as Python), leading zeros dropped */
    char digits[32];
    snprintf(digits, sizeof digits, "%.0f", nearbyint(scaled));
    int nd = digits[0] == '0' ? 0 : (int)strlen(digits);
    int fix = nd < 2 ? 2 - nd : 0;
    char label[64];
    if (n_exp)
        snprintf(label, sizeof label, "%llux%.*f%s", (unsigned long long)n_exp, fix, scaled, suffix);
    else
        snprintf(label, sizeof label, "%.*f%s", fix, scaled, suffix);
    gen_kv_str(p, "general.size_label", label);
}

/* ---- tokenizer ---- */

static const char *const words[] = {
    "the", "a", "and", "to", "of", "is", "in", "it", "was", "he", "she", "they", "Once",
    "upon", "time", "there", "little", "girl", "boy", "day", "big", "happy", "said", "with",
    "her", "his", "on", "for", "you", "that", "had", "saw", "play", "dog", "cat", "sun",
    "tree", "went", "home", "friend", "mom", "very", "wanted", "one", "not", "be", "have",
    "at", "but", "so", "what", "all", "we", "can", "out", "up", "2", "+", "=", "4", "?",
    "The", "capital", "France", "Paris", "is", "of", "What", "\n", ".", ",", "!",
};

static char *dupf(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 1);
    if (s) {
        memcpy(s, a, la);
        memcpy(s + la, b, lb + 1);
    }
    return s;
}

static bool seen(char **toks, uint32_t n, const char *s)
{
    for (uint32_t i = 0; i < n; i++)
        if (!strcmp(toks[i], s))
            return true;
    return false;
}

void gen_vocab_add(gen_plan *p, uint32_t n)
{
    char **tok = calloc(n ? n : 1, sizeof *tok);
    float *score = calloc(n ? n : 1, sizeof *score);
    int32_t *type = calloc(n ? n : 1, sizeof *type);
    if (!tok || !score || !type) {
        free(tok), free(score), free(type);
        p->err = GGUF_E_NOMEM;
        return;
    }
    static const char *const special[] = {"<unk>", "<s>", "</s>"};
    static const int32_t special_type[] = {2, 3, 3}; /* unknown, control, control */
    uint32_t i = 0;
    for (; i < n && i < 3; i++) {
        tok[i] = strdup(special[i]);
        type[i] = special_type[i];
    }
    /* Byte fallback tokens when there is room for them and some pieces. */
    if (n >= 3 + 256 + 16)
        for (int b = 0; b < 256; b++, i++) {
            char buf[8];
            snprintf(buf, sizeof buf, "<0x%02X>", b);
            tok[i] = strdup(buf);
            type[i] = 6; /* byte */
        }
    const char *sp = "\xe2\x96\x81"; /* U+2581, SentencePiece's space */
    uint32_t first_piece = i;
    size_t nw = sizeof words / sizeof words[0];
    for (size_t w = 0; i < n && w < nw; w++) {
        for (int lead = 1; lead >= 0 && i < n; lead--) {
            char *s = lead ? dupf(sp, words[w]) : strdup(words[w]);
            if (!s || seen(tok + first_piece, i - first_piece, s)) {
                free(s);
                continue;
            }
            tok[i++] = s;
        }
    }
    for (char c = 'a'; c <= 'z' && i < n; c++) {
        char s[2] = {c, 0};
        if (!seen(tok + first_piece, i - first_piece, s))
            tok[i++] = strdup(s);
    }
    for (uint32_t k = 0; i < n; k++) {
        char buf[32];
        snprintf(buf, sizeof buf, "%stok%u", sp, k);
        tok[i++] = strdup(buf);
    }
    for (uint32_t k = 0; k < n; k++) {
        if (!tok[k]) {
            for (uint32_t j = 0; j < n; j++)
                free(tok[j]);
            free(tok), free(score), free(type);
            p->err = GGUF_E_NOMEM;
            return;
        }
        if (k >= first_piece) {
            type[k] = 1; /* normal */
            score[k] = -(float)(k - first_piece);
        }
    }
    gen_kv_str(p, "tokenizer.ggml.model", "llama");
    gen_kv_str(p, "tokenizer.ggml.pre", "default");
    gen_kv_arr_str(p, "tokenizer.ggml.tokens", tok, n);
    gen_kv_arr(p, "tokenizer.ggml.scores", GGUF_VALUE_FLOAT32, score, n);
    gen_kv_arr(p, "tokenizer.ggml.token_type", GGUF_VALUE_INT32, type, n);
    gen_kv_u32(p, "tokenizer.ggml.bos_token_id", 1);
    gen_kv_u32(p, "tokenizer.ggml.eos_token_id", 2);
    gen_kv_u32(p, "tokenizer.ggml.unknown_token_id", 0);
    gen_kv_bool(p, "tokenizer.ggml.add_bos_token", true);
    gen_kv_bool(p, "tokenizer.ggml.add_eos_token", false);
    free(score);
    free(type);
}

/* ---- tensors ---- */

#define T1(init, w, a, ...) gen_tensor_add(p, init, w, 1, (const int64_t[]){a}, __VA_ARGS__)
#define T2(init, w, a, b, ...) gen_tensor_add(p, init, w, 2, (const int64_t[]){a, b}, __VA_ARGS__)
#define T3(init, w, a, b, c, ...)                                                                  \
    gen_tensor_add(p, init, w, 3, (const int64_t[]){a, b, c}, __VA_ARGS__)
#define NORM(n, ...) T1(GEN_INIT_NORM, false, n, __VA_ARGS__)
#define BIAS(n, ...) T1(GEN_INIT_BIAS, false, n, __VA_ARGS__)
#define MAT(a, b, ...) T2(GEN_INIT_WEIGHT, true, a, b, __VA_ARGS__)

static void dense_ffn(gen_plan *p, const gen_model_opts *m, uint32_t b)
{
    MAT(m->ff, m->embd, "blk.%u.ffn_down.weight", b);
    MAT(m->embd, m->ff, "blk.%u.ffn_gate.weight", b);
    MAT(m->embd, m->ff, "blk.%u.ffn_up.weight", b);
}

/* Routed experts (+ router bias, router, shared experts when asked). */
static void moe_ffn(gen_plan *p, const gen_model_opts *m, uint32_t b, bool probs_b, bool shexp)
{
    T3(GEN_INIT_WEIGHT, true, m->expert_ff, m->embd, m->experts, "blk.%u.ffn_down_exps.weight", b);
    T3(GEN_INIT_WEIGHT, true, m->embd, m->expert_ff, m->experts, "blk.%u.ffn_gate_exps.weight", b);
    T3(GEN_INIT_WEIGHT, true, m->embd, m->expert_ff, m->experts, "blk.%u.ffn_up_exps.weight", b);
    if (probs_b) {
        gen_tensor *t = BIAS(m->experts, "blk.%u.exp_probs_b.bias", b);
        if (t)
            t->scale = 0.01f;
    }
    /* The router stays F32, as the converter and llama-quantize keep it. */
    T2(GEN_INIT_WEIGHT, false, m->embd, m->experts, "blk.%u.ffn_gate_inp.weight", b);
    if (shexp && m->shared_experts) {
        int64_t sff = (int64_t)m->expert_ff * m->shared_experts;
        MAT(sff, m->embd, "blk.%u.ffn_down_shexp.weight", b);
        MAT(m->embd, sff, "blk.%u.ffn_gate_shexp.weight", b);
        MAT(m->embd, sff, "blk.%u.ffn_up_shexp.weight", b);
    }
}

/* llama / qwen2 / qwen3 / qwen3moe / glm4moe attention, in sorted HF order. */
static void gqa_attn(gen_plan *p, const gen_model_opts *m, uint32_t b, bool bias, bool qk_norm)
{
    int64_t q = (int64_t)m->heads * m->head_dim, kv = (int64_t)m->kv_heads * m->head_dim;
    if (bias)
        BIAS(kv, "blk.%u.attn_k.bias", b);
    if (qk_norm)
        NORM(m->head_dim, "blk.%u.attn_k_norm.weight", b);
    MAT(m->embd, kv, "blk.%u.attn_k.weight", b);
    MAT(q, m->embd, "blk.%u.attn_output.weight", b);
    if (bias)
        BIAS(q, "blk.%u.attn_q.bias", b);
    if (qk_norm)
        NORM(m->head_dim, "blk.%u.attn_q_norm.weight", b);
    MAT(m->embd, q, "blk.%u.attn_q.weight", b);
    if (bias)
        BIAS(kv, "blk.%u.attn_v.bias", b);
    MAT(m->embd, kv, "blk.%u.attn_v.weight", b);
}

static void mla_attn(gen_plan *p, const gen_model_opts *m, uint32_t b)
{
    int64_t qk = (int64_t)m->qk_nope + m->qk_rope;
    NORM(m->kv_lora, "blk.%u.attn_kv_a_norm.weight", b);
    MAT(m->embd, (int64_t)m->kv_lora + m->qk_rope, "blk.%u.attn_kv_a_mqa.weight", b);
    if (m->legacy_kv_b) {
        MAT(m->kv_lora, (int64_t)m->heads * (m->qk_nope + m->v_head), "blk.%u.attn_kv_b.weight",
            b);
    } else {
        T3(GEN_INIT_WEIGHT, true, m->qk_nope, m->kv_lora, m->heads, "blk.%u.attn_k_b.weight", b);
        T3(GEN_INIT_WEIGHT, true, m->kv_lora, m->v_head, m->heads, "blk.%u.attn_v_b.weight", b);
    }
    MAT((int64_t)m->heads * m->v_head, m->embd, "blk.%u.attn_output.weight", b);
    if (m->q_lora) {
        NORM(m->q_lora, "blk.%u.attn_q_a_norm.weight", b);
        MAT(m->embd, m->q_lora, "blk.%u.attn_q_a.weight", b);
        MAT(m->q_lora, m->heads * qk, "blk.%u.attn_q_b.weight", b);
    } else {
        MAT(m->embd, m->heads * qk, "blk.%u.attn_q.weight", b);
    }
}

static void dsa_indexer(gen_plan *p, const gen_model_opts *m, uint32_t b)
{
    BIAS(m->indexer_head_dim, "blk.%u.indexer.k_norm.bias", b);
    NORM(m->indexer_head_dim, "blk.%u.indexer.k_norm.weight", b);
    MAT(m->embd, m->indexer_heads, "blk.%u.indexer.proj.weight", b);
    MAT(m->embd, m->indexer_head_dim, "blk.%u.indexer.attn_k.weight", b);
    MAT(m->q_lora, (int64_t)m->indexer_heads * m->indexer_head_dim,
        "blk.%u.indexer.attn_q_b.weight", b);
}

static int check(const gen_model_opts *m, int a, char *msg, size_t n)
{
#define NEED(cond, ...)                                                                            \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            snprintf(msg, n, __VA_ARGS__);                                                         \
            return -1;                                                                             \
        }                                                                                          \
    } while (0)
    bool mla = a == A_DEEPSEEK2 || a == A_GLMDSA;
    bool moe = a == A_QWEN3MOE || a == A_GLM4MOE || mla;
    NEED(m->layers >= 1 && m->layers <= 4096, "--layers must be 1..4096");
    NEED(m->embd && m->heads && m->ff && m->head_dim, "sizes must be positive");
    NEED(m->vocab >= 8, "--vocab must be at least 8");
    NEED(!m->gpt2 || m->vocab >= 258, "--tokenizer gpt2 needs --vocab >= 258 (256 bytes, a "
                                      "merge, end of text)");
    if (!mla)
        NEED(m->kv_heads && m->heads % m->kv_heads == 0,
             "--heads (%u) must be a multiple of --kv-heads (%u)", m->heads, m->kv_heads);
    if (moe) {
        NEED(m->experts >= 1 && m->experts_used >= 1 && m->experts_used <= m->experts,
             "need 1 <= --experts-used (%u) <= --experts (%u)", m->experts_used, m->experts);
        NEED(m->expert_ff >= 1, "--expert-ff must be positive");
        NEED(m->dense_layers <= m->layers, "--dense-layers (%u) exceeds --layers (%u)",
             m->dense_layers, m->layers);
    }
    if (mla) {
        NEED(m->kv_lora && m->qk_rope && m->qk_nope && m->v_head,
             "--kv-lora, --qk-nope, --qk-rope and --v-head must be positive");
        NEED(m->qk_rope % 2 == 0, "--qk-rope must be even");
    }
    if (a == A_GLMDSA)
        NEED(m->q_lora, "glm-dsa needs --q-lora > 0 (the indexer reads the q latent)");
    NEED(m->rope_freqs == 0 || (a == A_LLAMA && m->rope_freqs >= 1),
         "--rope-freqs: llama only, with a factor >= 1 (Llama 3.1: 8, 3.2: 32)");
    NEED(!m->softmax || a == A_DEEPSEEK2, "--gating softmax: deepseek2 only, not %s", m->arch);
    NEED(!m->qk_norm || a == A_GLM4MOE || a == A_QWEN3 || a == A_QWEN3MOE,
         "--qk-norm: glm4moe only (qwen3 and qwen3moe always have them)");
    NEED(m->rope_dim % 2 == 0, "the rope dimension must be even");
    return 0;
#undef NEED
}

int gen_model_build(gen_plan *p, const gen_model_opts *m, char *msg, size_t msg_size)
{
    int a = arch_id(m->arch);
    if (a < 0) {
        snprintf(msg, msg_size, "unknown architecture '%s'", m->arch);
        return -1;
    }
    if (check(m, a, msg, msg_size))
        return -1;
    const char *ar = m->arch;
    bool mla = a == A_DEEPSEEK2 || a == A_GLMDSA;
    bool moe = a == A_QWEN3MOE || a == A_GLM4MOE || mla;
    uint32_t nextn = (a == A_GLM4MOE || a == A_GLMDSA) ? m->nextn : 0;
    uint32_t n_blocks = m->layers + nextn;

    /* ---- metadata, in the converter's order ---- */
    gen_kv_str(p, "general.architecture", ar);
    gen_kv_str(p, "general.type", "model");
    gen_kv_str(p, "general.name", m->name);
    gen_kv_str(p, "general.size_label", ""); /* set once the tensors are known */
    gen_kv_u32a(p, ar, "%s.block_count", n_blocks);
    gen_kv_u32a(p, ar, "%s.context_length", m->ctx);
    gen_kv_u32a(p, ar, "%s.embedding_length", m->embd);
    gen_kv_u32a(p, ar, "%s.feed_forward_length", m->ff);
    gen_kv_u32a(p, ar, "%s.attention.head_count", m->heads);
    gen_kv_u32a(p, ar, "%s.attention.head_count_kv",
                mla ? (m->legacy_kv_b ? m->heads : 1) : m->kv_heads);
    if (m->yarn) {
        gen_kv_stra(p, ar, "%s.rope.scaling.type", "yarn");
        gen_kv_f32a(p, ar, "%s.rope.scaling.factor", 40.0f);
        gen_kv_u32a(p, ar, "%s.rope.scaling.original_context_length", 4096);
        gen_kv_f32a(p, ar, "%s.rope.scaling.yarn_beta_fast", 32.0f);
        gen_kv_f32a(p, ar, "%s.rope.scaling.yarn_beta_slow", 1.0f);
    }
    gen_kv_f32a(p, ar, "%s.rope.freq_base", m->rope_base);
    gen_kv_f32a(p, ar, "%s.attention.layer_norm_rms_epsilon", m->rms_eps);
    if (a == A_QWEN3MOE)
        gen_kv_u32a(p, ar, "%s.expert_count", m->experts);
    if (moe)
        gen_kv_u32a(p, ar, "%s.expert_used_count", m->experts_used);
    if (mla) {
        gen_kv_u32a(p, ar, "%s.expert_group_count", m->expert_groups);
        gen_kv_u32a(p, ar, "%s.expert_group_used_count", m->groups_used);
        gen_kv_u32a(p, ar, "%s.expert_gating_func", m->softmax ? 1 : 2); /* softmax, sigmoid */
        if (m->legacy_kv_b) {
            gen_kv_u32a(p, ar, "%s.attention.key_length", m->qk_nope + m->qk_rope);
            gen_kv_u32a(p, ar, "%s.attention.value_length", m->v_head);
        } else {
            /* MLA as llama.cpp runs it: one latent "KV head" of kv_lora + rope */
            gen_kv_u32a(p, ar, "%s.attention.key_length", m->kv_lora + m->qk_rope);
            gen_kv_u32a(p, ar, "%s.attention.value_length", m->kv_lora);
        }
    } else if (a != A_QWEN2) {
        gen_kv_u32a(p, ar, "%s.attention.key_length", m->head_dim);
        gen_kv_u32a(p, ar, "%s.attention.value_length", m->head_dim);
    }
    gen_kv_u32(p, "general.file_type", 0); /* set once the types are known */
    if (a == A_LLAMA) {
        gen_kv_u32a(p, ar, "%s.vocab_size", m->vocab);
        gen_kv_u32a(p, ar, "%s.rope.dimension_count", m->rope_dim);
    }
    if (a == A_QWEN3MOE)
        gen_kv_u32a(p, ar, "%s.expert_feed_forward_length", m->expert_ff);
    if (mla) {
        gen_kv_u32a(p, ar, "%s.leading_dense_block_count", m->dense_layers);
        gen_kv_u32a(p, ar, "%s.vocab_size", m->vocab);
        if (m->q_lora)
            gen_kv_u32a(p, ar, "%s.attention.q_lora_rank", m->q_lora);
        gen_kv_u32a(p, ar, "%s.attention.kv_lora_rank", m->kv_lora);
        if (!m->legacy_kv_b) {
            gen_kv_u32a(p, ar, "%s.attention.key_length_mla", m->qk_nope + m->qk_rope);
            gen_kv_u32a(p, ar, "%s.attention.value_length_mla", m->v_head);
        }
        gen_kv_u32a(p, ar, "%s.expert_feed_forward_length", m->expert_ff);
        gen_kv_u32a(p, ar, "%s.expert_count", m->experts);
        gen_kv_u32a(p, ar, "%s.expert_shared_count", m->shared_experts);
        gen_kv_f32a(p, ar, "%s.expert_weights_scale", m->expert_scale);
        gen_kv_boola(p, ar, "%s.expert_weights_norm", !m->softmax);
        gen_kv_u32a(p, ar, "%s.rope.dimension_count", m->rope_dim);
        if (m->yarn)
            gen_kv_f32a(p, ar, "%s.rope.scaling.yarn_log_multiplier", 0.1f);
    }
    if (a == A_GLM4MOE) {
        gen_kv_u32a(p, ar, "%s.rope.dimension_count", m->rope_dim);
        gen_kv_u32a(p, ar, "%s.expert_count", m->experts);
        gen_kv_u32a(p, ar, "%s.expert_feed_forward_length", m->expert_ff);
        gen_kv_u32a(p, ar, "%s.expert_shared_count", m->shared_experts);
        gen_kv_u32a(p, ar, "%s.leading_dense_block_count", m->dense_layers);
        gen_kv_u32a(p, ar, "%s.expert_gating_func", 2);
        gen_kv_f32a(p, ar, "%s.expert_weights_scale", m->expert_scale);
        gen_kv_boola(p, ar, "%s.expert_weights_norm", true);
    }
    if (nextn)
        gen_kv_u32a(p, ar, "%s.nextn_predict_layers", nextn);
    if (a == A_GLMDSA) {
        gen_kv_u32a(p, ar, "%s.attention.indexer.head_count", m->indexer_heads);
        gen_kv_u32a(p, ar, "%s.attention.indexer.key_length", m->indexer_head_dim);
        gen_kv_u32a(p, ar, "%s.attention.indexer.top_k", m->indexer_top_k);
    }
    gen_kv_u32(p, "general.quantization_version", 2);
    if (!m->no_vocab && m->gpt2)
        gen_vocab_gpt2_add(p, m->vocab);
    else if (!m->no_vocab)
        gen_vocab_add(p, m->vocab);

    /* ---- tensors ---- */
    if (m->rope_freqs > 0) {
        /* the converter's extra tensors come first */
        gen_tensor *t = T1(GEN_INIT_ROPE_FREQS, false, m->rope_dim / 2, "rope_freqs.weight");
        if (t) {
            t->p[0] = m->rope_base;
            t->p[1] = m->rope_freqs;
            t->p[2] = 8192.0f;
        }
    }
    if (!m->tied)
        MAT(m->embd, m->vocab, "output.weight");
    MAT(m->embd, m->vocab, "token_embd.weight");
    for (uint32_t b = 0; b < n_blocks; b++) {
        bool mtp = b >= m->layers;
        bool dense = !moe || b < m->dense_layers;
        if (mtp) {
            MAT(2 * (int64_t)m->embd, m->embd, "blk.%u.nextn.eh_proj.weight", b);
            if (a == A_GLM4MOE)
                MAT(m->embd, m->vocab, "blk.%u.nextn.embed_tokens.weight", b);
            NORM(m->embd, "blk.%u.nextn.enorm.weight", b);
            NORM(m->embd, "blk.%u.nextn.hnorm.weight", b);
        }
        NORM(m->embd, "blk.%u.attn_norm.weight", b);
        if (a == A_QWEN3MOE) {
            moe_ffn(p, m, b, false, false);
        } else if (dense) {
            dense_ffn(p, m, b);
        } else {
            moe_ffn(p, m, b, !m->softmax, true);
        }
        /* glm4moe's pre-FFN norm is post_attention_norm (its tensor list has no ffn_norm) */
        NORM(m->embd, a == A_GLM4MOE ? "blk.%u.post_attention_norm.weight" : "blk.%u.ffn_norm.weight",
             b);
        if (a == A_GLMDSA)
            dsa_indexer(p, m, b);
        if (mla)
            mla_attn(p, m, b);
        else
            gqa_attn(p, m, b, a == A_QWEN2 || a == A_GLM4MOE,
                     a == A_QWEN3 || a == A_QWEN3MOE || m->qk_norm);
        if (mtp) {
            if (a == A_GLM4MOE)
                MAT(m->embd, m->vocab, "blk.%u.nextn.shared_head_head.weight", b);
            NORM(m->embd, "blk.%u.nextn.shared_head_norm.weight", b);
        }
    }
    NORM(m->embd, "output_norm.weight");
    gen_size_label(p);
    if (p->err) {
        snprintf(msg, msg_size, "out of memory");
        return -1;
    }
    return 0;
}
