"""GPU tests of the FP8 1d1d GEMM kernel: ``fp8_gemm_nt`` with recipe (1, 1, 128) (FP32 D = C + A·Bᵀ,
1×128 scales on both operands, the weight gradient) and ``k_grouped_fp8_gemm_nt_contiguous`` (the MoE
weight gradient, one K per group), run on an SM90 device.

Every case draws fresh seeded BF16 inputs (randn with a random magnitude per 1×128 block, so that a
wrongly indexed scale shows), quantizes them with ``per_token_cast_to_fp8``, and checks
- ``calc_diff(D, C + product of the unquantized inputs) < 1e-3`` (DeepGEMM's FP8 bound);
- ``calc_diff(D, hopperkit.reference on the same FP8 operands) < 1e-5`` (the kernel implements the
  reference's two-level accumulation; only summation order and fused multiply-adds differ);
- no NaN in D where D was poisoned (runs without C, C separate from D), C unchanged when separate.

Shapes: DeepGEMM's dense list sampled (M ∈ {1, 7, 64, 128, 4096}), edge sizes (M = 4097, 65; N not a
multiple of the tile width; K not a multiple of 128), and the k-grouped EP shapes sampled, with
an empty group. The ops' own branches that the Python API does not reach (no C, K = 0, PDL) are
called directly. Tests that must run the kernel forbid the reference fallback (conftest
``forbid_reference``). The whole file takes seconds on an H200.
"""

from __future__ import annotations

import zlib

import pytest
import torch

import hopperkit
from hopperkit import _ops
from hopperkit.reference import gemm as ref_gemm
from hopperkit.testing import assert_fp8_gemm_close, block_scaled_randn, capture_graph, poison_, seeded_generator

pytestmark = pytest.mark.gpu

FP8 = torch.float8_e4m3fn
RECIPE_1D1D = (1, 1, 128)


@pytest.fixture(scope="module", autouse=True)
def _sm90():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    for op in ("fp8_gemm_nt (1d1d)", "k_grouped_fp8_gemm_nt_contiguous"):
        if not _ops.use_kernel(op, torch.device("cuda")):
            pytest.skip(f"the {op} kernel needs an SM90 device, the built extension and HOPPERKIT_FORCE_REFERENCE unset")


@pytest.fixture
def kernel_only(forbid_reference):
    """The 1d1d public ops must run their kernels: a fallback to the reference fails the test."""
    forbid_reference("fp8_gemm_nt", "k_grouped_fp8_gemm_nt_contiguous")


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _dense_case(device, m, n, k, *key):
    gen = seeded_generator(device, "1d1d", m, n, k, *key)
    a, b = block_scaled_randn(gen, m, k), block_scaled_randn(gen, n, k)
    c0 = torch.randn(m, n, generator=gen, device=device) * 32
    return a, b, hopperkit.per_token_cast_to_fp8(a), hopperkit.per_token_cast_to_fp8(b), c0


# --------------------------------------------------------------------------------------------------
# dense: C = D (accumulate in place), C separate, no C
# --------------------------------------------------------------------------------------------------

NKS = ((2112, 7168), (576, 7168), (24576, 1536), (7168, 2048), (4096, 7168))
# Decode-sized M against every (N, K); M = 4096 against three (the reference dominates the runtime).
DENSE = [(m, n, k) for m in (1, 7, 64, 128) for n, k in NKS] + [(4096, n, k) for n, k in NKS[2:]]


@pytest.mark.parametrize("m,n,k", DENSE, ids=[f"M{m}-N{n}-K{k}" for m, n, k in DENSE])
def test_dense_accumulate_in_place(cuda, kernel_only, m, n, k):
    a, b, (a_fp8, sfa), (b_fp8, sfb), c0 = _dense_case(cuda, m, n, k)
    d = c0.clone()
    hopperkit.fp8_gemm_nt((a_fp8, sfa), (b_fp8, sfb), d, c=d, recipe=RECIPE_1D1D)
    reference = ref_gemm.fp8_gemm_nt(a_fp8, sfa, b_fp8, sfb, c0, recipe=RECIPE_1D1D)
    assert_fp8_gemm_close(f"C=D M={m} N={n} K={k}", d, c0 + a.float() @ b.float().T, reference)


