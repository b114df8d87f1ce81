// Epilogue of the FP8 1d2d GEMM: BF16 tiles through shared memory and TMA stores; the split-K fixup.
#pragma once

#include <cuda_bf16.h>

#include "common/fragment.cuh"
#include "common/sync.cuh"
#include "common/tma.cuh"
#include "gemm/fp8_1d2d/mainloop.cuh"
#include "gemm/fp8_1d2d/traits.h"

namespace hopperkit::gemm {

// Stores one warpgroup's 64 rows of the tile as BF16: for each 64-column box, stmatrix into the
// warpgroup's swizzled staging buffer, then one thread issues the TMA store, which clips rows and
// columns outside D (ragged edges, rows past a masked group's M_max). Rows without a result
// (contiguous padding rows, masked rows past masked_m[g], whole blocks with group -1 whose `total`
// is zero) are written as 0; their A rows may hold NaN, so they are selected, never multiplied.
// The warpgroups never wait for each other; a box's buffer is reused once the previous store has
// read it, and the last store of a tile drains while the next tile's mainloop runs.
template <class T>
__device__ __forceinline__ void store_tile(const Fp8Gemm1d2dParams& p, typename T::SharedStorage& smem, int warpgroup,
                                           AccumulatorRows rows, const MBlockRows& block, int n_block,
                                           const float (&total)[T::kBlockN / 2]) {
  const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32;
  const bool elected = threadIdx.x % 128 == 0;
  const auto barrier = static_cast<Fp8GemmBarrier>(static_cast<int>(Fp8GemmBarrier::kEpilogueWarpgroup0) + warpgroup);
  const int r_a = warpgroup * 64 + rows.row0, r_b = r_a + 8;  // rows within the block
  bool keep_a = r_a < block.valid_rows, keep_b = r_b < block.valid_rows;
  if (p.layout == GemmLayout::kMGroupedContiguous) {
    keep_a = r_a < block.store_rows && block.group >= 0 && __ldg(p.m_indices + block.a_row + r_a) >= 0;
    keep_b = r_b < block.store_rows && block.group >= 0 && __ldg(p.m_indices + block.a_row + r_b) >= 0;
  }
  // stmatrix.x4 writes 16 rows × 16 columns of the warp: lane l addresses row l % 8 of matrix l / 8,
  // matrices ordered (rows 0-7, cols 0-7), (rows 8-15, cols 0-7), (rows 0-7, cols 8-15), (rows 8-15, cols 8-15).
  const int st_row = 16 * warp + 8 * ((lane / 8) % 2) + lane % 8;
  const int st_chunk = lane / 16;
  const uint32_t buffer = cute::cast_smem_ptr_to_uint(smem.d[warpgroup]);
  const int d_row = block.a_row + warpgroup * 64;
#pragma unroll
  for (int box = 0; box < T::kBlockN / T::kBoxCols; ++box) {
    if (elected) tma_store_wait_smem_read<0>();
    named_barrier_sync(barrier, 128);
#pragma unroll
    for (int pair = 0; pair < T::kBoxCols / 16; ++pair) {
      const int j = box * (T::kBoxCols / 8) + 2 * pair;  // 8-column groups j and j + 1
      const uint32_t r0 = pack_bf16x2(keep_a ? total[4 * j + 0] : 0.0f, keep_a ? total[4 * j + 1] : 0.0f);
      const uint32_t r1 = pack_bf16x2(keep_b ? total[4 * j + 2] : 0.0f, keep_b ? total[4 * j + 3] : 0.0f);
      const uint32_t r2 = pack_bf16x2(keep_a ? total[4 * j + 4] : 0.0f, keep_a ? total[4 * j + 5] : 0.0f);
      const uint32_t r3 = pack_bf16x2(keep_b ? total[4 * j + 6] : 0.0f, keep_b ? total[4 * j + 7] : 0.0f);
      stmatrix_x4(buffer + swizzle_128b_offset(st_row, 2 * pair + st_chunk), r0, r1, r2, r3);
    }
    fence_shared_for_async_proxy();
    named_barrier_sync(barrier, 128);
    if (elected) {
      const int col = n_block * T::kBlockN + box * T::kBoxCols;
      if (p.layout == GemmLayout::kMGroupedMasked) {
        tma_store_3d(&p.tma_d, smem.d[warpgroup], col, d_row, block.a_group);
      } else {
        tma_store_2d(&p.tma_d, smem.d[warpgroup], col, d_row);
      }
      tma_store_commit();
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
