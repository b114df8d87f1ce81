// Register-level building blocks of the math warpgroups: the wgmma products of one KV block and
// the online-softmax arithmetic on their accumulators.
//
// Accumulator layout of a 64×N wgmma (per thread of the warpgroup, warp w, lane l): element
// acc[4j + 2h + c] is row 16w + l/4 + 8h, column 8j + 2(l%4) + c. Each thread therefore owns two
// rows ("row 0" and "row 1"); the four lanes of a quad share them.
#pragma once

#include <cmath>
#include <type_traits>

#include <cute/arch/mma_sm90_gmma.hpp>

#include "common/device.cuh"
#include "common/sync.cuh"
#include "common/wgmma.cuh"
#include "mla/dense_decode/traits.h"

namespace hopperkit::mla {

constexpr int kScoreAccs = 32;   // 64×64 scores
constexpr int kOutAccs = 128;    // 64×256 half of the output
constexpr int kPRegs = 16;       // 64×64 P packed in 16-bit pairs

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

template <typename Elem>
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack_pair<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t pack_pair<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// The two query rows a thread owns, within the CTA's 64-row tile.
struct ThreadRows {
  int row0;
  int quad_lane;
  __device__ __forceinline__ explicit ThreadRows(int thread_in_wg)
      : row0((thread_in_wg / 32) * 16 + (thread_in_wg % 32) / 4), quad_lane(thread_in_wg % 4) {}
  __device__ __forceinline__ int row(int h) const { return row0 + 8 * h; }
};

// S = Q·Kᵀ of one KV block (64 query rows × 64 tokens, K = 576), tile by tile as the TMA loads
// land: 9 tiles × 4 wgmmas of K = 16. kOddOrder walks tiles 4-7 first, the order the producer
// refills them for the odd block of a pair.
template <class T, bool kOddOrder>
__device__ __forceinline__ void block_scores(typename T::SharedStorage& smem, int buf, uint32_t phase,
                                             float (&s)[kScoreAccs]) {
  using Atom = typename HalfWgmma<typename T::Elem, 64>::ss_k_k;
  fence_accumulators(s);
#pragma unroll
  for (int i = 0; i < T::kKTiles; ++i) {
    const int t = kOddOrder ? (i < 4 ? i + 4 : (i < 8 ? i - 4 : i)) : i;
    smem.kv_full[buf][t].wait(phase);
    // The barrier wait is a loop ptxas treats as divergent: re-fence the accumulators after it.
    cute::warpgroup_arrive();
    const uint64_t desc_q = smem_desc_k_major_sw128(smem.q[t]);
    const uint64_t desc_k = smem_desc_k_major_sw128(smem.kv[buf][t]);
#pragma unroll
    for (int k = 0; k < 4; ++k) wgmma_ss<Atom>(desc_q + 2 * k, desc_k + 2 * k, s, i > 0 || k > 0);
  }
  cute::warpgroup_commit_batch();
  cute::warpgroup_wait<0>();
  fence_accumulators(s);
}

// Scores of keys the row may not see become -inf: keys at or past the row's limit (the sequence
// end, or for causal decoding seqlen - (s_q - 1 - s)). Selected, not added: the cache slots past
// the end may hold NaN.
__device__ __forceinline__ void mask_scores(float (&s)[kScoreAccs], const ThreadRows& rows, int first_key,
                                            const int (&limit)[2]) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int key = first_key + 8 * j + 2 * rows.quad_lane + c;
        if (key >= limit[h]) s[4 * j + 2 * h + c] = -INFINITY;
      }
    }
  }
}

// Row maxima of the raw scores, in the log2 domain (·scale·log2 e; the scale is positive).
__device__ __forceinline__ void row_max(const float (&s)[kScoreAccs], float scale_log2, float (&mx)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float v = -INFINITY;
#pragma unroll
    for (int j = 0; j < 8; ++j) v = fmaxf(v, fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
    mx[h] = v * scale_log2;
  }
}

// A max of -inf (nothing visible yet) is used as 0, so exp2(-inf - 0) = 0 and never NaN.
__device__ __forceinline__ float finite_or_zero(float m) { return m == -INFINITY ? 0.0f : m; }

// P = exp2(S·scale·log2 e - m) in place; adds this thread's part of each row sum to `sum`.
__device__ __forceinline__ void exponentiate(float (&s)[kScoreAccs], float scale_log2, const float (&m)[2],
                                             float (&sum)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float neg_m = -finite_or_zero(m[h]);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        float& x = s[4 * j + 2 * h + c];
        x = fast_exp2(fmaf(x, scale_log2, neg_m));
        sum[h] += x;
      }
    }
  }
}

// P as the A operand of P·V: register i of k-step ks is the 16-bit pair of accumulators
// 8·ks + 2i, 8·ks + 2i + 1, which is exactly the A fragment layout of a 64×16 wgmma slice.
template <typename Elem>
__device__ __forceinline__ void pack_p(const float (&p)[kScoreAccs], float scale0, float scale1,
                                       uint32_t (&frag)[kPRegs]) {
#pragma unroll
  for (int i = 0; i < kPRegs; ++i) {
    const float sc = (i & 1) ? scale1 : scale0;
    frag[i] = pack_pair<Elem>(p[2 * i] * sc, p[2 * i + 1] * sc);
  }
}

