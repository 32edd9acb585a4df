"""STFT and inverse STFT in plain torch: the CPU path and the float64 oracle.

Framing is ``unfold`` on the padded signal, the transform is torch.fft (torch.stft's own algorithm, so
this path rounds as torch does), and overlap-add is a sum of shifted slices. In an ONNX export the
transform is a matmul with the real DFT basis planes (cos, -sin) instead -- the kernels' form -- and
complex tensors appear only where the caller hands in or asks for complex data, so with
``return_complex=False`` and a real-layout ``(..., F, T, 2)`` spectrum the exported graph is
real-valued. Inputs arrive validated and flattened to ``(B, L)`` / ``(B, F, T, 2)`` by
:mod:`nbxsig.stft`; window is already zero-padded to ``n_fft`` (or None = rectangular).

Computation dtype: float64 where the input or the window is 64-bit (torch's type promotion); everything
else runs in float32 (fp16/bf16 upcast).
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch
import torch.nn.functional as F

from .dft import compute_dtype, irdft_basis, rdft_basis
from .mel import _exporting, power_of

#: istft divides by the window envelope only where it exceeds this (torch.istft's NOLA threshold).
NOLA_EPS = 1e-11


@lru_cache(maxsize=64)
def _forward_basis(n: int, onesided: bool, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    # (2F, n): rows 0..F-1 cos, rows F..2F-1 -sin -- one matmul gives both planes.
    basis = rdft_basis(n, onesided=onesided, dtype=dtype, device=device)
    return basis.reshape(2 * basis.shape[1], n)


@lru_cache(maxsize=64)
def _inverse_basis(n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    basis = irdft_basis(n, dtype=dtype, device=device)
    return basis.reshape(2 * basis.shape[1], n)


def _use_fft() -> bool:
    """Whether the transform runs as torch.fft (as torch.stft does) rather than a matmul with the dense
    DFT basis: always, except in an ONNX export, whose graph must hold real-valued ops only. The matmul
    costs O(n_fft²) a frame and an n_fft² basis (on a 2-core CPU 5-50× torch.stft's time at n_fft 256-4096;
    n_fft 65536 needed a 34 GB basis); the FFT is torch's own algorithm, so this path also rounds as
    torch.stft does."""
    return not torch.onnx.is_in_onnx_export()


def _compute_dtype(data: torch.Tensor, window: torch.Tensor | None) -> torch.dtype:
    """float64 where the data or the window is 64-bit, else float32: torch.stft/istft promote the two
    (a float32 signal with a float64 window gives complex128)."""
    if window is not None and window.dtype in (torch.float64, torch.complex128):
        return torch.float64
    return compute_dtype(data.dtype)


def _frames(x: torch.Tensor, n_fft: int, hop: int, pad: int, pad_mode: str) -> torch.Tensor:
    """(B, L) real → (B, T, n_fft) frames of the centre-padded signal (a strided view where possible)."""
    if pad > 0:
        if pad_mode == "constant":
            x = F.pad(x, (pad, pad))
        else:  # reflect/replicate/circular need a (N, C, L) input
            x = F.pad(x.unsqueeze(1), (pad, pad), mode=pad_mode).squeeze(1)
    if torch.onnx.is_in_onnx_export():
        # ONNX has no strided-window view (the exporter rejects unfold here): gather the frames by index.
        n_frames = (x.shape[-1] - n_fft) // hop + 1
        idx = torch.arange(n_frames, device=x.device).unsqueeze(1) * hop + torch.arange(
            n_fft, device=x.device
        )
        return x[:, idx]
    return x.unfold(-1, n_fft, hop)


def _apply_window(
    fr: torch.Tensor, fi: torch.Tensor | None, window: torch.Tensor | None, ctype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Multiply frames ``fr + i·fi`` (``fi`` None: real) by ``window`` (None: rectangular, a no-op)."""
    if window is not None:
        if window.is_complex():
            w = torch.view_as_real(window).to(ctype)
            wr, wi = w[:, 0], w[:, 1]
            if fi is None:
                fr, fi = fr * wr, fr * wi
            else:
                fr, fi = fr * wr - fi * wi, fr * wi + fi * wr
        else:
            w = window.to(ctype)
            fr = fr * w
            fi = fi * w if fi is not None else None
    return fr, fi


