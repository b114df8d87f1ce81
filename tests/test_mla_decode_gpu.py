"""Dense MLA decode on SM90: the public ``hopperkit.flash_mla_with_kvcache`` (BF16/FP16 paged cache, page
64, head dims 576/512) against ``hopperkit.reference.mla`` with DESIGN.md's tolerances (out abs 8e-4 /
rel 2.01/128 / cos 5e-6; lse abs 1e-6 / rel 8.01/65536; inf/NaN positions identical; empty rows out 0).

- ``test_decode_matches_reference``: a fixed sample of FlashMLA's grid b × s_q × s_k × h_q × h_k ×
  varlen × causal (see ``_grid``), in both metadata styles (explicit ``(tsm, num_splits)`` and the lazy
  ``get_mla_metadata()`` object, whose second use stands for the next layer), a few cases in FP16, a
  few with a non-default softmax_scale.
- Inputs as FlashMLA's test draws them (randn/10 clamped; varlen lengths max(N(s_k, s_k/2), s_q), about
  half zeroed in a third of the varlen cases), plus poison: q is a view into a NaN-padded buffer, every
  unused cache slot (whole blocks and the tail of each last block) holds NaN, blocks are randomly
  permuted, unused block-table entries hold 2147480000, and in every other case k_cache and
  block_table are views into padded buffers too (NaN / 2147480000 in the padding).
- CUDA-graph capture of metadata + decode, replayed with new lengths written into the captured tensors.
- Bitwise repeatability over 20 calls; s_q = 1 ignores ``causal``; causal rows that see no key;
  metadata built for another batch or head layout raises ``ValueError("hopperkit: ...")``.
- Drawn cases (see "drawn cases"); on the CPU (in CI too) the same draws run on the reference, and
  must pass there and fail when the op's output is corrupted.
"""

from __future__ import annotations

import itertools
import math
import os
import random
import zlib
from typing import NamedTuple, Optional

import pytest
import torch

import hopperkit
from hopperkit.reference import mla as mla_ref
from hopperkit.testing import assert_close, capture_graph

PAGE = 64
D_QK, D_V = 576, 512
UNUSED_BLOCK = 2147480000
OUT_TOL = (8e-4, 2.01 / 128, 5e-6)  # abs, rel, cos
LSE_TOL = (1e-6, 8.01 / 65536)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


# --------------------------------------------------------------------------------------------- cases


class Case(NamedTuple):
    b: int
    s_q: int
    s_k: int
    h_q: int
    h_k: int
    varlen: bool
    causal: bool
    zeros: bool = False  # varlen with about half of the requests at length 0
    dtype: torch.dtype = torch.bfloat16
    lazy_meta: bool = False  # get_mla_metadata() object instead of explicit (tsm, num_splits)
    strided_cache: bool = False  # k_cache and block_table as views into padded buffers
    softmax_scale: Optional[float] = None

    @property
    def id(self) -> str:
        flags = [
            "var0" if self.zeros else "var" if self.varlen else "",
            "causal" if self.causal else "",
            "fp16" if self.dtype == torch.float16 else "",
            "lazy" if self.lazy_meta else "tsm",
            "strided" if self.strided_cache else "",
            f"scale{self.softmax_scale}" if self.softmax_scale is not None else "",
        ]
        return "-".join([f"b{self.b}-sq{self.s_q}-sk{self.s_k}-hq{self.h_q}-hk{self.h_k}"] + [f for f in flags if f])


AXES = {  # the grid (FlashMLA's dense test grid, plus b = 128 and s_k = 16384)
    "b": (1, 2, 6, 64, 128),
    "s_q": (1, 2, 4),
    "s_k": (20, 140, 4096, 16384),
    "h_q": (1, 16, 63, 64, 128),
    "h_k": (1, 2),
    "varlen": (False, True),
    "causal": (False, True),
}
MAX_SAMPLED_TOKENS = 64 * 4096  # b * s_k bound of the random sample: the cache and the reference grow with it


