// Geometry of the TMA-stored BF16 output tiles (gemm/tile_store.cuh), shared with the host code that
// builds the output tensor maps: boxes of 64 rows × 64 columns, 128 bytes of BF16 per row, the
// widest row the 128B swizzle allows. One box is one math warpgroup's rows.
#pragma once

namespace hopperkit::gemm {

inline constexpr int kStoreBoxRows = 64;
inline constexpr int kStoreBoxCols = 64;
inline constexpr int kStoreBoxBytes = kStoreBoxRows * kStoreBoxCols * 2;

}  // namespace hopperkit::gemm
