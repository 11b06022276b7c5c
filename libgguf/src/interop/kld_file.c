/* KLD module: llama.cpp's --kl-divergence-base files, written and read
 * (layout in gguf/kld.h). The quantization follows llama.cpp's
 * log_softmax() in perplexity.cpp operation by operation, in float where it
 * uses float, so that our files are the ones it would write from the same
 * logits. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/error_lib.h"
#include "gguf/kld.h"

int64_t gguf_kld_row_u16(int64_t n_vocab)
{
    return 2 * ((n_vocab + 1) / 2) + 4;
}

int64_t gguf_kld_first(int64_t n_ctx)
{
    return n_ctx / 2;
}

int64_t gguf_kld_rows_per_chunk(int64_t n_ctx)
{
    return n_ctx - 1 - n_ctx / 2;
}

bool gguf_kld_add_bos(const gguf_file *meta)
{
    bool v;
    if (gguf_get_bool(meta, "tokenizer.ggml.add_bos_token", &v, NULL) == 0)
        return v;
    gguf_str model, pre;
    if (gguf_get_str(meta, "tokenizer.ggml.model", &model, NULL) != 0)
        return false;
    if (gguf_str_eq(model, "llama") || gguf_str_eq(model, "bert"))
        return true;
    if (!gguf_str_eq(model, "gpt2") || gguf_get_str(meta, "tokenizer.ggml.pre", &pre, NULL) != 0)
        return false;
    static const char *const with_bos[] = {"llama3",    "llama-v3", "llama-bpe",    "falcon3",
                                           "falcon-h1", "pixtral",  "midm-2.0",     "lfm2",
                                           "jina-v5-nano", "tekken", "chameleon"};
    for (size_t i = 0; i < sizeof with_bos / sizeof with_bos[0]; i++)
        if (gguf_str_eq(pre, with_bos[i]))
            return true;
    return false;
}

/* llama.cpp's nearest_int: round half to even through the float mantissa. */
static int nearest_int(float fval)
{
    float val = fval + 12582912.f;
    int i;
    memcpy(&i, &val, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

double gguf_kld_quantize_row(uint16_t *dst, const float *logits, int32_t n_vocab, int32_t tok)
{
    float max_logit = logits[0], min_logit = logits[0];
    for (int32_t i = 1; i < n_vocab; i++) {
        max_logit = fmaxf(max_logit, logits[i]);
        min_logit = fminf(min_logit, logits[i]);
    }
    min_logit = fmaxf(min_logit, max_logit - 16);
    double sum_exp = 0.0;
    for (int32_t i = 0; i < n_vocab; i++)
        sum_exp += expf(logits[i] - max_logit);
    const float log_sum_exp = (float)log(sum_exp);
    const float min_log_prob = min_logit - max_logit - log_sum_exp;
    const float scale = (max_logit - min_logit) / 65535.f;
    memcpy(dst, &scale, sizeof scale);
    memcpy(dst + 2, &min_log_prob, sizeof min_log_prob);
    uint16_t *q = dst + 4;
    if (scale != 0) {
        const float inv_scale = 1 / scale;
        for (int32_t i = 0; i < n_vocab; i++)
            q[i] = logits[i] > min_logit ? (uint16_t)nearest_int(inv_scale * (logits[i] - min_logit))
                                         : 0;
    } else {
        memset(q, 0, (size_t)n_vocab * sizeof *q);
    }
    const int64_t nv = gguf_kld_row_u16(n_vocab);
    for (int64_t i = 4 + n_vocab; i < nv; i++)
        dst[i] = 0;
    return (double)max_logit + (double)log_sum_exp - (double)logits[tok];
}

/* ---- writer ---- */

struct gguf_kld_writer {
    gguf_output *out;
    int32_t n_ctx, n_vocab, n_chunk, done;
    int32_t *tokens;
    uint16_t *row;
    double nll;
    int64_t count;
};

int gguf_kld_writer_create(gguf_kld_writer **out, const char *path, int32_t n_ctx,
                           int32_t n_vocab, int32_t n_chunk, const int32_t *tokens,
                           const gguf_output_opts *opts, gguf_error *err)
{
    *out = NULL;
    if (opts && opts->version > GGUF_OUTPUT_OPTS_VERSION)
        return gguf_opts_version_fail(opts->version, GGUF_OUTPUT_OPTS_VERSION, "gguf_output_opts", err);
    if (n_ctx < 2 || n_vocab < 1 || n_chunk < 1 || !tokens)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "%s: n_ctx %d, n_vocab %d, n_chunk %d: need n_ctx >= 2 and one chunk",
                         path, n_ctx, n_vocab, n_chunk);
    const size_t n_tok = (size_t)n_ctx * (size_t)n_chunk;
    for (size_t i = 0; i < n_tok; i++)
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                             "%s: token %zu (id %d) is outside the vocabulary of %d", path, i,
                             tokens[i], n_vocab);
    gguf_kld_writer *w = calloc(1, sizeof *w);
    if (!w)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory for a writer");
    w->n_ctx = n_ctx;
    w->n_vocab = n_vocab;
    w->n_chunk = n_chunk;
    w->tokens = malloc(n_tok * sizeof *w->tokens);
    w->row = malloc((size_t)gguf_kld_row_u16(n_vocab) * sizeof *w->row);
    int rc = 0;
    if (!w->tokens || !w->row) {
        rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory for a writer");
        goto done;
    }
    memcpy(w->tokens, tokens, n_tok * sizeof *tokens);
    if ((rc = gguf_output_create(&w->out, path, opts, err)))
        goto done;
    uint8_t hdr[GGUF_KLD_HEADER_SIZE];
    memcpy(hdr, GGUF_KLD_MAGIC, 8);
    memcpy(hdr + 8, &n_ctx, 4);
    memcpy(hdr + 12, &n_vocab, 4);
    memcpy(hdr + 16, &n_chunk, 4);
    if ((rc = gguf_output_write(w->out, hdr, sizeof hdr, err)))
        goto done;
    rc = gguf_output_write(w->out, tokens, n_tok * sizeof *tokens, err);
done:
    if (rc) {
        gguf_kld_writer_free(w);
        return rc;
    }
    *out = w;
    return 0;
}

