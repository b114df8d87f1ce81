#include "gemm/fp8_1d1d/launch.cuh"

template void hopperkit::gemm::launch_fp8_gemm_1d1d<128, 128>(const Fp8Gemm1d1dParams&, int, bool, cudaStream_t);
