"""Reference MLA decode attention (FlashMLA semantics): dense paged and sparse over the FP8 cache.

These are the oracles the CUDA kernels are tested against, and the CPU / non-Hopper fallback.

Common contract:

- Logits are ``softmax_scale · q·k`` in float32 from the stored operands (bf16/fp16 q and K, or the
  bf16 dequantized FP8 cache); softmax and the P·V product are float32; ``out`` is rounded once to the
  output dtype at the end.
- ``lse`` is the natural-log logsumexp of the scaled logits over the attended keys (never including
  an attention sink).
- A row with no attended key has ``out = 0`` and ``lse = +inf`` (FlashMLA's convention).
- Keys that are not attended (cache slots past a request's length, masked indices) never influence a
  result even when their memory holds NaN/inf: they are replaced by zeros before any multiply,
  because a -inf logit alone does not stop ``0 · NaN = NaN`` in P·V.
- No host synchronization: no ``.item()``, no boolean-mask indexing, no data-dependent shapes or
  Python control flow on tensor values. Garbage in unused block-table / index entries is masked or
  clamped *before* it is used as an address, and so is a block id outside the cache within a
  sequence (invalid input, which reads as zero keys, as in the kernel). Both functions therefore run
  inside a CUDA-graph capture with device-side lengths.
- Memory is bounded by walking the batch in chunks of requests; the chunk size depends only on
  shapes (see ``_CHUNK_BYTES``).
- The matmuls run at the caller's float32 matmul precision. Keep it at the default ("highest"):
  with TF32 enabled the P·V product loses ~13 mantissa bits and the reference is no longer an oracle.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch

from .kv_cache import KV_FP8_BYTES_PER_TOKEN, KV_HEAD_DIM, dequantize_kv_cache

__all__ = ["flash_mla_with_kvcache", "flash_mla_sparse_decode"]

# Working-set target of one chunk of requests (gathered K in float32 plus logits/probabilities).
# Above it the batch is processed a few requests at a time; one request is never split, so a single
# huge request can exceed it.
_CHUNK_BYTES = 1 << 30

_DENSE_DTYPES = (torch.bfloat16, torch.float16)
_FP8_CACHE_DTYPES = (torch.uint8, torch.int8, torch.float8_e4m3fn)


def _chunk_requests(batch: int, bytes_per_request: int) -> int:
    return max(1, min(batch, _CHUNK_BYTES // max(1, bytes_per_request)))


def _require_tensor(x: object, name: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"hopperkit: {name} must be a torch.Tensor, got {type(x).__name__}")


def _require_same_device(ref: torch.Tensor, **tensors: Optional[torch.Tensor]) -> None:
    for name, t in tensors.items():
        if t is not None and t.device != ref.device:
            raise ValueError(f"hopperkit: {name} is on {t.device} but q is on {ref.device}; move it to {ref.device}")


def _softmax_attention(logits: torch.Tensor, v: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Softmax over the last dim of ``logits`` (-inf = not attended), then ``P @ v``.

    Returns ``(out, lse, empty)``: out is 0 and lse -inf where ``empty`` (no attended key).
    """
    lse = torch.logsumexp(logits, dim=-1)
    empty = lse == -math.inf
    # An empty row would compute exp(-inf - (-inf)) = NaN; shifting it by 0 gives exp(-inf) = 0
    # everywhere, so its output comes out as exactly 0.
    p = torch.exp(logits - torch.where(empty, 0.0, lse).unsqueeze(-1))
    return torch.matmul(p, v), lse, empty


