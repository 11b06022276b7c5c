/*
 * The import module (gguf/import.h): map parsing, one test per malformed
 * class (the committed corpus tests/fuzz/corpus/import_map, each map named
 * after its error, plus line numbers and offsets), layouts, and resolving and
 * writing against small dumps made here (.npy through gguf/npy.h, safetensors
 * by hand): values land where the layout says, tokens, forward order, and
 * every dump-side error class.
 */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/dequant.h"
#include "gguf/import.h"
#include "gguf/npy.h"
#include "gguf/record.h"
#include "helper_buf.h"
#include "helper_corpus.h"

static gguf_import_map *parse_ok(const char *text)
{
    gguf_import_map *m = NULL;
    gguf_error err;
    ck_assert_msg(gguf_import_map_open_memory(&m, text, strlen(text), "t.map", &err) == 0, "%s: %s",
                  text, err.message);
    return m;
}

static void parse_fail(const char *text, int code, const char *needle, int64_t offset)
{
    gguf_import_map *m = NULL;
    gguf_error err;
    const int rc = gguf_import_map_open_memory(&m, text, strlen(text), "t.map", &err);
    ck_assert_msg(rc == code, "%s: expected %s, got %s: %s", text, gguf_status_name(code),
                  gguf_status_name(rc), err.message);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(err.message, needle) != NULL, "'%s' not in: %s", needle, err.message);
    if (offset >= 0)
        ck_assert_msg(err.offset == (uint64_t)offset, "offset %llu, wanted %lld",
                      (unsigned long long)err.offset, (long long)offset);
}

START_TEST(map_parse)
{
    gguf_import_map *m = parse_ok("# c\nbackend vllm\nlayout seq,layer,hidden\n"
                                  "tokens *.safetensors:token_ids\n"
                                  "*.safetensors:hidden_states[0] -> token_embd\n"
                                  "*.safetensors:hidden_states[i=1..-1]->blk.{i-1}.residual\n");
    ck_assert_int_eq(gguf_import_map_entry_count(m), 2);
    ck_assert_str_eq(gguf_import_map_backend(m), "vllm");
    gguf_import_map_free(m);
    /* line numbers and the line's offset in the map */
    parse_fail("backend a\n\nfoo bar\n", GGUF_E_BAD_VALUE, "t.map: line 3: 'foo': not a statement",
               11);
    parse_fail("layout layer,seq,hidden\nx.npy -> logits\n", GGUF_E_BAD_VALUE,
               "line 2: 'x.npy': the layout layer,seq,hidden has a layer axis", 24);
    parse_fail("x.npy[0] -> logits\n", GGUF_E_BAD_VALUE, "needs a layout with a layer axis", 0);
    parse_fail("l_{i}.npy -> blk.{j}.residual\n", GGUF_E_BAD_VALUE,
               "variable 'j' is not bound", -1);
    parse_fail("l_{i}.npy -> logits\n", GGUF_E_BAD_VALUE, "'i' is bound but not used", -1);
    parse_fail("tokens a.npy\ntokens b.npy\n", GGUF_E_DUPLICATE, "line 2: tokens given twice", 13);
}
END_TEST

START_TEST(layouts)
{
    gguf_import_layout l;
    gguf_error err;
    char buf[64];
    ck_assert_int_eq(gguf_import_layout_parse(&l, "layer,batch,seq,hidden", &err), 0);
    ck_assert_str_eq(gguf_import_layout_str(&l, buf, sizeof buf), "layer,batch,seq,hidden");
    ck_assert_int_eq(gguf_import_layout_parse(&l, "hidden,seq", &err), 0);
    ck_assert_int_eq(l.axis[0], GGUF_IMPORT_AXIS_HIDDEN);
    ck_assert_int_eq(gguf_import_layout_parse(&l, "seq,seq,hidden", &err), GGUF_E_INVALID);
    ck_assert(strstr(err.message, "'seq' twice"));
    ck_assert_int_eq(gguf_import_layout_parse(&l, "seq", &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_import_layout_parse(&l, "seq,hidden,", &err), GGUF_E_INVALID);
    ck_assert_int_eq(gguf_import_layout_parse(&l, "tokens,hidden", &err), GGUF_E_INVALID);
}
END_TEST

/* The committed corpus: GGUF_E_<CODE>--what.map fails with CODE; ok--* parses. */
static int corpus_one(const char *path, const char *name, gguf_error *err)
{
    (void)name;
    gguf_import_map *m = NULL;
    const int rc = gguf_import_map_open(&m, path, err);
    gguf_import_map_free(m);
    return rc;
}

START_TEST(corpus_named_errors)
{
    th_corpus_replay("import_map", corpus_one, 35);
}
END_TEST

/* ---- dumps ---- */

static char *dir;

static void npy(const char *name, const int64_t *shape, int nd, float (*f)(int64_t))
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    gguf_npy_writer *w;
    gguf_error err;
    ck_assert_int_eq(gguf_npy_writer_create_f32(&w, path, shape, nd, NULL, &err), 0);
    int64_t n = 1;
    for (int i = 0; i < nd; i++)
        n *= shape[i];
    for (int64_t i = 0; i < n; i++) {
        const float v = f(i);
        ck_assert_int_eq(gguf_npy_writer_append_f32(w, &v, 1, &err), 0);
    }
    ck_assert_int_eq(gguf_npy_writer_commit(w, &err), 0);
    gguf_npy_writer_free(w);
}

