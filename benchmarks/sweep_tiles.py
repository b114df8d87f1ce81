"""Every compiled kernel (and split-K counts 2-4) of the dense GEMMs on each shape, against the
heuristic's own choice and the cuBLAS call a user would otherwise make: the measurement behind the
tile choices in ``csrc/gemm/heuristics.h`` away from the issue's benchmark M values.

  python benchmarks/sweep_tiles.py --kind bf16 --ms 192,512,2048 [--nk 2112x7168,...] [--json FILE]
  python benchmarks/sweep_tiles.py --kind fp8 --shapes 256x2112x7168,512x576x7168 [--settings 128x64,...] ...
  python benchmarks/sweep_tiles.py --kind fp8 --list     (the settings and their knobs; no GPU needed)

The configurations come from the build's own list (``torch.ops.hopperkit._gemm_instantiations``), so
the sweep runs whatever is compiled, no more and no less. Each is forced through the kernels' tuning
knobs (``HOPPERKIT_BF16_GEMM_CONFIG`` / ``HOPPERKIT_BF16_GEMM_SPLITS``, ``HOPPERKIT_FP8_GEMM_CONFIG``
/ ``HOPPERKIT_FP8_GEMM_SPLITS`` / ``HOPPERKIT_FP8_GEMM_A_MULTICAST``), set inside the timed call (the
knobs are read per call). A configuration that the op refuses for a shape
(a split count that does not divide the work, say) is left out of that row. Every result is first
checked against an FP32 product (a knob must never change the answer), then all configurations of a
shape, ``auto`` (no knob) and the peer are timed in turns in one loop, L2 flushed before each call
(``hopperkit.testing.bench_interleaved``), and the median µs printed; ``best`` names the fastest
forced configuration, ``auto/best`` and ``peer/auto`` compare the heuristic with it and with the peer.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Callable, Dict, List, Optional, Sequence, Tuple

NK = ((2112, 7168), (576, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048))

# The knobs a setting may set; every call clears them all first, so that one setting never leaks into
# the next.
KNOBS = ("HOPPERKIT_BF16_GEMM_CONFIG", "HOPPERKIT_BF16_GEMM_SPLITS", "HOPPERKIT_FP8_GEMM_A_MULTICAST",
         "HOPPERKIT_FP8_GEMM_CONFIG", "HOPPERKIT_FP8_GEMM_SPLITS")
# Split-K counts tried on every tile that runs split-K (the FP8 dense tiles without clusters, the BF16
# split_k instantiations); a count the op refuses for a shape is left out of that row.
SPLITS = (2, 3, 4)


def _instantiations(family: str) -> List[Dict[str, str]]:
    """The build's instantiations of a GEMM family, one dict of key → value per compiled kernel."""
    import torch

    import hopperkit  # noqa: F401  (loads the extension that registers the op)

    return [dict(field.split("=", 1) for field in line.split())
            for line in torch.ops.hopperkit._gemm_instantiations(family)]


def fp8_settings(lines: Sequence[Dict[str, str]]) -> Dict[str, Dict[str, str]]:
    """name → knob settings, one per compiled dense FP8 1d2d kernel, and the split counts of the tiles
    without clusters. Names: BLOCK_MxBLOCK_N, then `c2` (B shared by a CTA pair), `a` (A shared),
    `b1` (one staging box), `sN` (N K splits). Staging and A multicast are forced as well, so that each
    name runs exactly its kernel, never the heuristic's variant of the tile."""
    settings: Dict[str, Dict[str, str]] = {}
    for e in lines:
        if e["kind"] != "dense":
            continue
        bm, bn, cm, cn, one_box = (int(e[key]) for key in ("block_m", "block_n", "cluster_m", "cluster_n", "one_box"))
        name = f"{bm}x{bn}" + ("c2" if cm == 2 else "") + ("a" if cn == 2 else "") + ("b1" if one_box else "")
        env = {"HOPPERKIT_FP8_GEMM_CONFIG": f"{bm},{bn},{cm},{one_box}",
               "HOPPERKIT_FP8_GEMM_A_MULTICAST": "on" if cn == 2 else "off"}
        settings[name] = env
        if cm == 1 and cn == 1 and not one_box:
            for s in SPLITS:
                settings[f"{name}s{s}"] = dict(env, HOPPERKIT_FP8_GEMM_SPLITS=str(s))
    return settings


