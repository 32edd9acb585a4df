"""Depthwise convolution (1-D, 2-D, separable) and polyphase resampling in plain torch.

The CPU path of :mod:`nbxsig.filters` and the float64 oracle of its Triton kernels. Boundaries are
index maps (:func:`boundary_index`): the extended signal is gathered with them and handed to
``F.conv2d`` with ``groups=C``. Autograd flows through the gather and the convolution, so the
torch backend is trainable as it is. float16/bfloat16 inputs are computed in float32 and rounded
once, like the kernels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from .dft import compute_dtype

BOUNDARIES = ("zeros", "reflect", "symmetric", "replicate", "circular")


def is_channels_last(x: torch.Tensor) -> bool:
    """Channels contiguous in a 4-D tensor: the layout test that routes calls to channels_last tiles."""
    return x.dim() == 4 and x.stride(1) == 1 and x.shape[1] > 1 and not x.is_contiguous()


def boundary_index(positions: torch.Tensor, n: int, boundary: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Map integer ``positions`` (any, possibly outside ``[0, n)``) to indices into a length-``n`` axis.

    Returns ``(index, valid)``; ``valid`` is False only for ``"zeros"`` outside the signal (those read 0).

    * reflect: ``... 2 1 | 0 1 2 ... n-1 | n-2 ...`` (numpy/torch "reflect", period ``2n-2``)
    * symmetric: ``... 1 0 | 0 1 ... n-1 | n-1 ...`` (half-sample; scipy.ndimage "reflect", period ``2n``)
    * replicate: clamp; circular: modulo ``n``.
    """
    valid = torch.ones_like(positions, dtype=torch.bool)
    if boundary == "zeros":
        valid = (positions >= 0) & (positions < n)
        index = positions.clamp(0, n - 1)
    elif boundary == "reflect":
        if n == 1:
            index = torch.zeros_like(positions)
        else:
            period = 2 * n - 2
            m = torch.remainder(positions, period)
            index = torch.where(m >= n, period - m, m)
    elif boundary == "symmetric":
        m = torch.remainder(positions, 2 * n)
        index = torch.where(m >= n, 2 * n - 1 - m, m)
    elif boundary == "replicate":
        index = positions.clamp(0, n - 1)
    elif boundary == "circular":
        index = torch.remainder(positions, n)
    else:  # validated by the public layer
        raise ValueError(boundary)
    return index, valid


def _extend(x: torch.Tensor, dim: int, before: int, after: int, boundary: str) -> torch.Tensor:
    n = x.shape[dim]
    pos = torch.arange(-before, n + after, device=x.device)
    index, valid = boundary_index(pos, n, boundary)
    out = x.index_select(dim, index)
    if not bool(valid.all()):
        shape = [1] * x.dim()
        shape[dim] = -1
        # Selected, not multiplied by the mask: a padded position holds the edge sample it was clamped to,
        # and 0 · inf = NaN, so a ±inf or NaN edge sample (log(0) at the start of a log-energy) turned the
        # zero padding into NaN where F.conv*, lfilter and the Triton kernels read 0.
        out = torch.where(valid.view(shape), out, 0.0)
    return out


def depthwise_conv2d(
    x: torch.Tensor,
    weight: torch.Tensor,
    *,
    stride: tuple[int, int],
    pads: tuple[int, int, int, int],
    boundary: str,
) -> torch.Tensor:
    """``y[n, o, h, w] = Σ_ij weight[o, i, j] · x̃[n, o // M, h·sy + i - top, w·sx + j - left]``.

    ``x`` (N, C, H, W); ``weight`` (C·M, kh, kw); ``pads = (top, bottom, left, right)``; ``x̃`` is ``x``
    extended by ``boundary``. Output (N, C·M, H', W') in ``x``'s dtype and, like the kernels', in
    channels_last when :func:`is_channels_last` says ``x`` is.
    """
    return _like(_conv2d(x, weight, stride=stride, pads=pads, boundary=boundary), x)


