"""nbxsig.transforms vs torchaudio.transforms: same constructor arguments, state_dict and outputs."""

from __future__ import annotations

import warnings

import pytest
import torch
import torchaudio

import nbxsig.features as nf
import nbxsig.transforms as T
from nbxsig.errors import BackendUnavailableError, ParameterTypeError, ParameterValueError
from nbxsig.testing import assert_close, random_tensor


def _real(x: torch.Tensor) -> torch.Tensor:
    return torch.view_as_real(x) if x.is_complex() else x


SPEC_VARIANTS = [
    pytest.param(dict(), id="defaults"),
    pytest.param(dict(power=1.0), id="power1"),
    pytest.param(dict(power=None), id="complex"),
    pytest.param(dict(power=None, normalized=True), id="complex-norm-true"),
    pytest.param(dict(normalized="window", power=1.0), id="norm-window"),
    pytest.param(dict(normalized="frame_length"), id="norm-frame-length"),
    pytest.param(dict(n_fft=512, win_length=300, hop_length=128), id="win300-n512"),
    pytest.param(dict(n_fft=255, hop_length=64, center=False, power=0.5), id="odd-nocenter"),
    pytest.param(dict(pad=17, pad_mode="constant"), id="pad17-constant"),
    pytest.param(dict(window_fn=torch.hamming_window, wkwargs={"periodic": False}), id="hamming-sym"),
    pytest.param(dict(n_fft=64, onesided=False, power=None), id="twosided"),
]


@pytest.mark.parametrize("kwargs", SPEC_VARIANTS)
def test_spectrogram_matches_torchaudio(kwargs, generator):
    x = random_tensor((2, 3, 3001), generator=generator)
    expected = torchaudio.transforms.Spectrogram(**kwargs)(x)
    got = T.Spectrogram(**kwargs)(x)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    assert_close(_real(got), _real(expected), rel_error=1e-6)


def test_spectrogram_float64_matches_torchaudio_float64(generator):
    x = random_tensor((2, 2001), generator=generator, dtype=torch.float64)
    kw = dict(n_fft=256, hop_length=64, window_fn=torch.hann_window, wkwargs={"dtype": torch.float64})
    assert_close(T.Spectrogram(**kw).double()(x), torchaudio.transforms.Spectrogram(**kw)(x), rtol=1e-9)


MEL_VARIANTS = [
    pytest.param(dict(), id="defaults"),
    pytest.param(dict(sample_rate=16000, n_fft=400, hop_length=160, n_mels=80), id="asr-80"),
    pytest.param(
        dict(
            sample_rate=22050,
            n_fft=1024,
            hop_length=256,
            n_mels=80,
            f_min=0.0,
            f_max=8000.0,
            norm="slaney",
            mel_scale="slaney",
            power=1.0,
        ),
        id="tts-slaney-power1",
    ),
    pytest.param(dict(n_fft=512, win_length=400, pad=10, center=False, normalized=True), id="pad-nocenter"),
]


@pytest.mark.parametrize("kwargs", MEL_VARIANTS)
def test_mel_spectrogram_matches_torchaudio(kwargs, generator):
    x = random_tensor((2, 8000), generator=generator)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the defaults (128 mels over 201 bins) leave empty filters
        theirs = torchaudio.transforms.MelSpectrogram(**kwargs)
        ours = T.MelSpectrogram(**kwargs, backend="torch")
    assert sorted(ours.state_dict()) == sorted(theirs.state_dict())
    # Same filters (torchaudio's float32 ones carry ~1e-5 of rounding error): outputs agree to fp32.
    ours.load_state_dict(theirs.state_dict())
    assert_close(ours(x), theirs(x), rel_error=1e-6)


def test_mel_spectrogram_module_equals_functional(generator):
    x = random_tensor((3, 4000), generator=generator, dtype=torch.float64)
    module = T.MelSpectrogram(16000, n_fft=400, hop_length=160, n_mels=40, backend="torch").double()
    expected = nf.mel_spectrogram(x, n_fft=400, hop_length=160, n_mels=40, backend="torch")
    # The module keeps torchaudio's float32 window and filters as buffers: equal to their rounding.
    assert_close(module(x), expected, atol=1e-6, rtol=1e-5, rel_error=1e-6)


def test_mel_spectrogram_module_triton(device, generator):
    x = random_tensor((2, 400), generator=generator)
    kw = dict(sample_rate=8000, n_fft=64, hop_length=16, n_mels=12)
    module = T.MelSpectrogram(**kw, backend="triton").to(device)
    expected = T.MelSpectrogram(**kw, backend="torch").double()(x.double())
    assert_close(module(x.to(device)), expected, dtype="float32", rel_error=1e-5)
    assert_close(module(x.to(device)), expected, dtype="float32", rel_error=1e-5)  # cached basis


def test_spectrogram_follows_window_changes(generator):
    # torchaudio reads its window buffer on every call; the float32 basis built from it must follow an
    # in-place change and a load_state_dict.
    x = random_tensor((2, 600), generator=generator)
    kw = dict(n_fft=64, win_length=48, hop_length=16)
    ours, theirs = T.Spectrogram(**kw), torchaudio.transforms.Spectrogram(**kw)
    assert_close(ours(x), theirs(x), rel_error=1e-6)
    taper = 0.5 + random_tensor((48,), generator=generator).abs()
    ours.window.mul_(taper)
    theirs.window.mul_(taper)
    assert_close(ours(x), theirs(x), rel_error=1e-6)
    state = {"window": torch.hamming_window(48)}
    ours.load_state_dict(state)
    theirs.load_state_dict(state)
    assert_close(ours(x), theirs(x), rel_error=1e-6)


