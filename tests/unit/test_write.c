/* Writer round trips, atomic output, hole-preserving copies, and split-set opening. */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/file.h"
#include "gguf/hash.h"
#include "gguf/write.h"
#include "helper_buf.h"

static char *dir;
static char path[4096];

static void setup(void) { dir = th_mkdtemp(); }
static void teardown(void)
{
    th_rmdir(dir);
    free(dir);
}

static const char *p(const char *name)
{
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

static int count_files(void)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", dir);
    FILE *f = popen(cmd, "r");
    int n = -1;
    if (fscanf(f, "%d", &n) != 1)
        n = -1;
    pclose(f);
    return n;
}

static const gguf_writer_opts fast = {.no_sync = true};

START_TEST(round_trip_all_types)
{
    gguf_writer *w;
    gguf_error err;
    ck_assert_int_eq(gguf_writer_create(&w, p("rt.gguf"), &fast, &err), 0);
    ck_assert_int_eq(gguf_writer_add_str(w, "general.architecture", "llama", &err), 0);
    ck_assert_int_eq(gguf_writer_add_u32(w, "u32", 7, &err), 0);
    ck_assert_int_eq(gguf_writer_add_i32(w, "i32", -7, &err), 0);
    ck_assert_int_eq(gguf_writer_add_u64(w, "u64", 1ull << 40, &err), 0);
    ck_assert_int_eq(gguf_writer_add_f32(w, "f32", 0.25f, &err), 0);
    ck_assert_int_eq(gguf_writer_add_bool(w, "bool", true, &err), 0);
    int16_t arr[3] = {-1, 2, -3};
    ck_assert_int_eq(gguf_writer_add_arr(w, "arr.i16", GGUF_VALUE_INT16, arr, 3, &err), 0);
    const char *strs[] = {"a", "", "ccc"};
    ck_assert_int_eq(gguf_writer_add_arr_str(w, "arr.str", strs, 3, &err), 0);
    /* nested: [[1,2],[3]] of u8 */
    uint8_t a0[2] = {1, 2}, a1[1] = {3};
    gguf_value inner[2];
    memset(inner, 0, sizeof inner);
    inner[0].type = inner[1].type = GGUF_VALUE_ARRAY;
    inner[0].v.arr.type = inner[1].v.arr.type = GGUF_VALUE_UINT8;
    inner[0].v.arr.n = 2;
    inner[0].v.arr.raw = a0;
    inner[1].v.arr.n = 1;
    inner[1].v.arr.raw = a1;
    gguf_value outer;
    memset(&outer, 0, sizeof outer);
    outer.type = GGUF_VALUE_ARRAY;
    outer.v.arr.type = GGUF_VALUE_ARRAY;
    outer.v.arr.n = 2;
    outer.v.arr.vals = inner;
    ck_assert_int_eq(gguf_writer_add_kv(w, "arr.nested", &outer, &err), 0);
    ck_assert_int_eq(gguf_writer_add_u32(w, "u32", 8, &err), GGUF_E_DUPLICATE);

    int64_t ne_a[2] = {3, 2}, ne_b[1] = {64}, ne_c[1] = {0};
    ck_assert_int_eq(gguf_writer_add_tensor(w, "a", GGUF_TYPE_F32, 2, ne_a, &err), 0);
    ck_assert_int_eq(gguf_writer_add_tensor(w, "empty", GGUF_TYPE_F32, 1, ne_c, &err), 0);
    ck_assert_int_eq(gguf_writer_add_tensor(w, "b", GGUF_TYPE_Q8_0, 1, ne_b, &err), 0);
    ck_assert_int_eq(gguf_writer_add_tensor(w, "a", GGUF_TYPE_F32, 2, ne_a, &err),
                     GGUF_E_DUPLICATE);
    int64_t bad[1] = {33};
    ck_assert_int_eq(gguf_writer_add_tensor(w, "c", GGUF_TYPE_Q8_0, 1, bad, &err),
                     GGUF_E_BAD_SHAPE);
    float av[6] = {1, 2, 3, 4, 5, 6};
    ck_assert_int_eq(gguf_writer_write(w, av, 10, &err), 0); /* any chunking */
    ck_assert_int_eq(gguf_writer_write(w, (uint8_t *)av + 10, 14, &err), 0);
    uint8_t q[68];
    for (int i = 0; i < 68; i++)
        q[i] = (uint8_t)i;
    ck_assert_int_eq(gguf_writer_add_u32(w, "late", 1, &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_writer_write(w, q, 68, &err), 0);
    ck_assert_int_eq(gguf_writer_write(w, q, 1, &err), GGUF_E_INVALID);
    uint64_t expect_size = gguf_writer_total_size(w);
    ck_assert_int_eq(gguf_writer_finish(w, &err), 0);
    gguf_writer_free(w);
    ck_assert_int_eq(count_files(), 1); /* no temporary left */

    gguf_file *f;
    ck_assert_int_eq(gguf_file_open(&f, p("rt.gguf"), NULL, &err), 0);
    ck_assert_int_eq(gguf_file_size(f), expect_size);
    ck_assert_int_eq(gguf_file_kv_count(f), 9);
    int64_t i64;
    ck_assert_int_eq(gguf_get_i64(f, "i32", &i64, NULL), 0);
    ck_assert_int_eq(i64, -7);
    const gguf_value *v;
    ck_assert_int_eq(gguf_get_arr(f, "arr.nested", &v, NULL), 0);
    gguf_value in1 = gguf_value_elem(v, 1);
    ck_assert_int_eq(gguf_value_elem(&in1, 0).v.u8, 3);
    ck_assert_int_eq(gguf_get_arr(f, "arr.str", &v, NULL), 0);
    ck_assert(gguf_str_eq(gguf_value_elem(v, 2).v.str, "ccc"));
    ck_assert(gguf_str_eq(gguf_value_elem(v, 1).v.str, ""));
    const gguf_tensor *t = gguf_file_tensor_find(f, "b");
    ck_assert_int_eq(t->nbytes, 68);
    ck_assert(memcmp(t->data, q, 68) == 0);
    t = gguf_file_tensor_find(f, "a");
    ck_assert(memcmp(t->data, av, 24) == 0);
    ck_assert_int_eq(t->file_offset % 32, 0);
    gguf_file_free(f);
}
END_TEST

START_TEST(refuses_existing_and_cleans_up)
{
    gguf_error err;
    ck_assert_int_eq(th_write_file(p("x.gguf"), "keep", 4), 0);
    gguf_writer *w;
    ck_assert_int_eq(gguf_writer_create(&w, p("x.gguf"), &fast, &err), GGUF_E_EXISTS);
    ck_assert(strstr(err.message, "x.gguf") != NULL);
    /* Abandoned writer: temporary removed, nothing else created. */
    ck_assert_int_eq(gguf_writer_create(&w, p("y.gguf"), &fast, &err), 0);
    int64_t ne[1] = {8};
    gguf_writer_add_tensor(w, "t", GGUF_TYPE_F32, 1, ne, &err);
    float z[4] = {0};
    ck_assert_int_eq(gguf_writer_write(w, z, 16, &err), 0);
    ck_assert_int_eq(count_files(), 2);
    /* Incomplete data: finish refuses. */
    ck_assert_int_eq(gguf_writer_finish(w, &err), GGUF_E_INVALID);
    ck_assert(strstr(err.message, "only 16 of 32 bytes") != NULL);
    gguf_writer_free(w);
    ck_assert_int_eq(count_files(), 1);
    /* Overwrite on request. */
    gguf_writer_opts o = fast;
    o.overwrite = true;
    ck_assert_int_eq(gguf_writer_create(&w, p("x.gguf"), &o, &err), 0);
    ck_assert_int_eq(gguf_writer_finish(w, &err), 0);
    gguf_writer_free(w);
    gguf_file *f;
    ck_assert_int_eq(gguf_file_open(&f, p("x.gguf"), NULL, &err), 0);
    gguf_file_free(f);
}
END_TEST

START_TEST(cancel_flag)
{
    volatile sig_atomic_t cancel = 0;
    gguf_writer_opts o = fast;
    o.cancel = &cancel;
    gguf_writer *w;
    gguf_error err;
    ck_assert_int_eq(gguf_writer_create(&w, p("c.gguf"), &o, &err), 0);
    int64_t ne[1] = {1024};
    gguf_writer_add_tensor(w, "t", GGUF_TYPE_F32, 1, ne, &err);
    float z[256] = {0};
    ck_assert_int_eq(gguf_writer_write(w, z, sizeof z, &err), 0);
    cancel = 1;
    ck_assert_int_eq(gguf_writer_write(w, z, sizeof z, &err), GGUF_E_INTERRUPTED);
    gguf_writer_free(w);
    ck_assert_int_eq(count_files(), 0);
}
END_TEST

START_TEST(copy_fd_keeps_holes)
{
    /* A sparse 64 MiB source with 4 KiB of data in the middle. */
    int fd = open(p("src.bin"), O_RDWR | O_CREAT, 0644);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, 64 << 20), 0);
    char data[4096];
    memset(data, 0x5a, sizeof data);
    ck_assert_int_eq(pwrite(fd, data, sizeof data, 32 << 20), (ssize_t)sizeof data);
    gguf_writer *w;
    gguf_error err;
    ck_assert_int_eq(gguf_writer_create(&w, p("sparse.gguf"), &fast, &err), 0);
    int64_t ne[1] = {16 << 20};
    gguf_writer_add_tensor(w, "big", GGUF_TYPE_F32, 1, ne, &err);
    ck_assert_int_eq(gguf_writer_copy_fd(w, fd, 0, 64 << 20, &err), 0);
    ck_assert_int_eq(gguf_writer_finish(w, &err), 0);
    gguf_writer_free(w);
    close(fd);
    struct stat st;
    ck_assert_int_eq(stat(p("sparse.gguf"), &st), 0);
    ck_assert_int_gt(st.st_size, 64 << 20);
    ck_assert_msg((long long)st.st_blocks * 512 < (8ll << 20), "output not sparse: %lld bytes",
                  (long long)st.st_blocks * 512);
    gguf_file *f;
    ck_assert_int_eq(gguf_file_open(&f, p("sparse.gguf"), NULL, &err), 0);
    const gguf_tensor *t = gguf_file_tensor_at(f, 0);
    ck_assert_int_eq(t->data[32 << 20], 0x5a);
    ck_assert_int_eq(t->data[(32 << 20) - 1], 0);
    ck_assert_int_eq(t->data[(64 << 20) - 1], 0);
    gguf_file_free(f);
}
END_TEST

