/*
 * gguf-dequant-verify: dequantize every tensor of a GGUF file or split set and
 * check it: statistics, non-finite values, suspicious block scales; optionally
 * against the original safetensors (--reference), against the GPU kernels
 * (--gpu), or dump one tensor as .npy (--dump). Schema and examples:
 * docs/gguf-dequant-verify.md.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cli.h"
#include "dequant_verify.h"
#include "gguf/npy.h"
#include "gguf/types.h"

enum {
    OPT_TENSOR = 256,
    OPT_DUMP,
    OPT_REFERENCE,
    OPT_ALLOW_NONFINITE,
    OPT_JSON,
    OPT_GPU,
    OPT_THREADS,
    OPT_PATH,
    OPT_CHUNK,
};

static const cli_opt options[] = {
    {OPT_TENSOR, "tensor", 1, "NAME|REGEX",
     "only this tensor (exact name), else the tensors matching REGEX (POSIX ERE)"},
    {OPT_DUMP, "dump", 1, "OUT.npy",
     "write the one selected tensor as float32 .npy, shape = reversed ggml ne"},
    {OPT_REFERENCE, "reference", 1, "DIR|INDEX|FILE",
     "compare with the original safetensors checkpoint (any dtype, block-scaled FP8, NVFP4): "
     "relative RMS and SNR, and the worst block of its scale grid and the worst row; one far "
     "out of line with the rest of its tensor fails it"},
    {OPT_ALLOW_NONFINITE, "allow-nonfinite", 0, NULL, "NaN/Inf in the output is not a failure"},
    {OPT_JSON, "json", 0, NULL, "machine-readable output (schema: docs/gguf-dequant-verify.md)"},
    {OPT_GPU, "gpu", 2, "[auto]",
     "also check the CUDA dequantization equals the CPU bit for bit; no GPU is an error (exit 3), "
     "or a skip with --gpu auto"},
    {OPT_THREADS, "threads", 1, "N", "dequantization threads (default: one per CPU it may use)"},
    {OPT_PATH, "path", 1, "NAME", "CPU implementation: auto, scalar, portable, avx2"},
    {OPT_CHUNK, "chunk", 1, "SIZE", "floats held per tensor at a time (default 16M)"},
    {CLI_OPT_QUIET, "quiet", 0, NULL, "only the failing tensors and the summary (default: every tensor)"},
    {0, NULL, 0, NULL, NULL},
};

static const cli_spec spec = {
    "gguf-dequant-verify",
    "[OPTIONS] MODEL.gguf",
    "Dequantize every tensor of a GGUF file, or of a whole split set given any of its\n"
    "parts, and report per tensor: type, shape, min, max, mean, std, absmax, NaN and Inf\n"
    "counts, and blocks with zero, NaN, Inf or subnormal scales. Exit 1 when a value is\n"
    "not finite (unless --allow-nonfinite), when a tensor is far from its --reference or\n"
    "one block or row of it is far out of line with the rest (a wrong scale), or when\n"
    "--gpu finds a difference. Memory stays bounded: a chunk of one tensor at a time.",
    options,
    "  gguf-dequant-verify model-00001-of-00010.gguf\n"
    "  gguf-dequant-verify --json --tensor 'blk\\.3\\.' model.gguf\n"
    "  gguf-dequant-verify --tensor blk.0.attn_q.weight --dump q.npy model.gguf\n"
    "  gguf-dequant-verify --reference hf-checkpoint/ model-q8_0.gguf\n"
    "  gguf-dequant-verify --reference GLM-5-FP8/model.safetensors.index.json glm5.gguf\n"
    "  gguf-dequant-verify --gpu auto -q model.gguf\n",
};

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

static int dv_fail_oom(gguf_error *err, const char *what)
{
    return gguf_error_setf(err, GGUF_E_NOMEM, ENOMEM, "%s: out of memory", what);
}

static int dv_fail_interrupted(gguf_error *err)
{
    return gguf_error_setf(err, GGUF_E_INTERRUPTED, 0, "interrupted");
}

typedef struct pending_kvb {
    int64_t layer;
    const gguf_tensor *k, *v;
    float *kx, *vx;
} pending_kvb;

typedef struct run_state {
    const dv_opts *o;
    gguf_set *set;
    gguf_st_set *st;
    dv_model_info mi;
    gguf_dequant_pool *pool;
    float *buf;
    uint64_t buf_elems;
    int name_width;
    /* --json: the report, printed whole at the end (one line) */
    json_t *json_doc;     /* {model, parts, cpu_path, threads, tensors} */
    json_t *json_tensors; /* borrowed from json_doc */
    json_t *json_kvb;     /* "kv_b_proj", added with the summary */
    bool json_oom;
    /* totals */
    int64_t n_tensors, n_nonfinite_tensors, n_ref_fail, n_ref_ok, n_ref_missing, n_gpu_diff;
    int64_t n_ref_outlier; /* of n_ref_fail: a block or row out of line, the SNR passing */
    uint64_t total_nan, total_inf;
    bool gpu_ok;
    bool gpu_failed; /* the GPU was there but a CUDA call failed mid-run */
    char gpu_why[256];
    dv_gpu *gpu;     /* the GPU check (--gpu, a GPU there) */
    pending_kvb *kvb;
    int64_t n_kvb;
    int64_t n_kvb_fail;
    cli_progress progress;
    uint64_t bytes_done;
} run_state;

static bool selected(const dv_opts *o, const gguf_set *s, const gguf_tensor *t)
{
    if (!o->tensor)
        return true;
    if (gguf_set_tensor_find(s, o->tensor))
        return strcmp(t->name, o->tensor) == 0;
    return o->have_regex && regexec(&o->regex, t->name, 0, NULL, 0) == 0;
}