@pytest.mark.parametrize("backend", [None, "torch", "triton"], ids=["spectrogram", "mel-torch", "mel-triton"])
def test_a_window_replaced_at_the_old_address_is_read(backend, device, generator):
    # The padded-window cache was keyed on the window's address and version: a new window tensor at
    # the old one's address (the allocator hands a freed block back: .half().float() got it at times)
    # at the same version read the old window's cache. Made certain here by two tensors over one
    # numpy array (version 0 both); torchaudio reads its window on every call.
    import numpy as np

    x = random_tensor((2, 3, 301), generator=generator)
    kw = dict(n_fft=64, win_length=48, hop_length=16)
    if backend is None:
        ours, theirs = T.Spectrogram(**kw), torchaudio.transforms.Spectrogram(**kw)
    else:
        kw.update(sample_rate=8000, n_mels=10)
        ours = T.MelSpectrogram(**kw, backend=backend)
        theirs = torchaudio.transforms.MelSpectrogram(**kw).double()
        ours.load_state_dict(theirs.state_dict())  # (float32 filters: the twins' own differ by rounding)
    memory = np.empty(48, dtype=np.float32)
    for window in (torch.hann_window(48), torch.hamming_window(48)):
        memory[:] = window.numpy()
        target = ours if backend is None else ours.spectrogram
        target.window = torch.from_numpy(memory).to(device)
        (theirs if backend is None else theirs.spectrogram).window = window.double()
        assert_close(ours(x.to(device)).cpu(), theirs(x.double()), dtype="float32", rel_error=1e-5)


def test_mel_spectrogram_triton_follows_window_changes(device, generator):
    # The Triton path caches the padded window and the window-norm scale per window buffer version: an
    # in-place change of the window must reach both (normalized=True scales by 1/‖w‖).
    x = random_tensor((2, 600), generator=generator)
    kw = dict(sample_rate=8000, n_fft=64, win_length=48, hop_length=16, n_mels=12, normalized=True)
    module = T.MelSpectrogram(**kw, backend="triton").to(device)
    reference = torchaudio.transforms.MelSpectrogram(**kw).double()  # reads its window on every call
    assert_close(module(x.to(device)), reference(x.double()), dtype="float32", rel_error=1e-5)
    taper = 0.5 + random_tensor((48,), generator=generator).abs()
    module.spectrogram.window.mul_(taper.to(device))
    reference.spectrogram.window.mul_(taper.double())
    assert_close(module(x.to(device)), reference(x.double()), dtype="float32", rel_error=1e-5)


def test_mel_scale_matches_torchaudio(generator):
    spec = random_tensor((2, 257, 30), generator=generator, low=0.0, high=10.0)
    kw = dict(n_mels=40, sample_rate=22050, f_min=30.0, n_stft=257, norm="slaney", mel_scale="slaney")
    theirs = torchaudio.transforms.MelScale(**kw)
    ours = T.MelScale(**kw)
    assert_close(ours(spec), theirs(spec), atol=3e-5, rtol=1e-4, rel_error=1e-5)
    with pytest.raises(ParameterValueError, match="specgram must be a"):
        ours(spec[:, :200])
    with pytest.raises(ParameterValueError, match="f_min must be <= f_max"):
        T.MelScale(f_min=9000.0, sample_rate=16000)


def test_mel_filters_follow_the_default_dtype_as_torchaudio(generator):
    # torchaudio's filter buffer is made in the default dtype (melscale_fbanks' linspace follows it);
    # ours was float32 always, so under set_default_dtype(float64) a float64 mel spectrogram was
    # projected with filters rounded to float32: ~1e-8 off torchaudio's, far above float64 rounding.
    x = random_tensor((2, 600), generator=generator, dtype=torch.float64)
    spec = random_tensor((2, 33, 9), generator=generator, dtype=torch.float64, low=0.0, high=10.0)
    kw = dict(sample_rate=8000, n_mels=12, norm="slaney", mel_scale="slaney")
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        modules = [
            (
                T.MelSpectrogram(n_fft=64, **kw, backend="torch"),
                torchaudio.transforms.MelSpectrogram(n_fft=64, **kw),
            ),
            (T.MelScale(n_stft=33, **kw), torchaudio.transforms.MelScale(n_stft=33, **kw)),
        ]
    finally:
        torch.set_default_dtype(previous)
    for (ours, theirs), signal in zip(modules, (x, spec), strict=True):
        fb = ours.mel_scale.fb if isinstance(ours, T.MelSpectrogram) else ours.fb
        assert fb.dtype == torch.float64
        assert_close(ours(signal), theirs(signal))


