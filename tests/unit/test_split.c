/* Merge and split plans and their execution (gguf/split.h). */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/file.h"
#include "gguf/hash.h"
#include "gguf/split.h"
#include "gguf/write.h"
#include "helper_buf.h"

static char *dir;
static char pbuf[4][4096];
static int pslot;

static void setup(void) { dir = th_mkdtemp(); }
static void teardown(void)
{
    th_rmdir(dir);
    free(dir);
}

/* Path of NAME in the test folder (a few may be live at once). */
static const char *p(const char *name)
{
    char *b = pbuf[pslot++ % 4];
    snprintf(b, 4096, "%s/%s", dir, name);
    return b;
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

static const gguf_split_job_opts fast = {.no_sync = true, .n_threads = 2};

/* A model of n tensors of assorted types and sizes; tensor i is F32 [32*(i%5+1), 3]
 * or Q8_0 / Q4_K, filled with a pattern of i. */
static void make_model(const char *path, int n, uint32_t align)
{
    gguf_writer *w;
    gguf_error err;
    gguf_writer_opts o = {.no_sync = true, .alignment = align};
    ck_assert_int_eq(gguf_writer_create(&w, path, &o, &err), 0);
    ck_assert_int_eq(gguf_writer_add_str(w, "general.architecture", "llama", &err), 0);
    if (align)
        ck_assert_int_eq(gguf_writer_add_u32(w, GGUF_KEY_ALIGNMENT, align, &err), 0);
    const char *strs[] = {"a", "bc", ""};
    ck_assert_int_eq(gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", strs, 3, &err), 0);
    ck_assert_int_eq(gguf_writer_add_f32(w, "test.f32", 0.25f, &err), 0);
    static const uint32_t types[] = {GGUF_TYPE_F32, GGUF_TYPE_Q8_0, GGUF_TYPE_Q4_K,
                                     GGUF_TYPE_F16};
    for (int i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "blk.%d.weight", i);
        uint32_t t = types[i % 4];
        int64_t ne[2] = {t == GGUF_TYPE_Q4_K ? 256 : 32 * (i % 5 + 1), 3};
        ck_assert_int_eq(gguf_writer_add_tensor(w, name, t, 2, ne, &err), 0);
    }
    ck_assert_int_eq(gguf_writer_write_header(w, &err), 0);
    for (int i = 0; i < n; i++) {
        uint32_t t = types[i % 4];
        uint64_t row;
        ck_assert_int_eq(gguf_type_row_bytes(t, t == GGUF_TYPE_Q4_K ? 256 : 32 * (i % 5 + 1), &row),
                         0);
        uint8_t *buf = malloc(row * 3);
        for (uint64_t k = 0; k < row * 3; k++)
            buf[k] = (uint8_t)(i * 31 + k);
        ck_assert_int_eq(gguf_writer_write(w, buf, row * 3, &err), 0);
        free(buf);
    }
    ck_assert_int_eq(gguf_writer_finish(w, &err), 0);
    gguf_writer_free(w);
}

static gguf_set *open_set(const char *path)
{
    gguf_set *s;
    gguf_error err;
    int rc = gguf_set_open(&s, path, NULL, &err);
    ck_assert_msg(rc == 0, "%s", err.message);
    return s;
}

static uint64_t file_size(const char *path)
{
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    return (uint64_t)st.st_size;
}

static bool same_bytes(const char *a, const char *b)
{
    char cmd[8300];
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", a, b);
    return system(cmd) == 0;
}

START_TEST(kv_bytes)
{
    gguf_value v = {.type = GGUF_VALUE_UINT16};
    ck_assert_uint_eq(gguf_split_kv_bytes("split.no", &v), 8 + 8 + 4 + 2);
    v.type = GGUF_VALUE_STRING;
    v.v.str.data = "abc";
    v.v.str.len = 3;
    ck_assert_uint_eq(gguf_split_kv_bytes("k", &v), 8 + 1 + 4 + 8 + 3);
    gguf_str s[2] = {{"x", 1}, {"yz", 2}};
    v.type = GGUF_VALUE_ARRAY;
    v.v.arr.type = GGUF_VALUE_STRING;
    v.v.arr.n = 2;
    v.v.arr.strs = s;
    ck_assert_uint_eq(gguf_split_kv_bytes("k", &v), 8 + 1 + 4 + 4 + 8 + (8 + 1) + (8 + 2));
    v.type = 99;
    ck_assert_uint_eq(gguf_split_kv_bytes("k", &v), 0);
    ck_assert(gguf_split_is_split_key("split.count"));
    ck_assert(gguf_split_is_split_key("split.anything"));
    ck_assert(!gguf_split_is_split_key("splitter"));
    ck_assert(!gguf_split_is_split_key("general.split"));
}
END_TEST

/* Split by tensors, then merge: byte-identical to the original. */
START_TEST(split_merge_round_trip)
{
    make_model(p("m.gguf"), 37, 0);
    gguf_set *in = open_set(p("m.gguf"));
    gguf_split_plan *plan;
    gguf_error err;
    gguf_split_limits lim = {.max_tensors = 10};
    ck_assert_int_eq(gguf_split_plan_create(&plan, in, p("s"), &lim, &err), 0);
    ck_assert_uint_eq(plan->n_parts, 4);
    ck_assert_int_eq(plan->parts[3].count, 7);
    gguf_split_report *r;
    ck_assert_int_eq(gguf_split_execute(in, plan, &fast, &r, &err), 0);
    ck_assert_uint_eq(r->n_outputs, 4);
    for (uint32_t k = 0; k < plan->n_parts; k++)
        ck_assert_uint_eq(file_size(plan->parts[k].path), plan->parts[k].size);
    gguf_split_report_free(r);
    gguf_split_plan_free(plan);
    gguf_set_free(in);

    /* The parts carry split keys with llama.cpp's types. */
    gguf_file *f;
    ck_assert_int_eq(gguf_file_open(&f, p("s-00002-of-00004.gguf"), NULL, &err), 0);
    ck_assert_uint_eq(gguf_file_kv_find(f, "split.no")->value.type, GGUF_VALUE_UINT16);
    ck_assert_uint_eq(gguf_file_kv_find(f, "split.no")->value.v.u16, 1);
    ck_assert_uint_eq(gguf_file_kv_find(f, "split.count")->value.type, GGUF_VALUE_UINT16);
    ck_assert_uint_eq(gguf_file_kv_find(f, "split.count")->value.v.u16, 4);
    ck_assert_uint_eq(gguf_file_kv_find(f, "split.tensors.count")->value.type, GGUF_VALUE_INT32);
    ck_assert_int_eq(gguf_file_kv_find(f, "split.tensors.count")->value.v.i32, 37);
    ck_assert_ptr_null(gguf_file_kv_find(f, "general.architecture"));
    gguf_file_free(f);

    in = open_set(p("s-00003-of-00004.gguf"));
    ck_assert_int_eq(gguf_merge_plan(&plan, in, p("merged.gguf"), &err), 0);
    gguf_split_job_opts o = fast;
    o.verify = true;
    ck_assert_int_eq(gguf_split_execute(in, plan, &o, &r, &err), 0);
    ck_assert(r->verified);
    gguf_split_report_free(r);
    gguf_split_plan_free(plan);
    gguf_set_free(in);
    ck_assert(same_bytes(p("m.gguf"), p("merged.gguf")));
    ck_assert_int_eq(gguf_file_open(&f, p("merged.gguf"), NULL, &err), 0);
    for (int64_t i = 0; i < gguf_file_kv_count(f); i++)
        ck_assert(!gguf_split_is_split_key(gguf_file_kv_at(f, i)->key));
    gguf_file_free(f);
}
END_TEST

/* Size limits are hard: every part file is at most the limit, and exactly as planned. */
START_TEST(split_by_size_is_hard_limit)
{
    make_model(p("m.gguf"), 40, 64);
    gguf_set *in = open_set(p("m.gguf"));
    uint64_t limits[] = {100, 2200, 2600, 3000, 5000, 100000};
    for (size_t li = 0; li < sizeof limits / sizeof limits[0]; li++) {
        gguf_split_plan *plan;
        gguf_error err;
        gguf_split_limits lim = {.max_size = limits[li], .no_tensor_first_split = li % 2};
        char prefix[64];
        snprintf(prefix, sizeof prefix, "z%zu", li);
        int rc = gguf_split_plan_create(&plan, in, p(prefix), &lim, &err);
        if (limits[li] == 100) {
            /* part 1's metadata alone is bigger */
            ck_assert_int_eq(rc, GGUF_E_LIMIT);
            continue;
        }
        ck_assert_msg(rc == 0, "%s", err.message);
        if (lim.no_tensor_first_split)
            ck_assert_int_eq(plan->parts[0].count, 0);
        int64_t total = 0;
        for (uint32_t k = 0; k < plan->n_parts; k++) {
            ck_assert_uint_le(plan->parts[k].size, limits[li]);
            ck_assert_int_eq(plan->parts[k].first, total);
            total += plan->parts[k].count;
        }
        ck_assert_int_eq(total, 40);
        gguf_split_report *r;
        ck_assert_int_eq(gguf_split_execute(in, plan, &fast, &r, &err), 0);
        for (uint32_t k = 0; k < plan->n_parts; k++)
            ck_assert_uint_eq(file_size(plan->parts[k].path), plan->parts[k].size);
        gguf_split_report_free(r);
        /* the parts open as a set with the same model digest */
        gguf_set *back = open_set(plan->parts[0].path);
        gguf_digest a, b;
        ck_assert_int_eq(gguf_digest_set(in, NULL, &a, 1, NULL, &err), 0);
        ck_assert_int_eq(gguf_digest_set(back, NULL, &b, 1, NULL, &err), 0);
        ck_assert(gguf_digest_equal(&a, &b));
        ck_assert_uint_eq(gguf_file_alignment(gguf_set_part(back, plan->n_parts - 1)), 64);
        gguf_set_free(back);
        gguf_split_plan_free(plan);
    }
    gguf_set_free(in);
}
END_TEST

/* Random models, limits and alignments: every plan executes (the writer agrees with
 * the planned size of every part), no part exceeds its limits, and the parts merge back
 * into the original bytes. */
START_TEST(random_plans)
{
    uint64_t seed = 12345;
    static const uint32_t aligns[] = {0, 64, 256, 4096};
    int executed = 0;
    for (int round = 0; round < 24; round++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        int n = (int)(seed >> 60) + 1;
        uint32_t align = aligns[(seed >> 20) % 4];
        char name[64], prefix[64], back[64];
        snprintf(name, sizeof name, "r%d.gguf", round);
        snprintf(prefix, sizeof prefix, "r%d", round);
        snprintf(back, sizeof back, "r%d-back.gguf", round);
        make_model(p(name), n, align);
        gguf_set *in = open_set(p(name));
        gguf_split_limits lim = {0};
        lim.max_tensors = (seed >> 8) % 3 ? (seed >> 12) % 6 + 1 : 0;
        lim.max_size = (seed >> 16) % 2 ? 5000 + (seed >> 24) % 20000 : 0;
        lim.no_tensor_first_split = (seed >> 40) % 4 == 0;
        gguf_split_plan *plan;
        gguf_error err;
        int rc = gguf_split_plan_create(&plan, in, p(prefix), &lim, &err);
        if (rc == GGUF_E_LIMIT) { /* a tensor bigger than the limit: fine, checked */
            gguf_set_free(in);
            continue;
        }
        ck_assert_msg(rc == 0, "%s", err.message);
        ck_assert_int_eq(gguf_split_execute(in, plan, &fast, NULL, &err), 0);
        executed++;
        for (uint32_t k = 0; k < plan->n_parts; k++) {
            ck_assert_uint_eq(file_size(plan->parts[k].path), plan->parts[k].size);
            if (lim.max_size)
                ck_assert_uint_le(plan->parts[k].size, lim.max_size);
            if (lim.max_tensors)
                ck_assert_uint_le((uint64_t)plan->parts[k].count, lim.max_tensors);
            if (k > 0 || !lim.no_tensor_first_split)
                ck_assert_int_ge(plan->parts[k].count, k == 0 && lim.max_size ? 0 : 1);
        }
        gguf_set *parts = open_set(plan->parts[plan->n_parts - 1].path);
        gguf_split_plan *mp;
        ck_assert_int_eq(gguf_merge_plan(&mp, parts, p(back), &err), 0);
        ck_assert_int_eq(gguf_split_execute(parts, mp, &fast, NULL, &err), 0);
        ck_assert(same_bytes(p(name), p(back)));
        gguf_split_plan_free(mp);
        gguf_set_free(parts);
        gguf_split_plan_free(plan);
        gguf_set_free(in);
    }
    ck_assert_int_ge(executed, 16);
}
END_TEST

START_TEST(split_tensor_too_big)
{
    make_model(p("m.gguf"), 5, 0);
    gguf_set *in = open_set(p("m.gguf"));
    gguf_split_plan *plan;
    gguf_error err;
    gguf_split_limits lim = {.max_size = 700, .no_tensor_first_split = true};
    ck_assert_int_eq(gguf_split_plan_create(&plan, in, p("x"), &lim, &err), GGUF_E_LIMIT);
    ck_assert_msg(strstr(err.message, "does not fit") != NULL, "%s", err.message);
    ck_assert_ptr_null(plan);
    /* default: 128 tensors a part */
    ck_assert_int_eq(gguf_split_plan_create(&plan, in, p("x"), NULL, &err), 0);
    ck_assert_uint_eq(plan->n_parts, 1);
    ck_assert_int_eq(plan->parts[0].count, 5);
    ck_assert_str_eq(plan->parts[0].path, p("x-00001-of-00001.gguf"));
    gguf_split_plan_free(plan);
    gguf_set_free(in);
}
END_TEST

START_TEST(outputs_checked)
{
    make_model(p("m.gguf"), 3, 0);
    gguf_set *in = open_set(p("m.gguf"));
    gguf_split_plan *plan;
    gguf_error err;
    /* the output exists */
    th_write_file(p("out.gguf"), "x", 1);
    ck_assert_int_eq(gguf_merge_plan(&plan, in, p("out.gguf"), &err), 0);
    ck_assert_int_eq(gguf_split_execute(in, plan, &fast, NULL, &err), GGUF_E_EXISTS);
    gguf_split_job_opts o = fast;
    o.overwrite = true;
    ck_assert_int_eq(gguf_split_execute(in, plan, &o, NULL, &err), 0);
    gguf_split_plan_free(plan);
    /* a hard link to the input: refused even with overwrite */
    ck_assert_int_eq(link(p("m.gguf"), p("hard.gguf")), 0);
    ck_assert_int_eq(gguf_merge_plan(&plan, in, p("hard.gguf"), &err), 0);
    ck_assert_int_eq(gguf_split_execute(in, plan, &o, NULL, &err), GGUF_E_EXISTS);
    ck_assert_msg(strstr(err.message, "is the input part 1") != NULL, "%s", err.message);
    gguf_split_plan_free(plan);
    /* another spelling of the input */
    char spelled[4200];
    snprintf(spelled, sizeof spelled, "%s/./m.gguf", dir);
    ck_assert_int_eq(gguf_merge_plan(&plan, in, spelled, &err), 0);
    ck_assert_int_eq(gguf_split_check_outputs(in, plan, true, &err), GGUF_E_EXISTS);
    gguf_split_plan_free(plan);
    /* a missing folder */
    ck_assert_int_eq(gguf_merge_plan(&plan, in, p("nope/out.gguf"), &err), 0);
    ck_assert_int_eq(gguf_split_check_outputs(in, plan, false, &err), GGUF_E_NOT_FOUND);
    gguf_split_plan_free(plan);
    gguf_set_free(in);
    ck_assert_int_eq(count_files(), 3); /* m, out, hard */
}
END_TEST

START_TEST(cancel_removes_everything)
{
    make_model(p("m.gguf"), 20, 0);
    gguf_set *in = open_set(p("m.gguf"));
    gguf_split_plan *plan;
    gguf_error err;
    gguf_split_limits lim = {.max_tensors = 5};
    ck_assert_int_eq(gguf_split_plan_create(&plan, in, p("c"), &lim, &err), 0);
    volatile sig_atomic_t cancel = 1;
    gguf_split_job_opts o = fast;
    o.cancel = &cancel;
    ck_assert_int_eq(gguf_split_execute(in, plan, &o, NULL, &err), GGUF_E_INTERRUPTED);
    ck_assert_int_eq(count_files(), 1);
    gguf_split_plan_free(plan);
    gguf_set_free(in);
}
END_TEST

/* Progress calls from a callback that cancels mid-way: earlier parts are removed too. */
static void cancel_after_first(void *ctx, int phase, uint64_t done, uint64_t total)
{
    (void)phase;
    (void)total;
    if (done > 0)
        *(volatile sig_atomic_t *)ctx = 1;
}

START_TEST(cancel_mid_split)
{
    make_model(p("m.gguf"), 20, 0);
    gguf_set *in = open_set(p("m.gguf"));
    gguf_split_plan *plan;
    gguf_error err;
    gguf_split_limits lim = {.max_tensors = 1};
    ck_assert_int_eq(gguf_split_plan_create(&plan, in, p("c"), &lim, &err), 0);
    volatile sig_atomic_t cancel = 0;
    gguf_split_job_opts o = fast;
    o.cancel = &cancel;
    o.progress = cancel_after_first;
    o.progress_ctx = (void *)&cancel;
    ck_assert_int_eq(gguf_split_execute(in, plan, &o, NULL, &err), GGUF_E_INTERRUPTED);
    ck_assert_int_eq(count_files(), 1);
    gguf_split_plan_free(plan);
    gguf_set_free(in);
}
END_TEST

START_TEST(delete_inputs_and_manifest)
{
    make_model(p("m.gguf"), 12, 0);
    gguf_set *in = open_set(p("m.gguf"));
    gguf_split_plan *plan;
    gguf_error err;
    gguf_split_limits lim = {.max_tensors = 5};
    ck_assert_int_eq(gguf_split_plan_create(&plan, in, p("d"), &lim, &err), 0);
    ck_assert_int_eq(gguf_split_execute(in, plan, &fast, NULL, &err), 0);
    gguf_split_plan_free(plan);
    gguf_set_free(in);

    in = open_set(p("d-00001-of-00003.gguf"));
    ck_assert_int_eq(gguf_merge_plan(&plan, in, p("out.gguf"), &err), 0);
    gguf_split_job_opts o = fast;
    o.delete_inputs = true;
    o.digests = true;
    gguf_split_report *r;
    ck_assert_int_eq(gguf_split_execute(in, plan, &o, &r, &err), 0);
    ck_assert(r->verified);
    ck_assert_uint_eq(r->n_deleted, 3);
    ck_assert_int_eq(access(p("d-00001-of-00003.gguf"), F_OK), -1);
    ck_assert(same_bytes(p("m.gguf"), p("out.gguf")));
    ck_assert_int_eq(gguf_split_manifest_write(p("man.json"), in, plan, r, false, &err), 0);
    ck_assert_int_eq(gguf_split_manifest_write(p("man.json"), in, plan, r, false, &err),
                     GGUF_E_EXISTS);
    /* the file digest in the manifest is the digest of the output's bytes */
    gguf_file *f;
    ck_assert_int_eq(gguf_file_open(&f, p("out.gguf"), NULL, &err), 0);
    gguf_digest d;
    char hex[GGUF_DIGEST_HEX];
    gguf_digest_file(f, &d);
    ck_assert(gguf_digest_equal(&d, &r->file_digests[0]));
    gguf_file_free(f);
    FILE *mf = fopen(p("man.json"), "r");
    char text[65536];
    size_t n = fread(text, 1, sizeof text - 1, mf);
    text[n] = 0;
    fclose(mf);
    ck_assert_ptr_nonnull(strstr(text, "\"schema\": \"ggufkit.merge-manifest/1\""));
    ck_assert_ptr_nonnull(strstr(text, gguf_digest_hex(&d, hex)));
    ck_assert_ptr_nonnull(strstr(text, gguf_digest_hex(&r->model_digest, hex)));
    gguf_split_report_free(r);
    gguf_split_plan_free(plan);
    gguf_set_free(in);
    /* no digests: no manifest */
    gguf_split_report empty = {0};
    ck_assert_int_eq(gguf_split_manifest_write(p("x.json"), NULL, NULL, &empty, false, &err),
                     GGUF_E_INVALID);
}
END_TEST

/* The output is altered after the copy (as a faulty disk or kernel would): verification
 * sees the difference, GGUF_E_MISMATCH, and the output is removed. The callback writes
 * into the temporary file once every byte has been copied. */
typedef struct tamper {
    uint64_t off;
    bool done;
} tamper;

static void tamper_after_copy(void *ctx, int phase, uint64_t done, uint64_t total)
{
    tamper *t = ctx;
    if (phase != GGUF_SPLIT_PHASE_COPY || done != total || t->done)
        return;
    DIR *d = opendir(dir);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n > 4 && strcmp(e->d_name + n - 4, ".tmp") == 0) {
            int fd = open(p(e->d_name), O_WRONLY);
            uint8_t x = 0xee;
            ck_assert_int_eq(pwrite(fd, &x, 1, (off_t)t->off), 1);
            close(fd);
            t->done = true;
        }
    }
    closedir(d);
}

