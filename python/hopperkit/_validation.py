"""Input validation shared by the public ops.

Every public op checks its arguments here before anything is launched, and raises ``TypeError`` (wrong
type or dtype) or ``ValueError`` (wrong shape, device, strides, alignment or value) with a message that
starts with ``hopperkit:``, names the argument and says what was expected.

Two levels:
- structural checks (types, dtypes, shapes, devices, strides) always run; they read no tensor data.
- value checks (sequence lengths within the block table, indices in range, metadata consistent with
  the batch) read device data, which synchronizes the host. They run when ``check_values()`` says so:
  on by default on the reference path, off by default on the kernel path (a serving engine's hot
  loop must not synchronize), never inside a CUDA-graph capture. Override with
  ``hopperkit.set_check_values(True | False | None)`` or ``HOPPERKIT_CHECK_VALUES=1|0``.
"""

from __future__ import annotations

import os
from typing import Iterable, Optional, Sequence, Union

import torch

_check_values_override: Optional[bool] = None


def set_check_values(enabled: Optional[bool]) -> None:
    """Force data-dependent input checks on (True) or off (False); None restores the default."""
    global _check_values_override
    if enabled is not None and not isinstance(enabled, bool):
        raise TypeError(f"hopperkit: set_check_values expects True, False or None, got {enabled!r}")
    _check_values_override = enabled


def check_values(kernel_path: bool, device: torch.device) -> bool:
    """Whether to run the value checks for a call on ``device`` that takes the kernel path or not."""
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        return False
    if _check_values_override is not None:
        return _check_values_override
    env = os.environ.get("HOPPERKIT_CHECK_VALUES", "").strip().lower()
    if env in ("1", "true", "yes", "on"):
        return True
    if env in ("0", "false", "no", "off"):
        return False
    return not kernel_path


def fail(name: str, expected: str, got: str, exc: type = ValueError) -> None:
    raise exc(f"hopperkit: {name} must be {expected}, got {got}")


def describe(t: object) -> str:
    if isinstance(t, torch.Tensor):
        return f"a {t.dtype} tensor of shape {tuple(t.shape)} on {t.device}"
    return f"{type(t).__name__} {t!r}"[:200]


DTypes = Union[torch.dtype, Sequence[torch.dtype]]


def check_tensor(
    name: str,
    t: object,
    dtype: Optional[DTypes] = None,
    ndim: Optional[int] = None,
    shape: Optional[Sequence[Optional[int]]] = None,
    device: Optional[torch.device] = None,
    last_dim_contiguous: bool = False,
    contiguous: bool = False,
) -> torch.Tensor:
    """Check a tensor argument; ``shape`` entries of None match any size. Returns ``t``."""
    if not isinstance(t, torch.Tensor):
        fail(name, "a torch.Tensor", describe(t), TypeError)
    if dtype is not None:
        allowed = (dtype,) if isinstance(dtype, torch.dtype) else tuple(dtype)
        if t.dtype not in allowed:
            fail(name, " or ".join(str(d) for d in allowed), f"{t.dtype}", TypeError)
    if ndim is not None and t.dim() != ndim:
        fail(name, f"a {ndim}-D tensor", f"shape {tuple(t.shape)}")
    if shape is not None:
        if t.dim() != len(shape) or any(s is not None and s != n for s, n in zip(shape, t.shape)):
            want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
            fail(name, f"of shape {want}", f"{tuple(t.shape)}")
    if device is not None and t.device != device:
        fail(name, f"on {device} (like the other inputs)", f"a tensor on {t.device}")
    if contiguous and not t.is_contiguous():
        fail(name, "contiguous", f"strides {t.stride()} for shape {tuple(t.shape)}")
    if last_dim_contiguous and t.dim() > 0 and t.size(-1) > 1 and t.stride(-1) != 1:
        fail(name, "contiguous in its last dimension (stride(-1) == 1)", f"strides {t.stride()}")
    return t


