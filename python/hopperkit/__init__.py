"""hopperkit: Hopper (SM90) CUDA kernels for DeepSeek-style LLM inference.

Drop-in names for DeepGEMM (FP8/BF16 GEMM, MoE grouped GEMM, scale layouts) and FlashMLA (MLA decode).
Every op runs its CUDA kernel on an SM90 GPU where one exists and its PyTorch reference everywhere
else (``hopperkit.reference``); ``python -m hopperkit`` shows which path each op takes here.
"""

try:
    from ._version import __version__  # written by setup.py at install time
except ImportError:  # a source tree used without installing
    __version__ = "0.0.0+unknown"
from ._validation import set_check_values
from .layout import (
    get_col_major_tma_aligned_tensor,
    get_m_alignment_for_contiguous_layout,
    get_mk_alignment_for_contiguous_layout,
    get_mn_major_tma_aligned_tensor,
    get_num_sms,
    get_pdl,
    get_theoretical_mk_alignment_for_contiguous_layout,
    get_tma_aligned_size,
    set_num_sms,
    set_pdl,
    transform_sf_into_required_layout,
)
from .gemm import (
    bf16_gemm_nn,
    bf16_gemm_nt,
    bf16_gemm_tn,
    bf16_gemm_tt,
    bf16_m_grouped_gemm_nt_masked,
    fp8_fp4_gemm_nn,
    fp8_fp4_gemm_nt,
    fp8_fp4_gemm_tn,
    fp8_fp4_gemm_tt,
    fp8_gemm_nn,
    fp8_gemm_nt,
    fp8_gemm_tn,
    fp8_gemm_tt,
    fp8_m_grouped_gemm_nt_masked,
    k_grouped_bf16_gemm_tn_contiguous,
    k_grouped_fp8_gemm_nt_contiguous,
    m_grouped_bf16_gemm_nn_contiguous,
    m_grouped_bf16_gemm_nt_contiguous,
    m_grouped_bf16_gemm_nt_masked,
    m_grouped_fp8_fp4_gemm_nn_contiguous,
    m_grouped_fp8_fp4_gemm_nt_contiguous,
    m_grouped_fp8_fp4_gemm_nt_masked,
    m_grouped_fp8_gemm_nn_contiguous,
    m_grouped_fp8_gemm_nt_contiguous,
    m_grouped_fp8_gemm_nt_masked,
)
from .mla import (
    FlashMLASchedMeta,
    dequantize_kv_cache,
    flash_mla_with_kvcache,
    get_mla_metadata,
    quantize_kv_cache,
)
from .quant import per_block_cast_to_fp8, per_channel_cast_to_fp8, per_token_cast_to_fp8
from .testing import calc_diff
from . import gemm, layout, mla, quant, reference, testing  # noqa: F401  (submodules as attributes)

__all__ = [
    "__version__",
    "set_check_values",
    "fp8_gemm_nt", "fp8_gemm_nn", "fp8_gemm_tn", "fp8_gemm_tt",
    "bf16_gemm_nt", "bf16_gemm_nn", "bf16_gemm_tn", "bf16_gemm_tt",
    "m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_gemm_nn_contiguous", "m_grouped_fp8_gemm_nt_masked",
    "k_grouped_fp8_gemm_nt_contiguous",
    "m_grouped_bf16_gemm_nt_contiguous", "m_grouped_bf16_gemm_nn_contiguous", "m_grouped_bf16_gemm_nt_masked",
    "k_grouped_bf16_gemm_tn_contiguous",
    "fp8_fp4_gemm_nt", "fp8_fp4_gemm_nn", "fp8_fp4_gemm_tn", "fp8_fp4_gemm_tt",
    "m_grouped_fp8_fp4_gemm_nt_contiguous", "m_grouped_fp8_fp4_gemm_nn_contiguous", "m_grouped_fp8_fp4_gemm_nt_masked",
    "fp8_m_grouped_gemm_nt_masked", "bf16_m_grouped_gemm_nt_masked",
    "per_token_cast_to_fp8", "per_block_cast_to_fp8", "per_channel_cast_to_fp8",
    "get_num_sms",
    "set_num_sms",
    "get_pdl",
    "set_pdl",
    "get_tma_aligned_size",
    "get_mn_major_tma_aligned_tensor",
    "get_mk_alignment_for_contiguous_layout",
    "get_m_alignment_for_contiguous_layout",
    "get_theoretical_mk_alignment_for_contiguous_layout",
    "get_col_major_tma_aligned_tensor",
    "transform_sf_into_required_layout",
    "FlashMLASchedMeta",
    "get_mla_metadata",
    "flash_mla_with_kvcache",
    "quantize_kv_cache",
    "dequantize_kv_cache",
    "calc_diff",
]
