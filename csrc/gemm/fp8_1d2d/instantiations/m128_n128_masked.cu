#include "gemm/fp8_1d2d/launch.cuh"

template void hopperkit::gemm::launch_fp8_gemm_1d2d<128, 128, 1, false, true>(const Fp8Gemm1d2dParams&, int, bool,
                                                                                cudaStream_t);