START_TEST(verify_mismatch_removes_output)
{
    make_model(p("m.gguf"), 6, 0);
    gguf_set *in = open_set(p("m.gguf"));
    gguf_split_plan *plan;
    gguf_error err;
    ck_assert_int_eq(gguf_merge_plan(&plan, in, p("out.gguf"), &err), 0);
    /* where tensor 3 lands in the output */
    uint64_t off = (plan->parts[0].header_size + 31) / 32 * 32;
    for (int i = 0; i < 3; i++)
        off += (gguf_set_tensor_at(in, i)->nbytes + 31) / 32 * 32;
    tamper tp = {off + 5, false};
    gguf_split_job_opts o = fast;
    o.verify = true;
    o.progress = tamper_after_copy;
    o.progress_ctx = &tp;
    ck_assert_int_eq(gguf_split_execute(in, plan, &o, NULL, &err), GGUF_E_MISMATCH);
    ck_assert(tp.done);
    ck_assert_msg(strstr(err.message, "tensor 'blk.3.weight'") != NULL, "%s", err.message);
    ck_assert_msg(strstr(err.message, "the output was removed") != NULL, "%s", err.message);
    ck_assert_int_eq(access(p("out.gguf"), F_OK), -1);
    ck_assert_int_eq(count_files(), 1);
    gguf_split_plan_free(plan);
    gguf_set_free(in);
}
END_TEST

