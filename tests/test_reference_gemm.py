"""CPU tests of hopperkit.reference.gemm against independent float64 formulations.

Tolerances are rigorous error bounds, not statistical guesses, so no seed can make them flake.
Higham's bound for summing n float32 terms in any order is (n-1)·u·Σ|terms| + O(u²), u = 2⁻²⁴.
The two-level FP8 accumulation rounds at most 127 times inside a 128-wide K block, twice forming and
applying the scale sfa·sfb, and once per K block into the accumulator, so the float32 result is within
(128 + 2 + KB)·u·Σ_k|a_k·b_k·sfa·sfb| of the exact float64 value (8 extra units absorb the O(u²)
terms); for K = 7168 that is ≈ 1.1e-5 relative to the sum of absolute products. A bf16 output adds
one rounding, relative error ≤ 2⁻⁸.
"""

from __future__ import annotations

import math

import pytest
import torch

from hopperkit.reference import gemm as ref_gemm
from hopperkit.reference.layout import get_mn_major_tma_aligned_tensor
from hopperkit.reference.quant import per_block_cast_to_fp8, per_token_cast_to_fp8
from hopperkit.testing import calc_diff, poison_

U32 = 2.0**-24
U_BF16 = 2.0**-8
FP8 = torch.float8_e4m3fn


