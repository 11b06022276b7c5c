/*
 * --gpu: the CUDA dequantization (ggufkit_cuda/cuda_dequant.h) must equal the
 * CPU reference bit for bit, on every tensor, chunk by chunk.
 *
 * Through the checker of ggufkit_cuda/cuda_dq_check.h: the CPU decodes each
 * chunk straight into one of the checker's pinned buffers, the submit queues
 * the upload, the GPU's dequantization and an on-device count of the
 * differing elements, and the CPU goes on with the chunk's statistics and the
 * next chunk while the GPU works; the count is read once per tensor.
 *
 * A build without CUDA, or a machine without a usable GPU, is not a
 * verification failure: the check reports why it was skipped.
 */
#include "dequant_verify.h"

#include <stdlib.h>
#include <string.h>

#include "gguf/types.h"

#if defined(GGUFKIT_HAVE_CUDA) && defined(__has_include)
#if __has_include("ggufkit_cuda/cuda_dq_check.h")
#define DV_HAVE_GPU_DEQUANT 1
#include "ggufkit_cuda/cuda_dequant.h"
#include "ggufkit_cuda/cuda_device.h"
#include "ggufkit_cuda/cuda_dq_check.h"
#endif
#endif

#ifdef DV_HAVE_GPU_DEQUANT

/* The checker's slots hold at most this many floats, whatever --chunk says
 * (a larger chunk is decoded into the tool's own buffer and copied). */
#define DV_GPU_MAX_CHUNK ((uint64_t)1 << 25)
#define DV_GPU_MIN_CHUNK ((uint64_t)4096)

struct dv_gpu {
    gguf_cuda_dq_check *chk;
};

bool dv_gpu_available(char *why, size_t why_size)
{
    int count = 0;
    gguf_error err;
    if (gguf_cuda_device_count(&count, &err) != 0 || count < 1) {
        snprintf(why, why_size, "no CUDA device (%s)", err.message);
        return false;
    }
    gguf_cuda_device_info info;
    if (gguf_cuda_device_info_get(0, &info, &err) == 0)
        snprintf(why, why_size, "%s", info.name);
    return true;
}

int dv_gpu_create(dv_gpu **out, uint64_t chunk_elems, int threads, char *why, size_t why_size)
{
    *out = NULL;
    dv_gpu *g = calloc(1, sizeof *g);
    if (!g) {
        snprintf(why, why_size, "out of memory");
        return -1;
    }
    gguf_cuda_dq_check_opts co = GGUF_CUDA_DQ_CHECK_OPTS_INIT;
    co.chunk_elems = (int64_t)(chunk_elems < DV_GPU_MIN_CHUNK   ? DV_GPU_MIN_CHUNK
                               : chunk_elems > DV_GPU_MAX_CHUNK ? DV_GPU_MAX_CHUNK
                                                                : chunk_elems);
    co.n_copy_threads = threads < 1 ? 1 : threads > 32 ? 32 : threads;
    gguf_error err = {0};
    if (gguf_cuda_dq_check_create(&g->chk, &co, &err) != 0) {
        snprintf(why, why_size, "%s", err.message);
        free(g);
        return -1;
    }
    *out = g;
    return 0;
}

int dv_gpu_buffer(dv_gpu *g, uint32_t type, uint64_t n, float **buf, char *why,
                  size_t why_size)
{
    *buf = NULL;
    const int64_t cap = gguf_cuda_dq_check_capacity(g->chk, type);
    if (cap <= 0 || n > (uint64_t)cap)
        return 0; /* decoded elsewhere; dv_gpu_submit copies or refuses it */
    gguf_error err = {0};
    if (gguf_cuda_dq_check_host_buffer(g->chk, buf, &err) != 0) {
        snprintf(why, why_size, "%s", err.message);
        return -1;
    }
    return 0;
}

