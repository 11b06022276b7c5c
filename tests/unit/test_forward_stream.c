/*
 * The forward pass on all cores (forward_pool.c, forward_stream.c):
 *   - the pool runs every part exactly once per job, whatever the number of
 *     parts against threads, over many jobs in a row;
 *   - fw_exec_parallel covers a range exactly once;
 *   - streaming a tensor through the matmul gives the bits of the plain
 *     route (the scalar reference dequantizes the whole tensor, then
 *     fw_matmul on one thread) for block and float types, odd shapes, 1 to 9
 *     tokens, 1 to 8 threads, a bias, a first row inside the tensor, strided
 *     inputs and outputs, both precisions;
 *   - a file-mapped tensor larger than several windows gives the same bits
 *     with its pages dropped, and leaves (almost) none of them mapped, while
 *     the same walk without dropping leaves them all (the control);
 *   - on a real model, the read path (pread from the model's file) and the
 *     mapped path (windows mapped in and dropped) give the same bits; the
 *     read path maps nothing of the file; the probe settles on one of them;
 *     a file that shrinks under the open model gives GGUF_E_TRUNCATED on the
 *     read path.
 * The executor is built by hand (white box) where no model is needed: the
 * stream then uses only its options, statistics and the stream pointer.
 */
#include <check.h>
#include <fcntl.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "forward/forward_exec.h"
#include "forward/forward_stream.h"
#include "gguf/dequant.h"
#include "gguf/model.h"
#include "gguf/types.h"
#include "helper_buf.h"
#include "helper_dequant.h"

/* ------------------------------------------------------------ the pool */

typedef struct count_job {
    atomic_int hits[64];
    atomic_int bad;
} count_job;

static void count_part(void *arg, int part, int n_parts)
{
    count_job *j = arg;
    if (part < 0 || part >= n_parts || part >= 64)
        atomic_fetch_add(&j->bad, 1);
    else
        atomic_fetch_add(&j->hits[part], 1);
}

START_TEST(pool_runs_every_part_once)
{
    static const int threads[] = {1, 2, 4, 7};
    static const int parts[] = {1, 2, 3, 4, 5, 9, 17, 64};
    for (size_t a = 0; a < sizeof threads / sizeof threads[0]; a++) {
        fw_pool *p = NULL;
        ck_assert_int_eq(fw_pool_create(&p, threads[a], NULL), 0);
        ck_assert_int_eq(fw_pool_threads(p), threads[a]);
        for (size_t b = 0; b < sizeof parts / sizeof parts[0]; b++) {
            count_job j;
            memset(&j, 0, sizeof j);
            enum { JOBS = 100 };
            for (int k = 0; k < JOBS; k++)
                fw_pool_run(p, parts[b], count_part, &j);
            ck_assert_int_eq(atomic_load(&j.bad), 0);
            for (int i = 0; i < 64; i++)
                ck_assert_int_eq(atomic_load(&j.hits[i]), i < parts[b] ? JOBS : 0);
        }
        fw_pool_free(p);
    }
    /* no pool: the caller runs the parts */
    count_job j;
    memset(&j, 0, sizeof j);
    fw_pool_run(NULL, 5, count_part, &j);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(atomic_load(&j.hits[i]), 1);
    ck_assert_int_eq(fw_pool_threads(NULL), 1);
    fw_pool_free(NULL);
    ck_assert_int_eq(fw_pool_create(&(fw_pool *){NULL}, 0, NULL), GGUF_E_INVALID);
}
END_TEST

/* A hand-made executor with the fields the stream reads. */
static fw_exec *exec_new(int threads, bool drop, int prec)
{
    fw_exec *c = calloc(1, sizeof *c);
    c->s.o.n_threads = threads;
    c->s.o.drop_pages = drop;
    c->s.prec = prec;
    c->page = sysconf(_SC_PAGESIZE);
    return c;
}

static void exec_free(fw_exec *c)
{
    fw_stream_free(c->stream);
    free(c);
}

typedef struct cover_job {
    atomic_int *seen;
} cover_job;

static void cover_range(void *arg, int64_t b, int64_t e)
{
    const cover_job *j = arg;
    for (int64_t i = b; i < e; i++)
        atomic_fetch_add(&j->seen[i], 1);
}

