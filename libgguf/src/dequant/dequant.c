/*
 * Dequantization API: argument checks, path dispatch, threads over rows,
 * slices, and the scalar float conversions the kernels share.
 */
#include "util/cpus.h"
#include "dequant/dequant_internal.h"
#include "util/error_lib.h"

#include "gguf/types.h"

#include <errno.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

/* ======================================================================
 * Scalar conversions
 * ====================================================================== */

float gguf_fp16_to_fp32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    const uint32_t exp = (h >> 10) & 0x1F;
    uint32_t man = h & 0x3FF;
    uint32_t bits;

    if (exp == 0x1F) {
        /* Inf, or NaN with payload kept and the quiet bit set */
        bits = sign | 0x7F800000u | (man << 13) | (man ? 0x00400000u : 0);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else {
        /* subnormal half: man * 2^-24, normalise into a float */
        uint32_t e = 113;
        while (!(man & 0x400)) {
            man <<= 1;
            e--;
        }
        bits = sign | (e << 23) | ((man & 0x3FF) << 13);
    }
    return gguf_bits_to_f32(bits);
}

uint16_t gguf_fp32_to_fp16(float f)
{
    const uint32_t x = gguf_f32_to_bits(f);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    const uint32_t ax = x & 0x7FFFFFFF;

    if (ax > 0x7F800000u) /* NaN: keep the top payload bits, force quiet */
        return (uint16_t)(sign | 0x7E00 | ((ax >> 13) & 0x3FF));
    if (ax >= 0x477FF000u) /* >= 65520 rounds to Inf (Inf included) */
        return (uint16_t)(sign | 0x7C00);
    if (ax >= 0x38800000u) { /* normal half */
        uint32_t r = ax - 0x38000000u;
        r += 0xFFF + ((r >> 13) & 1);
        return (uint16_t)(sign | (r >> 13));
    }
    if (ax < 0x33000000u) /* below 2^-25 (half the smallest subnormal): zero */
        return sign;
    /* subnormal half: round (mantissa with implicit bit) >> shift, ties to even */
    const uint32_t e = ax >> 23;
    const uint32_t m = (ax & 0x7FFFFF) | 0x800000;
    const uint32_t shift = 126 - e; /* 14..24 */
    const uint32_t half = 1u << (shift - 1);
    const uint32_t rem = m & ((1u << shift) - 1);
    uint32_t q = m >> shift;
    if (rem > half || (rem == half && (q & 1)))
        q++;
    return (uint16_t)(sign | q);
}

float gguf_bf16_to_fp32(uint16_t b)
{
    return gguf_bits_to_f32((uint32_t)b << 16);
}

uint16_t gguf_fp32_to_bf16(float f)
{
    const uint32_t u = gguf_f32_to_bits(f);
    if ((u & 0x7FFFFFFF) > 0x7F800000u)
        return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7FFF + ((u >> 16) & 1))) >> 16);
}

float gguf_ue4m3_to_fp32(uint8_t x)
{
    return gguf_ue4m3_half(x) * 2.0f;
}

float gguf_e8m0_to_fp32(uint8_t e)
{
    return gguf_bits_to_f32(e == 0 ? 0x00400000u : (uint32_t)e << 23);
}

/* ======================================================================
 * Paths and dispatch
 * ====================================================================== */

static const char *const path_names[GGUF_DEQUANT_PATH_COUNT] = {"auto", "scalar", "portable",
                                                                "avx2"};

const char *gguf_dequant_path_name(int path)
{
    return path >= 0 && path < GGUF_DEQUANT_PATH_COUNT ? path_names[path] : "unknown";
}

static bool avx2_present;
static pthread_once_t avx2_once = PTHREAD_ONCE_INIT;

static void probe_avx2(void)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    /* AVX2 through the compiler (it also checks that the OS saves the YMM
     * state); F16C straight from CPUID leaf 1, ECX bit 29, because some clang
     * versions do not know "f16c" as a __builtin_cpu_supports name. */
    __builtin_cpu_init();
    unsigned a, b, c, d;
    avx2_present =
        __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
#endif
}

