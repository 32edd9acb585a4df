"""The foundation's benchmark: building DFT bases, Triton vs the torch twin."""

from __future__ import annotations

import torch

from ..dft import irdft_basis, rdft_basis
from ._harness import Case


def cases(*, quick: bool = False) -> list[Case]:
    sizes = (400,) if quick else (20, 400, 2048)
    out = []
    for n in sizes:
        for build in (rdft_basis, irdft_basis):
            out.append(
                Case(
                    name=f"{build.__name__} n={n} fp32",
                    run=lambda n=n, b=build: b(n, device="cuda", backend="triton"),
                    baseline=lambda n=n, b=build: b(n, device="cuda", backend="torch"),
                    bytes_moved=2 * (n // 2 + 1) * n * 4,
                    check=lambda n=n, b=build: _rel(
                        b(n, device="cuda", backend="triton"),
                        b(n, dtype=torch.float64, device="cuda", backend="torch"),
                    ),
                )
            )
    return out


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref).norm() / ref.norm()).item()
