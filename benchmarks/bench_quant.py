"""FP8 cast benchmark: ``per_token_cast_to_fp8`` and ``per_block_cast_to_fp8`` kernels on an H100/H200.

Prints µs, GB/s (input read + fp8 written + scales written), the fraction of the device-to-device copy
bandwidth measured in the same run, and the speed-up over the PyTorch reference path (which also
transposes the per-token scales). JSON goes next to the table (--json).

  python benchmarks/bench_quant.py [--quick] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import math

import torch

from hopperkit import _ops
from hopperkit.reference import layout as layout_ref
from hopperkit.reference import quant as quant_ref
from hopperkit.testing import bench, warm_up_gpu

FULL_SHAPES = [(128, 7168), (4096, 7168), (4096, 16384), (16384, 7168), (7168, 2048), (2048, 7168), (4097, 200)]
QUICK_SHAPES = [(4096, 7168), (128, 7168), (4096, 16384)]
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def copy_bandwidth_gbs() -> float:
    src = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    t = bench(lambda: dst.copy_(src), warmup=3, iters=20, flush_l2=False)["median_us"]
    return 2 * src.numel() / t / 1e3


def cast_bytes(kind: str, m: int, n: int, elem: int) -> int:
    scales = m * math.ceil(n / 128) if kind == "per_token" else math.ceil(m / 128) * math.ceil(n / 128)
    return m * n * elem + m * n + 4 * scales


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    assert _ops.use_kernel("per_token_cast_to_fp8", torch.device("cuda")), "needs an SM90 GPU and hopperkit._C"
    warm_up_gpu()
    copy_gbs = copy_bandwidth_gbs()
    print(f"device-to-device copy: {copy_gbs:.0f} GB/s")
    print(f"{'cast':10s} {'dtype':5s} {'m':>6s} {'n':>6s} {'us':>8s} {'GB/s':>7s} {'of copy':>8s} {'vs ref':>7s}")
    rows = []
    for m, n in QUICK_SHAPES if args.quick else FULL_SHAPES:
        for dname, dtype in DTYPES.items():
            x = torch.randn(m, n, device="cuda").to(dtype)
            for kind in ("per_token", "per_block"):
                op = getattr(torch.ops.hopperkit, f"{kind}_cast_to_fp8")
                if kind == "per_token":
                    def ref(x=x):
                        return layout_ref.get_mn_major_tma_aligned_tensor(quant_ref.per_token_cast_to_fp8(x, True)[1])
                else:
                    def ref(x=x):
                        return quant_ref.per_block_cast_to_fp8(x, True)
                t = bench(lambda op=op, x=x: op(x, True), warmup=5, iters=30)["median_us"]
                t_ref = bench(ref, warmup=2, iters=5)["median_us"]
                gbs = cast_bytes(kind, m, n, x.element_size()) / t / 1e3
                rows.append({"cast": kind, "dtype": dname, "m": m, "n": n, "us": t, "gbs": gbs,
                             "frac_copy": gbs / copy_gbs, "ref_us": t_ref})
                print(f"{kind:10s} {dname:5s} {m:6d} {n:6d} {t:8.1f} {gbs:7.0f} {gbs / copy_gbs:8.2f} {t_ref / t:6.1f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"copy_gbs": copy_gbs, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
