"""Filter design in float64: FIR windows (``firwin`` = ``scipy.signal.firwin``), band taps in Hz,
gammatone banks, ERB spacing, Gabor kernels and the small image kernels (Gaussian, Sobel, Scharr,
Laplacian, box) with kornia's conventions.

Everything here is computed in float64 on the CPU and returned as a torch tensor (float64 unless
``dtype`` says otherwise, on ``device``), except :func:`get_window`, which returns the numpy array. scipy is
a test-only dependency: the formulas are written out here and the tests check them against scipy to ~1e-15.

Autograd: the designs whose taps are closed-form expressions of a parameter are written in torch and
differentiable with respect to it when it is given as a tensor that requires grad -- the cutoffs of
:func:`firwin` and the ``*_taps`` helpers, ``center_freqs`` of :func:`gammatone_bank`, ``sigma`` of the
Gaussian kernels, and every real parameter of :func:`gabor_kernels`. Parameters that are constants of the
design (sampling rates, transition widths, window parameters, :func:`erb_space`'s limits) refuse a tensor
that requires grad with a ParameterValueError rather than cut it from the graph.

Example:
    >>> import nbxsig.filters as nf
    >>> taps = nf.lowpass_taps(4000.0, fs=16000.0, numtaps=129)   # (129,), float64
    >>> bank = nf.gammatone_bank(nf.erb_space(100.0, 7000.0, 32), fs=16000.0, numtaps=256)
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ._validate import FLOATING_DTYPES, check_choice, check_device, check_float, check_int
from .errors import ParameterTypeError, bad_type, bad_value

__all__ = [
    "bandpass_taps",
    "bandstop_taps",
    "box_kernel",
    "erb_space",
    "firwin",
    "gabor_kernels",
    "gammatone_bank",
    "gaussian_kernel1d",
    "gaussian_kernel2d",
    "get_window",
    "highpass_taps",
    "laplacian_kernel",
    "lowpass_taps",
    "scharr_kernels",
    "sobel_kernels",
]

# Glasberg & Moore's ERB(f) = f / EAR_Q + MIN_BW, the constants scipy.signal.gammatone uses.
EAR_Q = 9.26449
MIN_BW = 24.7

# Symmetric generalized-cosine windows: w[n] = Σ_k a_k cos(k·φ_n), φ evenly spaced on [-π, π].
_COSINE_WINDOWS = {
    "hamming": (0.54, 0.46),
    "hann": (0.5, 0.5),
    "hanning": (0.5, 0.5),
    "blackman": (0.42, 0.50, 0.08),
    "blackmanharris": (0.35875, 0.48829, 0.14128, 0.01168),
    "nuttall": (0.3635819, 0.4891775, 0.1365995, 0.0106411),
}
WINDOWS = (*_COSINE_WINDOWS, "boxcar", "rectangular", "bartlett", "triang", "kaiser", "gaussian")


def _result_form(dtype: Any, device: Any) -> tuple[torch.dtype, torch.device]:
    """The ``dtype`` and ``device`` of a design's result, checked: a floating torch dtype (an integer dtype
    truncated the taps to zeros, silently) and a device torch can parse (else torch's own TypeError or
    RuntimeError came from the final ``.to()``)."""
    if not isinstance(dtype, torch.dtype) or dtype not in FLOATING_DTYPES:
        # Rendered by repr: describe() takes a numpy scalar type (np.float32) for an array and fails on it.
        raise ParameterTypeError(
            "dtype must be a floating torch dtype (torch.float16, torch.bfloat16, torch.float32 or "
            f"torch.float64), got {dtype!r}"
        )
    return dtype, check_device(device)


def _to_torch(a: np.ndarray, dtype: torch.dtype, device: torch.device | str | None) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64)).to(device=device, dtype=dtype)


def _detached(value: Any) -> Any:
    """``value`` with its tensors (itself, or the items of a list/tuple) detached and on the CPU: what is
    validated and read as numbers. numpy cannot read a tensor that requires grad (a RuntimeError)."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, (list, tuple)):
        return [v.detach().cpu() if isinstance(v, torch.Tensor) else v for v in value]
    return value


