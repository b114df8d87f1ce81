"""Randomised differential tests of every GEMM op against hopperkit.reference, on an SM90 device (the
nn/tn/tt aliases through the MN-major operands they pass on).

The other GPU test files hold each op to DeepGEMM's shape lists and to hand-picked edge cases. This
one draws the cases: shapes within each op's documented limits (M, N, K, group counts and row
counts from 0 or 1 up to a few thousand, skewed towards the small and the ragged), operands and D
as strided views of larger buffers, scales in either majorness, and the tuning knobs a deployment
or a benchmark may set (a forced tile, split count, fixup, multicast, L2 hint, SM count, PDL). Each
case checks, besides the result:
- every element of D written where the contract says it is, and nothing outside D's view (D sits
  inside a NaN-filled buffer with extra rows and columns);
- element by element against the reference on the same operands: ``|D - ref| <= |ref| / 64 +
  0.01 · rms(ref)`` (BF16 rounding of D is 2^-8 of |ref|; a summation order or the tensor cores'
  partial sums move an element by about 1e-3 · rms(ref)). A wrongly indexed tile, scale or group
  misses by about rms(ref), which a calc_diff over the whole of D can average away;
- FP8 ops also ``calc_diff < 1e-3`` against the product of the unquantized inputs, where D has
  enough elements for that statistic;
- a forced knob that does not fit the case must be refused before anything is written (D
  untouched), with an error that names it; the case then runs without it.
Nearly every drawn case runs a kernel; an MN-major BF16 operand whose leading dimension TMA cannot
address (not a multiple of 8 elements) runs the reference path, as the op documents.

``HOPPERKIT_FUZZ_CASES`` (default 200) sets the number of cases and ``HOPPERKIT_FUZZ_SEED`` (default
0) the stream: a longer run is ``HOPPERKIT_FUZZ_CASES=2000 pytest -m gpu tests/test_gemm_fuzz_gpu.py``. A
failure names its case id, which reruns it alone.

The file's CPU tests check the checks, in CI too: every kind of case, drawn as above, runs on the CPU,
where each op computes with hopperkit.reference, and must pass; then again with each GEMM op
corrupting its output after the reference wrote it (a wrong element, elements left unwritten, a
write outside D's view), and every case with something to corrupt must fail.
"""

from __future__ import annotations

import contextlib
import os
import random
import sys
from dataclasses import dataclass, field

import pytest
import torch

import hopperkit
from hopperkit.reference import gemm as ref_gemm
from hopperkit.testing import (assert_gemm_elementwise, assert_k_grouped_gemm, block_scaled_randn, calc_diff,
                               contiguous_m_indices, poison_, seeded_generator)

CASES = int(os.environ.get("HOPPERKIT_FUZZ_CASES", "200"))
SEED = int(os.environ.get("HOPPERKIT_FUZZ_SEED", "0"))
FP8 = torch.float8_e4m3fn
# Where the cases run, and a cap on the multiply-adds of one case: the CPU tests at the end of this
# file set both (see "the checks, checked").
DEVICE = "cuda"
WORK_CAP = float("inf")

# The compiled FP8 1d2d instantiations (BLOCK_M, BLOCK_N, cluster, one-box staging) by layout
# (csrc/gemm/fp8_1d2d/dispatch.cu); a forced one that cannot tile a case is refused.
FP8_DENSE_CONFIGS = ("64,64,1", "64,128,1", "128,64,1", "128,64,2", "128,128,1", "128,128,2", "128,128,1,1",
                     "128,128,2,1", "128,192,1", "128,192,2", "192,64,1", "192,64,2", "256,128,1", "256,128,2",
                     "256,128,1,1", "256,128,2,1")
FP8_1D1D_CONFIGS = ("64,128", "128,160")
FP8_CONTIGUOUS_CONFIGS = ("64,64,1", "64,128,1", "128,64,1", "128,128,1", "128,192,1", "256,128,1")
FP8_MASKED_CONFIGS = ("64,64,1,0", "64,128,1,0", "128,64,1,0", "128,128,1,0", "128,128,1,1", "256,128,1,0",
                      "256,128,1,1")
BF16_CONFIGS = ("64,64", "64,96", "64,128", "64,144", "64,176", "64,256", "128,96", "128,128", "128,144",
                "128,176", "128,192", "128,256")


@dataclass
class Knobs:
    """Environment knobs (read by the ops on every call) and process settings of one case."""

    env: dict = field(default_factory=dict)
    num_sms: int | None = None
    pdl: bool = False

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in self.env.items()]
        if self.num_sms is not None:
            parts.append(f"num_sms={self.num_sms}")
        if self.pdl:
            parts.append("pdl")
        return " ".join(parts) or "defaults"


