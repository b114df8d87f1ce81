// MLA decode ops: scheduler metadata and the split-KV combine.
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>

#include "mla/combine/combine.h"
#include "mla/dense_decode/params.h"
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
  HK_CHECK_VALUE(reinterpret_cast<uintptr_t>(o_accum.data_ptr()) % 16 == 0,
                 "o_accum must be 16-byte aligned (it is read in 16-byte vectors)");
  check_output_no_self_overlap(out, "out");
  check_output_no_self_overlap(lse, "lse");
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

namespace {

bool aligned_16b(const at::Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 && t.stride(0) % 8 == 0 && t.stride(1) % 8 == 0 &&
         t.stride(2) % 8 == 0;
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> mla_dense_decode(const at::Tensor& q, const at::Tensor& k_cache,
                                                    const at::Tensor& block_table, const at::Tensor& cache_seqlens,
                                                    const at::Tensor& tile_scheduler_metadata,
                                                    const at::Tensor& num_splits, double softmax_scale, bool causal) {
  HK_CHECK_VALUE(q.is_cuda(), "q must be a CUDA tensor, got one on ", q.device());
  HK_CHECK_TYPE(q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf, "q must be bfloat16 or float16, got ",
                q.scalar_type());
  check_cuda_tensor(k_cache, "k_cache", q.scalar_type());
  check_cuda_tensor(block_table, "block_table", at::kInt);
  check_cuda_tensor(cache_seqlens, "cache_seqlens", at::kInt);
  check_cuda_tensor(tile_scheduler_metadata, "tile_scheduler_metadata", at::kInt);
  check_cuda_tensor(num_splits, "num_splits", at::kInt);
  for (const at::Tensor* t : {&k_cache, &block_table, &cache_seqlens, &tile_scheduler_metadata, &num_splits}) {
    check_same_device(*t, q, "all tensors", "q");
  }
  HK_CHECK_VALUE(q.dim() == 4 && q.size(3) == 576 && q.stride(3) == 1, "q must be [b, s_q, h_q, 576] with a contiguous last dim, got ",
                 q.sizes(), " strides ", q.strides());
  const int64_t batch = q.size(0), s_q = q.size(1), h_q = q.size(2);
  HK_CHECK_VALUE(batch >= 1 && s_q >= 1 && h_q >= 1, "q must not be empty, got ", q.sizes());
  HK_CHECK_VALUE(aligned_16b(q), "q needs 16-byte alignment and strides that are multiples of 8 elements, got strides ",
                 q.strides());
  HK_CHECK_VALUE(k_cache.dim() == 4 && k_cache.size(1) == 64 && k_cache.size(3) == 576 && k_cache.stride(3) == 1,
                 "k_cache must be [num_blocks, 64, h_k, 576] with a contiguous last dim, got ", k_cache.sizes(),
                 " strides ", k_cache.strides());
  HK_CHECK_VALUE(aligned_16b(k_cache), "k_cache needs 16-byte alignment and strides that are multiples of 8 elements, got strides ",
                 k_cache.strides());
  const int64_t num_blocks = k_cache.size(0), h_k = k_cache.size(2);
  HK_CHECK_VALUE(num_blocks >= 1 && h_k >= 1, "k_cache must hold at least one block and one KV head, got ",
                 k_cache.sizes());
  HK_CHECK_VALUE(h_q % h_k == 0, "h_q (", h_q, ") must be a multiple of h_k (", h_k, ")");
  HK_CHECK_VALUE(block_table.dim() == 2 && block_table.size(0) == batch &&
                     (block_table.stride(1) == 1 || block_table.size(1) == 1) && block_table.size(1) >= 1,
                 "block_table must be [", batch, ", max_blocks] with a contiguous last dim, got ", block_table.sizes());
  HK_CHECK_VALUE(cache_seqlens.dim() == 1 && cache_seqlens.size(0) == batch && cache_seqlens.is_contiguous(),
                 "cache_seqlens must be contiguous [", batch, "], got ", cache_seqlens.sizes());
  HK_CHECK_VALUE(tile_scheduler_metadata.dim() == 2 && tile_scheduler_metadata.size(1) == 8 &&
                     tile_scheduler_metadata.is_contiguous() && tile_scheduler_metadata.size(0) >= 1,
                 "tile_scheduler_metadata must be contiguous [num_sm_parts, 8], got ", tile_scheduler_metadata.sizes());
  HK_CHECK_VALUE(num_splits.dim() == 1 && num_splits.size(0) == batch + 1 && num_splits.is_contiguous(),
                 "num_splits must be contiguous [", batch + 1, "], got ", num_splits.sizes(),
                 " (metadata built for another batch size?)");
  HK_CHECK_VALUE(softmax_scale > 0.0 && std::isfinite(softmax_scale), "softmax_scale must be positive and finite, got ",
                 softmax_scale);
  const int64_t heads_per_kv = h_q / h_k;
  const int64_t rows = s_q * heads_per_kv;
  const int64_t m_tiles = (rows + 63) / 64;
  const int64_t parts = tile_scheduler_metadata.size(0);
  HK_CHECK_VALUE(m_tiles <= 65535 && h_k <= 65535 && parts <= 65535 && batch < (int64_t{1} << 24),
                 "decode grid too large: ", m_tiles, " query tiles × ", h_k, " KV heads × ", parts, " partitions");
  // The combine that follows puts a request's query rows on grid.y (checked here, before the decode
  // kernel runs, with the bound mla_combine applies).
  HK_CHECK_VALUE((h_q * s_q * 4 + 7) / 8 <= 65535, "q holds ", s_q * h_q,
                 " query rows per request (s_q * h_q); the combine grid takes at most 131070");
  check_sm90(q);
  c10::cuda::CUDAGuard guard(q.device());

  auto f32 = q.options().dtype(at::kFloat);
  at::Tensor out = at::empty({batch, s_q, h_q, 512}, q.options());
  at::Tensor lse = at::empty({batch, h_q, s_q}, f32);
  const int64_t accum_rows = batch + parts;
  at::Tensor o_accum = at::empty({accum_rows, h_k, rows, 512}, f32);
  at::Tensor lse_accum = at::empty({accum_rows, h_k, rows}, f32);

  mla::DenseDecodeParams p{};
  p.q = q.data_ptr();
  p.q_stride_b = q.stride(0);
  p.q_stride_s = q.stride(1);
  p.q_stride_h = q.stride(2);
  p.out = out.data_ptr();
  p.out_stride_b = out.stride(0);
  p.out_stride_s = out.stride(1);
  p.out_stride_h = out.stride(2);
  p.lse = lse.data_ptr<float>();
  p.lse_stride_b = lse.stride(0);
  p.lse_stride_h = lse.stride(1);
  p.lse_stride_s = lse.stride(2);
  p.o_accum = o_accum.data_ptr<float>();
  p.lse_accum = lse_accum.data_ptr<float>();
  p.block_table = block_table.data_ptr<int32_t>();
  p.block_table_stride = block_table.stride(0);
  p.max_blocks = static_cast<int32_t>(std::min<int64_t>(block_table.size(1), INT32_MAX));
  p.seqlens = cache_seqlens.data_ptr<int32_t>();
  p.sched = reinterpret_cast<const mla::DecodingSchedMeta*>(tile_scheduler_metadata.data_ptr<int32_t>());
  p.num_splits = num_splits.data_ptr<int32_t>();
  p.accum_rows = static_cast<int32_t>(accum_rows);
  p.batch = static_cast<int32_t>(batch);
  p.s_q = static_cast<int32_t>(s_q);
  p.num_heads_k = static_cast<int32_t>(h_k);
  p.heads_per_kv = static_cast<int32_t>(heads_per_kv);
  p.rows_per_kv = static_cast<int32_t>(rows);
  p.scale_log2 = static_cast<float>(softmax_scale * 1.4426950408889634);
  p.causal = causal && s_q > 1;
  // One query tile per KV head: nobody else reads these KV bytes, let them leave L2 first. With
  // several tiles, the CTAs of the other tiles read the same blocks at about the same time.
  p.kv_evict_first = m_tiles == 1;

  const CUtensorMap kv_map = mla::make_kv_cache_tma_map(k_cache.data_ptr(), q.scalar_type() == at::kBFloat16, num_blocks,
                                                        h_k, k_cache.stride(0), k_cache.stride(1), k_cache.stride(2));
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  if (q.scalar_type() == at::kBFloat16) {
    mla::run_mla_dense_decode<__nv_bfloat16>(p, kv_map, static_cast<int>(parts), stream);
    launch_combine<__nv_bfloat16>(o_accum, lse_accum, num_splits, out, lse, std::nullopt, /*pdl=*/true);
  } else {
    mla::run_mla_dense_decode<__half>(p, kv_map, static_cast<int>(parts), stream);
    launch_combine<__half>(o_accum, lse_accum, num_splits, out, lse, std::nullopt, /*pdl=*/true);
  }
  return {out, lse};
}

}  // namespace hopperkit::ops

TORCH_LIBRARY_FRAGMENT(hopperkit, m) {
  m.def("get_mla_metadata(Tensor lengths, int num_sm_parts, bool empty_as_one_block) -> (Tensor, Tensor)");
  m.def(
      "mla_combine(Tensor o_accum, Tensor lse_accum, Tensor num_splits, Tensor(a!) out, Tensor(b!) lse, "
      "Tensor? attn_sink, bool pdl=True) -> ()");
  m.def(
      "mla_dense_decode(Tensor q, Tensor k_cache, Tensor block_table, Tensor cache_seqlens, "
      "Tensor tile_scheduler_metadata, Tensor num_splits, float softmax_scale, bool causal) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(hopperkit, CUDA, m) {
  m.impl("get_mla_metadata", &hopperkit::ops::get_mla_metadata);
  m.impl("mla_combine", &hopperkit::ops::mla_combine);
  m.impl("mla_dense_decode", &hopperkit::ops::mla_dense_decode);
}
