// Launcher of the combine kernel; instantiated once per output dtype in instantiations/.
#pragma once

#include "common/launch.h"
#include "mla/combine/kernel.cuh"

namespace hopperkit::mla {

template <typename OutT>
void run_mla_combine(const CombineParams<OutT>& params, cudaStream_t stream) {
  const int rows_per_request = params.num_heads_k * params.s_q * params.heads_per_kv;
  LaunchConfig cfg;
  // Requests on x (no 65535 limit), rows of a request on y.
  cfg.grid = dim3(params.batch_size, (rows_per_request + kCombineWarps - 1) / kCombineWarps);
  cfg.block = dim3(kCombineWarps * kWarpSize);
  cfg.stream = stream;
  cfg.pdl = params.pdl;
  launch_kernel(mla_combine_kernel<OutT>, cfg, params);
}

}  // namespace hopperkit::mla
