// FP8 quantization ops: per-token (1×128) and per-block (128×128) casts to float8_e4m3fn with float32
// scales, bit-identical to hopperkit.reference.quant.
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <torch/library.h>

#include "ops/checks.h"
#include "ops/ops.h"
#include "quant/cast.h"

namespace hopperkit::ops {

namespace {

// x: 2-D bf16/fp16/fp32 CUDA tensor with a dense last dimension (any row stride; the kernels take a
// scalar-access path when rows are not 16-byte aligned). The Python wrappers make other layouts dense.
void check_cast_input(const at::Tensor& x) {
  HK_CHECK_VALUE(x.is_cuda(), "x must be a CUDA tensor, got one on ", x.device());
  HK_CHECK_TYPE(x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kHalf || x.scalar_type() == at::kFloat,
                "x must be bfloat16, float16 or float32, got ", x.scalar_type());
  HK_CHECK_VALUE(x.dim() == 2, "x must be 2-D [m, n], got shape ", x.sizes());
  HK_CHECK_VALUE(x.size(1) <= 1 || x.stride(1) == 1,
                 "x must have a contiguous last dimension (stride 1), got strides ", x.strides(),
                 "; call .contiguous() first (the hopperkit Python wrappers do)");
  HK_CHECK_VALUE(x.size(0) <= INT32_MAX && x.size(1) <= INT32_MAX, "x must have fewer than 2^31 rows and columns, got ",
                 x.sizes());
}

template <typename T>
const T* input_ptr(const at::Tensor& x) {
  return reinterpret_cast<const T*>(x.const_data_ptr());
}

template <typename T>
void launch_per_token(const at::Tensor& x, at::Tensor& out, at::Tensor& sf_storage, int64_t sf_stride, bool use_ue8m0) {
  quant::PerTokenCastParams<T> p;
  p.x = input_ptr<T>(x);
  p.x_row_stride = row_stride(x);
  p.out = reinterpret_cast<uint8_t*>(out.data_ptr());
  p.sf = sf_storage.data_ptr<float>();
  p.m = static_cast<int32_t>(x.size(0));
  p.n = static_cast<int32_t>(x.size(1));
  p.sf_stride = static_cast<int32_t>(sf_stride);
  p.use_ue8m0 = use_ue8m0;
  quant::run_per_token_cast<T>(p, c10::cuda::getCurrentCUDAStream());
}

template <typename T>
void launch_per_block(const at::Tensor& x, at::Tensor& out, at::Tensor& sf, bool use_ue8m0) {
  quant::PerBlockCastParams<T> p;
  p.x = input_ptr<T>(x);
  p.x_row_stride = row_stride(x);
  p.out = reinterpret_cast<uint8_t*>(out.data_ptr());
  p.sf = sf.data_ptr<float>();
  p.m = static_cast<int32_t>(x.size(0));
  p.n = static_cast<int32_t>(x.size(1));
  p.use_ue8m0 = use_ue8m0;
  quant::run_per_block_cast<T>(p, c10::cuda::getCurrentCUDAStream());
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> per_token_cast_to_fp8(const at::Tensor& x, bool use_ue8m0) {
  check_cast_input(x);
  const int64_t m = x.size(0), n = x.size(1);
  const int64_t num_blocks = ceil_div(n, quant::kScaleBlock);
  const int64_t sf_stride = ceil_div(m, 4) * 4;  // TMA: every column starts on a 16-byte boundary
  HK_CHECK_VALUE(ceil_div(m * ceil_div(n, 512), 8) <= quant::kPerTokenMaxCtas, "x of shape ", x.sizes(),
                 " is too large for the per-token cast grid");
  c10::cuda::CUDAGuard guard(x.device());

  at::Tensor out = at::empty({m, n}, x.options().dtype(at::kFloat8_e4m3fn));
  // MN-major, TMA-aligned: [num_blocks, align(m, 4)] storage viewed as [m, num_blocks]. The kernel writes
  // every element of the storage, padding rows as 0.
  at::Tensor sf_storage = at::empty({num_blocks * sf_stride}, x.options().dtype(at::kFloat));
  at::Tensor sf = sf_storage.as_strided({m, num_blocks}, {1, sf_stride});
  if (m == 0 || n == 0) return {out, sf};
  check_sm90(x);
  switch (x.scalar_type()) {
    case at::kBFloat16: launch_per_token<__nv_bfloat16>(x, out, sf_storage, sf_stride, use_ue8m0); break;
    case at::kHalf: launch_per_token<__half>(x, out, sf_storage, sf_stride, use_ue8m0); break;
    default: launch_per_token<float>(x, out, sf_storage, sf_stride, use_ue8m0); break;
  }
  return {out, sf};
}

std::tuple<at::Tensor, at::Tensor> per_block_cast_to_fp8(const at::Tensor& x, bool use_ue8m0) {
  check_cast_input(x);
  const int64_t m = x.size(0), n = x.size(1);
  const int64_t tile_rows = ceil_div(m, quant::kScaleBlock), tile_cols = ceil_div(n, quant::kScaleBlock);
  HK_CHECK_VALUE(tile_rows <= quant::kPerBlockMaxTileRows, "x may have at most ",
                 quant::kPerBlockMaxTileRows * quant::kScaleBlock, " rows for the per-block cast grid, got ", m);
  c10::cuda::CUDAGuard guard(x.device());

  at::Tensor out = at::empty({m, n}, x.options().dtype(at::kFloat8_e4m3fn));
  at::Tensor sf = at::empty({tile_rows, tile_cols}, x.options().dtype(at::kFloat));
  if (m == 0 || n == 0) return {out, sf};
  check_sm90(x);
  switch (x.scalar_type()) {
    case at::kBFloat16: launch_per_block<__nv_bfloat16>(x, out, sf, use_ue8m0); break;
    case at::kHalf: launch_per_block<__half>(x, out, sf, use_ue8m0); break;
    default: launch_per_block<float>(x, out, sf, use_ue8m0); break;
  }
  return {out, sf};
}

}  // namespace hopperkit::ops

TORCH_LIBRARY_FRAGMENT(hopperkit, m) {
  m.def("per_token_cast_to_fp8(Tensor x, bool use_ue8m0) -> (Tensor, Tensor)");
  m.def("per_block_cast_to_fp8(Tensor x, bool use_ue8m0) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(hopperkit, CUDA, m) {
  m.impl("per_token_cast_to_fp8", &hopperkit::ops::per_token_cast_to_fp8);
  m.impl("per_block_cast_to_fp8", &hopperkit::ops::per_block_cast_to_fp8);
}
