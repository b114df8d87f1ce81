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

// FP8 casts (quant.cpp): (float8_e4m3fn [m, n], float32 scales). Per-token scales are [m, ceil(n/128)]
// with strides (1, align(m, 4)); per-block scales are [ceil(m/128), ceil(n/128)] contiguous.
std::tuple<at::Tensor, at::Tensor> per_token_cast_to_fp8(const at::Tensor& x, bool use_ue8m0);
std::tuple<at::Tensor, at::Tensor> per_block_cast_to_fp8(const at::Tensor& x, bool use_ue8m0);

}  // namespace hopperkit::ops