@contextlib.contextmanager
def applied(knobs: Knobs):
    saved = {k: os.environ.get(k) for k in knobs.env}
    os.environ.update(knobs.env)
    hopperkit.set_num_sms(knobs.num_sms)
    hopperkit.set_pdl(knobs.pdl)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        hopperkit.set_num_sms(None)
        hopperkit.set_pdl(False)


def synchronize() -> None:
    if DEVICE != "cpu":
        torch.cuda.synchronize()


def run_with_knobs(name: str, knobs: Knobs, call, outputs: list[torch.Tensor]) -> str:
    """Runs ``call`` under the knobs. A knob forced where it cannot apply must raise before the launch,
    with every output untouched; the call then runs with the defaults. Returns what ran."""
    before = [t.clone() for t in outputs]
    try:
        with applied(knobs):
            call()
            synchronize()
        return knobs.describe()
    except (ValueError, RuntimeError) as e:
        forced = [k for k in knobs.env if k in str(e)]
        if not forced:
            raise AssertionError(f"{name} [{knobs.describe()}]: refused without naming a knob: {e}") from e
        synchronize()
        for t, b in zip(outputs, before):
            assert torch.equal(t.isnan(), b.isnan()) and torch.equal(t.nan_to_num(), b.nan_to_num()), (
                f"{name}: the refused call ({knobs.describe()}) wrote its output")
        call()
        synchronize()
        return f"defaults ({forced[0]} refused)"


def assert_quantization_error(name: str, d: torch.Tensor, unquantized: torch.Tensor) -> None:
    """calc_diff against the product of the unquantized inputs below DeepGEMM's 1e-3, where D has
    enough elements for the statistic: its mean is about 6.8e-4, and over a few dozen elements it
    scatters past 1e-3 without anything being wrong (the elementwise check covers small D)."""
    if d.numel() >= 4096:
        diff = calc_diff(d, unquantized)
        assert diff < 1e-3, f"{name}: calc_diff vs the unquantized product {diff:.3g}"


def nan_buffer(rnd: random.Random, shape: tuple, dtype: torch.dtype, align: int):
    """(buffer, view): a NaN-filled buffer with up to 2 extra rows (or groups) and extra columns in
    multiples of ``align`` elements, and the ``shape`` view at its start. The view's strides stay
    16-byte aligned, as TMA needs."""
    extra_cols = rnd.choice((0, 0, align, 3 * align))
    full = list(shape)
    full[-1] += extra_cols
    if len(shape) == 3 and rnd.random() < 0.5:
        full[-2] += rnd.choice((1, 8))
    buf = poison_(torch.empty(*full, dtype=dtype, device=DEVICE))
    view = buf[tuple(slice(0, s) for s in shape)]
    return buf, view


def assert_outside_untouched(name: str, buf: torch.Tensor, view: torch.Tensor) -> None:
    mask = torch.ones(buf.shape, dtype=torch.bool, device=buf.device)
    mask[tuple(slice(0, s) for s in view.shape)] = False
    assert buf[mask].isnan().all(), f"{name}: {int((~buf[mask].isnan()).sum())} elements written outside D"


def fp8_row_view(rnd: random.Random, x: torch.Tensor) -> torch.Tensor:
    """``x`` (FP8, rows last-dim contiguous) as is, or copied into a view whose row stride is 16-96
    bytes wider (the rows of a larger buffer)."""
    if rnd.random() < 0.7:
        return x
    pad = rnd.choice((16, 32, 96))
    buf = torch.empty(*x.shape[:-1], x.shape[-1] + pad, dtype=torch.uint8, device=x.device)
    buf.view(torch.uint8)[..., x.shape[-1]:] = 0x7F
    view = buf[..., : x.shape[-1]]
    view.copy_(x.view(torch.uint8))
    return view.view(FP8)


def scales_any_major(rnd: random.Random, sf: torch.Tensor) -> torch.Tensor:
    """The same values, K-major contiguous or MN-major (as the GEMMs want them), at random."""
    if rnd.random() < 0.5:
        return sf.contiguous()
    return hopperkit.get_mn_major_tma_aligned_tensor(sf.contiguous())


def draw_m(rnd: random.Random, small: bool = False) -> int:
    r = rnd.random()
    if r < 0.25:
        return rnd.randint(1, 8)
    if r < 0.5 or small:
        return rnd.randint(1, 140)
    if r < 0.8:
        return rnd.randint(129, 600)
    return rnd.randint(600, 4400)


