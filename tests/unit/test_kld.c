/*
 * KLD module: llama.cpp's --kl-divergence-base files. The writer's bytes
 * against the documented layout (gguf/kld.h), a file built by hand from that
 * layout read back, one malformed file per error, the quantization of a row,
 * the BOS rule, and the statistics on rows whose answer is known (a model
 * against its own file, a shifted model). numpy checks the statistics
 * independently (tests/interop/test_kld_numpy.py).
 */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/kld.h"
#include "helper_buf.h"

#define NEAR(x, y, eps) ck_assert_msg(fabs((x) - (y)) <= (eps), "%.17g != %.17g", (double)(x), (double)(y))

static char *tdir;
static void setup(void) { tdir = th_mkdtemp(); }
static void teardown(void)
{
    th_rmdir(tdir);
    free(tdir);
}

static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*n + 1);
    ck_assert_uint_eq(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

/* log-softmax in double, for the read-back check */
static void lsm(const float *l, int n, double *out)
{
    double mx = l[0], s = 0;
    for (int i = 1; i < n; i++)
        mx = l[i] > mx ? l[i] : mx;
    for (int i = 0; i < n; i++)
        s += exp(l[i] - mx);
    for (int i = 0; i < n; i++)
        out[i] = l[i] - mx - log(s);
}

START_TEST(layout_sizes)
{
    ck_assert_int_eq(gguf_kld_row_u16(5), 10);  /* 2*3 + 4 */
    ck_assert_int_eq(gguf_kld_row_u16(6), 10);
    ck_assert_int_eq(gguf_kld_row_u16(32000), 32004);
    ck_assert_int_eq(gguf_kld_first(512), 256);
    ck_assert_int_eq(gguf_kld_rows_per_chunk(512), 255);
    ck_assert_int_eq(gguf_kld_rows_per_chunk(7), 3); /* 7 - 1 - 3 */
}
END_TEST

START_TEST(quantize_row)
{
    /* max 0, smallest -20 clamped to max - 16 */
    const float l[5] = {0.0f, -1.0f, -2.0f, -20.0f, 0.0f};
    uint16_t row[10];
    memset(row, 0xAB, sizeof row);
    const double nll = gguf_kld_quantize_row(row, l, 5, 1);
    float scale, minlp;
    memcpy(&scale, row, 4);
    memcpy(&minlp, row + 2, 4);
    NEAR(scale, 16.0 / 65535.0, 1e-9);
    const double lse = log(2 + exp(-1.0) + exp(-2.0) + exp(-20.0));
    NEAR(minlp, -16.0 - lse, 1e-5);
    NEAR(nll, 1.0 + lse, 1e-5);
    ck_assert_uint_eq(row[4 + 0], 65535);
    ck_assert_uint_eq(row[4 + 4], 65535);
    ck_assert_uint_eq(row[4 + 3], 0);    /* below the clamp */
    ck_assert_uint_eq(row[4 + 1], (uint16_t)lrint(15.0 * 65535.0 / 16.0));
    ck_assert_uint_eq(row[9], 0);        /* padding */
    /* all equal: scale 0, every q 0 */
    const float flat[3] = {1.5f, 1.5f, 1.5f};
    uint16_t r2[8];
    gguf_kld_quantize_row(r2, flat, 3, 0);
    memcpy(&scale, r2, 4);
    memcpy(&minlp, r2 + 2, 4);
    ck_assert(scale == 0);
    NEAR(minlp, -log(3.0), 1e-6);
    ck_assert_uint_eq(r2[4] | r2[5] | r2[6] | r2[7], 0);
}
END_TEST

START_TEST(write_then_read)
{
    enum { V = 5, CTX = 8, CHUNKS = 2 };
    int32_t tokens[CTX * CHUNKS];
    for (int i = 0; i < CTX * CHUNKS; i++)
        tokens[i] = (i * 3 + 1) % V;
    char path[4096];
    snprintf(path, sizeof path, "%s/base.kld", tdir);
    gguf_kld_writer *w;
    gguf_error err;
    ck_assert_int_eq(gguf_kld_writer_create(&w, path, CTX, V, CHUNKS, tokens, NULL, &err), 0);
    const int rows = (int)gguf_kld_rows_per_chunk(CTX); /* 3 */
    float logits[CHUNKS][3][V];
    for (int c = 0; c < CHUNKS; c++)
        for (int j = 0; j < rows; j++)
            for (int v = 0; v < V; v++)
                logits[c][j][v] = (float)sin(1.0 + c * 7 + j * 3 + v) * 3.0f;
    for (int c = 0; c < CHUNKS; c++)
        ck_assert_int_eq(gguf_kld_writer_add_chunk(w, &logits[c][0][0], &err), 0);
    ck_assert_int_eq(gguf_kld_writer_add_chunk(w, &logits[0][0][0], &err), GGUF_E_INVALID);
    double ppl;
    ck_assert_int_eq(gguf_kld_writer_finish(w, &ppl, &err), 0);
    gguf_kld_writer_free(w);
    ck_assert(ppl > 1 && ppl < V * 100);

    /* the bytes, by the documented layout */
    size_t n;
    uint8_t *b = slurp(path, &n);
    ck_assert_uint_eq(n, 20 + 4 * CTX * CHUNKS + CHUNKS * rows * 10 * 2);
    ck_assert(memcmp(b, "_logits_", 8) == 0);
    int32_t h[3];
    memcpy(h, b + 8, 12);
    ck_assert(h[0] == CTX && h[1] == V && h[2] == CHUNKS);
    ck_assert(memcmp(b + 20, tokens, sizeof tokens) == 0);

    gguf_kld_file *f;
    ck_assert_int_eq(gguf_kld_open(&f, path, &err), 0);
    ck_assert_int_eq(gguf_kld_n_ctx(f), CTX);
    ck_assert_int_eq(gguf_kld_n_vocab(f), V);
    ck_assert_int_eq(gguf_kld_n_chunk(f), CHUNKS);
    ck_assert(memcmp(gguf_kld_tokens(f), tokens, sizeof tokens) == 0);
    for (int c = 0; c < CHUNKS; c++)
        for (int j = 0; j < rows; j++) {
            float lp[V], scale, minlp;
            double want[V];
            gguf_kld_row(f, c, j, &scale, &minlp, lp);
            lsm(logits[c][j], V, want);
            for (int v = 0; v < V; v++)
                NEAR(lp[v], want[v], scale); /* within one quantization step */
        }
    /* out of range: zeros */
    float s = 1, m = 1;
    gguf_kld_row(f, CHUNKS, 0, &s, &m, NULL);
    ck_assert(s == 0 && m == 0);

    /* the statistics of the model against its own file: only rounding */
    gguf_kld_acc *acc;
    ck_assert_int_eq(gguf_kld_acc_create(&acc, CHUNKS * rows, &err), 0);
    for (int c = 0; c < CHUNKS; c++)
        for (int j = 0; j < rows; j++)
            ck_assert_int_eq(gguf_kld_acc_add(acc, f, c, j, logits[c][j], &err), 0);
    ck_assert_int_eq(gguf_kld_acc_add(acc, f, 0, 0, logits[0][0], &err), GGUF_E_INVALID);
    gguf_kld_stats st;
    gguf_kld_acc_stats(acc, &st);
    ck_assert_int_eq(st.count, CHUNKS * rows);
    /* llama.cpp's per-row sum does not renormalise the decoded base, so the
     * uint16 rounding (half a step, 6/65535/2 here) shows to first order:
     * measured mean 1.9e-6, max 8.5e-6 */
    ck_assert(st.mean_kld < 1e-5 && st.max_kld < 5e-5);
    NEAR(st.same_top_p, 1.0, 0);
    ck_assert(st.rms_dp < 1e-3);
    NEAR(st.ppl, ppl, ppl * 1e-4);
    NEAR(st.ppl_base, ppl, ppl * 1e-3);
    gguf_kld_acc_free(acc);

    /* a shifted model: KL > 0, and top token moved where the shift is big */
    ck_assert_int_eq(gguf_kld_acc_create(&acc, CHUNKS * rows, &err), 0);
    for (int c = 0; c < CHUNKS; c++)
        for (int j = 0; j < rows; j++) {
            float other[V];
            for (int v = 0; v < V; v++)
                other[v] = logits[c][j][v] * 0.5f + (v == 0 ? 2.0f : 0.0f);
            ck_assert_int_eq(gguf_kld_acc_add(acc, f, c, j, other, &err), 0);
        }
    gguf_kld_acc_stats(acc, &st);
    ck_assert(st.mean_kld > 0.01);
    ck_assert(st.max_kld >= st.p99_kld && st.p99_kld >= st.median_kld &&
              st.median_kld >= st.min_kld);
    ck_assert(st.same_top_p < 1.0);
    gguf_kld_acc_free(acc);
    gguf_kld_free(f);
    free(b);
}
END_TEST

/* A file by hand: header, tokens, rows of (scale, min, q[V], pad). */
static void build(tbuf *b, const char *magic, int32_t ctx, int32_t vocab, int32_t chunks,
                  int32_t bad_token_at, float scale, float minlp)
{
    memset(b, 0, sizeof *b);
    tb_bytes(b, magic, 8);
    tb_u32(b, (uint32_t)ctx);
    tb_u32(b, (uint32_t)vocab);
    tb_u32(b, (uint32_t)chunks);
    for (int32_t i = 0; i < ctx * chunks; i++)
        tb_u32(b, (uint32_t)(i == bad_token_at ? vocab : vocab > 0 ? i % vocab : 0));
    const int64_t rows = (int64_t)chunks * (ctx - 1 - ctx / 2);
    const int64_t nv = 2 * ((vocab + 1) / 2) + 4;
    for (int64_t r = 0; r < rows; r++) {
        tb_bytes(b, &scale, 4);
        tb_bytes(b, &minlp, 4);
        for (int64_t k = 4; k < nv; k++) {
            uint16_t q = (uint16_t)(k * 1000);
            tb_bytes(b, &q, 2);
        }
    }
}

static void open_fails(const tbuf *b, size_t n, int code, const char *what)
{
    gguf_kld_file *f = NULL;
    gguf_error err;
    int rc = gguf_kld_open_memory(&f, b->p, n, "hand.kld", &err);
    ck_assert_msg(rc == code, "%s: got %s (%s)", what, gguf_status_name(rc), err.message);
    ck_assert_ptr_null(f);
    ck_assert_msg(strstr(err.message, what) != NULL, "'%s' not in '%s'", what, err.message);
}

START_TEST(hand_built)
{
    tbuf b;
    build(&b, "_logits_", 6, 3, 2, -1, 0.001f, -3.0f);
    gguf_kld_file *f;
    gguf_error err;
    ck_assert_int_eq(gguf_kld_open_memory(&f, b.p, b.n, "hand.kld", &err), 0);
    ck_assert_int_eq(gguf_kld_n_chunk(f), 2);
    ck_assert_int_eq(gguf_kld_tokens(f)[7], 7 % 3);
    float lp[3], scale, minlp;
    gguf_kld_row(f, 1, 1, &scale, &minlp, lp);
    NEAR(scale, 0.001, 1e-9);
    NEAR(lp[0], 0.001f * 4000 - 3.0f, 1e-5); /* q[0] = 4 * 1000 */
    NEAR(lp[2], 0.001f * 6000 - 3.0f, 1e-5);
    gguf_kld_free(f);

    open_fails(&b, b.n - 1, GGUF_E_TRUNCATED, "chunk 1, row 1");
    open_fails(&b, 20 + 4 * 6, GGUF_E_TRUNCATED, "tokens");
    open_fails(&b, 13, GGUF_E_TRUNCATED, "header");
    open_fails(&b, 4, GGUF_E_TRUNCATED, "magic");
    tb_u8(&b, 0);
    open_fails(&b, b.n, GGUF_E_BAD_VALUE, "1 bytes after the last row");
    tb_free(&b);

    build(&b, "_logitz_", 6, 3, 2, -1, 0.001f, -3.0f);
    open_fails(&b, b.n, GGUF_E_BAD_MAGIC, "magic");
    tb_free(&b);
    build(&b, "_logits_", 1, 3, 2, -1, 0.001f, -3.0f);
    open_fails(&b, b.n, GGUF_E_BAD_VALUE, "n_ctx");
    tb_free(&b);
    build(&b, "_logits_", 6, 0, 2, -1, 0.001f, -3.0f);
    open_fails(&b, b.n, GGUF_E_BAD_VALUE, "n_vocab");
    tb_free(&b);
    build(&b, "_logits_", 6, 3, 0, -1, 0.001f, -3.0f);
    open_fails(&b, b.n, GGUF_E_BAD_VALUE, "n_chunk");
    tb_free(&b);
    build(&b, "_logits_", 6, 3, 2, 5, 0.001f, -3.0f);
    open_fails(&b, b.n, GGUF_E_BAD_VALUE, "tokens[5]: id 3");
    tb_free(&b);
    build(&b, "_logits_", 6, 3, 2, -1, NAN, -3.0f);
    open_fails(&b, b.n, GGUF_E_BAD_VALUE, "chunk 0, row 0: scale");
    tb_free(&b);
    build(&b, "_logits_", 6, 3, 2, -1, 0.001f, 0.5f);
    open_fails(&b, b.n, GGUF_E_BAD_VALUE, "min_log_prob");
    tb_free(&b);
    build(&b, "_logits_", 6, 3, 1, -1, -0.001f, -3.0f);
    open_fails(&b, b.n, GGUF_E_BAD_VALUE, "scale");
    tb_free(&b);

    /* headers that claim too much */
    tbuf h = {0};
    tb_bytes(&h, "_logits_", 8);
    tb_u32(&h, (uint32_t)GGUF_KLD_MAX_CTX + 1);
    tb_u32(&h, 3);
    tb_u32(&h, 1);
    open_fails(&h, h.n, GGUF_E_LIMIT, "n_ctx");
    tb_free(&h);
    tb_bytes(&h, "_logits_", 8);
    tb_u32(&h, GGUF_KLD_MAX_CTX);
    tb_u32(&h, GGUF_KLD_MAX_VOCAB);
    tb_u32(&h, INT32_MAX);
    open_fails(&h, h.n, GGUF_E_OVERFLOW, "overflows");
    tb_free(&h);
    tb_bytes(&h, "_logits_", 8);
    tb_u32(&h, 100);
    tb_u32(&h, 100);
    tb_u32(&h, 100);
    open_fails(&h, h.n, GGUF_E_TRUNCATED, "tokens");
    tb_free(&h);
    /* NULL data and a missing file */
    gguf_kld_file *f2;
    ck_assert_int_eq(gguf_kld_open_memory(&f2, NULL, 0, NULL, &err), GGUF_E_TRUNCATED);
    ck_assert_int_eq(gguf_kld_open(&f2, "/nonexistent/x.kld", &err), GGUF_E_IO);
    gguf_kld_free(NULL);
}
END_TEST

START_TEST(writer_errors)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/w.kld", tdir);
    gguf_kld_writer *w;
    gguf_error err;
    int32_t tokens[8] = {0, 1, 2, 3, 4, 0, 1, 2};
    ck_assert_int_eq(gguf_kld_writer_create(&w, path, 1, 5, 1, tokens, NULL, &err),
                     GGUF_E_INVALID);
    tokens[3] = 5;
    ck_assert_int_eq(gguf_kld_writer_create(&w, path, 8, 5, 1, tokens, NULL, &err),
                     GGUF_E_INVALID);
    ck_assert(strstr(err.message, "token 3") != NULL);
    tokens[3] = 3;
    /* unfinished: nothing is left behind */
    ck_assert_int_eq(gguf_kld_writer_create(&w, path, 4, 5, 2, tokens, NULL, &err), 0);
    float l[5] = {0, 1, 2, 3, 4};
    ck_assert_int_eq(gguf_kld_writer_add_chunk(w, l, &err), 0);
    ck_assert_int_eq(gguf_kld_writer_finish(w, NULL, &err), GGUF_E_INVALID);
    gguf_kld_writer_free(w);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_null(f);
}
END_TEST

