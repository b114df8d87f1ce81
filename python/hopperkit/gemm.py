"""GEMMs, DeepGEMM-compatible: ``D = C + A·Bᵀ`` ("nt"; nn/tn/tt are view aliases).

FP8 operands are ``float8_e4m3fn`` with float32 scales: ``a = (A, SFA)`` with SFA 1×128 (one scale per
row and 128 K), ``b = (B, SFB)`` with SFB 128×128 (recipe ``(1, 128, 128)``, "1d2d", BF16 D, no C) or
1×128 (recipe ``(1, 1, 128)``, "1d1d", FP32 D accumulated onto C, the weight-gradient recipe).

Limits, the same on every device (they are what a TMA-based SM90 kernel needs, so code that runs on
the reference path also runs on the kernels): FP8 operands K-major (``stride(-1) == 1``) with row
strides that are multiples of 16 bytes (K % 16 == 0 for contiguous rows); D and C row-major with row
strides that are multiples of 16 bytes (N % 8 for BF16, N % 4 for FP32). The FP8 GEMMs with a BF16 D
(1d2d, m-grouped) need N % 8 == 0 whatever D's strides (their kernels store D's rows in 16-byte
pieces); the FP32 D of the 1d1d ones takes any N, with N % 4 != 0 on the reference path.

Every output shares no memory with the call's inputs (operands, scales, index tensors): the kernels
write it while other thread blocks still read them.

Outputs: D is written one element per thread, so its elements must be distinct addresses (no
``expand()``-ed D, row stride >= N, group stride >= (rows - 1)·row stride + N). C may be D itself (same
address and strides: accumulate in place) or a tensor sharing no memory with D; a C that partly
overlaps D (including views of one buffer whose address ranges interleave) is refused. C itself may
repeat rows (e.g. a bias ``expand()``-ed to [M, N]).

BF16 operands may be K-major or MN-major (``bf16_gemm_nt`` and its aliases); the kernel reads them
through TMA, which needs the stride it steps over to be a multiple of 16 bytes (8 elements: K % 8 for
contiguous K-major rows, M % 8 or N % 8 for MN-major ones) and a 16-byte aligned base. BF16 operands
outside these limits are still accepted: they run the reference path (slower, same result).
"""

from __future__ import annotations

import itertools
from typing import Optional, Sequence

import torch

from . import _ops
from ._validation import (check_int, check_output_disjoint, check_same_device, check_tensor, check_values, describe,
                          fail)
from .reference import gemm as _ref
from .layout import get_mk_alignment_for_contiguous_layout, get_num_sms, get_pdl
from .reference.layout import get_mn_major_tma_aligned_tensor

__all__ = [
    "fp8_gemm_nt", "fp8_gemm_nn", "fp8_gemm_tn", "fp8_gemm_tt",
    "bf16_gemm_nt", "bf16_gemm_nn", "bf16_gemm_tn", "bf16_gemm_tt",
    "m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_gemm_nn_contiguous", "m_grouped_fp8_gemm_nt_masked",
    "k_grouped_fp8_gemm_nt_contiguous",
    "m_grouped_bf16_gemm_nt_contiguous", "m_grouped_bf16_gemm_nn_contiguous", "m_grouped_bf16_gemm_nt_masked",
    "k_grouped_bf16_gemm_tn_contiguous",
    # DeepGEMM's other names for the same functions (end of this module)
    "fp8_fp4_gemm_nt", "fp8_fp4_gemm_nn", "fp8_fp4_gemm_tn", "fp8_fp4_gemm_tt",
    "m_grouped_fp8_fp4_gemm_nt_contiguous", "m_grouped_fp8_fp4_gemm_nn_contiguous", "m_grouped_fp8_fp4_gemm_nt_masked",
    "fp8_m_grouped_gemm_nt_masked", "bf16_m_grouped_gemm_nt_masked",
]

FP8 = torch.float8_e4m3fn
RECIPE_1D2D = (1, 128, 128)
RECIPE_1D1D = (1, 1, 128)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _pair(name: str, x: object) -> tuple[torch.Tensor, torch.Tensor]:
    if not isinstance(x, (tuple, list)) or len(x) != 2:
        fail(name, "a pair (fp8 tensor, float32 scales)", describe(x), TypeError)
    return x[0], x[1]


def _pair_of_tensors(name: str, x: object) -> tuple[torch.Tensor, torch.Tensor]:
    """A pair of tensors (the layout aliases transpose them before the checks run)."""
    t, sf = _pair(name, x)
    check_tensor(f"{name}[0]", t)
    check_tensor(f"{name}[1]", sf)
    return t, sf


def _check_fp8_operand(name: str, t: object, shape: Sequence[Optional[int]]) -> torch.Tensor:
    check_tensor(name, t, dtype=FP8, shape=shape)
    if t.numel() and t.stride(-1) != 1 and t.size(-1) > 1:
        fail(name, "K-major (stride(-1) == 1); SM90 FP8 tensor cores read both operands K-major",
             f"strides {t.stride()}")
    for dim in range(t.dim() - 1):
        if t.size(dim) > 1 and t.stride(dim) % 16:
            fail(name, "16-byte aligned rows (strides multiples of 16 elements, e.g. K % 16 == 0)", f"strides {t.stride()}")
    for dim in range(t.dim() - 1):
        inner = 1 + sum((t.size(e) - 1) * t.stride(e) for e in range(dim + 1, t.dim()))
        if t.size(dim) > 1 and t.stride(dim) < inner:
            fail(name, "rows and groups that do not overlap (a row stride >= K, a group stride >= the rows' span; "
                 "TMA cannot read overlapping or expand()-ed operands: pass a .contiguous() copy)",
                 f"shape {tuple(t.shape)} strides {t.stride()}")
    if t.numel() and t.device.type != "meta" and t.data_ptr() % 16:
        fail(name, "16-byte aligned (TMA reads it)", f"a data pointer at offset {t.data_ptr() % 16} mod 16")
    return t


def _check_output(name: str, t: object, dtype: torch.dtype, shape: Sequence[int], written: bool = True) -> torch.Tensor:
    """D (``written``) or C: row-major with 16-byte aligned rows. A written tensor must also not overlap
    itself: each element is stored once, by one thread (the ops' check_output_elements_disjoint)."""
    check_tensor(name, t, dtype=dtype, shape=shape)
    align = 16 // t.element_size()
    if t.numel() and (t.stride(-1) != 1 or any(t.stride(i) % align for i in range(t.dim() - 1) if t.size(i) > 1)):
        fail(name, f"row-major with rows 16 bytes aligned (strides multiples of {align})", f"strides {t.stride()}")
    if written and t.numel():
        n = t.size(-1)
        rows_apart = t.size(-2) <= 1 or t.stride(-2) >= n
        groups_apart = t.dim() < 3 or t.size(0) <= 1 or t.stride(0) >= (t.size(1) - 1) * t.stride(1) + n
        if not (rows_apart and groups_apart):
            fail(name, "an output that does not overlap itself (it is written, one element per thread): row stride "
                 ">= N and, for [G, rows, N], group stride >= (rows - 1) * row stride + N; an expand()-ed or "
                 "as_strided view is not a valid output", f"shape {tuple(t.shape)} strides {t.stride()}")
    return t


def _byte_range(t: torch.Tensor) -> tuple[int, int]:
    begin = t.data_ptr()
    if t.numel() == 0:
        return begin, begin
    return begin, begin + (sum((s - 1) * st for s, st in zip(t.shape, t.stride())) + 1) * t.element_size()


