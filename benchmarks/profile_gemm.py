"""Run FP8 1d2d GEMM shapes a few times, as a target for Nsight Compute.

  ncu --clock-control none --profile-from-start off python benchmarks/profile_gemm.py M N K [M N K ...]

Each shape is called ``--calls`` times (default 3) on random operands quantized by hopperkit's casts,
inside cudaProfilerStart/Stop, so that ``--profile-from-start off`` leaves the casts out. ``--cublas``
also runs per-tensor ``torch._scaled_mm`` on the same FP8 bytes (unit scales) after each shape's
calls, for a kernel-only comparison. It times nothing itself: bench_gemm.py does.
"""

from __future__ import annotations

import argparse
import sys

import torch

import hopperkit


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mnk", type=int, nargs="+", help="M N K triples")
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--cublas", action="store_true", help="also run per-tensor torch._scaled_mm on the same bytes")
    args = ap.parse_args(argv)
    if len(args.mnk) % 3:
        ap.error("shapes come as M N K triples")
    torch.manual_seed(0)
    for i in range(0, len(args.mnk), 3):
        m, n, k = args.mnk[i:i + 3]
        a_fp8, sfa = hopperkit.per_token_cast_to_fp8(torch.randn(m, k, dtype=torch.bfloat16, device="cuda"))
        b_fp8, sfb = hopperkit.per_block_cast_to_fp8(torch.randn(n, k, dtype=torch.bfloat16, device="cuda"))
        d = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        one = torch.ones((), dtype=torch.float32, device="cuda")
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        for _ in range(args.calls):
            hopperkit.fp8_gemm_nt((a_fp8, sfa), (b_fp8, sfb), d)
        if args.cublas:
            for _ in range(args.calls):
                torch._scaled_mm(a_fp8, b_fp8.t(), one, one, out_dtype=torch.bfloat16)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
        print(f"{m}x{n}x{k}: {args.calls} calls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
