"""hopperkit: Hopper (SM90) CUDA kernels for DeepSeek-style LLM inference."""

from ._version import __version__  # noqa: F401
