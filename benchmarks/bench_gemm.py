"""GEMM benchmark: FP8 block-scaled dense GEMM (1d2d), the m-grouped FP8 MoE GEMMs (contiguous and
masked), the FP8 weight-gradient GEMMs (1d1d) and the BF16 GEMMs, each against the PyTorch/cuBLAS call a
user would otherwise make, measured in the same run, on an H100/H200.

  python benchmarks/bench_gemm.py [--quick] [--json FILE] [--only dense|grouped|wgrad|bf16]...

Sections (``--only`` picks some, repeatable; all four by default):
  dense    FP8 1d2d ``fp8_gemm_nt`` vs cuBLAS blockwise FP8 (``torch.nn.functional.scaled_mm`` with
           BlockWise1x128 × BlockWise128x128 scales, the same recipe). cuBLAS refuses N % 128 != 0;
           those rows compare against per-tensor ``torch._scaled_mm`` instead ("per-tensor*": a coarser,
           faster recipe, timed on the same FP8 bytes with unit scales; its output is not checked).
  grouped  ``m_grouped_fp8_gemm_nt_contiguous`` / ``_masked`` vs cuBLAS blockwise called once per group
           ("cuBLAS×G") and vs ``torch._scaled_grouped_mm`` with per-row scales ("rowwise-grp*": one
           launch, a coarser recipe, unit scales, output not checked). "mask4096" rows: the masked GEMM
           with M_max = 4096 and a few rows per group (DeepGEMM's test setting), valid rows counted.
           "uneven" rows: the contiguous GEMM with uneven expert sizes, each segment padded to 128 rows
           (a MoE prefill's layout), valid rows counted.
  wgrad    FP8 1d1d (1×128 scales on both operands, FP32 D = C + A·Bᵀ accumulated in place):
           ``fp8_gemm_nt(..., c=d, recipe=(1, 1, 128))`` and ``k_grouped_fp8_gemm_nt_contiguous`` vs a BF16
           ``torch.mm`` of the same shape (once per group for k-grouped): no cuBLAS call has this recipe, so
           the ratio says how the FP8 kernel compares with the BF16 GEMM it replaces.
  bf16     ``bf16_gemm_nt`` vs ``torch.mm``; ``m_grouped_bf16_gemm_nt_contiguous`` / ``_masked`` vs
           ``torch._grouped_mm`` (mask4096 rows: over the valid rows only, gathered beforehand);
           ``k_grouped_bf16_gemm_tn_contiguous`` (FP32 D accumulated in place) vs a BF16 ``torch.mm`` per
           group.

The dense section ends with what a decode row can reach after the same flush: ``torch.sum`` over
each B's bytes, and a one-element op (the time between the events of a call that does nothing).

Timing: CUDA events around the whole call (the Python wrapper included), 256 MB L2 flush before each
timed call, median. A row's hopperkit call and its baselines take turns in one timing loop
(``hopperkit.testing.bench_interleaved``), so that a ratio does not depend on which ran first on
a card whose clocks drift with its power and temperature; they first run together for about 20 ms,
so that the clocks have come back up from the idle of the row's setup. ``--flush zero`` (the default, DeepGEMM's benchmark
flush) overwrites the buffer and leaves L2 full of dirty lines whose write-back the next kernel pays
for; ``--flush read`` reads it and leaves clean lines, as a decode GEMM finds L2 after the previous
layer's weight reads. Ratio = baseline time / hopperkit time (> 1: hopperkit
faster); geomeans over the M = 4096 rows and over all rows.

Counts: FLOPs = 2·M·N·K (grouped: M = Σ rows). Bytes: every tensor the call reads or writes, once:
A, B, both scale tensors (logical sizes) and D (BF16); m_indices for the contiguous layout; masked
rows only for the masked layout (DeepGEMM's convention). ``diff`` = ``calc_diff`` of hopperkit's output
vs the product of the unquantized BF16 inputs (must be < 1e-3 for FP8, < 1e-5 for BF16; the run exits
1 if one is not, or if an output holds NaN after a NaN-poisoned start).

While an op runs its PyTorch reference (no kernel yet: the header says so) the reference is timed
with fewer iterations, and shapes whose reference call is estimated to take longer than a cap show
"—", so that --quick stays under about a minute and the full run under about five on an H200.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
import warnings
import zlib
from typing import Callable, Optional, Sequence

import torch

import hopperkit
from hopperkit import _ops
from hopperkit.testing import (FLUSH_MODES, bench, bench_interleaved, calc_diff, contiguous_m_indices, poison_,
                               warm_up_gpu)

SECTIONS = ("dense", "grouped", "wgrad", "bf16")

DENSE_MS = (1, 7, 64, 128, 4096)
DENSE_NK = ((2112, 7168), (576, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048))
QUICK_MS = (64, 4096)
QUICK_NK = ((7168, 16384), (2112, 7168), (24576, 1536))

GROUPED_NK = ((4096, 7168), (7168, 2048))
CONTIG_GM = ((4, 8192), (8, 4096))  # (groups, rows per group)
# (experts, mean rows per expert) of the "uneven" rows: the contiguous layout as a MoE prefill feeds it
# (_uneven_counts), segments ending anywhere on the 128-row grid.
CONTIG_UNEVEN_GM = ((32, 256),)
MASKED_GM = ((4, 256), (8, 128), (32, 32))  # (groups, masked_m = M_max per group)
# (groups, expected rows): M_max = 4096 per group and masked_m = expected × U(0.7, 1.3), DeepGEMM's
# masked test setting: a CUDA graph sized for the worst case, used by a few rows per expert.
MASKED_SPARSE_GM = ((32, 20), (32, 192))
MASKED_SPARSE_M_MAX = 4096
QUICK_CONTIG = (((4, 8192), (7168, 2048)),)
QUICK_MASKED = (((4, 256), (7168, 2048)), ((8, 128), (4096, 7168)))

WGRAD_DENSE = ((4096, 7168, 2048), (4096, 4096, 7168), (2112, 7168, 4096))  # (M, N, K)
WGRAD_K_GROUPED = ((4, 4096, 7168, 4096), (8, 7168, 2048, 4096))  # (G, M, N, K per group)
QUICK_WGRAD_DENSE = ((4096, 4096, 7168),)
QUICK_WGRAD_K_GROUPED = ((4, 4096, 7168, 4096),)

# (M, N, K): the two compute-bound shapes of the issue, then decode-sized M on DeepSeek's projection
# shapes (the split-K and narrow-tile paths).
BF16_DENSE = ((4096, 7168, 2048), (4096, 4096, 7168), (128, 7168, 2048),
              (1, 2112, 7168), (64, 2112, 7168), (128, 2112, 7168), (64, 576, 7168), (64, 4096, 7168),
              (1, 7168, 2048), (64, 7168, 2048), (64, 24576, 1536))
QUICK_BF16_DENSE = ((4096, 7168, 2048), (4096, 4096, 7168))

FP8_DIFF_TOL = 1e-3
BF16_DIFF_TOL = 1e-5

# Assumed H200 rates of the pure-PyTorch reference path (FP32 SIMT matmul, elementwise traffic,
# per-kernel launch cost), only used to estimate a reference call before running it.
_REF_FP32_FLOPS = 40e12
_REF_BYTES_PER_S = 2.5e12
_REF_LAUNCH_S = 8e-6


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


# --------------------------------------------------------------------------------------------------
# counting (pure Python)
# --------------------------------------------------------------------------------------------------


def fp8_dense_counts(m: int, n: int, k: int) -> tuple[int, int]:
    """(FLOPs, bytes) of a 1d2d FP8 GEMM: A, B (FP8), SFA [M, ⌈K/128⌉], SFB [⌈N/128⌉, ⌈K/128⌉] (FP32), D (BF16)."""
    kb = cdiv(k, 128)
    nbytes = m * k + n * k + 4 * m * kb + 4 * cdiv(n, 128) * kb + 2 * m * n
    return 2 * m * n * k, nbytes


def fp8_contiguous_counts(groups: int, rows: int, n: int, k: int) -> tuple[int, int]:
    """(FLOPs, bytes) of the m-grouped contiguous FP8 GEMM with ``rows`` rows per group (no padding)."""
    m_sum, kb = groups * rows, cdiv(k, 128)
    nbytes = (m_sum * k + groups * n * k + 4 * m_sum * kb + 4 * groups * cdiv(n, 128) * kb
              + 2 * m_sum * n + 4 * m_sum)
    return 2 * m_sum * n * k, nbytes


def fp8_masked_counts(groups: int, m: int, n: int, k: int) -> tuple[int, int]:
    """(FLOPs, bytes) of the masked FP8 GEMM with ``m`` valid rows in every group (bytes of valid rows)."""
    kb = cdiv(k, 128)
    nbytes = groups * (m * k + 4 * m * kb + n * k + 4 * cdiv(n, 128) * kb + 2 * m * n) + 4 * groups
    return 2 * groups * m * n * k, nbytes


def fp8_wgrad_counts(m: int, n: int, ks: Sequence[int]) -> tuple[int, int]:
    """(FLOPs, bytes) of the 1d1d GEMM over groups of K = ks (one group: dense): A, B (FP8), SFA, SFB
    (FP32, 1×128), and C read + D written (FP32 [M, N] per group)."""
    sum_k, kb = sum(ks), sum(cdiv(k, 128) for k in ks)
    nbytes = (m + n) * sum_k + 4 * (m + n) * kb + 2 * 4 * len(ks) * m * n
    return 2 * m * n * sum_k, nbytes


def bf16_counts(m: int, n: int, k: int, groups: int = 1) -> tuple[int, int]:
    """(FLOPs, bytes) of a BF16 GEMM over ``m`` rows in total and ``groups`` weight matrices [N, K]."""
    return 2 * m * n * k, 2 * (m * k + groups * n * k + m * n)


def reference_seconds(rows: int, n: int, k: int, evaluations: int = 1, two_level: bool = True) -> float:
    """Estimated time of one reference-path call computing [rows, K] × [N, K]ᵀ ``evaluations`` times.

    The FP8 reference loops over K blocks, each an FP32 matmul plus ~10 passes over an FP32 [rows, N]
    tensor (scale, product, accumulate, and the selects of the grouped versions); the BF16 reference
    is one FP32 matmul. The m-grouped contiguous references evaluate every group over all rows.
    """
    kb = cdiv(k, 128) if two_level else 1
    flops = 2 * rows * n * k
    traffic = kb * (10 if two_level else 2) * 4 * rows * n + 3 * 4 * (rows + n) * k
    launches = 6 * kb + 10
    return evaluations * (flops / _REF_FP32_FLOPS + traffic / _REF_BYTES_PER_S + launches * _REF_LAUNCH_S)


def geomean(values: Sequence[Optional[float]]) -> Optional[float]:
    xs = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in xs) / len(xs)) if xs else None


def tflops(flops: int, us: Optional[float]) -> Optional[float]:
    return None if us is None else flops / us / 1e6


def gbs(nbytes: int, us: Optional[float]) -> Optional[float]:
    return None if us is None else nbytes / us / 1e3


def ratio(base_us: Optional[float], hk_us: Optional[float]) -> Optional[float]:
    return None if base_us is None or hk_us is None else base_us / hk_us


# --------------------------------------------------------------------------------------------------
# cuBLAS scale layouts (pure tensor code, runs on CPU too)
# --------------------------------------------------------------------------------------------------


def cublas_sfa(sfa: torch.Tensor) -> torch.Tensor:
    """1×128 scales [M, ⌈K/128⌉] as cuBLAS blockwise wants them: column-major with stride exactly M
    (strides (1, M)); hopperkit's TMA-aligned layout pads M to a multiple of 4, which torch refuses.
    Built with explicit strides: ``.t().contiguous().t()`` keeps strides (⌈K/128⌉, 1) when M == 1."""
    m, kb = sfa.shape
    out = torch.empty_strided((m, kb), (1, max(m, 1)), dtype=sfa.dtype, device=sfa.device)
    return out.copy_(sfa)


def cublas_sfb(sfb: torch.Tensor) -> torch.Tensor:
    """128×128 scales [⌈N/128⌉, ⌈K/128⌉] → the [L4, ⌈N/128⌉] view with strides (1, L4) that
    torch 2.11 checks for BlockWise128x128 on mat_b, L4 = ⌈K/128⌉ rounded up to a multiple of 4
    (zero padding; a plain ``sfb.t()`` when ⌈K/128⌉ % 4 == 0, as for every shape benchmarked here)."""
    nb, kb = sfb.shape[-2], sfb.shape[-1]
    l4 = cdiv(kb, 4) * 4
    padded = sfb.new_zeros(*sfb.shape[:-2], nb, l4)
    padded[..., :kb] = sfb
    return padded.transpose(-1, -2)


def cublas_blockwise(a_fp8: torch.Tensor, sa: torch.Tensor, b_fp8: torch.Tensor, sb: torch.Tensor) -> torch.Tensor:
    """cuBLAS blockwise FP8 GEMM A·Bᵀ, BF16 out: ``sa`` from :func:`cublas_sfa`, ``sb`` from :func:`cublas_sfb`."""
    F = torch.nn.functional
    return F.scaled_mm(a_fp8, b_fp8.t(), sa, F.ScalingType.BlockWise1x128, sb, F.ScalingType.BlockWise128x128,
                       output_dtype=torch.bfloat16)


def _short(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0][:160] if str(e).strip() else ''}"


def _try(fn: Callable[[], object]) -> tuple[Optional[object], Optional[str]]:
    """Run ``fn`` once; (result, None) or (None, why it failed)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = fn()
        torch.cuda.synchronize()
        return out, None
    except Exception as e:  # noqa: BLE001  (a refused baseline is reported, not fatal)
        return None, _short(e)


