/* Small files read whole, JSON nesting measured before parsing, and what a
 * jansson load error means. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/error_lib.h"
#include "util/small_file.h"

int gguf_read_small_file(const char *path, size_t max_bytes, char **out, size_t *len,
                         gguf_error *err)
{
    if (out)
        *out = NULL;
    if (!path || !out)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_read_small_file: NULL argument");
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return gguf_fail_errno(err, errno == ENOENT ? GGUF_E_NOT_FOUND : GGUF_E_IO, errno,
                               "%s", path);
    struct stat sb;
    if (fstat(fd, &sb) != 0 || S_ISDIR(sb.st_mode)) {
        const int e = S_ISDIR(sb.st_mode) ? EISDIR : errno;
        close(fd);
        return gguf_fail_errno(err, GGUF_E_IO, e, "%s", path);
    }
    /* a regular file is sized up front; a pipe grows the buffer as it comes */
    const bool regular = S_ISREG(sb.st_mode) && sb.st_size > 0; /* /proc says 0 */
    if (regular && (uint64_t)sb.st_size > max_bytes) {
        close(fd);
        return gguf_fail(err, GGUF_E_LIMIT, 0, "%s: %lld bytes (at most %zu)", path,
                         (long long)sb.st_size, max_bytes);
    }
    const size_t most = max_bytes < SIZE_MAX - 2 ? max_bytes + 2 : SIZE_MAX;
    size_t cap = regular ? (size_t)sb.st_size + 1 : 4096 < most ? 4096 : most;
    char *buf = malloc(cap);
    size_t got = 0;
    while (buf) {
        if (got + 1 >= cap) {
            if (regular || got > max_bytes || cap >= most)
                break; /* the size is known, or a pipe ran over: one byte tells */
            const size_t want = cap < most / 2 ? cap * 2 : most;
            char *t = realloc(buf, want);
            if (!t) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = t;
            cap = want;
        }
        const ssize_t k = read(fd, buf + got, cap - 1 - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            const int e = errno;
            free(buf);
            close(fd);
            return gguf_fail_errno(err, GGUF_E_IO, e, "%s: read", path);
        }
        if (k == 0)
            break;
        got += (size_t)k;
    }
    close(fd);
    if (!buf)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "%s: out of memory", path);
    if (got > max_bytes) {
        free(buf);
        return gguf_fail(err, GGUF_E_LIMIT, 0, "%s: over %zu bytes", path, max_bytes);
    }
    buf[got] = 0;
    *out = buf;
    if (len)
        *len = got;
    return 0;
}

int gguf_json_error_status(const struct json_error_t *je)
{
    switch (json_error_code(je)) {
    case json_error_invalid_utf8:
    case json_error_null_byte_in_key:
    case json_error_null_character: return GGUF_E_BAD_UTF8;
    case json_error_duplicate_key: return GGUF_E_DUPLICATE;
    case json_error_stack_overflow: return GGUF_E_LIMIT;
    case json_error_out_of_memory: return GGUF_E_NOMEM;
    default: return GGUF_E_BAD_VALUE;
    }
}

int gguf_json_depth(const char *s, size_t n, int limit)
{
    int depth = 0, max = 0;
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (c == '{' || c == '[') {
            if (++depth > max && (max = depth) > limit)
                return max;
        } else if (c == '}' || c == ']') {
            depth--;
        }
    }
    return max;
}