@pytest.mark.parametrize(
    "kwargs,length",
    [
        pytest.param(dict(n_fft=400, hop_length=100), None, id="defaults-hop100"),
        pytest.param(dict(n_fft=400), 2999, id="length"),
        pytest.param(dict(n_fft=256, win_length=200, hop_length=50, normalized=True), None, id="win200-norm"),
        pytest.param(dict(n_fft=128, hop_length=32, normalized="frame_length", pad=5), 3000, id="pad5"),
        pytest.param(
            dict(n_fft=128, hop_length=32, center=False, window_fn=torch.hamming_window),
            None,
            id="nocenter-hamming",
        ),
    ],
)
def test_inverse_spectrogram_matches_torchaudio(kwargs, length, generator):
    x = random_tensor((2, 3000), generator=generator)
    fwd = {k: v for k, v in kwargs.items()}
    spec = torchaudio.transforms.Spectrogram(**fwd, power=None)(x)
    expected = torchaudio.transforms.InverseSpectrogram(**kwargs)(spec, length)
    ours = T.InverseSpectrogram(**kwargs)
    assert_close(ours(spec, length), expected, rel_error=1e-6)
    assert_close(ours(torch.view_as_real(spec), length), expected, rel_error=1e-6)


def test_inverse_spectrogram_errors(generator):
    spec = torch.stft(random_tensor((1000,), generator=generator), 64, 16, return_complex=True)
    with pytest.raises(ParameterValueError, match="65 frequency bins"):
        T.InverseSpectrogram(n_fft=128, hop_length=16)(spec)
    with pytest.raises(ParameterValueError, match="NOLA"):
        T.InverseSpectrogram(n_fft=64, hop_length=16, center=False)(spec)
    with pytest.raises(ParameterValueError, match="spectrogram must be a complex"):
        T.InverseSpectrogram(n_fft=64)(spec.real)


def test_inverse_spectrogram_refuses_frameless_and_integer_input(generator):
    # Both failed inside torch: a reshape of a frameless spectrogram, fold on an integer one.
    x = random_tensor((1000,), generator=generator)
    spec = torch.stft(x, 64, 16, window=torch.hann_window(64), return_complex=True)
    inverse = T.InverseSpectrogram(n_fft=64, hop_length=16)
    for length in (None, 100):
        with pytest.raises(ParameterValueError, match=r"at least one frame .* shape \(33, 0\)"):
            inverse(spec[:, :0], length)
    with pytest.raises(ParameterTypeError, match="spectrogram must be a tensor of dtype float16"):
        inverse(torch.view_as_real(spec).round().long())


def test_inverse_spectrogram_refuses_a_single_centred_frame_of_even_n_fft(generator):
    # torchaudio fails inside torch.istft (the trim leaves no sample: an empty envelope); this returned an
    # empty signal. With length both pad, as torch.istft does.
    spec = random_tensor((2, 9, 1), generator=generator, dtype=torch.complex128)
    with pytest.raises(RuntimeError):
        torchaudio.transforms.InverseSpectrogram(n_fft=16)(spec)
    with pytest.raises(ParameterValueError, match="spectrogram must be a spectrum of more than one frame"):
        T.InverseSpectrogram(n_fft=16)(spec)
    expected = torchaudio.transforms.InverseSpectrogram(n_fft=16)(spec, 10)
    assert_close(T.InverseSpectrogram(n_fft=16)(spec, 10), expected, dtype="float32")  # (a float32 window)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_inverse_spectrogram_half_input_is_rounded_once(dtype, generator):
    # A 16-bit spectrogram was inverted in 16 bits: ~2.4x the error of the output's own rounding. Now
    # float32 inside and one rounding, so the error is that rounding's, whose rms relative to the signal
    # is at most u/√3 (u = 2^-11 for float16, 2^-8 for bfloat16; measured 2.1e-4 / 1.7e-3 here, and
    # 5.2e-4 / 4.0e-3 in 16 bits).
    x = random_tensor((2, 3000), generator=generator, dtype=torch.float64)
    kw = dict(n_fft=256, hop_length=64)
    spec = torch.view_as_real(torchaudio.transforms.Spectrogram(**kw, power=None).double()(x)).to(dtype)
    expected = torchaudio.transforms.InverseSpectrogram(**kw).double()(torch.view_as_complex(spec.double()))
    got = T.InverseSpectrogram(**kw)(spec)
    assert got.dtype == dtype
    u = 2.0**-11 if dtype == torch.float16 else 2.0**-8
    assert_close(got, expected, dtype=dtype, rel_error=u / 3**0.5)


def test_spectrogram_onesided_none_is_torch_default(generator):
    # torch.stft's onesided=None means one-sided for real input (torchaudio passes it through); it gave
    # all n_fft bins here (bool(None) is False). Non-bools are refused, as torch.stft refuses them.
    x = random_tensor((2, 1000), generator=generator)
    expected = torchaudio.transforms.Spectrogram(n_fft=64, onesided=None)(x)
    got = T.Spectrogram(n_fft=64, onesided=None)(x)
    assert got.shape == expected.shape == (2, 33, 32)
    assert_close(got, expected, rel_error=1e-6)
    for bad in ("no", 0):
        with pytest.raises(ParameterTypeError, match="onesided must be a bool"):
            T.Spectrogram(n_fft=64, onesided=bad)


