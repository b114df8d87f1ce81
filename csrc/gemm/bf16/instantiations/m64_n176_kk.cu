// BLOCK_N = 176: its wgmma width is in CuTe's extended shapes (common/wgmma_extended.cuh).
#include "common/wgmma_extended.cuh"
#include "gemm/bf16/launch.cuh"

namespace hopperkit::gemm {
template void launch_bf16_gemm<64, 176, OperandMajor::kK, OperandMajor::kK>(const Bf16GemmParams&, int, bool, cudaStream_t);
}  // namespace hopperkit::gemm
