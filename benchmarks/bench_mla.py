"""MLA decode benchmark: the whole ``flash_mla_with_kvcache`` call, the scheduler-metadata kernel and
the split-KV combine kernel, on an H100/H200.

Prints µs, GB/s, TFLOPS and the fraction of the memory roofline (device-to-device copy bandwidth,
measured in the same run) and of the compute roofline (the bf16 dense peak, 989 TFLOPS on SXM parts),
plus the PyTorch reference path's time for the same call. JSON goes next to the table (--json).

  python benchmarks/bench_mla.py [--quick] [--json FILE]

Byte and FLOP counts (FlashMLA's): FLOPs = 2·b·h_q·s_q·s_k·(576 + 512);
bytes = 2·b·(s_k·576 + h_q·s_q·(576 + 512)) for a bf16 cache, all requests at full length.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

import hopperkit
from hopperkit import _ops
from hopperkit.reference import mla as mla_ref
from hopperkit.reference import scheduler as sched
from hopperkit.testing import bench, paged_decode_inputs

BF16_PEAK_TFLOPS = 989.0

FULL_SHAPES = (
    [(128, s_q, h_q, s_k) for s_q in (1, 2) for h_q in (16, 32, 64, 128) for s_k in (4096, 8192, 16384, 32768)]
    + [(64, 2, 128, 8192), (1, 1, 128, 65536), (32, 1, 64, 32768), (132, 1, 16, 16384)]
)
QUICK_SHAPES = [(128, 1, 64, 4096), (128, 1, 128, 8192), (64, 2, 128, 8192), (1, 1, 128, 65536)]


def copy_bandwidth_gbs() -> float:
    """Device-to-device copy of 2 GiB, bytes read + written, median of 20."""
    src = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    t = bench(lambda: dst.copy_(src), warmup=3, iters=20, flush_l2=False)["median_us"]
    return 2 * src.numel() / t / 1e3


def bench_decode(b: int, s_q: int, h_q: int, s_k: int, quick: bool) -> dict:
    seqlens = torch.full((b,), s_k, dtype=torch.int32, device="cuda")
    q, k_cache, block_table = paged_decode_inputs(seqlens, s_q, h_q, nan_unused=False)
    causal = s_q > 1

    def call():
        tsm, ns = hopperkit.get_mla_metadata(seqlens, s_q * h_q, 1)
        return hopperkit.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, 512, tsm, ns, causal=causal)

    iters = 5 if quick else 10
    t_call = bench(call, warmup=2, iters=iters)["median_us"]
    t_ref = bench(lambda: mla_ref.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, 512, causal=causal),
                  warmup=1, iters=3)["median_us"]
    parts = sched.num_sm_parts_dense(hopperkit.get_num_sms(q.device), s_q, h_q, 1)
    t_meta = bench(lambda: hopperkit.get_mla_metadata(seqlens, s_q * h_q, 1), warmup=3, iters=20)["median_us"]

    # The combine on this shape's real split pattern, with random partials.
    tsm, ns = hopperkit.get_mla_metadata(seqlens, s_q * h_q, 1)
    rows = b + parts
    o_acc = torch.randn(rows, 1, s_q * h_q, 512, device="cuda")
    lse_acc = torch.randn(rows, 1, s_q * h_q, device="cuda")
    out = torch.empty(b, s_q, h_q, 512, dtype=torch.bfloat16, device="cuda")
    lse = torch.empty(b, h_q, s_q, device="cuda")
    t_comb = bench(lambda: hopperkit.mla.mla_combine(o_acc, lse_acc, ns, out, lse), warmup=3, iters=20)["median_us"]
    split_rows = int((ns[1:] - ns[:-1]).masked_fill(ns[1:] - ns[:-1] == 1, 0).sum())
    comb_bytes = split_rows * s_q * h_q * (512 * 4 + 4) + b * s_q * h_q * 512 * 2

    flops = 2 * b * h_q * s_q * s_k * (576 + 512)
    nbytes = 2 * b * (s_k * 576 + h_q * s_q * (576 + 512))
    return {
        "b": b, "s_q": s_q, "h_q": h_q, "s_k": s_k,
        "call_us": t_call, "call_gbs": nbytes / t_call / 1e3, "call_tflops": flops / t_call / 1e6,
        "reference_us": t_ref, "metadata_us": t_meta, "combine_us": t_comb,
        "combine_gbs": comb_bytes / t_comb / 1e3, "num_sm_parts": parts, "split_rows": split_rows,
        "bytes": nbytes, "flops": flops,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="four representative shapes")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_mla: needs a CUDA device", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    bw = copy_bandwidth_gbs()
    path = "kernel" if _ops.use_kernel("flash_mla_with_kvcache", dev) else "reference (no decode kernel yet)"
    print(f"{props.name}, {props.multi_processor_count} SMs; copy bandwidth {bw:.0f} GB/s; "
          f"flash_mla_with_kvcache runs: {path}; metadata: "
          f"{'kernel' if _ops.use_kernel('get_mla_metadata', dev) else 'reference'}, combine: "
          f"{'kernel' if _ops.use_kernel('mla_combine', dev) else 'reference'}")
    rows = []
    header = (f"{'b':>4} {'s_q':>3} {'h_q':>4} {'s_k':>6} | {'call µs':>9} {'GB/s':>6} {'%mem':>5} {'TFLOPS':>7} {'%mma':>5} "
              f"| {'ref µs':>9} | {'meta µs':>7} | {'comb µs':>7} {'GB/s':>6} {'parts':>5}")
    print(header)
    print("-" * len(header))
    for shape in (QUICK_SHAPES if args.quick else FULL_SHAPES):
        r = bench_decode(*shape, quick=args.quick)
        r["mem_roofline"] = r["call_gbs"] / bw
        r["mma_roofline"] = r["call_tflops"] / BF16_PEAK_TFLOPS
        rows.append(r)
        print(f"{r['b']:>4} {r['s_q']:>3} {r['h_q']:>4} {r['s_k']:>6} | {r['call_us']:>9.1f} {r['call_gbs']:>6.0f} "
              f"{100 * r['mem_roofline']:>4.0f}% {r['call_tflops']:>7.1f} {100 * r['mma_roofline']:>4.0f}% | "
              f"{r['reference_us']:>9.1f} | {r['metadata_us']:>7.1f} | {r['combine_us']:>7.1f} {r['combine_gbs']:>6.0f} "
              f"{r['num_sm_parts']:>5}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": props.name, "copy_gbs": bw, "decode_path": path, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
