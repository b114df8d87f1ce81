// Host interface of the dense MLA decode kernel (BF16/FP16 paged KV cache).
#pragma once

#include <cstdint>

#include <cuda.h>
#include <cuda_runtime.h>

#include "mla/sched_meta.h"

namespace hopperkit::mla {

struct DenseDecodeParams {
  // q [b, s_q, h_q, 576], last dim contiguous. Query rows of KV head hk are r = s·G + g (G = h_q /
  // h_k), i.e. q[b, s, hk·G + g, :].
  const void* q;
  int64_t q_stride_b, q_stride_s, q_stride_h;
  // out [b, s_q, h_q, 512] in q's dtype and lse [b, h_q, s_q] natural log, for requests computed by
  // a single partition; the combine kernel writes the others.
  void* out;
  int64_t out_stride_b, out_stride_s, out_stride_h;
  float* lse;
  int64_t lse_stride_b, lse_stride_h, lse_stride_s;
  // Partials of split requests: o_accum [rows, h_k, R, 512] (O / L), lse_accum [rows, h_k, R]
  // (base-2 LSE), R = s_q·G; request i owns rows [num_splits[i], num_splits[i + 1]).
  float* o_accum;
  float* lse_accum;
  const int32_t* block_table;  // [b, max_blocks]
  int64_t block_table_stride;
  int32_t max_blocks;
  const int32_t* seqlens;  // [b]
  const DecodingSchedMeta* sched;  // [num_sm_parts]
  const int32_t* num_splits;       // [b + 1]
  int32_t accum_rows;              // o_accum.size(0): partial rows outside it are dropped
  int32_t batch;
  int32_t s_q;
  int32_t num_heads_k;
  int32_t heads_per_kv;   // G
  int32_t rows_per_kv;    // R = s_q·G
  float scale_log2;       // softmax_scale · log2(e): scores are exponentiated with exp2
  bool causal;            // bottom-right aligned; only meaningful for s_q > 1
  bool kv_evict_first;    // KV tiles are read by one CTA only: load them with the EVICT_FIRST L2 hint
};

template <typename Elem>
void run_mla_dense_decode(const DenseDecodeParams& params, const CUtensorMap& kv_map, int num_sm_parts,
                          cudaStream_t stream);

// The TMA map of k_cache [num_blocks, 64, h_k, 576] as a 4-D tensor (dim, head, token, block), read
// in 64-token × 64-dim boxes of one head with the 128-byte swizzle.
CUtensorMap make_kv_cache_tma_map(const void* k_cache, bool is_bf16, int64_t num_blocks, int64_t num_heads_k,
                                  int64_t stride_block, int64_t stride_token, int64_t stride_head);

}  // namespace hopperkit::mla