/* Explicit offsets: gaps between tensors (zeros, a hole when large), refused when
 * unaligned or overlapping; gguf_file_open reads the offsets back. */
START_TEST(explicit_offsets)
{
    gguf_writer *w;
    gguf_error err;
    ck_assert_int_eq(gguf_writer_create(&w, p("gaps.gguf"), &fast, &err), 0);
    int64_t ne[1] = {8}; /* 32 bytes of F32 */
    int64_t ne_q[1] = {32}; /* 34 bytes of Q8_0: padded to 64 */
    ck_assert_int_eq(gguf_writer_add_tensor_at(w, "a", GGUF_TYPE_Q8_0, 1, ne_q, 64, &err), 0);
    /* before the padded end of a (128), or not a multiple of 32: refused */
    ck_assert_int_eq(gguf_writer_add_tensor_at(w, "b", GGUF_TYPE_F32, 1, ne, 96, &err),
                     GGUF_E_BAD_OFFSET);
    ck_assert_int_eq(gguf_writer_add_tensor_at(w, "b", GGUF_TYPE_F32, 1, ne, 144, &err),
                     GGUF_E_BAD_OFFSET);
    ck_assert_ptr_nonnull(strstr(err.message, "tensor 'b'"));
    ck_assert_int_eq(gguf_writer_add_tensor_at(w, "b", GGUF_TYPE_F32, 1, ne, 128, &err), 0);
    ck_assert_int_eq(gguf_writer_add_tensor_at(w, "c", GGUF_TYPE_F32, 1, ne, 8 << 20, &err), 0);
    ck_assert_int_eq(gguf_writer_add_tensor(w, "d", GGUF_TYPE_F32, 1, ne, &err), 0);
    uint8_t q[34], f[32];
    memset(q, 0x11, sizeof q);
    memset(f, 0x22, sizeof f);
    ck_assert_int_eq(gguf_writer_write(w, q, 34, &err), 0);
    ck_assert_int_eq(gguf_writer_write(w, f, 32, &err), 0);
    ck_assert_int_eq(gguf_writer_write(w, f, 32, &err), 0);
    ck_assert_int_eq(gguf_writer_write(w, f, 32, &err), 0);
    uint64_t want = gguf_writer_total_size(w), data = gguf_writer_data_offset(w);
    ck_assert_uint_eq(want, data + (8 << 20) + 64);
    ck_assert_int_eq(gguf_writer_finish(w, &err), 0);
    gguf_writer_free(w);
    struct stat st;
    ck_assert_int_eq(stat(p("gaps.gguf"), &st), 0);
    ck_assert_uint_eq((uint64_t)st.st_size, want);
    ck_assert_msg((long long)st.st_blocks * 512 < (1 << 20), "the 8 MiB gap is not a hole");
    gguf_file *gf;
    ck_assert_int_eq(gguf_file_open(&gf, p("gaps.gguf"), NULL, &err), 0);
    const uint64_t offs[4] = {64, 128, 8 << 20, (8 << 20) + 32};
    for (int i = 0; i < 4; i++)
        ck_assert_uint_eq(gguf_file_tensor_at(gf, i)->offset, offs[i]);
    ck_assert(memcmp(gguf_file_tensor_at(gf, 0)->data, q, 34) == 0);
    ck_assert(memcmp(gguf_file_tensor_at(gf, 2)->data, f, 32) == 0);
    const uint8_t *base = gguf_file_tensor_at(gf, 0)->data - 64;
    for (uint64_t k = 0; k < 64; k++) /* the gap before a, and a's padding */
        ck_assert_uint_eq(base[k] | base[64 + 34 + (k % 30)], 0);
    for (uint64_t k = 160; k < (8 << 20); k += 4093) /* the hole */
        ck_assert_uint_eq(base[k], 0);
    gguf_file_free(gf);
}
END_TEST

