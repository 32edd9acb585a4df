"""Fused waveform → (log-)mel Triton kernel (the twin of :mod:`nbxsig.reference.mel`).

One program computes ``BLOCK_T`` frames of one signal and all of their mels::

    frame[t, k]  = x[pad_map(t·hop + k − pad)] · w[k]           (centre padding by index mapping)
    re/im[t, f]  = Σ_k frame[t, k] · scale·(cos|−sin)(2πfk/n)        (tl.dot with the DFT basis, folded
                                                                       in half by the real-input symmetry)
    P[t, f]      = (re² + im²)^(power/2)
    mel[t, m]    = Σ_f P[t, f] · fb[f, m]                          (tl.dot, accumulated in registers)
    out[m, t]    = log(max(mel, floor))                            (optional)

The frequency axis is walked in ``BLOCK_F`` chunks; each chunk's ``re``/``im`` tile lives only in
registers and is folded into the mel accumulator at once, so neither the padded signal, the frames,
the complex spectrum nor the power spectrogram ever exist in device memory: the kernel reads the
waveform (from L1/L2, frames overlap) and writes mels. Whisper's "max − 8" floor needs the
per-example maximum, which one ``atomic_max`` per program collects during the same pass; a second,
elementwise pass applies the floor and ``(x + 4) / 4``.

Dot precision follows ``torch.get_float32_matmul_precision()``: "highest" → 3xTF32 (split
products, error ~fp32 rounding: the measured relative error is in docs/features.md), "high" and
"medium" → single-pass TF32. The private ``_precision`` argument forces another choice ("ieee":
CUDA-core fp32 FMA) for the benchmark's comparison rows.

Backward: the kernel stores nothing for autograd; :class:`_FusedMel` recomputes the torch twin
under autograd in ``backward`` (its ``|X|^power`` has a finite, zero gradient where ``|X| = 0``).
"""

from __future__ import annotations

import math
from collections import OrderedDict

import torch
import triton
import triton.language as tl

from .._dispatch import interpreter_enabled
from ..reference import mel as ref
from ..reference.dft import rdft_basis
from ._runtime import check_launchable, empty_output

_PAD_MODES = {"constant": 0, "reflect": 1, "replicate": 2, "circular": 3}
_LOGS = {None: 0, "log10": 1, "ln": 2, "log2": 3}
_LOG10_2 = math.log10(2.0)
_LN_2 = math.log(2.0)


