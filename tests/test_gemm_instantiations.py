"""The GEMM instantiations the build has against the configurations the GPU tests force.

Every compiled instantiation must be forced by a GPU test (the heuristics reach only some of them
on the test shapes, and the tuning knobs reach all), and every configuration a GPU test forces must
be compiled. The build's list comes from the dispatch tables that launch the kernels
(``torch.ops.hopperkit._gemm_instantiations``, ``csrc/gemm/instantiations.h``): host code, so this
runs on the CPU, and CI flags a new instantiation without a test, or a test list naming a removed
one, before any GPU run.
"""

from __future__ import annotations

import pytest
import torch

from hopperkit import _ops

import test_bf16_gemm_gpu as bf16_tests
import test_fp8_1d1d_gpu as fp8_1d1d_tests
import test_fp8_gemm_gpu as fp8_tests
import test_grouped_gemm_gpu as grouped_tests

pytestmark = pytest.mark.skipif(not _ops.EXTENSION_LOADED, reason="needs hopperkit._C (the build's dispatch tables)")


def compiled(family: str) -> set[tuple]:
    """The build's instantiations of ``family`` as tuples of their fields' values, in field order."""
    out = set()
    for line in torch.ops.hopperkit._gemm_instantiations(family):
        fields = dict(kv.split("=", 1) for kv in line.split())
        out.add(tuple(int(v) if v.isdigit() else v for v in fields.values()))
    return out


def knob_ints(config: str) -> tuple[int, ...]:
    return tuple(int(v) for v in config.split(","))


def assert_same(family: str, built: set[tuple], forced: set[tuple], by: str = "GPU test") -> None:
    untested, missing = sorted(built - forced), sorted(forced - built)
    assert not untested and not missing, (
        f"{family}: compiled but forced by no {by}: {untested}; forced by a {by} but not compiled: {missing}")


def test_fp8_1d2d():
    # (kind, BLOCK_M, BLOCK_N, cluster_m, cluster_n, one-box staging)
    built = compiled("fp8_1d2d")
    forced = {("dense", bm, bn, cm, 1, ow) for bm, bn, cm, ow in fp8_tests.CONFIGS_1D2D}
    forced |= {("dense", *knob_ints(config)[:2], 1, 2, 0) for config, *_ in fp8_tests.A_MULTICAST_CASES}
    forced |= {("masked", bm, bn, 1, 1, ow) for bm, bn, _, ow in map(knob_ints, grouped_tests.MASKED_CONFIGS)}
    forced |= {("halves", 256, 128, 1, 2 if a_multicast == "on" else 1, 0)
               for _, _, a_multicast in grouped_tests.HALVES_CASES}
    assert_same("fp8_1d2d", built, forced)
    # The contiguous layout also runs the dense tiles of at most 128 rows without multicast.
    assert_same("fp8_1d2d on the contiguous layout",
                {i for i in built if i[0] == "dense" and i[1] <= 128 and i[3:5] == (1, 1)},
                {("dense", bm, bn, cm, 1, ow) for bm, bn, cm, ow in map(knob_ints, grouped_tests.CONTIGUOUS_CONFIGS)})


def test_fp8_1d1d():
    assert_same("fp8_1d1d", compiled("fp8_1d1d"), set(fp8_1d1d_tests.CONFIGS))


def test_bf16():
    # (variant, major of A, major of B, BLOCK_M, BLOCK_N)
    built = compiled("bf16")
    forced = {("general", a, b, bm, bn) for bm, bn in bf16_tests.TILES for a, b in bf16_tests.MAJORS}
    forced |= {("general", "k", "k", bm, bn) for bm, bn in bf16_tests.ODD_WIDTHS + (bf16_tests.NARROW_TILE,)}
    forced |= {("masked", "k", "k", bm, bn) for bm, bn in bf16_tests.TILES}  # test_masked_large_m_max_few_rows
    forced |= {("k_grouped", "mn", "mn", bm, bn) for bm, bn in bf16_tests.TILES}  # test_k_grouped_every_tile
    forced |= {("split_k", "k", "k", *knob_ints(case[3])) for case in bf16_tests.SPLIT_K_CASES}
    forced |= {("swap_ab", "k", "k", 64, tokens) for tokens, *_ in bf16_tests.SWAP_AB_FORCED_CASES}
    assert_same("bf16", built, forced)
    # The contiguous layout runs the normal layout's instantiations of K-major A and B.
    assert_same("bf16 on the contiguous layout", {i for i in built if i[:3] == ("general", "k", "k")},
                {("general", "k", "k", bm, bn) for bm, bn in bf16_tests.CONTIGUOUS_TILES})


def test_unknown_family_is_refused():
    with pytest.raises(ValueError, match="family must be fp8_1d2d, fp8_1d1d or bf16"):
        torch.ops.hopperkit._gemm_instantiations("fp8")


def _sweep_tiles():
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "sweep_tiles.py")
    spec = importlib.util.spec_from_file_location("sweep_tiles", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sweep_tiles_runs_every_dense_kernel():
    """benchmarks/sweep_tiles.py takes its settings from the build's list: every dense FP8 1d2d kernel
    and every K-major BF16 tile is one setting, named once, forced through knobs that name exactly it
    (tile, clusters, staging, A multicast), and the split-K settings stay on the kernels that split."""
    sweep = _sweep_tiles()
    fp8 = sweep.compiled_settings("fp8")
    unsplit = {name: env for name, env in fp8.items() if "HOPPERKIT_FP8_GEMM_SPLITS" not in env}
    forced = set()
    for env in unsplit.values():
        bm, bn, cm, one_box = knob_ints(env["HOPPERKIT_FP8_GEMM_CONFIG"])
        forced.add(("dense", bm, bn, cm, 2 if env["HOPPERKIT_FP8_GEMM_A_MULTICAST"] == "on" else 1, one_box))
    assert len(forced) == len(unsplit)
    assert_same("fp8_1d2d dense", {i for i in compiled("fp8_1d2d") if i[0] == "dense"}, forced, by="sweep_tiles.py setting")
    for name, env in fp8.items():
        if "HOPPERKIT_FP8_GEMM_SPLITS" in env:
            base = unsplit[name.rsplit("s", 1)[0]]
            assert env == dict(base, HOPPERKIT_FP8_GEMM_SPLITS=name.rsplit("s", 1)[1]), name
            assert base["HOPPERKIT_FP8_GEMM_A_MULTICAST"] == "off" and knob_ints(base["HOPPERKIT_FP8_GEMM_CONFIG"])[2:] == (1, 0)

    bf16 = sweep.compiled_settings("bf16")
    tiles = {knob_ints(env["HOPPERKIT_BF16_GEMM_CONFIG"]) for env in bf16.values() if "HOPPERKIT_BF16_GEMM_SPLITS" not in env}
    split_tiles = {knob_ints(env["HOPPERKIT_BF16_GEMM_CONFIG"]) for env in bf16.values() if "HOPPERKIT_BF16_GEMM_SPLITS" in env}
    assert tiles == {(bm, bn) for variant, ma, mb, bm, bn in compiled("bf16") if (variant, ma, mb) == ("general", "k", "k")}
    assert split_tiles == {(bm, bn) for variant, _, _, bm, bn in compiled("bf16") if variant == "split_k"}
    assert set(sweep.KNOBS) >= {key for env in list(fp8.values()) + list(bf16.values()) for key in env}
