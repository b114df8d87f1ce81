#include "gemm/bf16/launch.cuh"

namespace hopperkit::gemm {
template void launch_bf16_gemm<64, 96, OperandMajor::kK, OperandMajor::kK, Bf16Variant::kSplitK>(
    const Bf16GemmParams&, int, bool, cudaStream_t);
}  // namespace hopperkit::gemm
