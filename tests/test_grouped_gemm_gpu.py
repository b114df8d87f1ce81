"""GPU tests of the MoE grouped FP8 GEMMs (1d2d recipe) on an SM90 device:
``m_grouped_fp8_gemm_nt_contiguous`` (m_indices and psum layouts) and ``m_grouped_fp8_gemm_nt_masked``.

DeepGEMM's (N, K) list with group counts and per-group rows drawn like its tests (expected × U(0.7, 1.3)),
kept small enough that the PyTorch reference stays fast. Every case:
- poisons D with NaN and fills A's padding rows (contiguous: rows with id -1; masked: rows at or past
  masked_m[g]) and their scales with NaN, which must reach no valid row;
- checks valid rows against the product of the unquantized inputs (calc_diff < 1e-3) and against
  ``hopperkit.reference.gemm.fp8_gemm_nt`` on the same FP8 operands (< 1e-5), group by group;
- checks that every other row of D is exactly 0 (the documented contract).
Plus empty groups, counts below 64, a CUDA graph of the masked GEMM replayed with new masked_m, and
bitwise repeatability.
"""

from __future__ import annotations

import random
import zlib

import pytest
import torch

import hopperkit
from hopperkit.reference import gemm as ref_gemm
from hopperkit.testing import (assert_fp8_gemm_close, block_scaled_randn, capture_graph, contiguous_m_indices,
                               launched_kernel_traits, poison_, seeded_generator)

pytestmark = pytest.mark.gpu

NKS = ((6144, 7168), (7168, 3072), (4096, 4096), (4096, 2048))
ALIGN = 128


def _quant_b(b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    pairs = [hopperkit.per_block_cast_to_fp8(b[g]) for g in range(b.shape[0])]
    return torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])


def _check_rows(name: str, d: torch.Tensor, a: torch.Tensor, a_fp8, sfa, b: torch.Tensor, b_fp8, sfb) -> None:
    """d, a, a_fp8, sfa: one group's valid rows; b, b_fp8, sfb: its expert."""
    if d.shape[0] == 0:
        return
    ref = ref_gemm.fp8_gemm_nt(a_fp8, sfa, b_fp8, sfb, None, recipe=(1, 128, 128), out_dtype=torch.bfloat16)
    assert_fp8_gemm_close(name, d, a.float() @ b.float().T, ref)


def _contiguous_case(g: int, expected: int, n: int, k: int, psum: bool, seed: int = 0):
    gen = seeded_generator("cuda", "contiguous", g, expected, n, k, seed)
    rnd = random.Random(zlib.crc32(repr(("c", g, expected, n, k, seed)).encode()))
    counts = [int(expected * rnd.uniform(0.7, 1.3)) for _ in range(g)]
    if g > 2:
        counts[1] = 0  # an empty expert
        counts[2] = min(counts[2], 37)  # fewer rows than a tile
    m_indices, starts = contiguous_m_indices(list(enumerate(counts)), ALIGN)
    m = m_indices.numel()
    a = block_scaled_randn(gen, m, k)
    b = block_scaled_randn(gen, g, n, k)
    a_fp8, sfa = hopperkit.per_token_cast_to_fp8(a)
    b_fp8, sfb = _quant_b(b)
    pad = (m_indices == -1).cuda()
    a_fp8.view(torch.uint8)[pad] = 0x7F  # e4m3fn NaN: garbage in padding rows
    sfa = sfa.clone()
    sfa[pad] = float("nan")
    d = poison_(torch.empty(m, n, dtype=torch.bfloat16, device="cuda"))
    if psum:
        ends = torch.tensor([s + c for s, c in zip(starts, counts)], dtype=torch.int32, device="cuda")
        hopperkit.m_grouped_fp8_gemm_nt_contiguous((a_fp8, sfa), (b_fp8, sfb), d, ends, use_psum_layout=True)
    else:
        hopperkit.m_grouped_fp8_gemm_nt_contiguous((a_fp8, sfa), (b_fp8, sfb), d, m_indices.cuda())
    return d, a, a_fp8, sfa, b, b_fp8, sfb, starts, counts, pad


@pytest.mark.parametrize("n,k", NKS)
@pytest.mark.parametrize("g,expected", [(4, 512), (8, 256)])
def test_contiguous(g, expected, n, k):
    d, a, a_fp8, sfa, b, b_fp8, sfb, starts, counts, pad = _contiguous_case(g, expected, n, k, psum=False)
    assert torch.equal(d[pad], torch.zeros_like(d[pad])), "padding rows of D must be 0"
    for e, (s, c) in enumerate(zip(starts, counts)):
        r = slice(s, s + c)
        _check_rows(f"expert {e}", d[r], a[r], a_fp8[r], sfa[r], b[e], b_fp8[e], sfb[e])


