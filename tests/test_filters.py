"""Depthwise convolutions, FIR filters, filter banks and the kornia-compatible 2-D ops.

Oracles: numpy (np.pad + sliding windows), scipy.ndimage.correlate/correlate1d for every boundary,
scipy.signal.lfilter, kornia.filters; every kernel against the float64 torch reference.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.ndimage as ndi
import scipy.signal as ss
import torch
from _marks import suite_dependency

import nbxsig.filters as nf
from nbxsig.errors import BackendUnavailableError, ParameterTypeError, ParameterValueError
from nbxsig.testing import assert_close, random_tensor

BOUNDARIES = list(nf.BOUNDARIES)
NP_MODE = {
    "zeros": "constant",
    "reflect": "reflect",
    "symmetric": "symmetric",
    "replicate": "edge",
    "circular": "wrap",
}
NDI_MODE = {
    "zeros": "constant",
    "reflect": "mirror",
    "symmetric": "reflect",
    "replicate": "nearest",
    "circular": "grid-wrap",
}
BACKENDS = ["torch", "triton"]


def _np_conv1d(x: np.ndarray, w: np.ndarray, stride: int, pads: tuple[int, int], boundary: str) -> np.ndarray:
    """Independent oracle: extend with np.pad, correlate with sliding windows, decimate."""
    c, m = x.shape[-2], w.shape[0] // x.shape[-2]
    xp = np.pad(x, [(0, 0)] * (x.ndim - 1) + [pads], mode=NP_MODE[boundary])
    win = np.lib.stride_tricks.sliding_window_view(xp, w.shape[1], axis=-1)[..., ::stride, :]
    win = np.repeat(win, m, axis=-3)  # channel c serves outputs c·M .. c·M+M-1
    assert win.shape[-3] == c * m
    return np.einsum("...olk,ok->...ol", win, w)


def _dtype_tol(dtype):
    return {torch.float32: {}, torch.float16: {"atol": 4e-3}, torch.bfloat16: {"atol": 2e-2}}[dtype]


# ---------------------------------------------------------------------------------------------
# 1-D


@pytest.mark.parametrize("boundary", BOUNDARIES)
@pytest.mark.parametrize(
    ("padding", "stride", "k"),
    [("same", 1, 5), ("same", 3, 4), ("valid", 2, 7), ("full", 1, 6), (9, 2, 3), ((7, 0), 1, 8)],
    ids=lambda v: str(v).replace(" ", ""),
)
def test_conv1d_torch_float64_is_numpy(boundary, padding, stride, k, generator):
    x = random_tensor((2, 3, 29), generator=generator, dtype=torch.float64)
    w = random_tensor((6, k), generator=generator, dtype=torch.float64)
    y = nf.depthwise_conv1d(x, w, stride=stride, padding=padding, boundary=boundary, backend="torch")
    pads = nf._pads1d(padding, k)
    ref = _np_conv1d(x.numpy(), w.numpy(), stride, pads, boundary)
    assert_close(y, torch.from_numpy(ref))


@pytest.mark.parametrize("boundary", BOUNDARIES)
@pytest.mark.parametrize("k", [3, 6])
def test_conv1d_same_is_ndimage_correlate1d(boundary, k, generator):
    x = random_tensor((4, 31), generator=generator, dtype=torch.float64)
    w = random_tensor((k,), generator=generator, dtype=torch.float64)
    y = nf.depthwise_conv1d(x, w.expand(4, k), boundary=boundary, backend="torch")
    # ndimage centres the kernel at k//2 + origin; "same" centres it at (k-1)//2.
    ref = ndi.correlate1d(
        x.numpy(), w.numpy(), axis=-1, mode=NDI_MODE[boundary], origin=(k - 1) // 2 - k // 2
    )
    assert_close(y, torch.from_numpy(ref))


@pytest.mark.parametrize("boundary", BOUNDARIES)
@pytest.mark.parametrize(
    ("padding", "stride", "k", "m"),
    [("same", 1, 5, 1), ("same", 2, 4, 3), ("valid", 3, 7, 2), ("full", 1, 40, 1), (50, 1, 3, 1)],
    ids=lambda v: str(v),
)
def test_conv1d_triton_is_reference(boundary, padding, stride, k, m, generator, device):
    x = random_tensor((2, 3, 45), generator=generator, dtype=torch.float64)
    w = random_tensor((3 * m, k), generator=generator, dtype=torch.float64)
    ref = nf.depthwise_conv1d(x, w, stride=stride, padding=padding, boundary=boundary, backend="torch")
    y = nf.depthwise_conv1d(
        x.float().to(device),
        w.float().to(device),
        stride=stride,
        padding=padding,
        boundary=boundary,
        backend="triton",
    )
    assert_close(y, ref, dtype=torch.float32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
def test_conv1d_triton_low_precision_accumulates_in_float32(dtype, generator, device):
    x = random_tensor((3, 2, 300), generator=generator).to(dtype)
    w = random_tensor((2, 129), generator=generator) / 10
    ref = nf.depthwise_conv1d(x.double(), w.double(), backend="torch")
    y = nf.depthwise_conv1d(x.to(device), w.to(device), backend="triton")
    assert y.dtype == dtype
    # The error is the output's rounding, not 129 roundings: float32 accumulation of exact products.
    assert_close(y, ref, dtype=dtype, **_dtype_tol(dtype))


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_long_fir_and_bank_tensor_core_paths_are_reference(boundary, generator, device):
    # >= 48 taps: the Toeplitz-product kernel (per-channel taps) and the bank kernel (>= 16 filters/channel).
    x = random_tensor((2, 3, 200), generator=generator, dtype=torch.float64)
    w = random_tensor((3, 60), generator=generator, dtype=torch.float64)
    ref = nf.depthwise_conv1d(x, w, boundary=boundary, backend="torch")
    assert_close(
        nf.depthwise_conv1d(x.float().to(device), w.float().to(device), boundary=boundary, backend="triton"),
        ref,
        dtype=torch.float32,
    )
    s = x[:, 0]
    bank = random_tensor((20, 50), generator=generator, dtype=torch.float64)
    ref = nf.filter_bank(s, bank, stride=3, boundary=boundary, backend="torch")
    y = nf.filter_bank(
        s.float().to(device), bank.float().to(device), stride=3, boundary=boundary, backend="triton"
    )
    assert_close(y, ref, dtype=torch.float32)


def test_conv1d_leading_dims_and_noncontiguous(generator, device):
    base = random_tensor((2, 5, 3, 80), generator=generator, dtype=torch.float32).to(device)
    x = base[:, ::2, :, 3:70:1].transpose(0, 1)  # (3, 2, 3, 67), non-contiguous
    w = random_tensor((6, 9), generator=generator).to(device)
    y = nf.depthwise_conv1d(x, w, stride=2, boundary="reflect", backend="triton")
    ref = nf.depthwise_conv1d(
        x.double().contiguous(), w.double(), stride=2, boundary="reflect", backend="torch"
    )
    assert y.shape == (3, 2, 6, 34)
    assert_close(y, ref, dtype=torch.float32)


def test_channel_multiplier_is_separate_convs(generator):
    x = random_tensor((2, 3, 40), generator=generator, dtype=torch.float64)
    w = random_tensor((12, 5), generator=generator, dtype=torch.float64)
    y = nf.depthwise_conv1d(x, w, backend="torch")
    for o in range(12):
        single = nf.depthwise_conv1d(x[:, o // 4 : o // 4 + 1], w[o : o + 1], backend="torch")
        assert_close(y[:, o], single[:, 0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_fir_filter_is_lfilter(backend, generator, device):
    x = random_tensor((2, 3, 150), generator=generator, dtype=torch.float64)
    taps = nf.lowpass_taps(1000.0, fs=8000.0, numtaps=31)
    per_channel = random_tensor((3, 17), generator=generator, dtype=torch.float64)
    dtype = torch.float64 if backend == "torch" else torch.float32
    dev = device if backend == "triton" else "cpu"
    y1 = nf.fir_filter(x.to(dev, dtype), taps.to(dev, dtype), backend=backend)
    assert_close(y1, torch.from_numpy(ss.lfilter(taps.numpy(), [1.0], x.numpy(), axis=-1)), dtype=dtype)
    y2 = nf.fir_filter(x.to(dev, dtype), per_channel.to(dev, dtype), backend=backend)
    ref2 = np.stack(
        [ss.lfilter(per_channel[c].numpy(), [1.0], x[:, c].numpy(), axis=-1) for c in range(3)], 1
    )
    assert_close(y2, torch.from_numpy(ref2), dtype=dtype)


@pytest.mark.parametrize("backend", BACKENDS)
def test_filter_bank_is_lfilter_per_filter_then_decimated(backend, generator, device):
    x = random_tensor((2, 130), generator=generator, dtype=torch.float64)
    bank = nf.gammatone_bank(nf.erb_space(200.0, 3000.0, 5), fs=8000.0, numtaps=24)
    dtype = torch.float64 if backend == "torch" else torch.float32
    dev = device if backend == "triton" else "cpu"
    y = nf.filter_bank(x.to(dev, dtype), bank.to(dev, dtype), stride=3, backend=backend)
    assert y.shape == (2, 5, 44)
    ref = np.stack([ss.lfilter(b, [1.0], x.numpy(), axis=-1)[:, ::3] for b in bank.numpy()], 1)
    assert_close(y, torch.from_numpy(ref), dtype=dtype)


def test_fir_filter_with_boundary_extends_the_past(generator):
    x = random_tensor((40,), generator=generator, dtype=torch.float64)
    taps = random_tensor((5,), generator=generator, dtype=torch.float64)
    y = nf.fir_filter(x, taps, boundary="replicate", backend="torch")
    xe = np.concatenate([np.full(4, x[0].item()), x.numpy()])
    assert_close(y, torch.from_numpy(np.convolve(xe, taps.numpy(), mode="valid")))


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_padding_beside_an_infinite_edge_reads_zeros(backend, generator, device):
    # The torch path gathered the padding from the edge sample it clamps to and multiplied it by 0: an edge
    # at -inf (log(0) at the start of a log-energy) or NaN made the padding NaN, so outputs that lfilter and
    # F.conv2d give as -inf (or 0, reading padding only) came out NaN.
    dtype = torch.float64 if backend == "torch" else torch.float32
    x = random_tensor((2, 30), generator=generator, dtype=torch.float64, low=0.5, high=1.5)
    x[:, 0] = -torch.inf
    taps = random_tensor((5,), generator=generator, dtype=torch.float64, low=0.5, high=1.5)
    y = nf.fir_filter(x.to(device, dtype), taps.to(device, dtype), backend=backend)
    ref = torch.from_numpy(ss.lfilter(taps.numpy(), [1.0], x.numpy(), axis=-1))
    assert bool(ref[:, :5].isneginf().all())
    assert_close(y, ref, dtype=dtype)

    img = random_tensor((1, 2, 6, 7), generator=generator, dtype=torch.float64, low=0.5, high=1.5)
    img[0, 0, 0, 0], img[0, 1, -1, -1] = -torch.inf, torch.nan
    w = random_tensor((2, 3, 3), generator=generator, dtype=torch.float64, low=0.5, high=1.5)
    y = nf.depthwise_conv2d(img.to(device, dtype), w.to(device, dtype), padding=3, backend=backend)
    ref = torch.nn.functional.conv2d(img, w[:, None], padding=3, groups=2)  # the corners read padding only
    assert_close(y, ref, dtype=dtype)


@pytest.mark.parametrize("ksize", [(9, 9), (3, 31)], ids=["9x9", "3x31"])
def test_triton_stencil_keeps_an_infinite_pixel_within_its_reach(ksize, generator, device):
    # A NaN/inf hole in an image (a no-data mask) must reach only the outputs whose window holds it, as
    # F.conv2d's do.
    img = random_tensor((1, 1, 24, 64), generator=generator, dtype=torch.float64, low=0.5, high=1.5)
    img[0, 0, 12, 30] = torch.inf
    w = random_tensor((1, *ksize), generator=generator, dtype=torch.float64, low=0.5, high=1.5)
    y = nf.depthwise_conv2d(img.float().to(device), w.float().to(device), padding="same", backend="triton")
    ref = torch.nn.functional.conv2d(img, w[:, None], padding=(ksize[0] // 2, ksize[1] // 2))
    assert_close(y, ref, dtype=torch.float32)


@pytest.mark.parametrize("ksize", [(7, 7), (8, 3)], ids=["7x7", "8x3"])
def test_triton_separable_band_keeps_an_infinite_pixel_within_its_reach(ksize, generator, device):
    # channels_last takes the looped fused band (_sep_band), whose rows outside a tap's reach once got a
    # zero weight: 0 * inf spread NaN down the column.
    img = random_tensor((1, 2, 24, 40), generator=generator, dtype=torch.float64, low=0.5, high=1.5)
    img[0, 0, 12, 20], img[0, 1, 3, 5] = torch.inf, -torch.inf
    wy = random_tensor((2, ksize[0]), generator=generator, dtype=torch.float64, low=0.5, high=1.5)
    wx = random_tensor((2, ksize[1]), generator=generator, dtype=torch.float64, low=0.5, high=1.5)
    x = img.float().to(device).to(memory_format=torch.channels_last)
    y = nf.depthwise_conv2d(x, (wy.float().to(device), wx.float().to(device)), padding=3, backend="triton")
    ref = torch.nn.functional.conv2d(img, (wy[:, :, None] * wx[:, None, :])[:, None], padding=3, groups=2)
    assert_close(y, ref, dtype=torch.float32)


def _long_fir_non_finite(boundary, generator, device):
    """``_fir_toeplitz_kernel`` (per-channel filters of >= 48 taps) on a batched, strided signal holding
    inf, -inf and NaN samples in different rows, against the float64 torch backend (and F.conv1d)."""
    base = random_tensor((2, 3, 2 * 157), generator=generator, dtype=torch.float64)
    x = base[..., ::2]  # (2, 3, 157), sample stride 2
    x[0, 1, 80], x[1, 0, 3], x[1, 2, 150] = torch.inf, -torch.inf, torch.nan
    w = random_tensor((3, 65), generator=generator, dtype=torch.float64)
    ref = nf.depthwise_conv1d(x, w, boundary=boundary, backend="torch")
    if boundary == "zeros":
        assert_close(ref, torch.nn.functional.conv1d(x, w[:, None], padding=32, groups=3))
    xt = base.float().to(device)[..., ::2]
    y = nf.depthwise_conv1d(xt, w.float().to(device), boundary=boundary, backend="triton")
    assert_close(y, ref, dtype=torch.float32)


def _filter_bank_non_finite(generator, device):
    """``_bank_kernel`` (>= 16 filters of >= 48 taps on one channel), strided, on signals holding inf,
    -inf and NaN samples, against the float64 torch backend."""
    base = random_tensor((131, 3), generator=generator, dtype=torch.float64)
    s = base.t()  # (3, 131), sample stride 3
    s[0, 60], s[1, 10], s[2, 100] = torch.inf, -torch.inf, torch.nan
    bank = random_tensor((20, 50), generator=generator, dtype=torch.float64)
    ref = nf.filter_bank(s, bank, stride=3, boundary="symmetric", backend="torch")
    st = base.float().to(device).t()
    y = nf.filter_bank(st, bank.float().to(device), stride=3, boundary="symmetric", backend="triton")
    assert_close(y, ref, dtype=torch.float32)


def _separable_dot_non_finite(boundary, configs, generator, device):
    """``_sep_dot_kernel`` at each tile of ``configs`` on a batched, strided image holding inf, -inf and
    NaN pixels in different images and channels, against the float64 torch backend (and F.conv2d)."""
    from nbxsig.kernels import depthwise as dk

    base = random_tensor((2, 2, 23, 41), generator=generator, dtype=torch.float64)
    x = base[:, :, 1:, 3:40:2]  # (2, 2, 22, 19), column stride 2
    x[0, 0, 10, 9], x[1, 1, 3, 2], x[0, 1, 18, 15] = torch.inf, -torch.inf, torch.nan
    wy = random_tensor((2, 9), generator=generator, dtype=torch.float64)
    wx = random_tensor((2, 6), generator=generator, dtype=torch.float64)
    pads = (4, 4, 2, 3)
    ref = nf.depthwise_conv2d(x, (wy, wx), padding=pads, boundary=boundary, backend="torch")
    if boundary == "zeros":
        full = (wy[:, :, None] * wx[:, None, :])[:, None]
        xp = torch.nn.functional.pad(x, (pads[2], pads[3], pads[0], pads[1]))
        assert_close(ref, torch.nn.functional.conv2d(xp, full, groups=2))
    xt = base.float().to(device)[:, :, 1:, 3:40:2]
    for config in configs:
        y = dk._separable_dot(
            xt, wy.float().to(device), wx.float().to(device), pads=pads, boundary=boundary, config=config
        )
        assert_close(y, ref, dtype=torch.float32, msg=f"tile {config}")


# The tensor-core kernels compute outputs as matrix products: the Toeplitz zeros of their tiles made NaN
# (0·inf) of a non-finite sample in outputs beyond the filter's reach. A tile holding a non-finite output is
# now summed again tap by tap (the long FIR's since the twenty-second round: its check follows the store).
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the interpreter's 0·inf
@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_long_fir_keeps_a_non_finite_sample_within_its_reach(boundary, generator, device):
    _long_fir_non_finite(boundary, generator, device)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the interpreter's 0·inf
def test_long_fir_input_gradient_keeps_a_non_finite_gradient_within_its_reach(generator, device):
    # The input gradient of a stride-1 long FIR is the Toeplitz kernel on the output gradient.
    x = random_tensor((2, 2, 141), generator=generator, dtype=torch.float64)
    w = random_tensor((2, 65), generator=generator, dtype=torch.float64)
    g = random_tensor((2, 2, 141), generator=generator, dtype=torch.float64)
    g[0, 1, 70], g[1, 0, 5] = torch.inf, torch.nan
    xt = x.float().to(device).requires_grad_()
    (gx,) = torch.autograd.grad(nf.depthwise_conv1d(xt, w.float().to(device), backend="triton"), xt, g.to(xt))
    assert_close(
        gx, torch.nn.functional.conv_transpose1d(g, w[:, None], padding=32, groups=2), dtype=torch.float32
    )


def test_long_fir_tile_whose_sum_overflows_is_summed_again_to_the_same_values(generator, device):
    # The non-finite check is a tile sum: finite outputs near 6e37 sum to inf over a 64×64 tile, so every
    # tile takes the tap-by-tap recompute, which must give the same outputs (edges and boundary included).
    x = 1e36 * (1 + random_tensor((2, 3, 301), generator=generator, dtype=torch.float64).abs())
    w = random_tensor((3, 65), generator=generator, dtype=torch.float64).abs()
    ref = nf.depthwise_conv1d(x, w, boundary="reflect", backend="torch")
    assert torch.isfinite(ref).all() and ref.float().sum().isinf()
    y = nf.depthwise_conv1d(x.float().to(device), w.float().to(device), boundary="reflect", backend="triton")
    assert_close(y, ref, dtype=torch.float32)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the interpreter's 0·inf
def test_filter_bank_keeps_a_non_finite_sample_within_its_reach(generator, device):
    # No structural zeros in the bank's im2col product: under the interpreter (float32 dots, no tf32x3
    # split) this held before the recompute too; on the GPU it checks the in-reach ±inf through tf32x3.
    _filter_bank_non_finite(generator, device)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the interpreter's 0·inf
@pytest.mark.parametrize("boundary", ["zeros", "circular"])
def test_separable_tensor_core_kernel_keeps_a_non_finite_pixel_within_its_reach(boundary, generator, device):
    # 16×16 tiles: several per image, the halo in several chunks; a 16×32 tile, one column chunk.
    _separable_dot_non_finite(boundary, [(16, 16, 16, 16, 4), (16, 32, 64, 16, 4)], generator, device)


# ---------------------------------------------------------------------------------------------
# 2-D


@pytest.mark.parametrize("boundary", BOUNDARIES)
@pytest.mark.parametrize("ksize", [(3, 3), (4, 5)], ids=lambda k: f"{k[0]}x{k[1]}")
def test_conv2d_same_is_ndimage_correlate(boundary, ksize, generator):
    x = random_tensor((2, 13, 11), generator=generator, dtype=torch.float64)
    w = random_tensor(ksize, generator=generator, dtype=torch.float64)
    y = nf.depthwise_conv2d(x[None], w.expand(2, *ksize), boundary=boundary, backend="torch")[0]
    origin = [(k - 1) // 2 - k // 2 for k in ksize]
    for c in range(2):
        ref = ndi.correlate(x[c].numpy(), w.numpy(), mode=NDI_MODE[boundary], origin=origin)
        assert_close(y[c], torch.from_numpy(ref))


@pytest.mark.parametrize("boundary", BOUNDARIES)
@pytest.mark.parametrize(
    ("stride", "padding", "m", "layout"),
    [(1, "same", 1, "nchw"), ((2, 1), "valid", 2, "channels_last"), ((1, 3), (2, 1), 1, "strided")],
    ids=lambda v: str(v).replace(" ", ""),
)
def test_conv2d_triton_is_reference(boundary, layout, stride, padding, m, generator, device):
    x = random_tensor((1, 3, 9, 19), generator=generator, dtype=torch.float64)
    w = random_tensor((3 * m, 3, 5), generator=generator, dtype=torch.float64)
    ref = nf.depthwise_conv2d(x, w, stride=stride, padding=padding, boundary=boundary, backend="torch")
    xt = x.float().to(device)
    if layout == "channels_last":
        xt = xt.to(memory_format=torch.channels_last)
    elif layout == "strided":
        xt = torch.cat([xt, xt], 3)[..., :19]  # row stride 38: a view that is not contiguous
    y = nf.depthwise_conv2d(
        xt, w.float().to(device), stride=stride, padding=padding, boundary=boundary, backend="triton"
    )
    assert_close(y, ref, dtype=torch.float32)
    if layout == "channels_last":
        assert y.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("boundary", ["zeros", "reflect", "circular"])
def test_separable_is_full_kernel(backend, boundary, generator, device):
    x = random_tensor((1, 2, 9, 18), generator=generator, dtype=torch.float64)
    wy = random_tensor((4, 5), generator=generator, dtype=torch.float64)
    wx = random_tensor((4, 3), generator=generator, dtype=torch.float64)
    full = nf.depthwise_conv2d(
        x, wy[:, :, None] * wx[:, None, :], stride=2, boundary=boundary, backend="torch"
    )
    dtype = torch.float64 if backend == "torch" else torch.float32
    dev = device if backend == "triton" else "cpu"
    sep = nf.depthwise_conv2d(
        x.to(dev, dtype), (wy.to(dev, dtype), wx.to(dev, dtype)), stride=2, boundary=boundary, backend=backend
    )
    assert_close(sep, full, dtype=dtype)


@pytest.mark.parametrize(
    ("layout", "boundary", "budget_planes"),
    [("nchw", "reflect", 1), ("channels_last", "circular", 100)],
    ids=lambda v: str(v),
)
def test_separable_forward_paths_are_reference(layout, boundary, budget_planes, generator, device):
    """Gradient-free separable calls: the fused one-pass kernel and the two-pass form over plane chunks
    (one plane per chunk, everything in one chunk) equal the float64 reference, with a channel multiplier
    and strides; the public call (short taps: fused) too."""
    from nbxsig.kernels import depthwise as dk

    x = random_tensor((1, 2, 7, 11), generator=generator, dtype=torch.float64)
    wy = random_tensor((4, 4), generator=generator, dtype=torch.float64)
    wx = random_tensor((4, 5), generator=generator, dtype=torch.float64)
    pads, stride = (1, 2, 2, 2), (2, 1)
    ref = nf.depthwise_conv2d(x, (wy, wx), stride=stride, padding=pads, boundary=boundary, backend="torch")
    xt = x.float().to(device)
    if layout == "channels_last":
        xt = xt.to(memory_format=torch.channels_last)
    wyt, wxt = wy.float().to(device), wx.float().to(device)
    plane = ref.shape[2] * x.shape[3] * 4 * 2  # float32 intermediate of one input channel (M = 2)
    kw = dict(stride=stride, pads=pads, boundary=boundary)
    with torch.no_grad():
        # the default tile (band unrolled), then the looped and the unrolled band at other tiles; the
        # 4-column tiles have interior tiles (no column mapping) between the edge ones
        configs = (None, (2, 4, 8, 4, False), (2, 2, 8, 4, True), (1, 8, 16, 4, True))
        configs += ((1, 2, 4, 4, True), (1, 2, 4, 4, False))
        fused = [dk._separable_fused(xt, wyt, wxt, **kw, config=config) for config in configs]
        chunked = dk._separable_chunked(xt, wyt, wxt, budget=budget_planes * plane, **kw)
        public = nf.depthwise_conv2d(
            xt, (wyt, wxt), stride=stride, padding=pads, boundary=boundary, backend="triton"
        )
    for y in (*fused, chunked, public):
        assert_close(y, ref, dtype=torch.float32)
        assert y.is_contiguous(memory_format=torch.channels_last) == (layout == "channels_last")


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_separable_tensor_core_kernel_is_reference(boundary, generator, device, monkeypatch):
    """The fused Toeplitz-product blur (stride 1, opt-in): odd sizes, several tiles and halo chunks (a
    16×16 tile with taps longer than the tile), a channel multiplier, unequal pads, a non-contiguous
    batched view, float16/bfloat16 inputs through the public no-grad call with _SEP_DOT_MIN_TAPS set (and
    the ring off)."""
    from nbxsig.kernels import depthwise as dk

    monkeypatch.setattr(dk, "_SEP_DOT_MIN_TAPS", 5)

    base = random_tensor((2, 1, 23, 41), generator=generator, dtype=torch.float64)
    x = base[:, :, 1:, 3:40:2]  # (2, 1, 22, 19), column stride 2
    wy = random_tensor((2, 21), generator=generator, dtype=torch.float64)
    wx = random_tensor((2, 6), generator=generator, dtype=torch.float64)
    args = (wy.float().to(device), wx.float().to(device))
    for pads, config in (
        ((10, 10, 2, 3), None),
        ((0, 0, 0, 0), (16, 16, 16, 16, 4)),
        ((4, 13, 5, 1), (16, 32, 16, 16, 4)),
        ((3, 0, 7, 2), (16, 16, 32, 16, 4)),  # one column chunk covers the halo
    ):
        ref = nf.depthwise_conv2d(x, (wy, wx), padding=pads, boundary=boundary, backend="torch")
        y = dk._separable_dot(x.float().to(device), *args, pads=pads, boundary=boundary, config=config)
        assert_close(y, ref, dtype=torch.float32)
    with pytest.raises(ParameterValueError, match="N >= 16 per warpgroup"):
        dk._separable_dot(
            x.float().to(device), *args, pads=pads, boundary=boundary, config=(64, 128, 16, 16, 8)
        )
    monkeypatch.setattr(dk, "_SEP_DOT_TILE", (16, 16, 16, 16, 4))
    monkeypatch.setattr(dk, "_RING", False)  # else the long-tap ring takes these calls
    for dtype in (torch.float16, torch.bfloat16):
        xl = x.to(dtype)
        ref = nf.depthwise_conv2d(xl.double(), (wy, wx), boundary=boundary, backend="torch")
        with torch.no_grad():
            y = nf.depthwise_conv2d(xl.to(device), args, boundary=boundary, backend="triton")
        assert y.dtype == dtype
        assert_close(y, ref, dtype=dtype, **_dtype_tol(dtype))


def _ring_taps_and_call(separable, generator, kh=5, kw=4, co=4):
    """Random float64 taps for the ring tests -- ``(wy, wx)`` or a 2-D ``w`` -- and a call that runs
    ``x`` through the ring's launchers at a tile ``config`` (the separable or the 2-D one; multiplier
    ``co // x.shape[1]``)."""
    from nbxsig.kernels import depthwise as dk

    wy = random_tensor((co, kh), generator=generator, dtype=torch.float64)
    wx = random_tensor((co, kw), generator=generator, dtype=torch.float64)
    w = random_tensor((co, kh, kw), generator=generator, dtype=torch.float64)
    taps = (wy, wx) if separable else w

    def call(x, pads, boundary, config, out_shape):
        if separable:
            with torch.no_grad():
                return dk._separable_fused(
                    x, wy.float().to(x.device), wx.float().to(x.device), stride=(1, 1), pads=pads,
                    boundary=boundary, config=config,
                )  # fmt: skip
        return dk._forward(
            x, w.float().to(x.device), co=co, ho=out_shape[2], wo=out_shape[3], div=co // x.shape[1], j=1,
            stride=(1, 1), top=pads[0], left=pads[2], boundary=boundary, out_dtype=x.dtype, config=config,
        )  # fmt: skip

    return taps, call


