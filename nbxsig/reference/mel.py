"""Mel features in plain torch: the CPU path, the float64 oracle and the ONNX-exportable graph.

The exported graph is built from real-valued ops only -- padding, ``unfold`` into frames, a matmul with
a windowed DFT basis, ``fold`` for overlap-add -- so it exports to ONNX (no complex tensors, no FFT
op) and runs in float64. Eagerly, :func:`spectrogram` transforms with ``torch.fft`` instead
(torchaudio's algorithm: O(n_fft log n_fft) a frame against the basis's O(n_fft²), the CPU path's
speed). Bases and filters are computed in float64 and rounded once.
"""

from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F

from .dft import compute_dtype, rdft_basis

# Slaney's mel scale (librosa / torchaudio): linear below 1 kHz, logarithmic above.
_F_SP = 200.0 / 3
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = _MIN_LOG_HZ / _F_SP
_LOGSTEP = math.log(6.4) / 27.0


def hz_to_mel(freq, mel_scale: str = "htk"):
    """Hz → mel for a float or a tensor (same formulas as torchaudio/librosa).

    A float is evaluated as a float64 tensor, so both follow IEEE arithmetic: on the HTK scale -700 Hz
    is -inf mels and lower frequencies NaN (torchaudio's float path raises ``math domain error``)."""
    if not isinstance(freq, torch.Tensor):
        return hz_to_mel(torch.tensor(float(freq), dtype=torch.float64), mel_scale).item()
    if mel_scale == "htk":
        return 2595.0 * torch.log10(1.0 + freq / 700.0)
    lin = freq / _F_SP
    log = _MIN_LOG_MEL + torch.log(torch.clamp(freq, min=_MIN_LOG_HZ) / _MIN_LOG_HZ) / _LOGSTEP
    return torch.where(freq >= _MIN_LOG_HZ, log, lin)


