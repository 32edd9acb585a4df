"""Complex STFT, power spectrogram and (log-)mel for composite n_fft as one fused four-step DFT kernel.

One program takes ``BLOCK_T`` frames of one signal, gathers them straight from the signal (centre
padding by index mapping, :func:`nbxsig.kernels.stft._load_signal`), applies the window and computes
the onesided DFT by the Cooley–Tukey four-step factorisation ``N = N1·N2``: with ``n = N2·n1 + n2``
and ``k = k1 + N1·k2``::

    Y[k1, n2]       = Σ_{n1} x[N2·n1 + n2] · W_N1^{n1·k1}          stage 1: (T·N2P, N1P) @ (N1P, 2·N1P)
    Z[k1, n2]       = Y[k1, n2] · W_N^{n2·k1}                       twiddle (fp32, elementwise)
    X[k1 + N1·k2]   = Σ_{n2} Z[k1, n2] · W_N2^{n2·k2}               stage 2: (T·N1P, 2·N2P) @ (2·N2P, 2·K2P)

Both stages are ``tl.dot`` s with small DFT bases; the frame tile is transposed in registers between
them (``tl.permute``). Real and imaginary parts travel interleaved in one operand (column ``2·k + part``),
so each stage is one dot. The output is onesided: stage 2 computes only ``k2 <= N2/2``
(``K2 = N2//2 + 1`` columns), which covers every ``k <= N/2``. With N2 even (outside the mel mode)
stage 2 stops at ``K2 = N2/2`` -- a power of two for power-of-two N2, where ``N2/2 + 1`` would pad to
N2 and double stage 2 -- and the Nyquist bin ``X[N/2] = Σ (-1)^n x[n]`` (``(-1)^n = (-1)^n2``) is a
signed sum over the frame tile. Factors are padded to powers of two (``N1P``, ``N2P``, ``K2P``; dot
dims >= 16, each <= 64 and ``N1P·N2P <= 2048``) with zero basis rows/columns; :func:`plan` picks the
factorisation with the fewest padded multiply-adds (400 → 16 × 25, 512 → 16 × 32, 1000 → 20 × 50,
2048 → 32 × 64; the benchmark and tests pick others with ``_config={"N1": ...}``).

The epilogue writes the spectrum itself, interleaved ``(re, im)``, into a ``(B, T, F, 2)`` buffer
(:func:`stft`: returned as its ``(B, F, T, 2)`` view, torch.stft's layout, whose ``view_as_complex``
is the complex64 spectrum), or ``|X|^power`` into a ``(B, T, F)`` buffer (returned as its
``(B, F, T)`` view, the layout torch.stft and the FFT path give), or multiplies the power tile by the
mel filterbank (rows permuted on the host to the kernel's ``(k1, k2)`` order, zero rows for
``k > N/2``) with one more ``tl.dot``, then an optional floor/log; Whisper's per-example maximum
comes from one ``atomic_max`` per program and :func:`nbxsig.kernels.mel._whisper_finish_kernel`.
No frame or padded-signal tensor exists in device memory (nor, for the power and mel outputs, a
complex or power one).

Precision: :func:`nbxsig.kernels.mel.dot_precision` picks the class -- "highest" → fp32-class, "high"/
"medium" → TF32-class -- and the stages take fp16 operands for it (:data:`STAGE_PRECISION`). Each
frame is first multiplied by a power of two that puts its peak in [1, 2) (exact; undone on the
spectrum), so fp16's range never clips a loud signal nor flushes a quiet one. "fp16": operands rounded
to nearest fp16 -- 11-bit significands, as TF32 rounded to nearest. "fp16x3": operands split into
``hi`` + ``lo·2^-11`` fp16 pairs and three products (``a_hi·b_lo + a_lo·b_hi + a_hi·b_hi·2^11``, one
accumulator), ~2^-21 relative per product as 3xTF32. fp16 tensor cores run at twice TF32's rate, and
the stage-boundary transposes move half the bytes through shared memory, where this kernel is bound.
The mel epilogue keeps TF32 ("tf32", "tf32x3": operands rounded to nearest TF32 / split hi + lo); the
interpreter computes every dot in fp32 from the given operands. Tables are built in float64 with
``k·n`` reduced modulo the length before forming the angle, then stored in fp32 (and fp16 planes).

Floors on an H200 (4.2 TB/s copy bandwidth; dense TF32 ~495 TFLOP/s, fp32 FMA ~67 TFLOP/s):

* spectrogram power=2, n_fft 400 hop 160, 64 × 160000 fp32 (1001 frames): bytes = 41 MB in + 51.5 MB
  out = 92.5 MB → 22 µs. Padded MACs per frame (16 × 25 → 16·32 padded): stage 1 32·16·32 = 16 384,
  stage 2 16·64·32 = 32 768, i.e. 49 152 MAC × 64 064 frames = 6.3 GFLOP → 13 µs at TF32, 38 µs at
  3xTF32, 94 µs as fp32 FMA. Floor at "highest": ~40 µs (the 3xTF32 dots; the loads overlap them).
* MelSpectrogram 400/160/80 mels, 64 × 30 s (3001 frames): 123 MB in + 61 MB out → 44 µs. MACs per
  frame 49 152 + 256·80 = 69 632 × 192 064 frames = 26.7 GFLOP → 54 µs at TF32, 162 µs at 3xTF32,
  400 µs as fp32 FMA: the floor is ~54 µs at "high" and ~162 µs at "highest".
* complex stft (8-byte bins out), issue #3's rows; MACs per frame from the plan's padded dots:

  ========================  =========  ===========  ==========  ==========  =========================
  row                       bytes      ÷ 4.2 TB/s   MAC/frame   at TF32     at 3xTF32 ("highest")
  ========================  =========  ===========  ==========  ==========  =========================
  400/160, 64 × 160000      144 MB     34 µs        49 152      13 µs       38 µs
  512/128, 64 × 160000      206 MB     49 µs        49 152      16 µs       48 µs
  1000/250, 16 × 480000     154 MB     37 µs        393 216     49 µs       147 µs (FFT path: 146)
  2048/512, 16 × 1323000    424 MB     101 µs       393 216     66 µs       197 µs (FFT path: 326)
  ========================  =========  ===========  ==========  ==========  =========================

  At "highest" n_fft 1000's dots alone cost what the FFT path takes end to end (its factors pad to
  32 × 64, and each stage is a dense DFT).

Measured (H200, 2026-12-03, ``python -m nbxsig.bench.fourstep_sweep``, torch in the same process):
spectrogram 206 µs at 3xTF32 and 116 µs at TF32 (torch.stft + abs².pow 409 µs; the FFT path 255 µs)
-- 5× and 9× its floor; at 502fb23 198.6 / 110.3 µs. Complex stft n_fft 400 (``--phase stft``,
502fb23): 215.8 µs at 3xTF32 (torch.stft 280.3, the FFT path 216.6) and 122.4 at TF32 -- 5.7× and
3.6× the floors above; n_fft 1000 and 2048 run 3-5× slower than the FFT path (:data:`AUTO_STFT_N`).
Twelfth round (one twiddle table broadcast over the tile, the window too at TF32): 184 / 93 µs, and on
64 × 30 s 539 / 260 µs; Nsight Compute puts the kernel at 90% of its L1/shared-memory throughput.
Thirteenth round, fp16 stage operands: 108.9 / 68.4 µs, and on 64 × 30 s 305.9 / 187.7 µs ("fp16x3" /
"fp16"), with the relative error of 3xTF32 / TF32 (2.96e-7 vs 4.18e-7 / 3.40e-4 vs 3.40e-4).
The gap: the stage boundaries (dot output → dot operand, the per-frame transpose) are layout
conversions through shared memory, and at 3xTF32 a tile needs ~8.7 KB of shared memory per
frame, which caps the tile (32 frames do not fit) and the programs per SM. With Triton's Hopper
wgmma disabled (``DISABLE_MMA_V3=1``, register-operand mma.sync) the same tile ran 188-192 µs. The
order of the three TF32 products: both ``a_hi`` products first (so the ``a_hi``/``a_lo`` tiles need
not be live together) measured 203 vs 199 µs with 2.3× the error (9.8e-7 vs 4.2e-7): dropped. The
fused mel kernel: 2385 / 653 µs (floor 162 / 54): its mel dot has M = 16 frames, so every program
re-reads the K-chunked filterbank (80 KB per plane, hi + lo at 3xTF32) from L2 -- ~1.9 GB over the
12 004 programs of the 64 × 30 s case.

Backward: the kernel keeps nothing for autograd. Its callers (``nbxsig.kernels.stft.stft_forward``
without grad, ``nbxsig.kernels.mel._FusedMel``, which recomputes the torch twin in ``backward``) keep
their gradient paths.

Example::

    >>> x = torch.randn(4, 16000, device="cuda")
    >>> S = spectrogram(x, n_fft=400, hop=160, window=torch.hann_window(400, device="cuda"),
    ...                 center=True, pad_mode="reflect", scale=1.0, power=2.0)      # (4, 201, 101)
"""

