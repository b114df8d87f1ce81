// Launcher of the FP8 1d2d GEMM for one tile configuration.
#pragma once

#include "common/launch.h"
#include "gemm/fp8_1d2d/kernel.cuh"

namespace hopperkit::gemm {

template <int kBlockM, int kBlockN, int kClusterM>
void launch_fp8_gemm_1d2d(const Fp8Gemm1d2dParams& params, int num_sms, bool pdl, cudaStream_t stream) {
  using T = Fp8Gemm1d2dTraits<kBlockM, kBlockN, kClusterM>;
  const int m_blocks = (params.m + kBlockM - 1) / kBlockM;
  const int tiles = m_blocks * ((params.n + kBlockN - 1) / kBlockN);
  // Pairs must always find a partner tile in the same N block (see TileScheduler).
  HK_CHECK(kClusterM == 1 || m_blocks % kClusterM == 0, "multicast GEMM needs an even number of M blocks");
  int grid = tiles < num_sms ? tiles : num_sms;
  grid -= grid % kClusterM;
  LaunchConfig cfg;
  cfg.cluster_x = kClusterM;
  cfg.grid = dim3(grid);
  cfg.block = dim3(T::kThreads);
  cfg.smem_bytes = T::kSmemBytes;
  cfg.stream = stream;
  cfg.pdl = pdl;
  launch_kernel(fp8_gemm_1d2d_kernel<T>, cfg, params);
}

}  // namespace hopperkit::gemm
