// Epilogue of the BF16 GEMM: a BF16 D without C, and an FP32 D (normal and k-grouped layouts; C, if
// any, already in D), go through shared memory and TMA stores or reduce-adds; a BF16 D with C (read
// in FP32 before D is written, so C may alias D) uses bounds-checked vector stores of one
// warpgroup's rows straight from the accumulator registers, as does an FP32 D that TMA cannot clip.
#pragma once

#include <cuda_bf16.h>

#include <type_traits>

#include "common/device.cuh"
#include "common/wgmma.cuh"
#include "gemm/bf16/params.h"
#include "gemm/bf16/traits.h"
#include "gemm/tile_store.cuh"
#include "gemm/scheduler.cuh"

namespace hopperkit::gemm {

template <class Out>
struct OutputPair;
template <>
struct OutputPair<float> {
  using Vec = float2;
  static __device__ __forceinline__ Vec pack(float x, float y) { return make_float2(x, y); }
  static __device__ __forceinline__ float2 unpack(Vec v) { return v; }
  static __device__ __forceinline__ float to_float(float v) { return v; }
  static __device__ __forceinline__ float from_float(float v) { return v; }
};
template <>
struct OutputPair<__nv_bfloat16> {
  using Vec = __nv_bfloat162;
  static __device__ __forceinline__ Vec pack(float x, float y) { return __floats2bfloat162_rn(x, y); }
  static __device__ __forceinline__ float2 unpack(Vec v) { return __bfloat1622float2(v); }
  static __device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ __nv_bfloat16 from_float(float v) { return __float2bfloat16_rn(v); }
};

// Columns (col, col + 1) of one row: D = C + acc. A pair is stored as one vector (D's rows are
// 16-byte aligned and col is even); a pair cut by N stores its first element alone. C is read
// before D is written by the same thread, so C may alias D. Rows without a result store 0 and never
// read C (grouped layouts have no C).
template <class Out>
__device__ __forceinline__ void store_pair(Out* d_row, const Out* c_row, int col, int n, bool keep, float x, float y) {
  using P = OutputPair<Out>;
  if (!keep) x = y = 0.0f;
  if (col + 1 < n) {
    if (keep && c_row != nullptr) {
      const float2 c = P::unpack(*reinterpret_cast<const typename P::Vec*>(c_row + col));
      x += c.x;
      y += c.y;
    }
    *reinterpret_cast<typename P::Vec*>(d_row + col) = P::pack(x, y);
  } else if (col < n) {
    if (keep && c_row != nullptr) x += P::to_float(c_row[col]);
    d_row[col] = P::from_float(x);
  }
}

// Columns (col, col + 1) of a row of FP32 D that already holds C: D += (x, y) by a reduction at L2,
// so the math warps never wait for D's old values (loading C left the tensor cores idle for the
// loads' latency: 4096×7168×2048 accumulating in place ran at 340 TFLOPS that way, 568 so; PERF.md "Epilogue").
// A pair cut by N adds one element.
__device__ __forceinline__ void add_pair_into(float* d_row, int col, int n, float x, float y) {
  if (col + 1 < n) {
    red_add_f32x2(d_row + col, x, y);
  } else if (col < n) {
    red_add_f32(d_row + col, x);
  }
}

// Rows without a result (contiguous padding rows, masked rows past masked_m[g], whole blocks with
// group -1 whose accumulators are not computed) are written as 0: by select, since their A rows may
// hold NaN.
// `empty_sum`: the tile summed no K block (an empty k-group), so D = C, or 0 without C: each value is
// taken as -0.0 with C, the additive identity for every C (+0.0 would turn a C of -0.0 into +0.0).
template <class T, class Out>
__device__ __forceinline__ void store_tile_from_registers(const Bf16GemmParams& p, int warpgroup, AccumulatorRows rows,
                                           const MBlockRows& block, int n_block, const float (&acc)[T::kBlockN / 2],
                                           bool empty_sum) {
  const int lane = threadIdx.x % 32;
  const int r_a = warpgroup * 64 + rows.row0, r_b = r_a + 8;  // rows within the block
  const bool store_a = r_a < block.store_rows, store_b = r_b < block.store_rows;
  bool keep_a = block.group >= 0 && r_a < block.valid_rows, keep_b = block.group >= 0 && r_b < block.valid_rows;
  if (p.layout == GemmLayout::kMGroupedContiguous) {
    keep_a = keep_a && store_a && __ldg(p.m_indices + block.a_row + r_a) >= 0;
    keep_b = keep_b && store_b && __ldg(p.m_indices + block.a_row + r_b) >= 0;
  }
  const int col0 = n_block * T::kBlockN + 2 * (lane % 4);
  Out* d_slab = static_cast<Out*>(p.d) + block.a_group * p.ldd_group;
  Out* d_a = d_slab + static_cast<int64_t>(block.a_row + r_a) * p.ldd;
  Out* d_b = d_slab + static_cast<int64_t>(block.a_row + r_b) * p.ldd;
  const Out* c = static_cast<const Out*>(p.c);
  const Out* c_a = c == nullptr ? nullptr : c + static_cast<int64_t>(block.a_row + r_a) * p.ldc;
  const Out* c_b = c == nullptr ? nullptr : c + static_cast<int64_t>(block.a_row + r_b) * p.ldc;
  if constexpr (std::is_same_v<Out, float>) {
    if (p.add_to_d) {
      if (empty_sum) return;  // D already holds C
#pragma unroll
      for (int j = 0; j < T::kBlockN / 8; ++j) {
        const int col = col0 + 8 * j;
        if (store_a) add_pair_into(d_a, col, p.n, acc[4 * j + 0], acc[4 * j + 1]);
        if (store_b) add_pair_into(d_b, col, p.n, acc[4 * j + 2], acc[4 * j + 3]);
      }
      return;
    }
  }
  const float none = c == nullptr ? 0.0f : -0.0f;  // an empty sum: D = 0, or D = C + (-0.0) = C
#pragma unroll
  for (int j = 0; j < T::kBlockN / 8; ++j) {
    const int col = col0 + 8 * j;
    const float x0 = empty_sum ? none : acc[4 * j + 0], y0 = empty_sum ? none : acc[4 * j + 1];
    const float x1 = empty_sum ? none : acc[4 * j + 2], y1 = empty_sum ? none : acc[4 * j + 3];
    if (store_a) store_pair<Out>(d_a, c_a, col, p.n, keep_a, x0, y0);
    if (store_b) store_pair<Out>(d_b, c_b, col, p.n, keep_b, x1, y1);
  }
}

}  // namespace hopperkit::gemm

