"""Times the same calls under several builds of the extension, in alternating processes: how a kernel
change is measured against its base (one card, one run, ratios rather than absolute numbers). The
extension is abi3 and builds without a GPU, so the variants can be compiled anywhere and carried:

  python benchmarks/ab_builds.py --build base=/tmp/base/_C.abi3.so --build new=python/hopperkit/_C.abi3.so \\
      --case fp8:4096x7168x16384 --case fp8:128x7168x16384 --case mla:128x1x128x8192 [--rounds 3] [--json F]

A build may also be one extension under a tuning knob (``--build-env NAME KEY=VALUE``, e.g. a forced
tile configuration against the heuristic's, ``HOPPERKIT_FP8_GEMM_CONFIG=256,128,1``): the knob is set
in that build's processes only.

Each round runs every build once, each in a process of its own (a copy of ``python/hopperkit`` with
that build's extension, first on PYTHONPATH; the order of the builds alternates from round to
round, so that neither always runs on a warmer card). A process checks every case's result against
the PyTorch reference (``calc_diff`` below ``--max-diff``), then times each case with L2 flushed
before every call (``hopperkit.testing.bench``, medians of ``--iters`` calls; ``--flush`` zeroes
L2, leaving dirty lines, or reads it clean, as ``hopperkit.testing.L2Flusher``). The report gives, per
case and build, the median over rounds of the per-process medians, their range, and the ratio to the
first build (> 1: faster than it).

Cases:
  fp8:MxNxK            fp8_gemm_nt, 1d2d recipe (BF16 D)
  fp8w:MxNxK           fp8_gemm_nt, 1d1d recipe (the weight gradient's): FP32 D accumulated in place (C = D)
  bf16:MxNxK           bf16_gemm_nt, K-major operands, BF16 D
  fp8cont:GxRxNxK      m_grouped_fp8_gemm_nt_contiguous, G experts of R rows each
  fp8contvar:GxRxNxK   the same with uneven routing: expert g gets round(R·U(0.25, 1.75)) rows (seeded,
                       the same in every process), each segment padded to the layout's alignment
  fp8masked:GxMxNxK    m_grouped_fp8_gemm_nt_masked, every group at M rows (M_max = M)
  mla:BxSQxHQxSK       flash_mla_with_kvcache, BF16 cache, h_k = 1, causal, every request at SK tokens
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from typing import Callable, Dict, List, Sequence, Tuple

KINDS = {"fp8": 3, "fp8w": 3, "bf16": 3, "fp8cont": 4, "fp8contvar": 4, "fp8masked": 4, "mla": 4}
RESULT_TAG = "AB_BUILDS_RESULT "
PACKAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "hopperkit")


def parse_case(spec: str) -> Tuple[str, Tuple[int, ...]]:
    """``kind:AxBxC`` → (kind, dims), checked against KINDS."""
    kind, _, dims = spec.partition(":")
    if kind not in KINDS:
        raise ValueError(f"case {spec!r}: the kind must be one of {sorted(KINDS)}")
    try:
        values = tuple(int(x) for x in dims.split("x"))
    except ValueError:
        raise ValueError(f"case {spec!r}: dims must be integers joined by 'x'") from None
    if len(values) != KINDS[kind] or min(values) < 1:
        raise ValueError(f"case {spec!r}: {kind} takes {KINDS[kind]} positive dims")
    return kind, values


def parse_build(spec: str) -> Tuple[str, str]:
    name, sep, path = spec.partition("=")
    if not sep or not name or not path:
        raise ValueError(f"build {spec!r}: expected NAME=PATH_TO_EXTENSION")
    if not os.path.isfile(path):
        raise ValueError(f"build {spec!r}: no file at {path}")
    return name, os.path.abspath(path)


def summarize(builds: Sequence[str], cases: Sequence[str], runs: List[Dict[str, dict]]) -> List[dict]:
    """Rows of the report from ``runs`` (one dict per process: build, case → {us, diff})."""
    rows = []
    for case in cases:
        row: dict = {"case": case}
        base = None
        for build in builds:
            times = [r["cases"][case]["us"] for r in runs if r["build"] == build]
            diffs = [r["cases"][case]["diff"] for r in runs if r["build"] == build]
            median = statistics.median(times)
            base = median if base is None else base
            row[build] = {"us": median, "min_us": min(times), "max_us": max(times), "ratio": base / median,
                          "diff": max(diffs), "runs": len(times)}
        rows.append(row)
    return rows


def format_report(builds: Sequence[str], rows: List[dict]) -> str:
    width = max(len(r["case"]) for r in rows)
    head = f"{'case':<{width}}" + "".join(f" | {b + ' µs (range)':>26} | {'×' + builds[0]:>8}" for b in builds)
    lines = [head, "-" * len(head)]
    for r in rows:
        cells = "".join(f" | {r[b]['us']:>9.1f} ({r[b]['min_us']:>6.1f}-{r[b]['max_us']:>6.1f})"
                        f" | {r[b]['ratio']:>8.3f}" for b in builds)
        lines.append(f"{r['case']:<{width}}{cells}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# worker: one build, every case
# --------------------------------------------------------------------------------------------------


def _case_call(kind: str, dims: Tuple[int, ...]) -> Tuple[Callable[[], object], Callable[[], float]]:
    """(the timed call, the check of its result: calc_diff against the reference)."""
    import torch

    import hopperkit
    from hopperkit.reference import gemm as ref_gemm
    from hopperkit.reference import mla as ref_mla
    from hopperkit.testing import calc_diff, contiguous_m_indices, paged_decode_inputs

    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=dev)

    if kind == "fp8":
        m, n, k = dims
        a, sfa = hopperkit.per_token_cast_to_fp8(randn(m, k).bfloat16())
        b, sfb = hopperkit.per_block_cast_to_fp8(randn(n, k).bfloat16())
        d = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
        return (lambda: hopperkit.fp8_gemm_nt((a, sfa), (b, sfb), d),
                lambda: calc_diff(d, ref_gemm.fp8_gemm_nt(a, sfa, b, sfb, out_dtype=torch.float32)))
    if kind == "fp8w":
        m, n, k = dims
        a, sfa = hopperkit.per_token_cast_to_fp8(randn(m, k).bfloat16())
        b, sfb = hopperkit.per_token_cast_to_fp8(randn(n, k).bfloat16())
        c0 = randn(m, n)
        d = c0.clone()

        def check_w():
            # The first call's result (from C = c0); the timed calls go on accumulating into D.
            d.copy_(c0)
            hopperkit.fp8_gemm_nt((a, sfa), (b, sfb), d, c=d, recipe=(1, 1, 128))
            return calc_diff(d, ref_gemm.fp8_gemm_nt(a, sfa, b, sfb, c0, recipe=(1, 1, 128), out_dtype=torch.float32))

        return (lambda: hopperkit.fp8_gemm_nt((a, sfa), (b, sfb), d, c=d, recipe=(1, 1, 128))), check_w
    if kind == "bf16":
        m, n, k = dims
        a, b = randn(m, k).bfloat16(), randn(n, k).bfloat16()
        d = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
        return (lambda: hopperkit.bf16_gemm_nt(a, b, d),
                lambda: calc_diff(d, ref_gemm.bf16_gemm_nt(a, b, out_dtype=torch.float32)))
    if kind in ("fp8cont", "fp8contvar"):
        g, rows, n, k = dims
        b, sfb = zip(*(hopperkit.per_block_cast_to_fp8(randn(n, k).bfloat16()) for _ in range(g)))
        b, sfb = torch.stack(b), torch.stack(sfb)
        align = hopperkit.get_mk_alignment_for_contiguous_layout()
        if kind == "fp8cont":
            counts = [rows] * g
        else:
            uniform = torch.rand(g, generator=torch.Generator().manual_seed(1))
            counts = [round(rows * (0.25 + 1.5 * u)) for u in uniform.tolist()]
        ids, _ = contiguous_m_indices(list(enumerate(counts)), align)
        m_indices = ids.to(dev)
        a, sfa = hopperkit.per_token_cast_to_fp8(randn(ids.numel(), k).bfloat16())
        d = torch.empty(ids.numel(), n, dtype=torch.bfloat16, device=dev)
        return (lambda: hopperkit.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, m_indices),
                lambda: calc_diff(d, ref_gemm.m_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, m_indices)))
    if kind == "fp8masked":
        g, m, n, k = dims
        a, sfa = zip(*(hopperkit.per_token_cast_to_fp8(randn(m, k).bfloat16()) for _ in range(g)))
        a, sfa = torch.stack(a), hopperkit.get_mn_major_tma_aligned_tensor(torch.stack(sfa))
        b, sfb = zip(*(hopperkit.per_block_cast_to_fp8(randn(n, k).bfloat16()) for _ in range(g)))
        b, sfb = torch.stack(b), torch.stack(sfb)
        masked_m = torch.full((g,), m, dtype=torch.int32, device=dev)
        d = torch.empty(g, m, n, dtype=torch.bfloat16, device=dev)
        return (lambda: hopperkit.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, m),
                lambda: calc_diff(d, ref_gemm.m_grouped_fp8_gemm_nt_masked(a, sfa, b, sfb, masked_m)))
    b, s_q, h_q, s_k = dims
    seqlens = torch.full((b,), s_k, dtype=torch.int32, device=dev)
    q, k_cache, block_table = paged_decode_inputs(seqlens, s_q, h_q, generator=torch.Generator().manual_seed(0))
    tsm, num_splits = hopperkit.get_mla_metadata(seqlens, s_q * h_q, 1)
    out: dict = {}

    def call():
        out["o"] = hopperkit.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, 512, tsm, num_splits, causal=True)[0]

    def check():
        call()
        ref = ref_mla.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, head_dim_v=512, causal=True)[0]
        return calc_diff(out["o"], ref)

    return call, check


def worker(cases: Sequence[str], iters: int, expected_extension: str, flush: str = "zero") -> dict:
    import torch

    import hopperkit
    from hopperkit import _ops
    from hopperkit.testing import bench, warm_up_gpu

    # The copy on PYTHONPATH must be what loaded, with its own extension: an installed hopperkit
    # found first would time the same build under every name.
    loaded = os.path.realpath(os.path.dirname(hopperkit.__file__))
    if not _ops.EXTENSION_LOADED or loaded != os.path.realpath(os.path.dirname(expected_extension)):
        raise SystemExit(f"ab_builds: loaded hopperkit from {loaded} (extension loaded: {_ops.EXTENSION_LOADED}), "
                         f"expected the copy at {os.path.dirname(expected_extension)}")
    warm_up_gpu()
    result = {}
    for case in cases:
        call, check = _case_call(*parse_case(case))
        call()
        torch.cuda.synchronize()
        diff = check()
        result[case] = {"us": bench(call, iters=iters, flush_mode=flush)["median_us"], "diff": diff}
        del call, check
        torch.cuda.empty_cache()
    return {"cases": result, "build_info": torch.ops.hopperkit.build_info()}


# --------------------------------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------------------------------


def _package_copy(root: str, name: str, extension: str) -> str:
    """``root/name/hopperkit``: the package's Python files with ``extension`` as its _C."""
    target = os.path.join(root, name, "hopperkit")
    shutil.copytree(PACKAGE, target, ignore=shutil.ignore_patterns("_C*.so", "__pycache__"))
    shutil.copy2(extension, os.path.join(target, "_C.abi3.so"))
    return target


