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
