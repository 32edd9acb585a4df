"""Gradients of nbxsig.stft: float64 gradcheck on the torch backend, Triton-vs-torch parity in float32."""

from __future__ import annotations

import pytest
import torch

import nbxsig.stft as S
from nbxsig.testing import assert_close, random_tensor


@pytest.mark.parametrize(
    ("n_fft", "hop", "center", "pad_mode", "normalized", "onesided"),
    [
        (8, 2, True, "reflect", False, True),
        (7, 3, True, "replicate", True, False),
        (6, 4, False, "constant", False, True),
        (8, 3, True, "circular", False, True),
    ],
    ids=str,
)
def test_stft_gradcheck_float64(n_fft, hop, center, pad_mode, normalized, onesided, generator):
    x = random_tensor((2, 19), generator=generator, dtype=torch.float64).requires_grad_()
    w = random_tensor((n_fft,), generator=generator, dtype=torch.float64, low=0.2, high=1.0).requires_grad_()

    def f(x, w):
        return S.stft(x, n_fft, hop, window=w, center=center, pad_mode=pad_mode, normalized=normalized,
                      onesided=onesided, return_complex=False, backend="torch")  # fmt: skip

    assert torch.autograd.gradcheck(f, (x, w))


@pytest.mark.parametrize(
    ("n_fft", "hop", "center", "length"), [(8, 2, True, None), (7, 3, False, 15), (8, 2, True, 30)]
)
def test_istft_gradcheck_float64(n_fft, hop, center, length, generator):
    spec = random_tensor((2, n_fft // 2 + 1, 6), generator=generator, dtype=torch.complex128).requires_grad_()
    w = torch.hamming_window(n_fft, dtype=torch.float64)

    def f(spec):
        return S.istft(spec, n_fft, hop, window=w, center=center, length=length, backend="torch")

    assert torch.autograd.gradcheck(f, (spec,))


STFT_CASES = [
    (20, 5, True, "reflect", False, True),
    (20, 7, True, "circular", True, False),
    (12, 4, False, "constant", False, True),
    (16, 4, True, "replicate", False, True),
    (16, 21, True, "reflect", False, True),  # hop > n_fft: samples between frames get zero gradient
    (160, 40, True, "reflect", True, True),  # fft path
    (130, 50, True, "constant", False, False),  # fft path, two-sided
]


@pytest.mark.parametrize(
    ("n_fft", "hop", "center", "pad_mode", "normalized", "onesided"), STFT_CASES, ids=str
)
def test_stft_gradient_parity(n_fft, hop, center, pad_mode, normalized, onesided, generator, device):
    x = random_tensor((2, 2 * n_fft + 9), generator=generator)
    w = torch.hann_window(n_fft)
    kwargs = dict(
        center=center, pad_mode=pad_mode, normalized=normalized, onesided=onesided, return_complex=False
    )
    out_t = S.stft(x.double().requires_grad_(), n_fft, hop, window=w.double(), backend="torch", **kwargs)
    grad = random_tensor(tuple(out_t.shape), generator=generator)
    grads = []
    for backend, dtype in (("torch", torch.float64), ("triton", torch.float32)):
        xx = x.to(device, dtype).requires_grad_()
        out = S.stft(xx, n_fft, hop, window=w.to(device, dtype), backend=backend, **kwargs)
        out.backward(grad.to(device, dtype))
        grads.append(xx.grad)
    assert grads[1].dtype == torch.float32
    assert_close(grads[1], grads[0], dtype="float32", rel_error=2e-6)


@pytest.mark.parametrize(
    ("n_fft", "hop", "center", "normalized", "length", "two_sided"),
    [
        (20, 5, True, False, None, False),
        (20, 5, True, True, 61, False),
        (12, 3, False, False, 40, False),
        (16, 4, True, False, None, True),
        (160, 40, True, False, 300, False),  # fft path
        (130, 50, False, True, None, True),
    ],
    ids=str,
)
def test_istft_gradient_parity(n_fft, hop, center, normalized, length, two_sided, generator, device):
    n_bins = n_fft if two_sided else n_fft // 2 + 1
    spec = random_tensor((2, n_bins, 9), generator=generator, dtype=torch.complex64)
    w = torch.hamming_window(n_fft)
    kwargs = dict(center=center, normalized=normalized, length=length, onesided=not two_sided)
    grads = []
    out_grad = None
    for backend, dtype in (("torch", torch.complex128), ("triton", torch.complex64)):
        s = spec.to(device, dtype).requires_grad_()
        y = S.istft(s, n_fft, hop, window=w.to(device, s.real.dtype), backend=backend, **kwargs)
        if out_grad is None:
            out_grad = random_tensor(tuple(y.shape), generator=generator)
        y.backward(out_grad.to(device, y.dtype))
        grads.append(s.grad)
    assert grads[1].dtype == torch.complex64
    assert_close(grads[1], grads[0], dtype="float32", rel_error=2e-6)


def test_istft_fwd_bwd_half_input(generator, device):
    spec = random_tensor((1, 11, 30), generator=generator, dtype=torch.float32)
    spec = torch.stack((spec, -spec), -1).to(device, torch.bfloat16).requires_grad_()
    w = torch.hann_window(20, device=device)
    y = S.istft(spec, 20, 5, window=w, backend="triton")
    y.square().sum().backward()
    assert spec.grad.dtype == torch.bfloat16 and torch.isfinite(spec.grad.float()).all()


@pytest.mark.gpu
@pytest.mark.parametrize(("n_fft", "hop"), [(7, 2), (20, 5), (1024, 256)], ids=str)
def test_cuda_gradient_parity(n_fft, hop, generator, cuda_device):
    x = random_tensor((2, 6 * n_fft), generator=generator)
    w = torch.hann_window(n_fft)
    grads = []
    for backend, dev, dtype in (("torch", "cpu", torch.float64), ("triton", cuda_device, torch.float32)):
        xx = x.to(dev, dtype).requires_grad_()
        ww = w.to(dev, dtype)
        y = S.istft(S.stft(xx, n_fft, hop, window=ww, backend=backend) * 1.5, n_fft, hop, window=ww,
                    length=x.shape[-1], backend=backend)  # fmt: skip
        y.square().sum().backward()
        grads.append(xx.grad.cpu())
    assert_close(grads[1], grads[0], dtype="float32", rel_error=2e-6)


def test_istft_gradient_of_a_non_dense_spectrum_is_contiguous(generator, device):
    # A strided view (every other frame) is not dense: the gradient comes back contiguous, as
    # AccumulateGrad wants for such a leaf, and still right.
    spec = random_tensor((2, 11, 24), generator=generator, dtype=torch.complex64)
    w = torch.hann_window(20)
    base = spec.to(device, copy=True).requires_grad_()
    S.istft(base[:, :, ::2], 20, 5, window=w.to(device), backend="triton").square().sum().backward()
    ref = spec.to(torch.complex128).requires_grad_()
    S.istft(ref[:, :, ::2], 20, 5, window=w.double(), backend="torch").square().sum().backward()
    assert_close(base.grad, ref.grad, dtype="float32", rel_error=2e-6)


@pytest.mark.parametrize("layout", ["stft-view", "contiguous", "real-contiguous"])
@pytest.mark.parametrize("tile_out", [False, True], ids=["strided-stores", "tile-stores"])
def test_istft_gradient_in_input_layout_is_adopted_without_copy(
    layout, tile_out, monkeypatch, generator, device
):
    # With GRAD_IN_INPUT_LAYOUT the Triton backward writes the gradient in the spectrum's own layout
    # (torch.stft's frequency-fastest view, contiguous complex, a real (..., 2) layout), so autograd
    # runs no copy after it (AccumulateGrad adopts the buffer) and the result is right.
    from nbxsig.kernels import stft as K

    monkeypatch.setattr(K, "GRAD_IN_INPUT_LAYOUT", True)
    monkeypatch.setattr(K, "UNR_BWD_TILE_OUT", tile_out)
    x = random_tensor((3, 97), generator=generator)
    w = torch.hann_window(20)
    spec = torch.stft(x, 20, 5, window=w, return_complex=True)  # (3, 11, 20), strides (220, 1, 11)
    if layout == "contiguous":
        spec = spec.contiguous()
    elif layout == "real-contiguous":
        spec = torch.view_as_real(spec).contiguous()
    gy = random_tensor((3, 97), generator=generator)
    leaf = spec.to(device, copy=True).requires_grad_()
    y = S.istft(leaf, 20, 5, window=w.to(device), length=97, backend="triton")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        y.backward(gy.to(device))
    # AccumulateGrad's copy into the leaf's layout allocates with new_empty_strided (the interpreter's
    # own host copies show up as copy_ either way, so those are not counted).
    events = [e.key for e in prof.key_averages()]
    assert "aten::new_empty_strided" not in events and "aten::contiguous" not in events, events
    assert leaf.grad.stride() == leaf.stride()
    ref = spec.to(torch.complex128 if spec.is_complex() else torch.float64).requires_grad_()
    S.istft(ref, 20, 5, window=w.double(), length=97, backend="torch").backward(gy.double())
    assert_close(leaf.grad, ref.grad, dtype="float32", rel_error=2e-6)


def test_gradients_with_a_non_contiguous_window(generator, device):
    # The Triton backwards read the window as a dense array too: a strided window, both directions,
    # against torch's float64 gradients.
    x = random_tensor((2, 90), generator=generator)
    w = random_tensor((40,), generator=generator, low=0.2, high=1.2).to(device)[::2]
    gy = random_tensor((2, 11, 19, 2), generator=generator)
    leaf = x.to(device, copy=True).requires_grad_()
    S.stft(leaf, 20, 5, window=w, return_complex=False, backend="triton").backward(gy.to(device))
    ref = x.double().requires_grad_()
    torch.view_as_real(torch.stft(ref, 20, 5, window=w.cpu().double(), return_complex=True)).backward(
        gy.double()
    )
    assert_close(leaf.grad, ref.grad, dtype="float32", rel_error=2e-6)

    spec = random_tensor((2, 11, 19), generator=generator, dtype=torch.complex64)
    gx = random_tensor((2, 90), generator=generator)
    leaf = spec.to(device, copy=True).requires_grad_()
    S.istft(leaf, 20, 5, window=w, length=90, backend="triton").backward(gx.to(device))
    ref = spec.to(torch.complex128).requires_grad_()
    torch.istft(ref, 20, 5, window=w.cpu().double(), length=90).backward(gx.double())
    assert_close(leaf.grad, ref.grad, dtype="float32", rel_error=2e-6)


@pytest.mark.parametrize("power", [1.0, 1.5], ids=str)
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_spectrogram_gradient_at_silence_is_zero_not_nan(power, backend, generator, device):
    # Digital silence makes bins exactly 0; |X|^p for 1 <= p < 2 was sqrt(re² + im²)^p, whose gradient
    # there is 0 · inf = NaN. torch's X.abs().pow(p) (torchaudio's spectrogram) gives 0.
    if backend == "torch":
        device = torch.device("cpu")
    x = torch.zeros(2, 40, dtype=torch.float64)
    x[:, 24:] = random_tensor((2, 16), generator=generator, dtype=torch.float64)
    w = torch.hann_window(8, dtype=torch.float64)
    ref = x.clone().requires_grad_()
    spec = torch.stft(ref, 8, 2, window=w, pad_mode="constant", return_complex=True).abs().pow(power)
    spec.sum().backward()
    dtype = torch.float64 if backend == "torch" else torch.float32
    leaf = x.to(device, dtype).requires_grad_()
    got = S.spectrogram(
        leaf, 8, 2, window=w.to(device, dtype), power=power, pad_mode="constant", backend=backend
    )
    assert_close(got, spec.detach(), dtype=dtype)
    got.sum().backward()
    assert_close(leaf.grad, ref.grad, dtype=dtype)
