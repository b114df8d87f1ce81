// Tile-configuration choice for the GEMM kernels.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cmath>
#include <optional>

#include "gemm/bf16/params.h"
#include "gemm/fp8_1d2d/params.h"

namespace hopperkit::gemm {

// A compiled tile shape and its relative efficiency (tensor-core work per unit time of one tile);
// a candidate only for problems of at least min_rows rows.
struct TileCandidate {
  int block_m, block_n;
  double efficiency;
  int min_rows = 0;
};

// A candidate list with one more candidate at its end (later entries lose ties, see
// pick_tile_by_waves).
template <size_t kCount>
constexpr std::array<TileCandidate, kCount + 1> with_candidate(const std::array<TileCandidate, kCount>& base,
                                                               TileCandidate extra) {
  std::array<TileCandidate, kCount + 1> out{};
  for (size_t i = 0; i < kCount; ++i) out[i] = base[i];
  out[kCount] = extra;
  return out;
}

// The candidate with the lowest modelled time: waves of a persistent grid × the time of one tile
// (its MMA work over its efficiency). Ties go to the earlier entry; 128-row tiles are skipped when a
// problem has at most 64 rows, 256-row tiles when it has at most 128 (half of each tile would be
// padding), and 256-row tiles where `allow_256_rows` is false. `extra_256_row_blocks` more M blocks
// are counted for 256-row tiles (the contiguous layout's second passes, see choose_fp8_1d2d_config).
template <typename Candidates>  // an array of TileCandidate
inline TileCandidate pick_tile_by_waves(const Candidates& candidates, int m, int n, int num_sms, int groups,
                                        bool allow_256_rows = false, int extra_256_row_blocks = 0) {
  TileCandidate best = candidates[0];
  double best_cost = INFINITY;
  for (const TileCandidate& c : candidates) {
    if (c.block_m > 64 && m <= c.block_m / 2) continue;
    if (m < c.min_rows) continue;
    if (c.block_m == 256 && !allow_256_rows) continue;
    const long m_blocks = (m + c.block_m - 1) / c.block_m + (c.block_m == 256 ? extra_256_row_blocks : 0);
    const long tiles = static_cast<long>(groups) * m_blocks * ((n + c.block_n - 1) / c.block_n);
    const long waves = (tiles + num_sms - 1) / num_sms;
    const double cost = static_cast<double>(waves) * c.block_m * c.block_n / c.efficiency;
    if (cost < best_cost) {
      best_cost = cost;
      best = c;
    }
  }
  return best;
}

// The 192×64 tile (three math warpgroups of one 64-row wave each) is a candidate of the normal
// layout at 129-192 and 257-384 rows, where its M blocks pad M no further than 128-row blocks do,
// and at 385-1152 rows with a lower efficiency (below). Each of its three warpgroups runs its own
// chain of wgmma, wait and promotion per K block, so a stage's B tile feeds three chains at once, where a 128-row
// tile feeds two and a 256-row tile's warpgroups run their two waves one after the other.
// PERF (H200, benchmarks/sweep_tiles.py --kind fp8: L2 flushed, medians of 15 calls in turns, µs,
// the pick without it / 192×64 / cuBLAS blockwise where it takes the shape): 129-192×7168×16384
// 57.8-58.2 / 50.0-50.4 / 56.0-56.3, 129-192×4096×7168 23.6-24.0 / 21.0-21.4 (2 splits) / 27.1-27.6,
// 129-192×24576×1536 25.8-26.0 / 23.5-24.2 / 25.9-26.9, 129-192×32768×512 18.5-19.6 / 17.9-18.0 /
// 18.3-19.2, 129-192×7168×2048 15.1-15.2 / 14.2-14.4 / 13.5-14.0, 257-384×2112×7168 22.3-22.8 /
// 20.0-20.8 / 26.4-26.7, 257-384×4096×7168 29.7-30.3 / 27.4-27.9 / 27.9-28.5, 257-384×2048×16384
// 40.5-40.9 / 32.7-33.5 / 50.0-50.8, 384×1536×7168 22.1 / 20.0 / 26.2. Where it pads more rows
// it loses: 200 and 256×4096×7168 23.8 / 26.7-27.1, 448-512 × {2112, 1536}×7168 22.0-22.8 / 25.2-25.9,
// 448-512×2048×16384 40.3-40.8 / 47.9-48.3. At 576 rows (no padding either way) it measured mixed:
// faster on 2112×7168 (30.1 / 26.7), 7168×16384 (154.9 / 149.1), 7168×2048 (27.2 / 25.8), 1024×7168
// (22.9 / 19.7) and 2048×16384 (56.1 / 48.4), slower on 24576×1536 (48.3 / 52.1), 32768×512 (34.5 /
// 35.7) and 1536×7168 (22.7 / 25.2), so at efficiency 1.0 it stops at 384. At 257-384 rows the
// model keeps 128×192 on 7168×16384 and 7168×2048, where 192×64 measured slower (78.8-80.7 / 97-101,
// 17.7-18.0 / 20.0-20.8).
// With B multicast (pairs of M blocks at 257-384 rows) it is slower: 2112×7168 25.0-25.6,
// 2048×16384 47.0-47.5, 1536×7168 25.0.
// Above 384 rows, up to kMaxRowsFor192RowTiles, it is a candidate with efficiency 0.95, whatever
// its padding: there it wins where its M blocks take one wave that wider tiles cannot (576-768 ×
// 2112×7168 and 2048×16384) or fewer waves than 128×192 (576 × 7168×{16384, 2048}), and loses where
// 128×64 fits the grid in one wave as well (448-960 × {1024, 1536, 2048, 2112}: 3-17% slower),
// which efficiency 1.0 would take (12288 against 128×64's 8192 / 0.65 = 12603). At 129-384 rows
// 0.95 would lose 129-192×4096×7168 (two splits of 192×64, 21.0-21.4, against 128×64, 23.6-24.0),
// so the first range keeps 1.0 and its padding rule. PERF (an H100, sweep_tiles.py --kind fp8,
// every tile forced and the heuristic, in turns, M = 448, 576, 640, 768, 960, 1152 on 2112×7168,
// 7168×16384, 7168×2048, 1024×7168, 2048×16384, 24576×1536, 32768×512, 1536×7168, 4096×7168; µs,
// the heuristic's pick before this rule / 192×64 forced, same run), the 13 shapes where the rule
// now takes 192×64: 576×2112×7168 30.8 / 26.7, 640× 31.0 / 27.2, 768× 30.3 / 27.5; 576×2048×16384
// 57.4 / 49.2, 640× 57.4 / 48.8, 768× 55.6 / 50.7; 576×7168×16384 148.6 / 141.4; 576×7168×2048 28.6
// / 27.1; 768×1536×7168 29.1 / 26.4, 960× 29.9 / 26.8; 1152×1024×7168 30.9 / 26.6; 576×32768×512
// 37.2 / 37.2; 1152×4096×7168 69.6 / 69.4. The other 41 keep their pick. Over the 54, the time of
// the tile the rule picks over the fastest forced tile's is 1.000 in geomean (the old pick's:
// 1.023), at most 1.07 (1.17; 1152×32768×512, 128×192 against 256×128, which the short-K rule of
// choose_fp8_1d2d_dense_config now corrects).
// Measured with the rule in place (the same card, another run, µs, the heuristic / 192×64 forced /
// cuBLAS blockwise): 576×2112×7168 25.9 / 26.8 / 28.7, 768×2112×7168 27.1 / 27.5 / 29.1,
// 576×2048×16384 48.0 / 49.0 / 52.6, 768×1536×7168 26.0 / 25.6 / 27.4, 1152×1024×7168 25.8 / 25.9 /
// 27.8. Not measured above 1152 rows.
inline constexpr int kMaxRowsFor192RowTiles = 1152;
inline constexpr int kMaxRowsFor192RowTilesAtFullEfficiency = 384;
inline bool fp8_1d2d_192_rows_fit(int m) {
  if (m <= 128 || m > kMaxRowsFor192RowTiles) return false;
  if (m > kMaxRowsFor192RowTilesAtFullEfficiency) return true;
  const int padded_192 = (m + 191) / 192 * 192;
  const int padded_128 = (m + 127) / 128 * 128;
  return padded_192 <= padded_128;
}

// A multicast (Fp8Gemm1d2dConfig::cluster_n = 2): CTA pairs on adjacent N blocks of one M block
// load its A box once (TileScheduler kPairN). Needs an even number of N blocks and no split of
// either kind (`cluster_splits`: the launcher's bound for split-K within a cluster); compiled for
// two tiles:
// - 64×64, where one 64-row M block covers the rows: every CTA reads the same A box of each K
//   block, at about the same time. PERF (H200, ncu kernel durations, medians of three calls in
//   turns, off / on, µs): 7168×2048 at M = 1 / 7 / 32 / 64: 9.06 / 8.70, 9.31 / 8.70, 9.09 / 8.58,
//   9.06 / 8.80 (1.03-1.07×); 24576×1536: 1.01-1.03×; 7168×16384: 34.43 / 33.60 at M = 1, 1.02 at
//   7, 0.99 at 32, 1.00 at 64. The gain does not follow A's size (8 rows at M = 1 and 7): it is not
//   L2 bandwidth. A 128×64 variant (65-128 rows) measured mixed, 1.02-1.05× at 100 rows and
//   0.98-0.99× at 128, and is not compiled.
// - 256×128 on grids of more than two waves (the box-per-box staging, fp8_1d2d_one_box_staging;
//   the contiguous layout's 256-row tiles too, fp8_1d2d/PERF.md "A multicast on the contiguous"),
//   in place of B multicast: a pair then reads 64 KiB of A and B per K block from L2 instead of 80.
//   PERF (H200, the same calls in turns, L2 flushed, µs, A / B multicast): 4096×7168×16384 760.5 /
//   764.4, 4096×24576×1536 264.6 / 267.6, 4096×4096×7168 185.2 / 187.2, 4096×7168×2048 102.9 /
//   104.1, 4096×32768×512 153.9 / 155.1; in a second run B was 0.4-0.8% faster (753.8 / 759.5 at
//   4096×7168×16384): within about 1%, like no multicast. ncu at the locked clock,
//   4096×7168×16384: 1,079,640-1,094,245 / 1,085,660 cycles. Kept for its lower L2 traffic
//   (fp8_1d2d/PERF.md "Multicast").
inline bool fp8_1d2d_a_multicast_fits(const Fp8Gemm1d2dConfig& config, int m, int n, int cluster_splits, int num_sms) {
  const int m_blocks = (m + config.block_m - 1) / config.block_m;
  const int n_blocks = (n + config.block_n - 1) / config.block_n;
  if (config.cluster_m != 1 || config.k_splits != 1 || cluster_splits != 1 || n_blocks % 2 != 0) return false;
  if (config.block_m == 64 && config.block_n == 64) return m_blocks == 1;
  return config.block_m == 256 && config.block_n == 128 && static_cast<long>(m_blocks) * n_blocks > 2L * num_sms;
}

// FP8 1d2d: M blocks per raster band of the tile scheduler (GemmProblem::band_m). A wave of G tiles
// reads per K block about band·BLOCK_M rows of A and (G / band)·BLOCK_N rows of B, fewest near
// band = sqrt(G·BLOCK_N / BLOCK_M): about 16 for the 128-row tiles, 8 for the 256-row ones, whose
// 16-block bands span all of A at M = 4096. That pays where K is long, so that the panels a wave
// reads dominate L2's traffic; at short K the D tiles stream through L2 as well and the whole-A
// bands of 16 left less of A and B to be read again. PERF (H200, 256×128 with A multicast, ncu at
// the locked clock, cycles and DRAM bytes read, bands of 16 / 8): 4096×7168×16384 1,100,092 /
// 1,082,799 and 609 / 512 MB; 4096×4096×7168 286,979 / 284,609 and 149 / 114 MB; 32768×4096×7168
// 2,227,108 / 2,225,745 and 1.25 / 0.93 GB; at K <= 2048 the same cycles (±0.6%) and 37-88% more
// DRAM bytes with 8 (4096×24576×1536, 4096×7168×2048, 4096×32768×512, 32768×7168×2048). The
// cycle differences are within ncu's run-to-run spread (1,074,511 and 1,099,546 for 4096×7168×16384
// in two later runs with bands of 8); the DRAM bytes are not. The band must stay even: B multicast
// pairs consecutive M blocks of one band (TileScheduler).
inline int fp8_1d2d_raster_band(int block_m, int k) { return block_m == 256 && k >= 4096 ? 8 : 16; }

// FP8 1d2d: the compiled tile with the lowest modelled time (pick_tile_by_waves). Small tiles balance
// the last wave better but feed the tensor cores less per byte of shared memory.
// `m` is the row count of one problem; `groups` independent problems of that size share the grid
// (the masked MoE layout). Clusters are for the normal layout only (B multicast pairs vertically
// adjacent tiles, which in the grouped layouts may belong to two experts).
// The contiguous layout's `experts` (B's groups) matter to its 256-row tiles (traits.h kHalves):
// segments are aligned to 128 rows, so a 256-row block may hold two experts and then runs two
// passes over K, about the time of a second block. An expert boundary makes such a block when it
// falls on an odd multiple of 128 rows, half of the time for segment lengths the host cannot see
// (m_indices is on the device), so the model counts experts / 2 more M blocks for that tile: short
// segments keep the 128-row tiles.
// PERF (H200, benchmarks/ab_builds.py, two rounds, µs; the heuristic with `experts` more blocks /
// 128x192 forced / 256x128 forced): contiguous G x rows per expert, N x K: 4 x 8192, 4096 x 7168
// 1602 (256) / 1544 / 1512; 4 x 8192, 7168 x 2048 807 (256) / 859 / 787; 8 x 4096, 4096 x 7168
// 1546 (256) / 1667 / 1605; 8 x 4096, 7168 x 2048 846 (192) / 840 / 779; 16 x 1024, 4096 x 7168
// 796 (192) / 812 / 746; 32 x 384, 4096 x 7168 (16 blocks of two experts) 614 (192) / 616 / 731.
// A round's spread was up to 6%. With experts / 2 the model takes 256 rows for the first four and
// 128x192 for the last two (16 x 1024, whose boundaries all fall on multiples of 256, would gain).
// An H100 run of that model, the 256-row tiles with A multicast, the same columns: 1537 (256) / 1648
// / 1560, 791 (256) / 871 / 798, 1566 (256) / 1698 / 1460, 797 (256) / 860 / 807, 16 x 1024 814
// (192) / 806 / 758 (the heuristic's and the forced 256-row runs are the same kernel: whole
// processes differ by up to 7%).
// With the 256-row tiles' ids loaded at the tile's start (an H100, the same script, two rounds, µs;
// the heuristic / 128x192 / 256x128 / 128x128 forced; `fp8contvar` gives expert g round(R·U(0.25,
// 1.75)) rows, uneven routing): 16 x 1024, 4096 x 7168 801 (192) / 792 / 728 / 827; 16 x 1024,
// 7168 x 2048 429 (192) / 433 / 396 / 475; 8 x 2048, 7168 x 2048 420 (192) / 423 / 388 / 467;
// 32 x 384, 4096 x 7168 (16 blocks of two experts) 645 (192) / 630 / 760 / 692; uneven 32 x ~256,
// 4096 x 7168 (19 of 41 blocks of two experts) 544 (192) / 538 / 813 / 590, 7168 x 2048 298 (192) /
// 299 / 460 / 322; uneven 16 x ~512, 4096 x 7168 (10 of 37) 510 (128) / 481 / 583 / 512; uneven
// 64 x ~128, 7168 x 2048 (33 of 49) 475 (192) / 479 / 575 / 448. A block of two experts costs
// about two blocks, as modelled. Where no block has two (every boundary on a multiple of 256 rows)
// the 256-row tiles are 8-10% faster than the 128x192 pick, and an efficiency high enough to take
// them there (1.25) would also take them for the uneven 16 x ~512 problem, 14% slower than the
// pick; the host cannot see the boundaries, so the rule stays.
// The 128×256 tile (traits.h kWavesN: each math warpgroup's 64 rows as two 128-column waves) moves
// as many operand bytes per FLOP as 256×128; it takes a problem where its 256-column N blocks make
// fewer waves than the other tiles, e.g. 1152 rows × 7168 columns (252 tiles in two waves, where
// 128-row tiles of 128 or 192 columns make three or four). Its efficiency sits below 256×128's:
// where both make the same waves, 256×128 with A multicast ran 4% faster. Without B multicast: CTA
// pairs sharing B were 5% slower than single CTAs. PERF (an H100, benchmarks/sweep_tiles.py, L2
// flushed, medians of 15 calls in turns, µs; 128×256 / 128×256 in B-multicast pairs / the best
// other tile / cuBLAS blockwise): 1152×7168×16384 208.1 / — / 227.6 (128×192) / 216.5,
// 1152×7168×2048 36.2 / — / 38.6 (128×192) / 35.3, 576×32768×512 32.4 / — / 35.5 (128×128) / 33.4,
// 640×32768×512 32.6 / — / 35.7 (256×128, A multicast) / 33.8, 896×32768×512 41.1 / — / 44.0
// (256×128, A multicast) / 43.0, 1152×32768×512 49.8 / — / 52.4 (the same) / 56.3, 384×32768×512
// 24.7 / — / 25.7 (128×192) / 25.0, 1152×24576×1536 85.6 / — / 87.8 (128×192) / 90.5; the same
// waves as 256×128: 2304×7168×16384 419.8 / 440.8 / 404.4 (256×128, A multicast) / 426.0,
// 4096×7168×16384 777.5 / 817.2 / 746.3 / 775.2; fewer waves than 128×128 but more padding:
// 896×7168×16384 196.7 / — / 176.5 (128×128) / 162.8.
// The contiguous layout takes it at the same efficiency: its 128-row M blocks never hold two experts
// (segments are aligned to 128 rows), so uneven routing costs it no second pass, where the 256-row
// tiles' blocks of two experts pay one (the `experts / 2` rule above). PERF (an H100,
// benchmarks/ab_builds.py, two rounds, µs; the heuristic before the tile was a contiguous candidate /
// 128×256 / 128×192 / 256×128, forced): uneven (`fp8contvar`) 16 × ~1024, 4096×7168 873.1 (128×192)
// / 804.4 / 880.4 / 935.8; 32 × ~256, 4096×7168 531.7 (128×192) / 516.4 / 530.7 / 810.5; 16 × ~512,
// 4096×7168 505.6 (128×128) / 437.2 / 470.0 / 576.3; 64 × ~128, 7168×2048 475.6 (128×192) / 461.4 /
// 475.1 / 574.9; 32 × ~256, 7168×2048 297.1 (128×192) / 295.8. Even segments, the 256-row tiles' case,
// which the model keeps (the heuristic / 128×256): 4 × 8192, 4096×7168 1444.1 (256×128) / 1460.1; 4 ×
// 8192, 7168×2048 753.1 / 794.0; 8 × 4096, 4096×7168 1450.0 / 1464.9; 8 × 4096, 7168×2048 751.6 /
// 799.7.
inline constexpr double k256ColumnEfficiency = 1.10;

inline Fp8Gemm1d2dConfig choose_fp8_1d2d_config(int m, int n, int num_sms, GemmLayout layout = GemmLayout::kNormal,
                                                int groups = 1, int experts = 0) {
  // PERF (H200). The kernel runs at the power limit, so a tile's efficiency is mostly its operand
  // bytes per FLOP. Same-run TFLOPS, 128x192 / 128x128 (both with multicast): 4096x7168x16384
  // 1272 / 1250, 4096x24576x1536 1029-1106 / 959-1046, 4096x2112x7168 1111-1144 / 964-1004,
  // 4096x576x7168 849-861 / 651-661, 4096x4096x7168 1153-1157 / 1205-1249 (6 waves against 8):
  // 1.04-1.12x fitted. Another run, 256x128 / 128x128 / 128x192 (multicast): 4096x4096x7168
  // 1120-1164 / 1001-1035 / 957-1028, 4096x7168x2048 1001-1054 / 886-947 / 896-970,
  // 4096x7168x16384 1224-1229 / 1097-1184 / 1103-1185, 4096x24576x1536 1097-1144 / 983-1041 /
  // 1056-1102, 4096x32768x512 733-762 / 657-685 / 732-768, 4096x2112x7168 913 / 993 / 1158-1166
  // (3 waves for 256x128): 1.08-1.16x fitted for 256x128. Earlier single runs: 64x128 0.69x,
  // 128x64 0.64x, 64x64 0.5x of 128x128. Ties go to the earlier entry. Decode-sized M (one M block)
  // prefers 64-row tiles (more CTAs in flight). Masked 4x256 groups, 4096x7168: 256x128 986-989 /
  // 128x128 901-912; 7168x2048: 741-742 / 666-673.
  // The normal and contiguous layouts' candidates; 128×256 (k256ColumnEfficiency) after 256×128, so
  // that a tie keeps the 256-row tile. The normal layout adds the 192-row tile where it fits
  // (fp8_1d2d_192_rows_fit).
  static constexpr std::array<TileCandidate, 7> kCandidates{{{128, 128, 1.0},
                                                             {128, 192, 1.08},
                                                             {128, 64, 0.65},
                                                             {64, 128, 0.65},
                                                             {64, 64, 0.5},
                                                             {256, 128, 1.12},
                                                             {128, 256, k256ColumnEfficiency}}};
  static constexpr auto kCandidatesWith192Rows = with_candidate(kCandidates, TileCandidate{192, 64, 1.0});
  static constexpr auto kCandidatesWith192RowsAbove384 = with_candidate(kCandidates, TileCandidate{192, 64, 0.95});
  // The masked layout's instantiations have no 128×192 tile: with the compacted scheduler's cursor
  // its registers spill (52 bytes).
  static constexpr std::array<TileCandidate, 5> kMaskedCandidates{
      {{128, 128, 1.0}, {128, 64, 0.65}, {64, 128, 0.65}, {64, 64, 0.5}, {256, 128, 1.12}}};
  const TileCandidate tile =
      layout == GemmLayout::kMGroupedMasked ? pick_tile_by_waves(kMaskedCandidates, m, n, num_sms, groups, true)
      : layout == GemmLayout::kNormal && fp8_1d2d_192_rows_fit(m) && m <= kMaxRowsFor192RowTilesAtFullEfficiency
          ? pick_tile_by_waves(kCandidatesWith192Rows, m, n, num_sms, groups, true)
      : layout == GemmLayout::kNormal && fp8_1d2d_192_rows_fit(m)
          ? pick_tile_by_waves(kCandidatesWith192RowsAbove384, m, n, num_sms, groups, true)
      : pick_tile_by_waves(kCandidates, m, n, num_sms, groups, true,
                           layout == GemmLayout::kMGroupedContiguous ? experts / 2 : 0);
  Fp8Gemm1d2dConfig best{tile.block_m, tile.block_n, 1};
  // Multicast B across CTA pairs on adjacent M blocks whenever every pair has a partner: it halves
  // B's share of L2 traffic. PERF (H200): measured equal to no multicast on the M = 4096 shapes.
  // Not for 192-row tiles, where it measured slower (fp8_1d2d_192_rows_fit), nor for 128×256
  // (k256ColumnEfficiency), nor where the 256×128 tile shares A instead
  // (fp8_1d2d_a_multicast_fits: the caller sets cluster_n then).
  const int m_blocks = (m + best.block_m - 1) / best.block_m;
  if (layout == GemmLayout::kNormal && best.block_m >= 128 && best.block_m != 192 && best.block_n != 256 &&
      m_blocks % 2 == 0 && !(best.block_m == 256 && fp8_1d2d_a_multicast_fits(best, m, n, 1, num_sms))) {
    best.cluster_m = 2;
  }
  return best;
}

// Split-K for grids that the tiles alone leave mostly idle (decode-sized M, small N): the K blocks
// of each tile are divided among up to num_sms / tiles CTAs, so the units fill one wave, keeping at
// least kMinKBlocksPerSplit K blocks per split (a unit pays a pipeline fill and its partial's round
// trip). PERF (H200): a wave-count cost model that allowed several waves of short units picked 8
// splits for 64×7168×16384 and doubled its time (45 -> 88 µs); one wave of long units does not.
// Same-run sweep, 64×64 tiles, µs by splits 1/2/3/4/6/8: 64×576×7168 18.8/14.9/13.7/13.2/13.4/14.8,
// 64×2112×7168 18.5/15.4/14.7/15.1 (136 units: a second wave)/21.5/22.8. The best splits keep
// 14-19 K blocks per unit: with 4 as the floor, 64×576×7168 took 14 splits and 18.5 µs.
inline constexpr int kMinKBlocksPerSplit = 12;
// The fixup within a cluster (fp8_1d2d/launch.cuh splits_in_cluster) costs a unit much less, so
// shorter units pay: same run, ncu µs by splits 3/4/6/8 (cluster fixup): 64×576×7168 10.0/9.4/9.0/
// 9.7, 1×64×7168 9.7/9.0/8.4/8.9, 128×576×7168 (128×64 tiles, at most 7) 10.2/9.7/9.4/9.6 (8
// requested). Its split count is an upper bound for the launcher, at most the cluster size of 8.
inline constexpr int kMinKBlocksPerClusterSplit = 9;

// The split count for `tiles` output tiles of `k_blocks` K blocks each (the rule above); every
// split gets at least one K block.
inline int choose_k_splits_for_tiles(long tiles, int k_blocks, int num_sms, int min_k_blocks, int max_splits) {
  if (tiles * 2 > num_sms) return 1;
  int splits = static_cast<int>(std::min<long>({num_sms / tiles, k_blocks / min_k_blocks, max_splits}));
  if (splits <= 1) return 1;
  // Every split gets at least one K block: as many splits as the per-split count needs.
  const int per_split = (k_blocks + splits - 1) / splits;
  return (k_blocks + per_split - 1) / per_split;
}

inline int choose_k_splits(int m, int n, int k, const Fp8Gemm1d2dConfig& config, int num_sms,
                           int min_k_blocks = kMinKBlocksPerSplit, int max_splits = 16) {
  const long tiles = static_cast<long>((m + config.block_m - 1) / config.block_m) * ((n + config.block_n - 1) / config.block_n);
  return choose_k_splits_for_tiles(tiles, (k + 127) / 128, num_sms, min_k_blocks, max_splits);
}

// The dense GEMM's tile (choose_fp8_1d2d_config), with three corrections. First, for grids of 64×64 tiles: every
// 64-row M block streams all of B, where 128×64 tiles with split-K stream fewer bytes per unit (A is
// only ever read from L2, and half as many M blocks read B). The 128×64 tiles are taken where their
// units fill at least three quarters of the SMs (with fewer, narrow N, the 64-row blocks keep more
// SMs reading), or, above 128 rows, at least as many units as the 64×64 tiles. Above 128 rows also
// only where
// - the 64×64 tiles do not split K themselves (there they measured as fast or faster),
// - the 64×64 tiles would run at least kMinKBlocksForTallerSplit K blocks: the split pays for its
//   second pipeline fill and the fixup only on long units.
// The rows a 128-row block adds past M cost it little: the last M block loads only its rows of A
// (Fp8Gemm1d2dParams::a_tail_rows).
// PERF (H200, ncu kernel durations, clean L2, medians of three calls in turns, µs, 64×64 / 128×64
// with split-K), one M block: 4096×7168 at M = 72 / 100 / 128: 18.14 / 14.85, 18.14 / 15.17,
// 18.37 / 15.04; 2112×7168: 16.64 / 12.77, 13.47 / 12.74, 13.25 / 12.77 (the one-block units are 33
// clusters of three splits there); kept: 576×7168 (54 one-block units): 10.18 / 11.17, 9.57 / 11.23,
// 9.47 / 11.30. Above 128 rows (benchmarks/sweep_tiles.py: L2 flushed, medians of 15 calls in turns,
// µs, 64×64 / 128×64 with 2 / 3 splits): 129×2112×7168 21.5 / 17.1 / 16.8, 192×2112×7168 20.9 /
// 17.5 / 17.0, 129×1536×7168 20.8 / 16.2 / 16.1, 256×1536×7168 20.5 / 17.0 / 16.5, 320×1024×7168
// 20.5 / 17.3 / 16.1, 448×1024×7168 21.5 / 17.3 / 16.8, 640×576×7168 20.4 / 16.7 / 16.5,
// 640×576×16384 37.2 / 26.1 / 26.1; K = 4096: 129×2112 15.9 / 13.9 / 13.5, 256×2112 15.6 / 14.7 /
// 13.9; 64×64 tiles that split K: 192×576×7168 12.4 / 16.4 / 14.4, 256×256×7168 11.9 / 16.1 / 14.2.
inline constexpr int kMinKBlocksForTallerSplit = 32;
//
// Second, one M block of 65-128 rows takes the 128×64 tile also where wider 128-row tiles (128×128,
// 128×192) take fewer waves: the grid is memory-bound, and with narrower tiles each CTA's last unit,
// which runs its mainloop and epilogue after the stream has ended, is half as long. PERF (an H100,
// benchmarks/ab_builds.py, the same extension with the tile forced, three rounds, medians, µs, the
// wave model's pick / 128×64): M = 128: 12288×2048 18.3 / 17.6, 12288×7168 41.9 / 41.2,
// 16384×2048 21.3 / 20.9, 24576×512 14.8 / 14.3, 24576×1536 24.7 / 23.3, 24576×2048 28.9 / 27.4,
// 24576×7168 76.8 / 72.6, 32768×512 16.8 / 16.4, 16384×16384 105.5 / 105.4; M = 72: 12288×2048
// 18.1 / 17.5, 16384×7168 51.4 / 50.4, 24576×2048 28.6 / 26.5, 24576×7168 76.7 / 71.2, 32768×2048
// 33.5 / 32.6; M = 100: 24576×1536 24.5 / 23.0, 32768×512 16.4 / 15.8. Nowhere slower than
// 0.994× (128×12288×512, 11.1 / 11.2). At M <= 64 the 64-row tiles stay (64×32768×512: 64×128 15.0,
// 128×64 15.8).
//
// Third, short K (385-1024) at 801-3072 rows: where the wave model takes 128×192 tiles and 256×128
// ones with A multicast (fp8_1d2d_a_multicast_fits; the caller sets cluster_n) make at least three
// waves, the 256-row tiles run, although their last M block pads up to 255 rows. The model's
// efficiencies were fitted at long K; a tile of a few K blocks spends much of its time outside the
// mainloop, most likely in its epilogue (not profiled), which 128×192 runs through one staging box
// and 256×128 box by box, overlapped with the next tile. PERF (an H100, benchmarks/sweep_tiles.py
// and ab_builds.py; every shape in fp8_1d2d/PERF.md "Configurations"): 256×128 was faster on every
// 832-1152-row shape but one of 16384-32768 columns at K = 512-1024 (µs, before / after:
// 896×32768×512 47.1 / 43.2, 1152×32768×512 54.6 / 51.5, 1100×32768×1024 88.1 / 83.6; equal:
// 1152×24576×512 42.8 / 42.9), and on 15 of 16 shapes at 1280-3072 rows (1408×32768×512 67.2 / 60.4;
// the loss 1536×12288×1024 43.9 / 44.5). It lost at 800 rows, whose 256-row blocks pad 224 rows
// (800×24576×1024 52.1 / 53.1), below three waves (1152×7168×512, 280 tiles, against the 128×128
// pick: 19.6 / 21.4), at K = 2048 and more (1152×7168×2048 38.6 / 45.0) and mixed at 576-640 rows
// (640×24576×512 28.2 / 30.3). Not measured above 3072 rows, where the model mostly takes 256×128
// itself, nor below K = 512. Where the model takes 128×256 instead (896-1152 × 32768 × 512), that
// tile stays: it measured faster than the 256-row ones there (k256ColumnEfficiency).
inline constexpr int kMinKBlocksFor256RowsAtShortK = 4;
inline constexpr int kMaxKBlocksFor256RowsAtShortK = 8;
inline constexpr int kMinRowsFor256RowsAtShortK = 801;
inline constexpr int kMaxRowsFor256RowsAtShortK = 3072;

inline Fp8Gemm1d2dConfig choose_fp8_1d2d_dense_config(int m, int n, int k, int num_sms) {
  const Fp8Gemm1d2dConfig config = choose_fp8_1d2d_config(m, n, num_sms);
  const int k_blocks = (k + 127) / 128;
  const bool short_k_mid_m = m >= kMinRowsFor256RowsAtShortK && m <= kMaxRowsFor256RowsAtShortK &&
                             k_blocks >= kMinKBlocksFor256RowsAtShortK && k_blocks <= kMaxKBlocksFor256RowsAtShortK;
  if (short_k_mid_m && config.block_m == 128 && config.block_n == 192) {
    const Fp8Gemm1d2dConfig tall{256, 128, 1};
    const long tiles = static_cast<long>((m + 255) / 256) * ((n + 127) / 128);
    if (tiles >= 3L * num_sms && fp8_1d2d_a_multicast_fits(tall, m, n, 1, num_sms)) return tall;
  }
  if (m > 64 && m <= 128 && config.block_m == 128 && config.block_n > 64) return Fp8Gemm1d2dConfig{128, 64, 1};
  if (m <= 64 || config.block_m != 64 || config.block_n != 64) return config;
  const Fp8Gemm1d2dConfig taller{128, 64, 1};
  if (m > 128 && (choose_k_splits(m, n, k, config, num_sms, kMinKBlocksPerClusterSplit, 8) > 1 ||
                  (k + 127) / 128 < kMinKBlocksForTallerSplit)) {
    return config;
  }
  const long tiles = static_cast<long>((m + taller.block_m - 1) / taller.block_m) * ((n + taller.block_n - 1) / taller.block_n);
  const long tiles_64 = static_cast<long>((m + 63) / 64) * ((n + 63) / 64);
  const long units = tiles * choose_k_splits(m, n, k, taller, num_sms, kMinKBlocksPerClusterSplit, 8);
  if (units == tiles) return config;
  return 4 * units >= 3L * num_sms || (m > 128 && units >= tiles_64) ? taller : config;
}

// Grids of at most two waves (every CTA runs one or two work units) take the one-box-staging
// variant of the 128×128 and 256×128 tiles (Fp8Gemm1d2dConfig::one_box_staging): at most one
// mainloop follows a tile for its stores to overlap, and the shared memory of the extra store boxes
// buys a stage for the memory-bound stream. `work_units`: the tiles (of every group) times the K
// splits. PERF (H200, same process, interleaved, TFLOPS, a box per box / one box): 256×128 masked
// 4×256 groups 4096×7168 (one wave) 1081-1092 / 1133-1145, 7168×2048 (two waves) 778-811 /
// 819-840; 128×128 dense 256×7168×16384 (one wave) 1003-1011 / 1034-1048; equal at two waves
// (masked 8×128 groups) and at three or more (128×24576×1536, 256×24576×1536), where the many-wave
// shapes prefer a box per box (fp8_1d2d/PERF.md "Epilogue").
inline bool fp8_1d2d_one_box_staging(const Fp8Gemm1d2dConfig& config, long work_units, int num_sms) {
  return config.block_m >= 128 && config.block_n == 128 && work_units <= 2L * num_sms;
}

// BF16 GEMM: the same wave-quantisation model over the compiled BF16 tiles. 128×256 (two math
// warpgroups of 64×256, 128 accumulators each) issues the most wgmma work per byte of shared memory
// and per barrier round trip; 64-row tiles (one math warpgroup) serve decode-sized M.
// `narrow`: the 64×64, 128×192, 128×176, 128×144, 128×96, 64×176, 64×144 and 64×96 tiles are
// candidates too (compiled for the normal layout with K-major operands); 192, 176 and 144 tile
// N = 2112 and 576 without a ragged last N block, each quantising differently onto the SMs
// (1024×2112: 88, 96 or 120 tiles), and 96 and 176 give mid-sized grids tile counts near the SM
// count (N = 4096 and 2112 in 43 and 22 blocks of 96, 7168 in 41 of 176).
// PERF (H200, benchmarks/sweep_tiles.py --kind bf16: every compiled tile on the benchmark's seven
// (N, K) at M = 192-8192, 84 shapes, L2 flushed, medians of calls in turns): the model's pick is
// 1.004× the fastest tile's time in geomean (1.036× without the 128×192 candidate; 128×192 at 0.92 to
// 0.97 fits equally, a search over every efficiency finds nothing better than 1.0045), and at most
// 1.21× (192×7168×16384: 64×256, 100 µs, against 128×128, 122; 64×176 below took it). The 128×192
// tile where it is picked, µs, 128×256 or
// 128×128 before / 128×192: 1024×2112×7168 73.0 / 58.6, 3072×2112×7168 152.5 / 124.6,
// 6144×2112×7168 301.5 / 242.0, 4096×576×7168 74.6 / 60.4, 3072×7168×16384 1078.8 / 1037.6.
// 128×176 and 128×144, fitted the same way (their efficiencies: the best geomean over a grid of
// both, 0.94 and 0.77-0.86): the pick 1.007× the fastest tile in geomean (1.022× without them),
// µs where they are picked, the previous pick / the new one: 1024×2112×7168 59.0 / 48.3 (144),
// 2048×2112×7168 119.1 / 97.8 (144), 4096×576×7168 60.4 / 51.7 (144), 8192×576×7168 125.7 / 103.5
// (144), 8192×2112×7168 362.1 / 340.5 (176), 1536×7168×16384 539.7 / 505.1 (176), 2048×7168×2048
// 92.0 / 87.7 (176). Missed: 3072×576×7168 and 6144×576×7168 kept 128×128 (56.2 and 106.0)
// where 128×144 took 48.4 and 99.4 (6144×576 now takes 64×144, below): one wave of 128×128 tiles
// on nearly every SM runs slower per tile than one on two thirds of them (2048×576: 42.6), which a
// per-tile efficiency cannot express.
// 64×144 (a sweep with it, the same 84 shapes): at 0.77 and above 256 rows the pick is 1.006× the
// fastest tile in geomean (1.016× without the candidate; 1.008× at 192-256 rows too, where it lost
// 3-8% to 64×128 on 4096×7168 and to 128×192 on 24576×1536, and decode sizes are not measured);
// µs, the pick without it / with it: 512×2112×7168 42.5 / 34.2, 1536×576×7168 43.2 / 32.9,
// 2048×576×7168 42.9 / 34.7, 6144×576×7168 104.1 / 85.3; 384×2112×7168 31.7 / 34.1 and
// 1024×576×7168 30.0 / 30.7 the two it costs.
// Its efficiency is 0.76 rather than the fit's 0.77: at 0.77, two waves of 64×144 cost what one wave
// of 128×176 does to 0.1% (2·64·144/0.77 against 128·176/0.94), a tie that the sweep's M values never
// met and that 64×144 won at 257-320 rows of N = 7168, 513-576 of 4096 and a few M of 1024, 2048
// and 2112, where the one wave of 128×176 is faster. PERF (an H100, sweep_tiles.py, two runs, µs,
// 64×144 / 128×176 (`torch.mm`)): 257×7168×16384 161.9-158.9 / 133.6-133.2 (119.0), 320×7168×16384
// 174.8-165.9 / 134.9-134.8 (120.5), 513×4096×7168 76.6 / 61.3-61.7 (48.4), 576×4096×7168 77.4 /
// 61.2-61.6 (54.3), 1088×2112×7168 79.1-77.3 / 57.8-57.4 (55.1), 2240×2112×7168 144.8-147.7 /
// 114.3-114.9 (89.9), 1088×2048×16384 171.9 / 122.3 (111.2), 2112×1024×7168 105.0 / 58.4 (54.5);
// 7168×2048 at 257-320 rows within the runs' spread (28.1-30.6 / 29.2-29.6). No shape of the fit
// changes its pick (its M values are 192-8192 in steps of the benchmark's list).
// 128×96, 64×176 and 64×96 (a sweep with them, the same 84 shapes; their efficiencies the best
// geomean over a grid of the three): the pick 1.004× the fastest tile in geomean (1.015× without
// them). cuBLAS runs these grids with tiles 96, 112 or 168 wide along N (`torch.mm`'s kernels by
// the profiler: 96x64 at 192×4096×7168 and 384×2112×7168, 168x64 at 192×7168×2048, 168x128 at
// 384×7168×16384). µs where they are picked, the pick without them / with them (`torch.mm`):
// 192×7168×16384 123.0 / 83.8 (64×176; 89.4), 192×7168×2048 22.4 / 21.5 (64×176; 18.5),
// 384×2112×7168 33.2 / 29.2 (64×96; 27.2), 1024×576×7168 30.5 / 26.6 (64×96; 23.6), 192×4096×7168
// 35.4 / 34.0 (64×96; 30.4), 768×2112×7168 42.9 / 38.5 (128×96; 35.3), 384×4096×7168 44.9 / 40.3
// (128×96; 38.2).
inline constexpr int kMinRowsFor64x144 = 257;
inline Bf16GemmConfig choose_bf16_config(int m, int n, int num_sms, int groups = 1, bool narrow = false) {
  static constexpr TileCandidate kCandidates[] = {{128, 256, 1.0}, {128, 128, 0.9}, {64, 256, 0.6}, {64, 128, 0.55}};
  static constexpr TileCandidate kWithNarrow[] = {
      {128, 256, 1.0}, {128, 192, 0.95}, {128, 176, 0.94}, {128, 144, 0.84}, {128, 128, 0.9},
      {128, 96, 0.7},  {64, 256, 0.6},   {64, 176, 0.65},  {64, 144, 0.76, kMinRowsFor64x144},
      {64, 128, 0.55}, {64, 96, 0.55},   {64, 64, 0.45}};
  const TileCandidate tile = narrow ? pick_tile_by_waves(kWithNarrow, m, n, num_sms, groups)
                                    : pick_tile_by_waves(kCandidates, m, n, num_sms, groups);
  Bf16GemmConfig best{tile.block_m, tile.block_n};
  return best;
}

// BF16 split-K (Bf16Variant::kSplitK, compiled for the 64×64, 64×96, 64×128 and 128×128 tiles with K-major
// operands) by the FP8 rule (choose_k_splits_for_tiles), at least kMinBf16KBlocksPerSplit K blocks
// of 64 per split. PERF (H200, same runs, µs after the zeroing flush): 64×128 tiles, no split / 2
// splits: 1×7168×2048 19.1 / 20.9, 64×7168×2048 18.4 / 21.9 (a unit of 16 K blocks loses to the
// whole tile: the summing unit reads every partial from L2). 64×64 tiles, splits 1/2/3/4/6/8 (6 and
// 8 at 33 tiles are two waves): 64×2112×7168 25.7/24.4/21.4/21.1/28.3/27.0, 1×2112×7168
// 28.4/27.0/22.4/21.4/28.8/27.4, 64×576×7168 21.5/22.4/18.7/17.1/16.3/15.0, 64×4096×7168 (64 tiles)
// 31.6/30.0; torch.mm 18.6, 17.5, 11.7, 25.6. The floor holds 64×576×7168 to 4 splits where 8 ran
// faster; a lower one would also split K = 2048 over 66 or fewer tiles, which is not measured.
inline constexpr int kMinBf16KBlocksPerSplit = 24;
// The fixup within a cluster (gemm/split_k_cluster.cuh) saves the global one's L2 round trips, so
// shorter units pay: at least 18 K blocks of 64, the K range of the FP8 kernel's floor there (9 of
// 128). Its count is an upper bound for the launcher, at most the cluster size of 8. PERF (H200,
// same runs, µs, zeroing / reading flush, the launcher's cluster count): 1×576×7168 on 64×64, 4/6/8
// splits (28/19/14 K blocks): 13.3/12.5/12.7, 14.0/13.0/13.8 (global fixup, 4: 14.3, 15.2; torch.mm
// 11.8, 10.8); 1×7168×2048 on 64×128, 2 splits of 16 blocks / none: 20.8 / 18.9, 19.6 / 18.0.
inline constexpr int kMinBf16KBlocksPerClusterSplit = 18;
inline int choose_bf16_k_splits(int m, int n, int k, const Bf16GemmConfig& config, int num_sms,
                                int min_k_blocks = kMinBf16KBlocksPerSplit, int max_splits = 16) {
  const bool tile = config.swap_ab ? config.block_m == 64 && is_bf16_swap_ab_token_width(config.block_n)
                                   : (config.block_n == 128 && (config.block_m == 64 || config.block_m == 128)) ||
                                         (config.block_m == 64 && (config.block_n == 64 || config.block_n == 96));
  const bool compiled = tile && config.major_a == OperandMajor::kK && config.major_b == OperandMajor::kK;
  if (!compiled) return 1;
  const long tiles = static_cast<long>((m + config.block_m - 1) / config.block_m) * ((n + config.block_n - 1) / config.block_n);
  return choose_k_splits_for_tiles(tiles, (k + 63) / 64, num_sms, min_k_blocks, max_splits);
}

// The swapped decode GEMM (Bf16Variant::kSwapAB), for K-major operands and no C: its tile for an
// m × n × k problem (its own problem is the swapped one, n × m × k, for choose_bf16_k_splits), or
// nullopt where the normal kernels take the call.
// - M ≤ 32: 64 weight rows × the fewest token columns (8, 16, 32) that hold M, always: the normal
//   tiles' 64 rows would be mostly TMA zero fill.
// - 32 < M ≤ kMaxBf16SwapAbRows, where the swapped tiles split K: 64 token columns up to 64 rows, 96
//   up to 96, two blocks of 64 above; 32 where those units would leave more than half the SMs idle.
//   Where the swapped tiles do not split, the tiles alone fill the SMs, and the normal kernels
//   measured faster or at most 6% slower (about what the measurement resolves).
// PERF (H200, benchmarks/sweep_bf16_swap.py: ncu kernel durations, one run, µs, normal / swapped
// 32 / 64 / 96 / torch.mm; the whole table in bf16/PERF.md "Swap-AB"): split, 64×2112×7168 16.54 /
// 15.71 / 14.40 / 17.66 / 16.26, 96×2112×7168 23.55 / 22.94 / 20.13 / 16.83 / 15.94, 128×2112×7168
// 19.65 / 23.17 / 16.51 / 27.84 / 16.06, 64×576×7168 12.93 / 9.34 / 10.30 / 13.25 / 11.10,
// 96×576×7168 13.76 / 10.56 / 11.71 / 13.25 / 11.49, 72×4096×7168 36.54 / 41.73 / 36.00 / 24.54 /
// 23.52; unsplit, 128×4096×7168 22.27 / 42.14 / 24.32 / 42.91 / 21.47, 64×7168×2048 11.97 / 16.00 /
// 12.35 / 15.65 / 11.14, 96×7168×2048 14.50 / 21.79 / 20.45 / 14.62 / 11.14, 64×24576×1536 22.85 /
// 31.94 / 23.07 / 29.57 / 21.73.
inline constexpr int kMaxBf16SwapAbRows = 128;
inline std::optional<Bf16GemmConfig> choose_bf16_swap_ab_config(int m, int n, int k, int num_sms) {
  Bf16GemmConfig config{64, m <= 8 ? 8 : m <= 16 ? 16 : m <= 32 ? 32 : m <= 64 ? 64 : m <= 96 ? 96 : 64};
  config.swap_ab = true;
  if (m <= 32) return config;
  if (m > kMaxBf16SwapAbRows) return std::nullopt;
  const int global_splits = choose_bf16_k_splits(n, m, k, config, num_sms);
  const int cluster_splits = choose_bf16_k_splits(n, m, k, config, num_sms, kMinBf16KBlocksPerClusterSplit, 8);
  if (global_splits == 1 && cluster_splits == 1) return std::nullopt;
  const long tiles = static_cast<long>((n + 63) / 64) * ((m + config.block_n - 1) / config.block_n);
  if (tiles * std::max(global_splits, cluster_splits) * 2 < num_sms) config.block_n = 32;
  return config;
}

// The swapped GEMM with `tokens` token columns (HOPPERKIT_BF16_GEMM_SWAP_AB=8|16|32|64|96, tuning).
inline Bf16GemmConfig forced_bf16_swap_ab_config(int tokens) {
  Bf16GemmConfig config{64, tokens};
  config.swap_ab = true;
  return config;
}

// The dense BF16 GEMM's tile and majorness (split count: choose_bf16_k_splits): choose_bf16_config
// with the narrow 64×64 tile where both operands are K-major, except at M ≤ 32 when that tile would
// not split K. There its 64-row A box is mostly TMA zero fill, and the 64×128 tile, half as many
// boxes, is faster. PERF (H200, same runs, µs, both flushes, 64×64 / 64×128): 1×7168×2048
// 19.6-20.3 / 17.5-18.8; 64×7168×2048 13.8-16.9 / 15.9-18.2; 64×32768×512 15.8-19.2 / 17.7-20.0;
// split, 1×2112×7168 (4 splits) 20.7-21.5 / 22.5-23.6.
inline Bf16GemmConfig choose_bf16_dense_config(int m, int n, int k, int num_sms, OperandMajor major_a,
                                               OperandMajor major_b) {
  const bool k_major = major_a == OperandMajor::kK && major_b == OperandMajor::kK;
  Bf16GemmConfig config = choose_bf16_config(m, n, num_sms, 1, /*narrow=*/k_major);
  config.major_a = major_a;
  config.major_b = major_b;
  if (config.block_n == 64 && m <= 32 && choose_bf16_k_splits(m, n, k, config, num_sms) == 1 &&
      choose_bf16_k_splits(m, n, k, config, num_sms, kMinBf16KBlocksPerClusterSplit, 8) == 1) {
    config = choose_bf16_config(m, n, num_sms);
    config.major_a = major_a;
    config.major_b = major_b;
  }
  return config;
}

}  // namespace hopperkit::gemm
