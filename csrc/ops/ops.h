// Host entry points of the torch ops. Each validates its inputs (cheap shape/dtype/stride checks
// only: nothing here reads device memory or synchronizes) and launches.
#pragma once

#include <optional>
#include <string>
#include <tuple>

#include <ATen/core/Tensor.h>

namespace hopperkit::ops {

std::string build_info();

std::tuple<at::Tensor, at::Tensor> get_mla_metadata(const at::Tensor& lengths, int64_t num_sm_parts,
                                                    bool empty_as_one_block);

void mla_combine(const at::Tensor& o_accum, const at::Tensor& lse_accum, const at::Tensor& num_splits,
                 at::Tensor& out, at::Tensor& lse, const std::optional<at::Tensor>& attn_sink, bool pdl);

// Dense MLA decode (main kernel + combine): (out [b, s_q, h_q, 512] in q's dtype, lse f32 [b, h_q, s_q]).
std::tuple<at::Tensor, at::Tensor> mla_dense_decode(const at::Tensor& q, const at::Tensor& k_cache,
                                                    const at::Tensor& block_table, const at::Tensor& cache_seqlens,
                                                    const at::Tensor& tile_scheduler_metadata,
                                                    const at::Tensor& num_splits, double softmax_scale, bool causal);

// MoE grouped FP8 GEMMs, 1d2d recipe (gemm.cpp); sfa already MN-major and TMA-aligned.
void m_grouped_fp8_gemm_nt_contiguous_1d2d(const at::Tensor& a, const at::Tensor& sfa, const at::Tensor& b,
                                           const at::Tensor& sfb, at::Tensor& d, const at::Tensor& m_indices,
                                           int64_t num_sms, bool pdl);
void m_grouped_fp8_gemm_nt_masked_1d2d(const at::Tensor& a, const at::Tensor& sfa, const at::Tensor& b,
                                       const at::Tensor& sfb, at::Tensor& d, const at::Tensor& masked_m,
                                       int64_t expected_m, int64_t num_sms, bool pdl);

// FP8 casts (quant.cpp): (float8_e4m3fn [m, n], float32 scales). Per-token scales are [m, ceil(n/128)]
// with strides (1, align(m, 4)); per-block scales are [ceil(m/128), ceil(n/128)] contiguous.
std::tuple<at::Tensor, at::Tensor> per_token_cast_to_fp8(const at::Tensor& x, bool use_ue8m0);
std::tuple<at::Tensor, at::Tensor> per_block_cast_to_fp8(const at::Tensor& x, bool use_ue8m0);

}  // namespace hopperkit::ops