from __future__ import annotations

import math
from collections import OrderedDict
from functools import lru_cache

import torch
import triton
import triton.language as tl

from ._launch import CachedLaunch
from ._runtime import cdiv, check_launchable, empty_output, next_pow2
from .mel import (
    _dot,
    _planes,
    _store_mels,
    dot_precision,
    log_mode,
    mel_blocks,
    memoized,
    power_mode,
    whisper_finish,
)
from .mel import version as tensor_version
from .stft import _PAD_MODES, _load_signal, _load_window
from .stft import n_frames as count_frames

#: Largest padded frame ``N1P·N2P`` the kernel takes: the frame tile (BLOCK_T × N1P·N2P fp32, and its
#: split/transposed copies) lives in registers, so larger frames need fewer frames per tile.
MAX_PADDED = 2048
#: Largest padded factor: the stage bases (``N1P × 2·N1P`` and ``2·N2P × 2·K2P`` fp32, hi + lo planes
#: at 3xTF32) are dot operands in shared memory; a 128-point factor's would take 256 KB.
MAX_FACTOR = 64


@lru_cache(maxsize=256)
def plan(n_fft: int, *, mel: bool = False) -> tuple[int, int] | None:
    """``(N1, N2)`` with ``N1·N2 = n_fft`` and the fewest padded multiply-adds per frame (stage 1 +
    stage 2, + a 128-mel projection for ``mel``), or None where no factorisation fits (primes, tiny
    or huge N).

    >>> plan(400), plan(512), plan(2048), plan(401)
    ((16, 25), (16, 32), (32, 64), None)
    """
    best, best_cost = None, None
    for n1 in range(2, n_fft):
        if n_fft % n1:
            continue
        n2 = n_fft // n1
        if n2 < 2:
            continue
        n1p, n2p, k2p = _pads(n1, n2, mel=mel)
        if n1p * n2p > MAX_PADDED or max(n1p, n2p) > MAX_FACTOR:
            continue
        cost = n2p * n1p * 2 * n1p + n1p * 2 * n2p * 2 * k2p + (n1p * k2p * 128 if mel else 0)
        if best_cost is None or cost < best_cost:
            best, best_cost = (n1, n2), cost
    return best


def _split_nyquist(n2: int, *, mel: bool) -> bool:
    # With N2 even, stage 2 computes k2 < N2/2 only (a power of two for power-of-two N2, where
    # N2/2 + 1 columns would pad to N2) and the Nyquist bin k = N/2 -- Σ (-1)^n x[n], since
    # (-1)^(N2·n1 + n2) = (-1)^n2 -- is a sum over the frame tile. The mel epilogue keeps the
    # N2/2 + 1 columns (its filterbank chunks are laid out on them).
    return n2 % 2 == 0 and not mel


def _pads(n1: int, n2: int, *, mel: bool = False) -> tuple[int, int, int]:
    # N1P is a dot's K and half its N (>= 16); 2·N2P and 2·K2P are dots' K and N (>= 16).
    k2 = n2 // 2 if _split_nyquist(n2, mel=mel) else n2 // 2 + 1
    return next_pow2(n1, 16), next_pow2(n2, 8), next_pow2(k2, 8)


def supports(n_fft: int, *, onesided: bool = True) -> bool:
    """Whether the four-step kernel computes this transform (a onesided spectrum of composite n_fft
    above the dense range, whose padded frame fits in registers)."""
    return onesided and n_fft > 32 and plan(n_fft) is not None


#: Whether the four-step kernel is the auto path on a GPU: None → the measured rule below, True →
#: wherever it is supported (the benchmark's probes force it), False → never.
SPECTROGRAM_AUTO: bool | None = None
#: The mel auto path: off. Measured on an H200 (64 × 30 s, 80 mels, n_fft 400): the fused mel kernel
#: 2385 µs at "highest" and 653 µs at "high" (its best tiles), nbxsig.stft's spectrogram (itself this
#: kernel) + one matmul 878 µs and 569 µs -- the 16-frame mel dots reload the filterbank per program.
#: ``_path="fourstep"`` runs it (no spectrogram tensor: 0 MB extra instead of 155 MB).
MEL_AUTO = False
#: n_fft where the four-step power spectrogram measured faster than the FFT path (fused framing +
#: torch.fft + a power kernel) on an H200, per torch-level dot precision ("tf32x3": "highest", "tf32":
#: "high"/"medium"), with the stages' fp16 operands (:data:`STAGE_PRECISION`), thirteenth round
#: (``.gpu``-style A/B, same process, 64 × 160000 unless noted): "highest" -- 256/64 130.9 vs 224.8 µs,
#: 400/160 108.9 (the FFT path 255 at 502fb23), 512/128 152.8 vs 242.0, 1000/250 16 × 480000 272.1 vs 191.1;
#: "high" -- 256 96.2 vs 224.9, 400 68.4, 512 95.4 vs 240.7, 1000 146.9 vs 191.0.
AUTO_SPECTROGRAM_N = {"tf32x3": (256, 400, 512), "tf32": (256, 400, 512, 1000)}


