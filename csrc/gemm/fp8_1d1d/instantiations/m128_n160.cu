// BLOCK_N = 160: its wgmma width is in CuTe's extended shapes (common/wgmma_extended.cuh).
#include "common/wgmma_extended.cuh"
#include "gemm/fp8_1d1d/launch.cuh"

template void hopperkit::gemm::launch_fp8_gemm_1d1d<128, 160>(const Fp8Gemm1d1dParams&, int, bool, cudaStream_t);