/* Splits m.gguf (n tensors, alignment align) into parts of max_tensors each; returns the
 * number of parts. */
static uint32_t split_model(const char *prefix, uint64_t max_tensors)
{
    gguf_set *in = open_set(p("m.gguf"));
    gguf_split_plan *plan;
    gguf_error err;
    gguf_split_limits lim = {.max_tensors = max_tensors};
    ck_assert_int_eq(gguf_split_plan_create(&plan, in, p(prefix), &lim, &err), 0);
    ck_assert_int_eq(gguf_split_execute(in, plan, &fast, NULL, &err), 0);
    uint32_t n = plan->n_parts;
    gguf_split_plan_free(plan);
    gguf_set_free(in);
    return n;
}

/* Merges the set of `part` into out with the given layout, verified; returns the report. */
static gguf_split_report *merge_layout(const char *part, const char *out, gguf_merge_layout l,
                                       uint32_t block, gguf_split_plan **plan_out)
{
    gguf_set *in = open_set(p(part));
    gguf_split_plan *plan;
    gguf_error err;
    gguf_merge_opts mo = {.layout = l, .block = block};
    ck_assert_int_eq(gguf_merge_plan_opts(&plan, in, p(out), &mo, &err), 0);
    gguf_split_job_opts o = fast;
    o.verify = true;
    gguf_split_report *r;
    int rc = gguf_split_execute(in, plan, &o, &r, &err);
    ck_assert_msg(rc == 0, "%s", err.message);
    ck_assert(r->verified);
    ck_assert_uint_eq(file_size(p(out)), plan->parts[0].size);
    if (plan_out)
        *plan_out = plan;
    else
        gguf_split_plan_free(plan);
    gguf_set_free(in);
    return r;
}

