// Maps a runtime tile configuration and operand majorness onto the compiled instantiations.
#include <string>
#include <vector>

#include "common/host_checks.h"
#include "common/tuning_knobs.h"
#include "gemm/bf16/params.h"
#include "gemm/instantiations.h"

namespace hopperkit::gemm {

template <int kBlockM, int kBlockN, OperandMajor kMajorA, OperandMajor kMajorB, Bf16Variant kVariant>
void launch_bf16_gemm(const Bf16GemmParams& params, int num_sms, bool pdl, cudaStream_t stream);

// The compiled instantiations, one file each (instantiations/): the launch, the probe and the list
// (bf16_instantiations) read these tables.
// (BLOCK_M, BLOCK_N) of every majorness of A and B, and of the masked and k-grouped layouts.
#define HK_BF16_EVERY_MAJOR_TILES(X) X(128, 256) X(128, 128) X(64, 256) X(64, 128)
// The narrow tile of decode-sized M, the 144-, 176- and 192-wide ones of N = 2112 and 576, and the
// 96- and 176-wide ones of mid-sized grids, compiled for the normal layout's K-major operands only.
#define HK_BF16_K_MAJOR_TILES(X) \
  X(128, 192) X(128, 176) X(128, 144) X(128, 96) X(64, 176) X(64, 144) X(64, 96) X(64, 64)
// Split-K tiles (normal layout, K-major operands).
#define HK_BF16_SPLIT_K_TILES(X) X(64, 64) X(64, 96) X(64, 128) X(128, 128)
// The swapped decode GEMM: 64 weight rows by this many token columns (normal layout, K-major);
// the widths of kBf16SwapAbTokenWidths, which the launcher's rules check against.
#define HK_BF16_SWAP_AB_WIDTHS(X) X(8) X(16) X(32) X(64) X(96)

namespace {

#define HK_BF16_WIDTH_ITEM(BN) BN,
constexpr int kSwapAbWidthsCompiled[] = {HK_BF16_SWAP_AB_WIDTHS(HK_BF16_WIDTH_ITEM)};
#undef HK_BF16_WIDTH_ITEM

constexpr bool swap_ab_widths_match() {
  if (sizeof(kSwapAbWidthsCompiled) != sizeof(kBf16SwapAbTokenWidths)) return false;
  for (size_t i = 0; i < sizeof(kSwapAbWidthsCompiled) / sizeof(int); ++i) {
    if (kSwapAbWidthsCompiled[i] != kBf16SwapAbTokenWidths[i]) return false;
  }
  return true;
}
static_assert(swap_ab_widths_match(), "HK_BF16_SWAP_AB_WIDTHS must list kBf16SwapAbTokenWidths (params.h)");

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
  HK_BF16_EVERY_MAJOR_TILES(HK_BF16_CONFIG)
  if constexpr (kMajorA == OperandMajor::kK && kMajorB == OperandMajor::kK && kVariant == Bf16Variant::kGeneral) {
    HK_BF16_K_MAJOR_TILES(HK_BF16_CONFIG)
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
#define HK_BF16_SWAP_AB(BN) \
  if (config.block_n == BN) HK_BF16_LAUNCH(64, BN, K, K, Bf16Variant::kSwapAB)
    HK_BF16_SWAP_AB_WIDTHS(HK_BF16_SWAP_AB)
#undef HK_BF16_SWAP_AB
    HK_BF16_REQUIRE(false, "no swapped BF16 decode GEMM compiled for ", config.block_n, " token columns")
  }
  // Split-K through global memory (k_splits > 1), or within clusters where the launcher finds they
  // fit (max_cluster_splits > 1; else the split-K kernel runs the caller's k_splits, 1 included).
  if (config.k_splits > 1 || params.max_cluster_splits > 1) {
    HK_BF16_REQUIRE(params.layout == GemmLayout::kNormal && config.major_a == K && config.major_b == K,
                    "BF16 split-K is compiled for the normal layout with K-major A and B")
#define HK_BF16_SPLIT_K(BM, BN) \
  if (config.block_m == BM && config.block_n == BN) HK_BF16_LAUNCH(BM, BN, K, K, Bf16Variant::kSplitK)
    HK_BF16_SPLIT_K_TILES(HK_BF16_SPLIT_K)
#undef HK_BF16_SPLIT_K
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

// Asks the probe about every tile up to 256x256 in steps of 8 under each variant, so the list is
// what dispatch() accepts. The contiguous layout runs the normal layout's instantiations (kGeneral).
std::vector<std::string> bf16_instantiations() {
  constexpr OperandMajor K = OperandMajor::kK, MN = OperandMajor::kMN;
  struct Variant {
    const char* name;
    GemmLayout layout;
    int k_splits;
    bool swap_ab;
  };
  constexpr Variant kVariants[] = {{"general", GemmLayout::kNormal, 1, false},
                                   {"masked", GemmLayout::kMGroupedMasked, 1, false},
                                   {"k_grouped", GemmLayout::kKGroupedContiguous, 1, false},
                                   {"split_k", GemmLayout::kNormal, 2, false},
                                   {"swap_ab", GemmLayout::kNormal, 1, true}};
  std::vector<std::string> list;
  for (const Variant& variant : kVariants) {
    for (const OperandMajor major_a : {K, MN}) {
      for (const OperandMajor major_b : {K, MN}) {
        for (int block_m = 64; block_m <= 256; block_m += 64) {
          for (int block_n = 8; block_n <= 256; block_n += 8) {
            Bf16GemmParams params{};
            params.layout = variant.layout;
            Bf16GemmConfig config{block_m, block_n, variant.k_splits, variant.swap_ab, major_a, major_b};
            if (!bf16_gemm_compiled(params, config)) continue;
            list.push_back(std::string("variant=") + variant.name + " major_a=" + (major_a == K ? "k" : "mn") +
                           " major_b=" + (major_b == K ? "k" : "mn") + " block_m=" + std::to_string(block_m) +
                           " block_n=" + std::to_string(block_n));
          }
        }
      }
    }
  }
  return list;
}

}  // namespace hopperkit::gemm
