"""nbxsig: GPU signal and vision processing on Triton kernels with a PyTorch API.

Importing the package does nothing but define names: no CUDA query, no allocation, no kernel
compilation. Submodules load on first use::

    import nbxsig.stft          # or: import nbxsig; nbxsig.stft.stft(...)
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_SUBMODULES = (
    "attention",
    "batch",
    "dft",
    "errors",
    "features",
    "filter_design",
    "filters",
    "io",
    "models",
    "quant",
    "stft",
    "streaming",
    "testing",
    "transforms",
)


def __getattr__(name: str) -> Any:
    # Lazy submodule access keeps `import nbxsig` free of torch/triton work until a module is used.
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'nbxsig' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_SUBMODULES])
