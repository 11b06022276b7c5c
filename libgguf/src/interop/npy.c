/* .npy writer (format 1.0, float32, C order). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error_lib.h"
#include "gguf/npy.h"

struct gguf_npy_writer {
    gguf_output *out;
    uint64_t want, got;
};

int gguf_npy_writer_create_f32(gguf_npy_writer **out, const char *path, const int64_t *shape,
                               int n_dims, const gguf_output_opts *opts, gguf_error *err)
{
    *out = NULL;
    if (opts && opts->version > GGUF_OUTPUT_OPTS_VERSION)
        return gguf_opts_version_fail(opts->version, GGUF_OUTPUT_OPTS_VERSION, "gguf_output_opts", err);
    if (n_dims < 1 || n_dims > GGUF_NPY_MAX_DIMS)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "%s: .npy with %d dimensions", path,
                         n_dims);
    uint64_t count = 1;
    for (int i = 0; i < n_dims; i++)
        if (shape[i] < 0 || !gguf_mul_u64(count, (uint64_t)shape[i], &count))
            return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "%s: bad .npy shape", path);
    gguf_npy_writer *w = calloc(1, sizeof *w);
    if (!w)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "out of memory");
    w->want = count;
    gguf_output_opts o = {.overwrite = true};
    int rc = gguf_output_create(&w->out, path, opts ? opts : &o, err);
    if (rc) {
        free(w);
        return rc;
    }
    char dict[400];
    int k = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
    for (int i = 0; i < n_dims; i++)
        k += snprintf(dict + k, sizeof dict - (size_t)k, "%lld,%s", (long long)shape[i],
                      i + 1 < n_dims ? " " : "");
    if (n_dims > 1)
        k--; /* (a, b) without the trailing comma; (n,) keeps it */
    k += snprintf(dict + k, sizeof dict - (size_t)k, "), }");
    const size_t pad = (64 - (10 + (size_t)k + 1) % 64) % 64;
    const size_t hlen = (size_t)k + pad + 1;
    unsigned char hdr[10 + sizeof dict + 64];
    memcpy(hdr, "\x93NUMPY\x01\x00", 8);
    hdr[8] = (unsigned char)(hlen & 0xFF);
    hdr[9] = (unsigned char)(hlen >> 8);
    memcpy(hdr + 10, dict, (size_t)k);
    memset(hdr + 10 + k, ' ', pad);
    hdr[10 + (size_t)k + pad] = '\n';
    rc = gguf_output_write(w->out, hdr, 10 + hlen, err);
    if (rc) {
        gguf_npy_writer_free(w);
        return rc;
    }
    *out = w;
    return 0;
}

int gguf_npy_writer_append_f32(gguf_npy_writer *w, const float *x, uint64_t n, gguf_error *err)
{
    if (n > w->want - w->got)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET, "%s: more values than its shape",
                         gguf_output_path(w->out));
    w->got += n;
    return gguf_output_write(w->out, x, (size_t)n * sizeof(float), err);
}

int gguf_npy_writer_commit(gguf_npy_writer *w, gguf_error *err)
{
    if (w->got != w->want)
        return gguf_fail(err, GGUF_E_INVALID, GGUF_NO_OFFSET,
                         "%s: %llu of %llu values written", gguf_output_path(w->out),
                         (unsigned long long)w->got, (unsigned long long)w->want);
    return gguf_output_commit(w->out, err);
}

void gguf_npy_writer_free(gguf_npy_writer *w)
{
    if (!w)
        return;
    gguf_output_free(w->out);
    free(w);
}

int gguf_npy_write_f32(const char *path, const float *data, int64_t rows, int64_t cols,
                       gguf_error *err)
{
    const int64_t shape[2] = {rows, cols};
    gguf_npy_writer *w = NULL;
    int rc = gguf_npy_writer_create_f32(&w, path, shape, 2, NULL, err);
    if (!rc)
        rc = gguf_npy_writer_append_f32(w, data, (uint64_t)(rows * cols), err);
    if (!rc)
        rc = gguf_npy_writer_commit(w, err);
    gguf_npy_writer_free(w);
    return rc;
}
