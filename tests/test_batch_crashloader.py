"""A decoder that kills its worker process on files named ``crash*`` (for tests/test_batch.py).

Kept apart from the test module so that spawned workers import only numpy and nbxsig.io.
"""

from __future__ import annotations

import os
from pathlib import Path

from nbxsig import io as nio


def crashing_load(path: Path) -> nio.Audio:
    if path.name.startswith("crash"):
        os._exit(3)  # what a segfaulting decoder looks like to the pool
    return nio.read_signal(path, default_rate=1000)
