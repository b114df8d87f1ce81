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
# The public names of each module, listed once in its __all__.
from .layout import *  # noqa: F401,F403
from .gemm import *  # noqa: F401,F403
from .mla import (
    FlashMLASchedMeta,
    dequantize_kv_cache,
    flash_mla_with_kvcache,
    get_mla_metadata,
    quantize_kv_cache,
)
from .quant import *  # noqa: F401,F403
from .testing import calc_diff
from . import gemm, layout, mla, quant, reference, testing  # noqa: F401  (submodules as attributes)

__all__ = [
    "__version__",
    "set_check_values",
    *gemm.__all__,
    *quant.__all__,
    *layout.__all__,
    "FlashMLASchedMeta",
    "get_mla_metadata",
    "flash_mla_with_kvcache",
    "quantize_kv_cache",
    "dequantize_kv_cache",
    "calc_diff",
]
