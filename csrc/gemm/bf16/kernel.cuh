// BF16 GEMM: D = C + A·Bᵀ with bf16 A [M, K] and B [N, K], each K-major or MN-major (nt/nn/tn/tt
// without copies), FP32 accumulation over the whole K, D bf16 or fp32, C optional. Persistent (one
// CTA per SM), warp-specialised:
//
// | warpgroup            | threads  | registers | duty                                                |
// |----------------------|----------|-----------|-----------------------------------------------------|
// | math 0 (.. math 1)   | 128 each | 232 / 240 | 4 × wgmma 64×BLOCK_N×16 per K block, chained; store |
// | producer (last)      | 128      | 40        | one elected thread issues every TMA load            |
//
// Pipeline: kStages shared-memory stages, each one 64-wide K block of A and B, guarded by full/empty
// mbarriers (common/pipeline.cuh). The math warpgroups keep one wgmma batch in flight and release a
// stage one K block late (mainloop.cuh). The kSplitK instantiations divide each tile's K blocks among
// k_splits work units and sum their partials within a thread-block cluster of a tile's units
// (gemm/split_k_cluster.cuh; one unit per CTA) or, where the launch cannot be such clusters,
// through global memory (gemm/split_k.cuh).
#pragma once

#include <cutlass/arch/reg_reconfig.h>

#include "common/device.cuh"
#include "common/warp_specialization.cuh"
#include "gemm/bf16/epilogue.cuh"
#include "gemm/bf16/mainloop.cuh"
#include "gemm/bf16/traits.h"
#include "gemm/split_k.cuh"
#include "gemm/split_k_cluster.cuh"
#include "gemm/scheduler.cuh"

