"""The public API: DeepGEMM/FlashMLA call styles, in-place outputs, the documented row conventions,
and agreement with hopperkit.reference. Runs on the CPU, and on the GPU of an SM90 machine."""

from __future__ import annotations

import math
import re
import time

import pytest
import torch

import hopperkit as hk
from hopperkit.reference import gemm as gemm_ref
from hopperkit.reference import mla as mla_ref
from hopperkit.testing import L2Flusher, assert_close, bench_interleaved, calc_diff, paged_decode_inputs, poison_


@pytest.fixture(params=[pytest.param("cpu"), pytest.param("cuda", marks=pytest.mark.gpu)])
def dev(request) -> torch.device:
    return torch.device(request.param)


def paged_case(dev, b=4, s_q=2, h_q=16, h_k=1, max_len=300, seed=0):
    g = torch.Generator().manual_seed(seed)
    seqlens = torch.randint(0, max_len, (b,), generator=g, dtype=torch.int32)
    seqlens[0] = max_len
    q, k_cache, block_table = paged_decode_inputs(seqlens, s_q, h_q + 3, h_k, generator=g)
    q = q[:, :, 1:h_q + 1]  # non-contiguous
    return q.to(dev), k_cache.to(dev), block_table.to(dev), seqlens.to(dev)


def test_flash_mla_call_styles_agree(dev):
    q, k_cache, block_table, seqlens = paged_case(dev)
    ref = mla_ref.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, 512, causal=True)
    # FlashMLA <= 1.0: explicit metadata
    tsm, ns = hk.get_mla_metadata(seqlens, q.shape[1] * q.shape[2], 1)
    assert tsm.dtype == ns.dtype == torch.int32 and tsm.shape[1] == 8 and ns.shape == (q.shape[0] + 1,)
    out_a, lse_a = hk.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, 512, tsm, ns, causal=True)
    # FlashMLA HEAD: lazy metadata, filled by the first call and reused by the next "layer"
    meta, none = hk.get_mla_metadata()
    assert isinstance(meta, hk.FlashMLASchedMeta) and none is None and not meta.have_initialized
    out_c, lse_c = hk.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, 512, meta, causal=True)
    assert meta.have_initialized and torch.equal(meta.tile_scheduler_metadata, tsm) and torch.equal(meta.num_splits, ns)
    out_c2, _ = hk.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, 512, meta, causal=True)
    for out, lse in ((out_a, lse_a), (out_c, lse_c), (out_c2, lse_c)):
        assert_close("out", out, ref[0], 8e-4, 2.01 / 128, 5e-6)
        assert_close("lse", lse, ref[1], 1e-6, 8.01 / 65536)
    assert out_a.shape == (4, 2, 16, 512) and lse_a.shape == (4, 16, 2) and out_a.dtype == torch.bfloat16
    empty = seqlens.cpu() == 0
    if empty.any():
        assert (out_a.cpu()[empty] == 0).all() and torch.isinf(lse_a.cpu()[empty]).all()


def test_flash_mla_gqa_fp16(dev):
    q, k_cache, block_table, seqlens = paged_case(dev, b=3, s_q=3, h_q=6, h_k=2, seed=4)
    q, k_cache = q.half(), k_cache.half()
    tsm, ns = hk.get_mla_metadata(seqlens, 3 * 6 // 2, 2)
    out, lse = hk.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, 512, tsm, ns, causal=True)
    ref = mla_ref.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, 512, causal=True)
    assert out.dtype == torch.float16
    assert_close("out", out, ref[0], 8e-4, 2.01 / 128, 5e-6)


def test_flash_mla_sparse(dev):
    g = torch.Generator().manual_seed(2)
    b, s_q, h_q, topk, pbs, nb = 3, 2, 64, 128, 61, 10
    kv = (torch.randn(nb, pbs, 1, 576, generator=g) / 10).to(torch.bfloat16)
    kv_fp8 = hk.quantize_kv_cache(kv).to(dev)
    assert kv_fp8.shape == (nb, pbs, 1, 656) and kv_fp8.dtype == torch.uint8
    q = (torch.randn(b, s_q, h_q, 576, generator=g) / 3).clamp(-1, 1).to(torch.bfloat16).to(dev)
    indices = torch.randint(-1, nb * pbs, (b, s_q, topk), generator=g, dtype=torch.int32).to(dev)
    topk_length = torch.tensor([128, 7, 0], dtype=torch.int32, device=dev)
    sink = torch.randn(h_q, generator=g).to(dev)
    meta, _ = hk.get_mla_metadata()
    out, lse = hk.flash_mla_with_kvcache(q, kv_fp8, None, None, 512, meta, is_fp8_kvcache=True, indices=indices,
                                         topk_length=topk_length, attn_sink=sink)
    ref = mla_ref.flash_mla_sparse_decode(q, kv_fp8, indices, topk_length=topk_length, attn_sink=sink)
    assert lse.shape == (b, h_q, s_q) and lse.stride() == (s_q * h_q, 1, h_q), "FlashMLA's transposed LSE view"
    assert_close("out", out, ref[0], 1e-3, 2.01 / 128, 5e-6)
    assert_close("lse", lse, ref[1], 1e-6, 8.01 / 65536)
    assert (out[2] == 0).all() and torch.isinf(lse[2]).all(), "topk_length 0: out 0, lse +inf"
    # the dequantized cache gives the same attention through the bf16 sparse path
    out_bf16, _ = hk.flash_mla_with_kvcache(q, hk.dequantize_kv_cache(kv_fp8), None, None, 512, hk.get_mla_metadata()[0],
                                            indices=indices, topk_length=topk_length, attn_sink=sink)
    assert_close("out_bf16", out_bf16, out, 1e-3, 2.01 / 128)


