/*
 * gguf/kld.h - llama.cpp's KL-divergence files ("llama-perplexity
 * --kl-divergence-base"), both ways: write one from the reference, read one
 * written by any llama.cpp build, and compute llama.cpp's statistics of a
 * model's logits against it.
 *
 * Layout (llama.cpp tools/perplexity/perplexity.cpp, functions perplexity()
 * and kl_divergence(); all little-endian):
 *
 *   offset 0   char[8]   "_logits_"
 *          8   int32     n_ctx      tokens per chunk
 *         12   int32     n_vocab
 *         16   int32     n_chunk
 *         20   int32     tokens[n_chunk * n_ctx]   the evaluated tokens as
 *                        tokenized (the BOS that replaces each chunk's first
 *                        token in the evaluation is not written)
 *        ...   per chunk, per scored position j = n_ctx/2 .. n_ctx-2
 *              (n_ctx - 1 - n_ctx/2 rows: the second half of the chunk, each
 *              predicting token j+1), one row of nv = 2*((n_vocab+1)/2) + 4
 *              uint16:
 *                  float   scale          (max_logit - min_logit) / 65535
 *                  float   min_log_prob   min_logit - max_logit - log(sum exp)
 *                  uint16  q[n_vocab]     round((logit - min_logit) / scale),
 *                                         0 at or below min_logit
 *                  uint16  0              padding when n_vocab is odd
 *              where min_logit = max(smallest logit, max_logit - 16), so a
 *              log-probability reads back as scale * q + min_log_prob.
 *
 * Evaluation of chunk c: its n_ctx tokens from a fresh context, the first
 * replaced by BOS when the vocabulary adds one (gguf_kld_add_bos).
 *
 * The reader validates the whole file at open (magic, sizes, every token id
 * below n_vocab, every row's scale and min_log_prob finite) so that the
 * accessors cannot fail later.
 */
#ifndef GGUF_KLD_H
#define GGUF_KLD_H

#include "gguf/export.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/error.h"
#include "gguf/file.h"
#include "gguf/output.h"

GGUF_BEGIN_DECLS

#define GGUF_KLD_MAGIC "_logits_"
#define GGUF_KLD_HEADER_SIZE 20
#define GGUF_KLD_MAX_CTX (1 << 24)   /* sanity caps of the reader */
#define GGUF_KLD_MAX_VOCAB (1 << 24)

/* uint16 values per row: 2*((n_vocab+1)/2) + 4. */
int64_t gguf_kld_row_u16(int64_t n_vocab);
/* First scored position of a chunk (n_ctx/2) and rows per chunk (n_ctx-1-n_ctx/2). */
int64_t gguf_kld_first(int64_t n_ctx);
int64_t gguf_kld_rows_per_chunk(int64_t n_ctx);

/*
 * Whether llama.cpp puts BOS first for this vocabulary:
 * tokenizer.ggml.add_bos_token when present; else true for "llama" (SPM)
 * and "bert" (WPM) and for "gpt2" with the pre-tokenizers llama.cpp marks
 * (llama3, llama-v3, llama-bpe, falcon3, falcon-h1, pixtral, midm-2.0,
 * lfm2, jina-v5-nano, tekken, chameleon), false otherwise
 * (src/llama-vocab.cpp, llama_vocab::impl::load).
 */
bool gguf_kld_add_bos(const gguf_file *meta);

/*
 * One row as llama.cpp writes it (float arithmetic as in its log_softmax):
 * dst receives gguf_kld_row_u16(n_vocab) values.
 * @return the negative log-likelihood of token tok (max + log(sum exp) - logit).
 */
double gguf_kld_quantize_row(uint16_t *dst, const float *logits, int32_t n_vocab, int32_t tok);

/* ---- writer ---- */

typedef struct gguf_kld_writer gguf_kld_writer;

/*
 * Start the file at path (through gguf/output.h: nothing appears before
 * finish): header and the n_chunk * n_ctx tokens. opts may be NULL.
 * @return 0; GGUF_E_INVALID (n_ctx < 2, n_vocab < 1, n_chunk < 1, a token
 *         outside the vocabulary); the codes of gguf_output_create.
 */
int gguf_kld_writer_create(gguf_kld_writer **out, const char *path, int32_t n_ctx,
                           int32_t n_vocab, int32_t n_chunk, const int32_t *tokens,
                           const gguf_output_opts *opts, gguf_error *err);

/*
 * The next chunk: logits holds the gguf_kld_rows_per_chunk(n_ctx) rows of
 * n_vocab floats of positions n_ctx/2 .. n_ctx-2 of the chunk.
 * @return 0; GGUF_E_INVALID (all chunks written already); GGUF_E_IO /
 *         GGUF_E_NOSPACE; GGUF_E_NOMEM.
 */
int gguf_kld_writer_add_chunk(gguf_kld_writer *w, const float *logits, gguf_error *err);

