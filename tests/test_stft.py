"""nbxsig.stft forward/inverse against a float64 per-frame FFT definition and torch.stft/torch.istft.

Broad parametrisations run on the torch backend (fast); the Triton backend runs a representative
subset that reaches every kernel path (dense and fft, every pad mode, envelope division, length
cut/pad, two-sided, power output) on short signals, under the interpreter on CPU.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import nbxsig.stft as S
from nbxsig.errors import BackendUnavailableError, ParameterTypeError, ParameterValueError
from nbxsig.kernels import _launch as L
from nbxsig.kernels import stft as K
from nbxsig.testing import assert_close, random_tensor

N_FFTS = [1, 2, 5, 7, 12, 15, 16, 20, 27, 50, 400, 512, 1000, 1024, 1025, 2048]
NP_PAD = {"reflect": "reflect", "constant": "constant", "replicate": "edge", "circular": "wrap"}


def definition(x, n_fft, hop, window, *, center=True, pad_mode="reflect", normalized=False, onesided=True):
    """Per-frame ``fft(x_pad[t·hop : t·hop + n_fft] · w)`` in float64 numpy: the definition."""
    x = np.asarray(x, dtype=np.complex128 if torch.is_tensor(x) and x.is_complex() else np.float64)
    lead, length = x.shape[:-1], x.shape[-1]
    x = x.reshape(-1, length)
    w = np.ones(n_fft) if window is None else np.asarray(window, dtype=np.float64)
    if len(w) < n_fft:
        left = (n_fft - len(w)) // 2
        w = np.pad(w, (left, n_fft - len(w) - left))
    if center:
        x = np.pad(x, ((0, 0), (n_fft // 2, n_fft // 2)), mode=NP_PAD[pad_mode])
    n_frames = 1 + (x.shape[-1] - n_fft) // hop
    frames = np.stack([x[:, t * hop : t * hop + n_fft] * w for t in range(n_frames)], axis=1)
    spec = np.fft.fft(frames, axis=-1)
    if onesided:
        spec = spec[..., : n_fft // 2 + 1]
    if normalized:
        spec = spec / np.sqrt(n_fft)
    return torch.from_numpy(np.swapaxes(spec, -1, -2).reshape(*lead, spec.shape[-1], n_frames).copy())


def _hop_for(n_fft):
    return max(1, n_fft // 4)


def _len_for(n_fft, hop, frames=3):
    return max(n_fft // 2 + 1, n_fft + (frames - 1) * hop - 2 * (n_fft // 2) + 1)


# ---------------------------------------------------------------------------------------------
# Definition: every n_fft, both backends
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n_fft", N_FFTS, ids=lambda n: f"N{n}")
def test_torch_backend_matches_definition(n_fft, generator):
    hop = _hop_for(n_fft)
    x = random_tensor((2, _len_for(n_fft, hop, frames=5)), generator=generator, dtype=torch.float64)
    w = torch.hann_window(n_fft, dtype=torch.float64)
    out = S.stft(x, n_fft, hop, window=w, backend="torch")
    assert out.dtype == torch.complex128
    assert_close(out, definition(x, n_fft, hop, w), atol=1e-14 * n_fft)


@pytest.mark.parametrize("n_fft", N_FFTS, ids=lambda n: f"N{n}")
def test_triton_matches_definition(n_fft, generator, device):
    hop = _hop_for(n_fft)
    x = random_tensor((2, _len_for(n_fft, hop, frames=3)), generator=generator)
    w = random_tensor((n_fft,), generator=generator, low=0.1, high=1.0)
    out = S.stft(x.to(device), n_fft, hop, window=w.to(device), backend="triton")
    assert out.dtype == torch.complex64
    assert_close(out, definition(x, n_fft, hop, w), dtype="float32", rel_error=2e-6)


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("pad_mode", ["reflect", "constant", "replicate", "circular"])
@pytest.mark.parametrize("n_fft", [20, 130], ids=lambda n: f"N{n}")
def test_pad_modes(n_fft, pad_mode, backend, generator, device):
    hop = 7 if n_fft == 20 else 33
    x = random_tensor((3, 2 * n_fft + 5), generator=generator)
    w = torch.hann_window(n_fft, periodic=False)
    out = S.stft(x.to(device), n_fft, hop, window=w.to(device), pad_mode=pad_mode, backend=backend)
    assert_close(out, definition(x, n_fft, hop, w, pad_mode=pad_mode), dtype="float32", rel_error=2e-6)


WINDOWS = {
    "hann": lambda n: torch.hann_window(n),
    "hann_symmetric": lambda n: torch.hann_window(n, periodic=False),
    "hamming": lambda n: torch.hamming_window(n),
    "none": lambda n: None,
}


@pytest.mark.parametrize("window", list(WINDOWS))
@pytest.mark.parametrize(
    ("n_fft", "hop", "win_length", "center", "normalized", "onesided"),
    [
        (20, 5, None, True, False, True),
        (20, 25, 16, False, False, True),  # hop > win
        (27, 4, 21, True, True, False),
        (16, 3, 11, False, True, True),
        (256, 64, 200, True, False, True),
        (300, 75, None, False, True, False),
    ],
    ids=lambda v: str(v),
)
def test_options_against_torch_stft(
    window, n_fft, hop, win_length, center, normalized, onesided, generator, device
):
    x = random_tensor((2, 3 * n_fft + 11), generator=generator, dtype=torch.float64)
    w = WINDOWS[window](win_length or n_fft)
    w = w.double() if w is not None else None
    kwargs = dict(
        hop_length=hop,
        win_length=win_length,
        window=w,
        center=center,
        normalized=normalized,
        onesided=onesided,
    )
    ref = torch.stft(x, n_fft, return_complex=True, **kwargs)
    assert_close(S.stft(x, n_fft, backend="torch", **kwargs), ref, atol=1e-13)
    if window == "hann" or n_fft == 20:  # the Triton subset: every option once
        kw32 = dict(kwargs, window=w.float().to(device) if w is not None else None)
        out = S.stft(x.float().to(device), n_fft, backend="triton", **kw32)
        assert_close(out, ref, dtype="float32", rel_error=2e-6)


def test_random_window_and_real_layout(generator, device):
    x = random_tensor((4, 61), generator=generator)
    w = random_tensor((9,), generator=generator)
    for backend in ("torch", "triton"):
        out = S.stft(x.to(device), 12, 3, 9, w.to(device), return_complex=False, backend=backend)
        assert out.shape == (4, 7, 21, 2)
        ref = torch.view_as_real(definition(x, 12, 3, w))
        assert_close(out, ref, dtype="float32", rel_error=2e-6)


@pytest.mark.parametrize("layout", ["view_as_real", "odd_offset", "odd_strides"])
def test_istft_real_layout_in_any_memory(layout, generator):
    """The torch path views a real-layout spectrum as complex where its memory allows and copies it
    otherwise; both give torch.istft's result."""
    spec = torch.stft(random_tensor((2, 90), generator=generator), 16, 4, return_complex=True)
    w = torch.hann_window(16)
    if layout == "view_as_real":
        real = torch.view_as_real(spec)
    elif layout == "odd_offset":  # even strides, odd start: not viewable as complex
        flat = torch.empty(spec.numel() * 2 + 1)
        real = flat[1:].view(*spec.shape, 2)
        real.copy_(torch.view_as_real(spec))
    else:
        real = torch.stack((spec.real, spec.imag, spec.real), dim=-1)[..., :2]  # strides of 3
    assert_close(S.istft(real, 16, 4, window=w, backend="torch"), torch.istft(spec, 16, 4, window=w))


def test_complex_input_is_two_sided(generator):
    x = random_tensor((2, 50), generator=generator, dtype=torch.complex128)
    w = torch.hann_window(16, dtype=torch.float64)
    out = S.stft(x, 16, 4, window=w)
    assert out.shape == (2, 16, 13)
    assert_close(out, torch.stft(x, 16, 4, window=w, return_complex=True), atol=1e-13)


@pytest.mark.parametrize("pad_mode", ["reflect", "constant", "replicate", "circular"])
@pytest.mark.parametrize(("n_fft", "win_length", "hop"), [(16, 10, 3), (12, 4, 12), (40, 30, 7), (16, 9, 5)])
def test_align_to_window(n_fft, win_length, hop, pad_mode, generator, device):
    """torch.stft's align_to_window (center=False): the signal padded by (n_fft - win_length) // 2 on
    both sides with pad_mode, so frame t's window starts at sample t·hop. (It was not an argument.)"""
    x = random_tensor((2, 3 * n_fft + 1), generator=generator, dtype=torch.float64).requires_grad_()
    w = random_tensor((win_length,), generator=generator, dtype=torch.float64, low=0.2, high=1.2)
    args = (n_fft, hop, win_length, w, False, pad_mode)
    left = (n_fft - win_length) // 2
    padded = torch.nn.functional.pad(x.detach()[:, None], (left, left), mode=pad_mode)[:, 0]
    expected = definition(padded, n_fft, hop, w, center=False)
    if (n_fft - win_length) % 2 == 0:  # torch.stft itself fails on an odd difference (its frame count)
        expected = torch.stft(x, *args, return_complex=True, align_to_window=True)
        (grad,) = torch.autograd.grad(expected.abs().sum(), x)
    out = S.stft(x, *args, align_to_window=True, backend="torch")
    assert out.shape == expected.shape
    assert_close(out, expected, atol=1e-12)
    assert_close(S.STFT(*args, align_to_window=True, backend="torch")(x), expected, atol=1e-12)
    x32 = x.detach().float().to(device).requires_grad_()
    out = S.stft(x32, *args[:3], w.float().to(device), *args[4:], align_to_window=True, backend="triton")
    assert_close(out, expected, dtype="float32", rel_error=2e-6)
    if (n_fft - win_length) % 2 == 0:
        (grad32,) = torch.autograd.grad(out.abs().sum(), x32)
        assert_close(grad32, grad, dtype="float32", rel_error=1e-5)