def _grid(n_random: int = 120, seed: int = 0) -> list[Case]:
    """``n_random`` combinations drawn with a fixed seed from the grid's cheap part (b·s_k bounded), then
    one more for any axis value the draw missed, then two b=128, s_k=4096 cases beyond the bound."""
    rng = random.Random(seed)
    pool = [c for c in itertools.product(*AXES.values()) if c[3] % c[4] == 0 and c[0] * c[2] <= MAX_SAMPLED_TOKENS]
    picked = rng.sample(pool, n_random)
    for axis, values in enumerate(AXES.values()):
        for v in values:
            if not any(c[axis] == v for c in picked):
                picked.append(rng.choice([c for c in pool if c[axis] == v]))
    cases = []
    for i, c in enumerate(picked):
        varlen = c[5]
        cases.append(Case(*c, zeros=varlen and i % 3 == 0, dtype=torch.float16 if i % 10 == 9 else torch.bfloat16,
                          lazy_meta=i % 2 == 1, strided_cache=i % 4 >= 2, softmax_scale=0.3 if i % 7 == 3 else None))
    # FlashMLA's corner case (b=128, s_k=4096, varlen with zero lengths), and one with two KV heads
    cases.append(Case(128, 2, 4096, 128, 1, True, True, zeros=True))
    cases.append(Case(128, 1, 4096, 64, 2, True, False, lazy_meta=True, strided_cache=True))
    return cases


CASES = _grid()


# -------------------------------------------------------------------------------------------- inputs


def _padded(t: torch.Tensor, extra_last: int) -> torch.Tensor:
    """``t`` copied into a buffer one larger in every dim (``extra_last`` larger in the last) filled with
    NaN (2147480000 for integers): same values, padded strides, last dim contiguous."""
    fill = math.nan if t.is_floating_point() else UNUSED_BLOCK
    buf = torch.full([n + 1 for n in t.shape[:-1]] + [t.shape[-1] + extra_last], fill, dtype=t.dtype, device=t.device)
    view = buf[tuple(slice(0, n) for n in t.shape)]
    view.copy_(t)
    return view


def case_seqlens(case: Case, seed: int) -> torch.Tensor:
    """int32 [b] on the CPU: s_k, or FlashMLA's varlen draw max(N(s_k, s_k/2), s_q) with optional zeros."""
    if not case.varlen:
        return torch.full((case.b,), case.s_k, dtype=torch.int32)
    gen = torch.Generator().manual_seed(seed)
    lens = (torch.randn(case.b, generator=gen) * (case.s_k / 2) + case.s_k).clamp(min=case.s_q)
    if case.zeros:
        lens[torch.randn(case.b, generator=gen) > 0] = 0
    return lens.int()


def make_inputs(lens: torch.Tensor, s_q: int, h_q: int, h_k: int, dtype: torch.dtype, device: torch.device,
                seed: int, strided_cache: bool = False, max_blocks: Optional[int] = None):
    """``(q, k_cache, block_table, cache_seqlens)`` on ``device`` for CPU lengths ``lens``, poisoned as the
    module docstring says. ``max_blocks`` defaults to FlashMLA's: the longest length rounded up to 256."""
    b = lens.numel()
    if max_blocks is None:
        max_blocks = max(1, cdiv(int(lens.max()), 256) * 256 // PAGE)
    gen = torch.Generator(device).manual_seed(seed)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, device=device, dtype=dtype).div_(10).clamp_(-1, 1)

    q = _padded(rand(b, s_q, h_q, D_QK), 128)
    seqlens = lens.to(device)
    # Logical cache [b, max_blocks, PAGE, ...] with NaN from each request's length on, stored at
    # randomly permuted physical blocks.
    logical = rand(b, max_blocks, PAGE, h_k, D_QK)
    pos = torch.arange(max_blocks * PAGE, device=device).view(1, max_blocks, PAGE)
    logical.masked_fill_((pos >= seqlens.view(b, 1, 1))[..., None, None], math.nan)
    perm = torch.randperm(b * max_blocks, generator=torch.Generator().manual_seed(seed), dtype=torch.int32)
    block_table = perm.to(device).view(b, max_blocks)
    k_cache = torch.empty(b * max_blocks, PAGE, h_k, D_QK, dtype=dtype, device=device)
    k_cache[block_table.flatten().long()] = logical.flatten(0, 1)
    used = torch.arange(max_blocks, device=device)[None, :] < (seqlens[:, None] + PAGE - 1) // PAGE
    block_table.masked_fill_(~used, UNUSED_BLOCK)
    if strided_cache:
        k_cache, block_table = _padded(k_cache, 128), _padded(block_table, 16)
    return q, k_cache, block_table, seqlens


