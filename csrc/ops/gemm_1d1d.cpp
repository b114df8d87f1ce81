// FP8 GEMM ops with the 1d1d recipe (1×128 scales on A and B, FP32 D = C + A·Bᵀ): the dense weight
// gradient (`fp8_gemm_nt` with recipe (1, 1, 128)) and the k-grouped MoE weight gradient.
#include <algorithm>
#include <cstdlib>
#include <optional>
#include <vector>

#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "common/tma.h"
#include "gemm/fp8_1d1d/params.h"
#include "gemm/instantiations.h"
#include "ops/checks.h"

namespace hopperkit::ops {
namespace {

constexpr int64_t kBlockK = 128;

int64_t align4(int64_t x) { return (x + 3) / 4 * 4; }

// The tile configuration: the heuristic's, or the one the tuning knob HOPPERKIT_FP8_1D1D_CONFIG=
// BLOCK_M,BLOCK_N names (read per call; for benchmarks). Chosen before the op writes anything, so
// that a forced tile without an instantiation is refused with D untouched.
gemm::Fp8Gemm1d1dConfig choose_config(int64_t m) {
  gemm::Fp8Gemm1d1dConfig config = gemm::choose_fp8_1d1d_config(static_cast<int>(m));
  if (const char* forced = std::getenv("HOPPERKIT_FP8_1D1D_CONFIG")) {
    std::vector<int> v;
    HK_CHECK_VALUE(parse_int_list(forced, v) && v.size() == 2,
                   "HOPPERKIT_FP8_1D1D_CONFIG must be BLOCK_M,BLOCK_N, got '", forced, "'");
    config = {v[0], v[1]};
    HK_CHECK_VALUE(gemm::fp8_1d1d_compiled(config), "no FP8 1d1d GEMM compiled for BLOCK_M=", v[0], " BLOCK_N=", v[1],
                   " (HOPPERKIT_FP8_1D1D_CONFIG=", forced, ")", gemm::instantiations_hint("fp8_1d1d"));
  }
  return config;
}

// Scales [rows, kb] MN-major and TMA-aligned: element (r, k) at k·align(rows, 4) + r.
void check_mn_major_scales(const at::Tensor& sf, const char* name, int64_t rows, int64_t kb, const at::Tensor& a) {
  check_cuda_tensor(sf, name, at::kFloat);
  const int64_t ld = align4(rows);
  HK_CHECK_VALUE(sf.dim() == 2 && sf.size(0) == rows && sf.size(1) == kb && (rows <= 1 || sf.stride(0) == 1) &&
                     (kb <= 1 || sf.stride(1) == ld) && reinterpret_cast<uintptr_t>(sf.data_ptr()) % 16 == 0,
                 name, " must be [", rows, ", ", kb, "] MN-major and TMA-aligned (strides (1, ", ld,
                 "), see get_mn_major_tma_aligned_tensor), got shape ", sf.sizes(), " strides ", sf.strides());
  check_same_device(sf, a, name, "a");
}

// FP32 output (or C) with row-major rows of 16-byte multiples, [rows, cols] or [G, rows, cols].
void check_f32_output(const at::Tensor& t, const char* name, at::IntArrayRef shape, const at::Tensor& a) {
  check_cuda_tensor(t, name, at::kFloat);
  bool ok = t.sizes() == shape && (t.size(-1) <= 1 || t.stride(-1) == 1) &&
            (t.numel() == 0 || reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0);
  for (int64_t i = 0; ok && i + 1 < t.dim(); ++i) ok = t.size(i) <= 1 || t.stride(i) % 4 == 0;
  HK_CHECK_VALUE(ok, name, " must be a row-major float32 ", shape,
                 " tensor with 16-byte aligned rows (strides multiples of 4), got shape ", t.sizes(), " strides ",
                 t.strides());
  check_same_device(t, a, name, "a");
}

// D is stored and reduce-added by TMA, which clips a box at 16-byte granularity along a row (the
// BF16 op's set_tma_store says what a test saw): N a multiple of 4 floats keeps every write inside
// D's rows. The Python API takes other N to the reference path.
void check_store_cols(int64_t n) {
  HK_CHECK_VALUE(n % 4 == 0, "N must be a multiple of 4 (16-byte rows of the FP32 D that TMA stores), got ", n);
}

// D [G, M, N] f32 as a 3-D map (G = 1 for the dense GEMM), box [1, 64, 32] with the 128B swizzle: the
// staging layout of the epilogue (one 64-row × 32-column chunk per TMA store).
CUtensorMap d_map(const at::Tensor& d, int64_t g, int64_t m, int64_t n, int64_t row_stride, int64_t group_stride) {
  const uint64_t dims[3] = {static_cast<uint64_t>(n), static_cast<uint64_t>(m), static_cast<uint64_t>(g)};
  const uint64_t strides[2] = {static_cast<uint64_t>(row_stride) * 4, static_cast<uint64_t>(group_stride) * 4};
  const uint32_t box[3] = {32, 64, 1};
  return make_tma_nd<3>(d.data_ptr(), CU_TENSOR_MAP_DATA_TYPE_FLOAT32, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B);
}

CUtensorMap fp8_k_major_map(const void* base, int64_t rows, int64_t k, int64_t row_stride, int box_rows) {
  return make_tma_2d(base, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, k, rows, row_stride, 128, box_rows,
                     CU_TENSOR_MAP_SWIZZLE_128B);
}

// Scales [kb, align(rows, 4)] (MN-major) read one K block of box_rows scales at a time.
CUtensorMap scales_map(const at::Tensor& sf, int64_t rows, int64_t kb, int box_rows) {
  return make_tma_2d(sf.data_ptr(), CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, rows, kb, align4(rows), box_rows, 1,
                     CU_TENSOR_MAP_SWIZZLE_NONE);
}

}  // namespace

void fp8_gemm_nt_1d1d(const at::Tensor& a, const at::Tensor& sfa, const at::Tensor& b, const at::Tensor& sfb,
                      at::Tensor& d, const std::optional<at::Tensor>& c, int64_t num_sms, bool pdl) {
  check_fp8_k_major(a, "a");
  check_fp8_k_major(b, "b");
  HK_CHECK_VALUE(b.size(1) == a.size(1), "b must be [N, ", a.size(1), "] (K of a), got ", b.sizes());
  const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
  const int64_t kb = (k + kBlockK - 1) / kBlockK;
  HK_CHECK_VALUE(m <= kMaxGemmDim && n <= kMaxGemmDim && k <= kMaxGemmDim, "M, N, K must be at most 2^31 - 256, got ", m, ", ", n, ", ",
                 k);
  check_same_device(b, a, "b", "a");
  check_mn_major_scales(sfa, "sfa", m, kb, a);
  check_mn_major_scales(sfb, "sfb", n, kb, a);
  check_f32_output(d, "d", {m, n}, a);
  check_output_elements_disjoint(d, "d");
  if (c.has_value()) check_f32_output(*c, "c", {m, n}, a);
  check_d_apart(d, {{&a, "a"}, {&sfa, "sfa"}, {&b, "b"}, {&sfb, "sfb"}});
  check_store_cols(n);
  check_num_sms(num_sms);
  if (m == 0 || n == 0) return;
  c10::cuda::CUDAGuard guard(a.device());
  const bool in_place = c.has_value() && c_is_d(*c, d);
  if (k == 0) {  // D = C (or 0): nothing to multiply
    if (!c.has_value()) {
      d.zero_();
    } else if (!in_place) {
      d.copy_(*c);
    }
    return;
  }
  check_sm90(a);
  const gemm::Fp8Gemm1d1dConfig config = choose_config(m);
  if (c.has_value() && !in_place) d.copy_(*c);

  gemm::Fp8Gemm1d1dParams p;
  p.tma_a = fp8_k_major_map(a.data_ptr(), m, k, tma_row_stride(a), config.block_m);
  p.tma_b = fp8_k_major_map(b.data_ptr(), n, k, tma_row_stride(b), config.block_n);
  p.tma_sfa = scales_map(sfa, m, kb, config.block_m);
  p.tma_sfb = scales_map(sfb, n, kb, config.block_n);
  const int64_t ldd = m == 1 ? align4(n) : d.stride(0);
  p.tma_d = d_map(d, 1, m, n, ldd, ldd * m);
  p.accumulate = c.has_value();
  p.m = static_cast<int>(m);
  p.n = static_cast<int>(n);
  p.k = static_cast<int>(k);
  gemm::run_fp8_gemm_1d1d(p, config, static_cast<int>(num_sms), pdl, c10::cuda::getCurrentCUDAStream());
}

void k_grouped_fp8_gemm_nt_contiguous_1d1d(const at::Tensor& a, const at::Tensor& sfa, const at::Tensor& b,
                                           const at::Tensor& sfb, at::Tensor& d, at::IntArrayRef ks,
                                           const at::Tensor& ks_tensor, const std::optional<at::Tensor>& c,
                                           int64_t num_sms, bool pdl) {
  check_cuda_tensor(d, "d", at::kFloat);
  HK_CHECK_VALUE(d.dim() == 3, "d must be float32 [G, M, N], got shape ", d.sizes());
  const int64_t g = d.size(0), m = d.size(1), n = d.size(2);
  const int64_t sum_k = check_k_group_sizes(ks, ks_tensor, g, d, "d");
  const int64_t kb_total = sum_k / kBlockK;
  HK_CHECK_VALUE(g <= kMaxGemmDim && m <= kMaxGemmDim && n <= kMaxGemmDim && kb_total <= kMaxGemmDim,
                 "G, M, N and Σks/128 must be at most 2^31 - 256, got ", g, ", ", m, ", ", n, ", ", kb_total);
  check_grouped_rows(g, m, "M");
  check_cuda_tensor(a, "a", at::kFloat8_e4m3fn);
  check_cuda_tensor(b, "b", at::kFloat8_e4m3fn);
  HK_CHECK_VALUE(a.is_contiguous() && a.numel() == m * sum_k, "a must be a contiguous FP8 buffer of M·Σks = ",
                 m * sum_k, " elements, got shape ", a.sizes(), " strides ", a.strides());
  HK_CHECK_VALUE(b.is_contiguous() && b.numel() == n * sum_k, "b must be a contiguous FP8 buffer of N·Σks = ",
                 n * sum_k, " elements, got shape ", b.sizes(), " strides ", b.strides());
  HK_CHECK_VALUE(a.numel() == 0 || reinterpret_cast<uintptr_t>(a.data_ptr()) % 16 == 0, "a must be 16-byte aligned");
  HK_CHECK_VALUE(b.numel() == 0 || reinterpret_cast<uintptr_t>(b.data_ptr()) % 16 == 0, "b must be 16-byte aligned");
  check_same_device(b, a, "b", "a");
  check_mn_major_scales(sfa, "sfa", m, kb_total, a);
  check_mn_major_scales(sfb, "sfb", n, kb_total, a);
  check_f32_output(d, "d", {g, m, n}, a);
  check_output_elements_disjoint(d, "d");
  if (c.has_value()) check_f32_output(*c, "c", {g, m, n}, a);
  check_d_apart(d, {{&a, "a"}, {&sfa, "sfa"}, {&b, "b"}, {&sfb, "sfb"}, {&ks_tensor, "ks_tensor"}});
  check_store_cols(n);
  check_num_sms(num_sms);
  if (g == 0 || m == 0 || n == 0) return;
  c10::cuda::CUDAGuard guard(a.device());
  const bool in_place = c.has_value() && c_is_d(*c, d);
  if (sum_k == 0) return store_empty_k_grouped(d, c, in_place);
  check_sm90(a);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const gemm::Fp8Gemm1d1dConfig config = choose_config(m);
  if (c.has_value() && !in_place) d.copy_(*c);

  // The group sizes are read on the device (ks_tensor), so nothing below depends on their values on
  // the host and the call can be captured in a CUDA graph: the group-maps kernel writes each group's
  // A and B maps and the K-block prefix into one device table, which the GEMM reads. Σks (the host
  // list) only sizes the buffers, whose bounds the maps never cross.
  const int64_t maps_bytes = 2 * g * static_cast<int64_t>(sizeof(CUtensorMap));
  const int64_t total_bytes = maps_bytes + (g + 1) * static_cast<int64_t>(sizeof(int32_t));
  at::Tensor device_tables = at::empty({total_bytes}, a.options().dtype(at::kByte));
  gemm::KGroupedMapsParams maps;
  maps.a_template = fp8_k_major_map(a.data_ptr(), m, kBlockK, kBlockK, config.block_m);
  maps.b_template = fp8_k_major_map(b.data_ptr(), n, kBlockK, kBlockK, config.block_n);
  maps.ks = ks_tensor.data_ptr<int32_t>();
  maps.a = static_cast<const uint8_t*>(a.data_ptr());
  maps.b = static_cast<const uint8_t*>(b.data_ptr());
  maps.m = m;
  maps.n = n;
  maps.sum_k = sum_k;
  maps.groups = static_cast<int>(g);
  maps.maps = reinterpret_cast<CUtensorMap*>(device_tables.data_ptr());
  maps.kb_prefix = reinterpret_cast<int32_t*>(device_tables.data_ptr<uint8_t>() + maps_bytes);
  gemm::run_k_grouped_maps(maps, stream);

  gemm::Fp8Gemm1d1dParams p;
  p.layout = gemm::GemmLayout::kKGroupedContiguous;
  p.num_groups = static_cast<int>(g);
  p.group_maps = maps.maps;
  p.kb_prefix = maps.kb_prefix;
  p.tma_sfa = scales_map(sfa, m, kb_total, config.block_m);
  p.tma_sfb = scales_map(sfb, n, kb_total, config.block_n);
  const int64_t ldd = m == 1 ? align4(n) : d.stride(1);
  const int64_t ldg = g == 1 ? ldd * m : d.stride(0);
  p.tma_d = d_map(d, g, m, n, ldd, ldg);
  p.accumulate = c.has_value();
  p.m = static_cast<int>(m);
  p.n = static_cast<int>(n);
  p.k = static_cast<int>(std::min<int64_t>(sum_k, INT32_MAX));  // unused by the k-grouped kernel
  gemm::run_fp8_gemm_1d1d(p, config, static_cast<int>(num_sms), pdl, stream);
}

}  // namespace hopperkit::ops

TORCH_LIBRARY_FRAGMENT(hopperkit, m) {
  m.def(
      "fp8_gemm_nt_1d1d(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(a!) d, Tensor? c, int num_sms, "
      "bool pdl=False) -> ()");
  m.def(
      "k_grouped_fp8_gemm_nt_contiguous_1d1d(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(a!) d, int[] ks, "
      "Tensor ks_tensor, Tensor? c, int num_sms, bool pdl=False) -> ()");
}

TORCH_LIBRARY_IMPL(hopperkit, CUDA, m) {
  m.impl("fp8_gemm_nt_1d1d", &hopperkit::ops::fp8_gemm_nt_1d1d);
  m.impl("k_grouped_fp8_gemm_nt_contiguous_1d1d", &hopperkit::ops::k_grouped_fp8_gemm_nt_contiguous_1d1d);
}
