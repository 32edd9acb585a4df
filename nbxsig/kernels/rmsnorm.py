"""RMSNorm on the Triton backend (the twin of :func:`nbxsig.reference.models.rms_norm`): one launch.

Each program normalises ``BLOCK_R`` rows of a ``(rows, D)`` view::

    y[r, :] = x[r, :] · rsqrt(Σ x[r, :]² / D + eps) · w        (float32, stored in x's dtype)

in ``BLOCK_D`` column chunks: a first pass sums the squares, a second scales and stores, so any D
works; with ``D <= BLOCK_D`` the second pass reuses the loaded tile. torch's eager RMSNorm takes six
launches (cast, square, mean, add, rsqrt, two products and the cast back), each a round trip of the
activations through memory: in a streaming step these small launches, not their bytes, set the time.

Backward: :class:`_RMSNorm` recomputes the torch twin under autograd (the kernel saves nothing), so
second derivatives follow the torch twin's.

:func:`add_rms_norm` is a pre-norm block's residual step in the same launch: ``s = x + r`` rounded to
x's dtype (torch's add), stored, and normalised -- in a decode step it replaces the add launch
before each norm (no autograd).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..errors import bad_value
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
def _load_rows(x_rows, r_rows, s_rows, cols, ok, STORE_SUM: tl.constexpr, HAS_RESIDUAL: tl.constexpr):
    """A float32 tile of the rows to normalise: ``x``, or ``s = x + r`` rounded to x's dtype (as torch's
    add rounds it), stored to ``s`` when ``STORE_SUM``."""
    x = tl.load(x_rows + cols[None, :], mask=ok, other=0.0)
    if HAS_RESIDUAL:
        r = tl.load(r_rows + cols[None, :], mask=ok, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(x.dtype)
        if STORE_SUM:
            tl.store(s_rows + cols[None, :], x, mask=ok)
    return x.to(tl.float32)


@triton.jit
def _rms_norm_kernel(
    x_ptr,
    r_ptr,  # the residual added to x first (HAS_RESIDUAL), else unused
    s_ptr,  # where x + r goes (HAS_RESIDUAL), else unused
    w_ptr,
    y_ptr,
    n_rows,
    dim,
    stride_x,
    stride_r,
    stride_y,  # y and s: contiguous rows of dim
    eps,
    BLOCK_R: tl.constexpr,
    BLOCK_D: tl.constexpr,
    ONE_PASS: tl.constexpr,  # dim <= BLOCK_D: the tile loaded for the sum is the one scaled
    HAS_RESIDUAL: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_ok = rows < n_rows
    r64 = rows.to(tl.int64)[:, None]
    x_rows, r_rows = x_ptr + r64 * stride_x, r_ptr + r64 * stride_r
    s_rows, y_rows = s_ptr + r64 * stride_y, y_ptr + r64 * stride_y
    cols = tl.arange(0, BLOCK_D)
    if ONE_PASS:
        ok = row_ok[:, None] & (cols < dim)[None, :]
        x = _load_rows(x_rows, r_rows, s_rows, cols, ok, True, HAS_RESIDUAL)
        scale = tl.math.rsqrt(tl.sum(x * x, axis=1) / dim + eps)
        w = tl.load(w_ptr + cols, mask=cols < dim, other=0.0).to(tl.float32)
        y = (x * scale[:, None]) * w[None, :]
        tl.store(y_rows + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=ok)
    else:
        squares = tl.zeros((BLOCK_R,), dtype=tl.float32)
        for d0 in range(0, dim, BLOCK_D):
            ok = row_ok[:, None] & (d0 + cols < dim)[None, :]
            x = _load_rows(x_rows, r_rows, s_rows, d0 + cols, ok, True, HAS_RESIDUAL)
            squares += tl.sum(x * x, axis=1)
        scale = tl.math.rsqrt(squares / dim + eps)
        for d0 in range(0, dim, BLOCK_D):
            # The sum recomputed (the same bits) rather than read back from s.
            ok = row_ok[:, None] & (d0 + cols < dim)[None, :]
            x = _load_rows(x_rows, r_rows, s_rows, d0 + cols, ok, False, HAS_RESIDUAL)
            w = tl.load(w_ptr + d0 + cols, mask=d0 + cols < dim, other=0.0).to(tl.float32)
            y = (x * scale[:, None]) * w[None, :]
            tl.store(y_rows + (d0 + cols)[None, :], y.to(y_ptr.dtype.element_ty), mask=ok)


_launch = CachedLaunch(_rms_norm_kernel)


def _rows(t: torch.Tensor) -> torch.Tensor:
    """``t (..., D)`` as ``(rows, D)`` with unit column stride (a view where one exists)."""
    rows = t.reshape(-1, t.shape[-1])
    return rows if t.shape[-1] <= 1 or rows.stride(1) == 1 else rows.contiguous()


def _forward(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(rms_norm(x [+ residual]), x + residual or None)``."""
    device = check_launchable(x, weight) if residual is None else check_launchable(x, weight, residual)
    dim = x.shape[-1]
    rows = _rows(x)
    res_rows = rows if residual is None else _rows(residual)
    weight = weight.contiguous()
    y = empty_output(tuple(x.shape), dtype=x.dtype, device=device)
    total = None if residual is None else empty_output(tuple(x.shape), dtype=x.dtype, device=device)
    n_rows = rows.shape[0]
    if n_rows == 0 or dim == 0:
        return y, total
    block_d = min(next_pow2(dim, 16), MAX_BLOCK_D)
    # Rows per program: at most a tile, and few enough that a step's batch spreads over the SMs.
    block_r = max(1, min(_TILE // block_d, next_pow2(cdiv(n_rows, _PROGRAMS))))
    num_warps = 4 if block_r * block_d <= 2048 else 8
    args = (rows, res_rows, y if total is None else total, weight, y, n_rows, dim, rows.stride(0),
            res_rows.stride(0), dim, float(eps))  # fmt: skip
    constexprs = {
        "BLOCK_R": block_r, "BLOCK_D": block_d, "ONE_PASS": dim <= block_d,
        "HAS_RESIDUAL": residual is not None,
    }  # fmt: skip
    _launch((cdiv(n_rows, block_r), 1), args, constexprs, num_warps)
    return y, total


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        ctx.save_for_backward(x, weight)
        ctx.eps = eps
        return _forward(x, weight, eps)[0]

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        needs = ctx.needs_input_grad[:2]
        # The torch twin under autograd, recomputed: the kernel stored nothing. Under
        # create_graph=True on the saved inputs themselves, so the gradients keep their dependence on
        # x and weight (second derivatives, as the torch backend's); otherwise on detached copies.
        higher = torch.is_grad_enabled()
        with torch.enable_grad():
            inputs = [
                t if higher else t.detach().requires_grad_(need)
                for t, need in zip((x, weight), needs, strict=True)
            ]
            out = ref.rms_norm(*inputs, eps=ctx.eps)
            wanted = [t for t, need in zip(inputs, needs, strict=True) if need]
            grads = iter(torch.autograd.grad(out, wanted, grad, create_graph=higher))
        gx, gw = (next(grads) if need else None for need in needs)
        return gx, gw, None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, *, eps: float) -> torch.Tensor:
    """Triton twin of :func:`nbxsig.reference.models.rms_norm`: ``x (..., D)`` of float16/bfloat16/
    float32, ``weight (D,)`` → ``(..., D)`` in ``x.dtype``; differentiable."""
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return _RMSNorm.apply(x, weight, eps)
    return _forward(x, weight, eps)[0]


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, *, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton twin of :func:`nbxsig.reference.models.add_rms_norm` (no autograd: a decode step), one
    launch: ``(x + residual, rms_norm(x + residual))``, the sum rounded to x's dtype before the norm.
    ``residual`` has x's shape and dtype (no broadcasting, no promotion)."""
    if residual.shape != x.shape or residual.dtype != x.dtype:
        raise bad_value("residual", residual, f"a {x.dtype} tensor of x's shape {tuple(x.shape)}")
    y, total = _forward(x, weight, eps, residual)
    return total, y