START_TEST(parallel_covers_once)
{
    static const int64_t ns[] = {0, 1, 5, 1000, 4097};
    static const int64_t mins[] = {0, 1, 100, 5000};
    for (int threads = 1; threads <= 5; threads += 2) {
        fw_exec *c = exec_new(threads, false, GGUF_FWD_F64);
        for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
            for (size_t b = 0; b < sizeof mins / sizeof mins[0]; b++) {
                atomic_int *seen = calloc((size_t)ns[a] + 1, sizeof *seen);
                cover_job j = {seen};
                ck_assert_int_eq(fw_exec_parallel(c, ns[a], mins[b], cover_range, &j, NULL), 0);
                for (int64_t i = 0; i < ns[a]; i++)
                    ck_assert_int_eq(atomic_load(&seen[i]), 1);
                free(seen);
            }
        exec_free(c);
    }
}
END_TEST

/* ------------------------------------------------------------ streaming */

/* Random blocks of `type` with normal F16 scales (random scale bits would
 * make NaN and Inf, which every path handles alike but which would hide a
 * wrong row behind NaN == NaN bits); float types get values in +-2. */
static void fill_tensor(uint32_t type, uint8_t *p, uint64_t n_blocks, uint64_t *st)
{
    const gguf_type_info *ti = gguf_type_get(type);
    const uint64_t bytes = n_blocks * ti->type_size;
    hd_fill(st, p, bytes);
    if (type == GGUF_TYPE_F32) {
        for (uint64_t i = 0; i < n_blocks; i++) {
            const float f = (float)((int)(hd_rand(st) % 4001) - 2000) / 1000.0f;
            memcpy(p + 4 * i, &f, 4);
        }
        return;
    }
    if (type == GGUF_TYPE_F16) {
        for (uint64_t i = 0; i < n_blocks; i++) { /* exponent 0x0C..0x10: about 0.03..2 */
            const uint16_t h = (uint16_t)((hd_rand(st) & 0x83FF) | ((0x0C + hd_rand(st) % 5) << 10));
            memcpy(p + 2 * i, &h, 2);
        }
        return;
    }
    size_t off[2];
    const int n_off = hd_f16_scale_offsets(type, off);
    for (uint64_t b = 0; b < n_blocks; b++)
        for (int k = 0; k < n_off; k++) {
            const uint16_t h = (uint16_t)(0x2000 | (hd_rand(st) & 0x3FF)); /* ~0.008..0.016 */
            p[b * ti->type_size + off[k]] = (uint8_t)h;
            p[b * ti->type_size + off[k] + 1] = (uint8_t)(h >> 8);
        }
}

/* y (rows ys apart) of the plain route: the scalar reference over the rows,
 * then fw_matmul on one thread. */
static void reference(const gguf_tensor *t, int64_t row0, int64_t n_rows, const double *x,
                      int64_t xs, const float *bias, int64_t n_tok, int prec, double *y,
                      int64_t ys)
{
    uint64_t row_bytes;
    ck_assert_int_eq(gguf_type_row_bytes(t->type, t->ne[0], &row_bytes), 0);
    float *w = malloc(sizeof(float) * (size_t)(n_rows * t->ne[0]));
    const gguf_dequant_opts o = {.path = GGUF_DEQUANT_SCALAR, .n_threads = 1};
    ck_assert_int_eq(gguf_dequant_rows(t->type, t->data + (uint64_t)row0 * row_bytes, 0, w,
                                       t->ne[0], n_rows, &o, NULL),
                     0);
    fw_matmul(y, ys, x, xs, w, bias, t->ne[0], n_rows, n_tok, 1, prec);
    free(w);
}

/* Stream rows [row0, row0 + n_rows) of t and compare with the reference,
 * which reads ref_data (the same bytes) when not NULL, so that it maps none
 * of a file mapping's pages. */
