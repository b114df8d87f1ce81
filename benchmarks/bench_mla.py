"""MLA decode benchmark: the whole ``flash_mla_with_kvcache`` call, the scheduler-metadata kernel and
the split-KV combine kernel, on an H100/H200.

The timed call is ``flash_mla_with_kvcache`` alone: its metadata is computed once beforehand, as in
FlashMLA's usage (one schedule per decode step, shared by every layer); ``meta µs`` times
``get_mla_metadata`` separately. Prints µs, GB/s, TFLOPS and the fraction of the memory roofline
(device-to-device copy bandwidth, measured in the same run) and of the compute roofline (the bf16 dense
peak, 989 TFLOPS on SXM parts), plus the PyTorch reference path's time for the same call (in the full
run only where b·s_k <= 128·8192, '-' / JSON null elsewhere: it takes seconds there).

``FlashMLA µs`` is a published baseline, NOT measured in this run: upstream FlashMLA on the lent H200
(/work/shared/reference/h200-baselines.md: CUDA events around the whole call, median of 20-50 runs),
'-' for shapes it does not list; ``vs FlashMLA`` = FlashMLA µs / call µs (> 1: faster than FlashMLA).
JSON goes next to the table (--json).

  python benchmarks/bench_mla.py [--quick] [--json FILE]

Byte and FLOP counts (FlashMLA's): FLOPs = 2·b·h_q·s_q·s_k·(576 + 512);
bytes = 2·b·(s_k·576 + h_q·s_q·(576 + 512)) for a bf16 cache, all requests at full length.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Optional

import torch

import hopperkit
from hopperkit import _ops
from hopperkit.reference import mla as mla_ref
from hopperkit.reference import scheduler as sched
from hopperkit.testing import bench, warm_up_gpu

BF16_PEAK_TFLOPS = 989.0

FULL_SHAPES = (
    [(128, s_q, h_q, s_k) for s_q in (1, 2) for h_q in (16, 32, 64, 128) for s_k in (4096, 8192, 16384, 32768)]
    + [(64, 2, 128, 8192), (1, 1, 128, 65536), (32, 1, 64, 32768), (132, 1, 16, 16384)]
)
QUICK_SHAPES = [(128, 1, 64, 4096), (128, 1, 128, 8192), (64, 2, 128, 8192), (1, 1, 128, 65536)]

# The full run times the reference only up to this many cache tokens (b · s_k); --quick always does.
REFERENCE_MAX_TOKENS = 128 * 8192

# Published baseline, not measured in this run: upstream FlashMLA (HEAD 9241ae3), dense BF16, causal,
# on the lent H200, µs per whole call; /work/shared/reference/h200-baselines.md. Key (b, s_q, h_q, s_k).
FLASHMLA_H200_US = {
    (128, 1, 16, 4096): 188.0,
    (128, 1, 32, 4096): 165.0,
    (128, 1, 64, 4096): 189.2,
    (128, 1, 128, 4096): 276.3,
    (128, 1, 128, 8192): 526.8,
    (128, 1, 128, 16384): 891.8,
    (128, 2, 64, 4096): 241.6,
    (128, 2, 128, 4096): 485.4,
    (64, 2, 128, 8192): 494.4,
    (32, 1, 64, 32768): 349.3,
    (132, 1, 16, 16384): 599.1,
    (1, 1, 128, 65536): 85.6,
}


def copy_bandwidth_gbs() -> float:
    """Device-to-device copy of 2 GiB, bytes read + written, median of 20."""
    src = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    t = bench(lambda: dst.copy_(src), warmup=3, iters=20, flush_l2=False)["median_us"]
    return 2 * src.numel() / t / 1e3


def decode_inputs(b: int, s_q: int, h_q: int, s_k: int, device: str = "cuda"):
    """``(q, k_cache, block_table, cache_seqlens)``: every request at length s_k, one KV head, bf16
    randn/10 drawn on the device (the biggest caches are GBs), blocks randomly permuted."""
    blocks = -(-s_k // 64)
    q = (torch.randn(b, s_q, h_q, 576, device=device, dtype=torch.bfloat16) / 10).clamp(-1, 1)
    k_cache = (torch.randn(b * blocks, 64, 1, 576, device=device, dtype=torch.bfloat16) / 10).clamp(-1, 1)
    block_table = torch.randperm(b * blocks, device=device, dtype=torch.int32).view(b, blocks)
    seqlens = torch.full((b,), s_k, dtype=torch.int32, device=device)
    return q, k_cache, block_table, seqlens


def times_reference(b: int, s_k: int, quick: bool) -> bool:
    return quick or b * s_k <= REFERENCE_MAX_TOKENS


def bench_decode(b: int, s_q: int, h_q: int, s_k: int, quick: bool) -> dict:
    q, k_cache, block_table, seqlens = decode_inputs(b, s_q, h_q, s_k)
    causal = s_q > 1

    # Metadata once per decode step, shared by all layers (FlashMLA's usage): only the attention is timed.
    tsm, ns = hopperkit.get_mla_metadata(seqlens, s_q * h_q, 1)
    iters = 5 if quick else 10
    t_call = bench(lambda: hopperkit.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, 512, tsm, ns,
                                                            causal=causal), warmup=2, iters=iters)["median_us"]
    t_ref = None
    if times_reference(b, s_k, quick):
        t_ref = bench(lambda: mla_ref.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, 512, causal=causal),
                      warmup=1, iters=3)["median_us"]
    parts = sched.num_sm_parts_dense(hopperkit.get_num_sms(q.device), s_q, h_q, 1)
    t_meta = bench(lambda: hopperkit.get_mla_metadata(seqlens, s_q * h_q, 1), warmup=3, iters=20)["median_us"]

    # The combine on this shape's real split pattern, with random partials.
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
    baseline = FLASHMLA_H200_US.get((b, s_q, h_q, s_k))
    return {
        "b": b, "s_q": s_q, "h_q": h_q, "s_k": s_k,
        "call_us": t_call, "call_gbs": nbytes / t_call / 1e3, "call_tflops": flops / t_call / 1e6,
        "reference_us": t_ref, "metadata_us": t_meta, "combine_us": t_comb,
        "combine_gbs": comb_bytes / t_comb / 1e3, "num_sm_parts": parts, "split_rows": split_rows,
        "bytes": nbytes, "flops": flops,
        "flashmla_published_us": baseline,
        "flashmla_published_over_call": None if baseline is None else baseline / t_call,
    }


def _opt(v: Optional[float], width: int, fmt: str) -> str:
    return f"{'-':>{width}}" if v is None else f"{v:>{width}{fmt}}"


HEADER = (f"{'b':>4} {'s_q':>3} {'h_q':>4} {'s_k':>6} | {'call µs':>9} {'GB/s':>6} {'%mem':>5} {'TFLOPS':>7} {'%mma':>5} "
          f"| {'FlashMLA µs*':>12} {'vs FlashMLA*':>12} | {'ref µs':>9} | {'meta µs':>7} | {'comb µs':>7} {'GB/s':>6} "
          f"{'parts':>5}")


def format_row(r: dict) -> str:
    return (f"{r['b']:>4} {r['s_q']:>3} {r['h_q']:>4} {r['s_k']:>6} | {r['call_us']:>9.1f} {r['call_gbs']:>6.0f} "
            f"{100 * r['mem_roofline']:>4.0f}% {r['call_tflops']:>7.1f} {100 * r['mma_roofline']:>4.0f}% | "
            f"{_opt(r['flashmla_published_us'], 12, '.1f')} {_opt(r['flashmla_published_over_call'], 11, '.2f')}"
            f"{' ' if r['flashmla_published_over_call'] is None else 'x'} | "
            f"{_opt(r['reference_us'], 9, '.1f')} | {r['metadata_us']:>7.1f} | {r['combine_us']:>7.1f} "
            f"{r['combine_gbs']:>6.0f} {r['num_sm_parts']:>5}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="the four acceptance shapes")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_mla: needs a CUDA device", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    warm_up_gpu(device=dev)
    props = torch.cuda.get_device_properties(dev)
    bw = copy_bandwidth_gbs()
    path = "kernel" if _ops.use_kernel("flash_mla_with_kvcache", dev) else "reference (no decode kernel yet)"
    print(f"{props.name}, {props.multi_processor_count} SMs; copy bandwidth {bw:.0f} GB/s; "
          f"flash_mla_with_kvcache runs: {path}; metadata: "
          f"{'kernel' if _ops.use_kernel('get_mla_metadata', dev) else 'reference'}, combine: "
          f"{'kernel' if _ops.use_kernel('mla_combine', dev) else 'reference'}")
    print("call µs: flash_mla_with_kvcache with metadata computed beforehand (meta µs: get_mla_metadata alone).\n"
          "* published baseline, not measured in this run: upstream FlashMLA on an H200 (h200-baselines.md); "
          "vs FlashMLA = FlashMLA µs / call µs (> 1: we are faster).")
    rows = []
    print(HEADER)
    print("-" * len(HEADER))
    for shape in (QUICK_SHAPES if args.quick else FULL_SHAPES):
        r = bench_decode(*shape, quick=args.quick)
        r["mem_roofline"] = r["call_gbs"] / bw
        r["mma_roofline"] = r["call_tflops"] / BF16_PEAK_TFLOPS
        rows.append(r)
        print(format_row(r), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": props.name, "copy_gbs": bw, "decode_path": path,
                       "flashmla_published_note": "flashmla_published_us: published baseline from "
                       "h200-baselines.md (upstream FlashMLA on an H200), not measured in this run",
                       "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
