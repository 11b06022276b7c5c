/*
 * The GPU forward pass (ggufkit_cuda/forward_cuda.h) against the CPU
 * reference (gguf/forward.h, f32 mode), capture point by capture point, on
 * generated models of every architecture and the variants that take other
 * code paths (legacy attn_kv_b, softmax and group-limited routing, plain
 * attn_q in MLA, q/k norms, biases, rope_freqs, tied output, quantized
 * weights). A prompt, then two single-token steps on the KV cache.
 *
 * Bounds: the default f32 tolerance of gguf/compare.h (relative L2 <= 1e-4
 * at every point) and the same expert ids at every MoE point. Also checked:
 * the capture sequence (names, shapes, positions) is the CPU's, two GPU runs
 * give the same bits, a small streaming chunk (many more trips through the
 * double buffers) stays within the same bounds, and the unsupported options
 * fail with GGUF_E_UNSUPPORTED.
 *
 * Exit 77 (skipped) with a message when no CUDA device is usable. Needs
 * GGUFKIT_GEN (the gguf-gen binary), set by ctest. GGUFKIT_GPU_QUICK=1 runs
 * three models only (for compute-sanitizer).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/file.h"
#include "gguf/forward.h"
#include "gguf/model.h"
#include "ggufkit_cuda/cuda_device.h"
#include "ggufkit_cuda/forward_cuda.h"
#include "ggufkit_cuda/host_copy.h"

#define REL_L2_MAX 1e-4

typedef struct cap_item {
    char name[64];
    int64_t ne[2], pos0;
    float *data;
} cap_item;

typedef struct cap_list {
    cap_item *v;
    int64_t n, cap;
} cap_list;

static int on_capture(void *user, const gguf_fwd_capture *c)
{
    cap_list *l = user;
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        cap_item *nv = realloc(l->v, (size_t)l->cap * sizeof *nv);
        if (!nv)
            return GGUF_E_NOMEM;
        l->v = nv;
    }
    cap_item *it = &l->v[l->n];
    snprintf(it->name, sizeof it->name, "%s", c->name);
    it->ne[0] = c->ne[0];
    it->ne[1] = c->ne[1];
    it->pos0 = c->pos0;
    const size_t n = (size_t)(c->ne[0] * c->ne[1]);
    it->data = malloc(n * sizeof(float) + 1);
    if (!it->data)
        return GGUF_E_NOMEM;
    memcpy(it->data, c->data, n * sizeof(float));
    l->n++;
    return 0;
}

static void caps_free(cap_list *l)
{
    for (int64_t i = 0; i < l->n; i++)
        free(l->v[i].data);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static const int32_t prompt[] = {1, 17, 42, 99, 3, 250, 7};
static const int64_t n_prompt = 7;

/* Prompt, then two greedy single-token steps; every capture into l. */
static int run(const gguf_model *m, bool gpu, const gguf_cuda_fwd_opts *co, cap_list *l,
               gguf_error *err)
{
    gguf_fwd_opts fo = {0};
    fo.capture = on_capture;
    fo.capture_user = l;
    const int64_t V = gguf_model_hparams(m)->n_vocab;
    float *lg = malloc((size_t)(n_prompt * V) * sizeof(float));
    if (!lg)
        return GGUF_E_NOMEM;
    gguf_fwd_ctx *cc = NULL;
    gguf_cuda_fwd *gc = NULL;
    int rc = gpu ? gguf_cuda_fwd_create(&gc, m, &fo, co, err) : gguf_fwd_ctx_create(&cc, m, &fo, err);
    if (!rc)
        rc = gpu ? gguf_cuda_fwd_eval(gc, prompt, n_prompt, lg, err)
                 : gguf_fwd_eval(cc, prompt, n_prompt, lg, err);
    for (int k = 0; !rc && k < 2; k++) {
        /* fixed next tokens, the same on both sides (not greedy: a near tie
         * of the logits must not change what the cache holds) */
        const int32_t next = (int32_t)((prompt[k] * 31 + 5) % V);
        rc = gpu ? gguf_cuda_fwd_eval(gc, &next, 1, lg, err) : gguf_fwd_eval(cc, &next, 1, lg, err);
    }
    gguf_cuda_fwd_free(gc);
    gguf_fwd_ctx_free(cc);
    free(lg);
    return rc;
}

