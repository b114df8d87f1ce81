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

}  // namespace hopperkit::ops
