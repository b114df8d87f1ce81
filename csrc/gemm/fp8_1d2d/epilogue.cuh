// Epilogue of the FP8 1d2d GEMM: BF16 conversion and bounds-checked stores of one warpgroup's rows.
#pragma once

#include <cuda_bf16.h>

#include "gemm/fp8_1d2d/mainloop.cuh"

namespace hopperkit::gemm {

template <class T>
__device__ __forceinline__ void store_tile(const Fp8Gemm1d2dParams& p, int warpgroup, AccumulatorRows rows,
                                           int m_block, int n_block, const float (&total)[T::kBlockN / 2]) {
  const int lane = threadIdx.x % 32;
  const int row_a = m_block * T::kBlockM + warpgroup * 64 + rows.row0, row_b = row_a + 8;
  const int col0 = n_block * T::kBlockN + 2 * (lane % 4);
  __nv_bfloat16* d_a = p.d + static_cast<int64_t>(row_a) * p.ldd;
  __nv_bfloat16* d_b = p.d + static_cast<int64_t>(row_b) * p.ldd;
#pragma unroll
  for (int j = 0; j < T::kBlockN / 8; ++j) {
    const int col = col0 + 8 * j;
    // N % 8 == 0 (checked on the host), so col < N implies col + 1 < N.
    if (col < p.n) {
      if (row_a < p.m)
        *reinterpret_cast<__nv_bfloat162*>(d_a + col) = __floats2bfloat162_rn(total[4 * j + 0], total[4 * j + 1]);
      if (row_b < p.m)
        *reinterpret_cast<__nv_bfloat162*>(d_b + col) = __floats2bfloat162_rn(total[4 * j + 2], total[4 * j + 3]);
    }
  }
}

}  // namespace hopperkit::gemm
