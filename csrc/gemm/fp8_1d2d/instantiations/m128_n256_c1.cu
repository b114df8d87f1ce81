#include "gemm/fp8_1d2d/launch.cuh"

// 128 rows × 256 columns: each math warpgroup's 64 rows as two 128-column waves (traits.h kWavesN).
template void hopperkit::gemm::launch_fp8_gemm_1d2d<128, 256, 1, false>(const Fp8Gemm1d2dParams&, int, bool, cudaStream_t);