def quantized_operands(dev, m, n, k, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=g).to(torch.bfloat16).to(dev)
    b = torch.randn(n, k, generator=g).to(torch.bfloat16).to(dev)
    return a, b, hk.per_token_cast_to_fp8(a), hk.per_block_cast_to_fp8(b)


def test_fp8_gemm_and_aliases(dev):
    a, b, (a8, sfa), (b8, sfb) = quantized_operands(dev, 96, 384, 512)
    assert sfa.stride() == (1, 96), "per_token_cast_to_fp8 returns MN-major, TMA-aligned scales"
    d = poison_(torch.empty(96, 384, dtype=torch.bfloat16, device=dev))
    hk.fp8_gemm_nt((a8, sfa), (b8, sfb), d)
    # The kernel sums inside each 128-wide K block in its own order: equal to float32 rounding.
    assert calc_diff(d, gemm_ref.fp8_gemm_nt(a8, sfa, b8, sfb)) < 1e-5 and not d.isnan().any()
    assert calc_diff(d, a.float() @ b.float().T) < 1e-3
    for alias, args in (
        (hk.fp8_gemm_nn, ((a8, sfa), (b8.T, sfb.T))),
        (hk.fp8_gemm_tn, ((a8.T, sfa.T), (b8, sfb))),
        (hk.fp8_gemm_tt, ((a8.T, sfa.T), (b8.T, sfb.T))),
    ):
        d2 = poison_(torch.empty_like(d))
        alias(*args, d2)
        assert calc_diff(d2, d) < 1e-6, alias.__name__


def test_fp8_gemm_1d1d_accumulates_in_place(dev):
    a, b, (a8, sfa), _ = quantized_operands(dev, 64, 256, 384, seed=1)
    b8, sfb = hk.per_token_cast_to_fp8(b)
    d = torch.randn(64, 256, device=dev) * 32
    c = d.clone()
    hk.fp8_gemm_nt((a8, sfa), (b8, sfb), d, c=d, recipe=(1, 1, 128))
    assert calc_diff(d, c + a.float() @ b.float().T) < 1e-3
    # The SM90 kernel sums inside a K block in another order than the reference (and fuses the
    # multiply-add): the same two-level accumulation to FP32 rounding, not bit for bit.
    assert calc_diff(d, gemm_ref.fp8_gemm_nt(a8, sfa, b8, sfb, c, recipe=(1, 1, 128))) < 1e-5


def test_bf16_gemm(dev):
    a = torch.randn(33, 80, device=dev).bfloat16()
    b = torch.randn(48, 80, device=dev).bfloat16()
    d = poison_(torch.empty(33, 48, device=dev))
    c = torch.randn(33, 48, device=dev)
    hk.bf16_gemm_nt(a, b, d, c=c)
    assert calc_diff(d, c + a.float() @ b.float().T) < 1e-5
    d2 = poison_(torch.empty(33, 48, dtype=torch.bfloat16, device=dev))
    hk.bf16_gemm_nn(a, b.T.contiguous(), d2)
    assert calc_diff(d2, a.float() @ b.float().T) < 1e-5


