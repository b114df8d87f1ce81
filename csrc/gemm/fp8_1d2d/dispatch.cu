// Maps a runtime tile configuration onto the compiled instantiations.
#include <string>
#include <vector>

#include "common/host_checks.h"
#include "common/tuning_knobs.h"
#include "gemm/fp8_1d2d/params.h"
#include "gemm/instantiations.h"

namespace hopperkit::gemm {

template <int kBlockM, int kBlockN, int kClusterM, bool kOneBoxStaging, bool kMasked, int kClusterN, bool kHalves>
void launch_fp8_gemm_1d2d(const Fp8Gemm1d2dParams& params, int num_sms, bool pdl, cudaStream_t stream);

// The compiled instantiations, one file each (instantiations/): the launch below and the list
// (fp8_1d2d_instantiations) read these tables.
// Dense tiles, for the normal layout and the contiguous layout's 64- to 192-row tiles:
// (BLOCK_M, BLOCK_N, cluster_m: B multicast, cluster_n: A multicast, one-box staging).
#define HK_FP8_1D2D_DENSE_CONFIGS(X) \
  X(64, 64, 1, 1, false)             \
  X(64, 64, 1, 2, false)             \
  X(64, 128, 1, 1, false)            \
  X(128, 64, 1, 1, false)            \
  X(128, 128, 1, 1, false)           \
  X(128, 128, 1, 1, true)            \
  X(128, 64, 2, 1, false)            \
  X(128, 128, 2, 1, false)           \
  X(128, 128, 2, 1, true)            \
  X(128, 192, 1, 1, false)           \
  X(128, 192, 2, 1, false)           \
  X(128, 256, 1, 1, false)           \
  X(192, 64, 1, 1, false)            \
  X(192, 64, 2, 1, false)            \
  X(256, 128, 1, 1, false)           \
  X(256, 128, 1, 1, true)            \
  X(256, 128, 2, 1, false)           \
  X(256, 128, 2, 1, true)            \
  X(256, 128, 1, 2, false)
// The masked layout's tiles, with the compacting scheduler and no clusters: (BLOCK_M, BLOCK_N,
// one-box staging).
#define HK_FP8_1D2D_MASKED_CONFIGS(X) \
  X(64, 64, false)                    \
  X(64, 128, false)                   \
  X(128, 64, false)                   \
  X(128, 128, false)                  \
  X(128, 128, true)                   \
  X(256, 128, false)                  \
  X(256, 128, true)
// The contiguous layout's 256-row tiles, which multiply each 128-row half with its own expert:
// 256x128 without B multicast, a store box per box; (cluster_n: A multicast).
#define HK_FP8_1D2D_HALVES_CONFIGS(X) X(1) X(2)

namespace {

std::string describe(const char* kind, int block_m, int block_n, int cluster_m, int cluster_n, bool one_box) {
  return std::string("kind=") + kind + " block_m=" + std::to_string(block_m) + " block_n=" + std::to_string(block_n) +
         " cluster_m=" + std::to_string(cluster_m) + " cluster_n=" + std::to_string(cluster_n) +
         " one_box=" + (one_box ? "1" : "0");
}

}  // namespace

std::vector<std::string> fp8_1d2d_instantiations() {
  std::vector<std::string> list;
#define HK_FP8_1D2D_DESCRIBE_DENSE(BM, BN, CM, CN, ONE_BOX) list.push_back(describe("dense", BM, BN, CM, CN, ONE_BOX));
#define HK_FP8_1D2D_DESCRIBE_MASKED(BM, BN, ONE_BOX) list.push_back(describe("masked", BM, BN, 1, 1, ONE_BOX));
#define HK_FP8_1D2D_DESCRIBE_HALVES(CN) list.push_back(describe("halves", 256, 128, 1, CN, false));
  HK_FP8_1D2D_DENSE_CONFIGS(HK_FP8_1D2D_DESCRIBE_DENSE)
  HK_FP8_1D2D_MASKED_CONFIGS(HK_FP8_1D2D_DESCRIBE_MASKED)
  HK_FP8_1D2D_HALVES_CONFIGS(HK_FP8_1D2D_DESCRIBE_HALVES)
#undef HK_FP8_1D2D_DESCRIBE_DENSE
#undef HK_FP8_1D2D_DESCRIBE_MASKED
#undef HK_FP8_1D2D_DESCRIBE_HALVES
  return list;
}

void run_fp8_gemm_1d2d(const Fp8Gemm1d2dParams& params, Fp8Gemm1d2dConfig config, int num_sms, bool pdl,
                       cudaStream_t stream) {
  if (params.layout == GemmLayout::kMGroupedContiguous && config.block_m == 256) {
    HK_CHECK(config.block_n == 128 && config.cluster_m == 1 && !config.one_box_staging,
             "the contiguous layout's 256-row tiles are compiled as 256x128 without B multicast, a store box per box",
             tuning_knobs_note(), instantiations_hint("fp8_1d2d"));
#define HK_FP8_1D2D_HALVES_LAUNCH(CN) \
  if (config.cluster_n == CN) return launch_fp8_gemm_1d2d<256, 128, 1, false, false, CN, true>(params, num_sms, pdl, stream);
    HK_FP8_1D2D_HALVES_CONFIGS(HK_FP8_1D2D_HALVES_LAUNCH)
#undef HK_FP8_1D2D_HALVES_LAUNCH
    HK_CHECK(false, "no contiguous 256x128 FP8 1d2d GEMM compiled for cluster_n=", config.cluster_n,
             tuning_knobs_note(), instantiations_hint("fp8_1d2d"));
  }
  if (params.layout == GemmLayout::kMGroupedMasked) {
#define HK_FP8_1D2D_MASKED_LAUNCH(BM, BN, ONE_BOX)                                                      \
  if (config.block_m == BM && config.block_n == BN && config.cluster_m == 1 && config.cluster_n == 1 && \
      config.one_box_staging == ONE_BOX)                                                                \
    return launch_fp8_gemm_1d2d<BM, BN, 1, ONE_BOX, true, 1, false>(params, num_sms, pdl, stream);
    HK_FP8_1D2D_MASKED_CONFIGS(HK_FP8_1D2D_MASKED_LAUNCH)
#undef HK_FP8_1D2D_MASKED_LAUNCH
    HK_CHECK(false, "no masked FP8 1d2d GEMM compiled for BLOCK_M=", config.block_m, " BLOCK_N=", config.block_n,
             " cluster=", config.cluster_m, " one_box_staging=", config.one_box_staging, tuning_knobs_note(),
             instantiations_hint("fp8_1d2d"));
  }
#define HK_FP8_1D2D_DENSE_LAUNCH(BM, BN, CM, CN, ONE_BOX)                                  \
  if (config.block_m == BM && config.block_n == BN && config.cluster_m == CM &&            \
      config.cluster_n == CN && config.one_box_staging == ONE_BOX)                          \
    return launch_fp8_gemm_1d2d<BM, BN, CM, ONE_BOX, false, CN, false>(params, num_sms, pdl, stream);
  HK_FP8_1D2D_DENSE_CONFIGS(HK_FP8_1D2D_DENSE_LAUNCH)
#undef HK_FP8_1D2D_DENSE_LAUNCH
  HK_CHECK(false, "no FP8 1d2d GEMM compiled for BLOCK_M=", config.block_m, " BLOCK_N=", config.block_n,
           " cluster=", config.cluster_m, "x", config.cluster_n, " one_box_staging=", config.one_box_staging,
           tuning_knobs_note(), instantiations_hint("fp8_1d2d"));
}

}  // namespace hopperkit::gemm
