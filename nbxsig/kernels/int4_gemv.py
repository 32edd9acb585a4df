"""Fused int4 dequant-GEMV (``M = 1..8`` rows) as a Triton kernel, split over K in one launch.

The grid is (column tiles of ``BLOCK_N``) × (``N_SPLITS`` contiguous ranges of ``SPLIT_ROWS`` packed
rows). A program walks its range in ``BLOCK_R``-row steps, loading ``BLOCK_R × BLOCK_N`` packed words
(coalesced along ``N``, 128-bit loads), dequantizes each nibble in float32 and adds ``x[k]·w[k, n]``
into one of ``BLOCK_R`` partial sums per output (lane ``r`` owns rows ``r, r + BLOCK_R, ...`` of the
range; nibbles ascending inside a row). The lanes are summed by an explicit pairwise tree. With one
split that is the output; otherwise each program stores its partial and bumps the column tile's
arrival counter, and the last program of the tile adds the ``N_SPLITS`` partials in split order
(``p0 + p1 + ...``), adds the bias and writes the output. No atomics touch the data and the order of
every floating-point operation is fixed by the shape, so the result is deterministic.

Compiled with ``enable_fp_fusion=False``, so the compiler fuses nothing on its own; the kernel's two
explicit FMAs are the dequantization ``q·scale + min`` (its product is exact, so it equals a multiply
then an add) and the accumulation ``x·w + acc`` (one rounding), exactly as in
:func:`nbxsig.reference.int4.int4_gemv_blocked` (built on the correctly rounded
:func:`~nbxsig.reference.int4.fma_float32`), which the tests check bit for bit. Each nibble costs one
LOP3 and one FADD to extract (:func:`_nibble`), one FFMA to dequantize and one to accumulate: the
sm_90 loop issues 635 instructions per 128 weights per thread (5.0 per weight; 789 = 6.2 with a
separate multiply and add and the scale pre-multiplied per nibble position, the form before
0335a71). On the H200 that took the 4096×11008 layer from 16.1 to 14.9 µs (graph replays, bench
``quant_sweep``, 2026-12-03), 4096×4096 from 8.2 to 7.6 and 11008×4096 from 16.2 to 14.9: the
kernel is not bound by its instruction issue alone (7.3 µs at 4096×11008 with its prologue,
epilogue and reduction, docs/models.md) but by the latency of its short programs -- load, compute,
then the split's arrival -- which the one-warp programs with every lane of a column in one thread
(BLOCK_N 128-512) made worse: 15.5-47 µs.

The K loop is a ``tl.range`` with ``num_stages=STAGES``: with more than one stage Triton copies
the next steps' words (and scales/mins) into shared memory with cp.async while this step computes,
so a program keeps several steps of loads in flight. The default keeps one stage (no pipeline): on
the H200 every pipelined config measured slower (4096×11008: 18.0-28.3 µs against 14.9; tenth round,
docs/benchmarks.md) -- the stage copies cost 32-64 KB of shared memory a program and a shared-memory
read per word, and the unpipelined loads already overlap across the 7 resident programs.

Why the split: one program per column tile walking all of K gave 128-344 programs on a 132-SM H200
with one 16-iteration to 43-iteration dependent chain each -- 27-65 µs for layers whose int4 bytes
take 2-6 µs to read (bench suite "quant" at e7e6e3a). Splitting K gives every SM several short
programs whose loads are all in flight at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ._launch import PDL_LAUNCH, CachedLaunch, pdl_supported, prefetch_l2
from ._runtime import check_launchable, empty_output, next_pow2, sm_count
from ._splitsum import zeroed_counters

MAX_GEMV_ROWS = 8
# About 1024 programs: 7.8 an SM on a 132-SM H100/H200, which holds 7 at the kernel's 72 registers (1.49 waves
# at 4096×11008); 688 and 2752 programs measured slower (docs/benchmarks-history.md, eighth round, call 5).
_TARGET_PROGRAMS = 1024
_MAX_SPLITS = 64
# Launch-time switch, read on every call (bench.quant_sweep times both settings in one process).
# PDL (on; NVIDIA sm_90+ only): programmatic dependent launch, as decode attention's ``PDL``. Each
#   program waits (griddepcontrol.wait) for the previous grid before its first memory access -- x is
#   the previous layer's output -- and releases the next launch once its K loop is done, so the next
#   grid's programs are scheduled during this one's tail (split reduction, last programs) but are
#   not parked on the SMs while this grid still has programs to place. H200, back-to-back graph
#   chains of the default configs (three interleaved passes, µs per call, off / released after the
#   loop / released at the start): 4096×11008 14.81 / 14.37 / 14.25; 4096×4096 7.59 / 7.68 / 9.55;
#   11008×4096 14.96 / 14.36 / 14.39; 1024×1024 5.43 / 4.79 / 4.81. Released at the start, the
#   4096×4096 grid (512 programs, one partial wave) lost 2 µs: the next grid's programs waited on
#   the SMs where they landed.
PDL = True
# PREFETCH (on; with PDL, for grids of at most one program per SM, :func:`prefetches`): before its
#   griddepcontrol.wait a program asks L2 for the first PREFETCH_STEPS steps of its split's words and
#   their scale/min rows (one address per 128-byte line, _launch.prefetch_l2), so a program placed on
#   an SM the previous grid left free starts its DRAM reads while that grid finishes. H200, eleventh
#   round, back-to-back graph chains, µs per call, prefetch off / on in two calls: 1024×1024 (64
#   programs) 3.41 / 2.91 and 3.40 / 2.90 (tinygemm 2.60); for every grid that fills the GPU it cost:
#   4096×11008 14.34 / 15.38, 4096×4096 6.82 / 8.20, 11008×4096 14.31 / 15.89 with masked addresses
#   (their registers: 71 → 80 at 4096×11008, 7 → 6 programs an SM; 64 → 67 at 4096×4096, a second
#   wave); with the addresses clamped into the weight, as now, no change there (14.44 / 14.43, 6.78 /
#   6.82, 14.33 / 14.36), 1024×1024 2.89. The same prefetch of K/V in decode attention lost 1.6 µs at
#   B=1 T=4096 (9.58 → 11.19) and 2.6 at T=32768: not used.
PREFETCH = True
PREFETCH_STEPS = 4


@dataclass(frozen=True)
class GemvConfig:
    block_m: int
    block_r: int
    block_n: int
    num_warps: int
    # The K loop's software pipeline: 1 = none (each step loads, then computes); s > 1 = cp.async
    # copies into shared memory s - 1 steps ahead. It changes where the words wait, not the arithmetic.
    num_stages: int
    split_rows: int = 0  # packed rows per split; 0 = all of K in one split

    def n_splits(self, rows: int) -> int:
        return 1 if self.split_rows <= 0 or self.split_rows >= rows else -(-rows // self.split_rows)


def gemv_config(m: int, k: int = 0, n: int = 0, group_size: int = 128) -> GemvConfig:
    """Tiles and split for ``m`` rows of ``x (m, k)`` times an ``(n, k)`` weight (pure, shape only).

    ``BLOCK_N = 128`` columns per tile: a warp reads one row of 128 int32 words (512 contiguous bytes,
    four words = one 128-bit load per thread). ``BLOCK_R`` lanes shrink as ``m`` grows so the ``m ×
    BLOCK_R × BLOCK_N`` float32 partial sums stay at 16 registers per thread. K is split into ranges of
    whole ``BLOCK_R`` steps so the grid has about ``_TARGET_PROGRAMS`` programs: at least 1 step per
    split, at most 64 splits, and at most ``K / (64·BLOCK_M)`` so the float32 partials stay under 1/8 of
    the weight's bytes. (Until the tenth round a split had at least 2 steps; on the H200 4096×4096 then
    ran 16 splits, 7.65 µs, against 6.80 with 32 one-step splits. 1024×1024 goes from 4 to 8 one-step
    splits, not measured as such: 8 two-step splits of 8-row steps ran 4.78 µs against 5.42 for the 4
    splits, PDL off. 4096×11008 and 11008×4096 keep 16 and 43.) A split count that divides the steps
    evenly is preferred (within a factor 2 of the target): the kernel then compiles without row masks
    (~14% fewer instructions in its loop). The split depends on the shape only, never on the GPU, so the
    result is the same on every device. With ``k``/``n`` left at 0 no split is made. The loop is not
    pipelined (``num_stages=1``): pipelined loops with longer splits measured 1.2-1.9× slower on the H200
    for the 4096/11008 layers (``bench.quant_sweep``'s GEMV rows, tenth round); at 1024×1024 they were
    6-12% faster (4.41 against 4.80 µs with PDL), a layer whose target is already met.
    """
    block_m = max(1, next_pow2(m))
    block_r = {1: 16, 2: 8, 4: 4, 8: 2}[block_m]
    block_n = 128
    rows = k // 8
    split_rows = 0
    if rows and n:
        tiles = -(-n // block_n)
        steps = -(-rows // block_r)
        most = min(_MAX_SPLITS, k // (64 * block_m), steps)
        want = min(most, max(1, -(-_TARGET_PROGRAMS // tiles)))
        splits = 0
        if rows % block_r == 0:
            even = [s for s in range(1, most + 1) if steps % s == 0 and 2 * s >= want and s <= 2 * want]
            if even:
                splits = min(even, key=lambda s: (max(s / want, want / s), -s))
        if splits > 1:
            split_rows = steps // splits * block_r
        elif want > 1:
            split_rows = -(-steps // want) * block_r
    return GemvConfig(block_m, block_r, block_n, num_warps=4, num_stages=1, split_rows=split_rows)


@triton.jit
def _pair_sum(acc, BLOCK_M: tl.constexpr, HALF: tl.constexpr, BLOCK_N: tl.constexpr):
    """``(BLOCK_M, 2·HALF, BLOCK_N)`` → ``(BLOCK_M, HALF, BLOCK_N)``: lane ``2j`` + lane ``2j+1``."""
    pairs = tl.permute(tl.reshape(acc, (BLOCK_M, HALF, 2, BLOCK_N)), (0, 1, 3, 2))
    even, odd = tl.split(pairs)
    return even + odd


@triton.jit
def _lane_tree(acc, BLOCK_M: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr):
    """Pairwise tree over the lanes: lane 2j + lane 2j+1, level by level (the oracle does the same)."""
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
    return tl.reshape(acc, (BLOCK_M, BLOCK_N))


@triton.jit
def _nibble(words, hi, magic, i: tl.constexpr):
    """Nibble ``i`` of each word as an exact float32 ``q`` in 0..15 -- one LOP3 and one FADD.

    No int→float conversion (16 per clock per SM on sm_80/sm_90, a quarter of the float adds) and
    no shift per nibble: the nibble is masked *in place*, at bit ``p``, and OR-ed into the exponent
    of ``2^(23-p)``, whose mantissa bit ``p`` is worth 1, so the word reads ``2^(23-p) + q`` and one
    subtraction leaves ``q``. Nibbles 0-4 (bits 0-19) fit the 23-bit mantissa where they are;
    nibbles 5-7 come from ``hi = words >> 12`` (one shift per word), at bits 8-19. ``magic`` is
    0x4B000000 (the exponent bits of 2^23) passed as a kernel argument and lowered per position
    outside the loop: as a register operand the mask and the OR fold into one LOP3 (SASS LOP3
    takes one immediate; with both constants immediate ptxas emits two).
    """
    p: tl.constexpr = 4 * i if i < 5 else 4 * (i - 3)
    if i < 5:  # noqa: SIM108 -- a constexpr branch reads clearer than a ternary in a kernel
        bits = (words & (0xF << p)) | (magic - (p << 23))
    else:
        bits = (hi & (0xF << p)) | (magic - (p << 23))
    return bits.to(tl.float32, bitcast=True) - float(2 ** (23 - p))


@triton.jit
def _int4_gemv_kernel(
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
    magic,
    N_ROWS: tl.constexpr,
    GROUP_ROWS: tl.constexpr,
    SPLIT_ROWS: tl.constexpr,
    N_SPLITS: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    EVEN_N: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_N: tl.constexpr,
    STAGES: tl.constexpr,
    PDL: tl.constexpr,
    PREFETCH_ROWS: tl.constexpr,
):
    pid_n = tl.program_id(0)
    sp = tl.program_id(1)
    n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = n < N
    if PREFETCH_ROWS > 0:  # the split's first rows, one address per 128-byte line (32 words)
        # Indices clamped into the weight (a line past it is asked for again, never one outside).
        pf_row = tl.minimum(sp * SPLIT_ROWS + tl.arange(0, PREFETCH_ROWS), N_ROWS - 1)
        pf_col = tl.minimum(pid_n * BLOCK_N + 32 * tl.arange(0, max(1, BLOCK_N // 32)), N - 1)
        prefetch_l2(packed_ptr + pf_row.to(tl.int64)[:, None] * stride_pr + pf_col[None, :] * stride_pn)
        # ... and those rows' scale and min rows (fp16: 64 columns a line).
        PF_GROUPS: tl.constexpr = max(1, PREFETCH_ROWS // GROUP_ROWS)
        N_GROUPS: tl.constexpr = (N_ROWS + GROUP_ROWS - 1) // GROUP_ROWS
        pf_group = tl.minimum((sp * SPLIT_ROWS) // GROUP_ROWS + tl.arange(0, PF_GROUPS), N_GROUPS - 1)
        pf_scol = tl.minimum(pid_n * BLOCK_N + 64 * tl.arange(0, max(1, BLOCK_N // 64)), N - 1)
        pf_soff = pf_group.to(tl.int64)[:, None] * stride_sg + pf_scol[None, :] * stride_sn
        prefetch_l2(scales_ptr + pf_soff)
        prefetch_l2(mins_ptr + pf_soff)
    if PDL:  # the previous grid's writes are visible after this
        tl.extra.cuda.gdc_wait()
    m = tl.arange(0, BLOCK_M)
    m_mask = m < M
    r = tl.arange(0, BLOCK_R)
    # One scale/min row per step when a step never straddles a group (steps start at multiples of
    # BLOCK_R); otherwise one per packed row.
    SCALE_PER_STEP: tl.constexpr = GROUP_ROWS % BLOCK_R == 0
    EVEN_R: tl.constexpr = (N_ROWS % SPLIT_ROWS == 0) and (SPLIT_ROWS % BLOCK_R == 0)
    # One row of x: a 2-D accumulator, so x needs no layout conversion (3-D costs shared memory).
    if BLOCK_M == 1:
        acc = tl.zeros((BLOCK_R, BLOCK_N), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_R, BLOCK_N), dtype=tl.float32)
    row0 = sp * SPLIT_ROWS
    for j in tl.range((SPLIT_ROWS + BLOCK_R - 1) // BLOCK_R, num_stages=STAGES):
        start = row0 + j * BLOCK_R
        row = start + r
        row_mask = row < N_ROWS
        tile_mask = row_mask[:, None] & n_mask[None, :]
        # int64 row offsets: (K/8)·N words can pass 2^31 for very large layers.
        w_ptrs = packed_ptr + row.to(tl.int64)[:, None] * stride_pr + n[None, :] * stride_pn
        if EVEN_R and EVEN_N:  # noqa: SIM108 -- no masks at all: plain 128-bit loads
            words = tl.load(w_ptrs)
        else:
            words = tl.load(w_ptrs, mask=tile_mask, other=0)
        hi = words >> 12  # nibbles 5-7 to bits 8-19: masked in place like nibbles 2-4
        if SCALE_PER_STEP:
            # The step's one scale row, loaded straight into the words' layout (a 1-D load would be
            # converted through shared memory with barriers; these repeated addresses hit L1).
            s_ptrs = (start // GROUP_ROWS).to(tl.int64) * stride_sg + n[None, :] * stride_sn + 0 * r[:, None]
            if EVEN_R and EVEN_N:
                scale = tl.load(scales_ptr + s_ptrs).to(tl.float32)
                low = tl.load(mins_ptr + s_ptrs).to(tl.float32)
            else:
                # A step wholly past K (the last split's tail) must not read past the scale rows.
                s_mask = (n_mask & (start < N_ROWS))[None, :] & (r < BLOCK_R)[:, None]
                scale = tl.load(scales_ptr + s_ptrs, mask=s_mask, other=0.0).to(tl.float32)
                low = tl.load(mins_ptr + s_ptrs, mask=s_mask, other=0.0).to(tl.float32)
        else:
            s_ptrs = (row // GROUP_ROWS).to(tl.int64)[:, None] * stride_sg + n[None, :] * stride_sn
            scale = tl.load(scales_ptr + s_ptrs, mask=tile_mask, other=0.0).to(tl.float32)
            low = tl.load(mins_ptr + s_ptrs, mask=tile_mask, other=0.0).to(tl.float32)
        x_mask = m_mask[:, None] & row_mask[None, :]
        k0 = row.to(tl.int64) * 8
        for i in tl.static_range(8):
            # q·scale is exact (4 × 11 significant bits), so the FMA rounds once, as q·scale + min.
            w = tl.fma(_nibble(words, hi, magic, i), scale, low)
            # x·w + acc with one rounding (a fused multiply-add), as in the oracle.
            if BLOCK_M == 1:
                if EVEN_R:
                    xv = tl.load(x_ptr + (k0 + i) * stride_xk)
                else:
                    xv = tl.load(x_ptr + (k0 + i) * stride_xk, mask=row_mask, other=0.0)
                acc = tl.fma(xv.to(tl.float32)[:, None], w, acc)
            else:
                xv = tl.load(
                    x_ptr + m[:, None] * stride_xm + (k0 + i)[None, :] * stride_xk, mask=x_mask, other=0.0
                )
                acc = tl.fma(xv.to(tl.float32)[:, :, None], w[None, :, :], acc)
    if PDL:  # the K loop is done: the next grid may launch now (see PDL)
        tl.extra.cuda.gdc_launch_dependents()
    if BLOCK_M == 1:
        acc = tl.reshape(acc, (1, BLOCK_R, BLOCK_N))
    part = _lane_tree(acc, BLOCK_M, BLOCK_R, BLOCK_N)
    out_mask = m_mask[:, None] & n_mask[None, :]
    out_off = m[:, None] * stride_om + n[None, :] * stride_on
    if N_SPLITS == 1:
        _finish(part, bias_ptr, out_ptr + out_off, n, n_mask, out_mask, HAS_BIAS)
    else:
        # Partials (N_SPLITS, BLOCK_M, N) float32, then one arrival per program on the tile's counter.
        p_off = m[:, None] * N + n[None, :]
        tl.store(part_ptr + sp * BLOCK_M * N + p_off, part, mask=out_mask)
        tl.debug_barrier()  # every thread's partial is stored before the (release) increment
        arrived = tl.atomic_add(count_ptr + pid_n, 1, sem="acq_rel", scope="gpu")
        if arrived == N_SPLITS - 1:
            # The last program: partials in split order; ".cg" reads L2, never a stale L1 line.
            total = tl.load(part_ptr + p_off, mask=out_mask, other=0.0, cache_modifier=".cg")
            for s in tl.static_range(1, N_SPLITS):
                total += tl.load(
                    part_ptr + s * BLOCK_M * N + p_off, mask=out_mask, other=0.0, cache_modifier=".cg"
                )
            tl.atomic_xchg(count_ptr + pid_n, 0, sem="relaxed", scope="gpu")  # ready for the next launch
            _finish(total, bias_ptr, out_ptr + out_off, n, n_mask, out_mask, HAS_BIAS)


@triton.jit
def _finish(total, bias_ptr, out_ptrs, n, n_mask, out_mask, HAS_BIAS: tl.constexpr):
    """``total (+ bias)`` cast to the output dtype and stored."""
    if HAS_BIAS:
        total = total + tl.load(bias_ptr + n, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    tl.store(out_ptrs, total.to(out_ptrs.dtype.element_ty), mask=out_mask)


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
        # Shift, mask, OR into the mantissa of 2^23, subtract 2^23: exactly q (see _nibble).
        bits = ((words >> (4 * i)) & 0xF) | 0x4B000000
        w = (bits.to(tl.float32, bitcast=True) - 8388608.0) * scale + low
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
    _dequant_kernel[(-(-rows // block_r), -(-n // block_n))](
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


_gemv_launch = CachedLaunch(_int4_gemv_kernel)


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
    cfg, n_splits, split_rows, tiles = _plan(m, k, n, group_size, config)
    pdl = PDL and pdl_supported(device)
    prefetch = pdl and prefetches(device, tiles * n_splits)
    out = empty_output((m, n), dtype=x.dtype, device=device)
    if n_splits > 1:
        # Scratch: every element a later read touches is written first, so plain empty is right.
        part = torch.empty((n_splits, cfg.block_m, n), dtype=torch.float32, device=device)
        counts = zeroed_counters(tiles, device)
    else:
        part = counts = out  # never read with one split
    # bias stands in as out where there is none (never read without HAS_BIAS); 0x4B000000 is the
    # exponent bits of 2^23 (see _nibble).
    args = (x, packed, scales, mins, bias if bias is not None else out, out, part, counts, m, n,
            *x.stride(), *packed.stride(), *scales.stride(), *out.stride(), 0x4B000000)  # fmt: skip
    # K is a constexpr: a model has a handful of distinct K, a known trip count lets the compiler
    # unroll/pipeline, and Triton 3.6's interpreter cannot loop to a runtime bound under numpy 2.4.
    constexprs = dict(N_ROWS=k // 8, GROUP_ROWS=group_size // 8, SPLIT_ROWS=split_rows, N_SPLITS=n_splits,
                      HAS_BIAS=bias is not None, EVEN_N=n % cfg.block_n == 0, BLOCK_M=cfg.block_m,
                      BLOCK_R=cfg.block_r, BLOCK_N=cfg.block_n, STAGES=cfg.num_stages, PDL=pdl,
                      PREFETCH_ROWS=_prefetch_rows(split_rows, cfg.block_r) * prefetch)  # fmt: skip
    # No FMA contraction: x·w + acc is rounded twice, as in the torch oracle (bit-exact tests).
    options = dict(num_stages=cfg.num_stages, enable_fp_fusion=False, **PDL_LAUNCH[pdl])
    # Through the compiled handle: one token's GEMV is a few µs of GPU time, and Triton's own launch
    # path costs more than that on the host.
    _gemv_launch((tiles, n_splits), args, constexprs, cfg.num_warps, options=options)
    return out


def prefetches(device: torch.device, programs: int) -> bool:
    """Whether a PDL launch (the caller checked PDL) of ``programs`` programs on the CUDA ``device``
    prefetches its weights (``PREFETCH``): only where the grid leaves SMs free, on which the next
    launch's programs are placed while this one runs (see PREFETCH for the measurements)."""
    return PREFETCH and programs <= sm_count(device)


def _prefetch_rows(split_rows: int, block_r: int) -> int:
    """Packed rows a program prefetches: its split's first ``PREFETCH_STEPS`` steps, rounded down to a
    power of two (a Triton range)."""
    rows = min(split_rows, PREFETCH_STEPS * block_r)
    return 1 << (rows.bit_length() - 1)


_PLANS: dict[tuple, tuple[GemvConfig, int, int, int]] = {}


def _plan(
    m: int, k: int, n: int, group_size: int, config: GemvConfig | None
) -> tuple[GemvConfig, int, int, int]:
    """``(config, n_splits, split_rows, column tiles)`` for a shape, memoised: the launcher runs once
    per layer per token, and this host work (Triton's ``cdiv``/``next_power_of_2`` are slow Python
    calls) would otherwise be repeated every time."""
    key = (m, k, n, group_size, config)
    plan = _PLANS.get(key)
    if plan is None:
        cfg = config or gemv_config(m, k, n, group_size)
        rows = k // 8
        n_splits = cfg.n_splits(rows)
        split_rows = rows if n_splits == 1 else cfg.split_rows
        if n_splits > 1 and split_rows % cfg.block_r:
            raise ValueError(f"split_rows={split_rows} must be a multiple of block_r={cfg.block_r}")
        plan = _PLANS[key] = (cfg, n_splits, split_rows, -(-n // cfg.block_n))
    return plan


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
