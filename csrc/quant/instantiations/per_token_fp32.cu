#include "quant/per_token_cast.cuh"

template void hopperkit::quant::run_per_token_cast<float>(const PerTokenCastParams<float>&, cudaStream_t);
