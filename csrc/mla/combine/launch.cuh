// Launcher of the combine kernel; instantiated once per output dtype in instantiations/.
#pragma once

#include "common/launch.h"
#include "mla/combine/kernel.cuh"

namespace hopperkit::mla {

template <typename OutT>
void run_mla_combine(const CombineParams<OutT>& params, cudaStream_t stream) {
  const int64_t rows_per_request = static_cast<int64_t>(params.num_heads_k) * params.s_q * params.heads_per_kv;
  // PERF (H200): one request × 128 heads × 66 splits: 41 µs with 1 warp per row, 16 µs with 4;
  // 128 requests × 128 heads: 20 µs with 1, 35 µs with 4 (4 repeats the LSE prologue per row and
  // keeps fewer bytes in flight per warp). Few rows: spread each row over 4 warps.
  const bool small = params.batch_size * rows_per_request < 2048;
  const int warps_per_row = small ? 4 : 1;
  LaunchConfig cfg;
  // Requests on x (no 65535 limit), the warps of a request on y.
  cfg.grid = dim3(params.batch_size, static_cast<unsigned>((rows_per_request * warps_per_row + kCombineWarps - 1) / kCombineWarps));
  cfg.block = dim3(kCombineWarps * kWarpSize);
  cfg.stream = stream;
  cfg.pdl = params.pdl;
  if (small) {
    launch_kernel(mla_combine_kernel<OutT, 4>, cfg, params);
  } else {
    launch_kernel(mla_combine_kernel<OutT, 1>, cfg, params);
  }
}

}  // namespace hopperkit::mla
