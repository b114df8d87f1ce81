"""GPU tests of the dense FP8 GEMM ``fp8_gemm_nt`` (issue 4), run on an SM90 device.

Every case draws fresh seeded BF16 inputs (randn with a random magnitude per scale block, so that a
wrongly indexed scale shows), quantizes them with hopperkit's casts (A 1×128, B 128×128,
or 1×128 for the 1d1d recipe), poisons D with NaN, calls the op and checks:
- no NaN left in D (every element written);
- ``calc_diff(D, product of the unquantized inputs) < 1e-3`` (DeepGEMM's FP8 bound, quantization
  error included);
- ``calc_diff(D, hopperkit.reference.gemm.fp8_gemm_nt on the same FP8 operands) < 1e-5`` (the kernel
  implements the reference's two-level accumulation; only summation order and the final rounding differ).

The matrix is DeepGEMM's dense list, M ∈ {1, 7, 64, 128, 4096} × seven (N, K), in full (no case takes
more than a fraction of a second, on the kernel or on the reference path); then the 1d1d recipe with
accumulation, empty and awkward shapes, scales and D in other layouts (bitwise the same result), and
bitwise repeatability. Where ``fp8_gemm_nt`` has no kernel yet these tests exercise the reference path
on the GPU.
"""

from __future__ import annotations

import math

import pytest
import torch

import hopperkit
from hopperkit.reference import gemm as ref_gemm
from hopperkit.testing import (assert_fp8_gemm_close, block_scaled_randn, capture_graph, launched_kernel_traits, poison_,
                               seeded_generator)

pytestmark = pytest.mark.gpu

FP8 = torch.float8_e4m3fn
RECIPE_1D1D = (1, 1, 128)

MS = (1, 7, 64, 128, 4096)
NKS = ((2112, 7168), (576, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048))


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _randn(gen: torch.Generator, *shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, device=gen.device, dtype=dtype)


def _inputs_1d2d(device, m, n, k, *key):
    gen = seeded_generator(device, "1d2d", m, n, k, *key)
    a, b = block_scaled_randn(gen, m, k), block_scaled_randn(gen, n, k, block_rows=128)
    return a, b, hopperkit.per_token_cast_to_fp8(a), hopperkit.per_block_cast_to_fp8(b)


def _run_1d2d(device, m, n, k, *key):
    a, b, (a_fp8, sfa), (b_fp8, sfb) = _inputs_1d2d(device, m, n, k, *key)
    d = poison_(torch.empty(m, n, dtype=torch.bfloat16, device=device))
    hopperkit.fp8_gemm_nt((a_fp8, sfa), (b_fp8, sfb), d)
    unquantized = a.float() @ b.float().t()
    reference = ref_gemm.fp8_gemm_nt(a_fp8, sfa, b_fp8, sfb, out_dtype=torch.float32)
    assert_fp8_gemm_close(f"1d2d M={m} N={n} K={k}", d, unquantized, reference)


# --------------------------------------------------------------------------------------------------
# the dense matrix (1d2d: BF16 D, 128×128 SFB)
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n,k", NKS, ids=[f"N{n}-K{k}" for n, k in NKS])
@pytest.mark.parametrize("m", MS, ids=[f"M{m}" for m in MS])
def test_1d2d_matrix(cuda, m, n, k):
    _run_1d2d(cuda, m, n, k)


# Clusters need two CTAs at once: with set_num_sms(1) the launch still runs one pair, and every tile
# is computed. The heuristic's picks on one SM: 256×128 tiles with A multicast, 128×192 tiles with B
# multicast (two M blocks), and 64×128 tiles without a cluster (one CTA walks all 56 tiles).
@pytest.mark.parametrize("m,n,k", [(256, 7168, 2048), (256, 192, 1024), (64, 7168, 2048)])
def test_1d2d_on_one_sm(cuda, m, n, k):
    hopperkit.set_num_sms(1)
    try:
        _run_1d2d(cuda, m, n, k, "one SM")
    finally:
        hopperkit.set_num_sms(None)


# M not a multiple of the tile (100, 4097), N not a multiple of 128 (200; N % 8 == 0 as TMA needs for
# BF16 rows), N narrower than one 64-column store box (8, 40), K not a multiple of 128 (320: a
# 64-wide last K block), and their combinations.
ODD_SHAPES = (
    (100, 2112, 7168), (100, 7168, 2048), (4097, 4096, 7168), (4097, 2112, 7168),
    (1, 200, 7168), (128, 200, 7168), (4097, 200, 2048),
    (64, 7168, 320), (7, 2112, 320), (4097, 576, 320), (100, 200, 320), (1, 200, 320),
    (100, 8, 2048), (300, 40, 320),
)


@pytest.mark.parametrize("m,n,k", ODD_SHAPES, ids=[f"M{m}-N{n}-K{k}" for m, n, k in ODD_SHAPES])
def test_1d2d_odd_shapes(cuda, m, n, k):
    _run_1d2d(cuda, m, n, k)


# Shapes above 128 rows where the heuristic takes 128×64 tiles with split-K over several M blocks
# instead of unsplit 64×64 tiles (heuristics.h choose_fp8_1d2d_dense_config): a last M block partly
# past M (1200, 233, 537, 193), of one row (129), two and three splits per tile, N = 256 to 2112,
# K = 4096, 7168 and 16384.
MID_M_SPLIT_SHAPES = ((256, 2112, 7168), (512, 576, 7168), (768, 576, 7168), (1200, 256, 7168), (233, 2048, 7168),
                      (537, 512, 16384), (129, 2112, 7168), (193, 2112, 4096), (320, 1024, 7168), (640, 576, 7168))


