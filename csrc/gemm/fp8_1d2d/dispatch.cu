// Maps a runtime tile configuration onto the compiled instantiations.
#include "common/host_checks.h"
#include "gemm/fp8_1d2d/params.h"

namespace hopperkit::gemm {

template <int kBlockM, int kBlockN, int kClusterM>
void launch_fp8_gemm_1d2d(const Fp8Gemm1d2dParams& params, int num_sms, bool pdl, cudaStream_t stream);

void run_fp8_gemm_1d2d(const Fp8Gemm1d2dParams& params, Fp8Gemm1d2dConfig config, int num_sms, bool pdl,
                       cudaStream_t stream) {
#define HK_FP8_1D2D_CONFIG(BM, BN, CM)                                                      \
  if (config.block_m == BM && config.block_n == BN && config.cluster_m == CM)               \
    return launch_fp8_gemm_1d2d<BM, BN, CM>(params, num_sms, pdl, stream);
  HK_FP8_1D2D_CONFIG(64, 64, 1)
  HK_FP8_1D2D_CONFIG(64, 128, 1)
  HK_FP8_1D2D_CONFIG(128, 64, 1)
  HK_FP8_1D2D_CONFIG(128, 128, 1)
  HK_FP8_1D2D_CONFIG(128, 64, 2)
  HK_FP8_1D2D_CONFIG(128, 128, 2)
  HK_FP8_1D2D_CONFIG(128, 192, 1)
  HK_FP8_1D2D_CONFIG(128, 192, 2)
  HK_FP8_1D2D_CONFIG(256, 128, 1)
  HK_FP8_1D2D_CONFIG(256, 128, 2)
#undef HK_FP8_1D2D_CONFIG
  HK_CHECK(false, "no FP8 1d2d GEMM compiled for BLOCK_M=", config.block_m, " BLOCK_N=", config.block_n,
           " cluster=", config.cluster_m);
}

}  // namespace hopperkit::gemm
