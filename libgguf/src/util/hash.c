/* XXH3-128 digests of tensors, files and models (see gguf/hash.h). */
#include "util/cpus.h"
#include "util/error_lib.h"
#include "gguf/hash.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

static void from_xxh(XXH128_hash_t h, gguf_digest *out)
{
    out->hi = h.high64;
    out->lo = h.low64;
}

void gguf_digest_bytes(const void *data, size_t n, gguf_digest *out)
{
    from_xxh(XXH3_128bits(data, n), out);
}

char *gguf_digest_hex(const gguf_digest *d, char *out)
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        out[i] = hex[(d->hi >> (60 - 4 * i)) & 15];
        out[16 + i] = hex[(d->lo >> (60 - 4 * i)) & 15];
    }
    out[32] = '\0';
    return out;
}

int gguf_digest_parse(const char *s, gguf_digest *out)
{
    uint64_t v[2] = {0, 0};
    if (!s || !out)
        return GGUF_E_INVALID;
    for (int i = 0; i < 32; i++) {
        char c = s[i];
        int x = (c >= '0' && c <= '9') ? c - '0'
              : (c >= 'a' && c <= 'f') ? c - 'a' + 10
              : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                       : -1;
        if (x < 0)
            return GGUF_E_INVALID;
        v[i / 16] = (v[i / 16] << 4) | (uint64_t)x;
    }
    if (s[32] != '\0')
        return GGUF_E_INVALID;
    out->hi = v[0];
    out->lo = v[1];
    return GGUF_OK;
}

int gguf_digest_equal(const gguf_digest *a, const gguf_digest *b)
{
    return a->hi == b->hi && a->lo == b->lo;
}

void gguf_digest_tensor(const gguf_tensor *t, gguf_digest *out)
{
    gguf_digest_bytes(t->data, (size_t)t->nbytes, out);
}

void gguf_digest_file(const gguf_file *f, gguf_digest *out)
{
    gguf_digest_bytes(gguf_file_bytes(f), (size_t)gguf_file_size(f), out);
}

static void put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (56 - 8 * i));
}

void gguf_digest_model(const gguf_tensor *const *tensors, const gguf_digest *digests, int64_t n,
                       gguf_digest *out)
{
    XXH3_state_t *st = XXH3_createState();
    XXH3_128bits_reset(st);
    for (int64_t i = 0; i < n; i++) {
        const gguf_tensor *t = tensors[i];
        XXH3_128bits_update(st, t->name, strlen(t->name) + 1);
        uint8_t meta[8 + 8 * GGUF_MAX_DIMS];
        memcpy(meta, &t->type, 4);
        memcpy(meta + 4, &t->n_dims, 4);
        for (uint32_t d = 0; d < t->n_dims; d++)
            memcpy(meta + 8 + 8 * d, &t->ne[d], 8);
        XXH3_128bits_update(st, meta, 8 + 8 * (size_t)t->n_dims);
        uint8_t dg[16];
        put_be64(dg, digests[i].hi);
        put_be64(dg + 8, digests[i].lo);
        XXH3_128bits_update(st, dg, 16);
    }
    from_xxh(XXH3_128bits_digest(st), out);
    XXH3_freeState(st);
}

typedef struct digest_job {
    const gguf_set *set;
    gguf_digest *out;
    const gguf_cancel_flag *cancel;
    pthread_mutex_t lock;
    int64_t next;
} digest_job;

static void *digest_worker(void *arg)
{
    digest_job *j = arg;
    int64_t n = gguf_set_tensor_count(j->set);
    for (;;) {
        if (j->cancel && *j->cancel)
            break;
        pthread_mutex_lock(&j->lock);
        int64_t i = j->next++;
        pthread_mutex_unlock(&j->lock);
        if (i >= n)
            break;
        gguf_digest_tensor(gguf_set_tensor_at(j->set, i), &j->out[i]);
    }
    return NULL;
}

int gguf_digest_set(const gguf_set *s, gguf_digest *out_tensors, gguf_digest *out_model,
                    int n_threads, const gguf_cancel_flag *cancel, gguf_error *err)
{
    int64_t n = gguf_set_tensor_count(s);
    gguf_digest *d = out_tensors ? out_tensors : malloc(((size_t)n + 1) * sizeof *d);
    const gguf_tensor **ts = malloc(((size_t)n + 1) * sizeof *ts);
    int rc = GGUF_OK;
    if (!d || !ts) {
        rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
        goto done;
    }
    if (n_threads <= 0)
        n_threads = gguf_cpus_usable();
    if (n_threads < 1)
        n_threads = 1;
    if (n_threads > 64)
        n_threads = 64;
    digest_job job = {.set = s, .out = d, .cancel = cancel, .next = 0};
    pthread_mutex_init(&job.lock, NULL);
    pthread_t th[64];
    int started = 0;
    for (int i = 1; i < n_threads && i < n; i++)
        if (pthread_create(&th[started], NULL, digest_worker, &job) == 0)
            started++;
    digest_worker(&job);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_destroy(&job.lock);
    if (cancel && *cancel) {
        rc = gguf_fail(err, GGUF_E_INTERRUPTED, GGUF_NO_OFFSET, "interrupted");
        goto done;
    }
    for (int64_t i = 0; i < n; i++)
        ts[i] = gguf_set_tensor_at(s, i);
    if (out_model)
        gguf_digest_model(ts, d, n, out_model);
done:
    if (d != out_tensors)
        free(d);
    free(ts);
    return rc;
}

struct gguf_hasher {
    XXH3_state_t *st;
};

int gguf_hasher_create(gguf_hasher **out)
{
    gguf_hasher *h = malloc(sizeof *h);
    if (!h)
        return GGUF_E_NOMEM;
    h->st = XXH3_createState();
    if (!h->st) {
        free(h);
        return GGUF_E_NOMEM;
    }
    XXH3_128bits_reset(h->st);
    *out = h;
    return GGUF_OK;
}

void gguf_hasher_update(gguf_hasher *h, const void *data, size_t n)
{
    XXH3_128bits_update(h->st, data, n);
}

void gguf_hasher_final(const gguf_hasher *h, gguf_digest *out)
{
    from_xxh(XXH3_128bits_digest(h->st), out);
}

void gguf_hasher_reset(gguf_hasher *h) { XXH3_128bits_reset(h->st); }

void gguf_hasher_free(gguf_hasher *h)
{
    if (!h)
        return;
    XXH3_freeState(h->st);
    free(h);
}
