"""What programmatic dependent launch (``hopperkit.set_pdl(True)``) buys a decode step, on an H100/H200.

  python benchmarks/bench_pdl.py [--json FILE] [--ms 1,64,128]

With PDL a GEMM launched right after another kernel may start its CTAs before that kernel has
finished (it waits on the device before reading that kernel's outputs), so the launch and the
prologue of each kernel overlap the end of the one before. A single call after an L2 flush has
nothing to overlap with; a chain of calls has a kernel boundary per call. Rows, each timed with PDL
off and on in turns (``hopperkit.testing.bench_interleaved``, medians, µs; "flushed": a 256 MB L2 flush
before each timed call or chain, DeepGEMM's benchmark flush):

  single        one fp8_gemm_nt, flushed
  cast+gemm     per_token_cast_to_fp8 of the activations, then the GEMM that reads them, flushed
  4 gemms       four FP8 GEMMs of one decode step (q_a 2112×7168, 24576×1536, 7168×16384,
                7168×2048), flushed once, and without a flush (weights that stay in L2)
  4 bf16 gemms  four bf16_gemm_nt calls (7168×2048), flushed once

Every row's result is checked against the same calls without PDL first (bitwise equal).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Callable

import torch

import hopperkit as hk
from hopperkit.testing import bench_interleaved, warm_up_gpu

SINGLE = ((1, 7168, 2048), (64, 2112, 7168), (128, 7168, 16384), (4096, 4096, 7168))
DECODE_MS = (1, 64, 128)


def _with_pdl(flag: bool, fn: Callable[[], object]) -> Callable[[], object]:
    def call():
        hk.set_pdl(flag)
        return fn()
    return call


def _row(rows: list, name: str, fn: Callable[[], object], outputs: Callable[[], list], flush: bool = True) -> None:
    """Times fn with PDL off and on; first checks that both give the same bits."""
    _with_pdl(False, fn)()
    torch.cuda.synchronize()
    want = [t.clone() for t in outputs()]
    _with_pdl(True, fn)()
    torch.cuda.synchronize()
    same = all(torch.equal(a, b) for a, b in zip(outputs(), want))
    r = bench_interleaved({"off": _with_pdl(False, fn), "on": _with_pdl(True, fn)}, iters=30, flush_l2=flush)
    off, on = r["off"]["median_us"], r["on"]["median_us"]
    rows.append({"row": name, "off_us": off, "on_us": on, "same_bits": same})
    print(f"{name:34s} | {off:9.1f} {on:9.1f} | {off / on:5.2f} | {'yes' if same else 'NO'}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--ms", default=",".join(map(str, DECODE_MS)), help="decode rows of the chains")
    args = ap.parse_args()
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        print("bench_pdl.py needs an SM90 GPU (H100/H200)", file=sys.stderr)
        return 1
    dev = torch.device("cuda")
    warm_up_gpu()
    g = torch.Generator(device=dev).manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=g, device=dev).bfloat16()

    print(f"{torch.cuda.get_device_name()}; µs, medians of 30 calls in turns")
    print(f"{'row':34s} | {'PDL off':>9s} {'PDL on':>9s} | ratio | same bits")
    rows: list = []
    was = hk.get_pdl()
    try:
        for m, n, k in SINGLE:
            a, b = hk.per_token_cast_to_fp8(randn(m, k)), hk.per_block_cast_to_fp8(randn(n, k))
            d = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
            _row(rows, f"single {m}x{n}x{k}", lambda: hk.fp8_gemm_nt(a, b, d), lambda: [d])
        for m in (int(x) for x in args.ms.split(",")):
            x = randn(m, 7168)
            layers = [(2112, 7168), (24576, 1536), (7168, 16384), (7168, 2048)]
            acts = [hk.per_token_cast_to_fp8(randn(m, k)) for _, k in layers]
            weights = [hk.per_block_cast_to_fp8(randn(n, k)) for n, k in layers]
            outs = [torch.empty(m, n, device=dev, dtype=torch.bfloat16) for n, _ in layers]

            def cast_gemm():
                hk.fp8_gemm_nt(hk.per_token_cast_to_fp8(x), weights[0], outs[0])

            def four():
                for a, b, d in zip(acts, weights, outs):
                    hk.fp8_gemm_nt(a, b, d)

            xb, wb = randn(m, 2048), randn(7168, 2048)
            db = [torch.empty(m, 7168, device=dev, dtype=torch.bfloat16) for _ in range(4)]

            def four_bf16():
                for d in db:
                    hk.bf16_gemm_nt(xb, wb, d)

            _row(rows, f"M={m} cast+gemm", cast_gemm, lambda: outs[:1])
            _row(rows, f"M={m} 4 gemms", four, lambda: outs)
            _row(rows, f"M={m} 4 gemms, no flush", four, lambda: outs, flush=False)
            _row(rows, f"M={m} 4 bf16 gemms", four_bf16, lambda: db)
    finally:
        hk.set_pdl(was)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    return 0 if all(r["same_bits"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