/* 0 when b matches a within the bounds; prints the first difference. */
static int compare(const char *model, const cap_list *a, const cap_list *b, double *worst)
{
    if (a->n != b->n) {
        printf("FAIL %s: %lld captures on the CPU, %lld on the GPU\n", model, (long long)a->n,
               (long long)b->n);
        return 1;
    }
    *worst = 0;
    for (int64_t i = 0; i < a->n; i++) {
        const cap_item *x = &a->v[i], *y = &b->v[i];
        if (strcmp(x->name, y->name) || x->ne[0] != y->ne[0] || x->ne[1] != y->ne[1] ||
            x->pos0 != y->pos0) {
            printf("FAIL %s: capture %lld is %s [%lld x %lld] @%lld on the CPU, %s [%lld x %lld] "
                   "@%lld on the GPU\n",
                   model, (long long)i, x->name, (long long)x->ne[0], (long long)x->ne[1],
                   (long long)x->pos0, y->name, (long long)y->ne[0], (long long)y->ne[1],
                   (long long)y->pos0);
            return 1;
        }
        const int64_t n = x->ne[0] * x->ne[1];
        if (strstr(x->name, "moe_experts")) {
            for (int64_t j = 0; j < n; j++)
                if (x->data[j] != y->data[j]) {
                    printf("FAIL %s: %s @%lld: expert %g on the CPU, %g on the GPU (row %lld)\n",
                           model, x->name, (long long)x->pos0, x->data[j], y->data[j],
                           (long long)(j / x->ne[0]));
                    return 1;
                }
            continue;
        }
        double num = 0, den = 0;
        bool finite = true;
        for (int64_t j = 0; j < n; j++) {
            const double d = (double)x->data[j] - (double)y->data[j];
            num += d * d;
            den += (double)x->data[j] * (double)x->data[j];
            finite = finite && isfinite(y->data[j]);
        }
        const double rel = den > 0 ? sqrt(num / den) : sqrt(num);
        if (rel > *worst)
            *worst = rel;
        if (!finite || !(rel <= REL_L2_MAX)) {
            printf("FAIL %s: %s @%lld: relative L2 %.3g (bound %.0e)%s\n", model, x->name,
                   (long long)x->pos0, rel, REL_L2_MAX, finite ? "" : ", non-finite values");
            return 1;
        }
    }
    return 0;
}

static bool identical(const cap_list *a, const cap_list *b)
{
    if (a->n != b->n)
        return false;
    for (int64_t i = 0; i < a->n; i++)
        if (memcmp(a->v[i].data, b->v[i].data,
                   (size_t)(a->v[i].ne[0] * a->v[i].ne[1]) * sizeof(float)))
            return false;
    return true;
}

typedef struct variant {
    const char *name;
    const char *args;
} variant;

static const variant variants[] = {
    {"llama", "--arch llama"},
    {"llama-rope-freqs-tied", "--arch llama --rope-freqs 8 --tied"},
    {"llama-q4k", "--arch llama --type Q4_K"},
    {"qwen2", "--arch qwen2"},
    {"qwen3", "--arch qwen3"},
    {"qwen3moe", "--arch qwen3moe"},
    {"qwen3moe-q8", "--arch qwen3moe --type Q8_0"},
    {"deepseek2", "--arch deepseek2"},
    {"deepseek2-legacy-kvb", "--arch deepseek2 --legacy-kv-b"},
    {"deepseek2-softmax", "--arch deepseek2 --gating softmax"},
    {"deepseek2-groups", "--arch deepseek2 --experts 16 --expert-groups 4 --groups-used 2"},
    {"deepseek2-no-qlora", "--arch deepseek2 --q-lora 0"},
    {"glm4moe", "--arch glm4moe"},
    {"glm4moe-qk-norm", "--arch glm4moe --qk-norm"},
    {"glm-dsa", "--arch glm-dsa"},
};

