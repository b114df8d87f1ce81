// The k-grouped layout's group sizes, read on the device (so one CUDA graph serves any sizes), and
// the rule that keeps wrong sizes inside the buffers: an entry that is not a non-negative multiple
// of 128 counts as an empty group, and every group's K range is cut at the buffers' extent.
#pragma once

#include <cstdint>

namespace hopperkit::gemm {

// K of group i as the kernels use it.
__device__ __forceinline__ int64_t k_group_size(const int32_t* ks, int i) {
  const int32_t k = __ldg(ks + i);
  return k > 0 && k % 128 == 0 ? k : 0;
}

// Group g's K range [begin, end) within the first `extent` K (the buffers' columns). Group g's end
// is group g + 1's begin, so consecutive groups never overlap.
struct KGroupRange {
  int64_t begin, end;
};

__device__ __forceinline__ KGroupRange clamp_k_group(int64_t begin, int64_t size, int64_t extent) {
  return {min(begin, extent), min(begin + size, extent)};
}

// One thread's walk over the groups before g (uniform across a warp: every lane loads the same
// words). For the per-tile use of a few hundred groups at most.
__device__ __forceinline__ KGroupRange k_group_range(const int32_t* ks, int g, int64_t extent) {
  int64_t begin = 0;
  for (int i = 0; i < g; ++i) begin += k_group_size(ks, i);
  return clamp_k_group(begin, k_group_size(ks, g), extent);
}

}  // namespace hopperkit::gemm
