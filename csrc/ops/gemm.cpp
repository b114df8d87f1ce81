// GEMM ops.
#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>

#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "common/tma.h"
#include "common/tuning_knobs.h"
#include "gemm/fp8_1d2d/params.h"
#include "gemm/heuristics.h"
#include "gemm/tile_store.h"
#include "ops/checks.h"

namespace hopperkit::ops {
namespace {

// Tuning knob for benchmarks: HOPPERKIT_FP8_GEMM_CONFIG=BLOCK_M,BLOCK_N,CLUSTER[,ONE_BOX] forces a
// compiled configuration (dispatch refuses one that is not compiled or cannot tile this shape).
// Returns the staging variant when the knob names it (fourth value), for choose_staging.
std::optional<bool> apply_config_override(gemm::Fp8Gemm1d2dConfig& config) {
  const char* forced = std::getenv("HOPPERKIT_FP8_GEMM_CONFIG");
  if (forced == nullptr) return std::nullopt;
  std::vector<int> v;
  HK_CHECK_VALUE(parse_int_list(forced, v) && (v.size() == 3 || v.size() == 4),
                 "HOPPERKIT_FP8_GEMM_CONFIG must be BLOCK_M,BLOCK_N,CLUSTER[,ONE_BOX], got '", forced, "'");
  config.block_m = v[0];
  config.block_n = v[1];
  config.cluster_m = v[2];
  return v.size() == 4 ? std::optional<bool>(v[3] != 0) : std::nullopt;
}

// A multicast wherever it fits (gemm::fp8_1d2d_a_multicast_fits), unless the tuning knob
// HOPPERKIT_FP8_GEMM_A_MULTICAST=on|off forces it (read per call; `on` where it cannot run is an
// error).
void choose_a_multicast(gemm::Fp8Gemm1d2dConfig& config, int64_t m, int64_t n, int cluster_splits, int64_t num_sms) {
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), sms = static_cast<int>(num_sms);
  bool on = gemm::fp8_1d2d_a_multicast_fits(config, mi, ni, cluster_splits, sms);
  if (const char* forced = std::getenv("HOPPERKIT_FP8_GEMM_A_MULTICAST")) {
    const std::string v(forced);
    HK_CHECK_VALUE(v == "on" || v == "off", "HOPPERKIT_FP8_GEMM_A_MULTICAST must be on or off, got '", forced, "'");
    on = v == "on";
    HK_CHECK_VALUE(!on || gemm::fp8_1d2d_a_multicast_fits(config, mi, ni, cluster_splits, sms),
                   "HOPPERKIT_FP8_GEMM_A_MULTICAST=on needs the 64x64 tile with one M block or the 256x128 tile "
                   "over more than two waves (", 2 * sms, " tiles), no B multicast, an even number of N blocks and "
                   "no split-K; this call has ", config.block_m, "x", config.block_n, " tiles (cluster ",
                   config.cluster_m, "), M=", m, " N=", n, ", ", std::max(config.k_splits, cluster_splits), " splits");
  }
  config.cluster_n = on ? 2 : 1;
}

// The staging variant for a grid of `work_units` (gemm::fp8_1d2d_one_box_staging), unless forced.
void choose_staging(gemm::Fp8Gemm1d2dConfig& config, int64_t work_units, int64_t num_sms, std::optional<bool> forced) {
  config.one_box_staging = forced.value_or(gemm::fp8_1d2d_one_box_staging(config, work_units, static_cast<int>(num_sms)));
}

// Rows of the A and SFA boxes (Fp8Gemm1d2dParams::a_box_rows): a tile never loads more rows than the
// problem has, rounded up to 8.
int a_box_rows(int64_t rows, int block_m) { return static_cast<int>(std::min<int64_t>(block_m, (rows + 7) / 8 * 8)); }

// SFA [M, ⌈K/128⌉] of the 2-D layouts: MN-major and TMA-aligned, as get_mn_major_tma_aligned_tensor
// returns it (column stride align(M, 4)), so no per-call transpose is ever made.
void check_sfa_2d(const at::Tensor& sfa, int64_t m, int64_t k_blocks) {
  check_cuda_tensor(sfa, "sfa", at::kFloat);
  const int64_t sfa_ld = (m + 3) / 4 * 4;
  HK_CHECK_VALUE(sfa.dim() == 2 && sfa.size(0) == m && sfa.size(1) == k_blocks && (m == 1 || sfa.stride(0) == 1) &&
                     (k_blocks == 1 || sfa.stride(1) == sfa_ld) && reinterpret_cast<uintptr_t>(sfa.data_ptr()) % 16 == 0,
                 "sfa must be [", m, ", ", k_blocks, "] MN-major and TMA-aligned (strides (1, ", sfa_ld,
                 "), see get_mn_major_tma_aligned_tensor), got shape ", sfa.sizes(), " strides ", sfa.strides());
}

// A row-major BF16 D [M, N] that TMA can store to and whose elements are distinct. As for the FP8
// operands, the row stride of a one-row D is never stepped over and is not checked (the Python
// checks agree); its map takes tma_row_stride(d), never stride(0).
void check_d_2d(const at::Tensor& d, int64_t m, int64_t n) {
  check_cuda_tensor(d, "d", at::kBFloat16);
  HK_CHECK_VALUE(d.dim() == 2 && d.size(0) == m && d.size(1) == n && d.stride(1) == 1 && (m <= 1 || d.stride(0) % 8 == 0) &&
                     reinterpret_cast<uintptr_t>(d.data_ptr()) % 16 == 0,
                 "d must be a row-major [", m, ", ", n, "] bf16 tensor with 16-byte aligned rows, got shape ", d.sizes(),
                 " strides ", d.strides());
  check_output_elements_disjoint(d, "d");
}

// The A and SFA maps of the 2-D layouts (normal, m-grouped contiguous), with boxes of a_box_rows rows.
void set_a_2d(gemm::Fp8Gemm1d2dParams& p, const at::Tensor& a, const at::Tensor& sfa, int block_m) {
  const int64_t m = a.size(0), k = a.size(1), k_blocks = (k + 127) / 128;
  p.a_box_rows = a_box_rows(m, block_m);
  p.tma_a = make_tma_2d(a.data_ptr(), CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, k, m, tma_row_stride(a), 128, p.a_box_rows,
                        CU_TENSOR_MAP_SWIZZLE_128B);
  const int64_t sfa_ld = k_blocks == 1 ? (m + 3) / 4 * 4 : sfa.stride(1);
  p.tma_sfa = make_tma_2d(sfa.data_ptr(), CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, m, k_blocks, sfa_ld, p.a_box_rows, 1,
                          CU_TENSOR_MAP_SWIZZLE_NONE);
  // Several M blocks, the last one short (by more than a rounding): its boxes hold only its rows.
  const int64_t tail = m % block_m;
  if (m > block_m && tail != 0 && tail <= block_m - 8) {
    p.a_tail_rows = static_cast<int>((tail + 7) / 8 * 8);
    p.tma_a_tail = make_tma_2d(a.data_ptr(), CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, k, m, tma_row_stride(a), 128,
                               p.a_tail_rows, CU_TENSOR_MAP_SWIZZLE_128B);
    p.tma_sfa_tail = make_tma_2d(sfa.data_ptr(), CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, m, k_blocks, sfa_ld,
                                 p.a_tail_rows, 1, CU_TENSOR_MAP_SWIZZLE_NONE);
  }
}

// D is written by TMA stores of one math warpgroup's rows (gemm/tile_store.h); boxes clip at D's edges.
CUtensorMap d_map_2d(const at::Tensor& d) {
  return make_tma_2d(d.data_ptr(), CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, d.size(1), d.size(0), tma_row_stride(d),
                     gemm::kStoreBoxCols, gemm::kStoreBoxRows, CU_TENSOR_MAP_SWIZZLE_128B);
}

}  // namespace