/* The copy team that fills the pinned staging buffers, on the host (runs
 * with or without a GPU): sizes around every split point, odd offsets, one
 * to 32 members. A lost byte here would corrupt weights silently. */
static int host_copy_check(void)
{
    const size_t N = (size_t)24 << 20;
    unsigned char *src = malloc(N), *dst = malloc(N);
    if (!src || !dst) {
        free(src);
        free(dst);
        return 1;
    }
    for (size_t i = 0; i < N; i++)
        src[i] = (unsigned char)(i * 7 + (i >> 13));
    const int teams[] = {1, 2, 3, 8, 32};
    int bad = 0;
    for (int ti = 0; ti < 5 && !bad; ti++) {
        gguf_host_copy_team *t = NULL;
        gguf_error e;
        if (gguf_host_copy_team_create(&t, teams[ti], &e)) {
            printf("FAIL host copy: team of %d: %s\n", teams[ti], e.message);
            bad = 1;
            break;
        }
        for (int it = 0; it < 150 && !bad; it++) {
            const size_t off = (size_t)(it * 37) % 4099;
            size_t n = it < 90 ? (size_t)it * ((size_t)256 << 10) + (size_t)(it % 3) - 1
                                : ((size_t)it * 2654435761u) % (N - 4099);
            if (it == 0)
                n = 0;
            memset(dst, 0xA5, N);
            gguf_host_copy(t, dst + off, src + off, n);
            for (size_t i = 0; i < n; i++)
                if (dst[off + i] != src[off + i]) {
                    printf("FAIL host copy: team of %d, %zu bytes at offset %zu: byte %zu "
                           "differs\n",
                           gguf_host_copy_team_size(t), n, off, i);
                    bad = 1;
                    break;
                }
            if (!bad && off + n < N && dst[off + n] != 0xA5) {
                printf("FAIL host copy: wrote past %zu bytes\n", n);
                bad = 1;
            }
        }
        /* gathers: many parts of odd sizes from scattered sources, as the
         * experts of an MoE layer are packed into one chunk */
        for (int it = 0; it < 40 && !bad; it++) {
            gguf_host_copy_part parts[64];
            const int np = 1 + it % 64;
            size_t total = 0;
            for (int k = 0; k < np; k++) {
                const size_t n = it % 5 == 0 ? 0 : ((size_t)(it * 131 + k * 977) * 613) % (200 << 10);
                const size_t at = ((size_t)(k * 7919 + it) * 40503) % (N / 2);
                parts[k].src = src + at;
                parts[k].n = n;
                total += n;
            }
            if (total > N / 2)
                continue;
            memset(dst, 0xA5, N);
            if (it % 2) { /* async: the workers copy while the caller returns */
                gguf_host_copy_gather_start(t, dst, parts, np);
                gguf_host_copy_wait(t);
            } else {
                gguf_host_copy_gather(t, dst, parts, np);
            }
            size_t o = 0;
            for (int k = 0; k < np && !bad; k++) {
                if (memcmp(dst + o, parts[k].src, parts[k].n)) {
                    printf("FAIL host copy gather: team of %d, part %d of %d differs\n",
                           gguf_host_copy_team_size(t), k, np);
                    bad = 1;
                }
                o += parts[k].n;
            }
            if (!bad && dst[o] != 0xA5) {
                printf("FAIL host copy gather: wrote past %zu bytes\n", o);
                bad = 1;
            }
        }
        gguf_host_copy_team_free(t);
    }
    if (!bad)
        printf("ok   host copy team (1..32 members, 750 copies, 200 gathers, half async)\n");
    free(src);
    free(dst);
    return bad;
}