static void print_ne(FILE *f, const gguf_tensor *t)
{
    const int nd = t->n_dims ? (int)t->n_dims : 1;
    fputc('[', f);
    for (int i = 0; i < nd; i++)
        fprintf(f, "%s%lld", i ? ", " : "", (long long)t->ne[i]);
    fputc(']', f);
}

/* The unit's place on the reference's grid: rows [r0, r1), cols [c0, c1),
 * the expert for a stack of experts. */
static void unit_span(const dv_unit_report *u, int64_t *expert, int64_t *r0, int64_t *r1,
                      int64_t *c0, int64_t *c1)
{
    const int64_t mr = u->mat_rows > 0 ? u->mat_rows : 1;
    const int64_t in_mat = u->worst.row % mr; /* units never cross matrices */
    *expert = u->experts ? u->worst.row / mr : -1;
    *r0 = u->experts ? in_mat : u->worst.row;
    *r1 = *r0 + (u->unit_rows < mr - in_mat ? u->unit_rows : mr - in_mat);
    *c0 = u->worst.col;
    *c1 = *c0 + u->unit_cols < u->mat_cols ? *c0 + u->unit_cols : u->mat_cols;
}

static double unit_snr_db(const dv_unit *u)
{
    if (isnan(u->err))
        return -INFINITY;
    return u->err > 0 ? 10.0 * log10(u->sig / u->err) : INFINITY;
}

/* "worst block [r0:r1, c0:c1] of N (BRxBC): SNR .. dB (median ..) excess .. dB  ok|FLAGGED..."
 * ("worst row R of N: ..."; in a stack of experts "... in expert E, of N"). */
static void print_units(FILE *f, int indent, const char *what, const dv_unit_report *u)
{
    if (!u->have || u->worst_excess_db == -INFINITY)
        return; /* every unit exact: nothing to name */
    int64_t e, r0, r1, c0, c1;
    unit_span(u, &e, &r0, &r1, &c0, &c1);
    const bool row = !strcmp(what, "row");
    fprintf(f, "%*sworst %s ", indent, "", what);
    if (row)
        fprintf(f, "%lld", (long long)r0);
    else
        fprintf(f, "[%lld:%lld, %lld:%lld]", (long long)r0, (long long)r1, (long long)c0,
                (long long)c1);
    if (e >= 0)
        fprintf(f, " in expert %lld,", (long long)e);
    fprintf(f, " of %llu", (unsigned long long)u->count);
    if (!row)
        fprintf(f, " (%lldx%lld)", (long long)u->unit_rows, (long long)u->unit_cols);
    fprintf(f, ": SNR %.1f dB (median %.1f) excess %.1f dB  ", unit_snr_db(&u->worst),
            u->median_snr_db, u->worst_excess_db);
    if (u->flagged)
        fprintf(f, "FLAGGED: %llu %s%s out of line\n", (unsigned long long)u->flagged, what,
                u->flagged > 1 ? "s" : "");
    else
        fprintf(f, "ok\n");
}

static bool ref_failed(const dv_ref_result *r)
{
    return !strcmp(r->status, "fail") || !strcmp(r->status, "shape");
}

/* ---- the JSON report (schema: docs/gguf-dequant-verify.md) ----
 *
 * Built as jansson values while the tensors are verified and printed whole at
 * the end, on one line. A value that could not be built (out of memory) drops
 * the whole report, and the end says so (exit 3): never a report missing a key.
 * Counts are uint64_t but bounded by the elements of the file's tensors, far
 * below 2^63, so json_int_t holds them. */

/* o[key] = v, v consumed; on failure o is released and NULL comes back. */
static json_t *json_with(json_t *o, const char *key, json_t *v)
{
    if (json_object_set_new(o, key, v) == 0)
        return o;
    json_decref(o);
    return NULL;
}

/* Out of memory: the report goes, and json_report_print says so. */
static void json_report_drop(run_state *rs)
{
    json_decref(rs->json_doc);
    json_decref(rs->json_kvb);
    rs->json_doc = rs->json_tensors = rs->json_kvb = NULL;
    rs->json_oom = true;
}

/* Append v (consumed) to one of the report's arrays. */
static void json_report_add(run_state *rs, json_t *array, json_t *v)
{
    if (json_array_append_new(array, v) != 0)
        json_report_drop(rs);
}

/* ne in ggml order, or numpy's shape (reversed). */
static json_t *json_ne(const gguf_tensor *t, bool numpy)
{
    const int nd = t->n_dims ? (int)t->n_dims : 1;
    json_t *a = json_array();
    for (int i = 0; a && i < nd; i++)
        if (json_array_append_new(a, json_integer(t->ne[numpy ? nd - 1 - i : i])) != 0) {
            json_decref(a);
            a = NULL;
        }
    return a;
}

static json_t *json_worst_unit(const dv_unit_report *u)
{
    int64_t e, r0, r1, c0, c1;
    unit_span(u, &e, &r0, &r1, &c0, &c1);
    const dv_unit *w = &u->worst;
    return json_pack("{s:o, s:[I, I], s:[I, I], s:o, s:o, s:o, s:b}",
        "expert", e >= 0 ? json_integer(e) : json_null(),
        "rows", (json_int_t)r0, (json_int_t)r1, "cols", (json_int_t)c0, (json_int_t)c1,
        "snr_db", cli_json_number(unit_snr_db(w)),
        "rel_rms", cli_json_number(w->sig > 0 ? sqrt(w->err / w->sig) : NAN),
        "excess_db", cli_json_number(u->worst_excess_db),
        "flagged", u->worst_excess_db >= DV_OUTLIER_DB);
}

