"""Every op on a second GPU while the first is the current device (needs two SM90 devices).

A serving engine on an eight-GPU node calls the ops on every device, and not always with that device
current. Anything the host side takes from the current device instead of the tensors' (the stream,
the SM count, a per-device cache of kernel attributes or cluster occupancy, a workspace allocation,
a tensor map) shows here as a launch error, an illegal address, or a result that differs from the
same call on the first device. Each case draws its inputs once on the CPU, runs on cuda:0 with
cuda:0 current and on cuda:1 with cuda:0 still current (then also inside a CUDA graph captured on
cuda:1), and requires the results to be bitwise equal: the kernels are deterministic. Their accuracy
is the other test files' business; a case here also checks the cuda:0 result against the reference
so that agreement cannot come from two equally wrong runs.
"""

from __future__ import annotations

import pytest
import torch

import hopperkit
from hopperkit.reference import gemm as ref_gemm
from hopperkit.reference import mla as ref_mla
from hopperkit.testing import (assert_close, assert_fp8_gemm_close, assert_gemm_elementwise, block_scaled_randn,
                               capture_graph, contiguous_m_indices, paged_decode_inputs, poison_, seeded_generator)

pytestmark = pytest.mark.gpu


def _two_sm90_devices() -> bool:
    if torch.cuda.device_count() < 2:
        return False
    return all(torch.cuda.get_device_capability(i) == (9, 0) for i in range(2))


needs_two = pytest.mark.skipif(torch.cuda.is_available() and not _two_sm90_devices(),
                               reason="needs two SM90 GPUs")

DEV0, DEV1 = torch.device("cuda", 0), torch.device("cuda", 1)


def cpu_gen(*key: object) -> torch.Generator:
    return seeded_generator("cpu", "multi gpu", *key)


def on(device: torch.device, *tensors: torch.Tensor):
    return tuple(t.to(device) for t in tensors)


def assert_same(name: str, x: torch.Tensor, y: torch.Tensor) -> None:
    x, y = x.cpu(), y.cpu()
    assert x.shape == y.shape and x.dtype == y.dtype, f"{name}: {x.shape}/{x.dtype} against {y.shape}/{y.dtype}"
    same = (x.view(torch.uint8) == y.view(torch.uint8)).all() if x.element_size() == 1 else torch.equal(
        x.nan_to_num(), y.nan_to_num()) and torch.equal(x.isnan(), y.isnan())
    assert same, f"{name}: the result on cuda:1 differs from the one on cuda:0"


def run_both(name: str, prepare, compute, graph: bool = True) -> tuple:
    """``compute(prepare(device))`` → tuple of outputs, on cuda:0 and on cuda:1 with cuda:0 current;
    then, with ``graph``, ``compute`` replayed from a CUDA graph captured on cuda:1 (``prepare`` copies
    the inputs in, outside the capture). Returns cuda:0's outputs."""
    torch.cuda.set_device(DEV0)
    first = compute(prepare(DEV0))
    torch.cuda.synchronize(DEV0)
    second = compute(prepare(DEV1))
    torch.cuda.synchronize(DEV1)
    assert torch.cuda.current_device() == 0, f"{name}: the op changed the current device"
    for i, (x, y) in enumerate(zip(first, second)):
        assert y.device == DEV1, f"{name}: output {i} is on {y.device}"
        assert_same(f"{name} output {i}", x, y)
    if graph:
        with torch.cuda.device(DEV1):
            inputs = prepare(DEV1)
            g, outs = capture_graph(lambda: compute(inputs))
            for t in outs:
                if t.is_floating_point():
                    poison_(t)
            g.replay()
            torch.cuda.synchronize(DEV1)
        for i, (x, y) in enumerate(zip(first, outs)):
            assert_same(f"{name} output {i} (graph on cuda:1)", x, y)
    return first


FP8_DENSE = [(4096, 7168, 2048, {}), (64, 2112, 7168, {}), (1, 576, 7168, {}),
             (64, 2112, 7168, {"HOPPERKIT_FP8_GEMM_SPLIT_FIXUP": "global"}), (256, 7168, 2048, {})]


@needs_two
@pytest.mark.parametrize("m,n,k,knobs", FP8_DENSE, ids=[f"{m}x{n}x{k}{'-global' if kn else ''}" for m, n, k, kn in FP8_DENSE])
def test_fp8_gemm_nt(m, n, k, knobs, monkeypatch):
    gen = cpu_gen("fp8", m, n, k)
    a_cpu, b_cpu = block_scaled_randn(gen, m, k), block_scaled_randn(gen, n, k, block_rows=128)

    def compute(inputs):
        a, b = inputs
        (a8, sfa), (b8, sfb) = hopperkit.per_token_cast_to_fp8(a), hopperkit.per_block_cast_to_fp8(b)
        d = poison_(torch.empty(m, n, dtype=torch.bfloat16, device=a.device))
        hopperkit.fp8_gemm_nt((a8, sfa), (b8, sfb), d)
        return d, a8, sfa, b8, sfb

    for name, value in knobs.items():
        monkeypatch.setenv(name, value)
    d, a8, sfa, b8, sfb = run_both(f"fp8_gemm_nt {m}x{n}x{k}", lambda dev: on(dev, a_cpu, b_cpu), compute)
    assert_fp8_gemm_close("fp8_gemm_nt on cuda:0", d, a_cpu.to(DEV0).float() @ b_cpu.to(DEV0).float().T,
                          ref_gemm.fp8_gemm_nt(a8, sfa, b8, sfb, out_dtype=torch.float32))


