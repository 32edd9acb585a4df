"""Filter banks on depthwise-convolution stencils: 1-D FIR banks (channel multiplier, stride), 2-D image
filters (full, separable, NCHW or channels_last), kornia-compatible blurs and edges, torchaudio-compatible
resampling, and the filter design functions of :mod:`nbxsig.filter_design` (re-exported here).

Conventions:

* ``depthwise_conv1d`` / ``depthwise_conv2d`` are correlations, like ``torch.nn.functional.conv1d``:
  ``y[o, l] = Σ_k w[o, k] · x̃[o // M, l·stride + k - left]`` with ``M = weight.shape[0] // C`` filters per
  input channel (the channel multiplier). ``fir_filter`` and ``filter_bank`` are causal convolutions,
  ``y[n] = Σ_k h[k] · x̃[n·stride - k]`` (``scipy.signal.lfilter(h, 1, x)`` for ``boundary="zeros"``).
* ``padding``: "same" (``left = (K-1)//2``, the rest on the right, torch's convention; output length
  ``ceil(L / stride)``), "valid" (none), "full" (``K-1`` both sides), an int (both sides) or a
  ``(left, right)`` pair (1-D) / ``(top, bottom, left, right)`` for 2-D.
* ``boundary``: what the signal reads outside itself, by index mapping (no padded copy):
  "zeros"; "reflect" (``2 1 | 0 1 2``, numpy/torch reflect); "symmetric" (``1 0 | 0 1 2``, half-sample,
  scipy.ndimage's "reflect"); "replicate" (``0 0 | 0 1 2``); "circular" (``L-2 L-1 | 0 1 2``).

Example:
    >>> import torch, nbxsig.filters as nf
    >>> x = torch.randn(4, 8, 16000)
    >>> taps = nf.lowpass_taps(1000.0, fs=16000.0, numtaps=65).float()
    >>> y = nf.fir_filter(x, taps)                                      # (4, 8, 16000)
    >>> img = torch.rand(2, 3, 64, 64)
    >>> blurred = nf.gaussian_blur2d(img, (5, 5), (1.5, 1.5))           # == kornia.filters.gaussian_blur2d
    >>> y16 = nf.resample(torch.randn(2, 44100), 44100, 16000)          # == torchaudio.functional.resample
"""

from __future__ import annotations

import math
import numbers
from functools import lru_cache
from typing import Any

import numpy as np
import torch
from torch import nn

from ._dispatch import Backend, Op, check_backend
from ._validate import FLOATING_DTYPES, check_choice, check_float, check_int, check_tensor
from .errors import bad_type, bad_value
from .filter_design import (
    bandpass_taps,
    bandstop_taps,
    box_kernel,
    erb_space,
    firwin,
    gabor_kernels,
    gammatone_bank,
    gaussian_kernel1d,
    gaussian_kernel2d,
    get_window,
    highpass_taps,
    laplacian_kernel,
    lowpass_taps,
    scharr_kernels,
    sobel_kernels,
)
from .reference.depthwise import (
    BOUNDARIES,
    CompactBank,
    compact_resample_bank,
    is_channels_last,
    mark_shared_taps,
    resample_width,
    sinc_resample_kernel,
)

__all__ = [
    "BOUNDARIES",
    "BoxBlur",
    "DepthwiseConv1d",
    "DepthwiseConv2d",
    "FIRFilter",
    "FilterBank",
    "GaussianBlur2d",
    "Laplacian",
    "Resample",
    "Sobel",
    "UnsharpMask",
    "bandpass_taps",
    "bandstop_taps",
    "box_blur",
    "box_kernel",
    "depthwise_conv1d",
    "depthwise_conv2d",
    "erb_space",
    "filter_bank",
    "fir_filter",
    "firwin",
    "gabor_kernels",
    "gammatone_bank",
    "gaussian_blur2d",
    "gaussian_kernel1d",
    "gaussian_kernel2d",
    "get_window",
    "highpass_taps",
    "laplacian",
    "laplacian_kernel",
    "lowpass_taps",
    "resample",
    "scharr_kernels",
    "sobel",
    "sobel_kernels",
    "unsharp_mask",
]

_DW2D = Op(
    "depthwise_conv2d",
    torch_impl="nbxsig.reference.depthwise:depthwise_conv2d",
    triton_impl="nbxsig.kernels.depthwise:depthwise_conv2d",
)
_DW2D_SEP = Op(
    "depthwise_conv2d (separable)",
    torch_impl="nbxsig.reference.depthwise:depthwise_conv2d_separable",
    triton_impl="nbxsig.kernels.depthwise:depthwise_conv2d_separable",
)
_RESAMPLE = Op(
    "resample",
    torch_impl="nbxsig.reference.depthwise:resample",
    triton_impl="nbxsig.kernels.depthwise:resample",
)

_KORNIA_BORDERS = {
    "constant": "zeros",
    "reflect": "reflect",
    "replicate": "replicate",
    "circular": "circular",
}


# ---------------------------------------------------------------------------------------------
# validation helpers


def _pads1d(padding: Any, k: int, name: str = "padding") -> tuple[int, int]:
    if isinstance(padding, str):
        check_choice(name, padding, ("same", "valid", "full"))
        if padding == "same":
            return (k - 1) // 2, k - 1 - (k - 1) // 2
        return (0, 0) if padding == "valid" else (k - 1, k - 1)
    if isinstance(padding, numbers.Integral) and not isinstance(padding, bool):
        p = check_int(name, padding, min_value=0)
        return p, p
    if isinstance(padding, (tuple, list)) and len(padding) == 2:
        return check_int(name, padding[0], min_value=0), check_int(name, padding[1], min_value=0)
    raise bad_value(name, padding, "'same', 'valid', 'full', an int >= 0 or a (left, right) pair")


def _pads2d(padding: Any, kh: int, kw: int) -> tuple[int, int, int, int]:
    if isinstance(padding, (tuple, list)):
        if len(padding) == 2:
            return (*_pads1d(padding[0], kh), *_pads1d(padding[1], kw))
        if len(padding) == 4:
            return tuple(check_int("padding", p, min_value=0) for p in padding)  # type: ignore[return-value]
        raise bad_value(
            "padding", padding, "a mode, an int, a (rows, cols) pair or (top, bottom, left, right)"
        )
    return (*_pads1d(padding, kh), *_pads1d(padding, kw))


def _pair(name: str, value: Any) -> tuple[int, int]:
    if isinstance(value, (tuple, list)):
        if len(value) != 2:  # named as a sequence: check_int's "must be an integer" would mislead
            raise bad_type(name, value, "an int or a pair (h, w) of ints")
        return check_int(name, value[0], min_value=1), check_int(name, value[1], min_value=1)
    v = check_int(name, value, min_value=1)
    return v, v


def _check_input(name: str, x: Any, min_dim: int) -> torch.Tensor:
    return check_tensor(name, x, dtypes=FLOATING_DTYPES, min_dim=min_dim)


