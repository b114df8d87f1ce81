// BF16 GEMM ops: dense D = C + A·Bᵀ (A, B each K- or MN-major), the m-grouped MoE layouts and the
// k-grouped MoE weight gradient.
#include <cstdlib>
#include <optional>
#include <string>

#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "common/tma.h"
#include "common/tuning_knobs.h"
#include "gemm/bf16/params.h"
#include "gemm/heuristics.h"
#include "gemm/instantiations.h"
#include "gemm/tile_store.h"
#include "ops/checks.h"

namespace hopperkit::ops {
namespace {

constexpr int64_t kBf16PerTmaRow = 8;  // TMA strides are multiples of 16 bytes = 8 bf16

bool aligned16(const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

// A stride TMA never steps over (the dimension has one entry) still has to be encoded as a multiple of
// 16 bytes: any such value works.
int64_t tma_stride(const at::Tensor& t, int dim, int64_t inner) {
  return t.size(dim) > 1 ? t.stride(dim) : (inner + kBf16PerTmaRow - 1) / kBf16PerTmaRow * kBf16PerTmaRow;
}

// A dense operand X [rows, K]: K-major when its rows are contiguous, MN-major when its columns are;
// either way the stride TMA steps over must be a multiple of 16 bytes and the base 16-byte aligned.
gemm::OperandMajor check_dense_operand(const at::Tensor& x, const char* name) {
  check_cuda_tensor(x, name, at::kBFloat16);
  HK_CHECK_VALUE(x.dim() == 2, name, " must be 2-D [rows, K], got shape ", x.sizes());
  const int64_t rows = x.size(0), k = x.size(1);
  // TMA also needs the stepped stride to cover the contiguous extent (no overlapping rows).
  const bool k_major =
      (x.stride(1) == 1 || k == 1) && (rows == 1 || (x.stride(0) % kBf16PerTmaRow == 0 && x.stride(0) >= k));
  const bool mn_major =
      (x.stride(0) == 1 || rows == 1) && (k == 1 || (x.stride(1) % kBf16PerTmaRow == 0 && x.stride(1) >= rows));
  HK_CHECK_VALUE(aligned16(x) && (k_major || mn_major), name,
                 " must be K-major (stride(1) == 1) or MN-major (stride(0) == 1) with the other stride a multiple "
                 "of 8 elements (16 bytes) and a 16-byte aligned base (TMA), got shape ",
                 x.sizes(), " strides ", x.strides(), ". The Python API runs other layouts on the reference path.");
  return k_major ? gemm::OperandMajor::kK : gemm::OperandMajor::kMN;
}

CUtensorMap dense_operand_map(const at::Tensor& x, gemm::OperandMajor major, int block_rows) {
  const uint64_t rows = x.size(0), k = x.size(1);
  if (major == gemm::OperandMajor::kK) {
    return make_tma_2d(x.data_ptr(), CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, k, rows, tma_stride(x, 0, k), 64,
                       block_rows, CU_TENSOR_MAP_SWIZZLE_128B);
  }
  // MN-major: the memory is [K, rows] with rows contiguous; boxes of 64 K rows × 64 elements.
  return make_tma_2d(x.data_ptr(), CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, rows, k, tma_stride(x, 1, rows), 64, 64,
                     CU_TENSOR_MAP_SWIZZLE_128B);
}

// The normal layout's K-major A where M ends inside an M block: a second map whose box holds only
// that block's rows, rounded up to 8 (Bf16GemmParams::a_tail_rows says why).
void set_a_tail(gemm::Bf16GemmParams& p, const at::Tensor& a, gemm::OperandMajor major_a, int64_t m, int block_m) {
  const int tail = static_cast<int>(m % block_m);
  if (major_a != gemm::OperandMajor::kK || tail == 0 || tail > block_m - 8) return;
  p.a_tail_rows = (tail + 7) / 8 * 8;
  p.tma_a_tail = dense_operand_map(a, gemm::OperandMajor::kK, p.a_tail_rows);
}

// D (and C) row-major with 16-byte aligned rows: the epilogue stores column pairs as one vector.
void check_output(const at::Tensor& t, const char* name, std::initializer_list<int64_t> shape) {
  HK_CHECK_VALUE(t.is_cuda(), name, " must be a CUDA tensor, got one on ", t.device());
  HK_CHECK_TYPE(t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kFloat, name,
                " must be bfloat16 or float32, got ", t.scalar_type());
  const int64_t align = 16 / t.element_size();
  bool ok = t.sizes().equals(shape) && (t.size(-1) == 1 || t.stride(-1) == 1) && aligned16(t);
  for (int i = 0; ok && i < t.dim() - 1; ++i) ok = t.size(i) == 1 || t.stride(i) % align == 0;
  HK_CHECK_VALUE(ok, name, " must be a row-major ", c10::IntArrayRef(shape), " tensor with 16-byte aligned rows, got shape ",
                 t.sizes(), " strides ", t.strides());
}

// Tuning knob for benchmarks: HOPPERKIT_BF16_GEMM_CONFIG=BLOCK_M,BLOCK_N forces a compiled tile (read per
// call). Dispatch refuses a tile that is not compiled; every compiled BLOCK_M (64, 128) divides the
// 128-row segments of the contiguous layout, so no layout needs a check of its own.
void apply_bf16_config_override(gemm::Bf16GemmConfig& config) {
  if (const char* forced = std::getenv("HOPPERKIT_BF16_GEMM_CONFIG")) {
    std::vector<int> v;
    HK_CHECK_VALUE(parse_int_list(forced, v) && v.size() == 2, "HOPPERKIT_BF16_GEMM_CONFIG must be BLOCK_M,BLOCK_N, got '",
                   forced, "'");
    config.block_m = v[0];
    config.block_n = v[1];
  }
}

// A configuration without an instantiation (a tile or split count forced by a tuning knob) is
// refused here, before the op writes anything (gemm::bf16_gemm_compiled).
void check_bf16_compiled(const gemm::Bf16GemmParams& p, const gemm::Bf16GemmConfig& config) {
  HK_CHECK_VALUE(gemm::bf16_gemm_compiled(p, config), "no BF16 GEMM is compiled for BLOCK_M=", config.block_m,
                 " BLOCK_N=", config.block_n, " with this call's operand majorness and layout",
                 config.k_splits > 1 ? ", split-K into " + std::to_string(config.k_splits) : std::string(),
                 tuning_knobs_note(), gemm::instantiations_hint("bf16"));
}

void check_common(const at::Tensor& a, int64_t num_sms) {
  check_num_sms(num_sms);
  check_sm90(a);
}

void set_output(gemm::Bf16GemmParams& p, const at::Tensor& d) {
  p.output = d.scalar_type() == at::kFloat ? gemm::Bf16GemmOutput::kFp32 : gemm::Bf16GemmOutput::kBf16;
  p.d = d.data_ptr();
  p.ldd = row_stride(d);
}

// A BF16 D without C is written by TMA stores of [64 rows, 64 columns] boxes (gemm/tile_store.cuh):
// 2-D [M, N], or 3-D [G, M_max, N] for the masked layout so that boxes clip at each group's end.
// An FP32 D (normal and k-grouped layouts, C already in D or none) goes by TMA stores or reduce-adds
// of [64 rows, 32 columns] boxes of a 3-D map [G, M, N] (G = 1 for a dense D).
// TMA clips a box at 16-byte granularity along a row (a test saw column N written at N = 7), so an N
// that is not a multiple of 16 bytes (D a view of wider rows) keeps the register path, which stores
// exactly N columns.
void set_tma_store(gemm::Bf16GemmParams& p, const at::Tensor& d) {
  if (p.c != nullptr) return;
  if (p.output == gemm::Bf16GemmOutput::kFp32) {
    if (d.size(-1) % 4 != 0 ||
        (p.layout != gemm::GemmLayout::kNormal && p.layout != gemm::GemmLayout::kKGroupedContiguous)) {
      return;
    }
    p.tma_store_d = true;
    const int64_t groups = d.dim() == 3 ? d.size(0) : 1, rows = d.size(-2);
    const int64_t group_stride = d.dim() == 3 ? group_stride_for_tma(d) : rows * tma_row_stride(d);
    const uint64_t dims[3] = {static_cast<uint64_t>(d.size(-1)), static_cast<uint64_t>(rows),
                              static_cast<uint64_t>(groups)};
    const uint64_t strides[2] = {static_cast<uint64_t>(tma_row_stride(d)) * 4, static_cast<uint64_t>(group_stride) * 4};
    const uint32_t box[3] = {gemm::kStoreBoxColsF32, gemm::kStoreBoxRows, 1};
    p.tma_d = make_tma_nd<3>(d.data_ptr(), CU_TENSOR_MAP_DATA_TYPE_FLOAT32, dims, strides, box,
                             CU_TENSOR_MAP_SWIZZLE_128B);
    return;
  }
  if (d.size(-1) % 8 != 0) return;
  p.tma_store_d = true;
  if (d.dim() == 2) {
    p.tma_d = make_tma_2d(d.data_ptr(), CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, d.size(1), d.size(0), tma_row_stride(d),
                          gemm::kStoreBoxCols, gemm::kStoreBoxRows, CU_TENSOR_MAP_SWIZZLE_128B);
  } else {
    const uint64_t dims[3] = {static_cast<uint64_t>(d.size(2)), static_cast<uint64_t>(d.size(1)),
                              static_cast<uint64_t>(d.size(0))};
    const uint64_t strides[2] = {static_cast<uint64_t>(tma_row_stride(d)) * 2,
                                 static_cast<uint64_t>(group_stride_for_tma(d)) * 2};
    const uint32_t box[3] = {gemm::kStoreBoxCols, gemm::kStoreBoxRows, 1};
    p.tma_d = make_tma_nd<3>(d.data_ptr(), CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, dims, strides, box,
                             CU_TENSOR_MAP_SWIZZLE_128B);
  }
}

// B [G, N, K] of the grouped GEMMs, K-major, as a 3-D map (a box past N reads zeros, never the next group).
CUtensorMap grouped_operand_map(const at::Tensor& x, int block_rows) {
  const uint64_t k = x.size(2);
  const uint64_t dims[3] = {k, static_cast<uint64_t>(x.size(1)), static_cast<uint64_t>(x.size(0))};
  const uint64_t strides[2] = {static_cast<uint64_t>(tma_stride(x, 1, k)) * 2,
                               static_cast<uint64_t>(x.size(0) > 1 ? x.stride(0) : x.size(1) * tma_stride(x, 1, k)) * 2};
  const uint32_t box[3] = {64, static_cast<uint32_t>(block_rows), 1};
  return make_tma_nd<3>(x.data_ptr(), CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B);
}

void check_grouped_operand(const at::Tensor& x, const char* name) {
  check_cuda_tensor(x, name, at::kBFloat16);
  HK_CHECK_VALUE(x.dim() == 3, name, " must be 3-D, got shape ", x.sizes());
  bool ok = (x.size(2) == 1 || x.stride(2) == 1) && aligned16(x);
  for (int i = 0; ok && i < 2; ++i) ok = x.size(i) == 1 || (x.stride(i) % kBf16PerTmaRow == 0 && x.stride(i) >= x.size(2));
  HK_CHECK_VALUE(ok, name, " must be K-major (stride(-1) == 1) with strides multiples of 8 elements (16 bytes) and a "
                 "16-byte aligned base (TMA), got shape ", x.sizes(), " strides ", x.strides());
}

// Split-K's two counts for `config` on an m × n × k problem (through the workspace, and the upper
// bound for the launcher's fixup within a cluster; gemm/bf16/README.md "Decode-sized M"), both
// forced by HOPPERKIT_BF16_GEMM_SPLITS, the cluster one dropped by HOPPERKIT_BF16_GEMM_SPLIT_FIXUP=global,
// and the workspace for the first. `split`: the store is idempotent (else neither splits).
at::Tensor set_k_splits(gemm::Bf16GemmParams& p, gemm::Bf16GemmConfig& config, int64_t m, int64_t n, int64_t k,
                        int64_t num_sms, bool split, const at::Tensor& like) {
  int cluster_splits = 1;
  config.k_splits = 1;
  if (split) {
    config.k_splits = gemm::choose_bf16_k_splits(static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), config,
                                                 static_cast<int>(num_sms));
    cluster_splits = gemm::choose_bf16_k_splits(static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), config,
                                                static_cast<int>(num_sms), gemm::kMinBf16KBlocksPerClusterSplit, 8);
  }
  if (const std::optional<int> forced = forced_k_splits("HOPPERKIT_BF16_GEMM_SPLITS", ceil_div(k, 64))) {
    HK_CHECK_VALUE(*forced == 1 || split, "HOPPERKIT_BF16_GEMM_SPLITS: split-K does not run where D is "
                   "accumulated into (FP32 D with C) or C aliases D");
    config.k_splits = cluster_splits = *forced;
  }
  if (cluster_splits > 1 && global_split_fixup_forced("HOPPERKIT_BF16_GEMM_SPLIT_FIXUP")) cluster_splits = 1;
  p.max_cluster_splits = cluster_splits;
  if (config.k_splits == 1) return {};
  return attach_split_k_workspace(p, ceil_div(m, config.block_m) * ceil_div(n, config.block_n), config.k_splits,
                                  config.block_m, config.block_n, like);
}

// The swapped decode GEMM's tile for this call (Bf16Variant::kSwapAB, heuristics.h
// choose_bf16_swap_ab_config), or nullopt for the normal kernels. It needs K-major A and B and no C;
// a tile forced by HOPPERKIT_BF16_GEMM_CONFIG keeps the normal kernels. HOPPERKIT_BF16_GEMM_SWAP_AB
// (tuning and tests): unset or `auto`, the heuristic decides; `off` keeps the normal kernels; one of
// kBf16SwapAbTokenWidths runs the swapped kernel with that many token columns wherever it can run,
// at any M.
std::optional<gemm::Bf16GemmConfig> swap_ab_config(int64_t m, int64_t n, int64_t k, int64_t num_sms,
                                                   gemm::OperandMajor major_a, gemm::OperandMajor major_b,
                                                   bool has_c) {
  int forced_tokens = 0;
  if (const char* forced = std::getenv("HOPPERKIT_BF16_GEMM_SWAP_AB")) {
    const std::string v(forced);
    if (v == "off") return std::nullopt;
    std::vector<int> width;
    if (parse_int_list(forced, width) && width.size() == 1 && gemm::is_bf16_swap_ab_token_width(width[0])) {
      forced_tokens = width[0];
    } else if (v != "auto") {
      std::string widths;
      for (const int w : gemm::kBf16SwapAbTokenWidths) widths += ", " + std::to_string(w);
      HK_CHECK_VALUE(false, "HOPPERKIT_BF16_GEMM_SWAP_AB must be auto, off", widths, " (token columns), got '", forced, "'");
    }
  }
  if (major_a != gemm::OperandMajor::kK || major_b != gemm::OperandMajor::kK || has_c) return std::nullopt;
  if (forced_tokens > 0) return gemm::forced_bf16_swap_ab_config(forced_tokens);
  if (std::getenv("HOPPERKIT_BF16_GEMM_CONFIG") != nullptr) return std::nullopt;
  return gemm::choose_bf16_swap_ab_config(static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
                                          static_cast<int>(num_sms));
}

// D [M, N] = A·Bᵀ as Dᵀ = B·Aᵀ: the kernel's "A" is the weights B in 64-row tiles, its "B" the M
// token rows of A, and it stores the tiles transposed (gemm/bf16/README.md "Swap-AB").
void bf16_gemm_swapped(const at::Tensor& a, const at::Tensor& b, at::Tensor& d, int64_t m, int64_t n, int64_t k,
                       int64_t num_sms, bool pdl, gemm::Bf16GemmConfig config) {
  gemm::Bf16GemmParams p;
  p.tma_a = dense_operand_map(b, gemm::OperandMajor::kK, config.block_m);
  p.tma_b = dense_operand_map(a, gemm::OperandMajor::kK, config.block_n);
  set_output(p, d);
  p.m = static_cast<int>(n);
  p.n = static_cast<int>(m);
  p.k = static_cast<int>(k);
  const at::Tensor split_workspace = set_k_splits(p, config, n, m, k, num_sms, /*split=*/true, a);
  check_bf16_compiled(p, config);
  gemm::run_bf16_gemm(p, config, static_cast<int>(num_sms), pdl, c10::cuda::getCurrentCUDAStream());
}

}  // namespace

