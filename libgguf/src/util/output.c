/* Atomic output files: temporary file beside the output, fsync, rename,
 * fsync of the folder. The one place that knows how. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/error_lib.h"
#include "gguf/output.h"

struct gguf_output {
    char *path, *tmp;
    int fd;
    FILE *stream;
    gguf_output_opts opts;
    bool committed;
};

static int io_code(int e)
{
    return e == ENOSPC || e == EDQUOT || e == EFBIG ? GGUF_E_NOSPACE : GGUF_E_IO;
}

/* ".NAME.XXXXXX.tmp" beside path: mkstemps gives a unique, unguessable name
 * and creates it with O_EXCL. */
static int make_temp(gguf_output *o, gguf_error *err)
{
    char *dcopy = strdup(o->path), *bcopy = strdup(o->path);
    int rc = 0;
    if (!dcopy || !bcopy) {
        rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
        goto done;
    }
    const char *dir = dirname(dcopy), *base = basename(bcopy);
    size_t n = strlen(dir) + strlen(base) + 16;
    o->tmp = malloc(n);
    if (!o->tmp) {
        rc = gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
        goto done;
    }
    snprintf(o->tmp, n, "%s/.%s.XXXXXX.tmp", dir, base);
    o->fd = mkostemps(o->tmp, 4, O_CLOEXEC);
    if (o->fd < 0) {
        int e = errno;
        free(o->tmp);
        o->tmp = NULL;
        rc = gguf_fail_errno(err, io_code(e), e,
                             "%s: cannot create a temporary file beside the output", o->path);
        goto done;
    }
    /* mkstemp makes 0600; an output is an ordinary file: 0666 minus umask. */
    mode_t um = umask(0);
    umask(um);
    (void)fchmod(o->fd, 0666 & ~um);
done:
    free(dcopy);
    free(bcopy);
    return rc;
}

int gguf_output_create(gguf_output **out, const char *path, const gguf_output_opts *opts,
                       gguf_error *err)
{
    if (opts && opts->version > GGUF_OUTPUT_OPTS_VERSION) {
        if (out)
            *out = NULL;
        return gguf_opts_version_fail(opts->version, GGUF_OUTPUT_OPTS_VERSION, "gguf_output_opts", err);
    }
    if (!out)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "gguf_output_create: no handle");
    *out = NULL;
    if (!path || !*path)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "output: empty path");
    gguf_output *o = calloc(1, sizeof *o);
    if (!o)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    o->fd = -1;
    if (opts)
        o->opts = *opts;
    o->path = strdup(path);
    if (!o->path) {
        free(o);
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    }
    struct stat st;
    int rc = 0;
    if (!o->opts.overwrite && lstat(path, &st) == 0)
        rc = gguf_fail(err, GGUF_E_EXISTS, GGUF_NO_OFFSET, "%s: exists; not replacing it", path);
    else if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
        rc = gguf_fail(err, GGUF_E_EXISTS, GGUF_NO_OFFSET, "%s: is a folder", path);
    if (!rc)
        rc = make_temp(o, err);
    if (rc) {
        gguf_output_free(o);
        return rc;
    }
    *out = o;
    return 0;
}

int gguf_output_fd(const gguf_output *o)
{
    return o ? o->fd : -1;
}

const char *gguf_output_path(const gguf_output *o)
{
    return o ? o->path : NULL;
}

const char *gguf_output_temp_path(const gguf_output *o)
{
    return o ? o->tmp : NULL;
}

FILE *gguf_output_stream(gguf_output *o)
{
    if (!o || o->fd < 0)
        return NULL;
    if (!o->stream) {
        int fd = dup(o->fd);
        if (fd < 0)
            return NULL;
        o->stream = fdopen(fd, "w");
        if (!o->stream)
            close(fd);
    }
    return o->stream;
}

