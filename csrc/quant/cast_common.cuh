// Device pieces shared by the per-token and per-block casts: 16-byte input vectors, the scale
// arithmetic, the fp8 conversion, and the lane exchange that turns fp8 fragments into 16-byte stores.
//
// Numerics (the contract of python/hopperkit/reference/quant.py, bit for bit):
//   amax = max(|x|) over the block, zero padding, NaN-propagating   (exact: max does not round)
//   amax = max(amax, fl32(1e-4)), NaN kept                          (torch.clamp(min=1e-4))
//   sf   = __fdiv_rn(amax, 448)                                     (tensor / tensor: IEEE div.rn)
//   sf   = ceil_to_ue8m0(sf) if use_ue8m0                           (bit manipulation, exact)
//   inv  = __frcp_rn(sf)                                            (torch.reciprocal: IEEE 1/x)
//   q    = __fmul_rn(x, inv)                                        (no FMA contraction possible)
//   fp8  = e4m3fn(q), round to nearest even
// Every op is correctly rounded, so the result does not depend on evaluation order or hardware.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "common/device.cuh"

namespace hopperkit::quant {

constexpr float kFp8Max = 448.0f;  // largest finite float8_e4m3fn
// torch.clamp converts the Python float 1e-4 (a double) to the tensor's float32: same rounding here.
constexpr float kAmaxClamp = static_cast<float>(1e-4);

// Elements of T per 16-byte load, and loads whose fp8 results make one 16-byte store.
template <typename T>
constexpr int kElemsPer16B = 16 / static_cast<int>(sizeof(T));
template <typename T>
constexpr int kLoadsPerStore = 16 / kElemsPer16B<T>;

// Raw input bits; element i of a 16-byte vector, widened to float32 exactly.
template <typename T>
using InputBits = std::conditional_t<sizeof(T) == 4, uint32_t, uint16_t>;

template <typename T>
__device__ __forceinline__ float element(const uint4& raw, int i) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
  if constexpr (sizeof(T) == 4) {
    return __uint_as_float(w[i]);
  } else {
    const uint32_t bits = (i % 2 == 0) ? (w[i / 2] & 0xFFFFu) : (w[i / 2] >> 16);
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      return __uint_as_float(bits << 16);  // bf16 is the top half of a float32
    } else {
      return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
    }
  }
}

// 16 bytes of row `row` starting at column `col`, zero where col + e >= n (the reference's padding).
// kAligned: row + col is 16-byte aligned and n is a multiple of the vector, so a vector is all in or
// all out.
template <typename T, bool kAligned>
__device__ __forceinline__ uint4 load_16B(const T* row, int64_t col, int32_t n) {
  if constexpr (kAligned) {
    return col < n ? __ldg(reinterpret_cast<const uint4*>(row + col)) : make_uint4(0u, 0u, 0u, 0u);
  } else {
    constexpr int kElems = kElemsPer16B<T>;
    const InputBits<T>* bits = reinterpret_cast<const InputBits<T>*>(row);
    uint32_t w[4];
    if constexpr (kElems == 4) {
#pragma unroll
      for (int e = 0; e < 4; ++e) w[e] = col + e < n ? __ldg(bits + col + e) : 0u;
    } else {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const uint32_t lo = col + 2 * k < n ? __ldg(bits + col + 2 * k) : 0u;
        const uint32_t hi = col + 2 * k + 1 < n ? __ldg(bits + col + 2 * k + 1) : 0u;
        w[k] = lo | (hi << 16);
      }
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// max |x| over one vector, NaN-propagating (torch.amax does; fmaxf would drop the NaN).
template <typename T>
__device__ __forceinline__ float abs_max(const uint4& raw, float acc) {
#pragma unroll
  for (int e = 0; e < kElemsPer16B<T>; ++e) acc = fmax_nan(acc, fabsf(element<T>(raw, e)));
  return acc;
}

// reference.quant.ceil_to_ue8m0: biased exponent + (mantissa != 0), clamped to [1, 254].
__device__ __forceinline__ float ceil_to_ue8m0(float sf) {
  const uint32_t bits = __float_as_uint(sf);
  int e = static_cast<int>((bits >> 23) & 0xFFu) + ((bits & 0x7FFFFFu) != 0u ? 1 : 0);
  e = min(max(e, 1), 254);
  return __uint_as_float(static_cast<uint32_t>(e) << 23);
}

struct BlockScale {
  float sf;          // what the scale tensor stores (dequant multiplies by it)
  float inv;         // what the values are multiplied by
  bool finite_amax;  // false: the block holds an inf or NaN (see quantize_16B)
};

__device__ __forceinline__ BlockScale block_scale(float amax, bool use_ue8m0) {
  const float clamped = fmax_nan(amax, kAmaxClamp);
  float sf = __fdiv_rn(clamped, kFp8Max);
  if (use_ue8m0) sf = ceil_to_ue8m0(sf);
  return {sf, __frcp_rn(sf), isfinite(amax)};
}

// float32 -> e4m3fn exactly as torch's c10 conversion (Float8_e4m3fn(float)): round to nearest even,
// |q| >= 464 (all that rounds past 448) and inf/NaN -> NaN (0x7F) with q's sign. Only used for blocks
// with a non-finite amax, where q can be ±inf (use_ue8m0: sf = 2^127 so inf·inv stays inf) and the
// hardware's satfinite conversion would give ±448 instead.
__device__ __forceinline__ uint32_t e4m3_like_torch(float q) {
  const uint32_t bits = __float_as_uint(q);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t mag = bits & 0x7FFFFFFFu;
  uint32_t r;
  if (mag >= 0x43F00000u) {  // 480.0f and up, inf, NaN
    r = 0x7Fu;
  } else if (mag < 0x3C800000u) {  // below 2^-6: subnormal e4m3, rounded by a float add of 2^14
    r = __float_as_uint(__fadd_rn(__uint_as_float(mag), 16384.0f)) - 0x46800000u;
  } else {  // normal: rebias the exponent (-120) and round the mantissa to 3 bits, ties to even
    r = (mag + 0xC407FFFFu + ((mag >> 20) & 1u)) >> 20;
  }
  return r | sign;
}

// One 16-byte input vector -> kElems fp8 bytes, packed little-endian into kElems/4 words.
//
// Fast path: cvt.rn.satfinite.e4m3x2.f32 (__nv_cvt_float2_to_fp8x2 with __NV_SATFINITE) rounds to
// nearest even like torch; the two differ only above 448, where torch rounds (464, inf] to NaN and
// satfinite clamps to 448. With a finite amax, |x| <= amax gives |q| <= 448·(1 + 2^-22) (three
// correctly rounded ops), which both round to 448 at most, so the fast path is exact for every
// finite block; blocks with inf/NaN take the torch-identical software conversion.
template <typename T>
__device__ __forceinline__ void quantize_16B(const uint4& raw, const BlockScale& s,
                                             uint32_t (&out)[kElemsPer16B<T> / 4]) {
  constexpr int kWords = kElemsPer16B<T> / 4;
  if (s.finite_amax) {
#pragma unroll
    for (int k = 0; k < kWords; ++k) {
      const float q0 = __fmul_rn(element<T>(raw, 4 * k + 0), s.inv);
      const float q1 = __fmul_rn(element<T>(raw, 4 * k + 1), s.inv);
      const float q2 = __fmul_rn(element<T>(raw, 4 * k + 2), s.inv);
      const float q3 = __fmul_rn(element<T>(raw, 4 * k + 3), s.inv);
      const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(q0, q1), __NV_SATFINITE, __NV_E4M3);
      const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(q2, q3), __NV_SATFINITE, __NV_E4M3);
      out[k] = lo | (hi << 16);
    }
  } else {
#pragma unroll
    for (int k = 0; k < kWords; ++k) {
      uint32_t word = 0;
#pragma unroll
      for (int t = 0; t < 4; ++t) word |= e4m3_like_torch(__fmul_rn(element<T>(raw, 4 * k + t), s.inv)) << (8 * t);
      out[k] = word;
    }
  }
}

