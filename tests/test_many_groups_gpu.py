"""The grouped GEMMs with 256 groups: DeepSeek-V3's routed experts on one rank (no expert parallelism).

The other grouped tests use up to 32 groups. With 256, the masked scheduler's cursor walks eight
times as many groups, the contiguous layout's expert ids and the 3-D maps of B span 256 experts,
and the k-grouped ops carry 256 per-group sizes to the device. Shapes stay small (N = 512, K up to
1024) so that the 256 per-group references stay quick; row counts are drawn as a decode or a short
prefill routes tokens (many experts with a few rows, some with none, a few with more than a tile).
"""

from __future__ import annotations

import pytest
import torch

import hopperkit
from hopperkit.reference import gemm as ref_gemm
from hopperkit.testing import (assert_fp8_gemm_close, assert_gemm_elementwise, assert_k_grouped_gemm,
                               block_scaled_randn, contiguous_m_indices, poison_, seeded_generator)

pytestmark = pytest.mark.gpu

G = 256
N, K = 512, 1024


@pytest.fixture(autouse=True)
def _kernels_only(forbid_reference):
    forbid_reference("m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_gemm_nt_masked",
                     "m_grouped_bf16_gemm_nt_contiguous", "m_grouped_bf16_gemm_nt_masked",
                     "k_grouped_fp8_gemm_nt_contiguous", "k_grouped_bf16_gemm_tn_contiguous")


def routed_counts(key: str, hi: int) -> list[int]:
    """Rows per expert: a quarter empty, most 1-24, every 16th up to ``hi``."""
    gen = torch.Generator().manual_seed(sum(map(ord, key)))
    counts = torch.randint(1, 25, (G,), generator=gen)
    counts[torch.rand(G, generator=gen) < 0.25] = 0
    counts[::16] = torch.randint(1, hi + 1, (G // 16,), generator=gen)
    counts[-1] = hi
    return counts.tolist()


def quant_groups(x: torch.Tensor, cast) -> tuple[torch.Tensor, torch.Tensor]:
    pairs = [cast(x[g]) for g in range(x.shape[0])]
    return torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])


@pytest.mark.parametrize("psum", [False, True], ids=["m_indices", "psum"])
def test_fp8_contiguous(psum):
    counts = routed_counts("fp8 contiguous", 300)
    gen = seeded_generator("cuda", "many groups", "fp8 contiguous")
    m_indices, starts = contiguous_m_indices(list(enumerate(counts)), 128)
    a = block_scaled_randn(gen, m_indices.numel(), K)
    b = block_scaled_randn(gen, G, N, K, block_rows=128)
    a_fp8, sfa = hopperkit.per_token_cast_to_fp8(a)
    b_fp8, sfb = quant_groups(b, hopperkit.per_block_cast_to_fp8)
    pad = (m_indices == -1).cuda()
    a_fp8.view(torch.uint8)[pad] = 0x7F  # NaN in the padding rows must reach no valid row
    d = poison_(torch.empty(m_indices.numel(), N, dtype=torch.bfloat16, device="cuda"))
    if psum:
        ends = torch.tensor([s + c for s, c in zip(starts, counts)], dtype=torch.int32, device="cuda")
        hopperkit.m_grouped_fp8_gemm_nt_contiguous((a_fp8, sfa), (b_fp8, sfb), d, ends, use_psum_layout=True)
    else:
        hopperkit.m_grouped_fp8_gemm_nt_contiguous((a_fp8, sfa), (b_fp8, sfb), d, m_indices.cuda())
    assert torch.equal(d[pad], torch.zeros_like(d[pad])), "padding rows of D must be 0"
    for e, (s, c) in enumerate(zip(starts, counts)):
        if c:
            r = slice(s, s + c)
            ref = ref_gemm.fp8_gemm_nt(a_fp8[r], sfa[r], b_fp8[e], sfb[e], out_dtype=torch.float32)
            assert_fp8_gemm_close(f"expert {e} ({c} rows)", d[r], a[r].float() @ b[e].float().T, ref)


def test_fp8_masked():
    counts = routed_counts("fp8 masked", 100)
    m_max = 128
    gen = seeded_generator("cuda", "many groups", "fp8 masked")
    a = block_scaled_randn(gen, G, m_max, K)
    b = block_scaled_randn(gen, G, N, K, block_rows=128)
    a_fp8, sfa = quant_groups(a, hopperkit.per_token_cast_to_fp8)
    b_fp8, sfb = quant_groups(b, hopperkit.per_block_cast_to_fp8)
    masked_m = torch.tensor(counts, dtype=torch.int32, device="cuda")
    d = poison_(torch.empty(G, m_max, N, dtype=torch.bfloat16, device="cuda"))
    hopperkit.m_grouped_fp8_gemm_nt_masked((a_fp8, sfa), (b_fp8, sfb), d, masked_m, 16)
    for e, c in enumerate(counts):
        dead = d[e, c:]
        assert ((dead == 0) | dead.isnan()).all(), f"group {e}: rows past masked_m must stay untouched or 0"
        if c:
            ref = ref_gemm.fp8_gemm_nt(a_fp8[e, :c], sfa[e, :c], b_fp8[e], sfb[e], out_dtype=torch.float32)
            assert_fp8_gemm_close(f"group {e} ({c} rows)", d[e, :c], a[e, :c].float() @ b[e].float().T, ref)