static float ident(int64_t i)
{
    return (float)i;
}

/* A safetensors file: JSON header and data written as given. */
static void st(const char *name, const char *json, const void *data, size_t n)
{
    tbuf b = {0};
    tb_u64(&b, strlen(json));
    tb_bytes(&b, json, strlen(json));
    tb_bytes(&b, data, n);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    ck_assert_int_eq(th_write_file(path, b.p, b.n), 0);
    tb_free(&b);
}

static int resolve(const char *text, gguf_import_plan **p, gguf_error *err)
{
    gguf_import_map *m = parse_ok(text);
    const int rc = gguf_import_resolve(p, m, dir, NULL, err);
    gguf_import_map_free(m);
    return rc;
}

static void resolve_fail(const char *text, int code, const char *needle)
{
    gguf_import_plan *p = NULL;
    gguf_error err;
    const int rc = resolve(text, &p, &err);
    ck_assert_msg(rc == code, "%s: expected %s, got %s: %s", text, gguf_status_name(code),
                  gguf_status_name(rc), err.message);
    ck_assert_msg(strstr(err.message, needle) != NULL, "'%s' not in: %s", needle, err.message);
    gguf_import_plan_free(p);
}

static void setup(void)
{
    dir = th_mkdtemp();
}

static void teardown(void)
{
    th_rmdir(dir);
    free(dir);
}

static gguf_record *write_open(const gguf_import_plan *p, const int32_t *tokens, uint64_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/out.gguf", dir);
    gguf_record_meta meta = {.model_digest = "", .backend = "test", .precision = "f32",
                             .plan_digest = "", .arch = "", .fault = "", .tokens = tokens,
                             .n_tokens = n};
    gguf_error err;
    const gguf_record_opts ro = {.overwrite = true, .no_sync = true};
    ck_assert_msg(gguf_import_plan_write(p, path, &meta, &ro, &err) == 0, "%s", err.message);
    gguf_record *r;
    ck_assert_msg(gguf_record_open(&r, path, &err) == 0, "%s", err.message);
    return r;
}

