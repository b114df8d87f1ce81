"""GPU tests of the BF16 GEMMs on an SM90 device: ``bf16_gemm_nt`` and its nn/tn/tt aliases (every
majorness of A and B), ``m_grouped_bf16_gemm_nt_contiguous`` and ``m_grouped_bf16_gemm_nt_masked``.

Every case draws fresh seeded inputs, poisons D with NaN and checks ``calc_diff`` against
``hopperkit.reference.gemm`` (< 1e-5, the BF16 contract in DESIGN.md) and that no NaN is left.
Dense: DeepGEMM's M list × a sample of its (N, K) list; then each majorness × BF16/FP32 D × no C /
C / C aliasing D; every compiled tile × majorness (forced through HOPPERKIT_BF16_GEMM_CONFIG); split-K
forced (HOPPERKIT_BF16_GEMM_SPLITS) with each fixup (HOPPERKIT_BF16_GEMM_SPLIT_FIXUP) under each output
path, the two fixups bit-equal, and replayed in a CUDA graph; strided
operands (TMA-aligned ones run the kernel, unaligned ones the reference); awkward sizes (K not a
multiple of 64, N a multiple of 8 below a tile, odd N into a padded D). The op's own branches that
the Python API does not reach (K = 0, PDL) are called directly. Overlapping C and D are refused.
Grouped: NaN in A's padding rows must reach no valid row and D's padding rows must be exactly 0;
masked counts of 0 and below 64; a CUDA graph of the masked GEMM replayed with new masked_m; every
compiled tile of each grouped layout forced.

Cases meant to run the kernel forbid the reference fallback (conftest ``forbid_reference``): a
silent fallback would compare the reference with itself and pass. Runs in seconds on an H200 (the
FP32 references dominate).
"""

from __future__ import annotations

import random
import zlib

import pytest
import torch

import hopperkit
from hopperkit import _ops
from hopperkit.reference import gemm as ref_gemm
from hopperkit.testing import calc_diff, capture_graph, poison_, seeded_generator

pytestmark = pytest.mark.gpu

TOL = 1e-5
MS = (1, 7, 64, 128, 4096)
NKS = ((2112, 7168), (576, 7168), (24576, 1536), (7168, 2048), (4096, 7168))
ALIGN = 128


@pytest.fixture(scope="module", autouse=True)
def _sm90():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    if not _ops.use_kernel("bf16_gemm_nt", torch.device("cuda")):
        pytest.skip("the BF16 GEMM kernel needs an SM90 device and the built extension")


def _randn(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, device="cuda", dtype=torch.bfloat16)


def _operand(gen: torch.Generator, rows: int, k: int, major: str) -> torch.Tensor:
    """A [rows, K] operand, K-major ("k": rows contiguous) or MN-major ("mn": a transposed view)."""
    return _randn(gen, rows, k) if major == "k" else _randn(gen, k, rows).T


def _check(name: str, d: torch.Tensor, ref: torch.Tensor) -> None:
    assert not torch.isnan(d).any(), f"{name}: NaN left in D ({int(torch.isnan(d).sum())} elements unwritten?)"
    diff = calc_diff(d, ref)
    assert diff < TOL, f"{name}: calc_diff vs hopperkit.reference {diff:.3g} >= {TOL:g}"


def _run_dense(m, n, k, major_a="k", major_b="k", out=torch.bfloat16, c_mode="none", key=()):
    gen = seeded_generator("cuda", "dense", m, n, k, major_a, major_b, out, c_mode, *key)
    a = _operand(gen, m, k, major_a)
    b = _operand(gen, n, k, major_b)
    c = None if c_mode == "none" else _randn(gen, m, n).to(out)
    ref = ref_gemm.bf16_gemm_nt(a, b, c, out_dtype=out)
    if c_mode == "alias":
        d = c.clone()
        hopperkit.bf16_gemm_nt(a, b, d, c=d)
    else:
        d = poison_(torch.empty(m, n, dtype=out, device="cuda"))
        hopperkit.bf16_gemm_nt(a, b, d, c=c)
    _check(f"M={m} N={n} K={k} A {major_a}-major B {major_b}-major D {out} C {c_mode}", d, ref)


@pytest.mark.parametrize("n,k", NKS)
@pytest.mark.parametrize("m", MS)
def test_dense_nt(m, n, k, forbid_reference):
    forbid_reference("bf16_gemm_nt")
    _run_dense(m, n, k)


