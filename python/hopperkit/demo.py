"""``python -m hopperkit.demo``: one MLA decode step and one FP8 GEMM the way a serving engine calls
them, on the GPU if there is one (else on the CPU), with accuracy against the unquantized math and
the time of each call."""

from __future__ import annotations

import math
import time

import torch

import hopperkit
from hopperkit import _ops
from hopperkit.testing import paged_decode_inputs


def _time(fn, device: torch.device, iters: int = 5) -> float:
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / iters * 1e6


def mla_decode_step(device: torch.device) -> None:
    b, s_q, h_q, h_k, page = 8, 1, 128, 1, 64
    seqlens = torch.tensor([1000, 37, 0, 4096, 640, 2049, 64, 3000], dtype=torch.int32, device=device)
    q, k_cache, block_table = paged_decode_inputs(seqlens, s_q, h_q, h_k)  # NaN in unused cache slots

    meta, _ = hopperkit.get_mla_metadata()  # FlashMLA's lazy style: filled by the first layer's call
    out, lse = hopperkit.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, 512, meta, causal=True)

    # The same attention in float64, request by request.
    worst = 0.0
    for i, L in enumerate(seqlens.tolist()):
        if L == 0:
            assert bool((out[i] == 0).all()) and bool(torch.isinf(lse[i]).all()), "empty request: out 0, lse +inf"
            continue
        kv = k_cache[block_table[i, : math.ceil(L / page)].long()].reshape(-1, 576)[:L].double()
        p = torch.softmax(q[i, 0].double() @ kv.T * 576 ** -0.5, dim=-1)
        worst = max(worst, float((p @ kv[:, :512] - out[i, 0].double()).abs().max()))
    t = _time(lambda: hopperkit.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, 512, meta, causal=True), device)
    print(f"MLA decode  b={b} h_q={h_q} seqlens={seqlens.tolist()}")
    print(f"  out {tuple(out.shape)} {out.dtype}, lse {tuple(lse.shape)}; max |out - float64| = {worst:.2e}; "
          f"schedule: {meta.tile_scheduler_metadata.shape[0]} partitions, {int(meta.num_splits[-1])} split rows; "
          f"{t:.0f} µs per call")


def fp8_gemm(device: torch.device) -> None:
    m, n, k = 128, 2112, 7168
    a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
    w = torch.randn(n, k, device=device, dtype=torch.bfloat16)
    a_fp8, sfa = hopperkit.per_token_cast_to_fp8(a)
    w_fp8, sfw = hopperkit.per_block_cast_to_fp8(w)
    d = torch.empty(m, n, device=device, dtype=torch.bfloat16)
    hopperkit.fp8_gemm_nt((a_fp8, sfa), (w_fp8, sfw), d)
    diff = hopperkit.calc_diff(d, a.float() @ w.float().T)
    t = _time(lambda: hopperkit.fp8_gemm_nt((a_fp8, sfa), (w_fp8, sfw), d), device)
    print(f"FP8 GEMM    {m}x{n}x{k} (1x128 activation / 128x128 weight scales)")
    print(f"  calc_diff vs the bf16 product of the unquantized inputs: {diff:.1e} (contract < 1e-3); {t:.0f} µs per call")


def main() -> None:
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    torch.manual_seed(0)
    on_kernels = _ops.use_kernel("mla_combine", device)
    print(f"hopperkit {hopperkit.__version__} on {device} "
          f"({'SM90 kernels where they exist' if on_kernels else 'PyTorch reference path'}; "
          "`python -m hopperkit` lists each op's path)\n")
    mla_decode_step(device)
    fp8_gemm(device)


if __name__ == "__main__":
    main()
