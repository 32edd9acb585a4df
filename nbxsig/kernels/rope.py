"""Rotary embedding on the Triton backend (the twin of :func:`nbxsig.reference.models.rope`): one launch.

``x (..., H, D)`` is read as ``(rows, H, D)`` rows of heads; each program rotates ``BLOCK_R`` rows,
all heads, both halves of the last dim::

    a[i] = float32(pos[row]) · inv_freq[i]                        (i < D/2; the host's table)
    y[.., i]       = x[.., i] · cos a[i] − x[.., i + D/2] · sin a[i]
    y[.., i + D/2] = x[.., i + D/2] · cos a[i] + x[.., i] · sin a[i]

in float32, stored in x's dtype. The angles are the torch twin's float32 products (same table, same
positions cast to float32), so a position's angle has the same bits on both backends. torch's eager
form takes about a dozen launches (angles, cos, sin, casts, four products, two sums, the
concatenation); a streaming step calls it twice per layer.

Backward: :class:`_Rope` applies the transposed rotation -- this op at the negated angles (itself
differentiable, for second derivatives).

:func:`rope_and_cache` is a streaming step's whole attention input in one launch
(:func:`_rope_cache_kernel`): ``q`` and ``k`` rotated, the rotated ``k`` and ``v`` stored straight into the
KV cache's slot ``pos % slots`` (torch's form: rope twice, a remainder and two indexed writes, each
its own launch).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..errors import bad_value
from ._launch import CachedLaunch
from ._runtime import cdiv, check_launchable, empty_output, next_pow2

#: Elements per program (rows × heads × D): small rows share a program.
_TILE = 4096
#: Programs a launch aims for (about one per SM of an H100/H200) before rows share one.
_PROGRAMS = 128


@triton.jit
def _rope_kernel(
    x_ptr,
    pos_ptr,
    freq_ptr,
    y_ptr,
    n_rows,
    heads,
    half,
    stride_xr,
    stride_xh,
    BLOCK_R: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_D: tl.constexpr,  # >= half
):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    h = tl.arange(0, BLOCK_H)
    i = tl.arange(0, BLOCK_D)
    row_ok = rows < n_rows
    ok = row_ok[:, None, None] & (h < heads)[None, :, None] & (i < half)[None, None, :]
    angle = (
        tl.load(pos_ptr + rows, mask=row_ok, other=0).to(tl.float32)[:, None]
        * tl.load(freq_ptr + i, mask=i < half, other=0.0)[None, :]
    )
    cos = tl.cos(angle)[:, None, :]
    sin = tl.sin(angle)[:, None, :]
    x_at = x_ptr + rows.to(tl.int64)[:, None, None] * stride_xr + h[None, :, None] * stride_xh
    x_at += i[None, None, :]
    x1 = tl.load(x_at, mask=ok, other=0.0).to(tl.float32)
    x2 = tl.load(x_at + half, mask=ok, other=0.0).to(tl.float32)
    # The output is contiguous (rows, heads, 2·half).
    y_at = y_ptr + rows.to(tl.int64)[:, None, None] * (heads * 2 * half) + h[None, :, None] * (2 * half)
    y_at += i[None, None, :]
    tl.store(y_at, (x1 * cos - x2 * sin).to(y_ptr.dtype.element_ty), mask=ok)
    tl.store(y_at + half, (x2 * cos + x1 * sin).to(y_ptr.dtype.element_ty), mask=ok)


_launch = CachedLaunch(_rope_kernel)


def _forward(x: torch.Tensor, pos: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    device = check_launchable(x, pos, inv_freq)
    *lead, heads, dim = x.shape
    half = dim // 2
    rows = x.reshape(-1, heads, dim)
    if rows.stride(2) != 1:
        rows = rows.contiguous()
    # One position per row; a broadcast (e.g. (T,) against (B, T)) is materialised, small.
    positions = pos.expand(lead).reshape(-1)
    y = empty_output(tuple(x.shape), dtype=x.dtype, device=device)
    n_rows = rows.shape[0]
    if n_rows == 0 or heads == 0 or half == 0:
        return y
    block_h, block_d = next_pow2(heads), next_pow2(half)
    # Rows per program: at most a tile, and few enough that a step's batch spreads over the SMs.
    block_r = max(1, min(_TILE // (block_h * block_d), next_pow2(cdiv(n_rows, _PROGRAMS))))
    args = (rows, positions, inv_freq, y, n_rows, heads, half, rows.stride(0), rows.stride(1))
    constexprs = {"BLOCK_R": block_r, "BLOCK_H": block_h, "BLOCK_D": block_d}
    _launch((cdiv(n_rows, block_r), 1), args, constexprs, 4)
    return y


class _Rope(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, pos, inv_freq):
        ctx.save_for_backward(pos, inv_freq)
        return _forward(x, pos, inv_freq)

    @staticmethod
    def backward(ctx, grad):
        pos, inv_freq = ctx.saved_tensors
        # A rotation's transpose is the rotation by the opposite angle: the same kernel with the
        # frequencies negated (exact: -(p·f) = p·(-f), cos even, sin odd). Through rope, not the bare
        # launch: under create_graph=True the gradient is itself differentiable in grad (a bare
        # launch cut it from the graph and second derivatives silently lost this path).
        return rope(grad, pos, -inv_freq), None, None


def rope(x: torch.Tensor, pos: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """Triton twin of :func:`nbxsig.reference.models.rope`: ``x (..., H, D)`` float16/bfloat16/float32,
    ``pos`` broadcastable to ``x.shape[:-2]``, ``inv_freq (D/2,)`` float32 → ``(..., H, D)`` in
    ``x.dtype``; differentiable in ``x``."""
    if torch.is_grad_enabled() and x.requires_grad:
        return _Rope.apply(x, pos, inv_freq)
    return _forward(x, pos, inv_freq)


@triton.jit
def _rotate(src, dst, cos, sin, ok, HALF: tl.constexpr):
    """``dst[.., i], dst[.., i + HALF] = x1·cos − x2·sin, x2·cos + x1·sin`` for the pointer tiles
    ``src``/``dst`` over ``i < HALF`` (float32 math, stored in dst's dtype)."""
    x1 = tl.load(src, mask=ok, other=0.0).to(tl.float32)
    x2 = tl.load(src + HALF, mask=ok, other=0.0).to(tl.float32)
    tl.store(dst, (x1 * cos - x2 * sin).to(dst.dtype.element_ty), mask=ok)
    tl.store(dst + HALF, (x2 * cos + x1 * sin).to(dst.dtype.element_ty), mask=ok)


@triton.jit
def _rope_cache_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    pos_ptr,
    freq_ptr,
    qo_ptr,
    kc_ptr,
    vc_ptr,
    n_rows,
    slots,
    stride_qb,
    stride_qh,
    stride_kb,
    stride_kh,
    stride_vb,
    stride_vh,
    stride_kcb,
    stride_kch,
    stride_kcs,
    stride_vcb,
    stride_vch,
    stride_vcs,
    HQ: tl.constexpr,
    HKV: tl.constexpr,
    HALF: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_HQ: tl.constexpr,
    BLOCK_HKV: tl.constexpr,
    BLOCK_D: tl.constexpr,  # >= HALF
):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_ok = rows < n_rows
    i = tl.arange(0, BLOCK_D)
    pos = tl.load(pos_ptr + rows, mask=row_ok, other=0)
    angle = pos.to(tl.float32)[:, None] * tl.load(freq_ptr + i, mask=i < HALF, other=0.0)[None, :]
    cos = tl.cos(angle)[:, None, :]
    sin = tl.sin(angle)[:, None, :]
    r64 = rows.to(tl.int64)[:, None, None]
    # q: rotated into a contiguous (rows, HQ, 2·HALF) output.
    hq = tl.arange(0, BLOCK_HQ)[None, :, None]
    ok = row_ok[:, None, None] & (hq < HQ) & (i < HALF)[None, None, :]
    q_at = q_ptr + r64 * stride_qb + hq * stride_qh + i[None, None, :]
    _rotate(q_at, qo_ptr + r64 * (HQ * 2 * HALF) + hq * (2 * HALF) + i[None, None, :], cos, sin, ok, HALF)
    # k rotated and v copied into slot pos % slots of each row's caches.
    slot = (pos % slots).to(tl.int64)[:, None, None]
    hk = tl.arange(0, BLOCK_HKV)[None, :, None]
    ok = row_ok[:, None, None] & (hk < HKV) & (i < HALF)[None, None, :]
    _rotate(k_ptr + r64 * stride_kb + hk * stride_kh + i[None, None, :],
            kc_ptr + r64 * stride_kcb + hk * stride_kch + slot * stride_kcs + i[None, None, :], cos, sin, ok,
            HALF)  # fmt: skip
    for part in tl.static_range(2):  # v's two halves, copied
        j = part * HALF + i[None, None, :]
        v = tl.load(v_ptr + r64 * stride_vb + hk * stride_vh + j, mask=ok, other=0.0)
        tl.store(vc_ptr + r64 * stride_vcb + hk * stride_vch + slot * stride_vcs + j,
                 v.to(vc_ptr.dtype.element_ty), mask=ok)  # fmt: skip