def test_align_to_window_errors(generator):
    x = random_tensor((50,), generator=generator)
    for center, align in ((True, True), (True, False)):  # torch refuses it with center=True, even False
        message = rf"align_to_window must be None for center=True \(as in torch.stft\), got {align}"
        with pytest.raises(ParameterValueError, match=message):
            S.stft(x, 16, 4, 10, center=center, align_to_window=align)
        with pytest.raises(ParameterValueError, match="align_to_window must be None for center=True"):
            S.STFT(16, 4, 10, center=center, align_to_window=align)
    with pytest.raises(ParameterTypeError, match="align_to_window must be a bool, got 1"):
        S.stft(x, 16, 4, 10, center=False, align_to_window=1)
    # torch.stft checks n_fft against the unpadded signal (the padding lies under the window's zeros).
    with pytest.raises(ParameterValueError, match="n_fft must be <= the padded signal length 50"):
        S.stft(x, 60, 4, 20, center=False, align_to_window=True)


def test_return_complex_none(generator):
    """torch.stft's return_complex=None (complex for complex data, refused for real data, where
    nbxsig's default applies); istft keeps torch's bool."""
    x = random_tensor((2, 50), generator=generator, dtype=torch.complex128)
    w = torch.hann_window(16, dtype=torch.float64)
    expected = torch.stft(x, 16, 4, window=w, return_complex=None)
    assert_close(S.stft(x, 16, 4, window=w, return_complex=None), expected, atol=1e-13)
    assert_close(S.STFT(16, 4, window=w, return_complex=None)(x), expected, atol=1e-13)
    assert S.stft(x.real, 16, 4, window=w, return_complex=None).dtype == torch.complex128
    with pytest.raises(ParameterTypeError, match="return_complex must be a bool, got None"):
        S.ISTFT(16, 4, return_complex=None)


@pytest.mark.parametrize("lead", [(), (3,), (2, 3), (2, 1, 2)], ids=lambda s: f"lead{len(s)}")
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_leading_dims(lead, backend, generator, device):
    x = random_tensor((*lead, 45), generator=generator)
    w = torch.hann_window(20)
    out = S.stft(x.to(device), 20, 5, window=w.to(device), backend=backend)
    assert out.shape == (*lead, 11, 10)
    flat = S.stft(x.reshape(-1, 45), 20, 5, window=w, backend="torch")
    assert_close(out, flat.reshape(out.shape), dtype="float32")
    y = S.istft(out, 20, 5, window=w.to(device), length=45, backend=backend)
    assert y.shape == (*lead, 45)
    assert_close(y, x, dtype="float32", atol=1e-5)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_non_contiguous_input(backend, generator, device):
    base = random_tensor((60, 3), generator=generator).to(device)
    x = base.t()  # (3, 60), stride (1, 3)
    w = torch.hann_window(20, device=device)
    out = S.stft(x, 20, 5, window=w, backend=backend)
    assert_close(out, S.stft(x.contiguous(), 20, 5, window=w, backend="torch"), dtype="float32")
    spec = S.stft(x.contiguous(), 20, 5, window=w, backend="torch")
    strided = spec.transpose(-1, -2).contiguous().transpose(-1, -2)  # same values, T-major storage
    y = S.istft(strided, 20, 5, window=w, length=60, backend=backend)
    assert_close(y, x, dtype="float32", atol=1e-5)


def _strided_window(n, generator, device):
    return (random_tensor((2 * n,), generator=generator, low=0.2, high=1.2).to(device))[::2]


def _broadcast_window(n, generator, device):
    return (random_tensor((1,), generator=generator, low=0.2, high=1.2).to(device)).expand(n)


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("make_window", [_strided_window, _broadcast_window], ids=["strided", "broadcast"])
@pytest.mark.parametrize(("n_fft", "win_length"), [(20, None), (20, 14), (64, None)], ids=str)  # 64: fft path
def test_non_contiguous_window(backend, make_window, n_fft, win_length, generator, device):
    # The Triton kernels take no window strides: a strided or broadcast (stride 0) window was read as
    # if dense. Every entry point that takes a window, against torch in float64.
    x = random_tensor((2, 150), generator=generator).to(device)
    w = make_window(win_length or n_fft, generator, device)
    kw = dict(win_length=win_length, backend=backend)
    ref_w = w.cpu().double()
    ref = torch.stft(x.cpu().double(), n_fft, 5, win_length, ref_w, return_complex=True)
    assert_close(S.stft(x, n_fft, 5, window=w, **kw), ref, dtype="float32")
    assert_close(S.spectrogram(x, n_fft, 5, window=w, **kw), ref.abs() ** 2, dtype="float32")
    spec = ref.to(device, torch.complex64)
    y_ref = torch.istft(ref, n_fft, 5, win_length, ref_w, length=150)
    for _ in range(2):  # the second call finds no plan either (the window is copied)
        assert_close(S.istft(spec, n_fft, 5, window=w, length=150, **kw), y_ref, dtype="float32")


def test_non_contiguous_window_is_not_planned(plans, monkeypatch, generator):
    # A plan would keep the contiguous copy of the window; an in-place change of the window's storage
    # (or a .data assignment) must be seen by the next call.
    monkeypatch.setattr(S, "_STFT_PLANS", {})
    x = random_tensor((1, 160), generator=generator)
    base = random_tensor((24,), generator=generator, low=0.2, high=1.2)
    w = base[::2]
    spec = torch.stft(x, 12, 3, window=torch.hann_window(12), return_complex=True)
    for _ in range(2):
        y = S.istft(spec, 12, 3, window=w, length=160, backend="triton")
        assert_close(y, _istft_ref(spec, 12, 3, w, 160), dtype="float32")
        X = S.stft(x, 12, 3, window=w, backend="triton")
        ref = torch.stft(x.double(), 12, 3, window=w.double(), return_complex=True)
        assert_close(X, ref, dtype="float32")
        w.data = random_tensor((24,), generator=generator, low=0.2, high=1.2)[::2]
    assert not plans and not S._STFT_PLANS


def test_short_window_plan_sees_data_assignment(monkeypatch, generator):
    # A short window is padded to n_fft once and the plan keeps that copy: a .data assignment of
    # equal shape (no version bump), and one that lands on a freed storage's address, must replan.
    monkeypatch.setattr(S, "_STFT_PLANS", {})
    monkeypatch.setattr(S, "_ISTFT_PLANS", {})
    x = random_tensor((2, 300), generator=generator)
    w = random_tensor((16,), generator=generator, low=0.2, high=1.2)
    spec = torch.stft(x, 32, 8, win_length=16, window=torch.hann_window(16), return_complex=True)
    for _ in range(3):
        X = S.stft(x, 32, 8, win_length=16, window=w, return_complex=True, backend="triton")
        ref = torch.stft(x.double(), 32, 8, win_length=16, window=w.double(), return_complex=True)
        assert_close(X, ref, dtype="float32")
        y = S.istft(spec, 32, 8, win_length=16, window=w, length=300, backend="triton")
        assert_close(y, _istft_ref(spec, 32, 8, w, 300, win_length=16), dtype="float32")
        w.data = random_tensor((16,), generator=generator, low=0.2, high=1.2)
    assert S._STFT_PLANS and S._ISTFT_PLANS


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_inference_mode(backend, generator):
    # The serving pattern: tensors made under torch.inference_mode have no version counter, which the
    # Triton path's plans key on (it raised "Inference tensors do not track version counter").
    x = random_tensor((2, 300), generator=generator)
    w = random_tensor((32,), generator=generator, low=0.2, high=1.2)
    ref = torch.stft(x.double(), 32, 8, window=w.double(), return_complex=True)
    with torch.inference_mode():
        xi, wi = x.clone(), w.clone()
        for _ in range(2):  # the second call would find a plan
            X = S.stft(xi, 32, 8, window=wi, return_complex=True, backend=backend)
            y = S.istft(X, 32, 8, window=wi, length=300, backend=backend)
            p = S.spectrogram(xi, 32, 8, window=wi, backend=backend)
    assert_close(X, ref, dtype="float32")
    assert_close(y, x.double(), dtype="float32")
    assert_close(p, ref.abs() ** 2, dtype="float32")


@pytest.mark.filterwarnings("ignore:A window was not provided")  # (torch's; the default is the subject)
@pytest.mark.parametrize("short_window", ["given", "default"])
def test_plan_made_in_inference_mode_serves_a_gradient_call(short_window, generator, monkeypatch):
    """A Triton plan made under torch.inference_mode holds the window it padded there (an inference
    tensor); the same call later with a gradient reused it and autograd refused to save it."""
    monkeypatch.setattr(S, "_STFT_PLANS", {})
    monkeypatch.setattr(S, "_ISTFT_PLANS", {})
    x = random_tensor((2, 120), generator=generator)
    w = random_tensor((9,), generator=generator, low=0.2, high=1.2) if short_window == "given" else None
    spec = torch.stft(x, 12, 3, 9, w, return_complex=True)
    with torch.inference_mode():
        S.stft(x, 12, 3, 9, w, backend="triton")
        S.istft(spec, 12, 3, 9, w, length=120, backend="triton")
    xg, sg = x.clone().requires_grad_(), spec.clone().requires_grad_()
    S.stft(xg, 12, 3, 9, w, backend="triton").abs().sum().backward()
    S.istft(sg, 12, 3, 9, w, length=120, backend="triton").pow(2).sum().backward()
    x64, s64 = x.double().requires_grad_(), spec.to(torch.complex128).requires_grad_()
    w64 = None if w is None else w.double()
    torch.stft(x64, 12, 3, 9, w64, return_complex=True).abs().sum().backward()
    torch.istft(s64, 12, 3, 9, w64, length=120).pow(2).sum().backward()
    assert_close(xg.grad, x64.grad, dtype="float32")
    assert_close(sg.grad, s64.grad, dtype="float32")


