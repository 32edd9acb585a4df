"""Marks and imports shared by test files."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest

#: Triton 3.6's interpreter multiplies bfloat16 ``tl.dot`` operands as raw integer bits (errors ~1e10);
#: compiled for a GPU the dot is right. Strict: the case must fail on the CPU and pass on a device.
BF16_DOT_XFAIL = pytest.mark.xfail(
    os.environ.get("NBXSIG_TEST_DEVICE", "cpu") == "cpu",
    raises=AssertionError,
    strict=True,
    reason="Triton 3.6's interpreter computes tl.dot on bfloat16 as raw integer bits (GPU is fine)",
)


def suite_dependency(name: str) -> ModuleType:
    """Import a dependency of the suite (soundfile, kornia): in ``make test`` (the CPU run, whose
    ``install-test`` installs them) a missing one is an error, not a silent skip of every test that needs
    it; only on the GPU machine's image (``NBXSIG_TEST_DEVICE`` set), which lacks some, is it a skip."""
    if os.environ.get("NBXSIG_TEST_DEVICE", "cpu") == "cpu":
        return importlib.import_module(name)
    return pytest.importorskip(name)
