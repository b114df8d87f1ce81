// The k-grouped GEMM's per-group tensor maps and K-block prefix, derived on the device from the
// group sizes (ks_tensor), one warp per group.
//
// A_g [M, K_g] starts M·ΣK_<g bytes into the flat A buffer with row stride K_g: no fixed-stride view
// of one tensor covers every group, so each group gets its own pair of maps. Writing them here
// rather than on the host keeps the call free of host work that depends on the sizes, so it can be
// captured in a CUDA graph and replayed with other sizes of the same total.
#include "common/host_checks.h"
#include "common/launch.h"
#include "common/tma.cuh"
#include "gemm/fp8_1d1d/params.h"
#include "gemm/k_groups.cuh"

namespace hopperkit::gemm {
namespace {

constexpr int kWarpsPerBlock = 4;

__device__ __forceinline__ void publish_group_map(CUtensorMap* smem_map, const CUtensorMap& tmpl, CUtensorMap* out,
                                                  const uint8_t* base, int64_t k, int lane) {
  // A CUtensorMap is 128 bytes: one word per lane.
  reinterpret_cast<uint32_t*>(smem_map)[lane] = reinterpret_cast<const uint32_t*>(&tmpl)[lane];
  __syncwarp();
  if (lane == 0) {
    tensormap_set_address(smem_map, base);
    tensormap_set_inner_dim(smem_map, static_cast<uint32_t>(k));
    tensormap_set_row_stride(smem_map, static_cast<uint64_t>(k));
  }
  __syncwarp();
  tensormap_publish(out, smem_map);
}

__global__ void __launch_bounds__(32 * kWarpsPerBlock) k_grouped_maps_kernel(const __grid_constant__ KGroupedMapsParams p) {
  __shared__ alignas(128) CUtensorMap staged[kWarpsPerBlock][2];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = blockIdx.x * kWarpsPerBlock + warp;
  if (g >= p.groups) return;

  // The sizes before this group, summed across the warp (k_group_range's walk, in parallel).
  int64_t begin = 0;
  for (int i = lane; i < g; i += 32) begin += k_group_size(p.ks, i);
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) begin += __shfl_xor_sync(0xffffffffu, begin, offset);
  const KGroupRange r = clamp_k_group(begin, k_group_size(p.ks, g), p.sum_k);
  if (lane == 0) {
    p.kb_prefix[g] = static_cast<int32_t>(r.begin / 128);
    if (g == p.groups - 1) p.kb_prefix[g + 1] = static_cast<int32_t>(r.end / 128);
  }
  const int64_t k = r.end - r.begin;
  if (k == 0) return;  // the GEMM never reads an empty group's maps
  publish_group_map(&staged[warp][0], p.a_template, p.maps + 2 * g, p.a + p.m * r.begin, k, lane);
  publish_group_map(&staged[warp][1], p.b_template, p.maps + 2 * g + 1, p.b + p.n * r.begin, k, lane);
}

}  // namespace

void run_k_grouped_maps(const KGroupedMapsParams& params, cudaStream_t stream) {
  HK_CHECK(params.groups > 0 && params.sum_k > 0 && params.sum_k % 128 == 0 && params.sum_k / 128 < INT32_MAX,
           "k-grouped maps need groups and a positive Σks in multiples of 128");
  HK_CHECK(reinterpret_cast<uintptr_t>(params.maps) % 128 == 0, "the map table must be 128-byte aligned");
  LaunchConfig cfg;
  cfg.grid = dim3(static_cast<unsigned>((params.groups + kWarpsPerBlock - 1) / kWarpsPerBlock));
  cfg.block = dim3(32 * kWarpsPerBlock);
  cfg.stream = stream;
  launch_kernel(k_grouped_maps_kernel, cfg, params);
}

}  // namespace hopperkit::gemm
