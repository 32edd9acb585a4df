"""ONNX export of the torch-backend modules, run in onnxruntime, against torch/torchaudio."""

from __future__ import annotations

import io
import warnings

import onnx
import onnxruntime as ort
import pytest
import torch

import nbxsig.transforms as T
from nbxsig.testing import assert_close, random_tensor

ONNX_TOL = dict(atol=1e-5, rtol=1e-4, rel_error=1e-5)


def export(module: torch.nn.Module, example: torch.Tensor, dynamic: dict) -> ort.InferenceSession:
    """Export with the TorchScript exporter (the dynamo one needs onnxscript, not a dependency)."""
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation and tracer warnings
        torch.onnx.export(
            module.eval(),
            (example,),
            buf,
            dynamo=False,
            input_names=["x"],
            output_names=["y"],
            opset_version=17,
            dynamic_axes={"x": dynamic},
        )
    graph = buf.getvalue()

    ops = {node.op_type for node in onnx.load_from_string(graph).graph.node}
    assert not ops & {"DFT", "STFT"}, ops  # real-valued ops only
    return ort.InferenceSession(graph, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param(dict(sample_rate=16000, n_fft=400, hop_length=160, n_mels=80), id="asr-80"),
        pytest.param(
            dict(
                n_fft=512,
                win_length=400,
                hop_length=128,
                n_mels=64,
                power=1.0,
                pad_mode="constant",
                norm="slaney",
                mel_scale="slaney",
            ),
            id="slaney-power1",
        ),
    ],
)
def test_mel_spectrogram_onnx_matches_torchaudio(kwargs, generator):
    module = T.MelSpectrogram(**kwargs, backend="torch")
    session = export(module, random_tensor((2, 8000), generator=generator), {0: "batch", 1: "time"})
    reference = __import__("torchaudio").transforms.MelSpectrogram(**kwargs)
    module.load_state_dict(reference.state_dict())
    for length in (8000, 5555):  # a length the export never saw
        x = random_tensor((3, length), generator=generator)
        got = torch.from_numpy(session.run(None, {"x": x.numpy()})[0])
        assert_close(got, reference(x), **ONNX_TOL)


@pytest.mark.parametrize("center", [True, False], ids=["center", "nocenter"])
def test_spectrogram_and_inverse_onnx_match_torch(center, generator):
    window_fn = torch.hann_window if center else torch.hamming_window
    spec_module = T.Spectrogram(n_fft=64, hop_length=16, power=2.0, center=center, window_fn=window_fn)
    x = random_tensor((2, 1000), generator=generator)
    session = export(spec_module, x, {0: "batch", 1: "time"})
    x2 = random_tensor((2, 777), generator=generator)
    expected = torch.stft(x2, 64, 16, window=window_fn(64), center=center, return_complex=True).abs() ** 2
    assert_close(torch.from_numpy(session.run(None, {"x": x2.numpy()})[0]), expected, **ONNX_TOL)

    inverse = T.InverseSpectrogram(n_fft=64, hop_length=16, center=center, window_fn=window_fn)
    spec = torch.view_as_real(torch.stft(x, 64, 16, window=window_fn(64), center=center, return_complex=True))
    session = export(inverse, spec, {0: "batch", 2: "frames"})
    for length in (1000, 613):
        sig = random_tensor((2, length), generator=generator)
        complex_spec = torch.stft(sig, 64, 16, window=window_fn(64), center=center, return_complex=True)
        got = torch.from_numpy(session.run(None, {"x": torch.view_as_real(complex_spec).numpy()})[0])
        expected = torch.istft(complex_spec, 64, 16, window=window_fn(64), center=center)
        assert_close(got, expected, **ONNX_TOL)


