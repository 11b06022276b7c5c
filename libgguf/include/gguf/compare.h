/*
 * gguf/compare.h - compare two activation records (gguf/record.h) capture
 * point by capture point, and find the first one that diverges.
 *
 * A is the reference, B the run under test. For every point of A and every
 * rank paired with it, the metrics are (a = A's floats, b = B's, in double):
 *
 *   rel_l2   ||b - a||_2 / ||a||_2          (0 when both are zero, inf when only a is)
 *   max_abs  max_i |b_i - a_i|               (with the row and column where it is)
 *   cosine   <a, b> / (||a|| ||b||)          (1 when both are zero, 0 when one is)
 *
 * Logits ("logits", rows of n_vocab per token) add, per token t with
 * p = softmax(a_t), q = softmax(b_t):
 *   kl       KL(p || q) = sum_i p_i (log p_i - log q_i), mean over tokens (and max)
 *   top1     fraction of tokens whose argmax agrees
 *   top5     mean over tokens of |top5(a_t) ∩ top5(b_t)| / 5 (k = n_vocab if smaller)
 * Router captures ("*.moe_experts", rows of n_used expert ids per token):
 *   experts  fraction of tokens whose set of chosen experts is the same
 *            (order does not matter); rel_l2 etc. are not checked there.
 * "*.moe_weights" is compared after pairing weights by expert id when the
 * matching moe_experts capture exists (an expert chosen on one side only
 * counts with weight 0 on the other), so a different order is no difference.
 *
 * A metric is over tolerance when it is worse than its bound or NaN. A point
 * whose A side is finite but whose B side has NaN or Inf is always over.
 *
 * Ranks: when both records have the same number of ranks, rank r pairs with
 * rank r; when one has a single rank, it is the reference of every rank of
 * the other (the usual "tp 4 against tp 1" check).
 *
 * Order: entries are sorted by layer (points before the first block first,
 * then blk.0, blk.1, ..., then the points after the last block), within a
 * layer by the op's position in A (the forward's execution order), then by
 * rank. The first entry over tolerance in that order is the first divergence.
 */
#ifndef GGUF_COMPARE_H
#define GGUF_COMPARE_H

#include "gguf/export.h"

#include <stdbool.h>
#include <stdint.h>

#include "gguf/error.h"
#include "gguf/record.h"

GGUF_BEGIN_DECLS

/* Bounds. A metric is checked when its bound is set (see each field). */
typedef struct gguf_tol {
    double rel_l2;      /* max relative L2 error; < 0: not checked */
    double max_abs;     /* max absolute error; < 0: not checked (default: off) */
    double cosine;      /* min cosine similarity; < 0: not checked */
    double kl;          /* logits: max mean KL divergence (nats); < 0: not checked */
    double top1;        /* logits: min top-1 agreement (fraction); < 0: not checked */
    double top5;        /* logits: min top-5 overlap (fraction); < 0: not checked */
    double experts;     /* router: min fraction of tokens with the same expert set */
} gguf_tol;

/* Which metrics are over (bits of gguf_cmp_entry.over). */
enum {
    GGUF_CMP_REL_L2 = 1u << 0,
    GGUF_CMP_MAX_ABS = 1u << 1,
    GGUF_CMP_COSINE = 1u << 2,
    GGUF_CMP_KL = 1u << 3,
    GGUF_CMP_TOP1 = 1u << 4,
    GGUF_CMP_TOP5 = 1u << 5,
    GGUF_CMP_EXPERTS = 1u << 6,
    GGUF_CMP_NONFINITE = 1u << 7, /* B has NaN/Inf where A is finite */
};

typedef enum gguf_cmp_kind {
    GGUF_CMP_KIND_TENSOR = 0, /* an activation */
    GGUF_CMP_KIND_LOGITS = 1,
    GGUF_CMP_KIND_EXPERTS = 2, /* router choices */
    GGUF_CMP_KIND_WEIGHTS = 3, /* routing weights, paired by expert id */
} gguf_cmp_kind;

typedef struct gguf_cmp_entry {
    const char *point;     /* "blk.3.attn_out"; borrows from record A */
    const char *op;        /* "attn_out" */
    int32_t layer;         /* -1 for points outside the blocks */
    uint32_t rank;         /* rank of the multi-rank side (0 for 1 vs 1) */
    uint32_t kind;         /* gguf_cmp_kind */
    int64_t n_elements;
    int64_t rows, cols;    /* tokens and row width (ne[1]*..., ne[0]) */
    double rel_l2, max_abs, cosine;
    int64_t max_abs_row, max_abs_col; /* where max_abs is */
    double norm_a, norm_b;
    int64_t nonfinite_a, nonfinite_b;
    /* logits */
    double kl, kl_max, top1, top5;
    int64_t kl_max_row;
    /* router */
    double experts;
    int64_t experts_first_row; /* first token whose sets differ, -1 when none */
    uint32_t over;         /* GGUF_CMP_* bits over tolerance; 0 = within */
    int64_t order;         /* position of the point's first capture in A */
    int64_t group;         /* sort group: layer; -1 before the blocks, INT32_MAX after */
} gguf_cmp_entry;

