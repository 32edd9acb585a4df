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
per (output channel, tap block), looping in a fixed order, so it is deterministic.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..reference.depthwise import BOUNDARIES
from ..reference.depthwise import resample as _resample_reference
from ._runtime import check_launchable, empty_output

_BOUNDARY_CODE = {
    name: i for i, name in enumerate(BOUNDARIES)
}  # zeros, reflect, symmetric, replicate, circular
# Up to this many taps per row are unrolled (tl.static_range); above it a runtime loop keeps compile time
# and instruction-cache footprint bounded.
_UNROLL_MAX = 32
# 1-D filters with at least this many taps run as matrix products on tensor cores (see
# _fir_toeplitz_kernel / _bank_kernel); banks of at least _BANK_MIN_FILTERS filters per channel use the
# shared-input form. Chosen from the cost model (the direct stencil issues one L1 load per tap and output,
# the Toeplitz product ~3·(128 + K) tensor-core MACs); the bench suite measures both paths at 33/65/129 taps.
_DOT_MIN_TAPS = 48
_BANK_MIN_FILTERS = 16


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


@triton.jit
def _row_taps(
    acc,
    x_row,
    w_row,
    ow,
    cmask,
    rmask,
    wmask,
    W,
    sxw,
    stride_w,
    left,
    KW: tl.constexpr,
    BOUNDARY: tl.constexpr,
    MAP_W: tl.constexpr,
    UNROLL: tl.constexpr,
):
    """Accumulate the ``KW`` taps of one kernel row. ``x_row``: [BC, BH, 1] pointers to the rows read;
    ``w_row``: [BC] pointers to the row's first tap."""
    m2 = cmask[:, None, None] & rmask[None, :, None]
    if UNROLL:
        for k in tl.static_range(KW):
            col = ow * stride_w + (k - left)
            if MAP_W:
                col, cok = _map_index(col, W, BOUNDARY)
                cm = wmask & cok
            else:
                cm = wmask
            wv = tl.load(w_row + k, mask=cmask, other=0.0)
            xv = tl.load(x_row + (col * sxw)[None, None, :], mask=m2 & cm[None, None, :], other=0.0)
            acc += wv[:, None, None] * xv.to(tl.float32)
    else:
        for k in range(KW):
            col = ow * stride_w + (k - left)
            if MAP_W:
                col, cok = _map_index(col, W, BOUNDARY)
                cm = wmask & cok
            else:
                cm = wmask
            wv = tl.load(w_row + k, mask=cmask, other=0.0)
            xv = tl.load(x_row + (col * sxw)[None, None, :], mask=m2 & cm[None, None, :], other=0.0)
            acc += wv[:, None, None] * xv.to(tl.float32)
    return acc


