// Small device building blocks shared by every kernel: warp reductions, programmatic dependent
// launch (PDL) controls, exact IEEE arithmetic helpers.
#pragma once

#include <cuda_runtime.h>

namespace hopperkit {

constexpr int kWarpSize = 32;

template <typename T>
__device__ __forceinline__ T warp_reduce_sum(T v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warp_reduce_max(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// PDL. A kernel launched with the programmatic-stream-serialization attribute may start while the
// previous kernel in the stream is still running; it must wait here before it reads anything that
// kernel writes. A no-op when the kernel was launched without the attribute.
__device__ __forceinline__ void pdl_wait_for_prerequisites() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

// Lets the next PDL-launched kernel in the stream start its prologue. Writes issued after this are
// still visible to that kernel only after its pdl_wait_for_prerequisites().
__device__ __forceinline__ void pdl_allow_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

}  // namespace hopperkit
