// The GEMM tuning knobs (environment variables read on every call, for benchmarks and tests) and a
// note naming those in effect, for the launchers' errors.
#pragma once

#include <cstdlib>
#include <string>

namespace hopperkit {

inline constexpr const char* kGemmTuningKnobs[] = {
    "HOPPERKIT_FP8_GEMM_CONFIG",      "HOPPERKIT_FP8_GEMM_SPLITS",  "HOPPERKIT_FP8_GEMM_SPLIT_FIXUP",
    "HOPPERKIT_FP8_GEMM_A_MULTICAST", "HOPPERKIT_BF16_GEMM_CONFIG", "HOPPERKIT_BF16_GEMM_SPLITS",
    "HOPPERKIT_BF16_GEMM_SPLIT_FIXUP", "HOPPERKIT_BF16_GEMM_SWAP_AB", "HOPPERKIT_GEMM_B_HINT",
    "HOPPERKIT_FP8_1D1D_CONFIG",
};

// The heuristics pick only configurations that the launchers accept, so a launcher that refuses
// one was handed it by a knob: its error names the knobs set, e.g.
// " (tuning knobs set: HOPPERKIT_FP8_GEMM_CONFIG=256,128,2)", or says that none is.
inline std::string tuning_knobs_note() {
  std::string set;
  for (const char* name : kGemmTuningKnobs) {
    if (const char* value = std::getenv(name)) set += std::string(set.empty() ? "" : ", ") + name + "=" + value;
  }
  return set.empty() ? " (no tuning knob is set)" : " (tuning knobs set: " + set + ")";
}

}  // namespace hopperkit
