/*
 * gguf/safetensors.h - read what other systems wrote: safetensors files,
 * sharded Hugging Face checkpoints, and the scaled FP8 / NVFP4 formats of
 * quantized checkpoints, dequantized to float32 by rows.
 *
 * A file (format: github.com/huggingface/safetensors, docs/formats.md):
 *
 *   +----------------+---------------------------------+---------------------+
 *   | N: u64 LE      | JSON header, N bytes (UTF-8,    | data buffer: every  |
 *   | header length  | may end in spaces)              | tensor, no holes    |
 *   +----------------+---------------------------------+---------------------+
 *   0                8                                 8+N                 EOF
 *   { "model.embed_tokens.weight": {"dtype": "BF16", "shape": [1024, 128],
 *                                   "data_offsets": [0, 262144]},
 *     ..., "__metadata__": {"format": "pt"} }
 *   data_offsets are [begin, end) relative to the data buffer (8 + N).
 *
 * Validated at the door (gguf_st_file_open), with the byte offset of the
 * failing field in the error:
 *   - header length at most GGUF_ST_MAX_HEADER and inside the file;
 *   - the header is one JSON object (parsed by jansson, never by hand),
 *     valid UTF-8, nested at most GGUF_ST_MAX_DEPTH deep, no duplicate keys;
 *   - every entry: a known dtype, a shape of at most GGUF_ST_MAX_DIMS
 *     non-negative integers whose product does not overflow, data_offsets
 *     [begin, end] with begin <= end, end - begin equal to the element count
 *     times the dtype's size;
 *   - the ranges, sorted, tile the data buffer exactly: no overlap, no gap,
 *     nothing after the last tensor (the rule of the reference reader);
 *   - __metadata__, when present, maps strings to strings.
 * After a successful open no accessor can fail or read outside the map.
 *
 * A checkpoint (gguf_st_set) is one file, or a folder, or an index:
 *   - FILE.safetensors: that file alone;
 *   - DIR/ with model.safetensors.index.json: the index (below);
 *   - DIR/ without index: DIR/model.safetensors, else every *.safetensors
 *     in name order;
 *   - INDEX.json: {"metadata": {...}, "weight_map": {"NAME": "FILE", ...}};
 *     every FILE (a plain name in the index's folder) is opened, every NAME
 *     must be in its FILE, and every tensor of the files in the map
 *     (GGUF_E_SPLIT otherwise); no name in two files.
 * Beside the files, the folder's config.json ("quantization_config") and
 * hf_quant_config.json (NVIDIA ModelOpt) say how weights are quantized.
 *
 * Scaled formats (gguf_st_weight): a logical weight made of a stored tensor
 * and its scales, found by name beside it. Each is dequantized to float32
 * with the formula below, evaluated in float32 in exactly this order, so
 * that the CPU (here) and the GPU (ggufkit_cuda/cuda_st_dequant.h) give the
 * same bits:
 *
 *   FP8_SCALED   DeepSeek-V3 / GLM-5-FP8 ("quant_method": "fp8", weight_block_size
 *                [128, 128]): W F8_E4M3 [R, C], W_scale_inv F32 [ceil(R/128),
 *                ceil(C/128)];  w[r][c] = f8(W[r][c]) * s[r/128][c/128]
 *                Also per-tensor / per-channel FP8 (ModelOpt "FP8": W_scale F32 [],
 *                compressed-tensors "float-quantized": W_scale [R, 1] or block
 *                [R/br, C/bc]): the same product, the block covering what the
 *                scale's shape says.
 *   NVFP4        ModelOpt ("quant_algo": "NVFP4", group_size 16): W U8 [R, C/2]
 *                two E2M1 values per byte, the LOW nibble first (element 2j) then
 *                the high nibble (element 2j+1); W_scale F8_E4M3 [R, C/16];
 *                W_scale_2 F32 [] (or [1]); W input_scale ignored.
 *                  b = f8(W_scale[r][c/16]) * W_scale_2;  w[r][c] = e2m1(nibble) * b
 *   NVFP4_CT     compressed-tensors "nvfp4-pack-quantized": W_packed, W_scale
 *                (as above), W_global_scale F32 [1], the reciprocal of ModelOpt's:
 *                  b = f8(W_scale[r][c/16]) / W_global_scale;  w = e2m1 * b
 * (W is the weight's name, e.g. "model.layers.0.mlp.down_proj.weight"; its
 * scales are "...down_proj.weight_scale_inv", "...weight_scale",
 * "...weight_scale_2"; compressed-tensors' packed data is "...weight_packed".)
 * E4M3 here is OCP E4M3FN: bias 7, no infinities, S.1111.111 is NaN, 448 max.
 *
 * Rows: a weight of shape [d0, ..., dk] is a matrix of d0*...*d(k-1) rows of dk
 * columns (numpy order, the last dimension innermost). gguf_st_weight_rows()
 * dequantizes any run of rows [row0, row0 + n) reading only the bytes of those
 * rows (and their scales): the forward pass streams a 2-D weight in row chunks.
 *
 * Lifetimes: names, tensors and data borrow from the file or set until it is
 * closed. The library is little-endian only, as safetensors is.
 */
