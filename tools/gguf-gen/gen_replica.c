/*
 * Header-faithful replicas of real models from their tensor maps
 * (../shared/testdata/tensor-maps, files NAME.map), one line per tensor:
 *
 *   FILE:SHA256:NAME:shape=(ne0, ne1, ...):dtype=TYPE:elements=N:bytes=N[:imatrix=...]
 *
 * Names, types, shapes and order come from the map; the hyper-parameters that
 * shapes reveal (sizes, heads, ranks, experts, dense and MTP blocks) are read
 * from the shapes, the rest (experts per token, RoPE, routing) from the
 * models' published configs, chosen by the map's file name.
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gen.h"

typedef struct known_model {
    const char *match; /* substring of the map's file name */
    const char *name;
    uint32_t ctx, experts_used, groups, groups_used;
    float rope_base, rms_eps, scale;
    float yarn_factor, yarn_beta_fast, yarn_beta_slow, yarn_log_mul; /* factor 0: none */
    uint32_t yarn_orig_ctx, indexer_top_k;
} known_model;

/* From the models' config.json files (see ../shared/testdata/README.md). */
static const known_model known[] = {
    {"GLM-5", "GLM-5.1", 202752, 8, 1, 1, 1000000.0f, 1e-5f, 2.5f, 0, 0, 0, 0, 0, 2048},
    {"DeepSeek-V3", "DeepSeek-V3.1-Terminus", 163840, 8, 8, 4, 10000.0f, 1e-6f, 2.5f, 40.0f, 32.0f,
     1.0f, 0.1f, 4096, 0},
    {"Kimi-K2", "Kimi-K2-Thinking", 262144, 8, 1, 1, 50000.0f, 1e-6f, 2.827f, 64.0f, 1.0f, 1.0f,
     0.1f, 4096, 0},
    {NULL, "replica", 4096, 8, 1, 1, 10000.0f, 1e-6f, 1.0f, 0, 0, 0, 0, 0, 2048},
};

static const known_model *known_for(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    for (const known_model *k = known; k->match; k++)
        if (strstr(base, k->match))
            return k;
    return &known[sizeof known / sizeof known[0] - 1];
}

/* Parse "(a, b, c)" into ne; returns n_dims or -1. */
static int parse_shape(const char *s, int64_t *ne)
{
    if (*s++ != '(')
        return -1;
    int n = 0;
    for (;;) {
        while (*s == ' ')
            s++;
        if (*s == ')')
            return n;
        if (!isdigit((unsigned char)*s) || n == GGUF_MAX_DIMS)
            return -1;
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (errno || v < 0)
            return -1;
        ne[n++] = v;
        s = end;
        while (*s == ' ')
            s++;
        if (*s == ',')
            s++;
        else if (*s != ')')
            return -1;
    }
}

static const char *field(const char *line, const char *key)
{
    const char *f = strstr(line, key);
    return f ? f + strlen(key) : NULL;
}

static uint8_t init_for(const char *name)
{
    size_t n = strlen(name);
    if (n > 5 && !strcmp(name + n - 5, ".bias"))
        return GEN_INIT_BIAS;
    if (strstr(name, "norm"))
        return GEN_INIT_NORM;
    return GEN_INIT_WEIGHT;
}

static const gen_tensor *find_name(const gen_plan *p, const char *name)
{
    for (uint32_t i = 0; i < p->n_t; i++)
        if (!strcmp(p->t[i].name, name))
            return &p->t[i];
    return NULL;
}

/* Tensor blk.B.SUFFIX, or NULL. */
static const gen_tensor *find(const gen_plan *p, const char *suffix, uint32_t b)
{
    char name[GEN_NAME_MAX];
    snprintf(name, sizeof name, "blk.%u.%s", b, suffix);
    return find_name(p, name);
}

/* The first block that has the tensor, or NULL. */
static const gen_tensor *find_any(const gen_plan *p, const char *suffix, uint32_t n_blocks,
                                  uint32_t *block)
{
    for (uint32_t b = 0; b < n_blocks; b++) {
        const gen_tensor *t = find(p, suffix, b);
        if (t) {
            if (block)
                *block = b;
            return t;
        }
    }
    return NULL;
}

