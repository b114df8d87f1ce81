// What every GEMM kernel's parameters share: the problem's shape and how its rows map onto
// problems (DeepGEMM's GEMM types). The tile scheduler (scheduler.cuh) reads only this part, so the
// FP8 and BF16 kernels walk tiles the same way.
#pragma once

#include <cstdint>

namespace hopperkit::gemm {

// How the rows of A and D map onto problems.
enum class GemmLayout : int32_t {
  kNormal = 0,
  // MoE prefill: A [M_sum, K] holds every expert's rows back to back, m_indices[row] names the
  // expert (-1: padding row, D row written as 0); segments start on multiples of 128 rows, so an
  // M block never mixes experts. B [G, N, K].
  kMGroupedContiguous = 1,
  // MoE decode under CUDA graphs: A [G, M_max, K], D [G, M_max, N]; group g's valid rows are
  // [0, masked_m[g]) (read on the device); its other rows of D are written as 0.
  kMGroupedMasked = 2,
  // MoE weight gradient: D [G, M, N] (one problem per group, each with its own K); A and B hold
  // every group's K range back to back (FP8: K-major [M, K_g] / [N, K_g] blocks of flat buffers;
  // BF16: rows [ΣK_<g, ΣK_≤g) of MN-major [ΣK, M] / [ΣK, N]). M blocks never span groups.
  kKGroupedContiguous = 3,
};

struct GemmProblem {
  int m, n, k;  // m: rows of A and D (M_sum when contiguous, M_max when masked, M per group when k-grouped)
  GemmLayout layout = GemmLayout::kNormal;
  const int32_t* m_indices = nullptr;  // contiguous: [M] expert of each row
  const int32_t* masked_m = nullptr;   // masked: [G] valid rows of each group
  int num_groups = 1;
  int sched_rows = 0;  // rows the tile scheduler walks (set by the launcher: m, or G·align(M_max, BLOCK_M))
  int k_splits = 1;    // split-K: K blocks of each tile divided among this many work units
  // Split-K: 1 when the k_splits units of a tile form one thread-block cluster and sum through its
  // shared memory (set by the FP8 1d2d launcher, gemm/fp8_1d2d/README.md "Split-K"). Here, in the
  // struct's padding, it shares the constant-cache line of the fields every kernel reads first:
  // the FP8 kernel reads it at entry.
  int split_in_cluster = 0;
  // Raster bands of the tile scheduler, in M blocks (gemm/scheduler.cuh; the FP8 1d2d launcher
  // sets it per tile and K, gemm/heuristics.h fp8_1d2d_raster_band).
  int band_m = 16;
};

// Rows the scheduler walks for a BLOCK_M: the masked and k-grouped layouts tile every group's M
// rows separately, so their M blocks never span groups.
inline int scheduled_rows(const GemmProblem& p, int block_m) {
  const bool per_group = p.layout == GemmLayout::kMGroupedMasked || p.layout == GemmLayout::kKGroupedContiguous;
  return per_group ? p.num_groups * ((p.m + block_m - 1) / block_m) * block_m : p.m;
}

}  // namespace hopperkit::gemm