#ifndef GGUF_SAFETENSORS_H
#define GGUF_SAFETENSORS_H

#include "gguf/export.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/error.h"

GGUF_BEGIN_DECLS

#define GGUF_ST_MAX_HEADER (100u * 1000u * 1000u) /* bytes, as the reference reader */
#define GGUF_ST_MAX_DIMS 8
#define GGUF_ST_MAX_DEPTH 16         /* JSON nesting of a header or index */
#define GGUF_ST_MAX_TENSORS (1u << 22) /* entries of one header or index */
#define GGUF_ST_MAX_FILES 65536u     /* files of one checkpoint */
#define GGUF_ST_MAX_CONFIG (16u << 20) /* bytes of config.json, an index */

typedef enum gguf_st_dtype {
    GGUF_ST_BOOL = 0,
    GGUF_ST_U8,
    GGUF_ST_I8,
    GGUF_ST_I16,
    GGUF_ST_U16,
    GGUF_ST_I32,
    GGUF_ST_U32,
    GGUF_ST_I64,
    GGUF_ST_U64,
    GGUF_ST_F16,
    GGUF_ST_BF16,
    GGUF_ST_F32,
    GGUF_ST_F64,
    GGUF_ST_F8_E4M3,   /* OCP E4M3FN (torch.float8_e4m3fn) */
    GGUF_ST_F8_E5M2,   /* OCP E5M2 (torch.float8_e5m2), IEEE-like */
    GGUF_ST_F8_E8M0,   /* OCP E8M0 scale byte, 2^(e-127), 0xFF NaN (MX formats) */
    GGUF_ST_DTYPE_COUNT
} gguf_st_dtype;

/* The header's name ("BF16", "F8_E4M3", ...); "unknown" out of range. */
const char *gguf_st_dtype_name(gguf_st_dtype d);
/* Bytes per element (1, 2, 4 or 8); 0 out of range. */
uint32_t gguf_st_dtype_size(gguf_st_dtype d);
/* @return the dtype of a header name, or -1 when unknown. */
int gguf_st_dtype_from_name(const char *name);

typedef struct gguf_st_tensor {
    const char *name;          /* NUL-terminated, valid UTF-8 */
    gguf_st_dtype dtype;
    int n_dims;                /* 0..GGUF_ST_MAX_DIMS; 0 is a scalar */
    int64_t shape[GGUF_ST_MAX_DIMS]; /* numpy order, outermost first */
    int64_t n_elements;
    uint64_t nbytes;
    uint64_t file_offset;      /* absolute offset of the data in its file */
    const uint8_t *data;       /* nbytes bytes inside the map (unaligned) */
    uint32_t file;             /* index of its file in the set (0 for a lone file) */
} gguf_st_tensor;