namespace hopperkit::gemm {

// The swapped decode kernels (Bf16Variant::kSwapAB) hold a tile of Dᵀ: rows are columns of D (the
// weights' rows, the scheduler's M), columns are rows of D (tokens, the scheduler's N). Each value
// goes to D[token][weight row] from registers: for one token the eight lanes of a quad-row group hold
// eight consecutive columns of D, so a warp's stores are 16-byte runs, and D is a few KiB at these M.
// D without C only (the host's choice), BF16 or FP32.
template <class T, class Out>
__device__ __forceinline__ void store_tile_transposed(const Bf16GemmParams& p, AccumulatorRows rows,
                                                      const MBlockRows& block, int n_block,
                                                      const float (&acc)[T::kBlockN / 2]) {
  const int w_a = block.a_row + rows.row0, w_b = w_a + 8;  // columns of D
  const bool in_a = rows.row0 < block.store_rows, in_b = rows.row0 + 8 < block.store_rows;
  Out* d = static_cast<Out*>(p.d);
#pragma unroll
  for (int j = 0; j < T::kBlockN / 8; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int token = n_block * T::kBlockN + rows.col0 + 8 * j + e;  // a row of D
      if (token >= p.n) continue;
      Out* d_row = d + static_cast<int64_t>(token) * p.ldd;
      if (in_a) d_row[w_a] = OutputPair<Out>::from_float(acc[4 * j + e]);
      if (in_b) d_row[w_b] = OutputPair<Out>::from_float(acc[4 * j + 2 + e]);
    }
  }
}