@pytest.mark.parametrize("boundary", BOUNDARIES)
@pytest.mark.parametrize("separable", [False, True], ids=["2d", "separable"])
def test_ring_kernel_is_reference(boundary, separable, generator, device):
    """The ring stencil (NCHW, stride 1) at tiles of one and of several cycles, interior and edge column
    tiles (8-column tiles on a 21-column image), bands inside and across the top/bottom edges, a
    channel multiplier, unequal pads (output larger than the input), a batched non-contiguous view;
    float16 rounds once on the store."""
    from nbxsig.kernels import depthwise as dk

    base = random_tensor((2, 2, 13, 46), generator=generator, dtype=torch.float64)
    x = base[:, :, 1:, 3:44:2]  # (2, 2, 12, 21), column stride 2
    kh, kw = 5, 4
    pads = (2, 3, 4, 1)
    taps, call = _ring_taps_and_call(separable, generator, kh, kw)
    for dtype, configs in (
        (torch.float32, (None, ("ring", 1, 8, 1), ("ring", 3, 16, 2))),
        (torch.float16, (None,)),
    ):
        xt = x.to(dtype).to(device)
        ref = nf.depthwise_conv2d(
            x.to(dtype).double(), taps, padding=pads, boundary=boundary, backend="torch"
        )
        for config in configs:
            y = call(xt, pads, boundary, config, ref.shape)
            assert y.dtype == dtype
            assert_close(y, ref, dtype=dtype, **_dtype_tol(dtype))
    assert dk._ring_fits(xt, kh, kw, stride=(1, 1), separable=separable)


