"""The SwiGLU gate on the Triton backend (the twin of :func:`nbxsig.reference.models.silu_mul`): one launch.

``gate_up (rows, 2F)`` holds ``gate | up``; each program computes ``BLOCK_R × BLOCK_F`` outputs::

    y[r, f] = round(round(silu(gate[r, f])) · up[r, f])        (float32 math, rounded to the dtype)

rounding the silu to the dtype before the product, as torch's eager pair of launches (``F.silu``,
then ``*``) does (its ``exp`` and division are the GPU's fast forms: within a float32 ulp or two of
torch's, far inside the dtype's tolerance). In a decode step it replaces those two launches. No
autograd (a decode step; training goes through torch's ops).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..errors import bad_value
from ._launch import CachedLaunch
from ._runtime import cdiv, check_launchable, empty_output, next_pow2

#: Elements per program (rows × columns).
_TILE = 2048


@triton.jit
def _silu_mul_kernel(
    gu_ptr,
    y_ptr,
    n_rows,
    width,  # F: the output's columns, half of gate_up's
    stride_gu,
    BLOCK_R: tl.constexpr,
    BLOCK_F: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    ok = (rows < n_rows)[:, None] & (cols < width)[None, :]
    at = gu_ptr + rows.to(tl.int64)[:, None] * stride_gu + cols[None, :]
    gate = tl.load(at, mask=ok, other=0.0)
    up = tl.load(at + width, mask=ok, other=0.0).to(tl.float32)
    g = gate.to(tl.float32)
    silu = (g / (1.0 + tl.exp(-g))).to(gate.dtype).to(tl.float32)
    y_at = y_ptr + rows.to(tl.int64)[:, None] * width + cols[None, :]
    tl.store(y_at, (silu * up).to(y_ptr.dtype.element_ty), mask=ok)


_launch = CachedLaunch(_silu_mul_kernel)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """Triton twin of :func:`nbxsig.reference.models.silu_mul`: ``gate_up (..., 2F)`` float16/bfloat16/
    float32 (rows read by their stride, columns unit-strided) → ``(..., F)`` in its dtype; no autograd."""
    device = check_launchable(gate_up)
    two_f = gate_up.shape[-1]
    if two_f % 2:
        raise bad_value("gate_up", gate_up, "a tensor whose last dim (gate | up) is even")
    width = two_f // 2
    rows = gate_up.reshape(-1, two_f)
    if two_f > 1 and rows.stride(1) != 1:
        rows = rows.contiguous()
    y = empty_output((*gate_up.shape[:-1], width), dtype=gate_up.dtype, device=device)
    n_rows = rows.shape[0]
    if n_rows == 0 or width == 0:
        return y
    block_f = min(next_pow2(width, 16), 1024)
    block_r = max(1, min(_TILE // block_f, next_pow2(n_rows)))
    grid = (cdiv(n_rows, block_r), cdiv(width, block_f))
    _launch(grid, (rows, y, n_rows, width, rows.stride(0)), {"BLOCK_R": block_r, "BLOCK_F": block_f}, 4)
    return y
