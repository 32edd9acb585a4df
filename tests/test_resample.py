"""resample against torchaudio.functional.resample (≤ 1e-5 relative) for both sinc methods."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import nbxsig.filters as nf
from nbxsig.errors import ParameterTypeError, ParameterValueError
from nbxsig.reference import depthwise as rd
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


NON_FINITE_CASES = [((16000, 24000), "sinc_interp_hann"), ((44100, 16000), "sinc_interp_kaiser")]


def _non_finite_case(rates, method, generator, device, monkeypatch):
    """Both Triton kernels on batched, strided signals holding inf, -inf and NaN samples in different rows,
    against the compact bank they apply (its float32 taps) summed in float64 over each output's window."""
    from nbxsig.kernels import depthwise as dk

    base = random_tensor((2, 2, 2 * 301), generator=generator, dtype=torch.float64)
    x = base[..., ::2]  # (2, 2, 301), sample stride 2
    x[0, 0, 150], x[0, 1, 7], x[1, 1, 200] = torch.inf, -torch.inf, torch.nan
    orig, new = (r // math.gcd(*rates) for r in rates)
    _, width, compact, offsets = nf._polyphase(orig, new, 6, 0.99, method, None)
    bank = rd.CompactBank(taps=compact.float().double(), offsets=offsets, width=width)
    ref = rd.resample(x.reshape(4, -1), orig=orig, new=new, kernel=bank, width=width).view(2, 2, -1)
    for tile in (dk._RESAMPLE_TILE, None):
        monkeypatch.setattr(dk, "_RESAMPLE_TILE", tile)
        y = nf.resample(base.float().to(device)[..., ::2], *rates, resampling_method=method, backend="triton")
        assert_close(y, ref, dtype=torch.float32, atol=1e-5, msg=f"tile {tile}")


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the interpreter's 0·inf
@pytest.mark.parametrize(("rates", "method"), NON_FINITE_CASES, ids=_ids)
def test_triton_keeps_a_non_finite_sample_within_its_reach(rates, method, generator, device, monkeypatch):
    """A non-finite sample reaches the outputs whose window holds it, in both kernels: the tensor-core
    one made NaN of it (0·inf) through its phase blocks' zeros in every phase of the frames it is in;
    a tile holding a non-finite output is now summed again over each phase's window. torchaudio's
    pattern is wider: beyond each phase's window its full bank holds the window's end
    (sin(lowpass_filter_width·π) in floating point: < 1e-15, not 0), so there every output whose
    ``2·width + orig`` columns hold the sample is ±inf (NaN from the torch backend on float32 input with
    the Hann window, whose end rounds to 0 in float32).
    The Triton kernels apply only the windows, as the torch backend's compact path does."""
    _non_finite_case(rates, method, generator, device, monkeypatch)


def test_identity_returns_input():
    x = torch.randn(2, 100)
    assert nf.resample(x, 16000, 16000) is x
    assert nf.resample(x, 16000, 16000.0) is x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_module_takes_torchaudios_dtype_keyword(dtype, generator, AF):
    # torchaudio.transforms.Resample(..., dtype=...) (its kernel's dtype) raised a TypeError here; the bank
    # is float64 whatever it says, applied in the waveform's dtype.
    x = random_tensor((2, 300), generator=generator, dtype=dtype)
    y = nf.Resample(44100, 16000, "sinc_interp_kaiser", dtype=dtype)(x)
    assert y.dtype == dtype
    ref = AF.resample(x.double(), 44100, 16000, resampling_method="sinc_interp_kaiser")
    assert_close(y, ref, dtype=dtype)
    with pytest.raises(ParameterTypeError, match="dtype must be None or a floating torch dtype"):
        nf.Resample(44100, 16000, dtype=torch.int16)


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((44100, 16000), {}),
        ((16000, 44100, "sinc_interp_kaiser"), {"beta": 8.0, "lowpass_filter_width": 4, "rolloff": 0.9}),
        ((48000, 22050), {"dtype": torch.float64}),
        ((22050, 16000, "sinc_interp_kaiser"), {"dtype": torch.float32}),
        ((16000, 16000), {}),
    ],
    ids=lambda v: (
        "-".join(map(str, v)) if isinstance(v, tuple) else ",".join(f"{k}={x}" for k, x in v.items())
    ),
)
def test_module_loads_torchaudios_state_dict_strictly(args, kwargs, generator):
    # torchaudio's Resample holds its bank as a persistent buffer "kernel"; this module holds none, so a
    # torchaudio checkpoint did not load strictly ("Unexpected key(s) in state_dict: kernel"). Its kernel is
    # checked against the bank built from the arguments, then dropped; nested under a prefix as well.
    TA = pytest.importorskip("torchaudio.transforms")
    theirs = TA.Resample(*args, **kwargs)
    ours = nf.Resample(*args, **kwargs)
    ours.load_state_dict(theirs.state_dict(), strict=True)
    assert list(ours.state_dict()) == []
    dtype = kwargs.get("dtype") or torch.float32
    x = random_tensor((2, 300), generator=generator, dtype=dtype)
    # (torchaudio's float32 kernel holds its taps' positions rounded to float32: ~5e-6 off the float64 bank)
    tol = {} if dtype == torch.float64 else {"atol": 1e-5, "rtol": 1e-4, "rel_error": 1e-5}
    assert_close(ours(x), theirs(x), dtype=dtype, **tol)
    nested = torch.nn.Sequential(torch.nn.Identity(), TA.Resample(*args, **kwargs))
    torch.nn.Sequential(torch.nn.Identity(), ours).load_state_dict(nested.state_dict(), strict=True)


