// Host/device interface of the FP8 1d2d GEMM: D (bf16) = A·Bᵀ with 1×128 A scales and 128×128 B scales.
#pragma once

#include <cstdint>

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace hopperkit::gemm {

struct Fp8Gemm1d2dParams {
  CUtensorMap tma_a;    // A   [M, K] fp8, box [BLOCK_M, 128], 128B swizzle
  CUtensorMap tma_b;    // B   [N, K] fp8, box [BLOCK_N, 128], 128B swizzle
  CUtensorMap tma_sfa;  // SFA [⌈K/128⌉, align(M, 4)] f32 (MN-major), box [1, BLOCK_M]
  const float* sfb;     // SFB [⌈N/128⌉, ⌈K/128⌉] f32, any strides
  int64_t sfb_stride_n, sfb_stride_k;
  __nv_bfloat16* d;  // D [M, N] bf16, row stride ldd
  int64_t ldd;
  int m, n, k;
};

// Tile configurations compiled into the library (one instantiation file each).
struct Fp8Gemm1d2dConfig {
  int block_m, block_n;
  int cluster_m;  // 2: CTA pairs on adjacent M blocks share B through TMA multicast
};

void run_fp8_gemm_1d2d(const Fp8Gemm1d2dParams& params, Fp8Gemm1d2dConfig config, int num_sms, bool pdl,
                       cudaStream_t stream);

}  // namespace hopperkit::gemm
