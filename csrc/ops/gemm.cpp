// GEMM ops.
#include <cstdio>
#include <cstdlib>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "common/tma.h"
#include "gemm/fp8_1d2d/params.h"
#include "gemm/heuristics.h"
#include "ops/checks.h"

namespace hopperkit::ops {
namespace {

void check_fp8_k_major(const at::Tensor& t, const char* name) {
  check_cuda_tensor(t, name, at::kFloat8_e4m3fn);
  HK_CHECK_VALUE(t.dim() == 2 && t.stride(1) == 1 && t.stride(0) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0,
                 name, " must be a K-major [rows, K] FP8 tensor with 16-byte aligned rows, got shape ", t.sizes(),
                 " strides ", t.strides());
}

}  // namespace

void fp8_gemm_nt_1d2d(const at::Tensor& a, const at::Tensor& sfa, const at::Tensor& b, const at::Tensor& sfb,
                      at::Tensor& d, int64_t num_sms, bool pdl) {
  check_fp8_k_major(a, "a");
  check_fp8_k_major(b, "b");
  const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
  const int64_t k_blocks = (k + 127) / 128;
  HK_CHECK_VALUE(b.size(1) == k, "b must be [N, ", k, "], got ", b.sizes());
  HK_CHECK_VALUE(m >= 1 && n >= 1 && k >= 1 && m < INT32_MAX && n < INT32_MAX && k < INT32_MAX,
                 "M, N, K must be in [1, 2^31), got ", m, ", ", n, ", ", k);
  HK_CHECK_VALUE(n % 8 == 0, "N must be a multiple of 8, got ", n);
  check_cuda_tensor(sfa, "sfa", at::kFloat);
  const int64_t sfa_ld = (m + 3) / 4 * 4;
  HK_CHECK_VALUE(sfa.dim() == 2 && sfa.size(0) == m && sfa.size(1) == k_blocks && (m == 1 || sfa.stride(0) == 1) &&
                     (k_blocks == 1 || sfa.stride(1) == sfa_ld) && reinterpret_cast<uintptr_t>(sfa.data_ptr()) % 16 == 0,
                 "sfa must be [", m, ", ", k_blocks, "] MN-major and TMA-aligned (strides (1, ", sfa_ld,
                 "), see get_mn_major_tma_aligned_tensor), got shape ", sfa.sizes(), " strides ", sfa.strides());
  check_cuda_tensor(sfb, "sfb", at::kFloat);
  HK_CHECK_VALUE(sfb.dim() == 2 && sfb.size(0) == (n + 127) / 128 && sfb.size(1) == k_blocks, "sfb must be [",
                 (n + 127) / 128, ", ", k_blocks, "], got ", sfb.sizes());
  check_cuda_tensor(d, "d", at::kBFloat16);
  HK_CHECK_VALUE(d.dim() == 2 && d.size(0) == m && d.size(1) == n && d.stride(1) == 1 && d.stride(0) % 8 == 0 &&
                     reinterpret_cast<uintptr_t>(d.data_ptr()) % 16 == 0,
                 "d must be a row-major [", m, ", ", n, "] bf16 tensor with 16-byte aligned rows, got shape ", d.sizes(),
                 " strides ", d.strides());
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&sfa, &b, &sfb, &d}) check_same_device(*t, a, "all tensors", "a");
  HK_CHECK_VALUE(num_sms >= 1 && num_sms <= 1024, "num_sms must be in [1, 1024], got ", num_sms);
  check_sm90(a);
  c10::cuda::CUDAGuard guard(a.device());

  gemm::Fp8Gemm1d2dConfig config = gemm::choose_fp8_1d2d_config(static_cast<int>(m), static_cast<int>(n),
                                                                static_cast<int>(num_sms));
  // Tuning knob for benchmarks: HOPPERKIT_FP8_GEMM_CONFIG=BLOCK_M,BLOCK_N,CLUSTER forces a compiled
  // configuration (dispatch refuses one that is not compiled or cannot tile this shape).
  if (const char* forced = std::getenv("HOPPERKIT_FP8_GEMM_CONFIG")) {
    HK_CHECK_VALUE(std::sscanf(forced, "%d,%d,%d", &config.block_m, &config.block_n, &config.cluster_m) == 3,
                   "HOPPERKIT_FP8_GEMM_CONFIG must be BLOCK_M,BLOCK_N,CLUSTER, got '", forced, "'");
  }
  gemm::Fp8Gemm1d2dParams p;
  p.tma_a = make_tma_2d(a.data_ptr(), CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, k, m, a.stride(0), 128, config.block_m,
                        CU_TENSOR_MAP_SWIZZLE_128B);
  p.tma_b = make_tma_2d(b.data_ptr(), CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, k, n, b.stride(0), 128, config.block_n,
                        CU_TENSOR_MAP_SWIZZLE_128B);
  p.tma_sfa = make_tma_2d(sfa.data_ptr(), CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, m, k_blocks,
                          k_blocks == 1 ? sfa_ld : sfa.stride(1), config.block_m, 1, CU_TENSOR_MAP_SWIZZLE_NONE);
  p.sfb = sfb.data_ptr<float>();
  p.sfb_stride_n = sfb.stride(0);
  p.sfb_stride_k = sfb.stride(1);
  p.d = reinterpret_cast<__nv_bfloat16*>(d.data_ptr());
  p.ldd = d.stride(0);
  p.m = static_cast<int>(m);
  p.n = static_cast<int>(n);
  p.k = static_cast<int>(k);
  gemm::run_fp8_gemm_1d2d(p, config, static_cast<int>(num_sms), pdl, c10::cuda::getCurrentCUDAStream());
}

}  // namespace hopperkit::ops

TORCH_LIBRARY_FRAGMENT(hopperkit, m) {
  m.def("fp8_gemm_nt_1d2d(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(a!) d, int num_sms, bool pdl=False) -> ()");
}

TORCH_LIBRARY_IMPL(hopperkit, CUDA, m) { m.impl("fp8_gemm_nt_1d2d", &hopperkit::ops::fp8_gemm_nt_1d2d); }