def case_inputs(case: Case, device: torch.device):
    seed = zlib.crc32(repr(case).encode())  # str hashes are salted per process; crc32 is stable
    return make_inputs(case_seqlens(case, seed), case.s_q, case.h_q, case.h_k, case.dtype, device, seed,
                       case.strided_cache)


# -------------------------------------------------------------------------------------------- checks


def explicit_metadata(seqlens: torch.Tensor, q: torch.Tensor, k_cache: torch.Tensor):
    _, s_q, h_q, _ = q.shape
    h_k = k_cache.shape[2]
    return hopperkit.get_mla_metadata(seqlens, s_q * h_q // h_k, h_k)


def check(out, lse, q, k_cache, block_table, seqlens, causal: bool, softmax_scale: Optional[float] = None) -> None:
    ref_out, ref_lse = mla_ref.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, D_V,
                                                      softmax_scale=softmax_scale, causal=causal)
    # The reference never gives NaN; a NaN here came from a poisoned slot, padding or table entry.
    assert not torch.isnan(out).any(), f"out has {int(torch.isnan(out).sum())} NaN elements"
    assert_close("out", out, ref_out, *OUT_TOL)
    assert_close("lse", lse, ref_lse, *LSE_TOL)
    no_key = torch.isinf(ref_lse).transpose(1, 2)  # [b, s_q, h_q]: rows that attend to nothing
    assert (out[no_key] == 0).all(), "rows without keys must give out exactly 0"


# --------------------------------------------------------------------------------------------- tests


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_decode_matches_reference(cuda, case: Case):
    q, k_cache, block_table, seqlens = case_inputs(case, cuda)
    kw = {"softmax_scale": case.softmax_scale, "causal": case.causal}
    if case.lazy_meta:
        meta, _ = hopperkit.get_mla_metadata()
        out, lse = hopperkit.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, D_V, meta, **kw)
    else:
        tsm, num_splits = explicit_metadata(seqlens, q, k_cache)
        out, lse = hopperkit.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, D_V, tsm, num_splits, **kw)
    check(out, lse, q, k_cache, block_table, seqlens, **kw)
    if case.lazy_meta:  # the next layer of the same decode step reuses the filled schedule
        out2, lse2 = hopperkit.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, D_V, meta, **kw)
        assert torch.equal(out2, out) and torch.equal(lse2, lse), "second use of a filled FlashMLASchedMeta differs"


@pytest.mark.gpu
@pytest.mark.parametrize("s_q,causal", [(1, False), (2, True)])
def test_cuda_graph_replay_with_new_seqlens(cuda, s_q, causal):
    """Capture get_mla_metadata + flash_mla_with_kvcache once at full length; each replay gets new
    lengths (zeros, a different set of split requests), q and poisoned cache copied in place."""
    b, h_q, h_k, max_len = 8, 128, 1, 4096
    max_blocks = max_len // PAGE
    full = torch.full((b,), max_len, dtype=torch.int32)
    q, k_cache, block_table, seqlens = make_inputs(full, s_q, h_q, h_k, torch.bfloat16, cuda, 0, max_blocks=max_blocks)

    def step():
        tsm, num_splits = explicit_metadata(seqlens, q, k_cache)
        out, lse = hopperkit.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, D_V, tsm, num_splits, causal=causal)
        return num_splits, out, lse

    graph, (g_num_splits, g_out, g_lse) = capture_graph(step)

    replays = [
        [4096] * 8,  # every request split
        [4096, 0, 0, 0, 0, 0, 0, 2],  # one request over many partitions
        [3000, 0, 17, 4096, 0, 2, 900, 64],
        [2, 3, 63, 64, 65, 128, 129, 200],  # short: at most the last few split
        [0] * 8,  # nothing to attend: out 0, lse +inf
    ]
    split_patterns = set()
    for trial, lengths in enumerate(replays, start=1):
        new = make_inputs(torch.tensor(lengths, dtype=torch.int32), s_q, h_q, h_k, torch.bfloat16, cuda, trial,
                          max_blocks=max_blocks)
        for dst, src in zip((q, k_cache, block_table, seqlens), new):
            dst.copy_(src)
        graph.replay()
        torch.cuda.synchronize()
        check(g_out, g_lse, q, k_cache, block_table, seqlens, causal)
        split_patterns.add(tuple((g_num_splits[1:] - g_num_splits[:-1] > 1).tolist()))
    assert len(split_patterns) >= 3, f"the replays should change which requests are split: {split_patterns}"


