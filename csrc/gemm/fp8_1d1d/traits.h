// Compile-time configuration of the FP8 1d1d GEMM kernel (FP32 D = C + A·Bᵀ, 1×128 scales on A and B).
#pragma once

#include <cstdint>

#include "common/pipeline.cuh"
#include "common/warp_specialization.cuh"
#include "gemm/tile_store.h"

namespace hopperkit::gemm {

enum class Fp8Gemm1d1dRole { kMath, kProducer };

// Named barriers of the math warpgroups (ids 1..15; 0 is __syncthreads). Each math warpgroup owns
// its D staging boxes and synchronises only its own 128 threads.
enum class Fp8Gemm1d1dBarrier : int {
  kEpilogueWarpgroup0 = 1,  // + warpgroup: that warpgroup's D staging box is free / written
};

template <int kBlockM_, int kBlockN_>
struct Fp8Gemm1d1dTraits {
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  // One K block = one scale granularity: the promotion of the tensor-core partial sums happens
  // exactly where the scales change.
  static constexpr int kBlockK = 128;
  static_assert(kBlockM == 64 || kBlockM == 128, "each math warpgroup owns 64 rows (the wgmma M)");
  // D leaves through 64-row × 32-column FP32 boxes (gemm/tile_store.cuh store_rows_f32).
  static_assert(kBlockN % kStoreBoxColsF32 == 0 && kBlockN <= 256, "BLOCK_N must be a multiple of 32 (one FP32 box)");

  static constexpr int kMathWarpgroups = kBlockM / 64;
  static constexpr int kMathThreads = 128 * kMathWarpgroups;
  static constexpr int kThreads = kMathThreads + 128;  // + one producer warpgroup, the last one

  // Register budget (setmaxnreg, rule in common/warp_specialization.cuh). Math threads hold the wgmma
  // accumulator and the promoted FP32 totals (BLOCK_N/2 each) plus the BLOCK_N/4 B scales of the K
  // block: 200 live floats at BLOCK_N = 160 (ptxas places the products so that no register spills;
  // at 192 columns it spills 300 bytes, and reading the scales after the wgmma wait to fit 192 costs
  // more than the width gains: README.md "Performance"). At 256 threads (one math warpgroup) the
  // entry count, 256, is above kMathRegisters and the math .inc draws nothing.
  using Registers = RegisterSplit<kMathThreads, 40, kMathWarpgroups == 2 ? 232 : 240>;
  static constexpr int kProducerRegisters = Registers::kProducer;
  static constexpr int kMathRegisters = Registers::kMath;

  static constexpr int kBytesA = kBlockM * kBlockK;  // fp8
  static constexpr int kBytesB = kBlockN * kBlockK;
  static constexpr int kBytesSFA = kBlockM * 4;
  static constexpr int kBytesSFB = kBlockN * 4;
  static constexpr int kSfaSlotFloats = (kBlockM + 31) / 32 * 32;  // TMA destinations are 128-byte aligned
  static constexpr int kSfbSlotFloats = (kBlockN + 31) / 32 * 32;
  static constexpr int kStageBytes = kBytesA + kBytesB + (kSfaSlotFloats + kSfbSlotFloats) * 4;
  // D staging boxes per warpgroup, used in turn (store_rows_f32): two, so that writing one box
  // overlaps the TMA reduction of the other, and the 32 KiB a 128-row tile saves against a box for
  // every box of the tile buys a fifth stage. PERF: README.md "Epilogue".
  static constexpr int kStoreBuffers = 2;
  static constexpr int kBytesD = kMathWarpgroups * kStoreBuffers * kStoreBoxBytes;

  // As many stages as fit next to the D staging boxes and the barriers in the 227 KiB an SM90 CTA may
  // use (minus the 1 KiB the kernel spends aligning the dynamic shared memory base): 5 at 128×160
  // (32 KiB of D boxes), 8 (the cap) at 64×128.
  static constexpr int kSmemBudget = 232448 - 1024 - 1024;
  static constexpr int kFitStages = (kSmemBudget - kBytesD) / kStageBytes;
  static constexpr int kStages = kFitStages > 8 ? 8 : kFitStages;
  static_assert(kStages >= 3, "fewer than 3 stages cannot hide TMA latency: shrink BLOCK_M/BLOCK_N");

  struct SharedStorage {
    // D staging boxes of each warpgroup: [64 rows × 32 floats], 128B swizzle. Not shared with the
    // stages: the producer is already loading the next tile.
    alignas(1024) uint8_t d[kMathWarpgroups][kStoreBuffers * kStoreBoxBytes];
    alignas(1024) uint8_t a[kStages][kBytesA];  // [stage][BLOCK_M rows × 128 B], 128B swizzle
    alignas(1024) uint8_t b[kStages][kBytesB];  // [stage][BLOCK_N rows × 128 B], 128B swizzle
    alignas(128) float sfa[kStages][kSfaSlotFloats];
    alignas(128) float sfb[kStages][kSfbSlotFloats];
    StageBarriers<kStages> barriers;
  };
  static_assert(sizeof(SharedStorage) + 1024 <= 232448, "shared memory over 227 KiB: lower kStages");
  static constexpr int kSmemBytes = sizeof(SharedStorage) + 1024;
};

}  // namespace hopperkit::gemm
