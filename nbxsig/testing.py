"""Test support: one tolerance table, one assertion helper and seeded random inputs.

Used by nbxsig's own suite and available to users who test against nbxsig.

Tolerances are scale-aware: an element passes when ``|out - ref| <= atol * peak + rtol * |ref|``
with ``peak = max |ref|``, i.e. ``atol`` is a fraction of the reference's peak magnitude. That is
how spectral and filter outputs are judged (an error of 1e-6 means something different next to a
peak of 1e3 than next to 1e-3), and it makes tolerances independent of the input's level.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Tolerance:
    """``atol`` (fraction of the reference's peak) and ``rtol`` (fraction of each reference element)."""

    atol: float
    rtol: float


#: The one dtype → tolerance table. "tf32" is float32 input through single-pass TF32 tensor-core
#: dots (``torch.set_float32_matmul_precision("high")``).
TOLERANCES: dict[str, Tolerance] = {
    "float64": Tolerance(atol=1e-12, rtol=1e-10),
    "float32": Tolerance(atol=2e-6, rtol=1e-5),
    "tf32": Tolerance(atol=1e-3, rtol=1e-3),
    "float16": Tolerance(atol=2e-3, rtol=2e-3),
    "bfloat16": Tolerance(atol=1.6e-2, rtol=1.6e-2),
}

_REAL_OF = {torch.complex64: torch.float32, torch.complex128: torch.float64, torch.complex32: torch.float16}


def tolerance(dtype: torch.dtype | str) -> Tolerance:
    """The table's entry for ``dtype`` (complex dtypes use their real part's entry)."""
    if isinstance(dtype, torch.dtype):
        dtype = str(_REAL_OF.get(dtype, dtype)).replace("torch.", "")
    try:
        return TOLERANCES[dtype]
    except KeyError:
        raise KeyError(f"no tolerance for {dtype!r}; the table has {sorted(TOLERANCES)}") from None


def _as_real(x: torch.Tensor) -> torch.Tensor:
    return torch.view_as_real(x.resolve_conj()) if x.is_complex() else x


def error_report(
    actual: torch.Tensor, expected: torch.Tensor, *, atol: float, rtol: float, max_indices: int = 5
) -> tuple[bool, str]:
    """Compare two tensors; return ``(ok, report)`` where the report gives max-abs error, relative
    error ``‖out−ref‖/‖ref‖``, the number of mismatches and the first bad indices.

    NaN in the output passes only where the reference has NaN at the same place.
    """
    a = _as_real(actual.detach()).to("cpu", torch.float64)
    e = _as_real(expected.detach()).to("cpu", torch.float64)
    if a.shape != e.shape:
        return False, f"shape mismatch: got {tuple(actual.shape)}, expected {tuple(expected.shape)}"
    nan_e = torch.isnan(e)
    inf_e = torch.isinf(e)
    finite = ~(nan_e | inf_e)
    finite_e = e.masked_fill(~finite, 0.0)
    # The tolerance scales with the finite part of the reference: an infinite peak would accept anything.
    peak = finite_e.abs().max().item() if e.numel() else 0.0
    diff = (a - finite_e).abs()
    bad = finite & (diff > atol * peak + rtol * finite_e.abs())
    # An infinite reference value must be met exactly (sign included), a NaN by a NaN.
    inf_match = inf_e & (a == e)
    bad |= inf_e & ~inf_match
    bad |= torch.isnan(a) != nan_e
    bad &= ~(nan_e & torch.isnan(a))
    diff = torch.where(inf_e, torch.where(inf_match, 0.0, float("inf")), diff).masked_fill(nan_e, 0.0)
    max_abs = diff.nan_to_num(nan=float("inf"), posinf=float("inf")).max().item() if diff.numel() else 0.0
    ref_norm = finite_e.norm().item()
    rel = (
        (diff.nan_to_num(nan=float("inf"), posinf=float("inf")).norm().item() / ref_norm)
        if ref_norm > 0
        else max_abs
    )
    n_bad = int(bad.sum())
    lines = [
        f"max abs error {max_abs:.3e} (reference peak {peak:.3e}), relative error {rel:.3e}, "
        f"{n_bad} of {bad.numel()} elements outside atol={atol:g}·peak + rtol={rtol:g}·|ref|"
    ]
    if n_bad:
        for idx in bad.nonzero()[:max_indices].tolist():
            lines.append(
                f"  at {tuple(idx)}: got {a[tuple(idx)].item()!r}, expected {e[tuple(idx)].item()!r}"
            )
    return n_bad == 0, "\n".join(lines)


def assert_close(
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    dtype: torch.dtype | str | None = None,
    atol: float | None = None,
    rtol: float | None = None,
    rel_error: float | None = None,
    msg: str = "",
) -> None:
    """Assert that ``actual`` matches ``expected`` within the table's tolerance for ``dtype``
    (default: ``actual``'s dtype), with ``atol``/``rtol`` overriding it. ``rel_error``, when given,
    additionally bounds ``‖out−ref‖/‖ref‖``. The failure message carries :func:`error_report`."""
    tol = tolerance(dtype if dtype is not None else actual.dtype)
    atol = tol.atol if atol is None else atol
    rtol = tol.rtol if rtol is None else rtol
    ok, report = error_report(actual, expected, atol=atol, rtol=rtol)
    if ok and rel_error is not None:
        a, e = _as_real(actual.detach()).double().cpu(), _as_real(expected.detach()).double().cpu()
        rel = ((a - e).norm() / e.norm()).item() if e.norm() > 0 else (a - e).abs().max().item()
        if not rel <= rel_error:
            ok, report = False, report + f"\n  relative error {rel:.3e} exceeds {rel_error:g}"
    if not ok:
        raise AssertionError(f"{msg + ': ' if msg else ''}{report}")


def seed_from(text: str) -> int:
    """A stable 63-bit seed from a string (e.g. a test's node id): fresh per test, reproducible per run."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


def random_tensor(
    shape: tuple[int, ...],
    *,
    generator: torch.Generator,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    low: float | None = None,
    high: float | None = None,
) -> torch.Tensor:
    """Standard-normal (or uniform in ``[low, high)``) values; never zeros. Drawn in float64 on the
    CPU from ``generator`` and then cast, so the same seed gives the same values on every device."""
    real = _REAL_OF.get(dtype, dtype)
    if low is not None and high is not None:
        x = torch.rand(*shape, 2 if dtype.is_complex else 1, generator=generator, dtype=torch.float64)
        x = low + (high - low) * x
    else:
        x = torch.randn(*shape, 2 if dtype.is_complex else 1, generator=generator, dtype=torch.float64)
    x = torch.view_as_complex(x.contiguous()) if dtype.is_complex else x.squeeze(-1)
    return x.to(real if not dtype.is_complex else dtype).to(device)
