/* Instantiations of the dequant kernels: kquant types (see cuda_dequant_kernels.cuh). */
#include "cuda_dequant_kernels.cuh"

cudaError_t gc_launch_kquant(uint32_t type, const gc_launch *l, bool *handled)
{
    *handled = true;
    switch (type) {
    case GGUF_TYPE_Q2_K: return gc_launch_type<GGUF_TYPE_Q2_K>(l);
    case GGUF_TYPE_Q3_K: return gc_launch_type<GGUF_TYPE_Q3_K>(l);
    case GGUF_TYPE_Q4_K: return gc_launch_type<GGUF_TYPE_Q4_K>(l);
    case GGUF_TYPE_Q5_K: return gc_launch_type<GGUF_TYPE_Q5_K>(l);
    case GGUF_TYPE_Q6_K: return gc_launch_type<GGUF_TYPE_Q6_K>(l);
    case GGUF_TYPE_Q8_K: return gc_launch_type<GGUF_TYPE_Q8_K>(l);
    case GGUF_TYPE_TQ1_0: return gc_launch_type<GGUF_TYPE_TQ1_0>(l);
    case GGUF_TYPE_TQ2_0: return gc_launch_type<GGUF_TYPE_TQ2_0>(l);
    case GGUF_TYPE_IQ4_XS: return gc_launch_type<GGUF_TYPE_IQ4_XS>(l);
    default: *handled = false; return cudaErrorInvalidValue;
    }
}