@pytest.mark.parametrize("m,n,k", MID_M_SPLIT_SHAPES, ids=[f"M{m}-N{n}-K{k}" for m, n, k in MID_M_SPLIT_SHAPES])
def test_1d2d_mid_m_split(cuda, m, n, k):
    _run_1d2d(cuda, m, n, k)


# Shapes where the heuristic takes 192×64 tiles (heuristics.h fp8_1d2d_192_rows_fit): one M block
# with a one-row (129) or partial last block, two M blocks whose second holds 65 rows (257) or 108
# (300), with and without split-K (2112×7168, 1536×7168 and 2048×16384 split in two; 4096×7168 at
# 129-192 rows too); above 384 rows, four M blocks whose last holds 64 rows (640), six whose last
# holds 140 (1100), and three waves of them (576×7168×16384).
TALL_192_SHAPES = ((129, 7168, 2048), (160, 32768, 512), (192, 4096, 7168), (257, 2112, 7168), (300, 4096, 7168),
                   (384, 1536, 7168), (300, 2048, 16384), (640, 2112, 7168), (1100, 1024, 7168), (576, 7168, 16384))


@pytest.mark.parametrize("m,n,k", TALL_192_SHAPES, ids=[f"M{m}-N{n}-K{k}" for m, n, k in TALL_192_SHAPES])
def test_1d2d_192_row_tiles(cuda, m, n, k):
    _run_1d2d(cuda, m, n, k)


def _launched_1d2d_traits(device, m, n, k):
    """The traits of every 1d2d kernel one fp8_gemm_nt call launches (BLOCK_M, BLOCK_N, cluster M,
    one-box staging, masked, cluster N, per-half experts), by kernel name."""
    _, _, a, b = _inputs_1d2d(device, m, n, k, "launched")
    d = torch.empty(m, n, dtype=torch.bfloat16, device=device)
    return launched_kernel_traits(lambda: hopperkit.fp8_gemm_nt(a, b, d), "fp8_gemm_1d2d_kernel", "Fp8Gemm1d2dTraits")


def _launched_1d2d_tiles(device, m, n, k):
    """The (BLOCK_M, BLOCK_N) of every 1d2d kernel one fp8_gemm_nt call launches."""
    return {tuple(int(v) for v in traits.split(",")[:2]) for traits in _launched_1d2d_traits(device, m, n, k)}


def _heuristic_1d2d_tiles(device, monkeypatch, m, n, k):
    """_launched_1d2d_tiles with the tile and split knobs cleared, so that the heuristic picks."""
    for knob in ("HOPPERKIT_FP8_GEMM_CONFIG", "HOPPERKIT_FP8_GEMM_SPLITS"):
        monkeypatch.delenv(knob, raising=False)
    return _launched_1d2d_tiles(device, m, n, k)


# The rule itself: 192×64 inside its row ranges; not where its M blocks pad more rows than 128-row
# blocks at most 384 rows (200); above 384 rows where the wave model picks it (640 and 768 rows of
# one wave), not where 128×64 fills one wave too (448, 960) or 128×192 takes fewer waves (576 ×
# 24576×1536), nor above kMaxRowsFor192RowTiles (1344), where other tiles measured faster.
@pytest.mark.parametrize("m,n,k,tall", [(160, 7168, 2048, True), (300, 2112, 7168, True), (200, 4096, 7168, False),
                                         (640, 2112, 7168, True), (768, 1536, 7168, True), (448, 2112, 7168, False),
                                         (960, 1024, 7168, False), (576, 24576, 1536, False), (1344, 2112, 7168, False)],
                         ids=lambda v: str(v))
def test_1d2d_192_row_tiles_chosen(cuda, monkeypatch, m, n, k, tall):
    tiles = _heuristic_1d2d_tiles(cuda, monkeypatch, m, n, k)
    assert len(tiles) == 1, tiles
    assert ((192, 64) in tiles) == tall, tiles


# 128×256 tiles where their 256-column N blocks take fewer waves (heuristics.h
# k256ColumnEfficiency): two waves at 1152×7168 where 128-row tiles take three or four, five
# at 640×32768×512, and a 256-row tile's eighth wave saved at 4097 rows; not at 896×7168 (1.5 waves
# against three of 128×128) nor where 256×128 makes as few waves (4096 rows).
@pytest.mark.parametrize("m,n,k,wide", [(1152, 7168, 2048, True), (640, 32768, 512, True), (4097, 7168, 2048, True),
                                         (896, 7168, 2048, False), (4096, 7168, 2048, False)], ids=lambda v: str(v))
def test_1d2d_256_column_tiles_chosen(cuda, monkeypatch, m, n, k, wide):
    tiles = _heuristic_1d2d_tiles(cuda, monkeypatch, m, n, k)
    assert len(tiles) == 1, tiles
    assert ((128, 256) in tiles) == wide, tiles


# One M block of 65-128 rows takes 128×64 tiles where the wave model alone would take wider ones
# (heuristics.h choose_fp8_1d2d_dense_config); 64 rows keep the 64-row tiles.
@pytest.mark.parametrize("m,n,k,narrow", [(128, 24576, 1536, True), (100, 32768, 512, True), (72, 16384, 7168, True),
                                           (64, 32768, 512, False)], ids=lambda v: str(v))
def test_1d2d_one_m_block_takes_128x64_tiles(cuda, monkeypatch, m, n, k, narrow):
    tiles = _heuristic_1d2d_tiles(cuda, monkeypatch, m, n, k)
    assert (tiles == {(128, 64)}) == narrow, tiles