def test_module_refuses_a_torchaudio_kernel_it_cannot_apply():
    # A kernel that is not the one these arguments build would be dropped silently, and the outputs would
    # then differ from the checkpoint's module: refused, naming the key.
    TA = pytest.importorskip("torchaudio.transforms")
    message = "kernel must be torchaudio's kernel for Resample(44100, 16000, 'sinc_interp_hann'"
    why = "builds its polyphase bank from the constructor arguments and cannot apply a different kernel"
    for dtype in (None, torch.float64):
        kernel = TA.Resample(44100, 16000, dtype=dtype).kernel
        for edited in (kernel * 1.01, kernel.clone().index_fill_(2, torch.tensor([0]), 1e-3)):
            with pytest.raises(ParameterValueError) as info:
                nf.Resample(44100, 16000).load_state_dict({"kernel": edited})
            assert message in str(info.value) and why in str(info.value)
    # Another rate pair's or filter width's kernel: a different shape.
    for other in (TA.Resample(48000, 16000), TA.Resample(44100, 16000, lowpass_filter_width=4)):
        with pytest.raises(ParameterValueError, match=r"kernel of shape \(160, 1, 475\)"):
            nf.Resample(44100, 16000).load_state_dict(other.state_dict())
    # The same shape with other values (another window), nested: the message names the key.
    nested = torch.nn.Sequential(TA.Resample(44100, 16000, "sinc_interp_kaiser"))
    with pytest.raises(ParameterValueError, match=r"^0\.kernel must be torchaudio's kernel for Resample"):
        torch.nn.Sequential(nf.Resample(44100, 16000)).load_state_dict(nested.state_dict())


@pytest.mark.parametrize("bank", ["full", "compact"])
def test_triton_gradient_matches_torch(bank, generator, device, monkeypatch):
    # The Triton path's backward runs the torch reference on the bank it was given: torchaudio's full
    # bank, or (forced here for a small pair) the compact one.
    if bank == "compact":
        monkeypatch.setattr(nf, "_FULL_BANK_MAX", 0)
    _clear_bank_caches()
    try:
        x = random_tensor((2, 120), generator=generator, dtype=torch.float64)
        g = random_tensor((2, 44), generator=generator, dtype=torch.float64)
        xr = x.clone().requires_grad_()
        nf.resample(xr, 44100, 16000, backend="torch").backward(g)
        xt = x.float().to(device).requires_grad_()
        nf.resample(xt, 44100, 16000, backend="triton").backward(g.float().to(device))
        assert_close(xt.grad, xr.grad, dtype=torch.float32, atol=1e-5)
    finally:
        _clear_bank_caches()  # banks built under the patched limit must not serve later tests