@needs_two
def test_fp8_gemm_1d1d_accumulating():
    m, n, k = 200, 1536, 1024
    gen = cpu_gen("1d1d")
    a_cpu, b_cpu, c_cpu = block_scaled_randn(gen, m, k), block_scaled_randn(gen, n, k), torch.randn(m, n, generator=gen)

    def compute(inputs):
        a, b, d = inputs
        (a8, sfa), (b8, sfb) = hopperkit.per_token_cast_to_fp8(a), hopperkit.per_token_cast_to_fp8(b)
        hopperkit.fp8_gemm_nt((a8, sfa), (b8, sfb), d, c=d, recipe=(1, 1, 128))
        return (d,)

    # Accumulates into its input, so a replay would add twice: no graph.
    (d,) = run_both("fp8_gemm_nt 1d1d", lambda dev: on(dev, a_cpu, b_cpu, c_cpu), compute, graph=False)
    a8, sfa = hopperkit.per_token_cast_to_fp8(a_cpu.to(DEV0))
    b8, sfb = hopperkit.per_token_cast_to_fp8(b_cpu.to(DEV0))
    c = c_cpu.to(DEV0)
    product = ref_gemm.fp8_gemm_nt(a8, sfa, b8, sfb, torch.zeros_like(c), recipe=(1, 1, 128), out_dtype=torch.float32)
    assert_gemm_elementwise("1d1d on cuda:0", d - c, product)


@needs_two
def test_m_grouped_fp8_contiguous_and_masked():
    g, n, k = 4, 4096, 1024
    gen = cpu_gen("grouped")
    m_indices, starts = contiguous_m_indices([(2, 300), (0, 1000), (3, 5), (1, 700)], 128)
    a_cpu = block_scaled_randn(gen, m_indices.numel(), k)
    b_cpu = block_scaled_randn(gen, g, n, k, block_rows=128)
    am_cpu = block_scaled_randn(gen, g, 256, k)
    masked_cpu = torch.tensor([256, 3, 0, 130], dtype=torch.int32)

    def compute(inputs):
        a, b, ids, am, masked = inputs
        device = a.device
        a8, sfa = hopperkit.per_token_cast_to_fp8(a)
        pairs = [hopperkit.per_block_cast_to_fp8(b[e]) for e in range(g)]
        b8, sfb = torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])
        pairs = [hopperkit.per_token_cast_to_fp8(am[e]) for e in range(g)]
        am8, sfam = torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])
        d = poison_(torch.empty(a.shape[0], n, dtype=torch.bfloat16, device=device))
        hopperkit.m_grouped_fp8_gemm_nt_contiguous((a8, sfa), (b8, sfb), d, ids)
        dm = poison_(torch.empty(g, 256, n, dtype=torch.bfloat16, device=device))
        hopperkit.m_grouped_fp8_gemm_nt_masked((am8, sfam), (b8, sfb), dm, masked, 128)
        return d, dm, a8, sfa, b8, sfb

    d, dm, a8, sfa, b8, sfb = run_both("m-grouped fp8", lambda dev: on(dev, a_cpu, b_cpu, m_indices, am_cpu, masked_cpu),
                                       compute)
    s, c = starts[1], 1000
    assert_gemm_elementwise("contiguous expert 0 on cuda:0", d[s:s + c],
                            ref_gemm.fp8_gemm_nt(a8[s:s + c], sfa[s:s + c], b8[0], sfb[0], out_dtype=torch.float32))


