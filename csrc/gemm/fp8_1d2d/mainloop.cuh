// Mainloop of the FP8 1d2d GEMM: the producer's TMA loads and the math warpgroups' wgmma + promotion.
#pragma once

#include <cute/arch/cluster_sm90.hpp>

#include "common/pipeline.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"
#include "gemm/fp8_1d2d/params.h"
#include "gemm/scheduler.cuh"

namespace hopperkit::gemm {

// Tile column where the B scale row changes: 128 - n0 % 128, which is BLOCK_N or more unless a
// BLOCK_N = 192 tile starts in the middle of a 128-wide scale block.
template <class T>
__device__ __forceinline__ int scale_split(int n_block) {
  return 128 - n_block * T::kBlockN % 128;
}

// B scales of the tile: row n0/128 up to tile column scale_split, row n0/128 + 1 after it (only when
// BLOCK_N = 192 or 256; the second row is clamped to stay in bounds when the tile ends past N,
// where nothing is stored).
struct TileScalesB {
  const float* lo;
  const float* hi;
  int64_t stride_k;
};

template <class T>
__device__ __forceinline__ TileScalesB tile_scales_b(const Fp8Gemm1d2dParams& p, int group, int n_block) {
  const int n0 = n_block * T::kBlockN;
  const int last_row = (p.n + 127) / 128 - 1;
  const float* sfb = p.sfb + group * p.sfb_stride_g;
  return {sfb + (n0 / 128) * p.sfb_stride_n, sfb + min(n0 / 128 + 1, last_row) * p.sfb_stride_n, p.sfb_stride_k};
}

// The tile's B scales of K block `kb`: (first row, second row), the same value twice when the tile
// lies in one scale block.
template <class T>
__device__ __forceinline__ float2 load_block_scales_b(const TileScalesB& sfb, int kb) {
  const float lo = __ldg(sfb.lo + kb * sfb.stride_k);
  return {lo, T::kTwoScaleRows ? __ldg(sfb.hi + kb * sfb.stride_k) : lo};
}

// Two TMA threads take turns through the stage ring, each loading all of every other stage
// (kernel.cuh says why). Both walk the same sequence of K blocks; `next` is the sequence's parity.
// Turns by stage rather than by operand: a thread loading only A ran stages ahead of the one
// loading B, so a tile's first stage completed later (short-K units 2-8% slower).
struct StageTurns {
  int next;
  int mine;
  __device__ __forceinline__ explicit StageTurns(int turn) : next(0), mine(turn) {}
  // Whether the coming stage is this thread's, and on to the next one.
  __device__ __forceinline__ bool take() {
    const bool ours = next == mine;
    next ^= 1;
    return ours;
  }
};

// The K blocks [kb_begin, kb_end) of one tile that are this thread's turn: A [BLOCK_M × 128]
// (through `map_a`, whose box holds the rows that `tx_bytes` counts), B [BLOCK_N × 128] and the A
// scales of the block (`map_sfa`).
template <class T>
__device__ __forceinline__ void produce_k_blocks(const Fp8Gemm1d2dParams& p, typename T::SharedStorage& smem,
                                                 PipelineState<T::kStages>& st, StageTurns& turns,
                                                 const MBlockRows& rows, int n_block, int kb_begin, int kb_end,
                                                 const CUtensorMap* map_a, const CUtensorMap* map_sfa,
                                                 uint32_t tx_bytes) {
  // Grouped layouts read B (and, masked, A) through 3-D maps: a tile reaching past N or M_max
  // reads TMA's zeros, never the next group.
  const bool grouped_b = p.layout != GemmLayout::kNormal;
  const bool grouped_a = p.layout == GemmLayout::kMGroupedMasked;
  const int b_row = n_block * T::kBlockN;
  const CacheHint b_hint = p.b_evict_first ? CacheHint::kEvictFirst : CacheHint::kEvictNormal;
  // Masked: SFA is viewed as [G·⌈K/128⌉, M_max], the group's K blocks are consecutive rows.
  const int sfa_row = rows.a_group * p.sfa_rows_per_group;
  for (int kb = kb_begin; kb < kb_end; ++kb, st.advance()) {
    if (!turns.take()) continue;
    smem.barriers.producer_acquire(st, tx_bytes);
    uint64_t* full = smem.barriers.full_barrier(st);
    const int k0 = kb * T::kBlockK;
    // With kClusterN = 2 both CTAs work on the same M block: rank 0 loads its A (and below, its
    // scales) into both; the partner's full barrier counts the same bytes either way.
    const bool loads_a = T::kClusterN == 1 || cute::block_rank_in_cluster() == 0;
    if constexpr (T::kClusterN == 2) {
      if (loads_a) tma_load_2d_multicast(map_a, full, smem.a[st.stage], k0, rows.a_row, 0b11);
    } else if (grouped_a) {
      tma_load_3d(map_a, full, smem.a[st.stage], k0, rows.a_row, rows.a_group);
    } else {
      tma_load_2d(map_a, full, smem.a[st.stage], k0, rows.a_row);
    }
    if constexpr (T::kClusterM == 1) {
      if (grouped_b) {
        tma_load_3d(&p.tma_b, full, smem.b[st.stage], k0, b_row, rows.group, b_hint);
      } else {
        tma_load_2d(&p.tma_b, full, smem.b[st.stage], k0, b_row, b_hint);
      }
    } else if (cute::block_rank_in_cluster() == 0) {
      tma_load_2d_multicast(&p.tma_b, full, smem.b[st.stage], k0, b_row, (1 << T::kClusterM) - 1, b_hint);
    }
    if constexpr (T::kClusterN == 2) {
      if (loads_a) tma_load_2d_multicast(map_sfa, full, smem.sfa[st.stage], rows.a_row, sfa_row + kb, 0b11);
    } else {
      tma_load_2d(map_sfa, full, smem.sfa[st.stage], rows.a_row, sfa_row + kb);
    }
  }
}

// A TMA thread streams its turns of the K blocks of every tile of this CTA through the stage ring.
// A and its scales arrive as a_box_rows rows, or a_tail_rows in the M block where M ends (see
// Fp8Gemm1d2dParams), B as a full tile. The two cases are two inlined copies of the loop, each with
// its maps as constants: choosing the maps at run time kept two more pointers live in the
// producer's 40 registers, and the 128×192 kernels spilled.
template <class T>
__device__ __forceinline__ void produce_tile(const Fp8Gemm1d2dParams& p, typename T::SharedStorage& smem,
                                             PipelineState<T::kStages>& st, StageTurns& turns, const MBlockRows& rows,
                                             int n_block, int kb_begin, int kb_end) {
  const uint32_t b_bytes = T::kBytesB;
  if constexpr (T::kMayLoadATail) {
    if (rows.a_row + T::kBlockM > p.m && p.a_tail_rows != 0) {
      produce_k_blocks<T>(p, smem, st, turns, rows, n_block, kb_begin, kb_end, &p.tma_a_tail, &p.tma_sfa_tail,
                          p.a_tail_rows * (T::kBlockK + 4) + b_bytes);
      return;
    }
  }
  produce_k_blocks<T>(p, smem, st, turns, rows, n_block, kb_begin, kb_end, &p.tma_a, &p.tma_sfa,
                      p.a_box_rows * (T::kBlockK + 4) + b_bytes);
}

// A second producer thread writes the tile's B scale(s) of each K block into the stage with an
// ordinary store (SFB may have any strides, which TMA cannot read) and arrives on the full barrier
// as its second producer arrival; the arrive releases the store to the consumers that wait on it.
// A thread of its own because the TMA thread's 40 registers (the setmaxnreg split) leave no room
// for the scale pointers. PERF (H200, same-run A/B): against the math threads loading the B scales
// from global memory themselves (an L1-cached load per thread and K block, next to the wgmma issue),
// 1-3% faster on 4096×7168×16384, 4096×4096×7168, 64×7168×16384 and 128×24576×1536, within the
// noise on the other benchmark shapes.
template <class T>
__device__ __forceinline__ void produce_tile_scales_b(const Fp8Gemm1d2dParams& p, typename T::SharedStorage& smem,
                                                      PipelineState<T::kStages>& st, int group, int n_block,
                                                      int kb_begin, int kb_end) {
  const TileScalesB sfb = tile_scales_b<T>(p, group, n_block);
  // Loaded one K block ahead, so that the global-memory latency overlaps the wait for a free stage.
  float2 next = load_block_scales_b<T>(sfb, kb_begin);
  for (int kb = kb_begin; kb < kb_end; ++kb) {
    const float2 scales = next;
    if (kb + 1 < kb_end) next = load_block_scales_b<T>(sfb, kb + 1);
    smem.barriers.producer_wait_empty(st);
    smem.sfb[st.stage] = scales;
    smem.barriers.producer_arrive(st);
    st.advance();
  }
}

// The scale factors of one K block for this thread's two rows, for the tile columns before and
// after `split` (they differ only when a BLOCK_N = 192 tile straddles two B scale blocks).
struct BlockScales {
  float s0_lo, s1_lo, s0_hi, s1_hi;
};

// total += scales · acc: the second level of the two-level accumulation, on the CUDA cores. Wave
// columns before kSplit take the first B scale row, the others the second.
template <class T, int kSplit>
__device__ __forceinline__ void promote_split_at(float (&total)[T::kWaveAccs], const float (&acc)[T::kWaveAccs],
                                                 const BlockScales& s) {
#pragma unroll
  for (int j = 0; j < T::kWaveN / 8; ++j) {
    // Column group j covers tile columns [8j, 8j + 8): it never straddles (kSplit is a multiple of 64).
    const bool lo = 8 * j < kSplit;
    const float s0 = lo ? s.s0_lo : s.s0_hi, s1 = lo ? s.s1_lo : s.s1_hi;
    total[4 * j + 0] += s0 * acc[4 * j + 0];
    total[4 * j + 1] += s0 * acc[4 * j + 1];
    total[4 * j + 2] += s1 * acc[4 * j + 2];
    total[4 * j + 3] += s1 * acc[4 * j + 3];
  }
}

// The split is a compile-time constant in each branch: with a runtime split every 8-column group
// would select its scales (two selects per four FMAs).
template <class T>
__device__ __forceinline__ void promote(float (&total)[T::kWaveAccs], const float (&acc)[T::kWaveAccs],
                                        const BlockScales& s, int split) {
  if constexpr (T::kStraddlesScaleBlocks) {
    static_assert(T::kBlockN == 192, "BLOCK_N = 192 tiles start at column 0 or 64 of a scale block");
    if (split == 64) {
      promote_split_at<T, 64>(total, acc, s);
    } else {
      promote_split_at<T, 128>(total, acc, s);
    }
  } else {
    promote_split_at<T, T::kWaveN>(total, acc, s);
  }
}

// Issues the 4 wgmmas (K = 32 each) of one wave (64 rows × kWaveN columns) of the stage's K block
// into `acc`, starting from zero, and returns the wave's scales (read before the stage can be
// released) without waiting. `wave_row`, `wave_col`: the wave's first row and column within the
// tile. Where the A scales are read is a per-tile choice (traits.h kScalesAfterIssue).
template <class T>
__device__ __forceinline__ BlockScales issue_wave(typename T::SharedStorage& smem, const PipelineState<T::kStages>& st,
                                                  int wave_row, int wave_col, AccumulatorRows rows, float2 scale_b,
                                                  float (&acc)[T::kWaveAccs]) {
  const float* sfa = smem.sfa[st.stage] + wave_row;
  float scale_a0, scale_a1;
  if constexpr (!T::kScalesAfterIssue) {
    scale_a0 = sfa[rows.row0];
    scale_a1 = sfa[rows.row0 + 8];
  }
  issue_fp8_k_block<T::kWaveN>(smem_desc_k_major_sw128(smem.a[st.stage] + wave_row * T::kBlockK),
                               smem_desc_k_major_sw128(smem.b[st.stage] + wave_col * T::kBlockK), acc);
  if constexpr (T::kScalesAfterIssue) {
    scale_a0 = sfa[rows.row0];
    scale_a1 = sfa[rows.row0 + 8];
  }
  return {scale_a0 * scale_b.x, scale_a1 * scale_b.x, scale_a0 * scale_b.y, scale_a1 * scale_b.y};
}

// Two-level accumulation over the K blocks [kb_begin, kb_end) of one tile: each block's wgmmas
// start from zero, and the FP32 result is scaled by sfa·sfb and added to `total` on the CUDA cores.
// This keeps FP8 tensor-core accumulation (fewer than 24 mantissa bits) to 128-element partial sums.
// With two waves per warpgroup (256-row and 256-column tiles) the waves of a K block take turns in
// the one accumulator set, and the stage is released after the second. A 256-column tile's waves
// are its two 128-wide B scale blocks, so each takes one B scale row.
// PERF (H200): under sustained load this kernel runs at the board's power limit (about 570 W median,
// SM clock 1.4-1.8 GHz depending on the work mix), so its speed follows energy per FLOP more than
// latency. Skipping the promotion (a measurement-only build) is 20% faster; hiding it instead is
// not: a second accumulator set that issues block kb + 1 before promoting block kb makes ptxas
// serialise the wgmmas (C7518) and measured slower, and making the two math warpgroups take turns
// (named barriers, handing over at issue, at completion or half-way) measured 0-8% slower, also
// where it did hide the promotion completely (the strict alternation, whose hand-over bubbles cost
// as much).
template <class T>
__device__ __forceinline__ void mma_tile(typename T::SharedStorage& smem, PipelineState<T::kStages>& st, int warpgroup,
                                         AccumulatorRows rows, int n_block, int kb_begin, int kb_end,
                                         float (&total)[T::kWaves][T::kWaveAccs]) {
  const int split = scale_split<T>(n_block);
  const int lane = threadIdx.x % 32;
  float acc[T::kWaveAccs];
#pragma unroll
  for (int w = 0; w < T::kWaves; ++w) {
#pragma unroll
    for (int i = 0; i < T::kWaveAccs; ++i) total[w][i] = 0.0f;
  }
  for (int kb = kb_begin; kb < kb_end; ++kb) {
    smem.barriers.consumer_wait(st);
    const float2 scale_b = smem.sfb[st.stage];
#pragma unroll
    for (int w = 0; w < T::kWaves; ++w) {
      const float2 wave_scale_b = T::kWavesN == 1 ? scale_b : w == 0 ? make_float2(scale_b.x, scale_b.x)
                                                                     : make_float2(scale_b.y, scale_b.y);
      const BlockScales scales = issue_wave<T>(smem, st, warpgroup * T::kRowsPerWarpgroup + T::wave_row(w),
                                               T::wave_col(w), rows, wave_scale_b, acc);
      cute::warpgroup_wait<0>();
      // The stage's tiles and scales are consumed (the scales were read at issue): give it back.
      if (w == T::kWaves - 1) smem.barriers.consumer_release(st, lane);
      promote<T>(total[w], acc, scales, split);
    }
    st.advance();
  }
}

// The K blocks [kb_begin, kb_end) of a pass in which this warpgroup does not multiply (traits.h
// kHalves): it waits for each stage and releases it, since a stage returns to the producer only
// when every math warp has released it. Waiting first keeps its releases in the ring's current round.
template <class T>
__device__ __forceinline__ void pass_stages_on(typename T::SharedStorage& smem, PipelineState<T::kStages>& st,
                                               int kb_begin, int kb_end) {
  const int lane = threadIdx.x % 32;
  for (int kb = kb_begin; kb < kb_end; ++kb) {
    smem.barriers.consumer_wait(st);
    smem.barriers.consumer_release(st, lane);
    st.advance();
  }
}

// A math warpgroup's share of a 256-row block of the contiguous layout (traits.h kHalves): it passes
// on the stages of the pass before its own, multiplies in its own (a half of no pass, padding, keeps
// zero sums: an empty K range) and passes on the stages of the pass after it. The experts are made
// warp-uniform, as the dense loop's `group` is (kernel.cuh).
// Shaped for ptxas: with a loop over the passes around mma_tile here, or around produce_tile in the
// producer, or with the experts read through a helper that returned the pass list, it built the
// wgmma descriptors in vector registers and moved them to uniform ones before every wgmma: 252-263
// instructions per K block of the math loop against the dense 256x128 tile's 191 (this form: 191,
// and 194 with A multicast). The warpgroup's own expert is loaded (HalvesTileIds::own_half) rather
// than selected from the two by warpgroup, and its K range is shuffled: with the select, or with
// the range computed in place, ptxas rebuilt the shared-memory base and the loop bound in every K
// block (8 more instructions).
// PERF (H200): that first version ran the contiguous 4x8192, 4096x7168 problem at 0.91-0.97x the
// speed of the 128x192 tiles, and 10-17% slower than the dense 256x128 kernel on the same rows.
template <class T>
__device__ __forceinline__ void mma_halves_tile(typename T::SharedStorage& smem, PipelineState<T::kStages>& st,
                                                int warpgroup, AccumulatorRows rows, const HalvesTileIds& ids,
                                                int n_block, int num_k_blocks,
                                                float (&total)[T::kWaves][T::kWaveAccs]) {
  static_assert(T::kWavesM == 2, "a math warpgroup per 128-row half");
  const int first_half = __shfl_sync(0xffffffffu, ids.first_half, 0);
  const int second_half = __shfl_sync(0xffffffffu, ids.second_half, 0);
  const int own_half = __shfl_sync(0xffffffffu, ids.own_half, 0);
  const TilePasses passes = contiguous_passes(first_half, second_half);
  const int count = passes.count();
  const int mine = min(passes.pass_of_half(own_half), count);
  const int own_blocks = __shfl_sync(0xffffffffu, mine < count ? num_k_blocks : 0, 0);
  pass_stages_on<T>(smem, st, 0, mine * num_k_blocks);
  mma_tile<T>(smem, st, warpgroup, rows, n_block, 0, own_blocks, total);
  pass_stages_on<T>(smem, st, 0, max(count - mine - 1, 0) * num_k_blocks);
}

}  // namespace hopperkit::gemm
