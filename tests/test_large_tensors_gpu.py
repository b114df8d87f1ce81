"""GPU tests of operands and outputs past 2³¹ elements (and so past 2³¹ and 2³² bytes).

A serving engine reaches these sizes without trying: an MoE prefill of 37,500 tokens routed to 8
experts is 300,000 rows of the m-grouped contiguous GEMM, whose D at N = 7168 holds 2.15·10⁹
elements; a weight-gradient step over 256 experts of 7168×2048 has a k-grouped D of 3.8·10⁹ FP32
elements; a 40 GB paged KV cache holds 540,000 pages. Any element, byte or page offset computed in 32
bits somewhere between the Python wrapper and the kernel's address arithmetic shows here as wrong
or unwritten values past the boundary, or as an illegal address.

Each op runs once on such a size with fresh random inputs and a NaN-poisoned output, and the whole
output is checked against the PyTorch reference, in slices of rows so that the reference's FP32
intermediates stay small. The tests need up to about 20 GB of device memory and skip, saying so, on
a device with less free.
"""

from __future__ import annotations

import gc
import math

import pytest
import torch

import hopperkit
from hopperkit.reference import gemm as ref_gemm
from hopperkit.reference import mla as ref_mla
from hopperkit.reference import quant as ref_quant
from hopperkit.testing import (assert_close, assert_fp8_gemm_close, assert_gemm_elementwise, block_scaled_randn,
                               contiguous_m_indices, poison_, seeded_generator)

pytestmark = pytest.mark.gpu

FP8 = torch.float8_e4m3fn
# 300,032 rows (a multiple of 128, as contiguous segments are) × 7168 columns = 2,150,629,376
# elements: the rows from 299,594 on start past element 2³¹.
ROWS = 300_032
N_WIDE = 7168
CHUNK = 16_384  # rows per reference slice (a multiple of 128: whole weight-scale blocks)
assert ROWS * N_WIDE > 2**31


@pytest.fixture(autouse=True)
def _kernels_only(forbid_reference):
    """A GEMM that fell back to the reference path would pass without testing any kernel."""
    forbid_reference("fp8_gemm_nt", "bf16_gemm_nt", "m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_gemm_nt_masked",
                     "m_grouped_bf16_gemm_nt_contiguous", "k_grouped_fp8_gemm_nt_contiguous",
                     "k_grouped_bf16_gemm_tn_contiguous")


@pytest.fixture(autouse=True)
def _release_memory():
    yield
    gc.collect()
    torch.cuda.empty_cache()


def need_free_memory(gib: float) -> None:
    free, _ = torch.cuda.mem_get_info()
    if free < gib * 2**30:
        pytest.skip(f"needs {gib:g} GiB of free device memory, the device has {free / 2**30:.1f}")


def chunks(rows: int, step: int = CHUNK):
    for r0 in range(0, rows, step):
        yield slice(r0, min(rows, r0 + step))


