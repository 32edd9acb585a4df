"""Waveform → (log-)mel on H100/H200 (sm_90) at TF32 precision: a warp-specialized Gluon kernel.

Every frame of :func:`nbxsig.kernels.mel._launch` on Hopper, when torch's matmul precision is "high"
or "medium". Same function as the Triton kernel there, and the same error class (TF32: 10 mantissa
bits, operands rounded to nearest), with no spectrum in device memory. Per tile of ``BLOCK_T = 64``
frames of one signal::

    a[t, k] = x[t·hop + k]·w[k],  b[t, k] = x[t·hop + n − k]·w[n − k]       (k = 0 .. n/2)
    s = (a + b)·σ[t],  d = (a − b)·σ[t]                       fp16; σ[t] a power of two that puts
                                                              the frame's largest |a|, |b| in [2^13, 2^14)
    re = s @ cos,  im = d @ −sin                              fp16 wgmma, fp32 accumulators
    P = (re² + im²)^(power/2)                                 TF32, rounded to nearest
    mel = (P @ fb) / σ[t]^power                               TF32 wgmma

The real-input symmetry folds each frame in half (``s``/``d``), so the DFT is two 64 × (n/2+1) ×
(n/2+1) products; scaling each frame by a power of two before rounding it to fp16 keeps fp16's
range out of the way, so fp16's 11-bit significand gives TF32's error class. The scale comes off
the tile's mels, not off every bin: a power of two commutes with rounding, so the bits are those of
unscaling each bin (barring overflow or underflow), for a fraction of the multiplies.

One persistent program per SM walks tiles ``pid, pid + nprog, …`` with three partitions:

- the loader (8 warps) folds, windows and scales the next tile into its shared-memory slot (a
  signal's first and last tiles, whose frames read the centre padding, by mapped positions), having
  first asked L2 for the samples of the tile after it;
- a TMA warp streams the (cos, sin) basis and filter chunks, 32 bins at a time, the same sequence
  for every tile, into two-slot rings;
- the products (one warpgroup) take the tile into registers (its slot goes back to the loader at
  once), then per 32-bin chunk: wait for the chunk's DFT, issue the next chunk's DFT
  asynchronously, form ``P`` and issue the chunk's mel product from registers. Then the epilogue
  (floor, log) and the stores.

Whisper's floor (each signal's maximum − 8, in log10) needs the whole signal first, so it is a second
pass (:func:`whisper_floor`); the kernel gives it each signal's largest mel and each tile's smallest, and
the pass reads and rewrites only the tiles with a mel under the floor -- on speech and noise almost none,
where a pass over the whole output (61 MB at 64 × 30 s) cost ~25 µs.

On an H200 (64 × 30 s, n_fft 400, hop 160, 80 mels) it runs MelSpectrogram in 159.4 µs against 291.2 µs
for the Triton path (``nbxsig.stft``'s four-step spectrogram + the mel projection) and 1308.2 µs for
torchaudio, and Whisper's front end in 171.7 µs against 1389.6, so it is the auto path there
(:data:`nbxsig.kernels.mel.SM90_AUTO`; docs/benchmarks.md, twenty-ninth round).
Gluon has no interpreter: the CPU suite compiles the kernel for sm_90 offline
(tests/test_features_compile.py); tests/test_features_gpu.py runs it.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from . import mel as kmel
from ._launch import CachedLaunch, prefetch_l2
from ._runtime import cdiv, check_launchable, empty_output, next_pow2, sm_count

BLOCK_T = 64  # frames per tile: one wgmma M
BLOCK_F = 32  # bins per chunk: the DFT's N and the mel product's K
ROWS = 16  # the loader's row group
LOADER_WARPS = 8
LOADER_REGS = 120  # so that the products get 248: the tile's frames live in their registers
MAX_N_FFT = 414  # n/2 + 1 bins padded to 16 must be <= 208: the frame tile in 104 registers a thread
MIN_N_FFT = 32
MAX_MELS = 128
# 16 warps a program (4 products + 8 loader + the TMA warp's warpgroup): 65536 registers / 512 threads.
_MAXNREG = 128


@gluon.jit
def _tile_of(tile, n_tt, n_frames, BLOCK_T: gl.constexpr):
    """Tile index → (signal, first frame, end frame)."""
    b = (tile // n_tt).to(gl.int64)
    t0 = (tile % n_tt) * BLOCK_T
    return b, t0, gl.minimum(n_frames, t0 + BLOCK_T)


@gluon.jit
def _frame_piece(
    prow,
    w_a,
    w_b,
    K0: gl.constexpr,
    KW: gl.constexpr,
    N_FFT: gl.constexpr,
    LOAD: gl.constexpr,
    VEC: gl.constexpr,
):
    """Columns ``K0 .. K0+KW`` of ``a`` and ``b``, without masks: the rows are clamped into the tile, every
    column's address lies inside its frame (column 0 reads ``x[n − 1]`` for ``b``), and the window tables are
    zero where a column has no term, so the zero windows do the masking."""
    k = K0 + gl.arange(0, KW, layout=gl.SliceLayout(0, LOAD))
    if VEC:
        k = gl.max_contiguous(gl.multiple_of(k, 4), 4)
    xa = gl.load(prow + gl.expand_dims(k, 0))
    xb = gl.load(prow + gl.expand_dims(N_FFT - gl.maximum(k, 1), 0))
    wa = gl.expand_dims(w_a.slice(K0, KW).load(gl.SliceLayout(0, LOAD)), 0)
    wb = gl.expand_dims(w_b.slice(K0, KW).load(gl.SliceLayout(0, LOAD)), 0)
    return xa * wa, xb * wb


@gluon.jit
def _row_peak(a, b):
    return gl.maximum(gl.max(gl.abs(a), axis=1), gl.max(gl.abs(b), axis=1))


@gluon.jit
def _store_folded(a_s, a_d, r0: gl.constexpr, NR: gl.constexpr, a, b, down):
    d = gl.expand_dims(down, 1)
    a_s.slice(r0, NR, dim=0).store(((a + b) * d).to(gl.float16))
    a_d.slice(r0, NR, dim=0).store(((a - b) * d).to(gl.float16))


@gluon.jit
def _row_scale(peak):
    """``(down, up)`` for frames whose largest |a|, |b| is ``peak``: e, its exponent, clamped so that
    2^(140 − e) and 2^(e − 140) are normal; the frame is scaled by ``down = 2^(140 − e)`` (its largest term
    lands in [2^13, 2^14): fp16's range above and the sum of 208 terms below 65504) and the mels back by
    ``up = 2^(e − 140)`` to the power."""
    e = gl.minimum(gl.maximum((peak.to(gl.int32, bitcast=True) >> 23) & 0xFF, 14), 253)
    return ((267 - e) << 23).to(gl.float32, bitcast=True), ((e - 13) << 23).to(gl.float32, bitcast=True)


@gluon.jit
def _fold_interior(
    x_ptr,
    stride_xb,
    b,
    t0,
    t_end,
    hop,
    pad,
    bufs,
    K0W: gl.constexpr,
    K1W: gl.constexpr,
    K2W: gl.constexpr,
    BLOCK_T: gl.constexpr,
    ROWS: gl.constexpr,
    VEC: gl.constexpr,
    N_FFT: gl.constexpr,
    LOADER_WARPS: gl.constexpr,
):
    """A tile of frames that read no padding into the frame slot: no masks, 16-byte loads where aligned."""
    a_s0, a_d0, a_s1, a_d1, a_s2, a_d2, up_rows, w_a, w_b, peak_rows = bufs
    # Two threads a warp along the rows: 16-byte loads of x[k], and each warp's 64 columns of a row group.
    LOAD: gl.constexpr = gl.BlockedLayout([1, 4], [2, 16], [LOADER_WARPS, 1], [1, 0])
    SMALL: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [LOADER_WARPS, 1], [1, 0])
    # Offsets from the signal's start, not the tile's: offsets that do not depend on the tile would be
    # hoisted out of the tile loop and held in registers (they spilled).
    if VEC:  # noqa: SIM108 -- a constexpr branch
        x_row = x_ptr + gl.multiple_of(b * stride_xb - pad, 4)
    else:
        x_row = x_ptr + b * stride_xb - pad
    if K2W > 0:
        # The narrow last piece for all of the tile's rows at once, in a layout as narrow as it is (in the
        # row groups' 64-column layout its 16 columns would be computed four times over); its row maxima
        # reach the row groups through shared memory.
        rs = gl.arange(0, BLOCK_T, layout=gl.SliceLayout(1, SMALL))
        rows_s = gl.minimum(t0 + rs, t_end - 1) * hop
        if VEC:
            rows_s = gl.multiple_of(rows_s, 4)
        a2, b2 = _frame_piece(gl.expand_dims(x_row + rows_s, 1), w_a, w_b, K0W + K1W, K2W, N_FFT, SMALL, VEC)
        peak_rows.store(_row_peak(a2, b2))
        gl.thread_barrier()
    for r0 in gl.static_range(0, BLOCK_T, ROWS):
        r = r0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, LOAD))
        # Rows past the tile's end re-read its last frame (never stored): no row masks.
        rows = gl.minimum(t0 + r, t_end - 1) * hop
        if VEC:
            rows = gl.multiple_of(rows, 4)
        prow = gl.expand_dims(x_row + rows, 1)
        a0, b0 = _frame_piece(prow, w_a, w_b, 0, K0W, N_FFT, LOAD, VEC)
        peak = _row_peak(a0, b0)
        if K1W > 0:
            a1, b1 = _frame_piece(prow, w_a, w_b, K0W, K1W, N_FFT, LOAD, VEC)
            peak = gl.maximum(peak, _row_peak(a1, b1))
        if K2W > 0:
            peak = gl.maximum(peak, peak_rows.slice(r0, ROWS).load(gl.SliceLayout(1, LOAD)))
        down, up = _row_scale(peak)
        up_rows.slice(r0, ROWS).store(up)
        _store_folded(a_s0, a_d0, r0, ROWS, a0, b0, down)
        if K1W > 0:
            _store_folded(a_s1, a_d1, r0, ROWS, a1, b1, down)
    if K2W > 0:
        gl.thread_barrier()  # every row group's scale is in up_rows
        e_s = (up_rows.load(gl.SliceLayout(1, SMALL)).to(gl.int32, bitcast=True) >> 23) + 13
        _store_folded(a_s2, a_d2, 0, BLOCK_T, a2, b2, ((267 - e_s) << 23).to(gl.float32, bitcast=True))


@gluon.jit
def _padded_load(x_sig, pos, length, PAD_MODE: gl.constexpr):
    """``x`` at sample positions ``pos`` of a signal padded as torch pads (``PAD_MODE``:
    :data:`nbxsig.kernels.mel._PAD_MODES`; reflect needs ``pad < length``, which the caller checked)."""
    if PAD_MODE == 0:  # constant: zeros
        inside = (pos >= 0) & (pos < length)
        out = gl.load(x_sig + gl.where(inside, pos, 0), mask=inside, other=0.0)
    else:
        if PAD_MODE == 1:  # reflect
            pos = gl.where(pos < 0, -pos, pos)
            pos = gl.where(pos >= length, 2 * (length - 1) - pos, pos)
        elif PAD_MODE == 2:  # replicate
            pos = gl.minimum(gl.maximum(pos, 0), length - 1)
        else:  # circular
            pos = (pos % length + length) % length
        out = gl.load(x_sig + pos)
    return out


@gluon.jit
def _padded_piece(
    x_sig,
    start,
    length,
    w_a,
    w_b,
    K0: gl.constexpr,
    KW: gl.constexpr,
    N_FFT: gl.constexpr,
    PAD_MODE: gl.constexpr,
    LOAD: gl.constexpr,
):
    """Columns ``K0 .. K0+KW`` of ``a`` and ``b`` for frames starting at sample ``start`` (a column of
    ``t·hop − pad``), which may read the centre padding: :func:`_frame_piece` with mapped positions."""
    k = K0 + gl.arange(0, KW, layout=gl.SliceLayout(0, LOAD))
    xa = _padded_load(x_sig, start + gl.expand_dims(k, 0), length, PAD_MODE)
    xb = _padded_load(x_sig, start + gl.expand_dims(N_FFT - gl.maximum(k, 1), 0), length, PAD_MODE)
    wa = gl.expand_dims(w_a.slice(K0, KW).load(gl.SliceLayout(0, LOAD)), 0)
    wb = gl.expand_dims(w_b.slice(K0, KW).load(gl.SliceLayout(0, LOAD)), 0)
    return xa * wa, xb * wb


@gluon.jit
def _fold_edge(
    x_sig,
    t0,
    t_end,
    hop,
    pad,
    length,
    bufs,
    K0W: gl.constexpr,
    K1W: gl.constexpr,
    K2W: gl.constexpr,
    BLOCK_T: gl.constexpr,
    ROWS: gl.constexpr,
    N_FFT: gl.constexpr,
    PAD_MODE: gl.constexpr,
    LOADER_WARPS: gl.constexpr,
):
    """A tile with frames that read the centre padding (a signal's first and last tiles) into the frame
    slot: every piece per row group, positions mapped (:func:`_padded_load`). Rare, so plain."""
    a_s0, a_d0, a_s1, a_d1, a_s2, a_d2, up_rows, w_a, w_b, _ = bufs
    LOAD: gl.constexpr = gl.BlockedLayout([1, 4], [2, 16], [LOADER_WARPS, 1], [1, 0])
    for r0 in gl.static_range(0, BLOCK_T, ROWS):
        r = r0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, LOAD))
        start = gl.expand_dims(gl.minimum(t0 + r, t_end - 1) * hop - pad, 1)
        a0, b0 = _padded_piece(x_sig, start, length, w_a, w_b, 0, K0W, N_FFT, PAD_MODE, LOAD)
        peak = _row_peak(a0, b0)
        if K1W > 0:
            a1, b1 = _padded_piece(x_sig, start, length, w_a, w_b, K0W, K1W, N_FFT, PAD_MODE, LOAD)
            peak = gl.maximum(peak, _row_peak(a1, b1))
        if K2W > 0:
            a2, b2 = _padded_piece(x_sig, start, length, w_a, w_b, K0W + K1W, K2W, N_FFT, PAD_MODE, LOAD)
            peak = gl.maximum(peak, _row_peak(a2, b2))
        down, up = _row_scale(peak)
        up_rows.slice(r0, ROWS).store(up)
        _store_folded(a_s0, a_d0, r0, ROWS, a0, b0, down)
        if K1W > 0:
            _store_folded(a_s1, a_d1, r0, ROWS, a1, b1, down)
        if K2W > 0:
            _store_folded(a_s2, a_d2, r0, ROWS, a2, b2, down)


@gluon.jit
def _prefetch_samples(
    x_ptr,
    stride_xb,
    tile,
    n_tt,
    n_frames,
    hop,
    pad,
    length,
    BLOCK_T: gl.constexpr,
    N_FFT: gl.constexpr,
    LOADER_WARPS: gl.constexpr,
):
    """Ask L2 for the samples that tile ``tile``'s frames read, a 128-byte line per 32 samples, two lines a
    thread (up to 64 KB: all of them for hops up to 250 at 64 frames; beyond, a hint for the first)."""
    b, t0, t_end = _tile_of(tile, n_tt, n_frames, BLOCK_T)
    first = gl.maximum(t0 * hop - pad, 0)
    last = gl.minimum((t_end - 1) * hop - pad + N_FFT, length) - 1
    LINES: gl.constexpr = gl.BlockedLayout([2], [32], [LOADER_WARPS], [0])
    pos = gl.minimum(first + gl.arange(0, 64 * LOADER_WARPS, layout=LINES) * 32, last)
    prefetch_l2(x_ptr + b * stride_xb + pos)


@gluon.jit
def _loader(
    args,
    edges,
    bufs,
    bars,
    K0W: gl.constexpr,
    K1W: gl.constexpr,
    K2W: gl.constexpr,
    BLOCK_T: gl.constexpr,
    ROWS: gl.constexpr,
    VEC: gl.constexpr,
    N_FFT: gl.constexpr,
    PAD_MODE: gl.constexpr,
    LOADER_WARPS: gl.constexpr,
):
    """Worker: each tile's folded, scaled fp16 frames into the frame slot, and its per-frame ``2^e``;
    ``edges``: the signal's length and the frames ``[t_a, t_b)`` that read no padding."""
    x_ptr, stride_xb, n_frames, hop, pad, n_tt, n_tiles = args
    length, t_a, t_b = edges
    a_ready, a_empty = bars
    nprog = gl.num_programs(0)
    i = 0
    for tile in range(gl.program_id(0), n_tiles, nprog):
        # The next tile's samples on their way from memory to L2 while this one is loaded: the loader alone
        # took ~140 of the kernel's ~171 µs (H100, 64 x 30 s), waiting on memory with its issue slots idle;
        # with the prefetch the kernel ran 159.4 instead of 168.2 µs (H200).
        if tile + nprog < n_tiles:
            _prefetch_samples(
                x_ptr, stride_xb, tile + nprog, n_tt, n_frames, hop, pad, length, BLOCK_T, N_FFT, LOADER_WARPS
            )
        mbarrier.wait(a_empty, (i & 1) ^ 1)
        b, t0, t_end = _tile_of(tile, n_tt, n_frames, BLOCK_T)
        if (t0 < t_a) | (t_end > t_b):
            _fold_edge(
                x_ptr + b * stride_xb, t0, t_end, hop, pad, length, bufs, K0W, K1W, K2W, BLOCK_T, ROWS, N_FFT,
                PAD_MODE, LOADER_WARPS,
            )  # fmt: skip
        else:
            _fold_interior(
                x_ptr, stride_xb, b, t0, t_end, hop, pad, bufs, K0W, K1W, K2W, BLOCK_T, ROWS, VEC, N_FFT,
                LOADER_WARPS,
            )  # fmt: skip
        fence_async_shared()  # the products' first reads may go through the async proxy
        mbarrier.arrive(a_ready, count=1)
        i += 1  # noqa: SIM113 -- a strided range: no enumerate in a kernel


@gluon.jit
def _tma_issuer(
    args,
    bufs,
    bars,
    KP: gl.constexpr,
    K0W: gl.constexpr,
    K1W: gl.constexpr,
    K2W: gl.constexpr,
    M1: gl.constexpr,
    M2: gl.constexpr,
    BLOCK_F: gl.constexpr,
    F_ALL: gl.constexpr,
):
    """Worker: the basis and filter chunks, the same sequence for every tile, each into a two-slot ring."""
    n_tiles, basis_descs, f1_desc, f2_desc = args
    basis, fb1, fb2 = bufs
    chunk_ready, slots_free = bars
    N_CHUNKS: gl.constexpr = F_ALL // BLOCK_F
    BASIS_BYTES: gl.constexpr = (K0W + K1W + K2W) * BLOCK_F * 4  # cos + sin, fp16
    FILTER_BYTES: gl.constexpr = (M1 + M2) * BLOCK_F * 4
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    total = (n_tiles - pid + nprog - 1) // nprog * N_CHUNKS
    # Step s copies basis s and filters s - 1 (the basis runs a chunk ahead), both signalled on
    # chunk_ready[s % 2]: the products wait there once a chunk, before chunk c + 1's DFT and chunk c's mel
    # product. One barrier frees both rings: the products arrive on slots_free[c % 2] once chunk c's DFT
    # and chunk c - 1's mel product have retired, which frees basis slot c % 2 and filter slot (c - 1) % 2;
    # step s waits for chunk s - 2's arrival.
    for step in range(total + 1):
        mbarrier.wait(slots_free.index(step % 2), ((step // 2) & 1) ^ 1)
        bar = chunk_ready.index(step % 2)
        if step < total:
            if step > 0:
                mbarrier.expect(bar, BASIS_BYTES + FILTER_BYTES)
            else:
                mbarrier.expect(bar, BASIS_BYTES)
            _issue_basis(step, bar, basis_descs, basis, KP, K0W, K1W, K2W, BLOCK_F, N_CHUNKS)
        elif step > 0:
            mbarrier.expect(bar, FILTER_BYTES)
        if step > 0:
            k = step - 1
            f0 = (k % N_CHUNKS) * BLOCK_F
            tma.async_copy_global_to_shared(f1_desc, [0, f0], bar, fb1.index(k % 2))
            if M2 > 0:
                tma.async_copy_global_to_shared(f2_desc, [M1, f0], bar, fb2.index(k % 2))


@gluon.jit
def _issue_basis(
    k,
    bar,
    descs,
    basis,
    KP: gl.constexpr,
    K0W: gl.constexpr,
    K1W: gl.constexpr,
    K2W: gl.constexpr,
    BLOCK_F: gl.constexpr,
    N_CHUNKS: gl.constexpr,
):
    """Chunk ``k``'s cos/sin basis into slot ``k % 2`` (free: the caller waited), signalled on ``bar``."""
    k0_desc, k1_desc, k2_desc = descs
    c0, s0, c1, s1, c2, s2 = basis
    slot = k % 2
    f0 = (k % N_CHUNKS) * BLOCK_F
    tma.async_copy_global_to_shared(k0_desc, [0, f0], bar, c0.index(slot))
    tma.async_copy_global_to_shared(k0_desc, [KP, f0], bar, s0.index(slot))
    if K1W > 0:
        tma.async_copy_global_to_shared(k1_desc, [K0W, f0], bar, c1.index(slot))
        tma.async_copy_global_to_shared(k1_desc, [KP + K0W, f0], bar, s1.index(slot))
    if K2W > 0:
        tma.async_copy_global_to_shared(k2_desc, [K0W + K1W, f0], bar, c2.index(slot))
        tma.async_copy_global_to_shared(k2_desc, [KP + K0W + K1W, f0], bar, s2.index(slot))


@gluon.jit
def _tf32_round(v):
    """fp32 → TF32, rounded to nearest (the tensor cores would truncate: a bias)."""
    bits = v.to(gl.int32, bitcast=True)
    return ((bits + 0x1000) & -8192).to(gl.float32, bitcast=True)


@gluon.jit
def _dft_async(
    a_s0,
    a_d0,
    a_s1,
    a_d1,
    a_s2,
    a_d2,
    c0,
    s0,
    c1,
    s1,
    c2,
    s2,
    slot,
    zero,
    K1W: gl.constexpr,
    K2W: gl.constexpr,
):
    """Issue one chunk's ``re``/``im`` products (asynchronous wgmma groups) from the frame registers."""
    re = warpgroup_mma(a_s0, c0.index(slot), zero, is_async=True)
    im = warpgroup_mma(a_d0, s0.index(slot), zero, is_async=True)
    if K1W > 0:
        re = warpgroup_mma(a_s1, c1.index(slot), re, is_async=True)
        im = warpgroup_mma(a_d1, s1.index(slot), im, is_async=True)
    if K2W > 0:
        re = warpgroup_mma(a_s2, c2.index(slot), re, is_async=True)
        im = warpgroup_mma(a_d2, s2.index(slot), im, is_async=True)
    return re, im


@gluon.jit
def _unscale(acc, up, power, POWER_MODE: gl.constexpr):
    """Mels of frames scaled by ``1/up`` (``up = 2^(e − 140)`` a row) back to the signal's: times
    ``up^power``; for a power above 1 as two factors ``up^(power/2)``, since one can overflow."""
    if POWER_MODE == 1:
        out = acc * gl.expand_dims(up, 1)
    else:
        if POWER_MODE == 2:
            u = gl.expand_dims(up, 1)
        else:
            u = gl.expand_dims(gl.exp2(gl.log2(up) * (power * 0.5)), 1)
        out = (acc * u) * u
    return out


@gluon.jit
def _lg2(v, FTZ: gl.constexpr):
    """log2 on the special-function unit (CUDA's ``__log2f``: absolute error ≤ 2^-22 on [0.5, 2], 2 ulp
    elsewhere, far inside TF32's error); with ``FTZ`` subnormal inputs count as 0, which saves the three
    instructions an element that rescale them. ``gl.log2`` lowers to a correctly rounded software routine
    of ~15 FMAs an element, which cost Whisper's products a quarter of their instructions."""
    if FTZ:
        out = gl.inline_asm_elementwise(
            "lg2.approx.ftz.f32 $0, $1;", "=f,f", [v], dtype=gl.float32, is_pure=True, pack=1
        )
    else:
        out = gl.inline_asm_elementwise(
            "lg2.approx.f32 $0, $1;", "=f,f", [v], dtype=gl.float32, is_pure=True, pack=1
        )
    return out


@gluon.jit
def _mufu_pow(v, exponent):
    """``v^exponent`` for ``v >= 0`` as ``2^(exponent·log2 v)`` on the special-function unit (``.approx``,
    a few ulp; subnormal ``v`` and results flush to 0, some 2^-170 below the frame's peak here); the
    software ``gl.exp2``/``gl.log2`` take ~30 instructions an element more."""
    e = gl.full(v.shape, exponent, gl.float32, v.type.layout)
    return gl.inline_asm_elementwise(
        "{ .reg .f32 t; lg2.approx.ftz.f32 t, $1; mul.ftz.f32 t, t, $2; ex2.approx.ftz.f32 $0, t; }",
        "=f,f,f",
        [v, e],
        dtype=gl.float32,
        is_pure=True,
        pack=1,
    )


@gluon.jit
def _store_mels(
    acc,
    M0: gl.constexpr,
    MW: gl.constexpr,
    dest,
    HAS_FLOOR: gl.constexpr,
    NORMAL_FLOOR: gl.constexpr,
    LOG: gl.constexpr,
    BLOCK_T: gl.constexpr,
    num_warps: gl.constexpr,
):
    """Floor, log (``LOG``: :func:`nbxsig.kernels.mel.log_mode`) and store ``out[b, M0 + m, t]``, a warp
    per mel column so the stores run along the frames. ``NORMAL_FLOOR``: the floor is a normal float, so
    no input of the log is subnormal. ``dest``: (out_ptr, b, stride_ob, stride_om, t0,
    t_end, n_mels, floor)."""
    out_ptr, b, stride_ob, stride_om, t0, t_end, n_mels, floor = dest
    STORE: gl.constexpr = gl.BlockedLayout([1, 1], [32, 1], [1, num_warps], [0, 1])
    acc = gl.convert_layout(acc, STORE)
    t = t0 + gl.arange(0, BLOCK_T, layout=gl.SliceLayout(1, STORE))
    m = M0 + gl.arange(0, MW, layout=gl.SliceLayout(0, STORE))
    ok = gl.expand_dims(t < t_end, 1) & gl.expand_dims(m < n_mels, 0)
    if HAS_FLOOR:
        acc = gl.maximum(acc, floor)
    if LOG == 1:
        acc = _lg2(acc, NORMAL_FLOOR) * 0.30102999566398120
    elif LOG == 2:
        acc = _lg2(acc, NORMAL_FLOOR) * 0.69314718055994531
    elif LOG == 3:
        acc = _lg2(acc, NORMAL_FLOOR)
    elif LOG == 4:  # Whisper: (log10 + 4) / 4
        acc = _lg2(acc, NORMAL_FLOOR) * (0.30102999566398120 * 0.25) + 1.0
    offs = b * stride_ob + gl.expand_dims(m, 0).to(gl.int64) * stride_om + gl.expand_dims(t, 1).to(gl.int64)
    gl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=ok)


@gluon.jit
def _products(
    args,
    bufs,
    bars,
    outputs,
    K1W: gl.constexpr,
    K2W: gl.constexpr,
    M1: gl.constexpr,
    M2: gl.constexpr,
    BLOCK_T: gl.constexpr,
    BLOCK_F: gl.constexpr,
    F_ALL: gl.constexpr,
    POWER_MODE: gl.constexpr,
    HAS_FLOOR: gl.constexpr,
    NORMAL_FLOOR: gl.constexpr,
    LOG: gl.constexpr,
    TRACK_PEAK: gl.constexpr,
    num_warps: gl.constexpr,
):
    """Default partition (one warpgroup): the DFT and mel products, then the epilogue."""
    n_frames, n_tt, n_tiles = args[2], args[5], args[6]
    a_s0, a_d0, a_s1, a_d1, a_s2, a_d2, up_rows, c0, s0, c1, s1, c2, s2, fb1, fb2 = bufs
    a_ready, a_empty, chunk_ready, slots_free = bars
    out_ptr, stride_ob, stride_om, sync_ptr, n_mels, power, floor = outputs
    M2A: gl.constexpr = M2 if M2 > 0 else 16
    N_CHUNKS: gl.constexpr = F_ALL // BLOCK_F
    DFT: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BLOCK_F, 16]
    )
    MEL1: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, M1, 8]
    )
    MEL2: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, M2A, 8]
    )
    P1: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MEL1, k_width=1)
    P2: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MEL2, k_width=1)
    AOP: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=DFT, k_width=2)
    zero = gl.zeros((BLOCK_T, BLOCK_F), dtype=gl.float32, layout=DFT)
    i = 0
    k = 0  # chunks done by this program: the rings' position
    for tile in range(gl.program_id(0), n_tiles, gl.num_programs(0)):
        mbarrier.wait(a_ready, i & 1)
        b, t0, t_end = _tile_of(tile, n_tt, n_frames, BLOCK_T)
        up1 = up_rows.load(gl.SliceLayout(1, MEL1))
        up2 = up_rows.load(gl.SliceLayout(1, MEL2))
        # The frame tile to registers once (104 registers a thread at n_fft 400): the DFT products then read
        # only the basis from shared memory, and the slot goes back to the loader at once.
        fs0 = a_s0.load(AOP)
        fd0 = a_d0.load(AOP)
        fs1 = a_s1.load(AOP)
        fd1 = a_d1.load(AOP)
        fs2 = a_s2.load(AOP)
        fd2 = a_d2.load(AOP)
        gl.thread_barrier()  # every warp's reads of the slot are done before it goes back
        mbarrier.arrive(a_empty, count=1)
        acc1 = gl.zeros((BLOCK_T, M1), dtype=gl.float32, layout=MEL1)
        acc2 = gl.zeros((BLOCK_T, M2A), dtype=gl.float32, layout=MEL2)
        # Software pipeline over the chunks (unrolled): chunk c+1's DFT runs on the tensor cores while this
        # warpgroup forms chunk c's power and issues its mel product. Each chunk starts by retiring every
        # wgmma group (groups retire in issue order, and chunk c-1's mel product was issued after this
        # chunk's DFT); the wait's deps keep chunk c-1's power, its mel product's register operand, alive.
        # Chunk k's basis. After the first tile the previous tile's last chunk already waited for this phase;
        # waiting again passes at once (the barrier's next phase needs an arrival still to come), and a
        # branch around it compiled larger.
        mbarrier.wait(chunk_ready.index(k % 2), (k // 2) & 1)
        re, im = _dft_async(fs0, fd0, fs1, fd1, fs2, fd2, c0, s0, c1, s1, c2, s2, k % 2, zero, K1W, K2W)
        for c in gl.static_range(N_CHUNKS):
            kc = k + c
            if c == 0:
                re, im = warpgroup_mma_wait(0, deps=[re, im])
            else:
                # p1/p2: chunk c-1's (the loop is unrolled at compile time)
                deps = [re, im, acc1, acc2, p1, p2]  # noqa: F821
                re, im, acc1, acc2, p1, p2 = warpgroup_mma_wait(0, deps=deps)
            mbarrier.arrive(slots_free.index(kc % 2), count=1)  # chunk c's basis, chunk c-1's filters
            # Chunk c+1's basis (the next tile's first after the last chunk) and chunk c's filters.
            mbarrier.wait(chunk_ready.index((kc + 1) % 2), ((kc + 1) // 2) & 1)
            if c + 1 < N_CHUNKS:
                re_n, im_n = _dft_async(
                    fs0, fd0, fs1, fd1, fs2, fd2, c0, s0, c1, s1, c2, s2, (kc + 1) % 2, zero, K1W, K2W
                )
            p = re * re + im * im  # in the frames' scaled domain
            if POWER_MODE == 1:
                p = gl.sqrt(p)
            elif POWER_MODE == 0:
                p = _mufu_pow(p, power * 0.5)  # lg2(0) = -inf, ex2(-inf) = 0
            # Relabel each 8-bin group's columns [0, 4, 1, 5, 2, 6, 3, 7]: the accumulator's registers are
            # then the TF32 A operand's as they stand, so the conversions below move nothing (the host put
            # the filter columns in the same order: mel_k_order).
            p = _tf32_round(p).reshape([BLOCK_T, BLOCK_F // 8, 4, 2]).permute([0, 1, 3, 2])
            p = p.reshape([BLOCK_T, BLOCK_F])
            slot = kc % 2
            p1 = gl.convert_layout(p, P1, assert_trivial=True)
            acc1 = warpgroup_mma(p1, fb1.index(slot).permute((1, 0)), acc1, is_async=True)
            if M2 > 0:
                p2 = gl.convert_layout(p, P2, assert_trivial=True)
                acc2 = warpgroup_mma(p2, fb2.index(slot).permute((1, 0)), acc2, is_async=True)
            else:
                p2 = p1
            if c + 1 < N_CHUNKS:
                re = re_n
                im = im_n
        acc1, acc2, p1, p2 = warpgroup_mma_wait(0, deps=[acc1, acc2, p1, p2])
        k = k + N_CHUNKS
        i += 1  # noqa: SIM113
        acc1 = _unscale(acc1, up1, power, POWER_MODE)
        acc2 = _unscale(acc2, up2, power, POWER_MODE)
        if TRACK_PEAK:
            # Whisper: the signal's largest mel, one atomic a tile (float bits: non-negative, so int order),
            # and the tile's smallest, which tells the floor pass whether anything here can be under the
            # floor (whisper_floor). No masks: the rows past the tile's end repeat its last frame, and the
            # columns past n_mels its last mel (the host repeats that filter: _operands).
            top = gl.max(acc1, axis=1)
            low = gl.min(acc1, axis=1)
            if M2 > 0:
                top = gl.maximum(top, gl.convert_layout(gl.max(acc2, axis=1), top.type.layout))
                low = gl.minimum(low, gl.convert_layout(gl.min(acc2, axis=1), low.type.layout))
            # Each warp's 16 rows reduced within the warp (shuffles), then one atomic a warp: the rows of one
            # tile never meet across warps, which would cost a trip through shared memory behind a barrier.
            top = gl.max(top.reshape([num_warps, BLOCK_T // num_warps]), axis=1)
            low = gl.min(low.reshape([num_warps, BLOCK_T // num_warps]), axis=1)
            # Relaxed: only the next kernel (whisper_floor) reads them, after this one ends. The default
            # (acq_rel) fences each atomic: it waited for the previous tile's stores to reach the GPU
            # (MEMBAR.GPU) and invalidated the SM's L1 (CCTL.IVALL), which the loader's frames reuse.
            lane = gl.zeros_like(top).to(gl.int64)
            gl.atomic_max(sync_ptr + n_tiles + b + lane, top.to(gl.int32, bitcast=True), sem="relaxed")
            # The smallest as 0x7fffffff minus its bits: zero-initialised, raised by atomic_max.
            gl.atomic_max(sync_ptr + tile + lane, 0x7FFFFFFF - low.to(gl.int32, bitcast=True), sem="relaxed")
        dest = (out_ptr, b, stride_ob, stride_om, t0, t_end, n_mels, floor)
        _store_mels(acc1, 0, M1, dest, HAS_FLOOR, NORMAL_FLOOR, LOG, BLOCK_T, num_warps)
        if M2 > 0:
            _store_mels(acc2, M1, M2, dest, HAS_FLOOR, NORMAL_FLOOR, LOG, BLOCK_T, num_warps)


@gluon.jit
def _mel_sm90_kernel(
    x_ptr,
    stride_xb,
    wa_ptr,
    wb_ptr,
    k0_desc,
    k1_desc,
    k2_desc,
    f1_desc,
    f2_desc,
    out_ptr,
    stride_ob,
    stride_om,
    sync_ptr,
    length,
    n_frames,
    t_a,
    t_b,
    hop,
    pad,
    n_mels,
    power,
    floor,
    n_tt,
    n_tiles,
    POWER_MODE: gl.constexpr,
    HAS_FLOOR: gl.constexpr,
    NORMAL_FLOOR: gl.constexpr,
    LOG: gl.constexpr,
    TRACK_PEAK: gl.constexpr,
    PAD_MODE: gl.constexpr,
    N_FFT: gl.constexpr,
    KP: gl.constexpr,
    F_ALL: gl.constexpr,
    K0W: gl.constexpr,
    K1W: gl.constexpr,
    K2W: gl.constexpr,
    M1: gl.constexpr,
    M2: gl.constexpr,
    BLOCK_T: gl.constexpr,
    BLOCK_F: gl.constexpr,
    ROWS: gl.constexpr,
    LOADER_WARPS: gl.constexpr,
    LOADER_REGS: gl.constexpr,
    VEC: gl.constexpr,
    num_warps: gl.constexpr,
):
    """Frames ``[0, n_frames)`` of every signal of ``length`` samples, in ``n_tt`` tiles a signal (``n_tiles``
    in all); the frames ``[t_a, t_b)`` read no padding (``pad`` samples each side, ``PAD_MODE``).
    The basis descriptors cover ``(2·KP, F_ALL)`` fp16 (cos rows, then sin), split in K pieces of
    ``K0W``/``K1W``/``K2W`` rows; the filter descriptors ``(M_TOT, F_ALL)`` TF32 values."""
    gl.static_assert(num_warps == 4, "one warpgroup of products")
    K1A: gl.constexpr = K1W if K1W > 0 else 16  # unused pieces get a minimal buffer
    K2A: gl.constexpr = K2W if K2W > 0 else 16
    M2A: gl.constexpr = M2 if M2 > 0 else 16
    frames0: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_T, K0W], gl.float16)
    frames1: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_T, K1A], gl.float16)
    frames2: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_T, K2A], gl.float16)
    a_s0 = gl.allocate_shared_memory(gl.float16, [BLOCK_T, K0W], frames0)
    a_d0 = gl.allocate_shared_memory(gl.float16, [BLOCK_T, K0W], frames0)
    a_s1 = gl.allocate_shared_memory(gl.float16, [BLOCK_T, K1A], frames1)
    a_d1 = gl.allocate_shared_memory(gl.float16, [BLOCK_T, K1A], frames1)
    a_s2 = gl.allocate_shared_memory(gl.float16, [BLOCK_T, K2A], frames2)
    a_d2 = gl.allocate_shared_memory(gl.float16, [BLOCK_T, K2A], frames2)
    flat: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[0])
    up_rows = gl.allocate_shared_memory(gl.float32, [BLOCK_T], flat)
    peak_rows = gl.allocate_shared_memory(gl.float32, [BLOCK_T], flat)
    c0 = gl.allocate_shared_memory(gl.float16, [2, K0W, BLOCK_F], k0_desc.layout)
    s0 = gl.allocate_shared_memory(gl.float16, [2, K0W, BLOCK_F], k0_desc.layout)
    c1 = gl.allocate_shared_memory(gl.float16, [2, K1A, BLOCK_F], k1_desc.layout)
    s1 = gl.allocate_shared_memory(gl.float16, [2, K1A, BLOCK_F], k1_desc.layout)
    c2 = gl.allocate_shared_memory(gl.float16, [2, K2A, BLOCK_F], k2_desc.layout)
    s2 = gl.allocate_shared_memory(gl.float16, [2, K2A, BLOCK_F], k2_desc.layout)
    fb1 = gl.allocate_shared_memory(gl.float32, [2, M1, BLOCK_F], f1_desc.layout)
    fb2 = gl.allocate_shared_memory(gl.float32, [2, M2A, BLOCK_F], f2_desc.layout)
    # The folded window tables, staged once: the loader re-reads them every tile from shared memory (from
    # global memory the compiler hoists them out of the tile loop into registers, which spill).
    w_a = gl.allocate_shared_memory(gl.float32, [256], flat)
    w_b = gl.allocate_shared_memory(gl.float32, [256], flat)
    kw = gl.arange(0, 256, layout=gl.BlockedLayout([2], [32], [num_warps], [0]))
    w_a.store(gl.load(wa_ptr + kw, mask=kw < KP, other=0.0))
    w_b.store(gl.load(wb_ptr + kw, mask=kw < KP, other=0.0))
    # Barriers start with phase 1 complete, so a producer's first wait on an "empty" one passes at once.
    a_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    a_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    chunk_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    slots_free = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(a_ready, count=1)
    mbarrier.init(a_empty, count=1)
    for j in gl.static_range(2):
        mbarrier.init(chunk_ready.index(j), count=1)
        mbarrier.init(slots_free.index(j), count=1)
    tiles = (x_ptr, stride_xb, n_frames, hop, pad, n_tt, n_tiles)
    gl.warp_specialize(
        [
            (
                _products,
                (
                    tiles,
                    (a_s0, a_d0, a_s1, a_d1, a_s2, a_d2, up_rows, c0, s0, c1, s1, c2, s2, fb1, fb2),
                    (a_ready, a_empty, chunk_ready, slots_free),
                    (out_ptr, stride_ob, stride_om, sync_ptr, n_mels, power, floor),
                    K1W,
                    K2W,
                    M1,
                    M2,
                    BLOCK_T,
                    BLOCK_F,
                    F_ALL,
                    POWER_MODE,
                    HAS_FLOOR,
                    NORMAL_FLOOR,
                    LOG,
                    TRACK_PEAK,
                    num_warps,
                ),
            ),
            (
                _loader,
                (
                    tiles,
                    (length, t_a, t_b),
                    (a_s0, a_d0, a_s1, a_d1, a_s2, a_d2, up_rows, w_a, w_b, peak_rows),
                    (a_ready, a_empty),
                    K0W,
                    K1W,
                    K2W,
                    BLOCK_T,
                    ROWS,
                    VEC,
                    N_FFT,
                    PAD_MODE,
                    LOADER_WARPS,
                ),
            ),
            (
                _tma_issuer,
                (
                    (n_tiles, (k0_desc, k1_desc, k2_desc), f1_desc, f2_desc),
                    ((c0, s0, c1, s1, c2, s2), fb1, fb2),
                    (chunk_ready, slots_free),
                    KP,
                    K0W,
                    K1W,
                    K2W,
                    M1,
                    M2,
                    BLOCK_F,
                    F_ALL,
                ),
            ),
        ],
        [LOADER_WARPS, 1],
        [LOADER_REGS, 24],
    )


def supports(x: torch.Tensor, *, n_fft: int, n_mels: int, precision: str) -> bool:
    """Whether this kernel serves the launch: fp32 input on an sm_90 GPU at "tf32" precision,
    ``MIN_N_FFT <= n_fft <= MAX_N_FFT`` and at most ``MAX_MELS`` mels."""
    return (
        x.is_cuda
        and x.dtype == torch.float32
        and precision == "tf32"
        and MIN_N_FFT <= n_fft <= MAX_N_FFT
        and n_mels <= MAX_MELS
        and torch.cuda.get_device_capability(x.device) == (9, 0)
    )


def k_pieces(kp: int) -> tuple[int, int, int]:
    """``kp`` (a multiple of 16) as up to three power-of-two wgmma K pieces, largest first, zeros after:
    208 → (128, 64, 16)."""
    units = kp // 16
    widths = [16 << b for b in range(units.bit_length() - 1, -1, -1) if units >> b & 1]
    return tuple(widths + [0] * (3 - len(widths)))


def mel_k_order(width: int) -> torch.Tensor:
    """The filter columns in the order of the products' TF32 A operand: in each group of 8 bins, bin
    ``2a + b`` of the DFT accumulator is the operand's column ``4b + a`` (a relabelling of its registers,
    no data movement), so column ``k`` takes bin ``[0, 2, 4, 6, 1, 3, 5, 7][k]``. ``width``: a multiple
    of 8. ``mel_k_order(16)`` → ``[0, 2, 4, 6, 1, 3, 5, 7, 8, 10, …]``."""
    within = torch.tensor([0, 2, 4, 6, 1, 3, 5, 7])
    return (torch.arange(0, width, 8)[:, None] + within).reshape(-1)


def _operands(window, filters, *, n_fft, scale, power, m1, m2):
    """The folded window tables, the fp16 (cos, sin) basis ``(2·KP, F_ALL)``, the TF32 filters ``(M_TOT,
    F_ALL)`` with ``scale^power`` folded in (rows past the last mel repeat it), and their TMA descriptors;
    cached per operands."""
    half = n_fft // 2 + 1
    kp = cdiv(half, 16) * 16
    f_all = cdiv(kp, BLOCK_F) * BLOCK_F
    m_tot = m1 + m2

    def build():
        k_pad = cdiv(half, 32) * 32
        wa, wb, (cos, _, _), (sin, _, _), _ = kmel._packed(window, filters, n_fft, 1.0, k_pad, kp, m_tot)
        basis = torch.zeros(2, kp, f_all, dtype=torch.float16, device=window.device)
        basis[0, :, :kp] = cos[:kp]
        basis[1, :, :kp] = sin[:kp]
        basis = basis.view(2 * kp, f_all)
        fbt = torch.zeros(m_tot, f_all, dtype=torch.float32, device=window.device)
        fbt[:, :kp] = kmel._filter_planes(filters, scale**power, kp, m_tot)[1].t()
        # Columns past the last mel repeat its filter, whose values the kernel never stores: they can then
        # stand in the tile's minimum and maximum unmasked.
        fbt[filters.shape[1] :] = fbt[filters.shape[1] - 1]
        fbt = fbt[:, mel_k_order(f_all).to(fbt.device)].contiguous()
        k0, k1, k2 = k_pieces(kp)

        def desc(t, rows):
            dtype = gl.float16 if t.dtype == torch.float16 else gl.float32
            layout = gl.NVMMASharedLayout.get_default_for([rows, BLOCK_F], dtype)
            return TensorDescriptor.from_tensor(t, [rows, BLOCK_F], layout)

        descs = (
            desc(basis, k0),
            desc(basis, k1 or 16),
            desc(basis, k2 or 16),
            desc(fbt, m1),
            desc(fbt, m2 or 16),
        )
        return wa, wb, basis, fbt, descs, (kp, f_all, k0, k1, k2)

    key = ("sm90", id(window), kmel.version(window), id(filters), kmel.version(filters), n_fft, scale, power)
    return kmel.memoized(_OPERANDS, key, (window, filters), build)


_OPERANDS: OrderedDict = OrderedDict()


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
) -> torch.Tensor:
    """:func:`nbxsig.kernels.mel.mel_spectrogram` on ``x (B, L)`` through this kernel, which serves it
    (:func:`supports`: the caller checked): ``(B, n_mels, n_frames)``. Lean on purpose: on a second of
    audio the host's time per call is most of the call."""
    check_launchable(x, window, filters)
    x = x.contiguous()  # the loads assume unit sample stride
    batch, length = x.shape
    pad, n_frames, t_a, t_b = kmel.frame_range(
        length, n_fft=n_fft, hop_length=hop_length, center=center, drop_last=drop_last
    )
    n_mels = filters.shape[1]
    out = empty_output((batch, n_mels, n_frames), dtype=x.dtype, device=x.device)
    if n_frames <= 0:
        return out
    # Whisper: each tile's smallest mel and, after them, each signal's largest (zeros: the kernel raises them;
    # float bits); otherwise nothing is tracked and the kernel never reads its buffer.
    n_tiles = cdiv(n_frames, BLOCK_T) * batch
    if whisper:
        sync = torch.zeros(n_tiles + batch, dtype=torch.int32, device=x.device)
    else:
        sync = torch.empty(1, dtype=torch.int32, device=x.device)
    launch(
        x, out, sync, window=window, filters=filters, n_fft=n_fft, hop_length=hop_length,
        pad=pad, pad_mode=kmel._PAD_MODES[pad_mode], power=power, scale=scale, floor=floor, n_frames=n_frames,
        t_a=t_a, t_b=t_b, log_mode=kmel.log_mode(log, whisper=whisper), whisper=whisper,
    )  # fmt: skip
    if whisper:
        whisper_floor(out, sync)
    return out


def launch(
    x,
    out,
    sync,
    *,
    window,
    filters,
    n_fft,
    hop_length,
    pad,
    pad_mode,
    power,
    scale,
    floor,
    n_frames,
    t_a,
    t_b,
    log_mode,
    whisper,
) -> None:
    """Frames ``[0, n_frames)`` of the contiguous fp32 ``x (B, L)`` into ``out (B, n_mels, n_frames)``, centre
    padding of ``pad`` samples each side by ``pad_mode`` (a :data:`nbxsig.kernels.mel._PAD_MODES` code), of
    which the frames ``[t_a, t_b)`` read none. ``sync``: for Whisper, ``n_tiles + B`` zeros, where the kernel
    puts each tile's smallest mel and each signal's largest for :func:`whisper_floor` (which says how)."""
    n_mels = filters.shape[1]
    m1, m2 = kmel.mel_blocks(n_mels)
    wa, wb, _, _, descs, (kp, f_all, k0, k1, k2) = _operands(
        window, filters, n_fft=n_fft, scale=scale, power=power, m1=m1, m2=m2
    )
    batch = x.shape[0]
    n_tt = cdiv(n_frames, BLOCK_T)
    n_tiles = n_tt * batch
    aligned = hop_length % 4 == 0 and pad % 4 == 0 and x.stride(0) % 4 == 0 and x.data_ptr() % 16 == 0
    args = (
        x,
        x.stride(0),
        wa,
        wb,
        *descs,
        out,
        out.stride(0),
        out.stride(1),
        sync,
        x.shape[1],
        n_frames,
        t_a,
        t_b,
        hop_length,
        pad,
        n_mels,
        float(power),
        float(floor or 0.0),
        n_tt,
        n_tiles,
    )
    constexprs = dict(
        POWER_MODE=kmel.power_mode(power),
        HAS_FLOOR=floor is not None,
        NORMAL_FLOOR=floor is not None and floor >= torch.finfo(torch.float32).tiny,
        LOG=log_mode,
        TRACK_PEAK=whisper,
        PAD_MODE=pad_mode,
        N_FFT=n_fft,
        KP=kp,
        F_ALL=f_all,
        K0W=k0,
        K1W=k1,
        K2W=k2,
        M1=m1,
        M2=m2,
        BLOCK_T=BLOCK_T,
        BLOCK_F=BLOCK_F,
        ROWS=ROWS,
        LOADER_WARPS=LOADER_WARPS,
        LOADER_REGS=LOADER_REGS,
        VEC=aligned,
    )
    _kernel_launch((min(n_tiles, sm_count(x.device)), 1), args, constexprs, 4, options={"maxnreg": _MAXNREG})


# Through the compiled handle: Gluon's launch path (argument binding, specialization, the five descriptors)
# is host time on every call (~18 µs of a 1-s clip's ~170 µs per call on an H100).
_kernel_launch = CachedLaunch(_mel_sm90_kernel)


@triton.jit
def _whisper_floor_kernel(
    out_ptr, sync_ptr, n_tt, n_tiles, n_frames, n_mels, BLOCK_T: tl.constexpr, BLOCK_M: tl.constexpr
):
    """Whisper's floor ``max(v, whisper_floor_value(peak))`` on one ``BLOCK_T``-frame tile of the
    contiguous ``out (B, n_mels, n_frames)`` of stored ``(log10(max(mel, 1e-10)) + 4) / 4`` values, where the
    tile's smallest mel says it can change any: else the tile is not read at all."""
    tile = tl.program_id(0)
    b = (tile // n_tt).to(tl.int64)
    peak = tl.maximum(tl.load(sync_ptr + n_tiles + b).to(tl.float32, bitcast=True), 1e-10)
    lowest = tl.maximum((0x7FFFFFFF - tl.load(sync_ptr + tile)).to(tl.float32, bitcast=True), 1e-10)
    # A stored value is under the floor only where its mel is under peak · 1e-8 (both clamped as stored); the
    # margin of 1e-3 (1e-4 in stored units) is far above the kernel's log error (lg2.approx, ~1e-7).
    if lowest < peak * 1.001e-8:
        t = (tile % n_tt) * BLOCK_T + tl.arange(0, BLOCK_T)
        m = tl.arange(0, BLOCK_M)
        low = kmel.whisper_floor_value(peak)
        ptrs = out_ptr + b * n_mels * n_frames + m[:, None] * n_frames + t[None, :]
        ok = (m[:, None] < n_mels) & (t[None, :] < n_frames)
        v = tl.load(ptrs, mask=ok, other=0.0)
        tl.store(ptrs, tl.zeros_like(v) + low, mask=ok & (v < low))  # NaN stays NaN, as in torch.maximum


_whisper_floor_launch = CachedLaunch(_whisper_floor_kernel)


def whisper_floor(out: torch.Tensor, sync: torch.Tensor) -> None:
    """Whisper's floor, in place, on the contiguous ``out (B, n_mels, n_frames)`` the kernel stored, from
    ``sync`` (each 64-frame tile's smallest mel as ``0x7FFFFFFF`` minus its float bits, then each signal's
    largest as its float bits): the tiles whose smallest mel is under the floor are read and rewritten, the
    others not even read -- on speech and noise that is most of them, against a full pass over the output
    (one read, 61 MB at 64 × 30 s)."""
    batch, n_mels, n_frames = out.shape
    n_tt = cdiv(n_frames, BLOCK_T)
    constexprs = {"BLOCK_T": BLOCK_T, "BLOCK_M": next_pow2(n_mels)}
    args = (out, sync, n_tt, n_tt * batch, n_frames, n_mels)
    _whisper_floor_launch((n_tt * batch, 1), args, constexprs, 4)
