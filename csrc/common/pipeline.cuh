// Shared-memory stage ring between a TMA producer and its consumers.
//
// Each stage has a "full" transaction barrier (the producer arrives once with the expected byte
// count; TMA completes it) and an "empty" barrier (every consumer warp arrives once when it has
// finished reading the stage). Phase convention, written once here: consumers wait on full with
// the ring's phase, starting at 0; the producer waits on empty with the opposite parity, so its
// first pass over the ring does not block: the buffers start empty.
//
// In a cluster whose CTAs multicast into each other's stages, a stage may only be refilled when the
// consumers of every CTA are done with it: each empty barrier then counts the consumer warps of the
// whole cluster, and every consumer warp arrives on the barrier of each CTA (lane i on CTA i).
#pragma once

#include <cutlass/arch/barrier.h>

namespace hopperkit {

template <int kStages>
struct PipelineState {
  int stage = 0;
  uint32_t phase = 0;

  __device__ __forceinline__ void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1;
    }
  }
};

template <int kStages, int kClusterSize = 1>
struct StageBarriers {
  cutlass::arch::ClusterTransactionBarrier full[kStages];
  cutlass::arch::ClusterBarrier empty[kStages];

  // One thread initialises; a CTA-wide (cluster-wide with multicast) barrier must follow before
  // any use. `consumer_warps`: consumer warps of one CTA; `producer_arrivals`: producer threads that
  // arrive on each full barrier (one of them with the TMA byte count).
  __device__ __forceinline__ void init(int consumer_warps, int producer_arrivals = 1) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      full[s].init(producer_arrivals);
      empty[s].init(consumer_warps * kClusterSize);
    }
    cutlass::arch::fence_barrier_init();
  }

  __device__ __forceinline__ void producer_acquire(const PipelineState<kStages>& st, uint32_t tx_bytes) {
    producer_wait_empty(st);
    full[st.stage].arrive_and_expect_tx(tx_bytes);
  }
  // A further producer thread that fills part of the stage with ordinary shared-memory stores: it
  // waits for the stage like the TMA thread, stores, then arrives (release semantics, so the stores
  // are visible to every consumer that has waited on the full barrier).
  __device__ __forceinline__ void producer_wait_empty(const PipelineState<kStages>& st) {
    empty[st.stage].wait(st.phase ^ 1);
  }
  __device__ __forceinline__ void producer_arrive(const PipelineState<kStages>& st) { full[st.stage].arrive(); }
  __device__ __forceinline__ uint64_t* full_barrier(const PipelineState<kStages>& st) {
    return reinterpret_cast<uint64_t*>(&full[st.stage]);
  }
  __device__ __forceinline__ void consumer_wait(const PipelineState<kStages>& st) { full[st.stage].wait(st.phase); }
  // Called by every lane of a consumer warp once the warp is done with the stage.
  __device__ __forceinline__ void consumer_release(const PipelineState<kStages>& st, int lane) {
    if constexpr (kClusterSize == 1) {
      if (lane == 0) empty[st.stage].arrive();
    } else {
      empty[st.stage].arrive(static_cast<uint32_t>(lane), lane < kClusterSize);
    }
  }
};

}  // namespace hopperkit