typedef struct gguf_cmp_result {
    gguf_cmp_entry *entries; /* sorted as described above */
    int64_t n_entries;
    int64_t first;           /* index of the first divergence, -1 when none */
    int64_t n_over;
    uint32_t ranks;          /* ranks compared (max of the two records) */
    int64_t extra_in_b;      /* captures of B with no partner in A (ignored) */
    int64_t missing_in_b;    /* with GGUF_CMP_COMMON: (point, rank) pairs of A that B lacks */
    gguf_tol tol;            /* the bounds applied */
    char tol_origin[64];     /* e.g. "default f32 vs f64", "--tol" */
} gguf_cmp_result;

enum {
    GGUF_CMP_ANY_MODEL = 1u << 0,  /* compare records of different model digests */
    GGUF_CMP_ANY_TOKENS = 1u << 1, /* do not require equal token lists */
    GGUF_CMP_COMMON = 1u << 2,     /* skip points of A that B lacks (engines that
                                    * capture fewer points); counted in missing_in_b */
};

typedef struct gguf_cmp_opts {
    unsigned int version; /* GGUF_CMP_OPTS_VERSION, or 0 for the same (see below) */
    const gguf_tol *tol;   /* NULL: gguf_tol_default for the records' precisions */
    uint32_t flags;        /* GGUF_CMP_ANY_* */
} gguf_cmp_opts;
/* The layout version of gguf_cmp_opts: the library refuses a larger one with
 * GGUF_E_OPTS_VERSION (docs/conventions.md, "Options structs"). */
#define GGUF_CMP_OPTS_VERSION 1
/* The defaults, version set: gguf_cmp_opts o = GGUF_CMP_OPTS_INIT; */
#define GGUF_CMP_OPTS_INIT {.version = GGUF_CMP_OPTS_VERSION}

/*
 * Default bounds for a pair of precisions ("f32", "f64", "bf16", "f16"; an
 * unknown or empty string is read as "f32"). The looser precision decides:
 *   f64 vs f64     rel_l2 1e-6  cosine 1-1e-10  kl 1e-10  top1 1  top5 1  experts 1
 *                  (records store F32: rounding alone gives up to ~6e-8 relative)
 *   f32 with f32 or f64
 *                  rel_l2 1e-4  cosine 1-1e-6   kl 1e-5   top1 1  top5 0.9  experts 1
 *   f16 or bf16 on either side
 *                  rel_l2 5e-2  cosine 0.99     kl 1e-2   top1 0.9  top5 0.8  experts 0.9
 * max_abs is off by default (its scale depends on the model). Fills origin
 * (at least 64 bytes, may be NULL) with e.g. "default f32 vs f64".
 */
void gguf_tol_default(gguf_tol *out, const char *prec_a, const char *prec_b, char *origin);

/*
 * Apply "NAME=VALUE[,NAME=VALUE...]" on top of *tol; names rel_l2, max_abs,
 * cosine, kl, top1, top5, experts; VALUE a number or "off". A bare number sets
 * rel_l2. @return 0 or GGUF_E_INVALID (err names the bad item).
 */
int gguf_tol_parse(gguf_tol *tol, const char *spec, gguf_error *err);

/*
 * Compare B against A. On 0 or GGUF_E_MISMATCH *out holds the result (free
 * with gguf_cmp_result_free); it borrows strings from A, so A must stay open
 * while the result is used. GGUF_E_MISMATCH means at least one entry is over
 * tolerance; err then names the first divergence.
 * @return 0; GGUF_E_MISMATCH; GGUF_E_NOT_FOUND (a point of A is missing in B
 *         without GGUF_CMP_COMMON, no point in common, or A has no captures); GGUF_E_BAD_SHAPE (a point's shape differs);
 *         GGUF_E_BAD_VALUE (different models or tokens without the ANY flags;
 *         rank counts that cannot be paired); GGUF_E_INVALID; GGUF_E_NOMEM.
 */
int gguf_compare(gguf_cmp_result **out, const gguf_record *a, const gguf_record *b,
                 const gguf_cmp_opts *opts, gguf_error *err);

void gguf_cmp_result_free(gguf_cmp_result *res);

/*
 * Metrics of one pair of arrays (n floats each, rows of cols), as above; the
 * building block of gguf_compare, public for tests and other tools. kind
 * selects the extra metrics; for GGUF_CMP_KIND_WEIGHTS pass the two expert id
 * arrays (same shape) in ids_a/ids_b, else NULL. Sets every metric field of e
 * except point/op/layer/rank/over/order.
 */
void gguf_cmp_arrays(gguf_cmp_entry *e, uint32_t kind, const float *a, const float *b,
                     int64_t rows, int64_t cols, const float *ids_a, const float *ids_b);

/* Set e->over from its metrics and tol; returns e->over. */
uint32_t gguf_cmp_check(gguf_cmp_entry *e, const gguf_tol *tol);

/* Short name of one GGUF_CMP_* bit ("rel_l2", "kl", ...), "" for others. */
const char *gguf_cmp_metric_name(uint32_t bit);

GGUF_END_DECLS
#endif /* GGUF_COMPARE_H */
