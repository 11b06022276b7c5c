/* A file tensor through a matmul on every thread, at the speed the weights
 * can be read.
 *
 * Each thread takes runs of the tensor's rows (one contiguous run each, or
 * shorter runs in turn: see fw_stream_mm) and walks them in windows. When
 * the context drops pages (the weights must not stay resident), a window's
 * bytes come one of two ways:
 *   - mapped: from the file mapping, each window (4 MiB) mapped in with one
 *     madvise(MADV_POPULATE_READ) and dropped with one madvise(MADV_DONTNEED)
 *     after, so the resident set stays a window (on several threads: one
 *     matmul's slice, dropped at once after it);
 *   - read: with pread into the thread's own buffer (256 KiB): nothing of the
 *     file is mapped, so there is no page-table work, nothing to drop and no
 *     TLB shootdown of the other cores, and a file that shrinks under the
 *     model gives an error instead of SIGBUS.
 * Which one is cheaper depends on the page cache (bench_weight_read): where
 * it holds the file in large folios (recent kernels, files written or read
 * in large pieces) one fault maps up to 2 MiB and a mapped window costs the
 * kernel next to nothing, while pread still copies every byte; where it
 * holds 4 KiB pages both cost the kernel about as much as reading the
 * memory, and pread scales better over cores. So the first window of a
 * context is mapped in as a probe, its page faults counted: few faults per
 * MiB (large folios) choose the mapping for the context, many choose pread.
 * Tensors of files the model holds no descriptor of (the later parts of a
 * split set) are always mapped. Without dropping pages, the mapping is used
 * as it is (pages stay mapped: a second pass costs the kernel nothing).
 *
 * Within a window, a block of rows small enough to stay in cache (128 KiB of
 * floats) is dequantized into the thread's buffer and multiplied at once,
 * so the floats are written and read back in cache, not through memory.
 *
 *   rows of the tensor   |--- run ---|--- run ---|--- run ---|-- ... --|
 *   one run              |win|win|win|...     read, or map in (and drop)
 *   one window           |blk|blk|blk|...     dequantize -> buffer -> matmul
 *
 * Every (row, token) result is the same sum in the same order as fw_matmul
 * over the whole dequantized tensor, so neither the thread count nor the
 * block and window sizes nor the way the bytes come change a bit. */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "dequant/dequant_kernel.h"
#include "util/error_lib.h"
#include "forward/forward_exec.h"
#include "forward/forward_stream.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14; older kernels answer EINVAL */
#endif

#define BLOCK_FLOATS (32u << 10) /* one row block: 128 KiB of floats, in L2 */
#define BLOCK_FLOATS_1 (8u << 10) /* the same for 1-3 tokens: 32 KiB, in L1 (each float
                                    is read once or thrice, no activations to share) */
#define READ_BYTES (256u << 10)  /* one pread: a window of the read path */
#define WINDOW_BYTES (4u << 20)  /* a window of the mapped path: mapped in and dropped at once */
#define PART_WORK (1u << 17)     /* least weights x (tokens + 1) worth a thread */
#define PROBE_MIN (1u << 20)     /* least bytes a probe of the page cache maps in */
#define PROBE_FAULTS_PER_MIB 4   /* more: small folios, read instead of mapping */

struct fw_stream {
    fw_pool *pool;
    int n_threads;
    float **buf;    /* one block of floats per thread */
    uint8_t **raw;  /* one read window per thread */
    size_t buf_floats, raw_bytes;
    atomic_int no_populate; /* the kernel refused MADV_POPULATE_READ */
    atomic_int source;      /* FW_SRC_*: how dropped file tensors are read */
    double *scratch[FW_SCRATCH_SLOTS];
    size_t scratch_n[FW_SCRATCH_SLOTS];
};

int fw_stream_create(fw_stream **out, int n_threads, gguf_error *err)
{
    *out = NULL;
    if (n_threads < 1)
        n_threads = 1;
    fw_stream *s = calloc(1, sizeof *s);
    if (!s || !(s->buf = calloc((size_t)n_threads, sizeof *s->buf)) ||
        !(s->raw = calloc((size_t)n_threads, sizeof *s->raw))) {
        if (s)
            free(s->buf);
        free(s);
        return fw_nomem(err, "stream buffers");
    }
    s->n_threads = n_threads;
    atomic_init(&s->no_populate, 0);
    atomic_init(&s->source, FW_SRC_AUTO);
    if (n_threads > 1) {
        int rc = fw_pool_create(&s->pool, n_threads, err);
        if (rc) {
            fw_stream_free(s);
            return rc;
        }
    }
    *out = s;
    return 0;
}

