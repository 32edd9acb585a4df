"""What every launcher needs: output allocation, the launch-time device check, and how many programs
the GPU holds at once."""

from __future__ import annotations

import os
from functools import lru_cache

import torch

from .._dispatch import interpreter_enabled
from ..errors import BackendUnavailableError

POISON_ENV = "NBXSIG_POISON_OUTPUTS"

#: CUDA's limit on grid axes 1 and 2 (axis 0 takes 2^31 - 1); a launch beyond it fails with "Triton Error
#: [CUDA]: invalid argument". Launchers that put a batch there run it in slices of at most this many
#: (:func:`grid_slices`). Read at call time: the tests lower it, and the interpreter then enforces it.
MAX_GRID_YZ = 65535


# Plain-Python twins of triton.cdiv / triton.next_power_of_2 for launchers: Triton's are
# constexpr-function wrappers that cost 3-15 µs per host call, which dominated small launches.
def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_pow2(n: int, minimum: int = 1) -> int:
    """The smallest power of two >= ``n`` (and >= ``minimum``)."""
    return max(minimum, 1 << max(0, n - 1).bit_length())


def grid_slices(n: int, step: int | None = None) -> list[slice]:
    """``range(n)`` in slices of at most ``step`` (default :data:`MAX_GRID_YZ`) items."""
    step = MAX_GRID_YZ if step is None else step
    return [slice(a, min(n, a + step)) for a in range(0, n, step)]


def over_grid_batch(run, x: torch.Tensor, **kwargs) -> torch.Tensor:
    """``run(x[rows], **kwargs)`` on slices of at most :data:`MAX_GRID_YZ` rows, joined along dim 0
    (gradients flow through the join), for a launcher that puts ``x``'s rows on grid axis 1 or 2. Its
    callers test ``x.shape[0] > MAX_GRID_YZ`` themselves, which keeps this call off their common path."""
    return torch.cat([run(x[rows], **kwargs) for rows in grid_slices(x.shape[0])])


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


def resident_programs(registers: int, warps: int) -> int:
    """Programs of ``warps`` warps that one H100/H200 SM holds at ``registers`` per thread. Each of the
    SM's four schedulers has its own 16384 registers, given out per warp in units of 256, and keeps its
    warps: 168 registers allow 3 warps per scheduler, 171-255 only 2 (at 200 registers, 8 warps an SM,
    not the 10 that 65536 ÷ 6400 suggests -- the depthwise long path's first grid, sized for 10, ran in
    1.25 waves: 991 against 703 µs on the H200; the driver's occupancy agreed on every kernel checked).
    At most 64 warps and 32 programs an SM."""
    per_warp = -(-registers * 32 // 256) * 256
    return max(1, min(4 * (16384 // per_warp) // warps, 64 // warps, 32))


def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors of the CUDA ``device`` (read once per device)."""
    return _sm_count(device.index if device.index is not None else torch.cuda.current_device())


@lru_cache(maxsize=8)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count
