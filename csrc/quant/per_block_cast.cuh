// Per-block FP8 cast: one scale per 128×128 tile (operand B of the 1d2d recipe), sf [ceil(m/128),
// ceil(n/128)] contiguous.
//
// Work unit: one CTA of 8 warps per tile, the whole tile held in registers (32 KiB bf16/fp16, 64 KiB
// fp32: 128 or 256 bytes per thread, all loads issued before the first use). A tile row is 128/E lanes
// of 16-byte loads (E elements per 16 bytes), so one warp-wide load covers 32·E/128 rows and
// kPasses = 128·128 / (256·E) passes cover the tile (8 for bf16/fp16, 16 for fp32); each load
// instruction reads whole 256- or 512-byte row spans. amax: per-thread max, NaN-propagating warp
// shuffle, then the 8 warp maxima through shared memory. Stores: the fragments of 16/E neighbouring
// lanes (same row) for 16/E consecutive passes are exchanged (gather_16B) so that every store is 16
// contiguous fp8 bytes.
#pragma once

#include "common/launch.h"
#include "quant/cast.h"
#include "quant/cast_common.cuh"

namespace hopperkit::quant {

constexpr int kPerBlockWarps = 8;
// Two CTAs per SM at least: with fp32 input a thread holds 64 data registers, so this caps it at 128.
constexpr int kPerBlockMinCtasPerSm = 2;

template <typename T, bool kAligned>
__global__ void __launch_bounds__(kPerBlockWarps * kWarpSize, kPerBlockMinCtasPerSm)
    per_block_cast_kernel(const __grid_constant__ PerBlockCastParams<T> p) {
  constexpr int kElems = kElemsPer16B<T>;                           // 8 (bf16/fp16) or 4 (fp32)
  constexpr int kLoads = kLoadsPerStore<T>;                         // passes per 16-byte store: 2 or 4
  constexpr int kWords = kElems / 4;                                // fp8 words per load
  constexpr int kLanesPerRow = kScaleBlock / kElems;                // 16 or 32
  constexpr int kRowsPerWarpLoad = kWarpSize / kLanesPerRow;        // 2 or 1
  constexpr int kRowsPerPass = kPerBlockWarps * kRowsPerWarpLoad;   // 16 or 8
  constexpr int kPasses = kScaleBlock / kRowsPerPass;               // 8 or 16
  static_assert(kPasses % kLoads == 0, "passes pair up into 16-byte stores");
  static_assert(kLanesPerRow % kLoads == 0, "a gather group of lanes lies in one row");

  __shared__ float warp_amax[kPerBlockWarps];

  // x may be written by the previous kernel in the stream (a no-op unless launched with PDL).
  pdl_wait_for_prerequisites();

  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kScaleBlock + (lane % kLanesPerRow) * kElems;
  // This thread's row in pass i is row0 + i · kRowsPerPass.
  const int32_t row0 = blockIdx.y * kScaleBlock + warp * kRowsPerWarpLoad + lane / kLanesPerRow;

  uint4 raw[kPasses];  // (kPasses) 16-byte vectors of this thread's rows
#pragma unroll
  for (int i = 0; i < kPasses; ++i) {
    const int32_t row = row0 + i * kRowsPerPass;
    raw[i] = row < p.m ? load_16B<T, kAligned>(p.x + row * p.x_row_stride, col, p.n) : make_uint4(0u, 0u, 0u, 0u);
  }

  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kPasses; ++i) amax = abs_max<T>(raw[i], amax);
  amax = warp_reduce_max_nan(amax);
  if (lane == 0) warp_amax[warp] = amax;
  __syncthreads();  // every warp's maximum is in shared memory
  amax = warp_amax[0];
#pragma unroll
  for (int w = 1; w < kPerBlockWarps; ++w) amax = fmax_nan(amax, warp_amax[w]);

  const BlockScale s = block_scale(amax, p.use_ue8m0);
  if (threadIdx.x == 0) p.sf[static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x] = s.sf;

#pragma unroll
  for (int q = 0; q < kPasses / kLoads; ++q) {
    uint32_t frag[kLoads][kWords];
#pragma unroll
    for (int j = 0; j < kLoads; ++j) quantize_16B<T>(raw[q * kLoads + j], s, frag[j]);
    if constexpr (kAligned) {
      // Lane l now holds pass q·kLoads + l % kLoads of its group: 16 bytes at the group's first column.
      const uint4 v = gather_16B<kLoads, kWords>(frag, lane);
      const int32_t row = row0 + (q * kLoads + lane % kLoads) * kRowsPerPass;
      const int64_t col16 = static_cast<int64_t>(blockIdx.x) * kScaleBlock + ((lane % kLanesPerRow) / kLoads) * 16;
      if (row < p.m && col16 < p.n) *reinterpret_cast<uint4*>(p.out + static_cast<int64_t>(row) * p.n + col16) = v;
    } else {
#pragma unroll
      for (int j = 0; j < kLoads; ++j) {
        const int32_t row = row0 + (q * kLoads + j) * kRowsPerPass;
        if (row < p.m) store_bytes(p.out + static_cast<int64_t>(row) * p.n, col, p.n, frag[j]);
      }
    }
  }
}

template <typename T>
void run_per_block_cast(const PerBlockCastParams<T>& params, cudaStream_t stream) {
  LaunchConfig cfg;
  cfg.grid = dim3(static_cast<unsigned>((params.n + kScaleBlock - 1) / kScaleBlock),
                  static_cast<unsigned>((params.m + kScaleBlock - 1) / kScaleBlock));
  cfg.block = dim3(kPerBlockWarps * kWarpSize);
  cfg.stream = stream;
  if (cast_vector_path(params.x, params.x_row_stride, sizeof(T), params.m, params.n)) {
    launch_kernel(per_block_cast_kernel<T, true>, cfg, params);
  } else {
    launch_kernel(per_block_cast_kernel<T, false>, cfg, params);
  }
}

}  // namespace hopperkit::quant
