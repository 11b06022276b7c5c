/* A fixed set of worker threads for the forward pass, started once per
 * context instead of once per matmul: a one-token pass runs about a hundred
 * matmuls of a few hundred microseconds each, where starting and joining
 * threads every time would cost as much as the work.
 *
 * A job is published by bumping a generation counter. Workers spin on it for
 * a short while after each job (the next matmul usually follows within
 * microseconds) and then sleep on a condition variable, so an idle context
 * costs nothing; the caller does the same while it waits for the last part. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "util/error_lib.h"
#include "forward/forward_stream.h"

/* Polls before sleeping: some tens of microseconds. */
#define POOL_SPIN 4096

struct fw_pool {
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    atomic_uint_fast64_t gen; /* bumped once per job */
    atomic_int pending;       /* workers that have not finished the job */
    atomic_int stop;
    /* the job: written before gen is bumped, read after it is seen */
    fw_part_fn fn;
    void *arg;
    int n_parts;
    int n_threads; /* the caller included */
    pthread_t *th;
    int started;
};

typedef struct worker_arg {
    fw_pool *p;
    int index; /* 1..n_threads-1; the caller is 0 */
} worker_arg;

/* One poll of a spin: a pause, and now and then the CPU handed to another
 * thread, so that more threads than free cores (a shared machine) still
 * make progress instead of spinning against the one they wait for. */
static inline void cpu_relax(int i)
{
    if (i % 16 == 15) {
        sched_yield();
        return;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Thread `index` runs parts index, index + n_threads, ... */
static void run_parts(const fw_pool *p, int index)
{
    for (int part = index; part < p->n_parts; part += p->n_threads)
        p->fn(p->arg, part, p->n_parts);
}

static void *worker_main(void *v)
{
    worker_arg *wa = v;
    fw_pool *p = wa->p;
    const int index = wa->index;
    free(wa);
    uint_fast64_t seen = 0;
    for (;;) {
        uint_fast64_t g = atomic_load_explicit(&p->gen, memory_order_acquire);
        for (int i = 0; g == seen && i < POOL_SPIN && !atomic_load(&p->stop); i++) {
            cpu_relax(i);
            g = atomic_load_explicit(&p->gen, memory_order_acquire);
        }
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen &&
                   !atomic_load(&p->stop))
                pthread_cond_wait(&p->wake, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop))
            break;
        seen = g;
        run_parts(p, index);
        if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

int fw_pool_create(fw_pool **out, int n_threads, gguf_error *err)
{
    *out = NULL;
    if (n_threads < 1 || n_threads > 1024)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "forward: %d threads is outside 1..1024", n_threads);
    fw_pool *p = calloc(1, sizeof *p);
    if (!p || !(p->th = calloc((size_t)n_threads, sizeof *p->th))) {
        free(p);
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "forward: thread pool: out of memory");
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    atomic_init(&p->gen, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->stop, 0);
    p->n_threads = n_threads;
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        int rc = ENOMEM;
        if (wa) {
            *wa = (worker_arg){p, i};
            rc = pthread_create(&p->th[i], NULL, worker_main, wa);
        }
        if (rc) {
            free(wa);
            fw_pool_free(p);
            return rc == ENOMEM ? gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET,
                                            "forward: thread pool: out of memory")
                                : gguf_fail_errno(err, GGUF_E_IO, rc,
                                                  "forward: starting worker thread %d", i);
        }
        p->started = i;
    }
    *out = p;
    return 0;
}

void fw_pool_free(fw_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i <= p->started; i++)
        pthread_join(p->th[i], NULL);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->mu);
    free(p->th);
    free(p);
}

int fw_pool_threads(const fw_pool *p)
{
    return p ? p->n_threads : 1;
}

void fw_pool_run(fw_pool *p, int n_parts, fw_part_fn fn, void *arg)
{
    if (!p || p->n_threads == 1 || n_parts <= 1) {
        for (int part = 0; part < n_parts; part++)
            fn(arg, part, n_parts);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    p->n_parts = n_parts;
    atomic_store_explicit(&p->pending, p->n_threads - 1, memory_order_relaxed);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    run_parts(p, 0);
    for (int i = 0; i < POOL_SPIN && atomic_load_explicit(&p->pending, memory_order_acquire); i++)
        cpu_relax(i);
    if (atomic_load_explicit(&p->pending, memory_order_acquire)) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load_explicit(&p->pending, memory_order_acquire))
            pthread_cond_wait(&p->done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}
