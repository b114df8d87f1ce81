// Argument checks shared by the op implementations, and the host-side layout arithmetic they imply.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/MemoryOverlap.h>
#include <ATen/ops/empty.h>
#include <ATen/core/Tensor.h>
#include <cuda_runtime_api.h>

#include "common/host_checks.h"

namespace hopperkit::ops {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The largest M, N or K the GEMM kernels take: their schedulers and launchers count tiles and K
// blocks by ceil-divisions of 32-bit ints, by at most 256.
inline constexpr int64_t kMaxGemmDim = INT32_MAX - 255;

// The masked and k-grouped layouts tile every group's rows separately, so the scheduler walks G
// groups of rows padded to the tile (gemm/problem.h scheduled_rows): that count must fit as well.
inline void check_grouped_rows(int64_t groups, int64_t rows, const char* what) {
  HK_CHECK_VALUE(groups * ceil_div(rows, 256) * 256 <= kMaxGemmDim, "G · ", what,
                 " (the rows of every group, padded to 256) must be at most 2^31 - 256, got G = ", groups, ", ", what,
                 " = ", rows);
}

// The value of a tuning knob (an environment variable) as comma-separated decimal integers. The
// whole value must parse: anything else (a typo, a trailing character, a missing field) gives
// false, so that a mistyped knob is an error instead of a silently different configuration.
inline bool parse_int_list(const char* text, std::vector<int>& values) {
  values.clear();
  const char* p = text;
  while (true) {
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(p, &end, 10);
    if (end == p || errno != 0 || v < INT_MIN || v > INT_MAX) return false;
    values.push_back(static_cast<int>(v));
    if (*end == '\0') return true;
    if (*end != ',') return false;
    p = end + 1;
  }
}

// Whether a GEMM loads B with the EVICT_FIRST L2 policy (the kernels' b_evict_first): `by_default`,
// unless the tuning knob HOPPERKIT_GEMM_B_HINT=normal|first forces one policy (read per call). The
// FP8 1d2d GEMM's default is EVICT_FIRST where one M block covers each problem's (or group's) rows, so
// that every B tile is read once (gemm/fp8_1d2d/README.md "L2 policy of B"); the BF16 GEMM keeps
// the normal policy (gemm/bf16/README.md says why).
inline bool gemm_b_evict_first(bool by_default) {
  if (const char* forced = std::getenv("HOPPERKIT_GEMM_B_HINT")) {
    const std::string v(forced);
    HK_CHECK_VALUE(v == "normal" || v == "first", "HOPPERKIT_GEMM_B_HINT must be normal or first, got '", forced, "'");
    return v == "first";
  }
  return by_default;
}

// A split count forced by the tuning knob `var` (HOPPERKIT_FP8_GEMM_SPLITS, HOPPERKIT_BF16_GEMM_SPLITS),
// or nullopt when it is unset. A positive integer, lowered to the count its per-split share of the
// `k_blocks` K blocks needs, so that no split is empty (16 splits of 56 blocks run as 14 of 4).
inline std::optional<int> forced_k_splits(const char* var, int64_t k_blocks) {
  const char* forced = std::getenv(var);
  if (forced == nullptr) return std::nullopt;
  std::vector<int> v;
  HK_CHECK_VALUE(parse_int_list(forced, v) && v.size() == 1 && v[0] >= 1, var, " must be a positive integer, got '",
                 forced, "'");
  const int64_t per_split = ceil_div(k_blocks, v[0]);
  return static_cast<int>(ceil_div(k_blocks, per_split));
}

// Whether the tuning knob `var` (HOPPERKIT_FP8_GEMM_SPLIT_FIXUP, HOPPERKIT_BF16_GEMM_SPLIT_FIXUP) keeps
// split-K's fixup through global memory where the launcher would sum a tile's splits within a
// cluster: "global"; "auto" or unset: no.
inline bool global_split_fixup_forced(const char* var) {
  const char* forced = std::getenv(var);
  if (forced == nullptr) return false;
  const std::string v(forced);
  HK_CHECK_VALUE(v == "auto" || v == "global", var, " must be auto or global, got '", forced, "'");
  return v == "global";
}

// A fresh nonzero 56-bit epoch for every split-K launch (the kernels' split_epoch,
// common/sync.cuh epoch_flags_arrive).
inline uint64_t next_launch_epoch() {
  static std::atomic<uint64_t> epoch{0};
  constexpr uint64_t kMask = (uint64_t{1} << 56) - 1;
  uint64_t e = 0;
  while (e == 0) e = ++epoch & kMask;
  return e;
}

// Split-K's workspace (gemm/split_k.cuh) for `k_splits` units of each of `tiles` BLOCK_M × BLOCK_N
// tiles, set into the kernel parameters `p` with the split count and a fresh epoch: every unit's
// FP32 partial, then its 8-byte flag (two floats). Allocated per call (caching allocator), so
// concurrent GEMMs on other streams never share it; the flags need no zeroing (a fresh epoch per
// launch, common/sync.cuh epoch_flags_arrive). The returned tensor must outlive the launch.
template <class Params>
at::Tensor attach_split_k_workspace(Params& p, int64_t tiles, int k_splits, int block_m, int block_n,
                                    const at::Tensor& like) {
  const int64_t partials = tiles * k_splits * block_m * block_n;
  at::Tensor workspace = at::empty({partials + 2 * tiles * k_splits}, like.options().dtype(at::kFloat));
  p.k_splits = k_splits;
  p.split_workspace = workspace.data_ptr<float>();
  p.split_flags = reinterpret_cast<unsigned long long*>(p.split_workspace + partials);
  p.split_epoch = next_launch_epoch();
  return workspace;
}

inline void check_cuda_tensor(const at::Tensor& t, const char* name, at::ScalarType dtype) {
  HK_CHECK_VALUE(t.is_cuda(), name, " must be a CUDA tensor, got one on ", t.device());
  HK_CHECK_TYPE(t.scalar_type() == dtype, name, " must be ", dtype, ", got ", t.scalar_type());
}

inline void check_same_device(const at::Tensor& t, const at::Tensor& ref, const char* name, const char* ref_name) {
  HK_CHECK_VALUE(t.device() == ref.device(), name, " is on ", t.device(), " but ", ref_name, " is on ", ref.device());
}

// The kernels are compiled for sm_90a only; on any other device the launch would fail with "no
// kernel image". Say so before launching.
inline void check_sm90(const at::Tensor& t) {
  int major = 0, minor = 0;
  HK_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, t.get_device()));
  HK_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, t.get_device()));
  HK_CHECK(major == 9 && minor == 0, "this build has kernels for sm_90a (H100/H200/H800) only; ", t.device(),
           " is sm_", major, minor, ". Use the hopperkit Python API, which runs the reference there.");
}

