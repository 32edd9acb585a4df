"""The backend decision and the guarantees around it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nbxsig._dispatch import Op, choose_backend
from nbxsig.errors import BackendUnavailableError, ParameterValueError

F32 = (torch.float16, torch.bfloat16, torch.float32)


def decide(**overrides):
    facts = dict(
        requested=None,
        env_default=None,
        device_type="cuda",
        dtype=torch.float32,
        numel=1000,
        triton_dtypes=F32,
        has_triton_impl=True,
        triton_installed=True,
        interpreter=False,
    )
    facts.update(overrides)
    return choose_backend(**facts)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({}, "triton"),  # a supported GPU tensor
        ({"device_type": "cpu"}, "torch"),
        ({"device_type": "cpu", "interpreter": True}, "torch"),  # auto never picks the interpreter
        ({"device_type": "mps"}, "torch"),
        ({"dtype": torch.float64}, "torch"),
        ({"numel": 0}, "torch"),
        ({"has_triton_impl": False}, "torch"),
        ({"triton_installed": False}, "torch"),
        ({"requested": "torch"}, "torch"),
        ({"env_default": "torch"}, "torch"),
        ({"env_default": "triton", "device_type": "cpu", "interpreter": True}, "triton"),
        ({"env_default": "triton", "device_type": "cpu"}, "torch"),  # a default falls back quietly
        ({"requested": "triton", "device_type": "cpu", "interpreter": True}, "triton"),
        ({"requested": "torch", "env_default": "triton"}, "torch"),  # the argument beats the environment
        ({"torch_measured_faster": True}, "torch"),  # an op's size rule steers the automatic choice only
        ({"torch_measured_faster": True, "requested": "triton"}, "triton"),
        ({"torch_measured_faster": True, "env_default": "triton"}, "triton"),
    ],
    ids=lambda v: str(v) if not isinstance(v, dict) else "-".join(f"{k}={v[k]}" for k in v) or "cuda-f32",
)
def test_choose_backend(overrides, expected):
    assert decide(**overrides) == expected


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"device_type": "cpu"}, "TRITON_INTERPRET=1"),
        ({"device_type": "mps"}, "'mps'"),
        ({"dtype": torch.float64}, "not float64"),
        ({"has_triton_impl": False}, "no Triton kernel"),
        ({"triton_installed": False}, "not installed"),
        ({"numel": 0}, "empty"),
    ],
)
def test_explicit_triton_that_cannot_run_says_why(overrides, fragment):
    with pytest.raises(BackendUnavailableError, match="backend='triton' cannot run") as info:
        decide(requested="triton", **overrides)
    assert fragment in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("name", "value", "allowed"),
    [
        ("backend", "cuda", "None, 'triton' or 'torch'"),
        ("backend", "", "None, 'triton' or 'torch'"),  # not a silent "auto"
        ("NBXSIG_BACKEND", "fast", "unset, empty, 'triton' or 'torch'"),
    ],
)
def test_unknown_backend_names_are_rejected(name, value, allowed):
    key = "requested" if name == "backend" else "env_default"
    with pytest.raises(ParameterValueError, match=rf"{name} must be {allowed}, got '{value}'"):
        decide(**{key: value})


def test_environment_variable_sets_the_default(monkeypatch):
    op = Op(
        "probe",
        torch_impl="nbxsig.reference.dft:rdft_basis",
        triton_impl="nbxsig.kernels.dft_basis:rdft_basis",
    )
    monkeypatch.setenv("NBXSIG_BACKEND", "triton")
    assert (
        op.backend(None, device="cpu", dtype=torch.float32, numel=10) == "triton"
    )  # conftest: interpreter on
    monkeypatch.setenv("NBXSIG_BACKEND", "torch")
    assert op.backend(None, device="cpu", dtype=torch.float32, numel=10) == "torch"
    monkeypatch.delenv("NBXSIG_BACKEND")
    assert op.backend(None, device="cpu", dtype=torch.float32, numel=10) == "torch"


PUBLIC_MODULES = sorted(
    path.stem for path in (Path(__file__).resolve().parents[1] / "nbxsig").glob("*.py") if path.stem[0] != "_"
)


def test_every_public_module_is_an_attribute_of_the_package():
    # `import nbxsig; nbxsig.streaming` (the package docstring's promise) raised AttributeError for
    # streaming, attention, batch and filter_design, which the lazy table left out.
    code = "import nbxsig\n" + "".join(f"nbxsig.{name}\n" for name in PUBLIC_MODULES) + "print('ok')\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    assert set(PUBLIC_MODULES) <= set(dir(__import__("nbxsig")))


def test_import_has_no_side_effects():
    # A fresh interpreter: importing nbxsig and every public module must not import triton, initialise
    # CUDA or compile anything.
    code = (
        "import sys, torch\n"
        "import nbxsig\n"
        + "".join(f"import nbxsig.{name}\n" for name in PUBLIC_MODULES)
        + "assert 'triton' not in sys.modules, 'triton imported'\n"
        "assert not torch.cuda.is_initialized(), 'CUDA initialised'\n"
        "print('clean')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "clean", out.stderr


def test_triton_on_cpu_without_interpreter_raises_clearly():
    code = (
        "import os\n"
        "os.environ.pop('TRITON_INTERPRET', None)\n"
        "import nbxsig.dft\n"
        "try:\n"
        "    nbxsig.dft.rdft_basis(8, backend='triton')\n"
        "except ValueError as e:\n"
        "    print(type(e).__name__, e)\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert out.stdout.startswith("BackendUnavailableError backend='triton' cannot run this call"), out
    assert "TRITON_INTERPRET=1" in out.stdout


def test_triton_backend_resolves_the_lazy_negation_bit():
    """``x.conj().imag`` carries PyTorch's lazy negation bit over un-negated memory; kernels read memory
    by pointer, so the dispatch resolves the bit first (first and repeated calls: the istft/stft plan
    cache must not bypass it). Inputs and windows, through stft, istft, mel and a filter."""
    import nbxsig.features as nft
    import nbxsig.filters as nfl
    import nbxsig.stft as S
    from nbxsig.testing import assert_close

    g = torch.Generator().manual_seed(7)
    negated = torch.randn(2, 401, generator=g, dtype=torch.complex64).conj().imag
    window = torch.rand(20, generator=g, dtype=torch.complex64).conj().imag  # (negative values)
    assert negated.is_neg() and window.is_neg()
    plain, plain_window = negated.resolve_neg(), window.resolve_neg()
    for _ in range(2):
        spec = S.stft(negated, 20, 5, window=window, backend="triton")
        assert_close(spec, S.stft(plain, 20, 5, window=plain_window, backend="triton"), dtype=torch.float32)
        y = S.istft(spec, 20, 5, window=window, length=401, backend="triton")
        assert_close(
            y, S.istft(spec, 20, 5, window=plain_window, length=401, backend="triton"), dtype=torch.float32
        )
    mel = nft.mel_spectrogram(negated, n_fft=64, hop_length=16, n_mels=8, backend="triton")
    assert_close(
        mel,
        nft.mel_spectrogram(plain, n_fft=64, hop_length=16, n_mels=8, backend="triton"),
        dtype=torch.float32,
    )
    taps = torch.randn(2, 5, generator=g)
    out = nfl.depthwise_conv1d(negated, taps, backend="triton")
    assert_close(out, nfl.depthwise_conv1d(plain, taps, backend="triton"), dtype=torch.float32)
