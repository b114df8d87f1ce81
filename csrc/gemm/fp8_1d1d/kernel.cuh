// FP8 GEMM, 1d1d recipe: D (f32) = C + A·Bᵀ, A [M, K] and B [N, K] with 1×128 scales on both (the
// weight-gradient recipe), dense or k-grouped (MoE weight gradient: one problem per group, each
// with its own K). Persistent (one CTA per SM), warp-specialised:
//
// | warpgroup            | threads | registers | duty                                                 |
// |----------------------|---------|-----------|------------------------------------------------------|
// | math 0 (.. math 1)   | 128 each| 232 / 240 | wgmma 64×BLOCK_N×32 per K step, promotion, D staging |
// | producer (last)      | 128     | 40        | one elected thread issues every TMA load             |
//
// Pipeline: kStages shared-memory stages, each holding one 128-wide K block of A and B and its A and
// B scales, guarded by full/empty mbarriers (common/pipeline.cuh). Epilogue: the math warpgroup
// stages its rows in shared memory and TMA adds them to D (which holds C) or stores them.
#pragma once

#include <cutlass/arch/reg_reconfig.h>

#include "common/device.cuh"
#include "common/warp_specialization.cuh"
#include "gemm/fp8_1d1d/epilogue.cuh"
#include "gemm/fp8_1d1d/mainloop.cuh"
#include "gemm/fp8_1d1d/traits.h"
#include "gemm/scheduler.cuh"

namespace hopperkit::gemm {

template <class T>
__global__ void __launch_bounds__(T::kThreads, 1) fp8_gemm_1d1d_kernel(const __grid_constant__ Fp8Gemm1d1dParams p) {
  extern __shared__ uint8_t smem_raw[];
  auto& smem = aligned_shared_storage<typename T::SharedStorage>(smem_raw);
  const int warpgroup = warpgroup_index();
  const Fp8Gemm1d1dRole role = warpgroup == T::kMathWarpgroups ? Fp8Gemm1d1dRole::kProducer : Fp8Gemm1d1dRole::kMath;
  const bool k_grouped = p.layout == GemmLayout::kKGroupedContiguous;

  if (threadIdx.x == T::kMathThreads) {
    if (!k_grouped) {
      tma_prefetch_descriptor(&p.tma_a);
      tma_prefetch_descriptor(&p.tma_b);
    }
    tma_prefetch_descriptor(&p.tma_sfa);
    tma_prefetch_descriptor(&p.tma_sfb);
    tma_prefetch_descriptor(&p.tma_d);
    smem.barriers.init(/*consumer_warps=*/T::kMathThreads / 32);
  }
  __syncthreads();
  // With PDL the previous kernel (the casts, or the GEMM that wrote C into D) may still be running.
  pdl_wait_for_prerequisites();

  TileScheduler<T::kBlockM, T::kBlockN> scheduler(p);
  PipelineState<T::kStages> st;
  int unit;

  if (role == Fp8Gemm1d1dRole::kProducer) {
    cutlass::arch::warpgroup_reg_dealloc<T::kProducerRegisters>();
    if (threadIdx.x == T::kMathThreads) {
      int acquired_group = -1;
      while (scheduler.next(unit)) {
        int m_block, n_block;
        scheduler.blocks_of(unit, m_block, n_block);
        const Fp8Gemm1d1dTile t = resolve_1d1d_tile<T>(p, m_block, n_block);
        if (t.num_kb == 0) continue;
        const CUtensorMap* map_a = &p.tma_a;
        const CUtensorMap* map_b = &p.tma_b;
        if (k_grouped) {
          map_a = p.group_maps + 2 * t.group;
          map_b = map_a + 1;
          if (t.group != acquired_group) {
            tensormap_acquire(map_a);
            tensormap_acquire(map_b);
            acquired_group = t.group;
          }
        }
        produce_1d1d_tile<T>(p, smem, st, t, map_a, map_b);
      }
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<T::kMathRegisters>();
    const AccumulatorRows rows(threadIdx.x % 128);
    float total[T::kBlockN / 2];
    while (scheduler.next(unit)) {
      int m_block, n_block;
      scheduler.blocks_of(unit, m_block, n_block);
      // Warp-uniform for the compiler too (see the role above): the K loop holds the wgmmas.
      const int num_kb = __shfl_sync(0xffffffffu, resolve_1d1d_tile<T>(p, m_block, n_block).num_kb, 0);
      // An empty group (K_g = 0) leaves D = C as it is; without C it stores zeros.
      if (num_kb == 0 && p.accumulate) continue;
      mma_1d1d_tile<T>(smem, st, warpgroup, rows, num_kb, total);
      // Decoded again rather than kept live across the mainloop: registers are at their limit.
      store_1d1d_tile<T>(p, smem, warpgroup, resolve_1d1d_tile<T>(p, m_block, n_block), total);
    }
    // Shared memory must stay valid until the last store has read it.
    if (threadIdx.x % 128 == 0) tma_store_wait_all();
  }
}

}  // namespace hopperkit::gemm
