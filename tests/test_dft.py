"""DFT bases against numpy.fft in float64, for both backends."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import nbxsig.dft
from nbxsig.errors import ParameterTypeError, ParameterValueError
from nbxsig.testing import assert_close

SIZES = [1, 2, 3, 5, 20, 27, 400, 1000, 1025]
BACKENDS = ["torch", "triton"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", SIZES, ids=lambda n: f"N{n}")
def test_forward_basis_is_numpy_rfft(n, backend, generator, device):
    basis = nbxsig.dft.rdft_basis(n, dtype=torch.float64, device=device, backend=backend)
    assert basis.shape == (2, n // 2 + 1, n)
    x = torch.randn(n, 3, generator=generator, dtype=torch.float64)
    ours = torch.complex(basis[0].cpu() @ x, basis[1].cpu() @ x)
    ref = torch.from_numpy(np.fft.rfft(x.numpy(), axis=0))
    assert_close(ours, ref, atol=1e-13 * n)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [1, 2, 5, 20, 27], ids=lambda n: f"N{n}")
def test_two_sided_basis_is_numpy_fft(n, backend, generator, device):
    basis = nbxsig.dft.rdft_basis(n, onesided=False, dtype=torch.float64, device=device, backend=backend)
    assert basis.shape == (2, n, n)
    x = torch.randn(n, generator=generator, dtype=torch.float64)
    ref = torch.from_numpy(np.fft.fft(x.numpy()))
    assert_close(torch.complex(basis[0].cpu() @ x, basis[1].cpu() @ x), ref, atol=1e-13 * n)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", SIZES, ids=lambda n: f"N{n}")
def test_inverse_basis_is_numpy_irfft(n, backend, generator, device):
    basis = nbxsig.dft.irdft_basis(n, dtype=torch.float64, device=device, backend=backend)
    assert basis.shape == (2, n // 2 + 1, n)
    spec = torch.randn(n // 2 + 1, 2, generator=generator, dtype=torch.float64)
    ours = spec[:, 0] @ basis[0].cpu() + spec[:, 1] @ basis[1].cpu()
    ref = torch.from_numpy(np.fft.irfft(spec[:, 0].numpy() + 1j * spec[:, 1].numpy(), n=n))
    assert_close(ours, ref, atol=1e-13 * n)


@pytest.mark.parametrize("n", SIZES, ids=lambda n: f"N{n}")
def test_triton_float32_basis_is_rounded_float64(n, device):
    # "Exact to float32 rounding": every entry within half an ulp of float32 of the float64 value.
    for build in (nbxsig.dft.rdft_basis, nbxsig.dft.irdft_basis):
        ours = build(n, dtype=torch.float32, device=device, backend="triton").cpu().double()
        exact = build(n, dtype=torch.float64, backend="torch")
        assert torch.equal(ours, exact.float().double()), f"{build.__name__}(n={n}) not correctly rounded"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("n", [1, 2, 20, 400], ids=lambda n: f"N{n}")
def test_triton_half_basis_is_rounded_float64(n, dtype, device):
    # bfloat16 bases came out as garbage and NaN under the interpreter (its float64 -> bfloat16 cast).
    for build in (nbxsig.dft.rdft_basis, nbxsig.dft.irdft_basis):
        ours = build(n, dtype=dtype, device=device, backend="triton").cpu()
        exact = build(n, dtype=torch.float64, backend="torch").to(dtype)
        assert ours.dtype == dtype
        assert torch.equal(ours, exact), f"{build.__name__}(n={n}, {dtype}) not correctly rounded"


def test_reduced_angle_beats_naive_float32_angle():
    # The reason for the modular reduction: at N=2048 forming 2πkt/N in float32 is off by ~4e-4 rad.
    n = 2048
    exact = nbxsig.dft.rdft_basis(n, dtype=torch.float64, backend="torch")
    k = torch.arange(n // 2 + 1, dtype=torch.float32)[:, None]
    t = torch.arange(n, dtype=torch.float32)[None]
    naive = torch.cos(2 * torch.pi * k * t / n).double()
    ours = nbxsig.dft.rdft_basis(n, dtype=torch.float32, backend="torch").double()
    assert (naive - exact[0]).abs().max() > 1e-4
    assert (ours - exact).abs().max() < 1e-7


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"n": 0}, ParameterValueError, "n must be >= 1, got 0"),
        ({"n": -3}, ParameterValueError, "n must be >= 1, got -3"),
        ({"n": 2.5}, ParameterTypeError, "n must be an integer, got 2.5"),
        ({"n": True}, ParameterTypeError, "n must be an integer, got True"),
        ({"n": 8, "dtype": torch.int32}, ParameterTypeError, "dtype must be one of torch.float16"),
        # numpy's dtype, a string and a non-bool flag were once a raw TypeError, a raw RuntimeError and True.
        (
            {"n": 8, "dtype": np.float32},
            ParameterTypeError,
            "dtype must be one of torch.float16, torch.bfloat16, torch.float32, torch.float64, "
            "got <class 'numpy.float32'>",
        ),
        ({"n": 8, "dtype": "float32"}, ParameterTypeError, "dtype must be one of .*, got 'float32'"),
        (
            {"n": 8, "device": "cpux"},
            ParameterValueError,
            "device must be a torch.device or a device string such as 'cpu' or 'cuda:0', got 'cpux'",
        ),
        ({"n": 8, "onesided": "no"}, ParameterTypeError, "onesided must be a bool, got 'no'"),
        ({"n": 8, "onesided": 0}, ParameterTypeError, "onesided must be a bool, got 0"),
        (
            {"n": 8, "backend": "gpu"},
            ParameterValueError,
            "backend must be None, 'triton' or 'torch', got 'gpu'",
        ),
    ],
)
def test_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(")):
        nbxsig.dft.rdft_basis(**kwargs)
    if "onesided" not in kwargs:
        with pytest.raises(error, match=message.replace("(", r"\(")):
            nbxsig.dft.irdft_basis(**kwargs)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [20, 400, 2048])
def test_cuda_basis_matches_torch_twin(n, cuda_device):
    for build in (nbxsig.dft.rdft_basis, nbxsig.dft.irdft_basis):
        ours = build(n, device=cuda_device, backend="triton").cpu().double()
        exact = build(n, dtype=torch.float64, backend="torch")
        assert torch.equal(ours, exact.float().double())