static json_t *json_units(const dv_unit_report *u)
{
    if (!u->have)
        return json_null();
    return json_pack("{s:[I, I], s:I, s:I, s:o, s:o, s:b, s:o}",
        "unit", (json_int_t)u->unit_rows, (json_int_t)u->unit_cols,
        "count", (json_int_t)u->count, "flagged", (json_int_t)u->flagged,
        "median_snr_db", cli_json_number(u->median_snr_db),
        "threshold_db", cli_json_number(DV_OUTLIER_DB),
        "medians_from_first", u->from_first, "worst", json_worst_unit(u));
}

static json_t *json_ref(const dv_ref_result *r)
{
    return json_pack("{s:o, s:o, s:o, s:o, s:b, s:o, s:o, s:o, s:o, s:b, s:o, s:o}",
        "hf_name", cli_json_text(r->hf_name, SIZE_MAX),
        "status", cli_json_text(r->status, SIZE_MAX),
        "rel_rms", cli_json_number(r->compared ? r->rel_rms : NAN),
        "snr_db", cli_json_number(r->compared ? r->snr_db : NAN),
        "exact", r->compared && r->err_sq == 0,
        "ref_dtype", cli_json_text(r->ref_dtype, SIZE_MAX),
        "ref_format", cli_json_text(r->ref_format, SIZE_MAX),
        "expect_snr_db", cli_json_number(r->expect_snr_db),
        "note", cli_json_text(r->note, SIZE_MAX),
        "outlier", r->outlier, "blocks", json_units(&r->blocks), "rows", json_units(&r->rows));
}

static json_t *json_suspicious(const dv_stats *s)
{
    return json_pack("{s:I, s:I, s:I, s:I, s:I}",
        "zero_scale", (json_int_t)s->blk_zero, "nan_scale", (json_int_t)s->blk_nan,
        "inf_scale", (json_int_t)s->blk_inf, "subnormal_scale", (json_int_t)s->blk_subnormal,
        "bad_scale_encoding", (json_int_t)s->blk_bad_encoding);
}

/* Statistics over the finite values: null where there is none. */
static json_t *json_tensor_stats(const gguf_tensor *t, const dv_stats *s)
{
    const bool any = s->n_finite > 0;
    return json_pack("{s:o, s:s, s:o, s:o, s:I, s:o, s:o, s:o, s:o, s:o, s:I, s:I, s:I, s:o}",
        "name", cli_json_text(t->name, SIZE_MAX), "type", gguf_type_name(t->type),
        "ne", json_ne(t, false), "shape", json_ne(t, true), "n_elements", (json_int_t)t->n_elements,
        "min", cli_json_number(any ? s->min : NAN), "max", cli_json_number(any ? s->max : NAN),
        "mean", cli_json_number(dv_stats_mean(s)), "std", cli_json_number(dv_stats_std(s)),
        "absmax", cli_json_number(any ? s->absmax : NAN),
        "nan", (json_int_t)s->n_nan, "inf", (json_int_t)s->n_inf,
        "blocks", (json_int_t)s->n_blocks, "suspicious_blocks", json_suspicious(s));
}

/* gpu_state: -1 not run, 0 equal, 1 different. */
static json_t *json_tensor(const gguf_tensor *t, const dv_stats *s, const dv_ref_result *ref,
                           int gpu_state, uint64_t gpu_diff)
{
    json_t *o = json_tensor_stats(t, s);
    if (ref)
        o = json_with(o, "reference", json_ref(ref));
    if (gpu_state >= 0)
        o = json_with(o, "gpu", json_pack("{s:s, s:I}", "status", gpu_state ? "different" : "equal",
                                          "differing", (json_int_t)gpu_diff));
    return o;
}

/* The report's head, its "tensors" still empty, and the "kv_b_proj" array. */
static void json_report_start(run_state *rs)
{
    const dv_opts *o = rs->o;
    rs->json_doc = json_pack("{s:o, s:I, s:s, s:i, s:[]}",
        "model", cli_json_text(o->model, SIZE_MAX),
        "parts", (json_int_t)gguf_set_part_count(rs->set),
        "cpu_path", gguf_dequant_path_name(o->path ? o->path : (int)gguf_dequant_best_path()),
        "threads", gguf_dequant_pool_size(rs->pool), "tensors");
    rs->json_tensors = json_object_get(rs->json_doc, "tensors");
    rs->json_kvb = json_array();
    if (!rs->json_tensors || !rs->json_kvb)
        json_report_drop(rs);
}

static json_t *json_gpu_summary(const run_state *rs)
{
    if (!rs->o->gpu)
        return json_null();
    if (!rs->gpu_ok)
        return json_pack("{s:s, s:o}", "status", rs->gpu_failed ? "failed" : "skipped",
                         "reason", cli_json_text(rs->gpu_why, SIZE_MAX));
    return json_pack("{s:s, s:I, s:o}", "status", rs->n_gpu_diff ? "different" : "equal",
                     "tensors_different", (json_int_t)rs->n_gpu_diff,
                     "device", cli_json_text(rs->gpu_why, SIZE_MAX));
}

static json_t *json_summary(const run_state *rs, bool ok)
{
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:b}",
        "tensors", (json_int_t)rs->n_tensors,
        "nonfinite_tensors", (json_int_t)rs->n_nonfinite_tensors,
        "nan", (json_int_t)rs->total_nan, "inf", (json_int_t)rs->total_inf,
        "reference_ok", (json_int_t)rs->n_ref_ok, "reference_failed", (json_int_t)rs->n_ref_fail,
        "reference_outliers", (json_int_t)rs->n_ref_outlier,
        "reference_missing", (json_int_t)rs->n_ref_missing, "gpu", json_gpu_summary(rs), "ok", ok);
}

/* Print the report as it stands. @return 0, or CLI_EXIT_ENV (said). */
static int json_report_print(run_state *rs)
{
    json_t *doc = rs->json_doc;
    rs->json_doc = rs->json_tensors = NULL;
    if (rs->json_oom) {
        cli_errorf(spec.tool, "out of memory building the JSON report");
        return CLI_EXIT_ENV;
    }
    if (cli_json_print_report(stdout, spec.tool, doc) != 0) {
        cli_errorf(spec.tool, "cannot write the JSON report");
        return CLI_EXIT_ENV;
    }
    return 0;
}