int gen_replica_build(gen_plan *p, const char *map_path, const char *arch_override, bool gpt2,
                      char *msg, size_t msg_size)
{
    FILE *f = fopen(map_path, "r");
    if (!f) {
        snprintf(msg, msg_size, "%s: cannot open: %s", map_path, strerror(errno));
        return -1;
    }
    /* Tensors first (metadata derives from them), then metadata. */
    gen_plan tp;
    gen_plan_init(&tp);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    uint64_t lineno = 0;
    int rc = 0;
    uint32_t n_blocks = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = 0;
        if (!len || line[0] == '#')
            continue;
        /* FILE:SHA256:NAME:... */
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        char *c3 = c2 ? strchr(c2 + 1, ':') : NULL;
        const char *shape = field(line, ":shape="), *dtype = field(line, ":dtype=");
        const char *elems = field(line, ":elements="), *bytes = field(line, ":bytes=");
        if (c3 && (size_t)(c3 - c2 - 1) >= GEN_NAME_MAX) {
            snprintf(msg, msg_size, "%s:%llu: tensor name longer than %d bytes", map_path,
                     (unsigned long long)lineno, GEN_NAME_MAX - 1);
            rc = -1;
            break;
        }
        if (!c3 || !shape || !dtype || !elems || !bytes || shape != c3 + 7 || c3 == c2 + 1) {
            snprintf(msg, msg_size, "%s:%llu: not a tensor map line (FILE:SHA256:NAME:shape=(...)"
                     ":dtype=T:elements=N:bytes=N)", map_path, (unsigned long long)lineno);
            rc = -1;
            break;
        }
        char name[GEN_NAME_MAX], tname[32];
        memcpy(name, c2 + 1, (size_t)(c3 - c2 - 1));
        name[c3 - c2 - 1] = 0;
        size_t tl = strcspn(dtype, ":");
        snprintf(tname, sizeof tname, "%.*s", (int)(tl < 31 ? tl : 31), dtype);
        int64_t ne[GGUF_MAX_DIMS] = {1, 1, 1, 1};
        int nd = parse_shape(shape, ne);
        int type = gguf_type_from_name(tname);
        if (nd < 1) {
            snprintf(msg, msg_size, "%s:%llu: %s: bad shape", map_path, (unsigned long long)lineno,
                     name);
            rc = -1;
            break;
        }
        if (type < 0 || !gguf_type_is_valid((uint32_t)type)) {
            snprintf(msg, msg_size, "%s:%llu: %s: unknown type '%s'", map_path,
                     (unsigned long long)lineno, name, tname);
            rc = -1;
            break;
        }
        uint64_t row = 0, n_el = 1;
        for (int i = 0; i < nd; i++)
            n_el *= (uint64_t)ne[i];
        if (gguf_type_row_bytes((uint32_t)type, ne[0], &row) ||
            strtoull(elems, NULL, 10) != n_el ||
            strtoull(bytes, NULL, 10) != row * (n_el / (uint64_t)(ne[0] ? ne[0] : 1))) {
            snprintf(msg, msg_size, "%s:%llu: %s: shape, type, elements and bytes disagree",
                     map_path, (unsigned long long)lineno, name);
            rc = -1;
            break;
        }
        if (find_name(&tp, name)) {
            snprintf(msg, msg_size, "%s:%llu: %s: duplicate tensor name", map_path,
                     (unsigned long long)lineno, name);
            rc = -1;
            break;
        }
        gen_tensor *t = gen_tensor_add(&tp, init_for(name), false, (uint32_t)nd, ne, "%s", name);
        if (t)
            t->type = (uint32_t)type;
        unsigned b;
        if (sscanf(name, "blk.%u.", &b) == 1 && b + 1 > n_blocks)
            n_blocks = b + 1;
    }
    free(line);
    fclose(f);
    if (!rc && tp.n_t == 0) {
        snprintf(msg, msg_size, "%s: no tensors", map_path);
        rc = -1;
    }
    if (!rc && tp.err) {
        snprintf(msg, msg_size, "out of memory");
        rc = -1;
    }
    if (rc) {
        gen_plan_free(&tp);
        return rc;
    }

    /* ---- hyper-parameters from the shapes ---- */
    const known_model *k = known_for(map_path);
    const gen_tensor *emb = find_name(&tp, "token_embd.weight");
    const gen_tensor *kb = find_any(&tp, "attn_k_b.weight", n_blocks, NULL);
    const gen_tensor *vb = find_any(&tp, "attn_v_b.weight", n_blocks, NULL);
    const gen_tensor *kva = find_any(&tp, "attn_kv_a_mqa.weight", n_blocks, NULL);
    const gen_tensor *qa = find_any(&tp, "attn_q_a.weight", n_blocks, NULL);
    const gen_tensor *ffg = find_any(&tp, "ffn_gate.weight", n_blocks, NULL);
    uint32_t first_moe = n_blocks;
    const gen_tensor *exg = find_any(&tp, "ffn_gate_exps.weight", n_blocks, &first_moe);
    const gen_tensor *shg = find_any(&tp, "ffn_gate_shexp.weight", n_blocks, NULL);
    const gen_tensor *ip = find_any(&tp, "indexer.proj.weight", n_blocks, NULL);
    const gen_tensor *ik = find_any(&tp, "indexer.attn_k.weight", n_blocks, NULL);
    uint32_t nextn = 0;
    for (uint32_t b = 0; b < n_blocks; b++)
        if (find(&tp, "nextn.eh_proj.weight", b))
            nextn++;
    if (!emb || !kva || !kb || kva->ne[1] <= kb->ne[1]) {
        snprintf(msg, msg_size,
                 "%s: not an MLA model as the converter writes it today (deepseek2 / glm-dsa): "
                 "token_embd, attn_kv_a_mqa and attn_k_b are needed", map_path);
        gen_plan_free(&tp);
        return -1;
    }
    const char *ar = arch_override ? arch_override : ip ? "glm-dsa" : "deepseek2";
    if (strcmp(ar, "deepseek2") && strcmp(ar, "glm-dsa")) {
        snprintf(msg, msg_size, "--arch %s: a replica of an MLA map is deepseek2 or glm-dsa", ar);
        gen_plan_free(&tp);
        return -1;
    }
    uint32_t embd = (uint32_t)emb->ne[0], vocab = (uint32_t)emb->ne[1];
    uint32_t nope = (uint32_t)kb->ne[0], kv_lora = (uint32_t)kb->ne[1];
    uint32_t heads = (uint32_t)kb->ne[2], v_head = vb ? (uint32_t)vb->ne[1] : nope;
    uint32_t rope = (uint32_t)kva->ne[1] - kv_lora;
    uint32_t q_lora = qa ? (uint32_t)qa->ne[1] : 0;

    gen_kv_str(p, "general.architecture", ar);
    gen_kv_str(p, "general.type", "model");
    gen_kv_str(p, "general.name", k->name);
    gen_kv_str(p, "general.size_label", "");
    gen_kv_u32a(p, ar, "%s.block_count", n_blocks);
    gen_kv_u32a(p, ar, "%s.context_length", k->ctx);
    gen_kv_u32a(p, ar, "%s.embedding_length", embd);
    if (ffg)
        gen_kv_u32a(p, ar, "%s.feed_forward_length", (uint32_t)ffg->ne[1]);
    gen_kv_u32a(p, ar, "%s.attention.head_count", heads);
    gen_kv_u32a(p, ar, "%s.attention.head_count_kv", 1);
    if (k->yarn_factor) {
        gen_kv_stra(p, ar, "%s.rope.scaling.type", "yarn");
        gen_kv_f32a(p, ar, "%s.rope.scaling.factor", k->yarn_factor);
        gen_kv_u32a(p, ar, "%s.rope.scaling.original_context_length", k->yarn_orig_ctx);
        gen_kv_f32a(p, ar, "%s.rope.scaling.yarn_beta_fast", k->yarn_beta_fast);
        gen_kv_f32a(p, ar, "%s.rope.scaling.yarn_beta_slow", k->yarn_beta_slow);
    }
    gen_kv_f32a(p, ar, "%s.rope.freq_base", k->rope_base);
    gen_kv_f32a(p, ar, "%s.attention.layer_norm_rms_epsilon", k->rms_eps);
    if (exg) {
        gen_kv_u32a(p, ar, "%s.expert_used_count", k->experts_used);
        gen_kv_u32a(p, ar, "%s.expert_group_count", k->groups);
        gen_kv_u32a(p, ar, "%s.expert_group_used_count", k->groups_used);
        gen_kv_u32a(p, ar, "%s.expert_gating_func", 2);
    }
    gen_kv_u32a(p, ar, "%s.attention.key_length", kv_lora + rope);
    gen_kv_u32a(p, ar, "%s.attention.value_length", kv_lora);
    /* file_type: that of the most common type among the matrices (BF16 -> 32, Q4_K -> 15) */
    uint32_t count[GGUF_TYPE_COUNT] = {0}, common = GGUF_TYPE_F32;
    for (uint32_t i = 0; i < tp.n_t; i++)
        if (tp.t[i].n_dims >= 2 && tp.t[i].type < GGUF_TYPE_COUNT &&
            ++count[tp.t[i].type] > count[common])
            common = tp.t[i].type;
    gen_kv_u32(p, "general.file_type", gen_file_type(common));
    gen_kv_u32a(p, ar, "%s.leading_dense_block_count", first_moe);
    gen_kv_u32a(p, ar, "%s.vocab_size", vocab);
    if (q_lora)
        gen_kv_u32a(p, ar, "%s.attention.q_lora_rank", q_lora);
    gen_kv_u32a(p, ar, "%s.attention.kv_lora_rank", kv_lora);
    gen_kv_u32a(p, ar, "%s.attention.key_length_mla", nope + rope);
    gen_kv_u32a(p, ar, "%s.attention.value_length_mla", v_head);
    if (exg) {
        gen_kv_u32a(p, ar, "%s.expert_feed_forward_length", (uint32_t)exg->ne[1]);
        gen_kv_u32a(p, ar, "%s.expert_count", (uint32_t)exg->ne[2]);
        gen_kv_u32a(p, ar, "%s.expert_shared_count",
                    shg ? (uint32_t)(shg->ne[1] / exg->ne[1]) : 0);
        gen_kv_f32a(p, ar, "%s.expert_weights_scale", k->scale);
        gen_kv_boola(p, ar, "%s.expert_weights_norm", true);
    }
    gen_kv_u32a(p, ar, "%s.rope.dimension_count", rope);
    if (k->yarn_factor)
        gen_kv_f32a(p, ar, "%s.rope.scaling.yarn_log_multiplier", k->yarn_log_mul);
    if (nextn)
        gen_kv_u32a(p, ar, "%s.nextn_predict_layers", nextn);
    if (ip && ik) {
        gen_kv_u32a(p, ar, "%s.attention.indexer.head_count", (uint32_t)ip->ne[1]);
        gen_kv_u32a(p, ar, "%s.attention.indexer.key_length", (uint32_t)ik->ne[1]);
        gen_kv_u32a(p, ar, "%s.attention.indexer.top_k", k->indexer_top_k);
    }
    gen_kv_u32(p, "general.quantization_version", 2);
    if (gpt2 && vocab >= 258)
        gen_vocab_gpt2_add(p, vocab);
    else
        gen_vocab_add(p, vocab);

    /* Move the tensors over. */
    p->t = tp.t, p->n_t = tp.n_t, p->cap_t = tp.cap_t;
    tp.t = NULL, tp.n_t = tp.cap_t = 0;
    gen_plan_free(&tp);
    gen_size_label(p);
    if (p->err) {
        snprintf(msg, msg_size, "out of memory");
        return -1;
    }
    return 0;
}
