"""More signals than a CUDA grid axis holds.

CUDA runs at most 65535 programs along grid axes 1 and 2 and refuses a larger launch ("Triton Error
[CUDA]: invalid argument"). The spectral launchers put the signals there (a batch of 70000 short clips
failed on the GPU), so they run larger batches in slices. On the CPU the ``grid_limit`` fixture lowers
the limit to 3 and the interpreter refuses any larger grid: a batch of 7 takes the sliced paths. The
stencils and the resampler have the same test in test_filters.py.
"""

from __future__ import annotations

import pytest
import torch

from nbxsig import stft as S
from nbxsig import transforms
from nbxsig.kernels import fourstep
from nbxsig.kernels import stft as K
from nbxsig.streaming import StreamingISTFT
from nbxsig.testing import assert_close, random_tensor

F64 = torch.float64

# (n_fft, hop, the dense kernel): the unrolled and tiled dense kernels, and the fft path's framing and
# overlap-add kernels.
SPECTRAL_CASES = [
    pytest.param(16, 4, "unrolled", id="n16-unrolled"),
    pytest.param(20, 5, "tiled", id="n20-tiled"),
    pytest.param(48, 12, "unrolled", id="n48-fft"),
]


@pytest.mark.parametrize(("n_fft", "hop", "dense_kernel"), SPECTRAL_CASES)
def test_stft_istft_spectrogram_over_the_grid_limit(
    n_fft, hop, dense_kernel, grid_limit, generator, device, monkeypatch
):
    monkeypatch.setattr(K, "DENSE_KERNEL", dense_kernel)
    monkeypatch.setattr(S, "_STFT_PLANS", {})
    monkeypatch.setattr(S, "_ISTFT_PLANS", {})
    x = random_tensor((grid_limit * 2 + 1, 5 * n_fft + 3), generator=generator, dtype=F64)
    window = torch.hann_window(n_fft, dtype=F64) + 0.1  # (NOLA without the periodic window's zero)
    xr = x.clone().requires_grad_()
    expected = torch.stft(xr, n_fft, hop, window=window, return_complex=True)
    (expected_grad,) = torch.autograd.grad(expected.abs().pow(2).sum(), xr)
    xt, wt = x.float().to(device).requires_grad_(), window.float().to(device)
    spec = S.stft(xt, n_fft, hop, window=wt, backend="triton")
    assert_close(spec, expected, dtype="float32", rel_error=2e-6)
    (grad,) = torch.autograd.grad(spec.abs().pow(2).sum(), xt)
    assert_close(grad, expected_grad, dtype="float32", rel_error=1e-5)
    power = S.spectrogram(xt.detach(), n_fft, hop, window=wt, power=2.0, backend="triton")
    assert_close(power, expected.detach().abs() ** 2, dtype="float32", rel_error=1e-5)

    sr = expected.detach().requires_grad_()
    signal = torch.istft(sr, n_fft, hop, window=window, length=x.shape[-1])
    (expected_sgrad,) = torch.autograd.grad(signal.pow(2).sum(), sr)
    st = expected.detach().to(torch.complex64).to(device).requires_grad_()
    for _ in range(2):  # the second call runs the stored plan
        y = S.istft(st, n_fft, hop, window=wt, length=x.shape[-1], backend="triton")
        assert_close(y, signal.detach(), dtype="float32", rel_error=2e-6)
        (sgrad,) = torch.autograd.grad(y.pow(2).sum(), st)
        assert_close(sgrad, expected_sgrad, dtype="float32", rel_error=1e-5)
        with torch.no_grad():
            y = S.istft(st, n_fft, hop, window=wt, length=x.shape[-1], backend="triton")
        assert_close(y, signal.detach(), dtype="float32", rel_error=2e-6)


def test_fft_path_frames_of_more_sample_blocks_than_a_grid_axis_holds(grid_limit, generator, device):
    # The fft path frames in blocks of 256 samples: on grid axis 1 of their own, they passed CUDA's limit
    # from n_fft ≈ 16.8M (here 1031 > 3 · 256, forward and backward).
    n_fft, hop = 1031, 300
    x = random_tensor((2, 2500), generator=generator, dtype=F64)
    window = torch.hann_window(n_fft, dtype=F64)
    xr = x.clone().requires_grad_()
    expected = torch.stft(xr, n_fft, hop, window=window, return_complex=True)
    (expected_grad,) = torch.autograd.grad(expected.abs().pow(2).sum(), xr)
    xt = x.float().to(device).requires_grad_()
    spec = S.stft(xt, n_fft, hop, window=window.float().to(device), backend="triton")
    assert_close(spec, expected, dtype="float32")
    (grad,) = torch.autograd.grad(spec.abs().pow(2).sum(), xt)
    assert_close(grad, expected_grad, dtype="float32")