def aligned_rows(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    """An empty tensor of ``shape`` whose rows start 16 bytes apart (a view of wider rows where the
    last dimension is not a multiple of 8 elements), as the GEMMs' outputs must."""
    *lead, cols = shape
    return torch.empty(*lead, -(-cols // 8) * 8, dtype=dtype, device="cuda")[..., :cols]


def filled_randn(key: str, rows: int, cols: int, dtype: torch.dtype = torch.bfloat16,
                 block_rows: int = 1) -> torch.Tensor:
    """``block_scaled_randn`` of [rows, cols], drawn slice by slice (each slice from its own seeded
    generator, so ``slice_randn`` redraws any slice without keeping the tensor)."""
    x = aligned_rows(rows, cols, dtype=dtype)
    for r in chunks(rows):
        x[r] = slice_randn(key, r, cols, dtype, block_rows)
    return x


def slice_randn(key: str, r: slice, cols: int, dtype: torch.dtype = torch.bfloat16, block_rows: int = 1) -> torch.Tensor:
    gen = seeded_generator("cuda", "large", key, r.start)
    return block_scaled_randn(gen, r.stop - r.start, cols, block_rows=block_rows).to(dtype)


def assert_all_written(name: str, d: torch.Tensor) -> None:
    for r in chunks(d.shape[0]):
        nan = int(d[r].isnan().sum())
        assert nan == 0, f"{name}: {nan} NaN elements in rows {r.start}-{r.stop - 1} (unwritten?)"


def test_fp8_gemm_d_past_2_31_elements():
    need_free_memory(8)
    k = 256
    a = filled_randn("fp8 dense a", ROWS, k)
    b = block_scaled_randn(seeded_generator("cuda", "large", "fp8 dense b"), N_WIDE, k, block_rows=128)
    a_fp8, sfa = hopperkit.per_token_cast_to_fp8(a)
    b_fp8, sfb = hopperkit.per_block_cast_to_fp8(b)
    d = poison_(torch.empty(ROWS, N_WIDE, dtype=torch.bfloat16, device="cuda"))
    hopperkit.fp8_gemm_nt((a_fp8, sfa), (b_fp8, sfb), d)
    for r in chunks(ROWS):
        reference = ref_gemm.fp8_gemm_nt(a_fp8[r], sfa[r], b_fp8, sfb, out_dtype=torch.float32)
        assert_fp8_gemm_close(f"fp8_gemm_nt rows {r.start}-{r.stop - 1}", d[r], a[r].float() @ b.float().T, reference)


def test_casts_and_fp8_gemm_a_past_2_31_elements():
    """The activation itself past 2³¹ elements: both casts of a 4.3 GB BF16 tensor (bit-exact against
    the reference, slice by slice), then the GEMM reading the 2.15 GB FP8 result."""
    need_free_memory(16)
    k, n = N_WIDE, 256
    x = filled_randn("fp8 long a", ROWS, k)
    # Blocks of the outputs' sizes, poisoned and freed: the caching allocator hands them to the cast's
    # outputs, so a byte the kernel does not write keeps a value no reference produces.
    junk = [torch.full((ROWS * k,), 0x7F, dtype=torch.uint8, device="cuda"),
            torch.full((ROWS * k // 128,), math.nan, dtype=torch.float32, device="cuda")]
    del junk
    a_fp8, sfa = hopperkit.per_token_cast_to_fp8(x)
    for r in chunks(ROWS):
        ref_fp8, ref_sf = ref_quant.per_token_cast_to_fp8(x[r])
        bad = int((a_fp8[r].view(torch.uint8) != ref_fp8.view(torch.uint8)).sum())
        assert bad == 0, f"per_token_cast_to_fp8: {bad} FP8 bytes differ from the reference in rows {r.start}-{r.stop - 1}"
        assert torch.equal(sfa[r].contiguous().view(torch.int32), ref_sf.view(torch.int32)), (
            f"per_token_cast_to_fp8: scale bits differ in rows {r.start}-{r.stop - 1}")

    blocks_fp8, blocks_sf = hopperkit.per_block_cast_to_fp8(x)
    for r in chunks(ROWS):
        ref_fp8, ref_sf = ref_quant.per_block_cast_to_fp8(x[r])
        bad = int((blocks_fp8[r].view(torch.uint8) != ref_fp8.view(torch.uint8)).sum())
        assert bad == 0, f"per_block_cast_to_fp8: {bad} FP8 bytes differ from the reference in rows {r.start}-{r.stop - 1}"
        rb = slice(r.start // 128, -(-r.stop // 128))
        assert torch.equal(blocks_sf[rb].view(torch.int32), ref_sf.view(torch.int32)), (
            f"per_block_cast_to_fp8: scale bits differ in row blocks {rb.start}-{rb.stop - 1}")
    del blocks_fp8, blocks_sf

    b = block_scaled_randn(seeded_generator("cuda", "large", "fp8 long b"), n, k, block_rows=128)
    b_fp8, sfb = hopperkit.per_block_cast_to_fp8(b)
    d = poison_(torch.empty(ROWS, n, dtype=torch.bfloat16, device="cuda"))
    hopperkit.fp8_gemm_nt((a_fp8, sfa), (b_fp8, sfb), d)
    for r in chunks(ROWS):
        reference = ref_gemm.fp8_gemm_nt(a_fp8[r], sfa[r], b_fp8, sfb, out_dtype=torch.float32)
        assert_fp8_gemm_close(f"fp8_gemm_nt K={k} rows {r.start}-{r.stop - 1}", d[r], x[r].float() @ b.float().T,
                              reference)


def test_m_grouped_fp8_contiguous_d_past_2_31_elements():
    need_free_memory(8)
    k, g = 256, 4
    counts = [75_008, 75_008, 75_008, 74_950]  # the last segment ends in 58 padding rows
    segments = [(e, c) for e, c in zip((2, 0, 3, 1), counts)]
    m_indices, starts = contiguous_m_indices(segments, 128)
    assert m_indices.numel() == ROWS
    a = filled_randn("fp8 contiguous a", ROWS, k)
    b = block_scaled_randn(seeded_generator("cuda", "large", "fp8 contiguous b"), g, N_WIDE, k, block_rows=128)
    a_fp8, sfa = hopperkit.per_token_cast_to_fp8(a)
    pairs = [hopperkit.per_block_cast_to_fp8(b[e]) for e in range(g)]
    b_fp8, sfb = torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])
    d = poison_(torch.empty(ROWS, N_WIDE, dtype=torch.bfloat16, device="cuda"))
    hopperkit.m_grouped_fp8_gemm_nt_contiguous((a_fp8, sfa), (b_fp8, sfb), d, m_indices.cuda())
    for (e, c), s in zip(segments, starts):
        for r in chunks(c):
            rows = slice(s + r.start, s + r.stop)
            reference = ref_gemm.fp8_gemm_nt(a_fp8[rows], sfa[rows], b_fp8[e], sfb[e], out_dtype=torch.float32)
            assert_fp8_gemm_close(f"contiguous expert {e} rows {rows.start}-{rows.stop - 1}", d[rows],
                                  a[rows].float() @ b[e].float().T, reference)
    padding = d[starts[-1] + counts[-1]:]
    assert padding.shape[0] == 58 and torch.equal(padding, torch.zeros_like(padding)), "padding rows of D must be 0"


def test_m_grouped_fp8_masked_d_past_2_31_elements():
    """64 groups of 4736 rows × 7168: group 63 starts 1.5·10⁷ elements before 2³¹ and ends past it."""
    need_free_memory(8)
    g, m_max, k = 64, 4736, 128
    assert (g - 1) * m_max * N_WIDE < 2**31 < g * m_max * N_WIDE
    gen = seeded_generator("cuda", "large", "fp8 masked")
    counts = torch.randint(1, m_max + 1, (g,), generator=gen, device="cuda")
    counts[-3:] = m_max
    a = block_scaled_randn(gen, g, m_max, k)
    b = block_scaled_randn(gen, g, N_WIDE, k, block_rows=128)
    pairs = [hopperkit.per_token_cast_to_fp8(a[e]) for e in range(g)]
    a_fp8, sfa = torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])
    pairs = [hopperkit.per_block_cast_to_fp8(b[e]) for e in range(g)]
    b_fp8, sfb = torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])
    masked_m = counts.to(torch.int32)
    d = poison_(torch.empty(g, m_max, N_WIDE, dtype=torch.bfloat16, device="cuda"))
    hopperkit.m_grouped_fp8_gemm_nt_masked((a_fp8, sfa), (b_fp8, sfb), d, masked_m, m_max // 2)
    for e, c in enumerate(counts.tolist()):
        reference = ref_gemm.fp8_gemm_nt(a_fp8[e, :c], sfa[e, :c], b_fp8[e], sfb[e], out_dtype=torch.float32)
        assert_fp8_gemm_close(f"masked group {e} ({c} rows)", d[e, :c], a[e, :c].float() @ b[e].float().T, reference)
        dead = d[e, c:]
        assert ((dead == 0) | dead.isnan()).all(), f"masked group {e}: rows past masked_m must stay untouched or 0"


BF16_DENSE_CASES = {
    # D's dtype, C, N: which epilogue stores the tile (csrc/gemm/bf16/epilogue.cuh store_tile)
    "bf16_d": (torch.bfloat16, "none", N_WIDE),  # TMA store
    "bf16_d_c_other": (torch.bfloat16, "other", N_WIDE),  # stores from registers, C read per element
    "fp32_d_c_is_d": (torch.float32, "d", N_WIDE),  # TMA reduce-add into D
    "fp32_d_n7166_c_is_d": (torch.float32, "d", 7166),  # N % 4 != 0: red.global.add from registers
}


@pytest.mark.parametrize("case", BF16_DENSE_CASES)
def test_bf16_gemm_d_past_2_31_elements(case):
    """D past 2³¹ elements through each of the BF16 kernel's stores; C (4.3 or 8.6 GB) drawn slice by
    slice and redrawn for the check."""
    out_dtype, c_mode, n = BF16_DENSE_CASES[case]
    need_free_memory(14)
    k = 64
    a = filled_randn("bf16 dense a", ROWS, k)
    b = block_scaled_randn(seeded_generator("cuda", "large", "bf16 dense b"), n, k)
    if c_mode == "d":
        d = filled_randn("bf16 dense c", ROWS, n, out_dtype)
        hopperkit.bf16_gemm_nt(a, b, d, c=d)
    else:
        c = filled_randn("bf16 dense c", ROWS, n, out_dtype) if c_mode == "other" else None
        d = poison_(aligned_rows(ROWS, n, dtype=out_dtype))
        hopperkit.bf16_gemm_nt(a, b, d, c=c)
        del c
    for r in chunks(ROWS):
        reference = ref_gemm.bf16_gemm_nt(a[r], b, out_dtype=torch.float32)
        if c_mode != "none":
            reference += slice_randn("bf16 dense c", r, n, out_dtype).float()
        assert_gemm_elementwise(f"bf16_gemm_nt {case} rows {r.start}-{r.stop - 1}", d[r], reference)


def test_m_grouped_bf16_contiguous_d_past_2_31_elements():
    need_free_memory(8)
    k, g = 64, 3
    counts = [100_000, 100_000, 99_968]
    m_indices, _ = contiguous_m_indices(list(zip((1, 2, 0), counts)), 128)
    rows = m_indices.numel()  # 300,160: 96 padding rows after each of the first two segments
    assert rows * N_WIDE > 2**31
    a = filled_randn("bf16 contiguous a", rows, k)
    b = torch.randn(g, N_WIDE, k, generator=seeded_generator("cuda", "large", "bf16 contiguous b"),
                    device="cuda").to(torch.bfloat16)
    d = poison_(torch.empty(rows, N_WIDE, dtype=torch.bfloat16, device="cuda"))
    hopperkit.m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices.cuda())
    experts = m_indices.cuda()
    for r in chunks(rows):
        ids = experts[r]
        ref = torch.zeros(r.stop - r.start, N_WIDE, device="cuda")
        for e in range(g):
            mine = ids == e
            ref[mine] = ref_gemm.bf16_gemm_nt(a[r][mine], b[e], out_dtype=torch.float32)
        padding = d[r][ids < 0]
        assert torch.equal(padding, torch.zeros_like(padding)), f"rows {r.start}-{r.stop - 1}: padding rows of D must be 0"
        assert_gemm_elementwise(f"m_grouped_bf16 contiguous rows {r.start}-{r.stop - 1}", d[r], ref)


# k-grouped: 150 groups of 7168×2048 FP32 (2.2·10⁹ elements, 8.8 GB); group 146 holds element 2³¹.
K_GROUPS, K_M, K_N, K_PER_GROUP = 150, 7168, 2048, 128
assert (K_GROUPS - 5) * K_M * K_N < 2**31 < K_GROUPS * K_M * (K_N - 2)


def k_grouped_c(d: torch.Tensor) -> None:
    """C = D in place: each group drawn from its own generator (``group_c`` redraws it)."""
    for e in range(d.shape[0]):
        d[e] = group_c(e, d.shape[2])


def group_c(e: int, n: int = K_N) -> torch.Tensor:
    return torch.randn(K_M, n, generator=seeded_generator("cuda", "large", "k-grouped c", e), device="cuda")


def test_k_grouped_fp8_d_past_2_31_elements():
    need_free_memory(12)
    ks = [K_PER_GROUP] * K_GROUPS
    ks[7] = 0  # an empty group keeps its C
    gen = seeded_generator("cuda", "large", "k-grouped fp8")
    parts_a = [hopperkit.per_token_cast_to_fp8(block_scaled_randn(gen, K_M, kg)) for kg in ks]
    parts_b = [hopperkit.per_token_cast_to_fp8(block_scaled_randn(gen, K_N, kg)) for kg in ks]
    a8 = torch.cat([q[0].flatten() for q in parts_a])
    b8 = torch.cat([q[0].flatten() for q in parts_b])
    sfa = torch.cat([q[1].contiguous() for q in parts_a], dim=1)
    sfb = torch.cat([q[1].contiguous() for q in parts_b], dim=1)
    d = torch.empty(K_GROUPS, K_M, K_N, device="cuda")
    k_grouped_c(d)
    ks_dev = torch.tensor(ks, dtype=torch.int32, device="cuda")
    hopperkit.k_grouped_fp8_gemm_nt_contiguous((a8, sfa), (b8, sfb), d, ks, ks_dev, c=d)
    for e in range(K_GROUPS):
        c = group_c(e)
        if ks[e] == 0:
            assert torch.equal(d[e], c), f"k-grouped fp8: the empty group {e} must keep C"
            continue
        product = ref_gemm.fp8_gemm_nt(parts_a[e][0], parts_a[e][1], parts_b[e][0], parts_b[e][1], torch.zeros_like(c),
                                       recipe=(1, 1, 128), out_dtype=torch.float32)
        assert_gemm_elementwise(f"k-grouped fp8 group {e}", d[e] - c, product)


@pytest.mark.parametrize("n", [K_N, K_N - 2], ids=["tma_reduce", "n_odd_red_global"])
def test_k_grouped_bf16_d_past_2_31_elements(n):
    """N = 2046 (not a multiple of 4) adds the products by red.global.add from registers."""
    need_free_memory(12)
    ks = [K_PER_GROUP] * K_GROUPS
    ks[-1] = 0
    gen = seeded_generator("cuda", "large", "k-grouped bf16")
    a = torch.randn(sum(ks), K_M, generator=gen, device="cuda").to(torch.bfloat16)
    b = aligned_rows(sum(ks), n, dtype=torch.bfloat16)  # TMA reads B: its rows 16 bytes apart
    b.copy_(torch.randn(sum(ks), n, generator=gen, device="cuda"))
    d = aligned_rows(K_GROUPS, K_M, n, dtype=torch.float32)
    k_grouped_c(d)
    ks_dev = torch.tensor(ks, dtype=torch.int32, device="cuda")
    hopperkit.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, ks_dev, c=d)
    start = 0
    for e in range(K_GROUPS):
        c = group_c(e, n)
        rows = slice(start, start + ks[e])
        start += ks[e]
        if ks[e] == 0:
            assert torch.equal(d[e], c), f"k-grouped bf16 N={n}: the empty group {e} must keep C"
            continue
        assert_gemm_elementwise(f"k-grouped bf16 N={n} group {e}", d[e] - c, a[rows].float().T @ b[rows].float())


