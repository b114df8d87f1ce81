"""Upstream call signatures: every GEMM, cast and layout helper takes the parameters DeepGEMM takes,
in its order and with its defaults, and ``flash_mla_with_kvcache`` FlashMLA's, so that serving code
calls hopperkit as it calls them (vLLM, for one, passes ``disable_ue8m0_cast`` on every GEMM call).
The options that only steer DeepGEMM's JIT or its SM100 kernels change nothing here; the results
are compared bit for bit. Runs on the CPU, and on the GPU of an SM90 machine."""

from __future__ import annotations

import inspect
import math

import pytest
import torch

import hopperkit as hk

_E = inspect.Parameter.empty

# (name, [(parameter, default)]) as DeepGEMM registers them (csrc/apis/gemm.hpp, its pybind
# definitions; reference/deepgemm.md §1), SM100-only parameters included where DeepGEMM's SM90
# build accepts them too. _E: required.
_FP8_OPTIONS = [("recipe", None), ("recipe_a", None), ("recipe_b", None)]
DEEPGEMM_SIGNATURES = {
    **{f"fp8_gemm_{l}": [("a", _E), ("b", _E), ("d", _E), ("c", None), *_FP8_OPTIONS, ("compiled_dims", dims),
                         ("disable_ue8m0_cast", False), ("alpha", None)]
       for l, dims in (("nt", "nk"), ("nn", "nk"), ("tn", "mn"), ("tt", "mn"))},
    "m_grouped_fp8_gemm_nt_contiguous": [("a", _E), ("b", _E), ("d", _E), ("grouped_layout", _E), *_FP8_OPTIONS,
                                         ("compiled_dims", "nk"), ("disable_ue8m0_cast", False),
                                         ("use_psum_layout", False), ("ensure_zero_padding", True),
                                         ("expected_m_for_psum_layout", None)],
    "m_grouped_fp8_gemm_nn_contiguous": [("a", _E), ("b", _E), ("d", _E), ("grouped_layout", _E), *_FP8_OPTIONS,
                                         ("compiled_dims", "nk"), ("disable_ue8m0_cast", False),
                                         ("use_psum_layout", False), ("ensure_zero_padding", True)],
    "m_grouped_fp8_gemm_nt_masked": [("a", _E), ("b", _E), ("d", _E), ("masked_m", _E), ("expected_m", _E),
                                     *_FP8_OPTIONS, ("compiled_dims", "nk"), ("disable_ue8m0_cast", False)],
    "k_grouped_fp8_gemm_nt_contiguous": [("a", _E), ("b", _E), ("d", _E), ("ks_cpu", _E), ("grouped_layout", _E),
                                         ("c", None), ("recipe", (1, 1, 128)), ("compiled_dims", "mn"),
                                         ("use_psum_layout", False)],
    **{f"bf16_gemm_{l}": [("a", _E), ("b", _E), ("d", _E), ("c", None), ("compiled_dims", dims), ("alpha", None)]
       for l, dims in (("nt", "nk"), ("nn", "nk"), ("tn", "mn"), ("tt", "mn"))},
    "m_grouped_bf16_gemm_nt_contiguous": [("a", _E), ("b", _E), ("d", _E), ("grouped_layout", _E),
                                          ("compiled_dims", "nk"), ("use_psum_layout", False),
                                          ("ensure_zero_padding", True), ("expected_m_for_psum_layout", None)],
    "m_grouped_bf16_gemm_nn_contiguous": [("a", _E), ("b", _E), ("d", _E), ("grouped_layout", _E),
                                          ("compiled_dims", "nk"), ("use_psum_layout", False),
                                          ("ensure_zero_padding", True)],
    "m_grouped_bf16_gemm_nt_masked": [("a", _E), ("b", _E), ("d", _E), ("masked_m", _E), ("expected_m", _E),
                                      ("compiled_dims", "nk")],
    "k_grouped_bf16_gemm_tn_contiguous": [("a", _E), ("b", _E), ("d", _E), ("ks_cpu", _E), ("grouped_layout", _E),
                                          ("c", None), ("compiled_dims", "mn"), ("use_psum_layout", False)],
}
# DeepGEMM's other names for the same functions.
DEEPGEMM_ALIASES = {
    "fp8_fp4_gemm_nt": "fp8_gemm_nt", "fp8_fp4_gemm_nn": "fp8_gemm_nn", "fp8_fp4_gemm_tn": "fp8_gemm_tn",
    "fp8_fp4_gemm_tt": "fp8_gemm_tt",
    "m_grouped_fp8_fp4_gemm_nt_contiguous": "m_grouped_fp8_gemm_nt_contiguous",
    "m_grouped_fp8_fp4_gemm_nn_contiguous": "m_grouped_fp8_gemm_nn_contiguous",
    "m_grouped_fp8_fp4_gemm_nt_masked": "m_grouped_fp8_gemm_nt_masked",
    "fp8_m_grouped_gemm_nt_masked": "m_grouped_fp8_gemm_nt_masked",
    "bf16_m_grouped_gemm_nt_masked": "m_grouped_bf16_gemm_nt_masked",
    "get_col_major_tma_aligned_tensor": "get_mn_major_tma_aligned_tensor",
    "get_m_alignment_for_contiguous_layout": "get_mk_alignment_for_contiguous_layout",
}


