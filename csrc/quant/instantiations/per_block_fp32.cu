#include "quant/per_block_cast.cuh"

template void hopperkit::quant::run_per_block_cast<float>(const PerBlockCastParams<float>&, cudaStream_t);