@pytest.mark.parametrize("c_mode", ["none", "c", "alias"])
@pytest.mark.parametrize("out", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("major_a,major_b", [("k", "k"), ("k", "mn"), ("mn", "k"), ("mn", "mn")])
@pytest.mark.parametrize("m,n,k", [(8, 2112, 1536), (200, 576, 1000), (1024, 4096, 2048)])
def test_dense_layouts(m, n, k, major_a, major_b, out, c_mode, forbid_reference):
    forbid_reference("bf16_gemm_nt")
    _run_dense(m, n, k, major_a, major_b, out, c_mode)


TILES = ((128, 256), (128, 128), (64, 256), (64, 128))
MAJORS = (("k", "k"), ("k", "mn"), ("mn", "k"), ("mn", "mn"))


@pytest.mark.parametrize("major_a,major_b", MAJORS, ids=[f"{a}-{b}" for a, b in MAJORS])
@pytest.mark.parametrize("block_m,block_n", TILES, ids=[f"{m}x{n}" for m, n in TILES])
def test_every_instantiation(block_m, block_n, major_a, major_b, monkeypatch, forbid_reference):
    """Each of the 16 compiled kernels (tile × majorness of A and B), forced per call through
    HOPPERKIT_BF16_GEMM_CONFIG, on a shape ragged against every tile (M = 200, N = 264, K = 200; all
    multiples of 8, so both majornesses are TMA-aligned and the kernel runs). BF16 D without C takes
    the TMA store, FP32 D with C the register store."""
    monkeypatch.setenv("HOPPERKIT_BF16_GEMM_CONFIG", f"{block_m},{block_n}")
    forbid_reference("bf16_gemm_nt")
    _run_dense(200, 264, 200, major_a, major_b, key=("tile", block_m, block_n))
    _run_dense(200, 264, 200, major_a, major_b, out=torch.float32, c_mode="c", key=("tile", block_m, block_n))


NARROW_TILE = (64, 64)


def test_narrow_tile(monkeypatch, forbid_reference):
    """The 64×64 tile (compiled for K-major A and B, the decode-sized M of the normal layout), forced,
    on the ragged shape of test_every_instantiation, both output paths."""
    monkeypatch.setenv("HOPPERKIT_BF16_GEMM_CONFIG", ",".join(map(str, NARROW_TILE)))
    forbid_reference("bf16_gemm_nt")
    _run_dense(200, 264, 200, key=("tile", *NARROW_TILE))
    _run_dense(200, 264, 200, out=torch.float32, c_mode="c", key=("tile", *NARROW_TILE))
    _run_dense(7, 2112, 7168, key=("tile", *NARROW_TILE))


# (M, N, K, forced tile, forced splits): the M block where M ends loads only its rows of A (a box of
# M % BLOCK_M rows rounded up to 8; the shared-memory rows past it hold stale data of earlier
# stages, which must reach no stored row). Persistent CTAs run several tiles where the grid is
# large (200×7168 on 64×64: 448 tiles), so the stale rows are other blocks' data.
A_TAIL_CASES = [
    (65, 576, 1000, "64,128", None),  # one row in the last block
    (1, 2112, 520, "64,128", None),  # the only block is the tail (8 rows)
    (72, 576, 1000, "64,64", None),  # a tail of exactly 8 rows
    (129, 576, 1000, "128,128", None),  # two math warpgroups, the second's rows all stale
    (200, 7168, 512, "64,64", None),  # several tiles per CTA
    (250, 2112, 704, "128,96", None),  # 122 rows in the last block: the full box (a 128-row tail box)
    (190, 576, 7168, "64,96", 3),  # split-K: every unit of the tail block
]


@pytest.mark.parametrize("out,c_mode", [(torch.bfloat16, "none"), (torch.float32, "c"), (torch.bfloat16, "alias")])
@pytest.mark.parametrize("m,n,k,config,splits", A_TAIL_CASES)
def test_last_m_block_loads_only_its_rows(m, n, k, config, splits, out, c_mode, monkeypatch, forbid_reference):
    monkeypatch.setenv("HOPPERKIT_BF16_GEMM_CONFIG", config)
    if splits is not None and c_mode == "none":
        monkeypatch.setenv("HOPPERKIT_BF16_GEMM_SPLITS", str(splits))
    forbid_reference("bf16_gemm_nt")
    _run_dense(m, n, k, out=out, c_mode=c_mode, key=("a tail", config, splits))


# The tiles whose widths tile N = 2112 and 576, or quantise mid-sized grids onto the SMs (compiled
# for K-major A and B, the normal layout). The 96-, 144- and 176-wide tiles store their last
# 64-column box (32-column for FP32 D at 144 and 176) overlapping the one before.
ODD_WIDTHS = ((128, 96), (128, 144), (128, 176), (128, 192), (64, 96), (64, 144), (64, 176))
ODD_WIDTH_IDS = [f"{m}x{n}" for m, n in ODD_WIDTHS]
ODD_WIDTH_CASES = ((200, 264, 200, torch.bfloat16, "none"), (200, 264, 200, torch.float32, "none"),
                   (200, 264, 200, torch.float32, "c"), (200, 264, 200, torch.float32, "alias"),
                   (200, 264, 200, torch.bfloat16, "alias"), (1000, 2112, 7168, torch.bfloat16, "none"),
                   (1000, 576, 1000, torch.bfloat16, "none"), (300, 2112, 520, torch.float32, "c"))


@pytest.mark.parametrize("m,n,k,out,c_mode", ODD_WIDTH_CASES,
                         ids=[f"M{m}-N{n}-K{k}-{str(o).split('.')[-1]}-C{c}" for m, n, k, o, c in ODD_WIDTH_CASES])
@pytest.mark.parametrize("block_m,block_n", ODD_WIDTHS, ids=ODD_WIDTH_IDS)
def test_odd_width_tiles(block_m, block_n, m, n, k, out, c_mode, monkeypatch, forbid_reference):
    """The tiles 96, 144, 176 and 192 columns wide, forced: a ragged last N block (264: the second
    block's overlapping box lies past N, wholly or in part) and M block (200, 300, 1000), each store
    path (BF16 and FP32 D by TMA stores of two or three staging boxes, FP32 D with C by TMA
    reduce-adds, whose overlapping box must not add its columns twice, BF16 D with C aliasing D from
    the registers), and N = 2112 and 576."""
    monkeypatch.setenv("HOPPERKIT_BF16_GEMM_CONFIG", f"{block_m},{block_n}")
    forbid_reference("bf16_gemm_nt")
    _run_dense(m, n, k, out=out, c_mode=c_mode, key=("tile", block_m, block_n))


@pytest.mark.parametrize("block_m,block_n", ODD_WIDTHS, ids=ODD_WIDTH_IDS)
def test_odd_width_tiles_keep_subnormal_c(block_m, block_n, monkeypatch, forbid_reference):
    """Under a zero product a subnormal C comes back unchanged in every column, those of the
    overlapping FP32 box (added into twice: the second add is of -0.0) included. An add of the
    product twice is caught by test_odd_width_tiles' FP32 cases with C."""
    monkeypatch.setenv("HOPPERKIT_BF16_GEMM_CONFIG", f"{block_m},{block_n}")
    forbid_reference("bf16_gemm_nt")
    for mode in ("alias", "separate"):
        _run_subnormal_c(2112, mode, "tile", block_m, block_n)


@pytest.mark.parametrize("block_m,block_n", ODD_WIDTHS, ids=ODD_WIDTH_IDS)
def test_odd_width_tiles_refused_where_not_compiled(block_m, block_n, monkeypatch):
    """An MN-major operand has no kernel of these widths: the forced tile is refused before any launch."""
    monkeypatch.setenv("HOPPERKIT_BF16_GEMM_CONFIG", f"{block_m},{block_n}")
    a = torch.randn(256, 512, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(512, 384, dtype=torch.bfloat16, device="cuda").t()  # MN-major
    d = torch.full((256, 384), float("nan"), dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match=f"no BF16 GEMM is compiled for BLOCK_M={block_m} BLOCK_N={block_n}.*"
                                         f"HOPPERKIT_BF16_GEMM_CONFIG={block_m},{block_n}.*"
                                         r'_gemm_instantiations\("bf16"\) lists the compiled ones'):
        hopperkit.bf16_gemm_nt(a, b, d)
    assert torch.isnan(d).all()


@pytest.mark.parametrize("major_b", ["k", "mn"])
@pytest.mark.parametrize("m", [128, 1000])
def test_b_cache_hint_changes_no_bit(monkeypatch, forbid_reference, m, major_b):
    """B's L2 policy (HOPPERKIT_GEMM_B_HINT; the BF16 GEMM's default is the normal one) moves only
    where B's lines stay in L2: the same bits under either policy, K- or MN-major B."""
    forbid_reference("bf16_gemm_nt")
    gen = seeded_generator("cuda", "b_hint", m, major_b)
    n, k = 1032, 640
    a, b = _randn(gen, m, k), _operand(gen, n, k, major_b)
    outs = {}
    for hint in ("normal", "first"):
        monkeypatch.setenv("HOPPERKIT_GEMM_B_HINT", hint)
        outs[hint] = poison_(torch.empty(m, n, dtype=torch.bfloat16, device="cuda"))
        hopperkit.bf16_gemm_nt(a, b, outs[hint])
    assert torch.equal(outs["normal"], outs["first"])
    _check(f"B hint M={m} B {major_b}-major", outs["first"], ref_gemm.bf16_gemm_nt(a, b, None))


# (M, N, K, tile, forced splits, splits within a cluster): split-K (the kSplitK instantiations) on
# shapes the heuristic would split differently or not at all. The last column is the count the
# launcher's fixup within a cluster takes on a 132-SM H200 (gemm/split_k_cluster.cuh
# splits_in_cluster: at most the forced count, 8, and what the stage ring receives, 4 for 128×128 and
# 7 for 64×128; clusters of 2, 3, 4 and 8 run 66, 39, 30 and 15 at once), 0 where none fits.
SPLIT_K_CASES = [
    (64, 2112, 7168, "64,128", 4, 4),  # a ragged N tile
    (64, 2112, 7168, "64,64", 4, 3),  # 33 clusters of 4 do not fit in 30
    (64, 576, 7168, "64,64", 8, 8),
    (1, 7168, 2048, "64,64", 2, 0),  # 112 tiles: 224 units do not fit in 132 SMs
    (128, 4096, 7168, "128,128", 3, 3),  # uneven: 112 K blocks as 38 + 38 + 36
    (1, 64, 7168, "64,128", 16, 7),  # one tile, N below the tile
    (200, 264, 1000, "128,128", 5, 4),  # several M blocks, K not a multiple of 64: 16 K blocks as 4 × 4
    (7, 576, 200, "64,128", 3, 2),  # 4 K blocks: 3 splits would leave one empty, so 2 run
    (512, 576, 7168, "64,96", 3, 2),  # 48 clusters of 3 do not fit in 39
    (200, 264, 1000, "64,96", 4, 4),  # ragged M and N blocks; the second store box overlaps the first
]


@pytest.mark.parametrize("fixup", ["auto", "global"])
@pytest.mark.parametrize("out,c_mode", [(torch.bfloat16, "none"), (torch.bfloat16, "c"), (torch.float32, "none")])
@pytest.mark.parametrize("m,n,k,config,splits,_", SPLIT_K_CASES)
def test_split_k_forced(m, n, k, config, splits, _, out, c_mode, fixup, monkeypatch, forbid_reference):
    """Split-K, forced, with either fixup (within a cluster where one fits, or through global memory)
    under each output path that it takes (BF16 and FP32 D through TMA; C read by the register
    store), the same bits every call."""
    monkeypatch.setenv("HOPPERKIT_BF16_GEMM_CONFIG", config)
    monkeypatch.setenv("HOPPERKIT_BF16_GEMM_SPLITS", str(splits))
    monkeypatch.setenv("HOPPERKIT_BF16_GEMM_SPLIT_FIXUP", fixup)
    forbid_reference("bf16_gemm_nt")
    gen = seeded_generator("cuda", "split", m, n, k, splits, out, c_mode)
    a, b = _randn(gen, m, k), _randn(gen, n, k)
    c = None if c_mode == "none" else _randn(gen, m, n).to(out)
    ref = ref_gemm.bf16_gemm_nt(a, b, c, out_dtype=out)
    first = None
    for _ in range(3):
        d = poison_(torch.empty(m, n, dtype=out, device="cuda"))
        hopperkit.bf16_gemm_nt(a, b, d, c=c)
        _check(f"split {m}x{n}x{k}/{splits} {fixup} D {out} C {c_mode}", d, ref)
        if first is None:
            first = d
        assert torch.equal(d, first), "split-K result changed between calls"


@pytest.mark.parametrize("m,n,k,config,splits,in_cluster", SPLIT_K_CASES)
def test_split_k_fixups_agree(m, n, k, config, splits, in_cluster, monkeypatch, forbid_reference):
    """The cluster fixup adds the partials in the global fixup's order: the same bits as the global
    fixup run at the split count the cluster path takes (known for a 132-SM H200, see
    SPLIT_K_CASES; 0 = no cluster path, both run the forced count)."""
    if torch.cuda.get_device_properties(0).multi_processor_count != 132:
        pytest.skip("the cluster path's split counts in SPLIT_K_CASES are those of a 132-SM H200")
    monkeypatch.setenv("HOPPERKIT_BF16_GEMM_CONFIG", config)
    forbid_reference("bf16_gemm_nt")
    gen = seeded_generator("cuda", "split fixups", m, n, k)
    a, b = _randn(gen, m, k), _randn(gen, n, k)
    out = {}
    for fixup, count in (("global", in_cluster or splits), ("auto", splits)):
        monkeypatch.setenv("HOPPERKIT_BF16_GEMM_SPLITS", str(count))
        monkeypatch.setenv("HOPPERKIT_BF16_GEMM_SPLIT_FIXUP", fixup)
        out[fixup] = poison_(torch.empty(m, n, dtype=torch.bfloat16, device="cuda"))
        hopperkit.bf16_gemm_nt(a, b, out[fixup])
    assert not torch.isnan(out["auto"]).any(), "NaN in D"
    assert torch.equal(out["global"], out["auto"]), "the two split-K fixups disagree"
    _check(f"split fixups {m}x{n}x{k}", out["auto"], ref_gemm.bf16_gemm_nt(a, b, None))


def test_split_k_fixup_knob_must_parse(monkeypatch):
    monkeypatch.setenv("HOPPERKIT_BF16_GEMM_SPLITS", "4")
    monkeypatch.setenv("HOPPERKIT_BF16_GEMM_SPLIT_FIXUP", "dsmem")
    gen = seeded_generator("cuda", "fixup knob")
    a, b = _randn(gen, 64, 7168), _randn(gen, 576, 7168)
    with pytest.raises(ValueError, match="HOPPERKIT_BF16_GEMM_SPLIT_FIXUP"):
        hopperkit.bf16_gemm_nt(a, b, torch.empty(64, 576, dtype=torch.bfloat16, device="cuda"))


def _check_into_strided_d(name: str, a: torch.Tensor, b: torch.Tensor, out: torch.dtype) -> None:
    """bf16_gemm_nt(a, b) twice into a strided D whose row padding is poisoned with NaN: every element
    of D against the reference, none of the padding written, the same bits both calls."""
    m, n = a.shape[0], b.shape[0]
    ref = ref_gemm.bf16_gemm_nt(a, b, None, out_dtype=out)
    first = None
    for _ in range(2):
        wide = poison_(torch.empty(m, n + 72, dtype=out, device="cuda"))
        d = wide[:, 8:8 + n]  # rows of n + 72 elements, 16-byte aligned
        hopperkit.bf16_gemm_nt(a, b, d)
        _check(name, d, ref)
        assert torch.isnan(wide[:, :8]).all() and torch.isnan(wide[:, 8 + n:]).all(), "wrote outside D"
        if first is None:
            first = d.clone()
        assert torch.equal(d, first), "result changed between calls"


# (M, N, K): the swapped decode GEMM (K-major, no C) at each of its heuristic's token widths: 8, 16
# and 32 at M ≤ 32, 32, 64 or 96 above where the swapped tiles split K (heuristics.h
# choose_bf16_swap_ab_config), M below and at each width and ragged last token blocks, ragged N (not
# a multiple of the 64 weight rows), K not a multiple of 64, and the heuristic's split and unsplit
# shapes.
SWAP_AB_CASES = [(1, 576, 7168), (2, 2112, 7168), (7, 264, 1000), (8, 7168, 2048), (9, 4096, 7168),
                 (16, 200, 136), (17, 576, 7168), (31, 1000, 2048), (32, 2112, 7168), (33, 576, 7168),
                 (64, 2112, 7168), (65, 1000, 7112), (100, 264, 7168), (128, 2112, 7168)]


@pytest.mark.parametrize("fixup", ["auto", "global"])
@pytest.mark.parametrize("out", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("m,n,k", SWAP_AB_CASES)
def test_swap_ab_decode(m, n, k, out, fixup, monkeypatch, forbid_reference):
    """The swapped decode GEMM writes D = A·Bᵀ transposed from its Dᵀ tiles: every element of D, and
    none of the row padding of a strided D (poisoned around it), the same bits every call."""
    monkeypatch.setenv("HOPPERKIT_BF16_GEMM_SPLIT_FIXUP", fixup)
    forbid_reference("bf16_gemm_nt")
    gen = seeded_generator("cuda", "swap", m, n, k, out)
    a, b = _randn(gen, m, k), _randn(gen, n, k)
    _check_into_strided_d(f"swap {m}x{n}x{k} {fixup} D {out}", a, b, out)


# (M, N, K, forced splits): counts whose clusters fit on a 132-SM H200 (30 clusters of 4, 39 of 3,
# 15 of 8 at once), so both fixups run the same count.
SWAP_AB_SPLIT_CASES = [(1, 576, 7168, 8), (1, 2112, 7168, 3), (17, 576, 7168, 4), (32, 264, 1000, 4)]


@pytest.mark.parametrize("m,n,k,splits", SWAP_AB_SPLIT_CASES)
def test_swap_ab_split_fixups_agree(m, n, k, splits, monkeypatch, forbid_reference):
    """The swapped GEMM's forced split count under both fixups: the same bits, and the reference's
    result."""
    if torch.cuda.get_device_properties(0).multi_processor_count != 132:
        pytest.skip("the cluster counts of SWAP_AB_SPLIT_CASES are those of a 132-SM H200")
    monkeypatch.setenv("HOPPERKIT_BF16_GEMM_SPLITS", str(splits))
    forbid_reference("bf16_gemm_nt")
    gen = seeded_generator("cuda", "swap split", m, n, k)
    a, b = _randn(gen, m, k), _randn(gen, n, k)
    out = {}
    for fixup in ("auto", "global"):
        monkeypatch.setenv("HOPPERKIT_BF16_GEMM_SPLIT_FIXUP", fixup)
        out[fixup] = poison_(torch.empty(m, n, dtype=torch.bfloat16, device="cuda"))
        hopperkit.bf16_gemm_nt(a, b, out[fixup])
    _check(f"swap split {m}x{n}x{k}/{splits}", out["auto"], ref_gemm.bf16_gemm_nt(a, b, None))
    assert torch.equal(out["global"], out["auto"]), "the two split-K fixups disagree"


# (tokens, M, N, K): every compiled token width forced through the knob, at M below, at and above
# it (several token blocks, the last one ragged), split and unsplit.
SWAP_AB_FORCED_CASES = [(8, 100, 576, 7168), (16, 40, 264, 1000), (32, 64, 2112, 7168), (32, 128, 264, 1000),
                        (64, 1, 1000, 2048), (64, 130, 576, 7168), (64, 200, 7168, 2048), (96, 40, 2112, 7168),
                        (96, 96, 1000, 2048), (96, 200, 576, 7168)]


@pytest.mark.parametrize("tokens,m,n,k", SWAP_AB_FORCED_CASES)
def test_swap_ab_forced_width(tokens, m, n, k, monkeypatch, forbid_reference):
    """HOPPERKIT_BF16_GEMM_SWAP_AB=<tokens> runs the swapped kernel of that width at any M: every
    element of D, none of a strided D's poisoned padding, the same bits every call."""
    monkeypatch.setenv("HOPPERKIT_BF16_GEMM_SWAP_AB", str(tokens))
    forbid_reference("bf16_gemm_nt")
    gen = seeded_generator("cuda", "swap forced", tokens, m, n, k)
    a, b = _randn(gen, m, k), _randn(gen, n, k)
    _check_into_strided_d(f"swap {tokens} tokens {m}x{n}x{k}", a, b, torch.bfloat16)


def test_swap_ab_knob(monkeypatch, forbid_reference):
    """HOPPERKIT_BF16_GEMM_SWAP_AB=off runs the normal kernels on a shape the swapped one takes (the
    same function), and a mistyped value is an error naming the variable."""
    forbid_reference("bf16_gemm_nt")
    gen = seeded_generator("cuda", "swap knob")
    a, b = _randn(gen, 4, 2048), _randn(gen, 576, 2048)
    ref = ref_gemm.bf16_gemm_nt(a, b, None)
    monkeypatch.setenv("HOPPERKIT_BF16_GEMM_SWAP_AB", "off")
    d = poison_(torch.empty(4, 576, dtype=torch.bfloat16, device="cuda"))
    hopperkit.bf16_gemm_nt(a, b, d)
    _check("swap off", d, ref)
    for bad in ("on", "48", "128", "16,32"):
        monkeypatch.setenv("HOPPERKIT_BF16_GEMM_SWAP_AB", bad)
        with pytest.raises(ValueError, match="HOPPERKIT_BF16_GEMM_SWAP_AB"):
            hopperkit.bf16_gemm_nt(a, b, d)


@pytest.mark.parametrize("fixup", ["auto", "global"])
def test_split_k_cuda_graph_replay(fixup, monkeypatch, forbid_reference):
    """A captured split-K GEMM replays with one epoch: its flags (global fixup) must come back clean
    after every replay, also when the inputs change between replays."""
    monkeypatch.setenv("HOPPERKIT_BF16_GEMM_CONFIG", "64,128")
    monkeypatch.setenv("HOPPERKIT_BF16_GEMM_SPLITS", "4")
    monkeypatch.setenv("HOPPERKIT_BF16_GEMM_SPLIT_FIXUP", fixup)
    forbid_reference("bf16_gemm_nt")
    m, n, k = 64, 2112, 7168
    gen = seeded_generator("cuda", "split graph")
    a, b = _randn(gen, m, k), _randn(gen, n, k)
    d = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    graph, _ = capture_graph(lambda: hopperkit.bf16_gemm_nt(a, b, d))
    for replay in range(4):
        a.copy_(_randn(seeded_generator("cuda", "split graph", replay), m, k))
        d.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _check(f"split graph replay {replay}", d, ref_gemm.bf16_gemm_nt(a, b, None))


@pytest.mark.parametrize("out,c_mode", [(torch.float32, "c"), (torch.float32, "alias"), (torch.bfloat16, "alias")])
def test_split_k_only_where_the_store_is_idempotent(out, c_mode, monkeypatch, forbid_reference):
    """Two units may both complete a tile, so split-K never runs where D is added into (FP32 D with C)
    or C aliases D: the heuristic does not split such a call (the result is right on a shape it splits
    otherwise), and a forced count is refused."""
    forbid_reference("bf16_gemm_nt")
    m, n, k = 64, 2112, 7168
    gen = seeded_generator("cuda", "split store", out, c_mode)
    a, b, c = _randn(gen, m, k), _randn(gen, n, k), _randn(gen, m, n).to(out)
    ref = ref_gemm.bf16_gemm_nt(a, b, c, out_dtype=out)
    d = c.clone() if c_mode == "alias" else poison_(torch.empty(m, n, dtype=out, device="cuda"))
    hopperkit.bf16_gemm_nt(a, b, d, c=d if c_mode == "alias" else c)
    _check(f"split store D {out} C {c_mode}", d, ref)
    monkeypatch.setenv("HOPPERKIT_BF16_GEMM_SPLITS", "4")
    before = d.clone()
    with pytest.raises(ValueError, match="HOPPERKIT_BF16_GEMM_SPLITS"):
        hopperkit.bf16_gemm_nt(a, b, d, c=d if c_mode == "alias" else c)
    # Refused before anything is written: with FP32 D and another C, C is copied into D only then.
    assert torch.equal(d.isnan(), before.isnan()) and torch.equal(d.nan_to_num(), before.nan_to_num())


@pytest.mark.parametrize("config,major_b", [("128,256", "k"), ("64,128", "mn")])
def test_split_k_needs_a_compiled_kernel(config, major_b, monkeypatch):
    """A forced split count for a tile or majorness without split-K instantiations is refused."""
    monkeypatch.setenv("HOPPERKIT_BF16_GEMM_CONFIG", config)
    monkeypatch.setenv("HOPPERKIT_BF16_GEMM_SPLITS", "2")
    gen = seeded_generator("cuda", "split refused", config, major_b)
    a, b = _randn(gen, 64, 1024), _operand(gen, 512, 1024, major_b)
    with pytest.raises(ValueError, match="split-K into 2.*HOPPERKIT_BF16_GEMM_SPLITS=2"):
        hopperkit.bf16_gemm_nt(a, b, torch.empty(64, 512, dtype=torch.bfloat16, device="cuda"))


def test_aliases_are_views(forbid_reference):
    """nn/tn/tt pass transposed views: the same result as nt on copies."""
    forbid_reference("bf16_gemm_nt")
    gen = seeded_generator("cuda", "aliases")
    m, n, k = 304, 512, 320
    a, b = _randn(gen, m, k), _randn(gen, n, k)
    want = ref_gemm.bf16_gemm_nt(a, b, None)
    for name, call in (
        ("nt", lambda d: hopperkit.bf16_gemm_nt(a, b, d)),
        ("nn", lambda d: hopperkit.bf16_gemm_nn(a, b.T.contiguous(), d)),
        ("tn", lambda d: hopperkit.bf16_gemm_tn(a.T.contiguous(), b, d)),
        ("tt", lambda d: hopperkit.bf16_gemm_tt(a.T.contiguous(), b.T.contiguous(), d)),
    ):
        d = poison_(torch.empty(m, n, dtype=torch.bfloat16, device="cuda"))
        call(d)
        _check(name, d, want)


# (M, N, K, kernel): K = 100 (K-major) and M = 65 (MN-major) break TMA's 16-byte stride rule, so that
# case runs the reference path; every other one must run the kernel.
EDGE = ((1, 8, 8, True), (72, 24, 136, True), (136, 136, 72, True), (200, 264, 4104, True), (64, 8, 7168, True),
        (65, 40, 100, False))


@pytest.mark.parametrize("m,n,k,kernel", EDGE, ids=[f"M{m}-N{n}-K{k}" for m, n, k, _ in EDGE])
@pytest.mark.parametrize("major_a,major_b", [("k", "k"), ("mn", "mn")])
def test_edge_sizes(m, n, k, kernel, major_a, major_b, forbid_reference):
    if kernel:
        forbid_reference("bf16_gemm_nt")
    _run_dense(m, n, k, major_a, major_b, key=("edge",))
    _run_dense(m, n, k, major_a, major_b, out=torch.float32, c_mode="alias", key=("edge",))


def test_odd_n_into_padded_d(forbid_reference):
    """N = 7 (B K-major, D a view of 8-wide rows): the last column pair is cut by N."""
    forbid_reference("bf16_gemm_nt")
    gen = seeded_generator("cuda", "odd_n")
    a, b = _randn(gen, 130, 200), _randn(gen, 7, 200)
    for out in (torch.bfloat16, torch.float32):
        full = poison_(torch.empty(130, 8, dtype=out, device="cuda"))
        hopperkit.bf16_gemm_nt(a, b, full[:, :7])
        _check(f"N=7 {out}", full[:, :7], ref_gemm.bf16_gemm_nt(a, b, None, out_dtype=out))
        assert torch.isnan(full[:, 7]).all(), "the column past N was written"
    # FP32 D holding C (added into by reductions; TMA cannot clip 7 columns exactly), C = D and C separate.
    c = _randn(gen, 130, 8).float()[:, :7]  # rows 16-byte aligned, as D's
    want = ref_gemm.bf16_gemm_nt(a, b, c, out_dtype=torch.float32)
    for mode in ("alias", "separate"):
        full = poison_(torch.empty(130, 8, dtype=torch.float32, device="cuda"))
        if mode == "alias":
            full[:, :7] = c
        hopperkit.bf16_gemm_nt(a, b, full[:, :7], c=full[:, :7] if mode == "alias" else c)
        _check(f"N=7 FP32 C {mode}", full[:, :7], want)
        assert torch.isnan(full[:, 7]).all(), "the column past N was written"


def _run_subnormal_c(n: int, mode: str, *key) -> torch.Generator:
    """FP32 D = C + A·Bᵀ (M = 256, K = 320) with C aliasing D or separate, A's first 64 rows zero and
    C subnormal there: those rows of D must come back as C exactly, the rest within the contract.
    Returns the case's generator for more draws."""
    gen = seeded_generator("cuda", "subnormal", mode, *key)
    a, b = _randn(gen, 256, 320), _randn(gen, n, 320)
    a[:64] = 0  # rows whose product is exactly 0
    c = _randn(gen, 256, n).float()
    c[:64] = 1e-40 * torch.sign(c[:64])
    d = c.clone() if mode == "alias" else poison_(torch.empty_like(c))
    hopperkit.bf16_gemm_nt(a, b, d, c=d if mode == "alias" else c)
    assert torch.equal(d[:64], c[:64]), f"N={n} {key}: subnormal C under a zero product must be kept"
    _check(f"N={n} {key} subnormal C {mode}", d, ref_gemm.bf16_gemm_nt(a, b, c, out_dtype=torch.float32))
    return gen


@pytest.mark.parametrize("mode", ["alias", "separate"])
def test_fp32_accumulation_keeps_subnormal_c(mode, forbid_reference):
    """FP32 D = C + A·Bᵀ through the TMA reduction keeps IEEE semantics: under a zero product a
    subnormal C comes back unchanged (red.global.add.f32 would flush it to 0)."""
    forbid_reference("bf16_gemm_nt")
    forbid_reference("k_grouped_bf16_gemm_tn_contiguous")
    gen = _run_subnormal_c(264, mode)
    ks = [128, 256]
    ak, bk = _randn(gen, sum(ks), 200), _randn(gen, sum(ks), 264)
    ak[:, :64] = 0
    ck = _randn(gen, 2, 200, 264).float()
    ck[:, :64] = 1e-40
    dk = ck.clone() if mode == "alias" else poison_(torch.empty_like(ck))
    hopperkit.k_grouped_bf16_gemm_tn_contiguous(ak, bk, dk, ks, torch.tensor(ks, dtype=torch.int32, device="cuda"),
                                                c=dk if mode == "alias" else ck)
    assert torch.equal(dk[:, :64], ck[:, :64]), "k-grouped: subnormal C under a zero product must be kept"
    _check_k_grouped(f"k-grouped subnormal C {mode}", dk, ak, bk, ks, ck)


@pytest.mark.parametrize("pad", [8, 64, 3])
@pytest.mark.parametrize("major", ["k", "mn"])
def test_strided_operands(major, pad, forbid_reference):
    """Operands inside larger buffers, rows padded by `pad` elements: M, N, K are multiples of 8, so
    pads of 8 and 64 keep every stride TMA-aligned and must run the kernel; a pad of 3 breaks TMA's
    16-byte stride rule (K + 3 for K-major rows, M + 3 and N + 3 for MN-major ones) and runs the
    reference."""
    if pad % 8 == 0:
        forbid_reference("bf16_gemm_nt")
    gen = seeded_generator("cuda", "strided", major, pad)
    m, n, k = 264, 384, 520
    if major == "k":
        a = _randn(gen, m, k + pad)[:, :k]
        b = _randn(gen, n, k + pad)[:, :k]
    else:
        a = _randn(gen, k, m + pad)[:, :m].T
        b = _randn(gen, k, n + pad)[:, :n].T
    c = _randn(gen, m, n + 8)[:, :n]
    d = poison_(torch.empty(m, n + 16, dtype=torch.bfloat16, device="cuda"))[:, :n]
    hopperkit.bf16_gemm_nt(a, b, d, c=c)
    _check(f"{major}-major pad {pad}", d, ref_gemm.bf16_gemm_nt(a, b, c))


def test_k_zero_and_empty():
    a = torch.empty(5, 0, dtype=torch.bfloat16, device="cuda")
    b = torch.empty(16, 0, dtype=torch.bfloat16, device="cuda")
    c = torch.randn(5, 16, device="cuda")
    d = poison_(torch.empty(5, 16, device="cuda"))
    hopperkit.bf16_gemm_nt(a, b, d, c=c)
    assert torch.equal(d, c)
    d = poison_(torch.empty(5, 16, dtype=torch.bfloat16, device="cuda"))
    hopperkit.bf16_gemm_nt(a, b, d)
    assert torch.equal(d, torch.zeros_like(d))
    hopperkit.bf16_gemm_nt(a[:0], b, d[:0])  # M = 0: nothing to do


def _k_major_empty(rows: int) -> torch.Tensor:
    """[rows, 0] bf16 as a view of 16-byte rows (a bare empty(rows, 0) has row stride 1, which TMA's
    stride rule refuses)."""
    return torch.empty(rows, 8, dtype=torch.bfloat16, device="cuda")[:, :0]


@pytest.mark.parametrize("out", [torch.bfloat16, torch.float32])
def test_op_k_zero(out):
    """The op's own K = 0 branch (the Python API answers K = 0 itself): D = 0 without C, D = C with a
    separate C, D unchanged when C is D."""
    gen = seeded_generator("cuda", "op_k0", out)
    a, b = _k_major_empty(40), _k_major_empty(24)
    op = torch.ops.hopperkit.bf16_gemm
    sms = hopperkit.get_num_sms()
    d = poison_(torch.empty(40, 24, dtype=out, device="cuda"))
    op(a, b, d, None, sms, False)
    assert torch.equal(d, torch.zeros_like(d)), "K = 0 without C must give D = 0"
    c = _randn(gen, 40, 24).to(out)
    d = poison_(torch.empty(40, 24, dtype=out, device="cuda"))
    op(a, b, d, c, sms, False)
    assert torch.equal(d, c), "K = 0 with C must give D = C"
    d = c.clone()
    op(a, b, d, d, sms, False)
    assert torch.equal(d, c), "K = 0 with C = D must leave D as it is"


@pytest.mark.parametrize("out,c_mode", [(torch.bfloat16, "none"), (torch.float32, "c")])
def test_op_pdl(out, c_mode):
    """pdl=True (programmatic dependent launch: the kernel waits for its predecessor in the stream)."""
    gen = seeded_generator("cuda", "op_pdl", out, c_mode)
    m, n, k = 136, 264, 520
    a, b = _randn(gen, m, k), _randn(gen, n, k)
    c = None if c_mode == "none" else _randn(gen, m, n).to(out)
    d = poison_(torch.empty(m, n, dtype=out, device="cuda"))
    torch.ops.hopperkit.bf16_gemm(a, b, d, c, hopperkit.get_num_sms(), True)
    _check(f"pdl D {out} C {c_mode}", d, ref_gemm.bf16_gemm_nt(a, b, c, out_dtype=out))


def test_c_overlapping_d_is_refused(forbid_reference):
    """C must be D itself or share no memory with D (the epilogue reads C(r, c) and writes D(r, c) in
    one thread); the op and the Python API both refuse a partial overlap, naming c."""
    gen = seeded_generator("cuda", "c_overlap")
    m, n, k = 64, 128, 256
    a, b = _randn(gen, m, k), _randn(gen, n, k)
    buf = _randn(gen, m + 1, n)
    d, c_shifted = buf[:m], buf[1:]  # C(r, c) is D(r + 1, c)
    wide = _randn(gen, m, 2 * n)
    d_wide = wide.view(-1)[: m * n].view(m, n)  # the first m/2 rows of wide, read as m rows of n
    c_other_strides = wide[:, :n]  # D's address, row stride 2n
    op = torch.ops.hopperkit.bf16_gemm
    sms = hopperkit.get_num_sms()
    for name, dd, cc in (("shifted by a row", d, c_shifted), ("same address, other strides", d_wide, c_other_strides)):
        before = dd.clone()
        with pytest.raises(ValueError, match="hopperkit: c must be d itself"):
            op(a, b, dd, cc, sms, False)
        with pytest.raises(ValueError, match="hopperkit: c must be d itself"):
            hopperkit.bf16_gemm_nt(a, b, dd, c=cc)
        assert torch.equal(dd, before), f"{name}: a refused call wrote D"
    # Disjoint halves of one buffer are separate tensors: accepted, and the kernel runs.
    forbid_reference("bf16_gemm_nt")
    halves = _randn(gen, 2 * m, n)
    c, d = halves[:m], halves[m:]
    want = ref_gemm.bf16_gemm_nt(a, b, c)
    d.fill_(float("nan"))
    hopperkit.bf16_gemm_nt(a, b, d, c=c)
    _check("C and D halves of one buffer", d, want)


def test_repeatable(forbid_reference):
    forbid_reference("bf16_gemm_nt")
    gen = seeded_generator("cuda", "repeat")
    a, b = _randn(gen, 1000, 2048), _randn(gen, 3000, 2048)
    d0 = torch.empty(1000, 3000, dtype=torch.bfloat16, device="cuda")
    hopperkit.bf16_gemm_nt(a, b, d0)
    for _ in range(3):
        d = poison_(torch.empty_like(d0))
        hopperkit.bf16_gemm_nt(a, b, d)
        assert torch.equal(d, d0)


def test_opcheck():
    gen = seeded_generator("cuda", "opcheck")
    a, b = _randn(gen, 64, 128), _randn(gen, 256, 128)
    d = torch.empty(64, 256, dtype=torch.float32, device="cuda")
    c = torch.randn(64, 256, device="cuda")
    torch.library.opcheck(torch.ops.hopperkit.bf16_gemm.default, (a, b, d, c, 132, False))


# --------------------------------------------------------------------------------------------------
# m-grouped
# --------------------------------------------------------------------------------------------------


def _contiguous_case(g: int, expected: int, n: int, k: int):
    gen = seeded_generator("cuda", "contiguous", g, expected, n, k)
    rnd = random.Random(zlib.crc32(repr(("c", g, expected, n, k)).encode()))
    counts = [int(expected * rnd.uniform(0.7, 1.3)) for _ in range(g)]
    if g > 2:
        counts[1] = 0  # an empty expert
        counts[2] = min(counts[2], 37)  # fewer rows than a tile
    starts, m = [], 0
    for c in counts:
        starts.append(m)
        m += -(-c // ALIGN) * ALIGN
    m_indices = torch.full((m,), -1, dtype=torch.int32)
    for e, (s, c) in enumerate(zip(starts, counts)):
        m_indices[s : s + c] = e
    m_indices = m_indices.cuda()
    a = _randn(gen, m, k)
    b = _randn(gen, g, n, k)
    pad = m_indices == -1
    a[pad] = float("nan")  # garbage in padding rows
    d = poison_(torch.empty(m, n, dtype=torch.bfloat16, device="cuda"))
    hopperkit.m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices)
    return d, a, b, m_indices, pad


@pytest.mark.parametrize("g,expected,n,k", [(4, 300, 4096, 2048), (8, 130, 2112, 7168), (5, 200, 576, 320)])
def test_contiguous(g, expected, n, k, forbid_reference):
    forbid_reference("m_grouped_bf16_gemm_nt_contiguous")
    d, a, b, m_indices, pad = _contiguous_case(g, expected, n, k)
    assert torch.equal(d[pad], torch.zeros_like(d[pad])), "padding rows of D must be 0"
    ref = ref_gemm.m_grouped_bf16_gemm_nt_contiguous(a, b, m_indices)
    _check("valid rows", d[~pad], ref[~pad])


CONTIGUOUS_TILES = TILES + ODD_WIDTHS + (NARROW_TILE,)


@pytest.mark.parametrize("block_m,block_n", CONTIGUOUS_TILES, ids=[f"{m}x{n}" for m, n in CONTIGUOUS_TILES])
def test_contiguous_every_tile(block_m, block_n, monkeypatch, forbid_reference):
    """Every tile that the contiguous layout's kernels are compiled with (those of the normal layout's
    K-major operands), forced: the heuristic picks only the four of every majorness, the knob takes
    any. Segments of 210-390 rows padded to 128 (NaN in the padding rows of A), an empty expert and one
    of 37 rows, N ragged against every tile width."""
    forbid_reference("m_grouped_bf16_gemm_nt_contiguous")
    monkeypatch.setenv("HOPPERKIT_BF16_GEMM_CONFIG", f"{block_m},{block_n}")
    d, a, b, m_indices, pad = _contiguous_case(5, 300, 264, 320)
    assert torch.equal(d[pad], torch.zeros_like(d[pad])), "padding rows of D must be 0"
    ref = ref_gemm.m_grouped_bf16_gemm_nt_contiguous(a, b, m_indices)
    _check(f"valid rows, {block_m}x{block_n}", d[~pad], ref[~pad])


def _masked_case(g, m_max, n, k, counts, seed=0):
    gen = seeded_generator("cuda", "masked", g, m_max, n, k, seed)
    a = _randn(gen, g, m_max, k)
    b = _randn(gen, g, n, k)
    masked_m = torch.tensor(counts, dtype=torch.int32, device="cuda")
    dead = torch.arange(m_max, device="cuda")[None, :] >= masked_m[:, None].long()
    a[dead] = float("nan")
    return a, b, masked_m, dead


def _check_masked(d, a, b, masked_m, dead):
    # D NaN-poisoned before the call: rows at or past masked_m are 0 where they share a tile with
    # valid rows and untouched from the next 128-row boundary (the largest BLOCK_M) on.
    dead_vals = d[dead]
    assert bool(((dead_vals == 0) | torch.isnan(dead_vals)).all()), "rows at or past masked_m must be 0 or untouched"
    rows = torch.arange(d.shape[1], device=d.device)[None, :]
    beyond = rows >= ((masked_m.to(d.device)[:, None].long() + 127) // 128 * 128)
    assert bool(torch.isnan(d[beyond]).all()), "blocks without valid rows must not be written"
    ref = ref_gemm.m_grouped_bf16_gemm_nt_masked(a, b, masked_m)
    if (~dead).any():
        _check("valid rows", d[~dead], ref[~dead])


@pytest.mark.parametrize("g,expected,n,k", [(6, 20, 4096, 2048), (8, 128, 4096, 7168), (4, 300, 576, 1000)])
def test_masked(g, expected, n, k, forbid_reference):
    forbid_reference("m_grouped_bf16_gemm_nt_masked")
    rnd = random.Random(zlib.crc32(repr(("m", g, expected, n, k)).encode()))
    counts = [int(expected * rnd.uniform(0.7, 1.3)) for _ in range(g)]
    counts[0] = 0
    counts[1] = min(counts[1], 37)
    m_max = max(counts) + 19
    a, b, masked_m, dead = _masked_case(g, m_max, n, k, counts)
    d = poison_(torch.empty(g, m_max, n, dtype=torch.bfloat16, device="cuda"))
    hopperkit.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected)
    _check_masked(d, a, b, masked_m, dead)


@pytest.mark.parametrize("block_m,block_n", TILES, ids=[f"{m}x{n}" for m, n in TILES])
def test_masked_large_m_max_few_rows(block_m, block_n, monkeypatch, forbid_reference):
    """A capture sized for the worst case: M_max = 4096 with a few rows per group (DeepGEMM's test
    setting), on every compiled masked tile. Only the blocks with valid rows are scheduled (group by
    group): every group's result, and nothing written from the first 128-row boundary past masked_m on."""
    forbid_reference("m_grouped_bf16_gemm_nt_masked")
    monkeypatch.setenv("HOPPERKIT_BF16_GEMM_CONFIG", f"{block_m},{block_n}")
    g, m_max, n, k = 10, 4096, 520, 200
    counts = [0, 1, 17, 64, 65, 130, 255, 3, 2100, 4096]  # the last two span more than one band of M blocks
    a, b, masked_m, dead = _masked_case(g, m_max, n, k, counts, seed=5)
    d = poison_(torch.empty(g, m_max, n, dtype=torch.bfloat16, device="cuda"))
    hopperkit.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, 64)
    _check_masked(d, a, b, masked_m, dead)


def test_masked_cuda_graph_replay(forbid_reference):
    """One capture serves any counts: masked_m is read on the device."""
    forbid_reference("m_grouped_bf16_gemm_nt_masked")
    g, m_max, n, k = 8, 160, 2048, 1024
    a, b, masked_m, _ = _masked_case(g, m_max, n, k, [m_max] * g, seed=1)
    d = torch.empty(g, m_max, n, dtype=torch.bfloat16, device="cuda")
    call = lambda: hopperkit.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, 128)
    graph, _ = capture_graph(call)
    for counts in ([160] * 8, [0, 1, 63, 64, 65, 127, 128, 159], [5, 0, 0, 150, 0, 33, 99, 0]):
        masked_m.copy_(torch.tensor(counts, dtype=torch.int32))
        d.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        dead = torch.arange(m_max, device="cuda")[None, :] >= masked_m[:, None].long()
        _check_masked(d, a, b, masked_m, dead)


# --------------------------------------------------------------------------------------------------
# bad input: the op itself rejects what its kernel cannot read, naming the argument
# --------------------------------------------------------------------------------------------------


def test_op_rejects_bad_input():
    gen = seeded_generator("cuda", "bad")
    a, b = _randn(gen, 64, 128), _randn(gen, 256, 128)
    d = torch.empty(64, 256, dtype=torch.bfloat16, device="cuda")
    op = torch.ops.hopperkit.bf16_gemm
    with pytest.raises(ValueError, match="a must be K-major"):
        op(_randn(gen, 64, 131)[:, :128], b, d, None, 132)
    with pytest.raises(ValueError, match="b must be"):
        op(a, _randn(gen, 256, 64), d, None, 132)
    with pytest.raises(ValueError, match="d must be a row-major"):
        op(a, b, d.T.contiguous().T, None, 132)
    with pytest.raises(TypeError, match="c must have d's dtype"):
        op(a, b, d, torch.zeros(64, 256, device="cuda"), 132)
    with pytest.raises(ValueError, match="num_sms"):
        op(a, b, d, None, 0)
    # Outputs whose elements overlap (each element is stored by one thread): an expand()-ed D, rows
    # closer than N elements, masked groups closer than a group of rows.
    with pytest.raises(ValueError, match="d must not overlap itself"):
        op(a, b, torch.empty(1, 256, dtype=torch.bfloat16, device="cuda").expand(64, 256), None, 132)
    with pytest.raises(ValueError, match="d must not overlap itself"):
        op(a, b, torch.empty(64 * 128 + 128, dtype=torch.bfloat16, device="cuda").as_strided((64, 256), (128, 1)), None, 132)
    contiguous = torch.ops.hopperkit.m_grouped_bf16_gemm_nt_contiguous
    with pytest.raises(ValueError, match="d must not overlap itself"):
        contiguous(a, b.view(1, 256, 128), d[:1].expand(64, 256), torch.zeros(64, dtype=torch.int32, device="cuda"), 132)
    masked = torch.ops.hopperkit.m_grouped_bf16_gemm_nt_masked
    a3, b3 = _randn(gen, 2, 64, 128), _randn(gen, 2, 256, 128)
    d3 = torch.empty(2, 64, 256, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="masked_m"):
        masked(a3, b3, d3, torch.zeros(3, dtype=torch.int32, device="cuda"), 64, 132)
    with pytest.raises(ValueError, match="d must not overlap itself"):
        masked(a3, b3, d3[:1].expand(2, 64, 256), torch.zeros(2, dtype=torch.int32, device="cuda"), 64, 132)
    with pytest.raises(ValueError, match="d must not overlap itself"):  # group stride 32 rows < 64 rows
        masked(a3, b3, d3.view(-1)[: 96 * 256].as_strided((2, 64, 256), (32 * 256, 256, 1)),
               torch.zeros(2, dtype=torch.int32, device="cuda"), 64, 132)
    with pytest.raises(ValueError, match="b must be K-major"):
        masked(a3, b3.transpose(1, 2).contiguous().transpose(1, 2), d3, torch.zeros(2, dtype=torch.int32, device="cuda"),
               64, 132)
    # The Python API names the argument too, and the next valid call works.
    with pytest.raises(TypeError, match="hopperkit: c"):
        hopperkit.bf16_gemm_nt(a, b, d, c=torch.zeros(64, 256, device="cuda"))
    with pytest.raises(ValueError, match="hopperkit: b"):
        hopperkit.m_grouped_bf16_gemm_nt_masked(a3, b3.transpose(1, 2).contiguous().transpose(1, 2), d3,
                                                torch.zeros(2, dtype=torch.int32, device="cuda"), 64)
    with pytest.raises(ValueError, match="hopperkit: d must be an output that does not overlap itself"):
        hopperkit.bf16_gemm_nt(a, b, d[:1].expand(64, 256))
    hopperkit.bf16_gemm_nt(a, b, d)
    _check("after errors", d, ref_gemm.bf16_gemm_nt(a, b, None))


# --------------------------------------------------------------------------------------------------
# k-grouped (MoE weight gradient): D[g] = C[g] + A_gᵀ·B_g with A [Σks, M], B [Σks, N]
# --------------------------------------------------------------------------------------------------


def _k_grouped_case(m, n, ks, *key):
    gen = seeded_generator("cuda", "k-grouped", m, n, tuple(ks), *key)
    a, b = _randn(gen, sum(ks), m), _randn(gen, sum(ks), n)
    c = torch.randn(len(ks), m, n, generator=gen, device="cuda") * 8
    c[:, 0, :8] = -0.0  # an empty group's D must keep C's signed zeros (bitwise D = C)
    return a, b, c


def _check_k_grouped(name, d, a, b, ks, c):
    """Against the reference with C (or zeros); an empty group must be C[g] exactly."""
    ref = ref_gemm.k_grouped_bf16_gemm_tn_contiguous(a, b, ks, c)
    for g, kg in enumerate(ks):
        if kg == 0:  # bitwise: C[g] itself (a C of -0.0 stays -0.0), or +0.0 without C
            assert torch.equal(d[g].view(torch.int32), ref[g].view(torch.int32)), \
                f"{name}: empty group {g} must give D[g] = C[g] bitwise (or +0.0 without C)"
        else:
            _check(f"{name} group {g} (K={kg})", d[g], ref[g])


def _run_k_grouped(m, n, ks, c_mode, *key):
    a, b, c0 = _k_grouped_case(m, n, ks, *key)
    ks_tensor = torch.tensor(ks, dtype=torch.int32, device="cuda")
    if c_mode == "alias":
        d = c0.clone()
        c = d
    else:
        c = c0.clone() if c_mode == "separate" else None
        d = poison_(torch.empty_like(c0))
    hopperkit.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, ks_tensor, c=c)
    if c_mode == "separate":
        assert torch.equal(c, c0), "C was modified (it is only read when it is not D)"
    _check_k_grouped(f"k-grouped M={m} N={n} ks={ks} C {c_mode}", d, a, b, ks, None if c_mode == "none" else c0)