# --------------------------------------------------------------------------------------------------
# timing
# --------------------------------------------------------------------------------------------------


class Timer:
    """Times hopperkit calls (kernel or reference path) and baselines with one policy per run."""

    def __init__(self, quick: bool, flush_mode: str = "zero"):
        self.quick = quick
        self.flush_mode = flush_mode
        self.iters = 20 if quick else 30
        self.ref_cap_s = 1.0 if quick else 3.0  # skip a reference call estimated above this
        self.ref_budget_s = 0.5 if quick else 2.0  # time spent per reference-path shape

    def baseline(self, fn: Callable[[], object]) -> float:
        return bench(fn, warmup=5, iters=self.iters, flush_mode=self.flush_mode)["median_us"]

    def together(self, fns: dict[str, Callable[[], object]]) -> dict[str, float]:
        """Median µs of each of ``fns`` (name → call), timed in turns within one loop."""
        if not fns:
            return {}
        timed = bench_interleaved(fns, warmup=5, iters=self.iters, flush_mode=self.flush_mode)
        return {name: t["median_us"] for name, t in timed.items()}

    def reference(self, fn: Callable[[], object], est_s: float) -> tuple[Optional[float], int]:
        """A hopperkit call on its reference path (no kernel): (median µs or None when skipped, iterations)."""
        if est_s > self.ref_cap_s:
            return None, 0
        iters = max(3, min(10, int(self.ref_budget_s / max(est_s, 1e-6))))
        return bench(fn, warmup=1, iters=iters, flush_mode=self.flush_mode)["median_us"], iters

    def skip_reference(self, kernel: bool, est_s: float) -> bool:
        return not kernel and est_s > self.ref_cap_s


def _check_output(d: torch.Tensor, ref: torch.Tensor) -> tuple[float, bool]:
    """(calc_diff vs ref, whether d holds NaN)."""
    return calc_diff(d, ref), bool(torch.isnan(d).any())


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------------
# sections
# --------------------------------------------------------------------------------------------------


