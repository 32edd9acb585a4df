"""Streaming STFT/iSTFT/mel == the offline transforms, for random chunkings, with saved state."""

from __future__ import annotations

import itertools

import pytest
import torch

import nbxsig.features as nf
from nbxsig.errors import BackendUnavailableError, ParameterTypeError, ParameterValueError
from nbxsig.streaming import StreamingISTFT, StreamingMelSpectrogram, StreamingSTFT
from nbxsig.testing import assert_close, random_tensor

STREAM_TOL = dict(atol=1e-6, rtol=1e-5, rel_error=1e-6)


def cuts(total: int, generator: torch.Generator, pieces: int = 7) -> list[tuple[int, int]]:
    """Random chunk boundaries, including empty and one-sample chunks."""
    inner = sorted(torch.randint(0, total + 1, (pieces,), generator=generator).tolist())
    edges = [0, 1, *inner, total] if total > 1 else [0, total]
    edges = sorted(edges)
    return list(itertools.pairwise(edges))


def run(stream, x: torch.Tensor, spans, *, restore_at: int | None = None) -> torch.Tensor:
    outs = []
    for i, (a, b) in enumerate(spans):
        if restore_at == i:  # save, build a fresh object, restore: must continue exactly
            state = {
                k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in stream.state_dict().items()
            }
            stream.reset()
            stream.load_state_dict(state)
        outs.append(stream.push(x[..., a:b]))
    outs.append(stream.flush())
    return torch.cat(outs, dim=-1)


GEOMETRIES = [
    pytest.param(64, 16, id="n64-h16"),
    pytest.param(20, 5, id="n20-h5"),
    pytest.param(51, 13, id="n51-h13"),
    pytest.param(32, 32, id="n32-h32"),
    pytest.param(16, 24, id="hop-above-nfft"),
]


@pytest.mark.parametrize(
    "center,pad_mode", [(True, "reflect"), (True, "constant"), (True, "replicate"), (False, "reflect")]
)
@pytest.mark.parametrize("n_fft,hop", GEOMETRIES)
def test_streaming_stft_equals_torch_stft(n_fft, hop, center, pad_mode, generator):
    x = random_tensor((3, 997), generator=generator)
    window = torch.hann_window(n_fft)
    stream = StreamingSTFT(n_fft, hop, window=window, center=center, pad_mode=pad_mode)
    got = run(stream, x, cuts(997, generator), restore_at=3)
    expected = torch.stft(x, n_fft, hop, window=window, center=center, pad_mode=pad_mode, return_complex=True)
    assert_close(got, expected, **STREAM_TOL)


def test_streaming_stft_single_stream_and_normalized(generator):
    x = random_tensor((500,), generator=generator)
    stream = StreamingSTFT(40, 10, win_length=30, window=torch.hamming_window(30), normalized=True)
    got = run(stream, x, cuts(500, generator))
    expected = torch.stft(x, 40, 10, 30, torch.hamming_window(30), normalized=True, return_complex=True)
    assert_close(got, expected, **STREAM_TOL)


@pytest.mark.parametrize("center", [False, True])
@pytest.mark.parametrize(
    "sizes", [[1] * 40, [6, 1, 1, 32], [7, 2, 3, 5, 23]], ids=["ones", "6-1-1-32", "mixed"]
)
def test_streaming_stft_hop_above_n_fft_keeps_the_skip_across_short_chunks(sizes, center, generator):
    # hop > n_fft skips the samples between frames; a chunk shorter than the rest of a skip must leave
    # the rest pending (it was dropped: a frame started too early, and one too many came out).
    x = random_tensor((2, 40), generator=generator, dtype=torch.float64)
    w = torch.hann_window(5, dtype=torch.float64) + 0.1
    expected = torch.stft(x, 5, 8, window=w, center=center, return_complex=True)
    spans = list(itertools.pairwise([0, *itertools.accumulate(sizes)]))
    got = run(StreamingSTFT(5, 8, window=w, center=center), x, spans, restore_at=2)
    assert_close(got, expected, dtype="float64")


