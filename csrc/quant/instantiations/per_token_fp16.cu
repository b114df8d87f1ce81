#include "quant/per_token_cast.cuh"

template void hopperkit::quant::run_per_token_cast<__half>(const PerTokenCastParams<__half>&, cudaStream_t);
