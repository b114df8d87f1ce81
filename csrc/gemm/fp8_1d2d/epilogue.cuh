// Epilogue of the FP8 1d2d GEMM: BF16 tiles through shared memory and TMA stores; the split-K fixup.
#pragma once

#include <cuda_bf16.h>

#include "common/sync.cuh"
#include "gemm/tile_store.cuh"
#include "gemm/fp8_1d2d/mainloop.cuh"
#include "gemm/fp8_1d2d/traits.h"

namespace hopperkit::gemm {

// Stores one warpgroup's rows of the tile as BF16 (gemm/tile_store.cuh), 64-row wave by wave. Rows
// without a result (contiguous padding rows, masked rows past masked_m[g], whole blocks with group -1
// whose `total` is zero) are written as 0; rows outside D are clipped by the TMA store.
template <class T>
__device__ __forceinline__ void store_tile(const Fp8Gemm1d2dParams& p, typename T::SharedStorage& smem, int warpgroup,
                                           AccumulatorRows rows, const MBlockRows& block, int n_block,
                                           const float (&total)[T::kWaves][T::kBlockN / 2]) {
  const auto barrier = static_cast<Fp8GemmBarrier>(static_cast<int>(Fp8GemmBarrier::kEpilogueWarpgroup0) + warpgroup);
#pragma unroll
  for (int w = 0; w < T::kWaves; ++w) {
    const int wave_row = warpgroup * T::kRowsPerWarpgroup + w * 64;  // within the block
    const int r_a = wave_row + rows.row0, r_b = r_a + 8;
    bool keep_a = r_a < block.valid_rows, keep_b = r_b < block.valid_rows;
    if (p.layout == GemmLayout::kMGroupedContiguous) {
      keep_a = r_a < block.store_rows && block.group >= 0 && __ldg(p.m_indices + block.a_row + r_a) >= 0;
      keep_b = r_b < block.store_rows && block.group >= 0 && __ldg(p.m_indices + block.a_row + r_b) >= 0;
    }
    const TileStoreTarget target{&p.tma_d, p.layout == GemmLayout::kMGroupedMasked, n_block * T::kBlockN,
                                 block.a_row + wave_row, block.a_group};
    store_rows_bf16<T::kBlockN, T::kStoreBuffers>(target, smem.d[warpgroup], barrier, keep_a, keep_b, total[w],
                                                  w * (T::kBlockN / kStoreBoxCols));
  }
}

// Split-K: publish this unit's FP32 partial; returns true (with `total` = the sum of every split's
// partial, in split order, so the result does not depend on which CTA finishes last) when this CTA
// completed the tile and must store it. The workspace holds each thread's fragment contiguously
// across threads (coalesced), in the same thread mapping for every split.
template <class T>
__device__ __forceinline__ bool split_k_fixup(const Fp8Gemm1d2dParams& p, typename T::SharedStorage& smem, int tile,
                                              int split, float (&total)[T::kWaves][T::kBlockN / 2]) {
  constexpr int kWaveFrag = T::kBlockN / 2, kFrag = T::kWaves * kWaveFrag;
  const int thread = threadIdx.x;  // math threads are 0 .. kMathThreads-1
  float* tile_ws = p.split_workspace + static_cast<int64_t>(tile) * p.k_splits * kFrag * T::kMathThreads;
  float* mine = tile_ws + static_cast<int64_t>(split) * kFrag * T::kMathThreads + thread;
#pragma unroll
  for (int w = 0; w < T::kWaves; ++w) {
#pragma unroll
    for (int i = 0; i < kWaveFrag; ++i) __stcg(mine + (w * kWaveFrag + i) * T::kMathThreads, total[w][i]);
  }
  __threadfence();  // the partial is visible device-wide before the count says so
  named_barrier_sync(Fp8GemmBarrier::kSplitPartialsWritten, T::kMathThreads);
  if (thread == 0) {
    smem.split_is_last =
        epoch_flags_arrive(p.split_flags + static_cast<int64_t>(tile) * p.k_splits, split, p.k_splits, p.split_epoch);
  }
  named_barrier_sync(Fp8GemmBarrier::kSplitPartialsWritten, T::kMathThreads);
  if (!smem.split_is_last) return false;
  __threadfence();
#pragma unroll
  for (int w = 0; w < T::kWaves; ++w) {
#pragma unroll
    for (int i = 0; i < kWaveFrag; ++i) total[w][i] = 0.0f;
  }
  // The partials of narrow tiles (the decode-sized ones, 32 floats per thread) are read two splits
  // at a time, every load of a batch issued before its first add: a loop that reads one split and
  // adds it before the next split's loads waits one L2 round trip per split, on the critical path
  // of every decode-sized call. The adds keep split order, so the sum does not depend on the
  // batching. A batch of two 64-float fragments spills (ptxas, 128×128 and 64×128), so wider
  // fragments are read split by split.
  constexpr int kSplitBatch = kFrag <= 32 ? 64 / kFrag : 1;
  if constexpr (kSplitBatch == 1) {
    for (int s = 0; s < p.k_splits; ++s) {
      const float* part = tile_ws + static_cast<int64_t>(s) * kFrag * T::kMathThreads + thread;
#pragma unroll
      for (int w = 0; w < T::kWaves; ++w) {
#pragma unroll
        for (int i = 0; i < kWaveFrag; ++i) total[w][i] += __ldcg(part + (w * kWaveFrag + i) * T::kMathThreads);
      }
    }
  } else {
    for (int s0 = 0; s0 < p.k_splits; s0 += kSplitBatch) {
      float part[kSplitBatch][kFrag];
#pragma unroll
      for (int b = 0; b < kSplitBatch; ++b) {
        if (s0 + b < p.k_splits) {
          const float* src = tile_ws + static_cast<int64_t>(s0 + b) * kFrag * T::kMathThreads + thread;
#pragma unroll
          for (int i = 0; i < kFrag; ++i) part[b][i] = __ldcg(src + i * T::kMathThreads);
        }
      }
#pragma unroll
      for (int b = 0; b < kSplitBatch; ++b) {
        if (s0 + b < p.k_splits) {
#pragma unroll
          for (int w = 0; w < T::kWaves; ++w) {
#pragma unroll
            for (int i = 0; i < kWaveFrag; ++i) total[w][i] += part[b][w * kWaveFrag + i];
          }
        }
      }
    }
  }
  return true;
}

}  // namespace hopperkit::gemm