void bf16_gemm(const at::Tensor& a, const at::Tensor& b, at::Tensor& d, const std::optional<at::Tensor>& c,
               int64_t num_sms, bool pdl) {
  const gemm::OperandMajor major_a = check_dense_operand(a, "a");
  const gemm::OperandMajor major_b = check_dense_operand(b, "b");
  const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
  HK_CHECK_VALUE(b.size(1) == k, "b must be [N, ", k, "], got ", b.sizes());
  HK_CHECK_VALUE(m <= kMaxGemmDim && n <= kMaxGemmDim && k <= kMaxGemmDim, "M, N, K must be at most 2^31 - 256, got ", m, ", ", n, ", ",
                 k);
  check_output(d, "d", {m, n});
  check_output_elements_disjoint(d, "d");
  if (c.has_value()) {
    check_output(*c, "c", {m, n});
    HK_CHECK_TYPE(c->scalar_type() == d.scalar_type(), "c must have d's dtype ", d.scalar_type(), ", got ",
                  c->scalar_type());
    check_same_device(*c, a, "c", "a");
  }
  check_same_device(b, a, "b", "a");
  check_same_device(d, a, "d", "a");
  check_d_apart(d, {{&a, "a"}, {&b, "b"}});
  check_common(a, num_sms);
  c10::cuda::CUDAGuard guard(a.device());
  if (m == 0 || n == 0) return;
  const bool in_place = c.has_value() && c_is_d(*c, d);
  if (k == 0) {  // D = C + an empty sum
    if (!c.has_value()) {
      d.zero_();
    } else if (!in_place) {
      d.copy_(*c);
    }
    return;
  }
  if (const auto swapped = swap_ab_config(m, n, k, num_sms, major_a, major_b, c.has_value())) {
    return bf16_gemm_swapped(a, b, d, m, n, k, num_sms, pdl, *swapped);
  }

  gemm::Bf16GemmConfig config = gemm::choose_bf16_dense_config(
      static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), static_cast<int>(num_sms), major_a, major_b);
  apply_bf16_config_override(config);
  gemm::Bf16GemmParams p;
  p.tma_a = dense_operand_map(a, major_a, config.block_m);
  set_a_tail(p, a, major_a, m, config.block_m);
  p.tma_b = dense_operand_map(b, major_b, config.block_n);
  p.b_evict_first = gemm_b_evict_first(false);
  set_output(p, d);
  if (c.has_value() && d.scalar_type() == at::kFloat) {
    // FP32 D: the tiles are added into D, which holds C (copied in below, once nothing can refuse
    // the call, when C is another tensor), by TMA reduce-adds (set_tma_store; red.global.add where
    // TMA cannot clip N), so the epilogue never waits for loads of C while the tensor cores idle.
    p.add_to_d = true;
  } else if (c.has_value()) {
    p.c = c->data_ptr();
    p.ldc = row_stride(*c);
  }
  p.m = static_cast<int>(m);
  p.n = static_cast<int>(n);
  p.k = static_cast<int>(k);
  set_tma_store(p, d);
  // Split-K where the tiles alone leave most SMs idle (decode-sized M; heuristics.h
  // choose_bf16_k_splits), for outputs whose store is idempotent: two units may both complete a tile
  // through the global fixup (gemm/split_k.cuh), and neither may then add into D or read a C that
  // the other has overwritten.
  const at::Tensor split_workspace =
      set_k_splits(p, config, m, n, k, num_sms, /*split=*/!p.add_to_d && !in_place, a);
  check_bf16_compiled(p, config);
  if (p.add_to_d && !in_place) d.copy_(*c);
  gemm::run_bf16_gemm(p, config, static_cast<int>(num_sms), pdl, c10::cuda::getCurrentCUDAStream());
}