// Lane exchange for 16-byte fp8 stores. Groups of kR adjacent lanes (kR = kLoadsPerStore) each hold,
// for each of their kR loads j, a kW-word fragment; the fragments of one load across the group are
// 16 contiguous output bytes. Afterwards lane r of the group holds those 16 bytes of load r: a kR×kR
// transpose of fragments across lanes, done as log2(kR) butterfly rounds. In round b the lanes with
// bit b set trade their fragments j (bit b clear) for the partner's fragments j ^ b. Every fragment
// index is a compile-time constant and the choice a select on one bit: written as a comparison
// against a runtime index instead, NVVM turned it into an indexed local-memory array (nvcc 13.0).
// All 32 lanes must call it.
template <int kR, int kW>
__device__ __forceinline__ uint4 gather_16B(const uint32_t (&frag)[kR][kW], int lane) {
  static_assert(kR * kW == 4 && (kR & (kR - 1)) == 0, "kR (a power of two) fragments of kW words make 16 bytes");
  uint32_t f[kR][kW];
#pragma unroll
  for (int j = 0; j < kR; ++j)
#pragma unroll
    for (int w = 0; w < kW; ++w) f[j][w] = frag[j][w];
#pragma unroll
  for (int b = 1; b < kR; b *= 2) {
    const bool upper = (lane & b) != 0;
#pragma unroll
    for (int j = 0; j < kR; ++j) {
      if (j & b) continue;
#pragma unroll
      for (int w = 0; w < kW; ++w) {
        const uint32_t send = upper ? f[j][w] : f[j ^ b][w];
        const uint32_t recv = __shfl_xor_sync(0xffffffffu, send, b);
        if (upper) {
          f[j][w] = recv;
        } else {
          f[j ^ b][w] = recv;
        }
      }
    }
  }
  uint32_t flat[4];
#pragma unroll
  for (int j = 0; j < kR; ++j)
#pragma unroll
    for (int w = 0; w < kW; ++w) flat[j * kW + w] = f[j][w];
  return make_uint4(flat[0], flat[1], flat[2], flat[3]);
}

// kElems fp8 bytes of one load at out_row + col, one byte at a time, skipping col + e >= n (the
// unaligned path).
template <int kWords>
__device__ __forceinline__ void store_bytes(uint8_t* out_row, int64_t col, int32_t n, const uint32_t (&frag)[kWords]) {
#pragma unroll
  for (int e = 0; e < 4 * kWords; ++e)
    if (col + e < n) out_row[col + e] = static_cast<uint8_t>(frag[e / 4] >> (8 * (e % 4)));
}

}  // namespace hopperkit::quant