@pytest.mark.parametrize("pad_mode", ["replicate", "reflect", "constant"])
def test_streaming_stft_empty_first_chunks(pad_mode, generator):
    # Empty chunks before the first sample: replicate padding copied the first sample of an empty
    # chunk (a raw torch error); a stream that never got a sample is refused at flush, as torch.stft
    # refuses an empty signal.
    x = random_tensor((2, 60), generator=generator, dtype=torch.float64)
    w = torch.hann_window(16, dtype=torch.float64)
    expected = torch.stft(x, 16, 4, window=w, pad_mode=pad_mode, return_complex=True)
    spans = [(0, 0), (0, 0), (0, 1), (1, 1), (1, 60)]
    assert_close(run(StreamingSTFT(16, 4, window=w, pad_mode=pad_mode), x, spans), expected, dtype="float64")
    stream = StreamingSTFT(16, 4, window=w, pad_mode=pad_mode)
    stream.push(x[:, :0])
    with pytest.raises(ParameterValueError, match=r"stream must .* got 0"):
        stream.flush()


@pytest.mark.parametrize(("n_fft", "win_length"), [(16, 8), (20, 12), (4, 4)], ids=str)
def test_streaming_default_hop_is_n_fft_over_4(n_fft, win_length, generator):
    # torch.stft / torch.istft default hop_length to n_fft // 4 (not win_length // 4).
    x = random_tensor((2, 120), generator=generator, dtype=torch.float64)
    w = torch.hann_window(win_length, dtype=torch.float64) + 0.1
    expected = torch.stft(x, n_fft, win_length=win_length, window=w, return_complex=True)
    got = run(StreamingSTFT(n_fft, win_length=win_length, window=w), x, cuts(120, generator))
    assert_close(got, expected, dtype="float64")
    stream = StreamingISTFT(n_fft, win_length=win_length, window=w, backend="torch")
    y = run(stream, expected, cuts(expected.shape[-1], generator))
    assert_close(y, torch.istft(expected, n_fft, win_length=win_length, window=w), dtype="float64")
    for cls in (StreamingSTFT, StreamingISTFT):  # as nbxsig.stft: torch fails inside for n_fft < 4
        with pytest.raises(ParameterValueError, match="the default n_fft // 4 is 0 for n_fft=3"):
            cls(3)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_streaming_stft_half_precision_computes_in_float32(dtype, generator):
    # As the offline stft: 16-bit samples, float32 arithmetic, complex64 out (push and flush alike).
    x = random_tensor((2, 300), generator=generator).to(dtype)
    w = torch.hann_window(20)
    stream = StreamingSTFT(20, 5, window=w)
    outs = [stream.push(x[:, a:b]) for a, b in cuts(300, generator)] + [stream.flush()]
    assert all(out.dtype == torch.complex64 for out in outs)
    expected = torch.stft(x.double(), 20, 5, window=w.double(), return_complex=True)
    assert_close(torch.cat(outs, dim=-1), expected, dtype="float32")


@pytest.mark.parametrize("cls", [StreamingSTFT, StreamingMelSpectrogram], ids=lambda c: c.__name__)
def test_streaming_dtype_is_fixed_by_the_first_push(cls, generator):
    # As StreamingISTFT: a float64 chunk into a float32 stream promoted its buffer, and every later output
    # (float32 chunks' too) was float64/complex128.
    x = random_tensor((2, 300), generator=generator)
    kw = (
        dict(n_fft=20, hop_length=5)
        if cls is StreamingSTFT
        else dict(sample_rate=8000, n_fft=20, hop_length=5, n_mels=6)
    )
    reference, mixed = cls(**kw), cls(**kw)
    expected = [reference.push(x[:, :100]), reference.push(x[:, 100:200]), reference.push(x[:, 200:])]
    got = [mixed.push(x[:, :100]), mixed.push(x[:, 100:200].double()), mixed.push(x[:, 200:])]
    for e, g in zip([*expected, reference.flush()], [*got, mixed.flush()], strict=True):
        assert g.dtype == e.dtype and torch.equal(g, e)


