/* Internal helpers to fill a gguf_error. Not installed. */
#ifndef GGUF_ERROR_LIB_H
#define GGUF_ERROR_LIB_H

#include "gguf/error.h"

/* Fill err (may be NULL) and return code, so callers can `return gguf_fail(...)`. */
int gguf_fail(gguf_error *err, int code, uint64_t offset, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Same, with errno recorded and its text appended to the message. */
int gguf_fail_errno(gguf_error *err, int code, int sys_errno, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* An options struct of a layout version newer than this library's (callers
 * check `opts && opts->version > GGUF_X_OPTS_VERSION` first): fills err,
 * naming the struct, and returns GGUF_E_OPTS_VERSION. */
int gguf_opts_version_fail(unsigned int version, unsigned int known, const char *type,
                           gguf_error *err);

/* Checked arithmetic: return 0 on overflow, 1 on success. */
static inline int gguf_add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}
static inline int gguf_mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}
static inline int gguf_mul_i64(int64_t a, int64_t b, int64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

#endif
