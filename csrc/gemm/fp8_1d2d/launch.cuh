// Launcher of the FP8 1d2d GEMM for one tile configuration.
#pragma once

#include "common/launch.h"
#include "gemm/fp8_1d2d/kernel.cuh"

namespace hopperkit::gemm {

template <int kBlockM, int kBlockN>
void launch_fp8_gemm_1d2d(const Fp8Gemm1d2dParams& params, int num_sms, bool pdl, cudaStream_t stream) {
  using T = Fp8Gemm1d2dTraits<kBlockM, kBlockN>;
  const int tiles = ((params.m + kBlockM - 1) / kBlockM) * ((params.n + kBlockN - 1) / kBlockN);
  LaunchConfig cfg;
  cfg.grid = dim3(tiles < num_sms ? tiles : num_sms);
  cfg.block = dim3(T::kThreads);
  cfg.smem_bytes = T::kSmemBytes;
  cfg.stream = stream;
  cfg.pdl = pdl;
  launch_kernel(fp8_gemm_1d2d_kernel<T>, cfg, params);
}

}  // namespace hopperkit::gemm