@pytest.mark.parametrize("module", ["Spectrogram", "MelSpectrogram", "InverseSpectrogram"])
def test_window_fn_must_give_a_real_window_of_win_length(module):
    # torch.stft refuses these windows; here a longer one was silently cropped to n_fft, a complex
    # one lost its imaginary part, and the rest failed inside torch with its own messages.
    build = getattr(T, module)
    with pytest.raises(RuntimeError):  # torchaudio's (torch.stft's) refusal of the longer window
        torchaudio.transforms.Spectrogram(n_fft=64, window_fn=lambda n: torch.ones(n + 1))(torch.randn(500))
    bad_windows = [
        lambda n: torch.ones(n + 1),
        lambda n: torch.ones(n, dtype=torch.complex64),
        lambda n: torch.ones(2, n),
        lambda n: [1.0] * n,
    ]
    for window_fn in bad_windows:
        with pytest.raises(
            ParameterValueError, match="window_fn must return a real 1-D tensor of win_length=48 samples"
        ):
            build(n_fft=64, win_length=48, window_fn=window_fn)
    with pytest.raises(ParameterTypeError, match="window_fn must be a callable"):
        build(n_fft=64, window_fn="hann")
    with pytest.raises(ParameterTypeError, match="wkwargs must be None or a dict"):
        build(n_fft=64, wkwargs=[("periodic", False)])
    with pytest.raises(
        ParameterTypeError, match=r"window_fn\(64, \*\*wkwargs\) failed with wkwargs=\{'beta'"
    ):
        build(n_fft=64, wkwargs={"beta": 8.0})  # hann_window takes no beta


def test_window_normalization_of_a_zero_window_is_nan_as_torchaudio(generator):
    # ‖w‖ = 0 (a symmetric 2-sample Hann): torchaudio divides by 0 (NaN); this raised ZeroDivisionError.
    x = random_tensor((2, 200), generator=generator)
    kw = dict(n_fft=8, win_length=2, wkwargs={"periodic": False}, normalized=True)
    assert torchaudio.transforms.Spectrogram(**kw)(x).isnan().all()
    assert T.Spectrogram(**kw)(x).isnan().all()
    assert T.MelSpectrogram(sample_rate=8000, n_mels=2, backend="torch", **kw)(x).isnan().all()


@pytest.mark.parametrize("power", [1.0, 0.5, 3.0])
def test_nan_samples_stay_nan_for_every_power(power, generator):
    # |X|^power for power != 2 was where(p > 0, ..., 0): the bins of a NaN sample became 0, silently.
    x = random_tensor((2, 200), generator=generator)
    x[1, 90] = float("nan")
    expected = torchaudio.transforms.Spectrogram(n_fft=16, power=power)(x)
    assert expected.isnan().any()
    assert torch.equal(T.Spectrogram(n_fft=16, power=power)(x).isnan(), expected.isnan())


def test_default_hop_of_a_one_sample_window_is_refused():
    # torchaudio's default hop, win_length // 2, is 0 for win_length=1: torch.stft / torch.istft fail
    # inside. This ran with a hop of 1 instead.
    x = torch.randn(2, 64)
    with pytest.raises(RuntimeError):
        torchaudio.transforms.Spectrogram(n_fft=8, win_length=1)(x)
    match = r"hop_length must be >= 1 \(the default win_length // 2 is 0 for win_length=1; pass it\), got 0"
    for build in (T.Spectrogram, T.MelSpectrogram, T.InverseSpectrogram):
        with pytest.raises(ParameterValueError, match=match):
            build(n_fft=8, win_length=1)
    with pytest.raises(ParameterValueError, match=match):
        nf.mel_spectrogram(x, n_fft=1, n_mels=1)
    kw = dict(n_fft=8, win_length=1, hop_length=1)
    assert_close(T.Spectrogram(**kw)(x), torchaudio.transforms.Spectrogram(**kw)(x))


