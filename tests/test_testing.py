"""The harness must be able to fail: the assertion helper and the random inputs."""

from __future__ import annotations

import pytest
import torch

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