int dv_gpu_submit(dv_gpu *g, const gguf_tensor *t, const float *x, int64_t row0,
                  int64_t n_rows, char *why, size_t why_size)
{
    gguf_error err = {0};
    const int64_t ne0 = t->ne[0];
    uint64_t row_bytes;
    if (gguf_type_row_bytes(t->type, ne0, &row_bytes) != 0) {
        snprintf(why, why_size, "%s: bad row size", t->name);
        return -1;
    }
    if (!gguf_cuda_dequant_supported(t->type)) {
        snprintf(why, why_size, "the GPU kernels do not handle %s", gguf_type_name(t->type));
        return -1;
    }
    const size_t in = (size_t)(row_bytes * (uint64_t)n_rows);
    if (gguf_cuda_dq_check_submit(g->chk, t->type, t->data + (uint64_t)row0 * row_bytes, in, x,
                                  ne0 * n_rows, &err) != 0) {
        snprintf(why, why_size, "%s: %s", t->name, err.message);
        return -1;
    }
    return 0;
}

int dv_gpu_tensor_end(dv_gpu *g, const gguf_tensor *t, uint64_t *n_diff, char *why,
                      size_t why_size)
{
    gguf_error err = {0};
    if (gguf_cuda_dq_check_finish(g->chk, n_diff, &err) != 0) {
        snprintf(why, why_size, "%s: %s", t->name, err.message);
        return -1;
    }
    return 0;
}

void dv_gpu_print_stats(const dv_gpu *g, FILE *f, const char *tool)
{
    if (!g)
        return;
    gguf_cuda_dq_check_stats st;
    gguf_cuda_dq_check_get_stats(g->chk, &st);
    fprintf(f,
            "%s: --gpu: %llu chunks of %llu tensors, %.3g GB quantized and %.3g GB of float32 "
            "uploaded (%.3g GB copied into pinned buffers); host time: %.3f s staging, %.3f s "
            "waiting for a free buffer, %.3f s waiting at tensor ends\n",
            tool, (unsigned long long)st.chunks, (unsigned long long)st.tensors,
            (double)st.src_bytes / 1e9, (double)st.ref_bytes / 1e9,
            (double)st.ref_copied_bytes / 1e9, st.stage_seconds, st.wait_seconds,
            st.finish_seconds);
}

void dv_gpu_free(dv_gpu *g)
{
    if (!g)
        return;
    gguf_cuda_dq_check_free(g->chk);
    free(g);
}

#else /* no CUDA dequantization in this build */

struct dv_gpu {
    int unused;
};

bool dv_gpu_available(char *why, size_t why_size)
{
#ifdef GGUFKIT_HAVE_CUDA
    snprintf(why, why_size, "this build's CUDA library has no dequantization checker");
#else
    snprintf(why, why_size, "this build has no CUDA support (configure where nvcc exists)");
#endif
    return false;
}

int dv_gpu_create(dv_gpu **out, uint64_t chunk_elems, int threads, char *why, size_t why_size)
{
    (void)chunk_elems;
    (void)threads;
    *out = NULL;
    snprintf(why, why_size, "GPU dequantization is not available");
    return -1;
}

int dv_gpu_buffer(dv_gpu *g, uint32_t type, uint64_t n, float **buf, char *why,
                  size_t why_size)
{
    (void)g;
    (void)type;
    (void)n;
    (void)why;
    (void)why_size;
    *buf = NULL;
    return 0;
}

int dv_gpu_submit(dv_gpu *g, const gguf_tensor *t, const float *x, int64_t row0,
                  int64_t n_rows, char *why, size_t why_size)
{
    (void)g;
    (void)t;
    (void)x;
    (void)row0;
    (void)n_rows;
    snprintf(why, why_size, "GPU dequantization is not available");
    return -1;
}

int dv_gpu_tensor_end(dv_gpu *g, const gguf_tensor *t, uint64_t *n_diff, char *why,
                      size_t why_size)
{
    (void)g;
    (void)t;
    *n_diff = 0;
    snprintf(why, why_size, "GPU dequantization is not available");
    return -1;
}

void dv_gpu_print_stats(const dv_gpu *g, FILE *f, const char *tool)
{
    (void)g;
    (void)f;
    (void)tool;
}

void dv_gpu_free(dv_gpu *g)
{
    (void)g;
}

#endif