static void check_stream(fw_exec *c, const gguf_tensor *t, const uint8_t *ref_data, int64_t row0,
                         int64_t n_rows, int64_t n_tok, bool with_bias, const char *what)
{
    const int64_t n_in = t->ne[0], xs = n_in + 3, ys = n_rows + 5;
    double *x = malloc(sizeof(double) * (size_t)(xs * n_tok));
    double *want = malloc(sizeof(double) * (size_t)(ys * n_tok));
    double *got = malloc(sizeof(double) * (size_t)(ys * n_tok));
    float *bias = NULL;
    for (int64_t i = 0; i < xs * n_tok; i++)
        x[i] = sin((double)i * 0.37) * 1.5;
    if (with_bias) {
        bias = malloc(sizeof(float) * (size_t)n_rows);
        for (int64_t o = 0; o < n_rows; o++)
            bias[o] = (float)cos((double)o);
    }
    /* the gaps between rows must be left alone */
    for (int64_t i = 0; i < ys * n_tok; i++)
        want[i] = got[i] = -7.25;
    gguf_tensor rt = *t;
    if (ref_data)
        rt.data = ref_data;
    reference(&rt, row0, n_rows, x, xs, bias, n_tok, c->s.prec, want, ys);
    const uint64_t bytes0 = c->st.weight_bytes, floats0 = c->st.dequant_floats;
    ck_assert_int_eq(fw_stream_mm(c, got, ys, x, xs, t, row0, n_rows, bias, n_tok, NULL), 0);
    for (int64_t i = 0; i < ys * n_tok; i++)
        if (memcmp(&want[i], &got[i], sizeof(double)) != 0)
            ck_abort_msg("%s: %s, %lld rows from %lld, %lld tokens, %d threads: y[%lld] = %.17g, "
                         "want %.17g",
                         what, gguf_type_name(t->type), (long long)n_rows, (long long)row0,
                         (long long)n_tok, c->s.o.n_threads, (long long)i, got[i], want[i]);
    uint64_t row_bytes;
    gguf_type_row_bytes(t->type, n_in, &row_bytes);
    ck_assert_uint_eq(c->st.weight_bytes - bytes0, (uint64_t)n_rows * row_bytes);
    ck_assert_uint_eq(c->st.dequant_floats - floats0, (uint64_t)(n_rows * n_in));
    ck_assert_uint_eq(c->resident, 0);
    free(x);
    free(want);
    free(got);
    free(bias);
}

START_TEST(stream_same_bits)
{
    static const uint32_t types[] = {GGUF_TYPE_Q8_0, GGUF_TYPE_Q4_K, GGUF_TYPE_F16,
                                     GGUF_TYPE_F32,  GGUF_TYPE_Q6_K, GGUF_TYPE_IQ4_XS,
                                     GGUF_TYPE_Q4_0, GGUF_TYPE_Q2_K};
    const uint32_t type = types[_i];
    const gguf_type_info *ti = gguf_type_get(type);
    /* n_in: whole blocks; 3 blocks of 256 or 97 of 32 leave a tail past a
     * multiple of 4 only for F32 (n_in 301) */
    const int64_t n_in = type == GGUF_TYPE_F32 ? 301 : ti->block_size * (ti->block_size == 256 ? 3 : 13);
    const int64_t rows = 301;
    uint64_t row_bytes;
    ck_assert_int_eq(gguf_type_row_bytes(type, n_in, &row_bytes), 0);
    uint8_t *data = malloc((size_t)(row_bytes * rows));
    uint64_t st = 99 + type;
    fill_tensor(type, data, (uint64_t)rows * row_bytes / ti->type_size, &st);
    gguf_tensor t = {.name = "w", .type = type, .n_dims = 2, .ne = {n_in, rows, 1, 1},
                     .data = data};
    static const int threads[] = {1, 2, 3, 8};
    static const int64_t toks[] = {1, 2, 3, 4, 5, 9};
    for (size_t a = 0; a < sizeof threads / sizeof threads[0]; a++)
        for (int prec = GGUF_FWD_F32; prec <= GGUF_FWD_F64; prec++) {
            fw_exec *c = exec_new(threads[a], false, prec);
            for (size_t b = 0; b < sizeof toks / sizeof toks[0]; b++) {
                check_stream(c, &t, NULL, 0, rows, toks[b], b % 2 == 1, "whole");
                check_stream(c, &t, NULL, 17, 5, toks[b], b % 2 == 0, "rows inside");
                check_stream(c, &t, NULL, 300, 1, toks[b], false, "last row");
            }
            ck_assert(c->st.peak_weight_bytes > 0);
            exec_free(c);
        }
    free(data);
}
END_TEST

/* Rss (bytes) of the mapping that starts at addr, from /proc/self/smaps. */
static long mapping_rss(const void *addr)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    ck_assert_ptr_nonnull(f);
    char line[512];
    bool in = false;
    long kib = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) { /* a mapping's first line */
            in = lo == (unsigned long)(uintptr_t)addr;
            continue;
        }
        if (in && sscanf(line, "Rss: %ld kB", &kib) == 1)
            break;
    }
    fclose(f);
    ck_assert_msg(kib >= 0, "mapping not found in /proc/self/smaps");
    return kib * 1024;
}

