"""Reference of the DeepSeek-V3.2 FP8 KV-cache layout: 656 bytes per token (FlashMLA's ``V32_FP8Sparse``).

One token of the MLA latent cache (576 dims: 512 NoPE + 64 RoPE) is stored as::

    bytes [  0, 512)  512 x float8_e4m3fn   NoPE dims 0..511, quantized in 4 tiles of 128 dims
    bytes [512, 528)    4 x float32         tile scales: real value = fp8 value x scale[tile]
    bytes [528, 656)   64 x bfloat16        RoPE dims 512..575, stored unquantized

All multi-byte fields are little-endian (the byte order of every host and GPU torch runs on). The
offsets are 16-byte aligned because the kernel reads each field with 128-bit loads.

Numerics (what the CUDA kernels must reproduce bit for bit):

- quantize: per tile ``scale = 2^ceil(log2(max(amax / 448, 1e-4)))`` (a power of two, UE8M0-style,
  stored as float32) and ``fp8 = (x.float() / scale).to(float8_e4m3fn)`` (round to nearest even; the
  division by a power of two is exact and |x / scale| <= 448, so nothing saturates).
- dequantize: ``bf16( bf16(float(fp8)) * bf16(scale) )``. This is the SM90 sparse decode kernel's
  arithmetic (fp8 -> float -> bf16, scale -> bf16, one bf16x2 multiply). For the power-of-two scales
  that ``quantize_kv_cache`` writes every rounding in it is exact, so dequant = fp8 x scale exactly;
  for foreign caches with arbitrary float32 scales the bf16 rounding of the scale is part of the
  contract.
"""

from __future__ import annotations

import torch

__all__ = [
    "KV_FP8_BYTES_PER_TOKEN",
    "KV_NOPE_DIM",
    "KV_ROPE_DIM",
    "KV_HEAD_DIM",
    "KV_TILE_SIZE",
    "KV_NUM_TILES",
    "KV_NOPE_OFFSET",
    "KV_SCALE_OFFSET",
    "KV_ROPE_OFFSET",
    "KV_FP8_MAX",
    "KV_SCALE_FLOOR",
    "quantize_kv_cache",
    "dequantize_kv_cache",
]

KV_NOPE_DIM = 512
KV_ROPE_DIM = 64
KV_HEAD_DIM = KV_NOPE_DIM + KV_ROPE_DIM  # 576 = d_qk of V3/V3.1/V3.2
KV_TILE_SIZE = 128
KV_NUM_TILES = KV_NOPE_DIM // KV_TILE_SIZE  # 4

KV_NOPE_OFFSET = 0
KV_SCALE_OFFSET = KV_NOPE_OFFSET + KV_NOPE_DIM  # 512: one fp8 byte per NoPE dim
KV_ROPE_OFFSET = KV_SCALE_OFFSET + 4 * KV_NUM_TILES  # 528: four float32 scales
KV_FP8_BYTES_PER_TOKEN = KV_ROPE_OFFSET + 2 * KV_ROPE_DIM  # 656: 64 bf16 RoPE values

KV_FP8_MAX = 448.0  # largest finite float8_e4m3fn
# Floor on amax/448 (note: applied after the division, unlike DeepGEMM's casts, which clamp amax).
# It keeps an all-zero tile's scale finite: 2^ceil(log2(1e-4)) = 2^-13.
KV_SCALE_FLOOR = 1e-4

_BYTE_DTYPES = (torch.uint8, torch.int8, torch.float8_e4m3fn)

_F32_EXPONENT_MASK = 0x7F800000
_F32_MANTISSA_MASK = 0x007FFFFF
_F32_EXPONENT_ONE = 1 << 23


def _ceil_pow2(x: torch.Tensor) -> torch.Tensor:
    """2^ceil(log2(x)) for positive normal float32 ``x``, exactly, from the bit pattern.

    ``torch.log2`` is not guaranteed to return exactly k at x = 2^k (libm and CUDA fast-math
    approximations are off by an ulp in either direction), and ``ceil`` turns an ulp into a factor of
    two in the scale. On the bits: a power of two has a zero mantissa and is its own ceiling;
    anything else rounds up to the next exponent with a zero mantissa.

    The float32 division amax/448 that produces ``x`` cannot round a non-power-of-two quotient onto
    a power of two: amax has an 8-bit significand M, so amax/448 = (M/7)·2^e with 128 <= M < 256
    is either exactly a power of two (M = 224) or at least ~2^-8 relative away from one. So
    ceil(log2) of the rounded quotient is that of the exact quotient.
    """
    bits = x.view(torch.int32)
    exponent = bits & _F32_EXPONENT_MASK
    rounded = torch.where((bits & _F32_MANTISSA_MASK) == 0, exponent, exponent + _F32_EXPONENT_ONE)
    # NaN/inf scales (from NaN/inf inputs) are passed through instead of being bit-mangled.
    return torch.where(torch.isfinite(x), rounded.view(torch.float32), x)


