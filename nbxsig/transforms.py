"""torchaudio-compatible modules: Spectrogram, MelSpectrogram, InverseSpectrogram, MelScale.

Constructor arguments, defaults, buffers and ``state_dict`` keys are torchaudio.transforms' (a
torchaudio checkpoint loads into these modules), and the outputs are the same. Differences:

* under export the STFT is real-valued ops only (a matmul with a windowed DFT basis; a transposed
  convolution overlap-adds the inverse; eagerly both run ``torch.fft``), so every module built with
  ``backend="torch"`` exports with ``torch.onnx.export`` (no complex op);
* ``MelSpectrogram`` runs the Triton backend on CUDA float16/bfloat16/float32 input
  (``backend=None``); pass ``backend="torch"`` for the twin;
* ``Spectrogram(power=None)`` returns a complex tensor (as torchaudio) and is not exportable;
  ``InverseSpectrogram`` also takes a real ``(…, F, T, 2)`` tensor (``torch.view_as_real`` layout),
  which is exportable.

Result dtypes follow torch.stft's type promotion of the signal with the window, as torchaudio's do:
a float64 window (a ``window_fn`` that gives one, or a module converted with ``.double()``) gives
float64 (complex128) results for float16/bfloat16/float32 input too, on every backend. Two
differences: float16/bfloat16 input with a float16/bfloat16/float32 window is computed in float32 and
returned in its own dtype (torchaudio returns float32); and where torchaudio's ``MelSpectrogram``
fails (its float32 mel filters meet a float64 spectrogram: float64 input, or a float64 window in a
module not wholly converted), nbxsig projects in the spectrogram's dtype, as its ``MelScale`` does.

Example:
    >>> import torch, nbxsig.transforms as T
    >>> T.MelSpectrogram(16000, n_fft=400, hop_length=160, n_mels=80)(torch.randn(16000)).shape
    torch.Size([80, 101])
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from . import features as _f
from ._dispatch import Backend, check_backend
from ._validate import (
    FLOATING_DTYPES,
    check_bool,
    check_choice,
    check_float,
    check_int,
    check_istft_output,
    check_tensor,
)
from .errors import BackendUnavailableError, bad_value
from .reference import mel as _ref
from .reference import stft as _stft_ref

__all__ = ["InverseSpectrogram", "MelScale", "MelSpectrogram", "Spectrogram"]


def _norm_flags(normalized) -> bool | str:
    return _f.check_normalized(normalized)


def _result_dtype(signal: torch.dtype, window: torch.dtype) -> torch.dtype:
    """The real dtype of a transform's result for a ``signal`` (waveform, or the real dtype of a
    spectrogram) and a ``window`` dtype.

    torch.stft / torch.istft promote the signal with the window (``torch.promote_types``), so
    torchaudio returns float64 (complex128) for a float64 window whatever the input; nbxsig does the
    same. A float16/bfloat16 signal with a narrower window keeps its dtype (computed in float32 and
    rounded once, nbxsig's contract), where torchaudio's promotion gives float32.

    Example:
        >>> _result_dtype(torch.float32, torch.float64), _result_dtype(torch.float16, torch.float32)
        (torch.float64, torch.float16)
    """
    return torch.float64 if torch.float64 in (signal, window) else signal


def _batched(waveform: torch.Tensor) -> torch.Tensor:
    """``(…, L)`` → ``(B, L)``; a signal of no samples (which ``pad`` fills) leaves no -1 to infer."""
    if waveform.shape[-1] == 0:
        return waveform.reshape(waveform.shape[:-1].numel(), 0)
    return waveform.reshape(-1, waveform.shape[-1])


class Spectrogram(nn.Module):
    """Power/magnitude (or complex) spectrogram, as ``torchaudio.transforms.Spectrogram``.

    Args:
        n_fft: DFT size (default 400). win_length: default ``n_fft``. hop_length: default ``win_length // 2``.
        pad: zeros added on both sides before the STFT (default 0).
        window_fn: ``window_fn(win_length, **wkwargs)`` builds the window (default ``torch.hann_window``).
        power: exponent of ``|X|`` (> 0) or None for the complex STFT (default 2).
        normalized: False, True/"window" or "frame_length" (torchaudio's meanings).
        wkwargs: keyword arguments of ``window_fn``.
        center, pad_mode: torch.stft's centre padding (default True, "reflect").
        onesided: bins ``0..n_fft//2`` (default True; None is True, as in torch.stft) or all ``n_fft``.
        return_complex: accepted and ignored (deprecated in torchaudio).

    The result's dtype is the input's promoted with the window's, as in torch.stft: float64
    (complex128 for ``power=None``) for float64 input or a float64 window (``window_fn`` returning
    float64, or ``.double()``), else the input's. float16/bfloat16 input is computed in float32; the
    power spectrogram is returned in the input's dtype, the complex one (``power=None``) as complex64
    (torchaudio returns float32 / complex64 for them).

    Shape:
        ``(…, L)`` → ``(…, F, T)``.

    The buffer ``window`` may be replaced or edited in place (``load_state_dict`` included): what is
    derived from it (the padded window, the normalisation, the float32 basis of exports) is cached,
    keyed on the tensor and its version. An in-place edit must therefore be an ordinary in-place
    tensor op (``mul_``, ``copy_``, indexing assignment), which bumps the version; a write through
    ``.data`` or a NumPy view of the storage does not, and the cached paths keep the old window
    (torchaudio, which caches nothing, reads it). The basis is a non-persistent buffer (``basis``),
    one more entry in ``named_buffers()`` than torchaudio's module has; ``state_dict`` is theirs.

    Raises:
        ParameterValueError / ParameterTypeError: bad argument, including a ``window_fn`` (with
        ``wkwargs``) that does not give a real 1-D tensor of ``win_length`` samples.
    """

    def __init__(
        self,
        n_fft: int = 400,
        win_length: int | None = None,
        hop_length: int | None = None,
        pad: int = 0,
        window_fn: Callable[..., torch.Tensor] = torch.hann_window,
        power: float | None = 2.0,
        normalized: bool | str = False,
        wkwargs: dict | None = None,
        center: bool = True,
        pad_mode: str = "reflect",
        onesided: bool | None = True,
        return_complex: bool | None = None,
    ) -> None:
        super().__init__()
        self.n_fft, self.win_length, self.hop_length = _f.resolve_frames(n_fft, win_length, hop_length)
        self.pad = check_int("pad", pad, min_value=0)
        self.power = (
            None if power is None else check_float("power", power, min_value=0.0, min_inclusive=False)
        )
        self.normalized = _norm_flags(normalized)
        self.center = check_choice("center", center, (True, False))
        self.pad_mode = check_choice("pad_mode", pad_mode, _f.PAD_MODES)
        # torch.stft's onesided=None is its default for real input, True (bool(None) was two-sided).
        self.onesided = True if onesided is None else check_bool("onesided", onesided)
        # Outside inference mode, so that a module built under torch.inference_mode keeps its caches
        # (an inference tensor has no version counter to key them on).
        with torch.inference_mode(False):
            self.register_buffer("window", _f.build_window(window_fn, self.win_length, wkwargs))
            # The windowed basis, built once in float64 and rounded (not in state_dict: torchaudio has
            # none).
            self.register_buffer("basis", self._basis(torch.float32).detach(), persistent=False)
        self._basis_key = self._window_key

    def _padded_window(self) -> torch.Tensor:
        return _ref.padded_window(self.window, self.win_length, self.n_fft, torch.float64, self.window.device)

    def _window_state(self) -> tuple[torch.Tensor, float]:
        """The padded window and the STFT's scale, cached per window buffer (address, version, device):
        MelSpectrogram's Triton path asks on every forward, where padding the window would cost
        launches and the window-norm scale a device-to-host read; the torch path's float32 basis is
        rebuilt when the key moves (:meth:`_float32_basis`).

        A window made under ``torch.inference_mode`` (a module moved there with ``.to()``) tracks no
        version, so an in-place edit of it could not be seen: its key never matches (rebuilt on every
        call). The padded window is made outside inference mode, so the kernels' caches can keep it.

        The cached padded window carries no graph; a window that requires grad (with grad enabled)
        gets this call's own padded copy, so its gradient flows as in torchaudio. The cache, keyed on
        the address and version only, served a copy made before ``window.requires_grad_()`` (no
        gradient, silently), and a graph kept in it made the module impossible to deep-copy.

        The key holds the window's ``id`` and the cache the window itself: keyed on the address and
        version alone, a window replaced by a new tensor that the allocator put at the freed one's
        address (``.half().float()`` did, at times) read the old window's cache. Held, neither the id
        nor the storage can pass to another tensor, as the STFT plans keep theirs."""
        w = self.window
        key = (id(w), w.data_ptr(), object() if w.is_inference() else w._version, w.device)
        if getattr(self, "_window_key", None) != key:
            with torch.inference_mode(False):
                padded = self._padded_window().detach()
            self._window_cache = (padded, _f.spec_scale(self.normalized, padded, self.n_fft))
            self._window_key = key
            self.__dict__["_window_source"] = w  # not setattr: a Parameter window would be registered
        if w.requires_grad and torch.is_grad_enabled():
            return self._padded_window(), self._window_cache[1]
        return self._window_cache

    def _scale(self) -> float:
        return self._window_state()[1]

    def _float32_basis(self) -> torch.Tensor:
        # The buffer, rebuilt when the window changed since it was built (in place, or by
        # load_state_dict, as torchaudio's modules read their window on every call).
        if not _ref._exporting():
            self._window_state()  # refreshes _window_key
            if self._basis_key != self._window_key:
                with torch.inference_mode(False):  # kept for later calls, which may need its gradient
                    # Detached: a buffer holding a window's graph cannot be deep-copied.
                    self.basis = self._basis(torch.float32).detach()
                self._basis_key = self._window_key
        return self.basis

    def _basis(self, dtype: torch.dtype) -> torch.Tensor:
        padded, scale = self._window_state()
        return _ref.analysis_basis(
            padded,
            self.n_fft,
            scale,
            dtype=dtype,
            device=self.window.device,
            onesided=self.onesided,
        )

    def _check_signal(self, waveform: torch.Tensor) -> None:
        """Refuse a waveform this STFT cannot take (named with the caller's shape, before ``pad``)."""
        _f.check_signal(
            "waveform",
            waveform,
            n_fft=self.n_fft,
            center=self.center,
            pad_mode=self.pad_mode,
            added=2 * self.pad,
        )

    def _parts(self, waveform: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The STFT's real and imaginary parts ``(B, F, T)``, in ``_ref.compute_dtype`` of
        :func:`_result_dtype` (float64 for a float64 input or window; float32 for float16/bfloat16
        input, whose ``|X|²`` would overflow)."""
        if not _ref._exporting():
            self._check_signal(waveform)
        dtype = _ref.compute_dtype(_result_dtype(waveform.dtype, self.window.dtype))
        x = _batched(waveform).to(dtype)
        if self.pad > 0:
            x = torch.nn.functional.pad(x, (self.pad, self.pad))
        if not _ref._exporting():
            # Eagerly torch.fft (torchaudio's algorithm); the basis buffer's matmul is the exported form,
            # kept in step with the window here as before.
            self._float32_basis()
            padded, scale = self._window_state()
            return _ref.fft_parts(
                x,
                n_fft=self.n_fft,
                hop_length=self.hop_length,
                weights=(padded * scale).to(x.dtype),
                center=self.center,
                pad_mode=self.pad_mode,
                onesided=self.onesided,
            )
        # The float32 buffer serves float32 input; other dtypes (float64 above all) get a basis
        # rounded once from float64 rather than a converted float32 one.
        float32 = self.basis.dtype == x.dtype == torch.float32
        basis = self._float32_basis() if float32 else self._basis(x.dtype)
        return _ref.stft_parts(
            x,
            n_fft=self.n_fft,
            hop_length=self.hop_length,
            basis=basis,
            center=self.center,
            pad_mode=self.pad_mode,
        )

    def forward(self, waveform: torch.Tensor) -> torch.Tensor:
        re, im = self._parts(waveform)
        if self.power is None:
            # complex64 for float16/bfloat16 input: bfloat16 has no complex dtype, and complex32
            # (float16's) is experimental in torch, most ops refuse it.
            out = torch.complex(re, im)
        else:
            out = _ref.power_of(re, im, self.power).to(_result_dtype(waveform.dtype, self.window.dtype))
        return out.reshape(*waveform.shape[:-1], *out.shape[-2:])


class MelScale(nn.Module):
    """Project a ``(…, n_stft, T)`` spectrogram on mel filters, as ``torchaudio.transforms.MelScale``.

    Args:
        n_mels: default 128. sample_rate: default 16000 (an integral float such as 16000.0 too).
        f_min: default 0. f_max: default ``sample_rate // 2``; ``f_min <= f_max``.
        n_stft: number of STFT bins (default 201). norm: None or "slaney". mel_scale: "htk" or "slaney".

    The filters (buffer ``fb``) are made in the default dtype, as torchaudio's.

    Shape:
        ``(…, n_stft, T)`` → ``(…, n_mels, T)``, floating; float16/bfloat16 computed in float32 and
        returned in their dtype.

    Raises:
        ParameterValueError / ParameterTypeError: bad argument; a specgram of another dtype or shape.
    """

    def __init__(
        self,
        n_mels: int = 128,
        sample_rate: int = 16000,
        f_min: float = 0.0,
        f_max: float | None = None,
        n_stft: int = 201,
        norm: str | None = None,
        mel_scale: str = "htk",
    ) -> None:
        super().__init__()
        self.n_mels = n_mels
        self.sample_rate = _f.check_sample_rate(sample_rate)
        self.f_min, self.f_max = _f.check_band(f_min, f_max, self.sample_rate)
        self.norm = norm
        self.mel_scale = mel_scale
        with torch.inference_mode(False):  # the Triton path's filter caches key on its version
            # In the default dtype, as torchaudio's buffer (melscale_fbanks follows it): under
            # torch.set_default_dtype(torch.float64) a float32 one projected float64 spectrograms
            # with filters rounded to float32 (~1e-8 off torchaudio's).
            fb = _f.mel_filterbank(
                n_stft, self.f_min, self.f_max, n_mels, self.sample_rate, norm, mel_scale,
                dtype=torch.get_default_dtype(),
            )  # fmt: skip
        self.n_stft = n_stft
        self.register_buffer("fb", fb)

    def forward(self, specgram: torch.Tensor) -> torch.Tensor:
        if not _ref._exporting():
            # torchaudio's matmul refuses an integer specgram; filters rounded to its dtype gave zeros.
            check_tensor("specgram", specgram, dtypes=FLOATING_DTYPES, allow_empty=True)
            if specgram.dim() < 2 or specgram.shape[-2] != self.fb.shape[0]:
                raise bad_value("specgram", specgram, f"a (…, {self.fb.shape[0]}, time) tensor")
        dtype = _ref.compute_dtype(specgram.dtype)
        mel = torch.matmul(specgram.transpose(-1, -2).to(dtype), self.fb.to(dtype)).transpose(-1, -2)
        return mel.to(specgram.dtype)


class MelSpectrogram(nn.Module):
    """Mel spectrogram, as ``torchaudio.transforms.MelSpectrogram`` (same arguments and defaults:
    hop ``win_length // 2``, periodic Hann, "htk" scale, no norm), plus ``backend``.

    Args:
        sample_rate, n_fft, win_length, hop_length, f_min, f_max, pad, n_mels, window_fn, power,
        normalized, wkwargs, center, pad_mode, onesided (ignored, as torchaudio), norm, mel_scale:
            torchaudio's (see :class:`Spectrogram`, :class:`MelScale`).
        backend: None (the Triton backend on CUDA fp16/bf16/fp32), "triton" or "torch" (exportable).

    Shape:
        ``(…, L)`` → ``(…, n_mels, T)``; float16/bfloat16 computed in float32 and returned in their
        dtype (both backends).

    Dtype: the spectrogram's (:class:`Spectrogram`): float64 for float64 input or a float64 window
    (``window_fn`` returning float64, ``.double()``), whatever the input -- torchaudio's result where it
    gives one. The Triton kernels take no float64, so such a module runs the torch twin under
    ``backend=None``; ``backend="triton"`` raises BackendUnavailableError. Where torchaudio fails
    because its float32 mel filters meet that float64 spectrogram (only ``window_fn`` or
    ``spectrogram`` in float64), the projection here runs in float64, as :class:`MelScale`'s does.

    Caches: as :class:`Spectrogram`'s for ``spectrogram.window``; the Triton path also caches its
    form of ``mel_scale.fb`` per version. Edit either in place with ordinary tensor ops (which bump
    the version): a write through ``.data`` or a NumPy view is not seen by the cached paths, where
    torchaudio, which caches nothing, reads it.

    Autograd: the input, the window and the filters (``mel_scale.fb``) get gradients where they
    require them, as torchaudio's; the Triton kernels take the filters as constants, so filters that
    require grad run the torch twin under ``backend=None`` and raise BackendUnavailableError under
    ``backend="triton"``.

    Example:
        >>> MelSpectrogram(n_mels=64)(torch.randn(2, 8000)).shape
        torch.Size([2, 64, 41])
    """

    def __init__(
        self,
        sample_rate: int = 16000,
        n_fft: int = 400,
        win_length: int | None = None,
        hop_length: int | None = None,
        f_min: float = 0.0,
        f_max: float | None = None,
        pad: int = 0,
        n_mels: int = 128,
        window_fn: Callable[..., torch.Tensor] = torch.hann_window,
        power: float = 2.0,
        normalized: bool | str = False,
        wkwargs: dict | None = None,
        center: bool = True,
        pad_mode: str = "reflect",
        onesided: bool | None = None,
        norm: str | None = None,
        mel_scale: str = "htk",
        *,
        backend: Backend | None = None,
    ) -> None:
        super().__init__()
        check_backend(backend)
        self.backend = backend
        self.sample_rate = _f.check_sample_rate(sample_rate)
        self.n_mels = check_int("n_mels", n_mels, min_value=1)
        self.spectrogram = Spectrogram(
            n_fft=n_fft,
            win_length=win_length,
            hop_length=hop_length,
            pad=pad,
            window_fn=window_fn,
            power=check_float("power", power, min_value=0.0, min_inclusive=False),
            normalized=normalized,
            wkwargs=wkwargs,
            center=center,
            pad_mode=pad_mode,
            onesided=True,
        )
        self.n_fft, self.win_length, self.hop_length = (
            self.spectrogram.n_fft,
            self.spectrogram.win_length,
            self.spectrogram.hop_length,
        )
        self.power = power
        self.normalized = self.spectrogram.normalized
        self.pad = pad
        self.f_min = f_min
        self.f_max = f_max
        self.mel_scale = MelScale(
            self.n_mels, self.sample_rate, f_min, f_max, self.n_fft // 2 + 1, norm, mel_scale
        )

    def forward(self, waveform: torch.Tensor) -> torch.Tensor:
        spec = self.spectrogram
        # torch.stft's promotion with the window, as torchaudio: a float64 window makes it float64.
        dtype = _result_dtype(waveform.dtype, spec.window.dtype)
        if _ref._exporting():
            chosen = "torch"
        else:
            spec._check_signal(waveform)
            if self.backend == "triton" and dtype == torch.float64 and waveform.dtype != torch.float64:
                raise BackendUnavailableError(
                    "backend='triton' cannot run this call: the float64 window (spectrogram.window) "
                    "makes the result float64, which the Triton kernels do not take; convert the module "
                    "with .float() or use backend='torch'"
                )
            # Counted after ``pad``, which fills a signal of no samples.
            numel = waveform.shape[:-1].numel() * (waveform.shape[-1] + 2 * spec.pad)
            chosen = _f._MEL.backend(self.backend, device=waveform.device, dtype=dtype, numel=numel)
            if chosen == "triton" and self.mel_scale.fb.requires_grad and torch.is_grad_enabled():
                # The Triton kernels take the filters as constants: a filter bank that requires grad
                # (torchaudio's gets its gradient) got none there, silently. The torch twin gives it.
                if self.backend == "triton":
                    raise BackendUnavailableError(
                        "backend='triton' cannot run this call: the mel filters (mel_scale.fb) require "
                        "grad, which the Triton kernels do not give them; use backend='torch' or None"
                    )
                chosen = "torch"
        if chosen == "torch":
            # The spectrogram in float32 at least (float16's |X|² overflows), rounded once at the end.
            x = waveform.to(_ref.compute_dtype(dtype))
            return self.mel_scale(spec(x)).to(dtype)
        x = _batched(waveform)
        if spec.pad > 0:
            x = torch.nn.functional.pad(x, (spec.pad, spec.pad))
        # One padded-window tensor per buffer version, so the kernel's packed-basis cache hits.
        window, scale = spec._window_state()
        out = _f._MEL(
            x,
            n_fft=spec.n_fft,
            hop_length=spec.hop_length,
            window=window,
            filters=self.mel_scale.fb,
            power=spec.power,
            scale=scale,
            center=spec.center,
            pad_mode=spec.pad_mode,
            backend="triton",
        )
        return out.reshape(*waveform.shape[:-1], *out.shape[-2:])


class InverseSpectrogram(nn.Module):
    """Inverse STFT, as ``torchaudio.transforms.InverseSpectrogram`` (least-squares overlap-add with
    the window-envelope division of torch.istft).

    Args:
        n_fft, win_length, hop_length, pad, window_fn, normalized, wkwargs, center, pad_mode (unused),
        onesided (must be True): torchaudio's.

    Shape:
        ``(…, F, T)`` complex, or ``(…, F, T, 2)`` real (``view_as_real``) → ``(…, L)``;
        ``L = length`` when given, else ``n_fft + hop·(T−1) − 2·(n_fft//2 if center)``. A float16/
        bfloat16 (or complex32) spectrogram is inverted in float32 and the signal returned in its dtype
        (torchaudio: float32). A float64 window (``window_fn`` returning float64, ``.double()``) or a
        complex128/float64 spectrogram gives a float64 signal, as torch.istft's type promotion makes
        torchaudio's.

    Raises:
        ParameterValueError: wrong number of bins, no frames, an empty batch, ``hop_length >
        win_length`` (as torch.istft), a window whose overlap-add envelope vanishes (torch.istft's NOLA
        error), or a ``window_fn`` that does not give a real 1-D tensor of ``win_length`` samples.
        ParameterTypeError: a real spectrogram that is not floating.
    """

    def __init__(
        self,
        n_fft: int = 400,
        win_length: int | None = None,
        hop_length: int | None = None,
        pad: int = 0,
        window_fn: Callable[..., torch.Tensor] = torch.hann_window,
        normalized: bool | str = False,
        wkwargs: dict | None = None,
        center: bool = True,
        pad_mode: str = "reflect",
        onesided: bool = True,
    ) -> None:
        super().__init__()
        self.n_fft, self.win_length, self.hop_length = _f.resolve_frames(n_fft, win_length, hop_length)
        if self.hop_length > self.win_length:
            # torch.istft (torchaudio) refuses it on every call; a single frame passed here, inverted.
            raise bad_value(
                "hop_length", self.hop_length, f"in 1..win_length={self.win_length} for the inverse STFT"
            )
        self.pad = check_int("pad", pad, min_value=0)
        self.normalized = _norm_flags(normalized)
        self.center = check_choice("center", center, (True, False))
        self.pad_mode = pad_mode
        self.onesided = check_choice("onesided", onesided, (True,))
        self.register_buffer("window", _f.build_window(window_fn, self.win_length, wkwargs))

    def forward(self, spectrogram: torch.Tensor, length: int | None = None) -> torch.Tensor:
        if not isinstance(spectrogram, torch.Tensor):
            check_tensor("spectrogram", spectrogram)
        if spectrogram.is_complex():
            parts = torch.view_as_real(spectrogram.resolve_conj())  # (…, F, T, 2), a view
        elif spectrogram.dim() >= 3 and spectrogram.shape[-1] == 2:
            # The real layout's dtype is checked (an integer one failed deep in fold).
            check_tensor("spectrogram", spectrogram, dtypes=FLOATING_DTYPES, allow_empty=True)
            parts = spectrogram
        else:
            raise bad_value("spectrogram", spectrogram, "a complex (…, F, T) or real (…, F, T, 2) tensor")
        re = parts[..., 0]
        n_freq = self.n_fft // 2 + 1
        if re.dim() < 2 or re.shape[-2] != n_freq:
            raise bad_value("spectrogram", spectrogram, f"{n_freq} frequency bins (n_fft // 2 + 1)")
        if not _ref._exporting() and re.shape[-1] == 0:
            # torch.istft fails on it too, with an internal error (the reshape below failed first).
            raise bad_value("spectrogram", spectrogram, "a tensor of at least one frame (T >= 1)")
        if not _ref._exporting() and re.numel() == 0:
            # An empty batch: torch.istft (torchaudio) fails inside, and so did the FFT here (MKL's
            # "Inconsistent configuration parameters"); the forward modules refuse an empty waveform.
            raise bad_value("spectrogram", spectrogram, "a non-empty tensor (no dimension of size 0)")
        if length is not None:
            length = check_int("length", length, min_value=1)
        if not _ref._exporting():
            check_istft_output(
                "spectrogram", spectrogram, n_fft=self.n_fft, hop=self.hop_length, n_frames=re.shape[-1],
                center=self.center, length=length,
            )  # fmt: skip
        shape = re.shape
        # float16/bfloat16 spectrograms are inverted in float32 and the signal rounded once, as the
        # forward transforms do (computed in 16 bits, the error was ~4× the output's rounding); a
        # float64 window promotes to float64, as in torch.istft.
        out_dtype = _result_dtype(re.dtype, self.window.dtype)
        dtype = _ref.compute_dtype(out_dtype)
        window = _ref.padded_window(self.window, self.win_length, self.n_fft, torch.float64, re.device)
        out = _stft_ref.istft_parts(
            parts.reshape(-1, shape[-2], shape[-1], 2).to(dtype),
            n_fft=self.n_fft,
            hop_length=self.hop_length,
            window=window,
            scale=_f.spec_scale(self.normalized, window, self.n_fft),
            center=self.center,
            length=None if length is None else length + 2 * self.pad,
        )
        if length is not None and self.pad > 0:
            out = out[:, self.pad : -self.pad]
        return out.reshape(*shape[:-2], out.shape[-1]).to(out_dtype)
