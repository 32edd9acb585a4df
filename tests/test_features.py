"""nbxsig.features vs torchaudio, librosa, the Whisper recipe and float64 oracles."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torchaudio
from test_features_gpu import stft_mel_oracle, whisper_oracle

import nbxsig.features as nf
from nbxsig.errors import ParameterTypeError, ParameterValueError
from nbxsig.testing import assert_close, random_tensor

F64 = torch.float64


# ---------------------------------------------------------------- mel scale and filter banks


@pytest.mark.parametrize("mel_scale", ["htk", "slaney"])
def test_hz_to_mel_matches_torchaudio_and_round_trips(mel_scale, generator):
    freqs = random_tensor((64,), generator=generator, dtype=F64, low=0.0, high=24000.0)
    for f in [*freqs[:8].tolist(), 0.0, 1000.0, 999.999]:
        assert nf.hz_to_mel(f, mel_scale) == pytest.approx(
            torchaudio.functional.functional._hz_to_mel(f, mel_scale), rel=1e-14, abs=1e-12
        )
    mels = nf.hz_to_mel(freqs, mel_scale)
    expected = torch.tensor(
        [torchaudio.functional.functional._hz_to_mel(f, mel_scale) for f in freqs.tolist()], dtype=F64
    )
    assert_close(mels, expected.to(F64))
    assert_close(nf.mel_to_hz(mels, mel_scale), freqs)
    assert_close(
        nf.mel_to_hz(mels, mel_scale), torchaudio.functional.functional._mel_to_hz(mels.clone(), mel_scale)
    )


def test_mel_scale_matches_librosa(generator):
    import librosa

    freqs = random_tensor((32,), generator=generator, dtype=F64, low=0.0, high=22050.0)
    for htk, scale in ((True, "htk"), (False, "slaney")):
        expected = torch.from_numpy(librosa.hz_to_mel(freqs.numpy(), htk=htk))
        assert_close(nf.hz_to_mel(freqs, scale), expected)


FBANK_GRID = [
    pytest.param((201, 0.0, 8000.0, 128, 16000), id="n201-0-8k-m128-sr16k"),
    pytest.param((201, 0.0, 8000.0, 80, 16000), id="n201-0-8k-m80-sr16k"),
    pytest.param((257, 50.0, 7600.0, 40, 22050), id="n257-50-7600-m40-sr22050"),
    pytest.param((513, 20.0, 11025.0, 64, 22050), id="n513-20-11025-m64-sr22050"),
    pytest.param((33, 0.0, 8000.0, 40, 16000), id="n33-m40-empty-filters"),
    pytest.param((201, 6000.0, 100.0, 10, 16000), id="fmin-above-fmax"),
    pytest.param((201, 300.0, 300.0, 10, 16000), id="fmin-equals-fmax"),
    pytest.param((201, 0.0, 12000.0, 30, 16000), id="fmax-above-nyquist"),
    pytest.param((1, 0.0, 8000.0, 4, 16000), id="n1"),
]


@pytest.mark.parametrize("norm", [None, "slaney"])
@pytest.mark.parametrize("mel_scale", ["htk", "slaney"])
@pytest.mark.parametrize("args", FBANK_GRID)
def test_mel_filterbank_equals_torchaudio(args, norm, mel_scale):
    # torchaudio computed in float64 (its linspace follows the default dtype) must match to rounding;
    # its float32 result carries its own cancellation error (~1e-5 of the peak), so fp32 is compared
    # at that level.
    with warnings.catch_warnings(record=True) as theirs:
        warnings.simplefilter("always")
        previous = torch.get_default_dtype()
        torch.set_default_dtype(F64)
        try:
            expected64 = torchaudio.functional.melscale_fbanks(*args, norm=norm, mel_scale=mel_scale)
        finally:
            torch.set_default_dtype(previous)
        expected32 = torchaudio.functional.melscale_fbanks(*args, norm=norm, mel_scale=mel_scale)
    with warnings.catch_warnings(record=True) as ours:
        warnings.simplefilter("always")
        got64 = nf.mel_filterbank(*args, norm=norm, mel_scale=mel_scale, dtype=F64)
        got32 = nf.mel_filterbank(*args, norm=norm, mel_scale=mel_scale)
    assert got64.shape == (args[0], args[3]) and got32.dtype == torch.float32
    assert_close(got64, expected64, atol=1e-12, rtol=1e-9)
    assert_close(got32, expected32, atol=3e-5, rtol=1e-4)

    def warned(ws) -> bool:
        return any("all zero values" in str(w.message) for w in ws)

    assert warned(theirs) == warned(ours)


@pytest.mark.parametrize("n_fft,n_mels,sr", [(400, 80, 16000), (400, 128, 16000), (2048, 128, 22050)])
def test_mel_filterbank_slaney_equals_librosa(n_fft, n_mels, sr):
    import librosa

    expected = librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels, dtype="float64")
    got = nf.mel_filterbank(n_fft // 2 + 1, 0.0, sr / 2, n_mels, sr, "slaney", "slaney", dtype=F64)
    if sr % 2 == 0:  # torchaudio's bins end at sr // 2, librosa's at sr / 2: equal for even rates
        assert_close(got.T, torch.from_numpy(expected), atol=1e-12, rtol=1e-9)
    else:
        assert_close(got.T, torch.from_numpy(expected), atol=1e-4, rtol=1e-2)


def test_mel_filterbank_errors():
    with pytest.raises(ParameterValueError, match="n_mels must be >= 1, got 0"):
        nf.mel_filterbank(201, 0.0, 8000.0, 0, 16000)
    with pytest.raises(ParameterValueError, match="norm must be one of None, 'slaney'"):
        nf.mel_filterbank(201, 0.0, 8000.0, 10, 16000, norm="area")
    with pytest.raises(ParameterValueError, match="mel_scale"):
        nf.hz_to_mel(100.0, "mel")
    with pytest.raises(ParameterValueError, match="f_min"):
        nf.mel_filterbank(201, -1.0, 8000.0, 10, 16000)
    with pytest.raises(ParameterTypeError, match="n_freqs must be an integer"):
        nf.mel_filterbank(201.0, 0.0, 8000.0, 10, 16000)


def test_mel_filterbank_names_a_bad_dtype_or_device():
    import numpy as np

    # A numpy dtype failed inside the error message (TypeError) and a bad device string met torch's
    # RuntimeError; both are named now.
    with pytest.raises(
        ParameterTypeError, match=r"dtype must be a floating torch dtype .* got <class 'numpy"
    ):
        nf.mel_filterbank(201, 0.0, 8000.0, 10, 16000, dtype=np.float32)
    with pytest.raises(ParameterTypeError, match=r"dtype must be a floating torch dtype .* got torch\.int32"):
        nf.mel_filterbank(201, 0.0, 8000.0, 10, 16000, dtype=torch.int32)
    with pytest.raises(ParameterValueError, match=r"device must be a torch\.device or a device string"):
        nf.mel_filterbank(201, 0.0, 8000.0, 10, 16000, device="gpu0")


def test_mel_filterbank_takes_integral_float_sample_rate():
    # torchaudio accepts sample_rate=22050.0 (its bins are linspace(0, sample_rate // 2)).
    previous = torch.get_default_dtype()
    torch.set_default_dtype(F64)
    try:
        expected = torchaudio.functional.melscale_fbanks(257, 30.0, 9000.0, 40, 22050.0, "slaney", "slaney")
    finally:
        torch.set_default_dtype(previous)
    got = nf.mel_filterbank(257, 30.0, 9000.0, 40, 22050.0, "slaney", "slaney", dtype=F64)
    assert_close(got, expected, atol=1e-12, rtol=1e-9)
    for bad in (22050.5, True):
        with pytest.raises(ParameterTypeError, match="sample_rate must be an integer"):
            nf.mel_filterbank(257, 30.0, 9000.0, 40, bad)


@pytest.mark.parametrize("mel_scale", ["htk", "slaney"])
def test_mel_conversions_of_floats_follow_the_tensor_path(mel_scale, generator):
    # Outside the formulas' domain (HTK mels of f <= -700 Hz, Hz of huge mels) torchaudio's float path
    # raises math's ValueError/OverflowError; a float here gives what a float64 tensor gives.
    freqs = [*random_tensor((6,), generator=generator, dtype=F64, low=-3000.0, high=-700.0).tolist(), -700.0]
    mels = [*random_tensor((6,), generator=generator, dtype=F64, low=2e4, high=1e6).tolist(), 1e6]
    for f in freqs:
        expected = nf.hz_to_mel(torch.tensor([f], dtype=F64), mel_scale)
        assert_close(torch.tensor([nf.hz_to_mel(f, mel_scale)], dtype=F64), expected, atol=0, rtol=0)
    for m in mels:
        expected = nf.mel_to_hz(torch.tensor([m], dtype=F64), mel_scale)
        assert_close(torch.tensor([nf.mel_to_hz(m, mel_scale)], dtype=F64), expected, atol=0, rtol=0)
    assert math.isinf(nf.mel_to_hz(1e6, mel_scale))
    if mel_scale == "htk":
        assert math.isnan(nf.hz_to_mel(-800.0)) and nf.hz_to_mel(-700.0) == -math.inf


def test_mel_conversions_name_numpy_arrays():
    import numpy as np

    with pytest.raises(
        ParameterTypeError, match=r"f must be a real number or a torch.Tensor, got a numpy.ndarray"
    ):
        nf.hz_to_mel(np.array([100.0, 200.0]))
    with pytest.raises(
        ParameterTypeError, match=r"m must be a real number or a torch.Tensor, got a numpy.ndarray"
    ):
        nf.mel_to_hz(np.array([100.0, 200.0]))


@pytest.mark.parametrize("mel_scale", ["htk", "slaney"])
def test_mel_conversions_refuse_complex_tensors(mel_scale):
    # HTK returned a complex result, Slaney failed inside torch (clamp / ge on complex).
    z = torch.full((3,), 1000.0, dtype=torch.complex64)
    with pytest.raises(ParameterTypeError, match="f must be a real number or a real tensor, got a tensor"):
        nf.hz_to_mel(z, mel_scale)
    with pytest.raises(ParameterTypeError, match="m must be a real number or a real tensor, got a tensor"):
        nf.mel_to_hz(z, mel_scale)


# ---------------------------------------------------------------- torch backend


MEL_VARIANTS = [
    pytest.param(dict(n_fft=400, hop=160, n_mels=80), id="n400-h160-m80"),
    pytest.param(dict(n_fft=512, hop=128, n_mels=64, win_length=400), id="n512-win400"),
    pytest.param(dict(n_fft=255, hop=64, n_mels=40, power=1.0), id="odd-n255-power1"),
    pytest.param(dict(n_fft=256, hop=100, n_mels=32, power=0.5, center=False), id="power0.5-nocenter"),
    pytest.param(
        dict(n_fft=128, hop=32, n_mels=20, pad_mode="constant", norm="slaney"), id="constant-slaney"
    ),
    pytest.param(
        dict(n_fft=128, hop=50, n_mels=20, pad_mode="replicate", mel_scale="slaney"), id="replicate"
    ),
    pytest.param(dict(n_fft=128, hop=50, n_mels=20, pad_mode="circular", normalized=True), id="circ-normwin"),
    pytest.param(
        dict(n_fft=128, hop=64, n_mels=20, normalized="frame_length", f_min=300.0, f_max=5000.0),
        id="normframe-band",
    ),
]


@pytest.mark.parametrize("variant", MEL_VARIANTS)
def test_mel_spectrogram_torch_float64_matches_fft_oracle(variant, generator):
    v = dict(variant)
    x = random_tensor((2, 3, 2001), generator=generator, dtype=F64)
    kw = {k: v[k] for k in v if k not in ("hop",)}
    got = nf.mel_spectrogram(x, sample_rate=16000, hop_length=v["hop"], backend="torch", **kw)
    expected = stft_mel_oracle(x.reshape(6, -1), sample_rate=16000, **v).reshape(got.shape)
    assert got.dtype == F64 and got.shape[:2] == (2, 3)
    assert_close(got, expected, atol=1e-12, rtol=1e-8)


def test_mel_spectrogram_float32_matches_torchaudio(generator):
    x = random_tensor((3, 8000), generator=generator)
    ta = torchaudio.transforms.MelSpectrogram(16000, n_fft=400, hop_length=160, n_mels=80)
    got = nf.mel_spectrogram(x, n_fft=400, hop_length=160, n_mels=80, backend="torch")
    # torchaudio's float32 filters carry ~1e-5 of cancellation error (see the filter-bank test).
    assert_close(got, ta(x), atol=1e-4, rtol=1e-3, rel_error=1e-5)
    exact = stft_mel_oracle(x, sample_rate=16000, n_fft=400, hop=160, n_mels=80)
    assert_close(got, exact, rel_error=1e-6)


def test_mel_spectrogram_matches_librosa(generator):
    import librosa

    x = random_tensor((4000,), generator=generator, dtype=F64)
    expected = librosa.feature.melspectrogram(
        y=x.numpy(), sr=22050, n_fft=512, hop_length=128, n_mels=64, pad_mode="constant", dtype="float64"
    )
    got = nf.mel_spectrogram(
        x,
        sample_rate=22050,
        n_fft=512,
        hop_length=128,
        n_mels=64,
        pad_mode="constant",
        norm="slaney",
        mel_scale="slaney",
        f_max=11025.0,
        backend="torch",
    )
    # librosa spaces bins to sr/2 = 11025, torchaudio (and nbxsig) to sr // 2 = 11025: equal here.
    assert_close(got, torch.from_numpy(expected), atol=1e-10, rtol=1e-7)


def test_log_mel_is_clamped_log(generator):
    x = random_tensor((2, 3000), generator=generator, dtype=F64)
    mel = nf.mel_spectrogram(x, n_mels=40, hop_length=100, backend="torch")
    for log, fn in (("log10", torch.log10), ("ln", torch.log), ("log2", torch.log2)):
        got = nf.log_mel_spectrogram(x, n_mels=40, hop_length=100, floor=1e-3, log=log, backend="torch")
        assert_close(got, fn(mel.clamp(min=1e-3)))


@pytest.mark.parametrize("n_mels", [80, 128])
def test_whisper_log_mel_matches_recipe_float64(n_mels, generator):
    audio = 0.1 * random_tensor((3, 16000), generator=generator, dtype=F64)
    audio[1, 4000:9000] = 0.0  # silence: exercises the 1e-10 clamp and the max − 8 floor
    got = nf.whisper_log_mel(audio, n_mels=n_mels, backend="torch")
    assert got.shape == (3, n_mels, 100)
    for i in range(3):  # per-example maximum: each clip equals Whisper's result on that clip alone
        assert_close(got[i], whisper_oracle(audio[i], n_mels))


def test_whisper_padding_appends_zeros(generator):
    audio = random_tensor((4000,), generator=generator, dtype=F64)
    got = nf.whisper_log_mel(audio, padding=480, backend="torch")
    assert_close(got, whisper_oracle(torch.nn.functional.pad(audio, (0, 480)), 80))
    assert got.shape == (80, (4000 + 480) // 160)


@pytest.mark.parametrize("shape", [(33, 17), (2, 33, 17), (2, 3, 33, 17)], ids=["2d", "3d", "4d"])
@pytest.mark.parametrize("top_db", [None, 40.0])
def test_amplitude_to_db_matches_torchaudio(shape, top_db, generator):
    x = random_tensor(shape, generator=generator, low=1e-12, high=1e3)
    expected = torchaudio.functional.amplitude_to_DB(x, 20.0, 1e-10, math.log10(2.0), top_db)
    assert_close(nf.amplitude_to_db(x, 20.0, 1e-10, math.log10(2.0), top_db), expected, atol=0, rtol=0)


@pytest.mark.parametrize("shape", [(), (17,)], ids=["0d", "1d"])
def test_amplitude_to_db_without_top_db_takes_any_shape(shape, generator):
    # torchaudio converts elementwise without top_db (its floor needs (…, freq, time)); 1-D was refused.
    x = random_tensor(shape, generator=generator, low=1e-12, high=1e3)
    expected = torchaudio.functional.amplitude_to_DB(x, 10.0, 1e-10, 0.0, None)
    assert_close(nf.amplitude_to_db(x, 10.0, 1e-10, 0.0, None), expected, atol=0, rtol=0)
    with pytest.raises(ParameterValueError, match="x must be a tensor with at least 2 dimensions"):
        nf.amplitude_to_db(x, 10.0, 1e-10, 0.0, 80.0)


def test_mel_spectrogram_errors(generator):
    x = random_tensor((1000,), generator=generator)
    cases = [
        (dict(n_fft=0), ParameterValueError, "n_fft must be >= 1, got 0"),
        (dict(win_length=500), ParameterValueError, r"win_length must be <= n_fft \(400\), got 500"),
        (dict(power=0.0), ParameterValueError, "power must be a finite number > 0.0"),
        (dict(pad_mode="wrap"), ParameterValueError, "pad_mode must be one of"),
        (dict(normalized="energy"), ParameterValueError, "normalized must be False, True"),
        (dict(window=torch.ones(10)), ParameterValueError, "window must be a 1-D tensor of win_length=400"),
        (dict(hop_length=1.5), ParameterTypeError, "hop_length must be an integer"),
        (dict(backend="cuda"), ParameterValueError, "backend must be None, 'triton' or 'torch'"),
    ]
    for kwargs, error, match in cases:
        with pytest.raises(error, match=match):
            nf.mel_spectrogram(x, **kwargs)
    with pytest.raises(ParameterValueError, match="longer than n_fft // 2 = 200"):
        nf.mel_spectrogram(x[:200])
    with pytest.raises(ParameterValueError, match="at least n_fft = 400 samples"):
        nf.mel_spectrogram(x[:300], center=False)
    with pytest.raises(ParameterTypeError, match="input must be a tensor of dtype"):
        nf.mel_spectrogram(torch.ones(1000, dtype=torch.int32))
    with pytest.raises(ParameterValueError, match="n_mels must be one of 80, 128"):
        nf.whisper_log_mel(x, n_mels=64)
    with pytest.raises(ParameterValueError, match=r"audio must be a signal longer than .* shape \(200,\)"):
        nf.whisper_log_mel(x[:200])
    with pytest.raises(ParameterValueError, match=r"audio .* after 50 samples of padding.* shape \(150,\)"):
        nf.whisper_log_mel(x[:150], padding=50)
    assert nf.whisper_log_mel(x[:151], padding=50, backend="torch").shape == (80, 1)


def test_mel_spectrogram_refuses_f_min_above_f_max(generator):
    # torchaudio's MelSpectrogram refuses it; the filters would be (mostly) empty. mel_filterbank alone
    # allows it, as melscale_fbanks does (the filter-bank grid's "fmin-above-fmax").
    x = random_tensor((500,), generator=generator)
    kw = dict(n_fft=64, n_mels=10, f_min=5000.0, f_max=1000.0)
    with pytest.raises(ValueError):
        torchaudio.transforms.MelSpectrogram(**kw)
    with pytest.raises(ParameterValueError, match=r"f_min must be <= f_max \(1000.0\), got 5000.0"):
        nf.mel_spectrogram(x, **kw)
    with pytest.raises(ParameterValueError, match=r"f_min must be <= f_max \(4000.0\), got 5000.0"):
        nf.log_mel_spectrogram(x, n_fft=64, n_mels=10, f_min=5000.0, sample_rate=8000)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_mel_spectrogram_circular_padding_wraps_at_most_once(backend, device, generator):
    # torch pads circularly by at most the signal's length (n_fft // 2 = 32 here): 31 samples are
    # refused on both backends (the Triton kernel used to wrap its indices twice), 32 equal torchaudio.
    x = random_tensor((2, 32), generator=generator, dtype=F64)
    kw = dict(sample_rate=8000, n_fft=64, hop_length=16, n_mels=12, pad_mode="circular")
    dev, dtype = (device, torch.float32) if backend == "triton" else (torch.device("cpu"), F64)
    with pytest.raises(
        ParameterValueError, match="at least n_fft // 2 = 32 samples for center=True with pad_mode='circular'"
    ):
        nf.mel_spectrogram(x[:, :31].to(dev, dtype), backend=backend, **kw)
    expected = torchaudio.transforms.MelSpectrogram(**kw).double()(x)
    got = nf.mel_spectrogram(x.to(dev, dtype), backend=backend, **kw)
    # float32 tolerance on both backends: torchaudio's filters are float32 (nbxsig's rounded from float64).
    assert_close(got, expected, dtype="float32", rel_error=1e-5)


def test_torch_backend_half_input_does_not_overflow(generator):
    # |X| of this loud noise is ~1e3 at n_fft 400, so |X|² (~1e6) overflows float16 (max 65504): the
    # twin computes in float32 and rounds only its output, as the Triton kernels do.
    x = (30 * random_tensor((2, 1600), generator=generator)).half()
    kw = dict(sample_rate=16000, n_fft=400, hop_length=160, n_mels=40)
    ta = {p: torchaudio.transforms.MelSpectrogram(**kw, power=p).double() for p in (1.0, 2.0)}
    got = nf.mel_spectrogram(x, power=1.0, backend="torch", **kw)
    assert got.dtype == torch.float16
    assert_close(got, ta[1.0](x.double()), rel_error=2e-3)
    # The mel power itself exceeds float16; its log does not.
    assert ta[2.0](x.double()).max() > 65504
    got = nf.log_mel_spectrogram(x, backend="torch", **kw)
    assert_close(got, torch.log10(ta[2.0](x.double()).clamp(min=1e-10)), rel_error=2e-3)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_whisper_half_input_matches_recipe(backend, device, generator):
    audio = (30 * random_tensor((2, 1600), generator=generator)).half()
    audio[1] *= 1e-2
    got = nf.whisper_log_mel(audio.to(device if backend == "triton" else "cpu"), backend=backend)
    assert got.dtype == torch.float16 and torch.isfinite(got).all()
    for i in range(2):
        assert_close(got[i], whisper_oracle(audio[i].double(), 80), rel_error=2e-3)


@pytest.mark.parametrize(
    "shape",
    [(0, 5, 7), (2, 0, 7), (5, 0), (2, 3, 0, 7), (0, 3, 5, 7)],
    ids=["0x5x7", "2x0x7", "5x0", "2x3x0x7", "0x3x5x7"],
)
@pytest.mark.parametrize("top_db", [None, 80.0])
def test_amplitude_to_db_of_empty_input_is_empty(shape, top_db):
    # torchaudio's top_db reshape fails on most empty shapes; an empty input has nothing to convert.
    got = nf.amplitude_to_db(torch.rand(shape, dtype=F64), 10.0, 1e-10, 0.0, top_db)
    assert got.shape == shape and got.dtype == F64
    with pytest.raises(ParameterValueError, match=r"top_db must be a finite number >= 0\.0"):
        nf.amplitude_to_db(torch.rand(shape), 10.0, 1e-10, 0.0, -1.0)


def test_mel_spectrogram_takes_integral_float_sample_rate(generator):
    x = random_tensor((2, 1000), generator=generator, dtype=F64)
    kw = dict(sample_rate=22050.0, n_fft=128, hop_length=32, n_mels=20)
    expected = torchaudio.transforms.MelSpectrogram(**kw).double()(x)
    # torchaudio's float32 filters carry ~1e-5 of cancellation error (see the filter-bank test).
    assert_close(nf.mel_spectrogram(x, **kw, backend="torch"), expected, atol=1e-4, rtol=1e-3, rel_error=1e-5)
    for bad in (22050.5, True):
        with pytest.raises(ParameterTypeError, match="sample_rate must be an integer"):
            nf.mel_spectrogram(x, **dict(kw, sample_rate=bad))


@pytest.mark.parametrize(
    "backend, power",
    [
        ("torch", 1.0),
        ("torch", 0.5),
        ("triton", 1.0),
        ("triton", 0.5),
        ("fourstep", 0.5),
    ],
)
def test_nan_samples_give_nan_mels_as_torchaudio(backend, power, device, generator, monkeypatch):
    # |X|^power for power != 2 was where(p > 0, ..., 0): the bins of a NaN sample became 0, silently
    # (the torch twin, the fused mel kernel and the four-step spectrogram all masked so).
    n_fft = 16
    if backend == "fourstep":  # the GPU's auto path for composite n_fft; forced here
        from nbxsig.kernels import fourstep

        monkeypatch.setattr(fourstep, "spectrogram_path", lambda **route: "fourstep")
        backend, n_fft = "triton", 64
    x = random_tensor((300,), generator=generator)
    x[150] = math.nan
    expected = torchaudio.transforms.MelSpectrogram(8000, n_fft=n_fft, n_mels=4, power=power)(x)
    got = nf.mel_spectrogram(
        x.to(device), sample_rate=8000, n_fft=n_fft, n_mels=4, power=power, backend=backend
    ).cpu()
    assert expected.isnan().any()
    assert torch.equal(got.isnan(), expected.isnan())


def test_whisper_takes_empty_audio_with_padding():
    # Whisper's recipe pads first (transcribe appends 30 s of zeros), so empty audio with padding is a
    # silent clip; this refused it as an empty tensor. An empty batch stays refused.
    got = nf.whisper_log_mel(torch.zeros(0, dtype=F64), padding=480, backend="torch")
    assert_close(got, whisper_oracle(torch.zeros(480, dtype=F64), 80))
    assert nf.whisper_log_mel(torch.zeros(2, 0), padding=480, backend="torch").shape == (2, 80, 3)
    with pytest.raises(ParameterValueError, match=r"audio must be a non-empty tensor, .* shape \(0, 0\)"):
        nf.whisper_log_mel(torch.zeros(0, 0), padding=480)


def test_empty_filter_warning_is_given_on_every_call(generator):
    # torchaudio's MelSpectrogram warns on every construction; the cached filter bank warned only on
    # the call that filled the cache (a second call, or log_mel_spectrogram with those filters, was silent).
    x = random_tensor((400,), generator=generator)
    kw = dict(sample_rate=16000, n_fft=64, n_mels=100, f_max=7919.0, backend="torch")
    for fn in (nf.mel_spectrogram, nf.mel_spectrogram, nf.log_mel_spectrogram):
        with pytest.warns(UserWarning, match=r"At least one mel filterbank has all zero values") as caught:
            fn(x, **kw)
        assert caught[0].filename == __file__  # attributed to the caller


def test_torch_backward_is_finite_where_spectrum_vanishes():
    # A silent stretch makes |X| = 0 exactly in whole frames: sqrt and x^0.5 have infinite slope there.
    x = torch.zeros(2, 1200, dtype=F64)
    x[:, 900:] = torch.linspace(-1, 1, 300, dtype=F64)
    for power in (1.0, 0.5, 2.0):
        xg = x.clone().requires_grad_(True)
        nf.mel_spectrogram(
            xg, n_fft=128, hop_length=32, n_mels=16, power=power, backend="torch"
        ).sum().backward()
        assert torch.isfinite(xg.grad).all(), power
        assert xg.grad[:, 200:700].abs().max() == 0


def test_torch_backend_gradcheck(generator):
    x = random_tensor((1, 72), generator=generator, dtype=F64).requires_grad_(True)

    def fn(x):
        return nf.log_mel_spectrogram(x, n_fft=32, hop_length=8, n_mels=6, power=1.0, backend="torch")

    assert torch.autograd.gradcheck(fn, (x,))


# ---------------------------------------------------------------- Triton kernel (interpreter on CPU)

SMALL = dict(sample_rate=8000, n_fft=64, hop_length=16, n_mels=12)


@pytest.mark.parametrize(
    "variant",
    [
        pytest.param(dict(), id="power2-reflect"),
        pytest.param(dict(power=1.0, pad_mode="constant"), id="power1-constant"),
        pytest.param(dict(power=0.7, pad_mode="replicate", norm="slaney"), id="power0.7-replicate"),
        pytest.param(dict(center=False, normalized=True, win_length=48), id="nocenter-win48"),
        pytest.param(dict(pad_mode="circular", mel_scale="slaney", n_fft=50, hop_length=13), id="circ-n50"),
        # 40 samples, n_fft 64: every frame reads centre padding, so the edge launch does it all.
        pytest.param(dict(length=40), id="short-all-edge-frames"),
        # 11 mels = one 16-wide block; 20 = 16 + 16 (two accumulators); 40 = 32 + 16.
        pytest.param(dict(n_mels=20), id="mels20-two-blocks"),
        pytest.param(
            dict(n_mels=40, n_fft=100, hop_length=25),
            id="mels40-n100",
            marks=pytest.mark.filterwarnings("ignore:At least one mel filterbank has all zero values"),
        ),
    ],
)
def test_triton_mel_matches_float64(variant, device, generator):
    kw = {**SMALL, **variant}
    x64 = random_tensor((2, 2, kw.pop("length", 331)), generator=generator, dtype=F64)
    expected = nf.mel_spectrogram(x64, backend="torch", **kw)
    got = nf.mel_spectrogram(x64.float().to(device), backend="triton", **kw)
    assert got.dtype == torch.float32 and got.shape == expected.shape
    assert_close(got, expected, dtype="float32" if device.type == "cpu" else "tf32", rel_error=1e-5)


def test_triton_mel_reads_strided_input(device, generator):
    base = random_tensor((3, 700), generator=generator, dtype=F64)
    view = base.float().to(device)[:, ::2]  # stride 2 along time, no copy
    got = nf.mel_spectrogram(view, backend="triton", **SMALL)
    assert_close(got, nf.mel_spectrogram(base[:, ::2], backend="torch", **SMALL), dtype="float32")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_triton_mel_half_inputs(dtype, device, generator):
    x = random_tensor((2, 300), generator=generator, dtype=dtype)
    got = nf.mel_spectrogram(x.to(device), backend="triton", **SMALL)
    assert got.dtype == dtype
    expected = nf.mel_spectrogram(x.double(), backend="torch", **SMALL)
    assert_close(got, expected, dtype=dtype, rel_error=4e-3)


@pytest.mark.parametrize("log", ["log10", "ln"])
def test_triton_log_mel(log, device, generator):
    x = random_tensor((2, 300), generator=generator)
    x[0, 100:200] = 0.0
    kw = dict(SMALL, floor=1e-6, log=log)
    got = nf.log_mel_spectrogram(x.to(device), backend="triton", **kw)
    assert_close(got, nf.log_mel_spectrogram(x.double(), backend="torch", **kw), atol=1e-5, rtol=1e-5)


def test_triton_whisper_matches_recipe(device, generator):
    audio = 0.1 * random_tensor((2, 1600), generator=generator)
    audio[1] *= 1e-3  # a quiet clip: its floor differs from the loud one's (per-example maximum)
    got = nf.whisper_log_mel(audio.to(device), backend="triton")
    assert got.shape == (2, 80, 10)
    for i in range(2):
        assert_close(got[i], whisper_oracle(audio[i].double(), 80), atol=1e-5, rtol=1e-5)


def test_triton_backward_matches_torch_and_is_finite(device, generator):
    x = random_tensor((2, 300), generator=generator)
    x[:, :150] = 0.0  # frames with |X| = 0
    grads = {}
    for backend, dev in (("triton", device), ("torch", torch.device("cpu"))):
        xg = x.double().to(dev).float().requires_grad_(True) if backend == "triton" else x.double()
        xg = xg.requires_grad_(True)
        out = nf.mel_spectrogram(xg, power=1.0, backend=backend, **SMALL)
        out.backward(torch.ones_like(out))
        grads[backend] = xg.grad
    assert torch.isfinite(grads["triton"]).all()
    assert_close(grads["triton"], grads["torch"], dtype="float32", rel_error=1e-5)


@pytest.mark.parametrize("need_x", [True, False], ids=["x-and-window", "window-only"])
def test_triton_backward_reaches_the_window(need_x, device, generator):
    # A window that requires grad got it on the torch backend and silently none on the Triton one
    # (the fused op's backward returned None for it; with x not requiring grad it was not even run).
    x = random_tensor((2, 100), generator=generator)
    window = random_tensor((48,), generator=generator, low=0.1, high=1.0)
    weight = random_tensor((2, 12, 7), generator=generator)
    grads = {}
    for backend, dev in (("triton", device), ("torch", torch.device("cpu"))):
        xg = x.to(dev).requires_grad_(need_x)
        wg = window.to(dev).requires_grad_(True)
        out = nf.log_mel_spectrogram(xg, window=wg, win_length=48, power=1.0, backend=backend, **SMALL)
        inputs = [wg, xg] if need_x else [wg]
        grads[backend] = torch.autograd.grad((out * weight.to(dev)).sum(), inputs)
    for got, expected in zip(grads["triton"], grads["torch"], strict=True):
        assert_close(got.cpu(), expected, rel_error=1e-5)


@pytest.mark.parametrize("power", [2.0, 1.0], ids=["power2", "power1"])
def test_triton_second_derivatives_match_torch(power, device, generator):
    # The fused op's backward recomputed the torch twin on detached copies: under create_graph=True its
    # gradients carried no graph, so a second grad raised ("does not require grad") where the torch
    # backend gives one. Hessian-vector products in x and the window, against the float64 torch backend.
    x = random_tensor((2, 100), generator=generator)
    window = random_tensor((48,), generator=generator, low=0.1, high=1.0)
    weight = random_tensor((2, 12, 7), generator=generator)
    vx = random_tensor((2, 100), generator=generator)
    vw = random_tensor((48,), generator=generator)
    second = {}
    for backend, dev, dtype in (("triton", device, torch.float32), ("torch", torch.device("cpu"), F64)):
        xg = x.to(dev, dtype).requires_grad_(True)
        wg = window.to(dev, dtype).requires_grad_(True)
        out = nf.mel_spectrogram(xg, window=wg, win_length=48, power=power, backend=backend, **SMALL)
        gx, gw = torch.autograd.grad((out * weight.to(dev, dtype)).sum(), (xg, wg), create_graph=True)
        probe = (gx * vx.to(dev, dtype)).sum() + (gw * vw.to(dev, dtype)).sum()
        second[backend] = torch.autograd.grad(probe, (xg, wg))
    for got, expected in zip(second["triton"], second["torch"], strict=True):
        assert_close(got.cpu(), expected, dtype="float32", rel_error=1e-5)


@pytest.mark.parametrize("path", [None, "unfused"], ids=["auto", "unfused"])
def test_triton_mel_under_inference_mode(path, device, generator):
    # Under torch.inference_mode the Triton backend raised "Inference tensors do not track version
    # counter" (its operand caches keyed on the window's and filters' versions), and the cached filters
    # made there were inference tensors for every later call. An unusual band (f_max 3210 Hz) so the
    # cached filters are made inside inference mode here, whatever ran before in this process.
    from nbxsig.features import _cached_filters, prepare_window
    from nbxsig.kernels import mel as kmel

    kw = dict(SMALL, f_max=3210.0 if path is None else 3211.0)
    x = random_tensor((2, 200), generator=generator)
    expected = nf.log_mel_spectrogram(x.double(), backend="torch", **kw)
    with torch.inference_mode():
        if path is None:
            got = nf.log_mel_spectrogram(x.to(device), backend="triton", **kw)
            user_window = torch.hann_window(64, dtype=torch.float64, device=device)  # an inference tensor
            got_user = nf.log_mel_spectrogram(x.to(device), window=user_window, backend="triton", **kw)
        else:
            window = prepare_window(torch.hann_window(64, device=device), 64, 64, device)
            filters = _cached_filters(33, 0.0, kw["f_max"], 12, 8000, None, "htk", device)
            opts = dict(n_fft=64, hop_length=16, power=2.0, scale=1.0, center=True, pad_mode="reflect")
            got = got_user = kmel.mel_spectrogram(
                x.to(device), window=window, filters=filters, floor=1e-10, log="log10", _path=path, **opts
            )
    for out in (got, got_user):
        assert_close(out.cpu(), expected, dtype="float32", rel_error=1e-5, atol=1e-5)
    # The filters cached in inference mode serve a later differentiable call (torch backend too).
    x64 = x.double().requires_grad_(True)
    (expected_grad,) = torch.autograd.grad(nf.log_mel_spectrogram(x64, backend="torch", **kw).sum(), x64)
    for backend, dev in (("triton", device), ("torch", torch.device("cpu"))):
        xg = x.to(dev).requires_grad_(True)
        (grad,) = torch.autograd.grad(nf.log_mel_spectrogram(xg, backend=backend, **kw).sum(), xg)
        assert_close(grad.cpu(), expected_grad, dtype="float32", rel_error=1e-5)


@pytest.mark.parametrize("config", range(3), ids=lambda i: f"config{i}" if i < 2 else "edge-config")
def test_triton_mel_every_autotune_config(config, device, generator, monkeypatch):
    # The GPU autotunes the interior launch over _CONFIGS and runs the edge launch with _EDGE_CONFIG;
    # the interpreter runs one fixed config for both, so each tile shape is checked here (a BLOCK_F
    # that overran the padded basis, or a bin remainder chunk left out, would show).
    from nbxsig.kernels import mel as kmel

    assert len(kmel._CONFIGS) == 2
    configs = [dict(c.kwargs) for c in kmel._CONFIGS] + [
        {k: v for k, v in kmel._EDGE_CONFIG.items() if k.startswith("BLOCK")}
    ]
    monkeypatch.setattr(kmel, "_INTERPRETER_CONFIG", configs[config])
    kw = dict(sample_rate=16000, n_fft=200, hop_length=80, n_mels=20)  # 101 bins: ragged for every BLOCK_F
    x = random_tensor((2, 800), generator=generator, dtype=F64)
    got = nf.mel_spectrogram(x.float().to(device), backend="triton", **kw)
    assert_close(got, nf.mel_spectrogram(x, backend="torch", **kw), dtype="float32", rel_error=1e-5)


def test_mel_blocks_cover_the_mels_in_two_power_of_two_blocks():
    from nbxsig.kernels.mel import mel_blocks

    assert [mel_blocks(n) for n in (1, 12, 16, 20, 40, 80, 100, 128, 256)] == [
        (16, 0), (16, 0), (16, 0), (16, 16), (32, 16), (64, 16), (64, 64), (128, 0), (256, 0)
    ]  # fmt: skip


def test_tf32_split_is_exact_and_rounds_to_nearest(generator):
    from nbxsig.kernels.mel import _split_hi_lo

    v = random_tensor((4096,), generator=generator) * torch.logspace(-20, 20, 4096)
    hi, lo = _split_hi_lo(v)
    assert ((hi.view(torch.int32) & 0x1FFF) == 0).all()  # a TF32 value: the 13 low mantissa bits are 0
    assert torch.equal(hi + lo, v)  # the residual is exact in fp32
    # Rounded to nearest: |lo| <= half a TF32 ulp = 2^-11 relative (truncation would allow 2^-10).
    assert (lo.abs() <= v.abs() * 2.0**-11).all()


def test_triton_mel_tf32_error_within_derived_bound(device, generator):
    # The "tf32" path rounds both operands of every dot to TF32 (to nearest); the interpreter then
    # multiplies those exact TF32 values in fp32, as the tensor cores do. The bound 7e-4 is derived
    # in tests/test_features_gpu.py::test_gpu_mel_full_size (measured here: ~2.3e-4).
    from nbxsig.kernels import mel as kmel

    x = random_tensor((1, 1200), generator=generator, dtype=F64)
    window = nf.prepare_window(None, 400, 400, torch.device("cpu"))
    filters = nf.mel_filterbank(201, 0.0, 8000.0, 80, 16000, dtype=F64)
    opts = dict(n_fft=400, hop_length=160, power=2.0, scale=1.0, center=True, pad_mode="reflect")
    # The dense fused kernel on every device (a GPU's auto path is the unfused one).
    got = kmel.mel_spectrogram(
        x.float().to(device), window=window.to(device), filters=filters.to(device), _precision="tf32",
        _path="fused", **opts,
    )  # fmt: skip
    expected = nf.mel_spectrogram(x, n_fft=400, hop_length=160, n_mels=80, backend="torch")
    rel = ((got.double().cpu() - expected).norm() / expected.norm()).item()
    assert 2e-5 < rel < 7e-4  # TF32-sized (not fp32-sized: the rounding is really applied), within bound


@pytest.mark.parametrize(
    "variant",
    [
        pytest.param(dict(), id="power2-reflect"),
        pytest.param(
            dict(power=0.7, pad_mode="replicate", normalized=True, win_length=48), id="p0.7-norm-win48"
        ),
        pytest.param(dict(center=False, power=1.0), id="nocenter-power1"),
        pytest.param(dict(floor=1e-6, log="ln"), id="log-ln"),
    ],
)
def test_unfused_path_matches_float64(variant, device, generator):
    # The path mel_path picks on a GPU (nbxsig.stft's FFT path + one matmul), forced here.
    from nbxsig.features import _cached_filters, prepare_window, spec_scale
    from nbxsig.kernels import mel as kmel

    kw = {**SMALL, **variant}
    x64 = random_tensor((3, 331), generator=generator, dtype=F64)
    log_kw = {k: kw.pop(k) for k in ("floor", "log") if k in kw}
    fn = nf.log_mel_spectrogram if log_kw else nf.mel_spectrogram
    expected = fn(x64, backend="torch", **kw, **log_kw)
    win_length = kw.get("win_length", kw["n_fft"])
    window = prepare_window(None, win_length, kw["n_fft"], device)
    filters = _cached_filters(kw["n_fft"] // 2 + 1, 0.0, 4000.0, kw["n_mels"], 8000, None, "htk", device)
    got = kmel.mel_spectrogram(
        x64.float().to(device),
        n_fft=kw["n_fft"],
        hop_length=kw["hop_length"],
        window=window,
        filters=filters,
        power=kw.get("power", 2.0),
        scale=spec_scale(kw.get("normalized", False), window, kw["n_fft"]),
        center=kw.get("center", True),
        pad_mode=kw.get("pad_mode", "reflect"),
        _path="unfused",
        **log_kw,
    )
    assert got.dtype == torch.float32
    assert_close(got, expected, dtype="float32", rel_error=1e-5, atol=1e-5 if log_kw else None)


def test_unfused_path_follows_window_changes(device, generator):
    # The window the unfused path is given may be reused across calls (the modules keep one per
    # buffer version): an in-place change of it must reach the next call.
    from nbxsig.features import _cached_filters
    from nbxsig.kernels import mel as kmel

    x = random_tensor((2, 900), generator=generator)
    window = torch.hann_window(64, dtype=F64).to(device)
    filters = _cached_filters(33, 0.0, 4000.0, 20, 8000, None, "htk", device)
    opts = dict(n_fft=64, hop_length=16, filters=filters, power=2.0, scale=1.0, center=True)
    opts.update(pad_mode="reflect", _path="unfused")
    first = kmel.mel_spectrogram(x.to(device), window=window, **opts)
    window.mul_(random_tensor((64,), generator=generator, dtype=F64, low=0.5, high=1.5).to(device))
    second = kmel.mel_spectrogram(x.to(device), window=window, **opts)
    spec = torch.stft(x.double(), 64, 16, window=window.cpu(), center=True, return_complex=True).abs() ** 2
    expected = (spec.transpose(1, 2) @ filters.cpu().double()).transpose(1, 2)
    assert_close(second, expected, dtype="float32", rel_error=1e-5)
    assert not torch.allclose(first, second)


def test_unfused_path_whisper_and_half_input(device, generator):
    from nbxsig.features import _cached_filters, prepare_window
    from nbxsig.kernels import mel as kmel

    audio = 0.1 * random_tensor((2, 1600), generator=generator)
    audio[1] *= 1e-3  # a quiet clip: its own floor (per-example maximum)
    window = prepare_window(None, 400, 400, device)
    filters = _cached_filters(201, 0.0, 8000.0, 80, 16000, "slaney", "slaney", device)
    opts = dict(n_fft=400, hop_length=160, window=window, filters=filters, power=2.0, scale=1.0)
    opts.update(center=True, pad_mode="reflect", floor=1e-10, log="log10", drop_last=True, whisper=True)
    got = kmel.mel_spectrogram(audio.to(device), _path="unfused", **opts)
    assert got.shape == (2, 80, 10)
    for i in range(2):
        assert_close(got[i], whisper_oracle(audio[i].double(), 80), atol=1e-5, rtol=1e-5)
    half = kmel.mel_spectrogram(audio.half().to(device), _path="unfused", **opts)
    assert half.dtype == torch.float16
    assert_close(half, got, dtype=torch.float16)


@pytest.mark.parametrize(
    "n_mels,layout,tail",
    [
        pytest.param(80, "frame-major", None, id="80-frame-major"),
        pytest.param(40, "bin-major", "log10", id="40-bin-major-log10"),
        pytest.param(128, "sliced", "ln", id="128-sliced-ln"),
        pytest.param(80, "frame-major", "whisper", id="80-whisper"),
    ],
)
def test_mel_projection_matches_float64(n_mels, layout, tail, device, generator):
    # The unfused path's second kernel on its own: fresh random power spectrograms (odd bins and
    # frames, 3 examples), read through the strides of the four-step kernel's frame-major buffer, a
    # contiguous (B, F, T) one or a strided slice; 80 mels as 64 + 16 blocks, 40 as 32 + 16, 128 as one.
    from nbxsig.kernels import mel as kmel

    b, f, t = 3, 57, 45
    if layout == "frame-major":
        spec = random_tensor((b, t, f), generator=generator).square().transpose(1, 2)
    elif layout == "bin-major":
        spec = random_tensor((b, f, t), generator=generator).square()
    else:
        spec = random_tensor((b, f + 3, 2 * t), generator=generator).square()[:, 2 : f + 2, ::2]
    filters = random_tensor((f, n_mels), generator=generator, dtype=F64).abs()
    factor = 0.37
    want = (filters.T * factor) @ spec.double()
    floor = {"whisper": 1e-10, "log10": 1e-3, "ln": 0.5}.get(tail)
    log = {"whisper": "log10", "log10": "log10", "ln": "ln"}.get(tail)
    if floor is not None:
        want = want.clamp(min=floor)
        want = want.log10() if log == "log10" else want.log()
    if tail == "whisper":
        want = (torch.maximum(want, want.amax(dim=(1, 2), keepdim=True) - 8.0) + 4.0) / 4.0
    got = kmel.project(
        spec.to(device), filters.float().to(device), factor=factor, floor=floor, log=log,
        whisper=tail == "whisper",
    )  # fmt: skip
    assert got.shape == (b, n_mels, t) and got.dtype == torch.float32
    assert_close(got, want, dtype="float32", rel_error=1e-5, atol=1e-5 if log else None)


@pytest.mark.parametrize("tile", ["interpreter", "gpu"])
@pytest.mark.parametrize("case", ["htk-80", "slaney-128-whisper", "empty-groups", "hand-built"])
def test_mel_projection_reads_each_group_band(case, tile, device, generator, monkeypatch):
    # The projection's dots read, for each group of BLOCK_M mels, only the bin chunks its filters
    # touch: real mel filterbanks (a few bins each, groups overlapping at their edges), groups of
    # empty filters (f_min above the top bin's frequency for some mels) and a hand-built matrix whose
    # nonzero rows start and end mid-chunk; fresh random spectrograms with odd bins and frames, on a
    # strided view. "gpu" runs the GPU tile's BLOCK_F/BLOCK_M here (with small frame tiles).
    from nbxsig.kernels import mel as kmel

    if tile == "gpu":
        config = {k: kmel.PROJECT_CONFIG[k] for k in ("BLOCK_F", "BLOCK_M")}
        monkeypatch.setattr(kmel, "_PROJECT_INTERPRETER_CONFIG", {"BLOCK_T": 16, **config})
    n_freq, whisper = 201, case == "slaney-128-whisper"
    if case == "htk-80":
        filters = nf.mel_filterbank(n_freq, 0.0, 8000.0, 80, 16000, dtype=F64)
    elif whisper:
        filters = nf.mel_filterbank(n_freq, 0.0, 8000.0, 128, 16000, "slaney", "slaney", dtype=F64)
    elif case == "empty-groups":
        n_freq = 57
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the empty filters warn, as torchaudio's do
            filters = nf.mel_filterbank(n_freq, 0.0, 22050.0, 64, 16000, dtype=F64)
        assert (filters[:, 48:] == 0).all()
    else:
        n_freq = 57
        filters = torch.zeros(n_freq, 40, dtype=F64)
        for m, (lo, hi) in enumerate([(3, 5), (17, 18), (20, 49)] * 13 + [(56, 57)]):
            filters[lo:hi, m] = random_tensor((hi - lo,), generator=generator, dtype=F64).abs() + 0.1
    n_mels = filters.shape[1]
    spec = random_tensor((2, 45, n_freq + 3), generator=generator).square()[..., 2 : n_freq + 2]
    spec = spec.transpose(1, 2)  # (B, F, T) read through the frame-major strides
    if whisper:
        spec[:, :, 10:20] *= 1e-12  # near-silent frames: Whisper's floor at max − 8 rewrites their mels
    want = (filters.T * 0.37) @ spec.double()
    if whisper:
        want = want.clamp(min=1e-10).log10()
        floor = want.amax(dim=(1, 2), keepdim=True) - 8.0
        assert (want < floor).any() and (want > floor).any()
        want = (torch.maximum(want, floor) + 4.0) / 4.0
    got = kmel.project(
        spec.to(device), filters.float().to(device), factor=0.37, floor=1e-10 if whisper else None,
        log="log10" if whisper else None, whisper=whisper,
    )  # fmt: skip
    assert got.shape == (2, n_mels, 45)
    assert_close(got, want, dtype="float32", rel_error=1e-5, atol=1e-5 if whisper else None)
    # The bands themselves: each group's chunks cover exactly its nonzero rows, rounded out to chunks.
    config = kmel._PROJECT_INTERPRETER_CONFIG
    block_f, block_m = config["BLOCK_F"], config["BLOCK_M"]
    plane = torch.zeros(math.ceil(n_freq / block_f) * block_f, math.ceil(n_mels / block_m) * block_m)
    plane[:n_freq, :n_mels] = filters.float()
    bands = kmel._filter_bands(plane, block_f, block_m).tolist()
    for group, (c_lo, c_hi) in enumerate(bands):
        rows = plane[:, group * block_m : (group + 1) * block_m].ne(0).any(dim=1).nonzero().flatten()
        if rows.numel() == 0:
            assert (c_lo, c_hi) == (0, 0)
        else:
            assert (c_lo, c_hi) == (int(rows[0]) // block_f, int(rows[-1]) // block_f + 1)
    if case == "empty-groups" and 16 % block_m == 0:
        assert bands[-1] == [0, 0]


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the interpreter's 0·inf
def test_mel_projection_nonfinite_bin_stays_in_its_groups(device, generator):
    # An inf power bin (e.g. |X|² overflowing) reaches only the mel groups whose bands cover it: the
    # projection never reads a bin into another group's dots. Inside a covering group every mel is
    # nonfinite: NaN (0·inf) where the weight is zero; where it is positive inf, or NaN at 3xTF32
    # (the split's lo = inf − inf). torch's dense product makes NaN of every other mel of that frame
    # too; project()'s docstring says so.
    from nbxsig.kernels import mel as kmel

    filters = nf.mel_filterbank(201, 0.0, 8000.0, 80, 16000, dtype=F64)
    spec = random_tensor((1, 201, 9), generator=generator).square()
    spec[0, 150, 4] = math.inf
    got = kmel.project(
        spec.to(device), filters.float().to(device), factor=1.0, floor=None, log=None, whisper=False
    ).cpu()
    config = kmel._PROJECT_INTERPRETER_CONFIG if device.type == "cpu" else kmel.PROJECT_CONFIG
    block_m = config["BLOCK_M"]
    covered = filters[150] != 0
    groups = {int(m) // block_m for m in covered.nonzero().flatten()}
    in_groups = torch.tensor([m // block_m in groups for m in range(80)])
    if kmel.dot_precision(device) != "tf32x3":
        assert torch.isposinf(got[0, covered, 4]).all()
    assert not torch.isfinite(got[0, covered, 4]).any()
    assert torch.isnan(got[0, in_groups & ~covered, 4]).all()
    elsewhere = torch.ones_like(got, dtype=torch.bool)
    elsewhere[0, in_groups, 4] = False
    want = filters.T @ torch.where(torch.isinf(spec), 0.0, spec).double()
    assert_close(got[elsewhere], want[elsewhere], dtype="float32", rel_error=1e-5)


def test_mel_path_rule():
    from nbxsig.kernels.mel import mel_path

    assert mel_path(device_type="cuda", n_fft=400) == "unfused"
    assert mel_path(device_type="cpu", n_fft=400) == "fused"  # the interpreter: the kernel under test


@pytest.mark.parametrize("center", [True, False])
def test_torch_backend_mel_is_torch_fft_outside_an_export(center, generator, monkeypatch):
    # The CPU path transforms with torch.fft (torchaudio's algorithm), never the windowed n_fft² basis
    # (the exported graph's form): 2.6x torchaudio's CPU time at n_fft 400 before.
    from nbxsig.reference import mel as ref_mel

    def no_basis(*args, **kwargs):
        raise AssertionError("the dense analysis basis was built outside an ONNX export")

    monkeypatch.setattr(ref_mel, "analysis_basis", no_basis)
    x = random_tensor((2, 4000), generator=generator)
    got = nf.mel_spectrogram(
        x, sample_rate=16000, n_fft=400, hop_length=160, n_mels=40, center=center,
        window=torch.hann_window(400), backend="torch",
    )  # fmt: skip
    expected = torchaudio.transforms.MelSpectrogram(
        16000, n_fft=400, hop_length=160, n_mels=40, center=center
    ).double()(x.double())
    assert_close(got, expected, dtype="float32")


# ---------------------------------------------------------------- the sm_90 kernel's CPU-side contract


def test_sm90_path_refuses_what_it_cannot_run(generator, monkeypatch):
    # The Gluon kernel runs only on an H100/H200 (tests/test_features_gpu.py); elsewhere the private
    # _path="sm90" is a clear error and the auto path never picks it, even with its switch on.
    from nbxsig.kernels import mel as kmel
    from nbxsig.kernels import mel_sm90

    monkeypatch.setattr(kmel, "SM90_AUTO", True)
    x = random_tensor((2, 4000), generator=generator)
    window = nf.prepare_window(None, 400, 400, x.device)
    filters = nf.mel_filterbank(201, 0.0, 8000.0, 80, 16000, dtype=torch.float64)
    opts = dict(n_fft=400, hop_length=160, window=window, filters=filters, power=2.0, scale=1.0)
    opts.update(center=True, pad_mode="reflect")
    with pytest.raises(ParameterValueError, match=r"x must be an fp32 tensor on an sm_90 GPU.*_path='sm90'"):
        kmel.mel_spectrogram(x, _path="sm90", **opts)
    assert not mel_sm90.supports(x, n_fft=400, n_mels=80, precision="tf32")
    auto = kmel.mel_spectrogram(x, **opts)
    assert_close(auto, kmel.mel_spectrogram(x, _path="fused", **opts), rel_error=0.0)


@pytest.mark.parametrize(
    ("kp", "pieces"), [(208, (128, 64, 16)), (144, (128, 16, 0)), (48, (32, 16, 0)), (32, (32, 0, 0))]
)
def test_sm90_k_pieces(kp, pieces):
    from nbxsig.kernels import mel_sm90

    assert mel_sm90.k_pieces(kp) == pieces
    assert sum(pieces) == kp


def test_sm90_mel_k_order_matches_the_kernels_relabelling(generator):
    # The kernel relabels each 8-bin group of the power's columns, (a, b) -> (b, a) over a [4, 2] split, so
    # that its accumulator registers serve as the TF32 operand unmoved; the filters' columns, put in
    # mel_k_order, must make the product the same as with neither.
    from nbxsig.kernels import mel_sm90

    frames, width, n_mels = 5, 32, 7
    power = random_tensor((frames, width), generator=generator, dtype=torch.float64)
    filters = random_tensor((n_mels, width), generator=generator, dtype=torch.float64)
    relabelled = power.reshape(frames, width // 8, 4, 2).permute(0, 1, 3, 2).reshape(frames, width)
    order = mel_sm90.mel_k_order(width)
    assert sorted(order.tolist()) == list(range(width))
    assert_close(relabelled @ filters[:, order].T, power @ filters.T, rel_error=1e-15)
    assert not torch.equal(order, torch.arange(width))


def test_sm90_whisper_floor_reads_only_tiles_under_the_floor(generator):
    # Whisper's floor after the sm_90 kernel, from its sync buffer (each 64-frame tile's smallest mel as
    # 0x7FFFFFFF minus its float bits, then each signal's largest as float bits): max(v, (log10(max(peak,
    # 1e-10)) - 4) / 4) on every tile whose smallest mel is under max(peak, 1e-10) * 1e-8 (with a 1e-3
    # margin); the other tiles are left as they are, even where (here, on purpose) their values disagree
    # with their minimum; NaN is kept.
    from nbxsig.kernels import mel_sm90

    batch, n_mels, n_frames = 3, 80, 150  # three tiles a signal, the last one partial
    n_tt = -(-n_frames // mel_sm90.BLOCK_T)
    out = random_tensor((batch, n_mels, n_frames), generator=generator)  # many values under the floors below
    out[1, 5, 70] = float("nan")
    # The last peak is under Whisper's 1e-10 clamp: its floor mel (1e-18) is under the clamp too, so no stored
    # value of that signal can be under its floor, whatever its tiles' minima.
    peaks = torch.tensor([1e3, 0.5, 1e-12])
    floor_mels = peaks.double().clamp_min(1e-10) * 1e-8
    # Per tile: under the floor, just above it (within the margin: floored too), well above it (left), or so
    # far under it that the clamp is what counts (floored where the clamp is under the floor: signal 1).
    factors = torch.tensor([0.5, 1.0005, 1.01, 0.1, 2.0, 1e-3, 1.01, 0.9, 1e-3], dtype=torch.float64)
    lowest = (floor_mels.repeat_interleave(n_tt) * factors).float()
    sync = torch.cat([0x7FFFFFFF - lowest.view(torch.int32), peaks.view(torch.int32)])  # the kernel's coding
    low = (floor_mels * 1e8).log10().sub(4.0).div(4.0)
    under = lowest.double().clamp_min(1e-10) < floor_mels.repeat_interleave(n_tt) * 1.001
    assert under.tolist() == [True, True, False, True, False, True, False, False, False]
    expected = out.double().clone()
    for tile, floored in enumerate(under.tolist()):
        b, t0 = divmod(tile, n_tt)
        if floored:
            frames = expected[b, :, t0 * 64 : (t0 + 1) * 64]
            frames.copy_(torch.where(frames < low[b], low[b], frames))
    got = out.clone()
    mel_sm90.whisper_floor(got, sync)
    assert torch.isnan(got[1, 5, 70])
    expected[1, 5, 70] = got[1, 5, 70] = 0.0
    assert_close(got, expected, atol=1e-6, rtol=0.0)
    assert not torch.equal(got, out), "no value was under a floor: the test checks nothing"
