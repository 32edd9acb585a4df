"""resample against torchaudio.functional.resample (≤ 1e-5 relative) for both sinc methods."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import nbxsig.filters as nf
from nbxsig.errors import ParameterTypeError, ParameterValueError
from nbxsig.testing import assert_close, random_tensor

RATES = [(16000, 44100), (44100, 16000), (8000, 16000), (48000, 22050), (44100, 16000)]
METHODS = [
    ("sinc_interp_hann", {}),
    ("sinc_interp_kaiser", {}),
    ("sinc_interp_kaiser", {"beta": 8.0, "lowpass_filter_width": 4, "rolloff": 0.9}),
]


@pytest.fixture
def AF():
    """torchaudio.functional: the oracle (absent on the GPU machine; GPU tests use the torch backend)."""
    return pytest.importorskip("torchaudio.functional")


def _ids(v):
    return f"{v[0]}to{v[1]}" if isinstance(v, tuple) and isinstance(v[0], int) else str(v)


@pytest.mark.parametrize("rates", RATES[:4], ids=_ids)
@pytest.mark.parametrize(("method", "kwargs"), METHODS, ids=lambda v: str(v).replace(" ", ""))
def test_torch_backend_is_torchaudio_float64(rates, method, kwargs, generator, AF):
    x = random_tensor((2, 3, 441), generator=generator, dtype=torch.float64)
    ref = AF.resample(x, *rates, resampling_method=method, **kwargs)
    y = nf.resample(x, *rates, resampling_method=method, **kwargs, backend="torch")
    assert y.shape == ref.shape
    assert_close(y, ref, atol=1e-12, rtol=1e-9)


@pytest.mark.parametrize("rates", RATES[:4], ids=_ids)
@pytest.mark.parametrize(("method", "kwargs"), METHODS[:2], ids=lambda v: str(v).replace(" ", ""))
def test_triton_is_torchaudio_float32(rates, method, kwargs, generator, AF, device):
    x = random_tensor((3, 300), generator=generator)
    ref = AF.resample(x, *rates, resampling_method=method, **kwargs)
    y = nf.resample(x.to(device), *rates, resampling_method=method, **kwargs, backend="triton")
    assert y.shape == ref.shape and y.dtype == torch.float32
    assert_close(y, ref, atol=1e-5, rtol=1e-4, rel_error=1e-5)


def test_triton_noncontiguous_and_half(generator, AF, device):
    base = random_tensor((300, 4), generator=generator)
    x = base.t()  # (4, 300), column stride 4
    ref = AF.resample(x.contiguous().double(), 44100, 16000)
    assert_close(
        nf.resample(x.to(device), 44100, 16000, backend="triton"), ref, dtype=torch.float32, atol=1e-5
    )
    y16 = nf.resample(x.half().to(device), 44100, 16000, backend="triton")
    assert y16.dtype == torch.float16
    assert_close(y16, AF.resample(x.half().double(), 44100, 16000), dtype=torch.float16)


@pytest.mark.parametrize("tile", [None, (16, 16, 16, 4), (32, 32, 32, 4)], ids=str)
@pytest.mark.parametrize("rates", [(48000, 1000), (1000, 1013), (7, 300)], ids=_ids)
def test_triton_polyphase_blocks_at_extreme_ratios(rates, tile, generator, device, monkeypatch):
    """Both kernels (tile None: per-output; a tile: the opt-in tensor-core form, phase blocks wider than
    the phase count when there is one phase) at extreme ratios: one phase, 1013 phases, a 43x
    upsampling; leading dims, a non-contiguous view and bfloat16, against the float64 torch backend."""
    from nbxsig.kernels import depthwise as dk

    monkeypatch.setattr(dk, "_RESAMPLE_TILE", tile)
    base = random_tensor((2, 2, 301), generator=generator, dtype=torch.float64)
    x = base[:, :, ::2]  # (2, 2, 151), sample stride 2
    ref = nf.resample(x, *rates, backend="torch")
    y = nf.resample(x.float().to(device), *rates, backend="triton")
    assert y.shape == ref.shape
    assert_close(y, ref, dtype=torch.float32, atol=1e-5)
    yb = nf.resample(x.bfloat16().to(device), *rates, backend="triton")
    assert yb.dtype == torch.bfloat16
    assert_close(yb, nf.resample(x.bfloat16().double(), *rates, backend="torch"), dtype=torch.bfloat16)


def test_identity_returns_input():
    x = torch.randn(2, 100)
    assert nf.resample(x, 16000, 16000) is x
    assert nf.resample(x, 16000, 16000.0) is x


def test_triton_gradient_matches_torch(generator, device):
    x = random_tensor((2, 120), generator=generator, dtype=torch.float64)
    g = random_tensor((2, 44), generator=generator, dtype=torch.float64)
    xr = x.clone().requires_grad_()
    nf.resample(xr, 44100, 16000, backend="torch").backward(g)
    xt = x.float().to(device).requires_grad_()
    nf.resample(xt, 44100, 16000, backend="triton").backward(g.float().to(device))
    assert_close(xt.grad, xr.grad, dtype=torch.float32, atol=1e-5)


def test_a_tone_keeps_its_level_and_an_alias_is_removed():
    fs, n = 48000, 4800
    t = torch.arange(n, dtype=torch.float64) / fs
    keep = nf.resample(torch.sin(2 * torch.pi * 1000 * t), fs, 16000)[200:-200]
    assert abs(keep.pow(2).mean().sqrt().item() - 2**-0.5) < 1e-3
    # 12 kHz is above the new Nyquist (8 kHz): it must be filtered, not folded to 4 kHz. The default
    # Hann-windowed sinc (6 zero crossings) stops it by ~55 dB; require 50 dB.
    gone = nf.resample(torch.sin(2 * torch.pi * 12000 * t), fs, 16000)[200:-200]
    assert 20 * torch.log10(gone.pow(2).mean().sqrt() / 2**-0.5).item() < -50.0


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"orig_freq": 0}, ParameterValueError, "orig_freq must be a positive integer rate in Hz, got 0"),
        ({"new_freq": 22050.5}, ParameterValueError, "new_freq must be a positive integer rate"),
        (
            {"orig_freq": float("inf")},
            ParameterValueError,
            "orig_freq must be a positive integer rate in Hz, got inf",
        ),
        (
            {"orig_freq": np.float64("inf")},
            ParameterValueError,
            "orig_freq must be a positive integer rate in Hz, got inf (a numpy.float64 of shape ()",
        ),
        (
            {"new_freq": np.array(0.5)},
            ParameterValueError,
            "new_freq must be a positive integer rate in Hz, got 0.5 (a numpy.ndarray of shape ()",
        ),
        # An integer too large for float64 is still an integer: refused for its size, not by an OverflowError.
        ({"orig_freq": 10**400}, ParameterValueError, "orig_freq must be at most 9223372036854775807 Hz"),
        ({"new_freq": 2**63}, ParameterValueError, "new_freq must be at most 9223372036854775807 Hz"),
        (
            {"new_freq": float("nan")},
            ParameterValueError,
            "new_freq must be a positive integer rate in Hz, got nan",
        ),
        ({"resampling_method": "linear"}, ParameterValueError, "resampling_method must be one of"),
        ({"lowpass_filter_width": 0}, ParameterValueError, "lowpass_filter_width must be >= 1"),
        ({"rolloff": 1.5}, ParameterValueError, "rolloff must be a finite number > 0.0 <= 1.0"),
        (
            {"waveform": torch.ones(4, dtype=torch.int32)},
            ParameterTypeError,
            "waveform must be a tensor of dtype",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_errors(kwargs, error, message):
    args = {"waveform": torch.randn(100), "orig_freq": 16000, "new_freq": 8000, **kwargs}
    with pytest.raises(error) as info:
        nf.resample(**args)
    assert message in str(info.value)


@pytest.mark.gpu
@pytest.mark.parametrize("rates", [(44100, 16000), (16000, 44100), (48000, 22050)], ids=_ids)
def test_gpu_resample_bench_shape(rates, generator, cuda_device):
    x = random_tensor((8, rates[0] * 2), generator=generator).to(cuda_device)
    ref = nf.resample(x.double(), *rates, backend="torch")  # == torchaudio (checked on the CPU above)
    assert_close(nf.resample(x, *rates, backend="triton"), ref, atol=1e-5, rtol=1e-4, rel_error=1e-5)
