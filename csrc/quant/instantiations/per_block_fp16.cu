#include "quant/per_block_cast.cuh"

template void hopperkit::quant::run_per_block_cast<__half>(const PerBlockCastParams<__half>&, cudaStream_t);
