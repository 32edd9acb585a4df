"""DFT basis builders as Triton kernels (the twins of :mod:`nbxsig.reference.dft`).

Each program fills a ``BLOCK_K × BLOCK_T`` tile of both planes of the basis::

    r      = (k * t) mod n                      (int64: exact for any n)
    angle  = 2π r / n                           (float64)
    B[0]   = w_k cos(angle),  B[1] = -w_k sin(angle)

with ``w_k = 1`` for the forward basis and the Hermitian weights divided by ``n`` for the inverse.
The angle and the trigonometry run in float64 and are rounded once on the store, so every entry
is exact to the output dtype's rounding. Bases are built once per configuration and cached by
their callers, so the float64 cost does not matter.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ._runtime import cdiv, check_launchable, empty_output

_BLOCK_K = 16
_BLOCK_T = 64


@triton.jit
def _dft_basis_kernel(
    out_ptr,
    step_ptr,
    n,
    n_rows,
    plane_stride,
    INVERSE: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_T: tl.constexpr,
):
    k = tl.program_id(0) * BLOCK_K + tl.arange(0, BLOCK_K)
    t = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)
    mask = (k[:, None] < n_rows) & (t[None, :] < n)
    r = (k.to(tl.int64)[:, None] * t.to(tl.int64)[None, :]) % n
    # The step 2π/n arrives as a float64 in memory: a Python float argument or literal would be
    # rounded to float32 on the way into the kernel and cost ~1e-7 rad.
    angle = r.to(tl.float64) * tl.load(step_ptr)
    cos = tl.cos(angle)
    sin = tl.sin(angle)
    if INVERSE:
        # Hermitian weights: DC and (even n) Nyquist once, every other bin twice; then 1/n.
        is_single = (k == 0) | (2 * k == n)
        weight = tl.where(is_single, 1.0, 2.0).to(tl.float64) / n
        cos = cos * weight[:, None]
        sin = sin * weight[:, None]
    offs = k.to(tl.int64)[:, None] * n + t[None, :]
    tl.store(out_ptr + offs, cos.to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(out_ptr + plane_stride + offs, (-sin).to(out_ptr.dtype.element_ty), mask=mask)


def _launch(n: int, rows: int, *, inverse: bool, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    if dtype == torch.bfloat16:
        # Built in float64 and rounded once by torch: Triton 3.6's interpreter converts float64 to
        # bfloat16 wrongly (it handles only float32 <-> bfloat16 and stored garbage and NaN), and
        # rounding through float32 in the kernel would round twice. A basis is built once and cached.
        return _launch(n, rows, inverse=inverse, dtype=torch.float64, device=device).to(dtype)
    out = empty_output((2, rows, n), dtype=dtype, device=device)
    check_launchable(out)
    grid = (cdiv(rows, _BLOCK_K), cdiv(n, _BLOCK_T))
    step = torch.full((1,), 2.0 * math.pi / n, dtype=torch.float64, device=device)
    _dft_basis_kernel[grid](out, step, n, rows, rows * n, INVERSE=inverse, BLOCK_K=_BLOCK_K, BLOCK_T=_BLOCK_T)
    return out


def rdft_basis(
    n: int,
    *,
    onesided: bool = True,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Triton twin of :func:`nbxsig.reference.dft.rdft_basis`."""
    rows = n // 2 + 1 if onesided else n
    return _launch(
        n, rows, inverse=False, dtype=dtype, device=torch.device("cpu" if device is None else device)
    )


def irdft_basis(
    n: int, *, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
) -> torch.Tensor:
    """Triton twin of :func:`nbxsig.reference.dft.irdft_basis`."""
    return _launch(
        n, n // 2 + 1, inverse=True, dtype=dtype, device=torch.device("cpu" if device is None else device)
    )
