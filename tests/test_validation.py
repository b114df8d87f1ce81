"""Bad input gets a clear exception before anything is launched, naming the argument, and the process
can run a valid call right after. Each case runs on the CPU (reference path) and, on an SM90 machine,
on the GPU (kernel path, with value checks switched on)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import pytest
import torch

import hopperkit
from hopperkit import mla


@dataclass
class Ctx:
    """Valid inputs for every op; a case breaks one thing."""

    dev: torch.device

    def __post_init__(self):
        d = self.dev
        g = torch.Generator(device="cpu").manual_seed(0)
        self.b, self.s_q, self.h_q, self.h_k = 3, 2, 16, 1
        self.q = (torch.randn(self.b, self.s_q, self.h_q, 576, generator=g) / 10).to(torch.bfloat16).to(d)
        self.k_cache = (torch.randn(12, 64, 1, 576, generator=g) / 10).to(torch.bfloat16).to(d)
        self.block_table = torch.randperm(12, generator=g, dtype=torch.int32).view(3, 4).to(d)
        self.seqlens = torch.tensor([100, 256, 0], dtype=torch.int32, device=d)
        self.tsm, self.ns = hopperkit.get_mla_metadata(self.seqlens, self.s_q * self.h_q, 1)
        # sparse
        self.kv_fp8 = hopperkit.quantize_kv_cache(self.k_cache.view(12, 64, 1, 576))
        self.indices = torch.randint(-1, 12 * 64, (self.b, self.s_q, 64), generator=g, dtype=torch.int32).to(d)
        self.topk_length = torch.tensor([64, 10, 0], dtype=torch.int32, device=d)
        self.sink = torch.randn(self.h_q, generator=g).to(d)
        # GEMM
        self.A, self.SFA = hopperkit.per_token_cast_to_fp8(torch.randn(8, 256, generator=g).to(d))
        self.B, self.SFB = hopperkit.per_block_cast_to_fp8(torch.randn(128, 256, generator=g).to(d))
        self.B1, self.SFB1 = hopperkit.per_token_cast_to_fp8(torch.randn(128, 256, generator=g).to(d))
        self.D = torch.empty(8, 128, dtype=torch.bfloat16, device=d)
        self.D32 = torch.zeros(8, 128, dtype=torch.float32, device=d)
        self.GB = torch.randn(2, 128, 256, generator=g).to(torch.float8_e4m3fn).to(d)
        self.GSFB = torch.rand(2, 1, 2, generator=g).to(d) + 0.5
        self.m_indices = torch.tensor([0] * 5 + [-1] * 123 + [1] * 128, dtype=torch.int32, device=d)
        self.Ag, self.SFAg = hopperkit.per_token_cast_to_fp8(torch.randn(256, 256, generator=g).to(d))
        self.Dg = torch.empty(256, 128, dtype=torch.bfloat16, device=d)
        self.Am = torch.randn(2, 64, 256, generator=g).to(torch.float8_e4m3fn).to(d)
        self.SFAm = torch.rand(2, 64, 2, generator=g).to(d) + 0.5
        self.Dm = torch.empty(2, 64, 128, dtype=torch.bfloat16, device=d)
        self.masked_m = torch.tensor([5, 64], dtype=torch.int32, device=d)

    def dense(self, **kw):
        args = dict(q=self.q, k_cache=self.k_cache, block_table=self.block_table, cache_seqlens=self.seqlens,
                    head_dim_v=512, tile_scheduler_metadata=self.tsm, num_splits=self.ns, causal=True)
        args.update(kw)
        return hopperkit.flash_mla_with_kvcache(**args)

    def sparse(self, **kw):
        meta, _ = hopperkit.get_mla_metadata()
        args = dict(q=self.q, k_cache=self.kv_fp8, block_table=None, cache_seqlens=None, head_dim_v=512,
                    tile_scheduler_metadata=meta, is_fp8_kvcache=True, indices=self.indices,
                    topk_length=self.topk_length, attn_sink=self.sink)
        args.update(kw)
        return hopperkit.flash_mla_with_kvcache(**args)

    def fp8(self, a=None, b=None, d=None, **kw):
        a = (self.A, self.SFA) if a is None else a
        b = (self.B, self.SFB) if b is None else b
        return hopperkit.fp8_gemm_nt(a, b, self.D if d is None else d, **kw)

    def combine(self, ns=None, out=None, o_accum=None):
        rows = self.b + self.tsm.shape[0]
        o = torch.randn(rows, 1, self.s_q * self.h_q, 512, device=self.dev) if o_accum is None else o_accum
        lse = torch.randn(rows, 1, self.s_q * self.h_q, device=self.dev)
        if out is None:
            out = torch.empty(self.b, self.s_q, self.h_q, 512, dtype=torch.bfloat16, device=self.dev)
        lse_out = torch.empty(self.b, self.h_q, self.s_q, device=self.dev)
        return mla.mla_combine(o, lse, self.ns if ns is None else ns, out, lse_out)


def _lazy_mismatch(c: Ctx):
    meta, _ = hopperkit.get_mla_metadata()
    c.dense(tile_scheduler_metadata=meta, num_splits=None)
    c.dense(tile_scheduler_metadata=meta, num_splits=None, causal=False)


def _other_batch_metadata(c: Ctx):
    tsm, ns = hopperkit.get_mla_metadata(c.seqlens[:2].contiguous(), c.s_q * c.h_q, 1)
    c.dense(tile_scheduler_metadata=tsm, num_splits=ns)


def _other_heads_metadata(c: Ctx):
    tsm, ns = hopperkit.get_mla_metadata(c.seqlens, c.s_q * 128, 1)  # built for h_q = 128
    c.dense(tile_scheduler_metadata=tsm, num_splits=ns)


# (id, call, exception type, text that must appear in the message)
CASES: list[tuple[str, Callable[[Ctx], object], type, str]] = [
    # MLA dense
    ("q_dtype", lambda c: c.dense(q=c.q.float()), TypeError, "q must be"),
    ("q_ndim", lambda c: c.dense(q=c.q[0]), ValueError, "q must be a 4-D"),
    ("q_head_dim", lambda c: c.dense(q=c.q[..., :512]), ValueError, "head dim 576"),
    ("q_last_dim_strided", lambda c: c.dense(q=torch.cat([c.q, c.q], -1)[..., ::2]), ValueError, "stride(-1) == 1"),
    ("head_dim_v", lambda c: c.dense(head_dim_v=576), ValueError, "head_dim_v"),
    ("k_cache_dtype", lambda c: c.dense(k_cache=c.k_cache.half()), TypeError, "k_cache"),
    ("k_cache_page_size", lambda c: c.dense(k_cache=c.k_cache.view(24, 32, 1, 576)), ValueError, "k_cache"),
    ("h_q_not_multiple_of_h_k", lambda c: c.dense(q=c.q[:, :, :3], k_cache=c.k_cache.view(12, 64, 2, 288).repeat(1, 1, 1, 2),
                                                 tile_scheduler_metadata=hopperkit.get_mla_metadata()[0], num_splits=None),
     ValueError, "h_k=2"),
    ("block_table_dtype", lambda c: c.dense(block_table=c.block_table.long()), TypeError, "block_table"),
    ("block_table_batch", lambda c: c.dense(block_table=c.block_table[:2]), ValueError, "block_table"),
    ("seqlens_shape", lambda c: c.dense(cache_seqlens=c.seqlens[:2]), ValueError, "cache_seqlens"),
    ("seqlen_beyond_block_table", lambda c: c.dense(cache_seqlens=torch.tensor([100, 257, 0], dtype=torch.int32, device=c.dev)),
     ValueError, "beyond the block table"),
    ("seqlen_negative", lambda c: c.dense(cache_seqlens=torch.tensor([100, -1, 0], dtype=torch.int32, device=c.dev)),
     ValueError, "non-negative"),
    ("block_id_out_of_range", lambda c: c.dense(block_table=c.block_table.masked_fill(c.block_table == c.block_table[1, 0], 99)),
     ValueError, "block ids outside"),
    ("metadata_other_batch", _other_batch_metadata, ValueError, "another batch size"),
    ("metadata_other_heads", _other_heads_metadata, ValueError, "another head layout"),
    ("lazy_metadata_other_config", _lazy_mismatch, ValueError, "causal: True -> False"),
    ("lazy_metadata_with_num_splits", lambda c: c.dense(tile_scheduler_metadata=hopperkit.get_mla_metadata()[0]),
     ValueError, "num_splits must be None"),
    ("softmax_scale_nan", lambda c: c.dense(softmax_scale=math.nan), TypeError, "softmax_scale"),
    ("softmax_scale_past_float32", lambda c: c.dense(softmax_scale=1e300), ValueError, "softmax_scale"),
    ("k_cache_no_blocks", lambda c: c.dense(k_cache=c.k_cache[:0]), ValueError, "k_cache"),
    ("k_cache_no_kv_heads", lambda c: c.dense(k_cache=c.k_cache[:, :, :0]), ValueError, "k_cache"),
    ("block_table_no_columns", lambda c: c.dense(block_table=c.block_table[:, :0],
                                                 cache_seqlens=torch.zeros(3, dtype=torch.int32, device=c.dev)),
     ValueError, "block_table"),
    # The combine that follows the decode takes at most 131070 query rows per request.
    ("q_too_many_rows", lambda c: c.dense(q=c.q[:, :1, :1].expand(3, 1025, 128, 576)), ValueError, "131070"),
    ("causal_not_bool", lambda c: c.dense(causal=1), TypeError, "causal"),
    ("sink_in_dense", lambda c: c.dense(attn_sink=c.sink), ValueError, "attn_sink"),
    # MLA sparse
    ("sparse_index_out_of_range", lambda c: c.sparse(indices=c.indices.masked_fill(c.indices == c.indices[0, 0, 0], 12 * 64)),
     ValueError, "outside [-1, 768)"),
    ("sparse_index_below_minus_one", lambda c: c.sparse(indices=c.indices.masked_fill(c.indices == c.indices[0, 0, 0], -2)),
     ValueError, "only -1 marks"),
    ("sparse_indices_shape", lambda c: c.sparse(indices=c.indices[:, :1]), ValueError, "indices"),
    ("sparse_q_fp16", lambda c: c.sparse(q=c.q.half()), TypeError, "bfloat16 in sparse mode"),
    ("sparse_causal", lambda c: c.sparse(causal=True), ValueError, "causal"),
    ("sparse_cache_width", lambda c: c.sparse(k_cache=c.kv_fp8[..., :576]), ValueError, "656 bytes"),
    ("sparse_fp8_flag", lambda c: c.sparse(is_fp8_kvcache=False), ValueError, "is_fp8_kvcache"),
    ("sparse_topk_length_range", lambda c: c.sparse(topk_length=c.topk_length + 1), ValueError, "topk_length"),
    ("sparse_sink_shape", lambda c: c.sparse(attn_sink=c.sink[:8]), ValueError, "attn_sink"),
    ("sparse_cache_two_heads", lambda c: c.sparse(k_cache=c.kv_fp8.view(12, 32, 2, 656)), ValueError, "single KV head"),
    # metadata
    ("metadata_seqlens_dtype", lambda c: hopperkit.get_mla_metadata(c.seqlens.long(), 32, 1), TypeError, "cache_seqlens"),
    ("metadata_heads_k_zero", lambda c: hopperkit.get_mla_metadata(c.seqlens, 32, 0), ValueError, "num_heads_k"),
    ("metadata_topk_without_heads_q", lambda c: hopperkit.get_mla_metadata(c.seqlens, 32, 1, topk=64), TypeError, "num_heads_q"),
    ("combine_num_splits_size", lambda c: c.combine(ns=c.ns[:-1]), ValueError, "num_splits"),
    ("combine_num_splits_values", lambda c: c.combine(ns=c.ns + 1000), ValueError, "num_splits"),
    ("combine_out_overlaps_itself", lambda c: c.combine(out=torch.empty(1, c.s_q, c.h_q, 512, dtype=torch.bfloat16,
                                                                        device=c.dev).expand(c.b, -1, -1, -1)),
     ValueError, "out must be an output that does not overlap itself"),
    # GEMM
    ("fp8_a_not_fp8", lambda c: c.fp8(a=(c.A.bfloat16(), c.SFA)), TypeError, "a[0]"),
    ("fp8_a_not_pair", lambda c: c.fp8(a=c.A), TypeError, "a must be a pair"),
    ("fp8_sfa_shape", lambda c: c.fp8(a=(c.A, c.SFA[:, :1])), ValueError, "a[1]"),
    ("fp8_sfb_per_row_with_1d2d", lambda c: c.fp8(b=(c.B1, c.SFB1)), ValueError, "b[1]"),
    ("fp8_d_dtype", lambda c: c.fp8(d=c.D.half()), TypeError, "d must be"),
    ("fp8_1d2d_with_c", lambda c: c.fp8(c=c.D), ValueError, "c must be None"),
    ("fp8_1d1d_without_c", lambda c: c.fp8(b=(c.B1, c.SFB1), d=c.D32, recipe=(1, 1, 128)), ValueError, "c must be"),
    ("fp8_k_not_16_aligned", lambda c: c.fp8(a=(c.A[:, :200].contiguous(), c.SFA), b=(c.B[:, :200].contiguous(), c.SFB)), ValueError, "16-byte"),
    ("fp8_a_mn_major", lambda c: c.fp8(a=(c.A.T.contiguous().T, c.SFA)), ValueError, "K-major"),
    ("fp8_recipe", lambda c: c.fp8(recipe=(1, 64, 128)), ValueError, "recipe"),
    ("fp8_b_rows_overlap", lambda c: c.fp8(b=(c.B.as_strided(c.B.shape, (16, 1)), c.SFB)), ValueError, "overlap"),
    ("fp8_recipe_not_a_sequence", lambda c: c.fp8(recipe=128), ValueError, "recipe"),
    ("fp8_n_not_multiple_of_8", lambda c: c.fp8(b=(c.B[:12], c.SFB), d=torch.empty(8, 12, dtype=torch.bfloat16, device=c.dev)[:1],
                                                a=(c.A[:1], c.SFA[:1])), ValueError, "multiple of 8"),
    ("fp8_nn_b_not_tensors", lambda c: hopperkit.fp8_gemm_nn((c.A, c.SFA), (1, 2), c.D), TypeError, "b[0]"),
    ("bf16_nn_b_not_tensor", lambda c: hopperkit.bf16_gemm_nn(c.A.bfloat16(), [1], c.D), TypeError, "b must be"),
    # Outputs are written while the inputs are still read: they share no memory with them.
    ("bf16_d_is_a", lambda c: (lambda x: hopperkit.bf16_gemm_nt(x, torch.randn(64, 64, device=c.dev).bfloat16(), x))(
        torch.randn(8, 64, device=c.dev).bfloat16()), ValueError, "d must be memory that a does not use"),
    ("fp8_d_inside_b", lambda c: c.fp8(d=c.B.view(torch.bfloat16)[:8]), ValueError, "d must be memory that b[0] does not use"),
    ("masked_d_is_a", lambda c: hopperkit.m_grouped_fp8_gemm_nt_masked(
        (c.Am, c.SFAm), (c.GB, c.GSFB), c.Am.view(torch.bfloat16), c.masked_m, 32),
     ValueError, "d must be memory that a[0] does not use"),
    ("k_grouped_layout_a_list", lambda c: hopperkit.k_grouped_fp8_gemm_nt_contiguous(
        (c.A, c.SFA[:, :2].contiguous()), (c.B, c.SFB1[:, :2].contiguous()), torch.zeros(2, 8, 128, device=c.dev), [128, 128],
        [128, 128], c=torch.zeros(2, 8, 128, device=c.dev)), TypeError, "grouped_layout"),
    ("masked_expected_m_huge", lambda c: hopperkit.m_grouped_fp8_gemm_nt_masked(
        (c.Am, c.SFAm), (c.GB, c.GSFB), c.Dm, c.masked_m, 2**40), ValueError, "expected_m"),
    ("grouped_b_expanded", lambda c: hopperkit.m_grouped_fp8_gemm_nt_masked(
        (c.Am, c.SFAm), (c.GB[:1].expand(2, -1, -1), c.GSFB), c.Dm, c.masked_m, 32), ValueError, "overlap"),
    ("grouped_expert_id_too_large", lambda c: hopperkit.m_grouped_fp8_gemm_nt_contiguous(
        (c.Ag, c.SFAg), (c.GB, c.GSFB), c.Dg, c.m_indices.masked_fill(c.m_indices == 1, 2)), ValueError, "expert ids in [0, 2)"),
    ("grouped_misaligned_segment", lambda c: hopperkit.m_grouped_fp8_gemm_nt_contiguous(
        (c.Ag, c.SFAg), (c.GB, c.GSFB), c.Dg, torch.roll(c.m_indices, 3)), ValueError, "segments"),
    ("masked_count_too_large", lambda c: hopperkit.m_grouped_fp8_gemm_nt_masked(
        (c.Am, c.SFAm), (c.GB, c.GSFB), c.Dm, c.masked_m + 1, 32), ValueError, "masked_m"),
    ("masked_expected_m", lambda c: hopperkit.m_grouped_fp8_gemm_nt_masked(
        (c.Am, c.SFAm), (c.GB, c.GSFB), c.Dm, c.masked_m, 0), ValueError, "expected_m"),
    ("masked_group_mismatch", lambda c: hopperkit.m_grouped_fp8_gemm_nt_masked(
        (c.Am, c.SFAm), (c.GB[:1], c.GSFB[:1]), c.Dm, c.masked_m, 32), ValueError, "b[0]"),
    ("k_grouped_ks_alignment", lambda c: hopperkit.k_grouped_fp8_gemm_nt_contiguous(
        (c.A, c.SFA), (c.B, c.SFB), torch.zeros(2, 8, 128, device=c.dev), [100, 156],
        torch.tensor([100, 156], dtype=torch.int32, device=c.dev), c=torch.zeros(2, 8, 128, device=c.dev)), ValueError, "ks"),
    ("k_grouped_layout_mismatch", lambda c: hopperkit.k_grouped_fp8_gemm_nt_contiguous(
        (c.A, c.SFA[:, :2].contiguous()), (c.B, c.SFB1[:, :2].contiguous()), torch.zeros(2, 8, 128, device=c.dev), [128, 128],
        torch.tensor([256, 0], dtype=torch.int32, device=c.dev), c=torch.zeros(2, 8, 128, device=c.dev)), ValueError, "grouped_layout"),
    ("bf16_k_mismatch", lambda c: hopperkit.bf16_gemm_nt(torch.randn(8, 64, device=c.dev).bfloat16(),
                                                          torch.randn(16, 32, device=c.dev).bfloat16(),
                                                          torch.empty(8, 16, device=c.dev).bfloat16()), ValueError, "b must be"),
    ("bf16_c_dtype", lambda c: hopperkit.bf16_gemm_nt(torch.randn(8, 64, device=c.dev).bfloat16(),
                                                       torch.randn(16, 64, device=c.dev).bfloat16(),
                                                       torch.empty(8, 16, device=c.dev).bfloat16(),
                                                       c=torch.zeros(8, 16, device=c.dev)), TypeError, "c must be"),
    ("bf16_d_column_major", lambda c: hopperkit.bf16_gemm_nt(torch.randn(8, 64, device=c.dev).bfloat16(),
                                                              torch.randn(16, 64, device=c.dev).bfloat16(),
                                                              torch.empty(16, 8, device=c.dev).bfloat16().T), ValueError, "d must be"),
    # GEMM outputs are written one element per thread: D must not overlap itself, and C is D itself or
    # shares no memory with D.
    ("bf16_d_expanded", lambda c: hopperkit.bf16_gemm_nt(torch.randn(8, 64, device=c.dev).bfloat16(),
                                                          torch.randn(16, 64, device=c.dev).bfloat16(),
                                                          torch.empty(1, 16, device=c.dev).bfloat16().expand(8, 16)),
     ValueError, "d must be an output that does not overlap itself"),
    ("bf16_c_overlaps_d", lambda c: (lambda buf: hopperkit.bf16_gemm_nt(
        torch.randn(8, 64, device=c.dev).bfloat16(), torch.randn(16, 64, device=c.dev).bfloat16(), buf[:8], c=buf[1:]))(
        torch.zeros(9, 16, dtype=torch.bfloat16, device=c.dev)), ValueError, "c must be d itself"),
    ("fp8_1d1d_d_rows_overlap", lambda c: c.fp8(b=(c.B1, c.SFB1), d=torch.zeros(8 * 64 + 64, device=c.dev).as_strided((8, 128), (64, 1)),
                                                c=c.D32, recipe=(1, 1, 128)), ValueError, "d must be an output that does not overlap itself"),
    ("fp8_1d1d_c_overlaps_d", lambda c: (lambda buf: c.fp8(b=(c.B1, c.SFB1), d=buf[:8], c=buf[1:], recipe=(1, 1, 128)))(
        torch.zeros(9, 128, device=c.dev)), ValueError, "c must be d itself"),
    ("masked_d_groups_overlap", lambda c: hopperkit.m_grouped_fp8_gemm_nt_masked(
        (c.Am, c.SFAm), (c.GB, c.GSFB), c.Dm.view(-1)[: 96 * 128].as_strided((2, 64, 128), (32 * 128, 128, 1)), c.masked_m, 32),
     ValueError, "d must be an output that does not overlap itself"),
    ("k_grouped_c_overlaps_d", lambda c: (lambda buf: hopperkit.k_grouped_fp8_gemm_nt_contiguous(
        (c.A, c.SFA[:, :2].contiguous()), (c.B, c.SFB1[:, :2].contiguous()), buf[: 2 * 8 * 128].view(2, 8, 128), [128, 128],
        torch.tensor([128, 128], dtype=torch.int32, device=c.dev), c=buf[128:].view(2, 8, 128)))(
        torch.zeros(2 * 8 * 128 + 128, device=c.dev)), ValueError, "c must be d itself"),
    ("bf16_masked_b_mn_major", lambda c: hopperkit.m_grouped_bf16_gemm_nt_masked(
        torch.randn(2, 8, 64, device=c.dev).bfloat16(), torch.randn(2, 64, 16, device=c.dev).bfloat16().transpose(1, 2),
        torch.empty(2, 8, 16, device=c.dev).bfloat16(), torch.tensor([3, 8], dtype=torch.int32, device=c.dev), 8),
     ValueError, "b must be"),
    ("bf16_contiguous_layout_dtype", lambda c: hopperkit.m_grouped_bf16_gemm_nt_contiguous(
        torch.randn(128, 64, device=c.dev).bfloat16(), torch.randn(2, 16, 64, device=c.dev).bfloat16(),
        torch.empty(128, 16, device=c.dev).bfloat16(), torch.zeros(128, dtype=torch.int64, device=c.dev)),
     TypeError, "grouped_layout"),
    # layout and quantization
    ("tma_size_element", lambda c: hopperkit.get_tma_aligned_size(10, 3), ValueError, "element_size"),
    ("mn_major_int", lambda c: hopperkit.get_mn_major_tma_aligned_tensor(torch.ones(4, 4, dtype=torch.int32, device=c.dev)),
     TypeError, "sf"),
    ("cast_int_input", lambda c: hopperkit.per_token_cast_to_fp8(torch.ones(4, 128, dtype=torch.int32, device=c.dev)), TypeError, "x"),
    ("set_num_sms_zero", lambda c: hopperkit.set_num_sms(0), ValueError, "num_sms"),
    ("transform_sf_shape", lambda c: hopperkit.transform_sf_into_required_layout(c.SFA[:4], 8, 256, (1, 128, 128), is_sfa=True),
     ValueError, "hopperkit:"),
]


# Cases only the value checks catch (they read device data, which the kernel path skips by default):
# with them off the call runs, and the kernels stay in bounds (clamped ids, masked counts).
VALUE_CASES = {
    "seqlen_beyond_block_table", "seqlen_negative", "block_id_out_of_range", "sparse_index_out_of_range",
    "sparse_index_below_minus_one", "sparse_topk_length_range", "combine_num_splits_values",
    "grouped_expert_id_too_large", "grouped_misaligned_segment", "masked_count_too_large",
    "k_grouped_layout_mismatch",
}


def _devices():
    yield pytest.param("cpu", id="cpu")
    yield pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)


@pytest.fixture(scope="module", params=list(_devices()))
def ctx(request):
    hopperkit.set_check_values(True if request.param == "cuda" else None)
    yield Ctx(torch.device(request.param))
    hopperkit.set_check_values(None)


@pytest.fixture(scope="module")
def fast_ctx():
    """A serving engine's setting: kernels with the value checks off, so the kernel-backed ops take
    their host-cheap lanes, where the C++ op checks first and the Python checks name the argument."""
    hopperkit.set_check_values(False)
    yield Ctx(torch.device("cuda"))
    hopperkit.set_check_values(None)


def test_enough_cases():
    assert len(CASES) >= 30 and len({c[0] for c in CASES}) == len(CASES)
    assert VALUE_CASES <= {c[0] for c in CASES}


def test_value_cases_need_the_value_checks():
    """Every case outside VALUE_CASES is caught by the structural checks alone."""
    c = Ctx(torch.device("cpu"))
    hopperkit.set_check_values(False)
    try:
        for name, call, exc, _ in CASES:
            if name in VALUE_CASES:
                call(c)
            else:
                with pytest.raises(exc):
                    call(c)
    finally:
        hopperkit.set_check_values(None)


@pytest.mark.parametrize("name,call,exc,text", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_rejected(ctx, name, call, exc, text):
    with pytest.raises(exc) as info:
        call(ctx)
    msg = str(info.value)
    assert msg.startswith("hopperkit:"), msg
    assert text in msg, f"expected {text!r} in: {msg}"
    # The process can still run valid calls, kernels included.
    out, lse = ctx.dense()
    assert out.shape == (ctx.b, ctx.s_q, ctx.h_q, 512) and not torch.isnan(out).any()
    ctx.fp8()
    if ctx.dev.type == "cuda":
        torch.cuda.synchronize()


def test_value_checks_off_skips_data_reads():
    """With value checks off (the kernel-path default) a data-only problem is not looked for; the
    structural checks still run."""
    c = Ctx(torch.device("cpu"))
    hopperkit.set_check_values(False)
    try:
        c.dense(cache_seqlens=torch.tensor([100, -1, 0], dtype=torch.int32))  # not read: no error
        with pytest.raises(TypeError):
            c.dense(q=c.q.float())
    finally:
        hopperkit.set_check_values(None)


@pytest.mark.gpu
@pytest.mark.parametrize("name,call,exc,text", [c for c in CASES if c[0] not in VALUE_CASES],
                         ids=[c[0] for c in CASES if c[0] not in VALUE_CASES])
def test_bad_input_is_rejected_on_the_fast_lanes(fast_ctx, name, call, exc, text):
    test_bad_input_is_rejected(fast_ctx, name, call, exc, text)


@pytest.mark.gpu
def test_combine_rejects_a_misaligned_accumulator(fast_ctx):
    c = fast_ctx
    rows = c.b + c.tsm.shape[0]
    flat = torch.randn(rows * c.s_q * c.h_q * 512 + 1, device=c.dev)
    with pytest.raises(ValueError, match="o_accum must be 16-byte aligned"):
        c.combine(o_accum=flat[1:].view(rows, 1, c.s_q * c.h_q, 512))
