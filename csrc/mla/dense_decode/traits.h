// Compile-time configuration of the dense MLA decode kernel.
#pragma once

#include <cstdint>

#include <cutlass/arch/barrier.h>

namespace hopperkit::mla {

// Warpgroup roles, in threadIdx order.
enum class DecodeRole {
  kLeft,      // math: scores of the even block of each pair, output columns [0, 256)
  kRight,     // math: scores of the odd block of each pair, output columns [256, 512)
  kProducer,  // warp 0: TMA of the KV tiles; warps 1-3: Q tile loads
};

// Named barriers, each named after what its completion guarantees.
enum class DecodeBarrier : int {
  kLeftMaxReady = 1,   // left → right: this step's running max (after the even block) and its scale
  kRightPReady = 2,    // right → left: the odd block's P in smem, the new max and its scale
  kLeftPReady = 3,     // left → right: the even block's P in smem (against the left's max; the right rescales it)
  kLeftTailZeroed = 4,   // left warpgroup only: its V rows past the sequence end are zeroed
  kRightTailZeroed = 5,  // right warpgroup only: the same for the right warpgroup
  kRowSumsReady = 6,   // both math warpgroups: the per-warpgroup softmax row sums of the request
};

template <typename Elem_>
struct DenseDecodeTraits {
  using Elem = Elem_;
  static_assert(sizeof(Elem) == 2, "bf16 or fp16");

  static constexpr int kBlockM = 64;        // query rows (s_q·G pairs of one KV head) per CTA
  static constexpr int kPageBlock = 64;     // KV tokens per page block = per pipeline block
  static constexpr int kHeadDimK = 576;     // 512 latent + 64 RoPE
  static constexpr int kHeadDimV = 512;
  static constexpr int kTileCols = 64;      // 64 16-bit elements = one 128-byte swizzle row
  static constexpr int kTileBytes = kPageBlock * kTileCols * 2;  // 8 KiB
  static constexpr int kKTiles = kHeadDimK / kTileCols;          // 9: one TMA box and barrier each
  static constexpr int kVTilesPerHalf = kHeadDimV / kTileCols / 2;  // 4 per math warpgroup
  // Tile 8 (RoPE) is only read by Q·Kᵀ: once the scores of a block exist, that slot of the block's
  // buffer holds the block's P for the other warpgroup's P·V.
  static constexpr int kPTile = kKTiles - 1;

  static constexpr int kMathWarpgroups = 2;
  static constexpr int kMathThreads = 128 * kMathWarpgroups;
  static constexpr int kThreads = kMathThreads + 128;
  static constexpr int kQLoaderThreads = 96;  // producer warps 1-3

  // Register budget (setmaxnreg). A math thread holds half of the 64×512 FP32 output (128), the
  // 64×64 scores (32), P packed to 16-bit (16) and row state; the producer only addresses.
  // 40·128 + 232·256 = 64512 <= 65536.
  static constexpr int kProducerRegisters = 40;
  static constexpr int kMathRegisters = 232;
  static_assert(kProducerRegisters * 128 + kMathRegisters * kMathThreads <= 65536, "register file overflow");

  struct SharedStorage {
    alignas(1024) uint8_t q[kKTiles][kTileBytes];      // (64 rows, 576) in 9 swizzled 64-column tiles
    alignas(1024) uint8_t kv[2][kKTiles][kTileBytes];  // (64 tokens, 576) × 2 buffers, same layout
    float left_max[kBlockM];     // running max after the even block of the step (log2 domain)
    float left_scale[kBlockM];   // exp2(previous max - left_max)
    float right_max[kBlockM];    // running max after the odd block
    float right_scale[kBlockM];  // exp2(left_max - right_max)
    float row_sum[2][kMathWarpgroups][kBlockM];  // [request parity][warpgroup][row]
    cutlass::arch::ClusterTransactionBarrier kv_full[2][kKTiles];
    cutlass::arch::ClusterBarrier kv_empty[2][kKTiles];  // one arrival per warp of the releasing warpgroup
    cutlass::arch::ClusterBarrier q_full;                // one arrival per Q loader thread
    cutlass::arch::ClusterBarrier q_empty;               // one arrival per math warp
  };
  // 221 KiB of tiles; + 1 KiB spent aligning the dynamic shared memory base.
  static constexpr int kSmemBytes = sizeof(SharedStorage) + 1024;
  static_assert(kSmemBytes <= 232448, "shared memory over the 227 KiB an SM90 CTA may use");
};

}  // namespace hopperkit::mla