def mel_to_hz(mels, mel_scale: str = "htk"):
    """mel → Hz for a float or a tensor (same formulas as torchaudio/librosa).

    A float is evaluated as a float64 tensor, as in :func:`hz_to_mel`: mels beyond float64's range of
    Hz give inf (torchaudio's float path raises ``OverflowError``)."""
    if not isinstance(mels, torch.Tensor):
        return mel_to_hz(torch.tensor(float(mels), dtype=torch.float64), mel_scale).item()
    if mel_scale == "htk":
        return 700.0 * (10.0 ** (mels / 2595.0) - 1.0)
    lin = _F_SP * mels
    log = _MIN_LOG_HZ * torch.exp(_LOGSTEP * (mels - _MIN_LOG_MEL))
    return torch.where(mels >= _MIN_LOG_MEL, log, lin)


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
    """torchaudio.functional.melscale_fbanks computed in float64 and rounded once: ``(n_freqs, n_mels)``."""
    f64 = torch.float64
    # torchaudio spaces the bins up to sample_rate // 2 (integer division), which we keep for equality.
    all_freqs = torch.linspace(0, sample_rate // 2, n_freqs, dtype=f64)
    m_pts = torch.linspace(hz_to_mel(f_min, mel_scale), hz_to_mel(f_max, mel_scale), n_mels + 2, dtype=f64)
    f_pts = mel_to_hz(m_pts, mel_scale)
    f_diff = f_pts[1:] - f_pts[:-1]
    slopes = f_pts.unsqueeze(0) - all_freqs.unsqueeze(1)
    down = (-1.0 * slopes[:, :-2]) / f_diff[:-1]
    up = slopes[:, 2:] / f_diff[1:]
    # torch.max/min propagate NaN (a zero-width band when f_min == f_max), as torchaudio's do.
    fb = torch.max(torch.zeros(1, dtype=f64), torch.min(down, up))
    if norm == "slaney":
        fb = fb * (2.0 / (f_pts[2 : n_mels + 2] - f_pts[:n_mels])).unsqueeze(0)
    if n_freqs > 0 and n_mels > 0 and (fb.max(dim=0).values == 0.0).any():
        warnings.warn(
            "At least one mel filterbank has all zero values. "
            f"The value for `n_mels` ({n_mels}) may be set too high. "
            f"Or, the value for `n_freqs` ({n_freqs}) may be set too low.",
            stacklevel=3,
        )
    return fb.to(dtype=dtype, device=device)


def padded_window(window: torch.Tensor | None, win_length: int, n_fft: int, dtype, device) -> torch.Tensor:
    """The window as torch.stft uses it: ones when None, centred and zero-padded to ``n_fft``."""
    if window is None:
        window = torch.ones(win_length, dtype=torch.float64, device=device)
    window = window.to(device=device, dtype=torch.float64 if dtype == torch.float64 else window.dtype)
    left = (n_fft - window.shape[-1]) // 2
    return F.pad(window, (left, n_fft - window.shape[-1] - left))


def analysis_basis(
    window: torch.Tensor, n_fft: int, scale: float, *, dtype, device, onesided: bool = True
) -> torch.Tensor:
    """Windowed forward basis ``(n_fft, 2F)``: columns ``[cos·w | -sin·w]·scale``, rounded once."""
    basis = rdft_basis(n_fft, onesided=onesided, dtype=torch.float64, device=device)  # (2, F, n)
    w = window.to(device=device, dtype=torch.float64)
    return (basis * (w * scale)).reshape(-1, n_fft).T.to(dtype).contiguous()


def pad_signal(x: torch.Tensor, pad: int, mode: str) -> torch.Tensor:
    """Pad the last dimension of ``(B, L)`` by ``pad`` on both sides (torch.stft's centre padding)."""
    if pad == 0:
        return x
    if mode == "constant":
        return F.pad(x, (pad, pad))
    return F.pad(x.unsqueeze(1), (pad, pad), mode=mode)[:, 0]


def stft_parts(
    x: torch.Tensor,
    *,
    n_fft: int,
    hop_length: int,
    basis: torch.Tensor,
    center: bool,
    pad_mode: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Real and imaginary parts ``(B, F, T)`` of the STFT of ``x`` ``(B, L)`` with a windowed basis."""
    if center:
        x = pad_signal(x, n_fft // 2, pad_mode)
    n_freq = basis.shape[-1] // 2
    if _exporting():
        # ONNX has no dynamic-length unfold: the same dot products as a strided Conv (its weights
        # are the basis). Not used eagerly because cuDNN may run convolutions in TF32.
        spec = F.conv1d(x.unsqueeze(1), basis.T.unsqueeze(1), stride=hop_length)  # (B, 2F, T)
        return spec[:, :n_freq], spec[:, n_freq:]
    frames = x.unfold(-1, n_fft, hop_length)  # (B, T, n): a view, no copy
    spec = torch.matmul(frames, basis)  # (B, T, 2F)
    return spec[..., :n_freq].transpose(-1, -2), spec[..., n_freq:].transpose(-1, -2)


def fft_parts(
    x: torch.Tensor,
    *,
    n_fft: int,
    hop_length: int,
    weights: torch.Tensor,
    center: bool,
    pad_mode: str,
    onesided: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`stft_parts` by ``torch.fft`` on frames times ``weights`` (the window with the STFT's scale,
    ``(n_fft,)`` in x's dtype): torchaudio's algorithm, O(n_fft log n_fft) a frame against the basis
    matmul's O(n_fft²) -- the eager CPU path's form; the matmul stays the exported graph's."""
    if center:
        x = pad_signal(x, n_fft // 2, pad_mode)
    frames = x.unfold(-1, n_fft, hop_length) * weights
    spec = (torch.fft.rfft(frames, dim=-1) if onesided else torch.fft.fft(frames, dim=-1)).transpose(-1, -2)
    return spec.real, spec.imag


def power_of(re: torch.Tensor, im: torch.Tensor, power: float) -> torch.Tensor:
    """``|X|^power`` with a gradient that is finite (zero) where ``|X| = 0``.

    ``sqrt`` and fractional powers have an infinite derivative at 0 (the NaN of pytorch/audio#993);
    evaluating them on ``where(p != 0, p, 1)`` and masking keeps the value and zeroes that gradient.
    A NaN bin stays NaN, as in torchaudio (masked by ``p > 0``, it was 0).
    """
    p = re * re + im * im
    if power == 2.0:
        return p
    nonzero = p != 0
    safe = torch.where(nonzero, p, torch.ones_like(p))
    value = torch.sqrt(safe) if power == 1.0 else safe.pow(power / 2.0)
    return torch.where(nonzero, value, torch.zeros_like(p))


def spectrogram(
    x: torch.Tensor,
    *,
    n_fft: int,
    hop_length: int,
    window: torch.Tensor,
    power: float | None,
    scale: float,
    center: bool,
    pad_mode: str,
) -> torch.Tensor:
    """``(B, L)`` → ``(B, F, T)`` power spectrogram, or complex when ``power`` is None, computed and
    returned in :func:`compute_dtype` (float32 for float16/bfloat16 input)."""
    x = x.to(compute_dtype(x.dtype))
    if _exporting():
        basis = analysis_basis(window, n_fft, scale, dtype=x.dtype, device=x.device)
        re, im = stft_parts(
            x, n_fft=n_fft, hop_length=hop_length, basis=basis, center=center, pad_mode=pad_mode
        )
    else:
        weights = (window.to(device=x.device, dtype=torch.float64) * scale).to(x.dtype)
        re, im = fft_parts(
            x, n_fft=n_fft, hop_length=hop_length, weights=weights, center=center, pad_mode=pad_mode
        )
    if power is None:
        return torch.complex(re, im)
    return power_of(re, im, power)


def log_of(x: torch.Tensor, floor: float | None, log: str | None) -> torch.Tensor:
    """``log(max(x, floor))`` in base 10, e or 2 (``log=None``: no log)."""
    if floor is not None:
        x = torch.clamp(x, min=floor)
    if log is None:
        return x
    return {"log10": torch.log10, "ln": torch.log, "log2": torch.log2}[log](x)


def mel_spectrogram(
    x: torch.Tensor,
    *,
    n_fft: int,
    hop_length: int,
    window: torch.Tensor,
    filters: torch.Tensor,
    power: float,
    scale: float,
    center: bool,
    pad_mode: str,
    floor: float | None = None,
    log: str | None = None,
    drop_last: bool = False,
    whisper: bool = False,
) -> torch.Tensor:
    """``(B, L)`` → ``(B, n_mels, T)``: power spectrogram projected on ``filters`` ``(F, n_mels)``,
    optionally ``log(max(·, floor))``; ``drop_last`` drops the last frame and ``whisper`` applies
    :func:`whisper_finish` (Whisper's recipe). Computed in :func:`compute_dtype`, returned in ``x``'s
    dtype."""
    spec = spectrogram(
        x,
        n_fft=n_fft,
        hop_length=hop_length,
        window=window,
        power=power,
        scale=scale,
        center=center,
        pad_mode=pad_mode,
    )
    if drop_last:
        spec = spec[..., :-1]
    mel = torch.matmul(spec.transpose(-1, -2), filters.to(spec.dtype)).transpose(-1, -2)
    out = log_of(mel, floor, log)
    return (whisper_finish(out) if whisper else out).to(x.dtype)


def whisper_finish(log_spec: torch.Tensor) -> torch.Tensor:
    """Whisper's dynamic-range floor and affine map, per example: ``(max(x, max_b x − 8) + 4) / 4``."""
    peak = log_spec.amax(dim=(-2, -1), keepdim=True)
    return (torch.maximum(log_spec, peak - 8.0) + 4.0) / 4.0


def _exporting() -> bool:
    return torch.onnx.is_in_onnx_export() or torch.compiler.is_compiling() or torch.jit.is_tracing()
