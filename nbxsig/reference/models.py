"""The sequence model's pointwise layers in plain torch: RMSNorm (alone and after a residual add), rotary
embeddings and the SwiGLU gate (the CPU path and the tests' oracle for :mod:`nbxsig.kernels.rmsnorm`,
:mod:`nbxsig.kernels.rope` and :mod:`nbxsig.kernels.swiglu`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .dft import compute_dtype


def rms_norm(x: torch.Tensor, weight: torch.Tensor, *, eps: float) -> torch.Tensor:
    """``x / sqrt(mean(x²) + eps) · weight`` over the last dim, in float32 (float64 for float64 ``x``),
    cast to ``x.dtype``.

    Shape: ``x (..., D)``, ``weight (D,)`` → ``(..., D)``."""
    xf = x.to(compute_dtype(x.dtype))
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * weight.to(xf.dtype)).to(x.dtype)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, *, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """A pre-norm block's residual step: ``s = x + residual`` (rounded to ``x.dtype``, as torch's add)
    and ``rms_norm(s, weight)``.

    Shape: ``x``, ``residual (..., D)`` of one dtype, ``weight (D,)`` → ``(s, normed)``, both ``(..., D)``."""
    s = x + residual
    return s, rms_norm(s, weight, eps=eps)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """The SwiGLU gate ``silu(gate) · up`` of ``gate_up (..., 2F)`` holding ``gate | up``, each op rounded
    to the dtype as torch's eager pair of launches rounds it. Shape: ``(..., 2F)`` → ``(..., F)``."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def rope_frequencies(head_dim: int, base: float, device: torch.device | str | None = None) -> torch.Tensor:
    """The rotary frequencies ``base^(-2i/D)``, ``i < D/2``, float32 ``(D/2,)``: the one table that both
    backends multiply positions by, so their angles are the same float32 values."""
    exponent = torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim
    return base ** (-exponent)


def rope(x: torch.Tensor, pos: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """Rotary embedding (rotate-half form) of ``x (..., H, D)`` at positions ``pos`` (broadcastable to
    ``x.shape[:-2]``): angles ``float32(pos) · inv_freq`` (:func:`rope_frequencies`), then
    ``(x1·cos − x2·sin, x2·cos + x1·sin)`` on the halves of the last dim, in float32 (float64 for
    float64 ``x``), cast to ``x.dtype``."""
    angle = pos.to(torch.float32)[..., None, None] * inv_freq  # (..., 1, D/2)
    xf = x.to(compute_dtype(x.dtype))
    # cos and sin in the compute dtype (float64 for float64 x): taken in float32, a float64 x was
    # rotated to float32 accuracy only (norms off by 1e-8, an inverse rotation by 2e-7).
    angle = angle.to(xf.dtype)
    cos, sin = torch.cos(angle), torch.sin(angle)
    d = x.shape[-1]
    x1, x2 = xf[..., : d // 2], xf[..., d // 2 :]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)


def rope_and_cache(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    pos: torch.Tensor,
    inv_freq: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
) -> torch.Tensor:
    """One decode step's attention inputs: ``q`` and ``k`` rotated at ``pos`` (:func:`rope`), the rotated
    ``k`` and ``v`` written into the caches at slot ``pos % slots``; returns the rotated ``q``.

    Shape: ``q (B, Hq, D)``, ``k``/``v (B, Hkv, D)``, ``pos (B,)`` integer, ``k_cache``/``v_cache
    (B, Hkv, slots, D)`` (written in place, in their own dtype) → ``(B, Hq, D)``."""
    rows = torch.arange(q.shape[0], device=q.device)
    slot = torch.remainder(pos, k_cache.shape[2])
    k_cache[rows, :, slot] = rope(k, pos, inv_freq).to(k_cache.dtype)
    v_cache[rows, :, slot] = v.to(v_cache.dtype)
    return rope(q, pos, inv_freq)