// The output path of one warpgroup's rows: through TMA (stores, or for FP32 D holding C reduce-adds;
// both overlap the next tile's mainloop) when the host built the map (p.tma_store_d), otherwise
// stores from registers (BF16 D with C, a D whose rows TMA cannot clip exactly).
template <class T>
__device__ __forceinline__ void store_tile(const Bf16GemmParams& p, typename T::SharedStorage& smem, int warpgroup,
                                           AccumulatorRows rows, const MBlockRows& block, int n_block,
                                           const float (&acc)[T::kBlockN / 2], bool empty_sum) {
  if constexpr (T::kSwapAB) {
    if (p.output == Bf16GemmOutput::kFp32) {
      store_tile_transposed<T, float>(p, rows, block, n_block, acc);
    } else {
      store_tile_transposed<T, __nv_bfloat16>(p, rows, block, n_block, acc);
    }
  } else {
    if (p.tma_store_d && p.output == Bf16GemmOutput::kFp32) {
      // Normal and k-grouped layouts only (the host's choice): every stored row holds a result.
      if (p.add_to_d && empty_sum) return;  // D already holds C
      const TileStoreTarget target{&p.tma_d, true, n_block * T::kBlockN, block.a_row + warpgroup * 64, block.a_group};
      const auto barrier = static_cast<Bf16GemmBarrier>(static_cast<int>(Bf16GemmBarrier::kEpilogueWarpgroup0) + warpgroup);
      store_rows_f32<T::kBlockN, T::kStoreBuffers>(target, smem.d[warpgroup], barrier, p.add_to_d, empty_sum, acc);
    } else if (p.tma_store_d) {
      const int r_a = warpgroup * 64 + rows.row0, r_b = r_a + 8;  // rows within the block
      bool keep_a = block.group >= 0 && r_a < block.valid_rows, keep_b = block.group >= 0 && r_b < block.valid_rows;
      if (p.layout == GemmLayout::kMGroupedContiguous) {
        keep_a = keep_a && __ldg(p.m_indices + block.a_row + r_a) >= 0;
        keep_b = keep_b && __ldg(p.m_indices + block.a_row + r_b) >= 0;
      }
      const TileStoreTarget target{&p.tma_d, p.layout == GemmLayout::kMGroupedMasked, n_block * T::kBlockN,
                                   block.a_row + warpgroup * 64, block.a_group};
      const auto barrier = static_cast<Bf16GemmBarrier>(static_cast<int>(Bf16GemmBarrier::kEpilogueWarpgroup0) + warpgroup);
      // Both staging boxes per round (one fence and one barrier pair per two boxes), where the tile
      // has two or more; the 144- to 192-wide tiles' three in one round.
      constexpr int kBoxes = StoreBoxes<T::kBlockN, kStoreBoxCols>::kCount;
      constexpr int kRound = kBoxes < T::kStoreBuffers ? kBoxes : T::kStoreBuffers;
      store_rows_bf16<T::kBlockN, T::kStoreBuffers, kRound>(target, smem.d[warpgroup], barrier, keep_a, keep_b, acc);
    } else if (p.output == Bf16GemmOutput::kFp32) {
      store_tile_from_registers<T, float>(p, warpgroup, rows, block, n_block, acc, empty_sum);
    } else {
      store_tile_from_registers<T, __nv_bfloat16>(p, warpgroup, rows, block, n_block, acc, empty_sum);
    }
  }
}

}  // namespace hopperkit::gemm
