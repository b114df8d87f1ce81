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
};

struct GemmProblem {
  int m, n, k;  // m: rows of A and D (M_sum when contiguous, M_max when masked)
  GemmLayout layout = GemmLayout::kNormal;
  const int32_t* m_indices = nullptr;  // contiguous: [M] expert of each row
  const int32_t* masked_m = nullptr;   // masked: [G] valid rows of each group
  int num_groups = 1;
  int sched_rows = 0;  // rows the tile scheduler walks (set by the launcher: m, or G·align(M_max, BLOCK_M))
  int k_splits = 1;    // split-K: K blocks of each tile divided among this many work units
};

// Rows the scheduler walks for a BLOCK_M: the masked layout tiles every group's M_max rows
// separately, so its M blocks never span groups.
inline int scheduled_rows(const GemmProblem& p, int block_m) {
  return p.layout == GemmLayout::kMGroupedMasked ? p.num_groups * ((p.m + block_m - 1) / block_m) * block_m : p.m;
}

}  // namespace hopperkit::gemm