def spectrogram_path(*, device_type: str, n_fft: int, onesided: bool, precision: str) -> str:
    """The Triton power spectrogram's path above the dense range: "fourstep" (this kernel) or "fft"
    (fused framing, torch.fft, a power kernel). Pure: no device queries.

    On a GPU the four-step kernel runs where it was measured faster (:data:`AUTO_SPECTROGRAM_N` for
    the dot ``precision``); under the interpreter (CPU tensors) the FFT path stays, and tests call
    this module's launchers directly.
    """
    if device_type != "cuda" or SPECTROGRAM_AUTO is False or not supports(n_fft, onesided=onesided):
        return "fft"
    if SPECTROGRAM_AUTO or n_fft in AUTO_SPECTROGRAM_N.get(precision, ()):
        return "fourstep"
    return "fft"


#: Whether the four-step kernel is the complex stft's auto path on a GPU: None → the measured rule
#: (:data:`AUTO_STFT_N`), True → wherever it is supported (the benchmark's probes force it), False →
#: never.
STFT_AUTO: bool | None = None
#: n_fft where the complex four-step stft measured no slower than the FFT path (fused framing +
#: torch.rfft, which keeps a (B, T, n_fft) frame buffer) on an H200, per dot precision (see
#: :data:`AUTO_SPECTROGRAM_N`), fp16 stages, thirteenth round, best tile vs the FFT path in the same
#: process: "highest" -- 400/160 64 × 160000 129.5 (the FFT path 216.6 at 502fb23; torch.stft 281.6), 512/128
#: 180.1 vs 180.2 (a tie in time, no frame buffer), 1000/250 16 × 480000 298.9 vs 180.8, 2048/512 16 ×
#: 1323000 494.7 vs 327.0; "high" -- 400 87.6, 512 120.8 vs 182.6, 1000 163.8 vs 187.8, 2048 320.2 vs
#: 326.9 (a tie in time; the FFT path's frame buffer is 339 MB there).
AUTO_STFT_N: dict[str, tuple[int, ...]] = {"tf32x3": (400, 512), "tf32": (400, 512, 1000, 2048)}


def stft_path(*, device_type: str, n_fft: int, onesided: bool, precision: str) -> str:
    """The Triton complex stft's path above the dense range: "fourstep" (:func:`stft`, no frame
    buffer) or "fft" (fused framing, torch.fft). Pure, as :func:`spectrogram_path`."""
    if device_type != "cuda" or STFT_AUTO is False or not supports(n_fft, onesided=onesided):
        return "fft"
    if STFT_AUTO or n_fft in AUTO_STFT_N.get(precision, ()):
        return "fourstep"
    return "fft"


