// Launcher of the BF16 GEMM for one tile configuration and operand majorness.
#pragma once

#include "common/launch.h"
#include "gemm/bf16/kernel.cuh"

namespace hopperkit::gemm {

template <int kBlockM, int kBlockN, OperandMajor kMajorA, OperandMajor kMajorB, Bf16Variant kVariant = Bf16Variant::kGeneral>
void launch_bf16_gemm(const Bf16GemmParams& params_in, int num_sms, bool pdl, cudaStream_t stream) {
  using T = Bf16GemmTraits<kBlockM, kBlockN, kMajorA, kMajorB, kVariant>;
  constexpr bool kKGrouped = T::kKGrouped;
  Bf16GemmParams params = params_in;
  params.sched_rows = scheduled_rows(params, kBlockM);
  params.k_splits = 1;
  const bool m_grouped =
      params.layout == GemmLayout::kMGroupedContiguous || params.layout == GemmLayout::kMGroupedMasked;
  HK_CHECK(!m_grouped || (kMajorA == OperandMajor::kK && kMajorB == OperandMajor::kK),
           "the m-grouped BF16 GEMMs take K-major operands only");
  HK_CHECK((params.layout == GemmLayout::kKGroupedContiguous) == kKGrouped,
           "the k-grouped layout runs its own instantiations, and only it");
  HK_CHECK((params.layout == GemmLayout::kMGroupedMasked) == T::kMasked,
           "the masked layout runs its own instantiations, and only it");
  HK_CHECK(!kKGrouped || (params.ks != nullptr && params.output == Bf16GemmOutput::kFp32 && params.c == nullptr),
           "the k-grouped BF16 GEMM takes the group sizes and FP32 D (holding C when there is one)");
  // The reduction path adds every stored row (no row-without-result selects): the layouts whose rows
  // all have a result.
  HK_CHECK(!params.add_to_d || (params.output == Bf16GemmOutput::kFp32 && params.c == nullptr &&
                                (params.layout == GemmLayout::kNormal || kKGrouped)),
           "adding into D is for FP32 D that already holds C, in the normal or k-grouped layout");
  // The FP32 TMA path stores every row of a block: the layouts whose stored rows all have a result.
  HK_CHECK(!params.tma_store_d || params.output != Bf16GemmOutput::kFp32 ||
               params.layout == GemmLayout::kNormal || kKGrouped,
           "FP32 D through TMA is for the normal and k-grouped layouts");
  HK_CHECK(params.layout != GemmLayout::kMGroupedContiguous || kBlockM <= 128,
           "contiguous segments are aligned to 128 rows: BLOCK_M must not exceed 128");
  HK_CHECK(params.k >= 1, "the BF16 GEMM kernel needs K >= 1 (K = 0 is D = C, handled by the op)");
  const long tiles = static_cast<long>((params.sched_rows + kBlockM - 1) / kBlockM) * ((params.n + kBlockN - 1) / kBlockN);
  HK_CHECK(tiles < INT32_MAX, "too many tiles for the scheduler: ", tiles);
  if (tiles == 0) return;
  launch_kernel(bf16_gemm_kernel<T>, persistent_launch_config<T>(tiles, num_sms, /*cluster_x=*/1, pdl, stream), params);
}

}  // namespace hopperkit::gemm
