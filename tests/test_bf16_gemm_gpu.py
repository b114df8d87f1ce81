"""GPU tests of the BF16 GEMMs on an SM90 device: ``bf16_gemm_nt`` and its nn/tn/tt aliases (every
majorness of A and B), ``m_grouped_bf16_gemm_nt_contiguous`` and ``m_grouped_bf16_gemm_nt_masked``.

Every case draws fresh seeded inputs, poisons D with NaN and checks ``calc_diff`` against
``hopperkit.reference.gemm`` (< 1e-5, the BF16 contract in DESIGN.md) and that no NaN is left.
Dense: DeepGEMM's M list × a sample of its (N, K) list; then each majorness × BF16/FP32 D × no C /
C / C aliasing D; strided operands (TMA-aligned ones run the kernel, unaligned ones the reference);
awkward sizes (K not a multiple of 64, N a multiple of 8 below a tile, odd N into a padded D).
Grouped: NaN in A's padding rows must reach no valid row and D's padding rows must be exactly 0;
masked counts of 0 and below 64; a CUDA graph of the masked GEMM replayed with new masked_m. Runs in
seconds on an H200 (the FP32 references dominate).
"""

from __future__ import annotations

import random
import zlib

import pytest
import torch

import hopperkit
from hopperkit import _ops
from hopperkit.reference import gemm as ref_gemm
from hopperkit.testing import calc_diff, poison_

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


def _gen(*key: object) -> torch.Generator:
    return torch.Generator(device="cuda").manual_seed(zlib.crc32(repr(key).encode()))


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
    gen = _gen("dense", m, n, k, major_a, major_b, out, c_mode, *key)
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
def test_dense_nt(m, n, k):
    _run_dense(m, n, k)


@pytest.mark.parametrize("c_mode", ["none", "c", "alias"])
@pytest.mark.parametrize("out", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("major_a,major_b", [("k", "k"), ("k", "mn"), ("mn", "k"), ("mn", "mn")])
@pytest.mark.parametrize("m,n,k", [(8, 2112, 1536), (200, 576, 1000), (1024, 4096, 2048)])
def test_dense_layouts(m, n, k, major_a, major_b, out, c_mode):
    _run_dense(m, n, k, major_a, major_b, out, c_mode)


def test_aliases_are_views():
    """nn/tn/tt pass transposed views: the same result as nt on copies."""
    gen = _gen("aliases")
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


@pytest.mark.parametrize("m,n,k", [(1, 8, 8), (72, 24, 136), (136, 136, 72), (200, 264, 4104), (64, 8, 7168),
                                   (65, 40, 100)])
@pytest.mark.parametrize("major_a,major_b", [("k", "k"), ("mn", "mn")])
def test_edge_sizes(m, n, k, major_a, major_b):
    # K = 100 (K-major) and M = 65 (MN-major) break TMA's 16-byte stride rule: the reference path runs.
    _run_dense(m, n, k, major_a, major_b, key=("edge",))


def test_odd_n_into_padded_d():
    """N = 7 (B K-major, D a view of 8-wide rows): the last column pair is cut by N."""
    gen = _gen("odd_n")
    a, b = _randn(gen, 130, 200), _randn(gen, 7, 200)
    for out in (torch.bfloat16, torch.float32):
        full = poison_(torch.empty(130, 8, dtype=out, device="cuda"))
        hopperkit.bf16_gemm_nt(a, b, full[:, :7])
        _check(f"N=7 {out}", full[:, :7], ref_gemm.bf16_gemm_nt(a, b, None, out_dtype=out))
        assert torch.isnan(full[:, 7]).all(), "the column past N was written"


@pytest.mark.parametrize("major", ["k", "mn"])
def test_strided_operands(major):
    """Operands inside larger buffers: TMA-aligned strides run the kernel, others the reference."""
    gen = _gen("strided", major)
    m, n, k = 257, 384, 520
    for pad in (8, 64, 3):  # row padding in elements; 3 breaks TMA's 16-byte stride rule
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


def test_repeatable():
    gen = _gen("repeat")
    a, b = _randn(gen, 1000, 2048), _randn(gen, 3000, 2048)
    d0 = torch.empty(1000, 3000, dtype=torch.bfloat16, device="cuda")
    hopperkit.bf16_gemm_nt(a, b, d0)
    for _ in range(3):
        d = poison_(torch.empty_like(d0))
        hopperkit.bf16_gemm_nt(a, b, d)
        assert torch.equal(d, d0)


def test_opcheck():
    gen = _gen("opcheck")
    a, b = _randn(gen, 64, 128), _randn(gen, 256, 128)
    d = torch.empty(64, 256, dtype=torch.float32, device="cuda")
    c = torch.randn(64, 256, device="cuda")
    torch.library.opcheck(torch.ops.hopperkit.bf16_gemm.default, (a, b, d, c, 132, False))


# --------------------------------------------------------------------------------------------------
# m-grouped
# --------------------------------------------------------------------------------------------------


def _contiguous_case(g: int, expected: int, n: int, k: int):
    gen = _gen("contiguous", g, expected, n, k)
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
def test_contiguous(g, expected, n, k):
    d, a, b, m_indices, pad = _contiguous_case(g, expected, n, k)
    assert torch.equal(d[pad], torch.zeros_like(d[pad])), "padding rows of D must be 0"
    ref = ref_gemm.m_grouped_bf16_gemm_nt_contiguous(a, b, m_indices)
    _check("valid rows", d[~pad], ref[~pad])


def _masked_case(g, m_max, n, k, counts, seed=0):
    gen = _gen("masked", g, m_max, n, k, seed)
    a = _randn(gen, g, m_max, k)
    b = _randn(gen, g, n, k)
    masked_m = torch.tensor(counts, dtype=torch.int32, device="cuda")
    dead = torch.arange(m_max, device="cuda")[None, :] >= masked_m[:, None].long()
    a[dead] = float("nan")
    return a, b, masked_m, dead


def _check_masked(d, a, b, masked_m, dead):
    assert torch.equal(d[dead], torch.zeros_like(d[dead])), "rows at or past masked_m must be 0"
    ref = ref_gemm.m_grouped_bf16_gemm_nt_masked(a, b, masked_m)
    if (~dead).any():
        _check("valid rows", d[~dead], ref[~dead])


@pytest.mark.parametrize("g,expected,n,k", [(6, 20, 4096, 2048), (8, 128, 4096, 7168), (4, 300, 576, 1000)])
def test_masked(g, expected, n, k):
    rnd = random.Random(zlib.crc32(repr(("m", g, expected, n, k)).encode()))
    counts = [int(expected * rnd.uniform(0.7, 1.3)) for _ in range(g)]
    counts[0] = 0
    counts[1] = min(counts[1], 37)
    m_max = max(counts) + 19
    a, b, masked_m, dead = _masked_case(g, m_max, n, k, counts)
    d = poison_(torch.empty(g, m_max, n, dtype=torch.bfloat16, device="cuda"))
    hopperkit.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected)
    _check_masked(d, a, b, masked_m, dead)


