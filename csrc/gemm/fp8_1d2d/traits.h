// Compile-time configuration of the FP8 1d2d GEMM kernel.
#pragma once

#include <cstdint>

#include "common/pipeline.cuh"
#include "common/warp_specialization.cuh"
#include "gemm/split_k_cluster.cuh"
#include "gemm/tile_store.cuh"

namespace hopperkit::gemm {

enum class Fp8GemmRole { kMath, kProducer };

// Named barriers of the math warpgroups (ids 1..15; 0 is __syncthreads).
enum class Fp8GemmBarrier : int {
  kSplitPartialsWritten = 1,  // every math thread's split-K partial is stored (and, second round, the verdict is in smem)
  kEpilogueWarpgroup0 = 2,    // + warpgroup: that warpgroup's D staging buffer is free / written
};

template <int kBlockM_, int kBlockN_, int kClusterM_ = 1, bool kOneBoxStaging_ = false, bool kMasked_ = false,
          int kClusterN_ = 1, bool kHalves_ = false>
struct Fp8Gemm1d2dTraits {
  // The masked layout's own instantiations: the scheduler hands out only the M blocks with rows before
  // masked_m (gemm/scheduler.cuh kCompactMasked); the others keep their code exactly.
  static constexpr bool kMasked = kMasked_;
  // The contiguous layout's 256-row instantiation. Expert segments are aligned to 128 rows, so the
  // two 128-row halves of a block, one per math warpgroup, may belong to two experts: such a block
  // runs as two passes over K, one per expert, with the other warpgroup passing the stages on
  // (gemm/scheduler.cuh TilePasses); a block of one expert runs as one pass, as a dense tile does.
  static constexpr bool kHalves = kHalves_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  // CTAs of a cluster work on vertically adjacent tiles (same N block): the B tile is loaded once,
  // by the cluster's rank 0, and multicast to both, halving B's L2 traffic.
  static constexpr int kClusterM = kClusterM_;
  // The mirror image: CTAs of a cluster work on horizontally adjacent tiles (same M block, the
  // scheduler's kPairN), and rank 0 multicasts A and its scales to both (gemm/heuristics.h
  // fp8_1d2d_a_multicast_fits: decode grids of one M block, and 256×128 tiles on large grids).
  static constexpr int kClusterN = kClusterN_;
  static constexpr int kClusterSize = kClusterM * kClusterN;
  // The M block where M ends may load only its rows of A and its scales through maps of their own
  // (Fp8Gemm1d2dParams::a_tail_rows): the host sets them for the 2-D layouts only, and never with A
  // multicast, where the pair's CTAs load the two halves of one full box.
  static constexpr bool kMayLoadATail = kClusterN == 1 && !kMasked;
  static_assert((kClusterM == 1 || kClusterM == 2) && (kClusterN == 1 || kClusterN == 2) && kClusterSize <= 2,
                "clusters of 1 or 2 CTAs, sharing B (kClusterM) or A (kClusterN)");
  // Its CTA pairs may share A (kClusterN = 2): both CTAs of a pair take the same M block, so the
  // same experts and passes, and only B, which is per expert, stays each CTA's own.
  static_assert(!kHalves || (kBlockM_ == 256 && kClusterM == 1 && !kMasked),
                "per-half experts are for 256-row tiles of the contiguous layout, with A multicast at most");
  // One staging box per warpgroup whatever the tile, the rest of shared memory to stages: for grids
  // of at most two waves (Fp8Gemm1d2dConfig::one_box_staging), see kStoreBuffers.
  static constexpr bool kOneBoxStaging = kOneBoxStaging_;
  // One K block = one scale granularity: the promotion of the tensor-core partial sums happens
  // exactly where the scales change.
  static constexpr int kBlockK = 128;
  static_assert(kBlockM == 64 || kBlockM == 128 || kBlockM == 192 || kBlockM == 256, "BLOCK_M is 64, 128, 192 or 256");
  // A tile must touch at most two 128-wide B scale blocks: BLOCK_N divides 128, or BLOCK_N = 192
  // (tiles start at column offsets 0 or 64 within a scale block, so 192 + 64 <= 256), or BLOCK_N =
  // 256 (two whole scale blocks, one per column wave, below).
  static_assert(128 % kBlockN == 0 || kBlockN == 192 || kBlockN == 256, "BLOCK_N must divide 128 or be 192 or 256");
  // Whether each K block carries two B scale rows (the tile's columns span two scale blocks), and
  // whether one wave's columns do (BLOCK_N = 192: the promotion switches rows inside the wave).
  static constexpr bool kTwoScaleRows = 128 % kBlockN != 0;
  static constexpr bool kStraddlesScaleBlocks = kBlockN == 192;

