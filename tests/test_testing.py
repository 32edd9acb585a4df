"""The harness must be able to fail: the assertion helper and the random inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nbxsig.errors import ParameterTypeError, ParameterValueError
from nbxsig.testing import TOLERANCES, assert_close, error_report, random_tensor, tolerance


def test_report_names_max_error_relative_error_and_first_bad_index(generator):
    ref = random_tensor((4, 5), generator=generator, dtype=torch.float64)
    out = ref.clone()
    out[2, 3] += 0.5
    ok, report = error_report(out, ref, atol=1e-6, rtol=1e-6)
    assert not ok
    assert "max abs error 5.000e-01" in report
    assert "1 of 20 elements" in report
    assert "at (2, 3)" in report
    with pytest.raises(AssertionError, match="relative error"):
        assert_close(out, ref)


def test_nan_where_the_reference_is_finite_fails(generator):
    ref = random_tensor((10,), generator=generator)
    out = ref.clone()
    out[7] = float("nan")
    with pytest.raises(AssertionError, match=r"at \(7,\)"):
        assert_close(out, ref)


def test_nan_where_the_reference_has_nan_passes(generator):
    ref = random_tensor((10,), generator=generator)
    ref[3] = float("nan")
    assert_close(ref.clone(), ref)


def test_infinite_reference_values_must_be_met_exactly():
    # An infinite reference value once made the peak, and so the tolerance, infinite: anything passed.
    inf = float("inf")
    for actual, expected in [([1.0, 3.0], [inf, 1.0]), ([inf, 1.0], [-inf, 1.0]), ([5.0, 1.0], [inf, 1.0])]:
        ok, report = error_report(torch.tensor(actual), torch.tensor(expected), atol=1e-6, rtol=1e-5)
        assert not ok and "max abs error inf (reference peak 1.000e+00)" in report, report
    ok, _ = error_report(torch.tensor([-inf, 1.0 + 1e-7]), torch.tensor([-inf, 1.0]), atol=1e-6, rtol=1e-5)
    assert ok


def test_shape_mismatch_fails(generator):
    with pytest.raises(AssertionError, match="shape mismatch"):
        assert_close(torch.ones(3), torch.ones(4))


def test_complex_compares_real_and_imaginary_parts(generator):
    ref = random_tensor((6,), generator=generator, dtype=torch.complex128)
    out = ref.clone()
    out[2] += 1e-3j
    with pytest.raises(AssertionError):
        assert_close(out.to(torch.complex64), ref)
    assert_close(ref.to(torch.complex64), ref)


def test_rel_error_bound_is_enforced(generator):
    ref = random_tensor((100,), generator=generator, dtype=torch.float64)
    out = ref * (1 + 1e-4)
    assert_close(out, ref, atol=1e-3, rtol=1e-3)
    with pytest.raises(AssertionError, match="exceeds"):
        assert_close(out, ref, atol=1e-3, rtol=1e-3, rel_error=1e-5)


def test_table_covers_every_kernel_dtype():
    for dtype in (
        torch.float64,
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.complex64,
        torch.complex128,
    ):
        assert tolerance(dtype) in TOLERANCES.values()
    with pytest.raises(KeyError, match="no tolerance"):
        tolerance(torch.int8)


def test_random_inputs_are_seeded_and_never_zero():
    a = random_tensor((1000,), generator=torch.Generator().manual_seed(1))
    b = random_tensor((1000,), generator=torch.Generator().manual_seed(1))
    c = random_tensor((1000,), generator=torch.Generator().manual_seed(2))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert (a != 0).all() and a.std() > 0.5
    u = random_tensor((100,), generator=torch.Generator().manual_seed(3), low=2.0, high=3.0)
    assert ((u >= 2) & (u < 3)).all()


def test_complex_against_real_is_refused_by_name():
    # Once "shape mismatch: got (3,), expected (3,)"; and (2,) complex passed against (2, 2) real.
    z = torch.tensor([1 + 2j, 3 - 4j])
    for actual, expected in [
        (torch.ones(3, dtype=torch.complex64), torch.ones(3)),
        (z, torch.view_as_real(z)),
    ]:
        ok, report = error_report(actual, expected, atol=1e-6, rtol=1e-5)
        assert not ok and report.startswith("complex vs real: got complex"), report
    with pytest.raises(
        AssertionError,
        match=r"real vs complex: got float32 of shape \(2, 2\), expected complex64 of shape \(2,\)",
    ):
        assert_close(torch.view_as_real(z).float(), z)


def test_rel_error_ignores_nan_and_inf_where_the_reference_has_them():
    ref = torch.tensor([1.0, float("nan"), float("-inf"), 2.0], dtype=torch.float64)
    assert_close(ref.clone(), ref, rel_error=1e-12)
    out = ref.clone()
    out[3] += 1e-3
    with pytest.raises(AssertionError, match="exceeds"):
        assert_close(out, ref, atol=1e-3, rtol=1e-3, rel_error=1e-6)


@pytest.mark.parametrize("name", ["atol", "rtol", "rel_error"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1e-3], ids=["nan", "inf", "negative"])
def test_tolerances_must_be_finite_and_non_negative(name, value):
    # atol=nan made every `diff > bound` False: everything passed.
    with pytest.raises(ParameterValueError, match=f"{name} must be a finite number >= 0.0, got {value}"):
        assert_close(torch.ones(3), torch.zeros(3), **{name: value})
    if name != "rel_error":
        with pytest.raises(ParameterValueError, match=name):
            error_report(torch.ones(3), torch.zeros(3), **{"atol": 0.0, "rtol": 0.0, name: value})


def test_numpy_inputs_are_compared_and_other_types_refused():
    ref = np.linspace(1.0, 2.0, 7)
    assert_close(ref.copy(), ref)
    assert_close(torch.from_numpy(ref), ref)
    with pytest.raises(AssertionError, match=r"at \(3,\)"):
        assert_close(ref + np.eye(7)[3], ref)
    with pytest.raises(ParameterTypeError, match=r"actual must be a torch\.Tensor or a numpy\.ndarray, got"):
        assert_close([1.0, 2.0], torch.ones(2))


def test_integer_tensors_need_explicit_tolerances():
    a = torch.arange(5, dtype=torch.int32)
    with pytest.raises(
        ParameterTypeError, match=r"dtype must be in the tolerance table .*atol= and rtol=.*int32"
    ):
        assert_close(a, a.clone())
    assert_close(a, a.clone(), atol=0, rtol=0)
    with pytest.raises(AssertionError, match="1 of 5 elements"):
        assert_close(a + torch.eye(5, dtype=torch.int32)[1], a, atol=0, rtol=0)


def test_random_tensor_refuses_what_it_cannot_draw():
    g = torch.Generator().manual_seed(0)
    # An integer cast of standard-normal draws was 0 for about 68% of the values.
    with pytest.raises(
        ParameterTypeError, match=r"dtype must be a floating or complex torch dtype, got torch\.int32"
    ):
        random_tensor((10,), generator=g, dtype=torch.int32)
    with pytest.raises(ParameterValueError, match="both given"):
        random_tensor((10,), generator=g, low=1.0)
    with pytest.raises(ParameterValueError, match=r"low < high, got \(3.0, 2.0\)"):
        random_tensor((10,), generator=g, low=3.0, high=2.0)
    with pytest.raises(ParameterValueError, match=r"shape\[1\] must be >= 0, got -2"):
        random_tensor((3, -2), generator=g)
    with pytest.raises(ParameterTypeError, match="shape must be an int or a sequence of ints"):
        random_tensor(None, generator=g)
    a = random_tensor(5, generator=torch.Generator().manual_seed(4))
    assert torch.equal(a, random_tensor((5,), generator=torch.Generator().manual_seed(4)))
