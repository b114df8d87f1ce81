"""Test and benchmark helpers shared by hopperkit's tests, benchmarks and users' own checks.

- ``calc_diff``: DeepGEMM's accuracy metric, ``1 - 2·Σxy / Σ(x² + y²)`` in float64.
- ``assert_close``: FlashMLA's element rule (abs OR rel), after matching inf/NaN positions exactly,
  plus a whole-tensor cosine bound.
- ``poison_``: fill an output with NaN (or a sentinel for integer tensors) before a kernel runs, so
  an element the kernel forgot to write cannot pass.
- ``seeded_generator``, ``block_scaled_randn``: reproducible random GEMM operands whose scale blocks
  differ in magnitude, so that a kernel applying a wrong block's scale fails its checks;
  ``assert_fp8_gemm_close``: DESIGN.md's FP8 GEMM contract on one output;
  ``assert_gemm_elementwise``: every element of a GEMM output within a bound of its reference;
  ``assert_k_grouped_gemm``: a k-grouped GEMM's output, group by group.
- ``capture_graph``: a CUDA graph of one call, warmed up on a side stream first.
- ``launched_kernel_traits``: the template arguments of the kernels one call launches (which tile
  configuration a heuristic picked).
- ``paged_decode_inputs``: random MLA decode inputs over a paged cache, with NaN in unused slots.
- ``bench``: CUDA-event timing with an L2 flush before every timed call; ``warm_up_gpu`` first brings
  an idle GPU to its working clock.
"""

from __future__ import annotations

import math
import re
import zlib
from typing import Callable, Optional, Sequence

import torch

__all__ = ["calc_diff", "cos_diff", "assert_close", "poison_", "seeded_generator", "contiguous_m_indices",
           "block_scaled_randn", "assert_fp8_gemm_close", "assert_gemm_elementwise", "assert_k_grouped_gemm",
           "capture_graph", "launched_kernel_traits", "paged_decode_inputs", "bench", "bench_interleaved",
           "L2Flusher", "FLUSH_MODES", "warm_up_gpu"]

FP8_QUANT_TOL = 1e-3  # calc_diff vs the product of the unquantized inputs (quantization error included)
FP8_REF_TOL = 1e-5  # calc_diff vs hopperkit.reference on the same quantized operands


def calc_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    """``1 - 2·Σ(x·y) / Σ(x² + y²)`` in float64 (0 when both are all-zero). DeepGEMM's FP8 metric."""
    x, y = x.double(), y.double()
    denominator = (x * x + y * y).sum()
    if denominator == 0:
        return 0.0
    return float(1 - 2 * (x * y).sum() / denominator)


cos_diff = calc_diff


def assert_close(
    name: str,
    ans: torch.Tensor,
    ref: torch.Tensor,
    abs_tol: float,
    rel_tol: float,
    cos_tol: float = math.inf,
) -> None:
    """Assert ``ans`` matches ``ref``.

    1. Shapes and dtypes are equal.
    2. +inf, -inf and NaN sit at exactly the same positions.
    3. Every other element has ``|ans-ref| < abs_tol`` or ``|ans-ref| / (|ref| + 1e-6) < rel_tol``.
    4. ``cos_diff(ans, ref) <= cos_tol`` over the finite elements (0 when Σref² < 1e-12).
    """
    assert ans.shape == ref.shape, f"{name}: shape {tuple(ans.shape)} != reference {tuple(ref.shape)}"
    assert ans.dtype == ref.dtype, f"{name}: dtype {ans.dtype} != reference {ref.dtype}"
    a = ans.detach().to("cpu", torch.float64)
    r = ref.detach().to("cpu", torch.float64)
    for what, fa, fr in (
        ("+inf", a == math.inf, r == math.inf),
        ("-inf", a == -math.inf, r == -math.inf),
        ("NaN", torch.isnan(a), torch.isnan(r)),
    ):
        if not torch.equal(fa, fr):
            idx = (fa != fr).nonzero()[:5].tolist()
            raise AssertionError(
                f"{name}: {what} positions differ ({int((fa != fr).sum())} elements, first at {idx}; "
                f"ans there {[a[tuple(i)].item() for i in idx]}, ref {[r[tuple(i)].item() for i in idx]})"
            )
    special = torch.isinf(r) | torch.isnan(r)
    a = torch.where(special, 0.0, a)
    r = torch.where(special, 0.0, r)
    err = (a - r).abs()
    rel = err / (r.abs() + 1e-6)
    bad = (err >= abs_tol) & (rel >= rel_tol)
    if bad.any():
        idx = bad.nonzero()[:5].tolist()
        raise AssertionError(
            f"{name}: {int(bad.sum())} of {a.numel()} elements exceed abs {abs_tol:g} and rel {rel_tol:g}; "
            f"max abs err {err.max().item():.3g}; first at {idx}: ans {[a[tuple(i)].item() for i in idx]}, "
            f"ref {[r[tuple(i)].item() for i in idx]}"
        )
    if cos_tol != math.inf:
        denom = (r * r).sum()
        cd = 0.0 if denom < 1e-12 else float(1 - 2 * (a * r).sum() / (a * a + r * r).sum())
        assert cd <= cos_tol, f"{name}: cosine diff {cd:.3g} > {cos_tol:g}"


