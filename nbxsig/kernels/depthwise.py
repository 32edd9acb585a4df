# Triton's code generator builds tuples by concatenation only (it rejects starred expressions).
# ruff: noqa: RUF005
"""Depthwise-convolution stencils in Triton (twins of :mod:`nbxsig.reference.depthwise`).

One forward kernel serves every depthwise op of :mod:`nbxsig.filters` (a 1-D signal is an image of one
row). Each program computes an output tile ``BLOCK_C × BLOCK_H × BLOCK_W`` (channels × rows × columns)::

    y[n, o, h, w] = Σ_j Σ_ik  w[o·J + j, i, k] · x̃[n, (o // DIV)·J + j, h·sy + i - top, w·sx + k - left]

Forward: ``J = 1``, ``DIV = M`` (channel multiplier). The input gradient of a stride-1 call is the same
kernel on the output gradient with flipped taps, ``J = M``, ``DIV = 1``: every input channel sums its
``M`` filters' contributions, so no atomics are needed.

* Tiles put the contiguous axis fastest: columns for NCHW and 1-D, channels for channels_last, so loads
  coalesce; the strides are read, never assumed (non-contiguous views need no copy).
* Boundaries are index maps applied to the row and column index *vectors* (``BLOCK_H + BLOCK_W`` integer
  ops per tap, not one per element); tiles whose column halo lies inside the image take a branch with no
  column mapping, so the contiguity of the column offsets stays visible to the compiler (vector loads).
* Taps along the row are unrolled at compile time up to ``_UNROLL_MAX`` and looped beyond (the 129-tap
  FIR would otherwise compile for a long time); multiplications and sums run in float32 whatever the input
  dtype (products in float16 lose bits on some backends), rounded once on the store.
* 64-bit offsets for the batch, channel and row terms (a 32×64×512×512 tensor has 2^29 elements; with
  a larger batch the element offset passes 2^31), 32-bit for columns.

The taps gradient is a per-channel reduction over batch and positions (``_wgrad_kernel``): one program
per (image and chunk of positions, tap block, output channel) writes a partial sum, and the partials are
added in a fixed order, so it is deterministic.
"""

from __future__ import annotations

from functools import lru_cache

import torch
import triton
import triton.language as tl

from ..errors import bad_value
from ..reference.depthwise import BOUNDARIES, is_channels_last, shared_host_taps
from ..reference.depthwise import depthwise_conv2d as _depthwise_reference
from ..reference.depthwise import resample as _resample_reference
from . import _runtime
from ._launch import CachedLaunch, divisible_by_16, prefetch_l2
from ._runtime import (
    cdiv,
    check_launchable,
    empty_output,
    grid_slices,
    next_pow2,
    resident_programs,
    sm_count,
)

_BOUNDARY_CODE = {
    name: i for i, name in enumerate(BOUNDARIES)
}  # zeros, reflect, symmetric, replicate, circular
# Up to this many taps per row are unrolled (tl.static_range); above it a runtime loop keeps compile time
# (measured offline for sm_90: a 31-tap unrolled row took > 100 s) and instruction-cache footprint bounded.
_UNROLL_MAX = 8
# 1-D filters with at least this many taps run as matrix products on tensor cores (see
# _fir_toeplitz_kernel / _bank_kernel); banks of at least _BANK_MIN_FILTERS filters per channel use the
# shared-input form. Chosen from the cost model (the direct stencil issues one L1 load per tap and output,
# the Toeplitz product ~3·(128 + K) tensor-core MACs); the bench suite measures both paths at 33/65/129 taps.
_DOT_MIN_TAPS = 48
_BANK_MIN_FILTERS = 16
# Tiles of those kernels, (R, T, BU, num_warps) and (BL, BK, num_warps), chosen from the bench suite's
# variants on the H200 at 5335111 (2026-12-03): FIR 32×64×160000, 129 taps -- (64, 64, 32, 4) 2034 µs,
# (128, 32, 32, 4) 2389, (128, 128, 32, 8) 3834, the previous (64, 128, 32, 8) 5416; bank 1→64 on
# 32×160000 -- (128, 32, 4) 1881 µs, (256, 32, 8) 2057, the previous (128, 32, 8) 2259.
_TOEPLITZ_TILE = (64, 64, 32, 4)
_BANK_TILE = (128, 32, 4)
# Separable filters without gradients: up to this many taps per side in one fused pass (``_sep_kernel``),
# longer ones as two passes over plane chunks with at most _SEP_CHUNK_BYTES of float32 intermediate.
# The fused band filters (ROWS-1+KH) input rows per ROWS output rows, KW loads each: cheap for short
# kernels, ~2x the two-pass work at 31 taps (cost model; the bench measures both forms at 5 and 31 taps).
_FUSED_SEP_MAX_TAPS = 8
# The fused band unrolled at compile time (``_sep_static_band``) while its loads, (ROWS-1+KH)·KW per
# program, stay at most this many: 5×5 at 4 or 8 rows (40 / 60), not 7×7 at 8 rows (98). Offline for
# sm_90 the looped band compiles to a runtime loop over the band rows whose loads wait row by row;
# unrolled, every row's loads can be in flight at once and the zero-weight row taps disappear.
_SEP_STATIC_MAX_LOADS = 64
# Columns per program of the unrolled band (NCHW): H200 at 1e74c26, gaussian_blur2d 5×5 reflect fp32
# 8×3×2048×2048 (pad + F.conv2d 2176 µs): unrolled (1, 4, 256) 582.3 µs, (1, 8, 256) 614.3, (1, 8, 512)
# 620.3, (1, 4, 512) 726.0 (214 registers at 512 columns: 2 programs per SM); the looped band 688.4.
_SEP_STATIC_BLOCK_W = 256
# 2-D kernels up to this many taps (J = 1) run fully unrolled (_dw_static_kernel): compiled offline for
# sm_90, 3×3 takes ~1 s and issues 2x fewer instructions per tile than the looped band (weights loaded once,
# no zero-weight rows); 7×7 took 15-55 s to compile, so larger kernels keep the looped band.
_STATIC_MAX_TAPS = 9
_SEP_CHUNK_BYTES = 32 << 20
# NCHW, stride 1, forward: the ring kernel (_ring_kernel) for 2-D kernels with at most _RING_MAX_TAPS taps
# and separable ones with at most _FUSED_SEP_MAX_TAPS per side (the taps are unrolled at compile time:
# KH·KW multiply-adds per input row). A program takes a band of at most about _RING_ROWS output rows
# (_RING_ROWS_TALL from _RING_TALL_TAPS rows of taps) and _RING_BLOCK_W columns (_RING_BLOCK_W_TALL),
# two columns per thread. H200 (bench.filters, cuDNN / pad + F.conv2d in the same process), µs by
# (CYCLES, BLOCK_W, num_warps), zero padding:
#   fp32 7×7 32×64×512×512 -- (38, 512, 8) 1924, (20, 512, 8) 1941, (14, 512, 8) 1982, (20, 256, 4) 2029,
#     (14, 256, 4) 2060 (the band kernel: 7165);
#   fp16 7×7 same -- 1881, 1895, 1943, 1933, 1974 (6832);
#   fp16 7×7 8×384×128×128 -- (10, 128, 2) 209, (20, 128, 2) 212, (20, 128, 4) 223, (10, 128, 4) 230 (886);
#   fp32 3×3 512×512 -- (8, 512, 4) 1189, (30, 256, 4) 1252, (44, 256, 4) 1242, (44, 512, 8) 1242;
#   5×5 blur 8×3×2048×2048, reflect -- (11, 128, 2) 349, (20, 256, 4) 355, (27, 256, 4) 372, (27, 512, 8) 381
#     (the band: 581).
# Tall kernels gain from long bands (a smaller share of halo rows) and wide tiles; short ones do not.
_RING = True
_RING_MAX_TAPS = 64
_RING_ROWS = 96
_RING_BLOCK_W = 256
_RING_TALL_TAPS = 7
_RING_ROWS_TALL = 256
_RING_BLOCK_W_TALL = 512
# Separable filters with more than _FUSED_SEP_MAX_TAPS taps on a side and at most _RING_LONG_MAX_TAPS down
# the column run on a shift register of output rows (_shift_rows), where the row pads are shorter than the
# row. On unit-stride rows (_long_rows_kernel) a thread holds 4 columns when the taps are kernel arguments
# (shared_host_taps: the filters' Gaussian and box taps), 2 when it loads them (_LONG_ROWS_ARGS,
# _LONG_ROWS_LOADED: BLOCK_W, num_warps, register caps of the interior and of the edge tiles), and
# filters each row from registers: the tiles whose row windows lie inside the row (vector loads of the
# window, L2 asked for the row _LONG_PREFETCH rows ahead), then the edge tiles (positions mapped), as two
# launches, each of as many programs as the GPU holds at once (at the kernel's registers), the rows
# shared out evenly. Other strides run on _ring_kernel in bands of about _RING_ROWS_LONG rows and
# _RING_BLOCK_W_LONG columns, looping over the row taps with a load per tap (_long_row, unrolled by
# _LONG_UNROLL). H200, 31×31 reflect blur 8×3×2048×2048 fp32, µs by (CYCLES, BLOCK_W, num_warps) of the
# banded grid the rows had before _long_rows_kernel:
#   a load per tap everywhere (162a995) -- (10, 128, 2) 1844, (10, 64, 1) 1800, (5, 128, 2) 1819;
#   2 columns from registers, taps loaded (02f4785) -- (5, 128, 2) 1167, (10, 128, 2) 1281 (1441 without
#     the prefetch), 4 columns at one warp (255 registers) 1479-2254; a next-row register lookahead
#     (202 registers) 1522;
#   taps as arguments (e62b834) -- 4 columns (5, 128, 1) 805 (196 registers), (8, 128, 1) 834-837,
#     (3, 128, 1) 901, (5, 256, 2) 881, (5, 512, 4) 989; 2 columns (5, 128, 2) 1039 (124 registers; the
#     taps loaded instead: 1105); prefetch 0 / 2 / 4 / 8
#     rows ahead 1187 / 802 / 805 / 811; the edge tiles at a tile of their own (2-5 cycles, 32-128
#     columns, 1-2 warps; a load per tap at one column per thread) 829-1070.
# Nsight Compute at 02f4785 (5, 128, 2): 167 registers (62 of them the taps, the same in every thread) allowed
# 12 warps per SM, the schedulers issued on 48% of cycles. Nothing between 9 and 30 taps was measured.
# _long_rows_kernel (H200, same blur, A/B in one process against e62b834's 800-805 µs): 4 columns, taps as
# arguments, 232 registers (8 warps an SM) 701 µs -- the interior launch 494, the edge one (255
# registers) 212 -- then 639 with the edge tiles' inner blocks loaded as vectors (edge launch 149; 642 at
# 232 edge registers, 669 at 200); capped at 168 registers (12 warps, spilling) 959; 2 or 3 programs per
# slot 779 / 828; 8 columns over 2 warps 802. Taps loaded
# (per-channel filters): 2 columns at 168 registers 867, then 899 with the vector blocks on the edges
# (1100 before).
_RING_LONG_MAX_TAPS = 32
_RING_ROWS_LONG = 120
_RING_BLOCK_W_LONG = 128
_LONG_UNROLL = 8
_LONG_PREFETCH = 4
_LONG_ROWS_ARGS = (128, 1, 232, 255)
_LONG_ROWS_LOADED = (128, 2, 168, 255)
# Programs of _long_rows_kernel under the interpreter (no GPU to fill): a few, so shares cross strips.
_LONG_PROGRAMS_CPU = 5
# Separable filters without gradients, stride 1, not channels_last, with at least this many taps on a side,
# that the ring does not take (more than _RING_LONG_MAX_TAPS down the column, or row pads as long as the row):
# both passes fused as Toeplitz products on tensor cores (_sep_dot_kernel), tile (BH, BW, BU, BV,
# num_warps). Measured on the H200 at 5335111 (2026-12-03), 8×3×2048×2048 reflect fp32: 31×31 took 2466 µs
# at (64, 32, 64, 16, 4) -- one column chunk covers the halo -- against 5145 µs for the two-pass stencil
# (other tiles 2619-4883 µs); 5×5 took 1893 µs against 687 µs for the fused stencil. Its cost barely
# depends on the tap count while the stencils' grows with it, so it takes the long kernels; no size
# between 5 and 31 taps was measured, hence the threshold at 31.
_SEP_DOT_MIN_TAPS: int | None = 31
_SEP_DOT_TILE = (64, 32, 64, 16, 4)


@triton.jit
def _map_index(i, n, BOUNDARY: tl.constexpr):
    """Index into an axis of length ``n`` for positions ``i`` (any integers) and whether it reads data."""
    if BOUNDARY == 0:  # zeros
        ok = (i >= 0) & (i < n)
        idx = i
    elif BOUNDARY == 1:  # reflect: period 2n-2 (n == 1: every position reads sample 0)
        p = tl.maximum(2 * n - 2, 1)
        # ((i % p) + p) % p is a floor-modulo under both C (GPU) and numpy (interpreter) semantics.
        m = ((i % p) + p) % p
        idx = tl.where(m >= n, p - m, m)
        ok = idx >= 0
    elif BOUNDARY == 2:  # symmetric: period 2n
        p = 2 * n
        m = ((i % p) + p) % p
        idx = tl.where(m >= n, p - 1 - m, m)
        ok = idx >= 0
    elif BOUNDARY == 3:  # replicate
        idx = tl.minimum(tl.maximum(i, 0), n - 1)
        ok = idx >= 0
    else:  # circular
        idx = ((i % n) + n) % n
        ok = idx >= 0
    return idx, ok


# The tensor-core kernels' operand tiles hold structural zeros (Toeplitz bands, phase blocks), so a non-finite
# input sample came out as NaN (0·inf) in outputs beyond the filter's reach, where F.conv1d/F.conv2d give
# finite values; and their tf32x3 dots split a = big + small with small = inf - inf = NaN for a = ±inf
# (Triton 3.6's F32DotTC pass zeroes NaN correction terms, keeping ±inf within reach; only _bank_kernel,
# whose product has no structural zeros, relies on it). So the main loops stay as they are, and a tile with
# a non-finite output (a uniform branch, not taken on finite data) is summed again tap by tap in float32 --
# F.conv's values -- in chunks of about 1024 outputs (``*_refilter``): the whole 64×64 tile at once took
# _fir_toeplitz_kernel from 185 to 255 registers with a spill (sm_90, offline).
@triton.jit
def _any_nonfinite(acc):
    """Whether the tile ``acc`` may hold a NaN or ±inf: its sum is NaN or ±inf (one scalar for the whole
    tile; fewer registers than an elementwise test). A finite tile whose sum overflows also answers yes,
    and is summed again to the same values within rounding."""
    total = tl.sum(tl.sum(acc, axis=1), axis=0)
    return (total != total) | (tl.abs(total) == float("inf"))


@triton.jit
def _col_load(
    x_row, k, ow, sxw, stride_w, left, W, wmask, rm, BOUNDARY: tl.constexpr, MAP_W: tl.constexpr
):  # fmt: skip
    """Column tap ``k`` of the input rows ``x_row``: ``x̃[row, w·sx + k - left]`` as float32, the
    columns mapped at the edges when ``MAP_W`` (tiles that touch an edge), zero where masked."""
    col = ow * stride_w + (k - left)
    if MAP_W:
        col, cok = _map_index(col, W, BOUNDARY)
        cm = wmask & cok
    else:
        cm = wmask
    return tl.load(x_row + (col * sxw)[None, :], mask=rm & cm[None, :], other=0.0).to(tl.float32)


@triton.jit
def _tap_into_row(acc, xv, w_row, d, k, cmask, w_ts, KH: tl.constexpr, KW: tl.constexpr, i):
    """``acc + w[i, k]·xv``: input row ``d`` of the band is row ``i`` of this output row's taps. Rows
    outside ``0..KH-1`` are skipped by a uniform branch, not given a zero weight: ``0·inf`` would carry
    an infinite pixel as NaN into outputs beyond the filter's reach."""
    if (i >= 0) & (i < KH):
        w = tl.load(w_row + (i * KW + k) * w_ts, mask=cmask, other=0.0)
        acc = acc + w[:, None] * xv
    return acc