def test_gradient_after_a_call_under_inference_mode(generator, AF):
    # The cached bank made by a first call under torch.inference_mode was an inference tensor: a later
    # float64 call with gradients (the bank is applied as it is) raised "Inference tensors cannot be saved
    # for backward".
    _clear_bank_caches()
    x = random_tensor((2, 120), generator=generator, dtype=torch.float64)
    with torch.inference_mode():
        nf.resample(x, 3, 2, backend="torch")
    xr, ref_x = x.clone().requires_grad_(), x.clone().requires_grad_()
    nf.resample(xr, 3, 2, backend="torch").sum().backward()
    AF.resample(ref_x, 3, 2).sum().backward()
    assert_close(xr.grad, ref_x.grad, atol=1e-12, rtol=1e-9)


def test_triton_second_derivative_matches_torch(generator, device):
    # The Triton backward's gradient carried no graph under create_graph=True: a second derivative lost
    # every term through it silently (half the true value here).
    x = random_tensor((2, 60), generator=generator, dtype=torch.float64)
    results = {}
    for backend, dtype in (("torch", torch.float64), ("triton", torch.float32)):
        xx = x.to(dtype).to(device).requires_grad_()
        a = torch.tensor(1.5, dtype=dtype, device=device, requires_grad=True)
        y = nf.resample(xx * a, 3, 2, backend=backend)
        (gx,) = torch.autograd.grad(y.square().sum(), xx, create_graph=True)
        results[backend] = torch.autograd.grad(gx.square().sum(), a)[0]
    assert_close(results["triton"], results["torch"], dtype=torch.float32)


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


def _direct_resample(
    x, orig, new, outputs, *, lowpass_filter_width=6, rolloff=0.99, method="sinc_interp_hann"
):
    """torchaudio's definition evaluated directly in float64 at the output indices ``outputs``:
    ``y[j] = Σ_i x[i] · h(i/orig - j/new)`` over the whole signal (``x`` (B, L), rates reduced), with ``h``
    the windowed sinc of ``_get_sinc_resample_kernel`` (clamped to ±lowpass_filter_width zero crossings,
    scaled by base/orig). No bank is built."""
    g = math.gcd(orig, new)
    orig, new = orig // g, new // g
    base = min(orig, new) * rolloff
    i = torch.arange(x.shape[-1], dtype=torch.float64)
    out = []
    for j in outputs:
        t = ((i / orig - j / new) * base).clamp(-lowpass_filter_width, lowpass_filter_width)
        if method == "sinc_interp_hann":
            window = torch.cos(t * math.pi / lowpass_filter_width / 2) ** 2
        else:
            beta = torch.tensor(14.769656459379492, dtype=torch.float32)  # torchaudio's float32 beta
            window = torch.i0(beta * torch.sqrt(1 - (t / lowpass_filter_width) ** 2)) / torch.i0(beta)
        sinc = torch.where(t == 0, 1.0, torch.sin(math.pi * t) / (math.pi * t))
        out.append((x.double() * (sinc * window * base / orig)).sum(-1))
    return torch.stack(out, -1)


def _clear_bank_caches():
    nf._polyphase_small.cache_clear()
    nf._polyphase_large.cache_clear()