void fp8_gemm_nt_1d2d(const at::Tensor& a, const at::Tensor& sfa, const at::Tensor& b, const at::Tensor& sfb,
                      at::Tensor& d, int64_t num_sms, bool pdl) {
  check_fp8_k_major(a, "a");
  check_fp8_k_major(b, "b");
  const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
  const int64_t k_blocks = (k + 127) / 128;
  HK_CHECK_VALUE(b.size(1) == k, "b must be [N, ", k, "], got ", b.sizes());
  HK_CHECK_VALUE(m >= 1 && n >= 1 && k >= 1 && m <= kMaxGemmDim && n <= kMaxGemmDim && k <= kMaxGemmDim,
                 "M, N, K must be in [1, 2^31 - 256], got ", m, ", ", n, ", ", k);
  HK_CHECK_VALUE(n % 8 == 0, "N (the rows of b, the columns of d) must be a multiple of 8: d's rows are stored by TMA ",
                 "in 16-byte pieces; got ", n);
  check_sfa_2d(sfa, m, k_blocks);
  check_cuda_tensor(sfb, "sfb", at::kFloat);
  HK_CHECK_VALUE(sfb.dim() == 2 && sfb.size(0) == (n + 127) / 128 && sfb.size(1) == k_blocks, "sfb must be [",
                 (n + 127) / 128, ", ", k_blocks, "], got ", sfb.sizes());
  check_d_2d(d, m, n);
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&sfa, &b, &sfb, &d}) check_same_device(*t, a, "all tensors", "a");
  check_d_apart(d, {{&a, "a"}, {&sfa, "sfa"}, {&b, "b"}, {&sfb, "sfb"}});
  check_num_sms(num_sms);
  check_sm90(a);
  c10::cuda::CUDAGuard guard(a.device());

  gemm::Fp8Gemm1d2dConfig config = gemm::choose_fp8_1d2d_dense_config(static_cast<int>(m), static_cast<int>(n),
                                                                      static_cast<int>(k), static_cast<int>(num_sms));
  const std::optional<bool> forced_staging = apply_config_override(config);
  // Split counts for the two fixups (gemm/fp8_1d2d/README.md "Split-K"): through the workspace, and the upper
  // bound for the launcher's fixup within a cluster, whose units may be shorter.
  int cluster_splits = 1;
  if (config.cluster_m == 1) {
    config.k_splits = gemm::choose_k_splits(static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), config,
                                            static_cast<int>(num_sms));
    cluster_splits = gemm::choose_k_splits(static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), config,
                                           static_cast<int>(num_sms), gemm::kMinKBlocksPerClusterSplit, 8);
  }
  if (const std::optional<int> forced = forced_k_splits("HOPPERKIT_FP8_GEMM_SPLITS", ceil_div(k, 128))) {
    config.k_splits = cluster_splits = *forced;
    HK_CHECK_VALUE(config.cluster_m == 1 || config.k_splits == 1, "HOPPERKIT_FP8_GEMM_SPLITS: split-K runs without "
                   "B multicast, and this call's tiles come in CTA pairs (cluster ", config.cluster_m, ")",
                   tuning_knobs_note());
  }
  choose_a_multicast(config, m, n, cluster_splits, num_sms);
  const int64_t tiles = ceil_div(m, config.block_m) * ceil_div(n, config.block_n);
  choose_staging(config, tiles * config.k_splits, num_sms, forced_staging);
  gemm::Fp8Gemm1d2dParams p;
  at::Tensor split_workspace;
  if (config.k_splits > 1) {
    split_workspace = attach_split_k_workspace(p, tiles, config.k_splits, config.block_m, config.block_n, a);
  }
  p.max_cluster_splits = cluster_splits;
  // Tuning and tests: `global` keeps the fixup through the workspace where the launcher would
  // otherwise sum a tile's splits within a cluster.
  if (cluster_splits > 1 && global_split_fixup_forced("HOPPERKIT_FP8_GEMM_SPLIT_FIXUP")) {
    p.split_fixup = gemm::Fp8Gemm1d2dParams::SplitFixup::kGlobal;
  }
  set_a_2d(p, a, sfa, config.block_m);
  p.tma_b = make_tma_2d(b.data_ptr(), CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, k, n, tma_row_stride(b), 128, config.block_n,
                        CU_TENSOR_MAP_SWIZZLE_128B);
  p.b_evict_first = gemm_b_evict_first(m <= config.block_m);
  p.sfb = sfb.data_ptr<float>();
  p.sfb_stride_n = sfb.stride(0);
  p.sfb_stride_k = sfb.stride(1);
  p.tma_d = d_map_2d(d);
  p.m = static_cast<int>(m);
  p.n = static_cast<int>(n);
  p.k = static_cast<int>(k);
  gemm::run_fp8_gemm_1d2d(p, config, static_cast<int>(num_sms), pdl, c10::cuda::getCurrentCUDAStream());
}