# M = 4097 and 65 (a last M block with 1 row: the second math warpgroup stores a single row), N not a
# multiple of the 160-column tile (200, 36, 2112 = 13.2 tiles), K not a multiple of 128 (320, 1008).
EDGE = ((4097, 2112, 1536), (65, 36, 256), (7, 576, 320), (100, 200, 1008), (1, 8, 128), (129, 4100, 512))


@pytest.mark.parametrize("mode", ["c_is_d", "c_separate", "no_c"])
@pytest.mark.parametrize("m,n,k", EDGE, ids=[f"M{m}-N{n}-K{k}" for m, n, k in EDGE])
def test_dense_c_modes_and_edges(cuda, kernel_only, m, n, k, mode):
    a, b, (a_fp8, sfa), (b_fp8, sfb), c0 = _dense_case(cuda, m, n, k, mode)
    unquantized = a.float() @ b.float().T
    if mode == "no_c":
        # The public API requires C for 1d1d; the op itself stores A·Bᵀ when C is None.
        d = poison_(torch.empty(m, n, dtype=torch.float32, device=cuda))
        torch.ops.hopperkit.fp8_gemm_nt_1d1d(a_fp8, hopperkit.get_mn_major_tma_aligned_tensor(sfa), b_fp8,
                                             hopperkit.get_mn_major_tma_aligned_tensor(sfb), d, None,
                                             hopperkit.get_num_sms(), False)
        reference = ref_gemm.fp8_gemm_nt(a_fp8, sfa, b_fp8, sfb, torch.zeros_like(c0), recipe=RECIPE_1D1D)
        assert_fp8_gemm_close(f"no C M={m} N={n} K={k}", d, unquantized, reference)
        return
    if mode == "c_is_d":
        d = c0.clone()
        c = d
    else:
        c = c0.clone()
        d = poison_(torch.empty(m, n, dtype=torch.float32, device=cuda))
    hopperkit.fp8_gemm_nt((a_fp8, sfa), (b_fp8, sfb), d, c=c, recipe=RECIPE_1D1D)
    if mode == "c_separate":
        assert torch.equal(c, c0), "C was modified (it is only read when it is not D)"
    reference = ref_gemm.fp8_gemm_nt(a_fp8, sfa, b_fp8, sfb, c0, recipe=RECIPE_1D1D)
    assert_fp8_gemm_close(f"{mode} M={m} N={n} K={k}", d, c0 + unquantized, reference)


# Every compiled tile, forced through the tuning knob, whatever the heuristic would pick: M = 65 and
# 4097 (one row in the last M block), N not a multiple of 128 or of 160 (200, 4100, 2112 = 13.2
# tiles of 160), K not a multiple of 128. The 64-row tile also runs problems of many M blocks.
CONFIGS = ((64, 128), (128, 160))
CONFIG_SHAPES = ((65, 200, 1008), (4097, 2112, 640), (129, 4100, 512), (300, 7168, 256))


@pytest.mark.parametrize("config", CONFIGS, ids=[f"{bm}x{bn}" for bm, bn in CONFIGS])
@pytest.mark.parametrize("m,n,k", CONFIG_SHAPES, ids=[f"M{m}-N{n}-K{k}" for m, n, k in CONFIG_SHAPES])
def test_dense_every_config(cuda, kernel_only, monkeypatch, config, m, n, k):
    monkeypatch.setenv("HOPPERKIT_FP8_1D1D_CONFIG", ",".join(map(str, config)))
    a, b, (a_fp8, sfa), (b_fp8, sfb), c0 = _dense_case(cuda, m, n, k, "config", config)
    for mode in ("c_is_d", "c_separate"):
        c = c0.clone()
        d = c if mode == "c_is_d" else poison_(torch.empty_like(c0))
        hopperkit.fp8_gemm_nt((a_fp8, sfa), (b_fp8, sfb), d, c=c, recipe=RECIPE_1D1D)
        reference = ref_gemm.fp8_gemm_nt(a_fp8, sfa, b_fp8, sfb, c0, recipe=RECIPE_1D1D)
        assert_fp8_gemm_close(f"{config} {mode} M={m} N={n} K={k}", d, c0 + a.float() @ b.float().T, reference)


