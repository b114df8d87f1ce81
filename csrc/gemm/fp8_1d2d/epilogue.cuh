// Epilogue of the FP8 1d2d GEMM: BF16 tiles through shared memory and TMA stores; the split-K fixup.
#pragma once

#include <cuda_bf16.h>

#include "common/sync.cuh"
#include "gemm/split_k.cuh"
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
  // With a staging box for every box of the tile, a wave's boxes go in one round (one fence and
  // one barrier pair); with one box, box by box.
  constexpr int kBoxesPerWave = T::kBlockN / kStoreBoxCols;
  constexpr int kRound = T::kStoreBuffers >= kBoxesPerWave ? kBoxesPerWave : 1;
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
    store_rows_bf16<T::kBlockN, T::kStoreBuffers, kRound>(target, smem.d[warpgroup], barrier, keep_a, keep_b, total[w],
                                                          w * kBoxesPerWave);
  }
}

// Split-K through global memory (gemm/split_k.cuh): publish this unit's FP32 partial; returns true,
// with `total` = the sum of every split's partial in split order, when this CTA completed the tile
// and must store it.
template <class T>
__device__ __forceinline__ bool split_k_fixup(const Fp8Gemm1d2dParams& p, typename T::SharedStorage& smem, int tile,
                                              int split, float (&total)[T::kWaves][T::kBlockN / 2]) {
  return split_k_publish_and_sum<T::kMathThreads, T::kWaves, T::kBlockN / 2>(
      p, tile, split, Fp8GemmBarrier::kSplitPartialsWritten, smem.split_is_last, total);
}

// Split-K within a cluster (GemmProblem::split_in_cluster): the k_splits units of a tile are
// the CTAs of one cluster (ranks = splits), and the last one sums. Once its own mainloop is done
// with the stage ring, it tells the others, which store their FP32 partials from registers into its
// ring (st.async, counted on its `split_received` barrier) and finish; it adds them up in split order,
// its own last: the same sequence of additions as split_k_fixup, so both fixups give the same bits.
// No global memory and no GPU-scope fences (one cluster-scope fence before the summing CTA's
// arrivals); the cluster is co-scheduled, so the waits cannot deadlock.
// Partial s, vector j (four consecutive fragment values) of thread t sits at
// ((s · kVecs + j) · kMathThreads + t) · 16 bytes into the ring: a warp's 16-byte accesses are
// contiguous. PERF: README.md "Split-K".
template <class T>
__device__ __forceinline__ bool split_k_fixup_in_cluster(const Fp8Gemm1d2dParams& p, typename T::SharedStorage& smem,
                                                         int split, float (&total)[T::kWaves][T::kBlockN / 2]) {
  static_assert(T::kSplitInCluster, "compiled for the decode-sized tiles only (traits.h kSplitInCluster)");
  constexpr int kWaveFrag = T::kBlockN / 2, kVecs = T::kWaves * kWaveFrag / 4;
  static_assert(kWaveFrag % 4 == 0, "a wave's fragment is whole 16-byte vectors");
  const int thread = threadIdx.x;  // math threads are 0 .. kMathThreads-1
  const int summer = p.k_splits - 1;
  uint8_t* ring = &smem.a[0][0];
  cute::cluster_wait();  // every CTA of the cluster has initialised its barriers
  if (split != summer) {
    mbarrier_wait_cluster(&smem.split_ring_free, 0);
    const uint32_t dst = cluster_shared_address(ring, summer) + (split * kVecs * T::kMathThreads + thread) * 16;
    const uint32_t received = cluster_shared_address(&smem.split_received, summer);
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const float* v = &total[j / (kWaveFrag / 4)][j % (kWaveFrag / 4) * 4];
      st_async_16(dst + j * T::kMathThreads * 16, make_float4(v[0], v[1], v[2], v[3]), received);
    }
    return false;
  }
  // Every math warp's wgmmas have completed, so nothing reads the ring any more.
  named_barrier_sync(Fp8GemmBarrier::kSplitPartialsWritten, T::kMathThreads);
  if (thread == 0) {
    smem.split_received.arrive_and_expect_tx(static_cast<uint32_t>(summer) * T::kPartialBytes);
    fence_acq_rel_cluster();  // one fence for all the arrivals (a release arrive fences each)
#pragma unroll 1
    for (int r = 0; r < summer; ++r) mbarrier_arrive_cluster_relaxed(cluster_shared_address(&smem.split_ring_free, r));
  }
  mbarrier_wait_cluster(&smem.split_received, 0);
  // Eight vectors (32 values) at a time, each pass one loop over the splits: with a loop over the
  // splits per vector instead, ptxas spilled the 64×64 tile's prologue values.
  constexpr int kChunk = kVecs < 8 ? kVecs : 8;
  static_assert(kVecs % kChunk == 0, "whole chunks of vectors");
#pragma unroll
  for (int c = 0; c < kVecs; c += kChunk) {
    float4 sum[kChunk];
#pragma unroll
    for (int j = 0; j < kChunk; ++j) sum[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 1
    for (int s = 0; s < summer; ++s) {
      const uint8_t* src = ring + ((s * kVecs + c) * T::kMathThreads + thread) * 16;
#pragma unroll
      for (int j = 0; j < kChunk; ++j) {
        const float4 v = *reinterpret_cast<const float4*>(src + j * T::kMathThreads * 16);
        sum[j].x += v.x;
        sum[j].y += v.y;
        sum[j].z += v.z;
        sum[j].w += v.w;
      }
    }
#pragma unroll
    for (int j = 0; j < kChunk; ++j) {
      float* own = &total[(c + j) / (kWaveFrag / 4)][(c + j) % (kWaveFrag / 4) * 4];
      own[0] = sum[j].x + own[0];
      own[1] = sum[j].y + own[1];
      own[2] = sum[j].z + own[2];
      own[3] = sum[j].w + own[3];
    }
  }
  return true;
}

}  // namespace hopperkit::gemm
