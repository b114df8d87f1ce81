// Launcher of the dense decode kernel; instantiated once per element type in instantiations/.
#pragma once

#include "common/launch.h"
#include "mla/dense_decode/kernel.cuh"

namespace hopperkit::mla {

template <typename Elem>
void run_mla_dense_decode(const DenseDecodeParams& params, const CUtensorMap& kv_map, int num_sm_parts,
                          cudaStream_t stream) {
  using T = DenseDecodeTraits<Elem>;
  LaunchConfig cfg;
  cfg.grid = dim3((params.rows_per_kv + T::kBlockM - 1) / T::kBlockM, params.num_heads_k, num_sm_parts);
  cfg.block = dim3(T::kThreads);
  cfg.smem_bytes = T::kSmemBytes;
  cfg.stream = stream;
  launch_kernel(mla_dense_decode_kernel<T>, cfg, params, kv_map);
}

}  // namespace hopperkit::mla