def test_contiguous_psum_layout_and_odd_k():
    # psum layout, K not a multiple of 128, N not a multiple of the tile.
    d, a, a_fp8, sfa, b, b_fp8, sfb, starts, counts, pad = _contiguous_case(5, 300, 2112, 320, psum=True)
    assert torch.equal(d[pad], torch.zeros_like(d[pad]))
    for e, (s, c) in enumerate(zip(starts, counts)):
        r = slice(s, s + c)
        _check_rows(f"expert {e}", d[r], a[r], a_fp8[r], sfa[r], b[e], b_fp8[e], sfb[e])


# The dense instantiations the contiguous layout runs (BLOCK_M ≤ 128, no B multicast; the 256-row
# tiles are its own, below), with either staging variant where both are compiled.
CONTIGUOUS_CONFIGS = ("64,64,1,0", "64,128,1,0", "128,64,1,0", "128,128,1,0", "128,128,1,1", "128,192,1,0",
                      "128,256,1,0")


@pytest.mark.parametrize("config", CONTIGUOUS_CONFIGS)
def test_contiguous_every_tile(monkeypatch, config):
    """Each tile forced on a small ragged case: N = 2112 (192-wide tiles that start mid scale block,
    a 256-wide last tile whose second column wave lies past N), an empty expert and one of fewer
    rows than a tile, K = 320 (a last K block of 64)."""
    monkeypatch.setenv("HOPPERKIT_FP8_GEMM_CONFIG", config)
    d, a, a_fp8, sfa, b, b_fp8, sfb, starts, counts, pad = _contiguous_case(5, 300, 2112, 320, psum=False)
    assert torch.equal(d[pad], torch.zeros_like(d[pad]))
    for e, (s, c) in enumerate(zip(starts, counts)):
        r = slice(s, s + c)
        _check_rows(f"{config}: expert {e}", d[r], a[r], a_fp8[r], sfa[r], b[e], b_fp8[e], sfb[e])


def test_contiguous_refuses_tiles_that_could_mix_experts(monkeypatch):
    # 192-row tiles could mix experts (segments are aligned to 128 rows only), and B multicast pairs
    # two M blocks: refused before launch.
    for config in ("192,64,1", "256,128,2", "256,64,1"):
        monkeypatch.setenv("HOPPERKIT_FP8_GEMM_CONFIG", config)
        with pytest.raises(ValueError, match="BLOCK_M <= 128"):
            _contiguous_case(4, 256, 576, 512, psum=False)


def _launched_contiguous_tiles(counts, n, k):
    """The (BLOCK_M, BLOCK_N) of the 1d2d kernels one contiguous call launches (tuning knobs cleared
    by the caller), for experts of the given row counts, each padded to 128 rows."""
    gen = seeded_generator("cuda", "launched contiguous", tuple(counts), n, k)
    m_indices, _ = contiguous_m_indices(list(enumerate(counts)), ALIGN)
    a_fp8, sfa = hopperkit.per_token_cast_to_fp8(block_scaled_randn(gen, m_indices.numel(), k))
    b_fp8, sfb = _quant_b(block_scaled_randn(gen, len(counts), n, k))
    d = torch.empty(m_indices.numel(), n, dtype=torch.bfloat16, device="cuda")
    ids = m_indices.cuda()
    launched = launched_kernel_traits(lambda: hopperkit.m_grouped_fp8_gemm_nt_contiguous((a_fp8, sfa), (b_fp8, sfb), d, ids),
                                      "fp8_gemm_1d2d_kernel", "Fp8Gemm1d2dTraits")
    return {tuple(int(v) for v in traits.split(",")[:2]) for traits in launched}


# The wave model's pick on the contiguous layout (heuristics.h choose_fp8_1d2d_config): 128×256 for
# uneven routing, whose 128-row blocks never hold two experts (16 experts of 300-855 rows: 80 M
# blocks of 128 rows), and the 256-row tiles for two experts of 4096 rows each, whose blocks all
# hold one expert. On the SM counts of an H100/H200 SXM (132) or, on smaller parts, 78: the model picks
# the same at both (at 114 the even case takes 128×256, where the 256-row tiles' counted second pass
# costs them a tenth wave).
@pytest.mark.parametrize("counts,n,tile", [([300 + 37 * i for i in range(16)], 4096, (128, 256)),
                                           ([300 + 37 * i for i in range(16)], 7168, (128, 256)),
                                           ([4096, 4096], 4096, (256, 128))], ids=["uneven-4096", "uneven-7168", "even"])