/* The whole report: the head and tensors, then "kv_b_proj" and "summary". */
static int json_report_finish(run_state *rs, bool ok)
{
    json_t *kvb = rs->json_kvb;
    rs->json_kvb = NULL;
    rs->json_doc = json_with(rs->json_doc, "kv_b_proj", kvb);
    rs->json_doc = json_with(rs->json_doc, "summary", json_summary(rs, ok));
    if (!rs->json_doc)
        json_report_drop(rs);
    return json_report_print(rs);
}

/* ---- the text report ---- */

static void print_suspicious(FILE *f, const dv_stats *s)
{
    const uint64_t susp = s->blk_zero + s->blk_nan + s->blk_inf + s->blk_subnormal +
                          s->blk_bad_encoding;
    if (!susp)
        return;
    fprintf(f, "  suspicious blocks:");
    if (s->blk_zero)
        fprintf(f, " %llu zero-scale", (unsigned long long)s->blk_zero);
    if (s->blk_nan)
        fprintf(f, " %llu NaN-scale", (unsigned long long)s->blk_nan);
    if (s->blk_inf)
        fprintf(f, " %llu Inf-scale", (unsigned long long)s->blk_inf);
    if (s->blk_subnormal)
        fprintf(f, " %llu subnormal-scale", (unsigned long long)s->blk_subnormal);
    if (s->blk_bad_encoding)
        fprintf(f, " %llu bad-scale-byte", (unsigned long long)s->blk_bad_encoding);
    fprintf(f, " (of %llu)", (unsigned long long)s->n_blocks);
}

/* "NAME TYPE [ne]  min .. max .. mean .. std .. absmax ..  NaN .. Inf ..  suspicious blocks: .." */
static void print_tensor_line(FILE *f, int name_width, const gguf_tensor *t, const dv_stats *s)
{
    fprintf(f, "%-*s %-7s ", name_width, t->name, gguf_type_name(t->type));
    print_ne(f, t);
    if (s->n_finite)
        fprintf(f, "  min %.6g max %.6g mean %.6g std %.6g absmax %.6g", s->min, s->max,
                dv_stats_mean(s), dv_stats_std(s), s->absmax);
    else if (t->n_elements)
        fprintf(f, "  no finite value");
    if (s->n_nan + s->n_inf > 0)
        fprintf(f, "  NaN %llu Inf %llu", (unsigned long long)s->n_nan,
                (unsigned long long)s->n_inf);
    print_suspicious(f, s);
    fputc('\n', f);
}

/* "   vs HF_NAME (DTYPE FORMAT): SNR .. dB (expected >= ..) rel-RMS ..  ok|FAIL", and the worst
 * block and row; or why there was nothing to compare. */
static void print_ref_lines(FILE *f, int name_width, const dv_ref_result *ref)
{
    const bool plain = !strcmp(ref->ref_format, "plain");
    if (!ref->compared) {
        fprintf(f, "%*s   vs %s: %s%s%s\n", name_width, "", ref->hf_name[0] ? ref->hf_name : "-",
                !strcmp(ref->status, "shape") ? "SHAPE MISMATCH" : ref->status,
                ref->note[0] ? ": " : "", ref->note);
        return;
    }
    fprintf(f, "%*s   vs %s (%s%s%s): SNR %.1f dB (expected >= %.0f) rel-RMS %.3g  %s%s%s\n",
            name_width, "", ref->hf_name, ref->ref_dtype, plain ? "" : " ",
            plain ? "" : ref->ref_format, ref->snr_db, ref->expect_snr_db, ref->rel_rms,
            !strcmp(ref->status, "ok") ? "ok" : "FAIL", ref->note[0] ? "  " : "", ref->note);
    print_units(f, name_width + 3, "block", &ref->blocks);
    print_units(f, name_width + 3, "row", &ref->rows);
}

/* One verified tensor: an entry of the JSON report, or its lines of text (every tensor
 * with -v, the failing ones by default). gpu_state: -1 not run, 0 equal, 1 different. */
static void report_tensor(run_state *rs, const gguf_tensor *t, const dv_stats *s,
                          const dv_ref_result *ref, int gpu_state, uint64_t gpu_diff)
{
    const dv_opts *o = rs->o;
    FILE *f = stdout;
    if (o->json) {
        json_report_add(rs, rs->json_tensors, json_tensor(t, s, ref, gpu_state, gpu_diff));
        return;
    }
    const bool nonfinite = s->n_nan + s->n_inf > 0;
    const bool bad =
        (nonfinite && !o->allow_nonfinite) || (ref && ref_failed(ref)) || gpu_state > 0;
    if (cli_verbosity == 0 && !bad)
        return;
    print_tensor_line(f, rs->name_width, t, s);
    if (ref)
        print_ref_lines(f, rs->name_width, ref);
    if (gpu_state > 0)
        fprintf(f, "%*s   GPU: %llu elements differ from the CPU reference\n", rs->name_width, "",
                (unsigned long long)gpu_diff);
}

static int ensure_buf(run_state *rs, uint64_t elems)
{
    if (elems <= rs->buf_elems)
        return 0;
    float *b = realloc(rs->buf, sizeof(float) * elems);
    if (!b)
        return -1;
    rs->buf = b;
    rs->buf_elems = elems;
    return 0;
}

static pending_kvb *kvb_slot(run_state *rs, int64_t layer)
{
    for (int64_t i = 0; i < rs->n_kvb; i++)
        if (rs->kvb[i].layer == layer)
            return &rs->kvb[i];
    pending_kvb *n = realloc(rs->kvb, sizeof *n * (size_t)(rs->n_kvb + 1));
    if (!n)
        return NULL;
    rs->kvb = n;
    rs->kvb[rs->n_kvb] = (pending_kvb){.layer = layer};
    return &rs->kvb[rs->n_kvb++];
}

