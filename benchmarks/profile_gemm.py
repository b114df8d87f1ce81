"""Run GEMM shapes a few times, as a target for Nsight Compute.

  ncu --clock-control none --profile-from-start off python benchmarks/profile_gemm.py M N K [M N K ...]

Each shape is called ``--calls`` times (default 3) on random operands inside cudaProfilerStart/Stop,
so that ``--profile-from-start off`` leaves the input preparation out. ``--op fp8`` (the default)
runs the FP8 1d2d ``fp8_gemm_nt`` on operands quantized by hopperkit's casts, ``--op bf16`` runs
``bf16_gemm_nt``. ``--cublas`` also runs cuBLAS on the same operands after each shape's calls, for a
kernel-only comparison: per-tensor ``torch._scaled_mm`` (unit scales) or, with ``--blockwise``, the
blockwise-scaled ``scaled_mm`` of the same recipe, for FP8; ``torch.mm`` for BF16. It times
nothing itself: bench_gemm.py does.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

import hopperkit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gemm import cublas_blockwise, cublas_sfa, cublas_sfb  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mnk", type=int, nargs="+", help="M N K triples")
    ap.add_argument("--op", choices=("fp8", "bf16"), default="fp8")
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--cublas", action="store_true", help="also run cuBLAS on the same operands")
    ap.add_argument("--blockwise", action="store_true", help="FP8: the cuBLAS peer is blockwise scaled_mm")
    args = ap.parse_args(argv)
    if len(args.mnk) % 3:
        ap.error("shapes come as M N K triples")
    torch.manual_seed(0)
    for i in range(0, len(args.mnk), 3):
        m, n, k = args.mnk[i:i + 3]
        a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        b = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
        d = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        if args.op == "fp8":
            a_fp8, sfa = hopperkit.per_token_cast_to_fp8(a)
            b_fp8, sfb = hopperkit.per_block_cast_to_fp8(b)
            one = torch.ones((), dtype=torch.float32, device="cuda")
            sa, sb = cublas_sfa(sfa), cublas_sfb(sfb)

            def ours():
                hopperkit.fp8_gemm_nt((a_fp8, sfa), (b_fp8, sfb), d)

            def peer():
                if args.blockwise:
                    cublas_blockwise(a_fp8, sa, b_fp8, sb)
                else:
                    torch._scaled_mm(a_fp8, b_fp8.t(), one, one, out_dtype=torch.bfloat16)
        else:
            d_peer = torch.empty_like(d)

            def ours():
                hopperkit.bf16_gemm_nt(a, b, d)

            def peer():
                torch.mm(a, b.t(), out=d_peer)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        for _ in range(args.calls):
            ours()
        if args.cublas:
            for _ in range(args.calls):
                peer()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
        print(f"{args.op} {m}x{n}x{k}: {args.calls} calls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