@pytest.mark.parametrize(
    ("rates", "method"),
    [
        ((44100, 44101), "sinc_interp_hann"),
        ((48000, 47999), "sinc_interp_hann"),
        ((44101, 44100), "sinc_interp_kaiser"),
    ],
    ids=str,
)
def test_large_coprime_rates_use_the_compact_bank(rates, method, generator, monkeypatch):
    """44100 → 44101 reduces to 44101 phases: torchaudio's full bank (new, 2·width + orig) would be
    44101 × 44114 float64, 15.5 GB. Only the per-phase windows (new, ~13) may be built, on both backends,
    and the result is torchaudio's definition (evaluated directly, without a bank)."""

    def no_full_bank(*args, **kwargs):
        raise AssertionError(f"the full polyphase bank was built for {args}")

    monkeypatch.setattr(nf, "sinc_resample_kernel", no_full_bank)
    _clear_bank_caches()
    x = random_tensor((2, 1200), generator=generator, dtype=torch.float64)
    y = nf.resample(x, *rates, resampling_method=method, backend="torch")
    n_out = -(-rates[1] * 1200 // rates[0])
    assert y.shape == (2, n_out)
    # Both edges (the zero padding), the middle, and every phase's neighbourhood near the end.
    picks = [0, 1, 2, 7, 600, 601, n_out // 2, n_out - 3, n_out - 2, n_out - 1]
    ref = _direct_resample(x, *rates, picks, method=method)
    assert_close(y[:, picks], ref)
    # The cached banks are the compact ones: a few MB, not GB.
    kernel, _, compact, offsets = nf._polyphase(*rates, 6, 0.99, method, None)
    assert isinstance(kernel, rd.CompactBank) and kernel.taps is compact
    assert compact.shape[0] == rates[1] and compact.shape[1] <= 16
    assert compact.nbytes + offsets.nbytes < 8 * 2**20
    # The Triton kernel reads the same compact bank (the per-output form: the interpreter runs it fast).
    from nbxsig.kernels import depthwise as dk

    monkeypatch.setattr(dk, "_RESAMPLE_TILE", None)
    yt = nf.resample(x.float(), *rates, resampling_method=method, backend="triton")
    assert_close(yt, y, dtype=torch.float32, atol=1e-5)


def test_compact_bank_is_torchaudios_bank_gathered():
    """The directly built windows are exactly the full bank's columns first[p] .. first[p] + J - 1 (same
    float64 operations on the same positions), for both methods and unbalanced ratios."""
    for orig, new in [(160, 441), (441, 160), (48, 1), (1000, 1013), (7, 300), (1, 2)]:
        for method, lpw, rolloff, beta in [
            ("sinc_interp_hann", 6, 0.99, None),
            ("sinc_interp_kaiser", 4, 0.9, 8.0),
        ]:
            kw = dict(lowpass_filter_width=lpw, rolloff=rolloff, method=method, beta=beta)
            full, width = rd.sinc_resample_kernel(orig, new, **kw)
            bank = rd.compact_resample_bank(orig, new, **kw)
            assert bank.width == width
            cols = (bank.offsets.long() + width)[:, None] + torch.arange(bank.taps.shape[1])
            k = full.shape[1]
            gathered = torch.where(cols < k, full.gather(1, cols.clamp(max=k - 1)), 0.0)
            assert torch.equal(bank.taps, gathered), (orig, new, method)
            # Outside the kept columns the full bank holds only the window's end (< 1e-15).
            outside = torch.ones_like(full, dtype=torch.bool).scatter_(1, cols.clamp(max=k - 1), False)
            if outside.any():
                assert full[outside].abs().max().item() < 1e-15


@pytest.mark.parametrize("rates", [(44100, 16000), (16000, 44100), (1000, 1013)], ids=_ids)
def test_compact_torch_path_is_torchaudio(rates, generator, AF, monkeypatch):
    """The torch path on the compact bank (forced at ordinary rates, with the gather split into several
    chunks) gives torchaudio's values and gradients."""
    monkeypatch.setattr(nf, "_FULL_BANK_MAX", 0)
    monkeypatch.setattr(rd, "_GATHER_ELEMENTS", 500)
    _clear_bank_caches()
    try:
        x = random_tensor((2, 3, 301), generator=generator, dtype=torch.float64)
        orig, new = (r // math.gcd(*rates) for r in rates)
        assert isinstance(nf._polyphase(orig, new, 6, 0.99, "sinc_interp_hann", None)[0], rd.CompactBank)
        xr = x.clone().requires_grad_()
        y = nf.resample(xr, *rates, backend="torch")
        ref_x = x.clone().requires_grad_()
        ref = AF.resample(ref_x, *rates)
        assert y.shape == ref.shape
        assert_close(y, ref, atol=1e-12, rtol=1e-9)
        g = random_tensor(y.shape, generator=generator, dtype=torch.float64)
        y.backward(g)
        ref.backward(g)
        assert_close(xr.grad, ref_x.grad, atol=1e-12, rtol=1e-9)
    finally:
        _clear_bank_caches()  # the banks built under the patched limit must not serve later tests


@pytest.mark.parametrize(
    "kwargs",
    [
        {"orig_freq": 10**7, "new_freq": 10**7 + 1},
        {"orig_freq": 2**40 + 1, "new_freq": 3},
        {"orig_freq": 44100, "new_freq": 16000, "rolloff": 1e-9},
        {"orig_freq": 44100, "new_freq": 16000, "rolloff": 5e-324},
        {"orig_freq": 44100, "new_freq": 16000, "lowpass_filter_width": 10**400},
    ],
    ids=lambda kw: "-".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in kw.items())[
        :60
    ],
)
def test_banks_too_large_are_refused_before_anything_is_built(kwargs, monkeypatch):
    def nothing_built(*args, **kw):
        raise AssertionError("a bank was built")

    monkeypatch.setattr(nf, "compact_resample_bank", nothing_built)
    monkeypatch.setattr(nf, "sinc_resample_kernel", nothing_built)
    _clear_bank_caches()
    message = "(orig_freq, new_freq) must be rates whose polyphase bank fits in 16777216 taps"
    args = {"orig_freq": 16000, "new_freq": 8000, **kwargs}
    with pytest.raises(ParameterValueError) as info:
        nf.resample(torch.randn(100), **args)
    assert message in str(info.value) and "phases" in str(info.value)
    # The module checks when it is built, not at its first call.
    with pytest.raises(ParameterValueError, match="polyphase bank fits"):
        nf.Resample(**args)


def test_bank_caches_are_bounded():
    """What the caches keep stays bounded: 32 full banks of at most 8 MiB, two large compact ones."""
    assert nf._polyphase_small.cache_info().maxsize == 32 and nf._FULL_BANK_MAX * 8 <= 8 * 2**20
    assert nf._polyphase_large.cache_info().maxsize == 2 and nf._COMPACT_BANK_MAX * 8 <= 128 * 2**20


@pytest.mark.gpu
@pytest.mark.parametrize("rates", [(44100, 16000), (16000, 44100), (48000, 22050)], ids=_ids)
def test_gpu_resample_bench_shape(rates, generator, cuda_device):
    x = random_tensor((8, rates[0] * 2), generator=generator).to(cuda_device)
    ref = nf.resample(x.double(), *rates, backend="torch")  # == torchaudio (checked on the CPU above)
    assert_close(nf.resample(x, *rates, backend="triton"), ref, atol=1e-5, rtol=1e-4, rel_error=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("rates", [(44100, 44101), (48000, 47999)], ids=_ids)
def test_gpu_large_coprime_rates(rates, generator, cuda_device):
    """The compact bank on the GPU: the torch path's gather in float64 against the directly evaluated
    definition, and the default tensor-core kernel (44101 phases in blocks of 32) against it."""
    x = random_tensor((4, 2 * rates[0]), generator=generator)
    y64 = nf.resample(x.double().to(cuda_device), *rates, backend="torch")
    picks = [0, 1, 1000, y64.shape[-1] // 2, y64.shape[-1] - 1]
    assert_close(y64[:, picks].cpu(), _direct_resample(x, *rates, picks))
    y = nf.resample(x.to(cuda_device), *rates, backend="triton")
    assert_close(y, y64, dtype=torch.float32, atol=1e-5, rtol=1e-4, rel_error=1e-5)


@pytest.mark.gpu
def test_gpu_resample_keeps_a_non_finite_sample_within_its_reach(generator, cuda_device, monkeypatch):
    # The CPU test's cases (make gpu-test runs only the gpu-marked tests), through tf32x3.
    for rates, method in NON_FINITE_CASES:
        _non_finite_case(rates, method, generator, cuda_device, monkeypatch)


def test_device_forms_of_large_banks_are_not_kept_alive():
    # The kernel layer caches device forms per bank; a large bank's (over 2^20 taps) must not outlive
    # the host cache's last two, or resampling many large coprime pairs grows memory without bound.
    import gc
    import weakref

    from nbxsig.kernels import depthwise as kd

    kd._device_bank_large.cache_clear()
    kd._phase_blocks_large.cache_clear()
    rows = kd._LARGE_BANK // 8 + 1
    offsets = torch.arange(rows, dtype=torch.int32)
    first = torch.rand(rows, 8, dtype=torch.float64)
    alive = weakref.ref(first)
    kd._device_bank(first, offsets, torch.device("cpu"))
    kd._phase_blocks(first, offsets, 32, 16, torch.device("cpu"))
    del first
    for _ in range(2):
        bank = torch.rand(rows, 8, dtype=torch.float64)
        kd._device_bank(bank, offsets, torch.device("cpu"))
        kd._phase_blocks(bank, offsets, 32, 16, torch.device("cpu"))
    del bank
    gc.collect()
    assert alive() is None
    assert kd._device_bank_large.cache_info().currsize == kd._phase_blocks_large.cache_info().currsize == 2
    small = torch.rand(64, 8, dtype=torch.float64)
    kd._device_bank(small, offsets[:64], torch.device("cpu"))
    assert kd._device_bank_large.cache_info().currsize == 2  # a small bank goes to the other cache
