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
  const int num_k_blocks = (params.k + T::kBlockK - 1) / T::kBlockK;
  HK_CHECK(params.max_cluster_splits == 1 || (T::kSplitK && params.layout == GemmLayout::kNormal),
           "split-K within a cluster runs the split-K instantiations, in the normal layout");
  HK_CHECK(params.k_splits == 1 ||
               (T::kSplitK && params.layout == GemmLayout::kNormal && params.split_workspace != nullptr &&
                params.split_flags != nullptr && params.split_epoch != 0 && params.split_epoch < (1ull << 56) &&
                params.k_splits < 256 &&
                (params.k_splits - 1) * ((num_k_blocks + params.k_splits - 1) / params.k_splits) < num_k_blocks),
           "split-K runs its own instantiations, in the normal layout, with a workspace, an epoch, fewer than 256 "
           "splits and no empty split; got ", params.k_splits, " splits of ", num_k_blocks, " K blocks");
  HK_CHECK(!T::kSplitK || params.layout == GemmLayout::kNormal, "the split-K instantiations are for the normal layout");
  HK_CHECK(!T::kSwapAB || (params.c == nullptr && !params.add_to_d && !params.tma_store_d),
           "the swapped decode GEMM stores D from registers, without C");
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
  const long units = static_cast<long>((params.sched_rows + kBlockM - 1) / kBlockM) *
                     ((params.n + kBlockN - 1) / kBlockN) * params.k_splits;
  HK_CHECK(units < INT32_MAX, "too many work units for the scheduler: ", units);
  if (units == 0) return;
  long launch_units = units;
  int cluster = 1;
  params.split_in_cluster = 0;
  if constexpr (T::kSplitInCluster) {
    // One unit per CTA, a tile's splits (consecutive units) one cluster, split = cluster rank. The
    // caller's k_splits (and workspace) stay for the launches that cannot be such clusters.
    const long tiles = units / params.k_splits;
    if (params.max_cluster_splits > 1) {
      if (const int s = splits_in_cluster<T>(bf16_gemm_kernel<T>, tiles, num_k_blocks, params.max_cluster_splits,
                                             num_sms)) {
        params.k_splits = s;
        params.split_in_cluster = 1;
        cluster = s;
        launch_units = tiles * s;
      }
    }
  }
  launch_kernel(bf16_gemm_kernel<T>, persistent_launch_config<T>(launch_units, num_sms, cluster, pdl, stream), params);
}

}  // namespace hopperkit::gemm
