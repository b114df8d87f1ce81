"""Shared pytest setup: GPU tests (marker ``gpu``) run only on an SM90 device with hopperkit._C loaded,
and are skipped elsewhere with the reason shown (pyproject's addopts has -rs)."""

from __future__ import annotations

import pytest
import torch


def gpu_skip_reason() -> str | None:
    from hopperkit import _ops

    if not torch.cuda.is_available():
        return "needs an SM90 GPU: this machine has no CUDA device"
    cap = torch.cuda.get_device_capability()
    if cap != (9, 0):
        return f"needs an SM90 GPU: device 0 is sm_{cap[0]}{cap[1]}"
    if not _ops.EXTENSION_LOADED:
        return f"needs the compiled extension hopperkit._C, which did not load: {_ops.EXTENSION_ERROR}"
    return None


def pytest_collection_modifyitems(config, items):
    reason = gpu_skip_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def cuda() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device())