/* Probed once: CPUID traps to the hypervisor in a VM (microseconds each), and
 * every dequantized row asks (96% of a virtual-TP run's time on a tiny model). */
static bool cpu_has_avx2(void)
{
    pthread_once(&avx2_once, probe_avx2);
    return avx2_present;
}

bool gguf_dequant_path_available(int path)
{
    switch (path) {
    case GGUF_DEQUANT_AUTO:
    case GGUF_DEQUANT_SCALAR:
    case GGUF_DEQUANT_PORTABLE:
        return true;
    case GGUF_DEQUANT_AVX2:
        return cpu_has_avx2();
    default:
        return false;
    }
}

gguf_dequant_path gguf_dequant_best_path(void)
{
    return cpu_has_avx2() ? GGUF_DEQUANT_AVX2 : GGUF_DEQUANT_PORTABLE;
}

bool gguf_dequant_supported(uint32_t type)
{
    return gguf_type_is_valid(type) && gguf_dequant_scalar_kernel(type) != NULL;
}

/* Resolve (path, type) to a kernel, with the checks every entry point shares. */
static int pick_kernel(int path, uint32_t type, gguf_dequant_fn *out, gguf_error *err)
{
    const gguf_type_info *ti = gguf_type_get(type);
    if (!ti)
        return gguf_fail(err, GGUF_E_BAD_TYPE, GGUF_NO_OFFSET,
                         "dequant: type id %u is unknown", type);
    if (!ti->valid)
        return gguf_fail(err, GGUF_E_BAD_TYPE, GGUF_NO_OFFSET,
                         "dequant: type %s (id %u) was removed from ggml", ti->name, type);
    gguf_dequant_fn fn = gguf_dequant_scalar_kernel(type);
    if (!fn)
        return gguf_fail(err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                         "dequant: type %s has no dequantization", ti->name);
    if (path < 0 || path >= GGUF_DEQUANT_PATH_COUNT)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "dequant: path %d is not a path",
                         path);
    if (path == GGUF_DEQUANT_AUTO)
        path = gguf_dequant_best_path();
    if (path == GGUF_DEQUANT_AVX2) {
        if (!cpu_has_avx2())
            return gguf_fail(err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                             "dequant: this CPU lacks AVX2/F16C");
        gguf_dequant_fn f = gguf_dequant_avx2_kernel(type);
        if (f)
            fn = f;
    }
    /* PORTABLE: the reference kernels are already plain loops the compiler
     * vectorises; a type gets its own portable kernel only where that pays. */
    *out = fn;
    return GGUF_OK;
}

int gguf_dequant_kernel(int path, uint32_t type, gguf_dequant_fn *out, gguf_error *err)
{
    return pick_kernel(path, type, out, err);
}

static int check_row(uint32_t type, int64_t n, int64_t *n_blocks, gguf_error *err)
{
    const gguf_type_info *ti = gguf_type_get(type);
    if (n < 0 || n % ti->block_size != 0)
        return gguf_fail(err, GGUF_E_BAD_SHAPE, GGUF_NO_OFFSET,
                         "dequant: %lld elements is not a whole number of %s blocks of %u",
                         (long long)n, ti->name, ti->block_size);
    *n_blocks = n / ti->block_size;
    return GGUF_OK;
}

int gguf_dequant_row_path(int path, uint32_t type, const void *src, float *dst, int64_t n,
                          gguf_error *err)
{
    gguf_dequant_fn fn = NULL;
    int64_t nb = 0;
    int rc = pick_kernel(path, type, &fn, err);
    if (rc == GGUF_OK)
        rc = check_row(type, n, &nb, err);
    if (rc != GGUF_OK)
        return rc;
    if (n > 0 && (!src || !dst))
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "dequant: NULL buffer");
    if (nb > 0)
        fn(src, dst, nb);
    return GGUF_OK;
}

int gguf_dequant_row(uint32_t type, const void *src, float *dst, int64_t n, gguf_error *err)
{
    return gguf_dequant_row_path(GGUF_DEQUANT_AUTO, type, src, dst, n, err);
}

int gguf_dequant_scalar_row(uint32_t type, const void *src, float *dst, int64_t n,
                            gguf_error *err)
{
    return gguf_dequant_row_path(GGUF_DEQUANT_SCALAR, type, src, dst, n, err);
}