@pytest.mark.parametrize("n_fft", [20, 400, 4096])
def test_torch_backend_is_torch_fft_outside_an_export(n_fft, generator, monkeypatch):
    # The CPU path runs torch.fft (torch.stft's algorithm: the same float32 bits), never the dense
    # n_fft² basis, which cost 5-50x torch's time and, at n_fft 65536, a 34 GB table.
    from nbxsig.reference import stft as ref_stft

    def no_basis(*args):
        raise AssertionError("the dense DFT basis was built outside an ONNX export")

    monkeypatch.setattr(ref_stft, "_forward_basis", no_basis)
    monkeypatch.setattr(ref_stft, "_inverse_basis", no_basis)
    x = random_tensor((2, 3 * n_fft), generator=generator)
    w = torch.hann_window(n_fft)
    X = S.stft(x, n_fft, n_fft // 4, window=w, return_complex=True, backend="torch")
    assert torch.equal(X, torch.stft(x, n_fft, n_fft // 4, window=w, return_complex=True))
    two_sided = torch.stft(x, n_fft, n_fft // 4, window=w, return_complex=True, onesided=False)
    for spec, kw in ((X, {}), (two_sided, {"onesided": False}), (two_sided, {"return_complex": True})):
        y = S.istft(spec, n_fft, n_fft // 4, window=w, backend="torch", **kw)
        assert_close(y, torch.istft(spec.to(torch.complex128), n_fft, n_fft // 4, window=w.double(), **kw))


def test_lazily_conjugated_input_and_window(generator):
    # torch takes tensors with the lazy conjugate bit; view_as_real (and the kernels) do not.
    x = random_tensor((2, 100), generator=generator, dtype=torch.complex128)
    wr = random_tensor((20,), generator=generator, dtype=torch.float64, low=0.2, high=1.2)
    wc = random_tensor((20,), generator=generator, dtype=torch.complex128) + 2
    for xx, w in ((x.conj(), wr), (x, wc.conj()), (x.conj(), wc.conj())):
        ref = torch.stft(xx, 20, 5, window=w, return_complex=True)
        assert_close(S.stft(xx, 20, 5, window=w), ref, dtype="float64")
        y = S.istft(ref.conj(), 20, 5, window=w, onesided=False, return_complex=True, length=100)
        assert_close(
            y, torch.istft(ref.conj(), 20, 5, window=w, return_complex=True, length=100), dtype="float64"
        )


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_istft_lazily_conjugated_spectrum(backend, generator, device):
    w = torch.hann_window(20) + 0.1
    spec = random_tensor((2, 11, 25), generator=generator, dtype=torch.complex64)
    ref = torch.istft(spec.to(torch.complex128).conj(), 20, 5, window=w.double(), length=120)
    y = S.istft(spec.to(device).conj(), 20, 5, window=w.to(device), length=120, backend=backend)
    assert_close(y, ref, dtype="float32")
    # The gradient flows back through the resolved copy to the conjugated leaf.
    leaf = spec.to(device, copy=True).requires_grad_()
    S.istft(leaf.conj(), 20, 5, window=w.to(device), length=120, backend=backend).square().sum().backward()
    ref_leaf = spec.to(torch.complex128).requires_grad_()
    torch.istft(ref_leaf.conj(), 20, 5, window=w.double(), length=120).square().sum().backward()
    assert_close(leaf.grad, ref_leaf.grad, dtype="float32", rel_error=2e-6)


def test_istft_complex_window_divides_by_sum_of_squared_window(generator):
    # torch.istft's envelope is Σ w² (window.pow(2)), complex for a complex window -- not Σ |w|².
    x = random_tensor((2, 160), generator=generator, dtype=torch.complex128)
    wc = random_tensor((20,), generator=generator, dtype=torch.complex128) + 2
    for win_length, center in ((20, True), (20, False), (16, True)):
        w = wc[:win_length]
        spec = torch.stft(x, 20, 5, win_length, w, center=center, return_complex=True)
        kw = dict(win_length=win_length, center=center, return_complex=True, length=160)
        y = S.istft(spec, 20, 5, window=w, **kw)
        assert_close(y, torch.istft(spec, 20, 5, window=w, **kw), dtype="float64")
        assert_close(y, x, dtype="float64")  # perfect reconstruction


# ---------------------------------------------------------------------------------------------
# Inverse
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize(
    ("n_fft", "hop", "win_length", "center", "window", "length"),
    [
        (20, 5, None, True, "hann", None),
        (20, 5, None, True, "hann", 37),  # shorter
        (20, 5, None, True, "hann", 70),  # longer: zero padded
        (12, 3, None, False, "hamming", None),
        (12, 4, 9, True, "hamming", None),
        (27, 9, None, True, "none", 50),
        (200, 50, 160, True, "hann", None),  # fft path
        (200, 50, None, False, "hamming", 260),
    ],
    ids=lambda v: str(v),
)
def test_istft_against_torch_istft(
    backend, n_fft, hop, win_length, center, window, length, generator, device
):
    x = random_tensor((2, 3 * n_fft), generator=generator, dtype=torch.float64)
    w = WINDOWS[window](win_length or n_fft)
    w = w.double() if w is not None else None
    kwargs = dict(hop_length=hop, win_length=win_length, window=w, center=center)
    spec = torch.stft(x, n_fft, return_complex=True, **kwargs)
    ref = torch.istft(spec, n_fft, length=length, **kwargs)
    if backend == "torch":
        assert_close(S.istft(spec, n_fft, length=length, backend="torch", **kwargs), ref, atol=1e-13)
    else:
        kw32 = dict(kwargs, window=w.float().to(device) if w is not None else None)
        out = S.istft(spec.to(torch.complex64).to(device), n_fft, length=length, backend="triton", **kw32)
        assert_close(out, ref, dtype="float32", rel_error=2e-6)


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize(("n_fft", "hop"), [(20, 5), (16, 4), (7, 2), (128, 32)], ids=str)
@pytest.mark.parametrize("normalized", [False, True])
def test_round_trip(backend, n_fft, hop, normalized, generator, device):
    x = random_tensor((3, 4 * n_fft + 3), generator=generator).to(device)
    w = torch.hann_window(n_fft, device=device)
    spec = S.stft(x, n_fft, hop, window=w, normalized=normalized, backend=backend)
    y = S.istft(spec, n_fft, hop, window=w, normalized=normalized, length=x.shape[-1], backend=backend)
    assert_close(y, x, dtype="float32", atol=2e-6)


def test_istft_two_sided_input_and_complex_output(generator):
    x = random_tensor((2, 80), generator=generator, dtype=torch.float64)
    w = torch.hann_window(16, dtype=torch.float64)
    spec = torch.stft(x, 16, 4, window=w, onesided=False, return_complex=True)
    for backend in ("torch", "triton"):
        dt = torch.complex128 if backend == "torch" else torch.complex64
        ww = w if backend == "torch" else w.float()
        out = S.istft(spec.to(dt), 16, 4, window=ww, onesided=False, backend=backend)
        assert_close(out, torch.istft(spec, 16, 4, window=w, onesided=False), dtype="float32")
    xc = random_tensor((2, 80), generator=generator, dtype=torch.complex128)
    spec = S.stft(xc, 16, 4, window=w)
    out = S.istft(spec, 16, 4, window=w, return_complex=True, length=80)
    assert_close(out, xc, dtype="float64", atol=1e-13)


def test_istft_accepts_real_layout(generator, device):
    x = random_tensor((2, 100), generator=generator).to(device)
    w = torch.hann_window(20, device=device)
    spec = S.stft(x, 20, 5, window=w, return_complex=False)
    for backend in ("torch", "triton"):
        assert_close(
            S.istft(spec, 20, 5, window=w, length=100, backend=backend), x, dtype="float32", atol=2e-6
        )


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_nola_default_divides_where_envelope_is_nonzero(backend, generator, device):
    # Hann with center=False: the envelope is exactly 0 at sample 0, where torch.istft raises.
    x = random_tensor((2, 100), generator=generator, dtype=torch.float64)
    w = torch.hann_window(20, dtype=torch.float64)
    spec = torch.stft(x, 20, 5, window=w, center=False, return_complex=True)
    with pytest.raises(RuntimeError):
        torch.istft(spec, 20, 5, window=w, center=False)
    ww = w if backend == "torch" else w.float()
    sp = spec if backend == "torch" else spec.to(torch.complex64)
    y = S.istft(sp.to(device), 20, 5, window=ww.to(device), center=False, backend=backend)
    assert torch.isfinite(y).all()
    assert y[:, 0].abs().max() < 1e-6  # undivided sum of zero-weighted samples
    assert_close(y[:, 1:], x[:, 1 : y.shape[1]], dtype="float32", atol=1e-5)
    with pytest.raises(ParameterValueError, match="NOLA"):
        S.istft(spec, 20, 5, window=w, center=False, strict_nola=True)


@pytest.mark.filterwarnings("ignore:The length of signal is shorter than the length parameter")  # (torch's)
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_istft_single_centred_frame_of_even_n_fft(backend, generator, device):
    """One frame of an even n_fft, centred, no length: the trim leaves no sample. torch.istft refuses it
    (an internal error on the empty envelope); nbxsig returned an empty tensor. With length, both pad."""
    spec = random_tensor((2, 9, 1), generator=generator, dtype=torch.complex128)
    w = torch.hann_window(16, dtype=torch.float64) + 0.1
    with pytest.raises(RuntimeError):
        torch.istft(spec, 16, 4, window=w)
    spec32, w32 = spec.to(device, torch.complex64), w.to(device, torch.float32)
    message = r"input must be a spectrum of more than one frame for an even n_fft=16 with center=True"
    with pytest.raises(ParameterValueError, match=message):
        S.istft(spec32, 16, 4, window=w32, backend=backend)
    with pytest.raises(ParameterValueError, match=message):
        S.ISTFT(16, 4, window=w32, backend=backend)(spec32)
    expected = torch.istft(spec, 16, 4, window=w, length=10)
    assert_close(S.istft(spec32, 16, 4, window=w32, length=10, backend=backend), expected, dtype="float32")


# ---------------------------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_batch_consistency(backend, generator, device):
    x = random_tensor((4, 90), generator=generator).to(device)
    w = torch.hann_window(20, device=device)
    batched = S.stft(x, 20, 5, window=w, backend=backend)
    single = torch.stack([S.stft(x[i], 20, 5, window=w, backend=backend) for i in range(4)])
    assert torch.equal(batched, single)
    y = S.istft(batched, 20, 5, window=w, backend=backend)
    y1 = torch.stack([S.istft(batched[i], 20, 5, window=w, backend=backend) for i in range(4)])
    assert torch.equal(y, y1)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_nan_changes_only_frames_containing_it(backend, generator, device):
    n_fft, hop, j = 20, 5, 47
    x = random_tensor((1, 120), generator=generator)
    x[0, j] = float("nan")
    out = S.stft(x.to(device), n_fft, hop, window=torch.hann_window(n_fft, device=device), backend=backend)
    bad_frames = torch.isnan(out[0]).any(dim=0).nonzero().flatten().tolist()
    # padded index p = j + n_fft//2 lies in frames t with t·hop <= p < t·hop + n_fft
    p = j + n_fft // 2
    expected = [t for t in range(out.shape[-1]) if t * hop <= p < t * hop + n_fft]
    assert bad_frames == expected


def test_spectrogram_power_and_complex(generator, device):
    x = random_tensor((2, 150), generator=generator)
    w = torch.hann_window(40)
    ref = definition(x, 40, 10, w)
    for backend in ("torch", "triton"):
        for power in (2.0, 1.0, 0.5):
            out = S.spectrogram(x.to(device), 40, 10, window=w.to(device), power=power, backend=backend)
            assert_close(out, ref.abs() ** power, dtype="float32", rel_error=2e-6)
        cplx = S.spectrogram(x.to(device), 40, 10, window=w.to(device), power=None, backend=backend)
        assert_close(cplx, ref, dtype="float32", rel_error=2e-6)
    # fft path (n_fft above the dense cut), fused power kernel
    w = torch.hann_window(160)
    out = S.spectrogram(x.to(device), 160, 40, window=w.to(device), backend="triton")
    assert_close(out, definition(x, 160, 40, w).abs() ** 2, dtype="float32", rel_error=2e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n_fft", [20, 400], ids=lambda n: f"N{n}")
def test_half_precision_input(dtype, n_fft, generator, device):
    x = random_tensor((2, n_fft + 40), generator=generator, dtype=dtype)
    w = torch.hann_window(n_fft)
    out = S.stft(x.to(device), n_fft, n_fft // 4, window=w.to(device), backend="triton")
    assert out.dtype == torch.complex64
    # the input is already rounded: compare with the definition on those rounded values
    assert_close(out, definition(x.double(), n_fft, n_fft // 4, w), dtype="float32", rel_error=2e-6)
    y = S.istft(out.to(device), n_fft, n_fft // 4, window=w.to(device), length=x.shape[-1], backend="triton")
    assert_close(y, x.double(), dtype="float32", atol=1e-5)
    half_spec = torch.view_as_real(out).to(dtype)  # a real-layout half-precision spectrum
    y = S.istft(half_spec, n_fft, n_fft // 4, window=w.to(device), length=x.shape[-1], backend="triton")
    ref = S.istft(half_spec.double().cpu(), n_fft, n_fft // 4, window=w.double(), length=x.shape[-1])
    assert_close(y, ref, dtype="float32", rel_error=2e-6)


def test_tf32_precision_setting(generator, device):
    x = random_tensor((2, 300), generator=generator)
    w = torch.hann_window(20)
    old = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")
        out = S.stft(x.to(device), 20, 5, window=w.to(device), backend="triton")
        y = S.istft(out, 20, 5, window=w.to(device), length=300, backend="triton")
    finally:
        torch.set_float32_matmul_precision(old)
    assert_close(out, definition(x, 20, 5, w), dtype="tf32", rel_error=1e-3)
    assert_close(y, x, dtype="tf32", rel_error=1e-3)


def test_modules_match_functional(generator, device):
    x = random_tensor((2, 200), generator=generator).to(device)
    w = torch.hann_window(20, device=device)
    m = S.STFT(20, 5, window=w, backend="triton")
    inv = S.ISTFT(20, 5, window=w, backend="triton")
    assert "window" in dict(m.named_buffers())
    spec = m(x)
    assert torch.equal(spec, S.stft(x, 20, 5, window=w, backend="triton"))
    assert torch.equal(inv(spec, length=200), S.istft(spec, 20, 5, window=w, length=200, backend="triton"))
    assert_close(inv(spec, length=200), x, dtype="float32", atol=2e-6)


def test_module_compiles_fullgraph(generator, device):
    x = random_tensor((2, 120), generator=generator).to(device)
    w = torch.hann_window(20, device=device)
    m = torch.nn.Sequential()
    stft_m, istft_m = S.STFT(20, 5, window=w, backend="triton"), S.ISTFT(20, 5, window=w, backend="triton")

    def f(x):
        return istft_m(stft_m(x) * 2, length=120)

    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    xg = x.clone().requires_grad_()
    y = compiled(xg)
    assert_close(y, 2 * x, dtype="float32", atol=2e-6)
    y.sum().backward()
    assert_close(xg.grad, torch.full_like(x, 2.0), dtype="float32", atol=2e-6)
    del m


def test_torch_backend_compiles_fullgraph(generator):
    x = random_tensor((2, 200), generator=generator)
    w = torch.hann_window(20)
    stft_m, istft_m = S.STFT(20, 5, window=w, backend="torch"), S.ISTFT(20, 5, window=w, backend="torch")
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # dynamo notes that it bypasses the bases' lru_cache
        y = torch.compile(lambda x: istft_m(stft_m(x), length=200), fullgraph=True, backend="aot_eager")(x)
    assert_close(y, x, dtype="float32", atol=2e-6)


def test_dense_cut_is_a_pure_function_of_n_fft():
    assert K.use_dense(20) and K.use_dense(K.DENSE_MAX_N)
    assert not K.use_dense(K.DENSE_MAX_N + 1) and not K.use_dense(400)


def test_auto_backend_on_cpu_is_torch_and_window_grad_routes_to_torch(generator):
    x = random_tensor((50,), generator=generator)
    w = torch.hann_window(16).requires_grad_()
    out = S.stft(x, 16, 4, window=w)  # auto: torch on CPU; window grad flows
    out.abs().sum().backward()
    w64 = w.detach().double().requires_grad_()
    torch.stft(x.double(), 16, 4, window=w64, return_complex=True).abs().sum().backward()
    assert_close(w.grad, w64.grad, dtype="float32")
    with pytest.raises(BackendUnavailableError, match="window requires grad"):
        S.stft(x, 16, 4, window=w, backend="triton")
    with pytest.raises(BackendUnavailableError, match="complex"):
        S.stft(x.to(torch.complex64), 16, 4, backend="triton")


@pytest.fixture
def float64_default_dtype():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    K._hermitian_scale.cache_clear()  # (cached per n_fft: made under the default dtype before the fix)
    yield
    torch.set_default_dtype(previous)
    K._hermitian_scale.cache_clear()


@pytest.mark.filterwarnings("ignore:A window was not provided")  # (torch's; the default is the subject)
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_default_window_ignores_the_default_dtype(backend, float64_default_dtype, generator, device):
    """window=None with win_length < n_fft is torch's ones in the input's dtype: under a float64 default
    dtype the implicit window was float64, so the result was promoted to complex128 / float64 and
    backend="triton" refused "the window is float64"."""
    x = random_tensor((2, 120), generator=generator).to(device)
    spec = S.stft(x, 16, 4, 10, backend=backend)
    expected = torch.stft(x.cpu(), 16, 4, 10, return_complex=True)
    assert spec.dtype == expected.dtype == torch.complex64
    assert_close(spec, expected)
    y = S.istft(spec, 16, 4, 10, length=120, backend=backend)
    assert y.dtype == torch.float32
    assert_close(y, torch.istft(expected, 16, 4, 10, length=120))


def test_istft_gradient_ignores_the_default_dtype(float64_default_dtype, generator, device):
    # The fft path's Hermitian weights followed the default dtype: a complex128 gradient, against the
    # custom op's float32 fake (and float64 arithmetic on the GPU).
    grad = random_tensor((2, 120), generator=generator).to(device)
    w = torch.hann_window(64, dtype=torch.float32, device=device)
    g = K.istft_backward(grad, w, 33, 64, 16, True, False, 8)
    assert g.dtype == torch.float32


@pytest.mark.parametrize("window_dtype", [torch.float64, torch.complex128], ids=str)
def test_64_bit_window_promotes_like_torch(window_dtype, generator):
    # torch.stft/istft promote the signal with the window: a float32 signal and a float64 window give
    # complex128 (nbxsig computed them in float32 and returned complex64).
    x = random_tensor((2, 60), generator=generator)
    w = (torch.hann_window(16, dtype=torch.float64) + 0.1).to(window_dtype)
    spec = S.stft(x, 16, 4, window=w)
    assert spec.dtype == torch.stft(x, 16, 4, window=w, return_complex=True).dtype == torch.complex128
    expected = torch.stft(x.double(), 16, 4, window=w, return_complex=True)
    assert_close(spec, expected)
    two_sided = window_dtype.is_complex
    spec32 = expected.to(torch.complex64)
    y = S.istft(spec32, 16, 4, window=w, length=60, return_complex=two_sided)
    assert y.dtype == torch.istft(spec32, 16, 4, window=w, length=60, return_complex=two_sided).dtype
    assert y.dtype == window_dtype
    assert_close(
        y, torch.istft(spec32.to(torch.complex128), 16, 4, window=w, length=60, return_complex=two_sided)
    )


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: S.STFT(20, 5, center=1), "center must be a bool, got 1"),
        (lambda: S.STFT(20, 5, onesided="yes"), "onesided must be a bool, got 'yes'"),
        (lambda: S.STFT(20, 5, return_complex=0), "return_complex must be a bool, got 0"),
        (lambda: S.STFT(20, 5, backend="cuda"), "backend must be None, 'triton' or 'torch'"),
        (lambda: S.ISTFT(20, 5, normalized=1), "normalized must be a bool, got 1"),
        (lambda: S.ISTFT(20, 5, strict_nola=None), "strict_nola must be a bool, got None"),
        (lambda: S.ISTFT(20, 5, backend="gpu"), "backend must be None, 'triton' or 'torch'"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_modules_validate_every_argument_at_construction(make, message):
    # They promise a bad configuration fails when built; the flags and the backend failed at the first call.
    with pytest.raises((ParameterTypeError, ParameterValueError), match=message):
        make()
    assert S.STFT(20, 5, onesided=None).onesided is None


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------

X = torch.ones(100)
SPEC = torch.ones(11, 21, dtype=torch.complex64)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: S.stft(X, 0), ParameterValueError, "n_fft must be >= 1, got 0"),
        (lambda: S.stft(X, -4), ParameterValueError, "n_fft must be >= 1, got -4"),
        (lambda: S.stft(X, 2.5), ParameterTypeError, "n_fft must be an integer, got 2.5"),
        (
            lambda: S.stft(X, 300, center=False),
            ParameterValueError,
            "n_fft must be <= the padded signal length 100",
        ),
        (lambda: S.stft(X, 300), ParameterValueError, "longer than n_fft // 2 = 150 samples"),
        (lambda: S.stft(X, 300, pad_mode="circular"), ParameterValueError, "at least n_fft // 2 = 150"),
        (
            lambda: S.stft(X, 20, win_length=30),
            ParameterValueError,
            "win_length must be in 1..n_fft=20, got 30",
        ),
        (lambda: S.stft(X, 20, hop_length=0), ParameterValueError, "hop_length must be >= 1, got 0"),
        (lambda: S.stft(X, 3), ParameterValueError, "the default n_fft // 4 is 0"),
        (
            lambda: S.stft(X, 20, window=torch.ones(19)),
            ParameterValueError,
            "window must be a 1-D tensor of length win_length=20",
        ),
        (
            lambda: S.stft(X, 20, window=torch.ones(4, 5)),
            ParameterValueError,
            "window must be a 1-D tensor of length win_length=20",
        ),
        (
            lambda: S.stft(X, 20, window=torch.ones(20, dtype=torch.int32)),
            ParameterTypeError,
            "window must be",
        ),
        (
            lambda: S.stft(torch.ones(100, dtype=torch.int64), 20),
            ParameterTypeError,
            "input must be a tensor of dtype",
        ),
        (lambda: S.stft(torch.ones(0), 20), ParameterValueError, "input must be a non-empty tensor"),
        (lambda: S.stft([1.0, 2.0], 20), ParameterTypeError, "input must be a torch.Tensor"),
        (lambda: S.stft(X, 20, pad_mode="wrap"), ParameterValueError, "pad_mode must be one of 'reflect'"),
        (lambda: S.stft(X, 20, center=1), ParameterTypeError, "center must be a bool"),
        (
            lambda: S.stft(X.to(torch.complex64), 20, onesided=True),
            ParameterValueError,
            "onesided must be False",
        ),
        (
            lambda: S.stft(X, 20, backend="cuda"),
            ParameterValueError,
            "backend must be None, 'triton' or 'torch'",
        ),
        (lambda: S.istft(SPEC, 22), ParameterValueError, "with 12 frequency bins .* for n_fft=22"),
        (lambda: S.istft(SPEC, 20, onesided=False), ParameterValueError, "with 20 frequency bins"),
        (
            lambda: S.istft(SPEC, 20, hop_length=21),
            ParameterValueError,
            "hop_length must be in 1..win_length=20",
        ),
        (lambda: S.istft(SPEC, 20, hop_length=0), ParameterValueError, "hop_length must be >= 1"),
        (lambda: S.istft(SPEC, 20, length=0), ParameterValueError, "length must be >= 1, got 0"),
        (lambda: S.istft(SPEC.real, 20), ParameterValueError, r"input must be complex \(..., F, T\) or real"),
        (lambda: S.istft(torch.ones(11, 21, 2, dtype=torch.int32), 20), ParameterTypeError, "input must be"),
        (
            lambda: S.istft(SPEC.to(torch.complex32), 20),
            ParameterTypeError,
            "input must be a tensor of dtype .*complex64, complex128, got .*complex32",
        ),
        (lambda: S.istft(SPEC, 20, return_complex=True), ParameterValueError, "onesided must be False"),
        (
            # (it named the float64 of the spectrum's real view)
            lambda: S.istft(SPEC.to(torch.complex128), 20, backend="triton"),
            BackendUnavailableError,
            "its kernels take .*complex64, not complex128",
        ),
        (
            lambda: S.istft(SPEC, 20, window=torch.ones(10)),
            ParameterValueError,
            "window must be a 1-D tensor",
        ),
        (lambda: S.spectrogram(X, 20, power=0.0), ParameterValueError, "power must be a finite number > 0.0"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_bad_input(call, error, message):
    with pytest.raises(error, match=message):
        call()


# ---------------------------------------------------------------------------------------------
# GPU
# ---------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("n_fft", "hop"), [(7, 3), (20, 5), (32, 8), (50, 12), (400, 160), (1024, 256), (2048, 512)], ids=str
)
def test_cuda_matches_float64_definition(n_fft, hop, generator, cuda_device):
    x = random_tensor((3, 8 * n_fft + 17), generator=generator)
    w = torch.hann_window(n_fft)
    spec = S.stft(x.to(cuda_device), n_fft, hop, window=w.to(cuda_device))
    ref = definition(x, n_fft, hop, w)
    assert_close(spec, ref, dtype="float32", rel_error=2e-6)
    y = S.istft(spec, n_fft, hop, window=w.to(cuda_device), length=x.shape[-1])
    ref_y = torch.istft(ref, n_fft, hop, window=w.double(), length=x.shape[-1])
    assert_close(y, ref_y, dtype="float32", rel_error=2e-6)


@pytest.mark.gpu
def test_cuda_tf32_precision(generator, cuda_device):
    x = random_tensor((3, 4000), generator=generator)
    w = torch.hann_window(20)
    old = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")
        spec = S.stft(x.to(cuda_device), 20, 5, window=w.to(cuda_device))
    finally:
        torch.set_float32_matmul_precision(old)
    assert_close(spec, definition(x, 20, 5, w), dtype="tf32", rel_error=1e-3)


@pytest.mark.gpu
def test_cuda_compile_inductor(generator, cuda_device):
    x = random_tensor((2, 4000), generator=generator).to(cuda_device)
    w = torch.hann_window(20, device=cuda_device)
    stft_m, istft_m = S.STFT(20, 5, window=w), S.ISTFT(20, 5, window=w)
    torch._dynamo.reset()
    f = torch.compile(lambda x: istft_m(stft_m(x), length=4000), fullgraph=True)
    assert_close(f(x), x, dtype="float32", atol=2e-6)


@pytest.mark.parametrize("variant", ["unrolled", "unrolled-unpaired-tile-store", "fma", "dot"])
def test_dense_kernel_variants(variant, monkeypatch, generator, device):
    # Every form of the dense kernels (unrolled immediates: the frame-by-frame overlap-add, the row
    # kernel with unpaired loads, tile stores and 3 rows per thread; tiled FMA outer products, tiled
    # tl.dot) is exercised whatever the defaults: forward, inverse and both backward passes.
    unrolled = variant.startswith("unrolled")
    monkeypatch.setattr(K, "DENSE_KERNEL", "unrolled" if unrolled else "tiled")
    monkeypatch.setattr(K, "UNR_OLA_PAIRED", variant == "unrolled")
    monkeypatch.setattr(K, "UNR_OLA_FRAMES", variant == "unrolled")  # the row kernel's variants below
    monkeypatch.setattr(K, "UNR_OLA_TILE_STORE", variant != "unrolled")
    monkeypatch.setattr(K, "UNR_OLA_ROWS", 1 if variant == "unrolled" else 3)
    monkeypatch.setattr(K, "FWD_FMA_MAX_N", 64 if variant == "fma" else 0)
    monkeypatch.setattr(K, "OLA_FMA_MAX_N", 64 if variant == "fma" else 0)
    x = random_tensor((2, 83), generator=generator)
    w = torch.hann_window(20)
    spec = S.stft(x.to(device), 20, 5, window=w.to(device), backend="triton")
    assert_close(spec, definition(x, 20, 5, w), dtype="float32", rel_error=2e-6)
    y = S.istft(spec, 20, 5, window=w.to(device), length=83, backend="triton")
    assert_close(y, x, dtype="float32", atol=2e-6)
    xg = x.clone().to(device).requires_grad_()
    sg = spec.detach().clone().requires_grad_()
    S.stft(xg, 20, 5, window=w.to(device), backend="triton").abs().sum().backward()
    S.istft(sg, 20, 5, window=w.to(device), backend="triton").square().sum().backward()
    xd = x.detach().double().requires_grad_()
    S.stft(xd, 20, 5, window=w.double(), backend="torch").abs().sum().backward()
    sd = spec.detach().cpu().to(torch.complex128).requires_grad_()
    S.istft(sd, 20, 5, window=w.double(), backend="torch").square().sum().backward()
    assert_close(xg.grad, xd.grad, dtype="float32", rel_error=2e-6)
    assert_close(sg.grad, sd.grad, dtype="float32", rel_error=2e-6)


@pytest.mark.filterwarnings("ignore:The length of signal is shorter than the length parameter")
@pytest.mark.parametrize("kernel", ["rows", "frames"])
@pytest.mark.parametrize(
    ("n_fft", "hop", "center", "length", "onesided"),
    [(20, 5, True, 171, True), (12, 3, False, 190, True), (9, 4, True, None, False), (7, 7, True, 120, True)],
    ids=["iSTFTNet", "no-centre-longer", "odd-two-sided", "hop=n_fft"],
)
def test_overlap_add_kernels(kernel, n_fft, hop, center, length, onesided, monkeypatch, generator, device):
    # Both unrolled overlap-adds (row by row, frame by frame with either spectrum load) on batched,
    # odd-length inputs in torch.stft's frequency-fastest layout, a contiguous copy and a strided
    # view, against float64 torch.istft; and as the stft gradient. Tiles of 16 frames put several
    # programs (and their overlaps) in every signal.
    monkeypatch.setattr(K, "UNR_OLA_FRAMES", kernel != "rows")
    monkeypatch.setattr(K, "UNR_OLA_FRAMES_BLOCK", 16)
    x = random_tensor((2, 2, 163), generator=generator, dtype=torch.float64)
    w = torch.rand(n_fft, generator=generator, dtype=torch.float64) + 0.5
    kw = dict(window=w, center=center, onesided=onesided)
    flat = torch.stft(x.reshape(4, 163), n_fft, hop, return_complex=True, **kw)
    spec = flat.reshape(2, 2, *flat.shape[1:])
    wide = torch.cat([spec, spec.flip(-1)], dim=-1)[..., ::2]  # frames two apart
    for sp in (spec, spec.contiguous(), wide):
        ref = torch.istft(sp.reshape(4, *sp.shape[2:]), n_fft, hop, length=length, **kw).reshape(2, 2, -1)
        kw32 = dict(kw, window=w.float().to(device))
        out = S.istft(sp.to(torch.complex64).to(device), n_fft, hop, length=length, backend="triton", **kw32)
        assert_close(out, ref, dtype="float32", rel_error=2e-6)
    xg = x.float().to(device).requires_grad_()
    out = S.stft(xg, n_fft, hop, backend="triton", **dict(kw, window=w.float().to(device)))
    gs = random_tensor(tuple(out.shape), generator=generator, dtype=torch.complex64)
    torch.autograd.backward(out, gs.to(device))
    xd = x.clone().requires_grad_()
    torch.autograd.backward(S.stft(xd, n_fft, hop, backend="torch", **kw), gs.to(torch.complex128))
    assert_close(xg.grad, xd.grad, dtype="float32", rel_error=2e-6)


@pytest.mark.parametrize(
    ("n_fft", "hop", "onesided", "pad_mode"),
    [
        (20, 5, False, "reflect"),
        (9, 13, True, "replicate"),
        (16, 2, True, "circular"),
        (15, 4, False, "constant"),
    ],
    ids=["two-sided", "hop>n_fft", "tiled-ola-fallback", "odd-two-sided"],
)
def test_unrolled_kernel_gradients(n_fft, hop, onesided, pad_mode, generator, device):
    # The unrolled overlap-add serves the stft gradient with the forward basis (two-sided: F = n_fft
    # bins, sine terms of the upper half), hop > n_fft leaves gaps of zeros, and ceil(n_fft/hop) > 5
    # falls back to the tiled kernel; the istft gradient is the unrolled forward with MODE 4.
    x = random_tensor((2, 61), generator=generator)
    w = torch.rand(n_fft, generator=generator) + 0.5
    xg = x.clone().to(device).requires_grad_()
    spec = S.stft(xg, n_fft, hop, window=w.to(device), onesided=onesided, pad_mode=pad_mode, backend="triton")
    gs = random_tensor(tuple(spec.shape), generator=generator, dtype=torch.complex64)
    torch.autograd.backward(spec, gs.to(device))
    xd = x.detach().double().requires_grad_()
    ref = S.stft(xd, n_fft, hop, window=w.double(), onesided=onesided, pad_mode=pad_mode, backend="torch")
    torch.autograd.backward(ref, gs.to(torch.complex128))
    assert_close(spec, ref, dtype="float32", rel_error=2e-6)
    assert_close(xg.grad, xd.grad, dtype="float32", rel_error=2e-6)
    if hop <= n_fft:
        sg = spec.detach().clone().requires_grad_()
        S.istft(
            sg, n_fft, hop, window=w.to(device), onesided=onesided, length=61, backend="triton"
        ).sum().backward()
        sd = ref.detach().clone().requires_grad_()
        S.istft(
            sd, n_fft, hop, window=w.double(), onesided=onesided, length=61, backend="torch"
        ).sum().backward()
        assert_close(sg.grad, sd.grad, dtype="float32", rel_error=2e-6)


def test_torch_backend_exports_to_onnx(tmp_path, generator):
    # Real-layout STFT → ISTFT on the torch backend is real ops only: the TorchScript-based exporter
    # takes it and onnxruntime reproduces the round trip.
    import onnxruntime as ort

    x = random_tensor((2, 400), generator=generator)
    w = torch.hann_window(20)
    stft_m = S.STFT(20, 5, window=w, return_complex=False, backend="torch")
    istft_m = S.ISTFT(20, 5, window=w, backend="torch")

    class RoundTrip(torch.nn.Module):
        def forward(self, x):
            return istft_m(stft_m(x) * 0.5, length=400)

    path = str(tmp_path / "stft.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about shape-derived Python values
        torch.onnx.export(RoundTrip(), (x,), path, dynamo=False, opset_version=18)
    session = ort.InferenceSession(path)
    (y,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    assert_close(torch.from_numpy(y), 0.5 * x, dtype="float32", atol=2e-6)


def test_cached_launch_key_refines_triton_specialization():
    # The overlap-add launches through cached compiled kernels keyed by arg_class; two arguments
    # of one class must get the same specialization from Triton, or a cached kernel could run on
    # arguments it was not compiled for.
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend

    def triton_class(arg):
        return native_specialize_impl(BaseBackend, arg, False, True, True)

    ints = [0, 1, 2, 11, 15, 16, 17, 32, 48001, 528011, 2**31 - 16, 2**31 - 1, 2**31, 2**31 + 16, -1, -16]
    ints += [2**63 - 16, 2**63, 2**63 + 16]
    x = torch.zeros(64)
    args = [*ints, x, x[1:], x[2:], x[4:], x[8:], x.double(), x.double()[2:], 1.0, 2.5]
    for a in args:
        for b in args:
            if type(a) is type(b) and L.arg_class(a) == L.arg_class(b):
                assert triton_class(a) == triton_class(b), (a, b)


def test_descriptor_launch_passes_what_tritons_wrapper_passes(monkeypatch):
    # DescriptorLaunch (kernels with TMA descriptor arguments, the sm_90 mel kernel) takes Triton 3.6's
    # compiled launcher out of the wrapper that encodes every descriptor on every launch, and keeps each
    # descriptor's encoding: the launcher must get the same arguments either way, the encodings must be made
    # once per descriptor object, and a handle laid out otherwise must be left to Triton's own path.
    from types import SimpleNamespace

    from triton.backends.nvidia import driver

    encoded = []

    def encode(desc, meta):  # stands in for the driver call (fill_tma_descriptor): an object and sizes
        encoded.append(desc.name)
        return [f"tma:{desc.name}:{meta['swizzle']}", *desc.shape, *desc.strides]

    monkeypatch.setattr(driver, "make_tensordesc_arg", encode)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 77)
    calls = []
    signature = {"x": "*fp32", "d0": "tensordesc<fp16[64, 32]>", "n": "i32", "d1": "tensordesc<fp32[16, 32]>"}
    signature.update(f="fp32", C="constexpr")
    metas = [{"swizzle": 128}, {"swizzle": 64}]
    run = SimpleNamespace(
        launch=driver.wrap_handle_tensordesc(lambda *a: calls.append(a), signature, metas),
        global_scratch_size=0, profile_scratch_size=0, launch_cooperative_grid=False, launch_pdl=True,
    )  # fmt: skip
    handle = SimpleNamespace(run=run, function=5, packed_metadata=(1, 2))
    tail = (8,)  # the constexpr's value

    class Descriptor:
        def __init__(self, name, shape):
            self.name, self.shape, self.strides = name, shape, [shape[1], 1]

    d0, d1 = Descriptor("d0", [416, 256]), Descriptor("d1", [80, 256])
    args = ("x-pointer", d0, 3000, d1, 2.5)
    # Triton's path: grid, stream, function, flags, scratch, metadata, hooks, then the kernel's arguments.
    run.launch(7, 1, 1, 77, 5, False, True, None, None, (1, 2), None, None, None, *args, *tail)
    launch = L.DescriptorLaunch.of(handle, tail)
    assert launch is not None
    for _ in range(2):
        launch(0, (7, 1), args)
    assert calls[1] == calls[0] and calls[2] == calls[0], calls
    assert encoded == ["d0", "d1", "d0", "d1"]  # Triton's wrapper once, then DescriptorLaunch once
    handle.run = SimpleNamespace(launch=print, global_scratch_size=0, profile_scratch_size=0)  # no wrapper
    assert L.DescriptorLaunch.of(handle, tail) is None


@pytest.mark.gpu
@pytest.mark.parametrize("cached", [False, True], ids=["jit-launch", "cached-launch"])
def test_cuda_istft_per_argument_class(cached, monkeypatch, generator, cuda_device):
    # Alternating calls whose spectra fall in different specialization classes (16-byte aligned or
    # not, frequency- or time-fastest, contiguous real layout) each get the right kernel, with and
    # without the cached launch (whose cache they populate and then hit).
    x = random_tensor((3, 1003), generator=generator)
    w = torch.hann_window(20)
    monkeypatch.setattr(L, "CACHED_LAUNCH", cached)
    spec = torch.stft(x, 20, 5, window=w, return_complex=True).to(cuda_device)
    views = [spec, spec.contiguous(), spec[:, :, 1:], torch.view_as_real(spec.contiguous())[:, :, 1:]]
    for _ in range(2):
        for s in views:
            y = S.istft(s, 20, 5, window=w.to(cuda_device), backend="triton")
            c = s if s.is_complex() else torch.view_as_complex(s.contiguous())
            ref = torch.istft(c.cpu().to(torch.complex128), 20, 5, window=w.double())
            assert_close(y.cpu(), ref, dtype="float32", rel_error=2e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("cached", [False, True], ids=["jit-launch", "cached-launch"])
def test_cuda_repeated_stft_and_istft_gradient(cached, monkeypatch, generator, cuda_device):
    # Repeated calls reach the cached launches of the stft kernel (forward, and the istft backward
    # with its defaulted constexprs) and of the envelope kernel: results equal float64 every time.
    monkeypatch.setattr(L, "CACHED_LAUNCH", cached)
    x = random_tensor((3, 1003), generator=generator)
    w = torch.hann_window(20)
    ref_spec = torch.stft(x.double(), 20, 5, window=w.double(), return_complex=True)
    spec = ref_spec.to(torch.complex64)
    g = random_tensor((3, 1003), generator=generator)
    leaf = spec.clone().requires_grad_()
    torch.istft(leaf.to(torch.complex128), 20, 5, window=w.double(), length=1003).backward(g.double())
    ref_grad = leaf.grad
    xc, wc, gc = x.to(cuda_device), w.to(cuda_device), g.to(cuda_device)
    for _ in range(3):
        assert_close(S.stft(xc, 20, 5, window=wc).cpu(), ref_spec, dtype="float32")
        s = spec.to(cuda_device, copy=True).requires_grad_()
        S.istft(s, 20, 5, window=wc, length=1003).backward(gc)
        assert_close(s.grad.cpu(), ref_grad, dtype="float32")


# ----------------------------------------------------------------------------------------------
# The istft plan cache (nbxsig.stft._ISTFT_PLANS): a repeated call skips validation and dispatch,
# so every fact a check or a choice reads must invalidate it.
# ----------------------------------------------------------------------------------------------


def _istft_ref(spec, n_fft, hop, window, length, *, win_length=None):
    c = spec if spec.is_complex() else torch.view_as_complex(spec.contiguous())
    w = None if window is None else window.double()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's note that a longer length pads zeros
        return torch.istft(c.to(torch.complex128), n_fft, hop, win_length, w, length=length)


@pytest.fixture
def plans(monkeypatch):
    """An empty plan cache for the test (restored afterwards)."""
    monkeypatch.setattr(S, "_ISTFT_PLANS", {})
    return S._ISTFT_PLANS


def test_istft_plan_reused_and_keyed_by_signature(plans, generator):
    x = random_tensor((2, 203), generator=generator)
    w = torch.hann_window(12)
    spec = torch.stft(x, 12, 3, window=w, return_complex=True)
    y1 = S.istft(spec, 12, 3, window=w, length=203, backend="triton")
    assert len(plans) == 1
    plan = next(iter(plans.values()))
    y2 = S.istft(spec, 12, 3, window=w, length=203, backend="triton")
    assert len(plans) == 1 and next(iter(plans.values())) is plan and plan.launch is not None
    assert torch.equal(y1, y2)
    assert_close(y2, _istft_ref(spec, 12, 3, w, 203), dtype="float32")
    # Each of these differs from the first call in one fact the key holds: a new plan, right result.
    variants = [
        (spec[:1], dict(length=203)),  # shape
        (spec.contiguous(), dict(length=203)),  # strides (torch.stft's output is frequency-fastest)
        (torch.view_as_real(spec), dict(length=203)),  # real layout (dtype float32)
        (spec[0], dict(length=203)),  # no batch dim (reshaped plan)
        (spec, dict(length=150)),  # length cut
        (spec, dict(length=260)),  # length padded
        (spec, dict()),  # default length
        (spec, dict(length=203, normalized=False, center=True)),  # same values, passed: same plan
    ]
    for i, (s, kw) in enumerate(variants):
        y = S.istft(s, 12, 3, window=w, backend="triton", **kw)
        assert_close(y, _istft_ref(s, 12, 3, w, kw.get("length")), dtype="float32")
        assert len(plans) == min(i + 2, len(variants)), i
    # A non-dense shape (fft path) and a tiled-kernel shape get plans without a prepared launch.
    for n_fft, hop in ((64, 16), (20, 2)):
        s = torch.stft(x, n_fft, hop, window=torch.hann_window(n_fft), return_complex=True)
        for _ in range(2):
            y = S.istft(s, n_fft, hop, window=torch.hann_window(n_fft), length=203, backend="triton")
            assert_close(y, _istft_ref(s, n_fft, hop, torch.hann_window(n_fft), 203), dtype="float32")


def test_istft_plan_follows_the_window(plans, generator):
    x = random_tensor((1, 160), generator=generator)
    spec = torch.stft(x, 12, 3, window=torch.hann_window(12), return_complex=True)
    for win_length in (12, 9):  # 9: the window is zero-padded to n_fft, and the plan keeps the padding
        w = torch.hann_window(win_length) + 0.1
        y = S.istft(spec, 12, 3, win_length=win_length, window=w, length=160, backend="triton")
        assert_close(y, _istft_ref(spec, 12, 3, w, 160, win_length=win_length), dtype="float32")
        w.mul_(torch.linspace(0.5, 1.5, win_length))  # in place: a new version
        y = S.istft(spec, 12, 3, win_length=win_length, window=w, length=160, backend="triton")
        assert_close(y, _istft_ref(spec, 12, 3, w, 160, win_length=win_length), dtype="float32")
        w2 = w.clone() * 0.5 + 0.2  # another tensor object
        y = S.istft(spec, 12, 3, win_length=win_length, window=w2, length=160, backend="triton")
        assert_close(y, _istft_ref(spec, 12, 3, w2, 160, win_length=win_length), dtype="float32")
    # The window's length changed behind the version counter (.data assignment): still checked.
    w = torch.hann_window(12)
    S.istft(spec, 12, 3, window=w, length=160, backend="triton")
    w.data = torch.hann_window(10)
    with pytest.raises(ParameterValueError, match="window must be a 1-D tensor of length win_length=12"):
        S.istft(spec, 12, 3, window=w, length=160, backend="triton")
    # A window that now requires grad is not planned: the Triton backend refuses it, as before.
    w = torch.hann_window(12)
    S.istft(spec, 12, 3, window=w, length=160, backend="triton")
    w.requires_grad_(True)
    with pytest.raises(BackendUnavailableError, match="the window requires grad"):
        S.istft(spec, 12, 3, window=w, length=160, backend="triton")


def test_istft_plan_keeps_every_check(plans, generator, monkeypatch):
    x = random_tensor((1, 160), generator=generator)
    w = torch.hann_window(12)
    spec = torch.stft(x, 12, 3, window=w, return_complex=True)
    S.istft(spec, 12, 3, window=w, length=160, center=True, backend="triton")
    # Values equal to the planned ones as dict keys but not accepted as arguments.
    with pytest.raises(ParameterTypeError, match="n_fft must be an integer"):
        S.istft(spec, 12.0, 3, window=w, length=160, center=True, backend="triton")
    with pytest.raises(ParameterTypeError, match="center must be a bool"):
        S.istft(spec, 12, 3, window=w, length=160, center=1, backend="triton")
    S.istft(spec, 12, 3, window=w, length=1, backend="triton")
    with pytest.raises(ParameterTypeError, match="length must be an integer"):
        S.istft(spec, 12, 3, window=w, length=True, backend="triton")
    with pytest.raises(ParameterTypeError, match="length must be an integer"):
        S.istft(spec, 12, 3, window=w, length=[160], backend="triton")  # unhashable
    # A lazily conjugated view of the planned spectrum (same shape, strides, dtype): not the plan's
    # launch (it would read the storage unconjugated) but torch's result, and no plan of its own.
    n_plans = len(plans)
    y = S.istft(spec.conj(), 12, 3, window=w, length=160, center=True, backend="triton")
    assert_close(y, _istft_ref(spec.conj().resolve_conj(), 12, 3, w, 160), dtype="float32")
    assert len(plans) == n_plans
    # The environment the dispatch reads.
    monkeypatch.setenv("NBXSIG_BACKEND", "cuda")
    with pytest.raises(ParameterValueError, match="NBXSIG_BACKEND must be"):
        S.istft(spec, 12, 3, window=w, length=160, backend="triton")
    monkeypatch.delenv("NBXSIG_BACKEND")
    monkeypatch.delenv("TRITON_INTERPRET")
    with pytest.raises(BackendUnavailableError, match="TRITON_INTERPRET=1"):
        S.istft(spec, 12, 3, window=w, length=160, backend="triton")


def test_istft_plan_gradient_and_retune(plans, generator, monkeypatch):
    x = random_tensor((1, 160), generator=generator)
    w = torch.hann_window(12)
    spec = torch.stft(x, 12, 3, window=w, return_complex=True)
    y = S.istft(spec, 12, 3, window=w, length=160, backend="triton")
    # A planned signature whose input now requires grad takes the autograd path.
    leaf = spec.clone().requires_grad_(True)
    S.istft(leaf, 12, 3, window=w, length=160, backend="triton").square().sum().backward()
    ref = spec.clone().requires_grad_(True)
    S.istft(ref, 12, 3, window=w, length=160, backend="torch").square().sum().backward()
    assert_close(leaf.grad, ref.grad, dtype="float32")
    assert len(plans) == 1
    # Assigning a kernel setting drops the plans (they bake those in); results stay right.
    monkeypatch.setattr(K, "UNR_OLA_PAIRED", False)
    assert not plans
    assert_close(S.istft(spec, 12, 3, window=w, length=160, backend="triton"), y, dtype="float32")
    assert len(plans) == 1 and not next(iter(plans.values())).launch.constexprs["PAIRED"]


def _istft_grad_ref(spec, n_fft, hop, window, length, grad):
    # In float64 on the CPU, whatever device the tested call ran on.
    ref = spec.detach().cpu().to(torch.complex128 if spec.is_complex() else torch.float64).requires_grad_()
    c = ref if ref.is_complex() else torch.view_as_complex(ref)
    torch.istft(c, n_fft, hop, window=window.cpu().double(), length=length).backward(grad.cpu().double())
    return ref.grad


@pytest.mark.parametrize("layout", ["complex", "real", "real-bfloat16", "unbatched"])
def test_istft_planned_gradient(layout, plans, generator, device, monkeypatch):
    # A planned call whose input requires grad runs both directions through the plan's prepared
    # launches (_PlannedIstftFunction): the envelope of the backward is computed once per plan, the
    # gradient is right on every call, in the leaf's own dtype.
    calls = []
    envelope = K._inv_envelope
    monkeypatch.setattr(K, "_inv_envelope", lambda *args: calls.append(args) or envelope(*args))
    x = random_tensor((2, 163), generator=generator)
    w = torch.hann_window(20) + 0.05
    spec = torch.stft(x, 20, 5, window=w, return_complex=True)
    if layout.startswith("real"):
        spec = torch.view_as_real(spec)
    if layout == "unbatched":
        spec = spec[0]
    dtype = torch.bfloat16 if layout == "real-bfloat16" else spec.dtype
    leaf = spec.to(device, dtype).requires_grad_()
    g = random_tensor((2, 163) if layout != "unbatched" else (163,), generator=generator)
    ref = _istft_grad_ref(leaf, 20, 5, w, 163, g)
    for _ in range(3):
        leaf.grad = None
        S.istft(leaf, 20, 5, window=w.to(device), length=163, backend="triton").backward(g.to(device))
        assert leaf.grad.dtype == dtype
        tol = dict(dtype="bfloat16") if dtype == torch.bfloat16 else dict(dtype="float32", rel_error=2e-6)
        assert_close(leaf.grad, ref, **tol)
    (plan,) = plans.values()
    prepared = plan.launch is not None and plan.launch.backward is not None and plan.shape3 is None
    assert prepared == (layout != "unbatched")  # the unbatched input goes the general way
    assert len(calls) == (1 if prepared else 3)
    if prepared:  # an expanded gradient (of a sum) takes istft_backward, with its own envelope
        leaf.grad = None
        S.istft(leaf, 20, 5, window=w.to(device), length=163, backend="triton").sum().backward()
        assert_close(leaf.grad, _istft_grad_ref(leaf, 20, 5, w, 163, torch.ones(2, 163)), **tol)
        assert len(calls) == 2


def test_istft_planned_gradient_follows_the_window(plans, generator, device):
    # The envelope a plan keeps is its window's: an in-place change of the window makes a new plan
    # (the key holds its version) with a new envelope, and a change between forward and backward
    # raises, as for any tensor autograd saved.
    x = random_tensor((1, 120), generator=generator)
    w = (torch.hann_window(12) + 0.1).to(device)
    spec = torch.stft(x, 12, 3, window=w.cpu(), return_complex=True)
    leaf = spec.to(device).requires_grad_()
    g = random_tensor((1, 120), generator=generator)
    for _ in range(2):
        leaf.grad = None
        S.istft(leaf, 12, 3, window=w, length=120, backend="triton").backward(g.to(device))
        assert_close(
            leaf.grad, _istft_grad_ref(spec, 12, 3, w.cpu(), 120, g), dtype="float32", rel_error=2e-6
        )
        w.mul_(torch.linspace(0.5, 1.5, 12, device=device))
    assert len(plans) == 2
    y = S.istft(leaf, 12, 3, window=w, length=120, backend="triton")
    w.add_(0.1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward(g.to(device))


@pytest.mark.gpu
def test_cuda_planned_istft_gradient_across_streams_and_graph_capture(plans, generator, cuda_device):
    # The prepared backward keeps its envelope for one stream (another stream recomputes it) and
    # never inside a CUDA-graph capture; eager calls on two streams and a captured forward+backward
    # replayed all give the float64 gradient.
    x = random_tensor((2, 1003), generator=generator)
    w = torch.hann_window(20)
    spec = torch.stft(x, 20, 5, window=w, return_complex=True)
    g = random_tensor((2, 1003), generator=generator)
    ref = _istft_grad_ref(spec, 20, 5, w, 1003, g)
    leaf, wc, gc = spec.to(cuda_device).requires_grad_(), w.to(cuda_device), g.to(cuda_device)
    side = torch.cuda.Stream()
    for stream in (torch.cuda.current_stream(), side, torch.cuda.current_stream(), side):
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            leaf.grad = None
            S.istft(leaf, 20, 5, window=wc, length=1003).backward(gc)
        torch.cuda.current_stream().wait_stream(stream)
        assert_close(leaf.grad.cpu(), ref, dtype="float32", rel_error=2e-6)
    (plan,) = plans.values()
    kept = plan.launch.backward.envelope
    assert kept is not None and kept[0] == side.cuda_stream
    graph = torch.cuda.CUDAGraph()
    leaf.grad = None
    with torch.cuda.graph(graph):
        S.istft(leaf, 20, 5, window=wc, length=1003).backward(gc)
    assert plan.launch.backward.envelope is kept
    captured = leaf.grad
    captured.zero_()
    graph.replay()
    torch.cuda.synchronize()
    assert_close(captured.cpu(), ref, dtype="float32", rel_error=2e-6)


def test_istft_cached_launch_path_with_stubbed_kernel(plans, generator, monkeypatch):
    # The cached compiled-kernel path (CACHED_LAUNCH, GPU only) with Triton stubbed out: the first
    # call of each plan and alignment class goes through Triton, later ones through the cached
    # handle, with the same arguments (tensors as their addresses).
    from triton import knobs

    from nbxsig.bench.host_overhead import _NoLaunch, stubbed_launches

    jit_args, runs = [], []

    class Recording:
        def __getitem__(self, grid):
            return lambda *args, **constexprs: (jit_args.append(args), _NoLaunch())[1]

    x = random_tensor((1, 160), generator=generator)
    w = torch.hann_window(12)
    spec = torch.stft(x, 12, 3, window=w, return_complex=True)
    with stubbed_launches():
        launcher = K._ola_frames_launch if K.UNR_OLA_FRAMES else K._ola_launch
        launcher.kernel = Recording()
        monkeypatch.setattr(_NoLaunch, "run", lambda self, *args: runs.append(args))
        for s in (spec, spec, spec[..., 1:], spec[..., 1:], spec):
            S.istft(s, 12, 3, window=w, length=100, backend="triton")
        assert len(jit_args) == 2 and len(runs) == 3  # two plans (shapes), each compiled once
        # A lazily conjugated view: launched from a resolved copy, not from the planned address.
        S.istft(spec.conj(), 12, 3, window=w, length=100, backend="triton")
        assert len(jit_args) == 3 and len(runs) == 3
        conj_src = jit_args[-1][0]
        assert conj_src.data_ptr() != spec.data_ptr()
        assert torch.equal(conj_src, torch.view_as_real(spec.conj().resolve_conj()))
        hook = lambda metadata: None  # noqa: E731
        knobs.runtime.launch_enter_hook.add(hook)
        try:
            S.istft(spec, 12, 3, window=w, length=100, backend="triton")
        finally:
            knobs.runtime.launch_enter_hook.remove(hook)
        assert len(jit_args) == 4 and len(runs) == 3  # a profiler's hook: through Triton
    # run(grid x, grid y, 1, stream, function, metadata, launch metadata, hooks, *arguments, *constexprs)
    assert runs[0][1:4] == (1, 1, 0)
    pointers, jit = runs[0][9 : 9 + len(jit_args[0])], jit_args[0]
    assert pointers[0] == spec.data_ptr() == jit[0].data_ptr() and pointers[5] == w.data_ptr()
    assert pointers[1:5] + pointers[7:] == jit[1:5] + jit[7:]


@pytest.mark.parametrize("tile_out", [False, True])
def test_cached_launches_pass_every_kernel_parameter(tile_out, generator, monkeypatch):
    # Triton's compiled launcher takes every parameter of the kernel, constexprs included (it
    # ignores their values, not their count): a cached launch of a kernel whose caller leaves
    # defaulted constexprs out (the stft kernel's TILE_OUT, F_P2, LOG2_F) must pass their defaults.
    from nbxsig.bench.host_overhead import _NoLaunch, stubbed_launches

    monkeypatch.setattr(K, "UNR_BWD_TILE_OUT", tile_out)
    runs = []
    x = random_tensor((2, 160), generator=generator)
    w = torch.hann_window(12)
    spec = torch.stft(x, 12, 3, window=w, return_complex=True).requires_grad_()
    with stubbed_launches():
        monkeypatch.setattr(_NoLaunch, "run", lambda self, *args: runs.append(args))
        launchers = [v for v in vars(K).values() if isinstance(v, L.CachedLaunch)]
        for _ in range(2):  # the first call of each kernel goes through (stubbed) Triton
            S.stft(x, 12, 3, window=w, backend="triton")  # the unrolled stft kernel
            y = S.istft(spec, 12, 3, window=w, length=160, backend="triton")  # overlap-add
            # The planned backward: unrolled kernel with MODE_SCALED (the envelope once per plan) ...
            y.backward(torch.ones_like(y))
            # ... and the general one (an expanded gradient): envelope, then the same kernel.
            S.istft(spec, 12, 3, window=w, length=160, backend="triton").sum().backward()
            spec.grad = None
        kernels = {len(c.params) for c in launchers}
    # run(grid x, grid y, grid z, stream, function, metadata, launch metadata, 2 hooks, *parameters)
    assert len(runs) >= 6 and all(len(args) - 9 in kernels for args in runs)
    stft_params = len(K._stft_unrolled_launch.params)
    assert sum(len(args) - 9 == stft_params for args in runs) >= 3  # stft forward, both istft backwards
    assert any(len(args) - 9 == len(K._envelope_launch.params) for args in runs)


def test_host_overhead_bench_runs(monkeypatch, capsys):
    from nbxsig.bench import host_overhead

    monkeypatch.setenv("NBXSIG_POISON_OUTPUTS", "1")  # main() drops it; restored afterwards
    host_overhead.main(["istft", "stft", "backward", "--calls", "3"])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "istft n_fft=20 hop=5, 1×240000",
        "stft n_fft=20 hop=5, 1×240000",
        "istft forward+backward n_fft=20 hop=5, 1×240000",
    ]
    assert all("nbxsig's host work" in line for line in lines)
    assert not K._ola_launch.handles and not S._ISTFT_PLANS  # the stubs are gone


def test_stft_plan_keyed_by_signature(monkeypatch, generator):
    monkeypatch.setattr(S, "_STFT_PLANS", {})
    x = random_tensor((2, 150), generator=generator)

    def check(x, n_fft, hop, w, **kw):
        y = S.stft(x, n_fft, hop, window=w, backend="triton", **kw)
        ref = torch.stft(x.double(), n_fft, hop, window=w.double(), return_complex=True, **kw)
        assert_close(y, ref, dtype="float32")

    w = torch.hann_window(12)
    for _ in range(2):
        check(x, 12, 3, w)
    assert len(S._STFT_PLANS) == 1
    check(x[:1], 12, 3, w)  # shape
    check(x[:, 1:], 12, 3, w)  # strides and length
    check(x, 12, 3, w, pad_mode="constant")
    check(x, 12, 4, w, center=False)
    assert len(S._STFT_PLANS) == 5
    # The window: in place (zero-padded short window, kept by the plan) and another object.
    short = torch.hann_window(9) + 0.1
    check(x, 12, 3, short, win_length=9)
    short.mul_(torch.linspace(0.5, 1.5, 9))
    check(x, 12, 3, short, win_length=9)
    check(x, 12, 3, short.clone() * 0.5, win_length=9)
    # Still checked after a plan exists: types, the environment; the power spectrogram has its own.
    with pytest.raises(ParameterTypeError, match="n_fft must be an integer"):
        S.stft(x, 12.0, 3, window=w, backend="triton")
    with pytest.raises(ParameterTypeError, match="center must be a bool"):
        S.stft(x, 12, 3, window=w, center=1, backend="triton")
    monkeypatch.setenv("NBXSIG_BACKEND", "cuda")
    with pytest.raises(ParameterValueError, match="NBXSIG_BACKEND must be"):
        S.stft(x, 12, 3, window=w, backend="triton")
    monkeypatch.delenv("NBXSIG_BACKEND")
    for power in (2.0, 1.0):
        p = S.spectrogram(x, 12, 3, window=w, power=power, backend="triton")
        ref = torch.stft(x.double(), 12, 3, window=w.double(), return_complex=True).abs() ** power
        assert_close(p, ref, dtype="float32")