int gguf_kld_writer_add_chunk(gguf_kld_writer *w, const float *logits, gguf_error *err)
{
    if (w->done >= w->n_chunk)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "%s: all %d chunks are written",
                         gguf_output_path(w->out), w->n_chunk);
    const int64_t first = gguf_kld_first(w->n_ctx), rows = gguf_kld_rows_per_chunk(w->n_ctx);
    const int64_t nv = gguf_kld_row_u16(w->n_vocab);
    const int32_t *tok = w->tokens + (int64_t)w->done * w->n_ctx + first;
    for (int64_t j = 0; j < rows; j++) {
        w->nll += gguf_kld_quantize_row(w->row, logits + j * w->n_vocab, w->n_vocab, tok[j + 1]);
        w->count++;
        int rc = gguf_output_write(w->out, w->row, (size_t)nv * sizeof *w->row, err);
        if (rc)
            return rc;
    }
    w->done++;
    return 0;
}

int gguf_kld_writer_finish(gguf_kld_writer *w, double *ppl, gguf_error *err)
{
    if (w->done != w->n_chunk)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "%s: %d of %d chunks written",
                         gguf_output_path(w->out), w->done, w->n_chunk);
    if (ppl)
        *ppl = w->count ? exp(w->nll / (double)w->count) : 0;
    return gguf_output_commit(w->out, err);
}

void gguf_kld_writer_free(gguf_kld_writer *w)
{
    if (!w)
        return;
    gguf_output_free(w->out);
    free(w->tokens);
    free(w->row);
    free(w);
}

/* ---- reader ---- */

struct gguf_kld_file {
    const uint8_t *data;
    size_t size;
    void *map;      /* non-NULL when we mapped it */
    int32_t n_ctx, n_vocab, n_chunk;
    int32_t *tokens;
    uint64_t rows_offset, row_bytes;
    int64_t rows_per_chunk;
};