_cache_launch = CachedLaunch(_rope_cache_kernel)


def rope_and_cache(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    pos: torch.Tensor,
    inv_freq: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
) -> torch.Tensor:
    """Triton twin of :func:`nbxsig.reference.models.rope_and_cache` (no autograd: a decode step), one
    launch. Each of ``q``, ``k``, ``v`` and the caches is read by its strides (last dim unit)."""
    device = check_launchable(q, k, v, pos, inv_freq, k_cache, v_cache)
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        if cache.stride(-1) != 1:  # written in place: no copy can stand in
            raise bad_value(name, cache, "a cache with a unit stride along head_dim (written in place)")
    batch, hq, dim = q.shape
    hkv = k.shape[1]
    half = dim // 2
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    out = empty_output((batch, hq, dim), dtype=q.dtype, device=device)
    if batch == 0:
        return out
    block_hq, block_hkv, block_d = next_pow2(hq), next_pow2(hkv), next_pow2(half)
    block_r = max(1, min(_TILE // (block_hq * block_d), next_pow2(cdiv(batch, _PROGRAMS))))
    args = (q, k, v, pos, inv_freq, out, k_cache, v_cache, batch, k_cache.shape[2], q.stride(0), q.stride(1),
            k.stride(0), k.stride(1), v.stride(0), v.stride(1), k_cache.stride(0), k_cache.stride(1),
            k_cache.stride(2), v_cache.stride(0), v_cache.stride(1), v_cache.stride(2))  # fmt: skip
    constexprs = dict(HQ=hq, HKV=hkv, HALF=half, BLOCK_R=block_r, BLOCK_HQ=block_hq, BLOCK_HKV=block_hkv,
                      BLOCK_D=block_d)  # fmt: skip
    _cache_launch((cdiv(batch, block_r), 1), args, constexprs, 4)
    return out