void m_grouped_bf16_gemm_nt_contiguous(const at::Tensor& a, const at::Tensor& b, at::Tensor& d,
                                       const at::Tensor& m_indices, int64_t num_sms, bool pdl) {
  check_cuda_tensor(a, "a", at::kBFloat16);
  HK_CHECK_VALUE(a.dim() == 2 && (a.size(1) == 1 || a.stride(1) == 1) &&
                     (a.size(0) == 1 || (a.stride(0) % kBf16PerTmaRow == 0 && a.stride(0) >= a.size(1))) && aligned16(a),
                 "a must be a K-major [M, K] bf16 tensor with 16-byte aligned rows, got shape ", a.sizes(), " strides ",
                 a.strides());
  check_grouped_operand(b, "b");
  const int64_t m = a.size(0), k = a.size(1), g = b.size(0), n = b.size(1);
  HK_CHECK_VALUE(b.size(2) == k, "b must be [G, N, ", k, "], got ", b.sizes());
  HK_CHECK_VALUE(m <= kMaxGemmDim && n <= kMaxGemmDim && k <= kMaxGemmDim && g < 65536,
                 "M, N, K must be at most 2^31 - 256 and G below 65536, got ", m, ", ", n, ", ", k, ", ", g);
  check_output(d, "d", {m, n});
  check_output_elements_disjoint(d, "d");
  HK_CHECK_TYPE(d.scalar_type() == at::kBFloat16, "d must be bfloat16, got ", d.scalar_type());
  check_cuda_tensor(m_indices, "m_indices", at::kInt);
  HK_CHECK_VALUE(m_indices.dim() == 1 && m_indices.size(0) == m && m_indices.is_contiguous(),
                 "m_indices must be contiguous [", m, "] (one expert id per row of a), got ", m_indices.sizes());
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&b, &d, &m_indices}) check_same_device(*t, a, "all tensors", "a");
  check_d_apart(d, {{&a, "a"}, {&b, "b"}, {&m_indices, "m_indices"}});
  check_common(a, num_sms);
  c10::cuda::CUDAGuard guard(a.device());
  if (m == 0 || n == 0) return;
  if (k == 0 || g == 0) {  // every row is padding or an empty sum
    d.zero_();
    return;
  }

  gemm::Bf16GemmConfig config = gemm::choose_bf16_config(static_cast<int>(m), static_cast<int>(n), static_cast<int>(num_sms));
  apply_bf16_config_override(config);
  gemm::Bf16GemmParams p;
  p.layout = gemm::GemmLayout::kMGroupedContiguous;
  p.tma_a = dense_operand_map(a, gemm::OperandMajor::kK, config.block_m);
  p.tma_b = grouped_operand_map(b, config.block_n);
  p.b_evict_first = gemm_b_evict_first(false);
  set_output(p, d);
  p.m = static_cast<int>(m);
  p.n = static_cast<int>(n);
  p.k = static_cast<int>(k);
  p.m_indices = m_indices.data_ptr<int32_t>();
  p.num_groups = static_cast<int>(g);
  set_tma_store(p, d);
  check_bf16_compiled(p, config);
  gemm::run_bf16_gemm(p, config, static_cast<int>(num_sms), pdl, c10::cuda::getCurrentCUDAStream());
}