def _measure_hopperkit(timer: Timer, kernel: bool, est: float, call: Callable[[], None], d: torch.Tensor,
                       ref: torch.Tensor, flops: int, nbytes: int, rows: Optional[torch.Tensor] = None,
                       baselines: Optional[dict[str, Callable[[], object]]] = None,
                       timed_call: Optional[Callable[[], None]] = None) -> tuple[dict, dict[str, float]]:
    """Check one call (NaN-poisoned D, diff vs ref), then time it together with ``baselines`` (name →
    call, each known to run): (the hopperkit fields of a row, name → baseline median µs).
    ``rows``: a boolean mask over D's leading dimensions, the rows that hold a result (the others are
    not checked). ``timed_call``: what is timed in place of ``call`` (the FP32-accumulating GEMMs are
    checked with C apart from D and timed accumulating in place). The reference path (no kernel) is
    timed on its own, with fewer iterations."""
    baselines = dict(baselines or {})
    timed = timed_call or call
    diff, has_nan = None, None
    if not timer.skip_reference(kernel, est):
        poison_(d)
        call()
        diff, has_nan = _check_output(d, ref) if rows is None else _check_output(d[rows], ref[rows])
    if kernel:
        assert "hopperkit" not in baselines
        times = timer.together({"hopperkit": timed, **baselines})
        hk_us, hk_iters = times.pop("hopperkit"), timer.iters
    else:
        hk_us, hk_iters = timer.reference(timed, est)
        times = timer.together(baselines)
    return {"flops": flops, "bytes": nbytes, "hk_us": hk_us, "hk_tflops": tflops(flops, hk_us),
            "hk_gbs": gbs(nbytes, hk_us), "hk_iters": hk_iters, "diff": diff, "nan": has_nan,
            "reference_estimate_s": est}, times


def _dense_case(dev: torch.device, timer: Timer, kernel: bool, m: int, b: torch.Tensor,
                b_fp8: torch.Tensor, sfb: torch.Tensor, sb: torch.Tensor) -> dict:
    n, k = b.shape
    a = torch.randn(m, k, dtype=torch.bfloat16, device=dev)
    a_fp8, sfa = hopperkit.per_token_cast_to_fp8(a)
    sa = cublas_sfa(sfa)
    ref = (a.float() @ b.float().t()).to(torch.bfloat16)
    d = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
    flops, nbytes = fp8_dense_counts(m, n, k)

    def call():
        hopperkit.fp8_gemm_nt((a_fp8, sfa), (b_fp8, sfb), d)

    def blockwise():
        return cublas_blockwise(a_fp8, sa, b_fp8, sb)

    one = torch.ones((), dtype=torch.float32, device=dev)

    def per_tensor():
        return torch._scaled_mm(a_fp8, b_fp8.t(), one, one, out_dtype=torch.bfloat16)

    out, refused = _try(blockwise)
    if out is not None:
        kind, base_diff, base = "blockwise", calc_diff(out, ref), blockwise
    else:
        kind, base_diff, base = "per-tensor*", None, None
        _, pt_refused = _try(per_tensor)
        if pt_refused is None:
            base = per_tensor
        else:
            kind, refused = "refused", f"{refused}; per-tensor: {pt_refused}"
    row = {"m": m, "n": n, "k": k}
    fields, times = _measure_hopperkit(timer, kernel, reference_seconds(m, n, k), call, d, ref, flops, nbytes,
                                       baselines={"baseline": base} if base is not None else None)
    row.update(fields)
    base_us = times.get("baseline")
    row.update({"baseline": kind, "baseline_us": base_us, "baseline_tflops": tflops(flops, base_us),
                "baseline_gbs": gbs(nbytes, base_us), "baseline_diff": base_diff, "blockwise_refused": refused,
                "ratio": ratio(base_us, row["hk_us"])})
    return row


def run_dense(dev: torch.device, timer: Timer, ms: Optional[Sequence[int]] = None) -> list[dict]:
    kernel = _ops.use_kernel("fp8_gemm_nt", dev)
    rows = []
    for pair_index, (n, k) in enumerate(QUICK_NK if timer.quick else DENSE_NK):
        b = torch.randn(n, k, dtype=torch.bfloat16, device=dev)
        b_fp8, sfb = hopperkit.per_block_cast_to_fp8(b)
        sb = cublas_sfb(sfb)
        for m in ms or (QUICK_MS if timer.quick else DENSE_MS):
            start = time.time()
            rows.append(dict(_dense_case(dev, timer, kernel, m, b, b_fp8, sfb, sb), pair_index=pair_index))
            _progress(f"[dense] M={m} N={n} K={k}: {time.time() - start:.1f} s")
            torch.cuda.empty_cache()
    rows.sort(key=lambda r: (r["m"], r["pair_index"]))
    return rows


