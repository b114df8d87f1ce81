"""The aliasing checks the ops run before a launch, on the CPU: the Python one (``_validation``) against
a byte-by-byte count, and the C++ one the kernel path runs (``ops/checks.h``, exposed as
``torch.ops.hopperkit._share_memory``) against the Python one."""

from __future__ import annotations

import itertools
import random

import pytest
import torch

from hopperkit import _ops
from hopperkit._validation import check_no_self_overlap, share_memory

_DTYPES = {1: torch.uint8, 2: torch.bfloat16, 4: torch.float32}


def _bytes(t: torch.Tensor) -> set[int]:
    es, base = t.element_size(), t.data_ptr()
    out: set[int] = set()
    for index in itertools.product(*(range(n) for n in t.shape)):
        start = base + sum(i * st for i, st in zip(index, t.stride())) * es
        out.update(range(start, start + es))
    return out


def _random_view(rng: random.Random, storage: torch.Tensor) -> torch.Tensor:
    """A view of ``storage`` as a GEMM operand or output could be: row-major with padded rows, a slice
    of columns, a transposed or strided view, an expand()-ed one, in 1 to 3 dims."""
    es = rng.choice((1, 2, 4))
    flat = storage.view(_DTYPES[es])
    ndim = rng.choice((1, 2, 2, 2, 3))
    shape = [rng.randint(0, 6) for _ in range(ndim)]
    if rng.random() < 0.7:
        strides, step = [0] * ndim, 1
        for i in reversed(range(ndim)):
            strides[i] = step
            step = step * max(shape[i], 1) + (rng.choice((0, 0, 1, 3, 8)) if i else 0)
    else:
        strides = [rng.randint(0, 20) for _ in range(ndim)]
    span = sum((n - 1) * st for n, st in zip(shape, strides)) if all(shape) else 0
    offset = rng.randint(0, max(0, min(200, flat.numel() - span - 1)))
    return flat.as_strided(shape, strides, offset)


def _pairs(count: int, seed: int):
    rng = random.Random(seed)
    storage = torch.empty(4096, dtype=torch.uint8)
    for _ in range(count):
        yield _random_view(rng, storage), _random_view(rng, storage)


def test_share_memory_never_misses_an_overlap():
    overlapping = 0
    for x, y in _pairs(1500, seed=1):
        if _bytes(x) & _bytes(y):
            overlapping += 1
            assert share_memory(x, y), (x.shape, x.stride(), x.storage_offset(), y.shape, y.stride(), y.storage_offset())
    assert overlapping > 100  # the draw covers both outcomes


def test_share_memory_is_exact_for_rows_of_one_pitch():
    """Row-major views of one buffer (column slices side by side, row ranges, single columns) are told
    apart exactly: a D next to its input in one buffer is accepted."""
    rng = random.Random(2)
    flat = torch.empty(4096, dtype=torch.uint8)
    for _ in range(1500):
        es = rng.choice((1, 2, 4))
        buf = flat.view(_DTYPES[es])
        pitch = rng.randint(1, 40)
        x, y = (buf.as_strided((rng.randint(1, 6), rng.randint(1, pitch)), (pitch, 1), rng.randint(0, 300))
                for _ in range(2))
        assert share_memory(x, y) == bool(_bytes(x) & _bytes(y))
    b = torch.empty(8, 24, dtype=torch.bfloat16)
    assert not share_memory(b[:, :10], b[:, 10:]) and share_memory(b[:, :11], b[:, 10:])
    assert not share_memory(b[:4], b[4:]) and not share_memory(b[1:5, 3:4], b[4:6, 4:9])


@pytest.mark.skipif(not _ops.EXTENSION_LOADED, reason="needs hopperkit._C (the C++ checks)")
def test_cpp_check_matches_python():
    for x, y in _pairs(3000, seed=3):
        assert torch.ops.hopperkit._share_memory(x, y) == share_memory(x, y), (
            x.shape, x.stride(), x.storage_offset(), x.dtype, y.shape, y.stride(), y.storage_offset(), y.dtype)


def test_no_self_overlap():
    for ok in (torch.empty(3, 4, 5), torch.empty(3, 4, 5)[:, ::2], torch.empty(5, 4).T, torch.empty(0, 3),
               torch.empty(2, 1, 3).expand(2, 1, 3), torch.empty(4, 16)[:, :8]):
        check_no_self_overlap("t", ok)
    for bad in (torch.empty(1, 4).expand(3, 4), torch.empty(10).as_strided((3, 4), (2, 1))):
        with pytest.raises(ValueError, match="does not overlap itself"):
            check_no_self_overlap("t", bad)