# (G, M, N, K per group): the MoE weight gradients of DeepGEMM's grouped shape lists, sampled.
K_GROUPED = ((4, 7168, 2048, [4096, 3968, 4352, 3840]), (8, 4096, 7168, [2048, 1792, 2304, 2048, 1920, 2176, 2048, 2048]))


@pytest.mark.parametrize("g,m,n,ks", K_GROUPED, ids=[f"G{g}-M{m}-N{n}" for g, m, n, _ in K_GROUPED])
def test_k_grouped_shapes(forbid_reference, g, m, n, ks):
    forbid_reference("k_grouped_bf16_gemm_tn_contiguous")
    _run_k_grouped(m, n, ks, "alias")


@pytest.mark.parametrize("c_mode", ["alias", "separate", "none"])
@pytest.mark.parametrize("block_m,block_n", TILES, ids=[f"{m}x{n}" for m, n in TILES])
def test_k_grouped_every_tile(block_m, block_n, c_mode, monkeypatch, forbid_reference):
    """Every compiled k-grouped tile, forced (the heuristic's pick depends on M and N only): an empty
    group, M and N ragged against every tile, K per group a multiple of 128 but not of 256."""
    forbid_reference("k_grouped_bf16_gemm_tn_contiguous")
    monkeypatch.setenv("HOPPERKIT_BF16_GEMM_CONFIG", f"{block_m},{block_n}")
    _run_k_grouped(200, 264, [384, 0, 128, 640], c_mode, block_m, block_n)