@pytest.mark.parametrize("center", [True, False])
def test_streaming_istft_complex128_in_float64(center, generator):
    x = random_tensor((2, 300), generator=generator, dtype=torch.float64)
    w = torch.hamming_window(20, dtype=torch.float64)
    spec = torch.stft(x, 20, 5, window=w, center=center, return_complex=True)
    got = run(
        StreamingISTFT(20, 5, window=w, center=center), spec, cuts(spec.shape[-1], generator), restore_at=2
    )
    assert got.dtype == torch.float64
    assert_close(got, torch.istft(spec, 20, 5, window=w, center=center), dtype="float64")
    # The Triton push takes float32 only: refused, and the stream is left unstarted.
    stream = StreamingISTFT(20, 5, window=w, center=center, backend="triton")
    with pytest.raises(BackendUnavailableError, match="not float64"):
        stream.push(spec[..., :4])
    assert stream.state_dict()["history"] is None


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_streaming_istft_lazily_conjugated_spectrum(backend, device, generator):
    if backend == "torch":
        device = torch.device("cpu")
    w = torch.hann_window(20)
    spec = random_tensor((2, 11, 30), generator=generator, dtype=torch.complex64)
    stream = StreamingISTFT(20, 5, window=w, backend=backend)
    spec_d = spec.to(device)
    got = torch.cat(
        [stream.push(spec_d[..., :13].conj()), stream.push(spec_d[..., 13:].conj()), stream.flush()], -1
    )
    expected = torch.istft(spec.to(torch.complex128).conj(), 20, 5, window=w.double())
    assert_close(got, expected, **STREAM_TOL)


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize(
    "n_fft,hop,center",
    [
        pytest.param(20, 5, True, id="n20-h5-center"),
        pytest.param(64, 16, True, id="n64-h16-center"),
        pytest.param(51, 13, False, id="n51-h13-nocenter"),
        pytest.param(32, 8, False, id="n32-h8-nocenter"),
        pytest.param(16, 16, False, id="n16-h16-no-history"),  # hop = n_fft: no frame overlaps the next
    ],
)
def test_streaming_istft_equals_torch_istft(n_fft, hop, center, backend, device, generator):
    if backend == "torch":
        device = torch.device("cpu")
    x = random_tensor((3, 600), generator=generator)
    # center=False needs a window without zeros at its ends for torch.istft (NOLA).
    window = torch.hann_window(n_fft) if center else torch.hamming_window(n_fft)
    spec = torch.stft(x, n_fft, hop, window=window, center=center, return_complex=True)
    stream = StreamingISTFT(n_fft, hop, window=window, center=center, backend=backend)
    got = run(stream, spec.to(device), cuts(spec.shape[-1], generator), restore_at=2)
    expected = torch.istft(spec, n_fft, hop, window=window, center=center)
    assert_close(got, expected, **STREAM_TOL)
    if center:
        assert_close(got, x[:, : got.shape[-1]], atol=1e-5, rtol=1e-5)  # perfect reconstruction


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_streaming_istft_state_dict_is_a_snapshot(backend, generator):
    # The pushes write the history buffers in place: state_dict() returned the live one, so a state
    # saved without a copy changed two pushes later and restored a wrong stream.
    w = torch.hann_window(16)
    spec = torch.stft(random_tensor((2, 200), generator=generator), 16, 4, window=w, return_complex=True)
    stream = StreamingISTFT(16, 4, window=w, backend=backend)
    stream.push(spec[..., :10])
    state = stream.state_dict()
    expected = [stream.push(spec[..., 10:20]), stream.push(spec[..., 20:30]), stream.flush()]
    restored = StreamingISTFT(16, 4, window=w, backend=backend)
    restored.load_state_dict(state)
    got = [restored.push(spec[..., 10:20]), restored.push(spec[..., 20:30]), restored.flush()]
    assert_close(torch.cat(got, -1), torch.cat(expected, -1), atol=0, rtol=0)


def test_streams_first_run_under_inference_mode_serve_gradients_later(generator):
    # The STFT's basis and the iSTFT's constants were cached by the first push: made under
    # torch.inference_mode they were inference tensors, and a later stream that needs gradients
    # raised "Inference tensors cannot be saved for backward".
    w = torch.hann_window(16)
    x = random_tensor((2, 120), generator=generator)
    spec = torch.stft(x, 16, 4, window=w, return_complex=True)
    stft, istft = StreamingSTFT(16, 4, window=w), StreamingISTFT(16, 4, window=w, backend="torch")
    with torch.inference_mode():
        run(stft, x, [(0, 120)])
        run(istft, spec, [(0, spec.shape[-1])])
    for stream, signal, offline in (
        (stft, x, lambda t: torch.stft(t, 16, 4, window=w, return_complex=True)),
        (istft, spec, lambda t: torch.istft(t, 16, 4, window=w)),
    ):
        leaf = signal.clone().requires_grad_(True)
        expected = offline(leaf)
        weight = random_tensor(expected.shape, generator=generator, dtype=expected.dtype)
        (expected,) = torch.autograd.grad((expected * weight).real.sum(), leaf)
        got = run(stream, leaf, cuts(signal.shape[-1], generator))
        (got,) = torch.autograd.grad((got * weight).real.sum(), leaf)
        assert_close(got, expected, **STREAM_TOL)


