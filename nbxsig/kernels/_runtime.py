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


def prepare_triton() -> None:
    """Do ahead -- in a start-up thread, say -- the per-process work of the first Triton launch that
    does not depend on the kernel: Triton hashes its own sources and shared library into the key of its
    on-disk cache (0.4-0.5 s on the H200's host; the hashing releases the GIL, so it overlaps other
    work). Later launches find the key computed. The function is Triton's own (not public API); where a
    Triton version lacks it this raises ImportError and the first launch pays as before."""
    from triton.runtime.cache import triton_key

    triton_key()

