"""Split-KV scheduling for MLA decode: the partition algorithm of ``get_mla_metadata`` and the combine.

A decode batch is cut into ``num_sm_parts`` partitions of roughly equal cost (KV blocks plus a fixed
per-request overhead); one CTA group processes one partition. A request whose blocks land in several
partitions is *split*: each partition writes a float32 partial (O normalised by its own softmax
denominator, and a base-2 LSE) to an accumulator row, and the combine merges those rows.

The CUDA metadata kernel (csrc/mla/metadata) reproduces ``get_mla_metadata`` bit for bit, and the
CUDA combine kernel (csrc/mla/combine) reproduces ``mla_combine`` bit for bit on the same device:
both are plain IEEE float32 operations in the same order (no fused multiply-add, no reassociation).

Metadata row (int32 × 8), one per partition, the layout of FlashMLA's ``DecodingSchedMeta``:
``[begin_req, end_req (inclusive), begin_block, end_block (exclusive, of end_req),
begin_split, is_first_req_split, is_last_req_split, 0]``.
``num_splits`` int32 [b+1] is a prefix sum: request i owns accumulator rows
``[num_splits[i], num_splits[i+1])``; a request with one split is written directly by its partition.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import torch

__all__ = [
    "BLOCK_SIZE",
    "FIXED_OVERHEAD",
    "METADATA_WIDTH",
    "num_sm_parts_dense",
    "num_sm_parts_sparse",
    "get_mla_metadata",
    "mla_combine",
    "mla_decode_splitkv",
]

BLOCK_SIZE = 64  # KV tokens per scheduling block (the paged-cache page / the sparse top-k block)
FIXED_OVERHEAD = 5  # cost of starting a request, in blocks (Q load, epilogue)
METADATA_WIDTH = 8
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


def num_sm_parts_dense(num_sms: int, s_q: int, h_q: int, h_k: int) -> int:
    """Partitions for the dense kernel: one CTA per (64-row query tile, KV head, partition) fills the SMs."""
    q_rows = s_q * (h_q // h_k)
    return max(num_sms // h_k // math.ceil(q_rows / 64), 1)


def num_sm_parts_sparse(num_sms: int, s_q: int, h_q: int) -> int:
    """Partitions for the sparse kernel: one CTA per (64-head group, query token, partition)."""
    return max(num_sms // s_q // math.ceil(h_q / 64), 1)


def get_mla_metadata(
    lengths: torch.Tensor,
    num_sm_parts: int,
    empty_as_one_block: bool = False,
    block_size: int = BLOCK_SIZE,
    fixed_overhead: int = FIXED_OVERHEAD,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The greedy partition walk. ``lengths`` int [b]: KV tokens per request (dense: cache_seqlens;
    sparse: topk_length or topk). ``empty_as_one_block``: sparse mode counts a zero length as one
    block that is read (its entries are all invalid); dense mode gives a zero-length request the
    empty block range [0, 0).

    Returns ``(tile_scheduler_metadata int32 [num_sm_parts, 8], num_splits int32 [b+1])`` on
    ``lengths.device``. This runs on the host (it syncs); the CUDA op is the capturable version.
    """
    lens = [int(x) for x in lengths.reshape(-1).tolist()]
    b = len(lens)
    if empty_as_one_block:
        lens = [max(x, 1) for x in lens]
    P, B, F = num_sm_parts, block_size, fixed_overhead
    nb = [max(x - 1, 0) // B + 1 for x in lens]  # a zero-length request still costs one block
    total = sum(n + F for n in nb)
    payload = -(-total // P) + F

    rows = []
    num_splits = [0] * (b + 1)
    req = blk = nsplit = cum = 0
    for _ in range(P):
        begin_req, begin_block, begin_split = req, blk, nsplit
        first_split = blk != 0
        rem = payload
        while req < b:
            left = nb[req] - blk
            if rem >= left + F:
                cum += nsplit + 1
                num_splits[req + 1] = cum
                rem -= left + F
                req, blk, nsplit = req + 1, 0, 0
            else:
                if rem - F > 0:
                    blk += rem - F
                    nsplit += 1
                break
        if blk > 0:
            end_req, end_block = req, blk
        else:
            end_req = req - 1
            end_block = 0 if lens[end_req] == 0 else nb[end_req]
        last_split = end_block != nb[end_req] and lens[end_req] != 0
        if begin_req == end_req:
            first_split = last_split = first_split or last_split
        rows.append([begin_req, end_req, begin_block, end_block, begin_split, int(first_split), int(last_split), 0])
    assert req == b and blk == 0 and nsplit == 0, "hopperkit: scheduler walk did not cover the batch"
    dev = lengths.device
    return (
        torch.tensor(rows, dtype=torch.int32, device=dev).reshape(P, METADATA_WIDTH),
        torch.tensor(num_splits, dtype=torch.int32, device=dev),
    )


def mla_combine(
    o_accum: torch.Tensor,
    lse_accum: torch.Tensor,
    num_splits: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    attn_sink: Optional[torch.Tensor] = None,
) -> None:
    """Merge the split partials of every request with more than one split into ``out`` and ``lse``.

    o_accum   float32 [num_accum_rows, h_k, s_q·G, d_v]  (G = h_q / h_k, row r = s·G + g)
    lse_accum float32 [num_accum_rows, h_k, s_q·G]       base-2 LSE of each partial
    num_splits int32 [b+1]
    out       [b, s_q, h_q, d_v] (bf16/fp16), written only for split requests
    lse       float32 [b, h_q, s_q] natural log, written only for split requests
    attn_sink float32 [h_q] or None: out is scaled by 1/(1 + exp(sink - lse)); lse excludes it.

    For each split request: m = max_i lse_i (0 if all are -inf); s = Σ_i exp2(lse_i - m) summed in
    split order; G = log2(s) + m (+inf if s == 0); lse = G·ln2; with a sink
    G += log2(1 + exp2(sink·log2e - G)) (G = sink·log2e when nothing was attended);
    out = Σ_i exp2(lse_i - G) · o_i in split order, each product and sum rounded separately.
    No host synchronisation: loops run over the static bound num_accum_rows - b + 1 splits.
    """
    b, s_q, h_q, d_v = out.shape
    n_rows, h_k, R = lse_accum.shape
    G_ = h_q // h_k
    starts = num_splits[:-1].long()
    counts = (num_splits[1:] - num_splits[:-1]).long()
    max_splits = max(n_rows - b + 1, 1)  # each extra split adds one row beyond the b rows

    f32 = torch.float32
    zero = torch.zeros((), dtype=f32, device=out.device)
    neg_inf = torch.full((), -math.inf, dtype=f32, device=out.device)
    # Gather each request's partial LSEs: [b, max_splits, h_k, R]; -inf past the request's count.
    j = torch.arange(max_splits, device=out.device)
    valid = j[None, :] < counts[:, None]  # [b, J]
    row_idx = torch.where(valid, starts[:, None] + j[None, :], 0).clamp(max=n_rows - 1)
    lses = torch.where(valid[:, :, None, None], lse_accum[row_idx], neg_inf)
    m = lses.amax(dim=1)
    m = torch.where(m == -math.inf, zero, m)
    s = torch.zeros_like(m)
    for i in range(max_splits):
        s = s + torch.exp2(lses[:, i] - m)
    g = torch.where(s == 0, torch.full_like(s, math.inf), torch.log2(s) + m)
    lse_nat = g * LN2  # [b, h_k, R]

    if attn_sink is not None:
        # sink per query head, laid out like the rows: h = hk·G + g, r = s·G + g
        sink = attn_sink.to(f32).reshape(h_k, 1, G_).expand(h_k, s_q, G_).reshape(1, h_k, R) * LOG2E
        sink = sink.expand_as(g)
        # Nothing attended (g = +inf): the sink alone is the denominator; with sink = -inf too the
        # row stays empty (+inf keeps every weight exp2(lse_i - g) at exactly 0, never NaN).
        empty = torch.where(sink == -math.inf, torch.full_like(g, math.inf), sink)
        g = torch.where(g == math.inf, empty, g + torch.log2(1 + torch.exp2(sink - g)))

    acc = torch.zeros(b, h_k, R, d_v, dtype=f32, device=out.device)
    for i in range(max_splits):
        w = torch.exp2(lses[:, i] - g)
        o_i = o_accum[row_idx[:, i]]
        acc = torch.where(valid[:, i, None, None, None], acc + w[..., None] * o_i, acc)

    split = (counts > 1)  # [b]
    # [b, h_k, s_q·G, d] -> [b, s_q, h_q, d] and [b, h_k, s_q·G] -> [b, h_q, s_q]
    acc_bshd = acc.reshape(b, h_k, s_q, G_, d_v).permute(0, 2, 1, 3, 4).reshape(b, s_q, h_q, d_v)
    lse_bhs = lse_nat.reshape(b, h_k, s_q, G_).permute(0, 1, 3, 2).reshape(b, h_q, s_q)
    out.copy_(torch.where(split[:, None, None, None], acc_bshd.to(out.dtype), out))
    lse.copy_(torch.where(split[:, None, None], lse_bhs, lse))


def _partial_attention(q, k, v, mask, scale):
    """q [M, d], k [N, d], v [N, dv], mask [M, N] bool → (O / L, base-2 LSE) of the partial softmax."""
    if k.shape[0] == 0:  # a zero-length request's empty block range
        return q.new_zeros(q.shape[0], v.shape[1]), q.new_full((q.shape[0],), -math.inf)
    logits = (q @ k.T) * (scale * LOG2E)
    logits = torch.where(mask, logits, -math.inf)
    m = logits.amax(dim=-1, keepdim=True)
    m_safe = torch.where(m == -math.inf, 0.0, m)
    p = torch.exp2(logits - m_safe)
    denom = p.sum(dim=-1, keepdim=True)
    o = (p @ v) / torch.where(denom == 0, 1.0, denom)
    lse2 = torch.where(denom == 0, -math.inf, torch.log2(denom) + m_safe).squeeze(-1)
    return o, lse2


def mla_decode_splitkv(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    block_table: torch.Tensor,
    cache_seqlens: torch.Tensor,
    tile_scheduler_metadata: torch.Tensor,
    num_splits: torch.Tensor,
    head_dim_v: int = 512,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    combine: Optional[Callable[..., None]] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense decode computed the way the split-KV kernel computes it: partition by partition.

    Each partition attends to its block range of each of its requests; unsplit requests are written
    to (out, lse) directly, split ones to the float32 accumulators, and ``mla_combine`` merges them.
    Used to prove that the partition plus the combine equal the unsplit reference. ``combine``
    (default: ``mla_combine`` above) lets a test run the CUDA combine instead. Host loops; slow.
    """
    b, s_q, h_q, d = q.shape
    h_k = k_cache.shape[2]
    G_ = h_q // h_k
    R = s_q * G_
    scale = softmax_scale if softmax_scale is not None else d ** -0.5
    causal = causal and s_q > 1
    n_rows = int(num_splits[-1].item())
    dev = q.device
    o_accum = torch.full((max(n_rows, 1), h_k, R, head_dim_v), math.nan, dtype=torch.float32, device=dev)
    lse_accum = torch.full((max(n_rows, 1), h_k, R), math.nan, dtype=torch.float32, device=dev)
    out = torch.zeros(b, s_q, h_q, head_dim_v, dtype=q.dtype, device=dev)
    lse = torch.full((b, h_q, s_q), math.inf, dtype=torch.float32, device=dev)
    seqlens = cache_seqlens.tolist()
    splits = num_splits.tolist()
    # query rows of KV head hk, ordered r = s·G + g
    q_rows = q.float().reshape(b, s_q, h_k, G_, d).permute(0, 2, 1, 3, 4).reshape(b, h_k, R, d)
    row_s = torch.arange(R, device=dev) // G_

    for part in tile_scheduler_metadata.tolist():
        begin_req, end_req, begin_block, end_block, begin_split, first_split, last_split, _ = part
        for r in range(begin_req, end_req + 1):
            seqlen = seqlens[r]
            blk0 = begin_block if r == begin_req else 0
            blk1 = end_block if r == end_req else (seqlen + BLOCK_SIZE - 1) // BLOCK_SIZE
            tok0, tok1 = blk0 * BLOCK_SIZE, min(blk1 * BLOCK_SIZE, seqlen)
            blocks = block_table[r, blk0:blk1].long()
            kv = k_cache[blocks].float().reshape(-1, h_k, d)[: max(tok1 - tok0, 0)]
            pos = torch.arange(tok0, tok0 + kv.shape[0], device=dev)
            limit = seqlen - (s_q - 1 - row_s) if causal else torch.full_like(row_s, seqlen)
            mask = pos[None, :] < limit[:, None]  # [R, N]
            is_split = splits[r + 1] - splits[r] > 1
            for hk in range(h_k):
                o, lse2 = _partial_attention(q_rows[r, hk], kv[:, hk], kv[:, hk, :head_dim_v], mask, scale)
                if is_split:
                    row = splits[r] + (begin_split if r == begin_req else 0)
                    o_accum[row, hk] = o
                    lse_accum[row, hk] = lse2
                else:
                    o_b = o.reshape(s_q, G_, head_dim_v)
                    out[r, :, hk * G_:(hk + 1) * G_] = o_b.to(q.dtype)
                    lse_nat = torch.where(lse2 == -math.inf, math.inf, lse2 * LN2)
                    lse[r, hk * G_:(hk + 1) * G_] = lse_nat.reshape(s_q, G_).T
    (combine or mla_combine)(o_accum, lse_accum, num_splits, out, lse)
    return out, lse
