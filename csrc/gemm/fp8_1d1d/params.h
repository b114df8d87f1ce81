// Host/device interface of the FP8 1d1d GEMM: D (f32) [+]= A·Bᵀ with 1×128 scales on A and B, dense
// (`fp8_gemm_nt` with recipe (1, 1, 128)) or k-grouped (`k_grouped_fp8_gemm_nt_contiguous`).
#pragma once

#include <cstdint>

#include <cuda.h>
#include <cuda_runtime.h>

#include "gemm/problem.h"

namespace hopperkit::gemm {

struct Fp8Gemm1d1dParams : GemmProblem {
  // Normal layout only (k-grouped: per-group maps in `group_maps`).
  CUtensorMap tma_a;    // A [M, K] fp8, box [BLOCK_M, 128], 128B swizzle
  CUtensorMap tma_b;    // B [N, K] fp8, box [BLOCK_N, 128], 128B swizzle
  CUtensorMap tma_sfa;  // SFA [KB, align(M, 4)] f32 (MN-major), box [1, BLOCK_M]; k-grouped: KB = Σ K_g/128
  CUtensorMap tma_sfb;  // SFB [KB, align(N, 4)] f32 (MN-major), box [1, BLOCK_N]
  CUtensorMap tma_d;    // D [G, M, N] f32 (G = 1 unless k-grouped), box [1, 64, 32], 128B swizzle
  // true: D already holds C, the tile is added to it (TMA reduce-add); false: D = A·Bᵀ (TMA store).
  bool accumulate = true;
  // K-grouped: group g's A_g [M, K_g] and B_g [N, K_g] maps at group_maps[2g], [2g + 1] (global
  // memory, written by the host before the launch), and its K blocks [kb_prefix[g], kb_prefix[g + 1])
  // of the scales' concatenated K-block axis.
  const CUtensorMap* group_maps = nullptr;
  const int32_t* kb_prefix = nullptr;  // [G + 1]
};

// Tile configurations compiled into the library (one instantiation file each).
struct Fp8Gemm1d1dConfig {
  int block_m, block_n;
};

// 64-row tiles when one problem has at most 64 rows (half of a 128-row tile would be padding),
// else 128 × 128. PERF: unmeasured first choice; DeepGEMM's wgrad heuristic also tries odd BLOCK_N.
inline Fp8Gemm1d1dConfig choose_fp8_1d1d_config(int m) { return {m <= 64 ? 64 : 128, 128}; }

void run_fp8_gemm_1d1d(const Fp8Gemm1d1dParams& params, Fp8Gemm1d1dConfig config, int num_sms, bool pdl,
                       cudaStream_t stream);

}  // namespace hopperkit::gemm
