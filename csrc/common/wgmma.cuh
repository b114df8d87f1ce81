// Warpgroup MMA building blocks: shared-memory operand descriptors and typed wgmma calls.
#pragma once

#include <cstdint>
#include <utility>

#include <cute/arch/mma_sm90_desc.hpp>
#include <cute/arch/mma_sm90_gmma.hpp>
#include <cute/arch/util.hpp>

namespace hopperkit {

// Descriptor of a K-major operand tile as TMA writes it with the 128-byte swizzle: 128-byte rows
// (128 FP8 or 64 BF16 K-elements), swizzled in 8-row atoms of 1024 bytes stacked along M/N. The
// tile must start 1024-byte aligned (the swizzle is a function of absolute address bits). Moving
// along K inside the 128-byte row is done by adding (bytes >> 4) to the descriptor.
__device__ __forceinline__ uint64_t smem_desc_k_major_sw128(const void* tile) {
  cute::GmmaDescriptor desc;
  desc.bitfield.start_address_ = cute::cast_smem_ptr_to_uint(tile) >> 4;
  desc.bitfield.leading_byte_offset_ = 1;         // unused by swizzled K-major layouts
  desc.bitfield.stride_byte_offset_ = 1024 >> 4;  // next group of 8 rows
  desc.bitfield.base_offset_ = 0;
  desc.bitfield.layout_type_ = static_cast<uint8_t>(cute::SM90::GMMA::LayoutType::B128);
  return desc.desc_;
}

// wgmma.mma_async m64nNk32 with FP8 e4m3 A and B from shared memory, FP32 accumulators: each of
// the warpgroup's 128 threads holds N/2 of the 64×N results.
template <int N>
struct Fp8Wgmma;
template <>
struct Fp8Wgmma<64> {
  using Atom = cute::SM90::GMMA::MMA_64x64x32_F32E4M3E4M3_SS_TN<>;
};
template <>
struct Fp8Wgmma<128> {
  using Atom = cute::SM90::GMMA::MMA_64x128x32_F32E4M3E4M3_SS_TN<>;
};
template <>
struct Fp8Wgmma<192> {
  using Atom = cute::SM90::GMMA::MMA_64x192x32_F32E4M3E4M3_SS_TN<>;
};

template <class Atom, size_t... I>
__device__ __forceinline__ void wgmma_unpacked(uint64_t desc_a, uint64_t desc_b, float* acc, bool accumulate,
                                               std::index_sequence<I...>) {
  Atom::fma(desc_a, desc_b, acc[I]...,
            accumulate ? cute::SM90::GMMA::ScaleOut::One : cute::SM90::GMMA::ScaleOut::Zero);
}

template <int N>
__device__ __forceinline__ void wgmma_fp8(uint64_t desc_a, uint64_t desc_b, float (&acc)[N / 2], bool accumulate) {
  wgmma_unpacked<typename Fp8Wgmma<N>::Atom>(desc_a, desc_b, acc, accumulate, std::make_index_sequence<N / 2>{});
}

// Keeps the compiler from moving accumulator reads/writes across the asynchronous wgmma.
template <int Size>
__device__ __forceinline__ void fence_accumulators(float (&acc)[Size]) {
#pragma unroll
  for (int i = 0; i < Size; ++i) cute::warpgroup_fence_operand(acc[i]);
}

}  // namespace hopperkit
