"""Exact streaming STFT, inverse STFT and mel spectrogram: ``push(chunk)`` / ``flush()``.

Each object carries ``B`` independent streams and a small state that :meth:`state_dict` /
:meth:`load_state_dict` save and restore. The first push fixes the layout until :meth:`reset` (or
``flush()``, which resets): the number of streams, the device, the rank and the dtype (later chunks are
converted to the first one's). A chunk without a stream dimension -- ``(n,)`` for the STFT and mel
streams, a complex ``(F, k)`` or real ``(F, k, 2)`` spectrum for the iSTFT -- is one stream whose
outputs have no stream dimension either; a later push of the other rank (``(1, n)`` after ``(n,)``, or
the reverse) raises ParameterValueError rather than give an output of the wrong rank. The saved state
keeps that decision. The concatenation of every push's output and the flush's equals the offline
transform on the whole signal -- ``torch.stft`` / ``torch.istft`` /
:func:`nbxsig.features.mel_spectrogram` with the same arguments -- for any chunking (``center=False``;
``center=True`` once flushed, since the right-hand padding needs the end).

State, per stream:

* STFT and mel: the samples not yet covered by a complete frame (< ``n_fft``), the last
  ``n_fft // 2 + 1`` raw samples (for the reflect padding at the end) and counters;
* iSTFT: the last ``⌈n_fft / hop⌉ − 1`` frames and a frame counter -- on the Triton path one kernel
  launch per push computes every stream's output samples by gathering the frames that cover them
  (:mod:`nbxsig.kernels.streaming`) and rotates this history in the same launch.

Example:
    >>> import torch
    >>> from nbxsig.streaming import StreamingSTFT
    >>> s = StreamingSTFT(64, hop_length=16, window=torch.hann_window(64))
    >>> x = torch.randn(2, 1000)
    >>> y = torch.cat([s.push(x[:, :333]), s.push(x[:, 333:]), s.flush()], dim=-1)
    >>> y.shape == torch.stft(x, 64, 16, window=torch.hann_window(64), return_complex=True).shape
    True
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from ._dispatch import Backend, Op, check_backend
from ._validate import COMPLEX_DTYPES, FLOATING_DTYPES, check_bool, check_choice, check_int, check_tensor
from .errors import BackendUnavailableError, ParameterValueError, bad_value
from .kernels import _runtime
from .reference import mel as _ref
from .reference.dft import compute_dtype, irdft_basis

__all__ = ["StreamingISTFT", "StreamingMelSpectrogram", "StreamingSTFT", "default_hop_length"]

_ISTFT_PUSH = Op(
    "streaming_istft",
    torch_impl="nbxsig.streaming:_istft_push_torch",
    triton_impl="nbxsig.kernels.streaming:istft_push",
    triton_dtypes=(torch.float32,),
)
_STREAM_PAD_MODES = ("reflect", "constant", "replicate")


def default_hop_length(n_fft: int) -> int:
    """torch.stft's / torch.istft's default ``hop_length``, ``n_fft // 4``; it is 0 for ``n_fft < 4``,
    where torch fails inside and nbxsig asks for the argument."""
    hop_length = n_fft // 4
    if hop_length < 1:
        raise bad_value(
            "hop_length",
            hop_length,
            ">= 1",
            context=f"(the default n_fft // 4 is 0 for n_fft={n_fft}; pass it)",
        )
    return hop_length


def _frames_args(n_fft, hop_length, win_length) -> tuple[int, int, int]:
    n_fft = check_int("n_fft", n_fft, min_value=1)
    win_length = n_fft if win_length is None else check_int("win_length", win_length, min_value=1)
    if win_length > n_fft:
        raise bad_value("win_length", win_length, f"<= n_fft ({n_fft})")
    hop_length = default_hop_length(n_fft) if hop_length is None else hop_length
    return n_fft, check_int("hop_length", hop_length, min_value=1), win_length


def _window(window, win_length: int, n_fft: int) -> torch.Tensor:
    if window is not None:
        check_tensor("window", window, dtypes=FLOATING_DTYPES, min_dim=1, max_dim=1)
        if window.shape[0] != win_length:
            raise bad_value("window", window, f"a 1-D tensor of win_length={win_length} samples")
    return _ref.padded_window(window, win_length, n_fft, torch.float64, "cpu" if window is None else None)


class _Framer:
    """Buffers the samples of B streams and returns, per push, a span whose frames at ``i·hop``
    (``i < n``) are exactly the frames completed by that push (the centre padding applied in-stream)."""

    def __init__(self, n_fft: int, hop: int, center: bool, pad_mode: str) -> None:
        self.n_fft, self.hop, self.center, self.pad_mode = n_fft, hop, center, pad_mode
        self.pad = n_fft // 2 if center else 0
        self.reset()

    def reset(self) -> None:
        self.buffer: torch.Tensor | None = None  # padded-signal samples from the next frame's start
        self.history: torch.Tensor | None = None  # last pad + 1 raw samples (right reflect padding)
        self.n_raw = 0
        self.started = not self.center or self.pad == 0  # left padding already applied
        self.skip = 0  # samples to drop before the next frame (hop > n_fft)
        self.squeeze = False  # 1-D chunks: one stream, outputs without the stream dimension

    def _check(self, chunk: torch.Tensor) -> torch.Tensor:
        check_tensor("chunk", chunk, dtypes=FLOATING_DTYPES, min_dim=1, max_dim=2, allow_empty=True)
        x = chunk.reshape(1, -1) if chunk.dim() == 1 else chunk
        if self.buffer is not None and (x.shape[0] != self.buffer.shape[0] or x.device != self.buffer.device):
            raise bad_value(
                "chunk",
                chunk,
                f"{self.buffer.shape[0]} streams on {self.buffer.device} (as in the first push; "
                "reset() to start over)",
            )
        if self.buffer is not None and (chunk.dim() == 1) != self.squeeze:
            # The first push decided whether outputs carry the stream dimension; a chunk of the other
            # rank got the first one's layout (a (1, n) chunk a (F, k) output, or the reverse).
            layout = "a 1-D (n,) tensor" if self.squeeze else f"a 2-D ({x.shape[0]}, n) tensor"
            raise bad_value("chunk", chunk, f"{layout}, as in the first push (reset() to start over)")
        return x

    def push(self, chunk: torch.Tensor) -> tuple[torch.Tensor, int]:
        x = self._check(chunk)
        if self.buffer is None:
            self.squeeze = chunk.dim() == 1
            self.buffer = x[:, :0]
            self.history = x[:, :0]
        # The first push fixes the dtype, as in StreamingISTFT: a float64 chunk promoted the buffer, and
        # every later output, float32 chunks' included, became complex128.
        x = x.to(self.buffer.dtype)
        self.n_raw += x.shape[1]
        # clone(): a slice of the concatenation kept all of a long chunk's storage (in the saved state too).
        self.history = torch.cat((self.history, x), dim=1)[:, -(self.pad + 1) :].clone()
        buf = torch.cat((self.buffer, x), dim=1)
        if not self.started:
            # Reflect padding reads the pad samples after the first one, replicate the first one: until
            # they have arrived the raw samples wait (an empty first chunk has nothing to replicate).
            needed = {"reflect": self.pad + 1, "replicate": 1}.get(self.pad_mode, 0)
            if self.n_raw < needed:
                self.buffer = buf  # raw samples, left padding still to come
                return buf[:, :0], 0
            buf = torch.cat((self._left_pad(buf), buf), dim=1)
            self.started = True
        return self._take(buf)

    def flush(self) -> tuple[torch.Tensor, int]:
        if self.buffer is None:
            raise ParameterValueError("flush() needs at least one push() first")
        buf = self.buffer
        if self.center:
            if self.pad_mode == "reflect" and self.n_raw <= self.pad:
                raise ParameterValueError(
                    f"a stream must be longer than n_fft // 2 = {self.pad} samples for center=True with "
                    f"pad_mode='reflect', got {self.n_raw}"
                )
            if self.n_raw == 0:  # as torch.stft refuses an empty signal (replicate has nothing to copy)
                raise ParameterValueError(
                    "a stream must have at least one sample for center=True with "
                    f"pad_mode={self.pad_mode!r}, got 0 (every push was empty)"
                )
            if not self.started:
                buf = torch.cat((self._left_pad(buf), buf), dim=1)
            buf = torch.cat((buf, self._right_pad()), dim=1)
        elif self.n_raw < self.n_fft:  # as torch.stft / mel_spectrogram refuse a signal shorter than a frame
            raise ParameterValueError(
                f"a stream must have at least n_fft = {self.n_fft} samples for center=False, got {self.n_raw}"
            )
        return self._take(buf)

    def _left_pad(self, raw: torch.Tensor) -> torch.Tensor:
        if self.pad_mode == "reflect":
            return raw[:, 1 : self.pad + 1].flip(1)
        if self.pad_mode == "replicate":
            return raw[:, :1].expand(-1, self.pad)
        return raw.new_zeros(raw.shape[0], self.pad)

    def _right_pad(self) -> torch.Tensor:
        h = self.history
        if self.pad_mode == "reflect":
            return h[:, :-1].flip(1)[:, : self.pad]
        if self.pad_mode == "replicate":
            return h[:, -1:].expand(-1, self.pad)
        return h.new_zeros(h.shape[0], self.pad)

    def _take(self, buf: torch.Tensor) -> tuple[torch.Tensor, int]:
        if self.skip:
            dropped = min(self.skip, buf.shape[1])
            buf, self.skip = buf[:, dropped:], self.skip - dropped
        n = (buf.shape[1] - self.n_fft) // self.hop + 1 if buf.shape[1] >= self.n_fft else 0
        consumed = n * self.hop
        # Added, not assigned: a chunk shorter than the pending skip leaves the rest of it (and no frame).
        self.skip += max(0, consumed - buf.shape[1])
        # clone(): keep the state small and independent of the caller's chunk storage.
        self.buffer = buf[:, consumed:].clone()
        return buf, n

    def state_dict(self) -> dict[str, Any]:
        return {
            "buffer": self.buffer,
            "history": self.history,
            "n_raw": self.n_raw,
            "started": self.started,
            "skip": self.skip,
            "squeeze": self.squeeze,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.buffer, self.history = state["buffer"], state["history"]
        self.n_raw, self.started, self.skip = int(state["n_raw"]), bool(state["started"]), int(state["skip"])
        self.squeeze = bool(state.get("squeeze", False))


class _FramedStream:
    """``push``/``flush``/``reset``/state of a streaming transform over a :class:`_Framer`: subclasses
    set ``self._framer`` and turn the ``n`` frames of a pushed span into output in :meth:`_emit`."""

    _framer: _Framer

    def _emit(self, buf: torch.Tensor, n: int) -> torch.Tensor:
        raise NotImplementedError

    def reset(self) -> None:
        self._framer.reset()

    def _step(self, take: Callable[[], tuple[torch.Tensor, int]]) -> torch.Tensor:
        # A push or flush that fails past the chunk's checks (a backend that cannot run its dtype) leaves
        # the stream as it was: the framer replaces its tensors, never writes them, so a shallow copy of
        # its state restores it.
        state = self._framer.state_dict()
        try:
            return self._emit(*take())
        except Exception:
            self._framer.load_state_dict(state)
            raise

    def push(self, chunk: torch.Tensor) -> torch.Tensor:
        out = self._step(lambda: self._framer.push(chunk))
        return out[0] if self._framer.squeeze else out

    def flush(self) -> torch.Tensor:
        out = self._step(self._framer.flush)
        squeeze = self._framer.squeeze
        self._framer.reset()
        return out[0] if squeeze else out

    def state_dict(self) -> dict[str, Any]:
        return self._framer.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._framer.load_state_dict(state)


class StreamingSTFT(_FramedStream):
    """Streaming ``torch.stft(..., return_complex=True)`` for B streams.

    Args:
        n_fft: DFT size. hop_length: default ``n_fft // 4`` (torch.stft's; pass it for ``n_fft < 4``).
        win_length: default ``n_fft``. window: ``(win_length,)`` tensor, default rectangular (torch.stft's).
        center: pad ``n_fft // 2`` on both sides (default True; the right side at :meth:`flush`).
        pad_mode: "reflect" (default), "constant" or "replicate".
        normalized: multiply by ``1/√n_fft`` (torch.stft's ``normalized``).

    ``push(chunk)``: ``chunk`` ``(B, n)`` or ``(n,)``, any ``n >= 0``; returns the complex frames it
    completes, ``(B, F, k)`` (``(F, k)`` for ``(n,)`` chunks): complex64, complex128 for float64 chunks
    (float16/bfloat16 are computed in float32, as :func:`nbxsig.stft.stft` does). ``flush()`` returns
    the last frames and resets the object. Every push until then has the first one's rank, stream
    count and device.

    Raises:
        ParameterValueError / ParameterTypeError: bad arguments, a chunk with another number of streams,
        device or rank than the first push's; a ``flush()`` of a stream torch.stft would refuse (no
        sample, ``n_fft // 2`` or fewer with ``center=True`` and reflect padding, fewer than ``n_fft``
        with ``center=False``), which leaves the stream as it was.
    """

    def __init__(
        self,
        n_fft: int,
        hop_length: int | None = None,
        win_length: int | None = None,
        window: torch.Tensor | None = None,
        *,
        center: bool = True,
        pad_mode: str = "reflect",
        normalized: bool = False,
    ) -> None:
        self.n_fft, self.hop_length, self.win_length = _frames_args(n_fft, hop_length, win_length)
        check_bool("center", center)
        check_choice("pad_mode", pad_mode, _STREAM_PAD_MODES)
        self.window = _window(window, self.win_length, self.n_fft)
        self.scale = 1.0 / math.sqrt(self.n_fft) if check_bool("normalized", normalized) else 1.0
        self._framer = _Framer(self.n_fft, self.hop_length, center, pad_mode)
        self._basis: torch.Tensor | None = None

    def _emit(self, buf: torch.Tensor, n: int) -> torch.Tensor:
        n_freq = self.n_fft // 2 + 1
        dtype = compute_dtype(buf.dtype)  # 16-bit chunks in float32, as the offline stft
        if n == 0:
            return torch.zeros(buf.shape[0], n_freq, 0, dtype=dtype.to_complex(), device=buf.device)
        if self.window.requires_grad and torch.is_grad_enabled():
            # This push's own basis: a cached one's graph is freed by the first backward.
            basis = _ref.analysis_basis(self.window, self.n_fft, self.scale, dtype=dtype, device=buf.device)
        else:
            if self._basis is None or self._basis.device != buf.device or self._basis.dtype != dtype:
                # Outside inference mode (and without a graph): a basis first built under
                # torch.inference_mode could not be saved for a later push's backward.
                with torch.inference_mode(False):
                    self._basis = _ref.analysis_basis(
                        self.window.detach(), self.n_fft, self.scale, dtype=dtype, device=buf.device
                    )
            basis = self._basis
        span = buf[:, : (n - 1) * self.hop_length + self.n_fft].to(dtype)
        spec = span.unfold(-1, self.n_fft, self.hop_length) @ basis
        return torch.complex(spec[..., :n_freq], spec[..., n_freq:]).transpose(-1, -2)


class StreamingMelSpectrogram(_FramedStream):
    """Streaming :func:`nbxsig.features.mel_spectrogram` for B streams (same arguments, plus ``backend``).

    ``push(chunk)`` → ``(B, n_mels, k)`` mel frames completed by ``chunk`` (``(n_mels, k)`` for ``(n,)``
    chunks); ``flush()`` → the rest. Every push has the first one's rank, stream count and device
    (ParameterValueError otherwise), as for :class:`StreamingSTFT`.
    On the Triton backend each push is the fused mel kernel on the buffered span (two launches:
    the concatenation and the kernel).
    """

    def __init__(
        self,
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
        *,
        backend: Backend | None = None,
    ) -> None:
        from . import features as nf

        n_fft, win_length, hop_length = nf.resolve_frames(n_fft, win_length, hop_length)
        check_choice("pad_mode", pad_mode, _STREAM_PAD_MODES)
        check_choice("center", center, (True, False))
        self._kw = dict(
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
            norm=norm,
            mel_scale=mel_scale,
            center=False,
            backend=backend,
        )
        check_backend(backend)
        # Validate every other argument now, on a span of one frame, on the torch backend: it runs
        # anywhere, and the backend of each push depends on that chunk's device and dtype.
        nf.mel_spectrogram(torch.zeros(n_fft), **{**self._kw, "backend": "torch"})
        self.n_mels = n_mels
        self._framer = _Framer(n_fft, hop_length, center, pad_mode)

    def _emit(self, buf: torch.Tensor, n: int) -> torch.Tensor:
        from . import features as nf

        if n == 0 or buf.shape[0] == 0:
            # No stream (a (0, n) chunk) has no mel to compute: its (0, n_mels, k) frames, as
            # StreamingSTFT gives; the offline function, which refuses an empty batch, raised naming
            # its internal span, and only once a chunk completed a frame.
            return buf.new_zeros(buf.shape[0], self.n_mels, n)
        span = buf[:, : (n - 1) * self._kw["hop_length"] + self._kw["n_fft"]]
        return nf.mel_spectrogram(span, **self._kw)


def _istft_push_torch(new, history, history_out, basis, w2, *, frames_before, n_out, hop, n_fft):
    """Torch twin of :func:`nbxsig.kernels.streaming.istft_push` (same arguments and result)."""
    if n_out == 0:  # an empty push: with no history either there is no frame to fold
        history_out.copy_(history)
        return new.new_zeros(new.shape[0], 0, dtype=history.dtype)
    H = history.shape[2]
    frames = torch.cat((history, new.to(history.dtype)), dim=2)  # (B, F, H + n, 2)
    n_tot = frames.shape[2]
    time = frames[..., 0].transpose(1, 2) @ basis[0] + frames[..., 1].transpose(1, 2) @ basis[1]
    first = frames_before - H  # global index of frames[:, :, 0]
    exists = (torch.arange(n_tot, device=new.device) + first >= 0).to(time.dtype)
    full = (n_tot - 1) * hop + n_fft
    fold = dict(output_size=(1, full), kernel_size=(1, n_fft), stride=(1, hop))
    y = torch.nn.functional.fold((time * exists[:, None]).transpose(1, 2), **fold).reshape(
        time.shape[0], full
    )
    env_frames = (w2[:n_fft, None] * exists[None, :]).unsqueeze(0)
    env = torch.nn.functional.fold(env_frames, **fold).reshape(full)
    y = y[:, H * hop : H * hop + n_out]
    env = env[H * hop : H * hop + n_out]
    out = torch.where(
        env > 1e-11, y / torch.where(env > 1e-11, env, torch.ones_like(env)), torch.zeros_like(y)
    )
    history_out.copy_(frames[:, :, n_tot - H :])
    return out


class StreamingISTFT:
    """Streaming ``torch.istft`` (onesided, real output) for B streams.

    Args:
        n_fft, hop_length, win_length, window, center, normalized: as :class:`StreamingSTFT`
            (``center=True`` needs ``hop <= n_fft − n_fft // 2``: no emitted sample is trimmed later).
            ``hop_length`` is at most ``win_length``, as for torch.istft.
        backend: None (Triton for CUDA float32 spectra), "triton" or "torch". The Triton push has no
            backward: a push that needs gradients (a spectrum, window or history that requires grad,
            with grad enabled) runs the torch push under None and raises BackendUnavailableError
            under "triton".

    ``push(spec)``: ``spec`` complex ``(B, F, k)`` / ``(F, k)`` or real ``(B, F, k, 2)`` / ``(F, k, 2)``;
    returns the ``(B, k·hop)`` samples these frames complete (``(k·hop,)`` for a spectrum without the
    stream dimension; fewer at the start with ``center=True``): float64 for a stream whose first push
    is complex128/float64 (torch backend), else float32; later pushes are computed in that precision.
    ``flush()`` returns the tail (``n_fft − hop`` samples, less the centre trim) and resets.
    Where the window envelope is below 1e-11 (``center=False`` with a window that vanishes at its
    ends) the output is 0; torch.istft raises there instead.

    Every push until ``flush()`` / ``reset()`` has the first one's number of streams, device and
    rank -- with or without the stream dimension; complex and real layouts may alternate.

    The window is fixed once the stream has started: the first push builds the synthesis basis and the
    envelope from it and keeps them (across ``flush()`` / ``reset()`` too), so an in-place edit of
    ``window`` after the first push is not seen (a window that requires grad, with grad enabled, is
    read on every push). For another window, build another stream.

    Raises:
        ParameterValueError / ParameterTypeError: bad arguments; a spectrum with another number of
        bins, or of streams, device or rank than the first push's; a ``flush()`` before any frame, or
        after a single frame of an even ``n_fft`` with ``center=True`` (no sample is left once both ends
        are trimmed; :func:`nbxsig.stft.istft` refuses it too), which leaves the stream as it was.
    """

    def __init__(
        self,
        n_fft: int,
        hop_length: int | None = None,
        win_length: int | None = None,
        window: torch.Tensor | None = None,
        *,
        center: bool = True,
        normalized: bool = False,
        backend: Backend | None = None,
    ) -> None:
        self.n_fft, self.hop_length, self.win_length = _frames_args(n_fft, hop_length, win_length)
        self.center = check_bool("center", center)
        check_backend(backend)
        if self.hop_length > self.win_length:  # as torch.istft (and nbxsig.stft.istft) refuse it
            raise bad_value("hop_length", self.hop_length, f"in 1..win_length={self.win_length} for istft")
        self.pad = self.n_fft // 2 if center else 0
        if center and self.hop_length > self.n_fft - self.pad:
            raise bad_value(
                "hop_length",
                self.hop_length,
                f"<= n_fft - n_fft // 2 = {self.n_fft - self.pad}",
                context="for center=True",
            )
        self.backend = backend
        self.window = _window(window, self.win_length, self.n_fft)
        self.scale = 1.0 / math.sqrt(self.n_fft) if check_bool("normalized", normalized) else 1.0
        self.n_history = -(-self.n_fft // self.hop_length) - 1
        self._consts: tuple | None = None
        self.reset()

    def reset(self) -> None:
        self._history: list[torch.Tensor] | None = None  # two buffers, the current one first
        self.frames = 0
        self._squeeze = False
        self._launches: dict[tuple, Any] = {}

    def _prepared(self, x: torch.Tensor, history: torch.Tensor, n_out: int) -> Any:
        """The Triton push prepared for this chunk's signature (a push is host-bound: see
        ``nbxsig.kernels.streaming.PushLaunch``), or None where the general launcher takes it."""
        key = (x.shape, x.stride(), x.device, history.shape, n_out)
        launch = self._launches.get(key, False)
        if launch is False:
            from .kernels.streaming import PushLaunch

            if len(self._launches) >= 8:  # chunks of ever new sizes: keep the memo small
                self._launches.clear()
            launch = self._launches[key] = PushLaunch.prepare(
                x, history, n_out=n_out, hop=self.hop_length, n_fft=self.n_fft
            )
        return launch

    def _build_constants(self, window: torch.Tensor, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        inv = irdft_basis(self.n_fft, dtype=torch.float64, device=device)
        w = window.to(device)
        return (inv * (w / self.scale)).to(dtype).contiguous(), (w * w).to(dtype).contiguous()

    def _constants(self, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        if self.window.requires_grad and torch.is_grad_enabled():
            # This push's own: a cached basis's graph is freed by the first backward.
            return self._build_constants(self.window, device, dtype)
        if self._consts is None or self._consts[0].device != device or self._consts[0].dtype != dtype:
            # Outside inference mode (and without a graph): constants first built under
            # torch.inference_mode could not be saved for a later push's backward.
            with torch.inference_mode(False):
                self._consts = self._build_constants(self.window.detach(), device, dtype)
        return self._consts

    def _as_real(self, spec: torch.Tensor) -> torch.Tensor:
        check_tensor("spec", spec, dtypes=(*FLOATING_DTYPES, *COMPLEX_DTYPES), allow_empty=True)
        # torch.istft takes a lazily conjugated spectrum; view_as_real does not.
        x = torch.view_as_real(spec.resolve_conj()) if spec.is_complex() else spec
        if x.dim() == 3:
            x = x.unsqueeze(0)
        n_freq = self.n_fft // 2 + 1
        if x.dim() != 4 or x.shape[-1] != 2 or x.shape[1] != n_freq:
            raise bad_value(
                "spec", spec, f"a complex (B, {n_freq}, frames) or real (B, {n_freq}, frames, 2) tensor"
            )
        if self._history is not None and (
            x.shape[0] != self._history[0].shape[0] or x.device != self._history[0].device
        ):
            history = self._history[0]
            raise bad_value(
                "spec",
                spec,
                f"{history.shape[0]} streams on {history.device} (as in the first push; reset() to "
                "start over)",
            )
        # The stream's precision, fixed by its first push: float64 for complex128/float64 spectra (as
        # torch.istft computes them), else float32 (what the Triton push takes).
        return x.to(compute_dtype(x.dtype) if self._history is None else self._history[0].dtype)

    def _advance(self, x: torch.Tensor, n_out_global: int) -> torch.Tensor:
        device = x.device
        # Before the state is created: a push the backend refuses leaves the stream unstarted.
        chosen = _ISTFT_PUSH.backend(self.backend, device=device, dtype=x.dtype, numel=max(1, x.numel()))
        if (
            chosen == "triton"
            and torch.is_grad_enabled()
            # (a chain, not any() over a generator: a push is host-bound, see PushLaunch)
            and (
                x.requires_grad
                or self.window.requires_grad
                or (self._history is not None and self._history[0].requires_grad)
            )
        ):
            # The Triton push has no backward: its output carried no graph, so a spectrum (or window)
            # that requires grad got none, silently. The torch push is differentiable.
            if self.backend == "triton":
                raise BackendUnavailableError(
                    "backend='triton' cannot run this push: the spectrum, the window or the stream's "
                    "history requires grad, which the Triton push does not give; use backend='torch' "
                    "or None, or push under torch.no_grad()"
                )
            chosen = "torch"
        if self._history is None:
            shape = (x.shape[0], x.shape[1], self.n_history, 2)
            # Outside inference mode: the pushes write the history in place, which torch refuses for
            # an inference tensor outside inference mode (a stream started under
            # torch.inference_mode could not go on outside it on the torch backend).
            with torch.inference_mode(False):
                self._history = [torch.zeros(shape, dtype=x.dtype, device=device) for _ in range(2)]
        basis, w2 = self._constants(device, x.dtype)
        cur, nxt = self._history
        launch = self._prepared(x, cur, n_out_global) if chosen == "triton" else None
        if launch is not None:
            out = launch(x.resolve_neg(), cur, nxt, basis, w2, frames_before=self.frames)
            self._history = [nxt, cur]
            return out
        out = _ISTFT_PUSH(
            x,
            cur,
            nxt,
            basis,
            w2,
            frames_before=self.frames,
            n_out=n_out_global,
            hop=self.hop_length,
            n_fft=self.n_fft,
            backend=chosen,
        )
        self._history = [nxt, cur]
        return out

    def push(self, spec: torch.Tensor) -> torch.Tensor:
        x = self._as_real(spec)
        squeeze = (spec.dim() + (1 if spec.is_complex() else 0)) == 3  # no stream dimension
        if self._history is None:
            self._squeeze = squeeze
        elif squeeze != self._squeeze:
            # The first push decided whether outputs carry the stream dimension; a spectrum of the other
            # rank got the first one's layout from flush() (and its own from push()).
            n_freq = self.n_fft // 2 + 1
            if self._squeeze:
                layout = f"a complex ({n_freq}, frames) or real ({n_freq}, frames, 2) tensor"
            else:
                b = x.shape[0]
                layout = f"a complex ({b}, {n_freq}, frames) or real ({b}, {n_freq}, frames, 2) tensor"
            raise bad_value("spec", spec, f"{layout}, as in the first push (reset() to start over)")
        start = self.frames * self.hop_length
        # CUDA's grid limit: the Triton push puts its blocks of 16 or more samples on grid axis 1
        # (nbxsig.kernels.streaming.PushLaunch), so a push of more frames than that covers runs as several.
        step = max(1, _runtime.MAX_GRID_YZ * 16 // self.hop_length)
        if x.shape[2] <= step:
            out = self._advance(x, x.shape[2] * self.hop_length)
            self.frames += x.shape[2]
        else:
            parts = []
            for frames in _runtime.grid_slices(x.shape[2], step):
                parts.append(self._advance(x[:, :, frames], (frames.stop - frames.start) * self.hop_length))
                self.frames += frames.stop - frames.start
            out = torch.cat(parts, 1)
        out = out[:, max(0, self.pad - start) :]
        return out[0] if squeeze else out

    def flush(self) -> torch.Tensor:
        if self._history is None or self.frames == 0:
            raise ParameterValueError("flush() needs at least one frame pushed first")
        if self.frames == 1 and self.pad and self.n_fft == 2 * self.pad:
            # As nbxsig.stft.istft (torch.istft fails inside): the two trimmed halves cover the one frame.
            raise ParameterValueError(
                f"a stream must have more than one frame for an even n_fft={self.n_fft} with center=True "
                "(the n_fft // 2 samples trimmed at each end leave none), got 1"
            )
        cur = self._history[0]
        empty = cur.new_zeros(cur.shape[0], cur.shape[1], 0, 2)
        start = self.frames * self.hop_length
        end = (self.frames - 1) * self.hop_length + self.n_fft - self.pad
        out = self._advance(empty, self.n_fft - self.hop_length)[:, : max(0, end - start)]
        out = out[:, max(0, self.pad - start) :]
        squeeze = self._squeeze
        self.reset()
        return out[0] if squeeze else out

    def state_dict(self) -> dict[str, Any]:
        # A copy: the pushes write the history buffers in place (two of them, alternately), so the live
        # one would change under the caller two pushes later.
        return {
            "history": None if self._history is None else self._history[0].clone(),
            "frames": self.frames,
            "squeeze": self._squeeze,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        hist = state["history"]
        with torch.inference_mode(False):  # written in place by later pushes, as in _advance
            self._history = None if hist is None else [hist.clone(), torch.empty_like(hist)]
        self.frames = int(state["frames"])
        self._squeeze = bool(state.get("squeeze", False))
