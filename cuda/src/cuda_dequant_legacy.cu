/* Instantiations of the dequant kernels: legacy types (see cuda_dequant_kernels.cuh). */
#include "cuda_dequant_kernels.cuh"

cudaError_t gc_launch_legacy(uint32_t type, const gc_launch *l, bool *handled)
{
    *handled = true;
    switch (type) {
    case GGUF_TYPE_Q4_0: return gc_launch_type<GGUF_TYPE_Q4_0>(l);
    case GGUF_TYPE_Q4_1: return gc_launch_type<GGUF_TYPE_Q4_1>(l);
    case GGUF_TYPE_Q5_0: return gc_launch_type<GGUF_TYPE_Q5_0>(l);
    case GGUF_TYPE_Q5_1: return gc_launch_type<GGUF_TYPE_Q5_1>(l);
    case GGUF_TYPE_Q8_0: return gc_launch_type<GGUF_TYPE_Q8_0>(l);
    case GGUF_TYPE_Q8_1: return gc_launch_type<GGUF_TYPE_Q8_1>(l);
    case GGUF_TYPE_Q1_0: return gc_launch_type<GGUF_TYPE_Q1_0>(l);
    case GGUF_TYPE_MXFP4: return gc_launch_type<GGUF_TYPE_MXFP4>(l);
    case GGUF_TYPE_NVFP4: return gc_launch_type<GGUF_TYPE_NVFP4>(l);
    case GGUF_TYPE_IQ4_NL: return gc_launch_type<GGUF_TYPE_IQ4_NL>(l);
    default: *handled = false; return cudaErrorInvalidValue;
    }
}
