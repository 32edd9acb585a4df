"""Deterministic split-KV decode attention (one query token per row) as two Triton kernels.

Pass 1 -- one program per (batch row, KV head, split of ``SPLIT`` keys): the program loads the
``G = Hq / Hkv`` query heads that share the KV head (GQA: K/V are read once for the group), walks
its split in ``BLOCK_T`` steps and keeps an online softmax in float32, in base 2::

    s = (q·k)·scale·log2(e) + bias·log2(e)     (-inf where t ≥ length or t ≥ T)
    m' = max(m, max s);  p = 2^(s - m');  l = l·2^(m - m') + Σp;  acc = acc·2^(m - m') + p·V

with the guard ``m' = -inf → 0`` so an all-masked block yields p = 0 and no NaN. It writes the
unnormalised ``(acc, m, l)`` of its split.

Pass 2 -- one program per (batch row, query head) takes the maximum ``M`` over its splits and
merges ``Σ acc_s·2^(m_s - M) / Σ l_s·2^(m_s - M)`` in chunks of 16 splits, chunk 0 first (zeros
where the sum is 0: no valid key). The split length is a pure function
of the shape, so the order of every floating-point operation is fixed: the same inputs give the
same bits on every run, at every batch composition with the same shapes.

K/V are read through their own strides (a view into a larger cache works without a copy); head
dims that are not powers of two (127, 129, ...) are padded to one inside the kernel with masks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ._runtime import check_launchable, empty_output

LOG2E = 1.4426950408889634
MAX_SPLITS = 256  # the merge kernel loads all of a row's split maxima at once


@dataclass(frozen=True)
class SplitConfig:
    split: int
    n_splits: int
    block_t: int
    block_g: int
    block_d: int
    block_dv: int
    num_warps: int


def split_config(batch: int, kv_heads: int, group: int, t: int, d: int, dv: int) -> SplitConfig:
    """Split length and tiles (pure).

    Aims for ~1024 pass-1 programs (about 8 per SM on a 132-SM H100/H200), at most 256 splits per
    row. The first H200 run used a 256-program target and reached only 29% (B=16, T=4096) and 54%
    (B=64, T=2048) of copy bandwidth with 2 programs per SM, too few loads in flight; the higher
    target is not yet re-measured. Splits are powers of two >= BLOCK_T, so a handful of compiled
    variants cover all shapes.
    """
    block_d = max(16, triton.next_power_of_2(d))
    block_dv = max(16, triton.next_power_of_2(dv))
    block_t = 64 if max(block_d, block_dv) <= 128 else 32  # K and V tiles of 64×128 fit registers
    want_splits = min(MAX_SPLITS, max(1, -(-1024 // (batch * kv_heads))))
    split = triton.next_power_of_2(max(1, -(-t // want_splits)))
    split = max(block_t, min(split, max(block_t, triton.next_power_of_2(t))))
    return SplitConfig(
        split=split,
        n_splits=-(-t // split),
        block_t=block_t,
        block_g=max(16, triton.next_power_of_2(group)),  # tl.dot needs >= 16 rows
        block_d=block_d,
        block_dv=block_dv,
        num_warps=4 if max(block_d, block_dv) <= 128 else 8,
    )


@triton.jit
def _split_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    len_ptr,
    bias_ptr,
    acc_ptr,
    ml_ptr,
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
    HAS_LEN: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    IEEE: tl.constexpr,
    N_SPLITS: tl.constexpr,
    SPLIT: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_G: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
):
    bh = tl.program_id(0)
    sp = tl.program_id(1)
    b = (bh // Hkv).to(tl.int64)
    h = (bh % Hkv).to(tl.int64)
    g = tl.arange(0, BLOCK_G)
    g_mask = g < G
    d = tl.arange(0, BLOCK_D)
    dv = tl.arange(0, BLOCK_DV)
    hq = h * G + g  # query heads of this KV head
    q = tl.load(
        q_ptr + b * stride_qb + hq[:, None] * stride_qh + d[None, :] * stride_qd,
        mask=g_mask[:, None] & (d[None, :] < D),
        other=0.0,
    )
    length = T
    if HAS_LEN:
        length = tl.minimum(tl.maximum(tl.load(len_ptr + b).to(tl.int32), 0), T)
    k_base = k_ptr + b * stride_kb + h * stride_kh
    v_base = v_ptr + b * stride_vb + h * stride_vh
    m_i = tl.full((BLOCK_G,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_G,), tl.float32)
    acc = tl.zeros((BLOCK_G, BLOCK_DV), tl.float32)
    for j in range(SPLIT // BLOCK_T):
        t = sp * SPLIT + j * BLOCK_T + tl.arange(0, BLOCK_T)
        t_mask = t < length
        t64 = t.to(tl.int64)
        k = tl.load(
            k_base + t64[:, None] * stride_kt + d[None, :] * stride_kd,
            mask=t_mask[:, None] & (d[None, :] < D),
            other=0.0,
        )
        if IEEE:  # noqa: SIM108 -- a constexpr branch reads clearer than a ternary in a kernel
            s = tl.dot(q, tl.trans(k), input_precision="ieee")
        else:
            s = tl.dot(q, tl.trans(k))
        s = s * qk_scale
        if HAS_BIAS:
            bias = tl.load(bias_ptr + b * stride_biasb + t64 * stride_biast, mask=t_mask, other=0.0)
            s = s + bias.to(tl.float32)[None, :] * 1.4426950408889634
        s = tl.where(t_mask[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # all masked so far: keep p = 0, no NaN
        p = tl.exp2(s - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(
            v_base + t64[:, None] * stride_vt + dv[None, :] * stride_vd,
            mask=t_mask[:, None] & (dv[None, :] < DV),
            other=0.0,
        )
        if IEEE:  # noqa: SIM108
            pv = tl.dot(p, v, input_precision="ieee")
        else:
            pv = tl.dot(p.to(v.dtype), v)
        acc = acc * alpha[:, None] + pv
        m_i = m_new
    # Partials laid out (B, Hq, N_SPLITS, ...) so pass 2 reads one row's splits contiguously.
    row = (b * Hkv * G + hq) * N_SPLITS + sp
    tl.store(acc_ptr + row[:, None] * BLOCK_DV + dv[None, :], acc, mask=g_mask[:, None])
    tl.store(ml_ptr + row * 2, m_i, mask=g_mask)
    tl.store(ml_ptr + row * 2 + 1, l_i, mask=g_mask)


@triton.jit
def _merge_kernel(
    acc_ptr,
    ml_ptr,
    out_ptr,
    Hq,
    DV,
    stride_ob,
    stride_oh,
    stride_od,
    N_SPLITS: tl.constexpr,
    BLOCK_S: tl.constexpr,
    CHUNK: tl.constexpr,
    BLOCK_DV: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    base = row * N_SPLITS
    dv = tl.arange(0, BLOCK_DV)
    # The global max and normaliser over all splits at once (<= 256 splits by construction).
    s_all = tl.arange(0, BLOCK_S)
    s_mask = s_all < N_SPLITS
    m_all = tl.load(ml_ptr + (base + s_all) * 2, mask=s_mask, other=float("-inf"))
    m_max = tl.max(m_all, axis=0)
    m_safe = tl.where(m_max == float("-inf"), 0.0, m_max)  # no valid key anywhere: weights 0, output 0
    l_all = tl.load(ml_ptr + (base + s_all) * 2 + 1, mask=s_mask, other=0.0)
    l_sum = tl.sum(l_all * tl.exp2(m_all - m_safe), axis=0)
    # Partial outputs in chunks of CHUNK splits, chunk 0 first: a fixed order, and the chunks' loads
    # are independent, so they overlap instead of forming one long dependent chain.
    o = tl.zeros((BLOCK_DV,), tl.float32)
    for c in range(0, BLOCK_S, CHUNK):
        s = c + tl.arange(0, CHUNK)
        mask = s < N_SPLITS
        w = tl.exp2(tl.load(ml_ptr + (base + s) * 2, mask=mask, other=float("-inf")) - m_safe)
        a = tl.load(acc_ptr + (base + s)[:, None] * BLOCK_DV + dv[None, :], mask=mask[:, None], other=0.0)
        o += tl.sum(a * w[:, None], axis=0)
    out = tl.where(l_sum > 0, o / tl.where(l_sum > 0, l_sum, 1.0), 0.0)
    b = row // Hq
    h = row % Hq
    tl.store(
        out_ptr + b * stride_ob + h * stride_oh + dv * stride_od,
        out.to(out_ptr.dtype.element_ty),
        mask=dv < DV,
    )


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
    """Triton twin of :func:`nbxsig.reference.attention.decode_attention` (inputs validated by the caller)."""
    b, hq, d = q.shape
    hkv, t, dv = k_cache.shape[1], k_cache.shape[2], v_cache.shape[3]
    g = hq // hkv
    extra = tuple(x for x in (lengths, bias) if x is not None)
    device = check_launchable(q, k_cache, v_cache, *extra)
    cfg = config or split_config(b, hkv, g, t, d, dv)
    # Partials are scratch (every element is written by pass 1), so plain torch.empty is right here.
    acc = torch.empty((b, hq, cfg.n_splits, cfg.block_dv), dtype=torch.float32, device=device)
    ml = torch.empty((b, hq, cfg.n_splits, 2), dtype=torch.float32, device=device)
    out = empty_output((b, hq, dv), dtype=q.dtype, device=device)
    bias_strides = (0, 0)
    if bias is not None:
        bias_strides = (0 if bias.shape[0] == 1 else bias.stride(0), bias.stride(1))
    _split_kernel[(b * hkv, cfg.n_splits)](
        q,
        k_cache,
        v_cache,
        lengths if lengths is not None else q,
        bias if bias is not None else q,
        acc,
        ml,
        t,
        d,
        dv,
        g,
        hkv,
        scale * LOG2E,
        *q.stride(),
        *k_cache.stride(),
        *v_cache.stride(),
        *bias_strides,
        HAS_LEN=lengths is not None,
        HAS_BIAS=bias is not None,
        IEEE=q.dtype == torch.float32,  # float32 in, float32 accuracy out: no TF32 for the dots
        N_SPLITS=cfg.n_splits,
        SPLIT=cfg.split,
        BLOCK_T=cfg.block_t,
        BLOCK_G=cfg.block_g,
        BLOCK_D=cfg.block_d,
        BLOCK_DV=cfg.block_dv,
        num_warps=cfg.num_warps,
    )
    block_s = triton.next_power_of_2(cfg.n_splits)
    _merge_kernel[(b * hq,)](
        acc,
        ml,
        out,
        hq,
        dv,
        *out.stride(),
        N_SPLITS=cfg.n_splits,
        BLOCK_S=block_s,
        CHUNK=min(16, block_s),
        BLOCK_DV=cfg.block_dv,
        num_warps=4,
    )
    return out