/* A source file holding tensors a, b, c with their padding: copy_range moves them in one
 * call (or in pieces that end anywhere, in padding too) and the file equals one written
 * tensor by tensor; ranges out of order are refused. */
static void write_abc(gguf_writer *w, gguf_error *err)
{
    int64_t ne_q[1] = {64}, ne_f[1] = {5}, ne_z[1] = {0};
    ck_assert_int_eq(gguf_writer_add_tensor(w, "a", GGUF_TYPE_Q8_0, 1, ne_q, err), 0); /* 68 */
    ck_assert_int_eq(gguf_writer_add_tensor(w, "z", GGUF_TYPE_F32, 1, ne_z, err), 0);  /* 0 */
    ck_assert_int_eq(gguf_writer_add_tensor(w, "b", GGUF_TYPE_F32, 1, ne_f, err), 0);  /* 20 */
    ck_assert_int_eq(gguf_writer_add_tensor(w, "c", GGUF_TYPE_Q8_0, 1, ne_q, err), 0); /* 68 */
}

START_TEST(copy_range_runs)
{
    gguf_writer *w;
    gguf_error err;
    uint8_t a[68], b[20], c[68];
    for (int i = 0; i < 68; i++) {
        a[i] = (uint8_t)(i + 1);
        c[i] = (uint8_t)(200 - i);
    }
    memset(b, 0x77, sizeof b);
    ck_assert_int_eq(gguf_writer_create(&w, p("ref.gguf"), &fast, &err), 0);
    write_abc(w, &err);
    ck_assert_int_eq(gguf_writer_write(w, a, 68, &err), 0);
    ck_assert_int_eq(gguf_writer_write(w, b, 20, &err), 0);
    ck_assert_int_eq(gguf_writer_write(w, c, 68, &err), 0);
    ck_assert_int_eq(gguf_writer_finish(w, &err), 0);
    gguf_writer_free(w);
    gguf_file *ref;
    ck_assert_int_eq(gguf_file_open(&ref, p("ref.gguf"), NULL, &err), 0);
    const gguf_tensor *ta = gguf_file_tensor_at(ref, 0), *tc = gguf_file_tensor_at(ref, 3);
    const uint64_t in0 = ta->file_offset, len = tc->file_offset + tc->nbytes - in0;
    int fd = open(p("ref.gguf"), O_RDONLY);
    ck_assert_int_ge(fd, 0);

    /* end of each piece: one run; [0, 70) ends in a's padding and [70, 100) inside b;
     * [0, 96) ends at the start of b */
    const uint64_t cuts[][4] = {{len, 0, 0, 0}, {70, 100, len, 0}, {96, len, 0, 0}};
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(gguf_writer_create(&w, p("cp.gguf"), &fast, &err), 0);
        write_abc(w, &err);
        uint64_t at = 0;
        for (int i = 0; i < 4 && cuts[k][i]; i++) {
            ck_assert_int_eq(gguf_writer_copy_range(w, fd, in0 + at, at, cuts[k][i] - at, &err), 0);
            at = cuts[k][i];
        }
        if (k == 0) { /* a whole run; nothing more may be written */
            ck_assert_int_eq(gguf_writer_write(w, a, 1, &err), GGUF_E_INVALID);
        }
        ck_assert_int_eq(gguf_writer_finish(w, &err), 0);
        gguf_writer_free(w);
        char cmd[9000];
        snprintf(cmd, sizeof cmd, "cmp -s '%s/ref.gguf' '%s/cp.gguf'", dir, dir);
        ck_assert_msg(system(cmd) == 0, "pieces %d: the copy differs from the reference", k);
        unlink(p("cp.gguf"));
    }

    /* a run of a, then b and c written by hand */
    ck_assert_int_eq(gguf_writer_create(&w, p("mix.gguf"), &fast, &err), 0);
    write_abc(w, &err);
    ck_assert_int_eq(gguf_writer_copy_range(w, fd, in0, 0, 68, &err), 0);
    ck_assert_int_eq(gguf_writer_write(w, b, 20, &err), 0);
    ck_assert_int_eq(gguf_writer_copy_fd(w, fd, tc->file_offset, 68, &err), 0);
    ck_assert_int_eq(gguf_writer_finish(w, &err), 0);
    gguf_writer_free(w);
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "cmp -s '%s/ref.gguf' '%s/mix.gguf'", dir, dir);
    ck_assert(system(cmd) == 0);

    /* out of order: skipping bytes of a tensor, going back, past the data */
    ck_assert_int_eq(gguf_writer_create(&w, p("bad.gguf"), &fast, &err), 0);
    write_abc(w, &err);
    ck_assert_int_eq(gguf_writer_copy_range(w, fd, in0, 4, 10, &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_writer_copy_range(w, fd, in0, 0, 10, &err), 0);
    ck_assert_int_eq(gguf_writer_copy_range(w, fd, in0 + 12, 12, 10, &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_writer_copy_range(w, fd, in0, 0, 10, &err), GGUF_E_INVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "does not continue"));
    ck_assert_int_eq(gguf_writer_copy_range(w, fd, in0 + 10, 10, len + 40, &err), /* 234 > 224 */
                     GGUF_E_INVALID);
    gguf_writer_free(w);
    close(fd);
    gguf_file_free(ref);
}
END_TEST

