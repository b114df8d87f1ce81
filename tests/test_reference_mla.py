"""Tests of the MLA decode references and the 656-byte FP8 KV layout against independent float64 loops.

The float64 oracles below are deliberately written differently from ``hopperkit.reference``: per
request / token / head Python loops over Python lists of keys, no masking tricks, no batching.
"""

from __future__ import annotations

import math
import random
import struct
import zlib
from typing import List, Optional

import pytest
import torch

from hopperkit.reference.kv_cache import (
    KV_FP8_BYTES_PER_TOKEN,
    KV_ROPE_OFFSET,
    KV_SCALE_OFFSET,
    dequantize_kv_cache,
    quantize_kv_cache,
)
from hopperkit.reference.mla import flash_mla_sparse_decode, flash_mla_with_kvcache
from hopperkit.testing import assert_close

OUT_ABS, OUT_REL, OUT_COS = 8e-4, 2 / 128, 5e-6
LSE_ABS, LSE_REL = 1e-6, 8 / 65536
GARBAGE_BLOCK = 2147480000
PAGE = 64

# ---------------------------------------------------------------------------------------------
# input generation


def _rand(shape, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    # FlashMLA's test distribution: small, never all-zero, bounded.
    return (torch.randn(shape, generator=gen) / 10).clamp(-1, 1).to(dtype)


def _seed(*params) -> int:
    # str hashes are salted per process; crc32 keeps each case's data identical across runs.
    return zlib.crc32(repr(params).encode())


def _non_contiguous(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` living inside a larger NaN-padded buffer (every dim padded, last dim contiguous)."""
    pad = [n + 1 for n in t.shape[:-1]] + [t.shape[-1] + 64]
    buf = torch.full(pad, math.nan, dtype=t.dtype)
    view = buf[tuple(slice(0, n) for n in t.shape)]
    view.copy_(t)
    assert view.stride() != t.contiguous().stride()  # (size-1 dims can still count as contiguous)
    return view


def _check_outputs(out, lse, ref_out, ref_lse) -> None:
    assert_close("out", out, ref_out.to(out.dtype), OUT_ABS, OUT_REL, OUT_COS)
    assert_close("lse", lse, ref_lse.to(torch.float32), LSE_ABS, LSE_REL)


# ---------------------------------------------------------------------------------------------
# dense paged decode


def _dense_case(
    b: int,
    s_q: int,
    h_q: int,
    h_k: int,
    seqlens: List[int],
    dtype: torch.dtype,
    garbage: int,
    seed: int,
    d_qk: int = 576,
):
    gen = torch.Generator().manual_seed(seed)
    max_blocks = max(4, math.ceil(max(seqlens) / 256) * 256 // PAGE)
    used = b * max_blocks
    # Two spare blocks at the end: never referenced, all NaN. A -1 table entry that were dereferenced
    # would wrap (on CPU) to the last one.
    num_blocks = used + 2
    block_table = torch.randperm(used, generator=gen).view(b, max_blocks).to(torch.int32)

    k_cache = _non_contiguous(_rand((num_blocks, PAGE, h_k, d_qk), dtype, gen))
    for i, length in enumerate(seqlens):
        for j in range(max_blocks):
            blk = int(block_table[i, j])
            start = j * PAGE
            if start >= length:
                k_cache[blk] = math.nan
            elif length - start < PAGE:
                k_cache[blk, length - start :] = math.nan
        block_table[i, math.ceil(length / PAGE) :] = garbage
    k_cache[used:] = math.nan

    q = _non_contiguous(_rand((b, s_q, h_q, d_qk), dtype, gen))
    return q, k_cache, block_table, torch.tensor(seqlens, dtype=torch.int32)


def _dense_ref64(q, k_cache, block_table, seqlens, d_v, scale, causal):
    b, s_q, h_q, d_qk = q.shape
    h_k = k_cache.shape[2]
    out = torch.zeros(b, s_q, h_q, d_v, dtype=torch.float64)
    lse = torch.full((b, h_q, s_q), math.inf, dtype=torch.float64)
    for i in range(b):
        length = int(seqlens[i])
        blocks = [k_cache[int(block_table[i, j])] for j in range(math.ceil(length / PAGE))]
        keys = torch.cat(blocks)[:length].double() if blocks else None  # [length, h_k, d_qk]
        for h in range(h_q):
            kv_head = h // (h_q // h_k)
            for j in range(s_q):
                n = length - (s_q - 1 - j) if causal else length
                if n <= 0:
                    continue
                k = keys[:n, kv_head]
                logits = (k @ q[i, j, h].double()) * scale
                m = logits.max()
                e = torch.exp(logits - m)
                lse[i, h, j] = m + torch.log(e.sum())
                out[i, j, h] = (e / e.sum()) @ k[:, :d_v]
    return out, lse


def _seqlens(b: int, s_q: int, s_k: int, varlen: bool, zeros: bool, rng: random.Random) -> List[int]:
    if varlen:
        lens = [max(int(rng.gauss(s_k, s_k / 2)), s_q) for _ in range(b)]
    else:
        lens = [s_k] * b
    if zeros:
        for i in rng.sample(range(b), max(1, b // 2)):
            lens[i] = 0
    return lens


_DENSE_GRID = [
    # (b, s_q, h_q, h_k, s_k, varlen, zeros, causal)
    (b, s_q, h_q, h_k, s_k, varlen, zeros, causal)
    for (h_q, h_k) in ((1, 1), (3, 1), (16, 1), (16, 2))
    for s_q in (1, 2, 4)
    for causal in (False, True)
    for (b, s_k, varlen, zeros) in ((1, 20, False, False), (4, 300, True, True))
]


@pytest.mark.parametrize("b,s_q,h_q,h_k,s_k,varlen,zeros,causal", _DENSE_GRID)
def test_dense_matches_float64(b, s_q, h_q, h_k, s_k, varlen, zeros, causal):
    seed = _seed(b, s_q, h_q, h_k, s_k, varlen, zeros, causal)
    rng = random.Random(seed)
    lens = _seqlens(b, s_q, s_k, varlen, zeros, rng)
    garbage = rng.choice([GARBAGE_BLOCK, -1])
    q, k_cache, block_table, seqlens = _dense_case(b, s_q, h_q, h_k, lens, torch.bfloat16, garbage, seed)
    out, lse = flash_mla_with_kvcache(q, k_cache, block_table, seqlens, 512, causal=causal)
    assert out.is_contiguous() and lse.is_contiguous()
    _check_outputs(out, lse, *_dense_ref64(q, k_cache, block_table, seqlens, 512, 576**-0.5, causal and s_q > 1))


@pytest.mark.parametrize(
    "s_q,lens,causal",
    [
        # page boundaries, and causal rows with fewer keys than s_q (the first rows see nothing)
        (1, [1, 63, 64, 65], False),
        (4, [128, 129, 2, 0], True),
        (4, [3, 1, 4, 5], True),
        (2, [0, 0, 0, 0], True),
    ],
)
def test_dense_edge_lengths(s_q, lens, causal):
    q, k_cache, block_table, seqlens = _dense_case(4, s_q, 3, 1, lens, torch.bfloat16, GARBAGE_BLOCK, seed=7)
    out, lse = flash_mla_with_kvcache(q, k_cache, block_table, seqlens, 512, causal=causal)
    ref_out, ref_lse = _dense_ref64(q, k_cache, block_table, seqlens, 512, 576**-0.5, causal)
    _check_outputs(out, lse, ref_out, ref_lse)
    if causal and lens == [3, 1, 4, 5]:
        # request 1 (one key): only the last query token sees it
        assert torch.isinf(lse[1, :, :3]).all() and torch.isfinite(lse[1, :, 3]).all()
        assert (out[1, :3] == 0).all()


@pytest.mark.parametrize("h_k,causal", [(1, True), (2, False)])
def test_dense_sharp_softmax(h_k, causal):
    # randn/10 data gives nearly uniform softmax; a large scale makes a few keys dominate, so that
    # errors in the logits (scale, masking, head mapping) show up in out and lse.
    q, k_cache, block_table, seqlens = _dense_case(3, 4, 16, h_k, [250, 7, 64], torch.bfloat16, -1, seed=h_k)
    out, lse = flash_mla_with_kvcache(q, k_cache, block_table, seqlens, softmax_scale=25.0, causal=causal)
    _check_outputs(out, lse, *_dense_ref64(q, k_cache, block_table, seqlens, 512, 25.0, causal))


def test_dense_fp16_custom_scale_and_head_dims():
    lens = [70, 200, 0]
    q, k_cache, block_table, seqlens = _dense_case(3, 2, 16, 2, lens, torch.float16, GARBAGE_BLOCK, seed=11, d_qk=192)
    out, lse = flash_mla_with_kvcache(q, k_cache, block_table, seqlens, head_dim_v=128, softmax_scale=0.3, causal=True)
    assert out.dtype == torch.float16 and out.shape == (3, 2, 16, 128)
    _check_outputs(out, lse, *_dense_ref64(q, k_cache, block_table, seqlens, 128, 0.3, True))


def test_dense_causal_ignored_for_single_token():
    q, k_cache, block_table, seqlens = _dense_case(2, 1, 3, 1, [100, 5], torch.bfloat16, GARBAGE_BLOCK, seed=3)
    a = flash_mla_with_kvcache(q, k_cache, block_table, seqlens, causal=False)
    c = flash_mla_with_kvcache(q, k_cache, block_table, seqlens, causal=True)
    assert torch.equal(a[0], c[0]) and torch.equal(a[1], c[1])


def test_dense_chunked_batch_matches_unchunked(monkeypatch):
    import hopperkit.reference.mla as mla

    q, k_cache, block_table, seqlens = _dense_case(4, 2, 16, 2, [300, 0, 17, 129], torch.bfloat16, -1, seed=5)
    full = flash_mla_with_kvcache(q, k_cache, block_table, seqlens, causal=True)
    monkeypatch.setattr(mla, "_CHUNK_BYTES", 1)  # one request per chunk
    chunked = flash_mla_with_kvcache(q, k_cache, block_table, seqlens, causal=True)
    assert torch.equal(full[0], chunked[0]) and torch.equal(full[1], chunked[1])


def test_dense_block_ids_outside_the_cache_read_as_zero_keys():
    """Invalid input the value checks reject, with them off (a CUDA graph, a serving engine's kernel
    path): a block id outside the cache inside a sequence never addresses memory; its keys read as
    zeros, as the kernel's out-of-bounds TMA loads do."""
    gen = torch.Generator().manual_seed(7)
    k_cache = _rand((6, PAGE, 1, 576), torch.bfloat16, gen)
    q = _rand((2, 1, 16, 576), torch.bfloat16, gen)
    lens = torch.tensor([150, 100], dtype=torch.int32)
    table = torch.tensor([[0, 6, 2], [-3, 4, GARBAGE_BLOCK]], dtype=torch.int32)
    out, lse = flash_mla_with_kvcache(q, k_cache, table, lens, head_dim_v=512)
    zero_block = torch.cat([k_cache, torch.zeros(1, PAGE, 1, 576, dtype=torch.bfloat16)])
    expect_table = torch.tensor([[0, 6, 2], [6, 4, 0]], dtype=torch.int32)
    expect_out, expect_lse = flash_mla_with_kvcache(q, zero_block, expect_table, lens, head_dim_v=512)
    assert torch.equal(out, expect_out) and torch.equal(lse, expect_lse)


def test_dense_rejects_bad_inputs():
    q, k_cache, block_table, seqlens = _dense_case(2, 1, 4, 2, [10, 20], torch.bfloat16, GARBAGE_BLOCK, seed=1)
    with pytest.raises(ValueError, match="^hopperkit: h_q"):
        flash_mla_with_kvcache(q[:, :, :3], k_cache, block_table, seqlens)
    with pytest.raises(TypeError, match="^hopperkit: "):
        flash_mla_with_kvcache(q, k_cache.half(), block_table, seqlens)
    with pytest.raises(ValueError, match="^hopperkit: block_table"):
        flash_mla_with_kvcache(q, k_cache, block_table.long(), seqlens)
    with pytest.raises(ValueError, match="^hopperkit: cache_seqlens"):
        flash_mla_with_kvcache(q, k_cache, block_table, seqlens[:1])
    with pytest.raises(ValueError, match="^hopperkit: head_dim_v"):
        flash_mla_with_kvcache(q, k_cache, block_table, seqlens, head_dim_v=577)


# ---------------------------------------------------------------------------------------------
# sparse decode over the FP8 (or bf16) cache


def _poison_row_fp8() -> torch.Tensor:
    row = torch.empty(KV_FP8_BYTES_PER_TOKEN, dtype=torch.uint8)
    row[:KV_SCALE_OFFSET] = 0x7F  # e4m3fn NaN
    row[KV_SCALE_OFFSET:KV_ROPE_OFFSET] = torch.full((4,), math.nan).view(torch.uint8)
    row[KV_ROPE_OFFSET:] = torch.full((64,), math.nan, dtype=torch.bfloat16).view(torch.uint8)
    return row


def _sparse_case(
    b: int,
    s_q: int,
    h_q: int,
    topk: int,
    pbs: int,
    s_k: int,
    fmt: str,
    use_topk_length: bool,
    sink: Optional[str],
    invalid_rows: bool,
    seed: int,
):
    gen = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)
    lens = [rng.randint(1, s_k) for _ in range(b)]
    if b > 1:
        lens[rng.randrange(b)] = 0
    blocks_per_req = math.ceil(s_k / pbs)
    used = b * blocks_per_req
    # Block 0 and the last block are never referenced (poisoned): a masked index that were clamped
    # to 0, or wrapped as -1 on CPU, would read NaN.
    num_blocks = used + 2
    block_table = (torch.randperm(used, generator=gen) + 1).view(b, blocks_per_req).tolist()
    num_slots = num_blocks * pbs

    indices = torch.full((b, s_q, topk), -1, dtype=torch.int32)
    for i in range(b):
        for j in range(s_q):
            pos = rng.sample(range(lens[i]), min(lens[i], topk))
            row = [block_table[i][p // pbs] * pbs + p % pbs for p in pos] + [-1] * (topk - len(pos))
            for k in range(topk):
                if rng.random() < 0.1:
                    row[k] = -1
            rng.shuffle(row)
            indices[i, j] = torch.tensor(row, dtype=torch.int32)
    if invalid_rows:
        indices[rng.randrange(b), rng.randrange(s_q)] = -1
        indices[rng.randrange(b)] = -1

    topk_length = None
    used_len = [topk] * b
    if use_topk_length:
        used_len = [rng.randint(0, topk) for _ in range(b)]
        used_len[0] = 0
        if b > 1:
            used_len[1] = topk
        topk_length = torch.tensor(used_len, dtype=torch.int32)
        for i in range(b):
            for j in range(s_q):
                for k in range(used_len[i], topk):
                    # Garbage: mostly real slots (finite or NaN data), so that not masking shows.
                    indices[i, j, k] = rng.choice([-1, GARBAGE_BLOCK, -7] + [rng.randrange(num_slots)] * 5)

    referenced = torch.zeros(num_slots, dtype=torch.bool)
    for i in range(b):
        for j in range(s_q):
            for idx in indices[i, j, : used_len[i]].tolist():
                if idx != -1:
                    referenced[idx] = True
    unreferenced = ~referenced.view(num_blocks, pbs)

    kv = _rand((num_blocks, pbs, 1, 576), torch.bfloat16, gen)
    # Spread the tile magnitudes so that the scales differ between tiles and tokens.
    kv = (kv.float() * torch.exp2(torch.randint(-3, 4, (num_blocks, pbs, 1, 576), generator=gen).float())).to(
        torch.bfloat16
    )
    if fmt == "bf16":
        buf = torch.full((num_blocks, pbs + 1, 1, 576 + 8), math.nan, dtype=torch.bfloat16)
        cache = buf[:, :pbs, :, :576]
        cache.copy_(kv)
        cache[unreferenced] = math.nan
    else:
        buf = _poison_row_fp8().expand(num_blocks, pbs + 1, 1, KV_FP8_BYTES_PER_TOKEN).clone()
        cache = buf[:, :pbs]  # padded block stride, as FlashMLA's test allocates it
        cache.copy_(quantize_kv_cache(kv))
        cache[unreferenced] = _poison_row_fp8()
        cache = cache.view({"u8": torch.uint8, "i8": torch.int8, "e4m3": torch.float8_e4m3fn}[fmt])

    attn_sink = None
    if sink == "mixed":
        vals = (torch.randn(h_q, generator=gen) * 2).tolist()
        specials = [math.inf, -math.inf]
        for h in rng.sample(range(h_q), min(h_q, 2 + h_q // 3)):
            vals[h] = rng.choice(specials + [vals[h]])
        attn_sink = torch.tensor(vals, dtype=torch.float32)
    elif sink is not None:
        attn_sink = torch.full((h_q,), float(sink), dtype=torch.float32)

    q = _non_contiguous(_rand((b, s_q, h_q, 576), torch.bfloat16, gen))
    return q, cache, indices, topk_length, attn_sink


def _dequant64(cache: torch.Tensor) -> torch.Tensor:
    """float64 [num_blocks, pbs, 576] from the cache bytes; fp8 × scale is exact for power-of-two scales."""
    if cache.dtype == torch.bfloat16:
        return cache[:, :, 0].double()
    raw = cache.view(torch.uint8)[:, :, 0]
    fp8 = raw[..., :512].view(torch.float8_e4m3fn).double()
    scales = raw[..., 512:528].contiguous().view(torch.float32).double()
    mant, _ = torch.frexp(scales[torch.isfinite(scales)])
    assert (mant.abs() == 0.5).all(), "the float64 oracle needs power-of-two scales"
    nope = fp8 * scales.repeat_interleave(128, dim=-1)
    rope = raw[..., 528:].contiguous().view(torch.bfloat16).double()
    return torch.cat([nope, rope], dim=-1)


def _sparse_ref64(q, cache, indices, topk_length, attn_sink, scale, d_v=512):
    b, s_q, h_q, _ = q.shape
    pbs = cache.shape[1]
    kv = _dequant64(cache)
    out = torch.zeros(b, s_q, h_q, d_v, dtype=torch.float64)
    lse = torch.full((b, h_q, s_q), math.inf, dtype=torch.float64)
    for i in range(b):
        n = indices.shape[2] if topk_length is None else int(topk_length[i])
        for j in range(s_q):
            slots = [s for s in indices[i, j, :n].tolist() if s != -1]
            if not slots:
                continue
            keys = torch.stack([kv[s // pbs, s % pbs] for s in slots])
            for h in range(h_q):
                logits = (keys @ q[i, j, h].double()) * scale
                m = logits.max()
                e = torch.exp(logits - m)
                row_lse = float(m + torch.log(e.sum()))
                o = (e / e.sum()) @ keys[:, :d_v]
                if attn_sink is not None:
                    o = o / (1.0 + math.exp(min(float(attn_sink[h]) - row_lse, 700.0)))
                lse[i, h, j] = row_lse
                out[i, j, h] = o
    return out, lse


_SPARSE_GRID = [
    # (b, s_q, h_q, topk, pbs, s_k, fmt, topk_length, sink, invalid_rows)
    (4, 1, 16, 64, 64, 300, "u8", False, None, False),
    (4, 2, 16, 64, 2, 150, "e4m3", False, "mixed", True),
    (3, 4, 3, 128, 61, 300, "i8", True, "mixed", True),
    (4, 2, 64, 64, 61, 100, "u8", True, None, False),
    (2, 1, 1, 64, 2, 64, "u8", True, "mixed", False),
    (2, 2, 128, 64, 64, 200, "u8", False, "mixed", False),
    (4, 3, 16, 128, 64, 300, "bf16", True, "mixed", True),
    (3, 2, 3, 40, 61, 90, "bf16", False, None, True),
    (4, 2, 16, 64, 2, 100, "u8", False, "-inf", False),
    (4, 2, 16, 64, 2, 100, "u8", True, "inf", False),
    (4, 2, 16, 64, 61, 100, "e4m3", False, "2.5", True),
]


@pytest.mark.parametrize("b,s_q,h_q,topk,pbs,s_k,fmt,use_len,sink,invalid_rows", _SPARSE_GRID)
def test_sparse_matches_float64(b, s_q, h_q, topk, pbs, s_k, fmt, use_len, sink, invalid_rows):
    seed = _seed(b, s_q, h_q, topk, pbs, s_k, fmt, use_len, sink, invalid_rows)
    q, cache, indices, topk_length, attn_sink = _sparse_case(
        b, s_q, h_q, topk, pbs, s_k, fmt, use_len, sink, invalid_rows, seed
    )
    out, lse = flash_mla_sparse_decode(q, cache, indices, topk_length=topk_length, attn_sink=attn_sink)
    assert out.dtype == torch.bfloat16 and out.shape == (b, s_q, h_q, 512) and out.is_contiguous()
    assert lse.shape == (b, h_q, s_q) and lse.stride() == (s_q * h_q, 1, h_q)
    _check_outputs(out, lse, *_sparse_ref64(q, cache, indices, topk_length, attn_sink, 576**-0.5))


@pytest.mark.parametrize("fmt,pbs", [("u8", 61), ("bf16", 2)])
def test_sparse_sharp_softmax(fmt, pbs):
    q, cache, indices, topk_length, sink = _sparse_case(3, 2, 16, 128, pbs, 200, fmt, True, "mixed", False, seed=pbs)
    out, lse = flash_mla_sparse_decode(q, cache, indices, softmax_scale=6.0, topk_length=topk_length, attn_sink=sink)
    _check_outputs(out, lse, *_sparse_ref64(q, cache, indices, topk_length, sink, 6.0))


def test_sparse_out_of_range_indices_are_masked_like_minus_one():
    # Only -1 is FlashMLA's marker; other out-of-range values are caller errors that the reference
    # masks instead of faulting on (documented in flash_mla_sparse_decode).
    q, cache, indices, _, sink = _sparse_case(2, 2, 16, 64, 61, 100, "u8", False, "mixed", False, seed=8)
    num_slots = cache.shape[0] * cache.shape[1]
    gen = torch.Generator().manual_seed(0)
    bad = torch.tensor([-7, num_slots, GARBAGE_BLOCK, -(2**31)], dtype=torch.int32)
    noisy = torch.where(indices == -1, bad[torch.randint(0, 4, indices.shape, generator=gen)], indices)
    assert (noisy != -1).all() and (noisy != indices).any()
    want = flash_mla_sparse_decode(q, cache, indices, attn_sink=sink)
    got = flash_mla_sparse_decode(q, cache, noisy, attn_sink=sink)
    assert torch.equal(want[0], got[0]) and torch.equal(want[1], got[1])


def test_sparse_all_invalid_gives_zero_and_inf():
    q, cache, indices, _, _ = _sparse_case(2, 2, 16, 64, 61, 100, "u8", False, None, False, seed=9)
    sink = torch.tensor([0.5, -math.inf, math.inf, 1.0] * 4)
    for idx, tl in ((torch.full_like(indices, -1), None), (indices, torch.zeros(2, dtype=torch.int32))):
        out, lse = flash_mla_sparse_decode(q, cache, idx, topk_length=tl, attn_sink=sink)
        assert (out == 0).all() and (lse == math.inf).all()


def test_sparse_fp8_equals_bf16_cache_of_dequantized_values():
    q, cache, indices, topk_length, sink = _sparse_case(3, 2, 16, 64, 61, 150, "u8", True, "mixed", False, seed=4)
    dense = dequantize_kv_cache(cache)
    a = flash_mla_sparse_decode(q, cache, indices, topk_length=topk_length, attn_sink=sink, softmax_scale=0.1)
    c = flash_mla_sparse_decode(q, dense, indices, topk_length=topk_length, attn_sink=sink, softmax_scale=0.1)
    assert torch.equal(a[0], c[0]) and torch.equal(a[1], c[1])
    ref = _sparse_ref64(q, cache, indices, topk_length, sink, 0.1)
    _check_outputs(*a, *ref)


def test_sparse_rejects_bad_inputs():
    q, cache, indices, _, _ = _sparse_case(2, 1, 16, 64, 64, 100, "u8", False, None, False, seed=2)
    with pytest.raises(ValueError, match="^hopperkit: an FP8 k_cache"):
        flash_mla_sparse_decode(q, cache[..., :655], indices)
    with pytest.raises(TypeError, match="^hopperkit: q must be bfloat16"):
        flash_mla_sparse_decode(q.half(), cache, indices)
    with pytest.raises(ValueError, match="^hopperkit: indices"):
        flash_mla_sparse_decode(q, cache, indices.long())
    with pytest.raises(ValueError, match="^hopperkit: topk_length"):
        flash_mla_sparse_decode(q, cache, indices, topk_length=torch.zeros(3, dtype=torch.int32))
    with pytest.raises(ValueError, match="^hopperkit: attn_sink"):
        flash_mla_sparse_decode(q, cache, indices, attn_sink=torch.zeros(16, dtype=torch.float64))


def test_references_do_not_touch_tensor_data_on_host():
    # Meta tensors have no data: .item(), .tolist(), nonzero() and boolean-mask indexing all raise on
    # them, so running on meta proves the references are free of host syncs and data-dependent shapes.
    meta = lambda t: None if t is None else t.to("meta")  # noqa: E731
    q, k_cache, block_table, seqlens = _dense_case(2, 2, 4, 2, [70, 0], torch.bfloat16, GARBAGE_BLOCK, seed=1)
    out, lse = flash_mla_with_kvcache(meta(q), meta(k_cache), meta(block_table), meta(seqlens), causal=True)
    assert out.device.type == "meta" and out.shape == (2, 2, 4, 512) and lse.shape == (2, 4, 2)
    q, cache, indices, tl, sink = _sparse_case(2, 2, 16, 64, 2, 100, "e4m3", True, "mixed", True, seed=1)
    out, lse = flash_mla_sparse_decode(meta(q), meta(cache), meta(indices), topk_length=meta(tl), attn_sink=meta(sink))
    assert out.device.type == "meta" and out.shape == (2, 2, 16, 512) and lse.shape == (2, 16, 2)
    kv = torch.zeros(3, 5, 1, 576, dtype=torch.bfloat16, device="meta")
    assert dequantize_kv_cache(quantize_kv_cache(kv)).shape == kv.shape


# ---------------------------------------------------------------------------------------------
# 656-byte FP8 KV layout


def _expected_scale(amax: float) -> float:
    """2^ceil(log2(max(amax/448, 1e-4))) via frexp, independent of the bit trick in the reference."""
    x = max(amax / 448.0, 1e-4)
    mant, exp = math.frexp(x)  # x = mant · 2^exp, mant in [0.5, 1)
    return math.ldexp(1.0, exp - 1 if mant == 0.5 else exp)


def _kv_with_edge_tiles(gen: torch.Generator) -> torch.Tensor:
    kv = _rand((3, 5, 1, 576), torch.float32, gen)
    kv = kv * torch.exp2(torch.randint(-20, 12, (3, 5, 1, 576), generator=gen).float())
    kv[0, 0, 0, 0:128] = 0.0  # all-zero tile: scale floor 2^-13
    kv[0, 1, 0, 128:256] = 0.0
    kv[0, 1, 0, 130] = 448.0  # amax exactly 448 · 2^0: scale 1, not 2
    kv[0, 2, 0, 256:384] /= 1e6
    kv[0, 2, 0, 300] = -56.0  # 448 · 2^-3
    kv[0, 3, 0, 384:512] = 1.0
    kv[0, 3, 0, 400] = 450.0  # just above 448 (a bf16 value): scale 2
    kv[0, 4, 0, 0:128] = 2.0**-20
    kv[0, 4, 0, 5] = 448.0 * 2.0**-14  # amax/448 below the floor: scale 2^-13
    return kv.to(torch.bfloat16)


def test_kv_layout_offsets_and_scales():
    assert (KV_FP8_BYTES_PER_TOKEN, KV_SCALE_OFFSET, KV_ROPE_OFFSET) == (656, 512, 528)
    gen = torch.Generator().manual_seed(0)
    kv = _kv_with_edge_tiles(gen)
    packed = quantize_kv_cache(kv)
    assert packed.dtype == torch.uint8 and packed.shape == (3, 5, 1, 656) and packed.is_contiguous()

    # RoPE bytes bit-identical to the input bf16
    assert torch.equal(packed[..., 528:656], kv[..., 512:].contiguous().view(torch.uint8))

    flat_kv = kv.float().view(-1, 576)
    flat = packed.view(-1, 656)
    for t in range(flat.shape[0]):
        scales = struct.unpack("<4f", bytes(flat[t, 512:528].tolist()))
        for tile in range(4):
            amax = float(flat_kv[t, tile * 128 : (tile + 1) * 128].abs().max())
            assert scales[tile] == _expected_scale(amax), (t, tile, amax, scales[tile])
            assert math.frexp(scales[tile])[0] == 0.5  # a power of two
            values = flat[t, tile * 128 : (tile + 1) * 128].view(torch.float8_e4m3fn).float()
            assert torch.isfinite(values).all()
            vmax = float(values.abs().max())
            if amax / 448 >= 1e-4:
                # the tightest power of two: the tile's largest value lands in (224, 448]
                assert 224 <= vmax <= 448, (t, tile, vmax)
    assert struct.unpack("<f", bytes(flat[1, 512 + 4 : 512 + 8].tolist()))[0] == 1.0
    assert struct.unpack("<f", bytes(flat[3, 512 + 12 : 512 + 16].tolist()))[0] == 2.0
    assert struct.unpack("<f", bytes(flat[0, 512:516].tolist()))[0] == 2.0**-13
    assert struct.unpack("<f", bytes(flat[2, 512 + 8 : 512 + 12].tolist()))[0] == 2.0**-3
    assert struct.unpack("<f", bytes(flat[4, 512:516].tolist()))[0] == 2.0**-13


@pytest.mark.parametrize("view", ["u8", "i8", "e4m3"])
def test_kv_roundtrip_error_bound(view):
    gen = torch.Generator().manual_seed(1)
    kv = _non_contiguous(_kv_with_edge_tiles(gen))
    buf = torch.zeros(3, 6, 1, 656, dtype=torch.uint8)
    buf[:, :5] = quantize_kv_cache(kv)
    strided = buf[:, :5].view({"u8": torch.uint8, "i8": torch.int8, "e4m3": torch.float8_e4m3fn}[view])
    deq = dequantize_kv_cache(strided)
    assert deq.dtype == torch.bfloat16 and deq.shape == (3, 5, 1, 576)
    assert torch.equal(deq[..., 512:].view(torch.int16), kv[..., 512:].contiguous().view(torch.int16))

    x = kv[..., :512].double().unflatten(-1, (4, 128))
    scale = buf[:, :5, :, 512:528].contiguous().view(torch.float32).double().unsqueeze(-1)
    err = (deq[..., :512].double().unflatten(-1, (4, 128)) - x).abs()
    # e4m3: 3 mantissa bits -> half-ulp relative error 2^-4 for normals; subnormal spacing is 2^-9·scale.
    bound = x.abs() * 2.0**-4 + scale * 2.0**-10
    assert (err <= bound).all(), f"max excess {(err - bound).max().item():.3g}"
    assert float(err.max()) > 0  # the data is not trivially representable


def _decode_e4m3(byte: int) -> float:
    sign = -1.0 if byte & 0x80 else 1.0
    exp, mant = (byte >> 3) & 0xF, byte & 0x7
    if exp == 0:
        return sign * mant / 8 * 2.0**-6
    return sign * (1 + mant / 8) * 2.0 ** (exp - 7)


def _round_bf16(x: float) -> float:
    """Round to nearest even with an 8-bit significand (normal range only)."""
    if x == 0:
        return x
    mant, exp = math.frexp(x)
    return math.ldexp(round(mant * 256), exp - 8)  # Python's round() ties to even


def _fp8_bytes(gen: torch.Generator, shape) -> torch.Tensor:
    raw = torch.randint(0, 256, shape, generator=gen, dtype=torch.int32)
    raw = torch.where((raw & 0x7F) == 0x7F, raw - 1, raw)  # no NaN encodings
    return raw.to(torch.uint8)


def test_kv_roundtrip_bit_exact_for_representable_values():
    gen = torch.Generator().manual_seed(2)
    n = 40
    fp8 = _fp8_bytes(gen, (n, 512))
    fp8[:, ::128] = 0x7E  # 448 in every tile, so the quantizer picks exactly the chosen scale
    fp8[1::2, 1::128] |= 0x80  # and some negative values, -0 included
    scales = torch.exp2(torch.randint(-13, 12, (n, 4), generator=gen).float())
    rope = torch.randn(n, 64, generator=gen).to(torch.bfloat16)

    x_nope = (fp8.view(torch.float8_e4m3fn).double().view(n, 4, 128) * scales.double().unsqueeze(-1)).view(n, 512)
    kv = torch.cat([x_nope.to(torch.bfloat16), rope], dim=-1)
    assert torch.equal(kv[:, :512].double(), x_nope)  # the construction is exact in bf16

    expected = torch.cat([fp8, scales.view(torch.uint8), rope.view(torch.uint8)], dim=-1)
    packed = quantize_kv_cache(kv)
    assert torch.equal(packed, expected)
    assert torch.equal(dequantize_kv_cache(packed).view(torch.int16), kv.view(torch.int16))


def test_kv_dequant_rounds_scale_and_product_to_bf16():
    gen = torch.Generator().manual_seed(3)
    n = 8
    fp8 = _fp8_bytes(gen, (n, 512))
    scales = torch.tensor([[0.3, 1.7e-3, 5.1, 0.0123]] * n) * torch.rand(n, 1, generator=gen).add(0.5)
    rope = torch.randn(n, 64, generator=gen).to(torch.bfloat16)
    packed = torch.cat([fp8, scales.view(torch.uint8), rope.view(torch.uint8)], dim=-1)
    deq = dequantize_kv_cache(packed)

    mismatched_naive = 0
    for t in range(n):
        sf = struct.unpack("<4f", bytes(packed[t, 512:528].tolist()))
        for e in range(512):
            v = _decode_e4m3(int(fp8[t, e]))
            want = _round_bf16(v * _round_bf16(sf[e // 128]))
            assert float(deq[t, e]) == want, (t, e, v, sf[e // 128], float(deq[t, e]), want)
            mismatched_naive += _round_bf16(v * sf[e // 128]) != want
    # The bf16 rounding of the scale must matter on this data, or the test would not test it.
    assert mismatched_naive > 100
    assert torch.equal(deq[:, 512:].view(torch.int16), rope.view(torch.int16))


def test_kv_rejects_bad_inputs():
    with pytest.raises(TypeError, match="^hopperkit: "):
        quantize_kv_cache(torch.zeros(2, 576))
    with pytest.raises(ValueError, match="^hopperkit: "):
        quantize_kv_cache(torch.zeros(2, 512, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="^hopperkit: "):
        dequantize_kv_cache(torch.zeros(2, 656, dtype=torch.int16))
    with pytest.raises(ValueError, match="^hopperkit: "):
        dequantize_kv_cache(torch.zeros(2, 584, dtype=torch.uint8))
