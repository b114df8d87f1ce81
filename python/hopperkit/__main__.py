"""``python -m hopperkit``: version, build, device, and which path each public op takes here."""

from __future__ import annotations

import platform

import torch

import hopperkit
from hopperkit import _ops

# Public op -> the kernel it needs (None: no kernel yet, it always runs the reference).
PUBLIC_OPS = {
    "get_mla_metadata": "get_mla_metadata",
    "flash_mla_with_kvcache": None,
    "quantize_kv_cache": None,
    "dequantize_kv_cache": None,
    "fp8_gemm_nt (nn/tn/tt)": None,
    "bf16_gemm_nt (nn/tn/tt)": None,
    "m_grouped_fp8_gemm_nt_contiguous": None,
    "m_grouped_fp8_gemm_nt_masked": None,
    "k_grouped_fp8_gemm_nt_contiguous": None,
    "m_grouped_bf16_gemm_nt_contiguous": None,
    "m_grouped_bf16_gemm_nt_masked": None,
    "per_token_cast_to_fp8": None,
    "per_block_cast_to_fp8": None,
    "mla.mla_combine (split-KV combine)": "mla_combine",
}


def main() -> None:
    print(f"hopperkit {hopperkit.__version__}  (python {platform.python_version()}, torch {torch.__version__})")
    if _ops.EXTENSION_LOADED:
        info = _ops.build_info()
        print(f"build:  hopperkit._C loaded; CUDA {info.get('cuda', '?')}, CUTLASS {info.get('cutlass', '?')}, "
              f"arch {info.get('gencode', '?')} (arch list {info.get('arch_list', '?')})")
    else:
        print(f"build:  pure Python, no CUDA extension ({_ops.EXTENSION_ERROR}); every op runs its reference")
    if torch.cuda.is_available():
        idx = torch.cuda.current_device()
        p = torch.cuda.get_device_properties(idx)
        device = torch.device("cuda", idx)
        print(f"device: cuda:{idx} {p.name}, sm_{p.major}{p.minor}, {p.multi_processor_count} SMs, "
              f"{p.total_memory / 2**30:.0f} GiB; kernels run here: {_ops.use_kernel('mla_combine', device) or False}")
    else:
        device = torch.device("cpu")
        print("device: no CUDA device; every op runs its PyTorch reference on the tensors' device")
    if _ops.force_reference():
        print("HOPPERKIT_FORCE_REFERENCE is set: kernels are disabled")
    print()
    width = max(len(n) for n in PUBLIC_OPS)
    for name, kernel in PUBLIC_OPS.items():
        if kernel is None:
            path = "reference (no kernel yet)"
        elif _ops.use_kernel(kernel, device):
            path = "kernel"
        elif _ops.has_kernel(kernel):
            path = "reference here (kernel needs an SM90 GPU)"
        else:
            path = "reference (extension not built)"
        print(f"  {name:<{width}}  {path}")


if __name__ == "__main__":
    main()
