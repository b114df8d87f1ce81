// Shared-memory stage ring between a TMA producer and its consumers.
//
// Each stage has a "full" transaction barrier (the producer arrives once with the expected byte
// count; TMA completes it) and an "empty" barrier (every consumer warp arrives once when it has
// finished reading the stage). Phase convention, written once here: consumers wait on full with
// the ring's phase, starting at 0; the producer waits on empty with the opposite parity, so its
// first pass over the ring does not block: the buffers start empty.
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

template <int kStages>
struct StageBarriers {
  cutlass::arch::ClusterTransactionBarrier full[kStages];
  cutlass::arch::ClusterBarrier empty[kStages];

  // One thread initialises; a CTA-wide barrier must follow before any use.
  __device__ __forceinline__ void init(int consumer_arrivals) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      full[s].init(1);
      empty[s].init(consumer_arrivals);
    }
    cutlass::arch::fence_barrier_init();
  }

  __device__ __forceinline__ void producer_acquire(const PipelineState<kStages>& st, uint32_t tx_bytes) {
    empty[st.stage].wait(st.phase ^ 1);
    full[st.stage].arrive_and_expect_tx(tx_bytes);
  }
  __device__ __forceinline__ uint64_t* full_barrier(const PipelineState<kStages>& st) {
    return reinterpret_cast<uint64_t*>(&full[st.stage]);
  }
  __device__ __forceinline__ void consumer_wait(const PipelineState<kStages>& st) { full[st.stage].wait(st.phase); }
  __device__ __forceinline__ void consumer_release(const PipelineState<kStages>& st) { empty[st.stage].arrive(); }
};

}  // namespace hopperkit
