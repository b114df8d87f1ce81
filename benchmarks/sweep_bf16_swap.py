"""BF16 decode-sized GEMMs under each swap-AB setting and torch.mm, as ncu kernel durations: the
measurement behind ``gemm/heuristics.h`` ``choose_bf16_swap_ab_config``.

  ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum --csv --page raw \\
      python benchmarks/sweep_bf16_swap.py --calls calls.json > ncu.csv
  python benchmarks/sweep_bf16_swap.py --table ncu.csv --calls calls.json

The first form runs every shape under each ``HOPPERKIT_BF16_GEMM_SWAP_AB`` setting (``off``: the
normal kernels; a token width: the swapped kernel forced; ``auto``: the heuristic) and ``torch.mm``,
in turns for ``--rounds`` rounds inside cudaProfilerStart/Stop, checks every result against an FP32
product first, and writes the sequence of calls. The second maps ncu's kernel durations onto that
sequence (each hopperkit call is one kernel; a ``torch.mm`` call is its GEMM kernel and any split-K
reduce kernel after it) and prints the median of each setting in µs. ncu flushes the caches before
each kernel (its default ``--cache-control all``), so every call starts from a clean L2.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ncu_sweep import medians_by_shape, profile_in_turns, sweep_main, write_calls  # noqa: E402

MS = (40, 64, 72, 96, 128)
NK = ((2112, 7168), (576, 7168), (4096, 7168), (7168, 2048), (24576, 1536), (32768, 512))
SETTINGS = ("off", "32", "64", "96", "auto")


def run(args) -> None:
    import torch

    import hopperkit

    torch.manual_seed(0)
    calls = []
    for m in args.ms:
        for n, k in NK:
            a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
            b = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
            ref = a.float() @ b.float().t()
            fns = {}
            for setting in args.settings:
                d = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")

                def call(setting=setting, d=d):
                    os.environ["HOPPERKIT_BF16_GEMM_SWAP_AB"] = setting
                    hopperkit.bf16_gemm_nt(a, b, d)

                call()
                err = ((d.float() - ref).norm() / ref.norm()).item()
                if not err < 1e-2:  # also catches NaN
                    raise SystemExit(f"{m}x{n}x{k} with HOPPERKIT_BF16_GEMM_SWAP_AB={setting}: relative error {err}")
                fns[setting] = call
            d_mm = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
            fns["torch.mm"] = lambda: torch.mm(a, b.t(), out=d_mm)
            profile_in_turns(f"{m}x{n}x{k}", fns, args.rounds, calls)
    os.environ.pop("HOPPERKIT_BF16_GEMM_SWAP_AB", None)
    write_calls(args.calls, calls)


def table(args) -> None:
    names, medians = medians_by_shape(args.table, args.calls, trailing=lambda kernel: "splitKreduce" in kernel)
    print("ncu kernel durations, µs (median of rounds); ratio: torch.mm / auto")
    for shape, med in medians.items():
        ratio = f" | ratio {med['torch.mm'] / med['auto']:.3f}" if "auto" in med else ""
        print(f"{shape:>14}: " + " | ".join(f"{name} {med[name]:6.2f}" for name in names) + ratio)


def main(argv=None) -> int:
    return sweep_main(__doc__, run, table, MS, SETTINGS, "token counts M",
                      "HOPPERKIT_BF16_GEMM_SWAP_AB values", argv)


if __name__ == "__main__":
    sys.exit(main())
