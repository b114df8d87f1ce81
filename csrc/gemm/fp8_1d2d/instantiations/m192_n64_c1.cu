#include "gemm/fp8_1d2d/launch.cuh"

template void hopperkit::gemm::launch_fp8_gemm_1d2d<192, 64, 1, false>(const Fp8Gemm1d2dParams&, int, bool, cudaStream_t);
