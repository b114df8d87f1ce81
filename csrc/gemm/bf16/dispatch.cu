// Maps a runtime tile configuration and operand majorness onto the compiled instantiations.
#include "common/host_checks.h"
#include "common/tuning_knobs.h"
#include "gemm/bf16/params.h"

namespace hopperkit::gemm {

template <int kBlockM, int kBlockN, OperandMajor kMajorA, OperandMajor kMajorB, Bf16Variant kVariant>
void launch_bf16_gemm(const Bf16GemmParams& params, int num_sms, bool pdl, cudaStream_t stream);

namespace {

// One table serves the launch and the probe (bf16_gemm_compiled): with kProbe nothing launches,
// and the result says whether an instantiation takes the configuration. A configuration that none
// takes can only come from a tuning knob (the heuristics choose compiled ones): the launch's error
// names the knobs set.
#define HK_BF16_REQUIRE(cond, ...)                     \
  if (!(cond)) {                                       \
    if constexpr (kProbe) return false;                \
    HK_CHECK(false, __VA_ARGS__, tuning_knobs_note()); \
  }
#define HK_BF16_LAUNCH(BM, BN, MA, MB, VARIANT)                                                     \
  {                                                                                                 \
    if constexpr (!kProbe) launch_bf16_gemm<BM, BN, MA, MB, VARIANT>(params, num_sms, pdl, stream); \
    return true;                                                                                    \
  }

template <bool kProbe, OperandMajor kMajorA, OperandMajor kMajorB, Bf16Variant kVariant = Bf16Variant::kGeneral>
bool dispatch_tile(const Bf16GemmParams& params, Bf16GemmConfig config, int num_sms, bool pdl, cudaStream_t stream) {
#define HK_BF16_CONFIG(BM, BN) \
  if (config.block_m == BM && config.block_n == BN) HK_BF16_LAUNCH(BM, BN, kMajorA, kMajorB, kVariant)
  HK_BF16_CONFIG(128, 256)
  HK_BF16_CONFIG(128, 128)
  HK_BF16_CONFIG(64, 256)
  HK_BF16_CONFIG(64, 128)
  // The narrow tile of decode-sized M, the 144-, 176- and 192-wide ones of N = 2112 and 576, and
  // the 96- and 176-wide ones of mid-sized grids, compiled for the normal layout's K-major operands
  // only.
  if constexpr (kMajorA == OperandMajor::kK && kMajorB == OperandMajor::kK && kVariant == Bf16Variant::kGeneral) {
    HK_BF16_CONFIG(128, 192)
    HK_BF16_CONFIG(128, 176)
    HK_BF16_CONFIG(128, 144)
    HK_BF16_CONFIG(128, 96)
    HK_BF16_CONFIG(64, 176)
    HK_BF16_CONFIG(64, 144)
    HK_BF16_CONFIG(64, 96)
    HK_BF16_CONFIG(64, 64)
  }
#undef HK_BF16_CONFIG
  HK_BF16_REQUIRE(false, "no BF16 GEMM compiled for BLOCK_M=", config.block_m, " BLOCK_N=", config.block_n,
                  " with ", kMajorA == OperandMajor::kK ? "K" : "MN", "-major A and ",
                  kMajorB == OperandMajor::kK ? "K" : "MN", "-major B")
  return false;
}

template <bool kProbe>
bool dispatch(const Bf16GemmParams& params, Bf16GemmConfig config, int num_sms, bool pdl, cudaStream_t stream) {
  constexpr OperandMajor K = OperandMajor::kK, MN = OperandMajor::kMN;
  if (config.swap_ab) {
    HK_BF16_REQUIRE(params.layout == GemmLayout::kNormal && config.major_a == K && config.major_b == K &&
                        config.block_m == 64,
                    "the swapped decode GEMM is compiled for the normal layout with K-major A and B and 64 weight rows")
    if (config.block_n == 8) HK_BF16_LAUNCH(64, 8, K, K, Bf16Variant::kSwapAB)
    if (config.block_n == 16) HK_BF16_LAUNCH(64, 16, K, K, Bf16Variant::kSwapAB)
    if (config.block_n == 32) HK_BF16_LAUNCH(64, 32, K, K, Bf16Variant::kSwapAB)
    if (config.block_n == 64) HK_BF16_LAUNCH(64, 64, K, K, Bf16Variant::kSwapAB)
    if (config.block_n == 96) HK_BF16_LAUNCH(64, 96, K, K, Bf16Variant::kSwapAB)
    HK_BF16_REQUIRE(false, "no swapped BF16 decode GEMM compiled for ", config.block_n, " token columns")
  }
  // Split-K through global memory (k_splits > 1), or within clusters where the launcher finds they
  // fit (max_cluster_splits > 1; else the split-K kernel runs the caller's k_splits, 1 included).
  if (config.k_splits > 1 || params.max_cluster_splits > 1) {
    HK_BF16_REQUIRE(params.layout == GemmLayout::kNormal && config.major_a == K && config.major_b == K,
                    "BF16 split-K is compiled for the normal layout with K-major A and B")
    if (config.block_m == 64 && config.block_n == 64) HK_BF16_LAUNCH(64, 64, K, K, Bf16Variant::kSplitK)
    if (config.block_m == 64 && config.block_n == 96) HK_BF16_LAUNCH(64, 96, K, K, Bf16Variant::kSplitK)
    if (config.block_m == 64 && config.block_n == 128) HK_BF16_LAUNCH(64, 128, K, K, Bf16Variant::kSplitK)
    if (config.block_m == 128 && config.block_n == 128) HK_BF16_LAUNCH(128, 128, K, K, Bf16Variant::kSplitK)
    HK_BF16_REQUIRE(false, "no BF16 split-K GEMM compiled for BLOCK_M=", config.block_m, " BLOCK_N=", config.block_n)
  }
  if (params.layout == GemmLayout::kKGroupedContiguous) {
    HK_BF16_REQUIRE(config.major_a == MN && config.major_b == MN, "the k-grouped BF16 GEMM's operands are MN-major")
    return dispatch_tile<kProbe, MN, MN, Bf16Variant::kKGrouped>(params, config, num_sms, pdl, stream);
  }
  if (params.layout == GemmLayout::kMGroupedMasked) {
    HK_BF16_REQUIRE(config.major_a == K && config.major_b == K, "the masked BF16 GEMM's operands are K-major")
    return dispatch_tile<kProbe, K, K, Bf16Variant::kMasked>(params, config, num_sms, pdl, stream);
  }
  if (config.major_a == K && config.major_b == K) {
    return dispatch_tile<kProbe, K, K>(params, config, num_sms, pdl, stream);
  }
  if (config.major_a == K && config.major_b == MN) {
    return dispatch_tile<kProbe, K, MN>(params, config, num_sms, pdl, stream);
  }
  if (config.major_a == MN && config.major_b == K) {
    return dispatch_tile<kProbe, MN, K>(params, config, num_sms, pdl, stream);
  }
  return dispatch_tile<kProbe, MN, MN>(params, config, num_sms, pdl, stream);
}

#undef HK_BF16_LAUNCH
#undef HK_BF16_REQUIRE

}  // namespace

void run_bf16_gemm(const Bf16GemmParams& params, Bf16GemmConfig config, int num_sms, bool pdl, cudaStream_t stream) {
  dispatch<false>(params, config, num_sms, pdl, stream);
}

bool bf16_gemm_compiled(const Bf16GemmParams& params, const Bf16GemmConfig& config) {
  return dispatch<true>(params, config, 0, false, nullptr);
}

}  // namespace hopperkit::gemm
