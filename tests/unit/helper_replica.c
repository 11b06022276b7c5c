/* Small GGUF models from text specs, and tensor infos read from tensor maps. */
#include "helper_replica.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/types.h"
#include "gguf/write.h"

#define MAX_KV 256

static int add_kv(gguf_writer *w, const char *line, gguf_error *err)
{
    char type[16], key[200], val[512];
    val[0] = '\0';
    if (sscanf(line, "%15s %199s %511[^\n]", type, key, val) < 2)
        return GGUF_E_INVALID;
    if (!strcmp(type, "u32"))
        return gguf_writer_add_u32(w, key, (uint32_t)strtoul(val, NULL, 0), err);
    if (!strcmp(type, "i32"))
        return gguf_writer_add_i32(w, key, (int32_t)strtol(val, NULL, 0), err);
    if (!strcmp(type, "u64"))
        return gguf_writer_add_u64(w, key, strtoull(val, NULL, 0), err);
    if (!strcmp(type, "f32"))
        return gguf_writer_add_f32(w, key, strtof(val, NULL), err);
    if (!strcmp(type, "bool"))
        return gguf_writer_add_bool(w, key, !strcmp(val, "true"), err);
    if (!strcmp(type, "str"))
        return gguf_writer_add_str(w, key, val, err);
    if (!strcmp(type, "arru32")) {
        uint32_t items[64];
        uint64_t n = 0;
        char *s = val;
        while (*s && n < 64) {
            items[n++] = (uint32_t)strtoul(s, &s, 10);
            if (*s == ',')
                s++;
        }
        return gguf_writer_add_arr(w, key, GGUF_VALUE_UINT32, items, n, err);
    }
    return GGUF_E_INVALID;
}

static const char *line_key(const char *line, char *key, size_t size)
{
    /* "TYPE KEY ..." or "del KEY": the key is the second word */
    const char *s = strchr(line, ' ');
    key[0] = '\0';
    if (!s)
        return NULL;
    s++;
    size_t n = strcspn(s, " ");
    if (n == 0 || n >= size)
        return NULL;
    memcpy(key, s, n);
    key[n] = '\0';
    return key;
}

typedef struct tspec {
    char name[200];
    uint32_t type;
    uint32_t nd;
    int64_t ne[4];
} tspec;

static int parse_tensor(const char *line, tspec *t)
{
    char tname[32], dims[128];
    if (sscanf(line, "%199s %31s %127s", t->name, tname, dims) != 3)
        return GGUF_E_INVALID;
    int ty = gguf_type_from_name(tname);
    if (ty < 0)
        return GGUF_E_BAD_TYPE;
    t->type = (uint32_t)ty;
    t->nd = 0;
    for (int d = 0; d < 4; d++)
        t->ne[d] = 1;
    char *s = dims;
    while (*s && t->nd < 4) {
        t->ne[t->nd++] = strtoll(s, &s, 10);
        if (*s == ',')
            s++;
    }
    return 0;
}

int hr_write_model2(const char *path, const char *const *base, const char *const *extra,
                    const char *const *tensors)
{
    gguf_writer_opts o = {.no_sync = true, .overwrite = true};
    gguf_writer *w = NULL;
    gguf_error err;
    int rc = gguf_writer_create(&w, path, &o, &err);
    if (rc)
        return rc;
    /* merge: a base line is dropped when extra has the same key (or "del KEY") */
    for (int i = 0; base && base[i]; i++) {
        char k1[200], k2[200];
        if (!line_key(base[i], k1, sizeof k1)) {
            rc = GGUF_E_INVALID;
            goto done;
        }
        int skip = 0;
        for (int j = 0; extra && extra[j]; j++)
            if (line_key(extra[j], k2, sizeof k2) && !strcmp(k1, k2))
                skip = 1;
        if (!skip && (rc = add_kv(w, base[i], &err)) != 0)
            goto done;
    }
    for (int j = 0; extra && extra[j]; j++) {
        if (!strncmp(extra[j], "del ", 4))
            continue;
        if ((rc = add_kv(w, extra[j], &err)) != 0)
            goto done;
    }
    int nt = 0;
    while (tensors && tensors[nt])
        nt++;
    tspec *ts = calloc((size_t)nt + 1, sizeof *ts);
    for (int i = 0; i < nt; i++) {
        if ((rc = parse_tensor(tensors[i], &ts[i])) != 0 ||
            (rc = gguf_writer_add_tensor(w, ts[i].name, ts[i].type, ts[i].nd, ts[i].ne, &err)) !=
                0) {
            free(ts);
            goto done;
        }
    }
    for (int i = 0; i < nt && rc == 0; i++) {
        uint64_t rb;
        gguf_type_row_bytes(ts[i].type, ts[i].ne[0], &rb);
        uint64_t rows = (uint64_t)(ts[i].ne[1] * ts[i].ne[2] * ts[i].ne[3]);
        uint64_t nb = rb * rows;
        uint8_t *buf = malloc(nb ? nb : 1);
        if (ts[i].type == GGUF_TYPE_F32) {
            float *f = (float *)buf;
            for (uint64_t e = 0; e < nb / 4; e++)
                f[e] = (float)e + 1000.0f * (float)i;
        } else {
            for (uint64_t e = 0; e < nb; e++)
                buf[e] = (uint8_t)(e * 7 + (uint64_t)i);
        }
        rc = gguf_writer_write(w, buf, nb, &err);
        free(buf);
    }
    free(ts);
    if (rc == 0)
        rc = gguf_writer_finish(w, &err);
done:
    gguf_writer_free(w);
    return rc;
}

