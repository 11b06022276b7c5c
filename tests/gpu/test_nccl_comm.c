/*
 * NCCL communicators with deadlines (ggufkit_cuda/nccl_comm.h), one process
 * per GPU as the tensor-parallel backend runs them:
 *   - all-reduce (sum) and all-gather give the right numbers on 2 ranks;
 *   - a rank that never starts: the other's creation fails with ETIMEDOUT
 *     in about the timeout, no hang;
 *   - a rank that dies after init: the other's all-reduce fails (timeout or
 *     NCCL's own error), no hang.
 * The parent forks the ranks before touching CUDA (a CUDA context does not
 * survive fork) and kills everything past a hard deadline, so a hang is a
 * failure, never a stuck test. Exit 77 with a message without NCCL or with
 * fewer than 2 GPUs.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ggufkit_cuda/cuda_device.h"
#include "ggufkit_cuda/nccl_comm.h"

enum { CASE_OK, CASE_NO_PEER, CASE_PEER_DIES };

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One rank; exit code 0 pass, 1 fail, 77 skip. */
static int rank_main(int which, int rank, const char *rdv)
{
    gguf_error err = {0};
    int n_dev = 0;
    if (gguf_cuda_device_count(&n_dev, &err) || n_dev < 2) {
        printf("skipped: %s\n", n_dev < 2 && !err.message[0] ? "fewer than 2 GPUs" : err.message);
        return 77;
    }
    const double timeout = which == CASE_OK ? 60 : 5;
    gguf_nccl_comm *c = NULL;
    const double t0 = now();
    int rc = gguf_nccl_comm_create(&c, rank, 2, rank, rdv, timeout, &err);
    if (which == CASE_NO_PEER) {
        const double dt = now() - t0;
        if (rc == GGUF_E_IO && err.sys_errno == ETIMEDOUT && dt < timeout + 10) {
            printf("ok   no peer: rank %d failed after %.1f s: %s\n", rank, dt, err.message);
            return 0;
        }
        printf("FAIL no peer: rc %d after %.1f s: %s\n", rc, dt, err.message);
        gguf_nccl_comm_free(c);
        return 1;
    }
    if (rc) {
        printf("FAIL rank %d: create: %s\n", rank, err.message);
        return 1;
    }
    if (which == CASE_PEER_DIES && rank == 1)
        _exit(0); /* dies without a word */
    const size_t n = 1000;
    float *h = malloc(2 * n * sizeof(float)), *d = NULL, *g = NULL;
    int ret = 1;
    if (!h || gguf_cuda_malloc((void **)&d, n * sizeof(float), &err) ||
        gguf_cuda_malloc((void **)&g, 2 * n * sizeof(float), &err)) {
        printf("FAIL rank %d: memory: %s\n", rank, err.message);
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        h[i] = (float)(rank + 1) * (float)i;
    if (gguf_cuda_memcpy(d, h, n * sizeof(float), &err))
        goto done;
    if (which == CASE_PEER_DIES) {
        sleep(1); /* let the peer be gone */
        const double t1 = now();
        rc = gguf_nccl_all_reduce_sum(c, d, n, NULL, &err);
        const double dt = now() - t1;
        if (rc == GGUF_E_IO && dt < timeout + 10) {
            printf("ok   peer died: all-reduce failed after %.1f s: %s\n", dt, err.message);
            ret = 0;
        } else {
            printf("FAIL peer died: all-reduce rc %d after %.1f s: %s\n", rc, dt, err.message);
        }
        goto done;
    }
    if ((rc = gguf_nccl_all_reduce_sum(c, d, n, NULL, &err)) ||
        (rc = gguf_cuda_memcpy(h, d, n * sizeof(float), &err))) {
        printf("FAIL rank %d: all-reduce: %s\n", rank, err.message);
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        if (h[i] != 3.0f * (float)i) {
            printf("FAIL rank %d: all-reduce [%zu] = %g, want %g\n", rank, i, h[i], 3.0 * i);
            goto done;
        }
    for (size_t i = 0; i < n; i++)
        h[i] = (float)(rank * 100000 + (int)i);
    if ((rc = gguf_cuda_memcpy(d, h, n * sizeof(float), &err)) ||
        (rc = gguf_nccl_all_gather(c, d, g, n, NULL, &err)) ||
        (rc = gguf_cuda_memcpy(h, g, 2 * n * sizeof(float), &err))) {
        printf("FAIL rank %d: all-gather: %s\n", rank, err.message);
        goto done;
    }
    for (size_t i = 0; i < 2 * n; i++)
        if (h[i] != (float)((int)(i / n) * 100000 + (int)(i % n))) {
            printf("FAIL rank %d: all-gather [%zu] = %g\n", rank, i, h[i]);
            goto done;
        }
    printf("ok   rank %d: all-reduce and all-gather\n", rank);
    ret = 0;
done:
    gguf_cuda_free(d);
    gguf_cuda_free(g);
    free(h);
    gguf_nccl_comm_free(c);
    return ret;
}

/* Run ranks 0..n_ranks-1 of a world of 2 for one case; 0 pass, 1 fail, 77 skip. */
static int run_case(int which, int n_ranks, double hard_s)
{
    char rdv[] = "/tmp/test-nccl-rdv-XXXXXX";
    int fd = mkstemp(rdv);
    if (fd < 0)
        return 1;
    close(fd);
    unlink(rdv); /* rank 0 creates it */
    pid_t pid[2] = {0, 0};
    for (int r = 0; r < n_ranks; r++) {
        fflush(stdout);
        pid[r] = fork();
        if (pid[r] == 0) {
            int code = rank_main(which, r, rdv);
            fflush(stdout); /* _exit does not flush */
            _exit(code);
        }
    }
    int result = 0, skip = 0;
    const double t0 = now();
    int left = n_ranks;
    while (left > 0) {
        for (int r = 0; r < n_ranks; r++) {
            int st;
            if (pid[r] <= 0 || waitpid(pid[r], &st, WNOHANG) != pid[r])
                continue;
            pid[r] = 0;
            left--;
            int code = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
            if (code == 77)
                skip = 1;
            else if (code)
                result = 1;
        }
        if (left > 0 && now() - t0 > hard_s) {
            printf("FAIL case %d: a rank hangs after %.0f s; killing it\n", which, hard_s);
            for (int r = 0; r < n_ranks; r++)
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
    return skip && !result ? 77 : result;
}

int main(void)
{
    if (!gguf_nccl_available()) {
        printf("skipped: this build has no NCCL\n");
        return 77;
    }
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    int rc = run_case(CASE_OK, 2, 120);
    if (rc == 77) {
        printf("skipped: the NCCL tests need 2 GPUs\n");
        return 77;
    }
    int failed = rc != 0;
    failed += run_case(CASE_NO_PEER, 1, 60) != 0;
    failed += run_case(CASE_PEER_DIES, 2, 60) != 0;
    printf("%d of 3 cases failed\n", failed);
    return failed ? 1 : 0;
}