/* Writes part i of n of a split set with the given split keys; align 0 = no alignment key. */
static void write_part_aligned(const char *name, int no, int count, int total,
                               const char *tensor, uint32_t version, uint32_t align)
{
    gguf_writer *w;
    gguf_error err;
    gguf_writer_opts o = fast;
    o.gguf_version = version;
    ck_assert_int_eq(gguf_writer_create(&w, p(name), &o, &err), 0);
    if (align)
        ck_assert_int_eq(gguf_writer_add_u32(w, GGUF_KEY_ALIGNMENT, align, &err), 0);
    uint16_t n16 = (uint16_t)no, c16 = (uint16_t)count;
    gguf_value v;
    memset(&v, 0, sizeof v);
    v.type = GGUF_VALUE_UINT16;
    v.v.u16 = n16;
    if (no >= 0)
        gguf_writer_add_kv(w, "split.no", &v, &err);
    v.v.u16 = c16;
    if (count >= 0)
        gguf_writer_add_kv(w, "split.count", &v, &err);
    if (total >= 0)
        gguf_writer_add_i32(w, "split.tensors.count", total, &err);
    int64_t ne[1] = {8};
    gguf_writer_add_tensor(w, tensor, GGUF_TYPE_F32, 1, ne, &err);
    float z[8] = {(float)no};
    gguf_writer_write(w, z, sizeof z, &err);
    ck_assert_int_eq(gguf_writer_finish(w, &err), 0);
    gguf_writer_free(w);
}