def run_read_floor(dev: torch.device, timer: Timer) -> dict:
    """What the decode rows are measured against: a plain read of each B's bytes (``torch.sum`` over
    them) and a one-element op, both timed like the GEMMs (same flush, same events). The zeroing flush
    leaves L2 full of dirty lines that are written back while the next kernel reads; the reading
    flush leaves clean ones (``hopperkit.testing.L2Flusher``)."""
    def read_us(n: int, k: int) -> float:
        buf = torch.rand(n * k // 4, dtype=torch.float32, device=dev)  # the bytes of B [N, K] in FP8
        return timer.baseline(lambda: buf.sum())

    reads = []
    for n, k in (QUICK_NK if timer.quick else DENSE_NK):
        us = read_us(n, k)
        reads.append({"n": n, "k": k, "mb": n * k / 1e6, "us": us, "gbs": gbs(n * k, us)})
    one = torch.zeros(1, device=dev)
    return {"reads": reads, "empty_op_us": timer.baseline(lambda: one.add_(1))}


def _quantize_groups(b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[G, N, K] bf16 → (FP8 [G, N, K], SFB [G, ⌈N/128⌉, ⌈K/128⌉]), 128×128 blocks per group."""
    parts = [hopperkit.per_block_cast_to_fp8(b[g]) for g in range(b.shape[0])]
    return torch.stack([p[0] for p in parts]), torch.stack([p[1] for p in parts])


def _quantize_rows(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[..., M, K] bf16 → (FP8, SFA [..., M, ⌈K/128⌉] in the MN-major TMA-aligned layout the kernels read)."""
    k = a.shape[-1]
    a_fp8, sfa = hopperkit.per_token_cast_to_fp8(a.reshape(-1, k))
    sfa = sfa.contiguous().view(*a.shape[:-1], sfa.shape[-1])
    return a_fp8.view(a.shape), hopperkit.get_mn_major_tma_aligned_tensor(sfa)


def _grouped_cases(quick: bool) -> list[tuple[str, int, int, int, int]]:
    """(layout, G, rows per group, N, K) of the grouped sections."""
    if quick:
        return ([("contiguous", g, r, n, k) for (g, r), (n, k) in QUICK_CONTIG]
                + [("masked", g, m, n, k) for (g, m), (n, k) in QUICK_MASKED])
    return ([("contiguous", g, r, n, k) for g, r in CONTIG_GM for n, k in GROUPED_NK]
            + [("uneven", g, m, n, k) for g, m in CONTIG_UNEVEN_GM for n, k in GROUPED_NK]
            + [("masked", g, m, n, k) for g, m in MASKED_GM for n, k in GROUPED_NK]
            + [("mask4096", g, m, n, k) for g, m in MASKED_SPARSE_GM for n, k in GROUPED_NK])


def _fp8_grouped_case(dev: torch.device, timer: Timer, layout: str, g: int, m: int, n: int, k: int) -> dict:
    if layout == "mask4096":
        return _fp8_masked_sparse_case(dev, timer, g, m, n, k)
    if layout == "uneven":
        return _fp8_contiguous_uneven_case(dev, timer, g, m, n, k)
    kernel = _ops.use_kernel(f"m_grouped_fp8_gemm_nt_{layout}", dev)
    b = torch.randn(g, n, k, dtype=torch.bfloat16, device=dev)
    b_fp8, sfb = _quantize_groups(b)
    sb = cublas_sfb(sfb)
    ones_b = torch.ones(g, n, dtype=torch.float32, device=dev)
    if layout == "contiguous":
        a = torch.randn(g * m, k, dtype=torch.bfloat16, device=dev)
        a_fp8, sfa = _quantize_rows(a)
        m_indices = torch.arange(g, dtype=torch.int32, device=dev).repeat_interleave(m)
        offs = torch.arange(1, g + 1, dtype=torch.int32, device=dev) * m
        d = torch.empty(g * m, n, dtype=torch.bfloat16, device=dev)
        ref = torch.cat([a[i * m:(i + 1) * m].float() @ b[i].float().t() for i in range(g)]).to(torch.bfloat16)
        flops, nbytes = fp8_contiguous_counts(g, m, n, k)
        est = reference_seconds(g * m, n, k, evaluations=g)
        a_g = [a_fp8[i * m:(i + 1) * m] for i in range(g)]
        sa_g = [cublas_sfa(sfa[i * m:(i + 1) * m]) for i in range(g)]
        ones_a = torch.ones(g * m, dtype=torch.float32, device=dev)

        def call():
            hopperkit.m_grouped_fp8_gemm_nt_contiguous((a_fp8, sfa), (b_fp8, sfb), d, m_indices)

        def rowwise_grouped():
            return torch._scaled_grouped_mm(a_fp8, b_fp8.transpose(1, 2), ones_a, ones_b, offs=offs,
                                            out_dtype=torch.bfloat16)
    else:
        a = torch.randn(g, m, k, dtype=torch.bfloat16, device=dev)
        a_fp8, sfa = _quantize_rows(a)
        masked_m = torch.full((g,), m, dtype=torch.int32, device=dev)
        d = torch.empty(g, m, n, dtype=torch.bfloat16, device=dev)
        ref = torch.bmm(a.float(), b.float().transpose(1, 2)).to(torch.bfloat16)
        flops, nbytes = fp8_masked_counts(g, m, n, k)
        est = reference_seconds(g * m, n, k)
        a_g = [a_fp8[i] for i in range(g)]
        sa_g = [cublas_sfa(sfa[i]) for i in range(g)]
        ones_a = torch.ones(g, m, dtype=torch.float32, device=dev)

        def call():
            hopperkit.m_grouped_fp8_gemm_nt_masked((a_fp8, sfa), (b_fp8, sfb), d, masked_m, m)

        def rowwise_grouped():
            return torch._scaled_grouped_mm(a_fp8, b_fp8.transpose(1, 2), ones_a, ones_b, out_dtype=torch.bfloat16)

    def cublas_loop():
        return [cublas_blockwise(a_g[i], sa_g[i], b_fp8[i], sb[i]) for i in range(g)]

    loop_out, loop_refused = _try(cublas_loop)
    loop_diff = None if loop_out is None else calc_diff(torch.cat(loop_out).view(ref.shape), ref)
    row = {"layout": layout, "groups": g, "m_per_group": m, "n": n, "k": k}
    return _measure_grouped_row(timer, kernel, est, call, d, ref, flops, nbytes, row,
                                cublas_loop, loop_refused, loop_diff, rowwise_grouped)


def _measure_grouped_row(timer: Timer, kernel: bool, est: float, call: Callable[[], None], d: torch.Tensor,
                         ref: torch.Tensor, flops: int, nbytes: int, row: dict,
                         cublas_loop: Callable[[], object], loop_refused: Optional[str], loop_diff: Optional[float],
                         rowwise_grouped: Callable[[], object]) -> dict:
    """Check and time a grouped row's call with its baselines (cuBLAS×G unless it was refused, the per-row
    grouped call where torch takes it) and fill in ``row``."""
    baselines = {} if loop_refused is not None else {"cublas_loop": cublas_loop}
    _, rw_refused = _try(rowwise_grouped)
    if rw_refused is None:
        baselines["rowwise_grouped"] = rowwise_grouped
    fields, times = _measure_hopperkit(timer, kernel, est, call, d, ref, flops, nbytes, baselines=baselines)
    row.update(fields)
    loop_us, rw_us = times.get("cublas_loop"), times.get("rowwise_grouped")
    row.update({
        "cublas_loop_us": loop_us, "cublas_loop_tflops": tflops(flops, loop_us), "cublas_loop_diff": loop_diff,
        "cublas_loop_refused": loop_refused, "ratio_cublas_loop": ratio(loop_us, row["hk_us"]),
        "rowwise_grouped_us": rw_us, "rowwise_grouped_tflops": tflops(flops, rw_us),
        "rowwise_grouped_refused": rw_refused, "ratio_rowwise_grouped": ratio(rw_us, row["hk_us"]),
    })
    return row


def _mask4096_counts(g: int, expected: int, n: int, k: int) -> list[int]:
    """masked_m of a mask4096 row: expected × U(0.7, 1.3) per group (at least 1), seeded by the shape, so
    the FP8 and BF16 sections run the same counts."""
    rnd = random.Random(zlib.crc32(repr(("mask4096", g, expected, n, k)).encode()))
    return [max(1, int(expected * rnd.uniform(0.7, 1.3))) for _ in range(g)]


def _fp8_masked_sparse_case(dev: torch.device, timer: Timer, g: int, expected: int, n: int, k: int) -> dict:
    """The masked GEMM with M_max = MASKED_SPARSE_M_MAX and masked_m[g] = expected × U(0.7, 1.3) (seeded).
    FLOPs and bytes count the valid rows only; D is checked on them only (the others are unspecified);
    cuBLAS×G multiplies each group's valid rows (rounded up to a multiple of 4, which it requires)."""
    kernel = _ops.use_kernel("m_grouped_fp8_gemm_nt_masked", dev)
    m_max = MASKED_SPARSE_M_MAX
    counts = _mask4096_counts(g, expected, n, k)
    b = torch.randn(g, n, k, dtype=torch.bfloat16, device=dev)
    b_fp8, sfb = _quantize_groups(b)
    sb = cublas_sfb(sfb)
    a = torch.randn(g, m_max, k, dtype=torch.bfloat16, device=dev)
    a_fp8, sfa = _quantize_rows(a)
    masked_m = torch.tensor(counts, dtype=torch.int32, device=dev)
    rows = torch.arange(m_max, device=dev)[None, :] < masked_m[:, None]
    d = torch.empty(g, m_max, n, dtype=torch.bfloat16, device=dev)
    ref = torch.zeros(g, m_max, n, dtype=torch.bfloat16, device=dev)
    for i, c in enumerate(counts):
        ref[i, :c] = (a[i, :c].float() @ b[i].float().t()).to(torch.bfloat16)
    valid = sum(counts)
    kb = cdiv(k, 128)
    flops = 2 * valid * n * k
    nbytes = valid * (k + 4 * kb + 2 * n) + g * (n * k + 4 * cdiv(n, 128) * kb) + 4 * g
    # cuBLAS blockwise takes row counts in multiples of 4: it multiplies each group's rows rounded up.
    padded = [min(m_max, cdiv(c, 4) * 4) for c in counts]
    a_g = [a_fp8[i, :c] for i, c in enumerate(padded)]
    sa_g = [cublas_sfa(sfa[i, :c]) for i, c in enumerate(padded)]

    def call():
        hopperkit.m_grouped_fp8_gemm_nt_masked((a_fp8, sfa), (b_fp8, sfb), d, masked_m, int(expected * 1.2))

    def cublas_loop():
        return [cublas_blockwise(a_g[i], sa_g[i], b_fp8[i], sb[i]) for i in range(g)]

    loop_out, loop_refused = _try(cublas_loop)
    loop_diff = None
    if loop_out is not None:
        loop_diff = calc_diff(torch.cat([x[:c] for x, c in zip(loop_out, counts)]), ref[rows])
    row = {"layout": "mask4096", "groups": g, "m_per_group": expected, "n": n, "k": k, "m_max": m_max,
           "masked_m": counts}
    fields, times = _measure_hopperkit(timer, kernel, reference_seconds(valid, n, k), call, d, ref, flops, nbytes,
                                       rows, baselines={"cublas_loop": cublas_loop} if loop_out is not None else None)
    row.update(fields)
    loop_us = times.get("cublas_loop")
    row.update({
        "cublas_loop_us": loop_us, "cublas_loop_tflops": tflops(flops, loop_us), "cublas_loop_diff": loop_diff,
        "cublas_loop_refused": loop_refused, "ratio_cublas_loop": ratio(loop_us, row["hk_us"]),
        "rowwise_grouped_us": None, "rowwise_grouped_refused": "not run: it would multiply every row of M_max",
        "ratio_rowwise_grouped": None,
    })
    return row


def _uneven_counts(g: int, mean: int, n: int, k: int) -> list[int]:
    """Rows per expert of an "uneven" row: round(mean × U(0.25, 1.75)), a router's imbalance (some experts
    below one 128-row block, some above three), seeded by the shape."""
    rnd = random.Random(zlib.crc32(repr(("uneven", g, mean, n, k)).encode()))
    return [round(mean * rnd.uniform(0.25, 1.75)) for _ in range(g)]


def _fp8_contiguous_uneven_case(dev: torch.device, timer: Timer, g: int, mean: int, n: int, k: int) -> dict:
    """The contiguous GEMM with expert e's rows (_uneven_counts) padded to the layout's alignment, as a MoE
    prefill lays them out: a segment ends anywhere on the 128-row grid, so a 256-row block may hold two
    experts. FLOPs and bytes count the valid rows (and all of B); D is checked on every row (a padding
    row must be 0); cuBLAS×G multiplies each expert's rows (rounded up to 4); the per-row grouped call
    runs the padded segments."""
    kernel = _ops.use_kernel("m_grouped_fp8_gemm_nt_contiguous", dev)
    counts = _uneven_counts(g, mean, n, k)
    align = hopperkit.get_mk_alignment_for_contiguous_layout()
    ids, starts = contiguous_m_indices(list(enumerate(counts)), align)
    m_sum, m_indices = ids.numel(), ids.to(dev)
    b = torch.randn(g, n, k, dtype=torch.bfloat16, device=dev)
    b_fp8, sfb = _quantize_groups(b)
    sb = cublas_sfb(sfb)
    a = torch.randn(m_sum, k, dtype=torch.bfloat16, device=dev)
    a_fp8, sfa = _quantize_rows(a)
    d = torch.empty(m_sum, n, dtype=torch.bfloat16, device=dev)
    ref = torch.zeros(m_sum, n, dtype=torch.bfloat16, device=dev)
    for e, (s, c) in enumerate(zip(starts, counts)):
        ref[s:s + c] = (a[s:s + c].float() @ b[e].float().t()).to(torch.bfloat16)
    valid, kb = sum(counts), cdiv(k, 128)
    flops = 2 * valid * n * k
    nbytes = valid * (k + 4 * kb + 2 * n) + g * (n * k + 4 * cdiv(n, 128) * kb) + 4 * m_sum
    rounded = [cdiv(c, 4) * 4 for c in counts]  # within the segment: align is a multiple of 4
    a_g = [a_fp8[s:s + r] for s, r in zip(starts, rounded)]
    sa_g = [cublas_sfa(sfa[s:s + r]) for s, r in zip(starts, rounded)]
    offs = torch.tensor([s + cdiv(c, align) * align for s, c in zip(starts, counts)], dtype=torch.int32, device=dev)
    ones_a = torch.ones(m_sum, dtype=torch.float32, device=dev)
    ones_b = torch.ones(g, n, dtype=torch.float32, device=dev)

    def call():
        hopperkit.m_grouped_fp8_gemm_nt_contiguous((a_fp8, sfa), (b_fp8, sfb), d, m_indices)

    def cublas_loop():
        return [cublas_blockwise(a_g[i], sa_g[i], b_fp8[i], sb[i]) for i in range(g)]

    def rowwise_grouped():
        return torch._scaled_grouped_mm(a_fp8, b_fp8.transpose(1, 2), ones_a, ones_b, offs=offs,
                                        out_dtype=torch.bfloat16)

    loop_out, loop_refused = _try(cublas_loop)
    loop_diff = None
    if loop_out is not None:
        loop_diff = calc_diff(torch.cat([x[:c] for x, c in zip(loop_out, counts)]),
                              torch.cat([ref[s:s + c] for s, c in zip(starts, counts)]))
    row = {"layout": "uneven", "groups": g, "m_per_group": mean, "n": n, "k": k, "m_sum": m_sum, "rows": counts}
    return _measure_grouped_row(timer, kernel, reference_seconds(m_sum, n, k, evaluations=g), call, d, ref, flops,
                                nbytes, row, cublas_loop, loop_refused, loop_diff, rowwise_grouped)


def run_grouped(dev: torch.device, timer: Timer) -> list[dict]:
    rows = []
    for layout, g, m, n, k in _grouped_cases(timer.quick):
        start = time.time()
        rows.append(_fp8_grouped_case(dev, timer, layout, g, m, n, k))
        _progress(f"[grouped] {layout} G={g} m={m} N={n} K={k}: {time.time() - start:.1f} s")
        torch.cuda.empty_cache()
    return rows


def _wgrad_case(dev: torch.device, timer: Timer, g: int, m: int, n: int, k: int) -> dict:
    """One 1d1d row: g = 0 is the dense ``fp8_gemm_nt`` (recipe (1, 1, 128)), g >= 1 the k-grouped GEMM with
    g groups of K = k. Checked with C separate from a NaN-poisoned D, timed accumulating in place (c=d)."""
    groups = max(g, 1)
    op = "k_grouped_fp8_gemm_nt_contiguous" if g else "fp8_gemm_nt (1d1d)"
    kernel = _ops.use_kernel(op, dev)
    ks = [k] * groups
    a = [torch.randn(m, k, dtype=torch.bfloat16, device=dev) for _ in range(groups)]
    b = [torch.randn(n, k, dtype=torch.bfloat16, device=dev) for _ in range(groups)]
    aq = [hopperkit.per_token_cast_to_fp8(x) for x in a]
    bq = [hopperkit.per_token_cast_to_fp8(x) for x in b]
    c = torch.randn(groups, m, n, dtype=torch.float32, device=dev)
    d = torch.empty_like(c)
    ref = torch.stack([c[i] + a[i].float() @ b[i].float().t() for i in range(groups)])
    flops, nbytes = fp8_wgrad_counts(m, n, ks)
    est = reference_seconds(groups * m, n, k)
    if g:
        a_fp8, sfa = torch.cat([x.flatten() for x, _ in aq]), torch.cat([s for _, s in aq], dim=1)
        b_fp8, sfb = torch.cat([x.flatten() for x, _ in bq]), torch.cat([s for _, s in bq], dim=1)
        sfa, sfb = hopperkit.get_mn_major_tma_aligned_tensor(sfa), hopperkit.get_mn_major_tma_aligned_tensor(sfb)
        ks_tensor = torch.tensor(ks, dtype=torch.int32, device=dev)

        def run(out: torch.Tensor, acc: torch.Tensor) -> None:
            hopperkit.k_grouped_fp8_gemm_nt_contiguous((a_fp8, sfa), (b_fp8, sfb), out, ks, ks_tensor, c=acc)
    else:
        (a_fp8, sfa), (b_fp8, sfb) = aq[0], bq[0]

        def run(out: torch.Tensor, acc: torch.Tensor) -> None:
            hopperkit.fp8_gemm_nt((a_fp8, sfa), (b_fp8, sfb), out[0], c=acc[0], recipe=(1, 1, 128))

    out = [torch.empty(m, n, dtype=torch.bfloat16, device=dev) for _ in range(groups)]

    def baseline():
        for i in range(groups):
            torch.mm(a[i], b[i].t(), out=out[i])

    row = {"layout": "k-grouped" if g else "dense", "groups": groups, "m": m, "n": n, "k": k}
    # Timed accumulating in place (no copy of C into D).
    fields, times = _measure_hopperkit(timer, kernel, est, lambda: run(d, c), d, ref, flops, nbytes,
                                       baselines={"baseline": baseline}, timed_call=lambda: run(d, d))
    row.update(fields)
    base_us = times["baseline"]
    row.update({"baseline": "torch.mm" if groups == 1 else "mm×G", "baseline_us": base_us,
                "baseline_tflops": tflops(flops, base_us), "ratio": ratio(base_us, row["hk_us"])})
    return row


def run_wgrad(dev: torch.device, timer: Timer) -> list[dict]:
    rows = []
    cases = ([(0, m, n, k) for m, n, k in (QUICK_WGRAD_DENSE if timer.quick else WGRAD_DENSE)]
             + list(QUICK_WGRAD_K_GROUPED if timer.quick else WGRAD_K_GROUPED))
    for g, m, n, k in cases:
        start = time.time()
        rows.append(_wgrad_case(dev, timer, g, m, n, k))
        _progress(f"[wgrad] G={g} M={m} N={n} K={k}: {time.time() - start:.1f} s")
        torch.cuda.empty_cache()
    return rows


def _bf16_dense_case(dev: torch.device, timer: Timer, m: int, n: int, k: int) -> dict:
    kernel = _ops.use_kernel("bf16_gemm_nt", dev)
    a = torch.randn(m, k, dtype=torch.bfloat16, device=dev)
    b = torch.randn(n, k, dtype=torch.bfloat16, device=dev)
    d = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
    d_base = torch.empty_like(d)
    flops, nbytes = bf16_counts(m, n, k)

    def call():
        hopperkit.bf16_gemm_nt(a, b, d)

    row = {"layout": "dense", "groups": 1, "m_per_group": m, "n": n, "k": k}
    fields, times = _measure_hopperkit(timer, kernel, reference_seconds(m, n, k, two_level=False), call, d,
                                       a.float() @ b.float().t(), flops, nbytes,
                                       baselines={"baseline": lambda: torch.mm(a, b.t(), out=d_base)})
    row.update(fields)
    base_us = times["baseline"]
    row.update({"baseline": "torch.mm", "baseline_us": base_us, "baseline_tflops": tflops(flops, base_us),
                "baseline_gbs": gbs(nbytes, base_us), "ratio": ratio(base_us, row["hk_us"])})
    return row


def _pick_baseline(candidates: Sequence[tuple[str, Callable[[], object]]]) -> tuple[str, Optional[Callable[[], object]],
                                                                                  Optional[str]]:
    """The first of ``candidates`` (name, call) that runs: (name, call, None); if none runs, the last
    one's (name, None, error)."""
    name, refused = None, None
    for name, fn in candidates:
        _, refused = _try(fn)
        if refused is None:
            return name, fn, None
    return name, None, refused


def _baseline_fields(name: str, us: Optional[float], refused: Optional[str], flops: int, nbytes: int,
                     hk_us: Optional[float]) -> dict:
    """The baseline fields of a BF16 row."""
    return {"baseline": name, "baseline_us": us, "baseline_tflops": tflops(flops, us), "baseline_gbs": gbs(nbytes, us),
            "baseline_refused": refused, "ratio": ratio(us, hk_us)}


def _bf16_grouped_case(dev: torch.device, timer: Timer, layout: str, g: int, m: int, n: int, k: int) -> dict:
    kernel = _ops.use_kernel(f"m_grouped_bf16_gemm_nt_{layout}", dev)
    grouped_mm = getattr(torch, "_grouped_mm", None)
    b = torch.randn(g, n, k, dtype=torch.bfloat16, device=dev)
    if layout == "contiguous":
        a = torch.randn(g * m, k, dtype=torch.bfloat16, device=dev)
        m_indices = torch.arange(g, dtype=torch.int32, device=dev).repeat_interleave(m)
        offs = torch.arange(1, g + 1, dtype=torch.int32, device=dev) * m
        d = torch.empty(g * m, n, dtype=torch.bfloat16, device=dev)
        ref = torch.cat([a[i * m:(i + 1) * m].float() @ b[i].float().t() for i in range(g)])
        est = reference_seconds(g * m, n, k, evaluations=g, two_level=False)
        base_name = "_grouped_mm" if grouped_mm else "mm×G"

        def call():
            hopperkit.m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices)

        def baseline():
            if grouped_mm:
                return grouped_mm(a, b.transpose(1, 2), offs=offs)
            return [a[i * m:(i + 1) * m] @ b[i].t() for i in range(g)]
    else:
        a = torch.randn(g, m, k, dtype=torch.bfloat16, device=dev)
        masked_m = torch.full((g,), m, dtype=torch.int32, device=dev)
        d = torch.empty(g, m, n, dtype=torch.bfloat16, device=dev)
        ref = torch.bmm(a.float(), b.float().transpose(1, 2))
        est = reference_seconds(g * m, n, k, two_level=False)
        base_name = "_grouped_mm" if grouped_mm else "bmm"

        def call():
            hopperkit.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, m)

        def baseline():
            return grouped_mm(a, b.transpose(1, 2)) if grouped_mm else torch.bmm(a, b.transpose(1, 2))

    flops, nbytes = bf16_counts(g * m, n, k, groups=g)
    row = {"layout": layout, "groups": g, "m_per_group": m, "n": n, "k": k}
    name, fn, refused = _pick_baseline([(base_name, baseline)])
    fields, times = _measure_hopperkit(timer, kernel, est, call, d, ref, flops, nbytes,
                                       baselines={"baseline": fn} if fn is not None else None)
    row.update(fields)
    row.update(_baseline_fields(name, times.get("baseline"), refused, flops, nbytes, row["hk_us"]))
    return row


