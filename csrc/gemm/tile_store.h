// Geometry of the TMA-stored output tiles (gemm/tile_store.cuh), shared with the host code that
// builds the output tensor maps: boxes of 64 rows × 128 bytes per row (64 BF16 or 32 FP32 columns),
// the widest row the 128B swizzle allows. One box is one math warpgroup's rows.
#pragma once

namespace hopperkit::gemm {

inline constexpr int kStoreBoxRows = 64;
inline constexpr int kStoreBoxCols = 64;
inline constexpr int kStoreBoxBytes = kStoreBoxRows * kStoreBoxCols * 2;
// FP32 output boxes (store_rows_f32): 64 rows × 32 columns, the same 128 bytes per row and the same
// staging box size.
inline constexpr int kStoreBoxColsF32 = 32;
static_assert(kStoreBoxRows * kStoreBoxColsF32 * 4 == kStoreBoxBytes, "FP32 boxes reuse the BF16 staging boxes");

}  // namespace hopperkit::gemm
