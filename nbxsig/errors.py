"""Exceptions raised for bad input.

Every error names the parameter, the value received and what is allowed, and subclasses the
built-in exception a caller would catch (ValueError or TypeError), so ``except ValueError`` works.
"""

from __future__ import annotations

from typing import Any


class NbxsigError(Exception):
    """Base class of every exception nbxsig raises on purpose."""


class ParameterValueError(NbxsigError, ValueError):
    """A parameter has the right type but a value that is not allowed."""


class ParameterTypeError(NbxsigError, TypeError):
    """A parameter has a type (or tensor dtype) that is not allowed."""


class BackendUnavailableError(ParameterValueError):
    """The requested backend cannot run this call (e.g. ``backend="triton"`` on a CPU tensor
    without Triton's interpreter)."""


def describe(value: Any) -> str:
    """A short, readable rendering of ``value`` for error messages: arrays by kind, shape and dtype
    ("a tensor" for torch, else the type's name, e.g. "a numpy.ndarray": a message that called a
    numpy array a tensor would hide why it was refused), led by the value for a numpy scalar or 0-d
    array ("inf (a numpy.float64 of shape () ...)"), which is one number however it was passed."""
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        device = getattr(value, "device", None)
        where = f" on {device}" if device is not None else ""
        kind = type(value)
        package = kind.__module__.partition(".")[0]
        name = "tensor" if package == "torch" else f"{package}.{kind.__qualname__}"
        text = f"a {name} of shape {tuple(shape)} and dtype {dtype}{where}"
        # Tensors keep the description alone: reading a value may need a device sync, or be impossible
        # (meta and fake tensors have none).
        if package == "numpy" and tuple(shape) == ():
            return f"{value.item()!r} ({text})"
        return text
    return repr(value)


def bad_value(name: str, value: Any, allowed: str, *, context: str = "") -> ParameterValueError:
    """Build ``ParameterValueError("{name} must be {allowed}{context}, got {value}")``."""
    suffix = f" {context}" if context else ""
    return ParameterValueError(f"{name} must be {allowed}{suffix}, got {describe(value)}")


def bad_type(name: str, value: Any, allowed: str, *, context: str = "") -> ParameterTypeError:
    """Build ``ParameterTypeError("{name} must be {allowed}{context}, got {value}")``."""
    suffix = f" {context}" if context else ""
    return ParameterTypeError(f"{name} must be {allowed}{suffix}, got {describe(value)}")