# Every compiled 1d2d tile configuration, forced (the heuristic reaches only some of them on the
# shapes above), on ragged M, N and K: a last M block that is partly (1000) or mostly (300: whole
# 64-row waves of a 256-row tile) past M, BLOCK_N = 192 tiles that start mid scale block (N 200,
# 2112), 256-wide tiles whose second 128-column wave lies wholly past N (200, 576, 2112), a 64-wide
# last K block (320). Multicast configurations need an even number of M blocks.
# The fourth value selects the one-box-staging variant (compiled for 128×128 and 256×128), which is
# correct on grids of any size.
CONFIGS_1D2D = ((64, 64, 1, 0), (64, 128, 1, 0), (128, 64, 1, 0), (128, 64, 2, 0), (128, 128, 1, 0), (128, 128, 1, 1),
                (128, 128, 2, 0), (128, 128, 2, 1), (128, 192, 1, 0), (128, 192, 2, 0), (128, 256, 1, 0),
                (192, 64, 1, 0), (192, 64, 2, 0), (256, 128, 1, 0), (256, 128, 1, 1), (256, 128, 2, 0), (256, 128, 2, 1))
CONFIG_CASES = [
    (m, n, k, bm, bn, cm, ow)
    for m, n, k in ((1000, 200, 320), (512, 2112, 1536), (300, 576, 7168))
    for bm, bn, cm, ow in CONFIGS_1D2D
    if cdiv(m, bm) % cm == 0
]


@pytest.mark.parametrize("m,n,k,bm,bn,cm,ow", CONFIG_CASES,
                         ids=[f"M{m}-N{n}-K{k}-{bm}x{bn}c{cm}{'-one-box' if ow else ''}"
                              for m, n, k, bm, bn, cm, ow in CONFIG_CASES])
def test_1d2d_every_config(cuda, monkeypatch, m, n, k, bm, bn, cm, ow):
    monkeypatch.setenv("HOPPERKIT_FP8_GEMM_CONFIG", f"{bm},{bn},{cm},{ow}")
    _run_1d2d(cuda, m, n, k, "config", bm, bn, cm, ow)


# The M block where M ends, among several, loads only its rows of A and of its scales (a box of
# M % BLOCK_M rows rounded up to 8; the shared-memory rows past it hold stale data of earlier
# stages, which must reach no stored row): one row past a block (with one and two math warpgroups,
# and two 64-row waves), several tiles per CTA (65×7168 on 64×64: 224 tiles), split-K, and pairs of
# B-multicast CTAs whose second block is the short one (test_1d2d_every_config covers the others).
# Also a short last block under split-K, whose partials go through both fixups (in a cluster: 128×64
# and 128×128; through global memory: 256×128), a 256-row multicast pair whose second block
# holds 44 rows, and the three math warpgroups of the 192-row tile (a one-row last block; one block
# of 129 or 200 rows, split; a multicast pair whose second block holds 8 rows), and the 128×256
# tile's two column waves (a one-row last block alone and split through global memory, and a
# last block of 104 rows among eight).
A_TAIL_CASES = [(129, 576, 1024, "128,128,1", None), (257, 2112, 1024, "256,128,1", None),
                (65, 7168, 512, "64,64,1", None), (80, 2112, 7168, "64,64,1", 4), (200, 4096, 512, "128,128,2", None),
                (160, 2112, 7168, "128,64,1", 3), (129, 4096, 7168, "128,128,1", 2), (129, 7168, 4096, "256,128,1", 2),
                (200, 1024, 2048, "256,128,1", 3), (300, 1024, 2048, "256,128,2", None),
                (193, 2112, 1024, "192,64,1", None), (129, 7168, 4096, "192,64,1", 2), (200, 1024, 2048, "192,64,1", 3),
                (200, 2112, 1024, "192,64,2", None), (129, 2112, 1024, "128,256,1", None),
                (129, 7168, 4096, "128,256,1", 2), (1000, 4096, 1024, "128,256,1", None)]


@pytest.mark.parametrize("m,n,k,config,splits", A_TAIL_CASES, ids=[f"M{m}-N{n}-K{k}-{c}-s{s}" for m, n, k, c, s in A_TAIL_CASES])
def test_1d2d_last_m_block_loads_only_its_rows(cuda, monkeypatch, m, n, k, config, splits):
    monkeypatch.setenv("HOPPERKIT_FP8_GEMM_CONFIG", config)
    if splits is not None:
        monkeypatch.setenv("HOPPERKIT_FP8_GEMM_SPLITS", str(splits))
    _run_1d2d(cuda, m, n, k, "a tail", config, splits)


# A multicast (CTA pairs on adjacent N blocks of one M block, rank 0 loading A and its scales into
# both), forced on and off on the same call, for both tiles compiled with it:
# - 64×64: M from one row to a full block (a_box_rows from 8 to 64), N blocks from 4 (a ragged last
#   one at N = 200) to 384 (three waves of the persistent grid), a 64-wide last K block (320), K =
#   7168 (a tile whose splits are forced off);
# - 256×128 (grids of more than two waves: 264 tiles on 132 SMs): the tiles pair along N within
#   every M block (TileScheduler kPairN), including a short last one (2200 rows: 152), a ragged last
#   N block (4040: 72 columns), a 64-wide last K block (704), and an odd number of M blocks (9).
#   Also a single M block shorter than the tile, whose A box holds only its rows (200; 100, a box
#   of 104 rows), spread over 266 N blocks for more than two waves.
# The same bits as without it (the same per-tile arithmetic), and the reference's result.
A_MULTICAST_CASES = ([("64,64,1", m, n, k) for m in (1, 7, 33, 64)
                      for n, k in ((200, 320), (7168, 2048), (24576, 1536), (4096, 7168))]
                     + [("256,128,1", m, n, k) for m, n, k in ((2304, 4096, 704), (2200, 4040, 512), (4096, 7168, 256),
                                                               (200, 34048, 256), (100, 34048, 384))])


