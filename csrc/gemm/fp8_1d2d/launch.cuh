// Launcher of the FP8 1d2d GEMM for one tile configuration.
#pragma once

#include <algorithm>
#include <atomic>

#include "common/launch.h"
#include "gemm/fp8_1d2d/kernel.cuh"

namespace hopperkit::gemm {

// Clusters of `size` CTAs of this kernel that the device runs at once (cached per device; 0 when
// the query fails).
template <class T>
int max_active_clusters(int size, int num_sms) {
  constexpr int kMaxDevices = 64, kMaxSize = 8;
  static std::atomic<int> cache[kMaxDevices][kMaxSize + 1];  // value + 1; 0: not yet asked
  int device = 0;
  HK_CUDA_CHECK(cudaGetDevice(&device));
  if (device < kMaxDevices && size <= kMaxSize) {
    if (const int v = cache[device][size].load(std::memory_order_relaxed)) return v - 1;
  }
  HK_CUDA_CHECK(cudaFuncSetAttribute(fp8_gemm_1d2d_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     T::kSmemBytes));
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim = {static_cast<unsigned>(size), 1, 1};
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(num_sms - num_sms % size));
  cfg.blockDim = dim3(T::kThreads);
  cfg.dynamicSmemBytes = T::kSmemBytes;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, fp8_gemm_1d2d_kernel<T>, &cfg) != cudaSuccess) {
    (void)cudaGetLastError();  // an unsupported query leaves the global fixup; clear its error
    clusters = 0;
  }
  if (device < kMaxDevices && size <= kMaxSize) cache[device][size].store(clusters + 1, std::memory_order_relaxed);
  return clusters;
}

// Split-K within a cluster (GemmProblem::split_in_cluster): the most splits, up to the caller's
// max_cluster_splits, for which every tile's units form one cluster that the device runs alongside all
// the others (the fixup waits within a cluster only; a cluster that has to wait for a free GPC would
// double the call), whose peers' partials fit in the summing CTA's stage ring, and within the
// portable cluster size of 8. 0: none; the global fixup runs the caller's count. The summing pass
// costs little, so the split count a tile gets this way is worth more than a higher one through
// global memory (README.md "Split-K").
template <class T>
int splits_in_cluster(long tiles, int k_splits, int num_sms) {
  if constexpr (!T::kSplitInCluster) {
    return 0;
  } else {
    for (int s = std::min({k_splits, 8, T::kRingPartials + 1}); s >= 2; --s) {
      if (tiles * s <= num_sms && tiles <= max_active_clusters<T>(s, num_sms)) return s;
    }
    return 0;
  }
}

template <int kBlockM, int kBlockN, int kClusterM, bool kOneBoxStaging, bool kMasked = false>
void launch_fp8_gemm_1d2d(const Fp8Gemm1d2dParams& params_in, int num_sms, bool pdl, cudaStream_t stream) {
  using T = Fp8Gemm1d2dTraits<kBlockM, kBlockN, kClusterM, kOneBoxStaging, kMasked>;
  Fp8Gemm1d2dParams params = params_in;
  params.sched_rows = scheduled_rows(params, kBlockM);
  const int m_blocks = (params.sched_rows + kBlockM - 1) / kBlockM;
  long tiles = static_cast<long>(m_blocks) * ((params.n + kBlockN - 1) / kBlockN) * params.k_splits;  // work units
  // Pairs must always find a partner tile in the same N block (see TileScheduler), and multicast
  // is only valid between tiles of one B matrix.
  HK_CHECK(kClusterM == 1 || m_blocks % kClusterM == 0, "multicast GEMM needs an even number of M blocks");
  HK_CHECK(kClusterM == 1 || params.layout == GemmLayout::kNormal, "multicast GEMM is for the normal layout only");
  HK_CHECK((params.layout == GemmLayout::kMGroupedMasked) == kMasked && (!kMasked || params.k_splits == 1),
           "the masked layout runs its own instantiations (without split-K), and only it");
  // A contiguous-layout tile must not mix experts, whose segments are aligned to 128 rows only (a
  // masked tile stays within its group: the scheduler walks each group's rows separately).
  HK_CHECK(kBlockM <= 128 || params.layout != GemmLayout::kMGroupedContiguous,
           "256-row tiles are not for the contiguous layout");
  HK_CHECK(params.k_splits == 1 || (kClusterM == 1 && params.layout == GemmLayout::kNormal &&
                                    params.split_workspace != nullptr && params.split_flags != nullptr &&
                                    params.split_epoch != 0 && params.split_epoch < (1ull << 56) && params.k_splits < 256),
           "split-K needs the normal layout, no cluster, a workspace, an epoch and fewer than 256 splits");
  HK_CHECK(params.a_box_rows >= 8 && params.a_box_rows <= kBlockM && params.a_box_rows % 8 == 0,
           "A box rows must be a multiple of 8 in [8, BLOCK_M], got ", params.a_box_rows);
  HK_CHECK(tiles < INT32_MAX, "too many work units for the scheduler: ", tiles);
  if (tiles == 0) return;
  int cluster = kClusterM;
  params.split_in_cluster = 0;
  if (params.max_cluster_splits > 1 && params.split_fixup == Fp8Gemm1d2dParams::SplitFixup::kAuto) {
    const long output_tiles = tiles / params.k_splits;
    if (const int s = splits_in_cluster<T>(output_tiles, params.max_cluster_splits, num_sms)) {
      // One unit per CTA, a tile's splits (consecutive units) one cluster, split = cluster rank.
      params.k_splits = s;
      params.split_in_cluster = 1;
      cluster = s;
      tiles = output_tiles * s;
    }
  }
  launch_kernel(fp8_gemm_1d2d_kernel<T>, persistent_launch_config<T>(tiles, num_sms, cluster, pdl, stream), params);
}

}  // namespace hopperkit::gemm
