// Mainloop of the FP8 1d1d GEMM: the producer's TMA loads and the math warpgroups' wgmma + promotion
// with per-row A scales and per-column B scales.
#pragma once

#include "common/pipeline.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"
#include "gemm/fp8_1d1d/params.h"
#include "gemm/scheduler.cuh"

namespace hopperkit::gemm {

// One tile of the problem: rows [m0, m0 + BLOCK_M) and columns [n0, n0 + BLOCK_N) of D[group], over
// the group's K blocks, which are K blocks [kb_offset, kb_offset + num_kb) of the scales.
struct Fp8Gemm1d1dTile {
  int group;
  int m0, n0;
  int kb_offset, num_kb;
};

template <class T>
__device__ __forceinline__ Fp8Gemm1d1dTile resolve_1d1d_tile(const Fp8Gemm1d1dParams& p, int m_block, int n_block) {
  Fp8Gemm1d1dTile t;
  t.n0 = n_block * T::kBlockN;
  if (p.layout == GemmLayout::kKGroupedContiguous) {
    const int blocks_per_group = (p.m + T::kBlockM - 1) / T::kBlockM;
    t.group = m_block / blocks_per_group;
    t.m0 = (m_block % blocks_per_group) * T::kBlockM;
    t.kb_offset = __ldg(p.kb_prefix + t.group);
    t.num_kb = __ldg(p.kb_prefix + t.group + 1) - t.kb_offset;
  } else {
    t.group = 0;
    t.m0 = m_block * T::kBlockM;
    t.kb_offset = 0;
    t.num_kb = (p.k + T::kBlockK - 1) / T::kBlockK;
  }
  return t;
}

// One elected producer thread streams the K blocks of a tile through the stage ring: A [BLOCK_M ×
// 128], B [BLOCK_N × 128], the BLOCK_M A scales and the BLOCK_N B scales of the block. Parts of a box
// past M, N or K read as zeros (and count toward the transaction bytes all the same).
template <class T>
__device__ __forceinline__ void produce_1d1d_tile(const Fp8Gemm1d1dParams& p, typename T::SharedStorage& smem,
                                                  PipelineState<T::kStages>& st, const Fp8Gemm1d1dTile& t,
                                                  const CUtensorMap* map_a, const CUtensorMap* map_b) {
  constexpr uint32_t kTxBytes = T::kBytesA + T::kBytesB + T::kBytesSFA + T::kBytesSFB;
  for (int kb = 0; kb < t.num_kb; ++kb) {
    smem.barriers.producer_acquire(st, kTxBytes);
    uint64_t* full = smem.barriers.full_barrier(st);
    const int k0 = kb * T::kBlockK;
    tma_load_2d(map_a, full, smem.a[st.stage], k0, t.m0);
    tma_load_2d(map_b, full, smem.b[st.stage], k0, t.n0);
    tma_load_2d(&p.tma_sfa, full, smem.sfa[st.stage], t.m0, t.kb_offset + kb);
    tma_load_2d(&p.tma_sfb, full, smem.sfb[st.stage], t.n0, t.kb_offset + kb);
    st.advance();
  }
}

// Two-level accumulation over the tile's K blocks: each block's 4 wgmmas (K = 32 each) start from
// zero, and the FP32 result is scaled by sfa[row]·sfb[col] and added to `total` on the CUDA cores.
// This keeps FP8 tensor-core accumulation (fewer than 24 mantissa bits) to 128-element partial sums.
template <class T>
__device__ __forceinline__ void mma_1d1d_tile(typename T::SharedStorage& smem, PipelineState<T::kStages>& st,
                                              int warpgroup, AccumulatorRows rows, int num_kb,
                                              float (&total)[T::kBlockN / 2]) {
  float acc[T::kBlockN / 2];
#pragma unroll
  for (int i = 0; i < T::kBlockN / 2; ++i) total[i] = acc[i] = 0.0f;
  const int lane = threadIdx.x % 32;

  for (int kb = 0; kb < num_kb; ++kb) {
    smem.barriers.consumer_wait(st);
    // Scales are read before the wgmmas are issued (the loads overlap them) and before the stage is
    // released. B scales: the thread's column pair of every 8-column group (4 distinct float2 per
    // warp per group: broadcasts, no bank conflicts).
    const float* sfa = smem.sfa[st.stage] + warpgroup * 64;
    const float scale_a0 = sfa[rows.row0], scale_a1 = sfa[rows.row0 + 8];
    float2 scale_b[T::kBlockN / 8];
#pragma unroll
    for (int j = 0; j < T::kBlockN / 8; ++j) {
      scale_b[j] = *reinterpret_cast<const float2*>(smem.sfb[st.stage] + 8 * j + rows.col0);
    }
    const uint64_t desc_a = smem_desc_k_major_sw128(smem.a[st.stage] + warpgroup * 64 * T::kBlockK);
    const uint64_t desc_b = smem_desc_k_major_sw128(smem.b[st.stage]);

    issue_fp8_k_block<T::kBlockN>(desc_a, desc_b, acc);
    cute::warpgroup_wait<0>();
    // The stage's tiles and scales are consumed (the scales were read above): give it back.
    smem.barriers.consumer_release(st, lane);
    st.advance();

#pragma unroll
    for (int j = 0; j < T::kBlockN / 8; ++j) {
      total[4 * j + 0] = fmaf(scale_a0 * scale_b[j].x, acc[4 * j + 0], total[4 * j + 0]);
      total[4 * j + 1] = fmaf(scale_a0 * scale_b[j].y, acc[4 * j + 1], total[4 * j + 1]);
      total[4 * j + 2] = fmaf(scale_a1 * scale_b[j].x, acc[4 * j + 2], total[4 * j + 2]);
      total[4 * j + 3] = fmaf(scale_a1 * scale_b[j].y, acc[4 * j + 3], total[4 * j + 3]);
    }
  }
}

}  // namespace hopperkit::gemm