def flash_mla_with_kvcache(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    block_table: torch.Tensor,
    cache_seqlens: torch.Tensor,
    head_dim_v: int = 512,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Dense paged MLA decode attention (FlashMLA's dense ``flash_mla_with_kvcache``).

    Args:
        q: ``[b, s_q, h_q, d_qk]`` bfloat16 or float16, any strides.
        k_cache: ``[num_blocks, page_block_size, h_k, d_qk]``, q's dtype, any strides. V is the first
            ``head_dim_v`` channels of K. FlashMLA's kernel needs page_block_size 64 and d_qk 576;
            the reference accepts any.
        block_table: int32 ``[b, max_blocks]``: logical block j of request i lives in physical block
            ``block_table[i, j]``. Only entries ``j < ceil(cache_seqlens[i] / page_block_size)`` are
            read; later ones may hold anything (2147480000, -1, ...) and are never dereferenced.
        cache_seqlens: int32 ``[b]``, may live on the device. Must be ``<= max_blocks·page_block_size``
            (longer requests are silently truncated there: checking would need a host sync).
        head_dim_v: dims of V / out, ``<= d_qk`` (512 for MLA).
        softmax_scale: defaults to ``d_qk ** -0.5``.
        causal: bottom-right aligned when ``s_q > 1``: query token j (0-based) of request i attends
            keys ``[0, cache_seqlens[i] - (s_q - 1 - j))``. A no-op for ``s_q == 1``.

    Query head h uses KV head ``h // (h_q // h_k)``. Cache slots at or past a request's length
    (tails of last blocks, whole unused blocks) may hold NaN/inf and do not affect the result.

    Returns:
        ``(out, lse)``: out ``[b, s_q, h_q, head_dim_v]`` in q's dtype, lse float32 ``[b, h_q, s_q]``,
        both contiguous. Rows with no key (seqlen 0, or a causal row before the first key) give
        out 0 and lse +inf.
    """
    _require_tensor(q, "q")
    _require_tensor(k_cache, "k_cache")
    _require_tensor(block_table, "block_table")
    _require_tensor(cache_seqlens, "cache_seqlens")
    if q.dtype not in _DENSE_DTYPES:
        raise TypeError(f"hopperkit: q must be bfloat16 or float16, got {q.dtype}")
    if k_cache.dtype != q.dtype:
        raise TypeError(
            f"hopperkit: dense k_cache must have q's dtype {q.dtype}, got {k_cache.dtype} "
            "(for an FP8 cache use flash_mla_sparse_decode)"
        )
    if q.dim() != 4:
        raise ValueError(f"hopperkit: q must be [b, s_q, h_q, d_qk], got shape {tuple(q.shape)}")
    if k_cache.dim() != 4:
        raise ValueError(
            f"hopperkit: k_cache must be [num_blocks, page_block_size, h_k, d_qk], got shape {tuple(k_cache.shape)}"
        )
    b, s_q, h_q, d_qk = q.shape
    num_blocks, page_block_size, h_k, d_k = k_cache.shape
    if d_k != d_qk:
        raise ValueError(f"hopperkit: k_cache head dim {d_k} != q head dim {d_qk}")
    if h_k == 0 or h_q % h_k != 0:
        raise ValueError(f"hopperkit: h_q ({h_q}) must be a multiple of k_cache's h_k ({h_k})")
    if page_block_size == 0:
        raise ValueError("hopperkit: k_cache page_block_size must be > 0")
    if not isinstance(head_dim_v, int) or not 0 < head_dim_v <= d_qk:
        raise ValueError(f"hopperkit: head_dim_v must be an int in (0, {d_qk}], got {head_dim_v!r}")
    if block_table.dtype != torch.int32 or block_table.dim() != 2 or block_table.shape[0] != b:
        raise ValueError(
            f"hopperkit: block_table must be int32 [b={b}, max_blocks], got {block_table.dtype} "
            f"{tuple(block_table.shape)}"
        )
    if cache_seqlens.dtype != torch.int32 or tuple(cache_seqlens.shape) != (b,):
        raise ValueError(
            f"hopperkit: cache_seqlens must be int32 [b={b}], got {cache_seqlens.dtype} {tuple(cache_seqlens.shape)}"
        )
    _require_same_device(q, k_cache=k_cache, block_table=block_table, cache_seqlens=cache_seqlens)

    device = q.device
    group = h_q // h_k
    # An empty cache has nothing to gather from (even a clamped address would be out of range).
    s_k = block_table.shape[1] * page_block_size if num_blocks > 0 else 0
    scale = d_qk**-0.5 if softmax_scale is None else float(softmax_scale)

    out = torch.empty(b, s_q, h_q, head_dim_v, dtype=q.dtype, device=device)
    lse = torch.empty(b, h_q, s_q, dtype=torch.float32, device=device)

    pos = torch.arange(s_k, device=device)  # logical key position
    block_col = pos // page_block_size
    block_off = (pos % page_block_size).unsqueeze(0)  # [1, s_k]
    # Keys query token j may not see at the end of the sequence (bottom-right causal alignment).
    if causal and s_q > 1:
        hidden_tail = (s_q - 1) - torch.arange(s_q, device=device)
    else:
        hidden_tail = torch.zeros(s_q, dtype=torch.long, device=device)

    k_bytes = s_k * h_k * d_qk * (k_cache.element_size() + 2 * 4)  # gathered, float32, zeroed copy
    p_bytes = 3 * 4 * h_q * s_q * s_k  # logits, masked logits, probabilities
    chunk = _chunk_requests(b, k_bytes + p_bytes)

    for r0 in range(0, b, chunk):
        r1 = min(b, r0 + chunk)
        c = r1 - r0
        seqlen = cache_seqlens[r0:r1].long()
        in_seq = pos.unsqueeze(0) < seqlen.unsqueeze(1)  # [c, s_k]
        # Table entries past the request's blocks are garbage: replace them before addressing. A block
        # id outside the cache inside the sequence (an input the value checks reject) reads as zeros,
        # like the kernel's TMA loads out of bounds, and never addresses memory.
        block_ids = block_table[r0:r1][:, block_col].long()
        present = in_seq & (block_ids >= 0) & (block_ids < num_blocks)
        k = k_cache[torch.where(present, block_ids, 0), block_off]  # [c, s_k, h_k, d_qk]
        k = torch.where(present[:, :, None, None], k.float(), 0.0)
        k = k.permute(0, 2, 1, 3)  # [c, h_k, s_k, d_qk]

        # Rows of one KV head ordered (s_q, group), like the kernel's q_seq_per_hk.
        qf = q[r0:r1].float().reshape(c, s_q, h_k, group, d_qk).permute(0, 2, 1, 3, 4)
        qf = qf.reshape(c, h_k, s_q * group, d_qk)
        logits = torch.matmul(qf, k.transpose(-1, -2)) * scale  # [c, h_k, s_q * group, s_k]

        key_limit = seqlen.unsqueeze(1) - hidden_tail.unsqueeze(0)  # [c, s_q]
        attend = pos.view(1, 1, s_k) < key_limit.unsqueeze(-1)  # [c, s_q, s_k]
        logits = torch.where(
            attend[:, None, :, None, :], logits.view(c, h_k, s_q, group, s_k), -math.inf
        ).view(c, h_k, s_q * group, s_k)
        o, row_lse, empty = _softmax_attention(logits, k[..., :head_dim_v])
        # o: [c, h_k, s_q * group, dv]; row_lse: [c, h_k, s_q * group]
        o = o.view(c, h_k, s_q, group, head_dim_v).permute(0, 2, 1, 3, 4)
        out[r0:r1] = o.reshape(c, s_q, h_q, head_dim_v).to(q.dtype)
        row_lse = torch.where(empty, math.inf, row_lse).view(c, h_k, s_q, group)
        lse[r0:r1] = row_lse.permute(0, 1, 3, 2).reshape(c, h_q, s_q)
    return out, lse


def flash_mla_sparse_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    indices: torch.Tensor,
    softmax_scale: Optional[float] = None,
    head_dim_v: int = 512,
    topk_length: Optional[torch.Tensor] = None,
    attn_sink: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Sparse MLA decode attention over a paged cache (FlashMLA's sparse ``flash_mla_with_kvcache``).

    Args:
        q: ``[b, s_q, h_q, d_qk]``, any strides. bfloat16 for an FP8 cache (d_qk must then be 576);
            for an unquantized cache q's dtype must equal the cache's.
        k_cache: either the V3.2 FP8 cache ``[num_blocks, page_block_size, 1, 656]`` as uint8, int8 or
            float8_e4m3fn bytes (see ``kv_cache.py``; dequantized to bf16 with the kernel's numerics),
            or an unquantized bf16/fp16 cache ``[num_blocks, page_block_size, 1, d_qk]``. Any
            page_block_size and any strides (a block stride above ``page_block_size`` rows is fine).
            K is all d_qk dims, V the first ``head_dim_v``.
        indices: int32 ``[b, s_q, topk]``; entry = ``block_id * page_block_size + offset_in_block``,
            ``-1`` = masked. Every query head of token (i, j) attends the same selected keys.
        softmax_scale: defaults to ``d_qk ** -0.5``.
        head_dim_v: dims of V / out, ``<= d_qk`` (512 for MLA).
        topk_length: int32 ``[b]`` or None: request i uses only ``indices[i, :, :topk_length[i]]``;
            later entries may hold anything and are never dereferenced.
        attn_sink: float32 ``[h_q]`` or None: out of head h is multiplied by
            ``exp(lse) / (exp(lse) + exp(sink[h])) = 1 / (1 + exp(sink[h] - lse))``
            (+inf sink -> 0, -inf sink -> unchanged). lse does not include the sink.

    Only -1 is FlashMLA's "invalid" marker; any other index outside ``[0, num_blocks·page_block_size)``
    is a caller error there (the kernel may fault). The reference masks those too, so that it never
    reads out of bounds, instead of reproducing a fault. Duplicate indices count once per occurrence.

    Returns:
        ``(out, lse)``: out ``[b, s_q, h_q, head_dim_v]`` in q's dtype (contiguous); lse float32 of shape
        ``[b, h_q, s_q]``, the ``transpose(1, 2)`` view of a contiguous ``[b, s_q, h_q]`` tensor, as
        FlashMLA returns it. Rows with no valid index give out 0 and lse +inf.
    """
    _require_tensor(q, "q")
    _require_tensor(k_cache, "k_cache")
    _require_tensor(indices, "indices")
    if q.dim() != 4:
        raise ValueError(f"hopperkit: q must be [b, s_q, h_q, d_qk], got shape {tuple(q.shape)}")
    b, s_q, h_q, d_qk = q.shape
    quantized = k_cache.dtype in _FP8_CACHE_DTYPES
    if k_cache.dim() != 4 or k_cache.shape[2] != 1:
        raise ValueError(
            "hopperkit: sparse k_cache must be [num_blocks, page_block_size, 1, bytes_or_dims] (one KV head), "
            f"got shape {tuple(k_cache.shape)}"
        )
    if quantized:
        if k_cache.shape[-1] != KV_FP8_BYTES_PER_TOKEN:
            raise ValueError(
                f"hopperkit: an FP8 k_cache must have {KV_FP8_BYTES_PER_TOKEN} bytes per token (V3.2 layout), "
                f"got {k_cache.shape[-1]}"
            )
        if q.dtype != torch.bfloat16:
            raise TypeError(f"hopperkit: q must be bfloat16 with an FP8 k_cache, got {q.dtype}")
        if d_qk != KV_HEAD_DIM:
            raise ValueError(f"hopperkit: the FP8 V3.2 layout needs d_qk = {KV_HEAD_DIM}, got {d_qk}")
    elif k_cache.dtype in _DENSE_DTYPES:
        if k_cache.dtype != q.dtype:
            raise TypeError(f"hopperkit: k_cache dtype {k_cache.dtype} != q dtype {q.dtype}")
        if k_cache.shape[-1] != d_qk:
            raise ValueError(f"hopperkit: k_cache head dim {k_cache.shape[-1]} != q head dim {d_qk}")
    else:
        raise TypeError(
            "hopperkit: sparse k_cache must be uint8/int8/float8_e4m3fn (656-byte FP8 layout) or "
            f"bfloat16/float16 (unquantized), got {k_cache.dtype}"
        )
    if not isinstance(head_dim_v, int) or not 0 < head_dim_v <= d_qk:
        raise ValueError(f"hopperkit: head_dim_v must be an int in (0, {d_qk}], got {head_dim_v!r}")
    if indices.dtype != torch.int32 or indices.dim() != 3 or tuple(indices.shape[:2]) != (b, s_q):
        raise ValueError(
            f"hopperkit: indices must be int32 [b={b}, s_q={s_q}, topk], got {indices.dtype} {tuple(indices.shape)}"
        )
    if topk_length is not None:
        _require_tensor(topk_length, "topk_length")
        if topk_length.dtype != torch.int32 or tuple(topk_length.shape) != (b,):
            raise ValueError(
                f"hopperkit: topk_length must be int32 [b={b}], got {topk_length.dtype} {tuple(topk_length.shape)}"
            )
    if attn_sink is not None:
        _require_tensor(attn_sink, "attn_sink")
        if attn_sink.dtype != torch.float32 or tuple(attn_sink.shape) != (h_q,):
            raise ValueError(
                f"hopperkit: attn_sink must be float32 [h_q={h_q}], got {attn_sink.dtype} {tuple(attn_sink.shape)}"
            )
    _require_same_device(q, k_cache=k_cache, indices=indices, topk_length=topk_length, attn_sink=attn_sink)

    device = q.device
    topk = indices.shape[2]
    num_blocks, page_block_size = k_cache.shape[0], k_cache.shape[1]
    num_slots = num_blocks * page_block_size
    scale = d_qk**-0.5 if softmax_scale is None else float(softmax_scale)
    cache = k_cache.view(torch.uint8) if quantized else k_cache

    out = torch.empty(b, s_q, h_q, head_dim_v, dtype=q.dtype, device=device)
    lse_bsh = torch.empty(b, s_q, h_q, dtype=torch.float32, device=device)

    rank = torch.arange(topk, device=device)
    row_bytes = cache.shape[-1] * cache.element_size()
    kv_bytes = s_q * topk * (row_bytes + d_qk * (2 + 2 * 4))  # gathered rows, bf16, float32, zeroed
    p_bytes = 3 * 4 * s_q * h_q * topk
    chunk = _chunk_requests(b, kv_bytes + p_bytes)

    for r0 in range(0, b, chunk):
        r1 = min(b, r0 + chunk)
        c = r1 - r0
        idx = indices[r0:r1].long()  # [c, s_q, topk]
        valid = (idx >= 0) & (idx < num_slots)
        if topk_length is not None:
            valid = valid & (rank.view(1, 1, topk) < topk_length[r0:r1].long().view(c, 1, 1))
        if num_slots > 0:
            slot = torch.where(valid, idx, 0)  # masked entries are garbage: never an address
            rows = cache[slot // page_block_size, slot % page_block_size, 0]  # [c, s_q, topk, row]
            kv = dequantize_kv_cache(rows) if quantized else rows
            kv = torch.where(valid.unsqueeze(-1), kv.float(), 0.0)
        else:
            kv = torch.zeros(c, s_q, topk, d_qk, dtype=torch.float32, device=device)

        logits = torch.matmul(q[r0:r1].float(), kv.transpose(-1, -2)) * scale  # [c, s_q, h_q, topk]
        logits = torch.where(valid.unsqueeze(2), logits, -math.inf)
        o, row_lse, empty = _softmax_attention(logits, kv[..., :head_dim_v])
        # o: [c, s_q, h_q, dv]; row_lse: [c, s_q, h_q]
        if attn_sink is not None:
            # 1 / (1 + exp(sink - lse)) = sigmoid(lse - sink), which is 0 / 1 at sink = +inf / -inf.
            # Empty rows use lse = 0 here only to avoid inf - inf = NaN; their o is already 0.
            o = o * torch.sigmoid(torch.where(empty, 0.0, row_lse) - attn_sink).unsqueeze(-1)
        out[r0:r1] = o.to(q.dtype)
        lse_bsh[r0:r1] = torch.where(empty, math.inf, row_lse)
    return out, lse_bsh.transpose(1, 2)
