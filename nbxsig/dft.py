"""DFT basis matrices for any length: the building blocks of nbxsig's spectral kernels.

Example:
    >>> import torch, nbxsig.dft
    >>> basis = nbxsig.dft.rdft_basis(20)                  # (2, 11, 20)
    >>> x = torch.randn(20)
    >>> spec = torch.complex(basis[0] @ x, basis[1] @ x)   # == torch.fft.rfft(x)
"""

from __future__ import annotations

import torch

from ._dispatch import Backend, Op
from ._validate import check_bool, check_device, check_int
from .errors import ParameterTypeError, bad_type

_BASIS_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_RDFT_BASIS = Op(
    "rdft_basis",
    torch_impl="nbxsig.reference.dft:rdft_basis",
    triton_impl="nbxsig.kernels.dft_basis:rdft_basis",
    triton_dtypes=_BASIS_DTYPES,
)
_IRDFT_BASIS = Op(
    "irdft_basis",
    torch_impl="nbxsig.reference.dft:irdft_basis",
    triton_impl="nbxsig.kernels.dft_basis:irdft_basis",
    triton_dtypes=_BASIS_DTYPES,
)


def _check(n: int, dtype: torch.dtype, device: torch.device | str | None) -> tuple[int, torch.device]:
    n = check_int("n", n, min_value=1)
    allowed = "one of torch.float16, torch.bfloat16, torch.float32, torch.float64"
    if not isinstance(dtype, torch.dtype):
        # Rendered by repr here: describe() takes a numpy scalar type (np.float32), whose class has
        # `shape` and `dtype` attributes, for an array and fails on it.
        raise ParameterTypeError(f"dtype must be {allowed}, got {dtype!r}")
    if dtype not in _BASIS_DTYPES:
        raise bad_type("dtype", dtype, allowed)
    return n, check_device(device)


def rdft_basis(
    n: int,
    *,
    onesided: bool = True,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
    backend: Backend | None = None,
) -> torch.Tensor:
    """Forward DFT basis of length ``n``.

    Args:
        n: transform length, any integer >= 1.
        onesided: rows for bins ``0..n//2`` (real input) when True, all ``n`` bins when False.
        dtype: output dtype; entries are exact to its rounding.
        device: where to build it (default CPU).
        backend: None (auto), "triton" or "torch".

    Returns:
        Tensor ``(2, F, n)`` with ``F = n//2 + 1`` (onesided) or ``n``:
        ``[0, k, t] = cos(2πkt/n)`` and ``[1, k, t] = -sin(2πkt/n)``, so that
        ``X[k] = Σ_t x[t] (B[0,k,t] + i B[1,k,t])``.

    Raises:
        ParameterTypeError / ParameterValueError: ``n`` is not an integer >= 1, ``onesided`` is not a
        bool, ``dtype`` is not a torch floating dtype or ``device`` does not name a device.
    """
    n, device = _check(n, dtype, device)
    onesided = check_bool("onesided", onesided)
    chosen = _RDFT_BASIS.backend(backend, device=device, dtype=dtype, numel=n)
    return _RDFT_BASIS(n, onesided=onesided, dtype=dtype, device=device, backend=chosen)


def irdft_basis(
    n: int,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
    backend: Backend | None = None,
) -> torch.Tensor:
    """Inverse real-DFT basis of length ``n``, Hermitian weights and ``1/n`` folded in.

    Returns:
        Tensor ``(2, n//2 + 1, n)``: ``[0, k, t] = w_k cos(2πkt/n)/n`` and ``[1, k, t] = -w_k sin(2πkt/n)/n``
        with ``w_k = 1`` for DC and (even ``n``) Nyquist, else 2, so that
        ``x[t] = Σ_k Re X[k] B[0,k,t] + Im X[k] B[1,k,t]`` equals ``numpy.fft.irfft(X, n)``.

    Other arguments as :func:`rdft_basis`.
    """
    n, device = _check(n, dtype, device)
    chosen = _IRDFT_BASIS.backend(backend, device=device, dtype=dtype, numel=n)
    return _IRDFT_BASIS(n, dtype=dtype, device=device, backend=chosen)