int gguf_output_write(gguf_output *o, const void *data, size_t n, gguf_error *err)
{
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(o->fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = w < 0 ? errno : EIO;
            return gguf_fail_errno(err, io_code(e), e, "%s: cannot write", o->path);
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int gguf_fsync_parent(const char *path)
{
    char *copy = strdup(path);
    if (!copy)
        return -1;
    int dfd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(copy);
    if (dfd < 0)
        return -1;
    int rc = fsync(dfd);
    close(dfd);
    return rc;
}

static int place(gguf_output *o, gguf_error *err)
{
    if (o->opts.overwrite) {
        if (rename(o->tmp, o->path) != 0)
            return gguf_fail_errno(err, GGUF_E_IO, errno, "%s: cannot rename into place",
                                   o->path);
        return 0;
    }
    if (renameat2(AT_FDCWD, o->tmp, AT_FDCWD, o->path, RENAME_NOREPLACE) == 0)
        return 0;
    int e = errno;
    if (e == EEXIST)
        return gguf_fail(err, GGUF_E_EXISTS, GGUF_NO_OFFSET,
                         "%s: the output appeared while writing; not replacing it", o->path);
    if (e != EINVAL && e != ENOSYS)
        return gguf_fail_errno(err, GGUF_E_IO, e, "%s: cannot rename into place", o->path);
    /* No RENAME_NOREPLACE on this file system: link() refuses to replace too. */
    if (link(o->tmp, o->path) != 0) {
        e = errno;
        if (e == EEXIST)
            return gguf_fail(err, GGUF_E_EXISTS, GGUF_NO_OFFSET,
                             "%s: the output appeared while writing; not replacing it", o->path);
        return gguf_fail_errno(err, GGUF_E_IO, e, "%s: cannot link into place", o->path);
    }
    unlink(o->tmp);
    return 0;
}

int gguf_output_commit(gguf_output *o, gguf_error *err)
{
    if (!o || o->fd < 0 || o->committed)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "output: nothing to commit");
    int rc = 0;
    if (o->stream) {
        int bad = fflush(o->stream) != 0 || ferror(o->stream);
        int e = errno;
        if (fclose(o->stream) != 0 && !bad) {
            bad = 1;
            e = errno;
        }
        o->stream = NULL;
        if (bad)
            rc = gguf_fail_errno(err, io_code(e), e, "%s: cannot write", o->path);
    }
    if (!rc && !o->opts.no_sync && fsync(o->fd) != 0)
        rc = gguf_fail_errno(err, io_code(errno), errno, "%s: fsync failed", o->path);
    if (!rc && o->opts.cancel && *o->opts.cancel)
        rc = gguf_fail(err, GGUF_E_INTERRUPTED, GGUF_NO_OFFSET,
                       "%s: interrupted; the partial output was removed", o->path);
    if (!rc)
        rc = place(o, err);
    if (rc)
        return rc; /* free() removes the temporary file */
    o->committed = true;
    if (!o->opts.no_sync)
        gguf_fsync_parent(o->path);
    return 0;
}

void gguf_output_free(gguf_output *o)
{
    if (!o)
        return;
    if (o->stream)
        fclose(o->stream);
    if (o->fd >= 0)
        close(o->fd);
    if (o->tmp && !o->committed)
        unlink(o->tmp);
    free(o->tmp);
    free(o->path);
    free(o);
}

int gguf_output_write_file(const char *path, const void *data, size_t n,
                           const gguf_output_opts *opts, gguf_error *err)
{
    if (opts && opts->version > GGUF_OUTPUT_OPTS_VERSION)
        return gguf_opts_version_fail(opts->version, GGUF_OUTPUT_OPTS_VERSION, "gguf_output_opts",
                                      err);
    gguf_output *o = NULL;
    int rc = gguf_output_create(&o, path, opts, err);
    if (!rc)
        rc = gguf_output_write(o, data, n, err);
    if (!rc)
        rc = gguf_output_commit(o, err);
    gguf_output_free(o);
    return rc;
}