@triton.jit
def _tap_into_rows(
    a0, a1, a2, a3, a4, a5, a6, a7, xv, w_row, d, k, cmask, w_ts,
    KH: tl.constexpr, KW: tl.constexpr, STRIDE_H: tl.constexpr, ROWS: tl.constexpr,
):  # fmt: skip
    """Column tap ``k`` of input row ``d`` into each of the ``ROWS`` output rows (row ``r`` uses tap row
    ``d - r·STRIDE_H``); the others come back as they were."""
    rows = (a0, a1, a2, a3, a4, a5, a6, a7)
    out = ()
    for r in tl.static_range(8):
        if r < ROWS:
            out = out + (_tap_into_row(rows[r], xv, w_row, d, k, cmask, w_ts, KH, KW, d - r * STRIDE_H),)
        else:
            out = out + (rows[r],)
    return out


@triton.jit
def _rows(
    a0,
    a1,
    a2,
    a3,
    a4,
    a5,
    a6,
    a7,
    x_base,
    w_ptr,
    co,
    h0,
    ow,
    cmask,
    wmask,
    H,
    W,
    DIV,
    sxc,
    sxh,
    sxw,
    stride_w,
    top,
    left,
    w_rs,
    w_ts,
    KH: tl.constexpr,
    KW: tl.constexpr,
    J: tl.constexpr,
    STRIDE_H: tl.constexpr,
    ROWS: tl.constexpr,
    BOUNDARY: tl.constexpr,
    MAP_W: tl.constexpr,
    UNROLL: tl.constexpr,
):
    """Accumulate ``ROWS`` output rows ``a0..a{ROWS-1}`` (each ``[BLOCK_C, BLOCK_W]``). Every input row of
    the band is loaded once per column tap and feeds each output row it belongs to: ``(ROWS-1)·sy + KH``
    row loads per column tap instead of ``ROWS·KH`` (7×7: 2.8× fewer L1 loads at 4 rows). The band loop
    is a runtime loop and rows a tap does not reach are skipped by a uniform branch (``_tap_into_row``;
    until the twentieth round they got a zero weight, whose ``0·inf`` spread an infinite pixel as NaN):
    the fully unrolled form took 30-100 s to compile per specialisation."""
    for jj in range(J):
        ci = (co // DIV) * J + jj
        c_off = ci.to(tl.int64) * sxc
        w_row = w_ptr + (co * J + jj) * w_rs
        for d in range((ROWS - 1) * STRIDE_H + KH):
            ridx, rok = _map_index(h0 * STRIDE_H + (d - top), H, BOUNDARY)
            x_row = x_base + c_off[:, None] + ridx.to(tl.int64) * sxh
            rm = cmask[:, None] & rok
            if UNROLL:
                for k in tl.static_range(KW):
                    xv = _col_load(x_row, k, ow, sxw, stride_w, left, W, wmask, rm, BOUNDARY, MAP_W)
                    a0, a1, a2, a3, a4, a5, a6, a7 = _tap_into_rows(
                        a0, a1, a2, a3, a4, a5, a6, a7, xv, w_row, d, k, cmask, w_ts, KH, KW, STRIDE_H, ROWS
                    )
            else:
                for k in range(KW):
                    xv = _col_load(x_row, k, ow, sxw, stride_w, left, W, wmask, rm, BOUNDARY, MAP_W)
                    a0, a1, a2, a3, a4, a5, a6, a7 = _tap_into_rows(
                        a0, a1, a2, a3, a4, a5, a6, a7, xv, w_row, d, k, cmask, w_ts, KH, KW, STRIDE_H, ROWS
                    )
    return a0, a1, a2, a3, a4, a5, a6, a7


@triton.jit
def _store_row(y_ptr, y_base, a, r, h0, HO, syh, mask):
    h = h0 + r
    tl.store(y_ptr + y_base + h.to(tl.int64) * syh, a.to(y_ptr.dtype.element_ty), mask=mask & (h < HO))


@triton.jit
def _dw_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    CO,
    H,
    W,
    HO,
    WO,
    DIV,
    sxn,
    sxc,
    sxh,
    sxw,
    syn,
    syc,
    syh,
    syw,
    stride_w,
    top,
    left,
    w_rs,
    w_ts,
    KH: tl.constexpr,
    KW: tl.constexpr,
    J: tl.constexpr,
    STRIDE_H: tl.constexpr,
    BOUNDARY: tl.constexpr,
    UNROLL: tl.constexpr,
    BLOCK_C: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK_W: tl.constexpr,
):
    n_wt = tl.cdiv(WO, BLOCK_W)
    h0 = (tl.program_id(0) // n_wt) * ROWS
    pid_w = tl.program_id(0) % n_wt
    co = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    ow = pid_w * BLOCK_W + tl.arange(0, BLOCK_W)
    n = tl.program_id(2).to(tl.int64)
    cmask = co < CO
    wmask = ow < WO
    x_base = x_ptr + n * sxn
    a0 = tl.zeros((BLOCK_C, BLOCK_W), dtype=tl.float32)
    a1 = tl.zeros((BLOCK_C, BLOCK_W), dtype=tl.float32)
    a2 = tl.zeros((BLOCK_C, BLOCK_W), dtype=tl.float32)
    a3 = tl.zeros((BLOCK_C, BLOCK_W), dtype=tl.float32)
    a4 = tl.zeros((BLOCK_C, BLOCK_W), dtype=tl.float32)
    a5 = tl.zeros((BLOCK_C, BLOCK_W), dtype=tl.float32)
    a6 = tl.zeros((BLOCK_C, BLOCK_W), dtype=tl.float32)
    a7 = tl.zeros((BLOCK_C, BLOCK_W), dtype=tl.float32)
    # Column halo of this tile inside the image: no column mapping, offsets stay plain arithmetic.
    first = pid_w * BLOCK_W * stride_w - left
    last = (pid_w * BLOCK_W + BLOCK_W - 1) * stride_w + KW - 1 - left
    if (first >= 0) & (last < W):
        a0, a1, a2, a3, a4, a5, a6, a7 = _rows(
            a0, a1, a2, a3, a4, a5, a6, a7, x_base, w_ptr, co, h0, ow, cmask, wmask, H, W, DIV, sxc, sxh, sxw,
            stride_w, top, left, w_rs, w_ts, KH, KW, J, STRIDE_H, ROWS, BOUNDARY, False, UNROLL,
        )  # fmt: skip
    else:
        a0, a1, a2, a3, a4, a5, a6, a7 = _rows(
            a0, a1, a2, a3, a4, a5, a6, a7, x_base, w_ptr, co, h0, ow, cmask, wmask, H, W, DIV, sxc, sxh, sxw,
            stride_w, top, left, w_rs, w_ts, KH, KW, J, STRIDE_H, ROWS, BOUNDARY, True, UNROLL,
        )  # fmt: skip
    y_base = n * syn + (co.to(tl.int64) * syc)[:, None] + (ow * syw)[None, :]
    mask = cmask[:, None] & wmask[None, :]
    _store_row(y_ptr, y_base, a0, 0, h0, HO, syh, mask)
    if ROWS > 1:
        _store_row(y_ptr, y_base, a1, 1, h0, HO, syh, mask)
    if ROWS > 2:
        _store_row(y_ptr, y_base, a2, 2, h0, HO, syh, mask)
        _store_row(y_ptr, y_base, a3, 3, h0, HO, syh, mask)
    if ROWS > 4:
        _store_row(y_ptr, y_base, a4, 4, h0, HO, syh, mask)
        _store_row(y_ptr, y_base, a5, 5, h0, HO, syh, mask)
        _store_row(y_ptr, y_base, a6, 6, h0, HO, syh, mask)
        _store_row(y_ptr, y_base, a7, 7, h0, HO, syh, mask)


@triton.jit
def _static_tap(
    a, w_row, xv, cmask, i: tl.constexpr, k: tl.constexpr, w_ts, KH: tl.constexpr, KW: tl.constexpr
):
    """``a += w[i, k] · xv`` when ``0 <= i < KH`` (decided at compile time: no zero-weight multiply-adds)."""
    if i >= 0 and i < KH:
        a += tl.load(w_row + (i * KW + k) * w_ts, mask=cmask, other=0.0)[:, None] * xv
    return a


@triton.jit
def _static_band(
    a0, a1, a2, a3, a4, a5, a6, a7, x_base, w_ptr, co, h0, ow, cmask, wmask, H, W, DIV, sxc, sxh, sxw,
    stride_w, top, left, w_rs, w_ts,
    KH: tl.constexpr, KW: tl.constexpr, STRIDE_H: tl.constexpr, ROWS: tl.constexpr,
    BOUNDARY: tl.constexpr, MAP_W: tl.constexpr,
):  # fmt: skip
    """``_rows`` with the band and the taps unrolled at compile time (short kernels, ``J = 1``): every
    tap an output row does not reach is skipped at compile time, and a tap's weight load has a
    compile-time offset, so the compiler keeps the ``KH·KW`` weights in registers instead of reloading
    them for every (band row, column tap, output row)."""
    c_off = (co // DIV).to(tl.int64) * sxc
    w_row = w_ptr + co * w_rs
    for d in tl.static_range((ROWS - 1) * STRIDE_H + KH):
        ridx, rok = _map_index(h0 * STRIDE_H + (d - top), H, BOUNDARY)
        x_row = x_base + c_off[:, None] + ridx.to(tl.int64) * sxh
        rm = cmask[:, None] & rok
        for k in tl.static_range(KW):
            xv = _col_load(x_row, k, ow, sxw, stride_w, left, W, wmask, rm, BOUNDARY, MAP_W)
            a0 = _static_tap(a0, w_row, xv, cmask, d, k, w_ts, KH, KW)
            if ROWS > 1:
                a1 = _static_tap(a1, w_row, xv, cmask, d - STRIDE_H, k, w_ts, KH, KW)
            if ROWS > 2:
                a2 = _static_tap(a2, w_row, xv, cmask, d - 2 * STRIDE_H, k, w_ts, KH, KW)
                a3 = _static_tap(a3, w_row, xv, cmask, d - 3 * STRIDE_H, k, w_ts, KH, KW)
            if ROWS > 4:
                a4 = _static_tap(a4, w_row, xv, cmask, d - 4 * STRIDE_H, k, w_ts, KH, KW)
                a5 = _static_tap(a5, w_row, xv, cmask, d - 5 * STRIDE_H, k, w_ts, KH, KW)
                a6 = _static_tap(a6, w_row, xv, cmask, d - 6 * STRIDE_H, k, w_ts, KH, KW)
                a7 = _static_tap(a7, w_row, xv, cmask, d - 7 * STRIDE_H, k, w_ts, KH, KW)
    return a0, a1, a2, a3, a4, a5, a6, a7


@triton.jit
def _dw_static_kernel(
    x_ptr, w_ptr, y_ptr, CO, H, W, HO, WO, DIV, sxn, sxc, sxh, sxw, syn, syc, syh, syw, stride_w, top,
    left, w_rs, w_ts,
    KH: tl.constexpr, KW: tl.constexpr, STRIDE_H: tl.constexpr, BOUNDARY: tl.constexpr,
    BLOCK_C: tl.constexpr, ROWS: tl.constexpr, BLOCK_W: tl.constexpr,
):  # fmt: skip
    """``_dw_kernel`` (``J = 1``) with everything unrolled at compile time (``_static_band``), for kernels
    up to ``_STATIC_MAX_TAPS`` taps."""
    n_wt = tl.cdiv(WO, BLOCK_W)
    h0 = (tl.program_id(0) // n_wt) * ROWS
    pid_w = tl.program_id(0) % n_wt
    co = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    ow = pid_w * BLOCK_W + tl.arange(0, BLOCK_W)
    n = tl.program_id(2).to(tl.int64)
    cmask = co < CO
    wmask = ow < WO
    x_base = x_ptr + n * sxn
    a0 = tl.zeros((BLOCK_C, BLOCK_W), dtype=tl.float32)
    a1 = tl.zeros((BLOCK_C, BLOCK_W), dtype=tl.float32)
    a2 = tl.zeros((BLOCK_C, BLOCK_W), dtype=tl.float32)
    a3 = tl.zeros((BLOCK_C, BLOCK_W), dtype=tl.float32)
    a4 = tl.zeros((BLOCK_C, BLOCK_W), dtype=tl.float32)
    a5 = tl.zeros((BLOCK_C, BLOCK_W), dtype=tl.float32)
    a6 = tl.zeros((BLOCK_C, BLOCK_W), dtype=tl.float32)
    a7 = tl.zeros((BLOCK_C, BLOCK_W), dtype=tl.float32)
    first = pid_w * BLOCK_W * stride_w - left
    last = (pid_w * BLOCK_W + BLOCK_W - 1) * stride_w + KW - 1 - left
    if (first >= 0) & (last < W):
        a0, a1, a2, a3, a4, a5, a6, a7 = _static_band(
            a0, a1, a2, a3, a4, a5, a6, a7, x_base, w_ptr, co, h0, ow, cmask, wmask, H, W, DIV, sxc, sxh,
            sxw, stride_w, top, left, w_rs, w_ts, KH, KW, STRIDE_H, ROWS, BOUNDARY, False,
        )  # fmt: skip
    else:
        a0, a1, a2, a3, a4, a5, a6, a7 = _static_band(
            a0, a1, a2, a3, a4, a5, a6, a7, x_base, w_ptr, co, h0, ow, cmask, wmask, H, W, DIV, sxc, sxh,
            sxw, stride_w, top, left, w_rs, w_ts, KH, KW, STRIDE_H, ROWS, BOUNDARY, True,
        )  # fmt: skip
    y_base = n * syn + (co.to(tl.int64) * syc)[:, None] + (ow * syw)[None, :]
    mask = cmask[:, None] & wmask[None, :]
    _store_row(y_ptr, y_base, a0, 0, h0, HO, syh, mask)
    if ROWS > 1:
        _store_row(y_ptr, y_base, a1, 1, h0, HO, syh, mask)
    if ROWS > 2:
        _store_row(y_ptr, y_base, a2, 2, h0, HO, syh, mask)
        _store_row(y_ptr, y_base, a3, 3, h0, HO, syh, mask)
    if ROWS > 4:
        _store_row(y_ptr, y_base, a4, 4, h0, HO, syh, mask)
        _store_row(y_ptr, y_base, a5, 5, h0, HO, syh, mask)
        _store_row(y_ptr, y_base, a6, 6, h0, HO, syh, mask)
        _store_row(y_ptr, y_base, a7, 7, h0, HO, syh, mask)


@triton.jit
def _band_tap(acc, hv, wy_row, i, cmask, w_ts, KH: tl.constexpr):
    """``acc + wy[i]·hv`` where ``i`` is a tap row (``0..KH-1``); other rows skipped by a uniform
    branch, as in ``_tap_into_row``."""
    if (i >= 0) & (i < KH):
        acc = acc + tl.load(wy_row + i * w_ts, mask=cmask, other=0.0)[:, None] * hv
    return acc


@triton.jit
def _acc_band(
    a0, a1, a2, a3, a4, a5, a6, a7, hv, wy_row, d, cmask, w_ts,
    KH: tl.constexpr, STRIDE_H: tl.constexpr, ROWS: tl.constexpr,
):  # fmt: skip
    """Add the filtered input row ``hv`` (band row ``d``) into the output rows it reaches:
    ``a_r += wy[d - r·sy] · hv`` for ``d - r·sy`` in ``0..KH-1``."""
    if ROWS > 0:
        a0 = _band_tap(a0, hv, wy_row, d, cmask, w_ts, KH)
    if ROWS > 1:
        a1 = _band_tap(a1, hv, wy_row, d - STRIDE_H, cmask, w_ts, KH)
    if ROWS > 2:
        a2 = _band_tap(a2, hv, wy_row, d - 2 * STRIDE_H, cmask, w_ts, KH)
        a3 = _band_tap(a3, hv, wy_row, d - 3 * STRIDE_H, cmask, w_ts, KH)
    if ROWS > 4:
        a4 = _band_tap(a4, hv, wy_row, d - 4 * STRIDE_H, cmask, w_ts, KH)
        a5 = _band_tap(a5, hv, wy_row, d - 5 * STRIDE_H, cmask, w_ts, KH)
        a6 = _band_tap(a6, hv, wy_row, d - 6 * STRIDE_H, cmask, w_ts, KH)
        a7 = _band_tap(a7, hv, wy_row, d - 7 * STRIDE_H, cmask, w_ts, KH)
    return a0, a1, a2, a3, a4, a5, a6, a7


@triton.jit
def _row_tap(
    hv, x_row, wx_row, k, ow, sxw, stride_w, left, W, wmask, rm, cmask, w_ts,
    BOUNDARY: tl.constexpr, MAP_W: tl.constexpr,
):  # fmt: skip
    """``hv += wx[k] · x̃[row, w·sx + k - left]`` (columns mapped at the edges when ``MAP_W``)."""
    xv = _col_load(x_row, k, ow, sxw, stride_w, left, W, wmask, rm, BOUNDARY, MAP_W)
    return hv + tl.load(wx_row + k * w_ts, mask=cmask, other=0.0)[:, None] * xv


@triton.jit
def _row_filter(
    x_row, wx_row, ow, sxw, stride_w, left, W, wmask, rm, cmask, w_ts, like,
    KW: tl.constexpr, BOUNDARY: tl.constexpr, MAP_W: tl.constexpr, UNROLL: tl.constexpr,
):  # fmt: skip
    """One band row filtered along the row: ``Σ_k wx[k] · x̃[row, w·sx + k - left]`` (``KW`` loads),
    the taps unrolled at compile time with ``UNROLL``; float32, shaped like ``like``."""
    hv = tl.zeros_like(like)
    if UNROLL:
        for k in tl.static_range(KW):
            hv = _row_tap(
                hv, x_row, wx_row, k, ow, sxw, stride_w, left, W, wmask, rm, cmask, w_ts, BOUNDARY, MAP_W
            )
    else:
        for k in range(KW):
            hv = _row_tap(
                hv, x_row, wx_row, k, ow, sxw, stride_w, left, W, wmask, rm, cmask, w_ts, BOUNDARY, MAP_W
            )
    return hv


@triton.jit
def _sep_band(
    a0, a1, a2, a3, a4, a5, a6, a7, x_base, wy_ptr, wx_ptr, co, h0, ow, cmask, wmask, H, W, DIV, sxc, sxh,
    sxw, stride_w, top, left, w_ts,
    KH: tl.constexpr, KW: tl.constexpr, STRIDE_H: tl.constexpr, ROWS: tl.constexpr,
    BOUNDARY: tl.constexpr, MAP_W: tl.constexpr, UNROLL: tl.constexpr,
):  # fmt: skip
    """The fused separable band: each input row of the band is filtered along the row once
    (``hv = Σ_k wx[k] · x̃[row, w·sx + k - left]``, ``KW`` loads) and added into every output row it
    reaches with its column tap -- ``(ROWS-1)·sy + KH`` row filters per ``ROWS`` output rows, no
    intermediate image."""
    c_off = (co // DIV).to(tl.int64) * sxc
    wy_row = wy_ptr + co
    wx_row = wx_ptr + co
    for d in range((ROWS - 1) * STRIDE_H + KH):
        ridx, rok = _map_index(h0 * STRIDE_H + (d - top), H, BOUNDARY)
        x_row = x_base + c_off[:, None] + ridx.to(tl.int64) * sxh
        rm = cmask[:, None] & rok
        hv = _row_filter(
            x_row, wx_row, ow, sxw, stride_w, left, W, wmask, rm, cmask, w_ts, a0, KW, BOUNDARY, MAP_W,
            UNROLL,
        )  # fmt: skip
        a0, a1, a2, a3, a4, a5, a6, a7 = _acc_band(
            a0, a1, a2, a3, a4, a5, a6, a7, hv, wy_row, d, cmask, w_ts, KH, STRIDE_H, ROWS
        )
    return a0, a1, a2, a3, a4, a5, a6, a7


@triton.jit
def _sep_static_band(
    a0, a1, a2, a3, a4, a5, a6, a7, x_base, wy_ptr, wx_ptr, co, h0, ow, cmask, wmask, H, W, DIV, sxc, sxh,
    sxw, stride_w, top, left, w_ts,
    KH: tl.constexpr, KW: tl.constexpr, STRIDE_H: tl.constexpr, ROWS: tl.constexpr,
    BOUNDARY: tl.constexpr, MAP_W: tl.constexpr,
):  # fmt: skip
    """``_sep_band`` with the band rows and both tap loops unrolled at compile time: the loads of every
    band row are independent, so they can all be in flight together (the looped band waits for each
    row's loads before the next row's); a row tap an output row does not reach is skipped at compile
    time, and tap loads have compile-time offsets, so the compiler keeps the ``KH + KW`` weights in
    registers."""
    c_off = (co // DIV).to(tl.int64) * sxc
    wy_row = wy_ptr + co
    wx_row = wx_ptr + co
    for d in tl.static_range((ROWS - 1) * STRIDE_H + KH):
        ridx, rok = _map_index(h0 * STRIDE_H + (d - top), H, BOUNDARY)
        x_row = x_base + c_off[:, None] + ridx.to(tl.int64) * sxh
        rm = cmask[:, None] & rok
        hv = _row_filter(
            x_row, wx_row, ow, sxw, stride_w, left, W, wmask, rm, cmask, w_ts, a0, KW, BOUNDARY, MAP_W,
            True,
        )  # fmt: skip
        a0 = _static_tap(a0, wy_row, hv, cmask, d, 0, w_ts, KH, 1)
        if ROWS > 1:
            a1 = _static_tap(a1, wy_row, hv, cmask, d - STRIDE_H, 0, w_ts, KH, 1)
        if ROWS > 2:
            a2 = _static_tap(a2, wy_row, hv, cmask, d - 2 * STRIDE_H, 0, w_ts, KH, 1)
            a3 = _static_tap(a3, wy_row, hv, cmask, d - 3 * STRIDE_H, 0, w_ts, KH, 1)
        if ROWS > 4:
            a4 = _static_tap(a4, wy_row, hv, cmask, d - 4 * STRIDE_H, 0, w_ts, KH, 1)
            a5 = _static_tap(a5, wy_row, hv, cmask, d - 5 * STRIDE_H, 0, w_ts, KH, 1)
            a6 = _static_tap(a6, wy_row, hv, cmask, d - 6 * STRIDE_H, 0, w_ts, KH, 1)
            a7 = _static_tap(a7, wy_row, hv, cmask, d - 7 * STRIDE_H, 0, w_ts, KH, 1)
    return a0, a1, a2, a3, a4, a5, a6, a7


@triton.jit
def _sep_kernel(
    x_ptr, wy_ptr, wx_ptr, y_ptr, CO, H, W, HO, WO, DIV, sxn, sxc, sxh, sxw, syn, syc, syh, syw, stride_w,
    top, left, w_ts,
    KH: tl.constexpr, KW: tl.constexpr, STRIDE_H: tl.constexpr, BOUNDARY: tl.constexpr,
    UNROLL: tl.constexpr, BLOCK_C: tl.constexpr, ROWS: tl.constexpr, BLOCK_W: tl.constexpr,
    STATIC: tl.constexpr,
):  # fmt: skip
    """Separable depthwise correlation in one pass (forward only):
    ``y[n, o, h, w] = Σ_i wy[o, i] Σ_k wx[o, k] · x̃[n, o // DIV, h·sy + i - top, w·sx + k - left]``.
    Same tiling as ``_dw_kernel``; taps are float32 ``(KH, CO)`` / ``(KW, CO)`` taps-major (``w_ts = CO``),
    so a channel vector of one tap is one contiguous load."""
    n_wt = tl.cdiv(WO, BLOCK_W)
    h0 = (tl.program_id(0) // n_wt) * ROWS
    pid_w = tl.program_id(0) % n_wt
    co = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    ow = pid_w * BLOCK_W + tl.arange(0, BLOCK_W)
    n = tl.program_id(2).to(tl.int64)
    cmask = co < CO
    wmask = ow < WO
    x_base = x_ptr + n * sxn
    a0 = tl.zeros((BLOCK_C, BLOCK_W), dtype=tl.float32)
    a1 = tl.zeros((BLOCK_C, BLOCK_W), dtype=tl.float32)
    a2 = tl.zeros((BLOCK_C, BLOCK_W), dtype=tl.float32)
    a3 = tl.zeros((BLOCK_C, BLOCK_W), dtype=tl.float32)
    a4 = tl.zeros((BLOCK_C, BLOCK_W), dtype=tl.float32)
    a5 = tl.zeros((BLOCK_C, BLOCK_W), dtype=tl.float32)
    a6 = tl.zeros((BLOCK_C, BLOCK_W), dtype=tl.float32)
    a7 = tl.zeros((BLOCK_C, BLOCK_W), dtype=tl.float32)
    first = pid_w * BLOCK_W * stride_w - left
    last = (pid_w * BLOCK_W + BLOCK_W - 1) * stride_w + KW - 1 - left
    if STATIC:
        if (first >= 0) & (last < W):
            a0, a1, a2, a3, a4, a5, a6, a7 = _sep_static_band(
                a0, a1, a2, a3, a4, a5, a6, a7, x_base, wy_ptr, wx_ptr, co, h0, ow, cmask, wmask, H, W,
                DIV, sxc, sxh, sxw, stride_w, top, left, w_ts, KH, KW, STRIDE_H, ROWS, BOUNDARY, False,
            )  # fmt: skip
        else:
            a0, a1, a2, a3, a4, a5, a6, a7 = _sep_static_band(
                a0, a1, a2, a3, a4, a5, a6, a7, x_base, wy_ptr, wx_ptr, co, h0, ow, cmask, wmask, H, W,
                DIV, sxc, sxh, sxw, stride_w, top, left, w_ts, KH, KW, STRIDE_H, ROWS, BOUNDARY, True,
            )  # fmt: skip
    elif (first >= 0) & (last < W):
        a0, a1, a2, a3, a4, a5, a6, a7 = _sep_band(
            a0, a1, a2, a3, a4, a5, a6, a7, x_base, wy_ptr, wx_ptr, co, h0, ow, cmask, wmask, H, W, DIV,
            sxc, sxh, sxw, stride_w, top, left, w_ts, KH, KW, STRIDE_H, ROWS, BOUNDARY, False, UNROLL,
        )  # fmt: skip
    else:
        a0, a1, a2, a3, a4, a5, a6, a7 = _sep_band(
            a0, a1, a2, a3, a4, a5, a6, a7, x_base, wy_ptr, wx_ptr, co, h0, ow, cmask, wmask, H, W, DIV,
            sxc, sxh, sxw, stride_w, top, left, w_ts, KH, KW, STRIDE_H, ROWS, BOUNDARY, True, UNROLL,
        )  # fmt: skip
    y_base = n * syn + (co.to(tl.int64) * syc)[:, None] + (ow * syw)[None, :]
    mask = cmask[:, None] & wmask[None, :]
    _store_row(y_ptr, y_base, a0, 0, h0, HO, syh, mask)
    if ROWS > 1:
        _store_row(y_ptr, y_base, a1, 1, h0, HO, syh, mask)
    if ROWS > 2:
        _store_row(y_ptr, y_base, a2, 2, h0, HO, syh, mask)
        _store_row(y_ptr, y_base, a3, 3, h0, HO, syh, mask)
    if ROWS > 4:
        _store_row(y_ptr, y_base, a4, 4, h0, HO, syh, mask)
        _store_row(y_ptr, y_base, a5, 5, h0, HO, syh, mask)
        _store_row(y_ptr, y_base, a6, 6, h0, HO, syh, mask)
        _store_row(y_ptr, y_base, a7, 7, h0, HO, syh, mask)


@triton.jit
def _ring_taps(w_ptr, N: tl.constexpr):
    """The ``N`` float32 taps at ``w_ptr`` as a tuple of scalars, loaded once before the row loop (loads
    inside it could not be hoisted past the output stores, which may alias as far as the compiler knows)."""
    taps = ()
    for t in tl.static_range(N):
        taps = taps + (tl.load(w_ptr + t),)
    return taps


@triton.jit
def _ring_row(h, H, BOUNDARY: tl.constexpr):
    """Input row ``h`` mapped into ``0..H-1`` and whether it reads data; rows inside the image (all
    but the edge bands) skip the boundary arithmetic (an integer modulo or two)."""
    if (h >= 0) & (h < H):
        ridx = h
        rok = h >= 0
    else:
        ridx, rok = _map_index(h, H, BOUNDARY)
    return ridx, rok


@triton.jit
def _near_index(i, n, BOUNDARY: tl.constexpr):
    """:func:`_map_index` for positions less than one axis length outside it (``-n < i < 2n - 1``):
    a compare and a select or two instead of an integer modulo."""
    if BOUNDARY == 0:  # zeros
        idx = i
        ok = (i >= 0) & (i < n)
    elif BOUNDARY == 1:  # reflect
        idx = tl.where(i < 0, -i, tl.where(i >= n, 2 * n - 2 - i, i))
        ok = idx >= 0
    elif BOUNDARY == 2:  # symmetric
        idx = tl.where(i < 0, -1 - i, tl.where(i >= n, 2 * n - 1 - i, i))
        ok = idx >= 0
    elif BOUNDARY == 3:  # replicate
        idx = tl.minimum(tl.maximum(i, 0), n - 1)
        ok = idx >= 0
    else:  # circular
        idx = tl.where(i < 0, i + n, tl.where(i >= n, i - n, i))
        ok = idx >= 0
    return idx, ok


@triton.jit
def _long_row(
    x_row, xp, wx_ptr, cols, W, sxw, wmask,
    KW: tl.constexpr, U: tl.constexpr, MAP_W: tl.constexpr, BOUNDARY: tl.constexpr, BLOCK_W: tl.constexpr,
):  # fmt: skip
    """Input row ``x_row`` filtered along the row by the ``KW`` float32 taps at ``wx_ptr``: ``Σ_k wx[k] ·
    x̃[cols + k]``, in a runtime loop over groups of ``U`` taps, each tap a scalar load per row. With the
    taps in registers and the filter unrolled, the 31×31 build for sm_90 took 230-255 registers per
    thread (spilling at 128 columns; untimed). Interior tiles (``xp`` = the tile's column 0 of tap 0)
    load without masks; edge tiles map each position (:func:`_near_index`, the halo being shorter than
    the row) under ``wmask``."""
    # Four partial sums: one chain of KW dependent multiply-adds per row would wait on the FMA latency.
    part = ()
    for _ in tl.static_range(4):
        part = part + (tl.zeros((BLOCK_W,), dtype=tl.float32),)
    for g in range(KW // U):
        for u in tl.static_range(U):
            k = g * U + u
            xv = _long_tap(x_row, xp, cols, k, W, sxw, wmask, MAP_W, BOUNDARY)
            part = _add_at(part, u % 4, tl.load(wx_ptr + k) * xv)
    for u in tl.static_range(KW % U):
        k = (KW // U) * U + u
        xv = _long_tap(x_row, xp, cols, k, W, sxw, wmask, MAP_W, BOUNDARY)
        part = _add_at(part, u % 4, tl.load(wx_ptr + k) * xv)
    return (part[0] + part[1]) + (part[2] + part[3])


@triton.jit
def _add_at(values, i: tl.constexpr, v):
    """``values`` (a tuple) with ``v`` added to entry ``i``."""
    out = ()
    for j in tl.static_range(len(values)):
        if j == i:  # noqa: SIM108 -- a compile-time branch, as everywhere in the kernels
            out = out + (values[j] + v,)
        else:
            out = out + (values[j],)
    return out


@triton.jit
def _long_tap(x_row, xp, cols, k, W, sxw, wmask, MAP_W: tl.constexpr, BOUNDARY: tl.constexpr):
    """Row tap ``k``'s inputs as float32: mapped and masked on an edge tile, a plain offset inside."""
    if MAP_W:
        idx, ok = _near_index(cols + k, W, BOUNDARY)
        xv = tl.load(x_row + idx * sxw, mask=wmask & ok, other=0.0)
    else:
        xv = tl.load(xp + k * sxw)
    return xv.to(tl.float32)


@triton.jit
def _ring_add(
    ring, x_row, base, offs, masks, taps, taps_y, sxw,
    p: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr, SEPARABLE: tl.constexpr, MAP_W: tl.constexpr,
    EVEN_W: tl.constexpr, BOUNDARY: tl.constexpr, BLOCK_W: tl.constexpr,
):  # fmt: skip
    """Add input row ``x_row`` (band row ``d`` with ``d mod KH = p``) into the ring: tap row ``i`` into
    slot ``(p - i) mod KH``. Interior tiles load ``base + k·sxw`` (one pointer per row, the tap a
    constant offset; no mask when the width is a multiple of the tile), edge tiles their mapped
    column offsets under their masks -- except under zero padding with more than 3 column taps
    (``DIRECT``), where the mapped offset is the plain one and only the mask differs, so they address like
    interior tiles: 200 -> 170 instructions per band row of the sm_90 loop at 256 columns. On the H200
    (32×64×512×512, whose 256-column tiles all touch an edge) 7×7 fp32 took 2078 against 2556 µs with the
    mapped offsets, fp16 1992 against 2508; 3×3 fp32 went the other way, 1298-1322 against 1195-1260."""
    DIRECT: tl.constexpr = (not MAP_W) or (BOUNDARY == 0 and KW > 3)
    if DIRECT:
        xp = x_row + base
    if SEPARABLE:
        hv = tl.zeros((BLOCK_W,), dtype=tl.float32)
    new = ring
    for k in tl.static_range(KW):
        if not DIRECT:
            xv = tl.load(x_row + offs[k], mask=masks[k], other=0.0)
        elif MAP_W:
            xv = tl.load(xp + k * sxw, mask=masks[k], other=0.0)
        elif EVEN_W:
            xv = tl.load(xp + k * sxw)
        else:
            xv = tl.load(xp + k * sxw, mask=masks[0], other=0.0)
        xv = xv.to(tl.float32)
        if SEPARABLE:
            hv += taps[k] * xv
        else:
            acc = ()
            for s in tl.static_range(KH):
                acc = acc + (new[s] + taps[((p - s + KH) % KH) * KW + k] * xv,)
            new = acc
    if SEPARABLE:
        acc = ()
        for s in tl.static_range(KH):
            acc = acc + (new[s] + taps_y[(p - s + KH) % KH] * hv,)
        new = acc
    return new


@triton.jit
def _ring_rows(
    x_row0, y_row0, taps, taps_y, ow, h0, H, W, HO, sxh, sxw, syh, top, left, wmask,
    KH: tl.constexpr, KW: tl.constexpr, SEPARABLE: tl.constexpr, BOUNDARY: tl.constexpr,
    CYCLES: tl.constexpr, ROWS: tl.constexpr, MAP_W: tl.constexpr, EVEN_W: tl.constexpr,
    BLOCK_W: tl.constexpr,
):  # fmt: skip
    """Walk the ``CYCLES·KH`` input rows of the band once, top to bottom, keeping the ``KH`` output rows
    still being summed in a ring of accumulators: input row ``d`` adds its tap row ``i`` into output
    row ``d - i``, which lives in slot ``(d - i) mod KH``. Inside a cycle ``d mod KH`` is a compile-time
    constant, so every slot and tap index is too -- no zero-weight taps, no register moves. The row
    that receives its last tap (slot ``(d + 1) mod KH``) is stored and the slot cleared. The column
    offsets (and, at the image edges, their boundary mapping) do not depend on the row: computed once.
    Rows outside the image under zero padding add nothing (a branch, not masked loads).

    (Measured on the H200, fp32 7×7 NCHW 32×64×512×512, whose 256-column tiles all touch an edge:
    2.69 ms as here before the direct zero-padding edges of :func:`_ring_add`; 3.9-4.2 ms with the rows
    made straight-line code per cycle (edge bands specialised) and the edge columns clamped and selected
    instead of masked.)"""
    offs = ()
    masks = (wmask,)
    base = (ow - left) * sxw
    if MAP_W:
        masks = ()
        for k in tl.static_range(KW):
            col, cok = _map_index(ow + (k - left), W, BOUNDARY)
            masks = masks + (wmask & cok,)
            offs = offs + (col * sxw,)
    ring = ()
    for _ in tl.static_range(KH):
        ring = ring + (tl.zeros((BLOCK_W,), dtype=tl.float32),)
    for c in range(CYCLES):
        for p in tl.static_range(KH):
            d = c * KH + p
            ridx, rok = _ring_row(h0 + d - top, H, BOUNDARY)
            x_row = x_row0 + ridx.to(tl.int64) * sxh
            if BOUNDARY == 0:
                if rok:
                    ring = _ring_add(
                        ring, x_row, base, offs, masks, taps, taps_y, sxw, p, KH, KW, SEPARABLE, MAP_W,
                        EVEN_W, BOUNDARY, BLOCK_W,
                    )  # fmt: skip
            else:
                ring = _ring_add(
                    ring, x_row, base, offs, masks, taps, taps_y, sxw, p, KH, KW, SEPARABLE, MAP_W, EVEN_W,
                    BOUNDARY, BLOCK_W,
                )  # fmt: skip
            r = d - (KH - 1)  # the output row (of this program's ROWS) that is now complete
            h = h0 + r
            tl.store(
                y_row0 + h.to(tl.int64) * syh,
                ring[(p + 1) % KH].to(y_row0.dtype.element_ty),
                mask=wmask & (r >= 0) & (r < ROWS) & (h < HO),
            )
            new = ()
            for s in tl.static_range(KH):
                if s == (p + 1) % KH:
                    new = new + (tl.zeros((BLOCK_W,), dtype=tl.float32),)
                else:
                    new = new + (ring[s],)
            ring = new


@triton.jit
def _long_row_blocked(
    x_row, col0, taps_x, W, KW: tl.constexpr, LEFT: tl.constexpr, OFF: tl.constexpr, NB: tl.constexpr,
    VEC: tl.constexpr, BT: tl.constexpr, MAP_W: tl.constexpr, BOUNDARY: tl.constexpr,
):  # fmt: skip
    """Input row ``x_row`` (unit stride) filtered along the row by the ``KW`` taps ``taps_x`` (a tuple
    of scalars) for the tile whose first output column is ``col0``: a tuple of ``VEC`` ``(BT,)``
    vectors, entry ``c`` holding columns ``col0 + VEC·t + c``. ``MAP_W`` (a tile whose window leaves
    the row): a block that lies inside the row for every thread is loaded as in the interior (a branch
    the whole warp takes together); in the others each position is mapped by the boundary
    (:func:`_near_index`) and loaded on its own -- on the 31×31 blur's edge tiles 4 of the 9 blocks, and
    the edge launch took 153 instead of 212 µs.

    Each thread loads its window -- the ``VEC + KW - 1`` inputs its columns read, rounded out to
    aligned ``VEC``-wide blocks: ``NB`` blocks from column ``col0 + VEC·t + OFF`` (:func:`long_window`)
    -- with one vector load per block, splits the blocks into registers
    (:func:`_block_columns`, no data leaves the thread) and runs ``VEC`` chains of ``KW`` multiply-adds
    over them. The per-tap loads of :func:`_long_row` cost one unaligned L1 access per tap per column
    (62 loads per row per thread at 2 columns, 31×31), which bound the kernel by L1 throughput."""
    t = tl.arange(0, BT)
    e = tl.arange(0, VEC)
    window = ()
    for m in tl.static_range(NB):
        start = col0 + OFF + m * VEC  # block m's first column, at thread 0
        pos = (start + VEC * t)[:, None] + e[None, :]
        if MAP_W:
            if (start >= 0) & (start + VEC * BT <= W):  # every thread's block m inside the row
                block = tl.load(x_row + pos)
            else:
                # The window is rounded out to whole blocks, so a position can sit past the mapped range.
                idx, ok = _near_index(pos, W, BOUNDARY)
                block = tl.load(x_row + idx, mask=ok & (idx < W), other=0.0)
        else:
            block = tl.load(x_row + pos)
        window = window + _block_columns(block.to(tl.float32), VEC, BT)
    outs = ()
    for c in tl.static_range(VEC):
        o = taps_x[0] * window[c - LEFT - OFF]
        for j in tl.static_range(1, KW):
            o += taps_x[j] * window[c - LEFT + j - OFF]
        outs = outs + (o,)
    return outs


@triton.jit
def _block_columns(block, VEC: tl.constexpr, BT: tl.constexpr):
    """A ``(BT, VEC)`` tile (``VEC`` = 2 or 4) held one row per thread → its ``VEC`` columns, a tuple of
    ``(BT,)`` tensors, by register-only splits."""
    if VEC == 4:
        even, odd = tl.split(tl.reshape(block, (BT, 2, 2)))  # columns (0, 2) and (1, 3)
        c0, c2 = tl.split(even)
        c1, c3 = tl.split(odd)
        cols = (c0, c1, c2, c3)
    else:
        c0, c1 = tl.split(block)
        cols = (c0, c1)
    return cols


@triton.jit
def _shift_rows(
    x_row0, y_ptr0, taps_x, taps_y, col0, h0, rows, H, W, WO, sxh, sxw, syh, syw, top,
    KH: tl.constexpr, KW: tl.constexpr, BOUNDARY: tl.constexpr, LEFT: tl.constexpr, OFF: tl.constexpr,
    NB: tl.constexpr, VEC: tl.constexpr, BT: tl.constexpr, U: tl.constexpr, PREFETCH: tl.constexpr,
    MAP_W: tl.constexpr,
):  # fmt: skip
    """Output rows ``h0..h0+rows-1`` of a separable filter with long row taps for the tile whose first
    output column is ``col0``, ``VEC`` adjacent columns per thread over ``BT`` threads: each input row
    filtered along the row once, then added into the ``KH`` output rows it reaches, held as a shift
    register -- slot ``j`` is output row ``h + top - (KH - 1) + j`` at input row ``h`` and takes column
    tap ``KH - 1 - j``; slot 0 is then complete, stored, and the slots move down one. Each column keeps
    its own slots, so every value stays in the thread that computed it. Unlike the ring's unrolled
    cycles (:func:`_ring_rows`) the row loop is one body, so long filters compile in seconds.
    ``y_ptr0`` is the plane's output row 0; ``MAP_W``: the tile's inputs leave the row, positions are
    mapped by the boundary.

    The row filter: ``VEC > 1`` (unit-stride rows) :func:`_long_row_blocked`, the thread's window from
    registers, ``taps_x`` a tuple (registers or kernel arguments); ``VEC = 1`` :func:`_long_row`, a load
    per tap, ``taps_x`` a pointer to the row taps.

    ``PREFETCH > 0`` (``VEC > 1``, unmapped tiles): each row also asks L2 for the window of the input row
    ``PREFETCH`` rows ahead (:func:`~._launch.prefetch_l2`, clamped into the image), so the row's own
    loads find their lines in L2 rather than wait on DRAM (31×31 blur: 805 against 1187 µs without it)."""
    cols = col0 + VEC * tl.arange(0, BT)
    acc = ()
    for _ in tl.static_range(KH * VEC):  # slot j of column c at KH·c + j
        acc = acc + (tl.zeros((BT,), dtype=tl.float32),)
    # Input rows h0 - top .. h0 + rows + KH - 2 - top: the first KH - 1 only fill the register. A while
    # loop, as its bounds come from the program id (Triton 3.6's interpreter cannot range() over those).
    h = h0 - top
    while h < h0 + rows + (KH - 1) - top:
        if (PREFETCH > 0) and (VEC > 1) and (not MAP_W):
            ahead = tl.minimum(tl.maximum(h + PREFETCH, 0), H - 1).to(tl.int64) * sxh
            prefetch_l2(x_row0 + ahead + cols + OFF)
            prefetch_l2(x_row0 + ahead + cols + (OFF + NB * VEC - 1))
        ridx, rok = _ring_row(h, H, BOUNDARY)
        x_row = x_row0 + ridx.to(tl.int64) * sxh
        if rok:  # false only for rows outside the image under zero padding
            if VEC > 1:
                hv = _long_row_blocked(x_row, col0, taps_x, W, KW, LEFT, OFF, NB, VEC, BT, MAP_W, BOUNDARY)
            else:
                tap0 = cols - LEFT  # each column's first input
                hv = (
                    _long_row(x_row, x_row + tap0 * sxw, taps_x, tap0, W, sxw, cols < WO, KW, U, MAP_W,
                              BOUNDARY, BT),
                )  # fmt: skip
        else:
            hv = ()
            for _ in tl.static_range(VEC):
                hv = hv + (tl.zeros((BT,), dtype=tl.float32),)
        r = h + top - (KH - 1)  # the output row that input row h completes
        y_row = y_ptr0 + r.to(tl.int64) * syh
        new = ()
        for c in tl.static_range(VEC):
            done = acc[KH * c] + taps_y[KH - 1] * hv[c]
            tl.store(
                y_row + (cols + c) * syw,
                done.to(y_ptr0.dtype.element_ty),
                mask=(cols + c < WO) & (r >= h0),
            )
            for j in tl.static_range(1, KH):
                new = new + (acc[KH * c + j] + taps_y[KH - 1 - j] * hv[c],)
            new = new + (tl.zeros((BT,), dtype=tl.float32),)
        acc = new
        h += 1


@triton.jit
def _long_band(
    x_row0, y_ptr0, wx_ptr, taps_y, col0, h0, rows, H, W, WO, sxh, sxw, syh, syw, top, first, last,
    KH: tl.constexpr, KW: tl.constexpr, BOUNDARY: tl.constexpr, LEFT: tl.constexpr, U: tl.constexpr,
    BLOCK_W: tl.constexpr,
):  # fmt: skip
    """:func:`_shift_rows` at one column per thread (a load per row tap) for a tile whose inputs span
    columns ``first..last``: plain offsets when they lie inside the row, mapped ones (the boundary)
    otherwise."""
    if (first >= 0) & (last < W):
        _shift_rows(
            x_row0, y_ptr0, wx_ptr, taps_y, col0, h0, rows, H, W, WO, sxh, sxw, syh, syw, top,
            KH, KW, BOUNDARY, LEFT, 0, 1, 1, BLOCK_W, U, 0, False,
        )  # fmt: skip
    else:
        _shift_rows(
            x_row0, y_ptr0, wx_ptr, taps_y, col0, h0, rows, H, W, WO, sxh, sxw, syh, syw, top,
            KH, KW, BOUNDARY, LEFT, 0, 1, 1, BLOCK_W, U, 0, True,
        )  # fmt: skip


@triton.jit
def _ring_kernel(
    x_ptr, w_ptr, y_ptr, H, W, HO, WO, DIV, sxn, sxc, sxh, sxw, syn, syc, syh, syw, top,
    LEFT: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr, SEPARABLE: tl.constexpr, BOUNDARY: tl.constexpr,
    CYCLES: tl.constexpr, EVEN_W: tl.constexpr, WHOLE_W: tl.constexpr, LONG_W: tl.constexpr,
    LONG_UNROLL: tl.constexpr, BLOCK_W: tl.constexpr,
):  # fmt: skip
    """Depthwise correlation, stride 1, one channel plane per program, ``CYCLES·KH - KH + 1`` output rows
    × ``BLOCK_W`` columns (the contiguous axis) per program (forward only, ``J = 1``)::

        y[n, o, h, w] = Σ_i Σ_k  w[o, i, k] · x̃[n, o // DIV, h + i - top, w + k - LEFT]

    or, with ``SEPARABLE``, ``w[o, i, k] = wy[o, i] · wx[o, k]`` and each input row filtered along the row
    once (``KW`` multiply-adds) before its ``KH`` column taps. Taps are float32: ``(CO, KH, KW)``
    contiguous, or ``(CO, KH + KW)`` (``wy`` then ``wx``) when separable.

    Why a ring (:func:`_ring_rows`) rather than the band of ``_dw_kernel``: every input row is loaded
    once per column tap and feeds exactly the taps it has (``KH·KW`` multiply-adds per output, where
    the runtime-looped band of 8 rows spends ``(8-1+KH)·KW`` weight loads and multiply-adds on every 8
    rows), and a program covers many rows, so the ``KH - 1`` halo rows are a small share of its loads.

    ``LONG_W`` (separable filters longer than the unrolled ring takes, on strided rows; unit-stride rows
    go to :func:`_long_rows_kernel`): each input row is filtered in a runtime loop over the row
    taps, which stay in memory, the column taps in a shift register (:func:`_shift_rows`) -- the
    unrolled ring at 31×31 took 7 minutes to compile for sm_90 and 255 registers; this takes a second.

    ``WHOLE_W``: one tile is the whole row (``W = WO = BLOCK_W``). The widths then become compile-time
    constants, and with ``LEFT`` one too the compiler drops every column mask that cannot fail: a 7×7
    tile at zero padding keeps 6 of its 14 loads per input row masked (the pad's), and its sm_90 loop
    issues ~170 instead of ~200 instructions per band row.
    """
    ROWS: tl.constexpr = CYCLES * KH - KH + 1
    left = LEFT
    if WHOLE_W:
        W = BLOCK_W
        WO = BLOCK_W
    n_wt = tl.cdiv(WO, BLOCK_W)
    h0 = (tl.program_id(0) // n_wt) * ROWS
    pid_w = tl.program_id(0) % n_wt
    co = tl.program_id(1)
    n = tl.program_id(2).to(tl.int64)
    ow = pid_w * BLOCK_W + tl.arange(0, BLOCK_W)
    wmask = ow < WO
    x_row0 = x_ptr + n * sxn + (co // DIV).to(tl.int64) * sxc
    y_row0 = y_ptr + n * syn + co.to(tl.int64) * syc + ow * syw
    if LONG_W:  # the row taps stay in memory, read by _long_row (the column taps: loaded where used)
        taps = w_ptr + co * (KH + KW) + KH
    elif SEPARABLE:
        taps_y = _ring_taps(w_ptr + co * (KH + KW), KH)
        taps = _ring_taps(w_ptr + co * (KH + KW) + KH, KW)
    else:
        taps_y = ()
        taps = _ring_taps(w_ptr + co * (KH * KW), KH * KW)
    first = pid_w * BLOCK_W - left
    last = pid_w * BLOCK_W + BLOCK_W - 1 + KW - 1 - left
    if LONG_W:
        _long_band(
            x_row0, y_ptr + n * syn + co.to(tl.int64) * syc, taps, _ring_taps(w_ptr + co * (KH + KW), KH),
            pid_w * BLOCK_W, h0, tl.minimum(ROWS, HO - h0), H, W, WO, sxh, sxw, syh, syw, top, first, last,
            KH, KW, BOUNDARY, LEFT, LONG_UNROLL, BLOCK_W,
        )  # fmt: skip
    elif (first >= 0) & (last < W):
        _ring_rows(
            x_row0, y_row0, taps, taps_y, ow, h0, H, W, HO, sxh, sxw, syh, top, left, wmask,
            KH, KW, SEPARABLE, BOUNDARY, CYCLES, ROWS, False, EVEN_W, BLOCK_W,
        )  # fmt: skip
    else:
        _ring_rows(
            x_row0, y_row0, taps, taps_y, ow, h0, H, W, HO, sxh, sxw, syh, top, left, wmask,
            KH, KW, SEPARABLE, BOUNDARY, CYCLES, ROWS, True, EVEN_W, BLOCK_W,
        )  # fmt: skip


@triton.jit
def _long_rows_kernel(
    x_ptr, w_ptr, y_ptr, H, W, HO, WO, CO, DIV, sxn, sxc, sxh, syn, syc, syh, top, wy_args, wx_args,
    tile_lo, tile_hi, n_tiles, total,
    LEFT: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr, BOUNDARY: tl.constexpr, OFF: tl.constexpr,
    NB: tl.constexpr, VEC: tl.constexpr, PREFETCH: tl.constexpr, TAPS_ARGS: tl.constexpr,
    MAP_W: tl.constexpr, BLOCK_W: tl.constexpr,
):  # fmt: skip
    """Separable correlation with long row taps on unit-stride rows (stride 1, forward only), the
    work split evenly over a fixed number of programs -- as many as the GPU holds at once
    (:func:`_launch_long_rows`)::

        y[n, o, h, w] = Σ_i Σ_k  wy[o, i] · wx[o, k] · x̃[n, o // DIV, h + i - top, w + k - LEFT]

    The work is ``total`` strip rows: strip ``s`` is column tile ``s % n_tiles`` of plane ``s //
    n_tiles`` (``BLOCK_W`` columns, ``VEC`` adjacent ones per thread), and program ``p`` computes the rows
    ``p·total/P .. (p+1)·total/P - 1`` of the strips laid end to end, a segment per strip it touches,
    each a :func:`_shift_rows` walk (the thread's row window from registers) that spends ``KH - 1``
    input rows filling its register. Why not a program per band of rows (the ring's grid): the 31×31
    blur's 5712 one-warp bands ran in 5.4 waves of 1056 (196 registers: 8 an SM), the last 41% full,
    and each band re-read 30 halo rows for its 125; here every program holds an equal share, once.

    ``MAP_W``: the launch over the edge tiles (window positions mapped by the boundary) -- tile
    ``t`` of ``n_tiles`` is column tile ``t``, or ``t + tile_hi - tile_lo`` past ``tile_lo``; else the
    tiles ``tile_lo + t``, whose windows lie inside the row (whole aligned ``VEC``-wide blocks, L2 asked
    for the input row ``PREFETCH`` rows ahead; 0: not -- the interpreter has no prefetch). The row
    window: ``NB`` blocks from ``OFF`` columns from each thread's first column (:func:`long_window`).
    ``TAPS_ARGS``: the taps are ``wy_args``/``wx_args`` (kernel arguments, the same for every channel,
    no registers); else float32 ``(CO, KH + KW)`` at ``w_ptr`` (``wy`` then ``wx``)."""
    p = tl.program_id(0).to(tl.int64)
    f = p * total // tl.num_programs(0)
    f_end = (p + 1) * total // tl.num_programs(0)
    while f < f_end:
        strip = f // HO
        h0 = (f - strip * HO).to(tl.int32)
        rows = tl.minimum(f_end - f, HO - h0).to(tl.int32)
        tile = (strip % n_tiles).to(tl.int32)
        plane = strip // n_tiles
        co = (plane % CO).to(tl.int32)
        if MAP_W:  # noqa: SIM108 -- a compile-time branch
            pid_w = tl.where(tile < tile_lo, tile, tile + (tile_hi - tile_lo))
        else:
            pid_w = tile + tile_lo
        x_row0 = x_ptr + (plane // CO) * sxn + (co // DIV).to(tl.int64) * sxc
        y_plane = y_ptr + (plane // CO) * syn + co.to(tl.int64) * syc
        if TAPS_ARGS:
            row_taps = wx_args
            column_taps = wy_args
        else:
            row_taps = _ring_taps(w_ptr + co * (KH + KW) + KH, KW)
            column_taps = _ring_taps(w_ptr + co * (KH + KW), KH)
        _shift_rows(
            x_row0, y_plane, row_taps, column_taps, pid_w * BLOCK_W, h0, rows, H, W, WO, sxh, 1, syh, 1, top,
            KH, KW, BOUNDARY, LEFT, OFF, NB, VEC, BLOCK_W // VEC, 1, PREFETCH, MAP_W,
        )  # fmt: skip
        f += rows


@triton.jit
def _sep_refilter(
    x_base, wy_row, wx_row, y_base, h0, w0, H, W, HO, WO, sxh, sxw, syh, syw, top, left, KH, KW,
    BOUNDARY: tl.constexpr, BH: tl.constexpr, BW: tl.constexpr,
):  # fmt: skip
    """The tile ``BH × BW`` at ``(h0, w0)`` summed directly, ``Σ_i wy[i] Σ_k wx[k] · x̃[h + i - top,
    w + k - left]`` (float32, runtime loops over the taps), and stored, in chunks of rows."""
    RC: tl.constexpr = max(1, min(BH, 1024 // BW))
    ow = w0 + tl.arange(0, BW)
    for c in range(0, BH, RC):
        oh = h0 + c + tl.arange(0, RC)
        acc = tl.zeros((RC, BW), dtype=tl.float32)
        for i in range(KH):
            ridx, rok = _map_index(oh + (i - top), H, BOUNDARY)
            x_rows = x_base + ridx.to(tl.int64)[:, None] * sxh
            hv = tl.zeros((RC, BW), dtype=tl.float32)
            for k in range(KW):
                cidx, cok = _map_index(ow + (k - left), W, BOUNDARY)
                xv = tl.load(x_rows + (cidx * sxw)[None, :], mask=rok[:, None] & cok[None, :], other=0.0)
                hv += tl.load(wx_row + k) * xv.to(tl.float32)
            acc += tl.load(wy_row + i) * hv
        y_off = oh.to(tl.int64)[:, None] * syh + (ow * syw)[None, :]
        mask = (oh < HO)[:, None] & (ow < WO)[None, :]
        tl.store(y_base + y_off, acc.to(y_base.dtype.element_ty), mask=mask)


@triton.jit
def _sep_dot_kernel(
    x_ptr, wy_ptr, wx_ptr, y_ptr, H, W, HO, WO, DIV, sxn, sxc, sxh, sxw, syn, syc, syh, syw, top, left,
    KH: tl.constexpr, KW: tl.constexpr, BOUNDARY: tl.constexpr, BH: tl.constexpr, BW: tl.constexpr,
    BU: tl.constexpr, BV: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """Separable depthwise correlation (stride 1, forward only) as two Toeplitz matrix products per tile on
    tensor cores, both passes fused: for each chunk of ``BU`` input columns of the tile's halo,
    ``mid = Σ_v Ty_v @ X_v`` over ``BV``-row chunks (``Ty[r, v] = wy[o, v - r]``, ``X`` the input block), then
    ``acc += mid @ Tx`` (``Tx[u, t] = wx[o, u - t]``). No intermediate image, every input sample read from L2
    about ``(BH + KH - 1)(BW + KW - 1) / (BH·BW)`` times, the multiply-adds on tensor cores. With ``BU`` at
    least ``BW + KW - 1`` the column loop runs once: fewer, larger dots and each ``Ty`` chunk built once.
    float32 operands go through ``tf32x3``. Taps are float32 ``(CO, K)`` contiguous."""
    o = tl.program_id(1)
    n = tl.program_id(2).to(tl.int64)
    n_wt = tl.cdiv(WO, BW)
    h0 = (tl.program_id(0) // n_wt) * BH
    w0 = (tl.program_id(0) % n_wt) * BW
    x_base = x_ptr + n * sxn + (o // DIV).to(tl.int64) * sxc
    r = tl.arange(0, BH)
    t = tl.arange(0, BW)
    u = tl.arange(0, BU)
    v = tl.arange(0, BV)
    acc = tl.zeros((BH, BW), dtype=tl.float32)
    for cu in range(tl.cdiv(BW + KW - 1, BU)):
        cidx, cok = _map_index(w0 - left + cu * BU + u, W, BOUNDARY)
        mid = tl.zeros((BH, BU), dtype=tl.float32)
        for cv in range(tl.cdiv(BH + KH - 1, BV)):
            ridx, rok = _map_index(h0 - top + cv * BV + v, H, BOUNDARY)
            xv = tl.load(
                x_base + ridx.to(tl.int64)[:, None] * sxh + (cidx * sxw)[None, :],
                mask=rok[:, None] & cok[None, :],
                other=0.0,
            ).to(tl.float32)
            wi = (cv * BV + v)[None, :] - r[:, None]
            ty = tl.load(wy_ptr + o * KH + wi, mask=(wi >= 0) & (wi < KH), other=0.0)
            mid = tl.dot(ty, xv, mid, input_precision=PRECISION)
        wk = (cu * BU + u)[:, None] - t[None, :]
        tx = tl.load(wx_ptr + o * KW + wk, mask=(wk >= 0) & (wk < KW), other=0.0)
        acc = tl.dot(mid, tx, acc, input_precision=PRECISION)
    # Ty's and Tx's zeros would spread a non-finite pixel over whole tile rows and columns (0·inf):
    # see _any_nonfinite.
    if _any_nonfinite(acc):
        _sep_refilter(
            x_base, wy_ptr + o * KH, wx_ptr + o * KW, y_ptr + n * syn + o.to(tl.int64) * syc, h0, w0, H, W,
            HO, WO, sxh, sxw, syh, syw, top, left, KH, KW, BOUNDARY, BH, BW,
        )  # fmt: skip
    else:
        oh = h0 + r
        ow = w0 + t
        y_off = n * syn + o.to(tl.int64) * syc + oh.to(tl.int64)[:, None] * syh + (ow * syw)[None, :]
        tl.store(y_ptr + y_off, acc.to(y_ptr.dtype.element_ty), mask=(oh < HO)[:, None] & (ow < WO)[None, :])


@triton.jit
def _wgrad_kernel(
    x_ptr,
    g_ptr,
    part_ptr,
    H,
    W,
    HO,
    WO,
    M,
    sxn,
    sxc,
    sxh,
    sxw,
    sgn,
    sgc,
    sgh,
    sgw,
    stride_h,
    stride_w,
    top,
    left,
    n_chunks,
    KH: tl.constexpr,
    KW: tl.constexpr,
    BOUNDARY: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_P: tl.constexpr,
    STEPS: tl.constexpr,
):
    """Partial taps gradient of one (image and chunk of positions, tap block, output channel):
    ``part[o, t, n, q] = Σ_{p in chunk q} g[n, o, p] · x̃[n, o // M, p_h·sy + t_i - top, p_w·sx + t_k - left]``
    (``x̃`` extended by the boundary).
    The partials are summed over ``(n, q)`` by the launcher in a fixed order (deterministic); loop bounds
    are compile-time constants (``STEPS`` blocks of ``BLOCK_P`` positions per program)."""
    co = tl.program_id(2)
    t = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)
    n = tl.program_id(0) // n_chunks
    q = tl.program_id(0) % n_chunks
    tmask = t < KH * KW
    ti = t // KW
    tk = t % KW
    ci = (co // M).to(tl.int64)
    x_base = x_ptr + n.to(tl.int64) * sxn + ci * sxc
    g_base = g_ptr + n.to(tl.int64) * sgn + co.to(tl.int64) * sgc
    n_pos = HO * WO
    acc = tl.zeros((BLOCK_T, BLOCK_P), dtype=tl.float32)
    for s in tl.static_range(STEPS):
        p = (q * STEPS + s) * BLOCK_P + tl.arange(0, BLOCK_P)
        pm = p < n_pos
        oh = p // WO
        ow = p % WO
        g = tl.load(g_base + oh.to(tl.int64) * sgh + ow * sgw, mask=pm, other=0.0).to(tl.float32)
        r, rok = _map_index(oh[None, :] * stride_h + ti[:, None] - top, H, BOUNDARY)
        c, cok = _map_index(ow[None, :] * stride_w + tk[:, None] - left, W, BOUNDARY)
        m = tmask[:, None] & pm[None, :] & rok & cok
        xv = tl.load(x_base + r.to(tl.int64) * sxh + c * sxw, mask=m, other=0.0).to(tl.float32)
        acc += g[None, :] * xv
    n_parts = tl.num_programs(0)
    part = (co.to(tl.int64) * (KH * KW) + t) * n_parts + tl.program_id(0)
    tl.store(part_ptr + part, tl.sum(acc, axis=1), mask=tmask)


@triton.jit
def _fir_refilter(
    x_base, w_row, y_base, base, L, LO, sxw, syw, left, K,
    BOUNDARY: tl.constexpr, R: tl.constexpr, T: tl.constexpr,
):  # fmt: skip
    """The ``R·T`` outputs from ``base`` summed directly, ``y[j] = Σ_k w[k] · x̃[j + k - left]`` (float32, a
    runtime loop over the taps), and stored, in chunks of rows."""
    RC: tl.constexpr = max(1, min(R, 1024 // T))
    t = tl.arange(0, T)
    for c in range(0, R, RC):
        out = base + (c + tl.arange(0, RC))[:, None] * T + t[None, :]
        acc = tl.zeros((RC, T), dtype=tl.float32)
        for k in range(K):
            idx, ok = _map_index(out + (k - left), L, BOUNDARY)
            acc += tl.load(w_row + k) * tl.load(x_base + idx * sxw, mask=ok, other=0.0).to(tl.float32)
        tl.store(y_base + out.to(tl.int64) * syw, acc.to(y_base.dtype.element_ty), mask=out < LO)


@triton.jit
def _fir_toeplitz_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    L,
    LO,
    DIV,
    sxn,
    sxc,
    sxw,
    syn,
    syc,
    syw,
    left,
    K: tl.constexpr,
    BOUNDARY: tl.constexpr,
    R: tl.constexpr,
    T: tl.constexpr,
    BU: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """Long per-channel FIR (stride 1) on tensor cores. A tile of ``R·T`` consecutive outputs is a matrix
    ``Y[r, t] = y[base + r·T + t]`` and, with ``X[r, u] = x̃[base + r·T + u - left]`` and the Toeplitz
    matrix ``Wt[u, t] = w[u - t]`` (zero outside ``0..K-1``), ``Y = X @ Wt``: ``T + K - 1`` multiply-adds per
    output instead of ``K``, but at tensor-core rate, and every input sample is read from L1 twice instead
    of ``K`` times (the direct stencil is bound by L1 loads beyond a few dozen taps). float32 operands
    go through ``tf32x3`` (three TF32 products, ~float32 accuracy)."""
    o = tl.program_id(1)
    n = tl.program_id(2).to(tl.int64)
    base = tl.program_id(0) * (R * T)
    x_base = x_ptr + n * sxn + (o // DIV).to(tl.int64) * sxc
    r = tl.arange(0, R)
    t = tl.arange(0, T)
    u = tl.arange(0, BU)
    acc = tl.zeros((R, T), dtype=tl.float32)
    for u0 in tl.static_range(0, T + K - 1, BU):
        pos = base + r[:, None] * T + (u0 + u)[None, :] - left
        idx, ok = _map_index(pos, L, BOUNDARY)
        xv = tl.load(x_base + idx * sxw, mask=ok, other=0.0).to(tl.float32)
        widx = (u0 + u)[:, None] - t[None, :]
        wv = tl.load(w_ptr + o * K + widx, mask=(widx >= 0) & (widx < K), other=0.0)
        acc = tl.dot(xv, wv, acc, input_precision=PRECISION)
    # The Toeplitz zeros would spread a non-finite sample over whole tile rows (0·inf): see _any_nonfinite.
    # The tile is stored first and overwritten only where it must be: 160 registers against 185 with an
    # elementwise test before the store, which cost the 129-tap row 23% on an H100 (2553 vs 2074 µs); this
    # form costs 2.6% (2101 vs 2047 µs, twenty-second round).
    out = base + r[:, None] * T + t[None, :]
    y_off = n * syn + o.to(tl.int64) * syc + out.to(tl.int64) * syw
    tl.store(y_ptr + y_off, acc.to(y_ptr.dtype.element_ty), mask=out < LO)
    if _any_nonfinite(acc):
        tl.debug_barrier()
        _fir_refilter(
            x_base, w_ptr + o * K, y_ptr + n * syn + o.to(tl.int64) * syc, base, L, LO, sxw, syw, left, K,
            BOUNDARY, R, T,
        )  # fmt: skip


@triton.jit
def _bank_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    L,
    LO,
    M,
    n_fblocks,
    sxn,
    sxc,
    sxw,
    syn,
    syc,
    syw,
    stride,
    left,
    K: tl.constexpr,
    BOUNDARY: tl.constexpr,
    BL: tl.constexpr,
    BF: tl.constexpr,
    BK: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """A bank of ``M`` filters on one channel (channel multiplier, e.g. ``filter_bank``) as a matrix product:
    ``Y[l, f] = Σ_k X[l, k] W[c·M + f, k]`` with ``X[l, k] = x̃[c, l·stride + k - left]`` (an im2col tile
    gathered from L1, never written out). ``K`` multiply-adds per output on tensor cores."""
    c = tl.program_id(1) // n_fblocks
    f = (tl.program_id(1) % n_fblocks) * BF + tl.arange(0, BF)
    fm = f < M
    n = tl.program_id(2).to(tl.int64)
    l = tl.program_id(0) * BL + tl.arange(0, BL)
    x_base = x_ptr + n * sxn + c.to(tl.int64) * sxc
    rows = c * M + f
    acc = tl.zeros((BL, BF), dtype=tl.float32)
    for k0 in tl.static_range(0, K, BK):
        k = k0 + tl.arange(0, BK)
        km = k < K
        idx, ok = _map_index(l[:, None] * stride + k[None, :] - left, L, BOUNDARY)
        xv = tl.load(x_base + idx * sxw, mask=ok & km[None, :], other=0.0).to(tl.float32)
        wv = tl.load(w_ptr + rows[None, :] * K + k[:, None], mask=km[:, None] & fm[None, :], other=0.0)
        acc = tl.dot(xv, wv, acc, input_precision=PRECISION)
    # No structural zeros in this product (every tap of a row's window is in its reach), and Triton 3.6's
    # tf32x3 keeps an in-reach ±inf (see _any_nonfinite): no recompute (test_gpu_tensor_core_paths_...).
    y_off = n * syn + (rows.to(tl.int64) * syc)[None, :] + (l.to(tl.int64) * syw)[:, None]
    tl.store(y_ptr + y_off, acc.to(y_ptr.dtype.element_ty), mask=(l < LO)[:, None] & fm[None, :])


# ---------------------------------------------------------------------------------------------
# launchers


def _over_grid(run, x: torch.Tensor, *weights: torch.Tensor) -> torch.Tensor:
    """``run(x, *weights)`` (weights ``(C·M, ...)``), or, where the images or output channels exceed
    ``MAX_GRID_YZ`` (CUDA's limit on grid axes 1 and 2, where the stencils put them), ``run`` on slices of
    at most that many (whole input channels with their ``M`` filters; a multiplier beyond the limit still
    exceeds it) joined in ``x``'s memory format. Gradients flow through the join."""
    n, c = x.shape[0], x.shape[1]
    m = weights[0].shape[0] // c
    limit = _runtime.MAX_GRID_YZ
    if n <= limit and c * m <= limit:
        return run(x, *weights)
    per = max(1, limit // m)
    rows = []
    for b in grid_slices(n):
        parts = [run(x[b, s], *(w[s.start * m : s.stop * m] for w in weights)) for s in grid_slices(c, per)]
        rows.append(torch.cat(parts, 1))
    y = torch.cat(rows, 0)
    return y.contiguous(memory_format=torch.channels_last) if is_channels_last(x) else y


def _tiles(x: torch.Tensor, co: int, ho: int, wo: int, kh: int) -> tuple[int, int, int]:
    """(BLOCK_C, ROWS, BLOCK_W): the contiguous axis fastest (columns for NCHW and 1-D, channels for
    channels_last), ``ROWS`` output rows per program (1, 2, 4 or 8: more rows share more row loads, at
    ``ROWS`` accumulators per thread), shrunk to the problem so small images do not run mostly masked."""
    rows = 1 if ho == 1 else min(4 if kh < 8 else 8, next_pow2(ho))
    if is_channels_last(x):
        bc = min(64, max(2, next_pow2(co)))
        return bc, min(rows, 4), min(next_pow2(wo), max(2, 512 // bc))
    # 512 columns (4 per thread at 4 warps): measured on the H200, 128-column tiles (e7e6e3a, which let
    # interior tiles skip the column mapping) were 1.2-1.8x slower than 512 (9ca6223): 2544 vs 1414 us for
    # fp32 k=3, 7464 vs 6402 us for fp32 k=7 on 32x64x512x512 -- the per-tile row mapping, weight loads and
    # launch overhead dominate the column mapping they saved.
    return 1, rows, min(512, max(16, next_pow2(wo)))


def _like_format(x: torch.Tensor, shape: tuple[int, int, int, int], dtype: torch.dtype) -> torch.Tensor:
    n, c, h, w = shape
    if is_channels_last(x):
        return empty_output((n, h, w, c), dtype=dtype, device=x.device).permute(0, 3, 1, 2)
    return empty_output(shape, dtype=dtype, device=x.device)


def _ring_fits(x: torch.Tensor, kh: int, kw: int, *, stride, separable: bool, pads=(0, 0, 0, 0)) -> bool:
    """Whether :func:`_launch_ring` takes the call: NCHW (columns contiguous), stride 1, taps in range --
    for separable filters longer than ``_FUSED_SEP_MAX_TAPS``, at most ``_RING_LONG_MAX_TAPS`` down the
    column and row pads ``pads[2:]`` shorter than the row (:func:`_near_index`)."""
    if not _RING or is_channels_last(x) or tuple(stride) != (1, 1) or kh < 2:
        return False
    if not separable:
        return kh * kw <= _RING_MAX_TAPS
    if max(kh, kw) <= _FUSED_SEP_MAX_TAPS:
        return True
    return kh <= _RING_LONG_MAX_TAPS and max(pads[2], pads[3]) < x.shape[3]


def _ring_config(ho: int, wo: int, kh: int, *, long_w: bool = False) -> tuple[int, int, int]:
    """``(CYCLES, BLOCK_W, num_warps)`` of ``_ring_kernel``: the output rows split evenly into chunks of
    at most about ``_RING_ROWS`` (fewer halo rows per output row, and no mostly-empty last chunk), a
    whole number of ``KH``-row cycles each; ``_RING_BLOCK_W`` columns or the width, two per thread
    (the ``_TALL`` sizes from ``_RING_TALL_TAPS`` rows of taps; the ``_LONG`` sizes for long separable
    filters on strided rows)."""
    tall = kh >= _RING_TALL_TAPS
    chunks = -(-ho // (_RING_ROWS_LONG if long_w else _RING_ROWS_TALL if tall else _RING_ROWS))
    rows = -(-ho // chunks)
    cycles = -(-(rows + kh - 1) // kh)
    widest = _RING_BLOCK_W_LONG if long_w else _RING_BLOCK_W_TALL if tall else _RING_BLOCK_W
    block_w = min(widest, max(16, next_pow2(wo)))
    return cycles, block_w, max(1, block_w // 64)


def long_window(left: int, kw: int, vec: int) -> tuple[int, int]:
    """``(OFF, NB)`` of the long separable path at ``vec`` columns per thread: a thread's row window -- its
    columns' inputs rounded out to aligned ``vec``-wide blocks -- is ``NB`` blocks from ``OFF`` (≤ 0)
    columns from its first column."""
    off = -(-left // vec) * vec
    return -off, (vec - 1 + kw - 1 - left + off) // vec + 1


def long_window_tiles(
    n_tiles: int, block_w: int, width: int, *, off: int, nb: int, vec: int
) -> tuple[int, int]:
    """``(lo, hi)``: the column tiles ``lo..hi-1`` of the long separable path whose every thread's row
    window (``NB`` blocks from ``OFF``: :func:`long_window`) lies inside a row of ``width`` inputs (a
    contiguous run; ``(0, 0)`` when there is none)."""
    inside = [
        p
        for p in range(n_tiles)
        if p * block_w + off >= 0 and p * block_w + block_w - vec + off + nb * vec - 1 < width
    ]
    return (inside[0], inside[-1] + 1) if inside else (0, 0)


def _launch_ring(x, taps, y, *, kh, kw, div, top, left, boundary, separable, config=None):
    """One launch of ``_ring_kernel``; ``taps`` float32 ``(CO, KH·KW)`` or ``(CO, KH + KW)``
    contiguous; ``config``: ``(CYCLES, BLOCK_W, num_warps)`` instead of :func:`_ring_config` (the
    benchmark's variants)."""
    check_launchable(x, taps)
    ho, wo = y.shape[2], y.shape[3]
    long_w = separable and max(kh, kw) > _FUSED_SEP_MAX_TAPS
    cycles, bw, warps = _ring_config(ho, wo, kh, long_w=long_w) if config is None else config
    rows = cycles * kh - kh + 1
    _ring_kernel[(cdiv(ho, rows) * cdiv(wo, bw), y.shape[1], x.shape[0])](
        x, taps, y, x.shape[2], x.shape[3], ho, wo, div, *x.stride(), *y.stride(), top,
        LEFT=left, KH=kh, KW=kw, SEPARABLE=separable, BOUNDARY=_BOUNDARY_CODE[boundary], CYCLES=cycles,
        EVEN_W=wo % bw == 0, WHOLE_W=wo == x.shape[3] == bw, LONG_W=long_w, LONG_UNROLL=_LONG_UNROLL,
        BLOCK_W=bw, num_warps=warps,
    )  # fmt: skip
    return y


def long_rows_programs(x: torch.Tensor, total: int, kh: int, registers: int, warps: int) -> int:
    """Programs of :func:`_long_rows_kernel` for ``total`` strip rows: as many as the GPU holds at once
    (SMs × :func:`resident_programs`), fewer where a share would be under ``2·(KH - 1)`` rows (each
    segment spends ``KH - 1`` rows filling its register); under the interpreter ``_LONG_PROGRAMS_CPU``."""
    slots = sm_count(x.device) * resident_programs(registers, warps) if x.is_cuda else _LONG_PROGRAMS_CPU
    return max(1, min(slots, total // (2 * (kh - 1))))


def _launch_long_rows(x, taps, y, *, kh, kw, div, top, left, boundary, config=None, host_taps=None):
    """``_long_rows_kernel`` over the tiles whose row windows lie inside the row, then over the edge
    tiles (positions mapped; the mapping costs registers, so it is a launch of its own). ``taps``
    float32 ``(CO, KH + KW)`` contiguous; ``host_taps``: ``(wy, wx)`` as tuples of floats when every
    channel has those taps (:func:`shared_host_taps`), passed as kernel arguments. ``config``:
    ``(BLOCK_W, num_warps, registers, edge registers, programs)`` instead of ``_LONG_ROWS_ARGS`` /
    ``_LONG_ROWS_LOADED`` (``programs`` None: :func:`long_rows_programs`)."""
    check_launchable(x, taps)
    ho, wo = y.shape[2], y.shape[3]
    assert x.stride(3) == 1 and y.stride(3) == 1, "unit-stride rows"
    # Defaults: 4 columns per thread when the taps are kernel arguments, else 2 (the taps take registers).
    default = (*(_LONG_ROWS_ARGS if host_taps is not None else _LONG_ROWS_LOADED), None)
    bw, warps, regs, edge_regs, programs = default if config is None else config
    vec = bw // (32 * warps)
    if vec not in (2, 4):
        raise ValueError(f"config: BLOCK_W / (32·num_warps) must be 2 or 4 columns per thread, got {config}")
    wy_args, wx_args = host_taps if host_taps is not None else ((), ())
    n_wt = cdiv(wo, bw)
    off, nb = long_window(left, kw, vec)
    lo, hi = long_window_tiles(n_wt, bw, x.shape[3], off=off, nb=nb, vec=vec)
    # Rows Triton sees as 16-byte aligned (pointers, widths and strides, as it specializes them) load
    # their windows as vectors; others go through a layout change that needs the edge tiles' registers.
    aligned = all(map(divisible_by_16, (x, y, *x.shape[2:], ho, wo, *x.stride()[:3], *y.stride()[:3])))
    interior = regs if aligned else edge_regs
    for map_w, count, registers in ((False, hi - lo, interior), (True, n_wt - (hi - lo), edge_regs)):
        if count == 0:
            continue
        total = x.shape[0] * y.shape[1] * count * ho
        # The grid from the registers the compiled kernel uses, once a launch has told them (a short
        # filter needs far fewer than the cap, and an SM then holds more programs); the cap before that,
        # which can only undercount what an SM holds. The rows' arithmetic does not depend on the grid.
        key = (x.device.index, x.dtype, kh, kw, boundary, bw, warps, registers, map_w, aligned, len(wx_args))
        used = _LONG_ROWS_REGISTERS.get(key, registers)
        grid = programs or long_rows_programs(x, total, kh, used, warps)
        compiled = _long_rows_kernel[(grid,)](
            x, taps, y, x.shape[2], x.shape[3], ho, wo, y.shape[1], div, *x.stride()[:3], *y.stride()[:3],
            top, wy_args, wx_args, lo, hi, count, total,
            LEFT=left, KH=kh, KW=kw, BOUNDARY=_BOUNDARY_CODE[boundary], OFF=off, NB=nb, VEC=vec,
            PREFETCH=_LONG_PREFETCH if x.is_cuda else 0, TAPS_ARGS=host_taps is not None, MAP_W=map_w,
            BLOCK_W=bw, num_warps=warps, **({"maxnreg": registers} if x.is_cuda else {}),
        )  # fmt: skip
        if x.is_cuda and getattr(compiled, "n_regs", None):
            _LONG_ROWS_REGISTERS[key] = compiled.n_regs
    return y


# Registers per thread of each compiled _long_rows_kernel launch, by the launch's key (_launch_long_rows).
_LONG_ROWS_REGISTERS: dict[tuple, int] = {}


def _forward(
    x: torch.Tensor,
    w: torch.Tensor,
    *,
    co: int,
    ho: int,
    wo: int,
    div: int,
    j: int,
    stride: tuple[int, int],
    top: int,
    left: int,
    boundary: str,
    out_dtype: torch.dtype,
    out: torch.Tensor | None = None,
    config: tuple[int, int, int, int, bool] | None = None,
) -> torch.Tensor:
    """Launch ``_dw_kernel``, ``_dw_static_kernel`` or ``_ring_kernel``; ``w`` is float32 ``(co·j, kh, kw)``
    contiguous. ``out``: a preallocated output (any strides); ``config``: ``(BLOCK_C, ROWS, BLOCK_W,
    num_warps, static)`` or ``("ring", CYCLES, BLOCK_W, num_warps)`` instead of the default choice (the
    benchmark's variants)."""
    check_launchable(x, w)
    kh, kw = w.shape[1], w.shape[2]
    y = _like_format(x, (x.shape[0], co, ho, wo), out_dtype) if out is None else out
    if x.shape[2] == 1 and kh == 1 and j == 1 and kw >= _DOT_MIN_TAPS:
        if div >= _BANK_MIN_FILTERS:
            _launch_bank(x, w, y, m=div, stride=stride[1], left=left, boundary=boundary)
            return y
        if stride[1] == 1:
            _launch_toeplitz(x, w, y, div=div, left=left, boundary=boundary)
            return y
    ring = (
        config[0] == "ring"
        if config is not None
        else (j == 1 and _ring_fits(x, kh, kw, stride=stride, separable=False))
    )
    if ring:
        return _launch_ring(
            x, w.reshape(w.shape[0], kh * kw), y, kh=kh, kw=kw, div=div, top=top, left=left,
            boundary=boundary, separable=False, config=None if config is None else config[1:],
        )  # fmt: skip
    if config is None:
        bc, rows, bw = _tiles(x, co, ho, wo, kh)
        warps, static = 4, j == 1 and kh * kw <= _STATIC_MAX_TAPS
    else:
        bc, rows, bw, warps, static = config
    if bc > 1:
        # channels_last tiles read BLOCK_C channels' taps at once: taps-major layout makes that a contiguous
        # vector load (row-major taps made it BLOCK_C scattered lines per tap: measured 0.17-0.47x of cuDNN
        # on H200 at commit 9ca6223 before this change).
        w = w.reshape(w.shape[0], kh * kw).t().contiguous()
        w_rs, w_ts = 1, w.shape[1]
    else:
        w_rs, w_ts = kh * kw, 1
    grid = (cdiv(ho, rows) * cdiv(wo, bw), cdiv(co, bc), x.shape[0])
    if static:
        _dw_static_kernel[grid](
            x, w, y, co, x.shape[2], x.shape[3], ho, wo, div, *x.stride(), *y.stride(), stride[1], top,
            left, w_rs, w_ts,
            KH=kh, KW=kw, STRIDE_H=stride[0], BOUNDARY=_BOUNDARY_CODE[boundary], BLOCK_C=bc, ROWS=rows,
            BLOCK_W=bw, num_warps=warps,
        )  # fmt: skip
        return y
    _dw_kernel[grid](
        x, w, y, co, x.shape[2], x.shape[3], ho, wo, div, *x.stride(), *y.stride(), stride[1], top, left,
        w_rs, w_ts,
        KH=kh, KW=kw, J=j, STRIDE_H=stride[0], BOUNDARY=_BOUNDARY_CODE[boundary], UNROLL=kw <= _UNROLL_MAX,
        BLOCK_C=bc, ROWS=rows, BLOCK_W=bw, num_warps=warps,
    )  # fmt: skip
    return y


def _launch_toeplitz(x, w, y, *, div, left, boundary):
    r, t, bu, warps = _TOEPLITZ_TILE
    lo = y.shape[3]
    grid = (cdiv(lo, r * t), y.shape[1], x.shape[0])
    _fir_toeplitz_kernel[grid](
        x, w, y, x.shape[3], lo, div, x.stride(0), x.stride(1), x.stride(3), y.stride(0), y.stride(1),
        y.stride(3), left, K=w.shape[2], BOUNDARY=_BOUNDARY_CODE[boundary], R=r, T=t, BU=bu,
        PRECISION="tf32x3", num_warps=warps,
    )  # fmt: skip


def _launch_bank(x, w, y, *, m, stride, left, boundary):
    bl, bk, warps = _BANK_TILE
    bf = min(64, max(16, next_pow2(m)))
    lo = y.shape[3]
    n_fb = cdiv(m, bf)
    grid = (cdiv(lo, bl), x.shape[1] * n_fb, x.shape[0])
    _bank_kernel[grid](
        x, w, y, x.shape[3], lo, m, n_fb, x.stride(0), x.stride(1), x.stride(3), y.stride(0), y.stride(1),
        y.stride(3), stride, left, K=w.shape[2], BOUNDARY=_BOUNDARY_CODE[boundary], BL=bl, BF=bf, BK=bk,
        PRECISION="tf32x3", num_warps=warps,
    )  # fmt: skip


def _fold(gp: torch.Tensor, dim: int, before: int, n: int, boundary: str) -> torch.Tensor:
    """Adjoint of the boundary extension along ``dim``: the core plus every pad position added onto the
    sample it read. A Python loop over the (few) pad positions keeps the sum order fixed (deterministic)."""
    core = gp.narrow(dim, before, n).clone()
    if boundary == "zeros":
        return core
    from ..reference.depthwise import boundary_index

    total = gp.shape[dim]
    pads = [p for p in range(total) if p < before or p >= before + n]
    if pads:
        index, _ = boundary_index(torch.tensor(pads) - before, n, boundary)
        for p, i in zip(pads, index.tolist(), strict=True):
            core.narrow(dim, i, 1).add_(gp.narrow(dim, p, 1))
    return core


class _DepthwiseConv2d(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, stride, pads, boundary):
        top, bottom, left, right = pads
        c = x.shape[1]
        co, kh, kw = weight.shape
        ho = (x.shape[2] + top + bottom - kh) // stride[0] + 1
        wo = (x.shape[3] + left + right - kw) // stride[1] + 1
        # Taps as float32 contiguous: a few KB, read by every program (L1/L2 resident).
        w32 = weight.detach().to(torch.float32).contiguous()
        y = _forward(
            x, w32, co=co, ho=ho, wo=wo, div=co // c, j=1, stride=stride, top=top, left=left,
            boundary=boundary, out_dtype=x.dtype,
        )  # fmt: skip
        ctx.save_for_backward(x, weight)
        ctx.cfg = (stride, pads, boundary)
        return y

    @staticmethod
    def backward(ctx, g):
        x, weight = ctx.saved_tensors
        if torch.is_grad_enabled():
            # create_graph=True: the kernels' gradients would carry no graph, and second derivatives
            # (a gradient penalty, Hessian-vector products) would silently lose every term through them.
            # Through the torch twin on the saved inputs themselves, the gradients keep their dependence
            # on x, weight and g.
            stride, pads, boundary = ctx.cfg
            y = _depthwise_reference(x, weight, stride=stride, pads=pads, boundary=boundary)
            needs = ctx.needs_input_grad[:2]
            wanted = [t for t, need in zip((x, weight), needs, strict=True) if need]
            grads = iter(torch.autograd.grad(y, wanted, g, create_graph=True))
            gx, gw = (next(grads) if need else None for need in needs)
            return gx, gw, None, None, None
        stride, (top, bottom, left, right), boundary = ctx.cfg
        n, c, h, w = x.shape
        co, kh, kw = weight.shape
        m = co // c
        gx = gw = None
        if ctx.needs_input_grad[0]:
            w32 = weight.detach().to(torch.float32)
            hp, wp = h + top + bottom, w + left + right
            if stride == (1, 1):
                # Correlation with the flipped taps, each input channel summing its M filters.
                wf = w32.flip(1, 2).contiguous()
                if boundary == "zeros":
                    gx = _forward(
                        g, wf, co=c, ho=h, wo=w, div=1, j=m, stride=(1, 1), top=kh - 1 - top,
                        left=kw - 1 - left, boundary="zeros", out_dtype=torch.float32,
                    )  # fmt: skip
                else:
                    gp = _forward(
                        g, wf, co=c, ho=hp, wo=wp, div=1, j=m, stride=(1, 1), top=kh - 1, left=kw - 1,
                        boundary="zeros", out_dtype=torch.float32,
                    )  # fmt: skip
                    gx = _fold(_fold(gp, 2, top, h, boundary), 3, left, w, boundary)
            else:
                # Strided input gradient (resampling-style use, not a hot path): torch's transposed conv.
                gp = torch.nn.grad.conv2d_input(
                    (n, c, hp, wp), w32.unsqueeze(1), g.to(torch.float32), stride=stride, groups=c
                )
                gx = _fold(_fold(gp, 2, top, h, boundary), 3, left, w, boundary)
            gx = gx.to(x.dtype)
        if ctx.needs_input_grad[1]:
            ho, wo = g.shape[2], g.shape[3]
            block_t = min(16, next_pow2(kh * kw))
            block_p, steps = 128, 4
            n_chunks = cdiv(ho * wo, block_p * steps)
            part = empty_output((co, kh * kw, n * n_chunks), dtype=torch.float32, device=x.device)
            # (image, chunk) pairs on grid axis 0: they pass CUDA's 65535 on axes 1 and 2 at moderate sizes
            # (8 images of 2048×2048 make 65536); the channels are within it (_over_grid).
            _wgrad_kernel[(n * n_chunks, cdiv(kh * kw, block_t), co)](
                x, g, part, h, w, ho, wo, m, *x.stride(), *g.stride(), stride[0], stride[1], top, left,
                n_chunks, KH=kh, KW=kw, BOUNDARY=_BOUNDARY_CODE[boundary], BLOCK_T=block_t, BLOCK_P=block_p,
                STEPS=steps,
            )  # fmt: skip
            out = part.sum(2)
            gw = out.view(co, kh, kw).to(weight.dtype)
        return gx, gw, None, None, None


def depthwise_conv2d(
    x: torch.Tensor,
    weight: torch.Tensor,
    *,
    stride: tuple[int, int],
    pads: tuple[int, int, int, int],
    boundary: str,
) -> torch.Tensor:
    """Triton twin of :func:`nbxsig.reference.depthwise.depthwise_conv2d`."""
    stride, pads = tuple(stride), tuple(pads)
    return _over_grid(lambda xs, ws: _DepthwiseConv2d.apply(xs, ws, stride, pads, boundary), x, weight)


def _separable_fused(x, wy, wx, *, stride, pads, boundary, config=None):
    """``_ring_kernel`` or ``_long_rows_kernel`` (NCHW, stride 1; long row taps on unit-stride rows: the
    latter) or ``_sep_kernel`` (forward only). ``config``: ``("ring", CYCLES, BLOCK_W, num_warps)``,
    ``("long", BLOCK_W, num_warps, registers, edge registers, programs)`` (:func:`_launch_long_rows`), or
    ``(BLOCK_C, ROWS, BLOCK_W, num_warps)`` of ``_sep_kernel``, with a fifth entry, whether the band is
    unrolled (default: ``_SEP_STATIC_MAX_LOADS``)."""
    top, bottom, left, right = pads
    co, kh, kw = wy.shape[0], wy.shape[1], wx.shape[1]
    ho = (x.shape[2] + top + bottom - kh) // stride[0] + 1
    wo = (x.shape[3] + left + right - kw) // stride[1] + 1
    y = _like_format(x, (x.shape[0], co, ho, wo), x.dtype)
    ring = (
        config[0] == "ring"
        if config is not None
        else _ring_fits(x, kh, kw, stride=stride, separable=True, pads=pads)
    )
    long_rows = (
        config[0] == "long"
        if config is not None
        else ring and max(kh, kw) > _FUSED_SEP_MAX_TAPS and x.stride(3) == 1 and y.stride(3) == 1
    )
    if ring or long_rows:
        taps = torch.cat([wy.detach(), wx.detach()], dim=1).to(torch.float32).contiguous()
        launch = _launch_long_rows if long_rows else _launch_ring
        kwargs = {"host_taps": shared_host_taps(wy, wx)} if long_rows else {"separable": True}
        return launch(
            x, taps, y, kh=kh, kw=kw, div=co // x.shape[1], top=top, left=left, boundary=boundary,
            config=None if config is None else config[1:], **kwargs,
        )  # fmt: skip
    # Taps-major float32 taps (a few KB): one tap's channel vector is one contiguous load.
    wyt = wy.detach().to(torch.float32).t().contiguous()
    wxt = wx.detach().to(torch.float32).t().contiguous()
    check_launchable(x, wyt, wxt)
    bc, rows, bw, warps = (*_tiles(x, co, ho, wo, kh), 4) if config is None else config[:4]
    band_loads = ((rows - 1) * stride[0] + kh) * kw
    static = config[4] if config is not None and len(config) > 4 else band_loads <= _SEP_STATIC_MAX_LOADS
    if config is None and static and bc == 1:
        bw = min(bw, _SEP_STATIC_BLOCK_W)
    grid = (cdiv(ho, rows) * cdiv(wo, bw), cdiv(co, bc), x.shape[0])
    _sep_kernel[grid](
        x, wyt, wxt, y, co, x.shape[2], x.shape[3], ho, wo, co // x.shape[1], *x.stride(), *y.stride(),
        stride[1], top, left, co,
        KH=kh, KW=kw, STRIDE_H=stride[0], BOUNDARY=_BOUNDARY_CODE[boundary], UNROLL=kw <= _UNROLL_MAX,
        BLOCK_C=bc, ROWS=rows, BLOCK_W=bw, STATIC=static, num_warps=warps,
    )  # fmt: skip
    return y


def _check_tf32_tile(name: str, config: tuple, m: int, ns: tuple[int, ...], warps: int) -> None:
    """Refuse a tile whose float32 ``tl.dot`` (M = ``m``, each N in ``ns``) would be split into N = 8
    Hopper wgmma pieces: with 8 warps a 64-row dot puts its second warpgroup along N, and tile
    (64, 128, 16, 8) of ``_sep_dot_kernel`` (N = 16 → 8) faulted with an illegal address on the H200 under
    triton 3.6, poisoning the process's CUDA context. Its sm_90 PTX is the only one of the measured tiles
    with a TF32 ``m64n8k8`` wgmma (cf. triton-lang/triton#10629); tests/test_filters_compile.py checks the
    default tiles for it."""
    groups_n = max(1, (warps // 4) // max(1, m // 64))
    if any(n // groups_n < 16 for n in ns):
        raise bad_value(
            name, config, f"a tile whose dots keep N >= 16 per warpgroup ({warps} warps, M = {m})"
        )


def _separable_dot(x, wy, wx, *, pads, boundary, config=None):
    """One launch of ``_sep_dot_kernel`` (stride 1, forward only); ``config``: ``(BH, BW, BU, BV,
    num_warps)`` instead of ``_SEP_DOT_TILE`` (the benchmark's variants)."""
    top, bottom, left, right = pads
    n, c, h, w = x.shape
    co, kh, kw = wy.shape[0], wy.shape[1], wx.shape[1]
    y = _like_format(x, (n, co, h + top + bottom - kh + 1, w + left + right - kw + 1), x.dtype)
    wy32 = wy.detach().to(torch.float32).contiguous()
    wx32 = wx.detach().to(torch.float32).contiguous()
    check_launchable(x, wy32, wx32)
    bh, bw, bu, bv, warps = _SEP_DOT_TILE if config is None else config
    _check_tf32_tile("config", (bh, bw, bu, bv, warps), bh, (bu, bw), warps)
    ho, wo = y.shape[2], y.shape[3]
    grid = (cdiv(ho, bh) * cdiv(wo, bw), co, n)
    _sep_dot_kernel[grid](
        x, wy32, wx32, y, h, w, ho, wo, co // c, *x.stride(), *y.stride(), top, left,
        KH=kh, KW=kw, BOUNDARY=_BOUNDARY_CODE[boundary], BH=bh, BW=bw, BU=bu, BV=bv, PRECISION="tf32x3",
        num_warps=warps,
    )  # fmt: skip
    return y


def _separable_chunked(x, wy, wx, *, stride, pads, boundary, budget):
    """Column pass then row pass (forward only), over chunks of (image, channels) planes so the float32
    intermediate stays within ``budget`` bytes (at least one plane): the whole-image intermediate was 403 MB
    extra for 8×3×2048×2048 float32, and a chunk this small can stay in L2 between the passes."""
    top, bottom, left, right = pads
    n, c, h, w = x.shape
    co, kh, kw = wy.shape[0], wy.shape[1], wx.shape[1]
    m = co // c
    hm = (h + top + bottom - kh) // stride[0] + 1
    wo = (w + left + right - kw) // stride[1] + 1
    y = _like_format(x, (n, co, hm, wo), x.dtype)
    wy32 = wy.detach().to(torch.float32).unsqueeze(2).contiguous()
    wx32 = wx.detach().to(torch.float32).unsqueeze(1).contiguous()
    per_plane = hm * w * 4 * m
    planes = max(1, budget // per_plane)
    if planes >= c:
        spans = [(n0, min(n, n0 + planes // c), 0, c) for n0 in range(0, n, planes // c)]
    else:
        spans = [(i, i + 1, c0, min(c, c0 + planes)) for i in range(n) for c0 in range(0, c, planes)]
    n1, c1 = spans[0][1] - spans[0][0], spans[0][3] - spans[0][2]
    mid_all = _like_format(x, (n1, c1 * m, hm, w), torch.float32)
    for a, b, c0, c1 in spans:
        xs = x[a:b, c0:c1]
        mid = mid_all[: b - a, : (c1 - c0) * m]
        _forward(
            xs, wy32[c0 * m : c1 * m], co=(c1 - c0) * m, ho=hm, wo=w, div=m, j=1, stride=(stride[0], 1),
            top=top, left=0, boundary=boundary, out_dtype=torch.float32, out=mid,
        )  # fmt: skip
        _forward(
            mid, wx32[c0 * m : c1 * m], co=(c1 - c0) * m, ho=hm, wo=wo, div=1, j=1, stride=(1, stride[1]),
            top=0, left=left, boundary=boundary, out_dtype=x.dtype, out=y[a:b, c0 * m : c1 * m],
        )  # fmt: skip
    return y


def depthwise_conv2d_separable(
    x: torch.Tensor,
    weight_y: torch.Tensor,
    weight_x: torch.Tensor,
    *,
    stride: tuple[int, int],
    pads: tuple[int, int, int, int],
    boundary: str,
) -> torch.Tensor:
    """Triton twin of :func:`nbxsig.reference.depthwise.depthwise_conv2d_separable`.

    Without gradients: short kernels (both sides ≤ ``_FUSED_SEP_MAX_TAPS``) and, NCHW at stride 1, longer
    ones with at most ``_RING_LONG_MAX_TAPS`` down the column run fused in one pass (the ring, else
    ``_sep_kernel``: no intermediate, float32 between the passes); else from ``_SEP_DOT_MIN_TAPS`` taps
    (31; None turns it off) the tensor-core form (``_separable_dot``); else a column pass then a row pass
    over plane chunks (``_separable_chunked``: a float32 intermediate of at most ``_SEP_CHUNK_BYTES``).
    With gradients: a column pass into a float32 intermediate (keeps float16 inputs at float32 accuracy
    between the passes), then a row pass, each one launch of the stencil kernel; gradients compose
    through both."""
    return _over_grid(
        lambda xs, wy, wx: _separable(xs, wy, wx, stride=stride, pads=pads, boundary=boundary),
        x,
        weight_y,
        weight_x,
    )


def _separable(x, weight_y, weight_x, *, stride, pads, boundary):
    """:func:`depthwise_conv2d_separable` on at most ``MAX_GRID_YZ`` images and output channels."""
    top, bottom, left, right = pads
    if not (
        torch.is_grad_enabled() and (x.requires_grad or weight_y.requires_grad or weight_x.requires_grad)
    ):
        channels_last = is_channels_last(x)
        kh, kw = weight_y.shape[1], weight_x.shape[1]
        taps = max(kh, kw)
        if taps <= _FUSED_SEP_MAX_TAPS or _ring_fits(x, kh, kw, stride=stride, separable=True, pads=pads):
            return _separable_fused(x, weight_y, weight_x, stride=stride, pads=pads, boundary=boundary)
        dot = _SEP_DOT_MIN_TAPS is not None and taps >= _SEP_DOT_MIN_TAPS
        if dot and stride == (1, 1) and not channels_last:
            return _separable_dot(x, weight_y, weight_x, pads=pads, boundary=boundary)
        return _separable_chunked(
            x, weight_y, weight_x, stride=stride, pads=pads, boundary=boundary, budget=_SEP_CHUNK_BYTES
        )
    mid = _DepthwiseConv2d.apply(
        x.to(torch.float32) if x.dtype != torch.float32 else x,
        weight_y.unsqueeze(2),
        (stride[0], 1),
        (top, bottom, 0, 0),
        boundary,
    )
    y = _DepthwiseConv2d.apply(mid, weight_x.unsqueeze(1), (1, stride[1]), (0, 0, left, right), boundary)
    return y.to(x.dtype)


# ---------------------------------------------------------------------------------------------
# polyphase resampling


@triton.jit
def _resample_kernel(
    x_ptr,
    bank_ptr,
    off_ptr,
    y_ptr,
    L,
    LO,
    sxb,
    sxl,
    syb,
    ORIG,
    NEW,
    J: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """``y[b, l·NEW + p] = Σ_j bank[p, j] · x[b, l·ORIG + off[p] + j]`` (zeros outside the signal)."""
    b = tl.program_id(1).to(tl.int64)
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    om = o < LO
    lo = o // NEW
    p = o - lo * NEW
    start = lo.to(tl.int64) * ORIG + tl.load(off_ptr + p, mask=om, other=0)
    x_base = x_ptr + b * sxb
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for j in range(J):
        idx = start + j
        m = om & (idx >= 0) & (idx < L)
        xv = tl.load(x_base + idx * sxl, mask=m, other=0.0).to(tl.float32)
        wv = tl.load(bank_ptr + p * J + j, mask=om, other=0.0)
        acc += wv * xv
    tl.store(y_ptr + b * syb + o, acc.to(y_ptr.dtype.element_ty), mask=om)


@triton.jit
def _resample_refilter(
    x_base, d_cols, y_base, l0, start, r0, p, L, LO, sxl, ORIG, NEW, J, BL: tl.constexpr, BN: tl.constexpr
):  # fmt: skip
    """The tile's ``BL`` frames from ``l0`` × ``BN`` phases ``p`` summed directly over each phase's own
    ``J`` taps, ``Σ_j D[r0 + j, q] · x[l·ORIG + start + r0 + j]`` (``D``'s columns at ``d_cols``, rows
    ``BN`` apart; zeros outside the signal; float32, a runtime loop over the taps): the per-output
    kernel's sum. Stored in chunks of frames."""
    LC: tl.constexpr = max(1, min(BL, 1024 // BN))
    for c in range(0, BL, LC):
        l = (l0 + c + tl.arange(0, LC)).to(tl.int64)
        row0 = l * ORIG + start
        acc = tl.zeros((LC, BN), dtype=tl.float32)
        for j in range(J):
            idx = row0[:, None] + (r0 + j)[None, :]
            xv = tl.load(x_base + idx * sxl, mask=(idx >= 0) & (idx < L), other=0.0).to(tl.float32)
            acc += xv * tl.load(d_cols + (r0 + j) * BN)[None, :]
        o = l[:, None] * NEW + p[None, :]
        tl.store(y_base + o, acc.to(y_base.dtype.element_ty), mask=(p < NEW)[None, :] & (o < LO))


@triton.jit
def _resample_dot_kernel(
    x_ptr,
    d_ptr,
    start_ptr,
    rows_ptr,
    y_ptr,
    L,
    LO,
    sxb,
    sxl,
    syb,
    ORIG,
    NEW,
    J,
    KS: tl.constexpr,
    BL: tl.constexpr,
    BN: tl.constexpr,
    BU: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """Polyphase resampling of ``BL`` frames × ``BN`` phases as a matrix product on tensor cores:
    ``Y[l, q] = y[b, l·NEW + p0 + q] = Σ_s X[l, s] · D[pb, s, q]`` with
    ``X[l, s] = x[b, l·ORIG + start[pb] + s]`` (zeros outside the signal) and ``D`` the phase block's
    taps placed at each phase's offset (:func:`_phase_blocks`). The rows of ``X`` are contiguous runs of
    the input (coalesced loads; the per-output form issued two scattered loads per tap). ``KS·BU``
    multiply-adds per output instead of the ~``J`` of the direct form, at tensor-core rate: the op stays
    bound by bytes. float32 operands go through ``tf32x3`` (~float32 accuracy). ``rows[p]``: the row of
    ``D`` where phase ``p``'s ``J`` taps start."""
    pb = tl.program_id(1)
    b = tl.program_id(2).to(tl.int64)
    l = (tl.program_id(0) * BL + tl.arange(0, BL)).to(tl.int64)
    q = tl.arange(0, BN)
    s = tl.arange(0, BU)
    x_base = x_ptr + b * sxb
    start = tl.load(start_ptr + pb)
    row0 = l * ORIG + start
    d_base = d_ptr + pb * (KS * BU * BN)
    acc = tl.zeros((BL, BN), dtype=tl.float32)
    for c in range(KS):
        idx = row0[:, None] + (c * BU + s)[None, :]
        xv = tl.load(x_base + idx * sxl, mask=(idx >= 0) & (idx < L), other=0.0).to(tl.float32)
        dv = tl.load(d_base + (c * BU + s)[:, None] * BN + q[None, :])
        acc = tl.dot(xv, dv, acc, input_precision=PRECISION)
    p = pb * BN + q
    # D's zeros would spread a non-finite sample over every phase of its frames (0·inf): see
    # _any_nonfinite.
    if _any_nonfinite(acc):
        _resample_refilter(
            x_base, d_base + q, y_ptr + b * syb, tl.program_id(0) * BL, start, tl.load(rows_ptr + p), p, L,
            LO, sxl, ORIG, NEW, J, BL, BN,
        )  # fmt: skip
    else:
        o = l[:, None] * NEW + p[None, :]
        tl.store(y_ptr + b * syb + o, acc.to(y_ptr.dtype.element_ty), mask=(p < NEW)[None, :] & (o < LO))


# A tile (BL frames, BN phases per block, BU samples per chunk, num_warps) selects the tensor-core form
# (_resample_dot_kernel); None the per-output kernel (_resample_kernel). Measured on the H200 at 5335111
# (2026-12-03), 64×10 s, 44100→16000 / 16000→44100 / 48000→22050: (64, 32, 32, 4) 122 / 122 / 151 µs,
# the best other tiles 117 / 126 / 133 µs, the per-output kernel 565 / 282 / 401 µs (torchaudio 1781 /
# 1497 / 1487 µs).
_RESAMPLE_TILE: tuple[int, int, int, int] | None = (64, 32, 32, 4)


# Device forms of the polyphase banks, cached per (bank, tile, device). Two caches, as nbxsig.filters keeps
# the host banks: many small banks (every common rate pair is far below _LARGE_BANK taps), and only the
# last two large ones -- a large coprime pair's bank (up to 2^24 taps) would otherwise stay alive here,
# with its device copies, long after the host cache dropped it.
_LARGE_BANK = 2**20


def _device_bank(
    compact: torch.Tensor, offsets: torch.Tensor, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Device copies of the cached host bank (float32) and offsets, made once: a per-call host-to-device
    copy waits for the GPU, and the launch's host time after it shows as idle GPU time."""
    cached = _device_bank_large if compact.numel() > _LARGE_BANK else _device_bank_small
    return cached(compact, offsets, device)


def _phase_blocks(
    compact: torch.Tensor, offsets: torch.Tensor, bn: int, bu: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """:func:`_build_phase_blocks`, cached (see :func:`_device_bank`)."""
    cached = _phase_blocks_large if compact.numel() > _LARGE_BANK else _phase_blocks_small
    return cached(compact, offsets, bn, bu, device)


def _copy_bank(
    compact: torch.Tensor, offsets: torch.Tensor, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    return compact.to(device=device, dtype=torch.float32).contiguous(), offsets.to(device)


_device_bank_small = lru_cache(maxsize=64)(_copy_bank)
_device_bank_large = lru_cache(maxsize=2)(_copy_bank)


def _build_phase_blocks(
    compact: torch.Tensor, offsets: torch.Tensor, bn: int, bu: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """The compact polyphase bank ``(new, J)`` with its per-phase input offsets, regrouped for
    ``_resample_dot_kernel``: blocks of ``bn`` phases, each a dense ``(KS·bu, bn)`` float32 matrix whose
    column ``q`` holds phase ``pb·bn + q``'s taps from row ``offset - start[pb]``, plus ``start`` (int64,
    per block), those first rows (int32, per phase, padded to whole blocks) and ``KS``. Cached per (bank,
    tile, device): ``compact``/``offsets`` are the cached host tensors of ``nbxsig.filters._polyphase``, so
    the identity key is stable and no call copies taps to the device."""
    new, j = compact.shape
    n_pb = -(-new // bn)
    off = offsets.to(torch.int64)
    pad = torch.cat([off, off[-1:].expand(n_pb * bn - new)]).view(n_pb, bn)
    start = pad.min(1).values
    span = int((pad.max(1).values - start).max().item()) + j
    ks = -(-span // bu)
    d = torch.zeros(n_pb, ks * bu, bn, dtype=torch.float64)
    p = torch.arange(new)
    rows = (off - start[p // bn])[:, None] + torch.arange(j)[None, :]
    d[(p // bn)[:, None], rows, (p % bn)[:, None]] = compact.to(torch.float64)
    first = (pad - start[:, None]).reshape(-1).to(torch.int32)
    return d.to(device=device, dtype=torch.float32), start.to(device), first.to(device), ks


_phase_blocks_small = lru_cache(maxsize=64)(_build_phase_blocks)
_phase_blocks_large = lru_cache(maxsize=2)(_build_phase_blocks)


_resample_dot_launch = CachedLaunch(_resample_dot_kernel)


def _resample_launch(x, y, *, orig, new, length, compact, offsets):
    """One launch of ``_resample_kernel`` or ``_resample_dot_kernel`` over the signals ``x`` (B, L) into
    ``y`` (B, LO), B at most ``MAX_GRID_YZ``."""
    b, lo = y.shape
    if _RESAMPLE_TILE is None:
        bank, off = _device_bank(compact, offsets, x.device)
        check_launchable(x, bank, off)
        block = 512
        _resample_kernel[(cdiv(lo, block), b)](
            x, bank, off, y, length, lo, x.stride(0), x.stride(1), y.stride(0), orig, new,
            bank.shape[1], BLOCK=block,
        )  # fmt: skip
    else:
        bl, bn, bu, warps = _RESAMPLE_TILE
        bn = min(bn, max(16, next_pow2(new)))
        _check_tf32_tile("_RESAMPLE_TILE", _RESAMPLE_TILE, bl, (bn,), warps)
        blocks, start, first, ks = _phase_blocks(compact, offsets, bn, bu, x.device)
        check_launchable(x, blocks, start, first)
        grid = (cdiv(cdiv(lo, new), bl), blocks.shape[0], b)
        # Through the compiled handle: Triton's own launch path is host time of the order of the kernel's.
        # H100, 64 × 10 s, one process (twenty-third round): host time a call 132 → 115 µs (44100→16000),
        # 121 → 112 (48000→22050), 128 → 122 (16000→44100); device time and output bits unchanged.
        _resample_dot_launch(
            grid,
            (x, blocks, start, first, y, length, lo, x.stride(0), x.stride(1), y.stride(0), orig, new,
             compact.shape[1]),
            dict(KS=ks, BL=bl, BN=bn, BU=bu, PRECISION="tf32x3"),
            warps,
        )  # fmt: skip


class _Resample(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, orig, new, kernel, width, compact, offsets):
        b, length = x.shape
        lo = -(-new * length // orig)
        y = empty_output((b, lo), dtype=x.dtype, device=x.device)
        # The signals ride on grid axis 1 or 2: more than CUDA's 65535 take several launches.
        for rows in grid_slices(b):
            _resample_launch(
                x[rows], y[rows], orig=orig, new=new, length=length, compact=compact, offsets=offsets
            )
        ctx.cfg = (orig, new, kernel, width, x.shape, x.dtype)
        return y

    @staticmethod
    def backward(ctx, g):
        orig, new, kernel, width, shape, dtype = ctx.cfg
        # The adjoint of a fixed linear map, through the reference's autograd (not a hot path); under
        # create_graph=True with a graph, so that it stays differentiable in g (second derivatives).
        higher = torch.is_grad_enabled()
        with torch.enable_grad():
            probe = torch.zeros(shape, dtype=torch.float32, device=g.device, requires_grad=True)
            y = _resample_reference(probe, orig=orig, new=new, kernel=kernel.to(g.device), width=width)
            (gx,) = torch.autograd.grad(y, probe, g.to(torch.float32), create_graph=higher)
        return gx.to(dtype), None, None, None, None, None, None


def resample(
    x: torch.Tensor,
    *,
    orig: int,
    new: int,
    kernel: torch.Tensor,
    width: int,
    compact: torch.Tensor,
    offsets: torch.Tensor,
) -> torch.Tensor:
    """Triton twin of :func:`nbxsig.reference.depthwise.resample` on the compact polyphase bank
    (``compact``, ``offsets``: the cached host tensors of ``nbxsig.filters._polyphase``; the device forms
    are cached here, keyed by their identity)."""
    return _Resample.apply(x, orig, new, kernel, width, compact, offsets)