/* ======================================================================
 * Threads over rows
 *
 * A job is a run of rows: [row_begin, row_end) of one call. Per-call threads
 * each take one contiguous run; a pool's workers do the same, woken by a
 * generation counter, and the caller's thread takes run 0 itself.
 * ====================================================================== */

typedef struct rows_job {
    gguf_dequant_fn fn;
    const uint8_t *src;
    uint64_t stride;  /* bytes between source rows */
    float *dst;
    int64_t ne0;      /* elements per row (also the dst stride) */
    int64_t nb_row;   /* blocks per row */
    int64_t n_rows;
    int n_parts;
} rows_job;

static void run_part(const rows_job *job, int part)
{
    const int64_t r0 = job->n_rows * part / job->n_parts;
    const int64_t r1 = job->n_rows * (part + 1) / job->n_parts;
    for (int64_t r = r0; r < r1; r++)
        job->fn(job->src + (uint64_t)r * job->stride, job->dst + r * job->ne0, job->nb_row);
}

struct gguf_dequant_pool {
    pthread_mutex_t mu;
    pthread_cond_t wake;
    pthread_cond_t done;
    const rows_job *job;
    uint64_t generation;
    int pending;
    int stop;
    int n_threads; /* workers, the caller not counted */
    pthread_t *threads;
    int started;
};

typedef struct worker_arg {
    gguf_dequant_pool *pool;
    int index; /* run index 1..n_threads (run 0 is the caller's) */
} worker_arg;

static void *pool_worker(void *p)
{
    worker_arg *wa = p;
    gguf_dequant_pool *pool = wa->pool;
    const int index = wa->index;
    free(wa);
    uint64_t seen = 0;
    pthread_mutex_lock(&pool->mu);
    for (;;) {
        while (!pool->stop && pool->generation == seen)
            pthread_cond_wait(&pool->wake, &pool->mu);
        if (pool->stop)
            break;
        seen = pool->generation;
        const rows_job *job = pool->job;
        pthread_mutex_unlock(&pool->mu);
        if (index < job->n_parts)
            run_part(job, index);
        pthread_mutex_lock(&pool->mu);
        if (--pool->pending == 0)
            pthread_cond_signal(&pool->done);
    }
    pthread_mutex_unlock(&pool->mu);
    return NULL;
}

static int usable_cpus(void)
{
    const int n = gguf_cpus_usable();
    return n > 1024 ? 1024 : n;
}

int gguf_dequant_pool_create(gguf_dequant_pool **out, int n_threads, gguf_error *err)
{
    if (!out)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "dequant pool: NULL out");
    *out = NULL;
    if (n_threads < 0 || n_threads > 1024)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "dequant pool: %d threads is outside 0..1024", n_threads);
    if (n_threads == 0)
        n_threads = usable_cpus();
    gguf_dequant_pool *pool = calloc(1, sizeof *pool);
    if (!pool)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "dequant pool: out of memory");
    pool->n_threads = n_threads - 1; /* the caller works too */
    if (pool->n_threads > 0) {
        pool->threads = calloc((size_t)pool->n_threads, sizeof *pool->threads);
        if (!pool->threads) {
            free(pool);
            return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "dequant pool: out of memory");
        }
    }
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pthread_cond_init(&pool->done, NULL);
    for (int i = 0; i < pool->n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        int rc = ENOMEM;
        if (wa) {
            wa->pool = pool;
            wa->index = i + 1;
            rc = pthread_create(&pool->threads[i], NULL, pool_worker, wa);
        }
        if (rc != 0) {
            free(wa);
            gguf_dequant_pool_free(pool);
            return rc == ENOMEM
                       ? gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "dequant pool: out of memory")
                       : gguf_fail_errno(err, GGUF_E_IO, rc, "dequant pool: starting thread %d",
                                         i + 1);
        }
        pool->started++;
    }
    *out = pool;
    return GGUF_OK;
}

