"""Fused FP8 casts (csrc/quant): the CUDA kernels are bit-identical to hopperkit.reference.quant run on
the same GPU tensors (fp8 bytes and scale bits), the per-token scales come back MN-major and TMA-aligned
with zero padding rows, and the fake (meta) registrations match the kernels' shapes and strides.
The CPU tests check the public wrappers' reference path and the fakes without a GPU."""

from __future__ import annotations

import math

import pytest
import torch

import hopperkit
from hopperkit import _ops
from hopperkit.reference import quant as ref_quant

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
MS = [1, 7, 128, 4097]
NS = [128, 200, 7168, 16384 + 64]


def _align4(v: int) -> int:
    return (v + 3) // 4 * 4


def make_input(m: int, n: int, dtype: torch.dtype, seed: int, device) -> torch.Tensor:
    """Random rows whose magnitudes span many decades, a few outliers per row, all-zero rows, rows of
    tiny values (the amax clamp), and an all-zero 128-column block inside otherwise normal rows."""
    gen = torch.Generator(device=device).manual_seed(seed)
    lo, hi = (-3.0, 2.0) if dtype == torch.float16 else (-6.0, 6.0)
    x = torch.randn(m, n, generator=gen, device=device)
    x *= torch.pow(10.0, lo + (hi - lo) * torch.rand(m, 1, generator=gen, device=device))
    k = max(1, n // 512)
    cols = torch.randint(0, n, (m, k), generator=gen, device=device)
    outliers = torch.randn(m, k, generator=gen, device=device) * 100 * x.abs().amax(dim=1, keepdim=True)
    x.scatter_(1, cols, outliers)
    rows = torch.arange(m, device=device)
    x[rows % 5 == 1] = 0.0
    x[rows % 5 == 3] *= 1e-5 / x[rows % 5 == 3].abs().amax(dim=1, keepdim=True).clamp(min=1e-30)
    if n > 256:
        x[rows % 7 == 2, 128:256] = 0.0
    if dtype == torch.float16:
        x = x.clamp(-60000.0, 60000.0)
    return x.to(dtype)


def _poison_allocator(device, *numels_bytes: int) -> None:
    """Allocate NaN-filled blocks of these sizes and free them, so the next allocations of the same sizes
    (the kernel's outputs) likely reuse poisoned memory: an element the kernel forgets to write shows."""
    junk = [torch.full((max(1, b),), 0xFF, dtype=torch.uint8, device=device) for b in numels_bytes]
    del junk


def check_per_token(x: torch.Tensor, use_ue8m0: bool) -> None:
    m, n = x.shape
    nb, am = -(-n // 128), _align4(m)
    _poison_allocator(x.device, m * n, nb * am * 4)
    x_fp8, sf = torch.ops.hopperkit.per_token_cast_to_fp8(x, use_ue8m0)
    ref_fp8, ref_sf = ref_quant.per_token_cast_to_fp8(x, use_ue8m0=use_ue8m0)
    assert x_fp8.dtype == torch.float8_e4m3fn and x_fp8.shape == (m, n) and x_fp8.is_contiguous()
    assert sf.dtype == torch.float32 and sf.shape == (m, nb)
    assert sf.stride() == (1, am), f"scales must be MN-major, TMA-aligned: strides {sf.stride()} != (1, {am})"
    assert sf.untyped_storage().nbytes() >= nb * am * 4
    storage = torch.as_strided(sf, (nb, am), (am, 1))
    assert torch.equal(storage[:, m:], torch.zeros_like(storage[:, m:])), "padding rows of the scales must be 0"
    bad = x_fp8.view(torch.uint8) != ref_fp8.view(torch.uint8)
    assert not bad.any(), (
        f"fp8 bytes differ at {int(bad.sum())} of {bad.numel()} positions, first {bad.nonzero()[:5].tolist()}: "
        f"kernel {x_fp8.view(torch.uint8)[bad][:5].tolist()} reference {ref_fp8.view(torch.uint8)[bad][:5].tolist()}"
    )
    assert torch.equal(sf.contiguous().view(torch.int32), ref_sf.view(torch.int32)), "scale bits differ"


def check_per_block(x: torch.Tensor, use_ue8m0: bool) -> None:
    m, n = x.shape
    _poison_allocator(x.device, m * n, -(-m // 128) * -(-n // 128) * 4)
    x_fp8, sf = torch.ops.hopperkit.per_block_cast_to_fp8(x, use_ue8m0)
    ref_fp8, ref_sf = ref_quant.per_block_cast_to_fp8(x, use_ue8m0=use_ue8m0)
    assert x_fp8.dtype == torch.float8_e4m3fn and x_fp8.shape == (m, n) and x_fp8.is_contiguous()
    assert sf.shape == ref_sf.shape and sf.is_contiguous()
    bad = x_fp8.view(torch.uint8) != ref_fp8.view(torch.uint8)
    assert not bad.any(), (
        f"fp8 bytes differ at {int(bad.sum())} of {bad.numel()} positions, first {bad.nonzero()[:5].tolist()}: "
        f"kernel {x_fp8.view(torch.uint8)[bad][:5].tolist()} reference {ref_fp8.view(torch.uint8)[bad][:5].tolist()}"
    )
    assert torch.equal(sf.view(torch.int32), ref_sf.view(torch.int32)), "scale bits differ"


@pytest.mark.gpu
@pytest.mark.parametrize("use_ue8m0", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("m", MS)
def test_per_token_bit_exact(cuda, m, n, dtype, use_ue8m0):
    check_per_token(make_input(m, n, dtype, seed=m * 31 + n, device=cuda), use_ue8m0)


@pytest.mark.gpu
@pytest.mark.parametrize("use_ue8m0", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("m", MS)
def test_per_block_bit_exact(cuda, m, n, dtype, use_ue8m0):
    check_per_block(make_input(m, n, dtype, seed=m * 37 + n, device=cuda), use_ue8m0)


# Strided views (pad, first column): rows 16-byte aligned (vector path), row stride odd (scalar path),
# and a start misaligned by one element (scalar path).
VIEWS = {"row_stride_aligned": (16, 0), "row_stride_odd": (1, 0), "offset_by_one": (16, 1)}


@pytest.mark.gpu
@pytest.mark.parametrize("use_ue8m0", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("view", list(VIEWS))
@pytest.mark.parametrize("m,n", [(7, 200), (130, 7168), (257, 1024)])
def test_strided_inputs(cuda, m, n, dtype, view, use_ue8m0):
    pad, start = VIEWS[view]
    base = make_input(m, n + pad, dtype, seed=m + n + pad + start, device=cuda)
    x = base[:, start : start + n]
    assert x.shape == (m, n) and not x.is_contiguous()
    check_per_token(x, use_ue8m0)
    check_per_block(x, use_ue8m0)


@pytest.mark.gpu
@pytest.mark.parametrize("use_ue8m0", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_non_finite_inputs(cuda, dtype, use_ue8m0):
    """inf/NaN propagate as in the reference: the fp8 bytes are identical (with use_ue8m0, inf·inv stays
    inf and torch's conversion makes it NaN, which the kernel reproduces instead of saturating to 448);
    the scales agree up to NaN payloads."""
    m, n = 260, 1000
    x = make_input(m, n, dtype, seed=5, device=cuda)
    x[3, 10] = math.inf
    x[3, 300] = -math.inf
    x[130, 700] = math.nan
    x[200, 5] = -math.inf
    x[200, 900] = math.nan
    for op, ref in (
        (torch.ops.hopperkit.per_token_cast_to_fp8, ref_quant.per_token_cast_to_fp8),
        (torch.ops.hopperkit.per_block_cast_to_fp8, ref_quant.per_block_cast_to_fp8),
    ):
        x_fp8, sf = op(x, use_ue8m0)
        ref_fp8, ref_sf = ref(x, use_ue8m0)
        bad = x_fp8.view(torch.uint8) != ref_fp8.view(torch.uint8)
        assert not bad.any(), (
            f"{op}: fp8 bytes differ at {bad.nonzero()[:5].tolist()}: kernel "
            f"{x_fp8.view(torch.uint8)[bad][:5].tolist()} reference {ref_fp8.view(torch.uint8)[bad][:5].tolist()}"
        )
        sf = sf.contiguous()
        assert torch.equal(torch.isnan(sf), torch.isnan(ref_sf)), f"{op}: NaN scale positions differ"
        finite = ~torch.isnan(ref_sf)
        assert torch.equal(sf[finite].view(torch.int32), ref_sf[finite].view(torch.int32)), f"{op}: scale bits differ"


@pytest.mark.gpu
def test_rejects_non_dense_last_dim(cuda):
    x = make_input(256, 64, torch.bfloat16, seed=1, device=cuda).t()
    for op in (torch.ops.hopperkit.per_token_cast_to_fp8, torch.ops.hopperkit.per_block_cast_to_fp8):
        with pytest.raises(ValueError, match="hopperkit: x must have a contiguous last dimension"):
            op(x, False)
    with pytest.raises(TypeError, match="hopperkit: x must be bfloat16, float16 or float32"):
        torch.ops.hopperkit.per_token_cast_to_fp8(x.contiguous().double(), False)


@pytest.mark.gpu
@pytest.mark.parametrize("use_ue8m0", [False, True])
def test_public_wrappers_take_the_kernel(cuda, use_ue8m0):
    """The public API runs the kernels on SM90 (also for a transposed input, made dense first) and
    returns what the reference path returns, in the same layouts."""
    assert _ops.use_kernel("per_token_cast_to_fp8", cuda) and _ops.use_kernel("per_block_cast_to_fp8", cuda)
    x = make_input(384, 200, torch.bfloat16, seed=9, device=cuda).t()  # [200, 384], stride (1, 200)
    a8, sfa = hopperkit.per_token_cast_to_fp8(x, use_ue8m0=use_ue8m0)
    r8, rsf = ref_quant.per_token_cast_to_fp8(x, use_ue8m0=use_ue8m0)
    assert torch.equal(a8.view(torch.uint8), r8.view(torch.uint8)) and torch.equal(sfa, rsf)
    assert sfa.stride() == (1, 200)
    b8, sfb = hopperkit.per_block_cast_to_fp8(x, use_ue8m0=use_ue8m0)
    r8, rsf = ref_quant.per_block_cast_to_fp8(x, use_ue8m0=use_ue8m0)
    assert torch.equal(b8.view(torch.uint8), r8.view(torch.uint8)) and torch.equal(sfb, rsf)


@pytest.mark.gpu
def test_empty_inputs(cuda):
    for m, n in ((0, 256), (5, 0), (0, 0)):
        x = torch.empty(m, n, dtype=torch.bfloat16, device=cuda)
        a8, sfa = torch.ops.hopperkit.per_token_cast_to_fp8(x, False)
        assert a8.shape == (m, n) and sfa.shape == (m, -(-n // 128)) and sfa.stride() == (1, _align4(m))
        b8, sfb = torch.ops.hopperkit.per_block_cast_to_fp8(x, False)
        assert b8.shape == (m, n) and sfb.shape == (-(-m // 128), -(-n // 128))


@pytest.mark.gpu
def test_cuda_graph_capture(cuda):
    x = make_input(300, 7168, torch.bfloat16, seed=3, device=cuda)
    torch.ops.hopperkit.per_token_cast_to_fp8(x, True)  # warm up outside the capture
    torch.ops.hopperkit.per_block_cast_to_fp8(x, True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        a8, sfa = torch.ops.hopperkit.per_token_cast_to_fp8(x, True)
        b8, sfb = torch.ops.hopperkit.per_block_cast_to_fp8(x, True)
    x.copy_(make_input(300, 7168, torch.bfloat16, seed=4, device=cuda))
    graph.replay()
    torch.cuda.synchronize()
    r8, rsf = ref_quant.per_token_cast_to_fp8(x, use_ue8m0=True)
    assert torch.equal(a8.view(torch.uint8), r8.view(torch.uint8)) and torch.equal(sfa, rsf)
    r8, rsf = ref_quant.per_block_cast_to_fp8(x, use_ue8m0=True)
    assert torch.equal(b8.view(torch.uint8), r8.view(torch.uint8)) and torch.equal(sfb, rsf)


@pytest.mark.gpu
@pytest.mark.parametrize("m,n", [(1, 128), (7, 200), (128, 7168)])
def test_opcheck(cuda, m, n):
    x = make_input(m, n, torch.bfloat16, seed=2, device=cuda)
    for use_ue8m0 in (False, True):
        torch.library.opcheck(torch.ops.hopperkit.per_token_cast_to_fp8.default, (x, use_ue8m0))
        torch.library.opcheck(torch.ops.hopperkit.per_block_cast_to_fp8.default, (x, use_ue8m0))


# ----------------------------------------------------------------------------------------------------------
# CPU: the reference path of the public wrappers, and the fakes (meta tensors need no GPU).


@pytest.mark.parametrize("use_ue8m0", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_wrappers_on_cpu(dtype, use_ue8m0):
    x = make_input(7, 300, dtype, seed=11, device="cpu")
    a8, sfa = hopperkit.per_token_cast_to_fp8(x, use_ue8m0=use_ue8m0)
    r8, rsf = ref_quant.per_token_cast_to_fp8(x, use_ue8m0=use_ue8m0)
    assert torch.equal(a8.view(torch.uint8), r8.view(torch.uint8)) and torch.equal(sfa, rsf)
    assert sfa.stride() == (1, 8)
    b8, sfb = hopperkit.per_block_cast_to_fp8(x, use_ue8m0=use_ue8m0)
    r8, rsf = ref_quant.per_block_cast_to_fp8(x, use_ue8m0=use_ue8m0)
    assert torch.equal(b8.view(torch.uint8), r8.view(torch.uint8)) and torch.equal(sfb, rsf)


@pytest.mark.skipif(not _ops.EXTENSION_LOADED, reason="needs the compiled extension hopperkit._C")
@pytest.mark.parametrize("m,n", [(1, 128), (7, 200), (4097, 16448), (0, 5)])
def test_fakes_match_kernel_layouts(m, n):
    x = torch.empty(m, n, dtype=torch.bfloat16, device="meta")
    a8, sfa = torch.ops.hopperkit.per_token_cast_to_fp8(x, False)
    assert a8.dtype == torch.float8_e4m3fn and a8.shape == (m, n) and a8.is_contiguous()
    assert sfa.dtype == torch.float32 and sfa.shape == (m, -(-n // 128)) and sfa.stride() == (1, _align4(m))
    b8, sfb = torch.ops.hopperkit.per_block_cast_to_fp8(x, True)
    assert b8.shape == (m, n) and sfb.shape == (-(-m // 128), -(-n // 128)) and sfb.is_contiguous()