def test_m_grouped_contiguous_and_psum(dev):
    g = torch.Generator().manual_seed(3)
    G, n, k = 3, 256, 256
    sizes = [130, 0, 60]
    rows = [-(-s // 128) * 128 for s in sizes]
    m_indices = torch.cat([torch.tensor([i] * s + [-1] * (r - s), dtype=torch.int32) for i, (s, r) in enumerate(zip(sizes, rows))])
    M = m_indices.numel()
    a = torch.randn(M, k, generator=g)
    a[m_indices == -1] = math.nan  # padding rows hold garbage
    a8, sfa = hk.per_token_cast_to_fp8(a.to(dev))
    b = torch.randn(G, n, k, generator=g)
    bq = [hk.per_block_cast_to_fp8(b[i].to(dev)) for i in range(G)]
    b8, sfb = torch.stack([x for x, _ in bq]), torch.stack([s for _, s in bq])
    d = poison_(torch.empty(M, n, dtype=torch.bfloat16, device=dev))
    hk.m_grouped_fp8_gemm_nt_contiguous((a8, sfa), (b8, sfb), d, m_indices.to(dev))
    pad = (m_indices == -1).to(dev)
    assert (d[pad] == 0).all(), "padding rows are written as 0"
    for i, s in enumerate(sizes):
        r0 = sum(rows[:i])
        if s:
            assert calc_diff(d[r0:r0 + s], a[r0:r0 + s].to(dev) @ b[i].to(dev).T) < 1e-3
    ends = torch.tensor([sum(rows[:i]) + s for i, s in enumerate(sizes)], dtype=torch.int32, device=dev)
    d2 = poison_(torch.empty_like(d))
    hk.m_grouped_fp8_gemm_nt_contiguous((a8, sfa), (b8, sfb), d2, ends, use_psum_layout=True)
    assert torch.equal(d2, d)


def test_m_grouped_masked(dev):
    g = torch.Generator().manual_seed(4)
    G, m_max, n, k = 3, 64, 128, 256
    masked_m = torch.tensor([0, 7, 64], dtype=torch.int32)
    a = torch.randn(G, m_max, k, generator=g)
    a[0] = math.nan
    a[1, 7:] = math.nan
    aq = [hk.per_token_cast_to_fp8(a[i].to(dev)) for i in range(G)]
    a8 = torch.stack([x for x, _ in aq])
    sfa = torch.stack([s.contiguous() for _, s in aq])
    b = torch.randn(G, n, k, generator=g)
    bq = [hk.per_block_cast_to_fp8(b[i].to(dev)) for i in range(G)]
    b8, sfb = torch.stack([x for x, _ in bq]), torch.stack([s for _, s in bq])
    d = poison_(torch.empty(G, m_max, n, dtype=torch.bfloat16, device=dev))
    hk.m_grouped_fp8_gemm_nt_masked((a8, sfa), (b8, sfb), d, masked_m.to(dev), expected_m=32)
    # Rows at or past masked_m are unspecified: 0, or left as they were (NaN poison) on the kernel path.
    dead = torch.cat([d[0].flatten(), d[1, 7:].flatten()])
    assert ((dead == 0) | dead.isnan()).all()
    assert not d[1, :7].isnan().any() and not d[2].isnan().any()
    assert calc_diff(d[1, :7], a[1, :7].to(dev) @ b[1].to(dev).T) < 1e-3
    assert calc_diff(d[2], a[2].to(dev) @ b[2].to(dev).T) < 1e-3


def test_k_grouped_bf16_with_empty_group(dev):
    g = torch.Generator().manual_seed(6)
    m, n, ks = 64, 96, [256, 0, 128]
    a = torch.randn(sum(ks), m, generator=g).to(torch.bfloat16).to(dev)
    b = torch.randn(sum(ks), n, generator=g).to(torch.bfloat16).to(dev)
    c = torch.randn(len(ks), m, n, generator=g).to(dev)
    d = c.clone()
    hk.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, torch.tensor(ks, dtype=torch.int32, device=dev), c=d)
    assert torch.equal(d[1], c[1]), "an empty group leaves C unchanged"
    assert calc_diff(d[0], c[0] + a[:256].float().T @ b[:256].float()) < 1e-5
    assert calc_diff(d[2], c[2] + a[256:].float().T @ b[256:].float()) < 1e-5
    d2 = torch.full_like(c, float("nan"))
    hk.k_grouped_bf16_gemm_tn_contiguous(a, b, d2, ks, torch.tensor(ks, dtype=torch.int32, device=dev))
    assert torch.equal(d2[1], torch.zeros_like(d2[1])), "an empty group without C is 0"


@pytest.mark.parametrize("op", ["fp8", "bf16"])
def test_k_grouped_rejects_bad_sizes(dev, op):
    """Both k-grouped ops check the host sizes the same way, and (value checks on, the default on the
    reference path) that ks_tensor holds them."""
    m, n, ks = 64, 96, [128, 256]
    d = torch.randn(2, m, n, device=dev)
    d_before = d.clone()
    kt = torch.tensor(ks, dtype=torch.int32, device=dev)
    if op == "fp8":
        a8 = torch.randn(m * 384, device=dev).to(torch.float8_e4m3fn)
        b8 = torch.randn(n * 384, device=dev).to(torch.float8_e4m3fn)
        call = lambda *sizes, **named: hk.k_grouped_fp8_gemm_nt_contiguous(
            (a8, torch.rand(m, 3, device=dev) + 0.5), (b8, torch.rand(n, 3, device=dev) + 0.5), d, *sizes, c=d, **named)
    else:
        a = torch.randn(384, m, device=dev).to(torch.bfloat16)
        b = torch.randn(384, n, device=dev).to(torch.bfloat16)
        call = lambda *sizes, **named: hk.k_grouped_bf16_gemm_tn_contiguous(a, b, d, *sizes, c=d, **named)
    # The errors name the arguments as the call did: DeepGEMM's ks_cpu and grouped_layout (also their
    # positions), or ks and ks_tensor (its 2.1 names).
    for host, device, by_name in (("ks_cpu", "grouped_layout", False), ("ks", "ks_tensor", True)):
        named = (lambda ks_, kt_: call(ks=ks_, ks_tensor=kt_)) if by_name else call
        with pytest.raises(TypeError, match=f"hopperkit: {host} must be a list of ints"):
            named((128.0, 256), kt)
        with pytest.raises(ValueError, match=f"hopperkit: {host} must be non-negative multiples of 128"):
            named([128, 200], kt)
        with pytest.raises(ValueError, match=f"hopperkit: {host} must be 2 entries"):
            named([384], kt)
        if dev.type == "cpu":  # value checks are on by default on the reference path only
            with pytest.raises(ValueError, match=f"hopperkit: {device} must be the same values as {host}"):
                named(ks, torch.tensor([256, 128], dtype=torch.int32, device=dev))
    assert torch.equal(d, d_before), "a rejected call wrote D"


def test_k_grouped_with_empty_group(dev):
    g = torch.Generator().manual_seed(5)
    m, n, ks = 64, 96, [256, 0, 128]
    G = len(ks)
    a_parts = [torch.randn(m, kg, generator=g) for kg in ks]
    b_parts = [torch.randn(n, kg, generator=g) for kg in ks]
    a8 = torch.cat([hk.per_token_cast_to_fp8(p.to(dev))[0].flatten() for p in a_parts])
    b8 = torch.cat([hk.per_token_cast_to_fp8(p.to(dev))[0].flatten() for p in b_parts])
    sfa = torch.cat([hk.per_token_cast_to_fp8(p.to(dev))[1] for p in a_parts], dim=1).contiguous()
    sfb = torch.cat([hk.per_token_cast_to_fp8(p.to(dev))[1] for p in b_parts], dim=1).contiguous()
    c = torch.randn(G, m, n, generator=g).to(dev)
    d = c.clone()
    hk.k_grouped_fp8_gemm_nt_contiguous((a8, sfa), (b8, sfb), d, ks, torch.tensor(ks, dtype=torch.int32, device=dev), c=d)
    assert torch.equal(d[1], c[1]), "an empty group leaves C unchanged"
    for i in (0, 2):
        assert calc_diff(d[i], c[i] + a_parts[i].to(dev) @ b_parts[i].to(dev).T) < 1e-3


def test_layout_utilities(dev):
    sf = torch.randn(10, 3, device=dev)
    t = hk.get_mn_major_tma_aligned_tensor(sf)
    assert t.stride() == (1, 12) and torch.equal(t, sf)
    assert hk.get_mn_major_tma_aligned_tensor(t) is t
    assert hk.get_tma_aligned_size(10, 4) == 12 and hk.get_tma_aligned_size(10, 1) == 16
    assert hk.get_mk_alignment_for_contiguous_layout() == 128


def test_set_num_sms_changes_schedule():
    seqlens = torch.full((8,), 3000, dtype=torch.int32)
    try:
        hk.set_num_sms(64)
        assert hk.get_num_sms() == 64
        tsm, _ = hk.get_mla_metadata(seqlens, 16, 1)
        assert tsm.shape == (64, 8)
    finally:
        hk.set_num_sms(None)


@pytest.mark.gpu
def test_fp8_gemm_with_pdl_matches():
    a, b, (a8, sfa), (b8, sfb) = quantized_operands(torch.device("cuda"), 256, 512, 1024, seed=7)
    d0 = poison_(torch.empty(256, 512, dtype=torch.bfloat16, device="cuda"))
    hk.fp8_gemm_nt((a8, sfa), (b8, sfb), d0)
    try:
        hk.set_pdl(True)
        for _ in range(3):  # back-to-back launches that may overlap
            a8_, sfa_ = hk.per_token_cast_to_fp8(a)
            d1 = poison_(torch.empty_like(d0))
            hk.fp8_gemm_nt((a8_, sfa_), (b8, sfb), d1)
            assert torch.equal(d1, d0)
    finally:
        hk.set_pdl(False)


@pytest.mark.gpu
def test_pdl_chains_read_the_previous_kernels_output():
    """With PDL each GEMM and cast may be scheduled before the kernel before it has finished, and
    waits on the device (griddepcontrol.wait) before its first read: chains in which each kernel reads
    or accumulates into what the one before it wrote must give the bits of the same calls without PDL."""
    dev = torch.device("cuda")
    g = torch.Generator().manual_seed(11)
    x = torch.randn(64, 2048, generator=g).to(torch.bfloat16).to(dev)
    w1 = torch.randn(1024, 2048, generator=g).to(torch.bfloat16).to(dev)
    w2 = torch.randn(512, 1024, generator=g).to(torch.bfloat16).to(dev)
    b1, b2 = hk.per_block_cast_to_fp8(w1), hk.per_block_cast_to_fp8(w2)
    a_wg = torch.randn(256, 1024, generator=g).to(torch.bfloat16).to(dev)
    b_wg = torch.randn(384, 1024, generator=g).to(torch.bfloat16).to(dev)
    a_wg8, b_wg8 = hk.per_token_cast_to_fp8(a_wg), hk.per_token_cast_to_fp8(b_wg)

    def chain():
        # cast -> FP8 GEMM -> cast of its output -> FP8 GEMM (read after write across kernels)
        h = poison_(torch.empty(64, 1024, dtype=torch.bfloat16, device=dev))
        hk.fp8_gemm_nt(hk.per_token_cast_to_fp8(x), b1, h)
        y = poison_(torch.empty(64, 512, dtype=torch.bfloat16, device=dev))
        hk.fp8_gemm_nt(hk.per_token_cast_to_fp8(h), b2, y)
        # BF16 GEMM reading the previous BF16 GEMM's D as its A
        hb = poison_(torch.empty(64, 1024, dtype=torch.bfloat16, device=dev))
        hk.bf16_gemm_nt(x, w1, hb)
        yb = poison_(torch.empty(64, 512, dtype=torch.bfloat16, device=dev))
        hk.bf16_gemm_nt(hb, w2, yb)
        # 1d1d weight gradients accumulated into one FP32 D, three launches in a row
        dw = torch.zeros(256, 384, dtype=torch.float32, device=dev)
        for _ in range(3):
            hk.fp8_gemm_nt(a_wg8, b_wg8, dw, c=dw, recipe=(1, 1, 128))
        return y, yb, dw

    expected = chain()
    assert not any(t.isnan().any() for t in expected)
    try:
        hk.set_pdl(True)
        for _ in range(5):
            for got, want in zip(chain(), expected):
                assert torch.equal(got, want)
    finally:
        hk.set_pdl(False)


# --------------------------------------------------------------------------------------------------
# The kernel-path fast lanes hand structural checks to the C++ op; when the op rejects a call, the
# full Python checks must run and raise the documented error. Exercised on the CPU by pretending the
# kernel path is taken and replacing the ops with recorders.
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def fake_kernel_path(monkeypatch):
    from hopperkit import _ops

    if not _ops.EXTENSION_LOADED:
        pytest.skip(f"needs hopperkit._C for torch.ops.hopperkit: {_ops.EXTENSION_ERROR}")
    faked = set()  # public ops that pretend to take the kernel path; the rest run their references
    monkeypatch.setattr(_ops, "use_kernel", lambda op, device: op in faked)
    calls = []

    def install(public_op, name, behaviour):
        def fake(*args):
            calls.append((name, args))
            return behaviour(*args)

        faked.add(public_op)
        monkeypatch.setattr(torch.ops.hopperkit, name, fake)

    return install, calls


def _fp8_operands(m=8, n=256, k=256):
    a_fp8, sfa = hk.per_token_cast_to_fp8(torch.randn(m, k, dtype=torch.bfloat16))
    b_fp8, sfb = hk.per_block_cast_to_fp8(torch.randn(n, k, dtype=torch.bfloat16))
    return (a_fp8, sfa), (b_fp8, sfb), torch.empty(m, n, dtype=torch.bfloat16)


def test_fp8_gemm_fast_lane_calls_the_op_once(fake_kernel_path):
    install, calls = fake_kernel_path
    install("fp8_gemm_nt", "fp8_gemm_nt_1d2d", lambda *args: None)
    a, b, d = _fp8_operands()
    hk.fp8_gemm_nt(a, b, d)
    assert [c[0] for c in calls] == ["fp8_gemm_nt_1d2d"]
    sfa = calls[0][1][1]
    assert sfa.stride() == (1, 8), "A scales reach the kernel MN-major and TMA-aligned"


def test_fp8_gemm_fast_lane_rejection_gives_the_python_error(fake_kernel_path):
    def reject(*args):
        raise TypeError("hopperkit: b must be float8_e4m3fn, got BFloat16")  # what the C++ check says

    install, calls = fake_kernel_path
    install("fp8_gemm_nt", "fp8_gemm_nt_1d2d", reject)
    a, (b_fp8, sfb), d = _fp8_operands()
    with pytest.raises(TypeError, match=r"hopperkit: b\[0\] must be"):
        hk.fp8_gemm_nt(a, (b_fp8.to(torch.bfloat16), sfb), d)
    assert len(calls) == 1, "the full path raises before calling the op again"


def test_grouped_fast_lane_rejection_gives_the_python_error(fake_kernel_path):
    def reject(*args):
        raise ValueError("hopperkit: m_indices must be contiguous [..]")

    install, _ = fake_kernel_path
    install("m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_gemm_nt_contiguous_1d2d", reject)
    a_fp8, sfa = hk.per_token_cast_to_fp8(torch.randn(128, 256, dtype=torch.bfloat16))
    b_fp8 = torch.randn(2, 256, 256).to(torch.float8_e4m3fn)
    sfb = torch.ones(2, 2, 2)
    d = torch.empty(128, 256, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="hopperkit: grouped_layout must be"):
        hk.m_grouped_fp8_gemm_nt_contiguous((a_fp8, sfa), (b_fp8, sfb), d, torch.zeros(64, dtype=torch.int32))


def _bf16_operands(m=8, n=16, k=64):
    return torch.randn(m, k).bfloat16(), torch.randn(n, k).bfloat16(), torch.empty(m, n, dtype=torch.bfloat16)


def test_fast_lane_failures_propagate(fake_kernel_path):
    """Only the op's rejection of an input (ValueError, TypeError) sends a fast lane to the full path; a
    CUDA error or any other RuntimeError is the call's failure and must not turn into a rerun (the
    reference would silently hide a broken kernel)."""
    def crash(*args):
        raise RuntimeError("hopperkit: CUDA error cudaErrorIllegalAddress (an illegal memory access was encountered)")

    install, calls = fake_kernel_path
    install("fp8_gemm_nt", "fp8_gemm_nt_1d2d", crash)
    install("bf16_gemm_nt", "bf16_gemm", crash)
    with pytest.raises(RuntimeError, match="cudaErrorIllegalAddress"):
        hk.fp8_gemm_nt(*_fp8_operands())
    a, b, d = _bf16_operands()
    with pytest.raises(RuntimeError, match="cudaErrorIllegalAddress"):
        hk.bf16_gemm_nt(a, b, d)
    assert [c[0] for c in calls] == ["fp8_gemm_nt_1d2d", "bf16_gemm"], "each op ran once, and nothing else"


def test_bf16_fast_lane_rejection_gives_the_python_error(fake_kernel_path):
    def reject(*args):
        raise ValueError("hopperkit: c must be d itself (same address and strides) or share no memory with d, ..")

    install, calls = fake_kernel_path
    install("bf16_gemm_nt", "bf16_gemm", reject)
    a, b, _ = _bf16_operands()
    buf = torch.zeros(9, 16, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="hopperkit: c must be d itself .* or a tensor sharing no memory with d"):
        hk.bf16_gemm_nt(a, b, buf[:8], c=buf[1:])
    assert len(calls) == 1, "the full path raises before calling the op again"
    # A C that is not a tensor never reaches the op (the dispatcher would raise RuntimeError).
    with pytest.raises(TypeError, match="hopperkit: c must be a torch.Tensor"):
        hk.bf16_gemm_nt(a, b, buf[:8], c=5)
    assert len(calls) == 1


def test_c_may_be_d_or_separate_or_broadcast(dev):
    """C = D (in place), C in the other half of D's buffer, and a bias expand()-ed to [M, N] (C only
    read, so repeated rows are fine) are all valid."""
    a = torch.randn(8, 64, device=dev).bfloat16()
    b = torch.randn(16, 64, device=dev).bfloat16()
    bias = torch.randn(16, device=dev).bfloat16()
    want = gemm_ref.bf16_gemm_nt(a, b, bias.expand(8, 16))
    d = poison_(torch.empty(8, 16, dtype=torch.bfloat16, device=dev))
    hk.bf16_gemm_nt(a, b, d, c=bias.expand(8, 16))
    assert calc_diff(d, want) < 1e-5
    halves = torch.empty(16, 16, dtype=torch.bfloat16, device=dev)
    halves[:8] = bias
    hk.bf16_gemm_nt(a, b, halves[8:], c=halves[:8])
    assert calc_diff(halves[8:], want) < 1e-5
    hk.bf16_gemm_nt(a, b, halves[:8], c=halves[:8])
    assert calc_diff(halves[:8], want) < 1e-5


def test_mla_fast_lane_uses_the_op_and_checks_the_head_layout(fake_kernel_path):
    install, calls = fake_kernel_path
    install("flash_mla_with_kvcache", "mla_dense_decode", lambda q, *rest: (q.new_zeros(*q.shape[:3], 512),
                                                   q.new_zeros(q.shape[0], q.shape[2], q.shape[1], dtype=torch.float32)))
    q, k_cache, block_table, seqlens = paged_case(torch.device("cpu"), h_q=16)
    tsm, ns = hk.get_mla_metadata(seqlens, q.shape[1] * q.shape[2], 1)
    hk.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, 512, tsm, ns, causal=True)
    assert [c[0] for c in calls] == ["mla_dense_decode"]
    # Metadata built for another head layout (another partition count) never reaches the op.
    tsm_other, ns_other = hk.get_mla_metadata(seqlens, q.shape[1] * 128, 1)
    with pytest.raises(ValueError, match="hopperkit: tile_scheduler_metadata must be"):
        hk.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, 512, tsm_other, ns_other, causal=True)
    assert len(calls) == 1


