"""``python -m hopperkit``: version, build, device, and which path each public op takes here."""

from __future__ import annotations

import platform

import torch

import hopperkit
from hopperkit import _ops

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
    width = max(len(n) for n in _ops.PUBLIC_OP_KERNELS)
    for name, kernel in _ops.PUBLIC_OP_KERNELS.items():
        if kernel is None:
            path = "reference (no kernel yet)"
        elif _ops.use_kernel(name, device):
            path = "kernel"
        elif _ops.has_kernel(name):
            path = "reference here (kernel needs an SM90 GPU)"
        else:
            path = "reference (extension not built)"
        print(f"  {name:<{width}}  {path}")


if __name__ == "__main__":
    main()
