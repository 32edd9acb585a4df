"""Marks shared by test files."""

from __future__ import annotations

import os

import pytest

#: Triton 3.6's interpreter multiplies bfloat16 ``tl.dot`` operands as raw integer bits (errors ~1e10);
#: compiled for a GPU the dot is right. Strict: the case must fail on the CPU and pass on a device.
BF16_DOT_XFAIL = pytest.mark.xfail(
    os.environ.get("NBXSIG_TEST_DEVICE", "cpu") == "cpu",
    raises=AssertionError,
    strict=True,
    reason="Triton 3.6's interpreter computes tl.dot on bfloat16 as raw integer bits (GPU is fine)",
)
