// Warpgroup MMA building blocks: shared-memory operand descriptors and typed wgmma calls.
#pragma once

#include <cstdint>
#include <utility>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cute/arch/mma_sm90.hpp>  // ss_op_selector
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

// Descriptor of an MN-major operand (e.g. V as the B of P·V, whose N = head dim is the contiguous
// one) stored as 128B-swizzled tiles of 64 16-bit MN-elements × rows along K, exactly as TMA writes
// a K-major [rows, 64] box. Inside a tile, groups of 8 K-rows are 1024 bytes apart (SBO); the next 64
// MN-elements live in the next tile, `mn_tile_stride` bytes further (LBO). A K step of 16 rows is a
// start-address offset of 16·128 bytes, a whole swizzle atom, so it needs no swizzle arithmetic.
__device__ __forceinline__ uint64_t smem_desc_mn_major_sw128(const void* tile, uint32_t mn_tile_stride) {
  cute::GmmaDescriptor desc;
  desc.bitfield.start_address_ = cute::cast_smem_ptr_to_uint(tile) >> 4;
  desc.bitfield.leading_byte_offset_ = mn_tile_stride >> 4;
  desc.bitfield.stride_byte_offset_ = 1024 >> 4;
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

// 16-bit (bf16 / fp16) wgmma atoms with FP32 accumulators, K = 16 per instruction:
//   ss_k_k   A and B K-major in shared memory (attention scores Q·Kᵀ)
//   rs_k_mn  A in registers, B MN-major in shared memory (P·V with P still in registers)
//   ss_k_mn  A K-major, B MN-major, both in shared memory (P·V with P handed over in smem)
template <typename Elem, int N>
struct HalfWgmma;
template <>
struct HalfWgmma<__nv_bfloat16, 64> {
  using ss_k_k = cute::SM90::GMMA::MMA_64x64x16_F32BF16BF16_SS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>;
};
template <>
struct HalfWgmma<__half, 64> {
  using ss_k_k = cute::SM90::GMMA::MMA_64x64x16_F32F16F16_SS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>;
};
template <>
struct HalfWgmma<__nv_bfloat16, 256> {
  using rs_k_mn = cute::SM90::GMMA::MMA_64x256x16_F32BF16BF16_RS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::MN>;
  using ss_k_mn = cute::SM90::GMMA::MMA_64x256x16_F32BF16BF16_SS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::MN>;
};
template <>
struct HalfWgmma<__half, 256> {
  using rs_k_mn = cute::SM90::GMMA::MMA_64x256x16_F32F16F16_RS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::MN>;
  using ss_k_mn = cute::SM90::GMMA::MMA_64x256x16_F32F16F16_SS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::MN>;
};

// bf16 wgmma m64nNk16 with both operands in shared memory, each K-major or MN-major (the
// instruction's transpose bits, valid for 16-bit types only), FP32 accumulators. N is one of the
// BF16 kernels' tile widths (powers of two 8 .. 256, 96 and 192), for which CuTe's selector returns
// the instruction of exactly that N (the assertion checks it); 144 and 176 are specialised in
// common/wgmma_extended.cuh.
template <int N, cute::SM90::GMMA::Major kMajorA, cute::SM90::GMMA::Major kMajorB>
struct Bf16SsWgmma {
  using Atom = decltype(cute::SM90::GMMA::ss_op_selector<cute::bfloat16_t, cute::bfloat16_t, float,
                                                         cute::Shape<cute::_64, cute::Int<N>, cute::_16>, kMajorA,
                                                         kMajorB>());
  static_assert(sizeof(typename Atom::CRegisters) == N / 2 * sizeof(float), "a 64×N instruction: N/2 accumulators");
};

// The accumulator fragment of a 64×N wgmma: thread t of the warpgroup holds rows
// row0 = 16·warp + lane/4 and row0 + 8, columns 8j + 2·(lane%4) + {0, 1} for j < N/8, as
// acc[4j + {0, 1}] (row0) and acc[4j + {2, 3}] (row0 + 8).
struct AccumulatorRows {
  int row0;  // within the warpgroup's 64 rows
  int col0;  // 2·(lane % 4): first column of the thread's pair in each 8-column group
  __device__ __forceinline__ AccumulatorRows(int thread_in_wg)
      : row0((thread_in_wg / 32) * 16 + (thread_in_wg % 32) / 4), col0(2 * (thread_in_wg % 4)) {}
};

// One wgmma with both operands in shared memory: acc (64×N, N/2 floats per thread) [+]= A·B.
template <class Atom, int kAccs>
__device__ __forceinline__ void wgmma_ss(uint64_t desc_a, uint64_t desc_b, float (&acc)[kAccs], bool accumulate) {
  wgmma_unpacked<Atom>(desc_a, desc_b, acc, accumulate, std::make_index_sequence<kAccs>{});
}

template <class Atom, size_t... I>
__device__ __forceinline__ void wgmma_rs_unpacked(const uint32_t (&a)[4], uint64_t desc_b, float* acc, bool accumulate,
                                                  std::index_sequence<I...>) {
  Atom::fma(a[0], a[1], a[2], a[3], desc_b, acc[I]...,
            accumulate ? cute::SM90::GMMA::ScaleOut::One : cute::SM90::GMMA::ScaleOut::Zero);
}

// One wgmma with A (a 64×16 slice, 4 registers of packed 16-bit pairs per thread, in the layout of
// a 64×16 accumulator) in registers and B in shared memory.
template <class Atom, int kAccs>
__device__ __forceinline__ void wgmma_rs(const uint32_t (&a)[4], uint64_t desc_b, float (&acc)[kAccs], bool accumulate) {
  wgmma_rs_unpacked<Atom>(a, desc_b, acc, accumulate, std::make_index_sequence<kAccs>{});
}

// Keeps the compiler from moving accumulator reads/writes across the asynchronous wgmma.
template <int Size>
__device__ __forceinline__ void fence_accumulators(float (&acc)[Size]) {
#pragma unroll
  for (int i = 0; i < Size; ++i) cute::warpgroup_fence_operand(acc[i]);
}

// One 128-wide FP8 K block of a 64×N product as one committed wgmma batch: 4 wgmmas of K = 32, the
// first starting from zero, so `acc` receives this K block's partial sum alone (the two-level
// accumulation of the block-scaled GEMMs promotes it on the CUDA cores). desc_a / desc_b: K-major
// 128B-swizzled tiles (smem_desc_k_major_sw128). Returns without waiting.
template <int N>
__device__ __forceinline__ void issue_fp8_k_block(uint64_t desc_a, uint64_t desc_b, float (&acc)[N / 2]) {
  fence_accumulators(acc);
  cute::warpgroup_arrive();
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    // 32 FP8 elements = 32 bytes further along the swizzled row: +2 in descriptor units.
    wgmma_fp8<N>(desc_a + 2 * k, desc_b + 2 * k, acc, k > 0);
  }
  cute::warpgroup_commit_batch();
  fence_accumulators(acc);
}

// The same for the A registers of an RS wgmma: the hardware reads them asynchronously, so they must
// stay live and unmodified until a wgmma wait covers the instruction.
template <int Size>
__device__ __forceinline__ void fence_operands(uint32_t (&regs)[Size]) {
#pragma unroll
  for (int i = 0; i < Size; ++i) cute::warpgroup_fence_operand(regs[i]);
}

}  // namespace hopperkit