def _check_weight(name: str, w: Any, *, dim: int, x: torch.Tensor, channels: int | None) -> torch.Tensor:
    w = check_tensor(name, w, dtypes=FLOATING_DTYPES, min_dim=dim, max_dim=dim)
    if w.device != x.device:
        raise bad_value(name, w, f"a tensor on the input's device {x.device}")
    if channels is not None and w.shape[0] % channels != 0:
        raise bad_value(
            name, w, f"a tensor whose first dimension is a multiple of the input's {channels} channels"
        )
    return w


def _out_len(name: str, n: int, k: int, before: int, after: int, stride: int) -> int:
    span = n + before + after - k
    if span < 0:
        raise bad_value(
            name,
            n,
            f"at least {k - before - after} samples",
            context=f"for a {k}-tap kernel with padding ({before}, {after})",
        )
    return span // stride + 1


def _check_boundary(boundary: Any) -> str:
    return check_choice("boundary", boundary, BOUNDARIES)


# ---------------------------------------------------------------------------------------------
# depthwise convolutions


def depthwise_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    *,
    stride: int = 1,
    padding: str | int | tuple[int, int] = "same",
    boundary: str = "zeros",
    backend: Backend | None = None,
) -> torch.Tensor:
    """Depthwise 1-D correlation with a channel multiplier and stride.

    ``y[..., o, l] = Σ_k weight[o, k] · x̃[..., o // M, l·stride + k - left]``, ``M = weight.shape[0] // C``.

    Args:
        x: signals ``(..., C, L)``, float16/bfloat16/float32/float64, any strides.
        weight: taps ``(C·M, K)``; rows ``c·M .. c·M+M-1`` filter channel ``c``.
        stride: output decimation >= 1. Default 1.
        padding: "same" (default), "valid", "full", an int or ``(left, right)``.
        boundary: "zeros" (default), "reflect", "symmetric", "replicate" or "circular".
        backend: None (auto), "triton" or "torch".

    Returns:
        ``(..., C·M, L')`` with ``L' = (L + left + right - K) // stride + 1``, in ``x``'s dtype
        (float32 accumulation for float16/bfloat16).

    Shape:
        x ``(..., C, L)``, weight ``(C·M, K)`` → ``(..., C·M, L')``.

    Raises:
        ParameterTypeError / ParameterValueError: non-floating tensors, a weight whose rows are not a
        multiple of ``C``, a signal shorter than a "valid" kernel, bad option values.

    Example:
        >>> y = depthwise_conv1d(torch.randn(2, 3, 100), torch.randn(6, 5), stride=2)   # (2, 6, 50)
    """
    x = _check_input("x", x, 2)
    c, n = x.shape[-2], x.shape[-1]
    weight = _check_weight("weight", weight, dim=2, x=x, channels=c)
    stride = check_int("stride", stride, min_value=1)
    boundary = _check_boundary(boundary)
    before, after = _pads1d(padding, weight.shape[1])
    _out_len("x.shape[-1]", n, weight.shape[1], before, after, stride)
    lead = x.shape[:-2]
    x4 = x.reshape(-1, c, 1, n)
    chosen = _DW2D.backend(backend, device=x.device, dtype=x.dtype, numel=x.numel())
    y = _DW2D(
        x4,
        weight.unsqueeze(1),
        stride=(1, stride),
        pads=(0, 0, before, after),
        boundary=boundary,
        backend=chosen,
    )
    return y.reshape(*lead, weight.shape[0], y.shape[-1])


def depthwise_conv2d(
    x: torch.Tensor,
    weight: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
    *,
    stride: int | tuple[int, int] = 1,
    padding: str | int | tuple = "same",
    boundary: str = "zeros",
    backend: Backend | None = None,
) -> torch.Tensor:
    """Depthwise 2-D correlation with a channel multiplier and stride; separable when given two 1-D banks.

    ``y[n, o, h, w] = Σ_ij weight[o, i, j] · x̃[n, o // M, h·sy + i - top, w·sx + j - left]``.

    Args:
        x: images ``(N, C, H, W)`` (contiguous or channels_last; any strides), floating.
        weight: ``(C·M, kh, kw)``, or a pair ``(weight_y (C·M, kh), weight_x (C·M, kw))`` for the separable
            kernel ``weight_y[o, i] · weight_x[o, j]`` (computed as a column pass then a row pass).
        stride: int or ``(sy, sx)``. Default 1.
        padding: "same" (default), "valid", "full", an int, a ``(rows, cols)`` pair of those, or
            ``(top, bottom, left, right)``.
        boundary: "zeros" (default), "reflect", "symmetric", "replicate" or "circular".
        backend: None (auto), "triton" or "torch".

    Returns:
        ``(N, C·M, H', W')`` in ``x``'s dtype and memory format.

    Raises:
        ParameterTypeError / ParameterValueError: as :func:`depthwise_conv1d`.

    Example:
        >>> y = depthwise_conv2d(torch.randn(1, 3, 32, 32), torch.randn(3, 7, 7), boundary="reflect")
    """
    x = _check_input("x", x, 4)
    if x.dim() != 4:
        raise bad_value("x", x, "a tensor (N, C, H, W)")
    c = x.shape[1]
    sy, sx = _pair("stride", stride)
    boundary = _check_boundary(boundary)
    if isinstance(weight, (tuple, list)):
        if len(weight) != 2:
            raise bad_value("weight", weight, "a tensor (C·M, kh, kw) or a pair (weight_y, weight_x)")
        wy = _check_weight("weight[0]", weight[0], dim=2, x=x, channels=c)
        wx = _check_weight("weight[1]", weight[1], dim=2, x=x, channels=c)
        if wy.shape[0] != wx.shape[0]:
            raise bad_value("weight[1]", wx, f"a tensor with {wy.shape[0]} rows like weight[0]")
        kh, kw = wy.shape[1], wx.shape[1]
        op, args = _DW2D_SEP, (wy, wx)
    else:
        w = _check_weight("weight", weight, dim=3, x=x, channels=c)
        kh, kw = w.shape[1], w.shape[2]
        op, args = _DW2D, (w,)
    pads = _pads2d(padding, kh, kw)
    _out_len("x.shape[-2]", x.shape[2], kh, pads[0], pads[1], sy)
    _out_len("x.shape[-1]", x.shape[3], kw, pads[2], pads[3], sx)
    cudnn_faster = op is _DW2D and _cudnn_is_faster(
        channels_last=is_channels_last(x), dtype=x.dtype, kh=kh, kw=kw, pads=pads, boundary=boundary
    )
    chosen = op.backend(
        backend, device=x.device, dtype=x.dtype, numel=x.numel(), torch_measured_faster=cudnn_faster
    )
    return op(x, *args, stride=(sy, sx), pads=pads, boundary=boundary, backend=chosen)