def test_streaming_istft_goes_on_outside_inference_mode(generator):
    # A stream started under torch.inference_mode kept inference-tensor history buffers, which the
    # torch push writes in place: the next push outside inference mode raised "Inplace update to
    # inference tensor outside InferenceMode is not allowed" (the Triton push went on).
    w = torch.hann_window(16)
    spec = torch.stft(random_tensor((2, 120), generator=generator), 16, 4, window=w, return_complex=True)
    stream = StreamingISTFT(16, 4, window=w, backend="torch")
    with torch.inference_mode():
        first = stream.push(spec[..., :10])
    got = torch.cat([first, stream.push(spec[..., 10:]), stream.flush()], -1)
    assert_close(got, torch.istft(spec, 16, 4, window=w), **STREAM_TOL)
    with torch.inference_mode():
        stream.push(spec[..., :10])
        state = stream.state_dict()
        restored = StreamingISTFT(16, 4, window=w, backend="torch")
        restored.load_state_dict(state)
    got = torch.cat([first, restored.push(spec[..., 10:]), restored.flush()], -1)
    assert_close(got, torch.istft(spec, 16, 4, window=w), **STREAM_TOL)


def test_streaming_stft_window_that_requires_grad_serves_every_stream(generator):
    # The cached basis carried the window's graph: the second stream's backward went through the first
    # one's freed graph ("Trying to backward through the graph a second time").
    x = random_tensor((2, 120), generator=generator)
    w = (0.5 + random_tensor((16,), generator=generator).abs()).requires_grad_(True)
    (expected,) = torch.autograd.grad(torch.stft(x, 16, 4, window=w, return_complex=True).abs().sum(), w)
    stream = StreamingSTFT(16, 4, window=w)
    for _ in range(2):
        (got,) = torch.autograd.grad(run(stream, x, cuts(120, generator)).abs().sum(), w)
        assert_close(got, expected, **STREAM_TOL)


@pytest.mark.parametrize("backend", [None, "triton"], ids=["auto", "triton"])
def test_streaming_istft_triton_push_does_not_drop_gradients(backend, device, generator, monkeypatch):
    # The Triton push has no backward: a spectrum that requires grad gave an output without a graph,
    # silently. Auto dispatch (Triton on a GPU; on the CPU with NBXSIG_BACKEND=triton) now takes the
    # differentiable torch push for it; an explicit backend="triton" says why it cannot.
    monkeypatch.setenv("NBXSIG_BACKEND", "triton")
    w = torch.hann_window(16)
    x = random_tensor((2, 120), generator=generator)
    spec = torch.stft(x, 16, 4, window=w, return_complex=True).requires_grad_(True)
    (expected,) = torch.autograd.grad((torch.istft(spec, 16, 4, window=w) * x).sum(), spec)
    stream = StreamingISTFT(16, 4, window=w.to(device), backend=backend)
    if backend == "triton":
        with pytest.raises(BackendUnavailableError, match="requires grad"):
            stream.push(spec.to(device))
        with torch.no_grad():  # nothing to differentiate: the Triton push serves it
            got = run(stream, spec.to(device), cuts(spec.shape[-1], generator))
        assert_close(got.cpu(), torch.istft(spec.detach(), 16, 4, window=w), **STREAM_TOL)
    else:
        got = run(stream, spec.to(device), cuts(spec.shape[-1], generator))
        (grad,) = torch.autograd.grad((got * x.to(device)).sum(), spec)
        assert_close(grad, expected, **STREAM_TOL)


