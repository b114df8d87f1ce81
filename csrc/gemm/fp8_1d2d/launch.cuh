// Launcher of the FP8 1d2d GEMM for one tile configuration.
#pragma once

#include "common/launch.h"
#include "common/tuning_knobs.h"
#include "gemm/heuristics.h"
#include "gemm/fp8_1d2d/kernel.cuh"

namespace hopperkit::gemm {

// Split-K within a cluster (GemmProblem::split_in_cluster, gemm/split_k_cluster.cuh
// splits_in_cluster), for the tiles compiled with it: the summing pass costs little, so the split
// count a tile gets this way is worth more than a higher one through global memory (README.md
// "Split-K"). 0: none; the global fixup runs the caller's count.
template <class T>
int fp8_splits_in_cluster(long tiles, int num_k_blocks, int max_splits, int num_sms) {
  if constexpr (!T::kSplitInCluster) {
    return 0;
  } else {
    return splits_in_cluster<T>(fp8_gemm_1d2d_kernel<T>, tiles, num_k_blocks, max_splits, num_sms);
  }
}

template <int kBlockM, int kBlockN, int kClusterM, bool kOneBoxStaging, bool kMasked = false, int kClusterN = 1,
          bool kHalves = false>
void launch_fp8_gemm_1d2d(const Fp8Gemm1d2dParams& params_in, int num_sms, bool pdl, cudaStream_t stream) {
  using T = Fp8Gemm1d2dTraits<kBlockM, kBlockN, kClusterM, kOneBoxStaging, kMasked, kClusterN, kHalves>;
  Fp8Gemm1d2dParams params = params_in;
  params.sched_rows = scheduled_rows(params, kBlockM);
  params.band_m = fp8_1d2d_raster_band(kBlockM, params.k);
  const int m_blocks = (params.sched_rows + kBlockM - 1) / kBlockM;
  long tiles = static_cast<long>(m_blocks) * ((params.n + kBlockN - 1) / kBlockN) * params.k_splits;  // work units
  // Pairs must always find a partner tile in the same N block (see TileScheduler), and multicast
  // is only valid between tiles of one B matrix.
  // The configuration checks below hold for every configuration the heuristics choose: a tile,
  // cluster or split count forced by a tuning knob may fail them, and their errors name the knobs.
  HK_CHECK(kClusterM == 1 || m_blocks % kClusterM == 0, "B multicast needs an even number of M blocks, got ", m_blocks,
           tuning_knobs_note());
  HK_CHECK(kClusterM == 1 || params.layout == GemmLayout::kNormal, "B multicast is for the normal layout only",
           tuning_knobs_note());
  // A multicast pairs the N blocks 2j and 2j + 1 of an M block (TileScheduler kPairN): with an even
  // number of N blocks the units come in such pairs, and every CTA of an (even) persistent grid has
  // a partner with as many units. On the contiguous layout the pair's M block is one set of
  // experts, so both CTAs run the same passes (traits.h kHalves).
  HK_CHECK(kClusterN == 1 || ((params.n + kBlockN - 1) / kBlockN % 2 == 0 &&
                              (params.layout == GemmLayout::kNormal || kHalves) && params.k_splits == 1),
           "A multicast needs an even number of N blocks, the normal layout (or the contiguous one's "
           "per-half experts) and no split-K", tuning_knobs_note());
  HK_CHECK((params.layout == GemmLayout::kMGroupedMasked) == kMasked && (!kMasked || params.k_splits == 1),
           "the masked layout runs its own instantiations (without split-K), and only it", tuning_knobs_note());
  // A contiguous-layout tile must not mix experts, whose segments are aligned to 128 rows only (a
  // masked tile stays within its group: the scheduler walks each group's rows separately), unless it
  // multiplies each 128-row half with its own expert (traits.h kHalves), which only that layout has.
  HK_CHECK(kBlockM <= 128 || kHalves || params.layout != GemmLayout::kMGroupedContiguous,
           "tiles of more than 128 rows are not for the contiguous layout", tuning_knobs_note());
  HK_CHECK(!kHalves || (params.layout == GemmLayout::kMGroupedContiguous && params.k_splits == 1),
           "per-half experts are for the contiguous layout, without split-K", tuning_knobs_note());
  HK_CHECK(params.k_splits == 1 || (T::kClusterSize == 1 && params.layout == GemmLayout::kNormal &&
                                    params.split_workspace != nullptr && params.split_flags != nullptr &&
                                    params.split_epoch != 0 && params.split_epoch < (1ull << 56) && params.k_splits < 256),
           "split-K needs the normal layout, no cluster, a workspace, an epoch and fewer than 256 splits",
           tuning_knobs_note());
  HK_CHECK(params.a_box_rows >= 8 && params.a_box_rows <= kBlockM && params.a_box_rows % 8 == 0,
           "A box rows must be a multiple of 8 in [8, BLOCK_M], got ", params.a_box_rows);
  HK_CHECK(tiles < INT32_MAX, "too many work units for the scheduler: ", tiles);
  if (tiles == 0) return;
  int cluster = T::kClusterSize;
  params.split_in_cluster = 0;
  if (params.max_cluster_splits > 1 && params.split_fixup == Fp8Gemm1d2dParams::SplitFixup::kAuto) {
    const long output_tiles = tiles / params.k_splits;
    if (const int s = fp8_splits_in_cluster<T>(output_tiles, (params.k + T::kBlockK - 1) / T::kBlockK,
                                               params.max_cluster_splits, num_sms)) {
      // One unit per CTA, a tile's splits (consecutive units) one cluster, split = cluster rank.
      params.k_splits = s;
      params.split_in_cluster = 1;
      cluster = s;
      tiles = output_tiles * s;
    }
  }
  // The masked layout's unit count is an upper bound (the scheduler skips blocks past masked_m), so
  // its grid keeps every SM. PERF (H200, the same calls in turns, all SMs / the fewest CTAs, µs):
  // 4096×7168×16384 (896 units, 128 CTAs) 702.9 / 699.2, 4096×7168×2048 107.6 / 106.0,
  // 4096×24576×1536 261.0 / 258.8, 4096×2112×7168 (352 units, 118 CTAs) 111.2 / 109.5,
  // 8192×4096×7168 361.2 / 357.6, three more M = 4096-8192 shapes 0.995-0.999.
  launch_kernel(fp8_gemm_1d2d_kernel<T>,
                persistent_launch_config<T>(tiles, num_sms, cluster, pdl, stream, /*fewest_ctas=*/!T::kMasked),
                params);
}

}  // namespace hopperkit::gemm
