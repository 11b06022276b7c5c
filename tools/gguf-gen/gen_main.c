/* gguf-gen: deterministic test models (see docs/gguf-gen.md). */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "gen.h"
#include "gguf/file.h"

enum {
    O_ARCH = 300, O_PRESET, O_NAME, O_SEED, O_TYPE, O_TYPE_MAP, O_SPARSE, O_FILL, O_SPLIT_T,
    O_SPLIT_S, O_FORCE, O_NO_SYNC,
    /* sizes: keep in the order of size_opts below */
    O_LAYERS, O_EMBD, O_HEADS, O_KV_HEADS, O_HEAD_DIM, O_FF, O_VOCAB, O_CTX, O_EXPERTS,
    O_EXPERTS_USED, O_SHARED, O_EXPERT_FF, O_DENSE, O_GROUPS, O_GROUPS_USED, O_Q_LORA, O_KV_LORA,
    O_QK_NOPE, O_QK_ROPE, O_V_HEAD, O_ROPE_DIM, O_IDX_HEADS, O_IDX_HEAD_DIM, O_IDX_TOP_K, O_NEXTN,
    O_SIZES_END,
    O_ROPE_BASE, O_RMS_EPS, O_EXPERT_SCALE, O_LEGACY_KVB, O_TIED, O_ROPE_SCALING, O_NO_VOCAB, O_GATING, O_QK_NORM, O_ROPE_FREQS, O_TOKENIZER, O_JSON,
};

static const cli_opt opts[] = {
    {O_ARCH, "arch", 1, "ARCH", "llama qwen2 qwen3 qwen3moe deepseek2 glm4moe glm-dsa (model; "
                                "replica: override the detected one)"},
    {O_PRESET, "preset", 1, "NAME", "sizes: tiny (default), 1b, 20b; size options override"},
    {O_NAME, "name", 1, "S", "general.name (default: the architecture)"},
    {O_SEED, "seed", 1, "N", "seed of the pseudo-random data (default 1)"},
    {O_TYPE, "type", 1, "T", "type of the weight matrices (default F16): F32 F16 BF16 Q8_0 Q4_K ..."},
    {O_TYPE_MAP, "type-map", 1, "RE=T", "type T for tensors whose name matches the extended "
                                        "regex RE (repeatable, first match wins)"},
    {O_SPARSE, "sparse", 0, NULL, "leave tensor data as holes (all zeros, no disk used)"},
    {O_FILL, "fill", 0, NULL, "replica: generate data instead of holes"},
    {O_SPLIT_T, "split-max-tensors", 1, "N", "write a split set, at most N tensors a part"},
    {O_SPLIT_S, "split-max-size", 1, "SIZE",
     "write a split set, at most SIZE of tensor data a part (as llama-gguf-split: 300M is "
     "300*10^6 bytes; K M G T powers of 1000, KiB MiB GiB TiB of 1024)"},
    {O_FORCE, "force", 0, NULL, "replace existing outputs"},
    {O_JSON, "json", 0, NULL, "print what was written as JSON (schema: docs/gguf-gen.md)"},
    {O_NO_SYNC, "no-sync", 0, NULL, "skip fsync (scratch files, tests)"},
    {O_LAYERS, "layers", 1, "N", "transformer blocks (without MTP blocks; default 2)"},
    {O_EMBD, "embd", 1, "N", "embedding length (default 256)"},
    {O_HEADS, "heads", 1, "N", "attention heads (default 16)"},
    {O_KV_HEADS, "kv-heads", 1, "N", "KV heads (default 8)"},
    {O_HEAD_DIM, "head-dim", 1, "N", "head size (default 16)"},
    {O_FF, "ff", 1, "N", "dense FFN size (default 512)"},
    {O_VOCAB, "vocab", 1, "N", "vocabulary size (default 512)"},
    {O_CTX, "ctx", 1, "N", "context_length (default 2048)"},
    {O_EXPERTS, "experts", 1, "N", "routed experts (default 8)"},
    {O_EXPERTS_USED, "experts-used", 1, "N", "experts per token (default 2)"},
    {O_SHARED, "shared-experts", 1, "N", "shared experts (default 1; qwen3moe 0)"},
    {O_EXPERT_FF, "expert-ff", 1, "N", "expert FFN size (default 256)"},
    {O_DENSE, "dense-layers", 1, "N", "leading dense blocks (default 1; qwen3moe 0)"},
    {O_GROUPS, "expert-groups", 1, "N", "expert groups (MLA archs; default 1)"},
    {O_GROUPS_USED, "groups-used", 1, "N", "expert groups used (default 1)"},
    {O_Q_LORA, "q-lora", 1, "N", "q_lora_rank; 0 = plain attn_q (default 128)"},
    {O_KV_LORA, "kv-lora", 1, "N", "kv_lora_rank (default 64)"},
    {O_QK_NOPE, "qk-nope", 1, "N", "qk_nope_head_dim (default 32)"},
    {O_QK_ROPE, "qk-rope", 1, "N", "qk_rope_head_dim (default 16)"},
    {O_V_HEAD, "v-head", 1, "N", "v_head_dim (default 32)"},
    {O_ROPE_DIM, "rope-dim", 1, "N", "rope.dimension_count (default: head size; glm4moe half)"},
    {O_IDX_HEADS, "indexer-heads", 1, "N", "glm-dsa indexer heads (default 8)"},
    {O_IDX_HEAD_DIM, "indexer-head-dim", 1, "N", "glm-dsa indexer head size (default 32)"},
    {O_IDX_TOP_K, "indexer-top-k", 1, "N", "glm-dsa indexer top-k (default 64)"},
    {O_NEXTN, "nextn", 1, "N", "MTP blocks of glm4moe / glm-dsa (default 1)"},
    {O_ROPE_BASE, "rope-base", 1, "F", "rope.freq_base"},
    {O_RMS_EPS, "rms-eps", 1, "F", "layer_norm_rms_epsilon"},
    {O_EXPERT_SCALE, "expert-scale", 1, "F", "expert_weights_scale (default 2.5)"},
    {O_LEGACY_KVB, "legacy-kv-b", 0, NULL, "deepseek2/glm-dsa: one attn_kv_b (older converters)"},
    {O_TIED, "tied", 0, NULL, "no output.weight (tied to token_embd)"},
    {O_ROPE_SCALING, "rope-scaling", 1, "yarn|none", "YaRN keys (default: yarn for deepseek2)"},
    {O_NO_VOCAB, "no-vocab", 0, NULL, "no tokenizer.* metadata"},
    {O_TOKENIZER, "tokenizer", 1, "spm|gpt2", "vocabulary: SentencePiece style (default) or GPT-2 "
                                              "byte-level BPE with merges"},
    {O_GATING, "gating", 1, "sigmoid|softmax", "deepseek2 routing: sigmoid + exp_probs_b (V3, "
                                               "default) or softmax (V2: no bias, no norm)"},
    {O_QK_NORM, "qk-norm", 0, NULL, "glm4moe: attn_q_norm and attn_k_norm (GLM-4.5 355B)"},
    {O_ROPE_FREQS, "rope-freqs", 1, "F", "llama: Llama-3 rope_freqs.weight with factor F (3.1: 8)"},
    {0, NULL, 0, NULL, NULL},
};