def check_int(name: str, v: object, min_value: Optional[int] = None, max_value: Optional[int] = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        fail(name, "an int", describe(v), TypeError)
    if min_value is not None and v < min_value:
        fail(name, f">= {min_value}", str(v))
    if max_value is not None and v > max_value:
        fail(name, f"<= {max_value}", str(v))
    return v


def check_bool(name: str, v: object) -> bool:
    if not isinstance(v, bool):
        fail(name, "a bool", describe(v), TypeError)
    return v


def check_same_device(names_and_tensors: Iterable[tuple[str, Optional[torch.Tensor]]]) -> torch.device:
    """All given (non-None) tensors are on one device; returns it."""
    items = [(n, t) for n, t in names_and_tensors if t is not None]
    first_name, first = items[0]
    for n, t in items[1:]:
        if t.device != first.device:
            raise ValueError(f"hopperkit: {n} is on {t.device} but {first_name} is on {first.device}; all inputs must share a device")
    return first.device


def check_no_self_overlap(name: str, t: torch.Tensor) -> None:
    """An output tensor whose elements are written by separate threads must not alias itself. Taken
    dimension by dimension from the smallest stride, each stride must step past everything the
    smaller ones span (sufficient, and what every dense or padded view satisfies); an expand()-ed or
    as_strided view that repeats elements fails it."""
    span = 0
    for size, stride in sorted(((n, abs(st)) for n, st in zip(t.shape, t.stride()) if n > 1), key=lambda x: x[1]):
        if stride <= span:
            fail(name, "an output that does not overlap itself (an expand()-ed or as_strided view repeats elements)",
                 f"shape {tuple(t.shape)} strides {t.stride()}")
        span += (size - 1) * stride


def _byte_runs(t: torch.Tensor) -> tuple[int, int, int, int]:
    """``t``'s bytes as (begin, width, pitch, rows): ``rows`` runs of ``width`` bytes, ``pitch`` apart.
    Dims that continue one another are merged; a tensor that is not a set of equally spaced runs is
    described by its whole byte range. The same arithmetic as ``ops/checks.h`` ``byte_runs``."""
    es, begin = t.element_size(), t.data_ptr()
    if t.numel() == 0:
        return begin, 0, 0, 1
    merged: list[list[int]] = []
    for stride, size in sorted((st, n) for n, st in zip(t.shape, t.stride()) if n > 1):
        if merged and merged[-1][0] * merged[-1][1] == stride:
            merged[-1][1] *= size
        else:
            merged.append([stride, size])
    if not merged:
        return begin, es, es, 1
    if len(merged) == 1:  # one run, or single elements spaced alike (a column)
        stride, size = merged[0]
        return (begin, size * es, size * es, 1) if stride == 1 else (begin, es, stride * es, size)
    if merged[0][0] == 1 and len(merged) == 2:
        return begin, merged[0][1] * es, merged[1][0] * es, merged[1][1]
    extent = (sum((size - 1) * stride for stride, size in merged) + 1) * es
    return begin, extent, extent, 1


def share_memory(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Whether two tensors share a byte: exact where both are runs of one pitch (row-major views of one
    buffer, column slices side by side included), otherwise whether their byte ranges intersect."""
    xb, xw, xp, xr = _byte_runs(x)
    yb, yw, yp, yr = _byte_runs(y)
    if xw == 0 or yw == 0 or xb + (xr - 1) * xp + xw <= yb or yb + (yr - 1) * yp + yw <= xb:
        return False
    if xr == 1:
        xp = yp
    if yr == 1:
        yp = xp
    if xp != yp or xw > xp or yw > yp or xp <= 0:
        return True
    # Row r of x and row s of y meet iff, with k = s - r, -yw - delta < k * pitch < xw - delta.
    delta = yb - xb
    k_lo = (-yw - delta) // xp + 1
    k_hi = -((delta - xw) // xp) - 1
    return max(k_lo, -(xr - 1)) <= min(k_hi, yr - 1)


def check_output_disjoint(d_name: str, d: torch.Tensor, inputs: Iterable[tuple[str, Optional[torch.Tensor]]]) -> None:
    """A GEMM output is written while its inputs are still read: it must share no byte with them."""
    for name, x in inputs:
        if x is not None and share_memory(d, x):
            fail(d_name, f"memory that {name} does not use (the kernel writes {d_name} while it still reads {name})",
                 f"{d_name} of shape {tuple(d.shape)} strides {d.stride()} overlapping {name} of shape "
                 f"{tuple(x.shape)} strides {x.stride()}")