/* Every seed of fuzz_kld fails with the code its name carries, or opens (ok--). */
START_TEST(corpus_names)
{
    const char *src = getenv("GGUFKIT_SRC");
    ck_assert_msg(src != NULL, "GGUFKIT_SRC is not set");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus/kld", src);
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int checked = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        gguf_kld_file *f = NULL;
        gguf_error err;
        const int rc = gguf_kld_open(&f, path, &err);
        gguf_kld_free(f);
        if (strncmp(e->d_name, "ok--", 4) == 0) {
            ck_assert_msg(rc == 0, "%s: %s", e->d_name, err.message);
        } else {
            const char *sep = strstr(e->d_name, "--");
            ck_assert_ptr_nonnull(sep);
            char want[64];
            snprintf(want, sizeof want, "%.*s", (int)(sep - e->d_name), e->d_name);
            ck_assert_msg(strcmp(gguf_status_name(rc), want) == 0, "%s: got %s: %s", e->d_name,
                          gguf_status_name(rc), err.message);
            ck_assert_msg(strstr(err.message, e->d_name) != NULL, "%s: message lacks the file: %s",
                          e->d_name, err.message);
        }
        checked++;
    }
    closedir(d);
    ck_assert_int_ge(checked, 10);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kld");
    TCase *t = tcase_create("kld");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, layout_sizes);
    tcase_add_test(t, quantize_row);
    tcase_add_test(t, write_then_read);
    tcase_add_test(t, hand_built);
    tcase_add_test(t, writer_errors);
    tcase_add_test(t, corpus_names);
    suite_add_tcase(s, t);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