typedef struct gguf_st_file gguf_st_file;

/*
 * Open and validate one .safetensors file, mapped read-only.
 * @return 0; GGUF_E_NOT_FOUND; GGUF_E_IO (open, stat, mmap; sys_errno);
 *   GGUF_E_NOT_GGUF  a folder or device, or fewer than 8 bytes;
 *   GGUF_E_TRUNCATED the header or a tensor ends past the end of the file;
 *   GGUF_E_LIMIT     header over GGUF_ST_MAX_HEADER, nesting over
 *                    GGUF_ST_MAX_DEPTH, more than GGUF_ST_MAX_DIMS dims or
 *                    GGUF_ST_MAX_TENSORS entries;
 *   GGUF_E_BAD_MAGIC the header is not a JSON object (does not start with '{');
 *   GGUF_E_BAD_VALUE malformed JSON, an entry that is not an object, a missing
 *                    or mistyped dtype/shape/data_offsets, bad __metadata__;
 *   GGUF_E_BAD_UTF8  the header is not valid UTF-8 (or a name holds NUL);
 *   GGUF_E_DUPLICATE a tensor name twice;
 *   GGUF_E_BAD_TYPE  an unknown dtype;
 *   GGUF_E_BAD_SHAPE a negative dimension; byte count != elements x dtype size;
 *   GGUF_E_OVERFLOW  the element or byte count overflows 64 bits;
 *   GGUF_E_BAD_OFFSET end < begin, overlapping ranges, a gap, bytes after the
 *                    last tensor;
 *   GGUF_E_NOMEM. err names the file, the tensor and the field.
 */
int gguf_st_file_open(gguf_st_file **out, const char *path, gguf_error *err);

/* Same over a caller's buffer (borrowed; must outlive the file); `name` is
 * used in messages. For tests and fuzzing. */
int gguf_st_file_open_memory(gguf_st_file **out, const void *data, size_t size,
                             const char *name, gguf_error *err);

void gguf_st_file_free(gguf_st_file *f); /* NULL is fine */

const char *gguf_st_file_path(const gguf_st_file *f);
uint64_t gguf_st_file_size(const gguf_st_file *f);
uint64_t gguf_st_file_data_offset(const gguf_st_file *f); /* 8 + N */
int64_t gguf_st_file_tensor_count(const gguf_st_file *f);
/* Tensors in data order (ascending offsets). */
const gguf_st_tensor *gguf_st_file_tensor_at(const gguf_st_file *f, int64_t i);
const gguf_st_tensor *gguf_st_file_tensor_find(const gguf_st_file *f, const char *name);
/* __metadata__ entries, in key order; *key / *value borrow from the file. */
int64_t gguf_st_file_meta_count(const gguf_st_file *f);
void gguf_st_file_meta_at(const gguf_st_file *f, int64_t i, const char **key, const char **value);
/* The value of a __metadata__ key, or NULL. */
const char *gguf_st_file_meta_get(const gguf_st_file *f, const char *key);

/* ---- checkpoints ---- */

/* How the checkpoint's weights are quantized, from its configuration. */
typedef enum gguf_st_scheme {
    GGUF_ST_SCHEME_NONE = 0,      /* no quantization_config / hf_quant_config.json */
    GGUF_ST_SCHEME_FP8_BLOCK,     /* "quant_method": "fp8" (DeepSeek-V3, GLM-5-FP8) */
    GGUF_ST_SCHEME_FP8,           /* ModelOpt "FP8" / per-tensor or per-channel */
    GGUF_ST_SCHEME_NVFP4,         /* ModelOpt "NVFP4" */
    GGUF_ST_SCHEME_CT_FP8,        /* compressed-tensors "float-quantized" */
    GGUF_ST_SCHEME_CT_NVFP4,      /* compressed-tensors "nvfp4-pack-quantized" */
    GGUF_ST_SCHEME_OTHER,         /* a configuration this module does not dequantize */
    GGUF_ST_SCHEME_COUNT
} gguf_st_scheme;

