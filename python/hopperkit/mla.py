"""MLA decode, FlashMLA-compatible: ``get_mla_metadata`` and ``flash_mla_with_kvcache``.

Three call styles work, as they do with FlashMLA's three API generations:

1. Explicit metadata (FlashMLA <= 1.0 "Gen A/B")::

       tsm, num_splits = get_mla_metadata(cache_seqlens, s_q * h_q // h_k, h_k)
       out, lse = flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, 512, tsm, num_splits, causal=True)

2. Lazy metadata (FlashMLA HEAD)::

       meta, _ = get_mla_metadata()
       out, lse = flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, 512, meta, causal=True)

   The first call fills ``meta``; later calls (e.g. the other layers of the same decode step) reuse it
   and must have the same batch and head layout.

3. Sparse FP8 (DeepSeek V3.2): ``indices`` selects sparse mode over a 656-byte FP8 cache.

The split-KV schedule is computed on the GPU by a one-warp kernel, so it can be captured in a CUDA
graph and recomputed from the live ``cache_seqlens`` on every replay.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Union

import torch

from . import _ops
from ._validation import (check_bool, check_int, check_no_self_overlap, check_same_device, check_tensor, check_values,
                          describe, fail)
from .layout import get_num_sms
from .reference import kv_cache as _kv_ref
from .reference import mla as _mla_ref
from .reference import scheduler as _sched_ref

__all__ = [
    "FlashMLASchedMeta",
    "get_mla_metadata",
    "flash_mla_with_kvcache",
    "mla_combine",
    "quantize_kv_cache",
    "dequantize_kv_cache",
]

D_QK = 576
D_V = 512
PAGE_BLOCK_SIZE = 64
KV_FP8_BYTES_PER_TOKEN = 656
_FP8_CACHE_DTYPES = (torch.float8_e4m3fn, torch.uint8, torch.int8)
_MAX_BATCH = 16384  # the metadata kernel keeps two ints per request in shared memory
# The combine kernel puts a request's query rows (s_q·h_q) on grid.y, up to 4 warps per row and 8 warps
# per CTA: (4·s_q·h_q + 7) // 8 <= 65535.
_MAX_QUERY_ROWS = 65535 * 8 // 4
# The kernel scales scores by softmax_scale·log2(e) in float32.
_MAX_SOFTMAX_SCALE = 3.4028234663852886e38 / 1.4426950408889634


@dataclass
class _MetaConfig:
    b: int
    s_q: int
    h_q: int
    page_block_size: int
    h_k: int
    causal: bool
    is_fp8_kvcache: bool
    topk: Optional[int]


@dataclass
class FlashMLASchedMeta:
    """Lazily filled split-KV schedule (FlashMLA HEAD's object of the same name).

    Filled by the first ``flash_mla_with_kvcache`` call that receives it; reused by later calls, which
    must have the same batch size, head layout, cache page size, causality and mode. Its schedule is
    computed from the ``cache_seqlens`` (or ``topk_length``) of the first call: create a new one for
    every decode step.
    """

    have_initialized: bool = False
    config: Optional[_MetaConfig] = None
    tile_scheduler_metadata: Optional[torch.Tensor] = None
    num_splits: Optional[torch.Tensor] = None


def _schedule(lengths: torch.Tensor, num_sm_parts: int, sparse: bool) -> tuple[torch.Tensor, torch.Tensor]:
    if _ops.use_kernel("get_mla_metadata", lengths.device):
        return torch.ops.hopperkit.get_mla_metadata(lengths, num_sm_parts, sparse)
    return _sched_ref.get_mla_metadata(lengths, num_sm_parts, empty_as_one_block=sparse)


def get_mla_metadata(
    cache_seqlens: Optional[torch.Tensor] = None,
    num_q_tokens_per_head_k: Optional[int] = None,
    num_heads_k: Optional[int] = None,
    num_heads_q: Optional[int] = None,
    is_fp8_kvcache: bool = False,
    topk: Optional[int] = None,
) -> Union[tuple[torch.Tensor, torch.Tensor], tuple[FlashMLASchedMeta, None]]:
    """Split-KV schedule for ``flash_mla_with_kvcache``.

    With no arguments: returns ``(FlashMLASchedMeta(), None)``, filled by the first attention call.

    With arguments (dense): ``cache_seqlens`` int32 [b], ``num_q_tokens_per_head_k = s_q * h_q // h_k``,
    ``num_heads_k = h_k``. Sparse: also ``num_heads_q = h_q`` and ``topk`` (every request then
    schedules ``topk`` tokens). Returns ``(tile_scheduler_metadata int32 [num_sm_parts, 8],
    num_splits int32 [b + 1])`` on the device of ``cache_seqlens``; on an SM90 GPU they are computed
    by a kernel without synchronizing, so the call can be captured in a CUDA graph.
    """
    if cache_seqlens is None and num_q_tokens_per_head_k is None and num_heads_k is None:
        if num_heads_q is not None or topk is not None:
            raise ValueError("hopperkit: get_mla_metadata() with num_heads_q/topk also needs cache_seqlens, "
                             "num_q_tokens_per_head_k and num_heads_k")
        return FlashMLASchedMeta(), None
    check_tensor("cache_seqlens", cache_seqlens, dtype=torch.int32, ndim=1, contiguous=True)
    b = cache_seqlens.shape[0]
    if not 1 <= b <= _MAX_BATCH:
        fail("cache_seqlens", f"of length 1..{_MAX_BATCH} (the batch size)", f"length {b}")
    rows = check_int("num_q_tokens_per_head_k", num_q_tokens_per_head_k, min_value=1)
    h_k = check_int("num_heads_k", num_heads_k, min_value=1)
    check_bool("is_fp8_kvcache", is_fp8_kvcache)
    num_sms = get_num_sms(cache_seqlens.device)
    if topk is None:
        parts = max(num_sms // h_k // math.ceil(rows / 64), 1)
        return _schedule(cache_seqlens, parts, sparse=False)
    check_int("topk", topk, min_value=1)
    h_q = check_int("num_heads_q", num_heads_q, min_value=1)
    if (rows * h_k) % h_q != 0:
        fail("num_q_tokens_per_head_k * num_heads_k", f"a multiple of num_heads_q ({h_q})", str(rows * h_k))
    s_q = rows * h_k // h_q
    lengths = torch.full((b,), topk, dtype=torch.int32, device=cache_seqlens.device)
    return _schedule(lengths, _sched_ref.num_sm_parts_sparse(num_sms, s_q, h_q), sparse=True)


def _check_metadata(tsm: object, num_splits: object, b: int, parts: int, device: torch.device, values: bool) -> None:
    check_tensor("tile_scheduler_metadata", tsm, dtype=torch.int32, ndim=2, device=device, contiguous=True)
    if tsm.shape != (parts, 8):
        fail("tile_scheduler_metadata", f"of shape ({parts}, 8) for this call's batch and head layout "
             "(metadata built for another head layout or GPU?)", f"{tuple(tsm.shape)}")
    check_tensor("num_splits", num_splits, dtype=torch.int32, ndim=1, device=device, contiguous=True)
    if num_splits.shape[0] != b + 1:
        fail("num_splits", f"of shape ({b + 1},) = batch + 1 (metadata built for another batch size?)",
             f"{tuple(num_splits.shape)}")
    if values:
        ns = num_splits.cpu()
        d = ns[1:] - ns[:-1]
        if ns[0] != 0 or bool((d < 1).any()) or int(ns[-1]) > b + parts:
            raise ValueError("hopperkit: num_splits is not a schedule for this batch (it must start at 0, grow by "
                             f">= 1 per request and end at <= batch + num_sm_parts = {b + parts}); got {ns.tolist()[:16]}")


def _resolve_metadata(
    tile_scheduler_metadata, num_splits, cfg: _MetaConfig, lengths: torch.Tensor, parts: int, values: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    sparse = cfg.topk is not None
    if isinstance(tile_scheduler_metadata, FlashMLASchedMeta):
        meta = tile_scheduler_metadata
        if num_splits is not None:
            fail("num_splits", "None when tile_scheduler_metadata is a FlashMLASchedMeta", describe(num_splits))
        if not meta.have_initialized:
            meta.tile_scheduler_metadata, meta.num_splits = _schedule(lengths, parts, sparse)
            meta.config = cfg
            meta.have_initialized = True
        elif meta.config != cfg:
            diffs = [f"{k}: {getattr(meta.config, k)} -> {getattr(cfg, k)}" for k in vars(cfg)
                     if getattr(meta.config, k) != getattr(cfg, k)]
            raise ValueError("hopperkit: this FlashMLASchedMeta was filled by a call with another configuration ("
                             + ", ".join(diffs) + "); use a new get_mla_metadata() object for it")
        tsm, ns = meta.tile_scheduler_metadata, meta.num_splits
    else:
        tsm, ns = tile_scheduler_metadata, num_splits
    _check_metadata(tsm, ns, cfg.b, parts, lengths.device, values)
    return tsm, ns


def flash_mla_with_kvcache(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    block_table: Optional[torch.Tensor],
    cache_seqlens: Optional[torch.Tensor],
    head_dim_v: int,
    tile_scheduler_metadata: Union[torch.Tensor, FlashMLASchedMeta],
    num_splits: Optional[torch.Tensor] = None,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    is_fp8_kvcache: bool = False,
    indices: Optional[torch.Tensor] = None,
    attn_sink: Optional[torch.Tensor] = None,
    extra_k_cache: Optional[torch.Tensor] = None,
    extra_indices_in_kvcache: Optional[torch.Tensor] = None,
    topk_length: Optional[torch.Tensor] = None,
    extra_topk_length: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """MLA decode attention over a paged KV cache (FlashMLA's function of the same name).

    Dense (``indices is None``):
      q [b, s_q, h_q, 576] bf16/fp16 (last dim contiguous); k_cache [num_blocks, 64, h_k, 576] same
      dtype; block_table int32 [b, max_blocks]; cache_seqlens int32 [b]; head_dim_v 512; any h_q with
      h_q % h_k == 0. ``causal`` is bottom-right aligned (query token j of s_q sees keys
      [0, seqlen - (s_q - 1 - j))) and ignored for s_q == 1.
    Sparse (``indices`` int32 [b, s_q, topk]): k_cache [num_blocks, page_block_size, 1, 656] in the
      FP8 V3.2 layout (float8_e4m3fn / uint8 / int8; ``is_fp8_kvcache=True``), or bf16 [.., 1, 576];
      index = block * page_block_size + offset, -1 = unused; optional ``topk_length`` int32 [b] and
      ``attn_sink`` float32 [h_q]; h_k = 1; block_table and cache_seqlens are ignored.

    ``softmax_scale`` defaults to 576 ** -0.5. Returns ``out`` [b, s_q, h_q, 512] (q's dtype; bf16 in
    sparse mode) and ``lse`` float32 [b, h_q, s_q] (natural log; +inf, with out 0, for rows that
    attend to nothing; the sparse LSE is a transposed view and excludes the sink).

    The parameters are FlashMLA's, in its order. ``extra_k_cache``, ``extra_indices_in_kvcache`` and
    ``extra_topk_length`` (a second cache read by FlashMLA's sparse decode of its 512-dim MODEL1
    layout) must be None: that layout is not supported.
    """
    for name, v in (("extra_k_cache", extra_k_cache), ("extra_indices_in_kvcache", extra_indices_in_kvcache),
                    ("extra_topk_length", extra_topk_length)):
        if v is not None:
            fail(name, "None (the second cache of FlashMLA's MODEL1 sparse decode; hopperkit reads the V3.2 "
                 "layouts only)", describe(v))
    if indices is None and attn_sink is None and topk_length is None and is_fp8_kvcache is False:
        try:
            fast = _fast_dense_decode(q, k_cache, block_table, cache_seqlens, head_dim_v, tile_scheduler_metadata,
                                      num_splits, softmax_scale, causal)
        except (ValueError, TypeError):
            # The op's own rejection of an input: the checks below raise the documented error. Any
            # other failure (a CUDA or launcher error) propagates rather than rerunning the call.
            fast = None
        if fast is not None:
            return fast
    check_tensor("q", q, dtype=(torch.bfloat16, torch.float16), ndim=4, last_dim_contiguous=True)
    b, s_q, h_q, d_qk = q.shape
    device = q.device
    if b < 1 or s_q < 1 or h_q < 1:
        fail("q", "non-empty [b, s_q, h_q, 576]", f"shape {tuple(q.shape)}")
    if b > _MAX_BATCH:
        fail("q", f"a batch of at most {_MAX_BATCH} requests", f"batch {b}")
    if d_qk != D_QK:
        fail("q", f"of head dim {D_QK} (512 NoPE + 64 RoPE)", f"head dim {d_qk}")
    if head_dim_v != D_V or isinstance(head_dim_v, bool):
        fail("head_dim_v", str(D_V), repr(head_dim_v))
    if s_q * h_q > _MAX_QUERY_ROWS:
        fail("q", f"at most {_MAX_QUERY_ROWS} query rows per request (s_q * h_q, the combine grid)", f"s_q * h_q = {s_q * h_q}")
    if softmax_scale is None:
        softmax_scale = d_qk ** -0.5
    elif isinstance(softmax_scale, bool) or not isinstance(softmax_scale, (int, float)) or not math.isfinite(softmax_scale):
        fail("softmax_scale", "a finite float or None", describe(softmax_scale), TypeError)
    elif abs(softmax_scale) > _MAX_SOFTMAX_SCALE:
        fail("softmax_scale", f"at most {_MAX_SOFTMAX_SCALE:.4g} in magnitude (finite as float32 after the log2(e) factor)",
             repr(softmax_scale))
    check_bool("causal", causal)
    check_bool("is_fp8_kvcache", is_fp8_kvcache)
    check_tensor("k_cache", k_cache, ndim=4, device=device, last_dim_contiguous=True)
    num_sms = get_num_sms(device)

    if indices is not None:
        return _sparse(q, k_cache, indices, float(softmax_scale), causal, is_fp8_kvcache, attn_sink, topk_length,
                       tile_scheduler_metadata, num_splits, num_sms)

    for name, v in (("attn_sink", attn_sink), ("topk_length", topk_length)):
        if v is not None:
            fail(name, "None in dense mode (it needs indices)", describe(v))
    check_tensor("k_cache", k_cache, dtype=q.dtype, shape=(None, PAGE_BLOCK_SIZE, None, D_QK))
    if is_fp8_kvcache:
        fail("is_fp8_kvcache", "False in dense mode (the FP8 cache is read through indices, sparse mode)", "True")
    num_blocks, _, h_k, _ = k_cache.shape
    if num_blocks < 1 or h_k < 1:
        fail("k_cache", f"[num_blocks >= 1, {PAGE_BLOCK_SIZE}, h_k >= 1, {D_QK}]", f"shape {tuple(k_cache.shape)}")
    if h_q % h_k != 0:
        fail("q", f"a head count divisible by the KV head count h_k={h_k}", f"h_q={h_q}")
    check_tensor("block_table", block_table, dtype=torch.int32, ndim=2, device=device, last_dim_contiguous=True)
    if block_table.shape[0] != b or block_table.shape[1] < 1:
        fail("block_table", f"of shape ({b}, max_blocks >= 1)", f"{tuple(block_table.shape)}")
    check_tensor("cache_seqlens", cache_seqlens, dtype=torch.int32, shape=(b,), device=device, contiguous=True)

    kernel = _ops.use_kernel("flash_mla_with_kvcache", device)
    values = check_values(kernel, device)
    if values:
        lens = cache_seqlens.cpu()
        if bool((lens < 0).any()):
            fail("cache_seqlens", "non-negative", str(lens.tolist()[:16]))
        need = (lens + PAGE_BLOCK_SIZE - 1) // PAGE_BLOCK_SIZE
        if int(need.max()) > block_table.shape[1]:
            i = int(need.argmax())
            raise ValueError(f"hopperkit: cache_seqlens[{i}] = {int(lens[i])} needs {int(need[i])} blocks but block_table "
                             f"has {block_table.shape[1]} columns (seqlen beyond the block table)")
        used = torch.arange(block_table.shape[1])[None, :] < need[:, None]
        bt = block_table.cpu()[used]
        if bt.numel() and (int(bt.min()) < 0 or int(bt.max()) >= num_blocks):
            raise ValueError(f"hopperkit: block_table holds block ids outside [0, {num_blocks}) within the used "
                             f"blocks (min {int(bt.min())}, max {int(bt.max())})")

    cfg = _MetaConfig(b, s_q, h_q, PAGE_BLOCK_SIZE, h_k, causal, False, None)
    parts = _sched_ref.num_sm_parts_dense(num_sms, s_q, h_q, h_k)
    tsm, ns = _resolve_metadata(tile_scheduler_metadata, num_splits, cfg, cache_seqlens, parts, values)
    if kernel:
        if softmax_scale <= 0:
            fail("softmax_scale", "positive (the kernel takes row maxima of the scaled scores)", repr(softmax_scale))
        if not _aligned_16b(q):
            # The kernel copies Q rows in 16-byte pieces. A fresh allocation is aligned; contiguous()
            # would return a contiguous view at an unaligned address unchanged.
            q = q.clone(memory_format=torch.contiguous_format)
        if not _aligned_16b(k_cache):
            fail("k_cache", "16-byte aligned with strides that are multiples of 8 elements (TMA)",
                 f"strides {k_cache.stride()}")
        return torch.ops.hopperkit.mla_dense_decode(q, k_cache, block_table, cache_seqlens, tsm, ns,
                                                    float(softmax_scale), bool(causal))
    return _mla_ref.flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v=D_V,
                                           softmax_scale=softmax_scale, causal=causal)


def _fast_dense_decode(q, k_cache, block_table, cache_seqlens, head_dim_v, tile_scheduler_metadata, num_splits,
                       softmax_scale, causal) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
    """The host-cheap lane of a dense decode that goes to the kernel: the C++ op checks shapes,
    dtypes, devices and strides itself before launching, so only what it cannot know is checked
    here (the metadata's head layout, the lazy object's configuration). None: take the full path."""
    # Argument types first: the dispatcher raises RuntimeError for a non-tensor, which the caller
    # does not take for an input rejection.
    if not all(isinstance(t, torch.Tensor) for t in (q, k_cache, block_table, cache_seqlens)):
        return None
    if q.dim() != 4 or k_cache.dim() != 4:
        return None
    device = q.device
    if head_dim_v != D_V or isinstance(head_dim_v, bool) or type(causal) is not bool:
        return None
    if not _ops.use_kernel("flash_mla_with_kvcache", device) or check_values(True, device):
        return None
    b, s_q, h_q, _ = q.shape
    h_k = k_cache.shape[2]
    if h_k < 1 or s_q < 1 or h_q < 1 or h_q % h_k or not 1 <= b <= _MAX_BATCH or not _aligned_16b(q):
        return None
    if s_q * h_q > _MAX_QUERY_ROWS:
        return None
    if softmax_scale is None:
        softmax_scale = D_QK ** -0.5
    elif (type(softmax_scale) not in (float, int) or not math.isfinite(softmax_scale) or softmax_scale <= 0
          or softmax_scale > _MAX_SOFTMAX_SCALE):
        return None
    if isinstance(tile_scheduler_metadata, FlashMLASchedMeta):
        meta = tile_scheduler_metadata
        if num_splits is not None or not meta.have_initialized:
            return None
        if meta.config != _MetaConfig(b, s_q, h_q, PAGE_BLOCK_SIZE, h_k, causal, False, None):
            return None
        tsm, ns = meta.tile_scheduler_metadata, meta.num_splits
    else:
        tsm, ns = tile_scheduler_metadata, num_splits
    if not isinstance(tsm, torch.Tensor) or not isinstance(ns, torch.Tensor) or tsm.dim() != 2:
        return None
    if tsm.shape[0] != _sched_ref.num_sm_parts_dense(get_num_sms(device), s_q, h_q, h_k):
        return None  # metadata for another head layout or GPU: the full path says so
    return torch.ops.hopperkit.mla_dense_decode(q, k_cache, block_table, cache_seqlens, tsm, ns,
                                                float(softmax_scale), causal)


def _aligned_16b(t: torch.Tensor) -> bool:
    return t.data_ptr() % 16 == 0 and all(st % 8 == 0 for st in t.stride()[:-1])


def _sparse(q, k_cache, indices, softmax_scale, causal, is_fp8_kvcache, attn_sink, topk_length,
            tile_scheduler_metadata, num_splits, num_sms):
    b, s_q, h_q, _ = q.shape
    device = q.device
    if q.dtype != torch.bfloat16:
        fail("q", "bfloat16 in sparse mode", str(q.dtype), TypeError)
    if causal:
        fail("causal", "False in sparse mode (indices already select the keys)", "True")
    check_tensor("indices", indices, dtype=torch.int32, ndim=3, device=device, last_dim_contiguous=True)
    if indices.shape[:2] != (b, s_q) or indices.shape[2] < 1:
        fail("indices", f"of shape ({b}, {s_q}, topk) with topk >= 1", f"{tuple(indices.shape)}")
    topk = indices.shape[2]
    num_blocks, page_block_size, h_k, width = k_cache.shape
    if h_k != 1:
        fail("k_cache", "a single KV head in sparse mode ([num_blocks, page_block_size, 1, bytes])", f"h_k={h_k}")
    if k_cache.dtype in _FP8_CACHE_DTYPES:
        if width != KV_FP8_BYTES_PER_TOKEN:
            fail("k_cache", f"{KV_FP8_BYTES_PER_TOKEN} bytes per token (the FP8 V3.2 layout)", f"last dim {width}")
        if page_block_size > 1 and k_cache.stride(1) != KV_FP8_BYTES_PER_TOKEN:
            fail("k_cache", f"token rows {KV_FP8_BYTES_PER_TOKEN} bytes apart (stride(1) == 656)", f"strides {k_cache.stride()}")
        if not is_fp8_kvcache:
            fail("is_fp8_kvcache", "True for an FP8 (656-byte) cache", "False")
    elif k_cache.dtype == torch.bfloat16:
        if width != D_QK:
            fail("k_cache", f"[num_blocks, page_block_size, 1, {D_QK}] for a bf16 cache", f"shape {tuple(k_cache.shape)}")
        if is_fp8_kvcache:
            fail("is_fp8_kvcache", "False for a bf16 cache", "True")
    else:
        fail("k_cache", "float8_e4m3fn/uint8/int8 (656-byte FP8 layout) or bfloat16 in sparse mode", str(k_cache.dtype), TypeError)
    if topk_length is not None:
        check_tensor("topk_length", topk_length, dtype=torch.int32, shape=(b,), device=device, contiguous=True)
    if attn_sink is not None:
        check_tensor("attn_sink", attn_sink, dtype=torch.float32, shape=(h_q,), device=device, contiguous=True)

    kernel = _ops.use_kernel("flash_mla_with_kvcache", device)
    values = check_values(kernel, device)
    if values:
        n_slots = num_blocks * page_block_size
        idx = indices.cpu()
        if topk_length is not None:
            tl = topk_length.cpu()
            if bool((tl < 0).any()) or bool((tl > topk).any()):
                fail("topk_length", f"in [0, topk={topk}]", str(tl.tolist()[:16]))
            live = torch.arange(topk)[None, None, :] < tl[:, None, None]
            idx = torch.where(live, idx, -1)
        bad = (idx < -1) | (idx >= n_slots)
        if bool(bad.any()):
            pos = tuple(int(x) for x in bad.nonzero()[0])
            raise ValueError(f"hopperkit: indices{list(pos)} = {int(idx[pos])} is outside [-1, {n_slots}) "
                             f"(num_blocks * page_block_size); only -1 marks an unused entry")

    lengths = topk_length if topk_length is not None else torch.full((b,), topk, dtype=torch.int32, device=device)
    cfg = _MetaConfig(b, s_q, h_q, page_block_size, 1, False, bool(is_fp8_kvcache), topk)
    parts = _sched_ref.num_sm_parts_sparse(num_sms, s_q, h_q)
    _resolve_metadata(tile_scheduler_metadata, num_splits, cfg, lengths, parts, values)
    return _mla_ref.flash_mla_sparse_decode(q, k_cache, indices, softmax_scale=softmax_scale, head_dim_v=D_V,
                                            topk_length=topk_length, attn_sink=attn_sink)


def mla_combine(
    o_accum: torch.Tensor,
    lse_accum: torch.Tensor,
    num_splits: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    attn_sink: Optional[torch.Tensor] = None,
) -> None:
    """Merge split-KV partials in place (the second kernel of a split decode).

    o_accum float32 [rows, h_k, s_q·h_q/h_k, 512] and lse_accum float32 [rows, h_k, s_q·h_q/h_k]
    (base-2 LSE) hold one row per split, request i owning rows [num_splits[i], num_splits[i+1]);
    out [b, s_q, h_q, 512] (bf16/fp16) and lse float32 [b, h_q, s_q] (natural log) receive the merged
    result for every request with more than one split; other requests are left untouched.
    See ``hopperkit.reference.scheduler.mla_combine`` for the exact arithmetic.
    """
    check_tensor("out", out, dtype=(torch.bfloat16, torch.float16), ndim=4, last_dim_contiguous=True)
    b, s_q, h_q, d_v = out.shape
    if d_v != D_V:
        fail("out", f"[b, s_q, h_q, {D_V}]", f"shape {tuple(out.shape)}")
    check_tensor("lse_accum", lse_accum, dtype=torch.float32, ndim=3, contiguous=True)
    rows, h_k, r = lse_accum.shape
    if rows < 1 or h_k < 1 or h_q % h_k != 0 or r != s_q * (h_q // h_k):
        fail("lse_accum", f"[rows >= 1, h_k, s_q*h_q/h_k] with h_q % h_k == 0 (h_q={h_q}, s_q={s_q})",
             f"shape {tuple(lse_accum.shape)}")
    check_tensor("o_accum", o_accum, dtype=torch.float32, shape=(rows, h_k, r, D_V), contiguous=True)
    check_tensor("num_splits", num_splits, dtype=torch.int32, shape=(b + 1,), contiguous=True)
    check_tensor("lse", lse, dtype=torch.float32, shape=(b, h_q, s_q))
    if attn_sink is not None:
        check_tensor("attn_sink", attn_sink, dtype=torch.float32, shape=(h_q,), contiguous=True)
    device = check_same_device([("out", out), ("o_accum", o_accum), ("lse_accum", lse_accum),
                                ("num_splits", num_splits), ("lse", lse), ("attn_sink", attn_sink)])
    # Every element of out and lse is written by one thread.
    check_no_self_overlap("out", out)
    check_no_self_overlap("lse", lse)
    if s_q * h_q > _MAX_QUERY_ROWS:
        fail("out", f"at most {_MAX_QUERY_ROWS} query rows per request (s_q * h_q, the combine grid)",
             f"s_q * h_q = {s_q * h_q}")
    kernel = _ops.use_kernel("mla_combine", device)
    if check_values(kernel, device):
        ns = num_splits.cpu()
        if ns[0] != 0 or bool((ns[1:] < ns[:-1]).any()) or int(ns[-1]) > rows:
            raise ValueError(f"hopperkit: num_splits must start at 0, be non-decreasing and end at <= {rows} "
                             f"(the accumulator rows); got {ns.tolist()[:16]}")
    if kernel:
        if out.stride(0) % 4 or out.stride(1) % 4 or out.stride(2) % 4 or out.data_ptr() % 8:
            fail("out", "8-byte aligned with strides that are multiples of 4 elements", f"strides {out.stride()}")
        if o_accum.data_ptr() % 16:
            fail("o_accum", "16-byte aligned (the kernel reads it in 16-byte vectors)",
                 f"an address {o_accum.data_ptr() % 16} bytes past a 16-byte boundary")
        torch.ops.hopperkit.mla_combine(o_accum, lse_accum, num_splits, out, lse, attn_sink)
    else:
        _sched_ref.mla_combine(o_accum, lse_accum, num_splits, out, lse, attn_sink)


def quantize_kv_cache(kv: torch.Tensor) -> torch.Tensor:
    """bf16 [..., 576] → uint8 [..., 656] in the FP8 V3.2 layout (4 × 128 e4m3 tiles with power-of-two
    float32 scales, then the 64 RoPE dims in bf16)."""
    check_tensor("kv", kv, dtype=torch.bfloat16)
    if kv.dim() < 1 or kv.shape[-1] != D_QK:
        fail("kv", f"[..., {D_QK}]", f"shape {tuple(kv.shape)}")
    return _kv_ref.quantize_kv_cache(kv)


def dequantize_kv_cache(kv_fp8: torch.Tensor) -> torch.Tensor:
    """uint8/int8/float8_e4m3fn [..., 656] (FP8 V3.2 layout) → bf16 [..., 576], with the kernels'
    numerics: bf16(bf16(fp8) · bf16(scale))."""
    check_tensor("kv_fp8", kv_fp8, dtype=_FP8_CACHE_DTYPES)
    if kv_fp8.dim() < 1 or kv_fp8.shape[-1] != KV_FP8_BYTES_PER_TOKEN:
        fail("kv_fp8", f"[..., {KV_FP8_BYTES_PER_TOKEN}]", f"shape {tuple(kv_fp8.shape)}")
    return _kv_ref.dequantize_kv_cache(kv_fp8)
