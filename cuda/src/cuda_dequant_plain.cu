/* Instantiations of the dequant kernels: plain types (see cuda_dequant_kernels.cuh). */
#include "cuda_dequant_kernels.cuh"

cudaError_t gc_launch_plain(uint32_t type, const gc_launch *l, bool *handled)
{
    *handled = true;
    switch (type) {
    case GGUF_TYPE_F32: return gc_launch_type<GGUF_TYPE_F32>(l);
    case GGUF_TYPE_F16: return gc_launch_type<GGUF_TYPE_F16>(l);
    case GGUF_TYPE_BF16: return gc_launch_type<GGUF_TYPE_BF16>(l);
    case GGUF_TYPE_F64: return gc_launch_type<GGUF_TYPE_F64>(l);
    case GGUF_TYPE_I8: return gc_launch_type<GGUF_TYPE_I8>(l);
    case GGUF_TYPE_I16: return gc_launch_type<GGUF_TYPE_I16>(l);
    case GGUF_TYPE_I32: return gc_launch_type<GGUF_TYPE_I32>(l);
    case GGUF_TYPE_I64: return gc_launch_type<GGUF_TYPE_I64>(l);
    default: *handled = false; return cudaErrorInvalidValue;
    }
}
