// Split-KV combine: merges the float32 partials of every request that the scheduler split across
// partitions. One warp per (request, KV head, query row); each lane owns 16 of the 512 output
// channels as four float4 loads at lane·4 + i·128, so a warp reads each partial row fully coalesced.
//
// Numerics are a contract (hopperkit.reference.scheduler.mla_combine is bit-identical on the same
// device): every multiply and add is a separately rounded IEEE op (__fmul_rn/__fadd_rn block
// FMA contraction), sums run in split order, and exp2f/log2f are the accurate libdevice versions
// (the build has no --use_fast_math). The kernel is memory-bound, so exactness costs nothing.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/device.cuh"
#include "mla/combine/combine.h"

namespace hopperkit::mla {

constexpr int kCombineWarps = 8;  // rows per CTA
constexpr int kCombineChunks = kCombineHeadDimV / (4 * kWarpSize);  // float4s per lane
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <typename OutT>
__device__ __forceinline__ void store4(OutT* dst, float4 v);

template <>
__device__ __forceinline__ void store4<__nv_bfloat16>(__nv_bfloat16* dst, float4 v) {
  __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
  uint2 packed = {*reinterpret_cast<uint32_t*>(&lo), *reinterpret_cast<uint32_t*>(&hi)};
  *reinterpret_cast<uint2*>(dst) = packed;
}

template <>
__device__ __forceinline__ void store4<__half>(__half* dst, float4 v) {
  __half2 lo = __floats2half2_rn(v.x, v.y), hi = __floats2half2_rn(v.z, v.w);
  uint2 packed = {*reinterpret_cast<uint32_t*>(&lo), *reinterpret_cast<uint32_t*>(&hi)};
  *reinterpret_cast<uint2*>(dst) = packed;
}

template <typename OutT>
__global__ void __launch_bounds__(kCombineWarps * kWarpSize)
    mla_combine_kernel(const __grid_constant__ CombineParams<OutT> p) {
  // The partials and num_splits come from the kernels before this one in the stream (a no-op
  // unless launched with PDL).
  pdl_wait_for_prerequisites();

  const int req = blockIdx.x;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int rows_per_kv = p.s_q * p.heads_per_kv;
  const int row = blockIdx.y * kCombineWarps + warp;  // (hk, r) flattened
  if (row >= p.num_heads_k * rows_per_kv) return;

  const int32_t first = p.num_splits[req];
  const int32_t count = p.num_splits[req + 1] - first;
  if (count <= 1) return;  // single-split requests were written by the decode kernel itself

  const int hk = row / rows_per_kv, r = row % rows_per_kv;
  const int s = r / p.heads_per_kv, head = hk * p.heads_per_kv + r % p.heads_per_kv;
  OutT* out_row = p.out + req * p.out_stride_b + s * p.out_stride_s + head * p.out_stride_h;
  float* lse_out = p.lse + req * p.lse_stride_b + head * p.lse_stride_h + s * p.lse_stride_s;

  if (first < 0 || first + count > p.num_accum_rows) {
    // Metadata from another batch: refuse to read outside the accumulators and make it visible.
#pragma unroll
    for (int i = 0; i < kCombineChunks; ++i)
      store4(out_row + i * 4 * kWarpSize + lane * 4, make_float4(NAN, NAN, NAN, NAN));
    if (lane == 0) *lse_out = NAN;
    return;
  }

  const int64_t row_stride = static_cast<int64_t>(p.num_heads_k) * rows_per_kv;  // lse_accum rows
  const float* lse_in = p.lse_accum + static_cast<int64_t>(first) * row_stride + row;
  const float* o_in = p.o_accum + (static_cast<int64_t>(first) * row_stride + row) * kCombineHeadDimV;

  // Max over the partials (order-free), 32 splits per pass, one per lane.
  float m = -INFINITY;
  for (int base = 0; base < count; base += kWarpSize) {
    const int j = base + lane;
    m = fmaxf(m, j < count ? lse_in[j * row_stride] : -INFINITY);
  }
  m = warp_reduce_max(m);
  if (m == -INFINITY) m = 0.0f;

  // Σ exp2(lse_j - m) in split order; every lane computes the same sum.
  float sum = 0.0f;
  for (int base = 0; base < count; base += kWarpSize) {
    const int j = base + lane;
    const float mine = j < count ? lse_in[j * row_stride] : -INFINITY;
    const int n = min(kWarpSize, count - base);
    for (int t = 0; t < n; ++t) sum = __fadd_rn(sum, exp2f(__fsub_rn(__shfl_sync(0xffffffffu, mine, t), m)));
  }
  float g = sum == 0.0f ? INFINITY : __fadd_rn(log2f(sum), m);
  if (lane == 0) *lse_out = __fmul_rn(g, kLn2);  // the returned LSE excludes the sink

  if (p.attn_sink != nullptr) {
    const float sink = __fmul_rn(p.attn_sink[head], kLog2e);
    if (g == INFINITY) {
      g = sink == -INFINITY ? INFINITY : sink;
    } else {
      g = __fadd_rn(g, log2f(__fadd_rn(1.0f, exp2f(__fsub_rn(sink, g)))));
    }
  }

  float4 acc[kCombineChunks];
#pragma unroll
  for (int i = 0; i < kCombineChunks; ++i) acc[i] = make_float4(0.f, 0.f, 0.f, 0.f);

  // Software-pipelined over splits: the next partial row is in flight while this one is scaled.
  float4 cur[kCombineChunks], nxt[kCombineChunks];
#pragma unroll
  for (int i = 0; i < kCombineChunks; ++i) {
    nxt[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    cur[i] = *reinterpret_cast<const float4*>(o_in + i * 4 * kWarpSize + lane * 4);
  }
  for (int base = 0; base < count; base += kWarpSize) {
    const int j_mine = base + lane;
    const float lse_mine = j_mine < count ? lse_in[j_mine * row_stride] : -INFINITY;
    const int n = min(kWarpSize, count - base);
    for (int t = 0; t < n; ++t) {
      const int j = base + t;
      if (j + 1 < count) {
        const float* next_row = o_in + static_cast<int64_t>(j + 1) * row_stride * kCombineHeadDimV;
#pragma unroll
        for (int i = 0; i < kCombineChunks; ++i)
          nxt[i] = *reinterpret_cast<const float4*>(next_row + i * 4 * kWarpSize + lane * 4);
      }
      const float w = exp2f(__fsub_rn(__shfl_sync(0xffffffffu, lse_mine, t), g));
#pragma unroll
      for (int i = 0; i < kCombineChunks; ++i) {
        acc[i].x = __fadd_rn(acc[i].x, __fmul_rn(w, cur[i].x));
        acc[i].y = __fadd_rn(acc[i].y, __fmul_rn(w, cur[i].y));
        acc[i].z = __fadd_rn(acc[i].z, __fmul_rn(w, cur[i].z));
        acc[i].w = __fadd_rn(acc[i].w, __fmul_rn(w, cur[i].w));
        cur[i] = nxt[i];
      }
    }
  }

#pragma unroll
  for (int i = 0; i < kCombineChunks; ++i) store4(out_row + i * 4 * kWarpSize + lane * 4, acc[i]);
}

}  // namespace hopperkit::mla
