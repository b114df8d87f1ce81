// Persistent tile scheduler for the GEMM kernels.
//
// CTA c of a grid of G CTAs processes linear tiles c, c + G, c + 2G, ... (static round robin: no
// atomics, and every role of a CTA walks the same sequence without communicating). Linear ids are
// rasterised in bands of GemmProblem::band_m M-blocks: consecutive ids sweep the band's M-blocks
// first, then step along N, so one wave of CTAs touches band_m A-panels and about G / band_m
// B-panels, which stay resident in L2 while the wave runs.
#pragma once

#include <cstdint>

#include "gemm/problem.h"

namespace hopperkit::gemm {

// kCompactMasked (the masked layout's own instantiations): only the M blocks that hold a row before
// masked_m[g] are scheduled, so a capture sized for the worst-case M_max costs only the blocks in use
// (walking and skipping the empty ones cost most of the call at M_max = 4096). Tiles are numbered
// group by group, and within a group rasterised in bands of its M blocks: a group's M blocks share
// its B and run side by side, while consecutive tiles of one-block groups stream one B after the
// other. Each thread's tiles only increase, so a cursor over the groups finds a tile's group in
// amortised O(1). PERF: gemm/fp8_1d2d/PERF.md "Layouts".
// kPairN = 2 (A multicast, the normal layout without split-K): the tiles 2j and 2j + 1 are the N
// blocks 2i and 2i + 1 of one M block, so that the two CTAs of a cluster, which take consecutive
// units, load the same A; the rasterisation above then applies to those pairs. Needs an even number
// of N blocks (the launcher checks).
template <int kBlockM, int kBlockN, bool kCompactMasked = false, int kPairN = 1>
struct TileScheduler {
  // Only the unit cursor is state: the grid's shape is recomputed from the kernel parameters
  // (constant bank) on use, so the math warpgroups keep one register live across the mainloop for it.
  const GemmProblem& p;
  int next_unit;
  // kCompactMasked only (otherwise never read, so never allocated): the scheduled M blocks, and the
  // group cursor with the group's first tile. blocks_of must see each thread's units in order (the
  // same unit twice is fine), which every role's loop does.
  int masked_blocks = 0, cursor_group = 0, cursor_first_tile = 0;

  __device__ __forceinline__ explicit TileScheduler(const GemmProblem& params) : p(params), next_unit(blockIdx.x) {
    if constexpr (kCompactMasked) {
      for (int g = 0; g < p.num_groups; ++g) masked_blocks += masked_blocks_of_group(g);
    }
  }

  // Group g's M blocks that hold a row before masked_m[g] (a count past M_max is cut there).
  __device__ __forceinline__ int masked_blocks_of_group(int g) const {
    const int rows = min(max(__ldg(p.masked_m + g), 0), p.m);
    return (rows + kBlockM - 1) / kBlockM;
  }

  __device__ __forceinline__ int num_m_blocks() const {
    if constexpr (kCompactMasked) return masked_blocks;
    return (p.sched_rows + kBlockM - 1) / kBlockM;
  }
  __device__ __forceinline__ int num_n_blocks() const { return (p.n + kBlockN - 1) / kBlockN; }

  // Work unit = (tile, K split); the splits of a tile are adjacent ids, so they run on neighbouring
  // CTAs at the same time and the tile's fixup rarely waits. Units are handed out as one int and
  // decoded on use.
  __device__ __forceinline__ bool next(int& unit) {
    if (next_unit >= num_m_blocks() * num_n_blocks() * p.k_splits) return false;
    unit = next_unit;
    next_unit += gridDim.x;
    return true;
  }
  // Without K splits a unit is its tile. Decoding a unit is a chain of dependent integer work on
  // every thread that does it (about 150 instructions with the run-time divisions, 0.4 µs, which a
  // tile's epilogue and the producer's first loads wait for: gemm/fp8_1d2d/PERF.md "Epilogue"), so
  // the divisions are skipped where they are by 1.
  __device__ __forceinline__ int split_of(int unit) const { return p.k_splits == 1 ? 0 : unit % p.k_splits; }
  __device__ __forceinline__ int tile_of(int unit) const { return p.k_splits == 1 ? unit : unit / p.k_splits; }
  __device__ __forceinline__ void blocks_of(int unit, int& m_block, int& n_block) {
    if constexpr (kCompactMasked) {
      const int tile = unit;  // the masked layout has no K splits
      const int n_blocks = num_n_blocks();
      int blocks = masked_blocks_of_group(cursor_group);
      while (tile >= cursor_first_tile + blocks * n_blocks) {
        cursor_first_tile += blocks * n_blocks;
        blocks = masked_blocks_of_group(++cursor_group);
      }
      band_raster(tile - cursor_first_tile, blocks, n_blocks, m_block, n_block);
      m_block += cursor_group * ((p.m + kBlockM - 1) / kBlockM);
      return;
    }
    if constexpr (kPairN == 2) {
      const int tile = unit;  // no K splits with A multicast
      band_raster(tile / 2, num_m_blocks(), num_n_blocks() / 2, m_block, n_block);
      n_block = 2 * n_block + tile % 2;
      return;
    }
    // One M block (decode-sized M): the bands hold one block each, and the tile is the N block.
    // The same mapping as band_raster's, without its divisions.
    if (num_m_blocks() == 1) {
      m_block = 0;
      n_block = tile_of(unit);
      return;
    }
    band_raster(tile_of(unit), num_m_blocks(), num_n_blocks(), m_block, n_block);
  }