static void write_part(const char *name, int no, int count, int total, const char *tensor,
                       uint32_t version)
{
    write_part_aligned(name, no, count, total, tensor, version, 0);
}

static int open_set(const char *name, gguf_error *err)
{
    gguf_set *s = NULL;
    int rc = gguf_set_open(&s, p(name), NULL, err);
    gguf_set_free(s);
    return rc;
}

START_TEST(split_set_valid)
{
    write_part("m-00001-of-00003.gguf", 0, 3, 3, "t0", 3);
    write_part("m-00002-of-00003.gguf", 1, 3, 3, "t1", 3);
    write_part("m-00003-of-00003.gguf", 2, 3, 3, "t2", 3);
    gguf_set *s;
    gguf_error err;
    ck_assert_int_eq(gguf_set_open(&s, p("m-00002-of-00003.gguf"), NULL, &err), 0);
    ck_assert_int_eq(gguf_set_part_count(s), 3);
    ck_assert_int_eq(gguf_set_tensor_count(s), 3);
    const gguf_tensor *t = gguf_set_tensor_find(s, "t2");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->part, 2);
    float v;
    memcpy(&v, t->data, 4);
    ck_assert(v == 2.0f);
    ck_assert_ptr_eq(gguf_set_tensor_at(s, 1), gguf_set_tensor_find(s, "t1"));
    gguf_set_free(s);
    /* GGUF_OPEN_SINGLE opens just the named part. */
    gguf_open_opts o = {.flags = GGUF_OPEN_SINGLE};
    ck_assert_int_eq(gguf_set_open(&s, p("m-00003-of-00003.gguf"), &o, &err), 0);
    ck_assert_int_eq(gguf_set_tensor_count(s), 1);
    gguf_set_free(s);
}
END_TEST