def test_l2_flusher_rejects_an_unknown_mode():
    """The benchmarks' flush mode is checked before the buffer is allocated (CPU-only machines too)."""
    with pytest.raises(ValueError, match="flush mode"):
        L2Flusher(mode="clean")


@pytest.mark.gpu
def test_l2_flusher_modes(cuda):
    """Mode "zero" overwrites the flush buffer; "read" only reads it (the buffer keeps its contents)."""
    reading = L2Flusher(nbytes=64 << 20, device=cuda, mode="read")
    reading.buf.uniform_()
    before = reading.buf.clone()
    reading()
    torch.cuda.synchronize()
    assert torch.equal(reading.buf, before)
    assert torch.isclose(reading.sink, before.sum(), rtol=1e-4).item()
    zeroing = L2Flusher(nbytes=64 << 20, device=cuda, mode="zero")
    zeroing()
    assert int(torch.count_nonzero(zeroing.buf)) == 0


@pytest.mark.gpu
def test_bench_interleaved_takes_turns(cuda):
    """The benchmark's calls take turns, in reverse order every other round, and each gets its own
    times: a call doing 50 times the work of another shows a longer median."""
    x = torch.randn(2048, 2048, device=cuda)
    order = []

    def long_call():
        order.append("long")
        for _ in range(50):
            x.mul_(1.0)

    def short_call():
        order.append("short")
        x.mul_(1.0)

    times = bench_interleaved({"long": long_call, "short": short_call}, warmup=2, iters=4, flush_mode="read",
                              warmup_s=0.0)
    # warm-up calls, one measured warm-up round, the timed rounds
    assert order == ["long"] * 2 + ["short"] * 2 + ["long", "short"] + ["long", "short", "short", "long"] * 2
    assert set(times) == {"long", "short"}
    assert times["long"]["min_us"] <= times["long"]["median_us"]
    assert times["long"]["median_us"] > 10 * times["short"]["median_us"] > 0
    # A timed warm-up adds whole rounds before the timed ones.
    order.clear()
    bench_interleaved({"long": long_call, "short": short_call}, warmup=0, iters=2, flush_mode="read", warmup_s=0.01)
    assert len(order) > 2 * 2 + 2 and order[-4:] == ["long", "short", "short", "long"]