void gguf_dequant_pool_free(gguf_dequant_pool *pool)
{
    if (!pool)
        return;
    pthread_mutex_lock(&pool->mu);
    pool->stop = 1;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 0; i < pool->started; i++)
        pthread_join(pool->threads[i], NULL);
    pthread_cond_destroy(&pool->wake);
    pthread_cond_destroy(&pool->done);
    pthread_mutex_destroy(&pool->mu);
    free(pool->threads);
    free(pool);
}

int gguf_dequant_pool_size(const gguf_dequant_pool *pool)
{
    return pool ? pool->n_threads + 1 : 0;
}

static void pool_run(gguf_dequant_pool *pool, rows_job *job)
{
    job->n_parts = pool->n_threads + 1;
    if (job->n_parts > job->n_rows)
        job->n_parts = job->n_rows > 0 ? (int)job->n_rows : 1;
    if (job->n_parts == 1 || pool->n_threads == 0) {
        job->n_parts = 1;
        run_part(job, 0);
        return;
    }
    pthread_mutex_lock(&pool->mu);
    pool->job = job;
    pool->pending = pool->n_threads;
    pool->generation++;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);
    run_part(job, 0);
    pthread_mutex_lock(&pool->mu);
    while (pool->pending > 0)
        pthread_cond_wait(&pool->done, &pool->mu);
    pool->job = NULL;
    pthread_mutex_unlock(&pool->mu);
}

typedef struct part_arg {
    const rows_job *job;
    int part;
} part_arg;

static void *part_thread(void *p)
{
    const part_arg *pa = p;
    run_part(pa->job, pa->part);
    return NULL;
}

static int threads_run(rows_job *job, int n_threads, gguf_error *err)
{
    if (n_threads > 1024)
        n_threads = 1024;
    if (n_threads > job->n_rows)
        n_threads = (int)job->n_rows;
    if (n_threads <= 1) {
        job->n_parts = 1;
        run_part(job, 0);
        return GGUF_OK;
    }
    job->n_parts = n_threads;
    pthread_t *th = malloc(sizeof *th * (size_t)n_threads);
    part_arg *args = malloc(sizeof *args * (size_t)n_threads);
    if (!th || !args) {
        free(th);
        free(args);
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "dequant: out of memory");
    }
    int started = 0, rc = 0;
    for (int i = 1; i < n_threads; i++) {
        args[i].job = job;
        args[i].part = i;
        rc = pthread_create(&th[i], NULL, part_thread, &args[i]);
        if (rc != 0)
            break;
        started = i;
    }
    /* parts whose thread did not start run here, so the result stays whole */
    run_part(job, 0);
    for (int i = started + 1; i < n_threads; i++)
        run_part(job, i);
    for (int i = 1; i <= started; i++)
        pthread_join(th[i], NULL);
    free(th);
    free(args);
    return GGUF_OK;
}

static int run_rows(rows_job *job, const gguf_dequant_opts *opts, gguf_error *err)
{
    if (job->n_rows == 0 || job->nb_row == 0)
        return GGUF_OK;
    if (opts && opts->pool) {
        pool_run(opts->pool, job);
        return GGUF_OK;
    }
    return threads_run(job, opts ? opts->n_threads : 1, err);
}