def _bf16_masked_sparse_case(dev: torch.device, timer: Timer, g: int, expected: int, n: int, k: int) -> dict:
    """The BF16 masked GEMM in the FP8 section's mask4096 setting (M_max = MASKED_SPARSE_M_MAX, masked_m[g]
    = expected × U(0.7, 1.3), seeded; FLOPs, bytes and the check on the valid rows only). Baseline:
    ``torch._grouped_mm`` over the valid rows gathered into one [Σ rows, K] tensor beforehand (one
    launch, offsets per group), or one ``torch.mm`` per group where it is missing or refuses."""
    kernel = _ops.use_kernel("m_grouped_bf16_gemm_nt_masked", dev)
    m_max = MASKED_SPARSE_M_MAX
    counts = _mask4096_counts(g, expected, n, k)
    a = torch.randn(g, m_max, k, dtype=torch.bfloat16, device=dev)
    b = torch.randn(g, n, k, dtype=torch.bfloat16, device=dev)
    masked_m = torch.tensor(counts, dtype=torch.int32, device=dev)
    rows = torch.arange(m_max, device=dev)[None, :] < masked_m[:, None]
    d = torch.empty(g, m_max, n, dtype=torch.bfloat16, device=dev)
    ref = torch.zeros(g, m_max, n, dtype=torch.float32, device=dev)
    for i, c in enumerate(counts):
        ref[i, :c] = a[i, :c].float() @ b[i].float().t()
    valid = sum(counts)
    flops = 2 * valid * n * k
    nbytes = 2 * (valid * k + g * n * k + valid * n) + 4 * g
    a_valid = a[rows]
    offs = torch.tensor(counts, dtype=torch.int32, device=dev).cumsum(0, dtype=torch.int32)
    grouped_mm = getattr(torch, "_grouped_mm", None)

    def call():
        hopperkit.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, int(expected * 1.2))

    def per_group():
        return [a[i, :c] @ b[i].t() for i, c in enumerate(counts)]

    def grouped():
        return grouped_mm(a_valid, b.transpose(1, 2), offs=offs)

    row = {"layout": "mask4096", "groups": g, "m_per_group": expected, "n": n, "k": k, "m_max": m_max,
           "masked_m": counts}
    candidates = ([("_grouped_mm", grouped)] if grouped_mm is not None else []) + [("mm×G", per_group)]
    name, fn, refused = _pick_baseline(candidates)
    fields, times = _measure_hopperkit(timer, kernel, reference_seconds(valid, n, k, two_level=False), call, d, ref,
                                       flops, nbytes, rows, baselines={"baseline": fn} if fn is not None else None)
    row.update(fields)
    row.update(_baseline_fields(name, times.get("baseline"), refused, flops, nbytes, row["hk_us"]))
    return row