def draw_n(rnd: random.Random, align: int) -> int:
    r = rnd.random()
    hi = 640 if r < 0.4 else 4608 if r < 0.85 else 12288
    return rnd.randint(1, hi // align) * align


def draw_k(rnd: random.Random, align: int) -> int:
    r = rnd.random()
    hi = 512 if r < 0.4 else 4096 if r < 0.85 else 9216
    return rnd.randint(1, hi // align) * align


def draw_common_knobs(rnd: random.Random, knobs: Knobs) -> float:
    """Draws the SM count and PDL; returns the case's budget of multiply-adds (few SMs, little work)."""
    if rnd.random() < 0.15:
        knobs.num_sms = rnd.choice((1, 2, 3, 17, 66, 100, 131))
    knobs.pdl = rnd.random() < 0.2
    return min(WORK_CAP, 6e10 if knobs.num_sms is None or knobs.num_sms >= 64 else 2e9 * knobs.num_sms)


def draw_env(rnd: random.Random, knobs: Knobs, table: tuple) -> None:
    """Sets each environment knob of ``table`` ((probability, variable, values) rows) to one of its
    values with its probability."""
    for probability, variable, values in table:
        if rnd.random() < probability:
            knobs.env[variable] = rnd.choice(values)


def cap_work(m: int, n: int, k: int, budget: float) -> tuple[int, int, int]:
    """Shrinks K, then N, so that one case multiplies at most about ``budget`` MACs (keeps the reference,
    and the runs on a few SMs, quick)."""
    while m * n * k > budget and k > 256:
        k = max(256, k // 2 // 128 * 128)
    while m * n * k > budget and n > 256:
        n = max(256, n // 2 // 128 * 128)
    return m, n, k


# --------------------------------------------------------------------------------------------------
# the ops
# --------------------------------------------------------------------------------------------------


def case_fp8_dense(rnd: random.Random, gen: torch.Generator, name: str) -> str:
    knobs = Knobs()
    m, n, k = cap_work(draw_m(rnd), draw_n(rnd, 8), draw_k(rnd, 16), draw_common_knobs(rnd, knobs))
    draw_env(rnd, knobs, ((0.3, "HOPPERKIT_FP8_GEMM_CONFIG", FP8_DENSE_CONFIGS),
                          (0.2, "HOPPERKIT_FP8_GEMM_SPLITS", tuple("12345678")),
                          (0.1, "HOPPERKIT_FP8_GEMM_SPLIT_FIXUP", ("global",)),
                          (0.1, "HOPPERKIT_FP8_GEMM_A_MULTICAST", ("on", "off")),
                          (0.15, "HOPPERKIT_GEMM_B_HINT", ("normal", "first"))))

    a = block_scaled_randn(gen, m, k)
    b = block_scaled_randn(gen, n, k, block_rows=128)
    a_fp8, sfa = hopperkit.per_token_cast_to_fp8(a)
    b_fp8, sfb = hopperkit.per_block_cast_to_fp8(b)
    a_in, b_in = fp8_row_view(rnd, a_fp8), fp8_row_view(rnd, b_fp8)
    sfa_in, sfb_in = scales_any_major(rnd, sfa), scales_any_major(rnd, sfb)
    buf, d = nan_buffer(rnd, (m, n), torch.bfloat16, 8)
    ran = run_with_knobs(name, knobs, lambda: hopperkit.fp8_gemm_nt((a_in, sfa_in), (b_in, sfb_in), d), [buf])
    label = f"{name} fp8_gemm_nt M={m} N={n} K={k} [{ran}]"
    assert_outside_untouched(label, buf, d)
    assert_gemm_elementwise(label, d, ref_gemm.fp8_gemm_nt(a_fp8, sfa, b_fp8, sfb, out_dtype=torch.float32))
    assert_quantization_error(label, d, a.float() @ b.float().T)
    return label


def case_fp8_1d1d(rnd: random.Random, gen: torch.Generator, name: str) -> str:
    knobs = Knobs()
    m, n, k = cap_work(draw_m(rnd), draw_n(rnd, 4), draw_k(rnd, 16), draw_common_knobs(rnd, knobs))
    draw_env(rnd, knobs, ((0.3, "HOPPERKIT_FP8_1D1D_CONFIG", FP8_1D1D_CONFIGS),))
    a = block_scaled_randn(gen, m, k)
    b = block_scaled_randn(gen, n, k)
    a_fp8, sfa = hopperkit.per_token_cast_to_fp8(a)
    b_fp8, sfb = hopperkit.per_token_cast_to_fp8(b)
    c = torch.randn(m, n, generator=gen, device=DEVICE) * 4
    buf, d = nan_buffer(rnd, (m, n), torch.float32, 4)
    in_place = rnd.random() < 0.5
    if in_place:
        d.copy_(c)
    a_in, b_in = fp8_row_view(rnd, a_fp8), fp8_row_view(rnd, b_fp8)
    sfa_in, sfb_in = scales_any_major(rnd, sfa), scales_any_major(rnd, sfb)
    call = lambda: hopperkit.fp8_gemm_nt((a_in, sfa_in), (b_in, sfb_in), d, c=d if in_place else c,
                                         recipe=(1, 1, 128))
    ran = run_with_knobs(name, knobs, call, [buf])
    label = f"{name} fp8_gemm_nt 1d1d M={m} N={n} K={k} c={'d' if in_place else 'other'} [{ran}]"
    assert_outside_untouched(label, buf, d)
    product = ref_gemm.fp8_gemm_nt(a_fp8, sfa, b_fp8, sfb, torch.zeros_like(c), recipe=(1, 1, 128),
                                   out_dtype=torch.float32)
    # The bound scales with the product alone: C is exact in FP32 and only added.
    assert_gemm_elementwise(label, d - c, product)
    return label


def quant_b_groups(b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    pairs = [hopperkit.per_block_cast_to_fp8(b[g]) for g in range(b.shape[0])]
    return torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])


def draw_group_rows(rnd: random.Random, g: int, hi: int) -> list[int]:
    rows = []
    for _ in range(g):
        r = rnd.random()
        rows.append(0 if r < 0.15 else rnd.randint(1, 63) if r < 0.4 else rnd.randint(1, hi))
    return rows


def case_fp8_contiguous(rnd: random.Random, gen: torch.Generator, name: str) -> str:
    knobs = Knobs()
    budget = draw_common_knobs(rnd, knobs)
    g = rnd.randint(1, 12)
    counts = draw_group_rows(rnd, g, rnd.choice((300, 1100)))
    _, n, k = cap_work(sum(counts) + 128 * g, draw_n(rnd, 8), draw_k(rnd, 16), budget)
    draw_env(rnd, knobs, ((0.3, "HOPPERKIT_FP8_GEMM_CONFIG", FP8_CONTIGUOUS_CONFIGS),
                          (0.1, "HOPPERKIT_FP8_GEMM_A_MULTICAST", ("on", "off"))))
    # The psum layout takes the experts in order, each segment padded to 128 rows; m_indices any
    # order of experts, and padding-only segments.
    psum = rnd.random() < 0.3
    experts = list(range(g))
    if not psum:
        rnd.shuffle(experts)
    segments = [(e, c) for e, c in zip(experts, counts)]
    if not psum and rnd.random() < 0.3:
        segments.insert(rnd.randint(0, len(segments)), (-1, 128))
    m_indices, starts = contiguous_m_indices(segments, 128)
    m = m_indices.numel()
    a = block_scaled_randn(gen, max(m, 1), k)[:m]
    b = block_scaled_randn(gen, g, n, k, block_rows=128)
    a_fp8, sfa = hopperkit.per_token_cast_to_fp8(a)
    b_fp8, sfb = quant_b_groups(b)
    pad = (m_indices == -1).to(DEVICE)
    a_fp8.view(torch.uint8)[pad] = 0x7F  # NaN in the padding rows must reach no valid row
    sfa = sfa.clone()
    sfa[pad] = float("nan")
    buf, d = nan_buffer(rnd, (m, n), torch.bfloat16, 8)
    if psum:
        ends = torch.tensor([s + c for s, (_, c) in zip(starts, segments)], dtype=torch.int32, device=DEVICE)
        call = lambda: hopperkit.m_grouped_fp8_gemm_nt_contiguous((a_fp8, sfa), (b_fp8, sfb), d, ends,
                                                                  use_psum_layout=True)
    else:
        ids = m_indices.to(DEVICE)
        call = lambda: hopperkit.m_grouped_fp8_gemm_nt_contiguous((a_fp8, sfa), (b_fp8, sfb), d, ids)
    ran = run_with_knobs(name, knobs, call, [buf])
    label = f"{name} m_grouped contiguous G={g} rows={counts} N={n} K={k} psum={psum} [{ran}]"
    assert_outside_untouched(label, buf, d)
    assert torch.equal(d[pad], torch.zeros_like(d[pad])), f"{label}: padding rows of D must be 0"
    for (e, c), s in zip(segments, starts):
        if e < 0 or c == 0:
            continue
        r = slice(s, s + c)
        ref = ref_gemm.fp8_gemm_nt(a_fp8[r], sfa[r], b_fp8[e], sfb[e], out_dtype=torch.float32)
        assert_gemm_elementwise(f"{label} expert {e}", d[r], ref)
        assert_quantization_error(f"{label} expert {e}", d[r], a[r].float() @ b[e].float().T)
    return label


def check_masked_rows(label: str, d: torch.Tensor, masked_m: list[int]) -> None:
    """Rows at or past masked_m[g]: 0 or untouched, and on the GPU (every case here takes the kernel)
    untouched from the first 256-row boundary on."""
    for e, c in enumerate(masked_m):
        dead = d[e, c:]
        assert ((dead == 0) | dead.isnan()).all(), f"{label}: group {e} rows past masked_m not 0 or untouched"
        if not d.is_cuda:
            continue  # the reference path writes 0 to every row past masked_m
        beyond = d[e, (c + 255) // 256 * 256:]
        assert beyond.isnan().all(), f"{label}: group {e} blocks without valid rows were written"


def case_fp8_masked(rnd: random.Random, gen: torch.Generator, name: str) -> str:
    knobs = Knobs()
    budget = draw_common_knobs(rnd, knobs)
    g = rnd.randint(1, 12)
    m_max = draw_m(rnd) if rnd.random() < 0.8 else rnd.randint(1000, 4096)
    counts = [min(m_max, c) for c in draw_group_rows(rnd, g, m_max)]
    if rnd.random() < 0.3:
        counts[rnd.randrange(g)] = m_max
    _, n, k = cap_work(g * m_max, draw_n(rnd, 8), draw_k(rnd, 16), budget)
    expected_m = rnd.randint(1, m_max)
    draw_env(rnd, knobs, ((0.3, "HOPPERKIT_FP8_GEMM_CONFIG", FP8_MASKED_CONFIGS),))
    a = block_scaled_randn(gen, g, m_max, k)
    b = block_scaled_randn(gen, g, n, k, block_rows=128)
    pairs = [hopperkit.per_token_cast_to_fp8(a[i]) for i in range(g)]
    a_fp8, sfa = torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])
    b_fp8, sfb = quant_b_groups(b)
    masked = torch.tensor(counts, dtype=torch.int32, device=DEVICE)
    dead = torch.arange(m_max, device=DEVICE)[None, :] >= masked[:, None].long()
    a_fp8.view(torch.uint8)[dead] = 0x7F
    sfa[dead] = float("nan")
    a_in = fp8_row_view(rnd, a_fp8)
    buf, d = nan_buffer(rnd, (g, m_max, n), torch.bfloat16, 8)
    call = lambda: hopperkit.m_grouped_fp8_gemm_nt_masked((a_in, sfa), (b_fp8, sfb), d, masked, expected_m)
    ran = run_with_knobs(name, knobs, call, [buf])
    label = f"{name} m_grouped masked G={g} M_max={m_max} rows={counts} expected={expected_m} N={n} K={k} [{ran}]"
    assert_outside_untouched(label, buf, d)
    check_masked_rows(label, d, counts)
    for e, c in enumerate(counts):
        if c:
            ref = ref_gemm.fp8_gemm_nt(a_fp8[e, :c], sfa[e, :c], b_fp8[e], sfb[e], out_dtype=torch.float32)
            assert_gemm_elementwise(f"{label} group {e}", d[e, :c], ref)
    return label


def bf16_operand(rnd: random.Random, x: torch.Tensor, mn_major_ok: bool) -> torch.Tensor:
    """``x`` [rows, K] K-major, or the same values as a view of MN-major storage [K, rows]."""
    if mn_major_ok and rnd.random() < 0.4:
        return x.t().contiguous().t()
    if rnd.random() < 0.2:
        buf = torch.empty(x.shape[0], x.shape[1] + 8 * rnd.randint(1, 4), dtype=x.dtype, device=x.device)
        view = buf[:, : x.shape[1]]
        view.copy_(x)
        return view
    return x


def case_bf16_dense(rnd: random.Random, gen: torch.Generator, name: str) -> str:
    knobs = Knobs()
    m, n, k = cap_work(draw_m(rnd), draw_n(rnd, 8), draw_k(rnd, 8), draw_common_knobs(rnd, knobs) / 2)
    out_dtype = rnd.choice((torch.bfloat16, torch.float32))
    draw_env(rnd, knobs, ((0.25, "HOPPERKIT_BF16_GEMM_CONFIG", BF16_CONFIGS),
                          (0.2, "HOPPERKIT_BF16_GEMM_SPLITS", tuple("123456")),
                          (0.1, "HOPPERKIT_BF16_GEMM_SPLIT_FIXUP", ("global",)),
                          (0.2, "HOPPERKIT_BF16_GEMM_SWAP_AB", ("off", "auto", "8", "16", "32", "64", "96"))))
    a = torch.randn(m, k, generator=gen, device=DEVICE).to(torch.bfloat16)
    b = torch.randn(n, k, generator=gen, device=DEVICE).to(torch.bfloat16)
    a_in, b_in = bf16_operand(rnd, a, True), bf16_operand(rnd, b, True)
    c_kind = rnd.choice(("none", "other", "d"))
    c = torch.randn(m, n, generator=gen, device=DEVICE).to(out_dtype) if c_kind != "none" else None
    buf, d = nan_buffer(rnd, (m, n), out_dtype, 8)
    if c_kind == "d":
        d.copy_(c)
    call = lambda: hopperkit.bf16_gemm_nt(a_in, b_in, d, c=d if c_kind == "d" else c)
    ran = run_with_knobs(name, knobs, call, [buf])
    label = (f"{name} bf16_gemm_nt M={m} N={n} K={k} D={str(out_dtype)[6:]} c={c_kind} a={tuple(a_in.stride())} "
             f"b={tuple(b_in.stride())} [{ran}]")
    assert_outside_untouched(label, buf, d)
    product = ref_gemm.bf16_gemm_nt(a, b, out_dtype=torch.float32)
    if c is None:
        assert_gemm_elementwise(label, d, product)
    else:
        # With BF16 D the sum is rounded once; compare against the FP32 sum.
        assert_gemm_elementwise(label, d, product + c.float())
    return label


def case_bf16_grouped(rnd: random.Random, gen: torch.Generator, name: str) -> str:
    knobs = Knobs()
    budget = draw_common_knobs(rnd, knobs) / 2
    g = rnd.randint(1, 10)
    n, k = draw_n(rnd, 8), draw_k(rnd, 8)
    b = torch.randn(g, n, k, generator=gen, device=DEVICE).to(torch.bfloat16)
    if rnd.random() < 0.5:
        counts = draw_group_rows(rnd, g, rnd.choice((300, 900)))
        _, n, k = cap_work(sum(counts) + 128 * g, n, k, budget)
        b = b[:, :n, :k].contiguous()
        m_indices, starts = contiguous_m_indices(list(enumerate(counts)), 128)
        m = m_indices.numel()
        a = torch.randn(m, k, generator=gen, device=DEVICE).to(torch.bfloat16)
        pad = (m_indices == -1).to(DEVICE)
        a[pad] = float("nan")
        buf, d = nan_buffer(rnd, (m, n), torch.bfloat16, 8)
        ids = m_indices.to(DEVICE)
        ran = run_with_knobs(name, knobs, lambda: hopperkit.m_grouped_bf16_gemm_nt_contiguous(a, b, d, ids), [buf])
        label = f"{name} m_grouped bf16 contiguous G={g} rows={counts} N={n} K={k} [{ran}]"
        assert_outside_untouched(label, buf, d)
        assert torch.equal(d[pad], torch.zeros_like(d[pad])), f"{label}: padding rows of D must be 0"
        for e, (s, c) in enumerate(zip(starts, counts)):
            if c:
                assert_gemm_elementwise(f"{label} expert {e}", d[s:s + c],
                                   ref_gemm.bf16_gemm_nt(a[s:s + c], b[e], out_dtype=torch.float32))
        return label
    m_max = draw_m(rnd)
    counts = [min(m_max, c) for c in draw_group_rows(rnd, g, m_max)]
    _, n, k = cap_work(g * m_max, n, k, budget)
    b = b[:, :n, :k].contiguous()
    a = torch.randn(g, m_max, k, generator=gen, device=DEVICE).to(torch.bfloat16)
    masked = torch.tensor(counts, dtype=torch.int32, device=DEVICE)
    dead = torch.arange(m_max, device=DEVICE)[None, :] >= masked[:, None].long()
    a[dead] = float("nan")
    expected_m = rnd.randint(1, m_max)
    buf, d = nan_buffer(rnd, (g, m_max, n), torch.bfloat16, 8)
    call = lambda: hopperkit.m_grouped_bf16_gemm_nt_masked(a, b, d, masked, expected_m)
    ran = run_with_knobs(name, knobs, call, [buf])
    label = f"{name} m_grouped bf16 masked G={g} M_max={m_max} rows={counts} expected={expected_m} N={n} K={k} [{ran}]"
    assert_outside_untouched(label, buf, d)
    check_masked_rows(label, d, counts)
    for e, c in enumerate(counts):
        if c:
            assert_gemm_elementwise(f"{label} group {e}", d[e, :c], ref_gemm.bf16_gemm_nt(a[e, :c], b[e], out_dtype=torch.float32))
    return label


def case_fp8_k_grouped(rnd: random.Random, gen: torch.Generator, name: str) -> str:
    g = rnd.randint(1, 6)
    ks = [128 * rnd.choice((0, 1, 2, 3, 8, 24)) for _ in range(g)]
    m, n = rnd.choice((8, 64, 100, 256, 384, 1024)), rnd.choice((4, 96, 256, 512, 1032, 2048, 7168))
    knobs = Knobs()
    draw_common_knobs(rnd, knobs)
    draw_env(rnd, knobs, ((0.3, "HOPPERKIT_FP8_1D1D_CONFIG", FP8_1D1D_CONFIGS),))
    a_parts = [block_scaled_randn(gen, m, kg) for kg in ks]
    b_parts = [block_scaled_randn(gen, n, kg) for kg in ks]
    qa = [hopperkit.per_token_cast_to_fp8(p) for p in a_parts]
    qb = [hopperkit.per_token_cast_to_fp8(p) for p in b_parts]
    a8 = torch.cat([q[0].flatten() for q in qa])
    b8 = torch.cat([q[0].flatten() for q in qb])
    sfa = torch.cat([q[1].contiguous() for q in qa], dim=1)
    sfb = torch.cat([q[1].contiguous() for q in qb], dim=1)
    sfa_in, sfb_in = scales_any_major(rnd, sfa), scales_any_major(rnd, sfb)
    c = torch.randn(g, m, n, generator=gen, device=DEVICE)
    buf, d = nan_buffer(rnd, (g, m, n), torch.float32, 4)
    in_place = rnd.random() < 0.5
    if in_place:
        d.copy_(c)
    ks_dev = torch.tensor(ks, dtype=torch.int32, device=DEVICE)
    call = lambda: hopperkit.k_grouped_fp8_gemm_nt_contiguous((a8, sfa_in), (b8, sfb_in), d, ks, ks_dev,
                                                              c=d if in_place else c)
    ran = run_with_knobs(name, knobs, call, [buf])
    label = f"{name} k_grouped fp8 ks={ks} M={m} N={n} c={'d' if in_place else 'other'} [{ran}]"
    assert_outside_untouched(label, buf, d)
    assert_k_grouped_gemm(label, d, c, ks, lambda e, _: ref_gemm.fp8_gemm_nt(
        qa[e][0], qa[e][1], qb[e][0], qb[e][1], torch.zeros_like(c[e]), recipe=(1, 1, 128), out_dtype=torch.float32))
    return label


def case_bf16_k_grouped(rnd: random.Random, gen: torch.Generator, name: str) -> str:
    knobs = Knobs()
    draw_common_knobs(rnd, knobs)
    g = rnd.randint(1, 6)
    ks = [128 * rnd.choice((0, 1, 2, 3, 8, 24)) for _ in range(g)]
    m, n = rnd.choice((8, 64, 100, 256, 384, 1024)), rnd.choice((8, 96, 256, 520, 1032, 2048, 7168))
    a = torch.randn(sum(ks), m, generator=gen, device=DEVICE).to(torch.bfloat16)
    b = torch.randn(sum(ks), n, generator=gen, device=DEVICE).to(torch.bfloat16)
    c_kind = rnd.choice(("none", "other", "d"))
    c = torch.randn(g, m, n, generator=gen, device=DEVICE) if c_kind != "none" else None
    buf, d = nan_buffer(rnd, (g, m, n), torch.float32, 4)
    if c_kind == "d":
        d.copy_(c)
    ks_dev = torch.tensor(ks, dtype=torch.int32, device=DEVICE)
    call = lambda: hopperkit.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, ks_dev, c=d if c_kind == "d" else c)
    ran = run_with_knobs(name, knobs, call, [buf])
    label = f"{name} k_grouped bf16 ks={ks} M={m} N={n} c={c_kind} [{ran}]"
    assert_outside_untouched(label, buf, d)
    base = c if c is not None else torch.zeros(g, m, n, device=DEVICE)
    assert_k_grouped_gemm(label, d, base, ks, lambda _, rows: a[rows].float().T @ b[rows].float())
    return label


OPS = ((case_fp8_dense, 4), (case_fp8_1d1d, 1), (case_fp8_contiguous, 2), (case_fp8_masked, 2),
       (case_bf16_dense, 3), (case_bf16_grouped, 2), (case_fp8_k_grouped, 1), (case_bf16_k_grouped, 1))


@pytest.mark.gpu
@pytest.mark.parametrize("case", range(CASES), ids=[f"seed{SEED}-case{i}" for i in range(CASES)])
def test_gemm_fuzz(case):
    rnd = random.Random(f"hopperkit fuzz {SEED} {case}")
    op = rnd.choices([f for f, _ in OPS], weights=[w for _, w in OPS])[0]
    gen = seeded_generator(DEVICE, "fuzz", SEED, case)
    op(rnd, gen, f"seed{SEED}-case{case}")


# --------------------------------------------------------------------------------------------------
# the checks, checked (CPU)
# --------------------------------------------------------------------------------------------------

# The GEMM ops the cases call; D is the third argument of each.
GEMM_OPS = ("fp8_gemm_nt", "m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_gemm_nt_masked",
            "k_grouped_fp8_gemm_nt_contiguous", "bf16_gemm_nt", "m_grouped_bf16_gemm_nt_contiguous",
            "m_grouped_bf16_gemm_nt_masked", "k_grouped_bf16_gemm_tn_contiguous")
CPU_SEEDS = 6


@pytest.fixture
def on_cpu(monkeypatch):
    """The cases on the CPU, where every op computes with hopperkit.reference, at most 3e7 multiply-adds
    each (the reference's FP8 two-level accumulation is slow on a CPU)."""
    module = sys.modules[__name__]
    monkeypatch.setattr(module, "DEVICE", "cpu")
    monkeypatch.setattr(module, "WORK_CAP", 3e7)


def run_cpu_case(op, seed: int) -> str:
    return op(random.Random(f"hopperkit fuzz cpu {seed}"), seeded_generator("cpu", "fuzz cpu", seed), f"cpu{seed}")


def corrupt(kind: str, d: torch.Tensor) -> bool:
    """Corrupts D, as a faulty kernel would, in one of three ways; False where D offers nothing to corrupt.
    ``value``: one written (finite) element made wrong by more than any bound; ``unwritten``: every
    written nonzero element back to NaN, as if the kernel had skipped them (padding and masked rows
    hold zeros and may stay); ``outside``: the first element of D's buffer outside D's view written."""
    written = d.isfinite()
    if kind == "value":
        positions = written.nonzero()
        if positions.shape[0] == 0:
            return False
        pos = tuple(positions[positions.shape[0] // 2].tolist())
        d[pos] += 1 + 10 * d[pos].abs()
        return True
    if kind == "unwritten":
        mask = written & (d != 0)
        d[mask] = float("nan")
        return bool(mask.any())
    storage = torch.empty(0, dtype=d.dtype, device=d.device).set_(d.untyped_storage())
    covered = torch.zeros(storage.numel(), dtype=torch.bool, device=d.device)
    covered[torch.arange(storage.numel(), device=d.device).as_strided(d.shape, d.stride(), d.storage_offset())] = True
    outside = (~covered).nonzero()
    if outside.shape[0] == 0:
        return False
    storage[int(outside[0])] = 0
    return True


@pytest.mark.parametrize("op", [f for f, _ in OPS], ids=lambda f: f.__name__[5:])
def test_cases_pass_on_the_reference(on_cpu, op):
    """Each kind of case, drawn and checked as on the GPU, passes where the ops are the reference."""
    for seed in range(CPU_SEEDS):
        run_cpu_case(op, seed)


@pytest.mark.parametrize("kind", ["value", "unwritten", "outside"])
@pytest.mark.parametrize("op", [f for f, _ in OPS], ids=lambda f: f.__name__[5:])
def test_cases_catch_a_corrupted_output(on_cpu, assert_faults_caught, op, kind):
    """The same cases with every GEMM op corrupting D after the reference has written it: each case with
    something to corrupt must fail, and at least one case of each kind has something."""
    assert_faults_caught(GEMM_OPS, lambda args, _: corrupt(kind, args[2]), lambda seed: run_cpu_case(op, seed),
                         CPU_SEEDS)
