/*
 * Tensor parallel on real GPUs (ggufkit_cuda/forward_cuda_tp.h): two
 * processes, one GPU each, NCCL between them; each rank's captures against
 * the CPU's virtual tensor parallel (gguf_fwd_tp_create, f32) for the same
 * rank of the same plan, point by point: relative L2 <= 1e-4 and the same
 * experts. Generated models of the architectures, expert parallel, and two
 * faults of the catalog (a broken plan must break both sides the same way:
 * the slicing comes from the plan on both).
 *
 * Exit 77 with a message without NCCL, with fewer than 2 GPUs, or without
 * GGUFKIT_GEN. The ranks are forked before CUDA is touched; a hard deadline
 * kills them (a hang is a failure).
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gguf/file.h"
#include "gguf/forward.h"
#include "gguf/model.h"
#include "gguf/shard.h"
#include "ggufkit_cuda/cuda_device.h"
#include "ggufkit_cuda/forward_cuda_tp.h"
#include "ggufkit_cuda/nccl_comm.h"

#define REL_L2_MAX 1e-4

typedef struct cap_item {
    char name[64];
    int64_t ne[2], pos0;
    float *data;
} cap_item;

typedef struct cap_list {
    cap_item *v;
    int64_t n, cap;
    int rank; /* keep only this rank's captures */
} cap_list;

static int on_capture(void *user, const gguf_fwd_capture *c)
{
    cap_list *l = user;
    if (c->rank != l->rank)
        return 0;
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
}

static int compare(const char *what, int rank, const cap_list *a, const cap_list *b)
{
    if (a->n != b->n) {
        printf("FAIL %s rank %d: %lld captures on the CPU, %lld on the GPU\n", what, rank,
               (long long)a->n, (long long)b->n);
        return 1;
    }
    double worst = 0;
    for (int64_t i = 0; i < a->n; i++) {
        const cap_item *x = &a->v[i], *y = &b->v[i];
        if (strcmp(x->name, y->name) || x->ne[0] != y->ne[0] || x->ne[1] != y->ne[1]) {
            printf("FAIL %s rank %d: capture %lld is %s on the CPU, %s on the GPU\n", what, rank,
                   (long long)i, x->name, y->name);
            return 1;
        }
        const int64_t n = x->ne[0] * x->ne[1];
        if (strstr(x->name, "moe_experts")) {
            if (memcmp(x->data, y->data, (size_t)n * sizeof(float))) {
                printf("FAIL %s rank %d: %s: other experts on the GPU\n", what, rank, x->name);
                return 1;
            }
            continue;
        }
        double num = 0, den = 0;
        for (int64_t j = 0; j < n; j++) {
            const double d = (double)x->data[j] - (double)y->data[j];
            num += d * d;
            den += (double)x->data[j] * (double)x->data[j];
        }
        const double rel = den > 0 ? sqrt(num / den) : sqrt(num);
        if (rel > worst)
            worst = rel;
        if (!(rel <= REL_L2_MAX)) {
            printf("FAIL %s rank %d: %s @%lld: relative L2 %.3g\n", what, rank, x->name,
                   (long long)x->pos0, rel);
            return 1;
        }
    }
    printf("ok   %-28s rank %d: %lld captures, worst relative L2 %.2e\n", what, rank,
           (long long)a->n, worst);
    return 0;
}

typedef struct tp_case {
    const char *name, *gen_args;
    int ep;
    const char *fault;
} tp_case;

static const tp_case cases[] = {
    {"llama", "--arch llama", 0, NULL},
    {"qwen2", "--arch qwen2", 0, NULL},
    {"qwen3moe", "--arch qwen3moe", 0, NULL},
    {"qwen3moe-ep2", "--arch qwen3moe", 2, NULL},
    {"deepseek2", "--arch deepseek2", 0, NULL},
    {"glm4moe", "--arch glm4moe", 0, NULL},
    {"glm-dsa", "--arch glm-dsa", 0, NULL},
    {"llama-no-allreduce", "--arch llama", 0, "no-allreduce"},
    {"deepseek2-kv-b-rows", "--arch deepseek2", 0, "kv-b-rows"},
};

static const int32_t prompt[] = {1, 17, 42, 99, 3, 250, 7};