static const cli_spec spec = {
    GEN_TOOL,
    "model [OPTIONS] OUT.gguf | replica [OPTIONS] MAP OUT.gguf | hf MODEL.gguf OUT_DIR | archs | types",
    "Write GGUF test models with deterministic pseudo-random weights: any architecture of the "
    "model module, any sizes and tensor types, single files or split sets. 'replica' builds "
    "a header-faithful copy of a real model from its tensor map (sparse: no disk used). The "
    "same arguments always give the same bytes.",
    opts,
    "  gguf-gen model --arch llama tiny.gguf\n"
    "  gguf-gen model --arch deepseek2 --type Q4_K --type-map 'attn_k_b=Q8_0' ds.gguf\n"
    "  gguf-gen model --arch glm-dsa --layers 3 --split-max-tensors 40 glm.gguf\n"
    "  gguf-gen model --arch llama --preset 1b --type Q8_0 llama-1b.gguf\n"
    "  gguf-gen replica ../shared/testdata/tensor-maps/GLM-5.1-Q4_K.map glm51.gguf\n"
    "  gguf-gen hf ds.gguf ds-fp8/ --format fp8     (see gguf-gen hf --help)\n",
};

static volatile sig_atomic_t cancel_flag;
static void on_signal(int sig)
{
    (void)sig;
    cancel_flag = 1;
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: error: ", GEN_TOOL);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry '%s --help'.\n", GEN_TOOL);
    return CLI_EXIT_USAGE;
}

static int parse_u32(const char *s, uint32_t *out)
{
    uint64_t v;
    if (cli_parse_u64(s, &v) || v > 0xffffffffu)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

static int parse_f32(const char *s, float *out)
{
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end)
        return -1;
    *out = v;
    return 0;
}