def _requires_grad(value: Any) -> bool:
    """Whether ``value`` is, or (a list/tuple) holds, a tensor that requires grad."""
    if isinstance(value, torch.Tensor):
        return value.requires_grad
    return isinstance(value, (list, tuple)) and any(
        isinstance(v, torch.Tensor) and v.requires_grad for v in value
    )


def _grad_tensor(value: Any) -> torch.Tensor:
    """``value`` (checked by :func:`_real_array`) as a float64 CPU tensor that keeps its autograd graph."""
    if isinstance(value, torch.Tensor):
        return value.to("cpu", torch.float64)
    if isinstance(value, (list, tuple)):
        return torch.stack([_grad_tensor(v) for v in value])
    return torch.tensor(float(value), dtype=torch.float64)


def _param_array(name: str, value: Any, allowed: str) -> torch.Tensor:
    """A parameter array (a number, a sequence of numbers and/or tensors, or a tensor) as a float64 CPU
    tensor, checked as :func:`_real_array` checks it; differentiable when it holds a tensor that requires
    grad (the design is then written in torch and carries the gradient)."""
    a = _real_array(name, _detached(value), allowed)
    if not _requires_grad(value):
        return torch.from_numpy(a)
    return _grad_tensor(value).reshape(a.shape)


def _param_scalar(name: str, value: Any, **limits: Any) -> torch.Tensor:
    """A differentiable real parameter: a number or a one-element real tensor (gradients flow when it
    requires grad), checked by ``check_float(name, value, **limits)``, as a 0-d float64 CPU tensor."""
    if isinstance(value, torch.Tensor):
        if value.is_complex() or value.dtype == torch.bool:
            raise bad_type(name, value, "a real number or a one-element real tensor")
        if value.numel() != 1:
            raise bad_value(name, value, "a real number or a one-element real tensor")
        check_float(name, value.detach().cpu().double().item(), **limits)
        return value.to("cpu", torch.float64).reshape(())
    return torch.tensor(check_float(name, value, **limits), dtype=torch.float64)


def _constant(name: str, value: Any, why: str, **limits: Any) -> float:
    """A real parameter the design cannot differentiate: ``check_float(name, value, **limits)``, with a
    tensor that requires grad refused by name (as :func:`nbxsig.filters.gaussian_blur2d` refuses such a
    sigma) rather than read as a number and cut from the graph."""
    if isinstance(value, torch.Tensor) and value.requires_grad:
        raise bad_value(
            name,
            value,
            "a real number, not a tensor that requires grad",
            context=f"({why}, so no gradient could reach it; pass a float for a fixed value)",
        )
    return check_float(name, value, **limits)


def _real_array(name: str, value: Any, allowed: str) -> np.ndarray:
    """``value`` (a number, a sequence of numbers or a tensor) as a float64 array. Strings are refused rather
    than parsed (``np.asarray(["1.5"], dtype=float)`` would read them), and a ragged or non-numeric sequence
    fails here with ``name`` instead of inside numpy. Complex and bool values are refused in every form: a
    tensor's dtype is checked before ``.double()``, which would drop an imaginary part with only a warning."""
    if isinstance(value, torch.Tensor):
        if value.is_complex() or value.dtype == torch.bool:
            raise bad_type(name, value, allowed)
        value = value.detach().cpu().double().numpy()
    try:
        a = np.asarray(value)
    except (TypeError, ValueError):
        raise bad_type(name, value, allowed) from None
    if a.dtype == object and all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in a.flat):
        # numpy keeps Fractions (and Python ints beyond int64) as objects: they are real numbers all the same.
        try:
            a = a.astype(np.float64)
        except OverflowError:
            raise bad_value(name, value, allowed, context="(a value overflows float64)") from None
    if a.dtype.kind not in "iuf":
        raise bad_type(name, value, allowed)
    return a.astype(np.float64)


