// Kernel launch with optional programmatic dependent launch (PDL), checked.
#pragma once

#include <cuda_runtime.h>

#include "common/host_checks.h"

namespace hopperkit {

struct LaunchConfig {
  dim3 grid;
  dim3 block;
  size_t smem_bytes = 0;
  cudaStream_t stream = nullptr;
  // With PDL the kernel may begin while its predecessor in the stream drains; the kernel must call
  // pdl_wait_for_prerequisites() before touching the predecessor's outputs.
  bool pdl = false;
  // CTAs per cluster along x (thread-block clusters share shared memory and TMA multicasts).
  int cluster_x = 1;
};

// A persistent kernel's launch: one CTA per SM, no more CTAs than work units, the grid a whole
// number of clusters; block size and dynamic shared memory from the kernel's traits T (kThreads,
// kSmemBytes). Returns a config with an empty grid when there is no work.
// `fewest_ctas`: the fewest CTAs (whole clusters) that take the units in as many rounds as one CTA
// per SM does, for kernels that hand out units in static round robin and know their unit count
// (896 units run 7 rounds on 132 SMs or on 128). Where the card runs at its power limit, the SMs
// that would only have idled through the last round draw nothing, and the others clock higher.
template <class T>
LaunchConfig persistent_launch_config(long units, int num_sms, int cluster_x, bool pdl, cudaStream_t stream,
                                      bool fewest_ctas = false) {
  LaunchConfig cfg;
  long grid = units < num_sms ? units : num_sms;
  grid -= grid % cluster_x;
  // A cluster needs all its CTAs at once: with fewer SMs allowed than that (set_num_sms(1) and a
  // pair cluster), one cluster runs rather than none. Every launch with clusters has at least one
  // cluster's worth of units.
  if (units > 0 && grid < cluster_x) grid = cluster_x;
  if (fewest_ctas && grid > 0) {
    const long rounds = (units + grid - 1) / grid;
    long fewest = (units + rounds - 1) / rounds;
    fewest += (cluster_x - fewest % cluster_x) % cluster_x;
    if (fewest < grid) grid = fewest;
  }
  cfg.grid = dim3(static_cast<unsigned>(grid));
  cfg.block = dim3(T::kThreads);
  cfg.smem_bytes = T::kSmemBytes;
  cfg.stream = stream;
  cfg.pdl = pdl;
  cfg.cluster_x = cluster_x;
  return cfg;
}

template <typename... KernelArgs, typename... Args>
void launch_kernel(void (*kernel)(KernelArgs...), const LaunchConfig& cfg, Args&&... args) {
  if (cfg.smem_bytes > 48 * 1024) {
    HK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(cfg.smem_bytes)));
  }
  cudaLaunchAttribute attrs[2];
  unsigned num_attrs = 0;
  if (cfg.pdl) {
    attrs[num_attrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[num_attrs++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cfg.cluster_x > 1) {
    attrs[num_attrs].id = cudaLaunchAttributeClusterDimension;
    attrs[num_attrs++].val.clusterDim = {static_cast<unsigned>(cfg.cluster_x), 1, 1};
  }
  cudaLaunchConfig_t launch{};
  launch.gridDim = cfg.grid;
  launch.blockDim = cfg.block;
  launch.dynamicSmemBytes = cfg.smem_bytes;
  launch.stream = cfg.stream;
  launch.attrs = attrs;
  launch.numAttrs = num_attrs;
  HK_CUDA_CHECK(cudaLaunchKernelEx(&launch, kernel, std::forward<Args>(args)...));
}

}  // namespace hopperkit
