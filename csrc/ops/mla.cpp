// MLA decode ops: scheduler metadata and the split-KV combine.
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <torch/library.h>

#include "mla/combine/combine.h"
#include "mla/metadata/metadata.h"
#include "ops/checks.h"
#include "ops/ops.h"

namespace hopperkit::ops {

std::tuple<at::Tensor, at::Tensor> get_mla_metadata(const at::Tensor& lengths, int64_t num_sm_parts,
                                                    bool empty_as_one_block) {
  check_cuda_tensor(lengths, "lengths", at::kInt);
  HK_CHECK_VALUE(lengths.dim() == 1 && lengths.is_contiguous(), "lengths must be a contiguous 1-D tensor [batch], got shape ",
                 lengths.sizes(), " strides ", lengths.strides());
  const int64_t batch = lengths.size(0);
  HK_CHECK_VALUE(batch >= 1 && batch <= mla::kMetadataMaxBatch, "batch size must be in [1, ", mla::kMetadataMaxBatch,
                 "], got ", batch);
  HK_CHECK_VALUE(num_sm_parts >= 1 && num_sm_parts <= 65536, "num_sm_parts must be in [1, 65536], got ", num_sm_parts);
  check_sm90(lengths);
  c10::cuda::CUDAGuard guard(lengths.device());

  auto opts = lengths.options().dtype(at::kInt);
  at::Tensor metadata = at::empty({num_sm_parts, 8}, opts);
  at::Tensor num_splits = at::empty({batch + 1}, opts);
  mla::MetadataParams params;
  params.lengths = lengths.data_ptr<int32_t>();
  params.batch_size = static_cast<int32_t>(batch);
  params.num_sm_parts = static_cast<int32_t>(num_sm_parts);
  params.empty_as_one_block = empty_as_one_block;
  params.tile_scheduler_metadata = reinterpret_cast<mla::DecodingSchedMeta*>(metadata.data_ptr<int32_t>());
  params.num_splits = num_splits.data_ptr<int32_t>();
  mla::run_mla_metadata(params, c10::cuda::getCurrentCUDAStream());
  return {metadata, num_splits};
}

namespace {

template <typename OutT>
void launch_combine(const at::Tensor& o_accum, const at::Tensor& lse_accum, const at::Tensor& num_splits,
                    at::Tensor& out, at::Tensor& lse, const std::optional<at::Tensor>& attn_sink, bool pdl) {
  mla::CombineParams<OutT> p;
  p.o_accum = o_accum.data_ptr<float>();
  p.lse_accum = lse_accum.data_ptr<float>();
  p.num_splits = num_splits.data_ptr<int32_t>();
  p.attn_sink = attn_sink.has_value() ? attn_sink->data_ptr<float>() : nullptr;
  p.out = reinterpret_cast<OutT*>(out.data_ptr());
  p.out_stride_b = out.stride(0);
  p.out_stride_s = out.stride(1);
  p.out_stride_h = out.stride(2);
  p.lse = lse.data_ptr<float>();
  p.lse_stride_b = lse.stride(0);
  p.lse_stride_h = lse.stride(1);
  p.lse_stride_s = lse.stride(2);
  p.batch_size = static_cast<int32_t>(out.size(0));
  p.num_heads_k = static_cast<int32_t>(lse_accum.size(1));
  p.s_q = static_cast<int32_t>(out.size(1));
  p.heads_per_kv = static_cast<int32_t>(out.size(2) / lse_accum.size(1));
  p.num_accum_rows = static_cast<int32_t>(lse_accum.size(0));
  p.pdl = pdl;
  mla::run_mla_combine<OutT>(p, c10::cuda::getCurrentCUDAStream());
}

}  // namespace

void mla_combine(const at::Tensor& o_accum, const at::Tensor& lse_accum, const at::Tensor& num_splits, at::Tensor& out,
                 at::Tensor& lse, const std::optional<at::Tensor>& attn_sink, bool pdl) {
  check_cuda_tensor(o_accum, "o_accum", at::kFloat);
  check_cuda_tensor(lse_accum, "lse_accum", at::kFloat);
  check_cuda_tensor(num_splits, "num_splits", at::kInt);
  check_cuda_tensor(lse, "lse", at::kFloat);
  HK_CHECK_VALUE(out.is_cuda(), "out must be a CUDA tensor, got one on ", out.device());
  HK_CHECK_TYPE(out.scalar_type() == at::kBFloat16 || out.scalar_type() == at::kHalf,
                "out must be bfloat16 or float16, got ", out.scalar_type());
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&lse_accum, &num_splits, &out, &lse}) check_same_device(*t, o_accum, "all tensors", "o_accum");

  HK_CHECK_VALUE(out.dim() == 4 && out.size(3) == mla::kCombineHeadDimV, "out must be [batch, s_q, h_q, ",
                 mla::kCombineHeadDimV, "], got ", out.sizes());
  const int64_t batch = out.size(0), s_q = out.size(1), h_q = out.size(2);
  HK_CHECK_VALUE(batch >= 1 && s_q >= 1 && h_q >= 1, "out must not be empty, got ", out.sizes());
  // 8-byte vector stores of 4 channels: the channel dim is dense and every row starts 8-byte aligned.
  HK_CHECK_VALUE(out.stride(3) == 1 && out.stride(0) % 4 == 0 && out.stride(1) % 4 == 0 && out.stride(2) % 4 == 0 &&
                     reinterpret_cast<uintptr_t>(out.data_ptr()) % 8 == 0,
                 "out needs a contiguous last dim, other strides multiple of 4 and 8-byte alignment; got strides ",
                 out.strides());
  HK_CHECK_VALUE(lse_accum.dim() == 3 && lse_accum.is_contiguous(), "lse_accum must be contiguous [rows, h_k, s_q*h_q/h_k], got ",
                 lse_accum.sizes());
  const int64_t rows = lse_accum.size(0), h_k = lse_accum.size(1);
  HK_CHECK_VALUE(h_k >= 1 && h_q % h_k == 0, "h_q (", h_q, ") must be a multiple of h_k (", h_k, ")");
  HK_CHECK_VALUE(lse_accum.size(2) == s_q * (h_q / h_k), "lse_accum must be [rows, ", h_k, ", ", s_q * (h_q / h_k),
                 "], got ", lse_accum.sizes());
  HK_CHECK_VALUE(rows >= 1 && rows < (int64_t{1} << 31), "lse_accum needs 1 to 2^31-1 rows, got ", rows);
  HK_CHECK_VALUE(o_accum.is_contiguous() && o_accum.dim() == 4 && o_accum.size(0) == rows && o_accum.size(1) == h_k &&
                     o_accum.size(2) == lse_accum.size(2) && o_accum.size(3) == mla::kCombineHeadDimV,
                 "o_accum must be contiguous [", rows, ", ", h_k, ", ", lse_accum.size(2), ", ", mla::kCombineHeadDimV,
                 "], got ", o_accum.sizes(), " strides ", o_accum.strides());
  HK_CHECK_VALUE(num_splits.dim() == 1 && num_splits.is_contiguous() && num_splits.size(0) == batch + 1,
                 "num_splits must be contiguous [batch + 1] = [", batch + 1, "], got ", num_splits.sizes(),
                 " (metadata built for another batch size?)");
  HK_CHECK_VALUE(lse.dim() == 3 && lse.size(0) == batch && lse.size(1) == h_q && lse.size(2) == s_q,
                 "lse must be [", batch, ", ", h_q, ", ", s_q, "], got ", lse.sizes());
  if (attn_sink.has_value()) {
    check_cuda_tensor(*attn_sink, "attn_sink", at::kFloat);
    check_same_device(*attn_sink, o_accum, "attn_sink", "o_accum");
    HK_CHECK_VALUE(attn_sink->dim() == 1 && attn_sink->size(0) == h_q && attn_sink->is_contiguous(),
                   "attn_sink must be contiguous [h_q] = [", h_q, "], got ", attn_sink->sizes());
  }
  HK_CHECK_VALUE(batch <= INT32_MAX && (h_q * s_q * 4 + 7) / 8 <= 65535, "batch or s_q*h_q too large for the combine grid");
  check_sm90(out);
  c10::cuda::CUDAGuard guard(out.device());
  if (out.scalar_type() == at::kBFloat16) {
    launch_combine<__nv_bfloat16>(o_accum, lse_accum, num_splits, out, lse, attn_sink, pdl);
  } else {
    launch_combine<__half>(o_accum, lse_accum, num_splits, out, lse, attn_sink, pdl);
  }
}

}  // namespace hopperkit::ops

TORCH_LIBRARY_FRAGMENT(hopperkit, m) {
  m.def("get_mla_metadata(Tensor lengths, int num_sm_parts, bool empty_as_one_block) -> (Tensor, Tensor)");
  m.def(
      "mla_combine(Tensor o_accum, Tensor lse_accum, Tensor num_splits, Tensor(a!) out, Tensor(b!) lse, "
      "Tensor? attn_sink, bool pdl=True) -> ()");
}

TORCH_LIBRARY_IMPL(hopperkit, CUDA, m) {
  m.impl("get_mla_metadata", &hopperkit::ops::get_mla_metadata);
  m.impl("mla_combine", &hopperkit::ops::mla_combine);
}
