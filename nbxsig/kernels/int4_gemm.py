"""Fused int4 dequant-GEMM (``M > 8`` rows of float16/bfloat16 input) as one Triton kernel.

Each program owns a ``BLOCK_M × BLOCK_N`` output tile and walks K in a fixed order, ``8·BLOCK_R``
values of K a step: all of K by default, or one of ``split_k`` contiguous ranges (:class:`GemmConfig`),
whose float32 partials the tile's last program to arrive adds in split order (an arrival counter per
tile, as in ``int4_gemv``: no atomics on the data, deterministic). A step loads ``BLOCK_R × BLOCK_N``
packed words, the matching ``BLOCK_M × 8·BLOCK_R`` tile of x and the group's scales and mins, expands the
words to the ``8·BLOCK_R × BLOCK_N`` weight tile in K order (row ``k = 8r + i`` is nibble ``i`` of
word row ``r``), dequantizes ``w = q·scale + min`` in float32 -- the product is exact, so this is the
one rounding of :func:`nbxsig.quant.dequantize_int4` -- rounds ``w`` to x's dtype (the same bits that
function returns) and adds ``x_tile @ w_tile`` to a float32 accumulator with one ``tl.dot`` (tensor
cores). The result is ``x @ dequantize(w, dtype=x.dtype)ᵀ`` up to the order of the float32 additions.

Why: the path it replaces dequantized the whole weight into a temporary and then called
``F.linear`` -- two launches and a write and read of the dense weight on every call. A streaming step
with a few hundred streams is set by those launches, not by its arithmetic: the SeqModel step
(256 streams, eight layers) spent 135 µs of its 668 in 58 dequantizations (fifteenth round,
docs/benchmarks.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ._launch import PDL_LAUNCH, CachedLaunch, pdl_supported
from ._runtime import cdiv, check_launchable, empty_output
from ._splitsum import zeroed_counters
from .int4_gemv import _finish  # the GEMV's epilogue: (+ bias), cast, store

#: Packed rows a step (K 64 a step).
BLOCK_R = 8
_NUM_WARPS = 4
_NUM_STAGES = 3
#: About one program per SM on a 132-SM H100/H200: smaller tiles until the grid has this many.
_TARGET_PROGRAMS = 128
# Launch-time switch, as int4_gemv's: programmatic dependent launch on sm_90+ (each program waits
# for the previous grid before its first load; the next grid may launch once the K loop is done).
PDL = True


@dataclass(frozen=True)
class GemmConfig:
    """Tiles, pipeline and K split of one dequant-GEMM launch (``gemm_config`` picks them from the shape)."""

    block_m: int
    block_n: int
    block_r: int = BLOCK_R  # packed rows a step (K = 8·block_r a step)
    num_warps: int = _NUM_WARPS
    num_stages: int = _NUM_STAGES
    split_k: int = 1  # contiguous K ranges, each its own program; partials summed in split order

    def split_steps(self, rows: int) -> int:
        """Steps a split walks (the last split may walk fewer): all of them with one split."""
        steps = cdiv(rows, self.block_r)
        return cdiv(steps, min(self.split_k, steps))

    def n_splits(self, rows: int) -> int:
        """Splits made of ``rows`` packed rows: ``split_k`` at most, fewer where the steps run out."""
        return cdiv(cdiv(rows, self.block_r), self.split_steps(rows))


def gemm_config(m: int, k: int, n: int) -> GemmConfig:
    """The launch for ``x (m, k) @ W (n, k)ᵀ`` (pure, shape only): :func:`gemm_tiles`, one K split."""
    return GemmConfig(*gemm_tiles(m, n))


def gemm_tiles(m: int, n: int) -> tuple[int, int]:
    """``(BLOCK_M, BLOCK_N)`` for ``m`` rows and ``n`` columns (pure, shape only): 64 × 64 tiles,
    halved (down to 16 rows, 32 columns) while the grid has fewer than ``_TARGET_PROGRAMS``
    programs -- a streaming step's few hundred rows would otherwise leave most SMs idle."""
    block_m, block_n = 64, 64
    while cdiv(m, block_m) * cdiv(n, block_n) < _TARGET_PROGRAMS:
        if block_m > 16 and block_m >= block_n:
            block_m //= 2
        elif block_n > 32:
            block_n //= 2
        elif block_m > 16:
            block_m //= 2
        else:
            break
    return block_m, block_n