@pytest.mark.parametrize("boundary", BOUNDARIES)
@pytest.mark.parametrize("separable", [False, True], ids=["2d", "separable"])
def test_ring_kernel_whole_row_tile(boundary, separable, generator, device):
    """The ring stencil when one tile is the whole row (``WHOLE_W``: output width = input width = tile
    width, the widths and the left pad compile-time constants): a 16-column non-contiguous view,
    unequal pads, a channel multiplier, at the default tile and at one of two cycles."""
    from nbxsig.kernels import depthwise as dk

    x = random_tensor((2, 2, 13, 35), generator=generator, dtype=torch.float64)[:, :, 1:, 3:35:2]
    kh, kw = 5, 4
    pads = (2, 3, 2, 1)  # top, bottom, left, right: 16 output columns
    taps, call = _ring_taps_and_call(separable, generator, kh, kw)
    ref = nf.depthwise_conv2d(x, taps, padding=pads, boundary=boundary, backend="torch")
    assert ref.shape[3] == x.shape[3] == dk._ring_config(ref.shape[2], 16, kh)[1] == 16
    xt = x.float().to(device)
    for config in (None, ("ring", 2, 16, 1)):
        assert_close(call(xt, pads, boundary, config, ref.shape), ref, dtype=torch.float32)


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_ring_long_separable_is_reference(boundary, generator, device):
    """Separable filters longer than the unrolled ring takes (``LONG_W``: the row taps in a runtime loop,
    the column taps in a shift register): interior and edge column tiles (8 columns on 29; the row pads
    shorter than the row), bands inside and across the top/bottom edges and a short last band, a
    channel multiplier, unequal pads, a non-contiguous view; float16 rounds once on the store.
    The dispatch sends such filters there."""
    from nbxsig.kernels import depthwise as dk

    x = random_tensor((1, 2, 15, 59), generator=generator, dtype=torch.float64)[:, :, 1:, 1:59:2]
    kh, kw = 11, 10  # more than _FUSED_SEP_MAX_TAPS along the row and down the column
    pads = (4, 6, 6, 3)  # 13 × 29 outputs: two 12-row bands at 2 cycles, the second of one row
    wy = random_tensor((4, kh), generator=generator, dtype=torch.float64)
    wx = random_tensor((4, kw), generator=generator, dtype=torch.float64)
    assert dk._ring_fits(x, kh, kw, stride=(1, 1), separable=True, pads=pads)
    assert not dk._ring_fits(x, kh, kw, stride=(1, 1), separable=True, pads=(4, 6, 29, 3))  # pad >= the row
    for dtype, configs in (
        (torch.float32, (None, ("ring", 2, 8, 1))),
        (torch.float16, (None,)),
    ):
        xt = x.to(dtype).to(device)
        ref = nf.depthwise_conv2d(
            x.to(dtype).double(), (wy, wx), padding=pads, boundary=boundary, backend="torch"
        )
        for config in configs:
            with torch.no_grad():
                y = dk._separable_fused(
                    xt, wy.float().to(device), wx.float().to(device), stride=(1, 1), pads=pads,
                    boundary=boundary, config=config,
                )  # fmt: skip
            assert y.dtype == dtype
            assert_close(y, ref, dtype=dtype, **_dtype_tol(dtype))
        with torch.no_grad():
            y = dk.depthwise_conv2d_separable(
                xt, wy.float().to(device), wx.float().to(device), stride=(1, 1), pads=pads, boundary=boundary
            )
        assert_close(y, ref, dtype=dtype, **_dtype_tol(dtype))


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_long_rows_kernel_is_reference(boundary, generator, device):
    """Long row taps on unit-stride rows (``_long_rows_kernel``): 2 or 4 adjacent columns per thread,
    the row filtered from registers on the tiles whose window lies inside the row and with mapped
    positions on the others; against the float64 reference, with rows across the top/bottom edges (the
    boundary maps them) and float16 rounding once on the store. The rows are shared out over 1, 3 or 5
    programs, so shares start and end mid-strip and cross strips, tiles and images."""
    from nbxsig.kernels import depthwise as dk

    kh, kw = 11, 10
    pads = (4, 6, 6, 3)
    wy = random_tensor((1, kh), generator=generator, dtype=torch.float64)
    wx = random_tensor((1, kw), generator=generator, dtype=torch.float64)
    # (tile width, warps, image width, dtype, program counts): 2 columns per thread on 64-column tiles,
    # 4 on 128; tile 1 of each is the one whose window (tile ± the pads, rounded out to blocks) fits in
    # the row; None: the interpreter's default count (_LONG_PROGRAMS_CPU).
    for block_w, warps, width, dtype, programs in (
        (64, 1, 150, torch.float32, (1, 3)),
        (128, 1, 270, torch.float32, (None,)),
        (128, 1, 270, torch.float16, (3,)),
    ):
        n_tiles = -(-width // block_w)
        off, nb = dk.long_window(6, kw, block_w // 32)
        assert dk.long_window_tiles(n_tiles, block_w, width, off=off, nb=nb, vec=block_w // 32) == (1, 2)
        x = random_tensor((2, 1, 9, width), generator=generator, dtype=torch.float64).to(dtype)
        ref = nf.depthwise_conv2d(x.double(), (wy, wx), padding=pads, boundary=boundary, backend="torch")
        for count in programs:
            with torch.no_grad():
                y = dk._separable_fused(
                    x.to(device), wy.float().to(device), wx.float().to(device), stride=(1, 1), pads=pads,
                    boundary=boundary, config=("long", block_w, warps, 200, 255, count),
                )  # fmt: skip
            assert_close(y, ref, dtype=dtype, **_dtype_tol(dtype))


def test_long_rows_more_programs_than_rows(generator, device):
    """Programs past the last row have nothing to do; a share of one row still fills its register first."""
    from nbxsig.kernels import depthwise as dk

    x = random_tensor((1, 1, 6, 150), generator=generator).to(device)
    wy = random_tensor((1, 11), generator=generator).to(device)
    wx = random_tensor((1, 10), generator=generator).to(device)
    pads = (5, 5, 4, 5)  # 6 × 150 outputs: 6 rows on the interior tile, 12 on the edge tiles; 16 programs
    taps = (wy.cpu().double(), wx.cpu().double())
    ref = nf.depthwise_conv2d(x.cpu().double(), taps, padding=pads, boundary="reflect", backend="torch")
    with torch.no_grad():
        y = dk._separable_fused(
            x, wy, wx, stride=(1, 1), pads=pads, boundary="reflect", config=("long", 64, 1, 200, 255, 16)
        )
    assert_close(y, ref, dtype=torch.float32)


def test_long_rows_narrow_and_cropped_rows(generator, device, monkeypatch):
    """Rows narrower than one 64-column tile (no interior tile: the edge launch only, its row window
    wider than the row) and a crop whose rows start mid-line (unit stride, unaligned start): equal to
    the reference; the dispatch sends both to the long rows' kernel."""
    from nbxsig.kernels import depthwise as dk

    launch, launched = dk._launch_long_rows, []
    monkeypatch.setattr(dk, "_launch_long_rows", lambda *a, **k: launched.append(1) or launch(*a, **k))
    x = random_tensor((1, 2, 7, 40), generator=generator).to(device)
    wy = random_tensor((2, 9), generator=generator).to(device)
    wx = random_tensor((2, 17), generator=generator).to(device)
    taps = (wy.cpu().double(), wx.cpu().double())
    for view in (x[..., :20], x[..., 3:40]):
        ref = nf.depthwise_conv2d(view.cpu().double(), taps, boundary="symmetric", backend="torch")
        with torch.no_grad():
            y = nf.depthwise_conv2d(view, (wy, wx), boundary="symmetric", backend="triton")
        assert_close(y, ref, dtype=torch.float32)
    assert len(launched) == 2


def test_long_rows_programs():
    """The long path's program count: what the GPU holds at once (SMs × programs per SM at the
    registers given), fewer where a share would be under 2·(KH - 1) rows."""
    from nbxsig.kernels import depthwise as dk
    from nbxsig.kernels._runtime import resident_programs

    # 200 registers: 6400 a warp, 2 warps in each scheduler's 16384, 8 an SM (not 65536 // 6400 = 10)
    assert resident_programs(200, 1) == 8
    assert resident_programs(168, 1) == 12  # 5376 a warp: 3 per scheduler
    assert resident_programs(255, 1) == 8  # rounded up to 256
    assert resident_programs(168, 2) == 6
    assert resident_programs(128, 1) == 16
    assert resident_programs(32, 1) == 32  # the 32-program cap
    assert resident_programs(32, 4) == 16  # the 64-warp cap
    x = torch.zeros(1)
    assert dk.long_rows_programs(x, 10_000, 31, 200, 1) == dk._LONG_PROGRAMS_CPU
    assert dk.long_rows_programs(x, 119, 31, 200, 1) == 1  # under 2·30 rows a program: one
    assert dk.long_rows_programs(x, 180, 31, 200, 1) == 3


def test_gaussian_blur_long_taps_as_kernel_arguments(generator, device, monkeypatch):
    """The filters' cached Gaussian taps (and the box blur's) carry their host values, so the long
    separable path passes them to the kernel as arguments (no registers, no read-back); equal to the
    reference, interior and edge tiles."""
    from nbxsig.kernels import depthwise as dk
    from nbxsig.reference.depthwise import shared_host_taps

    seen = []
    launch = dk._launch_long_rows

    def spy(*args, **kwargs):
        seen.append(kwargs.get("host_taps"))
        return launch(*args, **kwargs)

    monkeypatch.setattr(dk, "_launch_long_rows", spy)
    x = random_tensor((1, 1, 9, 270), generator=generator).to(device)  # 3 tiles of 128: the middle one inside
    y = nf.gaussian_blur2d(x, 17, (2.0, 3.0), backend="triton")
    ref = nf.gaussian_blur2d(x.cpu().double(), 17, (2.0, 3.0), backend="torch")
    assert_close(y, ref, dtype=torch.float32)
    assert len(seen) == 1 and seen[0] is not None and tuple(map(len, seen[0])) == (17, 17)
    # The box blur's taps too (built per call).
    box = nf.box_blur(x, (9, 17), backend="triton")
    assert_close(box, nf.box_blur(x.cpu().double(), (9, 17), backend="torch"), dtype=torch.float32)
    assert len(seen) == 2 and seen[1] == tuple(tuple(torch.full((k,), 1 / k).tolist()) for k in (9, 17))
    wy, wx = nf._shared_gaussian_taps(17, 17, 2.0, 3.0, 1, x.device, torch.float32)
    assert shared_host_taps(wy, wx) == (tuple(wy[0].tolist()), tuple(wx[0].tolist()))
    assert shared_host_taps(wy.clone(), wx) is None  # only the marked tensors carry them


@pytest.mark.parametrize("kw", [3, 5], ids=["mapped", "direct"])
def test_ring_kernel_zero_padding(kw, generator, device):
    """Zero padding on the ring's edge tiles, with their mapped column offsets (3 column taps) or
    addressed like interior tiles under a mask (more): equal to the reference on interior and edge tiles
    (8-column tiles on a 29-column image), and the pad adds exactly nothing -- an inf in the edge column
    gives inf in the sums it is in, no NaN elsewhere."""
    from nbxsig.kernels import depthwise as dk

    x = random_tensor((1, 2, 11, 29), generator=generator, dtype=torch.float64)
    w = random_tensor((2, 3, kw), generator=generator, dtype=torch.float64)
    left = kw // 2
    ref = nf.depthwise_conv2d(x, w, padding=(1, 1, left, left), boundary="zeros", backend="torch")
    for config in (None, ("ring", 2, 8, 1)):
        y = dk._forward(
            x.float().to(device), w.float().to(device), co=2, ho=11, wo=29, div=1, j=1, stride=(1, 1),
            top=1, left=left, boundary="zeros", out_dtype=torch.float32, config=config,
        )  # fmt: skip
        assert_close(y, ref, dtype=torch.float32)
    x = torch.ones(1, 1, 9, 12, device=device)
    x[0, 0, :, 0] = float("inf")
    w = torch.ones(1, 3, kw, device=device)
    y = dk._forward(
        x, w, co=1, ho=9, wo=12, div=1, j=1, stride=(1, 1), top=1, left=left, boundary="zeros",
        out_dtype=torch.float32, config=("ring", 2, 8, 1),
    )  # fmt: skip
    assert torch.isinf(y[0, 0, :, : left + 1]).all() and torch.isfinite(y[0, 0, :, left + 1 :]).all()
    assert not torch.isnan(y).any()
    # the same with one tile as the whole row (16 columns: WHOLE_W, the masks resolved at compile time)
    x = torch.ones(1, 1, 9, 16, device=device)
    x[0, 0, :, 0] = x[0, 0, :, 15] = float("inf")
    y = dk._forward(
        x, w, co=1, ho=9, wo=16, div=1, j=1, stride=(1, 1), top=1, left=left, boundary="zeros",
        out_dtype=torch.float32, config=("ring", 2, 16, 1),
    )  # fmt: skip
    right = kw - 1 - left
    assert torch.isinf(y[0, 0, :, : left + 1]).all() and torch.isinf(y[0, 0, :, 15 - right :]).all()
    assert torch.isfinite(y[0, 0, :, left + 1 : 15 - right]).all() and not torch.isnan(y).any()


@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
def test_static_and_looped_stencils_agree_with_reference(layout, generator, device):
    """The fully unrolled stencil (<= 9 taps) and the looped band on one strided, multiplier call."""
    from nbxsig.kernels import depthwise as dk

    x = random_tensor((1, 2, 5, 11), generator=generator, dtype=torch.float64)
    w = random_tensor((4, 3, 3), generator=generator, dtype=torch.float64)
    ref = nf.depthwise_conv2d(x, w, stride=(2, 1), padding=(1, 1, 1, 1), boundary="reflect", backend="torch")
    xt = x.float().to(device)
    if layout == "channels_last":
        xt = xt.to(memory_format=torch.channels_last)
    bc = 4 if layout == "channels_last" else 1
    for static in (True, False):
        y = dk._forward(
            xt, w.float().to(device), co=4, ho=ref.shape[2], wo=ref.shape[3], div=2, j=1, stride=(2, 1),
            top=1, left=1, boundary="reflect", out_dtype=torch.float32, config=(bc, 4, 16, 4, static),
        )  # fmt: skip
        assert_close(y, ref, dtype=torch.float32)


def test_launches_keep_grid_axes_1_and_2_within_the_cuda_limit(grid_limit, generator, device, monkeypatch):
    """CUDA refuses a grid of more than 65535 programs along axis 1 or 2 ("Triton Error [CUDA]: invalid
    argument"). The stencils put the output channels and images there, the resampler its signals, and the
    taps gradient its (image, chunk of positions) pairs: 8 images of 2048×2048 made 65536. With the limit
    lowered to 3 (``grid_limit``: the interpreter refuses a larger grid), every launch keeps within it and
    the results are the reference's."""
    from nbxsig.kernels import depthwise as dk

    x = random_tensor((5, 2, 6, 7), generator=generator, dtype=torch.float64)
    w = random_tensor((4, 3, 3), generator=generator, dtype=torch.float64)
    wy, wx = random_tensor((4, 3), generator=generator), random_tensor((4, 5), generator=generator)
    g = random_tensor((5, 4, 6, 7), generator=generator, dtype=torch.float64)
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    ref = nf.depthwise_conv2d(xr, wr, boundary="reflect", backend="torch")
    ref.backward(g)
    for layout in (torch.contiguous_format, torch.channels_last):
        xt = x.float().to(device).contiguous(memory_format=layout).requires_grad_()
        wt = w.float().to(device).requires_grad_()
        y = nf.depthwise_conv2d(xt, wt, boundary="reflect", backend="triton")
        assert y.is_contiguous(memory_format=layout)
        y.backward(g.float().to(device))
        assert_close(y, ref, dtype=torch.float32)
        assert_close(xt.grad, xr.grad, dtype=torch.float32)
        assert_close(wt.grad, wr.grad, dtype=torch.float32)
    sep = nf.depthwise_conv2d(x.float().to(device), (wy.to(device), wx.to(device)), backend="triton")
    sep_ref = nf.depthwise_conv2d(x, (wy.double(), wx.double()), backend="torch")
    assert_close(sep, sep_ref, dtype=torch.float32)
    # 1-D: a batch of 5 signals of 4 channels, the long-FIR (Toeplitz) kernel and the taps gradient.
    s = random_tensor((5, 4, 90), generator=generator, dtype=torch.float64)
    taps = random_tensor((4, 48), generator=generator, dtype=torch.float64)
    st, tt = s.float().to(device), taps.float().to(device).requires_grad_()
    tr = taps.clone().requires_grad_()
    y1 = nf.fir_filter(st, tt, backend="triton")
    r1 = nf.fir_filter(s, tr, backend="torch")
    assert_close(y1, r1, dtype=torch.float32)
    y1.sum().backward()
    r1.sum().backward()
    assert_close(tt.grad, tr.grad, dtype=torch.float32, atol=1e-4)
    for tile in (None, dk._RESAMPLE_TILE):
        monkeypatch.setattr(dk, "_RESAMPLE_TILE", tile)
        assert_close(
            nf.resample(s.float().to(device), 3, 2, backend="triton"),
            nf.resample(s, 3, 2, backend="torch"),
            dtype=torch.float32,
            atol=1e-5,
        )


def test_auto_dispatch_rule_for_channels_last():
    """Pure size rule: channels_last with equal zero padding goes to cuDNN where it was measured faster;
    NCHW, other boundaries and asymmetric padding never do."""
    rule = nf._cudnn_is_faster
    same3, same7 = (1, 1, 1, 1), (3, 3, 3, 3)
    assert rule(channels_last=True, dtype=torch.float16, kh=7, kw=7, pads=same7, boundary="zeros")
    assert rule(channels_last=True, dtype=torch.float32, kh=5, kw=5, pads=(2, 2, 2, 2), boundary="zeros")
    assert not rule(channels_last=True, dtype=torch.float32, kh=3, kw=3, pads=same3, boundary="zeros")
    assert not rule(channels_last=True, dtype=torch.float32, kh=7, kw=7, pads=same7, boundary="zeros")
    assert not rule(channels_last=False, dtype=torch.float16, kh=7, kw=7, pads=same7, boundary="zeros")
    assert not rule(channels_last=True, dtype=torch.float16, kh=7, kw=7, pads=same7, boundary="reflect")
    assert not rule(channels_last=True, dtype=torch.float16, kh=4, kw=4, pads=(1, 2, 1, 2), boundary="zeros")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_conv2d_triton_half_precision(dtype, generator, device):
    x = random_tensor((1, 2, 8, 13), generator=generator).to(dtype)
    w = random_tensor((2, 7, 7), generator=generator) / 7
    ref = nf.depthwise_conv2d(x.double(), w.double(), boundary="reflect", backend="torch")
    for xx in (x, x.to(memory_format=torch.channels_last)):
        y = nf.depthwise_conv2d(xx.to(device), w.to(device), boundary="reflect", backend="triton")
        assert_close(y, ref, dtype=dtype, **_dtype_tol(dtype))


# ---------------------------------------------------------------------------------------------
# gradients


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_gradcheck_torch_backend(boundary, generator):
    x = random_tensor((1, 2, 5, 6), generator=generator, dtype=torch.float64).requires_grad_()
    w = random_tensor((4, 3, 2), generator=generator, dtype=torch.float64).requires_grad_()

    def fn(x, w):
        return nf.depthwise_conv2d(x, w, stride=(1, 2), boundary=boundary, backend="torch")

    assert torch.autograd.gradcheck(fn, (x, w))
    x1 = random_tensor((1, 2, 9), generator=generator, dtype=torch.float64).requires_grad_()
    t = random_tensor((5,), generator=generator, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda x, t: nf.fir_filter(x, t, boundary=boundary, backend="torch"), (x1, t)
    )


def _grads(fn, x, w, g):
    x = x.detach().clone().requires_grad_()
    w = w.detach().clone().requires_grad_()
    fn(x, w).backward(g.to(x.dtype))
    return x.grad, w.grad


@pytest.mark.parametrize("boundary", BOUNDARIES)
@pytest.mark.parametrize(
    ("stride", "m", "layout"), [(1, 1, "nchw"), (1, 2, "channels_last"), ((2, 1), 2, "nchw")]
)
def test_triton_gradients_match_torch(boundary, stride, m, layout, generator, device):
    x = random_tensor((1, 2, 6, 9), generator=generator, dtype=torch.float64)
    w = random_tensor((2 * m, 3, 4), generator=generator, dtype=torch.float64)

    def fn(backend):
        return lambda x, w: nf.depthwise_conv2d(x, w, stride=stride, boundary=boundary, backend=backend)

    y = fn("torch")(x, w)
    g = random_tensor(tuple(y.shape), generator=generator, dtype=torch.float64)
    gx_ref, gw_ref = _grads(fn("torch"), x, w, g)
    xt = x.float().to(device)
    if layout == "channels_last":
        xt = xt.to(memory_format=torch.channels_last)
    gx, gw = _grads(fn("triton"), xt, w.float().to(device), g.float().to(device))
    assert_close(gx, gx_ref, dtype=torch.float32, atol=1e-5)
    assert_close(gw, gw_ref, dtype=torch.float32, atol=1e-5)


@pytest.mark.parametrize("separable", [False, True], ids=["full", "separable"])
def test_triton_second_derivatives_match_torch(separable, generator, device):
    # Under create_graph=True the Triton backward returned gradients without a graph: a gradient penalty
    # lost every term through them silently (the taps' gradient came out ~1e4 off) and a second grad
    # raised "does not require grad". They go through the torch twin there now.
    x = random_tensor((2, 2, 5, 7), generator=generator, dtype=torch.float64)
    shapes = [(4, 3), (4, 4)] if separable else [(4, 3, 3)]
    ws = [random_tensor(shape, generator=generator, dtype=torch.float64) for shape in shapes]
    results = {}
    for backend, dtype in (("torch", torch.float64), ("triton", torch.float32)):
        xx = x.to(dtype).to(device).requires_grad_()
        ww = [w.to(dtype).to(device).requires_grad_() for w in ws]
        y = nf.depthwise_conv2d(xx, tuple(ww) if separable else ww[0], boundary="reflect", backend=backend)
        (gx,) = torch.autograd.grad(y.square().sum(), xx, create_graph=True)
        penalty = gx.square().sum()
        results[backend] = torch.autograd.grad(y.sum() + penalty, [xx, *ww])
    for got, want in zip(results["triton"], results["torch"], strict=True):
        assert_close(got, want, dtype=torch.float32, rtol=1e-4)


def test_triton_filter_bank_gradients_match_torch(generator, device):
    x = random_tensor((2, 60), generator=generator, dtype=torch.float64)
    bank = random_tensor((4, 9), generator=generator, dtype=torch.float64)

    def fn(backend):
        return lambda x, w: nf.filter_bank(x, w, stride=2, boundary="symmetric", backend=backend)

    g = random_tensor((2, 4, 30), generator=generator, dtype=torch.float64)
    gx_ref, gw_ref = _grads(fn("torch"), x, bank, g)
    gx, gw = _grads(fn("triton"), x.float().to(device), bank.float().to(device), g.float().to(device))
    assert_close(gx, gx_ref, dtype=torch.float32, atol=1e-5)
    assert_close(gw, gw_ref, dtype=torch.float32, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# kornia-compatible ops


KORNIA_CASES = [
    ("gaussian_blur2d", ((5, 3), (1.5, 0.8)), {"border_type": "reflect"}),
    ("gaussian_blur2d", ((5, 5), (1.2, 1.2)), {"border_type": "constant", "separable": False}),
    ("gaussian_blur2d", (7, (2.0, 2.0)), {"border_type": "replicate"}),
    ("gaussian_blur2d", ((3, 5), (1.0, 2.0)), {"border_type": "circular"}),
    ("box_blur", ((3, 5),), {}),
    ("box_blur", (4,), {"border_type": "replicate", "separable": False}),
    ("sobel", (), {}),
    ("sobel", (), {"normalized": False}),
    ("laplacian", (3,), {}),
    ("laplacian", (5,), {"border_type": "constant", "normalized": False}),
    ("unsharp_mask", ((5, 5), (1.5, 1.5)), {}),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("name", "args", "kwargs"), KORNIA_CASES, ids=lambda v: str(v).replace(" ", ""))
def test_kornia_ops(name, args, kwargs, backend, generator, device):
    kornia = suite_dependency("kornia")
    shape = (2, 3, 14, 17) if backend == "torch" else (1, 2, 9, 17)  # the interpreter is slow
    x = random_tensor(shape, generator=generator, dtype=torch.float64)
    ref = getattr(kornia.filters, name)(x, *args, **kwargs)
    if backend == "torch":
        y = getattr(nf, name)(x, *args, **kwargs, backend="torch")
        assert_close(y, ref)
    else:
        y = getattr(nf, name)(x.float().to(device), *args, **kwargs, backend="triton")
        assert_close(y, ref, dtype=torch.float32)


def test_gaussian_blur_module_is_kornias_after_dtype_moves_and_state_dict(generator):
    # Its taps were float64 buffers, so the module's dtype moves rounded them for good (kornia's module has
    # none and builds them per call): 2e-4 off kornia after .half().float(), float32 taps for float64 input
    # after .float(); and kornia's (empty) state_dict did not load strictly ("Missing key(s) kernel_y").
    kornia = suite_dependency("kornia")
    x = random_tensor((2, 3, 11, 9), generator=generator, dtype=torch.float64)
    ref = kornia.filters.GaussianBlur2d((5, 3), (1.3, 0.7))(x)
    ours = nf.GaussianBlur2d((5, 3), (1.3, 0.7), backend="torch").half().float()
    assert_close(ours(x.float()), ref, dtype=torch.float32)
    assert_close(ours.double().float()(x), ref)
    ours.load_state_dict(kornia.filters.GaussianBlur2d((5, 3), (1.3, 0.7)).state_dict(), strict=True)
    assert list(ours.state_dict()) == list(ours.buffers()) == []


KORNIA_CASE_BORDERS = [
    ("gaussian_blur2d", ((3, 5), (1.0, 2.0), "Reflect")),
    ("box_blur", ((3, 3), "CONSTANT")),
    ("laplacian", (3, "Replicate")),
    ("unsharp_mask", ((3, 3), (1.5, 1.5), "Circular")),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("name", "args"), KORNIA_CASE_BORDERS, ids=[n for n, _ in KORNIA_CASE_BORDERS])
def test_kornia_ops_take_border_types_in_any_case(name, args, backend, generator, device):
    # kornia reads border_type case-insensitively; "Reflect" or "CONSTANT" were refused here.
    kornia = suite_dependency("kornia")
    x = random_tensor((1, 2, 7, 9), generator=generator, dtype=torch.float64)
    ref = getattr(kornia.filters, name)(x, *args)
    dtype = torch.float64 if backend == "torch" else torch.float32
    assert_close(getattr(nf, name)(x.to(device, dtype), *args, backend=backend), ref, dtype=dtype)
    with pytest.raises(ParameterValueError, match=r"border_type must be one of .*, got 'MIRROR'"):
        getattr(nf, name)(x, *args[:-1], "MIRROR")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.uint8, torch.int64, torch.bool], ids=str)
@pytest.mark.parametrize(("name", "args", "kwargs"), KORNIA_CASES[::2], ids=lambda v: str(v).replace(" ", ""))
def test_kornia_ops_filter_integer_images_in_float32(name, args, kwargs, dtype, backend, generator, device):
    # kornia filters an integer or bool image in float32 and returns float32; such images were refused.
    kornia = suite_dependency("kornia")
    x = random_tensor((1, 2, 7, 9), generator=generator, low=0.0, high=200.0)
    x = x > 100 if dtype == torch.bool else x.to(dtype)
    ref = getattr(kornia.filters, name)(x, *args, **kwargs)
    y = getattr(nf, name)(x.to(device), *args, **kwargs, backend=backend)
    assert y.dtype == ref.dtype == torch.float32
    assert_close(y, ref)


def test_gaussian_blur_per_image_sigma(generator):
    kornia = suite_dependency("kornia")
    x = random_tensor((2, 2, 12, 12), generator=generator, dtype=torch.float64)
    sigma = torch.tensor([[1.0, 2.0], [0.7, 1.3]], dtype=torch.float64)
    assert_close(
        nf.gaussian_blur2d(x, 5, sigma, backend="torch"), kornia.filters.gaussian_blur2d(x, 5, sigma)
    )


def test_gaussian_blur_refuses_a_sigma_that_requires_grad():
    # The taps are sampled on the host: a sigma that requires grad would be cut from the graph silently.
    x = torch.randn(2, 3, 8, 8)
    for sigma in (
        torch.tensor([[1.0, 2.0], [0.7, 1.2]], requires_grad=True),
        (torch.tensor(1.0).requires_grad_(), 2.0),
    ):
        with pytest.raises(ParameterValueError, match="sigma must be a tensor that does not require grad"):
            nf.gaussian_blur2d(x, (5, 5), sigma)
    # Detached, or one-element tensors in the pair, are the plain numbers.
    pair = (torch.tensor(1.0), torch.tensor(2.0))
    assert torch.equal(nf.gaussian_blur2d(x, 5, pair), nf.gaussian_blur2d(x, 5, (1.0, 2.0)))


def test_gaussian_blur_sigma_pair_of_numpy_numbers():
    # numpy scalars and 0-d arrays are numbers, as they were before sigma was validated.
    x = torch.randn(2, 3, 8, 8)
    ref = nf.gaussian_blur2d(x, 3, (1.0, 2.0))
    for pair in ((np.array(1.0), 2.0), (np.float32(1.0), np.float64(2.0)), [np.array(1), np.array(2.0)]):
        assert torch.equal(nf.gaussian_blur2d(x, 3, pair), ref)
        assert torch.equal(nf.GaussianBlur2d(3, pair)(x), ref)


def test_gaussian_blur_module_takes_one_sigma_pair_as_a_tensor():
    # kornia's GaussianBlur2d takes a tensor sigma; the module takes one pair (per-image: gaussian_blur2d).
    x = torch.randn(2, 3, 8, 8)
    ref = nf.GaussianBlur2d(3, (1.0, 2.0))(x)
    for sigma in (torch.tensor([1.0, 2.0]), torch.tensor([[1.0, 2.0]], dtype=torch.float64)):
        assert torch.equal(nf.GaussianBlur2d(3, sigma)(x), ref)
    with pytest.raises(ParameterValueError) as info:
        nf.GaussianBlur2d(3, torch.ones(2, 2))
    assert str(info.value) == (
        "sigma must be a pair (sy, sx) or a tensor (2,) or (1, 2) (per-image sigmas: use gaussian_blur2d), "
        "got a tensor of shape (2, 2) and dtype torch.float32 on cpu"
    )
    with pytest.raises(ParameterValueError, match="sigma must be a tensor that does not require grad"):
        nf.GaussianBlur2d(3, torch.ones(2, requires_grad=True))


@pytest.mark.parametrize("backend", BACKENDS)
def test_gaussian_blur_gradient_after_a_call_under_inference_mode(backend, device):
    # The shared taps are cached: made by a first call under torch.inference_mode they were inference
    # tensors, and every later call with gradients raised "Inference tensors cannot be saved for backward".
    nf._shared_gaussian_taps.cache_clear()
    x = torch.rand(1, 2, 9, 9).to(device)
    with torch.inference_mode():
        ref = nf.gaussian_blur2d(x, 3, (1.0, 1.5), backend=backend)
    xg = x.clone().requires_grad_()
    y = nf.gaussian_blur2d(xg, 3, (1.0, 1.5), backend=backend)
    y.sum().backward()
    assert_close(y.detach(), ref)
    # Interior pixels are read by all nine taps, which sum to 1.
    assert_close(xg.grad[..., 2:-2, 2:-2], torch.ones(1, 2, 5, 5, device=device), atol=1e-6)


PER_CHANNEL_2D_OPS = [
    ("full", lambda x, be: nf.depthwise_conv2d(x, torch.ones(3, 3, 3) / 9, backend=be)),
    ("multiplier", lambda x, be: nf.depthwise_conv2d(x, torch.ones(6, 3, 2), boundary="reflect", backend=be)),
    ("separable", lambda x, be: nf.depthwise_conv2d(x, (torch.ones(3, 3), torch.ones(3, 5)), backend=be)),
    ("gaussian", lambda x, be: nf.gaussian_blur2d(x, 3, (1.0, 1.5), backend=be)),
    (
        "gaussian-per-image",
        lambda x, be: nf.gaussian_blur2d(x, 3, torch.tensor([[1.0, 2.0], [0.5, 1.0]]), backend=be),
    ),
    ("box", lambda x, be: nf.box_blur(x, 3, backend=be)),
    ("box-2d", lambda x, be: nf.box_blur(x, 3, separable=False, backend=be)),
    ("sobel", lambda x, be: nf.sobel(x, backend=be)),
    ("laplacian", lambda x, be: nf.laplacian(x, 3, backend=be)),
    ("unsharp", lambda x, be: nf.unsharp_mask(x, 3, (1.0, 1.0), backend=be)),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("name", "op"), PER_CHANNEL_2D_OPS, ids=[n for n, _ in PER_CHANNEL_2D_OPS])
def test_2d_ops_keep_channels_last(name, op, backend, generator, device):
    x = random_tensor((2, 3, 7, 9), generator=generator).to(device)
    y_cl = op(x.contiguous(memory_format=torch.channels_last), backend)
    assert y_cl.is_contiguous(memory_format=torch.channels_last)
    assert op(x, backend).is_contiguous()
    assert_close(y_cl, op(x, backend), atol=1e-6)


def test_separable_torch_path_copies_into_channels_last_once():
    """The column pass's result stays in conv2d's layout: only the row pass's is copied into channels_last
    (converting the intermediate too cost 39 -> 58 ms on a 7x7 blur of 4x16x256x256 on the CPU)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from nbxsig.reference.depthwise import depthwise_conv2d_separable

    class CountCopies(TorchDispatchMode):
        copies = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket in (torch.ops.aten.clone, torch.ops.aten._to_copy, torch.ops.aten.copy_):
                self.copies += 1
            return func(*args, **(kwargs or {}))

    x = torch.randn(2, 3, 7, 9).contiguous(memory_format=torch.channels_last)
    with CountCopies() as mode:
        y = depthwise_conv2d_separable(
            x, torch.ones(3, 3), torch.ones(3, 5), stride=(1, 1), pads=(1, 1, 2, 2), boundary="reflect"
        )
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert mode.copies == 1


def test_modules_equal_functionals(generator):
    x = random_tensor((1, 2, 12, 13), generator=generator, dtype=torch.float64)
    s = random_tensor((2, 50), generator=generator, dtype=torch.float64)
    w1 = random_tensor((4, 5), generator=generator, dtype=torch.float64)
    w2 = random_tensor((2, 3, 3), generator=generator, dtype=torch.float64)
    pairs = [
        (nf.GaussianBlur2d((5, 3), (1.2, 0.9))(x), nf.gaussian_blur2d(x, (5, 3), (1.2, 0.9))),
        (nf.BoxBlur(3)(x), nf.box_blur(x, 3)),
        (nf.Sobel()(x), nf.sobel(x)),
        (nf.Laplacian(3)(x), nf.laplacian(x, 3)),
        (nf.UnsharpMask(3, (1.0, 1.0))(x), nf.unsharp_mask(x, 3, (1.0, 1.0))),
        (nf.UnsharpMask(3, torch.tensor([[1.0, 0.5]]))(x), nf.unsharp_mask(x, 3, (1.0, 0.5))),
        (nf.DepthwiseConv1d(w1, stride=2)(s), nf.depthwise_conv1d(s, w1, stride=2)),
        (nf.DepthwiseConv2d(w2, boundary="reflect")(x), nf.depthwise_conv2d(x, w2, boundary="reflect")),
        (nf.FIRFilter(w1[0])(s), nf.fir_filter(s, w1[0])),
        (nf.FilterBank(w1)(s[0]), nf.filter_bank(s[0], w1)),
        (nf.Resample(16000, 8000)(s), nf.resample(s, 16000, 8000)),
    ]
    for a, b in pairs:
        assert torch.equal(a, b)
    m = nf.FIRFilter(w1[0])
    assert "taps" in dict(m.named_buffers()) and not list(m.parameters())
    assert [n for n, _ in nf.DepthwiseConv1d(w1, trainable=True).named_parameters()] == ["weight"]


# ---------------------------------------------------------------------------------------------
# errors and dispatch


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda x: nf.depthwise_conv1d(x, torch.ones(4, 3)),
            ParameterValueError,
            "multiple of the input's 3 channels",
        ),
        (
            lambda x: nf.depthwise_conv1d(x, torch.ones(3, 3), boundary="wrap"),
            ParameterValueError,
            "boundary must be one of",
        ),
        (
            lambda x: nf.depthwise_conv1d(x, torch.ones(3, 3), padding="half"),
            ParameterValueError,
            "padding must be one of",
        ),
        (
            lambda x: nf.depthwise_conv1d(x, torch.ones(3, 3), stride=0),
            ParameterValueError,
            "stride must be >= 1, got 0",
        ),
        (
            lambda x: nf.depthwise_conv1d(x, torch.ones(3, 30), padding="valid"),
            ParameterValueError,
            "at least 30 samples",
        ),
        (
            lambda x: nf.depthwise_conv1d(x.int(), torch.ones(3, 3)),
            ParameterTypeError,
            "x must be a tensor of dtype",
        ),
        (lambda x: nf.depthwise_conv1d(x, [1.0, 2.0]), ParameterTypeError, "weight must be a torch.Tensor"),
        (
            lambda x: nf.depthwise_conv2d(x, torch.ones(3, 3, 3)),
            ParameterValueError,
            "x must be a tensor with at least 4 dimensions",
        ),
        (lambda x: nf.fir_filter(x, torch.ones(2, 3)), ParameterValueError, "matching taps' 2 filters"),
        (
            lambda x: nf.gaussian_blur2d(x[None], 3, (1.0, 1.0), "mirror"),
            ParameterValueError,
            "border_type must be",
        ),
        (
            lambda x: nf.gaussian_blur2d(x[None], 3, ("a", "b")),
            ParameterTypeError,
            "sigma must be a real number, got 'a'",
        ),
        (
            lambda x: nf.gaussian_blur2d(x[None], 3, (1.0, 1.0, 1.0)),
            ParameterValueError,
            "sigma must be a pair (sy, sx) or a tensor (B, 2)",
        ),
        (lambda x: nf.GaussianBlur2d(3, 1.0), ParameterValueError, "sigma must be a pair (sy, sx)"),
        (
            lambda x: nf.DepthwiseConv2d((torch.ones(3, 3),)),
            ParameterValueError,
            "weight must be a tensor (C·M, kh, kw) or a pair (weight_y, weight_x)",
        ),
        (lambda x: nf.DepthwiseConv2d("abc"), ParameterTypeError, "weight must be a torch.Tensor, got 'abc'"),
        (
            lambda x: nf.DepthwiseConv2d(torch.ones(3, 3)),
            ParameterValueError,
            "weight must be a tensor with 3..3 dimensions",
        ),
        (
            lambda x: nf.DepthwiseConv2d((torch.ones(3, 3), torch.ones(2, 3))),
            ParameterValueError,
            "weight[1] must be a tensor with 3 rows like weight[0]",
        ),
        # Modules check their arguments when built, not at the first call.
        (lambda x: nf.FilterBank(torch.ones(3, 5), stride=0), ParameterValueError, "stride must be >= 1"),
        (lambda x: nf.BoxBlur(0), ParameterValueError, "kernel_size must be >= 1"),
        # GaussianBlur2d holds no taps: its arguments are still checked when it is built.
        (lambda x: nf.GaussianBlur2d(0, (1.0, 1.0)), ParameterValueError, "kernel_size must be >= 1, got 0"),
        (lambda x: nf.GaussianBlur2d((3, -1), (1.0, 1.0)), ParameterValueError, "kernel_size must be >= 1"),
        (
            lambda x: nf.GaussianBlur2d((3, 5, 7), (1.0, 1.0)),
            ParameterTypeError,
            "kernel_size must be an int or a pair (h, w) of ints, got",
        ),
        (lambda x: nf.GaussianBlur2d(3.0, (1.0, 1.0)), ParameterTypeError, "kernel_size must be an integer"),
        (
            lambda x: nf.GaussianBlur2d(3, (1.0, 0.0)),
            ParameterValueError,
            "sigma must be a finite number > 0.0, got 0.0",
        ),
        (lambda x: nf.GaussianBlur2d(3, (1.0, 1.0), "mirror"), ParameterValueError, "border_type must be"),
        (lambda x: nf.BoxBlur(3, "mirror"), ParameterValueError, "border_type must be"),
        (
            lambda x: nf.UnsharpMask(3, "bad"),
            ParameterValueError,
            "sigma must be a pair (sy, sx) or a tensor",
        ),
        (
            lambda x: nf.UnsharpMask(3, (1.0, -1.0)),
            ParameterValueError,
            "sigma must be a finite number > 0.0",
        ),
        (lambda x: nf.UnsharpMask(3, torch.ones(2)), ParameterValueError, "or a tensor (B, 2), got a tensor"),
        (
            lambda x: nf.UnsharpMask(3, torch.ones(1, 2, requires_grad=True)),
            ParameterValueError,
            "sigma must be a tensor that does not require grad",
        ),
        (lambda x: nf.UnsharpMask(0, (1.0, 1.0)), ParameterValueError, "kernel_size must be >= 1"),
        (lambda x: nf.UnsharpMask(3, (1.0, 1.0), "mirror"), ParameterValueError, "border_type must be"),
        (lambda x: nf.Resample(0, 16000), ParameterValueError, "orig_freq must be a positive integer rate"),
        (lambda x: nf.Resample(16000, 8000, rolloff=2.0), ParameterValueError, "rolloff must be"),
        (lambda x: nf.Laplacian(4), ParameterValueError, "kernel_size must be odd sizes, got 4"),
        (lambda x: nf.Laplacian(3, "mirror"), ParameterValueError, "border_type must be"),
        (lambda x: nf.Sobel(eps=-1.0), ParameterValueError, "eps must be a finite number >= 0.0, got -1.0"),
        (
            lambda x: nf.DepthwiseConv1d(torch.ones(3, 3), stride=0),
            ParameterValueError,
            "stride must be >= 1",
        ),
        (
            lambda x: nf.DepthwiseConv1d(torch.ones(3, 3), padding="half"),
            ParameterValueError,
            "padding must be",
        ),
        (
            lambda x: nf.DepthwiseConv2d((torch.ones(3, 3), torch.ones(3, 3)), stride=(1, 0)),
            ParameterValueError,
            "stride must be >= 1, got 0",
        ),
        (
            lambda x: nf.DepthwiseConv2d(torch.ones(3, 3, 3), padding=(1, 2, 3)),
            ParameterValueError,
            "padding",
        ),
        (lambda x: nf.Resample(16000, 8000, backend="cuda"), ParameterValueError, "backend must be"),
        (lambda x: nf.FIRFilter(torch.ones(3), backend="gpu"), ParameterValueError, "backend must be"),
        (lambda x: nf.GaussianBlur2d(3, (1.0, 1.0), backend="gpu"), ParameterValueError, "backend must be"),
        # A complex or bool sigma tensor was read as real numbers (the imaginary part dropped, True as 1).
        (
            lambda x: nf.gaussian_blur2d(x[None], 3, torch.ones(1, 2, dtype=torch.complex64)),
            ParameterTypeError,
            "sigma must be a real tensor (B, 2), got a tensor of shape (1, 2) and dtype torch.complex64",
        ),
        (
            lambda x: nf.UnsharpMask(3, torch.ones(1, 2, dtype=torch.bool)),
            ParameterTypeError,
            "sigma must be a real tensor (B, 2)",
        ),
        (
            lambda x: nf.depthwise_conv1d(x, torch.ones(3, 3), backend="cuda"),
            ParameterValueError,
            "backend must be",
        ),
        (
            lambda x: nf.depthwise_conv1d(x.double(), torch.ones(3, 3), backend="triton"),
            BackendUnavailableError,
            "its kernels take float16, bfloat16, float32, not float64",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_errors(call, error, message):
    x = torch.randn(2, 3, 20)
    with pytest.raises(error) as info:
        call(x)
    assert message in str(info.value)


def test_auto_backend_on_cpu_is_torch():
    x = torch.randn(1, 2, 16)
    w = torch.randn(2, 3)
    assert torch.equal(nf.depthwise_conv1d(x, w), nf.depthwise_conv1d(x, w, backend="torch"))
    assert nf._DW2D.backend(None, device="cpu", dtype=torch.float32, numel=10) == "torch"
    assert nf._DW2D.backend(None, device="cuda", dtype=torch.float32, numel=10) in ("triton", "torch")
    assert nf._DW2D.backend(None, device="cuda", dtype=torch.float64, numel=10) == "torch"


# ---------------------------------------------------------------------------------------------
# GPU: the benchmark shapes' correctness on a real device


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_gpu_conv2d_large(layout, dtype, generator, cuda_device):
    x = random_tensor((2, 64, 130, 257), generator=generator).to(dtype).to(cuda_device)
    if layout == "channels_last":
        x = x.to(memory_format=torch.channels_last)
    w = (random_tensor((64, 7, 7), generator=generator) / 7).to(cuda_device)
    ref = torch.nn.functional.conv2d(x.double(), w.double()[:, None], padding=3, groups=64)
    y = nf.depthwise_conv2d(x, w, backend="triton")
    assert_close(y, ref, dtype=dtype, **_dtype_tol(dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("k", [3, 5, 7])
def test_gpu_channels_last_auto_dispatch(k, dtype, generator, cuda_device):
    """What backend=None gives a channels_last call (the stencil or cuDNN by the size rule), and the
    torch path on CUDA (cuDNN on the input directly), against float64."""
    x = random_tensor((2, 64, 33, 70), generator=generator).to(dtype).to(cuda_device)
    x = x.to(memory_format=torch.channels_last)
    w = (random_tensor((64, k, k), generator=generator) / k).to(cuda_device)
    ref = torch.nn.functional.conv2d(x.double(), w.double()[:, None], padding=k // 2, groups=64)
    for backend in (None, "torch"):
        y = nf.depthwise_conv2d(x, w, backend=backend)
        assert_close(y, ref, dtype=dtype, **_dtype_tol(dtype))
        assert y.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_gpu_ring_whole_row_tile(dtype, generator, cuda_device):
    """The ring with one tile per row (512 columns at the 7×7 default tile: WHOLE_W) and a short last band."""
    x = random_tensor((2, 8, 300, 512), generator=generator).to(dtype).to(cuda_device)
    w = (random_tensor((8, 7, 7), generator=generator) / 7).to(cuda_device)
    ref = torch.nn.functional.conv2d(x.double(), w.double()[:, None], padding=3, groups=8)
    assert_close(nf.depthwise_conv2d(x, w, backend="triton"), ref, dtype=dtype, **_dtype_tol(dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_gpu_long_separable(boundary, generator, cuda_device):
    """Separable filters with long taps on the shift register, unequal lengths: the default tile of
    ``_long_rows_kernel`` (2 columns per thread: the taps are loaded), one of 4 columns per thread and
    the strided rows' path (``_ring_kernel``, a load per tap)."""
    from nbxsig.kernels import depthwise as dk

    x = random_tensor((2, 3, 301, 389), generator=generator).to(cuda_device)
    wy = random_tensor((3, 31), generator=generator).to(cuda_device)
    wx = random_tensor((3, 17), generator=generator).to(cuda_device)
    ref = nf.depthwise_conv2d(x.double(), (wy.double(), wx.double()), boundary=boundary, backend="torch")
    with torch.no_grad():
        y = nf.depthwise_conv2d(x, (wy, wx), boundary=boundary, backend="triton")
        y4 = dk._separable_fused(
            x, wy, wx, stride=(1, 1), pads=(15, 15, 8, 8), boundary=boundary,
            config=("long", 128, 1, 200, 255, None),
        )  # fmt: skip
        ring = dk._separable_fused(
            x, wy, wx, stride=(1, 1), pads=(15, 15, 8, 8), boundary=boundary, config=("ring", 4, 128, 2)
        )
    assert_close(y, ref, dtype=torch.float32)
    assert_close(y4, ref, dtype=torch.float32)
    assert_close(ring, ref, dtype=torch.float32)


@pytest.mark.gpu
def test_gpu_long_rows_programs_fill_the_gpu(generator, cuda_device, monkeypatch):
    """The long path's grid is what the GPU holds at once: for each launch (the 31×31 and a 15×15 blur,
    taps as arguments, and 31×31 per-channel taps, loaded; interior and edge tiles) the second call's grid
    is SMs × the driver's occupancy at the compiled kernel's registers
    (``cuOccupancyMaxActiveBlocksPerMultiprocessor``), which :func:`resident_programs` reproduces; the
    first call, sized by the register cap before any kernel had compiled, never asks for more."""
    import ctypes

    from nbxsig.kernels import depthwise as dk
    from nbxsig.kernels._runtime import resident_programs

    driver = ctypes.CDLL("libcuda.so.1")
    launches = []
    kernel = dk._long_rows_kernel

    class Recording:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                compiled = kernel[grid](*args, **kwargs)
                launches.append(
                    (grid[0], kwargs["num_warps"], args[-1] // (2 * (kwargs["KH"] - 1)), compiled)
                )
                return compiled  # as Triton's launch does: the launcher reads its registers

            return launch

    monkeypatch.setattr(dk, "_long_rows_kernel", Recording())
    monkeypatch.setattr(dk, "_LONG_ROWS_REGISTERS", {})
    # Tall enough that every launch has rows for each program (2·(KH - 1) or more): 3 column tiles of 128,
    # the middle one inside the row.
    x = random_tensor((2, 3, 10560, 384), generator=generator).to(cuda_device)
    taps = random_tensor((3, 31), generator=generator).to(cuda_device)
    for _ in range(2):
        with torch.no_grad():
            nf.gaussian_blur2d(x, 31, (5.0, 5.0), backend="triton")  # shared taps: 4 columns, 1 warp
            nf.gaussian_blur2d(x, 15, (3.0, 3.0), backend="triton")
            dk.depthwise_conv2d_separable(x, taps, taps, stride=(1, 1), pads=(15,) * 4, boundary="reflect")
    assert len(launches) == 12  # interior and edge tiles, three filters, twice
    sms = torch.cuda.get_device_properties(cuda_device).multi_processor_count
    for (first, _, _, _), (grid, warps, most, compiled) in zip(launches[:6], launches[6:], strict=True):
        blocks = ctypes.c_int()
        status = driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(
            ctypes.byref(blocks), ctypes.c_void_p(compiled.function), 32 * warps, ctypes.c_size_t(0)
        )
        assert status == 0
        assert resident_programs(compiled.n_regs, warps) == blocks.value, (compiled.n_regs, warps)
        assert grid == min(sms * blocks.value, most)
        assert first <= grid


@pytest.mark.gpu
@pytest.mark.parametrize("k", [5, 31])
def test_gpu_gaussian_blur(k, generator, cuda_device):
    x = random_tensor((2, 3, 300, 517), generator=generator).to(cuda_device)
    ref = nf.gaussian_blur2d(x.double(), k, (1.5, 2.5), backend="torch")
    assert_close(nf.gaussian_blur2d(x, k, (1.5, 2.5), backend="triton"), ref, dtype=torch.float32)
    assert_close(
        nf.gaussian_blur2d(x.half(), k, (1.5, 2.5), backend="triton"), ref, dtype=torch.float16, atol=4e-3
    )


@pytest.mark.gpu
def test_gpu_fir_and_bank_and_gradients(generator, cuda_device):
    x = random_tensor((4, 8, 20000), generator=generator).to(cuda_device)
    w = (random_tensor((8, 129), generator=generator) / 12).to(cuda_device)
    ref = nf.depthwise_conv1d(x.double(), w.double(), backend="torch")
    assert_close(nf.depthwise_conv1d(x, w, backend="triton"), ref, dtype=torch.float32)
    bank = (random_tensor((64, 129), generator=generator) / 12).to(cuda_device)
    s = x[:, 0]
    assert_close(
        nf.filter_bank(s, bank, backend="triton"), nf.filter_bank(s.double(), bank.double(), backend="torch"),
        dtype=torch.float32,
    )  # fmt: skip
    xs = random_tensor((2, 4, 33, 65), generator=generator).to(cuda_device)
    ws = random_tensor((8, 5, 5), generator=generator).to(cuda_device)
    g = random_tensor((2, 8, 33, 65), generator=generator).to(cuda_device)
    for boundary in BOUNDARIES:

        def f(b, boundary=boundary):
            return lambda x, w: nf.depthwise_conv2d(x, w, boundary=boundary, backend=b)

        gx_ref, gw_ref = _grads(f("torch"), xs.double(), ws.double(), g.double())
        gx, gw = _grads(f("triton"), xs, ws, g)
        assert_close(gx, gx_ref, dtype=torch.float32, atol=1e-5)
        assert_close(gw, gw_ref, dtype=torch.float32, atol=1e-5)


@pytest.mark.gpu
def test_gpu_tensor_core_paths_keep_a_non_finite_sample_within_its_reach(generator, cuda_device):
    # The CPU tests' cases (make gpu-test runs only the gpu-marked tests) through tf32x3, whose split of
    # ±inf has inf - inf in its correction terms; the separable kernel at its default tile too.
    _filter_bank_non_finite(generator, cuda_device)
    _separable_dot_non_finite("zeros", [None, (16, 16, 16, 16, 4)], generator, cuda_device)
    _long_fir_non_finite("reflect", generator, cuda_device)
