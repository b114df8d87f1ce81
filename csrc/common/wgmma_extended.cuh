// wgmma widths outside CuTe's default shape set: BF16 m64nNk16 with N = 144 and 176 (the BF16 GEMM
// tiles of N = 2112 = 12 · 176 and 576 = 4 · 144) and FP8 m64n160k32 (the FP8 1d1d GEMM's 128×160
// tile). Their instructions are in CuTe's extended-shapes
// header, about 56k lines, which only the translation units instantiating these widths include
// rather than every unit that includes common/wgmma.cuh. Include it before the kernel, so that
// Bf16SsWgmma<144 or 176, ...> resolves to these specialisations (without them, the primary
// template's assertion stops the build), and Fp8Wgmma<160> likewise.
#pragma once

// After common/wgmma.cuh: the extended header builds on the GMMA definitions of the default one.
#include "common/wgmma.cuh"

#include <cute/arch/mma_sm90_gmma_ext.hpp>

namespace hopperkit {

template <cute::SM90::GMMA::Major kMajorA, cute::SM90::GMMA::Major kMajorB>
struct Bf16SsWgmma<144, kMajorA, kMajorB> {
  using Atom = cute::SM90::GMMA::MMA_64x144x16_F32BF16BF16_SS<kMajorA, kMajorB>;
};

template <cute::SM90::GMMA::Major kMajorA, cute::SM90::GMMA::Major kMajorB>
struct Bf16SsWgmma<176, kMajorA, kMajorB> {
  using Atom = cute::SM90::GMMA::MMA_64x176x16_F32BF16BF16_SS<kMajorA, kMajorB>;
};

template <>
struct Fp8Wgmma<160> {
  using Atom = cute::SM90::GMMA::MMA_64x160x32_F32E4M3E4M3_SS_TN<>;
};

}  // namespace hopperkit
