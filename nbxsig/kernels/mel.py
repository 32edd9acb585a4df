"""Waveform → (log-)mel on the Triton backend (the twin of :mod:`nbxsig.reference.mel`): a fused kernel.

One program computes ``BLOCK_T`` frames of one signal and all of their mels::

    frame[t, k]  = x[pad_map(t·hop + k − pad)] · w[k]           (centre padding by index mapping)
    re/im[t, f]  = Σ_k frame[t, k] · scale·(cos|−sin)(2πfk/n)        (tl.dot with the DFT basis, folded
                                                                       in half by the real-input symmetry)
    P[t, f]      = (re² + im²)^(power/2)
    mel[t, m]    = Σ_f P[t, f] · fb[f, m]                          (tl.dot, accumulated in registers)
    out[m, t]    = log(max(mel, floor))                            (optional)

The frequency axis is walked in ``BLOCK_F`` chunks (the remainder in 64/32/16-bin chunks); each
chunk's ``re``/``im`` tile lives only in registers and is folded into the mel accumulators at once,
so neither the padded signal, the frames, the complex spectrum nor the power spectrogram ever exist
in device memory. Frames that read only samples inside the signal run in a branch-free "interior"
launch (32-bit offsets, pipelined loads); the few at each end, which read centre padding, in a
small "edge" launch that maps indices. Whisper's "max − 8" floor needs the per-example maximum,
which one ``atomic_max`` per program collects; a second, elementwise pass applies the floor and
``(x + 4) / 4``.

Dot precision follows ``torch.get_float32_matmul_precision()``: "highest" → 3xTF32 (operands split
into TF32 hi + fp32 lo, three products), "high" and "medium" → TF32 with both operands rounded to
nearest here (the tensor cores would truncate them, a bias). The private ``_precision`` argument
forces another choice ("ieee": CUDA-core fp32 FMA).

Which implementation runs: :func:`mel_path`. On a GPU, ``nbxsig.stft.spectrogram`` + one mel
matmul (:func:`_unfused`) is measured faster than this kernel, so it is the auto path there; the
kernel runs as ``_path="fused"`` and under the interpreter. docs/features.md has the numbers. The
four-step kernel of :mod:`nbxsig.kernels.fourstep` computes the same function for composite n_fft
without any spectrogram tensor (``_path="fourstep"``; measured slower than the unfused path, so
opt-in) -- and the unfused path's spectrogram is itself that kernel where it measured faster. On an
H100/H200 at TF32 precision (matmul precision "high"/"medium"), fp32 input, n_fft <= 414 and <= 128
mels, this module's launch can run all its frames in the warp-specialized Gluon kernel of
:mod:`nbxsig.kernels.mel_sm90` (``_path="sm90"``), the auto path there (:data:`SM90_AUTO`; 1.8× the
unfused path on an H100).

Backward: the kernel stores nothing for autograd; :class:`_FusedMel` recomputes the torch twin
under autograd in ``backward`` (its ``|X|^power`` has a finite, zero gradient where ``|X| = 0``).
"""

from __future__ import annotations

from collections import OrderedDict

import torch
import triton
import triton.language as tl

from .._dispatch import interpreter_enabled
from ..errors import bad_value
from ..reference import mel as ref
from ..reference.dft import rdft_basis
from . import _runtime
from ._launch import CachedLaunch
from ._runtime import cdiv, check_launchable, empty_output, next_pow2, over_grid_batch
from .stft import n_frames as count_frames

_PAD_MODES = {"constant": 0, "reflect": 1, "replicate": 2, "circular": 3}
_LOGS = {None: 0, "log10": 1, "ln": 2, "log2": 3}


def power_mode(power: float) -> int:
    """The kernels' ``POWER_MODE``: 2 for ``|X|²``, 1 for ``|X|``, 0 for any other power."""
    return 2 if power == 2.0 else (1 if power == 1.0 else 0)


def log_mode(log: str | None, *, whisper: bool) -> int:
    """The kernels' ``LOG`` constexpr: ``_LOGS[log]``, or 4 for Whisper's log10 with its ``(x + 4) / 4``
    applied in the store. That affine map is increasing, so it commutes with the floor at the
    example's maximum − 8 that :func:`whisper_finish` applies afterwards, which then rewrites only
    the values below that floor."""
    return 4 if whisper else _LOGS[log]


@triton.jit
def _tf32_hi(v):
    """``v`` rounded to TF32 (10 mantissa bits, to nearest): exact in a TF32 dot, and ``v − hi`` is
    exact in fp32."""
    bits = v.to(tl.int32, bitcast=True)
    return ((bits + 0x1000) & -8192).to(tl.float32, bitcast=True)


@triton.jit
def _dot(a, b_ptrs, b_lo_ptrs, acc, PRECISION: tl.constexpr):
    """``acc + a @ b`` for fp32 ``a`` and a basis/filter tile ``b`` stored as TF32 ``hi`` planes
    (``b_ptrs``; with "ieee", the fp32 values) and fp32 residuals ``lo`` (``b_lo_ptrs``).

    "tf32": ``a`` rounded to nearest TF32 here and ``b`` on the host, so the tensor cores see exact
    TF32 operands and do not truncate them (truncation biases every product low by ~2^-11).
    "tf32x3": ``a_hi·b_lo + a_lo·b_hi + a_hi·b_hi`` (small terms first), ~2^-21 relative per
    product, i.e. fp32-class, in three TF32 dots. "ieee": CUDA-core fp32 FMAs.
    """
    b = tl.load(b_ptrs)
    if PRECISION == "tf32x3":
        a_hi = _tf32_hi(a)
        a_lo = a - a_hi
        acc = tl.dot(a_hi, tl.load(b_lo_ptrs), acc, input_precision="tf32")
        acc = tl.dot(a_lo, b, acc, input_precision="tf32")
        acc = tl.dot(a_hi, b, acc, input_precision="tf32")
    elif PRECISION == "tf32":
        acc = tl.dot(_tf32_hi(a), b, acc, input_precision="tf32")
    else:
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    return acc


