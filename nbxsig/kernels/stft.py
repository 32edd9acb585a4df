# Triton's code generator builds tuples by concatenation only (it rejects starred expressions).
# ruff: noqa: RUF005
"""STFT / inverse STFT as fused Triton kernels (the twins of :mod:`nbxsig.reference.stft`).

Two ways to compute the transform, chosen per call by :func:`use_dense` (a pure function of n_fft):

* **dense** (n_fft <= 32, the iSTFTNet/Kokoro heads): one kernel per direction does everything.
  The default family is *unrolled* (``_stft_unrolled_kernel`` / ``_ola_frames_kernel``): each
  thread owns whole frames, the DFT basis is unrolled as compile-time FMA immediates (``_coef``: no
  basis loads, no padding of F or N to tensor-core tiles, exact float32), both directions halve
  their work with the basis' even/odd symmetry, and frames are gathered straight from the signal by
  strides (centre padding by index mapping, no padded copy, no frame tensor). The inverse reads each
  frame's spectrum once, forms its samples, and overlap-adds by shifting hop-long chunks across
  threads (``tl.gather``); rows are divided by the window envelope computed on the fly and trimmed to
  ``length`` -- deterministic, no atomics, no frame buffer. (``_ola_unrolled_kernel``, a thread per
  output row summing the ``ceil(n_fft/hop)`` frames that cover it, remains as the comparison.)
  The older *tiled* family (``_frame_dft_kernel`` /
  ``_ola_dft_kernel`` with a basis tensor, FMA outer products or ``tl.dot``) remains for the
  shapes the unrolled kernels do not take (overlap-add with ``ceil(n_fft/hop) > 5`` or hop > 32)
  and as the measured comparison (``DENSE_KERNEL = "tiled"``).
* **fft** (large n_fft, where a dense N×N basis product loses to cuFFT at float32 accuracy): the
  transform is ``torch.fft`` and the fused framing (``_frame_kernel``) / overlap-add + envelope
  (``_ola_dft_kernel`` on frames) kernels sit around it. The forward of a composite n_fft takes the
  frame-free four-step kernel instead where it measured no slower (:mod:`nbxsig.kernels.fourstep`,
  ``stft_path`` / ``spectrogram_path``).

Backward passes are the same kernels with other bases: the gradient of the STFT is an overlap-add of
``Re(G·e^{+iθ})`` frames (forward basis transposed), the gradient of the iSTFT is a framing of
``grad / envelope`` followed by a DFT with the inverse basis.

Precision: the unrolled kernels are FMA in float32 at every matmul-precision setting. Where the
tiled kernels use a ``tl.dot`` it follows ``torch.get_float32_matmul_precision()``: "highest" uses
3×TF32 split products (float32 accuracy, ~1e-7 relative), "high"/"medium" a single TF32 product
(~1e-4..1e-3). Everything accumulates in float32; float16/bfloat16 signals are upcast on load.

``torch.library`` custom ops (``nbxsig::stft``, ``nbxsig::stft_backward``, ``nbxsig::istft``,
``nbxsig::istft_backward``) with fake implementations wrap the launchers, so ``torch.compile``
traces through; eager calls go through an ``autograd.Function`` directly (lower dispatch latency,
which matters for the batch-1 iSTFT).
"""

from __future__ import annotations

import math
import sys
import types
from functools import lru_cache

import numpy as np
import torch
import triton
import triton.language as tl

from ..dft import irdft_basis, rdft_basis
from ..reference.stft import istft_range
from . import _runtime
from ._launch import CachedLaunch
from ._runtime import cdiv, check_launchable, empty_output, next_pow2, over_grid_batch

#: Envelope threshold below which istft does not divide (torch.istft's NOLA threshold).
NOLA_EPS = 1e-11
# The same threshold as a compile-time constant: jitted kernels may only read constexpr globals.
_EPS = tl.constexpr(NOLA_EPS)
#: Largest n_fft computed with a dense DFT-basis product; above it torch.fft does the transform.
#: Measured on an H200 (docs/spectral.md, 64×160000 float32 stft): at n_fft=50 the fft path already
#: wins (253 µs vs 268 µs dense), at 64 and 128 the dense kernels lose by 10-100× (large tiles,
#: not investigated further), while at n_fft=20 the dense kernel is the fast one -- so the cut sits at 32.
DENSE_MAX_N = 32

# Launch tiles of the dense kernels, module-level so the benchmark can sweep them. Chosen by a sweep
# on an H200 at n_fft=20 hop=5, 64×240000 float32 (docs/spectral.md lists every point):
# forward -- FMA outer products, 64 frames, 2 warps: 209 µs (3×TF32 tl.dot, 128 frames, 4 warps:
# 216 µs; FMA with 64 frames on 4 warps takes ~860 µs); inverse -- 3×TF32 tl.dot, 64
# super-rows, 4 warps: 582 µs (FMA best 595 µs; batch 1: 16 µs).
FWD_BLOCK_T = 64
FWD_WARPS = 2
OLA_BLOCK_G = 64
OLA_WARPS = 4
# Up to this n_fft the dense kernels use FMA outer products instead of tl.dot: at n_fft=20 a
# tensor-core dot pads K=20→32 and F=11→16 and 3×TF32 triples it, while FMA wastes only the F
# padding and is exact float32 (no precision split needed). The inverse measured faster with the dot.
FWD_FMA_MAX_N = 32
OLA_FMA_MAX_N = 0
#: Dense-range kernel family: "unrolled" (the default: ``_stft_unrolled_kernel`` /
#: ``_ola_unrolled_kernel``, one frame or output row per thread, the basis as compile-time FMA
#: immediates) or "tiled" (``_frame_dft_kernel`` / ``_ola_dft_kernel`` with a basis tensor, FMA or
#: tl.dot by ``*_FMA_MAX_N``; kept as the measured comparison and for the tests).
DENSE_KERNEL = "unrolled"
# Tiles of the unrolled kernels (frames / output rows per program, warps), from a sweep on an H200
# at n_fft=20 hop=5, 64×240000 float32 (docs/spectral.md lists every point): forward 92-95 µs for
# 128/4, 256/4, 256/8, 512/8 (115 µs at 512/4: 152 registers); overlap-add flat at 209-212 µs over
# five tiles before the paired loads, 151-156 µs after them. A launch whose grid would have fewer
# than UNR_MIN_PROGRAMS programs (2 per SM of an H200) halves its tile, never below one row per
# thread: batch-1 istft GPU time 12.4 µs at 376 programs of 128 rows vs 30.9 µs at 1501 of 32.
UNR_FWD_BLOCK = 128
UNR_FWD_WARPS = 4
UNR_OLA_BLOCK = 128
UNR_OLA_WARPS = 4
UNR_MIN_PROGRAMS = 264
#: Overlap-add variants (see ``_ola_unrolled_kernel``): 8-byte (re, im) loads (measured 212 → 151 µs
#: at 64×240000); tile-assembled stores (measured no faster, 151 vs 151-154 µs: off by default).
UNR_OLA_PAIRED = True
UNR_OLA_TILE_STORE = False
#: Output rows per thread of the overlap-add (each frame loaded once per thread). H200, 64×240000,
#: GPU shared with a concurrent test run: 1 row 142.8 µs, 2 rows 166.0, 3 rows 194.3, 4 rows 228.5,
#: 2 rows with tile stores 156.1 µs -- more rows lose (registers: 128 at 4 rows), so 1.
UNR_OLA_ROWS = 1
#: Overlap-add frame by frame (``_ola_frames_kernel``: each frame's spectrum read and transformed
#: once, the overlap across threads through ``tl.gather``) instead of row by row
#: (``_ola_unrolled_kernel``: each row reads its ``ceil(n_fft/hop)`` frames, 4 at hop = n_fft/4).
#: H200, istft 64×240000 n_fft=20 hop=5, one process, two passes (torch.istft 881/864 µs): rows
#: 128/4 142.2/141.6 µs; frames 64/2 119.6/119.0, 128/4 123.7/123.3, 256/4 129.7/129.8, 256/8
#: 143.1/143.0; frames 128/4 with the spectrum loaded as one coalesced (frames, 32) tile split in
#: registers 195.3/194.8 (31 layout conversions through shared memory; not kept). Tile: frames per
#: program and warps.
UNR_OLA_FRAMES = True
UNR_OLA_FRAMES_BLOCK = 64
UNR_OLA_FRAMES_WARPS = 2
#: Write the istft gradient in the spectrum's own layout (see ``_IstftFunction``), so AccumulateGrad
#: adopts it instead of copying it (160 µs of GPU time at 64×240000, and the 61.6 MB the harness
#: counts as extra memory). On, with ``UNR_BWD_TILE_OUT``: H200 at 1e74c26 (istft forward+backward
#: n_fft=20 hop=5 64×240000, torch.profiler, 10 iterations): GPU time per iteration 372.1 µs off
#: (frame overlap-add 119.9, backward 89.6, AccumulateGrad copy 160.0, envelope 2.6) against 227.4 µs
#: on with tile stores (backward 104.6, no copy) and 430.5 µs on with per-bin stores (backward 307.3);
#: extra memory 61.6 → 0.0 MB. The wall-clock passes of that run are host-bound and do not separate
#: them (off 880 / 723 / 802 µs, on 859 / 771 / 908; torch 2284 / 2162 / 2289).
GRAD_IN_INPUT_LAYOUT = True
#: istft backward into a frequency-fastest gradient (torch.stft's layout): one coalesced tile store
#: per program row instead of F stores ``F·8`` bytes apart (one layout conversion through shared
#: memory, 8-byte stores; measured above).
UNR_BWD_TILE_OUT = True
# The unrolled overlap-add sums ceil(n_fft/hop) frames per output row and unrolls over hop; beyond
# these the code (and its compile time: ~80 s at n_fft=32, hop=1) grows too large, and the tiled
# kernel takes the call.
UNR_OLA_MAX_TERMS = 5
UNR_OLA_MAX_HOP = 32


#: Largest n_fft the unrolled kernels take (code size grows as n_fft²; the dense range is <= 32
#: anyway, this guards the benchmark's dense-path probes at n_fft 64/128).
UNR_MAX_N = 32


def _unrolled_stft(n_fft: int) -> bool:
    return DENSE_KERNEL == "unrolled" and n_fft <= UNR_MAX_N


def _unrolled_ola(n_fft: int, hop: int) -> bool:
    return _unrolled_stft(n_fft) and cdiv(n_fft, hop) <= UNR_OLA_MAX_TERMS and hop <= UNR_OLA_MAX_HOP


_PAD_MODES = {"constant": 0, "reflect": 1, "replicate": 2, "circular": 3}
_MODE_SCALED = 4  # istft backward: constant padding, each sample scaled by 1/envelope


def use_dense(n_fft: int) -> bool:
    """Whether ``n_fft`` is computed with the dense fused DFT kernels (else torch.fft + fused framing/OLA)."""
    return n_fft <= DENSE_MAX_N


def _precision() -> str:
    # Read at call time (never at import): the user may change it between calls.
    return "tf32x3" if torch.get_float32_matmul_precision() == "highest" else "tf32"


