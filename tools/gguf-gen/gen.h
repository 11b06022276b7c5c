/*
 * gen.h - internals of gguf-gen, the deterministic generator of test models.
 *
 * A model is first described as a plan (metadata pairs and tensor
 * descriptions, no data), then written by gen_plan_write(): tensor by tensor,
 * each tensor's bytes produced from its own pseudo-random stream, seeded by
 * the global seed and the tensor's name. So the bytes of a tensor do not
 * depend on the order of tensors, on the split layout or on the chunking,
 * and nothing larger than one chunk of one tensor is ever in memory.
 */
#ifndef GGUF_GEN_H
#define GGUF_GEN_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "gguf/error.h"
#include "gguf/file.h"
#include "gguf/types.h"

#define GEN_TOOL "gguf-gen"
#define GEN_NAME_MAX 128

/* Fill err (may be NULL) with code and a message; returns code. */
int gen_fail(gguf_error *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- pseudo-random numbers: xoshiro256** seeded through splitmix64 ---- */
typedef struct gen_rng {
    uint64_t s[4];
} gen_rng;

uint64_t gen_splitmix64(uint64_t *state);
void gen_rng_seed(gen_rng *r, uint64_t seed, const char *name);

/* Inline: the fill loops call these once per value. */
static inline uint64_t gen_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t gen_rng_next(gen_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = gen_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = gen_rotl(s[3], 45);
    return result;
}

/*
 * Uniform in [lo, hi): lo + (hi - lo) * u rounded to float after each
 * operation, u = k / 2^24 with a 24-bit k. Both steps go through double, where
 * they are exact (the product has at most 49 significant bits, the sum at most
 * 47 for the ranges used here), then through one explicit rounding to float
 * each: exactly IEEE float multiply-then-add, and no fused multiply-add can
 * form across the conversions (AArch64, -ffp-contract=fast). The stream is the
 * same on every machine.
 */
static inline float gen_rng_range(gen_rng *r, float lo, float hi)
{
    float span = hi - lo;
    double u = (double)(gen_rng_next(r) >> 40) * 0x1p-24;
    float p = (float)((double)span * u);
    return (float)((double)lo + (double)p);
}
/* Uniform integer in [0, n). */
/* Uniform integer in [0, n). */
uint32_t gen_rng_below(gen_rng *r, uint32_t n);

/* Round to nearest even, as ggml does. */
uint16_t gen_fp32_to_fp16(float f);
float gen_fp16_to_fp32(uint16_t h);
uint16_t gen_fp32_to_bf16(float f);

/* ---- what a tensor's values look like ---- */
typedef enum gen_init {
    GEN_INIT_WEIGHT = 0, /* uniform in [-scale, scale] */
    GEN_INIT_NORM,       /* 1 + uniform in [-scale, scale] (RMS-norm gains) */
    GEN_INIT_BIAS,       /* uniform in [-scale, scale], small */
    GEN_INIT_ZERO,       /* all zero */
    GEN_INIT_ROPE_FREQS, /* llama 3 rope_freqs: p[0] base, p[1] factor, p[2] original context */
} gen_init;

typedef struct gen_tensor {
    char name[GEN_NAME_MAX];
    uint32_t type;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    uint8_t init;  /* gen_init */
    bool weight;   /* a matrix that --type applies to (else kept F32) */
    float scale;
    float p[3];    /* parameters of computed inits */
} gen_tensor;

/* A metadata pair, owning its storage. */
typedef struct gen_kv {
    char *key;
    gguf_value v;
    void *own;        /* raw array items or a string's bytes */
    char **own_strs;  /* arrays of strings: the strings */
    gguf_str *strs;   /* arrays of strings: views handed to the writer */
} gen_kv;

typedef struct gen_plan {
    gen_kv *kv;
    uint32_t n_kv, cap_kv;
    gen_tensor *t;
    uint32_t n_t, cap_t;
    int err; /* first allocation failure, sticky */
} gen_plan;

void gen_plan_init(gen_plan *p);
void gen_plan_free(gen_plan *p);
/* Metadata setters replace an existing key in place (keeping its position). */
void gen_kv_u32(gen_plan *p, const char *key, uint32_t v);
void gen_kv_i32(gen_plan *p, const char *key, int32_t v);
void gen_kv_u16(gen_plan *p, const char *key, uint16_t v);
void gen_kv_f32(gen_plan *p, const char *key, float v);
void gen_kv_bool(gen_plan *p, const char *key, bool v);
void gen_kv_str(gen_plan *p, const char *key, const char *v);
void gen_kv_arr(gen_plan *p, const char *key, uint32_t etype, const void *items, uint64_t n);
void gen_kv_arr_str(gen_plan *p, const char *key, char **items, uint64_t n); /* takes items */
/* Key with "%s" replaced by the architecture. */
void gen_kv_u32a(gen_plan *p, const char *arch, const char *fmt, uint32_t v);
void gen_kv_f32a(gen_plan *p, const char *arch, const char *fmt, float v);
void gen_kv_boola(gen_plan *p, const char *arch, const char *fmt, bool v);
void gen_kv_stra(gen_plan *p, const char *arch, const char *fmt, const char *v);
const gen_kv *gen_kv_find(const gen_plan *p, const char *key);

/* Add a tensor: n_dims sizes follow; name is printf-style. */
gen_tensor *gen_tensor_add(gen_plan *p, uint8_t init, bool weight, uint32_t n_dims,
                           const int64_t *ne, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* ---- tensor types ---- */
typedef struct gen_type_rule {
    char *pattern; /* POSIX extended regex over the tensor name */
    void *re;      /* compiled regex_t */
    uint32_t type;
} gen_type_rule;

typedef struct gen_types {
    uint32_t weight;       /* --type */
    gen_type_rule *rules;  /* --type-map, first match wins */
    uint32_t n_rules;
} gen_types;

/* Parse "REGEX=TYPE"; 0 or -1 with a message on stderr. */
int gen_types_add_rule(gen_types *ty, const char *spec);
void gen_types_free(gen_types *ty);
/*
 * Give every tensor its type: --type for weights, its current type for the
 * rest (F32 for norms and biases; the map's type in replicas), then the first
 * matching --type-map rule. A type whose block does not divide ne[0]
 * falls back (llama.cpp's choice, then F16, then F32) with a note on stderr.
 * @return 0, or -1 when a rule names a type that cannot hold the tensor.
 */
int gen_types_apply(const gen_types *ty, gen_plan *p, bool quiet);

/* ---- data ---- */
/*
 * Fill n_rows rows (ne[0] elements each) of tensor t into out, continuing the
 * tensor's stream in r. out holds n_rows * row bytes.
 */
void gen_fill_rows(const gen_tensor *t, gen_rng *r, uint8_t *out, int64_t n_rows);

/* ---- writing ---- */
typedef struct gen_write_opts {
    uint64_t seed;
    bool sparse;            /* tensor data left as holes (zeros) */
    bool header_only;       /* cut every file at the start of its data section */
    bool overwrite;
    bool no_sync;
    uint64_t split_max_tensors; /* 0: no limit */
    uint64_t split_max_size;    /* bytes; 0: no limit */
    const gguf_cancel_flag *cancel;
} gen_write_opts;

/*
 * Write the plan to out_path, or to a split set PREFIX-0000i-of-0000N.gguf
 * when a split option is set (out_path minus ".gguf" is the prefix; like
 * gguf-split, a set of one part when everything fits). *n_parts: the parts
 * written, 0 for a plain file.
 * @return 0 or a negative gguf_status with err filled.
 */
int gen_plan_write(const gen_plan *p, const char *out_path, const gen_write_opts *o,
                   uint32_t *n_parts, gguf_error *err);

/* ---- builders ---- */
/* Fields that may be 0 on purpose start as GEN_UNSET (q_lora, dense_layers,
 * shared_experts, nextn); gen_model_defaults replaces what is still unset. */
#define GEN_UNSET UINT32_MAX

typedef struct gen_model_opts {
    const char *arch;
    const char *name;
    uint32_t layers, embd, heads, kv_heads, head_dim, ff, vocab, ctx;
    uint32_t experts, experts_used, shared_experts, expert_ff, dense_layers;
    uint32_t expert_groups, groups_used;
    uint32_t q_lora, kv_lora, qk_nope, qk_rope, v_head, rope_dim;
    uint32_t indexer_heads, indexer_head_dim, indexer_top_k, nextn;
    float rope_base, rms_eps, expert_scale;
    bool legacy_kv_b;  /* deepseek2: attn_kv_b instead of attn_k_b + attn_v_b */
    bool tied;         /* no output.weight */
    int yarn;          /* rope.scaling.* keys (YaRN); -1: the arch's default */
    bool no_vocab;     /* no tokenizer.* keys */
    bool gpt2;         /* GPT-2 BPE vocabulary (with merges) instead of SentencePiece style */
    bool softmax;      /* deepseek2: DeepSeek-V2 routing (softmax, no exp_probs_b, no norm) */
    bool qk_norm;      /* glm4moe: attn_q_norm / attn_k_norm (GLM-4.5 355B has them) */
    float rope_freqs;  /* llama: > 0 writes Llama-3 rope_freqs.weight with this factor */
} gen_model_opts;

/* Architectures gen_model_build knows, NULL-terminated. */
extern const char *const gen_archs[];

/* Fill defaults for the architecture (zero fields only). */
int gen_model_defaults(gen_model_opts *m);
/* Apply a preset ("tiny", "1b", "20b") to m. @return 0 or -1 (unknown). */
int gen_model_preset(gen_model_opts *m, const char *preset);
/* Describe the model (metadata, tensors with init rules; types not yet set). */
int gen_model_build(gen_plan *p, const gen_model_opts *m, char *msg, size_t msg_size);
/* The tokenizer.* keys: a SentencePiece-style vocabulary of n tokens. */
void gen_vocab_add(gen_plan *p, uint32_t n);
/* The tokenizer.* keys of a GPT-2 byte-level BPE vocabulary of n tokens (with
 * merges). @return 0, or -1 when n < 258 (256 bytes, a merge, end of text). */
int gen_vocab_gpt2_add(gen_plan *p, uint32_t n);
/* general.size_label from the plan's tensors, as gguf-py computes it. */
void gen_size_label(gen_plan *p);
/* general.file_type for a weight type. */
uint32_t gen_file_type(uint32_t weight_type);

/* Replica of a tensor map (../shared/testdata/tensor-maps). */
int gen_replica_build(gen_plan *p, const char *map_path, const char *arch_override, bool gpt2,
                      char *msg, size_t msg_size);

/* gguf-gen hf: the HF safetensors checkpoint of a GGUF (gen_st.c). */
int gen_hf_main(int argc, char **argv);
/* config.json for `gguf-gen hf` (gen_hfcfg.c): the HF configuration of the
 * model m describes, quant appended inside the object (",\"quantization_config\":
 * {...}" or NULL). malloc'd; NULL when out of memory. */
struct gguf_model;
char *gen_hf_config(const struct gguf_model *m, const char *quant);

#endif
