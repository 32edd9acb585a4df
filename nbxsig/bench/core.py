"""The foundation's benchmark: building DFT bases, Triton vs the torch twin."""

from __future__ import annotations

import torch

from ..dft import irdft_basis, rdft_basis
from ._harness import Case


def cases(*, quick: bool = False) -> list[Case]:
    sizes = (400,) if quick else (20, 400, 2048)
    out = []
    for n in sizes:
        nbytes = 2 * (n // 2 + 1) * n * 4
        out.append(
            Case(
                name=f"rdft_basis n={n} fp32",
                run=lambda n=n: rdft_basis(n, device="cuda", backend="triton"),
                baseline=lambda n=n: rdft_basis(n, device="cuda", backend="torch"),
                bytes_moved=nbytes,
                check=lambda n=n: _rel(
                    rdft_basis(n, device="cuda", backend="triton"),
                    rdft_basis(n, dtype=torch.float64, device="cuda", backend="torch"),
                ),
            )
        )
        out.append(
            Case(
                name=f"irdft_basis n={n} fp32",
                run=lambda n=n: irdft_basis(n, device="cuda", backend="triton"),
                baseline=lambda n=n: irdft_basis(n, device="cuda", backend="torch"),
                bytes_moved=nbytes,
                check=lambda n=n: _rel(
                    irdft_basis(n, device="cuda", backend="triton"),
                    irdft_basis(n, dtype=torch.float64, device="cuda", backend="torch"),
                ),
            )
        )
    return out


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref).norm() / ref.norm()).item()