namespace {

// B [G, N, K] of the grouped GEMMs, checked and mapped as a 3-D tensor (any group and row strides
// that TMA can address), with its scales SFB [G, ⌈N/128⌉, ⌈K/128⌉].
void check_grouped_b(const at::Tensor& b, const at::Tensor& sfb, const at::Tensor& a, int64_t k) {
  check_cuda_tensor(b, "b", at::kFloat8_e4m3fn);
  HK_CHECK_VALUE(b.dim() == 3 && b.size(2) == k && b.stride(2) == 1 && b.stride(1) % 16 == 0 &&
                     (b.size(0) <= 1 || b.stride(0) % 16 == 0) &&
                     reinterpret_cast<uintptr_t>(b.data_ptr()) % 16 == 0,
                 "b must be a K-major [G, N, ", k, "] FP8 tensor with 16-byte aligned rows, got shape ", b.sizes(),
                 " strides ", b.strides());
  check_fp8_3d_no_overlap(b, "b");
  const int64_t g = b.size(0), n = b.size(1);
  HK_CHECK_VALUE(g >= 1 && g < 65536 && n >= 1 && n <= kMaxGemmDim && n % 8 == 0, "b must have 1..65535 groups and N a positive multiple of 8 (d's rows are stored by TMA in 16-byte pieces), got ",
                 b.sizes());
  check_cuda_tensor(sfb, "sfb", at::kFloat);
  HK_CHECK_VALUE(sfb.dim() == 3 && sfb.size(0) == g && sfb.size(1) == (n + 127) / 128 && sfb.size(2) == (k + 127) / 128,
                 "sfb must be [", g, ", ", (n + 127) / 128, ", ", (k + 127) / 128, "], got ", sfb.sizes());
  check_same_device(b, a, "b", "a");
  check_same_device(sfb, a, "sfb", "a");
}

CUtensorMap grouped_b_map(const at::Tensor& b, int block_n) {
  const uint64_t dims[3] = {static_cast<uint64_t>(b.size(2)), static_cast<uint64_t>(b.size(1)),
                            static_cast<uint64_t>(b.size(0))};
  const uint64_t strides[2] = {static_cast<uint64_t>(tma_row_stride(b)), static_cast<uint64_t>(group_stride_for_tma(b))};
  const uint32_t box[3] = {128, static_cast<uint32_t>(block_n), 1};
  return make_tma_nd<3>(b.data_ptr(), CU_TENSOR_MAP_DATA_TYPE_UINT8, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B);
}

void set_grouped_sfb(gemm::Fp8Gemm1d2dParams& p, const at::Tensor& sfb) {
  p.sfb = sfb.data_ptr<float>();
  p.sfb_stride_g = sfb.stride(0);
  p.sfb_stride_n = sfb.stride(1);
  p.sfb_stride_k = sfb.stride(2);
}

}  // namespace

