"""int4 weights in plain torch: packing, quantization, dequantization and the GEMV oracles.

Format (asymmetric, llama.cpp q4_1-like, 4.25 bits per weight at ``group_size=128``): for a weight
``W`` of shape ``(N, K)`` (``nn.Linear`` layout), each group of ``group_size`` consecutive elements
along ``K`` of one output column ``n`` has an fp16 ``scale`` and an fp16 ``min``, and

    W[n, k] ≈ q[k, n] · scale[k // group_size, n] + min[k // group_size, n],   q ∈ 0..15.

``q`` is stored K-major: ``packed`` is ``(K // 8, N)`` int32 with 8 nibbles per word, low nibble
first (nibble ``i`` of word ``r`` is element ``k = 8r + i``), so a row of words is contiguous along
``N`` and a GEMV's loads coalesce. ``scales``/``mins`` are ``(K // group_size, N)``.

Dequantization is ``fp32(q) * fp32(scale) + fp32(min)`` in float32: ``q`` has 4 bits and ``scale``
11 significant bits, so the product is exact and a fused multiply-add gives the same result as a
multiply followed by an add. The Triton GEMV relies on that to match :func:`int4_gemv_blocked`
bit for bit.
"""

from __future__ import annotations

import torch

_SHIFTS = tuple(range(0, 32, 4))


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """``q (K, N)`` integers in 0..15 (K a multiple of 8) → ``packed (K // 8, N)`` int32, low nibble first."""
    k, n = q.shape
    q = q.to(torch.int32).reshape(k // 8, 8, n)
    word = torch.zeros(k // 8, n, dtype=torch.int32, device=q.device)
    for i, shift in enumerate(_SHIFTS):
        # int32 shifts wrap into the sign bit for nibble 7: exactly the two's-complement word we want.
        word |= q[:, i, :] << shift
    return word


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """``packed (K // 8, N)`` int32 → ``q (K, N)`` uint8 in 0..15 (inverse of :func:`pack_int4`)."""
    rows, n = packed.shape
    nibbles = [(packed >> shift) & 0xF for shift in _SHIFTS]  # arithmetic shift; the mask drops the sign
    return torch.stack(nibbles, dim=1).reshape(rows * 8, n).to(torch.uint8)


def _round_fp16(x: torch.Tensor, *, direction: str) -> torch.Tensor:
    """Round float32 ``x`` to fp16 toward -inf ("down") or +inf ("up").

    Round to nearest, then step one ulp where that went the wrong way. The step is done on the
    int16 bit pattern (sign-magnitude: +1 grows the magnitude, -1 shrinks it), which works on every
    device, unlike ``torch.nextafter`` for half tensors."""
    h = x.to(torch.float16)
    bits = h.view(torch.int16)
    negative = bits < 0
    if direction == "down":
        wrong = h.float() > x
        step = torch.where(negative, 1, -1)  # toward -inf: a negative grows, a positive shrinks
    else:
        wrong = h.float() < x
        step = torch.where(negative, -1, 1)
    return torch.where(wrong, bits + step.to(torch.int16), bits).view(torch.float16)


def quantize_int4(weight: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Quantize ``weight (N, K)`` → ``(packed (K//8, N) int32, scales, mins (K//group_size, N) fp16)``.

    ``min`` is the group minimum rounded down to fp16 and ``scale`` the range over 15 rounded up, so
    ``[min, min + 15·scale]`` covers the group after rounding and every element is reproduced within
    ``scale / 2`` (round to nearest ``q``).
    """
    n, k = weight.shape
    w = weight.detach().to(torch.float32).t().reshape(k // group_size, group_size, n)  # (G, gs, N)
    wmin = _round_fp16(w.amin(dim=1), direction="down")
    wmax = w.amax(dim=1)
    scale = _round_fp16((wmax - wmin.float()) / 15.0, direction="up")
    # A constant group has scale 0: every q is 0 and min reproduces it exactly.
    safe = torch.where(scale == 0, torch.ones_like(scale), scale).float()
    q = torch.round((w - wmin.float()[:, None]) / safe[:, None]).clamp_(0, 15)
    return pack_int4(q.reshape(k, n)), scale, wmin


def dequantize_int4(
    packed: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor, group_size: int, *, transpose: bool = True
) -> torch.Tensor:
    """float32 weight from the packed form: ``(N, K)`` (``transpose=True``) or ``(K, N)``."""
    q = unpack_int4(packed).to(torch.float32)  # (K, N)
    k, n = q.shape
    q = q.reshape(k // group_size, group_size, n)
    w = (q * scales.float()[:, None] + mins.float()[:, None]).reshape(k, n)
    return w.t() if transpose else w


def dequantize_kn(
    packed: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor, group_size: int, *, dtype: torch.dtype
) -> torch.Tensor:
    """The weight as a contiguous ``(K, N)`` tensor in ``dtype`` (float32 arithmetic, one rounding)."""
    return dequantize_int4(packed, scales, mins, group_size, transpose=False).to(dtype)


def int4_linear(
    x: torch.Tensor,
    packed: torch.Tensor,
    scales: torch.Tensor,
    mins: torch.Tensor,
    group_size: int,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """``x (..., K) @ dequantize(W)ᵀ + bias`` with the weight dequantized to float32 (float64 for
    float64 ``x``) and the result cast to ``x.dtype``."""
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    w = dequantize_int4(packed, scales, mins, group_size).to(compute)
    out = torch.nn.functional.linear(x.to(compute), w, None if bias is None else bias.to(compute))
    return out.to(x.dtype)


def int4_gemv_blocked(
    x: torch.Tensor,
    packed: torch.Tensor,
    scales: torch.Tensor,
    mins: torch.Tensor,
    group_size: int,
    *,
    block_rows: int,
    split_rows: int = 0,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Dequantize-then-GEMV in exactly the float32 operation order of the fused Triton kernel.

    K's packed rows are cut into contiguous splits of ``split_rows`` (0: one split). Inside a split
    the kernel keeps ``block_rows`` partial sums per output (lane ``r`` owns the split's rows ``r``,
    ``r + block_rows``, ...); a lane adds ``x[k] * w[k]`` for its ``k = 8·row + i`` one at a time,
    ``i`` ascending inside a row, rows ascending, each as one fused multiply-add (one rounding,
    :func:`fma_float32`). After the split's last row the lanes are summed by
    a pairwise tree (lane ``2j`` + lane ``2j+1``, repeated). The split results are added in split
    order (``p0 + p1 + ...``), then ``bias`` is added and the sum cast to ``x.dtype``. Every step
    here is one correctly rounded elementwise float32 operation, so the result is reproducible bit
    for bit.
    Cost: ``K / block_rows`` torch ops — an oracle for tests, not a path.

    Shape: ``x (M, K)`` → ``(M, N)``.
    """
    k = x.shape[1]
    w = dequantize_int4(packed, scales, mins, group_size, transpose=False)  # (K, N) float32
    rows = k // 8
    if split_rows <= 0 or split_rows >= rows:
        split_rows = rows
    total = None
    for first in range(0, rows, split_rows):
        part = _blocked_split(
            x[:, first * 8 : (first + split_rows) * 8], w[first * 8 : (first + split_rows) * 8], block_rows
        )
        total = part if total is None else total + part
    if bias is not None:
        total = total + bias.float()
    return total.to(x.dtype)


def _blocked_split(x: torch.Tensor, w: torch.Tensor, block_rows: int) -> torch.Tensor:
    """One split of :func:`int4_gemv_blocked`: ``x (M, 8·rows)``, ``w (8·rows, N)`` float32 → ``(M, N)``."""
    m, n = x.shape[0], w.shape[1]
    rows = x.shape[1] // 8
    padded_rows = -(-rows // block_rows) * block_rows
    xf = torch.zeros(m, padded_rows * 8, dtype=torch.float32, device=x.device)
    xf[:, : rows * 8] = x.float()
    wf = torch.zeros(padded_rows * 8, n, dtype=torch.float32, device=x.device)
    wf[: rows * 8] = w
    xf = xf.reshape(m, padded_rows // block_rows, block_rows, 8)
    wf = wf.reshape(padded_rows // block_rows, block_rows, 8, n)
    acc = torch.zeros(m, block_rows, n, dtype=torch.float32, device=x.device)
    for j in range(padded_rows // block_rows):
        for i in range(8):
            acc = fma_float32(xf[:, j, :, i, None], wf[None, j, :, i, :], acc)
    while acc.shape[1] > 1:
        pairs = acc.reshape(m, acc.shape[1] // 2, 2, n)
        acc = pairs[:, :, 0] + pairs[:, :, 1]
    return acc[:, 0]


def fma_float32(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """``a·b + c`` for float32 tensors (broadcast), rounded once to float32 -- what the GPU's FFMA does.

    torch has no float32 FMA, so it is built in float64: the product of two float32 values is exact
    there (24 + 24 significant bits), the sum ``s`` is rounded once and its rounding error ``e`` is
    recovered exactly (Knuth's two-sum). Rounding ``s`` to float32 then gives the correctly rounded
    result except where ``s`` lies exactly halfway between two float32 values and ``e ≠ 0``: the
    exact sum is then just above or below the midpoint, and the neighbour on ``e``'s side is taken.
    Finite inputs only.

    >>> x = torch.tensor([1.0 + 2.0**-12], dtype=torch.float32)
    >>> fma_float32(x, x, torch.tensor([-1.0])).item() == 2.0**-11 + 2.0**-24
    True
    """
    p = a.double() * b.double()
    c64 = c.double()
    s = p + c64
    bv = s - p
    e = (p - (s - bv)) + (c64 - bv)
    r = s.float()
    up = torch.nextafter(r, torch.full_like(r, float("inf")))
    down = torch.nextafter(r, torch.full_like(r, float("-inf")))
    r64 = r.double()
    r = torch.where((s == (r64 + up.double()) * 0.5) & (e > 0), up, r)
    return torch.where((s == (r64 + down.double()) * 0.5) & (e < 0), down, r)
