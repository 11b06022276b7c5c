/* gguf-dequant-verify: shared declarations of the tool's files. */
#ifndef DEQUANT_VERIFY_H
#define DEQUANT_VERIFY_H

#include <regex.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "gguf/dequant.h"
#include "gguf/file.h"
#include "gguf/safetensors.h"

/* ---- options ---- */
typedef struct dv_opts {
    const char *model;
    const char *tensor;     /* --tensor NAME or REGEX */
    bool have_regex;
    regex_t regex;
    const char *dump;       /* --dump OUT.npy */
    const char *reference;  /* --reference DIR_OR_INDEX_OR_FILE */
    bool allow_nonfinite;
    bool json;
    bool gpu;
    bool gpu_auto;          /* --gpu auto: no GPU is a skip, not an error */
    int threads;
    int path;               /* gguf_dequant_path */
    uint64_t chunk_elems;   /* floats dequantized at a time per tensor */
} dv_opts;

/* ---- per-tensor statistics ---- */
typedef struct dv_stats {
    double min, max, sum, sum_sq, absmax; /* over finite values */
    uint64_t n_finite, n_nan, n_inf;
    /* blocks whose scale field(s) are zero / NaN / Inf / subnormal, and NVFP4
     * scale bytes with bit 7 set (not a UE4M3 encoding; see docs/dequant.md) */
    uint64_t blk_zero, blk_nan, blk_inf, blk_subnormal, blk_bad_encoding;
    uint64_t n_blocks;
} dv_stats;

void dv_stats_init(dv_stats *s);
/* Add n values, split over `threads` threads for large n (merged in a fixed
 * order, so the result does not depend on timing). */
void dv_stats_add(dv_stats *s, const float *x, uint64_t n, int threads);
/* Scan the scale fields of n_blocks blocks of a type. */
void dv_scan_scales(dv_stats *s, uint32_t type, const uint8_t *data, uint64_t n_blocks);
double dv_stats_mean(const dv_stats *s);
double dv_stats_std(const dv_stats *s);

/* ---- units out of line: blocks of the reference's scale grid, and rows ----
 *
 * A unit is a block of the reference's scale grid (FP8: weight_block_size,
 * 128 x 128; NVFP4: 1 x 16; a plain reference: 1 x DV_PLAIN_BLOCK) or a row.
 * Per unit: its error energy err = sum (x - ref)^2, its signal sig = sum ref^2,
 * and its peak = sum over its elements of p^2, p the smaller of the GGUF's and
 * the reference's largest magnitude in the element's DV_PEAK_WINDOW-element
 * window of the row (1 for float GGUF types): the scale a quantized GGUF block
 * rounds against, so that honest error / peak is about the same in every unit
 * whatever the weights' distribution (outliers, loud channels).
 *
 * Over a tensor's units: E0 = median(err / n), R0 = median(err / peak), each
 * floored at DV_OUTLIER_FLOOR_DB under the signal (median(peak / n) * 10^-6,
 * 10^-6) so that a tensor of exact units still has an error scale. A unit's
 *   excess = min((err / n) / E0, (err / peak) / R0)
 * is how many times more error it has than the tensor's typical unit, both in
 * absolute terms and for its amplitude; excess >= DV_OUTLIER_DB (in dB) flags
 * it. Medians come from every unit, or from the first DV_UNITS_CAP units of a
 * larger tensor (then fixed: memory stays bounded). docs/gguf-dequant-verify.md
 * has the measurements behind the constants.
 */
#define DV_OUTLIER_DB 10.0
#define DV_OUTLIER_FLOOR_DB 60.0
#define DV_UNITS_CAP ((size_t)1 << 20)
#define DV_PEAK_WINDOW 32
#define DV_PLAIN_BLOCK 32

typedef struct dv_unit {
    double err, sig, peak;
    int64_t row;   /* first row: the reference's row (experts: expert * rows + row) */
    int32_t col;   /* first column */
    uint32_t n;    /* elements */
} dv_unit;

