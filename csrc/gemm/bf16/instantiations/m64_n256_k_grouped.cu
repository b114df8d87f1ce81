#include "gemm/bf16/launch.cuh"

namespace hopperkit::gemm {
template void launch_bf16_gemm<64, 256, OperandMajor::kMN, OperandMajor::kMN, Bf16Variant::kKGrouped>(
    const Bf16GemmParams&, int, bool, cudaStream_t);
}  // namespace hopperkit::gemm