void m_grouped_fp8_gemm_nt_contiguous_1d2d(const at::Tensor& a, const at::Tensor& sfa, const at::Tensor& b,
                                           const at::Tensor& sfb, at::Tensor& d, const at::Tensor& m_indices,
                                           int64_t num_sms, bool pdl) {
  check_fp8_k_major(a, "a");
  const int64_t m = a.size(0), k = a.size(1);
  const int64_t k_blocks = (k + 127) / 128;
  check_grouped_b(b, sfb, a, k);
  const int64_t g = b.size(0), n = b.size(1);
  HK_CHECK_VALUE(m >= 1 && m <= kMaxGemmDim && k >= 1 && k <= kMaxGemmDim, "M and K must be in [1, 2^31 - 256], got ", m, ", ", k);
  check_sfa_2d(sfa, m, k_blocks);
  check_d_2d(d, m, n);
  check_cuda_tensor(m_indices, "m_indices", at::kInt);
  HK_CHECK_VALUE(m_indices.dim() == 1 && m_indices.size(0) == m && m_indices.is_contiguous(),
                 "m_indices must be contiguous [", m, "] (one expert id per row of a), got ", m_indices.sizes());
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&sfa, &d, &m_indices}) check_same_device(*t, a, "all tensors", "a");
  check_d_apart(d, {{&a, "a"}, {&sfa, "sfa"}, {&b, "b"}, {&sfb, "sfb"}, {&m_indices, "m_indices"}});
  check_num_sms(num_sms);
  check_sm90(a);
  c10::cuda::CUDAGuard guard(a.device());

  gemm::Fp8Gemm1d2dConfig config =
      gemm::choose_fp8_1d2d_config(static_cast<int>(m), static_cast<int>(n), static_cast<int>(num_sms),
                                   gemm::GemmLayout::kMGroupedContiguous, 1, static_cast<int>(std::min<int64_t>(g, INT32_MAX)));
  const std::optional<bool> forced_staging = apply_config_override(config);
  // 256-row tiles multiply each 128-row half with its own expert (fp8_1d2d/traits.h kHalves).
  const bool halves = config.block_m == 256 && config.block_n == 128;
  HK_CHECK_VALUE(config.cluster_m == 1 && (config.block_m <= 128 || halves),
                 "the contiguous GEMM runs without B multicast and with BLOCK_M <= 128, the expert segment alignment, "
                 "or 256x128 tiles whose halves take an expert each (HOPPERKIT_FP8_GEMM_CONFIG)");
  choose_staging(config, ceil_div(m, config.block_m) * ceil_div(n, config.block_n), num_sms, forced_staging);
  if (halves) {
    config.one_box_staging = false;  // compiled with a store box per box only
    // CTA pairs on two N blocks of one M block share its A: the same experts, the same passes.
    choose_a_multicast(config, m, n, /*cluster_splits=*/1, num_sms);
  }
  gemm::Fp8Gemm1d2dParams p;
  p.layout = gemm::GemmLayout::kMGroupedContiguous;
  set_a_2d(p, a, sfa, config.block_m);
  p.tma_b = grouped_b_map(b, config.block_n);
  p.b_evict_first = gemm_b_evict_first(m <= config.block_m);
  set_grouped_sfb(p, sfb);
  p.tma_d = d_map_2d(d);
  p.m = static_cast<int>(m);
  p.n = static_cast<int>(n);
  p.k = static_cast<int>(k);
  p.m_indices = m_indices.data_ptr<int32_t>();
  p.num_groups = static_cast<int>(g);
  gemm::run_fp8_gemm_1d2d(p, config, static_cast<int>(num_sms), pdl, c10::cuda::getCurrentCUDAStream());
}