inline void check_num_sms(int64_t num_sms) {
  HK_CHECK_VALUE(num_sms >= 1 && num_sms <= 1024, "num_sms must be in [1, 1024], got ", num_sms);
}

// Row stride (elements) of a row-major [..., rows, cols] tensor as a kernel or TMA map is given it. A
// single row is never stepped over and torch reports any stride for it; the row width stands in.
inline int64_t row_stride(const at::Tensor& t) { return t.size(-2) > 1 ? t.stride(-2) : t.size(-1); }

// FP8 [rows, K], K-major with 16-byte aligned rows. The stride of a dimension with one entry is never
// stepped over, so it is not checked (the Python checks agree): a [1, K] view of a wider tensor is
// accepted whatever its row stride. Maps must therefore take the row stride from tma_row_stride,
// never from stride(0), which would hand TMA a stride that is not a multiple of 16 bytes.
inline void check_fp8_k_major(const at::Tensor& t, const char* name) {
  check_cuda_tensor(t, name, at::kFloat8_e4m3fn);
  HK_CHECK_VALUE(t.dim() == 2 && (t.size(1) <= 1 || t.stride(1) == 1) && (t.size(0) <= 1 || t.stride(0) % 16 == 0) &&
                     (t.numel() == 0 || reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0),
                 name, " must be a K-major [rows, K] FP8 tensor with 16-byte aligned rows, got shape ", t.sizes(),
                 " strides ", t.strides());
  // TMA cannot address rows closer together than K (overlapping or expand()-ed views).
  HK_CHECK_VALUE(t.size(0) <= 1 || t.stride(0) >= t.size(1), name,
                 " must have rows that do not overlap (row stride >= K; pass a .contiguous() copy), got shape ",
                 t.sizes(), " strides ", t.strides());
}

