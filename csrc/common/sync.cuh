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

// Shared memory of the other CTAs of a cluster (distributed shared memory), and the mbarriers that
// signal across them. Addresses in the cluster window are 32-bit (`shared::cluster`).

// The address of `ptr` (this CTA's shared memory) in the cluster window, at CTA `rank`'s copy.
__device__ __forceinline__ uint32_t cluster_shared_address(const void* ptr, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(remote)
               : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(ptr))), "r"(rank));
  return remote;
}

// One arrival on an mbarrier of another CTA of the cluster, without ordering (a release arrive
// fences on each call): precede a group of them with fence_acq_rel_cluster().
__device__ __forceinline__ void mbarrier_arrive_cluster_relaxed(uint32_t remote_barrier) {
  asm volatile("mbarrier.arrive.relaxed.cluster.shared::cluster.b64 _, [%0];" ::"r"(remote_barrier) : "memory");
}

__device__ __forceinline__ void fence_acq_rel_cluster() { asm volatile("fence.acq_rel.cluster;" ::: "memory"); }

// 16 bytes into another CTA's shared memory, counted (as 16 transaction bytes) on that CTA's
// mbarrier `remote_barrier`: the receiver learns that the data is there by waiting on it.
__device__ __forceinline__ void st_async_16(uint32_t remote_address, float4 v, uint32_t remote_barrier) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(
                   remote_address),
               "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(remote_barrier)
               : "memory");
}

// Waits for phase `phase` of a local mbarrier that other CTAs of the cluster arrive on or store to,
// acquiring at cluster scope.
__device__ __forceinline__ void mbarrier_wait_cluster(const void* barrier, uint32_t phase) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(barrier));
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "HK_MBAR_WAIT_CLUSTER:\n"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra HK_MBAR_WAIT_CLUSTER;\n"
      "}" ::"r"(addr),
      "r"(phase)
      : "memory");
}

// One arrival of `count` at a rendezvous in global memory that needs no zeroing before a launch:
// arrival `index` stores `epoch` into its own flag `flags[index]`, then reads all `count` flags, and
// returns true when every one holds `epoch`. Flags of another epoch (an earlier call's, or whatever
// the workspace held) count as no arrival. The fence between the store and the loads is
// sequentially consistent (membar.gl = fence.sc.gpu), so of arrivals that race, the last to store
// sees every flag: at least one arrival returns true, and more than one may (each must then do the
// same, idempotent, work). A true return clears the flags, so a CUDA graph that replays one epoch
// finds them clean; the clear cannot hide a flag from an arrival still checking, because every
// arrival has stored by then. The host hands every launch a fresh nonzero epoch. Callers fence
// their own global writes before it, and after it before reading what the others wrote.
// PERF (H200): against one counter word updated by compare-and-swap, whose racing arrivals retry
// one L2 round trip each, see gemm/fp8_1d2d/PERF.md "Split-K".
__device__ __forceinline__ bool epoch_flags_arrive(unsigned long long* flags, int index, int count,
                                                   unsigned long long epoch) {
  volatile unsigned long long* f = flags;
  f[index] = epoch;
  __threadfence();
  bool all = true;
  // ptxas unrolls this loop and issues its loads back to back. A hand-unrolled batch of loads moved
  // the FP8 GEMM mainloop's wgmma descriptors off the uniform datapath (an R2UR before every wgmma
  // in the SASS; gemm/fp8_1d2d/PERF.md "Split-K").
  for (int i = 0; i < count; ++i) all &= f[i] == epoch;
  if (all) {
    for (int i = 0; i < count; ++i) f[i] = 0;
  }
  return all;
}

}  // namespace hopperkit
