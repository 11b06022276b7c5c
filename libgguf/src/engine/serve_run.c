/* serve: one prompt through the model.
 *
 *   reset, then eval the prompt in chunks of at most SERVE_CHUNK_FLOATS
 *   logits (the forward pass gives the same numbers however the tokens are
 *   batched, and a long prompt times a large vocabulary would not fit at
 *   once); score each prompt token from the row before it when the request
 *   wants prompt log-probabilities; then greedy: argmax of the last row,
 *   score it, append it, eval it alone, until max_tokens, EOS, a stop id or a
 *   stop string.
 *
 * Scoring a row: log-softmax in double, lp(t) = x[t] - (m + log sum exp(x - m))
 * with m the row's maximum; the rank of t is 1 + the number of tokens with a
 * larger logit; the top k are ordered by logit, ties by lower id. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/error_lib.h"
#include "gguf/forward.h"
#include "engine/serve_internal.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Whether the run must stop before its next model call: the server shuts
 * down, or the client has gone away - nobody would read the answer, and the
 * requests queued behind this one wait for every token it still makes. */
static int stop_check(gguf_serve *s, const gguf_serve_client *cl, serve_seq *out,
                      gguf_error *err)
{
    if (atomic_load(&s->cancel))
        return gguf_fail(err, GGUF_E_INTERRUPTED, GGUF_NO_OFFSET, "serve: shutting down");
    if (cl->alive && !cl->alive(cl->user)) {
        out->client_gone = true;
        return gguf_fail(err, GGUF_E_INTERRUPTED, GGUF_NO_OFFSET, "serve: the client went away");
    }
    return 0;
}

