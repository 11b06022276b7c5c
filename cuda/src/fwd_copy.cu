/*
 * A team of host threads that copies memory together (memcpy split in parts
 * of at least 256 KiB), started once and reused: the GPU forward pass gathers
 * quantized weights (many experts' matrices into one chunk) from the file's
 * mmap into pinned staging with it, chunk after chunk, where one thread reaches a fraction of PCIe bandwidth and
 * starting threads per chunk would cost more than small chunks take.
 *
 * Host code only (no GPU needed); in ggufkit_cuda because only the GPU paths
 * need it. A team is used from one thread at a time.
 */
#include "cuda_internal.h"

#include "ggufkit_cuda/host_copy.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* A fixed team of copy threads, started with the context: one memcpy from
 * the page cache runs at a fraction of PCIe speed, and an MoE layer streams
 * thousands of small chunks (one expert's matrix each), too many to start
 * threads for each. The caller copies part 0 itself. */
#define FC_MAX_COPY 32

struct gguf_host_copy_team {
    pthread_t th[FC_MAX_COPY];
    int n_started;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    uint64_t gen;     /* job generation: workers run each once */
    int pending;      /* workers still copying the current job */
    bool quit;
    /* the job: parts placed one after another from dst, cut into `n_cuts`
     * byte ranges of `per` bytes, one per member */
    char *dst;
    const gguf_host_copy_part *parts;
    int n_parts;
    size_t total, per;
    int n_cuts;
    int cut_base;     /* worker w copies cut w - cut_base: 0 when the caller
                         copies cut 0 itself, 1 when it leaves (async) */
};
typedef gguf_host_copy_team fc_pool;


/* memcpy with non-temporal stores: the destination is staging that the GPU's
 * copy engine reads next, not the CPU; plain stores would first read every
 * destination line into the cache (read for ownership), a third stream of
 * memory traffic beside the source reads and the DMA. */
static void fc_memcpy_nt(char *d, const char *s, size_t n)
{
#if defined(__SSE2__)
    if (n >= 4096) {
        const size_t head = (16 - ((uintptr_t)d & 15)) & 15;
        memcpy(d, s, head);
        d += head;
        s += head;
        n -= head;
        for (; n >= 64; n -= 64, d += 64, s += 64) {
            const __m128i a = _mm_loadu_si128((const __m128i *)s);
            const __m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
            const __m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
            const __m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
            _mm_stream_si128((__m128i *)d, a);
            _mm_stream_si128((__m128i *)(d + 16), b);
            _mm_stream_si128((__m128i *)(d + 32), c);
            _mm_stream_si128((__m128i *)(d + 48), e);
        }
        _mm_sfence();
    }
#endif
    memcpy(d, s, n);
}

/* Copy bytes [lo, hi) of the concatenated parts to dst + lo. */
static void fc_copy_range(const fc_pool *p, size_t lo, size_t hi)
{
    size_t base = 0;
    for (int i = 0; i < p->n_parts && base < hi; i++) {
        const size_t n = p->parts[i].n, b = lo > base ? lo : base, e = hi < base + n ? hi : base + n;
        if (e > b)
            fc_memcpy_nt(p->dst + b, (const char *)p->parts[i].src + (b - base), e - b);
        base += n;
    }
}

static void fc_pool_part(fc_pool *p, int cut)
{
    const size_t lo = (size_t)cut * p->per;
    if (cut >= p->n_cuts || lo >= p->total)
        return;
    /* the last cut takes the rest, whatever the rounding of per */
    fc_copy_range(p, lo, cut == p->n_cuts - 1 || p->total - lo < p->per ? p->total : lo + p->per);
}

typedef struct fc_worker_arg {
    fc_pool *pool;
    int part;
} fc_worker_arg;

static void *fc_pool_main(void *arg)
{
    fc_worker_arg *a = (fc_worker_arg *)arg;
    fc_pool *p = a->pool;
    const int part = a->part;
    free(a);
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quit && p->gen == seen)
            pthread_cond_wait(&p->go, &p->mu);
        if (p->quit)
            break;
        seen = p->gen;
        const int cut = part - p->cut_base;
        const bool mine = cut >= 0 && cut < p->n_cuts;
        pthread_mutex_unlock(&p->mu);
        if (mine)
            fc_pool_part(p, cut);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Start up to n_threads - 1 workers (fewer when threads cannot start). */
static int fc_pool_init(fc_pool *p, int n_threads)
{
    memset(p, 0, sizeof *p);
    if (pthread_mutex_init(&p->mu, NULL) || pthread_cond_init(&p->go, NULL) ||
        pthread_cond_init(&p->done, NULL))
        return -1;
    if (n_threads > FC_MAX_COPY)
        n_threads = FC_MAX_COPY;
    for (int i = 1; i < n_threads; i++) {
        fc_worker_arg *a = (fc_worker_arg *)malloc(sizeof *a);
        if (!a)
            break;
        a->pool = p;
        a->part = i;
        if (pthread_create(&p->th[p->n_started], NULL, fc_pool_main, a)) {
            free(a);
            break;
        }
        p->n_started++;
    }
    return 0;
}

static void fc_pool_free(fc_pool *p)
{
    pthread_mutex_lock(&p->mu);
    p->quit = true;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_started; i++)
        pthread_join(p->th[i], NULL);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->mu);
}

