// Persistent tile scheduler for the GEMM kernels.
//
// CTA c of a grid of G CTAs processes linear tiles c, c + G, c + 2G, ... (static round robin: no
// atomics, and every role of a CTA walks the same sequence without communicating). Linear ids are
// rasterised in bands of kBandM M-blocks: consecutive ids sweep the band's M-blocks first, then
// step along N, so one wave of CTAs touches kBandM A-panels and about G / kBandM B-panels, which
// stay resident in L2 while the wave runs.
#pragma once

namespace hopperkit::gemm {

template <int kBlockM, int kBlockN, int kBandM = 16>
struct TileScheduler {
  int num_m_blocks, num_n_blocks, num_tiles;
  int next_tile;

  __device__ __forceinline__ TileScheduler(int m, int n)
      : num_m_blocks((m + kBlockM - 1) / kBlockM),
        num_n_blocks((n + kBlockN - 1) / kBlockN),
        num_tiles(num_m_blocks * num_n_blocks),
        next_tile(blockIdx.x) {}

  __device__ __forceinline__ bool next(int& m_block, int& n_block) {
    if (next_tile >= num_tiles) return false;
    const int band = next_tile / (kBandM * num_n_blocks);
    const int first_m = band * kBandM;
    const int band_rows = min(kBandM, num_m_blocks - first_m);
    const int in_band = next_tile - band * kBandM * num_n_blocks;
    m_block = first_m + in_band % band_rows;
    n_block = in_band / band_rows;
    next_tile += gridDim.x;
    return true;
  }
};

}  // namespace hopperkit::gemm