static void report_kvb(run_state *rs, const dv_ref_result *r, int64_t layer)
{
    FILE *f = stdout;
    const bool bad = ref_failed(r);
    rs->n_kvb_fail += bad;
    if (rs->o->json) {
        json_report_add(rs, rs->json_kvb, json_pack("{s:I, s:o}", "layer", (json_int_t)layer,
                                                    "reference", json_ref(r)));
        return;
    }
    if (cli_verbosity == 0 && !bad)
        return;
    fprintf(f, "blk.%lld kv_b_proj (attn_k_b + attn_v_b): ", (long long)layer);
    if (r->compared)
        fprintf(f, "vs kv_b_proj (%s%s%s): SNR %.1f dB (expected >= %.0f) rel-RMS %.3g %s\n",
                r->ref_dtype, strcmp(r->ref_format, "plain") ? " " : "",
                strcmp(r->ref_format, "plain") ? r->ref_format : "", r->snr_db, r->expect_snr_db, r->rel_rms,
                !strcmp(r->status, "ok") ? "ok" : "FAIL");
    else
        fprintf(f, "%s: %s\n", r->status, r->note);
    if (r->compared) {
        print_units(f, 2, "block", &r->blocks);
        print_units(f, 2, "row", &r->rows);
    }
}

/* Done with these file bytes: drop their pages from this process (a read-only
 * file mapping reads them again on demand), so RSS stays about one chunk even
 * over a 400 GB model. Only whole pages inside the range. */
static void drop_pages(const uint8_t *p, uint64_t n)
{
    static uintptr_t page;
    if (!page) {
        const long ps = sysconf(_SC_PAGESIZE);
        page = ps > 0 ? (uintptr_t)ps : 4096;
    }
    uintptr_t b = ((uintptr_t)p + page - 1) & ~(page - 1);
    const uintptr_t e = ((uintptr_t)p + (uintptr_t)n) & ~(page - 1);
    if (e > b)
        madvise((void *)b, e - b, MADV_DONTNEED);
}

/* Rows of t dequantized at a time: --chunk floats' worth, at least one row,
 * at most the tensor. */
static int64_t chunk_rows_of(const dv_opts *o, const gguf_tensor *t)
{
    const int64_t ne0 = t->ne[0] > 0 ? t->ne[0] : 1;
    const int64_t n_rows = t->n_elements / ne0;
    int64_t chunk_rows = (int64_t)(o->chunk_elems / (uint64_t)ne0);
    if (chunk_rows < 1)
        chunk_rows = 1;
    if (chunk_rows > n_rows)
        chunk_rows = n_rows > 0 ? n_rows : 1;
    return chunk_rows;
}

/* The GPU check failed mid-run: said once on stderr; the run goes on without
 * it and ends with exit 3. */
static void gpu_stop(run_state *rs, const char *why)
{
    rs->gpu_ok = false;
    rs->gpu_failed = true;
    snprintf(rs->gpu_why, sizeof rs->gpu_why, "stopped: %.200s", why);
    fprintf(stderr, "%s: --gpu: %s\n", spec.tool, rs->gpu_why);
}

/* One tensor, chunk by chunk. Returns 0, 1 (this tensor failed), or a
 * negative gguf status for errors that stop the run.
 *
 * With --gpu, a chunk is decoded into one of the GPU checker's pinned buffers
 * and submitted at once, before its statistics: the GPU uploads, dequantizes
 * and compares it while the CPU computes them and decodes the next chunks,
 * and the tensor's count of differing elements is read at its end. The
 * statistics, the reference comparison and --dump only read the buffer. */