@pytest.fixture(params=[pytest.param("cpu"), pytest.param("cuda", marks=pytest.mark.gpu)])
def dev(request) -> torch.device:
    return torch.device(request.param)


@pytest.mark.parametrize("name", sorted(DEEPGEMM_SIGNATURES))
def test_signature_is_deepgemms(name):
    """The positional-or-keyword parameters are DeepGEMM's, in its order, with its defaults. Required
    ones may default to None where hopperkit also takes DeepGEMM 2.1's name for them (keyword-only)."""
    params = [p for p in inspect.signature(getattr(hk, name)).parameters.values()
              if p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD]
    assert [p.name for p in params] == [n for n, _ in DEEPGEMM_SIGNATURES[name]]
    for p, (_, default) in zip(params, DEEPGEMM_SIGNATURES[name]):
        if default is not _E:
            assert p.default == default, f"{name}({p.name}=...) defaults to {p.default!r}, DeepGEMM's to {default!r}"
        elif p.default is not _E:
            assert p.default is None, f"{name}({p.name}) is required in DeepGEMM"


def test_aliases_are_the_same_functions():
    for alias, target in DEEPGEMM_ALIASES.items():
        assert getattr(hk, alias) is getattr(hk, target), alias
        assert alias in hk.__all__ and target in hk.__all__


def test_theoretical_alignment_is_the_layouts():
    assert hk.get_theoretical_mk_alignment_for_contiguous_layout() == 128
    assert hk.get_theoretical_mk_alignment_for_contiguous_layout(expected_m=20, num_groups=256) == 128
    with pytest.raises(TypeError, match="expected_m must be an int"):
        hk.get_theoretical_mk_alignment_for_contiguous_layout(expected_m=2.5)


def test_runtime_knobs_deepgemm_code_calls():
    """DeepGEMM's knobs that mean nothing to ahead-of-time SM90 kernels are accepted and checked."""
    try:
        assert hk.get_tc_util() == 100
        hk.set_tc_util(60)
        assert hk.get_tc_util() == 60
        for bad in (101, -1):
            with pytest.raises(ValueError, match="tc_util"):
                hk.set_tc_util(bad)
        with pytest.raises(TypeError, match="tc_util"):
            hk.set_tc_util(0.5)
        assert hk.get_tc_util() == 60
    finally:
        hk.set_tc_util(100)
    hk.set_ignore_compile_dims(True)
    hk.set_ignore_compile_dims(False)
    with pytest.raises(TypeError, match="ignore must be a bool"):
        hk.set_ignore_compile_dims(1)