@pytest.mark.parametrize("config,m,n,k", A_MULTICAST_CASES,
                         ids=[f"{c.rsplit(',', 1)[0].replace(',', 'x')}-M{m}-N{n}-K{k}" for c, m, n, k in A_MULTICAST_CASES])
def test_1d2d_a_multicast(cuda, monkeypatch, config, m, n, k):
    a, b, (a_fp8, sfa), (b_fp8, sfb) = _inputs_1d2d(cuda, m, n, k, "a_multicast")
    monkeypatch.setenv("HOPPERKIT_FP8_GEMM_CONFIG", config)
    monkeypatch.setenv("HOPPERKIT_FP8_GEMM_SPLITS", "1")
    outs = {}
    for setting in ("off", "on"):
        monkeypatch.setenv("HOPPERKIT_FP8_GEMM_A_MULTICAST", setting)
        outs[setting] = poison_(torch.empty(m, n, dtype=torch.bfloat16, device=cuda))
        hopperkit.fp8_gemm_nt((a_fp8, sfa), (b_fp8, sfb), outs[setting])
    reference = ref_gemm.fp8_gemm_nt(a_fp8, sfa, b_fp8, sfb, out_dtype=torch.float32)
    assert_fp8_gemm_close(f"A multicast {config} M={m} N={n} K={k}", outs["on"], a.float() @ b.float().t(), reference)
    assert torch.equal(outs["on"], outs["off"])


# Forced on where it cannot run. 64×64: two M blocks, an odd number of N blocks (N = 576: 9), a
# split; a tile it is not compiled for (128×64). 256×128: an odd number of N blocks (4224: 33), a
# grid of two waves or less (512×4096: 64 tiles), B multicast already forced. Each is an error
# naming the knob, before any launch.
A_MULTICAST_REFUSED = {
    "two-m-blocks": ("64,64,1", "1", 65, 7168, 2048),
    "odd-n-blocks": ("64,64,1", "1", 64, 576, 2048),
    "split": ("64,64,1", "4", 64, 7168, 2048),
    "128x64": ("128,64,1", "1", 64, 7168, 2048),
    "256x128-odd-n-blocks": ("256,128,1", "1", 2304, 4224, 512),
    "256x128-two-waves": ("256,128,1", "1", 512, 4096, 512),
    "256x128-b-multicast": ("256,128,2", "1", 2048, 4096, 512),
}


@pytest.mark.parametrize("config,splits,m,n,k", A_MULTICAST_REFUSED.values(), ids=A_MULTICAST_REFUSED.keys())
def test_1d2d_a_multicast_refused(cuda, monkeypatch, config, splits, m, n, k):
    _, _, (a_fp8, sfa), (b_fp8, sfb) = _inputs_1d2d(cuda, m, n, k, "a_multicast_refused")
    monkeypatch.setenv("HOPPERKIT_FP8_GEMM_CONFIG", config)
    monkeypatch.setenv("HOPPERKIT_FP8_GEMM_SPLITS", splits)
    monkeypatch.setenv("HOPPERKIT_FP8_GEMM_A_MULTICAST", "on")
    d = poison_(torch.empty(m, n, dtype=torch.bfloat16, device=cuda))
    with pytest.raises(ValueError, match="HOPPERKIT_FP8_GEMM_A_MULTICAST"):
        hopperkit.fp8_gemm_nt((a_fp8, sfa), (b_fp8, sfb), d)
    assert torch.isnan(d.float()).all()


# The heuristic's choice, by the launched kernel's traits (BLOCK_M, BLOCK_N, cluster M, one-box
# staging, masked, cluster N, per-half experts): A multicast for 256×128 over more than two waves,
# B multicast on 256×128 grids of two waves (one-box staging), 128×192 keeps B multicast.
@pytest.mark.parametrize("m,n,k,traits", [(4096, 4096, 1024, "256,128,1,false,false,2,false"),
                                          (512, 7168, 2048, "256,128,2,true,false,1,false"),
                                          (4096, 2112, 1024, "128,192,2,false,false,1,false")],
                         ids=lambda v: str(v))
def test_1d2d_a_multicast_256_chosen(cuda, monkeypatch, m, n, k, traits):
    for knob in ("HOPPERKIT_FP8_GEMM_CONFIG", "HOPPERKIT_FP8_GEMM_SPLITS", "HOPPERKIT_FP8_GEMM_A_MULTICAST"):
        monkeypatch.delenv(knob, raising=False)
    launched = _launched_1d2d_traits(cuda, m, n, k)
    assert launched == {traits}, launched


