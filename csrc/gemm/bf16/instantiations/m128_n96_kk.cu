#include "gemm/bf16/launch.cuh"

namespace hopperkit::gemm {
template void launch_bf16_gemm<128, 96, OperandMajor::kK, OperandMajor::kK>(const Bf16GemmParams&, int, bool, cudaStream_t);
}  // namespace hopperkit::gemm