def bf16_settings(lines: Sequence[Dict[str, str]]) -> Dict[str, Dict[str, str]]:
    """name → knob settings, one per compiled BF16 tile of K-major operands (BLOCK_MxBLOCK_N) and one
    per split count of the tiles that compile split-K (`sN`). The swapped decode kernels have a sweep
    of their own (sweep_bf16_swap.py)."""
    settings: Dict[str, Dict[str, str]] = {}
    for e in lines:
        if e["major_a"] != "k" or e["major_b"] != "k" or e["variant"] not in ("general", "split_k"):
            continue
        name = f"{e['block_m']}x{e['block_n']}"
        env = {"HOPPERKIT_BF16_GEMM_CONFIG": f"{e['block_m']},{e['block_n']}"}
        if e["variant"] == "general":
            settings[name] = env
        else:
            for s in SPLITS:
                settings[f"{name}s{s}"] = dict(env, HOPPERKIT_BF16_GEMM_SPLITS=str(s))
    return settings


def compiled_settings(kind: str) -> Dict[str, Dict[str, str]]:
    """Every configuration this build can run for `kind`, from its instantiation list."""
    return bf16_settings(_instantiations("bf16")) if kind == "bf16" else fp8_settings(_instantiations("fp8_1d2d"))


def _with_knobs(env: Dict[str, str], fn: Callable[[], None]) -> Callable[[], None]:
    def call() -> None:
        for key in KNOBS:
            os.environ.pop(key, None)
        os.environ.update(env)
        try:
            fn()
        finally:
            for key in env:
                os.environ.pop(key, None)
    return call


def _shape_calls(kind: str, m: int, n: int, k: int) -> Tuple[Callable[[], None], Callable[[], object], object, object]:
    """(our call writing d, the peer's call, d, the FP32 reference)."""
    import torch

    import hopperkit
    from bench_gemm import cublas_blockwise, cublas_sfa, cublas_sfb

    dev = torch.device("cuda")
    a = torch.randn(m, k, dtype=torch.bfloat16, device=dev)
    b = torch.randn(n, k, dtype=torch.bfloat16, device=dev)
    d = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
    if kind == "bf16":
        d_peer = torch.empty_like(d)
        return (lambda: hopperkit.bf16_gemm_nt(a, b, d), lambda: torch.mm(a, b.t(), out=d_peer), d,
                a.float() @ b.float().t())
    a_fp8, sfa = hopperkit.per_token_cast_to_fp8(a)
    b_fp8, sfb = hopperkit.per_block_cast_to_fp8(b)
    sa, sb = cublas_sfa(sfa), cublas_sfb(sfb)
    return (lambda: hopperkit.fp8_gemm_nt((a_fp8, sfa), (b_fp8, sfb), d), lambda: cublas_blockwise(a_fp8, sa, b_fp8, sb),
            d, a.float() @ b.float().t())


def sweep(kind: str, shapes: Sequence[Tuple[int, int, int]], iters: int,
          settings: Dict[str, Dict[str, str]]) -> List[dict]:
    import torch

    from hopperkit.testing import bench_interleaved, calc_diff

    tol = 1e-5 if kind == "bf16" else 1e-3
    rows = []
    for m, n, k in shapes:
        ours, peer, d, ref = _shape_calls(kind, m, n, k)
        fns: Dict[str, Callable[[], object]] = {}
        for name, env in [("auto", {})] + list(settings.items()):
            call = _with_knobs(env, ours)
            d.fill_(float("nan"))
            try:
                call()
                torch.cuda.synchronize()
            except (RuntimeError, ValueError) as e:  # a configuration the op refuses for this shape
                print(f"  {m}x{n}x{k} {name}: refused ({str(e).splitlines()[0][:90]})", file=sys.stderr)
                continue
            diff = calc_diff(d, ref)
            if not diff < tol:
                raise AssertionError(f"{m}x{n}x{k} {name}: calc_diff {diff:.2e} >= {tol:g}")
            fns[name] = call
        try:
            peer()
        except RuntimeError as e:  # cuBLAS blockwise refuses some N (not a multiple of 128)
            print(f"  {m}x{n}x{k} peer: refused ({str(e).splitlines()[0][:90]})", file=sys.stderr)
            peer = None
        if peer is not None:
            fns["peer"] = peer
        times = {name: t["median_us"] for name, t in bench_interleaved(fns, iters=iters).items()}
        forced = {name: us for name, us in times.items() if name not in ("auto", "peer")}
        best = min(forced, key=forced.get)
        rows.append({"m": m, "n": n, "k": k, "us": times, "best": best})
        print(f"{m}x{n}x{k}: auto {times['auto']:.1f}, best {best} {times[best]:.1f}, peer {times.get('peer')}",
              file=sys.stderr)
        torch.cuda.empty_cache()
    return rows