@needs_two
def test_k_grouped_fp8_and_bf16():
    ks, m, n = [256, 0, 384, 128], 512, 1024
    gen = cpu_gen("k-grouped")
    a_parts = [block_scaled_randn(gen, m, kg) for kg in ks]
    b_parts = [block_scaled_randn(gen, n, kg) for kg in ks]
    c_cpu = torch.randn(len(ks), m, n, generator=gen)
    a16_cpu = torch.randn(sum(ks), m, generator=gen).to(torch.bfloat16)
    b16_cpu = torch.randn(sum(ks), n, generator=gen).to(torch.bfloat16)

    def prepare(device):
        return (on(device, *a_parts), on(device, *b_parts), *on(device, c_cpu, a16_cpu, b16_cpu),
                torch.tensor(ks, dtype=torch.int32, device=device))

    def compute(inputs):
        a_dev, b_dev, c, a16, b16, ks_dev = inputs
        qa = [hopperkit.per_token_cast_to_fp8(p) for p in a_dev]
        qb = [hopperkit.per_token_cast_to_fp8(p) for p in b_dev]
        a8, b8 = torch.cat([q[0].flatten() for q in qa]), torch.cat([q[0].flatten() for q in qb])
        sfa = torch.cat([q[1].contiguous() for q in qa], dim=1)
        sfb = torch.cat([q[1].contiguous() for q in qb], dim=1)
        d8 = poison_(torch.empty_like(c))
        hopperkit.k_grouped_fp8_gemm_nt_contiguous((a8, sfa), (b8, sfb), d8, ks, ks_dev, c=c)
        d16 = poison_(torch.empty_like(c))
        hopperkit.k_grouped_bf16_gemm_tn_contiguous(a16, b16, d16, ks, ks_dev, c=c)
        return d8, d16

    d8, d16 = run_both("k-grouped", prepare, compute)
    c = c_cpu.to(DEV0)
    assert torch.equal(d16[1], c[1]) and torch.equal(d8[1], c[1]), "an empty group must keep C"
    assert_gemm_elementwise("k-grouped bf16 group 2 on cuda:0", d16[2] - c[2],
                            a16_cpu[256:640].to(DEV0).float().T @ b16_cpu[256:640].to(DEV0).float())


BF16_DENSE = [(4096, 7168, 2048, {}), (64, 2112, 7168, {}), (128, 7168, 2048, {}),
              (64, 2112, 7168, {"HOPPERKIT_BF16_GEMM_SPLIT_FIXUP": "global"})]


@needs_two
@pytest.mark.parametrize("m,n,k,knobs", BF16_DENSE, ids=[f"{m}x{n}x{k}{'-global' if kn else ''}" for m, n, k, kn in BF16_DENSE])
def test_bf16_gemm_nt(m, n, k, knobs, monkeypatch):
    gen = cpu_gen("bf16", m, n, k)
    a_cpu = torch.randn(m, k, generator=gen).to(torch.bfloat16)
    b_cpu = torch.randn(n, k, generator=gen).to(torch.bfloat16)

    def compute(inputs):
        a, b = inputs
        d = poison_(torch.empty(m, n, dtype=torch.bfloat16, device=a.device))
        hopperkit.bf16_gemm_nt(a, b, d)
        return (d,)

    for name, value in knobs.items():
        monkeypatch.setenv(name, value)
    (d,) = run_both(f"bf16_gemm_nt {m}x{n}x{k}", lambda dev: on(dev, a_cpu, b_cpu), compute)
    assert_gemm_elementwise("bf16_gemm_nt on cuda:0", d, a_cpu.to(DEV0).float() @ b_cpu.to(DEV0).float().T)


@needs_two
@pytest.mark.parametrize("lazy", [False, True], ids=["explicit_metadata", "lazy_metadata"])
def test_mla_decode(lazy):
    seqlens_cpu = torch.tensor([4000, 1, 0, 2500, 700, 64], dtype=torch.int32)
    q_cpu, k_cpu, table_cpu = paged_decode_inputs(seqlens_cpu, 2, 128, generator=cpu_gen("mla"))

    def compute(inputs):
        q, k_cache, table, seqlens = inputs
        if lazy:
            meta, _ = hopperkit.get_mla_metadata()
            return hopperkit.flash_mla_with_kvcache(q, k_cache, table, seqlens, 512, meta, causal=True)
        tsm, num_splits = hopperkit.get_mla_metadata(seqlens, 2 * 128, 1)
        out, lse = hopperkit.flash_mla_with_kvcache(q, k_cache, table, seqlens, 512, tsm, num_splits, causal=True)
        return out, lse, tsm, num_splits

    out, lse, *_ = run_both("flash_mla_with_kvcache", lambda dev: on(dev, q_cpu, k_cpu, table_cpu, seqlens_cpu), compute)
    q, k_cache, table, seqlens = on(DEV0, q_cpu, k_cpu, table_cpu, seqlens_cpu)
    ref_out, ref_lse = ref_mla.flash_mla_with_kvcache(q, k_cache, table, seqlens, 512, causal=True)
    assert_close("out on cuda:0", out, ref_out, 8e-4, 2.01 / 128, 5e-6)
    assert_close("lse on cuda:0", lse, ref_lse, 1e-6, 8.01 / 65536)


@needs_two
def test_tensors_on_two_devices_are_refused():
    a = torch.randn(64, 256, device=DEV0).to(torch.bfloat16)
    b = torch.randn(128, 256, device=DEV1).to(torch.bfloat16)
    d = torch.empty(64, 128, dtype=torch.bfloat16, device=DEV0)
    with pytest.raises((ValueError, RuntimeError), match="cuda:1|device"):
        hopperkit.bf16_gemm_nt(a, b, d)
    a8, sfa = hopperkit.per_token_cast_to_fp8(torch.randn(64, 256, device=DEV0))
    b8, sfb = hopperkit.per_block_cast_to_fp8(torch.randn(128, 256, device=DEV1))
    with pytest.raises((ValueError, RuntimeError), match="cuda:1|device"):
        hopperkit.fp8_gemm_nt((a8, sfa), (b8, sfb), d)
