"""Scale-factor layouts and runtime knobs, DeepGEMM-compatible.

The GEMM kernels read activation scales (1×128 per row and K block) MN-major with the row dim padded
to 16 bytes, because a TMA global stride must be a multiple of 16 bytes. ``per_token_cast_to_fp8``
already returns them that way; ``get_mn_major_tma_aligned_tensor`` converts scales from elsewhere
once (it returns its input untouched when the layout is already right, so calling it every step
costs nothing).
"""

from __future__ import annotations

import functools

from typing import Optional, Sequence

import torch

from ._validation import check_int, check_tensor, describe, fail
from .reference import layout as _layout_ref

__all__ = [
    "get_num_sms",
    "set_num_sms",
    "get_pdl",
    "set_pdl",
    "get_tc_util",
    "set_tc_util",
    "set_ignore_compile_dims",
    "get_tma_aligned_size",
    "get_mn_major_tma_aligned_tensor",
    "get_mk_alignment_for_contiguous_layout",
    "set_mk_alignment_for_contiguous_layout",
    "get_m_alignment_for_contiguous_layout",
    "get_theoretical_mk_alignment_for_contiguous_layout",
    "get_col_major_tma_aligned_tensor",
    "transform_sf_into_required_layout",
]

# H100/H200/H800 SXM: what the schedule assumes where no GPU can be asked (CPU reference runs).
DEFAULT_NUM_SMS = 132
_num_sms_override: Optional[int] = None