static int parse(gguf_kld_file *f, const char *name, gguf_error *err)
{
    if (f->size < GGUF_KLD_HEADER_SIZE) {
        if (f->size < 8 || memcmp(f->data, GGUF_KLD_MAGIC, 8) != 0)
            return gguf_fail(err, f->size >= 8 ? GGUF_E_BAD_MAGIC : GGUF_E_TRUNCATED, 0,
                             "%s: magic: not a llama.cpp log-probability file (no \"_logits_\")",
                             name);
        return gguf_fail(err, GGUF_E_TRUNCATED, f->size,
                         "%s: header: the file ends after %zu of %d bytes", name, f->size,
                         GGUF_KLD_HEADER_SIZE);
    }
    if (memcmp(f->data, GGUF_KLD_MAGIC, 8) != 0)
        return gguf_fail(err, GGUF_E_BAD_MAGIC, 0,
                         "%s: magic: not a llama.cpp log-probability file (no \"_logits_\")",
                         name);
    memcpy(&f->n_ctx, f->data + 8, 4);
    memcpy(&f->n_vocab, f->data + 12, 4);
    memcpy(&f->n_chunk, f->data + 16, 4);
    if (f->n_ctx < 2)
        return gguf_fail(err, GGUF_E_BAD_VALUE, 8, "%s: n_ctx: %d, need at least 2", name,
                         f->n_ctx);
    if (f->n_vocab < 1)
        return gguf_fail(err, GGUF_E_BAD_VALUE, 12, "%s: n_vocab: %d is not positive", name,
                         f->n_vocab);
    if (f->n_chunk < 1)
        return gguf_fail(err, GGUF_E_BAD_VALUE, 16, "%s: n_chunk: %d is not positive", name,
                         f->n_chunk);
    if (f->n_ctx > GGUF_KLD_MAX_CTX)
        return gguf_fail(err, GGUF_E_LIMIT, 8, "%s: n_ctx: %d is over %d", name, f->n_ctx,
                         GGUF_KLD_MAX_CTX);
    if (f->n_vocab > GGUF_KLD_MAX_VOCAB)
        return gguf_fail(err, GGUF_E_LIMIT, 12, "%s: n_vocab: %d is over %d", name, f->n_vocab,
                         GGUF_KLD_MAX_VOCAB);
    uint64_t n_tok, tok_bytes, rows, all;
    f->rows_per_chunk = gguf_kld_rows_per_chunk(f->n_ctx);
    f->row_bytes = (uint64_t)gguf_kld_row_u16(f->n_vocab) * 2;
    if (!gguf_mul_u64((uint64_t)f->n_ctx, (uint64_t)f->n_chunk, &n_tok) ||
        !gguf_mul_u64(n_tok, 4, &tok_bytes) ||
        !gguf_add_u64(GGUF_KLD_HEADER_SIZE, tok_bytes, &f->rows_offset) ||
        !gguf_mul_u64((uint64_t)f->n_chunk, (uint64_t)f->rows_per_chunk, &rows) ||
        !gguf_mul_u64(rows, f->row_bytes, &all) || !gguf_add_u64(all, f->rows_offset, &all))
        return gguf_fail(err, GGUF_E_OVERFLOW, 8, "%s: n_ctx * n_chunk * n_vocab overflows",
                         name);
    if (f->size < f->rows_offset)
        return gguf_fail(err, GGUF_E_TRUNCATED, f->size,
                         "%s: tokens: the file ends after %zu bytes, the %llu tokens need %llu",
                         name, f->size, (unsigned long long)n_tok,
                         (unsigned long long)f->rows_offset);
    if (f->size < all) {
        const uint64_t row = (f->size - f->rows_offset) / f->row_bytes;
        return gguf_fail(err, GGUF_E_TRUNCATED, f->size,
                         "%s: chunk %llu, row %llu: the file ends inside it (%zu of %llu bytes)",
                         name, (unsigned long long)(row / (uint64_t)f->rows_per_chunk),
                         (unsigned long long)(row % (uint64_t)f->rows_per_chunk), f->size,
                         (unsigned long long)all);
    }
    if (f->size > all)
        return gguf_fail(err, GGUF_E_BAD_VALUE, all, "%s: %llu bytes after the last row", name,
                         (unsigned long long)(f->size - all));
    f->tokens = malloc(tok_bytes ? tok_bytes : 1);
    if (!f->tokens)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory for %llu tokens",
                         (unsigned long long)n_tok);
    memcpy(f->tokens, f->data + GGUF_KLD_HEADER_SIZE, tok_bytes);
    for (uint64_t i = 0; i < n_tok; i++)
        if (f->tokens[i] < 0 || f->tokens[i] >= f->n_vocab)
            return gguf_fail(err, GGUF_E_BAD_VALUE, GGUF_KLD_HEADER_SIZE + 4 * i,
                             "%s: tokens[%llu]: id %d is outside the vocabulary of %d", name,
                             (unsigned long long)i, f->tokens[i], f->n_vocab);
    for (uint64_t r = 0; r < rows; r++) {
        const uint64_t off = f->rows_offset + r * f->row_bytes;
        float scale, min_lp;
        memcpy(&scale, f->data + off, 4);
        memcpy(&min_lp, f->data + off + 4, 4);
        /* scale = (max - min)/65535 >= 0; min_log_prob = min - max - lse <= 0 */
        if (!isfinite(scale) || scale < 0 || !isfinite(min_lp) || min_lp > 0)
            return gguf_fail(err, GGUF_E_BAD_VALUE, off,
                             "%s: chunk %llu, row %llu: scale %g, min_log_prob %g (need a finite "
                             "scale >= 0 and min_log_prob <= 0)",
                             name, (unsigned long long)(r / (uint64_t)f->rows_per_chunk),
                             (unsigned long long)(r % (uint64_t)f->rows_per_chunk), (double)scale,
                             (double)min_lp);
    }
    return 0;
}