 private:
  // Tile `tile` of an m_blocks × n_blocks grid swept in bands of band_m M blocks: M fastest within a
  // band, then N, then the next band.
  __device__ __forceinline__ void band_raster(int tile, int m_blocks, int n_blocks, int& m_block, int& n_block) const {
    const int band_m = p.band_m;
    const int band = tile / (band_m * n_blocks);
    const int first_m = band * band_m;
    const int band_rows = min(band_m, m_blocks - first_m);
    const int in_band = tile - band * band_m * n_blocks;
    m_block = first_m + in_band % band_rows;
    n_block = in_band / band_rows;
  }
};

// What the scheduler's M block `m_block` (of BLOCK_M rows) is in the problem's layout.
struct MBlockRows {
  int group;       // B/SFB group of the block; -1: no row of the block has a result (D rows written as 0)
  int a_group;     // masked: the group's slab of A and D; 0 otherwise
  int a_row;       // first row of the block within the slab
  int store_rows;  // rows of the block inside D (the rest is past the end of the matrix or the group)
  int valid_rows;  // rows [valid_rows, store_rows) are written as 0 (masked layout)
};

template <int kBlockM>
__device__ __forceinline__ MBlockRows resolve_m_block(const GemmProblem& p, int m_block) {
  MBlockRows r;
  if (p.layout == GemmLayout::kMGroupedMasked) {
    const int blocks_per_group = (p.m + kBlockM - 1) / kBlockM;
    r.a_group = m_block / blocks_per_group;
    r.a_row = (m_block % blocks_per_group) * kBlockM;
    r.store_rows = min(kBlockM, p.m - r.a_row);
    r.valid_rows = max(0, min(r.store_rows, __ldg(p.masked_m + r.a_group) - r.a_row));
    r.group = r.valid_rows > 0 ? r.a_group : -1;
  } else {
    r.a_group = 0;
    r.a_row = m_block * kBlockM;
    r.store_rows = min(kBlockM, p.m - r.a_row);
    r.valid_rows = r.store_rows;
    // Contiguous: segments start on multiples of 128 >= BLOCK_M, so the block's first row names its
    // expert, and a block that starts with padding is all padding.
    r.group = p.layout == GemmLayout::kMGroupedContiguous ? __ldg(p.m_indices + r.a_row) : 0;
  }
  // An expert id out of range (unchecked input on the fast path) must not address past B and SFB:
  // such a block is treated as padding.
  if (r.group >= p.num_groups) r.group = -1;
  return r;
}

// The passes of a 256-row block of the contiguous layout (Fp8Gemm1d2dTraits::kHalves). Segments start
// on multiples of 128 rows, so each 128-row half's first row names its expert (-1, or an id out of
// range: padding, never addressed), and the halves may belong to one expert, two, or none. One pass
// per expert over all of the block's K blocks: `first` is the first pass's expert (-1: the block is
// all padding, no pass), `second` the second pass's (-1: none). The producer threads need only these
// two; a math warpgroup also needs which pass is its own (`pass_of_half`).
struct TilePasses {
  int first, second;

  // The pass in which half h (math warpgroup h's rows, expert `group_of_half`) is multiplied; 2 if none.
  __device__ __forceinline__ int pass_of_half(int group_of_half) const {
    return group_of_half < 0 ? 2 : group_of_half == first ? 0 : 1;
  }
  __device__ __forceinline__ int count() const { return (first >= 0) + (second >= 0); }
};

// The expert of 128-row half `half` of the contiguous layout's 256-row block `m_block`; -1 for
// padding, an out-of-range id, or a half past M.
__device__ __forceinline__ int half_group(const GemmProblem& p, int m_block, int half) {
  const int row = m_block * 256 + half * 128;
  const int id = row < p.m ? __ldg(p.m_indices + row) : -1;
  return id < p.num_groups ? id : -1;
}

// What a math thread of the contiguous layout's 256-row block `m_block` needs to know of m_indices,
// loaded together at the tile's start (one L2 round trip; read where they were used, at the start
// and in the epilogue, they were two, in which neither math warpgroup issued a wgmma): both halves'
// experts (half_group: the block's passes), its own warpgroup's (one of the two, loaded rather than
// selected for the compiler's sake: mma_halves_tile) and the ids of its four result rows (a padding
// row's D row is stored as 0).
struct HalvesTileIds {
  int first_half, second_half, own_half;
  int rows[2][2];  // [wave][AccumulatorRows::row0, row0 + 8]; -1 past M

  __device__ __forceinline__ void load(const GemmProblem& p, int m_block, int warpgroup, int row0) {
    first_half = half_group(p, m_block, 0);
    second_half = half_group(p, m_block, 1);
    own_half = half_group(p, m_block, warpgroup);
#pragma unroll
    for (int w = 0; w < 2; ++w) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = m_block * 256 + warpgroup * 128 + w * 64 + row0 + 8 * r;
        rows[w][r] = row < p.m ? __ldg(p.m_indices + row) : -1;
      }
    }
  }
  // Bit 2w + r: row r of wave w has an expert (tile_store's keep flags).
  __device__ __forceinline__ uint32_t rows_with_expert() const {
    uint32_t bits = 0;
#pragma unroll
    for (int w = 0; w < 2; ++w) {
#pragma unroll
      for (int r = 0; r < 2; ++r) bits |= uint32_t(rows[w][r] >= 0) << (2 * w + r);
    }
    return bits;
  }
};

// `first_half`, `second_half`: the halves' experts (half_group).
__device__ __forceinline__ TilePasses contiguous_passes(int first_half, int second_half) {
  if (first_half < 0 || second_half == first_half) return {max(first_half, second_half), -1};
  return {first_half, second_half};
}

}  // namespace hopperkit::gemm