/* The model calls, timed; each one only after stop_check. */
static int model_reset(gguf_serve *s, const gguf_serve_client *cl, serve_seq *out,
                       gguf_error *err)
{
    const int stop = stop_check(s, cl, out, err);
    if (stop)
        return stop;
    const double t0 = now();
    const int rc = s->m.reset(s->m.user, err);
    pthread_mutex_lock(&s->mu);
    s->stats.forward_seconds += now() - t0;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static int model_eval(gguf_serve *s, const gguf_serve_client *cl, serve_seq *out,
                      const int32_t *ids, int64_t n, float *logits, gguf_error *err)
{
    const int stop = stop_check(s, cl, out, err);
    if (stop)
        return stop;
    const double t0 = now();
    const int rc = s->m.eval(s->m.user, ids, n, logits, err);
    pthread_mutex_lock(&s->mu);
    s->stats.forward_seconds += now() - t0;
    s->stats.tokens_evaluated += (uint64_t)n;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* Score token `id` at position pos from its logits row. */
static void score(serve_seq *q, int64_t pos, const float *row, int64_t V, int32_t id)
{
    double m = -INFINITY;
    for (int64_t j = 0; j < V; j++)
        if (row[j] > m)
            m = row[j];
    double sum = 0;
    for (int64_t j = 0; j < V; j++)
        sum += exp((double)row[j] - m);
    const double lse = m + log(sum);
    const float x = row[id];
    int32_t rank = 1;
    for (int64_t j = 0; j < V; j++)
        rank += row[j] > x;
    q->lp[pos] = (double)x - lse;
    q->rank[pos] = rank;
    q->scored[pos] = true;
    /* top k by insertion: the list stays sorted, logit descending, id ascending */
    const int k = q->k;
    int32_t *ti = q->top_id + pos * k;
    double *tl = q->top_lp + pos * k;
    int have = 0;
    for (int64_t j = 0; j < V && k > 0; j++) {
        const float v = row[j];
        if (have == k && !(v > (float)tl[k - 1]))
            continue;
        int at = have < k ? have : k - 1;
        while (at > 0 && v > (float)tl[at - 1]) {
            ti[at] = ti[at - 1];
            tl[at] = tl[at - 1];
            at--;
        }
        ti[at] = (int32_t)j;
        tl[at] = v; /* the logit for now; made a log-probability below */
        if (have < k)
            have++;
    }
    for (int i = 0; i < have; i++)
        tl[i] = tl[i] - lse;
    for (int i = have; i < k; i++) {
        ti[i] = -1;
        tl[i] = -INFINITY;
    }
}

/* A stop string that ends in the text's last `added` bytes: its index, or -1. */
static int find_stop(const serve_creq *q, const serve_seq *out, size_t added, size_t *at)
{
    for (int i = 0; i < q->n_stop; i++) {
        const size_t L = q->stop_len[i];
        if (L > out->text_len)
            continue;
        /* a match must end inside what this token added */
        size_t from = out->text_len >= added + L - 1 ? out->text_len - added - L + 1 : 0;
        for (size_t p = from; p + L <= out->text_len; p++)
            if (memcmp(out->text + p, q->stop[i], L) == 0) {
                *at = p;
                return i;
            }
    }
    return -1;
}

int serve_run(gguf_serve *s, const gguf_serve_client *cl, const serve_creq *q,
              const serve_prompt *p, serve_seq *out, gguf_error *err)
{
    memset(out, 0, sizeof *out);
    /* Decoding starts from the prompt's last logits row: without one it
     * would read memory no eval wrote. */
    if (p->n < 1)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "serve: a prompt of no tokens "
                         "reached the model");
    const int64_t V = s->m.n_vocab, n = p->n, total = p->n + q->max_tokens;
    const bool score_prompt = q->prompt_logprobs >= 0;
    const bool score_gen = q->logprobs >= 0 || q->n_probs > 0;
    int k = q->logprobs > q->prompt_logprobs ? q->logprobs : q->prompt_logprobs;
    if (q->n_probs > k)
        k = q->n_probs;
    out->k = k < 0 ? 0 : k;
    out->n_prompt = n;
    out->ids = malloc((size_t)(total + 1) * sizeof *out->ids);
    out->lp = calloc((size_t)total + 1, sizeof *out->lp);
    out->rank = calloc((size_t)total + 1, sizeof *out->rank);
    out->scored = calloc((size_t)total + 1, sizeof *out->scored);
    out->top_id = malloc(((size_t)total * (size_t)out->k + 1) * sizeof *out->top_id);
    out->top_lp = malloc(((size_t)total * (size_t)out->k + 1) * sizeof *out->top_lp);
    int64_t chunk = (int64_t)(SERVE_CHUNK_FLOATS / (uint64_t)V);
    if (chunk < 1)
        chunk = 1;
    if (chunk > n)
        chunk = n;
    float *logits = malloc((size_t)(chunk * V) * sizeof *logits);
    float *last = malloc((size_t)V * sizeof *last);
    serve_buf text = {0};
    serve_buf_add(&text, "", 0);
    int rc = 0;
    if (!out->ids || !out->lp || !out->rank || !out->scored || !out->top_id || !out->top_lp ||
        !logits || !last || text.nomem) {
        rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "serve: out of memory for %lld tokens "
                       "of %lld logits", (long long)total, (long long)V);
        goto done;
    }
    memcpy(out->ids, p->ids, (size_t)n * sizeof *out->ids);
    if ((rc = model_reset(s, cl, out, err)))
        goto done;
    for (int64_t off = 0; off < n; off += chunk) {
        const int64_t m = n - off < chunk ? n - off : chunk;
        if ((rc = model_eval(s, cl, out, p->ids + off, m, logits, err)))
            goto done;
        for (int64_t r = 0; r < m; r++) {
            const int64_t pos = off + r;
            if (score_prompt && pos + 1 < n)
                score(out, pos + 1, logits + r * V, V, p->ids[pos + 1]);
        }
        if (off + m == n)
            memcpy(last, logits + (m - 1) * V, (size_t)V * sizeof *last);
    }
    out->finish = SERVE_FIN_LENGTH;
    for (int64_t g = 0; g < q->max_tokens; g++) {
        const int32_t next = (int32_t)gguf_fwd_argmax(last, V);
        const int64_t pos = n + g;
        if (score_gen)
            score(out, pos, last, V, next);
        out->ids[pos] = next;
        out->n_gen++;
        if (next == s->m.eos && !q->ignore_eos) {
            out->finish = SERVE_FIN_EOS;
            break;
        }
        char piece[SERVE_PIECE_MAX];
        const size_t pl = serve_piece(s, next, piece);
        serve_buf_add(&text, piece, pl);
        if (text.nomem) {
            rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "serve: out of memory for text");
            goto done;
        }
        out->text = text.p;
        out->text_len = text.n;
        size_t at;
        const int si = find_stop(q, out, pl, &at);
        if (si >= 0) {
            out->finish = SERVE_FIN_STOP_STR;
            out->stop_index = si;
            text.n = at;
            text.p[at] = 0;
            break;
        }
        bool stop_id = false;
        for (int i = 0; i < q->n_stop_ids; i++)
            stop_id |= q->stop_ids[i] == next;
        if (stop_id) {
            out->finish = SERVE_FIN_STOP_ID;
            out->stop_id = next;
            break;
        }
        if (g + 1 == q->max_tokens)
            break;
        if ((rc = model_eval(s, cl, out, &next, 1, last, err)))
            goto done;
    }
done:
    out->text = text.p;
    out->text_len = text.n;
    free(logits);
    free(last);
    return rc;
}

void serve_seq_free(serve_seq *q)
{
    if (!q)
        return;
    free(q->ids);
    free(q->lp);
    free(q->rank);
    free(q->scored);
    free(q->top_id);
    free(q->top_lp);
    free(q->text);
    memset(q, 0, sizeof *q);
}