def test_mk_alignment_can_be_raised(dev):
    """set_mk_alignment_for_contiguous_layout: multiples of 128 only; the grouped GEMMs then check
    segments against it and place the psum layout's segments on it."""
    g = torch.Generator().manual_seed(3)
    G, n, k = 2, 128, 256
    b = [hk.per_block_cast_to_fp8(torch.randn(n, k, generator=g).to(dev)) for _ in range(G)]
    b8, sfb = torch.stack([x for x, _ in b]), torch.stack([s for _, s in b])
    segments = [(0, 60), (1, 70)]
    ids128 = hk.testing.contiguous_m_indices(segments, 128)[0].to(dev)
    ids256, starts256 = hk.testing.contiguous_m_indices(segments, 256)
    ends256 = torch.tensor([s + rows for s, (_, rows) in zip(starts256, segments)], dtype=torch.int32, device=dev)
    ids256 = ids256.to(dev)
    a = torch.randn(ids256.numel(), k, generator=g)
    a[ids256.cpu() == -1] = math.nan
    a8, sfa = hk.per_token_cast_to_fp8(a.to(dev))
    d = torch.empty(ids256.numel(), n, dtype=torch.bfloat16, device=dev)
    for bad, exc in ((64, ValueError), (200, ValueError), (0, ValueError), (256.0, TypeError)):
        with pytest.raises(exc, match="alignment"):
            hk.set_mk_alignment_for_contiguous_layout(bad)
    assert hk.get_mk_alignment_for_contiguous_layout() == 128
    hk.set_check_values(True)
    try:
        hk.set_mk_alignment_for_contiguous_layout(256)
        assert hk.get_mk_alignment_for_contiguous_layout() == 256
        assert hk.get_theoretical_mk_alignment_for_contiguous_layout(expected_m=64) == 256
        # Expert 1 starts at row 128: aligned to 128, not to 256.
        d128 = torch.empty(ids128.numel(), n, dtype=torch.bfloat16, device=dev)
        with pytest.raises(ValueError, match="multiples of 256 rows"):
            hk.m_grouped_fp8_gemm_nt_contiguous((a8[:256], sfa[:256]), (b8, sfb), d128, ids128)
        d0 = hk.testing.poison_(torch.empty_like(d))
        hk.m_grouped_fp8_gemm_nt_contiguous((a8, sfa), (b8, sfb), d0, ids256)
        d1 = hk.testing.poison_(torch.empty_like(d))
        hk.m_grouped_fp8_gemm_nt_contiguous((a8, sfa), (b8, sfb), d1, ends256, use_psum_layout=True)
        assert torch.equal(d0, d1)
        ref = hk.reference.gemm.m_grouped_fp8_gemm_nt_contiguous(a8, sfa, b8, sfb, ids256)
        assert hk.testing.calc_diff(d0, ref) < 1e-5
        assert not d0[ids256 == -1].any()
    finally:
        hk.set_mk_alignment_for_contiguous_layout(None)
        hk.set_check_values(None)
    assert hk.get_mk_alignment_for_contiguous_layout() == 128


def _fp8_case(dev, m=72, n=256, k=384, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=g).to(dev)
    b = torch.randn(n, k, generator=g).to(dev)
    return hk.per_token_cast_to_fp8(a), hk.per_block_cast_to_fp8(b), hk.per_token_cast_to_fp8(b)


