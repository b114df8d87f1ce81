"""Split-KV scheduler and combine: the reference algorithm's invariants on CPU, and the CUDA metadata
and combine kernels against the references on SM90 (bit-exact), including CUDA-graph replay."""

from __future__ import annotations

import math
import random

import pytest
import torch

import hopperkit
from hopperkit.reference import mla as mla_ref
from hopperkit.reference import scheduler as sched
from hopperkit.testing import assert_close, capture_graph, poison_

B = sched.BLOCK_SIZE
F = sched.FIXED_OVERHEAD


def random_lengths(b: int, gen: random.Random, max_len: int = 20000, zero_frac: float = 0.2) -> torch.Tensor:
    return torch.tensor([0 if gen.random() < zero_frac else gen.randint(1, max_len) for _ in range(b)], dtype=torch.int32)


def check_schedule(lengths: torch.Tensor, tsm: torch.Tensor, num_splits: torch.Tensor, parts: int, sparse: bool) -> None:
    """Every block of every request is covered exactly once, splits are consistent, payload is bounded."""
    lens = [max(x, 1) if sparse else x for x in lengths.tolist()]
    b = len(lens)
    nb = [max(x - 1, 0) // B + 1 for x in lens]
    payload = -(-sum(n + F for n in nb) // parts) + F
    ns = num_splits.tolist()
    assert ns[0] == 0 and all(ns[i + 1] - ns[i] >= 1 for i in range(b)), ns
    assert ns[-1] <= b + parts
    covered = [[0] * n for n in nb]
    chunks = [[] for _ in range(b)]  # (partition, split index)
    for p, row in enumerate(tsm.tolist()):
        begin_req, end_req, begin_block, end_block, begin_split, first_split, last_split, pad = row
        assert pad == 0
        cost = 0
        for r in range(begin_req, end_req + 1):
            lo = begin_block if r == begin_req else 0
            hi = end_block if r == end_req else (nb[r] if lens[r] else 0)
            assert 0 <= lo <= hi <= nb[r]
            for k in range(lo, hi):
                covered[r][k] += 1
            cost += hi - lo + F
            chunks[r].append(begin_split if r == begin_req else 0)
        assert cost <= payload + F, (p, cost, payload)
        if begin_req <= end_req:
            split_first = ns[begin_req + 1] - ns[begin_req] > 1
            split_last = ns[end_req + 1] - ns[end_req] > 1
            assert bool(first_split) == split_first and bool(last_split) == split_last, (row, ns)
    for r in range(b):
        if lens[r] == 0:
            assert covered[r] == [0], (r, covered[r])  # the empty range [0, 0)
        else:
            assert covered[r] == [1] * nb[r], (r, covered[r])
        n_chunks = len(chunks[r])
        assert n_chunks == ns[r + 1] - ns[r], (r, chunks[r], ns)
        if n_chunks > 1:
            assert sorted(chunks[r]) == list(range(n_chunks)), (r, chunks[r])


def test_worked_example():
    # P=4, L=[100, 5000, 64, 0]: nb = [2, 79, 1, 1], total 103, payload 31.
    tsm, ns = sched.get_mla_metadata(torch.tensor([100, 5000, 64, 0], dtype=torch.int32), 4)
    assert ns.tolist() == [0, 1, 5, 6, 7]
    assert tsm.tolist() == [
        [0, 1, 0, 19, 0, 0, 1, 0],
        [1, 1, 19, 45, 1, 1, 1, 0],
        [1, 1, 45, 71, 2, 1, 1, 0],
        [1, 3, 71, 0, 3, 1, 0, 0],
    ]


@pytest.mark.parametrize("seed", range(12))
def test_schedule_invariants(seed):
    gen = random.Random(seed)
    b = gen.choice([1, 2, 3, 7, 64, 128, 300])
    parts = gen.choice([1, 2, 5, 33, 66, 132])
    lengths = random_lengths(b, gen, max_len=gen.choice([64, 3000, 70000]))
    sparse = seed % 3 == 0
    tsm, ns = sched.get_mla_metadata(lengths, parts, empty_as_one_block=sparse)
    assert tsm.shape == (parts, 8) and ns.shape == (b + 1,)
    check_schedule(lengths, tsm, ns, parts, sparse)


def test_schedule_all_empty_and_more_parts_than_work():
    lengths = torch.zeros(5, dtype=torch.int32)
    tsm, ns = sched.get_mla_metadata(lengths, 132)
    check_schedule(lengths, tsm, ns, 132, sparse=False)
    assert ns.tolist() == [0, 1, 2, 3, 4, 5]
    # payload = ceil(30 / 132) + 5 = 6: one request per partition, the rest are empty (begin_req == batch)
    assert tsm[:5, 0].tolist() == [0, 1, 2, 3, 4] and (tsm[5:, 0] == 5).all()


def test_num_sm_parts():
    assert sched.num_sm_parts_dense(132, 1, 128, 1) == 66
    assert sched.num_sm_parts_dense(132, 2, 128, 1) == 33
    assert sched.num_sm_parts_dense(132, 1, 16, 1) == 132
    assert sched.num_sm_parts_dense(132, 4, 128, 128) == 1
    assert sched.num_sm_parts_sparse(132, 2, 128) == 33
    assert sched.num_sm_parts_sparse(132, 1, 64) == 132


def _random_partials(b, s_q, h_q, h_k, num_splits, gen_device, dtype=torch.bfloat16):
    rows = int(num_splits[-1])
    R = s_q * (h_q // h_k)
    o_accum = torch.randn(rows + 3, h_k, R, 512, device=gen_device)
    lse_accum = torch.randn(rows + 3, h_k, R, device=gen_device) * 4 + 2
    # some partials saw only masked keys (causal): -inf LSE, zero O
    dead = torch.rand(rows + 3, h_k, R, device=gen_device) < 0.1
    lse_accum[dead] = -math.inf
    o_accum[dead] = 0
    out = poison_(torch.empty(b, s_q, h_q, 512, dtype=dtype, device=gen_device))
    lse = poison_(torch.empty(b, h_q, s_q, device=gen_device))
    return o_accum, lse_accum, out, lse


def test_combine_reference_matches_float64():
    torch.manual_seed(0)
    b, s_q, h_q, h_k = 3, 2, 4, 2
    ns = torch.tensor([0, 3, 4, 6], dtype=torch.int32)
    o_acc, lse_acc, out, lse = _random_partials(b, s_q, h_q, h_k, ns, "cpu")
    sink = torch.tensor([0.5, -math.inf, math.inf, -1.0])
    sched.mla_combine(o_acc, lse_acc, ns, out, lse, sink)
    G = h_q // h_k
    for i in (0, 2):
        for s in range(s_q):
            for h in range(h_q):
                hk, r = h // G, s * G + h % G
                l2 = lse_acc[ns[i]:ns[i + 1], hk, r].double()
                lse_nat = torch.logsumexp(l2 * math.log(2), 0)
                w = torch.exp(l2 * math.log(2) - lse_nat)
                o = (w[:, None] * o_acc[ns[i]:ns[i + 1], hk, r].double()).sum(0)
                o = o / (1 + torch.exp(sink[h].double() - lse_nat))
                assert abs(lse[i, h, s].item() - lse_nat.item()) < 1e-5
                assert_close("out", out[i, s, h].float(), o.float(), 1e-2, 2 / 128)
    assert torch.isnan(out[1]).all() and torch.isnan(lse[1]).all(), "single-split request must stay untouched"


@pytest.mark.parametrize("causal,h_k,s_q", [(False, 1, 1), (True, 1, 2), (True, 2, 3)])
def test_split_then_combine_equals_unsplit(causal, h_k, s_q):
    torch.manual_seed(1)
    b, h_q, d = 4, 4, 576
    seqlens = torch.tensor([700, 0, 130, 1000], dtype=torch.int32)
    max_blocks = 20
    num_blocks = b * max_blocks
    k_cache = torch.randn(num_blocks, B, h_k, d, dtype=torch.bfloat16) / 10
    block_table = torch.randperm(num_blocks, dtype=torch.int32).reshape(b, max_blocks)
    for i, L in enumerate(seqlens.tolist()):  # NaN in every slot past the request's end
        flat = k_cache[block_table[i].long()].reshape(-1, h_k, d)
        flat[L:] = math.nan
        k_cache[block_table[i].long()] = flat.reshape(max_blocks, B, h_k, d)
    q = (torch.randn(b, s_q, h_q, d) / 10).clamp(-1, 1).to(torch.bfloat16)
    tsm, ns = sched.get_mla_metadata(seqlens, 7)
    assert int(ns[-1]) > b, "the case must actually split requests"
    out, lse = sched.mla_decode_splitkv(q, k_cache, block_table, seqlens, tsm, ns, causal=causal)
    ref_out, ref_lse = mla_ref.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, 512, causal=causal)
    assert_close("out", out, ref_out, 8e-4, 2.01 / 128, 5e-6)
    assert_close("lse", lse, ref_lse, 1e-5, 8.01 / 65536)


# ----------------------------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("seed", range(10))
def test_metadata_kernel_matches_reference(cuda, seed):
    gen = random.Random(100 + seed)
    b = [1, 2, 7, 64, 128, 1000, 16384, 3, 131, 32][seed]
    parts = gen.choice([1, 2, 33, 66, 132, 200])
    sparse = seed % 2 == 1
    lengths = random_lengths(b, gen, max_len=gen.choice([1, 64, 65, 5000, 200000]))
    ref = sched.get_mla_metadata(lengths, parts, empty_as_one_block=sparse)
    tsm, ns = torch.ops.hopperkit.get_mla_metadata(lengths.to(cuda), parts, sparse)
    assert torch.equal(tsm.cpu(), ref[0]), (tsm.cpu()[:4], ref[0][:4])
    assert torch.equal(ns.cpu(), ref[1])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("b,s_q,h_q,h_k,sink", [(4, 1, 16, 1, False), (6, 2, 128, 1, True), (5, 3, 6, 2, False), (64, 2, 64, 1, True)])
def test_combine_kernel_bit_exact(cuda, dtype, b, s_q, h_q, h_k, sink):
    gen = random.Random(b * 7 + h_q)
    lengths = random_lengths(b, gen, max_len=30000, zero_frac=0.1)
    parts = sched.num_sm_parts_dense(132, s_q, h_q, h_k) if b > 4 else 9
    tsm, ns = torch.ops.hopperkit.get_mla_metadata(lengths.to(cuda), parts, False)
    assert int(ns[-1]) > b, "the case must split requests"
    torch.manual_seed(b)
    o_acc, lse_acc, out, lse = _random_partials(b, s_q, h_q, h_k, ns.cpu(), cuda, dtype)
    attn_sink = None
    if sink:
        attn_sink = torch.randn(h_q, device=cuda)
        attn_sink[::5] = math.inf
        attn_sink[1::5] = -math.inf
    ref_out, ref_lse = out.clone(), lse.clone()
    sched.mla_combine(o_acc, lse_acc, ns, ref_out, ref_lse, attn_sink)
    torch.ops.hopperkit.mla_combine(o_acc, lse_acc, ns, out, lse, attn_sink)
    torch.cuda.synchronize()
    single = (ns[1:] - ns[:-1] == 1).cpu()
    assert torch.isnan(out.cpu()[single]).all(), "rows of single-split requests must be left untouched"
    assert torch.equal(out.view(torch.int16), ref_out.view(torch.int16)), (out - ref_out).abs().nan_to_num().max()
    assert torch.equal(lse.isnan(), ref_lse.isnan())
    assert torch.equal(lse.nan_to_num(), ref_lse.nan_to_num())


@pytest.mark.gpu
def test_combine_kernel_strided_outputs(cuda):
    """out/lse views of larger buffers (the sparse LSE is a transposed view)."""
    b, s_q, h_q = 3, 2, 64
    lengths = torch.tensor([9000, 64, 20000], dtype=torch.int32, device=cuda)
    tsm, ns = torch.ops.hopperkit.get_mla_metadata(lengths, 11, False)
    o_acc, lse_acc, _, _ = _random_partials(b, s_q, h_q, 1, ns.cpu(), cuda)
    out_buf = poison_(torch.empty(b, s_q, h_q + 4, 512 + 8, dtype=torch.bfloat16, device=cuda))
    out = out_buf[:, :, 2:h_q + 2, :512]
    lse = poison_(torch.empty(b, s_q, h_q, device=cuda)).transpose(1, 2)
    ref_out, ref_lse = out.clone(), lse.clone()
    sched.mla_combine(o_acc, lse_acc, ns, ref_out, ref_lse)
    hopperkit.mla.mla_combine(o_acc, lse_acc, ns, out, lse)
    assert torch.equal(out.view(torch.int16), ref_out.view(torch.int16))
    assert torch.equal(lse.nan_to_num(), ref_lse.nan_to_num())
    assert torch.isnan(out_buf[:, :, :2]).all() and torch.isnan(out_buf[..., 512:]).all(), "wrote outside the view"


@pytest.mark.gpu
def test_cuda_graph_replay_with_new_seqlens(cuda):
    """Capture metadata + combine once; replay with new cache_seqlens (zeros included) and new partials."""
    b, s_q, h_q, h_k = 32, 2, 64, 1
    parts = sched.num_sm_parts_dense(torch.cuda.get_device_properties(cuda).multi_processor_count, s_q, h_q, h_k)
    rows_cap = b + parts
    R = s_q * h_q // h_k
    seqlens = torch.full((b,), 4096, dtype=torch.int32, device=cuda)
    o_acc = torch.randn(rows_cap, h_k, R, 512, device=cuda)
    lse_acc = torch.randn(rows_cap, h_k, R, device=cuda)
    out = torch.empty(b, s_q, h_q, 512, dtype=torch.bfloat16, device=cuda)
    lse = torch.empty(b, h_q, s_q, device=cuda)

    def step():
        tsm, ns = torch.ops.hopperkit.get_mla_metadata(seqlens, parts, False)
        torch.ops.hopperkit.mla_combine(o_acc, lse_acc, ns, out, lse, None)
        return tsm, ns

    graph, (g_tsm, g_ns) = capture_graph(step)

    gen = random.Random(5)
    for trial in range(4):
        new = random_lengths(b, gen, max_len=[4096, 100, 60000, 1][trial], zero_frac=[0.0, 0.5, 0.3, 1.0][trial])
        seqlens.copy_(new)
        o_acc.copy_(torch.randn_like(o_acc))
        lse_acc.copy_(torch.randn_like(lse_acc) * 3)
        poison_(out)
        poison_(lse)
        graph.replay()
        torch.cuda.synchronize()
        ref_tsm, ref_ns = sched.get_mla_metadata(new, parts)
        assert torch.equal(g_tsm.cpu(), ref_tsm) and torch.equal(g_ns.cpu(), ref_ns), f"trial {trial}"
        ref_out, ref_lse = poison_(torch.empty_like(out)), poison_(torch.empty_like(lse))
        sched.mla_combine(o_acc, lse_acc, ref_ns.to(cuda), ref_out, ref_lse)
        assert torch.equal(out.view(torch.int16), ref_out.view(torch.int16)), f"trial {trial}"
        assert torch.equal(lse.nan_to_num(), ref_lse.nan_to_num()), f"trial {trial}"


@pytest.mark.gpu
def test_opcheck(cuda):
    lengths = torch.tensor([100, 5000, 0], dtype=torch.int32, device=cuda)
    torch.library.opcheck(torch.ops.hopperkit.get_mla_metadata.default, (lengths, 8, False))
    tsm, ns = torch.ops.hopperkit.get_mla_metadata(lengths, 8, False)
    o_acc, lse_acc, out, lse = _random_partials(3, 1, 16, 1, ns.cpu(), cuda)
    torch.library.opcheck(torch.ops.hopperkit.mla_combine.default, (o_acc, lse_acc, ns, out, lse, None, True))


@pytest.mark.gpu
@pytest.mark.parametrize("causal,h_k,s_q,h_q", [(True, 1, 2, 128), (False, 2, 1, 32)])
def test_gpu_split_path_equals_unsplit(cuda, causal, h_k, s_q, h_q):
    """Kernel schedule + per-partition reference attention + kernel combine == the unsplit reference."""
    torch.manual_seed(3)
    b, d, max_blocks = 6, 576, 40
    seqlens = torch.tensor([2500, 0, 64, 1, 1800, 2560], dtype=torch.int32, device=cuda)
    num_blocks = b * max_blocks
    k_cache = torch.randn(num_blocks, B, h_k, d, dtype=torch.bfloat16, device=cuda) / 10
    block_table = torch.randperm(num_blocks, dtype=torch.int32, device=cuda).reshape(b, max_blocks)
    q = (torch.randn(b, s_q, h_q, d, device=cuda) / 10).clamp(-1, 1).to(torch.bfloat16)
    tsm, ns = hopperkit.get_mla_metadata(seqlens, s_q * h_q // h_k, h_k)
    ref_tsm, ref_ns = sched.get_mla_metadata(seqlens.cpu(), tsm.shape[0])
    assert torch.equal(tsm.cpu(), ref_tsm) and torch.equal(ns.cpu(), ref_ns)
    out, lse = sched.mla_decode_splitkv(q, k_cache, block_table, seqlens, tsm, ns, causal=causal,
                                        combine=hopperkit.mla.mla_combine)
    ref_out, ref_lse = hopperkit.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, 512, tsm, ns, causal=causal)
    assert_close("out", out, ref_out, 8e-4, 2.01 / 128, 5e-6)
    assert_close("lse", lse, ref_lse, 1e-5, 8.01 / 65536)