def _cudnn_is_faster(
    *,
    channels_last: bool,
    dtype: torch.dtype,
    kh: int,
    kw: int,
    pads: tuple[int, int, int, int],
    boundary: str,
) -> bool:
    """The auto dispatch's size rule for :func:`depthwise_conv2d` (pure; no device query): True where the
    torch path (cuDNN called on the input directly) was measured faster than the Triton stencil, so
    ``backend=None`` takes it. Only channels_last inputs with zero padding of equal sides qualify (the
    torch path then is one cuDNN call with no copy); NCHW stays on Triton (2-3.6x faster than cuDNN).

    Measured on the H200 (docs/filters.md, 32×64×512×512 and 8×384×128×128, the stencil's time vs cuDNN
    channels_last): float16 at 7×7 0.65x and 0.52x (cuDNN's half channels_last kernels run at ~650 GB/s;
    bfloat16 and other half sizes follow float16, unmeasured), float32 3×3 1.16x (unrolled stencil),
    5×5 0.98x, 7×7 1.45x.
    """
    if not channels_last or boundary != "zeros" or pads[0] != pads[1] or pads[2] != pads[3]:
        return False
    if dtype in (torch.float16, torch.bfloat16):
        return True
    return _CUDNN_FP32_TAPS[0] <= kh * kw <= _CUDNN_FP32_TAPS[1]


# float32 channels_last, 32×64×512×512 on the H200 (c11f37e): 3×3 the unrolled stencil 1.16x cuDNN, 5×5 the
# looped band 0.98x, 7×7 1.45x. The band's time grows ~118 µs per tap there, cuDNN's ~243 µs: crossover near
# 26 taps. So cuDNN from 10 (above the unrolled stencil's 9) to 25 taps.
_CUDNN_FP32_TAPS = (10, 25)


def fir_filter(
    x: torch.Tensor, taps: torch.Tensor, *, boundary: str = "zeros", backend: Backend | None = None
) -> torch.Tensor:
    """Causal FIR filtering ``y[n] = Σ_k taps[k] · x̃[n - k]`` (``scipy.signal.lfilter(taps, 1, x)`` for
    ``boundary="zeros"``; other boundaries extend the signal into the past).

    Args:
        x: signals ``(..., L)`` when ``taps`` is 1-D, ``(..., C, L)`` when ``taps`` is ``(C, K)``.
        taps: ``(K,)`` (one filter for every signal) or ``(C, K)`` (one per channel).
        boundary: see the module docstring. Default "zeros".
        backend: None (auto), "triton" or "torch".

    Returns:
        Tensor of ``x``'s shape and dtype.

    Example:
        >>> y = fir_filter(torch.randn(8, 16000), lowpass_taps(2e3, fs=16e3, numtaps=63).float())
    """
    x = _check_input("x", x, 1)
    taps = check_tensor("taps", taps, dtypes=FLOATING_DTYPES, min_dim=1, max_dim=2)
    if taps.device != x.device:
        raise bad_value("taps", taps, f"a tensor on the input's device {x.device}")
    k = taps.shape[-1]
    if taps.dim() == 1:
        y = depthwise_conv1d(
            x.unsqueeze(-2), taps.flip(-1)[None], padding=(k - 1, 0), boundary=boundary, backend=backend
        )
        return y.squeeze(-2)
    if x.dim() < 2 or x.shape[-2] != taps.shape[0]:
        raise bad_value("x", x, f"a tensor (..., {taps.shape[0]}, L) matching taps' {taps.shape[0]} filters")
    return depthwise_conv1d(x, taps.flip(-1), padding=(k - 1, 0), boundary=boundary, backend=backend)


def filter_bank(
    x: torch.Tensor,
    bank: torch.Tensor,
    *,
    stride: int = 1,
    boundary: str = "zeros",
    backend: Backend | None = None,
) -> torch.Tensor:
    """Apply ``F`` causal FIR filters to every signal:
    ``y[..., f, n] = Σ_k bank[f, k] · x̃[..., n·stride - k]``.

    Args:
        x: signals ``(..., L)``.
        bank: ``(F, K)`` filters (e.g. :func:`gammatone_bank`).
        stride: output decimation. Default 1.
        boundary: see the module docstring. Default "zeros".
        backend: None (auto), "triton" or "torch".

    Returns:
        ``(..., F, ceil(L / stride))``.

    Example:
        >>> bank = gammatone_bank(erb_space(100.0, 4000.0, 16), fs=16e3, numtaps=128).float()
        >>> y = filter_bank(torch.randn(2, 16000), bank)                 # (2, 16, 16000)
    """
    x = _check_input("x", x, 1)
    bank = _check_weight("bank", bank, dim=2, x=x, channels=None)
    k = bank.shape[1]
    return depthwise_conv1d(
        x.unsqueeze(-2), bank.flip(-1), stride=stride, padding=(k - 1, 0), boundary=boundary, backend=backend
    )


# ---------------------------------------------------------------------------------------------
# kornia.filters-compatible 2-D ops


def _kornia_border(border_type: Any) -> str:
    # Case-insensitive, as kornia's ("Reflect" and "REPLICATE" were refused); a refusal names the value given.
    if isinstance(border_type, str) and border_type.lower() in _KORNIA_BORDERS:
        return _KORNIA_BORDERS[border_type.lower()]
    return _KORNIA_BORDERS[check_choice("border_type", border_type, tuple(_KORNIA_BORDERS))]


def _check_image(input: Any) -> torch.Tensor:
    if isinstance(input, torch.Tensor) and not (input.is_floating_point() or input.is_complex()):
        # kornia filters an integer or bool image in float32 and returns float32 (a uint8 image was refused).
        x = check_tensor("input", input, min_dim=4, max_dim=4).to(torch.float32)
    else:
        x = _check_input("input", input, 4)
    if x.dim() != 4:
        raise bad_value("input", input, "a tensor (B, C, H, W)")
    return x


def _per_channel(k: torch.Tensor, channels: int, x: torch.Tensor) -> torch.Tensor:
    return k.to(device=x.device, dtype=_wdtype(x)).expand(channels, *k.shape).contiguous()


def _check_sigma_no_grad(sigma: torch.Tensor) -> None:
    # The taps are sampled on the host from sigma's values, so no gradient could reach sigma: refuse rather
    # than return a result silently cut from the graph.
    if sigma.requires_grad:
        raise bad_value(
            "sigma",
            sigma,
            "a tensor that does not require grad: the Gaussian taps are built on the host from its values, "
            "so no gradient reaches sigma (pass sigma.detach() to blur with fixed sigmas)",
        )


def _check_sigma_tensor(sigma: torch.Tensor) -> None:
    """A ``(B, 2)`` sigma tensor's dtype and grad: real (``.double()`` would drop an imaginary part with only
    a warning, and read True as a sigma of 1), and no gradient required."""
    if sigma.is_complex() or sigma.dtype == torch.bool:
        raise bad_type("sigma", sigma, "a real tensor (B, 2)")
    _check_sigma_no_grad(sigma)


