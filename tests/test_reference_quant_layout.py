"""CPU tests of hopperkit.reference.quant and hopperkit.reference.layout.

The casts are bit-exact specifications, so they are checked for exact equality against independent
float64 formulations. A float64 result of one +, -, ×, / on float32 inputs, rounded to float32, is the
correctly rounded float32 result (double rounding is innocuous when 53 >= 2·24 + 2), so
``(float64 op).float()`` stands in for each IEEE float32 operation of the reference.
"""

from __future__ import annotations

import math

import pytest
import torch

from hopperkit.reference import layout as ref_layout
from hopperkit.reference import quant as ref_quant

U32 = 2.0**-24
FP32_CLAMP = float(torch.tensor(1e-4, dtype=torch.float32))  # the float32 value the clamp uses


def _randn(seed: int, *shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=gen) * torch.exp(2 * torch.randn(*shape[:-1], 1, generator=gen))
    return x.to(dtype)


def _e4m3_quantum(v: torch.Tensor) -> torch.Tensor:
    """Spacing of e4m3fn values around |v| (float64): 2^(floor(log2|v|) - 3), 2^-9 in the subnormals."""
    _, exponent = torch.frexp(v.abs())
    return torch.ldexp(torch.ones_like(v), (exponent - 1).clamp(min=-6) - 3)


def _round_e4m3(v: torch.Tensor) -> torch.Tensor:
    """Round float64 values to e4m3fn, nearest-even, without using torch's float8 conversion."""
    quantum = _e4m3_quantum(v)
    rounded = torch.round(v.abs() / quantum) * quantum  # exact division; torch.round ties to even
    assert (rounded <= 448).all()
    return torch.copysign(rounded, v)


def _expected_cast(x: torch.Tensor, sf_full: torch.Tensor) -> torch.Tensor:
    """fp8 values of the documented op order, with sf_full = the scale of every element (float32)."""
    inv = (1.0 / sf_full.double()).float()
    q = (x.double() * inv.double()).float()
    return _round_e4m3(q.double())


def _expected_scale(amax64: torch.Tensor) -> torch.Tensor:
    return (amax64.clamp(min=FP32_CLAMP) / 448.0).float()


def _pow2_ceil64(sf: torch.Tensor) -> torch.Tensor:
    mantissa, exponent = torch.frexp(sf.double())
    return torch.ldexp(torch.ones_like(mantissa), torch.where(mantissa == 0.5, exponent - 1, exponent))


def _check_scales(sf: torch.Tensor, amax64: torch.Tensor, use_ue8m0: bool) -> None:
    plain = _expected_scale(amax64)
    if not use_ue8m0:
        assert torch.equal(sf, plain)
        return
    assert torch.equal(sf.double(), _pow2_ceil64(plain))
    assert (sf >= plain).all() and (sf / 2 < plain).all()


def _check_dequant_error(x: torch.Tensor, x_fp8: torch.Tensor, sf_full: torch.Tensor, deq: torch.Tensor):
    """|deq - x| <= sf·(half an e4m3 step + float32 slack) + the float32 rounding of the dequant."""
    x64, sf64 = x.double(), sf_full.double()
    q = x64 / sf64
    bound = sf64 * (_e4m3_quantum(q) / 2 + 4 * U32 * q.abs()) + U32 * x64.abs() * 1.01 + 1e-45
    assert ((deq.double() - x64).abs() <= bound).all()
    assert torch.equal(deq, x_fp8.float() * sf_full)


# ------------------------------------------------------------------------------------------------
# casts
# ------------------------------------------------------------------------------------------------

SHAPES = [(1, 128), (7, 200), (33, 320), (130, 64)]
DTYPES = [torch.bfloat16, torch.float32, torch.float16]