@triton.jit
def _folded_frames(
    x_tile,
    x_row,
    stride_xl,
    length,
    rel,
    start,
    t_ok,
    k,
    wa_ptr,
    wb_ptr,
    n_fft,
    EDGE: tl.constexpr,
    PAD_MODE: tl.constexpr,
):
    """The folded, windowed frame tile ``(a + b, a − b)`` for columns ``k``: ``a = x[t·hop + k]·w[k]``,
    ``b = x[t·hop + n − k]·w[n − k]`` (``wa``/``wb`` are zero where a column has no such sample)."""
    wa = tl.load(wa_ptr + k)
    wb = tl.load(wb_ptr + k)
    # Column masks (not ``w != 0``: a zero window tap still turns an inf sample into NaN, as in torch).
    ka = (k <= n_fft // 2)[None, :]
    kb = ((k >= 1) & (2 * k < n_fft))[None, :]
    if not EDGE:
        # Every sample of the launch's frames lies inside the signal: no padding, 32-bit offsets
        # from the tile's first sample (the host keeps (BLOCK_T·hop + n_fft)·stride < 2^31), and no
        # branch, so the compiler can pipeline these loads like the basis tiles.
        pa = rel[:, None] + k[None, :]
        pb = rel[:, None] + (n_fft - k)[None, :]
        xa = tl.load(x_tile + pa * stride_xl, mask=t_ok[:, None] & ka, other=0.0)
        xb = tl.load(x_tile + pb * stride_xl, mask=t_ok[:, None] & kb, other=0.0)
    else:
        # The first/last tiles: centre padding by index mapping, 64-bit sample positions.
        pos_a = start[:, None] + k[None, :]
        pos_b = start[:, None] + (n_fft - k)[None, :]
        ok_a = t_ok[:, None] & ka
        ok_b = t_ok[:, None] & kb
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
        xa = tl.load(x_row + pos_a * stride_xl, mask=ok_a, other=0.0)
        xb = tl.load(x_row + pos_b * stride_xl, mask=ok_b, other=0.0)
    xa = xa.to(tl.float32) * wa[None, :]
    xb = xb.to(tl.float32) * wb[None, :]
    return xa + xb, xa - xb


@triton.jit
def _mel_chunk(
    acc1,
    acc2,
    f0,
    x_tile,
    x_row,
    stride_xl,
    length,
    rel,
    start,
    t_ok,
    EDGE: tl.constexpr,
    wa_ptr,
    wb_ptr,
    cos_ptr,
    cos_lo_ptr,
    sin_ptr,
    sin_lo_ptr,
    fb_ptr,
    fb_lo_ptr,
    n_fft,
    power,
    PAD_MODE: tl.constexpr,
    POWER_MODE: tl.constexpr,
    K_HALF: tl.constexpr,
    F_PAD: tl.constexpr,
    M_TOT: tl.constexpr,
    M1: tl.constexpr,
    M2: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_F: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """Bins ``f0 .. f0 + BLOCK_F`` of the tile's frames, folded into the mel accumulators."""
    f = f0 + tl.arange(0, BLOCK_F)
    re = tl.zeros((BLOCK_T, BLOCK_F), dtype=tl.float32)
    im = tl.zeros((BLOCK_T, BLOCK_F), dtype=tl.float32)
    for k0 in range(0, K_HALF, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        s, d = _folded_frames(
            x_tile, x_row, stride_xl, length, rel, start, t_ok, k, wa_ptr, wb_ptr, n_fft, EDGE, PAD_MODE
        )
        # The basis is zero-padded to (K_PAD, F_PAD): no mask needed on it.
        boffs = k[:, None] * F_PAD + f[None, :]
        re = _dot(s, cos_ptr + boffs, cos_lo_ptr + boffs, re, PRECISION)
        im = _dot(d, sin_ptr + boffs, sin_lo_ptr + boffs, im, PRECISION)
    p = re * re + im * im
    if POWER_MODE == 1:
        p = tl.sqrt(p)
    elif POWER_MODE == 0:
        p = tl.where(p != 0, tl.exp2(tl.log2(tl.where(p != 0, p, 1.0)) * (power * 0.5)), 0.0)
    m1 = tl.arange(0, M1)
    foffs = f[:, None] * M_TOT + m1[None, :]
    acc1 = _dot(p, fb_ptr + foffs, fb_lo_ptr + foffs, acc1, PRECISION)
    if M2 > 0:
        m2 = M1 + tl.arange(0, M2)
        foffs2 = f[:, None] * M_TOT + m2[None, :]
        acc2 = _dot(p, fb_ptr + foffs2, fb_lo_ptr + foffs2, acc2, PRECISION)
    return acc1, acc2


@triton.jit
def _store_mels(
    acc,
    m,
    out_ptr,
    b,
    stride_ob,
    stride_om,
    stride_ot,
    t,
    t_ok,
    n_mels,
    floor,
    HAS_FLOOR: tl.constexpr,
    LOG: tl.constexpr,
):
    ok_out = t_ok[:, None] & (m < n_mels)[None, :]
    if HAS_FLOOR:
        acc = tl.maximum(acc, floor)
    if LOG == 1:
        acc = tl.log2(acc) * 0.30102999566398120
    elif LOG == 2:
        acc = tl.log2(acc) * 0.69314718055994531
    elif LOG == 3:
        acc = tl.log2(acc)
    elif LOG == 4:
        acc = (tl.log2(acc) * 0.30102999566398120 + 4.0) * 0.25
    offs = b * stride_ob + m[None, :].to(tl.int64) * stride_om + t[:, None].to(tl.int64) * stride_ot
    tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=ok_out)


@triton.jit
def _mel_kernel(
    x_ptr,
    stride_xb,
    stride_xl,
    length,
    wa_ptr,
    wb_ptr,
    cos_ptr,
    cos_lo_ptr,
    sin_ptr,
    sin_lo_ptr,
    fb_ptr,
    fb_lo_ptr,
    out_ptr,
    stride_ob,
    stride_om,
    stride_ot,
    peak_ptr,
    n_frames,
    t_a,
    t_b,
    hop,
    pad,
    n_fft,
    n_mels,
    power,
    floor,
    EDGE: tl.constexpr,  # frames [0, t_a) and [t_b, n_frames) (padding by index mapping), else [t_a, t_b)
    PAD_MODE: tl.constexpr,
    POWER_MODE: tl.constexpr,  # 2: |X|², 1: |X|, 0: any other power
    HAS_FLOOR: tl.constexpr,
    LOG: tl.constexpr,  # 0 none, 1 log10, 2 ln, 3 log2
    TRACK_PEAK: tl.constexpr,
    K_HALF: tl.constexpr,  # n_fft // 2 + 1 folded columns
    F_PAD: tl.constexpr,  # bins rounded up to 16
    M_TOT: tl.constexpr,
    M1: tl.constexpr,  # mels in two power-of-two blocks: 80 = 64 + 16, not 128
    M2: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_F: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PRECISION: tl.constexpr,
):
    pid = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    if EDGE:
        # Programs [0, n_head) take the head frames, the rest the tail frames.
        n_head = tl.cdiv(t_a, BLOCK_T)
        head = pid < n_head
        t0 = tl.where(head, pid * BLOCK_T, t_b + (pid - n_head) * BLOCK_T)
        t_end = tl.where(head, t_a, n_frames)
    else:
        t0 = t_a + pid * BLOCK_T
        t_end = t_b
    t = t0 + tl.arange(0, BLOCK_T)
    t_ok = t < t_end
    x_row = x_ptr + b * stride_xb
    # 64-bit sample positions: t·hop can pass 2^31 on hour-long signals.
    first = t0.to(tl.int64) * hop - pad
    start = first + tl.arange(0, BLOCK_T).to(tl.int64) * hop
    x_tile = x_row + first * stride_xl
    rel = tl.arange(0, BLOCK_T) * hop
    acc1 = tl.zeros((BLOCK_T, M1), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_T, M2 if M2 > 0 else 16), dtype=tl.float32)
    # Bins in BLOCK_F chunks, then the remainder (F_PAD is a multiple of 16) in power-of-two chunks:
    # 201 bins = 128 + 64 + 16 computes 208 bins, not 256.
    F_MAIN: tl.constexpr = (F_PAD // BLOCK_F) * BLOCK_F
    for f0 in range(0, F_MAIN, BLOCK_F):
        acc1, acc2 = _mel_chunk(
            acc1, acc2, f0, x_tile, x_row, stride_xl, length, rel, start, t_ok, EDGE, wa_ptr, wb_ptr, cos_ptr,
            cos_lo_ptr, sin_ptr, sin_lo_ptr, fb_ptr, fb_lo_ptr, n_fft, power, PAD_MODE, POWER_MODE, K_HALF,
            F_PAD, M_TOT, M1, M2, BLOCK_T, BLOCK_F, BLOCK_K, PRECISION,
        )  # fmt: skip
    # The remainder (less than BLOCK_F <= 128 bins, a multiple of 16) in chunks of 64, 32 and 16 bins.
    tl.static_assert(BLOCK_F <= 128, "the remainder is covered by at most one chunk each of 64, 32, 16 bins")
    REM: tl.constexpr = F_PAD - F_MAIN
    for level in tl.static_range(3):  # a chunk of 64 >> level bins where the remainder has one
        if (REM % (128 >> level)) >= (64 >> level):
            acc1, acc2 = _mel_chunk(
                acc1, acc2, F_MAIN + (REM // (128 >> level)) * (128 >> level), x_tile, x_row, stride_xl,
                length, rel, start, t_ok, EDGE, wa_ptr, wb_ptr, cos_ptr, cos_lo_ptr, sin_ptr, sin_lo_ptr,
                fb_ptr, fb_lo_ptr, n_fft, power, PAD_MODE, POWER_MODE, K_HALF, F_PAD, M_TOT, M1, M2, BLOCK_T,
                64 >> level, BLOCK_K, PRECISION,
            )  # fmt: skip
    _finish_tile(acc1, acc2, t, t_ok, b, out_ptr, stride_ob, stride_om, stride_ot, peak_ptr, n_mels, floor,
                 HAS_FLOOR, LOG, TRACK_PEAK, M1, M2)  # fmt: skip


@triton.jit
def _finish_tile(
    acc1,
    acc2,
    t,
    t_ok,
    b,
    out_ptr,
    stride_ob,
    stride_om,
    stride_ot,
    peak_ptr,
    n_mels,
    floor,
    HAS_FLOOR: tl.constexpr,
    LOG: tl.constexpr,
    TRACK_PEAK: tl.constexpr,
    M1: tl.constexpr,
    M2: tl.constexpr,
):
    """A tile's mels (``acc1``: mels ``0..M1``, ``acc2``: ``M1..M1+M2``) out: the example's running
    maximum for Whisper's floor (``TRACK_PEAK``), then the optional floor/log and the stores."""
    m1 = tl.arange(0, M1)
    if TRACK_PEAK:
        # Mels are >= 0, and non-negative floats order like their int32 bit patterns.
        ok1 = t_ok[:, None] & (m1 < n_mels)[None, :]
        peak = tl.max(tl.max(tl.where(ok1, acc1, 0.0), axis=1), axis=0)
        if M2 > 0:
            m2 = M1 + tl.arange(0, M2)
            ok2 = t_ok[:, None] & (m2 < n_mels)[None, :]
            peak = tl.maximum(peak, tl.max(tl.max(tl.where(ok2, acc2, 0.0), axis=1), axis=0))
        # Relaxed: only the floor pass reads it, after this kernel ends (acq_rel fences each atomic).
        tl.atomic_max(peak_ptr + b, peak.to(tl.int32, bitcast=True), sem="relaxed")
    _store_mels(acc1, m1, out_ptr, b, stride_ob, stride_om, stride_ot, t, t_ok, n_mels, floor, HAS_FLOOR, LOG)
    if M2 > 0:
        m2 = M1 + tl.arange(0, M2)
        _store_mels(
            acc2, m2, out_ptr, b, stride_ob, stride_om, stride_ot, t, t_ok, n_mels, floor, HAS_FLOOR, LOG
        )


# The frame count and the strides that scale with it vary from call to call (a batch job's lengths):
# not specialized, so one compiled kernel serves every length (no 16-divisibility variants).
@triton.jit(do_not_specialize=["stride_pb", "n_frames", "stride_ob", "stride_om"])
def _project_kernel(
    p_ptr,
    stride_pb,
    stride_pf,
    stride_pt,
    n_frames,
    n_freq,
    fb_ptr,
    fb_lo_ptr,
    band_ptr,
    out_ptr,
    stride_ob,
    stride_om,
    stride_ot,
    peak_ptr,
    n_mels,
    floor,
    HAS_FLOOR: tl.constexpr,
    LOG: tl.constexpr,
    TRACK_PEAK: tl.constexpr,
    M_TOT: tl.constexpr,  # mels rounded up to BLOCK_M (the filter planes' columns)
    BLOCK_T: tl.constexpr,
    BLOCK_F: tl.constexpr,
    BLOCK_M: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """Mels of ``BLOCK_T`` frames of a power spectrogram ``p (B, F, T)`` (read by its strides):
    ``out[m, t] = Σ_f p[f, t]·fb[f, m]``, ``BLOCK_M`` mels at a time, each group by one ``tl.dot`` per
    ``BLOCK_F`` bins over only the bin chunks its filters touch: ``band_ptr`` holds each group's chunk
    range ``[c_lo, c_hi)``. A mel filter spans a few bins, so 80 mels of 201 bins take about a quarter
    of a dense product's dots. The chunks two groups share are read twice, the second time from
    L1/L2; the filters (tens of KB) stay in L2."""
    pid = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    t = pid * BLOCK_T + tl.arange(0, BLOCK_T)
    t_ok = t < n_frames
    rows = p_ptr + b * stride_pb + t.to(tl.int64)[:, None] * stride_pt
    if TRACK_PEAK:
        # Each frame's largest mel so far: a row maximum per group, reduced over the frames once at the
        # end. (H200, 64 × 30 s, Whisper's projection at 3xTF32: 147.5 µs, against 169 with a whole
        # (BLOCK_T, BLOCK_M) tile of maxima, whose registers cost a program per SM, and 162 with a
        # full reduction and an atomic per group.)
        peaks = tl.zeros((BLOCK_T,), dtype=tl.float32)
    for group in tl.static_range(M_TOT // BLOCK_M):
        m = group * BLOCK_M + tl.arange(0, BLOCK_M)
        acc = tl.zeros((BLOCK_T, BLOCK_M), dtype=tl.float32)
        # Chunk indices, not bins: f = c·BLOCK_F tells the compiler the loads are BLOCK_F-aligned.
        for c in range(tl.load(band_ptr + 2 * group), tl.load(band_ptr + 2 * group + 1)):
            f = c * BLOCK_F + tl.arange(0, BLOCK_F)
            ok = t_ok[:, None] & (f < n_freq)[None, :]
            tile = tl.load(rows + f[None, :] * stride_pf, mask=ok, other=0.0)
            # The filter planes are zero-padded to (chunks · BLOCK_F, M_TOT): no mask needed on them.
            foffs = f[:, None] * M_TOT + m[None, :]
            acc = _dot(tile, fb_ptr + foffs, fb_lo_ptr + foffs, acc, PRECISION)
        if TRACK_PEAK:
            valid = tl.where(t_ok[:, None] & (m < n_mels)[None, :], acc, 0.0)
            peaks = tl.maximum(peaks, tl.max(valid, axis=1))
        _store_mels(
            acc, m, out_ptr, b, stride_ob, stride_om, stride_ot, t, t_ok, n_mels, floor, HAS_FLOOR, LOG
        )
    if TRACK_PEAK:
        # Mels are >= 0, and non-negative floats order like their int32 bit patterns.
        # Relaxed: only the floor pass reads it, after this kernel ends (acq_rel fences each atomic).
        tl.atomic_max(peak_ptr + b, tl.max(peaks, axis=0).to(tl.int32, bitcast=True), sem="relaxed")


@triton.jit
def whisper_floor_value(peak):
    """Whisper's floor for a signal whose largest mel is ``peak``, in the stored units:
    ``(log10(max(peak, 1e-10)) − 8 + 4) / 4``. Both floor passes (here and :mod:`mel_sm90`'s) use it."""
    return (tl.log2(tl.maximum(peak, 1e-10)) * 0.30102999566398120 - 8.0 + 4.0) * 0.25


@triton.jit
def _whisper_finish_kernel(out_ptr, peak_ptr, per_example, BLOCK: tl.constexpr):
    """``out = max(out, (log10(max(peak, 1e-10)) − 8 + 4) / 4)`` on a contiguous ``(B, M, T)`` block
    of ``(log10(mel) + 4) / 4`` values: a read of every value, a write of only those below the floor
    (NaN stays NaN, as in torch's ``maximum``)."""
    b = tl.program_id(1).to(tl.int64)
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = i < per_example
    low = whisper_floor_value(tl.load(peak_ptr + b).to(tl.float32, bitcast=True))
    ptrs = out_ptr + b * per_example + i
    v = tl.load(ptrs, mask=ok, other=0.0).to(tl.float32)
    tl.store(ptrs, low.to(out_ptr.dtype.element_ty), mask=ok & (v < low))


# Through the compiled handles: Triton's own launch path is host time on every call.
_project_launch = CachedLaunch(_project_kernel)
_whisper_finish_launch = CachedLaunch(_whisper_finish_kernel)


def whisper_finish(out: torch.Tensor, peak: torch.Tensor) -> None:
    """Whisper's second pass over the contiguous ``(log10(mel) + 4) / 4`` values ``out (B, n_mels, T)``
    that the kernels store (:func:`log_mode`), in place: the floor at ``(log10(max) − 8 + 4) / 4``
    with each example's maximum mel (``peak``: its float bits, per example)."""
    per_example = out.shape[1] * out.shape[2]
    block = 1024
    grid = (cdiv(per_example, block), out.shape[0])
    _whisper_finish_launch(grid, (out, peak, per_example), {"BLOCK": block}, 4)


# The interior launch's configs: the two fastest of the 10 that `python -m nbxsig.bench.mel_sweep`
# timed on an H200 (n_fft 400, 80 mels, 64 × 30 s): T128 F128 K32 1574 µs at "high" (TF32), T128
# F128 K16 2147 µs at "highest" (3xTF32); the 64-frame tiles ran 1.3-2× slower. Left out: 64-frame
# tiles with BLOCK_F = 128 on 8 warps, which Triton 3.6 miscompiles at 3xTF32 (relative error 5.2 on
# the GPU, correct under the interpreter; tests/test_features_gpu.py keeps a strict xfail on it).
_CONFIGS = [
    triton.Config({"BLOCK_T": 128, "BLOCK_F": 128, "BLOCK_K": 16}, num_warps=8, num_stages=2),
    triton.Config({"BLOCK_T": 128, "BLOCK_F": 128, "BLOCK_K": 32}, num_warps=8, num_stages=2),
]
# Under the interpreter: one small config (tests swap in each of _CONFIGS' tile shapes).
_INTERPRETER_CONFIG = {"BLOCK_T": 16, "BLOCK_F": 32, "BLOCK_K": 16}
# The edge launch: a handful of frames per signal (ceil(pad / hop) at each end), so small tiles.
_EDGE_CONFIG = {"BLOCK_T": 16, "BLOCK_F": 64, "BLOCK_K": 16, "num_warps": 4, "num_stages": 2}
# The host guarantees (_MAX_BLOCK_T·hop + n_fft)·stride < 2^31 for the interior tiles' 32-bit offsets.
_MAX_BLOCK_T = 128
_tuned = None


def _tuned_kernel():
    global _tuned  # built on first GPU use, never at import
    if _tuned is None:
        _tuned = triton.autotune(
            _CONFIGS, key=["n_fft", "M_TOT", "F_PAD", "POWER_MODE", "PRECISION", "EDGE"]
        )(_mel_kernel)
    return _tuned


def dot_precision(device: torch.device) -> str:
    """The dot precision for fp32 operands, from torch's matmul precision setting: "tf32x3" (split
    operands, 3 TF32 products) for "highest", "tf32" otherwise; "ieee" off the GPU."""
    if device.type != "cuda":
        return "ieee"  # the interpreter computes dots in numpy fp32 regardless
    return "tf32x3" if torch.get_float32_matmul_precision() == "highest" else "tf32"


def mel_blocks(n_mels: int) -> tuple[int, int]:
    """Mels as two power-of-two blocks ``(M1, M2)`` (``M2 = 0``: one block), each >= 16 (the dot's
    minimum): 80 → (64, 16) and 128 → (128, 0), so 80 mels cost 80 columns of dots, not 128."""
    m1 = max(16, 1 << (n_mels.bit_length() - 1))
    rest = n_mels - m1
    return m1, (0 if rest <= 0 else max(16, next_pow2(rest)))


def _split_hi_lo(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 ``v`` = ``hi`` (TF32, rounded to nearest) + ``lo`` (the exact residual): the kernel's
    ``_tf32_hi`` on the host, for the operands that are the same in every program."""
    bits = v.float().contiguous().view(torch.int32)
    hi = ((bits + 0x1000) & -8192).view(torch.float32)
    return hi, v.float() - hi


def _planes(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """fp32 values, TF32 hi and fp32 lo planes of a (float64) table: what the dots read at "ieee",
    "tf32" and "tf32x3"."""
    f = v.float().contiguous()
    return (f, *_split_hi_lo(f))


_CACHE_SIZE = 8


def version(t: torch.Tensor) -> int | None:
    """``t._version`` for a cache key; None for an inference tensor (made under
    ``torch.inference_mode``), which has no version counter: torch raises on reading it."""
    return None if t.is_inference() else t._version


def memoized(cache: OrderedDict, key: tuple, owners: tuple, build):
    """``build()``, kept in the LRU ``cache`` under ``key`` (at most ``_CACHE_SIZE`` entries). The
    entry also holds the ``owners`` -- the tensors it was built from -- and is served only to those
    same objects, so it can never answer for a different tensor that reused an address; the key
    holds their ``id`` and :func:`version` (in-place edits). Owners that are inference tensors track
    no version, so an in-place edit of one could not be seen: their operands are built anew."""
    if any(owner.is_inference() for owner in owners):
        return build()
    hit = cache.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], owners, strict=True)):
        cache.move_to_end(key)
        return hit[1]
    value = build()
    cache[key] = (owners, value)
    if len(cache) > _CACHE_SIZE:
        cache.popitem(last=False)
    return value


_PACK_CACHE: OrderedDict = OrderedDict()


def _packed(window: torch.Tensor, filters: torch.Tensor, n_fft: int, scale: float, k_pad, f_pad, m_tot):
    """The folded window columns ``wa[k] = w[k]`` (k <= n/2) and ``wb[k] = w[n − k]`` (0 < k < n/2),
    zero-padded to ``K_PAD``; the half DFT basis ``(K_PAD, F_PAD)`` for cos and sin (scale folded
    in, zero-padded) and the filters ``(F_PAD, M_TOT)`` (columns ``M1..`` hold mels ``M1..``), each as
    TF32 ``hi`` + fp32 ``lo`` planes; cached per operands (:func:`memoized`)."""

    def build():
        device = window.device
        n_freq = n_fft // 2 + 1
        half = n_fft // 2 + 1
        w = window.double()
        wa = torch.zeros(k_pad, dtype=torch.float64, device=device)
        wb = torch.zeros(k_pad, dtype=torch.float64, device=device)
        wa[:half] = w[:half]
        k = torch.arange(1, (n_fft + 1) // 2, device=device)  # 0 < k < n/2
        wb[k] = w[n_fft - k]
        basis = rdft_basis(n_fft, dtype=torch.float64, device=device)[:, :, :half] * scale  # (2, F, half)
        planes = torch.zeros(2, k_pad, f_pad, dtype=torch.float64, device=device)
        planes[:, :half, :n_freq] = basis.transpose(1, 2)
        fb = _filter_planes(filters, 1.0, f_pad, m_tot)
        return wa.float(), wb.float(), _planes(planes[0]), _planes(planes[1]), fb

    key = (id(window), version(window), id(filters), version(filters), n_fft, scale, k_pad, f_pad, m_tot)
    return memoized(_PACK_CACHE, key, (window, filters), build)


def _filter_planes(filters: torch.Tensor, factor: float, f_pad: int, m_tot: int) -> tuple:
    """``factor · filters`` zero-padded to ``(F_PAD, M_TOT)`` as (fp32, TF32 hi, fp32 lo) planes."""
    fb = torch.zeros(f_pad, m_tot, dtype=torch.float64, device=filters.device)
    fb[: filters.shape[0], : filters.shape[1]] = filters.detach().double() * factor
    return _planes(fb)


def _filter_bands(fb: torch.Tensor, block_f: int, block_m: int) -> torch.Tensor:
    """Each group of ``block_m`` columns of the zero-padded filter plane ``fb (F_PAD, M_TOT)``: the
    range ``[c_lo, c_hi)`` of ``block_f``-bin chunks holding its nonzero rows (``[0, 0)`` for a
    group of empty filters), as int32 ``(M_TOT // block_m, 2)`` on ``fb``'s device."""
    f_pad, m_tot = fb.shape
    used = (fb != 0).view(f_pad, m_tot // block_m, block_m).any(dim=2)  # (F_PAD, groups)
    rows = torch.arange(f_pad, device=fb.device)[:, None]
    first = torch.where(used, rows, f_pad).amin(dim=0)
    last = torch.where(used, rows, -1).amax(dim=0)
    bands = torch.stack([first // block_f, last // block_f + 1], dim=1)
    return torch.where(used.any(dim=0)[:, None], bands, 0).to(torch.int32).contiguous()


_PROJECT_CACHE: OrderedDict = OrderedDict()
#: The projection's tile (module level, so a sweep can set it): BLOCK_T frames, BLOCK_M mels per group,
#: BLOCK_F bins per dot. H200 sweep, fourteenth round (64 × 30 s, n_fft 400, the four-step kernel's
#: spectrogram, 80 mels; µs at 3xTF32 / TF32, HTK filters; Slaney's within 3%): M16 F16 T128 w4 s3
#: 117.1 / 107.4; T64 w4 119.5 / 106.5; T128 w8 120.8 / 106.9; T256 w8 144.2 / 107.9 (s2 190.9 / 115.7,
#: s4 182.8 / 158.3); M8 (mma.sync, not wgmma) T128 w4 131.3 / 123.8; M32 T128 w4 142.5 / 106.5, T128 w8
#: 126.5 / 107.3; F32 tiles 170-216 / 135-174. The dense product over all 208 bins × 80 mels that it
#: replaced: 180.5 / 112.9 in the same process. The bandwidth floor is 52 µs (154 MB in, 61 MB out).
PROJECT_CONFIG = {"BLOCK_T": 128, "BLOCK_F": 16, "BLOCK_M": 16, "num_warps": 4, "num_stages": 3}
#: Dot precisions at which the unfused path launches the four-step spectrogram with rows padded to 64
#: bytes (208 floats for 201 bins; :func:`_unfused`), else with 201-float rows.
#: H200, eleventh round, 64 × 30 s, n_fft 400, 80 mels, three interleaved passes (µs, 201 / 208-float
#: rows): "tf32x3" whole op 780 / 765 (projection 199 / 181, four-step 574 / 578); "tf32" with the power
#: also stored TF32-rounded so the projection's dot takes the tile as loaded, 427 / 456 (projection 112
#: / 128, four-step 313 / 327): not used at "tf32", and the rounding dropped.
ALIGNED_SPECTROGRAM = ("tf32x3",)
_PROJECT_INTERPRETER_CONFIG = {"BLOCK_T": 16, "BLOCK_F": 16, "BLOCK_M": 16}


def project(
    spec: torch.Tensor,
    filters: torch.Tensor,
    *,
    factor: float,
    floor: float | None,
    log: str | None,
    whisper: bool,
) -> torch.Tensor:
    """Mels of a float32 power spectrogram ``spec (B, F, T)`` (any strides): ``factor · filtersᵀ @
    spec`` → ``(B, n_mels, T)`` float32, with the optional floor, log and Whisper's finish fused
    into the kernel (:func:`_project_kernel`), where torch would make a pass over the mels for each.
    The dot precision follows torch's fp32 matmul setting (:func:`dot_precision`).

    Each group of ``BLOCK_M`` mels reads only the bins its filters touch, so an inf or NaN power bin
    makes inf or NaN only of the mels in groups whose bands cover it; torch's dense product
    (torchaudio's) makes NaN of every mel of that frame, from 0·inf. A spectrogram computed from
    finite audio has such bins only where |X|² overflows float32."""
    device = check_launchable(spec, filters)
    batch, n_freq, n_frames = spec.shape
    n_mels = filters.shape[1]
    interpreted = interpreter_enabled() and device.type == "cpu"
    precision = dot_precision(device)
    config = dict(_PROJECT_INTERPRETER_CONFIG if interpreted else PROJECT_CONFIG)
    meta = {k: config.pop(k) for k in ("num_warps", "num_stages") if k in config}
    block_f, block_m = config["BLOCK_F"], config["BLOCK_M"]
    f_pad = cdiv(n_freq, block_f) * block_f
    m_tot = cdiv(n_mels, block_m) * block_m

    def build():
        planes = _filter_planes(filters, factor, f_pad, m_tot)
        return (*planes, _filter_bands(planes[0], block_f, block_m))

    key = (id(filters), version(filters), factor, f_pad, m_tot, block_f, block_m)
    fb, fb_hi, fb_lo, bands = memoized(_PROJECT_CACHE, key, (filters,), build)
    out = empty_output((batch, n_mels, n_frames), dtype=torch.float32, device=device)
    if n_frames <= 0:
        return out
    # Whisper's per-example maxima (float bits); without TRACK_PEAK the kernel never reads it.
    peak = torch.zeros(batch, dtype=torch.int32, device=device) if whisper else out
    grid = (cdiv(n_frames, config["BLOCK_T"]), batch)
    args = (
        spec, spec.stride(0), spec.stride(1), spec.stride(2), n_frames, n_freq,
        fb if precision == "ieee" else fb_hi, fb_lo, bands, out, *out.stride(), peak, n_mels,
        float(floor or 0.0),
    )  # fmt: skip
    constexprs = dict(
        HAS_FLOOR=floor is not None, LOG=log_mode(log, whisper=whisper), TRACK_PEAK=whisper, M_TOT=m_tot,
        PRECISION=precision, **config,
    )  # fmt: skip
    num_warps = meta.pop("num_warps", 4)
    _project_launch(grid, args, constexprs, num_warps, options=meta)
    if whisper:
        whisper_finish(out, peak)
    return out


def frame_range(length: int, *, n_fft: int, hop_length: int, center: bool, drop_last: bool) -> tuple:
    """``(pad, n_frames, t_a, t_b)`` for a signal of ``length`` samples: the centre padding each side, the
    frames computed, and the frames ``[t_a, t_b)`` that read only samples inside the signal (the b-sample of
    column 0 reaches ``t·hop − pad + n_fft``); those before and after read the padding."""
    pad = n_fft // 2 if center else 0
    n_frames = count_frames(length, n_fft, hop_length, center) - (1 if drop_last else 0)
    t_a = min(n_frames, -(-pad // hop_length))
    t_b = max(t_a, min(n_frames, (length - 1 - n_fft + pad) // hop_length + 1))
    return pad, n_frames, t_a, t_b


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
    _config: dict | None = None,
) -> torch.Tensor:
    """The fused kernel over ``x (B, L)``: the edge frames and the interior ones in two launches."""
    device = check_launchable(x, window, filters)
    batch, length = x.shape
    if (_MAX_BLOCK_T * hop_length + n_fft) * abs(x.stride(1)) >= 2**31:
        # A huge sample stride would overflow the interior tiles' 32-bit offsets (never seen for
        # real inputs: it takes a last-dimension stride of ~2^31 / 20 000 elements).
        x = x.contiguous()
    pad, n_frames, t_a, t_b = frame_range(
        length, n_fft=n_fft, hop_length=hop_length, center=center, drop_last=drop_last
    )
    n_mels = filters.shape[1]
    half = n_fft // 2 + 1
    k_pad = cdiv(half, 32) * 32
    f_pad = cdiv(half, 16) * 16
    m1, m2 = mel_blocks(n_mels)
    m_tot = m1 + m2
    precision = _precision or dot_precision(device)
    wa, wb, *planes = _packed(window, filters, n_fft, scale, k_pad, f_pad, m_tot)
    # (fp32, hi, lo) per operand: "ieee" reads the fp32 values, the TF32 paths hi (+ lo).
    (cos, cos_hi, cos_lo), (sin, sin_hi, sin_lo), (fb, fb_hi, fb_lo) = planes
    if precision != "ieee":
        cos, sin, fb = cos_hi, sin_hi, fb_hi
    out = empty_output((batch, n_mels, n_frames), dtype=x.dtype, device=device)
    peak = torch.zeros(batch if whisper else 1, dtype=torch.int32, device=device)
    if n_frames <= 0:
        return out
    args = dict(
        PAD_MODE=_PAD_MODES[pad_mode],
        POWER_MODE=power_mode(power),
        HAS_FLOOR=floor is not None,
        LOG=log_mode(log, whisper=whisper),
        TRACK_PEAK=whisper,
        K_HALF=half,
        F_PAD=f_pad,
        M_TOT=m_tot,
        M1=m1,
        M2=m2,
        PRECISION=precision,
    )
    common = (
        x,
        x.stride(0),
        x.stride(1),
        length,
        wa,
        wb,
        cos,
        cos_lo,
        sin,
        sin_lo,
        fb,
        fb_lo,
        out,
        *out.stride(),
    )
    # Frames [t_a, t_b) go to the branch-free interior launch; the few frames at either end, which read
    # centre padding, to a small launch that maps indices.
    scalars = (peak, n_frames, t_a, t_b, hop_length, pad, n_fft, n_mels, float(power), float(floor or 0.0))
    interpreted = interpreter_enabled() and device.type == "cpu"
    # One fixed config under the interpreter (autotuning there would run every config).
    edge = dict(_INTERPRETER_CONFIG if interpreted else _EDGE_CONFIG)
    edge_meta = {k: edge.pop(k) for k in ("num_warps", "num_stages") if k in edge}
    edge_tiles = cdiv(t_a, edge["BLOCK_T"]) + cdiv(n_frames - t_b, edge["BLOCK_T"])
    if edge_tiles:
        _mel_kernel[(edge_tiles, batch)](*common, *scalars, EDGE=True, **args, **edge, **edge_meta)
    if t_b > t_a:
        if _config is None and not interpreted:
            grid = lambda meta: (cdiv(t_b - t_a, meta["BLOCK_T"]), batch)
            _tuned_kernel()[grid](*common, *scalars, EDGE=False, **args)
        else:
            # A fixed config: the interpreter's, or one the benchmark's sweep names.
            config = dict(_config or _INTERPRETER_CONFIG)
            meta = {k: config.pop(k) for k in ("num_warps", "num_stages") if k in config}
            grid = (cdiv(t_b - t_a, config["BLOCK_T"]), batch)
            _mel_kernel[grid](*common, *scalars, EDGE=False, **args, **config, **meta)
    if whisper:
        whisper_finish(out, peak)
    return out


def mel_path(*, device_type: str, n_fft: int) -> str:
    """Which implementation the Triton backend runs: "fused" (this module's kernel), "unfused"
    (``nbxsig.stft.spectrogram``, then one mel matmul) or "fourstep" (:mod:`nbxsig.kernels.fourstep`,
    only while its ``MEL_AUTO`` switch is on: it is off, see there). Pure: no device queries.

    Measured on an H200 (torch 2.11, triton 3.6; docs/features.md, ``python -m nbxsig.bench.mel_sweep``):
    MelSpectrogram 16 kHz, n_fft 400, hop 160, 80 mels, 64 × 30 s fp32 -- unfused 869 µs ("high")
    and 973 µs ("highest"), the best fused tile config 1574 µs and 2147 µs, torchaudio 1302 µs and
    1408 µs. So on a GPU the unfused path runs, and the fused kernel elsewhere: under the
    interpreter on CPU tensors (where it is the kernel under test) and as ``_path="fused"``. With the
    four-step spectrogram inside the unfused path (2026-12-03, same case): unfused 878 µs and 569 µs,
    the four-step mel kernel 2385 µs and 653 µs, torchaudio 1417 µs and 1311 µs.
    """
    from . import fourstep

    if device_type != "cuda":
        return "fused"
    if fourstep.MEL_AUTO and fourstep.supports(n_fft):
        return "fourstep"
    return "unfused"


def _unfused(
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
) -> torch.Tensor:
    """The same function as :func:`_launch` from ``nbxsig.stft.spectrogram`` (the four-step kernel or
    the FFT path) and the mel projection (:func:`project`: ``(M, F) @ (B, F, T)`` with the STFT's
    ``scale`` folded into the filters as ``scale^power``, floor/log/Whisper fused in its tail).

    Where the spectrogram is the four-step kernel's it is launched here, and with 64-byte rows, which
    the projection's loads vectorize, where the precision is in :data:`ALIGNED_SPECTROGRAM`."""
    from .. import stft as nstft
    from . import fourstep
    from .stft import use_dense

    window = window.detach()
    precision = dot_precision(x.device)
    route = dict(device_type=x.device.type, n_fft=n_fft, onesided=True, precision=precision)
    if not use_dense(n_fft) and fourstep.spectrogram_path(**route) == "fourstep":
        # The kernel itself, not through nbxsig.stft.spectrogram's checks and dispatch (this op's own
        # were made): host time on every call. It reads the window in its own dtype (the callers'
        # padded float64 one) and computes in fp32: no float32 copy, which was a launch per call.
        spec = fourstep.spectrogram(
            x, n_fft=n_fft, hop=hop_length, window=window, center=center, pad_mode=pad_mode, scale=1.0,
            power=power, _row_align=16 if precision in ALIGNED_SPECTROGRAM else 1,
        )  # fmt: skip
    else:
        spec = nstft.spectrogram(
            x, n_fft, hop_length, window=window.float(), power=power, center=center, pad_mode=pad_mode,
            backend="triton",
        )  # fmt: skip
    if drop_last:
        spec = spec[..., :-1]
    # float32: the op's Triton dtypes (float16/bfloat16/float32) give a float32 spectrogram.
    mels = project(spec, filters, factor=scale**power, floor=floor, log=log, whisper=whisper)
    return mels.to(x.dtype)


# Whether the auto path on an H100/H200 at TF32 precision is the Gluon kernel of :mod:`mel_sm90`: yes.
# Measured on an H200 (twenty-ninth round, 64 × 30 s, n_fft 400, hop 160, 80 mels, docs/benchmarks.md):
# MelSpectrogram 159.4 µs against 291.2 for the unfused path and 1308.2 for torchaudio; Whisper 171.7
# against 323.6. ``_path="sm90"`` runs it whatever this says; the benchmark turns it off for its probes.
SM90_AUTO = True


def _sm90_supported(x: torch.Tensor, filters: torch.Tensor, opts: dict) -> bool:
    from . import mel_sm90

    precision = opts["_precision"] or dot_precision(x.device)
    return mel_sm90.supports(x, n_fft=opts["n_fft"], n_mels=filters.shape[1], precision=precision)


def _public(opts: dict) -> dict:
    """``opts`` without the private options (``_precision``, ``_config``, ``_path``)."""
    return {k: v for k, v in opts.items() if k[0] != "_"}


def _run(x: torch.Tensor, *, window, filters, _path: str | None = None, **opts) -> torch.Tensor:
    path = _path or mel_path(device_type=x.device.type, n_fft=opts["n_fft"])
    if _path == "sm90" and not _sm90_supported(x, filters, opts):
        from . import mel_sm90

        raise bad_value(
            "x",
            x,
            f"an fp32 tensor on an sm_90 GPU at TF32 matmul precision, with n_fft in "
            f"[{mel_sm90.MIN_N_FFT}, {mel_sm90.MAX_N_FFT}] and at most {mel_sm90.MAX_MELS} mels",
            context=f"for _path='sm90' (n_fft={opts['n_fft']}, {filters.shape[1]} mels)",
        )
    private = opts["_precision"] is not None or opts["_config"] is not None
    auto_sm90 = _path is None and path == "unfused" and SM90_AUTO and not private
    if path == "sm90" or (auto_sm90 and _sm90_supported(x, filters, opts)):
        from . import mel_sm90

        return mel_sm90.mel_spectrogram(x, window=window, filters=filters, **_public(opts))
    if path == "unfused":
        check_launchable(x, window, filters)
        return _unfused(x, window=window, filters=filters, **_public(opts))
    if path == "fourstep":
        from . import fourstep

        return fourstep.mel_spectrogram(x, window=window, filters=filters, **opts)
    return _launch(x, window=window, filters=filters, **opts)


class _FusedMel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, window, filters, opts):
        ctx.save_for_backward(x, window, filters)
        ctx.opts = opts
        return _run(x, window=window, filters=filters, **opts)

    @staticmethod
    def backward(ctx, grad):
        x, window, filters = ctx.saved_tensors
        need_x, need_window = ctx.needs_input_grad[:2]
        opts = _public(ctx.opts)
        # Under create_graph=True the recomputation runs on the saved inputs themselves, so the
        # gradients keep their dependence on x and the window (second derivatives, as the torch
        # backend's; on detached copies they carried no graph and a second grad raised); otherwise on
        # detached copies.
        higher = torch.is_grad_enabled()
        with torch.enable_grad():
            # Recompute the torch twin in fp32 (at least) under autograd: no spectrum was stored.
            # The window's gradient too where the caller's window requires one (as on the torch
            # backend; it was dropped silently).
            xd = x if higher else x.detach().requires_grad_(need_x)
            wd = window if higher else window.detach().requires_grad_(need_window)
            xf = xd.to(torch.promote_types(x.dtype, torch.float32))
            out = ref.mel_spectrogram(xf, window=wd, filters=filters, **opts)
            inputs = [t for t, need in ((xd, need_x), (wd, need_window)) if need]
            grads = list(torch.autograd.grad(out, inputs, grad.to(out.dtype), create_graph=higher))
        gx = grads.pop(0) if need_x else None
        gw = grads.pop(0) if need_window else None
        return gx, gw, None, None


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
    _config: dict | None = None,
    _path: str | None = None,
) -> torch.Tensor:
    """Triton twin of :func:`nbxsig.reference.mel.mel_spectrogram` on ``(B, L)`` input."""
    if x.shape[0] > _runtime.MAX_GRID_YZ:  # the signals ride on grid axis 1 (Whisper's peak is per signal)
        return over_grid_batch(
            mel_spectrogram, x, n_fft=n_fft, hop_length=hop_length, window=window, filters=filters,
            power=power, scale=scale, center=center, pad_mode=pad_mode, floor=floor, log=log,
            drop_last=drop_last, whisper=whisper, _precision=_precision, _config=_config, _path=_path,
        )  # fmt: skip
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
        _config=_config,
        _path=_path,
    )
    if torch.is_grad_enabled() and (x.requires_grad or window.requires_grad):
        return _FusedMel.apply(x, window, filters, opts)
    return _run(x, window=window, filters=filters, **opts)