void m_grouped_bf16_gemm_nt_masked(const at::Tensor& a, const at::Tensor& b, at::Tensor& d, const at::Tensor& masked_m,
                                   int64_t expected_m, int64_t num_sms, bool pdl) {
  check_grouped_operand(a, "a");
  check_grouped_operand(b, "b");
  const int64_t g = a.size(0), m_max = a.size(1), k = a.size(2), n = b.size(1);
  HK_CHECK_VALUE(b.size(0) == g && b.size(2) == k, "b must be [", g, ", N, ", k, "], got ", b.sizes());
  HK_CHECK_VALUE(m_max <= kMaxGemmDim && n <= kMaxGemmDim && k <= kMaxGemmDim && g < 65536,
                 "M_max, N, K must be at most 2^31 - 256 and G below 65536, got ", m_max, ", ", n, ", ", k, ", ", g);
  check_grouped_rows(g, m_max, "M_max");
  check_output(d, "d", {g, m_max, n});
  check_output_elements_disjoint(d, "d");
  HK_CHECK_TYPE(d.scalar_type() == at::kBFloat16, "d must be bfloat16, got ", d.scalar_type());
  check_cuda_tensor(masked_m, "masked_m", at::kInt);
  HK_CHECK_VALUE(masked_m.dim() == 1 && masked_m.size(0) == g && masked_m.is_contiguous(),
                 "masked_m must be contiguous [", g, "], got ", masked_m.sizes());
  HK_CHECK_VALUE(expected_m >= 1 && expected_m <= INT32_MAX, "expected_m must be in [1, 2^31), got ", expected_m);
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&b, &d, &masked_m}) check_same_device(*t, a, "all tensors", "a");
  check_d_apart(d, {{&a, "a"}, {&b, "b"}, {&masked_m, "masked_m"}});
  check_common(a, num_sms);
  c10::cuda::CUDAGuard guard(a.device());
  if (d.numel() == 0) return;
  if (k == 0) {  // valid rows are empty sums, the others 0
    d.zero_();
    return;
  }

  gemm::Bf16GemmConfig config = gemm::choose_bf16_config(static_cast<int>(std::min(expected_m, m_max)),
                                                         static_cast<int>(n), static_cast<int>(num_sms),
                                                         static_cast<int>(g));
  apply_bf16_config_override(config);
  gemm::Bf16GemmParams p;
  p.layout = gemm::GemmLayout::kMGroupedMasked;
  p.tma_a = grouped_operand_map(a, config.block_m);
  p.tma_b = grouped_operand_map(b, config.block_n);
  p.b_evict_first = gemm_b_evict_first(false);
  set_output(p, d);
  p.ldd_group = d.size(0) > 1 ? d.stride(0) : 0;
  p.m = static_cast<int>(m_max);
  p.n = static_cast<int>(n);
  p.k = static_cast<int>(k);
  p.masked_m = masked_m.data_ptr<int32_t>();
  p.num_groups = static_cast<int>(g);
  set_tma_store(p, d);
  check_bf16_compiled(p, config);
  gemm::run_bf16_gemm(p, config, static_cast<int>(num_sms), pdl, c10::cuda::getCurrentCUDAStream());
}

