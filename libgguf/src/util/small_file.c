/* Small files read whole, and JSON nesting measured before parsing. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/error_lib.h"
#include "util/small_file.h"

int gguf_read_small_file(const char *path, size_t max_bytes, char **out, size_t *len,
                         gguf_error *err)
{
    *out = NULL;
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return gguf_fail_errno(err, errno == ENOENT ? GGUF_E_NOT_FOUND : GGUF_E_IO, errno,
                               "%s", path);
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return gguf_fail(err, GGUF_E_IO, GGUF_NO_OFFSET, "%s: not a regular file", path);
    }
    if ((uint64_t)sb.st_size > max_bytes) {
        close(fd);
        return gguf_fail(err, GGUF_E_LIMIT, 0, "%s: %lld bytes (at most %zu)", path,
                         (long long)sb.st_size, max_bytes);
    }
    char *buf = malloc((size_t)sb.st_size + 1);
    if (!buf) {
        close(fd);
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "%s: out of memory", path);
    }
    size_t got = 0;
    while (got < (size_t)sb.st_size) {
        const ssize_t k = read(fd, buf + got, (size_t)sb.st_size - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            const int e = k < 0 ? errno : EIO;
            free(buf);
            close(fd);
            return gguf_fail_errno(err, GGUF_E_IO, e, "%s: read", path);
        }
        got += (size_t)k;
    }
    close(fd);
    buf[got] = 0;
    *out = buf;
    *len = got;
    return 0;
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
