// Maps a runtime tile configuration and operand majorness onto the compiled instantiations.
#include "common/host_checks.h"
#include "gemm/bf16/params.h"

namespace hopperkit::gemm {

template <int kBlockM, int kBlockN, OperandMajor kMajorA, OperandMajor kMajorB, Bf16Variant kVariant>
void launch_bf16_gemm(const Bf16GemmParams& params, int num_sms, bool pdl, cudaStream_t stream);

namespace {

template <OperandMajor kMajorA, OperandMajor kMajorB, Bf16Variant kVariant = Bf16Variant::kGeneral>
void dispatch_tile(const Bf16GemmParams& params, Bf16GemmConfig config, int num_sms, bool pdl, cudaStream_t stream) {
#define HK_BF16_CONFIG(BM, BN)                       \
  if (config.block_m == BM && config.block_n == BN) \
    return launch_bf16_gemm<BM, BN, kMajorA, kMajorB, kVariant>(params, num_sms, pdl, stream);
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
  HK_CHECK(false, "no BF16 GEMM compiled for BLOCK_M=", config.block_m, " BLOCK_N=", config.block_n);
}

}  // namespace

void run_bf16_gemm(const Bf16GemmParams& params, Bf16GemmConfig config, int num_sms, bool pdl, cudaStream_t stream) {
  constexpr OperandMajor K = OperandMajor::kK, MN = OperandMajor::kMN;
  if (config.swap_ab) {
    HK_CHECK(params.layout == GemmLayout::kNormal && config.major_a == K && config.major_b == K && config.block_m == 64,
             "the swapped decode GEMM is compiled for the normal layout with K-major A and B and 64 weight rows");
    if (config.block_n == 8) return launch_bf16_gemm<64, 8, K, K, Bf16Variant::kSwapAB>(params, num_sms, pdl, stream);
    if (config.block_n == 16) return launch_bf16_gemm<64, 16, K, K, Bf16Variant::kSwapAB>(params, num_sms, pdl, stream);
    if (config.block_n == 32) return launch_bf16_gemm<64, 32, K, K, Bf16Variant::kSwapAB>(params, num_sms, pdl, stream);
    if (config.block_n == 64) return launch_bf16_gemm<64, 64, K, K, Bf16Variant::kSwapAB>(params, num_sms, pdl, stream);
    if (config.block_n == 96) return launch_bf16_gemm<64, 96, K, K, Bf16Variant::kSwapAB>(params, num_sms, pdl, stream);
    HK_CHECK(false, "no swapped BF16 decode GEMM compiled for ", config.block_n, " token columns");
  }
  // Split-K through global memory (k_splits > 1), or within clusters where the launcher finds they
  // fit (max_cluster_splits > 1; else the split-K kernel runs the caller's k_splits, 1 included).
  if (config.k_splits > 1 || params.max_cluster_splits > 1) {
    HK_CHECK(params.layout == GemmLayout::kNormal && config.major_a == K && config.major_b == K,
             "BF16 split-K is compiled for the normal layout with K-major A and B");
    if (config.block_m == 64 && config.block_n == 64)
      return launch_bf16_gemm<64, 64, K, K, Bf16Variant::kSplitK>(params, num_sms, pdl, stream);
    if (config.block_m == 64 && config.block_n == 96)
      return launch_bf16_gemm<64, 96, K, K, Bf16Variant::kSplitK>(params, num_sms, pdl, stream);
    if (config.block_m == 64 && config.block_n == 128)
      return launch_bf16_gemm<64, 128, K, K, Bf16Variant::kSplitK>(params, num_sms, pdl, stream);
    if (config.block_m == 128 && config.block_n == 128)
      return launch_bf16_gemm<128, 128, K, K, Bf16Variant::kSplitK>(params, num_sms, pdl, stream);
    HK_CHECK(false, "no BF16 split-K GEMM compiled for BLOCK_M=", config.block_m, " BLOCK_N=", config.block_n);
  }
  if (params.layout == GemmLayout::kKGroupedContiguous) {
    HK_CHECK(config.major_a == MN && config.major_b == MN, "the k-grouped BF16 GEMM's operands are MN-major");
    return dispatch_tile<MN, MN, Bf16Variant::kKGrouped>(params, config, num_sms, pdl, stream);
  }
  if (params.layout == GemmLayout::kMGroupedMasked) {
    HK_CHECK(config.major_a == K && config.major_b == K, "the masked BF16 GEMM's operands are K-major");
    return dispatch_tile<K, K, Bf16Variant::kMasked>(params, config, num_sms, pdl, stream);
  }
  if (config.major_a == K && config.major_b == K) return dispatch_tile<K, K>(params, config, num_sms, pdl, stream);
  if (config.major_a == K && config.major_b == MN) return dispatch_tile<K, MN>(params, config, num_sms, pdl, stream);
  if (config.major_a == MN && config.major_b == K) return dispatch_tile<MN, K>(params, config, num_sms, pdl, stream);
  return dispatch_tile<MN, MN>(params, config, num_sms, pdl, stream);
}

}  // namespace hopperkit::gemm