static int verify_tensor(run_state *rs, const gguf_tensor *t, gguf_npy_writer *npy,
                         gguf_error *err)
{
    const dv_opts *o = rs->o;
    const int64_t ne0 = t->ne[0] > 0 ? t->ne[0] : 1;
    const int64_t n_rows = t->n_elements / ne0;
    uint64_t row_bytes = 0;
    gguf_type_row_bytes(t->type, ne0, &row_bytes);
    const int64_t chunk_rows = chunk_rows_of(o, t);
    /* attn_k_b / attn_v_b are kept whole for the kv_b_proj reassembly */
    const bool keep = rs->st && dv_ref_is_kv_b_part(t->name);
    float *whole = NULL;
    if (keep) {
        whole = malloc(sizeof(float) * (size_t)(t->n_elements ? t->n_elements : 1));
        if (!whole)
            return dv_fail_oom(err, t->name);
    }
    if (ensure_buf(rs, (uint64_t)(chunk_rows * ne0)) != 0) {
        free(whole);
        return dv_fail_oom(err, t->name);
    }
    dv_stats s;
    dv_stats_init(&s);
    dv_ref_result ref;
    dv_ref_map map = {0};
    bool have_ref = false;
    if (rs->st && !keep) {
        dv_ref_begin(&ref, &map, &rs->mi, rs->st, t);
        have_ref = true;
    }
    const gguf_type_info *ti = gguf_type_get(t->type);
    int gpu_state = -1;
    uint64_t gpu_diff = 0;
    if (o->gpu && rs->gpu_ok)
        gpu_state = 0;
    gguf_dequant_opts dopt = {.path = o->path, .pool = rs->pool};
    int rc = 0;
    for (int64_t r0 = 0; r0 < n_rows; r0 += chunk_rows) {
        if (interrupted) {
            rc = dv_fail_interrupted(err);
            break;
        }
        const int64_t nr = n_rows - r0 < chunk_rows ? n_rows - r0 : chunk_rows;
        const uint8_t *src = t->data + (uint64_t)r0 * row_bytes;
        float *dst = keep ? whole + r0 * ne0 : rs->buf;
        char why[256];
        if (gpu_state >= 0 && !keep) {
            float *pinned = NULL;
            if (dv_gpu_buffer(rs->gpu, t->type, (uint64_t)(nr * ne0), &pinned, why,
                              sizeof why) != 0) {
                gpu_state = -1;
                gpu_stop(rs, why);
            } else if (pinned) {
                dst = pinned;
            }
        }
        rc = gguf_dequant_rows(t->type, src, row_bytes, dst, ne0, nr, &dopt, err);
        if (rc != 0)
            break;
        if (gpu_state >= 0 && dv_gpu_submit(rs->gpu, t, dst, r0, nr, why, sizeof why) != 0) {
            gpu_state = -1;
            gpu_stop(rs, why);
        }
        dv_stats_add(&s, dst, (uint64_t)(nr * ne0), gguf_dequant_pool_size(rs->pool));
        if (ti->quantized)
            dv_scan_scales(&s, t->type, src, (uint64_t)nr * (uint64_t)(ne0 / ti->block_size));
        if (have_ref)
            dv_ref_rows(&ref, &map, t, dst, r0, nr);
        if (npy && (rc = gguf_npy_writer_append_f32(npy, dst, (uint64_t)(nr * ne0), err)) != 0)
            break;
        drop_pages(src, (uint64_t)nr * row_bytes);
        rs->bytes_done += (uint64_t)nr * row_bytes;
        cli_progress_update(&rs->progress, rs->bytes_done);
    }
    if (rc != 0) {
        free(whole);
        dv_ref_map_free(&map);
        return rc;
    }
    if (gpu_state >= 0) {
        char why[256];
        if (dv_gpu_tensor_end(rs->gpu, t, &gpu_diff, why, sizeof why) != 0) {
            gpu_state = -1;
            gpu_stop(rs, why);
        }
    }
    if (have_ref)
        dv_ref_end(&ref, &map, t);
    if (gpu_state >= 0 && gpu_diff > 0) {
        gpu_state = 1;
        rs->n_gpu_diff++;
    }
    rs->n_tensors++;
    rs->total_nan += s.n_nan;
    rs->total_inf += s.n_inf;
    const bool nonfinite = s.n_nan + s.n_inf > 0;
    rs->n_nonfinite_tensors += nonfinite;
    int failed = nonfinite && !o->allow_nonfinite;
    if (have_ref) {
        if (ref_failed(&ref)) {
            rs->n_ref_fail++;
            rs->n_ref_outlier += ref.outlier;
            failed = 1;
        } else if (!strcmp(ref.status, "ok")) {
            rs->n_ref_ok++;
        } else if (!strcmp(ref.status, "missing")) {
            rs->n_ref_missing++;
        }
    }
    failed |= gpu_state > 0;
    report_tensor(rs, t, &s, have_ref ? &ref : NULL, gpu_state, gpu_diff);
    dv_ref_map_free(&map);
    if (keep) {
        long long layer = -1;
        sscanf(t->name, "blk.%lld.", &layer);
        pending_kvb *p = kvb_slot(rs, layer);
        if (!p) {
            free(whole);
            return dv_fail_oom(err, t->name);
        }
        if (strstr(t->name, ".attn_k_b.")) {
            free(p->kx);
            p->k = t;
            p->kx = whole;
        } else {
            free(p->vx);
            p->v = t;
            p->vx = whole;
        }
        if (p->kx && p->vx) {
            dv_ref_result kr;
            dv_kv_b_compare(&kr, rs->st, p->layer, p->k, p->kx, p->v, p->vx);
            report_kvb(rs, &kr, p->layer);
            failed |= ref_failed(&kr);
            if (ref_failed(&kr)) {
                rs->n_ref_fail++;
                rs->n_ref_outlier += kr.outlier;
            } else if (!strcmp(kr.status, "ok"))
                rs->n_ref_ok++;
            free(p->kx);
            free(p->vx);
            p->kx = p->vx = NULL;
        }
    }
    return failed;
}

static int parse_path(const char *s)
{
    for (int p = 0; p < GGUF_DEQUANT_PATH_COUNT; p++)
        if (!strcmp(s, gguf_dequant_path_name(p)))
            return p;
    return -1;
}

/* Options into o. @return -1 to go on, or the exit code. */
static int parse_args(dv_opts *o, int argc, char **argv)
{
    int c, optind_ = 1;
    const char *arg;
    while ((c = cli_next(&spec, argc, argv, &arg, &optind_)) != -1) {
        switch (c) {
        case OPT_TENSOR: o->tensor = arg; break;
        case OPT_DUMP: o->dump = arg; break;
        case OPT_REFERENCE: o->reference = arg; break;
        case OPT_ALLOW_NONFINITE: o->allow_nonfinite = true; break;
        case OPT_JSON: o->json = true; break;
        case OPT_GPU:
            o->gpu = true;
            /* "--gpu=auto", or "--gpu auto" (getopt binds an optional argument only with '=') */
            if (!arg && optind < argc && !strcmp(argv[optind], "auto")) {
                arg = argv[optind];
                optind++;
            }
            if (arg && strcmp(arg, "auto")) {
                cli_errorf(spec.tool, "--gpu: '%s' is not 'auto'", arg);
                return CLI_EXIT_USAGE;
            }
            o->gpu_auto = arg != NULL;
            break;
        case OPT_THREADS: {
            uint64_t n;
            if (cli_parse_u64(arg, &n) || n < 1 || n > 1024) {
                cli_errorf(spec.tool, "--threads: '%s' is not a number from 1 to 1024", arg);
                return CLI_EXIT_USAGE;
            }
            o->threads = (int)n;
            break;
        }
        case OPT_PATH:
            o->path = parse_path(arg);
            if (o->path < 0) {
                cli_errorf(spec.tool, "--path: '%s' is not one of auto, scalar, portable, avx2", arg);
                return CLI_EXIT_USAGE;
            }
            if (!gguf_dequant_path_available(o->path)) {
                cli_errorf(spec.tool, "--path %s: this CPU cannot run it", arg);
                return CLI_EXIT_ENV;
            }
            break;
        case OPT_CHUNK: {
            uint64_t n;
            if (cli_parse_size(arg, &n) || n < 1) {
                cli_errorf(spec.tool, "--chunk: '%s' is not a size", arg);
                return CLI_EXIT_USAGE;
            }
            o->chunk_elems = n;
            break;
        }
        }
    }
    if (optind_ != argc - 1) {
        cli_errorf(spec.tool, "expected one MODEL.gguf argument (see --help)");
        return CLI_EXIT_USAGE;
    }
    o->model = argv[optind_];
    if (o->dump && !o->tensor) {
        cli_errorf(spec.tool, "--dump needs --tensor NAME to say which tensor");
        return CLI_EXIT_USAGE;
    }
    return -1;
}