/* [3 layers, 4 tokens, 5 hidden] stacked: every capture holds its layer's slab. */
START_TEST(stacked_npy)
{
    const int64_t sh[3] = {3, 4, 5};
    npy("hs.npy", sh, 3, ident);
    gguf_import_plan *p;
    gguf_error err;
    ck_assert_int_eq(resolve("layout layer,seq,hidden\nhs.npy[-1] -> output_norm\n"
                             "hs.npy[0] -> token_embd\nhs.npy[i=1..-2] -> blk.{i-1}.residual\n",
                             &p, &err), 0);
    ck_assert_int_eq(gguf_import_plan_count(p), 3);
    ck_assert_int_eq(gguf_import_plan_n_tokens(p), 4);
    ck_assert_str_eq(gguf_import_plan_precision(p), "f32");
    /* forward order whatever the map's order */
    ck_assert_str_eq(gguf_import_plan_item(p, 0)->point, "token_embd");
    ck_assert_str_eq(gguf_import_plan_item(p, 1)->point, "blk.0.residual");
    ck_assert_str_eq(gguf_import_plan_item(p, 2)->point, "output_norm");
    ck_assert_int_eq(gguf_import_plan_item(p, 2)->index, 2);
    const int32_t tok[4] = {1, 2, 3, 4};
    gguf_record *r = write_open(p, tok, 4);
    for (int k = 0; k < 3; k++) {
        const gguf_capture *c = gguf_record_capture_at(r, k);
        ck_assert(c->ne[0] == 5 && c->ne[1] == 4);
        for (int i = 0; i < 20; i++)
            ck_assert(c->data[i] == (float)(k * 20 + i));
    }
    ck_assert_int_eq(gguf_record_get_meta(r)->n_tokens, 4);
    gguf_record_free(r);
    /* a token count that is not the sequence length */
    char path[4096];
    snprintf(path, sizeof path, "%s/bad.gguf", dir);
    gguf_record_meta meta = {.tokens = tok, .n_tokens = 3};
    ck_assert_int_eq(gguf_import_plan_write(p, path, &meta, NULL, &err), GGUF_E_BAD_VALUE);
    /* the output may not replace an input */
    snprintf(path, sizeof path, "%s/hs.npy", dir);
    meta.n_tokens = 0;
    ck_assert_int_eq(gguf_import_plan_write(p, path, &meta, NULL, &err), GGUF_E_EXISTS);
    ck_assert(strstr(err.message, "one of the dump's files"));
    gguf_import_plan_free(p);
}
END_TEST

/* [hidden, seq] per-layer files: transposed into [seq][hidden]; {i} from the file name. */
START_TEST(per_layer_transposed)
{
    const int64_t sh[2] = {5, 4};
    npy("layer_0.npy", sh, 2, ident);
    npy("layer_1.npy", sh, 2, ident);
    npy("other.npy", sh, 2, ident);
    gguf_import_plan *p;
    gguf_error err;
    ck_assert_int_eq(resolve("layout hidden,seq\nlayer_{i}.npy -> blk.{i}.ffn_out\n", &p, &err), 0);
    ck_assert_int_eq(gguf_import_plan_count(p), 2);
    ck_assert_str_eq(gguf_import_plan_item(p, 1)->point, "blk.1.ffn_out");
    gguf_record *r = write_open(p, NULL, 0);
    const gguf_capture *c = gguf_record_capture_find(r, "blk.1.ffn_out", 0);
    ck_assert_ptr_nonnull(c);
    ck_assert(c->ne[0] == 5 && c->ne[1] == 4);
    for (int t = 0; t < 4; t++)
        for (int h = 0; h < 5; h++)
            ck_assert(c->data[t * 5 + h] == (float)(h * 4 + t));
    gguf_record_free(r);
    gguf_import_plan_free(p);
}
END_TEST

/* vLLM's layout: safetensors BF16 [seq, layer, hidden] with I64 token_ids. */
START_TEST(vllm_safetensors)
{
    uint16_t h[3 * 2 * 4];
    for (int i = 0; i < 24; i++)
        h[i] = (uint16_t)(0x3F80 + i); /* 1.0, 1.0078125, ... */
    int64_t ids[3] = {7, 11, 1000000};
    uint8_t data[48 + 24];
    memcpy(data, h, 48);
    memcpy(data + 48, ids, 24);
    st("req-1.safetensors",
       "{\"hidden_states\":{\"dtype\":\"BF16\",\"shape\":[3,2,4],\"data_offsets\":[0,48]},"
       "\"token_ids\":{\"dtype\":\"I64\",\"shape\":[3],\"data_offsets\":[48,72]}}", data,
       sizeof data);
    gguf_import_plan *p;
    gguf_error err;
    ck_assert_int_eq(resolve("layout seq,layer,hidden\ntokens *.safetensors:token_ids\n"
                             "*.safetensors:hidden_states[0] -> token_embd\n"
                             "*.safetensors:hidden_states[i=1..-1] -> blk.{i-1}.residual\n",
                             &p, &err), 0);
    int64_t n;
    const int32_t *tk = gguf_import_plan_tokens(p, &n);
    ck_assert(n == 3 && tk[0] == 7 && tk[1] == 11 && tk[2] == 1000000);
    ck_assert_str_eq(gguf_import_plan_precision(p), "bf16");
    ck_assert_str_eq(gguf_import_plan_item(p, 1)->dtype, "BF16");
    gguf_record *r = write_open(p, tk, 3);
    const gguf_capture *c = gguf_record_capture_find(r, "blk.0.residual", 0);
    for (int t = 0; t < 3; t++)
        for (int j = 0; j < 4; j++)
            ck_assert(c->data[t * 4 + j] == gguf_bf16_to_fp32(h[t * 8 + 4 + j]));
    gguf_record_free(r);
    gguf_import_plan_free(p);
}
END_TEST