@pytest.mark.gpu
def test_bench_interleaved_times_the_gpu_behind_a_slow_host(cuda):
    """A call whose host side takes 200 µs before it launches a short kernel is timed at the
    kernel's time when the GPU has that much slack queued before it, and at the host's without."""
    x = torch.randn(1024, device=cuda)

    def slow_host_call():
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 200e-6:
            pass
        x.mul_(1.0)

    kw = dict(warmup=1, iters=10, flush_mode="read", warmup_s=0.0)
    behind = bench_interleaved({"call": slow_host_call}, host_slack_us=0.0, **kw)["call"]["median_us"]
    ahead = bench_interleaved({"call": slow_host_call}, host_slack_us=2000.0, **kw)["call"]["median_us"]
    assert behind > 100.0 > 50.0 > ahead, (behind, ahead)


def test_ab_builds_cases_and_report():
    """benchmarks/ab_builds.py: its case grammar and the report's ratios (the timing needs a GPU)."""
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "ab_builds.py")
    spec = importlib.util.spec_from_file_location("ab_builds", path)
    ab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ab)
    assert ab.parse_case("fp8cont:4x8192x4096x7168") == ("fp8cont", (4, 8192, 4096, 7168))
    assert ab.parse_case("fp8contvar:32x256x7168x2048") == ("fp8contvar", (32, 256, 7168, 2048))
    for bad in ("fp8:1x2", "gemm:1x2x3", "mla:1x1x128x0", "bf16:4096x7168xK", "fp8contvar:32x256x7168"):
        with pytest.raises(ValueError):
            ab.parse_case(bad)
    runs = [{"build": b, "cases": {"fp8:1x2x3": {"us": us, "diff": 1e-7}}}
            for b, us in (("base", 10.0), ("new", 8.0), ("base", 12.0), ("new", 9.0), ("base", 11.0), ("new", 8.5))]
    (row,) = ab.summarize(["base", "new"], ["fp8:1x2x3"], runs)
    assert row["base"]["us"] == 11.0 and row["new"]["us"] == 8.5 and row["new"]["ratio"] == pytest.approx(11.0 / 8.5)
    assert (row["new"]["min_us"], row["new"]["max_us"], row["new"]["runs"]) == (8.0, 9.0, 3)
    assert "fp8:1x2x3" in ab.format_report(["base", "new"], [row])


