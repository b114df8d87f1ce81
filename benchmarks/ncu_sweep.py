"""The mechanics shared by the ncu sweeps (``sweep_bf16_swap.py``, ``sweep_fp8_a_multicast.py``): call
each setting of a shape in turns inside cudaProfilerStart/Stop, recording the sequence of calls, then
map the kernel durations of ``ncu --csv --page raw`` onto that sequence.

A sweep runs under

  ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum --csv --page raw ...

so that only the calls between start and stop are profiled; ncu flushes the caches before each kernel
(its default ``--cache-control all``).
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import statistics
from typing import Callable, Dict, List, Optional, Sequence, Tuple

_TO_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}


def profile_in_turns(shape: str, fns: Dict[str, Callable[[], None]], rounds: int, calls: List[List[str]]) -> None:
    """Calls every function of ``fns`` once per round, in turns, under the profiler, and appends
    ``[shape, name]`` to ``calls`` for each call."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for _ in range(rounds):
        for name, fn in fns.items():
            fn()
            calls.append([shape, name])
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def durations_by_call(csv_path: str, calls: List[List[str]],
                      trailing: Callable[[str], bool] = lambda kernel: False) -> Dict[Tuple[str, str], List[float]]:
    """The µs of each (shape, name) call of ``calls``, from ncu's raw CSV: one kernel per call, plus the
    kernels right after it whose name ``trailing`` accepts (e.g. cuBLAS's split-K reduction)."""
    with open(csv_path) as f:
        rows = list(csv.reader(line for line in f if line.startswith('"')))
    col = {h: i for i, h in enumerate(rows[0])}
    metric = col["gpu__time_duration.sum"]
    to_us = _TO_US[rows[1][metric]]
    kernels = [(r[col["Kernel Name"]], float(r[metric].replace(",", "")) * to_us) for r in rows[2:]]
    durations: Dict[Tuple[str, str], List[float]] = collections.defaultdict(list)
    i = 0
    for shape, name in calls:
        if i >= len(kernels):
            raise SystemExit(f"{len(kernels)} kernels for {len(calls)} calls: too few")
        total = kernels[i][1]
        i += 1
        while i < len(kernels) and trailing(kernels[i][0]):
            total += kernels[i][1]
            i += 1
        durations[(shape, name)].append(total)
    if i != len(kernels):
        raise SystemExit(f"{len(kernels)} kernels for {len(calls)} calls: {len(kernels) - i} left over")
    return durations


def write_calls(path: str, calls: List[List[str]]) -> None:
    """Saves the call sequence of a run, for the table mode."""
    with open(path, "w") as f:
        json.dump(calls, f)


def medians_by_shape(csv_path: str, calls_path: str, trailing: Callable[[str], bool] = lambda kernel: False
                     ) -> Tuple[List[str], Dict[str, Dict[str, float]]]:
    """The table mode's numbers: the settings in call order, and for each shape (in call order) the
    median µs of each setting over the rounds (``durations_by_call``)."""
    with open(calls_path) as f:
        calls = json.load(f)
    durations = durations_by_call(csv_path, calls, trailing)
    names = list(dict.fromkeys(name for _, name in calls))
    return names, {shape: {name: statistics.median(durations[(shape, name)]) for name in names}
                   for shape in dict.fromkeys(shape for shape, _ in calls)}


def sweep_main(doc: str, run: Callable[[argparse.Namespace], None], table: Callable[[argparse.Namespace], None],
               ms: Sequence[int], settings: Sequence[str], ms_help: str, settings_help: str,
               argv: Optional[Sequence[str]] = None) -> int:
    """The sweeps' command line: ``--calls`` with ``--table`` prints the medians (``table``), without it
    runs the sweep under the profiler (``run``) over ``--ms``, ``--settings`` and ``--rounds``."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", required=True, help="the call sequence: written by a run, read by --table")
    ap.add_argument("--table", help="ncu's --csv --page raw output of a run: print the medians")
    ap.add_argument("--ms", type=int, nargs="+", default=list(ms), help=ms_help)
    ap.add_argument("--settings", nargs="+", default=list(settings), help=settings_help)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    if args.table:
        table(args)
    else:
        run(args)
    return 0