@pytest.mark.parametrize("recipe", [None, RECIPE_1D1D], ids=["1d2d", "1d1d"])
def test_single_row_a_with_any_row_stride(cuda, recipe):
    """A [1, K] and D [1, N] taken from buffers whose rows are not 16-byte multiples apart: the stride
    of a one-row dimension is never stepped over, so the Python checks and both ops accept it, and
    the ops hand TMA a valid stride of their own (ops/checks.h fp8_row_stride, row_stride)."""
    k, n = 512, 256
    gen = seeded_generator(cuda, "single_row", recipe)
    a, b = block_scaled_randn(gen, 1, k), block_scaled_randn(gen, n, k, block_rows=1 if recipe else 128)
    a_fp8, sfa = hopperkit.per_token_cast_to_fp8(a)
    b_fp8, sfb = hopperkit.per_token_cast_to_fp8(b) if recipe else hopperkit.per_block_cast_to_fp8(b)
    wide = torch.zeros(2, k + 8, dtype=torch.uint8, device=cuda).view(FP8)
    wide[0, :k] = a_fp8[0]
    a_view = wide[:1, :k]
    assert a_view.stride(0) % 16 and a_view.data_ptr() % 16 == 0
    out = torch.float32 if recipe else torch.bfloat16
    c = torch.randn(1, n, generator=gen, device=cuda) if recipe else None
    # D, too, is one row of a tensor whose rows are not 16 bytes apart.
    d = poison_(torch.empty(2, n + 2, dtype=out, device=cuda))[:1, :n]
    assert (d.stride(0) * d.element_size()) % 16
    hopperkit.fp8_gemm_nt((a_view, sfa), (b_fp8, sfb), d, c=c, recipe=recipe)
    reference = ref_gemm.fp8_gemm_nt(a_fp8, sfa, b_fp8, sfb, c, recipe=recipe or (1, 128, 128), out_dtype=torch.float32)
    unquantized = a.float() @ b.float().t() + (0 if c is None else c)
    assert_fp8_gemm_close(f"single row {recipe or '1d2d'}", d, unquantized, reference)


# --------------------------------------------------------------------------------------------------
# 1d1d: FP32 D = C + A·Bᵀ, 1×128 scales on both operands
# --------------------------------------------------------------------------------------------------

SHAPES_1D1D = ((128, 2112, 7168), (4096, 7168, 2048), (7, 576, 320), (100, 200, 512), (4097, 4096, 1536))


@pytest.mark.parametrize("in_place", [True, False], ids=["c_is_d", "c_separate"])
@pytest.mark.parametrize("m,n,k", SHAPES_1D1D, ids=[f"M{m}-N{n}-K{k}" for m, n, k in SHAPES_1D1D])
def test_1d1d_accumulate(cuda, m, n, k, in_place):
    gen = seeded_generator(cuda, "1d1d", m, n, k, in_place)
    a, b = block_scaled_randn(gen, m, k), block_scaled_randn(gen, n, k)
    c0 = _randn(gen, m, n, dtype=torch.float32) * 32
    a_fp8, sfa = hopperkit.per_token_cast_to_fp8(a)
    b_fp8, sfb = hopperkit.per_token_cast_to_fp8(b)
    if in_place:
        d = c0.clone()
        c = d
    else:
        c = c0.clone()
        d = poison_(torch.empty(m, n, dtype=torch.float32, device=cuda))
    hopperkit.fp8_gemm_nt((a_fp8, sfa), (b_fp8, sfb), d, c=c, recipe=RECIPE_1D1D)
    if not in_place:
        assert torch.equal(c, c0), "1d1d: C was modified (it is read only when it is not D)"
    unquantized = c0 + a.float() @ b.float().t()
    reference = ref_gemm.fp8_gemm_nt(a_fp8, sfa, b_fp8, sfb, c0, recipe=RECIPE_1D1D)
    assert_fp8_gemm_close(f"1d1d M={m} N={n} K={k}", d, unquantized, reference)


# --------------------------------------------------------------------------------------------------
# empty problems: no launch, nothing written
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("recipe", ["1d2d", "1d1d"])
@pytest.mark.parametrize("m,n", [(0, 2112), (0, 200), (64, 0)], ids=["M0", "M0-N200", "N0"])
def test_empty_is_noop(cuda, m, n, recipe):
    k = 7168
    kb = cdiv(k, 128)
    gen = seeded_generator(cuda, "empty", m, n, recipe)
    a_fp8 = _randn(gen, m, k).to(FP8)
    b_fp8 = _randn(gen, n, k).to(FP8)
    sfa = torch.rand(m, kb, generator=gen, device=cuda) + 0.5
    dtype = torch.bfloat16 if recipe == "1d2d" else torch.float32
    sfb_rows = cdiv(n, 128) if recipe == "1d2d" else n
    sfb = torch.rand(sfb_rows, kb, generator=gen, device=cuda) + 0.5
    # D is an empty view into a poisoned buffer: any write through its pointer would show up there.
    buf = poison_(torch.empty(max(m, 4), max(n, 8), dtype=dtype, device=cuda))
    d = buf[:m, :n]
    if recipe == "1d2d":
        hopperkit.fp8_gemm_nt((a_fp8, sfa), (b_fp8, sfb), d)
    else:
        hopperkit.fp8_gemm_nt((a_fp8, sfa), (b_fp8, sfb), d, c=d, recipe=RECIPE_1D1D)
    torch.cuda.synchronize()
    assert torch.isnan(buf).all(), "an empty GEMM wrote into D's storage"


# --------------------------------------------------------------------------------------------------
# layouts: scales and D in strides other than the TMA-aligned ones give bitwise the same D
# --------------------------------------------------------------------------------------------------


def _nan_padded(t: torch.Tensor, extra_cols: int) -> torch.Tensor:
    """``t`` as a K-major view into a wider NaN-filled buffer (reading past a row shows up as NaN)."""
    buf = torch.full((t.shape[0], t.shape[1] + extra_cols), math.nan, dtype=t.dtype, device=t.device)
    buf[:, : t.shape[1]] = t
    return buf[:, : t.shape[1]]