def _bf16_k_grouped_case(dev: torch.device, timer: Timer, g: int, m: int, n: int, k: int) -> dict:
    """``k_grouped_bf16_gemm_tn_contiguous`` with g groups of K = k, FP32 D accumulated in place onto C
    (checked first with C separate from a NaN-poisoned D); baseline: one BF16 ``torch.mm`` per group."""
    kernel = _ops.use_kernel("k_grouped_bf16_gemm_tn_contiguous", dev)
    ks = [k] * g
    a = torch.randn(g * k, m, dtype=torch.bfloat16, device=dev)
    b = torch.randn(g * k, n, dtype=torch.bfloat16, device=dev)
    ks_tensor = torch.tensor(ks, dtype=torch.int32, device=dev)
    c = torch.randn(g, m, n, dtype=torch.float32, device=dev)
    d = torch.empty_like(c)
    ref = torch.stack([c[i] + a[i * k:(i + 1) * k].float().t() @ b[i * k:(i + 1) * k].float() for i in range(g)])
    flops = 2 * g * m * n * k
    nbytes = 2 * g * k * (m + n) + 2 * 4 * g * m * n  # A, B; C read and D written (FP32)

    def run(out: torch.Tensor, acc: torch.Tensor) -> None:
        hopperkit.k_grouped_bf16_gemm_tn_contiguous(a, b, out, ks, ks_tensor, c=acc)

    out = [torch.empty(m, n, dtype=torch.bfloat16, device=dev) for _ in range(g)]

    def baseline():
        for i in range(g):
            torch.mm(a[i * k:(i + 1) * k].t(), b[i * k:(i + 1) * k], out=out[i])

    row = {"layout": "k-grouped", "groups": g, "m_per_group": m, "n": n, "k": k}
    # Timed accumulating in place.
    fields, times = _measure_hopperkit(timer, kernel, reference_seconds(g * m, n, k, two_level=False),
                                       lambda: run(d, c), d, ref, flops, nbytes, baselines={"baseline": baseline},
                                       timed_call=lambda: run(d, d))
    row.update(fields)
    base_us = times["baseline"]
    row.update({"baseline": "mm×G", "baseline_us": base_us, "baseline_tflops": tflops(flops, base_us),
                "baseline_gbs": gbs(nbytes, base_us), "ratio": ratio(base_us, row["hk_us"])})
    return row