def poison_(t: torch.Tensor) -> torch.Tensor:
    """Fill ``t`` in place with NaN (floating point) or a large sentinel (integers); returns ``t``."""
    if t.is_floating_point():
        if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            t.view(torch.uint8).fill_(0x7F)  # e4m3fn NaN bit pattern
        else:
            t.fill_(math.nan)
    elif t.dtype == torch.bool:
        t.fill_(True)
    else:
        t.fill_(torch.iinfo(t.dtype).max // 2 + 12345 if t.dtype != torch.uint8 else 0xA5)
    return t


def seeded_generator(device: "torch.device | str", *key: object) -> torch.Generator:
    """A generator on ``device`` seeded from ``key`` (crc32 of its repr, so a case draws the same data
    in every process, whatever ran before it)."""
    return torch.Generator(device=device).manual_seed(zlib.crc32(repr(key).encode()))


def contiguous_m_indices(segments: Sequence[tuple[int, int]], alignment: int = 128) -> tuple[torch.Tensor, list[int]]:
    """``m_indices`` of the m-grouped contiguous layout (int32, CPU) and each segment's first row:
    segment i holds ``rows`` rows of expert ``expert`` (-1: padding), then -1 up to the next multiple of
    ``alignment`` (``get_mk_alignment_for_contiguous_layout()``), as a MoE layer lays out routed tokens.
    ``segments``: (expert, rows) pairs, in row order."""
    ids: list[int] = []
    starts: list[int] = []
    for expert, rows in segments:
        starts.append(len(ids))
        ids += [expert] * rows + [-1] * (-rows % alignment)
    return torch.tensor(ids, dtype=torch.int32), starts


def block_scaled_randn(gen: torch.Generator, *shape: int, block_rows: int = 1) -> torch.Tensor:
    """BF16 randn of ``shape`` with each (``block_rows`` × 128) block of the last two dimensions
    multiplied by exp(0.5·z), z standard normal per block.

    With plain randn every block's amax, hence every FP8 scale, is within a few percent of the others,
    and a kernel that applies the wrong block's scale stays within 1e-5 of the reference (measured: a
    swapped SFB block row moved calc_diff by 3e-7). The spread makes such a bug cost > 1e-2 and leaves
    the quantization error (calc_diff ≈ 6.8e-4 against the unquantized product) as for plain randn.
    Use ``block_rows=1`` for operands with 1×128 scales, 128 for 128×128 weight blocks.
    """
    *lead, rows, cols = shape
    blocks = (*lead, -(-rows // block_rows), -(-cols // 128))
    factor = torch.exp(0.5 * torch.randn(*blocks, generator=gen, device=gen.device))
    factor = factor.repeat_interleave(block_rows, -2)[..., :rows, :].repeat_interleave(128, -1)[..., :cols]
    return (torch.randn(*shape, generator=gen, device=gen.device) * factor).to(torch.bfloat16)


def assert_fp8_gemm_close(name: str, d: torch.Tensor, unquantized: torch.Tensor, reference: torch.Tensor) -> None:
    """An FP8 GEMM output against the contract: no NaN left (every element written, after a
    NaN-poisoned start), ``calc_diff < 1e-3`` against the product of the unquantized inputs, and
    ``calc_diff < 1e-5`` against hopperkit.reference on the same FP8 operands (the kernel implements the
    reference's two-level accumulation; only summation order and the final rounding differ)."""
    assert not torch.isnan(d).any(), f"{name}: NaN left in D ({int(torch.isnan(d).sum())} elements unwritten?)"
    diff = calc_diff(d, unquantized)
    assert diff < FP8_QUANT_TOL, f"{name}: calc_diff vs the unquantized product {diff:.3g} >= {FP8_QUANT_TOL:g}"
    diff = calc_diff(d, reference)
    assert diff < FP8_REF_TOL, f"{name}: calc_diff vs hopperkit.reference {diff:.3g} >= {FP8_REF_TOL:g}"


def assert_gemm_elementwise(name: str, d: torch.Tensor, ref: torch.Tensor) -> None:
    """Every element of a GEMM output against its FP32 reference: no NaN (every element written, after
    a NaN-poisoned start) and ``|d - ref| <= |ref|/64 + 0.01·rms(ref)``. The relative term covers the
    rounding of a BF16 output (2⁻⁹) with room for summation order; the rms term covers elements whose
    reference is near zero by cancellation. A wrong tile, row, group or scale block breaks it by
    orders of magnitude, where ``calc_diff`` over a large output could average a few wrong rows away."""
    d, ref = d.float(), ref.float()
    assert not d.isnan().any(), f"{name}: {int(d.isnan().sum())} of {d.numel()} elements NaN (unwritten?)"
    if ref.numel() == 0:
        return
    rms = ref.pow(2).mean().sqrt().item()
    bound = ref.abs() / 64 + 0.01 * rms + 1e-30
    excess = (d - ref).abs() / bound
    worst = int(excess.argmax())
    assert excess.flatten()[worst] <= 1, (
        f"{name}: element {tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), d.shape))} is "
        f"{d.flatten()[worst].item():.6g}, the reference {ref.flatten()[worst].item():.6g} (rms {rms:.3g}); "
        f"{int((excess > 1).sum())} of {d.numel()} elements out of bounds")


def assert_k_grouped_gemm(
    name: str,
    d: torch.Tensor,
    base: torch.Tensor,
    ks: Sequence[int],
    product: Callable[[int, slice], torch.Tensor],
) -> None:
    """A k-grouped GEMM's output ``d`` [G, M, N] against ``base`` [G, M, N] (C, or zeros where the call
    had none) plus each group's product. A group with K = 0 must leave its ``base`` bitwise (the
    kernels skip it, so an unwritten NaN or a stray write shows); every other group's ``d[g] - base[g]``
    passes :func:`assert_gemm_elementwise` against ``product(g, rows)``, where ``rows`` is the group's
    slice of the concatenated K."""
    start = 0
    for g, kg in enumerate(ks):
        rows = slice(start, start + kg)
        start += kg
        if kg == 0:
            assert torch.equal(d[g], base[g]), f"{name} group {g}: an empty group must leave C (or zeros)"
            continue
        assert_gemm_elementwise(f"{name} group {g}", d[g] - base[g], product(g, rows))


def capture_graph(call: Callable[[], object]) -> "tuple[torch.cuda.CUDAGraph, object]":
    """(graph, what the captured ``call`` returned). ``call`` runs once on a side stream first, so
    that lazy initialisation (allocator pools, library handles, kernel attributes) happens outside
    the capture, as torch.cuda.graphs recommends."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result = call()
    return graph, result


def launched_kernel_traits(call: Callable[[], object], kernel: str, traits: str) -> "set[str]":
    """The template arguments of ``traits`` in the names of the ``kernel`` launches that one ``call``
    makes, whitespace removed: e.g. ``{"256,128,1,false,false,2,true"}`` for ``kernel =
    "fp8_gemm_1d2d_kernel"`` and ``traits = "Fp8Gemm1d2dTraits"``. ``call`` runs once untraced
    first, so that its one-time work stays out of the trace."""
    call()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    pattern = re.compile(re.escape(traits) + r"<([^>]*)>")
    return {re.sub(r"\s", "", pattern.search(e.name).group(1)) for e in prof.events() if kernel in e.name}


def paged_decode_inputs(
    seqlens: torch.Tensor,
    s_q: int,
    h_q: int,
    h_k: int = 1,
    dtype: torch.dtype = torch.bfloat16,
    page_block_size: int = 64,
    head_dim: int = 576,
    nan_unused: bool = True,
    generator: Optional[torch.Generator] = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random ``(q, k_cache, block_table)`` for ``flash_mla_with_kvcache`` on ``seqlens``' device.

    Values as FlashMLA's tests draw them (randn / 10 clamped to [-1, 1]); blocks are a random
    permutation; with ``nan_unused`` every cache slot past a request's length holds NaN and unused
    block-table entries hold 2147480000, so anything that reads them shows up.
    """
    device = seqlens.device
    b = seqlens.shape[0]
    lens = seqlens.cpu()
    blocks = max(1, -(-int(lens.max()) // page_block_size))
    q = (torch.randn(b, s_q, h_q, head_dim, generator=generator) / 10).clamp(-1, 1).to(dtype)
    k_cache = (torch.randn(b * blocks, page_block_size, h_k, head_dim, generator=generator) / 10).clamp(-1, 1).to(dtype)
    block_table = torch.randperm(b * blocks, generator=generator, dtype=torch.int32).view(b, blocks)
    if nan_unused:
        slot = torch.arange(blocks * page_block_size).view(1, blocks, page_block_size)
        unused = slot >= lens.view(b, 1, 1)  # [b, blocks, page]
        k_cache[block_table.long()] = k_cache[block_table.long()].masked_fill(unused[..., None, None], math.nan)
        used_blocks = torch.arange(blocks)[None, :] < -(-lens[:, None] // page_block_size)
        block_table = block_table.masked_fill(~used_blocks, 2147480000)
    return q.to(device), k_cache.to(device), block_table.to(device)


FLUSH_MODES = ("zero", "read")


class L2Flusher:
    """Streams a buffer larger than L2 through it so that the next kernel reads its inputs from HBM.

    ``mode="zero"`` overwrites the buffer (DeepGEMM's and FlashMLA's benchmarks flush this way): L2 is
    left full of dirty lines, and their write-back (up to the 60 MB of an H200's L2) competes with the
    next kernel's reads (on an H200, a ``torch.sum`` over 117 MB reads at 2715 GB/s after it and at 3231
    GB/s after a reading flush).
    ``mode="read"`` reads the buffer instead: L2 is left full of clean lines of an unrelated tensor,
    which is what a hardware flush (write back, then invalidate) leaves and what a decode GEMM finds
    after the previous layer's weight reads. Neither holds any of the timed kernel's data.
    """

    def __init__(self, nbytes: int = 256 << 20, device: Optional[torch.device] = None, mode: str = "zero"):
        if mode not in FLUSH_MODES:
            raise ValueError(f"hopperkit: flush mode must be one of {FLUSH_MODES}, got {mode!r}")
        self.mode = mode
        self.buf = torch.ones(nbytes // 4, dtype=torch.float32, device=device or "cuda")
        self.sink = torch.empty((), dtype=torch.float32, device=self.buf.device)

    def __call__(self) -> None:
        if self.mode == "zero":
            self.buf.zero_()
        else:
            torch.sum(self.buf, dim=0, out=self.sink)


def warm_up_gpu(seconds: float = 0.5, device: Optional[torch.device] = None) -> None:
    """Keeps the GPU busy with matrix products for about ``seconds`` before anything is timed.

    An idle H200 sits at its lowest clock (345 MHz) and takes a while under load to reach its boost
    clock; without this, the first shapes of a benchmark are timed on the way up (on an H200, the
    first (N, K) pair of bench_gemm.py's decode rows came out 1.5-2.5x slower than in a later pass).
    """
    x = torch.randn(4096, 4096, dtype=torch.bfloat16, device=device or "cuda")
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    elapsed = 0.0
    while elapsed < seconds:
        for _ in range(10):
            x @ x
        end.record()
        end.synchronize()
        elapsed = start.elapsed_time(end) / 1e3


def bench(
    fn: Callable[[], object],
    warmup: int = 5,
    iters: int = 30,
    flush_l2: bool = True,
    flush_mode: str = "zero",
    warmup_s: float = 0.02,
) -> dict:
    """Median / min / mean time of ``fn()`` in microseconds, CUDA events around each call.

    With ``flush_l2`` a 256 MB buffer goes through L2 before every timed call (outside the events), so
    each call starts with none of its data in L2, like a real decode step or layer does;
    ``flush_mode`` says how (``L2Flusher``: "zero" leaves dirty lines, "read" clean ones). Warm-up:
    ``warmup`` calls, then about ``warmup_s`` seconds of flushed calls (``bench_interleaved``).
    """
    return bench_interleaved({"fn": fn}, warmup, iters, flush_l2, flush_mode, warmup_s)["fn"]


def bench_interleaved(
    fns: dict[str, Callable[[], object]],
    warmup: int = 5,
    iters: int = 30,
    flush_l2: bool = True,
    flush_mode: str = "zero",
    warmup_s: float = 0.02,
    host_slack_us: float = 100.0,
) -> dict[str, dict]:
    """``bench`` for several calls at once: name → median / min / mean µs of each.

    The calls take turns within one timing loop (each round runs them all, in reverse order every
    other round), so that they see the same clocks: timed one after the other, the card's power and
    thermal state drifts between the first call's iterations and the last's, and a ratio between two
    of them then depends on which ran first. Before timing, each call runs ``warmup`` times, then
    whole rounds (flush included) run for about ``warmup_s`` seconds: the clocks of a card that
    idled while the host prepared the inputs take milliseconds to come back up, and the first rounds
    of short calls would otherwise be timed on the way. The events time the GPU only while the host
    stays ahead of it, so before each call (after its flush) the GPU sleeps for about
    ``host_slack_us`` (at 2 GHz): the host's launch work for the call, up to that long, then happens
    while the GPU still has work queued. Without it the flush alone (about 100 µs on an H200) was the
    slack: in two of three bench_gemm.py runs on an H200, some rows of short kernels came out 1.5-4x
    slower for both calls of the row, ours and the peer's alike; in the run after the sleep went in,
    no row did.
    """
    flush = L2Flusher(mode=flush_mode) if flush_l2 else None
    slack_cycles = int(host_slack_us * 2000)
    names = list(fns)
    for name in names:
        for _ in range(warmup):
            fns[name]()

    def before_call() -> None:
        if flush is not None:
            flush()
        if slack_cycles > 0:
            torch.cuda._sleep(slack_cycles)

    def one_round() -> None:
        for name in names:
            before_call()
            fns[name]()

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    one_round()
    end.record()
    end.synchronize()
    round_s = max(start.elapsed_time(end) / 1e3, 1e-6)
    for _ in range(min(1000, int(warmup_s / round_s))):
        one_round()
    torch.cuda.synchronize()
    events = {name: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                     for _ in range(iters)] for name in names}
    for i in range(iters):
        for name in (names if i % 2 == 0 else names[::-1]):
            before_call()
            start, end = events[name][i]
            start.record()
            fns[name]()
            end.record()
    torch.cuda.synchronize()
    result = {}
    for name in names:
        times = sorted(s.elapsed_time(e) * 1e3 for s, e in events[name])
        result[name] = {"median_us": times[len(times) // 2], "min_us": times[0], "mean_us": sum(times) / len(times)}
    return result