def test_streaming_istft_refuses_another_device(generator):
    # (the torch push failed inside with a raw device error)
    stream = StreamingISTFT(16, 4, backend="torch")
    stream.push(random_tensor((2, 9, 3), generator=generator, dtype=torch.complex64))
    with pytest.raises(ParameterValueError, match="spec must be 2 streams on cpu"):
        stream.push(torch.zeros(2, 9, 3, dtype=torch.complex64, device="meta"))


def test_streaming_istft_zero_envelope_gives_zeros(generator):
    x = random_tensor((300,), generator=generator)
    spec = torch.stft(x, 16, 4, window=torch.hann_window(16), center=False, return_complex=True)
    stream = StreamingISTFT(16, 4, window=torch.hann_window(16), center=False, backend="torch")
    out = torch.cat([stream.push(spec), stream.flush()])
    # Sample 0 lies under the window's zero only: 0, not 0/0; every other sample is reconstructed.
    assert out.shape == (300,) and out[0] == 0
    assert_close(out[1:], x[1:], **STREAM_TOL)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_streaming_mel_equals_offline(backend, device, generator):
    if backend == "torch":
        device = torch.device("cpu")
    kw = dict(sample_rate=8000, n_fft=64, hop_length=16, n_mels=12)
    x = random_tensor((2, 700), generator=generator)
    stream = StreamingMelSpectrogram(**kw, backend=backend)
    got = run(stream, x.to(device), cuts(700, generator, pieces=4), restore_at=2)
    expected = nf.mel_spectrogram(x.double(), **kw, backend="torch")
    assert_close(got, expected, dtype="float32", rel_error=1e-6)


def test_streaming_mel_of_no_stream_gives_empty_frames(generator):
    # A (0, n) chunk: StreamingSTFT gives (0, F, k) frames; the mel stream gave (0, n_mels, 0) while no
    # frame was complete and then raised, naming the offline function's internal span ("input must be
    # a non-empty tensor, got ... (0, 56)").
    kw = dict(sample_rate=8000, n_fft=16, hop_length=4, n_mels=4)
    mel, stft = StreamingMelSpectrogram(**kw, backend="torch"), StreamingSTFT(16, 4)
    for stream, bins in ((mel, 4), (stft, 9)):
        shapes = [tuple(stream.push(torch.zeros(0, n)).shape) for n in (5, 50)]
        assert [*shapes, tuple(stream.flush().shape)] == [(0, bins, 0), (0, bins, 12), (0, bins, 2)]


def test_streaming_state_is_small(generator):
    stream = StreamingSTFT(400, 160, window=torch.hann_window(400))
    stream.push(random_tensor((4, 16000), generator=generator))
    state = stream.state_dict()
    assert state["buffer"].shape[1] < 400 and state["history"].shape[1] == 201
    istft = StreamingISTFT(20, 5, window=torch.hann_window(20), backend="torch")
    istft.push(torch.randn(256, 11, 48, dtype=torch.complex64))
    assert istft.state_dict()["history"].shape == (256, 11, 3, 2)


def test_streaming_errors(generator):
    stream = StreamingSTFT(64, 16)
    stream.push(random_tensor((2, 100), generator=generator))
    with pytest.raises(ParameterValueError, match="chunk must be 2 streams"):
        stream.push(random_tensor((3, 100), generator=generator))
    with pytest.raises(ParameterValueError, match="flush"):
        StreamingSTFT(64, 16).flush()
    short = StreamingSTFT(64, 16)
    short.push(random_tensor((1, 20), generator=generator))
    with pytest.raises(ParameterValueError, match="longer than n_fft // 2 = 32"):
        short.flush()
    with pytest.raises(ParameterValueError, match="hop_length must be <= n_fft - n_fft // 2"):
        StreamingISTFT(64, 40)
    with pytest.raises(ParameterValueError, match="spec must be a complex"):
        StreamingISTFT(64, 16).push(torch.zeros(2, 30, 4, dtype=torch.complex64))
    with pytest.raises(ParameterValueError, match="pad_mode must be one of"):
        StreamingSTFT(64, 16, pad_mode="circular")
    # As nbxsig.stft / torch.istft: hop_length <= win_length (hop > n_fft crashed inside).
    for kw in (dict(n_fft=4, hop_length=8), dict(n_fft=8, hop_length=6, win_length=4)):
        with pytest.raises(ParameterValueError, match=r"hop_length must be in 1\.\.win_length=4 for istft"):
            StreamingISTFT(**kw, center=False)
    # Flags are bools, as for stft/istft (1 is refused).
    for cls, flag in itertools.product((StreamingSTFT, StreamingISTFT), ("center", "normalized")):
        with pytest.raises(ParameterTypeError, match=f"{flag} must be a bool, got 1"):
            cls(64, 16, **{flag: 1})
    with pytest.raises(ParameterTypeError, match=r"spec must be a tensor of dtype float16, .*, got .*int32"):
        StreamingISTFT(64, 16).push(torch.ones(2, 33, 4, 2, dtype=torch.int32))