def _sigma_pair(sigma: Any, allowed: str = "a pair (sy, sx) or a tensor (B, 2)") -> tuple[float, float]:
    """``(sy, sx)`` from a pair of positive numbers: Python or numpy numbers, 0-d arrays, or one-element
    tensors that do not require grad. ``allowed`` is what the caller accepts besides such a pair."""
    if not isinstance(sigma, (tuple, list)) or len(sigma) != 2:
        raise bad_value("sigma", sigma, allowed)
    out = []
    for v in sigma:
        if isinstance(v, torch.Tensor):
            if v.numel() != 1:
                raise bad_value("sigma", sigma, "a pair (sy, sx) of numbers")
            _check_sigma_no_grad(v)
            v = v.item()
        elif isinstance(v, np.ndarray) and v.ndim == 0:
            v = v.item()
        out.append(check_float("sigma", v, min_value=0.0, min_inclusive=False))
    return out[0], out[1]


def _gaussian_bank(
    kernel_size: Any, sigma: torch.Tensor, x: torch.Tensor
) -> tuple[tuple[int, int], torch.Tensor, torch.Tensor, bool]:
    """Per-batch or shared 1-D Gaussians ``(B or 1, ky)``, ``(B or 1, kx)`` from a ``(B or 1, 2)`` sigma and
    whether they vary by batch."""
    ky, kx = _pair("kernel_size", kernel_size)
    if sigma.dim() != 2 or sigma.shape[1] != 2 or sigma.shape[0] not in (1, x.shape[0]):
        raise bad_value("sigma", sigma, f"a pair (sy, sx) or a tensor (B, 2) with B = 1 or {x.shape[0]}")
    _check_sigma_tensor(sigma)
    pairs = [(float(s[0]), float(s[1])) for s in sigma.detach().cpu().double()]
    gy = torch.stack([gaussian_kernel1d(ky, sy) for sy, _ in pairs])
    gx = torch.stack([gaussian_kernel1d(kx, sx) for _, sx in pairs])
    return (ky, kx), gy, gx, len(pairs) > 1


@lru_cache(maxsize=64)
def _shared_gaussian_taps(
    ky: int, kx: int, sy: float, sx: float, channels: int, device: torch.device, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel 1-D Gaussians on ``device``, cached (read-only; never handed to the caller). Building
    them is a host-to-device copy that waits for the GPU, after which the launches' host time shows as
    idle GPU time: on the H200 a 5×5 blur of 8×3×2048×2048 took 1040 µs per call this way against 688 µs
    for the kernel alone."""
    # Made outside inference mode even when the first call runs under torch.inference_mode: an inference
    # tensor cannot be saved for backward, so a later call that needs gradients would fail on the cached taps.
    with torch.inference_mode(False):
        gy, gx = gaussian_kernel1d(ky, sy), gaussian_kernel1d(kx, sx)
        wy = gy.to(device=device, dtype=dtype).expand(channels, ky).contiguous()
        wx = gx.to(device=device, dtype=dtype).expand(channels, kx).contiguous()
    # The host values ride along (the long separable stencil takes them as kernel arguments).
    return mark_shared_taps(wy, gy), mark_shared_taps(wx, gx)


def gaussian_blur2d(
    input: torch.Tensor,
    kernel_size: tuple[int, int] | int,
    sigma: tuple[float, float] | torch.Tensor,
    border_type: str = "reflect",
    separable: bool = True,
    *,
    backend: Backend | None = None,
) -> torch.Tensor:
    """Gaussian blur, ``kornia.filters.gaussian_blur2d``'s signature and values.

    Args:
        input: ``(B, C, H, W)``; an integer or bool image is filtered in float32 (as kornia does).
        kernel_size: ``(ky, kx)`` or one int.
        sigma: ``(sy, sx)`` in pixels, or a tensor ``(B, 2)`` of per-image sigmas. Not differentiable: a
            sigma tensor that requires grad is refused.
        border_type: "reflect" (default), "constant", "replicate" or "circular", in any case.
        separable: column pass then row pass (True, default) or one 2-D stencil.
        backend: None (auto), "triton" or "torch".

    Returns:
        ``(B, C, H, W)`` in ``input``'s memory format.

    Raises:
        ParameterTypeError / ParameterValueError: a sigma that is not a pair of positive numbers or a
        ``(B, 2)`` tensor, a sigma that requires grad, bad sizes or border types.
    """
    x = _check_image(input)
    boundary = _kornia_border(border_type)
    b, c, h, w = x.shape
    if not isinstance(sigma, torch.Tensor):
        (ky, kx), (sy, sx) = _pair("kernel_size", kernel_size), _sigma_pair(sigma)
        gy, gx, per_batch = None, None, False
        xs, (wy, wx) = x, _shared_gaussian_taps(ky, kx, sy, sx, c, x.device, _wdtype(x))
    else:
        _, gy, gx, per_batch = _gaussian_bank(kernel_size, sigma, x)
    if per_batch:
        # Fold the batch into channels: each image gets its own kernel row.
        xs = x.reshape(1, b * c, h, w)
        wy = gy.repeat_interleave(c, 0).to(device=x.device, dtype=_wdtype(x))
        wx = gx.repeat_interleave(c, 0).to(device=x.device, dtype=_wdtype(x))
    elif gy is not None:
        xs, wy, wx = x, _per_channel(gy[0], c, x), _per_channel(gx[0], c, x)
    if separable:
        y = depthwise_conv2d(xs, (wy, wx), boundary=boundary, backend=backend)
    else:
        y = depthwise_conv2d(xs, wy[:, :, None] * wx[:, None, :], boundary=boundary, backend=backend)
    if not per_batch:
        return y
    y = y.reshape(b, c, *y.shape[2:])
    # Folding the batch into channels copied a channels_last input to NCHW: give the caller its format back.
    return y.contiguous(memory_format=torch.channels_last) if is_channels_last(x) else y


def _wdtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def box_blur(
    input: torch.Tensor,
    kernel_size: tuple[int, int] | int,
    border_type: str = "reflect",
    separable: bool = True,
    *,
    backend: Backend | None = None,
) -> torch.Tensor:
    """Normalised box blur, ``kornia.filters.box_blur``'s signature and values. Arguments as
    :func:`gaussian_blur2d`."""
    x = _check_image(input)
    boundary = _kornia_border(border_type)
    ky, kx = _pair("kernel_size", kernel_size)
    c = x.shape[1]
    if separable:
        # Built here, never returned: they may carry their host values (long filters take them as
        # kernel arguments, as the Gaussian's).
        ty = torch.full((ky,), 1.0 / ky, dtype=torch.float64)
        tx = torch.full((kx,), 1.0 / kx, dtype=torch.float64)
        wy, wx = mark_shared_taps(_per_channel(ty, c, x), ty), mark_shared_taps(_per_channel(tx, c, x), tx)
        return depthwise_conv2d(x, (wy, wx), boundary=boundary, backend=backend)
    return depthwise_conv2d(x, _per_channel(box_kernel((ky, kx)), c, x), boundary=boundary, backend=backend)


def sobel(
    input: torch.Tensor, normalized: bool = True, eps: float = 1e-6, *, backend: Backend | None = None
) -> torch.Tensor:
    """Sobel gradient magnitude ``sqrt(gx² + gy² + eps)``, ``kornia.filters.sobel``'s values (replicate
    border, kernels divided by 8 when ``normalized``).

    Args:
        input: ``(B, C, H, W)``.
        normalized: divide the kernels by their absolute sum. Default True.
        eps: added under the square root (keeps the gradient finite). Default 1e-6.
        backend: None (auto), "triton" or "torch".

    Returns:
        ``(B, C, H, W)``.
    """
    x = _check_image(input)
    eps = check_float("eps", eps, min_value=0.0)
    b, c, h, w = x.shape
    # Channel multiplier 2: both derivatives of every channel in one launch.
    k = sobel_kernels(normalized=bool(normalized)).to(device=x.device, dtype=_wdtype(x))
    g = depthwise_conv2d(x, k.repeat(c, 1, 1), boundary="replicate", backend=backend)
    g = g.reshape(b, c, 2, h, w)
    return torch.sqrt(g[:, :, 0] * g[:, :, 0] + g[:, :, 1] * g[:, :, 1] + eps)


def laplacian(
    input: torch.Tensor,
    kernel_size: tuple[int, int] | int,
    border_type: str = "reflect",
    normalized: bool = True,
    *,
    backend: Backend | None = None,
) -> torch.Tensor:
    """Laplacian filter, ``kornia.filters.laplacian``'s signature and values."""
    x = _check_image(input)
    boundary = _kornia_border(border_type)
    k = laplacian_kernel(kernel_size, normalized=bool(normalized))
    return depthwise_conv2d(x, _per_channel(k, x.shape[1], x), boundary=boundary, backend=backend)


