// Epilogue of the FP8 1d2d GEMM: BF16 conversion and bounds-checked stores of one warpgroup's rows.
#pragma once

#include <cuda_bf16.h>

#include "common/sync.cuh"
#include "gemm/fp8_1d2d/mainloop.cuh"
#include "gemm/fp8_1d2d/traits.h"

namespace hopperkit::gemm {

// Rows without a result (contiguous padding rows, masked rows past masked_m[g], whole blocks with
// group -1 whose `total` is zero) are written as 0.
template <class T>
__device__ __forceinline__ void store_tile(const Fp8Gemm1d2dParams& p, int warpgroup, AccumulatorRows rows,
                                           const MBlockRows& block, int n_block, const float (&total)[T::kBlockN / 2]) {
  const int lane = threadIdx.x % 32;
  const int r_a = warpgroup * 64 + rows.row0, r_b = r_a + 8;  // rows within the block
  const bool store_a = r_a < block.store_rows, store_b = r_b < block.store_rows;
  bool keep_a = r_a < block.valid_rows, keep_b = r_b < block.valid_rows;
  if (p.layout == GemmLayout::kMGroupedContiguous) {
    keep_a = store_a && block.group >= 0 && __ldg(p.m_indices + block.a_row + r_a) >= 0;
    keep_b = store_b && block.group >= 0 && __ldg(p.m_indices + block.a_row + r_b) >= 0;
  }
  const int col0 = n_block * T::kBlockN + 2 * (lane % 4);
  __nv_bfloat16* d_slab = p.d + block.a_group * p.ldd_group;
  __nv_bfloat16* d_a = d_slab + static_cast<int64_t>(block.a_row + r_a) * p.ldd;
  __nv_bfloat16* d_b = d_slab + static_cast<int64_t>(block.a_row + r_b) * p.ldd;
#pragma unroll
  for (int j = 0; j < T::kBlockN / 8; ++j) {
    const int col = col0 + 8 * j;
    // N % 8 == 0 (checked on the host), so col < N implies col + 1 < N. Padding rows may hold NaN
    // (garbage A rows): select, never multiply.
    if (col < p.n) {
      if (store_a) {
        const float x = keep_a ? total[4 * j + 0] : 0.0f, y = keep_a ? total[4 * j + 1] : 0.0f;
        *reinterpret_cast<__nv_bfloat162*>(d_a + col) = __floats2bfloat162_rn(x, y);
      }
      if (store_b) {
        const float x = keep_b ? total[4 * j + 2] : 0.0f, y = keep_b ? total[4 * j + 3] : 0.0f;
        *reinterpret_cast<__nv_bfloat162*>(d_b + col) = __floats2bfloat162_rn(x, y);
      }
    }
  }
}

// Split-K: publish this unit's FP32 partial; returns true (with `total` = the sum of every split's
// partial, in split order, so the result does not depend on which CTA finishes last) when this CTA
// completed the tile and must store it. The workspace holds each thread's fragment contiguously
// across threads (coalesced), in the same thread mapping for every split.
template <class T>
__device__ __forceinline__ bool split_k_fixup(const Fp8Gemm1d2dParams& p, typename T::SharedStorage& smem, int tile,
                                              int split, float (&total)[T::kBlockN / 2]) {
  constexpr int kFrag = T::kBlockN / 2;
  const int thread = threadIdx.x;  // math threads are 0 .. kMathThreads-1
  float* tile_ws = p.split_workspace + static_cast<int64_t>(tile) * p.k_splits * kFrag * T::kMathThreads;
  float* mine = tile_ws + static_cast<int64_t>(split) * kFrag * T::kMathThreads + thread;
#pragma unroll
  for (int i = 0; i < kFrag; ++i) __stcg(mine + i * T::kMathThreads, total[i]);
  __threadfence();  // the partial is visible device-wide before the count says so
  named_barrier_sync(Fp8GemmBarrier::kSplitPartialsWritten, T::kMathThreads);
  if (thread == 0) {
    const int done = atomicAdd(p.split_counters + tile, 1);
    const bool last = done == p.k_splits - 1;
    if (last) p.split_counters[tile] = 0;  // ready for the next call (and CUDA-graph replays)
    smem.split_is_last = last;
  }
  named_barrier_sync(Fp8GemmBarrier::kSplitPartialsWritten, T::kMathThreads);
  if (!smem.split_is_last) return false;
  __threadfence();
#pragma unroll
  for (int i = 0; i < kFrag; ++i) total[i] = 0.0f;
  for (int s = 0; s < p.k_splits; ++s) {
    const float* part = tile_ws + static_cast<int64_t>(s) * kFrag * T::kMathThreads + thread;
#pragma unroll
    for (int i = 0; i < kFrag; ++i) total[i] += __ldcg(part + i * T::kMathThreads);
  }
  return true;
}

}  // namespace hopperkit::gemm