static uint32_t *size_field(gen_model_opts *m, int id)
{
    uint32_t *f[] = {&m->layers,        &m->embd,         &m->heads,         &m->kv_heads,
                     &m->head_dim,      &m->ff,           &m->vocab,         &m->ctx,
                     &m->experts,       &m->experts_used, &m->shared_experts, &m->expert_ff,
                     &m->dense_layers,  &m->expert_groups, &m->groups_used,  &m->q_lora,
                     &m->kv_lora,       &m->qk_nope,      &m->qk_rope,       &m->v_head,
                     &m->rope_dim,      &m->indexer_heads, &m->indexer_head_dim,
                     &m->indexer_top_k, &m->nextn};
    _Static_assert(sizeof f / sizeof f[0] == O_SIZES_END - O_LAYERS, "size options");
    return f[id - O_LAYERS];
}

typedef struct pending {
    int id;
    const char *arg;
} pending;

/* --json: what was written, read back through the library (schema: docs/gguf-gen.md).
 * @return 0, or -1 out of memory or when the write failed. */
static int print_json(const gguf_set *s, uint64_t seed, bool sparse)
{
    uint64_t nbytes = 0;
    for (int64_t i = 0; i < gguf_set_tensor_count(s); i++)
        nbytes += gguf_set_tensor_at(s, i)->nbytes;
    const gguf_kv *arch = gguf_file_kv_find(gguf_set_meta(s), "general.architecture");
    json_t *files = json_array();
    for (uint32_t i = 0; files && i < gguf_set_part_count(s); i++) {
        const gguf_file *f = gguf_set_part(s, i);
        if (json_array_append_new(files, json_pack("{s:o, s:I, s:I, s:I}",
                "path", cli_json_text(gguf_file_path(f), SIZE_MAX),
                "size", (json_int_t)gguf_file_size(f),
                "n_tensors", (json_int_t)gguf_file_tensor_count(f),
                "n_kv", (json_int_t)gguf_file_kv_count(f))) != 0) {
            json_decref(files);
            files = NULL;
        }
    }
    json_t *doc = json_pack("{s:o, s:o, s:b, s:I, s:o, s:o}",
        "arch", arch && arch->value.type == GGUF_VALUE_STRING
                    ? cli_json_text(arch->value.v.str.data, (size_t)arch->value.v.str.len)
                    : json_null(),
        "seed", cli_json_u64(seed), "sparse", sparse,
        "n_tensors", (json_int_t)gguf_set_tensor_count(s), "nbytes", cli_json_u64(nbytes),
        "files", files);
    return cli_json_print_report(stdout, GEN_TOOL, doc);
}

/* One line per file written: path, tensors, keys, size (read back through the library);
 * or the JSON of print_json. @return an exit code. */