  // Each math warpgroup owns kRowsPerWarpgroup rows of the tile, as waves of 64 rows × kWaveN
  // columns (one wgmma batch each) issued one after the other through one accumulator set. A tile of
  // 256 rows × 128 columns runs two waves along M, one of 128 rows × 256 columns two along N (a
  // warpgroup's 64 rows, each wave one 128-wide scale block of columns). Either moves 25% fewer
  // operand bytes per FLOP than a 128×128 tile (A and B of a K block serve twice the rows or
  // columns), for 64 more promoted FP32 values per thread; the two shapes take different numbers of
  // tiles to cover a problem, which is what the wave model chooses between.
  // A 192-row tile runs three math warpgroups of one wave each instead: 129-192 rows at large N·K
  // are bound by each warpgroup's serial chain of wgmma, wait and promotion per K block (README.md
  // "192-row tiles"), which a third warpgroup runs beside the other two, where a second wave would
  // run after the first.
  static constexpr int kMathWarpgroups = kBlockM == 64 ? 1 : kBlockM == 192 ? 3 : 2;
  static constexpr int kWavesM = kBlockM / 64 / kMathWarpgroups;
  static constexpr int kWaveN = kBlockN == 256 ? 128 : kBlockN;
  static constexpr int kWavesN = kBlockN / kWaveN;
  static constexpr int kWaves = kWavesM * kWavesN;
  static constexpr int kRowsPerWarpgroup = 64 * kWavesM;
  // FP32 values of one wave's accumulator fragment per thread (wgmma 64×kWaveN).
  static constexpr int kWaveAccs = kWaveN / 2;
  // Registers: kWaves · kWaveAccs promoted values + kWaveAccs accumulators per thread within 232
  // (152 with three math warpgroups, see Registers).
  static_assert(kWavesM == 1 || kBlockN <= 128, "256-row tiles are at most 128 columns wide");
  static_assert(kWavesN == 1 || kBlockM == 128, "256-column tiles are 128 rows high");
  static_assert(kMathWarpgroups < 3 || kBlockN <= 64, "192-row tiles are at most 64 columns wide");
  // The 64-row position of wave w within its warpgroup's rows, and its first tile column.
  static constexpr __host__ __device__ int wave_row(int w) { return kWavesN == 1 ? 64 * w : 0; }
  static constexpr __host__ __device__ int wave_col(int w) { return kWavesN == 1 ? 0 : kWaveN * w; }
  static constexpr int kMathThreads = 128 * kMathWarpgroups;
  // Whether a wave reads its A scales from the stage after issuing its wgmmas rather than before:
  // after where a warpgroup's wgmmas of one K block run at least 384 tensor cycles (256×128 and
  // 128×256: two waves of 64×128; 128×192: one wave of 64×192), before on the smaller tiles. It only orders the
  // source; ptxas still places the loads and the scale products among the wgmma issues. Measured
  // per tile (PERF.md "Two-level accumulation").
  static constexpr bool kScalesAfterIssue = kWaves * 64 * kWaveN >= 64 * 192;
  static constexpr int kThreads = kMathThreads + 128;  // + one producer warpgroup, the last one

  // Register budget (setmaxnreg, rule in common/warp_specialization.cuh). The producer needs a few
  // dozen registers for addresses and barrier state; the math warpgroups hold the wgmma accumulators
  // and the promoted FP32 sums (BLOCK_N/2 each per thread).
  // Three math warpgroups (512 threads, 128 registers each at entry) get 152: the most that the
  // producer's release covers; 64 values per thread fit there, 128 (BLOCK_N = 128) spill.
  using Registers = RegisterSplit<kMathThreads, 40, kMathWarpgroups == 3 ? 152 : kMathWarpgroups == 2 ? 232 : 240>;
  static constexpr int kProducerRegisters = Registers::kProducer;
  static constexpr int kMathRegisters = Registers::kMath;