// The row stride (elements) a TMA map of a row-major [..., rows, cols] tensor is given: row_stride,
// except that a single row (never stepped over, any stride in torch's eyes) takes its width rounded
// up to 16 bytes, since every stride of a map must be a multiple of 16 bytes.
inline int64_t tma_row_stride(const at::Tensor& t) {
  if (t.size(-2) > 1) return t.stride(-2);
  const int64_t bytes = t.element_size();
  return (t.size(-1) * bytes + 15) / 16 * 16 / bytes;
}

// [G, rows, cols] tensors behind 3-D TMA maps (the grouped FP8 operands, the masked layouts' D). A
// dimension of one entry is never stepped over, whatever stride torch reports for it: the checks
// skip such dimensions, and the maps take tma_row_stride and group_stride_for_tma (the rows' span)
// in their place.
// check_fp8_3d_no_overlap: FP8 rows at least K apart and groups at least the rows' span apart, as
// TMA requires.
inline void check_fp8_3d_no_overlap(const at::Tensor& t, const char* name) {
  HK_CHECK_VALUE((t.size(1) <= 1 || t.stride(1) >= t.size(2)) &&
                     (t.size(0) <= 1 || t.stride(0) >= (t.size(1) - 1) * tma_row_stride(t) + t.size(2)),
                 name, " must have rows and groups that do not overlap (row stride >= K, group stride >= the rows' span; "
                 "pass a .contiguous() copy), got shape ", t.sizes(), " strides ", t.strides());
}
inline int64_t group_stride_for_tma(const at::Tensor& t) {
  return t.size(0) > 1 ? t.stride(0) : t.size(1) * tma_row_stride(t);
}

// Every element of a GEMM output is written once, by one thread of one tile. That is a race-free
// store only when distinct (group, row, column) are distinct addresses: no stride 0 (an expand()-ed
// D), rows at least N elements apart, groups at least a full group of rows apart. Called after the
// layout check (stride(-1) == 1 wherever N > 1), so these bounds are exact for non-negative strides.
inline void check_output_elements_disjoint(const at::Tensor& t, const char* name) {
  if (t.numel() == 0) return;
  const int64_t n = t.size(-1);
  bool ok = at::has_internal_overlap(t) != at::MemOverlap::Yes;
  if (t.dim() >= 2 && t.size(-2) > 1) ok = ok && t.stride(-2) >= n;
  if (t.dim() == 3 && t.size(0) > 1) ok = ok && t.stride(0) >= (t.size(1) - 1) * t.stride(1) + n;
  HK_CHECK_VALUE(ok, name, " must not overlap itself (it is written, one element per thread): row stride >= N and, for ",
                 "[G, rows, N], group stride >= (rows - 1) * row stride + N; got shape ", t.sizes(), " strides ",
                 t.strides(), " (an expand()-ed or as_strided view is not a valid output)");
}

// A tensor's bytes as `rows` runs of `width` bytes, `pitch` bytes apart (one run: rows == 1). Dims
// that continue one another are merged; a tensor that is not a set of equally spaced runs (more than
// two dims after merging, or no unit-stride dim) is described by its whole byte range.
struct ByteRuns {
  int64_t begin, width, pitch, rows;
  int64_t end() const { return begin + (rows - 1) * pitch + width; }
};
// (stride, size) of the dims of size > 1, smallest stride first, in a fixed array: the checks run on
// every call's host path, which allocates nothing. Returns their count.
inline int sorted_strided_dims(const at::Tensor& t, std::array<std::pair<int64_t, int64_t>, 16>& dims) {
  HK_CHECK_VALUE(t.dim() <= 16, "tensors of at most 16 dims, got ", t.dim());
  int count = 0;
  for (int64_t i = 0; i < t.dim(); ++i) {
    if (t.size(i) > 1) dims[count++] = {t.stride(i), t.size(i)};
  }
  std::sort(dims.begin(), dims.begin() + count);
  return count;
}