static int print_summary(const char *out, uint32_t n_parts, bool json, uint64_t seed, bool sparse)
{
    if (cli_verbosity == 0 && !json)
        return CLI_EXIT_OK;
    char *name = malloc(strlen(out) + 64);
    if (!name)
        return CLI_EXIT_ENV;
    if (n_parts > 0) {
        size_t n = strlen(out);
        char *prefix = strdup(out);
        if (!prefix) {
            free(name);
            return CLI_EXIT_ENV;
        }
        if (n > 5 && !strcmp(prefix + n - 5, ".gguf"))
            prefix[n - 5] = 0;
        gguf_split_part_name(name, strlen(out) + 64, prefix, 1, n_parts);
        free(prefix);
    } else {
        strcpy(name, out);
    }
    int ret = CLI_EXIT_OK;
    gguf_set *s = NULL;
    if (json && gguf_set_open(&s, name, NULL, NULL) == 0) {
        if (print_json(s, seed, sparse) != 0) {
            cli_errorf(GEN_TOOL, "cannot write the JSON report");
            ret = CLI_EXIT_ENV;
        }
    } else if (gguf_set_open(&s, name, NULL, NULL) == 0) {
        for (uint32_t i = 0; i < gguf_set_part_count(s); i++) {
            const gguf_file *f = gguf_set_part(s, i);
            char hb[32];
            printf("%s: %lld tensors, %lld metadata keys, %s\n", gguf_file_path(f),
                   (long long)gguf_file_tensor_count(f), (long long)gguf_file_kv_count(f),
                   cli_human_bytes(gguf_file_size(f), hb, sizeof hb));
        }
    }
    gguf_set_free(s);
    free(name);
    return ret;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        cli_usage(&spec, stderr);
        return CLI_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help")) {
        cli_usage(&spec, stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version")) {
        printf("%s (ggufkit) %s\n", GEN_TOOL, GGUFKIT_VERSION);
        return 0;
    }
    if (!strcmp(cmd, "archs")) {
        for (int i = 0; gen_archs[i]; i++)
            printf("%s\n", gen_archs[i]);
        return 0;
    }
    if (!strcmp(cmd, "types")) {
        for (uint32_t t = 0; t < GGUF_TYPE_COUNT; t++)
            if (gguf_type_is_valid(t))
                printf("%s\n", gguf_type_name(t));
        return 0;
    }
    if (!strcmp(cmd, "hf"))
        return gen_hf_main(argc - 1, argv + 1);
    bool model = !strcmp(cmd, "model"), replica = !strcmp(cmd, "replica");
    if (!model && !replica)
        return usage_error("unknown command '%s' (model, replica, hf, archs, types)", cmd);

    gen_model_opts m = {0};
    m.q_lora = m.dense_layers = m.shared_experts = m.nextn = GEN_UNSET;
    m.yarn = -1;
    gen_types ty = {.weight = GGUF_TYPE_F16};
    gen_write_opts wo = {.seed = 1, .sparse = replica};
    const char *preset = NULL, *pos[3] = {NULL};
    int n_pos = 0, rc = CLI_EXIT_USAGE;
    bool json = false;
    pending *pend = calloc((size_t)argc, sizeof *pend);
    int n_pend = 0;
    gen_plan plan;
    gen_plan_init(&plan);
    if (!pend)
        return CLI_EXIT_ENV;

    int sub_argc = argc - 1, oi = 1;
    char **sub_argv = argv + 1;
    for (;;) {
        const char *arg = NULL;
        int c = cli_next(&spec, sub_argc, sub_argv, &arg, &oi);
        if (c == -1) {
            /* getopt has permuted every option before the positionals: they are the rest
             * (setting optind past one of them would make glibc rewind to it) */
            for (; oi < sub_argc; oi++) {
                if (n_pos == 3) {
                    rc = usage_error("too many arguments (%s)", sub_argv[oi]);
                    goto done;
                }
                pos[n_pos++] = sub_argv[oi];
            }
            break;
        }
        switch (c) {
        case O_ARCH:
            m.arch = arg;
            break;
        case O_PRESET:
            preset = arg;
            break;
        case O_NAME:
            m.name = arg;
            break;
        case O_SEED:
            if (cli_parse_u64(arg, &wo.seed)) {
                rc = usage_error("--seed: '%s' is not a number", arg);
                goto done;
            }
            break;
        case O_TYPE: {
            int t = gguf_type_from_name(arg);
            if (t < 0 || !gguf_type_is_valid((uint32_t)t)) {
                rc = usage_error("--type: unknown tensor type '%s' (gguf-gen types lists them)", arg);
                goto done;
            }
            ty.weight = (uint32_t)t;
            break;
        }
        case O_TYPE_MAP:
            if (gen_types_add_rule(&ty, arg))
                goto done;
            break;
        case O_SPARSE:
            wo.sparse = true;
            break;
        case O_FILL:
            wo.sparse = false;
            break;
        case O_SPLIT_T:
            if (cli_parse_u64(arg, &wo.split_max_tensors) || !wo.split_max_tensors) {
                rc = usage_error("--split-max-tensors: '%s' is not a positive number", arg);
                goto done;
            }
            break;
        case O_SPLIT_S:
            if (cli_parse_split_size(arg, &wo.split_max_size)) {
                rc = usage_error("--split-max-size: '%s' is not a size (e.g. 300M, 1.5G, 48GiB)",
                                 arg);
                goto done;
            }
            break;
        case O_FORCE:
            wo.overwrite = true;
            break;
        case O_NO_SYNC:
            wo.no_sync = true;
            break;
        case O_JSON:
            json = true;
            break;
        case O_TOKENIZER: /* model and replica */
            if (!strcmp(arg, "gpt2") || !strcmp(arg, "spm")) {
                m.gpt2 = !strcmp(arg, "gpt2");
            } else {
                rc = usage_error("--tokenizer: '%s' is neither spm nor gpt2", arg);
                goto done;
            }
            break;
        default:
            if (!model) {
                rc = usage_error("%s: a model option; replica takes its sizes from the map",
                                 sub_argv[oi - 1]);
                goto done;
            }
            pend[n_pend].id = c;
            pend[n_pend++].arg = arg;
            break;
        }
    }

    char msg[512] = "";
    if (model) {
        if (n_pos != 1) {
            rc = usage_error("%s", "model wants one output file: gguf-gen model [OPTIONS] OUT.gguf");
            goto done;
        }
        if (!m.arch) {
            rc = usage_error("%s", "model needs --arch (gguf-gen archs lists them)");
            goto done;
        }
        if (preset && gen_model_preset(&m, preset)) {
            rc = usage_error("--preset: unknown preset '%s' (tiny, 1b, 20b)", preset);
            goto done;
        }
        for (int i = 0; i < n_pend; i++) {
            int id = pend[i].id;
            const char *a = pend[i].arg;
            bool bad = false;
            if (id >= O_LAYERS && id < O_SIZES_END) {
                /* 0 is a choice for these four, and no size for the rest */
                bool zero_ok = id == O_Q_LORA || id == O_DENSE || id == O_SHARED || id == O_NEXTN;
                bad = parse_u32(a, size_field(&m, id)) != 0 || (!zero_ok && !*size_field(&m, id));
            }
            else if (id == O_ROPE_BASE)
                bad = parse_f32(a, &m.rope_base) != 0;
            else if (id == O_RMS_EPS)
                bad = parse_f32(a, &m.rms_eps) != 0;
            else if (id == O_ROPE_FREQS)
                bad = parse_f32(a, &m.rope_freqs) != 0;
            else if (id == O_EXPERT_SCALE)
                bad = parse_f32(a, &m.expert_scale) != 0;
            else if (id == O_LEGACY_KVB)
                m.legacy_kv_b = true;
            else if (id == O_TIED)
                m.tied = true;
            else if (id == O_NO_VOCAB)
                m.no_vocab = true;
            else if (id == O_QK_NORM)
                m.qk_norm = true;
            else if (id == O_GATING) {
                if (!strcmp(a, "softmax"))
                    m.softmax = true;
                else if (strcmp(a, "sigmoid"))
                    bad = true;
            }
            else if (id == O_ROPE_SCALING) {
                if (!strcmp(a, "yarn"))
                    m.yarn = 1;
                else if (!strcmp(a, "none"))
                    m.yarn = 0;
                else
                    bad = true;
            }
            if (bad) {
                rc = usage_error("bad value '%s'", a);
                goto done;
            }
        }
        if (gen_model_defaults(&m)) {
            rc = usage_error("unknown architecture '%s' (gguf-gen archs lists them)", m.arch);
            goto done;
        }
        if (gen_model_build(&plan, &m, msg, sizeof msg)) {
            rc = usage_error("%s", msg);
            goto done;
        }
    } else {
        if (n_pos != 2) {
            rc = usage_error("%s", "replica wants a map and an output: gguf-gen replica MAP OUT.gguf");
            goto done;
        }
        /* Refused before the map is read: whatever the map holds, it must never be replaced. */
        struct stat in_st, out_st;
        if (stat(pos[0], &in_st) == 0 && stat(pos[1], &out_st) == 0 &&
            in_st.st_dev == out_st.st_dev && in_st.st_ino == out_st.st_ino) {
            fprintf(stderr, "%s: error: %s: the output is the input map; not replacing it\n",
                    GEN_TOOL, pos[1]);
            rc = CLI_EXIT_USAGE;
            goto done;
        }
        if (gen_replica_build(&plan, pos[0], m.arch, m.gpt2, msg, sizeof msg)) {
            fprintf(stderr, "%s: error: %s\n", GEN_TOOL, msg);
            rc = CLI_EXIT_USAGE;
            goto done;
        }
    }
    /* replica: the map's types stay unless --type-map says otherwise */
    gen_types_apply(&ty, &plan, cli_verbosity == 0);
    if (model)
        gen_kv_u32(&plan, "general.file_type", gen_file_type(ty.weight));

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    wo.cancel = &cancel_flag;

    const char *out = pos[n_pos - 1];
    gguf_error err;
    gguf_error_clear(&err);
    uint32_t n_parts = 0;
    int st = gen_plan_write(&plan, out, &wo, &n_parts, &err);
    if (st) {
        cli_error(GEN_TOOL, &err);
        rc = cli_exit_code(st);
        goto done;
    }
    rc = print_summary(out, n_parts, json, wo.seed, wo.sparse);
done:
    gen_plan_free(&plan);
    gen_types_free(&ty);
    free(pend);
    return rc;
}