START_TEST(dump_errors)
{
    const int64_t s3[3] = {3, 4, 5}, s2[2] = {4, 5}, s2b[2] = {6, 5}, s4[4] = {3, 2, 4, 5};
    npy("hs.npy", s3, 3, ident);
    npy("a.npy", s2, 2, ident);
    npy("short.npy", s2b, 2, ident);
    npy("batch.npy", s4, 4, ident);
    uint8_t z[160] = {0};
    st("two.safetensors",
       "{\"a\":{\"dtype\":\"F32\",\"shape\":[4,5],\"data_offsets\":[0,80]},"
       "\"b\":{\"dtype\":\"F32\",\"shape\":[4,5],\"data_offsets\":[80,160]}}", z, 160);
    st("ids.safetensors", "{\"ids\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", z,
       16);
    char dummy[4096];
    snprintf(dummy, sizeof dummy, "%s/x.txt", dir);
    ck_assert_int_eq(th_write_file(dummy, "hi", 2), 0);

    resolve_fail("nothing_{i}.npy -> blk.{i}.residual\n", GGUF_E_NOT_FOUND,
                 "line 1: 'nothing_{i}.npy' matches nothing in");
    resolve_fail("a.npy -> logits\noptional none.npy -> output_norm\nx.txt -> token_embd\n",
                 GGUF_E_NOT_FOUND, "x.txt: neither .npy nor .safetensors");
    resolve_fail("hs.npy -> logits\n", GGUF_E_BAD_SHAPE,
                 "hs.npy: shape [3, 4, 5] has 3 dimensions, layout seq,hidden has 2");
    resolve_fail("layout layer,seq,hidden\nhs.npy[3] -> logits\n", GGUF_E_BAD_SHAPE,
                 "index [3] outside the 3 positions of the layer axis");
    resolve_fail("layout layer,seq,hidden\nhs.npy[i=2..1] -> blk.{i}.residual\n",
                 GGUF_E_BAD_SHAPE, "selects nothing");
    resolve_fail("layout layer,seq,hidden\nhs.npy[i=0..1] -> blk.{i-1}.residual\n",
                 GGUF_E_BAD_VALUE, "{i-1} is -1 (negative) when i = 0");
    resolve_fail("a.npy -> logits\nlayout layer,seq,hidden\nhs.npy[0] -> logits\n",
                 GGUF_E_DUPLICATE, "line 1 and line 3 both give logits");
    resolve_fail("a.npy -> logits\nshort.npy -> output_norm\n", GGUF_E_BAD_SHAPE,
                 "output_norm has 6 tokens");
    resolve_fail("two.safetensors -> logits\n", GGUF_E_BAD_VALUE, "holds 2 tensors: name one");
    resolve_fail("a.npy:t -> logits\n", GGUF_E_NOT_FOUND, "a tensor name needs a .safetensors");
    resolve_fail("a.npy -> logits\ntokens ids.safetensors:ids\n", GGUF_E_BAD_TYPE,
                 "dtype F32 is not an integer type");
    resolve_fail("a.npy -> logits\ntokens hs.npy\n", GGUF_E_BAD_SHAPE, "not 1-D");
    resolve_fail("layout layer,batch,seq,hidden\nbatch.npy[0] -> logits\n", GGUF_E_BAD_SHAPE,
                 "the batch axis (layout layer,batch,seq,hidden) holds 2, not 1");
    resolve_fail("a.npy -> blk.x.residual\n", GGUF_E_BAD_VALUE,
                 "'blk.x.residual' (for");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("import");
    TCase *tc = tcase_create("map");
    tcase_add_test(tc, map_parse);
    tcase_add_test(tc, layouts);
    tcase_add_test(tc, corpus_named_errors);
    suite_add_tcase(s, tc);
    TCase *td = tcase_create("dump");
    tcase_add_checked_fixture(td, setup, teardown);
    tcase_add_test(td, stacked_npy);
    tcase_add_test(td, per_layer_transposed);
    tcase_add_test(td, vllm_safetensors);
    tcase_add_test(td, dump_errors);
    suite_add_tcase(s, td);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