def test_contiguous_tile_chosen(monkeypatch, counts, n, tile):
    for knob in ("HOPPERKIT_FP8_GEMM_CONFIG", "HOPPERKIT_FP8_GEMM_SPLITS", "HOPPERKIT_FP8_GEMM_A_MULTICAST"):
        monkeypatch.delenv(knob, raising=False)
    hopperkit.set_num_sms(132 if torch.cuda.get_device_properties(0).multi_processor_count >= 132 else 78)
    try:
        assert _launched_contiguous_tiles(counts, n, 512) == {tile}
    finally:
        hopperkit.set_num_sms(None)


# Segments of (expert, rows), each padded with -1 to a multiple of 128 rows ((-1, 128): a padding-only
# half). The 256-row blocks this gives: (0, 0); (0, padding); (2, 1): two experts; (padding, 3);
# (3, 4); (5, past M): the block where M ends, in its first half.
HALVES_LAYOUT = ((0, 300), (-1, 128), (2, 128), (1, 37), (-1, 128), (3, 256), (4, 100), (5, 60))


@pytest.fixture
def few_sms():
    """set_num_sms(8) for the test, restored after it: small problems then span several waves."""
    hopperkit.set_num_sms(8)
    yield
    hopperkit.set_num_sms(None)


HALVES_CASES = ((576, 448, "off"), (4096, 1408, "off"), (768, 448, "on"), (4096, 1408, "on"))


@pytest.mark.parametrize("n,k,a_multicast", HALVES_CASES)
def test_contiguous_256_row_tiles_with_an_expert_per_half(monkeypatch, request, n, k, a_multicast):
    """256-row tiles on the contiguous layout (fp8_1d2d/traits.h kHalves): each 128-row half is
    multiplied with its own expert, a block of two experts in two passes over K. NaN in the padding
    rows of A must reach no row; padding rows of D are 0. K = 1408: 11 K blocks per pass, an odd count
    over a ring of 3 stages and two TMA threads taking turns. With A multicast (CTA pairs on two N
    blocks of one M block, on 8 SMs so that it spans more than two waves), both CTAs of a pair run
    the same passes, and each CTA several blocks."""
    monkeypatch.setenv("HOPPERKIT_FP8_GEMM_CONFIG", "256,128,1")
    monkeypatch.setenv("HOPPERKIT_FP8_GEMM_A_MULTICAST", a_multicast)
    if a_multicast == "on":
        request.getfixturevalue("few_sms")
    m_indices, _ = contiguous_m_indices(HALVES_LAYOUT, ALIGN)
    m, g = m_indices.numel(), 6
    gen = seeded_generator("cuda", "halves", n, k)
    a = block_scaled_randn(gen, m, k)
    b = block_scaled_randn(gen, g, n, k)
    a_fp8, sfa = hopperkit.per_token_cast_to_fp8(a)
    b_fp8, sfb = _quant_b(b)
    pad = (m_indices == -1).cuda()
    a_fp8.view(torch.uint8)[pad] = 0x7F  # e4m3fn NaN
    sfa = sfa.clone()
    sfa[pad] = float("nan")
    d = poison_(torch.empty(m, n, dtype=torch.bfloat16, device="cuda"))
    hopperkit.m_grouped_fp8_gemm_nt_contiguous((a_fp8, sfa), (b_fp8, sfb), d, m_indices.cuda())
    assert torch.equal(d[pad], torch.zeros_like(d[pad])), "padding rows of D must be 0"
    for e in range(g):
        r = (m_indices == e).nonzero().flatten().cuda()
        _check_rows(f"expert {e}", d[r], a[r], a_fp8[r], sfa[r], b[e], b_fp8[e], sfb[e])