@functools.lru_cache(maxsize=None)
def _sms_of(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def _device_sms(device: Optional[torch.device]) -> Optional[int]:
    if device is not None and device.type != "cuda":
        return None
    if not torch.cuda.is_available():
        return None
    index = device.index if device is not None and device.index is not None else torch.cuda.current_device()
    return _sms_of(index)  # asked once per device: it is on every kernel call's host path


def get_num_sms(device: Optional[torch.device] = None) -> int:
    """SMs the kernels spread over: ``set_num_sms``'s value, else the device's SM count, else 132."""
    if _num_sms_override is not None:
        return _num_sms_override
    sms = _device_sms(device)
    return sms if sms is not None else DEFAULT_NUM_SMS


def set_num_sms(num_sms: Optional[int]) -> None:
    """Cap the SMs that persistent kernels and the MLA schedule use (e.g. to leave SMs to communication
    kernels). ``None`` restores the device's count. Metadata built before the change no longer fits."""
    global _num_sms_override
    if num_sms is None:
        _num_sms_override = None
        return
    limit = _device_sms(None) or 1024
    _num_sms_override = check_int("num_sms", num_sms, min_value=1, max_value=limit)


_pdl = False


def set_pdl(enabled: bool) -> None:
    """Launch the GEMM kernels with programmatic dependent launch: a kernel may then start while the
    previous kernel in the stream drains (it waits on the device before reading that kernel's
    outputs). Off by default, as in DeepGEMM. What it buys is the launch overlap at each kernel
    boundary: 1-2 µs per GEMM in a chain of decode GEMMs on an H100, nothing for a single call
    (csrc/gemm/fp8_1d2d/PERF.md, "PDL")."""
    global _pdl
    if not isinstance(enabled, bool):
        raise TypeError(f"hopperkit: set_pdl expects a bool, got {enabled!r}")
    _pdl = enabled


def get_pdl() -> bool:
    return _pdl


_tc_util = 100


def set_tc_util(tc_util: int) -> None:
    """DeepGEMM's tensor-core utilisation knob (0-100). Its SM100 kernels throttle by it; its SM90
    kernels, like all of hopperkit's, do not. Kept so that code written for DeepGEMM runs unchanged:
    the value is checked and stored, and ``get_tc_util`` returns it."""
    global _tc_util
    _tc_util = check_int("tc_util", tc_util, min_value=0, max_value=100)


def get_tc_util() -> int:
    return _tc_util


def set_ignore_compile_dims(ignore: bool) -> None:
    """DeepGEMM compiles some shape dims into its JIT kernels unless told not to. hopperkit compiles
    its kernels ahead of time with every dim a runtime argument, so there is nothing to change: the
    call is accepted (a bool) and has no effect."""
    if not isinstance(ignore, bool):
        fail("ignore", "a bool", describe(ignore), TypeError)


def get_tma_aligned_size(x: int, element_size: int) -> int:
    """``x`` rounded up so that ``x * element_size`` is a multiple of 16 bytes (a TMA stride)."""
    check_int("x", x, min_value=0)
    check_int("element_size", element_size, min_value=1, max_value=16)
    if 16 % element_size:
        fail("element_size", "a divisor of 16 (1, 2, 4, 8 or 16)", str(element_size))
    return _layout_ref.get_tma_aligned_size(x, element_size)


def get_mn_major_tma_aligned_tensor(sf: torch.Tensor) -> torch.Tensor:
    """float32 scales [mn, sfk] or [g, mn, sfk] → the same values, MN-major with the mn dim padded to a
    multiple of 4 (strides (1, align(mn, 4)) / (align(mn, 4)·sfk, 1, align(mn, 4))). No copy when
    ``sf`` already has that layout."""
    check_tensor("sf", sf, dtype=torch.float32)
    if sf.dim() not in (2, 3):
        fail("sf", "a 2-D [mn, sfk] or 3-D [g, mn, sfk] tensor", f"shape {tuple(sf.shape)}")
    return _layout_ref.get_mn_major_tma_aligned_tensor(sf)


_mk_alignment: Optional[int] = None


def get_mk_alignment_for_contiguous_layout() -> int:
    """Row alignment of each expert's segment in the m-grouped contiguous layout: 128, or what
    ``set_mk_alignment_for_contiguous_layout`` set. The grouped GEMMs check ``m_indices`` (and place
    the psum layout's segments) against this value."""
    if _mk_alignment is not None:
        return _mk_alignment
    return _layout_ref.get_mk_alignment_for_contiguous_layout()


def set_mk_alignment_for_contiguous_layout(alignment: Optional[int]) -> None:
    """Pad expert segments to ``alignment`` rows instead of 128 (DeepGEMM's setter). The kernels'
    tiles need every segment to start on a multiple of 128 rows, so the value must be a positive
    multiple of 128; ``None`` restores 128. The k-grouped GEMM's per-group K stays a multiple of 128."""
    global _mk_alignment
    if alignment is None:
        _mk_alignment = None
        return
    base = _layout_ref.get_mk_alignment_for_contiguous_layout()
    value = check_int("alignment", alignment, min_value=base)
    if value % base:
        fail("alignment", f"a positive multiple of {base} (the kernels' segment granularity)", str(value))
    _mk_alignment = value


get_m_alignment_for_contiguous_layout = get_mk_alignment_for_contiguous_layout  # DeepGEMM v1 name
get_col_major_tma_aligned_tensor = get_mn_major_tma_aligned_tensor  # DeepGEMM v1 name


def get_theoretical_mk_alignment_for_contiguous_layout(expected_m: Optional[int] = None,
                                                       num_groups: Optional[int] = None) -> int:
    """DeepGEMM's alignment for a given expected M per group: on SM90 always the layout's 128 rows,
    which is what hopperkit's kernels need whatever the counts (the arguments are checked only)."""
    if expected_m is not None:
        check_int("expected_m", expected_m, min_value=0)
    if num_groups is not None:
        check_int("num_groups", num_groups, min_value=0)
    return get_mk_alignment_for_contiguous_layout()


def transform_sf_into_required_layout(
    sf: torch.Tensor,
    mn: int,
    k: int,
    recipe: Sequence[int],
    num_groups: Optional[int] = None,
    is_sfa: Optional[bool] = None,
    disable_ue8m0_cast: bool = False,
    psum_layout: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """The layout the SM90 kernels read: 1×128 scales MN-major and TMA-aligned, 128×128 scales
    checked and contiguous. Raises for scale formats SM90 does not take (packed UE8M0).

    ``disable_ue8m0_cast`` and ``psum_layout`` are DeepGEMM's and concern the UE8M0 packing of its
    SM100 kernels (the psum layout's gap rows are skipped there); FP32 scales, the only ones SM90
    reads, come out the same whatever they are."""
    if not isinstance(disable_ue8m0_cast, bool):
        fail("disable_ue8m0_cast", "a bool", describe(disable_ue8m0_cast), TypeError)
    if psum_layout is not None:
        check_tensor("psum_layout", psum_layout, dtype=torch.int32, ndim=1)
    check_tensor("sf", sf)
    check_int("mn", mn, min_value=0)
    check_int("k", k, min_value=0)
    if num_groups is not None:
        check_int("num_groups", num_groups, min_value=1)
    return _layout_ref.transform_sf_into_required_layout(sf, mn, k, recipe, num_groups=num_groups, is_sfa=is_sfa)