/* A contiguous merge copies each part as one range and equals the original byte for byte;
 * an aligned merge keeps every part's data at its input offset modulo the block, holds the
 * same tensors (digests) and metadata, and is a valid file. */
START_TEST(merge_layouts)
{
    static const uint32_t aligns[] = {0, 64};
    for (int a = 0; a < 2; a++) {
        make_model(p("m.gguf"), 23, aligns[a]);
        uint32_t n_parts = split_model("s", 6);
        ck_assert_uint_eq(n_parts, 4);
        gguf_split_report *r = merge_layout("s-00002-of-00004.gguf", "c.gguf",
                                            GGUF_LAYOUT_CONTIGUOUS, 0, NULL);
        ck_assert_uint_eq(r->n_ranges, n_parts); /* one copy per part */
        ck_assert_double_eq(r->seconds_verify, r->seconds_digest);
        gguf_split_report_free(r);
        ck_assert(same_bytes(p("m.gguf"), p("c.gguf")));

        static const uint32_t blocks[] = {4096, 65536, 0};
        for (int b = 0; b < 3; b++) {
            gguf_split_plan *plan;
            r = merge_layout("s-00001-of-00004.gguf", "al.gguf", GGUF_LAYOUT_ALIGNED, blocks[b],
                             &plan);
            const uint32_t blk = blocks[b] ? blocks[b] : GGUF_LAYOUT_BLOCK_DEFAULT;
            ck_assert_uint_eq(plan->layout, GGUF_LAYOUT_ALIGNED);
            ck_assert_uint_ge(plan->block, blk);
            ck_assert_uint_eq(r->n_ranges, n_parts);
            gguf_split_report_free(r);
            gguf_set *in = open_set(p("s-00001-of-00004.gguf"));
            gguf_file *f;
            gguf_error err;
            ck_assert_int_eq(gguf_file_open(&f, p("al.gguf"), NULL, &err), 0);
            ck_assert_int_eq(gguf_file_tensor_count(f), 23);
            ck_assert_int_eq(gguf_file_kv_count(f), gguf_file_kv_count(gguf_set_meta(in)) - 3);
            gguf_digest want, got;
            for (int64_t i = 0; i < 23; i++) {
                const gguf_tensor *ti = gguf_set_tensor_at(in, i), *to = gguf_file_tensor_at(f, i);
                ck_assert_str_eq(ti->name, to->name);
                ck_assert_uint_eq(to->offset, plan->offsets[i]);
                ck_assert_uint_eq(to->offset % gguf_file_alignment(f), 0);
                /* every tensor keeps its input file offset modulo the block */
                ck_assert_uint_eq(to->file_offset % plan->block, ti->file_offset % plan->block);
                gguf_digest_tensor(ti, &want);
                gguf_digest_tensor(to, &got);
                ck_assert(gguf_digest_equal(&want, &got));
            }
            /* gaps only before parts: less than a block each */
            ck_assert_uint_lt(file_size(p("al.gguf")), file_size(p("c.gguf")) + 4ull * plan->block);
            gguf_file_free(f);
            gguf_set_free(in);
            gguf_split_plan_free(plan);
            unlink(p("al.gguf"));
        }
        unlink(p("c.gguf"));
        unlink(p("m.gguf"));
        for (uint32_t k = 1; k <= n_parts; k++) {
            char name[64];
            snprintf(name, sizeof name, "s-%05u-of-%05u.gguf", k, n_parts);
            unlink(p(name));
        }
    }
    /* a block that is not a power of two, or too large */
    make_model(p("m.gguf"), 3, 0);
    gguf_set *in = open_set(p("m.gguf"));
    gguf_split_plan *plan;
    gguf_error err;
    gguf_merge_opts bad = {.layout = GGUF_LAYOUT_ALIGNED, .block = 3000};
    ck_assert_int_eq(gguf_merge_plan_opts(&plan, in, p("x.gguf"), &bad, &err), GGUF_E_INVALID);
    bad.block = 32u << 20;
    ck_assert_int_eq(gguf_merge_plan_opts(&plan, in, p("x.gguf"), &bad, &err), GGUF_E_INVALID);
    gguf_set_free(in);
}
END_TEST

