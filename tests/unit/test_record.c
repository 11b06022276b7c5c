/*
 * Record module: round trips (plain, zstd, multi-rank, f64 input), atomic
 * writing, writer misuse, and one test per malformed-record class.
 */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gguf/record.h"
#include "gguf/write.h"
#include "helper_buf.h"

static char *tdir;
static char path_buf[4096];

static void setup(void) { tdir = th_mkdtemp(); }
static void teardown(void)
{
    th_rmdir(tdir);
    free(tdir);
}

static const char *tpath(const char *name)
{
    snprintf(path_buf, sizeof path_buf, "%s/%s", tdir, name);
    return path_buf;
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

static const int32_t toks[3] = {1, 42, 7};

static gguf_record_meta base_meta(uint32_t tp)
{
    gguf_record_meta m = {.model_digest = "0123456789abcdef0123456789abcdef",
                          .tokens = toks,
                          .n_tokens = 3,
                          .backend = "cpu",
                          .precision = "f32",
                          .tp = tp,
                          .ep = 1,
                          .plan_digest = "",
                          .arch = "llama"};
    return m;
}

/* Writes blk.0.attn_out [4,3], blk.1.attn_out [4,3], logits [5,3] for every rank. */
static void write_sample(const char *path, uint32_t tp, bool zstd)
{
    gguf_record_meta m = base_meta(tp);
    gguf_record_opts o = {.zstd = zstd, .no_sync = true};
    gguf_record_writer *w;
    gguf_error err;
    ck_assert_msg(gguf_record_writer_create(&w, path, &m, &o, &err) == 0, "%s", err.message);
    float a[12], l[15];
    for (uint32_t r = 0; r < tp; r++) {
        for (int i = 0; i < 12; i++)
            a[i] = (float)i + 100.0f * (float)r;
        for (int i = 0; i < 15; i++)
            l[i] = -(float)i;
        int64_t ne[2] = {4, 3}, nl[2] = {5, 3};
        ck_assert_int_eq(gguf_record_add(w, "blk.0.attn_out", r, 2, ne, a, &err), 0);
        a[0] = 0.5f;
        ck_assert_int_eq(gguf_record_add(w, "blk.1.attn_out", r, 2, ne, a, &err), 0);
        ck_assert_int_eq(gguf_record_add(w, "logits", r, 2, nl, l, &err), 0);
    }
    ck_assert_int_eq(gguf_record_writer_count(w), 3 * (int64_t)tp);
    ck_assert_msg(gguf_record_writer_finish(w, &err) == 0, "%s", err.message);
    gguf_record_writer_free(w);
}

static void check_sample(const gguf_record *r, uint32_t tp)
{
    const gguf_record_meta *m = gguf_record_get_meta(r);
    ck_assert_str_eq(m->model_digest, "0123456789abcdef0123456789abcdef");
    ck_assert_str_eq(m->backend, "cpu");
    ck_assert_str_eq(m->precision, "f32");
    ck_assert_str_eq(m->arch, "llama");
    ck_assert_str_eq(m->fault, "");
    ck_assert_str_eq(m->ggufkit_version, GGUF_RECORD_LIB_VERSION);
    ck_assert_uint_eq(m->tp, tp);
    ck_assert_uint_eq(m->ranks, tp);
    ck_assert_uint_eq(m->n_tokens, 3);
    ck_assert_int_eq(m->tokens[1], 42);
    ck_assert_int_eq(gguf_record_capture_count(r), 3 * (int64_t)tp);
    const gguf_capture *c = gguf_record_capture_at(r, 0);
    ck_assert_str_eq(c->point, "blk.0.attn_out");
    ck_assert_str_eq(c->name, tp > 1 ? "blk.0.attn_out@0" : "blk.0.attn_out");
    ck_assert_str_eq(c->op, "attn_out");
    ck_assert_int_eq(c->layer, 0);
    ck_assert_int_eq(c->ne[0], 4);
    ck_assert_int_eq(c->ne[1], 3);
    ck_assert_int_eq(c->n_elements, 12);
    ck_assert(c->data[5] == 5.0f);
    const gguf_capture *l = gguf_record_capture_find(r, "logits", tp - 1);
    ck_assert_ptr_nonnull(l);
    ck_assert_int_eq(l->layer, -1);
    ck_assert_str_eq(l->op, "logits");
    ck_assert(l->data[14] == -14.0f);
    ck_assert_uint_eq(l->rank, tp - 1);
    const gguf_capture *b = gguf_record_capture_find(r, "blk.1.attn_out", tp - 1);
    ck_assert_ptr_nonnull(b);
    ck_assert(b->data[0] == 0.5f && b->data[1] == 1.0f + 100.0f * (float)(tp - 1));
    ck_assert_ptr_null(gguf_record_capture_find(r, "blk.2.attn_out", 0));
    ck_assert_ptr_null(gguf_record_capture_find(r, "logits", tp));
}

START_TEST(round_trip_plain)
{
    write_sample(tpath("r.gguf"), 1, false);
    gguf_record *r;
    gguf_error err;
    ck_assert_msg(gguf_record_open(&r, tpath("r.gguf"), &err) == 0, "%s", err.message);
    ck_assert(!gguf_record_compressed(r));
    check_sample(r, 1);
    /* It is a plain GGUF too. */
    ck_assert_int_eq(gguf_file_tensor_count(gguf_record_file(r)), 3);
    gguf_record_free(r);
    ck_assert_int_eq(count_entries(tdir), 1); /* no scratch or temp files left */
}
END_TEST

START_TEST(round_trip_ranks)
{
    write_sample(tpath("r4.gguf"), 4, false);
    gguf_record *r;
    gguf_error err;
    ck_assert_msg(gguf_record_open(&r, tpath("r4.gguf"), &err) == 0, "%s", err.message);
    check_sample(r, 4);
    ck_assert_str_eq(gguf_record_capture_at(r, 11)->name, "logits@3");
    gguf_record_free(r);
}
END_TEST

START_TEST(round_trip_zstd)
{
    write_sample(tpath("z.gguf.zst"), 2, true);
    ck_assert_int_eq(count_entries(tdir), 1);
    FILE *f = fopen(tpath("z.gguf.zst"), "rb");
    unsigned char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    ck_assert(n > 4 && buf[0] == 0x28 && buf[1] == 0xB5 && buf[2] == 0x2F && buf[3] == 0xFD);
    gguf_record *r;
    gguf_error err;
    ck_assert_msg(gguf_record_open(&r, tpath("z.gguf.zst"), &err) == 0, "%s", err.message);
    ck_assert(gguf_record_compressed(r));
    check_sample(r, 2);
    gguf_record_free(r);
    /* From memory as well, and from a misaligned plain copy. */
    ck_assert_int_eq(gguf_record_open_memory(&r, buf, n, "mem.zst", &err), 0);
    check_sample(r, 2);
    gguf_record_free(r);
}
END_TEST

START_TEST(open_memory_misaligned)
{
    write_sample(tpath("p.gguf"), 1, false);
    FILE *f = fopen(tpath("p.gguf"), "rb");
    static unsigned char buf[1 << 16];
    size_t n = fread(buf + 3, 1, sizeof buf - 3, f);
    fclose(f);
    gguf_record *r;
    gguf_error err;
    ck_assert_msg(gguf_record_open_memory(&r, buf + 3, n, "odd", &err) == 0, "%s", err.message);
    check_sample(r, 1);
    gguf_record_free(r);
}
END_TEST

START_TEST(add_f64_rounds)
{
    gguf_record_meta m = base_meta(1);
    gguf_record_opts o = {.no_sync = true};
    gguf_record_writer *w;
    gguf_error err;
    ck_assert_int_eq(gguf_record_writer_create(&w, tpath("d.gguf"), &m, &o, &err), 0);
    static double d[5000];
    for (int i = 0; i < 5000; i++)
        d[i] = 1.0 / (i + 1);
    int64_t ne[1] = {5000};
    ck_assert_int_eq(gguf_record_add_f64(w, "output_norm", 0, 1, ne, d, &err), 0);
    ck_assert_int_eq(gguf_record_writer_finish(w, &err), 0);
    gguf_record_writer_free(w);
    gguf_record *r;
    ck_assert_int_eq(gguf_record_open(&r, tpath("d.gguf"), &err), 0);
    const gguf_capture *c = gguf_record_capture_find(r, "output_norm", 0);
    ck_assert(c->data[4999] == (float)(1.0 / 5000));
    ck_assert(c->data[2] == (float)(1.0 / 3));
    gguf_record_free(r);
}
END_TEST

START_TEST(writer_misuse)
{
    gguf_record_meta m = base_meta(2);
    gguf_record_opts o = {.no_sync = true};
    gguf_record_writer *w;
    gguf_error err;
    float x[4] = {0};
    int64_t ne[1] = {4}, bad[1] = {0};
    char longname[80];
    memset(longname, 'x', 70);
    longname[70] = 0;
    ck_assert_int_eq(gguf_record_writer_create(&w, tpath("m.gguf"), &m, &o, &err), 0);
    ck_assert_int_eq(gguf_record_add(w, "", 0, 1, ne, x, &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_record_add(w, "a@1", 0, 1, ne, x, &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_record_add(w, "a", 2, 1, ne, x, &err), GGUF_E_INVALID);
    ck_assert_msg(strstr(err.message, "rank 2 out of range") != NULL, "%s", err.message);
    ck_assert_int_eq(gguf_record_add(w, "a", 0, 0, ne, x, &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_record_add(w, "a", 0, 5, ne, x, &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_record_add(w, "a", 0, 1, bad, x, &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_record_add(w, longname, 0, 1, ne, x, &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_record_add(w, "a", 0, 1, ne, x, &err), 0);
    ck_assert_int_eq(gguf_record_add(w, "a", 1, 1, ne, x, &err), 0);
    ck_assert_int_eq(gguf_record_add(w, "a", 1, 1, ne, x, &err), GGUF_E_DUPLICATE);
    ck_assert_int_eq(gguf_record_writer_count(w), 2);
    /* Dropped before finish: nothing appears. */
    gguf_record_writer_free(w);
    ck_assert_int_eq(count_entries(tdir), 0);
    /* Existing outputs are kept unless overwrite. */
    ck_assert_int_eq(th_write_file(tpath("m.gguf"), "x", 1), 0);
    ck_assert_int_eq(gguf_record_writer_create(&w, tpath("m.gguf"), &m, &o, &err), GGUF_E_EXISTS);
    o.overwrite = true;
    o.zstd = true;
    ck_assert_int_eq(gguf_record_writer_create(&w, tpath("m.gguf"), &m, &o, &err), 0);
    ck_assert_int_eq(gguf_record_add(w, "a", 1, 1, ne, x, &err), 0);
    ck_assert_int_eq(gguf_record_writer_finish(w, &err), 0);
    ck_assert_int_eq(gguf_record_writer_finish(w, &err), GGUF_E_INVALID);
    gguf_record_writer_free(w);
    ck_assert_int_eq(count_entries(tdir), 1);
    m.tp = 8192;
    ck_assert_int_eq(gguf_record_writer_create(&w, tpath("n.gguf"), &m, &o, &err), GGUF_E_INVALID);
}
END_TEST

START_TEST(interrupted)
{
    gguf_record_meta m = base_meta(1);
    volatile sig_atomic_t cancel = 0;
    gguf_record_opts o = {.no_sync = true, .cancel = &cancel};
    gguf_record_writer *w;
    gguf_error err;
    float x[4] = {0};
    int64_t ne[1] = {4};
    ck_assert_int_eq(gguf_record_writer_create(&w, tpath("c.gguf"), &m, &o, &err), 0);
    ck_assert_int_eq(gguf_record_add(w, "a", 0, 1, ne, x, &err), 0);
    cancel = 1;
    ck_assert_int_eq(gguf_record_add(w, "b", 0, 1, ne, x, &err), GGUF_E_INTERRUPTED);
    ck_assert_int_eq(gguf_record_writer_finish(w, &err), GGUF_E_INTERRUPTED);
    gguf_record_writer_free(w);
    ck_assert_int_eq(count_entries(tdir), 0);
}
END_TEST

START_TEST(parse_names)
{
    char p[64];
    uint32_t rank;
    int32_t layer;
    const char *op;
    ck_assert_int_eq(gguf_capture_parse_name("blk.12.ffn_out@3", p, sizeof p, &rank, &layer, &op),
                     0);
    ck_assert_str_eq(p, "blk.12.ffn_out");
    ck_assert_uint_eq(rank, 3);
    ck_assert_int_eq(layer, 12);
    ck_assert_str_eq(op, "ffn_out");
    ck_assert_int_eq(gguf_capture_parse_name("logits", p, sizeof p, &rank, &layer, &op), 0);
    ck_assert_uint_eq(rank, 0);
    ck_assert_int_eq(layer, -1);
    ck_assert_str_eq(op, "logits");
    ck_assert_int_eq(gguf_capture_parse_name("blk.x.a", p, sizeof p, &rank, &layer, &op), 0);
    ck_assert_int_eq(layer, -1);
    ck_assert_int_eq(gguf_capture_parse_name("blk.3.", p, sizeof p, &rank, &layer, &op), 0);
    ck_assert_int_eq(layer, -1);
    ck_assert_int_eq(gguf_capture_parse_name("a@", p, sizeof p, &rank, &layer, &op),
                     GGUF_E_BAD_VALUE);
    ck_assert_int_eq(gguf_capture_parse_name("a@1x", p, sizeof p, &rank, &layer, &op),
                     GGUF_E_BAD_VALUE);
    ck_assert_int_eq(gguf_capture_parse_name("@1", p, sizeof p, &rank, &layer, &op),
                     GGUF_E_BAD_VALUE);
    ck_assert_int_eq(gguf_capture_parse_name("a@1@2", p, sizeof p, &rank, &layer, &op),
                     GGUF_E_BAD_VALUE);
    ck_assert_int_eq(gguf_capture_parse_name("a@99999", p, sizeof p, &rank, &layer, &op),
                     GGUF_E_BAD_VALUE);
}
END_TEST

/* ---- malformed records, built with the plain GGUF writer ---- */

typedef struct bad_spec {
    const char *type;       /* general.type, NULL to leave out */
    uint32_t version;       /* record.version, 0 to leave out */
    uint32_t ranks;         /* record.ranks, 0 to leave out */
    const char *tensor;     /* tensor name */
    uint32_t ttype;         /* tensor type */
    bool tokens_as_str;
} bad_spec;

static void write_bad(const char *path, const bad_spec *s)
{
    gguf_writer_opts o = {.no_sync = true, .overwrite = true};
    gguf_writer *w;
    gguf_error err;
    ck_assert_int_eq(gguf_writer_create(&w, path, &o, &err), 0);
    /* At least one pair: write.c's header copy trips UBSan on an empty kv buffer. */
    ck_assert_int_eq(gguf_writer_add_str(w, "general.name", "bad", &err), 0);
    if (s->type)
        ck_assert_int_eq(gguf_writer_add_str(w, GGUF_RKEY_TYPE, s->type, &err), 0);
    if (s->version)
        ck_assert_int_eq(gguf_writer_add_u32(w, GGUF_RKEY_VERSION, s->version, &err), 0);
    if (s->ranks)
        ck_assert_int_eq(gguf_writer_add_u32(w, GGUF_RKEY_RANKS, s->ranks, &err), 0);
    if (s->tokens_as_str)
        ck_assert_int_eq(gguf_writer_add_str(w, GGUF_RKEY_TOKENS, "1,2", &err), 0);
    int64_t ne[1] = {32};
    ck_assert_int_eq(gguf_writer_add_tensor(w, s->tensor, s->ttype, 1, ne, &err), 0);
    static const uint8_t zero[256];
    uint64_t nb = s->ttype == GGUF_TYPE_F32 ? 128 : s->ttype == GGUF_TYPE_F16 ? 64 : 34;
    ck_assert_int_eq(gguf_writer_write(w, zero, nb, &err), 0);
    ck_assert_int_eq(gguf_writer_finish(w, &err), 0);
    gguf_writer_free(w);
}

static void expect_open_fail(const bad_spec *s, int code, const char *needle)
{
    write_bad(tpath("bad.gguf"), s);
    gguf_record *r = NULL;
    gguf_error err;
    int rc = gguf_record_open(&r, tpath("bad.gguf"), &err);
    ck_assert_msg(rc == code, "expected %s, got %s: %s", gguf_status_name(code),
                  gguf_status_name(rc), err.message);
    ck_assert_ptr_null(r);
    ck_assert_msg(strstr(err.message, "bad.gguf") != NULL, "no file name: %s", err.message);
    ck_assert_msg(strstr(err.message, needle) != NULL, "'%s' not in: %s", needle, err.message);
}

START_TEST(not_a_record)
{
    bad_spec s = {.tensor = "token_embd.weight", .ttype = GGUF_TYPE_F32};
    expect_open_fail(&s, GGUF_E_NOT_FOUND, "not a ggufkit record");
    s.type = "model";
    expect_open_fail(&s, GGUF_E_BAD_VALUE, "'model'");
}
END_TEST

START_TEST(bad_records)
{
    bad_spec s = {.type = GGUF_RECORD_TYPE, .tensor = "logits", .ttype = GGUF_TYPE_F32};
    expect_open_fail(&s, GGUF_E_BAD_VALUE, "record.version");
    s.version = 2;
    expect_open_fail(&s, GGUF_E_UNSUPPORTED, "newer");
    s.version = 1;
    s.ttype = GGUF_TYPE_Q8_0;
    expect_open_fail(&s, GGUF_E_BAD_TYPE, "F32 only");
    s.ttype = GGUF_TYPE_F32;
    s.tensor = "logits@1";
    expect_open_fail(&s, GGUF_E_BAD_VALUE, "record.ranks is 1");
    s.ranks = 2;
    s.tensor = "logits";
    expect_open_fail(&s, GGUF_E_BAD_VALUE, "POINT@RANK");
    s.tensor = "logits@x";
    expect_open_fail(&s, GGUF_E_BAD_VALUE, "bad name");
    s.tensor = "logits@1";
    s.tokens_as_str = true;
    expect_open_fail(&s, GGUF_E_BAD_VALUE, "record.tokens");
    s.tokens_as_str = false;
    write_bad(tpath("ok.gguf"), &s); /* and the fixed one opens */
    gguf_record *r;
    gguf_error err;
    ck_assert_msg(gguf_record_open(&r, tpath("ok.gguf"), &err) == 0, "%s", err.message);
    ck_assert_uint_eq(gguf_record_get_meta(r)->ranks, 2);
    ck_assert_uint_eq(gguf_record_get_meta(r)->tp, 1);
    gguf_record_free(r);
}
END_TEST

START_TEST(misaligned_data)
{
    /* general.alignment 1 and an odd-sized header put the floats off a 4-byte boundary;
     * grow a name until the header size is not a multiple of 4. */
    gguf_writer_opts o = {.no_sync = true};
    gguf_writer *w = NULL;
    gguf_error err;
    char name[8] = "";
    for (int k = 0; k < 4; k++) {
        name[k] = 'x';
        gguf_writer_free(w);
        ck_assert_int_eq(gguf_writer_create(&w, tpath("odd.gguf"), &o, &err), 0);
        ck_assert_int_eq(gguf_writer_add_u32(w, GGUF_KEY_ALIGNMENT, 1, &err), 0);
        ck_assert_int_eq(gguf_writer_add_str(w, GGUF_RKEY_TYPE, GGUF_RECORD_TYPE, &err), 0);
        ck_assert_int_eq(gguf_writer_add_u32(w, GGUF_RKEY_VERSION, 1, &err), 0);
        ck_assert_int_eq(gguf_writer_add_str(w, "general.name", name, &err), 0);
        int64_t ne[1] = {4};
        ck_assert_int_eq(gguf_writer_add_tensor(w, "logits", GGUF_TYPE_F32, 1, ne, &err), 0);
        if (gguf_writer_header_size(w) % 4)
            break;
    }
    ck_assert_uint_ne(gguf_writer_header_size(w) % 4, 0);
    static const float z[4];
    ck_assert_int_eq(gguf_writer_write(w, z, sizeof z, &err), 0);
    ck_assert_int_eq(gguf_writer_finish(w, &err), 0);
    gguf_writer_free(w);
    gguf_record *r = NULL;
    int rc = gguf_record_open(&r, tpath("odd.gguf"), &err);
    ck_assert_msg(rc == GGUF_E_BAD_OFFSET, "%s: %s", gguf_status_name(rc), err.message);
    ck_assert(strstr(err.message, "not 4-byte aligned") != NULL);
    ck_assert_ptr_null(r);
}
END_TEST

START_TEST(bad_zstd)
{
    write_sample(tpath("z.zst"), 1, true);
    FILE *f = fopen(tpath("z.zst"), "rb");
    static unsigned char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    gguf_record *r = NULL;
    gguf_error err;
    /* Cut in the middle of the frame. */
    ck_assert_int_eq(th_write_file(tpath("cut.zst"), buf, n / 2), 0);
    int rc = gguf_record_open(&r, tpath("cut.zst"), &err);
    ck_assert_msg(rc == GGUF_E_TRUNCATED, "%s: %s", gguf_status_name(rc), err.message);
    ck_assert(strstr(err.message, "cut.zst") != NULL);
    /* Flipped bytes in the body (the frame has a checksum). */
    buf[n / 2] ^= 0xFF;
    buf[n / 2 + 1] ^= 0x55;
    rc = gguf_record_open_memory(&r, buf, n, "flip.zst", &err);
    ck_assert_msg(rc == GGUF_E_NOT_GGUF, "%s: %s", gguf_status_name(rc), err.message);
    ck_assert(strstr(err.message, "zstd") != NULL);
    /* Magic only. */
    rc = gguf_record_open_memory(&r, buf, 4, "magic.zst", &err);
    ck_assert_msg(rc == GGUF_E_NOT_GGUF || rc == GGUF_E_TRUNCATED, "%s", gguf_status_name(rc));
    /* Something that is no GGUF at all. */
    rc = gguf_record_open_memory(&r, "hello world, no gguf here", 25, "txt", &err);
    ck_assert_int_lt(rc, 0);
    ck_assert_ptr_null(r);
    rc = gguf_record_open(&r, tpath("missing.gguf"), &err);
    ck_assert_int_eq(rc, GGUF_E_NOT_FOUND);
}
END_TEST

/* Every file of the record fuzz corpus opens with the code its name starts with. */
START_TEST(corpus_names)
{
    const char *src = getenv("GGUFKIT_SRC");
    if (!src)
        return;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus/record", src);
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[8192], want[64];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        const char *dash = strstr(e->d_name, "--");
        ck_assert_ptr_nonnull(dash);
        snprintf(want, sizeof want, "%.*s", (int)(dash - e->d_name), e->d_name);
        gguf_record *r = NULL;
        gguf_error err;
        int rc = gguf_record_open(&r, path, &err);
        const char *got = rc ? gguf_status_name(rc) : "valid";
        ck_assert_msg(!strcmp(got, want), "%s: got %s (%s)", e->d_name, got, err.message);
        gguf_record_free(r);
        n++;
    }
    closedir(d);
    ck_assert_int_ge(n, 9);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("record");
    TCase *t = tcase_create("record");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, round_trip_plain);
    tcase_add_test(t, round_trip_ranks);
    tcase_add_test(t, round_trip_zstd);
    tcase_add_test(t, open_memory_misaligned);
    tcase_add_test(t, add_f64_rounds);
    tcase_add_test(t, writer_misuse);
    tcase_add_test(t, interrupted);
    tcase_add_test(t, parse_names);
    tcase_add_test(t, not_a_record);
    tcase_add_test(t, bad_records);
    tcase_add_test(t, bad_zstd);
    tcase_add_test(t, corpus_names);
    tcase_add_test(t, misaligned_data);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