START_TEST(stream_file_windows_dropped)
{
    /* 2112 rows of 4096 Q8_0: 9.2 MB, several 4 MiB windows per thread */
    const int64_t n_in = 4096, rows = 2112;
    uint64_t row_bytes;
    gguf_type_row_bytes(GGUF_TYPE_Q8_0, n_in, &row_bytes);
    const size_t bytes = (size_t)(row_bytes * rows);
    uint8_t *data = malloc(bytes);
    uint64_t st = 4242;
    fill_tensor(GGUF_TYPE_Q8_0, data, bytes / 34, &st);
    char *dir = th_mkdtemp();
    char path[512];
    snprintf(path, sizeof path, "%s/w.bin", dir);
    ck_assert_int_eq(th_write_file(path, data, bytes), 0);
    const int fd = open(path, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    const uint8_t *map = mmap(NULL, bytes, PROT_READ, MAP_SHARED, fd, 0);
    ck_assert(map != MAP_FAILED);
    gguf_tensor t = {.name = "w", .type = GGUF_TYPE_Q8_0, .n_dims = 2, .ne = {n_in, rows, 1, 1},
                     .data = map};
    for (int threads = 1; threads <= 3; threads += 2) {
        fw_exec *c = exec_new(threads, true, GGUF_FWD_F32);
        /* what stays is at most the kernel's fault-around at window edges */
        check_stream(c, &t, data, 0, rows, 1, false, "file, dropped");
        ck_assert_msg(mapping_rss(map) <= 1 << 20, "%ld bytes still mapped", mapping_rss(map));
        check_stream(c, &t, data, 33, 1000, 5, true, "file rows, dropped");
        ck_assert_msg(mapping_rss(map) <= 1 << 20, "%ld bytes still mapped", mapping_rss(map));
        exec_free(c);
    }
    /* the control: without dropping, the walk leaves the file mapped */
    fw_exec *c = exec_new(2, false, GGUF_FWD_F32);
    check_stream(c, &t, data, 0, rows, 1, false, "file, kept");
    ck_assert_msg(mapping_rss(map) >= (long)bytes - 65536, "only %ld of %zu bytes mapped",
                  mapping_rss(map), bytes);
    exec_free(c);
    munmap((void *)map, bytes);
    close(fd);
    th_rmdir(dir);
    free(dir);
    free(data);
}
END_TEST

/* ------------------------------------------------------------ the read path */

/* A one-block llama from gguf-gen (GGUFKIT_GEN), big enough that its FFN
 * matrices span many read windows; the executor made by fw_exec_create. */
typedef struct real_model {
    char *dir;
    char path[512];
    gguf_set *set;
    gguf_model *m;
} real_model;

static void real_open(real_model *r)
{
    const char *gen = getenv("GGUFKIT_GEN");
    ck_assert_msg(gen && access(gen, X_OK) == 0, "GGUFKIT_GEN (gguf-gen) is not set or built");
    r->dir = th_mkdtemp();
    snprintf(r->path, sizeof r->path, "%s/m.gguf", r->dir);
    char cmd[1200];
    snprintf(cmd, sizeof cmd,
             "'%s' model --arch llama --layers 1 --embd 1024 --ff 4096 --heads 8 --kv-heads 4 "
             "--head-dim 128 --vocab 512 --type Q8_0 --no-sync --force -q '%s'",
             gen, r->path);
    ck_assert_int_eq(system(cmd), 0);
    gguf_error err;
    ck_assert_int_eq(gguf_set_open(&r->set, r->path, NULL, &err), 0);
    ck_assert_msg(gguf_model_open(&r->m, r->set, &err) == 0, "%s", err.message);
}

static void real_close(real_model *r)
{
    gguf_model_free(r->m);
    gguf_set_free(r->set);
    th_rmdir(r->dir);
    free(r->dir);
}

static fw_exec *real_exec(const real_model *r, int threads, bool drop, int source)
{
    gguf_fwd_opts o = {0};
    o.n_threads = threads;
    o.drop_pages = drop;
    fw_exec *c = NULL;
    gguf_error err;
    ck_assert_msg(fw_exec_create(&c, r->m, NULL, &o, &err) == 0, "%s", err.message);
    fw_stream_set_source(c->stream, source);
    return c;
}

START_TEST(read_path_same_bits)
{
    real_model r;
    real_open(&r);
    const gguf_tensor *gate = gguf_model_get(r.m, 0, GGUF_ROLE_FFN_GATE);
    const gguf_tensor *down = gguf_model_get(r.m, 0, GGUF_ROLE_FFN_DOWN);
    ck_assert_ptr_nonnull(gate);
    ck_assert_ptr_nonnull(down);
    /* the reference reads a private copy, so the mapping is never touched */
    uint8_t *gcopy = malloc(gate->nbytes), *dcopy = malloc(down->nbytes);
    memcpy(gcopy, gate->data, gate->nbytes);
    memcpy(dcopy, down->data, down->nbytes);
    madvise((void *)((uintptr_t)gguf_file_bytes(gguf_model_meta(r.m)) & ~(uintptr_t)4095),
            gguf_file_size(gguf_model_meta(r.m)), MADV_DONTNEED);
    const uint8_t *map = gguf_file_bytes(gguf_model_meta(r.m));
    for (int threads = 1; threads <= 4; threads += 3) {
        fw_exec *c = real_exec(&r, threads, true, FW_SRC_READ);
        check_stream(c, gate, gcopy, 0, gate->ne[1], 1, false, "read, gate");
        check_stream(c, gate, gcopy, 301, 1777, 6, true, "read, gate rows");
        check_stream(c, down, dcopy, 0, down->ne[1], 4, false, "read, down");
        ck_assert_int_eq(fw_stream_source(c->stream), FW_SRC_READ);
        fw_exec_free(c);
    }
    /* nothing of the file was mapped by the read path */
    ck_assert_msg(mapping_rss(map) <= 64 * 1024, "%ld bytes of the model mapped",
                  mapping_rss(map));
    /* mapped windows, dropped: the same bits, little left mapped */
    fw_exec *c = real_exec(&r, 3, true, FW_SRC_MAP);
    check_stream(c, gate, gcopy, 301, 1777, 6, true, "mapped and dropped, gate rows");
    check_stream(c, down, dcopy, 0, down->ne[1], 4, false, "mapped and dropped, down");
    ck_assert_msg(mapping_rss(map) <= 1 << 20, "%ld bytes of the model mapped", mapping_rss(map));
    fw_exec_free(c);
    /* the probe settles on one of the two, with the same bits */
    c = real_exec(&r, 2, true, FW_SRC_AUTO);
    check_stream(c, down, dcopy, 0, down->ne[1], 2, false, "probed, down");
    ck_assert(fw_stream_source(c->stream) == FW_SRC_MAP ||
              fw_stream_source(c->stream) == FW_SRC_READ);
    fw_exec_free(c);
    /* the mapping with pages kept */
    c = real_exec(&r, 3, false, FW_SRC_AUTO);
    check_stream(c, gate, gcopy, 301, 1777, 6, true, "mapped, gate rows");
    fw_exec_free(c);
    free(gcopy);
    free(dcopy);
    real_close(&r);
}
END_TEST

/* The file shrinks under an open model: the read path says so with
 * GGUF_E_TRUNCATED (the mapping would have raised SIGBUS). */
START_TEST(read_path_file_shrank)
{
    real_model r;
    real_open(&r);
    const gguf_tensor *gate = gguf_model_get(r.m, 0, GGUF_ROLE_FFN_GATE);
    ck_assert_int_eq(truncate(r.path, (off_t)(gate->file_offset + gate->nbytes / 2)), 0);
    fw_exec *c = real_exec(&r, 2, true, FW_SRC_READ);
    const int64_t n_in = gate->ne[0], rows = gate->ne[1];
    double *x = calloc((size_t)n_in, sizeof(double)), *y = calloc((size_t)rows, sizeof(double));
    gguf_error err;
    ck_assert_int_eq(fw_stream_mm(c, y, rows, x, n_in, gate, 0, rows, NULL, 1, &err),
                     GGUF_E_TRUNCATED);
    ck_assert_msg(strstr(err.message, "m.gguf") && strstr(err.message, gate->name) &&
                      strstr(err.message, "shrank"),
                  "%s", err.message);
    ck_assert_uint_eq(c->resident, 0);
    fw_exec_free(c);
    free(x);
    free(y);
    real_close(&r);
}
END_TEST

static Suite *stream_suite(void)
{
    Suite *s = suite_create("forward_stream");
    TCase *tc = tcase_create("stream");
    tcase_add_test(tc, pool_runs_every_part_once);
    tcase_add_test(tc, parallel_covers_once);
    tcase_add_loop_test(tc, stream_same_bits, 0, 8);
    tcase_add_test(tc, stream_file_windows_dropped);
    tcase_add_test(tc, read_path_same_bits);
    tcase_add_test(tc, read_path_file_shrank);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(stream_suite());
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
