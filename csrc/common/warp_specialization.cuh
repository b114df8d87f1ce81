// Building blocks of the warp-specialised kernels (one producer warpgroup, math warpgroups): the
// register split between the roles, the role index, and the aligned shared-memory storage.
#pragma once

#include <cstdint>

#include <cute/arch/util.hpp>

namespace hopperkit {

// The register split of a producer warpgroup (the last one) and kMathThreads math threads under
// __launch_bounds__(threads, 1). Every thread enters with the launch bound's share of the register
// file (65536 / threads, rounded down to the allocation unit of 8: 168 at 384 threads), and, per the
// PTX ISA, setmaxnreg.inc draws only on what setmaxnreg.dec released within the CTA: the producer's
// release must cover the math warpgroups' growth, or they wait in setmaxnreg.inc forever. At 384
// threads a 40-register producer frees (168 − 40)·128 = 16384, exactly what 232-register math
// warpgroups need; a 48-register producer (15360) hung an earlier kernel.
template <int kMathThreads, int kProducerRegisters, int kMathRegisters>
struct RegisterSplit {
  static constexpr int kThreads = kMathThreads + 128;
  static constexpr int kEntry = 65536 / kThreads / 8 * 8;
  static constexpr int kProducer = kProducerRegisters;
  static constexpr int kMath = kMathRegisters;
  static_assert(kProducer % 8 == 0 && kMath % 8 == 0 && kProducer >= 24 && kMath <= 256,
                "setmaxnreg takes multiples of 8 in [24, 256]");
  static_assert(kProducer <= kEntry, "the producer's setmaxnreg.dec must not grow it");
  static_assert((kEntry - kProducer) * 128 >= (kMath - kEntry) * kMathThreads,
                "setmaxnreg.inc of the math warpgroups needs more registers than the producer's .dec frees");
};

// The calling thread's warpgroup, broadcast from lane 0 so that the compiler sees it as warp-uniform:
// wgmma in a branch it considers divergent is serialized (ptxas C7520), which a role taken straight
// from threadIdx.x / 128 caused.
__device__ __forceinline__ int warpgroup_index() {
  return __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
}

// The kernel's SharedStorage at the first 1 KiB boundary of the dynamic shared memory (the caller
// allocates 1 KiB of slack): the 128B swizzle is a function of absolute shared-memory address bits.
// The offset is computed from the shared-window address and applied to the shared pointer, so the
// compiler keeps emitting shared (not generic) accesses.
template <class Storage>
__device__ __forceinline__ Storage& aligned_shared_storage(uint8_t* smem_raw) {
  const uint32_t misalignment = cute::cast_smem_ptr_to_uint(smem_raw) & 1023u;
  return *reinterpret_cast<Storage*>(smem_raw + ((1024u - misalignment) & 1023u));
}

}  // namespace hopperkit
