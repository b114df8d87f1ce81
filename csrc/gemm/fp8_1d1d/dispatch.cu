// Maps a runtime tile configuration onto the compiled instantiations.
#include "common/host_checks.h"
#include "common/tuning_knobs.h"
#include "gemm/fp8_1d1d/params.h"
#include "gemm/instantiations.h"

namespace hopperkit::gemm {

template <int kBlockM, int kBlockN>
void launch_fp8_gemm_1d1d(const Fp8Gemm1d1dParams& params, int num_sms, bool pdl, cudaStream_t stream);

// The compiled tiles, one instantiation file each: the launch, the probe and the list read this table.
#define HK_FP8_1D1D_CONFIGS(X) X(64, 128) X(128, 160)

bool fp8_1d1d_compiled(Fp8Gemm1d1dConfig config) {
#define HK_FP8_1D1D_MATCH(BM, BN) \
  if (config.block_m == BM && config.block_n == BN) return true;
  HK_FP8_1D1D_CONFIGS(HK_FP8_1D1D_MATCH)
#undef HK_FP8_1D1D_MATCH
  return false;
}

std::vector<std::string> fp8_1d1d_instantiations() {
#define HK_FP8_1D1D_DESCRIBE(BM, BN) "block_m=" #BM " block_n=" #BN,
  return {HK_FP8_1D1D_CONFIGS(HK_FP8_1D1D_DESCRIBE)};
#undef HK_FP8_1D1D_DESCRIBE
}

void run_fp8_gemm_1d1d(const Fp8Gemm1d1dParams& params, Fp8Gemm1d1dConfig config, int num_sms, bool pdl,
                       cudaStream_t stream) {
#define HK_FP8_1D1D_LAUNCH(BM, BN) \
  if (config.block_m == BM && config.block_n == BN) return launch_fp8_gemm_1d1d<BM, BN>(params, num_sms, pdl, stream);
  HK_FP8_1D1D_CONFIGS(HK_FP8_1D1D_LAUNCH)
#undef HK_FP8_1D1D_LAUNCH
  HK_CHECK(false, "no FP8 1d1d GEMM compiled for BLOCK_M=", config.block_m, " BLOCK_N=", config.block_n,
           tuning_knobs_note(), instantiations_hint("fp8_1d1d"));
}

}  // namespace hopperkit::gemm
