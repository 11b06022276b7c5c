/* Error codes, their names and the formatting of error records. */
#include "util/error_lib.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    const char *text;
} status_table[] = {
    {"GGUF_OK", "success"},
    {"GGUF_E_IO", "input/output error"},
    {"GGUF_E_NOMEM", "out of memory"},
    {"GGUF_E_TRUNCATED", "file is truncated"},
    {"GGUF_E_BAD_MAGIC", "not a GGUF file (bad magic)"},
    {"GGUF_E_BAD_VERSION", "unsupported GGUF version"},
    {"GGUF_E_OVERFLOW", "size or offset overflows"},
    {"GGUF_E_BAD_TYPE", "unknown or removed type"},
    {"GGUF_E_BAD_ALIGNMENT", "invalid alignment"},
    {"GGUF_E_BAD_SHAPE", "invalid tensor shape"},
    {"GGUF_E_BAD_OFFSET", "invalid tensor data offset"},
    {"GGUF_E_DUPLICATE", "duplicate name"},
    {"GGUF_E_BAD_UTF8", "invalid UTF-8"},
    {"GGUF_E_LIMIT", "value over a sanity limit"},
    {"GGUF_E_NOT_FOUND", "not found"},
    {"GGUF_E_WRONG_TYPE", "value has another type"},
    {"GGUF_E_SPLIT", "split set incomplete or inconsistent"},
    {"GGUF_E_INVALID", "invalid argument"},
    {"GGUF_E_NOSPACE", "no space left on device"},
    {"GGUF_E_INTERRUPTED", "interrupted"},
    {"GGUF_E_EXISTS", "output exists or is an input"},
    {"GGUF_E_UNSUPPORTED", "not supported"},
    {"GGUF_E_NOT_GGUF", "not a GGUF file"},
    {"GGUF_E_MISMATCH", "verification mismatch"},
    {"GGUF_E_BAD_VALUE", "invalid metadata value"},
    {"GGUF_E_OPTS_VERSION", "unknown options version"},
};

const char *gguf_status_name(int code)
{
    int i = -code;
    if (i < 0 || i >= (int)(sizeof status_table / sizeof status_table[0]))
        return "GGUF_E_UNKNOWN";
    return status_table[i].name;
}

const char *gguf_strerror(int code)
{
    int i = -code;
    if (i < 0 || i >= (int)(sizeof status_table / sizeof status_table[0]))
        return "unknown error";
    return status_table[i].text;
}

void gguf_error_clear(gguf_error *err)
{
    if (!err)
        return;
    err->code = GGUF_OK;
    err->sys_errno = 0;
    err->offset = GGUF_NO_OFFSET;
    err->message[0] = '\0';
}

int gguf_fail(gguf_error *err, int code, uint64_t offset, const char *fmt, ...)
{
    if (!err)
        return code;
    err->code = code;
    err->sys_errno = 0;
    err->offset = offset;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return code;
}

int gguf_fail_errno(gguf_error *err, int code, int sys_errno, const char *fmt, ...)
{
    if (!err)
        return code;
    err->code = code;
    err->sys_errno = sys_errno;
    err->offset = GGUF_NO_OFFSET;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof err->message)
        snprintf(err->message + n, sizeof err->message - (size_t)n, ": %s", strerror(sys_errno));
    return code;
}

int gguf_error_setf(gguf_error *err, int code, int sys_errno, const char *fmt, ...)
{
    if (!err)
        return code;
    err->code = code;
    err->sys_errno = sys_errno;
    err->offset = GGUF_NO_OFFSET;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return code;
}

int gguf_opts_version_fail(unsigned int version, unsigned int known, const char *type,
                           gguf_error *err)
{
    return gguf_fail(err, GGUF_E_OPTS_VERSION, GGUF_NO_OFFSET,
                     "%s: version %u is newer than this library's %u (built against a newer "
                     "gguf header?)", type, version, known);
}