def test_bench_gemm_case_lists_name_public_ops():
    """benchmarks/bench_gemm.py: every grouped row of its sections times an op the package has (a row
    kind of one section must not reach another's op lookup), in the full and the --quick lists."""
    import importlib.util
    import os

    from hopperkit import _ops

    path = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "bench_gemm.py")
    spec = importlib.util.spec_from_file_location("bench_gemm", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    fp8_layouts = {"contiguous", "masked", "mask4096", "uneven"}
    bf16_ops = {"contiguous": "m_grouped_bf16_gemm_nt_contiguous", "masked": "m_grouped_bf16_gemm_nt_masked",
                "mask4096": "m_grouped_bf16_gemm_nt_masked"}
    for quick in (False, True):
        fp8 = bench._grouped_cases(quick)
        bf16 = bench._bf16_grouped_cases(quick)
        assert fp8 and bf16
        assert {c[0] for c in fp8} <= fp8_layouts
        assert {c[0] for c in bf16} <= set(bf16_ops)
        for layout, *_ in bf16:
            assert bf16_ops[layout] in _ops.PUBLIC_OP_KERNELS
    assert {c[0] for c in bench._bf16_grouped_cases(False)} == {"contiguous", "masked", "mask4096"}


def test_contiguous_m_indices_layout():
    """hopperkit.testing.contiguous_m_indices: each segment's rows, then -1 to the next aligned row."""
    from hopperkit.testing import contiguous_m_indices

    ids, starts = contiguous_m_indices([(0, 3), (2, 0), (-1, 4), (1, 4), (3, 5)], alignment=4)
    assert ids.dtype == torch.int32 and ids.device.type == "cpu"
    assert ids.tolist() == [0, 0, 0, -1, -1, -1, -1, -1, 1, 1, 1, 1, 3, 3, 3, 3, 3, -1, -1, -1]
    assert starts == [0, 4, 4, 8, 12]
    empty, none = contiguous_m_indices([])
    assert empty.numel() == 0 and none == []


def test_assert_k_grouped_gemm_catches_each_fault():
    """hopperkit.testing.assert_k_grouped_gemm passes the reference's own output and fails, naming the
    group, on a wrong element, a NaN left in a group, and a write into an empty group."""
    from hopperkit.testing import assert_k_grouped_gemm

    gen = torch.Generator().manual_seed(3)
    ks, m, n = [256, 0, 128, 0], 8, 24
    a = torch.randn(sum(ks), m, generator=gen).to(torch.bfloat16)
    b = torch.randn(sum(ks), n, generator=gen).to(torch.bfloat16)
    c = torch.randn(len(ks), m, n, generator=gen)
    d = gemm_ref.k_grouped_bf16_gemm_tn_contiguous(a, b, ks, c)
    product = lambda _, rows: a[rows].float().T @ b[rows].float()
    assert_k_grouped_gemm("ok", d, c, ks, product)
    faults = {"group 2: element (3, 5)": lambda t: t[2, 3, 5].add_(1 + t[2].abs().max()),
              "group 0: 1 of 192 elements NaN": lambda t: t[0, 0, 0].fill_(float("nan")),
              "group 3: an empty group": lambda t: t[3, 7, 23].add_(1e-3)}
    for message, fault in faults.items():
        bad = d.clone()
        fault(bad)
        with pytest.raises(AssertionError, match=re.escape(message)):
            assert_k_grouped_gemm("k-grouped", bad, c, ks, product)
