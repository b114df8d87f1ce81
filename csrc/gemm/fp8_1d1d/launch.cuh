// Launcher of the FP8 1d1d GEMM for one tile configuration.
#pragma once

#include "common/launch.h"
#include "gemm/fp8_1d1d/kernel.cuh"

namespace hopperkit::gemm {

template <int kBlockM, int kBlockN>
void launch_fp8_gemm_1d1d(const Fp8Gemm1d1dParams& params_in, int num_sms, bool pdl, cudaStream_t stream) {
  using T = Fp8Gemm1d1dTraits<kBlockM, kBlockN>;
  Fp8Gemm1d1dParams params = params_in;
  params.sched_rows = scheduled_rows(params, kBlockM);
  HK_CHECK(params.k_splits == 1, "the 1d1d GEMM has no split-K");
  HK_CHECK(params.layout == GemmLayout::kNormal ||
               (params.layout == GemmLayout::kKGroupedContiguous && params.group_maps != nullptr &&
                params.kb_prefix != nullptr),
           "the 1d1d GEMM runs the normal or the k-grouped layout (with its group maps and K-block prefix)");
  const long tiles = static_cast<long>((params.sched_rows + kBlockM - 1) / kBlockM) * ((params.n + kBlockN - 1) / kBlockN);
  HK_CHECK(tiles < INT32_MAX, "too many tiles for the scheduler: ", tiles);
  if (tiles == 0) return;
  launch_kernel(fp8_gemm_1d1d_kernel<T>, persistent_launch_config<T>(tiles, num_sms, /*cluster_x=*/1, pdl, stream), params);
}

}  // namespace hopperkit::gemm
