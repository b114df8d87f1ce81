// Host/device interface of the BF16 GEMM: D = C + A·Bᵀ, bf16 A and B (each K- or MN-major), FP32
// accumulation, D bf16 or fp32, C optional in D's dtype.
#pragma once

#include <cstdint>

#include <cuda.h>
#include <cuda_runtime.h>

#include "gemm/problem.h"

namespace hopperkit::gemm {

// Which dimension of an operand is contiguous in memory. A [M, K] is K-major when stride(1) == 1
// ("n" in nt), MN-major when stride(0) == 1 (the "t" of tn/tt); likewise B [N, K].
enum class OperandMajor : int32_t { kK = 0, kMN = 1 };

enum class Bf16GemmOutput : int32_t { kBf16 = 0, kFp32 = 1 };

// Layouts that run their own instantiations, so that their code paths stay out of the other kernels,
// whose mainloop allocation moves by a percent or more with any added branch (measured):
// - kKGrouped: per-group K ranges read on the device, FP32 D added into by reductions;
// - kMasked: the scheduler hands out only the M blocks with a row before masked_m[g]
//   (gemm/scheduler.cuh kCompactMasked).
// - kSplitK: split-K for decode-sized M (normal layout, K-major A and B): each tile's K blocks are
//   divided among k_splits work units, whose FP32 partials are summed within a thread-block cluster
//   (gemm/split_k_cluster.cuh) or through global memory (gemm/split_k.cuh).
// - kSwapAB: decode-sized M (normal layout, K-major A and B, no C): the kernel computes Dᵀ = B·Aᵀ,
//   the weights B as its 64-row "A" tiles and the M token rows as its BLOCK_N = 8/16/32/64/96 "B"
//   columns, so no wgmma row is padding; it stores each tile transposed into D from registers and splits K
//   like kSplitK. The host passes the swapped operands and sizes (m = N, n = M).
// kGeneral runs the normal and m-grouped contiguous layouts.
enum class Bf16Variant : int32_t { kGeneral = 0, kKGrouped = 1, kMasked = 2, kSplitK = 3, kSwapAB = 4 };

struct Bf16GemmParams : GemmProblem {
  // Load B with the EVICT_FIRST L2 policy. Off unless forced (ops/checks.h gemm_b_evict_first): the
  // FP8 GEMM's choice measured mixed here (README.md and PERF.md "L2 policy of B").
  bool b_evict_first = false;
  // The normal layout's K-major A where M ends inside an M block: that block's A arrives through
  // `tma_a_tail`, whose box holds a_tail_rows rows (its rows, rounded up to 8) instead of BLOCK_M.
  // Rows of a box past the tensor are TMA zero fill, which streams far slower than data: with the
  // full box, 65×7168×16384 (two 64-row blocks of 64×128 tiles, the second of one row) took 99 µs
  // against 74 at 128 rows. The smem rows past the box keep stale data that only reaches output
  // rows that are not stored. 0: every block loads the full box. Here, in the padding before the
  // first tensor map, so that the producer reads it from a constant-cache line it reads anyway.
  int a_tail_rows = 0;
  // K-major operand: [rows, K] map, box [BLOCK_rows, 64], 128B swizzle (A masked: 3-D [G, M_max, K];
  // B m-grouped: 3-D [G, N, K]). MN-major operand: [K, rows] map, box [64, 64] (64 K rows × 64
  // M/N elements), 128B swizzle, loaded BLOCK_rows / 64 times per stage (k-grouped: [ΣK, M], [ΣK, N]).
  CUtensorMap tma_a;
  CUtensorMap tma_b;
  Bf16GemmOutput output = Bf16GemmOutput::kBf16;
  // BF16 D without C: stored through shared memory by TMA (gemm/tile_store.cuh), 2-D [M, N] or,
  // masked, 3-D [G, M_max, N] map with [64, 64] boxes. Otherwise stored from registers via `d`.
  bool tma_store_d = false;
  CUtensorMap tma_d;
  void* d = nullptr;        // D [M, N] (masked, k-grouped: [G, M, N]), row stride ldd, group stride ldd_group
  const void* c = nullptr;  // C shaped like D in D's dtype, row stride ldc, or null; may alias D (not k-grouped)
  int64_t ldd = 0, ldc = 0;
  int64_t ldd_group = 0;
  // FP32 D that already holds C (c is d): the epilogue adds the tile into D with vector reductions
  // (red.global.add), which need no read of D in the math warps (c is then null).
  bool add_to_d = false;
  const int32_t* ks = nullptr;  // k-grouped: [G] K of each group, read on the device (gemm/k_groups.cuh)
  // Split-K (GemmProblem::k_splits > 1, the kSplitK instantiations): per-call workspace of the
  // units' partials and flags, and the launch's epoch (gemm/split_k.cuh split_k_publish_and_sum).
  float* split_workspace = nullptr;           // [tiles · k_splits · BLOCK_M · BLOCK_N]
  unsigned long long* split_flags = nullptr;  // [tiles · k_splits], any contents
  unsigned long long split_epoch = 0;         // nonzero, < 2^56, fresh for every launch
  // Split-K: the most splits the launcher may give a tile whose units sum within a cluster instead
  // (gemm/split_k_cluster.cuh; it then sets k_splits and split_in_cluster); 1: through global memory
  // only. Last, so that the other fields keep their offsets in every kernel's parameter bank.
  int max_cluster_splits = 1;
  // The normal layout's K-major A where M ends inside an M block: that block's A, see a_tail_rows.
  CUtensorMap tma_a_tail;
};

// Token columns (BLOCK_N) of the compiled swapped decode kernels (Bf16Variant::kSwapAB, 64 weight
// rows each): the one list that the traits, the split-K rule and the tuning knob check against;
// dispatch.cu instantiates each.
inline constexpr int kBf16SwapAbTokenWidths[] = {8, 16, 32, 64, 96};

constexpr bool is_bf16_swap_ab_token_width(int block_n) {
  for (const int width : kBf16SwapAbTokenWidths) {
    if (width == block_n) return true;
  }
  return false;
}

// Tile configurations compiled into the library (one instantiation file each).
struct Bf16GemmConfig {
  int block_m, block_n;
  int k_splits = 1;  // > 1: split-K (Bf16Variant::kSplitK, or kSwapAB)
  // Bf16Variant::kSwapAB: block_m = 64 weight rows, block_n one of kBf16SwapAbTokenWidths token
  // columns (the parameters then hold the swapped problem).
  bool swap_ab = false;
  OperandMajor major_a = OperandMajor::kK, major_b = OperandMajor::kK;
};

void run_bf16_gemm(const Bf16GemmParams& params, Bf16GemmConfig config, int num_sms, bool pdl, cudaStream_t stream);
// Whether run_bf16_gemm has an instantiation for this configuration (layout, majorness, tile, variant,
// split counts): the ops ask before writing anything, so that a configuration a tuning knob forced
// and nothing compiled is refused with D untouched.
bool bf16_gemm_compiled(const Bf16GemmParams& params, const Bf16GemmConfig& config);

}  // namespace hopperkit::gemm