def _mn_major_exact(t: torch.Tensor) -> torch.Tensor:
    """MN-major with column stride exactly the row count (not padded to a multiple of 4)."""
    out = torch.empty_strided(tuple(t.shape), (1, max(t.shape[0], 1)), dtype=t.dtype, device=t.device)
    return out.copy_(t)


LAYOUTS = {
    "sfa_k_major": lambda sfa, sfb: (sfa.contiguous(), sfb),
    "sfa_mn_major_unaligned": lambda sfa, sfb: (_mn_major_exact(sfa), sfb),
    "sfa_k_major_nan_padded": lambda sfa, sfb: (_nan_padded(sfa.contiguous(), 3), sfb),
    "sfb_mn_major": lambda sfa, sfb: (sfa, _mn_major_exact(sfb)),
    "sfb_nan_padded": lambda sfa, sfb: (sfa, _nan_padded(sfb.contiguous(), 5)),
    "both_k_major": lambda sfa, sfb: (sfa.contiguous(), sfb.contiguous()),
}
LAYOUT_SHAPES = ((7, 2112, 7168), (100, 576, 320), (4097, 4096, 2048))


@pytest.mark.parametrize("layout", list(LAYOUTS) + ["d_row_padded"])
@pytest.mark.parametrize("m,n,k", LAYOUT_SHAPES, ids=[f"M{m}-N{n}-K{k}" for m, n, k in LAYOUT_SHAPES])
def test_1d2d_layouts_same_result(cuda, m, n, k, layout):
    _, _, (a_fp8, sfa), (b_fp8, sfb) = _inputs_1d2d(cuda, m, n, k, "layout")
    expected = poison_(torch.empty(m, n, dtype=torch.bfloat16, device=cuda))
    hopperkit.fp8_gemm_nt((a_fp8, sfa), (b_fp8, sfb), expected)
    if layout == "d_row_padded":
        buf = poison_(torch.empty(m, n + 64, dtype=torch.bfloat16, device=cuda))
        d = buf[:, :n]
        hopperkit.fp8_gemm_nt((a_fp8, sfa), (b_fp8, sfb), d)
        assert torch.isnan(buf[:, n:]).all(), "D's row padding was written"
    else:
        sfa_v, sfb_v = LAYOUTS[layout](sfa, sfb)
        d = poison_(torch.empty(m, n, dtype=torch.bfloat16, device=cuda))
        hopperkit.fp8_gemm_nt((a_fp8, sfa_v), (b_fp8, sfb_v), d)
    assert not torch.isnan(d).any(), f"{layout}: NaN in D"
    assert torch.equal(d, expected), f"{layout}: D differs from the TMA-aligned layout's (max abs diff " \
        f"{(d.float() - expected.float()).abs().max().item():.3g})"


@pytest.mark.parametrize("m,n,k", [(100, 2112, 7168), (7, 200, 320)], ids=["M100-N2112-K7168", "M7-N200-K320"])
def test_1d1d_layouts_same_result(cuda, m, n, k):
    gen = seeded_generator(cuda, "1d1d-layout", m, n, k)
    a_fp8, sfa = hopperkit.per_token_cast_to_fp8(block_scaled_randn(gen, m, k))
    b_fp8, sfb = hopperkit.per_token_cast_to_fp8(block_scaled_randn(gen, n, k))
    c = _randn(gen, m, n, dtype=torch.float32) * 32
    results = []
    for sa, sb in ((sfa, sfb), (sfa.contiguous(), sfb.contiguous()), (_nan_padded(sfa.contiguous(), 3), _mn_major_exact(sfb))):
        d = poison_(torch.empty(m, n, dtype=torch.float32, device=cuda))
        hopperkit.fp8_gemm_nt((a_fp8, sa), (b_fp8, sb), d, c=c, recipe=RECIPE_1D1D)
        assert not torch.isnan(d).any(), "1d1d: NaN in D"
        results.append(d)
    assert torch.equal(results[1], results[0]), "1d1d: K-major scales give a different D"
    assert torch.equal(results[2], results[0]), "1d1d: padded / unaligned scales give a different D"


# --------------------------------------------------------------------------------------------------
# repeatability: the same inputs give bitwise the same D, call after call
# --------------------------------------------------------------------------------------------------

REPEAT_SHAPES = ((4096, 7168, 2048, "1d2d"), (64, 7168, 16384, "1d2d"), (4097, 2112, 320, "1d2d"),
                 (128, 4096, 7168, "1d1d"))


@pytest.mark.parametrize("m,n,k,recipe", REPEAT_SHAPES, ids=[f"{r}-M{m}-N{n}-K{k}" for m, n, k, r in REPEAT_SHAPES])
def test_repeatable_bitwise(cuda, m, n, k, recipe):
    gen = seeded_generator(cuda, "repeat", m, n, k, recipe)
    a_fp8, sfa = hopperkit.per_token_cast_to_fp8(block_scaled_randn(gen, m, k))
    b = block_scaled_randn(gen, n, k, block_rows=128 if recipe == "1d2d" else 1)
    if recipe == "1d2d":
        b_fp8, sfb = hopperkit.per_block_cast_to_fp8(b)
        dtype, c, rec = torch.bfloat16, None, None
    else:
        b_fp8, sfb = hopperkit.per_token_cast_to_fp8(b)
        dtype, c, rec = torch.float32, _randn(gen, m, n, dtype=torch.float32) * 32, RECIPE_1D1D
    first = None
    for call in range(20):
        d = poison_(torch.empty(m, n, dtype=dtype, device=cuda))
        hopperkit.fp8_gemm_nt((a_fp8, sfa), (b_fp8, sfb), d, c=c, recipe=rec)
        if first is None:
            assert not torch.isnan(d).any(), "NaN in D"
            first = d
        else:
            assert torch.equal(d, first), f"call {call} differs from call 0 " \
                f"({int((d != first).sum())} elements)"