def test_inverse_spectrogram_refuses_a_hop_longer_than_the_window(generator):
    # torch.istft (so torchaudio) refuses hop_length > win_length on every call; a single frame, which
    # has no gap in its envelope, was inverted here.
    spec = random_tensor((2, 41, 1), generator=generator, dtype=torch.complex64)
    kw = dict(n_fft=80, win_length=8, hop_length=71)
    with pytest.raises(RuntimeError, match="hop_length <= win_length"):
        torchaudio.transforms.InverseSpectrogram(**kw)(spec, 3)
    with pytest.raises(ParameterValueError, match=r"hop_length must be in 1..win_length=8 .*, got 71"):
        T.InverseSpectrogram(**kw)


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("center", [True, False])
def test_a_signal_of_no_samples_is_taken_where_pad_fills_it(backend, center, device):
    # torchaudio pads first, so a (…, 0) waveform with pad > 0 is a signal of zeros; this refused it
    # as an empty tensor (and the Triton backend's choice as "the input is empty"). An empty batch
    # stays refused.
    x = torch.zeros(2, 0)
    kw = dict(n_fft=16, hop_length=4, pad=9, center=center)
    assert_close(T.Spectrogram(**kw)(x), torchaudio.transforms.Spectrogram(**kw)(x))
    mel = dict(kw, sample_rate=8000, n_mels=4)
    got = T.MelSpectrogram(**mel, backend=backend).to(device)(x.to(device)).cpu()
    assert_close(got, torchaudio.transforms.MelSpectrogram(**mel)(x))
    with pytest.raises(ParameterValueError, match=r"waveform must be a non-empty tensor, .* shape \(0, 0\)"):
        T.Spectrogram(**kw)(torch.zeros(0, 0))


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_modules_work_under_inference_mode(backend, device, generator):
    # Built (or moved) under torch.inference_mode, the modules raised "Inference tensors do not track
    # version counter" (their window caches key on it), and the float32 basis made there could not be
    # saved for a later call's backward. An in-place window edit there is still seen.
    x = random_tensor((2, 300), generator=generator).to(device)
    kw = dict(sample_rate=8000, n_fft=32, n_mels=8)
    expected = torchaudio.transforms.MelSpectrogram(**kw).to(device)(x)
    with torch.inference_mode():
        mel = T.MelSpectrogram(**kw, backend=backend)
        spec = T.Spectrogram(n_fft=32, power=1.0)
        assert_close(mel(x), expected, rel_error=1e-6)
        spec(x)
    xg = x.clone().requires_grad_(True)
    (mel(xg).sum() + spec(xg).sum()).backward()
    x64 = x.cpu().double().requires_grad_(True)
    TA = torchaudio.transforms
    (TA.MelSpectrogram(**kw).double()(x64).sum() + TA.Spectrogram(n_fft=32, power=1.0)(x64).sum()).backward()
    assert_close(xg.grad.cpu(), x64.grad, dtype="float32", rel_error=1e-5)
    moved = T.MelSpectrogram(**kw, backend=backend)
    with torch.inference_mode():
        moved = moved.double().float().to(device)  # an inference-tensor window
        assert moved.spectrogram.window.is_inference()
        assert_close(moved(x), expected, rel_error=1e-6)
        moved.spectrogram.window.copy_(torch.hamming_window(32))
        got = moved(x)
    theirs = torchaudio.transforms.MelSpectrogram(**kw, window_fn=torch.hamming_window).to(device)
    assert_close(got, theirs(x), rel_error=1e-6)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_window_made_trainable_after_construction_gets_its_gradient(backend, device, generator):
    # The padded-window cache was built at construction and keyed on the window's address and
    # version only: after window.requires_grad_() every call served the graph-free copy, so the
    # window got no gradient (silently; with x not requiring grad the output had no graph at all).
    # torchaudio reads its window on every call and gives it one.
    x = random_tensor((2, 300), generator=generator)
    weight = random_tensor((2, 12, 19), generator=generator)
    kw = dict(sample_rate=8000, n_fft=48, win_length=40, hop_length=16, n_mels=12)
    ours = T.MelSpectrogram(**kw, backend=backend).to(device)
    theirs = torchaudio.transforms.MelSpectrogram(**kw).double()
    for module in (ours.spectrogram, theirs.spectrogram):
        module.window.requires_grad_(True)
    (expected,) = torch.autograd.grad((theirs(x.double()) * weight.double()).sum(), theirs.spectrogram.window)
    for _ in range(2):  # the second call reuses what the first one cached
        out = ours(x.to(device))
        (got,) = torch.autograd.grad((out * weight.to(device)).sum(), ours.spectrogram.window)
        assert_close(got.cpu(), expected, dtype="float32", rel_error=1e-5)
    spec = T.Spectrogram(n_fft=48, power=1.0)
    spec.window.requires_grad_(True)
    (got,) = torch.autograd.grad(spec(x).sum(), spec.window)
    theirs = torchaudio.transforms.Spectrogram(n_fft=48, power=1.0).double()
    theirs.window.requires_grad_(True)
    (expected,) = torch.autograd.grad(theirs(x.double()).sum(), theirs.window)
    assert_close(got, expected, dtype="float32", rel_error=1e-5)


def test_module_with_a_trained_window_deep_copies(generator):
    # A window parameter's graph was kept in the module's caches (the padded window and the float32
    # basis buffer) after a call: copy.deepcopy then raised "Only Tensors created explicitly by the
    # user (graph leaves) support the deepcopy protocol". torchaudio's copies.
    import copy

    x = random_tensor((2, 300), generator=generator)
    module = T.MelSpectrogram(sample_rate=8000, n_fft=48, n_mels=12, backend="torch")
    module.spectrogram.window = torch.nn.Parameter(torch.hann_window(48))
    module(x).sum().backward()
    twin = copy.deepcopy(module)
    twin(x).sum().backward()
    assert_close(twin.spectrogram.window.grad, module.spectrogram.window.grad, atol=0, rtol=0)


@pytest.mark.parametrize("backend", ["torch", None, "triton"], ids=["torch", "auto", "triton"])
def test_mel_filters_that_require_grad_get_their_gradient(backend, device, generator, monkeypatch):
    # The Triton kernels take the filters as constants: with mel_scale.fb requiring grad the Triton path
    # returned an output without a graph, silently (torchaudio's filters get their gradient). Auto
    # dispatch now takes the torch twin for it, and an explicit backend="triton" says why it cannot.
    # Auto dispatch picks Triton on a GPU, and on the CPU with NBXSIG_BACKEND=triton.
    monkeypatch.setenv("NBXSIG_BACKEND", "triton")
    x = random_tensor((2, 300), generator=generator)
    weight = random_tensor((2, 12, 10), generator=generator)
    kw = dict(sample_rate=8000, n_fft=48, hop_length=32, n_mels=12)
    theirs = torchaudio.transforms.MelSpectrogram(**kw).double()
    theirs.mel_scale.fb.requires_grad_(True)
    (expected,) = torch.autograd.grad((theirs(x.double()) * weight.double()).sum(), theirs.mel_scale.fb)
    ours = T.MelSpectrogram(**kw, backend=backend).to(device)
    ours.mel_scale.fb.requires_grad_(True)
    if backend == "triton":
        with pytest.raises(BackendUnavailableError, match=r"mel filters \(mel_scale\.fb\) require grad"):
            ours(x.to(device))
        with torch.no_grad():  # nothing to differentiate: the kernels serve it
            assert_close(ours(x.to(device)).cpu(), theirs(x.double()), dtype="float32", rel_error=1e-5)
    else:
        (got,) = torch.autograd.grad((ours(x.to(device)) * weight.to(device)).sum(), ours.mel_scale.fb)
        assert_close(got.cpu(), expected, dtype="float32", rel_error=1e-5)


