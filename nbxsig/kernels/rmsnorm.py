"""RMSNorm on the Triton backend (the twin of :func:`nbxsig.reference.models.rms_norm`): one launch.

Each program normalises ``BLOCK_R`` rows of a ``(rows, D)`` view::

    y[r, :] = x[r, :] · rsqrt(Σ x[r, :]² / D + eps) · w        (float32, stored in x's dtype)

in ``BLOCK_D`` column chunks: a first pass sums the squares, a second scales and stores, so any D
works; with ``D <= BLOCK_D`` the second pass reuses the loaded tile. torch's eager RMSNorm takes six
launches (cast, square, mean, add, rsqrt, two products and the cast back), each a round trip of the
activations through memory: in a streaming step these small launches, not their bytes, set the time.

Backward: :class:`_RMSNorm` recomputes the torch twin under autograd (the kernel saves nothing).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..reference import models as ref
from ._launch import CachedLaunch
from ._runtime import cdiv, check_launchable, empty_output, next_pow2

#: Columns a program holds at once: D up to this takes one pass over memory.
MAX_BLOCK_D = 4096
#: Elements per program (rows × columns): small rows share a program.
_TILE = 4096
#: Programs a launch aims for (about one per SM of an H100/H200) before rows share one.
_PROGRAMS = 128


@triton.jit
def _rms_norm_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    n_rows,
    dim,
    stride_x,
    stride_y,
    eps,
    BLOCK_R: tl.constexpr,
    BLOCK_D: tl.constexpr,
    ONE_PASS: tl.constexpr,  # dim <= BLOCK_D: the tile loaded for the sum is the one scaled
):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_ok = rows < n_rows
    x_rows = x_ptr + rows.to(tl.int64)[:, None] * stride_x
    y_rows = y_ptr + rows.to(tl.int64)[:, None] * stride_y
    cols = tl.arange(0, BLOCK_D)
    if ONE_PASS:
        ok = row_ok[:, None] & (cols < dim)[None, :]
        x = tl.load(x_rows + cols[None, :], mask=ok, other=0.0).to(tl.float32)
        scale = tl.math.rsqrt(tl.sum(x * x, axis=1) / dim + eps)
        w = tl.load(w_ptr + cols, mask=cols < dim, other=0.0).to(tl.float32)
        y = (x * scale[:, None]) * w[None, :]
        tl.store(y_rows + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=ok)
    else:
        squares = tl.zeros((BLOCK_R,), dtype=tl.float32)
        for d0 in range(0, dim, BLOCK_D):
            ok = row_ok[:, None] & (d0 + cols < dim)[None, :]
            x = tl.load(x_rows + (d0 + cols)[None, :], mask=ok, other=0.0).to(tl.float32)
            squares += tl.sum(x * x, axis=1)
        scale = tl.math.rsqrt(squares / dim + eps)
        for d0 in range(0, dim, BLOCK_D):
            ok = row_ok[:, None] & (d0 + cols < dim)[None, :]
            x = tl.load(x_rows + (d0 + cols)[None, :], mask=ok, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + d0 + cols, mask=d0 + cols < dim, other=0.0).to(tl.float32)
            y = (x * scale[:, None]) * w[None, :]
            tl.store(y_rows + (d0 + cols)[None, :], y.to(y_ptr.dtype.element_ty), mask=ok)


_launch = CachedLaunch(_rms_norm_kernel)


def _forward(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    device = check_launchable(x, weight)
    dim = x.shape[-1]
    rows = x.reshape(-1, dim)
    if dim > 1 and rows.stride(1) != 1:
        rows = rows.contiguous()
    weight = weight.contiguous()
    y = empty_output(tuple(x.shape), dtype=x.dtype, device=device)
    n_rows = rows.shape[0]
    if n_rows == 0 or dim == 0:
        return y
    block_d = min(next_pow2(dim, 16), MAX_BLOCK_D)
    # Rows per program: at most a tile, and few enough that a step's batch spreads over the SMs.
    block_r = max(1, min(_TILE // block_d, next_pow2(cdiv(n_rows, _PROGRAMS))))
    num_warps = 4 if block_r * block_d <= 2048 else 8
    args = (rows, weight, y, n_rows, dim, rows.stride(0), dim, float(eps))
    constexprs = {"BLOCK_R": block_r, "BLOCK_D": block_d, "ONE_PASS": dim <= block_d}
    _launch((cdiv(n_rows, block_r), 1), args, constexprs, num_warps)
    return y


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        ctx.save_for_backward(x, weight)
        ctx.eps = eps
        return _forward(x, weight, eps)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        with torch.enable_grad():
            # The torch twin under autograd, recomputed: the kernel stored nothing.
            xd = x.detach().requires_grad_(ctx.needs_input_grad[0])
            wd = weight.detach().requires_grad_(ctx.needs_input_grad[1])
            out = ref.rms_norm(xd, wd, eps=ctx.eps)
            wanted = [t for t, need in ((xd, ctx.needs_input_grad[0]), (wd, ctx.needs_input_grad[1])) if need]
            grads = iter(torch.autograd.grad(out, wanted, grad))
        gx = next(grads) if ctx.needs_input_grad[0] else None
        gw = next(grads) if ctx.needs_input_grad[1] else None
        return gx, gw, None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, *, eps: float) -> torch.Tensor:
    """Triton twin of :func:`nbxsig.reference.models.rms_norm`: ``x (..., D)`` of float16/bfloat16/
    float32, ``weight (D,)`` → ``(..., D)`` in ``x.dtype``; differentiable."""
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return _RMSNorm.apply(x, weight, eps)
    return _forward(x, weight, eps)