@pytest.mark.parametrize("backend", [None, "torch", "triton"])
@pytest.mark.parametrize(
    ("kw", "error", "message"),
    [
        (dict(n_mels=0), ParameterValueError, "n_mels must be >= 1, got 0"),
        (dict(n_mels="x"), ParameterTypeError, "n_mels must be an integer"),
        (dict(power=-1.0), ParameterValueError, "power must be a finite number > 0.0"),
        (dict(f_min=-1.0), ParameterValueError, "f_min must be a finite number >= 0.0"),
        (dict(window=torch.ones(100)), ParameterValueError, "window must be a 1-D tensor of win_length=128"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_streaming_mel_validates_at_construction(kw, error, message, backend):
    with pytest.raises(error, match=message):
        StreamingMelSpectrogram(n_fft=128, backend=backend, **kw)


def test_streaming_mel_bad_backend_and_failed_push(device, generator):
    with pytest.raises(ParameterValueError, match="backend must be None, 'triton' or 'torch'"):
        StreamingMelSpectrogram(n_fft=128, backend="cuda")
    # A push the backend refuses (Triton takes no float64) leaves the stream as it was: a first push
    # (later ones take the first one's dtype) fixes neither the layout nor the dtype.
    kw = dict(sample_rate=8000, n_fft=64, hop_length=16, n_mels=12)
    x = random_tensor((2, 500), generator=generator)
    stream = StreamingMelSpectrogram(**kw, backend="triton")
    with pytest.raises(BackendUnavailableError, match="not float64"):
        stream.push(x[:, :150].to(device, torch.float64))
    outs = [stream.push(x[:, :150].to(device)), stream.push(x[:, 150:].to(device)), stream.flush()]
    expected = nf.mel_spectrogram(x.double(), **kw, backend="torch")
    assert_close(torch.cat(outs, dim=-1), expected, dtype="float32", rel_error=1e-6)


@pytest.mark.gpu
def test_gpu_streaming_istft_many_streams(cuda_device, generator):
    x = random_tensor((256, 2400), generator=generator)
    window = torch.hann_window(20)
    spec = torch.stft(x, 20, 5, window=window, return_complex=True)
    stream = StreamingISTFT(20, 5, window=window, backend="triton")
    spec_d = spec.to(cuda_device)
    outs = [stream.push(spec_d[..., i : i + 48]) for i in range(0, spec.shape[-1], 48)]
    got = torch.cat([*outs, stream.flush()], dim=-1)
    assert_close(got, torch.istft(spec, 20, 5, window=window), **STREAM_TOL)


def test_streaming_istft_push_cached_launch(record_cached_launch, generator):
    # The GPU-only cached launch of the push kernel, Triton stubbed: pushes of one size compile once
    # and then go through the compiled launcher with every kernel parameter; the flush (no new
    # frame: the input borrows the output's pointer) is its own argument class.
    from nbxsig.kernels import streaming as KS

    compiles, runs = record_cached_launch(KS._push_launch)
    window = torch.hann_window(20)
    spec = torch.stft(random_tensor((3, 600), generator=generator), 20, 5, window=window, return_complex=True)
    stream = StreamingISTFT(20, 5, window=window, backend="triton")
    for i in range(0, 96, 24):
        stream.push(spec[..., i : i + 24])
    stream.flush()
    assert len(compiles) + len(runs) == 5 and len(runs) >= 2
    assert all(len(args) - 9 == len(KS._push_launch.params) for args in runs)


def test_public_homes():
    """The issue's API: the STFT streams live in nbxsig.stft, the mel stream in nbxsig.features."""
    import nbxsig.features
    import nbxsig.stft

    assert nbxsig.stft.StreamingSTFT is StreamingSTFT
    assert nbxsig.stft.StreamingISTFT is StreamingISTFT
    assert nbxsig.features.StreamingMelSpectrogram is StreamingMelSpectrogram


def _framed_stream(kind: str):
    if kind == "stft":
        window = torch.hann_window(32, dtype=torch.float64)
        stream = StreamingSTFT(32, 8, window=window)

        def offline(x):
            return torch.stft(x, 32, 8, window=window, return_complex=True)

    else:
        kw = dict(sample_rate=8000, n_fft=32, hop_length=8, n_mels=6)
        stream = StreamingMelSpectrogram(**kw, backend="torch")

        def offline(x):
            return nf.mel_spectrogram(x, **kw, backend="torch")

    return stream, offline


@pytest.mark.parametrize("kind", ["stft", "mel"])
def test_streaming_rank_is_fixed_by_the_first_push(kind, generator):
    # A 1-D first chunk makes the outputs stream-less. A later (1, n) chunk has the one stream too: it
    # was accepted and its output came back without the stream dimension ((F, k) for a (1, n) chunk),
    # and a (n,) chunk after a (1, n) one came back with it. Refused now, naming the first push's
    # layout, and the stream is left as it was.
    x = random_tensor((300,), generator=generator, dtype=torch.float64)
    stream, offline = _framed_stream(kind)
    outs = [stream.push(x[:100])]
    with pytest.raises(
        ParameterValueError, match=r"chunk must be a 1-D \(n,\) tensor, as in the first push .* \(1, 50\)"
    ):
        stream.push(x[None, 100:150])
    outs += [stream.push(x[100:]), stream.flush()]
    assert all(out.dim() == 2 for out in outs)
    assert_close(torch.cat(outs, -1), offline(x), dtype="float64")
    # The reverse, and after a flush (which resets) the other rank is a new stream's choice.
    outs = [stream.push(x[None, :100])]
    with pytest.raises(
        ParameterValueError, match=r"chunk must be a 2-D \(1, n\) tensor, as in the first push .* \(50,\)"
    ):
        stream.push(x[100:150])
    outs += [stream.push(x[None, 100:]), stream.flush()]
    assert all(out.dim() == 3 for out in outs)
    assert_close(torch.cat(outs, -1), offline(x[None]), dtype="float64")


@pytest.mark.parametrize("kind", ["stft", "mel"])
def test_streaming_state_dict_keeps_the_rank(kind, generator):
    # A state saved from a 1-D stream restores a 1-D stream in a fresh object: stream-less outputs,
    # flush included, and a (1, n) chunk refused.
    x = random_tensor((300,), generator=generator, dtype=torch.float64)
    stream, offline = _framed_stream(kind)
    first = stream.push(x[:120])
    state = stream.state_dict()
    assert state["squeeze"] is True
    restored, _ = _framed_stream(kind)
    restored.load_state_dict(state)
    with pytest.raises(ParameterValueError, match=r"chunk must be a 1-D \(n,\) tensor"):
        restored.push(x[None, 120:])
    outs = [first, restored.push(x[120:]), restored.flush()]
    assert all(out.dim() == 2 for out in outs)
    assert_close(torch.cat(outs, -1), offline(x), dtype="float64")
    restored.load_state_dict(state)
    restored.reset()  # a reset stream takes either rank again
    assert restored.push(x[None]).dim() == 3


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_streaming_istft_rank_is_fixed_by_the_first_push(backend, device, generator):
    # The iSTFT squeezed each push by its own rank and the flush by the first push's: a (1, F, k)
    # push after (F, k) ones gave (1, n) samples, the flush (n,). Refused now; complex and real layouts
    # of the same rank still mix. The saved state keeps the rank.
    if backend == "torch":
        device = torch.device("cpu")
    w = torch.hann_window(20)
    x = random_tensor((400,), generator=generator)
    spec = torch.stft(x, 20, 5, window=w, return_complex=True).to(device)
    stream = StreamingISTFT(20, 5, window=w, backend=backend)
    outs = [stream.push(spec[:, :30])]
    with pytest.raises(
        ParameterValueError,
        match=r"spec must be a complex \(11, frames\) or real \(11, frames, 2\) tensor, as in the first push",
    ):
        stream.push(spec[None, :, 30:40])
    outs.append(stream.push(torch.view_as_real(spec[:, 30:50])))
    restored = StreamingISTFT(20, 5, window=w, backend=backend)
    restored.load_state_dict(stream.state_dict())
    with pytest.raises(ParameterValueError, match=r"spec must be a complex \(11, frames\)"):
        restored.push(torch.view_as_real(spec[None, :, 50:]))
    outs += [restored.push(spec[:, 50:]), restored.flush()]
    assert all(out.dim() == 1 for out in outs)
    assert_close(torch.cat(outs), torch.istft(spec.cpu(), 20, 5, window=w), **STREAM_TOL)
    # The reverse: a (1, F, k) stream refuses (F, k), and keeps its stream dimension to the end.
    outs = [restored.push(spec[None, :, :30])]
    with pytest.raises(
        ParameterValueError, match=r"spec must be a complex \(1, 11, frames\) or real \(1, 11, frames, 2\)"
    ):
        restored.push(spec[:, 30:])
    outs += [restored.push(spec[None, :, 30:]), restored.flush()]
    assert all(out.dim() == 2 for out in outs)
    assert_close(torch.cat(outs, -1), torch.istft(spec[None].cpu(), 20, 5, window=w), **STREAM_TOL)


@pytest.mark.parametrize("kind", ["stft", "mel"])
def test_streaming_state_after_a_long_chunk_is_small(kind, generator):
    # The padding history was a slice of the concatenation with the chunk: it kept the whole chunk's
    # storage alive, and torch.save of the state wrote all of it (4 MB after a 1e6-sample push).
    if kind == "stft":
        stream = StreamingSTFT(64, 16)
    else:
        stream = StreamingMelSpectrogram(n_fft=64, n_mels=8, backend="torch")
    stream.push(random_tensor((1, 100_000), generator=generator))
    for key in ("buffer", "history"):
        tensor = stream.state_dict()[key]
        assert tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size() < 64 * 4


@pytest.mark.parametrize("kind", ["stft", "mel"])
def test_streaming_center_false_flush_refuses_a_stream_shorter_than_a_frame(kind, generator):
    # torch.stft and mel_spectrogram refuse a signal shorter than n_fft for center=False; the stream's
    # flush returned no frame, silently. The refusal leaves the stream: more samples complete it.
    kw = dict(sample_rate=8000, n_fft=32, hop_length=8, n_mels=6, center=False)
    x = random_tensor((2, 40), generator=generator, dtype=torch.float64)
    if kind == "stft":
        w = torch.hann_window(32, dtype=torch.float64)
        stream = StreamingSTFT(32, 8, window=w, center=False)
        expected = torch.stft(x, 32, 8, window=w, center=False, return_complex=True)
    else:
        stream = StreamingMelSpectrogram(**kw, backend="torch")
        expected = nf.mel_spectrogram(x, **kw, backend="torch")
    first = stream.push(x[:, :31])
    with pytest.raises(ParameterValueError, match="at least n_fft = 32 samples for center=False, got 31"):
        stream.flush()
    got = torch.cat([first, stream.push(x[:, 31:]), stream.flush()], -1)
    assert_close(got, expected, dtype="float64")


def test_streaming_istft_single_frame_even_n_fft_center_is_refused(generator):
    # One frame of an even n_fft with center=True leaves no sample once both ends are trimmed:
    # nbxsig.stft.istft refuses it (torch.istft fails inside); the stream's flush returned nothing.
    # The refusal leaves the stream: more frames complete it.
    w = torch.hann_window(16, dtype=torch.float64)
    x = random_tensor((2, 60), generator=generator, dtype=torch.float64)
    spec = torch.stft(x, 16, 4, window=w, return_complex=True)
    stream = StreamingISTFT(16, 4, window=w, backend="torch")
    assert stream.push(spec[..., :1]).shape == (2, 0)
    with pytest.raises(
        ParameterValueError, match="more than one frame for an even n_fft=16 with center=True"
    ):
        stream.flush()
    got = torch.cat([stream.push(spec[..., 1:]), stream.flush()], -1)
    assert_close(got, torch.istft(spec, 16, 4, window=w), dtype="float64")