def get_window(window: str | tuple[str, float], numtaps: int) -> np.ndarray:
    """Symmetric window of length ``numtaps`` (``scipy.signal.get_window(window, numtaps, fftbins=False)``).

    Args:
        window: a name from ``WINDOWS`` ("kaiser" and "gaussian" need a parameter: ``("kaiser", beta)``,
            ``("gaussian", std)``).
        numtaps: window length >= 1.

    Returns:
        float64 numpy array ``(numtaps,)``.

    Raises:
        ParameterValueError / ParameterTypeError: unknown window, missing parameter (or a tensor that
        requires grad: the window is numpy), a parameter for a window that takes none, a gaussian
        std <= 0, bad length.
    """
    m = check_int("numtaps", numtaps, min_value=1)
    param: float | None = None
    if isinstance(window, tuple):
        if len(window) != 2 or not isinstance(window[0], str):
            raise bad_value("window", window, "a name or a (name, parameter) tuple such as ('kaiser', 8.6)")
        name = window[0]
        param = _constant("window parameter", window[1], "the window is computed with numpy")
    elif isinstance(window, str):
        name = window
    else:
        raise bad_type("window", window, "a window name or a (name, parameter) tuple")
    name = check_choice("window", name.lower(), WINDOWS)
    if name in ("kaiser", "gaussian") and param is None:
        raise bad_value("window", window, f"a tuple ({name!r}, parameter): {name} needs its parameter")
    if name not in ("kaiser", "gaussian") and param is not None:
        # scipy refuses it too: the parameter would be ignored, whatever the caller meant by it.
        raise bad_value("window", window, f"the name {name!r} alone: {name} takes no parameter")
    if name == "gaussian" and param <= 0:
        # exp(-n² / 2σ²) at σ = 0 is 0/0 = NaN at the centre (scipy returns it, with a warning).
        raise bad_value("window parameter", param, "> 0 for 'gaussian' (its standard deviation in samples)")
    if m == 1:
        return np.ones(1)
    n = np.arange(m, dtype=np.float64)
    if name in _COSINE_WINDOWS:
        phi = np.linspace(-np.pi, np.pi, m)
        return sum(a * np.cos(k * phi) for k, a in enumerate(_COSINE_WINDOWS[name]))
    if name in ("boxcar", "rectangular"):
        return np.ones(m)
    if name == "bartlett":
        return np.where(n <= (m - 1) / 2.0, 2.0 * n / (m - 1), 2.0 - 2.0 * n / (m - 1))
    if name == "triang":
        k = np.arange(1, (m + 1) // 2 + 1, dtype=np.float64)
        if m % 2 == 0:
            w = (2 * k - 1.0) / m
            return np.concatenate([w, w[::-1]])
        w = 2 * k / (m + 1.0)
        return np.concatenate([w, w[-2::-1]])
    if name == "kaiser":
        alpha = (m - 1) / 2.0
        return np.i0(param * np.sqrt(1 - ((n - alpha) / alpha) ** 2.0)) / np.i0(param)
    # gaussian
    n = n - (m - 1.0) / 2.0
    return np.exp(-(n**2) / (2 * param * param))


# Why a sampling rate refuses a tensor that requires grad.
_FIXED_FS = "the sampling rate is a constant of the design: the taps are differentiable in the cutoffs only"


def _kaiser_beta(atten_db: float) -> float:
    if atten_db > 50:
        return 0.1102 * (atten_db - 8.7)
    if atten_db > 21:
        return 0.5842 * (atten_db - 21) ** 0.4 + 0.07886 * (atten_db - 21)
    return 0.0


def firwin(
    numtaps: int,
    cutoff: float | Sequence[float] | torch.Tensor,
    *,
    width: float | None = None,
    window: str | tuple[str, float] = "hamming",
    pass_zero: bool | str = True,
    scale: bool = True,
    fs: float | None = 2.0,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Windowed-sinc FIR design, equal to ``scipy.signal.firwin`` (to ~1e-16).

    Args:
        numtaps: filter length >= 1 (odd when the response must pass Nyquist).
        cutoff: band edge(s) in the units of ``fs``, strictly increasing, in ``(0, fs/2)``: a number, a
            sequence (of numbers and/or one-element tensors) or a tensor. The taps are differentiable with
            respect to the edges given as tensors that require grad.
        width: transition width (units of ``fs``); when given, a Kaiser window with the matching
            attenuation replaces ``window``.
        window: see :func:`get_window`. Default "hamming".
        pass_zero: True/"lowpass"/"bandstop" (DC in the passband) or False/"highpass"/"bandpass".
        scale: normalise the gain to 1 at DC, Nyquist or the first passband's centre.
        fs: sampling rate. Default 2.0 (cutoffs as fractions of Nyquist); None is 2.0, as in scipy. A
            number: ``fs`` and ``width`` refuse a tensor that requires grad.
        dtype, device: of the returned taps (computed in float64).

    Returns:
        Tensor ``(numtaps,)``.

    Raises:
        ParameterValueError / ParameterTypeError: bad lengths, cutoffs outside ``(0, fs/2)``, an even
        ``numtaps`` with a passband at Nyquist, unknown window or ``pass_zero``, an ``fs`` or ``width`` that
        is a tensor requiring grad.

    Example:
        >>> h = firwin(31, 0.3)                       # lowpass at 0.3 × Nyquist
        >>> h = firwin(101, [500.0, 2000.0], pass_zero=False, fs=16000.0)
    """
    numtaps = check_int("numtaps", numtaps, min_value=1)
    dtype, device = _result_form(dtype, device)
    # scipy's default is fs=None, meaning 2 (cutoffs relative to Nyquist): code that forwards an optional
    # sampling rate passes None, which was refused here.
    fs = _constant("fs", 2.0 if fs is None else fs, _FIXED_FS, min_value=0.0, min_inclusive=False)
    nyq = 0.5 * fs
    edges = _param_array("cutoff", cutoff, "a frequency or a 1-D sequence of frequencies")
    edges = edges.reshape(1) if edges.dim() == 0 else edges
    if edges.dim() != 1 or edges.numel() == 0:
        raise bad_value("cutoff", cutoff, "one frequency or a 1-D sequence of frequencies")
    values = edges.detach()
    if not bool(values.isfinite().all()) or values.min() <= 0 or values.max() >= nyq:
        raise bad_value("cutoff", cutoff, f"frequencies in (0, fs/2) = (0, {nyq:g})")
    if bool((values.diff() <= 0).any()):
        raise bad_value("cutoff", cutoff, "strictly increasing frequencies")
    edges = edges / nyq
    if width is not None:
        width = _constant(
            "width", width, "it sets the Kaiser window's beta", min_value=0.0, min_inclusive=False
        )
        atten = 2.285 * (numtaps - 1) * np.pi * (width / nyq) + 7.95
        window = ("kaiser", _kaiser_beta(atten))
    modes = {"lowpass": (True, 1), "bandstop": (True, 2), "highpass": (False, 1), "bandpass": (False, 2)}
    if isinstance(pass_zero, str):
        if pass_zero not in modes:
            raise bad_value(
                "pass_zero", pass_zero, "True, False, 'lowpass', 'highpass', 'bandpass' or 'bandstop'"
            )
        dc, need = modes[pass_zero]
        if (need == 1 and edges.numel() != 1) or (need == 2 and edges.numel() < 2):
            wanted = "exactly one cutoff" if need == 1 else "at least two cutoffs"
            raise bad_value("cutoff", cutoff, wanted, context=f"for pass_zero={pass_zero!r}")
        pass_zero = dc
    elif not isinstance(pass_zero, bool):
        raise bad_value(
            "pass_zero", pass_zero, "True, False, 'lowpass', 'highpass', 'bandpass' or 'bandstop'"
        )
    pass_nyquist = (edges.numel() % 2 == 0) == pass_zero
    if pass_nyquist and numtaps % 2 == 0:
        raise bad_value(
            "numtaps", numtaps, "odd", context="(an even-length filter has zero response at Nyquist)"
        )
    f64 = torch.float64
    edges = torch.cat(
        [torch.zeros(int(pass_zero), dtype=f64), edges, torch.ones(int(pass_nyquist), dtype=f64)]
    )
    bands = edges.reshape(-1, 2)
    m = torch.arange(numtaps, dtype=f64) - 0.5 * (numtaps - 1)
    h = torch.zeros(numtaps, dtype=f64)
    for left, right in bands:
        h = h + right * torch.sinc(right * m)
        h = h - left * torch.sinc(left * m)
    h = h * torch.from_numpy(get_window(window, numtaps))
    if scale:
        left, right = bands[0]
        f = 0.0 if left == 0 else (1.0 if right == 1 else 0.5 * (left + right))
        h = h / torch.sum(h * torch.cos(math.pi * m * f))
    return h.to(device=device, dtype=dtype)


def _band_edge(name: str, value: Any) -> tuple[Any, float]:
    """A band edge of the ``*_taps`` helpers, ``(edge, its value)``: one frequency (a number, or a
    one-element sequence, array or tensor, kept as a 0-d tensor for its gradient). Several are refused by
    name: firwin reads a sequence as several edges, so ``lowpass_taps([f1, f2])`` designed a bandstop
    filter and ``highpass_taps([f1, f2])`` a bandpass one."""
    allowed = "one frequency in Hz (a number or a one-element tensor)"
    a = _real_array(name, _detached(value), allowed)
    if a.size != 1:
        raise bad_value(name, value, allowed)
    edge = value
    while isinstance(edge, (list, tuple)):
        edge = edge[0]
    if isinstance(edge, torch.Tensor):
        edge = edge.reshape(())
    elif isinstance(edge, np.ndarray):
        edge = edge.reshape(()).item()
    return edge, float(a.reshape(()))


def _band_taps(
    edges: dict[str, Any],
    fs: float,
    numtaps: int,
    window: str | tuple[str, float],
    width_hz: float | None,
    dtype: torch.dtype,
    device: torch.device | str | None,
    *,
    pass_zero: str,
) -> torch.Tensor:
    """The ``*_taps`` helpers' shared body: check ``fs``, ``numtaps`` and the named band ``edges`` (one
    frequency each, increasing), then design with :func:`firwin` for ``pass_zero`` ("lowpass", ...)."""
    fs = _constant("fs", fs, _FIXED_FS, min_value=0.0, min_inclusive=False)
    numtaps = check_int("numtaps", numtaps, min_value=1)
    checked = [_band_edge(name, value) for name, value in edges.items()]
    (_, low), (_, high) = checked[0], checked[-1]
    if len(checked) == 2 and math.isfinite(low) and math.isfinite(high) and not low < high:
        raise bad_value("high_hz", edges["high_hz"], f"greater than low_hz={low:g}")
    cutoff = [edge for edge, _ in checked]
    return firwin(
        numtaps,
        cutoff[0] if len(cutoff) == 1 else cutoff,
        fs=fs,
        window=window,
        width=width_hz,
        pass_zero=pass_zero,
        dtype=dtype,
        device=device,
    )


def lowpass_taps(
    cutoff_hz: float,
    *,
    fs: float,
    numtaps: int,
    window: str | tuple[str, float] = "hamming",
    width_hz: float | None = None,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Lowpass FIR taps ``(numtaps,)`` with cutoff ``cutoff_hz`` (Hz) at sampling rate ``fs`` (Hz):
    ``firwin(numtaps, cutoff_hz, fs=fs, window=window, width=width_hz)``; unit gain at DC. Differentiable with
    respect to a ``cutoff_hz`` (the band helpers: ``low_hz``, ``high_hz``) that is a tensor requiring grad.
    Each is one frequency: a sequence of them is refused (``firwin`` would read it as several band edges)."""
    return _band_taps(
        {"cutoff_hz": cutoff_hz}, fs, numtaps, window, width_hz, dtype, device, pass_zero="lowpass"
    )


def highpass_taps(
    cutoff_hz: float,
    *,
    fs: float,
    numtaps: int,
    window: str | tuple[str, float] = "hamming",
    width_hz: float | None = None,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Highpass FIR taps (``numtaps`` odd); unit gain at Nyquist. Arguments as :func:`lowpass_taps`."""
    return _band_taps(
        {"cutoff_hz": cutoff_hz}, fs, numtaps, window, width_hz, dtype, device, pass_zero="highpass"
    )


def bandpass_taps(
    low_hz: float,
    high_hz: float,
    *,
    fs: float,
    numtaps: int,
    window: str | tuple[str, float] = "hamming",
    width_hz: float | None = None,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Bandpass FIR taps passing ``[low_hz, high_hz]``; unit gain at the band centre."""
    edges = {"low_hz": low_hz, "high_hz": high_hz}
    return _band_taps(edges, fs, numtaps, window, width_hz, dtype, device, pass_zero="bandpass")


def bandstop_taps(
    low_hz: float,
    high_hz: float,
    *,
    fs: float,
    numtaps: int,
    window: str | tuple[str, float] = "hamming",
    width_hz: float | None = None,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Bandstop FIR taps (``numtaps`` odd) rejecting ``[low_hz, high_hz]``; unit gain at DC."""
    edges = {"low_hz": low_hz, "high_hz": high_hz}
    return _band_taps(edges, fs, numtaps, window, width_hz, dtype, device, pass_zero="bandstop")


def erb_space(
    f_min: float,
    f_max: float,
    n: int,
    *,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """``n`` frequencies (Hz) from ``f_min`` to ``f_max`` inclusive, ascending, equally spaced on the
    ERB-rate scale ``E(f) = EAR_Q · ln(1 + f / (EAR_Q · MIN_BW))`` of Glasberg & Moore
    (``EAR_Q = 9.26449``, ``MIN_BW = 24.7`` Hz, the constants of ``scipy.signal.gammatone``).

    Raises:
        ParameterValueError: ``f_min < 0``, ``f_max <= f_min`` or ``n < 1``; a limit that is a tensor
        requiring grad (the spacing is computed with numpy: no gradient could reach it).
    """
    dtype, device = _result_form(dtype, device)
    why = "erb_space is computed with numpy"
    f_min = _constant("f_min", f_min, why, min_value=0.0)
    f_max = _constant("f_max", f_max, why)
    if f_max <= f_min:
        raise bad_value("f_max", f_max, f"greater than f_min={f_min:g}")
    n = check_int("n", n, min_value=1)
    q = EAR_Q * MIN_BW
    if n == 1:
        return _to_torch(np.array([f_min]), dtype, device)
    e = np.linspace(np.log(f_min + q), np.log(f_max + q), n)
    f = np.exp(e) - q
    f[0], f[-1] = f_min, f_max  # exact endpoints despite exp/log rounding
    return _to_torch(f, dtype, device)


def gammatone_bank(
    center_freqs: Sequence[float] | torch.Tensor,
    *,
    fs: float,
    numtaps: int,
    order: int = 4,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """FIR gammatone filters, row ``f`` = ``scipy.signal.gammatone(center_freqs[f], "fir", order,
    numtaps, fs)``:
    ``h[t] = s · t^(order-1) e^(-2π b t) cos(2π f t)`` with ``t = n/fs``, ``b = 1.019 ERB(f)`` and
    ``s = 2 (2π b)^order / ((order-1)! fs)``.

    Args:
        center_freqs: centre frequencies in Hz, each in ``(0, fs/2)``: one number or a 1-D sequence/tensor;
            the bank is differentiable with respect to a tensor that requires grad (``fs`` refuses one).
        fs: sampling rate in Hz.
        numtaps: taps per filter.
        order: filter order 1..24. Default 4.

    Returns:
        Tensor ``(len(center_freqs), numtaps)``.
    """
    fs = _constant(
        "fs",
        fs,
        "the bank is differentiable with respect to center_freqs only",
        min_value=0.0,
        min_inclusive=False,
    )
    numtaps = check_int("numtaps", numtaps, min_value=1)
    order = check_int("order", order, min_value=1, max_value=24)
    dtype, device = _result_form(dtype, device)
    freqs = _param_array("center_freqs", center_freqs, "a frequency or a 1-D sequence of frequencies in Hz")
    if freqs.dim() > 1:
        # One row per frequency: flattening a 2-D grid would hide which row is which.
        raise bad_value("center_freqs", center_freqs, "a frequency or a 1-D sequence of frequencies in Hz")
    freqs = freqs.reshape(-1)
    values = freqs.detach()
    if (
        values.numel() == 0
        or not bool(values.isfinite().all())
        or values.min() <= 0
        or values.max() >= fs / 2
    ):
        raise bad_value(
            "center_freqs", center_freqs, f"a non-empty list of frequencies in (0, fs/2) = (0, {fs / 2:g})"
        )
    f = freqs[:, None]
    t = torch.arange(numtaps, dtype=torch.float64)[None, :] / fs
    bw = 1.019 * (f / EAR_Q + MIN_BW)
    b = t ** (order - 1) * torch.exp(-2 * math.pi * bw * t) * torch.cos(2 * math.pi * f * t)
    s = 2 * (2 * math.pi * bw) ** order / math.factorial(order - 1) / fs
    return (b * s).to(device=device, dtype=dtype)


def _pair(name: str, value: Any, *, odd: bool = False) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, numbers.Integral) and not isinstance(value, bool) else value
    if not isinstance(pair, (tuple, list)) or len(pair) != 2:
        raise bad_value(name, value, "an integer or a pair of integers")
    out = tuple(check_int(name, v, min_value=1) for v in pair)
    if odd and any(v % 2 == 0 for v in out):
        raise bad_value(name, value, "odd sizes")
    return out  # type: ignore[return-value]


def gaussian_kernel1d(
    kernel_size: int,
    sigma: float,
    *,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Normalised sampled Gaussian ``(kernel_size,)`` as kornia's ``get_gaussian_kernel1d``:
    ``g[i] ∝ exp(-x_i² / 2σ²)`` with ``x_i = i - kernel_size//2`` (+0.5 when the size is even), sum 1.

    ``sigma`` (pixels, > 0) is a number or a one-element tensor; the taps are differentiable with respect to
    a sigma that requires grad. A sigma too small for any tap but the centre ones to be representable gives
    the limit, a unit impulse (split between the two centre taps for an even size), as kornia does."""
    k = check_int("kernel_size", kernel_size, min_value=1)
    sigma = _param_scalar("sigma", sigma, min_value=0.0, min_inclusive=False)
    dtype, device = _result_form(dtype, device)
    x = torch.arange(k, dtype=torch.float64) - k // 2 + (0.5 if k % 2 == 0 else 0.0)
    # Distances from the centre taps (x² - min x², which cancels in the normalisation): the centre taps
    # weigh exp(0) = 1, so a small sigma cannot underflow every tap to 0 and return 0/0 = NaN (an even
    # size at sigma = 0.01 did). Where 2σ² itself underflows (sigma < ~1e-162) the limit is selected.
    dist = x**2 - (x**2).min()
    denominator = 2 * sigma * sigma
    impulse = denominator == 0
    g = torch.exp(-dist / torch.where(impulse, 1.0, denominator))
    g = torch.where(impulse, (dist == 0).to(g.dtype), g)
    return (g / g.sum()).to(device=device, dtype=dtype)


def gaussian_kernel2d(
    kernel_size: int | tuple[int, int],
    sigma: float | tuple[float, float],
    *,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Separable Gaussian ``(ky, kx)`` = outer product of :func:`gaussian_kernel1d` along y and x;
    ``kernel_size`` and ``sigma`` are ``(y, x)`` pairs or one value for both (``sigma``'s pair may be a
    tuple, a list, a 1-D array or a tensor of length 2; differentiable when it holds a tensor that requires
    grad)."""
    ky, kx = _pair("kernel_size", kernel_size)
    dtype, device = _result_form(dtype, device)
    if isinstance(sigma, numbers.Real):
        sy, sx = sigma, sigma
    else:
        # Any 1-D pair (tuple, list, array, tensor), or a 0-d array/tensor as one value for both.
        allowed = "a number or a pair (sy, sx) of numbers"
        s = _param_array("sigma", sigma, allowed)
        if s.shape not in ((), (2,)):
            raise bad_value("sigma", sigma, allowed)
        sy, sx = s.expand(2)
    gy = gaussian_kernel1d(ky, sy)
    gx = gaussian_kernel1d(kx, sx)
    return (gy[:, None] * gx[None, :]).to(device=device, dtype=dtype)


def _gradient_pair(
    gx: np.ndarray, divisor: float | None, dtype: torch.dtype, device: torch.device | str | None
) -> torch.Tensor:
    """``(gx, gx.T)`` stacked as ``(2, 3, 3)`` (d/dx, d/dy), divided by ``divisor`` unless it is None."""
    k = np.stack([gx, gx.T])
    if divisor is not None:
        k = k / divisor
    return _to_torch(k, dtype, device)


def sobel_kernels(
    *, normalized: bool = False, dtype: torch.dtype = torch.float64, device: torch.device | str | None = None
) -> torch.Tensor:
    """The 3×3 Sobel pair ``(2, 3, 3)``: ``[0]`` = d/dx (columns), ``[1]`` = d/dy (rows), as correlation
    kernels; ``normalized`` divides each by its absolute sum (8), as kornia does."""
    dtype, device = _result_form(dtype, device)
    gx = np.array([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]])
    return _gradient_pair(gx, 8.0 if normalized else None, dtype, device)


def scharr_kernels(
    *, normalized: bool = False, dtype: torch.dtype = torch.float64, device: torch.device | str | None = None
) -> torch.Tensor:
    """The 3×3 Scharr pair ``(2, 3, 3)`` (d/dx, d/dy), ``[[-3,0,3],[-10,0,10],[-3,0,3]]``; ``normalized``
    divides by the absolute sum (32)."""
    dtype, device = _result_form(dtype, device)
    gx = np.array([[-3.0, 0.0, 3.0], [-10.0, 0.0, 10.0], [-3.0, 0.0, 3.0]])
    return _gradient_pair(gx, 32.0 if normalized else None, dtype, device)


def laplacian_kernel(
    kernel_size: int | tuple[int, int] = 3,
    *,
    normalized: bool = False,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """kornia's Laplacian ``(ky, kx)``: ones with the centre ``1 - ky·kx`` (odd sizes); ``normalized``
    divides by the absolute sum."""
    ky, kx = _pair("kernel_size", kernel_size, odd=True)
    if ky * kx == 1:
        raise bad_value("kernel_size", kernel_size, "at least 3 along one axis")
    dtype, device = _result_form(dtype, device)
    k = np.ones((ky, kx))
    k[ky // 2, kx // 2] = 1.0 - ky * kx
    if normalized:
        k = k / np.abs(k).sum()
    return _to_torch(k, dtype, device)


def box_kernel(
    kernel_size: int | tuple[int, int],
    *,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Normalised box ``(ky, kx)`` filled with ``1 / (ky·kx)``."""
    ky, kx = _pair("kernel_size", kernel_size)
    dtype, device = _result_form(dtype, device)
    return torch.full((ky, kx), 1.0 / (ky * kx), dtype=dtype, device=device)


def gabor_kernels(
    kernel_size: int | tuple[int, int],
    *,
    sigma: float,
    thetas: Sequence[float],
    wavelength: float,
    gamma: float = 0.5,
    psi: float = 0.0,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Real Gabor kernels, one per orientation: for pixel offsets ``(y, x)`` from the centre,
    ``x' = x cosθ + y sinθ``, ``y' = -x sinθ + y cosθ`` and
    ``g = exp(-(x'² + γ² y'²) / 2σ²) · cos(2π x'/λ + ψ)``.

    Every real parameter may be a tensor (one element; ``thetas`` 1-D) that requires grad: the kernels are
    differentiable with respect to it.

    Args:
        kernel_size: odd size or ``(ky, kx)``.
        sigma: envelope standard deviation in pixels (> 0).
        thetas: orientations in radians.
        wavelength: λ in pixels (> 0).
        gamma: spatial aspect ratio. Default 0.5.
        psi: phase offset in radians. Default 0.

    Returns:
        Tensor ``(len(thetas), ky, kx)``.
    """
    ky, kx = _pair("kernel_size", kernel_size, odd=True)
    dtype, device = _result_form(dtype, device)
    sigma = _param_scalar("sigma", sigma, min_value=0.0, min_inclusive=False)
    wavelength = _param_scalar("wavelength", wavelength, min_value=0.0, min_inclusive=False)
    gamma = _param_scalar("gamma", gamma)
    psi = _param_scalar("psi", psi)
    th = _param_array("thetas", thetas, "a non-empty sequence of finite angles in radians")
    th = th.reshape(1) if th.dim() == 0 else th
    if th.dim() != 1 or th.numel() == 0 or not bool(th.detach().isfinite().all()):
        raise bad_value("thetas", thetas, "a non-empty sequence of finite angles in radians")
    y = (torch.arange(ky, dtype=torch.float64) - ky // 2)[None, :, None]
    x = (torch.arange(kx, dtype=torch.float64) - kx // 2)[None, None, :]
    c, s = torch.cos(th)[:, None, None], torch.sin(th)[:, None, None]
    xr = x * c + y * s
    yr = -x * s + y * c
    g = torch.exp(-(xr**2 + gamma**2 * yr**2) / (2 * sigma * sigma)) * torch.cos(
        2 * math.pi * xr / wavelength + psi
    )
    return g.to(device=device, dtype=dtype)