def _conv2d(
    x: torch.Tensor,
    weight: torch.Tensor,
    *,
    stride: tuple[int, int],
    pads: tuple[int, int, int, int],
    boundary: str,
) -> torch.Tensor:
    """:func:`depthwise_conv2d` in the compute dtype (x's own on the cuDNN path) and in whatever memory
    format conv2d gives: the separable path's intermediate stays so, and only the result is converted."""
    c = x.shape[1]
    top, bottom, left, right = pads
    if x.is_cuda and boundary == "zeros" and top == bottom and left == right:
        # cuDNN straight on x: no extended copy, x's memory format kept (its channels_last kernels are
        # what the auto dispatch routes channels_last calls to); float16/bfloat16 are multiplied and summed
        # in float32 by cuDNN (PyTorch sets a float32 math type for half convolutions), the taps are
        # rounded to x's dtype.
        return F.conv2d(x, weight.to(x.dtype).unsqueeze(1), stride=stride, padding=(top, left), groups=c)
    dtype = compute_dtype(x.dtype)
    xe = _extend(_extend(x.to(dtype), 2, top, bottom, boundary), 3, left, right, boundary)
    return F.conv2d(xe, weight.to(dtype).unsqueeze(1), stride=stride, groups=c)


def _like(y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``y`` in ``x``'s dtype and memory format, in one copy, as the kernels allocate it: the gather in
    :func:`_extend` (and conv2d after it) does not keep channels_last."""
    if is_channels_last(x):
        return y.to(dtype=x.dtype, memory_format=torch.channels_last)
    return y.to(x.dtype)


def depthwise_conv2d_separable(
    x: torch.Tensor,
    weight_y: torch.Tensor,
    weight_x: torch.Tensor,
    *,
    stride: tuple[int, int],
    pads: tuple[int, int, int, int],
    boundary: str,
) -> torch.Tensor:
    """The rank-1 kernel ``weight_y[o, i] · weight_x[o, j]``, as a column pass then a row pass."""
    dtype = compute_dtype(x.dtype)
    top, bottom, left, right = pads
    mid = _conv2d(
        x.to(dtype), weight_y.unsqueeze(2), stride=(stride[0], 1), pads=(top, bottom, 0, 0), boundary=boundary
    )
    y = _conv2d(
        mid, weight_x.unsqueeze(1), stride=(1, stride[1]), pads=(0, 0, left, right), boundary=boundary
    )
    return _like(y, x)


def depthwise_conv1d(
    x: torch.Tensor, weight: torch.Tensor, *, stride: int, pads: tuple[int, int], boundary: str
) -> torch.Tensor:
    """``y[b, o, l] = Σ_k weight[o, k] · x̃[b, o // M, l·stride + k - left]``; ``x`` (B, C, L)."""
    y = depthwise_conv2d(
        x.unsqueeze(2), weight.unsqueeze(1), stride=(1, stride), pads=(0, 0, *pads), boundary=boundary
    )
    return y.squeeze(2)


# ---------------------------------------------------------------------------------------------
# Resampling (torchaudio.functional.resample)


def _sinc_taps(
    t: torch.Tensor, *, orig: int, base: float, lowpass_filter_width: int, method: str, beta: float | None
) -> torch.Tensor:
    """torchaudio's windowed sinc at ``t = i/orig - j/new`` (input sample ``i``, output ``j``; float64),
    with its operations in its order, so that a tap has the same value wherever it is evaluated."""
    t = (t * base).clamp(-lowpass_filter_width, lowpass_filter_width)
    if method == "sinc_interp_hann":
        window = torch.cos(t * math.pi / lowpass_filter_width / 2) ** 2
    else:
        # torchaudio holds beta in a float32 scalar tensor, so beta is rounded to float32 and the
        # normaliser i0(beta) is computed in float32; doing the same keeps the taps torchaudio's.
        b = torch.tensor(14.769656459379492 if beta is None else float(beta), dtype=torch.float32)
        window = torch.i0(b * torch.sqrt(1 - (t / lowpass_filter_width) ** 2)) / torch.i0(b)
    t = t * math.pi
    kernel = torch.where(t == 0, torch.ones_like(t), torch.sin(t) / t)
    return kernel * window * (base / orig)


def _tap_positions(orig: int, new: int, width: int, cols: torch.Tensor) -> torch.Tensor:
    """``t`` of phase ``p``'s column ``cols[p, c]`` in torchaudio's bank (float64, computed as torchaudio
    computes its whole grid: ``-p/new + (k - width)/orig``, so a subset of the grid is bit-identical)."""
    phase = torch.arange(0, -new, -1, dtype=torch.float64)[:, None] / new
    return phase + (cols - width).to(torch.float64) / orig


def resample_width(orig: int, new: int, lowpass_filter_width: int, rolloff: float) -> int:
    """torchaudio's ``width``: taps on each side of the polyphase filters (reduced rates)."""
    return math.ceil(lowpass_filter_width * orig / (min(orig, new) * rolloff))


def sinc_resample_kernel(
    orig: int, new: int, *, lowpass_filter_width: int, rolloff: float, method: str, beta: float | None
) -> tuple[torch.Tensor, int]:
    """torchaudio's polyphase bank ``(new, 2·width + orig)`` in float64 (``orig``, ``new`` reduced by their
    gcd) and ``width``; phase ``p`` computes output ``l·new + p`` from ``x[l·orig - width + k]``.

    ``new · (2·width + orig)`` taps: for large coprime rates (44100 → 44101: 15.5 GB) use
    :func:`compact_resample_bank`, which holds only the taps inside each phase's window."""
    base = min(orig, new) * rolloff
    width = resample_width(orig, new, lowpass_filter_width, rolloff)
    cols = torch.arange(2 * width + orig)[None, :]
    t = _tap_positions(orig, new, width, cols)
    taps = _sinc_taps(
        t, orig=orig, base=base, lowpass_filter_width=lowpass_filter_width, method=method, beta=beta
    )
    return taps, width


def compact_resample_bank(
    orig: int, new: int, *, lowpass_filter_width: int, rolloff: float, method: str, beta: float | None
) -> CompactBank:
    """The taps of :func:`sinc_resample_kernel` that lie inside each phase's window, computed directly in
    ``O(new · J)`` memory, ``J ≈ 2·lowpass_filter_width·orig / (min(orig, new)·rolloff)``.

    Phase ``p``'s window (``|t·base| < lowpass_filter_width``) covers the bank's columns ``first[p] ..
    last[p]``; ``J = max(last - first) + 1`` columns from ``first[p]`` are kept (beyond ``last[p]`` they are
    torchaudio's values too, ``< 1e-15`` -- the window's end). The taps equal the bank's gathered
    columns (same float64 operations on the same positions), without the ``new · (2·width + orig)`` grid.
    """
    base = min(orig, new) * rolloff
    width = resample_width(orig, new, lowpass_filter_width, rolloff)
    k = 2 * width + orig
    half = lowpass_filter_width * orig / base  # the window's half-length in input samples
    # Candidate columns around each phase's centre ``width + p·orig/new``, with 3 columns of margin each
    # side: the window is found by the exact test below, the margin only has to contain it.
    reach = math.ceil(half) + 3
    centre = width + torch.arange(new) * orig // new
    lo = (centre - reach).clamp(min=0)
    cand = lo[:, None] + torch.arange(2 * reach + 1)[None, :]
    inside = (_tap_positions(orig, new, width, cand) * base).abs() < lowpass_filter_width
    inside &= cand < k
    big = torch.iinfo(torch.int64).max
    first = torch.where(inside, cand, big).min(1).values
    last = torch.where(inside, cand, -1).max(1).values
    j = int((last - first).max().item()) + 1
    cols = first[:, None] + torch.arange(j)[None, :]
    taps = _sinc_taps(
        _tap_positions(orig, new, width, cols),
        orig=orig,
        base=base,
        lowpass_filter_width=lowpass_filter_width,
        method=method,
        beta=beta,
    )
    taps = torch.where(cols < k, taps, torch.zeros(()))
    return CompactBank(taps=taps, offsets=(first - width).to(torch.int32), width=width)


@dataclass(frozen=True, eq=False)
class CompactBank:
    """A polyphase bank as per-phase windows: output ``l·new + p`` is
    ``Σ_j taps[p, j] · x[l·orig + offsets[p] + j]`` (zeros outside the signal).

    ``taps`` ``(new, J)`` float64, ``offsets`` ``(new,)`` int32, ``width`` torchaudio's. Passed as the
    ``kernel`` of :func:`resample` in place of torchaudio's full bank when that one would be too large;
    :meth:`to` gives (and keeps) its copy on a device, so the copies live as long as the bank does.
    Hashed and compared by identity (it is a cache key).
    """

    taps: torch.Tensor
    offsets: torch.Tensor
    width: int
    _copies: dict = field(default_factory=dict, repr=False)

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.taps.shape)  # type: ignore[return-value]

    def to(self, device: torch.device | str) -> CompactBank:
        device = torch.device(device)
        if device == self.taps.device:
            return self
        copy = self._copies.get(device)
        if copy is None:
            copy = CompactBank(taps=self.taps.to(device), offsets=self.offsets.to(device), width=self.width)
            self._copies[device] = copy
        return copy


# Elements of one (B, chunk, J) gather in the compact path: bounds its memory whatever the signal's length.
_GATHER_ELEMENTS = 2**22


def _resample_compact(x: torch.Tensor, *, orig: int, new: int, bank: CompactBank) -> torch.Tensor:
    """:func:`resample` on a :class:`CompactBank`, ``x`` (B, L) in the compute dtype: each output gathers its
    ``J`` inputs from the zero-padded signal (torchaudio pads ``width`` before, ``width + orig`` after, which
    covers every window). Autograd flows through the gather."""
    b, length = x.shape
    width, (_, j) = bank.width, bank.shape
    xp = F.pad(x, (width, width + orig))
    lo = -(-new * length // orig)
    o = torch.arange(lo, device=x.device)
    phase = o % new
    start = (o // new) * orig + bank.offsets.to(torch.int64)[phase] + width
    taps = bank.taps.to(x.dtype)
    step = max(1, _GATHER_ELEMENTS // max(1, b * j))
    cols = torch.arange(j, device=x.device)
    pieces = []
    for s in range(0, lo, step):
        idx = (start[s : s + step, None] + cols).clamp(max=xp.shape[1] - 1)  # beyond the bank: zero taps
        pieces.append((xp[:, idx] * taps[phase[s : s + step]]).sum(-1))
    return torch.cat(pieces, dim=1) if pieces else x.new_zeros((b, 0))


def resample(
    x: torch.Tensor, *, orig: int, new: int, kernel: torch.Tensor | CompactBank, width: int
) -> torch.Tensor:
    """Apply the bank from :func:`sinc_resample_kernel` as torchaudio does (``F.conv1d`` with stride
    ``orig``: the same values), or a :class:`CompactBank` by gathering each output's window:
    ``x`` (B, L) → (B, ceil(new·L/orig))."""
    dtype = compute_dtype(x.dtype)
    if isinstance(kernel, CompactBank):
        return _resample_compact(x.to(dtype), orig=orig, new=new, bank=kernel.to(x.device)).to(x.dtype)
    b, length = x.shape
    xp = F.pad(x.to(dtype), (width, width + orig))
    y = F.conv1d(xp[:, None], kernel.to(dtype)[:, None], stride=orig)
    y = y.transpose(1, 2).reshape(b, -1)
    return y[:, : -(-new * length // orig)].to(x.dtype)


def mark_shared_taps(weight: torch.Tensor, taps: torch.Tensor) -> torch.Tensor:
    """Record on ``weight`` (``(C, K)``, every row equal to the host tensor ``taps``) the taps' values as
    floats of ``weight``'s dtype, for :func:`shared_host_taps`. Only for weights built internally that
    nothing will modify (the filters' Gaussian and box taps, never handed out): the record is not updated
    by writes."""
    weight._nbxsig_shared_taps = tuple(taps.to(weight.dtype).tolist())
    return weight


def shared_host_taps(wy: torch.Tensor, wx: torch.Tensor) -> tuple[tuple, tuple] | None:
    """``(wy, wx)`` taps recorded by :func:`mark_shared_taps`, as float32 tuples, or None. The long
    separable path passes them as kernel arguments: identical in every thread, they then take uniform
    registers or the constant bank instead of 62 of ~170 registers per thread at 31×31 (reading device
    taps back would synchronise every call)."""
    ty, tx = getattr(wy, "_nbxsig_shared_taps", None), getattr(wx, "_nbxsig_shared_taps", None)
    if ty is None or tx is None or wy.dtype != torch.float32 or wx.dtype != torch.float32:
        return None
    return ty, tx