inline ByteRuns byte_runs(const at::Tensor& t) {
  const int64_t es = t.element_size();
  const auto begin = static_cast<int64_t>(reinterpret_cast<uintptr_t>(t.data_ptr()));
  if (t.numel() == 0) return {begin, 0, 0, 1};
  std::array<std::pair<int64_t, int64_t>, 16> dims;
  const int count = sorted_strided_dims(t, dims);
  int merged = 0;  // dims that continue one another merged in place
  for (int i = 0; i < count; ++i) {
    if (merged > 0 && dims[merged - 1].first * dims[merged - 1].second == dims[i].first) {
      dims[merged - 1].second *= dims[i].second;
    } else {
      dims[merged++] = dims[i];
    }
  }
  if (merged == 0) return {begin, es, es, 1};
  if (merged == 1) {  // one run, or single elements spaced alike (a column)
    const auto [stride, size] = dims[0];
    return stride == 1 ? ByteRuns{begin, size * es, size * es, 1} : ByteRuns{begin, es, stride * es, size};
  }
  if (dims[0].first == 1 && merged == 2) return {begin, dims[0].second * es, dims[1].first * es, dims[1].second};
  int64_t last = 0;
  for (int i = 0; i < merged; ++i) last += (dims[i].second - 1) * dims[i].first;
  return {begin, (last + 1) * es, (last + 1) * es, 1};
}

// Whether two tensors share a byte. Exact where both are runs of one pitch (row-major views of one
// buffer, column slices side by side included), otherwise whether their byte ranges intersect.
inline bool share_memory(const at::Tensor& x_tensor, const at::Tensor& y_tensor) {
  ByteRuns x = byte_runs(x_tensor), y = byte_runs(y_tensor);
  if (x.width == 0 || y.width == 0 || x.end() <= y.begin || y.end() <= x.begin) return false;
  if (x.rows == 1) x.pitch = y.pitch;
  if (y.rows == 1) y.pitch = x.pitch;
  if (x.pitch != y.pitch || x.width > x.pitch || y.width > y.pitch || x.pitch <= 0) return true;
  // Row r of x is [x.begin + r·L, + x.width), row s of y [y.begin + s·L, + y.width): with k = s - r and
  // delta = y.begin - x.begin they meet iff -y.width - delta < k·L < x.width - delta.
  const int64_t pitch = x.pitch, delta = y.begin - x.begin;
  const auto floor_div = [](int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); };
  const int64_t k_lo = floor_div(-y.width - delta, pitch) + 1;
  const int64_t k_hi = -floor_div(-(x.width - delta), pitch) - 1;  // ceil((x.width - delta) / L) - 1
  return std::max(k_lo, -(x.rows - 1)) <= std::min(k_hi, y.rows - 1);
}

// An output of a GEMM is written while its inputs are still being read (by other CTAs, and by the
// 1d1d and BF16 ops' copy of a separate C into D before the launch): it must share no byte with them.
inline void check_output_disjoint(const at::Tensor& d, const char* d_name, const at::Tensor& x, const char* x_name) {
  HK_CHECK_VALUE(!share_memory(d, x), d_name, " must not share memory with ", x_name, " (the kernel writes ", d_name,
                 " while it still reads ", x_name, "), got ", d_name, " of shape ", d.sizes(), " strides ", d.strides(),
                 " overlapping ", x_name, " of shape ", x.sizes(), " strides ", x.strides());
}

inline void check_d_apart(const at::Tensor& d, std::initializer_list<std::pair<const at::Tensor*, const char*>> inputs) {
  for (const auto& [x, name] : inputs) check_output_disjoint(d, "d", *x, name);
}

