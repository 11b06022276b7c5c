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
 * ne[0] elements), dv_ref_end computes rel_rms / snr_db and sets "ok" or
 * "fail". A status "fail" or "shape" means the tensor failed.
 */
typedef struct dv_ref_map {
    int kind;                  /* 0 none, 1 plain, 2 llama q/k rows, 3 stacked experts */
    gguf_st_weight src;        /* plain / permuted */
    gguf_st_weight *experts;   /* kind 3: one per expert */
    int64_t n_experts;
    int64_t head_dim;
    float *buf;                /* reference rows, dequantized */
    size_t buf_n;
} dv_ref_map;

void dv_ref_begin(dv_ref_result *r, dv_ref_map *m, const dv_model_info *mi, const gguf_st_set *st,
                  const gguf_tensor *t);
void dv_ref_rows(dv_ref_result *r, dv_ref_map *m, const gguf_tensor *t, const float *x,
                 int64_t row0, int64_t n_rows);
void dv_ref_end(dv_ref_result *r, const gguf_tensor *t);
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

/* ---- --gpu ---- */
/* Whether GPU comparison can run; when not, why says so ("this build has no
 * CUDA support", "no CUDA device", ...). */
bool dv_gpu_available(char *why, size_t why_size);
/* Compare the GPU dequantization of rows [row0, row0+n_rows) of t with the
 * CPU reference x; adds differing elements to *n_diff. Returns 0, or -1 with
 * a reason in why when the GPU path failed. */
int dv_gpu_compare_rows(const gguf_tensor *t, const float *x, int64_t row0, int64_t n_rows,
                        uint64_t *n_diff, char *why, size_t why_size);
/* Free what the GPU check allocated. */
void dv_gpu_release(void);

#endif