def unsharp_mask(
    input: torch.Tensor,
    kernel_size: tuple[int, int] | int,
    sigma: tuple[float, float] | torch.Tensor,
    border_type: str = "reflect",
    *,
    backend: Backend | None = None,
) -> torch.Tensor:
    """Unsharp masking ``input + (input - gaussian_blur2d(input, ...))``, ``kornia.filters.unsharp_mask``'s
    values."""
    x = _check_image(input)
    blurred = gaussian_blur2d(x, kernel_size, sigma, border_type, backend=backend)
    return x + (x - blurred)


# ---------------------------------------------------------------------------------------------
# resampling


# torch's path applies torchaudio's full bank ``(new, 2·width + orig)`` through conv1d (torchaudio's values,
# bit for bit) up to this many taps: 8 MiB in float64, above every common audio pair (11025 → 16000, the
# largest, has 291k). Beyond it both backends use the compact bank (only each phase's window): for large
# coprime rates the full bank is mostly zeros, 44100 → 44101 would take 15.5 GB for 617k useful taps.
_FULL_BANK_MAX = 2**20
# The compact bank's taps (``new · J``) are limited to 128 MiB in float64: rates beyond (reduced coprime
# pairs above ~1.4 MHz, or a rolloff or lowpass_filter_width that widens the window as much) are refused.
_COMPACT_BANK_MAX = 2**24


def _compact_taps_estimate(orig: int, new: int, lowpass_filter_width: int, rolloff: float) -> float:
    """The columns :func:`compact_resample_bank` examines, ``new · (2·ceil(half) + 7)`` at most with ``half``
    the window's half-length in input samples: an upper bound on its taps ``new · J``, ``J <= 2·half + 1``.
    In float arithmetic that cannot overflow (an infinite estimate is refused)."""
    # J >= 2·orig·lowpass_filter_width / min(orig, new) >= 2·lowpass_filter_width and new·J >= 2·orig:
    # beyond the limit on integers alone, before any conversion to float (10**400 would overflow).
    if new > _COMPACT_BANK_MAX or orig > _COMPACT_BANK_MAX or lowpass_filter_width > _COMPACT_BANK_MAX:
        return math.inf
    half = lowpass_filter_width * orig / (min(orig, new) * rolloff)  # inf for a subnormal rolloff
    return new * (2.0 * half + 9.0)


def _check_bank_size(rates: tuple[int, int], lowpass_filter_width: int, rolloff: float) -> None:
    g = math.gcd(*rates)
    orig, new = rates[0] // g, rates[1] // g
    if orig == new:
        return
    estimate = _compact_taps_estimate(orig, new, lowpass_filter_width, rolloff)
    if estimate > _COMPACT_BANK_MAX:
        per_phase = estimate / new if math.isfinite(estimate) else math.inf
        raise bad_value(
            "(orig_freq, new_freq)",
            rates,
            f"rates whose polyphase bank fits in {_COMPACT_BANK_MAX} taps",
            context=(
                f"(reduced by their gcd to {orig} → {new}, with lowpass_filter_width={lowpass_filter_width} "
                f"and rolloff={rolloff:g} it would hold {new} phases × ~{per_phase:.3g} taps; pick rates "
                "with a larger common divisor, a smaller lowpass_filter_width or a larger rolloff)"
            ),
        )


def _polyphase(
    orig: int, new: int, lowpass_filter_width: int, rolloff: float, method: str, beta: float | None
) -> tuple[torch.Tensor | CompactBank, int, torch.Tensor, torch.Tensor]:
    """``(kernel, width, compact, offsets)`` for reduced rates: ``kernel`` is what the torch path applies
    (torchaudio's full bank ``(new, K)`` when it has at most ``_FULL_BANK_MAX`` taps, else the
    :class:`CompactBank`); ``compact`` ``(new, J)`` and ``offsets`` are the per-phase windows the Triton
    kernels read. Built directly in ``O(new · J)`` memory; :func:`_resample_args` has checked the size."""
    width = resample_width(orig, new, lowpass_filter_width, rolloff)
    if new * (2 * width + orig) <= _FULL_BANK_MAX:
        return _polyphase_small(orig, new, lowpass_filter_width, rolloff, method, beta)
    return _polyphase_large(orig, new, lowpass_filter_width, rolloff, method, beta)


def _build_polyphase(
    orig: int,
    new: int,
    lowpass_filter_width: int,
    rolloff: float,
    method: str,
    beta: float | None,
    *,
    full: bool,
) -> tuple[torch.Tensor | CompactBank, int, torch.Tensor, torch.Tensor]:
    # Cached: built outside inference mode (see _shared_gaussian_taps), so that a later call with gradients
    # can save the bank for backward.
    with torch.inference_mode(False):
        bank = compact_resample_bank(
            orig, new, lowpass_filter_width=lowpass_filter_width, rolloff=rolloff, method=method, beta=beta
        )
        kernel: torch.Tensor | CompactBank = bank
        if full:
            kernel, _ = sinc_resample_kernel(
                orig,
                new,
                lowpass_filter_width=lowpass_filter_width,
                rolloff=rolloff,
                method=method,
                beta=beta,
            )
    return kernel, bank.width, bank.taps, bank.offsets