  static constexpr int kBytesA = kBlockM * kBlockK;  // fp8
  static constexpr int kBytesB = kBlockN * kBlockK;
  static constexpr int kBytesSFA = kBlockM * 4;
  static constexpr int kSfaSlotFloats = (kBlockM + 31) / 32 * 32;  // TMA destinations are 128-byte aligned
  static constexpr int kStageBytes = kBytesA + kBytesB + kSfaSlotFloats * 4;

  // Epilogue staging: each math warpgroup writes its rows of D in boxes of 64 rows × 64 columns (128
  // bytes of BF16, the widest row the 128B swizzle allows), one TMA store per box. With a buffer for
  // every box of the tile no box waits for another's store, and a tile's stores drain during the
  // next tile's mainloop: that pays where D is a large share of the traffic (short K), although it
  // costs 128×128 its sixth stage and 256×128 its fourth. The 192-wide tile keeps one buffer and its
  // fifth stage, which is worth more to it; so do grids of one or two waves (kOneBoxStaging), where
  // at most one mainloop follows a tile and the stages carry a memory-bound stream. PERF numbers:
  // PERF.md "Epilogue".
  static constexpr int kStoreBuffers = kBlockN == 192 || kOneBoxStaging ? 1 : kWaves * kWaveN / kStoreBoxCols;
  static constexpr int kBytesD = kStoreBuffers * kStoreBoxBytes;

  // As many stages as fit next to the D buffers and the barriers in the 227 KiB an SM90 CTA may use
  // (minus the 1 KiB the kernel spends aligning the dynamic shared memory base).
  static constexpr int kSmemBudget = 232448 - 1024 - 1024 - kMathWarpgroups * kBytesD;
  static constexpr int kStages = kSmemBudget / kStageBytes > 8 ? 8 : kSmemBudget / kStageBytes;
  static_assert(kStages >= 3, "fewer than 3 stages cannot hide TMA latency: shrink BLOCK_M/BLOCK_N");

  struct SharedStorage {
    alignas(1024) uint8_t a[kStages][kBytesA];  // [stage][BLOCK_M rows × 128 B], 128B swizzle
    alignas(1024) uint8_t b[kStages][kBytesB];  // [stage][BLOCK_N rows × 128 B], 128B swizzle
    alignas(1024) uint8_t d[kMathWarpgroups][kBytesD];  // [64 rows × 128 B] per warpgroup, 128B swizzle
    alignas(128) float sfa[kStages][kSfaSlotFloats];
    // The tile's B scales of the stage's K block: its first scale row, and the second one when
    // the tile straddles two 128-column scale blocks (written by the producer, see produce_tile).
    float2 sfb[kStages];
    StageBarriers<kStages, kClusterSize> barriers;
    int split_is_last;  // split-K fixup through global memory: this CTA finished the tile's last split
    // Split-K fixup within a cluster (GemmProblem::split_in_cluster, gemm/split_k_cluster.cuh):
    // the peers' partials arrive into the stage ring.
    SplitKClusterBarriers split_cluster;
  };
  static_assert(sizeof(SharedStorage) + 1024 <= 232448, "shared memory over 227 KiB: lower kStages");
  // Split-K within a cluster (GemmProblem::split_in_cluster), compiled for the decode-sized
  // tiles only: with more than 64 values per thread (256×128, 128×192), the summing pass spills,
  // and those tiles split K where M is small only. One unit's FP32 partial, and how many the A/B
  // stage ring can receive.
  static constexpr bool kSplitInCluster = kClusterSize == 1 && !kMasked && kWaves * kWaveAccs <= 64;
  static constexpr int kPartialBytes = kBlockM * kBlockN * 4;
  static constexpr int kRingPartials = kStages * (kBytesA + kBytesB) / kPartialBytes;
  static constexpr int kSmemBytes = sizeof(SharedStorage) + 1024;
};

}  // namespace hopperkit::gemm