int gguf_dequant_rows(uint32_t type, const void *src, uint64_t src_row_stride, float *dst,
                      int64_t ne0, int64_t n_rows, const gguf_dequant_opts *opts,
                      gguf_error *err)
{
    if (opts && opts->version > GGUF_DEQUANT_OPTS_VERSION)
        return gguf_opts_version_fail(opts->version, GGUF_DEQUANT_OPTS_VERSION, "gguf_dequant_opts",
                                      err);
    gguf_dequant_fn fn = NULL;
    int64_t nb = 0;
    int rc = pick_kernel(opts ? opts->path : GGUF_DEQUANT_AUTO, type, &fn, err);
    if (rc == GGUF_OK)
        rc = check_row(type, ne0, &nb, err);
    if (rc != GGUF_OK)
        return rc;
    if (n_rows < 0)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "dequant: %lld rows",
                         (long long)n_rows);
    uint64_t row_bytes, out_bytes, in_bytes;
    if (gguf_type_row_bytes(type, ne0, &row_bytes) != GGUF_OK)
        return gguf_fail(err, GGUF_E_OVERFLOW, GGUF_NO_OFFSET, "dequant: row size overflows");
    if (src_row_stride == 0)
        src_row_stride = row_bytes;
    if (src_row_stride < row_bytes)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "dequant: row stride %llu is less than a row (%llu bytes)",
                         (unsigned long long)src_row_stride, (unsigned long long)row_bytes);
    if (!gguf_mul_u64((uint64_t)n_rows, (uint64_t)ne0, &out_bytes) ||
        !gguf_mul_u64(out_bytes, sizeof(float), &out_bytes) || out_bytes > (uint64_t)PTRDIFF_MAX ||
        !gguf_mul_u64((uint64_t)n_rows, src_row_stride, &in_bytes) ||
        in_bytes > (uint64_t)PTRDIFF_MAX)
        return gguf_fail(err, GGUF_E_OVERFLOW, GGUF_NO_OFFSET, "dequant: tensor size overflows");
    if (n_rows > 0 && ne0 > 0 && (!src || !dst))
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "dequant: NULL buffer");
    rows_job job = {.fn = fn, .src = src, .stride = src_row_stride, .dst = dst, .ne0 = ne0,
                    .nb_row = nb, .n_rows = n_rows};
    return run_rows(&job, opts, err);
}

int gguf_dequant_slice(uint32_t type, const void *tensor_data, int64_t ne0,
                       int64_t n_rows_total, int64_t row0, int64_t n_rows, int64_t col0,
                       int64_t n_cols, float *dst, const gguf_dequant_opts *opts,
                       gguf_error *err)
{
    if (opts && opts->version > GGUF_DEQUANT_OPTS_VERSION)
        return gguf_opts_version_fail(opts->version, GGUF_DEQUANT_OPTS_VERSION, "gguf_dequant_opts",
                                      err);
    gguf_dequant_fn fn = NULL;
    int64_t nb;
    int rc = pick_kernel(opts ? opts->path : GGUF_DEQUANT_AUTO, type, &fn, err);
    if (rc == GGUF_OK)
        rc = check_row(type, ne0, &nb, err);
    if (rc != GGUF_OK)
        return rc;
    const gguf_type_info *ti = gguf_type_get(type);
    const int64_t bs = ti->block_size;
    if (n_rows_total < 0 || row0 < 0 || n_rows < 0 || row0 > n_rows_total ||
        n_rows > n_rows_total - row0 || col0 < 0 || n_cols < 0 || col0 > ne0 ||
        n_cols > ne0 - col0)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "dequant slice: rows [%lld, +%lld) cols [%lld, +%lld) outside a "
                         "%lld x %lld tensor",
                         (long long)row0, (long long)n_rows, (long long)col0, (long long)n_cols,
                         (long long)n_rows_total, (long long)ne0);
    if (col0 % bs != 0 || n_cols % bs != 0)
        return gguf_fail(err, GGUF_E_BAD_SHAPE, GGUF_NO_OFFSET,
                         "dequant slice: columns [%lld, +%lld) are not on %s block "
                         "boundaries (%lld)",
                         (long long)col0, (long long)n_cols, ti->name, (long long)bs);
    uint64_t row_bytes, off, total;
    if (gguf_type_row_bytes(type, ne0, &row_bytes) != GGUF_OK ||
        !gguf_mul_u64((uint64_t)n_rows_total, row_bytes, &total) ||
        total > (uint64_t)PTRDIFF_MAX || !gguf_mul_u64((uint64_t)row0, row_bytes, &off) ||
        !gguf_add_u64(off, (uint64_t)(col0 / bs) * ti->type_size, &off))
        return gguf_fail(err, GGUF_E_OVERFLOW, GGUF_NO_OFFSET, "dequant slice: size overflows");
    if (n_rows == 0 || n_cols == 0)
        return GGUF_OK;
    if (!tensor_data || !dst)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "dequant slice: NULL buffer");
    rows_job job = {.fn = fn, .src = (const uint8_t *)tensor_data + off, .stride = row_bytes,
                    .dst = dst, .ne0 = n_cols, .nb_row = n_cols / bs, .n_rows = n_rows};
    return run_rows(&job, opts, err);
}