int gguf_kld_open_memory(gguf_kld_file **out, const void *data, size_t size, const char *name,
                         gguf_error *err)
{
    *out = NULL;
    gguf_kld_file *f = calloc(1, sizeof *f);
    if (!f)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    f->data = data;
    f->size = data ? size : 0;
    int rc = parse(f, name ? name : "(memory)", err);
    if (rc) {
        gguf_kld_free(f);
        return rc;
    }
    *out = f;
    return 0;
}

int gguf_kld_open(gguf_kld_file **out, const char *path, gguf_error *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return gguf_fail_errno(err, GGUF_E_IO, errno, "%s: cannot open", path);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return gguf_fail_errno(err, GGUF_E_IO, e, "%s: cannot stat", path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return gguf_fail(err, GGUF_E_IO, GGUF_NO_OFFSET, "%s: not a regular file", path);
    }
    void *map = NULL;
    if (st.st_size > 0) {
        map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            int e = errno;
            close(fd);
            return gguf_fail_errno(err, GGUF_E_IO, e, "%s: cannot map", path);
        }
    }
    close(fd);
    gguf_kld_file *f = calloc(1, sizeof *f);
    if (!f) {
        if (map)
            munmap(map, (size_t)st.st_size);
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    }
    f->map = map;
    f->data = map;
    f->size = (size_t)st.st_size;
    int rc = parse(f, path, err);
    if (rc) {
        gguf_kld_free(f);
        return rc;
    }
    *out = f;
    return 0;
}

void gguf_kld_free(gguf_kld_file *f)
{
    if (!f)
        return;
    if (f->map)
        munmap(f->map, f->size);
    free(f->tokens);
    free(f);
}

int32_t gguf_kld_n_ctx(const gguf_kld_file *f) { return f->n_ctx; }
int32_t gguf_kld_n_vocab(const gguf_kld_file *f) { return f->n_vocab; }
int32_t gguf_kld_n_chunk(const gguf_kld_file *f) { return f->n_chunk; }
const int32_t *gguf_kld_tokens(const gguf_kld_file *f) { return f->tokens; }

void gguf_kld_row(const gguf_kld_file *f, int64_t c, int64_t j, float *scale, float *min_log_prob,
                  float *logp)
{
    float s = 0, m = 0;
    if (c >= 0 && c < f->n_chunk && j >= 0 && j < f->rows_per_chunk) {
        const uint8_t *row =
            f->data + f->rows_offset + ((uint64_t)c * (uint64_t)f->rows_per_chunk + (uint64_t)j) *
                                           f->row_bytes;
        memcpy(&s, row, 4);
        memcpy(&m, row + 4, 4);
        for (int32_t i = 0; logp && i < f->n_vocab; i++) {
            uint16_t q;
            memcpy(&q, row + 8 + 2 * (size_t)i, 2);
            logp[i] = s * q + m;
        }
    } else if (logp) {
        memset(logp, 0, (size_t)f->n_vocab * sizeof *logp);
    }
    if (scale)
        *scale = s;
    if (min_log_prob)
        *min_log_prob = m;
}