int main(void)
{
    if (host_copy_check())
        return 1;
    gguf_error err = {0};
    int n_dev = 0;
    if (gguf_cuda_device_count(&n_dev, &err)) {
        printf("skipped: no usable CUDA device (%s)\n", err.message);
        return 77;
    }
    const char *gen = getenv("GGUFKIT_GEN");
    if (!gen || access(gen, X_OK)) {
        printf("skipped: GGUFKIT_GEN does not name the gguf-gen binary\n");
        return 77;
    }
    char dir[] = "/tmp/test-gpu-forward-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    int failed = 0;
    const char *quick = getenv("GGUFKIT_GPU_QUICK");
    const bool is_quick = quick && *quick && strcmp(quick, "0");
    const int nv = (int)(sizeof variants / sizeof variants[0]);
    for (int i = 0; i < nv; i++) {
        if (is_quick && strcmp(variants[i].name, "llama") && strcmp(variants[i].name, "qwen3moe") &&
            strcmp(variants[i].name, "deepseek2"))
            continue;
        char path[512], cmd[2048];
        snprintf(path, sizeof path, "%s/%s.gguf", dir, variants[i].name);
        snprintf(cmd, sizeof cmd, "'%s' model %s --no-sync --force '%s' > /dev/null", gen,
                 variants[i].args, path);
        if (system(cmd) != 0) {
            printf("FAIL %s: gguf-gen %s\n", variants[i].name, variants[i].args);
            failed++;
            continue;
        }
        gguf_set *set = NULL;
        gguf_model *m = NULL;
        cap_list cpu = {0}, gpu = {0}, gpu_again = {0}, gpu_small = {0};
        int rc = gguf_set_open(&set, path, NULL, &err);
        if (!rc)
            rc = gguf_model_open(&m, set, &err);
        if (!rc)
            rc = run(m, false, NULL, &cpu, &err);
        if (rc) {
            printf("FAIL %s: CPU: %s\n", variants[i].name, err.message);
            failed++;
            goto next;
        }
        if ((rc = run(m, true, NULL, &gpu, &err))) {
            printf("FAIL %s: GPU: %s\n", variants[i].name, err.message);
            failed++;
            goto next;
        }
        double worst = 0;
        if (compare(variants[i].name, &cpu, &gpu, &worst)) {
            failed++;
            goto next;
        }
        /* deterministic: a second run gives the same bits */
        if ((rc = run(m, true, NULL, &gpu_again, &err))) {
            printf("FAIL %s: GPU, second run: %s\n", variants[i].name, err.message);
            failed++;
            goto next;
        }
        if (!identical(&gpu, &gpu_again)) {
            printf("FAIL %s: two GPU runs differ (not deterministic)\n", variants[i].name);
            failed++;
            goto next;
        }
        /* chunks of 64 KiB gathered into pinned staging (the default run
         * reads the registered mapping in place): many more trips through
         * the staging buffers; cuBLAS may pick other kernels for other GEMM
         * shapes, so the bound is the CPU's tolerance, not the same bits */
        gguf_cuda_fwd_opts small = {0};
        small.chunk_bytes = 64 << 10;
        small.host_register = -1;
        double worst_small = 0;
        if ((rc = run(m, true, &small, &gpu_small, &err))) {
            printf("FAIL %s: GPU with small chunks: %s\n", variants[i].name, err.message);
            failed++;
            goto next;
        }
        if (compare(variants[i].name, &cpu, &gpu_small, &worst_small)) {
            printf("FAIL %s: (with 64 KiB streaming chunks)\n", variants[i].name);
            failed++;
            goto next;
        }
        /* the routed experts one GEMM each (no padded rows, no batched GEMM):
         * the layout a large prompt falls back to */
        if (gguf_model_hparams(m)->n_expert > 0) {
            gguf_cuda_fwd_opts packed = {0};
            packed.moe_pad = -1;
            double worst_packed = 0;
            caps_free(&gpu_small);
            if ((rc = run(m, true, &packed, &gpu_small, &err))) {
                printf("FAIL %s: GPU with unpadded experts: %s\n", variants[i].name,
                       err.message);
                failed++;
                goto next;
            }
            if (compare(variants[i].name, &cpu, &gpu_small, &worst_packed)) {
                printf("FAIL %s: (experts unpadded, one GEMM each)\n", variants[i].name);
                failed++;
                goto next;
            }
            /* routing on the calling thread alone (the default spreads the
             * prompt's tokens over the route threads): the same bits */
            gguf_cuda_fwd_opts one = {0};
            one.n_route_threads = 1;
            caps_free(&gpu_small);
            if ((rc = run(m, true, &one, &gpu_small, &err))) {
                printf("FAIL %s: GPU routing on one thread: %s\n", variants[i].name, err.message);
                failed++;
                goto next;
            }
            if (!identical(&gpu, &gpu_small)) {
                printf("FAIL %s: routing on one thread and on several differ\n",
                       variants[i].name);
                failed++;
                goto next;
            }
        }
        printf("ok   %-24s %3lld captures, worst relative L2 %.2e\n", variants[i].name,
               (long long)cpu.n, worst);
    next:
        caps_free(&cpu);
        caps_free(&gpu);
        caps_free(&gpu_again);
        caps_free(&gpu_small);
        gguf_model_free(m);
        gguf_set_free(set);
        unlink(path);
    }
    /* what the GPU backend refuses, cleanly */
    {
        char path[512], cmd[2048];
        snprintf(path, sizeof path, "%s/refuse.gguf", dir);
        snprintf(cmd, sizeof cmd, "'%s' model --arch deepseek2 --no-sync --force '%s' > /dev/null",
                 gen, path);
        gguf_set *set = NULL;
        gguf_model *m = NULL;
        int rc;
        if (system(cmd) == 0 && !gguf_set_open(&set, path, NULL, &err) &&
            !gguf_model_open(&m, set, &err)) {
            gguf_fwd_opts fo = {0};
            gguf_cuda_fwd *gc = NULL;
            fo.precision = GGUF_FWD_F64;
            if (gguf_cuda_fwd_create(&gc, m, &fo, NULL, &err) != GGUF_E_UNSUPPORTED) {
                printf("FAIL refuse: f64 is not GGUF_E_UNSUPPORTED\n");
                failed++;
            }
            gguf_cuda_fwd_free(gc);
            gc = NULL;
            fo.precision = GGUF_FWD_F32;
            fo.mla_mode = GGUF_FWD_MLA_ABSORBED;
            if (gguf_cuda_fwd_create(&gc, m, &fo, NULL, &err) != GGUF_E_UNSUPPORTED) {
                printf("FAIL refuse: absorbed MLA is not GGUF_E_UNSUPPORTED\n");
                failed++;
            }
            gguf_cuda_fwd_free(gc);
            gc = NULL;
            gguf_cuda_fwd_opts co = {0};
            co.device = n_dev;
            fo.mla_mode = GGUF_FWD_MLA_PLAIN;
            if (gguf_cuda_fwd_create(&gc, m, &fo, &co, &err) != GGUF_E_INVALID) {
                printf("FAIL refuse: device %d of %d is not GGUF_E_INVALID\n", n_dev, n_dev);
                failed++;
            }
            gguf_cuda_fwd_free(gc);
            gc = NULL;
            /* out of memory is GGUF_E_NOMEM (tools: exit 3), with nothing left behind */
            co.device = 0;
            co.chunk_bytes = (size_t)1 << 42; /* 4 TiB of staging */
            rc = gguf_cuda_fwd_create(&gc, m, &fo, &co, &err);
            if (rc != GGUF_E_NOMEM || gc) {
                printf("FAIL refuse: 4 TiB staging gives %d (%s), not GGUF_E_NOMEM\n", rc,
                       err.message);
                failed++;
            }
            gguf_cuda_fwd_free(gc);
            gc = NULL;
            co.chunk_bytes = 0;
            if ((rc = gguf_cuda_fwd_create(&gc, m, &fo, &co, &err))) {
                printf("FAIL refuse: no context after an out-of-memory one: %s\n", err.message);
                failed++;
            }
            gguf_cuda_fwd_free(gc);
        } else {
            printf("FAIL refuse: cannot make or open %s\n", path);
            failed++;
        }
        gguf_model_free(m);
        gguf_set_free(set);
        unlink(path);
    }
    rmdir(dir);
    printf("%d of %d models failed\n", failed, nv);
    return failed ? 1 : 0;
}