@pytest.mark.gpu
@pytest.mark.parametrize("case", [
    Case(2, 1, 16384, 128, 1, False, False),  # split-heavy: ~33 splits per request, combine on every one
    Case(128, 2, 1024, 64, 1, True, True, zeros=True),  # many requests, some empty
], ids=lambda c: c.id)
def test_repeatable_bitwise(cuda, case: Case):
    q, k_cache, block_table, seqlens = case_inputs(case, cuda)
    tsm, num_splits = explicit_metadata(seqlens, q, k_cache)
    assert int((num_splits[1:] - num_splits[:-1]).max()) > 1, "the case must split requests"
    results = [hopperkit.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, D_V, tsm, num_splits,
                                                causal=case.causal) for _ in range(20)]
    out, lse = results[0]
    for i, (o, l) in enumerate(results[1:], start=2):
        assert torch.equal(o, out) and torch.equal(l, lse), f"call {i} differs from call 1"
    check(out, lse, q, k_cache, block_table, seqlens, case.causal)


@pytest.mark.gpu
@pytest.mark.parametrize("h_q,h_k", [(128, 1), (64, 2)])
def test_causal_ignored_for_single_token(cuda, h_q, h_k):
    case = Case(6, 1, 4096, h_q, h_k, True, False, zeros=True)
    q, k_cache, block_table, seqlens = case_inputs(case, cuda)
    tsm, num_splits = explicit_metadata(seqlens, q, k_cache)
    out, lse = hopperkit.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, D_V, tsm, num_splits, causal=False)
    out_c, lse_c = hopperkit.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, D_V, tsm, num_splits, causal=True)
    assert torch.equal(out_c, out) and torch.equal(lse_c, lse)
    check(out, lse, q, k_cache, block_table, seqlens, causal=False)


@pytest.mark.gpu
def test_causal_rows_without_keys(cuda):
    """s_q=4, causal, lengths below s_q: query token j sees keys [0, len - (3 - j)), so the first rows of
    short requests see none and must give out 0, lse +inf (FlashMLA's test never draws this)."""
    lens = torch.tensor([1, 2, 3, 0, 4, 5, 130], dtype=torch.int32)
    q, k_cache, block_table, seqlens = make_inputs(lens, 4, 64, 1, torch.bfloat16, cuda, 7)
    tsm, num_splits = explicit_metadata(seqlens, q, k_cache)
    out, lse = hopperkit.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, D_V, tsm, num_splits, causal=True)
    check(out, lse, q, k_cache, block_table, seqlens, causal=True)
    assert torch.isinf(lse[0, :, :3]).all() and torch.isfinite(lse[0, :, 3]).all()


@pytest.mark.gpu
@pytest.mark.parametrize("b,s_q,h_q,max_len", [(16384, 1, 16, 200), (3, 1023, 128, 1100)],
                         ids=["batch_16384", "query_rows_130944"])
def test_decode_at_the_size_limits(cuda, b, s_q, h_q, max_len):
    """The largest batch the metadata kernel takes (16384 requests, two ints each in its shared
    memory), and the most query rows per request the combine grid takes (s_q·h_q up to 131070):
    both lazy and explicit metadata, lengths 0..max_len, causal."""
    gen = torch.Generator().manual_seed(b + s_q)
    lens = torch.randint(0, max_len + 1, (b,), generator=gen, dtype=torch.int32)
    lens[0] = max_len
    q, k_cache, block_table, seqlens = make_inputs(lens, s_q, h_q, 1, torch.bfloat16, cuda, 13)
    tsm, num_splits = explicit_metadata(seqlens, q, k_cache)
    out, lse = hopperkit.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, D_V, tsm, num_splits, causal=True)
    check(out, lse, q, k_cache, block_table, seqlens, causal=True)
    meta, _ = hopperkit.get_mla_metadata()
    out2, lse2 = hopperkit.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, D_V, meta, causal=True)
    assert torch.equal(out2, out) and torch.equal(lse2, lse), "lazy metadata gave another result"