typedef struct dv_units {
    dv_unit *held;        /* units waiting for the medians */
    size_t n_held, cap_held;
    bool fixed;           /* medians computed; later units are scored at once */
    bool from_first;      /* the medians come from the first DV_UNITS_CAP units only */
    double e0, r0;        /* typical error per element, typical err / peak (floored) */
    double median_snr_db; /* median of the units' SNR (INFINITY: exact) */
    uint64_t count, flagged;
    dv_unit worst;        /* the largest excess (the first of equals) */
    double worst_excess;  /* linear; -1 before any unit */
    double flag_at;       /* DV_OUTLIER_DB, linear */
    bool oom;
} dv_units;

void dv_units_init(dv_units *u);
/* Add one unit: held until the medians are known (DV_UNITS_CAP units or the
 * end), scored at once after. */
void dv_units_add(dv_units *u, const dv_unit *x);
/* Score what is held (medians from it when not yet fixed). */
void dv_units_finish(dv_units *u);
void dv_units_free(dv_units *u);
/* A unit's excess (linear) against the medians; INFINITY for a NaN error. */
double dv_unit_excess(const dv_units *u, const dv_unit *x);

/* What the report says about one kind of unit of one tensor. */
typedef struct dv_unit_report {
    bool have;
    int64_t unit_rows, unit_cols; /* the unit's shape on the reference's grid */
    int64_t mat_rows, mat_cols;   /* one matrix (experts: one expert) */
    bool experts;                 /* rows count experts * mat_rows */
    uint64_t count, flagged;
    bool from_first;
    double median_snr_db;
    dv_unit worst;
    double worst_excess_db;       /* -INFINITY: every unit exact */
} dv_unit_report;

/* ---- GGUF -> HF mapping and the comparison ---- */
typedef struct dv_ref_result {
    bool compared;
    char hf_name[256];
    char status[16];      /* "ok", "fail", "missing", "shape", "skipped" */
    char ref_dtype[16];   /* the stored dtype of the reference ("BF16", "F8_E4M3", "U8") */
    char ref_format[16];  /* gguf_st_format_name: "plain", "fp8-scaled", "nvfp4", ... */
    char note[768];
    double rel_rms, snr_db, expect_snr_db;
    double err_sq, ref_sq; /* sums, for the record */
    dv_unit_report blocks, rows; /* the worst block and row; status "fail" when flagged */
    bool outlier;          /* failed by a block or row out of line, not by the SNR */
} dv_ref_result;

/* Expected minimum SNR (dB) of a quantization type against its source. */
double dv_expect_snr_db(uint32_t type);

/* Model facts the mapping needs, read once from the metadata. */
typedef struct dv_model_info {
    char arch[64];
    int64_t n_head, n_head_kv;
} dv_model_info;

void dv_model_info_read(dv_model_info *mi, const gguf_set *set);

/*
 * Compare a dequantized tensor with its HF original, a run of rows at a time
 * (bounded memory): dv_ref_begin resolves the HF name and checks the shape
 * (status "missing" / "shape" / "skipped" when there is nothing to compare),
 * dv_ref_rows takes rows [row0, row0 + n_rows) of the GGUF tensor (rows of
 * ne[0] elements), dv_ref_end computes rel_rms / snr_db, the worst block and
 * row, and sets "ok" or "fail" (a low SNR, or a block or row out of line). A
 * status "fail" or "shape" means the tensor failed.
 */
/* Accumulates the units of one tensor as its rows come (dequant_verify_ref.c). */
typedef struct dv_grid {
    int64_t br, bc;            /* unit shape: rows x columns of the reference's grid */
    int64_t mat_rows, cols;    /* one matrix of the reference (experts: one expert) */
    int64_t nbr, nbc, n_mat;   /* units per matrix column / row, matrices */
    int64_t win;               /* peak window: DV_PEAK_WINDOW or 1 */
    bool blocks_on;            /* false when the grid is too large to hold */
    dv_unit *acc;              /* br > 1: the whole grid; br == 1: one row's units */
    double *wpk;               /* peak^2 of each window of the current row */
    dv_units blocks, rows;
} dv_grid;

