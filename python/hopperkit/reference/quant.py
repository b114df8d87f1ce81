"""Reference FP8 (e4m3fn) quantization with float32 scale factors, and UE8M0 scale packing.

Scale convention (DeepGEMM's): ``real value = fp8 value × sf``. The casts *divide* by the scale (they
multiply by its reciprocal), the GEMMs and ``dequantize_*`` multiply by it.

Every cast here is the bit-exact specification of the fused CUDA casts in ``csrc/quant``; the exact
float32 operation order is spelled out in :func:`per_token_cast_to_fp8` and shared by all three casts:

1. ``xf = x.to(float32)`` (exact for bf16/fp16/fp32 inputs), zero-padded to whole blocks;
2. ``amax = max(|xf|)`` over the block, then ``amax = max(amax, 1e-4)`` (a float32 max, so exact);
3. ``sf = amax / 448.0``: one correctly rounded float32 division (448 = largest finite e4m3fn value;
   not a multiplication by ``fl32(1/448)``, which differs in the last bit for some inputs);
4. if ``use_ue8m0``: ``sf = ceil_to_ue8m0(sf)`` (exact bit manipulation, see below);
5. ``inv = 1.0 / sf``: one correctly rounded float32 division (IEEE ``div.rn.f32``; on the GPU not
   ``__fdividef`` / ``rcp.approx``, whose results differ in the last bit);
6. ``q = xf * inv``: one correctly rounded float32 multiplication (not fused with anything);
7. ``x_fp8 = q.to(float8_e4m3fn)``: round to nearest, ties to even (``cvt.rn.satfinite`` gives the
   same value here because |q| <= 448·(1 + 2⁻²¹) always rounds to 448 at most).

NaN/inf inputs are not special-cased: they propagate into the block's scale and values.
"""

from __future__ import annotations

from typing import Tuple

import torch

__all__ = [
    "FP8_E4M3_MAX",
    "AMAX_CLAMP",
    "per_token_cast_to_fp8",
    "per_block_cast_to_fp8",
    "per_channel_cast_to_fp8",
    "ceil_to_ue8m0",
    "pack_ue8m0_to_int",
    "unpack_ue8m0_from_int",
    "dequantize_per_token",
    "dequantize_per_block",
    "dequantize_per_channel",
]

FP8_E4M3_MAX = 448.0
# Floor on a block's amax: keeps an all-zero block's scale finite and its reciprocal below float32 max.
AMAX_CLAMP = 1e-4

_FLOAT_INPUTS = (torch.float32, torch.bfloat16, torch.float16)


def _ceil_div(a: int, b: int) -> int:
    return (a + b - 1) // b


def _check_input(x: torch.Tensor, name: str = "x") -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"hopperkit: {name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _FLOAT_INPUTS:
        raise TypeError(f"hopperkit: {name} must be float32, bfloat16 or float16, got {x.dtype}")
    if x.dim() != 2:
        raise ValueError(f"hopperkit: {name} must be 2-D [m, n], got shape {tuple(x.shape)}")


def _check_gran(gran: int, name: str) -> None:
    if not isinstance(gran, int) or isinstance(gran, bool) or gran <= 0:
        raise ValueError(f"hopperkit: {name} must be a positive int, got {gran!r}")


def _scale_from_amax(amax: torch.Tensor, use_ue8m0: bool) -> torch.Tensor:
    # Steps 2-4 of the module docstring; amax is float32. The divisor is a tensor on purpose: torch's
    # CUDA division by a Python scalar multiplies by fl32(1/448) instead, which is not correctly
    # rounded and made CUDA scales differ from CPU ones in the last bit.
    sf = amax.clamp(min=AMAX_CLAMP) / torch.full_like(amax, FP8_E4M3_MAX)
    return ceil_to_ue8m0(sf) if use_ue8m0 else sf


def _scale_values(xf: torch.Tensor, sf: torch.Tensor) -> torch.Tensor:
    # Steps 5-7. torch.reciprocal is an IEEE float32 division on CPU and CUDA.
    return (xf * torch.reciprocal(sf)).to(torch.float8_e4m3fn)