def test_transform_constructor_errors():
    with pytest.raises(ParameterValueError, match="normalized must be"):
        T.Spectrogram(normalized="energy")
    with pytest.raises(ParameterValueError, match="win_length must be <= n_fft"):
        T.MelSpectrogram(n_fft=256, win_length=400)
    with pytest.raises(ParameterValueError, match="backend must be"):
        T.MelSpectrogram(backend="cuda")
    with pytest.raises(ParameterValueError, match="pad_mode must be one of"):
        T.Spectrogram(pad_mode="wrap")


def test_transform_errors_name_the_callers_argument():
    with pytest.raises(ParameterValueError, match=r"f_max must be a finite number >= 0\.0, got -1\.0"):
        T.MelSpectrogram(f_max=-1.0)
    with pytest.raises(ParameterValueError, match=r"f_min must be <= f_max \(1000\.0\), got 5000\.0"):
        T.MelSpectrogram(f_min=5000.0, f_max=1000.0)
    # The caller's (10,), not the (1, 10) the modules reshape it to (nor its length after pad).
    for module in (T.MelSpectrogram(n_mels=80), T.MelSpectrogram(n_mels=80, pad=3), T.Spectrogram(pad=3)):
        with pytest.raises(ParameterValueError, match=r"waveform must be a signal longer .* shape \(10,\)"):
            module(torch.randn(10))


def test_mel_scale_refuses_integer_specgram(generator):
    # An integer specgram met integer-rounded filters (all zeros) and came back as zeros.
    spec = (random_tensor((201, 5), generator=generator, low=1.0, high=1000.0)).int()
    with pytest.raises(ParameterTypeError, match="specgram must be a tensor of dtype float16, bfloat16"):
        T.MelScale(n_mels=40)(spec)


def test_half_input_does_not_overflow(generator):
    # |X| of this loud noise is ~1e3 at n_fft 400: |X|² overflows float16 (max 65504) unless the STFT is
    # computed in float32, as the Triton path does; the power spectrogram is then rounded to float16.
    x = (30 * random_tensor((2, 1600), generator=generator)).half()
    kw = dict(n_fft=400, hop_length=160)
    expected = torchaudio.transforms.Spectrogram(**kw, power=1.0)(x.double())
    got = T.Spectrogram(**kw, power=1.0)(x)
    assert got.dtype == torch.float16
    assert_close(got, expected, rel_error=2e-3)
    complex_stft = T.Spectrogram(**kw, power=None)(x.bfloat16())  # bfloat16 has no complex dtype
    assert complex_stft.dtype == torch.complex64
    assert_close(complex_stft.abs(), expected, dtype=torch.bfloat16, rel_error=2e-2)
    theirs = torchaudio.transforms.MelSpectrogram(16000, **kw, n_mels=40, power=1.0).double()
    ours = T.MelSpectrogram(16000, **kw, n_mels=40, power=1.0, backend="torch")
    ours.load_state_dict(theirs.state_dict())
    got = ours(x)
    assert got.dtype == torch.float16
    assert_close(got, theirs(x.double()), rel_error=2e-3)
    spec = theirs.spectrogram(x.double())
    assert spec.max() > 256  # its square overflows float16
    assert_close(ours.mel_scale(spec.half()), theirs.mel_scale(spec.half().double()), rel_error=2e-3)


@pytest.mark.parametrize("module", ["Spectrogram", "MelSpectrogram"])
def test_circular_padding_wraps_at_most_once(module, generator):
    # torch pads circularly by at most the signal's length (n_fft // 2 = 32 here, pad=2 on each side
    # included): 27 samples are refused with a ParameterValueError, 28 equal torchaudio.
    x = random_tensor((2, 28), generator=generator, dtype=torch.float64)
    kw = dict(n_fft=64, hop_length=16, pad=2, pad_mode="circular")
    if module == "MelSpectrogram":
        kw.update(sample_rate=8000, n_mels=12)
    theirs = getattr(torchaudio.transforms, module)(**kw).double()
    ours = getattr(T, module)(**kw).double()
    ours.load_state_dict(theirs.state_dict())
    with pytest.raises(
        ParameterValueError, match="at least n_fft // 2 = 32 samples after 4 samples of padding"
    ):
        ours(x[:, :27])
    assert_close(ours(x), theirs(x), atol=1e-12, rtol=1e-9)


def test_integral_float_sample_rate_is_accepted(generator):
    # torchaudio accepts sample_rate=22050.0; 22050.5 and bools stay refused.
    x = random_tensor((2, 2000), generator=generator, dtype=torch.float64)
    kw = dict(sample_rate=22050.0, n_fft=256, hop_length=64, n_mels=30)
    theirs = torchaudio.transforms.MelSpectrogram(**kw).double()
    ours = T.MelSpectrogram(**kw, backend="torch").double()
    # Our filters from float64, theirs from float32 (~1e-5 of cancellation error); then loaded: equal.
    assert_close(ours.mel_scale.fb, theirs.mel_scale.fb, atol=3e-5, rtol=1e-4)
    ours.load_state_dict(theirs.state_dict())
    assert_close(ours(x), theirs(x), atol=1e-12, rtol=1e-9)
    spec = random_tensor((129, 7), generator=generator, low=0.0, high=10.0)
    scale_kw = dict(n_mels=30, sample_rate=22050.0, n_stft=129)
    expected = torchaudio.transforms.MelScale(**scale_kw)(spec)
    assert_close(T.MelScale(**scale_kw)(spec), expected, atol=3e-5, rtol=1e-4, rel_error=1e-5)
    for bad in (22050.5, True):
        with pytest.raises(ParameterTypeError, match="sample_rate must be an integer"):
            T.MelSpectrogram(sample_rate=bad)
        with pytest.raises(ParameterTypeError, match="sample_rate must be an integer"):
            T.MelScale(sample_rate=bad)


