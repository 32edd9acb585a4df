"""A small vocabulary of argument checks shared by every public op.

Each check returns the (normalised) value or raises a ParameterValueError/ParameterTypeError
whose message names the parameter, the value and what is allowed.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from typing import Any

import torch

from .errors import bad_type, bad_value

FLOATING_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
COMPLEX_DTYPES = (torch.complex64, torch.complex128)


def check_int(
    name: str, value: Any, *, min_value: int | None = None, max_value: int | None = None, context: str = ""
) -> int:
    """An integer (bool excluded) in ``[min_value, max_value]``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise bad_type(name, value, "an integer", context=context)
    value = int(value)
    if (min_value is not None and value < min_value) or (max_value is not None and value > max_value):
        if min_value is not None and max_value is not None:
            allowed = f"in {min_value}..{max_value}"
        elif min_value is not None:
            allowed = f">= {min_value}"
        else:
            allowed = f"<= {max_value}"
        raise bad_value(name, value, allowed, context=context)
    return value


def check_float(
    name: str,
    value: Any,
    *,
    min_value: float | None = None,
    max_value: float | None = None,
    min_inclusive: bool = True,
    context: str = "",
) -> float:
    """A finite real number in the given range."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise bad_type(name, value, "a real number", context=context)
    value = float(value)
    low_ok = min_value is None or (value >= min_value if min_inclusive else value > min_value)
    high_ok = max_value is None or value <= max_value
    if value != value or value in (float("inf"), float("-inf")) or not (low_ok and high_ok):
        parts = ["a finite number"]
        if min_value is not None:
            parts.append(f"{'>=' if min_inclusive else '>'} {min_value}")
        if max_value is not None:
            parts.append(f"<= {max_value}")
        raise bad_value(name, value, " ".join(parts), context=context)
    return value


def check_bool(name: str, value: object) -> bool:
    """A bool: 0/1 are refused, as torch.stft's flags refuse them."""
    if not isinstance(value, bool):
        raise bad_type(name, value, "a bool")
    return value


def check_choice(name: str, value: Any, choices: Iterable[Any]) -> Any:
    """One of a fixed set of values."""
    choices = tuple(choices)
    if value not in choices:
        raise bad_value(name, value, "one of " + ", ".join(repr(c) for c in choices))
    return value


def check_tensor(
    name: str,
    value: Any,
    *,
    dtypes: Iterable[torch.dtype] | None = None,
    min_dim: int = 0,
    max_dim: int | None = None,
    allow_empty: bool = False,
) -> torch.Tensor:
    """A tensor of an allowed dtype and rank; empty tensors are refused unless ``allow_empty``."""
    if not isinstance(value, torch.Tensor):
        raise bad_type(name, value, "a torch.Tensor")
    if dtypes is not None:
        dtypes = tuple(dtypes)
        if value.dtype not in dtypes:
            allowed = "of dtype " + ", ".join(str(d).replace("torch.", "") for d in dtypes)
            raise bad_type(name, value, f"a tensor {allowed}")
    if value.dim() < min_dim or (max_dim is not None and value.dim() > max_dim):
        rank = f"at least {min_dim}" if max_dim is None else f"{min_dim}..{max_dim}"
        raise bad_value(name, value, f"a tensor with {rank} dimensions")
    if not allow_empty and value.numel() == 0:
        raise bad_value(name, value, "a non-empty tensor")
    return value


def check_device(device: torch.device | str | int | None) -> torch.device:
    """A ``device=`` argument as a ``torch.device`` (None is the CPU; an int is a CUDA ordinal, as
    torch reads it); anything torch cannot parse is a ParameterValueError naming it."""
    if device is None:
        return torch.device("cpu")
    if isinstance(device, torch.device):
        return device
    try:
        return torch.device(device)
    except (RuntimeError, TypeError):
        raise bad_value(
            "device", device, "a torch.device or a device string such as 'cpu' or 'cuda:0'"
        ) from None


def check_istft_output(
    name: str, value: Any, *, n_fft: int, hop: int, n_frames: int, center: bool, length: int | None
) -> None:
    """Refuse an inverse STFT input that leaves no sample: one frame of an even ``n_fft``, centred, without
    ``length`` (the ``n_fft // 2`` samples trimmed at each end are all there is). torch.istft fails there
    with an internal error on its empty envelope; ``length`` pads the output, as in torch."""
    if length is None and center and n_fft + hop * (n_frames - 1) <= 2 * (n_fft // 2):
        raise bad_value(
            name,
            value,
            f"a spectrum of more than one frame for an even n_fft={n_fft} with center=True (the "
            "n_fft // 2 samples trimmed at each end leave none), or length given",
        )