/* Exit code of a library failure, printed. */
static int fail(const gguf_error *err, int rc)
{
    cli_error(spec.tool, err);
    return cli_exit_code(rc);
}

/*
 * Open the model and what the options ask for beside it (the tensor selection,
 * the reference, the GPU, the pool, the .npy of --dump); *total_bytes gets the
 * size of the selected tensors. @return -1 to go on, or the exit code.
 */
static int prepare(run_state *rs, dv_opts *o, gguf_npy_writer **npy, uint64_t *total_bytes)
{
    gguf_error err = {0};
    int rc = gguf_set_open(&rs->set, o->model, NULL, &err);
    if (rc)
        return fail(&err, rc);
    if (o->tensor && !gguf_set_tensor_find(rs->set, o->tensor)) {
        if (regcomp(&o->regex, o->tensor, REG_EXTENDED | REG_NOSUB) != 0) {
            cli_errorf(spec.tool, "--tensor: '%s' is neither a tensor name nor a valid regular "
                       "expression", o->tensor);
            return CLI_EXIT_USAGE;
        }
        o->have_regex = true;
    }
    const int64_t n_all = gguf_set_tensor_count(rs->set);
    int64_t n_sel = 0;
    const gguf_tensor *only = NULL;
    uint64_t gpu_chunk = 0; /* the most floats of one chunk: what the GPU's buffers hold */
    for (int64_t i = 0; i < n_all; i++) {
        const gguf_tensor *t = gguf_set_tensor_at(rs->set, i);
        if (!selected(o, rs->set, t))
            continue;
        n_sel++;
        only = t;
        *total_bytes += t->nbytes;
        const uint64_t c = (uint64_t)chunk_rows_of(o, t) * (uint64_t)(t->ne[0] > 0 ? t->ne[0] : 1);
        if (c > gpu_chunk)
            gpu_chunk = c;
        const int w = (int)strlen(t->name);
        if (w > rs->name_width)
            rs->name_width = w < 48 ? w : 48;
    }
    if (o->tensor && n_sel == 0) {
        cli_errorf(spec.tool, "%s: no tensor named or matching '%s'", o->model, o->tensor);
        return CLI_EXIT_USAGE;
    }
    if (o->dump && n_sel != 1) {
        cli_errorf(spec.tool, "--dump: '%s' selects %lld tensors; it must select exactly one",
                   o->tensor, (long long)n_sel);
        return CLI_EXIT_USAGE;
    }
    if (o->reference) {
        rc = gguf_st_set_open(&rs->st, o->reference, &err);
        if (rc) {
            fprintf(stderr, "%s: --reference: ", spec.tool);
            return fail(&err, rc);
        }
        dv_model_info_read(&rs->mi, rs->set);
    }
    if (o->gpu) {
        rs->gpu_ok = dv_gpu_available(rs->gpu_why, sizeof rs->gpu_why);
        if (!rs->gpu_ok && !o->gpu_auto) {
            cli_errorf(spec.tool, "--gpu: %s (use --gpu auto to skip the GPU check where "
                       "there is none)", rs->gpu_why);
            return CLI_EXIT_ENV;
        }
        if (!rs->gpu_ok && !o->json)
            fprintf(stderr, "%s: --gpu auto: skipped: %s\n", spec.tool, rs->gpu_why);
    }
    rc = gguf_dequant_pool_create(&rs->pool, o->threads, &err);
    if (rc)
        return fail(&err, rc);
    if (o->gpu && rs->gpu_ok) {
        /* pinned buffers and copy threads: a failure here is the environment's,
         * as a missing GPU is */
        char why[256];
        if (dv_gpu_create(&rs->gpu, gpu_chunk, gguf_dequant_pool_size(rs->pool), why,
                          sizeof why) != 0) {
            rs->gpu_ok = false;
            snprintf(rs->gpu_why, sizeof rs->gpu_why, "%.250s", why);
            if (!o->gpu_auto) {
                cli_errorf(spec.tool, "--gpu: %s (use --gpu auto to skip the GPU check where "
                           "there is none)", rs->gpu_why);
                return CLI_EXIT_ENV;
            }
            if (!o->json)
                fprintf(stderr, "%s: --gpu auto: skipped: %s\n", spec.tool, rs->gpu_why);
        }
    }
    if (o->dump) {
        int64_t shape[GGUF_MAX_DIMS];
        const int nd = only->n_dims ? (int)only->n_dims : 1;
        for (int i = 0; i < nd; i++)
            shape[i] = only->ne[nd - 1 - i];
        rc = gguf_npy_writer_create_f32(npy, o->dump, shape, nd, NULL, &err);
        if (rc)
            return fail(&err, rc);
    }
    return -1;
}

