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
  // memory, written by the group-maps kernel before the launch), and its K blocks [kb_prefix[g],
  // kb_prefix[g + 1]) of the scales' concatenated K-block axis.
  const CUtensorMap* group_maps = nullptr;
  const int32_t* kb_prefix = nullptr;  // [G + 1]
};

// Input of the k-grouped GEMM's group-maps kernel (group_maps.cu), which derives the per-group tables
// of Fp8Gemm1d1dParams from the group sizes on the device, so that a CUDA graph replays with whatever
// sizes the device holds. A group of K_g ∉ {multiples of 128 ≥ 0} counts as empty, and every group's
// K range is clamped to the first `sum_k` columns, the extent of the buffers: a wrong size gives
// wrong groups, never an access outside A or B.
struct KGroupedMapsParams {
  CUtensorMap a_template;  // a K-major map of the A buffer with the GEMM's box and swizzle (any K)
  CUtensorMap b_template;  // the same for B
  const int32_t* ks;       // [G] K of each group (device)
  const uint8_t* a;        // flat A: group g's [M, K_g] block starts M·ΣK_<g bytes in
  const uint8_t* b;        // flat B: [N, K_g] blocks
  int64_t m, n;
  int64_t sum_k;           // columns the buffers hold (Σ of the sizes the host checked)
  int groups;
  CUtensorMap* maps;       // [2G] out: A_g, B_g maps (left unwritten for empty groups)
  int32_t* kb_prefix;      // [G + 1] out: first K block of each group in the scales' K-block axis
};

void run_k_grouped_maps(const KGroupedMapsParams& params, cudaStream_t stream);

// Tile configurations compiled into the library (one instantiation file each).
struct Fp8Gemm1d1dConfig {
  int block_m, block_n;
};

// 64-row tiles when one problem has at most 64 rows (half of a 128-row tile would be padding), else
// 128 × 160, which was faster than 128 × 128 on every shape measured, also where 160 columns pad N
// more (the forced-tile measurements, and the variants not kept: README.md "Configurations" and
// "Performance and what is not done").
inline Fp8Gemm1d1dConfig choose_fp8_1d1d_config(int m) {
  if (m <= 64) return {64, 128};
  return {128, 160};
}

// Whether `config` has an instantiation (a tile forced by the tuning knob may not).
bool fp8_1d1d_compiled(Fp8Gemm1d1dConfig config);

void run_fp8_gemm_1d1d(const Fp8Gemm1d1dParams& params, Fp8Gemm1d1dConfig config, int num_sms, bool pdl,
                       cudaStream_t stream);

}  // namespace hopperkit::gemm
