// The compiled GEMM instantiations, each described by one line of "key=value" fields (the values a
// launcher's configuration selects it by). Generated from the dispatch tables that launch them, so
// the tests can hold their lists of forced configurations to what the build has
// (torch.ops.hopperkit._gemm_instantiations, tests/test_gemm_instantiations.py).
#pragma once

#include <string>
#include <vector>

namespace hopperkit::gemm {

// "kind=dense|masked|halves block_m= block_n= cluster_m= cluster_n= one_box=": dense tiles serve the
// normal layout and the contiguous one's 64- to 192-row tiles, halves its 256-row tiles.
std::vector<std::string> fp8_1d2d_instantiations();
// "block_m= block_n=".
std::vector<std::string> fp8_1d1d_instantiations();
// "variant=general|masked|k_grouped|split_k|swap_ab major_a=k|mn major_b=k|mn block_m= block_n=".
std::vector<std::string> bf16_instantiations();

// Ends the error that refuses a configuration no instantiation runs (one a tuning knob forced).
inline std::string instantiations_hint(const char* family) {
  return std::string("; torch.ops.hopperkit._gemm_instantiations(\"") + family + "\") lists the compiled ones";
}

}  // namespace hopperkit::gemm
