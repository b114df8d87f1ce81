"""Build script for hopperkit.

One CUDA extension, ``hopperkit._C``, compiled ahead of time for ``sm_90a`` against the CUTLASS/CuTe
headers. Every kernel template instantiation lives in its own ``.cu`` file so that ninja compiles
them in parallel (``MAX_JOBS``); nvcc's own parallelism is ``NVCC_THREADS``.

Environment:
  HOPPERKIT_SKIP_CUDA_BUILD=1   install the pure-Python package (every op runs its PyTorch reference)
  HOPPERKIT_FORCE_CUDA_BUILD=1  build the extension even where detection says it cannot (fail loudly)
  CUTLASS_HOME                  a CUTLASS checkout; default: third_party/cutlass, then the nvidia-cutlass wheel
  CUDA_HOME                     the CUDA toolkit; default: /usr/local/cuda, then the directory above `nvcc`
  MAX_JOBS, NVCC_THREADS        parallel compile jobs / nvcc threads per job
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).parent.resolve()
VERSION = "0.1.0"


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "y", "on")


def _notice(msg: str) -> None:
    print(f"hopperkit setup: {msg}", file=sys.stderr, flush=True)


def _git_rev() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10)
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def find_cuda_home() -> Path | None:
    """The CUDA toolkit root, or None.

    torch.utils.cpp_extension guesses CUDA_HOME as the directory above `which nvcc`; where nvcc is a
    wrapper script in /usr/local/bin that guess is /usr/local, which has no CUDA headers. So we resolve
    it here and export it before torch.utils.cpp_extension is imported.
    """
    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(str(Path(os.path.realpath(nvcc)).parent.parent))
    for c in candidates:
        if c and (Path(c) / "bin" / "nvcc").exists() and (Path(c) / "include" / "cuda_runtime.h").exists():
            return Path(c).resolve()
    return None


def find_cutlass() -> tuple[list[Path], str]:
    """CUTLASS/CuTe include directories and where they came from."""
    roots: list[tuple[Path, str]] = []
    if os.environ.get("CUTLASS_HOME"):
        roots.append((Path(os.environ["CUTLASS_HOME"]), "CUTLASS_HOME"))
    roots.append((ROOT / "third_party" / "cutlass", "third_party/cutlass"))
    spec = importlib.util.find_spec("cutlass_library")
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            roots.append((Path(loc) / "source", "nvidia-cutlass wheel"))
    for root, origin in roots:
        if (root / "include" / "cute" / "tensor.hpp").exists():
            dirs = [root / "include"]
            if (root / "tools" / "util" / "include").exists():
                dirs.append(root / "tools" / "util" / "include")
            return dirs, f"{origin} ({root})"
    if os.environ.get("CUTLASS_HOME"):
        raise RuntimeError(f"hopperkit: CUTLASS_HOME={os.environ['CUTLASS_HOME']} has no include/cute/tensor.hpp")
    return [], ""


def find_torch_cuda_library_headers() -> list[Path]:
    """Header directories of the CUDA libraries that ship as pip wheels next to a CUDA build of torch.

    torch's ATen/cuda headers include cusparse.h and cublas_v2.h; a CUDA-13 torch wheel carries them in
    nvidia/cu13/include (CUDA-12 wheels: nvidia/<lib>/include), not in the toolkit.
    """
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return []
    dirs = []
    for loc in spec.submodule_search_locations:
        for sub in sorted(Path(loc).iterdir()):
            inc = sub / "include"
            if inc.is_dir() and ((inc / "cusparse.h").exists() or (inc / "cublas_v2.h").exists()):
                dirs.append(inc)
    return dirs


def cuda_build_plan():
    """Decide whether to build hopperkit._C. Returns (ext_modules, cmdclass)."""
    if _flag("HOPPERKIT_SKIP_CUDA_BUILD"):
        _notice("HOPPERKIT_SKIP_CUDA_BUILD is set: installing the pure-Python package; every op runs its PyTorch reference.")
        return [], {}
    force = _flag("HOPPERKIT_FORCE_CUDA_BUILD")

    reasons = []
    cuda_home = find_cuda_home()
    if cuda_home is None:
        reasons.append("no CUDA toolkit (nvcc) found; set CUDA_HOME")
    else:
        os.environ["CUDA_HOME"] = str(cuda_home)
    try:
        import torch
    except ImportError:
        torch = None
        reasons.append("torch is not importable at build time (install torch first, then pip install --no-build-isolation)")
    if torch is not None and torch.version.cuda is None:
        reasons.append(f"torch {torch.__version__} is not a CUDA build")
    cutlass_dirs, cutlass_origin = find_cutlass()
    if not cutlass_dirs:
        reasons.append("no CUTLASS headers: pip install nvidia-cutlass==4.2.0.0, or set CUTLASS_HOME")

    if reasons:
        msg = "not building the CUDA extension hopperkit._C: " + "; ".join(reasons)
        if force:
            raise RuntimeError("hopperkit: HOPPERKIT_FORCE_CUDA_BUILD=1 but " + msg)
        _notice(msg + ". Installing the pure-Python package; every op runs its PyTorch reference.")
        return [], {}

    from torch.utils.cpp_extension import BuildExtension, CUDAExtension

    _notice(f"building hopperkit._C for sm_90a with CUDA at {cuda_home}, CUTLASS from {cutlass_origin}")
    sources = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "csrc").rglob("*") if p.suffix in (".cu", ".cpp"))
    include_dirs = [ROOT / "csrc", *cutlass_dirs]
    # py_limited_api=True makes torch define Py_LIMITED_API (3.10): one abi3 build serves every
    # CPython that torch supports.
    common_defines = ["-DNDEBUG", "-DHOPPERKIT_GENCODE_SM90A"]
    # g++ does not add the CCCL directory that nvcc adds on its own; CUTLASS host headers need it.
    cxx_flags = ["-O3", "-std=c++20", "-fvisibility=hidden", "-Wno-deprecated-declarations", *common_defines,
                 "-isystem", str(cuda_home / "include" / "cccl")]
    # After the toolkit's own headers, so that the wheel's copies of toolkit headers never shadow them.
    for d in find_torch_cuda_library_headers():
        cxx_flags += ["-idirafter", str(d)]
    nvcc_threads = os.environ.get("NVCC_THREADS", "4")
    nvcc_flags = [
        "-O3", "-std=c++20", *common_defines,
        "-gencode=arch=compute_90a,code=sm_90a",
        "--expt-relaxed-constexpr", "--expt-extended-lambda",
        "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
        "-U__CUDA_NO_HALF2_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
        "-lineinfo",
        # A hot kernel that spills or uses local memory is a bug: make ptxas say so on every build.
        "--ptxas-options=-v,--warn-on-spills,--warn-on-local-memory-usage",
        "-Wno-deprecated-declarations",
        "--threads", nvcc_threads,
    ]
    ext = CUDAExtension(
        name="hopperkit._C",
        sources=sources,
        include_dirs=[str(d) for d in include_dirs],
        extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags},
        py_limited_api=True,
    )
    return [ext], {"build_ext": BuildExtension.with_options(use_ninja=True)}


def write_version_file(version: str) -> None:
    (ROOT / "python" / "hopperkit" / "_version.py").write_text(f'__version__ = "{version}"\n')


ext_modules, cmdclass = cuda_build_plan()
rev = _git_rev()
full_version = VERSION + (f"+g{rev}" if rev else "")
write_version_file(full_version)

setup(
    name="hopperkit",
    version=full_version,
    package_dir={"": "python"},
    packages=find_packages("python"),
    ext_modules=ext_modules,
    cmdclass=cmdclass,
    options={"bdist_wheel": {"py_limited_api": "cp310"}} if ext_modules else {},
    zip_safe=False,
)