def per_token_cast_to_fp8(
    x: torch.Tensor, use_ue8m0: bool = False, gran_k: int = 128
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Quantize each row of ``x`` in blocks of ``gran_k`` columns ("1×128" scales, GEMM operand A).

    Args:
        x: ``[m, n]`` float32 / bfloat16 / float16, any strides.
        use_ue8m0: round every scale up to a power of two (:func:`ceil_to_ue8m0`).
        gran_k: columns per scale block.

    Returns:
        ``(x_fp8, sf)``: ``x_fp8`` float8_e4m3fn ``[m, n]`` contiguous, ``sf`` float32
        ``[m, ceil(n / gran_k)]`` contiguous (K-major; see ``layout.get_mn_major_tma_aligned_tensor``
        for the layout the GEMM kernels read).

    Semantics, per row ``i`` and block ``b`` (columns ``[b·gran_k, (b+1)·gran_k)``, the last block
    zero-padded when ``n % gran_k != 0``, which cannot raise the amax):
    ``amax = max(max_j |float32(x[i, j])|, 1e-4)``; ``sf[i, b] = fl32(amax / 448)``, then
    ``ceil_to_ue8m0`` if ``use_ue8m0``; ``inv = fl32(1 / sf[i, b])``;
    ``x_fp8[i, j] = rne_e4m3(fl32(float32(x[i, j]) · inv))``. Every ``fl32`` is one correctly rounded
    IEEE float32 operation; no fused multiply-add.
    """
    _check_input(x)
    _check_gran(gran_k, "gran_k")
    m, n = x.shape
    nb = _ceil_div(n, gran_k)
    xf = torch.nn.functional.pad(x.float(), (0, nb * gran_k - n)).view(m, nb, gran_k)
    sf = _scale_from_amax(xf.abs().amax(dim=2), use_ue8m0) if nb > 0 else xf.new_empty(m, 0)
    x_fp8 = _scale_values(xf, sf.unsqueeze(2)).view(m, nb * gran_k)[:, :n].contiguous()
    return x_fp8, sf


def per_block_cast_to_fp8(
    x: torch.Tensor, use_ue8m0: bool = False, gran: int = 128
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``x`` in ``gran × gran`` tiles ("128×128" scales, GEMM operand B of the 1d2d recipe).

    Args:
        x: ``[m, n]`` float32 / bfloat16 / float16, any strides.
        use_ue8m0: round every scale up to a power of two.
        gran: tile edge in both dimensions.

    Returns:
        ``(x_fp8, sf)``: float8_e4m3fn ``[m, n]`` and float32 ``[ceil(m/gran), ceil(n/gran)]``,
        both contiguous. Same float32 op order as :func:`per_token_cast_to_fp8`, with the amax taken
        over the whole tile (both dimensions zero-padded to multiples of ``gran``).
    """
    _check_input(x)
    _check_gran(gran, "gran")
    m, n = x.shape
    mb, nb = _ceil_div(m, gran), _ceil_div(n, gran)
    xf = torch.nn.functional.pad(x.float(), (0, nb * gran - n, 0, mb * gran - m)).view(mb, gran, nb, gran)
    if mb * nb > 0:
        sf = _scale_from_amax(xf.abs().amax(dim=(1, 3)), use_ue8m0)
    else:
        sf = xf.new_empty(mb, nb)
    x_fp8 = _scale_values(xf, sf.view(mb, 1, nb, 1)).view(mb * gran, nb * gran)[:m, :n].contiguous()
    return x_fp8, sf


def per_channel_cast_to_fp8(
    x: torch.Tensor, use_ue8m0: bool = False, gran_k: int = 128
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Quantize each column of ``x`` in blocks of ``gran_k`` rows (k-grouped weight-gradient inputs).

    Here ``x`` is ``[k, n]`` with the reduction dimension first (the transpose of a K-major operand).

    Args:
        x: ``[m, n]`` float32 / bfloat16 / float16, any strides.
        use_ue8m0: round every scale up to a power of two.
        gran_k: rows per scale block.

    Returns:
        ``(x_fp8, sf)``: float8_e4m3fn ``[m, n]`` and float32 ``[ceil(m/gran_k), n]``, both
        contiguous; ``sf[b, j]`` scales rows ``[b·gran_k, (b+1)·gran_k)`` of column ``j`` (rows
        zero-padded to a multiple of ``gran_k``). Same float32 op order as
        :func:`per_token_cast_to_fp8`.
    """
    _check_input(x)
    _check_gran(gran_k, "gran_k")
    m, n = x.shape
    mb = _ceil_div(m, gran_k)
    xf = torch.nn.functional.pad(x.float(), (0, 0, 0, mb * gran_k - m)).view(mb, gran_k, n)
    sf = _scale_from_amax(xf.abs().amax(dim=1), use_ue8m0) if mb > 0 else xf.new_empty(0, n)
    x_fp8 = _scale_values(xf, sf.unsqueeze(1)).view(mb * gran_k, n)[:m].contiguous()
    return x_fp8, sf


def ceil_to_ue8m0(x: torch.Tensor) -> torch.Tensor:
    """Round float32 scales up to a power of two, exactly, on the bit pattern.

    Args:
        x: float32 tensor of any shape (positive scales).

    Returns:
        float32, same shape: ``2^(e - 127)`` where ``e`` = the biased exponent byte of ``x``, plus 1
        when the mantissa is non-zero, clamped to ``[1, 254]``. For a positive normal ``x`` that is the
        smallest power of two ``>= x`` (a power of two maps to itself). Edge cases, all from the
        clamp: ``0`` and denormals give ``2^-126`` (the smallest normal, so still ``>= x``; UE8M0 has
        no denormals); values above ``2^127`` (up to float32 max), ``inf`` and NaN give ``2^127``. The
        sign bit is ignored (``-x`` maps like ``x``).
    """
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
        raise TypeError(f"hopperkit: x must be a float32 tensor, got {getattr(x, 'dtype', type(x).__name__)}")
    bits = x.contiguous().view(torch.int32)
    exponent = (bits >> 23) & 0xFF
    exponent = exponent + ((bits & 0x7FFFFF) != 0).to(torch.int32)
    return (exponent.clamp(1, 254) << 23).view(torch.float32)


def pack_ue8m0_to_int(sf: torch.Tensor, *, check: bool = True) -> torch.Tensor:
    """Pack float32 power-of-two scales into UE8M0 bytes, four K-blocks per int32 (SM100 format).

    Args:
        sf: float32 ``[..., mn, sfk]`` (at least 1-D), every element a positive normal power of two.
        check: verify that (it reads the data, so it synchronizes with the host on a GPU; pass
            ``False`` to skip inside a CUDA graph, in which case a mantissa is silently dropped).

    Returns:
        int32 ``[..., mn, ceil(sfk / 4)]`` contiguous. Byte ``j % 4`` (little-endian: bits
        ``8·(j%4) .. 8·(j%4)+7``) of word ``j // 4`` is ``(float_bits(sf[..., j]) >> 23) & 0xFF``.
        **Padding:** when ``sfk % 4 != 0`` the missing bytes are ``0x00`` (as if ``sf`` were
        zero-padded along K, DeepGEMM's convention), so packed tensors compare bit-equal with
        DeepGEMM's. Kernels never read those bytes.

    Raises:
        ValueError if ``check`` and any element is not a positive power of two in ``[2^-126, 2^127]``.
    """
    if not isinstance(sf, torch.Tensor) or sf.dtype != torch.float32:
        raise TypeError(f"hopperkit: sf must be a float32 tensor, got {getattr(sf, 'dtype', type(sf).__name__)}")
    if sf.dim() < 1:
        raise ValueError("hopperkit: sf must have at least one dimension [..., sfk]")
    bits = sf.contiguous().view(torch.int32)
    if check and sf.numel() > 0:
        exponent = (bits >> 23) & 0xFF
        ok = (bits >= 0) & ((bits & 0x7FFFFF) == 0) & (exponent >= 1) & (exponent <= 254)
        if not bool(ok.all()):
            bad = sf.reshape(-1)[~ok.reshape(-1)][:4].tolist()
            raise ValueError(
                "hopperkit: sf must hold positive normal powers of two to pack as UE8M0 "
                f"(round with ceil_to_ue8m0 / use_ue8m0=True first); found e.g. {bad}"
            )
    sfk = sf.shape[-1]
    words = _ceil_div(sfk, 4)
    exponent = ((bits >> 23) & 0xFF).to(torch.int64)
    exponent = torch.nn.functional.pad(exponent, (0, words * 4 - sfk)).view(*sf.shape[:-1], words, 4)
    shifts = torch.arange(0, 32, 8, dtype=torch.int64, device=sf.device)
    packed = (exponent << shifts).sum(dim=-1)
    # Byte 3 can exceed 0x7F, so wrap the unsigned 32-bit word into int32 explicitly (two's complement)
    # instead of relying on an int64 -> int32 narrowing cast.
    packed = packed - ((packed >> 31) & 1) * (1 << 32)
    return packed.to(torch.int32)


def unpack_ue8m0_from_int(packed: torch.Tensor, sfk: int) -> torch.Tensor:
    """Exact inverse of :func:`pack_ue8m0_to_int`.

    Args:
        packed: int32 ``[..., mn, words]`` with ``words == ceil(sfk / 4)``.
        sfk: number of K-blocks to recover (padding bytes beyond it are ignored).

    Returns:
        float32 ``[..., mn, sfk]`` contiguous, ``2^(byte - 127)`` per byte (byte 0 gives 0.0).
    """
    if not isinstance(packed, torch.Tensor) or packed.dtype != torch.int32:
        raise TypeError(
            f"hopperkit: packed must be an int32 tensor, got {getattr(packed, 'dtype', type(packed).__name__)}"
        )
    if not isinstance(sfk, int) or sfk < 0:
        raise ValueError(f"hopperkit: sfk must be a non-negative int, got {sfk!r}")
    if packed.dim() < 1 or packed.shape[-1] != _ceil_div(sfk, 4):
        raise ValueError(
            f"hopperkit: packed must be [..., ceil(sfk/4)] = [..., {_ceil_div(sfk, 4)}] for sfk={sfk}, "
            f"got shape {tuple(packed.shape)}"
        )
    shifts = torch.arange(0, 32, 8, dtype=torch.int32, device=packed.device)
    # Arithmetic right shift sign-extends byte 3; the & 0xFF mask discards the extension.
    exponent = (packed.unsqueeze(-1) >> shifts) & 0xFF
    exponent = exponent.reshape(*packed.shape[:-1], packed.shape[-1] * 4)[..., :sfk]
    return (exponent << 23).contiguous().view(torch.float32)


def _repeat_rows(sf: torch.Tensor, times: int, size: int) -> torch.Tensor:
    """Repeat every row of 2-D ``sf`` ``times`` times and keep the first ``size`` rows (no host sync)."""
    blocks, cols = sf.shape
    return sf.unsqueeze(1).expand(blocks, times, cols).reshape(blocks * times, cols)[:size]


def _check_dequant(x_fp8: torch.Tensor, sf: torch.Tensor) -> None:
    if not isinstance(x_fp8, torch.Tensor) or x_fp8.dtype != torch.float8_e4m3fn:
        raise TypeError(f"hopperkit: x_fp8 must be float8_e4m3fn, got {getattr(x_fp8, 'dtype', type(x_fp8))}")
    if not isinstance(sf, torch.Tensor) or sf.dtype != torch.float32:
        raise TypeError(f"hopperkit: sf must be float32, got {getattr(sf, 'dtype', type(sf))}")
    if x_fp8.dim() != 2 or sf.dim() != 2:
        raise ValueError(
            f"hopperkit: x_fp8 and sf must be 2-D, got {tuple(x_fp8.shape)} and {tuple(sf.shape)}"
        )


def dequantize_per_token(x_fp8: torch.Tensor, sf: torch.Tensor, gran_k: int = 128) -> torch.Tensor:
    """``float32(x_fp8[i, j]) × sf[i, j // gran_k]`` (one float32 multiply) → float32 ``[m, n]``.

    ``sf`` is float32 ``[m, ceil(n / gran_k)]``, any strides.
    """
    _check_dequant(x_fp8, sf)
    _check_gran(gran_k, "gran_k")
    m, n = x_fp8.shape
    if tuple(sf.shape) != (m, _ceil_div(n, gran_k)):
        raise ValueError(f"hopperkit: sf must be [{m}, {_ceil_div(n, gran_k)}], got {tuple(sf.shape)}")
    return x_fp8.float() * _repeat_rows(sf.t(), gran_k, n).t()


def dequantize_per_block(x_fp8: torch.Tensor, sf: torch.Tensor, gran: int = 128) -> torch.Tensor:
    """``float32(x_fp8[i, j]) × sf[i // gran, j // gran]`` → float32 ``[m, n]``.

    ``sf`` is float32 ``[ceil(m / gran), ceil(n / gran)]``, any strides.
    """
    _check_dequant(x_fp8, sf)
    _check_gran(gran, "gran")
    m, n = x_fp8.shape
    if tuple(sf.shape) != (_ceil_div(m, gran), _ceil_div(n, gran)):
        raise ValueError(
            f"hopperkit: sf must be [{_ceil_div(m, gran)}, {_ceil_div(n, gran)}], got {tuple(sf.shape)}"
        )
    full = _repeat_rows(_repeat_rows(sf, gran, m).t(), gran, n).t()
    return x_fp8.float() * full


def dequantize_per_channel(x_fp8: torch.Tensor, sf: torch.Tensor, gran_k: int = 128) -> torch.Tensor:
    """``float32(x_fp8[i, j]) × sf[i // gran_k, j]`` → float32 ``[m, n]`` (inverse of
    :func:`per_channel_cast_to_fp8` up to rounding). ``sf`` is float32 ``[ceil(m / gran_k), n]``."""
    _check_dequant(x_fp8, sf)
    _check_gran(gran_k, "gran_k")
    m, n = x_fp8.shape
    if tuple(sf.shape) != (_ceil_div(m, gran_k), n):
        raise ValueError(f"hopperkit: sf must be [{_ceil_div(m, gran_k)}, {n}], got {tuple(sf.shape)}")
    return x_fp8.float() * _repeat_rows(sf, gran_k, m)