/*
 * Commit the file once every chunk is written. ppl (may be NULL) receives
 * the perplexity of the scored tokens (exp of the mean NLL).
 * @return 0; GGUF_E_INVALID (chunks missing); the codes of gguf_output_commit.
 */
int gguf_kld_writer_finish(gguf_kld_writer *w, double *ppl, gguf_error *err);

/* Free; before finish, nothing is left behind. NULL is fine. */
void gguf_kld_writer_free(gguf_kld_writer *w);

/* ---- reader ---- */

typedef struct gguf_kld_file gguf_kld_file;

/*
 * Open and validate a file (mapped read-only) or a buffer (borrowed: it must
 * outlive the handle; name is used in messages).
 * @return 0; GGUF_E_IO; GGUF_E_BAD_MAGIC (not "_logits_"); GGUF_E_TRUNCATED
 *         (the file ends inside the header, the tokens or a row); GGUF_E_LIMIT
 *         (n_ctx or n_vocab over the caps); GGUF_E_BAD_VALUE (n_ctx < 2,
 *         n_vocab < 1, n_chunk < 1, a token id outside the vocabulary, a row
 *         whose scale or min_log_prob is not finite or negative/positive,
 *         bytes after the last row; each naming the field and its offset);
 *         GGUF_E_OVERFLOW; GGUF_E_NOMEM.
 */
int gguf_kld_open(gguf_kld_file **out, const char *path, gguf_error *err);
int gguf_kld_open_memory(gguf_kld_file **out, const void *data, size_t size, const char *name,
                         gguf_error *err);
void gguf_kld_free(gguf_kld_file *f);

int32_t gguf_kld_n_ctx(const gguf_kld_file *f);
int32_t gguf_kld_n_vocab(const gguf_kld_file *f);
int32_t gguf_kld_n_chunk(const gguf_kld_file *f);
/* The n_chunk * n_ctx tokens (an aligned copy owned by f). */
const int32_t *gguf_kld_tokens(const gguf_kld_file *f);

/*
 * Row j (0 .. rows_per_chunk-1, i.e. position n_ctx/2 + j) of chunk c:
 * its scale, min_log_prob and, when logp is not NULL, the n_vocab
 * log-probabilities scale * q + min_log_prob (float, as llama.cpp reads them).
 * Out-of-range c or j give scale 0 and min_log_prob 0.
 */
void gguf_kld_row(const gguf_kld_file *f, int64_t c, int64_t j, float *scale, float *min_log_prob,
                  float *logp);

/* ---- statistics (llama.cpp's kl_divergence()) ---- */

typedef struct gguf_kld_stats {
    int64_t count;                      /* rows compared */
    double ppl, ppl_unc;                /* PPL(Q): the model compared */
    double ppl_base, ppl_base_unc;      /* PPL(base): the file */
    double ln_ppl_ratio, ln_ppl_ratio_unc;
    double ppl_ratio, ppl_ratio_unc;    /* PPL(Q)/PPL(base) */
    double ppl_diff, ppl_diff_unc;      /* PPL(Q)-PPL(base) */
    double cor_ln_ppl;                  /* correlation of ln PPL(Q) and ln PPL(base) */
    double mean_kld, mean_kld_unc;      /* KL(base || Q), nats */
    double max_kld, p999_kld, p99_kld, p95_kld, p90_kld, median_kld;
    double p10_kld, p5_kld, p1_kld, p01_kld, min_kld;
    double mean_dp, mean_dp_unc;        /* p(Q) - p(base) of the next token, fraction */
    double max_dp, p999_dp, p99_dp, p95_dp, p90_dp, p75_dp, median_dp;
    double p25_dp, p10_dp, p5_dp, p1_dp, p01_dp, min_dp;
    double rms_dp, rms_dp_unc;          /* fraction */
    double same_top_p, same_top_p_unc;  /* fraction of rows with the same argmax */
} gguf_kld_stats;

typedef struct gguf_kld_acc gguf_kld_acc;

/* An accumulator for up to capacity rows. @return 0, GGUF_E_INVALID, GGUF_E_NOMEM. */
int gguf_kld_acc_create(gguf_kld_acc **out, int64_t capacity, gguf_error *err);
void gguf_kld_acc_free(gguf_kld_acc *a);

/*
 * Add row j of chunk c of f against logits (n_vocab floats of the model
 * compared, at the same position), as llama.cpp's log_softmax() does.
 * @return 0; GGUF_E_INVALID (c or j out of range, capacity reached).
 */
int gguf_kld_acc_add(gguf_kld_acc *a, const gguf_kld_file *f, int64_t c, int64_t j,
                     const float *logits, gguf_error *err);

/* The statistics of every row added so far (count 0: all zero). Sorts the
 * per-row values; more rows may be added after. */
void gguf_kld_acc_stats(gguf_kld_acc *a, gguf_kld_stats *out);

GGUF_END_DECLS
#endif /* GGUF_KLD_H */