@pytest.mark.parametrize(
    "module,kwargs",
    [
        pytest.param("Spectrogram", dict(n_fft=128, power=1.0, normalized="window"), id="Spectrogram"),
        pytest.param(
            "MelSpectrogram", dict(n_fft=256, normalized="frame_length", n_mels=40), id="MelSpectrogram"
        ),
        pytest.param("MelScale", dict(n_mels=40, n_stft=257, f_max=7000.0), id="MelScale"),
        pytest.param("InverseSpectrogram", dict(n_fft=128, normalized=True), id="InverseSpectrogram"),
    ],
)
def test_public_attributes_match_torchaudio(module, kwargs):
    theirs = getattr(torchaudio.transforms, module)(**kwargs)
    ours = getattr(T, module)(**kwargs)
    public = {k: v for k, v in vars(theirs).items() if not k.startswith("_") and k != "training"}
    assert public, module
    for name, value in public.items():
        assert getattr(ours, name) == value, name


def test_modules_transform_with_torch_fft_eagerly_and_keep_the_export_basis(generator, monkeypatch):
    # Eagerly the torch path runs torch.fft (torchaudio's algorithm) on the frames, not the basis
    # matmul (2-3x torchaudio's CPU time); the basis buffer, the exported graph's, still follows an
    # in-place change of the window.
    from nbxsig.reference import mel as ref_mel

    def no_matmul(*args, **kwargs):
        raise AssertionError("the basis matmul ran outside an export")

    monkeypatch.setattr(ref_mel, "stft_parts", no_matmul)
    x = random_tensor((2, 3000), generator=generator)
    ours = T.Spectrogram(n_fft=64, hop_length=16, power=None)
    theirs = torchaudio.transforms.Spectrogram(n_fft=64, hop_length=16, power=None)
    assert_close(ours(x), theirs(x.double()), dtype="float32")
    two_sided = T.Spectrogram(n_fft=64, hop_length=16, onesided=False)
    expected = torchaudio.transforms.Spectrogram(n_fft=64, hop_length=16, onesided=False)(x.double())
    assert_close(two_sided(x), expected, dtype="float32")
    with torch.no_grad():
        ours.window.mul_(0.5)
    ours(x)
    assert torch.equal(ours.basis, ours._basis(torch.float32))


SPECTROGRAM_VARIANTS = [
    ("Spectrogram", dict(n_fft=64)),
    ("Spectrogram", dict(n_fft=64, win_length=40, hop_length=13, power=None, normalized=True)),
    ("Spectrogram", dict(n_fft=63, onesided=False, center=False)),
    *(
        ("MelSpectrogram", dict(**kw, backend=backend))
        for kw in (dict(n_fft=64, n_mels=10), dict(n_fft=65, win_length=50, n_mels=9, norm="slaney"))
        for backend in ("torch", "triton")
    ),
]


@pytest.mark.parametrize(("name", "kwargs"), SPECTROGRAM_VARIANTS, ids=lambda v: str(v).replace(" ", ""))
def test_buffers_are_torchaudios_after_calls_and_moves(name, kwargs, device, generator):
    # Outputs after a device move, a dtype round trip and a deep copy; buffers are torchaudio's but for
    # the export basis (non-persistent, documented), and the state_dict keys are theirs.
    import copy

    if name == "MelSpectrogram":
        kwargs = dict(kwargs, sample_rate=8000)
    ours = getattr(T, name)(**kwargs)
    kwargs.pop("backend", None)
    theirs = getattr(torchaudio.transforms, name)(**kwargs)
    x = random_tensor((2, 300), generator=generator)
    expected = theirs.double()(x.double())
    for module in (ours, ours.to(device), ours.double().float(), copy.deepcopy(ours)):
        got = module(x.to(device)).cpu()
        assert_close(_real(got), _real(expected), dtype="float32", rel_error=1e-5)
        names = [n for n in dict(module.named_buffers()) if n.split(".")[-1] != "basis"]
        assert names == list(dict(theirs.named_buffers()))
    assert list(ours.state_dict()) == list(theirs.state_dict())


def _float64_window(n: int, **kwargs) -> torch.Tensor:
    return torch.hann_window(n, dtype=torch.float64, **kwargs)


