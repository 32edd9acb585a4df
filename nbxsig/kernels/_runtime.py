"""What every launcher needs: output allocation and the launch-time device check."""

from __future__ import annotations

import os

import torch

from .._dispatch import interpreter_enabled
from ..errors import BackendUnavailableError

POISON_ENV = "NBXSIG_POISON_OUTPUTS"


def check_launchable(*tensors: torch.Tensor) -> torch.device:
    """Return the common device of ``tensors`` if a Triton kernel can run there.

    CUDA tensors always qualify; CPU tensors only under Triton's interpreter.
    """
    device = tensors[0].device
    for t in tensors[1:]:
        if t.device != device:
            raise BackendUnavailableError(
                f"all tensors of one call must be on one device, got {device} and {t.device}"
            )
    if device.type == "cuda" or (device.type == "cpu" and interpreter_enabled()):
        return device
    raise BackendUnavailableError(
        f"Triton kernels run on CUDA/ROCm tensors (or CPU tensors with TRITON_INTERPRET=1 set before "
        f"triton is imported), got a tensor on {device}"
    )


def empty_output(
    shape: tuple[int, ...],
    *,
    dtype: torch.dtype,
    device: torch.device,
    strides: tuple[int, ...] | None = None,
) -> torch.Tensor:
    """Allocate a kernel's output (contiguous, or with ``strides``: a dense layout of the caller's).

    With ``NBXSIG_POISON_OUTPUTS=1`` (the test-suite sets it) floating outputs are filled with NaN
    first, so an element a kernel forgets to write fails every comparison instead of passing on a
    lucky zero.
    """
    if strides is None:
        out = torch.empty(shape, dtype=dtype, device=device)
    else:
        out = torch.empty_strided(shape, strides, dtype=dtype, device=device)
    if os.environ.get(POISON_ENV) == "1" and (out.is_floating_point() or out.is_complex()):
        out.fill_(float("nan"))
    return out
