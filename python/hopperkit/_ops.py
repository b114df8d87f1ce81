"""Loads ``hopperkit._C``, registers fake (meta) implementations of its ops, and decides per call
whether the CUDA kernel or the PyTorch reference runs.

A kernel runs when the extension is built and loaded, the op has a kernel, the inputs live on an
SM90 (compute capability 9.0) device, and ``HOPPERKIT_FORCE_REFERENCE`` is not set. Everything else
runs ``hopperkit.reference``, which has the same semantics.
"""

from __future__ import annotations

import functools
import os
from typing import Optional

import torch

try:
    from . import _C  # noqa: F401  (importing registers torch.ops.hopperkit.*)

    EXTENSION_ERROR: Optional[str] = None
except ImportError as e:  # pure-Python install, or a build for another torch
    EXTENSION_ERROR = str(e)

EXTENSION_LOADED = EXTENSION_ERROR is None

# Every public op and the extension op that is its kernel (None: no kernel yet, the op runs its
# reference on every device); a variant of a public op with a kernel of its own has its own row.
# `python -m hopperkit` and the README's status table follow this table.
PUBLIC_OP_KERNELS: dict[str, Optional[str]] = {
    "get_mla_metadata": "get_mla_metadata",
    "mla_combine": "mla_combine",
    "flash_mla_with_kvcache": "mla_dense_decode",  # dense BF16/FP16 caches; sparse still runs the reference
    "quantize_kv_cache": None,
    "dequantize_kv_cache": None,
    "fp8_gemm_nt": "fp8_gemm_nt_1d2d",  # the 1d2d recipe (BF16 D)
    "fp8_gemm_nt (1d1d)": "fp8_gemm_nt_1d1d",  # recipe (1, 1, 128): FP32 D = C + A·Bᵀ, its own kernel
    "bf16_gemm_nt": "bf16_gemm",  # every majorness of A and B (nt/nn/tn/tt), BF16 or FP32 D, optional C
    "m_grouped_fp8_gemm_nt_contiguous": "m_grouped_fp8_gemm_nt_contiguous_1d2d",
    "m_grouped_fp8_gemm_nt_masked": "m_grouped_fp8_gemm_nt_masked_1d2d",
    "k_grouped_fp8_gemm_nt_contiguous": "k_grouped_fp8_gemm_nt_contiguous_1d1d",
    "m_grouped_bf16_gemm_nt_contiguous": "m_grouped_bf16_gemm_nt_contiguous",
    "m_grouped_bf16_gemm_nt_masked": "m_grouped_bf16_gemm_nt_masked",
    "k_grouped_bf16_gemm_tn_contiguous": "k_grouped_bf16_gemm_tn_contiguous",
    "per_token_cast_to_fp8": "per_token_cast_to_fp8",
    "per_block_cast_to_fp8": "per_block_cast_to_fp8",
}


@functools.lru_cache(maxsize=None)
def _is_sm90(index: int) -> bool:
    return torch.cuda.get_device_capability(index) == (9, 0)


def force_reference() -> bool:
    return os.environ.get("HOPPERKIT_FORCE_REFERENCE", "").strip().lower() in ("1", "true", "yes", "on")


def has_kernel(op: str) -> bool:
    """The loaded extension provides a kernel for public op ``op`` (independent of the device)."""
    kernel = PUBLIC_OP_KERNELS[op]
    return EXTENSION_LOADED and kernel is not None and hasattr(torch.ops.hopperkit, kernel)


def use_kernel(op: str, device: torch.device) -> bool:
    """Whether a call of public op ``op`` on ``device`` runs the CUDA kernel."""
    if device.type != "cuda" or not has_kernel(op) or force_reference():
        return False
    return _is_sm90(device.index if device.index is not None else torch.cuda.current_device())


def build_info() -> dict:
    """What the loaded extension was compiled with (empty when it is not loaded)."""
    if not EXTENSION_LOADED:
        return {}
    return dict(kv.split("=", 1) for kv in torch.ops.hopperkit.build_info().split(";"))


