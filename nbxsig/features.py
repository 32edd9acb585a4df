"""Mel features: mel scale, filter banks, (log-)mel spectrograms, Whisper's front end, dB conversion.

The filter banks are torchaudio's (``torchaudio.functional.melscale_fbanks``) for every
``mel_scale``/``norm``, computed in float64 and rounded once; with ``mel_scale="slaney",
norm="slaney"`` they are librosa's. The spectrograms run either the Triton backend
(:mod:`nbxsig.kernels.mel`: on a GPU ``nbxsig.stft.spectrogram`` -- the four-step kernel of
:mod:`nbxsig.kernels.fourstep` at n_fft 256/400/512 (1000 at TF32), else the FFT path -- + one mel
projection kernel, measured fastest; fused waveform → mel kernels that keep nothing in between in
memory are the other paths) or the
pure-torch twin (:mod:`nbxsig.reference.mel`: torch.fft eagerly, real-valued ops only in an ONNX
export; float64-capable).

Example:
    >>> import torch, nbxsig.features as nf
    >>> audio = torch.randn(2, 16000)
    >>> nf.mel_spectrogram(audio, sample_rate=16000, n_fft=400, hop_length=160, n_mels=80).shape
    torch.Size([2, 80, 101])
    >>> nf.whisper_log_mel(audio).shape                       # Whisper drops the last frame
    torch.Size([2, 80, 100])
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Mapping
from functools import lru_cache

import torch

from ._dispatch import Backend, Op
from ._validate import FLOATING_DTYPES, check_choice, check_device, check_float, check_int, check_tensor
from .errors import ParameterTypeError, ParameterValueError, bad_type, bad_value, describe
from .reference import mel as _ref
from .streaming import StreamingMelSpectrogram

__all__ = [
    "StreamingMelSpectrogram",
    "amplitude_to_db",
    "hz_to_mel",
    "log_mel_spectrogram",
    "mel_filterbank",
    "mel_spectrogram",
    "mel_to_hz",
    "whisper_log_mel",
]

MEL_SCALES = ("htk", "slaney")
NORMS = (None, "slaney")
PAD_MODES = ("reflect", "constant", "replicate", "circular")
LOGS = ("log10", "ln", "log2")

_MEL = Op(
    "mel_spectrogram",
    torch_impl="nbxsig.reference.mel:mel_spectrogram",
    triton_impl="nbxsig.kernels.mel:mel_spectrogram",
)


def hz_to_mel(f: float | torch.Tensor, mel_scale: str = "htk") -> float | torch.Tensor:
    """Convert frequencies in Hz to mels.

    Args:
        f: frequency in Hz (float or tensor).
        mel_scale: "htk" (``2595 log10(1 + f/700)``) or "slaney" (linear below 1 kHz, log above;
            librosa's default).

    Returns:
        Mels, a float for a float input, else a tensor of ``f``'s shape and dtype. Floats follow the
        tensor's arithmetic: on the HTK scale, -700 Hz gives -inf and lower frequencies NaN.

    Raises:
        ParameterValueError: unknown ``mel_scale``, or a float ``f`` that is not finite.
        ParameterTypeError: ``f`` neither a real number nor a real tensor (numpy arrays included:
            convert them with ``torch.from_numpy``).

    Example:
        >>> hz_to_mel(1000.0)  # doctest: +ELLIPSIS
        999.98...
    """
    check_choice("mel_scale", mel_scale, MEL_SCALES)
    if not isinstance(f, torch.Tensor):
        f = check_float("f", f, context="or a torch.Tensor")
    elif f.is_complex():  # the Slaney formulas' comparisons fail on it inside torch
        raise bad_type("f", f, "a real number or a real tensor")
    return _ref.hz_to_mel(f, mel_scale)


def mel_to_hz(m: float | torch.Tensor, mel_scale: str = "htk") -> float | torch.Tensor:
    """Convert mels to Hz: the inverse of :func:`hz_to_mel` (same arguments and errors); mels beyond
    float64's range of Hz give inf, for floats as for tensors."""
    check_choice("mel_scale", mel_scale, MEL_SCALES)
    if not isinstance(m, torch.Tensor):
        m = check_float("m", m, context="or a torch.Tensor")
    elif m.is_complex():
        raise bad_type("m", m, "a real number or a real tensor")
    return _ref.mel_to_hz(m, mel_scale)


def mel_filterbank(
    n_freqs: int,
    f_min: float,
    f_max: float,
    n_mels: int,
    sample_rate: int,
    norm: str | None = None,
    mel_scale: str = "htk",
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Triangular mel filter bank, equal to ``torchaudio.functional.melscale_fbanks``.

    Positional arguments mirror torchaudio's so it is a drop-in replacement. Computed in float64
    and rounded once to ``dtype``. Degenerate ranges behave as torchaudio's: ``f_min > f_max`` gives
    (mostly) zero filters, ``f_min == f_max`` gives NaN; empty filters warn (UserWarning).

    Args:
        n_freqs: number of STFT bins (``n_fft // 2 + 1``), >= 1.
        f_min, f_max: band edges in Hz, >= 0.
        n_mels: number of filters, >= 1.
        sample_rate: Hz, a whole number >= 1 (an integral float such as 16000.0 too, as torchaudio);
            bins are spaced over ``0..sample_rate // 2``.
        norm: None or "slaney" (divide each triangle by its width in Hz / 2: constant energy).
        mel_scale: "htk" or "slaney".
        dtype / device: of the result.

    Returns:
        ``(n_freqs, n_mels)`` tensor; ``spec.mT @ fb`` projects a ``(…, n_freqs, T)`` spectrogram.

    Raises:
        ParameterValueError / ParameterTypeError: a parameter outside the ranges above.

    Example:
        >>> mel_filterbank(201, 0.0, 8000.0, 80, 16000, norm="slaney", mel_scale="slaney").shape
        torch.Size([201, 80])
    """
    n_freqs = check_int("n_freqs", n_freqs, min_value=1)
    n_mels = check_int("n_mels", n_mels, min_value=1)
    sample_rate = check_sample_rate(sample_rate)
    f_min = check_float("f_min", f_min, min_value=0.0)
    f_max = check_float("f_max", f_max, min_value=0.0)
    check_choice("norm", norm, NORMS)
    check_choice("mel_scale", mel_scale, MEL_SCALES)
    if not isinstance(dtype, torch.dtype) or dtype not in FLOATING_DTYPES:
        # Rendered by repr: describe() reads a numpy scalar type (np.float32) as an array and fails.
        raise ParameterTypeError(
            f"dtype must be a floating torch dtype (torch.float16, torch.bfloat16, torch.float32 or "
            f"torch.float64), got {dtype!r}"
        )
    return _ref.mel_filterbank(
        n_freqs, f_min, f_max, n_mels, sample_rate, norm, mel_scale, dtype=dtype, device=check_device(device)
    )


# The cached tensors are made outside inference mode even when the first call runs under
# torch.inference_mode: an inference tensor tracks no version (the Triton backend's operand caches
# key on it, and raised) and cannot be saved for a later call's backward.
@lru_cache(maxsize=16)
def _cached_filter_bank(
    n_freqs, f_min, f_max, n_mels, sample_rate, norm, mel_scale, device
) -> tuple[torch.Tensor, tuple[str, ...]]:
    with torch.inference_mode(False), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fb = _ref.mel_filterbank(
            n_freqs, f_min, f_max, n_mels, sample_rate, norm, mel_scale, dtype=torch.float64, device=device
        )
    return fb, tuple(str(w.message) for w in caught)


def _cached_filters(n_freqs, f_min, f_max, n_mels, sample_rate, norm, mel_scale, device) -> torch.Tensor:
    """The float64 filter bank, cached; its warning (empty filters) is given on every call, as
    torchaudio's MelSpectrogram gives it on every construction (only the call that filled the cache
    warned)."""
    fb, messages = _cached_filter_bank(n_freqs, f_min, f_max, n_mels, sample_rate, norm, mel_scale, device)
    for message in messages:
        warnings.warn(message, UserWarning, stacklevel=4)  # the caller of mel_spectrogram & co.
    return fb


@lru_cache(maxsize=16)
def _cached_hann(win_length: int, n_fft: int, device: torch.device) -> torch.Tensor:
    with torch.inference_mode(False):
        hann = torch.hann_window(win_length, periodic=True, dtype=torch.float64, device=device)
        return _ref.padded_window(hann, win_length, n_fft, torch.float64, device)


def check_sample_rate(sample_rate) -> int:
    """A sample rate in Hz: a whole number >= 1. Integral floats (16000.0) are accepted, as torchaudio
    accepts them; 16000.5 and bools are not."""
    if (
        isinstance(sample_rate, numbers.Real)
        and not isinstance(sample_rate, numbers.Integral)
        and float(sample_rate).is_integer()
    ):
        sample_rate = int(sample_rate)
    return check_int("sample_rate", sample_rate, min_value=1)


def check_band(f_min, f_max, sample_rate: int) -> tuple[float, float]:
    """The mel band ``(f_min, f_max)`` in Hz, both >= 0 and in order; ``f_max=None`` is
    ``sample_rate // 2`` (torchaudio's default). torchaudio's MelSpectrogram and MelScale refuse
    ``f_min > f_max``, whose filters are (mostly) empty; :func:`mel_filterbank` alone allows it, as
    ``melscale_fbanks`` does."""
    f_min = check_float("f_min", f_min, min_value=0.0)
    f_max = float(sample_rate // 2) if f_max is None else check_float("f_max", f_max, min_value=0.0)
    if f_min > f_max:
        raise bad_value("f_min", f_min, f"<= f_max ({f_max})")
    return f_min, f_max


def spec_scale(normalized: bool | str, window: torch.Tensor, n_fft: int) -> float:
    """The factor torchaudio's ``normalized`` applies to the STFT: ``True``/"window" → ``1/‖w‖``,
    "frame_length" → ``1/√n_fft``, False → 1.

    A constant: no gradient flows through it to a window that requires one (on either backend). An
    all-zero window has no norm: inf, so the STFT is NaN, as torchaudio's division by 0 makes it."""
    if normalized is True or normalized == "window":
        energy = float(window.detach().double().pow(2).sum())
        return 1.0 / math.sqrt(energy) if energy > 0 else math.inf
    if normalized == "frame_length":
        return 1.0 / math.sqrt(n_fft)
    return 1.0


def check_normalized(normalized) -> bool | str:
    """torchaudio's ``normalized``: False, True, "window" or "frame_length" (not 0/1)."""
    if not isinstance(normalized, (bool, str)) or normalized not in (False, True, "window", "frame_length"):
        raise bad_value("normalized", normalized, "False, True, 'window' or 'frame_length'")
    return normalized


def resolve_frames(n_fft, win_length, hop_length) -> tuple[int, int, int]:
    """Validate ``n_fft``/``win_length``/``hop_length`` with torchaudio's defaults
    (``win_length = n_fft``, ``hop_length = win_length // 2``). The default hop is 0 for
    ``win_length = 1``, where torchaudio's STFT fails inside (it was silently 1 here): asked for."""
    n_fft = check_int("n_fft", n_fft, min_value=1)
    win_length = n_fft if win_length is None else check_int("win_length", win_length, min_value=1)
    if win_length > n_fft:
        raise bad_value("win_length", win_length, f"<= n_fft ({n_fft})")
    if hop_length is None:
        hop_length = win_length // 2
        if hop_length < 1:
            raise bad_value(
                "hop_length",
                hop_length,
                ">= 1",
                context=f"(the default win_length // 2 is 0 for win_length={win_length}; pass it)",
            )
    hop_length = check_int("hop_length", hop_length, min_value=1)
    return n_fft, win_length, hop_length


def prepare_window(window, win_length: int, n_fft: int, device: torch.device) -> torch.Tensor:
    """None → periodic Hann (cached); else a 1-D tensor of ``win_length`` samples, centred in ``n_fft``."""
    if window is None:
        return _cached_hann(win_length, n_fft, device)
    check_tensor("window", window, dtypes=FLOATING_DTYPES, min_dim=1, max_dim=1)
    if window.shape[0] != win_length:
        raise bad_value("window", window, f"a 1-D tensor of win_length={win_length} samples")
    return _ref.padded_window(window.to(device), win_length, n_fft, window.dtype, device)


def build_window(window_fn, win_length: int, wkwargs) -> torch.Tensor:
    """The transforms' window: ``window_fn(win_length, **wkwargs)`` (torchaudio's recipe), which must
    give a real 1-D tensor of ``win_length`` samples. torch.stft refuses any other window; without this
    check a longer one was silently cropped to ``n_fft`` and a complex one lost its imaginary part."""
    if not callable(window_fn):
        raise bad_type("window_fn", window_fn, "a callable such as torch.hann_window")
    if wkwargs is not None and not isinstance(wkwargs, Mapping):
        raise bad_type("wkwargs", wkwargs, "None or a dict of keyword arguments for window_fn")
    try:
        window = window_fn(win_length) if wkwargs is None else window_fn(win_length, **wkwargs)
    except TypeError as e:  # e.g. wkwargs naming an argument window_fn does not take
        raise ParameterTypeError(
            f"window_fn({win_length}, **wkwargs) failed with wkwargs={wkwargs!r}: {e}"
        ) from e
    if (
        not isinstance(window, torch.Tensor)
        or window.dtype.is_complex
        or window.dtype == torch.bool
        or window.dim() != 1
        or window.shape[0] != win_length
    ):
        raise ParameterValueError(
            f"window_fn must return a real 1-D tensor of win_length={win_length} samples, "
            f"got {describe(window)}"
        )
    return window


def check_signal(name: str, x, *, n_fft: int, center: bool, pad_mode: str, added: int = 0) -> torch.Tensor:
    """A floating ``(…, L)`` signal that ``L + added`` samples (``added``: zeros the caller appends
    first, e.g. the transforms' ``pad`` on both sides) make long enough for the STFT. The error names
    the caller's tensor, not a reshaped or padded one.

    Centre padding by ``n_fft // 2`` needs more samples than that to reflect and at least that many to
    wrap circularly: torch refuses a circular pad that would wrap more than once. A signal of no
    samples is one when ``added`` makes it long enough (torchaudio's ``pad``, Whisper's ``padding``);
    an empty batch never is.
    """
    check_tensor(name, x, dtypes=FLOATING_DTYPES, min_dim=1, allow_empty=added > 0)
    if x.shape[:-1].numel() == 0:
        raise bad_value(name, x, "a non-empty tensor")
    length = x.shape[-1] + added
    half = n_fft // 2
    padded = f" after {added} samples of padding" if added else ""
    if center and pad_mode == "reflect" and length <= half:
        raise bad_value(
            name,
            x,
            f"a signal longer than n_fft // 2 = {half} samples{padded}",
            context="for center=True with pad_mode='reflect'",
        )
    if center and pad_mode == "circular" and length < half:
        raise bad_value(
            name,
            x,
            f"a signal of at least n_fft // 2 = {half} samples{padded}",
            context="for center=True with pad_mode='circular'",
        )
    if length + (2 * half if center else 0) < n_fft:
        raise bad_value(
            name, x, f"a signal of at least n_fft = {n_fft} samples{padded}", context="for center=False"
        )
    return x


def _mel(
    input: torch.Tensor,
    *,
    sample_rate,
    n_fft,
    win_length,
    hop_length,
    f_min,
    f_max,
    n_mels,
    window,
    power,
    normalized,
    center,
    pad_mode,
    norm,
    mel_scale,
    floor,
    log,
    drop_last=False,
    whisper=False,
    backend,
) -> torch.Tensor:
    sample_rate = check_sample_rate(sample_rate)
    n_fft, win_length, hop_length = resolve_frames(n_fft, win_length, hop_length)
    n_mels = check_int("n_mels", n_mels, min_value=1)
    f_min, f_max = check_band(f_min, f_max, sample_rate)
    power = check_float("power", power, min_value=0.0, min_inclusive=False)
    normalized = check_normalized(normalized)
    check_choice("center", center, (True, False))
    check_choice("pad_mode", pad_mode, PAD_MODES)
    check_choice("norm", norm, NORMS)
    check_choice("mel_scale", mel_scale, MEL_SCALES)
    if floor is not None:
        floor = check_float("floor", floor, min_value=0.0, min_inclusive=False)
    if log is not None:
        check_choice("log", log, LOGS)
    check_signal("input", input, n_fft=n_fft, center=center, pad_mode=pad_mode)
    device = input.device
    w = prepare_window(window, win_length, n_fft, device)
    filters = _cached_filters(n_fft // 2 + 1, f_min, f_max, n_mels, sample_rate, norm, mel_scale, device)
    x = input.reshape(-1, input.shape[-1])
    chosen = _MEL.backend(backend, device=device, dtype=input.dtype, numel=input.numel())
    out = _MEL(
        x,
        n_fft=n_fft,
        hop_length=hop_length,
        window=w,
        filters=filters,
        power=power,
        scale=spec_scale(normalized, w, n_fft),
        center=center,
        pad_mode=pad_mode,
        floor=floor,
        log=log,
        drop_last=drop_last,
        whisper=whisper,
        backend=chosen,
    )
    return out.reshape(*input.shape[:-1], *out.shape[-2:])


def mel_spectrogram(
    input: torch.Tensor,
    *,
    sample_rate: int = 16000,
    n_fft: int = 400,
    win_length: int | None = None,
    hop_length: int | None = None,
    f_min: float = 0.0,
    f_max: float | None = None,
    n_mels: int = 128,
    window: torch.Tensor | None = None,
    power: float = 2.0,
    normalized: bool | str = False,
    center: bool = True,
    pad_mode: str = "reflect",
    norm: str | None = None,
    mel_scale: str = "htk",
    backend: Backend | None = None,
) -> torch.Tensor:
    """Mel spectrogram, equal to ``torchaudio.transforms.MelSpectrogram`` with the same arguments.

    Args:
        input: waveform ``(…, L)``, float16/bfloat16/float32/float64 (float16/bfloat16 computed in
            float32 and returned in their dtype).
        sample_rate: Hz, a whole number (default 16000; 16000.0 is accepted).
        n_fft: DFT size (default 400). win_length: window length (default ``n_fft``).
        hop_length: frame step in samples (default ``win_length // 2``, torchaudio's).
        f_min, f_max: mel band edges in Hz (default 0 and ``sample_rate // 2``).
        n_mels: number of mel bands (default 128).
        window: ``(win_length,)`` tensor; None → periodic Hann (torchaudio's ``torch.hann_window``).
        power: exponent of ``|X|`` (> 0; default 2, power).
        normalized: False, True/"window" (divide the STFT by ``‖w‖``) or "frame_length" (by ``√n_fft``).
        center: pad ``n_fft // 2`` on both sides so frame t is centred at ``t·hop`` (default True).
        pad_mode: "reflect" (default), "constant", "replicate" or "circular".
        norm: None or "slaney"; mel_scale: "htk" (default) or "slaney" (see :func:`mel_filterbank`).
        backend: None (auto: Triton on CUDA float16/bfloat16/float32), "triton" or "torch".

    Returns:
        ``(…, n_mels, T)`` in ``input``'s dtype with ``T = 1 + (L + 2·pad − n_fft) // hop``.

    Shape:
        ``(…, L)`` → ``(…, n_mels, T)``.

    Raises:
        ParameterValueError / ParameterTypeError: bad argument (named in the message), ``f_min >
        f_max`` (as torchaudio's MelSpectrogram), or a signal too short for ``n_fft`` (or for reflect or
        circular padding).
        BackendUnavailableError: ``backend="triton"`` where Triton cannot run.

    Autograd: both backends; the Triton backward recomputes the torch twin, and its gradient is
    finite where ``|X| = 0`` (for every ``power``).

    Example:
        >>> mel_spectrogram(torch.randn(16000), n_mels=80, hop_length=160).shape
        torch.Size([80, 101])
    """
    return _mel(
        input,
        sample_rate=sample_rate,
        n_fft=n_fft,
        win_length=win_length,
        hop_length=hop_length,
        f_min=f_min,
        f_max=f_max,
        n_mels=n_mels,
        window=window,
        power=power,
        normalized=normalized,
        center=center,
        pad_mode=pad_mode,
        norm=norm,
        mel_scale=mel_scale,
        floor=None,
        log=None,
        backend=backend,
    )


def log_mel_spectrogram(
    input: torch.Tensor,
    *,
    sample_rate: int = 16000,
    n_fft: int = 400,
    win_length: int | None = None,
    hop_length: int | None = None,
    f_min: float = 0.0,
    f_max: float | None = None,
    n_mels: int = 128,
    window: torch.Tensor | None = None,
    power: float = 2.0,
    normalized: bool | str = False,
    center: bool = True,
    pad_mode: str = "reflect",
    norm: str | None = None,
    mel_scale: str = "htk",
    floor: float = 1e-10,
    log: str = "log10",
    backend: Backend | None = None,
) -> torch.Tensor:
    """``log(max(mel_spectrogram(...), floor))``, fused into the mel kernel on the Triton backend.

    Args:
        floor: clamp before the log (> 0; default 1e-10).
        log: "log10" (default), "ln" or "log2".
        Others: as :func:`mel_spectrogram`.

    Returns / Shape / Raises: as :func:`mel_spectrogram`.

    Example:
        >>> log_mel_spectrogram(torch.randn(16000), n_mels=80, hop_length=160).shape
        torch.Size([80, 101])
    """
    return _mel(
        input,
        sample_rate=sample_rate,
        n_fft=n_fft,
        win_length=win_length,
        hop_length=hop_length,
        f_min=f_min,
        f_max=f_max,
        n_mels=n_mels,
        window=window,
        power=power,
        normalized=normalized,
        center=center,
        pad_mode=pad_mode,
        norm=norm,
        mel_scale=mel_scale,
        floor=floor,
        log=log,
        backend=backend,
    )


def whisper_log_mel(
    audio: torch.Tensor, n_mels: int = 80, padding: int = 0, *, backend: Backend | None = None
) -> torch.Tensor:
    """OpenAI Whisper's ``log_mel_spectrogram``, batched.

    16 kHz, ``n_fft = 400``, hop 160, periodic Hann, centre reflect padding, last frame dropped,
    ``|X|²``, librosa/Slaney mel filters (``slaney`` scale and norm), ``log10(max(·, 1e-10))``, floor at
    ``max − 8`` and ``(x + 4) / 4``. Unlike Whisper's code, which takes the maximum over the whole
    tensor, the maximum here is **per example** (over that example's mels and frames), so a batch
    gives each clip the features it would get alone; for one clip both agree.

    Args:
        audio: ``(…, L)`` waveform at 16 kHz.
        n_mels: 80 or 128 (Whisper large-v3).
        padding: zeros appended to the end before the STFT (Whisper's ``padding``), >= 0.
        backend: None, "triton" or "torch".

    Returns:
        ``(…, n_mels, (L + padding) // 160)``.

    Raises:
        ParameterValueError: ``n_mels`` not 80/128, negative ``padding``, audio of <= 200 samples
        (``padding`` included).

    Example:
        >>> whisper_log_mel(torch.randn(16000 * 2)).shape
        torch.Size([80, 200])
    """
    n_mels = check_choice("n_mels", n_mels, (80, 128))
    padding = check_int("padding", padding, min_value=0)
    check_signal("audio", audio, n_fft=400, center=True, pad_mode="reflect", added=padding)
    if padding:
        audio = torch.nn.functional.pad(audio, (0, padding))
    return _mel(
        audio,
        sample_rate=16000,
        n_fft=400,
        win_length=None,
        hop_length=160,
        f_min=0.0,
        f_max=8000.0,
        n_mels=n_mels,
        window=None,
        power=2.0,
        normalized=False,
        center=True,
        pad_mode="reflect",
        norm="slaney",
        mel_scale="slaney",
        floor=1e-10,
        log="log10",
        drop_last=True,
        whisper=True,
        backend=backend,
    )


def amplitude_to_db(
    x: torch.Tensor,
    multiplier: float = 10.0,
    amin: float = 1e-10,
    db_multiplier: float = 0.0,
    top_db: float | None = None,
) -> torch.Tensor:
    """Power/amplitude → dB, equal to ``torchaudio.functional.amplitude_to_DB``.

    ``multiplier · log10(max(x, amin)) − multiplier · db_multiplier``, then, with ``top_db``, floored
    at ``max − top_db`` where the maximum is taken per item over the last three dimensions for
    inputs of 4+ dimensions and over the whole input for 2-D/3-D input (torchaudio's rule).

    Args:
        x: any shape; ``(…, freq, time)`` (>= 2 dimensions) with ``top_db``.
        multiplier: 10 for power, 20 for amplitude.
        amin: clamp (> 0). db_multiplier: ``log10(max(ref, amin))``.
        top_db: dynamic range in dB (>= 0) or None.

    Returns:
        Tensor of ``x``'s shape and dtype (empty for an empty ``x``, which torchaudio fails on).

    Raises:
        ParameterValueError / ParameterTypeError: bad argument.

    Example:
        >>> amplitude_to_db(torch.tensor([[1.0, 10.0]]))
        tensor([[ 0., 10.]])
    """
    if top_db is not None:
        top_db = check_float("top_db", top_db, min_value=0.0)
    # The floor needs (…, freq, time); without it the conversion is elementwise on any shape (torchaudio's).
    check_tensor("x", x, dtypes=FLOATING_DTYPES, min_dim=0 if top_db is None else 2, allow_empty=True)
    multiplier = check_float("multiplier", multiplier)
    amin = check_float("amin", amin, min_value=0.0, min_inclusive=False)
    db_multiplier = check_float("db_multiplier", db_multiplier)
    x_db = multiplier * torch.log10(torch.clamp(x, min=amin)) - multiplier * db_multiplier
    # An empty input has no maximum to floor at: returned as is (torchaudio's reshape fails on it).
    if top_db is not None and x_db.numel() > 0:
        shape = x_db.shape
        packed = shape[-3] if x_db.dim() > 2 else 1
        x_db = x_db.reshape(-1, packed, shape[-2], shape[-1])
        x_db = torch.max(x_db, (x_db.amax(dim=(-3, -2, -1)) - top_db).view(-1, 1, 1, 1)).reshape(shape)
    return x_db