# Two caches, so that what is kept stays bounded: 32 rate pairs of at most 8 MiB (the full bank's limit,
# plus its compact form), and the last two of the large compact banks (up to 128 MiB each).
@lru_cache(maxsize=32)
def _polyphase_small(
    orig: int, new: int, lowpass_filter_width: int, rolloff: float, method: str, beta: float | None
) -> tuple[torch.Tensor | CompactBank, int, torch.Tensor, torch.Tensor]:
    return _build_polyphase(orig, new, lowpass_filter_width, rolloff, method, beta, full=True)


@lru_cache(maxsize=2)
def _polyphase_large(
    orig: int, new: int, lowpass_filter_width: int, rolloff: float, method: str, beta: float | None
) -> tuple[torch.Tensor | CompactBank, int, torch.Tensor, torch.Tensor]:
    return _build_polyphase(orig, new, lowpass_filter_width, rolloff, method, beta, full=False)


@lru_cache(maxsize=64)
def _on_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A cached device copy of a cached host tensor (read-only): a per-call host-to-device copy waits for
    the GPU, and the launch's host time after it shows as idle GPU time (see _shared_gaussian_taps). Made
    outside inference mode, as the host tensor is."""
    with torch.inference_mode(False):
        return t.to(device)


# torch indexes the polyphase kernel's taps with int64 (sinc_resample_kernel's arange runs to ~orig).
_MAX_RATE = 2**63 - 1


def _resample_args(
    orig_freq: Any, new_freq: Any, lowpass_filter_width: Any, rolloff: Any, resampling_method: Any, beta: Any
) -> tuple[tuple[int, int], int, float, float | None]:
    """The checked ``((orig, new), lowpass_filter_width, rolloff, beta)`` of :func:`resample` (and of
    :class:`Resample`, which checks them when it is built)."""
    rates = []
    for name, v in (("orig_freq", orig_freq), ("new_freq", new_freq)):
        # An integer is one already (math.isfinite(10**400) would overflow converting it to float); other
        # numbers are checked finite first: int() of an infinity or a NaN raises OverflowError / ValueError.
        integral = isinstance(v, numbers.Integral) and not isinstance(v, bool)
        if not integral and (
            isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or int(v) != v
        ):
            raise bad_value(name, v, "a positive integer rate in Hz")
        rate = int(v)
        if rate <= 0:
            raise bad_value(name, v, "a positive integer rate in Hz")
        if rate > _MAX_RATE:
            raise bad_value(
                name, v, f"at most {_MAX_RATE} Hz", context="(the kernel's tap positions are int64)"
            )
        rates.append(rate)
    lowpass_filter_width = check_int("lowpass_filter_width", lowpass_filter_width, min_value=1)
    rolloff = check_float("rolloff", rolloff, min_value=0.0, max_value=1.0, min_inclusive=False)
    check_choice("resampling_method", resampling_method, ("sinc_interp_hann", "sinc_interp_kaiser"))
    if beta is not None:
        beta = check_float("beta", beta, min_value=0.0)
    _check_bank_size((rates[0], rates[1]), lowpass_filter_width, rolloff)
    return (rates[0], rates[1]), lowpass_filter_width, rolloff, beta


def resample(
    waveform: torch.Tensor,
    orig_freq: int,
    new_freq: int,
    lowpass_filter_width: int = 6,
    rolloff: float = 0.99,
    resampling_method: str = "sinc_interp_hann",
    beta: float | None = None,
    *,
    backend: Backend | None = None,
) -> torch.Tensor:
    """Band-limited sinc resampling, ``torchaudio.functional.resample``'s signature and values.

    One strided polyphase launch: output ``l·new + p`` is phase ``p``'s FIR over ``x[l·orig + offset_p ...]``
    (rates reduced by their gcd).

    Args:
        waveform: ``(..., L)`` floating.
        orig_freq, new_freq: integer sampling rates (Hz) > 0.
        lowpass_filter_width: zero crossings of the sinc on each side. Default 6.
        rolloff: cutoff as a fraction of the lower Nyquist rate, in (0, 1]. Default 0.99.
        resampling_method: "sinc_interp_hann" (default) or "sinc_interp_kaiser".
        beta: Kaiser β (default 14.769656459379492).
        backend: None (auto), "triton" or "torch".

    Returns:
        ``(..., ceil(new_freq · L / orig_freq))``; ``waveform`` itself when the rates are equal.

    Example:
        >>> y = resample(torch.randn(4, 44100), 44100, 16000)   # (4, 16000)
    """
    x = _check_input("waveform", waveform, 1)
    rates, lowpass_filter_width, rolloff, beta = _resample_args(
        orig_freq, new_freq, lowpass_filter_width, rolloff, resampling_method, beta
    )
    if rates[0] == rates[1]:
        return waveform
    g = math.gcd(*rates)
    orig, new = rates[0] // g, rates[1] // g
    kernel, width, compact, offsets = _polyphase(
        orig, new, lowpass_filter_width, rolloff, resampling_method, beta
    )
    lead, n = x.shape[:-1], x.shape[-1]
    x2 = x.reshape(-1, n)
    chosen = _RESAMPLE.backend(backend, device=x.device, dtype=x.dtype, numel=x.numel())
    if chosen == "triton":
        # The kernel layer caches its device form of the (cached, host) compact bank.
        extra = {"kernel": kernel, "compact": compact, "offsets": offsets}
    elif isinstance(kernel, CompactBank):
        extra = {"kernel": kernel.to(x.device)}  # the bank keeps its device copies
    else:
        extra = {"kernel": _on_device(kernel, x.device)}
    y = _RESAMPLE(x2, orig=orig, new=new, width=width, backend=chosen, **extra)
    return y.reshape(*lead, y.shape[-1])


# ---------------------------------------------------------------------------------------------
# modules


def _register_taps(module: nn.Module, name: str, value: torch.Tensor, trainable: bool) -> None:
    if trainable:
        module.register_parameter(name, nn.Parameter(value))
    else:
        module.register_buffer(name, value)


class DepthwiseConv1d(nn.Module):
    """:func:`depthwise_conv1d` with its taps as a buffer (or a parameter with ``trainable=True``)."""

    def __init__(
        self,
        weight: torch.Tensor,
        *,
        stride: int = 1,
        padding: str | int | tuple[int, int] = "same",
        boundary: str = "zeros",
        trainable: bool = False,
        backend: Backend | None = None,
    ) -> None:
        super().__init__()
        weight = check_tensor("weight", weight, dtypes=FLOATING_DTYPES, min_dim=2, max_dim=2)
        # Checked now, not at the first call (as every module here).
        check_int("stride", stride, min_value=1)
        _pads1d(padding, weight.shape[1])
        check_backend(backend)
        _register_taps(self, "weight", weight.detach().clone(), trainable)
        self.stride = stride
        self.padding = padding
        self.boundary = _check_boundary(boundary)
        self.backend = backend

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return depthwise_conv1d(
            x,
            self.weight,
            stride=self.stride,
            padding=self.padding,
            boundary=self.boundary,
            backend=self.backend,
        )


class DepthwiseConv2d(nn.Module):
    """:func:`depthwise_conv2d` with its taps (full ``weight`` or ``weight_y``/``weight_x``) as buffers."""

    def __init__(
        self,
        weight: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        *,
        stride: int | tuple[int, int] = 1,
        padding: str | int | tuple = "same",
        boundary: str = "zeros",
        trainable: bool = False,
        backend: Backend | None = None,
    ) -> None:
        super().__init__()
        # The functional's checks on the taps alone (the input's channels are not known yet), so a bad weight
        # fails here rather than as an IndexError or AttributeError.
        self.separable = isinstance(weight, (tuple, list))
        if self.separable:
            if len(weight) != 2:
                raise bad_value("weight", weight, "a tensor (C·M, kh, kw) or a pair (weight_y, weight_x)")
            wy = check_tensor("weight[0]", weight[0], dtypes=FLOATING_DTYPES, min_dim=2, max_dim=2)
            wx = check_tensor("weight[1]", weight[1], dtypes=FLOATING_DTYPES, min_dim=2, max_dim=2)
            if wy.shape[0] != wx.shape[0]:
                raise bad_value("weight[1]", wx, f"a tensor with {wy.shape[0]} rows like weight[0]")
            _register_taps(self, "weight_y", wy.detach().clone(), trainable)
            _register_taps(self, "weight_x", wx.detach().clone(), trainable)
        else:
            weight = check_tensor("weight", weight, dtypes=FLOATING_DTYPES, min_dim=3, max_dim=3)
            _register_taps(self, "weight", weight.detach().clone(), trainable)
        kh, kw = (wy.shape[1], wx.shape[1]) if self.separable else weight.shape[1:]
        _pair("stride", stride)
        _pads2d(padding, kh, kw)
        check_backend(backend)
        self.stride = stride
        self.padding = padding
        self.boundary = _check_boundary(boundary)
        self.backend = backend

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = (self.weight_y, self.weight_x) if self.separable else self.weight
        return depthwise_conv2d(
            x, w, stride=self.stride, padding=self.padding, boundary=self.boundary, backend=self.backend
        )


class FIRFilter(nn.Module):
    """:func:`fir_filter` with ``taps`` as a buffer."""

    def __init__(
        self,
        taps: torch.Tensor,
        *,
        boundary: str = "zeros",
        trainable: bool = False,
        backend: Backend | None = None,
    ) -> None:
        super().__init__()
        taps = check_tensor("taps", taps, dtypes=FLOATING_DTYPES, min_dim=1, max_dim=2)
        _register_taps(self, "taps", taps.detach().clone(), trainable)
        check_backend(backend)
        self.boundary, self.backend = _check_boundary(boundary), backend

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fir_filter(x, self.taps, boundary=self.boundary, backend=self.backend)


class FilterBank(nn.Module):
    """:func:`filter_bank` with ``bank`` as a buffer."""

    def __init__(
        self,
        bank: torch.Tensor,
        *,
        stride: int = 1,
        boundary: str = "zeros",
        trainable: bool = False,
        backend: Backend | None = None,
    ) -> None:
        super().__init__()
        bank = check_tensor("bank", bank, dtypes=FLOATING_DTYPES, min_dim=2, max_dim=2)
        _register_taps(self, "bank", bank.detach().clone(), trainable)
        self.stride = check_int("stride", stride, min_value=1)
        check_backend(backend)
        self.boundary, self.backend = _check_boundary(boundary), backend

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return filter_bank(x, self.bank, stride=self.stride, boundary=self.boundary, backend=self.backend)


class GaussianBlur2d(nn.Module):
    """:func:`gaussian_blur2d` as a module (kornia's ``GaussianBlur2d`` arguments).

    Input ``(B, C, H, W)``, output ``(B, C, H, W)``. Bufferless, as kornia's: the taps are built per call
    in the input's dtype (and cached, as the function's are), so ``.half()`` / ``.float()`` leave them exact,
    the ``state_dict`` is empty and a kornia one (empty too) loads strictly. Float64 tap buffers were rounded
    by a module's dtype moves: ~2e-4 off kornia after ``.half().float()``, and float32 taps for float64 input
    after ``.float()``. The arguments are checked here, not at the first call."""

    def __init__(
        self,
        kernel_size: tuple[int, int] | int,
        sigma: tuple[float, float] | torch.Tensor,
        border_type: str = "reflect",
        separable: bool = True,
        *,
        backend: Backend | None = None,
    ) -> None:
        super().__init__()
        allowed = "a pair (sy, sx) or a tensor (2,) or (1, 2)"
        if isinstance(sigma, torch.Tensor):
            # kornia's module takes a tensor sigma. One pair serves every image: a per-image (B, 2) sigma is
            # gaussian_blur2d's.
            if sigma.shape not in ((2,), (1, 2)):
                raise bad_value("sigma", sigma, allowed, context="(per-image sigmas: use gaussian_blur2d)")
            _check_sigma_no_grad(sigma)
            sigma = tuple(sigma.reshape(2))
        # Checked now, not at the first call, by the validators gaussian_blur2d applies (gaussian_kernel1d,
        # which built the former tap buffers here, refused the same sizes and sigmas).
        self.kernel_size = _pair("kernel_size", kernel_size)
        self.sigma = _sigma_pair(sigma, allowed)
        _kornia_border(border_type)
        check_backend(backend)
        self.border_type = border_type
        self.separable = separable
        self.backend = backend

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return gaussian_blur2d(
            input, self.kernel_size, self.sigma, self.border_type, self.separable, backend=self.backend
        )


class BoxBlur(nn.Module):
    """:func:`box_blur` as a module."""

    def __init__(
        self,
        kernel_size: tuple[int, int] | int,
        border_type: str = "reflect",
        separable: bool = True,
        *,
        backend: Backend | None = None,
    ) -> None:
        super().__init__()
        # Checked now, not at the first call.
        _pair("kernel_size", kernel_size)
        _kornia_border(border_type)
        check_backend(backend)
        self.kernel_size = kernel_size
        self.border_type = border_type
        self.separable = separable
        self.backend = backend

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return box_blur(input, self.kernel_size, self.border_type, self.separable, backend=self.backend)


class Sobel(nn.Module):
    """:func:`sobel` as a module."""

    def __init__(self, normalized: bool = True, eps: float = 1e-6, *, backend: Backend | None = None) -> None:
        super().__init__()
        check_float("eps", eps, min_value=0.0)  # checked now, not at the first call
        check_backend(backend)
        self.normalized, self.eps, self.backend = normalized, eps, backend

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return sobel(input, self.normalized, self.eps, backend=self.backend)


class Laplacian(nn.Module):
    """:func:`laplacian` as a module."""

    def __init__(
        self,
        kernel_size: tuple[int, int] | int,
        border_type: str = "reflect",
        normalized: bool = True,
        *,
        backend: Backend | None = None,
    ) -> None:
        super().__init__()
        # Checked now, not at the first call.
        laplacian_kernel(kernel_size)
        _kornia_border(border_type)
        check_backend(backend)
        self.kernel_size = kernel_size
        self.border_type = border_type
        self.normalized = normalized
        self.backend = backend

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return laplacian(input, self.kernel_size, self.border_type, self.normalized, backend=self.backend)


class UnsharpMask(nn.Module):
    """:func:`unsharp_mask` as a module."""

    def __init__(
        self,
        kernel_size: tuple[int, int] | int,
        sigma: tuple[float, float] | torch.Tensor,
        border_type: str = "reflect",
        *,
        backend: Backend | None = None,
    ) -> None:
        super().__init__()
        # Checked now, not at the first call; a (B, 2) sigma's B is checked against the input's then.
        _pair("kernel_size", kernel_size)
        if isinstance(sigma, torch.Tensor):
            if sigma.dim() != 2 or sigma.shape[1] != 2:
                raise bad_value("sigma", sigma, "a pair (sy, sx) or a tensor (B, 2)")
            _check_sigma_tensor(sigma)
        else:
            _sigma_pair(sigma)
        _kornia_border(border_type)
        check_backend(backend)
        self.kernel_size = kernel_size
        self.sigma = sigma
        self.border_type = border_type
        self.backend = backend

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return unsharp_mask(input, self.kernel_size, self.sigma, self.border_type, backend=self.backend)


def _check_torchaudio_kernel(
    name: str,
    kernel: Any,
    rates: tuple[int, int],
    lowpass_filter_width: int,
    rolloff: float,
    method: str,
    beta: float | None,
) -> None:
    """Refuse a torchaudio ``Resample`` kernel ``(new, 1, 2·width + orig)`` (rates reduced by their gcd)
    that is not the bank these arguments build, within its dtype's rounding.

    Compared with the cached compact bank (torchaudio's float64 taps inside each phase's window) and,
    outside the windows, with zero (torchaudio's values there are the window's end, < 1e-15): no full bank
    is built, so a checkpoint of a large coprime pair (GB-sized) is checked in the memory it already holds.
    """
    g = math.gcd(*rates)
    orig, new = rates[0] // g, rates[1] // g
    _, width, compact, offsets = _polyphase(orig, new, lowpass_filter_width, rolloff, method, beta)
    shape = (new, 1, 2 * width + orig)
    args = (
        f"Resample({rates[0]}, {rates[1]}, {method!r}, lowpass_filter_width={lowpass_filter_width}, "
        f"rolloff={rolloff:g}, beta={beta})"
    )
    why = (
        "(nbxsig builds its polyphase bank from the constructor arguments and cannot apply a different "
        "kernel: build the module with the checkpoint's arguments)"
    )
    kernel = check_tensor(name, kernel, dtypes=FLOATING_DTYPES)
    if tuple(kernel.shape) != shape:
        raise bad_value(name, kernel, f"torchaudio's kernel of shape {shape} for {args}", context=why)
    # torchaudio rounds each tap's position to the kernel's dtype (float32 when it is not given) before
    # scaling it by base = min(orig, new)·rolloff: its taps are off the float64 ones by up to ~base ulps.
    tol = 4 * torch.finfo(kernel.dtype).eps * max(1.0, min(orig, new) * rolloff)
    taps = kernel.detach()[:, 0]
    cols = (offsets.long() + width)[:, None] + torch.arange(compact.shape[1])
    cols = cols.to(taps.device)
    inside = cols < shape[2]
    cols = cols.clamp(max=shape[2] - 1)  # only the last columns of a window, past the bank: zero taps
    gathered = torch.where(inside, taps.gather(1, cols), 0.0)
    off = (gathered.double() - compact.to(taps.device)).abs().max()
    outside = torch.linalg.vector_norm(taps.scatter(1, cols, 0.0), ord=math.inf)
    # Written so that a NaN compares as a mismatch.
    if not (off <= tol and outside <= tol):
        raise bad_value(
            name,
            kernel,
            f"torchaudio's kernel for {args}, within {tol:.2g} of its values",
            context=f"{why}; it is {max(off.item(), outside.item()):.3g} off them",
        )


class Resample(nn.Module):
    """:func:`resample` as a module (torchaudio's ``transforms.Resample`` arguments); the polyphase bank is
    cached per rate pair. Input ``(..., L)``, output ``(..., ceil(new_freq · L / orig_freq))``.

    ``dtype`` is torchaudio's keyword (the dtype its kernel is built in, which the input must then have):
    accepted and checked so that its calls run unchanged, but it changes nothing here -- the bank is built
    in float64 and applied in the waveform's own dtype (float32 for float16/bfloat16), whatever it is.

    No buffers: torchaudio's module holds its bank as a persistent buffer ``kernel`` (GB-sized for large
    coprime rates, where this one keeps a compact bank of a few MB in a shared cache). A torchaudio
    ``state_dict`` loads strictly: its ``kernel`` is checked against the bank built from this module's
    arguments (a ``ParameterValueError`` if it differs beyond its dtype's rounding) and dropped. The reverse
    does not hold: this module's ``state_dict`` is empty, so loading it strictly into torchaudio's module
    reports ``kernel`` missing (``strict=False`` there keeps the kernel torchaudio built)."""

    def __init__(
        self,
        orig_freq: int = 16000,
        new_freq: int = 16000,
        resampling_method: str = "sinc_interp_hann",
        lowpass_filter_width: int = 6,
        rolloff: float = 0.99,
        beta: float | None = None,
        *,
        dtype: torch.dtype | None = None,
        backend: Backend | None = None,
    ) -> None:
        super().__init__()
        _resample_args(
            orig_freq, new_freq, lowpass_filter_width, rolloff, resampling_method, beta
        )  # checked now
        # torchaudio.transforms.Resample(..., dtype=torch.float64) raised a TypeError here.
        if dtype is not None and dtype not in FLOATING_DTYPES:
            raise bad_type("dtype", dtype, "None or a floating torch dtype")
        check_backend(backend)
        self.orig_freq = orig_freq
        self.new_freq = new_freq
        self.resampling_method = resampling_method
        self.lowpass_filter_width = lowpass_filter_width
        self.rolloff = rolloff
        self.beta = beta
        self.backend = backend

    def _arguments(self) -> tuple:
        """The resampling arguments in :func:`resample`'s (and ``_resample_args``') positional order."""
        return (
            self.orig_freq,
            self.new_freq,
            self.lowpass_filter_width,
            self.rolloff,
            self.resampling_method,
            self.beta,
        )

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: Any, **kwargs: Any) -> None:
        # torch's documented place for class-specific loading (state_dict is a copy here, free to edit).
        rates, lowpass_filter_width, rolloff, beta = _resample_args(*self._arguments())
        # torchaudio holds no kernel for equal rates: one there is left to torch's unexpected-key report.
        if prefix + "kernel" in state_dict and rates[0] != rates[1]:
            kernel = state_dict.pop(prefix + "kernel")
            _check_torchaudio_kernel(
                prefix + "kernel", kernel, rates, lowpass_filter_width, rolloff, self.resampling_method, beta
            )
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def forward(self, waveform: torch.Tensor) -> torch.Tensor:
        return resample(waveform, *self._arguments(), backend=self.backend)