def test_fp8_gemm_options_change_nothing(dev):
    (a8, sfa), (b8, sfb), (b8_1d1d, sfb_1d1d) = _fp8_case(dev)
    d0 = hk.testing.poison_(torch.empty(72, 256, dtype=torch.bfloat16, device=dev))
    hk.fp8_gemm_nt((a8, sfa), (b8, sfb), d0)
    for options in (dict(recipe_a=(1, 128), recipe_b=(128, 128)), dict(compiled_dims="mnk"), dict(compiled_dims=""),
                    dict(disable_ue8m0_cast=True), dict(recipe=(1, 128, 128), compiled_dims="nk", alpha=None)):
        d = hk.testing.poison_(torch.empty_like(d0))
        hk.fp8_gemm_nt((a8, sfa), (b8, sfb), d, **options)
        assert torch.equal(d, d0), options
    d = hk.testing.poison_(torch.empty_like(d0))
    hk.fp8_fp4_gemm_tn((a8.T, sfa.T), (b8, sfb), d, None, None, (1, 128), (128, 128), "mn", True)
    assert torch.equal(d, d0), "positional, in DeepGEMM's order"
    # 1d1d through recipe_a / recipe_b: FP32 D accumulated onto C.
    c = torch.randn(72, 256, device=dev)
    d1, d2 = c.clone(), c.clone()
    hk.fp8_gemm_nt((a8, sfa), (b8_1d1d, sfb_1d1d), d1, c=d1, recipe=(1, 1, 128))
    hk.fp8_gemm_nt((a8, sfa), (b8_1d1d, sfb_1d1d), d2, c=d2, recipe_a=(1, 128), recipe_b=(1, 128),
                   disable_ue8m0_cast=False)
    assert torch.equal(d1, d2)


def test_bf16_gemm_options_change_nothing(dev):
    a = torch.randn(40, 96, device=dev).bfloat16()
    b = torch.randn(64, 96, device=dev).bfloat16()
    d0, d1 = (torch.empty(40, 64, dtype=torch.bfloat16, device=dev) for _ in range(2))
    hk.bf16_gemm_nt(a, b, d0)
    hk.bf16_gemm_tt(a.T, b.T, d1, None, "mnk", None)
    assert torch.equal(d0, d1)