def test_config_knob_refuses_uncompiled(cuda, monkeypatch):
    """A forced tile without an instantiation, or a malformed knob, is a ValueError before the op writes
    anything: D stays as it was, also where a separate C would have been copied into it first."""
    _, _, (a_fp8, sfa), (b_fp8, sfb), c0 = _dense_case(cuda, 128, 256, 256, "knob")
    for value, message in (("128,128", r"no FP8 1d1d GEMM compiled for BLOCK_M=128 BLOCK_N=128 .*"
                                        r"_gemm_instantiations\(\"fp8_1d1d\"\) lists the compiled ones"),
                           ("128", "HOPPERKIT_FP8_1D1D_CONFIG must be BLOCK_M,BLOCK_N")):
        monkeypatch.setenv("HOPPERKIT_FP8_1D1D_CONFIG", value)
        d = c0.clone()
        with pytest.raises(ValueError, match=message):
            hopperkit.fp8_gemm_nt((a_fp8, sfa), (b_fp8, sfb), d, c=d, recipe=RECIPE_1D1D)
        assert torch.equal(d, c0), f"{value}: a refused call wrote D (C = D)"
        d = poison_(torch.empty_like(c0))
        with pytest.raises(ValueError, match=message):
            hopperkit.fp8_gemm_nt((a_fp8, sfa), (b_fp8, sfb), d, c=c0, recipe=RECIPE_1D1D)
        assert torch.isnan(d).all(), f"{value}: a refused call wrote D (C separate)"


def test_dense_row_padded_d_and_c(cuda, kernel_only):
    """D and C as row-padded views: the padding columns stay untouched (TMA clips at N)."""
    m, n, k = 300, 200, 512
    a, b, (a_fp8, sfa), (b_fp8, sfb), c0 = _dense_case(cuda, m, n, k, "padded")
    d_buf = poison_(torch.empty(m, n + 12, dtype=torch.float32, device=cuda))
    c_buf = poison_(torch.empty(m, n + 4, dtype=torch.float32, device=cuda))
    d, c = d_buf[:, :n], c_buf[:, :n]
    c.copy_(c0)
    hopperkit.fp8_gemm_nt((a_fp8, sfa), (b_fp8, sfb), d, c=c, recipe=RECIPE_1D1D)
    assert torch.isnan(d_buf[:, n:]).all(), "D's row padding was written"
    reference = ref_gemm.fp8_gemm_nt(a_fp8, sfa, b_fp8, sfb, c0, recipe=RECIPE_1D1D)
    assert_fp8_gemm_close("row-padded", d, c0 + a.float() @ b.float().T, reference)


def test_dense_k0_and_empty(cuda):
    """K = 0 gives D = C; M = 0 or N = 0 writes nothing."""
    gen = seeded_generator(cuda, "k0")
    c = torch.randn(64, 256, generator=gen, device=cuda)
    d = poison_(torch.empty_like(c))
    # Empty K-major views of 16-byte aligned rows (a bare empty(64, 0) has row stride 1).
    a = torch.empty(64, 16, dtype=FP8, device=cuda)[:, :0]
    b = torch.empty(256, 16, dtype=FP8, device=cuda)[:, :0]
    sf = torch.empty(64, 0, device=cuda), torch.empty(256, 0, device=cuda)
    hopperkit.fp8_gemm_nt((a, sf[0]), (b, sf[1]), d, c=c, recipe=RECIPE_1D1D)
    assert torch.equal(d, c)
    buf = poison_(torch.empty(8, 8, device=cuda))
    a = torch.ones(0, 128, device=cuda).to(FP8)
    b = torch.ones(8, 128, device=cuda).to(FP8)
    hopperkit.fp8_gemm_nt((a, torch.ones(0, 1, device=cuda)), (b, torch.ones(8, 1, device=cuda)), buf[:0], c=buf[:0],
                          recipe=RECIPE_1D1D)
    torch.cuda.synchronize()
    assert torch.isnan(buf).all()


def test_dense_opcheck(cuda):
    """Schema (mutation/alias annotations), fake-tensor and autograd registration of the op. opcheck's
    test_schema is left out: it re-runs the op on perturbed inputs with arithmetic torch lacks for FP8."""
    m, n, k = 128, 256, 512
    _, _, (a_fp8, sfa), (b_fp8, sfb), c0 = _dense_case(cuda, m, n, k, "opcheck")
    sfa, sfb = hopperkit.get_mn_major_tma_aligned_tensor(sfa), hopperkit.get_mn_major_tma_aligned_tensor(sfb)
    d = torch.empty(m, n, device=cuda)
    torch.library.opcheck(torch.ops.hopperkit.fp8_gemm_nt_1d1d.default,
                          (a_fp8, sfa, b_fp8, sfb, d, c0, hopperkit.get_num_sms(), False),
                          test_utils=("test_faketensor", "test_autograd_registration"))