@triton.jit
def _fourstep_kernel(
    x_ptr,
    stride_xb,
    stride_xl,
    length,
    win_ptr,
    b1_ptr,
    b1_lo_ptr,
    tw_ptr,
    b2_ptr,
    b2_lo_ptr,
    fb_ptr,
    fb_lo_ptr,
    out_ptr,
    stride_ob,
    stride_of,
    stride_ot,
    peak_ptr,
    n_frames,
    hop,
    pad,
    scale,
    power,
    floor,
    n_mels,
    N_FFT: tl.constexpr,
    N1: tl.constexpr,
    N2: tl.constexpr,
    N1P: tl.constexpr,
    N2P: tl.constexpr,
    K2P: tl.constexpr,
    MODE: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    POWER_MODE: tl.constexpr,  # 2: |X|², 1: |X|, 0: any other power
    MEL: tl.constexpr,
    HAS_FLOOR: tl.constexpr,
    LOG: tl.constexpr,
    TRACK_PEAK: tl.constexpr,
    M_TOT: tl.constexpr,
    M1: tl.constexpr,
    M2: tl.constexpr,
    BLOCK_T: tl.constexpr,
    PRECISION: tl.constexpr,
    PERMUTE_STORE: tl.constexpr,  # spectrogram: store rows (frame, k2) (contiguous bins), else (frame, k1)
    COMPLEX: tl.constexpr,  # write X itself, interleaved (re, im) at out + 2·(...) + part
    NYQ: tl.constexpr,  # stage 2 stops below k2 = N2/2; the Nyquist bin is summed from the frame tile
    K_END: tl.constexpr,  # bins k < K_END come from stage 2 (N/2 with NYQ, else N/2 + 1)
    WINDOW_TABLE: tl.constexpr,  # one frame's window broadcast over the tile, else loaded per element
):
    pid = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    t0 = pid * BLOCK_T
    # Stage 1 rows are (frame, n2), columns n1: x[t, N2·n1 + n2], gathered from the signal.
    R1: tl.constexpr = BLOCK_T * N2P
    r1 = tl.arange(0, R1)
    t1 = t0 + r1 // N2P
    n2 = r1 % N2P
    n1 = tl.arange(0, N1P)
    n = n1[None, :] * N2 + n2[:, None]
    valid = (n1 < N1)[None, :] & (n2 < N2)[:, None]
    # A tile whose frames all lie inside the signal (most of them) loads with 32-bit offsets from
    # its first sample and no padding map (the host keeps (BLOCK_T·hop + n_fft)·stride < 2^31);
    # the few tiles at either end map indices (64-bit positions: t·hop can pass 2^31).
    first = t0.to(tl.int64) * hop - pad
    if (first >= 0) & (first + (BLOCK_T - 1) * hop + N_FFT <= length):
        rel = (r1 // N2P)[:, None] * hop + n
        v = tl.load(x_ptr + b * stride_xb + first * stride_xl + rel * stride_xl, mask=valid, other=0.0)
        v = v.to(tl.float32)
    else:
        p = t1.to(tl.int64)[:, None] * hop + n
        v = _load_signal(
            x_ptr, b * stride_xb, stride_xl, p, pad, length, valid & (t1 < n_frames)[:, None], x_ptr, MODE
        )
    if WINDOW_TABLE:
        # The window of one frame, (N2P, N1P), broadcast over the tile's frames: 1/BLOCK_T of the loads.
        n2t = tl.arange(0, N2P)
        nt = n1[None, :] * N2 + n2t[:, None]
        wt = _load_window(win_ptr, nt, (n1 < N1)[None, :] & (n2t < N2)[:, None], HAS_WINDOW) * scale
        v = tl.reshape(tl.reshape(v, (BLOCK_T, N2P, N1P)) * wt[None, :, :], (R1, N1P))
    else:
        v = v * (_load_window(win_ptr, n, valid, HAS_WINDOW) * scale)
    if NYQ:
        # X[N/2] = Σ_n (-1)^n v[n], and with N2 even (-1)^n = (-1)^n2: a signed row sum (fp32 adds).
        sign = (1 - 2 * (n2 % 2)).to(tl.float32)
        nyq = tl.sum(tl.reshape(tl.sum(v, axis=1) * sign, (BLOCK_T, N2P)), axis=1)  # (BLOCK_T,)
    HALF: tl.constexpr = (PRECISION == "fp16") or (PRECISION == "fp16x3")
    if HALF:
        # fp16 operands: each frame scaled by a power of two (exact) so its peak lies in [1, 2); the
        # stage outputs are then bounded by 2·N1 and 2·N1·N2, far inside fp16's and fp32's ranges,
        # whatever the signal's level. ``up`` undoes it on the spectrum.
        v, up = _frame_scale(v, BLOCK_T, N2P, N1P)
    # Stage 1: columns 2·k1 + (0: re, 1: im) of the N1-point DFT of each (frame, n2) row.
    c1 = tl.arange(0, 2 * N1P)
    o1 = n1[:, None] * (2 * N1P) + c1[None, :]
    y = _stage_dot(
        v, b1_ptr + o1, b1_lo_ptr + o1, N1P * 2 * N1P, tl.zeros((R1, 2 * N1P), dtype=tl.float32), PRECISION
    )
    y_re, y_im = tl.split(tl.reshape(y, (R1, N1P, 2)))
    # Twiddle W_N^{n2·k1} = c − i·s: one (N2P, N1P) table, the same for every frame, broadcast over the
    # tile in the dot output's own layout. Loading it per (frame, n2) row instead cost 8 K loads a
    # program and a conversion of the whole (R1, N1P) tile to the loads' layout through shared memory
    # (twelfth round, H200, n_fft 400 at TF32: 276.4–278.6 vs 313.5–315.2 µs).
    k1 = tl.arange(0, N1P)
    ot = tl.arange(0, N2P)[:, None] * N1P + k1[None, :]
    c = tl.load(tw_ptr + ot)[None, :, :]
    s = tl.load(tw_ptr + N2P * N1P + ot)[None, :, :]
    if PRECISION == "fp16x3":
        # Stage 1's products came out 2^11 too large (see _stage_dot); the twiddle takes it back.
        c = c * (1.0 / 2048.0)
        s = s * (1.0 / 2048.0)
    y_re = tl.reshape(y_re, (BLOCK_T, N2P, N1P))
    y_im = tl.reshape(y_im, (BLOCK_T, N2P, N1P))
    z_re = y_re * c + y_im * s
    z_im = y_im * c - y_re * s
    # Stage 2: the onesided half, columns 2·k2 + part for k2 < K2P.
    R2: tl.constexpr = BLOCK_T * N1P
    i2 = tl.arange(0, 2 * N2P)
    c2 = tl.arange(0, 2 * K2P)
    o2 = i2[:, None] * (2 * K2P) + c2[None, :]
    acc2 = tl.zeros((R2, 2 * K2P), dtype=tl.float32)
    # Transpose each frame's (n2, k1) block to (k1, n2): stage 2 rows are (frame, k1), columns
    # 2·n2 + part. fp16 operands are rounded (and split) before the transpose, which then moves
    # 16-bit values through shared memory.
    if PRECISION == "fp16":
        z = _frame_transpose(z_re.to(tl.float16), z_im.to(tl.float16), R2, N2P)
        xk = tl.dot(z, tl.load(b2_ptr + o2), acc2)
    elif PRECISION == "fp16x3":
        re_hi, re_lo = _split_half(z_re)
        im_hi, im_lo = _split_half(z_im)
        z_hi = _frame_transpose(re_hi, im_hi, R2, N2P)
        z_lo = _frame_transpose(re_lo, im_lo, R2, N2P)
        xk = _dot_half3(z_hi, z_lo, b2_ptr + o2, b2_lo_ptr + o2, 2 * N2P * 2 * K2P, acc2)
    else:
        z = _frame_transpose(z_re, z_im, R2, N2P)
        xk = _dot(z, b2_ptr + o2, b2_lo_ptr + o2, acc2, PRECISION)
    if HALF:
        if PRECISION == "fp16x3":
            up = up * (1.0 / 2048.0)
        xk = tl.reshape(tl.reshape(xk, (BLOCK_T, N1P, 2 * K2P)) * up[:, None, None], (R2, 2 * K2P))
    if NYQ:
        tn = t0 + tl.arange(0, BLOCK_T)
        on = b * stride_ob + (N_FFT // 2) * stride_of + tn.to(tl.int64) * stride_ot
        if COMPLEX:
            tl.store(out_ptr + on, nyq, mask=tn < n_frames)
            tl.store(out_ptr + on + 1, tl.zeros_like(nyq), mask=tn < n_frames)
        else:
            tl.store(out_ptr + on, _power(nyq * nyq, power, POWER_MODE), mask=tn < n_frames)
    # |X|^power, (R2, K2P): rows (frame, k1), columns k2 (unused, and compiled away, for COMPLEX).
    x_re, x_im = tl.split(tl.reshape(xk, (R2, K2P, 2)))
    pw = _power(x_re * x_re + x_im * x_im, power, POWER_MODE)
    if COMPLEX and PERMUTE_STORE:
        # Rows (frame, k2), columns 2·k1 + part: a row is 2·N1 consecutive floats of the interleaved
        # (B, T, F, 2) buffer (bins k1 + N1·k2 for consecutive k1).
        xq = tl.reshape(
            tl.permute(tl.reshape(xk, (BLOCK_T, N1P, K2P, 2)), (0, 2, 1, 3)), (BLOCK_T * K2P, 2 * N1P)
        )
        rq = tl.arange(0, BLOCK_T * K2P)
        tq = t0 + rq // K2P
        cq = tl.arange(0, 2 * N1P)
        kq1 = cq // 2
        k = kq1[None, :] + N1 * (rq % K2P)[:, None]
        ok = (tq < n_frames)[:, None] & (kq1 < N1)[None, :] & (k < K_END)
        offs = b * stride_ob + k.to(tl.int64) * stride_of + tq.to(tl.int64)[:, None] * stride_ot
        tl.store(out_ptr + offs + (cq % 2)[None, :], xq, mask=ok)
    elif COMPLEX:
        # The stage-2 tile as it comes out of the dot: rows (frame, k1), columns 2·k2 + part. No
        # transpose; each (re, im) pair is 8 contiguous bytes and consecutive rows are neighbouring bins.
        r2 = tl.arange(0, R2)
        t2 = t0 + r2 // N1P
        kk1 = r2 % N1P
        k = kk1[:, None] + N1 * (c2 // 2)[None, :]
        ok = (t2 < n_frames)[:, None] & (kk1 < N1)[:, None] & (k < K_END)
        offs = b * stride_ob + k.to(tl.int64) * stride_of + t2.to(tl.int64)[:, None] * stride_ot
        tl.store(out_ptr + offs + (c2 % 2)[None, :], xk, mask=ok)
    elif not MEL and PERMUTE_STORE:
        # Rows (frame, k2), columns k1: along a row the bins k1 + N1·k2 are consecutive, so with the
        # (B, T, F) buffer each row is one contiguous store.
        pq = tl.reshape(tl.permute(tl.reshape(pw, (BLOCK_T, N1P, K2P)), (0, 2, 1)), (BLOCK_T * K2P, N1P))
        rq = tl.arange(0, BLOCK_T * K2P)
        tq = t0 + rq // K2P
        kq1 = tl.arange(0, N1P)
        k = kq1[None, :] + N1 * (rq % K2P)[:, None]
        ok = (tq < n_frames)[:, None] & (kq1 < N1)[None, :] & (k < K_END)
        offs = b * stride_ob + k.to(tl.int64) * stride_of + tq.to(tl.int64)[:, None] * stride_ot
        tl.store(out_ptr + offs, pq, mask=ok)
    elif not MEL:
        r2 = tl.arange(0, R2)
        t2 = t0 + r2 // N1P
        kk1 = r2 % N1P
        k2 = tl.arange(0, K2P)
        k = kk1[:, None] + N1 * k2[None, :]
        ok = (t2 < n_frames)[:, None] & (kk1 < N1)[:, None] & (k < K_END)
        offs = b * stride_ob + k.to(tl.int64) * stride_of + t2.to(tl.int64)[:, None] * stride_ot
        tl.store(out_ptr + offs, pw, mask=ok)
    else:
        # Mel: the power tile times the permuted filterbank, in four K-chunks (k2 mod 4, taken apart
        # with tl.split), so each dot's filter operand is a quarter of the filterbank: the whole one
        # (256 × 128 fp32, hi + lo) would not fit in shared memory.
        pe, po = tl.split(tl.reshape(pw, (R2, K2P // 2, 2)))  # k2 = 2q, 2q + 1
        p0, p2 = tl.split(tl.reshape(pe, (R2, K2P // 4, 2)))  # k2 = 4q, 4q + 2
        p1, p3 = tl.split(tl.reshape(po, (R2, K2P // 4, 2)))  # k2 = 4q + 1, 4q + 3
        KC: tl.constexpr = N1P * K2P // 4
        p0 = tl.reshape(p0, (BLOCK_T, KC))
        p1 = tl.reshape(p1, (BLOCK_T, KC))
        p2 = tl.reshape(p2, (BLOCK_T, KC))
        p3 = tl.reshape(p3, (BLOCK_T, KC))
        t = t0 + tl.arange(0, BLOCK_T)
        t_ok = t < n_frames
        m1 = tl.arange(0, M1)
        acc1 = _mel_block(p0, p1, p2, p3, fb_ptr, fb_lo_ptr, m1, KC, M_TOT, BLOCK_T, M1, PRECISION)
        if TRACK_PEAK:
            # Mels are >= 0, and non-negative floats order like their int32 bit patterns.
            peak = tl.max(tl.max(tl.where(t_ok[:, None] & (m1 < n_mels)[None, :], acc1, 0.0), axis=1), axis=0)
        _store_mels(
            acc1, m1, out_ptr, b, stride_ob, stride_of, stride_ot, t, t_ok, n_mels, floor, HAS_FLOOR, LOG
        )
        if M2 > 0:
            m2 = M1 + tl.arange(0, M2)
            acc2 = _mel_block(p0, p1, p2, p3, fb_ptr, fb_lo_ptr, m2, KC, M_TOT, BLOCK_T, M2, PRECISION)
            if TRACK_PEAK:
                ok2 = t_ok[:, None] & (m2 < n_mels)[None, :]
                peak = tl.maximum(peak, tl.max(tl.max(tl.where(ok2, acc2, 0.0), axis=1), axis=0))
            _store_mels(
                acc2, m2, out_ptr, b, stride_ob, stride_of, stride_ot, t, t_ok, n_mels, floor, HAS_FLOOR, LOG
            )
        if TRACK_PEAK:  # relaxed: only the floor pass reads it, after this kernel ends
            tl.atomic_max(peak_ptr + b, peak.to(tl.int32, bitcast=True), sem="relaxed")


@triton.jit
def _frame_scale(v, BLOCK_T: tl.constexpr, N2P: tl.constexpr, N1P: tl.constexpr):
    """The ``(frame, n2) × n1`` tile with each frame multiplied by ``2^-e``, ``e`` the exponent of its
    peak (so the peak lies in [1, 2)), and ``2^e`` per frame ``(BLOCK_T,)``: exact scalings. The
    exponent is clamped to normal numbers (an all-zero or subnormal frame keeps 2^126, an inf/NaN one
    stays inf/NaN)."""
    v3 = tl.reshape(v, (BLOCK_T, N2P, N1P))
    peak = tl.max(tl.max(tl.abs(v3), axis=2), axis=1)
    e = tl.minimum(tl.maximum((peak.to(tl.int32, bitcast=True) >> 23) & 0xFF, 1), 253)
    down = ((254 - e) << 23).to(tl.float32, bitcast=True)  # 2^(127 - e)
    up = (e << 23).to(tl.float32, bitcast=True)  # 2^(e - 127)
    return tl.reshape(v3 * down[:, None, None], (BLOCK_T * N2P, N1P)), up


@triton.jit
def _split_half(a):
    """fp32 ``a`` = ``hi + lo·2^-11`` with ``hi`` = fp16(a) (to nearest) and ``lo`` the residual
    times 2^11 in fp16: scaled so it stays a normal fp16 number where ``hi`` is one."""
    hi = a.to(tl.float16)
    return hi, ((a - hi.to(tl.float32)) * 2048.0).to(tl.float16)


@triton.jit
def _dot_half3(a_hi, a_lo, b_ptrs, b_lo_ptrs, PLANE: tl.constexpr, acc):
    """``acc + 2^11·(a @ b)`` from split fp16 operands (:func:`_split_half`): ``b_ptrs`` point at the
    fp16 ``hi`` plane, ``b_ptrs + PLANE`` at ``hi·2^11``, ``b_lo_ptrs`` at the scaled residual. The
    three products ``a_hi·b_lo' + a_lo'·b_hi + a_hi·(b_hi·2^11)`` all carry the factor 2^11, so they
    share one fp32 accumulator; the dropped ``a_lo·b_lo`` is ~2^-22 of a product."""
    acc = tl.dot(a_hi, tl.load(b_lo_ptrs), acc)
    acc = tl.dot(a_lo, tl.load(b_ptrs), acc)
    return tl.dot(a_hi, tl.load(b_ptrs + PLANE), acc)


@triton.jit
def _stage_dot(a, b_ptrs, b_lo_ptrs, PLANE: tl.constexpr, acc, PRECISION: tl.constexpr):
    """A stage's ``acc + a @ b`` for fp32 ``a``: fp16 operands at "fp16" (one dot) and "fp16x3" (three,
    2^11 too large: :func:`_dot_half3`), else :func:`nbxsig.kernels.mel._dot`."""
    if PRECISION == "fp16":
        acc = tl.dot(a.to(tl.float16), tl.load(b_ptrs), acc)
    elif PRECISION == "fp16x3":
        a_hi, a_lo = _split_half(a)
        acc = _dot_half3(a_hi, a_lo, b_ptrs, b_lo_ptrs, PLANE, acc)
    else:
        acc = _dot(a, b_ptrs, b_lo_ptrs, acc, PRECISION)
    return acc


@triton.jit
def _frame_transpose(z_re, z_im, R2: tl.constexpr, N2P: tl.constexpr):
    """``(BLOCK_T, N2P, N1P)`` real and imaginary parts → ``(BLOCK_T·N1P, 2·N2P)``: rows (frame, k1),
    columns ``2·n2 + part``."""
    return tl.reshape(tl.join(tl.permute(z_re, (0, 2, 1)), tl.permute(z_im, (0, 2, 1))), (R2, 2 * N2P))


@triton.jit
def _power(pw, power, POWER_MODE: tl.constexpr):
    """``|X|^power`` from ``pw = |X|²``."""
    if POWER_MODE == 1:
        pw = tl.sqrt(pw)
    elif POWER_MODE == 0:
        pw = tl.where(pw != 0, tl.exp2(tl.log2(tl.where(pw != 0, pw, 1.0)) * (power * 0.5)), 0.0)
    return pw


@triton.jit
def _mel_block(
    p0, p1, p2, p3, fb_ptr, fb_lo_ptr, m, KC: tl.constexpr, M_TOT: tl.constexpr, BLOCK_T: tl.constexpr,
    MB: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """``Σ_j p_j @ fb[j][:, m]`` over the four K-chunks (filter table ``(4, KC, M_TOT)``)."""
    o = tl.arange(0, KC)[:, None] * M_TOT + m[None, :]
    acc = tl.zeros((BLOCK_T, MB), dtype=tl.float32)
    acc = _dot(p0, fb_ptr + o, fb_lo_ptr + o, acc, PRECISION)
    acc = _dot(p1, fb_ptr + KC * M_TOT + o, fb_lo_ptr + KC * M_TOT + o, acc, PRECISION)
    acc = _dot(p2, fb_ptr + 2 * KC * M_TOT + o, fb_lo_ptr + 2 * KC * M_TOT + o, acc, PRECISION)
    acc = _dot(p3, fb_ptr + 3 * KC * M_TOT + o, fb_lo_ptr + 3 * KC * M_TOT + o, acc, PRECISION)
    return acc


def _angles(a: torch.Tensor, b: torch.Tensor, n: int) -> torch.Tensor:
    # a·b reduced mod n in integers before forming the angle (exact at every n).
    return ((a[:, None] * b[None, :]) % n).double() * (2.0 * math.pi / n)


@lru_cache(maxsize=32)
def _tables(n1_: int, n2_: int, k2_: int, device: torch.device):
    """For ``n_fft = n1_·n2_``: the stage-1 basis ``(N1P, 2·N1P)``, the twiddles ``(2, N2P, N1P)``
    and the stage-2 basis ``(2·N2P, 2·K2P)`` for ``k2 < k2_``, built in float64 and stored as
    (fp32, hi, lo) planes."""
    n_fft = n1_ * n2_
    n1p, n2p, k2p = next_pow2(n1_, 16), next_pow2(n2_, 8), next_pow2(k2_, 8)
    i1 = torch.arange(n1_, device=device)
    i2 = torch.arange(n2_, device=device)
    a1 = _angles(i1, i1, n1_)  # (n1, k1)
    b1 = torch.zeros(n1p, n1p, 2, dtype=torch.float64, device=device)
    b1[:n1_, :n1_, 0] = torch.cos(a1)
    b1[:n1_, :n1_, 1] = -torch.sin(a1)
    at = _angles(i2, i1, n_fft)  # (n2, k1)
    tw = torch.zeros(2, n2p, n1p, dtype=torch.float64, device=device)
    tw[0, :n2_, :n1_] = torch.cos(at)
    tw[1, :n2_, :n1_] = torch.sin(at)
    k2 = torch.arange(k2_, device=device)
    a2 = _angles(i2, k2, n2_)  # (n2, k2)
    c2, s2 = torch.cos(a2), torch.sin(a2)
    b2 = torch.zeros(n2p, 2, k2p, 2, dtype=torch.float64, device=device)  # (n2, part in, k2, part out)
    b2[:n2_, 0, :k2_, 0] = c2  # Re X = Σ Re Z·c + Im Z·s
    b2[:n2_, 1, :k2_, 0] = s2
    b2[:n2_, 0, :k2_, 1] = -s2  # Im X = Σ Im Z·c − Re Z·s
    b2[:n2_, 1, :k2_, 1] = c2
    b1, b2 = b1.reshape(n1p, 2 * n1p), b2.reshape(2 * n2p, 2 * k2p)
    return (*_planes(b1), *_half_planes(b1)), tw.float().contiguous(), (*_planes(b2), *_half_planes(b2))


def _half_planes(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The fp16 operands of a float64 basis: ``(2, R, C)`` planes ``hi`` = fp16(v) and ``hi·2^11``
    (exact), and the residual ``(v − hi)·2^11`` in fp16 (:func:`_dot_half3`)."""
    hi = v.float().half()
    lo = ((v - hi.double()) * 2048.0).float().half()
    return torch.stack([hi, (hi.float() * 2048.0).half()]).contiguous(), lo.contiguous()


_FB_CACHE: OrderedDict = OrderedDict()


def _filters(filters: torch.Tensor, n_fft: int, m_tot: int):
    """The filterbank as the kernel's four K-chunks ``(4, KC, M_TOT)``: chunk ``j``, row
    ``k1·(K2P/4) + q`` holds bin ``k1 + N1·(4q + j)`` (zero rows for padding and ``k > N/2``), mels
    zero-padded to ``M_TOT``; as (fp32, hi, lo) planes, cached per tensor
    (:func:`nbxsig.kernels.mel.memoized`)."""

    def build():
        n1_, n2_ = plan(n_fft, mel=True)
        n1p, _, k2p = _pads(n1_, n2_, mel=True)
        dev = filters.device
        j = torch.arange(4, device=dev)[:, None, None]
        k1 = torch.arange(n1p, device=dev)[None, :, None]
        q = torch.arange(k2p // 4, device=dev)[None, None, :]
        k2 = 4 * q + j
        k = (k1 + n1_ * k2).reshape(-1)
        ok = ((k1 < n1_) & (k2 <= n2_ // 2)).reshape(-1) & (k <= n_fft // 2)
        fb = torch.zeros(4 * n1p * (k2p // 4), m_tot, dtype=torch.float64, device=dev)
        fb[ok, : filters.shape[1]] = filters.double()[k[ok]]
        return _planes(fb)

    return memoized(_FB_CACHE, (id(filters), tensor_version(filters), n_fft, m_tot), (filters,), build)


#: Launch configs per (n_fft, stage precision) (frames per program, warps, stages; else
#: :func:`_default_config`), module level so the benchmark can set them. fp16 stages, thirteenth round
#: (H200, ``.gpu``-style A/B of tiles, torch.stft in the same process): spectrogram n_fft 400, 64 × 30 s
#: -- 8 frames on 4 warps 187.7 µs at "fp16" and 305.9 at "fp16x3" (16 on 4: 206.3 / 353.4; 16 on 8:
#: 204.3 / 343.6; 8 on 2: 216.0 / 392.9; 32 on 8: 266.1 / 414.1), TF32 261.6 and 3xTF32 542.3; n_fft 512
#: (64 × 160000) -- "fp16" 8 frames on 2 warps 95.4 µs (16 on 2: 93.9; 8 on 4: 104.5), "fp16x3" 8 on
#: 4 153.0 (16 on 4: 152.5; 8 on 2: 172.4). TF32 tiles (502fb23 sweep, 64 × 160000, n_fft 400): 8
#: frames on 4 warps 206 µs at 3xTF32 and 116 at TF32 (16 on 8: 231 / 162; 32 frames need 278 KB of
#: shared memory at 3xTF32); n_fft 512: 8 on 4 149.1 / 265.8.
SPEC_CONFIGS: dict[tuple[int, str], dict] = {
    **{
        (400, p): {"BLOCK_T": 8, "num_warps": 4, "num_stages": 1}
        for p in ("fp16", "fp16x3", "tf32", "tf32x3")
    },
    (512, "fp16"): {"BLOCK_T": 8, "num_warps": 2, "num_stages": 1},
    (256, "fp16"): {"BLOCK_T": 8, "num_warps": 2, "num_stages": 1},
    (256, "fp16x3"): {"BLOCK_T": 16, "num_warps": 4, "num_stages": 1},
    **{(512, p): {"BLOCK_T": 8, "num_warps": 4, "num_stages": 1} for p in ("fp16x3", "tf32", "tf32x3")},
}
#: The complex stft's configs (as :data:`SPEC_CONFIGS`). n_fft 400, 64 × 160000, thirteenth round: 8
#: frames on 4 warps 87.6 µs at "fp16" and 129.5 at "fp16x3" (16 on 4: 94.4 / 147.8; 16 on 8: 89.9 /
#: 137.8; 8 on 2: 100.4 / 157.6). TF32 (502fb23): 8 on 4 215.8 µs at 3xTF32 and 122.4 at TF32; n_fft
#: 512 8 on 2 163.2 at TF32.
STFT_CONFIGS: dict[tuple[int, str], dict] = {
    **{
        (400, p): {"BLOCK_T": 8, "num_warps": 4, "num_stages": 1}
        for p in ("fp16", "fp16x3", "tf32", "tf32x3")
    },
    **{(512, p): {"BLOCK_T": 8, "num_warps": 2, "num_stages": 1} for p in ("fp16", "tf32")},
    (512, "fp16x3"): {"BLOCK_T": 8, "num_warps": 4, "num_stages": 1},
}
MEL_CONFIG = {"BLOCK_T": 16, "num_warps": 4, "num_stages": 1}


def _default_config(n_fft: int) -> dict:
    # BLOCK_T·N1P·N2P <= 8192 frames' samples on 4 warps: 16 frames up to 512-point padded frames, 4
    # for 2048-point ones (n_fft 1000, 2048). fp16 stages, thirteenth round (H200): 4 frames on 4 warps
    # 163.8 / 298.9 µs for n_fft 1000's stft at "fp16" / "fp16x3" (on 8 warps 257.5 / 410.7; 2 on 4:
    # 190.6 / 330.8; 8 on 8: 212.5 / 321.3), n_fft 2048 320.2 / 494.7 (on 8: 397.0 / 702.2).
    n1_, n2_ = plan(n_fft)
    n1p, n2p, _ = _pads(n1_, n2_)
    return {"BLOCK_T": max(2, min(16, 8192 // (n1p * n2p))), "num_warps": 4, "num_stages": 1}


#: n_fft where the window is one frame's (N2P, N1P) table broadcast over the tile's frames, per dot
#: precision; elsewhere it is loaded per element of the (frame, n2) × n1 tile, as the signal is. Measured
#: on an H200 (64 × 30 s, twelfth round): n_fft 400 at TF32 259.6 vs 278.6 µs (stft 303.5 vs 314.8);
#: at 3xTF32 539.4 vs 539.5 (stft 602.0 vs 592.5), n_fft 512 and 256 at TF32 1-8 µs slower. fp16
#: stages (thirteenth round): n_fft 400 spectrogram 187.7 vs 208.5 µs ("fp16"), 305.9 vs 342.1
#: ("fp16x3"); n_fft 512 (64 × 160000, 8 on 2) 95.4 vs 98.1 at "fp16", 155.2 vs 153.0 at "fp16x3".
WINDOW_TABLE_N: dict[str, tuple[int, ...]] = {"fp16": (400, 512), "fp16x3": (400,), "tf32": (400,)}

#: Spectrogram stores: rows (frame, k2) of consecutive bins (116.1 µs at TF32) rather than rows
#: (frame, k1) of bins N1 apart (118.8 µs); the same at 3xTF32 (206.3 / 205.1 µs). Complex stores:
#: the (frame, k1) rows lose clearly (n_fft 400, 8 frames on 4 warps: 259.1 vs 215.8 µs at 3xTF32,
#: 176.0 vs 122.4 at TF32).
PERMUTE_STORE = True


#: The stages' operand format per dot precision (the mel epilogue keeps TF32): fp16 operands with
#: each frame scaled by a power of two carry the same 11-bit significands as TF32 rounded to nearest
#: ("fp16" for "tf32"; "fp16x3", split hi + lo, for "tf32x3"), at half the shared-memory bytes of the
#: stage-boundary transposes and twice the tensor-core rate. Empty: TF32 operands.
STAGE_PRECISION: dict[str, str] = {"tf32": "fp16", "tf32x3": "fp16x3"}


def stage_precision(precision: str, *, mel: bool = False) -> str:
    """The stages' operand format for a dot precision ("ieee", "tf32", "tf32x3"): its fp16 form from
    :data:`STAGE_PRECISION`, except with the mel epilogue, which takes TF32 operands.

    >>> stage_precision("tf32"), stage_precision("tf32x3"), stage_precision("tf32", mel=True)
    ('fp16', 'fp16x3', 'tf32')
    """
    return precision if mel else STAGE_PRECISION.get(precision, precision)


_fourstep_launch = CachedLaunch(_fourstep_kernel)


def _launch(
    x: torch.Tensor,
    out: torch.Tensor,
    out_strides: tuple[int, int, int],
    *,
    n_fft: int,
    hop: int,
    window: torch.Tensor | None,
    center: bool,
    pad_mode: str,
    scale: float,
    power: float,
    n_frames: int,
    filters: tuple | None = None,
    n_mels: int = 0,
    m_blocks: tuple[int, int] = (16, 0),
    floor: float | None = None,
    log: str | None = None,
    peak: torch.Tensor | None = None,
    precision: str | None = None,
    config: dict | None = None,
    complex_out: bool = False,
) -> None:
    device = x.device
    mel = filters is not None
    precision = precision or stage_precision(dot_precision(device), mel=mel)
    base = MEL_CONFIG if mel else (STFT_CONFIGS if complex_out else SPEC_CONFIGS).get((n_fft, precision))
    meta = {
        "PERMUTE_STORE": PERMUTE_STORE,
        "WINDOW_TABLE": n_fft in WINDOW_TABLE_N.get(precision, ()),
        **(base or _default_config(n_fft)),
        **(config or {}),
    }
    block_t = meta.pop("BLOCK_T")
    # "N1" (benchmarks, tests) picks another factorisation than plan's; the mel filterbank is laid
    # out for plan's.
    n1_ = plan(n_fft, mel=mel)[0] if mel else meta.pop("N1", None) or plan(n_fft)[0]
    n2_ = n_fft // n1_
    nyq = _split_nyquist(n2_, mel=mel)
    n1p, n2p, k2p = _pads(n1_, n2_, mel=mel)
    (b1, b1_hi, b1_lo, b1_half, b1_half_lo), tw, (b2, b2_hi, b2_lo, b2_half, b2_half_lo) = _tables(
        n1_, n2_, n2_ // 2 + (0 if nyq else 1), device
    )
    if filters is None:
        fb = fb_lo = tw  # unused (MEL=False)
    else:
        fb, fb_hi, fb_lo = filters
        fb = fb if precision == "ieee" else fb_hi
    if precision in ("fp16", "fp16x3"):
        if mel:
            raise ValueError(f"precision={precision!r}: the mel epilogue takes 'ieee', 'tf32' or 'tf32x3'")
        b1, b1_lo, b2, b2_lo = b1_half, b1_half_lo, b2_half, b2_half_lo
    elif precision != "ieee":
        b1, b2 = b1_hi, b2_hi
    num_warps = meta.pop("num_warps")
    options = {"num_stages": meta.pop("num_stages")}
    m1, m2 = m_blocks
    if (block_t * hop + n_fft) * abs(x.stride(1)) >= 2**31:
        # The interior tiles' 32-bit offsets would overflow (a last-dimension stride of ~2^31 / 3000).
        x = x.contiguous()
    grid = (cdiv(n_frames, block_t), x.shape[0])
    win = window if window is not None else x
    args = (
        x, x.stride(0), x.stride(1), x.shape[1], win, b1, b1_lo, tw, b2, b2_lo, fb, fb_lo,
        out, *out_strides, peak if peak is not None else tw,
        n_frames, hop, n_fft // 2 if center else 0, float(scale), float(power), float(floor or 0.0), n_mels,
    )  # fmt: skip
    constexprs = dict(
        N_FFT=n_fft, N1=n1_, N2=n2_, N1P=n1p, N2P=n2p, K2P=k2p, MODE=_PAD_MODES[pad_mode],
        HAS_WINDOW=window is not None, POWER_MODE=power_mode(power),
        MEL=filters is not None, HAS_FLOOR=floor is not None, LOG=log_mode(log, whisper=peak is not None),
        TRACK_PEAK=peak is not None, M_TOT=m1 + m2, M1=m1, M2=m2, BLOCK_T=block_t, PRECISION=precision,
        COMPLEX=complex_out, NYQ=nyq, K_END=n_fft // 2 + (0 if nyq else 1), **meta,
    )  # fmt: skip
    # Through the compiled handle: Triton's own launch path (binding ~40 arguments, hashing the key)
    # is host time on every call.
    _fourstep_launch(grid, args, constexprs, num_warps, options=options)


def spectrogram(
    x: torch.Tensor,
    *,
    n_fft: int,
    hop: int,
    window: torch.Tensor | None,
    center: bool,
    pad_mode: str,
    scale: float,
    power: float,
    _precision: str | None = None,
    _config: dict | None = None,
    _row_align: int = 1,
) -> torch.Tensor:
    """``|scale · STFT(x)|^power`` onesided, ``(B, L)`` → ``(B, n_fft//2 + 1, T)`` float32: a view of a
    contiguous ``(B, T, F)`` buffer. ``power > 0``; ``supports(n_fft)`` must hold.

    ``_row_align`` pads each frame's row of the buffer to a multiple of that many floats, for the mel
    projection (:func:`nbxsig.kernels.mel.project`): with 16, 64-byte rows, which its loads vectorize."""
    return _frame_major(
        x, n_fft=n_fft, hop=hop, window=window, center=center, pad_mode=pad_mode, scale=scale, power=power,
        complex_out=False, precision=_precision, config=_config, row_align=_row_align,
    )  # fmt: skip


def stft(
    x: torch.Tensor,
    *,
    n_fft: int,
    hop: int,
    window: torch.Tensor | None,
    center: bool,
    pad_mode: str,
    scale: float,
    _precision: str | None = None,
    _config: dict | None = None,
) -> torch.Tensor:
    """``scale · STFT(x)`` onesided in the real layout, ``(B, L)`` → ``(B, n_fft//2 + 1, T, 2)``
    float32: a view of a contiguous interleaved ``(B, T, F, 2)`` buffer, torch.stft's layout (its
    ``view_as_complex`` is the complex64 ``(B, F, T)`` spectrum). ``supports(n_fft)`` must hold.

    >>> X = stft(torch.randn(2, 16000, device="cuda"), n_fft=400, hop=160, window=None, center=True,
    ...          pad_mode="reflect", scale=1.0)                                    # (2, 201, 101, 2)
    """
    return _frame_major(
        x, n_fft=n_fft, hop=hop, window=window, center=center, pad_mode=pad_mode, scale=scale, power=2.0,
        complex_out=True, precision=_precision, config=_config,
    )  # fmt: skip


def _frame_major(
    x, *, n_fft, hop, window, center, pad_mode, scale, power, complex_out, precision, config, row_align=1
) -> torch.Tensor:
    """The launch behind :func:`spectrogram` and :func:`stft`: a contiguous ``(B, T, F)`` buffer (``(B,
    T, F, 2)`` interleaved with ``complex_out``; rows padded to ``row_align`` floats), returned as its
    ``(B, F, T, ...)`` view."""
    device = check_launchable(x, *(() if window is None else (window,)))
    n_frames = count_frames(x.shape[1], n_fft, hop, center)
    n_bins = n_fft // 2 + 1
    row = -(-n_bins // row_align) * row_align
    shape = (x.shape[0], n_frames, row, *((2,) if complex_out else ()))
    out = empty_output(shape, dtype=torch.float32, device=device)[:, :, :n_bins]
    if n_frames > 0:
        _launch(
            x, out, (out.stride(0), out.stride(2), out.stride(1)), n_fft=n_fft, hop=hop, window=window,
            center=center, pad_mode=pad_mode, scale=scale, power=power, n_frames=n_frames,
            precision=precision, config=config, complex_out=complex_out,
        )  # fmt: skip
    return out.transpose(1, 2)


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
    floor: float | None,
    log: str | None,
    drop_last: bool,
    whisper: bool,
    _precision: str | None = None,
    _config: dict | None = None,
) -> torch.Tensor:
    """The function of :func:`nbxsig.kernels.mel._launch` (``(B, L)`` → ``(B, n_mels, T)`` in x's dtype)
    through the four-step kernel; ``supports(n_fft)`` must hold."""
    device = check_launchable(x, window, filters)
    n_frames = count_frames(x.shape[1], n_fft, hop_length, center) - (1 if drop_last else 0)
    n_mels = filters.shape[1]
    m1, m2 = mel_blocks(n_mels)
    out = empty_output((x.shape[0], n_mels, n_frames), dtype=x.dtype, device=device)
    peak = torch.zeros(x.shape[0], dtype=torch.int32, device=device) if whisper else None
    if n_frames <= 0:
        return out
    _launch(
        x, out, out.stride(), n_fft=n_fft, hop=hop_length, window=window, center=center, pad_mode=pad_mode,
        scale=scale, power=power, n_frames=n_frames, filters=_filters(filters, n_fft, m1 + m2),
        n_mels=n_mels, m_blocks=(m1, m2), floor=floor, log=log, peak=peak, precision=_precision,
        config=_config,
    )  # fmt: skip
    if whisper:
        whisper_finish(out, peak)
    return out
