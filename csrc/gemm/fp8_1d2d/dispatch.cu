// Maps a runtime tile configuration onto the compiled instantiations.
#include "common/host_checks.h"
#include "common/tuning_knobs.h"
#include "gemm/fp8_1d2d/params.h"

namespace hopperkit::gemm {

template <int kBlockM, int kBlockN, int kClusterM, bool kOneBoxStaging, bool kMasked, int kClusterN, bool kHalves>
void launch_fp8_gemm_1d2d(const Fp8Gemm1d2dParams& params, int num_sms, bool pdl, cudaStream_t stream);

void run_fp8_gemm_1d2d(const Fp8Gemm1d2dParams& params, Fp8Gemm1d2dConfig config, int num_sms, bool pdl,
                       cudaStream_t stream) {
  // The contiguous layout's 256-row tile multiplies each 128-row half with its own expert.
  if (params.layout == GemmLayout::kMGroupedContiguous && config.block_m == 256) {
    HK_CHECK(config.block_n == 128 && config.cluster_m == 1 && !config.one_box_staging,
             "the contiguous layout's 256-row tiles are compiled as 256x128 without B multicast, a store box per box",
             tuning_knobs_note());
    if (config.cluster_n == 2) return launch_fp8_gemm_1d2d<256, 128, 1, false, false, 2, true>(params, num_sms, pdl, stream);
    return launch_fp8_gemm_1d2d<256, 128, 1, false, false, 1, true>(params, num_sms, pdl, stream);
  }
  if (params.layout == GemmLayout::kMGroupedMasked) {
#define HK_FP8_1D2D_MASKED_CONFIG(BM, BN, ONE_BOX)                                                     \
  if (config.block_m == BM && config.block_n == BN && config.cluster_m == 1 && config.cluster_n == 1 &&        \
      config.one_box_staging == ONE_BOX)                                                                \
    return launch_fp8_gemm_1d2d<BM, BN, 1, ONE_BOX, true, 1, false>(params, num_sms, pdl, stream);
    HK_FP8_1D2D_MASKED_CONFIG(64, 64, false)
    HK_FP8_1D2D_MASKED_CONFIG(64, 128, false)
    HK_FP8_1D2D_MASKED_CONFIG(128, 64, false)
    HK_FP8_1D2D_MASKED_CONFIG(128, 128, false)
    HK_FP8_1D2D_MASKED_CONFIG(128, 128, true)
    HK_FP8_1D2D_MASKED_CONFIG(256, 128, false)
    HK_FP8_1D2D_MASKED_CONFIG(256, 128, true)
#undef HK_FP8_1D2D_MASKED_CONFIG
    HK_CHECK(false, "no masked FP8 1d2d GEMM compiled for BLOCK_M=", config.block_m, " BLOCK_N=", config.block_n,
             " cluster=", config.cluster_m, " one_box_staging=", config.one_box_staging, tuning_knobs_note());
  }
#define HK_FP8_1D2D_CONFIG(BM, BN, CM, CN, ONE_BOX)                                             \
  if (config.block_m == BM && config.block_n == BN && config.cluster_m == CM &&                  \
      config.cluster_n == CN && config.one_box_staging == ONE_BOX)                                \
    return launch_fp8_gemm_1d2d<BM, BN, CM, ONE_BOX, false, CN, false>(params, num_sms, pdl, stream);
  HK_FP8_1D2D_CONFIG(64, 64, 1, 1, false)
  HK_FP8_1D2D_CONFIG(64, 64, 1, 2, false)
  HK_FP8_1D2D_CONFIG(64, 128, 1, 1, false)
  HK_FP8_1D2D_CONFIG(128, 64, 1, 1, false)
  HK_FP8_1D2D_CONFIG(128, 128, 1, 1, false)
  HK_FP8_1D2D_CONFIG(128, 128, 1, 1, true)
  HK_FP8_1D2D_CONFIG(128, 64, 2, 1, false)
  HK_FP8_1D2D_CONFIG(128, 128, 2, 1, false)
  HK_FP8_1D2D_CONFIG(128, 128, 2, 1, true)
  HK_FP8_1D2D_CONFIG(128, 192, 1, 1, false)
  HK_FP8_1D2D_CONFIG(128, 192, 2, 1, false)
  HK_FP8_1D2D_CONFIG(192, 64, 1, 1, false)
  HK_FP8_1D2D_CONFIG(192, 64, 2, 1, false)
  HK_FP8_1D2D_CONFIG(256, 128, 1, 1, false)
  HK_FP8_1D2D_CONFIG(256, 128, 1, 1, true)
  HK_FP8_1D2D_CONFIG(256, 128, 2, 1, false)
  HK_FP8_1D2D_CONFIG(256, 128, 2, 1, true)
  HK_FP8_1D2D_CONFIG(256, 128, 1, 2, false)
#undef HK_FP8_1D2D_CONFIG
  HK_CHECK(false, "no FP8 1d2d GEMM compiled for BLOCK_M=", config.block_m, " BLOCK_N=", config.block_n,
           " cluster=", config.cluster_m, "x", config.cluster_n, " one_box_staging=", config.one_box_staging,
           tuning_knobs_note());
}

}  // namespace hopperkit::gemm