def _randn(seed: int, *shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Random data with a spread of magnitudes across rows, so K blocks get different scales."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=gen, dtype=torch.float32)
    row_scale = torch.exp(torch.randn(*shape[:-1], 1, generator=gen))
    return (x * row_scale).to(dtype)


def _rows64(x_fp8: torch.Tensor, sf_rows: torch.Tensor, k: int) -> torch.Tensor:
    """Dequantize [R, K] with per-row 1×128 scales [R, KB] in float64."""
    return x_fp8.double() * sf_rows.double().repeat_interleave(128, dim=-1)[..., :k]


def _block_rows(sfb: torch.Tensor, n: int) -> torch.Tensor:
    return sfb.repeat_interleave(128, dim=-2)[..., :n, :]


def _two_level64(a, sfa, b, sfb_rows):
    """Exact (float64) value and Σ|terms| of Σ_kb sfa·sfb·(A_kb·B_kbᵀ), with explicit K-block loops."""
    k = a.shape[-1]
    a64, b64 = a.double(), b.double()
    value = torch.zeros(a.shape[0], b.shape[0], dtype=torch.float64)
    magnitude = torch.zeros_like(value)
    for kb in range(math.ceil(k / 128)):
        cols = slice(kb * 128, min(k, kb * 128 + 128))
        scale = sfa[:, kb].double()[:, None] * sfb_rows[:, kb].double()[None, :]
        value += scale * torch.einsum("mk,nk->mn", a64[:, cols], b64[:, cols])
        magnitude += scale.abs() * torch.einsum("mk,nk->mn", a64[:, cols].abs(), b64[:, cols].abs())
    return value, magnitude


def _fp32_bound(magnitude: torch.Tensor, k: int) -> torch.Tensor:
    return (128 + 2 + math.ceil(k / 128) + 8) * U32 * magnitude + 1e-30


def _assert_within(name: str, out: torch.Tensor, exact: torch.Tensor, bound: torch.Tensor) -> None:
    out64 = out.double()
    assert not torch.isnan(out64).any(), f"{name}: NaN in output"
    err = (out64 - exact).abs()
    worst = (err / bound).max().item() if err.numel() else 0.0
    assert worst <= 1.0, f"{name}: error {worst:.3g}x the bound"


def _bf16_bound(exact: torch.Tensor, fp32_bound: torch.Tensor) -> torch.Tensor:
    # |bf16(o) - x| <= u_bf16·|o| + |o - x| <= u_bf16·(|x| + e) + e
    return U_BF16 * (exact.abs() + fp32_bound) + fp32_bound + 1e-30


def _quant_a(seed: int, m: int, k: int):
    return per_token_cast_to_fp8(_randn(seed, m, k))


# ------------------------------------------------------------------------------------------------
# dense FP8
# ------------------------------------------------------------------------------------------------

DENSE_SHAPES = [(1, 200, 320), (7, 256, 128), (7, 200, 7168), (128, 200, 1000), (33, 136, 64)]


@pytest.mark.parametrize("m,n,k", DENSE_SHAPES)
def test_fp8_1d2d_matches_float64(m, n, k):
    seed = m * 100_003 + n * 101 + k
    a, sfa = _quant_a(seed, m, k)
    b, sfb = per_block_cast_to_fp8(_randn(seed + 1, n, k))
    exact, magnitude = _two_level64(a, sfa, b, _block_rows(sfb, n))
    bound = _fp32_bound(magnitude, k)

    out32 = ref_gemm.fp8_gemm_nt(a, sfa, b, sfb, out_dtype=torch.float32)
    assert out32.dtype == torch.float32 and out32.shape == (m, n)
    _assert_within("1d2d fp32", out32, exact, bound)

    out = ref_gemm.fp8_gemm_nt(a, sfa, b, sfb)
    assert out.dtype == torch.bfloat16
    _assert_within("1d2d bf16", out, exact, _bf16_bound(exact, bound))
    # Contract: the bf16 output is the float32 accumulator rounded once.
    assert torch.equal(out, out32.to(torch.bfloat16))


def test_fp8_1d2d_any_sf_strides():
    m, n, k = 7, 200, 320
    a, sfa = _quant_a(11, m, k)
    b, sfb = per_block_cast_to_fp8(_randn(12, n, k))
    expected = ref_gemm.fp8_gemm_nt(a, sfa, b, sfb, out_dtype=torch.float32)
    sfa_mn = get_mn_major_tma_aligned_tensor(sfa)
    assert sfa_mn.stride() == (1, 8)
    sfb_t = sfb.t().contiguous().t()
    assert torch.equal(ref_gemm.fp8_gemm_nt(a, sfa_mn, b, sfb_t, out_dtype=torch.float32), expected)


@pytest.mark.parametrize("m,n,k", [(1, 200, 320), (7, 256, 7168), (64, 72, 256)])
def test_fp8_1d1d_adds_c(m, n, k):
    seed = 7 * m + 13 * n + k
    a, sfa = _quant_a(seed, m, k)
    b, sfb = per_token_cast_to_fp8(_randn(seed + 1, n, k))
    c = _randn(seed + 2, m, n, dtype=torch.float32) * 32
    exact, magnitude = _two_level64(a, sfa, b, sfb)
    exact = exact + c.double()
    # One more float32 rounding for the final C + acc.
    bound = _fp32_bound(magnitude, k) + U32 * (c.double().abs() + magnitude) * 2

    out = ref_gemm.fp8_gemm_nt(a, sfa, b, sfb, c, recipe=(1, 1, 128))
    assert out.dtype == torch.float32 and out.shape == (m, n)
    _assert_within("1d1d", out, exact, bound)
    # Contract: C is added once, after the K loop, with one float32 addition.
    acc = ref_gemm.fp8_gemm_nt(a, sfa, b, sfb, torch.zeros_like(c), recipe=(1, 1, 128))
    assert torch.equal(out, c + acc)
    assert not torch.equal(out, acc)


def test_fp8_1d1d_k0_returns_c():
    c = _randn(3, 5, 16, dtype=torch.float32)
    c[0, 0] = -0.0
    a = torch.empty(5, 0, dtype=FP8)
    b = torch.empty(16, 0, dtype=FP8)
    out = ref_gemm.fp8_gemm_nt(a, torch.empty(5, 0), b, torch.empty(16, 0), c, recipe=(1, 1, 128))
    assert torch.equal(out, c) and out is not c
    assert math.copysign(1.0, out[0, 0].item()) == -1.0


def test_fp8_accuracy_contract_vs_unquantized():
    """DeepGEMM's contract: calc_diff against the bf16 product of the unquantized inputs < 1e-3."""
    m, n, k = 128, 512, 1024
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(21), dtype=torch.float32).bfloat16()
    w = torch.randn(n, k, generator=torch.Generator().manual_seed(22), dtype=torch.float32).bfloat16()
    product = x.float() @ w.float().t()

    a, sfa = per_token_cast_to_fp8(x)
    b, sfb = per_block_cast_to_fp8(w)
    out = ref_gemm.fp8_gemm_nt(a, sfa, b, sfb)
    assert calc_diff(out, product.bfloat16()) < 1e-3

    b1, sfb1 = per_token_cast_to_fp8(w)
    c = torch.randn(m, n, generator=torch.Generator().manual_seed(23)) * 32
    out1 = ref_gemm.fp8_gemm_nt(a, sfa, b1, sfb1, c, recipe=(1, 1, 128))
    assert calc_diff(out1, product + c) < 1e-3


