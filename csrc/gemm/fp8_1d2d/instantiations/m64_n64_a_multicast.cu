#include "gemm/fp8_1d2d/launch.cuh"

// Clusters of two CTAs on adjacent N blocks of one M block, sharing A (kClusterN = 2).
template void hopperkit::gemm::launch_fp8_gemm_1d2d<64, 64, 1, false, false, 2>(const Fp8Gemm1d2dParams&, int, bool,
                                                                                  cudaStream_t);
