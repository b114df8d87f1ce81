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

// One arrival of `count` on a counter in global memory that needs no zeroing before a launch: the
// word holds (epoch << 8) | arrivals, and a word of another epoch (a previous call's, or whatever
// the workspace held) counts as no arrival. Returns true for the last arrival, which leaves the word
// 0, so a CUDA graph that replays the same epoch always finds it clean. The host hands every launch
// a fresh nonzero 56-bit epoch; `count` < 256. Callers fence their own global writes before it.
__device__ __forceinline__ bool epoch_counter_arrive(unsigned long long* word, unsigned long long epoch, int count) {
  unsigned long long seen = *reinterpret_cast<volatile unsigned long long*>(word);
  while (true) {
    const int arrived = (seen >> 8) == epoch ? static_cast<int>(seen & 0xff) : 0;
    const bool last = arrived + 1 == count;
    const unsigned long long next = last ? 0ull : (epoch << 8) | static_cast<unsigned long long>(arrived + 1);
    const unsigned long long prev = atomicCAS(word, seen, next);
    if (prev == seen) return last;
    seen = prev;
  }
}

}  // namespace hopperkit