/* An input whose padding is not zero (some writers leave garbage there), and an input with
 * a gap between tensors: those tensors are copied one by one, and the merged file still
 * equals a merge of clean parts (zero padding, no gap). */
START_TEST(merge_irregular_inputs)
{
    make_model(p("m.gguf"), 12, 0);
    ck_assert_uint_eq(split_model("s", 4), 3);
    /* garbage in the padding after tensor 1 of part 2 (a Q8_0 tensor: 306 bytes) */
    gguf_file *f;
    gguf_error err;
    ck_assert_int_eq(gguf_file_open(&f, p("s-00002-of-00003.gguf"), NULL, &err), 0);
    const gguf_tensor *t = gguf_file_tensor_at(f, 1);
    ck_assert_uint_ne(t->nbytes % 32, 0);
    uint64_t at = t->file_offset + t->nbytes;
    gguf_file_free(f);
    int fd = open(p("s-00002-of-00003.gguf"), O_WRONLY);
    uint8_t junk = 0xa5;
    ck_assert_int_eq(pwrite(fd, &junk, 1, (off_t)at), 1);
    close(fd);
    /* part 3 rewritten with a 4 KiB gap before its third tensor */
    gguf_set *s3 = open_set(p("s-00003-of-00003.gguf"));
    const gguf_file *f3 = gguf_set_part(s3, 2);
    gguf_writer *w;
    gguf_writer_opts wo = {.no_sync = true};
    ck_assert_int_eq(gguf_writer_create(&w, p("g-00003-of-00003.gguf"), &wo, &err), 0);
    for (int64_t i = 0; i < gguf_file_kv_count(f3); i++)
        ck_assert_int_eq(gguf_writer_add_kv(w, gguf_file_kv_at(f3, i)->key,
                                            &gguf_file_kv_at(f3, i)->value, &err), 0);
    uint64_t off = 0;
    for (int64_t i = 0; i < gguf_file_tensor_count(f3); i++) {
        const gguf_tensor *u = gguf_file_tensor_at(f3, i);
        if (i == 2)
            off += 4096;
        ck_assert_int_eq(gguf_writer_add_tensor_at(w, u->name, u->type, u->n_dims, u->ne, off,
                                                   &err), 0);
        off += (u->nbytes + 31) / 32 * 32;
    }
    for (int64_t i = 0; i < gguf_file_tensor_count(f3); i++)
        ck_assert_int_eq(gguf_writer_write(w, gguf_file_tensor_at(f3, i)->data,
                                           gguf_file_tensor_at(f3, i)->nbytes, &err), 0);
    ck_assert_int_eq(gguf_writer_finish(w, &err), 0);
    gguf_writer_free(w);
    gguf_set_free(s3);
    ck_assert_int_eq(rename(p("g-00003-of-00003.gguf"), p("s-00003-of-00003.gguf")), 0);

    gguf_split_report *r = merge_layout("s-00001-of-00003.gguf", "c.gguf",
                                        GGUF_LAYOUT_CONTIGUOUS, 0, NULL);
    /* part 1: one run; part 2: tensors 0-1, then 2-3; part 3: tensors 0-1, then 2-3 */
    ck_assert_uint_eq(r->n_ranges, 5);
    gguf_split_report_free(r);
    ck_assert(same_bytes(p("m.gguf"), p("c.gguf")));
    /* aligned: part 3's run after the gap starts again at its own offset modulo the block */
    gguf_split_plan *plan;
    r = merge_layout("s-00001-of-00003.gguf", "al.gguf", GGUF_LAYOUT_ALIGNED, 4096, &plan);
    gguf_split_report_free(r);
    gguf_set *in = open_set(p("s-00001-of-00003.gguf"));
    ck_assert_int_eq(gguf_file_open(&f, p("al.gguf"), NULL, &err), 0);
    for (int64_t i = 0; i < 12; i++)
        ck_assert_uint_eq(gguf_file_tensor_at(f, i)->file_offset % 4096,
                          gguf_set_tensor_at(in, i)->file_offset % 4096);
    gguf_file_free(f);
    gguf_set_free(in);
    gguf_split_plan_free(plan);
}
END_TEST

