// FP8 block-scaled GEMM, 1d2d recipe: D (bf16) = A·Bᵀ, A [M, K] with 1×128 scales, B [N, K] with
// 128×128 scales. Persistent (one CTA per SM), warp-specialised:
//
// | warpgroup            | threads | registers | duty                                              |
// |----------------------|---------|-----------|---------------------------------------------------|
// | math 0 (.. math 2)   | 128 each| 240 / 232 | wgmma 64×BLOCK_N×32 per K step and 64-row wave,   |
// | (1, 2 or 3 of them)  |         | / 152     | promotion, epilogue                               |
// | producer (last)      | 128     | 40        | two threads issue the TMA loads of alternate      |
// |                      |         |           | stages, one stores the B scales                   |
//
// With kClusterM = 2, CTA pairs take vertically adjacent tiles and rank 0 multicasts B to both; with
// kClusterN = 2, horizontally adjacent tiles (one M block), and rank 0 multicasts A and its scales.
// Pipeline: kStages shared-memory stages, each holding one 128-wide K block of A, B, the A scales
// and the tile's B scale(s), guarded by full/empty mbarriers (common/pipeline.cuh).
#pragma once

#include <cutlass/arch/reg_reconfig.h>

#include "common/device.cuh"
#include "common/warp_specialization.cuh"
#include "common/sync.cuh"
#include "gemm/fp8_1d2d/epilogue.cuh"
#include "gemm/fp8_1d2d/mainloop.cuh"
#include "gemm/fp8_1d2d/traits.h"
#include "gemm/scheduler.cuh"

