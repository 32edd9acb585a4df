"""Filter design against scipy.signal / kornia in float64, and in physical terms (dB in stop/passbands)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import scipy.signal as ss
import torch
from _marks import suite_dependency

import nbxsig.filter_design as fd
import nbxsig.filters as nf
from nbxsig.errors import ParameterTypeError, ParameterValueError
from nbxsig.testing import assert_close

FIRWIN_CASES = [
    (31, 0.3, {}),
    (30, 0.3, {}),
    (1, 0.5, {}),
    (65, [0.2, 0.5], {"pass_zero": False}),
    (65, [0.2, 0.5], {}),
    (101, [500.0, 2000.0, 4000.0, 5000.0], {"fs": 16000.0}),
    (101, [500.0, 2000.0], {"fs": 16000.0, "pass_zero": "bandpass", "window": "blackman"}),
    (51, 0.25, {"pass_zero": "highpass", "window": "hann"}),
    (51, [0.25, 0.6], {"pass_zero": "bandstop", "window": ("kaiser", 8.6)}),
    (129, 1000.0, {"fs": 16000.0, "width": 300.0}),
    (40, 0.4, {"width": 0.05}),
    (63, 0.1, {"scale": False, "window": "boxcar"}),
    (33, 0.3, {"window": "triang"}),
    (32, 0.3, {"window": "triang"}),
    (33, 0.3, {"window": "bartlett"}),
    (33, 0.3, {"window": "blackmanharris"}),
    (33, 0.3, {"window": "nuttall"}),
    (33, 0.3, {"window": ("gaussian", 5.0)}),
    # scipy's default fs is None (= 2): forwarded as such, it was refused.
    (31, 0.3, {"fs": None}),
    (41, [0.2, 0.7], {"fs": None, "pass_zero": "bandpass", "width": 0.1}),
]


@pytest.mark.parametrize(("numtaps", "cutoff", "kwargs"), FIRWIN_CASES, ids=lambda v: str(v).replace(" ", ""))
def test_firwin_is_scipy(numtaps, cutoff, kwargs):
    ours = nf.firwin(numtaps, cutoff, **kwargs)
    ref = ss.firwin(numtaps, cutoff, **kwargs)
    assert ours.dtype == torch.float64 and ours.shape == (numtaps,)
    assert_close(ours, torch.from_numpy(ref), atol=1e-14, rtol=1e-12)


@pytest.mark.parametrize(
    "window",
    ["hamming", "hann", "blackman", "boxcar", "bartlett", "triang", ("kaiser", 5.0), ("gaussian", 2.0)],
)
@pytest.mark.parametrize("m", [1, 2, 7, 16])
def test_windows_are_scipy_symmetric(window, m):
    ours = nf.get_window(window, m)
    ref = ss.get_window(window, m, fftbins=False)
    np.testing.assert_allclose(ours, ref, rtol=1e-13, atol=1e-15)


def test_band_taps_in_hz_are_firwin():
    fs = 16000.0
    checks = [
        (nf.lowpass_taps(1000.0, fs=fs, numtaps=63), ss.firwin(63, 1000.0, fs=fs)),
        (nf.highpass_taps(1000.0, fs=fs, numtaps=63), ss.firwin(63, 1000.0, fs=fs, pass_zero=False)),
        (
            nf.bandpass_taps(300.0, 3400.0, fs=fs, numtaps=64),
            ss.firwin(64, [300.0, 3400.0], fs=fs, pass_zero=False),
        ),
        (nf.bandstop_taps(300.0, 3400.0, fs=fs, numtaps=65), ss.firwin(65, [300.0, 3400.0], fs=fs)),
        (
            nf.lowpass_taps(1000.0, fs=fs, numtaps=63, width_hz=400.0),
            ss.firwin(63, 1000.0, fs=fs, width=400.0),
        ),
    ]
    for ours, ref in checks:
        assert_close(ours, torch.from_numpy(ref), atol=1e-14, rtol=1e-12)


def _gain_db(taps: torch.Tensor, freq: float, fs: float) -> float:
    """Steady-state gain of a tone through the FIR, measured on the filtered signal (not the formula)."""
    n = np.arange(8192)
    tone = torch.from_numpy(np.sin(2 * np.pi * freq / fs * n))
    y = nf.fir_filter(tone, taps, backend="torch")[len(taps) : -1]
    ref = tone[len(taps) : -1]
    return 20 * np.log10(float(y.pow(2).mean().sqrt() / ref.pow(2).mean().sqrt()))


def test_designed_attenuation_in_decibels():
    fs = 16000.0
    # A Kaiser design for 60 dB: width from kaiserord, so the stopband must be at least ~60 dB down.
    numtaps, beta = ss.kaiserord(60.0, 500.0 / (fs / 2))
    numtaps |= 1
    taps = nf.lowpass_taps(2000.0, fs=fs, numtaps=numtaps, window=("kaiser", beta))
    assert abs(_gain_db(taps, 500.0, fs)) < 0.01  # passband tone kept (< 0.01 dB)
    assert _gain_db(taps, 3000.0, fs) < -58.0  # stopband tone attenuated by the designed 60 dB (±2)
    hp = nf.highpass_taps(2000.0, fs=fs, numtaps=numtaps, window=("kaiser", beta))
    assert _gain_db(hp, 500.0, fs) < -58.0 and abs(_gain_db(hp, 5000.0, fs)) < 0.01
    bp = nf.bandpass_taps(1000.0, 3000.0, fs=fs, numtaps=numtaps, window=("kaiser", beta))
    assert _gain_db(bp, 2000.0, fs) > -0.01 and _gain_db(bp, 4500.0, fs) < -58.0


@pytest.mark.parametrize(("fs", "numtaps"), [(16000.0, 256), (44100.0, 100)])
def test_gammatone_bank_is_scipy_fir_gammatone(fs, numtaps):
    freqs = nf.erb_space(100.0, 0.4 * fs, 6)
    bank = nf.gammatone_bank(freqs, fs=fs, numtaps=numtaps)
    assert bank.shape == (6, numtaps)
    for row, f in zip(bank, freqs.tolist(), strict=True):
        b, _ = ss.gammatone(f, "fir", numtaps=numtaps, fs=fs)
        assert_close(row, torch.from_numpy(b), atol=1e-13, rtol=1e-11)


def test_gammatone_peaks_at_its_centre_frequency():
    fs = 16000.0
    bank = nf.gammatone_bank([500.0, 2000.0], fs=fs, numtaps=1024)
    for row, f in zip(bank, (500.0, 2000.0), strict=True):
        spec = np.abs(np.fft.rfft(row.numpy(), 16384))
        peak = np.argmax(spec) * fs / 16384
        assert abs(peak - f) < 0.03 * f


def test_erb_space_is_uniform_on_the_erb_rate_scale():
    f = nf.erb_space(50.0, 8000.0, 40)
    assert f[0].item() == 50.0 and f[-1].item() == 8000.0
    rate = torch.log(f + fd.EAR_Q * fd.MIN_BW)
    steps = rate.diff()
    assert torch.all(steps > 0)
    assert_close(steps, torch.full_like(steps, steps.mean().item()), atol=1e-12)
    # Spacing grows with frequency: about one ERB(f) between neighbours for 40 bands over this range.
    assert f.diff()[0] < f.diff()[-1]


@pytest.mark.parametrize("k", [1, 4, 5, 31])
def test_gaussian_kernels_are_kornia(k):
    kornia = suite_dependency("kornia")
    ours = nf.gaussian_kernel1d(k, 1.7)
    # kornia's public builder takes odd sizes only; its `gaussian` holds the (even-size) convention.
    ref = kornia.filters.kernels.gaussian(k, 1.7, dtype=torch.float64)
    assert_close(ours, ref.reshape(-1), atol=1e-15)
    ours2 = nf.gaussian_kernel2d((k, 3), (1.7, 0.8))
    ref2 = ref.reshape(k, 1) * kornia.filters.kernels.gaussian(3, 0.8, dtype=torch.float64).reshape(1, 3)
    assert_close(ours2, ref2, atol=1e-15)


def test_image_kernels():
    kornia = suite_dependency("kornia")
    assert_close(
        nf.laplacian_kernel(5), kornia.filters.get_laplacian_kernel2d(5, dtype=torch.float64), atol=0, rtol=0
    )
    assert torch.all(nf.box_kernel((3, 5)) == 1 / 15)
    sob = nf.sobel_kernels()
    assert sob.shape == (2, 3, 3) and torch.equal(sob[1], sob[0].T) and sob.sum() == 0
    assert_close(nf.sobel_kernels(normalized=True).abs().sum((1, 2)), torch.ones(2), atol=1e-15)
    sch = nf.scharr_kernels(normalized=True)
    assert_close(sch.abs().sum((1, 2)), torch.ones(2), atol=1e-15)
    # Derivative kernels answer a ramp: correlation of x with d/dx gives a constant, with d/dy zero.
    ramp = torch.arange(5.0, dtype=torch.float64)[None, :].expand(5, 5)
    assert (ramp[1:4, 1:4] * sob[0]).sum() == 8.0 and (ramp[1:4, 1:4] * sob[1]).sum() == 0.0


def test_gabor_kernels_formula():
    g = nf.gabor_kernels(7, sigma=2.0, thetas=[0.0, np.pi / 2], wavelength=4.0, gamma=0.5, psi=0.3)
    assert g.shape == (2, 7, 7)
    y, x = 1, 2  # offsets from the centre
    for t, th in enumerate((0.0, np.pi / 2)):
        xr = x * np.cos(th) + y * np.sin(th)
        yr = -x * np.sin(th) + y * np.cos(th)
        expect = np.exp(-(xr**2 + 0.25 * yr**2) / 8.0) * np.cos(2 * np.pi * xr / 4.0 + 0.3)
        assert g[t, 3 + y, 3 + x].item() == pytest.approx(expect, rel=1e-14)
    # theta = π/2 is theta = 0 transposed.
    assert_close(g[1], g[0].T, atol=1e-15)


def test_design_inputs_accepted_in_every_documented_form():
    f = [440.0, 1000.0]
    bank = nf.gammatone_bank(f, fs=16000.0, numtaps=16)
    assert torch.equal(nf.gammatone_bank(torch.tensor(f), fs=16000.0, numtaps=16), bank)
    assert torch.equal(nf.gammatone_bank(440.0, fs=16000.0, numtaps=16), bank[:1])
    assert torch.equal(nf.firwin(31, np.float32(0.25)), nf.firwin(31, 0.25))
    assert torch.equal(nf.gaussian_kernel2d(5, 1.5), nf.gaussian_kernel2d(5, (1.5, 1.5)))
    # get_window is the one design function that returns numpy (docs/filters.md says so).
    assert isinstance(nf.get_window("hann", 5), np.ndarray)


def test_design_inputs_accepted_as_arrays_tensors_and_fractions():
    # Forms that worked before the inputs were validated: a sigma pair as an array or a tensor, and
    # Fractions (which numpy holds in object arrays).
    pair = nf.gaussian_kernel2d(5, (1.0, 2.0))
    for sigma in (np.array([1.0, 2.0]), torch.tensor([1.0, 2.0]), [np.float32(1.0), np.int64(2)]):
        assert torch.equal(nf.gaussian_kernel2d(5, sigma), pair)
    for sigma in (np.array(1.5), torch.tensor(1.5)):
        assert torch.equal(nf.gaussian_kernel2d(5, sigma), nf.gaussian_kernel2d(5, 1.5))
    assert torch.equal(nf.firwin(31, Fraction(1, 4)), nf.firwin(31, 0.25))
    assert torch.equal(
        nf.firwin(31, [Fraction(1, 4), 0.5], pass_zero=False), nf.firwin(31, [0.25, 0.5], pass_zero=False)
    )


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: nf.firwin(0, 0.3), ParameterValueError, "numtaps must be >= 1, got 0"),
        (lambda: nf.firwin(31, 1.2), ParameterValueError, "cutoff must be frequencies in (0, fs/2)"),
        (lambda: nf.firwin(31, [0.5, 0.2]), ParameterValueError, "cutoff must be strictly increasing"),
        (lambda: nf.firwin(30, 0.3, pass_zero=False), ParameterValueError, "numtaps must be odd"),
        (lambda: nf.firwin(31, 0.3, window="hamm"), ParameterValueError, "window must be one of"),
        (lambda: nf.firwin(31, 0.3, window="kaiser"), ParameterValueError, "needs its parameter"),
        (lambda: nf.firwin(31, 0.3, pass_zero="bandpass"), ParameterValueError, "at least two cutoffs"),
        (lambda: nf.firwin(31, 0.3, pass_zero="x"), ParameterValueError, "pass_zero must be True"),
        (lambda: nf.firwin(31.0, 0.3), ParameterTypeError, "numtaps must be an integer"),
        (lambda: nf.gammatone_bank([9000.0], fs=16000.0, numtaps=8), ParameterValueError, "center_freqs"),
        (lambda: nf.erb_space(100.0, 50.0, 4), ParameterValueError, "f_max must be greater than f_min=100"),
        (lambda: nf.laplacian_kernel(4), ParameterValueError, "kernel_size must be odd sizes"),
        (lambda: nf.gaussian_kernel1d(5, 0.0), ParameterValueError, "sigma must be a finite number > 0.0"),
        (
            lambda: nf.gaussian_kernel2d(5, (1.0, 2.0, 3.0)),
            ParameterValueError,
            "sigma must be a number or a pair (sy, sx) of numbers",
        ),
        (
            lambda: nf.gammatone_bank(["a"], fs=16000.0, numtaps=8),
            ParameterTypeError,
            "center_freqs must be a frequency or a 1-D sequence of frequencies in Hz, got ['a']",
        ),
        (
            lambda: nf.gammatone_bank([[440.0, 1000.0]], fs=16000.0, numtaps=8),
            ParameterValueError,
            "center_freqs must be a frequency or a 1-D sequence",
        ),
        (
            lambda: nf.gammatone_bank(torch.tensor([[440.0, 1000.0]]), fs=16000.0, numtaps=8),
            ParameterValueError,
            "center_freqs must be a frequency or a 1-D sequence",
        ),
        (
            lambda: nf.gabor_kernels(5, sigma=1.0, thetas="a", wavelength=3.0),
            ParameterTypeError,
            "thetas must be a non-empty sequence of finite angles in radians, got 'a'",
        ),
        (lambda: nf.firwin(31, "abc"), ParameterTypeError, "cutoff must be a frequency or a 1-D sequence"),
        (
            lambda: nf.gaussian_kernel2d(5, np.array([1.0, 2.0, 3.0])),
            ParameterValueError,
            "sigma must be a number or a pair (sy, sx) of numbers, got a numpy.ndarray of shape (3,)",
        ),
        (lambda: nf.gaussian_kernel2d(5, "ab"), ParameterTypeError, "sigma must be a number or a pair"),
        # Complex and bool values are refused as tensors too, as they are as Python numbers: .double()
        # would drop the imaginary part with only a warning, and True would read as 1.
        (lambda: nf.firwin(31, 0.25 + 0j), ParameterTypeError, "cutoff must be a frequency"),
        (
            lambda: nf.firwin(31, torch.tensor([0.25 + 0j])),
            ParameterTypeError,
            "cutoff must be a frequency or a 1-D sequence of frequencies, got a tensor of shape (1,) "
            "and dtype torch.complex64",
        ),
        (
            lambda: nf.gammatone_bank(torch.tensor([440 + 0j]), fs=16000.0, numtaps=8),
            ParameterTypeError,
            "center_freqs must be a frequency",
        ),
        (lambda: nf.firwin(31, True), ParameterTypeError, "cutoff must be a frequency"),
        (lambda: nf.firwin(31, torch.tensor([True])), ParameterTypeError, "cutoff must be a frequency"),
        (lambda: nf.firwin(31, [Fraction(1, 4), True]), ParameterTypeError, "cutoff must be a frequency"),
        (lambda: nf.firwin(31, [10**400]), ParameterValueError, "(a value overflows float64)"),
        # Strings are refused, not parsed as numbers.
        (lambda: nf.firwin(31, ["0.3"]), ParameterTypeError, "cutoff must be a frequency or a 1-D sequence"),
        # A window parameter that the window does not take was ignored (scipy refuses it).
        (
            lambda: nf.get_window(("hamming", 5.0), 8),
            ParameterValueError,
            "window must be the name 'hamming' alone: hamming takes no parameter, got ('hamming', 5.0)",
        ),
        (
            lambda: nf.firwin(31, 0.3, window=("boxcar", 1.0)),
            ParameterValueError,
            "boxcar takes no parameter",
        ),
        # Two cutoffs made lowpass_taps a bandstop filter and highpass_taps a bandpass one, silently.
        (
            lambda: nf.lowpass_taps([1000.0, 2000.0], fs=16000.0, numtaps=31),
            ParameterValueError,
            "cutoff_hz must be one frequency in Hz (a number or a one-element tensor), got [1000.0, 2000.0]",
        ),
        (
            lambda: nf.highpass_taps(torch.tensor([1000.0, 2000.0]), fs=16000.0, numtaps=31),
            ParameterValueError,
            "cutoff_hz must be one frequency in Hz",
        ),
        (
            lambda: nf.bandpass_taps(3400.0, 300.0, fs=16000.0, numtaps=31),
            ParameterValueError,
            "high_hz must be greater than low_hz=3400, got 300.0",
        ),
        # An integer dtype truncated the taps to zeros; other bad dtypes and devices were torch's errors.
        (
            lambda: nf.firwin(31, 0.3, dtype=torch.int64),
            ParameterTypeError,
            "dtype must be a floating torch dtype (torch.float16, torch.bfloat16, torch.float32 or "
            "torch.float64), got torch.int64",
        ),
        (
            lambda: nf.gaussian_kernel1d(5, 1.0, dtype=np.float32),
            ParameterTypeError,
            "got <class 'numpy.float32'>",
        ),
        (
            lambda: nf.sobel_kernels(dtype="float32"),
            ParameterTypeError,
            "dtype must be a floating torch dtype",
        ),
        (
            lambda: nf.box_kernel(3, dtype=torch.int32),
            ParameterTypeError,
            "dtype must be a floating torch dtype",
        ),
        (
            lambda: nf.erb_space(100.0, 1000.0, 4, device="gpu0"),
            ParameterValueError,
            "device must be a torch.device or a device string such as 'cpu' or 'cuda:0', got 'gpu0'",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_design_errors(call, error, message):
    with pytest.raises(error, match=None) as info:
        call()
    assert message in str(info.value)


# ---------------------------------------------------------------------------------------------
# autograd through the design parameters


def _grad(value, dtype=torch.float64):
    return torch.tensor(value, dtype=dtype, requires_grad=True)


GRAD_CASES = {
    "firwin-lowpass": (lambda c: nf.firwin(31, c, scale=False), [0.3]),
    "firwin-bandpass": (lambda c: nf.firwin(31, c, pass_zero=False), [[0.2, 0.5]]),
    "firwin-bandstop-kaiser": (
        lambda c: nf.firwin(31, c, pass_zero="bandstop", window=("kaiser", 8.6)),
        [[0.25, 0.6]],
    ),
    "firwin-width": (lambda c: nf.firwin(40, c, width=0.05, fs=2.0), [0.4]),
    "lowpass_taps": (lambda c: nf.lowpass_taps(c, fs=16000.0, numtaps=63), [1000.0]),
    "highpass_taps": (lambda c: nf.highpass_taps(c, fs=16000.0, numtaps=63), [2000.0]),
    # One edge a tensor, the other a number: the list is differentiable in the tensor.
    "bandpass_taps-low": (lambda lo: nf.bandpass_taps(lo, 3400.0, fs=16000.0, numtaps=64), [300.0]),
    "bandstop_taps": (lambda lo, hi: nf.bandstop_taps(lo, hi, fs=16000.0, numtaps=65), [300.0, 3400.0]),
    "gammatone_bank": (lambda f: nf.gammatone_bank(f, fs=16000.0, numtaps=32), [[440.0, 1000.0]]),
    "gaussian_kernel1d": (lambda s: nf.gaussian_kernel1d(5, s), [1.7]),
    "gaussian_kernel1d-even": (lambda s: nf.gaussian_kernel1d(4, s), [0.9]),
    "gaussian_kernel2d-tensor": (lambda s: nf.gaussian_kernel2d((5, 3), s), [[1.7, 0.8]]),
    "gaussian_kernel2d-pair": (lambda sy, sx: nf.gaussian_kernel2d((5, 3), (sy, sx)), [1.7, 0.8]),
    "gaussian_kernel2d-one": (lambda s: nf.gaussian_kernel2d(5, s), [1.2]),
    "gabor_kernels": (
        lambda sigma, thetas, wavelength, gamma, psi: nf.gabor_kernels(
            5, sigma=sigma, thetas=thetas, wavelength=wavelength, gamma=gamma, psi=psi
        ),
        [2.0, [0.0, 1.0], 4.0, 0.5, 0.3],
    ),
}


@pytest.mark.parametrize("case", list(GRAD_CASES))
def test_design_is_differentiable_in_its_parameters(case):
    """A parameter given as a tensor that requires grad stays in the graph (it used to be read as numbers
    and detached: the taps came back without a graph and the parameter got no gradient): float64
    gradcheck, and the values are those of the same design from plain numbers."""
    fn, values = GRAD_CASES[case]
    params = [_grad(v) for v in values]
    out = fn(*params)
    assert out.requires_grad
    assert torch.autograd.gradcheck(fn, params)
    assert_close(out.detach(), fn(*values), atol=1e-15, rtol=1e-14)


def test_lowpass_scale_removes_the_dc_gradient():
    # With scale=True the taps sum to 1 whatever the cutoff: the DC gain's gradient is zero, but the taps'
    # is not.
    c = _grad(1000.0)
    taps = nf.lowpass_taps(c, fs=16000.0, numtaps=63)
    (dc,) = torch.autograd.grad(taps.sum(), c, retain_graph=True)
    (one,) = torch.autograd.grad(taps[31], c)
    assert abs(dc.item()) < 1e-15 and abs(one.item()) > 1e-6


def test_gradient_descent_finds_a_cutoff():
    """What a learnable front end does: fit the cutoff of a lowpass to a target design by gradient descent
    (Adam on the taps' squared error), from 1400 Hz to the target's 1000 Hz."""
    target = nf.lowpass_taps(1000.0, fs=16000.0, numtaps=63)
    cutoff = _grad(1400.0)
    opt = torch.optim.Adam([cutoff], lr=10.0)
    for _ in range(200):
        opt.zero_grad()
        loss = (nf.lowpass_taps(cutoff, fs=16000.0, numtaps=63) - target).pow(2).sum()
        loss.backward()
        opt.step()
    assert abs(cutoff.item() - 1000.0) < 2.0


def test_differentiable_design_keeps_device_and_dtype():
    s = _grad(1.5, torch.float32)
    g = nf.gaussian_kernel1d(7, s, dtype=torch.float32)
    assert g.dtype == torch.float32 and g.device.type == "cpu"
    g[3].backward()
    assert s.grad is not None and s.grad.item() < 0  # a wider Gaussian has a lower peak


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda g: nf.firwin(31, 0.3, fs=g(2.0)), "fs"),
        (lambda g: nf.firwin(31, 0.3, width=g(0.05)), "width"),
        (lambda g: nf.firwin(31, 0.3, window=("kaiser", g(8.0))), "window parameter"),
        (lambda g: nf.get_window(("gaussian", g(2.0)), 7), "window parameter"),
        (lambda g: nf.lowpass_taps(1000.0, fs=g(16000.0), numtaps=31), "fs"),
        (lambda g: nf.bandpass_taps(300.0, 3400.0, fs=g(16000.0), numtaps=31), "fs"),
        (lambda g: nf.highpass_taps(1000.0, fs=16000.0, numtaps=31, width_hz=g(300.0)), "width"),
        (lambda g: nf.gammatone_bank([440.0], fs=g(16000.0), numtaps=8), "fs"),
        (lambda g: nf.erb_space(g(50.0), 8000.0, 4), "f_min"),
        (lambda g: nf.erb_space(50.0, g(8000.0), 4), "f_max"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_design_constants_refuse_a_tensor_that_requires_grad(call, name):
    """Parameters the design cannot differentiate refuse a tensor that requires grad, as gaussian_blur2d
    refuses such a sigma, instead of reading its value and cutting it from the graph."""
    with pytest.raises(ParameterValueError) as info:
        call(_grad)
    assert f"{name} must be a real number, not a tensor that requires grad" in str(info.value)
    assert "no gradient could reach it" in str(info.value)


def test_design_parameter_tensors_are_checked():
    with pytest.raises(ParameterValueError, match="sigma must be a real number or a one-element real tensor"):
        nf.gaussian_kernel1d(5, _grad([1.0, 2.0]))
    with pytest.raises(ParameterTypeError, match="sigma must be a real number or a one-element real tensor"):
        nf.gaussian_kernel1d(5, torch.tensor(1.0 + 0j))
    with pytest.raises(ParameterValueError, match="sigma must be a finite number > 0"):
        nf.gaussian_kernel1d(5, _grad(-1.0))
    with pytest.raises(ParameterValueError, match="cutoff must be strictly increasing"):
        nf.firwin(31, [_grad(0.5), 0.2], pass_zero=False)
    with pytest.raises(ParameterValueError, match="thetas must be a non-empty sequence"):
        nf.gabor_kernels(5, sigma=1.0, thetas=_grad([[0.0, 1.0]]), wavelength=3.0)
    # A one-element tensor that does not require grad is a number like any other.
    assert torch.equal(nf.gaussian_kernel1d(5, torch.tensor(1.5)), nf.gaussian_kernel1d(5, 1.5))


@pytest.mark.parametrize(("k", "sigma"), [(4, 0.01), (6, 0.05), (5, 1e-170), (4, 1e-170), (4, 0.3)])
def test_gaussian_kernel_small_sigma_is_kornias_impulse_limit(k, sigma):
    """An even size at sigma = 0.01 underflowed every tap to 0 and returned 0/0 = NaN (and so did
    gaussian_blur2d); kornia returns the limit, the centre taps' impulse, and so do we now."""
    kornia = suite_dependency("kornia")
    ours = nf.gaussian_kernel1d(k, sigma)
    assert torch.isfinite(ours).all() and ours.sum().item() == pytest.approx(1.0, abs=1e-15)
    assert_close(ours, kornia.filters.kernels.gaussian(k, sigma, dtype=torch.float64).reshape(-1), atol=1e-15)
    s = _grad(sigma)
    nf.gaussian_kernel1d(k, s)[k // 2].backward()
    assert torch.isfinite(s.grad)
    img = torch.rand(1, 2, 9, 9, dtype=torch.float64)
    assert torch.isfinite(nf.gaussian_blur2d(img, (k, 3), (sigma, 1.0), backend="torch")).all()


def test_gaussian_window_needs_a_positive_std():
    # std = 0 made a NaN centre tap (scipy returns it with a warning): refused, also through firwin.
    for call in (
        lambda: nf.get_window(("gaussian", 0.0), 5),
        lambda: nf.firwin(31, 0.3, window=("gaussian", 0)),
    ):
        with pytest.raises(ParameterValueError, match="window parameter must be > 0 for 'gaussian'"):
            call()