/* "none", "fp8-block", "fp8", "nvfp4", "ct-fp8", "ct-nvfp4", "other". */
const char *gguf_st_scheme_name(gguf_st_scheme s);

typedef struct gguf_st_quant {
    gguf_st_scheme scheme;
    int64_t block[2];       /* FP8 block [rows, cols] (0: from the scale's shape);
                               NVFP4: [1, group_size] */
    char source[64];        /* "config.json", "hf_quant_config.json" or "" */
    char method[64];        /* quant_method / quant_algo as written */
} gguf_st_quant;

typedef struct gguf_st_set gguf_st_set;

/*
 * Open a checkpoint from a .safetensors file, a folder or an index .json
 * (see the top of this file), with its quantization configuration.
 * @return 0; the codes of gguf_st_file_open for the failing file;
 *   GGUF_E_NOT_FOUND  no such path, or a folder without safetensors files;
 *   GGUF_E_SPLIT      an index whose weight_map names a tensor its file
 *                     lacks, or omits one a file holds, or a file name with a '/';
 *   GGUF_E_DUPLICATE  a tensor name in two files;
 *   GGUF_E_BAD_VALUE  an index, config.json or hf_quant_config.json that is
 *                     not the expected JSON (named with the key);
 *   GGUF_E_LIMIT      over GGUF_ST_MAX_FILES files or GGUF_ST_MAX_CONFIG bytes.
 */
int gguf_st_set_open(gguf_st_set **out, const char *path, gguf_error *err);
void gguf_st_set_free(gguf_st_set *s); /* NULL is fine */

/* The path given to open, and the folder the files are in. */
const char *gguf_st_set_path(const gguf_st_set *s);
uint32_t gguf_st_set_file_count(const gguf_st_set *s);
const gguf_st_file *gguf_st_set_file(const gguf_st_set *s, uint32_t i);
/* Every tensor, sorted by name. */
int64_t gguf_st_set_tensor_count(const gguf_st_set *s);
const gguf_st_tensor *gguf_st_set_tensor_at(const gguf_st_set *s, int64_t i);
const gguf_st_tensor *gguf_st_set_tensor_find(const gguf_st_set *s, const char *name);
const gguf_st_quant *gguf_st_set_quant(const gguf_st_set *s);

/* ---- weights: a stored tensor with its scales, dequantized by rows ---- */

typedef enum gguf_st_format {
    GGUF_ST_FMT_PLAIN = 0,   /* a float/int dtype converted element by element */
    GGUF_ST_FMT_FP8_SCALED,  /* F8 times a block scale (see the top of this file) */
    GGUF_ST_FMT_NVFP4,       /* ModelOpt: E2M1 * (E4M3 scale * weight_scale_2) */
    GGUF_ST_FMT_NVFP4_CT,    /* compressed-tensors: E2M1 * (E4M3 scale / global_scale) */
    GGUF_ST_FMT_COUNT
} gguf_st_format;

/* "plain", "fp8-scaled", "nvfp4", "nvfp4-ct". */
const char *gguf_st_format_name(gguf_st_format f);

typedef struct gguf_st_weight {
    const char *name;              /* the name asked for (borrowed from the caller) */
    gguf_st_format format;
    const gguf_st_tensor *data;    /* the stored values (weight, or weight_packed) */
    const gguf_st_tensor *scale;   /* FP8: the block scale; NVFP4: the E4M3 group scales */
    const gguf_st_tensor *scale2;  /* NVFP4: weight_scale_2 / weight_global_scale */
    int n_dims;                    /* logical shape, numpy order */
    int64_t shape[GGUF_ST_MAX_DIMS];
    int64_t n_elements;
    int64_t rows, cols;            /* the matrix view: cols = last dim (1 for a scalar) */
    int64_t block_rows, block_cols; /* FP8: rows x cols per scale; NVFP4: 1 x 16 */
    int64_t mat_rows;              /* rows of one matrix (shape[n-2]; 1 for 1-D): a 3-D
                                      weight is a stack of matrices, each with its own
                                      block grid of scales */
    int64_t scale_rows, scale_cols; /* the scale grid of one matrix */
    float global;                  /* NVFP4: the decoded scale2 value */
} gguf_st_weight;

