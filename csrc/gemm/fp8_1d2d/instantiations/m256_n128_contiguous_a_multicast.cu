#include "gemm/fp8_1d2d/launch.cuh"

// The contiguous layout's 256-row tile (kHalves) on CTA pairs that share A: two N blocks of one M
// block, so both CTAs run the same experts' passes and rank 0 multicasts A and its scales.
template void hopperkit::gemm::launch_fp8_gemm_1d2d<256, 128, 1, false, false, 2, true>(const Fp8Gemm1d2dParams&, int,
                                                                                         bool, cudaStream_t);