START_TEST(split_set_errors)
{
    gguf_error err;
    /* missing part */
    write_part("a-00001-of-00002.gguf", 0, 2, 2, "t0", 3);
    ck_assert_int_eq(open_set("a-00001-of-00002.gguf", &err), GGUF_E_SPLIT);
    ck_assert(strstr(err.message, "part 2 of 2 is missing") != NULL);
    /* wrong split.no */
    write_part("b-00001-of-00002.gguf", 0, 2, 2, "t0", 3);
    write_part("b-00002-of-00002.gguf", 0, 2, 2, "t1", 3);
    ck_assert_int_eq(open_set("b-00001-of-00002.gguf", &err), GGUF_E_SPLIT);
    ck_assert(strstr(err.message, "split.no is 0") != NULL);
    /* wrong split.count */
    write_part("c-00001-of-00002.gguf", 0, 2, 2, "t0", 3);
    write_part("c-00002-of-00002.gguf", 1, 3, 2, "t1", 3);
    ck_assert_int_eq(open_set("c-00002-of-00002.gguf", &err), GGUF_E_SPLIT);
    ck_assert(strstr(err.message, "split.count is 3") != NULL);
    /* tensor total differs from split.tensors.count */
    write_part("d-00001-of-00002.gguf", 0, 2, 5, "t0", 3);
    write_part("d-00002-of-00002.gguf", 1, 2, 5, "t1", 3);
    ck_assert_int_eq(open_set("d-00001-of-00002.gguf", &err), GGUF_E_SPLIT);
    ck_assert(strstr(err.message, "says 5 tensors") != NULL);
    /* duplicate tensor across parts */
    write_part("e-00001-of-00002.gguf", 0, 2, 2, "same", 3);
    write_part("e-00002-of-00002.gguf", 1, 2, 2, "same", 3);
    ck_assert_int_eq(open_set("e-00001-of-00002.gguf", &err), GGUF_E_DUPLICATE);
    ck_assert(strstr(err.message, "same") != NULL);
    /* version mismatch */
    write_part("f-00001-of-00002.gguf", 0, 2, 2, "t0", 3);
    write_part("f-00002-of-00002.gguf", 1, 2, 2, "t1", 2);
    ck_assert_int_eq(open_set("f-00001-of-00002.gguf", &err), GGUF_E_SPLIT);
    ck_assert(strstr(err.message, "version") != NULL);
    /* split keys but no split name */
    write_part("lonely.gguf", 0, 4, 4, "t0", 3);
    ck_assert_int_eq(open_set("lonely.gguf", &err), GGUF_E_SPLIT);
    ck_assert(strstr(err.message, "does not follow") != NULL);
    /* a part without split keys */
    write_part("g-00001-of-00002.gguf", 0, 2, 2, "t0", 3);
    write_part("g-00002-of-00002.gguf", -1, -1, -1, "t1", 3);
    ck_assert_int_eq(open_set("g-00001-of-00002.gguf", &err), GGUF_E_SPLIT);
    ck_assert(strstr(err.message, "no split.no") != NULL);
    /* alignment: a later part without the key uses the default (as llama.cpp writes
     * sets); one declaring another value than part 1 is refused */
    write_part_aligned("k-00001-of-00002.gguf", 0, 2, 2, "t0", 3, 64);
    write_part_aligned("k-00002-of-00002.gguf", 1, 2, 2, "t1", 3, 0);
    ck_assert_int_eq(open_set("k-00001-of-00002.gguf", &err), 0);
    write_part_aligned("l-00001-of-00002.gguf", 0, 2, 2, "t0", 3, 0);
    write_part_aligned("l-00002-of-00002.gguf", 1, 2, 2, "t1", 3, 64);
    ck_assert_int_eq(open_set("l-00001-of-00002.gguf", &err), GGUF_E_SPLIT);
    ck_assert(strstr(err.message, "alignment 64 differs") != NULL);
    /* a truncated part is named */
    write_part("h-00001-of-00002.gguf", 0, 2, 2, "t0", 3);
    write_part("h-00002-of-00002.gguf", 1, 2, 2, "t1", 3);
    ck_assert_int_eq(truncate(p("h-00002-of-00002.gguf"), 100), 0);
    ck_assert_int_eq(open_set("h-00001-of-00002.gguf", &err), GGUF_E_TRUNCATED);
    ck_assert(strstr(err.message, "h-00002-of-00002.gguf") != NULL);
}
END_TEST