def test_bf16_contiguous_and_masked():
    gen = seeded_generator("cuda", "many groups", "bf16")
    b = torch.randn(G, N, K, generator=gen, device="cuda").to(torch.bfloat16)
    counts = routed_counts("bf16 contiguous", 300)
    m_indices, starts = contiguous_m_indices(list(enumerate(counts)), 128)
    a = torch.randn(m_indices.numel(), K, generator=gen, device="cuda").to(torch.bfloat16)
    pad = (m_indices == -1).cuda()
    a[pad] = float("nan")
    d = poison_(torch.empty(m_indices.numel(), N, dtype=torch.bfloat16, device="cuda"))
    hopperkit.m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices.cuda())
    assert torch.equal(d[pad], torch.zeros_like(d[pad])), "padding rows of D must be 0"
    for e, (s, c) in enumerate(zip(starts, counts)):
        if c:
            r = slice(s, s + c)
            assert_gemm_elementwise(f"contiguous expert {e}", d[r], ref_gemm.bf16_gemm_nt(a[r], b[e], out_dtype=torch.float32))

    counts = routed_counts("bf16 masked", 100)
    m_max = 128
    a = torch.randn(G, m_max, K, generator=gen, device="cuda").to(torch.bfloat16)
    masked_m = torch.tensor(counts, dtype=torch.int32, device="cuda")
    d = poison_(torch.empty(G, m_max, N, dtype=torch.bfloat16, device="cuda"))
    hopperkit.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, 16)
    for e, c in enumerate(counts):
        dead = d[e, c:]
        assert ((dead == 0) | dead.isnan()).all(), f"masked group {e}: rows past masked_m must stay untouched or 0"
        if c:
            assert_gemm_elementwise(f"masked group {e}", d[e, :c], ref_gemm.bf16_gemm_nt(a[e, :c], b[e], out_dtype=torch.float32))


def test_k_grouped_fp8_and_bf16():
    """Weight gradients of 256 experts: per-expert K (tokens) of 0-3 blocks of 128."""
    m, n = 256, 384
    gen = torch.Generator().manual_seed(7)
    ks = (128 * torch.randint(0, 4, (G,), generator=gen)).tolist()
    ks[-1] = 384
    dgen = seeded_generator("cuda", "many groups", "k-grouped")
    a_parts = [block_scaled_randn(dgen, m, kg) for kg in ks]
    b_parts = [block_scaled_randn(dgen, n, kg) for kg in ks]
    qa = [hopperkit.per_token_cast_to_fp8(p) for p in a_parts]
    qb = [hopperkit.per_token_cast_to_fp8(p) for p in b_parts]
    a8, b8 = torch.cat([q[0].flatten() for q in qa]), torch.cat([q[0].flatten() for q in qb])
    sfa = torch.cat([q[1].contiguous() for q in qa], dim=1)
    sfb = torch.cat([q[1].contiguous() for q in qb], dim=1)
    c = torch.randn(G, m, n, generator=dgen, device="cuda")
    ks_dev = torch.tensor(ks, dtype=torch.int32, device="cuda")
    d = poison_(torch.empty_like(c))
    hopperkit.k_grouped_fp8_gemm_nt_contiguous((a8, sfa), (b8, sfb), d, ks, ks_dev, c=c)
    assert_k_grouped_gemm("k-grouped fp8", d, c, ks, lambda e, _: ref_gemm.fp8_gemm_nt(
        qa[e][0], qa[e][1], qb[e][0], qb[e][1], torch.zeros_like(c[e]), recipe=(1, 1, 128), out_dtype=torch.float32))

    a16 = torch.cat([p.t() for p in a_parts]).contiguous()  # [Σks, m]: each group's K rows back to back
    b16 = torch.cat([p.t() for p in b_parts]).contiguous()
    d = poison_(torch.empty_like(c))
    hopperkit.k_grouped_bf16_gemm_tn_contiguous(a16, b16, d, ks, ks_dev, c=c)
    assert_k_grouped_gemm("k-grouped bf16", d, c, ks, lambda _, rows: a16[rows].float().T @ b16[rows].float())