def _check_c_and_d(c: Optional[torch.Tensor], d: torch.Tensor) -> None:
    """C is D itself (same address and strides) or shares no memory with D (module docstring): the
    kernels read C(r, c) and write D(r, c) in one thread, and the 1d1d ops copy a separate C into D
    first, so a partly overlapping C would be read after it was overwritten. Mirrors the ops' c_is_d.
    Call after the device check."""
    if c is None or "meta" in (c.device.type, d.device.type):
        return
    if c.data_ptr() == d.data_ptr() and c.stride() == d.stride():
        return
    (c_begin, c_end), (d_begin, d_end) = _byte_range(c), _byte_range(d)
    if c_begin < d_end and d_begin < c_end:
        fail("c", "d itself (same address and strides) or a tensor sharing no memory with d",
             f"c with strides {c.stride()} overlapping d (strides {d.stride()}, {c_begin - d_begin} bytes apart)")


def _check_bf16_d_cols(n: int) -> None:
    if n % 8:
        fail("b[0]", "N (its rows, the columns of d) a multiple of 8: the FP8 kernels store d's BF16 rows in "
             "16-byte pieces", f"N = {n}")


def _check_d_apart(d: torch.Tensor, *inputs: tuple[str, Optional[torch.Tensor]]) -> None:
    """D shares no memory with any input: the kernels write D while other CTAs still read the inputs
    (and the ops copy a separate C into D before they launch). Mirrors the ops' check_output_disjoint.
    Call after the device check."""
    if d.device.type != "meta":
        check_output_disjoint("d", d, inputs)


def _as_recipe(recipe: object) -> Optional[tuple]:
    """``recipe`` as a tuple, or None for anything that is not a sequence of ints."""
    if isinstance(recipe, (tuple, list)) and all(isinstance(x, int) and not isinstance(x, bool) for x in recipe):
        return tuple(recipe)
    return None


def _recipe(recipe: object, d: torch.Tensor) -> tuple[int, int, int]:
    if recipe is None:
        # DeepGEMM's SM90 default is 1d2d; an FP32 D can only be the 1d1d (weight-gradient) recipe.
        return RECIPE_1D1D if d.dtype == torch.float32 else RECIPE_1D2D
    if _as_recipe(recipe) not in (RECIPE_1D2D, RECIPE_1D1D):
        fail("recipe", f"{RECIPE_1D2D} (1x128 A, 128x128 B scales) or {RECIPE_1D1D} (1x128 both)", repr(recipe))
    return _as_recipe(recipe)


# DeepGEMM's arguments that choose what its JIT compiles or how its SM100 kernels take scales.
# Serving engines pass them on every call (vLLM sets disable_ue8m0_cast), so they are accepted with
# DeepGEMM's defaults and checked; on SM90 with kernels compiled ahead of time none of them changes
# the kernel or the result.
_COMPILED_DIMS = frozenset("".join(p) for r in range(4) for p in itertools.permutations("mnk", r))


def _check_deepgemm_options(compiled_dims: object, disable_ue8m0_cast: object = False, alpha: object = None) -> None:
    """``compiled_dims``: the dims DeepGEMM's JIT bakes into a kernel as constants; every hopperkit
    kernel is compiled ahead of time and takes all dims at run time, so any valid value behaves the
    same. ``disable_ue8m0_cast``: keeps FP32 scales where DeepGEMM's SM100 kernels would pack them to
    UE8M0; SM90 kernels always read FP32 scales. ``alpha``: a scale of D that DeepGEMM applies in its
    SM100 kernels only (it refuses it on SM90, and so does hopperkit)."""
    if (compiled_dims.__class__ is str and compiled_dims in _COMPILED_DIMS and disable_ue8m0_cast.__class__ is bool
            and alpha is None):
        return
    if not isinstance(compiled_dims, str):
        fail("compiled_dims", "a str of the letters m, n, k", describe(compiled_dims), TypeError)
    if compiled_dims not in _COMPILED_DIMS:
        fail("compiled_dims", "the letters m, n and k, each at most once (DeepGEMM's JIT option: which dims a "
             "kernel is compiled for; hopperkit's kernels take every dim at run time)", repr(compiled_dims))
    if not isinstance(disable_ue8m0_cast, bool):
        fail("disable_ue8m0_cast", "a bool", describe(disable_ue8m0_cast), TypeError)
    fail("alpha", "None (DeepGEMM scales D by alpha in its SM100 kernels only and refuses it on SM90)", repr(alpha))


def _recipe_from_pair(recipe: object, recipe_a: object, recipe_b: object) -> Optional[tuple]:
    """DeepGEMM's alternative to ``recipe``: (gran_mn, gran_k) of A and of B, as the (gran_m, gran_n,
    gran_k) recipe; ``recipe`` itself when neither is given."""
    if recipe_a is None and recipe_b is None:
        return recipe
    if recipe is not None:
        fail("recipe", "None when recipe_a and recipe_b are given (they are alternatives)", repr(recipe))
    ra, rb = _as_recipe(recipe_a), _as_recipe(recipe_b)
    for name, r, given in (("recipe_a", ra, recipe_a), ("recipe_b", rb, recipe_b)):
        if r is None or len(r) != 2:
            fail(name, "a (gran_mn, gran_k) pair of ints, given together with the other one", repr(given))
    if ra[1] != rb[1]:
        fail("recipe_b", f"the same gran_k as recipe_a ({ra[1]})", repr(recipe_b))
    return (ra[0], rb[0], ra[1])


def _check_grouped_recipe(recipe: object, recipe_a: object, recipe_b: object) -> None:
    """The m-grouped FP8 GEMMs run the 1d2d recipe only (on SM90, as in DeepGEMM)."""
    recipe = _recipe_from_pair(recipe, recipe_a, recipe_b)
    if recipe is not None and _as_recipe(recipe) != RECIPE_1D2D:
        fail("recipe", f"None or {RECIPE_1D2D}: the m-grouped FP8 GEMMs take 1x128 A and 128x128 B scales",
             repr(recipe))


def _renamed(name: str, value: object, old_name: str, old_value: object) -> object:
    """An argument that DeepGEMM renamed (``old_name`` in v2.1): either spelling, not both."""
    if old_value is None:
        if value is None:
            fail(name, f"given (or as {old_name}=, its name in DeepGEMM 2.1)", "nothing", TypeError)
        return value
    if value is not None:
        fail(name, f"given once ({name} and {old_name} are the same argument)", "both", TypeError)
    return old_value


def _check_psum_hint(use_psum_layout: object, expected_m_for_psum_layout: object) -> None:
    """``expected_m_for_psum_layout`` only steers the tile choice of a psum-layout call, as in DeepGEMM
    (which refuses it otherwise); the kernels' heuristic sizes the grid from M itself."""
    if not isinstance(use_psum_layout, bool):
        fail("use_psum_layout", "a bool", describe(use_psum_layout), TypeError)
    if expected_m_for_psum_layout is not None:
        if not use_psum_layout:
            fail("expected_m_for_psum_layout", "None unless use_psum_layout=True", repr(expected_m_for_psum_layout))
        check_int("expected_m_for_psum_layout", expected_m_for_psum_layout, min_value=1)


def _kernel_fast_path(call) -> bool:
    """The host-cheap lane of a kernel-backed GEMM: the C++ op checks every structural property itself
    (reading no tensor data) before it launches, so the Python checks are skipped when the call goes
    to a kernel. An input the fast lane does not handle returns False; so does the op's own rejection
    of an input (HK_CHECK_VALUE raises ValueError, HK_CHECK_TYPE TypeError), and the caller's full
    checks then raise the documented error naming the argument. Anything else (a CUDA error, a
    RuntimeError of torch or of the launcher) is a failure of the call and propagates: it must never
    turn into a silent rerun on the reference path. The lanes check argument types themselves, so the
    dispatcher never sees a non-tensor (it would raise RuntimeError)."""
    try:
        return bool(call())
    except (ValueError, TypeError):
        return False


