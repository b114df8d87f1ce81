// Intra-CTA synchronisation beyond __syncthreads: named barriers between warpgroups and the fence
// that orders ordinary shared-memory stores before asynchronous-proxy reads (wgmma, TMA stores).
#pragma once

#include <cstdint>

#include <cute/arch/cluster_sm90.hpp>

namespace hopperkit {

// Named hardware barriers (ids 1..15; 0 is __syncthreads). Kernels name their barriers in an
// `enum class` whose values are these ids. `threads` counts every thread that arrives or syncs on
// the barrier in one round and must be a multiple of 32.
template <class Id>
__device__ __forceinline__ void named_barrier_sync(Id id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(static_cast<int>(id)), "r"(threads) : "memory");
}

// Signals without waiting: the producer half of a producer/consumer pair of warpgroups. Shared
// memory written before the arrive is visible to the threads that sync on the same barrier.
template <class Id>
__device__ __forceinline__ void named_barrier_arrive(Id id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(static_cast<int>(id)), "r"(threads) : "memory");
}

// wgmma and TMA read shared memory through the async proxy; stores made with st.shared (or
// cp.async) are generic-proxy writes. The writing thread must fence before the barrier that
// publishes them, or the wgmma may read stale data.
__device__ __forceinline__ void fence_shared_for_async_proxy() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// 16-byte global→shared copy that bypasses L1; with `valid` false it writes 16 zero bytes and reads
// nothing (the source address is not dereferenced).
__device__ __forceinline__ void cp_async_16_zfill(uint32_t smem_addr, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr), "l"(gmem), "r"(valid ? 16 : 0)
               : "memory");
}

// A barrier across the CTAs of a cluster (a CTA barrier when the cluster is one CTA). With TMA
// multicast, a CTA's peer writes into its shared memory and arrives on its mbarriers: the barriers
// must be initialised on both before either starts, and neither may exit while the other can still
// multicast to it.
template <int kClusterSize>
__device__ __forceinline__ void cluster_sync() {
  if constexpr (kClusterSize > 1) {
    cute::cluster_arrive_relaxed();
    cute::cluster_wait();
  } else {
    __syncthreads();
  }
}

__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

}  // namespace hopperkit