# ------------------------------------------------------------------------------------------------
# dense BF16
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("m,n,k", [(1, 200, 320), (7, 256, 7168), (64, 200, 64)])
@pytest.mark.parametrize("c_dtype", [None, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_bf16_gemm(m, n, k, c_dtype, out_dtype):
    seed = m + 3 * n + 5 * k
    a, b = _randn(seed, m, k), _randn(seed + 1, n, k)
    exact = a.double() @ b.double().t()
    bound = (k + 8) * U32 * (a.double().abs() @ b.double().abs().t())
    c = None
    if c_dtype is not None:
        c = (_randn(seed + 2, m, n, dtype=torch.float32) * 32).to(c_dtype)
        exact = exact + c.double()
        bound = bound + 2 * U32 * (c.double().abs() + exact.abs())
    out = ref_gemm.bf16_gemm_nt(a, b, c, out_dtype=out_dtype)
    assert out.dtype == out_dtype and out.shape == (m, n)
    if out_dtype == torch.bfloat16:
        bound = _bf16_bound(exact, bound)
    _assert_within("bf16", out, exact, bound)


# ------------------------------------------------------------------------------------------------
# m-grouped contiguous
# ------------------------------------------------------------------------------------------------


def _contiguous_layout(group_m, alignment=128, tail=0):
    """m_indices (-1 on padding), psum end offsets and row ranges for the given per-group rows."""
    starts, ends, end = [], [], 0
    for mg in group_m:
        start = -(-end // alignment) * alignment
        starts.append(start)
        end = start + mg
        ends.append(end)
    m_sum = -(-end // alignment) * alignment + tail
    m_indices = torch.full((m_sum,), -1, dtype=torch.int32)
    for g, (s, e) in enumerate(zip(starts, ends)):
        m_indices[s:e] = g
    return m_indices, torch.tensor(ends, dtype=torch.int32), list(zip(starts, ends))


GROUPED_CASES = [
    # (per-group rows, N, K)
    ([130, 0, 1, 77], 200, 320),
    ([128, 7], 256, 128),
    ([0, 0, 5], 136, 256),
]


@pytest.mark.parametrize("group_m,n,k", GROUPED_CASES)
def test_m_grouped_fp8_contiguous(group_m, n, k):
    seed = sum(group_m) + n + k
    groups = len(group_m)
    m_indices, psum, ranges = _contiguous_layout(group_m, tail=128)
    m_sum = m_indices.numel()
    a, sfa = _quant_a(seed, m_sum, k)
    padding = m_indices == -1
    a[padding] = poison_(torch.empty(int(padding.sum()), k, dtype=FP8))
    sfa[padding] = float("nan")
    b = torch.empty(groups, n, k, dtype=FP8)
    sfb = torch.empty(groups, math.ceil(n / 128), math.ceil(k / 128))
    for g in range(groups):
        b[g], sfb[g] = per_block_cast_to_fp8(_randn(seed + 1 + g, n, k))

    out = ref_gemm.m_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, m_indices)
    assert out.dtype == torch.bfloat16 and out.shape == (m_sum, n)
    assert not torch.isnan(out).any()
    assert torch.equal(out[padding], torch.zeros_like(out[padding]))
    for g, (s, e) in enumerate(ranges):
        if e == s:
            continue
        exact, magnitude = _two_level64(a[s:e], sfa[s:e], b[g], _block_rows(sfb[g], n))
        _assert_within(f"group {g}", out[s:e], exact, _bf16_bound(exact, _fp32_bound(magnitude, k)))

    # The psum layout describes the same rows.
    assert torch.equal(ref_gemm.m_indices_from_psum(psum, m_sum), m_indices)


@pytest.mark.parametrize("alignment", [128, 64, 1])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_m_indices_from_psum(alignment, seed):
    gen = torch.Generator().manual_seed(seed)
    groups = int(torch.randint(1, 9, (1,), generator=gen))
    group_m = torch.randint(0, 300, (groups,), generator=gen).tolist()
    group_m[int(torch.randint(0, groups, (1,), generator=gen))] = 0
    m_indices, psum, _ = _contiguous_layout(group_m, alignment, tail=3)
    assert torch.equal(ref_gemm.m_indices_from_psum(psum, m_indices.numel(), alignment), m_indices)


def test_m_indices_from_psum_no_groups():
    out = ref_gemm.m_indices_from_psum(torch.empty(0, dtype=torch.int32), 5)
    assert torch.equal(out, torch.full((5,), -1, dtype=torch.int32))


def test_m_grouped_bf16_contiguous():
    group_m, n, k = [130, 0, 1, 77], 200, 320
    m_indices, _, ranges = _contiguous_layout(group_m)
    m_sum = m_indices.numel()
    a = _randn(31, m_sum, k)
    padding = m_indices == -1
    a[padding] = float("nan")
    b = _randn(32, len(group_m), n, k)
    out = ref_gemm.m_grouped_bf16_gemm_nt_contiguous(a, b, m_indices)
    assert out.dtype == torch.bfloat16 and out.shape == (m_sum, n)
    assert not torch.isnan(out).any()
    assert torch.equal(out[padding], torch.zeros_like(out[padding]))
    for g, (s, e) in enumerate(ranges):
        a64, b64 = a[s:e].double(), b[g].double()
        exact = a64 @ b64.t()
        bound = _bf16_bound(exact, (k + 8) * U32 * (a64.abs() @ b64.abs().t()))
        _assert_within(f"group {g}", out[s:e], exact, bound)


# ------------------------------------------------------------------------------------------------
# m-grouped masked
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("masked,m_max,n,k", [([0, 7, 40], 40, 200, 320), ([1, 0], 8, 256, 128)])
def test_m_grouped_fp8_masked(masked, m_max, n, k):
    groups = len(masked)
    seed = m_max * 7 + n + k
    a = torch.empty(groups, m_max, k, dtype=FP8)
    sfa = torch.empty(groups, m_max, math.ceil(k / 128))
    b = torch.empty(groups, n, k, dtype=FP8)
    sfb = torch.empty(groups, math.ceil(n / 128), math.ceil(k / 128))
    for g in range(groups):
        a[g], sfa[g] = _quant_a(seed + 2 * g, m_max, k)
        b[g], sfb[g] = per_block_cast_to_fp8(_randn(seed + 2 * g + 1, n, k))
        poison_(a[g, masked[g]:])
        sfa[g, masked[g]:] = float("nan")
    masked_m = torch.tensor(masked, dtype=torch.int32)

    out = ref_gemm.m_grouped_fp8_gemm_nt_masked(a, sfa, b, sfb, masked_m)
    assert out.dtype == torch.bfloat16 and out.shape == (groups, m_max, n)
    assert not torch.isnan(out).any()
    for g, mg in enumerate(masked):
        assert torch.equal(out[g, mg:], torch.zeros_like(out[g, mg:]))
        if mg:
            exact, magnitude = _two_level64(a[g, :mg], sfa[g, :mg], b[g], _block_rows(sfb[g], n))
            _assert_within(f"group {g}", out[g, :mg], exact, _bf16_bound(exact, _fp32_bound(magnitude, k)))


def test_m_grouped_bf16_masked():
    masked, m_max, n, k = [0, 7, 40], 40, 200, 320
    a = _randn(41, len(masked), m_max, k)
    b = _randn(42, len(masked), n, k)
    for g, mg in enumerate(masked):
        a[g, mg:] = float("nan")
    out = ref_gemm.m_grouped_bf16_gemm_nt_masked(a, b, torch.tensor(masked, dtype=torch.int32))
    assert out.dtype == torch.bfloat16 and out.shape == (len(masked), m_max, n)
    assert not torch.isnan(out).any()
    for g, mg in enumerate(masked):
        assert torch.equal(out[g, mg:], torch.zeros_like(out[g, mg:]))
        a64, b64 = a[g, :mg].double(), b[g].double()
        exact = a64 @ b64.t()
        bound = _bf16_bound(exact, (k + 8) * U32 * (a64.abs() @ b64.abs().t()))
        _assert_within(f"group {g}", out[g, :mg], exact, bound)


# ------------------------------------------------------------------------------------------------
# k-grouped
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ks,m,n", [([128, 0, 384, 256], 7, 200), ([0], 1, 8), ([256, 128], 1, 136)])
@pytest.mark.parametrize("flat", [True, False])
def test_k_grouped_fp8(ks, m, n, flat):
    seed = sum(ks) + m + n
    a_parts, sfa_parts, b_parts, sfb_parts = [], [], [], []
    for g, kg in enumerate(ks):
        a_g, sfa_g = _quant_a(seed + 2 * g, m, kg)
        b_g, sfb_g = per_token_cast_to_fp8(_randn(seed + 2 * g + 1, n, kg))
        a_parts.append(a_g)
        sfa_parts.append(sfa_g)
        b_parts.append(b_g)
        sfb_parts.append(sfb_g)
    a = torch.cat([p.reshape(-1) for p in a_parts])
    b = torch.cat([p.reshape(-1) for p in b_parts])
    if not flat and a.numel() % 2 == 0 and b.numel() % 2 == 0:
        a, b = a.view(2, -1), b.view(-1, 2)
    sfa, sfb = torch.cat(sfa_parts, dim=1), torch.cat(sfb_parts, dim=1)
    c = _randn(seed + 99, len(ks), m, n, dtype=torch.float32) * 32

    out = ref_gemm.k_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, ks, c)
    assert out.dtype == torch.float32 and out.shape == c.shape
    for g, kg in enumerate(ks):
        if kg == 0:
            assert torch.equal(out[g], c[g])
            continue
        exact, magnitude = _two_level64(a_parts[g], sfa_parts[g], b_parts[g], sfb_parts[g])
        exact = exact + c[g].double()
        bound = _fp32_bound(magnitude, kg) + 2 * U32 * (c[g].double().abs() + magnitude)
        _assert_within(f"group {g}", out[g], exact, bound)


# ------------------------------------------------------------------------------------------------
# no host synchronization, argument errors
# ------------------------------------------------------------------------------------------------


def test_device_tensor_ops_never_read_data():
    """On the meta device there is no data: any .item()/nonzero()/mask indexing would raise."""
    meta = torch.device("meta")

    def fp8(*shape):
        return torch.empty(*shape, dtype=FP8, device=meta)

    def f32(*shape):
        return torch.empty(*shape, dtype=torch.float32, device=meta)

    def i32(*shape):
        return torch.empty(*shape, dtype=torch.int32, device=meta)

    out = ref_gemm.m_grouped_fp8_gemm_nt_contiguous(fp8(256, 320), f32(256, 3), fp8(3, 200, 320), f32(3, 2, 3), i32(256))
    assert out.shape == (256, 200) and out.dtype == torch.bfloat16
    out = ref_gemm.m_grouped_fp8_gemm_nt_masked(fp8(3, 40, 320), f32(3, 40, 3), fp8(3, 200, 320), f32(3, 2, 3), i32(3))
    assert out.shape == (3, 40, 200)
    bf = dict(dtype=torch.bfloat16, device=meta)
    out = ref_gemm.m_grouped_bf16_gemm_nt_contiguous(torch.empty(256, 64, **bf), torch.empty(3, 24, 64, **bf), i32(256))
    assert out.shape == (256, 24)
    out = ref_gemm.m_grouped_bf16_gemm_nt_masked(torch.empty(3, 40, 64, **bf), torch.empty(3, 24, 64, **bf), i32(3))
    assert out.shape == (3, 40, 24)
    assert ref_gemm.m_indices_from_psum(i32(5), 640).shape == (640,)
    out = ref_gemm.k_grouped_fp8_gemm_nt_contiguous(fp8(7 * 384), f32(7, 3), fp8(8 * 384), f32(8, 3), [128, 0, 256], f32(3, 7, 8))
    assert out.shape == (3, 7, 8)
    out = ref_gemm.fp8_gemm_nt(fp8(7, 320), f32(7, 3), fp8(200, 320), f32(200, 3), f32(7, 200), recipe=(1, 1, 128))
    assert out.shape == (7, 200)
    with pytest.raises(Exception):
        i32(3).sum().item()  # the meta device really does refuse host reads


def _errors():
    a, sfa = torch.zeros(4, 256, dtype=FP8), torch.ones(4, 2)
    b, sfb = torch.zeros(8, 256, dtype=FP8), torch.ones(1, 2)
    c = torch.zeros(4, 8)
    b3, sfb3 = torch.zeros(2, 8, 256, dtype=FP8), torch.ones(2, 1, 2)
    mi = torch.zeros(4, dtype=torch.int32)
    bf = torch.zeros(4, 256, dtype=torch.bfloat16)
    return [
        (TypeError, "a must be", lambda: ref_gemm.fp8_gemm_nt(a.float(), sfa, b, sfb)),
        (ValueError, "sfa must have shape", lambda: ref_gemm.fp8_gemm_nt(a, sfa[:, :1], b, sfb)),
        (ValueError, "sfb must have shape", lambda: ref_gemm.fp8_gemm_nt(a, sfa, b, torch.ones(8, 2))),
        (ValueError, "c must be None", lambda: ref_gemm.fp8_gemm_nt(a, sfa, b, sfb, c)),
        (ValueError, "c (float32 [M, N]) is required", lambda: ref_gemm.fp8_gemm_nt(a, sfa, b, torch.ones(8, 2), recipe=(1, 1, 128))),
        (ValueError, "recipe must be", lambda: ref_gemm.fp8_gemm_nt(a, sfa, b, sfb, recipe=(1, 128, 32))),
        (ValueError, "out_dtype", lambda: ref_gemm.fp8_gemm_nt(a, sfa, b, sfb, out_dtype=torch.float16)),
        (ValueError, "b must be [N, K]", lambda: ref_gemm.fp8_gemm_nt(a, sfa, b[:, :128], sfb)),
        (TypeError, "m_indices must be", lambda: ref_gemm.m_grouped_fp8_gemm_nt_contiguous(a, sfa, b3, sfb3, mi.long())),
        (ValueError, "m_indices must have shape", lambda: ref_gemm.m_grouped_fp8_gemm_nt_contiguous(a, sfa, b3, sfb3, mi[:3])),
        (ValueError, "masked_m must have shape", lambda: ref_gemm.m_grouped_fp8_gemm_nt_masked(a.view(1, 4, 256), sfa.view(1, 4, 2), b3[:1], sfb3[:1], mi)),
        (ValueError, "ks[1] must be", lambda: ref_gemm.k_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, [128, 100], torch.zeros(2, 4, 8))),
        (ValueError, "a must hold", lambda: ref_gemm.k_grouped_fp8_gemm_nt_contiguous(a, sfa, b, torch.ones(8, 1), [128], torch.zeros(1, 4, 8))),
        (TypeError, "b must be", lambda: ref_gemm.bf16_gemm_nt(bf, b)),
        (ValueError, "psum must be 1-D", lambda: ref_gemm.m_indices_from_psum(mi.view(2, 2), 8)),
    ]


@pytest.mark.parametrize("case", range(len(_errors())))
def test_argument_errors(case):
    exc, fragment, call = _errors()[case]
    with pytest.raises(exc) as info:
        call()
    message = str(info.value)
    assert message.startswith("hopperkit: ") and fragment in message, message


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_grouped_references_capture_in_cuda_graph():
    """No host sync (sync debug mode 'error'), capturable, and equal to the CPU run up to fp32 order."""
    m_indices, psum, _ = _contiguous_layout([130, 0, 1, 77])
    a, sfa = _quant_a(51, m_indices.numel(), 320)
    padding = m_indices == -1
    a[padding] = poison_(torch.empty(int(padding.sum()), 320, dtype=FP8))
    b = torch.empty(4, 200, 320, dtype=FP8)
    sfb = torch.empty(4, 2, 3)
    for g in range(4):
        b[g], sfb[g] = per_block_cast_to_fp8(_randn(52 + g, 200, 320))
    a3, sfa3 = _quant_a(60, 4 * 40, 320)
    a3, sfa3 = a3.view(4, 40, 320), sfa3.view(4, 40, 3)
    masked_m = torch.tensor([0, 7, 40, 3], dtype=torch.int32)
    inputs = (a, sfa, b, sfb, m_indices, psum, a3, sfa3, masked_m)

    def run(a, sfa, b, sfb, m_indices, psum, a3, sfa3, masked_m):
        return (
            ref_gemm.m_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, m_indices),
            ref_gemm.m_indices_from_psum(psum, m_indices.numel()),
            ref_gemm.m_grouped_fp8_gemm_nt_masked(a3, sfa3, b, sfb, masked_m),
            ref_gemm.m_grouped_bf16_gemm_nt_masked(a3.bfloat16(), b.bfloat16(), masked_m),
        )

    cpu = run(*inputs)
    cuda_inputs = [t.cuda() for t in inputs]
    torch.cuda.set_sync_debug_mode("error")
    try:
        eager = run(*cuda_inputs)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = run(*cuda_inputs)
    graph.replay()
    torch.cuda.synchronize()
    for c, e, r in zip(cpu, eager, captured):
        assert torch.equal(e, r)
        assert not e.float().isnan().any()
        if c.dtype == torch.int32:
            assert torch.equal(e.cpu(), c)
        else:
            assert calc_diff(e.cpu(), c) < 1e-6
