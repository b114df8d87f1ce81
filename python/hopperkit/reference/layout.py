"""Reference scale-factor layouts for the SM90 GEMM kernels (DeepGEMM-compatible).

The kernels load per-row ("1×128") scales with TMA, one K-block column of ``BLOCK_M`` rows at a time,
so those scales must be **MN-major** (rows contiguous) and every column must start on a 16-byte
boundary: a TMA global stride has to be a multiple of 16 bytes. For float32 that means the row
dimension is padded to a multiple of 4, i.e. element ``(g, i, kb)`` of a ``[G, MN, SFK]`` scale tensor
lives at ``(g·SFK + kb)·align(MN, 4) + i`` floats from the data pointer.

128×128 block scales (operand B of the 1d2d recipe) are read by the math threads with ordinary loads
and stay K-major and contiguous.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

__all__ = [
    "get_tma_aligned_size",
    "get_mn_major_tma_aligned_tensor",
    "get_mk_alignment_for_contiguous_layout",
    "transform_sf_into_required_layout",
]

_TMA_STRIDE_ALIGN_BYTES = 16
# Rows per expert segment in the m-grouped contiguous layout (and K per group in k-grouped): the
# kernels take BLOCK_M = 128 and read one expert id per M tile, so a tile must not straddle experts.
_MK_ALIGNMENT = 128


def _ceil_div(a: int, b: int) -> int:
    return (a + b - 1) // b


def get_tma_aligned_size(x: int, element_size: int) -> int:
    """``x`` rounded up to a multiple of ``16 // element_size`` elements (16 bytes).

    Args:
        x: number of elements (>= 0).
        element_size: bytes per element; must divide 16 (1, 2, 4, 8 or 16).
    """
    if not isinstance(x, int) or isinstance(x, bool) or x < 0:
        raise ValueError(f"hopperkit: x must be a non-negative int, got {x!r}")
    if (
        not isinstance(element_size, int)
        or element_size <= 0
        or _TMA_STRIDE_ALIGN_BYTES % element_size != 0
    ):
        raise ValueError(f"hopperkit: element_size must divide 16 (1, 2, 4, 8 or 16), got {element_size!r}")
    alignment = _TMA_STRIDE_ALIGN_BYTES // element_size
    return _ceil_div(x, alignment) * alignment


def _is_mn_major_tma_aligned(sf: torch.Tensor) -> bool:
    """Whether the kernel can read ``sf`` ([G, MN, SFK] or [MN, SFK]) as it is.

    A dimension of size <= 1 is never stepped over, so its stride is irrelevant (torch reports
    arbitrary strides for such dimensions). Because the TMA box may fetch the padding rows of the
    last column too, the storage must also extend to ``G·SFK·align(MN, 4)`` floats. TMA also needs
    a 16-byte aligned base, which a view that starts mid-storage may not have.
    """
    if sf.device.type != "meta" and sf.numel() and sf.data_ptr() % 16:
        return False
    mn, sfk = sf.shape[-2], sf.shape[-1]
    groups = sf.shape[0] if sf.dim() == 3 else 1
    aligned_mn = get_tma_aligned_size(mn, 4)
    required = [(mn, 1), (sfk, aligned_mn)]
    if sf.dim() == 3:
        required.insert(0, (groups, aligned_mn * sfk))
    for (size, stride), actual in zip(required, sf.stride()):
        if size > 1 and actual != stride:
            return False
    extent = groups * sfk * aligned_mn
    return (sf.storage_offset() + extent) * sf.element_size() <= sf.untyped_storage().nbytes()


def get_mn_major_tma_aligned_tensor(sf: torch.Tensor) -> torch.Tensor:
    """Scales in the MN-major, TMA-aligned layout the SM90 kernels read.

    Args:
        sf: float32 ``[mn, sfk]`` or ``[g, mn, sfk]``, any strides, any device.

    Returns:
        A tensor equal to ``sf`` with strides ``(1, align(mn, 4))`` (2-D) or
        ``(align(mn, 4)·sfk, 1, align(mn, 4))`` (3-D), viewing a storage of
        ``g·sfk·align(mn, 4)`` floats whose padding rows are zero. ``sf`` itself is returned (no copy)
        when it already satisfies that, where strides of size-1 dimensions are not compared and the
        storage must extend over the padding of the last column (the TMA box may read it).
    """
    if not isinstance(sf, torch.Tensor):
        raise TypeError(f"hopperkit: sf must be a torch.Tensor, got {type(sf).__name__}")
    if sf.dtype != torch.float32:
        raise TypeError(f"hopperkit: sf must be float32 (SM90 scales), got {sf.dtype}")
    if sf.dim() not in (2, 3):
        raise ValueError(f"hopperkit: sf must be [mn, sfk] or [g, mn, sfk], got shape {tuple(sf.shape)}")
    if _is_mn_major_tma_aligned(sf):
        return sf
    squeeze = sf.dim() == 2
    sf3 = sf.unsqueeze(0) if squeeze else sf
    groups, mn, sfk = sf3.shape
    aligned_mn = get_tma_aligned_size(mn, 4)
    # Zero padding keeps the rows a TMA box fetches beyond mn finite and deterministic.
    storage = torch.zeros(groups, sfk, aligned_mn, dtype=torch.float32, device=sf.device)
    storage[:, :, :mn] = sf3.transpose(1, 2)
    out = storage[:, :, :mn].transpose(1, 2)
    return out[0] if squeeze else out


def get_mk_alignment_for_contiguous_layout() -> int:
    """Row alignment of every expert segment in the m-grouped contiguous layout (and of every
    group's K in the k-grouped layout): 128."""
    return _MK_ALIGNMENT


def _parse_granularity(recipe: Sequence[int], is_sfa: Optional[bool]) -> tuple:
    try:
        values = tuple(int(v) for v in recipe)
    except TypeError:
        raise TypeError(f"hopperkit: recipe must be a tuple of ints, got {recipe!r}") from None
    if len(values) == 3:
        if is_sfa is None:
            raise ValueError(
                "hopperkit: is_sfa must be True or False with a 3-element recipe (it picks gran_m or gran_n)"
            )
        return (values[0] if is_sfa else values[1], values[2])
    if len(values) == 2:
        return values
    raise ValueError(
        f"hopperkit: recipe must be (gran_m, gran_n, gran_k) or (gran_mn, gran_k), got {recipe!r}"
    )


def transform_sf_into_required_layout(
    sf: torch.Tensor,
    mn: int,
    k: int,
    recipe: Sequence[int],
    num_groups: Optional[int] = None,
    is_sfa: Optional[bool] = None,
) -> torch.Tensor:
    """Check ``sf`` against the problem and return it in the layout the SM90 kernels read.

    Args:
        sf: scale factors, ``[ceil(mn/gran_mn), ceil(k/gran_k)]``, or with a leading ``num_groups``
            dimension when ``num_groups`` is given (exactly 2-D without it, 3-D with it).
        mn, k: the operand's M (or N) and K.
        recipe: ``(gran_m, gran_n, gran_k)`` with ``is_sfa`` choosing ``gran_m`` (A) or ``gran_n``
            (B), or directly ``(gran_mn, gran_k)``.
        num_groups: number of groups of a grouped/masked operand.
        is_sfa: whether ``sf`` scales operand A; required with a 3-element recipe.

    Rules (SM90; scales are float32):
        - granularity ``1×128`` (A scales; B scales of recipe ``(1, 1, 128)``): shape-checked, then
          :func:`get_mn_major_tma_aligned_tensor` (a no-op when already in that layout);
        - granularity ``128×128`` (B scales of recipe ``(1, 128, 128)``): shape-checked, returned
          as is when contiguous, else a contiguous copy;
        - anything else, including int32 packed UE8M0 scales (the SM100 format): ``ValueError``.
    """
    if not isinstance(sf, torch.Tensor):
        raise TypeError(f"hopperkit: sf must be a torch.Tensor, got {type(sf).__name__}")
    for name, value in (("mn", mn), ("k", k)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"hopperkit: {name} must be a non-negative int, got {value!r}")
    gran_mn, gran_k = _parse_granularity(recipe, is_sfa)
    if sf.dtype != torch.float32:
        raise ValueError(
            f"hopperkit: SM90 needs FP32 scales; got sf of dtype {sf.dtype} "
            "(int32 packed UE8M0 scales are the SM100 format: pass the float32 scales instead)"
        )
    if (gran_mn, gran_k) not in ((1, 128), (128, 128)):
        raise ValueError(
            f"hopperkit: SM90 needs FP32 scales of granularity 1x128 or 128x128; got {gran_mn}x{gran_k}"
        )
    if num_groups is not None and (not isinstance(num_groups, int) or num_groups < 0):
        raise ValueError(f"hopperkit: num_groups must be None or a non-negative int, got {num_groups!r}")
    expected = (_ceil_div(mn, gran_mn), _ceil_div(k, gran_k))
    if num_groups is not None:
        expected = (num_groups,) + expected
    if tuple(sf.shape) != expected:
        what = "[num_groups, ceil(mn/gran_mn), ceil(k/gran_k)]" if num_groups is not None else (
            "[ceil(mn/gran_mn), ceil(k/gran_k)]"
        )
        raise ValueError(
            f"hopperkit: sf must be {what} = {list(expected)} for mn={mn}, k={k}, "
            f"granularity {gran_mn}x{gran_k}, num_groups={num_groups}; got {list(sf.shape)}"
        )
    if gran_mn == 1:
        return get_mn_major_tma_aligned_tensor(sf)
    return sf if sf.is_contiguous() else sf.contiguous()