namespace hopperkit::gemm {

template <class T>
__global__ void __launch_bounds__(T::kThreads, 1) fp8_gemm_1d2d_kernel(const __grid_constant__ Fp8Gemm1d2dParams p) {
  extern __shared__ uint8_t smem_raw[];
  auto& smem = aligned_shared_storage<typename T::SharedStorage>(smem_raw);
  const int warpgroup = warpgroup_index();
  const Fp8GemmRole role = warpgroup == T::kMathWarpgroups ? Fp8GemmRole::kProducer : Fp8GemmRole::kMath;

  if (threadIdx.x == T::kMathThreads) {
    tma_prefetch_descriptor(&p.tma_a);
    tma_prefetch_descriptor(&p.tma_b);
    tma_prefetch_descriptor(&p.tma_sfa);
    tma_prefetch_descriptor(&p.tma_d);
    if (T::kMayLoadATail && p.a_tail_rows != 0) {
      tma_prefetch_descriptor(&p.tma_a_tail);
      tma_prefetch_descriptor(&p.tma_sfa_tail);
    }
    if constexpr (T::kSplitInCluster) smem.split_cluster.init();
    smem.barriers.init(/*consumer_warps=*/T::kMathThreads / 32, /*producer_arrivals=*/2);
  }
  // With multicast the peer CTA writes into this CTA's stages and arrives on its barriers: both
  // CTAs' barriers must be initialised before either starts.
  cluster_sync<T::kClusterSize>();
  // Split-K within a cluster: the peers' barriers must be initialised before the fixup touches
  // them; the wait is deferred to the fixup (and, for the producer warps, their end), so nothing
  // before it waits for the other CTAs.
  if (T::kSplitInCluster && p.split_in_cluster) cute::cluster_arrive_relaxed();
  // With PDL the previous kernel (e.g. the activation cast) may still be writing A and its scales.
  pdl_wait_for_prerequisites();

  TileScheduler<T::kBlockM, T::kBlockN, T::kMasked, T::kClusterN> scheduler(p);
  const int num_k_blocks = (p.k + T::kBlockK - 1) / T::kBlockK;
  const int k_blocks_per_split = (num_k_blocks + p.k_splits - 1) / p.k_splits;
  PipelineState<T::kStages> st;
  int unit;

  if (role == Fp8GemmRole::kProducer) {
    cutlass::arch::warpgroup_reg_dealloc<T::kProducerRegisters>();
    // Lane 0 of three producer warps (three SM sub-partitions): warps 0 and 2 issue the TMA loads
    // of alternate stages, warp 1 stores the B scales of every stage (produce_tile_scales_b says
    // why); a stage's two arrivals are its TMA thread's (with the byte count) and the scale
    // thread's. One thread issuing every stage's loads (about 60 instructions a stage: the TMA
    // operands go to uniform registers one by one) set the pace of the 128-row decode tiles,
    // sharing its sub-partition's issue slots with two of their math warps; two in turn made those
    // 6-7% faster and left the wide tiles within 0.5% (PERF.md "The producer's issue rate").
    const int producer_warp = (threadIdx.x - T::kMathThreads) / 32;
    const bool loads_tiles = producer_warp != 1;
    StageTurns turns(producer_warp / 2);
    if (threadIdx.x % 32 == 0 && producer_warp < 3) {
      while (scheduler.next(unit)) {
        int m_block, n_block;
        scheduler.blocks_of(unit, m_block, n_block);
        MBlockRows block = resolve_m_block<T::kBlockM>(p, m_block);
        // Per-half experts (traits.h kHalves): a block of two experts is two passes over K, the
        // second with the second half's expert.
        int second_pass = -1;
        if constexpr (T::kHalves) {
          const TilePasses passes = contiguous_passes(block.group, half_group(p, m_block, 1));
          block.group = passes.first;
          second_pass = passes.second;
        }
        if (block.group < 0) continue;
        const int kb_begin = scheduler.split_of(unit) * k_blocks_per_split;
        const int kb_end = min(num_k_blocks, kb_begin + k_blocks_per_split);
        if (loads_tiles) {
          produce_tile<T>(p, smem, st, turns, block, n_block, kb_begin, kb_end);
          if (T::kHalves && second_pass >= 0) {
            block.group = second_pass;
            produce_tile<T>(p, smem, st, turns, block, n_block, kb_begin, kb_end);
          }
        } else {
          produce_tile_scales_b<T>(p, smem, st, block.group, n_block, kb_begin, kb_end);
          if (T::kHalves && second_pass >= 0) produce_tile_scales_b<T>(p, smem, st, second_pass, n_block, kb_begin, kb_end);
        }
      }
    }
    if (T::kSplitInCluster && p.split_in_cluster) cute::cluster_wait();
  } else {
    cutlass::arch::warpgroup_reg_alloc<T::kMathRegisters>();
    const AccumulatorRows rows(threadIdx.x % 128);
    float total[T::kWaves][T::kWaveAccs];
    if constexpr (T::kHalves) {
      // The contiguous layout's 256-row tiles (traits.h kHalves). Kept inline: as a function of its
      // own (the same code, with the scheduler and the stage state by reference) it compiled to 252
      // instructions per K block, the wgmma descriptors in vector registers.
      // The K loop's copy of row0 comes through a shuffle, which ptxas does not recompute: computed
      // from threadIdx.x, the warpgroup's row offset was rebuilt in every K block (4 of the loop's 198
      // instructions; with the shuffle 194, the dense 256x128 A-multicast loop's 195).
      AccumulatorRows loop_rows = rows;
      loop_rows.row0 = __shfl_sync(0xffffffffu, rows.row0, threadIdx.x % 32);
      while (scheduler.next(unit)) {
        int m_block, n_block;
        scheduler.blocks_of(unit, m_block, n_block);
        HalvesTileIds ids;
        ids.load(p, m_block, warpgroup, rows.row0);
        const uint32_t rows_with_expert = ids.rows_with_expert();
        mma_halves_tile<T>(smem, st, warpgroup, loop_rows, ids, n_block, num_k_blocks, total);
        // Decoded again rather than kept live across the mainloop, as in the dense loop.
        scheduler.blocks_of(unit, m_block, n_block);
        store_tile<T>(p, smem, warpgroup, rows, resolve_m_block<T::kBlockM>(p, m_block), n_block, total,
                      rows_with_expert);
      }
    } else {
      while (scheduler.next(unit)) {
        int m_block, n_block;
        scheduler.blocks_of(unit, m_block, n_block);
        // Warp-uniform for the compiler too (see the role above); blocks without any result row
        // skip the mainloop: contiguous padding blocks store zeros; masked blocks past masked_m store
        // nothing (a capture sized for the worst case would otherwise write zeros over most of D), and
        // the masked instantiations' scheduler hands out none of them.
        const int group = __shfl_sync(0xffffffffu, resolve_m_block<T::kBlockM>(p, m_block).group, 0);
        if (group < 0 && p.layout == GemmLayout::kMGroupedMasked) continue;
        const int kb_begin = scheduler.split_of(unit) * k_blocks_per_split;
        const int kb_end = min(num_k_blocks, kb_begin + k_blocks_per_split);
        if (group >= 0) {
          mma_tile<T>(smem, st, warpgroup, rows, n_block, kb_begin, kb_end, total);
        } else {
#pragma unroll
          for (int w = 0; w < T::kWaves; ++w) {
#pragma unroll
            for (int i = 0; i < T::kWaveAccs; ++i) total[w][i] = 0.0f;
          }
        }
        if (p.k_splits > 1) {
          bool sums;
          if constexpr (T::kSplitInCluster) {
            sums = p.split_in_cluster
                       ? split_k_fixup_in_cluster<T>(p, smem, scheduler.split_of(unit), total)
                       : split_k_fixup<T>(p, smem, scheduler.tile_of(unit), scheduler.split_of(unit), total);
          } else {
            sums = split_k_fixup<T>(p, smem, scheduler.tile_of(unit), scheduler.split_of(unit), total);
          }
          if (!sums) continue;
        }
        // Decoded again rather than kept live across the mainloop: registers are at their limit.
        scheduler.blocks_of(unit, m_block, n_block);
        store_tile<T>(p, smem, warpgroup, rows, resolve_m_block<T::kBlockM>(p, m_block), n_block, total);
      }
    }
    // The staging buffers must stay allocated until the last TMA stores have read them.
    if (threadIdx.x % 128 == 0) tma_store_wait_all();
  }
  // Neither CTA of a cluster may exit while the other can still multicast into its shared memory
  // or arrive on its barriers.
  cluster_sync<T::kClusterSize>();
}

}  // namespace hopperkit::gemm