/*
 * The logical weight `name` with its companion scales: for a stored tensor
 * NAME of dtype F8 with NAME_scale_inv or NAME_scale -> FP8_SCALED; U8 NAME
 * with F8_E4M3 NAME_scale and NAME_scale_2 -> NVFP4; NAME_packed with
 * NAME_scale and NAME_global_scale -> NVFP4_CT; any other stored tensor ->
 * PLAIN. The checkpoint's scheme is only a cross-check (a FP8 weight without
 * its scale in an fp8 checkpoint is an error, not a plain F8 tensor).
 * Shapes of data and scales must agree (error otherwise).
 * @return 0; GGUF_E_NOT_FOUND (no such weight; or its scale is missing,
 *   named); GGUF_E_BAD_SHAPE (scale shape does not cover the weight; a
 *   packed width that is not C/2; a group count that is not C/16);
 *   GGUF_E_BAD_TYPE (a scale of the wrong dtype; a dtype this module cannot
 *   turn into floats: BOOL is fine, F8_E8M0 alone too).
 */
int gguf_st_weight_find(const gguf_st_set *s, const char *name, gguf_st_weight *out,
                        gguf_error *err);
/* Same over one file (its own tensors; the scheme unknown). */
int gguf_st_weight_find_file(const gguf_st_file *f, const char *name, gguf_st_weight *out,
                             gguf_error *err);

/*
 * True when a stored tensor is a companion of a weight (a scale, a packed
 * part or an input scale: "..._scale_inv", "..._scale", "..._scale_2",
 * "..._global_scale", "...input_scale", "..._packed" with its weight present),
 * so that listings show the weight once.
 */
bool gguf_st_is_companion(const gguf_st_set *s, const char *name);

/*
 * Dequantize rows [row0, row0 + n_rows) of a weight's matrix view into dst
 * (n_rows * w->cols floats, row-major). Reads only the bytes of those rows
 * and their scales. Bit-exact with ggufkit_cuda's gguf_cuda_st_dequant_rows.
 * @return 0; GGUF_E_INVALID (NULL, rows outside the matrix).
 */
int gguf_st_weight_rows(const gguf_st_weight *w, int64_t row0, int64_t n_rows, float *dst,
                        gguf_error *err);

/* The whole weight into dst (n >= w->n_elements floats).
 * @return 0; GGUF_E_INVALID (n too small). */
int gguf_st_weight_dequant(const gguf_st_weight *w, float *dst, uint64_t n, gguf_error *err);

/* Elements [i0, i0 + n) of a plain tensor (any dtype but the scaled
 * formats' packed bytes) converted to float: BOOL/ints exactly where they
 * fit, F64 rounded to nearest. @return 0; GGUF_E_INVALID (range). */
int gguf_st_tensor_to_f32(const gguf_st_tensor *t, int64_t i0, int64_t n, float *dst,
                          gguf_error *err);

/* ---- element conversions (exact) ---- */
/* E4M3FN -> float: S.EEEE.MMM, bias 7, subnormals, 0x7F/0xFF NaN (quiet,
 * sign kept), no infinities. */
float gguf_fp8_e4m3_to_fp32(uint8_t x);
/* E5M2 -> float: the top byte of an IEEE half (Inf and NaN as in half). */
float gguf_fp8_e5m2_to_fp32(uint8_t x);
/* E2M1 nibble -> float: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives (bit 3; 8 is -0). */
float gguf_fp4_e2m1_to_fp32(uint8_t nibble);

GGUF_END_DECLS
#endif /* GGUF_SAFETENSORS_H */