def print_table(kind: str, rows: List[dict], names: Sequence[str]) -> None:
    peer = "torch.mm" if kind == "bf16" else "cuBLAS blockwise"
    print(f"{kind} dense GEMM, µs (median, L2 flushed, in turns); peer: {peer}")
    header = (f"{'M':>5} {'N':>6} {'K':>6} | {'auto':>7} " + " ".join(f"{n:>9}" for n in names)
              + f" | {'peer':>7} | {'best':>9} {'auto/best':>9} {'peer/auto':>9}")
    print(header)
    print("-" * len(header))
    for r in rows:
        t = r["us"]
        cells = " ".join(f"{t[n]:>9.1f}" if n in t else f"{'—':>9}" for n in names)
        peer_cells = (f"{t['peer']:>7.1f}", f"{t['peer'] / t['auto']:>9.2f}") if "peer" in t else (f"{'—':>7}", f"{'—':>9}")
        print(f"{r['m']:>5} {r['n']:>6} {r['k']:>6} | {t['auto']:>7.1f} {cells} | {peer_cells[0]} | {r['best']:>9} "
              f"{t['auto'] / t[r['best']]:>9.2f} {peer_cells[1]}")


def _ints(text: str) -> Tuple[int, ...]:
    return tuple(int(t) for t in text.split(",") if t.strip())


def _sizes(count: int) -> Callable[[str], Tuple[Tuple[int, ...], ...]]:
    """An argparse type: comma-separated entries of `count` integers joined by x (NxK, MxNxK)."""
    def parse(text: str) -> Tuple[Tuple[int, ...], ...]:
        entries = tuple(tuple(int(v) for v in t.split("x")) for t in text.split(",") if t.strip())
        if not entries or any(len(e) != count for e in entries):
            raise argparse.ArgumentTypeError(f"expected entries of {count} sizes joined by x, got {text!r}")
        return entries
    return parse


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", choices=("bf16", "fp8"), required=True)
    ap.add_argument("--ms", type=_ints, metavar="M1,M2,...", help="each M on every --nk pair")
    ap.add_argument("--nk", type=_sizes(2), default=NK, metavar="NxK,...", help="default: the benchmark's seven (N, K)")
    ap.add_argument("--shapes", type=_sizes(3), default=(), metavar="MxNxK,...", help="these shapes too")
    ap.add_argument("--iters", type=int, default=15, help="timed rounds per shape (default 15)")
    ap.add_argument("--settings", metavar="NAME,...", help="only these forced configurations (default: every one)")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--list", action="store_true", help="print the settings and their knobs, and exit")
    args = ap.parse_args(argv)
    known = compiled_settings(args.kind)
    if args.list:
        for name, env in known.items():
            print(f"{name:>12}  " + " ".join(f"{key}={value}" for key, value in env.items()))
        return 0
    names = [t for t in args.settings.split(",") if t.strip()] if args.settings else list(known)
    if not names or any(name not in known for name in names):
        ap.error(f"--settings takes names among {','.join(known)}")
    import torch

    if not torch.cuda.is_available():
        print("sweep_tiles: needs a CUDA device", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    from hopperkit.testing import warm_up_gpu

    warm_up_gpu()
    shapes = [(m, n, k) for n, k in args.nk for m in args.ms or ()] + list(args.shapes)
    if not shapes:
        ap.error("no shapes: give --ms and/or --shapes")
    rows = sweep(args.kind, shapes, args.iters, {name: known[name] for name in names})
    print_table(args.kind, rows, names)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