# (M, N, K, tile, forced splits, the splits of the cluster fixup on a 132-SM H200, 0: global). The
# `auto` fixup sums within a cluster where a tile's splits fit one (fp8_1d2d/launch.cuh
# splits_in_cluster, which may lower the count); `global` always goes through the workspace.
SPLIT_K_CASES = [
    (256, 4096, 7168, "128,128,1", 3, 2),  # several M blocks, uneven K split (56 blocks: 19 + 19 + 18)
    (64, 2112, 7168, "64,128,1", 16, 6),  # the most splits, a ragged N tile
    (7, 576, 320, "64,64,1", 3, 3),  # K not a multiple of 128, M far below the tile
    # The global fixup reads the partials in batches of 128 / (floats per thread) splits: a batch of
    # 4 with a tail of 2, of 4 with a tail of 1, and batches of one split (256-row tile).
    (64, 2112, 7168, "64,64,1", 6, 3),
    (100, 4096, 2048, "128,64,1", 5, 2),
    (256, 1024, 7168, "256,128,1", 2, 0),  # the 256-row tile has no cluster fixup
    (256, 2112, 7168, "128,256,1", 3, 0),  # nor the 256-column one; a last N block half past N
    (1, 64, 7168, "64,64,1", 8, 8),  # one tile
    (128, 576, 7168, "128,64,1", 4, 4),  # two math warpgroups
    (64, 576, 7168, "64,128,1", 5, 5),  # an odd count, a ragged N tile
]


@pytest.mark.parametrize("fixup", ["auto", "global"])
@pytest.mark.parametrize("m,n,k,config,splits,_", SPLIT_K_CASES)
def test_split_k_forced(cuda, monkeypatch, m, n, k, config, splits, _, fixup):
    """Split-K with its in-kernel fixup, forced on shapes the heuristic would tile differently."""
    monkeypatch.setenv("HOPPERKIT_FP8_GEMM_CONFIG", config)
    monkeypatch.setenv("HOPPERKIT_FP8_GEMM_SPLITS", str(splits))
    monkeypatch.setenv("HOPPERKIT_FP8_GEMM_SPLIT_FIXUP", fixup)
    a, b, (a_fp8, sfa), (b_fp8, sfb) = _inputs_1d2d(cuda, m, n, k, "split")
    ref = ref_gemm.fp8_gemm_nt(a_fp8, sfa, b_fp8, sfb, None, recipe=(1, 128, 128), out_dtype=torch.bfloat16)
    first = None
    for _ in range(3):
        d = poison_(torch.empty(m, n, dtype=torch.bfloat16, device=cuda))
        hopperkit.fp8_gemm_nt((a_fp8, sfa), (b_fp8, sfb), d)
        assert_fp8_gemm_close(f"split {m}x{n}x{k}/{splits}", d, a.float() @ b.float().T, ref)
        if first is None:
            first = d
        assert torch.equal(d, first), "split-K result changed between calls"


@pytest.mark.parametrize("m,n,k,config,splits,in_cluster", SPLIT_K_CASES)
def test_split_k_fixups_agree(cuda, monkeypatch, m, n, k, config, splits, in_cluster):
    """The cluster fixup adds the partials in the global fixup's order: the same bits as the global
    fixup run at the split count the cluster path takes (known for a 132-SM H200, see
    SPLIT_K_CASES; 0 = no cluster path, both run the forced count)."""
    if torch.cuda.get_device_properties(cuda).multi_processor_count != 132:
        pytest.skip("the cluster path's split counts in SPLIT_K_CASES are those of a 132-SM H200")
    monkeypatch.setenv("HOPPERKIT_FP8_GEMM_CONFIG", config)
    _, _, (a_fp8, sfa), (b_fp8, sfb) = _inputs_1d2d(cuda, m, n, k, "split fixups")
    out = {}
    for fixup, count in (("global", in_cluster or splits), ("auto", splits)):
        monkeypatch.setenv("HOPPERKIT_FP8_GEMM_SPLITS", str(count))
        monkeypatch.setenv("HOPPERKIT_FP8_GEMM_SPLIT_FIXUP", fixup)
        out[fixup] = poison_(torch.empty(m, n, dtype=torch.bfloat16, device=cuda))
        hopperkit.fp8_gemm_nt((a_fp8, sfa), (b_fp8, sfb), out[fixup])
    assert not torch.isnan(out["auto"]).any(), "NaN in D"
    assert torch.equal(out["global"], out["auto"]), "the two split-K fixups disagree"


def test_split_k_fixup_knob_must_parse(cuda, monkeypatch):
    monkeypatch.setenv("HOPPERKIT_FP8_GEMM_SPLITS", "4")
    monkeypatch.setenv("HOPPERKIT_FP8_GEMM_SPLIT_FIXUP", "dsmem")
    _, _, (a_fp8, sfa), (b_fp8, sfb) = _inputs_1d2d(cuda, 64, 576, 7168, "knob")
    with pytest.raises(ValueError, match="HOPPERKIT_FP8_GEMM_SPLIT_FIXUP"):
        hopperkit.fp8_gemm_nt((a_fp8, sfa), (b_fp8, sfb), torch.empty(64, 576, dtype=torch.bfloat16, device=cuda))