@pytest.mark.parametrize("center", [True, False], ids=["center", "nocenter"])
def test_stft_modules_onnx_match_torch(center, generator):
    from nbxsig.stft import ISTFT, STFT

    window = torch.hann_window(64) if center else torch.hamming_window(64)
    forward = STFT(64, 16, window=window, center=center, return_complex=False, backend="torch")
    session = export(forward, random_tensor((2, 1000), generator=generator), {0: "batch", 1: "time"})
    for length in (1000, 777):
        x = random_tensor((3, length), generator=generator)
        expected = torch.view_as_real(
            torch.stft(x, 64, 16, window=window, center=center, return_complex=True)
        )
        assert_close(torch.from_numpy(session.run(None, {"x": x.numpy()})[0]), expected, **ONNX_TOL)

    inverse = ISTFT(64, 16, window=window, center=center, backend="torch")
    example = torch.view_as_real(
        torch.stft(
            random_tensor((2, 1000), generator=generator),
            64,
            16,
            window=window,
            center=center,
            return_complex=True,
        )
    )
    session = export(inverse, example, {0: "batch", 2: "frames"})
    for length in (1000, 613):
        spec = torch.stft(
            random_tensor((2, length), generator=generator),
            64,
            16,
            window=window,
            center=center,
            return_complex=True,
        )
        got = torch.from_numpy(session.run(None, {"x": torch.view_as_real(spec).numpy()})[0])
        assert_close(got, torch.istft(spec, 64, 16, window=window, center=center), **ONNX_TOL)


@pytest.mark.parametrize("pad_mode", ["reflect", "constant"])
def test_stft_align_to_window_onnx_matches_torch(pad_mode, generator):
    # torch 2.11's align_to_window (the signal padded by (n_fft - win_length) // 2 with pad_mode) exports
    # with the rest of the module: the padding is an ONNX Pad.
    from nbxsig.stft import STFT

    window = torch.hann_window(40)
    args = dict(window=window, center=False, pad_mode=pad_mode, align_to_window=True)
    forward = STFT(64, 16, 40, **args, return_complex=False, backend="torch")
    session = export(forward, random_tensor((2, 1000), generator=generator), {0: "batch", 1: "time"})
    for length in (1000, 777):
        x = random_tensor((3, length), generator=generator)
        expected = torch.view_as_real(torch.stft(x, 64, 16, 40, **args, return_complex=True))
        assert_close(torch.from_numpy(session.run(None, {"x": x.numpy()})[0]), expected, **ONNX_TOL)


class _FixedLength(torch.nn.Module):
    """An inverse module called with a constant ``length`` (an int baked into the exported graph)."""

    def __init__(self, inverse: torch.nn.Module, length: int) -> None:
        super().__init__()
        self.inverse, self.length = inverse, length

    def forward(self, spec: torch.Tensor) -> torch.Tensor:
        return self.inverse(spec, self.length)


@pytest.mark.filterwarnings("ignore:The length of signal is shorter")  # torch.istft's, padding as asked
@pytest.mark.parametrize("module", ["ISTFT", "InverseSpectrogram"])
def test_inverse_onnx_fixed_length_any_frame_count(module, generator):
    # A graph exported with a fixed length must give `length` samples for every frame count, as
    # torch.istft does: its trim was Python's min/max, evaluated once for the example's frames, so
    # fewer frames gave 224 of 300 samples (and more frames kept the example's zero padding).
    from nbxsig.stft import ISTFT

    window = torch.hann_window(64)
    inverse = ISTFT(64, 16, window=window, backend="torch") if module == "ISTFT" else None
    inverse = inverse or T.InverseSpectrogram(64, hop_length=16)

    def spectrum(n_signal):
        x = random_tensor((2, n_signal), generator=generator)
        return torch.stft(x, 64, 16, window=window, return_complex=True)

    for example, others in ((300, (200, 420)), (200, (300, 420))):  # trimmed / padded at export
        session = export(_FixedLength(inverse, 250), torch.view_as_real(spectrum(example)), {2: "frames"})
        for n_signal in others:
            spec = spectrum(n_signal)
            got = torch.from_numpy(session.run(None, {"x": torch.view_as_real(spec).numpy()})[0])
            assert_close(got, torch.istft(spec, 64, 16, window=window, length=250), **ONNX_TOL)
