// Compile-time configuration of the BF16 GEMM kernel.
#pragma once

#include <cstdint>

#include <cute/arch/mma_sm90_desc.hpp>

#include "common/pipeline.cuh"
#include "common/warp_specialization.cuh"
#include "gemm/split_k_cluster.cuh"
#include "gemm/tile_store.cuh"
#include "gemm/bf16/params.h"

namespace hopperkit::gemm {

enum class Bf16GemmRole { kMath, kProducer };

// Named barriers of the math warpgroups (ids 1..15; 0 is __syncthreads).
enum class Bf16GemmBarrier : int {
  kEpilogueWarpgroup0 = 1,  // + warpgroup: that warpgroup's D staging buffer is free / written
  kSplitPartialsWritten = 3,  // every math thread's split-K partial is stored (second round: the verdict is in smem)
};

template <int kBlockM_, int kBlockN_, OperandMajor kMajorA_, OperandMajor kMajorB_,
          Bf16Variant kVariant = Bf16Variant::kGeneral>
struct Bf16GemmTraits {
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr OperandMajor kMajorA = kMajorA_;
  static constexpr OperandMajor kMajorB = kMajorB_;
  static constexpr bool kKGrouped = kVariant == Bf16Variant::kKGrouped;
  static constexpr bool kMasked = kVariant == Bf16Variant::kMasked;
  static constexpr bool kSwapAB = kVariant == Bf16Variant::kSwapAB;
  // The M block where M ends may load only its rows of A through a map of their own
  // (Bf16GemmParams::a_tail_rows): the host sets one for the normal layout's K-major A only, so the
  // other kernels compile it out.
  static constexpr bool kMayLoadATail = kMajorA == OperandMajor::kK && !kSwapAB && !kMasked && !kKGrouped;
  // The swapped decode kernels split K the same way.
  static constexpr bool kSplitK = kVariant == Bf16Variant::kSplitK || kSwapAB;
  static_assert(!kSplitK || (kMajorA == OperandMajor::kK && kMajorB == OperandMajor::kK),
                "split-K is compiled for K-major operands (the weights of a decode GEMM)");
  static_assert(!kKGrouped || (kMajorA == OperandMajor::kMN && kMajorB == OperandMajor::kMN),
                "the k-grouped operands are MN-major ([ΣK, M] and [ΣK, N])");
  static_assert(!kMasked || (kMajorA == OperandMajor::kK && kMajorB == OperandMajor::kK),
                "the masked operands are K-major (MoE activations and weights)");
  static_assert(kBlockM == 64 || kBlockM == 128, "each math warpgroup owns 64 rows (the wgmma M)");
  // The widths that tile N = 2112 and 576 (multiples of 192, 176 and 144, not of 128 or 256), and
  // those that quantise mid-sized grids onto the SMs (N = 4096 and 2112 in 43 and 22 blocks of 96,
  // 7168 in 41 of 176), are compiled for the normal layout with K-major operands only: 128×192,
  // 128×176, 128×144, 128×96, 64×176, 64×144 and 64×96 (and 64×96 split-K, for N = 576).
  static constexpr bool kOddWidth = kBlockN == 96 || kBlockN == 144 || kBlockN == 176 || kBlockN == 192;
  static_assert(kSwapAB ? kBlockM == 64 && is_bf16_swap_ab_token_width(kBlockN)
                        : kBlockN == 64 || kBlockN == 128 || kBlockN == 256 ||
                              (kOddWidth && kMajorA == OperandMajor::kK && kMajorB == OperandMajor::kK &&
                               (kVariant == Bf16Variant::kGeneral ||
                                (kVariant == Bf16Variant::kSplitK && kBlockM == 64 && kBlockN == 96))),
                "wgmma N of 64, 128, 256 (or 96, 144, 176, 192 with K-major operands); the swapped decode kernels: "
                "64 weight rows × kBf16SwapAbTokenWidths");
  // One K block = 64 bf16 = one 128-byte swizzle row: a K-major tile is [rows × 128 B], an MN-major
  // tile is BLOCK/64 chunks of [64 K rows × 128 B] (64 M/N elements per row), so both layouts are
  // built from 8 KiB pieces holding 64 rows (K-major) or 64 columns (MN-major) of the operand.
  static constexpr int kBlockK = 64;
  static constexpr int kChunkBytes = 64 * 128;
  static constexpr int kWgmmaK = 16;

  static constexpr auto kGmmaMajorA =
      kMajorA == OperandMajor::kK ? cute::SM90::GMMA::Major::K : cute::SM90::GMMA::Major::MN;
  static constexpr auto kGmmaMajorB =
      kMajorB == OperandMajor::kK ? cute::SM90::GMMA::Major::K : cute::SM90::GMMA::Major::MN;

  static constexpr int kMathWarpgroups = kBlockM / 64;
  static constexpr int kMathThreads = 128 * kMathWarpgroups;
  static constexpr int kThreads = kMathThreads + 128;  // + one producer warpgroup, the last one

  // Register budget (setmaxnreg, rule in common/warp_specialization.cuh). Each math thread holds
  // BLOCK_N/2 FP32 accumulators (128 at BLOCK_N = 256).
  using Registers = RegisterSplit<kMathThreads, 40, kMathWarpgroups == 2 ? 232 : 240>;
  static constexpr int kProducerRegisters = Registers::kProducer;
  static constexpr int kMathRegisters = Registers::kMath;

  static constexpr int kBytesA = kBlockM * kBlockK * 2;
  static constexpr int kBytesB = kBlockN * kBlockK * 2;
  static constexpr int kStageBytes = kBytesA + kBytesB;