@pytest.mark.parametrize("c_mode", ["alias", "separate", "none"])
def test_k_grouped_empty_groups_and_edges(forbid_reference, c_mode):
    """Empty groups first, in the middle and last; M and N not multiples of any tile; M <= 64 takes
    the 64-row tiles."""
    forbid_reference("k_grouped_bf16_gemm_tn_contiguous")
    _run_k_grouped(200, 264, [0, 384, 0, 128, 1024, 0], c_mode)
    _run_k_grouped(4104, 2056, [256, 0, 640], c_mode)
    _run_k_grouped(48, 576, [512, 128, 0, 256], c_mode)


def test_k_grouped_reference_path_for_unaligned_rows():
    """M = 12 (rows of A not a multiple of 16 bytes): TMA cannot read A, the reference runs."""
    _run_k_grouped(12, 64, [128, 256], "separate")


def test_k_grouped_graph_replays_other_sizes(forbid_reference):
    """One capture serves any group sizes of the same total: the kernel reads ks_tensor on the device."""
    forbid_reference("k_grouped_bf16_gemm_tn_contiguous")
    m, n, captured = 192, 264, [256, 384, 0, 128]
    a, b, c = _k_grouped_case(m, n, captured, "graph")
    ks_tensor = torch.tensor(captured, dtype=torch.int32, device="cuda")
    d = torch.empty_like(c)
    graph, _ = capture_graph(lambda: hopperkit.k_grouped_bf16_gemm_tn_contiguous(a, b, d, captured, ks_tensor, c=c))
    for ks in ([128, 0, 512, 128], [0, 0, 0, 768], [768, 0, 0, 0], captured):
        a_new, b_new, c_new = _k_grouped_case(m, n, ks, "replay")
        for buf, new in ((a, a_new), (b, b_new), (c, c_new), (ks_tensor, torch.tensor(ks, dtype=torch.int32))):
            buf.copy_(new)
        poison_(d)
        graph.replay()
        torch.cuda.synchronize()
        _check_k_grouped(f"replay {ks}", d, a, b, ks, c)