namespace hopperkit::gemm {

template <class T>
__global__ void __launch_bounds__(T::kThreads, 1) bf16_gemm_kernel(const __grid_constant__ Bf16GemmParams p) {
  extern __shared__ uint8_t smem_raw[];
  auto& smem = aligned_shared_storage<typename T::SharedStorage>(smem_raw);
  const int warpgroup = warpgroup_index();
  const Bf16GemmRole role = warpgroup == T::kMathWarpgroups ? Bf16GemmRole::kProducer : Bf16GemmRole::kMath;

  if (threadIdx.x == T::kMathThreads) {
    tma_prefetch_descriptor(&p.tma_a);
    tma_prefetch_descriptor(&p.tma_b);
    if (p.tma_store_d) tma_prefetch_descriptor(&p.tma_d);
    if (T::kMayLoadATail && p.a_tail_rows != 0) tma_prefetch_descriptor(&p.tma_a_tail);
    if constexpr (T::kSplitInCluster) smem.split_cluster.init();
    smem.barriers.init(/*consumer_warps=*/T::kMathThreads / 32);
  }
  __syncthreads();
  // Split-K within a cluster: the peers' barriers must be initialised before the fixup touches
  // them; the wait is deferred to the fixup (and, for the producer warps, their end), so nothing
  // before it waits for the other CTAs.
  if (T::kSplitInCluster && p.split_in_cluster) cute::cluster_arrive_relaxed();
  // With PDL the previous kernel in the stream may still be writing A, B or C.
  pdl_wait_for_prerequisites();

  TileScheduler<T::kBlockM, T::kBlockN, T::kMasked> scheduler(p);
  const int num_k_blocks = (p.k + T::kBlockK - 1) / T::kBlockK;  // every tile's, but k-grouped ones
  PipelineState<T::kStages> st;
  int unit;

  if (role == Bf16GemmRole::kProducer) {
    cutlass::arch::warpgroup_reg_dealloc<T::kProducerRegisters>();
    if (threadIdx.x == T::kMathThreads) {
      while (scheduler.next(unit)) {
        int m_block, n_block;
        scheduler.blocks_of(unit, m_block, n_block);
        const Bf16Tile t = resolve_bf16_tile<T>(p, m_block, num_k_blocks);
        if constexpr (T::kSplitK) {
          const SplitKBlocks kbs = split_k_blocks(num_k_blocks, p.k_splits, scheduler.split_of(unit));
          produce_tile<T>(p, smem, st, t.rows, n_block, kbs.begin, kbs.count);
        } else if (t.rows.group >= 0) {
          produce_tile<T>(p, smem, st, t.rows, n_block, t.kb_begin, t.num_kb);
        }
      }
    }
    if (T::kSplitInCluster && p.split_in_cluster) cute::cluster_wait();
  } else {
    cutlass::arch::warpgroup_reg_alloc<T::kMathRegisters>();
    const AccumulatorRows rows(threadIdx.x % 128);
    float acc[T::kBlockN / 2];
    while (scheduler.next(unit)) {
      int m_block, n_block;
      scheduler.blocks_of(unit, m_block, n_block);
      // Warp-uniform for the compiler too (see the role above); blocks without any result row
      // skip the mainloop: contiguous padding blocks store zeros; masked blocks past masked_m store
      // nothing (a capture sized for the worst case would otherwise write zeros over most of D), and
      // the masked instantiations' scheduler hands out none of them.
      const Bf16Tile t = resolve_bf16_tile<T>(p, m_block, num_k_blocks);
      const int group = __shfl_sync(0xffffffffu, t.rows.group, 0);
      if (group < 0 && p.layout == GemmLayout::kMGroupedMasked) continue;
      int num_kb = num_k_blocks;
      if constexpr (T::kKGrouped) num_kb = __shfl_sync(0xffffffffu, t.num_kb, 0);
      if constexpr (T::kSplitK) num_kb = split_k_blocks(num_k_blocks, p.k_splits, scheduler.split_of(unit)).count;
      // An empty k-group (no K block) stores D = C + an empty sum; its accumulators are not written
      // here (a non-wgmma definition of them makes ptxas serialise every wgmma, C7515): the
      // epilogue substitutes the sum.
      const bool empty_sum = T::kKGrouped && num_kb == 0;
      // The epilogue's rows are decoded again rather than kept live across the mainloop (registers
      // are at their limit), while the last wgmma batch runs.
      MBlockRows block;
      auto decode_epilogue_rows = [&] {
        scheduler.blocks_of(unit, m_block, n_block);
        block = resolve_bf16_tile<T, /*kWithK=*/false>(p, m_block, num_k_blocks).rows;
      };
      if (group >= 0 && !empty_sum) {
        mma_tile<T>(smem, st, warpgroup, num_kb, acc, decode_epilogue_rows);
      } else {
        decode_epilogue_rows();
      }
      if constexpr (T::kSplitK) {
        if (p.k_splits > 1) {
          // Only the unit that completes the tile stores it, with every split's sum. The fixup sums
          // into a copy: a non-wgmma definition of the accumulators makes ptxas serialise every
          // wgmma of the mainloop (C7515).
          float frag[1][T::kBlockN / 2];
#pragma unroll
          for (int i = 0; i < T::kBlockN / 2; ++i) frag[0][i] = acc[i];
          const bool sums =
              p.split_in_cluster
                  ? split_k_sum_in_cluster<T::kMathThreads, 1, T::kBlockN / 2>(
                        p.k_splits, scheduler.split_of(unit), &smem.a[0][0], smem.split_cluster,
                        Bf16GemmBarrier::kSplitPartialsWritten, frag)
                  : split_k_publish_and_sum<T::kMathThreads, 1, T::kBlockN / 2>(
                        p, scheduler.tile_of(unit), scheduler.split_of(unit), Bf16GemmBarrier::kSplitPartialsWritten,
                        smem.split_is_last, frag);
          if (sums) store_tile<T>(p, smem, warpgroup, rows, block, n_block, frag[0], /*empty_sum=*/false);
          continue;
        }
      }
      store_tile<T>(p, smem, warpgroup, rows, block, n_block, acc, empty_sum);
    }
    // The staging buffers must stay allocated until the last TMA stores have read them.
    if (threadIdx.x % 128 == 0) tma_store_wait_all();
  }
}

}  // namespace hopperkit::gemm