def main(argv: Sequence[str] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", action="append", default=[], help="NAME=PATH of an extension (.so)")
    parser.add_argument("--build-env", action="append", nargs=2, default=[], metavar=("NAME", "KEY=VALUE"),
                        help="an environment variable for build NAME's processes (a tuning knob)")
    parser.add_argument("--case", action="append", default=[], help="kind:dims (see the module docstring)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iters", type=int, default=30)
    # hopperkit.testing.FLUSH_MODES, spelled out: this process does not import the package (each
    # worker imports its own copy).
    parser.add_argument("--flush", choices=("zero", "read"), default="zero",
                        help="how L2 is flushed before each timed call (hopperkit.testing.L2Flusher): zero leaves "
                             "dirty lines whose write-back shares HBM with the call, read clean ones")
    parser.add_argument("--max-diff", type=float, default=1e-5,
                        help="calc_diff bound against the reference on the same inputs (default 1e-5)")
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker is not None:
        print(RESULT_TAG + json.dumps(worker(args.case, args.iters, args.worker, args.flush)), flush=True)
        return 0

    if not args.build or not args.case:
        parser.error("give at least one --build and one --case")
    try:
        builds = [parse_build(b) for b in args.build]
        for case in args.case:
            parse_case(case)
    except ValueError as e:
        parser.error(str(e))
    names = [name for name, _ in builds]
    if len(set(names)) != len(names):
        parser.error("build names must differ")
    knobs: Dict[str, Dict[str, str]] = {name: {} for name in names}
    for name, assignment in args.build_env:
        key, sep, value = assignment.partition("=")
        if name not in knobs or not sep or not key:
            parser.error(f"--build-env {name} {assignment}: expected a build name and KEY=VALUE")
        knobs[name][key] = value
    runs: List[dict] = []
    with tempfile.TemporaryDirectory(prefix="ab_builds_") as root:
        copies = {name: _package_copy(root, name, path) for name, path in builds}
        for round_index in range(args.rounds):
            order = names if round_index % 2 == 0 else names[::-1]
            for name in order:
                env = dict(os.environ, **knobs[name], PYTHONPATH=os.pathsep.join(
                    [os.path.dirname(copies[name])] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
                cmd = [sys.executable, os.path.abspath(__file__), "--worker", os.path.join(copies[name], "_C.abi3.so"),
                       "--iters", str(args.iters), "--flush", args.flush] + [f"--case={c}" for c in args.case]
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
                lines = [l for l in proc.stdout.splitlines() if l.startswith(RESULT_TAG)]
                if proc.returncode != 0 or not lines:
                    sys.stderr.write(proc.stdout + proc.stderr)
                    raise SystemExit(f"ab_builds: build {name} failed in round {round_index + 1}")
                run = json.loads(lines[-1][len(RESULT_TAG):])
                run["build"] = name
                runs.append(run)
                print(f"round {round_index + 1} {name}: " +
                      ", ".join(f"{c} {r['us']:.1f} µs" for c, r in run["cases"].items()), flush=True)
    rows = summarize(names, args.case, runs)
    print()
    print(format_report(names, rows))
    failed = [(r["case"], b) for r in rows for b in names if not r[b]["diff"] < args.max_diff]
    for case, build in failed:
        print(f"FAIL {build} {case}: calc_diff {max(r[build]['diff'] for r in rows if r['case'] == case):.3g} "
              f">= {args.max_diff}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"builds": dict(builds), "knobs": knobs, "rows": rows, "runs": runs}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
