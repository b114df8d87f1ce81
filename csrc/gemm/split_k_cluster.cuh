// Split-K within a thread-block cluster, shared by the GEMM kernels: the k_splits units of an output
// tile are the CTAs of one cluster (one unit per CTA, split = cluster rank), and the last split's CTA
// sums the partials, which the others store into its shared memory. Against the fixup through global
// memory (gemm/split_k.cuh) it saves every step that is an L2 round trip behind a GPU-scope fence
// (a partial's store, the flags, the partials' loads: about a microsecond each on an H200, on the
// critical path of every decode-sized call), so a tile can take more, shorter splits.
//
// Device side: split_k_sum_in_cluster. Host side: splits_in_cluster, the split count a launch can
// run this way.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include <cuda_runtime.h>
#include <cutlass/arch/barrier.h>

#include "common/host_checks.h"
#include "common/sync.cuh"

namespace hopperkit::gemm {

// In the summing CTA's shared memory: `received` counts the bytes the peers' partials bring (their
// st.async stores); in each peer's, `ring_free` says that the summing CTA no longer reads its ring.
struct SplitKClusterBarriers {
  cutlass::arch::ClusterTransactionBarrier received;
  cutlass::arch::ClusterBarrier ring_free;

  // One thread, before the kernel's fence_barrier_init (common/pipeline.cuh StageBarriers::init).
  __device__ __forceinline__ void init() {
    received.init(1);
    ring_free.init(1);
  }
};

// The fixup of one unit whose partial `frag` (kWaves × kWaveFrag values per math thread, kMathThreads
// threads, which are threads 0 .. kMathThreads-1 of the CTA) is complete and whose mainloop is done
// with the stage ring `ring` (the kernel's A/B stages, room for k_splits - 1 partials). Once the last
// split's CTA is done with its ring, it arrives on each peer's `ring_free`; the peers then store their
// partials from registers into its ring (16 bytes per st.async, counted on its `received`) and return
// false; it waits for the bytes, adds them up in split order, its own last (the sequence of additions
// of split_k_publish_and_sum, so both fixups give the same bits), and returns true with the sum in
// `frag`: it stores the tile, and no other CTA does, so any store is allowed.
// Requirements: every CTA of the cluster arrived on the cluster barrier after initialising `bars`
// (cute::cluster_arrive_relaxed), and no thread of it waits for that barrier before this call (it
// waits here); the cluster is co-scheduled, so the waits cannot deadlock. `barrier`: a named barrier
// of the math threads.
// Layout: partial s, vector j (four consecutive fragment values) of thread t sits at
// ((s · kVecs + j) · kMathThreads + t) · 16 bytes into the ring, so a warp's 16-byte accesses are
// contiguous.
template <int kMathThreads, int kWaves, int kWaveFrag, class BarrierId>
__device__ __forceinline__ bool split_k_sum_in_cluster(int k_splits, int split, uint8_t* ring,
                                                       SplitKClusterBarriers& bars, BarrierId barrier,
                                                       float (&frag)[kWaves][kWaveFrag]) {
  static_assert(kWaveFrag % 4 == 0, "a wave's fragment is whole 16-byte vectors");
  constexpr int kVecs = kWaves * kWaveFrag / 4;
  constexpr uint32_t kPartialBytes = kVecs * 16 * kMathThreads;
  const int thread = threadIdx.x;
  const int summer = k_splits - 1;
  cute::cluster_wait();  // every CTA of the cluster has initialised its barriers
  if (split != summer) {
    mbarrier_wait_cluster(&bars.ring_free, 0);
    const uint32_t dst = cluster_shared_address(ring, summer) + (split * kVecs * kMathThreads + thread) * 16;
    const uint32_t received = cluster_shared_address(&bars.received, summer);
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const float* v = &frag[j / (kWaveFrag / 4)][j % (kWaveFrag / 4) * 4];
      st_async_16(dst + j * kMathThreads * 16, make_float4(v[0], v[1], v[2], v[3]), received);
    }
    return false;
  }
  // Every math warp's wgmmas have completed, so nothing reads the ring any more.
  named_barrier_sync(barrier, kMathThreads);
  if (thread == 0) {
    bars.received.arrive_and_expect_tx(static_cast<uint32_t>(summer) * kPartialBytes);
    fence_acq_rel_cluster();  // one fence for all the arrivals (a release arrive fences each)
#pragma unroll 1
    for (int r = 0; r < summer; ++r) mbarrier_arrive_cluster_relaxed(cluster_shared_address(&bars.ring_free, r));
  }
  mbarrier_wait_cluster(&bars.received, 0);
  // Eight vectors (32 values) at a time, each pass one loop over the splits: with a loop over the
  // splits per vector instead, ptxas spilled the FP8 64×64 tile's prologue values. Four at a time
  // where eight do not divide the fragment (the 96-token swapped BF16 tile: 12 vectors).
  constexpr int kChunk = kVecs < 8 ? kVecs : kVecs % 8 == 0 ? 8 : 4;
  static_assert(kVecs % kChunk == 0, "whole chunks of vectors");
#pragma unroll
  for (int c = 0; c < kVecs; c += kChunk) {
    float4 sum[kChunk];
#pragma unroll
    for (int j = 0; j < kChunk; ++j) sum[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 1
    for (int s = 0; s < summer; ++s) {
      const uint8_t* src = ring + ((s * kVecs + c) * kMathThreads + thread) * 16;
#pragma unroll
      for (int j = 0; j < kChunk; ++j) {
        const float4 v = *reinterpret_cast<const float4*>(src + j * kMathThreads * 16);
        sum[j].x += v.x;
        sum[j].y += v.y;
        sum[j].z += v.z;
        sum[j].w += v.w;
      }
    }
#pragma unroll
    for (int j = 0; j < kChunk; ++j) {
      float* own = &frag[(c + j) / (kWaveFrag / 4)][(c + j) % (kWaveFrag / 4) * 4];
      own[0] = sum[j].x + own[0];
      own[1] = sum[j].y + own[1];
      own[2] = sum[j].z + own[2];
      own[3] = sum[j].w + own[3];
    }
  }
  return true;
}

// Clusters of `size` CTAs of `kernel`, whose traits T give its block (kThreads) and dynamic shared
// memory (kSmemBytes), that the device runs at once, cached per kernel, device and size (0 when the
// query fails).
template <class T, class Kernel>
int max_active_clusters(Kernel kernel, int size, int num_sms) {
  constexpr int kMaxDevices = 64, kMaxSize = 8;
  static std::atomic<int> cache[kMaxDevices][kMaxSize + 1];  // value + 1; 0: not yet asked
  int device = 0;
  HK_CUDA_CHECK(cudaGetDevice(&device));
  if (device < kMaxDevices && size <= kMaxSize) {
    if (const int v = cache[device][size].load(std::memory_order_relaxed)) return v - 1;
  }
  HK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes));
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
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess) {
    (void)cudaGetLastError();  // an unsupported query leaves the global fixup; clear its error
    clusters = 0;
  }
  if (device < kMaxDevices && size <= kMaxSize) cache[device][size].store(clusters + 1, std::memory_order_relaxed);
  return clusters;
}

// The split count with which `tiles` output tiles of `num_k_blocks` K blocks can sum within clusters:
// the most splits, up to the caller's `max_splits`, for which every tile's units form one cluster that
// the device runs alongside all the others (the fixup waits within a cluster only; a cluster that
// has to wait for a free GPC would double the call), whose peers' partials fit in the summing CTA's
// stage ring (T::kRingPartials), within the portable cluster size of 8, and which leaves no split
// without a K block. 0: none (the caller's fixup through global memory runs instead).
template <class T, class Kernel>
int splits_in_cluster(Kernel kernel, long tiles, int num_k_blocks, int max_splits, int num_sms) {
  for (int s = std::min({max_splits, 8, T::kRingPartials + 1}); s >= 2; --s) {
    const int per_split = (num_k_blocks + s - 1) / s;
    if ((s - 1) * per_split >= num_k_blocks) continue;
    if (tiles * s <= num_sms && tiles <= max_active_clusters<T>(kernel, s, num_sms)) return s;
  }
  return 0;
}

}  // namespace hopperkit::gemm
