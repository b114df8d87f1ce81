"""FP8 quantization of GEMM operands, DeepGEMM-compatible, with the scales already in the layout the
GEMM kernels read (so no transpose or copy is needed between the cast and the GEMM)."""

from __future__ import annotations

import torch

from . import _ops
from ._validation import check_bool, check_tensor, fail
from .reference import layout as _layout_ref
from .reference import quant as _ref

__all__ = ["per_token_cast_to_fp8", "per_block_cast_to_fp8", "per_channel_cast_to_fp8"]

_INPUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _check(x: object, use_ue8m0: object, gran_k: object = 128, use_packed_ue8m0: object = False) -> None:
    """``gran_k`` and ``use_packed_ue8m0`` are the arguments of DeepGEMM's helpers of the same names:
    SM90 GEMMs take 128-wide scale blocks of FP32 scales only (32-wide blocks and packed UE8M0
    scales are for its SM100 kernels)."""
    check_tensor("x", x, dtype=_INPUT_DTYPES, ndim=2)
    check_bool("use_ue8m0", use_ue8m0)
    if gran_k != 128 or gran_k.__class__ is not int:
        fail("gran_k", "128 (the K block of every SM90 FP8 GEMM)", repr(gran_k))
    if use_packed_ue8m0 is not False:
        fail("use_packed_ue8m0", "False (packed UE8M0 scales are the SM100 format; SM90 reads FP32 scales)",
             repr(use_packed_ue8m0))


def _dense_rows(x: torch.Tensor) -> torch.Tensor:
    # The kernels read rows with any stride but need a dense last dimension; they take a slower
    # scalar path (same results) when rows are not 16-byte aligned or n % 16 != 0.
    return x if x.shape[1] <= 1 or x.stride(1) == 1 else x.contiguous()


def per_token_cast_to_fp8(x: torch.Tensor, use_ue8m0: bool = False, gran_k: int = 128,
                          use_packed_ue8m0: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """x [m, n] (bf16/fp16/fp32) → (float8_e4m3fn [m, n], float32 scales [m, ⌈n/128⌉]) with one scale
    per row and 128 columns (amax / 448; a power of two with ``use_ue8m0``). The scales come back
    MN-major and TMA-aligned (strides (1, align(m, 4))), the layout ``fp8_gemm_nt`` reads for A.
    ``gran_k`` must be 128 and ``use_packed_ue8m0`` False (DeepGEMM's SM100 options)."""
    _check(x, use_ue8m0, gran_k, use_packed_ue8m0)
    if _ops.use_kernel("per_token_cast_to_fp8", x.device):
        return torch.ops.hopperkit.per_token_cast_to_fp8(_dense_rows(x), use_ue8m0)
    x_fp8, sf = _ref.per_token_cast_to_fp8(x, use_ue8m0=use_ue8m0)
    return x_fp8, _layout_ref.get_mn_major_tma_aligned_tensor(sf)


def per_block_cast_to_fp8(x: torch.Tensor, use_ue8m0: bool = False, gran_k: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """x [m, n] → (float8_e4m3fn [m, n], float32 scales [⌈m/128⌉, ⌈n/128⌉] contiguous), one scale per
    128×128 block: the weight (B) operand of the 1d2d recipe. ``gran_k`` must be 128."""
    _check(x, use_ue8m0, gran_k)
    if _ops.use_kernel("per_block_cast_to_fp8", x.device):
        return torch.ops.hopperkit.per_block_cast_to_fp8(_dense_rows(x), use_ue8m0)
    return _ref.per_block_cast_to_fp8(x, use_ue8m0=use_ue8m0)


def per_channel_cast_to_fp8(x: torch.Tensor, use_ue8m0: bool = False, gran_k: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """x [m, n] → (float8_e4m3fn [m, n], float32 scales [⌈m/128⌉, n]): one scale per column and 128
    rows, the layout of k-grouped weight-gradient inputs before they are re-packed K-major.
    ``gran_k`` must be 128."""
    _check(x, use_ue8m0, gran_k)
    if x.shape[0] % 128:
        fail("x", "a row count that is a multiple of 128 (per-channel scales cover 128 rows)", f"shape {tuple(x.shape)}")
    return _ref.per_channel_cast_to_fp8(x, use_ue8m0=use_ue8m0)
