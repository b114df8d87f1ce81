"""Reference GEMMs, DeepGEMM SM90 semantics: ``D = C + A·Bᵀ`` with A ``[M, K]`` and B ``[N, K]``
(both K-major, "nt").

FP8 operands are float8_e4m3fn with float32 scale factors (``real = fp8 × sf``), one scale per 128
consecutive K elements of a row of A (``sfa`` ``[M, ceil(K/128)]``) and per 128×128 block of B
(recipe ``(1, 128, 128)``, "1d2d") or per 128 K elements of a row of B (recipe ``(1, 1, 128)``,
"1d1d").

**Two-level accumulation** (what the SM90 kernels do, because the FP8 tensor-core accumulator keeps
fewer than 24 mantissa bits, so partial sums are promoted to a float32 register accumulator once per
K block): for every 128-wide K block ``kb`` in increasing order (the last block is partial when
``K % 128 != 0``)::

    P_kb[m, n]  = Σ_{k in kb} float32(A[m, k]) · float32(B[n, k])      # float32, exact products
    s_kb[m, n]  = fl32(sfa[m, kb] · sfb(n, kb))                         # sfb: block or row scale
    acc[m, n]   = fl32(acc[m, n] + fl32(s_kb[m, n] · P_kb[m, n]))       # acc starts at +0.0

and finally ``D = out_dtype(fl32(C + acc))`` (1d1d) or ``D = out_dtype(acc)`` (1d2d), rounding to
nearest even. The summation order inside ``P_kb`` is not specified (tensor cores and BLAS differ) and
the kernels may fuse the multiply-add, so a kernel matches these references to a float32-accumulation
tolerance, not bit for bit. Products of two e4m3 (or two bf16) values are exact in float32, and every
operand is exactly representable in TF32/bf16, so ``allow_tf32`` and
``torch.set_float32_matmul_precision`` do not change the results beyond the summation order.

Row conventions of the grouped GEMMs (hopperkit's documented contract): output rows that belong to no
group (``m_indices == -1`` or any id outside ``[0, G)``; rows ``>= masked_m[g]``) are exactly 0, and
whatever A or its scales hold there (NaN included) never reaches any output element.

None of the functions that take device tensors (``masked_m``, ``m_indices``, ``psum``) reads their
values on the host: no ``.item()``, no data-dependent shapes, so they can be captured in a CUDA graph.
The price is compute: the m-grouped contiguous references evaluate every group over all rows.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch

__all__ = [
    "BLOCK_K",
    "fp8_gemm_nt",
    "bf16_gemm_nt",
    "m_grouped_fp8_gemm_nt_contiguous",
    "m_grouped_fp8_gemm_nt_masked",
    "m_grouped_bf16_gemm_nt_contiguous",
    "m_grouped_bf16_gemm_nt_masked",
    "k_grouped_fp8_gemm_nt_contiguous",
    "k_grouped_bf16_gemm_tn_contiguous",
    "m_indices_from_psum",
]

BLOCK_K = 128  # K elements per scale factor (and per promotion of the tensor-core accumulator)
_BLOCK_N_SFB = 128  # rows of B per scale factor in the 1d2d recipe

_RECIPE_1D2D = (1, 128, 128)
_RECIPE_1D1D = (1, 1, 128)
_FP8 = torch.float8_e4m3fn


def _ceil_div(a: int, b: int) -> int:
    return (a + b - 1) // b


# --------------------------------------------------------------------------------------------------
# argument checks (metadata only: they never read tensor data)
# --------------------------------------------------------------------------------------------------


def _check(
    t: object,
    name: str,
    dtype: torch.dtype,
    shape: Optional[Tuple[int, ...]] = None,
    dim: Optional[int] = None,
) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"hopperkit: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise TypeError(f"hopperkit: {name} must be {dtype}, got {t.dtype}")
    if dim is not None and t.dim() != dim:
        raise ValueError(f"hopperkit: {name} must be {dim}-D, got shape {list(t.shape)}")
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise ValueError(f"hopperkit: {name} must have shape {list(shape)}, got {list(t.shape)}")
    return t


def _check_same_device(**tensors: Optional[torch.Tensor]) -> None:
    present = {k: v for k, v in tensors.items() if v is not None}
    devices = {v.device for v in present.values()}
    if len(devices) > 1:
        listing = ", ".join(f"{k} on {v.device}" for k, v in present.items())
        raise ValueError(f"hopperkit: all tensors must be on one device, got {listing}")


def _parse_recipe(recipe: Optional[Sequence[int]]) -> Tuple[int, int, int]:
    if recipe is None:
        return _RECIPE_1D2D
    try:
        parsed = tuple(int(v) for v in recipe)
    except TypeError:
        raise TypeError(f"hopperkit: recipe must be a tuple of 3 ints, got {recipe!r}") from None
    if parsed not in (_RECIPE_1D2D, _RECIPE_1D1D):
        raise ValueError(
            f"hopperkit: recipe must be (1, 128, 128) (1d2d) or (1, 1, 128) (1d1d) on SM90, got {recipe!r}"
        )
    return parsed


# --------------------------------------------------------------------------------------------------
# cores
# --------------------------------------------------------------------------------------------------


def _expand_block_sfb(sfb: torch.Tensor, n: int) -> torch.Tensor:
    """[..., ceil(N/128), KB] block scales → [..., N, KB] per-row scales (same values)."""
    # expand + reshape rather than repeat_interleave: its output size is pure shape arithmetic, so
    # no device version of it can need a host round trip.
    *lead, nb, kb = sfb.shape
    rows = sfb.unsqueeze(-2).expand(*lead, nb, _BLOCK_N_SFB, kb).reshape(*lead, nb * _BLOCK_N_SFB, kb)
    return rows[..., :n, :]


def _two_level_fp8(
    a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb_rows: torch.Tensor
) -> torch.Tensor:
    """Two-level accumulation (module docstring) of ``[..., M, K] × [..., N, K]ᵀ`` → float32 ``[..., M, N]``.

    ``a``/``b`` are float32 tensors holding the e4m3 values (already converted), ``sfa`` is
    ``[..., M, KB]`` and ``sfb_rows`` ``[..., N, KB]`` (the B scale of every row ``n``).
    """
    k = a.shape[-1]
    out_shape = a.shape[:-1] + (b.shape[-2],)
    acc = torch.zeros(out_shape, dtype=torch.float32, device=a.device)
    for kb in range(_ceil_div(k, BLOCK_K)):
        lo, hi = kb * BLOCK_K, min(k, (kb + 1) * BLOCK_K)
        partial = torch.matmul(a[..., lo:hi], b[..., lo:hi].transpose(-1, -2))
        scale = sfa[..., :, kb : kb + 1] * sfb_rows[..., kb].unsqueeze(-2)
        acc = acc + scale * partial
    return acc


def _dense_fp8(a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb_rows: torch.Tensor) -> torch.Tensor:
    return _two_level_fp8(a.float(), sfa.float(), b.float(), sfb_rows)


# --------------------------------------------------------------------------------------------------
# dense
# --------------------------------------------------------------------------------------------------


def fp8_gemm_nt(
    a: torch.Tensor,
    sfa: torch.Tensor,
    b: torch.Tensor,
    sfb: torch.Tensor,
    c: Optional[torch.Tensor] = None,
    *,
    recipe: Optional[Sequence[int]] = _RECIPE_1D2D,
    out_dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    """FP8 block-scaled GEMM ``D = C + A·Bᵀ`` with two-level accumulation (see the module docstring).

    Args:
        a: float8_e4m3fn ``[M, K]``.
        sfa: float32 ``[M, ceil(K/128)]``, any strides: scale of ``a[m, kb·128 : (kb+1)·128]``.
        b: float8_e4m3fn ``[N, K]``.
        sfb: float32, any strides. Recipe ``(1, 128, 128)`` ("1d2d"): ``[ceil(N/128), ceil(K/128)]``,
            the scale of the 128×128 block ``(n // 128, kb)``. Recipe ``(1, 1, 128)`` ("1d1d"):
            ``[N, ceil(K/128)]``, one scale per row and K block.
        c: 1d2d: must be ``None``. 1d1d: required, float32 ``[M, N]``; added once, after the K loop
            (``D = fl32(C + acc)``; with ``K == 0``, ``D`` is a copy of ``C``).
        recipe: ``(1, 128, 128)`` (default; ``None`` means the same) or ``(1, 1, 128)``.
        out_dtype: 1d2d: ``torch.bfloat16`` (default; the only dtype the SM90 kernel writes) or
            ``torch.float32`` (the accumulator itself, for tests). 1d1d: ``torch.float32`` only.

    Returns:
        New ``[M, N]`` tensor of ``out_dtype``.
    """
    parsed = _parse_recipe(recipe)
    _check(a, "a", _FP8, dim=2)
    m, k = a.shape
    _check(b, "b", _FP8, dim=2)
    n = b.shape[0]
    if b.shape[1] != k:
        raise ValueError(f"hopperkit: b must be [N, K] with K = a.shape[1] = {k}, got {list(b.shape)}")
    kb = _ceil_div(k, BLOCK_K)
    _check(sfa, "sfa", torch.float32, shape=(m, kb))
    if parsed == _RECIPE_1D2D:
        _check(sfb, "sfb", torch.float32, shape=(_ceil_div(n, _BLOCK_N_SFB), kb))
        if c is not None:
            raise ValueError("hopperkit: c must be None with recipe (1, 128, 128); use recipe (1, 1, 128) to accumulate")
        out_dtype = torch.bfloat16 if out_dtype is None else out_dtype
        if out_dtype not in (torch.bfloat16, torch.float32):
            raise ValueError(f"hopperkit: out_dtype must be torch.bfloat16 or torch.float32 for 1d2d, got {out_dtype}")
        _check_same_device(a=a, sfa=sfa, b=b, sfb=sfb)
        return _dense_fp8(a, sfa, b, _expand_block_sfb(sfb, n)).to(out_dtype)

    _check(sfb, "sfb", torch.float32, shape=(n, kb))
    if c is None:
        raise ValueError("hopperkit: c (float32 [M, N]) is required with recipe (1, 1, 128)")
    _check(c, "c", torch.float32, shape=(m, n))
    if out_dtype not in (None, torch.float32):
        raise ValueError(f"hopperkit: out_dtype must be torch.float32 for 1d1d, got {out_dtype}")
    _check_same_device(a=a, sfa=sfa, b=b, sfb=sfb, c=c)
    if k == 0:
        # The kernel is not launched: D is C unchanged (keeps -0.0, which C + 0.0 would not).
        return c.clone(memory_format=torch.contiguous_format)
    return c + _dense_fp8(a, sfa, b, sfb)


def bf16_gemm_nt(
    a: torch.Tensor,
    b: torch.Tensor,
    c: Optional[torch.Tensor] = None,
    *,
    out_dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    """BF16 GEMM ``D = C + A·Bᵀ``, float32 accumulation.

    Args:
        a: bfloat16 ``[M, K]``.
        b: bfloat16 ``[N, K]``.
        c: optional ``[M, N]`` bfloat16 or float32; converted to float32 and added once to the
            float32 product.
        out_dtype: ``torch.bfloat16`` (default) or ``torch.float32``.

    Returns:
        New ``[M, N]`` tensor: ``out_dtype(fl32(float32(C) + Σ_k float32(A[m,k])·float32(B[n,k])))``
        (summation order unspecified).
    """
    _check(a, "a", torch.bfloat16, dim=2)
    m, k = a.shape
    _check(b, "b", torch.bfloat16, dim=2)
    n = b.shape[0]
    if b.shape[1] != k:
        raise ValueError(f"hopperkit: b must be [N, K] with K = a.shape[1] = {k}, got {list(b.shape)}")
    out_dtype = torch.bfloat16 if out_dtype is None else out_dtype
    if out_dtype not in (torch.bfloat16, torch.float32):
        raise ValueError(f"hopperkit: out_dtype must be torch.bfloat16 or torch.float32, got {out_dtype}")
    if c is not None:
        if not isinstance(c, torch.Tensor) or c.dtype not in (torch.bfloat16, torch.float32):
            raise TypeError(f"hopperkit: c must be a bfloat16 or float32 tensor, got {getattr(c, 'dtype', type(c))}")
        _check(c, "c", c.dtype, shape=(m, n))
    _check_same_device(a=a, b=b, c=c)
    out = torch.matmul(a.float(), b.float().t())
    if c is not None:
        out = c.float() + out
    return out.to(out_dtype)


# --------------------------------------------------------------------------------------------------
# m-grouped
# --------------------------------------------------------------------------------------------------


def _check_m_indices(m_indices: torch.Tensor, m_sum: int) -> None:
    _check(m_indices, "m_indices", torch.int32, shape=(m_sum,))


def _group_row_mask(m_indices: torch.Tensor, g: int) -> torch.Tensor:
    return (m_indices == g).unsqueeze(-1)  # [M_sum, 1]


def m_grouped_fp8_gemm_nt_contiguous(
    a: torch.Tensor,
    sfa: torch.Tensor,
    b: torch.Tensor,
    sfb: torch.Tensor,
    m_indices: torch.Tensor,
) -> torch.Tensor:
    """MoE grouped FP8 GEMM, rows of all experts concatenated ("contiguous" layout), 1d2d scales.

    Args:
        a: float8_e4m3fn ``[M_sum, K]``.
        sfa: float32 ``[M_sum, ceil(K/128)]``, any strides.
        b: float8_e4m3fn ``[G, N, K]``.
        sfb: float32 ``[G, ceil(N/128), ceil(K/128)]``, any strides.
        m_indices: int32 ``[M_sum]``, the expert of every row; ``-1`` marks padding. The kernels
            additionally need each expert's rows to form segments aligned to 128
            (``get_mk_alignment_for_contiguous_layout()``); the reference does not depend on it.

    Returns:
        bfloat16 ``[M_sum, N]``: row ``i`` is ``bf16(two_level(A[i], B[m_indices[i]]))`` when
        ``0 <= m_indices[i] < G``, else exactly 0. Values of A/SFA in other rows never enter it.
    """
    _check(a, "a", _FP8, dim=2)
    m_sum, k = a.shape
    _check(b, "b", _FP8, dim=3)
    groups, n = b.shape[0], b.shape[1]
    if b.shape[2] != k:
        raise ValueError(f"hopperkit: b must be [G, N, K] with K = a.shape[1] = {k}, got {list(b.shape)}")
    kb = _ceil_div(k, BLOCK_K)
    _check(sfa, "sfa", torch.float32, shape=(m_sum, kb))
    _check(sfb, "sfb", torch.float32, shape=(groups, _ceil_div(n, _BLOCK_N_SFB), kb))
    _check_m_indices(m_indices, m_sum)
    _check_same_device(a=a, sfa=sfa, b=b, sfb=sfb, m_indices=m_indices)

    af, bf = a.float(), b.float()
    sfb_rows = _expand_block_sfb(sfb, n)
    out = torch.zeros(m_sum, n, dtype=torch.float32, device=a.device)
    for g in range(groups):
        rows = _group_row_mask(m_indices, g)
        # torch.where (a select, not a multiply by 0) so NaN/inf in other groups' rows cannot leak.
        a_g = torch.where(rows, af, 0.0)
        sfa_g = torch.where(rows, sfa, 0.0)
        out = torch.where(rows, _two_level_fp8(a_g, sfa_g, bf[g], sfb_rows[g]), out)
    return out.to(torch.bfloat16)


def m_grouped_bf16_gemm_nt_contiguous(a: torch.Tensor, b: torch.Tensor, m_indices: torch.Tensor) -> torch.Tensor:
    """MoE grouped BF16 GEMM, contiguous layout.

    Args:
        a: bfloat16 ``[M_sum, K]``.
        b: bfloat16 ``[G, N, K]``.
        m_indices: int32 ``[M_sum]``, expert per row, ``-1`` = padding.

    Returns:
        bfloat16 ``[M_sum, N]``: ``bf16(Σ_k float32(A[i,k])·float32(B[g,n,k]))`` for rows with
        ``g = m_indices[i]`` in ``[0, G)``, exactly 0 elsewhere (A's values there never leak).
    """
    _check(a, "a", torch.bfloat16, dim=2)
    m_sum, k = a.shape
    _check(b, "b", torch.bfloat16, dim=3)
    groups, n = b.shape[0], b.shape[1]
    if b.shape[2] != k:
        raise ValueError(f"hopperkit: b must be [G, N, K] with K = a.shape[1] = {k}, got {list(b.shape)}")
    _check_m_indices(m_indices, m_sum)
    _check_same_device(a=a, b=b, m_indices=m_indices)

    af, bf = a.float(), b.float()
    out = torch.zeros(m_sum, n, dtype=torch.float32, device=a.device)
    for g in range(groups):
        rows = _group_row_mask(m_indices, g)
        out = torch.where(rows, torch.matmul(torch.where(rows, af, 0.0), bf[g].t()), out)
    return out.to(torch.bfloat16)


def m_indices_from_psum(psum: torch.Tensor, m_sum: int, alignment: int = 128) -> torch.Tensor:
    """Convert DeepGEMM's "psum" grouped layout into the per-row ``m_indices`` layout.

    Args:
        psum: int32 ``[G]``, non-decreasing cumulative *end* offsets: group ``g`` occupies rows
            ``[align(psum[g-1], alignment), psum[g])`` (``psum[-1]`` taken as 0), which is empty when
            that range is.
        m_sum: number of rows of A.
        alignment: segment start alignment (``get_mk_alignment_for_contiguous_layout()``).

    Returns:
        int32 ``[m_sum]``: ``g`` on group ``g``'s rows, ``-1`` on alignment gaps and rows past
        ``psum[G-1]``. Computed on ``psum``'s device without reading it on the host.
    """
    _check(psum, "psum", torch.int32, dim=1)
    if not isinstance(m_sum, int) or m_sum < 0:
        raise ValueError(f"hopperkit: m_sum must be a non-negative int, got {m_sum!r}")
    if not isinstance(alignment, int) or alignment <= 0:
        raise ValueError(f"hopperkit: alignment must be a positive int, got {alignment!r}")
    groups = psum.shape[0]
    rows = torch.arange(m_sum, dtype=torch.int64, device=psum.device)
    if groups == 0:
        return torch.full((m_sum,), -1, dtype=torch.int32, device=psum.device)
    ends = psum.to(torch.int64)
    prev_ends = torch.cat([ends.new_zeros(1), ends[:-1]])
    starts = (prev_ends + alignment - 1) // alignment * alignment
    # The first group whose end lies beyond the row; empty groups (end == previous end) are skipped.
    group = torch.searchsorted(ends.contiguous(), rows, right=True)
    safe = group.clamp(max=groups - 1)
    inside = (group < groups) & (rows >= starts[safe])
    return torch.where(inside, group, -1).to(torch.int32)


def _masked_rows(masked_m: torch.Tensor, m_max: int) -> torch.Tensor:
    """[G, M_max, 1] bool: row i of group g is valid iff i < masked_m[g] (negative counts as 0)."""
    rows = torch.arange(m_max, dtype=torch.int32, device=masked_m.device)
    return (rows.unsqueeze(0) < masked_m.unsqueeze(1)).unsqueeze(-1)


def m_grouped_fp8_gemm_nt_masked(
    a: torch.Tensor,
    sfa: torch.Tensor,
    b: torch.Tensor,
    sfb: torch.Tensor,
    masked_m: torch.Tensor,
) -> torch.Tensor:
    """MoE grouped FP8 GEMM with a per-group row count read on the device ("masked" layout), 1d2d.

    Args:
        a: float8_e4m3fn ``[G, M_max, K]``.
        sfa: float32 ``[G, M_max, ceil(K/128)]``, any strides.
        b: float8_e4m3fn ``[G, N, K]``.
        sfb: float32 ``[G, ceil(N/128), ceil(K/128)]``, any strides.
        masked_m: int32 ``[G]`` on the device: valid rows per group (values above ``M_max`` act as
            ``M_max``, negative ones as 0).

    Returns:
        bfloat16 ``[G, M_max, N]``: ``bf16(two_level(A[g, i], B[g]))`` for ``i < masked_m[g]``,
        exactly 0 for the other rows (their A/SFA values, NaN included, never leak).
    """
    _check(a, "a", _FP8, dim=3)
    groups, m_max, k = a.shape
    _check(b, "b", _FP8, dim=3)
    n = b.shape[1]
    if b.shape[0] != groups or b.shape[2] != k:
        raise ValueError(f"hopperkit: b must be [G, N, K] = [{groups}, N, {k}], got {list(b.shape)}")
    kb = _ceil_div(k, BLOCK_K)
    _check(sfa, "sfa", torch.float32, shape=(groups, m_max, kb))
    _check(sfb, "sfb", torch.float32, shape=(groups, _ceil_div(n, _BLOCK_N_SFB), kb))
    _check(masked_m, "masked_m", torch.int32, shape=(groups,))
    _check_same_device(a=a, sfa=sfa, b=b, sfb=sfb, masked_m=masked_m)

    rows = _masked_rows(masked_m, m_max)
    a_valid = torch.where(rows, a.float(), 0.0)
    sfa_valid = torch.where(rows, sfa, 0.0)
    out = _two_level_fp8(a_valid, sfa_valid, b.float(), _expand_block_sfb(sfb, n))
    return torch.where(rows, out, 0.0).to(torch.bfloat16)


def m_grouped_bf16_gemm_nt_masked(a: torch.Tensor, b: torch.Tensor, masked_m: torch.Tensor) -> torch.Tensor:
    """MoE grouped BF16 GEMM, masked layout.

    Args:
        a: bfloat16 ``[G, M_max, K]``.
        b: bfloat16 ``[G, N, K]``.
        masked_m: int32 ``[G]`` on the device, valid rows per group.

    Returns:
        bfloat16 ``[G, M_max, N]``: float32-accumulated ``A[g, i]·B[g]ᵀ`` for ``i < masked_m[g]``,
        exactly 0 for the other rows.
    """
    _check(a, "a", torch.bfloat16, dim=3)
    groups, m_max, k = a.shape
    _check(b, "b", torch.bfloat16, dim=3)
    if b.shape[0] != groups or b.shape[2] != k:
        raise ValueError(f"hopperkit: b must be [G, N, K] = [{groups}, N, {k}], got {list(b.shape)}")
    _check(masked_m, "masked_m", torch.int32, shape=(groups,))
    _check_same_device(a=a, b=b, masked_m=masked_m)

    rows = _masked_rows(masked_m, m_max)
    out = torch.matmul(torch.where(rows, a.float(), 0.0), b.float().transpose(-1, -2))
    return torch.where(rows, out, 0.0).to(torch.bfloat16)


# --------------------------------------------------------------------------------------------------
# k-grouped (MoE weight gradient)
# --------------------------------------------------------------------------------------------------


def _k_group_sizes(ks: Sequence[int]) -> list:
    """The per-group K of the k-grouped GEMMs as Python ints, each a non-negative multiple of 128."""
    try:
        ks = [int(v) for v in ks]
    except TypeError:
        raise TypeError(f"hopperkit: ks must be a sequence of Python ints, got {type(ks).__name__}") from None
    for g, kg in enumerate(ks):
        if kg < 0 or kg % BLOCK_K != 0:
            raise ValueError(f"hopperkit: ks[{g}] must be a non-negative multiple of {BLOCK_K}, got {kg}")
    return ks


def k_grouped_fp8_gemm_nt_contiguous(
    a: torch.Tensor,
    sfa: torch.Tensor,
    b: torch.Tensor,
    sfb: torch.Tensor,
    ks: Sequence[int],
    c: torch.Tensor,
) -> torch.Tensor:
    """K-grouped FP8 GEMM with accumulation (MoE weight gradient), 1d1d scales.

    Args:
        a: float8_e4m3fn flat buffer (any shape) of ``M·Σks`` elements: for each group ``g`` in order,
            a K-major ``[M, ks[g]]`` block (``A_g``), read in logical (row-major) element order.
        sfa: float32 ``[M, Σks / 128]``, any strides: group ``g`` owns the K-block columns
            ``[Σks[:g] / 128, Σks[:g+1] / 128)``.
        b: float8_e4m3fn flat buffer of ``N·Σks`` elements, ``[N, ks[g]]`` blocks (``B_g``).
        sfb: float32 ``[N, Σks / 128]``, laid out like ``sfa``.
        ks: Python ints, per-group K, each a non-negative multiple of 128 (0 = empty group).
        c: float32 ``[G, M, N]`` with ``G = len(ks)``.

    Returns:
        New float32 ``[G, M, N]``: ``fl32(C[g] + two_level(A_g, B_g))`` with per-row 1×128 scales
        on both operands; an empty group gives a copy of ``C[g]``.
    """
    ks = _k_group_sizes(ks)
    groups = len(ks)
    _check(c, "c", torch.float32, dim=3)
    if c.shape[0] != groups:
        raise ValueError(f"hopperkit: c must be [G, M, N] with G = len(ks) = {groups}, got {list(c.shape)}")
    m, n = c.shape[1], c.shape[2]
    k_total = sum(ks)
    _check(a, "a", _FP8)
    _check(b, "b", _FP8)
    if a.numel() != m * k_total:
        raise ValueError(f"hopperkit: a must hold M·sum(ks) = {m * k_total} elements, got {a.numel()}")
    if b.numel() != n * k_total:
        raise ValueError(f"hopperkit: b must hold N·sum(ks) = {n * k_total} elements, got {b.numel()}")
    _check(sfa, "sfa", torch.float32, shape=(m, k_total // BLOCK_K))
    _check(sfb, "sfb", torch.float32, shape=(n, k_total // BLOCK_K))
    _check_same_device(a=a, sfa=sfa, b=b, sfb=sfb, c=c)

    a_flat, b_flat = a.reshape(-1), b.reshape(-1)
    out = []
    k_begin = 0
    for g, kg in enumerate(ks):
        if kg == 0:
            out.append(c[g].clone(memory_format=torch.contiguous_format))
            continue
        a_g = a_flat[m * k_begin : m * (k_begin + kg)].view(m, kg)
        b_g = b_flat[n * k_begin : n * (k_begin + kg)].view(n, kg)
        cols = slice(k_begin // BLOCK_K, (k_begin + kg) // BLOCK_K)
        out.append(c[g] + _dense_fp8(a_g, sfa[:, cols], b_g, sfb[:, cols]))
        k_begin += kg
    if groups == 0:
        return torch.empty(0, m, n, dtype=torch.float32, device=c.device)
    return torch.stack(out)


def k_grouped_bf16_gemm_tn_contiguous(
    a: torch.Tensor,
    b: torch.Tensor,
    ks: Sequence[int],
    c: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """K-grouped BF16 GEMM (MoE weight gradient): ``D[g] = C[g] + A_gᵀ·B_g`` in FP32.

    Args:
        a: bfloat16 ``[Σks, M]``: group ``g`` owns rows ``[Σks[:g], Σks[:g+1])`` (``A_gᵀ``, K rows).
        b: bfloat16 ``[Σks, N]``, laid out like ``a``.
        ks: Python ints, per-group K, each a non-negative multiple of 128 (0 = empty group).
        c: float32 ``[G, M, N]`` or None (zeros).

    Returns:
        New float32 ``[G, M, N]``: ``C[g] + A_gᵀ·B_g`` with FP32 accumulation of the BF16 products; an
        empty group gives a copy of ``C[g]`` (zeros without C).
    """
    ks = _k_group_sizes(ks)
    k_total = sum(ks)
    _check(a, "a", torch.bfloat16, dim=2)
    _check(b, "b", torch.bfloat16, dim=2)
    if a.shape[0] != k_total or b.shape[0] != k_total:
        raise ValueError(f"hopperkit: a and b must have Σks = {k_total} rows, got {list(a.shape)} and {list(b.shape)}")
    groups, m, n = len(ks), a.shape[1], b.shape[1]
    if c is None:
        c = torch.zeros(groups, m, n, dtype=torch.float32, device=a.device)
    _check(c, "c", torch.float32, shape=(groups, m, n))
    _check_same_device(a=a, b=b, c=c)
    out = c.clone(memory_format=torch.contiguous_format)
    k_begin = 0
    for g, kg in enumerate(ks):
        if kg:
            out[g] += a[k_begin : k_begin + kg].float().T @ b[k_begin : k_begin + kg].float()
        k_begin += kg
    return out