def stft(
    x: torch.Tensor,
    *,
    n_fft: int,
    hop: int,
    window: torch.Tensor | None,
    center: bool,
    pad_mode: str,
    normalized: bool,
    onesided: bool,
    power: float | None = None,
) -> torch.Tensor:
    """STFT of ``x`` ``(B, L)`` (real, or complex) → real layout ``(B, F, T, 2)``, or ``|X|^power``
    ``(B, F, T)`` when ``power`` is given.

    ``X[b, k, t] = Σ_n x_pad[b, t·hop + n] · w[n] · e^{-2πikn/N}`` (× N^-1/2 when ``normalized``).
    """
    ctype = _compute_dtype(x, window)
    pad = n_fft // 2 if center else 0
    if x.is_complex():
        parts = torch.view_as_real(x).to(ctype)
        xr, xi = parts[..., 0], parts[..., 1]
    else:
        xr, xi = x.to(ctype), None
    fr = _frames(xr, n_fft, hop, pad, pad_mode)
    fi = _frames(xi, n_fft, hop, pad, pad_mode) if xi is not None else None
    fr, fi = _apply_window(fr, fi, window, ctype)
    if _use_fft():
        frames = fr if fi is None else torch.complex(fr, fi)
        out = torch.fft.rfft(frames, dim=-1) if onesided else torch.fft.fft(frames, dim=-1)
        spec = torch.view_as_real(out).transpose(1, 2)  # (B, F, T, 2)
    else:
        basis = _forward_basis(n_fft, onesided, ctype, x.device)  # (2F, N)
        n_bins = basis.shape[0] // 2
        out = fr @ basis.t()  # (B, T, 2F): [Re of real part | Im of real part]
        re, im = out[..., :n_bins], out[..., n_bins:]
        if fi is not None:
            # DFT(fr + i fi) = (C fr - S' fi) + i (S' fr + C fi), with S' the -sin plane.
            out_i = fi @ basis.t()
            re, im = re - out_i[..., n_bins:], im + out_i[..., :n_bins]
        spec = torch.stack((re, im), dim=-1).transpose(1, 2)  # (B, F, T, 2)
    if normalized:
        spec = spec * (1.0 / math.sqrt(n_fft))
    if power is not None:
        return power_spectrum(spec, power)
    return spec.contiguous()


def power_spectrum(spec: torch.Tensor, power: float) -> torch.Tensor:
    """``|X|^power`` of a real-layout spectrum ``(..., 2)``, with a zero (not NaN) gradient where
    ``|X| = 0`` -- a silent frame --, as the mel path's :func:`nbxsig.reference.mel.power_of` (torch's
    ``X.abs()`` has that gradient at 0 as well; ``sqrt(re² + im²)`` has 0 · inf = NaN)."""
    return power_of(spec[..., 0], spec[..., 1], power)


def envelope(
    window: torch.Tensor | None, *, n_fft: int, hop: int, n_frames: int, dtype, device
) -> torch.Tensor:
    """Σ_t w²[p - t·hop] over the full overlap-add length ``n_fft + hop·(T-1)``; complex for a
    complex window (``dtype`` then names its real part)."""
    if window is None:
        w2 = torch.ones(n_fft, dtype=dtype, device=device)
    elif window.is_complex():
        # torch.istft divides by Σ w² (window.pow(2)), not by Σ |w|²: the envelope stays complex.
        w2 = window.to(dtype.to_complex()) ** 2
    else:
        w2 = window.to(dtype) ** 2
    return _overlap_add(w2.reshape(1, 1, n_fft).expand(1, n_frames, n_fft), hop, n_fft)[0]


def _as_complex(spec: torch.Tensor) -> torch.Tensor:
    """A real-layout ``(..., 2)`` tensor as complex: a view where its strides allow (the layout
    ``view_as_real`` gives, as from a complex input), else a copy (and always under torch.compile,
    which cannot trace ``storage_offset``)."""
    if not torch.compiler.is_compiling():
        strides = spec.stride()
        if strides[-1] == 1 and spec.storage_offset() % 2 == 0 and all(s % 2 == 0 for s in strides[:-1]):
            return torch.view_as_complex(spec)
    return torch.complex(spec[..., 0], spec[..., 1])


