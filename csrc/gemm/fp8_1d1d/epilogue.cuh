// Epilogue of the FP8 1d1d GEMM: each math warpgroup stages its 64 × BLOCK_N FP32 rows in shared
// memory and one of its threads hands them to TMA, which adds them to D (D already holds C) or, with
// no C, stores them. Rows past M and columns past N are clipped by the tensor map's bounds.
#pragma once

#include "common/sync.cuh"
#include "common/tma.cuh"
#include "gemm/fp8_1d1d/mainloop.cuh"
#include "gemm/fp8_1d1d/traits.h"

namespace hopperkit::gemm {

template <class T>
__device__ __forceinline__ void store_1d1d_tile(const Fp8Gemm1d1dParams& p, typename T::SharedStorage& smem,
                                                int warpgroup, AccumulatorRows rows, const Fp8Gemm1d1dTile& t,
                                                const float (&total)[T::kBlockN / 2]) {
  const bool issuer = threadIdx.x % 128 == 0;
  // The warpgroup's previous store must have finished reading its rows of the staging tile before
  // they are overwritten. Only the issuing thread can wait on its bulk-async groups.
  if (issuer) tma_store_wait_smem_read<0>();
  named_barrier_sync(warpgroup_barrier(Fp8Gemm1d1dBarrier::kDTileFree, warpgroup), 128);

  // Row r of a chunk is 128 bytes = 8 units of 16 bytes; unit u lives at u ^ (r % 8) (the 128B
  // swizzle TMA undoes on the way out). Rows row0 and row0 + 8 share r % 8 = lane / 4, so the 8 rows
  // a warp writes per instruction hit 8 different units: 2 wavefronts for 256 bytes, the minimum.
  const int swizzle = rows.row0 % 8;
  const int row_a = warpgroup * 64 + rows.row0;
#pragma unroll
  for (int j = 0; j < T::kBlockN / 8; ++j) {
    const int col = (j % 4) * 8 + rows.col0;  // within the 32-column chunk j / 4
    const int offset = ((col / 4) ^ swizzle) * 4 + col % 4;
    float* chunk = smem.d[j / 4];
    *reinterpret_cast<float2*>(chunk + row_a * 32 + offset) = make_float2(total[4 * j + 0], total[4 * j + 1]);
    *reinterpret_cast<float2*>(chunk + (row_a + 8) * 32 + offset) = make_float2(total[4 * j + 2], total[4 * j + 3]);
  }
  // st.shared are generic-proxy writes; the TMA store reads through the async proxy.
  fence_shared_for_async_proxy();
  named_barrier_sync(warpgroup_barrier(Fp8Gemm1d1dBarrier::kDTileWritten, warpgroup), 128);

  const int m_row = t.m0 + warpgroup * 64;
  if (issuer && m_row < p.m) {
#pragma unroll
    for (int c = 0; c < T::kDChunks; ++c) {
      const int n_col = t.n0 + 32 * c;
      if (n_col >= p.n) break;
      const float* src = smem.d[c] + warpgroup * 64 * 32;
      if (p.accumulate) {
        tma_reduce_add_3d(&p.tma_d, src, n_col, m_row, t.group);
      } else {
        tma_store_3d(&p.tma_d, src, n_col, m_row, t.group);
      }
    }
    tma_store_commit();
  }
}

}  // namespace hopperkit::gemm