@pytest.mark.parametrize("power", [2.0, 1.0, None], ids=["power2", "power1", "complex"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_spectrogram_float64_window_promotes_as_torchaudio(dtype, power, generator):
    # torch.stft promotes the signal with the window: torchaudio returns float64 (complex128) for a
    # float64 window whatever the input's dtype; this returned the input's (float32, complex64).
    x = random_tensor((2, 1500), generator=generator).to(dtype)
    kw = dict(n_fft=128, hop_length=32, power=power, normalized=True)
    expected = torchaudio.transforms.Spectrogram(**kw, window_fn=_float64_window)(x)
    got = T.Spectrogram(**kw, window_fn=_float64_window)(x)
    assert expected.dtype == got.dtype == (torch.float64 if power else torch.complex128)
    assert_close(_real(got), _real(expected), dtype="float64")
    # The same from a module converted with .double() only, on float32 input.
    expected = torchaudio.transforms.Spectrogram(**kw).double()(x.float())
    got = T.Spectrogram(**kw).double()(x.float())
    assert got.dtype == expected.dtype
    assert_close(_real(got), _real(expected), dtype="float64")


def test_mel_spectrogram_float64_window_promotes_as_torchaudio(device, generator, monkeypatch):
    # torchaudio: a module converted with .double() gives float64 for float32 input (the spectrogram
    # is promoted by its window, then meets float64 filters). Both backends' auto choice must give it:
    # the Triton kernels take no float64, so the float32 input may not pick them.
    x = random_tensor((2, 1200), generator=generator)
    kw = dict(sample_rate=8000, n_fft=128, hop_length=32, n_mels=20)
    theirs = torchaudio.transforms.MelSpectrogram(**kw).double()
    expected = theirs(x)
    assert expected.dtype == torch.float64
    monkeypatch.setenv("NBXSIG_BACKEND", "triton")  # auto picks Triton wherever it can run (interpreter)
    for backend in (None, "torch"):
        ours = T.MelSpectrogram(**kw, backend=backend).double()
        ours.load_state_dict(theirs.state_dict())  # torchaudio's float32-computed filters
        got = ours.to(device)(x.to(device))
        assert got.dtype == torch.float64, backend
        assert_close(got, expected, dtype="float64")
    # Only the window in float64 (a window_fn giving float64): torchaudio's float32 filters then meet a
    # float64 spectrogram and its matmul fails; here the projection runs in float64, as MelScale's.
    with pytest.raises(RuntimeError, match="same dtype"):
        torchaudio.transforms.MelSpectrogram(**kw, window_fn=_float64_window)(x)
    partial = T.MelSpectrogram(**kw, window_fn=_float64_window)
    partial.load_state_dict({k: v.float() for k, v in theirs.state_dict().items()})
    assert partial.mel_scale.fb.dtype == torch.float32
    got = partial.to(device)(x.to(device))
    assert got.dtype == torch.float64
    assert_close(got, expected, dtype="float64")
    with pytest.raises(BackendUnavailableError, match=r"float64 window \(spectrogram.window\)"):
        T.MelSpectrogram(**kw, window_fn=_float64_window, backend="triton").to(device)(x.to(device))
    # A float32 window keeps float32 input in float32 (and on the Triton kernels).
    got = T.MelSpectrogram(**kw, backend="triton").to(device)(x.to(device))
    assert got.dtype == torch.float32
    assert_close(got, expected, dtype="float32", rel_error=1e-5)


@pytest.mark.parametrize("normalized", [False, True], ids=["plain", "normalized"])
def test_inverse_spectrogram_float64_window_promotes_as_torchaudio(normalized, generator):
    # torch.istft promotes with the window: torchaudio returns float64 for a complex64 spectrogram and
    # a float64 window (or a .double() module); this returned float32. torch.istft inverts the complex64
    # frames before windowing (float32 accuracy); here they are inverted in float64, so the result
    # equals the float64 inverse of the same spectrogram.
    TA = torchaudio.transforms
    x = random_tensor((2, 1500), generator=generator)
    kw = dict(n_fft=128, hop_length=32, normalized=normalized)
    spec = TA.Spectrogram(**kw, power=None)(x)
    assert spec.dtype == torch.complex64
    pairs = [  # a float64 window from window_fn; a float32 one converted by .double()
        (
            T.InverseSpectrogram(**kw, window_fn=_float64_window),
            TA.InverseSpectrogram(**kw, window_fn=_float64_window),
        ),
        (T.InverseSpectrogram(**kw).double(), TA.InverseSpectrogram(**kw).double()),
    ]
    for ours, theirs in pairs:
        expected, exact = theirs(spec), theirs(spec.to(torch.complex128))
        assert expected.dtype == torch.float64
        got = ours(spec)
        assert got.dtype == torch.float64
        assert_close(got, expected, dtype="float32")
        assert_close(got, exact, dtype="float64")
        # The real layout, float16 included (nbxsig's own; its values are exact in float32).
        half = torch.view_as_real(spec).half()
        got = ours(half)
        assert got.dtype == torch.float64
        assert_close(got, theirs(torch.view_as_complex(half.double())), dtype="float64")
    # A float32 window keeps a complex64 spectrogram's float32, as torchaudio.
    assert T.InverseSpectrogram(**kw)(spec).dtype == TA.InverseSpectrogram(**kw)(spec).dtype == torch.float32


def test_inverse_spectrogram_refuses_an_empty_batch(generator):
    # torch.istft (so torchaudio) fails inside on an empty batch, and so did the FFT here (oneMKL's
    # "Inconsistent configuration parameters"); refused with a message, as the forward modules do.
    x = random_tensor((2, 600), generator=generator)
    spec = torch.stft(x, 64, 16, window=torch.hann_window(64), return_complex=True)
    with pytest.raises(RuntimeError):
        torchaudio.transforms.InverseSpectrogram(n_fft=64, hop_length=16)(spec[:0])
    with pytest.raises(ParameterValueError, match=r"spectrogram must be a non-empty tensor .* \(0, 33, 38\)"):
        T.InverseSpectrogram(n_fft=64, hop_length=16)(spec[:0])
