"""FP8 decode GEMMs of one M block with and without A multicast, as ncu kernel durations: the
measurement behind ``gemm/heuristics.h`` ``fp8_1d2d_a_multicast_fits``.

  ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum --csv --page raw \\
      python benchmarks/sweep_fp8_a_multicast.py --calls calls.json > ncu.csv
  python benchmarks/sweep_fp8_a_multicast.py --table ncu.csv --calls calls.json

The first form runs every shape with ``HOPPERKIT_FP8_GEMM_A_MULTICAST`` off, on, and unset (the
heuristic), in turns for ``--rounds`` rounds inside cudaProfilerStart/Stop, after checking that every
setting gives the same bits; shapes where A multicast cannot run (split K, an odd number of N
blocks) are skipped with a line saying so. The second maps ncu's kernel durations (one kernel per
call; ``ncu_sweep.py``) onto the call sequence and prints the median of each setting in µs, and
B's GB/s at them. ncu flushes the caches before each kernel (its default ``--cache-control all``).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ncu_sweep import medians_by_shape, profile_in_turns, sweep_main, write_calls  # noqa: E402

MS = (1, 7, 32, 64)
NK = ((7168, 16384), (7168, 2048), (24576, 1536), (32768, 512), (4096, 7168))
SETTINGS = ("off", "on", "auto")


def run(args) -> None:
    import torch

    import hopperkit

    torch.manual_seed(0)
    calls = []
    for m in args.ms:
        for n, k in NK:
            a_fp8, sfa = hopperkit.per_token_cast_to_fp8(torch.randn(m, k, dtype=torch.bfloat16, device="cuda"))
            b_fp8, sfb = hopperkit.per_block_cast_to_fp8(torch.randn(n, k, dtype=torch.bfloat16, device="cuda"))
            fns, outs = {}, {}
            try:
                for setting in args.settings:
                    d = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")

                    def call(setting=setting, d=d):
                        if setting == "auto":
                            os.environ.pop("HOPPERKIT_FP8_GEMM_A_MULTICAST", None)
                        else:
                            os.environ["HOPPERKIT_FP8_GEMM_A_MULTICAST"] = setting
                        hopperkit.fp8_gemm_nt((a_fp8, sfa), (b_fp8, sfb), d)

                    call()
                    fns[setting], outs[setting] = call, d
            except ValueError as e:
                print(f"{m}x{n}x{k}: skipped ({str(e).splitlines()[0][:120]})")
                continue
            first = next(iter(outs.values()))
            for setting, d in outs.items():
                if torch.isnan(d.float()).any() or not torch.equal(d, first):
                    raise SystemExit(f"{m}x{n}x{k}: A multicast {setting} differs from {args.settings[0]}")
            profile_in_turns(f"{m}x{n}x{k}", fns, args.rounds, calls)
    os.environ.pop("HOPPERKIT_FP8_GEMM_A_MULTICAST", None)
    write_calls(args.calls, calls)


def table(args) -> None:
    names, medians = medians_by_shape(args.table, args.calls)
    print("ncu kernel durations, µs (median of rounds), and B's GB/s; ratio: off / on")
    for shape, med in medians.items():
        m, n, k = (int(x) for x in shape.split("x"))
        gbs = {name: n * k / med[name] / 1e3 for name in names}
        ratio = f" | ratio {med['off'] / med['on']:.3f}" if "off" in med and "on" in med else ""
        print(f"{shape:>15}: " + " | ".join(f"{name} {med[name]:6.2f} ({gbs[name]:4.0f})" for name in names) + ratio)


def main(argv=None) -> int:
    return sweep_main(__doc__, run, table, MS, SETTINGS, "row counts M",
                      "HOPPERKIT_FP8_GEMM_A_MULTICAST values (auto: unset)", argv)


if __name__ == "__main__":
    sys.exit(main())