void k_grouped_bf16_gemm_tn_contiguous(const at::Tensor& a, const at::Tensor& b, at::Tensor& d, at::IntArrayRef ks,
                                       const at::Tensor& ks_tensor, const std::optional<at::Tensor>& c, int64_t num_sms,
                                       bool pdl) {
  check_cuda_tensor(d, "d", at::kFloat);
  HK_CHECK_VALUE(d.dim() == 3, "d must be float32 [G, M, N], got shape ", d.sizes());
  const int64_t g = d.size(0), m = d.size(1), n = d.size(2);
  const int64_t sum_k = check_k_group_sizes(ks, ks_tensor, g, d, "d");
  HK_CHECK_VALUE(g < 65536 && m <= kMaxGemmDim && n <= kMaxGemmDim && sum_k <= kMaxGemmDim,
                 "G must be below 65536 and M, N, Σks at most 2^31 - 256, got ", g, ", ", m, ", ", n, ", ", sum_k);
  check_grouped_rows(g, m, "M");
  // A [ΣK, M] and B [ΣK, N] with rows contiguous: MN-major operands of the GEMM (the "t" of tn).
  const auto check_k_rows_operand = [&](const at::Tensor& x, const char* name, int64_t cols) {
    check_cuda_tensor(x, name, at::kBFloat16);
    HK_CHECK_VALUE(x.dim() == 2 && x.size(0) == sum_k && x.size(1) == cols && (cols <= 1 || x.stride(1) == 1) &&
                       (sum_k <= 1 || (x.stride(0) % kBf16PerTmaRow == 0 && x.stride(0) >= cols)) &&
                       (x.numel() == 0 || aligned16(x)),
                   name, " must be a bf16 [Σks, ", cols, "] = [", sum_k, ", ", cols,
                   "] tensor with contiguous rows whose stride is a multiple of 8 elements and a 16-byte aligned "
                   "base (TMA), got shape ", x.sizes(), " strides ", x.strides());
    check_same_device(x, d, name, "d");
  };
  check_k_rows_operand(a, "a", m);
  check_k_rows_operand(b, "b", n);
  check_output(d, "d", {g, m, n});
  check_output_elements_disjoint(d, "d");
  if (c.has_value()) {
    check_output(*c, "c", {g, m, n});
    HK_CHECK_TYPE(c->scalar_type() == at::kFloat, "c must be float32, got ", c->scalar_type());
    check_same_device(*c, d, "c", "d");
  }
  check_d_apart(d, {{&a, "a"}, {&b, "b"}, {&ks_tensor, "ks_tensor"}});
  check_num_sms(num_sms);
  if (g == 0 || m == 0 || n == 0) return;
  c10::cuda::CUDAGuard guard(d.device());
  const bool in_place = c.has_value() && c_is_d(*c, d);
  if (sum_k == 0) return store_empty_k_grouped(d, c, in_place);
  check_sm90(d);

  gemm::Bf16GemmConfig config = gemm::choose_bf16_config(static_cast<int>(m), static_cast<int>(n),
                                                         static_cast<int>(num_sms), static_cast<int>(g));
  apply_bf16_config_override(config);
  config.major_a = config.major_b = gemm::OperandMajor::kMN;
  gemm::Bf16GemmParams p;
  p.layout = gemm::GemmLayout::kKGroupedContiguous;
  // One map per operand over every group's K rows; a tile reads its group's rows [ΣK_<g, ΣK_≤g),
  // with the sizes read on the device (gemm/k_groups.cuh), so the call is CUDA-graph capturable.
  p.tma_a = dense_operand_map(a.t(), gemm::OperandMajor::kMN, config.block_m);
  p.tma_b = dense_operand_map(b.t(), gemm::OperandMajor::kMN, config.block_n);
  p.b_evict_first = gemm_b_evict_first(false);
  set_output(p, d);
  p.ldd_group = g > 1 ? d.stride(0) : 0;
  // As in the dense op: D holds C (copied in once nothing can refuse the call, when C is another
  // tensor) and the tiles are added into it.
  p.add_to_d = c.has_value();
  p.m = static_cast<int>(m);
  p.n = static_cast<int>(n);
  p.k = static_cast<int>(sum_k);
  p.ks = ks_tensor.data_ptr<int32_t>();
  p.num_groups = static_cast<int>(g);
  set_tma_store(p, d);
  check_bf16_compiled(p, config);
  if (c.has_value() && !in_place) d.copy_(*c);
  gemm::run_bf16_gemm(p, config, static_cast<int>(num_sms), pdl, c10::cuda::getCurrentCUDAStream());
}

}  // namespace hopperkit::ops

