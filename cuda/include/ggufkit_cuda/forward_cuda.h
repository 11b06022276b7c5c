/*
 * ggufkit_cuda/forward_cuda.h - the reference forward pass on one GPU.
 *
 * Another backend behind the capture interface of gguf/forward.h: the same
 * architectures, the same options (gguf_fwd_opts), the same capture points
 * with the same names and shapes, so that records written from a GPU run
 * compare point by point with CPU records (ref-forward --backend cuda
 * --compare CPU.gguf). The hyper-parameter checks, the RoPE/YaRN set-up and
 * the MoE routing decisions are the CPU module's own code (a CPU context is
 * created inside, without its caches); the GPU runs the rest:
 *
 *   GEMMs        cuBLAS SGEMM, f32 in and out, f32 accumulation, pedantic math
 *                (no TF32, no reduced-precision reductions, no atomics);
 *   RMSNorm, RoPE (adjacent and half pairs, YaRN, rope_freqs), SwiGLU,
 *   attention (GQA with causal mask; MLA with kv_b expanded per head from
 *   attn_k_b/attn_v_b or a legacy attn_kv_b), MoE gather/combine, shared
 *   experts: kernels that store f32 and accumulate reductions in double,
 *   rounding where the CPU's f32 mode rounds;
 *   MoE routing  router logits by GEMM on the GPU; softmax/sigmoid, selection
 *                bias, group-limited top-k, normalisation and scaling by the
 *                CPU's fw_moe_route on the host (the host needs the chosen ids
 *                anyway: only those experts are streamed to the GPU).
 *
 * Weights stream from the file's mmap: when the model fits in RAM its
 * mappings are registered with CUDA (page-locked in place, read-only) and the
 * copy engine reads quantized rows straight from the page cache; otherwise
 * host threads gather them into one of three pinned buffers. Either way they
 * are copied to the GPU on a copy stream while the previous chunk is
 * dequantized (gguf_cuda_dequant, bit-exact with the CPU) and multiplied on
 * the compute stream; events order the reuse of each buffer. Device memory
 * holds three raw chunks, one chunk of dequantized weights, the activations
 * and the KV cache, whatever the size of the model. An MoE layer moves only
 * the experts some token routes to, packed together into chunks of up to
 * chunk_bytes (one GEMM per expert as its rows arrive).
 *
 * Agreement with the CPU f32 reference: not bit-exact (cuBLAS accumulates in
 * f32, the CPU in double); on generated models relative L2 stays below 1e-4
 * at every point, the default f32 tolerance of gguf/compare.h. Routing near
 * ties can flip an expert; see docs/ref-forward.md.
 *
 * Not supported (GGUF_E_UNSUPPORTED, with a message): GGUF_FWD_F64,
 * GGUF_FWD_MLA_ABSORBED, and the glm-dsa indexer once a query sees more keys
 * than its top-k (use dense_indexer, or fewer tokens).
 *
 * Errors of every function: as in ggufkit_cuda/cuda_device.h (GGUF_E_IO with
 * ENODEV when there is no GPU: tools exit 3; GGUF_E_NOMEM for device or
 * pinned memory), plus those of gguf_fwd_ctx_create / gguf_fwd_eval.
 * A context is used from one host thread at a time; it keeps the device
 * current for that thread while it works.
 */
#ifndef GGUFKIT_CUDA_FORWARD_CUDA_H
#define GGUFKIT_CUDA_FORWARD_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/error.h"
#include "gguf/forward.h"
#include "gguf/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gguf_cuda_fwd_opts {
    int device;             /* CUDA device index (default 0) */
    size_t chunk_bytes;     /* quantized bytes per streamed chunk; 0: 64 MiB */
    int n_copy_threads;     /* host threads copying mmap -> pinned; 0: the usable
                               CPUs (affinity mask), at most 16 */
    int host_register;      /* register the model's file mappings with CUDA so the
                               copy engine reads the page cache in place (no host
                               copy): 0 auto (when the files fit in half the RAM;
                               their pages then stay resident whatever drop_pages
                               says), 1 always (GGUF_E_IO/NOMEM when CUDA refuses),
                               -1 never (gather into pinned staging) */
    size_t mem_limit;       /* device bytes the context may hold (0: no cap): staging
                               is sized to fit (three raw chunks of a sixteenth of the
                               cap each, the dequantized chunk an eighth; cuBLAS's
                               32 MiB workspace counts too),
                               and every allocation past the cap (activations, KV
                               cache, scratch) fails with GGUF_E_NOMEM naming what
                               did not fit; a cap below the staging and one token's
                               activations is refused at create */
    int moe_pad;            /* the routed experts' rows: 0 auto (padded to the same count
                               for one batched GEMM per chunk, when that adds at most
                               128 rows an expert and 256 MiB), -1 never (one GEMM
                               per expert): the two give the same answer within f32
                               tolerance; tests run both */
    int n_route_threads;    /* host threads routing an MoE layer's tokens (softmax or
                               sigmoid and top-k of each token, the CPU's code and
                               bits): 0 auto (the usable CPUs, at most 8), 1 the
                               calling thread only; at most 64 */
} gguf_cuda_fwd_opts;