void fw_stream_free(fw_stream *s)
{
    if (!s)
        return;
    fw_pool_free(s->pool);
    for (int i = 0; i < s->n_threads; i++) {
        free(s->buf[i]);
        free(s->raw[i]);
    }
    free(s->buf);
    free(s->raw);
    for (int i = 0; i < FW_SCRATCH_SLOTS; i++)
        free(s->scratch[i]);
    free(s);
}

void fw_stream_set_source(fw_stream *s, int source)
{
    atomic_store(&s->source, source);
}

int fw_stream_source(fw_stream *s)
{
    return atomic_load(&s->source);
}

int fw_exec_pool(fw_exec *c, fw_pool **out, gguf_error *err)
{
    int rc;
    *out = NULL;
    if (!c->stream && (rc = fw_stream_create(&c->stream, c->s.o.n_threads, err)))
        return rc;
    *out = c->stream->pool;
    return 0;
}

double *fw_exec_scratch(fw_exec *c, int slot, size_t n)
{
    fw_pool *pool;
    if (slot < 0 || slot >= FW_SCRATCH_SLOTS || fw_exec_pool(c, &pool, NULL))
        return NULL;
    fw_stream *s = c->stream;
    if (n > s->scratch_n[slot]) {
        free(s->scratch[slot]);
        s->scratch[slot] = fw_xcalloc(n, sizeof(double));
        s->scratch_n[slot] = s->scratch[slot] ? n : 0;
    }
    return s->scratch[slot];
}

typedef struct range_job {
    void (*fn)(void *arg, int64_t begin, int64_t end);
    void *arg;
    int64_t n;
} range_job;

static void range_part(void *arg, int part, int n_parts)
{
    const range_job *j = arg;
    j->fn(j->arg, j->n * part / n_parts, j->n * (part + 1) / n_parts);
}

int fw_exec_parallel(fw_exec *c, int64_t n, int64_t min_per_part,
                     void (*fn)(void *arg, int64_t begin, int64_t end), void *arg,
                     gguf_error *err)
{
    fw_pool *pool;
    int rc = fw_exec_pool(c, &pool, err);
    if (rc)
        return rc;
    int64_t parts = fw_pool_threads(pool);
    if (min_per_part > 0 && n / min_per_part < parts)
        parts = n / min_per_part;
    if (parts < 1)
        parts = 1;
    range_job j = {fn, arg, n};
    fw_pool_run(pool, (int)parts, range_part, &j);
    return 0;
}

/* Every thread's buffers hold at least n floats and raw bytes. */
static int reserve(fw_stream *s, size_t n, size_t raw, gguf_error *err)
{
    for (int i = 0; i < s->n_threads; i++) {
        if (n > s->buf_floats) {
            free(s->buf[i]);
            if (!(s->buf[i] = malloc(n * sizeof(float))))
                goto nomem;
        }
        if (raw > s->raw_bytes) {
            free(s->raw[i]);
            if (!(s->raw[i] = malloc(raw)))
                goto nomem;
        }
    }
    s->buf_floats = n > s->buf_floats ? n : s->buf_floats;
    s->raw_bytes = raw > s->raw_bytes ? raw : s->raw_bytes;
    return 0;
nomem:
    /* some buffers are gone: make every one be made again next time */
    for (int i = 0; i < s->n_threads; i++) {
        free(s->buf[i]);
        free(s->raw[i]);
        s->buf[i] = NULL;
        s->raw[i] = NULL;
    }
    s->buf_floats = s->raw_bytes = 0;
    return fw_nomem(err, "stream buffers");
}