def test_dense_op_rejects_bad_inputs(cuda):
    m, n, k = 64, 128, 256
    _, _, (a_fp8, sfa), (b_fp8, sfb), c0 = _dense_case(cuda, m, n, k, "bad")
    sfa_t, sfb_t = hopperkit.get_mn_major_tma_aligned_tensor(sfa), hopperkit.get_mn_major_tma_aligned_tensor(sfb)
    d = torch.empty(m, n, device=cuda)
    op = torch.ops.hopperkit.fp8_gemm_nt_1d1d
    sms = hopperkit.get_num_sms()
    with pytest.raises(ValueError, match="hopperkit: sfb must be"):
        op(a_fp8, sfa_t, b_fp8, sfb.contiguous(), d, c0, sms, False)  # K-major scales: the op wants MN-major
    with pytest.raises(ValueError, match="hopperkit: d must be"):
        op(a_fp8, sfa_t, b_fp8, sfb_t, d[:, :64], c0, sms, False)
    with pytest.raises(TypeError, match="hopperkit: c must be"):
        op(a_fp8, sfa_t, b_fp8, sfb_t, d, c0.double(), sms, False)
    with pytest.raises(ValueError, match="hopperkit: b must be"):
        op(a_fp8, sfa_t, b_fp8[:, :128], sfb_t, d, c0, sms, False)
    # C at D's address with other (valid) strides: neither D itself nor a separate tensor.
    buf = torch.empty(m * 2 * n, device=cuda)
    with pytest.raises(ValueError, match="hopperkit: c must be d itself"):
        op(a_fp8, sfa_t, b_fp8, sfb_t, buf[: m * n].view(m, n), buf.as_strided((m, n), (2 * n, 1)), sms, False)
    # C shifted by a row against D in one buffer: a partial overlap the copy of C into D would corrupt.
    rows = torch.randn(m + 1, n, device=cuda)
    before = rows.clone()
    with pytest.raises(ValueError, match="hopperkit: c must be d itself"):
        op(a_fp8, sfa_t, b_fp8, sfb_t, rows[:m], rows[1:], sms, False)
    with pytest.raises(ValueError, match="hopperkit: c must be d itself"):
        hopperkit.fp8_gemm_nt((a_fp8, sfa), (b_fp8, sfb), rows[:m], c=rows[1:], recipe=RECIPE_1D1D)
    assert torch.equal(rows, before), "a refused call wrote D"
    # D whose elements overlap: expand()-ed, or rows closer than N.
    with pytest.raises(ValueError, match="hopperkit: d must not overlap itself"):
        op(a_fp8, sfa_t, b_fp8, sfb_t, d[:1].expand(m, n), c0, sms, False)
    with pytest.raises(ValueError, match="hopperkit: d must not overlap itself"):
        op(a_fp8, sfa_t, b_fp8, sfb_t, buf.as_strided((m, n), (n // 2, 1)), c0, sms, False)
    with pytest.raises(ValueError, match="hopperkit: d must be an output that does not overlap itself"):
        hopperkit.fp8_gemm_nt((a_fp8, sfa), (b_fp8, sfb), d[:1].expand(m, n), c=c0, recipe=RECIPE_1D1D)


def _op_scales(sfa: torch.Tensor, sfb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return hopperkit.get_mn_major_tma_aligned_tensor(sfa), hopperkit.get_mn_major_tma_aligned_tensor(sfb)


def test_dense_op_k0(cuda):
    """The op's own K = 0 branch (the Python API answers K = 0 itself): D = 0 without C, D = C with a
    separate C, D unchanged when C is D."""
    m, n = 40, 72
    a = torch.empty(m, 16, dtype=FP8, device=cuda)[:, :0]  # K-major views of 16-byte aligned rows
    b = torch.empty(n, 16, dtype=FP8, device=cuda)[:, :0]
    sfa, sfb = torch.empty(m, 0, device=cuda), torch.empty(n, 0, device=cuda)
    op = torch.ops.hopperkit.fp8_gemm_nt_1d1d
    sms = hopperkit.get_num_sms()
    d = poison_(torch.empty(m, n, device=cuda))
    op(a, sfa, b, sfb, d, None, sms, False)
    assert torch.equal(d, torch.zeros_like(d)), "K = 0 without C must give D = 0"
    c = torch.randn(m, n, generator=seeded_generator(cuda, "op_k0"), device=cuda)
    d = poison_(torch.empty(m, n, device=cuda))
    op(a, sfa, b, sfb, d, c, sms, False)
    assert torch.equal(d, c), "K = 0 with C must give D = C"
    d = c.clone()
    op(a, sfa, b, sfb, d, d, sms, False)
    assert torch.equal(d, c), "K = 0 with C = D must leave D as it is"


def test_dense_op_pdl(cuda):
    """pdl=True (programmatic dependent launch), one small case with C separate from a poisoned D."""
    m, n, k = 136, 200, 640
    a, b, (a_fp8, sfa), (b_fp8, sfb), c0 = _dense_case(cuda, m, n, k, "pdl")
    sfa_t, sfb_t = _op_scales(sfa, sfb)
    d = poison_(torch.empty(m, n, device=cuda))
    torch.ops.hopperkit.fp8_gemm_nt_1d1d(a_fp8, sfa_t, b_fp8, sfb_t, d, c0, hopperkit.get_num_sms(), True)
    reference = ref_gemm.fp8_gemm_nt(a_fp8, sfa, b_fp8, sfb, c0, recipe=RECIPE_1D1D)
    assert_fp8_gemm_close("pdl", d, c0 + a.float() @ b.float().T, reference)


# --------------------------------------------------------------------------------------------------
# k-grouped (MoE weight gradient)
# --------------------------------------------------------------------------------------------------


def _k_grouped_case(device, m, n, ks, *key):
    """Per group g: A_g [M, ks[g]], B_g [N, ks[g]] (BF16 and quantized), packed as the op takes them."""
    gen = seeded_generator(device, "k-grouped", m, n, tuple(ks), *key)
    a_parts = [block_scaled_randn(gen, m, kg) for kg in ks]
    b_parts = [block_scaled_randn(gen, n, kg) for kg in ks]
    aq = [hopperkit.per_token_cast_to_fp8(p) for p in a_parts]
    bq = [hopperkit.per_token_cast_to_fp8(p) for p in b_parts]
    a8 = torch.cat([x.flatten() for x, _ in aq])
    b8 = torch.cat([x.flatten() for x, _ in bq])
    sfa = torch.cat([s for _, s in aq], dim=1)
    sfb = torch.cat([s for _, s in bq], dim=1)
    c0 = torch.randn(len(ks), m, n, generator=gen, device=device) * 32
    return a_parts, b_parts, (a8, sfa), (b8, sfb), c0


def _ks_tensor(device, ks):
    return torch.tensor(ks, dtype=torch.int32, device=device)


def _check_k_grouped(name, d, a_parts, b_parts, a8, sfa, b8, sfb, ks, c0):
    """Each group against the reference on the same quantized operands and the unquantized product; an
    empty group must be C[g] exactly."""
    reference = ref_gemm.k_grouped_fp8_gemm_nt_contiguous(a8, sfa, b8, sfb, ks, c0)
    for g, kg in enumerate(ks):
        if kg == 0:
            assert torch.equal(d[g], c0[g]), f"{name}: empty group {g} must give D[g] = C[g]"
            continue
        unquantized = c0[g] + a_parts[g].float() @ b_parts[g].float().T
        assert_fp8_gemm_close(f"{name} group {g} (K={kg})", d[g], unquantized, reference[g])


def _run_k_grouped(device, m, n, ks, in_place, *key):
    a_parts, b_parts, (a8, sfa), (b8, sfb), c0 = _k_grouped_case(device, m, n, ks, *key)
    ks_tensor = torch.tensor(ks, dtype=torch.int32, device=device)
    if in_place:
        d = c0.clone()
        c = d
    else:
        c = c0.clone()
        d = poison_(torch.empty_like(c0))
    hopperkit.k_grouped_fp8_gemm_nt_contiguous((a8, sfa), (b8, sfb), d, ks, ks_tensor, c=c)
    if not in_place:
        assert torch.equal(c, c0), "C was modified (it is only read when it is not D)"
    _check_k_grouped(f"k-grouped M={m} N={n}", d, a_parts, b_parts, a8, sfa, b8, sfb, ks, c0)
    return d


def _ks(groups: int, expected_k: int) -> list[int]:
    """DeepGEMM's k-grouped sizes: expected × U(0.7, 1.3), aligned to 128."""
    gen = torch.Generator().manual_seed(zlib.crc32(repr(("ks", groups, expected_k)).encode()))
    return [int(expected_k * (0.7 + 0.6 * float(torch.rand(1, generator=gen)))) // 128 * 128 for _ in range(groups)]


# (G, M, N, expected K per group): DeepGEMM's EP64/EP32/EP16 list, sampled (one per pair of rows).
K_GROUPED = ((4, 7168, 2048, 8192), (8, 4096, 7168, 4096), (16, 7168, 2048, 2048))


@pytest.mark.parametrize("g,m,n,expected_k", K_GROUPED, ids=[f"G{g}-M{m}-N{n}-K{k}" for g, m, n, k in K_GROUPED])
def test_k_grouped_deepgemm_shapes(cuda, kernel_only, g, m, n, expected_k):
    ks = _ks(g, expected_k)
    _run_k_grouped(cuda, m, n, ks, True)


@pytest.mark.parametrize("in_place", [True, False], ids=["c_is_d", "c_separate"])
def test_k_grouped_empty_groups_and_edges(cuda, kernel_only, in_place):
    # Empty groups first, in the middle and last; M and N not multiples of the tile.
    _run_k_grouped(cuda, 300, 200, [0, 384, 0, 128, 1024, 0], in_place)
    _run_k_grouped(cuda, 4097, 2052, [256, 0, 640], in_place)


@pytest.mark.parametrize("config", CONFIGS, ids=[f"{bm}x{bn}" for bm, bn in CONFIGS])
def test_k_grouped_every_config(cuda, kernel_only, monkeypatch, config):
    monkeypatch.setenv("HOPPERKIT_FP8_1D1D_CONFIG", ",".join(map(str, config)))
    _run_k_grouped(cuda, 300, 2112, [384, 0, 128, 640], True, config)
    _run_k_grouped(cuda, 129, 200, [256, 128], False, config)


def test_k_grouped_small_m_and_repeatable(cuda, kernel_only):
    """M <= 64 takes the 64-row tiles; the same inputs give bitwise the same D."""
    ks = [512, 128, 0, 256]
    first = _run_k_grouped(cuda, 48, 576, ks, False, "repeat")
    second = _run_k_grouped(cuda, 48, 576, ks, False, "repeat")
    assert torch.equal(first, second)


def test_k_grouped_all_empty_is_copy(cuda, kernel_only):
    m, n, ks = 64, 128, [0, 0]
    c = torch.randn(2, m, n, device=cuda)
    d = poison_(torch.empty_like(c))
    empty = torch.empty(0, dtype=FP8, device=cuda)
    hopperkit.k_grouped_fp8_gemm_nt_contiguous((empty, torch.empty(m, 0, device=cuda)),
                                               (empty, torch.empty(n, 0, device=cuda)), d, ks,
                                               torch.zeros(2, dtype=torch.int32, device=cuda), c=c)
    assert torch.equal(d, c)


def test_k_grouped_op_without_c(cuda):
    """The op with c=None (the public API requires C): each group's tile is stored, not added, and an
    empty group's D[g] is written as zeros."""
    m, n, ks = 200, 136, [256, 0, 384, 0]
    a_parts, b_parts, (a8, sfa), (b8, sfb), c0 = _k_grouped_case(cuda, m, n, ks, "no_c")
    sfa_t, sfb_t = _op_scales(sfa, sfb)
    d = poison_(torch.empty(len(ks), m, n, device=cuda))
    torch.ops.hopperkit.k_grouped_fp8_gemm_nt_contiguous_1d1d(a8, sfa_t, b8, sfb_t, d, ks, _ks_tensor(cuda, ks),
                                                              None, hopperkit.get_num_sms(), False)
    reference = ref_gemm.k_grouped_fp8_gemm_nt_contiguous(a8, sfa, b8, sfb, ks, torch.zeros_like(c0))
    for g, kg in enumerate(ks):
        if kg == 0:
            assert torch.equal(d[g], torch.zeros_like(d[g])), f"empty group {g} without C: D[g] must be 0"
            continue
        assert_fp8_gemm_close(f"no C group {g} (K={kg})", d[g], a_parts[g].float() @ b_parts[g].float().T, reference[g])


def test_k_grouped_op_all_empty_without_c_and_pdl(cuda):
    """The op's Σks = 0 branch without C (D = 0), and pdl=True on a small k-grouped case with C = D."""
    m, n = 64, 128
    empty = torch.empty(0, dtype=FP8, device=cuda)
    op = torch.ops.hopperkit.k_grouped_fp8_gemm_nt_contiguous_1d1d
    sms = hopperkit.get_num_sms()
    d = poison_(torch.empty(2, m, n, device=cuda))
    op(empty, torch.empty(m, 0, device=cuda), empty, torch.empty(n, 0, device=cuda), d, [0, 0], _ks_tensor(cuda, [0, 0]),
       None, sms, False)
    assert torch.equal(d, torch.zeros_like(d)), "Σks = 0 without C must give D = 0"

    ks = [128, 0, 256]
    a_parts, b_parts, (a8, sfa), (b8, sfb), c0 = _k_grouped_case(cuda, m, n, ks, "pdl")
    sfa_t, sfb_t = _op_scales(sfa, sfb)
    d = c0.clone()
    op(a8, sfa_t, b8, sfb_t, d, ks, _ks_tensor(cuda, ks), d, sms, True)
    reference = ref_gemm.k_grouped_fp8_gemm_nt_contiguous(a8, sfa, b8, sfb, ks, c0)
    assert torch.equal(d[1], c0[1]), "empty group with C: D[g] must stay C[g]"
    for g in (0, 2):
        assert_fp8_gemm_close(f"pdl group {g}", d[g], c0[g] + a_parts[g].float() @ b_parts[g].float().T, reference[g])


def test_k_grouped_graph_replays_other_sizes(cuda, kernel_only):
    """One capture serves any group sizes of the same total: the kernel reads them from ks_tensor on
    the device. Each replay gets new operands (copied into the captured buffers) split another way,
    empty groups included, and must match the reference for that split."""
    m, n, captured = 192, 264, [256, 384, 0, 128]
    _, _, (a8, sfa), (b8, sfb), c = _k_grouped_case(cuda, m, n, captured, "graph")
    ks_tensor = _ks_tensor(cuda, captured)
    d = poison_(torch.empty_like(c))
    graph, _ = capture_graph(
        lambda: hopperkit.k_grouped_fp8_gemm_nt_contiguous((a8, sfa), (b8, sfb), d, captured, ks_tensor, c=c))
    for ks in ([128, 0, 512, 128], [0, 0, 0, 768], [768, 0, 0, 0], captured):
        a_parts, b_parts, (a_new, sfa_new), (b_new, sfb_new), c_new = _k_grouped_case(cuda, m, n, ks, "replay")
        for buf, new in ((a8, a_new), (sfa, sfa_new), (b8, b_new), (sfb, sfb_new), (c, c_new), (ks_tensor, _ks_tensor(cuda, ks))):
            buf.copy_(new)
        poison_(d)
        graph.replay()
        torch.cuda.synchronize()
        _check_k_grouped(f"replay {ks}", d, a_parts, b_parts, a8, sfa, b8, sfb, ks, c_new)


def test_k_grouped_device_sizes_out_of_contract(cuda, kernel_only):
    """ks_tensor disagreeing with ks (value checks off, so nothing reads it back): an entry that is not
    a non-negative multiple of 128 counts as 0 and every group's range is cut at Σks, so the kernel
    computes that split of the buffers and never reads past them."""
    m, n, ks = 128, 256, [256, 128, 384]
    _, _, (a8, sfa), (b8, sfb), c0 = _k_grouped_case(cuda, m, n, ks, "out of contract")
    cases = (([1024, 128, 384], [768, 0, 0]), ([100, -128, 768], [0, 0, 768]), ([256, 256, 512], [256, 256, 256]))
    for device_ks, effective in cases:
        d = c0.clone()
        hopperkit.k_grouped_fp8_gemm_nt_contiguous((a8, sfa), (b8, sfb), d, ks, _ks_tensor(cuda, device_ks), c=d)
        reference = ref_gemm.k_grouped_fp8_gemm_nt_contiguous(a8, sfa, b8, sfb, effective, c0)
        for g, kg in enumerate(effective):
            if kg == 0:
                assert torch.equal(d[g], c0[g]), f"device ks {device_ks}: group {g} must be empty"
                continue
            # The reference on the same FP8 operands is the check here (no unquantized parts of this split).
            assert_fp8_gemm_close(f"device ks {device_ks} group {g}", d[g], reference[g], reference[g])


def test_k_grouped_bad_inputs(cuda, monkeypatch):
    m, n, ks = 64, 128, [128, 256]
    _, _, (a8, sfa), (b8, sfb), c0 = _k_grouped_case(cuda, m, n, ks, "bad")
    kt = torch.tensor(ks, dtype=torch.int32, device=cuda)
    d = c0.clone()
    call = hopperkit.k_grouped_fp8_gemm_nt_contiguous
    with pytest.raises(ValueError, match=r"hopperkit: ks_cpu must be non-negative multiples of 128"):
        call((a8, sfa), (b8, sfb), d, [128, 200], kt, c=d)
    with pytest.raises(ValueError, match=r"hopperkit: ks_cpu must be 2 entries"):
        call((a8, sfa), (b8, sfb), d, [384], kt, c=d)
    with pytest.raises(ValueError, match=r"hopperkit: a\[0\] must be"):
        call((a8[:-16], sfa), (b8, sfb), d, ks, kt, c=d)
    with pytest.raises(ValueError, match=r"hopperkit: b\[1\] must"):
        call((a8, sfa), (b8, sfb[:, :2]), d, ks, kt, c=d)
    with pytest.raises(ValueError, match=r"hopperkit: c must be"):
        call((a8, sfa), (b8, sfb), d, ks, kt, c=None)
    with pytest.raises(ValueError, match=r"hopperkit: recipe must be"):
        call((a8, sfa), (b8, sfb), d, ks, kt, c=d, recipe=(1, 128, 128))
    monkeypatch.setenv("HOPPERKIT_CHECK_VALUES", "1")
    with pytest.raises(ValueError, match=r"hopperkit: grouped_layout must be the same values as ks_cpu"):
        call((a8, sfa), (b8, sfb), d, ks, torch.tensor([256, 128], dtype=torch.int32, device=cuda), c=d)
    # The op's own checks (what the Python layer would otherwise catch first).
    op = torch.ops.hopperkit.k_grouped_fp8_gemm_nt_contiguous_1d1d
    sfa_t, sfb_t = hopperkit.get_mn_major_tma_aligned_tensor(sfa), hopperkit.get_mn_major_tma_aligned_tensor(sfb)
    sms = hopperkit.get_num_sms()
    with pytest.raises(ValueError, match="hopperkit: ks\\[1\\] must be a non-negative multiple of 128"):
        op(a8, sfa_t, b8, sfb_t, d, [128, 100], kt, d, sms, False)
    with pytest.raises(ValueError, match="hopperkit: sfa must be"):
        op(a8, sfa.contiguous(), b8, sfb_t, d, ks, kt, d, sms, False)
    with pytest.raises(ValueError, match="hopperkit: b must be a contiguous FP8 buffer"):
        op(a8, sfa_t, b8[:-128], sfb_t, d, ks, kt, d, sms, False)
    with pytest.raises(ValueError, match="hopperkit: ks_tensor must be a contiguous int32 \\[2\\] tensor"):
        op(a8, sfa_t, b8, sfb_t, d, ks, kt[:1], d, sms, False)
    with pytest.raises(TypeError, match="hopperkit: ks_tensor must be Int"):
        op(a8, sfa_t, b8, sfb_t, d, ks, kt.long(), d, sms, False)
    with pytest.raises(ValueError, match="hopperkit: d must not overlap itself"):  # groups 32 rows apart, 64 rows each
        op(a8, sfa_t, b8, sfb_t, d.view(-1)[: 96 * n].as_strided((2, m, n), (32 * n, n, 1)), ks, kt, None, sms, False)
    shared = torch.randn(2 * m * n + n, device=cuda)  # C one row behind D in one buffer
    with pytest.raises(ValueError, match="hopperkit: c must be d itself"):
        op(a8, sfa_t, b8, sfb_t, shared[: 2 * m * n].view(2, m, n), ks, kt, shared[n:].view(2, m, n), sms, False)
    assert torch.equal(d, c0), "a rejected call wrote D"
