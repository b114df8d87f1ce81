#include "gemm/fp8_1d2d/launch.cuh"

// The contiguous layout's 256-row tile: each 128-row half multiplied with its own expert (kHalves).
template void hopperkit::gemm::launch_fp8_gemm_1d2d<256, 128, 1, false, false, 1, true>(const Fp8Gemm1d2dParams&, int,
                                                                                         bool, cudaStream_t);