@triton.jit
def _tile(
    acc,
    x_base,
    w_ptr,
    co,
    oh,
    ow,
    cmask,
    hmask,
    wmask,
    H,
    W,
    DIV,
    sxc,
    sxh,
    sxw,
    stride_h,
    stride_w,
    top,
    left,
    KH: tl.constexpr,
    KW: tl.constexpr,
    J: tl.constexpr,
    BOUNDARY: tl.constexpr,
    MAP_W: tl.constexpr,
    UNROLL: tl.constexpr,
):
    for j in range(J):
        ci = (co // DIV) * J + j
        c_off = ci.to(tl.int64) * sxc
        w_base = w_ptr + (co * J + j) * (KH * KW)
        for i in range(KH):
            r, rok = _map_index(oh * stride_h + (i - top), H, BOUNDARY)
            x_row = x_base + c_off[:, None, None] + (r.to(tl.int64) * sxh)[None, :, None]
            acc = _row_taps(
                acc, x_row, w_base + i * KW, ow, cmask, hmask & rok, wmask, W, sxw, stride_w, left,
                KW, BOUNDARY, MAP_W, UNROLL,
            )  # fmt: skip
    return acc


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
    stride_h,
    stride_w,
    top,
    left,
    KH: tl.constexpr,
    KW: tl.constexpr,
    J: tl.constexpr,
    BOUNDARY: tl.constexpr,
    UNROLL: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_W: tl.constexpr,
):
    n_wt = tl.cdiv(WO, BLOCK_W)
    pid_h = tl.program_id(0) // n_wt
    pid_w = tl.program_id(0) % n_wt
    co = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    oh = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    ow = pid_w * BLOCK_W + tl.arange(0, BLOCK_W)
    n = tl.program_id(2).to(tl.int64)
    cmask = co < CO
    hmask = oh < HO
    wmask = ow < WO
    x_base = x_ptr + n * sxn
    acc = tl.zeros((BLOCK_C, BLOCK_H, BLOCK_W), dtype=tl.float32)
    # Column halo of this tile inside the image: no column mapping, offsets stay contiguous.
    first = pid_w * BLOCK_W * stride_w - left
    last = (pid_w * BLOCK_W + BLOCK_W - 1) * stride_w + KW - 1 - left
    if (first >= 0) & (last < W):
        acc = _tile(
            acc, x_base, w_ptr, co, oh, ow, cmask, hmask, wmask, H, W, DIV, sxc, sxh, sxw, stride_h, stride_w,
            top, left, KH, KW, J, BOUNDARY, False, UNROLL,
        )  # fmt: skip
    else:
        acc = _tile(
            acc, x_base, w_ptr, co, oh, ow, cmask, hmask, wmask, H, W, DIV, sxc, sxh, sxw, stride_h, stride_w,
            top, left, KH, KW, J, BOUNDARY, True, UNROLL,
        )  # fmt: skip
    y_off = (
        n * syn
        + (co.to(tl.int64) * syc)[:, None, None]
        + (oh.to(tl.int64) * syh)[None, :, None]
        + (ow * syw)[None, None, :]
    )
    mask = cmask[:, None, None] & hmask[None, :, None] & wmask[None, None, :]
    tl.store(y_ptr + y_off, acc.to(y_ptr.dtype.element_ty), mask=mask)


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
    """Partial taps gradient of one (output channel, tap block, image, chunk of positions):
    ``part[o, t, n, q] = Σ_{p in chunk q} g[n, o, p] · x̃[n, o // M, p_h·sy + t_i - top, p_w·sx + t_k - left]``
    (``x̃`` extended by the boundary).
    The partials are summed over ``(n, q)`` by the launcher in a fixed order (deterministic); loop bounds
    are compile-time constants (``STEPS`` blocks of ``BLOCK_P`` positions per program)."""
    co = tl.program_id(0)
    t = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)
    n = tl.program_id(2) // n_chunks
    q = tl.program_id(2) % n_chunks
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
    n_parts = tl.num_programs(2)
    tl.store(part_ptr + (co * (KH * KW) + t) * n_parts + tl.program_id(2), tl.sum(acc, axis=1), mask=tmask)


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
    out = base + r[:, None] * T + t[None, :]
    y_off = n * syn + o.to(tl.int64) * syc + out.to(tl.int64) * syw
    tl.store(y_ptr + y_off, acc.to(y_ptr.dtype.element_ty), mask=out < LO)


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
    y_off = n * syn + (rows.to(tl.int64) * syc)[None, :] + (l.to(tl.int64) * syw)[:, None]
    tl.store(y_ptr + y_off, acc.to(y_ptr.dtype.element_ty), mask=(l < LO)[:, None] & fm[None, :])


# ---------------------------------------------------------------------------------------------
# launchers


def _next_pow2(v: int) -> int:
    return 1 << max(0, (v - 1).bit_length())