def _overlap_add(frames: torch.Tensor, hop: int, n_fft: int) -> torch.Tensor:
    """(B, T, N) → (B, N + hop·(T-1)): Σ_t frames[t] placed at t·hop. ``n_fft`` comes in as a
    Python int (not from ``frames.shape``) so an exported graph has static kernel shapes."""
    n_batch, n_frames = frames.shape[0], frames.shape[1]
    full = n_fft + hop * (n_frames - 1)
    if torch.onnx.is_in_onnx_export():
        # The exporter cannot translate col2im with these shapes; a transposed convolution with an
        # identity kernel is the same overlap-add (n_fft× the flops, fine for an exported graph).
        eye = torch.eye(n_fft, dtype=frames.dtype, device=frames.device).unsqueeze(1)
        return F.conv_transpose1d(frames.transpose(1, 2), eye, stride=hop).reshape(n_batch, full)
    # Cut each frame into r = ceil(N / hop) hop-long pieces; piece j of frame t lands on output
    # block t + j, so r shifted slice-adds of (B, T, hop) make the sum. F.fold (col2im) did the same
    # 3-15× slower on a 2-core CPU (n_fft 400-2048 at a quarter hop, 4 × 10 s: 8-15 ms against
    # ~1 ms) and 2-3× slower down to hop 8; it tied only at hop 1.
    n_pieces = -(-n_fft // hop)
    if n_pieces * hop > n_fft:
        frames = F.pad(frames, (0, n_pieces * hop - n_fft))
    pieces = frames.reshape(n_batch, n_frames, n_pieces, hop)
    out = frames.new_zeros(n_batch, n_frames + n_pieces - 1, hop)
    for j in range(n_pieces):
        out[:, j : j + n_frames] += pieces[:, :, j]
    return out.reshape(n_batch, -1)[:, :full]


def istft_range(
    n_fft: int, hop: int, n_frames: int, center: bool, length: int | None
) -> tuple[int, int, int]:
    """``(start, stop, n_out)``: output sample o is overlap-add sample ``start + o`` for
    ``o < stop - start``; samples from ``stop - start`` to ``n_out`` are zero padding (``length``
    longer than the signal)."""
    full = n_fft + hop * (n_frames - 1)
    start = n_fft // 2 if center else 0
    # Without length torch slices to -(n_fft // 2) when centred.
    end = start + length if length is not None else full - (n_fft // 2 if center else 0)
    n_out = max(end - start, 0)
    stop = max(min(end, full), start)
    return start, stop, n_out


def _extend(x: torch.Tensor, length: int, value: float) -> torch.Tensor:
    """``x`` (an overlap-add sum or envelope, last dim ``n_fft + hop·(T-1)``) padded with ``value`` by
    ``length`` samples, so that the slice ``[start : start + length]`` is in range for every frame count.

    Used for a given ``length`` while tracing (ONNX export; under torch.compile too, where shape guards
    made it unnecessary but harmless): :func:`istft_range`'s ``min``/``max`` and the
    ``n_out > stop - start`` test are Python, which a trace evaluates once, for the example's frame
    count, so a graph exported with a fixed ``length`` returned fewer samples than ``length`` for fewer
    frames than the example's, and a graph whose example needed zero padding returned more samples
    for more frames. With the padding, one slice of constant length does both the trim and
    torch.istft's zero padding (the sum is 0 there, the envelope 1)."""
    return F.pad(x, (0, length), value=value)


def istft(
    spec: torch.Tensor,
    *,
    n_fft: int,
    hop: int,
    window: torch.Tensor | None,
    center: bool,
    normalized: bool,
    onesided: bool,
    length: int | None,
    return_complex: bool,
    strict_nola: bool,
) -> torch.Tensor:
    """Inverse STFT of ``spec`` (real layout ``(B, F, T, 2)``) → ``(B, n_out)``, real or complex.

    ``y = OLA(irDFT(X) · w) / OLA(w²)``, trimmed by ``n_fft//2`` at both ends when ``center``; the
    division happens only where the envelope exceeds ``NOLA_EPS`` (elsewhere the sum is kept as is,
    and there it is ~0 because the window vanishes), unless ``strict_nola`` asks for torch's error.
    """
    ctype = _compute_dtype(spec, window)
    spec = spec.to(ctype)
    n_frames = spec.shape[2]
    if normalized:
        spec = spec * math.sqrt(n_fft)
    if _use_fft():
        frames = _as_complex(spec).transpose(1, 2)
        if return_complex:
            out = torch.fft.ifft(frames, dim=-1)
            fr, fi = out.real, out.imag
        else:
            # torch.istft: a two-sided spectrum's first n_fft // 2 + 1 bins, read as Hermitian.
            fr, fi = torch.fft.irfft(frames[..., : n_fft // 2 + 1], n=n_fft, dim=-1), None
    else:
        xr = spec[..., 0].transpose(1, 2)  # (B, T, F)
        xi = spec[..., 1].transpose(1, 2)
        if return_complex:
            # Full complex inverse DFT: x = (1/N) Σ_k X_k e^{+iθ}; with C = cos, S' = -sin planes:
            # Re = (C·Xr + S'·Xi)/N, Im = (C·Xi - S'·Xr)/N.
            basis = _forward_basis(n_fft, False, ctype, spec.device) / n_fft
            c, s = basis[:n_fft], basis[n_fft:]
            fr = xr @ c + xi @ s
            fi = xi @ c - xr @ s
        else:
            half = n_fft // 2 + 1
            basis = _inverse_basis(n_fft, ctype, spec.device)  # (2·half, N)
            fr = torch.cat((xr[..., :half], xi[..., :half]), dim=-1) @ basis
            fi = None
    fr, fi = _apply_window(fr, fi, window, ctype)
    env = envelope(window, n_fft=n_fft, hop=hop, n_frames=n_frames, dtype=ctype, device=spec.device)
    start, stop, n_out = istft_range(n_fft, hop, n_frames, center, length)
    traced_length = length is not None and _exporting()
    if traced_length:
        env, stop = _extend(env, length, 1.0), start + length  # (see _extend)
    env = env[start:stop]
    if strict_nola and bool((env.abs() < NOLA_EPS).any()):
        low = env.abs().min().item()
        raise_nola(low)
    divide = env.abs() > NOLA_EPS
    scale = torch.where(divide, 1.0 / torch.where(divide, env, 1.0), 1.0)
    y = _overlap_add(fr, hop, n_fft)
    if fi is not None:
        y = torch.complex(y, _overlap_add(fi, hop, n_fft))  # before the scale, which may be complex
    if traced_length:
        y = _extend(y, length, 0.0)
    y = y[:, start:stop] * scale
    if n_out > stop - start:
        y = F.pad(y, (0, n_out - (stop - start)))
    return y


def istft_parts(
    spec: torch.Tensor,
    *,
    n_fft: int,
    hop_length: int,
    window: torch.Tensor,
    scale: float,
    center: bool,
    length: int | None,
) -> torch.Tensor:
    """``InverseSpectrogram``'s inverse: a real-layout onesided spectrum ``(B, F, T, 2)`` (float32/64)
    → ``(B, L)``, as torchaudio computes it: the inverse real DFT of ``X / scale``, windowed,
    overlap-added and divided by the window envelope; ``window`` is zero-padded to ``n_fft``. Raises
    torch.istft's NOLA error (outside a trace) where the envelope vanishes inside the output."""
    dtype, device = spec.dtype, spec.device
    synthesis = (window.to(device=device, dtype=torch.float64) / scale).to(dtype)
    if _use_fft():
        frames = torch.fft.irfft(_as_complex(spec).transpose(-1, -2), n=n_fft, dim=-1) * synthesis
    else:
        planes = torch.cat((spec[..., 0], spec[..., 1]), dim=-2).transpose(-1, -2)  # (B, T, 2F)
        frames = (planes @ _inverse_basis(n_fft, dtype, device)) * synthesis
    n_frames = frames.shape[-2]
    env = envelope(window, n_fft=n_fft, hop=hop_length, n_frames=n_frames, dtype=dtype, device=device)
    start, stop, n_out = istft_range(n_fft, hop_length, n_frames, center, length)
    traced_length = length is not None and _exporting()
    if traced_length:
        env, stop = _extend(env, length, 1.0), start + length  # (see _extend)
    env = env[start:stop]
    if not _exporting() and bool((env.abs() < NOLA_EPS).any()):
        from ..errors import ParameterValueError

        raise ParameterValueError(
            "window must overlap-add to a nonzero envelope over the output (the NOLA condition), got a "
            "window whose squared overlap-add is below 1e-11 somewhere; use center=True or another window"
        )
    y = _overlap_add(frames, hop_length, n_fft)
    if traced_length:
        y = _extend(y, length, 0.0)
    y = y[:, start:stop] / env
    if n_out > stop - start:  # length beyond the frames: zeros, as torch.istft pads
        y = F.pad(y, (0, n_out - (stop - start)))
    return y


def raise_nola(low: float) -> None:
    from ..errors import ParameterValueError

    raise ParameterValueError(
        f"window must satisfy the NOLA condition with strict_nola=True: the overlap-added squared "
        f"window falls to {low:.3g} (< {NOLA_EPS:g}) inside the output; choose another window, hop_length "
        f"or center=True, or pass strict_nola=False to divide only where the envelope is non-zero"
    )
