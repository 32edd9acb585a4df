"""Attention in plain torch: decode attention over a KV cache (the CPU path and the tests' oracle)
and the causal sliding-window mask used by whole-sequence forwards."""

from __future__ import annotations

import torch


def decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    *,
    lengths: torch.Tensor | None = None,
    scale: float,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """``softmax(q·Kᵀ·scale + bias, masked to t < lengths[b]) · V`` per query head, GQA by grouping.

    Computed in float32 (float64 for float64 ``q``) and cast to ``q.dtype``. A row with no valid
    key (``lengths[b] == 0`` or every bias ``-inf``) gives zeros; a NaN in q, the valid keys/values or
    the bias gives NaN, as in ``torch.softmax`` (only the empty sum is guarded). Slots at or past
    ``lengths[b]`` are never read into the result, whatever they hold (an uninitialised cache's NaN).

    Shape: ``q (B, Hq, D)``, ``k_cache (B, Hkv, T, D)``, ``v_cache (B, Hkv, T, Dv)``, ``lengths (B,)``,
    ``bias (B or 1, T)`` → ``(B, Hq, Dv)``.
    """
    compute = torch.float64 if q.dtype == torch.float64 else torch.float32
    b, hq, d = q.shape
    hkv, t = k_cache.shape[1], k_cache.shape[2]
    g = hq // hkv
    qg = q.to(compute).reshape(b, hkv, g, d)
    k, v = k_cache.to(compute), v_cache.to(compute)
    valid = None
    if lengths is not None:
        valid = torch.arange(t, device=q.device)[None, :] < lengths.to(q.device)[:, None]
        # p = 0 there, but 0·NaN is NaN: slots past the length (garbage in a torch.empty cache) are
        # zeroed, as the kernel's masked loads read them as 0 -- in v for the output, in k for q's
        # gradient (Σ_t ∂s_t · k_t, where ∂s_t = 0 past the length).
        k = k.masked_fill(~valid[:, None, :, None], 0.0)
        v = v.masked_fill(~valid[:, None, :, None], 0.0)
    s = torch.einsum("bhgd,bhtd->bhgt", qg, k) * scale
    if bias is not None:
        s = s + bias.to(compute)[:, None, None, :]
    if valid is not None:
        s = s.masked_fill(~valid[:, None, None, :], float("-inf"))
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)  # all-masked guard
    p = torch.exp(s - m)
    denom = p.sum(dim=-1, keepdim=True)
    out = torch.einsum("bhgt,bhtd->bhgd", p, v)
    # Zeros for an empty sum only: a NaN sum (NaN scores) stays NaN instead of passing as "no key".
    empty = denom == 0
    out = torch.where(empty, torch.zeros_like(out), out / denom.masked_fill(empty, 1.0))
    return out.reshape(b, hq, -1).to(q.dtype)


def sliding_window_mask(
    t: int, window: int | None, *, device: torch.device | str | None = None
) -> torch.Tensor:
    """Boolean ``(T, T)`` mask, True where query ``i`` may attend key ``j``: ``i - window < j ≤ i``."""
    i = torch.arange(t, device=device)[:, None]
    j = torch.arange(t, device=device)[None, :]
    allowed = j <= i
    if window is not None:
        allowed &= j > i - window
    return allowed
