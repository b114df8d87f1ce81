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


class _ReferenceWithout:
    """Stands in for ``hopperkit.reference.gemm`` inside ``hopperkit.gemm``: the named functions raise,
    every other name is the real one."""

    def __init__(self, real, forbidden: set[str]):
        self._real = real
        self._forbidden = forbidden

    def __getattr__(self, name: str):
        if name in self._forbidden:
            def fallback_taken(*args, **kwargs):
                raise AssertionError(f"hopperkit.gemm fell back to reference.gemm.{name} where the kernel must run")

            return fallback_taken
        return getattr(self._real, name)


@pytest.fixture
def forbid_reference(monkeypatch):
    """``forbid_reference("bf16_gemm_nt", ...)``: for the rest of the test, hopperkit.gemm raises if it
    falls back to one of these reference functions, so a test meant to exercise a kernel fails instead
    of comparing the reference with itself. Only hopperkit.gemm's binding is replaced: the tests' own
    ``hopperkit.reference.gemm`` calls still compute the expected values."""
    import importlib

    gemm_module = importlib.import_module("hopperkit.gemm")
    real = gemm_module._ref
    forbidden: set[str] = set()

    def forbid(*names: str) -> None:
        for name in names:
            getattr(real, name)  # a misspelt name fails here rather than forbidding nothing
        forbidden.update(names)
        monkeypatch.setattr(gemm_module, "_ref", _ReferenceWithout(real, forbidden))

    return forbid


@pytest.fixture
def assert_faults_caught(monkeypatch):
    """``assert_faults_caught(ops, corrupt, run_case, cases)``: wraps each named hopperkit op so that
    ``corrupt(args, result)`` damages its output after it ran, returning whether there was anything to
    damage; then runs ``run_case(i)`` (which returns the case's label) for i in range(cases). Every case
    whose output was damaged must fail with an AssertionError, no undamaged case may fail, and at least
    one case must have been damaged: the case's checks then demonstrably catch that fault."""
    import hopperkit

    def check(ops, corrupt, run_case, cases: int) -> None:
        damaged: list[bool] = []
        for name in ops:
            def faulty(*args, _real=getattr(hopperkit, name), **kwargs):
                result = _real(*args, **kwargs)
                damaged.append(corrupt(args, result))
                return result

            monkeypatch.setattr(hopperkit, name, faulty)
        caught = 0
        for i in range(cases):
            damaged.clear()
            try:
                label = run_case(i)
            except AssertionError:
                if not any(damaged):
                    raise
                caught += 1
                continue
            assert not any(damaged), f"{label}: the damaged output went unnoticed"
        assert caught > 0, f"none of the {cases} cases had an output to damage"

    return check
