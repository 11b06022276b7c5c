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
 *
 * Errors: only gguf_digest_set, gguf_digest_parse and gguf_hasher_create can
 * fail; every other function is total. Ownership: digests are plain values,
 * hex strings go to the caller's buffer; the one allocation handed out is the
 * gguf_hasher, freed with gguf_hasher_free. Reentrant; a hasher is used by one
 * thread at a time.
 */
#ifndef GGUF_HASH_H
#define GGUF_HASH_H

#include "gguf/export.h"

#include <stddef.h>
#include <stdint.h>

#include "gguf/error.h"
#include "gguf/file.h"

GGUF_BEGIN_DECLS

/* A 128-bit digest; hi is printed first. A plain value: copy it freely. */
typedef struct gguf_digest {
    uint64_t hi, lo;
} gguf_digest;

#define GGUF_DIGEST_HEX 33 /* 32 digits + NUL */

/* ---- values ---- */

/* XXH3-128 of n bytes at data (data may be NULL when n is 0) into *out. Cannot fail. */
void gguf_digest_bytes(const void *data, size_t n, gguf_digest *out);
/*
 * The 32 lower-case hex digits of d, high half first, into out (at least
 * GGUF_DIGEST_HEX bytes, NUL-terminated; the caller owns it).
 * @return out.
 */
char *gguf_digest_hex(const gguf_digest *d, char *out);
/*
 * Parse exactly 32 hex digits (either case, nothing before or after) into *out.
 * @return 0; GGUF_E_INVALID (NULL, wrong length, a character that is not a hex
 *         digit; *out is then unchanged).
 */
int gguf_digest_parse(const char *hex, gguf_digest *out);
/* @return 1 when a and b are the same digest, 0 otherwise. */
int gguf_digest_equal(const gguf_digest *a, const gguf_digest *b);

/* ---- tensors, models and files ---- */

/* The tensor digest of t (its raw bytes, read from the open file's map: the
 * file or set must stay open during the call). Cannot fail. */
void gguf_digest_tensor(const gguf_tensor *t, gguf_digest *out);

/*
 * Digest every tensor of a set and the model digest, on up to n_threads
 * threads (0 or less: one per CPU the process may use, its affinity mask; at
 * most 64). out_tensors (caller-owned, gguf_set_tensor_count(s) entries, set
 * order) and out_model may each be NULL. cancel (may be NULL) is polled
 * between tensors. Nothing is allocated for the caller.
 * @return 0; GGUF_E_NOMEM; GGUF_E_INTERRUPTED (the cancel flag was set: the
 *         outputs are then incomplete and must not be used).
 */
int gguf_digest_set(const gguf_set *s, gguf_digest *out_tensors, gguf_digest *out_model,
                    int n_threads, const gguf_cancel_flag *cancel, gguf_error *err);

/* The model digest (see the top of this header) of n tensors in set order
 * from their already computed tensor digests. Cannot fail. */
void gguf_digest_model(const gguf_tensor *const *tensors, const gguf_digest *digests, int64_t n,
                       gguf_digest *out);

/* The file digest: XXH3-128 of every byte of one open file (its map). Cannot fail. */
void gguf_digest_file(const gguf_file *f, gguf_digest *out);

/* ---- streaming, for digests computed while data is copied ---- */

typedef struct gguf_hasher gguf_hasher;
/*
 * A streaming XXH3-128 state, empty. *out is owned by the caller: free it
 * with gguf_hasher_free.
 * @return 0; GGUF_E_NOMEM (*out is then NULL).
 */
int gguf_hasher_create(gguf_hasher **out);
/* Feed n more bytes (data may be NULL when n is 0). Cannot fail. */
void gguf_hasher_update(gguf_hasher *h, const void *data, size_t n);
/* The digest of every byte fed since creation or the last reset; the state is
 * unchanged (more bytes may follow). Cannot fail. */
void gguf_hasher_final(const gguf_hasher *h, gguf_digest *out);
/* Back to empty, for the next stream. Cannot fail. */
void gguf_hasher_reset(gguf_hasher *h);
/* Accepts NULL. */
void gguf_hasher_free(gguf_hasher *h);

GGUF_END_DECLS
#endif