def _tiles(x: torch.Tensor, co: int, ho: int, wo: int) -> tuple[int, int, int]:
    """(BLOCK_C, BLOCK_H, BLOCK_W): contiguous axis fastest, ~1024 outputs per program (8 per thread at
    4 warps), shrunk to the problem so small images do not run mostly-masked tiles."""
    if x.stride(1) == 1 and x.shape[1] > 1:  # channels_last: channels are contiguous
        bc = min(64, _next_pow2(co))
        bw = min(_next_pow2(wo), max(1, 1024 // bc // 2))
        bh = min(_next_pow2(ho), 2)
        return bc, bh, bw
    if ho == 1:  # a 1-D signal
        return 1, 1, min(1024, max(16, _next_pow2(wo)))
    bw = min(128, max(16, _next_pow2(wo)))
    bh = min(_next_pow2(ho), max(1, 1024 // bw))
    return 1, bh, bw


def _like_format(x: torch.Tensor, shape: tuple[int, int, int, int], dtype: torch.dtype) -> torch.Tensor:
    n, c, h, w = shape
    if x.stride(1) == 1 and x.shape[1] > 1 and not x.is_contiguous():
        return empty_output((n, h, w, c), dtype=dtype, device=x.device).permute(0, 3, 1, 2)
    return empty_output(shape, dtype=dtype, device=x.device)


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
) -> torch.Tensor:
    """Launch ``_dw_kernel``; ``w`` is float32 ``(co·j, kh, kw)`` contiguous."""
    check_launchable(x, w)
    kh, kw = w.shape[1], w.shape[2]
    y = _like_format(x, (x.shape[0], co, ho, wo), out_dtype)
    if x.shape[2] == 1 and kh == 1 and j == 1 and kw >= _DOT_MIN_TAPS:
        if div >= _BANK_MIN_FILTERS:
            _launch_bank(x, w, y, m=div, stride=stride[1], left=left, boundary=boundary)
            return y
        if stride[1] == 1:
            _launch_toeplitz(x, w, y, div=div, left=left, boundary=boundary)
            return y
    bc, bh, bw = _tiles(x, co, ho, wo)
    grid = (triton.cdiv(ho, bh) * triton.cdiv(wo, bw), triton.cdiv(co, bc), x.shape[0])
    _dw_kernel[grid](
        x, w, y, co, x.shape[2], x.shape[3], ho, wo, div, *x.stride(), *y.stride(), stride[0], stride[1],
        top, left,
        KH=kh, KW=kw, J=j, BOUNDARY=_BOUNDARY_CODE[boundary], UNROLL=kw <= _UNROLL_MAX,
        BLOCK_C=bc, BLOCK_H=bh, BLOCK_W=bw, num_warps=4,
    )  # fmt: skip
    return y


def _launch_toeplitz(x, w, y, *, div, left, boundary):
    r, t, bu = 64, 128, 32
    lo = y.shape[3]
    grid = (triton.cdiv(lo, r * t), y.shape[1], x.shape[0])
    _fir_toeplitz_kernel[grid](
        x, w, y, x.shape[3], lo, div, x.stride(0), x.stride(1), x.stride(3), y.stride(0), y.stride(1),
        y.stride(3), left, K=w.shape[2], BOUNDARY=_BOUNDARY_CODE[boundary], R=r, T=t, BU=bu,
        PRECISION="tf32x3", num_warps=8,
    )  # fmt: skip


def _launch_bank(x, w, y, *, m, stride, left, boundary):
    bl, bk = 128, 32
    bf = min(64, max(16, _next_pow2(m)))
    lo = y.shape[3]
    n_fb = triton.cdiv(m, bf)
    grid = (triton.cdiv(lo, bl), x.shape[1] * n_fb, x.shape[0])
    _bank_kernel[grid](
        x, w, y, x.shape[3], lo, m, n_fb, x.stride(0), x.stride(1), x.stride(3), y.stride(0), y.stride(1),
        y.stride(3), stride, left, K=w.shape[2], BOUNDARY=_BOUNDARY_CODE[boundary], BL=bl, BF=bf, BK=bk,
        PRECISION="tf32x3", num_warps=8,
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
            block_t = min(16, _next_pow2(kh * kw))
            block_p, steps = 128, 4
            n_chunks = triton.cdiv(ho * wo, block_p * steps)
            part = empty_output((co, kh * kw, n * n_chunks), dtype=torch.float32, device=x.device)
            _wgrad_kernel[(co, triton.cdiv(kh * kw, block_t), n * n_chunks)](
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
    return _DepthwiseConv2d.apply(x, weight, tuple(stride), tuple(pads), boundary)


def depthwise_conv2d_separable(
    x: torch.Tensor,
    weight_y: torch.Tensor,
    weight_x: torch.Tensor,
    *,
    stride: tuple[int, int],
    pads: tuple[int, int, int, int],
    boundary: str,
) -> torch.Tensor:
    """Triton twin of :func:`nbxsig.reference.depthwise.depthwise_conv2d_separable`: a column pass into a
    float32 intermediate (keeps float16 inputs at float32 accuracy between the passes), then a row pass.
    Each pass is one launch of the stencil kernel; gradients compose through both."""
    top, bottom, left, right = pads
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


class _Resample(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, orig, new, kernel, width, compact, offsets):
        check_launchable(x, compact, offsets)
        b, length = x.shape
        lo = -(-new * length // orig)
        y = empty_output((b, lo), dtype=x.dtype, device=x.device)
        bank = compact.to(torch.float32).contiguous()
        block = 512
        _resample_kernel[(triton.cdiv(lo, block), b)](
            x, bank, offsets, y, length, lo, x.stride(0), x.stride(1), y.stride(0), orig, new, bank.shape[1],
            BLOCK=block,
        )  # fmt: skip
        ctx.cfg = (orig, new, kernel, width, x.shape, x.dtype)
        return y

    @staticmethod
    def backward(ctx, g):
        orig, new, kernel, width, shape, dtype = ctx.cfg
        # The adjoint of a fixed linear map, through the reference's autograd (not a hot path).
        with torch.enable_grad():
            probe = torch.zeros(shape, dtype=torch.float32, device=g.device, requires_grad=True)
            y = _resample_reference(probe, orig=orig, new=new, kernel=kernel, width=width)
            (gx,) = torch.autograd.grad(y, probe, g.to(torch.float32))
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
    """Triton twin of :func:`nbxsig.reference.depthwise.resample` on the compact polyphase bank."""
    return _Resample.apply(x, orig, new, kernel, width, compact, offsets)
