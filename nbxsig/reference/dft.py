"""DFT bases in plain torch, computed in float64 and rounded once to the requested dtype."""

from __future__ import annotations

import math

import torch


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The real dtype the references compute in: float64 for float64/complex128, else float32. 16-bit
    input is widened (float16's ``|X|²`` overflows from ``|X| = 256`` on; sums lose digits) and the
    result rounded once to the input's dtype, as the Triton kernels do."""
    return torch.float64 if dtype in (torch.float64, torch.complex128) else torch.float32


def _angles(n: int, n_rows: int, device: torch.device | str | None) -> torch.Tensor:
    # Reduce k*n modulo N in integers before forming the angle: the unreduced float angle at
    # N=2048 is off by ~4e-4 rad in float32, while the reduced one is exact to rounding.
    k = torch.arange(n_rows, dtype=torch.int64, device=device).unsqueeze(1)
    t = torch.arange(n, dtype=torch.int64, device=device).unsqueeze(0)
    return torch.remainder(k * t, n).to(torch.float64) * (2.0 * math.pi / n)


def rdft_basis(
    n: int,
    *,
    onesided: bool = True,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Forward DFT basis ``(2, F, n)``: ``[0] = cos(2πkt/n)``, ``[1] = -sin(2πkt/n)``,
    ``F = n//2 + 1`` when ``onesided`` else ``n``. ``X[k] = Σ_t x[t] (B[0,k,t] + i B[1,k,t])``."""
    rows = n // 2 + 1 if onesided else n
    angle = _angles(n, rows, device)
    return torch.stack((torch.cos(angle), -torch.sin(angle))).to(dtype)


def hermitian_weights(n: int, *, device: torch.device | str | None = None) -> torch.Tensor:
    """Weights of the one-sided bins in an inverse real DFT: 1 for DC and (even n) Nyquist, else 2."""
    w = torch.full((n // 2 + 1,), 2.0, dtype=torch.float64, device=device)
    w[0] = 1.0
    if n % 2 == 0:
        w[-1] = 1.0
    return w


def irdft_basis(
    n: int, *, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
) -> torch.Tensor:
    """Inverse real-DFT basis ``(2, n//2 + 1, n)``: ``[0] = w_k cos(2πkt/n)/n``,
    ``[1] = -w_k sin(2πkt/n)/n`` with Hermitian weights ``w``, so that
    ``x[t] = Σ_k Re X[k] B[0,k,t] + Im X[k] B[1,k,t]`` equals ``numpy.fft.irfft(X, n)``."""
    angle = _angles(n, n // 2 + 1, device)
    scale = (hermitian_weights(n, device=device) / n).unsqueeze(1)
    return torch.stack((scale * torch.cos(angle), -scale * torch.sin(angle))).to(dtype)