START_TEST(split_names)
{
    char prefix[256];
    uint32_t no, count;
    ck_assert(gguf_split_parse_name("/x/y/GLM-5-UD-00003-of-00010.gguf", prefix, sizeof prefix,
                                    &no, &count));
    ck_assert_str_eq(prefix, "/x/y/GLM-5-UD");
    ck_assert_int_eq(no, 3);
    ck_assert_int_eq(count, 10);
    ck_assert(!gguf_split_parse_name("model.gguf", prefix, sizeof prefix, &no, &count));
    ck_assert(!gguf_split_parse_name("m-00011-of-00010.gguf", prefix, sizeof prefix, &no, &count));
    ck_assert(!gguf_split_parse_name("m-0001-of-00010.gguf", prefix, sizeof prefix, &no, &count));
    char name[64];
    ck_assert_int_eq(gguf_split_part_name(name, sizeof name, "m", 2, 7), 0);
    ck_assert_str_eq(name, "m-00002-of-00007.gguf");
    ck_assert_int_eq(gguf_split_part_name(name, 8, "m", 2, 7), GGUF_E_LIMIT);
}
END_TEST

START_TEST(digests)
{
    gguf_digest d;
    gguf_digest_bytes("", 0, &d);
    char hex[GGUF_DIGEST_HEX];
    /* Known answer: XXH3-128 of the empty input (xxHash reference test vector). */
    ck_assert_str_eq(gguf_digest_hex(&d, hex), "99aa06d3014798d86001c324468d497f");
    gguf_digest e;
    ck_assert_int_eq(gguf_digest_parse(hex, &e), 0);
    ck_assert(gguf_digest_equal(&d, &e));
    ck_assert_int_eq(gguf_digest_parse("xyz", &e), GGUF_E_INVALID);
    /* Streaming equals one-shot. */
    gguf_hasher *h;
    ck_assert_int_eq(gguf_hasher_create(&h), 0);
    gguf_hasher_update(h, "hello ", 6);
    gguf_hasher_update(h, "world", 5);
    gguf_hasher_final(h, &e);
    gguf_digest_bytes("hello world", 11, &d);
    ck_assert(gguf_digest_equal(&d, &e));
    gguf_hasher_free(h);
    /* The model digest of a split set equals that of the same tensors in one file. */
    write_part("s-00001-of-00002.gguf", 0, 2, 2, "t0", 3);
    write_part("s-00002-of-00002.gguf", 1, 2, 2, "t1", 3);
    gguf_set *s;
    gguf_error err;
    ck_assert_int_eq(gguf_set_open(&s, p("s-00001-of-00002.gguf"), NULL, &err), 0);
    gguf_digest m1, td[2];
    ck_assert_int_eq(gguf_digest_set(s, td, &m1, 2, NULL, &err), 0);
    gguf_set_free(s);
    gguf_writer *w;
    ck_assert_int_eq(gguf_writer_create(&w, p("one.gguf"), &fast, &err), 0);
    int64_t ne[1] = {8};
    gguf_writer_add_tensor(w, "t0", GGUF_TYPE_F32, 1, ne, &err);
    gguf_writer_add_tensor(w, "t1", GGUF_TYPE_F32, 1, ne, &err);
    float z0[8] = {0}, z1[8] = {1};
    gguf_writer_write(w, z0, 32, &err);
    gguf_writer_write(w, z1, 32, &err);
    ck_assert_int_eq(gguf_writer_finish(w, &err), 0);
    gguf_writer_free(w);
    ck_assert_int_eq(gguf_set_open(&s, p("one.gguf"), NULL, &err), 0);
    gguf_digest m2;
    ck_assert_int_eq(gguf_digest_set(s, NULL, &m2, 1, NULL, &err), 0);
    gguf_set_free(s);
    ck_assert(gguf_digest_equal(&m1, &m2));
}
END_TEST