int hr_write_model(const char *path, const char *const *kvs, const char *const *tensors)
{
    return hr_write_model2(path, kvs, NULL, tensors);
}

int hr_map_load(hr_map *out, const char *path)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "r");
    if (!f)
        return GGUF_E_IO;
    size_t cap = 2048;
    out->t = calloc(cap, sizeof *out->t);
    char line[2048];
    int rc = 0;
    while (fgets(line, sizeof line, f)) {
        /* FILE:SHA256:NAME:shape=(a, b, c):dtype=TYPE:elements=N:bytes=N[:...] */
        char *p = line, *fields[8];
        int nf = 0;
        while (nf < 8 && (fields[nf] = strsep(&p, ":")) != NULL)
            nf++;
        if (nf < 5)
            continue;
        if ((size_t)out->n == cap) {
            cap *= 2;
            out->t = realloc(out->t, cap * sizeof *out->t);
        }
        gguf_tensor *t = &out->t[out->n];
        memset(t, 0, sizeof *t);
        t->name = strdup(fields[2]);
        const char *sh = strchr(fields[3], '(');
        for (int d = 0; d < 4; d++)
            t->ne[d] = 1;
        char *s = (char *)(sh ? sh + 1 : "");
        while (*s && *s != ')' && t->n_dims < 4) {
            t->ne[t->n_dims++] = strtoll(s, &s, 10);
            while (*s == ',' || *s == ' ')
                s++;
        }
        const char *dt = strncmp(fields[4], "dtype=", 6) == 0 ? fields[4] + 6 : fields[4];
        int ty = gguf_type_from_name(dt);
        if (ty < 0) {
            rc = GGUF_E_BAD_TYPE;
            break;
        }
        t->type = (uint32_t)ty;
        t->n_elements = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        uint64_t rb = 0;
        gguf_type_row_bytes(t->type, t->ne[0], &rb);
        t->nbytes = rb * (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
        t->index = (uint32_t)out->n;
        out->n++;
    }
    fclose(f);
    out->tp = calloc((size_t)out->n + 1, sizeof *out->tp);
    for (int64_t i = 0; i < out->n; i++)
        out->tp[i] = &out->t[i];
    if (rc)
        hr_map_free(out);
    return rc;
}

void hr_map_free(hr_map *m)
{
    for (int64_t i = 0; m->t && i < m->n; i++)
        free((char *)m->t[i].name);
    free(m->t);
    free(m->tp);
    memset(m, 0, sizeof *m);
}

const char *const hr_ds2_kvs[] = {
    "str general.architecture deepseek2",
    "u32 deepseek2.block_count 2",
    "u32 deepseek2.context_length 2048",
    "u32 deepseek2.embedding_length 64",
    "u32 deepseek2.feed_forward_length 64",
    "u32 deepseek2.attention.head_count 4",
    "u32 deepseek2.attention.head_count_kv 1",
    "f32 deepseek2.attention.layer_norm_rms_epsilon 1e-6",
    "u32 deepseek2.attention.key_length 40",
    "u32 deepseek2.attention.value_length 32",
    "u32 deepseek2.attention.key_length_mla 24",
    "u32 deepseek2.attention.value_length_mla 16",
    "u32 deepseek2.attention.q_lora_rank 32",
    "u32 deepseek2.attention.kv_lora_rank 32",
    "u32 deepseek2.rope.dimension_count 8",
    "f32 deepseek2.rope.freq_base 10000",
    "str deepseek2.rope.scaling.type yarn",
    "f32 deepseek2.rope.scaling.factor 40",
    "u32 deepseek2.rope.scaling.original_context_length 4096",
    "f32 deepseek2.rope.scaling.yarn_log_multiplier 0.1",
    "u32 deepseek2.expert_count 4",
    "u32 deepseek2.expert_used_count 2",
    "u32 deepseek2.expert_shared_count 1",
    "u32 deepseek2.expert_feed_forward_length 32",
    "u32 deepseek2.leading_dense_block_count 1",
    "u32 deepseek2.expert_gating_func 2",
    "bool deepseek2.expert_weights_norm true",
    "f32 deepseek2.expert_weights_scale 2.5",
    "u32 deepseek2.expert_group_count 2",
    "u32 deepseek2.expert_group_used_count 1",
    "u32 deepseek2.vocab_size 64",
    NULL,
};