@triton.jit(do_not_specialize=["M"])
def _int4_gemm_kernel(
    x_ptr,
    packed_ptr,
    scales_ptr,
    mins_ptr,
    bias_ptr,
    out_ptr,
    part_ptr,
    count_ptr,
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
    N_ROWS: tl.constexpr,  # K // 8 packed rows
    GROUP_ROWS: tl.constexpr,  # group_size // 8
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_R: tl.constexpr,
    SPLIT_STEPS: tl.constexpr,  # steps a K split walks
    N_SPLITS: tl.constexpr,
    PDL: tl.constexpr,
):
    BLOCK_K: tl.constexpr = 8 * BLOCK_R
    STEPS: tl.constexpr = (N_ROWS + BLOCK_R - 1) // BLOCK_R
    # One scale/min row per step when a step never straddles a group (steps start at multiples of
    # BLOCK_R); otherwise one per packed row.
    SCALE_PER_STEP: tl.constexpr = GROUP_ROWS % BLOCK_R == 0
    EVEN_K: tl.constexpr = N_ROWS % BLOCK_R == 0
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    sp = tl.program_id(2)
    m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = m < M
    n_ok = n < N
    r = tl.arange(0, BLOCK_R)
    kk = tl.arange(0, BLOCK_K)
    shifts = 4 * tl.arange(0, 8)
    x_rows = x_ptr + m.to(tl.int64)[:, None] * stride_xm
    if PDL:  # x is the previous layer's output: its writes are visible after this
        tl.extra.cuda.gdc_wait()
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in tl.range(sp * SPLIT_STEPS, tl.minimum((sp + 1) * SPLIT_STEPS, STEPS)):
        rows = step * BLOCK_R + r
        k = step * BLOCK_K + kk
        if EVEN_K:
            x = tl.load(x_rows + k[None, :] * stride_xk, mask=m_ok[:, None], other=0.0)
            w_ok = n_ok[None, :] & (r < BLOCK_R)[:, None]
        else:
            x_ok = m_ok[:, None] & (k < 8 * N_ROWS)[None, :]
            x = tl.load(x_rows + k[None, :] * stride_xk, mask=x_ok, other=0.0)
            w_ok = n_ok[None, :] & (rows < N_ROWS)[:, None]
        words = tl.load(packed_ptr + rows.to(tl.int64)[:, None] * stride_pr + n[None, :] * stride_pn,
                        mask=w_ok, other=0)  # fmt: skip
        # (BLOCK_R, 8, BLOCK_N) nibbles → (BLOCK_K, BLOCK_N): row 8r + i is nibble i of word row r.
        q = tl.reshape((words[:, None, :] >> shifts[None, :, None]) & 0xF, (BLOCK_K, BLOCK_N))
        # OR into the mantissa of 2^23 and subtract 2^23: exactly q as a float32 (as int4_gemv).
        qf = (q | 0x4B000000).to(tl.float32, bitcast=True) - 8388608.0
        if SCALE_PER_STEP:
            s_at = tl.cast(step * BLOCK_R // GROUP_ROWS, tl.int64) * stride_sg + n * stride_sn
            scale = tl.load(scales_ptr + s_at, mask=n_ok, other=0.0).to(tl.float32)[None, :]
            low = tl.load(mins_ptr + s_at, mask=n_ok, other=0.0).to(tl.float32)[None, :]
        else:
            s_at = (rows // GROUP_ROWS).to(tl.int64)[:, None] * stride_sg + n[None, :] * stride_sn
            s_rows = tl.load(scales_ptr + s_at, mask=w_ok, other=0.0).to(tl.float32)
            m_rows = tl.load(mins_ptr + s_at, mask=w_ok, other=0.0).to(tl.float32)
            scale = tl.reshape(tl.broadcast_to(s_rows[:, None, :], (BLOCK_R, 8, BLOCK_N)), (BLOCK_K, BLOCK_N))
            low = tl.reshape(tl.broadcast_to(m_rows[:, None, :], (BLOCK_R, 8, BLOCK_N)), (BLOCK_K, BLOCK_N))
        # q·scale is exact (4 × 11 significant bits): one rounding in float32, one to x's dtype.
        w = (qf * scale + low).to(x_ptr.dtype.element_ty)
        acc = tl.dot(x, w, acc)
    if PDL:  # the K loop is done: the next grid may launch now
        tl.extra.cuda.gdc_launch_dependents()
    out_ok = m_ok[:, None] & n_ok[None, :]
    out = out_ptr + m.to(tl.int64)[:, None] * stride_om + n[None, :] * stride_on
    if N_SPLITS == 1:
        _finish(acc, bias_ptr, out, n, n_ok, out_ok, HAS_BIAS)
    else:
        # Partials (N_SPLITS, M, N) float32, then one arrival per program on the tile's counter; the
        # last program adds the partials in split order (as int4_gemv: deterministic, no data atomics).
        plane = tl.cast(M, tl.int64) * N  # one split's partials
        p_off = m.to(tl.int64)[:, None] * N + n[None, :]
        tl.store(part_ptr + sp * plane + p_off, acc, mask=out_ok)
        tl.debug_barrier()  # every thread's partial is stored before the (release) increment
        tile = pid_m * tl.num_programs(1) + pid_n
        arrived = tl.atomic_add(count_ptr + tile, 1, sem="acq_rel", scope="gpu")
        if arrived == N_SPLITS - 1:
            # ".cg" reads L2, never a stale L1 line of another SM's partial.
            total = tl.load(part_ptr + p_off, mask=out_ok, other=0.0, cache_modifier=".cg")
            for s in tl.static_range(1, N_SPLITS):
                total += tl.load(part_ptr + s * plane + p_off, mask=out_ok, other=0.0, cache_modifier=".cg")
            tl.atomic_xchg(count_ptr + tile, 0, sem="relaxed", scope="gpu")  # ready for the next launch
            _finish(total, bias_ptr, out, n, n_ok, out_ok, HAS_BIAS)


_launch = CachedLaunch(_int4_gemm_kernel)


def int4_gemm(
    x: torch.Tensor,
    packed: torch.Tensor,
    scales: torch.Tensor,
    mins: torch.Tensor,
    group_size: int,
    bias: torch.Tensor | None = None,
    *,
    config: GemmConfig | None = None,
) -> torch.Tensor:
    """``x (M, K) @ dequantize(W)ᵀ (+ bias)`` → ``(M, N)`` in ``x.dtype`` (float16/bfloat16), float32
    accumulation; reads x, the packed words, scales and mins by their strides. ``config``: the launch
    (default :func:`gemm_config`)."""
    m, k = x.shape
    n = packed.shape[1]
    device = check_launchable(x, packed, scales, mins, *(() if bias is None else (bias,)))
    out = empty_output((m, n), dtype=x.dtype, device=device)
    if m == 0 or n == 0:
        return out
    cfg = config or gemm_config(m, k, n)
    rows = k // 8
    split_steps, n_splits = cfg.split_steps(rows), cfg.n_splits(rows)
    grid = (cdiv(m, cfg.block_m), cdiv(n, cfg.block_n), n_splits)
    if n_splits > 1:
        # Scratch: every element a later read touches is written first, so plain empty is right.
        part = torch.empty((n_splits, m, n), dtype=torch.float32, device=device)
        counts = zeroed_counters(grid[0] * grid[1], device)
    else:
        part = counts = out  # never read with one split
    pdl = PDL and pdl_supported(device)
    # bias stands in as out where there is none (never read without HAS_BIAS).
    args = (x, packed, scales, mins, bias if bias is not None else out, out, part, counts, m, n, *x.stride(),
            *packed.stride(), *scales.stride(), *out.stride())  # fmt: skip
    constexprs = dict(N_ROWS=rows, GROUP_ROWS=group_size // 8, HAS_BIAS=bias is not None, BLOCK_M=cfg.block_m,
                      BLOCK_N=cfg.block_n, BLOCK_R=cfg.block_r, SPLIT_STEPS=split_steps, N_SPLITS=n_splits,
                      PDL=pdl)  # fmt: skip
    options = dict(num_stages=cfg.num_stages, **PDL_LAUNCH[pdl])
    _launch(grid, args, constexprs, cfg.num_warps, options=options)
    return out