typedef struct dv_ref_map {
    int kind;                  /* 0 none, 1 plain, 2 llama q/k rows, 3 stacked experts */
    gguf_st_weight src;        /* plain / permuted */
    gguf_st_weight *experts;   /* kind 3: one per expert */
    int64_t n_experts;
    int64_t head_dim;
    float *buf;                /* reference rows, dequantized */
    size_t buf_n;
    dv_grid grid;
} dv_ref_map;

void dv_ref_begin(dv_ref_result *r, dv_ref_map *m, const dv_model_info *mi, const gguf_st_set *st,
                  const gguf_tensor *t);
void dv_ref_rows(dv_ref_result *r, dv_ref_map *m, const gguf_tensor *t, const float *x,
                 int64_t row0, int64_t n_rows);
void dv_ref_end(dv_ref_result *r, dv_ref_map *m, const gguf_tensor *t);
void dv_ref_map_free(dv_ref_map *m);

/* True for tensors that are compared only through the kv_b_proj reassembly. */
bool dv_ref_is_kv_b_part(const char *gguf_name);

/*
 * MLA: reassemble HF kv_b_proj [n_head*(nope+v), kv_lora] from attn_k_b
 * (ne [nope, kv_lora, n_head]) and attn_v_b (ne [kv_lora, v, n_head]) and
 * compare it with the reference's kv_b_proj in whatever dtype or scaled
 * format (BF16, block-scaled FP8, NVFP4) the checkpoint stores it.
 */
void dv_kv_b_compare(dv_ref_result *r, const gguf_st_set *st, int64_t layer,
                     const gguf_tensor *kb, const float *k, const gguf_tensor *vb,
                     const float *v);

/* ---- --gpu ----
 * The GPU check of one run (dequant_verify_gpu.c, over ggufkit_cuda's
 * checker): per chunk, dv_gpu_buffer says where to decode (a pinned buffer of
 * the checker, or NULL: the caller's own), dv_gpu_submit queues the GPU's
 * dequantization and its comparison with the CPU's floats, and at the end of
 * a tensor dv_gpu_tensor_end gives the count of differing elements. Each
 * returns 0, or -1 with a reason in why when the GPU path failed (the run
 * then goes on without it). */
typedef struct dv_gpu dv_gpu;
/* Whether GPU comparison can run; when not, why says so ("this build has no
 * CUDA support", "no CUDA device", ...). */
bool dv_gpu_available(char *why, size_t why_size);
/* The checker, its pinned buffers holding chunk_elems floats (clamped to
 * [4096, 32 Mi]), copying on `threads` host threads. */
int dv_gpu_create(dv_gpu **out, uint64_t chunk_elems, int threads, char *why, size_t why_size);
/* Where to decode the next n floats of a tensor of `type`: *buf is the
 * checker's next pinned buffer (the GPU is done reading it) when they fit one,
 * else NULL. */
int dv_gpu_buffer(dv_gpu *g, uint32_t type, uint64_t n, float **buf, char *why,
                  size_t why_size);
/* Queue the comparison of rows [row0, row0+n_rows) of t with the CPU's floats
 * x (the buffer dv_gpu_buffer gave, or the caller's own memory, copied): x
 * must not be written until dv_gpu_buffer hands it out again; t's bytes may
 * be dropped on return. */
int dv_gpu_submit(dv_gpu *g, const gguf_tensor *t, const float *x, int64_t row0,
                  int64_t n_rows, char *why, size_t why_size);
/* Wait for the tensor's chunks; *n_diff = elements that differed. */
int dv_gpu_tensor_end(dv_gpu *g, const gguf_tensor *t, uint64_t *n_diff, char *why,
                      size_t why_size);
/* One line of figures (chunks, bytes, host waits) on f, for -v. */
void dv_gpu_print_stats(const dv_gpu *g, FILE *f, const char *tool);
/* Free what the GPU check allocated. Accepts NULL. */
void dv_gpu_free(dv_gpu *g);

#endif
