"""The Python quick start in docs/index.md runs as written (CPU: the torch backend)."""

from __future__ import annotations

import re
from pathlib import Path

INDEX = Path(__file__).resolve().parents[1] / "docs" / "index.md"


def test_index_quick_start_runs():
    blocks = re.findall(r"```python\n(.*?)```", INDEX.read_text(encoding="utf-8"), flags=re.S)
    assert blocks, "docs/index.md has no python block"
    for block in blocks:
        exec(compile(block, str(INDEX), "exec"), {"__name__": "docs_index"})