def _bf16_grouped_cases(quick: bool) -> list[tuple[str, int, int, int, int]]:
    """The grouped rows of the BF16 section: the FP8 section's but for the "uneven" rows (the FP8
    contiguous GEMM's alone); --quick keeps one contiguous and one masked row."""
    cases = [c for c in _grouped_cases(quick) if c[0] != "uneven"]
    if quick:
        cases = [c for c in cases if c[0] == "contiguous"][:1] + [c for c in cases if c[0] == "masked"][-1:]
    return cases


def run_bf16(dev: torch.device, timer: Timer, ms: Optional[Sequence[int]] = None) -> list[dict]:
    rows = []
    dense = ([(m, n, k) for n, k in (QUICK_NK if timer.quick else DENSE_NK) for m in ms] if ms
             else QUICK_BF16_DENSE if timer.quick else BF16_DENSE)
    for m, n, k in dense:
        start = time.time()
        rows.append(_bf16_dense_case(dev, timer, m, n, k))
        _progress(f"[bf16] dense M={m} N={n} K={k}: {time.time() - start:.1f} s")
    if ms:  # an M sweep of the dense GEMMs only
        return rows
    cases = _bf16_grouped_cases(timer.quick)
    for layout, g, m, n, k in cases:
        start = time.time()
        if layout == "mask4096":
            rows.append(_bf16_masked_sparse_case(dev, timer, g, m, n, k))
        else:
            rows.append(_bf16_grouped_case(dev, timer, layout, g, m, n, k))
        _progress(f"[bf16] {layout} G={g} m={m} N={n} K={k}: {time.time() - start:.1f} s")
        torch.cuda.empty_cache()
    for g, m, n, k in (QUICK_WGRAD_K_GROUPED if timer.quick else WGRAD_K_GROUPED):
        start = time.time()
        rows.append(_bf16_k_grouped_case(dev, timer, g, m, n, k))
        _progress(f"[bf16] k-grouped G={g} M={m} N={n} K={k}: {time.time() - start:.1f} s")
        torch.cuda.empty_cache()
    return rows


# --------------------------------------------------------------------------------------------------
# tables
# --------------------------------------------------------------------------------------------------


def fmt(value: object, spec: str, width: int) -> str:
    if value is None:
        return f"{'—':>{width}}"
    if isinstance(value, str):
        return f"{value:>{width}}"
    return f"{value:>{width}{spec}}"


# (header, key, format spec, width); a "|" entry is a separator
Column = tuple[str, str, str, int]

DENSE_COLUMNS: list = [
    ("M", "m", "d", 5), ("N", "n", "d", 6), ("K", "k", "d", 6), "|",
    ("hk µs", "hk_us", ".1f", 9), ("TFLOPS", "hk_tflops", ".0f", 7), ("GB/s", "hk_gbs", ".0f", 6),
    ("diff", "diff", ".1e", 8), "|",
    ("cuBLAS", "baseline", "", 11), ("µs", "baseline_us", ".1f", 9), ("TFLOPS", "baseline_tflops", ".0f", 7),
    ("diff", "baseline_diff", ".1e", 8), "|", ("hk/cuBLAS", "ratio", ".2f", 9),
]
GROUPED_COLUMNS: list = [
    ("layout", "layout", "", 10), ("G", "groups", "d", 3), ("m/grp", "m_per_group", "d", 5), ("N", "n", "d", 5),
    ("K", "k", "d", 5), "|",
    ("hk µs", "hk_us", ".1f", 9), ("TFLOPS", "hk_tflops", ".0f", 7), ("GB/s", "hk_gbs", ".0f", 6),
    ("diff", "diff", ".1e", 8), "|",
    ("cuBLAS×G µs", "cublas_loop_us", ".1f", 11), ("TFLOPS", "cublas_loop_tflops", ".0f", 7),
    ("ratio", "ratio_cublas_loop", ".2f", 6), "|",
    ("rowwise-grp* µs", "rowwise_grouped_us", ".1f", 15), ("ratio", "ratio_rowwise_grouped", ".2f", 6),
]
WGRAD_COLUMNS: list = [
    ("layout", "layout", "", 10), ("G", "groups", "d", 3), ("M", "m", "d", 5), ("N", "n", "d", 5),
    ("K/grp", "k", "d", 5), "|",
    ("hk µs", "hk_us", ".1f", 9), ("TFLOPS", "hk_tflops", ".0f", 7), ("GB/s", "hk_gbs", ".0f", 6),
    ("diff", "diff", ".1e", 8), "|",
    ("baseline", "baseline", "", 9), ("µs", "baseline_us", ".1f", 9), ("TFLOPS", "baseline_tflops", ".0f", 7), "|",
    ("ratio", "ratio", ".2f", 6),
]
BF16_COLUMNS: list = [
    ("layout", "layout", "", 10), ("G", "groups", "d", 3), ("m/grp", "m_per_group", "d", 5), ("N", "n", "d", 5),
    ("K", "k", "d", 5), "|",
    ("hk µs", "hk_us", ".1f", 9), ("TFLOPS", "hk_tflops", ".0f", 7), ("GB/s", "hk_gbs", ".0f", 6),
    ("diff", "diff", ".1e", 8), "|",
    ("baseline", "baseline", "", 11), ("µs", "baseline_us", ".1f", 9), ("TFLOPS", "baseline_tflops", ".0f", 7), "|",
    ("ratio", "ratio", ".2f", 6),
]


def table_header(columns: list) -> str:
    return " ".join("|" if c == "|" else f"{c[0]:>{c[3]}}" for c in columns)


def table_row(columns: list, row: dict) -> str:
    return " ".join("|" if c == "|" else fmt(row.get(c[1]), c[2], c[3]) for c in columns)


def print_table(title: str, columns: list, rows: list[dict]) -> None:
    header = table_header(columns)
    print(f"\n{title}")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(table_row(columns, r))


def dense_geomeans(rows: list[dict]) -> dict:
    big = [r for r in rows if r["m"] == 4096]
    blockwise = [r for r in rows if r["baseline"] == "blockwise"]
    return {
        "blockwise_m4096": geomean([r["ratio"] for r in big if r["baseline"] == "blockwise"]),
        "blockwise_all": geomean([r["ratio"] for r in blockwise]),
        "any_baseline_m4096": geomean([r["ratio"] for r in big]),
        "any_baseline_all": geomean([r["ratio"] for r in rows]),
        "blockwise_m4096_rows": sum(1 for r in big if r["baseline"] == "blockwise" and r["ratio"]),
        "blockwise_all_rows": sum(1 for r in blockwise if r["ratio"]),
    }


def geomeans_by_m(rows: list[dict], m_key: str, baseline: Optional[str] = None) -> list[tuple[int, float, int]]:
    """(M, geomean ratio, rows) for each M of an M sweep, over the rows timed against ``baseline``
    (all rows with a ratio when None)."""
    out = []
    for m in sorted({r[m_key] for r in rows}):
        ratios = [r["ratio"] for r in rows if r[m_key] == m and r.get("ratio") and baseline in (None, r["baseline"])]
        if ratios:
            out.append((m, geomean(ratios), len(ratios)))
    return out


