"""Launching an already compiled Triton kernel with less host work.

``kernel[grid](*args)`` re-derives, on every call, the specialisation of every argument (the
binder), a cache key (including ``str()`` of the options), checks the kernel's globals and queries
the device. On the H200 machine's host that cost 40-80 µs per call (bench suite "quant" at
e7e6e3a: tinygemm's C++ op 13 µs), more than the GEMV itself. :func:`launch` does that work once
per distinct *specialisation* and then launches the cached ``CompiledKernel`` directly.

The key holds everything Triton specialises on, so a call never reuses a kernel compiled for other
assumptions: the constexpr values and compile options, each tensor's dtype and whether its address
is 16-byte aligned, and each integer's ``== 1`` / ``% 16 == 0`` / 32-bit-range properties. Under
Triton's interpreter (CPU tests), or with ``NBXSIG_DIRECT_LAUNCH=0``, it is a plain
``kernel[grid](...)``.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from .._dispatch import interpreter_enabled

_COMPILED: dict[tuple, Any] = {}


def _spec(arg: Any) -> Any:
    if isinstance(arg, torch.Tensor):
        return (arg.dtype, arg.data_ptr() % 16 == 0)
    if isinstance(arg, bool):
        return ("b", arg)
    if isinstance(arg, int):
        return ("i", arg == 1, arg % 16 == 0, -(2**31) <= arg < 2**31, arg < 2**63)
    if isinstance(arg, float):
        return "f"
    return ("?", arg)  # anything else (None) is keyed by value


def launch(
    kernel: Any, grid: tuple[int, ...], args: tuple, constexprs: dict[str, Any], **options: Any
) -> None:
    """``kernel[grid](*args, **constexprs, **options)``, through a cached compiled kernel when possible.

    ``args`` are the runtime arguments in signature order and must precede every constexpr
    parameter in the kernel's signature (true for the kernels of this package)."""
    if interpreter_enabled() or os.environ.get("NBXSIG_DIRECT_LAUNCH") == "0":
        kernel[grid](*args, **constexprs, **options)
        return
    # A CompiledKernel is loaded on one device; Triton launches on the current one.
    device = torch.cuda.current_device()
    key = (kernel, device, tuple(constexprs.items()), tuple(options.items()), tuple(_spec(a) for a in args))
    compiled = _COMPILED.get(key)
    if compiled is None:
        compiled = kernel[grid](*args, **constexprs, **options)  # compiles (or finds) and launches
        names = kernel.arg_names[len(args) :]
        if compiled is not None and sorted(names) == sorted(constexprs):
            _COMPILED[key] = (compiled, tuple(constexprs[name] for name in names))
        return
    compiled, tail = compiled
    compiled[grid](*args, *tail)