// Every element of an output written one element per thread (the MLA combine's out and lse) has its
// own address: taken from the smallest stride up, each stride steps past everything the smaller
// ones span. Sufficient, and what every dense or padded view satisfies; an expand()-ed or as_strided
// view that repeats elements fails it.
inline void check_output_no_self_overlap(const at::Tensor& t, const char* name) {
  std::array<std::pair<int64_t, int64_t>, 16> dims;
  const int count = sorted_strided_dims(t, dims);
  int64_t span = 0;
  for (int i = 0; i < count; ++i) {
    const auto [stride, size] = dims[i];
    HK_CHECK_VALUE(stride > span, name, " must be an output that does not overlap itself (an expand()-ed or ",
                   "as_strided view repeats elements), got shape ", t.sizes(), " strides ", t.strides());
    span += (size - 1) * stride;
  }
}

// C of D = C + A·Bᵀ is either D itself (same address and strides: accumulate in place) or shares no
// byte with D. The epilogues read C(r, c) and write D(r, c) from one thread, and the 1d1d op copies a
// separate C into D before the kernel accumulates; a C that partly overlaps D would be read after
// another thread (or the copy) has overwritten it. Byte ranges rather than at::get_overlap_status:
// that answers TooHard for any non-dense tensor, and row-padded views of D are valid outputs. Views
// of one buffer whose ranges interleave without sharing an element are refused too. Returns whether
// C is D; callers have checked that C and D have the same shape.
inline bool c_is_d(const at::Tensor& c, const at::Tensor& d) {
  if (c.data_ptr() == d.data_ptr() && c.strides() == d.strides()) return true;
  const auto range = [](const at::Tensor& t) {
    ByteRuns r = byte_runs(t);
    return std::pair<int64_t, int64_t>(r.begin, r.end());
  };
  const auto [c_begin, c_end] = range(c);
  const auto [d_begin, d_end] = range(d);
  HK_CHECK_VALUE(c_end <= d_begin || d_end <= c_begin,
                 "c must be d itself (same address and strides) or share no memory with d, got c with strides ",
                 c.strides(), " overlapping d (strides ", d.strides(), ", ", c_begin - d_begin,
                 " bytes apart): the kernel reads C(r, c) and writes D(r, c) in one thread, so a partly overlapping C "
                 "would be read after it was overwritten");
  return false;
}

// The group sizes of a k-grouped GEMM (D [G, M, N]): the host list ks, which sizes the operands and
// workspaces, and ks_tensor, the device copy the kernels follow (so that a CUDA graph replays with
// whatever sizes it then holds; its values are the caller's contract, gemm/k_groups.cuh clamps
// them). Each size is a non-negative multiple of 128 (one scale block of the FP8 recipe, two K blocks
// of the BF16 kernel). Returns Σks.
inline int64_t check_k_group_sizes(at::IntArrayRef ks, const at::Tensor& ks_tensor, int64_t g, const at::Tensor& ref,
                                   const char* ref_name) {
  HK_CHECK_VALUE(static_cast<int64_t>(ks.size()) == g, "ks must have ", g, " entries (one per group of d), got ",
                 ks.size());
  int64_t sum_k = 0;
  for (size_t i = 0; i < ks.size(); ++i) {
    HK_CHECK_VALUE(ks[i] >= 0 && ks[i] % 128 == 0 && ks[i] < INT32_MAX, "ks[", i,
                   "] must be a non-negative multiple of 128, got ", ks[i]);
    sum_k += ks[i];
  }
  check_cuda_tensor(ks_tensor, "ks_tensor", at::kInt);
  HK_CHECK_VALUE(ks_tensor.dim() == 1 && ks_tensor.size(0) == g && (g <= 1 || ks_tensor.stride(0) == 1),
                 "ks_tensor must be a contiguous int32 [", g, "] tensor, got shape ", ks_tensor.sizes(), " strides ",
                 ks_tensor.strides());
  check_same_device(ks_tensor, ref, "ks_tensor", ref_name);
  return sum_k;
}

// A k-grouped GEMM whose every group is empty (Σks = 0) is D = C, or D = 0 without C: no launch.
inline void store_empty_k_grouped(at::Tensor& d, const std::optional<at::Tensor>& c, bool c_is_d) {
  if (!c.has_value()) {
    d.zero_();
  } else if (!c_is_d) {
    d.copy_(*c);
  }
}

}  // namespace hopperkit::ops
