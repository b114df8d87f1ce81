// Per-token FP8 cast: one scale per row and 128 columns, written straight into the MN-major,
// TMA-aligned layout the GEMMs read for operand A (sf[b * align(m, 4) + i]), so nothing transposes it.
//
// Work unit: one warp per (row, 512-column chunk) = four scale blocks. Each lane issues
// kLoadsPerStore 16-byte loads (2 for bf16/fp16, 4 for fp32); load i of the warp covers columns
// [i·32·E, (i+1)·32·E) (E elements per 16 bytes), lane l the E at i·32·E + l·E, so every load
// instruction reads one contiguous 512-byte span and 128/E lanes share a scale block. The block amax
// is a NaN-propagating shuffle max over those lanes; then the fragments of 16/E neighbouring lanes are
// exchanged (gather_16B) so that every lane stores 16 contiguous fp8 bytes.
#pragma once

#include "common/launch.h"
#include "quant/cast.h"
#include "quant/cast_common.cuh"

namespace hopperkit::quant {

constexpr int kPerTokenWarps = 8;
constexpr int kPerTokenChunkCols = 512;  // columns per warp: 16 fp8 bytes per lane

template <typename T, bool kAligned>
__global__ void __launch_bounds__(kPerTokenWarps * kWarpSize)
    per_token_cast_kernel(const __grid_constant__ PerTokenCastParams<T> p) {
  constexpr int kElems = kElemsPer16B<T>;            // 8 (bf16/fp16) or 4 (fp32)
  constexpr int kLoads = kLoadsPerStore<T>;          // 2 or 4
  constexpr int kWords = kElems / 4;                 // fp8 words per load
  constexpr int kLoadCols = kWarpSize * kElems;      // columns of one warp-wide load: 256 or 128
  constexpr int kLanesPerBlock = kScaleBlock / kElems;  // 16 or 32
  static_assert(kLoads * kLoadCols == kPerTokenChunkCols, "a chunk is kLoads warp-wide loads");
  static_assert(kLoadCols % kScaleBlock == 0, "a load never splits a lane group across scale blocks");

  // x may be written by the previous kernel in the stream (a no-op unless launched with PDL).
  pdl_wait_for_prerequisites();

  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int64_t chunks_per_row = (p.n + kPerTokenChunkCols - 1) / kPerTokenChunkCols;
  const int64_t task = static_cast<int64_t>(blockIdx.x) * kPerTokenWarps + warp;
  if (task >= p.m * chunks_per_row) return;  // warp-uniform: the shuffles below see full warps
  const int32_t row = static_cast<int32_t>(task / chunks_per_row);
  const int64_t col0 = (task % chunks_per_row) * kPerTokenChunkCols;
  const T* x_row = p.x + row * p.x_row_stride;
  uint8_t* out_row = p.out + static_cast<int64_t>(row) * p.n;

  // All loads in flight before any reduction.
  uint4 raw[kLoads];
#pragma unroll
  for (int i = 0; i < kLoads; ++i) raw[i] = load_16B<T, kAligned>(x_row, col0 + i * kLoadCols + lane * kElems, p.n);

  uint32_t frag[kLoads][kWords];
#pragma unroll
  for (int i = 0; i < kLoads; ++i) {
    const float amax = warp_reduce_max_nan<kLanesPerBlock>(abs_max<T>(raw[i], 0.0f));
    const BlockScale s = block_scale(amax, p.use_ue8m0);
    quantize_16B<T>(raw[i], s, frag[i]);
    const int64_t block = (col0 + i * kLoadCols) / kScaleBlock + lane / kLanesPerBlock;
    if (lane % kLanesPerBlock == 0 && block * kScaleBlock < p.n) {
      float* sf_col = p.sf + block * p.sf_stride;
      sf_col[row] = s.sf;
      // The TMA box of the GEMM may read the padding rows: keep them 0 (no separate memset launch).
      if (row == p.m - 1)
        for (int r = p.m; r < p.sf_stride; ++r) sf_col[r] = 0.0f;
    }
  }

  if constexpr (kAligned) {
    // Lane l now holds load (l % kLoads) of its group of kLoads lanes: 16 bytes at group · 16.
    const uint4 v = gather_16B<kLoads, kWords>(frag, lane);
    const int64_t col = col0 + (lane % kLoads) * kLoadCols + (lane / kLoads) * 16;
    if (col < p.n) *reinterpret_cast<uint4*>(out_row + col) = v;
  } else {
#pragma unroll
    for (int i = 0; i < kLoads; ++i) store_bytes(out_row, col0 + i * kLoadCols + lane * kElems, p.n, frag[i]);
  }
}

template <typename T>
void run_per_token_cast(const PerTokenCastParams<T>& params, cudaStream_t stream) {
  const int64_t chunks_per_row = (params.n + kPerTokenChunkCols - 1) / kPerTokenChunkCols;
  const int64_t tasks = static_cast<int64_t>(params.m) * chunks_per_row;
  LaunchConfig cfg;
  cfg.grid = dim3(static_cast<unsigned>((tasks + kPerTokenWarps - 1) / kPerTokenWarps));
  cfg.block = dim3(kPerTokenWarps * kWarpSize);
  cfg.stream = stream;
  if (cast_vector_path(params.x, params.x_row_stride, sizeof(T), params.m, params.n)) {
    launch_kernel(per_token_cast_kernel<T, true>, cfg, params);
  } else {
    launch_kernel(per_token_cast_kernel<T, false>, cfg, params);
  }
}

}  // namespace hopperkit::quant
