"""Decoders that kill their worker process (for tests/test_batch.py): on files named ``crash*``, or
before the worker can start.

Kept apart from the test module so that spawned workers import only numpy and nbxsig.io.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from nbxsig import io as nio


def crashing_load(path: Path) -> nio.Audio:
    if path.name.startswith("crash"):
        os._exit(3)  # what a segfaulting decoder looks like to the pool
    return nio.read_signal(path, default_rate=1000)


class _Unpicklable:
    """Unpickling it (in a spawned worker, before the worker runs) exits the process."""

    def __reduce__(self):
        return os._exit, (4,)


def _never_called(path: Path, *, marker: object) -> nio.Audio:
    raise AssertionError("unreachable")


#: A load function whose worker dies while starting (as a broken installation would).
unloadable_load = functools.partial(_never_called, marker=_Unpicklable())


def save_npy(item: nio.Audio, result: object, output: Path) -> None:
    """A picklable save (the decode workers can run it, so they write the results)."""
    nio.write_npy(output, result)


def crashing_save(item: nio.Audio, result: object, output: Path) -> None:
    """Dies mid-write (its temporary half written) on outputs named ``crash*``."""
    if output.name.startswith("crash"):
        with nio.atomic_open(output) as f:
            f.write(b"\x93NUMPY partial")
            f.flush()
            os._exit(3)
    nio.write_npy(output, result)
