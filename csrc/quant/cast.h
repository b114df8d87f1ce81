// Host interface of the fused FP8 (e4m3fn) casts with float32 scales: per-token (1×128 blocks, scales
// written MN-major and TMA-aligned for the GEMMs' operand A) and per-block (128×128 tiles, operand B of
// the 1d2d recipe). Executable specification: python/hopperkit/reference/quant.py (bit-identical).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace hopperkit::quant {

// Columns (per-token) or rows and columns (per-block) covered by one scale.
constexpr int kScaleBlock = 128;

// The input may have any row stride; only the last dimension must be dense.
template <typename T>
struct PerTokenCastParams {
  const T* x;            // [m, n], row stride x_row_stride (elements)
  int64_t x_row_stride;
  uint8_t* out;          // [m, n] float8_e4m3fn bytes, contiguous
  float* sf;             // [ceil(n/128), sf_stride] floats: sf[b * sf_stride + i] scales row i, block b
  int32_t m, n;
  int32_t sf_stride;     // align(m, 4); rows m..sf_stride-1 of every column are written as 0
  bool use_ue8m0;        // round every scale up to a power of two
};

template <typename T>
struct PerBlockCastParams {
  const T* x;            // [m, n], row stride x_row_stride (elements)
  int64_t x_row_stride;
  uint8_t* out;          // [m, n] float8_e4m3fn bytes, contiguous
  float* sf;             // [ceil(m/128), ceil(n/128)] contiguous
  int32_t m, n;
  bool use_ue8m0;
};

// Both launchers take the 16-byte vector path when x's data pointer and row stride are 16-byte aligned
// and n % 16 == 0 (so every fp8 output row is too); otherwise a scalar-access path with the same
// arithmetic. Neither reads device memory on the host nor synchronizes. m, n >= 1.
template <typename T>
void run_per_token_cast(const PerTokenCastParams<T>& params, cudaStream_t stream);

template <typename T>
void run_per_block_cast(const PerBlockCastParams<T>& params, cudaStream_t stream);

// Whether the 16-byte vector path applies (see above); x_row_stride in elements, ignored when m == 1.
inline bool cast_vector_path(const void* x, int64_t x_row_stride, int64_t elem_bytes, int64_t m, int64_t n) {
  return reinterpret_cast<uintptr_t>(x) % 16 == 0 && (m <= 1 || (x_row_stride * elem_bytes) % 16 == 0) && n % 16 == 0;
}

// Grid limits the ops check before launching: the per-token grid has one warp per (row, 512-column
// chunk) on grid.x (< 2^31 CTAs of 8 warps); the per-block grid has ceil(m/128) tiles on grid.y.
constexpr int64_t kPerTokenMaxCtas = (int64_t{1} << 31) - 1;
constexpr int64_t kPerBlockMaxTileRows = 65535;

}  // namespace hopperkit::quant