def test_k_grouped_device_sizes_out_of_contract(forbid_reference):
    """ks_tensor disagreeing with ks (value checks off): an entry that is not a non-negative multiple of
    128 counts as 0 and every group's range is cut at Σks, so the kernel never reads past A or B."""
    forbid_reference("k_grouped_bf16_gemm_tn_contiguous")
    m, n, ks = 128, 256, [256, 128, 384]
    a, b, c0 = _k_grouped_case(m, n, ks, "out of contract")
    cases = (([1024, 128, 384], [768, 0, 0]), ([100, -128, 768], [0, 0, 768]), ([256, 256, 512], [256, 256, 256]))
    for device_ks, effective in cases:
        d = c0.clone()
        kt = torch.tensor(device_ks, dtype=torch.int32, device="cuda")
        hopperkit.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, kt, c=d)
        _check_k_grouped(f"device ks {device_ks}", d, a, b, effective, c0)


def test_k_grouped_bad_input(monkeypatch):
    a, b, c = _k_grouped_case(64, 128, [128, 256], "bad")
    kt = torch.tensor([128, 256], dtype=torch.int32, device="cuda")
    d = c.clone()
    call = hopperkit.k_grouped_bf16_gemm_tn_contiguous
    with pytest.raises(ValueError, match=r"hopperkit: ks_cpu must be non-negative multiples of 128"):
        call(a, b, d, [128, 200], kt, c=d)
    with pytest.raises(ValueError, match=r"hopperkit: ks_cpu must be 2 entries"):
        call(a, b, d, [384], kt, c=d)
    with pytest.raises(ValueError, match=r"hopperkit: a must"):
        call(a[:-128], b, d, [128, 256], kt, c=d)
    with pytest.raises(TypeError, match=r"hopperkit: d must"):
        call(a, b, d.to(torch.bfloat16), [128, 256], kt)
    monkeypatch.setenv("HOPPERKIT_CHECK_VALUES", "1")
    with pytest.raises(ValueError, match=r"hopperkit: grouped_layout must be the same values as ks_cpu"):
        call(a, b, d, [128, 256], torch.tensor([256, 128], dtype=torch.int32, device="cuda"), c=d)
    monkeypatch.delenv("HOPPERKIT_CHECK_VALUES")
    op = torch.ops.hopperkit.k_grouped_bf16_gemm_tn_contiguous
    with pytest.raises(ValueError, match=r"hopperkit: ks\[1\] must be a non-negative multiple of 128"):
        op(a, b, d, [128, 100], kt, d, 132)
    with pytest.raises(ValueError, match=r"hopperkit: a must be a bf16 \[Σks, 64\]"):
        op(a.T.contiguous().T, b, d, [128, 256], kt, d, 132)
    with pytest.raises(ValueError, match=r"hopperkit: ks_tensor must be a contiguous int32 \[2\] tensor"):
        op(a, b, d, [128, 256], kt[:1], d, 132)
    with pytest.raises(TypeError, match=r"hopperkit: c must be float32"):
        op(a, b, d, [128, 256], kt, c.to(torch.bfloat16), 132)
    assert torch.equal(d, c), "a rejected call wrote D"