typedef struct stream_job {
    fw_stream *s;
    gguf_dequant_fn fn;
    const uint8_t *src; /* first row, in the mapping */
    int fd;             /* >= 0: read rows with pread from fd at off */
    uint64_t off;
    uint64_t row_bytes;
    int64_t nb_row, n_rows, n_in, n_tok, block, window;
    int64_t chunk;            /* > 0: threads take runs of this many rows in turn */
    atomic_llong next_chunk;  /* the next run to take */
    double *y;
    int64_t ys;
    const double *x;
    int64_t xs;
    const float *bias;
    int prec;
    bool drop;
    bool drop_each; /* one thread: drop each mapped window after its use */
    uintptr_t page;
    atomic_uint_fast64_t busy_ns; /* the threads' time in stream_part, summed */
    /* the first read that failed: errno (0: the file ended) and offset */
    atomic_int failed;
    int err_no;
    uint64_t err_off;
} stream_job;

/* The whole pages that [b, e) touches: for mapping in, and for dropping (a
 * read-only file mapping: a page dropped under a neighbour that still reads
 * it is read again from the page cache, never lost). */
static void page_span(const stream_job *j, const uint8_t *b, const uint8_t *e, uintptr_t *pb,
                      size_t *len)
{
    const uintptr_t mask = j->page - 1;
    const uintptr_t lo = (uintptr_t)b & ~mask, hi = ((uintptr_t)e + mask) & ~mask;
    *pb = lo;
    *len = hi - lo;
}

/* false where the kernel lacks MADV_POPULATE_READ (then pages fault in on use) */
static bool populate(const stream_job *j, const uint8_t *b, const uint8_t *e)
{
    if (atomic_load_explicit(&j->s->no_populate, memory_order_relaxed))
        return false;
    uintptr_t pb;
    size_t len;
    page_span(j, b, e, &pb, &len);
    if (madvise((void *)pb, len, MADV_POPULATE_READ) == 0)
        return true;
    if (errno == EINVAL)
        atomic_store_explicit(&j->s->no_populate, 1, memory_order_relaxed);
    return false;
}

static void drop(const stream_job *j, const uint8_t *b, const uint8_t *e)
{
    uintptr_t pb;
    size_t len;
    page_span(j, b, e, &pb, &len);
    madvise((void *)pb, len, MADV_DONTNEED);
}

/* n bytes at off into buf; false after recording the failure in j. */
static bool read_window(stream_job *j, uint8_t *buf, size_t n, uint64_t off)
{
    while (n > 0) {
        const ssize_t got = pread(j->fd, buf, n, (off_t)off);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            const int e = got < 0 ? errno : 0;
            if (atomic_exchange(&j->failed, 1) == 0) {
                j->err_no = e;
                j->err_off = off;
            }
            return false;
        }
        buf += got;
        off += (uint64_t)got;
        n -= (size_t)got;
    }
    return true;
}

