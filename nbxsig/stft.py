"""Short-time Fourier transform and its inverse: torch.stft / torch.istft semantics on fused Triton kernels.

Functions :func:`stft`, :func:`istft`, :func:`spectrogram` and modules :class:`STFT`, :class:`ISTFT`.
Semantics are torch's, argument for argument, wherever torch accepts the call; beyond torch:

* any number of leading dims, ``(..., L) → (..., F, T)`` and back;
* float16/bfloat16 input (float32 accumulation, complex64 out), float64 (torch backend);
* ``istft`` never forces a GPU→CPU synchronisation for the NOLA check: it divides by the window
  envelope only where that exceeds 1e-11 (``strict_nola=True`` raises like torch, and syncs);
* the Triton path is a set of ``torch.library`` custom ops with fake implementations, so
  ``torch.compile(fullgraph=True)`` traces through :class:`STFT`/:class:`ISTFT`;
* ``istft`` also takes the real layout ``(..., F, T, 2)`` that ``return_complex=False`` produces.

Backends: "triton" (CUDA tensors, or CPU under ``TRITON_INTERPRET=1``; float16/bfloat16/float32,
real input and real window) and "torch" (everything, real-valued ops only, ONNX-exportable with
``return_complex=False``). Auto picks Triton on CUDA where it can run the call. The Triton backend
treats the window as a constant: a window that requires grad makes auto pick torch.

Example:
    >>> import torch, nbxsig.stft
    >>> x = torch.randn(4, 16000)
    >>> w = torch.hann_window(20)
    >>> X = nbxsig.stft.stft(x, 20, 5, window=w)               # (4, 11, 3201) complex64
    >>> y = nbxsig.stft.istft(X, 20, 5, window=w, length=16000)  # ≈ x
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from torch import nn

from ._dispatch import (
    ENV_VAR,
    Backend,
    Op,
    check_backend,
    choose_backend,
    interpreter_enabled,
    triton_installed,
)
from ._validate import (
    COMPLEX_DTYPES,
    FLOATING_DTYPES,
    check_bool,
    check_choice,
    check_float,
    check_int,
    check_istft_output,
    check_tensor,
)
from .errors import BackendUnavailableError, bad_value
from .streaming import StreamingISTFT, StreamingSTFT, default_hop_length

__all__ = ["ISTFT", "STFT", "StreamingISTFT", "StreamingSTFT", "istft", "spectrogram", "stft"]

PAD_MODES = ("reflect", "constant", "replicate", "circular")

_STFT = Op("stft", torch_impl="nbxsig.reference.stft:stft", triton_impl="nbxsig.kernels.stft:stft")
# istft's kernels read complex64 as its real layout; the dispatch sees the caller's dtype, so that a
# refusal names it (complex128, not the float64 of its real view).
_ISTFT = Op(
    "istft",
    torch_impl="nbxsig.reference.stft:istft",
    triton_impl="nbxsig.kernels.stft:istft",
    triton_dtypes=(torch.float16, torch.bfloat16, torch.float32, torch.complex64),
)


@dataclass(frozen=True)
class _Frame:
    """Validated framing parameters shared by both directions."""

    n_fft: int
    hop: int
    win_length: int
    window: torch.Tensor | None  # zero-padded (centred) to n_fft, or None = rectangular


def _frame_params(
    n_fft: object,
    hop_length: object,
    win_length: object,
    window: object,
    *,
    device: torch.device,
    fn: str,
) -> _Frame:
    n_fft = check_int("n_fft", n_fft, min_value=1)
    if hop_length is None:
        hop_length = default_hop_length(n_fft)
    hop_length = check_int("hop_length", hop_length, min_value=1)
    win_length = n_fft if win_length is None else check_int("win_length", win_length, min_value=1)
    if win_length > n_fft:
        raise bad_value("win_length", win_length, f"in 1..n_fft={n_fft}")
    if fn == "istft" and hop_length > win_length:
        raise bad_value("hop_length", hop_length, f"in 1..win_length={win_length} for istft")
    if window is None and win_length < n_fft:
        # torch.stft's default window is ones(win_length), zero-padded to n_fft like any other; float32
        # whatever torch's default dtype, as only a 64-bit window promotes the result (torch makes it
        # in the input's dtype) and the Triton kernels refuse a float64 one.
        window = torch.ones(win_length, dtype=torch.float32, device=device)
    if window is not None:
        window = check_tensor("window", window, dtypes=(*FLOATING_DTYPES, torch.complex64, torch.complex128))
        if window.dim() != 1 or window.shape[0] != win_length:
            raise bad_value("window", window, f"a 1-D tensor of length win_length={win_length}")
        if window.device != device:
            raise bad_value("window", window, f"on the input's device {device}")
        # The Triton kernels read the window as a dense array (they take no strides); the reference
        # views a complex one as real, which a lazily conjugated tensor refuses (torch.stft takes it).
        window = window.resolve_conj().contiguous()
        if win_length < n_fft:
            left = (n_fft - win_length) // 2
            window = torch.nn.functional.pad(window, (left, n_fft - win_length - left))
    return _Frame(n_fft, hop_length, win_length, window)


def _window_blocks_triton(window: torch.Tensor | None) -> str:
    if window is None:
        return ""
    if window.is_complex():
        return "the window is complex"
    if window.requires_grad and torch.is_grad_enabled():
        return "the window requires grad (the Triton kernels treat it as a constant)"
    if window.dtype == torch.float64:
        return "the window is float64"
    return ""


def _platform() -> tuple[bool, bool, str | None]:
    # What Op.backend reads from the platform (package lookup, environment). Under torch.compile it
    # is evaluated once at trace time and baked in as a constant, so dynamo never traces importlib.
    return triton_installed(), interpreter_enabled(), os.environ.get(ENV_VAR) or None


# This is exactly what torch.compiler.assume_constant_result does; calling that decorator here would
# import torch._dynamo (~2 s) at `import nbxsig.stft`, so the marker is set directly.
_platform._dynamo_marked_constant = True  # type: ignore[attr-defined]


_OPS = {"stft": _STFT, "istft": _ISTFT}


def _preload(name: str, backend: str) -> bool:
    # Op imports an implementation with importlib on first use, which dynamo cannot trace. Under
    # torch.compile this runs once at trace time (a constant to dynamo), so the traced Op call that
    # follows finds the implementation already cached.
    _OPS[name].implementation(backend)
    return True


_preload._dynamo_marked_constant = True  # type: ignore[attr-defined]


def _run(op: Op, backend: Backend, *args, **kwargs):
    """``op(*args, backend=backend, **kwargs)``, compile-safe."""
    if torch.compiler.is_compiling():
        _preload(op.name, backend)
    return op(*args, backend=backend, **kwargs)


def _resolve(op: Op, backend: str | None, *, device, dtype, numel: int, blocker: str) -> Backend:
    if torch.compiler.is_compiling():
        installed, interpreter, env_default = _platform()
        chosen = choose_backend(
            requested=backend, env_default=env_default, device_type=device.type, dtype=dtype, numel=numel,
            triton_dtypes=op.triton_dtypes, has_triton_impl=op.triton_impl is not None,
            triton_installed=installed, interpreter=interpreter,
        )  # fmt: skip
    else:
        chosen = op.backend(backend, device=device, dtype=dtype, numel=numel)
    if chosen == "triton" and blocker:
        if backend == "triton":
            raise BackendUnavailableError(f"backend='triton' cannot run this call: {blocker}")
        return "torch"
    return chosen


def stft(
    input: torch.Tensor,
    n_fft: int,
    hop_length: int | None = None,
    win_length: int | None = None,
    window: torch.Tensor | None = None,
    center: bool = True,
    pad_mode: str = "reflect",
    normalized: bool = False,
    onesided: bool | None = None,
    return_complex: bool | None = True,
    align_to_window: bool | None = None,
    *,
    backend: Backend | None = None,
) -> torch.Tensor:
    """Short-time Fourier transform, ``torch.stft`` semantics.

    ``X[..., k, t] = Σ_n x_pad[t·hop + n] · w[n] · e^{-2πikn/n_fft}``.

    Args:
        input: signal ``(..., L)``: float16/bfloat16/float32/float64, or complex (then two-sided).
        n_fft: frame length in samples (>= 1).
        hop_length: frame step in samples; default ``n_fft // 4`` (may exceed ``win_length``).
        win_length: window length in samples, ``1..n_fft``; default ``n_fft``. A shorter window is
            zero-padded, centred, to ``n_fft``.
        window: 1-D tensor of length ``win_length`` on the input's device; default None = rectangular.
        center: pad the signal by ``n_fft // 2`` on both sides so frame ``t`` is centred at ``t·hop``.
        pad_mode: "reflect" (default), "constant" (zeros), "replicate" or "circular".
        normalized: multiply by ``n_fft ** -0.5``.
        onesided: bins ``0..n_fft//2`` only; default True for real input and window, False otherwise.
        return_complex: complex ``(..., F, T)`` (default; also None, which torch takes for complex
            data only) or the real layout ``(..., F, T, 2)``.
        align_to_window: with ``center=False`` and ``win_length < n_fft``, True starts frame ``t``'s
            window (not its ``n_fft`` span) at sample ``t·hop``: the signal is padded by
            ``(n_fft - win_length) // 2`` on both sides with ``pad_mode``. None (default) or False:
            frames start at ``t·hop``. Must be None when ``center``, as in torch.
        backend: None (auto), "triton" or "torch".

    Returns:
        complex64 (complex128 where the input or the window is 64-bit, as torch promotes them)
        ``(..., F, T)`` or its real layout ``(..., F, T, 2)``,
        ``F = n_fft//2 + 1`` (onesided) or ``n_fft``, ``T = 1 + (L + 2·pad - n_fft) // hop`` (``pad`` is
        ``n_fft // 2`` when centred, ``(n_fft - win_length) // 2`` with ``align_to_window``, else 0).

    Shape:
        ``(..., L) → (..., F, T)``; ``(L,) → (F, T)``.

    Raises:
        ParameterTypeError: input not a floating/complex tensor; a flag not a bool.
        ParameterValueError: ``n_fft``, ``hop_length``, ``win_length``, ``window`` or ``pad_mode``
            out of range; ``n_fft`` too long for the (centre-padded) signal; ``onesided=True`` with complex
            data; ``align_to_window`` not None with ``center=True``.
        BackendUnavailableError: ``backend="triton"`` for a call it cannot run.

    Example:
        >>> X = stft(torch.randn(2, 8000), 400, 160, window=torch.hann_window(400))  # (2, 201, 51)
    """
    return _stft(
        input, n_fft, hop_length, win_length, window, center, pad_mode, normalized, onesided,
        return_complex, align_to_window, backend=backend, power=None,
    )  # fmt: skip


def _check_align(align_to_window: object, center: bool) -> bool:
    """``align_to_window`` validated against ``center`` (torch.stft refuses any value, even False, with
    ``center=True``); None is False."""
    if align_to_window is None:
        return False
    align_to_window = check_bool("align_to_window", align_to_window)
    if center:
        raise bad_value("align_to_window", align_to_window, "None for center=True (as in torch.stft)")
    return align_to_window


def _stft(
    input, n_fft, hop_length, win_length, window, center, pad_mode, normalized, onesided, return_complex,
    align_to_window, *, backend, power,
) -> torch.Tensor:  # fmt: skip
    """stft with an optional fused ``|X|^power`` output (power None: the spectrum)."""
    # A signature validated before skips the checks and the dispatch (see _ISTFT_PLANS).
    key, plan = _lookup_plan(
        _STFT_PLANS, input, window, n_fft, hop_length, win_length, center, pad_mode, normalized, onesided,
        return_complex, align_to_window, backend, power,
    )  # fmt: skip
    if plan is not None:
        return _stft_run(input, *plan)
    x = check_tensor("input", input, dtypes=(*FLOATING_DTYPES, *COMPLEX_DTYPES), min_dim=1)
    x = x.resolve_conj()  # torch.stft takes a lazily conjugated input; view_as_real does not
    frame = _frame_params(n_fft, hop_length, win_length, window, device=x.device, fn="stft")
    center = check_bool("center", center)
    normalized = check_bool("normalized", normalized)
    # torch.stft's None means True for complex data and is refused for real data, where nbxsig's
    # default (True) applies.
    return_complex = True if return_complex is None else check_bool("return_complex", return_complex)
    align = (frame.n_fft - frame.win_length) // 2 if _check_align(align_to_window, center) else 0
    pad_mode = check_choice("pad_mode", pad_mode, PAD_MODES)
    is_complex = x.is_complex() or (frame.window is not None and frame.window.is_complex())
    if onesided is None:
        onesided = not is_complex
    onesided = check_bool("onesided", onesided)
    if onesided and is_complex:
        raise bad_value("onesided", onesided, "False (or None) for a complex input or window")
    n_fft, length = frame.n_fft, x.shape[-1]
    pad = n_fft // 2 if center else 0
    if pad and pad_mode == "reflect" and pad >= length:
        raise bad_value(
            "input", x, f"longer than n_fft // 2 = {pad} samples for center=True with pad_mode='reflect'"
        )
    if pad and pad_mode == "circular" and pad > length:
        raise bad_value(
            "input", x, f"at least n_fft // 2 = {pad} samples long for center=True with pad_mode='circular'"
        )
    if length + 2 * pad < n_fft:
        raise bad_value("n_fft", n_fft, f"<= the padded signal length {length + 2 * pad}")
    chosen = _resolve(
        _STFT,
        backend,
        device=x.device,
        dtype=x.dtype,
        numel=x.numel(),
        blocker=_window_blocks_triton(frame.window),
    )
    kwargs = dict(
        n_fft=n_fft, hop=frame.hop, window=frame.window, center=center, pad_mode=pad_mode,
        normalized=normalized, onesided=onesided, power=power,
    )  # fmt: skip
    plan = (chosen, kwargs, return_complex and power is None, align)
    if key is not None and chosen == "triton":  # (as for istft: only the Triton path is planned)
        if len(_STFT_PLANS) >= _MAX_PLANS:
            _STFT_PLANS.clear()
        # The key holds the window's id and data pointer: keep the window and its storage alive.
        _STFT_PLANS[key] = (*plan, window, None if window is None else window.untyped_storage())
    return _stft_run(x, *plan)


def _stft_run(
    x: torch.Tensor, chosen: Backend, kwargs: dict, complex_out: bool, align: int, *_
) -> torch.Tensor:
    """The validated stft of ``x`` on backend ``chosen`` (``complex_out``: view the result as complex;
    ``align``: the padding of ``align_to_window``)."""
    if align:
        # As torch.stft pads for align_to_window: both ends by pad_mode, then frames from sample 0.
        # (n_fft <= L was checked, so a reflection or wrap of `align` < n_fft / 2 samples fits.)
        if kwargs["pad_mode"] == "constant":
            x = torch.nn.functional.pad(x, (align, align))
        else:  # reflect/replicate/circular pad the last dim of a (N, C, L) tensor
            mode = kwargs["pad_mode"]
            padded = torch.nn.functional.pad(x.reshape(-1, 1, x.shape[-1]), (align, align), mode=mode)
            x = padded.reshape(*x.shape[:-1], padded.shape[-1])
    lead, length = x.shape[:-1], x.shape[-1]
    spec = _run(_STFT, chosen, x.reshape(-1, length), **kwargs)
    spec = spec.reshape(*lead, *spec.shape[1:])
    return torch.view_as_complex(spec) if complex_out else spec


#: Validated Triton stft calls by signature (``_plan_key``): ``(backend, kwargs, complex output,
#: align_to_window's padding, the caller's window)``. The launch is not prepared (stft_forward reads
#: the kernel settings per call).
_STFT_PLANS: dict = {}


def _spectrum_input(x: object) -> tuple[torch.Tensor, torch.Tensor]:
    """Accept complex ``(..., F, T)`` (complex64/complex128, as :func:`stft` returns) or real layout
    ``(..., F, T, 2)``; return the input, a lazy conjugation resolved (torch.istft takes such a view,
    view_as_real and the kernels do not), and its real layout."""
    x = check_tensor("input", x, dtypes=(*FLOATING_DTYPES, *COMPLEX_DTYPES))
    if x.is_complex():
        x = check_tensor("input", x, min_dim=2).resolve_conj()
        return x, torch.view_as_real(x)
    if x.dim() < 3 or x.shape[-1] != 2:
        raise bad_value("input", x, "complex (..., F, T) or real (..., F, T, 2)")
    return x, x


def istft(
    input: torch.Tensor,
    n_fft: int,
    hop_length: int | None = None,
    win_length: int | None = None,
    window: torch.Tensor | None = None,
    center: bool = True,
    normalized: bool = False,
    onesided: bool | None = None,
    length: int | None = None,
    return_complex: bool = False,
    *,
    backend: Backend | None = None,
    strict_nola: bool = False,
) -> torch.Tensor:
    """Inverse short-time Fourier transform, ``torch.istft`` semantics.

    ``y = OLA_t(irDFT(X[:, t]) · w) / OLA_t(w²)``, trimmed by ``n_fft // 2`` at both ends when
    ``center``, then cut or zero-padded to ``length``.

    NOLA: by default the division by the window envelope ``OLA(w²)`` happens only where it exceeds
    1e-11; where it does not (e.g. the first sample of a Hann-windowed ``center=False`` STFT) the
    overlap-added sum is returned undivided (it is ~0 there, as the window vanishes). No GPU→CPU
    synchronisation happens. ``strict_nola=True`` raises like torch instead (and synchronises).

    Args:
        input: complex ``(..., F, T)`` or real layout ``(..., F, T, 2)``; ``F = n_fft//2 + 1``
            (onesided) or ``n_fft``.
        n_fft: frame length in samples.
        hop_length: frame step, ``1..win_length``; default ``n_fft // 4``.
        win_length: window length ``1..n_fft``; default ``n_fft``.
        window: 1-D tensor of length ``win_length``; default rectangular.
        center: whether the STFT was centred (trims ``n_fft // 2`` samples at both ends).
        normalized: whether the STFT was normalized (multiplies by ``n_fft ** 0.5``).
        onesided: whether ``input`` holds bins ``0..n_fft//2`` only; default ``F != n_fft``.
        length: output length in samples (>= 1): shorter cuts, longer pads zeros; default the signal's.
        return_complex: complex output from a two-sided spectrum (``onesided=False``; torch backend).
        backend: None (auto), "triton" or "torch".
        strict_nola: raise where the window envelope vanishes, as torch does.

    Returns:
        ``(..., length)`` float32 (float64 where the input or the window is 64-bit), complex when
        ``return_complex``.

    Raises:
        ParameterTypeError / ParameterValueError: bad input dtype or layout, frequency size not
            matching ``n_fft``/``onesided``, ``hop_length``/``win_length``/``window``/``length`` out of
            range, a single frame of an even ``n_fft`` with ``center=True`` and no ``length`` (no sample
            is left), NOLA violated with ``strict_nola=True``.

    Example:
        >>> X = stft(torch.randn(8000), 20, 5, window=torch.hann_window(20))
        >>> y = istft(X, 20, 5, window=torch.hann_window(20), length=8000)
    """
    # A signature validated before runs its plan: no checks, no dispatch, no launch arithmetic.
    key, plan = _lookup_plan(
        _ISTFT_PLANS, input, window, n_fft, hop_length, win_length, center, normalized, onesided, length,
        return_complex, backend, strict_nola,
    )  # fmt: skip
    if plan is not None:
        return plan(input)
    input, spec = _spectrum_input(input)
    frame = _frame_params(n_fft, hop_length, win_length, window, device=spec.device, fn="istft")
    center = check_bool("center", center)
    normalized = check_bool("normalized", normalized)
    return_complex = check_bool("return_complex", return_complex)
    strict_nola = check_bool("strict_nola", strict_nola)
    n_fft = frame.n_fft
    n_bins, n_frames = spec.shape[-3], spec.shape[-2]
    if onesided is None:
        onesided = bool(n_bins != n_fft)  # bool(): under jit tracing shapes are 0-d tensors
    onesided = check_bool("onesided", onesided)
    expected_bins = n_fft // 2 + 1 if onesided else n_fft
    if n_bins != expected_bins:
        raise bad_value(
            "input",
            input,
            f"with {expected_bins} frequency bins (dim -2 of a complex input) for n_fft={n_fft} "
            f"and onesided={onesided}",
        )
    if n_frames < 1:
        raise bad_value("input", input, "with at least one frame")
    check_istft_output(
        "input", input, n_fft=n_fft, hop=frame.hop, n_frames=n_frames, center=center, length=length
    )
    if return_complex and onesided:
        raise bad_value("onesided", onesided, "False for return_complex=True")
    if not return_complex and frame.window is not None and frame.window.is_complex():
        raise bad_value("window", window, "real unless return_complex=True")
    if length is not None:
        length = check_int("length", length, min_value=1)
    blocker = _window_blocks_triton(frame.window)
    if return_complex:
        blocker = "return_complex=True"
    elif strict_nola:
        blocker = "strict_nola=True"
    chosen = _resolve(
        _ISTFT, backend, device=spec.device, dtype=input.dtype, numel=spec.numel(), blocker=blocker
    )
    kwargs = dict(
        n_fft=n_fft, hop=frame.hop, window=frame.window, center=center, normalized=normalized,
        onesided=onesided, length=length, return_complex=return_complex, strict_nola=strict_nola,
    )  # fmt: skip
    if key is not None and chosen == "triton":
        # Everything above is a function of the key; only the Triton path is planned (the torch path's
        # own cost dwarfs the checks, and jit tracing/ONNX export go through it).
        if len(_ISTFT_PLANS) >= _MAX_PLANS:
            _ISTFT_PLANS.clear()
        plan = _ISTFT_PLANS[key] = _IstftPlan(input, spec, window, kwargs)
        return plan(input)
    return _istft_run(input, spec, chosen, kwargs)


def _istft_run(input: torch.Tensor, spec: torch.Tensor, chosen: Backend, kwargs: dict) -> torch.Tensor:
    """The validated istft of ``input`` (``spec``: its real layout) on backend ``chosen``."""
    lead = spec.shape[:-3]
    # (reshape costs microseconds of host time, which is what a batch-1 call is made of)
    spec3 = spec if len(lead) == 1 else spec.reshape(-1, *spec.shape[-3:])
    if (
        chosen == "triton"
        and input.dtype == torch.complex64
        and input.requires_grad
        and torch.is_grad_enabled()
    ):
        # The Triton twin takes complex64 itself: its gradient then reaches the caller's tensor
        # without view_as_real's backward, which makes every gradient contiguous (a copy).
        spec3 = input if len(lead) == 1 else input.reshape(-1, *input.shape[-2:])
    y = _run(_ISTFT, chosen, spec3, **kwargs)
    return y if len(lead) == 1 else y.reshape(*lead, y.shape[-1])


#: Validated Triton istft calls by signature (``_plan_key``), so that a repeated call -- the batch-1
#: vocoder loop -- skips the checks and the dispatch. Emptied when full and whenever a setting of
#: nbxsig.kernels.stft is assigned (its plans bake those in).
_ISTFT_PLANS: dict = {}
_MAX_PLANS = 256


def _lookup_plan(plans: dict, input: object, window: object, *scalars: object) -> tuple:
    """``(key, plan)`` for a call: the key None where the call is not planned (:func:`_plan_key`) or an
    argument is unhashable (the checks then reject it); the plan None where none is stored yet."""
    key = _plan_key(input, window, *scalars)
    if key is None:
        return None, None
    try:
        return key, plans.get(key)
    except TypeError:
        return None, None


def _plan_key(input: object, window: object, *scalars: object) -> tuple | None:
    """What decides every check and choice :func:`istft` / :func:`stft` make for a call, or None
    for a call that is not planned (not plain tensors, a window that requires grad or was made under
    ``torch.inference_mode`` -- it has no version counter to key on --, an input or
    window with the lazy negation bit -- the dispatch resolves it --, an input with the lazy
    conjugate bit -- the checks resolve it into a copy, a planned launch would read it unconjugated
    --, a window that is not contiguous -- the checks copy it, and a plan would keep that copy across a
    ``.data`` assignment --, under torch.compile; the caller handles unhashable arguments). The
    scalar arguments go in with their types (``20.0 == 20`` and ``True == 1`` as keys, but not as
    arguments); the window by identity, version (in-place changes), data pointer, shape, dtype and
    device (``.data`` assignment changes those without a version bump; a plan keeps its window's
    storage alive, so no later storage can take that pointer); the environment the dispatch reads;
    whether ``torch.inference_mode`` is on (the window a plan pads to ``n_fft``, or builds for
    ``window=None``, is then an inference tensor, which autograd refuses to save for a later call
    that needs a gradient)."""
    if torch.compiler.is_compiling() or type(input) is not torch.Tensor or input.is_neg() or input.is_conj():
        return None
    if window is None:
        win = None
    elif (
        type(window) is torch.Tensor
        and window.is_contiguous()
        and not (window.requires_grad or window.is_neg() or window.is_inference())
    ):
        win = (id(window), window._version, window.data_ptr(), window.shape, window.dtype, window.device)
    else:
        return None
    return (
        input.shape, input.stride(), input.dtype, input.device, win, scalars, tuple(map(type, scalars)),
        os.environ.get(ENV_VAR), os.environ.get("TRITON_INTERPRET"), torch.is_inference_mode_enabled(),
    )  # fmt: skip


class _IstftPlan:
    """One validated Triton istft signature: the resolved arguments and, where the call is the
    dense overlap-add kernel's, its prepared launch (``nbxsig.kernels.stft.IstftLaunch``)."""

    __slots__ = ("complex", "kwargs", "launch", "out_shape", "shape3", "source_storage", "source_window")

    def __init__(self, input: torch.Tensor, spec: torch.Tensor, window, kwargs: dict) -> None:
        from .kernels import stft as kernels

        kernels.on_retune(_ISTFT_PLANS.clear)
        # The key holds the window's id and data pointer: keep the window and its storage alive.
        self.source_window = window
        self.source_storage = None if window is None else window.untyped_storage()
        self.kwargs = kwargs
        self.complex = input.is_complex()
        lead = spec.shape[:-3]
        self.shape3 = None if len(lead) == 1 else (-1, *spec.shape[-3:])
        spec3 = spec if self.shape3 is None else spec.reshape(self.shape3)
        length = kwargs["length"]
        self.launch = kernels.IstftLaunch.prepare(
            spec3, kwargs["window"], n_fft=kwargs["n_fft"], hop=kwargs["hop"], center=kwargs["center"],
            normalized=kwargs["normalized"], length=-1 if length is None else length,
        )  # fmt: skip
        self.out_shape = None if self.launch is None or len(lead) == 1 else (*lead, self.launch.n_out)

    def __call__(self, input: torch.Tensor) -> torch.Tensor:
        if self.launch is None:
            spec = torch.view_as_real(input) if self.complex else input
            return _istft_run(input, spec, "triton", self.kwargs)
        if input.requires_grad and torch.is_grad_enabled():
            if self.shape3 is None and self.launch.backward is not None:
                return self.launch.apply(input)  # both directions prepared
            spec = torch.view_as_real(input) if self.complex else input
            return _istft_run(input, spec, "triton", self.kwargs)
        if self.shape3 is None:
            return self.launch(input)  # complex or real layout: the launch takes either
        spec = torch.view_as_real(input) if self.complex else input
        return self.launch(spec.reshape(self.shape3)).reshape(self.out_shape)


def spectrogram(
    input: torch.Tensor,
    n_fft: int,
    hop_length: int | None = None,
    win_length: int | None = None,
    window: torch.Tensor | None = None,
    power: float | None = 2.0,
    normalized: bool = False,
    center: bool = True,
    pad_mode: str = "reflect",
    onesided: bool = True,
    *,
    backend: Backend | None = None,
) -> torch.Tensor:
    """Power (or magnitude) spectrogram ``|stft(input)| ** power``.

    Args:
        power: exponent > 0 (2 = power, 1 = magnitude) or None for the complex STFT.
        normalized: as :func:`stft` (× ``n_fft ** -0.5`` before the power).
        other arguments: as :func:`stft`.

    Returns:
        float32 (float64 where the input or the window is 64-bit) ``(..., F, T)``; complex when ``power``
        is None.

    Raises:
        as :func:`stft`; ParameterValueError for ``power`` <= 0.

    Example:
        >>> S = spectrogram(torch.randn(16000), 400, 160, window=torch.hann_window(400))  # (201, 101)
    """
    if power is not None:
        power = check_float("power", power, min_value=0.0, min_inclusive=False)
    return _stft(
        input, n_fft, hop_length, win_length, window, center, pad_mode, normalized, onesided,
        power is None, None, backend=backend, power=power,
    )  # fmt: skip


def _module_window(
    n_fft: object,
    hop_length: object,
    win_length: object,
    window: torch.Tensor | None,
    *,
    fn: str,
    backend: object,
    flags: dict[str, object],
) -> torch.Tensor | None:
    """Validate an :class:`STFT`/:class:`ISTFT` module's arguments once, at construction (so a bad
    configuration fails there, not at the first call); return the window buffer (a copy)."""
    check_backend(backend)
    for name, value in flags.items():
        # onesided=None: decided by the data; stft's return_complex=None: True (istft refuses None)
        optional = name == "onesided" or (name == "return_complex" and fn == "stft")
        if value is not None or not optional:
            check_bool(name, value)
    _frame_params(
        n_fft,
        hop_length,
        win_length,
        window,
        device=window.device if window is not None else torch.device("cpu"),
        fn=fn,
    )
    return window.detach().clone() if window is not None else None


class STFT(nn.Module):
    """Module form of :func:`stft`; the window is a buffer (moves with ``.to()``).

    Args: as :func:`stft` (``window`` a tensor or None; ``backend`` keyword-only).

    Example:
        >>> m = STFT(20, 5, window=torch.hann_window(20))
        >>> X = m(torch.randn(2, 16000))
    """

    def __init__(
        self,
        n_fft: int,
        hop_length: int | None = None,
        win_length: int | None = None,
        window: torch.Tensor | None = None,
        center: bool = True,
        pad_mode: str = "reflect",
        normalized: bool = False,
        onesided: bool | None = None,
        return_complex: bool | None = True,
        align_to_window: bool | None = None,
        *,
        backend: Backend | None = None,
    ) -> None:
        super().__init__()
        flags = dict(center=center, normalized=normalized, onesided=onesided, return_complex=return_complex)
        window_buffer = _module_window(
            n_fft, hop_length, win_length, window, fn="stft", backend=backend, flags=flags
        )
        check_choice("pad_mode", pad_mode, PAD_MODES)
        _check_align(align_to_window, center)
        self.n_fft, self.hop_length, self.win_length = n_fft, hop_length, win_length
        self.center, self.pad_mode, self.normalized = center, pad_mode, normalized
        self.onesided, self.return_complex, self.backend = onesided, return_complex, backend
        self.align_to_window = align_to_window
        self.register_buffer("window", window_buffer)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return stft(
            input,
            self.n_fft,
            self.hop_length,
            self.win_length,
            self.window,
            self.center,
            self.pad_mode,
            self.normalized,
            self.onesided,
            self.return_complex,
            self.align_to_window,
            backend=self.backend,
        )


class ISTFT(nn.Module):
    """Module form of :func:`istft`; the window is a buffer. ``forward(spec, length=None)``.

    Example:
        >>> m = ISTFT(20, 5, window=torch.hann_window(20))
        >>> y = m(STFT(20, 5, window=torch.hann_window(20))(torch.randn(16000)), length=16000)
    """

    def __init__(
        self,
        n_fft: int,
        hop_length: int | None = None,
        win_length: int | None = None,
        window: torch.Tensor | None = None,
        center: bool = True,
        normalized: bool = False,
        onesided: bool | None = None,
        return_complex: bool = False,
        *,
        backend: Backend | None = None,
        strict_nola: bool = False,
    ) -> None:
        super().__init__()
        flags = dict(
            center=center, normalized=normalized, onesided=onesided, return_complex=return_complex,
            strict_nola=strict_nola,
        )  # fmt: skip
        window_buffer = _module_window(
            n_fft, hop_length, win_length, window, fn="istft", backend=backend, flags=flags
        )
        self.n_fft, self.hop_length, self.win_length = n_fft, hop_length, win_length
        self.center, self.normalized, self.onesided = center, normalized, onesided
        self.return_complex, self.backend, self.strict_nola = return_complex, backend, strict_nola
        self.register_buffer("window", window_buffer)

    def forward(self, input: torch.Tensor, length: int | None = None) -> torch.Tensor:
        return istft(
            input,
            self.n_fft,
            self.hop_length,
            self.win_length,
            self.window,
            self.center,
            self.normalized,
            self.onesided,
            length,
            self.return_complex,
            backend=self.backend,
            strict_nola=self.strict_nola,
        )
