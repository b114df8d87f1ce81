#include "quant/per_block_cast.cuh"

template void hopperkit::quant::run_per_block_cast<__nv_bfloat16>(const PerBlockCastParams<__nv_bfloat16>&, cudaStream_t);