TORCH_LIBRARY_FRAGMENT(hopperkit, m) {
  m.def("bf16_gemm(Tensor a, Tensor b, Tensor(a!) d, Tensor? c, int num_sms, bool pdl=False) -> ()");
  m.def(
      "m_grouped_bf16_gemm_nt_contiguous(Tensor a, Tensor b, Tensor(a!) d, Tensor m_indices, int num_sms, "
      "bool pdl=False) -> ()");
  m.def(
      "m_grouped_bf16_gemm_nt_masked(Tensor a, Tensor b, Tensor(a!) d, Tensor masked_m, int expected_m, int num_sms, "
      "bool pdl=False) -> ()");
  m.def(
      "k_grouped_bf16_gemm_tn_contiguous(Tensor a, Tensor b, Tensor(a!) d, int[] ks, Tensor ks_tensor, Tensor? c, "
      "int num_sms, bool pdl=False) -> ()");
}

TORCH_LIBRARY_IMPL(hopperkit, CUDA, m) {
  m.impl("bf16_gemm", &hopperkit::ops::bf16_gemm);
  m.impl("m_grouped_bf16_gemm_nt_contiguous", &hopperkit::ops::m_grouped_bf16_gemm_nt_contiguous);
  m.impl("m_grouped_bf16_gemm_nt_masked", &hopperkit::ops::m_grouped_bf16_gemm_nt_masked);
  m.impl("k_grouped_bf16_gemm_tn_contiguous", &hopperkit::ops::k_grouped_bf16_gemm_tn_contiguous);
}
