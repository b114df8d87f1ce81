// Epilogue of the FP8 1d1d GEMM: each math warpgroup stages its 64 × BLOCK_N FP32 rows in shared
// memory, one 32-column box at a time, and one of its threads hands each box to TMA, which adds it
// to D (D already holds C) or, with no C, stores it (gemm/tile_store.cuh store_rows_f32). Rows past M
// (of the group) and columns past N are clipped by the tensor map's bounds.
#pragma once

#include "gemm/fp8_1d1d/mainloop.cuh"
#include "gemm/fp8_1d1d/traits.h"
#include "gemm/tile_store.cuh"

namespace hopperkit::gemm {

template <class T>
__device__ __forceinline__ void store_1d1d_tile(const Fp8Gemm1d1dParams& p, typename T::SharedStorage& smem,
                                                int warpgroup, const Fp8Gemm1d1dTile& t,
                                                const float (&total)[T::kBlockN / 2]) {
  const TileStoreTarget target{&p.tma_d, true, t.n0, t.m0 + warpgroup * 64, t.group};
  const auto barrier =
      static_cast<Fp8Gemm1d1dBarrier>(static_cast<int>(Fp8Gemm1d1dBarrier::kEpilogueWarpgroup0) + warpgroup);
  store_rows_f32<T::kBlockN, T::kStoreBuffers>(target, smem.d[warpgroup], barrier, p.accumulate, false, total);
}

}  // namespace hopperkit::gemm