/* A sparse 6 GiB file: 64-bit offsets end to end, no disk cost. */
START_TEST(file_over_4gib)
{
    tbuf b = {0};
    int64_t ne_small[1] = {8}, ne_big[1] = {1ll << 30}; /* 4 GiB of F32 */
    tb_header(&b, 3, 2, 0);
    tb_tensor(&b, "big", 1, ne_big, 0, 0);
    tb_tensor(&b, "tail", 1, ne_small, 0, (4ull << 30) + (1ull << 30));
    tb_pad(&b, 32);
    uint64_t data = b.n;
    int fd = open(p("big.gguf"), O_RDWR | O_CREAT, 0644);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pwrite(fd, b.p, b.n, 0), (ssize_t)b.n);
    float tail[8] = {1, 2, 3, 4, 5, 6, 7, 42};
    uint64_t tail_at = data + (5ull << 30);
    ck_assert_int_eq(pwrite(fd, tail, sizeof tail, (off_t)tail_at), (ssize_t)sizeof tail);
    close(fd);
    tb_free(&b);
    gguf_set *s;
    gguf_error err;
    ck_assert_int_eq(gguf_set_open(&s, p("big.gguf"), NULL, &err), 0);
    const gguf_tensor *t = gguf_set_tensor_find(s, "tail");
    ck_assert_int_eq(t->file_offset, tail_at);
    float v;
    memcpy(&v, t->data + 28, 4);
    ck_assert(v == 42.0f);
    ck_assert_int_eq(gguf_set_tensor_find(s, "big")->nbytes, 4ull << 30);
    gguf_set_free(s);
    /* Truncating the sparse file below the tail tensor is caught. */
    ck_assert_int_eq(truncate(p("big.gguf"), (off_t)tail_at), 0);
    ck_assert_int_eq(gguf_set_open(&s, p("big.gguf"), NULL, &err), GGUF_E_TRUNCATED);
    ck_assert(strstr(err.message, "'tail'") != NULL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("write");
    TCase *tc = tcase_create("write");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, round_trip_all_types);
    tcase_add_test(tc, refuses_existing_and_cleans_up);
    tcase_add_test(tc, cancel_flag);
    tcase_add_test(tc, copy_fd_keeps_holes);
    tcase_add_test(tc, explicit_offsets);
    tcase_add_test(tc, copy_range_runs);
    tcase_add_test(tc, split_set_valid);
    tcase_add_test(tc, split_set_errors);
    tcase_add_test(tc, split_names);
    tcase_add_test(tc, digests);
    tcase_add_test(tc, file_over_4gib);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