/* Every selected tensor, then the kv_b halves left without a partner.
 * *n_failed counts failing tensors. @return -1 to go on, or the exit code. */
static int verify_all(run_state *rs, gguf_npy_writer *npy, uint64_t total_bytes,
                      int64_t *n_failed)
{
    const dv_opts *o = rs->o;
    gguf_error err = {0};
    if (o->json)
        json_report_start(rs);
    cli_progress_start(&rs->progress, "dequantizing", total_bytes);
    const int64_t n_all = gguf_set_tensor_count(rs->set);
    for (int64_t i = 0; i < n_all; i++) {
        const gguf_tensor *t = gguf_set_tensor_at(rs->set, i);
        if (!selected(o, rs->set, t))
            continue;
        const int rc = verify_tensor(rs, t, npy, &err);
        if (rc < 0) {
            cli_progress_end(&rs->progress);
            return fail(&err, rc);
        }
        *n_failed += rc;
    }
    cli_progress_end(&rs->progress);
    /* kv_b halves whose partner was not selected or not present */
    for (int64_t i = 0; i < rs->n_kvb; i++)
        if (rs->kvb[i].kx || rs->kvb[i].vx) {
            dv_ref_result r = {0};
            snprintf(r.status, sizeof r.status, "skipped");
            snprintf(r.hf_name, sizeof r.hf_name, "model.layers.%lld.self_attn.kv_b_proj.weight",
                     (long long)rs->kvb[i].layer);
            snprintf(r.note, sizeof r.note, "only one of attn_k_b / attn_v_b was selected");
            report_kvb(rs, &r, rs->kvb[i].layer);
        }
    return -1;
}

static void summary_text(const run_state *rs)
{
    const dv_opts *o = rs->o;
    printf("%lld tensors dequantized", (long long)rs->n_tensors);
    if (rs->n_nonfinite_tensors)
        printf(", %lld with NaN/Inf (%llu NaN, %llu Inf)%s", (long long)rs->n_nonfinite_tensors,
               (unsigned long long)rs->total_nan, (unsigned long long)rs->total_inf,
               o->allow_nonfinite ? " (allowed)" : "");
    else
        printf(", all values finite");
    if (rs->st) {
        printf("; reference: %lld ok, %lld failed", (long long)rs->n_ref_ok,
               (long long)rs->n_ref_fail);
        if (rs->n_ref_outlier)
            printf(" (%lld by a block or row out of line)", (long long)rs->n_ref_outlier);
        printf(", %lld missing", (long long)rs->n_ref_missing);
    }
    if (o->gpu)
        printf("; GPU%s%s%s: %s", rs->gpu_ok ? " (" : "", rs->gpu_ok ? rs->gpu_why : "",
               rs->gpu_ok ? ")" : "",
               rs->gpu_failed ? "FAILED (see above)" : !rs->gpu_ok ? "skipped"
               : rs->n_gpu_diff ? "DIFFERENT" : "equal bit for bit");
    if (o->dump)
        printf("; wrote %s", o->dump);
    printf("\n");
}

static void run_state_free(run_state *rs)
{
    for (int64_t i = 0; i < rs->n_kvb; i++) {
        free(rs->kvb[i].kx);
        free(rs->kvb[i].vx);
    }
    free(rs->kvb);
    json_decref(rs->json_doc);
    json_decref(rs->json_kvb);
    free(rs->buf);
    dv_gpu_free(rs->gpu);
    gguf_dequant_pool_free(rs->pool);
    gguf_st_set_free(rs->st);
    gguf_set_free(rs->set);
}

/* Commit the .npy of --dump. @return -1 to go on, or the exit code. */
static int commit_dump(gguf_npy_writer **npy)
{
    if (!*npy)
        return -1;
    gguf_error err = {0};
    const int rc = gguf_npy_writer_commit(*npy, &err);
    gguf_npy_writer_free(*npy);
    *npy = NULL;
    return rc ? fail(&err, rc) : -1;
}

/* The summary of a run that went to the end. @return the exit code. */
static int finish(run_state *rs, int64_t n_failed)
{
    const dv_opts *o = rs->o;
    const bool nonfinite_fail = rs->n_nonfinite_tensors > 0 && !o->allow_nonfinite;
    const bool ok = n_failed == 0 && rs->n_kvb_fail == 0;
    int ret = CLI_EXIT_OK;
    if (nonfinite_fail || !ok)
        ret = CLI_EXIT_DIFF;
    else if (rs->gpu_failed)
        ret = CLI_EXIT_ENV; /* a GPU that errs is an environment failure, not a skip */
    if (!o->json)
        summary_text(rs);
    else if (json_report_finish(rs, ok) != 0)
        return CLI_EXIT_ENV;
    if (cli_verbosity >= 2)
        dv_gpu_print_stats(rs->gpu, stderr, spec.tool);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cli_errorf(spec.tool, "cannot write the output");
        return CLI_EXIT_ENV;
    }
    return ret;
}

int main(int argc, char **argv)
{
    dv_opts o = {.chunk_elems = 16u << 20};
    int ret = parse_args(&o, argc, argv);
    if (ret >= 0)
        return ret;
    run_state rs = {.o = &o};
    gguf_npy_writer *npy = NULL;
    uint64_t total_bytes = 0;
    int64_t n_failed = 0;
    if ((ret = prepare(&rs, &o, &npy, &total_bytes)) >= 0)
        goto done;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    if ((ret = verify_all(&rs, npy, total_bytes, &n_failed)) >= 0 ||
        (ret = commit_dump(&npy)) >= 0)
        goto done;
    ret = finish(&rs, n_failed);
done:
    if (rs.json_doc) /* stopped by an error: the tensors verified so far, without a summary */
        json_report_print(&rs);
    gguf_npy_writer_free(npy);
    run_state_free(&rs);
    if (o.have_regex)
        regfree(&o.regex);
    return ret;
}
