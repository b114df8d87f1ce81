// Host/device interface of the FP8 1d2d GEMM: D (bf16) = A·Bᵀ with 1×128 A scales and 128×128 B scales.
#pragma once

#include <cstdint>

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace hopperkit::gemm {

// How the rows of A and D map onto problems (DeepGEMM's GEMM types).
enum class GemmLayout : int32_t {
  kNormal = 0,
  // MoE prefill: A [M_sum, K] holds every expert's rows back to back, m_indices[row] names the
  // expert (-1: padding row, D row written as 0); segments start on multiples of 128 rows, so an
  // M block never mixes experts. B [G·N, K], SFB [G, ⌈N/128⌉, ⌈K/128⌉].
  kMGroupedContiguous = 1,
  // MoE decode under CUDA graphs: A [G·M_max, K], D [G·M_max, N]; group g's valid rows are
  // [0, masked_m[g]) (read on the device); its other rows of D are written as 0.
  kMGroupedMasked = 2,
};

struct Fp8Gemm1d2dParams {
  CUtensorMap tma_a;    // A   [M, K] fp8, box [BLOCK_M, 128], 128B swizzle (masked: 3-D [G, M_max, K])
  CUtensorMap tma_b;    // B   [N, K] fp8, box [BLOCK_N, 128], 128B swizzle (grouped: 3-D [G, N, K])
  CUtensorMap tma_sfa;  // SFA [⌈K/128⌉, align(M, 4)] f32 (MN-major), box [1, BLOCK_M]
  const float* sfb;     // SFB [⌈N/128⌉, ⌈K/128⌉] f32, any strides
  int64_t sfb_stride_n, sfb_stride_k;
  __nv_bfloat16* d;  // D [M, N] bf16, row stride ldd (masked: [G, M_max, N], group stride ldd_group)
  int64_t ldd;
  int64_t ldd_group = 0;
  int m, n, k;  // m: rows of A and D (M_sum when contiguous, M_max when masked)

  GemmLayout layout = GemmLayout::kNormal;
  const int32_t* m_indices = nullptr;  // contiguous: [M] expert of each row
  const int32_t* masked_m = nullptr;   // masked: [G] valid rows of each group
  int num_groups = 1;
  int64_t sfb_stride_g = 0;  // SFB group stride (grouped layouts)
  int sfa_rows_per_group = 0;  // masked: SFA TMA rows per group (⌈K/128⌉)
  int sched_rows = 0;  // rows the tile scheduler walks (set by the launcher: m, or G·align(M_max, BLOCK_M))

  // Split-K (normal layout, decode-sized M): each tile's K blocks are divided among k_splits CTAs.
  // Each writes its FP32 partial to `split_workspace`; the last to finish a tile (counted in
  // `split_counters`, which it resets to 0) sums the partials in split order and stores D.
  int k_splits = 1;
  float* split_workspace = nullptr;  // [tiles · k_splits · BLOCK_M · BLOCK_N]
  int* split_counters = nullptr;     // [tiles], zero between calls
};

// Tile configurations compiled into the library (one instantiation file each).
struct Fp8Gemm1d2dConfig {
  int block_m, block_n;
  int cluster_m;  // 2: CTA pairs on adjacent M blocks share B through TMA multicast
  int k_splits = 1;  // > 1: split-K with an in-kernel fixup (see Fp8Gemm1d2dParams)
};

void run_fp8_gemm_1d2d(const Fp8Gemm1d2dParams& params, Fp8Gemm1d2dConfig config, int num_sms, bool pdl,
                       cudaStream_t stream);

}  // namespace hopperkit::gemm
