// Epilogue building blocks shared by the GEMM kernels: one math warpgroup's 64 rows of a BF16 or FP32
// output tile, from wgmma accumulator fragments to global memory through shared memory and TMA.
#pragma once

#include <cute/arch/util.hpp>

#include "common/fragment.cuh"
#include "common/sync.cuh"
#include "common/tma.cuh"
#include "gemm/tile_store.h"

namespace hopperkit::gemm {

// Where a warpgroup's rows go: a 2-D map [rows, N], or a 3-D map [groups, rows, N] (the masked
// layout, so that a box clips at its group's last row instead of spilling into the next group).
struct TileStoreTarget {
  const CUtensorMap* map;
  bool three_d;
  int col0, row0, group;
};

// Boxes of a tile kBlockN columns wide, kBoxCols columns each: ⌈kBlockN / kBoxCols⌉ of them, box b
// at tile column kBoxCols·b, except that where the width is not a whole number of boxes the last
// one ends at the tile's end and so overlaps the one before it (the BF16 tiles 144 and 176 columns
// wide: boxes at columns 0, 64 and 80, or 0, 64 and 112). Columns are then stored twice: with the
// same values by a store, with -0.0 (the additive identity of every value) by the second of two
// reduce-adds. A narrower last box would need a tensor map of its own.
template <int kBlockN, int kBoxCols>
struct StoreBoxes {
  static constexpr int kCount = (kBlockN + kBoxCols - 1) / kBoxCols;
  static_assert(kBlockN >= kBoxCols && kBlockN % 16 == 0, "a tile is at least one box wide, in whole 16-column pairs");
  static __device__ __forceinline__ constexpr int col(int box) {
    return box * kBoxCols < kBlockN - kBoxCols ? box * kBoxCols : kBlockN - kBoxCols;
  }
  // Tile columns below this in box `box` were stored by the boxes before it.
  static __device__ __forceinline__ constexpr int stored_before(int box) { return box * kBoxCols; }
};

// For each 64-column box: every thread stmatrix-es its fragment into a 1 KiB-aligned staging box
// (128B-swizzled, so the 8 rows of each 8×8 matrix hit 8 different banks), and one thread issues
// the TMA store, which clips rows and columns outside the tensor (at 16-byte granularity along a
// row: N must be a multiple of 8). Rows with keep_* false are written as 0 by select (their A rows
// may hold NaN); keep_a covers the thread's fragment row AccumulatorRows::row0, keep_b row0 + 8.
// `staging` holds kBuffers boxes used in turn across calls (`first_box` = how many boxes this
// warpgroup stored earlier in the tile, so a tile stored in several calls continues the turn). A
// box is rewritten once the store issued from it kBuffers boxes earlier has read it: with two,
// writing one box overlaps storing the other; with one per box of the tile, a whole tile's stores
// drain while the next tile's mainloop runs. The boxes go in rounds of kRound: each round's
// stmatrix-es share one async-proxy fence and one pair of warpgroup barriers, which the tensor
// cores otherwise wait for box by box (the fence waits for the shared-memory stores to complete).
// The warpgroup leader must call tma_store_wait_all() before the CTA exits.
// `kTileBoxes`: the boxes this warpgroup stores per tile over all its calls (first_box restarts at 0
// with each tile). Where that is not a whole number of turns through the staging slots, the tile's
// first box reuses a slot whose previous store is not among the kBuffers - kRound oldest pending
// ones (a 64-column tile with two slots reuses slot 0 for every tile), so the first round waits
// until every earlier store has read its box.
template <int kBlockN, int kBuffers, int kRound = 1, int kTileBoxes = StoreBoxes<kBlockN, kStoreBoxCols>::kCount,
          class BarrierId>
__device__ __forceinline__ void store_rows_bf16(const TileStoreTarget& target, uint8_t* staging, BarrierId barrier,
                                                bool keep_a, bool keep_b, const float (&acc)[kBlockN / 2],
                                                int first_box = 0) {
  using Boxes = StoreBoxes<kBlockN, kStoreBoxCols>;
  constexpr int kBoxes = Boxes::kCount;
  constexpr bool kSlotsRestart = kTileBoxes % kBuffers != 0;
  static_assert(kBuffers >= 1, "at least one staging box per warpgroup");
  static_assert(kRound >= 1 && kBuffers % kRound == 0 && kBoxes % kRound == 0,
                "a round is a whole number of boxes and of staging turns");
  const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32;
  const bool leader = threadIdx.x % 128 == 0;
  // stmatrix.x4 writes 16 rows × 16 columns of the warp: lane l addresses row l % 8 of matrix l / 8,
  // matrices ordered (rows 0-7, cols 0-7), (rows 8-15, cols 0-7), (rows 0-7, cols 8-15), (rows 8-15, cols 8-15).
  const int st_row = 16 * warp + 8 * ((lane / 8) % 2) + lane % 8;
  const int st_chunk = lane / 16;
  const uint32_t staging_addr = cute::cast_smem_ptr_to_uint(staging);
  // Box `box` of this call goes through staging slot (first_box + box) % kBuffers.
  const auto slot_offset = [first_box](int box) { return ((first_box + box) % kBuffers) * kStoreBoxBytes; };
#pragma unroll
  for (int round = 0; round < kBoxes / kRound; ++round) {
    // Each box is one bulk group: the kBuffers - kRound newest groups use the other slots (but at
    // the first box of a tile whose boxes do not fill whole turns, see kTileBoxes).
    if (leader) {
      if (kSlotsRestart && round == 0 && first_box == 0) {
        tma_store_wait_smem_read<0>();
      } else {
        tma_store_wait_smem_read<kBuffers - kRound>();
      }
    }
    named_barrier_sync(barrier, 128);
#pragma unroll
    for (int i = 0; i < kRound; ++i) {
      const int box = round * kRound + i;
      const uint32_t buffer = staging_addr + slot_offset(box);
#pragma unroll
      for (int pair = 0; pair < kStoreBoxCols / 16; ++pair) {
        const int j = Boxes::col(box) / 8 + 2 * pair;  // 8-column groups j and j + 1
        // One select per packed pair (bf16 zeros are zero bits) rather than one per value.
        const uint32_t r0 = keep_a ? pack_bf16x2(acc[4 * j + 0], acc[4 * j + 1]) : 0u;
        const uint32_t r1 = keep_b ? pack_bf16x2(acc[4 * j + 2], acc[4 * j + 3]) : 0u;
        const uint32_t r2 = keep_a ? pack_bf16x2(acc[4 * j + 4], acc[4 * j + 5]) : 0u;
        const uint32_t r3 = keep_b ? pack_bf16x2(acc[4 * j + 6], acc[4 * j + 7]) : 0u;
        stmatrix_x4(buffer + swizzle_128b_offset(st_row, 2 * pair + st_chunk), r0, r1, r2, r3);
      }
    }
    fence_shared_for_async_proxy();
    named_barrier_sync(barrier, 128);
    if (leader) {
#pragma unroll
      for (int i = 0; i < kRound; ++i) {
        const int box = round * kRound + i;
        const uint8_t* box_smem = staging + slot_offset(box);
        const int col = target.col0 + Boxes::col(box);
        if (target.three_d) {
          tma_store_3d(target.map, box_smem, col, target.row0, target.group);
        } else {
          tma_store_2d(target.map, box_smem, col, target.row0);
        }
        tma_store_commit();
      }
    }
  }
}

// The FP32 counterpart of store_rows_bf16 for layouts whose stored rows all hold a result: 32-column
// boxes of a 3-D map [groups, rows, N] (one group for a dense D), each either stored or, with
// `reduce`, added into global memory by the TMA unit (D += box; D already holds C). Unlike
// red.global.add.f32 the TMA reduction keeps subnormal values, and it moves whole 128-byte rows.
// Each thread writes its float2 pairs into the 128B-swizzled box (16-byte unit u of row r at
// u ^ (r % 8)): the 8 rows a warp writes per instruction share no unit, 2 wavefronts per 256 bytes.
// `zero`: store 0 instead of the accumulators (an empty sum without C). Same staging turn and
// leader duties as store_rows_bf16.
template <int kBlockN, int kBuffers, class BarrierId>
__device__ __forceinline__ void store_rows_f32(const TileStoreTarget& target, uint8_t* staging, BarrierId barrier,
                                               bool reduce, bool zero, const float (&acc)[kBlockN / 2]) {
  using Boxes = StoreBoxes<kBlockN, kStoreBoxColsF32>;
  static_assert(kBuffers >= 1, "at least one staging box per warpgroup");
  // The slots restart with each tile: where a tile's boxes are not a whole number of turns (96
  // columns in 3 boxes over 2 slots, 144 in 5 over 3), its first box waits for every earlier store.
  constexpr bool kSlotsRestart = Boxes::kCount % kBuffers != 0;
  const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32;
  const bool leader = threadIdx.x % 128 == 0;
  const int row_a = 16 * warp + lane / 4;  // the thread's fragment rows row_a and row_a + 8
  const int swizzle = row_a % 8;
#pragma unroll
  for (int box = 0; box < Boxes::kCount; ++box) {
    const int slot = box % kBuffers;
    float* box_smem = reinterpret_cast<float*>(staging + slot * kStoreBoxBytes);
    if (leader) {
      if (kSlotsRestart && box == 0) {
        tma_store_wait_smem_read<0>();
      } else {
        tma_store_wait_smem_read<kBuffers - 1>();
      }
    }
    named_barrier_sync(barrier, 128);
#pragma unroll
    for (int g = 0; g < kStoreBoxColsF32 / 8; ++g) {
      const int j = Boxes::col(box) / 8 + g;  // the thread's 8-column group
      const int col = 8 * g + 2 * (lane % 4);  // within the box
      const int offset = ((col / 4) ^ swizzle) * 4 + col % 4;
      // Columns an overlapping last box shares with the box before: added once only.
      const bool again = 8 * j < Boxes::stored_before(box);
      const float2 a = zero ? make_float2(0.0f, 0.0f)
                       : reduce && again ? make_float2(-0.0f, -0.0f)
                                         : make_float2(acc[4 * j + 0], acc[4 * j + 1]);
      const float2 b = zero ? make_float2(0.0f, 0.0f)
                       : reduce && again ? make_float2(-0.0f, -0.0f)
                                         : make_float2(acc[4 * j + 2], acc[4 * j + 3]);
      *reinterpret_cast<float2*>(box_smem + row_a * kStoreBoxColsF32 + offset) = a;
      *reinterpret_cast<float2*>(box_smem + (row_a + 8) * kStoreBoxColsF32 + offset) = b;
    }
    fence_shared_for_async_proxy();
    named_barrier_sync(barrier, 128);
    if (leader) {
      const int col = target.col0 + Boxes::col(box);
      if (reduce) {
        tma_reduce_add_3d(target.map, box_smem, col, target.row0, target.group);
      } else {
        tma_store_3d(target.map, box_smem, col, target.row0, target.group);
      }
      tma_store_commit();
    }
  }
}

}  // namespace hopperkit::gemm
