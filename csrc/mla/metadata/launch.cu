#include "common/launch.h"
#include "mla/metadata/kernel.cuh"

namespace hopperkit::mla {

size_t metadata_smem_bytes(int batch_size) { return 2 * sizeof(int32_t) * static_cast<size_t>(batch_size); }

void run_mla_metadata(const MetadataParams& params, cudaStream_t stream) {
  LaunchConfig cfg;
  cfg.grid = dim3(1);
  cfg.block = dim3(kWarpSize);
  cfg.smem_bytes = metadata_smem_bytes(params.batch_size);
  cfg.stream = stream;
  // Not PDL: the lengths are usually written by the kernel right before this one.
  cfg.pdl = false;
  launch_kernel(mla_metadata_kernel, cfg, params);
}

}  // namespace hopperkit::mla
