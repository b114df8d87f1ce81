// Mainloop of the FP8 1d2d GEMM: the producer's TMA loads and the math warpgroups' wgmma + promotion.
#pragma once

#include <cute/arch/cluster_sm90.hpp>

#include "common/pipeline.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"
#include "gemm/fp8_1d2d/params.h"
#include "gemm/scheduler.cuh"

namespace hopperkit::gemm {

// One elected producer thread streams the K blocks of every tile of this CTA through the stage
// ring: A [BLOCK_M × 128], B [BLOCK_N × 128] and the BLOCK_M A scales of the block.
template <class T>
__device__ __forceinline__ void produce_tile(const Fp8Gemm1d2dParams& p, typename T::SharedStorage& smem,
                                             PipelineState<T::kStages>& st, const MBlockRows& rows, int n_block,
                                             int kb_begin, int kb_end) {
  // A and its scales arrive as a_box_rows rows (see Fp8Gemm1d2dParams), B as a full tile.
  const uint32_t tx_bytes = p.a_box_rows * (T::kBlockK + 4) + T::kBytesB;
  // Grouped layouts read B (and, masked, A) through 3-D maps: a tile reaching past N or M_max
  // reads TMA's zeros, never the next group.
  const bool grouped_b = p.layout != GemmLayout::kNormal;
  const bool grouped_a = p.layout == GemmLayout::kMGroupedMasked;
  const int b_row = n_block * T::kBlockN;
  // Masked: SFA is viewed as [G·⌈K/128⌉, M_max], the group's K blocks are consecutive rows.
  const int sfa_row = rows.a_group * p.sfa_rows_per_group;
  for (int kb = kb_begin; kb < kb_end; ++kb) {
    smem.barriers.producer_acquire(st, tx_bytes);
    uint64_t* full = smem.barriers.full_barrier(st);
    const int k0 = kb * T::kBlockK;
    if (grouped_a) {
      tma_load_3d(&p.tma_a, full, smem.a[st.stage], k0, rows.a_row, rows.a_group);
    } else {
      tma_load_2d(&p.tma_a, full, smem.a[st.stage], k0, rows.a_row);
    }
    if constexpr (T::kClusterM == 1) {
      if (grouped_b) {
        tma_load_3d(&p.tma_b, full, smem.b[st.stage], k0, b_row, rows.group);
      } else {
        tma_load_2d(&p.tma_b, full, smem.b[st.stage], k0, b_row);
      }
    } else if (cute::block_rank_in_cluster() == 0) {
      tma_load_2d_multicast(&p.tma_b, full, smem.b[st.stage], k0, b_row, (1 << T::kClusterM) - 1);
    }
    tma_load_2d(&p.tma_sfa, full, smem.sfa[st.stage], rows.a_row, sfa_row + kb);
    st.advance();
  }
}

// The scale factors of one K block for this thread's two rows, for the tile columns before and
// after `split` (they differ only when a BLOCK_N = 192 tile straddles two B scale blocks).
struct BlockScales {
  float s0_lo, s1_lo, s0_hi, s1_hi;
};

// total += scales · acc: the second level of the two-level accumulation, on the CUDA cores.
template <class T>
__device__ __forceinline__ void promote(float (&total)[T::kBlockN / 2], const float (&acc)[T::kBlockN / 2],
                                        const BlockScales& s, int split) {
#pragma unroll
  for (int j = 0; j < T::kBlockN / 8; ++j) {
    // Column group j covers tile columns [8j, 8j + 8): it never straddles (split is 64 or 128).
    const bool lo = !T::kStraddlesScaleBlocks || 8 * j < split;
    const float s0 = lo ? s.s0_lo : s.s0_hi, s1 = lo ? s.s1_lo : s.s1_hi;
    total[4 * j + 0] += s0 * acc[4 * j + 0];
    total[4 * j + 1] += s0 * acc[4 * j + 1];
    total[4 * j + 2] += s1 * acc[4 * j + 2];
    total[4 * j + 3] += s1 * acc[4 * j + 3];
  }
}

// B scales of the tile: row n0/128 up to tile column `split`, row n0/128 + 1 after it (only when
// BLOCK_N = 192; the second row is clamped to stay in bounds when the tile ends past N, where
// nothing is stored).
struct TileScalesB {
  const float* lo;
  const float* hi;
  int64_t stride_k;
  int split;
};

template <class T>
__device__ __forceinline__ TileScalesB tile_scales_b(const Fp8Gemm1d2dParams& p, int group, int n_block) {
  const int n0 = n_block * T::kBlockN;
  const int last_row = (p.n + 127) / 128 - 1;
  const float* sfb = p.sfb + group * p.sfb_stride_g;
  return {sfb + (n0 / 128) * p.sfb_stride_n, sfb + min(n0 / 128 + 1, last_row) * p.sfb_stride_n, p.sfb_stride_k,
          128 - n0 % 128};
}

// Waits for the stage of K block `kb`, reads its scales (before the stage can be released) and
// issues its 4 wgmmas (K = 32 each) into `acc`, starting from zero; returns without waiting.
template <class T>
__device__ __forceinline__ BlockScales issue_k_block(typename T::SharedStorage& smem, const PipelineState<T::kStages>& st,
                                                     int warpgroup, AccumulatorRows rows, const TileScalesB& sfb,
                                                     int kb, float (&acc)[T::kBlockN / 2]) {
  // Issued before the barrier wait; the values are needed only after the wgmmas.
  const float scale_b_lo = __ldg(sfb.lo + kb * sfb.stride_k);
  const float scale_b_hi = T::kStraddlesScaleBlocks ? __ldg(sfb.hi + kb * sfb.stride_k) : scale_b_lo;
  smem.barriers.consumer_wait(st);
  const float* sfa = smem.sfa[st.stage] + warpgroup * 64;
  const float scale_a0 = sfa[rows.row0], scale_a1 = sfa[rows.row0 + 8];
  const uint64_t desc_a = smem_desc_k_major_sw128(smem.a[st.stage] + warpgroup * 64 * T::kBlockK);
  const uint64_t desc_b = smem_desc_k_major_sw128(smem.b[st.stage]);
  fence_accumulators(acc);
  cute::warpgroup_arrive();
#pragma unroll
  for (int k = 0; k < T::kBlockK / 32; ++k) {
    // 32 FP8 elements = 32 bytes further along the swizzled row: +2 in descriptor units.
    wgmma_fp8<T::kBlockN>(desc_a + 2 * k, desc_b + 2 * k, acc, k > 0);
  }
  cute::warpgroup_commit_batch();
  fence_accumulators(acc);
  return {scale_a0 * scale_b_lo, scale_a1 * scale_b_lo, scale_a0 * scale_b_hi, scale_a1 * scale_b_hi};
}

// Two-level accumulation over the K blocks [kb_begin, kb_end) of one tile: each block's wgmmas
// start from zero, and the FP32 result is scaled by sfa·sfb and added to `total` on the CUDA cores.
// This keeps FP8 tensor-core accumulation (fewer than 24 mantissa bits) to 128-element partial sums.
// PERF (H200): a second accumulator set that issues block kb + 1 before promoting block kb (so the
// tensor cores never wait on this warpgroup's promotion) measured 1-4% slower on every M = 4096
// shape, and strict turn-taking of the two math warpgroups' issue (named barriers, as in a
// ping-pong schedule) 6-10% slower: the warpgroups already cover each other's promotion.
template <class T>
__device__ __forceinline__ void mma_tile(const Fp8Gemm1d2dParams& p, typename T::SharedStorage& smem,
                                         PipelineState<T::kStages>& st, int warpgroup, AccumulatorRows rows,
                                         int group, int n_block, int kb_begin, int kb_end,
                                         float (&total)[T::kBlockN / 2]) {
  const TileScalesB sfb = tile_scales_b<T>(p, group, n_block);
  const int lane = threadIdx.x % 32;
  float acc[T::kBlockN / 2];
#pragma unroll
  for (int i = 0; i < T::kBlockN / 2; ++i) total[i] = 0.0f;
  for (int kb = kb_begin; kb < kb_end; ++kb) {
    const BlockScales scales = issue_k_block<T>(smem, st, warpgroup, rows, sfb, kb, acc);
    cute::warpgroup_wait<0>();
    // The stage's tiles and scales are consumed (the scales were read at issue): give it back.
    smem.barriers.consumer_release(st, lane);
    st.advance();
    promote<T>(total, acc, scales, sfb.split);
  }
}

}  // namespace hopperkit::gemm