def test_four_step_paths_over_the_grid_limit(grid_limit, generator, device, monkeypatch):
    # The GPU's four-step stft and spectrogram kernels (the CPU takes the fft path unless forced).
    monkeypatch.setattr(fourstep, "stft_path", lambda **route: "fourstep")
    monkeypatch.setattr(fourstep, "spectrogram_path", lambda **route: "fourstep")
    x = random_tensor((grid_limit * 2 + 1, 300), generator=generator, dtype=F64)
    window = torch.hann_window(64, dtype=F64)
    expected = torch.stft(x, 64, 16, window=window, return_complex=True)
    xt, wt = x.float().to(device), window.float().to(device)
    assert_close(S.stft(xt, 64, 16, window=wt, backend="triton"), expected, dtype="float32", rel_error=2e-6)
    power = S.spectrogram(xt, 64, 16, window=wt, power=2.0, backend="triton")
    assert_close(power, expected.abs() ** 2, dtype="float32", rel_error=2e-6)


@pytest.mark.parametrize("whisper", [False, True], ids=["mel", "whisper"])
def test_mel_over_the_grid_limit(whisper, grid_limit, generator, device):
    # Whisper's floor is per signal: slices of the batch give each its own maximum.
    x = random_tensor((grid_limit * 2 + 1, 1200), generator=generator)
    if whisper:
        from nbxsig.features import whisper_log_mel

        expected = whisper_log_mel(x.double(), backend="torch")
        got = whisper_log_mel(x.to(device), backend="triton")
        assert_close(got, expected, dtype="float32", atol=1e-4)
        return
    opts = dict(sample_rate=8000, n_fft=64, hop_length=16, n_mels=12)
    expected = transforms.MelSpectrogram(**opts, backend="torch").double()(x.double())
    xt = x.to(device).requires_grad_()
    got = transforms.MelSpectrogram(**opts, backend="triton").to(device)(xt)
    assert_close(got, expected, dtype="float32", rel_error=2e-6)
    got.sum().backward()  # (the backward recomputes the torch twin: no launch)
    assert xt.grad is not None and xt.grad.isfinite().all()


def test_streaming_istft_push_over_the_grid_limit(grid_limit, generator, device):
    # A push of more samples than 3 blocks hold (984: 4 blocks of 256) runs as several pushes of the stream.
    n_fft, hop = 16, 4
    spec = torch.stft(random_tensor((2, 1000), generator=generator, dtype=F64), n_fft, hop,
                      window=torch.hann_window(n_fft, dtype=F64), return_complex=True)  # fmt: skip
    expected = torch.istft(spec, n_fft, hop, window=torch.hann_window(n_fft, dtype=F64), length=1000)
    stream = StreamingISTFT(n_fft, hop, window=torch.hann_window(n_fft), backend="triton")
    st = spec.to(torch.complex64).to(device)
    pushed = [stream.push(st[..., :5]), stream.push(st[..., 5:]), stream.flush()]
    assert stream.frames == 0  # (flush resets)
    got = torch.cat(pushed, -1)[:, :1000]
    assert_close(got, expected, dtype="float32", rel_error=2e-6)


@pytest.mark.gpu
def test_more_signals_than_a_grid_axis_holds_on_the_gpu(cuda_device, generator):
    """The real limit, on the GPU: 65535 + 2 signals (and a push of more samples than 65535 blocks)."""
    n = 65535 + 2
    x = random_tensor((n, 80), generator=generator).to(cuda_device)
    window = torch.hann_window(16, device=cuda_device)
    expected = torch.stft(x, 16, 4, window=window, return_complex=True)
    spec = S.stft(x, 16, 4, window=window, backend="triton")
    assert_close(spec, expected, dtype="float32", rel_error=2e-6)
    y = S.istft(spec, 16, 4, window=window, length=80, backend="triton")
    assert_close(y, torch.istft(expected, 16, 4, window=window, length=80), dtype="float32", rel_error=2e-6)
    opts = dict(sample_rate=8000, n_fft=64, hop_length=16, n_mels=12)
    mel = transforms.MelSpectrogram(**opts, backend="triton").to(cuda_device)(x)
    assert_close(mel, transforms.MelSpectrogram(**opts, backend="torch").to(cuda_device)(x), dtype="float32")
    long = random_tensor((1, 65535 * 256 + 4096), generator=generator).to(cuda_device)
    spec = torch.stft(long, 16, 4, window=window, return_complex=True)
    stream = StreamingISTFT(16, 4, window=window, backend="triton")
    got = torch.cat([stream.push(spec), stream.flush()], -1)[:, : long.shape[-1]]
    assert_close(got, long, dtype="float32", atol=1e-5)