@triton.jit
def _mel_kernel(
    x_ptr,
    stride_xb,
    stride_xl,
    length,
    win_ptr,
    cos_ptr,
    sin_ptr,
    fb_ptr,
    out_ptr,
    stride_ob,
    stride_om,
    stride_ot,
    peak_ptr,
    n_frames,
    hop,
    pad,
    n_fft,
    n_mels,
    power,
    floor,
    PAD_MODE: tl.constexpr,
    POWER_MODE: tl.constexpr,  # 2: |X|², 1: |X|, 0: any other power
    HAS_FLOOR: tl.constexpr,
    LOG: tl.constexpr,  # 0 none, 1 log10, 2 ln, 3 log2
    TRACK_PEAK: tl.constexpr,
    K_PAD: tl.constexpr,
    F_PAD: tl.constexpr,
    M_PAD: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_F: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PRECISION: tl.constexpr,
):
    pid_t = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    t_ok = t < n_frames
    m = tl.arange(0, M_PAD)
    x_row = x_ptr + b * stride_xb
    # 64-bit sample positions: t·hop can pass 2^31 on hour-long batched signals.
    start = t.to(tl.int64) * hop - pad
    acc = tl.zeros((BLOCK_T, M_PAD), dtype=tl.float32)
    for f0 in range(0, F_PAD, BLOCK_F):
        f = f0 + tl.arange(0, BLOCK_F)
        re = tl.zeros((BLOCK_T, BLOCK_F), dtype=tl.float32)
        im = tl.zeros((BLOCK_T, BLOCK_F), dtype=tl.float32)
        for k0 in range(0, K_PAD, BLOCK_K):
            # Real-input symmetry halves the DFT: with a = x[k]·w[k] and b = x[n−k]·w[n−k],
            # Re X[f] = Σ_{k<=n/2} (a + b) cos(2πfk/n) and Im X[f] = −Σ_{k<=n/2} (a − b) sin(2πfk/n),
            # where b is left out at k = 0 and k = n/2 (those samples appear once).
            k = k0 + tl.arange(0, BLOCK_K)
            ka = k <= n_fft // 2
            kb = (k >= 1) & (2 * k < n_fft)
            wa = tl.load(win_ptr + k, mask=ka, other=0.0)
            wb = tl.load(win_ptr + (n_fft - k), mask=kb, other=0.0)
            pos_a = start[:, None] + k[None, :]
            pos_b = start[:, None] + (n_fft - k)[None, :]
            ok_a = t_ok[:, None] & ka[None, :]
            ok_b = t_ok[:, None] & kb[None, :]
            # Centre padding by index mapping: the padded signal is never materialised.
            if PAD_MODE == 0:
                ok_a = ok_a & (pos_a >= 0) & (pos_a < length)
                ok_b = ok_b & (pos_b >= 0) & (pos_b < length)
            elif PAD_MODE == 1:
                pos_a = tl.where(pos_a < 0, -pos_a, pos_a)
                pos_a = tl.where(pos_a >= length, 2 * (length - 1) - pos_a, pos_a)
                pos_b = tl.where(pos_b < 0, -pos_b, pos_b)
                pos_b = tl.where(pos_b >= length, 2 * (length - 1) - pos_b, pos_b)
            elif PAD_MODE == 2:
                pos_a = tl.minimum(tl.maximum(pos_a, 0), length - 1)
                pos_b = tl.minimum(tl.maximum(pos_b, 0), length - 1)
            else:
                pos_a = ((pos_a % length) + length) % length
                pos_b = ((pos_b % length) + length) % length
            xa = tl.load(x_row + pos_a * stride_xl, mask=ok_a, other=0.0).to(tl.float32) * wa[None, :]
            xb = tl.load(x_row + pos_b * stride_xl, mask=ok_b, other=0.0).to(tl.float32) * wb[None, :]
            # The basis is zero-padded to (K_PAD, F_PAD): no mask needed on it.
            boffs = k[:, None] * F_PAD + f[None, :]
            re = tl.dot(xa + xb, tl.load(cos_ptr + boffs), re, input_precision=PRECISION)
            im = tl.dot(xa - xb, tl.load(sin_ptr + boffs), im, input_precision=PRECISION)
        p = re * re + im * im
        if POWER_MODE == 1:
            p = tl.sqrt(p)
        elif POWER_MODE == 0:
            p = tl.where(p > 0, tl.exp2(tl.log2(tl.where(p > 0, p, 1.0)) * (power * 0.5)), 0.0)
        fb = tl.load(fb_ptr + f[:, None] * M_PAD + m[None, :])
        acc = tl.dot(p, fb, acc, input_precision=PRECISION)
    ok_out = t_ok[:, None] & (m < n_mels)[None, :]
    if TRACK_PEAK:
        # Mels are >= 0, and non-negative floats order like their int32 bit patterns.
        peak = tl.max(tl.max(tl.where(ok_out, acc, 0.0), axis=1), axis=0)
        tl.atomic_max(peak_ptr + b, peak.to(tl.int32, bitcast=True))
    if HAS_FLOOR:
        acc = tl.maximum(acc, floor)
    if LOG == 1:
        acc = tl.log2(acc) * 0.30102999566398120
    elif LOG == 2:
        acc = tl.log2(acc) * 0.69314718055994531
    elif LOG == 3:
        acc = tl.log2(acc)
    offs = b * stride_ob + m[None, :].to(tl.int64) * stride_om + t[:, None].to(tl.int64) * stride_ot
    tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=ok_out)


