// Epilogue of a request chunk: normalise by the row sums and write either the final output (the
// chunk is the whole request) or FP32 partials for the combine kernel.
#pragma once

#include "mla/dense_decode/seesaw.cuh"

namespace hopperkit::mla {

template <class T>
__device__ __forceinline__ void store_request(const DenseDecodeParams& p, typename T::SharedStorage& smem,
                                              SeesawState& st, const ThreadRows& rows, const RequestChunk& c,
                                              int warpgroup, int m_tile, int head_k, int parity) {
  // Row sums: the quad's partial sums, then the two warpgroups' halves. Double-buffered by request
  // parity so a warpgroup that races into the next request cannot overwrite sums still being read.
  float sum[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    sum[h] = st.sum[h] + __shfl_xor_sync(0xffffffffu, st.sum[h], 1);
    sum[h] += __shfl_xor_sync(0xffffffffu, sum[h], 2);
  }
  float* my_sums = smem.row_sum[parity][warpgroup];
  if (rows.quad_lane == 0) {
    my_sums[rows.row(0)] = sum[0];
    my_sums[rows.row(1)] = sum[1];
  }
  named_barrier_sync(DecodeBarrier::kRowSumsReady, T::kMathThreads);
  const float* other = smem.row_sum[parity][warpgroup ^ 1];

  const int col0 = warpgroup * (T::kHeadDimV / 2) + 2 * rows.quad_lane;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = m_tile * T::kBlockM + rows.row(h);
    if (r >= p.rows_per_kv) continue;
    const float total = sum[h] + other[rows.row(h)];
    // Nothing visible (empty sequence, or a chunk wholly past a causal row's limit): O = 0 and the
    // LSE is -inf, written as +inf in the final output (FlashMLA's convention for empty rows).
    const bool empty = !(total > 0.0f);
    const float inv = empty ? 0.0f : 1.0f / total;
    const float lse2 = empty ? -INFINITY : __log2f(total) + st.m[h];
    const int s = r / p.heads_per_kv;
    const int head = head_k * p.heads_per_kv + r % p.heads_per_kv;
    if (!c.split) {
      using Elem = typename T::Elem;
      Elem* out = static_cast<Elem*>(p.out) + c.req * p.out_stride_b + s * p.out_stride_s + head * p.out_stride_h + col0;
#pragma unroll
      for (int j = 0; j < kOutAccs / 4; ++j) {
        const uint32_t v = pack_pair<Elem>(st.o[4 * j + 2 * h] * inv, st.o[4 * j + 2 * h + 1] * inv);
        *reinterpret_cast<uint32_t*>(out + 8 * j) = v;
      }
      if (warpgroup == 0 && rows.quad_lane == 0) {
        p.lse[c.req * p.lse_stride_b + head * p.lse_stride_h + s * p.lse_stride_s] =
            empty ? INFINITY : lse2 * 0.69314718055994530942f;
      }
    } else if (static_cast<uint32_t>(c.accum_row) < static_cast<uint32_t>(p.accum_rows)) {
      // The row comes from num_splits, which metadata from another batch can push past the buffer.
      const int64_t row = (static_cast<int64_t>(c.accum_row) * p.num_heads_k + head_k) * p.rows_per_kv + r;
      float* out = p.o_accum + row * T::kHeadDimV + col0;
#pragma unroll
      for (int j = 0; j < kOutAccs / 4; ++j) {
        *reinterpret_cast<float2*>(out + 8 * j) = make_float2(st.o[4 * j + 2 * h] * inv, st.o[4 * j + 2 * h + 1] * inv);
      }
      if (warpgroup == 0 && rows.quad_lane == 0) p.lse_accum[row] = lse2;
    }
  }
}

}  // namespace hopperkit::mla
