"""Fused int4 dequant-GEMV (``M = 1..8`` rows) as a Triton kernel.

Each program owns ``BLOCK_N`` output columns and walks all of ``K`` in a fixed order -- no split-K,
no atomics, so the result is deterministic and independent of the grid. Per step it loads a tile
of ``BLOCK_R`` packed rows (``8·BLOCK_R`` values of ``K``) × ``BLOCK_N`` columns, coalesced along
``N``, dequantizes each nibble in float32 (``q·scale`` is exact, so ``q·scale + min`` is rounded
once whether or not it becomes an FMA) and adds ``x[k]·w[k, n]`` into one of ``BLOCK_R`` partial
sums per output (lane ``r`` owns packed rows ``r, r + BLOCK_R, ...``). The lanes are summed at the
end by an explicit pairwise tree. Compiled with ``enable_fp_fusion=False`` so every product and sum
is rounded on its own, the operation order is exactly that of
:func:`nbxsig.reference.int4.int4_gemv_blocked`, which the tests check bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ._runtime import check_launchable, empty_output

MAX_GEMV_ROWS = 8


@dataclass(frozen=True)
class GemvConfig:
    block_m: int
    block_r: int
    block_n: int
    num_warps: int
    num_stages: int


def gemv_config(m: int) -> GemvConfig:
    """Tile sizes for ``m`` rows (pure; the tests pass ``block_r`` to the oracle).

    ``BLOCK_N = 32`` keeps enough programs in flight for N = 4096 on ~132 SMs (128 programs) while a
    row of 32 int32 words is one 128-byte transaction. ``BLOCK_R = 32`` for one row: on an H200
    (bench suite "quant", 1×4096 @ 4096×11008) it measured 35.9 µs against 93.9 µs for 64 and
    70.8 µs for 128 -- eager timings that include launch overhead, so re-tune with graph timings.
    ``BLOCK_R`` shrinks as ``m`` grows so the ``m × BLOCK_R × BLOCK_N`` float32 partial sums stay at
    8-16 registers per thread.
    """
    block_m = max(1, triton.next_power_of_2(m))
    block_r = {1: 32, 2: 16, 4: 8, 8: 8}[block_m]
    return GemvConfig(block_m=block_m, block_r=block_r, block_n=32, num_warps=4, num_stages=3)


@triton.jit
def _nibble(words, i: tl.constexpr):
    """Nibble ``i`` of each word as float32, exactly.

    Instead of an int→float conversion (16 per clock per SM on sm_80/sm_90 in the CUDA guide's
    throughput table, a quarter of the float adds: at 8 per word it alone would put a 4096×11008
    GEMV near 10 µs on an H200) the nibble is OR-ed into the mantissa of 2^23 and 2^23 subtracted:
    ``float(0x4B000000 | q) - 2^23 == q`` exactly, with one integer OR and one float add.
    """
    bits = ((words >> (4 * i)) & 0xF) | 0x4B000000
    return bits.to(tl.float32, bitcast=True) - 8388608.0


@triton.jit
def _pair_sum(acc, BLOCK_M: tl.constexpr, HALF: tl.constexpr, BLOCK_N: tl.constexpr):
    """``(BLOCK_M, 2·HALF, BLOCK_N)`` → ``(BLOCK_M, HALF, BLOCK_N)``: lane ``2j`` + lane ``2j+1``."""
    pairs = tl.permute(tl.reshape(acc, (BLOCK_M, HALF, 2, BLOCK_N)), (0, 1, 3, 2))
    even, odd = tl.split(pairs)
    return even + odd


@triton.jit
def _int4_gemv_kernel(
    x_ptr,
    packed_ptr,
    scales_ptr,
    mins_ptr,
    bias_ptr,
    out_ptr,
    M,
    N,
    stride_xm,
    stride_xk,
    stride_pr,
    stride_pn,
    stride_sg,
    stride_sn,
    stride_om,
    stride_on,
    N_ROWS: tl.constexpr,
    GROUP_ROWS: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = n < N
    m = tl.arange(0, BLOCK_M)
    m_mask = m < M
    r = tl.arange(0, BLOCK_R)
    acc = tl.zeros((BLOCK_M, BLOCK_R, BLOCK_N), dtype=tl.float32)
    for r0 in range(0, N_ROWS, BLOCK_R):
        row = r0 + r
        row_mask = row < N_ROWS
        tile_mask = row_mask[:, None] & n_mask[None, :]
        # int64 row offsets: (K/8)·N words can pass 2^31 for very large layers.
        words = tl.load(
            packed_ptr + row.to(tl.int64)[:, None] * stride_pr + n[None, :] * stride_pn,
            mask=tile_mask,
            other=0,
        )
        g = (row // GROUP_ROWS).to(tl.int64)
        s_off = g[:, None] * stride_sg + n[None, :] * stride_sn
        scale = tl.load(scales_ptr + s_off, mask=tile_mask, other=0.0).to(tl.float32)
        low = tl.load(mins_ptr + s_off, mask=tile_mask, other=0.0).to(tl.float32)
        x_mask = m_mask[:, None] & row_mask[None, :]
        for i in tl.static_range(8):
            w = _nibble(words, i) * scale + low
            k = row.to(tl.int64) * 8 + i
            xv = tl.load(x_ptr + m[:, None] * stride_xm + k[None, :] * stride_xk, mask=x_mask, other=0.0)
            acc = acc + xv.to(tl.float32)[:, :, None] * w[None, :, :]
    # Pairwise tree over the lanes: lane 2j + lane 2j+1, level by level (the oracle does the same).
    tl.static_assert(BLOCK_R <= 128, "the lane tree below has 7 levels")
    if BLOCK_R >= 128:
        acc = _pair_sum(acc, BLOCK_M, 64, BLOCK_N)
    if BLOCK_R >= 64:
        acc = _pair_sum(acc, BLOCK_M, 32, BLOCK_N)
    if BLOCK_R >= 32:
        acc = _pair_sum(acc, BLOCK_M, 16, BLOCK_N)
    if BLOCK_R >= 16:
        acc = _pair_sum(acc, BLOCK_M, 8, BLOCK_N)
    if BLOCK_R >= 8:
        acc = _pair_sum(acc, BLOCK_M, 4, BLOCK_N)
    if BLOCK_R >= 4:
        acc = _pair_sum(acc, BLOCK_M, 2, BLOCK_N)
    if BLOCK_R >= 2:
        acc = _pair_sum(acc, BLOCK_M, 1, BLOCK_N)
    out = tl.reshape(acc, (BLOCK_M, BLOCK_N))
    if HAS_BIAS:
        out = out + tl.load(bias_ptr + n, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    tl.store(
        out_ptr + m[:, None] * stride_om + n[None, :] * stride_on,
        out.to(out_ptr.dtype.element_ty),
        mask=m_mask[:, None] & n_mask[None, :],
    )


@triton.jit
def _dequant_kernel(
    packed_ptr,
    scales_ptr,
    mins_ptr,
    out_ptr,
    N,
    stride_pr,
    stride_pn,
    stride_sg,
    stride_sn,
    N_ROWS: tl.constexpr,
    GROUP_ROWS: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (row < N_ROWS)[:, None] & (n < N)[None, :]
    row64 = row.to(tl.int64)
    words = tl.load(packed_ptr + row64[:, None] * stride_pr + n[None, :] * stride_pn, mask=mask, other=0)
    s_off = (row64 // GROUP_ROWS)[:, None] * stride_sg + n[None, :] * stride_sn
    scale = tl.load(scales_ptr + s_off, mask=mask, other=0.0).to(tl.float32)
    low = tl.load(mins_ptr + s_off, mask=mask, other=0.0).to(tl.float32)
    for i in tl.static_range(8):
        w = _nibble(words, i) * scale + low
        # Output (K, N) row-major: row k = 8·row + i, contiguous along N, so stores coalesce.
        tl.store(
            out_ptr + (row64 * 8 + i)[:, None] * N + n[None, :], w.to(out_ptr.dtype.element_ty), mask=mask
        )


def dequantize_kn(
    packed: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor, group_size: int, *, dtype: torch.dtype
) -> torch.Tensor:
    """Triton twin of :func:`nbxsig.reference.int4.dequantize_kn`: ``(K, N)`` weight in ``dtype``."""
    rows, n = packed.shape
    device = check_launchable(packed, scales, mins)
    out = empty_output((rows * 8, n), dtype=dtype, device=device)
    block_r, block_n = 16, 128
    _dequant_kernel[(triton.cdiv(rows, block_r), triton.cdiv(n, block_n))](
        packed,
        scales,
        mins,
        out,
        n,
        packed.stride(0),
        packed.stride(1),
        scales.stride(0),
        scales.stride(1),
        N_ROWS=rows,
        GROUP_ROWS=group_size // 8,
        BLOCK_R=block_r,
        BLOCK_N=block_n,
        num_warps=4,
    )
    return out


def int4_gemv(
    x: torch.Tensor,
    packed: torch.Tensor,
    scales: torch.Tensor,
    mins: torch.Tensor,
    group_size: int,
    bias: torch.Tensor | None = None,
    *,
    config: GemvConfig | None = None,
) -> torch.Tensor:
    """``x (M, K) @ dequantize(W)ᵀ (+ bias)`` → ``(M, N)`` in ``x.dtype``, ``M ≤ 8``; reads by strides."""
    m, k = x.shape
    n = packed.shape[1]
    device = check_launchable(x, packed, scales, mins, *(() if bias is None else (bias,)))
    cfg = config or gemv_config(m)
    out = empty_output((m, n), dtype=x.dtype, device=device)
    grid = (triton.cdiv(n, cfg.block_n),)
    _int4_gemv_kernel[grid](
        x,
        packed,
        scales,
        mins,
        bias if bias is not None else out,  # never read without HAS_BIAS
        out,
        m,
        n,
        x.stride(0),
        x.stride(1),
        packed.stride(0),
        packed.stride(1),
        scales.stride(0),
        scales.stride(1),
        out.stride(0),
        out.stride(1),
        # K is a constexpr: a model has a handful of distinct K, a known trip count lets the compiler
        # unroll/pipeline, and Triton 3.6's interpreter cannot loop to a runtime bound under numpy 2.4.
        N_ROWS=k // 8,
        GROUP_ROWS=group_size // 8,
        HAS_BIAS=bias is not None,
        BLOCK_M=cfg.block_m,
        BLOCK_R=cfg.block_r,
        BLOCK_N=cfg.block_n,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
        # No FMA contraction: x·w + acc is rounded twice, as in the torch oracle (bit-exact tests).
        enable_fp_fusion=False,
    )
    return out


def int4_linear(
    x: torch.Tensor,
    packed: torch.Tensor,
    scales: torch.Tensor,
    mins: torch.Tensor,
    group_size: int,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Triton path of :func:`nbxsig.quant.int4_linear` for ``x (M, K)`` with ``M ≤ 8``."""
    return int4_gemv(x, packed, scales, mins, group_size, bias)