def test_masked_cuda_graph_replay():
    """One capture serves any counts: masked_m is read on the device."""
    g, m_max, n, k = 8, 160, 2048, 1024
    a, b, masked_m, _ = _masked_case(g, m_max, n, k, [m_max] * g, seed=1)
    d = torch.empty(g, m_max, n, dtype=torch.bfloat16, device="cuda")
    call = lambda: hopperkit.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, 128)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        call()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
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
    gen = _gen("bad")
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
    masked = torch.ops.hopperkit.m_grouped_bf16_gemm_nt_masked
    a3, b3 = _randn(gen, 2, 64, 128), _randn(gen, 2, 256, 128)
    d3 = torch.empty(2, 64, 256, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="masked_m"):
        masked(a3, b3, d3, torch.zeros(3, dtype=torch.int32, device="cuda"), 64, 132)
    with pytest.raises(ValueError, match="b must be K-major"):
        masked(a3, b3.transpose(1, 2).contiguous().transpose(1, 2), d3, torch.zeros(2, dtype=torch.int32, device="cuda"),
               64, 132)
    # The Python API names the argument too, and the next valid call works.
    with pytest.raises(TypeError, match="hopperkit: c"):
        hopperkit.bf16_gemm_nt(a, b, d, c=torch.zeros(64, 256, device="cuda"))
    with pytest.raises(ValueError, match="hopperkit: b"):
        hopperkit.m_grouped_bf16_gemm_nt_masked(a3, b3.transpose(1, 2).contiguous().transpose(1, 2), d3,
                                                torch.zeros(2, dtype=torch.int32, device="cuda"), 64)
    hopperkit.bf16_gemm_nt(a, b, d)
    _check("after errors", d, ref_gemm.bf16_gemm_nt(a, b, None))