@triton.jit
def _whisper_finish_kernel(out_ptr, peak_ptr, per_example, BLOCK: tl.constexpr):
    """``out = (max(out, log10(max(peak, 1e-10)) − 8) + 4) / 4`` on a contiguous ``(B, M, T)`` block."""
    b = tl.program_id(1).to(tl.int64)
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = i < per_example
    peak = tl.load(peak_ptr + b).to(tl.float32, bitcast=True)
    top = tl.log2(tl.maximum(peak, 1e-10)) * 0.30102999566398120 - 8.0
    ptrs = out_ptr + b * per_example + i
    v = tl.load(ptrs, mask=ok, other=0.0).to(tl.float32)
    tl.store(ptrs, ((tl.maximum(v, top) + 4.0) * 0.25).to(out_ptr.dtype.element_ty), mask=ok)


# (BLOCK_T, BLOCK_F, BLOCK_K, warps, stages). Derived for n_fft=400, 80/128 mels: the mel
# accumulator (BLOCK_T × M_PAD fp32) and two re/im tiles must stay in registers, which caps BLOCK_T at
# 64 for 4 warps; BLOCK_F = 32 wastes 10% of the 201→224 padded bins where 64 would waste 21%.
_CONFIGS = [
    triton.Config({"BLOCK_T": 64, "BLOCK_F": 32, "BLOCK_K": 32}, num_warps=4, num_stages=2),
    triton.Config({"BLOCK_T": 64, "BLOCK_F": 32, "BLOCK_K": 16}, num_warps=4, num_stages=3),
    triton.Config({"BLOCK_T": 128, "BLOCK_F": 32, "BLOCK_K": 32}, num_warps=8, num_stages=2),
    triton.Config({"BLOCK_T": 32, "BLOCK_F": 32, "BLOCK_K": 32}, num_warps=4, num_stages=2),
    triton.Config({"BLOCK_T": 64, "BLOCK_F": 64, "BLOCK_K": 32}, num_warps=8, num_stages=2),
]
_tuned = None


def _tuned_kernel():
    global _tuned  # built on first GPU use, never at import
    if _tuned is None:
        _tuned = triton.autotune(_CONFIGS, key=["n_fft", "M_PAD", "F_PAD", "POWER_MODE", "PRECISION"])(
            _mel_kernel
        )
    return _tuned


def dot_precision(device: torch.device) -> str:
    """The tl.dot input precision for fp32 operands, from torch's matmul precision setting."""
    if device.type != "cuda":
        return "ieee"  # the interpreter computes dots in numpy fp32 regardless
    return "tf32x3" if torch.get_float32_matmul_precision() == "highest" else "tf32"


_PACK_CACHE: OrderedDict = OrderedDict()


def _packed(window: torch.Tensor, filters: torch.Tensor, n_fft: int, scale: float, k_pad, f_pad, m_pad):
    """The window (fp32, ``n_fft``), the half DFT basis ``(K_PAD, F_PAD)`` ×2 for ``k = 0..n_fft//2``
    (scale folded in, zero-padded) and the filters ``(F_PAD, M_PAD)``, cached per operands.

    The key holds the operand tensors themselves (not only their addresses), so an entry can never
    be served for a different tensor that reused the memory; ``_version`` catches in-place edits.
    """
    key = (id(window), window._version, id(filters), filters._version, n_fft, scale, k_pad, f_pad, m_pad)
    hit = _PACK_CACHE.get(key)
    if hit is not None and hit[0] is window and hit[1] is filters:
        _PACK_CACHE.move_to_end(key)
        return hit[2]
    device = window.device
    n_freq = n_fft // 2 + 1
    half = n_fft // 2 + 1
    basis = rdft_basis(n_fft, dtype=torch.float64, device=device)[:, :, :half] * scale  # (2, F, half)
    planes = torch.zeros(2, k_pad, f_pad, dtype=torch.float64, device=device)
    planes[:, :half, :n_freq] = basis.transpose(1, 2)
    fb = torch.zeros(f_pad, m_pad, dtype=torch.float32, device=device)
    fb[:n_freq, : filters.shape[1]] = filters.float()
    packed = (
        window.float().contiguous(),
        planes[0].float().contiguous(),
        planes[1].float().contiguous(),
        fb,
    )
    _PACK_CACHE[key] = (window, filters, packed)
    if len(_PACK_CACHE) > 8:
        _PACK_CACHE.popitem(last=False)
    return packed


