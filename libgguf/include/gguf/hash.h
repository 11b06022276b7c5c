/*
 * gguf/hash.h - XXH3-128 digests of tensors, files and whole models.
 *
 * Three digests, each printed as 32 lower-case hex digits (high half first):
 *  - tensor digest: XXH3-128 of the tensor's raw (quantized) bytes;
 *  - model digest:  XXH3-128 over, for every tensor in set order, its name,
 *                   a NUL, its type (u32 LE), its n_dims (u32 LE), its ne[]
 *                   (i64 LE each) and its tensor digest (16 bytes, high first).
 *                   It ignores metadata and layout, so a split set and its
 *                   merge have the same model digest;
 *  - file digest:   XXH3-128 of every byte of one file.
 * gguf-inspect --hash and gguf-merge --manifest print the same digests.
 */
#ifndef GGUF_HASH_H
#define GGUF_HASH_H

#include "gguf/export.h"

#include <stddef.h>
#include <stdint.h>

#include "gguf/error.h"
#include "gguf/file.h"

GGUF_BEGIN_DECLS

typedef struct gguf_digest {
    uint64_t hi, lo;
} gguf_digest;

#define GGUF_DIGEST_HEX 33 /* 32 digits + NUL */

void gguf_digest_bytes(const void *data, size_t n, gguf_digest *out);
/* Hex form into out (at least GGUF_DIGEST_HEX bytes); returns out. */
char *gguf_digest_hex(const gguf_digest *d, char *out);
/* Parse 32 hex digits. @return 0 or GGUF_E_INVALID. */
int gguf_digest_parse(const char *hex, gguf_digest *out);
int gguf_digest_equal(const gguf_digest *a, const gguf_digest *b);

void gguf_digest_tensor(const gguf_tensor *t, gguf_digest *out);

/*
 * Digest every tensor of a set (out_tensors has gguf_set_tensor_count entries,
 * may be NULL) and the model digest, using up to n_threads threads (0: one per
 * CPU the process may use, its affinity mask). cancel may be NULL.
 * @return 0, GGUF_E_NOMEM, GGUF_E_INTERRUPTED.
 */
int gguf_digest_set(const gguf_set *s, gguf_digest *out_tensors, gguf_digest *out_model,
                    int n_threads, volatile const int *cancel, gguf_error *err);

/* Model digest from already computed tensor digests (tensors in set order). */
void gguf_digest_model(const gguf_tensor *const *tensors, const gguf_digest *digests, int64_t n,
                       gguf_digest *out);

/* Digest of a whole file's bytes. */
void gguf_digest_file(const gguf_file *f, gguf_digest *out);

/* Streaming state, for digests computed while data is copied. */
typedef struct gguf_hasher gguf_hasher;
int gguf_hasher_new(gguf_hasher **out);
void gguf_hasher_update(gguf_hasher *h, const void *data, size_t n);
void gguf_hasher_final(const gguf_hasher *h, gguf_digest *out);
void gguf_hasher_reset(gguf_hasher *h);
void gguf_hasher_free(gguf_hasher *h);

GGUF_END_DECLS
#endif
