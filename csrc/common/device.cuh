// Small device building blocks shared by every kernel: warp reductions, programmatic dependent
// launch (PDL) controls, exact IEEE arithmetic helpers, global reductions.
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

// max that propagates NaN (PTX max.NaN, sm_80+), like torch.amax/torch.maximum; fmaxf drops NaNs.
// A NaN result is the canonical NaN, whatever the inputs' payloads.
__device__ __forceinline__ float fmax_nan(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

// NaN-propagating max over each aligned group of kWidth lanes (a power of two <= 32); every lane of
// the group gets the result. All 32 lanes must call it.
template <int kWidth = kWarpSize>
__device__ __forceinline__ float warp_reduce_max_nan(float v) {
  static_assert(kWidth >= 1 && kWidth <= kWarpSize && (kWidth & (kWidth - 1)) == 0, "kWidth: a power of two <= 32");
#pragma unroll
  for (int offset = kWidth / 2; offset > 0; offset /= 2) v = fmax_nan(v, __shfl_xor_sync(0xffffffffu, v, offset));
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

// *addr += (x, y) in global memory, performed at L2 (PTX red, vector form sm_90+): the thread neither
// waits for nor reads the old value. addr 8-byte aligned. Each float is one IEEE addition, so an
// element added to once gets exactly old + x.
__device__ __forceinline__ void red_add_f32x2(float* addr, float x, float y) {
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(addr), "f"(x), "f"(y) : "memory");
}

__device__ __forceinline__ void red_add_f32(float* addr, float x) {
  asm volatile("red.global.add.f32 [%0], %1;" ::"l"(addr), "f"(x) : "memory");
}

}  // namespace hopperkit