def print_geomeans_by_m(label: str, by_m: list[tuple[int, float, int]]) -> None:
    print(f"geomean {label} by M: " + ", ".join(f"{m}: {g:.2f} ({n})" for m, g, n in by_m))


def accuracy_failures(section: str, rows: list[dict], tol: float) -> list[str]:
    bad = []
    for r in rows:
        shape = " ".join(f"{key}={r[key]}" for key in ("layout", "groups", "m", "m_per_group", "n", "k") if key in r)
        if r.get("nan"):
            bad.append(f"{section} {shape}: NaN in the output")
        elif r.get("diff") is not None and not r["diff"] < tol:
            bad.append(f"{section} {shape}: diff {r['diff']:.2e} >= {tol:g}")
    return bad


# --------------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------------


def _m_list(text: str) -> tuple[int, ...]:
    try:
        ms = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not ms or min(ms) < 1:
        raise argparse.ArgumentTypeError(f"expected positive M values, got {text!r}")
    return ms


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a few representative shapes per section (< ~1 min)")
    ap.add_argument("--json", help="write every number here")
    ap.add_argument("--flush", choices=FLUSH_MODES, default="zero",
                    help="how L2 is flushed before each timed call: zero (overwrite 256 MB, DeepGEMM's way; leaves "
                         "dirty lines) or read (read 256 MB; leaves clean lines). Default: zero")
    ap.add_argument("--only", action="append", choices=SECTIONS,
                    help="run only this section (repeatable); default: all")
    ap.add_argument("--ms", type=_m_list, metavar="M1,M2,...",
                    help="sweep these M instead: the FP8 dense rows take them (default "
                         f"{','.join(map(str, DENSE_MS))}), the BF16 section runs its dense GEMM at them on the same "
                         "(N, K) pairs and skips its grouped rows")
    args = ap.parse_args(argv)
    args.sections = tuple(s for s in SECTIONS if s in (args.only or SECTIONS))
    return args


def _path(op: str, dev: torch.device) -> str:
    return "kernel" if _ops.use_kernel(op, dev) else "reference"


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_gemm: needs a CUDA device", file=sys.stderr)
        return 2
    dev = torch.device("cuda", torch.cuda.current_device())
    props = torch.cuda.get_device_properties(dev)
    torch.manual_seed(0)
    timer = Timer(args.quick, args.flush)
    ops = {
        "dense": ["fp8_gemm_nt"],
        "grouped": ["m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_gemm_nt_masked"],
        "wgrad": ["fp8_gemm_nt (1d1d)", "k_grouped_fp8_gemm_nt_contiguous"],
        "bf16": ["bf16_gemm_nt", "m_grouped_bf16_gemm_nt_contiguous", "m_grouped_bf16_gemm_nt_masked"],
    }
    paths = {op: _path(op, dev) for s in args.sections for op in ops[s]}
    refs = [op for op, p in paths.items() if p == "reference"]
    print(f"{props.name}, {props.multi_processor_count} SMs; torch {torch.__version__}; L2 flush: {args.flush}; paths: "
          + ", ".join(f"{op}: {p}" for op, p in paths.items()))
    if refs:
        print(f"reference path (no kernel yet) for {', '.join(refs)}: timed with 3-10 iterations; shapes whose "
              f"reference call is estimated above {timer.ref_cap_s:g} s show —")

    warm_up_gpu(device=dev)
    started = time.time()
    results: dict = {"device": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
                     "cuda": torch.version.cuda, "quick": args.quick, "flush": args.flush, "sections": list(args.sections),
               "ms": list(args.ms) if args.ms else None,
                     "paths": paths}
    failures: list[str] = []
    if "dense" in args.sections:
        results["dense"] = run_dense(dev, timer, args.ms)
        results["dense_geomean"] = dense_geomeans(results["dense"])
        results["read_floor"] = run_read_floor(dev, timer)
        failures += accuracy_failures("dense", results["dense"], FP8_DIFF_TOL)
    if "grouped" in args.sections:
        results["grouped"] = run_grouped(dev, timer)
        failures += accuracy_failures("grouped", results["grouped"], FP8_DIFF_TOL)
    if "wgrad" in args.sections:
        results["wgrad"] = run_wgrad(dev, timer)
        failures += accuracy_failures("wgrad", results["wgrad"], FP8_DIFF_TOL)
    if "bf16" in args.sections:
        results["bf16"] = run_bf16(dev, timer, args.ms)
        failures += accuracy_failures("bf16", results["bf16"], BF16_DIFF_TOL)
    results["wall_s"] = time.time() - started

    if "dense" in results:
        print_table(f"FP8 1d2d fp8_gemm_nt ({paths['fp8_gemm_nt']}) vs cuBLAS; diff vs the BF16 product of the "
                    "unquantized inputs", DENSE_COLUMNS, results["dense"])
        gm = results["dense_geomean"]
        print(f"geomean hopperkit/cuBLAS blockwise: M=4096 {fmt(gm['blockwise_m4096'], '.2f', 0)} "
              f"({gm['blockwise_m4096_rows']} shapes), all {fmt(gm['blockwise_all'], '.2f', 0)} "
              f"({gm['blockwise_all_rows']} shapes); counting per-tensor* rows too: M=4096 "
              f"{fmt(gm['any_baseline_m4096'], '.2f', 0)}, all {fmt(gm['any_baseline_all'], '.2f', 0)}")
        if args.ms:
            results["dense_geomean_by_m"] = geomeans_by_m(results["dense"], "m", "blockwise")
            print_geomeans_by_m("hopperkit/cuBLAS blockwise", results["dense_geomean_by_m"])
        print("* cuBLAS blockwise refused the shape (expected for N % 128 != 0; the error is in the JSON's "
              "blockwise_refused): per-tensor FP8 torch._scaled_mm on the same bytes, a coarser and faster recipe")
        floor = results["read_floor"]
        how = ("zero_ of 256 MB, which leaves dirty lines to write back" if args.flush == "zero"
               else "a read of 256 MB, which leaves clean lines")
        print(f"\nwhat a decode row can reach after the same L2 flush ({how}): torch.sum over B's bytes, and a "
              "one-element op")
        print("     N      K |   B MB |     µs    GB/s")
        for r in floor["reads"]:
            print(f"{r['n']:>6} {r['k']:>6} | {r['mb']:>6.1f} | {r['us']:>6.1f} {fmt(r['gbs'], '.0f', 7)}")
        print(f"one-element add_: {floor['empty_op_us']:.1f} µs between the events")
    if "grouped" in results:
        print_table("m-grouped FP8 (masked: masked_m = M_max = m/grp in every group; mask4096: below); cuBLAS×G = blockwise "
                    "scaled_mm once per group", GROUPED_COLUMNS, results["grouped"])
        print("* torch._scaled_grouped_mm with per-row scales (unit scales, output not checked): one launch, a "
              "coarser recipe")
        print(f"mask4096: M_max = {MASKED_SPARSE_M_MAX} rows per group, masked_m = m/grp × U(0.7, 1.3) (DeepGEMM's "
              "masked test setting); TFLOPS and GB/s count the valid rows, cuBLAS×G multiplies only those (rounded up to 4)")
        if any(r["layout"] == "uneven" for r in results["grouped"]):
            print("uneven: the contiguous layout with expert e at round(m/grp × U(0.25, 1.75)) rows, each segment "
                  "padded to 128 rows (a MoE prefill's routing); TFLOPS and GB/s count the valid rows")
    if "wgrad" in results:
        print_table("FP8 1d1d weight gradient (FP32 D += A·Bᵀ in place; diff vs C + the product of the unquantized "
                    "inputs, C separate from D); baseline: BF16 torch.mm of the same shape", WGRAD_COLUMNS,
                    results["wgrad"])
    if "bf16" in results:
        print_table("BF16 GEMMs", BF16_COLUMNS, results["bf16"])
        if args.ms:
            results["bf16_geomean_by_m"] = geomeans_by_m(results["bf16"], "m_per_group")
            print_geomeans_by_m("hopperkit/torch.mm", results["bf16_geomean_by_m"])
    print(f"\nwall time {results['wall_s']:.0f} s")
    for line in failures:
        print(f"ACCURACY FAILURE: {line}")
    results["accuracy_failures"] = failures
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
