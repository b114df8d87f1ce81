// Epilogue of the FP8 1d2d GEMM: BF16 tiles through shared memory and TMA stores; the split-K fixup.
#pragma once

#include <cuda_bf16.h>

#include "common/sync.cuh"
#include "gemm/split_k.cuh"
#include "gemm/split_k_cluster.cuh"
#include "gemm/tile_store.cuh"
#include "gemm/fp8_1d2d/mainloop.cuh"
#include "gemm/fp8_1d2d/traits.h"

namespace hopperkit::gemm {

// Stores one warpgroup's rows of the tile as BF16 (gemm/tile_store.cuh), wave by wave. Rows
// without a result (contiguous padding rows, masked rows past masked_m[g], whole blocks with group -1
// whose `total` is zero) are written as 0; rows outside D are clipped by the TMA store.
template <class T>
__device__ __forceinline__ void store_tile(const Fp8Gemm1d2dParams& p, typename T::SharedStorage& smem, int warpgroup,
                                           AccumulatorRows rows, const MBlockRows& block, int n_block,
                                           const float (&total)[T::kWaves][T::kWaveAccs],
                                           uint32_t halves_rows_with_expert = 0) {
  const auto barrier = static_cast<Fp8GemmBarrier>(static_cast<int>(Fp8GemmBarrier::kEpilogueWarpgroup0) + warpgroup);
  // With a staging box for every box of the tile, a wave's boxes go in one round (one fence and
  // one barrier pair); with one box, box by box.
  constexpr int kBoxesPerWave = T::kWaveN / kStoreBoxCols;
  constexpr int kRound = T::kStoreBuffers >= kBoxesPerWave ? kBoxesPerWave : 1;
#pragma unroll
  for (int w = 0; w < T::kWaves; ++w) {
    const int wave_row = warpgroup * T::kRowsPerWarpgroup + T::wave_row(w);  // within the block
    const int r_a = wave_row + rows.row0, r_b = r_a + 8;
    bool keep_a = r_a < block.valid_rows, keep_b = r_b < block.valid_rows;
    if constexpr (T::kHalves) {
      // The rows' ids were loaded with the tile's (HalvesTileIds); a half that no pass multiplied
      // has zero sums.
      keep_a = r_a < block.store_rows && (halves_rows_with_expert >> (2 * w) & 1u);
      keep_b = r_b < block.store_rows && (halves_rows_with_expert >> (2 * w + 1) & 1u);
    } else if (p.layout == GemmLayout::kMGroupedContiguous) {
      keep_a = r_a < block.store_rows && block.group >= 0 && __ldg(p.m_indices + block.a_row + r_a) >= 0;
      keep_b = r_b < block.store_rows && block.group >= 0 && __ldg(p.m_indices + block.a_row + r_b) >= 0;
    }
    const TileStoreTarget target{&p.tma_d, p.layout == GemmLayout::kMGroupedMasked,
                                 n_block * T::kBlockN + T::wave_col(w), block.a_row + wave_row, block.a_group};
    store_rows_bf16<T::kWaveN, T::kStoreBuffers, kRound, T::kWaves * kBoxesPerWave>(
        target, smem.d[warpgroup], barrier, keep_a, keep_b, total[w], w * kBoxesPerWave);
  }
}

// Split-K through global memory (gemm/split_k.cuh): publish this unit's FP32 partial; returns true,
// with `total` = the sum of every split's partial in split order, when this CTA completed the tile
// and must store it.
template <class T>
__device__ __forceinline__ bool split_k_fixup(const Fp8Gemm1d2dParams& p, typename T::SharedStorage& smem, int tile,
                                              int split, float (&total)[T::kWaves][T::kWaveAccs]) {
  return split_k_publish_and_sum<T::kMathThreads, T::kWaves, T::kWaveAccs>(
      p, tile, split, Fp8GemmBarrier::kSplitPartialsWritten, smem.split_is_last, total);
}

// Split-K within a cluster (GemmProblem::split_in_cluster, gemm/split_k_cluster.cuh): the k_splits
// units of a tile are the CTAs of one cluster (ranks = splits), and the last one sums, into its
// stage ring, with the sequence of additions of split_k_fixup (so both fixups give the same bits).
// PERF: PERF.md "Split-K".
template <class T>
__device__ __forceinline__ bool split_k_fixup_in_cluster(const Fp8Gemm1d2dParams& p, typename T::SharedStorage& smem,
                                                         int split, float (&total)[T::kWaves][T::kWaveAccs]) {
  static_assert(T::kSplitInCluster, "compiled for the decode-sized tiles only (traits.h kSplitInCluster)");
  return split_k_sum_in_cluster<T::kMathThreads, T::kWaves, T::kWaveAccs>(
      p.k_splits, split, &smem.a[0][0], smem.split_cluster, Fp8GemmBarrier::kSplitPartialsWritten, total);
}

}  // namespace hopperkit::gemm