void m_grouped_fp8_gemm_nt_masked_1d2d(const at::Tensor& a, const at::Tensor& sfa, const at::Tensor& b,
                                       const at::Tensor& sfb, at::Tensor& d, const at::Tensor& masked_m,
                                       int64_t expected_m, int64_t num_sms, bool pdl) {
  check_cuda_tensor(a, "a", at::kFloat8_e4m3fn);
  HK_CHECK_VALUE(a.dim() == 3 && a.stride(2) == 1 && (a.size(1) <= 1 || a.stride(1) % 16 == 0) &&
                     (a.size(0) <= 1 || a.stride(0) % 16 == 0) && reinterpret_cast<uintptr_t>(a.data_ptr()) % 16 == 0,
                 "a must be a K-major [G, M_max, K] FP8 tensor with 16-byte aligned rows, got shape ", a.sizes(),
                 " strides ", a.strides());
  check_fp8_3d_no_overlap(a, "a");
  const int64_t g = a.size(0), m_max = a.size(1), k = a.size(2);
  const int64_t k_blocks = (k + 127) / 128;
  HK_CHECK_VALUE(m_max >= 1 && m_max <= kMaxGemmDim && k >= 1 && k <= kMaxGemmDim, "M_max and K must be in [1, 2^31 - 256], got ",
                 m_max, ", ", k);
  check_grouped_b(b, sfb, a, k);
  HK_CHECK_VALUE(b.size(0) == g, "b must have ", g, " groups like a, got ", b.size(0));
  check_grouped_rows(g, m_max, "M_max");
  const int64_t n = b.size(1);
  check_cuda_tensor(sfa, "sfa", at::kFloat);
  const int64_t sfa_ld = (m_max + 3) / 4 * 4;
  HK_CHECK_VALUE(sfa.dim() == 3 && sfa.size(0) == g && sfa.size(1) == m_max && sfa.size(2) == k_blocks &&
                     (m_max == 1 || sfa.stride(1) == 1) && (k_blocks == 1 || sfa.stride(2) == sfa_ld) &&
                     (g == 1 || sfa.stride(0) == sfa_ld * k_blocks) && reinterpret_cast<uintptr_t>(sfa.data_ptr()) % 16 == 0,
                 "sfa must be [", g, ", ", m_max, ", ", k_blocks, "] MN-major and TMA-aligned (strides (",
                 sfa_ld * k_blocks, ", 1, ", sfa_ld, "), see get_mn_major_tma_aligned_tensor), got shape ", sfa.sizes(),
                 " strides ", sfa.strides());
  check_cuda_tensor(d, "d", at::kBFloat16);
  HK_CHECK_VALUE(d.dim() == 3 && d.size(0) == g && d.size(1) == m_max && d.size(2) == n && d.stride(2) == 1 &&
                     (m_max <= 1 || d.stride(1) % 8 == 0) && (g <= 1 || d.stride(0) % 8 == 0) &&
                     reinterpret_cast<uintptr_t>(d.data_ptr()) % 16 == 0,
                 "d must be a row-major [", g, ", ", m_max, ", ", n, "] bf16 tensor with 16-byte aligned rows, got shape ",
                 d.sizes(), " strides ", d.strides());
  check_output_elements_disjoint(d, "d");
  check_cuda_tensor(masked_m, "masked_m", at::kInt);
  HK_CHECK_VALUE(masked_m.dim() == 1 && masked_m.size(0) == g && masked_m.is_contiguous(), "masked_m must be contiguous [",
                 g, "], got ", masked_m.sizes());
  HK_CHECK_VALUE(expected_m >= 1 && expected_m <= INT32_MAX, "expected_m must be in [1, 2^31), got ", expected_m);
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&sfa, &d, &masked_m}) check_same_device(*t, a, "all tensors", "a");
  check_d_apart(d, {{&a, "a"}, {&sfa, "sfa"}, {&b, "b"}, {&sfb, "sfb"}, {&masked_m, "masked_m"}});
  check_num_sms(num_sms);
  check_sm90(a);
  c10::cuda::CUDAGuard guard(a.device());

  gemm::Fp8Gemm1d2dConfig config =
      gemm::choose_fp8_1d2d_config(static_cast<int>(std::min(expected_m, m_max)), static_cast<int>(n),
                                   static_cast<int>(num_sms), gemm::GemmLayout::kMGroupedMasked, static_cast<int>(g));
  const std::optional<bool> forced_staging = apply_config_override(config);
  HK_CHECK_VALUE(config.cluster_m == 1, "the masked GEMM runs without clusters (HOPPERKIT_FP8_GEMM_CONFIG)");
  // The blocks past masked_m do nothing: the expected rows decide how many tiles compute.
  choose_staging(config, g * ceil_div(std::min(expected_m, m_max), config.block_m) * ceil_div(n, config.block_n),
                 num_sms, forced_staging);
  gemm::Fp8Gemm1d2dParams p;
  p.layout = gemm::GemmLayout::kMGroupedMasked;
  {
    const uint64_t dims[3] = {static_cast<uint64_t>(k), static_cast<uint64_t>(m_max), static_cast<uint64_t>(g)};
    const uint64_t strides[2] = {static_cast<uint64_t>(tma_row_stride(a)),
                                 static_cast<uint64_t>(group_stride_for_tma(a))};
    p.a_box_rows = a_box_rows(m_max, config.block_m);
    const uint32_t box[3] = {128, static_cast<uint32_t>(p.a_box_rows), 1};
    p.tma_a = make_tma_nd<3>(a.data_ptr(), CU_TENSOR_MAP_DATA_TYPE_UINT8, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B);
  }
  p.tma_b = grouped_b_map(b, config.block_n);
  p.b_evict_first = gemm_b_evict_first(m_max <= config.block_m);
  // SFA as a 2-D [G·⌈K/128⌉, M_max] view of its MN-major storage (row stride align(M_max, 4)).
  p.tma_sfa = make_tma_2d(sfa.data_ptr(), CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, m_max, g * k_blocks, sfa_ld,
                          p.a_box_rows, 1, CU_TENSOR_MAP_SWIZZLE_NONE);
  p.sfa_rows_per_group = static_cast<int>(k_blocks);
  set_grouped_sfb(p, sfb);
  {
    const uint64_t dims[3] = {static_cast<uint64_t>(n), static_cast<uint64_t>(m_max), static_cast<uint64_t>(g)};
    const uint64_t strides[2] = {static_cast<uint64_t>(tma_row_stride(d)) * 2,
                                 static_cast<uint64_t>(group_stride_for_tma(d)) * 2};
    const uint32_t box[3] = {gemm::kStoreBoxCols, gemm::kStoreBoxRows, 1};
    p.tma_d = make_tma_nd<3>(d.data_ptr(), CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, dims, strides, box,
                             CU_TENSOR_MAP_SWIZZLE_128B);
  }
  p.m = static_cast<int>(m_max);
  p.n = static_cast<int>(n);
  p.k = static_cast<int>(k);
  p.masked_m = masked_m.data_ptr<int32_t>();
  p.num_groups = static_cast<int>(g);
  gemm::run_fp8_gemm_1d2d(p, config, static_cast<int>(num_sms), pdl, c10::cuda::getCurrentCUDAStream());
}

}  // namespace hopperkit::ops

TORCH_LIBRARY_FRAGMENT(hopperkit, m) {
  m.def("fp8_gemm_nt_1d2d(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(a!) d, int num_sms, bool pdl=False) -> ()");
  m.def(
      "m_grouped_fp8_gemm_nt_contiguous_1d2d(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(a!) d, "
      "Tensor m_indices, int num_sms, bool pdl=False) -> ()");
  m.def(
      "m_grouped_fp8_gemm_nt_masked_1d2d(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(a!) d, Tensor masked_m, "
      "int expected_m, int num_sms, bool pdl=False) -> ()");
}

TORCH_LIBRARY_IMPL(hopperkit, CUDA, m) {
  m.impl("fp8_gemm_nt_1d2d", &hopperkit::ops::fp8_gemm_nt_1d2d);
  m.impl("m_grouped_fp8_gemm_nt_contiguous_1d2d", &hopperkit::ops::m_grouped_fp8_gemm_nt_contiguous_1d2d);
  m.impl("m_grouped_fp8_gemm_nt_masked_1d2d", &hopperkit::ops::m_grouped_fp8_gemm_nt_masked_1d2d);
}