@pytest.mark.parametrize("var,value", [
    ("HOPPERKIT_FP8_GEMM_CONFIG", "128,128"),  # a field missing
    ("HOPPERKIT_FP8_GEMM_CONFIG", "128,128,1x"),  # a trailing character
    ("HOPPERKIT_FP8_GEMM_CONFIG", "128,128,1,1,1"),  # a field too many
    ("HOPPERKIT_FP8_GEMM_CONFIG", "128;128;1"),
    ("HOPPERKIT_FP8_GEMM_SPLITS", "0"),
    ("HOPPERKIT_FP8_GEMM_SPLITS", "4k"),
    ("HOPPERKIT_GEMM_B_HINT", "last"),
    ("HOPPERKIT_FP8_GEMM_A_MULTICAST", "yes"),
    ("HOPPERKIT_BF16_GEMM_CONFIG", "128,256,"),
    ("HOPPERKIT_BF16_GEMM_SPLITS", "0"),
    ("HOPPERKIT_BF16_GEMM_SPLITS", "2x"),
])
def test_tuning_knob_must_parse(cuda, monkeypatch, var, value):
    """A mistyped tuning knob is an error naming the variable, never a silently different
    configuration."""
    monkeypatch.setenv(var, value)
    m, n, k = 64, 256, 256
    if var.startswith("HOPPERKIT_BF16"):
        a = torch.randn(m, k, dtype=torch.bfloat16, device=cuda)
        b = torch.randn(n, k, dtype=torch.bfloat16, device=cuda)
        call = lambda: hopperkit.bf16_gemm_nt(a, b, torch.empty(m, n, dtype=torch.bfloat16, device=cuda))
    else:
        _, _, (a_fp8, sfa), (b_fp8, sfb) = _inputs_1d2d(cuda, m, n, k, "knob")
        call = lambda: hopperkit.fp8_gemm_nt((a_fp8, sfa), (b_fp8, sfb), torch.empty(m, n, dtype=torch.bfloat16, device=cuda))
    with pytest.raises(ValueError, match=var):
        call()


# (M, N, K): a split-K decode shape, a one-M-block shape without splits (both EVICT_FIRST by default),
# and a many-block one (normal by default).
B_HINT_SHAPES = ((64, 2112, 7168), (7, 24576, 1536), (4097, 2112, 320))


@pytest.mark.parametrize("m,n,k", B_HINT_SHAPES, ids=[f"M{m}-N{n}-K{k}" for m, n, k in B_HINT_SHAPES])
def test_b_cache_hint_changes_no_bit(cuda, monkeypatch, m, n, k):
    """B's L2 policy (HOPPERKIT_GEMM_B_HINT, chosen per shape by default) moves only where B's
    lines stay in L2: the same bits under either policy, and the reference's result."""
    a, b, (a_fp8, sfa), (b_fp8, sfb) = _inputs_1d2d(cuda, m, n, k, "b_hint")
    outs = {}
    for hint in ("normal", "first"):
        monkeypatch.setenv("HOPPERKIT_GEMM_B_HINT", hint)
        outs[hint] = poison_(torch.empty(m, n, dtype=torch.bfloat16, device=cuda))
        hopperkit.fp8_gemm_nt((a_fp8, sfa), (b_fp8, sfb), outs[hint])
    assert torch.equal(outs["normal"], outs["first"])
    reference = ref_gemm.fp8_gemm_nt(a_fp8, sfa, b_fp8, sfb, out_dtype=torch.float32)
    assert_fp8_gemm_close(f"B hint M={m} N={n} K={k}", outs["first"], a.float() @ b.float().t(), reference)


@pytest.mark.parametrize("fixup", ["auto", "global"])
def test_split_k_cuda_graph_replay(cuda, monkeypatch, fixup):
    """A captured split-K GEMM replays with one epoch: its tile counters must come back clean after
    every replay, also when the inputs change between replays."""
    m, n, k = 64, 2112, 7168
    monkeypatch.setenv("HOPPERKIT_FP8_GEMM_CONFIG", "64,64,1")
    monkeypatch.setenv("HOPPERKIT_FP8_GEMM_SPLITS", "4")
    monkeypatch.setenv("HOPPERKIT_FP8_GEMM_SPLIT_FIXUP", fixup)
    a, b, (a_fp8, sfa), (b_fp8, sfb) = _inputs_1d2d(cuda, m, n, k, "split graph")
    d = torch.empty(m, n, dtype=torch.bfloat16, device=cuda)
    a_in, sfa_in = a_fp8.clone(), sfa.clone()
    call = lambda: hopperkit.fp8_gemm_nt((a_in, sfa_in), (b_fp8, sfb), d)
    graph, _ = capture_graph(call)
    for replay in range(4):
        x = block_scaled_randn(seeded_generator(cuda, "split graph", replay), m, k)
        x_fp8, x_sf = hopperkit.per_token_cast_to_fp8(x)
        a_in.copy_(x_fp8)
        sfa_in.copy_(x_sf)
        d.fill_(float("nan"))
        graph.replay()
        ref = ref_gemm.fp8_gemm_nt(x_fp8, x_sf, b_fp8, sfb, None, recipe=(1, 128, 128), out_dtype=torch.bfloat16)
        assert_fp8_gemm_close(f"graph replay {replay}", d, x.float() @ b.float().T, ref)