  // Epilogue staging for the TMA store of a BF16 D (gemm/tile_store.cuh): two boxes per warpgroup,
  // so a 256-column tile's four boxes are written while the previous one is stored. Still 4 stages
  // at 128×256 (the 48 KiB stages leave 38 KiB). The other widths have a staging box for each of
  // their boxes, so that a staging turn is the whole tile: three at 144, 176 and 192 (the last one
  // of 144 and 176 overlapping the second), two at 96 (the second overlapping the first). Stages:
  // 128 rows: 5 of 34 KiB at 144, 4 of 38 and 40 KiB at 176 and 192, 6 of 28 KiB at 96; 64 rows: 6
  // of 30 KiB at 176, 7 of 26 KiB at 144, 10 of 20 KiB at 96 (13 of 16 KiB at 64; kMaxStages below).
  static constexpr int kStoreBuffers = kOddWidth ? (kBlockN + kStoreBoxCols - 1) / kStoreBoxCols : 2;
  static constexpr int kBytesD = kStoreBuffers * kStoreBoxBytes;

  // As many stages as fit next to the D buffers and the barriers in the 227 KiB an SM90 CTA may use
  // (minus the 1 KiB the kernel spends aligning the dynamic shared memory base): 4 at 128×256,
  // 6 at 128×128.
  static constexpr int kSmemBudget = 232448 - 1024 - 1024 - kMathWarpgroups * kBytesD;
  // At most 8 stages for the 128-row tiles (which fit 4-6 of them); the swapped decode
  // kernels and the 64-row tiles take up to 16 (9-12 KiB each at 8-32 tokens, 13 of 16 KiB at 64×64
  // and 64 tokens, 10 of 20 KiB at 64×96 and 96 tokens; the wider 64-row tiles fit 5-8 either way):
  // there the stages are what one warpgroup's stream of long K keeps in flight (cuBLAS's decode kernels
  // on this card are named 64x8_64x16, 64x64_64x13, 64x72_64x12: by their names, K blocks of 64 and
  // 12-16 stages). PERF (an H100, ncu at the base clock, clean L2): 129×2112×7168 on 99 CTAs of
  // 64×64 with 8 stages took 26.3 µs at 46% of L2 and 39% of DRAM throughput, its 16 KiB stages
  // arriving one per 234 ns per CTA: the stream was bound by the loads in flight, not by a unit.
  // ab_builds.py (an H100, three rounds, medians, µs, 8 stages / 13 at 64×64 and 10 at 64×96):
  // 129×2112×7168 29.9 / 26.0, 192×2112×7168 30.2 / 26.6, 256×2112×7168 30.6 / 26.8,
  // 512×576×7168 23.9 / 22.4, 129×4096×7168 (64×96) 37.5 / 35.6, 192×4096×7168 (64×96) 37.7 / 35.8,
  // 384×2112×7168 (64×96) 32.7 / 30.9, 1024×576×7168 (64×96) 28.8 / 27.2; equal where they split K
  // (129-384×576×7168) and at K = 2048 (64×7168×2048 19.6 / 19.8); 4096×7168×2048 (128×256) 162.5 /
  // 162.7. PERF (H200, ncu, same run): a 128-token swapped tile (8 stages of 24 KiB) was slower than
  // two 64-token blocks wherever either ran (128×2112×7168 19.8 / 16.6 µs, 128×576×7168 15.6 / 10.7),
  // and is not compiled.
  static constexpr int kMaxStages = kSwapAB || kBlockM == 64 ? 16 : 8;
  static constexpr int kStages = kSmemBudget / kStageBytes > kMaxStages ? kMaxStages : kSmemBudget / kStageBytes;
  static_assert(kStages >= 3, "fewer than 3 stages cannot hide TMA latency: shrink BLOCK_M/BLOCK_N");

  struct SharedStorage {
    alignas(1024) uint8_t a[kStages][kBytesA];  // [stage][BLOCK_M × 64] bf16, 128B swizzle, 8 KiB pieces
    alignas(1024) uint8_t b[kStages][kBytesB];  // [stage][BLOCK_N × 64] bf16, 128B swizzle, 8 KiB pieces
    alignas(1024) uint8_t d[kMathWarpgroups][kBytesD];  // per warpgroup: boxes of [64 rows × 128 B], 128B swizzle
    StageBarriers<kStages> barriers;
    int split_is_last;  // split-K: this CTA completed the tile's last split (gemm/split_k.cuh)
    // Split-K within a cluster (gemm/split_k_cluster.cuh): the peers' partials arrive into the stage
    // ring. Last, so the other variants' layout is that of a storage without it.
    SplitKClusterBarriers split_cluster;
  };
  static_assert(sizeof(SharedStorage) + 1024 <= 232448, "shared memory over 227 KiB: lower kStages");
  static constexpr int kSmemBytes = sizeof(SharedStorage) + 1024;

  // Split-K within a cluster (GemmProblem::split_in_cluster), for every split-K tile (at most 64
  // values per thread, which the summing pass holds without spilling): one unit's FP32 partial, and
  // how many of them the A/B stage ring (a then b, contiguous) can receive.
  static constexpr bool kSplitInCluster = kSplitK;
  static constexpr int kPartialBytes = kBlockM * kBlockN * 4;
  static constexpr int kRingPartials = kStages * kStageBytes / kPartialBytes;
  static_assert(!kSplitInCluster || kBlockN / 2 <= 64, "the summing pass holds at most 64 values per thread");
};

}  // namespace hopperkit::gemm