def test_mla_decode_cache_past_2_31_elements():
    """A 4.4 GB BF16 cache of 60,000 pages (2.2·10⁹ elements): the requests' pages lie past byte 2³¹
    and past element 2³¹, and every slot the requests do not own holds NaN."""
    need_free_memory(8)
    page, d_qk, d_v = 64, 576, 512
    num_blocks = 60_000
    assert num_blocks * page * d_qk > 2**31
    gen = seeded_generator("cuda", "large", "mla")
    k_cache = torch.full((num_blocks, page, 1, d_qk), math.nan, dtype=torch.bfloat16, device="cuda")
    seqlens = torch.tensor([4096, 3001, 1, 2500], dtype=torch.int32, device="cuda")
    b, max_blocks = seqlens.numel(), 64
    # Pages from the last 1500 (past element 2³¹) and from around byte 2³¹ (page 29,127).
    pool = torch.cat([torch.arange(num_blocks - 1500, num_blocks), torch.arange(29_000, 29_300)])
    pick = pool[torch.randperm(pool.numel(), generator=torch.Generator().manual_seed(5))[: b * max_blocks]]
    block_table = pick.to(torch.int32).view(b, max_blocks).cuda()
    for i, n in enumerate(seqlens.tolist()):
        pages = block_table[i, : -(-n // page)].long()
        values = (torch.randn(pages.numel() * page, d_qk, generator=gen, device="cuda") / 10).clamp(-1, 1)
        values[n:] = math.nan
        k_cache[pages] = values.view(-1, page, 1, d_qk).to(torch.bfloat16)
        block_table[i, -(-n // page):] = 2147480000
    q = (torch.randn(b, 1, 128, d_qk, generator=gen, device="cuda") / 10).clamp(-1, 1).to(torch.bfloat16)
    tsm, num_splits = hopperkit.get_mla_metadata(seqlens, 128, 1)
    out, lse = hopperkit.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, d_v, tsm, num_splits, causal=True)
    ref_out, ref_lse = ref_mla.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, d_v, causal=True)
    assert not torch.isnan(out).any(), "out has NaN: a read outside the requests' slots"
    assert_close("out", out, ref_out, 8e-4, 2.01 / 128, 5e-6)
    assert_close("lse", lse, ref_lse, 1e-6, 8.01 / 65536)