if EXTENSION_LOADED:

    @torch.library.register_fake("hopperkit::get_mla_metadata")
    def _get_mla_metadata_fake(lengths: torch.Tensor, num_sm_parts: int, empty_as_one_block: bool):
        return (
            lengths.new_empty((num_sm_parts, 8), dtype=torch.int32),
            lengths.new_empty((lengths.shape[0] + 1,), dtype=torch.int32),
        )

    @torch.library.register_fake("hopperkit::fp8_gemm_nt_1d2d")
    def _fp8_gemm_nt_1d2d_fake(a, sfa, b, sfb, d, num_sms, pdl=False) -> None:
        return None

    @torch.library.register_fake("hopperkit::fp8_gemm_nt_1d1d")
    def _fp8_gemm_nt_1d1d_fake(a, sfa, b, sfb, d, c, num_sms, pdl=False) -> None:
        return None

    @torch.library.register_fake("hopperkit::k_grouped_fp8_gemm_nt_contiguous_1d1d")
    def _k_grouped_fp8_gemm_nt_contiguous_1d1d_fake(a, sfa, b, sfb, d, ks, ks_tensor, c, num_sms, pdl=False) -> None:
        return None

    @torch.library.register_fake("hopperkit::k_grouped_bf16_gemm_tn_contiguous")
    def _k_grouped_bf16_gemm_tn_contiguous_fake(a, b, d, ks, ks_tensor, c, num_sms, pdl=False) -> None:
        return None

    @torch.library.register_fake("hopperkit::mla_dense_decode")
    def _mla_dense_decode_fake(q, k_cache, block_table, cache_seqlens, tile_scheduler_metadata, num_splits,
                               softmax_scale, causal):
        b, s_q, h_q, _ = q.shape
        return q.new_empty((b, s_q, h_q, 512)), q.new_empty((b, h_q, s_q), dtype=torch.float32)

    @torch.library.register_fake("hopperkit::m_grouped_fp8_gemm_nt_contiguous_1d2d")
    def _m_grouped_contiguous_fake(a, sfa, b, sfb, d, m_indices, num_sms, pdl=False) -> None:
        return None

    @torch.library.register_fake("hopperkit::m_grouped_fp8_gemm_nt_masked_1d2d")
    def _m_grouped_masked_fake(a, sfa, b, sfb, d, masked_m, expected_m, num_sms, pdl=False) -> None:
        return None

    @torch.library.register_fake("hopperkit::bf16_gemm")
    def _bf16_gemm_fake(a, b, d, c, num_sms, pdl=False) -> None:
        return None

    @torch.library.register_fake("hopperkit::m_grouped_bf16_gemm_nt_contiguous")
    def _m_grouped_bf16_contiguous_fake(a, b, d, m_indices, num_sms, pdl=False) -> None:
        return None

    @torch.library.register_fake("hopperkit::m_grouped_bf16_gemm_nt_masked")
    def _m_grouped_bf16_masked_fake(a, b, d, masked_m, expected_m, num_sms, pdl=False) -> None:
        return None

    @torch.library.register_fake("hopperkit::mla_combine")
    def _mla_combine_fake(o_accum, lse_accum, num_splits, out, lse, attn_sink, pdl=True) -> None:
        return None

    def _check_cast_input_fake(x: torch.Tensor) -> None:
        torch._check(x.dim() == 2, lambda: f"hopperkit: x must be 2-D [m, n], got shape {tuple(x.shape)}")

    @torch.library.register_fake("hopperkit::per_token_cast_to_fp8")
    def _per_token_cast_to_fp8_fake(x: torch.Tensor, use_ue8m0: bool):
        # Scales MN-major and TMA-aligned, exactly as the kernel returns them: strides (1, align(m, 4)).
        _check_cast_input_fake(x)
        m, n = x.shape
        return (
            x.new_empty((m, n), dtype=torch.float8_e4m3fn),
            torch.empty_strided((m, (n + 127) // 128), (1, (m + 3) // 4 * 4), dtype=torch.float32, device=x.device),
        )

    @torch.library.register_fake("hopperkit::per_block_cast_to_fp8")
    def _per_block_cast_to_fp8_fake(x: torch.Tensor, use_ue8m0: bool):
        _check_cast_input_fake(x)
        m, n = x.shape
        return (
            x.new_empty((m, n), dtype=torch.float8_e4m3fn),
            x.new_empty(((m + 127) // 128, (n + 127) // 128), dtype=torch.float32),
        )
