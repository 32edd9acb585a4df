"""The Python quick start in docs/index.md and the public modules' docstring examples run as written
(CPU: the torch backend)."""

from __future__ import annotations

import doctest
import importlib
import re
from pathlib import Path

import pytest

INDEX = Path(__file__).resolve().parents[1] / "docs" / "index.md"


def test_index_quick_start_runs():
    blocks = re.findall(r"```python\n(.*?)```", INDEX.read_text(encoding="utf-8"), flags=re.S)
    assert blocks, "docs/index.md has no python block"
    for block in blocks:
        exec(compile(block, str(INDEX), "exec"), {"__name__": "docs_index"})


DOCTEST_MODULES = [
    "nbxsig.attention", "nbxsig.dft", "nbxsig.features", "nbxsig.filter_design", "nbxsig.filters",
    "nbxsig.models", "nbxsig.quant", "nbxsig.stft", "nbxsig.streaming", "nbxsig.transforms",
]  # fmt: skip


@pytest.mark.parametrize("module", DOCTEST_MODULES)
def test_docstring_examples_run(module):
    # The ``>>>`` examples in the public modules' docstrings run as written, in the module's namespace
    # (their outputs are comments, so this checks that they run, not what they print).
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = [t for t in finder.find(importlib.import_module(module)) if t.examples]
    assert tests, f"{module} has no docstring example"
    report: list[str] = []
    for test in tests:
        runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
