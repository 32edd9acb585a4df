"""Test support: one tolerance table, one assertion helper and seeded random inputs.

Used by nbxsig's own suite and available to users who test against nbxsig.

Tolerances are scale-aware: an element passes when ``|out - ref| <= atol * peak + rtol * |ref|``
with ``peak = max |ref|``, i.e. ``atol`` is a fraction of the reference's peak magnitude. That is
how spectral and filter outputs are judged (an error of 1e-6 means something different next to a
peak of 1e3 than next to 1e-3), and it makes tolerances independent of the input's level.
"""

from __future__ import annotations

import hashlib
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ._validate import check_float, check_int
from .errors import bad_type, bad_value


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


def _as_tensor(name: str, value: Any) -> torch.Tensor:
    # numpy arrays are compared as the tensors they convert to (references often come from numpy).
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value)
    if not isinstance(value, torch.Tensor):
        raise bad_type(name, value, "a torch.Tensor or a numpy.ndarray")
    return value


def _check_tolerances(**tolerances: float | None) -> None:
    # A NaN bound makes every comparison False, so `diff > nan` flags nothing and anything passes.
    for name, value in tolerances.items():
        if value is not None:
            check_float(name, value, min_value=0.0)


@dataclass(frozen=True)
class _Comparison:
    a: torch.Tensor  # actual, real view, float64 on the CPU
    e: torch.Tensor  # expected, likewise
    bad: torch.Tensor  # elements outside the tolerance
    peak: float
    max_abs: float
    rel: float  # ‖out−ref‖/‖ref‖ over the finite reference; matching NaN/inf positions count as 0


def _compare(actual: torch.Tensor, expected: torch.Tensor, *, atol: float, rtol: float) -> _Comparison:
    a = _as_real(actual.detach()).to("cpu", torch.float64)
    e = _as_real(expected.detach()).to("cpu", torch.float64)
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
    diff = diff.nan_to_num(nan=float("inf"), posinf=float("inf"))
    max_abs = diff.max().item() if diff.numel() else 0.0
    ref_norm = finite_e.norm().item()
    rel = diff.norm().item() / ref_norm if ref_norm > 0 else max_abs
    return _Comparison(a, e, bad, peak, max_abs, rel)


def _mismatch(actual: torch.Tensor, expected: torch.Tensor) -> str | None:
    """Why two tensors cannot be compared element by element, or None."""
    if actual.is_complex() != expected.is_complex():
        # Said outright: comparing the real view of one with the other would pass (2,) complex
        # against (2, 2) real, and a "shape mismatch" between two (3,) shapes explains nothing.
        got, wanted = ("complex", "real") if actual.is_complex() else ("real", "complex")
        a_dtype, e_dtype = (str(x.dtype).removeprefix("torch.") for x in (actual, expected))
        return (
            f"{got} vs {wanted}: got {a_dtype} of shape {tuple(actual.shape)}, "
            f"expected {e_dtype} of shape {tuple(expected.shape)}"
        )
    if actual.shape != expected.shape:
        return f"shape mismatch: got {tuple(actual.shape)}, expected {tuple(expected.shape)}"
    return None


def error_report(
    actual: torch.Tensor | np.ndarray,
    expected: torch.Tensor | np.ndarray,
    *,
    atol: float,
    rtol: float,
    max_indices: int = 5,
) -> tuple[bool, str]:
    """Compare two tensors (or numpy arrays); return ``(ok, report)`` where the report gives max-abs
    error, relative error ``‖out−ref‖/‖ref‖``, the number of mismatches and the first bad indices.

    NaN in the output passes only where the reference has NaN at the same place. A complex tensor
    never matches a real one.

    Raises:
        ParameterTypeError / ParameterValueError: an input is neither a tensor nor a numpy array;
        ``atol`` or ``rtol`` is not a finite number >= 0.
    """
    actual, expected = _as_tensor("actual", actual), _as_tensor("expected", expected)
    _check_tolerances(atol=atol, rtol=rtol)
    mismatch = _mismatch(actual, expected)
    if mismatch is not None:
        return False, mismatch
    c = _compare(actual, expected, atol=atol, rtol=rtol)
    n_bad = int(c.bad.sum())
    lines = [
        f"max abs error {c.max_abs:.3e} (reference peak {c.peak:.3e}), relative error {c.rel:.3e}, "
        f"{n_bad} of {c.bad.numel()} elements outside atol={atol:g}·peak + rtol={rtol:g}·|ref|"
    ]
    if n_bad:
        for idx in c.bad.nonzero()[:max_indices].tolist():
            lines.append(
                f"  at {tuple(idx)}: got {c.a[tuple(idx)].item()!r}, expected {c.e[tuple(idx)].item()!r}"
            )
    return n_bad == 0, "\n".join(lines)


