// Split-KV combine: merges the float32 partials of every request that the scheduler split across
// partitions. kWarpsPerRow warps share one (request, KV head, query row), each owning
// 512 / kWarpsPerRow channels as float4s at lane·4 + i·128, so a warp reads each partial row's
// slice fully coalesced. Small batches use 4 warps per row (one request × 128 heads split 66 ways
// then still spreads over 512 warps); large batches use 1, which keeps more bytes in flight per
// warp and runs the LSE prologue once per row. The splits are walked serially, so each lane keeps
// several partial rows in flight: latency, not bandwidth, bounds a small batch.
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

constexpr int kCombineWarps = 8;  // warps per CTA
// float4 loads each lane keeps outstanding: kLoadsInFlight partial rows × the float4s it owns per row.
constexpr int kCombineFloat4InFlight = 8;
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

template <typename OutT, int kWarpsPerRow>
__global__ void __launch_bounds__(kCombineWarps * kWarpSize)
    mla_combine_kernel(const __grid_constant__ CombineParams<OutT> p) {
  constexpr int kChunks = kCombineHeadDimV / (kWarpsPerRow * 4 * kWarpSize);  // float4s per lane per row
  constexpr int kLoadsInFlight = kCombineFloat4InFlight / kChunks;             // partial rows per batch
  static_assert(kChunks >= 1 && kCombineHeadDimV % (kWarpsPerRow * 4 * kWarpSize) == 0, "bad row split");
  // The partials and num_splits come from the kernels before this one in the stream (a no-op
  // unless launched with PDL).
  pdl_wait_for_prerequisites();

  const int req = blockIdx.x;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int rows_per_kv = p.s_q * p.heads_per_kv;
  const int slot = blockIdx.y * kCombineWarps + warp;
  const int row = slot / kWarpsPerRow;  // (hk, r) flattened
  const int channel = (slot % kWarpsPerRow) * kChunks * 4 * kWarpSize + lane * 4;
  if (row >= p.num_heads_k * rows_per_kv) return;

  const int32_t first = p.num_splits[req];
  const int32_t count = p.num_splits[req + 1] - first;
  if (count <= 1) return;  // single-split requests were written by the decode kernel itself

  const int hk = row / rows_per_kv, r = row % rows_per_kv;
  const int s = r / p.heads_per_kv, head = hk * p.heads_per_kv + r % p.heads_per_kv;
  OutT* out = p.out + req * p.out_stride_b + s * p.out_stride_s + head * p.out_stride_h + channel;
  float* lse_out = p.lse + req * p.lse_stride_b + head * p.lse_stride_h + s * p.lse_stride_s;
  const bool writes_lse = lane == 0 && slot % kWarpsPerRow == 0;

  if (first < 0 || first + count > p.num_accum_rows) {
    // Metadata from another batch: refuse to read outside the accumulators and make it visible.
#pragma unroll
    for (int i = 0; i < kChunks; ++i) store4(out + i * 4 * kWarpSize, make_float4(NAN, NAN, NAN, NAN));
    if (writes_lse) *lse_out = NAN;
    return;
  }

  const int64_t row_stride = static_cast<int64_t>(p.num_heads_k) * rows_per_kv;  // lse_accum rows
  const float* lse_in = p.lse_accum + static_cast<int64_t>(first) * row_stride + row;
  const float* o_in = p.o_accum + (static_cast<int64_t>(first) * row_stride + row) * kCombineHeadDimV + channel;
  const int64_t o_split_stride = row_stride * kCombineHeadDimV;

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
  if (writes_lse) *lse_out = __fmul_rn(g, kLn2);  // the returned LSE excludes the sink

  if (p.attn_sink != nullptr) {
    const float sink = __fmul_rn(p.attn_sink[head], kLog2e);
    if (g == INFINITY) {
      g = sink == -INFINITY ? INFINITY : sink;
    } else {
      g = __fadd_rn(g, log2f(__fadd_rn(1.0f, exp2f(__fsub_rn(sink, g)))));
    }
  }

  // out = Σ_j w_j · o_j in split order. Lane t of each 32-split pass computes w for split base + t;
  // the partial rows are loaded kLoadsInFlight at a time before any of them is consumed.
  float4 acc[kChunks];
#pragma unroll
  for (int i = 0; i < kChunks; ++i) acc[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int base = 0; base < count; base += kWarpSize) {
    const int j_mine = base + lane;
    const float w_mine = j_mine < count ? exp2f(__fsub_rn(lse_in[j_mine * row_stride], g)) : 0.0f;
    const int n = min(kWarpSize, count - base);
    for (int t0 = 0; t0 < n; t0 += kLoadsInFlight) {
      float4 v[kLoadsInFlight][kChunks];
#pragma unroll
      for (int u = 0; u < kLoadsInFlight; ++u) {
#pragma unroll
        for (int i = 0; i < kChunks; ++i) {
          v[u][i] = t0 + u < n ? *reinterpret_cast<const float4*>(o_in + (base + t0 + u) * o_split_stride + i * 4 * kWarpSize)
                               : make_float4(0.f, 0.f, 0.f, 0.f);
        }
      }
#pragma unroll
      for (int u = 0; u < kLoadsInFlight; ++u) {
        const float w = __shfl_sync(0xffffffffu, w_mine, (t0 + u) % kWarpSize);
        if (t0 + u < n) {
#pragma unroll
          for (int i = 0; i < kChunks; ++i) {
            acc[i].x = __fadd_rn(acc[i].x, __fmul_rn(w, v[u][i].x));
            acc[i].y = __fadd_rn(acc[i].y, __fmul_rn(w, v[u][i].y));
            acc[i].z = __fadd_rn(acc[i].z, __fmul_rn(w, v[u][i].z));
            acc[i].w = __fadd_rn(acc[i].w, __fmul_rn(w, v[u][i].w));
          }
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kChunks; ++i) store4(out + i * 4 * kWarpSize, acc[i]);
}

}  // namespace hopperkit::mla