#define DS2_ATTN(L)                                                                             \
    "blk." L ".attn_norm.weight f32 64", "blk." L ".attn_q_a.weight f32 64,32",                 \
        "blk." L ".attn_q_a_norm.weight f32 32", "blk." L ".attn_q_b.weight f32 32,96",         \
        "blk." L ".attn_kv_a_mqa.weight f32 64,40", "blk." L ".attn_kv_a_norm.weight f32 32",   \
        "blk." L ".attn_k_b.weight f32 16,32,4", "blk." L ".attn_v_b.weight f32 32,16,4",       \
        "blk." L ".attn_output.weight f32 64,64", "blk." L ".ffn_norm.weight f32 64"

const char *const hr_ds2_tensors[] = {
    "token_embd.weight f32 64,64",
    "output_norm.weight f32 64",
    "output.weight f32 64,64",
    DS2_ATTN("0"),
    "blk.0.ffn_gate.weight f32 64,64",
    "blk.0.ffn_up.weight f32 64,64",
    "blk.0.ffn_down.weight f32 64,64",
    DS2_ATTN("1"),
    "blk.1.ffn_gate_inp.weight f32 64,4",
    "blk.1.exp_probs_b.bias f32 4",
    "blk.1.ffn_gate_exps.weight f32 64,32,4",
    "blk.1.ffn_up_exps.weight f32 64,32,4",
    "blk.1.ffn_down_exps.weight f32 32,64,4",
    "blk.1.ffn_gate_shexp.weight f32 64,32",
    "blk.1.ffn_up_shexp.weight f32 64,32",
    "blk.1.ffn_down_shexp.weight f32 32,64",
    NULL,
};

const char *const hr_llama_kvs[] = {
    "str general.architecture llama",
    "u32 llama.block_count 2",
    "u32 llama.context_length 512",
    "u32 llama.embedding_length 64",
    "u32 llama.feed_forward_length 96",
    "u32 llama.attention.head_count 4",
    "u32 llama.attention.head_count_kv 2",
    "f32 llama.attention.layer_norm_rms_epsilon 1e-5",
    "u32 llama.rope.dimension_count 16",
    "u32 llama.vocab_size 96",
    NULL,
};

#define LLAMA_BLK(L)                                                                          \
    "blk." L ".attn_norm.weight f32 64", "blk." L ".attn_q.weight f32 64,64",                 \
        "blk." L ".attn_k.weight f32 64,32", "blk." L ".attn_v.weight f32 64,32",             \
        "blk." L ".attn_output.weight f32 64,64", "blk." L ".ffn_norm.weight f32 64",         \
        "blk." L ".ffn_gate.weight f32 64,96", "blk." L ".ffn_up.weight f32 64,96",           \
        "blk." L ".ffn_down.weight f32 96,64"

const char *const hr_llama_tensors[] = {
    "token_embd.weight f32 64,96", "output_norm.weight f32 64", "output.weight f32 64,96",
    LLAMA_BLK("0"), LLAMA_BLK("1"), NULL,
};

const char *const hr_qwen3moe_kvs[] = {
    "str general.architecture qwen3moe",
    "u32 qwen3moe.block_count 1",
    "u32 qwen3moe.embedding_length 64",
    "u32 qwen3moe.feed_forward_length 96",
    "u32 qwen3moe.attention.head_count 4",
    "u32 qwen3moe.attention.head_count_kv 2",
    "u32 qwen3moe.attention.key_length 16",
    "u32 qwen3moe.attention.value_length 16",
    "f32 qwen3moe.attention.layer_norm_rms_epsilon 1e-6",
    "f32 qwen3moe.rope.freq_base 1000000",
    "u32 qwen3moe.expert_count 8",
    "u32 qwen3moe.expert_used_count 2",
    "u32 qwen3moe.expert_feed_forward_length 48",
    "u32 qwen3moe.vocab_size 64",
    NULL,
};

const char *const hr_qwen3moe_tensors[] = {
    "token_embd.weight f32 64,64",
    "output_norm.weight f32 64",
    "blk.0.attn_norm.weight f32 64",
    "blk.0.attn_q.weight f32 64,64",
    "blk.0.attn_k.weight f32 64,32",
    "blk.0.attn_v.weight f32 64,32",
    "blk.0.attn_q_norm.weight f32 16",
    "blk.0.attn_k_norm.weight f32 16",
    "blk.0.attn_output.weight f32 64,64",
    "blk.0.ffn_norm.weight f32 64",
    "blk.0.ffn_gate_inp.weight f32 64,8",
    "blk.0.ffn_gate_exps.weight f32 64,48,8",
    "blk.0.ffn_up_exps.weight f32 64,48,8",
    "blk.0.ffn_down_exps.weight f32 48,64,8",
    NULL,
};