/* Without verification, a manifest still reads the outputs back: seconds_digest, but no
 * verification time and verified false. */
START_TEST(report_times)
{
    make_model(p("m.gguf"), 5, 0);
    gguf_set *in = open_set(p("m.gguf"));
    gguf_split_plan *plan;
    gguf_error err;
    ck_assert_int_eq(gguf_merge_plan(&plan, in, p("o.gguf"), &err), 0);
    gguf_split_job_opts o = fast;
    o.digests = true;
    gguf_split_report *r;
    ck_assert_int_eq(gguf_split_execute(in, plan, &o, &r, &err), 0);
    ck_assert(!r->verified);
    ck_assert(r->have_digests);
    ck_assert_double_eq(r->seconds_verify, 0);
    ck_assert_double_ge(r->seconds_digest, 0);
    ck_assert_uint_eq(r->n_ranges, 1);
    gguf_split_report_free(r);
    gguf_split_plan_free(plan);
    gguf_set_free(in);
}
END_TEST

/* A file of 0 tensors splits into one metadata part and merges back. */
START_TEST(no_tensors)
{
    make_model(p("m.gguf"), 0, 0);
    gguf_set *in = open_set(p("m.gguf"));
    gguf_split_plan *plan;
    gguf_error err;
    ck_assert_int_eq(gguf_split_plan_create(&plan, in, p("e"), NULL, &err), 0);
    ck_assert_uint_eq(plan->n_parts, 1);
    ck_assert_int_eq(gguf_split_execute(in, plan, &fast, NULL, &err), 0);
    gguf_split_plan_free(plan);
    gguf_set_free(in);
    in = open_set(p("e-00001-of-00001.gguf"));
    ck_assert_int_eq(gguf_merge_plan(&plan, in, p("back.gguf"), &err), 0);
    ck_assert_int_eq(gguf_split_execute(in, plan, &fast, NULL, &err), 0);
    ck_assert(same_bytes(p("m.gguf"), p("back.gguf")));
    gguf_split_plan_free(plan);
    gguf_set_free(in);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("split");
    TCase *tc = tcase_create("split");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, kv_bytes);
    tcase_add_test(tc, split_merge_round_trip);
    tcase_add_test(tc, split_by_size_is_hard_limit);
    tcase_add_test(tc, random_plans);
    tcase_add_test(tc, split_tensor_too_big);
    tcase_add_test(tc, outputs_checked);
    tcase_add_test(tc, cancel_removes_everything);
    tcase_add_test(tc, cancel_mid_split);
    tcase_add_test(tc, delete_inputs_and_manifest);
    tcase_add_test(tc, no_tensors);
    tcase_add_test(tc, verify_mismatch_removes_output);
    tcase_add_test(tc, merge_layouts);
    tcase_add_test(tc, merge_irregular_inputs);
    tcase_add_test(tc, report_times);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
