"""Batch machinery shared by every ``nbxsig`` command: input discovery, output mapping, skipping and
resuming, decode workers, GPU batches of similar-length files, a JSONL manifest, progress and the
closing summary.

A command describes its work as a :class:`Job` -- ``load`` (decode one file; runs in worker
processes, so it must be picklable: a module-level function or a ``functools.partial`` of one),
``process`` (a list of decoded inputs → a list of results, on the device, in the main process) and
``save`` (write one result) -- and hands it with the planned :class:`Task` list to :func:`run`.

Guarantees (the CLI's contract):

* an input is never overwritten (nor another shard's, nor an array set aside beside its audio, nor
  the manifest over any of them); an existing output is skipped unless ``overwrite``;
* every output, and the manifest, is written to a temporary sibling and renamed into place
  (:mod:`nbxsig.io`);
* a file that cannot be decoded, processed or written is reported and skipped, the rest goes on;
* decoding overlaps device work: ``jobs`` worker processes decode while the main process runs
  batches of files grouped by :attr:`Job.group_key` and by length (within ~9%), padded to the
  longest; ``process`` trims each result to its own length, so batching never changes a result;
* decoded arrays reach the main process through shared memory (a fixed arena of slots, closed at
  the end), not pickled through pipes; the results go back the same way to the decode workers, which
  write them with the job's ``save`` while the next batches run (writer threads of the main process
  where that cannot be: see :meth:`_DecodePool.save`).

The main process's share per file is small (two ~100-300-byte messages, a copy of the result,
bucketing, a manifest row): decode and writing scale with ``jobs``, and a crashing decoder or writer
fails only its file.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib
import json
import math
import mmap
import multiprocessing
import multiprocessing.connection as mp_connection
import os
import pickle
import queue
import re
import signal
import sys
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import IO, Any, TextIO

import numpy as np

from . import io as nio
from .errors import NbxsigError

#: Buckets group lengths within a factor of 2**(1/8) (≈ 9%): the padding a batch carries is at
#: most that fraction of its work.
_BUCKETS_PER_OCTAVE = 8
#: A batch is also cut when its lengths add up to this (2**26 samples: 256 MB as float32), so that
#: long files do not exhaust device memory at the default batch size.
_MAX_BATCH_LENGTH = 1 << 26
#: Writer threads: a write is mostly waiting for the disk (fsync), which threads overlap.
_SAVE_THREADS = 8


class BatchUsageError(NbxsigError, ValueError):
    """The inputs or options of a batch cannot work at all (no input found, a bad ``--shard``...).
    The CLI turns it into a usage error (exit code 2)."""


# --------------------------------------------------------------------------------------------
# Discovery and output mapping


@dataclass(frozen=True)
class Found:
    """One discovered input: its path and the path its output mirrors (relative to ``root``)."""

    path: Path
    rel: Path
    from_folder: bool


def discover(
    inputs: Sequence[str | os.PathLike[str]],
    *,
    extensions: Iterable[str],
    glob: str | None = None,
    exclude: str | os.PathLike[str] | None = None,
) -> list[Found]:
    """Expand files, folders (recursively) and ``@list.txt`` files into a sorted, de-duplicated list.

    Args:
        inputs: paths; a folder is searched recursively for files whose extension is in
            ``extensions`` (or that match ``glob``, e.g. ``"*.wav"`` or ``"**/train/*.flac"``); a
            path starting with ``@`` names a text file listing one input per line (files or
            folders, relative to the list's own folder; blank lines and ``#`` comments ignored).
            A file named directly is always taken, whatever its extension, so that an unsupported
            file is reported rather than silently ignored.
        extensions: lower-case extensions with the dot, for folder searches.
        glob: a pattern replacing the extension filter in folder searches: without "/" it matches
            file names at any depth (``"*.flac"``), with "/" paths relative to the folder
            (``"**/train/*.wav"``, ``"spk1/*"``); a last part ``**`` matches every file below.
        exclude: a folder not searched where it lies strictly inside a searched folder (the output
            folder: a run must not take the outputs of the last one as inputs). The searched folder
            itself, or a folder above it, excludes nothing.

    Returns:
        :class:`Found` items sorted by path. Files named directly (or listed) mirror relative to
        the deepest folder common to all of them; files found in a folder mirror relative to it.
        Hidden files and folders (and nbxsig's temporaries) are skipped in folder searches; a
        broken symbolic link is found (and then fails as a missing file) rather than skipped. The
        same path reached twice (a folder and a file in it) is taken once; a symbolic link to
        another file is an input of its own, under its own name.

    Raises:
        BatchUsageError: a list file cannot be read, an absolute or empty ``glob``, or nothing was
        found at all.
    """
    extensions = tuple(e.lower() for e in extensions)
    if glob is not None and (not glob or os.path.isabs(glob)):
        raise BatchUsageError(
            f"--glob must be a pattern relative to the searched folders (e.g. '*.wav'), got {glob!r}"
        )
    excluded = os.path.realpath(exclude) if exclude is not None else None
    named: list[Path] = []
    folder_found: list[Found] = []
    for spec in _expand_lists(inputs):
        path = Path(spec)
        if path.is_dir():
            skip = excluded if excluded is not None and _inside(excluded, os.path.realpath(path)) else None
            for p in _walk(path, extensions, glob):
                if skip is None or not _inside(os.path.realpath(p), skip):
                    folder_found.append(Found(p, p.relative_to(path), True))
        else:
            named.append(path)  # a missing file is reported as a failure when processed
    found = list(folder_found)
    if named:
        common = _common_parent(named)
        found.extend(Found(p, _relative(p, common), False) for p in named)
    seen: set[str] = set()
    unique = []
    for f in sorted(found, key=lambda f: (str(f.path), str(f.rel))):
        # By the path as given, not where links lead: a link is a name the user chose for an input.
        key = os.path.abspath(f.path)
        if key not in seen:
            seen.add(key)
            unique.append(f)
    if not unique:
        what = f"matching {glob!r}" if glob else "with extension " + "/".join(extensions)
        raise BatchUsageError(f"no input files {what} found in {', '.join(map(str, inputs)) or '(none)'}")
    return unique


def _inside(path: str, folder: str) -> bool:
    """Whether ``path`` lies strictly inside ``folder`` (both absolute and normalised)."""
    return path != folder and path.startswith(folder.rstrip(os.sep) + os.sep)


def _expand_lists(
    inputs: Sequence[str | os.PathLike[str]], depth: int = 0, lists: list[Path] | None = None
) -> Iterator[str]:
    """The inputs with each ``@list`` replaced by its entries; the list files go to ``lists``."""
    for spec in inputs:
        spec = os.fspath(spec)
        if spec.startswith("@") and len(spec) > 1:
            list_path = Path(spec[1:])
            if lists is not None:
                lists.append(list_path)
            try:
                # utf-8-sig: a byte-order mark (Notepad, PowerShell's Out-File) is not part of the first
                # entry, which otherwise failed as "no such file" under a name shown with an invisible
                # character.
                lines = list_path.read_text(encoding="utf-8-sig").splitlines()
            except (OSError, UnicodeDecodeError) as exc:
                raise BatchUsageError(f"cannot read the input list {list_path}: {exc}") from None
            entries = [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]
            base = list_path.parent
            if depth > 8:
                raise BatchUsageError(f"input lists nest too deeply at {list_path}")
            yield from _expand_lists(
                [e if e.startswith("@") or os.path.isabs(e) else str(base / e) for e in entries],
                depth + 1,
                lists,
            )
        else:
            yield spec


def _walk(folder: Path, extensions: tuple[str, ...], glob: str | None) -> Iterator[Path]:
    # A pattern without "/" matches file names at any depth (like find -name); with "/" it is a
    # path pattern relative to the folder ("**/train/*.wav"). pathlib's "**" alone matches folders
    # only: a last part "**" means the files below.
    pattern = glob or "*"
    if pattern.rsplit("/", 1)[-1] == "**":
        pattern += "/*"
    candidates = folder.glob(pattern) if "/" in pattern else folder.rglob(pattern)
    for p in candidates:
        rel_parts = p.relative_to(folder).parts
        if any(part.startswith(".") for part in rel_parts):
            continue
        if not (p.is_file() or (p.is_symlink() and not p.exists())):  # a broken link is reported
            continue
        if glob or p.suffix.lower() in extensions:
            yield p


def _common_parent(paths: list[Path]) -> Path:
    parents = [os.path.abspath(p.parent) for p in paths]
    return Path(os.path.commonpath(parents)) if parents else Path(".")


def _relative(path: Path, base: Path) -> Path:
    return Path(os.path.relpath(os.path.abspath(path), base))


def parse_shard(spec: str | None) -> tuple[int, int] | None:
    """``"K/N"`` → ``(K, N)`` with 1 ≤ K ≤ N (None → None).

    Raises:
        BatchUsageError: not of that form.
    """
    if spec is None:
        return None
    try:
        k_text, n_text = spec.split("/")
        k, n = int(k_text), int(n_text)
    except ValueError:
        raise BatchUsageError(
            f"--shard must be K/N with integers 1 ≤ K ≤ N (e.g. 1/4), got {spec!r}"
        ) from None
    if not 1 <= k <= n:
        raise BatchUsageError(f"--shard must be K/N with 1 ≤ K ≤ N (e.g. 1/4), got {spec!r}")
    return k, n


def shard(found: Sequence[Found], spec: tuple[int, int] | None) -> list[Found]:
    """The deterministic K-th of N parts of ``found``: a file belongs to part
    ``crc32(relative path) mod N + 1``, so the split does not depend on the order of the listing, and
    N processes or machines given the same inputs and ``K = 1..N`` cover every file exactly once."""
    if spec is None:
        return list(found)
    k, n = spec
    return [f for f in found if zlib.crc32(f.rel.as_posix().encode()) % n == k - 1]


def set_aside_outputs(found: Sequence[Found]) -> tuple[list[Found], list[Found]]:
    """Split ``found`` into the inputs to take and the files to leave alone.

    An array (``.npy``/``.npz``) found in a folder beside an audio file of the same stem that was
    found too (``a.npy`` beside ``a.wav``) is left alone: it is that file's output (``nbxsig mel``
    and ``stft`` write there by default), and taking it as an input would make a second run over
    the folder read its own outputs -- mel's ``(1, 80, T)`` features as an 80-channel waveform --
    instead of resuming. Arrays named directly, listed, or found with no such audio file are taken.

    Returns:
        (taken, set aside), each in the order of ``found``. Pass the second to :func:`plan`, which
        never lets an output replace one of them.
    """
    audio = {os.path.splitext(os.path.abspath(f.path))[0] for f in found if nio.kind_of(f.path) == "audio"}
    taken: list[Found] = []
    aside: list[Found] = []
    for f in found:
        beside_audio = os.path.splitext(os.path.abspath(f.path))[0] in audio
        (aside if f.from_folder and nio.kind_of(f.path) == "array" and beside_audio else taken).append(f)
    return taken, aside


@dataclass
class Task:
    """One input and the output it will produce."""

    input: Path
    output: Path | None
    error: str | None = None  # set when planning already knows the task fails
    #: The output is a file the run found and set aside (:func:`set_aside_outputs`): an existing one
    #: is skipped, and refused rather than replaced with ``overwrite``, since it may be the user's.
    output_found: bool = False


def plan(
    found: Sequence[Found],
    *,
    output: str | os.PathLike[str] | None,
    suffix: Callable[[Path], str],
    single_input: bool,
    protect: Iterable[str | os.PathLike[str]] = (),
    aside: Sequence[Found] = (),
) -> tuple[list[Task], Path | None]:
    """Map inputs to outputs.

    Args:
        found: from :func:`discover` (and :func:`shard`).
        output: the ``-o`` argument: None → beside each input; with ``single_input`` and a path that
            is not an existing folder and does not end with a separator → that file; otherwise a
            folder in which outputs mirror the input tree.
        suffix: the output's extension for an input path (e.g. ``lambda p: ".npz"``).
        single_input: whether exactly one file was named (no folder, no list).
        protect: other files no output may replace: every input of the run before :func:`shard`
            (the other shards' inputs) and files given as options (filter taps...).
        aside: the files :func:`set_aside_outputs` left alone (see :attr:`Task.output_found`).

    Returns:
        (tasks, output folder or None), in the order of ``found``. A task whose output would
        overwrite an input, or collide with another task's output, carries an error and is reported
        as failed; of two inputs with one output (``a.wav`` and ``a.npy`` → ``a.npz``) an audio file
        keeps it.
    """
    out_dir: Path | None = None
    out_file: Path | None = None
    if output is not None:
        text = os.fspath(output)
        if single_input and not os.path.isdir(text) and not text.endswith(("/", os.sep)):
            out_file = Path(text)
        else:
            out_dir = Path(text)
    inputs = {os.path.realpath(f.path) for f in found} | {os.path.realpath(p) for p in protect}
    set_aside = {os.path.realpath(f.path) for f in aside}
    tasks: list[Task] = []
    for f in found:
        if out_file is not None:
            dest = out_file
        elif out_dir is not None:
            dest = out_dir / f.rel.with_suffix(suffix(f.path))
        else:
            dest = f.path.with_suffix(suffix(f.path))
        tasks.append(Task(f.path, dest, output_found=os.path.realpath(dest) in set_aside))
    claimed: dict[str, Path] = {}
    # Audio first: its output is what a folder of audio and arrays beside it is run for.
    for task in sorted(tasks, key=lambda t: nio.kind_of(t.input) != "audio"):
        real = os.path.realpath(task.output)
        # Each message starts with the input that fails ("nbxsig: failed: PATH: reason"): the paths
        # it names are other files, so without it several inputs failing over one output (a.flac
        # and a.ogg beside a.wav) printed the same line, naming none of them.
        if real in inputs:
            hint = "" if output is not None else "; name an output with -o"
            task.error = f"{task.input}: refusing to overwrite the input {task.output}{hint}"
        elif real in claimed:
            task.error = f"{task.input}: its output {task.output} is also the output of {claimed[real]}"
        else:
            claimed[real] = task.input
    return tasks, out_dir


def check_manifest(
    manifest: str | os.PathLike[str],
    *,
    inputs: Sequence[str | os.PathLike[str]],
    found: Sequence[Found],
    tasks: Sequence[Task],
    protect: Iterable[str | os.PathLike[str]] = (),
) -> None:
    """Refuse a manifest path that would replace something the user gave or the run writes.

    Args:
        manifest: the manifest's path.
        inputs: as given to :func:`discover` (files, folders, ``@list`` files and what they list).
        found: every file found, before :func:`shard` and :func:`set_aside_outputs`.
        tasks: from :func:`plan` (their outputs).
        protect: other files given (options' files).

    Raises:
        BatchUsageError: ``manifest`` is a folder, or one of those files or folders.
    """
    if os.path.isdir(manifest):
        raise BatchUsageError(f"the manifest {manifest} is a folder; name a file")
    lists: list[Path] = []
    given = [*_expand_lists(inputs, lists=lists), *lists, *(f.path for f in found), *protect]
    real = os.path.realpath(manifest)
    for path in given:
        if os.path.realpath(path) == real:
            raise BatchUsageError(f"the manifest {manifest} would overwrite the input {path}")
    for task in tasks:
        if task.output is not None and os.path.realpath(task.output) == real:
            raise BatchUsageError(f"the manifest {manifest} is also the output of {task.input}")


# --------------------------------------------------------------------------------------------
# Devices


def resolve_device(spec: str) -> Any:
    """``"auto"`` (CUDA when available, else CPU), ``"cpu"``, ``"cuda"`` or ``"cuda:i"`` → torch.device.

    Raises:
        BatchUsageError: an unknown spec, or a CUDA device torch cannot see.
    """
    import torch

    spec = spec.strip().lower()
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if spec == "cpu":
        return torch.device("cpu")
    if spec == "cuda" or spec.startswith("cuda:"):
        index = spec.partition(":")[2]
        # ASCII digits and nothing else: "cuda:" (no index), "cuda:01" or "cuda:٣" (str.isdigit takes
        # other scripts' digits) passed here and then failed in torch.device as a traceback.
        if spec != "cuda" and not (index.isascii() and index.isdigit()):
            raise BatchUsageError(f"--device must be auto, cpu, cuda or cuda:INDEX, got {spec!r}")
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise BatchUsageError(f"--device {spec}: torch sees no CUDA device (use --device cpu or auto)")
        if index and int(index) >= count:
            raise BatchUsageError(f"--device {spec}: torch sees {count} CUDA device(s), 0..{count - 1}")
        return torch.device("cuda", int(index)) if index else torch.device("cuda")  # "01" is device 1
    raise BatchUsageError(f"--device must be auto, cpu, cuda or cuda:INDEX, got {spec!r}")


def start_device(device: Any, *, modules: Sequence[str] = ()) -> threading.Thread | None:
    """Start a CUDA device in a background thread -- its context (~0.3-0.5 s) and the imports of
    ``modules`` (e.g. the kernels' modules: Triton and the custom ops, ~0.3 s on the H200's host) -- so
    that this overlaps input discovery and planning instead of following them; the first batch (or
    :attr:`Job.warm_up`) then finds them done. Returns
    the thread (join it before the process exits: a CUDA context half made at exit can hang), or None
    on the CPU, where there is nothing to start.

    Example::

        started = batch.start_device(device, modules=["nbxsig.features"])
        ...  # discover, plan, run
        if started is not None:
            started.join()
    """
    import torch

    device = torch.device(device)
    if device.type != "cuda":
        return None

    def start() -> None:
        # Errors are the first batch's to report, where they fail files rather than the run.
        with contextlib.suppress(Exception):
            torch.empty(1, device=device)
            torch.cuda.synchronize(device)
            for name in modules:
                importlib.import_module(name)

    thread = threading.Thread(target=start, name="nbxsig-device-start", daemon=True)
    thread.start()
    return thread


# --------------------------------------------------------------------------------------------
# Running


@dataclass
class Job:
    """What a command does with each file.

    Attributes:
        load: ``path -> decoded`` (worker process; picklable). Raise :class:`nbxsig.io.InputFileError`
            for a bad file. A decoded object may carry ``sample_rate`` and ``samples`` attributes,
            which go to the manifest and the progress bar's audio rate, and ``warnings`` (strings: what
            was said about the file while it was decoded and processed, e.g. appended by ``process``),
            which go to its manifest row once its result is written or fails to be.
        process: ``list[decoded] -> list[result]`` (main process, on the device). Items in one call
            share a :attr:`group_key` and have similar :attr:`length`.
        save: ``(decoded, result, output_path) -> None``; must write through :mod:`nbxsig.io`'s
            atomic writers. When it can be pickled (a module-level function or a ``functools.partial``
            of one) the decode workers run it; otherwise writer threads of the main process do.
        group_key: items that may share a ``process`` call have equal keys (e.g. sample rate).
        length: the size that bucketing groups by (e.g. samples).
        warm_up: run ``process`` once, in a background thread, on copies of the first input while
            the workers decode the rest (results discarded): one-time device start-up -- the CUDA
            context, Triton compilation and autotuning, several seconds on a cold cache -- then
            overlaps decoding instead of stalling the first batch. For commands whose ``process``
            is pure (writes nothing) and runs compiled kernels.
        clock: where ``process`` adds up the device's busy time (see :class:`DeviceClock`), for
            the ``--verbose`` summary; None where it does not.
    """

    load: Callable[[Path], Any]
    process: Callable[[list[Any]], list[Any]]
    save: Callable[[Any, Any, Path], None]
    group_key: Callable[[Any], Hashable] = field(default=lambda item: None)
    length: Callable[[Any], int] = field(default=lambda item: 0)
    warm_up: bool = False
    clock: DeviceClock | None = None


@dataclass
class Summary:
    """Counts and where the time went."""

    ok: int = 0
    failed: int = 0
    skipped: int = 0
    seconds: float = 0.0
    audio_seconds: float = 0.0
    decode_seconds: float = 0.0  # summed over workers
    process_seconds: float = 0.0  # main process, inside Job.process (device work incl. transfers)
    save_seconds: float = 0.0  # summed over writer threads (main process)
    #: Writes done by the worker processes (results handed over through the arena), and their time
    #: summed over the workers.
    worker_saves: int = 0
    worker_save_seconds: float = 0.0
    wait_seconds: float = 0.0  # main process idle, waiting for decoded files
    #: One-time device start-up (Job.warm_up: CUDA context, kernel compilation/autotuning), run in a
    #: background thread while files decode; ``startup_wait_seconds`` of it stalled the main process.
    startup_seconds: float = 0.0
    startup_wait_seconds: float = 0.0
    batches: int = 0
    #: Decoded values that came from a worker through its pipe rather than the shared arena (too
    #: large for a slot, or no shared memory here): the slow path, counted to be seen.
    piped: int = 0
    #: Device busy time over the files' batches (warm-up excluded), from :attr:`Job.clock`.
    device_busy_seconds: float | None = None
    interrupted: bool = False
    #: The signal that interrupted the run (SIGINT or SIGTERM), for the exit code 128 + signal.
    signal: int | None = None
    #: Why the manifest asked for could not be written (None: written, or none asked for).
    manifest_error: str | None = None

    def line(self) -> str:
        """``"1998 ok, 2 failed, 0 skipped in 41.2 s"``."""
        text = f"{self.ok} ok, {self.failed} failed, {self.skipped} skipped in {self.seconds:.1f} s"
        return text + (" (interrupted)" if self.interrupted else "")

    def details(self) -> str:
        """Throughput and the time split, for ``--verbose``."""
        files = self.ok + self.failed
        rate = files / self.seconds if self.seconds > 0 else 0.0
        hours = self.audio_seconds / 3600 / self.seconds if self.seconds > 0 else 0.0
        text = (
            f"{rate:.1f} files/s, {hours:.4f} audio-hours/s; "
            f"decode {self.decode_seconds:.1f} s (all decoders), "
            f"device {self.process_seconds:.2f} s in {self.batches} batches, "
            f"write {self.save_seconds + self.worker_save_seconds:.1f} s "
            f"({self.save_seconds:.1f} s threads, {self.worker_save_seconds:.1f} s workers: "
            f"{self.worker_saves} files), waiting for decode {self.wait_seconds:.1f} s"
        )
        if self.piped:
            text += f"; {self.piped} decoded values through pipes (not shared memory)"
        if self.device_busy_seconds is not None and self.seconds > 0:
            text += (
                f"; device busy {self.device_busy_seconds:.3f} s "
                f"({100 * self.device_busy_seconds / self.seconds:.1f}% of the run)"
            )
        if self.startup_seconds:
            text += (
                f"; start-up {self.startup_seconds:.1f} s (device init, kernel compilation; "
                f"overlapped with decoding, stalled {self.startup_wait_seconds:.1f} s)"
            )
        return text


class _Reporter:
    """Manifest rows, failure messages, progress bar, counts."""

    def __init__(self, *, total: int, manifest: Path | None, quiet: bool, summary: Summary, stream: TextIO):
        from tqdm import tqdm

        self.summary = summary
        self.stream = stream
        self.start = time.perf_counter()
        self.manifest = manifest
        self.manifest_file: IO[bytes] | None = None
        # The manifest is written atomically too: rows go to a temporary beside it, renamed into
        # place by close() (also after Ctrl-C or SIGTERM), so a bad path never truncates a file and
        # the last run's manifest stays whole until this one's is complete.
        self.manifest_writer = contextlib.ExitStack()
        if manifest is not None:
            nio.remove_stale_temps(manifest)  # a killed run's rows: this run reports every task again
            try:
                self.manifest_file = self.manifest_writer.enter_context(nio.atomic_open(manifest))
            except OSError as exc:
                self._manifest_failed(exc)
        show = not quiet and hasattr(stream, "isatty") and stream.isatty()
        self.bar = tqdm(total=total, unit="file", file=stream, disable=not show, dynamic_ncols=True)

    def message(self, text: str) -> None:
        from tqdm import tqdm

        tqdm.write(text, file=self.stream)

    def row(
        self,
        task: Task,
        status: str,
        *,
        error: str | None = None,
        seconds: float = 0.0,
        value: Any = None,
        warnings: Sequence[str] = (),
    ):
        rate = getattr(value, "sample_rate", None)
        samples = getattr(value, "samples", None)
        setattr(self.summary, status, getattr(self.summary, status) + 1)
        if status == "ok" and rate and samples:
            self.summary.audio_seconds += samples / rate
        if status == "failed":
            self.message(f"nbxsig: failed: {error}")
        if self.manifest_file is not None:
            record = {
                "input": str(task.input),
                "output": str(task.output) if task.output is not None else None,
                "status": status,
                "error": error,
                "seconds": round(seconds, 6),
                "sample_rate": rate,
                "samples": samples,
                "warnings": list(warnings),
            }
            self.manifest_file.write((json.dumps(record) + "\n").encode("utf-8"))
            self.manifest_file.flush()
        self.bar.update(1)
        elapsed = time.perf_counter() - self.start
        if self.summary.audio_seconds and elapsed > 0:
            self.bar.set_postfix_str(f"{self.summary.audio_seconds / elapsed:.0f} audio-s/s", refresh=False)

    def close(self) -> None:
        self.bar.close()
        try:
            self.manifest_writer.close()
        except OSError as exc:
            self._manifest_failed(exc)

    def _manifest_failed(self, exc: OSError) -> None:
        # Kept in the summary, not only said: a run whose record of its files is missing must not
        # exit 0 (the CLI exits 1), or a script would go on to read a manifest that is not there.
        self.summary.manifest_error = f"cannot write the manifest {self.manifest}: {exc.strerror or exc}"
        self.message(f"nbxsig: {self.summary.manifest_error}")


def _warnings_of(value: Any) -> list[str]:
    """A processed file's ``warnings`` (see :attr:`Job.load`), for its manifest row. Only a file whose
    result was made has them: one that failed to decode or process is reported by its error alone."""
    return list(getattr(value, "warnings", ()))


#: torch's CPU allocator failing: "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator:
#: can't allocate memory: you tried to allocate N bytes. Error code 12 (Cannot allocate memory)".
_TORCH_CPU_OOM = re.compile(r"DefaultCPUAllocator: can't allocate memory: you tried to allocate (\d+) bytes")


def _error_text(path: Path, exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    oom = _TORCH_CPU_OOM.search(text)
    if oom:  # said in words, not as the C++ assertion (e.g. istft --length 10000000000)
        text = f"out of memory: the computation needs {int(oom[1]) / 2**30:.3g} GiB at once"
    if isinstance(exc, OSError) and exc.strerror:
        where = exc.filename if isinstance(exc.filename, (str, bytes)) else None
        # A writer's hidden temporary means nothing to the user: name the output it stands for.
        if where is None or nio.is_temp_name(os.path.basename(os.fsdecode(where))):
            where = path
        text = f"{exc.strerror}: {os.fsdecode(where)}"
    return text if str(path) in text else f"{path}: {text}"


def run(
    tasks: Sequence[Task],
    job: Job,
    *,
    batch_size: int = 32,
    jobs: int = 0,
    overwrite: bool = False,
    manifest: Path | None = None,
    quiet: bool = False,
    stream: TextIO | None = None,
) -> Summary:
    """Run ``job`` over ``tasks``; never raises for a bad file (it is counted as failed).

    Args:
        tasks: from :func:`plan`.
        job: the command's work.
        batch_size: at most this many files per ``process`` call.
        jobs: decode worker processes; 0 decodes in the main process.
        overwrite: replace existing outputs instead of skipping them (inputs are never replaced).
        manifest: where to write one JSON line per task (None: no manifest), atomically: rows go
            to a temporary beside it, renamed into place when the run ends.
        quiet: no progress bar (it is also hidden when ``stream`` is not a terminal).
        stream: where progress and failure messages go (default: sys.stderr).

    Returns:
        :class:`Summary`. ``summary.interrupted`` is set after Ctrl-C/SIGTERM; outputs already
        written stay, and no partial output is left.
    """
    summary = Summary()
    start = time.perf_counter()
    reporter = _Reporter(
        total=len(tasks), manifest=manifest, quiet=quiet, summary=summary, stream=stream or sys.stderr
    )
    todo: list[Task] = []
    for task in tasks:
        if task.error is not None:
            reporter.row(task, "failed", error=task.error)
        elif task.output is not None and task.output.is_dir():
            # Named by its input too (see plan): the output's name alone may not say which input it was.
            error = f"{task.input}: {task.output}: the output is an existing folder"
            reporter.row(task, "failed", error=error)
        elif task.output is not None and task.output.exists() and not overwrite:
            reporter.row(task, "skipped", error=None)
        elif task.output_found:
            reporter.row(
                task,
                "failed",
                error=f"{task.input}: refusing to overwrite {task.output}, found beside its audio in the "
                "input folder (it may not be an output of nbxsig): remove it to redo it, or name an output "
                "folder with -o",
            )
        else:
            todo.append(task)
    # Temporaries a killed run left behind, one folder listing each (not one per file).
    nio.remove_stale_temps_of(t.output for t in todo if t.output is not None)
    previous = _raise_on_sigterm()
    try:
        _Engine(todo, job, batch_size=max(1, batch_size), jobs=max(0, jobs), reporter=reporter).run()
        _check_sigterm()  # one whose exception a finalizer swallowed (see _raise_on_sigterm)
    except _Terminated:
        summary.interrupted, summary.signal = True, signal.SIGTERM
    except KeyboardInterrupt:
        summary.interrupted, summary.signal = True, signal.SIGINT
    finally:
        stop_spare_workers()  # those this run did not need
        _restore_sigterm(previous)
        reporter.close()
        summary.seconds = time.perf_counter() - start
    return summary


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread."""


#: Set by the SIGTERM handler: an exception raised while a finalizer runs (a ``__del__``: a SoundFile
#: closing) is printed and dropped by Python, so the engine's loops and the run's end check this too.
_SIGTERM_SEEN = threading.Event()


def _raise_on_sigterm() -> Any:
    # SIGTERM (the default of `kill`, `timeout`, job schedulers) becomes an exception so that the
    # atomic writers' cleanup runs and no temporary is left behind.
    def handler(signum: int, frame: Any) -> None:
        _SIGTERM_SEEN.set()
        raise _Terminated

    _SIGTERM_SEEN.clear()
    try:
        return signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        return None


def _check_sigterm() -> None:
    """Raise :class:`_Terminated` if SIGTERM arrived, even where its handler's exception was dropped."""
    if _SIGTERM_SEEN.is_set():
        raise _Terminated


def _restore_sigterm(previous: Any) -> None:
    if previous is not None:
        with contextlib.suppress(ValueError):
            signal.signal(signal.SIGTERM, previous)


@dataclass
class _Loaded:
    task: Task
    value: Any
    decode_seconds: float
    #: The arena slot holding the value's arrays (None: the value owns its memory), and the bytes of
    #: it they use.
    slot: int | None = None
    used: int = 0
    #: A second slot, holding the result while a worker writes it (None: none, or in ``slot``).
    extra: int | None = None
    #: Decode seconds plus its share of its batch, for the manifest.
    seconds: float = 0.0
    #: The result, while it is being written.
    result: Any = None


# --------------------------------------------------------------------------------------------
# Decode workers and the shared-memory arena
#
# A worker decodes a file and pickles the result with protocol 5, its arrays out of band: each
# array is copied once into the worker's arena slot, and the main process rebuilds the value around
# views of the slot -- no copy, no unpickling of the samples under the main process's GIL, only a
# ~100-byte message through the pipe. A value that does not fit its slot (or every value when no
# arena could be made) travels through the pipe instead, pickled whole: slower, same result.

#: Bytes per slot: 1 min of 16 kHz mono float32 (4 min of int16). Slots cost address space only
#: until touched, so they are sized for long files rather than for the typical one.
_SLOT_BYTES = 4 << 20
#: Slots smaller than this are not worth an arena (the pipe is used throughout).
_MIN_SLOT_BYTES = 64 << 10
#: The arena's address space: at most this, and at most a quarter of the free physical memory
#: (every slot may end up touched).
_MAX_ARENA_BYTES = 8 << 30
#: Slots at least, where a device warm-up runs: while the device starts (CUDA context, kernels: ~1 s)
#: the workers decode ahead into the arena instead of idling behind a full first batch.
_WARM_UP_SLOTS = 1024
#: Files queued per worker: the next ones are waiting when a decode ends, so a worker does not idle
#: for the main process's round trip.
_PER_WORKER = 4


def _map_arena(owner: int, fd: int, size: int) -> mmap.mmap:
    """Map the arena (a memfd) of process ``owner`` in another process, through /proc."""
    own = os.open(f"/proc/{owner}/fd/{fd}", os.O_RDWR)
    try:
        return mmap.mmap(own, size)
    finally:
        os.close(own)


class _Arena:
    """Shared memory cut into equal slots: an anonymous memory file (``memfd``), owned by the main
    process, mapped by the workers through /proc. It has no name anywhere: nothing to unlink, and
    nothing left behind however the processes end (the memory goes with the last mapping). Not in
    /dev/shm either, whose size containers often limit to 64 MB (a write past a full tmpfs would kill
    the worker with SIGBUS)."""

    def __init__(self, slots: int, slot_bytes: int) -> None:
        self.slot_bytes = slot_bytes
        self.size = slots * slot_bytes
        self.fd = os.memfd_create("nbxsig-arena", os.MFD_CLOEXEC)
        try:
            os.ftruncate(self.fd, self.size)
            # Never closed explicitly: values handed to the job are views of it; it is unmapped when
            # the last of them is gone.
            self.view = memoryview(mmap.mmap(self.fd, self.size))
        except OSError:
            os.close(self.fd)
            raise
        self.free = list(range(slots - 1, -1, -1))
        self.base = _address(self.view)

    @classmethod
    def make(cls, slots: int) -> _Arena | None:
        """An arena of ``slots`` slots, or None where anonymous shared memory is unavailable."""
        if not hasattr(os, "memfd_create") or not os.path.isdir(f"/proc/{os.getpid()}/fd"):
            return None
        try:
            free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError):
            free = _MAX_ARENA_BYTES
        room = min(_MAX_ARENA_BYTES, free // 4)
        slot_bytes = min(_SLOT_BYTES, room // max(1, slots)) // mmap.PAGESIZE * mmap.PAGESIZE
        if slot_bytes < _MIN_SLOT_BYTES:
            return None
        try:
            return cls(slots, slot_bytes)
        except OSError:
            return None

    @property
    def spec(self) -> tuple[int, int, int]:
        """What a worker needs to map it: (owner pid, fd, size)."""
        return os.getpid(), self.fd, self.size

    def take(self) -> int | None:
        return self.free.pop() if self.free else None

    def give(self, slot: int) -> None:
        self.free.append(slot)

    def unpack(self, head: bytes, spans: list[tuple[int, int]]) -> Any:
        return pickle.loads(head, buffers=[self.view[o : o + n] for o, n in spans])

    def pack_save(self, value: Any, result: Any, offset: int, capacity: int) -> tuple[bytes, list] | None:
        """``(value, result)`` pickled for a worker's write: arrays already in the arena (the decoded
        input) are referred to where they are; the others are copied once into
        ``view[offset : offset + capacity]`` (a result that is a strided view of its batch is made
        C-contiguous on the way: the bytes every writer produces from it are the same). Returns the
        pickle and the arrays' spans, or None when they do not fit (the caller writes in a thread)."""
        pos, end = offset, offset + capacity
        if (
            isinstance(result, np.ndarray)
            and not (result.flags.c_contiguous or result.flags.f_contiguous)
            and not result.dtype.hasobject
        ):
            if result.nbytes > capacity:
                return None
            dense = np.ndarray(result.shape, result.dtype, buffer=self.view, offset=pos)
            np.copyto(dense, result)
            result, pos = dense, pos + _aligned(result.nbytes)
        buffers: list[pickle.PickleBuffer] = []
        head = pickle.dumps((value, result), protocol=5, buffer_callback=buffers.append)
        spans = []
        for buffer in buffers:
            try:
                raw = buffer.raw()
            except BufferError:
                return None
            at = _address(raw) - self.base
            if raw.nbytes and at >= 0 and at + raw.nbytes <= self.size:
                spans.append((at, raw.nbytes))  # already shared: no copy
                continue
            if pos + raw.nbytes > end:
                return None
            self.view[pos : pos + raw.nbytes] = raw
            spans.append((pos, raw.nbytes))
            pos += _aligned(raw.nbytes)
        return head, spans

    def close(self) -> None:
        """Close the descriptor (the mappings stay valid while they are used)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _address(buffer: Any) -> int:
    """The memory address of a buffer's first byte."""
    return int(np.frombuffer(buffer, np.uint8).__array_interface__["data"][0])


def _aligned(nbytes: int) -> int:
    return -(-nbytes // 64) * 64  # for vector loads


def _pack(value: Any, view: memoryview | None, offset: int, capacity: int) -> tuple[bytes, list | None]:
    """``value`` pickled with its arrays copied into ``view[offset : offset + capacity]`` (returns the
    pickle and the arrays' spans), or pickled whole (spans None) when they do not fit."""
    if view is not None and capacity:
        buffers: list[pickle.PickleBuffer] = []
        head = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
        spans, pos, end = [], offset, offset + capacity
        for buffer in buffers:
            try:
                raw = buffer.raw()
            except BufferError:  # a non-contiguous buffer: not a NumPy array's
                break
            if pos + raw.nbytes > end:
                break
            view[pos : pos + raw.nbytes] = raw
            spans.append((pos, raw.nbytes))
            pos += _aligned(raw.nbytes)
        else:
            return head, spans
    return pickle.dumps(value, protocol=5), None


class _WorkerStop(KeyboardInterrupt):
    """SIGTERM in a worker: unwinds a write in progress so that its temporary is removed."""


def _stop_worker(signum: int, frame: Any) -> None:
    raise _WorkerStop


def _decode_worker(
    conn: Connection,
    arena: tuple[int, int, int] | None,
    load: Callable[[Path], Any] | None,
    save: Callable[[Any, Any, Path], None] | None = None,
) -> None:
    """A decode (and write) process. Messages, answered in order, until the pipe closes or ``None``
    arrives: ``("load", path, offset, capacity)`` → ``(ok, pickle | error, spans, seconds)``, the
    decoded value; ``("save", pickle, spans, output)`` → ``(ok, None | error, None, seconds)``, the
    main process's ``(decoded, result)`` written with ``save``. Its first message, ``("ready",
    mapped)``, says it started and whether it maps the arena. A spare (``load`` None, see
    :func:`prestart_workers`) first waits for ``("setup", arena, load, save)``."""
    # Ctrl-C reaches the whole process group: the main process handles it and stops the workers;
    # a worker ignores it instead of printing a traceback. SIGTERM (the main process stopping a
    # worker that does not finish) unwinds the atomic writer, which deletes its temporary.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _stop_worker)
    with contextlib.suppress(_WorkerStop):
        if load is None:
            try:
                setup = conn.recv()
            except (EOFError, OSError):
                return
            if setup is None:
                return
            _, arena, load, save = setup
        assert load is not None
        _serve(conn, arena, load, save)


def _serve(
    conn: Connection,
    arena: tuple[int, int, int] | None,
    load: Callable[[Path], Any],
    save: Callable[[Any, Any, Path], None] | None,
) -> None:
    view = None
    if arena is not None:
        with contextlib.suppress(OSError):  # then every value goes through the pipe
            view = memoryview(_map_arena(*arena))
    conn.send(("ready", view is not None))  # whether results can reach it through the arena
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        start = time.perf_counter()
        if message[0] == "save":
            _, head, spans, output = message
            try:
                assert save is not None and view is not None
                value, result = pickle.loads(head, buffers=[view[o : o + n] for o, n in spans])
                save(value, result, output)
                del value, result  # no view of the arena outlives the write
                reply = (True, None, None, time.perf_counter() - start)
            except Exception as exc:
                reply = (False, _error_text(output, exc), None, time.perf_counter() - start)
        else:
            _, path, offset, capacity = message
            try:
                head, spans = _pack(load(path), view, offset, capacity)
                reply = (True, head, spans, time.perf_counter() - start)
            except Exception as exc:
                reply = (False, _error_text(path, exc), None, time.perf_counter() - start)
        try:
            conn.send(reply)
        except OSError:  # the main process is gone
            return


#: A decoded file: (task, value, arena slot, bytes of the slot it uses, decode seconds, error or None).
_Answer = tuple[Task, Any, "int | None", int, float, "str | None"]
#: A write a worker ended: (the file, seconds, error or None; ``redo``: its worker died before
#: starting it, so the main process writes it itself).
_Written = tuple["_Loaded", float, "str | None", bool]


@dataclass
class _Worker:
    process: Any
    conn: Connection
    #: What it was sent, in order: ("load", task, slot) or ("save", loaded, None).
    queued: deque[tuple[str, Any, int | None]] = field(default_factory=deque)
    loads: int = 0  # the "load" entries of ``queued``
    ready: bool = False
    mapped: bool = False  # it maps the arena (so it can write results handed over there)


class DecodeWorkerError(NbxsigError, RuntimeError):
    """A decode worker process died before it could start (a broken installation, not a bad file)."""


class _DecodePool:
    """``jobs`` spawned decode processes (spawn, not fork: the main process may hold a CUDA context,
    which a forked child cannot use), each fed through its own pipe. Started on first use.

    Once a file's result is ready the workers also write it (:meth:`save`), when the job's ``save``
    can be pickled and an arena exists: the result goes into the arena, a worker runs ``save`` on it,
    and the main process keeps only a message per file -- no encoding, copying or fsync under its
    GIL, which the device start-up and the batches need."""

    def __init__(
        self, load: Callable[[Path], Any], jobs: int, arena: _Arena | None, save: Callable | None = None
    ) -> None:
        self.load = load
        self.arena = arena
        self.save_fn = save if arena is not None and save is not None and _picklable(save) else None
        self.context = multiprocessing.get_context("spawn")
        self.workers: list[_Worker | None] = [None] * jobs
        self.decoded: deque[_Answer] = deque()
        self.written: deque[_Written] = deque()

    def _start(self) -> _Worker:
        while _spares:  # one started earlier, already past its imports
            process, parent = _spares.pop()
            spec = self.arena.spec if self.arena is not None else None
            try:
                parent.send(("setup", spec, self.load, self.save_fn))
            except OSError:
                process.join(1.0)
                parent.close()
                continue
            return _Worker(process, parent)
        parent, child = self.context.Pipe(duplex=True)
        spec = self.arena.spec if self.arena is not None else None
        process = self.context.Process(
            target=_decode_worker,
            args=(child, spec, self.load, self.save_fn),
            name="nbxsig-decode",
            daemon=True,
        )
        process.start()
        child.close()
        return _Worker(process, parent)

    def start_all(self) -> None:
        """Start every worker now rather than on first use."""
        for i, worker in enumerate(self.workers):
            if worker is None:
                self.workers[i] = self._start()

    @property
    def queued(self) -> int:
        """Files sent to be decoded and not answered yet."""
        return sum(w.loads for w in self.workers if w is not None)

    @property
    def saving(self) -> int:
        """Writes sent and not answered yet."""
        return sum(len(w.queued) - w.loads for w in self.workers if w is not None)

    def feed(self, todo: deque[Task]) -> None:
        """Queue files from ``todo`` until every worker has ``_PER_WORKER``, ``todo`` is empty or the
        arena has no free slot."""
        for i, worker in enumerate(self.workers):
            while todo and (worker is None or worker.loads < _PER_WORKER):
                if self.arena is not None and not self.arena.free:
                    return  # every slot holds a file not yet written: wait for writes
                if worker is None:
                    worker = self.workers[i] = self._start()
                task = todo.popleft()
                slot = self.arena.take() if self.arena is not None else None
                offset, capacity = (0, 0) if slot is None else self._span(slot)
                try:
                    worker.conn.send(("load", task.input, offset, capacity))
                except OSError:  # it died (killed from outside): retry the file, the rest as if died
                    self._give(slot)
                    todo.appendleft(task)
                    self._died(worker, todo, sent_last=False)
                    worker = None
                    continue
                worker.queued.append(("load", task, slot))
                worker.loads += 1

    def save(self, loaded: _Loaded, result: Any) -> bool:
        """Hand ``result`` to the least busy live worker to write; False when it cannot go that way
        (no arena, ``save`` not picklable, no room, no worker): the caller writes it."""
        if self.save_fn is None or self.arena is None:
            return False
        live = [w for w in self.workers if w is not None and w.mapped]
        if not live:
            return False
        arena = self.arena
        packed = None
        if loaded.slot is not None:  # the rest of the input's own slot
            start = loaded.slot * arena.slot_bytes + _aligned(loaded.used)
            end = (loaded.slot + 1) * arena.slot_bytes
            packed = arena.pack_save(loaded.value, result, start, end - start)
        if packed is None and arena.free:  # a slot of its own
            loaded.extra = arena.take()
            assert loaded.extra is not None
            packed = arena.pack_save(loaded.value, result, *self._span(loaded.extra))
        if packed is None:
            if loaded.extra is not None:
                arena.give(loaded.extra)
                loaded.extra = None
            return False
        worker = min(live, key=lambda w: len(w.queued))
        try:
            worker.conn.send(("save", packed[0], packed[1], loaded.task.output))
        except OSError:  # it died: found at the next poll; this result is written in a thread
            return False
        worker.queued.append(("save", loaded, None))
        return True

    def poll(self, todo: deque[Task], timeout: float | None) -> None:
        """Wait up to ``timeout`` (None: until some worker answers) and file every answer there into
        :attr:`decoded` and :attr:`written`. A worker that died fails the file it was on (decoding
        or writing) and gives its other files back (to ``todo``, or to the main process to write)."""
        by_conn = {w.conn: w for w in self.workers if w is not None and w.queued}
        if not by_conn:
            return
        for conn in mp_connection.wait(list(by_conn), timeout):
            worker = by_conn[conn]  # type: ignore[index]
            try:
                while worker.queued and conn.poll():  # every answer already there, not one per wait
                    reply = conn.recv()
                    if reply[0] == "ready":
                        worker.ready, worker.mapped = True, reply[1]
                        continue
                    kind, item, slot = worker.queued.popleft()
                    ok, payload, spans, seconds = reply
                    if kind == "save":
                        self.written.append((item, seconds, payload, False))
                        continue
                    worker.loads -= 1
                    if not ok:
                        self._give(slot)
                        self.decoded.append((item, None, None, 0, seconds, payload))
                    elif spans is None:
                        self._give(slot)
                        self.decoded.append((item, pickle.loads(payload), None, 0, seconds, None))
                    else:
                        assert self.arena is not None
                        used = max((o + n for o, n in spans), default=0) - self._span(slot)[0]
                        value = self.arena.unpack(payload, spans)
                        self.decoded.append((item, value, slot, used, seconds, None))
            except (EOFError, OSError):
                self._died(worker, todo)

    def _died(self, worker: _Worker, todo: deque[Task], *, sent_last: bool = True) -> None:
        self.workers[self.workers.index(worker)] = None
        worker.conn.close()
        worker.process.join(5)
        if not worker.ready and not worker.queued and not sent_last:
            return  # killed before it answered anything: nothing was lost
        if not worker.ready:
            raise DecodeWorkerError(
                f"a decode worker process exited at start-up (exit code {worker.process.exitcode}); "
                "run with -j 0 to decode in the main process and see the error"
            )
        # A worker handles its messages in order: the first still queued is the one it died on;
        # the others were never started: files to decode go back to the front of the queue, results
        # to write go back to the main process.
        if worker.queued:
            kind, item, slot = worker.queued.popleft()
            if kind == "save":
                nio.remove_stale_temps(item.task.output)  # what the dead writer left
                self.written.append((item, 0.0, f"{item.task.output}: the writer process crashed", False))
            else:
                self._give(slot)
                error = f"{item.input}: the decoder process crashed on this file"
                self.decoded.append((item, None, None, 0, 0.0, error))
        for kind, item, slot in reversed(worker.queued):
            if kind == "save":
                self.written.append((item, 0.0, None, True))
            else:
                self._give(slot)
                todo.appendleft(item)
        worker.queued.clear()

    def _span(self, slot: int) -> tuple[int, int]:
        assert self.arena is not None
        return slot * self.arena.slot_bytes, self.arena.slot_bytes

    def _give(self, slot: int | None) -> None:
        if slot is not None and self.arena is not None:
            self.arena.give(slot)

    def close(self) -> list[_Loaded]:
        """Stop the workers: ask (each ends what it was sent first, whose answers are filed), wait a
        little, then terminate the ones still busy. Returns the files whose write was not answered
        (their temporaries are removed)."""
        live = [w for w in self.workers if w is not None]
        for w in live:
            with contextlib.suppress(OSError):
                w.conn.send(None)
        deadline = time.monotonic() + 2.0
        while any(w.queued for w in live if not w.conn.closed) and time.monotonic() < deadline:
            with contextlib.suppress(DecodeWorkerError):
                self.poll(deque(), max(0.0, deadline - time.monotonic()))
        lost: list[_Loaded] = []
        for w in live:
            w.process.join(max(0.0, deadline - time.monotonic()))
            if w.process.is_alive():
                w.process.terminate()
                w.process.join(1.0)
            if not w.conn.closed:
                w.conn.close()
            lost.extend(item for kind, item, _ in w.queued if kind == "save")
        nio.remove_stale_temps_of(it.task.output for it in lost if it.task.output is not None)
        self.workers = [None] * len(self.workers)
        return lost


#: Workers started ahead of a run (:func:`prestart_workers`), waiting for their setup.
_spares: list[tuple[Any, Connection]] = []
_spares_cleanup: list[bool] = []  # whether the exit handler is registered


def prestart_workers(count: int) -> None:
    """Start ``count`` decode workers now, ahead of the run that will use them: a worker takes
    ~0.3-0.5 s to start (a fresh interpreter importing numpy and the command's module), which then
    overlaps what the main process does first (``import torch``: ~2 s; the device start; finding the
    inputs) instead of following it. :func:`run` uses them as its workers and stops those it does
    not need; whatever is left at exit is stopped then."""
    if count <= 0:
        return
    if not _spares_cleanup:
        atexit.register(stop_spare_workers)
        _spares_cleanup.append(True)
    context = multiprocessing.get_context("spawn")
    for _ in range(count - len(_spares)):
        parent, child = context.Pipe(duplex=True)
        process = context.Process(
            target=_decode_worker, args=(child, None, None, None), name="nbxsig-decode", daemon=True
        )
        process.start()
        child.close()
        _spares.append((process, parent))


def stop_spare_workers() -> None:
    """Stop the workers :func:`prestart_workers` started that no run took."""
    while _spares:
        process, conn = _spares.pop()
        with contextlib.suppress(OSError):
            conn.send(None)
        process.join(1.0)
        if process.is_alive():
            process.terminate()
            process.join(1.0)
        conn.close()


def _picklable(obj: Any) -> bool:
    try:
        pickle.dumps(obj)
    except Exception:
        return False
    return True


class _Engine:
    """Decode in workers → bucket by (group key, length) → process in batches → save in threads."""

    def __init__(self, todo: list[Task], job: Job, *, batch_size: int, jobs: int, reporter: _Reporter):
        self.todo = deque(todo)
        self.job = job
        self.batch_size = batch_size
        # A worker costs a process start (~0.3 s); give each at least ~4 files, none for one file.
        self.jobs = min(jobs, (len(todo) + 3) // 4) if len(todo) > 1 else 0
        self.reporter = reporter
        self.summary = reporter.summary
        self.buckets: dict[Hashable, list[_Loaded]] = {}
        self.bucket_lengths: dict[Hashable, int] = {}
        self.buffered = 0
        self.max_buffered = 2 * batch_size + self.jobs
        # Results waiting for a writer: beyond this the main process waits for writes (memory bound).
        self.max_pending_saves = max(4 * batch_size, 64)
        self.warm_thread: threading.Thread | None = None
        # Finished saves, queued by the writer threads' callbacks, reported by the main thread.
        self.saves_done: queue.SimpleQueue[tuple[Future, _Loaded]] = queue.SimpleQueue()
        self.saves_pending = 0
        self.arena: _Arena | None = None
        self.pool: _DecodePool | None = None
        self.clock_after_warm_up = 0.0
        self.saver: ThreadPoolExecutor | None = None
        self.closed = False  # the workers are stopped: a write they gave back is not redone

    def run(self) -> None:
        # Writes (encode + fsync) overlap each other and the device work. fsync waits on the disk,
        # not the CPU, so more threads than cores help: their syncs share journal commits.
        saver = ThreadPoolExecutor(max_workers=_SAVE_THREADS, thread_name_prefix="nbxsig-save")
        self.saver = saver
        try:
            if self.jobs > 0:
                self._start_pool()
            if self.job.warm_up and self.todo:
                self._start_warm_up(self.todo[0])
            if self.jobs == 0:
                while self.todo:
                    _check_sigterm()
                    task = self.todo.popleft()
                    start = time.perf_counter()
                    try:
                        value = self.job.load(task.input)
                    except Exception as exc:
                        self.reporter.row(task, "failed", error=_error_text(task.input, exc))
                        continue
                    self._add(_Loaded(task, value, time.perf_counter() - start), saver)
                    self._drain_saves(block=False)
            else:
                self._pump(saver)
            while self.buckets:
                self._flush(next(iter(self.buckets)), saver)
            self._join_warm_up()  # not left compiling at exit when every input failed
            self._drain_saves(block=True)
        finally:
            if self.pool is not None:
                self.pool.close()
                self.closed = True
            saver.shutdown(wait=True, cancel_futures=True)
            # Saves that ran before an interruption still count.
            self._drain_saves(block=False)
            self.buckets.clear()
            if self.arena is not None:
                self.arena.close()
            if self.job.clock is not None:
                self.summary.device_busy_seconds = self.job.clock.seconds - self.clock_after_warm_up

    def _start_warm_up(self, first: Task) -> None:
        batch = self.batch_size

        def warm_up() -> None:
            t0 = time.perf_counter()
            # Errors are the real batch's to report (this file fails there, or another works).
            with contextlib.suppress(Exception):
                value = self.job.load(first.input)
                length = max(1, int(self.job.length(value)))
                copies = max(1, min(batch, _MAX_BATCH_LENGTH // length))
                self.job.process([value] * copies)
            self.summary.startup_seconds = time.perf_counter() - t0

        # A daemon: an interrupted run must not wait for a compilation to finish.
        self.warm_thread = threading.Thread(target=warm_up, name="nbxsig-warm-up", daemon=True)
        self.warm_thread.start()

    def _join_warm_up(self) -> None:
        # process() is not re-entrant (Triton's autotuner keeps per-call state): the first batch
        # waits for the warm-up, which has by then compiled what the batch needs.
        if self.warm_thread is not None:
            t0 = time.perf_counter()
            while self.warm_thread.is_alive():
                self.warm_thread.join(0.1)  # short joins: Ctrl-C/SIGTERM stay responsive
            self.summary.startup_wait_seconds = time.perf_counter() - t0
            self.warm_thread = None
            if self.job.clock is not None:  # the device time of the files, not of the warm-up
                self.clock_after_warm_up = self.job.clock.seconds

    def _start_pool(self) -> None:
        """The arena and every worker process, started before the device warm-up: their start
        (spawn, imports) then runs while the main process is still idle, not against the warm-up
        for its GIL."""
        # Every decoded value holds its slot until its result is written: room for the most that
        # can be held at once (queued + buffered + one batch + pending writes), and during a device
        # warm-up for decoding ahead.
        slots = self.jobs * _PER_WORKER + self.max_buffered + 2 * self.batch_size + self.max_pending_saves
        if self.job.warm_up:
            slots = max(slots, _WARM_UP_SLOTS)
        self.arena = _Arena.make(slots)
        self.pool = _DecodePool(self.job.load, self.jobs, self.arena, self.job.save)
        self.pool.start_all()

    def _pump(self, saver: ThreadPoolExecutor) -> None:
        pool = self.pool
        assert pool is not None
        while self.todo or pool.queued or pool.decoded:
            _check_sigterm()
            pool.feed(self.todo)
            if not pool.queued and not pool.decoded:
                # Every slot holds a file waiting for its batch or its write: run a batch, then
                # wait for a write to end.
                if self.buckets:
                    self._join_warm_up()
                    self._flush(max(self.buckets, key=lambda k: len(self.buckets[k])), saver)
                self._drain_saves(block=True, keep=max(0, self.saves_pending - 1))
                continue
            if not pool.decoded:
                t0 = time.perf_counter()
                pool.poll(self.todo, None)
                self.summary.wait_seconds += time.perf_counter() - t0
            # Popped one at a time: a batch run from _add may file more answers meanwhile.
            while pool.decoded:
                task, value, slot, used, seconds, error = pool.decoded.popleft()
                if error is not None:
                    self.reporter.row(task, "failed", error=error, seconds=seconds)
                else:
                    self.summary.piped += slot is None
                    self._add(_Loaded(task, value, seconds, slot, used), saver)
            self._drain_saves(block=False)

    def _warming_up(self) -> bool:
        """Whether the device warm-up still runs and the arena has room to decode ahead meanwhile."""
        return (
            self.warm_thread is not None
            and self.warm_thread.is_alive()
            and self.arena is not None
            and len(self.arena.free) > self.jobs * _PER_WORKER
        )

    def _add(self, loaded: _Loaded, saver: ThreadPoolExecutor) -> None:
        length = max(1, int(self.job.length(loaded.value)))
        key = (self.job.group_key(loaded.value), int(math.log2(length) * _BUCKETS_PER_OCTAVE))
        self.summary.decode_seconds += loaded.decode_seconds
        self.buckets.setdefault(key, []).append(loaded)
        self.bucket_lengths[key] = self.bucket_lengths.get(key, 0) + length
        self.buffered += 1
        if self._warming_up():
            return  # batches would wait for the device; decoding goes on
        for k in list(self.buckets) if self.warm_thread is not None else [key]:
            # After a warm-up, the batches that filled up meanwhile.
            while k in self.buckets and (
                len(self.buckets[k]) >= self.batch_size or self.bucket_lengths[k] >= _MAX_BATCH_LENGTH
            ):
                self._flush(k, saver)
        while self.buffered > self.max_buffered:
            self._flush(max(self.buckets, key=lambda k: len(self.buckets[k])), saver)

    def _flush(self, key: Hashable, saver: ThreadPoolExecutor) -> None:
        """Process one batch from bucket ``key``: its first files, up to the batch size and length."""
        bucket = self.buckets.get(key, [])
        count, total = 0, 0
        while count < min(len(bucket), self.batch_size) and (count == 0 or total < _MAX_BATCH_LENGTH):
            total += max(1, int(self.job.length(bucket[count].value)))
            count += 1
        items, rest = bucket[:count], bucket[count:]
        if rest:
            self.buckets[key], self.bucket_lengths[key] = rest, self.bucket_lengths[key] - total
        else:
            self.buckets.pop(key, None)
            self.bucket_lengths.pop(key, None)
        self.buffered -= len(items)
        if not items:
            return
        self._join_warm_up()
        if self.saves_pending > self.max_pending_saves:
            self._drain_saves(block=True, keep=self.max_pending_saves // 2)
        t0 = time.perf_counter()
        try:
            results = self.job.process([it.value for it in items])
            if len(results) != len(items):
                raise RuntimeError(f"process returned {len(results)} results for {len(items)} inputs")
            outcomes: list[tuple[_Loaded, Any, BaseException | None]] = [
                (it, r, None) for it, r in zip(items, results, strict=True)
            ]
        except Exception:
            if len(items) == 1:
                outcomes = [(items[0], None, sys.exc_info()[1])]
            else:
                # One bad file must not sink its batch: redo the batch file by file.
                outcomes = []
                for it in items:
                    try:
                        outcomes.append((it, self.job.process([it.value])[0], None))
                    except Exception as exc:
                        outcomes.append((it, None, exc))
        elapsed = time.perf_counter() - t0
        self.summary.process_seconds += elapsed
        self.summary.batches += 1
        share = elapsed / len(items)
        for it, result, exc in outcomes:
            if exc is not None:
                error = _error_text(it.task.input, exc)
                self.reporter.row(it.task, "failed", error=error, seconds=it.decode_seconds + share)
                self._release(it)
                continue
            it.seconds, it.result = it.decode_seconds + share, result
            self.saves_pending += 1
            # A worker writes it where it can (off the main process's GIL), else a writer thread.
            if self.pool is None or not self.pool.save(it, result):
                self._save_in_thread(it, result, saver)

    def _save_in_thread(self, it: _Loaded, result: Any, saver: ThreadPoolExecutor) -> None:
        fut = saver.submit(self._save, it, result)
        fut.add_done_callback(lambda f, it=it: self.saves_done.put((f, it)))

    def _save(self, loaded: _Loaded, result: Any) -> float:
        t0 = time.perf_counter()
        assert loaded.task.output is not None
        self.job.save(loaded.value, result, loaded.task.output)
        return time.perf_counter() - t0

    def _release(self, loaded: _Loaded) -> None:
        """The value is done with: its arena slots may take the next files."""
        loaded.value = loaded.result = None
        if self.arena is not None:
            for slot in (loaded.slot, loaded.extra):
                if slot is not None:
                    self.arena.give(slot)
        loaded.slot = loaded.extra = None

    def _drain_saves(self, *, block: bool, keep: int = 0) -> None:
        """Report finished saves (threads' and workers'); with ``block``, wait until at most ``keep``
        are pending."""
        while True:
            done = self._drain_once()
            if not block or self.saves_pending <= keep:
                return
            if done:
                continue
            # Wait a little (Ctrl-C stays responsive) for a worker's or a thread's answer.
            if self.pool is not None and self.pool.saving:
                self.pool.poll(self.todo, 0.1)
            else:
                with contextlib.suppress(queue.Empty):
                    self.saves_done.put(self.saves_done.get(timeout=0.1))

    def _drain_once(self) -> int:
        """Report the saves that have ended; returns how many."""
        count = 0
        while True:
            try:
                fut, it = self.saves_done.get_nowait()
            except queue.Empty:
                break
            count += 1
            self.saves_pending -= 1
            if not fut.cancelled():
                try:
                    save_seconds = fut.result()
                except Exception as exc:
                    self._report_written(it, error=_error_text(it.task.output or it.task.input, exc))
                else:
                    self.summary.save_seconds += save_seconds
                    self._report_written(it, save_seconds=save_seconds)
            self._release(it)
        while self.pool is not None and self.pool.written:
            it, save_seconds, error, redo = self.pool.written.popleft()
            count += 1
            if redo and not self.closed:  # its worker died first: the main process writes it
                assert self.saver is not None
                self._save_in_thread(it, it.result, self.saver)
                continue
            self.saves_pending -= 1
            if redo:
                pass  # stopped before it was written: not reported, like a cancelled thread write
            elif error is not None:
                self._report_written(it, error=error)
            else:
                self.summary.worker_saves += 1
                self.summary.worker_save_seconds += save_seconds
                self._report_written(it, save_seconds=save_seconds)
            self._release(it)
        return count

    def _report_written(self, it: _Loaded, *, error: str | None = None, save_seconds: float = 0.0) -> None:
        """The manifest row of a file whose write ended (in a thread or a worker): ``ok``, or
        ``failed`` with ``error``; its warnings either way."""
        warnings = _warnings_of(it.value)
        if error is not None:
            self.reporter.row(it.task, "failed", error=error, warnings=warnings)
        else:
            seconds = it.seconds + save_seconds
            self.reporter.row(it.task, "ok", seconds=seconds, value=it.value, warnings=warnings)


# --------------------------------------------------------------------------------------------
# Helpers for commands' process functions


def pad_stack(arrays: Sequence[Any], *, value: float = 0.0) -> tuple[Any, list[int]]:
    """Stack ``(C_i, L_i)`` float tensors into ``(sum C_i, max L_i)``, zero-padded on the right;
    returns the stack and each item's row count."""
    import torch

    longest = max(a.shape[-1] for a in arrays)
    rows = [a.shape[0] for a in arrays]
    out = torch.full((sum(rows), longest), value, dtype=arrays[0].dtype, device=arrays[0].device)
    r = 0
    for a in arrays:
        out[r : r + a.shape[0], : a.shape[-1]] = a
        r += a.shape[0]
    return out, rows


_NUMPY_PAD = {"reflect": "reflect", "constant": "constant", "replicate": "edge", "circular": "wrap"}


def stack_padded(
    arrays: Sequence[np.ndarray],
    *,
    pad: int = 0,
    mode: str = "reflect",
    width: int = 0,
    out: np.ndarray | None = None,
) -> tuple[np.ndarray, list[int]]:
    """On the CPU, pad each ``(C_i, L_i)`` array by ``pad`` samples on both sides with ``mode`` (torch's
    names: reflect, constant, replicate, circular), then stack them zero-padded on the right into
    ``(sum C_i, max(max padded length, width))`` (one host-to-device copy for the batch); returns it
    and the row counts. The dtype is kept (int16 PCM stays int16) where all arrays share it; mixed
    int16 and float arrays all become float32 (int16 ÷ 32768).

    ``out``, when given, receives the stack (e.g. a pinned buffer's NumPy view, for an asynchronous
    copy to the device); it must have that shape and dtype (see :func:`stacked_shape`)."""
    if len({a.dtype for a in arrays}) > 1:
        arrays = [
            a.astype(np.float32) * np.float32(1 / 32768) if a.dtype == np.int16 else a.astype(np.float32)
            for a in arrays
        ]
    if pad and mode == "reflect":
        for a in arrays:
            if a.shape[-1] <= pad:
                raise nio.InputFileError(f"{a.shape[-1]} samples are too few for reflect padding by {pad}")
    shape, dtype = stacked_shape(arrays, pad=pad, width=width)
    if out is None:
        out = np.empty(shape, dtype=dtype)
    elif out.shape != shape or out.dtype != dtype:
        raise ValueError(f"out has shape {out.shape} {out.dtype}, the stack needs {shape} {dtype}")
    rows = [a.shape[0] for a in arrays]
    r = 0
    for a in arrays:
        c, n = a.shape
        block = out[r : r + c]
        if pad and mode == "reflect":
            # Written in place rather than through np.pad: one copy of the batch instead of two.
            block[:, pad : pad + n] = a
            block[:, :pad] = a[:, pad:0:-1]
            block[:, pad + n : n + 2 * pad] = (
                a[:, n - 2 : n - 2 - pad : -1] if n - 2 - pad >= 0 else a[:, n - 2 :: -1]
            )
        elif pad:
            block[:, : n + 2 * pad] = np.pad(a, ((0, 0), (pad, pad)), mode=_NUMPY_PAD[mode])
        else:
            block[:, :n] = a
        block[:, n + 2 * pad :] = 0
        r += c
    return out, rows


def stacked_shape(
    arrays: Sequence[np.ndarray], *, pad: int = 0, width: int = 0
) -> tuple[tuple[int, int], Any]:
    """The shape and dtype :func:`stack_padded` produces for these arguments."""
    dtypes = {a.dtype for a in arrays}
    dtype = arrays[0].dtype if len(dtypes) == 1 else np.dtype(np.float32)
    longest = max(a.shape[-1] for a in arrays) + 2 * pad
    return (sum(a.shape[0] for a in arrays), max(longest, width)), dtype


def to_device_float(stack: Any, device: Any) -> Any:
    """One copy to ``device`` (asynchronous from a pinned tensor); int16 PCM becomes float32 there
    (÷32768, exact)."""
    import torch

    x = stack if isinstance(stack, torch.Tensor) else torch.from_numpy(stack)
    # non_blocking only from pinned memory (asking is_pinned() of a CPU-only run would start CUDA).
    x = x.to(device, non_blocking=torch.device(device).type == "cuda" and x.is_pinned())
    return x.float() * (1.0 / 32768.0) if x.dtype == torch.int16 else x


@functools.cache
def _cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def default_jobs() -> int:
    """Decode workers by default: the CPUs available, at most 8. More did not help on the 16-CPU GPU
    machine (2000 × 10 s WAV through ``nbxsig mel``: 3.0 s with 8, 3.2 s with 16): past a few
    workers the main process -- device start-up, batches, writes, one GIL -- is the limit."""
    return min(8, _cpu_count())


class DeviceClock:
    """Adds up the device time of each batch's device work, for the ``--verbose`` summary's
    "device busy": on CUDA the interval between two events recorded around the work (from the first
    copy to the device to the last copy back; an upper bound on kernel time, since gaps in which the
    device waits for the host inside the interval count too); on the CPU the host's wall time.

    Example::

        clock = DeviceClock()
        with clock.measure(x.device):
            y = work(x).cpu()
        clock.seconds
    """

    def __init__(self) -> None:
        self.seconds = 0.0

    @contextlib.contextmanager
    def measure(self, device: Any) -> Iterator[None]:
        import torch

        device = torch.device(device)
        if device.type != "cuda":
            start = time.perf_counter()
            yield
            self.seconds += time.perf_counter() - start
            return
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record(torch.cuda.current_stream(device))
        yield
        end.record(torch.cuda.current_stream(device))
        end.synchronize()
        self.seconds += begin.elapsed_time(end) / 1000.0