def _launch(
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
    floor: float | None,
    log: str | None,
    drop_last: bool,
    whisper: bool,
    _precision: str | None = None,
) -> torch.Tensor:
    device = check_launchable(x, window, filters)
    batch, length = x.shape
    pad = n_fft // 2 if center else 0
    n_frames = 1 + (length + 2 * pad - n_fft) // hop_length - (1 if drop_last else 0)
    n_mels = filters.shape[1]
    k_pad = triton.cdiv(n_fft // 2 + 1, 32) * 32
    f_pad = triton.cdiv(n_fft // 2 + 1, 32) * 32
    m_pad = max(16, triton.next_power_of_2(n_mels))
    win, cos, sin, fb = _packed(window, filters, n_fft, scale, k_pad, f_pad, m_pad)
    out = empty_output((batch, n_mels, n_frames), dtype=x.dtype, device=device)
    peak = torch.zeros(batch if whisper else 1, dtype=torch.int32, device=device)
    if n_frames <= 0:
        return out
    args = dict(
        PAD_MODE=_PAD_MODES[pad_mode],
        POWER_MODE=2 if power == 2.0 else (1 if power == 1.0 else 0),
        HAS_FLOOR=floor is not None,
        LOG=_LOGS[log],
        TRACK_PEAK=whisper,
        K_PAD=k_pad,
        F_PAD=f_pad,
        M_PAD=m_pad,
        PRECISION=_precision or dot_precision(device),
    )
    common = (x, x.stride(0), x.stride(1), length, win, cos, sin, fb, out, *out.stride(), peak)
    scalars = (n_frames, hop_length, pad, n_fft, n_mels, float(power), float(floor or 0.0))
    if interpreter_enabled() and device.type == "cpu":
        # One fixed small config: autotuning under the interpreter would run every config.
        grid = (triton.cdiv(n_frames, 16), batch)
        _mel_kernel[grid](*common, *scalars, **args, BLOCK_T=16, BLOCK_F=16, BLOCK_K=16)
    else:
        grid = lambda meta: (triton.cdiv(n_frames, meta["BLOCK_T"]), batch)
        _tuned_kernel()[grid](*common, *scalars, **args)
    if whisper:
        per_example = n_mels * n_frames
        block = 1024
        _whisper_finish_kernel[(triton.cdiv(per_example, block), batch)](out, peak, per_example, BLOCK=block)
    return out


class _FusedMel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, window, filters, opts):
        ctx.save_for_backward(x, window, filters)
        ctx.opts = opts
        return _launch(x, window=window, filters=filters, **opts)

    @staticmethod
    def backward(ctx, grad):
        x, window, filters = ctx.saved_tensors
        opts = {k: v for k, v in ctx.opts.items() if k != "_precision"}
        with torch.enable_grad():
            # Recompute the torch twin in fp32 (at least) under autograd: no spectrum was stored.
            xd = x.detach().to(torch.promote_types(x.dtype, torch.float32)).requires_grad_(True)
            out = ref.mel_spectrogram(xd, window=window, filters=filters, **opts)
            (gx,) = torch.autograd.grad(out, xd, grad.to(out.dtype))
        return gx.to(x.dtype), None, None, None


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
    _precision: str | None = None,
) -> torch.Tensor:
    """Triton twin of :func:`nbxsig.reference.mel.mel_spectrogram` on ``(B, L)`` input."""
    opts = dict(
        n_fft=n_fft,
        hop_length=hop_length,
        power=power,
        scale=scale,
        center=center,
        pad_mode=pad_mode,
        floor=floor,
        log=log,
        drop_last=drop_last,
        whisper=whisper,
        _precision=_precision,
    )
    if torch.is_grad_enabled() and x.requires_grad:
        return _FusedMel.apply(x, window, filters, opts)
    return _launch(x, window=window, filters=filters, **opts)