@pytest.mark.parametrize("m,n", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("use_ue8m0", [False, True])
@pytest.mark.parametrize("gran_k", [128, 32])
def test_per_token_cast(m, n, dtype, use_ue8m0, gran_k):
    x = _randn(m * 1009 + n, m, n, dtype=dtype)
    if n > gran_k:
        x[0, gran_k : 2 * gran_k] = 0  # an all-zero block exercises the amax clamp
    x_fp8, sf = ref_quant.per_token_cast_to_fp8(x, use_ue8m0, gran_k)
    nb = math.ceil(n / gran_k)
    assert x_fp8.dtype == torch.float8_e4m3fn and x_fp8.shape == (m, n)
    assert sf.dtype == torch.float32 and sf.shape == (m, nb)

    padded = torch.zeros(m, nb * gran_k, dtype=torch.float64)
    padded[:, :n] = x.double().abs()
    _check_scales(sf, padded.view(m, nb, gran_k).amax(dim=2), use_ue8m0)
    sf_full = sf.repeat_interleave(gran_k, dim=1)[:, :n]
    assert torch.equal(x_fp8.double(), _expected_cast(x.float(), sf_full))
    _check_dequant_error(x, x_fp8, sf_full, ref_quant.dequantize_per_token(x_fp8, sf, gran_k))


@pytest.mark.parametrize("m,n", SHAPES + [(200, 7)])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("use_ue8m0", [False, True])
def test_per_block_cast(m, n, dtype, use_ue8m0):
    x = _randn(m * 31 + n, m, n, dtype=dtype)
    x_fp8, sf = ref_quant.per_block_cast_to_fp8(x, use_ue8m0)
    mb, nb = math.ceil(m / 128), math.ceil(n / 128)
    assert x_fp8.shape == (m, n) and sf.shape == (mb, nb) and sf.dtype == torch.float32

    amax = torch.zeros(mb, nb, dtype=torch.float64)
    for i in range(mb):
        for j in range(nb):
            amax[i, j] = x[i * 128 : (i + 1) * 128, j * 128 : (j + 1) * 128].double().abs().max()
    _check_scales(sf, amax, use_ue8m0)
    sf_full = sf.repeat_interleave(128, dim=0)[:m].repeat_interleave(128, dim=1)[:, :n]
    assert torch.equal(x_fp8.double(), _expected_cast(x.float(), sf_full))
    _check_dequant_error(x, x_fp8, sf_full, ref_quant.dequantize_per_block(x_fp8, sf))


@pytest.mark.parametrize("m,n", [(128, 7), (200, 3), (1, 5), (384, 16)])
@pytest.mark.parametrize("use_ue8m0", [False, True])
def test_per_channel_cast(m, n, use_ue8m0):
    x = _randn(m + 17 * n, m, n)
    x_fp8, sf = ref_quant.per_channel_cast_to_fp8(x, use_ue8m0)
    mb = math.ceil(m / 128)
    assert x_fp8.shape == (m, n) and sf.shape == (mb, n)
    amax = torch.stack([x[i * 128 : (i + 1) * 128].double().abs().amax(dim=0) for i in range(mb)])
    _check_scales(sf, amax, use_ue8m0)
    sf_full = sf.repeat_interleave(128, dim=0)[:m]
    assert torch.equal(x_fp8.double(), _expected_cast(x.float(), sf_full))
    _check_dequant_error(x, x_fp8, sf_full, ref_quant.dequantize_per_channel(x_fp8, sf))


def test_cast_accepts_strided_input():
    x = _randn(5, 300, 7).t()  # [7, 300], non-contiguous
    expected = ref_quant.per_token_cast_to_fp8(x.contiguous())
    got = ref_quant.per_token_cast_to_fp8(x)
    assert torch.equal(got[0].view(torch.uint8), expected[0].view(torch.uint8))
    assert torch.equal(got[1], expected[1])


def test_cast_errors():
    with pytest.raises(TypeError, match="^hopperkit: x must be float32"):
        ref_quant.per_token_cast_to_fp8(torch.zeros(2, 2, dtype=torch.int32))
    with pytest.raises(ValueError, match="^hopperkit: x must be 2-D"):
        ref_quant.per_block_cast_to_fp8(torch.randn(2, 2, 2))
    with pytest.raises(ValueError, match="^hopperkit: gran_k must be a positive int"):
        ref_quant.per_channel_cast_to_fp8(torch.randn(2, 2), gran_k=0)
    with pytest.raises(ValueError, match="^hopperkit: sf must be"):
        ref_quant.dequantize_per_token(torch.zeros(2, 256, dtype=torch.float8_e4m3fn), torch.ones(2, 3))


# ------------------------------------------------------------------------------------------------
# UE8M0
# ------------------------------------------------------------------------------------------------


def test_ceil_to_ue8m0_edges():
    tiny = 2.0**-130  # denormal
    x = torch.tensor(
        [1.0, 1.0000001, 0.75, 3.0, 2.0**-126, tiny, 0.0, 2.0**127, 3e38, math.inf, 448.0, -3.0],
        dtype=torch.float32,
    )
    expected = [1.0, 2.0, 1.0, 4.0, 2.0**-126, 2.0**-126, 2.0**-126, 2.0**127, 2.0**127, 2.0**127, 512.0, 4.0]
    assert ref_quant.ceil_to_ue8m0(x).tolist() == expected
    assert ref_quant.ceil_to_ue8m0(torch.tensor([math.nan])).item() == 2.0**127


def test_ceil_to_ue8m0_random():
    x = torch.exp(torch.randn(4096, generator=torch.Generator().manual_seed(0)) * 20).float()
    out = ref_quant.ceil_to_ue8m0(x)
    assert torch.equal(out.double(), _pow2_ceil64(x))


@pytest.mark.parametrize("shape", [(5, 1), (7, 3), (4, 4), (3, 5), (2, 6, 9), (1, 0)])
def test_pack_unpack_round_trip(shape):
    gen = torch.Generator().manual_seed(sum(shape))
    exponents = torch.randint(-126, 128, shape, generator=gen)
    sf = torch.ldexp(torch.ones(shape), exponents).float()
    packed = ref_quant.pack_ue8m0_to_int(sf)
    sfk = shape[-1]
    assert packed.dtype == torch.int32 and packed.shape == shape[:-1] + (math.ceil(sfk / 4),)
    assert torch.equal(ref_quant.unpack_ue8m0_from_int(packed, sfk), sf)
    # Non-contiguous input packs the same values.
    assert torch.equal(ref_quant.pack_ue8m0_to_int(sf.transpose(-1, -2).contiguous().transpose(-1, -2)), packed)


def test_pack_byte_layout_and_padding():
    sf = torch.tensor([[1.0, 2.0, 0.5, 4.0, 8.0]])
    packed = ref_quant.pack_ue8m0_to_int(sf)
    word0 = 127 | (128 << 8) | (126 << 16) | (129 << 24)
    assert packed.tolist() == [[word0 - (1 << 32), 130]]  # second word: byte 130, three 0x00 pad bytes


@pytest.mark.parametrize("bad", [3.0, 0.0, -2.0, math.inf, math.nan, 2.0**-130, 1.5 * 2.0**-20])
def test_pack_rejects_non_powers_of_two(bad):
    sf = torch.tensor([[1.0, bad, 2.0]], dtype=torch.float32)
    with pytest.raises(ValueError, match="^hopperkit: sf must hold positive normal powers of two"):
        ref_quant.pack_ue8m0_to_int(sf)
    ref_quant.pack_ue8m0_to_int(sf, check=False)  # the check is the only thing that reads data


def test_unpack_errors():
    with pytest.raises(ValueError, match=r"^hopperkit: packed must be \[..., ceil\(sfk/4\)\]"):
        ref_quant.unpack_ue8m0_from_int(torch.zeros(3, 2, dtype=torch.int32), 9)
    with pytest.raises(TypeError, match="^hopperkit: packed must be an int32"):
        ref_quant.unpack_ue8m0_from_int(torch.zeros(3, 2), 8)


# ------------------------------------------------------------------------------------------------
# layout
# ------------------------------------------------------------------------------------------------


def test_tma_aligned_size():
    assert [ref_layout.get_tma_aligned_size(x, 4) for x in (0, 1, 4, 5, 4097)] == [0, 4, 4, 8, 4100]
    assert ref_layout.get_tma_aligned_size(17, 1) == 32
    assert ref_layout.get_tma_aligned_size(9, 2) == 16
    assert ref_layout.get_mk_alignment_for_contiguous_layout() == 128
    with pytest.raises(ValueError, match="^hopperkit: element_size must divide 16"):
        ref_layout.get_tma_aligned_size(4, 3)


def _expected_strides(groups, mn, sfk):
    aligned = ref_layout.get_tma_aligned_size(mn, 4)
    return (1, aligned) if groups is None else (aligned * sfk, 1, aligned)


@pytest.mark.parametrize("groups", [None, 1, 3])
@pytest.mark.parametrize("mn", [1, 4, 4097])
@pytest.mark.parametrize("sfk", [1, 3])
@pytest.mark.parametrize("source", ["contiguous", "transposed"])
def test_mn_major_tma_aligned(groups, mn, sfk, source):
    shape = (mn, sfk) if groups is None else (groups, mn, sfk)
    sf = torch.rand(shape, generator=torch.Generator().manual_seed(mn + sfk)) + 0.5
    if source == "transposed":
        sf = sf.transpose(-1, -2).contiguous().transpose(-1, -2)
    out = ref_layout.get_mn_major_tma_aligned_tensor(sf)
    assert torch.equal(out, sf) and out.dtype == torch.float32
    aligned = ref_layout.get_tma_aligned_size(mn, 4)
    g = 1 if groups is None else groups
    assert out.untyped_storage().nbytes() >= (out.storage_offset() + g * sfk * aligned) * 4
    if out is not sf:
        assert out.stride() == _expected_strides(groups, mn, sfk)
        padding = torch.as_strided(out, (g, sfk, aligned - mn), (aligned * sfk, aligned, 1), mn)
        assert (padding == 0).all()
    # Already in the layout: no copy.
    assert ref_layout.get_mn_major_tma_aligned_tensor(out) is out


def test_mn_major_size_one_dims():
    # [4, 1] contiguous: the stride of the size-1 K dim is irrelevant and no padding is needed.
    sf = torch.rand(4, 1)
    assert ref_layout.get_mn_major_tma_aligned_tensor(sf) is sf
    # [4097, 1] contiguous has the right strides but no storage for rows 4097..4099 a TMA box may read.
    sf = torch.rand(4097, 1)
    out = ref_layout.get_mn_major_tma_aligned_tensor(sf)
    assert out is not sf and torch.equal(out, sf) and out.stride() == (1, 4100)
    # [1, 3] contiguous: column stride 1, but the kernel steps 4 floats per K block.
    sf = torch.rand(1, 3)
    out = ref_layout.get_mn_major_tma_aligned_tensor(sf)
    assert out is not sf and out.stride() == (1, 4) and torch.equal(out, sf)
    # Right strides without the padded storage (empty_strided allocates just enough): copied.
    sf = torch.empty_strided((5, 3), (1, 8))
    sf.copy_(torch.rand(5, 3))
    assert ref_layout.get_mn_major_tma_aligned_tensor(sf) is not sf
    # A group slice of an aligned 3-D tensor is itself aligned.
    sf3 = ref_layout.get_mn_major_tma_aligned_tensor(torch.rand(3, 5, 2))
    view = sf3[1]
    assert ref_layout.get_mn_major_tma_aligned_tensor(view) is view


def test_mn_major_errors():
    with pytest.raises(TypeError, match="^hopperkit: sf must be float32"):
        ref_layout.get_mn_major_tma_aligned_tensor(torch.zeros(4, 2, dtype=torch.int32))
    with pytest.raises(ValueError, match="^hopperkit: sf must be"):
        ref_layout.get_mn_major_tma_aligned_tensor(torch.zeros(4))


def test_transform_sfa_and_1d1d_sfb():
    sf = torch.rand(4097, 56)
    out = ref_layout.transform_sf_into_required_layout(sf, 4097, 7168, (1, 128, 128), is_sfa=True)
    assert torch.equal(out, sf) and out.stride() == (1, 4100)
    assert ref_layout.transform_sf_into_required_layout(out, 4097, 7168, (1, 128, 128), is_sfa=True) is out
    out_b = ref_layout.transform_sf_into_required_layout(sf, 4097, 7168, (1, 1, 128), is_sfa=False)
    assert torch.equal(out_b, sf) and out_b.stride() == (1, 4100)
    sf3 = torch.rand(2, 7, 3)
    out3 = ref_layout.transform_sf_into_required_layout(sf3, 7, 300, (1, 128), num_groups=2)
    assert torch.equal(out3, sf3) and out3.stride() == (24, 1, 8)


def test_transform_block_sfb():
    sf = torch.rand(3, 3, 57)  # N = 300, K = 7296, G = 3
    out = ref_layout.transform_sf_into_required_layout(sf, 300, 7296, (1, 128, 128), num_groups=3, is_sfa=False)
    assert out is sf
    sf_t = sf.transpose(-1, -2).contiguous().transpose(-1, -2)
    out_t = ref_layout.transform_sf_into_required_layout(sf_t, 300, 7296, (128, 128), num_groups=3)
    assert out_t.is_contiguous() and torch.equal(out_t, sf)


@pytest.mark.parametrize(
    "kwargs,exc,fragment",
    [
        (dict(sf=torch.zeros(8, 1, dtype=torch.int32), mn=8, k=512, recipe=(1, 128, 128), is_sfa=True),
         ValueError, "SM90 needs FP32 scales"),
        (dict(sf=torch.zeros(8, 4), mn=8, k=512, recipe=(1, 32), is_sfa=True), ValueError, "SM90 needs FP32 scales"),
        (dict(sf=torch.zeros(8, 4), mn=8, k=512, recipe=(1, 128, 128)), ValueError, "is_sfa must be"),
        (dict(sf=torch.zeros(8, 3), mn=8, k=512, recipe=(1, 128, 128), is_sfa=True), ValueError, "sf must be"),
        (dict(sf=torch.zeros(7, 4), mn=8, k=512, recipe=(1, 128, 128), is_sfa=True), ValueError, "sf must be"),
        (dict(sf=torch.zeros(2, 8, 4), mn=8, k=512, recipe=(1, 128, 128), is_sfa=True), ValueError, "sf must be"),
        (dict(sf=torch.zeros(2, 8, 4), mn=8, k=512, recipe=(1, 128, 128), num_groups=3, is_sfa=True),
         ValueError, "num_groups=3"),
        (dict(sf=torch.zeros(2, 4), mn=300, k=512, recipe=(1, 128, 128), is_sfa=False), ValueError, "= [3, 4]"),
        (dict(sf=torch.zeros(2, 4), mn=200, k=512, recipe=(1, 2, 3, 4)), ValueError, "recipe must be"),
        (dict(sf=[1.0], mn=1, k=128, recipe=(1, 128)), TypeError, "sf must be a torch.Tensor"),
    ],
)
def test_transform_errors(kwargs, exc, fragment):
    with pytest.raises(exc) as info:
        ref_layout.transform_sf_into_required_layout(**kwargs)
    message = str(info.value)
    assert message.startswith("hopperkit: ") and fragment in message, message


def test_transform_accepts_wrong_shape_for_block_but_right_for_rows():
    # 200 rows of B: 1d2d expects [2, 4] block scales, 1d1d expects [200, 4] row scales.
    ref_layout.transform_sf_into_required_layout(torch.zeros(2, 4), 200, 512, (1, 128, 128), is_sfa=False)
    ref_layout.transform_sf_into_required_layout(torch.zeros(200, 4), 200, 512, (1, 1, 128), is_sfa=False)
    with pytest.raises(ValueError):
        ref_layout.transform_sf_into_required_layout(torch.zeros(200, 4), 200, 512, (1, 128, 128), is_sfa=False)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("cast", ["per_token", "per_block", "per_channel"])
@pytest.mark.parametrize("use_ue8m0", [False, True])
def test_casts_bit_equal_on_cuda(cast, use_ue8m0):
    """The casts are a bit-exact contract, so the CUDA run of the reference must equal the CPU one."""
    fn = getattr(ref_quant, f"{cast}_cast_to_fp8")
    x = _randn(77, 300, 320)
    cpu = fn(x, use_ue8m0)
    gpu = fn(x.cuda(), use_ue8m0)
    assert torch.equal(gpu[0].cpu().view(torch.uint8), cpu[0].view(torch.uint8))
    assert torch.equal(gpu[1].cpu(), cpu[1])
