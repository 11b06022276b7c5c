/* Instantiations of the dequant kernels: iq types (see cuda_dequant_kernels.cuh). */
#include "cuda_dequant_kernels.cuh"

cudaError_t gc_launch_iq(uint32_t type, const gc_launch *l, bool *handled)
{
    *handled = true;
    switch (type) {
    case GGUF_TYPE_IQ2_XXS: return gc_launch_type<GGUF_TYPE_IQ2_XXS>(l);
    case GGUF_TYPE_IQ2_XS: return gc_launch_type<GGUF_TYPE_IQ2_XS>(l);
    case GGUF_TYPE_IQ2_S: return gc_launch_type<GGUF_TYPE_IQ2_S>(l);
    case GGUF_TYPE_IQ3_XXS: return gc_launch_type<GGUF_TYPE_IQ3_XXS>(l);
    case GGUF_TYPE_IQ3_S: return gc_launch_type<GGUF_TYPE_IQ3_S>(l);
    case GGUF_TYPE_IQ1_S: return gc_launch_type<GGUF_TYPE_IQ1_S>(l);
    case GGUF_TYPE_IQ1_M: return gc_launch_type<GGUF_TYPE_IQ1_M>(l);
    default: *handled = false; return cudaErrorInvalidValue;
    }
}