def _positive_int32(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 1 <= x < 2**31


def _tensors(*xs: object) -> bool:
    return all(isinstance(x, torch.Tensor) for x in xs)


def _tensor_pair(x: object) -> bool:
    return isinstance(x, (tuple, list)) and len(x) == 2 and _tensors(*x)


def _fast_fp8_gemm_1d2d(a, b, d) -> bool:
    if not (_tensor_pair(a) and _tensor_pair(b)):
        return False
    A, SFA = a
    B, SFB = b
    if d.dtype != torch.bfloat16 or A.dim() != 2 or B.dim() != 2 or A.shape[0] == 0 or A.shape[1] == 0 or B.shape[0] == 0:
        return False
    device = d.device
    if not _ops.use_kernel("fp8_gemm_nt", device) or check_values(True, device):
        return False
    torch.ops.hopperkit.fp8_gemm_nt_1d2d(A, get_mn_major_tma_aligned_tensor(SFA), B, SFB, d, get_num_sms(device),
                                         get_pdl())
    return True


def fp8_gemm_nt(a: tuple, b: tuple, d: torch.Tensor, c: Optional[torch.Tensor] = None,
                recipe: Optional[Sequence[int]] = None, recipe_a: Optional[Sequence[int]] = None,
                recipe_b: Optional[Sequence[int]] = None, compiled_dims: str = "nk", disable_ue8m0_cast: bool = False,
                alpha: Optional[float] = None) -> None:
    """``D = C + A·Bᵀ`` with FP8 A [M, K], B [N, K] and DeepSeek's fine-grained scales, in place.

    1d2d (default): SFA float32 [M, ⌈K/128⌉], SFB float32 [⌈N/128⌉, ⌈K/128⌉], D bfloat16 [M, N], c None.
    1d1d (``recipe=(1, 1, 128)``, or D float32): SFB float32 [N, ⌈K/128⌉], D float32, C float32 [M, N]
    required (it may be D itself). Scales in any strides. Accumulation is two-level: each 128-wide K
    block's product is scaled by sfa·sfb and added to an FP32 accumulator.

    DeepGEMM's other arguments are accepted, so its calls carry over unchanged: ``recipe_a`` and
    ``recipe_b`` ((gran_mn, gran_k) of A and of B; ``(1, 128)`` and ``(128, 128)`` are the 1d2d
    recipe, ``(1, 128)`` twice the 1d1d one) instead of ``recipe``; ``compiled_dims`` and
    ``disable_ue8m0_cast``, which change nothing on SM90 (kernels compiled ahead of time, FP32
    scales); ``alpha`` must be None (DeepGEMM supports it on SM100 only).
    """
    if recipe_a is not None or recipe_b is not None:
        recipe = _recipe_from_pair(recipe, recipe_a, recipe_b)
    _check_deepgemm_options(compiled_dims, disable_ue8m0_cast, alpha)
    if c is None and (recipe is None or _as_recipe(recipe) == RECIPE_1D2D) and isinstance(d, torch.Tensor):
        if _kernel_fast_path(lambda: _fast_fp8_gemm_1d2d(a, b, d)):
            return
    A, SFA = _pair("a", a)
    B, SFB = _pair("b", b)
    check_tensor("d", d, dtype=(torch.bfloat16, torch.float32), ndim=2)
    rec = _recipe(recipe, d)
    check_tensor("a[0]", A, ndim=2)
    check_tensor("b[0]", B, ndim=2)
    M, K = A.shape
    N = B.shape[0]
    _check_fp8_operand("a[0]", A, (M, K))
    _check_fp8_operand("b[0]", B, (N, K))
    kb = _cdiv(K, 128)
    check_tensor("a[1]", SFA, dtype=torch.float32, shape=(M, kb))
    if rec == RECIPE_1D2D:
        check_tensor("b[1]", SFB, dtype=torch.float32, shape=(_cdiv(N, 128), kb))
        _check_output("d", d, torch.bfloat16, (M, N))
        _check_bf16_d_cols(N)
        if c is not None:
            fail("c", "None for the 1d2d recipe (BF16 D is written, not accumulated; use recipe (1, 1, 128) "
                 "with an FP32 D to accumulate)", describe(c))
    else:
        check_tensor("b[1]", SFB, dtype=torch.float32, shape=(N, kb))
        _check_output("d", d, torch.float32, (M, N))
        if c is None:
            fail("c", "a float32 [M, N] tensor for the 1d1d recipe (D = C + A·Bᵀ; pass c=d to accumulate in place)", "None")
        _check_output("c", c, torch.float32, (M, N), written=False)
    device = check_same_device([("a[0]", A), ("a[1]", SFA), ("b[0]", B), ("b[1]", SFB), ("d", d), ("c", c)])
    _check_c_and_d(c, d)
    _check_d_apart(d, ("a[0]", A), ("a[1]", SFA), ("b[0]", B), ("b[1]", SFB))
    if M == 0 or N == 0:
        return
    if rec == RECIPE_1D2D and K > 0 and _ops.use_kernel("fp8_gemm_nt", device):
        # The kernel reads A's scales through TMA, MN-major: free when they come from per_token_cast_to_fp8.
        torch.ops.hopperkit.fp8_gemm_nt_1d2d(A, get_mn_major_tma_aligned_tensor(SFA), B, SFB, d, get_num_sms(device),
                                             get_pdl())
        return
    if rec == RECIPE_1D1D and K > 0 and N % 4 == 0 and _ops.use_kernel("fp8_gemm_nt (1d1d)", device):
        # Both scales through TMA, MN-major. A separate C is copied into D by the op, then accumulated.
        # TMA stores D in 16-byte pieces of a row: other N run the reference.
        torch.ops.hopperkit.fp8_gemm_nt_1d1d(A, get_mn_major_tma_aligned_tensor(SFA), B,
                                             get_mn_major_tma_aligned_tensor(SFB), d, c, get_num_sms(device), get_pdl())
        return
    d.copy_(_ref.fp8_gemm_nt(A, SFA, B, SFB, c, recipe=rec, out_dtype=d.dtype))


def fp8_gemm_nn(a: tuple, b: tuple, d: torch.Tensor, c: Optional[torch.Tensor] = None,
                recipe: Optional[Sequence[int]] = None, recipe_a: Optional[Sequence[int]] = None,
                recipe_b: Optional[Sequence[int]] = None, compiled_dims: str = "nk", disable_ue8m0_cast: bool = False,
                alpha: Optional[float] = None) -> None:
    """``D = C + A·B`` with B given as [K, N] (and its scales transposed): ``fp8_gemm_nt`` on views."""
    B, SFB = _pair_of_tensors("b", b)
    fp8_gemm_nt(a, (B.T, SFB.T), d, c, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast, alpha)


def fp8_gemm_tn(a: tuple, b: tuple, d: torch.Tensor, c: Optional[torch.Tensor] = None,
                recipe: Optional[Sequence[int]] = None, recipe_a: Optional[Sequence[int]] = None,
                recipe_b: Optional[Sequence[int]] = None, compiled_dims: str = "mn", disable_ue8m0_cast: bool = False,
                alpha: Optional[float] = None) -> None:
    """``D = C + Aᵀ·Bᵀ`` with A given as [K, M] (and its scales transposed): ``fp8_gemm_nt`` on views."""
    A, SFA = _pair_of_tensors("a", a)
    fp8_gemm_nt((A.T, SFA.T), b, d, c, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast, alpha)


def fp8_gemm_tt(a: tuple, b: tuple, d: torch.Tensor, c: Optional[torch.Tensor] = None,
                recipe: Optional[Sequence[int]] = None, recipe_a: Optional[Sequence[int]] = None,
                recipe_b: Optional[Sequence[int]] = None, compiled_dims: str = "mn", disable_ue8m0_cast: bool = False,
                alpha: Optional[float] = None) -> None:
    """``D = C + Aᵀ·B``: both operands given transposed; ``fp8_gemm_nt`` on views."""
    A, SFA = _pair_of_tensors("a", a)
    B, SFB = _pair_of_tensors("b", b)
    fp8_gemm_nt((A.T, SFA.T), (B.T, SFB.T), d, c, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast, alpha)


def _bf16_tma_ok(t: torch.Tensor, mn_major_ok: bool = True) -> bool:
    """A BF16 operand the kernel can read: [rows, K] K-major or (``mn_major_ok``) MN-major ([G, rows,
    K]: K-major), the other strides multiples of 8 elements (16 bytes), the base 16-byte aligned (TMA).
    The ops' check_dense_operand and check_grouped_operand."""
    if t.numel() == 0 or t.device.type != "cuda" or t.data_ptr() % 16:
        return False

    def aligned(dims, extent):  # 16-byte multiples covering the contiguous extent (no overlap)
        return all(t.size(i) == 1 or (t.stride(i) % 8 == 0 and t.stride(i) >= extent) for i in dims)

    last = t.dim() - 1
    k_major = (t.size(last) == 1 or t.stride(last) == 1) and aligned(range(last), t.size(last))
    if t.dim() != 2:
        return k_major
    mn_major = (t.size(0) == 1 or t.stride(0) == 1) and aligned([1], t.size(0))
    return k_major or (mn_major_ok and mn_major)


def _bf16_k_rows_ok(t: torch.Tensor, sum_k: int) -> bool:
    """A k-grouped BF16 operand [Σks, cols] the kernel can read as MN-major: contiguous rows whose
    stride is a multiple of 8 elements, a 16-byte aligned base (the op's check_k_rows_operand)."""
    if t.numel() == 0:
        return True
    if t.device.type != "cuda" or t.data_ptr() % 16:
        return False
    rows_ok = t.size(1) <= 1 or t.stride(1) == 1
    return rows_ok and (sum_k <= 1 or (t.stride(0) % 8 == 0 and t.stride(0) >= t.size(1)))


def _fast_bf16_gemm(a, b, d, c) -> bool:
    if not (c is None or isinstance(c, torch.Tensor)):
        return False
    if a.dim() != 2 or b.dim() != 2 or a.shape[0] == 0 or a.shape[1] == 0 or b.shape[0] == 0:
        return False
    if not _ops.use_kernel("bf16_gemm_nt", d.device):
        return False
    torch.ops.hopperkit.bf16_gemm(a, b, d, c, get_num_sms(d.device), get_pdl())
    return True


def bf16_gemm_nt(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: Optional[torch.Tensor] = None,
                 compiled_dims: str = "nk", alpha: Optional[float] = None) -> None:
    """``D = C + A·Bᵀ`` with bfloat16 A [M, K] and B [N, K] (K- or MN-major), FP32 accumulation;
    D bfloat16 or float32 [M, N]; C optional, same dtype as D (it may be D itself).

    On SM90 a persistent TMA + wgmma kernel reads either majorness directly (the nn/tn/tt aliases are
    views, never copies) when the operands meet TMA's limits (module docstring); others run the
    reference. With float32 D and a C, the kernel adds the product into D (C copied into D first when
    it is another tensor) by TMA reductions; where N is not a multiple of 4 by ``red.global.add``
    instead, which flushes subnormal values of C and of the sum to zero. K = 0 gives D = C (or 0).
    ``compiled_dims`` (DeepGEMM's JIT option) changes nothing here; ``alpha`` must be None (DeepGEMM
    supports it on SM100 only)."""
    _check_deepgemm_options(compiled_dims, False, alpha)
    if isinstance(d, torch.Tensor) and isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if _kernel_fast_path(lambda: _fast_bf16_gemm(a, b, d, c)):
            return
    check_tensor("a", a, dtype=torch.bfloat16, ndim=2)
    check_tensor("b", b, dtype=torch.bfloat16, ndim=2)
    M, K = a.shape
    N = b.shape[0]
    check_tensor("b", b, shape=(N, K))
    check_tensor("d", d, dtype=(torch.bfloat16, torch.float32), ndim=2)
    _check_output("d", d, d.dtype, (M, N))
    for name, t in (("a", a), ("b", b)):
        if t.numel() and t.stride(-1) != 1 and t.stride(-2) != 1:
            fail(name, "K-major or MN-major (one of the last two strides is 1)", f"strides {t.stride()}")
    if c is not None:
        _check_output("c", c, d.dtype, (M, N), written=False)
    device = check_same_device([("a", a), ("b", b), ("d", d), ("c", c)])
    _check_c_and_d(c, d)
    _check_d_apart(d, ("a", a), ("b", b))
    if M == 0 or N == 0:
        return
    if K > 0 and _ops.use_kernel("bf16_gemm_nt", device) and _bf16_tma_ok(a) and _bf16_tma_ok(b):
        torch.ops.hopperkit.bf16_gemm(a, b, d, c, get_num_sms(device), get_pdl())
        return
    d.copy_(_ref.bf16_gemm_nt(a, b, c, out_dtype=d.dtype))


def bf16_gemm_nn(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: Optional[torch.Tensor] = None,
                 compiled_dims: str = "nk", alpha: Optional[float] = None) -> None:
    """``D = C + A·B`` with B [K, N]."""
    bf16_gemm_nt(a, check_tensor("b", b).T, d, c, compiled_dims, alpha)


def bf16_gemm_tn(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: Optional[torch.Tensor] = None,
                 compiled_dims: str = "mn", alpha: Optional[float] = None) -> None:
    """``D = C + Aᵀ·Bᵀ`` with A [K, M]."""
    bf16_gemm_nt(check_tensor("a", a).T, b, d, c, compiled_dims, alpha)


def bf16_gemm_tt(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: Optional[torch.Tensor] = None,
                 compiled_dims: str = "mn", alpha: Optional[float] = None) -> None:
    """``D = C + Aᵀ·B`` with A [K, M] and B [K, N]."""
    bf16_gemm_nt(check_tensor("a", a).T, check_tensor("b", b).T, d, c, compiled_dims, alpha)


def _check_m_indices(name: str, m_indices: torch.Tensor, num_groups: int, device: torch.device, kernel: bool) -> None:
    if not check_values(kernel, device):
        return
    ids = m_indices.cpu().long()
    if ids.numel() == 0:
        return
    if int(ids.min()) < -1 or int(ids.max()) >= num_groups:
        fail(name, f"expert ids in [0, {num_groups}) or -1 for padding rows",
             f"values in [{int(ids.min())}, {int(ids.max())}]")
    align = get_mk_alignment_for_contiguous_layout()
    pad = (-ids.numel()) % align
    tiles = torch.cat([ids, ids.new_full((pad,), -1)]).view(-1, align)
    first = tiles[:, :1]
    # A tile holds one expert's rows followed by padding: its id never changes except to -1, and a
    # -1 is never followed by an id (each segment starts on a multiple of the alignment).
    valid = tiles != -1
    mixed = (valid & (tiles != first)).any(dim=1) | (valid[:, 1:] & ~valid[:, :-1]).any(dim=1)
    if bool(mixed.any()):
        t = int(mixed.nonzero()[0])
        fail(name, f"expert segments that start on multiples of {align} rows "
             "(get_mk_alignment_for_contiguous_layout()), each padded with -1 up to the next multiple",
             f"rows {t * align}..{t * align + align - 1} mixing ids {sorted(set(tiles[t].tolist()))}")


def _fast_m_grouped_contiguous(a, b, d, m_indices) -> bool:
    if not (_tensor_pair(a) and _tensor_pair(b) and _tensors(m_indices)):
        return False
    A, SFA = a
    B, SFB = b
    if A.dim() != 2 or A.shape[0] == 0 or A.shape[1] == 0 or d.dim() != 2 or d.shape[1] == 0:
        return False
    device = d.device
    if not _ops.use_kernel("m_grouped_fp8_gemm_nt_contiguous", device) or check_values(True, device):
        return False
    torch.ops.hopperkit.m_grouped_fp8_gemm_nt_contiguous_1d2d(
        A, get_mn_major_tma_aligned_tensor(SFA), B, SFB, d, m_indices, get_num_sms(device), get_pdl())
    return True


def _fast_m_grouped_masked(a, b, d, masked_m, expected_m) -> bool:
    if not (_tensor_pair(a) and _tensor_pair(b) and _tensors(masked_m)):
        return False
    A, SFA = a
    B, SFB = b
    if A.dim() != 3 or A.shape[2] == 0 or d.numel() == 0 or not _positive_int32(expected_m):
        return False
    device = d.device
    if not _ops.use_kernel("m_grouped_fp8_gemm_nt_masked", device) or check_values(True, device):
        return False
    torch.ops.hopperkit.m_grouped_fp8_gemm_nt_masked_1d2d(
        A, get_mn_major_tma_aligned_tensor(SFA), B, SFB, d, masked_m, expected_m, get_num_sms(device), get_pdl())
    return True


def _contiguous_layout_args(grouped_layout: object, m_indices: object, use_psum_layout: object,
                            ensure_zero_padding: object, expected_m_for_psum_layout: object) -> tuple[str, object]:
    """The contiguous GEMMs' expert ids under either name (DeepGEMM's grouped_layout, or m_indices as
    in its 2.1), with the name the caller used for the error messages, and their layout options
    checked. ``ensure_zero_padding`` always holds here: padding rows of D are written as 0."""
    name = "grouped_layout" if m_indices is None else "m_indices"
    layout = _renamed("grouped_layout", grouped_layout, "m_indices", m_indices)
    if use_psum_layout is not False or expected_m_for_psum_layout is not None:
        _check_psum_hint(use_psum_layout, expected_m_for_psum_layout)
    if ensure_zero_padding.__class__ is not bool:
        fail("ensure_zero_padding", "a bool", describe(ensure_zero_padding), TypeError)
    return name, layout


def _m_indices_of(name: str, layout: torch.Tensor, use_psum_layout: bool, num_groups: int, m_sum: int,
                  device: torch.device, kernel: bool) -> torch.Tensor:
    """The per-row expert ids the kernels read: ``layout`` itself, or those of DeepGEMM's psum layout
    (int32 [G] of cumulative segment ends), computed on the device. With value checks on, the ids or
    the ends are checked first (that reads them back and synchronizes). Call after the device check."""
    if use_psum_layout:
        if check_values(kernel, device):
            ends = layout.cpu()
            if bool((ends[1:] < ends[:-1]).any()) or (num_groups and (int(ends[0]) < 0 or int(ends[-1]) > m_sum)):
                fail(name, f"non-decreasing cumulative ends within [0, {m_sum}] (psum layout)", str(ends.tolist()[:16]))
        return _ref.m_indices_from_psum(layout, m_sum, get_mk_alignment_for_contiguous_layout())
    _check_m_indices(name, layout, num_groups, device, kernel)
    return layout


def m_grouped_fp8_gemm_nt_contiguous(a: tuple, b: tuple, d: torch.Tensor, grouped_layout: Optional[torch.Tensor] = None,
                                     recipe: Optional[Sequence[int]] = None, recipe_a: Optional[Sequence[int]] = None,
                                     recipe_b: Optional[Sequence[int]] = None, compiled_dims: str = "nk",
                                     disable_ue8m0_cast: bool = False, use_psum_layout: bool = False,
                                     ensure_zero_padding: bool = True, expected_m_for_psum_layout: Optional[int] = None,
                                     *, m_indices: Optional[torch.Tensor] = None) -> None:
    """MoE grouped FP8 GEMM over experts' rows concatenated ("contiguous" layout), 1d2d scales.

    A [M_sum, K], SFA [M_sum, ⌈K/128⌉], B [G, N, K], SFB [G, ⌈N/128⌉, ⌈K/128⌉], D bfloat16 [M_sum, N].
    ``grouped_layout`` (``m_indices=`` as in DeepGEMM 2.1 also works) int32 [M_sum]: the expert of
    each row, -1 for padding rows; every expert's segment starts on a multiple of
    ``get_mk_alignment_for_contiguous_layout()`` (128 unless set). Padding rows of D are written as 0,
    whatever A holds there (so ``ensure_zero_padding`` always holds). With ``use_psum_layout=True`` it
    is int32 [G] of cumulative segment ends instead (group g occupies [align(end[g-1], alignment),
    end[g])), and ``expected_m_for_psum_layout`` is accepted as DeepGEMM's tile hint. ``recipe`` (or ``recipe_a`` /
    ``recipe_b``), ``compiled_dims`` and ``disable_ue8m0_cast`` as in ``fp8_gemm_nt``; the recipe is
    1d2d.
    """
    name, m_indices = _contiguous_layout_args(grouped_layout, m_indices, use_psum_layout, ensure_zero_padding,
                                              expected_m_for_psum_layout)
    if recipe is not None or recipe_a is not None or recipe_b is not None:
        _check_grouped_recipe(recipe, recipe_a, recipe_b)
    _check_deepgemm_options(compiled_dims, disable_ue8m0_cast)
    if not use_psum_layout and isinstance(d, torch.Tensor):
        if _kernel_fast_path(lambda: _fast_m_grouped_contiguous(a, b, d, m_indices)):
            return
    A, SFA = _pair("a", a)
    B, SFB = _pair("b", b)
    check_tensor("a[0]", A, ndim=2)
    check_tensor("b[0]", B, ndim=3)
    M, K = A.shape
    G, N, _ = B.shape
    _check_fp8_operand("a[0]", A, (M, K))
    _check_fp8_operand("b[0]", B, (G, N, K))
    check_tensor("a[1]", SFA, dtype=torch.float32, shape=(M, _cdiv(K, 128)))
    check_tensor("b[1]", SFB, dtype=torch.float32, shape=(G, _cdiv(N, 128), _cdiv(K, 128)))
    _check_output("d", d, torch.bfloat16, (M, N))
    _check_bf16_d_cols(N)
    check_tensor(name, m_indices, dtype=torch.int32, shape=(G,) if use_psum_layout else (M,), contiguous=True)
    device = check_same_device([("a[0]", A), ("a[1]", SFA), ("b[0]", B), ("b[1]", SFB), ("d", d), (name, m_indices)])
    _check_d_apart(d, ("a[0]", A), ("a[1]", SFA), ("b[0]", B), ("b[1]", SFB), (name, m_indices))
    kernel = _ops.use_kernel("m_grouped_fp8_gemm_nt_contiguous", device)
    m_indices = _m_indices_of(name, m_indices, use_psum_layout, G, M, device, kernel)
    if M == 0 or N == 0:
        return
    if kernel and G > 0 and K > 0:
        torch.ops.hopperkit.m_grouped_fp8_gemm_nt_contiguous_1d2d(
            A, get_mn_major_tma_aligned_tensor(SFA), B, SFB, d, m_indices, get_num_sms(device), get_pdl())
        return
    d.copy_(_ref.m_grouped_fp8_gemm_nt_contiguous(A, SFA, B, SFB, m_indices))


def m_grouped_fp8_gemm_nn_contiguous(a: tuple, b: tuple, d: torch.Tensor, grouped_layout: Optional[torch.Tensor] = None,
                                     recipe: Optional[Sequence[int]] = None, recipe_a: Optional[Sequence[int]] = None,
                                     recipe_b: Optional[Sequence[int]] = None, compiled_dims: str = "nk",
                                     disable_ue8m0_cast: bool = False, use_psum_layout: bool = False,
                                     ensure_zero_padding: bool = True, *,
                                     m_indices: Optional[torch.Tensor] = None) -> None:
    """``m_grouped_fp8_gemm_nt_contiguous`` with B given as [G, K, N] and SFB as [G, ⌈K/128⌉, ⌈N/128⌉]
    (views of the nt operands: B must still be K-major in memory, as SM90 FP8 wgmma reads it)."""
    B, SFB = _pair_of_tensors("b", b)
    if B.dim() != 3 or SFB.dim() != 3:
        fail("b", "a pair of 3-D tensors (B [G, K, N], SFB [G, ⌈K/128⌉, ⌈N/128⌉])",
             f"shapes {tuple(B.shape)} and {tuple(SFB.shape)}")
    m_grouped_fp8_gemm_nt_contiguous(a, (B.transpose(1, 2), SFB.transpose(1, 2)), d, grouped_layout, recipe, recipe_a,
                                     recipe_b, compiled_dims, disable_ue8m0_cast, use_psum_layout, ensure_zero_padding,
                                     m_indices=m_indices)


def _check_masked_m(masked_m: object, G: int, m_max: int, expected_m: object, device: torch.device, kernel: bool) -> None:
    check_tensor("masked_m", masked_m, dtype=torch.int32, shape=(G,), device=device, contiguous=True)
    check_int("expected_m", expected_m, min_value=1, max_value=2**31 - 1)
    if check_values(kernel, device):
        mm = masked_m.cpu()
        if G and (int(mm.min()) < 0 or int(mm.max()) > m_max):
            fail("masked_m", f"row counts in [0, {m_max}] (M_max, the size of dim 1 of A)", str(mm.tolist()[:16]))


def m_grouped_fp8_gemm_nt_masked(a: tuple, b: tuple, d: torch.Tensor, masked_m: torch.Tensor, expected_m: int,
                                 recipe: Optional[Sequence[int]] = None, recipe_a: Optional[Sequence[int]] = None,
                                 recipe_b: Optional[Sequence[int]] = None, compiled_dims: str = "nk",
                                 disable_ue8m0_cast: bool = False) -> None:
    """MoE grouped FP8 GEMM for CUDA-graph decode ("masked" layout), 1d2d scales.

    A [G, M_max, K], SFA [G, M_max, ⌈K/128⌉], B [G, N, K], SFB [G, ⌈N/128⌉, ⌈K/128⌉], D bfloat16
    [G, M_max, N]; ``masked_m`` int32 [G] on the device: group g's valid rows are [0, masked_m[g]);
    it is read on the device, so one graph capture serves any counts. Rows of D at or past
    masked_m[g] are not part of the result and their contents are unspecified: the kernel writes 0
    to those that share a tile (BLOCK_M rows, at most 256) with valid rows and leaves the others as
    they were, so a capture sized for the worst-case M_max costs only the rows it uses (the reference
    path writes 0 to all of them). ``expected_m`` (a typical count) only steers the kernel config.
    ``recipe`` (or ``recipe_a`` / ``recipe_b``), ``compiled_dims`` and ``disable_ue8m0_cast`` as in
    ``fp8_gemm_nt``; the recipe is 1d2d.
    """
    if recipe is not None or recipe_a is not None or recipe_b is not None:
        _check_grouped_recipe(recipe, recipe_a, recipe_b)
    _check_deepgemm_options(compiled_dims, disable_ue8m0_cast)
    if isinstance(d, torch.Tensor):
        if _kernel_fast_path(lambda: _fast_m_grouped_masked(a, b, d, masked_m, expected_m)):
            return
    A, SFA = _pair("a", a)
    B, SFB = _pair("b", b)
    check_tensor("a[0]", A, ndim=3)
    check_tensor("b[0]", B, ndim=3)
    G, M_max, K = A.shape
    N = B.shape[1]
    _check_fp8_operand("a[0]", A, (G, M_max, K))
    _check_fp8_operand("b[0]", B, (G, N, K))
    check_tensor("a[1]", SFA, dtype=torch.float32, shape=(G, M_max, _cdiv(K, 128)))
    check_tensor("b[1]", SFB, dtype=torch.float32, shape=(G, _cdiv(N, 128), _cdiv(K, 128)))
    _check_output("d", d, torch.bfloat16, (G, M_max, N))
    _check_bf16_d_cols(N)
    device = check_same_device([("a[0]", A), ("a[1]", SFA), ("b[0]", B), ("b[1]", SFB), ("d", d)])
    kernel = _ops.use_kernel("m_grouped_fp8_gemm_nt_masked", device)
    _check_masked_m(masked_m, G, M_max, expected_m, device, kernel)
    _check_d_apart(d, ("a[0]", A), ("a[1]", SFA), ("b[0]", B), ("b[1]", SFB), ("masked_m", masked_m))
    if d.numel() == 0:
        return
    if kernel and K > 0:
        torch.ops.hopperkit.m_grouped_fp8_gemm_nt_masked_1d2d(
            A, get_mn_major_tma_aligned_tensor(SFA), B, SFB, d, masked_m, expected_m, get_num_sms(device), get_pdl())
        return
    d.copy_(_ref.m_grouped_fp8_gemm_nt_masked(A, SFA, B, SFB, masked_m))


def _k_group_args(ks_cpu: object, grouped_layout: object, ks: object, ks_tensor: object,
                  use_psum_layout: object) -> tuple[object, object, str, str]:
    """The k-grouped GEMMs' per-group K on the host and on the device, under DeepGEMM's names
    (``ks_cpu``, ``grouped_layout``) or those of DeepGEMM 2.1 (``ks``, ``ks_tensor``), with the names
    the caller used (for the error messages). No psum layout on SM90, as in DeepGEMM."""
    if use_psum_layout is not False:
        fail("use_psum_layout", "False (the SM90 k-grouped GEMMs take per-group K on the host, as in DeepGEMM)",
             repr(use_psum_layout))
    ks_name = "ks_cpu" if ks is None else "ks"
    layout_name = "grouped_layout" if ks_tensor is None else "ks_tensor"
    return (_renamed("ks_cpu", ks_cpu, "ks", ks), _renamed("grouped_layout", grouped_layout, "ks_tensor", ks_tensor),
            ks_name, layout_name)


def _k_groups(ks: object, d: object, ks_name: str) -> tuple[int, int, int]:
    """(G, M, N) of a k-grouped GEMM: ``ks`` a list of per-group K on the host, non-negative
    multiples of 128, one per group of the float32 [G, M, N] output ``d``."""
    if not isinstance(ks, (list, tuple)) or not all(isinstance(k, int) and not isinstance(k, bool) for k in ks):
        fail(ks_name, "a list of ints (per-group K on the host)", describe(ks), TypeError)
    if any(k < 0 or k % 128 for k in ks):
        fail(ks_name, "non-negative multiples of 128", str(list(ks)))
    check_tensor("d", d, dtype=torch.float32, ndim=3)
    G, M, N = d.shape
    if len(ks) != G:
        fail(ks_name, f"{G} entries (one per group of d)", f"{len(ks)} entries")
    return G, M, N


def _check_ks_tensor_values(ks: Sequence[int], ks_tensor: torch.Tensor, kernel: bool, device: torch.device,
                            ks_name: str, layout_name: str) -> None:
    """With value checks on (they read the device sizes back and synchronize), they must equal ks."""
    if check_values(kernel, device):
        if ks_tensor.cpu().tolist() != list(ks):
            fail(layout_name, f"the same values as {ks_name} {list(ks)[:16]}", str(ks_tensor.cpu().tolist()[:16]))


def k_grouped_fp8_gemm_nt_contiguous(a: tuple, b: tuple, d: torch.Tensor, ks_cpu: Optional[Sequence[int]] = None,
                                     grouped_layout: Optional[torch.Tensor] = None, c: Optional[torch.Tensor] = None,
                                     recipe: Sequence[int] = RECIPE_1D1D, compiled_dims: str = "mn",
                                     use_psum_layout: bool = False, *, ks: Optional[Sequence[int]] = None,
                                     ks_tensor: Optional[torch.Tensor] = None) -> None:
    """MoE weight gradient: ``D[g] = C[g] + A_g·B_gᵀ`` with a different K per group, 1d1d scales.

    ``ks_cpu`` (``ks``): per-group K on the host, each a multiple of 128 (0 allowed);
    ``grouped_layout`` (``ks_tensor``): the same values as int32 [G] on the device. (DeepGEMM 2.1
    called them ``ks`` and ``ks_tensor``; either pair of names works. Below, ks and ks_tensor.) A: flat FP8 buffer of M·Σks elements, per group a K-major
    [M, ks[g]] block; B likewise [N, ks[g]] blocks; SFA float32 [M, Σks/128], SFB float32
    [N, Σks/128]; D float32 [G, M, N]; C float32 [G, M, N] required (it may be D itself, or any
    tensor sharing no memory with D). An empty group (ks[g] == 0) gives D[g] = C[g].

    Which sizes are used, as in DeepGEMM: the kernel reads the group sizes from ``ks_tensor`` on the
    device; ``ks`` gives Σks, the extent of A, B and the scales, and is what the checks and the
    reference path use. The two must agree; with value checks on (the reference path by default, or
    ``set_check_values(True)``: that reads ``ks_tensor`` back and synchronizes) a mismatch raises.
    So the call can be captured in a CUDA graph, and a replay follows the sizes ``ks_tensor`` holds
    then, as long as they still sum to the captured Σks (the buffers are the captured ones). Device
    sizes that do not (a negative or non-multiple-of-128 entry counts as 0, and every group's K range
    is cut at Σks) give wrong groups but never read outside A, B or the scales.
    ``compiled_dims`` changes nothing (as in ``fp8_gemm_nt``); ``use_psum_layout`` must be False.
    """
    ks, ks_tensor, ks_name, layout_name = _k_group_args(ks_cpu, grouped_layout, ks, ks_tensor, use_psum_layout)
    _check_deepgemm_options(compiled_dims)
    if _as_recipe(recipe) != RECIPE_1D1D:
        fail("recipe", f"{RECIPE_1D1D} (the k-grouped GEMM uses 1x128 scales on both operands)", repr(recipe))
    A, SFA = _pair("a", a)
    B, SFB = _pair("b", b)
    G, M, N = _k_groups(ks, d, ks_name)
    _check_output("d", d, torch.float32, (G, M, N))
    if c is None:
        fail("c", "a float32 [G, M, N] tensor (pass c=d to accumulate in place)", "None")
    _check_output("c", c, torch.float32, (G, M, N), written=False)
    sum_k = sum(ks)
    check_tensor("a[0]", A, dtype=FP8, contiguous=True)
    check_tensor("b[0]", B, dtype=FP8, contiguous=True)
    if A.numel() != M * sum_k:
        fail("a[0]", f"{M * sum_k} elements (M·Σks)", f"{A.numel()}")
    if B.numel() != N * sum_k:
        fail("b[0]", f"{N * sum_k} elements (N·Σks)", f"{B.numel()}")
    check_tensor("a[1]", SFA, dtype=torch.float32, shape=(M, sum_k // 128))
    check_tensor("b[1]", SFB, dtype=torch.float32, shape=(N, sum_k // 128))
    check_tensor(layout_name, ks_tensor, dtype=torch.int32, shape=(G,))
    device = check_same_device([("a[0]", A), ("a[1]", SFA), ("b[0]", B), ("b[1]", SFB), ("d", d), ("c", c),
                                (layout_name, ks_tensor)])
    _check_c_and_d(c, d)
    _check_d_apart(d, ("a[0]", A), ("a[1]", SFA), ("b[0]", B), ("b[1]", SFB), (layout_name, ks_tensor))
    kernel = _ops.use_kernel("k_grouped_fp8_gemm_nt_contiguous", device)
    _check_ks_tensor_values(ks, ks_tensor, kernel, device, ks_name, layout_name)
    if G == 0 or M == 0 or N == 0:
        return
    if kernel and N % 4 == 0:  # TMA stores D in 16-byte pieces of a row: other N run the reference
        # The kernel reads the group sizes from ks_tensor; ks sizes the buffers (see the docstring).
        torch.ops.hopperkit.k_grouped_fp8_gemm_nt_contiguous_1d1d(
            A, get_mn_major_tma_aligned_tensor(SFA), B, get_mn_major_tma_aligned_tensor(SFB), d, list(ks),
            ks_tensor.contiguous(), c, get_num_sms(device), get_pdl())
        return
    d.copy_(_ref.k_grouped_fp8_gemm_nt_contiguous(A, SFA, B, SFB, list(ks), c))


def k_grouped_bf16_gemm_tn_contiguous(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor,
                                      ks_cpu: Optional[Sequence[int]] = None, grouped_layout: Optional[torch.Tensor] = None,
                                      c: Optional[torch.Tensor] = None, compiled_dims: str = "mn",
                                      use_psum_layout: bool = False, *, ks: Optional[Sequence[int]] = None,
                                      ks_tensor: Optional[torch.Tensor] = None) -> None:
    """MoE weight gradient in BF16: ``D[g] = C[g] + A_gᵀ·B_g`` with a different K per group.

    The per-group sizes come as in ``k_grouped_fp8_gemm_nt_contiguous``: ``ks_cpu`` (``ks``) on the
    host, ``grouped_layout`` (``ks_tensor``) on the device; below, ks and ks_tensor.

    A bf16 [Σks, M] and B bf16 [Σks, N] hold every group's K rows back to back (group g owns rows
    [Σks[:g], Σks[:g+1]): the activations' and output gradients' tokens of expert g), each row
    contiguous; D float32 [G, M, N]; C float32 [G, M, N] or None (D = A_gᵀ·B_g); C may be D itself.
    ``ks``: per-group K on the host, each a multiple of 128 (0 allowed: D[g] = C[g], or 0 without C);
    ``ks_tensor``: the same values as int32 [G] on the device. FP32 accumulation of the BF16 products.

    Which sizes are used, as in ``k_grouped_fp8_gemm_nt_contiguous``: the kernel reads them from
    ``ks_tensor`` on the device and ``ks`` gives Σks (the rows of A and B) and what the checks and the
    reference path use; with value checks on, a mismatch raises. The call can be captured in a CUDA
    graph, and a replay follows the sizes ``ks_tensor`` holds then (of the captured total). Device
    sizes out of contract give wrong groups, never reads outside A or B.

    On SM90 the BF16 GEMM kernel runs when the row strides of A and B are multiples of 8 elements
    (16 bytes) and their bases 16-byte aligned (TMA); otherwise the reference path. With C, the
    kernel adds the products into D (C copied into D first when it is another tensor) by TMA
    reductions; where N is not a multiple of 4 by ``red.global.add`` instead, which flushes subnormal
    values of C and of the sums to zero. ``compiled_dims`` changes nothing; ``use_psum_layout`` must be
    False.
    """
    ks, ks_tensor, ks_name, layout_name = _k_group_args(ks_cpu, grouped_layout, ks, ks_tensor, use_psum_layout)
    _check_deepgemm_options(compiled_dims)
    G, M, N = _k_groups(ks, d, ks_name)
    sum_k = sum(ks)
    check_tensor("a", a, dtype=torch.bfloat16, shape=(sum_k, M))
    check_tensor("b", b, dtype=torch.bfloat16, shape=(sum_k, N))
    _check_output("d", d, torch.float32, (G, M, N))
    if c is not None:
        _check_output("c", c, torch.float32, (G, M, N), written=False)
    check_tensor(layout_name, ks_tensor, dtype=torch.int32, shape=(G,))
    device = check_same_device([("a", a), ("b", b), ("d", d), ("c", c), (layout_name, ks_tensor)])
    _check_c_and_d(c, d)
    _check_d_apart(d, ("a", a), ("b", b), (layout_name, ks_tensor))
    kernel = _ops.use_kernel("k_grouped_bf16_gemm_tn_contiguous", device)
    _check_ks_tensor_values(ks, ks_tensor, kernel, device, ks_name, layout_name)
    if G == 0 or M == 0 or N == 0:
        return
    # The kernel reads A [Σks, M] and B [Σks, N] as MN-major operands ([M, Σks] and [N, Σks] views).
    if kernel and (sum_k == 0 or (_bf16_k_rows_ok(a, sum_k) and _bf16_k_rows_ok(b, sum_k))):
        torch.ops.hopperkit.k_grouped_bf16_gemm_tn_contiguous(a, b, d, list(ks), ks_tensor.contiguous(), c,
                                                              get_num_sms(device), get_pdl())
        return
    d.copy_(_ref.k_grouped_bf16_gemm_tn_contiguous(a, b, list(ks), c))


def _fast_m_grouped_bf16_contiguous(a, b, d, m_indices) -> bool:
    if not _tensors(b, m_indices):
        return False
    if a.dim() != 2 or a.shape[0] == 0 or a.shape[1] == 0 or d.dim() != 2 or d.shape[1] == 0:
        return False
    device = d.device
    if not _ops.use_kernel("m_grouped_bf16_gemm_nt_contiguous", device) or check_values(True, device):
        return False
    torch.ops.hopperkit.m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices, get_num_sms(device), get_pdl())
    return True


def _fast_m_grouped_bf16_masked(a, b, d, masked_m, expected_m) -> bool:
    if not _tensors(b, masked_m):
        return False
    if a.dim() != 3 or a.shape[2] == 0 or d.numel() == 0 or not _positive_int32(expected_m):
        return False
    device = d.device
    if not _ops.use_kernel("m_grouped_bf16_gemm_nt_masked", device) or check_values(True, device):
        return False
    torch.ops.hopperkit.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m, get_num_sms(device), get_pdl())
    return True


def m_grouped_bf16_gemm_nt_contiguous(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor,
                                      grouped_layout: Optional[torch.Tensor] = None, compiled_dims: str = "nk",
                                      use_psum_layout: bool = False, ensure_zero_padding: bool = True,
                                      expected_m_for_psum_layout: Optional[int] = None, *,
                                      m_indices: Optional[torch.Tensor] = None) -> None:
    """BF16 MoE grouped GEMM, contiguous layout: A [M_sum, K], B [G, N, K], D bf16 [M_sum, N],
    ``grouped_layout`` (or ``m_indices=``) and ``use_psum_layout`` as in
    ``m_grouped_fp8_gemm_nt_contiguous`` (padding rows of D are written as 0, whatever A holds
    there). A and B K-major; on SM90 the BF16 GEMM kernel runs when their strides meet TMA's limits
    (module docstring), the reference otherwise. ``compiled_dims`` changes nothing."""
    name, m_indices = _contiguous_layout_args(grouped_layout, m_indices, use_psum_layout, ensure_zero_padding,
                                              expected_m_for_psum_layout)
    _check_deepgemm_options(compiled_dims)
    if not use_psum_layout and isinstance(d, torch.Tensor) and isinstance(a, torch.Tensor):
        if _kernel_fast_path(lambda: _fast_m_grouped_bf16_contiguous(a, b, d, m_indices)):
            return
    check_tensor("a", a, dtype=torch.bfloat16, ndim=2, last_dim_contiguous=True)
    check_tensor("b", b, dtype=torch.bfloat16, ndim=3, last_dim_contiguous=True)
    M, K = a.shape
    G, N, _ = b.shape
    check_tensor("b", b, shape=(G, N, K))
    _check_output("d", d, torch.bfloat16, (M, N))
    check_tensor(name, m_indices, dtype=torch.int32, shape=(G,) if use_psum_layout else (M,), contiguous=True)
    device = check_same_device([("a", a), ("b", b), ("d", d), (name, m_indices)])
    _check_d_apart(d, ("a", a), ("b", b), (name, m_indices))
    kernel = _ops.use_kernel("m_grouped_bf16_gemm_nt_contiguous", device)
    m_indices = _m_indices_of(name, m_indices, use_psum_layout, G, M, device, kernel)
    if M == 0 or N == 0:
        return
    if kernel and G > 0 and K > 0 and _bf16_tma_ok(a, mn_major_ok=False) and _bf16_tma_ok(b):
        torch.ops.hopperkit.m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices, get_num_sms(device), get_pdl())
        return
    d.copy_(_ref.m_grouped_bf16_gemm_nt_contiguous(a, b, m_indices))


def m_grouped_bf16_gemm_nn_contiguous(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor,
                                      grouped_layout: Optional[torch.Tensor] = None, compiled_dims: str = "nk",
                                      use_psum_layout: bool = False, ensure_zero_padding: bool = True, *,
                                      m_indices: Optional[torch.Tensor] = None) -> None:
    """``m_grouped_bf16_gemm_nt_contiguous`` with B given as [G, K, N] (a view of the nt operand: B
    must still be K-major in memory)."""
    check_tensor("b", b, ndim=3)
    m_grouped_bf16_gemm_nt_contiguous(a, b.transpose(1, 2), d, grouped_layout, compiled_dims, use_psum_layout,
                                      ensure_zero_padding, m_indices=m_indices)


def m_grouped_bf16_gemm_nt_masked(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, masked_m: torch.Tensor,
                                  expected_m: int, compiled_dims: str = "nk") -> None:
    """BF16 MoE grouped GEMM, masked layout: A [G, M_max, K], B [G, N, K], D bf16 [G, M_max, N]; rows
    at or past ``masked_m[g]`` are unspecified, as in ``m_grouped_fp8_gemm_nt_masked`` (0 in a tile
    with valid rows, untouched beyond). ``masked_m`` int32 [G] is read on the device (one CUDA
    graph capture serves any counts); ``expected_m`` only steers the kernel's tile choice. A and B
    K-major; on SM90 the BF16 GEMM kernel runs when their strides meet TMA's limits (module
    docstring), the reference otherwise. ``compiled_dims`` changes nothing."""
    _check_deepgemm_options(compiled_dims)
    if isinstance(d, torch.Tensor) and isinstance(a, torch.Tensor):
        if _kernel_fast_path(lambda: _fast_m_grouped_bf16_masked(a, b, d, masked_m, expected_m)):
            return
    check_tensor("a", a, dtype=torch.bfloat16, ndim=3, last_dim_contiguous=True)
    check_tensor("b", b, dtype=torch.bfloat16, ndim=3, last_dim_contiguous=True)
    G, M_max, K = a.shape
    N = b.shape[1]
    check_tensor("b", b, shape=(G, N, K))
    _check_output("d", d, torch.bfloat16, (G, M_max, N))
    device = check_same_device([("a", a), ("b", b), ("d", d)])
    kernel = _ops.use_kernel("m_grouped_bf16_gemm_nt_masked", device)
    _check_masked_m(masked_m, G, M_max, expected_m, device, kernel)
    _check_d_apart(d, ("a", a), ("b", b), ("masked_m", masked_m))
    if d.numel() == 0:
        return
    if kernel and K > 0 and _bf16_tma_ok(a) and _bf16_tma_ok(b):
        torch.ops.hopperkit.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m, get_num_sms(device), get_pdl())
        return
    d.copy_(_ref.m_grouped_bf16_gemm_nt_masked(a, b, masked_m))


# DeepGEMM's other names for the same functions: its newer releases register the FP8 GEMMs as
# fp8_fp4_* (FP4 operands run on SM100 only; here the dtype checks refuse them), and earlier ones
# exported the masked GEMMs as fp8_m_grouped_gemm_nt_masked and bf16_m_grouped_gemm_nt_masked.
fp8_fp4_gemm_nt = fp8_gemm_nt
fp8_fp4_gemm_nn = fp8_gemm_nn
fp8_fp4_gemm_tn = fp8_gemm_tn
fp8_fp4_gemm_tt = fp8_gemm_tt
m_grouped_fp8_fp4_gemm_nt_contiguous = m_grouped_fp8_gemm_nt_contiguous
m_grouped_fp8_fp4_gemm_nn_contiguous = m_grouped_fp8_gemm_nn_contiguous
m_grouped_fp8_fp4_gemm_nt_masked = m_grouped_fp8_gemm_nt_masked
fp8_m_grouped_gemm_nt_masked = m_grouped_fp8_gemm_nt_masked
bf16_m_grouped_gemm_nt_masked = m_grouped_bf16_gemm_nt_masked