def test_contiguous_long_segments_take_256_row_tiles_sharing_a(monkeypatch):
    """The heuristic's choice for long expert segments: 256-row tiles with an expert per half, on CTA
    pairs that share A (traits BLOCK_M, BLOCK_N, cluster M, one-box staging, masked, cluster N,
    per-half experts, from the launched kernel's name); and its result."""
    for knob in ("HOPPERKIT_FP8_GEMM_CONFIG", "HOPPERKIT_FP8_GEMM_A_MULTICAST"):
        monkeypatch.delenv(knob, raising=False)
    g, rows, n, k = 2, 8192, 1024, 128
    m_indices = torch.arange(g, dtype=torch.int32).repeat_interleave(rows)
    gen = seeded_generator("cuda", "long-segments", g, rows, n, k)
    a = block_scaled_randn(gen, g * rows, k)
    b = block_scaled_randn(gen, g, n, k)
    a_fp8, sfa = hopperkit.per_token_cast_to_fp8(a)
    b_fp8, sfb = _quant_b(b)
    d = poison_(torch.empty(g * rows, n, dtype=torch.bfloat16, device="cuda"))
    ids = m_indices.cuda()
    launched = launched_kernel_traits(lambda: hopperkit.m_grouped_fp8_gemm_nt_contiguous((a_fp8, sfa), (b_fp8, sfb), d, ids),
                                      "fp8_gemm_1d2d_kernel", "Fp8Gemm1d2dTraits")
    assert launched == {"256,128,1,false,false,2,true"}, launched
    for e in range(g):
        r = slice(e * rows, (e + 1) * rows)
        _check_rows(f"expert {e}", d[r], a[r], a_fp8[r], sfa[r], b[e], b_fp8[e], sfb[e])


@pytest.mark.parametrize("one_box_staging", [0, 1], ids=["staging-per-box", "one-box"])
def test_masked_256_row_tiles(monkeypatch, one_box_staging):
    # 256-row tiles on the masked layout: groups with no rows, fewer than one 64-row wave, one
    # 128-row half, and more than one 256-row block; both staging variants.
    monkeypatch.setenv("HOPPERKIT_FP8_GEMM_CONFIG", f"256,128,1,{one_box_staging}")
    g, n, k = 6, 576, 448
    counts = [0, 37, 128, 300, 256, 129]
    _run_masked(g, max(counts) + 19, n, k, counts, 256, seed=4)


def _masked_inputs(g: int, m_max: int, n: int, k: int, seed: int = 0):
    gen = seeded_generator("cuda", "masked", g, m_max, n, k, seed)
    a = block_scaled_randn(gen, g, m_max, k)
    b = block_scaled_randn(gen, g, n, k)
    pairs = [hopperkit.per_token_cast_to_fp8(a[i]) for i in range(g)]
    a_fp8, sfa = torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])
    b_fp8, sfb = _quant_b(b)
    return a, a_fp8, sfa, b, b_fp8, sfb


def _poison_masked_rows(a_fp8, sfa, masked_m):
    rows = torch.arange(a_fp8.shape[1], device="cuda")[None, :] >= masked_m.cuda()[:, None].long()
    a_fp8.view(torch.uint8)[rows] = 0x7F  # e4m3fn NaN
    sfa[rows] = float("nan")
    return rows


