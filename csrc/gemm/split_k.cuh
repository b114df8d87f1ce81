// Split-K through global memory, shared by the GEMM kernels: the work units of one output tile
// (one per K range, the tile's "splits") each publish their FP32 partial, and a unit that finds
// every partial of its tile published sums them, in split order, and stores the tile.
#pragma once

#include "common/sync.cuh"

namespace hopperkit::gemm {

// The K blocks of split `split` of a tile's `num_k_blocks`: ⌈num_k_blocks / k_splits⌉ each, the last
// split shorter (the host picks split counts that leave no split empty).
struct SplitKBlocks {
  int begin, count;
};
__device__ __forceinline__ SplitKBlocks split_k_blocks(int num_k_blocks, int k_splits, int split) {
  const int per_split = (num_k_blocks + k_splits - 1) / k_splits;
  const int begin = split * per_split;
  return {begin, min(per_split, num_k_blocks - begin)};
}

// Publishes this unit's partial `frag` (kWaves × kWaveFrag values per math thread, kMathThreads
// threads, which are threads 0 .. kMathThreads-1 of the CTA) into the launch's workspace, read from
// the kernel's parameters `p` (every GEMM's: k_splits; split_workspace [tiles · k_splits ·
// kMathThreads · kWaves · kWaveFrag], split_flags [tiles · k_splits] with any contents, split_epoch
// nonzero, < 2^56 and fresh for every launch: common/sync.cuh epoch_flags_arrive), and returns true,
// with `frag` = the sum of every split's partial in split order (so the result does not depend on
// which CTA finishes last), when this CTA completed the tile and must store it. Value i of thread t
// sits at i · kMathThreads + t of the unit's slice: each store and load instruction of a warp is
// coalesced. `barrier`: a named barrier of the math threads; `is_last`: a shared-memory word for the
// verdict of thread 0. More than one unit may see every flag and sum (epoch_flags_arrive): each
// stores the same tile, so the store must be idempotent (no accumulation into D, no C that aliases D).
template <int kMathThreads, int kWaves, int kWaveFrag, class Params, class BarrierId>
__device__ __forceinline__ bool split_k_publish_and_sum(const Params& p, int tile, int split, BarrierId barrier,
                                                        int& is_last, float (&frag)[kWaves][kWaveFrag]) {
  constexpr int kFrag = kWaves * kWaveFrag;
  const int thread = threadIdx.x;
  float* tile_ws = p.split_workspace + static_cast<int64_t>(tile) * p.k_splits * kFrag * kMathThreads;
  float* mine = tile_ws + static_cast<int64_t>(split) * kFrag * kMathThreads + thread;
#pragma unroll
  for (int w = 0; w < kWaves; ++w) {
#pragma unroll
    for (int i = 0; i < kWaveFrag; ++i) __stcg(mine + (w * kWaveFrag + i) * kMathThreads, frag[w][i]);
  }
  __threadfence();  // the partial is visible device-wide before the flag says so
  named_barrier_sync(barrier, kMathThreads);
  if (thread == 0) {
    is_last = epoch_flags_arrive(p.split_flags + static_cast<int64_t>(tile) * p.k_splits, split, p.k_splits,
                                 p.split_epoch);
  }
  named_barrier_sync(barrier, kMathThreads);
  if (!is_last) return false;
  __threadfence();
#pragma unroll
  for (int w = 0; w < kWaves; ++w) {
#pragma unroll
    for (int i = 0; i < kWaveFrag; ++i) frag[w][i] = 0.0f;
  }
  // The partials of narrow tiles (the decode-sized ones, 32 floats per thread) are read two splits
  // at a time, every load of a batch issued before its first add: a loop that reads one split and
  // adds it before the next split's loads waits one L2 round trip per split, on the critical path
  // of every decode-sized call. The adds keep split order, so the sum does not depend on the
  // batching. A batch of two 64-float fragments spills (ptxas, FP8 128×128 and 64×128), so wider
  // fragments are read split by split.
  constexpr int kSplitBatch = kFrag <= 32 ? 64 / kFrag : 1;
  if constexpr (kSplitBatch == 1) {
    for (int s = 0; s < p.k_splits; ++s) {
      const float* part = tile_ws + static_cast<int64_t>(s) * kFrag * kMathThreads + thread;
#pragma unroll
      for (int w = 0; w < kWaves; ++w) {
#pragma unroll
        for (int i = 0; i < kWaveFrag; ++i) frag[w][i] += __ldcg(part + (w * kWaveFrag + i) * kMathThreads);
      }
    }
  } else {
    for (int s0 = 0; s0 < p.k_splits; s0 += kSplitBatch) {
      float part[kSplitBatch][kFrag];
#pragma unroll
      for (int b = 0; b < kSplitBatch; ++b) {
        if (s0 + b < p.k_splits) {
          const float* src = tile_ws + static_cast<int64_t>(s0 + b) * kFrag * kMathThreads + thread;
#pragma unroll
          for (int i = 0; i < kFrag; ++i) part[b][i] = __ldcg(src + i * kMathThreads);
        }
      }
#pragma unroll
      for (int b = 0; b < kSplitBatch; ++b) {
        if (s0 + b < p.k_splits) {
#pragma unroll
          for (int w = 0; w < kWaves; ++w) {
#pragma unroll
            for (int i = 0; i < kWaveFrag; ++i) frag[w][i] += part[b][w * kWaveFrag + i];
          }
        }
      }
    }
  }
  return true;
}

}  // namespace hopperkit::gemm