def _contiguous_case(dev, seed=1):
    g = torch.Generator().manual_seed(seed)
    G, n, k = 3, 256, 256
    sizes = [130, 0, 60]
    rows = [-(-s // 128) * 128 for s in sizes]
    ids = torch.cat([torch.tensor([i] * s + [-1] * (r - s), dtype=torch.int32) for i, (s, r) in enumerate(zip(sizes, rows))])
    ends = torch.tensor([sum(rows[:i]) + s for i, s in enumerate(sizes)], dtype=torch.int32)
    a = torch.randn(ids.numel(), k, generator=g)
    a[ids == -1] = math.nan
    b = torch.randn(G, n, k, generator=g)
    return a.to(dev), b.to(dev), ids.to(dev), ends.to(dev)


def test_m_grouped_contiguous_options_and_names(dev):
    a, b, ids, ends = _contiguous_case(dev)
    a8, sfa = hk.per_token_cast_to_fp8(a)
    bq = [hk.per_block_cast_to_fp8(x) for x in b]
    b8, sfb = torch.stack([x for x, _ in bq]), torch.stack([s for _, s in bq])
    d0 = hk.testing.poison_(torch.empty(a.shape[0], b.shape[1], dtype=torch.bfloat16, device=dev))
    hk.m_grouped_fp8_gemm_nt_contiguous((a8, sfa), (b8, sfb), d0, ids)
    calls = [
        lambda d: hk.m_grouped_fp8_gemm_nt_contiguous((a8, sfa), (b8, sfb), d, grouped_layout=ids),
        lambda d: hk.m_grouped_fp8_gemm_nt_contiguous((a8, sfa), (b8, sfb), d, m_indices=ids),
        lambda d: hk.m_grouped_fp8_gemm_nt_contiguous((a8, sfa), (b8, sfb), d, ids, None, (1, 128), (128, 128), "nk",
                                                      True, False, False),
        lambda d: hk.m_grouped_fp8_fp4_gemm_nt_contiguous((a8, sfa), (b8, sfb), d, ends, use_psum_layout=True,
                                                          expected_m_for_psum_layout=64, disable_ue8m0_cast=True),
        # nn: B and its scales as [G, K, N] views of the same (K-major) memory
        lambda d: hk.m_grouped_fp8_gemm_nn_contiguous((a8, sfa), (b8.transpose(1, 2), sfb.transpose(1, 2)), d, ids,
                                                      compiled_dims="k"),
    ]
    for i, call in enumerate(calls):
        d = hk.testing.poison_(torch.empty_like(d0))
        call(d)
        assert torch.equal(d, d0), f"call {i}"


def test_m_grouped_bf16_contiguous_psum_names_and_nn(dev):
    a, b, ids, ends = _contiguous_case(dev, seed=2)
    a, b = a.bfloat16(), b.bfloat16()
    d0 = hk.testing.poison_(torch.empty(a.shape[0], b.shape[1], dtype=torch.bfloat16, device=dev))
    hk.m_grouped_bf16_gemm_nt_contiguous(a, b, d0, ids)
    assert (d0[ids == -1] == 0).all() and not d0.isnan().any()
    calls = [
        lambda d: hk.m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices=ids, compiled_dims="mn"),
        lambda d: hk.m_grouped_bf16_gemm_nt_contiguous(a, b, d, ends, use_psum_layout=True,
                                                       expected_m_for_psum_layout=100),
        lambda d: hk.m_grouped_bf16_gemm_nn_contiguous(a, b.transpose(1, 2), d, grouped_layout=ids),
        lambda d: hk.m_grouped_bf16_gemm_nn_contiguous(a, b.transpose(1, 2), d, ends, "nk", True, True),
    ]
    for i, call in enumerate(calls):
        d = hk.testing.poison_(torch.empty_like(d0))
        call(d)
        assert torch.equal(d, d0), f"call {i}"


def test_masked_options(dev):
    g = torch.Generator().manual_seed(3)
    G, m_max, n, k = 2, 64, 128, 256
    a = torch.randn(G, m_max, k, generator=g).to(dev)
    b = torch.randn(G, n, k, generator=g).to(dev)
    masked_m = torch.tensor([5, 64], dtype=torch.int32, device=dev)
    aq = [hk.per_token_cast_to_fp8(x) for x in a]
    a8, sfa = torch.stack([x for x, _ in aq]), torch.stack([s.contiguous() for _, s in aq])
    bq = [hk.per_block_cast_to_fp8(x) for x in b]
    b8, sfb = torch.stack([x for x, _ in bq]), torch.stack([s for _, s in bq])
    d0, d1, d2 = (torch.zeros(G, m_max, n, dtype=torch.bfloat16, device=dev) for _ in range(3))
    hk.m_grouped_fp8_gemm_nt_masked((a8, sfa), (b8, sfb), d0, masked_m, 32)
    hk.fp8_m_grouped_gemm_nt_masked((a8, sfa), (b8, sfb), d1, masked_m, 32, None, (1, 128), (128, 128), "nk", True)
    assert torch.equal(d0, d1)
    ab, bb = a.bfloat16(), b.bfloat16()
    hk.m_grouped_bf16_gemm_nt_masked(ab, bb, d0, masked_m, 32)
    hk.bf16_m_grouped_gemm_nt_masked(ab, bb, d2, masked_m, 32, compiled_dims="mnk")
    assert torch.equal(d0[0, :5], d2[0, :5]) and torch.equal(d0[1], d2[1])


def test_k_grouped_names(dev):
    g = torch.Generator().manual_seed(4)
    m, n, ks = 64, 96, [256, 0, 128]
    kt = torch.tensor(ks, dtype=torch.int32, device=dev)
    a = torch.randn(sum(ks), m, generator=g).to(torch.bfloat16).to(dev)
    b = torch.randn(sum(ks), n, generator=g).to(torch.bfloat16).to(dev)
    c = torch.randn(len(ks), m, n, generator=g).to(dev)
    results = []
    for call in (lambda d: hk.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, kt, d),
                 lambda d: hk.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks_cpu=ks, grouped_layout=kt, c=d),
                 lambda d: hk.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks=ks, ks_tensor=kt, c=d,
                                                                compiled_dims="nk")):
        d = c.clone()
        call(d)
        results.append(d)
    assert torch.equal(results[0], results[1]) and torch.equal(results[0], results[2])

    a8 = torch.randn(m * sum(ks), generator=g).to(dev).to(torch.float8_e4m3fn)
    b8 = torch.randn(n * sum(ks), generator=g).to(dev).to(torch.float8_e4m3fn)
    sfa = torch.rand(m, sum(ks) // 128, generator=g).to(dev) + 0.5
    sfb = torch.rand(n, sum(ks) // 128, generator=g).to(dev) + 0.5
    d0, d1 = c.clone(), c.clone()
    hk.k_grouped_fp8_gemm_nt_contiguous((a8, sfa), (b8, sfb), d0, ks, kt, d0)
    hk.k_grouped_fp8_gemm_nt_contiguous((a8, sfa), (b8, sfb), d1, ks=ks, ks_tensor=kt, c=d1, recipe=(1, 1, 128),
                                        compiled_dims="mn", use_psum_layout=False)
    assert torch.equal(d0, d1)


def test_bad_options_are_refused_by_name(dev):
    (a8, sfa), (b8, sfb), _ = _fp8_case(dev, m=8)
    d = torch.empty(8, 256, dtype=torch.bfloat16, device=dev)
    fp8 = lambda **kw: hk.fp8_gemm_nt((a8, sfa), (b8, sfb), d, **kw)
    cases = [
        (lambda: fp8(alpha=2.0), ValueError, "alpha must be None"),
        (lambda: fp8(compiled_dims="nkx"), ValueError, "compiled_dims must be the letters m, n and k"),
        (lambda: fp8(compiled_dims="nn"), ValueError, "compiled_dims must be"),
        (lambda: fp8(compiled_dims=1), TypeError, "compiled_dims must be a str"),
        (lambda: fp8(disable_ue8m0_cast=1), TypeError, "disable_ue8m0_cast must be a bool"),
        (lambda: fp8(recipe=(1, 128, 128), recipe_a=(1, 128), recipe_b=(128, 128)), ValueError,
         "recipe must be None when recipe_a and recipe_b are given"),
        (lambda: fp8(recipe_a=(1, 128)), ValueError, "recipe_b must be a"),
        (lambda: fp8(recipe_a=(1, 128), recipe_b=(128, 64)), ValueError, "recipe_b must be the same gran_k"),
        (lambda: fp8(recipe_a=(1, 128), recipe_b=(64, 128)), ValueError, "recipe must be"),
        (lambda: hk.bf16_gemm_nt(a8.bfloat16(), b8.bfloat16(), d, alpha=0.5), ValueError, "alpha must be None"),
        (lambda: hk.m_grouped_fp8_gemm_nt_masked((a8[None], sfa[None]), (b8[None], sfb[None]), d[None],
                                                 torch.ones(1, dtype=torch.int32, device=dev), 8, recipe=(1, 1, 128)),
         ValueError, r"recipe must be None or \(1, 128, 128\)"),
    ]
    ids = torch.zeros(8, dtype=torch.int32, device=dev)
    grouped = lambda **kw: hk.m_grouped_fp8_gemm_nt_contiguous((a8, sfa), (b8[None], sfb[None]), d, **kw)
    cases += [
        (lambda: grouped(grouped_layout=ids, m_indices=ids), TypeError, "grouped_layout must be given once"),
        (lambda: grouped(), TypeError, "grouped_layout must be given"),
        (lambda: grouped(grouped_layout=ids, expected_m_for_psum_layout=8), ValueError,
         "expected_m_for_psum_layout must be None unless use_psum_layout=True"),
        (lambda: grouped(grouped_layout=ids, use_psum_layout=1), TypeError, "use_psum_layout must be a bool"),
        (lambda: grouped(grouped_layout=ids, ensure_zero_padding=None), TypeError, "ensure_zero_padding must be a bool"),
        (lambda: grouped(m_indices=ids.long()), TypeError, "m_indices must be"),
        (lambda: grouped(grouped_layout=ids.long()), TypeError, "grouped_layout must be"),
        (lambda: hk.k_grouped_bf16_gemm_tn_contiguous(a8.bfloat16(), a8.bfloat16(), torch.zeros(1, 384, 384, device=dev),
                                                      [8], torch.tensor([8], dtype=torch.int32, device=dev),
                                                      use_psum_layout=True),
         ValueError, "use_psum_layout must be False"),
        (lambda: hk.k_grouped_bf16_gemm_tn_contiguous(a8.bfloat16(), a8.bfloat16(), torch.zeros(1, 384, 384, device=dev),
                                                      [128], ks=[128], grouped_layout=None), TypeError,
         "ks_cpu must be given once"),
    ]
    for i, (call, exc, match) in enumerate(cases):
        with pytest.raises(exc, match=match):
            call()


def test_transform_sf_takes_deepgemms_arguments(dev):
    params = list(inspect.signature(hk.transform_sf_into_required_layout).parameters.values())
    assert [(p.name, p.default) for p in params] == [
        ("sf", _E), ("mn", _E), ("k", _E), ("recipe", _E), ("num_groups", None), ("is_sfa", None),
        ("disable_ue8m0_cast", False), ("psum_layout", None)]
    sf = torch.randn(100, 3, device=dev)
    ref = hk.transform_sf_into_required_layout(sf, 100, 384, (1, 128, 128), is_sfa=True)
    ends = torch.tensor([40, 100], dtype=torch.int32, device=dev)
    for out in (hk.transform_sf_into_required_layout(sf, 100, 384, (1, 128), None, None, True, ends),
                hk.transform_sf_into_required_layout(sf, 100, 384, (1, 128, 128), is_sfa=True, disable_ue8m0_cast=True)):
        assert torch.equal(out, ref) and out.stride() == ref.stride()
    with pytest.raises(TypeError, match="disable_ue8m0_cast must be a bool"):
        hk.transform_sf_into_required_layout(sf, 100, 384, (1, 128), disable_ue8m0_cast="no")
    with pytest.raises(TypeError, match="psum_layout must be"):
        hk.transform_sf_into_required_layout(sf, 100, 384, (1, 128), psum_layout=ends.long())


def test_casts_take_deepgemms_arguments(dev):
    """deep_gemm.utils' casts take gran_k (and the per-token one use_packed_ue8m0): SM90 takes 128 and
    FP32 scales only."""
    x = torch.randn(130, 300, device=dev)
    for cast, extra in ((hk.per_token_cast_to_fp8, dict(use_packed_ue8m0=False)), (hk.per_block_cast_to_fp8, {}),
                        (hk.per_channel_cast_to_fp8, {})):
        xx = x[:128] if cast is hk.per_channel_cast_to_fp8 else x
        ref = cast(xx, False)
        out = cast(xx, False, gran_k=128, **extra)
        assert torch.equal(out[0].view(torch.uint8), ref[0].view(torch.uint8)) and torch.equal(out[1], ref[1])
        with pytest.raises(ValueError, match="gran_k must be 128"):
            cast(xx, False, gran_k=32)
    with pytest.raises(ValueError, match="use_packed_ue8m0 must be False"):
        hk.per_token_cast_to_fp8(x, True, 128, True)


def test_flash_mla_with_kvcache_takes_flashmlas_parameters():
    """FlashMLA's parameter order (reference/flashmla.md §1.2), so positional calls carry over; the
    MODEL1 layout's second cache is refused by name."""
    names = list(inspect.signature(hk.flash_mla_with_kvcache).parameters)
    assert names == ["q", "k_cache", "block_table", "cache_seqlens", "head_dim_v", "tile_scheduler_metadata",
                     "num_splits", "softmax_scale", "causal", "is_fp8_kvcache", "indices", "attn_sink",
                     "extra_k_cache", "extra_indices_in_kvcache", "topk_length", "extra_topk_length"]
    q = torch.randn(1, 1, 16, 576).bfloat16()
    k_cache = torch.randn(2, 64, 1, 576).bfloat16()
    for name in ("extra_k_cache", "extra_indices_in_kvcache", "extra_topk_length"):
        meta, _ = hk.get_mla_metadata()
        with pytest.raises(ValueError, match=f"hopperkit: {name} must be None"):
            hk.flash_mla_with_kvcache(q, k_cache, None, None, 512, meta, **{name: torch.zeros(1, dtype=torch.int32)})
