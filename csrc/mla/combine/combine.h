// Host interface of the split-KV combine kernel.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace hopperkit::mla {

// The value head dimension of DeepSeek MLA; the combine is compiled for it alone.
constexpr int kCombineHeadDimV = 512;

template <typename OutT>
struct CombineParams {
  const float* o_accum;    // [num_accum_rows, h_k, s_q·G, 512] contiguous, O normalised per split
  const float* lse_accum;  // [num_accum_rows, h_k, s_q·G] contiguous, base-2 LSE per split
  const int32_t* num_splits;  // [batch + 1] prefix sum of splits per request
  const float* attn_sink;     // [h_q] or nullptr
  OutT* out;                  // [batch, s_q, h_q, 512], last dim contiguous
  int64_t out_stride_b, out_stride_s, out_stride_h;
  float* lse;  // [batch, h_q, s_q] natural log
  int64_t lse_stride_b, lse_stride_h, lse_stride_s;
  int32_t batch_size;
  int32_t num_heads_k;
  int32_t s_q;
  int32_t heads_per_kv;  // G = h_q / h_k
  int32_t num_accum_rows;
  bool pdl;  // launch with programmatic dependent launch, overlapping the decode kernel's tail
};

template <typename OutT>
void run_mla_combine(const CombineParams<OutT>& params, cudaStream_t stream);

}  // namespace hopperkit::mla