/* Rows [r0, r1) through the matmul on thread `part`, window by window. */
static void stream_rows(stream_job *j, int part, int64_t r0, int64_t r1)
{
    float *buf = j->s->buf[part];
    for (int64_t w0 = r0; w0 < r1; w0 += j->window) {
        const int64_t w1 = r1 - w0 < j->window ? r1 : w0 + j->window;
        const uint8_t *wb = j->src + (uint64_t)w0 * j->row_bytes;
        const uint8_t *we = j->src + (uint64_t)w1 * j->row_bytes;
        if (j->fd >= 0) {
            if (!read_window(j, j->s->raw[part], (size_t)(we - wb),
                             j->off + (uint64_t)w0 * j->row_bytes))
                return;
            wb = j->s->raw[part];
        } else if (j->drop) {
            populate(j, wb, we);
        }
        for (int64_t b0 = w0; b0 < w1; b0 += j->block) {
            const int64_t nr = w1 - b0 < j->block ? w1 - b0 : j->block;
            const uint8_t *rows = wb + (uint64_t)(b0 - w0) * j->row_bytes;
            for (int64_t r = 0; r < nr; r++)
                j->fn(rows + (uint64_t)r * j->row_bytes, buf + r * j->n_in, j->nb_row);
            fw_matmul(j->y + b0, j->ys, j->x, j->xs, buf, j->bias ? j->bias + b0 : NULL, j->n_in,
                      nr, j->n_tok, 1, j->prec);
        }
        if (j->fd < 0 && j->drop_each)
            drop(j, j->src + (uint64_t)w0 * j->row_bytes, we);
    }
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One thread's share: a contiguous run of the rows, or (chunk > 0) runs of
 * chunk rows taken in turn until none is left, so a thread that runs slower
 * (a busier core, a lower clock) takes fewer instead of holding up the rest.
 * Its time goes into the stats (busy against the matmul's wall time). */
static void stream_part(void *arg, int part, int n_parts)
{
    stream_job *j = arg;
    const uint64_t t0 = now_ns();
    if (j->chunk <= 0) {
        stream_rows(j, part, j->n_rows * part / n_parts, j->n_rows * (part + 1) / n_parts);
    } else {
        for (;;) {
            const int64_t r0 = (int64_t)atomic_fetch_add(&j->next_chunk, 1) * j->chunk;
            if (r0 >= j->n_rows || atomic_load_explicit(&j->failed, memory_order_relaxed))
                break;
            stream_rows(j, part, r0, j->n_rows - r0 < j->chunk ? j->n_rows : r0 + j->chunk);
        }
    }
    atomic_fetch_add_explicit(&j->busy_ns, now_ns() - t0, memory_order_relaxed);
}

/* Map the first window of j in and count the page faults it takes: the
 * page cache's folio size, which decides between mapping and reading. Tiny
 * tensors say little (read them, decide later). */
static int probe(stream_job *j)
{
    uint64_t bytes = (uint64_t)j->n_rows * j->row_bytes;
    if (bytes > WINDOW_BYTES)
        bytes = WINDOW_BYTES;
    if (bytes < PROBE_MIN)
        return FW_SRC_READ;
    struct rusage a, b;
    int how = FW_SRC_READ;
    if (getrusage(RUSAGE_THREAD, &a) == 0 && populate(j, j->src, j->src + bytes) &&
        getrusage(RUSAGE_THREAD, &b) == 0) {
        const long faults = (b.ru_minflt - a.ru_minflt) + (b.ru_majflt - a.ru_majflt);
        how = (uint64_t)faults * (1u << 20) <= PROBE_FAULTS_PER_MIB * bytes ? FW_SRC_MAP
                                                                          : FW_SRC_READ;
    }
    if (how == FW_SRC_READ)
        drop(j, j->src, j->src + bytes);
    atomic_store(&j->s->source, how);
    return how;
}

/* The descriptor and offset to read t's bytes from: t lies in the model's
 * metadata file (the only one the model holds), which is a real file. */
static bool source_file(const fw_exec *c, const gguf_tensor *t, int *fd, uint64_t *off)
{
    const gguf_file *f = c->s.m ? gguf_model_meta(c->s.m) : NULL;
    if (!f || gguf_file_fd(f) < 0 || !gguf_file_bytes(f))
        return false;
    const uintptr_t base = (uintptr_t)gguf_file_bytes(f), p = (uintptr_t)t->data;
    if (p < base || p - base > gguf_file_size(f) || t->nbytes > gguf_file_size(f) - (p - base))
        return false;
    *fd = gguf_file_fd(f);
    *off = (uint64_t)(p - base);
    return true;
}

int fw_stream_mm(fw_exec *c, double *y, int64_t ys, const double *x, int64_t xs,
                 const gguf_tensor *t, int64_t row0, int64_t n_rows, const float *bias,
                 int64_t n_tok, gguf_error *err)
{
    if (n_rows <= 0 || n_tok <= 0)
        return 0;
    fw_pool *pool;
    int rc = fw_exec_pool(c, &pool, err);
    if (rc)
        return rc;
    fw_stream *s = c->stream;
    stream_job j = {.s = s, .y = y, .ys = ys, .x = x, .xs = xs, .bias = bias, .fd = -1,
                    .n_in = t->ne[0], .n_rows = n_rows, .n_tok = n_tok, .prec = c->s.prec,
                    .drop = c->s.o.drop_pages && c->page > 0, .page = (uintptr_t)c->page};
    atomic_init(&j.failed, 0);
    atomic_init(&j.next_chunk, 0);
    atomic_init(&j.busy_ns, 0);
    const gguf_type_info *ti = gguf_type_get(t->type);
    if ((rc = gguf_dequant_kernel(GGUF_DEQUANT_AUTO, t->type, &j.fn, err)))
        return rc;
    if (gguf_type_row_bytes(t->type, t->ne[0], &j.row_bytes) || t->ne[0] % ti->block_size ||
        j.row_bytes == 0)
        return gguf_fail(err, GGUF_E_BAD_SHAPE, t->file_offset, "%s: bad row", t->name);
    j.nb_row = t->ne[0] / ti->block_size;
    j.src = t->data + (uint64_t)row0 * j.row_bytes;
    /* rows per block: a multiple of 4 (the one-token kernel takes 4 rows) */
    j.block = (int64_t)(n_tok < 4 ? BLOCK_FLOATS_1 : BLOCK_FLOATS) / j.n_in;
    j.block = j.block < 4 ? 4 : j.block & ~(int64_t)3;
    int fd;
    uint64_t off;
    if (j.drop && source_file(c, t, &fd, &off)) {
        int how = atomic_load(&s->source);
        if (how == FW_SRC_AUTO)
            how = probe(&j);
        if (how == FW_SRC_READ) {
            j.fd = fd;
            j.off = off + (uint64_t)row0 * j.row_bytes;
        }
    }
    j.window = (int64_t)((j.fd >= 0 ? READ_BYTES : WINDOW_BYTES) / j.row_bytes);
    j.window = j.window < j.block ? j.block : j.window - j.window % j.block;
    const size_t need = (size_t)(j.block * j.n_in);
    if ((rc = reserve(s, need, j.fd >= 0 ? (size_t)((uint64_t)j.window * j.row_bytes) : 0, err)))
        return rc;

    const double work = (double)n_rows * (double)j.n_in * (double)(n_tok + 1);
    int parts = s->n_threads;
    if (work / PART_WORK < parts)
        parts = work / PART_WORK < 1 ? 1 : (int)(work / PART_WORK);
    if (n_rows < parts)
        parts = (int)n_rows;
    /* Threads take runs of about an eighth of their share in turn, so one
     * on a slower core takes fewer instead of holding up the rest (measured
     * on 16 cores: threads busy 70% -> 82% of a one-token pass's matmuls).
     * With one to three tokens a run is at least 64 KiB of the file, and
     * where the rows are read with pread each thread keeps one contiguous
     * run, whose reads stay large. */
    if (parts > 1 && (n_tok >= 4 || j.fd < 0)) {
        const int64_t least = n_tok >= 4 ? 1 : (int64_t)((64u << 10) / j.row_bytes);
        j.chunk = n_rows / ((int64_t)parts * 8);
        j.chunk = j.chunk < least ? least : j.chunk;
        j.chunk = (j.chunk + j.block - 1) / j.block * j.block;
        if (j.chunk > j.window)
            j.chunk = j.window;
    }

    const uint64_t resident = (uint64_t)parts * need * sizeof(float);
    c->resident += resident;
    if (c->resident > c->st.peak_weight_bytes)
        c->st.peak_weight_bytes = c->resident;
    /* One thread drops each mapped window after it; several drop the whole
     * slice together once all are done: one madvise (one round of TLB
     * shootdowns of the other cores) instead of one per window while the
     * others compute, the slice staying mapped for one matmul. */
    j.drop_each = j.drop && parts == 1;
    const uint64_t t0 = now_ns();
    fw_pool_run(s->pool, parts, stream_part, &j);
    const uint64_t t1 = now_ns();
    if (j.drop && !j.drop_each && j.fd < 0)
        drop(&j, j.src, j.src + (uint64_t)n_rows * j.row_bytes);
    const uint64_t t2 = now_ns();
    c->st.stream_calls++;
    c->st.stream_seconds += (double)(t2 - t0) * 1e-9;
    c->st.stream_busy_seconds += (double)atomic_load(&j.busy_ns) * 1e-9;
    c->st.drop_seconds += (double)(t2 - t1) * 1e-9;
    c->resident -= resident;
    if (atomic_load(&j.failed)) {
        const char *path = gguf_file_path(gguf_model_meta(c->s.m));
        return j.err_no ? gguf_fail_errno(err, GGUF_E_IO, j.err_no, "%s: %s: reading at offset %llu",
                                          path, t->name, (unsigned long long)j.err_off)
                        : gguf_fail(err, GGUF_E_TRUNCATED, j.err_off,
                                    "%s: %s: the file ends at offset %llu (it shrank after it "
                                    "was opened)",
                                    path, t->name, (unsigned long long)j.err_off);
    }
    c->st.weight_bytes += (uint64_t)n_rows * j.row_bytes;
    c->st.dequant_floats += (uint64_t)(n_rows * j.n_in);
    return 0;
}