# A tile's staging slots restart at its first box. Where its boxes do not fill whole turns through
# the slots (FP32 D: 96 columns in three 32-column boxes over two slots, 144 in five over three;
# BF16 D: a 64-column tile's one box over two), the first box must wait for every earlier store to
# have read its slot: without that wait, short-K tiles that follow each other quickly on a CTA
# overwrote a box the previous tile's TMA store (or reduce-add) was still reading, and a few
# thousand elements of D came out wrong, differently from call to call (found by
# test_gemm_fuzz_gpu.py: 128×96 with FP32 D and C at 3249×1920×288). Each case runs four times.
@pytest.mark.parametrize("config,out,c_mode", [("128,96", torch.float32, "c"), ("128,96", torch.float32, "alias"),
                                               ("128,96", torch.float32, "none"), ("128,144", torch.float32, "c"),
                                               ("64,144", torch.float32, "none"), ("64,96", torch.float32, "alias"),
                                               ("64,64", torch.bfloat16, "none"), ("64,64", torch.float32, "c")],
                         ids=lambda v: str(v).replace("torch.", ""))
def test_staging_slots_across_short_tiles(config, out, c_mode, monkeypatch, forbid_reference):
    forbid_reference("bf16_gemm_nt")
    monkeypatch.setenv("HOPPERKIT_BF16_GEMM_CONFIG", config)
    m, n, k = 3249, 1920, 288
    gen = seeded_generator("cuda", "staging slots", config, out, c_mode)
    a, b = _randn(gen, m, k), _randn(gen, n, k)
    c = torch.randn(m, n, generator=gen, device="cuda").to(out) if c_mode != "none" else None
    ref = ref_gemm.bf16_gemm_nt(a, b, c, out_dtype=torch.float32)
    bound = ref.abs() / 64 + 0.01 * ref.pow(2).mean().sqrt()
    for call in range(4):
        d = c.clone() if c_mode == "alias" else poison_(torch.empty(m, n, dtype=out, device="cuda"))
        hopperkit.bf16_gemm_nt(a, b, d, c=d if c_mode == "alias" else c)
        wrong = int(((d.float() - ref).abs() > bound).sum())
        assert wrong == 0, f"call {call}: {wrong} of {d.numel()} elements of D wrong"