@pytest.mark.gpu
def test_metadata_for_another_layout_raises(cuda):
    lens = torch.tensor([700, 0, 4096, 64, 1, 3000, 129, 2048], dtype=torch.int32)
    q, k_cache, block_table, seqlens = make_inputs(lens, 1, 128, 1, torch.bfloat16, cuda, 11)
    decode = hopperkit.flash_mla_with_kvcache

    tsm, num_splits = hopperkit.get_mla_metadata(seqlens[:4].clone(), 128, 1)  # built for b=4
    with pytest.raises(ValueError, match="hopperkit:"):
        decode(q, k_cache, block_table, seqlens, D_V, tsm, num_splits)
    tsm, num_splits = hopperkit.get_mla_metadata(seqlens, 16, 1)  # built for h_q=16: num_sms partitions, not num_sms/2
    with pytest.raises(ValueError, match="hopperkit:"):
        decode(q, k_cache, block_table, seqlens, D_V, tsm, num_splits)

    meta, _ = hopperkit.get_mla_metadata()
    decode(q, k_cache, block_table, seqlens, D_V, meta)  # fills meta for b=8, h_q=128
    with pytest.raises(ValueError, match="hopperkit:"):
        decode(q[:, :, :64], k_cache, block_table, seqlens, D_V, meta)  # another h_q
    with pytest.raises(ValueError, match="hopperkit:"):
        decode(q[:4], k_cache, block_table[:4], seqlens[:4], D_V, meta)  # another batch size


@pytest.mark.gpu
def test_metadata_the_checks_cannot_tell_stays_in_bounds(cuda):
    # Metadata built for another batch but shaped like this one's: the shape checks pass it. The kernel
    # clips each partition's requests to the batch and drops partial rows outside o_accum, so the call
    # gives wrong values but touches nothing outside its tensors (scripts/gpu_check.sh runs this test
    # under compute-sanitizer too); the next well-formed call is exact.
    lens = torch.tensor([700, 0, 4096, 64, 1, 3000, 129, 2048], dtype=torch.int32)
    q, k_cache, block_table, seqlens = make_inputs(lens, 1, 128, 1, torch.bfloat16, cuda, 12)
    decode = hopperkit.flash_mla_with_kvcache
    long = torch.full((32,), 8192, dtype=torch.int32, device=cuda)
    tsm, num_splits = hopperkit.get_mla_metadata(long, 128, 1)  # 32 long requests
    assert int(tsm[:, 1].max()) >= 8  # partitions whose requests run past this batch
    decode(q, k_cache, block_table, seqlens, D_V, tsm, num_splits[:9].clone())
    # Partial rows past o_accum's batch + num_sm_parts rows.
    decode(q, k_cache, block_table, seqlens, D_V, tsm, num_splits[:9] + 8 + tsm.shape[0])
    tsm, num_splits = hopperkit.get_mla_metadata(long[:8].clone(), 128, 1)  # this batch size, other lengths
    decode(q, k_cache, block_table, seqlens, D_V, tsm, num_splits)
    torch.cuda.synchronize()

    out, lse = decode(q, k_cache, block_table, seqlens, D_V, *explicit_metadata(seqlens, q, k_cache))
    check(out, lse, q, k_cache, block_table, seqlens, causal=False)


# ------------------------------------------------------------------------------------- drawn cases

