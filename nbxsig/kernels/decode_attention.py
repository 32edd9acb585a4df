"""Deterministic split-KV decode attention (one query token per row) in one Triton launch.

One program per (batch row, KV head, split of ``SPLIT`` keys): the program loads the ``G = Hq / Hkv``
query heads that share the KV head (GQA: K/V are read once for the group), walks its split in
``BLOCK_T`` steps and keeps an online softmax in float32, in base 2::

    s = (q·k)·scale·log2(e) + bias·log2(e)     (-inf where t ≥ length or t ≥ T)
    m' = max(m, max s);  p = 2^(s - m');  l = l·2^(m - m') + Σp;  acc = acc·2^(m - m') + p·V

with the guard ``m' = -inf → 0`` so an all-masked block yields p = 0 and no NaN. With one split that
is normalised and stored. Otherwise each program stores its unnormalised ``(acc, m, l)`` and bumps
the (row, KV head)'s arrival counter; the last program to arrive merges the splits of its ``G``
heads: ``M = max m_s``, ``Σ acc_s·2^(m_s - M) / Σ l_s·2^(m_s - M)`` (zeros where the sum is 0: no
valid key), in chunks of ``CHUNK`` splits, chunk 0 first. Which program arrives last never changes
the arithmetic, and the split length is a pure function of the shape, so the same inputs give the
same bits on every run. (One launch: a separate merge kernel cost a second launch on the host and a
kernel boundary on the GPU.)

K/V are read through their own strides (a view into a larger cache works without a copy); head
dims that are not powers of two (127, 129, ...) are padded to one inside the kernel with masks,
and the masks are compiled out when D and Dv are powers of two and no key needs masking.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ..reference import attention as ref
from ._launch import PDL_LAUNCH, CachedLaunch, pdl_supported
from ._runtime import check_launchable, empty_output, next_pow2
from ._splitsum import zeroed_counters

LOG2E = 1.4426950408889634
_TARGET_PROGRAMS = 128  # ~1 per SM on a 132-SM H100/H200 (H200 sweeps: see split_config)
_MAX_AUTO_SPLITS = 64  # the last program merges every split: keep that tail short
# Launch-time switches, read on every call (bench.quant_sweep times both settings in one process):
# PDL (on; NVIDIA sm_90+ only): launch with programmatic dependent launch. The next launch's
#   programs may be scheduled while this one finishes; each program still waits
#   (griddepcontrol.wait) for the previous grid before its first memory access, so data
#   dependences are kept. H200 at 80a29e2, back-to-back graph chains of these calls (each releases
#   the next at its start), µs per call at the then-default splits, off → on: B=1 T=4096 11.81 →
#   11.27, B=1 T=32768 40.45 → 39.87, B=16 T=4096 68.32 → 68.05, B=64 T=2048 127.50 → 127.07 (and
#   0.6-0.8 µs at the 128-program splits). After a kernel that does not release its dependents
#   early, the gain is only the launch that overlaps its end.
# Q_IN_LOOP (None = auto: on exactly where the grid has more than one split; True/False force it):
#   load q inside the key loop, so the compiler cannot hoist it above the pipeline's prologue
#   (hoisted, the sm_90 SASS stores q to shared memory, which waits a DRAM round trip for it,
#   before the first K/V LDGSTS). With PDL on (H200, tenth round, two calls, back-to-back graph
#   chains, µs per call, off → on): B=1 T=4096 (16 splits) 10.08 → 9.72 and 10.16 → 9.74, B=1
#   T=32768 (16 splits) 39.21 → 37.53 and 39.63 → 37.86, B=1 T=1024 5.91 → 5.88; with one long
#   split it costs: B=16 T=4096 65.20 → 68.69 and 65.88 → 69.03, B=64 T=2048 126.98 → 128.73 (the
#   per-tile q reload over 64 tiles). At 80a29e2, PDL off, B=1 showed no gain (11.87 vs 11.81).
PDL = True
Q_IN_LOOP: bool | None = None


@dataclass(frozen=True)
class SplitConfig:
    split: int
    n_splits: int
    block_t: int
    block_g: int
    block_d: int
    block_dv: int
    num_warps: int
    num_stages: int = 4


def split_config(
    batch: int, kv_heads: int, group: int, t: int, d: int, dv: int, *, target_programs: int = 0
) -> SplitConfig:
    """Split length and tiles (pure: a function of the shape only, never of the GPU).

    Aims for ``_TARGET_PROGRAMS`` programs (about 1 per SM on a 132-SM H200: each streams its
    split with pipelined loads) with at most 64 splits per row, since the last program of a row
    merges all of them; 3 pipeline stages where a split is at most 4 tiles, else 4. Measured on the
    H200 at 80a29e2 (fp16, Hq=32, Hkv=8, D=128, µs per call in back-to-back graph chains,
    ``bench.quant_sweep``, PDL off): 128 programs against the earlier 256 -- B=1 T=4096 10.85
    (256-key splits, 3 stages; 4 stages 11.17) vs 11.81, B=1 T=32768 39.96 vs 40.45, B=16 T=4096
    65.74 (one split) vs 68.32; B=64 T=2048 has one split either way. 64 programs were slower (B=1
    T=4096 12.91, T=32768 65.42, with Q_IN_LOOP); for long splits 4 stages beat 3 (38.18 vs 39.10 at
    T=32768, 69.26 vs 70.53 at B=16) and 5 was within 0.4 µs. Splits are powers of two >= BLOCK_T,
    so a handful of compiled variants cover all shapes. ``target_programs`` overrides the target
    (benchmark sweeps).
    """
    block_d = max(16, next_pow2(d))
    block_dv = max(16, next_pow2(dv))
    block_t = 64 if max(block_d, block_dv) <= 128 else 32  # K and V tiles of 64×128 fit registers
    target = target_programs or _TARGET_PROGRAMS
    want_splits = min(_MAX_AUTO_SPLITS, max(1, -(-target // (batch * kv_heads))))
    split = next_pow2(max(1, -(-t // want_splits)))
    split = max(block_t, min(split, max(block_t, next_pow2(t))))
    return SplitConfig(
        split=split,
        n_splits=-(-t // split),
        block_t=block_t,
        block_g=max(16, next_pow2(group)),  # tl.dot needs >= 16 rows
        block_d=block_d,
        block_dv=block_dv,
        num_warps=4 if max(block_d, block_dv) <= 128 else 8,
        num_stages=3 if split // block_t <= 4 else 4,
    )


@triton.jit
def _split_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    len_ptr,
    bias_ptr,
    acc_ptr,
    ml_offset,
    out_ptr,
    count_ptr,
    q_step,
    T,
    D,
    DV,
    G,
    Hkv,
    qk_scale,
    stride_qb,
    stride_qh,
    stride_qd,
    stride_kb,
    stride_kh,
    stride_kt,
    stride_kd,
    stride_vb,
    stride_vh,
    stride_vt,
    stride_vd,
    stride_biasb,
    stride_biast,
    stride_ob,
    stride_oh,
    stride_od,
    HAS_LEN: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    MASK_T: tl.constexpr,
    EVEN_D: tl.constexpr,
    IEEE: tl.constexpr,
    N_SPLITS: tl.constexpr,
    SPLIT: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_G: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    MERGE_G: tl.constexpr,
    BLOCK_S: tl.constexpr,
    CHUNK: tl.constexpr,
    Q_IN_LOOP: tl.constexpr,
    PDL: tl.constexpr,
):
    if PDL:  # the previous grid's writes are visible after this; the next grid may launch now
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    bh = tl.program_id(0)
    sp = tl.program_id(1)
    ml_ptr = acc_ptr + ml_offset  # the (max, sum) pairs follow the partial outputs in one buffer
    b = (bh // Hkv).to(tl.int64)
    h = (bh % Hkv).to(tl.int64)
    g = tl.arange(0, BLOCK_G)
    g_mask = g < G
    d = tl.arange(0, BLOCK_D)
    dv = tl.arange(0, BLOCK_DV)
    hq = h * G + g  # query heads of this KV head
    q_ptrs = q_ptr + b * stride_qb + hq[:, None] * stride_qh + d[None, :] * stride_qd
    q_mask = g_mask[:, None] & (d[None, :] < D)
    if not Q_IN_LOOP:
        q = tl.load(q_ptrs, mask=q_mask, other=0.0)
    length = T
    if HAS_LEN:  # clamped before the narrowing cast: an int64 length of 2**32 + 5 means T, not 5
        length = tl.minimum(tl.maximum(tl.load(len_ptr + b), 0), T).to(tl.int32)
    k_base = k_ptr + b * stride_kb + h * stride_kh
    v_base = v_ptr + b * stride_vb + h * stride_vh
    m_i = tl.full((BLOCK_G,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_G,), tl.float32)
    acc = tl.zeros((BLOCK_G, BLOCK_DV), tl.float32)
    for j in range(SPLIT // BLOCK_T):
        t = sp * SPLIT + j * BLOCK_T + tl.arange(0, BLOCK_T)
        t_mask = t < length
        if Q_IN_LOOP:  # q_step is 0: the address depends on j only so that it is not hoisted
            q = tl.load(q_ptrs + j * q_step, mask=q_mask, other=0.0)
        t64 = t.to(tl.int64)
        k_ptrs = k_base + t64[:, None] * stride_kt + d[None, :] * stride_kd
        v_ptrs = v_base + t64[:, None] * stride_vt + dv[None, :] * stride_vd
        # Mask-free loads where the shape allows (vectorised, and the compiler can pipeline them).
        if MASK_T:
            if EVEN_D:
                k = tl.load(k_ptrs, mask=t_mask[:, None], other=0.0)
                v = tl.load(v_ptrs, mask=t_mask[:, None], other=0.0)
            else:
                k = tl.load(k_ptrs, mask=t_mask[:, None] & (d[None, :] < D), other=0.0)
                v = tl.load(v_ptrs, mask=t_mask[:, None] & (dv[None, :] < DV), other=0.0)
        else:
            if EVEN_D:
                k = tl.load(k_ptrs)
                v = tl.load(v_ptrs)
            else:
                k = tl.load(k_ptrs, mask=d[None, :] < D, other=0.0)
                v = tl.load(v_ptrs, mask=dv[None, :] < DV, other=0.0)
        if IEEE:  # noqa: SIM108 -- a constexpr branch reads clearer than a ternary in a kernel
            s = tl.dot(q, tl.trans(k), input_precision="ieee")
        else:
            s = tl.dot(q, tl.trans(k))
        s = s * qk_scale
        if HAS_BIAS:
            if MASK_T:
                bias = tl.load(bias_ptr + b * stride_biasb + t64 * stride_biast, mask=t_mask, other=0.0)
            else:
                bias = tl.load(bias_ptr + b * stride_biasb + t64 * stride_biast)
            bias = bias.to(tl.float32)
            bias2 = bias * 1.4426950408889634
            # A finite bias beyond ±FLT_MAX/log2(e) (masks filled with torch.finfo(float32).min) would
            # become ±inf here and mask a key the torch twin keeps (a row of only such keys: zeros
            # instead of the mean of V): keep it finite. ±inf stay infinite, NaN stays NaN.
            big = (tl.abs(bias2) == float("inf")) & (tl.abs(bias) < float("inf"))
            bias2 = tl.where(big, tl.where(bias > 0, 3.4028234663852886e38, -3.4028234663852886e38), bias2)
            s = s + bias2[None, :]
        if MASK_T:
            s = tl.where(t_mask[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # all masked so far: keep p = 0, no NaN
        p = tl.exp2(s - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        if IEEE:  # noqa: SIM108
            pv = tl.dot(p, v, input_precision="ieee")
        else:
            pv = tl.dot(p.to(v.dtype), v)
        acc = acc * alpha[:, None] + pv
        m_i = m_new
    if N_SPLITS == 1:
        # Zeros for an empty sum only (no valid key): a NaN sum (NaN in q, k, v or bias) stays NaN.
        out = tl.where(l_i[:, None] == 0, 0.0, acc / tl.where(l_i == 0, 1.0, l_i)[:, None])
        tl.store(
            out_ptr + b * stride_ob + hq[:, None] * stride_oh + dv[None, :] * stride_od,
            out.to(out_ptr.dtype.element_ty),
            mask=g_mask[:, None] & (dv[None, :] < DV),
        )
    else:
        # Partials laid out (B, Hq, N_SPLITS, ...) so a head's splits are contiguous.
        row = (b * Hkv * G + hq) * N_SPLITS + sp
        tl.store(acc_ptr + row[:, None] * BLOCK_DV + dv[None, :], acc, mask=g_mask[:, None])
        tl.store(ml_ptr + row * 2, m_i, mask=g_mask)
        tl.store(ml_ptr + row * 2 + 1, l_i, mask=g_mask)
        tl.debug_barrier()  # every thread's partial is stored before the (release) increment
        arrived = tl.atomic_add(count_ptr + bh, 1, sem="acq_rel", scope="gpu")
        if arrived == N_SPLITS - 1:
            _merge(
                acc_ptr,
                ml_ptr,
                out_ptr,
                b,
                h,
                G,
                Hkv,
                DV,
                stride_ob,
                stride_oh,
                stride_od,
                N_SPLITS,
                BLOCK_DV,
                MERGE_G,
                BLOCK_S,
                CHUNK,
            )
            tl.atomic_xchg(count_ptr + bh, 0, sem="relaxed", scope="gpu")  # ready for the next launch


@triton.jit
def _merge(
    acc_ptr,
    ml_ptr,
    out_ptr,
    b,
    h,
    G,
    Hkv,
    DV,
    stride_ob,
    stride_oh,
    stride_od,
    N_SPLITS: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    MERGE_G: tl.constexpr,
    BLOCK_S: tl.constexpr,
    CHUNK: tl.constexpr,
):
    """The ``G`` heads of one (row, KV head): merge their ``N_SPLITS`` partials in a fixed order.

    The global max ``M`` and normaliser from all splits' ``(m, l)`` first, then the partial outputs in
    chunks of ``CHUNK`` splits, chunk 0 first. Chunk 0's loads are written before the max/sum
    arithmetic (the compiler does not move them there itself), so most of them share the (max, sum)
    loads' L2 round trip (sm_90 SASS at 32 splits: two dependent round trips instead of three). H200
    at 80a29e2, same bits as loading chunk 0 in the loop: 11.54 vs 11.81 µs per call at B=1 T=4096,
    39.96 vs 40.45 at B=1 T=32768 (the then-default 32 splits). (A split-by-split merge
    with a running max -- one L2 round trip, more arithmetic -- was measured slower on the H200 in
    every row of ``bench.quant_sweep`` at 1e74c26, e.g. 16.6 against 13.1 µs per call at B=1
    T=4096, and removed.)

    Loads use ``.cg`` (L2): the partials were written by other SMs and L1 is not coherent."""
    g = tl.arange(0, MERGE_G)
    g_mask = g < G
    hq = h * G + g
    base = (b * Hkv * G + hq) * N_SPLITS  # (MERGE_G,) first partial row of each head
    dv = tl.arange(0, BLOCK_DV)
    rows0 = base[:, None] + tl.arange(0, CHUNK)[None, :]  # (MERGE_G, CHUNK)
    mask0 = g_mask[:, None] & (tl.arange(0, CHUNK) < N_SPLITS)[None, :]
    m0 = tl.load(ml_ptr + rows0 * 2, mask=mask0, other=float("-inf"), cache_modifier=".cg")
    a0 = tl.load(
        acc_ptr + rows0[:, :, None] * BLOCK_DV + dv[None, None, :],
        mask=mask0[:, :, None],
        other=0.0,
        cache_modifier=".cg",
    )
    # The global max and normaliser over all splits at once.
    s_all = tl.arange(0, BLOCK_S)
    ms_mask = g_mask[:, None] & (s_all < N_SPLITS)[None, :]
    ml_off = (base[:, None] + s_all[None, :]) * 2
    m_all = tl.load(ml_ptr + ml_off, mask=ms_mask, other=float("-inf"), cache_modifier=".cg")
    l_all = tl.load(ml_ptr + ml_off + 1, mask=ms_mask, other=0.0, cache_modifier=".cg")
    m_max = tl.max(m_all, axis=1)
    m_safe = tl.where(m_max == float("-inf"), 0.0, m_max)  # no valid key anywhere: weights 0, output 0
    l_sum = tl.sum(l_all * tl.exp2(m_all - m_safe[:, None]), axis=1)
    # Partial outputs in chunks of CHUNK splits, chunk 0 first: a fixed order.
    o = tl.zeros((MERGE_G, BLOCK_DV), tl.float32)
    o += tl.sum(a0 * tl.exp2(m0 - m_safe[:, None])[:, :, None], axis=1)
    for c in range(CHUNK, BLOCK_S, CHUNK):
        sidx = c + tl.arange(0, CHUNK)
        mask = g_mask[:, None] & (sidx < N_SPLITS)[None, :]
        rows = base[:, None] + sidx[None, :]  # (MERGE_G, CHUNK)
        w = tl.exp2(
            tl.load(ml_ptr + rows * 2, mask=mask, other=float("-inf"), cache_modifier=".cg") - m_safe[:, None]
        )
        a = tl.load(
            acc_ptr + rows[:, :, None] * BLOCK_DV + dv[None, None, :],
            mask=mask[:, :, None],
            other=0.0,
            cache_modifier=".cg",
        )
        o += tl.sum(a * w[:, :, None], axis=1)
    out = tl.where(l_sum[:, None] == 0, 0.0, o / tl.where(l_sum == 0, 1.0, l_sum)[:, None])
    tl.store(
        out_ptr + b * stride_ob + hq[:, None] * stride_oh + dv[None, :] * stride_od,
        out.to(out_ptr.dtype.element_ty),
        mask=g_mask[:, None] & (dv[None, :] < DV),
    )


_split_launch = CachedLaunch(_split_kernel)
_PLANS: dict[tuple, tuple[SplitConfig, int, int, int]] = {}


def q_in_loop(n_splits: int) -> bool:
    """Whether the kernel loads q inside its key loop (``Q_IN_LOOP``; auto: more than one split)."""
    return n_splits > 1 if Q_IN_LOOP is None else Q_IN_LOOP


def _pdl(device: torch.device) -> bool:
    """Whether launches on ``device`` use programmatic dependent launch: ``PDL`` on and supported."""
    return PDL and pdl_supported(device)


def _plan(b: int, hkv: int, g: int, t: int, d: int, dv: int, config: SplitConfig | None) -> tuple:
    """``(config, MERGE_G, BLOCK_S, CHUNK)`` for a shape, memoised: the launcher runs once per layer
    per token, and Triton's ``next_power_of_2`` is a slow Python call."""
    key = (b, hkv, g, t, d, dv, config)
    plan = _PLANS.get(key)
    if plan is None:
        cfg = config or split_config(b, hkv, g, t, d, dv)
        merge_g = next_pow2(g)
        block_s = next_pow2(cfg.n_splits)
        # The merge holds MERGE_G × CHUNK × BLOCK_DV floats: about 64 registers per thread.
        chunk = max(1, min(block_s, (64 * 32 * cfg.num_warps) // (merge_g * cfg.block_dv)))
        plan = _PLANS[key] = (cfg, merge_g, block_s, chunk)
    return plan


def decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    *,
    lengths: torch.Tensor | None = None,
    scale: float,
    bias: torch.Tensor | None = None,
    config: SplitConfig | None = None,
) -> torch.Tensor:
    """Triton twin of :func:`nbxsig.reference.attention.decode_attention` (inputs validated by the caller);
    differentiable in q, the caches and the bias (backward through the recomputed torch twin)."""
    # Spelled out (no generator): an eager decode step with grad mode on pays this per layer per token.
    if torch.is_grad_enabled() and (
        q.requires_grad
        or k_cache.requires_grad
        or v_cache.requires_grad
        or (bias is not None and bias.requires_grad)
    ):
        return _DecodeAttention.apply(q, k_cache, v_cache, lengths, scale, bias, config)
    return _forward(q, k_cache, v_cache, lengths=lengths, scale=scale, bias=bias, config=config)


class _DecodeAttention(torch.autograd.Function):
    """The kernel's forward; backward by autograd through :func:`nbxsig.reference.attention.decode_attention`
    recomputed (the kernel keeps no softmax statistics; decode steps run under no_grad and never get here)."""

    @staticmethod
    def forward(ctx, q, k_cache, v_cache, lengths, scale, bias, config):
        ctx.save_for_backward(q, k_cache, v_cache, lengths, bias)
        ctx.scale = scale
        return _forward(q, k_cache, v_cache, lengths=lengths, scale=scale, bias=bias, config=config)

    @staticmethod
    def backward(ctx, grad):
        q, k_cache, v_cache, lengths, bias = ctx.saved_tensors
        needs = (*ctx.needs_input_grad[:3], ctx.needs_input_grad[5])
        # Under create_graph=True the recomputation runs on the saved inputs themselves, so the
        # gradients carry their dependence on q, k, v and bias (second derivatives); otherwise on
        # detached copies.
        higher = torch.is_grad_enabled()
        with torch.enable_grad():
            inputs = [
                x if x is None or higher else x.detach().requires_grad_(need)
                for x, need in zip((q, k_cache, v_cache, bias), needs, strict=True)
            ]
            out = ref.decode_attention(*inputs[:3], lengths=lengths, scale=ctx.scale, bias=inputs[3])
            wanted = [x for x, need in zip(inputs, needs, strict=True) if need]
            grads = iter(torch.autograd.grad(out, wanted, grad, create_graph=higher))
        gq, gk, gv, gb = (next(grads) if need else None for need in needs)
        return gq, gk, gv, None, None, gb, None


def _forward(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    *,
    lengths: torch.Tensor | None,
    scale: float,
    bias: torch.Tensor | None,
    config: SplitConfig | None,
) -> torch.Tensor:
    """One launch (no autograd)."""
    b, hq, d = q.shape
    hkv, t, dv = k_cache.shape[1], k_cache.shape[2], v_cache.shape[3]
    g = hq // hkv
    device = check_launchable(q, k_cache, v_cache, *(x for x in (lengths, bias) if x is not None))
    if lengths is not None:
        lengths = lengths.contiguous()  # the kernel reads lengths[b] at len_ptr + b: no stride
    cfg, merge_g, block_s, chunk = _plan(b, hkv, g, t, d, dv, config)
    pdl = _pdl(device)
    n_splits = cfg.n_splits
    out = empty_output((b, hq, dv), dtype=q.dtype, device=device)
    if n_splits > 1:
        # One scratch allocation for the partial outputs and (max, sum) pairs; every element the
        # merge reads is written first, so plain torch.empty is right here.
        n_acc = b * hq * n_splits * cfg.block_dv
        scratch = torch.empty(n_acc + 2 * b * hq * n_splits, dtype=torch.float32, device=device)
        counts = zeroed_counters(b * hkv, device)
    else:
        n_acc, scratch, counts = 0, out, out  # never touched with one split
    bias_strides = (0, 0)
    if bias is not None:
        bias_strides = (0 if bias.shape[0] == 1 else bias.stride(0), bias.stride(1))
    # q_step 0; absent lengths/bias point at q (never read without HAS_LEN/HAS_BIAS).
    args = (q, k_cache, v_cache, lengths if lengths is not None else q, bias if bias is not None else q,
            scratch, n_acc, out, counts, 0, t, d, dv, g, hkv, scale * LOG2E, *q.stride(),
            *k_cache.stride(), *v_cache.stride(), *bias_strides, *out.stride())  # fmt: skip
    constexprs = dict(
        HAS_LEN=lengths is not None,
        HAS_BIAS=bias is not None,
        MASK_T=lengths is not None or t % cfg.split != 0,
        EVEN_D=d == cfg.block_d and dv == cfg.block_dv,
        IEEE=q.dtype == torch.float32,  # float32 in, float32 accuracy out: no TF32 for the dots
        N_SPLITS=n_splits,
        SPLIT=cfg.split,
        BLOCK_T=cfg.block_t,
        BLOCK_G=cfg.block_g,
        BLOCK_D=cfg.block_d,
        BLOCK_DV=cfg.block_dv,
        MERGE_G=merge_g,
        BLOCK_S=block_s,
        CHUNK=chunk,
        Q_IN_LOOP=q_in_loop(n_splits),
        PDL=pdl,
    )
    # float32 K/V tiles are twice the bytes: 4 stages of them would not fit shared memory.
    stages = cfg.num_stages if q.element_size() <= 2 else min(cfg.num_stages, 2)
    # Through the compiled handle: a decode step calls this once per layer per token, and Triton's
    # own launch path costs more host time than a small batch's kernel takes on the GPU.
    _split_launch(
        (b * hkv, n_splits),
        args,
        constexprs,
        cfg.num_warps,
        options=dict(num_stages=stages, **PDL_LAUNCH[pdl]),
    )
    return out
