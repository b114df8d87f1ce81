#include "quant/per_token_cast.cuh"

template void hopperkit::quant::run_per_token_cast<__nv_bfloat16>(const PerTokenCastParams<__nv_bfloat16>&, cudaStream_t);