# Cases drawn at random beyond the grid's axes: any batch up to 160, s_q up to 6, any h_q that h_k
# divides, per-request lengths anywhere in [0, a drawn maximum] (multiples of the 64-token block
# and zeros over-represented), block tables wider than needed, an SM count set with set_num_sms (the
# schedule's partitions follow it), PDL, either metadata style, either dtype, strided caches and a
# drawn softmax scale. HOPPERKIT_FUZZ_CASES / HOPPERKIT_FUZZ_SEED scale them as in
# test_gemm_fuzz_gpu.py (a tenth as many cases here: each builds a cache).
FUZZ_CASES = max(1, int(os.environ.get("HOPPERKIT_FUZZ_CASES", "200")) // 10)
FUZZ_SEED = int(os.environ.get("HOPPERKIT_FUZZ_SEED", "0"))


def run_drawn_case(device: torch.device, rng: random.Random, case: int, max_tokens: int = 200_000) -> str:
    """Draws one case from ``rng`` (``case`` seeds its inputs), decodes it and checks it; returns its name.
    ``max_tokens`` caps the cache tokens of the batch (the cache and the reference grow with them)."""
    h_k = rng.choice((1, 1, 2))
    h_q = h_k * rng.randint(1, 128 // h_k)
    s_q = rng.choice((1, 1, 2, 3, 4, 6))
    b = rng.choice((rng.randint(1, 8), rng.randint(1, 160)))
    max_len = rng.choice((64, 300, 2000, 9000))
    max_len = max(1, min(max_len, max_tokens // b))
    lens = []
    for _ in range(b):
        r = rng.random()
        lens.append(0 if r < 0.1 else PAGE * rng.randint(1, cdiv(max_len, PAGE)) if r < 0.25 else rng.randint(1, max_len))
    lens_t = torch.tensor(lens, dtype=torch.int32)
    causal = rng.random() < 0.5
    dtype = torch.float16 if rng.random() < 0.2 else torch.bfloat16
    scale = None if rng.random() < 0.6 else rng.uniform(0.02, 0.5)
    max_blocks = max(1, cdiv(max(lens), PAGE)) + rng.choice((0, 0, 1, 7))
    q, k_cache, block_table, seqlens = make_inputs(lens_t, s_q, h_q, h_k, dtype, device, zlib.crc32(f"{case}".encode()),
                                                   strided_cache=rng.random() < 0.3, max_blocks=max_blocks)
    num_sms = rng.choice((None, None, None, 1, 7, 33, 100, 131))
    lazy = rng.random() < 0.5
    pdl = rng.random() < 0.2
    kw = {"softmax_scale": scale, "causal": causal}
    name = (f"b={b} s_q={s_q} h_q={h_q} h_k={h_k} lens<={max(lens)} causal={causal} {dtype} scale={scale} "
            f"num_sms={num_sms} lazy={lazy} pdl={pdl}")
    hopperkit.set_num_sms(num_sms)
    hopperkit.set_pdl(pdl)
    try:
        if lazy:
            meta, _ = hopperkit.get_mla_metadata()
            out, lse = hopperkit.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, D_V, meta, **kw)
        else:
            tsm, num_splits = explicit_metadata(seqlens, q, k_cache)
            out, lse = hopperkit.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, D_V, tsm, num_splits, **kw)
        if device.type == "cuda":
            torch.cuda.synchronize()
    finally:
        hopperkit.set_num_sms(None)
        hopperkit.set_pdl(False)
    try:
        check(out, lse, q, k_cache, block_table, seqlens, **kw)
    except AssertionError as e:
        raise AssertionError(f"{name}: {e}") from e
    return name


@pytest.mark.gpu
@pytest.mark.parametrize("case", range(FUZZ_CASES), ids=[f"seed{FUZZ_SEED}-case{i}" for i in range(FUZZ_CASES)])
def test_decode_drawn_cases(cuda, case):
    run_drawn_case(cuda, random.Random(f"hopperkit mla fuzz {FUZZ_SEED} {case}"), case)


# The checks, checked (CPU, so in CI too): the drawn cases on the CPU, where the op computes with the
# reference, at most 4096 cache tokens each, must pass; then with the op's output corrupted after the
# reference computed it, every case with something to corrupt must fail.
CPU_CASES = 6


def run_cpu_case(case: int) -> str:
    return run_drawn_case(torch.device("cpu"), random.Random(f"hopperkit mla fuzz cpu {case}"), case, max_tokens=4096)


def corrupt(kind: str, out: torch.Tensor, lse: torch.Tensor) -> bool:
    """``out``: one element of out off by more than any tolerance; ``unwritten``: out all NaN; ``lse``: one
    finite (attending) lse off by 1. False where the output offers nothing to corrupt."""
    if kind == "unwritten":
        out.fill_(math.nan)
        return out.numel() > 0
    t = out if kind == "out" else lse
    positions = t.isfinite().nonzero()
    if positions.shape[0] == 0:
        return False
    pos = tuple(positions[positions.shape[0] // 2].tolist())
    t[pos] += 0.1 + t[pos].abs() if kind == "out" else 1.0
    return True


def test_drawn_cases_pass_on_the_reference():
    for case in range(CPU_CASES):
        run_cpu_case(case)


@pytest.mark.parametrize("kind", ["out", "unwritten", "lse"])
def test_drawn_cases_catch_a_corrupted_output(assert_faults_caught, kind):
    assert_faults_caught(["flash_mla_with_kvcache"], lambda _, result: corrupt(kind, *result), run_cpu_case,
                         CPU_CASES)