def assert_close(
    actual: torch.Tensor | np.ndarray,
    expected: torch.Tensor | np.ndarray,
    *,
    dtype: torch.dtype | str | None = None,
    atol: float | None = None,
    rtol: float | None = None,
    rel_error: float | None = None,
    msg: str = "",
) -> None:
    """Assert that ``actual`` matches ``expected`` within the table's tolerance for ``dtype``
    (default: ``actual``'s dtype), with ``atol``/``rtol`` overriding it. ``rel_error``, when given,
    additionally bounds ``‖out−ref‖/‖ref‖`` (positions where both hold the same NaN or inf count as
    equal, as in :func:`error_report`). The failure message carries :func:`error_report`.

    Raises:
        AssertionError: the tensors differ.
        ParameterTypeError: an input is neither a tensor nor a numpy array; the table has no entry
        for ``dtype`` (e.g. an integer dtype) and ``atol``/``rtol`` were not both given.
        ParameterValueError: ``atol``, ``rtol`` or ``rel_error`` is not a finite number >= 0.
    """
    actual, expected = _as_tensor("actual", actual), _as_tensor("expected", expected)
    _check_tolerances(atol=atol, rtol=rtol, rel_error=rel_error)
    if atol is None or rtol is None:
        key = dtype if dtype is not None else actual.dtype
        try:
            tol = tolerance(key)
        except KeyError:
            table = ", ".join(sorted(TOLERANCES))
            raise bad_type(
                "dtype",
                key,
                f"in the tolerance table ({table}, or their complex types) unless both atol= and rtol= "
                "are given (0 and 0 compare exactly)",
            ) from None
        atol = tol.atol if atol is None else atol
        rtol = tol.rtol if rtol is None else rtol
    ok, report = error_report(actual, expected, atol=atol, rtol=rtol)
    if ok and rel_error is not None:
        rel = _compare(actual, expected, atol=atol, rtol=rtol).rel
        if not rel <= rel_error:
            ok, report = False, report + f"\n  relative error {rel:.3e} exceeds {rel_error:g}"
    if not ok:
        raise AssertionError(f"{msg + ': ' if msg else ''}{report}")


def seed_from(text: str) -> int:
    """A stable 63-bit seed from a string (e.g. a test's node id): fresh per test, reproducible per run."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


def random_tensor(
    shape: int | Sequence[int],
    *,
    generator: torch.Generator,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    low: float | None = None,
    high: float | None = None,
) -> torch.Tensor:
    """Standard-normal (or, with both ``low`` and ``high``, uniform in ``[low, high)``) values of a
    floating or complex ``dtype``; never zeros. Drawn in float64 on the CPU from ``generator`` and
    then cast, so the same seed gives the same values on every device.

    Raises:
        ParameterTypeError: ``shape`` is not an int or a sequence of ints; ``dtype`` is not a
        floating or complex dtype (integer draws would be mostly zeros: cast a float draw instead).
        ParameterValueError: a negative size; only one of ``low``/``high``; not ``low < high``.
    """
    if isinstance(shape, numbers.Integral) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, Sequence):
        raise bad_type("shape", shape, "an int or a sequence of ints")
    shape = tuple(check_int(f"shape[{i}]", n, min_value=0) for i, n in enumerate(shape))
    if not isinstance(dtype, torch.dtype) or not (dtype.is_floating_point or dtype.is_complex):
        raise bad_type("dtype", dtype, "a floating or complex torch dtype")
    if (low is None) != (high is None):
        raise bad_value("low and high", (low, high), "both given (uniform) or both None (normal)")
    real = _REAL_OF.get(dtype, dtype)
    if low is not None and high is not None:
        low, high = check_float("low", low), check_float("high", high)
        if not low < high:
            raise bad_value("low and high", (low, high), "low < high")
        x = torch.rand(*shape, 2 if dtype.is_complex else 1, generator=generator, dtype=torch.float64)
        x = low + (high - low) * x
    else:
        x = torch.randn(*shape, 2 if dtype.is_complex else 1, generator=generator, dtype=torch.float64)
    x = torch.view_as_complex(x.contiguous()) if dtype.is_complex else x.squeeze(-1)
    return x.to(real if not dtype.is_complex else dtype).to(device)
