// Moving wgmma accumulator fragments through shared memory: BF16 packing, stmatrix, and the address
// arithmetic of the 128-byte swizzle that TMA and wgmma use.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

namespace hopperkit {

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Stores four 8×8 16-bit matrices. Register i of every lane holds two elements of matrix i in the
// mma accumulator layout (row lane/4, columns 2·(lane%4) + {0, 1}); lane l supplies the address of
// row l % 8 of matrix l / 8 (16 contiguous bytes).
__device__ __forceinline__ void stmatrix_x4(uint32_t smem_addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.x4.m8n8.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(smem_addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

// Byte offset of 16-byte chunk `chunk` (0..7) of row `row` in a tile of 128-byte rows stored with
// the 128-byte swizzle (CU_TENSOR_MAP_SWIZZLE_128B; the tile must be 1024-byte aligned): the chunk
// index is XORed with the row index mod 8, so the 8 rows of an 8×8 matrix hit 8 different banks.
__device__ __forceinline__ uint32_t swizzle_128b_offset(int row, int chunk) {
  return static_cast<uint32_t>(row * 128 + ((chunk ^ (row % 8)) * 16));
}

}  // namespace hopperkit