/* Transfer figures of a context, summed over its evals. */
typedef struct gguf_cuda_fwd_xfer {
    uint64_t h2d_bytes;     /* quantized weight bytes copied to the GPU */
    uint64_t chunks;        /* chunks streamed (routed experts of a tensor are packed
                               together, up to chunk_bytes) */
    double host_copy_seconds; /* host time gathering weights into pinned memory (or
                                 waiting for the copy threads to finish) */
    double host_wait_seconds; /* host time waiting for a free pinned buffer (the
                                 copy engine or the GPU is behind) */
    double host_issue_seconds; /* host time queueing dequant launches and GEMMs on
                                  the streamed chunks */
    uint64_t direct_bytes;  /* of h2d_bytes: read in place from registered mappings */
    uint64_t registered_bytes; /* file bytes registered (page-locked) with CUDA */
    double register_seconds;   /* time the registration took (at create) */
    double host_sync_seconds; /* host time waiting for the GPU to finish (MoE
                                 routing needs the router logits; end of eval):
                                 the pipeline drains there */
    double host_route_seconds; /* host time from the router logits' arrival to the
                                  routed experts' first copy queued (routing,
                                  row lists): the copy engine idles meanwhile */
    double stream_seconds;  /* wall time of evals spent streaming + computing */
    uint64_t device_bytes;  /* most device memory the context held, sampled after
                               every block (cudaMemGetInfo against the free memory
                               before the context was created): staging, weights,
                               activations, KV cache, cuBLAS workspace */
} gguf_cuda_fwd_xfer;

typedef struct gguf_cuda_fwd gguf_cuda_fwd;

/*
 * A GPU context for one sequence on device copts->device (opts and copts may
 * be NULL). opts->capture is called from the calling thread with host copies
 * of the captured rows, exactly as gguf_fwd_eval does.
 * @return 0; the codes of gguf_fwd_ctx_create; GGUF_E_UNSUPPORTED (see
 *         above); GGUF_E_IO/ENODEV without a GPU; GGUF_E_NOMEM.
 */
int gguf_cuda_fwd_create(gguf_cuda_fwd **out, const gguf_model *m, const gguf_fwd_opts *opts,
                         const gguf_cuda_fwd_opts *copts, gguf_error *err);
void gguf_cuda_fwd_free(gguf_cuda_fwd *c);

/* As gguf_fwd_eval: n tokens at positions n_past.., logits (may be NULL)
 * receives n rows of n_vocab floats (host memory). */
int gguf_cuda_fwd_eval(gguf_cuda_fwd *c, const int32_t *tokens, int64_t n, float *logits,
                       gguf_error *err);

/*
 * The same GPU context behind the interface of gguf/forward.h (backend name
 * "cuda"): gguf_fwd_eval, gguf_fwd_generate, gguf/run.h's recorder and the
 * stats work on it as on the CPU reference.
 */
int gguf_cuda_fwd_ctx_create(gguf_fwd_ctx **out, const gguf_model *m, const gguf_fwd_opts *opts,
                             const gguf_cuda_fwd_opts *copts, gguf_error *err);
/* The GPU context behind ctx when gguf_cuda_fwd_ctx_create made it, else NULL. */
gguf_cuda_fwd *gguf_cuda_fwd_of(const gguf_fwd_ctx *ctx);

int64_t gguf_cuda_fwd_n_past(const gguf_cuda_fwd *c);
/* gguf_fwd_stats as the CPU fills them (peak_weight_bytes: device bytes of
 * dequantized weights alive at once), and the transfer figures (xfer may be
 * NULL). */
void gguf_cuda_fwd_stats(const gguf_cuda_fwd *c, gguf_fwd_stats *out, gguf_cuda_fwd_xfer *xfer);

/* Host-to-device bandwidth from pinned memory on the current device, in
 * bytes per second, measured with `bytes` per copy (0: 256 MiB), best of
 * `reps` copies: the yardstick of the streaming benchmark. */
int gguf_cuda_h2d_bandwidth(double *bytes_per_s, size_t bytes, int reps, gguf_error *err);

#ifdef __cplusplus
}
#endif
#endif /* GGUFKIT_CUDA_FORWARD_CUDA_H */