def _unrolled_block(block: int, rows: int, n_batch: int, warps: int) -> int:
    # Halve the tile while the grid is too small to occupy the GPU (batch-1 latency), but never
    # below one element per thread (smaller tiles leave lanes idle: measured 2.5× slower).
    while block > 32 * warps and cdiv(rows, block) * n_batch < UNR_MIN_PROGRAMS:
        block //= 2
    return block


def _stft_unrolled_config(n_batch, T, out_strides, *, n_fft, n_bins, kind, mode, output, has_window,
                          tile_out):  # fmt: skip
    """The unrolled stft kernel's launch: ``(grid, output strides as passed, constexprs, warps)``."""
    block = _unrolled_block(UNR_FWD_BLOCK, T, n_batch, UNR_FWD_WARPS)
    grid = (cdiv(T, block), n_batch)
    # A complex output's strides go in complex units (see the kernel); it is our own (B, F, T, 2)
    # allocation with (re, im) pairs innermost, so every real stride but the last is even.
    so = tuple(out_strides[:3]) if output else tuple(s // 2 for s in out_strides[:3])
    constexprs = dict(N=n_fft, F=n_bins, KIND=kind, MODE=mode, HAS_WINDOW=has_window, OUTPUT=output,
                      BLOCK_T=block)  # fmt: skip
    if tile_out:
        constexprs.update(TILE_OUT=True, F_P2=next_pow2(n_bins), LOG2_F=next_pow2(n_bins).bit_length() - 1)
    return grid, so, constexprs, UNR_FWD_WARPS


def _launch_stft_unrolled(src, strides, L, pad, hop, T, window, inv, out, out_strides, scale, power, *,
                          n_fft, n_bins, kind, mode, output, tile_out=False):  # fmt: skip
    grid, so, constexprs, warps = _stft_unrolled_config(
        src.shape[0], T, out_strides, n_fft=n_fft, n_bins=n_bins, kind=kind, mode=mode, output=output,
        has_window=window is not None, tile_out=tile_out,
    )  # fmt: skip
    win = window if window is not None else out
    args = (src, strides[0], strides[1], L, pad, hop, T, win, inv if inv is not None else win, out,
            *so, scale, power)  # fmt: skip
    _stft_unrolled_launch(grid, args, constexprs, warps)


@lru_cache(maxsize=64)
def _basis(n_fft: int, kind: str, device: torch.device) -> torch.Tensor:
    """Cached float32 ``(2, F, n_fft)`` basis: "fwd" one-sided, "fwd2" two-sided, "inv" inverse real DFT."""
    if kind == "inv":
        return irdft_basis(n_fft, device=device).contiguous()
    return rdft_basis(n_fft, onesided=kind == "fwd", device=device).contiguous()


@lru_cache(maxsize=64)
def _hermitian_scale(n_fft: int, device: torch.device) -> torch.Tensor:
    # w_k / N of an inverse real DFT: the gradient of irfft w.r.t. its input is rfft(g)·w_k/N.
    # float32 whatever torch's default dtype: one built under a float64 default stayed cached and made
    # every later gradient complex128, against the custom op's float32 fake.
    w = torch.full((n_fft // 2 + 1,), 2.0 / n_fft, dtype=torch.float32, device=device)
    w[0] = 1.0 / n_fft
    if n_fft % 2 == 0:
        w[-1] = 1.0 / n_fft
    return w


# ----------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------


@triton.jit
def _load_signal(src_ptr, row, stride_l, p, pad, L, mask, inv_ptr, MODE: tl.constexpr):
    """Sample ``p`` of the padded signal (``j = p - pad`` in the original), by index mapping.

    MODE 0 constant (zeros), 1 reflect (no edge repeat; pad < L), 2 replicate, 3 circular
    (pad <= L), 4 constant and multiplied by ``inv[p]`` (istft backward: grad / envelope).
    """
    j = p - pad
    if MODE == 1:
        idx = tl.where(j < 0, -j, j)
        idx = tl.where(idx >= L, 2 * (L - 1) - idx, idx)
        ok = mask
    elif MODE == 2:
        idx = tl.minimum(tl.maximum(j, 0), L - 1)
        ok = mask
    elif MODE == 3:
        idx = tl.where(j < 0, j + L, j)
        idx = tl.where(idx >= L, idx - L, idx)
        ok = mask
    else:
        idx = j
        ok = mask & (j >= 0) & (j < L)
    v = tl.load(src_ptr + row + idx.to(tl.int64) * stride_l, mask=ok, other=0.0).to(tl.float32)
    if MODE == 4:
        v = v * tl.load(inv_ptr + p, mask=ok, other=0.0)
    return v


@triton.jit
def _load_window(win_ptr, n, valid, HAS_WINDOW: tl.constexpr):
    if HAS_WINDOW:
        w = tl.load(win_ptr + n, mask=valid, other=0.0).to(tl.float32)
    else:
        w = tl.where(valid, 1.0, 0.0)
    return w


@triton.jit
def _frame_dft_kernel(
    src_ptr,
    stride_sb,
    stride_sl,
    L,
    pad,
    hop,
    T,
    N: tl.constexpr,
    F,
    win_ptr,
    inv_ptr,
    basis_ptr,
    out_ptr,
    stride_ob,
    stride_of,
    stride_ot,
    scale,
    power,
    MODE: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    OUTPUT: tl.constexpr,
    PRECISION: tl.constexpr,
    USE_FMA: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_F: tl.constexpr,
):
    """``X[b, f, t] = scale · Σ_n s_pad[b, t·hop + n] · w[n] · (B[0, f, n] + i B[1, f, n])``.

    OUTPUT 0: complex interleaved into a real ``(B, F, T, 2)`` view; 1: ``|X|²``; 2: ``|X|^power``.
    """
    pid_t = tl.program_id(0)
    pid_f = tl.program_id(1)
    b = tl.program_id(2).to(tl.int64)
    t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    f = pid_f * BLOCK_F + tl.arange(0, BLOCK_F)
    row = b * stride_sb
    acc_re = tl.zeros((BLOCK_T, BLOCK_F), dtype=tl.float32)
    acc_im = tl.zeros((BLOCK_T, BLOCK_F), dtype=tl.float32)
    if USE_FMA:
        # One outer product per frame sample n: the (BLOCK_T,) column of frames times basis row n.
        t_ok = t < T
        f_ok = f < F
        for n in tl.static_range(N):
            v = _load_signal(src_ptr, row, stride_sl, t * hop + n, pad, L, t_ok, inv_ptr, MODE)
            if HAS_WINDOW:
                v = v * tl.load(win_ptr + n).to(tl.float32)
            b_re = tl.load(basis_ptr + f * N + n, mask=f_ok, other=0.0)
            b_im = tl.load(basis_ptr + F * N + f * N + n, mask=f_ok, other=0.0)
            acc_re += v[:, None] * b_re[None, :]
            acc_im += v[:, None] * b_im[None, :]
    if not USE_FMA:
        for k0 in range(0, N, BLOCK_K):
            n = k0 + tl.arange(0, BLOCK_K)
            n_ok = n < N
            p = t[:, None] * hop + n[None, :]
            mask = (t[:, None] < T) & n_ok[None, :]
            frame = _load_signal(src_ptr, row, stride_sl, p, pad, L, mask, inv_ptr, MODE)
            frame = frame * _load_window(win_ptr, n, n_ok, HAS_WINDOW)[None, :]
            b_mask = n_ok[:, None] & (f[None, :] < F)
            b_off = f[None, :] * N + n[:, None]
            b_re = tl.load(basis_ptr + b_off, mask=b_mask, other=0.0)
            b_im = tl.load(basis_ptr + F * N + b_off, mask=b_mask, other=0.0)
            acc_re = tl.dot(frame, b_re, acc_re, input_precision=PRECISION)
            acc_im = tl.dot(frame, b_im, acc_im, input_precision=PRECISION)
    acc_re = acc_re * scale
    acc_im = acc_im * scale
    o_mask = (t[:, None] < T) & (f[None, :] < F)
    o_off = b * stride_ob + f[None, :] * stride_of + t[:, None] * stride_ot
    if OUTPUT == 0:
        # Interleave (re, im) so each (f, t) pair is one 8-byte store of the complex64 output.
        both = tl.join(acc_re, acc_im)
        c = tl.arange(0, 2)
        tl.store(out_ptr + o_off[:, :, None] + c[None, None, :], both, mask=o_mask[:, :, None])
    else:
        mag2 = acc_re * acc_re + acc_im * acc_im
        if OUTPUT == 2:
            mag2 = tl.exp2(tl.log2(mag2) * (0.5 * power))  # log2(0) = -inf → 0 for power > 0
        tl.store(out_ptr + o_off, mag2, mask=o_mask)


@triton.constexpr_function
def _coef(kind, part, n_fft, k, n):
    """Basis entry ``(k, n)`` as a compile-time float32: it becomes an FMA immediate, no load.

    kind 0: the forward basis (part 0 ``cos``, part 1 ``-sin``) of ``rdft_basis``; kind 1: the
    inverse real-DFT basis of ``irdft_basis`` (Hermitian weight and ``1/N`` folded in). Angles are
    reduced ``k·n mod N`` in integers first, as in :mod:`nbxsig.reference.dft`.
    """
    angle = ((k * n) % n_fft) * (2.0 * math.pi / n_fft)
    v = math.cos(angle) if part == 0 else -math.sin(angle)
    if kind == 1:
        weight = 1.0 if k == 0 or 2 * k == n_fft else 2.0
        v = v * weight / n_fft
    return float(np.float32(v))


@triton.constexpr_function
def _tiled_complex(output, tile):
    return output == 0 and bool(tile)  # one constexpr: an `and` in a kernel's `if` is not folded


@triton.jit
def _stft_unrolled_kernel(
    src_ptr,
    stride_sb,
    stride_sl,
    L,
    pad,
    hop,
    T,
    win_ptr,
    inv_ptr,
    out_ptr,
    stride_ob,
    stride_of,
    stride_ot,
    scale,
    power,
    N: tl.constexpr,
    F: tl.constexpr,
    KIND: tl.constexpr,
    MODE: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    OUTPUT: tl.constexpr,
    BLOCK_T: tl.constexpr,
    TILE_OUT: tl.constexpr = False,
    F_P2: tl.constexpr = 1,
    LOG2_F: tl.constexpr = 0,
):
    """``X[b, k, t] = scale · Σ_n s_pad[b, t·hop + n] · w[n] · (C[k, n] + i S[k, n])`` for small N.

    Each thread owns whole frames (a 1-D tile of ``BLOCK_T`` frames, no padding of F or N). The basis
    is unrolled as compile-time immediates (``_coef``; KIND 0 forward, 1 inverse for the istft
    gradient) and its symmetry halves the work: ``C[k, N-n] = C[k, n]``, ``S[k, N-n] = -S[k, n]``,
    so ``Re = Σ C·(s_n + s_{N-n})`` and ``Im = Σ S·(s_n - s_{N-n})`` over ``n <= N/2``.
    Each bin's row is one coalesced store: interleaved (re, im) pairs (OUTPUT 0), ``|X|²`` (1) or
    ``|X|^power`` (2); ``stride_o*`` count complex elements for OUTPUT 0. MODE as in ``_load_signal``.
    TILE_OUT (OUTPUT 0, for a frequency-fastest output such as torch.stft's layout: ``stride_of`` must
    be 1, a frame's F pairs contiguous): the frame's bins are joined into a ``(BLOCK_T, 2·F_P2)`` tile
    and stored at once, which the compiler re-lays out so that consecutive lanes write consecutive
    floats, instead of F stores whose lanes sit ``F·8`` bytes apart.
    """
    pid = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    t = pid * BLOCK_T + tl.arange(0, BLOCK_T)
    t_ok = t < T
    row = b * stride_sb
    base = t * hop
    # Frame samples, windowed: s[n] for n in 0..N-1 (a tuple unrolled at compile time).
    s = ()
    for n in tl.static_range(N):
        v = _load_signal(src_ptr, row, stride_sl, base + n, pad, L, t_ok, inv_ptr, MODE)
        if HAS_WINDOW:
            v = v * tl.load(win_ptr + n).to(tl.float32)
        s = s + (v,)
    # Even and odd parts: e[m] = s[m] + s[N-m], o[m] = s[m] - s[N-m] for 1 <= m < N/2;
    # e[0] = s[0] and, for even N, e[N/2] = s[N/2] (their sine terms vanish).
    e = (s[0],)
    o = (s[0],)  # placeholder at m = 0, never used
    for m in tl.static_range(1, (N + 1) // 2):
        e = e + (s[m] + s[N - m],)
        o = o + (s[m] - s[N - m],)
    if N % 2 == 0:
        e = e + (s[N // 2],)
    c2 = tl.arange(0, 2)
    res = ()
    ims = ()
    for k in tl.static_range(F):
        re = e[0] * _coef(KIND, 0, N, k, 0)
        for m in tl.static_range(1, N // 2 + 1):
            cr = _coef(KIND, 0, N, k, m)
            if cr != 0.0:
                re += e[m] * cr
        im = tl.zeros((BLOCK_T,), dtype=tl.float32)
        for m in tl.static_range(1, (N + 1) // 2):
            ci = _coef(KIND, 1, N, k, m)
            if ci != 0.0:
                im += o[m] * ci
        re = re * scale
        im = im * scale
        if _tiled_complex(OUTPUT, TILE_OUT):
            res = res + (re,)
            ims = ims + (im,)
        elif OUTPUT == 0:
            # (re, im) side by side in one thread, one 8-byte store per bin (256 B per warp). The
            # strides arrive in complex units and are doubled here, so the compiler can prove the
            # 8-byte alignment that the vector store needs.
            both = tl.join(re, im)
            pair = 2 * (b * stride_ob + k * stride_of + t.to(tl.int64) * stride_ot)
            tl.store(out_ptr + pair[:, None] + c2[None, :], both, mask=t_ok[:, None])
        else:
            mag2 = re * re + im * im
            if OUTPUT == 2:
                mag2 = tl.exp2(tl.log2(mag2) * (0.5 * power))  # log2(0) = -inf → 0 for power > 0
            off = b * stride_ob + k * stride_of + t.to(tl.int64) * stride_ot
            tl.store(out_ptr + off, mag2, mask=t_ok)
    if _tiled_complex(OUTPUT, TILE_OUT):
        zero = tl.zeros((BLOCK_T,), dtype=tl.float32)
        for _k in tl.static_range(F, F_P2):
            res = res + (zero,)
            ims = ims + (zero,)
        # One row of 2·F_P2 floats per frame (the frame's pairs are contiguous: stride_of = 1),
        # addressed as a flat run so the compiler sees 2·F contiguous floats per row and gives
        # consecutive lanes consecutive floats (a re-layout through shared memory).
        both = tl.join(_tree_join(res, F_P2, LOG2_F), _tree_join(ims, F_P2, LOG2_F))
        both = tl.reshape(both, (BLOCK_T, 2 * F_P2))
        jj = tl.arange(0, 2 * F_P2)
        row = 2 * (b * stride_ob + t.to(tl.int64) * stride_ot)
        tl.store(out_ptr + row[:, None] + jj[None, :], both, mask=t_ok[:, None] & (jj < 2 * F)[None, :])


@triton.constexpr_function
def _ola_sample(i, j, hop, n_terms, n_fft):
    """Frame sample ``n`` that a thread's output slot ``i`` (its row ``i // hop``, phase ``i % hop``)
    receives from the thread's ``j``-th frame (frame row ``j - (n_terms - 1)``), or -1 for none.
    Formed here: the interpreter turns in-kernel int arithmetic into tensors."""
    q = i // hop - j + n_terms - 1
    n = q * hop + i % hop
    return n if 0 <= q < n_terms and n < n_fft else -1


@triton.constexpr_function
def _ola_needs(m, j, hop, n_terms, n_fft, rows):
    # Whether frame j of a thread contributes its sample m or n_fft - m to one of the thread's rows.
    return any(n < n_fft and 0 <= j - (n_terms - 1) + n // hop < rows for n in (m, n_fft - m))


@triton.constexpr_function
def _ola_count(rows, n_terms):
    return rows + n_terms - 1


@triton.constexpr_function
def _ola_first(j, n_terms):
    return j - (n_terms - 1)


@triton.constexpr_function
def _mirror(n_fft, n):
    # The symmetric partner of sample n (cos(θ·(N-n)) = cos(θn), sin(θ·(N-n)) = -sin(θn)).
    return n_fft - n if n > n_fft // 2 else n


@triton.constexpr_function
def _ceil_div(a, b):
    return -(-a // b)


@triton.constexpr_function
def _product(a, b):
    return a * b


@triton.constexpr_function
def _n_even(n_fft):
    return n_fft // 2 + 1  # samples 0..N/2, each standing for itself and its mirror N - m


@triton.constexpr_function
def _has_sine(m, n_fft):
    return m != 0 and 2 * m != n_fft  # sin(0) = sin(πk) = 0


@triton.constexpr_function
def _upper(n, n_fft):
    return 2 * n > n_fft


@triton.constexpr_function
def _half(n, level):
    return n >> (level + 1)


# stft forward, istft backward (n_fft <= 32): small calls are host-bound, see CachedLaunch.
_stft_unrolled_launch = CachedLaunch(_stft_unrolled_kernel)


@triton.jit
def _tree_join(vals, WIDTH: tl.constexpr, LOG2: tl.constexpr):
    """``WIDTH = 2**LOG2`` per-thread vectors ``(B,)`` → one ``(B, WIDTH)`` tile whose column c is
    ``vals[c]`` (each join adds the next lower bit of c as a new minor dimension)."""
    for level in tl.static_range(LOG2):
        nxt = ()
        for i in tl.static_range(_half(WIDTH, level)):
            nxt = nxt + (tl.join(vals[i], vals[i + _half(WIDTH, level)]),)
        vals = nxt
    return tl.reshape(vals[0], (vals[0].shape[0], WIDTH))


@triton.jit
def _ola_add(a, ev, od, w, N: tl.constexpr, n: tl.constexpr):
    # Adds frame sample n, windowed, formed from the even/odd sums.
    m: tl.constexpr = _mirror(N, n)
    y = ev[m] - od[m] if _upper(n, N) else ev[m] + od[m]
    return a + y * w[n]


@triton.jit
def _square(w, n: tl.constexpr):
    return w[n] * w[n]


@triton.constexpr_function
def _in_chunk(q, c, hop, n_fft):
    return c < hop and q * hop + c < n_fft


@triton.constexpr_function
def _chunk_sample(q, c, hop):
    return q * hop + c


@triton.jit
def _load_spectrum(src_ptr, b, t, t_ok, s0, s1, s2, s3, N: tl.constexpr, F: tl.constexpr,
                   PAIRED: tl.constexpr):  # fmt: skip
    """Frames ``t`` of a real-layout spectrum (strides ``s0..s3`` = b, f, t, re/im; zeros where not
    ``t_ok``) as ``F``-tuples of ``(Re X_k, Im X_k)`` vectors. PAIRED: ``s0..s2`` count complex
    elements and each (re, im) pair is one 8-byte load."""
    c2 = tl.arange(0, 2)
    x_re = ()
    x_im = ()
    for k in tl.static_range(F):
        if PAIRED:
            pair = 2 * (b * s0 + k * s1 + t.to(tl.int64) * s2)
            xy = tl.load(src_ptr + pair[:, None] + c2[None, :], mask=t_ok[:, None], other=0.0)
            re, im = tl.split(xy.to(tl.float32))
            x_re = x_re + (re,)
            x_im = x_im + (im,)
        else:
            off = b * s0 + k * s1 + t.to(tl.int64) * s2
            x_re = x_re + (tl.load(src_ptr + off, mask=t_ok, other=0.0).to(tl.float32),)
            if k == 0 or 2 * k == N:
                x_im = x_im + (x_re[k],)  # S[k, n] = 0: never read (irfft ignores these parts)
            else:
                x_im = x_im + (tl.load(src_ptr + off + s3, mask=t_ok, other=0.0).to(tl.float32),)
    return x_re, x_im


@triton.jit
def _even_odd(x_re, x_im, m: tl.constexpr, zero, N: tl.constexpr, F: tl.constexpr, KIND: tl.constexpr):
    """``(Σ_k Re X_k·C[k, m], Σ_k Im X_k·S[k, m])`` for a sample ``m <= N/2``: frame sample ``m`` is
    their sum and sample ``N - m`` their difference (``C`` even, ``S`` odd in n)."""
    e = zero
    o = zero
    for k in tl.static_range(F):
        cr = _coef(KIND, 0, N, k, m)
        if cr != 0.0:
            e += x_re[k] * cr
        if _has_sine(m, N):
            ci = _coef(KIND, 1, N, k, m)
            if ci != 0.0:
                o += x_im[k] * ci
    return e, o


@triton.jit
def _ola_unrolled_kernel(
    src_ptr,
    s0,
    s1,
    s2,
    s3,
    win_ptr,
    out_ptr,
    stride_ob,
    T,
    start,
    n_out,
    u_begin,
    scale,
    N: tl.constexpr,
    F: tl.constexpr,
    HOP: tl.constexpr,
    KIND: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    DIVIDE: tl.constexpr,
    PAIRED: tl.constexpr,
    TILE_STORE: tl.constexpr,
    OUT_P2: tl.constexpr,
    LOG2_OUT: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK_U: tl.constexpr,
):
    """Overlap-add with the inverse transform fused in, for small N; each thread owns ROWS output rows.

    Output row ``u`` holds the OLA samples ``p = u·HOP + r`` (``r < HOP``); frame ``t = u - q``
    covers them at ``n = q·HOP + r`` for ``q < Q = ceil(N/HOP)``, so
    ``y[p] = scale · Σ_q w[n] · Σ_k (Re X[k, t]·C[k, n] + Im X[k, t]·S[k, n])`` and, with DIVIDE,
    ``y[p] /= Σ_q w[n]²`` (valid frames only) where that exceeds NOLA_EPS. The basis (KIND 1 inverse
    real DFT for istft, KIND 0 forward basis transposed for the stft gradient) is unrolled as
    compile-time immediates; its symmetry in n (``C[k, N-n] = C[k, n]``, ``S[k, N-n] = -S[k, n]``)
    halves the FMAs: samples n and N-n share the sums ``Σ Re·C`` and ``Σ Im·S``.

    A thread owns rows ``u0 .. u0 + ROWS - 1`` and walks the ``ROWS + Q - 1`` frames covering them,
    loading each frame once and adding the samples it gives to the rows it covers (ROWS = 1 re-reads
    each frame Q times through L1, one per row; larger ROWS cut that to ``(ROWS + Q - 1) / ROWS``).
    The spectrum ``src`` is read in its real layout (strides ``s0..s3`` = b, f, t, re/im). Output
    ``o = p - start`` is written for ``0 <= o < n_out`` (zeros past the last frame: how a longer
    ``length`` pads). Deterministic.

    PAIRED: ``s0..s2`` count complex elements (the layout's real strides are all even, ``s3 = 1``),
    so each (re, im) pair is one 8-byte load. TILE_STORE: a thread's
    ``ROWS·HOP`` consecutive samples are joined into a ``(BLOCK_U, OUT_P2)`` tile and stored at once
    (the compiler re-lays it out so consecutive lanes store consecutive samples) instead of
    ``ROWS·HOP`` stores strided by ``ROWS·HOP`` samples.
    """
    pid = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    u0 = u_begin + (pid * BLOCK_U + tl.arange(0, BLOCK_U)) * ROWS
    Q: tl.constexpr = _ceil_div(N, HOP)
    SLOTS: tl.constexpr = _product(ROWS, HOP)
    zero = tl.zeros((BLOCK_U,), dtype=tl.float32)
    w = ()
    for n in tl.static_range(N):
        if HAS_WINDOW:  # noqa: SIM108 (a kernel's constexpr branch, not a value choice)
            w = w + (tl.load(win_ptr + n).to(tl.float32),)
        else:
            w = w + (1.0,)
    acc = ()
    for _i in tl.static_range(SLOTS):
        acc = acc + (zero,)
    for j in tl.static_range(_ola_count(ROWS, Q)):
        t = u0 + _ola_first(j, Q)
        t_ok = (t >= 0) & (t < T)
        x_re, x_im = _load_spectrum(src_ptr, b, t, t_ok, s0, s1, s2, s3, N, F, PAIRED)
        # Even and odd sums for the samples m <= N/2 this frame gives (placeholders elsewhere).
        ev = ()
        od = ()
        for m in tl.static_range(_n_even(N)):
            if _ola_needs(m, j, HOP, Q, N, ROWS):
                e, o = _even_odd(x_re, x_im, m, zero, N, F, KIND)
            else:
                e, o = zero, zero
            ev = ev + (e,)
            od = od + (o,)
        new_acc = ()
        for i in tl.static_range(SLOTS):
            a = acc[i]
            if _ola_sample(i, j, HOP, Q, N) >= 0:
                a = _ola_add(a, ev, od, w, N, _ola_sample(i, j, HOP, Q, N))
            new_acc = new_acc + (a,)
        acc = new_acc
    ys = ()
    for i in tl.static_range(SLOTS):
        y = acc[i] * scale
        if DIVIDE:
            # The envelope Σ w[n]² over the frames that exist, formed here rather than carried
            # through the loop (fewer live registers).
            env = zero
            for j in tl.static_range(_ola_count(ROWS, Q)):
                if _ola_sample(i, j, HOP, Q, N) >= 0:
                    t = u0 + _ola_first(j, Q)
                    env += tl.where((t >= 0) & (t < T), _square(w, _ola_sample(i, j, HOP, Q, N)), 0.0)
            ok = env > _EPS
            y = tl.where(ok, y / tl.where(ok, env, 1.0), y)
        ys = ys + (y,)
    ob = out_ptr + b * stride_ob
    o0 = u0.to(tl.int64) * HOP - start
    if TILE_STORE:
        for _i in tl.static_range(SLOTS, OUT_P2):
            ys = ys + (zero,)
        ii = tl.arange(0, OUT_P2)
        o2 = o0[:, None] + ii[None, :]
        tile = _tree_join(ys, OUT_P2, LOG2_OUT)
        tl.store(ob + o2, tile, mask=(ii[None, :] < SLOTS) & (o2 >= 0) & (o2 < n_out))
    else:
        for i in tl.static_range(SLOTS):
            o = o0 + i
            tl.store(ob + o, ys[i], mask=(o >= 0) & (o < n_out))


_ola_launch = CachedLaunch(_ola_unrolled_kernel)


@triton.jit
def _ola_frames_kernel(
    src_ptr,
    s0,
    s1,
    s2,
    s3,
    win_ptr,
    out_ptr,
    stride_ob,
    T,
    start,
    n_out,
    u_begin,
    scale,
    N: tl.constexpr,
    F: tl.constexpr,
    HOP: tl.constexpr,
    KIND: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    DIVIDE: tl.constexpr,
    PAIRED: tl.constexpr,
    HOP_P2: tl.constexpr,
    LOG2_HOP: tl.constexpr,
    BLOCK_T: tl.constexpr,
):
    """The overlap-add of ``_ola_unrolled_kernel`` (same arguments and result), frame by frame:
    each thread owns one frame, loads its spectrum once and forms its ``N`` samples; the overlap-add
    then shifts the frames' hop-long chunks across threads (``tl.gather``: the compiler converts the
    chunk tiles through shared memory to a layout where the shift stays within a warp, then shuffles).

    Thread ``i`` of a program owns frame ``t = u - (Q - 1) + i`` (``u`` the program's first output
    row, ``Q = ceil(N/HOP)``); its chunk ``q`` (samples ``q·HOP + r``, ``r < HOP``, as a
    ``(BLOCK_T, HOP_P2)`` tile) lands on output row ``t + q``. Row ``t`` sums chunk ``q`` of frame
    ``t - q``, i.e. of thread ``i - q``; the first ``Q - 1`` threads' rows need frames of the
    previous program, so programs overlap by ``Q - 1`` frames and those rows are left to it. Against
    the row-by-row kernel each frame's spectrum is read once instead of ``Q`` times and each
    even/odd sum is formed once (the row kernel forms it in each of the ``Q`` rows that use it).
    """
    pid = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    Q: tl.constexpr = _ceil_div(N, HOP)
    i = tl.arange(0, BLOCK_T)
    t = u_begin + pid * (BLOCK_T - (Q - 1)) + i - (Q - 1)
    t_ok = (t >= 0) & (t < T)
    zero = tl.zeros((BLOCK_T,), dtype=tl.float32)
    x_re, x_im = _load_spectrum(src_ptr, b, t, t_ok, s0, s1, s2, s3, N, F, PAIRED)
    ev = ()
    od = ()
    for m in tl.static_range(_n_even(N)):
        e, o = _even_odd(x_re, x_im, m, zero, N, F, KIND)
        ev = ev + (e,)
        od = od + (o,)
    w = ()
    for n in tl.static_range(N):
        if HAS_WINDOW:  # noqa: SIM108 (a kernel's constexpr branch, not a value choice)
            w = w + (tl.load(win_ptr + n).to(tl.float32),)
        else:
            w = w + (1.0,)
    r = tl.arange(0, HOP_P2)
    acc = tl.zeros((BLOCK_T, HOP_P2), dtype=tl.float32)
    for q in tl.static_range(Q):
        vals = ()
        for c in tl.static_range(HOP_P2):
            if _in_chunk(q, c, HOP, N):
                vals = vals + (_ola_add(zero, ev, od, w, N, _chunk_sample(q, c, HOP)),)
            else:
                vals = vals + (zero,)
        chunk = _tree_join(vals, HOP_P2, LOG2_HOP)
        if q == 0:
            acc += chunk
        else:
            src = tl.broadcast_to(tl.maximum(i - q, 0)[:, None], (BLOCK_T, HOP_P2))
            acc += tl.gather(chunk, src, axis=0)
    y = acc * scale
    if DIVIDE:
        # The envelope Σ w[n]² over the frames of row t that exist.
        env = tl.zeros((BLOCK_T, HOP_P2), dtype=tl.float32)
        for q in tl.static_range(Q):
            n = q * HOP + r
            n_ok = (r < HOP) & (n < N)
            wq = _load_window(win_ptr, n, n_ok, HAS_WINDOW)
            valid = (t - q >= 0) & (t - q < T)
            env += tl.where(valid[:, None], (wq * wq)[None, :], 0.0)
        ok = env > _EPS
        y = tl.where(ok, y / tl.where(ok, env, 1.0), y)
    o = t.to(tl.int64)[:, None] * HOP + r[None, :] - start
    mask = (i >= Q - 1)[:, None] & (r < HOP)[None, :] & (o >= 0) & (o < n_out)
    tl.store(out_ptr + b * stride_ob + o, y, mask=mask)


_ola_frames_launch = CachedLaunch(_ola_frames_kernel)


@triton.jit
def _frame_kernel(
    src_ptr,
    stride_sb,
    stride_sl,
    L,
    pad,
    hop,
    T,
    N,
    win_ptr,
    inv_ptr,
    out_ptr,
    scale,
    MODE: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Windowed frames ``out[b, t, n] = scale · w[n] · s_pad[b, t·hop + n]`` (contiguous ``(B, T, N)``),
    the input of torch.fft on the large-n_fft path. Grid axis 0 holds the (frame block, sample block)
    pairs, sample blocks fastest: n_fft / BLOCK_N blocks on an axis of their own passed CUDA's 65535
    from n_fft ≈ 16.8M."""
    n_blocks = tl.cdiv(N, BLOCK_N)
    t = (tl.program_id(0) // n_blocks) * BLOCK_T + tl.arange(0, BLOCK_T)
    n = (tl.program_id(0) % n_blocks) * BLOCK_N + tl.arange(0, BLOCK_N)
    b = tl.program_id(2).to(tl.int64)
    n_ok = n < N
    mask = (t[:, None] < T) & n_ok[None, :]
    p = t[:, None] * hop + n[None, :]
    v = _load_signal(src_ptr, b * stride_sb, stride_sl, p, pad, L, mask, inv_ptr, MODE)
    v = v * (_load_window(win_ptr, n, n_ok, HAS_WINDOW) * scale)[None, :]
    off = (b * T + t[:, None]) * N + n[None, :]
    tl.store(out_ptr + off, v, mask=mask)


@triton.jit
def _ola_dft_kernel(
    src_ptr,
    s0,
    s1,
    s2,
    s3,
    basis_ptr,
    win_ptr,
    out_ptr,
    stride_ob,
    N,
    F: tl.constexpr,
    hop,
    T,
    start,
    n_out,
    g_begin,
    scale,
    SOURCE: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    DIVIDE: tl.constexpr,
    PRECISION: tl.constexpr,
    USE_FMA: tl.constexpr,
    S: tl.constexpr,
    N_TERMS: tl.constexpr,
    BLOCK_G: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_F: tl.constexpr,
):
    """Overlap-add with the inverse transform fused in; each program owns output samples.

    ``y[p] = scale · Σ_t w[n] · frame_t[n]`` with ``n = p - t·hop``, and with DIVIDE
    ``y[p] /= Σ_t w[n]²`` where that exceeds NOLA_EPS. ``frame_t[n]`` is
    SOURCE 0: ``Σ_f Re X[b,f,t] B[0,f,n] + Im X[b,f,t] B[1,f,n]`` (``src`` real layout, strides
    ``s0..s3`` = b, f, t, re/im) or SOURCE 1: ``src[b, t, n]`` (strides ``s0..s2`` = b, t, n).

    Tiling: a program row ``g`` covers ``S`` hops (``S·hop <= BLOCK_C`` samples), so the tl.dot's
    N dimension (>= 16) is filled with S frames' worth of samples even for hop=5. Output sample
    ``p = g·S·hop + c`` receives frame ``t = g·S + d`` at ``n = c - d·hop`` for ``d`` from ``S-1``
    down to ``-(ceil(N/hop)-1)``; each ``d`` is one rank-F product of the frames' spectra with the
    basis columns ``n(c)``. Output ``o = p - start`` is written for ``0 <= o < n_out`` (zeros past
    the last frame, which is how a longer ``length`` pads).
    """
    pid = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    g = g_begin + pid * BLOCK_G + tl.arange(0, BLOCK_G)
    c = tl.arange(0, BLOCK_C)
    c_ok = c < S * hop
    acc = tl.zeros((BLOCK_G, BLOCK_C), dtype=tl.float32)
    env = tl.zeros((BLOCK_G, BLOCK_C), dtype=tl.float32)
    fk = tl.arange(0, BLOCK_F)
    # Constexpr trip counts: the interpreter cannot loop to a runtime bound, and the GPU gets a
    # specialised loop per (n_fft, hop) -- a handful of configurations per application.
    for j in range(0, N_TERMS):
        d = S - 1 - j
        t = g * S + d
        n = c - d * hop
        n_ok = c_ok & (n >= 0) & (n < N)
        t_ok = (t >= 0) & (t < T)
        w = _load_window(win_ptr, n, n_ok, HAS_WINDOW)
        if SOURCE == 0 and USE_FMA:
            for k in tl.static_range(F):
                x_off = b * s0 + k * s1 + t * s2
                x_re = tl.load(src_ptr + x_off, mask=t_ok, other=0.0).to(tl.float32)
                x_im = tl.load(src_ptr + x_off + s3, mask=t_ok, other=0.0).to(tl.float32)
                b_re = tl.load(basis_ptr + k * N + n, mask=n_ok, other=0.0) * w
                b_im = tl.load(basis_ptr + F * N + k * N + n, mask=n_ok, other=0.0) * w
                acc += x_re[:, None] * b_re[None, :] + x_im[:, None] * b_im[None, :]
        elif SOURCE == 0:
            x_mask = t_ok[:, None] & (fk[None, :] < F)
            x_off = b * s0 + fk[None, :] * s1 + t[:, None] * s2
            x_re = tl.load(src_ptr + x_off, mask=x_mask, other=0.0).to(tl.float32)
            x_im = tl.load(src_ptr + x_off + s3, mask=x_mask, other=0.0).to(tl.float32)
            b_mask = (fk[:, None] < F) & n_ok[None, :]
            b_off = fk[:, None] * N + n[None, :]
            b_re = tl.load(basis_ptr + b_off, mask=b_mask, other=0.0) * w[None, :]
            b_im = tl.load(basis_ptr + F * N + b_off, mask=b_mask, other=0.0) * w[None, :]
            acc = tl.dot(x_re, b_re, acc, input_precision=PRECISION)
            acc = tl.dot(x_im, b_im, acc, input_precision=PRECISION)
        else:
            m = t_ok[:, None] & n_ok[None, :]
            v = tl.load(src_ptr + b * s0 + t[:, None] * s1 + n[None, :] * s2, mask=m, other=0.0)
            acc += v.to(tl.float32) * w[None, :]
        if DIVIDE:
            env += tl.where(t_ok[:, None] & n_ok[None, :], (w * w)[None, :], 0.0)
    acc = acc * scale
    if DIVIDE:
        ok = env > _EPS
        acc = tl.where(ok, acc / tl.where(ok, env, 1.0), acc)
    o = g[:, None] * (S * hop) + c[None, :] - start
    o_mask = c_ok[None, :] & (o >= 0) & (o < n_out)
    tl.store(out_ptr + b * stride_ob + o, acc, mask=o_mask)


@triton.jit
def _inv_envelope_kernel(
    win_ptr, out_ptr, N, hop, T, total, N_TERMS: tl.constexpr, HAS_WINDOW: tl.constexpr, BLOCK: tl.constexpr
):
    """``out[p] = 1 / Σ_t w²[p - t·hop]`` where the sum exceeds NOLA_EPS, else 1."""
    p = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = p < total
    q = p // hop
    r = p - q * hop
    env = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in range(0, N_TERMS):
        t = q - i
        n = i * hop + r
        ok = m & (t >= 0) & (t < T) & (n < N)
        w = _load_window(win_ptr, n, ok, HAS_WINDOW)
        env += w * w
    inv = tl.where(env > _EPS, 1.0 / tl.where(env > _EPS, env, 1.0), 1.0)
    tl.store(out_ptr + p, inv, mask=m)


_envelope_launch = CachedLaunch(_inv_envelope_kernel)


@triton.jit
def _power_kernel(src_ptr, out_ptr, numel, power, OUTPUT: tl.constexpr, BLOCK: tl.constexpr):
    """``out[i] = (re² + im²)^(power/2)`` over a contiguous interleaved complex buffer."""
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = i < numel
    re = tl.load(src_ptr + 2 * i, mask=m, other=0.0)
    im = tl.load(src_ptr + 2 * i + 1, mask=m, other=0.0)
    mag2 = re * re + im * im
    if OUTPUT == 2:
        mag2 = tl.exp2(tl.log2(mag2) * (0.5 * power))
    tl.store(out_ptr + i, mag2, mask=m)


# ----------------------------------------------------------------------------------------------
# Launchers (no autograd): every tensor argument arrives validated by nbxsig.stft.
# ----------------------------------------------------------------------------------------------


def _output_kind(power: float) -> int:
    return 0 if power < 0 else (1 if power == 2.0 else 2)


def n_frames(length: int, n_fft: int, hop: int, center: bool) -> int:
    pad = n_fft // 2 if center else 0
    return 1 + (length + 2 * pad - n_fft) // hop


def stft_forward(
    x: torch.Tensor,
    window: torch.Tensor | None,
    n_fft: int,
    hop: int,
    center: bool,
    pad_mode: str,
    normalized: bool,
    onesided: bool,
    power: float = -1.0,
) -> torch.Tensor:
    """``x (B, L)`` → real-layout spectrum ``(B, F, T, 2)`` float32, or ``|X|^power`` ``(B, F, T)``
    when ``power > 0``. The fft path returns a transposed view of a ``(B, T, F)`` buffer, like torch.stft."""
    device = check_launchable(x, *(() if window is None else (window,)))
    n_batch, length = x.shape
    pad = n_fft // 2 if center else 0
    T = n_frames(length, n_fft, hop, center)
    n_bins = n_fft // 2 + 1 if onesided else n_fft
    scale = 1.0 / math.sqrt(n_fft) if normalized else 1.0
    mode = _PAD_MODES[pad_mode]
    win = window if window is not None else x
    kind = _output_kind(power)
    if use_dense(n_fft):
        shape = (n_batch, n_bins, T, 2) if kind == 0 else (n_batch, n_bins, T)
        out = empty_output(shape, dtype=torch.float32, device=device)
        if _unrolled_stft(n_fft):
            _launch_stft_unrolled(
                x, x.stride(), length, pad, hop, T, window, None, out, out.stride(), scale, float(power),
                n_fft=n_fft, n_bins=n_bins, kind=0, mode=mode, output=kind,
            )  # fmt: skip
            return out
        basis = _basis(n_fft, "fwd" if onesided else "fwd2", device)
        block_k = min(next_pow2(n_fft, 16), 64)
        block_f = min(next_pow2(n_bins, 16), 64)
        block_t = FWD_BLOCK_T
        grid = (cdiv(T, block_t), cdiv(n_bins, block_f), n_batch)
        _frame_dft_kernel[grid](
            x, x.stride(0), x.stride(1), length, pad, hop, T, n_fft, n_bins,
            win, win, basis, out, out.stride(0), out.stride(1), out.stride(2), scale, float(power),
            MODE=mode, HAS_WINDOW=window is not None, OUTPUT=kind, PRECISION=_precision(),
            USE_FMA=n_fft <= FWD_FMA_MAX_N,
            BLOCK_T=block_t, BLOCK_K=block_k, BLOCK_F=block_f, num_warps=FWD_WARPS,
        )  # fmt: skip
        return out
    from . import fourstep

    route = dict(device_type=device.type, n_fft=n_fft, onesided=onesided, precision=_precision())
    if kind == 0 and fourstep.stft_path(**route) == "fourstep":
        # Composite n_fft: one fused kernel writes the interleaved spectrum, no frame buffer.
        return fourstep.stft(
            x, n_fft=n_fft, hop=hop, window=window, center=center, pad_mode=pad_mode, scale=scale
        )
    if kind != 0 and fourstep.spectrogram_path(**route) == "fourstep":
        # Composite n_fft: one fused kernel, no frame buffer and no complex spectrum.
        return fourstep.spectrogram(
            x, n_fft=n_fft, hop=hop, window=window, center=center, pad_mode=pad_mode, scale=scale,
            power=power,
        )  # fmt: skip
    frames = _frames(x, win, window is not None, length, pad, hop, T, n_fft, scale, mode, win)
    spec = torch.fft.rfft(frames) if onesided else torch.fft.fft(frames)  # (B, T, F) complex64
    if kind == 0:
        return torch.view_as_real(spec).transpose(1, 2)
    return _power(torch.view_as_real(spec), power).transpose(1, 2)


def _frames(x, win, has_window, length, pad, hop, T, n_fft, scale, mode, inv) -> torch.Tensor:
    n_batch = x.shape[0]
    frames = empty_output((n_batch, T, n_fft), dtype=torch.float32, device=x.device)
    block_n = min(next_pow2(n_fft), 256)
    block_t = max(1, 2048 // block_n)
    grid = (cdiv(T, block_t) * cdiv(n_fft, block_n), 1, n_batch)
    _frame_kernel[grid](
        x, x.stride(0), x.stride(1), length, pad, hop, T, n_fft, win, inv, frames, scale,
        MODE=mode, HAS_WINDOW=has_window, BLOCK_T=block_t, BLOCK_N=block_n,
    )  # fmt: skip
    return frames


def _power(spec_real: torch.Tensor, power: float) -> torch.Tensor:
    """``(..., 2)`` contiguous interleaved → ``|X|^power`` ``(...)``."""
    out = empty_output(spec_real.shape[:-1], dtype=torch.float32, device=spec_real.device)
    numel = out.numel()
    block = 1024
    _power_kernel[(cdiv(numel, block),)](
        spec_real, out, numel, float(power), OUTPUT=_output_kind(power), BLOCK=block
    )
    return out


def _ola_unrolled_config(strides, n_batch, n_fft, n_bins, hop, T, start, n_out, scale, *, has_window, kind,
                         divide):  # fmt: skip
    """The unrolled overlap-add's launch: ``(launcher, grid, source strides, trailing scalars,
    constexprs, warps)`` -- the frame-by-frame kernel with ``UNR_OLA_FRAMES``, else the row kernel."""
    u_begin = start // hop
    rows = (start + n_out - 1) // hop + 1 - u_begin
    s = tuple(strides)
    # (re, im) pairs as single 8-byte loads where the real layout allows it (a view_as_real of a
    # complex tensor always does): strides then go in complex units.
    paired = UNR_OLA_PAIRED and s[3] == 1 and not (s[0] % 2 or s[1] % 2 or s[2] % 2)
    if paired:
        s = (s[0] // 2, s[1] // 2, s[2] // 2, 1)
    tail = (T, start, n_out, u_begin, float(scale))
    common = dict(N=n_fft, F=n_bins, HOP=hop, KIND=kind, HAS_WINDOW=has_window, DIVIDE=divide, PAIRED=paired)
    if UNR_OLA_FRAMES:
        # Each program completes BLOCK_T - (Q - 1) rows (its first Q - 1 frames are the overlap).
        warps = UNR_OLA_FRAMES_WARPS
        block = _unrolled_block(UNR_OLA_FRAMES_BLOCK, rows, n_batch, warps)
        hop_p2 = next_pow2(hop)
        grid = (cdiv(rows, block - cdiv(n_fft, hop) + 1), n_batch)
        constexprs = dict(common, HOP_P2=hop_p2, LOG2_HOP=hop_p2.bit_length() - 1, BLOCK_T=block)
        return _ola_frames_launch, grid, s, tail, constexprs, warps
    rows_per_thread = UNR_OLA_ROWS
    block = _unrolled_block(UNR_OLA_BLOCK, cdiv(rows, rows_per_thread), n_batch, UNR_OLA_WARPS)
    out_p2 = next_pow2(rows_per_thread * hop)
    grid = (cdiv(rows, block * rows_per_thread), n_batch)
    constexprs = dict(common, TILE_STORE=UNR_OLA_TILE_STORE, OUT_P2=out_p2, LOG2_OUT=out_p2.bit_length() - 1,
                      ROWS=rows_per_thread, BLOCK_U=block)  # fmt: skip
    return _ola_launch, grid, s, tail, constexprs, UNR_OLA_WARPS


def _launch_ola_unrolled(src, strides, window, out, n_batch, n_fft, n_bins, hop, T, start, n_out, scale, *,
                         kind, divide):  # fmt: skip
    launch, grid, s, tail, constexprs, warps = _ola_unrolled_config(
        strides, n_batch, n_fft, n_bins, hop, T, start, n_out, scale,
        has_window=window is not None, kind=kind, divide=divide,
    )  # fmt: skip
    win = window if window is not None else out
    launch(grid, (src, *s, win, out, out.stride(0), *tail), constexprs, warps)


def _ola(
    src: torch.Tensor,
    strides: tuple[int, ...],
    *,
    source: int,
    basis_kind: str | None,
    window: torch.Tensor | None,
    n_batch: int,
    n_fft: int,
    n_bins: int,
    hop: int,
    T: int,
    start: int,
    n_out: int,
    scale: float,
    divide: bool,
) -> torch.Tensor:
    """Overlap-add launcher: output ``(B, n_out)`` float32, sample ``o`` = OLA sample ``start + o``.

    source 0 reads a real-layout spectrum and applies the basis ``basis_kind`` ("fwd"/"fwd2": the
    forward basis transposed, "inv": the inverse real DFT); source 1 reads ``(B, T, N)`` frames."""
    out = empty_output((n_batch, n_out), dtype=torch.float32, device=src.device)
    if n_out == 0:
        return out
    if source == 0 and _unrolled_ola(n_fft, hop):
        _launch_ola_unrolled(src, strides, window, out, n_batch, n_fft, n_bins, hop, T, start, n_out, scale,
                             kind=1 if basis_kind == "inv" else 0, divide=divide)  # fmt: skip
        return out
    basis = None if basis_kind is None else _basis(n_fft, basis_kind, src.device)
    if source == 0:
        # Fill the dot's N dimension (>= 16 columns) with S whole hops of output samples.
        block_c = next_pow2(hop, 16)
        block_f = next_pow2(n_bins, 16)
        block_g = OLA_BLOCK_G
    else:
        block_c = next_pow2(hop)
        block_f = 16
        block_g = max(1, 2048 // block_c)
    span = (block_c // hop) * hop
    g_begin = start // span
    g_end = (start + n_out - 1) // span + 1
    grid = (cdiv(g_end - g_begin, block_g), n_batch)
    win = window if window is not None else src
    s = (*strides, 0, 0, 0, 0)[:4]
    _ola_dft_kernel[grid](
        src, s[0], s[1], s[2], s[3], basis if basis is not None else src, win, out, out.stride(0),
        n_fft, n_bins, hop, T, start, n_out, g_begin, scale,
        SOURCE=source, HAS_WINDOW=window is not None, DIVIDE=divide, PRECISION=_precision(),
        USE_FMA=source == 0 and n_fft <= OLA_FMA_MAX_N,
        S=block_c // hop, N_TERMS=block_c // hop + cdiv(n_fft, hop) - 1,
        BLOCK_G=block_g, BLOCK_C=block_c, BLOCK_F=block_f, num_warps=OLA_WARPS if source == 0 else 4,
    )  # fmt: skip
    return out


def _fold_padding(gp: torch.Tensor, length: int, pad: int, pad_mode: str) -> torch.Tensor:
    """Adjoint of the centre padding: gradient on the padded signal ``(B, L + 2·pad)`` → ``(B, L)``."""
    gx = gp[:, pad : pad + length]
    if pad == 0:
        return gx
    j_left = torch.arange(-pad, 0, device=gp.device)
    j_right = torch.arange(length, length + pad, device=gp.device)
    if pad_mode == "reflect":
        i_left, i_right = -j_left, 2 * (length - 1) - j_right
    elif pad_mode == "replicate":
        i_left, i_right = torch.zeros_like(j_left), torch.full_like(j_right, length - 1)
    else:  # circular
        i_left, i_right = j_left + length, j_right - length
    gx = gx.clone()  # the edge contributions add onto a fresh (B, L) buffer
    gx.index_add_(1, i_left, gp[:, :pad])
    gx.index_add_(1, i_right, gp[:, pad + length :])
    return gx


def stft_backward(
    grad: torch.Tensor,
    window: torch.Tensor | None,
    length: int,
    n_fft: int,
    hop: int,
    center: bool,
    pad_mode: str,
    normalized: bool,
    onesided: bool,
) -> torch.Tensor:
    """Gradient of :func:`stft_forward` w.r.t. ``x``: ``grad (B, F, T, 2)`` → ``(B, L)`` float32.

    ``∂L/∂frame[t, n] = Σ_k Re G[k,t]·cos(2πkn/N) - Im G[k,t]·sin(2πkn/N)`` (the forward basis
    transposed), then the adjoint of windowing, framing and padding: an overlap-add."""
    device = check_launchable(grad, *(() if window is None else (window,)))
    n_batch, n_bins, T = grad.shape[:3]
    pad = n_fft // 2 if center else 0
    scale = 1.0 / math.sqrt(n_fft) if normalized else 1.0
    # Constant padding's adjoint is a crop: write only the unpadded samples. Other modes fold the
    # padded edges back onto the samples they copied, after the kernel.
    direct = pad == 0 or pad_mode == "constant"
    start, n_out = (pad, length) if direct else (0, length + 2 * pad)
    common = dict(
        window=window, n_batch=n_batch, n_fft=n_fft, hop=hop, T=T, start=start, n_out=n_out, divide=False
    )
    if use_dense(n_fft):
        kind = "fwd" if onesided else "fwd2"
        gp = _ola(grad, grad.stride(), source=0, basis_kind=kind, n_bins=n_bins, scale=scale, **common)
    else:
        g = torch.view_as_complex(grad.transpose(1, 2).contiguous())  # (B, T, F)
        if onesided:
            # Σ_{k<=N/2} Re(G_k e^{iθ}) = N·irfft(G') with the bins irfft counts twice halved.
            halve = torch.ones(n_bins, dtype=torch.float32, device=device)  # (not the default dtype)
            halve[1 : (n_fft + 1) // 2] = 0.5
            frames = torch.fft.irfft(g * halve, n=n_fft, norm="forward")
        else:
            frames = torch.fft.ifft(g, n=n_fft, norm="forward").real
        gp = _ola(frames, frames.stride(), source=1, basis_kind=None, n_bins=0, scale=scale, **common)
    return gp if direct else _fold_padding(gp, length, pad, pad_mode)


def istft_forward(
    spec: torch.Tensor,
    window: torch.Tensor | None,
    n_fft: int,
    hop: int,
    center: bool,
    normalized: bool,
    length: int,
) -> torch.Tensor:
    """Real-layout spectrum ``(B, F_in, T, 2)`` → ``(B, n_out)`` float32 (``length < 0``: the default)."""
    check_launchable(spec, *(() if window is None else (window,)))
    n_batch, _, T = spec.shape[:3]
    n_bins = n_fft // 2 + 1  # a two-sided input uses its first half, like torch.istft
    start, _, n_out = istft_range(n_fft, hop, T, center, None if length < 0 else length)
    common = dict(window=window, n_batch=n_batch, n_fft=n_fft, hop=hop, T=T, start=start, n_out=n_out)
    if use_dense(n_fft):
        scale = math.sqrt(n_fft) if normalized else 1.0
        return _ola(
            spec, spec.stride(), source=0, basis_kind="inv", n_bins=n_bins, scale=scale, divide=True, **common
        )
    if spec.dtype != torch.float32:
        spec = spec.float()  # cuFFT takes half-precision complex only for power-of-two sizes
    if spec.stride(-1) != 1 or any(s % 2 for s in spec.stride()[:-1]):
        spec = spec.contiguous()  # view_as_complex needs interleaved pairs; rare (hand-made real layouts)
    x = torch.view_as_complex(spec[:, :n_bins]).transpose(1, 2)  # (B, T, F)
    frames = torch.fft.irfft(x, n=n_fft, norm="ortho" if normalized else "backward")  # (B, T, N)
    return _ola(
        frames, frames.stride(), source=1, basis_kind=None, n_bins=0, scale=1.0, divide=True, **common
    )


def _inv_envelope(window: torch.Tensor | None, n_fft: int, hop: int, T: int, device) -> torch.Tensor:
    total = n_fft + hop * (T - 1)
    out = empty_output((total,), dtype=torch.float32, device=device)
    block = 1024
    win = window if window is not None else out
    _envelope_launch(
        (cdiv(total, block), 1),
        (win, out, n_fft, hop, T, total),
        dict(N_TERMS=cdiv(n_fft, hop), HAS_WINDOW=window is not None, BLOCK=block),
        4,
    )
    return out


def istft_backward(
    grad: torch.Tensor,
    window: torch.Tensor | None,
    n_bins_in: int,
    n_fft: int,
    hop: int,
    center: bool,
    normalized: bool,
    T: int,
    *,
    strides: tuple[int, ...] | None = None,
) -> torch.Tensor:
    """Gradient of :func:`istft_forward` w.r.t. the real-layout spectrum: ``(B, n_out)`` →
    ``(B, F_in, T, 2)`` float32. Frames ``w[n]·g[t·hop + n - start]/env[t·hop + n]``, then a DFT
    with the inverse basis (``∂y/∂Re X_k = w_k cos/N``, ``∂y/∂Im X_k = -w_k sin/N``).

    ``strides``: a layout for the dense path's gradient (from ``_grad_strides``: dense, even, (re,
    im) innermost); default contiguous. The fft path returns its own (frequency-fastest) layout."""
    device = check_launchable(grad, *(() if window is None else (window,)))
    n_batch, n_out = grad.shape
    start = n_fft // 2 if center else 0
    n_bins = n_fft // 2 + 1
    inv = _inv_envelope(window, n_fft, hop, T, device)
    win = window if window is not None else inv
    if use_dense(n_fft):
        out = empty_output((n_batch, n_bins_in, T, 2), dtype=torch.float32, device=device, strides=strides)
        if n_bins_in > n_bins:
            out[:, n_bins:].zero_()  # bins a two-sided input carries but istft ignores
        scale = math.sqrt(n_fft) if normalized else 1.0
        if _unrolled_stft(n_fft):
            # A frequency-fastest layout (a frame's bins contiguous) is stored as one tile per frame.
            tile = UNR_BWD_TILE_OUT and out.stride(1) == 2 and n_bins_in == n_bins
            _launch_stft_unrolled(
                grad, grad.stride(), n_out, start, hop, T, window, inv, out, out.stride(), scale, -1.0,
                n_fft=n_fft, n_bins=n_bins, kind=1, mode=_MODE_SCALED, output=0, tile_out=tile,
            )  # fmt: skip
            return out
        basis = _basis(n_fft, "inv", device)
        block_t, block_k, block_f = FWD_BLOCK_T, min(next_pow2(n_fft, 16), 64), min(next_pow2(n_bins, 16), 64)
        grid = (cdiv(T, block_t), cdiv(n_bins, block_f), n_batch)
        _frame_dft_kernel[grid](
            grad, grad.stride(0), grad.stride(1), n_out, start, hop, T, n_fft, n_bins,
            win, inv, basis, out, out.stride(0), out.stride(1), out.stride(2), scale, -1.0,
            MODE=_MODE_SCALED, HAS_WINDOW=window is not None, OUTPUT=0, PRECISION=_precision(),
            USE_FMA=n_fft <= FWD_FMA_MAX_N,
            BLOCK_T=block_t, BLOCK_K=block_k, BLOCK_F=block_f, num_warps=FWD_WARPS,
        )  # fmt: skip
        return out
    scale = math.sqrt(n_fft) if normalized else 1.0
    frames = _frames(grad, win, window is not None, n_out, start, hop, T, n_fft, scale, _MODE_SCALED, inv)
    gx = torch.fft.rfft(frames) * _hermitian_scale(n_fft, device)  # (B, T, F)
    gx = torch.view_as_real(gx).transpose(1, 2)
    if n_bins_in > n_bins:
        gx = torch.nn.functional.pad(gx, (0, 0, 0, 0, 0, n_bins_in - n_bins))
    return gx


# ----------------------------------------------------------------------------------------------
# Autograd and torch.library custom ops
# ----------------------------------------------------------------------------------------------


class _StftFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, window, n_fft, hop, center, pad_mode, normalized, onesided):
        ctx.save_for_backward(window)
        ctx.args = (x.shape[1], n_fft, hop, center, pad_mode, normalized, onesided)
        ctx.x_dtype = x.dtype
        return stft_forward(x, window, n_fft, hop, center, pad_mode, normalized, onesided)

    @staticmethod
    def backward(ctx, grad):
        (window,) = ctx.saved_tensors
        gx = stft_backward(grad, window, *ctx.args)
        return gx.to(ctx.x_dtype), None, None, None, None, None, None, None


def _grad_strides(spec: torch.Tensor) -> tuple[int, ...] | None:
    """Strides for the real-layout gradient of ``spec`` (real layout) such that autograd adopts it
    as is: ``spec``'s own where it is dense with (re, im) pairs innermost (torch.stft's
    frequency-fastest output, any view_as_real of a complex tensor), else None (contiguous).
    AccumulateGrad keeps a gradient only if its strides match a dense leaf's; otherwise it copies it
    into the leaf's layout (163 µs at 64×240000, measured on an H200)."""
    strides = spec.stride()
    if strides[-1] != 1 or any(st % 2 or st == 0 for st in strides[:-1]):
        return None
    expected = 1
    for size, stride in sorted(zip(spec.shape, strides, strict=True), key=lambda p: p[1]):
        if size != 1:
            if stride != expected:
                return None
            expected *= size
    return strides


class _IstftFunction(torch.autograd.Function):
    """Eager autograd for the Triton istft. It takes the complex spectrum itself where the caller
    has one (view_as_real's own backward would make the gradient contiguous, a copy), and with
    ``GRAD_IN_INPUT_LAYOUT`` writes the gradient in the spectrum's layout, so that AccumulateGrad
    adopts it without a copy."""

    @staticmethod
    def forward(ctx, spec, window, n_fft, hop, center, normalized, length):
        # Only the window is kept (the spectrum is not needed: the gradient is linear in grad).
        ctx.save_for_backward(window)
        ctx.spec_dtype = spec.dtype
        ctx.complex = spec.is_complex()
        real = torch.view_as_real(spec) if ctx.complex else spec
        ctx.args = (real.shape[1], n_fft, hop, center, normalized, real.shape[2])
        ctx.strides = _grad_strides(real) if GRAD_IN_INPUT_LAYOUT else None
        return istft_forward(real, window, n_fft, hop, center, normalized, length)

    @staticmethod
    def backward(ctx, grad):
        (window,) = ctx.saved_tensors
        g = istft_backward(grad, window, *ctx.args, strides=ctx.strides)
        g = torch.view_as_complex(g) if ctx.complex else g.to(ctx.spec_dtype)
        return g, None, None, None, None, None, None


@torch.library.custom_op("nbxsig::stft", mutates_args=())
def _stft_op(
    x: torch.Tensor,
    window: torch.Tensor | None,
    n_fft: int,
    hop: int,
    center: bool,
    pad_mode: str,
    normalized: bool,
    onesided: bool,
) -> torch.Tensor:
    # The fft path returns a transposed view (like torch.stft); the fake promises contiguous.
    return stft_forward(x, window, n_fft, hop, center, pad_mode, normalized, onesided).contiguous()


@_stft_op.register_fake
def _(x, window, n_fft, hop, center, pad_mode, normalized, onesided):
    n_bins = n_fft // 2 + 1 if onesided else n_fft
    T = n_frames(x.shape[1], n_fft, hop, center)
    return x.new_empty((x.shape[0], n_bins, T, 2), dtype=torch.float32)


@torch.library.custom_op("nbxsig::stft_backward", mutates_args=())
def _stft_backward_op(
    grad: torch.Tensor,
    window: torch.Tensor | None,
    length: int,
    n_fft: int,
    hop: int,
    center: bool,
    pad_mode: str,
    normalized: bool,
    onesided: bool,
) -> torch.Tensor:
    return stft_backward(grad, window, length, n_fft, hop, center, pad_mode, normalized, onesided)


@_stft_backward_op.register_fake
def _(grad, window, length, n_fft, hop, center, pad_mode, normalized, onesided):
    return grad.new_empty((grad.shape[0], length), dtype=torch.float32)


def _stft_setup(ctx, inputs, output):
    x, window, *args = inputs
    ctx.save_for_backward(window)
    ctx.args = (x.shape[1], *args)
    ctx.x_dtype = x.dtype


def _stft_grad(ctx, grad):
    (window,) = ctx.saved_tensors
    gx = torch.ops.nbxsig.stft_backward(grad.contiguous(), window, *ctx.args)
    return gx.to(ctx.x_dtype), None, None, None, None, None, None, None


_stft_op.register_autograd(_stft_grad, setup_context=_stft_setup)


@torch.library.custom_op("nbxsig::istft", mutates_args=())
def _istft_op(
    spec: torch.Tensor,
    window: torch.Tensor | None,
    n_fft: int,
    hop: int,
    center: bool,
    normalized: bool,
    length: int,
) -> torch.Tensor:
    return istft_forward(spec, window, n_fft, hop, center, normalized, length)


@_istft_op.register_fake
def _(spec, window, n_fft, hop, center, normalized, length):
    _, _, n_out = istft_range(n_fft, hop, spec.shape[2], center, None if length < 0 else length)
    return spec.new_empty((spec.shape[0], n_out), dtype=torch.float32)


@torch.library.custom_op("nbxsig::istft_backward", mutates_args=())
def _istft_backward_op(
    grad: torch.Tensor,
    window: torch.Tensor | None,
    n_bins_in: int,
    n_fft: int,
    hop: int,
    center: bool,
    normalized: bool,
    T: int,
) -> torch.Tensor:
    return istft_backward(grad, window, n_bins_in, n_fft, hop, center, normalized, T).contiguous()


@_istft_backward_op.register_fake
def _(grad, window, n_bins_in, n_fft, hop, center, normalized, T):
    return grad.new_empty((grad.shape[0], n_bins_in, T, 2), dtype=torch.float32)


def _istft_setup(ctx, inputs, output):
    spec, window, n_fft, hop, center, normalized, _length = inputs
    ctx.save_for_backward(window)
    ctx.args = (spec.shape[1], n_fft, hop, center, normalized, spec.shape[2])
    ctx.spec_dtype = spec.dtype


def _istft_grad(ctx, grad):
    (window,) = ctx.saved_tensors
    g = torch.ops.nbxsig.istft_backward(grad.contiguous(), window, *ctx.args)
    return g.to(ctx.spec_dtype), None, None, None, None, None, None


_istft_op.register_autograd(_istft_grad, setup_context=_istft_setup)


# ----------------------------------------------------------------------------------------------
# Entry points called by nbxsig.stft through its Ops (same signatures as the torch twins)
# ----------------------------------------------------------------------------------------------


def _needs_grad(*tensors: torch.Tensor | None) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


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
    """Triton twin of :func:`nbxsig.reference.stft.stft` (``power``: fused ``|X|^power`` output)."""
    if x.shape[0] > _runtime.MAX_GRID_YZ:  # the signals ride on grid axis 1 or 2
        return over_grid_batch(
            stft, x, n_fft=n_fft, hop=hop, window=window, center=center, pad_mode=pad_mode,
            normalized=normalized, onesided=onesided, power=power,
        )  # fmt: skip
    args = (n_fft, hop, center, pad_mode, normalized, onesided)
    if torch.compiler.is_compiling():
        spec = torch.ops.nbxsig.stft(x, window, *args)
    elif _needs_grad(x):
        spec = _StftFunction.apply(x, window, *args)
    else:
        spec = stft_forward(x, window, *args, power=-1.0 if power is None else power)
        if power is not None:
            return spec
    if power is None:
        return spec
    from ..reference.stft import power_spectrum

    return power_spectrum(spec, power)


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
    """Triton twin of :func:`nbxsig.reference.stft.istft` (real output, ``strict_nola=False``).

    ``spec``: the real layout ``(B, F, T, 2)`` or a complex64 ``(B, F, T)`` spectrum."""
    del onesided, return_complex, strict_nola  # resolved by nbxsig.stft (torch serves the other cases)
    if spec.shape[0] > _runtime.MAX_GRID_YZ:  # the signals ride on grid axis 1 or 2
        return over_grid_batch(
            istft, spec, n_fft=n_fft, hop=hop, window=window, center=center, normalized=normalized,
            onesided=True, length=length, return_complex=False, strict_nola=False,
        )  # fmt: skip
    args = (n_fft, hop, center, normalized, -1 if length is None else length)
    if _needs_grad(spec) and not torch.compiler.is_compiling():
        return _IstftFunction.apply(spec, window, *args)
    real = torch.view_as_real(spec) if spec.is_complex() else spec
    if torch.compiler.is_compiling():
        return torch.ops.nbxsig.istft(real, window, *args)
    return istft_forward(real, window, *args)


class IstftLaunch:
    """:func:`istft_forward` prepared for one call signature (spectrum shape, strides and dtype,
    window, framing): the launch arithmetic and the launch key are computed once, so a call is an
    output allocation and a launch. The batch-1 istft is host-bound (8 µs on an H200), which is
    what this is for; :func:`nbxsig.stft.istft` keeps these in its plan cache.

    Call it with a real-layout spectrum ``(B, F_in, T, 2)`` of the planned shape, strides and
    dtype, or the complex64 ``(B, F_in, T)`` whose ``view_as_real`` that is; returns
    ``(B, n_out)`` float32, as :func:`istft_forward`. :meth:`apply` is the same call under autograd,
    its backward prepared as well (``backward``: an :class:`_IstftBackwardLaunch`, or None where
    the gradient takes :func:`istft_backward`'s general path).
    """

    __slots__ = (
        "backward", "constexprs", "device", "grid", "handles", "launcher", "n_out", "shape", "strides",
        "tail", "warps", "window",
    )  # fmt: skip

    def __init__(self, spec, window, config, n_out, backward) -> None:
        self.launcher, self.grid, self.strides, tail, self.constexprs, self.warps = config
        self.tail = (n_out, *tail)  # the output's row stride, then the scalars
        self.window, self.device, self.n_out = window, spec.device, n_out
        self.shape = (spec.shape[0], n_out)
        self.handles: dict = {}  # compiled kernels by device and alignment (see CachedLaunch)
        self.backward = backward

    @staticmethod
    def prepare(spec, window, *, n_fft, hop, center, normalized, length) -> IstftLaunch | None:
        """The prepared launch for ``spec``'s signature, or None where the call takes another path
        (the fft or tiled kernels, an empty output, more signals than one grid axis takes): call
        :func:`istft` then."""
        check_launchable(spec, *(() if window is None else (window,)))
        n_batch, n_bins_in, T = spec.shape[:3]
        start, _, n_out = istft_range(n_fft, hop, T, center, None if length < 0 else length)
        if (
            not (use_dense(n_fft) and _unrolled_ola(n_fft, hop))
            or n_out == 0
            or n_batch > _runtime.MAX_GRID_YZ
        ):
            return None
        scale = math.sqrt(n_fft) if normalized else 1.0
        config = _ola_unrolled_config(
            spec.stride(), n_batch, n_fft, n_fft // 2 + 1, hop, T, start, n_out, scale,
            has_window=window is not None, kind=1, divide=True,
        )  # fmt: skip
        # A two-sided input's upper bins get zero gradient: istft_backward's general path.
        backward = None
        if n_bins_in == n_fft // 2 + 1:
            backward = _IstftBackwardLaunch(
                spec, window, n_fft=n_fft, hop=hop, center=center, normalized=normalized, n_out=n_out
            )
        return IstftLaunch(spec, window, config, n_out, backward)

    def __call__(self, spec: torch.Tensor) -> torch.Tensor:
        out = empty_output(self.shape, dtype=torch.float32, device=self.device)
        window = out if self.window is None else self.window
        p_spec, p_window, p_out = spec.data_ptr(), window.data_ptr(), out.data_ptr()
        aligned = (p_spec & 15 == 0, p_window & 15 == 0, p_out & 15 == 0)
        pointers = (p_spec, *self.strides, p_window, p_out, *self.tail)
        if not self.launcher.launch_cached(self.handles, aligned, self.grid, pointers):
            real = torch.view_as_real(spec) if spec.is_complex() else spec
            args = (real, *self.strides, window, out, *self.tail)
            self.launcher(self.grid, args, self.constexprs, self.warps, handles=self.handles, aligned=aligned)
        return out

    def apply(self, spec: torch.Tensor) -> torch.Tensor:
        """``self(spec)`` differentiable in ``spec`` (``backward`` must not be None)."""
        return _PlannedIstftFunction.apply(spec, self.window, self)


class _IstftBackwardLaunch:
    """:func:`istft_backward` prepared for a planned istft (the unrolled stft kernel with MODE_SCALED,
    the gradient in the spectrum's layout with ``GRAD_IN_INPUT_LAYOUT``): the launch, its handle
    cache, and the window envelope ``1/OLA(w²)``. The envelope depends only on the window, n_fft, hop
    and the frame count, which the plan fixes (its key holds the window's version), so the first
    backward computes it and later ones reuse it: a backward is then an allocation and one launch.
    The envelope is kept for one stream (another stream's first backward recomputes it rather than
    read a buffer another stream may still be writing) and never inside a CUDA-graph capture (the
    graph would read it by address after the plan dropped it); it lives as long as the plan
    (``n_fft + hop·(T - 1)`` floats; the plan cache is bounded).

    Call it with the incoming gradient ``(B, n_out)``; a gradient with other strides than
    contiguous (an expanded one) takes :func:`istft_backward`.
    """

    __slots__ = (
        "args", "constexprs", "device", "envelope", "framing", "grid", "handles", "head", "layout",
        "out_shape", "out_strides", "row", "tail", "warps", "window",
    )  # fmt: skip

    def __init__(self, spec, window, *, n_fft, hop, center, normalized, n_out) -> None:
        n_batch, n_bins, T = spec.shape[:3]
        self.window, self.device = window, spec.device
        self.args = (n_bins, n_fft, hop, center, normalized, T)  # istft_backward's, after grad and window
        self.framing = (n_fft, hop, T)  # the envelope's
        self.layout = _grad_strides(spec) if GRAD_IN_INPUT_LAYOUT else None
        self.out_shape = (n_batch, n_bins, T, 2)
        self.out_strides = self.layout or (n_bins * T * 2, T * 2, 2, 1)
        self.grid, so, self.constexprs, self.warps = _stft_unrolled_config(
            n_batch, T, self.out_strides, n_fft=n_fft, n_bins=n_bins, kind=1, mode=_MODE_SCALED, output=0,
            has_window=window is not None, tile_out=UNR_BWD_TILE_OUT and self.out_strides[1] == 2,
        )  # fmt: skip
        self.row = (n_out, 1)  # the incoming gradient's strides this launch is prepared for
        start = n_fft // 2 if center else 0
        # The kernel's arguments between the gradient and the window (its strides, length, padding,
        # hop, frames) and after the output (its strides, the scale, power).
        self.head = (n_out, 1, n_out, start, hop, T)
        self.tail = (*so, math.sqrt(n_fft) if normalized else 1.0, -1.0)
        self.handles: dict = {}
        self.envelope: tuple | None = None  # (stream, 1/envelope)

    def _inv_envelope(self) -> torch.Tensor:
        stream = None
        if self.device.type == "cuda":
            if torch._C._cuda_isCurrentStreamCapturing():
                return _inv_envelope(self.window, *self.framing, self.device)
            stream = torch._C._cuda_getCurrentRawStream(torch._C._cuda_getDevice())
        cached = self.envelope
        if cached is None or cached[0] != stream:
            cached = self.envelope = (stream, _inv_envelope(self.window, *self.framing, self.device))
        return cached[1]

    def __call__(self, grad: torch.Tensor) -> torch.Tensor:
        if grad.stride() != self.row:
            return istft_backward(grad, self.window, *self.args, strides=self.layout)
        inv = self._inv_envelope()
        out = empty_output(self.out_shape, dtype=torch.float32, device=self.device, strides=self.out_strides)
        window = out if self.window is None else self.window
        p_grad, p_window, p_inv, p_out = grad.data_ptr(), window.data_ptr(), inv.data_ptr(), out.data_ptr()
        aligned = (p_grad & 15 == 0, p_window & 15 == 0, p_inv & 15 == 0, p_out & 15 == 0)
        pointers = (p_grad, *self.head, p_window, p_inv, p_out, *self.tail)
        if not _stft_unrolled_launch.launch_cached(self.handles, aligned, self.grid, pointers):
            args = (grad, *self.head, window, inv, out, *self.tail)
            _stft_unrolled_launch(
                self.grid, args, self.constexprs, self.warps, handles=self.handles, aligned=aligned
            )
        return out


class _PlannedIstftFunction(torch.autograd.Function):
    """``_IstftFunction`` for a planned call (:meth:`IstftLaunch.apply`): both directions launch
    through the plan's prepared launches, none of the per-call arithmetic, checks and dispatch."""

    @staticmethod
    def forward(ctx, spec, window, launch):
        # Saved for its version check only: the backward reads the window, so an in-place change
        # between forward and backward must raise, as it does for every saved tensor.
        ctx.save_for_backward(window)
        ctx.launch, ctx.spec_dtype = launch, spec.dtype
        return launch(spec)

    @staticmethod
    def backward(ctx, grad):
        _ = ctx.saved_tensors  # raises if the window changed in place since the forward
        g = ctx.launch.backward(grad)
        if ctx.spec_dtype == torch.complex64:
            g = torch.view_as_complex(g)
        elif ctx.spec_dtype != torch.float32:
            g = g.to(ctx.spec_dtype)
        return g, None, None


class _Tunable(types.ModuleType):
    """This module's type: assigning one of its upper-case settings (benchmarks and tests switch
    kernels and tile sizes at run time) calls the hooks registered with :func:`on_retune`, which
    drop whatever was planned with the old values."""

    def __setattr__(self, name: str, value) -> None:
        super().__setattr__(name, value)
        if name.isupper():
            for hook in _RETUNE_HOOKS:
                hook()


_RETUNE_HOOKS: list = []


def on_retune(hook) -> None:
    """Call ``hook()`` whenever a setting of this module is assigned (see ``_Tunable``)."""
    if hook not in _RETUNE_HOOKS:
        _RETUNE_HOOKS.append(hook)


sys.modules[__name__].__class__ = _Tunable
