/*
 * gguf/error.h - error codes and the error record every libgguf call fills.
 *
 * Every fallible function returns 0 on success or a negative gguf_status, and,
 * when the caller passes a gguf_error, fills it with the code, the byte offset
 * (when one applies) and a message that names the file and the field, e.g.
 *
 *     "model.gguf: tensor_infos[3].ne[1]: -5 is negative"   offset 1234
 *
 * The library never prints and never exits; tools print the message.
 */
#ifndef GGUF_ERROR_H
#define GGUF_ERROR_H

#include "gguf/export.h"

#include <signal.h>
#include <stdint.h>

GGUF_BEGIN_DECLS

/* Stable codes: values never change once released. */
typedef enum gguf_status {
    GGUF_OK              = 0,
    GGUF_E_IO            = -1,  /* open/read/write/mmap/fsync failed (see sys_errno) */
    GGUF_E_NOMEM         = -2,  /* an allocation failed */
    GGUF_E_TRUNCATED     = -3,  /* the file ends inside a field or a tensor */
    GGUF_E_BAD_MAGIC     = -4,  /* not a GGUF file */
    GGUF_E_BAD_VERSION   = -5,  /* version 1, big-endian or unknown version */
    GGUF_E_OVERFLOW      = -6,  /* a size, count or offset overflows 64 bits */
    GGUF_E_BAD_TYPE      = -7,  /* unknown or removed tensor/value type id */
    GGUF_E_BAD_ALIGNMENT = -8,  /* general.alignment zero, not a power of two, huge */
    GGUF_E_BAD_SHAPE     = -9,  /* n_dims or ne[] invalid, row not whole blocks */
    GGUF_E_BAD_OFFSET    = -10, /* tensor data misaligned, overlapping or past EOF */
    GGUF_E_DUPLICATE     = -11, /* duplicate metadata key or tensor name */
    GGUF_E_BAD_UTF8      = -12, /* a key or tensor name is not valid UTF-8 */
    GGUF_E_LIMIT         = -13, /* a count, length or nesting depth over a sane cap */
    GGUF_E_NOT_FOUND     = -14, /* no such key, tensor or file */
    GGUF_E_WRONG_TYPE    = -15, /* a getter asked for a type the value does not have */
    GGUF_E_SPLIT         = -16, /* split set incomplete or inconsistent */
    GGUF_E_INVALID       = -17, /* the caller passed an invalid argument */
    GGUF_E_NOSPACE       = -18, /* the output file system is full */
    GGUF_E_INTERRUPTED   = -19, /* cancelled through a cancel flag (SIGINT, SIGTERM) */
    GGUF_E_EXISTS        = -20, /* the output exists or is one of the inputs */
    GGUF_E_UNSUPPORTED   = -21, /* valid, but not supported by this operation */
    GGUF_E_NOT_GGUF      = -22, /* recognised as something else: empty, LFS pointer, HTML */
    GGUF_E_MISMATCH      = -23, /* verification found a difference */
    GGUF_E_BAD_VALUE     = -24, /* metadata present but inconsistent or out of range */
    GGUF_E_OPTS_VERSION  = -25, /* an options struct's version this library does not know
                                   (the caller was built against a newer header) */
    GGUF_E_STATUS_MIN    = -25
} gguf_status;

#define GGUF_NO_OFFSET UINT64_MAX

/*
 * The one cancel-flag type of the library: a flag the caller's signal handler
 * (SIGINT, SIGTERM) or another thread sets to non-zero, which long operations
 * (digests, merges and splits, writers, records, outputs) poll; once it is set
 * they stop at the next check, remove what they had begun and return
 * GGUF_E_INTERRUPTED. The library only reads it; the caller owns it and keeps
 * it alive for as long as an operation may poll it.
 *
 *     static gguf_cancel_flag interrupted;
 *     static void on_signal(int sig) { (void)sig; interrupted = 1; }
 *     ... opts.cancel = &interrupted;
 */
typedef volatile sig_atomic_t gguf_cancel_flag;

typedef struct gguf_error {
    int code;            /* a gguf_status */
    int sys_errno;       /* errno for GGUF_E_IO / GGUF_E_NOSPACE, else 0 */
    uint64_t offset;     /* byte offset in the file, or GGUF_NO_OFFSET */
    char message[768];   /* "FILE: field: what", NUL-terminated */
} gguf_error;

/* Short stable name of a code, e.g. "GGUF_E_TRUNCATED". Never NULL. */
const char *gguf_status_name(int code);

/* One-line English description of a code, e.g. "file is truncated". Never NULL. */
const char *gguf_strerror(int code);

/* Reset an error record to GGUF_OK. Accepts NULL. */
void gguf_error_clear(gguf_error *err);

/*
 * Fill an error record the way the library does (no byte offset), for callers
 * that report their own failures through gguf_error (tools, GPU backends).
 * err may be NULL. @return code, so callers can `return gguf_error_setf(...)`.
 */
int gguf_error_setf(gguf_error *err, int code, int sys_errno, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

GGUF_END_DECLS
#endif /* GGUF_ERROR_H */
