"""The four-step DFT kernel (nbxsig.kernels.fourstep) vs float64 per-frame rfft oracles: power
spectrogram and (log-)mel for composite n_fft, the factorisation and the dispatch rules."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from test_features_gpu import whisper_oracle

import nbxsig.features as nf
import nbxsig.stft as S
from nbxsig.kernels import fourstep
from nbxsig.kernels import mel as kmel
from nbxsig.testing import assert_close, random_tensor

F64 = torch.float64


def stft_oracle(x, n_fft, hop, window, *, center=True, pad_mode="reflect", scale=1.0):
    """``scale · rfft(frame · w)`` per frame in float64: ``(B, L)`` → complex ``(B, F, T)``."""
    x = x.to("cpu", F64)
    if center:
        pad = n_fft // 2
        x = F.pad(x[:, None], (pad, pad), mode=pad_mode).squeeze(1)
    frames = x.unfold(-1, n_fft, hop)  # (B, T, n_fft)
    w = torch.ones(n_fft, dtype=F64) if window is None else window.to("cpu", F64)
    return (torch.fft.rfft(frames * w, dim=-1) * scale).transpose(1, 2)


def power_oracle(x, n_fft, hop, window, *, center=True, pad_mode="reflect", scale=1.0, power=2.0):
    """``|scale · rfft(frame · w)|^power`` per frame in float64: ``(B, L)`` → ``(B, F, T)``."""
    return stft_oracle(x, n_fft, hop, window, center=center, pad_mode=pad_mode, scale=scale).abs().pow(power)


def _window(kind, n_fft, win_length, generator):
    if kind is None:
        return None
    if kind == "hann":
        w = torch.hann_window(win_length, dtype=F64)
    else:
        w = random_tensor((win_length,), generator=generator, dtype=F64, low=0.1, high=1.0)
    full = torch.zeros(n_fft, dtype=F64)
    left = (n_fft - win_length) // 2
    full[left : left + win_length] = w
    return full


def _x(shape, generator, device, *, strided):
    if strided:  # a non-contiguous view: every other sample of a longer signal
        big = random_tensor((shape[0], 2 * shape[1]), generator=generator)
        return big.to(device)[:, ::2]
    return random_tensor(shape, generator=generator).to(device)


# ---------------------------------------------------------------- factorisation and dispatch


def test_plan_minimises_padded_work():
    # 400: 16 × 25 (padded 16 × 32) beats 20 × 20 (32 × 32) and 25 × 16 (32 × 16 with 32 k1 rows).
    assert fourstep.plan(400) == (16, 25)
    # Even N2: stage 2 stops at N2/2 (the Nyquist bin is a sum), so 16 × 32 (padded stage 2 N = 32)
    # ties 32 × 16 and comes first; the mel plan keeps N2/2 + 1 columns (16 × 32 would pad them to 32).
    assert fourstep.plan(512) == (16, 32) and fourstep.plan(512, mel=True) == (32, 16)
    assert fourstep.plan(48) == (6, 8)
    assert fourstep.plan(1000) == (20, 50) and fourstep.plan(2048) == (32, 64)
    for prime in (37, 401, 1021):
        assert fourstep.plan(prime) is None
    assert fourstep.plan(4096) is None  # the padded frame no longer fits in registers
    assert fourstep.plan(1016) is None  # 8 × 127: a 128-point factor's basis exceeds shared memory
    for n_fft in (12, 20, 24, 40, 48, 400, 512, 1000, 2048):
        for mel in (False, True):
            n1, n2 = fourstep.plan(n_fft, mel=mel)
            assert n1 * n2 == n_fft


def test_dispatch_rules(monkeypatch):
    def path(n_fft, *, device_type="cuda", onesided=True, precision="tf32x3"):
        return fourstep.spectrogram_path(
            device_type=device_type, n_fft=n_fft, onesided=onesided, precision=precision
        )

    # The measured rule (fp16 stages): 256, 400 and 512 at both precisions, 1000 at TF32 class only.
    for n_fft in (256, 400, 512):
        assert path(n_fft) == "fourstep" and path(n_fft, precision="tf32") == "fourstep"
    assert path(1000) == "fft" and path(1000, precision="tf32") == "fourstep"
    assert path(2048, precision="tf32") == "fft"
    assert path(400, onesided=False) == "fft"
    assert path(20, precision="tf32") == "fft"  # the dense range
    assert path(400, device_type="cpu") == "fft"  # the interpreter: tests call the launchers
    monkeypatch.setattr(fourstep, "SPECTROGRAM_AUTO", True)  # forced: wherever it is supported
    assert path(512) == "fourstep" and path(401) == "fft"
    monkeypatch.setattr(fourstep, "SPECTROGRAM_AUTO", False)
    assert path(400) == "fft"

    # The complex stft: its own switch and measured table -- 400 and 512 at both precisions, 1000 and
    # 2048 at TF32 class only (at fp32 class the FFT path measured 1.5-1.7× faster).
    def stft_path(n_fft, *, device_type="cuda", onesided=True, precision="tf32x3"):
        return fourstep.stft_path(
            device_type=device_type, n_fft=n_fft, onesided=onesided, precision=precision
        )

    for n_fft in (400, 512):
        assert stft_path(n_fft) == "fourstep" and stft_path(n_fft, precision="tf32") == "fourstep"
    assert stft_path(1000) == "fft" and stft_path(2048) == "fft"
    assert stft_path(1000, precision="tf32") == "fourstep" and stft_path(2048, precision="tf32") == "fourstep"
    assert stft_path(256, precision="tf32") == "fft"
    assert stft_path(400, onesided=False) == "fft" and stft_path(400, device_type="cpu") == "fft"
    monkeypatch.setattr(fourstep, "STFT_AUTO", True)
    assert stft_path(2048) == "fourstep" and stft_path(401) == "fft"
    assert stft_path(20) == "fft"  # the dense range
    monkeypatch.setattr(fourstep, "STFT_AUTO", False)
    assert stft_path(400) == "fft"
    # Mel: the four-step kernel is opt-in (measured slower than spectrogram + matmul).
    assert kmel.mel_path(device_type="cuda", n_fft=400) == "unfused"
    assert kmel.mel_path(device_type="cpu", n_fft=400) == "fused"
    monkeypatch.setattr(fourstep, "MEL_AUTO", True)
    assert kmel.mel_path(device_type="cuda", n_fft=400) == "fourstep"
    assert kmel.mel_path(device_type="cuda", n_fft=401) == "unfused"

    # The stages' operand format: fp16 for the TF32 classes, TF32 with the mel epilogue.
    assert fourstep.stage_precision("tf32") == "fp16" and fourstep.stage_precision("tf32x3") == "fp16x3"
    assert (
        fourstep.stage_precision("tf32x3", mel=True) == "tf32x3"
        and fourstep.stage_precision("ieee") == "ieee"
    )


# ---------------------------------------------------------------- power spectrogram

# Case keys that set launch options (``_config``).
CONFIG_KEYS = {"n1": "N1", "block_t": "BLOCK_T", "permute": "PERMUTE_STORE", "window_table": "WINDOW_TABLE"}


def _config(case: dict) -> dict | None:
    return {key: case[name] for name, key in CONFIG_KEYS.items() if name in case} or None


SPEC_CASES = [
    pytest.param(dict(n_fft=12, hop=3, window="hann", pad_mode="reflect"), id="n12-hop3-hann-reflect"),
    pytest.param(
        dict(n_fft=20, hop=7, window="random", pad_mode="constant", power=1.0), id="n20-rand-const-p1"
    ),
    pytest.param(dict(n_fft=24, hop=24, window=None, pad_mode="replicate"), id="n24-hop24-rect-replicate"),
    pytest.param(
        dict(n_fft=40, hop=10, window="hann", win_length=30, pad_mode="circular"), id="n40-win30-circ"
    ),
    pytest.param(dict(n_fft=48, hop=13, window="random", center=False, power=0.7), id="n48-nocenter-p0.7"),
    pytest.param(
        dict(n_fft=48, hop=50, window="hann", normalized=True, strided=True), id="n48-hop50-norm-strided"
    ),
    pytest.param(dict(n_fft=400, hop=160, window="hann", batch=3), id="n400-hop160-b3"),
    pytest.param(
        dict(n_fft=40, hop=10, window="random", length=1000, strided=True), id="n40-long-interior-tiles"
    ),
    pytest.param(dict(n_fft=48, hop=5, window="hann", length=700, pad_mode="circular"), id="n48-long-circ"),
    pytest.param(dict(n_fft=512, hop=128, window="random", pad_mode="constant"), id="n512-const"),
    # The window as one frame's table broadcast over the tile (the GPU's choice at TF32 for n_fft 400).
    pytest.param(
        dict(n_fft=400, hop=160, window="random", normalized=True, window_table=True), id="n400-window-table"
    ),
    pytest.param(dict(n_fft=48, hop=13, window=None, window_table=True, strided=True), id="n48-rect-table"),
]


@pytest.mark.parametrize("case", SPEC_CASES)
def test_spectrogram_matches_float64_rfft(case, device, generator):
    n_fft, hop = case["n_fft"], case["hop"]
    center, pad_mode = case.get("center", True), case.get("pad_mode", "reflect")
    power = case.get("power", 2.0)
    window = _window(case["window"], n_fft, case.get("win_length", n_fft), generator)
    scale = 1.0 / math.sqrt(n_fft) if case.get("normalized") else 1.0
    length = case.get("length", 3 * n_fft + 17)
    x = _x((case.get("batch", 2), length), generator, device, strided=case.get("strided", False))
    got = fourstep.spectrogram(
        x, n_fft=n_fft, hop=hop, window=None if window is None else window.float().to(device), center=center,
        pad_mode=pad_mode, scale=scale, power=power, _config=_config(case),
    )  # fmt: skip
    expected = power_oracle(x, n_fft, hop, window, center=center, pad_mode=pad_mode, scale=scale, power=power)
    assert got.shape == expected.shape and got.dtype == torch.float32
    assert_close(got, expected, dtype="float32", rel_error=2e-6)


@pytest.mark.parametrize("precision", ["tf32x3", "tf32", "fp16x3", "fp16"])
def test_spectrogram_split_precisions(precision, device, generator):
    # The GPU precisions' operand handling (hi/lo split, rounding to nearest, the frame scaling); the
    # interpreter's fp32 dots then compute them exactly, so the bounds are the TF32 ones.
    x = random_tensor((2, 1500), generator=generator).to(device)
    window = torch.hann_window(400, dtype=F64)
    got = fourstep.spectrogram(
        x, n_fft=400, hop=160, window=window.float().to(device), center=True, pad_mode="reflect",
        scale=1.0, power=2.0, _precision=precision,
    )  # fmt: skip
    expected = power_oracle(x, 400, 160, window)
    if precision.endswith("x3"):
        assert_close(got, expected, dtype="float32", rel_error=2e-6)
    else:
        assert_close(got, expected, dtype="tf32", rel_error=1e-3)


def _levels(x: torch.Tensor, hop: int) -> torch.Tensor:
    """``x`` with its signals at very different levels, frame by frame: a loud one (3e4, so an
    unscaled stage-1 sum overflows fp16), one whose frames alternate between 1 and 1e-30 (fp16 would
    flush them to zero), one with a silent stretch (all-zero frames) between loud ones."""
    x = x.clone()
    x[0] *= 3e4
    gain = torch.where((torch.arange(x.shape[1]) // (3 * hop)) % 2 == 0, 1.0, 1e-30)
    x[1] *= gain
    x[2, x.shape[1] // 3 : 2 * x.shape[1] // 3] = 0.0
    return x


@pytest.mark.parametrize(
    "precision,n_fft,hop,power",
    [("fp16", 400, 160, 2.0), ("fp16x3", 400, 160, 2.0), ("fp16", 512, 128, 1.0), ("fp16x3", 48, 13, 0.7)],
)
def test_half_stages_scale_each_frame(precision, n_fft, hop, power, device, generator):
    # fp16 stage operands: each frame is scaled to its own peak, so every frame -- loud, 1e-30 quiet
    # or silent -- keeps the precision's relative error, measured frame by frame.
    x = _levels(random_tensor((3, 24 * hop + n_fft), generator=generator), hop).to(device)
    window = torch.hann_window(n_fft, dtype=F64)
    got = fourstep.spectrogram(
        x, n_fft=n_fft, hop=hop, window=window.float().to(device), center=True, pad_mode="reflect",
        scale=1.0, power=power, _precision=precision,
    )  # fmt: skip
    expected = power_oracle(x, n_fft, hop, window, power=power)
    bound = 2e-6 if precision == "fp16x3" else 1e-3
    errors = (got.double().cpu() - expected).norm(dim=1) / expected.norm(dim=1).clamp_min(1e-300)
    silent = expected.norm(dim=1) == 0
    assert silent[2].any() and (got.cpu()[:, :, :][silent.unsqueeze(1).expand_as(got)] == 0).all()
    worst = errors[~silent].max().item()
    assert worst <= bound, f"worst frame's relative error {worst:.2e} > {bound:.0e}"


@pytest.mark.parametrize("precision", ["fp16", "fp16x3"])
def test_half_stages_stft_and_nonfinite_frames(precision, device, generator):
    # The complex output (n_fft 512: the Nyquist bin from the frame sum) on a strided view, with one
    # sample inf: the frames holding it are non-finite and every other frame keeps its bound.
    x = _x((2, 3000), generator, device, strided=True)
    x = x.clone()
    x[1, 1500] = float("inf")
    window = torch.hann_window(512, dtype=F64)
    got = torch.view_as_complex(
        fourstep.stft(
            x, n_fft=512, hop=128, window=window.float().to(device), center=True, pad_mode="reflect",
            scale=1.0, _precision=precision,
        ).contiguous()
    ).cpu()  # fmt: skip
    expected = stft_oracle(x, 512, 128, window)
    touched = ~torch.isfinite(expected).all(dim=1)  # (B, T) frames that hold the inf
    assert touched[1].sum() == 4 and not touched[0].any()
    assert (~torch.isfinite(got).all(dim=1))[touched].all()
    assert torch.isfinite(got).all(dim=1)[~touched].all()
    keep = ~touched[1]
    for b, frames in ((0, slice(None)), (1, keep)):
        assert_close(
            got[b][:, frames], expected[b][:, frames], dtype="float32" if precision == "fp16x3" else "tf32",
            rel_error=2e-6 if precision == "fp16x3" else 1e-3,
        )  # fmt: skip


@pytest.mark.parametrize("window_table", [True, False], ids=["table", "per-element"])
def test_float64_window_read_as_its_float32_cast(window_table, device, generator):
    # The unfused mel path hands the kernel its padded float64 window (no float32 copy): the kernel's
    # fp32 load of it must give exactly what the float32 window gives.
    x = random_tensor((2, 1500), generator=generator).to(device)
    window = random_tensor((400,), generator=generator, dtype=F64, low=0.1, high=1.0).to(device)
    opts = dict(n_fft=400, hop=160, center=True, pad_mode="reflect", scale=1.0, power=2.0)
    opts.update(_precision="fp16x3", _config={"WINDOW_TABLE": window_table})
    wide = fourstep.spectrogram(x, window=window, **opts)
    narrow = fourstep.spectrogram(x, window=window.float(), **opts)
    torch.testing.assert_close(wide, narrow, rtol=0, atol=0)
    assert_close(wide, power_oracle(x, 400, 160, window), dtype="float32", rel_error=2e-6)


def test_half_stages_refuse_the_mel_epilogue(device, generator):
    x = random_tensor((1, 2000), generator=generator).to(device)
    window = torch.hann_window(400).to(device)
    filters = nf.mel_filterbank(201, 0.0, 8000.0, 80, 16000).to(device)
    with pytest.raises(ValueError, match="precision='fp16'"):
        kmel.mel_spectrogram(
            x, n_fft=400, hop_length=160, window=window, filters=filters, power=2.0, scale=1.0,
            center=True, pad_mode="reflect", _path="fourstep", _precision="fp16",
        )  # fmt: skip


def test_spectrogram_row_aligned_buffer(device, generator):
    # The mel projection's input: rows padded to 16 floats (a (B, T, 208) buffer behind the (B, 201, T)
    # view) hold the same values as the plain buffer.
    x = random_tensor((2, 2100), generator=generator).to(device)
    window = torch.hann_window(400, dtype=F64).float().to(device)
    opts = dict(n_fft=400, hop=160, window=window, center=True, pad_mode="reflect", scale=1.0, power=2.0)
    plain = fourstep.spectrogram(x, **opts)
    padded = fourstep.spectrogram(x, **opts, _row_align=16)
    assert padded.shape == plain.shape == (2, 201, 14)
    assert padded.stride() == (14 * 208, 1, 208)
    assert torch.equal(padded, plain)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_spectrogram_half_input(dtype, device, generator):
    # Upcast on load in both the interior tiles and the padded ones: the float64 oracle of the same
    # (rounded) samples.
    x = random_tensor((2, 3000), generator=generator, dtype=dtype).to(device)
    window = torch.hann_window(400, dtype=F64)
    got = fourstep.spectrogram(
        x, n_fft=400, hop=100, window=window.float().to(device), center=True, pad_mode="reflect",
        scale=1.0, power=2.0,
    )  # fmt: skip
    assert got.dtype == torch.float32
    assert_close(got, power_oracle(x, 400, 100, window), dtype="float32", rel_error=2e-6)


# ---------------------------------------------------------------- complex stft

STFT_CASES = [
    pytest.param(dict(n_fft=40, hop=10, window="hann", batch=3), id="n40-nyq-b3"),
    pytest.param(dict(n_fft=48, hop=13, window="random", center=False), id="n48-nocenter"),
    pytest.param(
        dict(n_fft=24, hop=7, window=None, pad_mode="constant", strided=True), id="n24-rect-const-strided"
    ),
    pytest.param(
        dict(n_fft=45, hop=9, window="hann", win_length=31, pad_mode="replicate"), id="n45-odd-win31-repl"
    ),
    pytest.param(
        dict(n_fft=40, hop=6, window="random", pad_mode="circular", normalized=True), id="n40-circ-norm"
    ),
    pytest.param(dict(n_fft=400, hop=160, window="hann", batch=3, strided=True), id="n400-b3-strided"),
    pytest.param(dict(n_fft=512, hop=128, window="random", pad_mode="constant"), id="n512-nyq-const"),
    pytest.param(dict(n_fft=1000, hop=250, window="hann", normalized=True), id="n1000-norm"),
    pytest.param(dict(n_fft=2048, hop=512, window="hann", center=False, length=5000), id="n2048-nocenter"),
    pytest.param(dict(n_fft=40, hop=10, window="random", length=1000, n1=8), id="n40-8x5-interior-tiles"),
    pytest.param(dict(n_fft=512, hop=100, window="hann", n1=32, block_t=4), id="n512-32x16-T4"),
    pytest.param(dict(n_fft=400, hop=160, window="hann", n1=25, block_t=16), id="n400-25x16-nyq-T16"),
    pytest.param(dict(n_fft=48, hop=5, window="random", length=700, permute=False), id="n48-k1-row-stores"),
    pytest.param(
        dict(n_fft=1000, hop=300, window="hann", batch=3, strided=True, permute=False),
        id="n1000-k1-row-stores",
    ),
    pytest.param(dict(n_fft=400, hop=160, window="hann", block_t=4, window_table=True), id="n400-wtable"),
]


@pytest.mark.parametrize("case", STFT_CASES)
def test_stft_matches_float64_rfft(case, device, generator):
    # The complex mode writes the interleaved (B, T, F, 2) buffer torch.stft's output views: the
    # result is its (B, F, T, 2) transpose, and view_as_complex of it is the complex spectrum.
    n_fft, hop = case["n_fft"], case["hop"]
    center, pad_mode = case.get("center", True), case.get("pad_mode", "reflect")
    window = _window(case["window"], n_fft, case.get("win_length", n_fft), generator)
    scale = 1.0 / math.sqrt(n_fft) if case.get("normalized") else 1.0
    length = case.get("length", 3 * n_fft + 17)
    x = _x((case.get("batch", 2), length), generator, device, strided=case.get("strided", False))
    got = fourstep.stft(
        x, n_fft=n_fft, hop=hop, window=None if window is None else window.float().to(device), center=center,
        pad_mode=pad_mode, scale=scale, _config=_config(case),
    )  # fmt: skip
    expected = stft_oracle(x, n_fft, hop, window, center=center, pad_mode=pad_mode, scale=scale)
    assert got.shape == (*expected.shape, 2) and got.dtype == torch.float32
    assert got.stride()[1] == 2 and got.stride()[3] == 1  # frequency-fastest, as torch.stft
    assert_close(torch.view_as_complex(got), expected, dtype="float32", rel_error=2e-6)


def test_stft_public_api_and_gradient(monkeypatch, device, generator):
    # nbxsig.stft through the four-step path (forced: the interpreter's auto path is the FFT one):
    # batched leading dims, both output forms, and the gradient (the shared backward) against the
    # torch backend in float64.
    calls = []
    real_stft = fourstep.stft
    monkeypatch.setattr(fourstep, "stft_path", lambda **kw: "fourstep")
    monkeypatch.setattr(fourstep, "stft", lambda *a, **kw: calls.append(1) or real_stft(*a, **kw))
    x = random_tensor((2, 3, 331), generator=generator)
    w = torch.hann_window(40, dtype=F64)
    opts = dict(window=w.float().to(device), normalized=True, pad_mode="constant", backend="triton")
    spec = S.stft(x.to(device), 40, 11, **opts)
    real = S.stft(x.to(device), 40, 11, return_complex=False, **opts)
    assert len(calls) == 2
    expected = S.stft(x.double(), 40, 11, window=w, normalized=True, pad_mode="constant", backend="torch")
    assert spec.shape == expected.shape == (2, 3, 21, 31) and spec.dtype == torch.complex64
    assert_close(spec, expected, dtype="float32", rel_error=2e-6)
    assert torch.equal(torch.view_as_complex(real), spec)
    grad = random_tensor((2, 3, 21, 31, 2), generator=generator)
    xg = x.to(device).clone().requires_grad_(True)
    S.stft(xg, 40, 11, return_complex=False, **opts).backward(grad.to(device))
    assert len(calls) == 3
    x64 = x.double().requires_grad_(True)
    S.stft(
        x64, 40, 11, window=w, normalized=True, pad_mode="constant", return_complex=False, backend="torch"
    ).backward(grad.double())
    assert_close(xg.grad, x64.grad, dtype="float32", rel_error=2e-6)


# ---------------------------------------------------------------- mel and log-mel

MEL_CASES = [
    pytest.param(dict(n_fft=400, hop=160, n_mels=80), id="n400-m80"),
    pytest.param(
        dict(n_fft=400, hop=160, n_mels=128, norm="slaney", mel_scale="slaney"), id="n400-m128-slaney"
    ),
    pytest.param(dict(n_fft=48, hop=12, n_mels=8, power=1.0, pad_mode="constant"), id="n48-m8-p1-const"),
    pytest.param(
        dict(n_fft=40, hop=9, n_mels=8, floor=1e-6, log="ln", center=False), id="n40-m8-ln-nocenter"
    ),
    pytest.param(
        dict(n_fft=24, hop=5, n_mels=5, floor=1e-8, log="log2", pad_mode="replicate"), id="n24-m5-log2"
    ),
    pytest.param(
        dict(n_fft=400, hop=160, n_mels=40, floor=1e-10, log="log10", normalized=True),
        id="n400-m40-log10-norm",
    ),
]


@pytest.mark.parametrize("case", MEL_CASES)
def test_mel_matches_float64(case, device, generator):
    n_fft, hop, n_mels = case["n_fft"], case["hop"], case["n_mels"]
    center, pad_mode, power = (
        case.get("center", True),
        case.get("pad_mode", "reflect"),
        case.get("power", 2.0),
    )
    floor, log = case.get("floor"), case.get("log")
    sr = 16000
    filters = nf.mel_filterbank(
        n_fft // 2 + 1, 0.0, sr / 2, n_mels, sr, case.get("norm"), case.get("mel_scale", "htk"), dtype=F64
    )
    window = torch.hann_window(n_fft, dtype=F64)
    scale = 1.0 / math.sqrt(n_fft) if case.get("normalized") else 1.0
    x = _x((2, 4 * n_fft + 5), generator, device, strided=True)
    got = kmel.mel_spectrogram(
        x, n_fft=n_fft, hop_length=hop, window=window.float().to(device), filters=filters.to(device),
        power=power, scale=scale, center=center, pad_mode=pad_mode, floor=floor, log=log, _path="fourstep",
    )  # fmt: skip
    spec = power_oracle(x, n_fft, hop, window, center=center, pad_mode=pad_mode, scale=scale, power=power)
    expected = (spec.transpose(1, 2) @ filters).transpose(1, 2)
    if floor is not None:
        expected = {"ln": torch.log, "log2": torch.log2, "log10": torch.log10}[log](expected.clamp(min=floor))
    assert got.shape == expected.shape
    assert_close(got, expected, dtype="float32", rel_error=2e-6, atol=1e-5 if log else None)


def test_whisper_and_half_input(device, generator):
    audio = 0.1 * random_tensor((2, 2000), generator=generator)
    audio[1] *= 1e-3  # a quiet clip: its own floor (per-example maximum)
    window = nf.prepare_window(None, 400, 400, device)
    filters = nf.mel_filterbank(201, 0.0, 8000.0, 80, 16000, "slaney", "slaney", dtype=F64, device=device)
    opts = dict(n_fft=400, hop_length=160, window=window, filters=filters, power=2.0, scale=1.0)
    opts.update(center=True, pad_mode="reflect", floor=1e-10, log="log10", drop_last=True, whisper=True)
    got = kmel.mel_spectrogram(audio.to(device), _path="fourstep", **opts)
    assert got.shape == (2, 80, 12)
    for i in range(2):
        assert_close(got[i], whisper_oracle(audio[i].double(), 80), atol=1e-5, rtol=1e-5)
    half = kmel.mel_spectrogram(audio.half().to(device), _path="fourstep", **opts)
    assert half.dtype == torch.float16
    assert_close(half, got, dtype=torch.float16)


def test_mel_gradient_matches_reference(device, generator):
    # The kernel stores nothing for autograd: _FusedMel recomputes the torch twin in backward.
    x = random_tensor((2, 1300), generator=generator)
    x[:, :300] = 0.0  # |X| = 0 frames: the gradient stays finite
    filters = nf.mel_filterbank(201, 0.0, 8000.0, 40, 16000, dtype=F64)
    window = torch.hann_window(400, dtype=F64)
    opts = dict(n_fft=400, hop_length=160, power=1.0, scale=1.0, center=True, pad_mode="reflect")
    gy = random_tensor((2, 40, 9), generator=generator)
    xg = x.to(device).clone().requires_grad_(True)
    out = kmel.mel_spectrogram(
        xg, window=window.float().to(device), filters=filters.to(device), _path="fourstep", **opts
    )
    out.backward(gy.to(device))
    x64 = x.double().requires_grad_(True)
    from nbxsig.reference import mel as ref

    ref.mel_spectrogram(x64, window=window, filters=filters, **opts).backward(gy.double())
    assert torch.isfinite(xg.grad).all()
    assert_close(xg.grad, x64.grad, dtype="float32", rel_error=1e-5)


def test_mel_tile_configs_agree(device, generator):
    # Each launch tile (16 and 32 frames) computes the same function. They are compared with the
    # float64 oracle, not with each other: single-pass TF32 rounds each stage's inputs, so a 1-ulp
    # difference in the order of a float32 sum can move one frame by a TF32 ulp (~1e-3).
    x = random_tensor((1, 5000), generator=generator).to(device)
    window = nf.prepare_window(None, 400, 400, device)
    filters = nf.mel_filterbank(201, 0.0, 8000.0, 80, 16000, dtype=F64, device=device)
    opts = dict(n_fft=400, hop_length=160, window=window, filters=filters, power=2.0, scale=1.0)
    opts.update(center=True, pad_mode="reflect", _path="fourstep")
    spec = power_oracle(x, 400, 160, window.to(F64))
    expected = (spec.transpose(1, 2) @ filters.cpu()).transpose(1, 2)
    # TF32 dots: a 32-frame tile needs more shared memory than an H200 has at 3xTF32.
    for block_t in (16, 32):
        got = kmel.mel_spectrogram(x, _config={"BLOCK_T": block_t}, _precision="tf32", **opts)
        assert_close(got, expected, dtype="tf32", rel_error=1e-3, msg=f"BLOCK_T={block_t}")


# ---------------------------------------------------------------- GPU, through the public API


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["highest", "high"])
@pytest.mark.parametrize("n_fft,hop", [(400, 160), (512, 128), (48, 12)])
def test_gpu_spectrogram_auto_path(precision, n_fft, hop, cuda_device, generator):
    x = random_tensor((3, 16000 * 2 + 77), generator=generator)
    window = torch.hann_window(n_fft, dtype=F64)
    expected = power_oracle(x, n_fft, hop, window)
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        got = S.spectrogram(
            x.to(cuda_device), n_fft, hop, window=window.float().to(cuda_device), backend="triton"
        )
    finally:
        torch.set_float32_matmul_precision(previous)
    if precision == "highest":
        assert_close(got, expected, dtype="float32", rel_error=2e-6)
    else:
        assert_close(got, expected, dtype="tf32", rel_error=1e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("pad_mode", ["reflect", "constant", "replicate", "circular"])
def test_gpu_pad_modes_and_strided(pad_mode, cuda_device, generator):
    x = _x((2, 9001), generator, cuda_device, strided=True)
    window = torch.hann_window(400, dtype=F64)
    got = fourstep.spectrogram(
        x, n_fft=400, hop=100, window=window.float().to(cuda_device), center=True, pad_mode=pad_mode,
        scale=1.0, power=1.0, _precision="tf32x3",
    )  # fmt: skip
    assert_close(
        got, power_oracle(x, 400, 100, window, pad_mode=pad_mode, power=1.0), dtype="float32", rel_error=2e-6
    )


@pytest.mark.gpu
@pytest.mark.parametrize(
    "config",
    [dict(BLOCK_T=16, num_warps=4), dict(BLOCK_T=16, num_warps=8)],
    ids=["T16-w4", "T16-w8"],
)
@pytest.mark.parametrize("precision", ["tf32x3", "tf32"])
def test_gpu_mel_configs(config, precision, cuda_device, generator):
    x = random_tensor((3, 16000 * 2 + 77), generator=generator)
    window = torch.hann_window(400, dtype=F64)
    filters = nf.mel_filterbank(201, 0.0, 8000.0, 80, 16000, dtype=F64)
    expected = (power_oracle(x, 400, 160, window).transpose(1, 2) @ filters).transpose(1, 2)
    got = kmel.mel_spectrogram(
        x.to(cuda_device), n_fft=400, hop_length=160, window=window.float().to(cuda_device),
        filters=filters.to(cuda_device), power=2.0, scale=1.0, center=True, pad_mode="reflect",
        _path="fourstep", _precision=precision, _config=config,
    )  # fmt: skip
    if precision == "tf32x3":
        assert_close(got, expected, dtype="float32", rel_error=2e-6)
    else:
        assert_close(got, expected, atol=4e-3, rtol=4e-3, rel_error=7e-4)


@pytest.mark.gpu
def test_gpu_mel_gradient_through_auto_path(cuda_device, generator):
    x = random_tensor((2, 4000), generator=generator)
    x[:, :2000] = 0.0
    grads = []
    for backend, dev in (("triton", cuda_device), ("torch", torch.device("cpu"))):
        xg = x.to(dev, F64 if backend == "torch" else torch.float32).requires_grad_(True)
        nf.log_mel_spectrogram(xg, n_mels=80, hop_length=160, backend=backend).sum().backward()
        grads.append(xg.grad.cpu())
    assert torch.isfinite(grads[0]).all()
    assert_close(grads[0], grads[1], dtype="float32", rel_error=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["highest", "high"])
@pytest.mark.parametrize("n_fft,hop", [(400, 160), (512, 128), (1000, 250), (2048, 512)])
def test_gpu_stft_fourstep_path(precision, n_fft, hop, monkeypatch, cuda_device, generator):
    # The complex four-step path forced through the public API, and the gradient through it.
    monkeypatch.setattr(fourstep, "STFT_AUTO", True)
    x = random_tensor((3, 8 * n_fft + 77), generator=generator)
    window = torch.hann_window(n_fft, dtype=F64)
    expected = stft_oracle(x, n_fft, hop, window)
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        xg = x.to(cuda_device).requires_grad_(True)
        got = S.stft(xg, n_fft, hop, window=window.float().to(cuda_device), backend="triton")
        grad = random_tensor(tuple(got.shape), generator=generator, dtype=torch.complex64)
        got.backward(grad.to(cuda_device))
    finally:
        torch.set_float32_matmul_precision(previous)
    if precision == "highest":
        assert_close(got, expected, dtype="float32", rel_error=2e-6)
    else:
        assert_close(got, expected, dtype="tf32", rel_error=1e-3)
    x64 = x.double().requires_grad_(True)
    S.stft(x64, n_fft, hop, window=window, backend="torch").backward(grad.to(torch.complex128))
    assert_close(xg.grad, x64.grad, dtype="float32", rel_error=2e-6)
