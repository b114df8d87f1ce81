// Host/device interface of the FP8 1d2d GEMM: D (bf16) = A·Bᵀ with 1×128 A scales and 128×128 B scales.
#pragma once

#include <cstdint>

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "gemm/problem.h"

namespace hopperkit::gemm {

struct Fp8Gemm1d2dParams : GemmProblem {
  // Load B with the EVICT_FIRST L2 policy: set where each B tile is read by one work unit only (one
  // M block per problem or group; K splits read disjoint K ranges), so B streams through L2 without
  // evicting what other kernels left there (the next kernel's inputs, or dirty lines whose
  // write-back would share HBM with this kernel's reads). Where several M blocks read a B tile, the
  // second reads it from L2, and B keeps the normal policy.
  bool b_evict_first = false;
  // The 2-D layouts' M block where M ends, when there are several: its A and A scales arrive
  // through `tma_a_tail` and `tma_sfa_tail`, whose boxes hold a_tail_rows rows (its rows, rounded up
  // to 8), as a_box_rows bounds the boxes of a single block (below). 0: every block loads the full
  // box. Here, in the padding before the first tensor map, so that the producer reads it from a
  // constant-cache line it reads anyway.
  int a_tail_rows = 0;
  CUtensorMap tma_a;    // A   [M, K] fp8, box [BLOCK_M, 128], 128B swizzle (masked: 3-D [G, M_max, K])
  CUtensorMap tma_b;    // B   [N, K] fp8, box [BLOCK_N, 128], 128B swizzle (grouped: 3-D [G, N, K])
  CUtensorMap tma_sfa;  // SFA [⌈K/128⌉, align(M, 4)] f32 (MN-major), box [1, BLOCK_M]
  const float* sfb;     // SFB [⌈N/128⌉, ⌈K/128⌉] f32, any strides
  int64_t sfb_stride_n, sfb_stride_k;
  CUtensorMap tma_d;    // D   [M, N] bf16, box [64, 64], 128B swizzle (masked: 3-D [G, M_max, N])
  int64_t sfb_stride_g = 0;  // SFB group stride (grouped layouts)
  // Rows of the A and SFA TMA boxes: BLOCK_M, or the problem's rows (M, or M_max when masked) rounded
  // up to 8 when there are fewer. Full-height boxes whose rows lie past the tensor (TMA zero-fills
  // them) measured a third slower at M = 1; the smem rows past the box keep stale data that only
  // ever reaches output rows that are not stored.
  int a_box_rows = 0;
  int sfa_rows_per_group = 0;  // masked: SFA TMA rows per group (⌈K/128⌉)

  // Split-K (normal layout, decode-sized M): each tile's K blocks are divided among k_splits CTAs.
  // Each writes its FP32 partial to `split_workspace` and raises its flag in the tile's row of
  // `split_flags` (common/sync.cuh, epoch_flags_arrive: no zeroing before the launch); a unit that
  // finds every flag of its tile raised sums the partials in split order and stores D.
  float* split_workspace = nullptr;           // [tiles · k_splits · BLOCK_M · BLOCK_N]
  unsigned long long* split_flags = nullptr;  // [tiles · k_splits], any contents
  unsigned long long split_epoch = 0;            // nonzero, < 2^56, fresh for every launch
  // Whether the launcher may sum a tile's splits within a cluster (GemmProblem::split_in_cluster,
  // its choice; the workspace is then unused): kAuto where it fits (it may then run fewer splits),
  // kGlobal never (tuning and tests: HOPPERKIT_FP8_GEMM_SPLIT_FIXUP). Host side only.
  enum class SplitFixup : int { kAuto = 0, kGlobal = 1 } split_fixup = SplitFixup::kAuto;
  // With kAuto: the most splits to try within a cluster (the launcher may run fewer, or fall back
  // to k_splits through the workspace; with k_splits = 1, to no split). Host side only.
  int max_cluster_splits = 1;
  CUtensorMap tma_a_tail;    // A of the M block where M ends: box [a_tail_rows, 128] (see a_tail_rows)
  CUtensorMap tma_sfa_tail;  // its A scales: box [a_tail_rows, 1]
};

// Tile configurations compiled into the library (one instantiation file each).
struct Fp8Gemm1d2dConfig {
  int block_m, block_n;
  int cluster_m;  // 2: CTA pairs on adjacent M blocks share B through TMA multicast
  int k_splits = 1;  // > 1: split-K with an in-kernel fixup (see Fp8Gemm1d2dParams)
  // The variant that stages one store box per warpgroup and gives the rest of shared memory to
  // stages (traits.h kStoreBuffers), for grids of at most two waves (heuristics.h).
  bool one_box_staging = false;
  int cluster_n = 1;  // 2: CTA pairs on adjacent N blocks of the one M block share A through TMA multicast
};

void run_fp8_gemm_1d2d(const Fp8Gemm1d2dParams& params, Fp8Gemm1d2dConfig config, int num_sms, bool pdl,
                       cudaStream_t stream);

}  // namespace hopperkit::gemm