/* Hand a job to the workers (the caller copies cut 0 too unless async);
 * false when it is too small to share: the caller copies it alone. */
static bool fc_post(fc_pool *p, void *dst, const gguf_host_copy_part *parts, int n_parts,
                    bool async)
{
    size_t total = 0;
    for (int i = 0; i < n_parts; i++)
        total += parts[i].n;
    /* at least 256 KiB per member: below that, waking threads costs more */
    int cuts = (int)(total / ((size_t)256 << 10));
    const int members = p ? p->n_started + (async ? 0 : 1) : 0;
    if (cuts > members)
        cuts = members;
    if (cuts < (async ? 1 : 2))
        return false;
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0) /* the previous job, if the caller did not wait */
        pthread_cond_wait(&p->done, &p->mu);
    p->dst = (char *)dst;
    p->parts = parts;
    p->n_parts = n_parts;
    p->total = total;
    p->per = ((total + (size_t)cuts - 1) / (size_t)cuts + 4095) & ~(size_t)4095;
    p->n_cuts = cuts;
    p->cut_base = async ? 1 : 0;
    p->pending = p->n_started;
    p->gen++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    return true;
}

static void fc_copy_alone(void *dst, const gguf_host_copy_part *parts, int n_parts)
{
    for (int i = 0; i < n_parts; i++) {
        memcpy(dst, parts[i].src, parts[i].n);
        dst = (char *)dst + parts[i].n;
    }
}

void gguf_host_copy_wait(gguf_host_copy_team *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void gguf_host_copy_gather(gguf_host_copy_team *p, void *dst, const gguf_host_copy_part *parts,
                           int n_parts)
{
    if (!fc_post(p, dst, parts, n_parts, false)) {
        gguf_host_copy_wait(p);
        fc_copy_alone(dst, parts, n_parts);
        return;
    }
    fc_pool_part(p, 0);
    gguf_host_copy_wait(p);
}

void gguf_host_copy_gather_start(gguf_host_copy_team *p, void *dst,
                                 const gguf_host_copy_part *parts, int n_parts)
{
    if (!fc_post(p, dst, parts, n_parts, true)) {
        gguf_host_copy_wait(p);
        fc_copy_alone(dst, parts, n_parts);
    }
}

void gguf_host_copy(gguf_host_copy_team *p, void *dst, const void *src, size_t n)
{
    const gguf_host_copy_part one = {src, n};
    gguf_host_copy_gather(p, dst, &one, 1);
}

int gguf_host_copy_team_create(gguf_host_copy_team **out, int n_threads, gguf_error *err)
{
    if (!out)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "host copy: NULL out");
    *out = NULL;
    fc_pool *p = (fc_pool *)calloc(1, sizeof *p);
    if (!p)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "host copy: out of memory");
    if (fc_pool_init(p, n_threads < 1 ? 1 : n_threads)) {
        free(p);
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "host copy: no mutex");
    }
    *out = p;
    return 0;
}

void gguf_host_copy_team_free(gguf_host_copy_team *t)
{
    if (!t)
        return;
    fc_pool_free(t);
    free(t);
}

int gguf_host_copy_team_size(const gguf_host_copy_team *t)
{
    return t ? t->n_started + 1 : 1;
}