def _check_masked(d, a, a_fp8, sfa, b, b_fp8, sfb, masked_m, dead):
    """D NaN-poisoned before the call. Rows at or past masked_m are unspecified: 0 where they share a
    tile with valid rows, untouched (still NaN) from the first 256-row boundary at or past masked_m
    (the largest BLOCK_M) on, so the kernel wrote nothing for blocks without valid rows."""
    dead_vals = d[dead]
    assert bool(((dead_vals == 0) | torch.isnan(dead_vals)).all()), "rows at or past masked_m must be 0 or untouched"
    rows = torch.arange(d.shape[1], device=d.device)[None, :]
    beyond = rows >= ((masked_m.to(d.device)[:, None].long() + 255) // 256 * 256)
    assert bool(torch.isnan(d[beyond]).all()), "blocks without valid rows must not be written"

    for e, c in enumerate(masked_m.tolist()):
        _check_rows(f"group {e}", d[e, :c], a[e, :c], a_fp8[e, :c], sfa[e, :c], b[e], b_fp8[e], sfb[e])


def _run_masked(g, m_max, n, k, counts, expected_m, seed=0):
    """One masked call on fresh inputs whose dead rows (at or past masked_m) hold NaN, D NaN-poisoned,
    checked by _check_masked."""
    a, a_fp8, sfa, b, b_fp8, sfb = _masked_inputs(g, m_max, n, k, seed=seed)
    masked_m = torch.tensor(counts, dtype=torch.int32)
    dead = _poison_masked_rows(a_fp8, sfa, masked_m)
    d = poison_(torch.empty(g, m_max, n, dtype=torch.bfloat16, device="cuda"))
    hopperkit.m_grouped_fp8_gemm_nt_masked((a_fp8, sfa), (b_fp8, sfb), d, masked_m.cuda(), expected_m)
    _check_masked(d, a, a_fp8, sfa, b, b_fp8, sfb, masked_m, dead)


@pytest.mark.parametrize("n,k", NKS)
@pytest.mark.parametrize("g,expected", [(32, 20), (6, 20), (32, 192), (6, 1024)])
def test_masked(g, expected, n, k):
    rnd = random.Random(zlib.crc32(repr(("m", g, expected, n, k)).encode()))
    counts = [int(expected * rnd.uniform(0.7, 1.3)) for _ in range(g)]
    counts[0] = 0
    _run_masked(g, max(counts) + 19, n, k, counts, int(expected * 1.2))


# The masked layout's own instantiations (BLOCK_M, BLOCK_N, cluster, one-box staging).
MASKED_CONFIGS = ("64,64,1,0", "64,128,1,0", "128,64,1,0", "128,128,1,0", "128,128,1,1", "256,128,1,0", "256,128,1,1")


@pytest.mark.parametrize("config", MASKED_CONFIGS)
def test_masked_large_m_max_few_rows(monkeypatch, config):
    """A capture sized for the worst case: M_max = 4096 with a few rows per group (DeepGEMM's test
    setting), on every masked instantiation. Only the blocks with valid rows are scheduled (group by
    group): every group's result, and nothing written from the first 256-row boundary past masked_m on."""
    monkeypatch.setenv("HOPPERKIT_FP8_GEMM_CONFIG", config)
    g, m_max, n, k = 10, 4096, 520, 384
    counts = [0, 1, 17, 64, 65, 130, 255, 3, 2100, 4096]  # the last two span more than one band of M blocks
    _run_masked(g, m_max, n, k, counts, 64, seed=5)


@pytest.mark.parametrize("g,counts", [(3, [1, 0, 1]), (1, [1])])
def test_masked_size_one_dims_any_stride(g, counts, forbid_reference):
    """M_max = 1 (and G = 1): torch reports any stride for a dimension of one entry, and a view can
    carry one that no TMA map could use. The op must neither refuse such a view nor hand TMA its
    stride: A and D here have row strides 5 and 3, and for G = 1 odd group strides."""
    forbid_reference("m_grouped_fp8_gemm_nt_masked")
    n, k = 512, 384
    a, a_fp8, sfa, b, b_fp8, sfb = _masked_inputs(g, 1, n, k, seed=2)
    group_a = k + 32 if g > 1 else 7
    a_store = torch.empty(g * (k + 32), dtype=torch.uint8, device="cuda")
    a_view = a_store.as_strided((g, 1, k), (group_a, 5, 1))
    a_view.copy_(a_fp8.view(torch.uint8))
    a_view = a_view.view(torch.float8_e4m3fn)
    group_d = n + 8 if g > 1 else 3
    d_store = poison_(torch.empty(g * (n + 8), dtype=torch.bfloat16, device="cuda"))
    d = d_store.as_strided((g, 1, n), (group_d, 3, 1))
    masked_m = torch.tensor(counts, dtype=torch.int32)
    hopperkit.m_grouped_fp8_gemm_nt_masked((a_view, sfa), (b_fp8, sfb), d, masked_m.cuda(), 1)
    dead = torch.arange(1, device="cuda")[None, :] >= masked_m.cuda()[:, None].long()
    _check_masked(d, a, a_fp8, sfa, b, b_fp8, sfb, masked_m, dead)


def test_masked_cuda_graph_replay():
    """One capture serves any counts: masked_m is read on the device."""
    g, m_max, n, k = 8, 160, 4096, 2048
    a, a_fp8, sfa, b, b_fp8, sfb = _masked_inputs(g, m_max, n, k, seed=1)
    sfa = hopperkit.get_mn_major_tma_aligned_tensor(sfa)
    masked_m = torch.full((g,), m_max, dtype=torch.int32, device="cuda")
    d = torch.empty(g, m_max, n, dtype=torch.bfloat16, device="cuda")
    call = lambda: hopperkit.m_grouped_fp8_gemm_nt_masked((a_fp8, sfa), (b_fp8, sfb), d, masked_m, 128)
    graph, _ = capture_graph(call)
    for counts in ([160] * 8, [0, 1, 63, 64, 65, 127, 128, 159], [5, 0, 0, 150, 0, 33, 99, 0]):
        masked_m.copy_(torch.tensor(counts, dtype=torch.int32))
        d.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        dead = torch.arange(m_max, device="cuda")[None, :] >= masked_m[:, None].long()
        _check_masked(d, a, a_fp8, sfa, b, b_fp8, sfb, masked_m.cpu(), dead)


def test_grouped_repeatable():
    d0 = _contiguous_case(4, 300, 4096, 2048, psum=False)[0]
    for _ in range(5):
        assert torch.equal(_contiguous_case(4, 300, 4096, 2048, psum=False)[0], d0)