// Writes P (already packed) into a 64×64 K-major tile with the 128-byte swizzle, the layout the
// other warpgroup's P·V reads as its A operand. Conflict-free: the 8 rows of a warp's store hit 8
// different 16-byte chunks.
__device__ __forceinline__ void store_p(uint8_t* tile, const ThreadRows& rows, const uint32_t (&frag)[kPRegs]) {
  const uint32_t base = cute::cast_smem_ptr_to_uint(tile);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = rows.row(h);
      const uint32_t addr = base + r * 128 + ((j ^ (r & 7)) << 4) + 4 * rows.quad_lane;
      asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(frag[2 * j + h]) : "memory");
    }
  }
}

// Reads a P tile written by store_p back as A fragments (ldmatrix.x4 per k-step: the four 8×8
// matrices are exactly a0..a3 of the 64×16 slice), scaled per row by `scale` in FP32.
template <typename Elem>
__device__ __forceinline__ void load_p(const uint8_t* tile, int thread_in_wg, const float (&scale)[2],
                                       uint32_t (&frag)[kPRegs]) {
  const int lane = thread_in_wg % 32;
  const int matrix = lane / 8;
  const int r = (thread_in_wg / 32) * 16 + lane % 8 + 8 * (matrix & 1);
  const uint32_t row_base = cute::cast_smem_ptr_to_uint(tile) + r * 128;
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    const int chunk = 2 * ks + (matrix >> 1);
    const uint32_t addr = row_base + ((chunk ^ (r & 7)) << 4);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(frag[4 * ks]), "=r"(frag[4 * ks + 1]), "=r"(frag[4 * ks + 2]), "=r"(frag[4 * ks + 3])
                 : "r"(addr)
                 : "memory");
  }
#pragma unroll
  for (int i = 0; i < kPRegs; ++i) {
    const float sc = scale[i & 1];
    float lo, hi;
    if constexpr (std::is_same_v<Elem, __nv_bfloat16>) {
      const __nv_bfloat162 v = *reinterpret_cast<const __nv_bfloat162*>(&frag[i]);
      lo = __bfloat162float(v.x);
      hi = __bfloat162float(v.y);
    } else {
      const __half2 v = *reinterpret_cast<const __half2*>(&frag[i]);
      lo = __half2float(v.x);
      hi = __half2float(v.y);
    }
    frag[i] = pack_pair<Elem>(lo * sc, hi * sc);
  }
}

__device__ __forceinline__ void scale_rows(float (&o)[kOutAccs], const float (&sc)[2]) {
#pragma unroll
  for (int j = 0; j < kOutAccs / 4; ++j) {
    o[4 * j + 0] *= sc[0];
    o[4 * j + 1] *= sc[0];
    o[4 * j + 2] *= sc[1];
    o[4 * j + 3] *= sc[1];
  }
}

// O_half += P·V_half over one block, P in registers; V_half = the 4 tiles starting at v_tile.
// Committed, not waited for.
template <class T>
__device__ __forceinline__ void pv_from_registers(const uint32_t (&p)[kPRegs], const uint8_t* v_tile,
                                                  float (&o)[kOutAccs]) {
  using Atom = typename HalfWgmma<typename T::Elem, 256>::rs_k_mn;
  fence_accumulators(o);
  cute::warpgroup_arrive();
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    const uint32_t a[4] = {p[4 * ks], p[4 * ks + 1], p[4 * ks + 2], p[4 * ks + 3]};
    wgmma_rs<Atom>(a, smem_desc_mn_major_sw128(v_tile + ks * 16 * 128, T::kTileBytes), o, true);
  }
  cute::warpgroup_commit_batch();
  fence_accumulators(o);
}

// O_half += P·V_half with P read from a swizzled shared-memory tile (the other warpgroup's P).
template <class T>
__device__ __forceinline__ void pv_from_smem(const uint8_t* p_tile, const uint8_t* v_tile, float (&o)[kOutAccs]) {
  using Atom = typename HalfWgmma<typename T::Elem, 256>::ss_k_mn;
  fence_accumulators(o);
  cute::warpgroup_arrive();
  const uint64_t desc_p = smem_desc_k_major_sw128(p_tile);
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    wgmma_ss<Atom>(desc_p + 2 * ks, smem_desc_mn_major_sw128(v_tile + ks * 16 * 128, T::kTileBytes), o, true);
  }
  cute::warpgroup_commit_batch();
  fence_accumulators(o);
}

// Cache rows past the sequence end hold garbage (NaN in the tests): P is 0 there, but 0·NaN = NaN
// inside the MMA. The warpgroup that computed the block's scores zeroes those rows of the V tiles
// (0-7) before either warpgroup multiplies by them.
template <class T>
__device__ __forceinline__ void zero_rows_past_end(typename T::SharedStorage& smem, int buf, int valid_rows,
                                                   int thread_in_wg) {
  const int first = max(valid_rows, 0);
  const int chunks = (T::kPageBlock - first) * 8 * (T::kKTiles - 1);  // 16-byte chunks
  for (int idx = thread_in_wg; idx < chunks; idx += 128) {
    const int row = first + idx / 64;
    const int tile = (idx % 64) / 8;
    const int chunk = idx % 8;
    const uint32_t addr = cute::cast_smem_ptr_to_uint(smem.kv[buf][tile]) + row * 128 + chunk * 16;
    asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};" ::"r"(addr), "r"(0) : "memory");
  }
  fence_shared_for_async_proxy();
}

// Every warp of the releasing warpgroup arrives once its own wgmmas on the tiles are complete.
template <class T>
__device__ __forceinline__ void release_tiles(typename T::SharedStorage& smem, int buf, int first, int last, int lane) {
  if (lane == 0) {
    for (int t = first; t <= last; ++t) smem.kv_empty[buf][t].arrive();
  }
}

}  // namespace hopperkit::mla
