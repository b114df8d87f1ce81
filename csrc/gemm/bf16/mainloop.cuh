// Mainloop of the BF16 GEMM: the producer's TMA loads and the math warpgroups' chained wgmmas.
#pragma once

#include "common/pipeline.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"
#include "gemm/bf16/params.h"
#include "gemm/k_groups.cuh"
#include "gemm/scheduler.cuh"

namespace hopperkit::gemm {

// Loads one operand's K block [rows, 64] into a stage slot. K-major: one box of BLOCK rows × 64 K
// (grouped operands through their 3-D map, so a box reaching past the group's rows reads zeros,
// never the next group). MN-major: BLOCK / 64 boxes of 64 K rows × 64 elements, 8 KiB apart.
template <int kRows, OperandMajor kMajor>
__device__ __forceinline__ void load_operand(const CUtensorMap* map, uint64_t* full, uint8_t* slot, int k0, int row,
                                             bool grouped, int group, CacheHint hint = CacheHint::kEvictNormal) {
  if constexpr (kMajor == OperandMajor::kK) {
    if (grouped) {
      tma_load_3d(map, full, slot, k0, row, group, hint);
    } else {
      tma_load_2d(map, full, slot, k0, row, hint);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kRows / 64; ++i) tma_load_2d(map, full, slot + i * 64 * 128, row + 64 * i, k0, hint);
  }
}

// One tile: its rows (the layout's M block) and its K blocks [kb_begin, kb_begin + num_kb): all
// `num_k_blocks` of K, except in the k-grouped layout, where they are the group's range.
struct Bf16Tile {
  MBlockRows rows;
  int kb_begin, num_kb;
};

// kWithK = false skips the K range (the k-grouped layout walks the sizes of the groups before the
// tile's: the epilogue, which needs only the rows, does not pay for it again).
template <class T, bool kWithK = true>
__device__ __forceinline__ Bf16Tile resolve_bf16_tile(const Bf16GemmParams& p, int m_block, int num_k_blocks) {
  Bf16Tile t;
  if constexpr (T::kKGrouped) {
    const int blocks_per_group = (p.m + T::kBlockM - 1) / T::kBlockM;
    const int g = m_block / blocks_per_group;
    t.rows.group = t.rows.a_group = g;
    t.rows.a_row = (m_block % blocks_per_group) * T::kBlockM;
    t.rows.store_rows = t.rows.valid_rows = min(T::kBlockM, p.m - t.rows.a_row);
    t.kb_begin = t.num_kb = 0;
    if constexpr (kWithK) {
      // The group sizes are multiples of 128 (k_groups.cuh), so its range is whole K blocks.
      const KGroupRange r = k_group_range(p.ks, g, p.k);
      t.kb_begin = static_cast<int>(r.begin / T::kBlockK);
      t.num_kb = static_cast<int>((r.end - r.begin) / T::kBlockK);
    }
  } else {
    t.rows = resolve_m_block<T::kBlockM>(p, m_block);
    t.kb_begin = 0;
    t.num_kb = num_k_blocks;
  }
  return t;
}

// One elected producer thread streams the K blocks of one tile through the stage ring.
template <class T>
__device__ __forceinline__ void produce_tile(const Bf16GemmParams& p, typename T::SharedStorage& smem,
                                             PipelineState<T::kStages>& st, const MBlockRows& rows, int n_block,
                                             int kb_begin, int num_k_blocks) {
  const bool grouped_a = p.layout == GemmLayout::kMGroupedMasked;
  const bool grouped_b = p.layout != GemmLayout::kNormal;  // k-grouped B is MN-major: one 2-D map
  const CacheHint b_hint = p.b_evict_first ? CacheHint::kEvictFirst : CacheHint::kEvictNormal;
  // The block where M ends reads only its rows of A (Bf16GemmParams::a_tail_rows).
  const bool a_tail = T::kMayLoadATail && rows.a_row + T::kBlockM > p.m && p.a_tail_rows != 0;
  const uint32_t tx_bytes = (a_tail ? p.a_tail_rows * T::kBlockK * 2 : T::kBytesA) + T::kBytesB;
  for (int kb = 0; kb < num_k_blocks; ++kb) {
    smem.barriers.producer_acquire(st, tx_bytes);
    uint64_t* full = smem.barriers.full_barrier(st);
    const int k0 = (kb_begin + kb) * T::kBlockK;
    if (a_tail) {
      tma_load_2d(&p.tma_a_tail, full, smem.a[st.stage], k0, rows.a_row);
    } else {
      load_operand<T::kBlockM, T::kMajorA>(&p.tma_a, full, smem.a[st.stage], k0, rows.a_row, grouped_a, rows.a_group);
    }
    load_operand<T::kBlockN, T::kMajorB>(&p.tma_b, full, smem.b[st.stage], k0, n_block * T::kBlockN, grouped_b,
                                         rows.group, b_hint);
    st.advance();
  }
}

// Shared-memory descriptor of a 64-row (K-major) or 64-column (MN-major) operand piece, and the
// descriptor increment of one wgmma K step (16 elements): 32 bytes along a K-major row, or 16 rows
// of 128 bytes of an MN-major chunk (a whole number of swizzle atoms). MN-major B with BLOCK_N = 256
// spans 4 chunks, kChunkBytes apart (the descriptor's leading byte offset).
template <OperandMajor kMajor, int kChunkBytes>
struct OperandDesc {
  static constexpr uint64_t kStep = kMajor == OperandMajor::kK ? 32 >> 4 : (16 * 128) >> 4;
  static __device__ __forceinline__ uint64_t make(const uint8_t* piece) {
    return kMajor == OperandMajor::kK ? smem_desc_k_major_sw128(piece) : smem_desc_mn_major_sw128(piece, kChunkBytes);
  }
};

// One tile's K loop: the accumulators stay in registers over the whole K (FP32, no promotion).
// The wgmmas of consecutive K blocks are chained on the same accumulators, with one batch in
// flight: after committing block kb, wait until at most one batch is pending (block kb-1's has then
// completed) and give block kb-1's stage back to the producer. `while_last_batch_runs` (work that
// does not touch the accumulators, such as decoding where the epilogue stores) runs while the
// tensor cores execute the last batch, instead of after it with the tensor cores idle.
template <class T, class Overlap>
__device__ __forceinline__ void mma_tile(typename T::SharedStorage& smem, PipelineState<T::kStages>& st, int warpgroup,
                                         int num_k_blocks, float (&acc)[T::kBlockN / 2],
                                         Overlap&& while_last_batch_runs) {
  using Atom = typename Bf16SsWgmma<T::kBlockN, T::kGmmaMajorA, T::kGmmaMajorB>::Atom;
  using DescA = OperandDesc<T::kMajorA, T::kChunkBytes>;
  using DescB = OperandDesc<T::kMajorB, T::kChunkBytes>;
  const int lane = threadIdx.x % 32;
  PipelineState<T::kStages> previous = st;
  fence_accumulators(acc);
  for (int kb = 0; kb < num_k_blocks; ++kb) {
    smem.barriers.consumer_wait(st);
    // Warpgroup w reads A piece w: rows [64w, 64w + 64) of a K-major tile, or the chunk of M
    // columns [64w, 64w + 64) of an MN-major one; both start 8 KiB into the slot per warpgroup.
    const uint64_t desc_a = DescA::make(smem.a[st.stage] + warpgroup * T::kChunkBytes);
    const uint64_t desc_b = DescB::make(smem.b[st.stage]);
    cute::warpgroup_arrive();
#pragma unroll
    for (int k = 0; k < T::kBlockK / T::kWgmmaK; ++k) {
      wgmma_ss<Atom>(desc_a + k * DescA::kStep, desc_b + k * DescB::kStep, acc, kb > 0 || k > 0);
    }
    cute::warpgroup_commit_batch();
    cute::warpgroup_wait<1>();
    fence_accumulators(acc);
    if (kb > 0) smem.barriers.consumer_release(previous, lane);
    previous = st;
    st.advance();
  }
  while_last_batch_runs();
  cute::warpgroup_wait<0>();
  fence_accumulators(acc);
  if (num_k_blocks > 0) smem.barriers.consumer_release(previous, lane);
}

}  // namespace hopperkit::gemm