def quantize_kv_cache(kv: torch.Tensor) -> torch.Tensor:
    """Quantize a bf16 MLA latent cache into the 656-byte V3.2 FP8 layout.

    Args:
        kv: bfloat16 ``[..., 576]`` (typically ``[num_blocks, page_block_size, 1, 576]``), any strides;
            dims 0..511 are NoPE, 512..575 RoPE. Inputs are expected finite (a NaN/inf poisons its
            tile's scale and values).

    Returns:
        uint8 ``[..., 656]``, contiguous: per token 512 e4m3fn bytes, 4 float32 scales, 64 bf16 RoPE
        values (bit-identical to the input). View it as float8_e4m3fn/int8 for FlashMLA-style calls.
    """
    if not isinstance(kv, torch.Tensor):
        raise TypeError(f"hopperkit: kv must be a torch.Tensor, got {type(kv).__name__}")
    if kv.dtype != torch.bfloat16:
        raise TypeError(f"hopperkit: quantize_kv_cache expects a bfloat16 kv, got {kv.dtype}")
    if kv.dim() < 1 or kv.shape[-1] != KV_HEAD_DIM:
        raise ValueError(
            f"hopperkit: quantize_kv_cache expects kv of shape [..., {KV_HEAD_DIM}], got {tuple(kv.shape)}"
        )
    lead = kv.shape[:-1]
    nope = kv[..., :KV_NOPE_DIM].float().unflatten(-1, (KV_NUM_TILES, KV_TILE_SIZE))
    amax = nope.abs().amax(dim=-1)  # [..., 4]
    scale = _ceil_pow2(torch.clamp_min(amax / KV_FP8_MAX, KV_SCALE_FLOOR))
    values = (nope / scale.unsqueeze(-1)).to(torch.float8_e4m3fn).flatten(-2)

    out = torch.empty(*lead, KV_FP8_BYTES_PER_TOKEN, dtype=torch.uint8, device=kv.device)
    out[..., KV_NOPE_OFFSET:KV_SCALE_OFFSET] = values.view(torch.uint8)
    out[..., KV_SCALE_OFFSET:KV_ROPE_OFFSET] = scale.contiguous().view(torch.uint8)
    out[..., KV_ROPE_OFFSET:] = kv[..., KV_NOPE_DIM:].contiguous().view(torch.uint8)
    return out


def dequantize_kv_cache(kv_fp8: torch.Tensor) -> torch.Tensor:
    """Dequantize 656-byte V3.2 FP8 cache rows to bf16 with the SM90 kernel's exact numerics.

    Args:
        kv_fp8: uint8, int8 or float8_e4m3fn ``[..., 656]`` (the raw bytes; e.g. a whole cache
            ``[num_blocks, page_block_size, 1, 656]`` or gathered rows). Any strides, including a
            block stride larger than ``page_block_size * 656``.

    Returns:
        bfloat16 ``[..., 576]``, contiguous: ``bf16(bf16(float(fp8)) * bf16(scale))`` per NoPE element
        (the float32 product of two 8-bit significands is exact, so rounding it once to bf16 equals
        the kernel's bf16 multiply), RoPE reinterpreted unchanged.
    """
    if not isinstance(kv_fp8, torch.Tensor):
        raise TypeError(f"hopperkit: kv_fp8 must be a torch.Tensor, got {type(kv_fp8).__name__}")
    if kv_fp8.dtype not in _BYTE_DTYPES:
        raise TypeError(
            f"hopperkit: dequantize_kv_cache expects uint8, int8 or float8_e4m3fn bytes, got {kv_fp8.dtype}"
        )
    if kv_fp8.dim() < 1 or kv_fp8.shape[-1] != KV_FP8_BYTES_PER_TOKEN:
        raise ValueError(
            f"hopperkit: dequantize_kv_cache expects shape [..., {KV_FP8_BYTES_PER_TOKEN}], "
            f"got {tuple(kv_fp8.shape)}"
        )
    raw = kv_fp8.view(torch.uint8)
    # fp8 -> float is exact and e4m3's 4-bit significand fits bf16's 8 bits, so this bf16 is exact too.
    nope = raw[..., KV_NOPE_OFFSET:KV_SCALE_OFFSET].view(torch.float8_e4m3fn).float()
    nope = nope.to(torch.bfloat16).float().unflatten(-1, (KV_NUM_TILES, KV_TILE_SIZE))
    # The multi-byte fields are re-packed before the dtype view: a view needs their byte offset and
    # every stride to be multiples of the wider element, which a caller's strided cache need not be.
    scale = raw[..., KV_SCALE_OFFSET:KV_ROPE_OFFSET].contiguous().view(torch.float32)
    scale = scale.to(torch.bfloat16).float().unsqueeze(-1)  # [..., 4, 1]
    nope = (nope * scale).to(torch.bfloat16).flatten(-2)
    rope = raw[..., KV_ROPE_OFFSET:].contiguous().view(torch.bfloat16)
    return torch.cat([nope, rope], dim=-1)