static int rank_main(const tp_case *tc, const char *path, int rank, const char *rdv)
{
    gguf_error err = {0};
    int n_dev = 0;
    if (gguf_cuda_device_count(&n_dev, &err) || n_dev < 2)
        return 77;
    gguf_set *set = NULL;
    gguf_model *m = NULL;
    gguf_shard_plan *plan = NULL;
    gguf_nccl_comm *comm = NULL;
    gguf_fwd_ctx *cc = NULL;
    gguf_cuda_tp *gc = NULL;
    cap_list cpu = {0}, gpu = {0};
    cpu.rank = gpu.rank = rank;
    int ret = 1, rc;
    gguf_shard_opts so = {0};
    so.tp = 2;
    so.ep = tc->ep;
    if ((rc = gguf_set_open(&set, path, NULL, &err)) || (rc = gguf_model_open(&m, set, &err)) ||
        (rc = gguf_shard_plan_create(&plan, m, &so, &err))) {
        printf("FAIL %s rank %d: %s\n", tc->name, rank, err.message);
        goto done;
    }
    if (tc->fault) {
        gguf_fault f;
        if (gguf_fault_from_name(tc->fault, &f) ||
            (rc = gguf_shard_apply_fault(plan, f, -1, &err))) {
            printf("FAIL %s rank %d: fault %s: %s\n", tc->name, rank, tc->fault, err.message);
            goto done;
        }
    }
    gguf_fwd_opts fo = {0};
    fo.capture = on_capture;
    fo.capture_user = &cpu;
    const int64_t np = (int64_t)(sizeof prompt / sizeof prompt[0]);
    const int32_t next = 11;
    if ((rc = gguf_fwd_tp_create(&cc, m, plan, &fo, &err)) ||
        (rc = gguf_fwd_eval(cc, prompt, np, NULL, &err)) ||
        (rc = gguf_fwd_eval(cc, &next, 1, NULL, &err))) {
        printf("FAIL %s rank %d: CPU: %s\n", tc->name, rank, err.message);
        goto done;
    }
    fo.capture_user = &gpu;
    if ((rc = gguf_nccl_comm_create(&comm, rank, 2, rank, rdv, 60, &err)) ||
        (rc = gguf_cuda_tp_create(&gc, m, plan, comm, &fo, NULL, &err)) ||
        (rc = gguf_cuda_tp_eval(gc, prompt, np, NULL, &err)) ||
        (rc = gguf_cuda_tp_eval(gc, &next, 1, NULL, &err))) {
        printf("FAIL %s rank %d: GPU: %s\n", tc->name, rank, err.message);
        goto done;
    }
    ret = compare(tc->name, rank, &cpu, &gpu);
done:
    gguf_cuda_tp_free(gc);
    gguf_nccl_comm_free(comm);
    gguf_fwd_ctx_free(cc);
    caps_free(&cpu);
    caps_free(&gpu);
    gguf_shard_plan_free(plan);
    gguf_model_free(m);
    gguf_set_free(set);
    return ret;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int run_case(const tp_case *tc, const char *dir, const char *gen)
{
    char path[512], cmd[1024], rdv[600];
    snprintf(path, sizeof path, "%s/%s.gguf", dir, tc->name);
    snprintf(rdv, sizeof rdv, "%s/%s.rdv", dir, tc->name);
    snprintf(cmd, sizeof cmd, "'%s' model %s --no-sync --force '%s' > /dev/null", gen,
             tc->gen_args, path);
    if (system(cmd) != 0) {
        printf("FAIL %s: gguf-gen\n", tc->name);
        return 1;
    }
    unlink(rdv);
    pid_t pid[2];
    for (int r = 0; r < 2; r++) {
        fflush(stdout);
        pid[r] = fork();
        if (pid[r] == 0) {
            int code = rank_main(tc, path, r, rdv);
            fflush(stdout);
            _exit(code);
        }
    }
    int result = 0, skip = 0, left = 2;
    const double t0 = now();
    while (left > 0) {
        for (int r = 0; r < 2; r++) {
            int st;
            if (pid[r] <= 0 || waitpid(pid[r], &st, WNOHANG) != pid[r])
                continue;
            pid[r] = 0;
            left--;
            const int code = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
            if (code == 77)
                skip = 1;
            else if (code)
                result = 1;
        }
        if (left > 0 && now() - t0 > 300) {
            printf("FAIL %s: a rank hangs; killing it\n", tc->name);
            for (int r = 0; r < 2; r++)
                if (pid[r] > 0) {
                    kill(pid[r], SIGKILL);
                    waitpid(pid[r], NULL, 0);
                }
            result = 1;
            break;
        }
        usleep(20000);
    }
    unlink(rdv);
    unlink(path);
    return skip && !result ? 77 : result;
}

int main(void)
{
    if (!gguf_nccl_available()) {
        printf("skipped: this build has no NCCL\n");
        return 77;
    }
    const char *gen = getenv("GGUFKIT_GEN");
    if (!gen || access(gen, X_OK)) {
        printf("skipped: GGUFKIT_GEN does not name the gguf-gen binary\n");
        return 77;
    }
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    char dir[] = "/tmp/test-gpu-tp-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    int failed = 0, n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        int rc = run_case(&cases[i], dir, gen);
        if (rc == 77) {
            rmdir(dir);
            printf("skipped: tensor parallel on GPUs needs 2 GPUs\n");
            return 77;
        }
        failed += rc != 0;
    }
    rmdir(dir);
    printf("%d of %d cases failed\n", failed, n);
    return failed ? 1 : 0;
}
